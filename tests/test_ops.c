/* test_ops.c - the compute layer (src/core/ops.h): every op of every CPU
 * level this machine has, against the scalar reference on seeded random
 * data, at sizes that hit the full-vector loops and every tail; the table
 * follows omni_cpu_set_level; helpers and bad sizes (n = 0) behave.
 * Tolerances are relative to the values' scale: the levels differ only in
 * summation order and FMA contraction. */
#include "test.h"

#include "src/core/cpu.h"
#include "src/core/ops.h"
#include "src/core/tensor.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const int sizes[] = { 1, 3, 7, 8, 9, 15, 16, 17, 31, 32, 33, 64, 80, 100, 128, 257, 1031 };
enum { NMAX = 1031 };

static unsigned rng_state;
static float frand(void) /* uniform in [-1, 1) */
{
    rng_state = rng_state * 1664525u + 1013904223u;
    return (float)((rng_state >> 8) & 0xffffff) / 8388608.0f - 1.0f;
}

static void fill(float *x, int n, float scale)
{
    for (int i = 0; i < n; i++)
        x[i] = frand() * scale;
}

/* max |a - b| / (tol_abs + tol_rel |b|) over n: <= 1 passes */
static double rel_err(const float *a, const float *b, int n, double tol_rel, double tol_abs)
{
    double worst = 0;
    for (int i = 0; i < n; i++) {
        const double e = fabs((double)a[i] - b[i]) / (tol_abs + tol_rel * fabs((double)b[i]));
        if (!(e <= worst)) /* NaN sticks */
            worst = e;
    }
    return worst;
}

#define CHECK_CLOSE(got, want, n, rel, abs_, what)                                             \
    do {                                                                                         \
        const double e_ = rel_err(got, want, n, rel, abs_);                                      \
        CHECK_MSG(e_ <= 1.0, "level %s, %s, n %d: error %.3g of tolerance", op->name, what, n, e_); \
    } while (0)

