/* backend_cpu.c - the "cpu" compute backend (backend.h): host memory and the
 * CPU kernels (omni_matmul, ops.h) row by row, single-threaded. It is the
 * reference the device forward (llm/model_dev.c) is tested against on
 * machines without a GPU, not a fast path: llm_forward is the CPU forward. */
#include "backend.h"

#include "matmul.h"
#include "omni.h"
#include "ops.h"
#include "quant.h"
#include "tensor.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void *cpu_alloc(struct omni_backend *be, size_t bytes)
{
    (void)be;
    return calloc(1, bytes ? bytes : 1);
}

static void cpu_free(struct omni_backend *be, void *p)
{
    (void)be;
    free(p);
}

static int cpu_copy(struct omni_backend *be, void *dst, const void *src, size_t bytes)
{
    (void)be;
    memcpy(dst, src, bytes);
    return 0;
}

static int cpu_memset0(struct omni_backend *be, void *dst, size_t bytes)
{
    (void)be;
    memset(dst, 0, bytes);
    return 0;
}

static int cpu_sync(struct omni_backend *be)
{
    (void)be;
    return 0;
}

static void *cpu_host_alloc(struct omni_backend *be, size_t bytes)
{
    (void)be;
    return malloc(bytes ? bytes : 1);
}

static int cpu_graph_begin(struct omni_backend *be)
{
    (void)be;
    return OMNI_ERR_UNSUPPORTED;
}

static int cpu_graph_end(struct omni_backend *be, void **graph)
{
    (void)be;
    *graph = NULL;
    return OMNI_ERR_UNSUPPORTED;
}

static int cpu_graph_launch(struct omni_backend *be, void *graph)
{
    (void)be, (void)graph;
    return OMNI_ERR_UNSUPPORTED;
}

static void cpu_graph_free(struct omni_backend *be, void *graph)
{
    (void)be, (void)graph;
}

static bool cpu_supports(const struct omni_backend *be, int type)
{
    (void)be;
    const struct ggml_type_traits *tr = ggml_type_traits_of(type);
    return tr && tr->supported;
}

static int cpu_matmul(struct omni_backend *be, const struct omni_btensor *w, const float *x, int n,
                      float *y)
{
    if (!cpu_supports(be, w->type))
        return OMNI_ERR_UNSUPPORTED;
    const struct omni_tensor t = { .type = w->type, .ne = { w->cols, w->rows }, .data = w->data };
    omni_matmul(NULL, &t, x, n, y);
    return 0;
}

static int cpu_get_rows(struct omni_backend *be, const struct omni_btensor *w, const int32_t *ids,
                        int n, float *out)
{
    if (!cpu_supports(be, w->type))
        return OMNI_ERR_UNSUPPORTED;
    const struct omni_tensor t = { .type = w->type, .ne = { w->cols, w->rows }, .data = w->data };
    for (int i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] >= w->rows)
            return OMNI_ERR_ARG;
        omni_tensor_get_row(&t, ids[i], out + (size_t)i * w->cols);
    }
    return 0;
}

static int cpu_rmsnorm(struct omni_backend *be, float *y, const float *x, const float *w, int rows,
                       int dim, float eps)
{
    (void)be;
    for (int r = 0; r < rows; r++)
        omni_ops()->rmsnorm(y + (size_t)r * dim, x + (size_t)r * dim, w, dim, eps);
    return 0;
}

static int cpu_add(struct omni_backend *be, float *y, const float *x, const float *b, int rows,
                   int dim)
{
    (void)be;
    for (int r = 0; r < rows; r++)
        for (int i = 0; i < dim; i++)
            y[(size_t)r * dim + i] += b ? b[i] : x[(size_t)r * dim + i];
    return 0;
}

static int cpu_add_rmsnorm(struct omni_backend *be, float *x, const float *dx, float *y,
                           const float *w, int rows, int dim, float eps)
{
    cpu_add(be, x, dx, NULL, rows, dim);
    return cpu_rmsnorm(be, y, x, w, rows, dim, eps);
}

static int cpu_rope(struct omni_backend *be, float *x, const int32_t *pos, int n_tok, int n_head,
                    int head_dim, int n_rot, const float *inv_freq, float attn_factor, bool neox)
{
    (void)be;
    const int half = n_rot / 2;
    float c[512], s[512];
    if (half > 512)
        return OMNI_ERR_UNSUPPORTED;
    for (int t = 0; t < n_tok; t++) {
        for (int i = 0; i < half; i++) {
            const float angle = (float)pos[t] * inv_freq[i];
            c[i] = cosf(angle) * attn_factor;
            s[i] = sinf(angle) * attn_factor;
        }
        for (int h = 0; h < n_head; h++)
            omni_ops()->rope(x + ((size_t)t * n_head + h) * head_dim, c, s, n_rot, neox);
    }
    return 0;
}

