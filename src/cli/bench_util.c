/* bench_util.c - statistics and decode timing shared by the bench
 * subcommands (bench, bench-vision, bench-stt, bench-engine, bench-serve). */
#include "src/cli/bench_util.h"

#include "llm/model.h"
#include "src/core/gguf.h"
#include "src/core/omni.h"
#include "src/core/threadpool.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int bench_cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

void bench_sort(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, bench_cmp_double);
}

double bench_median(double *v, int n)
{
    bench_sort(v, n);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

int32_t bench_argmax_finite(const float *row, int n)
{
    int32_t best = 0;
    for (int i = 0; i < n; i++) {
        if (!isfinite(row[i]))
            return -1;
        if (row[i] > row[best])
            best = i;
    }
    return best;
}

double bench_decode(const char *cmd, struct llm_ctx *ctx, struct llm_kv *kv,
                    const struct llm_seq_view *seq, int32_t tok, int pos0, int n_gen,
                    float *logits, int n_vocab, const int32_t *seq_id)
{
    double t = 0;
    for (int i = 0; i < n_gen && tok >= 0; i++) {
        int32_t p = pos0 + i;
        struct llm_batch b = { .n_tokens = 1, .token = &tok, .pos = &p, .seq = seq_id };
        double t0 = omni_time_s();
        int rc = llm_forward(ctx, &b, kv, seq, logits);
        t += omni_time_s() - t0;
        if (rc != 1) {
            fprintf(stderr, "%s: decode step %d failed: %s\n", cmd, i,
                    rc < 0 ? omni_strerror(rc) : "wrong number of logit rows");
            return -1;
        }
        tok = bench_argmax_finite(logits, n_vocab);
    }
    if (tok < 0) {
        fprintf(stderr, "%s: non-finite logits (NaN or inf) - the forward pass is broken\n", cmd);
        return -1;
    }
    return t;
}

// ---- read bandwidth ----------------------------------------------------------

struct bw_job {
    const uint64_t *buf;
    size_t n;            /* uint64 words */
    int prefetch;        /* software prefetch 8 KB ahead (as decode's rows ahead) */
    uint64_t sum[64];    /* per thread, so the reads cannot be optimized out */
};

/* Eight independent accumulators of 32-byte vectors: enough loads in flight
 * that memory, not the add chain, limits the loop at any ISA level. */
typedef uint64_t bw_vec __attribute__((vector_size(32)));

static void bw_sum(void *arg, int ith, int nth)
{
    struct bw_job *j = arg;
    const size_t per = j->n / 4 / (size_t)nth * 4 & ~(size_t)31; /* whole 256-byte steps */
    const bw_vec *v = (const bw_vec *)(j->buf + per * (size_t)ith);
    bw_vec a[8] = { { 0 } };
    if (j->prefetch)
        for (size_t i = 0; i + 8 <= per / 4; i += 8) {
            for (int k = 0; k < 256; k += 64)
                __builtin_prefetch((const char *)(v + i) + 8192 + k, 0, 3);
            for (int k = 0; k < 8; k++)
                a[k] += v[i + k];
        }
    else
        for (size_t i = 0; i + 8 <= per / 4; i += 8)
            for (int k = 0; k < 8; k++)
                a[k] += v[i + k];
    bw_vec t = a[0] + a[1] + a[2] + a[3] + a[4] + a[5] + a[6] + a[7];
    j->sum[ith & 63] = t[0] + t[1] + t[2] + t[3];
}

double bench_read_bandwidth(struct tpool *tp, size_t bytes, int passes)
{
    double plain;
    return bench_read_bandwidth2(tp, bytes, passes, &plain);
}

double bench_read_bandwidth2(struct tpool *tp, size_t bytes, int passes, double *plain)
{
    *plain = 0;
    struct bw_job j = { .n = bytes / sizeof(uint64_t) };
    uint64_t *buf = aligned_alloc(64, j.n * sizeof(uint64_t));
    if (!buf)
        return 0;
    memset(buf, 1, j.n * sizeof(uint64_t)); /* real pages, not the shared zero page */
    j.buf = buf;
    const int nth = tpool_size(tp);
    const size_t read = (j.n / 4 / (size_t)nth * 4 & ~(size_t)31) * (size_t)nth * sizeof(uint64_t);
    double best = 0;
    /* passes alternate a plain read (the hardware prefetchers alone) and one
     * with software prefetches: on the Intel host decode read more per core
     * than the plain loop did (bandwidth_fraction above 1) */
    for (int p = 0; p < passes; p++) {
        j.prefetch = p & 1;
        double t0 = omni_time_s();
        tpool_run(tp, bw_sum, &j);
        double bw = (double)read / (omni_time_s() - t0);
        if (bw > best)
            best = bw;
        if (!j.prefetch && bw > *plain)
            *plain = bw;
    }
    free(buf);
    return best;
}

size_t bench_decode_bytes(const struct llm_model *m)
{
    /* every matrix a decoded token multiplies; of experts only the used ones */
    return llm_model_decode_bytes(m);
}
