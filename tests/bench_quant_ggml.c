/* bench_quant_ggml.c - llama.cpp's CPU dot kernels on the setup of
 * tests/bench_quant_lowbit.c (same weights, 96 rows x 4096 in L2, one
 * thread, thread CPU time, median), for comparing the two per type. It calls
 * ggml through its public API only (ggml_quantize_chunk for the weights, the
 * CPU type traits' from_float / vec_dot) and prints the same JSON fields.
 * Not a test and not built by make; needs a llama.cpp CPU build:
 *   cc -O2 -I/tmp/llama.cpp/ggml/include tests/bench_quant_ggml.c \
 *      -L/tmp/llama.cpp/build/bin -lggml-cpu -lggml-base -lm -o /tmp/bench_quant_ggml
 *   LD_LIBRARY_PATH=/tmp/llama.cpp/build/bin /tmp/bench_quant_ggml [reps]
 * Run it alternately with bench_quant_lowbit so that machine load hits both. */
#include "ggml-cpu.h"
#include "ggml.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { N_IN = 4096, N_ROWS = 96, MAX_REPS = 64 };
#define MEM_BYTES ((size_t)192 << 20) /* beyond any L3 */

static const enum ggml_type types[] = { GGML_TYPE_Q4_K, GGML_TYPE_Q2_K, GGML_TYPE_Q3_K, GGML_TYPE_IQ4_NL,
                                        GGML_TYPE_IQ4_XS, GGML_TYPE_MXFP4, GGML_TYPE_Q4_0, GGML_TYPE_Q8_0,
                                        GGML_TYPE_BF16 };
#define N_TYPES (int)(sizeof types / sizeof *types)

static double cpu_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int cmp_d(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
    int reps = argc > 1 ? atoi(argv[1]) : 15;
    if (reps < 1 || reps > MAX_REPS)
        reps = 15;
    ggml_cpu_init();
    static float wf[N_ROWS * N_IN], x[N_IN];
    uint32_t r = 12345; /* the weights of bench_quant_lowbit.c */
    for (int i = 0; i < N_ROWS * N_IN; i++) {
        r = r * 1664525u + 1013904223u;
        wf[i] = ((float)(r >> 8) / (1 << 24) - 0.5f) * 0.1f;
    }
    for (int i = 0; i < N_IN; i++)
        x[i] = wf[i] * 10;
    static uint8_t w[N_TYPES][N_ROWS * N_IN * 2], xq[N_IN * 4];
    static double dot_t[N_TYPES][MAX_REPS];
    for (int t = 0; t < N_TYPES; t++)
        ggml_quantize_chunk(types[t], wf, w[t], 0, N_ROWS, N_IN, NULL);
    volatile float sink = 0;
    for (int rep = 0; rep < reps; rep++)
        for (int t = 0; t < N_TYPES; t++) {
            const struct ggml_type_traits_cpu *tr = ggml_get_type_traits_cpu(types[t]);
            const struct ggml_type_traits_cpu *ta = ggml_get_type_traits_cpu(tr->vec_dot_type);
            const size_t row = ggml_row_size(types[t], N_IN);
            if (ta->from_float)
                ta->from_float(x, xq, N_IN);
            else
                memcpy(xq, x, sizeof x);
            double t0 = cpu_s();
            for (int k = 0; k < 4; k++)
                for (int i = 0; i < N_ROWS; i++) {
                    float s;
                    tr->vec_dot(N_IN, &s, 0, w[t] + (size_t)i * row, 0, xq, 0, 1);
                    sink += s;
                }
            dot_t[t][rep] = (cpu_s() - t0) / 4;
        }
    double base = 0;
    for (int t = 0; t < N_TYPES; t++) {
        qsort(dot_t[t], (size_t)reps, sizeof(double), cmp_d);
        const double d = dot_t[t][reps / 2], n = (double)N_ROWS * N_IN;
        if (t == 0)
            base = d;
        printf("{\"bench\": \"ggml_dot\", \"type\": \"%s\", \"gelem_s\": %.3f, \"ns_per_256\": %.2f, "
               "\"ratio_vs_q4_K\": %.3f}\n",
               ggml_type_name(types[t]), n / d * 1e-9, d / n * 256 * 1e9, base / d);
    }

    /* Memory-bound: one pass of single-row dots over MEM_BYTES of weights
     * (the L2 rows repeated), as a decode step reads its matrices. */
    uint8_t *big = malloc(MEM_BYTES);
    if (!big)
        return 1;
    static double mem_t[N_TYPES][MAX_REPS];
    const int mem_reps = reps < 5 ? reps : 5;
    for (int rep = 0; rep < mem_reps; rep++)
        for (int t = 0; t < N_TYPES; t++) {
            const struct ggml_type_traits_cpu *tr = ggml_get_type_traits_cpu(types[t]);
            const struct ggml_type_traits_cpu *ta = ggml_get_type_traits_cpu(tr->vec_dot_type);
            const size_t row = ggml_row_size(types[t], N_IN);
            if (ta->from_float)
                ta->from_float(x, xq, N_IN);
            else
                memcpy(xq, x, sizeof x);
            const size_t rows = MEM_BYTES / row, chunk = row * N_ROWS;
            for (size_t off = 0; off + chunk <= rows * row; off += chunk)
                memcpy(big + off, w[t], chunk);
            for (size_t off = rows / N_ROWS * chunk; off < rows * row; off += row)
                memcpy(big + off, w[t], row);
            double t0 = cpu_s();
            for (size_t i = 0; i < rows; i++) {
                float sd;
                tr->vec_dot(N_IN, &sd, 0, big + (size_t)i * row, 0, xq, 0, 1);
                sink += sd;
            }
            mem_t[t][rep] = (cpu_s() - t0) / (double)rows; /* per row */
        }
    for (int t = 0; t < N_TYPES; t++) {
        qsort(mem_t[t], (size_t)mem_reps, sizeof(double), cmp_d);
        const double d = mem_t[t][mem_reps / 2];
        printf("{\"bench\": \"ggml_dot_mem\", \"type\": \"%s\", \"gb_s\": %.2f, \"ns_per_256\": %.2f}\n",
               ggml_type_name(types[t]), (double)ggml_row_size(types[t], N_IN) / d * 1e-9,
               d / N_IN * 256 * 1e9);
    }
    free(big);
    return sink == 12345.0f;
}
