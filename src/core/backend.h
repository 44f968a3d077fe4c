/* backend.h - a compute backend for whole-batch forward passes: device
 * memory, GGUF tensors uploaded in their quantized layout, and the batched
 * ops a llama/qwen2/qwen3 forward needs (quantized matmul, RMSNorm, RoPE,
 * SwiGLU, paged attention through block tables, embedding rows, argmax).
 *
 *   struct omni_backend *be = omni_backend_new("cuda", 0, err, sizeof err);
 *   void *wd = be->alloc(be, t->nbytes);                 // device memory
 *   be->upload(be, wd, t->data, t->nbytes);              // GGUF bytes as they are
 *   struct omni_btensor w = { t->type, t->ne[0], t->ne[1], wd };
 *   be->matmul(be, &w, x, n, y);                         // y[n][rows] = x[n][cols] W^T
 *   be->download(be, host, y, bytes);                    // waits for the ops before it
 *   omni_backend_free(be);
 *
 * Two backends: "cpu" (src/core/backend_cpu.c: host memory, the CPU kernels
 * row by row - the reference the device forward is tested against on
 * machines without a GPU) and "cuda" (src/core/cuda/, built by `make CUDA=1`;
 * without it omni_backend_new("cuda") fails with a message saying so).
 *
 * Every pointer an op takes is memory of that backend (alloc), never host
 * memory, except in upload/download. Ops are queued in order on the
 * backend's one stream and return at once; download waits for them. An op
 * returns 0 or a negative omni_err (a launch failure, an unsupported type);
 * after a failure the backend's state is unspecified (free it). This ops
 * table is batched (one call covers every token of a step), where the CPU
 * compute layer of ops.h works row by row; the names follow ops.h.
 *
 * Thread safety: a backend belongs to one thread at a time. */
#ifndef OMNI_BACKEND_H
#define OMNI_BACKEND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* A matrix in backend memory, in its GGUF layout: rows of cols elements. */
struct omni_btensor {
    int type;       /* enum ggml_type */
    int64_t cols;   /* ne[0]: elements per row */
    int64_t rows;   /* ne[1] */
    const void *data;
};

/* Paged attention over a KV pool (see llm/model.h's llm_kv for the layout):
 * token i (query rows q[i][n_head * head_dim]) of sequence seq[i] at
 * position pos[i] attends to positions first..pos[i] of its sequence, where
 * first = max(0, pos[i] - n_swa + 1) when n_swa > 0, else 0; position p of
 * sequence s lives in slot (tables[s * max_blocks + p / block_size] *
 * block_size + p % block_size). Softmax in F32. */
struct omni_battn {
    float *out;                 /* [n_tok][n_head * head_dim] */
    const float *q;             /* [n_tok][n_head * head_dim], not yet scaled */
    const void *k, *v;          /* one layer's pool: [n_blocks * block_size][kv_dim] */
    int kv_type;                /* GGML_TYPE_F32 or GGML_TYPE_F16 */
    int n_tok;
    const int32_t *pos, *seq;   /* [n_tok] */
    const int32_t *tables;      /* [n_seq][max_blocks] */
    int max_blocks, block_size;
    int n_head, n_head_kv, head_dim;
    float scale;                /* query scale, 1/sqrt(head_dim) usually */
    int n_swa;                  /* sliding window (tokens), 0: none */
};

/* Attention over contiguous (non-paged) K/V sequences (Whisper: a stream's
 * self-attention cache, its encoder window): token i (query row q[i][n_head
 * * head_dim]) attends to keys 0 .. n_keys[i]-1 of sequence seq[i]; key j
 * of sequence s, head h starts at element (s * seq_stride + j) * kv_row + h
 * * head_dim of k and v. causal: n_keys[i] is pos[i] + 1 (the decoder's
 * own cache); bidirectional: the whole window. window > 0: every row
 * attends to keys 0 .. window-1 of sequence 0 (an encoder window over
 * itself: seq and n_keys unused, and the backend may tile queries).
 * Softmax in F32. */
struct omni_bdense {
    float *out;                 /* [n_tok][n_head * head_dim] */
    const float *q;             /* [n_tok][n_head * head_dim], not yet scaled */
    const void *k, *v;
    int kv_type;                /* GGML_TYPE_F32 or GGML_TYPE_F16 */
    int n_tok;
    const int32_t *seq, *n_keys; /* [n_tok] */
    int window;                 /* > 0: see above */
    int64_t seq_stride;         /* key rows between sequences */
    int kv_row;                 /* elements between key rows (>= n_head * head_dim) */
    int n_head, head_dim;
    float scale;
};