static int cpu_swiglu(struct omni_backend *be, const float *g, float *u, int64_t n)
{
    (void)be;
    omni_swiglu(g, u, n);
    return 0;
}

static int cpu_kv_store(struct omni_backend *be, const float *k, const float *v, void *kc,
                        void *vc, int kv_type, const int64_t *slot, int n, int kv_dim)
{
    (void)be;
    for (int i = 0; i < n; i++) {
        const float *ki = k + (size_t)i * kv_dim, *vi = v + (size_t)i * kv_dim;
        if (kv_type == GGML_TYPE_F32) {
            memcpy((float *)kc + slot[i] * kv_dim, ki, (size_t)kv_dim * sizeof(float));
            memcpy((float *)vc + slot[i] * kv_dim, vi, (size_t)kv_dim * sizeof(float));
        } else if (kv_type == GGML_TYPE_F16) {
            quantize_row_f16_ref(ki, (ggml_half *)kc + slot[i] * kv_dim, kv_dim);
            quantize_row_f16_ref(vi, (ggml_half *)vc + slot[i] * kv_dim, kv_dim);
        } else {
            return OMNI_ERR_UNSUPPORTED;
        }
    }
    return 0;
}

static float kv_at(const void *base, int type, int64_t e)
{
    return type == GGML_TYPE_F32 ? ((const float *)base)[e]
                                 : omni_fp16_to_fp32(((const ggml_half *)base)[e]);
}

/* Two passes per (token, head): scores into a buffer, softmax, weighted sum. */
static int cpu_attention(struct omni_backend *be, const struct omni_battn *a)
{
    (void)be;
    const int hd = a->head_dim, n_rep = a->n_head / a->n_head_kv, kv_dim = a->n_head_kv * hd;
    if (a->kv_type != GGML_TYPE_F32 && a->kv_type != GGML_TYPE_F16)
        return OMNI_ERR_UNSUPPORTED;
    for (int t = 0; t < a->n_tok; t++) {
        const int pos = a->pos[t];
        const int first = a->n_swa > 0 && pos >= a->n_swa ? pos - a->n_swa + 1 : 0;
        const int32_t *table = a->tables + (size_t)a->seq[t] * a->max_blocks;
        float *sc = malloc((size_t)(pos + 1) * sizeof(float));
        if (!sc)
            return OMNI_ERR_NOMEM;
        for (int h = 0; h < a->n_head; h++) {
            const float *q = a->q + ((size_t)t * a->n_head + h) * hd;
            float *out = a->out + ((size_t)t * a->n_head + h) * hd;
            const int64_t off = (int64_t)(h / n_rep) * hd;
            float mx = -INFINITY, sum = 0;
            for (int j = first; j <= pos; j++) {
                const int64_t e = ((int64_t)table[j / a->block_size] * a->block_size +
                                   j % a->block_size) * kv_dim + off;
                float s = 0;
                for (int d = 0; d < hd; d++)
                    s += q[d] * kv_at(a->k, a->kv_type, e + d);
                sc[j] = s * a->scale;
                mx = sc[j] > mx ? sc[j] : mx;
            }
            memset(out, 0, (size_t)hd * sizeof(float));
            for (int j = first; j <= pos; j++) {
                const int64_t e = ((int64_t)table[j / a->block_size] * a->block_size +
                                   j % a->block_size) * kv_dim + off;
                const float p = expf(sc[j] - mx);
                sum += p;
                for (int d = 0; d < hd; d++)
                    out[d] += p * kv_at(a->v, a->kv_type, e + d);
            }
            for (int d = 0; d < hd; d++)
                out[d] /= sum;
        }
        free(sc);
    }
    return 0;
}

// ---- Whisper's ops (audio/whisper_dev.c) ------------------------------------

static int cpu_layernorm(struct omni_backend *be, float *y, const float *x, const float *w,
                         const float *b, int rows, int dim, float eps)
{
    (void)be;
    for (int r = 0; r < rows; r++)
        omni_ops()->layernorm(y + (size_t)r * dim, x + (size_t)r * dim, w, b, dim, eps);
    return 0;
}

static int cpu_gelu(struct omni_backend *be, float *y, const float *b, int rows, int dim)
{
    (void)be;
    for (int r = 0; r < rows; r++) {
        float *yr = y + (size_t)r * dim;
        for (int i = 0; b && i < dim; i++)
            yr[i] += b[i];
        omni_ops()->gelu_erf(yr, dim);
    }
    return 0;
}

static int cpu_im2col_k3(struct omni_backend *be, float *col, const float *in, int n_in,
                         int in_len, int n_out, int stride, bool channels_first)
{
    (void)be;
    for (int t = 0; t < n_out; t++) {
        float *c = col + (size_t)t * n_in * 3;
        for (int k = 0; k < 3; k++) {
            const int p = stride * t + k - 1;
            const bool inside = p >= 0 && p < in_len;
            for (int i = 0; i < n_in; i++)
                c[i * 3 + k] = !inside         ? 0.0f
                               : channels_first ? in[(size_t)i * in_len + p]
                                                : in[(size_t)p * n_in + i];
        }
    }
    return 0;
}