/* One level's table against the reference. */
static void check_level(const struct omni_ops *op)
{
    const struct omni_ops *ref = omni_ops_reference();
    static float a[NMAX], b[NMAX], w[NMAX], bias[NMAX], y0[NMAX], y1[NMAX], g[NMAX];
    static uint16_t h[NMAX], hb[NMAX], h0[NMAX], h1[NMAX];
    for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++) {
        const int n = sizes[si];
        rng_state = 1234u + (unsigned)n;
        fill(a, n, 2.0f);
        fill(b, n, 2.0f);
        fill(w, n, 1.5f);
        fill(bias, n, 0.5f);
        fill(g, n, 6.0f);
        for (int i = 0; i < n; i++) {
            h[i] = omni_fp32_to_fp16(b[i]);
            const float bf = b[i];
            uint32_t u;
            memcpy(&u, &bf, 4);
            hb[i] = (uint16_t)(u >> 16);
        }
        /* dots: error relative to sum |a b| */
        double mag = 0;
        for (int i = 0; i < n; i++)
            mag += fabs((double)a[i] * b[i]);
        CHECK_NEAR(op->dot(a, b, n), ref->dot(a, b, n), 1e-5 * mag + 1e-6);
        CHECK_NEAR(op->dot_f16(a, h, n), ref->dot_f16(a, h, n), 1e-5 * mag + 1e-6);
        CHECK_NEAR(op->dot_bf16(a, hb, n), ref->dot_bf16(a, hb, n), 1e-5 * mag + 1e-6);

        memcpy(y0, w, n * sizeof(float));
        memcpy(y1, w, n * sizeof(float));
        ref->axpy(y0, 0.75f, a, n);
        op->axpy(y1, 0.75f, a, n);
        CHECK_CLOSE(y1, y0, n, 1e-6, 1e-6, "axpy");
        ref->axpy_f16(y0, -0.5f, h, n);
        op->axpy_f16(y1, -0.5f, h, n);
        CHECK_CLOSE(y1, y0, n, 1e-6, 1e-6, "axpy_f16");
        ref->axpy_bf16(y0, 0.25f, hb, n);
        op->axpy_bf16(y1, 0.25f, hb, n);
        CHECK_CLOSE(y1, y0, n, 1e-6, 1e-6, "axpy_bf16");
        ref->scale(y0, 1.5f, n);
        op->scale(y1, 1.5f, n);
        CHECK_CLOSE(y1, y0, n, 1e-6, 1e-6, "scale");

        /* conversions are exact */
        ref->f16_to_f32(h, y0, n);
        op->f16_to_f32(h, y1, n);
        CHECK_MSG(memcmp(y0, y1, n * sizeof(float)) == 0, "level %s, f16_to_f32, n %d", op->name, n);
        ref->f32_to_f16(a, h0, n);
        op->f32_to_f16(a, h1, n);
        CHECK_MSG(memcmp(h0, h1, n * 2) == 0, "level %s, f32_to_f16, n %d", op->name, n);

        ref->rmsnorm(y0, a, w, n, 1e-6f);
        op->rmsnorm(y1, a, w, n, 1e-6f);
        CHECK_CLOSE(y1, y0, n, 1e-5, 1e-6, "rmsnorm");
        memcpy(y1, a, n * sizeof(float)); /* in place */
        op->rmsnorm(y1, y1, w, n, 1e-6f);
        CHECK_CLOSE(y1, y0, n, 1e-5, 1e-6, "rmsnorm in place");
        ref->layernorm(y0, a, w, bias, n, 1e-5f);
        op->layernorm(y1, a, w, bias, n, 1e-5f);
        CHECK_CLOSE(y1, y0, n, 1e-5, 1e-5, "layernorm");
        ref->layernorm(y0, a, NULL, NULL, n, 1e-5f);
        op->layernorm(y1, a, NULL, NULL, n, 1e-5f);
        CHECK_CLOSE(y1, y0, n, 1e-5, 1e-5, "layernorm without w, b");

        if (n % 2 == 0) {
            const int half = n / 2;
            for (int neox = 0; neox <= 1; neox++) {
                memcpy(y0, a, n * sizeof(float));
                memcpy(y1, a, n * sizeof(float));
                for (int i = 0; i < half; i++)
                    w[i] = cosf(0.3f * i + 0.1f), bias[i] = sinf(0.3f * i + 0.1f);
                ref->rope(y0, w, bias, n, neox);
                op->rope(y1, w, bias, n, neox);
                CHECK_CLOSE(y1, y0, n, 1e-6, 1e-6, neox ? "rope neox" : "rope pairs");
            }
        }

        /* elementwise over the range models see (|x| <= 6, exp args to -90) */
        fill(y0, n, 45.0f);
        memcpy(y1, y0, n * sizeof(float));
        ref->exp(y0, y0, n);
        op->exp(y1, y1, n);
        CHECK_CLOSE(y1, y0, n, 2e-6, 0, "exp");
#define ACT(fn)                                                     \
        memcpy(y0, g, n * sizeof(float));                           \
        memcpy(y1, g, n * sizeof(float));                           \
        ref->fn(y0, n);                                             \
        op->fn(y1, n);                                              \
        CHECK_CLOSE(y1, y0, n, 1e-5, 1e-6, #fn);
        ACT(gelu_erf)
        ACT(gelu_tanh)
        ACT(silu)
        ACT(gelu_quick)
        ACT(softmax)
#undef ACT
        /* an online softmax's steps: the same max, exp(x - m) and its sum */
        memcpy(y0, g, n * sizeof(float));
        memcpy(y1, g, n * sizeof(float));
        const float mx0 = ref->max(y0, n), mx1 = op->max(y1, n);
        CHECK_MSG(mx0 == mx1, "level %s, max, n %d: %g, want %g", op->name, n, mx1, mx0);
        const float sum0 = ref->exp_shift_sum(y0, n, mx0), sum1 = op->exp_shift_sum(y1, n, mx0);
        CHECK_CLOSE(y1, y0, n, 2e-6, 0, "exp_shift_sum");
        CHECK_MSG(fabsf(sum1 - sum0) <= 1e-5f * sum0, "level %s, exp_shift_sum, n %d: sum %g, want %g",
                  op->name, n, sum1, sum0);
        CHECK_MSG(isinf(op->max(y1, 0)) && op->exp_shift_sum(y1, 0, 0.0f) == 0.0f, "level %s, n = 0", op->name);
#define GLU(fn)                                                     \
        memcpy(y0, a, n * sizeof(float));                           \
        memcpy(y1, a, n * sizeof(float));                           \
        ref->fn(g, y0, n);                                          \
        op->fn(g, y1, n);                                           \
        CHECK_CLOSE(y1, y0, n, 1e-5, 1e-6, #fn);
        GLU(swiglu)
        GLU(geglu_erf)
        GLU(geglu_tanh)
#undef GLU
        fill(y0, n, 100.0f);
        memcpy(y1, y0, n * sizeof(float));
        ref->softcap(y0, n, 30.0f);
        op->softcap(y1, n, 30.0f);
        CHECK_CLOSE(y1, y0, n, 1e-5, 1e-5, "softcap");
    }

    /* attention over strided rows: keys/values of one head in a [n][ld] block */
    const int heads[] = { 7, 32, 64, 80, 128, 200 };
    for (size_t hi = 0; hi < sizeof heads / sizeof heads[0]; hi++) {
        const int d = heads[hi], nk = 37, ld = d + 5;
        float *kv = malloc(sizeof(float) * (size_t)nk * ld), q[256], acc0[256], acc1[256];
        uint16_t *kv16 = malloc(2 * (size_t)nk * ld);
        const float *rows[37];
        const uint16_t *rows16[37];
        CHECK(kv && kv16);
        rng_state = 99u + (unsigned)d;
        fill(kv, nk * ld, 1.0f);
        fill(q, d, 1.0f);
        for (int i = 0; i < nk * ld; i++)
            kv16[i] = omni_fp32_to_fp16(kv[i]);
        for (int i = 0; i < nk; i++)
            rows[i] = kv + (size_t)i * ld, rows16[i] = kv16 + (size_t)i * ld;
        float s0[37], s1[37];
        ref->attn_scores(s0, q, rows, nk, d, 0.125f);
        op->attn_scores(s1, q, rows, nk, d, 0.125f);
        CHECK_CLOSE(s1, s0, nk, 1e-5, 1e-5 * d, "attn_scores");
        ref->attn_scores_f16(s0, q, rows16, nk, d, 0.125f);
        op->attn_scores_f16(s1, q, rows16, nk, d, 0.125f);
        CHECK_CLOSE(s1, s0, nk, 1e-5, 1e-5 * d, "attn_scores_f16");
        ref->softmax(s0, nk);
        for (int i = 0; i < d; i++)
            acc0[i] = acc1[i] = q[i];
        ref->attn_wsum(acc0, s0, rows, nk, d);
        op->attn_wsum(acc1, s0, rows, nk, d);
        CHECK_CLOSE(acc1, acc0, d, 1e-5, 1e-5, "attn_wsum");
        ref->attn_wsum_f16(acc0, s0, rows16, nk, d);
        op->attn_wsum_f16(acc1, s0, rows16, nk, d);
        CHECK_CLOSE(acc1, acc0, d, 1e-5, 1e-5, "attn_wsum_f16");
        free(kv);
        free(kv16);
    }
}

TEST(ops_every_level_matches_reference)
{
    const int max_level = omni_cpu()->max_level;
    for (int lvl = OMNI_CPU_SCALAR; lvl <= max_level; lvl++) {
        if (omni_cpu_usable_level(omni_cpu(), lvl) != lvl) /* avxvnni on AVX-512 without AVX-VNNI */
            continue;
        /* the table in use follows the level (the runner restores it) */
        CHECK_EQ(omni_cpu_set_level(lvl), lvl);
        CHECK(omni_ops() == omni_ops_at(lvl));
        check_level(omni_ops());
        printf(" [%s]", omni_ops()->name);
    }
    /* above what the CPU has: the best table it has */
    CHECK(memcmp(omni_ops_at(OMNI_CPU_LEVELS - 1), omni_ops_at(max_level), sizeof(struct omni_ops)) == 0);
    CHECK(omni_ops_at(-5) == omni_ops_at(OMNI_CPU_SCALAR));
    /* the reference against itself: the checker's own sanity */
    check_level(omni_ops_reference());
}

/* every half (subnormals, infinities, NaNs) widens to the same float at every level */
TEST(ops_f16_to_f32_every_half)
{
    static uint16_t all[65536];
    static float want[65536], got[65536];
    for (int i = 0; i < 65536; i++)
        all[i] = (uint16_t)i;
    omni_ops_reference()->f16_to_f32(all, want, 65536);
    for (int lvl = OMNI_CPU_SCALAR; lvl <= omni_cpu()->max_level; lvl++) {
        const struct omni_ops *op = omni_ops_at(lvl);
        op->f16_to_f32(all, got, 65536);
        for (int i = 0; i < 65536; i++)
            CHECK_MSG(memcmp(&got[i], &want[i], 4) == 0 || (isnan(got[i]) && isnan(want[i])),
                      "level %s: half 0x%04x -> %g, want %g", op->name, i, got[i], want[i]);
    }
}

TEST(ops_reference_against_libm)
{
    const struct omni_ops *ref = omni_ops_reference();
    float x[64], y[64];
    for (int i = 0; i < 64; i++)
        x[i] = -8.0f + 0.25f * i;
    memcpy(y, x, sizeof y);
    ref->gelu_erf(y, 64);
    for (int i = 0; i < 64; i++)
        CHECK_NEAR(y[i], 0.5 * x[i] * (1 + erf(x[i] / sqrt(2.0))), 1e-6 * (1 + fabs(x[i])));
    memcpy(y, x, sizeof y);
    ref->gelu_tanh(y, 64);
    for (int i = 0; i < 64; i++) {
        const double u = sqrt(2 / M_PI) * (x[i] + 0.044715 * pow(x[i], 3));
        CHECK_NEAR(y[i], 0.5 * x[i] * (1 + tanh(u)), 1e-6 * (1 + fabs(x[i])));
    }
    memcpy(y, x, sizeof y);
    ref->silu(y, 64);
    for (int i = 0; i < 64; i++)
        CHECK_NEAR(y[i], x[i] / (1 + exp(-x[i])), 1e-6 * (1 + fabs(x[i])));
    ref->exp(y, x, 64);
    for (int i = 0; i < 64; i++)
        CHECK_NEAR(y[i], exp(x[i]), 2e-7 * exp(x[i]));
    /* softmax sums to one; n = 1 gives exactly 1 */
    memcpy(y, x, sizeof y);
    omni_ops()->softmax(y, 64);
    double s = 0;
    for (int i = 0; i < 64; i++)
        s += y[i];
    CHECK_NEAR(s, 1.0, 1e-5);
    y[0] = 42.0f;
    omni_ops()->softmax(y, 1);
    CHECK_NEAR(y[0], 1.0, 0);
    /* zero-length rows touch nothing */
    CHECK_NEAR(omni_ops()->dot(x, x, 0), 0.0, 0);
    omni_ops()->axpy(y, 1.0f, x, 0);
    omni_ops()->gelu_erf(y, 0);
}
