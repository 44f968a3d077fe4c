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

/* attn_online_f16 against the reference: paged rows (blocks of 16 slots of
 * a wider row, in shuffled order), head sizes on and off the unrolled
 * kernels, key counts around the vector width and the block size, 1 to 17
 * query heads, the keys in one call or two (the state carried). */
static void check_attn_online(const struct omni_ops *op)
{
    const struct omni_ops *ref = omni_ops_reference();
    enum { BS = 16, NB = 24, MAXK = NB * BS, MAXG = 17 };
    const int heads[] = { 7, 32, 64, 80, 128, 256 };
    const int keys[] = { 1, 3, 4, 7, 8, 15, 16, 17, 31, 33, 100, 257, MAXK };
    const int groups[] = { 1, 2, 3, 4, 9, 17 }; /* 17: past ATTN_MAX_HEADS, in slices */
    for (size_t hi = 0; hi < sizeof heads / sizeof heads[0]; hi++) {
        const int d = heads[hi], row = 2 * d + 16; /* two heads and a gap per slot */
        uint16_t *K = malloc(2 * (size_t)NB * BS * row), *V = malloc(2 * (size_t)NB * BS * row);
        float *q = malloc(sizeof(float) * MAXG * d), *acc0 = malloc(sizeof(float) * MAXG * d);
        float *acc1 = malloc(sizeof(float) * MAXG * d);
        const uint16_t **kr = malloc(sizeof *kr * MAXK), **vr = malloc(sizeof *vr * MAXK);
        CHECK(K && V && q && acc0 && acc1 && kr && vr);
        rng_state = 7u + (unsigned)d;
        for (int i = 0; i < NB * BS * row; i++) {
            K[i] = omni_fp32_to_fp16(frand() * 2.0f);
            V[i] = omni_fp32_to_fp16(frand());
        }
        fill(q, MAXG * d, 1.0f);
        for (int j = 0; j < MAXK; j++) { /* block j / BS of the sequence lives in block 7 j' mod NB */
            const int blk = (7 * (j / BS) + 5) % NB;
            kr[j] = K + ((size_t)blk * BS + j % BS) * row + d; /* the second head of the slot */
            vr[j] = V + ((size_t)blk * BS + j % BS) * row + d;
        }
        for (size_t ki = 0; ki < sizeof keys / sizeof keys[0]; ki++)
            for (size_t gi = 0; gi < sizeof groups / sizeof groups[0]; gi++)
                for (int split = 0; split < 2; split++) {
                    const int n = keys[ki], g = groups[gi], n1 = split ? n / 3 : n;
                    float m0[MAXG], l0[MAXG], m1[MAXG], l1[MAXG];
                    for (int r = 0; r < g; r++)
                        m0[r] = m1[r] = -INFINITY, l0[r] = l1[r] = 0.0f;
                    memset(acc0, 0, sizeof(float) * g * d);
                    memset(acc1, 0, sizeof(float) * g * d);
                    const float scale = 1.0f / sqrtf((float)d) * 4.0f; /* peaked weights */
                    ref->attn_online_f16(acc0, m0, l0, q, g, kr, vr, n, d, scale);
                    op->attn_online_f16(acc1, m1, l1, q, g, kr, vr, n1, d, scale);
                    op->attn_online_f16(acc1, m1, l1, q, g, kr + n1, vr + n1, n - n1, d, scale);
                    for (int r = 0; r < g; r++) {
                        CHECK_MSG(fabsf(m1[r] - m0[r]) <= 1e-5f * (1.0f + fabsf(m0[r])),
                                  "level %s, attn_online_f16 d %d n %d g %d: max %g, want %g",
                                  op->name, d, n, g, m1[r], m0[r]);
                        for (int e = 0; e < d; e++) { /* the outputs acc / l */
                            acc0[r * d + e] /= l0[r];
                            acc1[r * d + e] /= l1[r];
                        }
                    }
                    char what[64];
                    snprintf(what, sizeof what, "attn_online_f16 d %d g %d split %d", d, g, split);
                    CHECK_CLOSE(acc1, acc0, g * d, 1e-4, 1e-5, what);
                }
        free(K), free(V), free(q), free(acc0), free(acc1), free(kr), free(vr);
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
        check_attn_online(omni_ops());
        printf(" [%s]", omni_ops()->name);
    }
    /* above what the CPU has: the best table it has */
    CHECK(memcmp(omni_ops_at(OMNI_CPU_LEVELS - 1), omni_ops_at(max_level), sizeof(struct omni_ops)) == 0);
    CHECK(omni_ops_at(-5) == omni_ops_at(OMNI_CPU_SCALAR));
    /* the reference against itself: the checker's own sanity */
    check_level(omni_ops_reference());
    check_attn_online(omni_ops_reference());
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
