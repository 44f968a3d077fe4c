/* membw.c - streaming read bandwidth passes (membw.h): the probe behind
 * bench's bandwidth_fraction and tests/bench_decode.c's kernel-vs-memory
 * comparisons. */
#include "src/core/membw.h"

#include "src/core/omni.h"
#include "src/core/threadpool.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define MEMBW_STEP 256 /* bytes per loop step and per slice granule */

struct membw_job {
    const uint8_t *buf;
    size_t per;          /* bytes per thread, a multiple of MEMBW_STEP */
    int mode;
    uint64_t sum[64];    /* per thread, so the reads cannot be optimized out */
};

/* Eight independent accumulators of 32-byte vectors: enough loads in flight
 * that memory, not the add chain, limits the loop at any ISA level. */
typedef uint64_t membw_vec __attribute__((vector_size(32)));

static uint64_t sum_vec(const uint8_t *p, size_t n, int prefetch)
{
    const membw_vec *v = (const membw_vec *)(const void *)p;
    membw_vec a[8] = { { 0 } };
    if (prefetch)
        for (size_t i = 0; i < n / 32; i += 8) {
            for (int k = 0; k < MEMBW_STEP; k += 64)
                __builtin_prefetch((const char *)(v + i) + 8192 + k, 0, 3);
            for (int k = 0; k < 8; k++)
                a[k] += v[i + k];
        }
    else
        for (size_t i = 0; i < n / 32; i += 8)
            for (int k = 0; k < 8; k++)
                a[k] += v[i + k];
    membw_vec t = a[0] + a[1] + a[2] + a[3] + a[4] + a[5] + a[6] + a[7];
    return t[0] + t[1] + t[2] + t[3];
}

/* Four streams a thread: its slice in quarters read side by side, a line of
 * each per step, each prefetched 2 KB ahead. On the Intel host one stream a
 * core read ~24 GB/s where decode's four-stream dots read ~35: a probe that
 * reads less than the kernels it judges is no limit. n: a multiple of
 * MEMBW_STEP. */
static uint64_t sum_vec_streams(const uint8_t *p, size_t n)
{
    const size_t q = n / 4 / 64 * 64; /* bytes per stream */
    const uint8_t *s[4] = { p, p + q, p + 2 * q, p + 3 * q };
    membw_vec a[8] = { { 0 } };
    for (size_t i = 0; i < q; i += 64)
        for (int k = 0; k < 4; k++) {
            const membw_vec *v = (const membw_vec *)(const void *)(s[k] + i);
            __builtin_prefetch(s[k] + i + 2048, 0, 3);
            a[2 * k] += v[0];
            a[2 * k + 1] += v[1];
        }
    membw_vec t = a[0] + a[1] + a[2] + a[3] + a[4] + a[5] + a[6] + a[7];
    /* 4q and n are whole steps, so the rest is too */
    return t[0] + t[1] + t[2] + t[3] + sum_vec(p + 4 * q, n - 4 * q, 0);
}

/* The plainest read: no vectors (so no ISA level can flatter it), no
 * software prefetch. */
__attribute__((optimize("no-tree-vectorize"))) static uint64_t sum_scalar(const uint8_t *p, size_t n)
{
    const uint64_t *w = (const uint64_t *)(const void *)p;
    uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    for (size_t i = 0; i < n / 8; i += 4) {
        s0 += w[i];
        s1 += w[i + 1];
        s2 += w[i + 2];
        s3 += w[i + 3];
    }
    return s0 + s1 + s2 + s3;
}

static void membw_run(void *arg, int ith, int nth)
{
    (void)nth;
    struct membw_job *j = arg;
    const uint8_t *p = j->buf + j->per * (size_t)ith;
    j->sum[ith & 63] = j->mode == OMNI_MEMBW_SCALAR    ? sum_scalar(p, j->per)
                       : j->mode == OMNI_MEMBW_STREAMS ? sum_vec_streams(p, j->per)
                                                       : sum_vec(p, j->per, j->mode == OMNI_MEMBW_VEC_PF);
}

void *omni_membw_alloc(size_t bytes)
{
    bytes = (bytes + 63) & ~(size_t)63;
    void *buf = bytes ? aligned_alloc(64, bytes) : NULL;
    if (buf)
        memset(buf, 1, bytes);
    return buf;
}

void omni_membw_free(void *buf)
{
    free(buf);
}

double omni_membw_pass(struct tpool *tp, const void *buf, size_t bytes, enum omni_membw_mode mode)
{
    const int nth = tp ? tpool_size(tp) : 1;
    if (!buf || mode < 0 || mode >= OMNI_MEMBW_MODES || nth < 1)
        return 0;
    struct membw_job j = { .buf = buf, .per = bytes / (size_t)nth / MEMBW_STEP * MEMBW_STEP, .mode = mode };
    if (!j.per)
        return 0;
    const double t0 = omni_time_s();
    if (tp)
        tpool_run(tp, membw_run, &j);
    else
        membw_run(&j, 0, 1);
    const double t = omni_time_s() - t0;
    return t > 0 ? (double)(j.per * (size_t)nth) / t : 0;
}

const char *omni_membw_mode_name(enum omni_membw_mode mode)
{
    static const char *const names[OMNI_MEMBW_MODES] = { "vec", "vec_pf", "vec_4s", "scalar" };
    return mode >= 0 && mode < OMNI_MEMBW_MODES ? names[mode] : "?";
}
