/* moe.h - mixture-of-experts feed-forward: a softmax router picks k of
 * n_expert SwiGLU experts per token (qwen3moe), with an optional shared
 * expert that every token runs (qwen2moe / qwen3next style, scaled by a
 * sigmoid gate where the file has one).
 *
 *   struct moe_ctx *c = moe_ctx_new(&params, max_tokens, err, sizeof err);
 *   moe_ctx_set_pool(c, tp);                                  // optional: decode threads
 *   moe_forward(c, &layer, xn, n_tokens, out, mm, mm_arg);  // out = moe(xn)
 *   moe_ctx_bytes_read(c);                                    // expert bytes so far
 *   moe_ctx_free(c);
 *
 * The experts of a layer are the 3-D GGUF tensors llama.cpp writes
 * (ffn_gate_exps / ffn_up_exps: ne = {n_embd, n_ff_exp, n_expert};
 * ffn_down_exps: ne = {n_ff_exp, n_embd, n_expert}; gpt-oss adds
 * per-expert biases): expert e is the 2-D
 * slice at data + e * expert_bytes, multiplied in place. The tokens routed
 * to one expert are gathered and multiplied as one batch (prefill), and an
 * expert no token chose is never read (decode reads k of n_expert). One
 * token (decode) runs the k experts' gate and up rows as one parallel pass
 * of per-row dots, x quantized once, and their down rows as a second.
 *
 * Thread safety: a moe_ctx (scratch and counter) belongs to one thread at a
 * time; the weights are read-only. */
#ifndef OMNI_MOE_H
#define OMNI_MOE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "src/core/matmul.h"

/* The n_expert matrices of one 3-D tensor, each [rows][cols] of one type. */
struct moe_experts {
    int type;                /* enum ggml_type */
    int64_t cols, rows;      /* ne[0] (row length), ne[1] (rows of one expert) */
    int n_expert;            /* ne[2] */
    size_t expert_bytes;     /* bytes of one expert's matrix */
    const void *data;
};

/* Expert e as a 2-D tensor view (no copy). */
struct omni_tensor moe_expert(const struct moe_experts *x, int e);

struct moe_layer {
    struct omni_tensor router;      /* ffn_gate_inp: [n_expert][n_embd] */
    struct moe_experts gate, up;    /* [n_expert][n_ff_exp][n_embd] */
    struct moe_experts down;        /* [n_expert][n_embd][n_ff_exp] */
    /* shared expert, or data NULL: ffn_{gate,up}_shexp [n_ff_shexp][n_embd],
     * ffn_down_shexp [n_embd][n_ff_shexp] */
    struct omni_tensor sh_gate, sh_up, sh_down;
    const float *sh_router;         /* ffn_gate_inp_shexp [n_embd]: sigmoid gate, or NULL */
    /* gpt-oss biases, or NULL: router [n_expert], gate and up
     * [n_expert][n_ff_exp], down [n_expert][n_embd] */
    const float *router_b, *gate_b, *up_b, *down_b;
};

struct moe_params {
    int n_embd;
    int n_expert;            /* <arch>.expert_count */
    int n_used;              /* <arch>.expert_used_count (k) */
    int n_ff_exp;            /* <arch>.expert_feed_forward_length */
    int n_ff_shexp;          /* shared expert width (0: none) */
    bool norm_weights;       /* top-k weights divided by their sum (norm_topk_prob) */
    /* gpt-oss clamped SwiGLU (omni_swiglu_oai with alpha 1.702) when > 0:
     * gate clamped above, up to +-limit (7); 0: plain SwiGLU */
    float swiglu_limit;
};

/* A matrix product y[n][rows] = x[n][cols] W^T; the model passes its own
 * (batch-invariant mode splits large batches), NULL args use omni_matmul. */
typedef void (*moe_matmul_fn)(void *arg, const struct omni_tensor *w, const float *x, int n,
                              float *y);

struct moe_ctx *moe_ctx_new(const struct moe_params *p, int max_tokens, char *err, size_t errlen);
void moe_ctx_free(struct moe_ctx *c);

struct tpool;
/* The pool the forwards run on (NULL: the calling thread alone): one token
 * splits its experts' rows over it; several tokens give each thread whole
 * experts (its own buffers, allocated here for tpool_size threads). The
 * pool belongs to the caller and must outlive the forwards that use it;
 * one tpool_run at a time, as for omni_matmul. 0, or OMNI_ERR_NOMEM (the
 * context then runs without the pool). */
int moe_ctx_set_pool(struct moe_ctx *c, struct tpool *tp, char *err, size_t errlen);
/* Products on a pool thread in calls of at most rows rows (0: any): the
 * caller's batch-invariant split, which its mm would otherwise apply. */
void moe_ctx_set_split_rows(struct moe_ctx *c, int rows);

/* out[n][n_embd] = sum over each token's k chosen experts of weight *
 * down(silu(gate(x)) * up(x)) (+ the shared expert); with the gpt-oss
 * biases each product adds its bias and the router logits theirs. x is the normed input
 * [n][n_embd]; out must not alias x. mm(mm_arg, ...) does the products -
 * for one token only the router's: the experts' rows are then per-row dots
 * on the pool (the same kernels and bits as omni_matmul of one row), so a
 * caller counting bytes in mm adds moe_ctx_bytes_read's instead.
 * Returns 0, or OMNI_ERR_ARG when n exceeds max_tokens. */
int moe_forward(struct moe_ctx *c, const struct moe_layer *L, const float *x, int n, float *out,
                moe_matmul_fn mm, void *mm_arg);

/* Pick the experts of one token from its n_expert router logits: softmax,
 * the k largest probabilities (ties to the lower index), divided by their
 * sum when norm. Writes idx[k] and w[k], largest first. */
void moe_route(const float *logits, int n_expert, int k, bool norm, int *idx, float *w);

/* Bytes of a layer's routed experts (the three 3-D tensors, every expert). */
uint64_t moe_layer_expert_bytes(const struct moe_layer *L);

/* Maps the pages of a layer's routed experts into the page tables now
 * (madvise MADV_POPULATE_READ on a mapped file; nothing to do for weights
 * read into memory), instead of at the first token that picks each expert:
 * decode touches a few new experts every step, and each page's first touch
 * is a minor fault (about 2-5% of a 4-layer Qwen3-Next step in the first
 * hundred tokens). llama.cpp maps its whole file with MAP_POPULATE alike.
 * The caller decides whether the experts fit in memory. 0, or -1 where the
 * kernel refused (old kernels: the pages then fault in as before). */
int moe_layer_prefault(const struct moe_layer *L);

/* Bytes of expert weights (routed and shared) the forwards read since the
 * context was made or the counter reset: each used expert's three matrices
 * once per moe_forward. */
uint64_t moe_ctx_bytes_read(const struct moe_ctx *c);
void moe_ctx_reset_bytes_read(struct moe_ctx *c);

#endif
