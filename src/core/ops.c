/* ops.c - the compute layer's dispatch (ops.h): one table per CPU level,
 * built once from the reference with each supported level's SIMD versions
 * patched in, and the row helpers the encoders use on top of it. */
#include "src/core/ops_impl.h"

#include "src/core/cpu.h"

#include <cblas.h>
#include <math.h>
#include <pthread.h>

/* tables[level]: the reference with the SIMD versions of every supported
 * level up to it; levels above what the CPU supports copy the best one. */
static struct omni_ops tables[OMNI_CPU_LEVELS];
static pthread_once_t tables_once = PTHREAD_ONCE_INIT;

static void build_tables(void)
{
    const int max_level = omni_cpu()->max_level;
    for (int lvl = 0; lvl < OMNI_CPU_LEVELS; lvl++) {
        tables[lvl] = lvl ? tables[lvl - 1] : omni_ops_ref;
        if (lvl > max_level)
            continue;
#if defined(__x86_64__)
        if (lvl == OMNI_CPU_SCALAR)
            omni_ops_fill_sse(&tables[lvl]);
        else if (lvl == OMNI_CPU_AVX2)
            omni_ops_fill_avx2(&tables[lvl]);
        else if (lvl == OMNI_CPU_AVX512)
            omni_ops_fill_avx512(&tables[lvl]);
#endif
    }
}

const struct omni_ops *omni_ops_at(int level)
{
    pthread_once(&tables_once, build_tables);
    if (level < 0)
        level = 0;
    if (level >= OMNI_CPU_LEVELS)
        level = OMNI_CPU_LEVELS - 1;
    return &tables[level];
}

const struct omni_ops *omni_ops_reference(void)
{
    return &omni_ops_ref;
}

const struct omni_ops *omni_ops(void)
{
    return omni_ops_at(omni_cpu_level());
}

// ---- row helpers -------------------------------------------------------------

void omni_layer_norm_rows(const float *x, const float *w, const float *b, int64_t n_rows, int n,
                          float eps, float *y)
{
    const struct omni_ops *op = omni_ops();
    for (int64_t r = 0; r < n_rows; r++)
        op->layernorm(y + r * n, x + r * n, w, b, n, eps);
}

void omni_gelu_erf(float *x, int64_t n) { omni_ops()->gelu_erf(x, n); }
void omni_gelu_tanh(float *x, int64_t n) { omni_ops()->gelu_tanh(x, n); }
void omni_swiglu(const float *gate, float *up, int64_t n) { omni_ops()->swiglu(gate, up, n); }
void omni_geglu_erf(const float *gate, float *up, int64_t n) { omni_ops()->geglu_erf(gate, up, n); }
void omni_geglu_tanh(const float *gate, float *up, int64_t n) { omni_ops()->geglu_tanh(gate, up, n); }
void omni_softcap(float *x, int64_t n, float cap) { omni_ops()->softcap(x, n, cap); }

void omni_swiglu_oai(const float *gate, float *up, int64_t n, float alpha, float limit)
{
    for (int64_t i = 0; i < n; i++) {
        const float g = gate[i] < limit ? gate[i] : limit;
        const float u = up[i] < -limit ? -limit : up[i] > limit ? limit : up[i];
        up[i] = g / (1.0f + expf(-alpha * g)) * (u + 1.0f);
    }
}

void omni_rope_neox(float *x, int n_head, int head_dim, int pos, float base)
{
    const int half = head_dim / 2;
    for (int i = 0; i < half; i++) {
        /* the angle in double: positions up to a few thousand times a
         * frequency near 1 lose digits in float */
        const double theta = pos * pow((double)base, -2.0 * i / head_dim);
        const float c = (float)cos(theta), s = (float)sin(theta);
        for (int h = 0; h < n_head; h++) {
            float *p = x + (size_t)h * head_dim;
            const float x0 = p[i], x1 = p[i + half];
            p[i] = x0 * c - x1 * s;
            p[i + half] = x0 * s + x1 * c;
        }
    }
}

void omni_attn_dense(const float *q, const float *k, const float *v, float *out, size_t ld, int nq,
                     int nk, int d, float scale, float *scores,
                     void (*bias)(float *row, int i, int nk, void *user), void *user)
{
    const struct omni_ops *op = omni_ops();
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, nq, nk, d, scale, q, (int)ld, k, (int)ld, 0.0f,
                scores, nk);
    for (int i = 0; i < nq; i++) {
        float *row = scores + (size_t)i * nk;
        if (bias)
            bias(row, i, nk, user);
        op->softmax(row, nk);
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, nq, d, nk, 1.0f, scores, nk, v, (int)ld, 0.0f,
                out, (int)ld);
}

void omni_l2_normalize(float *x, int n)
{
    double ss = 0;
    for (int i = 0; i < n; i++)
        ss += (double)x[i] * x[i];
    if (ss <= 0)
        return;
    const float inv = (float)(1.0 / sqrt(ss));
    for (int i = 0; i < n; i++)
        x[i] *= inv;
}
