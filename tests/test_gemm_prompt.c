/* test_gemm_prompt.c - the prompt GEMM (gemm_prompt_avx512.c: q8_0/q4_0/
 * q5_0 batches from omni_x86_gemm_prompt_min_avx512 rows at AVX-512 VNNI)
 * through omni_matmul at every level this CPU has: rows that cross its
 * chunks (70 blocks: 32 + 32 + 6), partial 16-row panels at both threads'
 * edges, partial 12-row tiles and two activation groups (301 rows) must
 * have the bits of the same rows in a batch of 8 (the act8 form) wherever
 * omni_matmul_same_kernels says the kernels agree, and stay near the float
 * product of the dequantized weights. */
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

static uint64_t prompt_rng = 5;

static float prompt_rand(void) /* uniform in [-1, 1) */
{
    prompt_rng = prompt_rng * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((prompt_rng >> 40) & 0xffffff) / (float)0x800000 - 1.0f;
}

static void prompt_free_tpool(void *tp) { tpool_free(tp); }

TEST(gemm_prompt_rows_equal_act8)
{
    static const int types[] = { GGML_TYPE_Q8_0, GGML_TYPE_Q4_0, GGML_TYPE_Q5_0 };
    static const int64_t batches[] = { 32, 45, 70, 301 };
    enum { NB = 301 };
    const int64_t n_in = 32 * 70, n_out = 37;
    struct tpool *tp = tpool_new(2, NULL, 0);
    test_defer(prompt_free_tpool, tp);
    float *x = malloc(sizeof(float) * (size_t)(n_in * NB));
    float *wf = malloc(sizeof(float) * (size_t)(n_in * n_out));
    float *wd = malloc(sizeof(float) * (size_t)(n_in * n_out));
    float *y = malloc(sizeof(float) * (size_t)(n_out * NB));
    float *y8 = malloc(sizeof(float) * (size_t)(n_out * 8));
    uint8_t *w = malloc(ggml_row_size(GGML_TYPE_Q8_0, n_in) * (size_t)n_out);
    CHECK(tp && x && wf && wd && y && y8 && w);
    for (int64_t i = 0; i < n_in * NB; i++)
        x[i] = prompt_rand();
    for (int64_t i = 0; i < n_in * n_out; i++)
        wf[i] = prompt_rand() * (1.0f + (float)(i % 5));
    const int saved = omni_cpu_level();
    char fail[200] = "";
    for (size_t ti = 0; ti < sizeof types / sizeof *types && !fail[0]; ti++) {
        const int t = types[ti];
        const size_t row = ggml_row_size(t, n_in);
        for (int64_t r = 0; r < n_out; r++) {
            CHECK_EQ(quantize_row(t, wf + r * n_in, w + r * row, n_in), 0);
            CHECK_EQ(dequantize_row(t, w + r * row, wd + r * n_in, n_in), 0);
        }
        const struct omni_tensor wt = { .type = t, .ne = { n_in, n_out }, .data = w };
        for (int level = 0; level <= omni_cpu()->max_level && !fail[0]; level++) {
            if (omni_cpu_set_level(level) != level) /* a level this CPU lacks (avxvnni without AVX-VNNI) */
                continue;
            for (size_t bi = 0; bi < sizeof batches / sizeof *batches && !fail[0]; bi++) {
                const int64_t b = batches[bi];
                omni_matmul(tp, &wt, x, b, y);
                /* the last 8 rows, and the 8 that start at row 8 (a tile's
                 * edge at 12), each as a batch of 8 */
                const int64_t starts[2] = { b - 8, 8 };
                for (int s = 0; s < 2 && !fail[0]; s++) {
                    const int64_t m0 = starts[s];
                    omni_matmul(tp, &wt, x + m0 * n_in, 8, y8);
                    if (omni_matmul_same_kernels(t, b, 8) &&
                        memcmp(y + m0 * n_out, y8, sizeof(float) * (size_t)(8 * n_out)) != 0)
                        snprintf(fail, sizeof fail, "%s level %s: rows %lld-%lld of %lld differ from a batch of 8",
                                 ggml_type_name(t), omni_cpu_level_name(level), (long long)m0,
                                 (long long)m0 + 7, (long long)b);
                }
                /* near the float product: rows 0, b/2 and b - 1 */
                const int64_t ms[3] = { 0, b / 2, b - 1 };
                for (int k = 0; k < 3 && !fail[0]; k++)
                    for (int64_t r = 0; r < n_out && !fail[0]; r++) {
                        double ref = 0.0, mag = 0.0;
                        for (int64_t i = 0; i < n_in; i++) {
                            ref += (double)x[ms[k] * n_in + i] * wd[r * n_in + i];
                            mag += fabs((double)x[ms[k] * n_in + i] * wd[r * n_in + i]);
                        }
                        /* Q8_0 activations: ~1/254 of each |x| at worst */
                        if (fabs(y[ms[k] * n_out + r] - ref) > 0.01 * mag + 1e-3)
                            snprintf(fail, sizeof fail, "%s level %s batch %lld: y[%lld][%lld] %g, float %g",
                                     ggml_type_name(t), omni_cpu_level_name(level), (long long)b,
                                     (long long)ms[k], (long long)r, y[ms[k] * n_out + r], ref);
                    }
            }
        }
    }
    omni_cpu_set_level(saved);
    test_release(tp);
    free(x);
    free(wf);
    free(wd);
    free(y);
    free(y8);
    free(w);
    CHECK_MSG(!fail[0], "%s", fail);
}
