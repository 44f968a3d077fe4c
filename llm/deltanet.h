/* deltanet.h - Gated DeltaNet linear attention (Qwen3-Next, Qwen3.5): the
 * recurrent layers of the hybrid models, with their per-sequence state.
 *
 * For a token with normed input x (n_embd):
 *   qkv = W_qkv x (q of every key head, k of every key head, v of every
 *         value head), z = W_gate x, b and a (one per value head: W_ba's
 *         rows per key head, or W_beta / W_alpha);
 *   qkv = silu(causal depthwise conv over the last `kernel` qkv inputs);
 *   q, k: L2-normalised per key head, q scaled by 1/sqrt(head_k);
 *   beta = sigmoid(b), g = A * softplus(a + dt_bias) (A = -exp(A_log), as
 *   the GGUF stores it);
 *   per value head h (key head kh(h)), state S [head_k][head_v]:
 *     S = exp(g) S;  S += k (beta (v - S^T k))^T;  o = S^T q;
 *   y_h = rmsnorm(o, norm) * silu(z_h);  out = W_out y.
 * Value head h reads key head h / (n_v / n_k) (grouped: Qwen3-Next's
 * layout) or h % n_k (tiled: Qwen3.5 GGUFs, whose converter reorders the
 * value heads so).
 *
 * State of one sequence for one layer (gdn_state_floats): the last
 * kernel - 1 conv inputs [kernel - 1][conv_dim] (oldest first), then S of
 * every value head [n_v][head_k][head_v]. Tokens of one sequence are
 * processed in batch order, each continuing from the state the previous one
 * left; a token flagged reset starts from zero state (position 0).
 *
 * Thread safety: a gdn_ctx (scratch) belongs to one thread at a time. */
#ifndef OMNI_DELTANET_H
#define OMNI_DELTANET_H

#include <stdbool.h>
#include <stddef.h>

#include "src/core/matmul.h"

struct tpool;

struct gdn_params {
    int n_embd;
    int n_k_heads, n_v_heads;   /* ssm.group_count, ssm.time_step_rank */
    int head_k, head_v;         /* ssm.state_size, ssm.inner_size / n_v_heads */
    int kernel;                 /* ssm.conv_kernel */
    bool tiled;                 /* value head h reads key head h % n_k_heads */
    bool fused_qkvz;            /* some layer has ssm_in (gdn_layer.qkvz): scratch for it */
    float norm_eps;             /* the gated RMSNorm's epsilon */
};

struct gdn_layer {
    struct omni_tensor qkv;     /* attn_qkv [2 n_k head_k + n_v head_v][n_embd] */
    struct omni_tensor gate;    /* attn_gate (z) [n_v head_v][n_embd] */
    /* ssm_in, older Qwen3-Next GGUFs: qkv and z in one matrix, per key head
     * its q, k, v and z rows ([n_k][2 head_k + 2 (n_v / n_k) head_v][n_embd]);
     * data NULL when qkv and gate are given */
    struct omni_tensor qkvz;
    struct omni_tensor ba;      /* ssm_ba [2 n_v][n_embd]: per key head its b rows, then its a
                                   rows (Qwen3-Next); data NULL when beta / alpha are given */
    struct omni_tensor beta, alpha; /* ssm_beta / ssm_alpha [n_v][n_embd] (Qwen3.5) */
    const float *conv_w;        /* ssm_conv1d [conv_dim][kernel] */
    const float *dt_bias;       /* ssm_dt.bias [n_v] */
    const float *a;             /* ssm_a [n_v]: -exp(A_log) */
    const float *norm;          /* ssm_norm [head_v] */
    struct omni_tensor out;     /* ssm_out [n_embd][n_v head_v] */
    size_t state_off;           /* this layer's floats within a sequence's state */
};

/* Per token of a batch: the sequence's whole state (all layers), where a
 * snapshot of it after this token goes (NULL: none), and whether the token
 * starts its sequence (zero state first). */
struct gdn_token {
    float *state;
    float *snap;
    bool reset;
};

/* y[n][rows] = x[n][cols] W^T, the model's product (byte counting, batch
 * invariance); the same signature as moe_matmul_fn. */
typedef void (*gdn_matmul_fn)(void *arg, const struct omni_tensor *w, const float *x, int n,
                              float *y);

/* The products of several weights sharing the input x (y[k] = x w[k]^T,
 * n_w <= 4), each with the same bits as mm of that weight alone: the
 * model's omni_matmul_multi (one parallel region for a decode step's
 * input projections instead of three or four). */
typedef void (*gdn_matmul_multi_fn)(void *arg, const struct omni_tensor *const *w, int n_w,
                                    const float *x, int n, float *const *y);

/* Floats of one layer's state; conv channels 2 n_k head_k + n_v head_v. */
size_t gdn_state_floats(const struct gdn_params *p);
int gdn_conv_dim(const struct gdn_params *p);

/* Checks the sizes (a clear message on bad ones), allocates scratch for
 * max_tokens tokens. */
struct gdn_ctx *gdn_ctx_new(const struct gdn_params *p, int max_tokens, struct tpool *tp,
                            char *err, size_t errlen);
void gdn_ctx_free(struct gdn_ctx *c);
/* The input projections of attn_qkv / attn_gate files (qkv, z, and ba or
 * beta + alpha) through multi(mm_arg, ...) where set (NULL: one mm each);
 * gdn_forward's mm_arg is passed to it. */
void gdn_ctx_set_matmul_multi(struct gdn_ctx *c, gdn_matmul_multi_fn multi);

/* out[n][n_embd] = the layer applied to xn[n][n_embd], tokens in batch
 * order with their states (tok[n]); out may alias xn. 0, or OMNI_ERR_ARG
 * when n exceeds max_tokens. */
int gdn_forward(struct gdn_ctx *c, const struct gdn_layer *L, const float *xn, int n,
                const struct gdn_token *tok, float *out, gdn_matmul_fn mm, void *mm_arg);

/* One token's recurrence for one value head, in place (exposed for tests):
 * S [head_k][head_v] = exp(g) S + k (beta (v - S^T k))^T, o = S^T q. q and k
 * already normalised and scaled. */
void gdn_delta_step(float *S, const float *q, const float *k, const float *v, float g,
                    float beta, int head_k, int head_v, float *o);

#endif