/* rope_kv: the step after q/k/v in one op - biases added (bq/bk/bv, each
 * may be NULL), q and k rotated as rope() does, then k and v stored into
 * slots slot[i] of the pools as kv_store() does. q keeps its rotated
 * values; the k and v rows are scratch afterwards (cuda may do a one-token
 * step's rope_kv inside the attention after it and leave them as they
 * were). */
struct omni_brope_kv {
    float *q, *k, *v;           /* [n_tok][n_head * head_dim], [n_tok][n_head_kv * head_dim] */
    const float *bq, *bk, *bv;
    const int32_t *pos;         /* [n_tok] */
    int n_tok, n_head, n_head_kv, head_dim, n_rot;
    const float *inv_freq;      /* [n_rot / 2] */
    float attn_factor;
    bool neox;
    void *kc, *vc;
    int kv_type;
    const int64_t *slot;        /* [n_tok] */
};

struct omni_backend {
    const char *name;           /* "cpu", "cuda" */
    char device[128];           /* e.g. "NVIDIA H100 80GB HBM3", "host" */
    size_t mem_total, mem_free; /* bytes at creation (0 when unknown) */

    /* ---- memory ---- */
    void *(*alloc)(struct omni_backend *be, size_t bytes);   /* NULL when out of memory */
    void (*free)(struct omni_backend *be, void *p);          /* NULL: no-op */
    int (*upload)(struct omni_backend *be, void *dst, const void *src, size_t bytes);
    int (*download)(struct omni_backend *be, void *dst, const void *src, size_t bytes);
    int (*memset0)(struct omni_backend *be, void *dst, size_t bytes);
    int (*sync)(struct omni_backend *be);
    /* Host memory the backend copies from / to fastest (CUDA: pinned);
     * uploads from it can be part of a graph. */
    void *(*host_alloc)(struct omni_backend *be, size_t bytes);
    void (*host_free)(struct omni_backend *be, void *p);

    /* ---- graphs: record the ops queued between begin and end once, then
     * replay them with one call (CUDA Graphs: no per-kernel launch cost).
     * A replay reads the same buffers with the same sizes: only their
     * contents may change. Ops that would allocate fail while recording.
     * OMNI_ERR_UNSUPPORTED from graph_begin: no graphs (cpu). ---- */
    int (*graph_begin)(struct omni_backend *be);
    int (*graph_end)(struct omni_backend *be, void **graph); /* *graph NULL on failure */
    int (*graph_launch)(struct omni_backend *be, void *graph);
    void (*graph_free)(struct omni_backend *be, void *graph);

    /* ---- ops ---- */
    /* y[n][w->rows] = x[n][w->cols] . W^T (F32 activations). */
    int (*matmul)(struct omni_backend *be, const struct omni_btensor *w, const float *x, int n,
                  float *y);
    /* out[i][w->cols] = row ids[i] of w as floats. */
    int (*get_rows)(struct omni_backend *be, const struct omni_btensor *w, const int32_t *ids,
                    int n, float *out);
    /* y[r] = x[r] / sqrt(mean(x[r]^2) + eps) * w for rows of dim (y may be x). */
    int (*rmsnorm)(struct omni_backend *be, float *y, const float *x, const float *w, int rows,
                   int dim, float eps);
    /* The residual step fused: x[r] += dx[r], then y[r] = rmsnorm(x[r]) * w
     * (y may be dx). */
    int (*add_rmsnorm)(struct omni_backend *be, float *x, const float *dx, float *y,
                       const float *w, int rows, int dim, float eps);
    /* y[r][i] += b[i] (b NULL: y += x elementwise over rows * dim, x given). */
    int (*add)(struct omni_backend *be, float *y, const float *x, const float *b, int rows,
               int dim);
    /* Rotate the first n_rot values of each of n_head heads of n_tok rows
     * (row stride n_head * head_dim) by pos[t] * inv_freq[i] (cos and sin
     * times attn_factor); neox: pairs (i, i + n_rot/2), else (2i, 2i+1). */
    int (*rope)(struct omni_backend *be, float *x, const int32_t *pos, int n_tok, int n_head,
                int head_dim, int n_rot, const float *inv_freq, float attn_factor, bool neox);
    /* u = silu(g) * u over n values. */
    int (*swiglu)(struct omni_backend *be, const float *g, float *u, int64_t n);
    /* K/V rows of n tokens ([n][kv_dim]) into slots slot[i] of the pools
     * (F32 copy or F16 round-to-nearest-even, as the CPU forward). */
    int (*kv_store)(struct omni_backend *be, const float *k, const float *v, void *kc, void *vc,
                    int kv_type, const int64_t *slot, int n, int kv_dim);
    int (*attention)(struct omni_backend *be, const struct omni_battn *a);
    /* out[r] = index of the largest of x[r][0..n) (the first on ties). */
    int (*argmax)(struct omni_backend *be, const float *x, int rows, int n, int32_t *out);

