/* bench_deltanet.c - the Gated DeltaNet recurrence of one decoded token at
 * Qwen3-Next / Qwen3.5's head shape (32 value heads of 128 x 128 floats,
 * 2 MiB of state per layer, 3 layers' states so they do not all stay in
 * L2): the ops table's delta_rule of each CPU level against the plain-C
 * reference (the loop deltanet.c ran before the table had it), thread CPU
 * time per token-layer, medians over interleaved repetitions (ref, sse4,
 * avx2, ref, ...), so other processes' load skews them alike. One JSON line
 * per table with its speed-up over the reference.
 *
 * Not a test and not built by make:
 *   cc -O2 -march=x86-64-v2 -pthread -I. tests/bench_deltanet.c build/libomni.a \
 *      $(pkg-config --libs openblas) -lm -o bench_deltanet && ./bench_deltanet [reps] */
#include "src/core/cpu.h"
#include "src/core/ops.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { NV = 32, DK = 128, DV = 128, LAYERS = 3, MAX_REPS = 64, TOKENS = 8 };

static double cpu_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int cmp(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
    int reps = argc > 1 ? atoi(argv[1]) : 15;
    if (reps < 1 || reps > MAX_REPS)
        reps = 15;
    const size_t head = (size_t)DK * DV, layer = NV * head;
    float *S = malloc(LAYERS * layer * sizeof(float));
    float q[DK], k[DK], v[DV], o[DV];
    unsigned seed = 1;
    for (size_t i = 0; i < LAYERS * layer; i++)
        S[i] = (float)((seed = seed * 1103515245u + 12345u) >> 16 & 0xff) / 2560.0f - 0.05f;
    for (int i = 0; i < DK; i++)
        q[i] = 0.01f * (i % 7), k[i] = 0.088f * ((i % 5) - 2) / 2.0f;
    for (int j = 0; j < DV; j++)
        v[j] = 0.1f * ((j % 9) - 4);
    const struct omni_ops *tabs[8];
    int n_tab = 0;
    tabs[n_tab++] = omni_ops_reference();
    for (int lvl = 0; lvl <= omni_cpu()->max_level && n_tab < 8; lvl++)
        if (lvl == 0 || omni_ops_at(lvl)->delta_rule != omni_ops_at(lvl - 1)->delta_rule)
            tabs[n_tab++] = omni_ops_at(lvl);
    static double t[8][MAX_REPS];
    for (int r = 0; r < reps; r++)
        for (int ti = 0; ti < n_tab; ti++) {
            const double t0 = cpu_s();
            for (int tok = 0; tok < TOKENS; tok++)
                for (int l = 0; l < LAYERS; l++)
                    for (int h = 0; h < NV; h++)
                        tabs[ti]->delta_rule(S + l * layer + h * head, q, k, v, 0.97f, 0.5f, DK, DV, o);
            t[ti][r] = (cpu_s() - t0) / (TOKENS * LAYERS);
        }
    double ref_ms = 0;
    for (int ti = 0; ti < n_tab; ti++) {
        qsort(t[ti], (size_t)reps, sizeof(double), cmp);
        const double ms = t[ti][reps / 2] * 1e3;
        if (!ti)
            ref_ms = ms;
        printf("{\"op\":\"delta_rule\",\"table\":\"%s\",\"heads\":%d,\"dk\":%d,\"dv\":%d,"
               "\"ms_per_layer_token\":%.4f,\"gb_s_state\":%.2f,\"speedup_vs_ref\":%.2f}\n",
               tabs[ti]->name, NV, DK, DV, ms, 2.0 * layer * sizeof(float) / (ms * 1e-3) / 1e9,
               ref_ms / ms);
    }
    free(S);
    return 0;
}
