/* test_gemm_act8.c - the AVX2 int8 GEMM's 8-row forms for batches from 8
 * rows (gemm_avx2.c's act8 for q8_0 and wt8 for q4_0/q5_0, gemm_k_avx2.c's
 * a8 for q4_K/q6_K) on real row lengths: many blocks, and for the K-quants
 * more super-blocks than one chunk (partial sums parked in y). Every row of
 * an 8- or 16-row batch must have the bits of the same row in a batch of 9
 * or 17 (a padded last 8, or the packed kernel for the remainder) and, where
 * omni_matmul_same_kernels says so, in batches of 2 (q4_0/q5_0), 3 (q8_0's
 * act4) and 4 (act4, the K-quants' packed kernel), and be near the float
 * product. */
#include "src/core/cpu.h"
#include "src/core/matmul.h"
#include "src/core/quant.h"
#include "src/core/tensor.h"
#include "src/core/threadpool.h"
#include "tests/test.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static uint64_t act8_rng = 7;

static float act8_rand(void)
{
    act8_rng = act8_rng * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((act8_rng >> 40) & 0xffffff) / (float)0x800000 - 1.0f;
}

static void act8_free_tpool(void *tp) { tpool_free(tp); }

TEST(gemm_act8_rows_equal_tiles)
{
    static const int types[] = { GGML_TYPE_Q8_0, GGML_TYPE_Q4_0, GGML_TYPE_Q5_0, GGML_TYPE_Q4_K, GGML_TYPE_Q6_K };
    const int64_t n_in = 256 * 35, n_out = 21; /* 35 super-blocks: 2 chunks of the K-quants' a8 */
    enum { NB = 17 };
    struct tpool *tp = tpool_new(2, NULL, 0);
    test_defer(act8_free_tpool, tp);
    float *x = malloc(sizeof(float) * (size_t)(n_in * NB));
    float *wf = malloc(sizeof(float) * (size_t)(n_in * n_out));
    float *wd = malloc(sizeof(float) * (size_t)(n_in * n_out));
    float *y8 = malloc(sizeof(float) * (size_t)(n_out * NB));
    float *y9 = malloc(sizeof(float) * (size_t)(n_out * NB));
    float *y4 = malloc(sizeof(float) * (size_t)(n_out * 4));
    float *y2 = malloc(sizeof(float) * (size_t)(n_out * 2));
    float *y3 = malloc(sizeof(float) * (size_t)(n_out * 3));
    uint8_t *w = malloc(ggml_row_size(GGML_TYPE_Q8_0, n_in) * (size_t)n_out);
    CHECK(tp && x && wf && wd && y8 && y9 && y4 && y2 && y3 && w);
    for (int64_t i = 0; i < n_in * NB; i++)
        x[i] = act8_rand();
    for (int64_t i = 0; i < n_in * n_out; i++)
        wf[i] = act8_rand() * (1.0f + (float)(i % 5));
    const int saved = omni_cpu_level();
    for (size_t ti = 0; ti < sizeof types / sizeof *types; ti++) {
        const int t = types[ti];
        const size_t row = ggml_row_size(t, n_in);
        for (int64_t r = 0; r < n_out; r++) {
            CHECK_EQ(quantize_row(t, wf + r * n_in, w + r * row, n_in), 0);
            CHECK_EQ(dequantize_row(t, w + r * row, wd + r * n_in, n_in), 0);
        }
        const struct omni_tensor wt = { .type = t, .ne = { n_in, n_out }, .data = w };
        for (int level = 0; level <= omni_cpu()->max_level; level++) {
            if (omni_cpu_set_level(level) != level) /* a level this CPU lacks (avxvnni without AVX-VNNI) */
                continue;
            for (int b = 8; b < NB; b += 8) {
                omni_matmul(tp, &wt, x, b, y8);
                omni_matmul(tp, &wt, x, b + 1, y9);
                omni_matmul(tp, &wt, x + (b - 3) * n_in, 4, y4); /* rows b-3..b */
                omni_matmul(tp, &wt, x + (b - 2) * n_in, 2, y2); /* rows b-2, b-1 */
                omni_matmul(tp, &wt, x + (b - 3) * n_in, 3, y3); /* rows b-3..b-1 (q8_0's act4: a lane idle) */
                if (omni_matmul_same_kernels(t, b + 1, 4)) /* the remainder row of b + 1 */
                    CHECK_MSG(memcmp(y9 + b * n_out, y4 + 3 * n_out, sizeof(float) * (size_t)n_out) == 0,
                              "%s level %d: row %d of %d differs from the batch of 4", ggml_type_name(t),
                              level, b, b + 1);
                for (int m = 0; m < b; m++) {
                    if (omni_matmul_same_kernels(t, b, b + 1))
                        CHECK_MSG(memcmp(y8 + m * n_out, y9 + m * n_out, sizeof(float) * (size_t)n_out) == 0,
                                  "%s level %d: row %d of %d differs from the batch of %d",
                                  ggml_type_name(t), level, m, b, b + 1);
                    if (m >= b - 2 && omni_matmul_same_kernels(t, b, 2)) /* q4_0/q5_0's wt8 from 2 rows */
                        CHECK_MSG(memcmp(y8 + m * n_out, y2 + (m - (b - 2)) * n_out, sizeof(float) * (size_t)n_out) == 0,
                                  "%s level %d: row %d of %d differs from the batch of 2",
                                  ggml_type_name(t), level, m, b);
                    if (m >= b - 3 && omni_matmul_same_kernels(t, b, 3))
                        CHECK_MSG(memcmp(y8 + m * n_out, y3 + (m - (b - 3)) * n_out, sizeof(float) * (size_t)n_out) == 0,
                                  "%s level %d: row %d of %d differs from the batch of 3",
                                  ggml_type_name(t), level, m, b);
                    if (m >= b - 3 && omni_matmul_same_kernels(t, b, 4))
                        CHECK_MSG(memcmp(y8 + m * n_out, y4 + (m - (b - 3)) * n_out, sizeof(float) * (size_t)n_out) == 0,
                                  "%s level %d: row %d of %d differs from the batch of 4",
                                  ggml_type_name(t), level, m, b);
                    for (int64_t r = 0; r < n_out; r++) {
                        double ref = 0, mag = 0;
                        for (int64_t k = 0; k < n_in; k++) {
                            ref += (double)wd[r * n_in + k] * x[m * n_in + k];
                            mag += fabs((double)wd[r * n_in + k] * x[m * n_in + k]);
                        }
                        /* activations are quantized to 8 bits: about 1% of the magnitude */
                        CHECK_MSG(fabs(y8[m * n_out + r] - ref) <= 1e-2 * mag + 1e-3,
                                  "%s level %d row %d out %lld: %g vs %g", ggml_type_name(t), level, m,
                                  (long long)r, y8[m * n_out + r], ref);
                    }
                }
            }
        }
    }
    omni_cpu_set_level(saved);
    free(x);
    free(wf);
    free(wd);
    free(y8);
    free(y9);
    free(y4);
    free(y2);
    free(y3);
    free(w);
}

