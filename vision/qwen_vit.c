/* qwen_vit.c - the vision-tower steps Qwen2.5-VL and Qwen3-VL share
 * (qwen_vit.h): batch check, rotary tables and rotation, per-row steps on
 * the pool, segment attention in query blocks, linear layers, per-block
 * budget and cancellation. */
#include "vision/qwen_vit.h"

#include <cblas.h>
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "src/core/matmul.h"
#include "src/core/omni.h"
#include "src/core/ops.h"
#include "src/core/quant.h"
#include "src/core/tensor.h"
#include "src/core/threadpool.h"
#include "vision/qwen2vl.h"
#include "vision/vision.h"

/* Widened weights per thread at most (floats), unless one row needs more. */
enum { WIDE_FLOATS = 4 << 20 };

static int threads(const struct qvit *v) { return v->tp ? tpool_size(v->tp) : 1; }

/* fn(arg) on every thread of the pool, or inline without one. */
static void run(struct qvit *v, void (*fn)(void *, int, int), void *arg)
{
    if (v->tp)
        tpool_run(v->tp, fn, arg);
    else
        fn(arg, 0, 1);
}

int qvit_check_batch(const char *name, const struct qwen2vl_image *im, int n_img,
                     struct vision_embd *outs, int *total, int *max_len, char *err, size_t errlen)
{
    if (n_img < 1 || n_img > QWEN2VL_MAX_BATCH_PATCHES / 4)
        return omni_fail(err, errlen, OMNI_ERR_ARG, "vision: %s: %d images in one pass", name, n_img);
    for (int i = 0; i < n_img; i++)
        memset(&outs[i], 0, sizeof outs[i]);
    /* every grid checked, and the batch's rows bounded, before any size is used */
    int64_t sum = 0;
    int longest = 0;
    for (int i = 0; i < n_img; i++) {
        const int gh = im[i].gh, gw = im[i].gw;
        if (!im[i].patches || gh < 2 || gw < 2 || gh % 2 || gw % 2 ||
            (int64_t)gh * gw > QWEN2VL_MAX_BATCH_PATCHES || im[i].frames < 0 || im[i].frames > 2)
            return omni_fail(err, errlen, OMNI_ERR_ARG, "vision: %s: bad patch grid %dx%d (%d frames)",
                             name, gh, gw, im[i].frames);
        sum += (int64_t)gh * gw;
        if (gh * gw > longest)
            longest = gh * gw;
    }
    if (sum > QWEN2VL_MAX_BATCH_PATCHES)
        return omni_fail(err, errlen, OMNI_ERR_ARG, "vision: %s: %lld patches in one pass (at "
                         "most %d)", name, (long long)sum, QWEN2VL_MAX_BATCH_PATCHES);
    *total = (int)sum, *max_len = longest;
    return OMNI_OK;
}

int qvit_alloc(struct qvit *v)
{
    const size_t half = (size_t)v->D / v->H / 2;
    v->cosv = malloc(sizeof(float) * (size_t)v->n * half);
    v->sinv = malloc(sizeof(float) * (size_t)v->n * half);
    v->scores = malloc(sizeof(float) * (size_t)threads(v) * QVIT_QBLOCK * v->max_seg);
    return v->cosv && v->sinv && v->scores ? OMNI_OK : OMNI_ERR_NOMEM;
}

void qvit_wide_alloc(struct qvit *v, const struct omni_tensor *w, const int64_t *shares,
                     int n_shares, int64_t min_floats)
{
    /* only passes that take sgemm use it; without it omni_matmul does */
    if (v->n < OMNI_MATMUL_BLAS_MIN || (w->type != GGML_TYPE_F16 && w->type != GGML_TYPE_BF16))
        return;
    int64_t f = min_floats;
    for (int k = 0; k < n_shares; k++)
        f = shares[k] > f ? shares[k] : f;
    if (f > WIDE_FLOATS)
        f = WIDE_FLOATS > min_floats ? WIDE_FLOATS : f;
    v->wide_floats = f;
    v->wide = malloc(sizeof(float) * (size_t)threads(v) * (size_t)f);
}

void qvit_free(struct qvit *v)
{
    float *p[] = { v->cosv, v->sinv, v->scores, v->wide };
    for (size_t j = 0; j < sizeof p / sizeof *p; j++)
        free(p[j]);
    v->cosv = v->sinv = v->scores = v->wide = NULL;
}

// ---- rotary ----------------------------------------------------------------------

