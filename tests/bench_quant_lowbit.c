/* bench_quant_lowbit.c - dot-product and dequantization throughput of each
 * weight type at each CPU level, with q4_K at the same level in the same run
 * as the baseline, one JSON line per (type, level).
 *
 * The weights (n_rows x 4096, about 0.5 MB) stay in L2, so this measures the
 * kernels, not memory. Repetitions of all types are interleaved and timed in
 * thread CPU time (median), so load from other processes skews them alike.
 * Not a test and not built by make:
 *   cc -O2 -march=native -pthread -I. tests/bench_quant_lowbit.c build-h6/libomni.a \
 *      $(pkg-config --libs openblas) -lm -o /tmp/bench_quant_lowbit
 *   /tmp/bench_quant_lowbit [reps]
 * Fields: gelem_s (weight elements dotted per second, billions), ns_per_256
 * (one super-block), cols4_ns_per_256 (vec_dot_n on 4 activation rows, per
 * row; 0 where the type has none at that level), deq_gelem_s
 * (dequantization), ratio_vs_q4_K (dot speed relative to q4_K at that level;
 * above 1 = faster). */
#include "src/core/cpu.h"
#include "src/core/quant.h"
#include "src/core/tensor.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { N_IN = 4096, N_ROWS = 96, MAX_REPS = 64 };
#define MEM_BYTES ((size_t)192 << 20) /* beyond any L3 */

static const int types[] = { GGML_TYPE_Q4_K, GGML_TYPE_Q2_K, GGML_TYPE_Q3_K, GGML_TYPE_IQ4_NL,
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

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_d);
    return v[n / 2];
}

int main(int argc, char **argv)
{
    int reps = argc > 1 ? atoi(argv[1]) : 15;
    if (reps < 1 || reps > MAX_REPS)
        reps = 15;
    static float wf[N_ROWS * N_IN], x[N_IN], deq[N_ROWS * N_IN];
    uint32_t r = 12345;
    for (int i = 0; i < N_ROWS * N_IN; i++) {
        r = r * 1664525u + 1013904223u;
        wf[i] = ((float)(r >> 8) / (1 << 24) - 0.5f) * 0.1f;
    }
    for (int i = 0; i < N_IN; i++)
        x[i] = wf[i] * 10;
    static uint8_t w[N_TYPES][N_ROWS * N_IN * 2], xq[4][N_IN * 4];
    for (int t = 0; t < N_TYPES; t++)
        if (quantize_row(types[t], wf, w[t], (int64_t)N_ROWS * N_IN) != 0) {
            fprintf(stderr, "quantize %s failed\n", ggml_type_name(types[t]));
            return 1;
        }
    volatile float sink = 0;
    for (int level = 0; level <= omni_cpu()->max_level; level++) {
        static double dot_t[N_TYPES][MAX_REPS], deq_t[N_TYPES][MAX_REPS], n4_t[N_TYPES][MAX_REPS];
        for (int rep = 0; rep < reps; rep++)
            for (int t = 0; t < N_TYPES; t++) {
                const struct omni_quant_ops *op = omni_quant_ops_at(types[t], level);
                const size_t row = ggml_row_size(types[t], N_IN);
                for (int c = 0; c < 4; c++)
                    if (op->from_float)
                        op->from_float(x, xq[c], N_IN);
                    else
                        memcpy(xq[c], x, sizeof x);
                double t0 = cpu_s();
                for (int k = 0; k < 4; k++)
                    for (int i = 0; i < N_ROWS; i++)
                        sink += op->vec_dot(N_IN, w[t] + (size_t)i * row, xq[0]);
                double t1 = cpu_s();
                op->to_float(w[t], deq, (int64_t)N_ROWS * N_IN);
                double t2 = cpu_s();
                float s4[4];
                if (op->vec_dot_n)
                    for (int i = 0; i < N_ROWS; i++) {
                        op->vec_dot_n(N_IN, w[t] + (size_t)i * row, xq[0], sizeof xq[0], 4, s4, 1);
                        sink += s4[3];
                    }
                double t3 = cpu_s();
                dot_t[t][rep] = (t1 - t0) / 4;
                deq_t[t][rep] = t2 - t1;
                n4_t[t][rep] = op->vec_dot_n ? (t3 - t2) / 4 : 0;
            }
        double base = 0;
        for (int t = 0; t < N_TYPES; t++) {
            const double d = median(dot_t[t], reps), q = median(deq_t[t], reps), d4 = median(n4_t[t], reps);
            const double n = (double)N_ROWS * N_IN;
            if (t == 0)
                base = d;
            printf("{\"bench\": \"quant_dot\", \"type\": \"%s\", \"level\": \"%s\", \"gelem_s\": %.3f, "
                   "\"ns_per_256\": %.2f, \"cols4_ns_per_256\": %.2f, \"deq_gelem_s\": %.3f, "
                   "\"ratio_vs_q4_K\": %.3f}\n",
                   ggml_type_name(types[t]), omni_cpu_level_name(level), n / d * 1e-9,
                   d / n * 256 * 1e9, d4 / n * 256 * 1e9, n / q * 1e-9, base / d);
        }
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
            const struct omni_quant_ops *op = omni_quant_ops(types[t]);
            const size_t row = ggml_row_size(types[t], N_IN);
            if (op->from_float)
                op->from_float(x, xq[0], N_IN);
            else
                memcpy(xq[0], x, sizeof x);
            const size_t rows = MEM_BYTES / row, chunk = row * N_ROWS;
            for (size_t off = 0; off + chunk <= rows * row; off += chunk)
                memcpy(big + off, w[t], chunk);
            for (size_t off = rows / N_ROWS * chunk; off < rows * row; off += row)
                memcpy(big + off, w[t], row);
            double t0 = cpu_s();
            for (size_t i = 0; i < rows; i++) {
                sink += op->vec_dot(N_IN, big + (size_t)i * row, xq[0]);
            }
            mem_t[t][rep] = (cpu_s() - t0) / (double)rows; /* per row */
        }
    for (int t = 0; t < N_TYPES; t++) {
        qsort(mem_t[t], (size_t)mem_reps, sizeof(double), cmp_d);
        const double d = mem_t[t][mem_reps / 2];
        printf("{\"bench\": \"quant_dot_mem\", \"type\": \"%s\", \"level\": \"%s\", \"gb_s\": %.2f, \"ns_per_256\": %.2f}\n",
               ggml_type_name(types[t]), omni_cpu_level_name(omni_cpu_level()), (double)ggml_row_size(types[t], N_IN) / d * 1e-9,
               d / N_IN * 256 * 1e9);
    }
    free(big);
    return sink == 12345.0f; /* keeps the dots from being optimized away */
}
