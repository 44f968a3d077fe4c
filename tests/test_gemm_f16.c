/* test_gemm_f16.c - the F16C prompt GEMMs (src/core/arch/x86/gemm_f16_avx2.c,
 * gemm_f16_avx512.c: each level from avx2 up that this CPU has) through
 * omni_matmul: F16 weights whose rows are no multiple of 8 or of the
 * 256-value slab, row counts that leave partial 16- and 32-row strips and
 * 6-row panels, 1-3 threads; against a double reference of the same F16
 * values, and each output's bits equal across batch sizes, thread counts
 * and levels. The larger case spans three K slabs (partial sums kept
 * between them), more than one 128-row weight group a thread and two
 * 96-row blocks of x. */
#include "src/core/cpu.h"
#include "src/core/matmul.h"
#include "src/core/quant.h"
#include "src/core/tensor.h"
#include "src/core/threadpool.h"
#include "tests/test.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint64_t f16_rng = 3;
static float f16_frand(void)
{
    f16_rng = f16_rng * 6364136223846793005ULL + 1442695040888963407ULL;
    return (float)((f16_rng >> 40) * (1.0 / (1 << 23))) - 1.0f;
}

static void free_pool(void *p) { tpool_free(p); }

/* omni_matmul of random F16 weights n_out x n_in at each batch size of
 * batches (the first one OMNI_MATMUL_BLAS_MIN) and 1-3 threads */
static void check_sizes(int N_IN, int N_OUT, const int64_t *batches, size_t n_batches)
{
    const int64_t MAX_B = batches[n_batches - 1];
    ggml_half *w = malloc(sizeof(ggml_half) * N_IN * N_OUT);
    float *wf = malloc(sizeof(float) * N_IN * N_OUT), *x = malloc(sizeof(float) * N_IN * MAX_B);
    float *y = malloc(sizeof(float) * N_OUT * MAX_B), *first = malloc(sizeof(float) * N_OUT * MAX_B);
    struct tpool *pools[4] = { NULL, NULL, tpool_new(2, NULL, 0), tpool_new(3, NULL, 0) };
    test_defer(free_pool, pools[2]);
    test_defer(free_pool, pools[3]);
    CHECK(w && wf && x && y && first && pools[2] && pools[3]);
    for (int i = 0; i < N_IN * N_OUT; i++)
        wf[i] = f16_frand();
    quantize_row_f16_ref(wf, w, N_IN * N_OUT);
    dequantize_row_f16(w, wf, N_IN * N_OUT);
    for (int i = 0; i < N_IN * MAX_B; i++)
        x[i] = f16_frand();
    const struct omni_tensor t = { .type = GGML_TYPE_F16, .ne = { N_IN, N_OUT }, .data = w };
    char fail[200] = "";
    for (int lv = OMNI_CPU_AVX2; lv <= omni_cpu()->max_level && !fail[0]; lv++)
    for (size_t bi = 0; bi < n_batches && !fail[0]; bi++)
        for (int nt = 1; nt <= 3 && !fail[0]; nt++) {
            if (omni_cpu_set_level(lv) != lv)
                break; /* AVXVNNI on an AVX-512 CPU without AVX-VNNI */
            const int64_t nb = batches[bi];
            omni_matmul(pools[nt], &t, x, nb, y);
            for (int64_t b = 0; b < nb && !fail[0]; b++)
                for (int o = 0; o < N_OUT; o++) {
                    double want = 0, mag = 0;
                    for (int k = 0; k < N_IN; k++) {
                        want += (double)x[b * N_IN + k] * wf[o * N_IN + k];
                        mag += fabs((double)x[b * N_IN + k] * wf[o * N_IN + k]);
                    }
                    const float got = y[b * N_OUT + o];
                    if (fabs(got - want) > 1e-5 * mag + 1e-6) {
                        snprintf(fail, sizeof fail, "level %s, rows %lld, %d threads: y[%lld][%d] = %g, want %g",
                                 omni_cpu_level_name(lv), (long long)nb, nt, (long long)b, o, got, want);
                        break;
                    }
                    /* the same bits as the first batch size, thread count
                     * and level (the AVX2 and AVX-512 kernels sum alike) */
                    if (lv == OMNI_CPU_AVX2 && bi == 0 && nt == 1)
                        first[b * N_OUT + o] = got;
                    else if (b < OMNI_MATMUL_BLAS_MIN && memcmp(&got, &first[b * N_OUT + o], sizeof got)) {
                        snprintf(fail, sizeof fail,
                                 "level %s, rows %lld, %d threads: y[%lld][%d] = %.9g, not %.9g as at avx2, %d rows",
                                 omni_cpu_level_name(lv), (long long)nb, nt, (long long)b, o, got,
                                 first[b * N_OUT + o], OMNI_MATMUL_BLAS_MIN);
                        break;
                    }
                }
        }
    free(w);
    free(wf);
    free(x);
    free(y);
    free(first);
    CHECK_MSG(!fail[0], "%s", fail);
}

TEST(gemm_f16_prompt_sizes_against_reference)
{
    if (omni_cpu()->max_level < OMNI_CPU_AVX2) {
        test_skip("no AVX2 on this CPU (the kernel is not dispatched)");
        return;
    }
    /* 300 = 256 + 44: a slab and a tail, not a multiple of 8 */
    const int64_t batches[] = { OMNI_MATMUL_BLAS_MIN, 33, 35, 37, 64, 70 }; /* last panels of 2, 3, 5, 1, 4, 4 rows */
    check_sizes(300, 45, batches, sizeof batches / sizeof batches[0]);
}

TEST(gemm_f16_slabs_groups_blocks)
{
    if (omni_cpu()->max_level < OMNI_CPU_AVX2) {
        test_skip("no AVX2 on this CPU (the kernel is not dispatched)");
        return;
    }
    /* 600 = 256 + 256 + 88; 300 weight rows: 128 + 22 a thread at 2
     * threads, 128 + 128 + 44 at one; 110 rows: 18 panels and one of 2 */
    const int64_t batches[] = { OMNI_MATMUL_BLAS_MIN, 97, 110 };
    check_sizes(600, 300, batches, sizeof batches / sizeof batches[0]);
}