/* q8_0 weights of -128 (never written by the quantizers, possible in a
 * crafted file): the act8 tiles move the activation's sign onto the weight
 * only where no weight of a tile is -128 (-w would not fit a byte), so
 * such a row still gets the exact product: one weight -128 per row times
 * activations all about -1. */
TEST(gemm_act8_q8_0_minus_128_exact)
{
    const int64_t n_in = 64, n_out = 9, nb = 8;
    const size_t row = ggml_row_size(GGML_TYPE_Q8_0, n_in);
    uint8_t *w = calloc((size_t)n_out, row);
    float *x = malloc(sizeof(float) * (size_t)(n_in * nb));
    float *y = malloc(sizeof(float) * (size_t)(n_out * nb));
    CHECK(w && x && y);
    for (int64_t r = 0; r < n_out; r++) {
        block_q8_0 *b = (block_q8_0 *)(w + (size_t)r * row);
        b[0].d = b[1].d = omni_fp32_to_fp16(1.0f);
        if (r != 5) /* row 5: no -128 (the other form of its tile) */
            b[r & 1].qs[(r * 7) & 31] = -128;
        else
            b[0].qs[3] = 100;
    }
    for (int64_t i = 0; i < n_in * nb; i++)
        x[i] = -1.0f;
    const struct omni_tensor wt = { .type = GGML_TYPE_Q8_0, .ne = { n_in, n_out }, .data = w };
    const int saved = omni_cpu_level();
    for (int level = 0; level <= omni_cpu()->max_level; level++) {
        if (omni_cpu_set_level(level) != level) /* a level this CPU lacks (avxvnni without AVX-VNNI) */
            continue;
        omni_matmul(NULL, &wt, x, nb, y);
        for (int64_t m = 0; m < nb; m++)
            for (int64_t r = 0; r < n_out; r++) {
                const float want = r != 5 ? 128.0f : -100.0f; /* activations quantize to -127 x 1/127 */
                CHECK_MSG(fabsf(y[m * n_out + r] - want) <= 1e-3f * fabsf(want), "level %d row %lld out %lld: %g vs %g",
                          level, (long long)m, (long long)r, y[m * n_out + r], want);
            }
    }
    omni_cpu_set_level(saved);
    free(w);
    free(x);
    free(y);
}

