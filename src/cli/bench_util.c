/* bench_util.c - statistics and decode timing shared by the bench
 * subcommands (bench, bench-vision, bench-stt, bench-engine, bench-serve). */
#include "src/cli/bench_util.h"

#include "llm/model.h"
#include "src/core/gguf.h"
#include "src/core/membw.h"
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

double bench_read_bandwidth(struct tpool *tp, size_t bytes, int passes)
{
    double plain;
    return bench_read_bandwidth2(tp, bytes, passes, &plain);
}

double bench_read_bandwidth2(struct tpool *tp, size_t bytes, int passes, double *plain)
{
    *plain = 0;
    void *buf = omni_membw_alloc(bytes);
    if (!buf)
        return 0;
    double best = 0;
    /* passes alternate a plain read (the hardware prefetchers alone) and one
     * with software prefetches: on the Intel host decode read more per core
     * than the plain loop did (bandwidth_fraction above 1) */
    for (int p = 0; p < passes; p++) {
        const int pf = p & 1;
        const double bw = omni_membw_pass(tp, buf, bytes, pf ? OMNI_MEMBW_VEC_PF : OMNI_MEMBW_VEC);
        if (bw > best)
            best = bw;
        if (!pf && bw > *plain)
            *plain = bw;
    }
    omni_membw_free(buf);
    return best;
}

double bench_read_bandwidth3(struct tpool *tp, size_t bytes, int rounds, double *plain, double *scalar)
{
    *plain = *scalar = 0;
    void *buf = omni_membw_alloc(bytes);
    if (!buf)
        return 0;
    double best = 0;
    for (int r = 0; r < rounds; r++)
        for (int md = 0; md < OMNI_MEMBW_MODES; md++) {
            const double bw = omni_membw_pass(tp, buf, bytes, md);
            if (md == OMNI_MEMBW_SCALAR) {
                if (bw > *scalar)
                    *scalar = bw;
                continue;
            }
            if (bw > best)
                best = bw;
            if (md == OMNI_MEMBW_VEC && bw > *plain)
                *plain = bw;
        }
    omni_membw_free(buf);
    return best;
}

size_t bench_decode_bytes(const struct llm_model *m)
{
    /* every matrix a decoded token multiplies; of experts only the used ones */
    return llm_model_decode_bytes(m);
}