void qvit_rope_angles(struct qvit *v, int r, int py, int px)
{
    const int dh = v->D / v->H, half = dh / 2, quarter = dh / 4;
    float *cs = v->cosv + (size_t)r * half, *sn = v->sinv + (size_t)r * half;
    for (int f = 0; f < quarter; f++) {
        const float fr = (float)pow(10000.0, -4.0 * f / dh);
        cs[f] = cosf((float)py * fr), sn[f] = sinf((float)py * fr);
        cs[quarter + f] = cosf((float)px * fr), sn[quarter + f] = sinf((float)px * fr);
    }
}

struct rope_job {
    struct qvit *v;
    float *q, *k;
    int ld;
};

static void rope_worker(void *arg, int ith, int nth)
{
    struct rope_job *j = arg;
    const int n = j->v->n, H = j->v->H, dh = j->v->D / H, half = dh / 2;
    const int r0 = (int)((int64_t)n * ith / nth), r1 = (int)((int64_t)n * (ith + 1) / nth);
    const struct omni_ops *ops = omni_ops();
    for (int r = r0; r < r1; r++) {
        const float *cs = j->v->cosv + (size_t)r * half, *sn = j->v->sinv + (size_t)r * half;
        for (int hd = 0; hd < H; hd++) {
            ops->rope(j->q + (size_t)r * j->ld + (size_t)hd * dh, cs, sn, dh, true);
            ops->rope(j->k + (size_t)r * j->ld + (size_t)hd * dh, cs, sn, dh, true);
        }
    }
}

void qvit_rope_qk(struct qvit *v, float *q, float *k, int ld)
{
    struct rope_job j = { v, q, k, ld };
    run(v, rope_worker, &j);
}

// ---- per-row steps -----------------------------------------------------------------

/* The serial per-row steps split across the pool by rows: on 2 cores they
 * were a tenth of an encode left to one thread while the other waited. */
struct rows_job {
    struct qvit *v;
    enum qvit_op op;
    const float *x, *w, *b;
    float *y;
    int n_rows, n;
};

/* y = x / sqrt(mean(x^2) + eps) * w over n_rows rows of n (as Qwen2RMSNorm, in float) */
static void rms_norm_rows(const float *x, const float *w, int n_rows, int n, float eps, float *y)
{
    for (int r = 0; r < n_rows; r++) {
        const float *xr = x + (size_t)r * n;
        float *yr = y + (size_t)r * n;
        double ss = 0;
        for (int i = 0; i < n; i++)
            ss += (double)xr[i] * xr[i];
        const float inv = (float)(1.0 / sqrt(ss / n + eps));
        for (int i = 0; i < n; i++)
            yr[i] = xr[i] * inv * w[i];
    }
}

static void rows_worker(void *arg, int ith, int nth)
{
    struct rows_job *j = arg;
    const int r0 = (int)((int64_t)j->n_rows * ith / nth), r1 = (int)((int64_t)j->n_rows * (ith + 1) / nth);
    if (r0 >= r1)
        return;
    const size_t o = (size_t)r0 * j->n, cnt = (size_t)(r1 - r0) * j->n;
    switch (j->op) {
    case QVIT_RMS_NORM:
        rms_norm_rows(j->x + o, j->w, r1 - r0, j->n, j->v->eps, j->y + o);
        break;
    case QVIT_LAYER_NORM:
        omni_layer_norm_rows(j->x + o, j->w, j->b, r1 - r0, j->n, j->v->eps, j->y + o);
        break;
    case QVIT_ADD:
        for (size_t i = 0; i < cnt; i++)
            j->y[o + i] += j->x[o + i];
        break;
    case QVIT_SWIGLU:
        omni_swiglu(j->x + o, j->y + o, (int64_t)cnt);
        break;
    case QVIT_GELU_ERF:
        omni_gelu_erf(j->y + o, (int64_t)cnt);
        break;
    case QVIT_GELU_TANH:
        omni_gelu_tanh(j->y + o, (int64_t)cnt);
        break;
    }
}

void qvit_rows(struct qvit *v, enum qvit_op op, const float *x, const float *w, const float *b,
               float *y, int n_rows, int n)
{
    struct rows_job j = { v, op, x, w, b, y, n_rows, n };
    run(v, rows_worker, &j);
}

// ---- attention -----------------------------------------------------------------------

struct attn_job {
    struct qvit *v;
    const float *q, *k, *vals;
    int ld;
    float *out;
};

