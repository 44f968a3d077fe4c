/* membw.c - streaming read bandwidth passes (membw.h): the probe behind
 * bench's bandwidth_fraction and tests/bench_decode.c's kernel-vs-memory
 * comparisons. */
#include "src/core/membw.h"

#include "src/core/cpu.h"
#include "src/core/omni.h"
#include "src/core/threadpool.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define MEMBW_STEP 256 /* bytes per loop step and per slice granule */

struct membw_job {
    const uint8_t *buf;
    size_t per;          /* bytes per thread, a multiple of MEMBW_STEP */
    int mode;
    int level;           /* omni_cpu_level(): which build of the loops */
    uint64_t sum[64];    /* per thread, so the reads cannot be optimized out */
};

/* Eight independent accumulators of 32-byte vectors: enough loads in flight
 * that memory, not the add chain, limits the loop at any ISA level. The
 * loops below are compiled twice, for the binary's floor (16-byte SSE loads)
 * and for AVX2 (32-byte loads), and the pass takes the one of the level in
 * use: at the floor, the 4-stream read topped out at 56 GB/s on the Zen 5
 * host (2 threads) where its AVX2 build read 79 and decode's q8_0 dots 73. */
typedef uint64_t membw_vec __attribute__((vector_size(32)));

static inline __attribute__((always_inline)) uint64_t sum_vec(const uint8_t *p, size_t n, int prefetch)
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
 * reads less than the kernels it judges is no limit. On the Zen 5 host
 * (2 threads, AVX2 build) 2 KB ahead read 77-80 GB/s, 4 KB 71-72, none 70-71;
 * 2 or 6-8 streams less. n: a multiple of MEMBW_STEP. */
static inline __attribute__((always_inline)) uint64_t sum_vec_streams(const uint8_t *p, size_t n)
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

static uint64_t sum_vec_base(const uint8_t *p, size_t n, int mode)
{
    return mode == OMNI_MEMBW_STREAMS ? sum_vec_streams(p, n) : sum_vec(p, n, mode == OMNI_MEMBW_VEC_PF);
}

#if defined(__x86_64__)
__attribute__((target("avx2"))) static uint64_t sum_vec_avx2(const uint8_t *p, size_t n, int mode)
{
    return mode == OMNI_MEMBW_STREAMS ? sum_vec_streams(p, n) : sum_vec(p, n, mode == OMNI_MEMBW_VEC_PF);
}

/* STREAMS_512: the four streams in 64-byte loads, two lines of each per
 * step (as the AVX-512 decode dots read); n: a multiple of MEMBW_STEP. */
__attribute__((target("avx2,avx512f"))) static uint64_t sum_streams_512(const uint8_t *p, size_t n)
{
    const size_t q = n / 4 / 128 * 128; /* bytes per stream */
    __m512i a[8];
    for (int k = 0; k < 8; k++)
        a[k] = _mm512_setzero_si512();
    for (size_t i = 0; i < q; i += 128)
        for (int k = 0; k < 4; k++) {
            const uint8_t *x = p + (size_t)k * q + i;
            _mm_prefetch((const char *)x + 2048, _MM_HINT_T0);
            _mm_prefetch((const char *)x + 2048 + 64, _MM_HINT_T0);
            a[2 * k] = _mm512_add_epi64(a[2 * k], _mm512_load_si512(x));
            a[2 * k + 1] = _mm512_add_epi64(a[2 * k + 1], _mm512_load_si512(x + 64));
        }
    for (int k = 1; k < 8; k++)
        a[0] = _mm512_add_epi64(a[0], a[k]);
    /* lanes summed as unsigned: _mm512_reduce_add_epi64 adds signed 64-bit
     * integers in C, whose wrap-around is undefined (UBSan stops on it) */
    uint64_t lane[8], sum = 0;
    _mm512_storeu_si512(lane, a[0]);
    for (int k = 0; k < 8; k++)
        sum += lane[k];
    return sum + sum_vec_avx2(p + 4 * q, n - 4 * q, OMNI_MEMBW_VEC);
}
#endif

/* The plainest read: no vectors (so no ISA level can flatter it), no
 * software prefetch. */
#if defined(__clang__)
#define MEMBW_NO_VECTORIZE
#else
#define MEMBW_NO_VECTORIZE __attribute__((optimize("no-tree-vectorize")))
#endif
MEMBW_NO_VECTORIZE static uint64_t sum_scalar(const uint8_t *p, size_t n)
{
    const uint64_t *w = (const uint64_t *)(const void *)p;
    uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
#if defined(__clang__)
#pragma clang loop vectorize(disable)
#endif
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
    if (j->mode == OMNI_MEMBW_SCALAR) {
        j->sum[ith & 63] = sum_scalar(p, j->per);
        return;
    }
    const int mode = j->mode == OMNI_MEMBW_STREAMS_512 ? OMNI_MEMBW_STREAMS : j->mode;
#if defined(__x86_64__)
    if (j->mode == OMNI_MEMBW_STREAMS_512 && j->level >= OMNI_CPU_AVX512)
        j->sum[ith & 63] = sum_streams_512(p, j->per);
    else if (j->level >= OMNI_CPU_AVX2)
        j->sum[ith & 63] = sum_vec_avx2(p, j->per, mode);
    else
#endif
        j->sum[ith & 63] = sum_vec_base(p, j->per, mode);
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
    struct membw_job j = {
        .buf = buf, .per = bytes / (size_t)nth / MEMBW_STEP * MEMBW_STEP, .mode = mode, .level = omni_cpu_level(),
    };
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
    static const char *const names[OMNI_MEMBW_MODES] = { "vec", "vec_pf", "vec_4s", "scalar", "vec_4s_512" };
    return mode >= 0 && mode < OMNI_MEMBW_MODES ? names[mode] : "?";
}