    /* Optional (NULL: nothing to do / unknown). prepare: make matrix w (its
     * data stays where it is) ready for batched products - cuda keeps an F16
     * copy for its GEMM path when memory allows, until w->data is freed: its
     * contents must not change meanwhile; 0 or an error. mem_available:
     * free device memory now, in bytes. */
    int (*prepare)(struct omni_backend *be, const struct omni_btensor *w);
    /* Optional: prepare w[0..n) (equal cols: q, k, v; gate, up) so that a
     * batched product over all of them can be one (cuda: their F16 copies
     * in one allocation, in this order, for one GEMM); 0 also where it
     * cannot (prepare then does each). Before prepare of the same matrices. */
    int (*prepare_group)(struct omni_backend *be, int n, const struct omni_btensor *const *w);
    size_t (*mem_available)(struct omni_backend *be);

    /* Optional fused ops of a decode step (NULL: the caller runs the plain
     * ops above; llm/model_dev.c does). matmul_multi: y[i] = x . w[i]^T for
     * i < nw (at most 3, equal cols: q, k, v from one read of x, one
     * launch). matmul_glu: y = silu(x . w_gate^T) * (x . w_up^T) (swiglu
     * fused; OMNI_ERR_UNSUPPORTED with nothing queued for weights it does
     * not fuse: the caller runs the plain ops). rope_kv: see struct
     * omni_brope_kv. */
    int (*matmul_multi)(struct omni_backend *be, int nw, const struct omni_btensor *const *w,
                        const float *x, int n, float *const *y);
    int (*matmul_glu)(struct omni_backend *be, const struct omni_btensor *w_gate,
                      const struct omni_btensor *w_up, const float *x, int n, float *y);
    int (*rope_kv)(struct omni_backend *be, const struct omni_brope_kv *r);

    /* Whisper's ops (audio/whisper_dev.c); NULL where a backend lacks them.
     * layernorm: y[r] = (x[r] - mean) / sqrt(var + eps) * w + b over rows of
     * dim (y may be x). gelu: y = gelu(y + b) over rows of dim, the exact
     * (erf) GELU; b NULL: none. im2col_k3: the columns of a kernel-3,
     * padding-1 conv1d, col[t][i * 3 + k] = in(i, stride * t + k - 1) for t
     * < n_out (0 outside 0..in_len), so that the conv is a matmul by its
     * [out][in * 3] weights; in is [n_in][in_len] (channels_first) or
     * [in_len][n_in]. attention_dense: see struct omni_bdense. */
    int (*layernorm)(struct omni_backend *be, float *y, const float *x, const float *w,
                     const float *b, int rows, int dim, float eps);
    int (*gelu)(struct omni_backend *be, float *y, const float *b, int rows, int dim);
    int (*im2col_k3)(struct omni_backend *be, float *col, const float *in, int n_in, int in_len,
                     int n_out, int stride, bool channels_first);
    int (*attention_dense)(struct omni_backend *be, const struct omni_bdense *a);

    /* Matrix types matmul and get_rows take (F32, F16, Q4_0, Q8_0, Q4_K, Q6_K, ...). */
    bool (*supports)(const struct omni_backend *be, int type);

    void (*destroy)(struct omni_backend *be);
    void *impl;                 /* the backend's own state */
};

/* A backend by name ("cpu", "cuda"); device: the GPU index (cuda). NULL and
 * a message when the name is unknown, the build lacks it (cuda without
 * `make CUDA=1`) or no device is usable. */
struct omni_backend *omni_backend_new(const char *name, int device, char *err, size_t errlen);
void omni_backend_free(struct omni_backend *be);
/* Whether this build has the named backend compiled in. */
bool omni_backend_available(const char *name);

#endif