/* Jobs (segment, head, query block) spread over the threads. */
static void attention_worker(void *arg, int ith, int nth)
{
    struct attn_job *j = arg;
    const struct qvit *v = j->v;
    const int D = v->D, H = v->H, dh = D / H, ld = j->ld;
    const float scale = 1.0f / sqrtf((float)dh);
    float *scores = v->scores + (size_t)ith * QVIT_QBLOCK * v->max_seg;
    const struct omni_ops *ops = omni_ops();
    int job = 0;
    for (int s = 0; s < v->n_seg; s++) {
        const int a = v->seg[s], len = v->seg[s + 1] - a;
        for (int hd = 0; hd < H; hd++)
            for (int q0 = 0; q0 < len; q0 += QVIT_QBLOCK, job++) {
                if (job % nth != ith)
                    continue;
                const int nq = len - q0 < QVIT_QBLOCK ? len - q0 : QVIT_QBLOCK;
                const float *qp = j->q + (size_t)(a + q0) * ld + hd * dh;
                const float *kp = j->k + (size_t)a * ld + hd * dh, *vp = j->vals + (size_t)a * ld + hd * dh;
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, nq, len, dh, scale, qp, ld, kp,
                            ld, 0.0f, scores, len);
                for (int i = 0; i < nq; i++)
                    ops->softmax(scores + (size_t)i * len, len);
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, nq, dh, len, 1.0f, scores, len,
                            vp, ld, 0.0f, j->out + (size_t)(a + q0) * D + hd * dh, D);
            }
    }
}

void qvit_attention(struct qvit *v, const float *q, const float *k, const float *vals, int ld_in,
                    float *out)
{
    struct attn_job j = { v, q, k, vals, ld_in, out };
    run(v, attention_worker, &j);
}

// ---- linear layers ---------------------------------------------------------------------

/* F16/BF16 weights times many rows: each thread widens its whole share of
 * the output rows once (wide_floats at a time) and runs one sgemm over it,
 * adding the bias to its columns. omni_matmul widens 2 MB at a time and
 * OpenBLAS then repacks all the activations for every such piece: 9 % of
 * an encode went to its copy routines. */
struct wide_job {
    struct qvit *v;
    const struct omni_tensor *w;
    const float *b, *x;
    int n_rows;
    float *y;
};

static void wide_worker(void *arg, int ith, int nth)
{
    struct wide_job *j = arg;
    const int64_t K = j->w->ne[0], N = j->w->ne[1];
    const int64_t r0 = N * ith / nth, r1 = N * (ith + 1) / nth;
    float *buf = j->v->wide + (size_t)ith * j->v->wide_floats;
    const int64_t piece = j->v->wide_floats / K;
    for (int64_t p0 = r0; p0 < r1; p0 += piece) {
        const int64_t p1 = p0 + piece < r1 ? p0 + piece : r1;
        for (int64_t r = p0; r < p1; r++)
            omni_tensor_get_row(j->w, r, buf + (size_t)(r - p0) * K);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, j->n_rows, (int)(p1 - p0), (int)K, 1.0f,
                    j->x, (int)K, buf, (int)K, 0.0f, j->y + p0, (int)N);
    }
    if (j->b)
        for (int r = 0; r < j->n_rows; r++)
            for (int64_t i = r0; i < r1; i++)
                j->y[(size_t)r * N + i] += j->b[i];
}

void qvit_linear(struct qvit *v, const struct omni_tensor *w, const float *b, const float *x,
                 int n_rows, float *y)
{
    if (v->wide && (w->type == GGML_TYPE_F16 || w->type == GGML_TYPE_BF16) &&
        n_rows >= OMNI_MATMUL_BLAS_MIN && w->ne[0] <= v->wide_floats) {
        struct wide_job j = { v, w, b, x, n_rows, y };
        run(v, wide_worker, &j);
        return;
    }
    omni_matmul(v->tp, w, x, n_rows, y);
    const int64_t n = w->ne[1];
    for (int r = 0; b && r < n_rows; r++)
        for (int64_t i = 0; i < n; i++)
            y[(size_t)r * n + i] += b[i];
}

// ---- the pass ------------------------------------------------------------------------------

int qvit_block_begin(struct qvit *v, int (*cancelled)(void *user), void *user, char *err,
                     size_t errlen)
{
    if (cancelled && cancelled(user))
        return omni_fail(err, errlen, OMNI_ERR_LIMIT, "vision: the encode was cancelled");
    if (tpool_begin(v->tp, false) < 0)
        return omni_fail(err, errlen, OMNI_ERR_LIMIT, "vision: shutting down");
    return OMNI_OK;
}

void qvit_outs_clear(struct vision_embd *outs, int n)
{
    for (int i = 0; i < n; i++) {
        free(outs[i].data);
        memset(&outs[i], 0, sizeof outs[i]);
    }
}
