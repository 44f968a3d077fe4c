/* bench_gemm_prompt.c - the AVX-512 VNNI prompt GEMM (gemm_prompt_avx512.c)
 * against the act8 form of gemm_avx512.c on one thread, for one weight type,
 * shape and batch: best of R runs of each on the thread CPU clock, the
 * speed in G multiply-adds per CPU second, and the count of outputs whose
 * bits differ (the two forms must agree bit for bit; exit status 1 if not).
 *
 * Not a test and not built by make; it needs an AVX-512 VNNI CPU:
 *   make BUILD=build build/libomni.a
 *   cc -O2 -pthread -I. tests/bench_gemm_prompt.c build/libomni.a $(pkg-config --libs openblas) -lm \
 *      -o /tmp/bench_gemm_prompt
 *   /tmp/bench_gemm_prompt q4_0 896 4864 512 3     (type n_in n_out batch reps) */
#include "src/core/arch/x86/x86.h"
#include "src/core/cpu.h"
#include "src/core/quant.h"
#include "src/core/tensor.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double cpu_now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static uint64_t rng = 1;

static float frand(void) /* uniform in [-1, 1) */
{
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((rng >> 40) & 0xffffff) / (float)0x800000 - 1.0f;
}

int main(int argc, char **argv)
{
    if (argc < 5) {
        fprintf(stderr, "usage: %s q8_0|q4_0|q5_0 N_IN N_OUT BATCH [REPS]\n", argv[0]);
        return 2;
    }
    const int t = !strcmp(argv[1], "q8_0") ? GGML_TYPE_Q8_0 : !strcmp(argv[1], "q5_0") ? GGML_TYPE_Q5_0 : GGML_TYPE_Q4_0;
    const int64_t n_in = atoll(argv[2]), n_out = atoll(argv[3]), nbat = atoll(argv[4]);
    const int reps = argc > 5 ? atoi(argv[5]) : 3;
    if (omni_cpu()->max_level < OMNI_CPU_AVX512VNNI || n_in < 32 || n_in % 32 || n_out < 1 || nbat < 1) {
        fprintf(stderr, "needs AVX-512 VNNI and n_in a multiple of 32\n");
        return 2;
    }
    const size_t wr = ggml_row_size(t, n_in), xr = ggml_row_size(GGML_TYPE_Q8_0, n_in);
    const int64_t nbp = omni_x86_gemm_q8_0_blocks(n_in);
    float *f = malloc(sizeof(float) * (size_t)n_in);
    uint8_t *w = malloc(wr * (size_t)n_out), *xq = malloc(xr * (size_t)nbat);
    float *ad = malloc(sizeof(float) * (size_t)(nbat * nbp));
    int32_t *corr = malloc(sizeof(int32_t) * (size_t)(nbat * nbp));
    float *y1 = malloc(sizeof(float) * (size_t)(nbat * n_out)), *y2 = malloc(sizeof(float) * (size_t)(nbat * n_out));
    void *scratch = aligned_alloc(64, (omni_x86_gemm_prompt_avx512_scratch(n_in, nbat) + 63) & ~(size_t)63);
    if (!f || !w || !xq || !ad || !corr || !y1 || !y2 || !scratch)
        return 1;
    for (int64_t r = 0; r < n_out; r++) {
        for (int64_t i = 0; i < n_in; i++)
            f[i] = frand();
        quantize_row(t, f, w + (size_t)r * wr, n_in);
    }
    for (int64_t r = 0; r < nbat; r++) {
        for (int64_t i = 0; i < n_in; i++)
            f[i] = frand();
        quantize_row(GGML_TYPE_Q8_0, f, xq + (size_t)r * xr, n_in);
    }
    omni_x86_gemm_q8_0_prep(omni_x86_gemm_q8_0_offset_avx512(t), xq, xr, nbat, n_in, ad, corr);
    double best_a = 1e30, best_p = 1e30;
    for (int k = 0; k < reps; k++) { /* interleaved: act8, prompt, act8, ... */
        const double t0 = cpu_now();
        omni_x86_gemm_q8_0_avx512(t, w, wr, n_in, n_out, xq, xr, ad, corr, nbat, y1, 0, n_out);
        const double t1 = cpu_now();
        omni_x86_gemm_prompt_avx512(t, w, wr, n_in, n_out, xq, xr, ad, corr, nbat, y2, 0, n_out, scratch);
        const double t2 = cpu_now();
        best_a = t1 - t0 < best_a ? t1 - t0 : best_a;
        best_p = t2 - t1 < best_p ? t2 - t1 : best_p;
    }
    int64_t bad = 0;
    for (int64_t i = 0; i < nbat * n_out; i++)
        bad += memcmp(y1 + i, y2 + i, sizeof(float)) != 0;
    const double mac = (double)n_in * (double)n_out * (double)nbat;
    printf("%s %lldx%lld batch %lld: act8 %.2f ms (%.1f G/s), prompt %.2f ms (%.1f G/s), %.2fx, %lld outputs differ\n",
           ggml_type_name(t), (long long)n_in, (long long)n_out, (long long)nbat, best_a * 1e3, mac / best_a * 1e-9,
           best_p * 1e3, mac / best_p * 1e-9, best_a / best_p, (long long)bad);
    free(f);
    free(w);
    free(xq);
    free(ad);
    free(corr);
    free(y1);
    free(y2);
    free(scratch);
    return bad != 0;
}