/* omni_matmul_multi at the engine's batch sizes (one quantization of x and
 * one parallel region for q/k/v or gate/up when every weight takes the
 * int8 GEMM of one activation type) gives each weight omni_matmul's bits:
 * Qwen2.5 Q4_K_M's q/k/v types, K-quant pairs, and sets that mix activation
 * types or GEMM and dots (the fallback), 2 and 3 threads, every level. */
TEST(gemm_act8_multi_equals_single)
{
    static const int sets[][3] = {
        { GGML_TYPE_Q5_0, GGML_TYPE_Q5_0, GGML_TYPE_Q8_0 },
        { GGML_TYPE_Q4_0, GGML_TYPE_Q8_0, GGML_TYPE_Q5_0 },
        { GGML_TYPE_Q4_K, GGML_TYPE_Q6_K, GGML_TYPE_Q4_K },
        { GGML_TYPE_Q4_K, GGML_TYPE_Q5_0, GGML_TYPE_F16 },
    };
    static const int64_t batches[] = { 2, 5, 8, 9, 16 };
    const int64_t n_in = 512, nb_max = 16;
    const int64_t n_out[3] = { 40, 8, 13 };
    struct tpool *pools[2] = { tpool_new(2, NULL, 0), tpool_new(3, NULL, 0) };
    test_defer(act8_free_tpool, pools[0]);
    test_defer(act8_free_tpool, pools[1]);
    float *x = malloc(sizeof(float) * (size_t)(n_in * nb_max));
    float *wf = malloc(sizeof(float) * (size_t)(n_in * 40));
    float *ya[3], *yb = malloc(sizeof(float) * (size_t)(40 * nb_max));
    uint8_t *w[3];
    for (int k = 0; k < 3; k++) {
        ya[k] = malloc(sizeof(float) * (size_t)(40 * nb_max));
        w[k] = malloc(ggml_row_size(GGML_TYPE_F16, n_in) * 40);
        CHECK(ya[k] && w[k]);
    }
    CHECK(pools[0] && pools[1] && x && wf && yb);
    for (int64_t i = 0; i < n_in * nb_max; i++)
        x[i] = act8_rand();
    for (int64_t i = 0; i < n_in * 40; i++)
        wf[i] = act8_rand();
    const int saved = omni_cpu_level();
    for (size_t si = 0; si < sizeof sets / sizeof *sets; si++) {
        struct omni_tensor wt[3];
        const struct omni_tensor *wp[3];
        for (int k = 0; k < 3; k++) {
            const int t = sets[si][k];
            const size_t row = ggml_row_size(t, n_in);
            for (int64_t r = 0; r < n_out[k]; r++)
                CHECK_EQ(quantize_row(t, wf + r * n_in, w[k] + r * row, n_in), 0);
            wt[k] = (struct omni_tensor){ .type = t, .ne = { n_in, n_out[k] }, .data = w[k] };
            wp[k] = &wt[k];
        }
        for (int level = 0; level <= omni_cpu()->max_level; level++) {
            if (omni_cpu_set_level(level) != level) /* a level this CPU lacks (avxvnni without AVX-VNNI) */
                continue;
            for (int pi = 0; pi < 2; pi++)
                for (size_t bi = 0; bi < sizeof batches / sizeof *batches; bi++) {
                    const int64_t nb = batches[bi];
                    float *const yp[3] = { ya[0], ya[1], ya[2] };
                    omni_matmul_multi(pools[pi], wp, 3, x, nb, yp);
                    for (int k = 0; k < 3; k++) {
                        omni_matmul(pools[pi], wp[k], x, nb, yb);
                        CHECK_MSG(memcmp(ya[k], yb, sizeof(float) * (size_t)(nb * n_out[k])) == 0,
                                  "set %zu weight %d (%s) level %d threads %d rows %lld: multi != single", si,
                                  k, ggml_type_name(sets[si][k]), level, pi + 2, (long long)nb);
                    }
                }
        }
    }
    omni_cpu_set_level(saved);
    for (int k = 0; k < 3; k++) {
        free(ya[k]);
        free(w[k]);
    }
    free(x);
    free(wf);
    free(yb);
}
