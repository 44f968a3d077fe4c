/* qwen_vit.h - the steps the Qwen2.5-VL (qwen2vl.c) and Qwen3-VL
 * (qwen3vl.c) vision towers share over a pass of patch rows: the batch
 * check, 2-D rotary angles and their NEOX rotation, per-row steps (norms,
 * residual adds, activations) split across the pool, attention inside
 * segments in query blocks, the linear layers (F16/BF16 weights widened
 * once per thread share for many rows) and the per-block budget/cancel
 * check.
 *
 *   struct qvit v = { .tp = tp, .n = n, .D = D, .H = H, .eps = eps, .max_seg = longest };
 *   if (qvit_alloc(&v)) ...;                   // rotary tables, score buffers
 *   qvit_rope_angles(&v, row, py, px);         // each row's position
 *   for each block: qvit_block_begin(&v, ...); qvit_rows / qvit_linear /
 *                   qvit_rope_qk / qvit_attention ...; tpool_end(tp);
 *   qvit_free(&v);
 *
 * A struct qvit is one pass's scratch: one caller at a time. */
#ifndef OMNI_VISION_QWEN_VIT_H
#define OMNI_VISION_QWEN_VIT_H

#include <stddef.h>
#include <stdint.h>

struct tpool;
struct omni_tensor;
struct qwen2vl_image;
struct vision_embd;

enum { QVIT_QBLOCK = 64 };   /* query rows per attention job */

struct qvit {
    struct tpool *tp;            /* may be NULL */
    int n, D, H;                 /* patch rows of the pass, width, heads */
    float eps;                   /* the norms' epsilon */
    float *cosv, *sinv;          /* (n, head_dim / 2): each row's rotary angles */
    float *scores;               /* (threads, QVIT_QBLOCK, max_seg) */
    const int *seg;              /* attention segments in rows, n_seg + 1 bounds */
    int n_seg, max_seg;          /* max_seg: the longest segment any block uses */
    float *wide;                 /* (threads, wide_floats) widened weights, or NULL: omni_matmul */
    int64_t wide_floats;
};

/* The images of one pass checked (patches, even grids of at most
 * QWEN2VL_MAX_BATCH_PATCHES, 0..2 frames, the pass's total bounded) and
 * outs[n_img] zeroed; *total patches, *max_len the largest image's.
 * name ("qwen2vl") goes into the message. */
int qvit_check_batch(const char *name, const struct qwen2vl_image *im, int n_img,
                     struct vision_embd *outs, int *total, int *max_len, char *err, size_t errlen);

/* cosv, sinv and scores for v->n rows and v->max_seg (0 or OMNI_ERR_NOMEM). */
int qvit_alloc(struct qvit *v);
/* The wide buffers for F16/BF16 weights when the pass is long enough for
 * sgemm: per thread the largest of shares[] (each the floats of one
 * thread's share of a weight), at least min_floats, at most 4 M floats
 * unless min_floats needs more. Out of memory leaves v->wide NULL. */
void qvit_wide_alloc(struct qvit *v, const struct omni_tensor *w, const int64_t *shares,
                     int n_shares, int64_t min_floats);
void qvit_free(struct qvit *v);

/* Row r's rotary angles for the patch at (py, px) of its image: the first
 * head_dim / 4 turn with the row, the next with the column, at
 * 10000^(-4f / head_dim) (in float, as the reference's tables). */
void qvit_rope_angles(struct qvit *v, int r, int py, int px);
/* The NEOX rotation of every head of q and k (rows ld floats apart). */
void qvit_rope_qk(struct qvit *v, float *q, float *k, int ld);

enum qvit_op {
    QVIT_RMS_NORM,               /* y = x / rms(x) * w (Qwen2RMSNorm, accumulated in double) */
    QVIT_LAYER_NORM,             /* y = layernorm(x) * w + b */
    QVIT_ADD,                    /* y += x */
    QVIT_SWIGLU,                 /* y = silu(x) * y */
    QVIT_GELU_ERF,               /* y = gelu(y), exact */
    QVIT_GELU_TANH,              /* y = gelu(y), tanh form */
};
/* op over n_rows rows of n floats, split across the pool by rows. */
void qvit_rows(struct qvit *v, enum qvit_op op, const float *x, const float *w, const float *b,
               float *y, int n_rows, int n);

/* out = softmax(q k^T / sqrt(head_dim)) v inside each segment of v->seg,
 * per head and query block across the pool; q, k, vals rows ld_in floats
 * apart, out rows D. */
void qvit_attention(struct qvit *v, const float *q, const float *k, const float *vals, int ld_in,
                    float *out);

/* y[n_rows][w->ne[1]] = x w^T + b (b may be NULL). */
void qvit_linear(struct qvit *v, const struct omni_tensor *w, const float *b, const float *x,
                 int n_rows, float *y);

/* Before each block: a cancelled caller or a pool shutting down ends the
 * pass (OMNI_ERR_LIMIT with a message); else the block holds one unit of
 * the pool's compute budget until tpool_end. */
int qvit_block_begin(struct qvit *v, int (*cancelled)(void *user), void *user, char *err,
                     size_t errlen);

/* outs[0..n) released and zeroed (a failed pass). */
void qvit_outs_clear(struct vision_embd *outs, int n);

#endif
