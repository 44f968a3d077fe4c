/* bench_ops.c - the compute layer's ops (src/core/ops.h) at every CPU level
 * this machine has, against the scalar reference in the same run: per op,
 * the median thread CPU time per call over interleaved repetitions (ref,
 * sse4, avx2, ..., ref, sse4, avx2, ...), so load from other processes
 * skews the tables alike. One JSON line per (op, table) with the speed-up
 * over the plain-C reference.
 *
 * Not a test and not built by make:
 *   cc -O2 -march=x86-64-v2 -pthread -I. tests/bench_ops.c build/libomni.a \
 *      $(pkg-config --libs openblas) -lm -o bench_ops && ./bench_ops [reps] */
#include "src/core/cpu.h"
#include "src/core/ops.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { N = 4096, HD = 64, NK = 512, MAX_REPS = 64 };

static float a[N], b[N], w[N], y[N];
static uint16_t h[N];
static float kv[NK * HD], q[HD], sc[NK], acc[HD];
static const float *rows[NK];
static const uint16_t *rows16[NK];
static uint16_t kv16[NK * HD];
static volatile float sink;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

enum { OP_DOT, OP_AXPY, OP_DOT_F16, OP_RMSNORM, OP_LAYERNORM, OP_ROPE_NEOX, OP_SOFTMAX,
       OP_GELU_ERF, OP_SWIGLU, OP_ATTN_SCORES, OP_ATTN_WSUM, OP_ATTN_SCORES_F16, N_OPS };
static const char *op_names[N_OPS] = { "dot", "axpy", "dot_f16", "rmsnorm", "layernorm", "rope_neox",
                                       "softmax", "gelu_erf", "swiglu", "attn_scores", "attn_wsum",
                                       "attn_scores_f16" };

/* one call of op at table t (sizes: N floats, or NK keys of HD) */
static void call(const struct omni_ops *t, int op)
{
    switch (op) {
    case OP_DOT: sink = t->dot(a, b, N); break;
    case OP_AXPY: t->axpy(y, 0.5f, a, N); break;
    case OP_DOT_F16: sink = t->dot_f16(a, h, N); break;
    case OP_RMSNORM: t->rmsnorm(y, a, w, N, 1e-6f); break;
    case OP_LAYERNORM: t->layernorm(y, a, w, b, N, 1e-5f); break;
    case OP_ROPE_NEOX: memcpy(y, a, sizeof y); t->rope(y, w, b, 128, true); break;
    case OP_SOFTMAX: memcpy(y, a, sizeof y); t->softmax(y, N); break;
    case OP_GELU_ERF: memcpy(y, a, sizeof y); t->gelu_erf(y, N); break;
    case OP_SWIGLU: memcpy(y, b, sizeof y); t->swiglu(a, y, N); break;
    case OP_ATTN_SCORES: t->attn_scores(sc, q, rows, NK, HD, 0.125f); break;
    case OP_ATTN_WSUM: t->attn_wsum(acc, sc, rows, NK, HD); break;
    case OP_ATTN_SCORES_F16: t->attn_scores_f16(sc, q, rows16, NK, HD, 0.125f); break;
    }
}

static int cmp_double(const void *x, const void *y)
{
    const double d = *(const double *)x - *(const double *)y;
    return (d > 0) - (d < 0);
}

int main(int argc, char **argv)
{
    int reps = argc > 1 ? atoi(argv[1]) : 15;
    if (reps < 1 || reps > MAX_REPS)
        reps = 15;
    for (int i = 0; i < N; i++) {
        a[i] = (float)((i * 37) % 101) / 50.0f - 1.0f;
        b[i] = (float)((i * 53) % 97) / 48.0f - 1.0f;
        w[i] = 1.0f + (float)(i % 7) * 0.01f;
        h[i] = 0x3c00; /* 1.0 */
    }
    for (int i = 0; i < NK * HD; i++) {
        kv[i] = (float)((i * 29) % 89) / 44.0f - 1.0f;
        kv16[i] = 0x3800; /* 0.5 */
    }
    for (int i = 0; i < NK; i++)
        rows[i] = kv + (size_t)i * HD, rows16[i] = kv16 + (size_t)i * HD, sc[i] = 1.0f / NK;
    for (int i = 0; i < HD; i++)
        q[i] = 0.1f * (float)(i % 5);

    const int max_level = omni_cpu()->max_level;
    /* the reference first, then the distinct tables of the levels this CPU
     * has (levels past avx512 add nothing to the ops) */
    const struct omni_ops *tabs[OMNI_CPU_LEVELS + 1] = { omni_ops_reference() };
    const char *tab_level[OMNI_CPU_LEVELS + 1] = { "-" };
    int n_levels = 1;
    for (int l = 0; l <= max_level; l++)
        if (strcmp(omni_ops_at(l)->name, tabs[n_levels - 1]->name) != 0) {
            tab_level[n_levels] = omni_cpu_level_name(l);
            tabs[n_levels++] = omni_ops_at(l);
        }
    enum { INNER = 200 };
    for (int op = 0; op < N_OPS; op++) {
        double t[OMNI_CPU_LEVELS + 1][MAX_REPS];
        for (int r = 0; r < reps; r++)
            for (int li = 0; li < n_levels; li++) {
                const struct omni_ops *tab = tabs[li];
                const double t0 = now_s();
                for (int k = 0; k < INNER; k++)
                    call(tab, op);
                t[li][r] = (now_s() - t0) / INNER;
            }
        double ref_med = 0;
        for (int li = 0; li < n_levels; li++) {
            qsort(t[li], reps, sizeof(double), cmp_double);
            const double med = t[li][reps / 2];
            if (li == 0)
                ref_med = med;
            printf("{\"op\": \"%s\", \"level\": \"%s\", \"table\": \"%s\", \"us_per_call\": %.3f, "
                   "\"speedup_vs_ref\": %.2f}\n",
                   op_names[op], tab_level[li], tabs[li]->name, med * 1e6,
                   ref_med / med);
        }
    }
    return 0;
}