/* Per (token, head): scores through the ops.h attention loops (as the CPU
 * forward), softmax, weighted sum. */
static int cpu_attention_dense(struct omni_backend *be, const struct omni_bdense *a)
{
    (void)be;
    const struct omni_ops *op = omni_ops();
    const int hd = a->head_dim, qd = a->n_head * hd;
    const bool f16 = a->kv_type == GGML_TYPE_F16;
    const size_t esz = f16 ? sizeof(uint16_t) : sizeof(float);
    if (!f16 && a->kv_type != GGML_TYPE_F32)
        return OMNI_ERR_UNSUPPORTED;
    enum { CHUNK = 256 };
    const void *rows[CHUNK];
    for (int t = 0; t < a->n_tok; t++) {
        const int n_keys = a->window > 0 ? a->window : a->n_keys[t];
        const int sq = a->window > 0 ? 0 : a->seq[t];
        if (n_keys < 1)
            return OMNI_ERR_ARG;
        float *sc = malloc((size_t)n_keys * sizeof(float));
        if (!sc)
            return OMNI_ERR_NOMEM;
        for (int h = 0; h < a->n_head; h++) {
            const size_t at = ((size_t)sq * a->seq_stride * a->kv_row + (size_t)h * hd) * esz;
            const char *K = (const char *)a->k + at, *V = (const char *)a->v + at;
            const float *q = a->q + (size_t)t * qd + h * hd;
            float *o = a->out + (size_t)t * qd + h * hd;
            for (int i0 = 0; i0 < n_keys; i0 += CHUNK) {
                const int n = n_keys - i0 < CHUNK ? n_keys - i0 : CHUNK;
                for (int i = 0; i < n; i++)
                    rows[i] = K + (size_t)(i0 + i) * a->kv_row * esz;
                if (f16)
                    op->attn_scores_f16(sc + i0, q, (const uint16_t *const *)rows, n, hd, a->scale);
                else
                    op->attn_scores(sc + i0, q, (const float *const *)rows, n, hd, a->scale);
            }
            op->softmax(sc, n_keys);
            memset(o, 0, (size_t)hd * sizeof(float));
            for (int i0 = 0; i0 < n_keys; i0 += CHUNK) {
                const int n = n_keys - i0 < CHUNK ? n_keys - i0 : CHUNK;
                for (int i = 0; i < n; i++)
                    rows[i] = V + (size_t)(i0 + i) * a->kv_row * esz;
                if (f16)
                    op->attn_wsum_f16(o, sc + i0, (const uint16_t *const *)rows, n, hd);
                else
                    op->attn_wsum(o, sc + i0, (const float *const *)rows, n, hd);
            }
        }
        free(sc);
    }
    return 0;
}

static int cpu_argmax(struct omni_backend *be, const float *x, int rows, int n, int32_t *out)
{
    (void)be;
    for (int r = 0; r < rows; r++) {
        const float *row = x + (size_t)r * n;
        int best = 0;
        for (int i = 1; i < n; i++)
            if (row[i] > row[best])
                best = i;
        out[r] = best;
    }
    return 0;
}

static void cpu_destroy(struct omni_backend *be)
{
    free(be);
}

struct omni_backend *omni_backend_cpu_new(char *err, size_t errlen)
{
    struct omni_backend *be = calloc(1, sizeof *be);
    if (!be) {
        omni_fail(err, errlen, OMNI_ERR_NOMEM, "backend: cpu: out of memory");
        return NULL;
    }
    *be = (struct omni_backend){
        .name = "cpu", .alloc = cpu_alloc, .free = cpu_free, .upload = cpu_copy,
        .download = cpu_copy, .memset0 = cpu_memset0, .sync = cpu_sync, .matmul = cpu_matmul,
        .get_rows = cpu_get_rows, .rmsnorm = cpu_rmsnorm, .add_rmsnorm = cpu_add_rmsnorm,
        .add = cpu_add, .rope = cpu_rope,
        .swiglu = cpu_swiglu, .kv_store = cpu_kv_store, .attention = cpu_attention,
        .argmax = cpu_argmax, .supports = cpu_supports, .destroy = cpu_destroy,
        .host_alloc = cpu_host_alloc, .host_free = cpu_free, .graph_begin = cpu_graph_begin,
        .graph_end = cpu_graph_end, .graph_launch = cpu_graph_launch,
        .graph_free = cpu_graph_free,
        .layernorm = cpu_layernorm, .gelu = cpu_gelu, .im2col_k3 = cpu_im2col_k3,
        .attention_dense = cpu_attention_dense,
    };
    snprintf(be->device, sizeof be->device, "host");
    return be;
}
