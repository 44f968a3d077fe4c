/* matmul.c - y = x * W^T for quantized weights, split over a thread pool.
 *
 * Small batches (decode) are bound by reading W: x is quantized once to the
 * weight type's dot type and each thread streams its own range of W rows,
 * computing every batch column while the row is in L1. Batches of several
 * rows are compute bound: with AMX, from OMNI_MATMUL_QUANT_MAX rows up (more for some types,
 * see omni_amx_min_batch), the types amx.c takes run as int8 tile products
 * on 4-, 8- or 16-row tiles; otherwise q8_0/q4_0/q5_0 and the K-quants take
 * the int8 GEMM of arch/x86/gemm_*.c and gemm_k_*.c (activation rows in
 * registers against a few weight rows at a time) over the batch sizes
 * gemm_range gives; otherwise, from 32 rows, W is dequantized a
 * chunk of rows at a time into per-thread scratch and multiplied with
 * single-threaded OpenBLAS sgemm. */
#include "matmul.h"

#include "cpu.h"
#include "omni.h"
#include "quant.h"
#include "tensor.h"
#include "threadpool.h"

#include <cblas.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#if defined(__x86_64__)
#include "arch/x86/gemm_f16_avx2.h"
#include "arch/x86/gemm_f16_avx512.h"
#include "arch/x86/x86.h"
#endif

/* Dequantized weights per sgemm call: 8 MB of floats, and at least 64 rows.
 * Each call packs all of x again (OpenBLAS's B copy: 8% of a q4_0 prefill's
 * time with 2 MB chunks), so the chunk is as large as memory allows: on one
 * core (AMD EPYC, M = 512, K = 4864) 107-row chunks ran at 35-39 G
 * multiply-adds/s, 448-row ones at 44-45; the floats written stream
 * through L3 at a few bytes per 512 multiply-adds. */
#define DEQUANT_CHUNK_FLOATS (2 * 1024 * 1024)
#define DEQUANT_CHUNK_MIN_ROWS 64
/* Decode streams W from memory once: prefetching a few rows ahead into L1
 * (not non-temporal: that measured half as fast) lets the loads overlap the
 * dot products; 20 GB/s on 2 threads here, where DRAM gives 23. */
#define PREFETCH_ROWS OMNI_PREFETCH_ROWS
/* ... but not more than 8 KB ahead (a quarter of L1): rows of 2.7-4 KB
 * (4864-wide q4_K / q6_K: ffn_down) streamed 4-7% faster 2 rows ahead than
 * 4 (2 threads, thread CPU time); 1.7-1.8 KB rows (f16 896, q6_K 2048)
 * showed no gain from fewer. Kernels that stream (vec_dot_streams: the AVX2
 * K-quant and f16 dots) prefetch inside their block loop instead: this
 * burst of a whole row's lines at each row start stalled on the full miss
 * buffers (13.6% of a Llama-3.2-1B Q4_K_M decode's samples). */
#define PREFETCH_MAX_BYTES 8192

static int64_t prefetch_rows(size_t w_row)
{
    const size_t r = PREFETCH_MAX_BYTES / (w_row ? w_row : 1);
    return r < 1 ? 1 : r > PREFETCH_ROWS ? PREFETCH_ROWS : (int64_t)r;
}
/* On a crowded machine, one-row products of smaller matrices than this run
 * on the caller alone (omni_matmul): about 0.3 ms of one core's work. */
#define CROWDED_SERIAL_BYTES (4u << 20)
/* Batches from this many rows quantize x in parallel. */
#define PARALLEL_QUANT_MIN 4

// ---- per-thread scratch ----------------------------------------------------

/* Each thread (pool workers and callers alike) keeps its buffers across calls
 * and frees them when it exits, so no call allocates in the steady state and
 * concurrent callers with different pools never share a buffer. */
enum { SCRATCH_XQ, SCRATCH_DEQUANT, SCRATCH_GEMM, SCRATCH_PREP, SCRATCH_SLOTS };

struct scratch {
    void *p[SCRATCH_SLOTS];
    size_t size[SCRATCH_SLOTS];
};

static pthread_key_t scratch_key;
static pthread_once_t init_once = PTHREAD_ONCE_INIT;

static void scratch_free(void *p)
{
    struct scratch *s = p;
    for (int i = 0; i < SCRATCH_SLOTS; i++)
        free(s->p[i]);
    free(s);
}

/* Debian 12's OpenBLAS 0.3.21 does not know Sapphire Rapids and falls back to
 * its Prescott (SSE3) kernels, a third of the sgemm speed of its SkylakeX
 * ones here. Unless the user picked a core (OPENBLAS_CORETYPE), redo its
 * dynamic kernel choice for what this CPU can run. This runs before main,
 * while the process has one thread, after OpenBLAS's own constructor. */
/* Exported by DYNAMIC_ARCH builds only: weak, so other builds still link. */
void gotoblas_dynamic_init(void) __attribute__((weak));
void gotoblas_dynamic_quit(void) __attribute__((weak));

__attribute__((constructor)) static void openblas_fix_core(void)
{
    static const char *weak[] = { "prescott", "core2", "penryn", "dunnington", "nehalem",
                                  "sandybridge", "atom", "unknown" };
    const char *core = openblas_get_corename();
    const int level = omni_cpu()->max_level;
    if (getenv("OPENBLAS_CORETYPE") || !core || level < OMNI_CPU_AVX2 ||
        !gotoblas_dynamic_init || !gotoblas_dynamic_quit)
        return;
    int is_weak = 0;
    for (size_t i = 0; i < sizeof weak / sizeof weak[0]; i++)
        is_weak |= strcasecmp(core, weak[i]) == 0;
    if (!is_weak)
        return;
    setenv("OPENBLAS_CORETYPE", level >= OMNI_CPU_AVX512 ? "SkylakeX" : "Haswell", 1);
    gotoblas_dynamic_quit();
    gotoblas_dynamic_init();
    unsetenv("OPENBLAS_CORETYPE");
}

static void matmul_init(void)
{
    pthread_key_create(&scratch_key, scratch_free);
    /* our pool splits the work; OpenBLAS threads on top would oversubscribe */
    openblas_set_num_threads(1);
}

/* A 64-byte aligned buffer of at least bytes for this thread; NULL on OOM. */
static void *scratch_get(int slot, size_t bytes)
{
    struct scratch *s = pthread_getspecific(scratch_key);
    if (!s) {
        s = calloc(1, sizeof *s);
        if (!s || pthread_setspecific(scratch_key, s) != 0) {
            free(s);
            return NULL;
        }
    }
    if (s->size[slot] < bytes) {
        size_t sz = (bytes + 63) & ~(size_t)63;
        void *p = aligned_alloc(64, sz);
        if (!p)
            return NULL;
        free(s->p[slot]);
        s->p[slot] = p;
        s->size[slot] = sz;
    }
    return s->p[slot];
}

// ---- kernels ---------------------------------------------------------------

struct mm_job {
    const struct omni_quant_ops *op;
    int w_type;
    const uint8_t *w;    /* (n_out, w_row bytes) */
    size_t w_row;
    const float *x;      /* (n_batch, n_in) */
    uint8_t *xq;         /* (n_batch, xq_row bytes): x in op->dot_type */
    size_t xq_row;
    float *y;            /* (n_batch, n_out) */
    int64_t n_in, n_out, n_batch;
    int64_t m_pad;       /* AMX: n_batch rounded up to whole tiles (omni_amx_m_pad) */
    float *ad;           /* int8 GEMM: (n_batch, blocks) activation block scales */
    int32_t *corr;       /* int8 GEMM: (n_batch, blocks) weight offset corrections */
    int gemm_avx512;     /* int8 GEMM: the AVX-512 VNNI kernel, else AVX2 */
    int gemm_avxvnni;    /* int8 GEMM, not avx512: the AVX2 kernel's AVX-VNNI build (level avxvnni) */
    int gemm_k;          /* int8 GEMM of the K-quants (gemm_k_*.c), else of Q8_0 dots */
    int gemm_prompt;     /* int8 GEMM, avx512: the prompt kernel (gemm_prompt_avx512.c) */
    int quant_each;      /* one row: every thread quantizes x into its own scratch */
    int reuse_xq;        /* quant_each: the thread's scratch already holds x in the
                          * dot type (and its prep): omni_matmul_multi's later products */
    float *x_pack;       /* F16 GEMM: x in its panels (omni_x86_gemm_f16_pack_x) */
    _Atomic int64_t next; /* decode's products: the first row no thread took yet (grab_rows) */
    _Atomic int failed;  /* a thread could not get scratch */
};

static void split(int64_t n, int ith, int nth, int64_t *lo, int64_t *hi)
{
    *lo = n * ith / nth;
    *hi = n * (ith + 1) / nth;
}

static void quantize_rows(void *arg, int ith, int nth)
{
    struct mm_job *j = arg;
    int64_t b0, b1;
    split(j->n_batch, ith, nth, &b0, &b1);
    for (int64_t b = b0; b < b1; b++)
        j->op->from_float(j->x + b * j->n_in, j->xq + (size_t)b * j->xq_row, j->n_in);
}

#ifndef OMNI_MATMUL_GUIDED /* 0: decode's products split evenly (benchmark variant) */
#define OMNI_MATMUL_GUIDED 1
#endif
#define GRAB_MIN_BYTES (64 << 10) /* the least a thread takes at once of a decode product's weights */

/* The next rows [*r0, end) a thread takes of job j's (guided: its share of
 * what is left, at least GRAB_MIN_BYTES of weights, in multiples of align
 * rows); the end, or 0 when none are left. Smaller grabs (half shares, 32
 * KB) measured slower: each call starts its row streams cold and lays its
 * activation out again. */
static int64_t grab_rows(struct mm_job *j, int nth, int64_t align, int64_t *r0)
{
    const int64_t min_rows = (int64_t)(GRAB_MIN_BYTES / j->w_row) + 1;
    const int64_t left = j->n_out - atomic_load_explicit(&j->next, memory_order_relaxed);
    int64_t take = left / nth > min_rows ? left / nth : min_rows;
    take = (take + align - 1) / align * align;
    const int64_t r = atomic_fetch_add_explicit(&j->next, take, memory_order_relaxed);
    if (r >= j->n_out)
        return 0;
    *r0 = r;
    return r + take < j->n_out ? r + take : j->n_out;
}

static void dot_rows(void *arg, int ith, int nth)
{
    struct mm_job *j = arg;
    int64_t r0, r1;
    split(j->n_out, ith, nth, &r0, &r1);
    const uint8_t *xq = j->xq;
    if (j->quant_each) {
        /* Decode: quantizing the one row on the caller before the run would
         * keep the workers waiting that long (2-3% of a small matmul);
         * every thread doing it at once costs no wall time. */
        uint8_t *own = scratch_get(SCRATCH_XQ, j->xq_row);
        if (!own) {
            atomic_store(&j->failed, 1);
            return;
        }
        if (!j->reuse_xq)
            j->op->from_float(j->x, own, j->n_in);
        xq = own;
    }
    const float *prep = NULL;
    if (j->n_batch == 1 && j->op->vec_dot_prep) {
        /* one row: its per-block data once for all the thread's weight rows */
        float *p = scratch_get(SCRATCH_PREP, sizeof(float) * OMNI_ACT_PREP_FLOATS(j->n_in));
        if (!p) {
            atomic_store(&j->failed, 1);
            return;
        }
        if (!j->reuse_xq)
            j->op->act_prep(xq, p, j->n_in);
        prep = p;
    }
    if (prep) { /* the kernel's own row loop and prefetches */
        if (nth == 1 || !OMNI_MATMUL_GUIDED) {
            if (r0 < r1)
                j->op->vec_dot_prep(j->n_in, j->w + (size_t)r0 * j->w_row, j->w_row, r1 - r0, xq, prep, j->y + r0);
            return;
        }
        /* Rows taken as they go (grab_rows): two cores of a shared
         * machine do not stream at the same speed (the neighbours' memory
         * traffic, interrupts), and with an even split one thread spent
         * 5-30% of decode waiting at products' ends. Each row's bits do not
         * depend on which call computes it. */
        int64_t r;
        while ((r1 = grab_rows(j, nth, 1, &r)) > 0)
            j->op->vec_dot_prep(j->n_in, j->w + (size_t)r * j->w_row, j->w_row, r1 - r, xq, prep, j->y + r);
        return;
    }
    /* rows ahead into L1 at the start of each row, unless the dot streams
     * (prefetches inside its block loop: a burst of a whole row's lines
     * stalls on the full miss buffers, quants_avx2.c's kq_prefetch) */
    const int self_pf = j->op->vec_dot_streams && j->op->vec_dot_streams == j->op->vec_dot &&
                        !(j->op->vec_dot_n && j->n_batch > 1);
    const int64_t ahead = self_pf ? 0 : prefetch_rows(j->w_row);
    for (int64_t r = r0; r < r1; r++) {
        const uint8_t *wr = j->w + (size_t)r * j->w_row;
        if (ahead && r + ahead < r1) {
            const uint8_t *next = wr + ahead * j->w_row;
            for (size_t o = 0; o < j->w_row; o += 64)
                __builtin_prefetch(next + o, 0, 3);
        }
        int64_t b = 0;
        if (j->op->vec_dot_n && j->n_batch > 1) /* several columns per pass over the row */
            for (; b < j->n_batch; b += OMNI_DOT_COLS_MAX) {
                const int64_t nc = j->n_batch - b < OMNI_DOT_COLS_MAX ? j->n_batch - b : OMNI_DOT_COLS_MAX;
                j->op->vec_dot_n(j->n_in, wr, xq + (size_t)b * j->xq_row, j->xq_row, (int)nc,
                                 j->y + b * j->n_out + r, (size_t)j->n_out);
            }
        for (; b < j->n_batch; b++)
            j->y[b * j->n_out + r] = j->op->vec_dot(j->n_in, wr, xq + (size_t)b * j->xq_row);
    }
}

/* y[:, r0:r1] = x * W[r0:r1]^T with W in floats, row stride n_in. */
static void sgemm_rows(const struct mm_job *j, const float *w, int64_t r0, int64_t r1)
{
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)j->n_batch, (int)(r1 - r0),
                (int)j->n_in, 1.0f, j->x, (int)j->n_in, w, (int)j->n_in, 0.0f, j->y + r0,
                (int)j->n_out);
}

static void blas_rows(void *arg, int ith, int nth)
{
    struct mm_job *j = arg;
    int64_t r0, r1;
    split(j->n_out, ith, nth, &r0, &r1);
    if (r0 == r1)
        return;
    if (j->w_type == GGML_TYPE_F32) {
        sgemm_rows(j, (const float *)j->w + r0 * j->n_in, r0, r1);
        return;
    }
    int64_t chunk = DEQUANT_CHUNK_FLOATS / j->n_in;
    if (chunk < DEQUANT_CHUNK_MIN_ROWS)
        chunk = DEQUANT_CHUNK_MIN_ROWS;
    if (chunk > r1 - r0)
        chunk = r1 - r0;
    float *buf = scratch_get(SCRATCH_DEQUANT, (size_t)chunk * (size_t)j->n_in * sizeof(float));
    if (!buf) {
        atomic_store(&j->failed, 1);
        return;
    }
    for (int64_t c0 = r0; c0 < r1; c0 += chunk) {
        int64_t c1 = c0 + chunk < r1 ? c0 + chunk : r1;
        j->op->to_float(j->w + (size_t)c0 * j->w_row, buf, (c1 - c0) * j->n_in);
        sgemm_rows(j, buf, c0, c1);
    }
}

#if defined(__x86_64__)
/* F16 weights from OMNI_MATMUL_BLAS_MIN rows at AVX2: x packed once into
 * job->x_pack by all threads (f16_pack), then each thread's W rows through
 * the F16C GEMM (gemm_f16_avx2.c: the conversion is its packing; 5-7% faster
 * than dequantize + sgemm on one core, 64 KB of scratch a thread instead of
 * 8 MB of floats), at the AVX512 levels its 512-bit build
 * (gemm_f16_avx512.c, the same bits). */
static void f16_pack(void *arg, int ith, int nth)
{
    struct mm_job *j = arg;
    omni_x86_gemm_f16_pack_x(j->x, j->n_in, j->n_batch, j->x_pack, ith, nth);
}

static void f16_rows(void *arg, int ith, int nth)
{
    struct mm_job *j = arg;
    int64_t r0, r1;
    split(j->n_out, ith, nth, &r0, &r1);
    if (r0 >= r1)
        return;
    const int avx512 = omni_cpu_level() >= OMNI_CPU_AVX512;
    void *scratch = scratch_get(SCRATCH_DEQUANT, avx512 ? omni_x86_gemm_f16_scratch_avx512(j->n_in, j->n_batch)
                                                        : omni_x86_gemm_f16_scratch(j->n_in, j->n_batch));
    if (!scratch) {
        atomic_store(&j->failed, 1);
        return;
    }
    if (avx512)
        omni_x86_gemm_f16_avx512(j->w, j->n_in, j->n_out, j->x_pack, j->n_batch, j->y, r0, r1, scratch);
    else
        omni_x86_gemm_f16_avx2(j->w, j->n_in, j->n_out, j->x_pack, j->n_batch, j->y, r0, r1, scratch);
}

/* Whole 16-row groups of W per thread, so only the last group is partial. */
static void amx_rows(void *arg, int ith, int nth)
{
    struct mm_job *j = arg;
    int64_t g0, g1;
    split((j->n_out + 15) / 16, ith, nth, &g0, &g1);
    const int64_t r0 = g0 * 16, r1 = g1 * 16 < j->n_out ? g1 * 16 : j->n_out;
    if (r0 >= r1)
        return;
    void *scratch = scratch_get(SCRATCH_DEQUANT, omni_amx_scratch_bytes(j->n_in, j->m_pad));
    if (!scratch) {
        atomic_store(&j->failed, 1);
        return;
    }
    omni_amx_matmul(j->w_type, j->w, j->w_row, j->n_in, j->n_out, j->xq, j->xq_row, j->n_batch,
                    j->m_pad, j->y, r0, r1, scratch);
}
#endif

#if defined(__x86_64__)
/* One range of output rows through the job's int8 GEMM kernel (scratch:
 * the prompt kernel's or the AVX2 kernels' own, NULL for the others). */
static void gemm_kernel(struct mm_job *j, int64_t r0, int64_t r1, void *scratch)
{
    if (j->gemm_prompt)
        omni_x86_gemm_prompt_avx512(j->w_type, j->w, j->w_row, j->n_in, j->n_out, j->xq, j->xq_row, j->ad,
                                    j->corr, j->n_batch, j->y, r0, r1, scratch);
    else if (j->gemm_k) {
        if (j->gemm_avx512)
            omni_x86_gemm_k_avx512(j->w_type, j->w, j->w_row, j->n_in, j->n_out, j->xq, j->xq_row,
                                   j->n_batch, j->y, r0, r1);
        else
            (j->gemm_avxvnni ? omni_x86_gemm_k_avxvnni : omni_x86_gemm_k_avx2)(
                j->w_type, j->w, j->w_row, j->n_in, j->n_out, j->xq, j->xq_row, j->n_batch, j->y, r0, r1);
    } else if (j->gemm_avx512)
        omni_x86_gemm_q8_0_avx512(j->w_type, j->w, j->w_row, j->n_in, j->n_out, j->xq, j->xq_row,
                                  j->ad, j->corr, j->n_batch, j->y, r0, r1);
    else
        (j->gemm_avxvnni ? omni_x86_gemm_q8_0_avxvnni : omni_x86_gemm_q8_0_avx2)(
            j->w_type, j->w, j->w_row, j->n_in, j->n_out, j->xq, j->xq_row, j->ad, j->corr, j->n_batch,
            j->y, r0, r1, scratch);
}

/* Every batch row times W rows of this thread through the int8 GEMM. */
static void gemm_rows(void *arg, int ith, int nth)
{
    struct mm_job *j = arg;
    void *scratch = NULL;
    if (j->gemm_prompt || (!j->gemm_k && !j->gemm_avx512)) {
        scratch = scratch_get(SCRATCH_DEQUANT, j->gemm_prompt
                                                   ? omni_x86_gemm_prompt_avx512_scratch(j->n_in, j->n_batch)
                                                   : omni_x86_gemm_q8_0_avx2_scratch(j->n_in));
        if (!scratch) {
            atomic_store(&j->failed, 1);
            return;
        }
    }
    int64_t r0, r1;
    if (j->gemm_prompt) { /* whole 16-row panels per thread */
        int64_t g0, g1;
        split((j->n_out + 15) / 16, ith, nth, &g0, &g1);
        r0 = g0 * 16;
        r1 = g1 * 16 < j->n_out ? g1 * 16 : j->n_out;
    } else if (OMNI_MATMUL_GUIDED && nth > 1 && j->n_batch < OMNI_MATMUL_BLAS_MIN) {
        /* a few sequences' decode step: rows as the threads go, as
         * dot_rows, in whole 16-row groups (the kernels' tiles) */
        while ((r1 = grab_rows(j, nth, 16, &r0)) > 0)
            gemm_kernel(j, r0, r1, scratch);
        return;
    } else
        split(j->n_out, ith, nth, &r0, &r1);
    if (r0 < r1)
        gemm_kernel(j, r0, r1, scratch);
}
#endif

/* The batch sizes [*lo, *hi) for which type takes the int8 GEMM at level;
 * *lo = *hi = 0 when none does. The bounds are measured on one thread
 * against the per-row dots below and dequantize + sgemm above
 * (tests/bench_matmul.c; docs/engine.md has the numbers). AVX2 (an AMD
 * EPYC): the K-quant GEMM's per-call packing loses to q4_K's 4-column dots
 * below 4 rows, and to q6_K's one-row dots at 2-3 rows (one thread, 896 x
 * 4864, ms per activation row: 2 / 3 rows dots 0.195-0.233 / 0.179-0.201
 * against 0.351-0.404 / 0.264-0.319; from 4 rows gemm_k_avx2.c's a8 form,
 * 0.15-0.17 against the dots' 0.17-0.19); sgemm (one thread, 8 MB chunks) never overtakes q4_0, q5_0
 * or the K-quants up to 512 rows (q4_0 1.2-1.3x, q6_K 1.2x at 512; the
 * older ends of 64-256 rows came from sgemm timed with OpenBLAS's own
 * threads running beside the clock); q8_0's GEMM is level with sgemm from
 * 64 rows (0.9-1.3x), and its int8 activations there moved lfm2's golden
 * logits past their tolerance, so it keeps float prompts from 32; below 4
 * rows the per-row dots beat both q8_0 GEMM forms on weights read from
 * memory (one thread, ms per activation row, 49,152 x 1024 / 16,384 x
 * 3072: 2 rows dots 2.44 / 2.48, 2 x 4 tiles 3.82 / 3.16, act8 3.75 / 3.66;
 * 3 rows 2.20 / 2.30 against 2.95 / 2.39 and 2.54 / 2.45; 4 rows act8
 * 1.90 / 1.84 against dots 2.15 / 2.27, tiles 2.36 / 2.08); act4 (passes
 * of up to 4 activation rows, gemm_avx2.c) beats the dots at 3 rows (1.74
 * / 1.66 against 2.19 / 2.31; Qwen3-0.6B q8_0's 3-sequence step at 2
 * threads 45-46.5 -> 38-39 ms), so q8_0 starts at 3 there. At 2 rows act2
 * won alone on one thread (2.17 / 2.06 against 2.45 / 2.52) but the
 * 2-sequence step at 2 threads was 5% slower with it (31.5-32.2 against
 * 29.7-30.6 ms with the dots). AVX-512 VNNI (a Xeon
 * capped at that level, OpenBLAS on its SkylakeX kernels, one OpenBLAS
 * thread, 2048 x 8192, docs/benchmarks.md): the GEMM is ahead of sgemm at
 * every size measured, 2-128 rows (1.6-2.1x at 128: q6_K 1.56x), so it
 * has no end, q8_0 included: from 32 rows gemm_prompt_avx512.c takes
 * prompts at 2.7x the act8 form (one core, 896 x 4864 at 512 rows) and q8_0
 * prompts ran 3x faster than through sgemm (Zen 5, Qwen2.5-0.5B pp512);
 * lfm2's golden logits moved as they do in every decode step with Q8_0
 * activations (tests/test_model.c); against the dots
 * it starts where it wins: q8_0/q4_0/q5_0 at 2 (1.6x / 1.1x / 2.0x), q5_K
 * at 3 (1.13x; 0.89x at 2), q4_K and q6_K at 6 (1.25x / 1.20x; at 4 rows
 * 0.90x / 1.00x: 4-column dots). */
#ifndef GEMM_Q8_0_AVX2_MIN /* overridable for a benchmark build */
#define GEMM_Q8_0_AVX2_MIN 3
#endif
static void gemm_range(int type, int level, int64_t *lo, int64_t *hi)
{
    /* rows [lo, hi) at AVX2, then at AVX-512; hi 0: no end */
    static const struct { int type; int16_t r[2][2]; } ranges[] = {
        { GGML_TYPE_Q8_0, { { GEMM_Q8_0_AVX2_MIN, 32 }, { 2, 0 } } },  { GGML_TYPE_Q4_0, { { 2, 0 }, { 2, 0 } } },
        { GGML_TYPE_Q5_0, { { 2, 0 }, { 2, 0 } } },    { GGML_TYPE_Q4_K, { { 4, 0 }, { 6, 0 } } },
        { GGML_TYPE_Q5_K, { { 3, 0 }, { 3, 0 } } },    { GGML_TYPE_Q6_K, { { 4, 0 }, { 6, 0 } } },
    };
    static_assert(OMNI_MATMUL_QUANT_MAX <= 2, "the GEMM ranges start at 2 rows");
    *lo = *hi = 0;
    if (level < OMNI_CPU_AVX2)
        return;
    for (size_t k = 0; k < sizeof ranges / sizeof ranges[0]; k++)
        if (ranges[k].type == type) {
            const int16_t *r = ranges[k].r[level >= OMNI_CPU_AVX512VNNI];
            *lo = r[0];
            *hi = r[1] ? r[1] : INT32_MAX;
        }
}

enum gemm_kind { GEMM_NONE, GEMM_Q8_0, GEMM_K };

static enum gemm_kind use_gemm(int type, int64_t n_batch, int level)
{
#if defined(__x86_64__)
    int64_t lo, hi;
    gemm_range(type, level, &lo, &hi);
    if (n_batch < lo || n_batch >= hi)
        return GEMM_NONE;
    return omni_x86_gemm_k_takes(type) ? GEMM_K : GEMM_Q8_0;
#else
    (void)type;
    (void)n_batch;
    (void)level;
    return GEMM_NONE;
#endif
}

/* Q8_0-family GEMM batches from omni_x86_gemm_prompt_min_avx512 rows at
 * AVX-512 VNNI: the blocked prompt kernel, with the act8 form's bits (so
 * kernel_id has no id of its own for it). */
static int use_gemm_prompt(int type, int64_t n_in, int64_t n_batch, int level)
{
#if defined(__x86_64__)
    return level >= OMNI_CPU_AVX512VNNI && n_in >= 32 && n_batch >= omni_x86_gemm_prompt_min_avx512(type);
#else
    (void)type;
    (void)n_in;
    (void)n_batch;
    (void)level;
    return 0;
#endif
}

/* F16 weights at prompt sizes: the F16C GEMM instead of dequantize + sgemm. */
static int use_f16_gemm(int type, int64_t n_batch, int level)
{
#if defined(__x86_64__)
    return type == GGML_TYPE_F16 && n_batch >= OMNI_MATMUL_BLAS_MIN && level >= OMNI_CPU_AVX2;
#else
    (void)type;
    (void)n_batch;
    (void)level;
    return 0;
#endif
}

static int use_amx(int type, int64_t n_batch)
{
#if defined(__x86_64__)
    const int min_batch = omni_amx_min_batch(type);
    return min_batch && n_batch >= min_batch && n_batch >= OMNI_MATMUL_QUANT_MAX &&
           omni_cpu_level() >= OMNI_CPU_AMX;
#else
    (void)type;
    (void)n_batch;
    return 0;
#endif
}

/* A name for the kernel a batch of n rows of type takes, as far as a row's
 * bits go: rows agree bit for bit between two batch sizes with equal ids
 * (test_matmul pins this down). */
static int kernel_id(int type, int64_t n, int level)
{
    if (n < OMNI_MATMUL_QUANT_MAX) {
        /* one row through vec_dot_prep: q4_0/q5_0 subtract their offset per
         * block there, and at AVX-512 VNNI q8_0/q4_0/q5_0/q4_K/q6_K take
         * 512-bit forms of their own (other bits than vec_dot) */
        const struct omni_quant_ops *op = omni_quant_ops_at(type, level);
        return n == 1 && op && op->vec_dot_prep ? 6 : 0;
    }
    if (use_amx(type, n))
        return 1;
    switch (use_gemm(type, n, level)) {
    case GEMM_Q8_0:
#if defined(__x86_64__)
        /* the AVX2 kernel runs below the VNNI level (AVX512 included) */
        if (level < OMNI_CPU_AVX512VNNI && n >= omni_x86_gemm_act8_min_avx2(type))
            return 3; /* the AVX2 kernel's 8 activation rows interleaved */
        if (level >= OMNI_CPU_AVX512VNNI && n >= omni_x86_gemm_act8_min_avx512(type))
            return 3; /* the VNNI kernel's, with the same bits */
#endif
        return 2;
    case GEMM_K: return 4;
    case GEMM_NONE: break;
    }
    if (use_f16_gemm(type, n, level))
        return 7;
    return n >= OMNI_MATMUL_BLAS_MIN ? 5 : 0;
}

int omni_matmul_same_kernels(int type, int64_t n_a, int64_t n_b)
{
    const int level = omni_cpu_level();
    for (int t = type < 0 ? 0 : type; t < (type < 0 ? GGML_TYPE_COUNT : type + 1); t++)
        if (t < GGML_TYPE_COUNT && omni_quant_ops(t) && kernel_id(t, n_a, level) != kernel_id(t, n_b, level))
            return 0;
    return 1;
}

/* x quantized to the dot type in per-thread scratch of the calling thread,
 * with zero rows from n_batch up to rows. 0, or -1 when out of memory. */
static int quantize_x(struct tpool *tp, struct mm_job *j, int64_t rows)
{
    j->xq_row = ggml_row_size(j->op->dot_type, j->n_in);
    j->xq = scratch_get(SCRATCH_XQ, j->xq_row * (size_t)rows);
    if (!j->xq)
        return -1;
    memset(j->xq + j->xq_row * (size_t)j->n_batch, 0, j->xq_row * (size_t)(rows - j->n_batch));
    if (j->n_batch >= PARALLEL_QUANT_MIN && tp)
        tpool_run(tp, quantize_rows, j);
    else
        quantize_rows(j, 0, 1);
    return 0;
}

// ---- entry points ----------------------------------------------------------

static void fill_nan(float *y, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        y[i] = NAN;
}

void omni_matmul(struct tpool *tp, const struct omni_tensor *w, const float *x,
                 int64_t n_batch, float *y)
{
    pthread_once(&init_once, matmul_init);
    if (n_batch <= 0)
        return;
    const int64_t n_in = w->ne[0], n_out = w->ne[1] > 0 ? w->ne[1] : 1;
    const struct omni_quant_ops *op = omni_quant_ops(w->type);
    const size_t w_row = ggml_row_size(w->type, n_in);
    if (!op || !w_row || n_in > INT32_MAX || n_out > INT32_MAX || n_batch > INT32_MAX) {
        OMNI_ERROR("matmul: unsupported weight %s [%lld x %lld]", ggml_type_name(w->type),
                   (long long)n_in, (long long)n_out);
        fill_nan(y, n_batch * n_out);
        return;
    }
    struct mm_job j = {
        .op = op, .w_type = w->type, .w = w->data, .w_row = w_row, .x = x, .y = y,
        .n_in = n_in, .n_out = n_out, .n_batch = n_batch,
    };
    const int level = omni_cpu_level();
    const enum gemm_kind gemm = use_gemm(w->type, n_batch, level);
    j.gemm_avx512 = level >= OMNI_CPU_AVX512VNNI;
    j.gemm_avxvnni = level == OMNI_CPU_AVXVNNI; /* implies AVX-VNNI (cpu.h) */
    j.gemm_prompt = gemm == GEMM_Q8_0 && use_gemm_prompt(w->type, n_in, n_batch, level);
    if (use_amx(w->type, n_batch)) {
#if defined(__x86_64__)
        j.m_pad = omni_amx_m_pad(n_batch);
        if (quantize_x(tp, &j, j.m_pad) != 0)
            atomic_store(&j.failed, 1);
        else
            tpool_run(tp, amx_rows, &j);
#endif
    } else if (gemm == GEMM_Q8_0) {
#if defined(__x86_64__)
        const int k = j.gemm_avx512 ? omni_x86_gemm_q8_0_offset_avx512(w->type)
                                    : omni_x86_gemm_q8_0_offset_avx2(w->type);
        const int64_t nbp = omni_x86_gemm_q8_0_blocks(n_in);
        uint8_t *aux = scratch_get(SCRATCH_GEMM, (size_t)(n_batch * nbp) * (sizeof(float) + sizeof(int32_t)));
        if (!aux || quantize_x(tp, &j, n_batch) != 0) {
            atomic_store(&j.failed, 1);
        } else {
            j.ad = (float *)aux;
            j.corr = (int32_t *)(aux + (size_t)(n_batch * nbp) * sizeof(float));
            omni_x86_gemm_q8_0_prep(k, j.xq, j.xq_row, n_batch, n_in, j.ad, j.corr);
            tpool_run(tp, gemm_rows, &j);
        }
#endif
    } else if (gemm == GEMM_K) {
#if defined(__x86_64__)
        j.gemm_k = 1;
        if (quantize_x(tp, &j, n_batch) != 0)
            atomic_store(&j.failed, 1);
        else
            tpool_run(tp, gemm_rows, &j);
#endif
    } else if (use_f16_gemm(w->type, n_batch, level)) {
#if defined(__x86_64__)
        j.x_pack = scratch_get(SCRATCH_GEMM, omni_x86_gemm_f16_x_bytes(n_in, n_batch));
        if (!j.x_pack) {
            atomic_store(&j.failed, 1);
        } else {
            tpool_run(tp, f16_pack, &j);
            tpool_run(tp, f16_rows, &j);
        }
#endif
    } else if (n_batch >= OMNI_MATMUL_BLAS_MIN) {
        tpool_run(tp, blas_rows, &j);
    } else if (!op->from_float) {
        j.xq = (uint8_t *)x; /* float activations: no conversion */
        j.xq_row = (size_t)n_in * sizeof(float);
        tpool_run(tp, dot_rows, &j);
    } else if (n_batch == 1 && tpool_size(tp) > 1) {
        j.quant_each = 1;
        j.xq_row = ggml_row_size(op->dot_type, n_in);
        /* On a machine crowded by other processes a sleeping worker takes
         * 0.1-0.5 ms to wake (measured at 18-20 runnable threads on 2
         * CPUs), more than a small decode matmul's share: the caller runs
         * it alone (the same rows, the same bits). Large matrices (an
         * output projection) still gain from a second share of the CPU. */
        if ((size_t)n_out * w_row < CROWDED_SERIAL_BYTES && tpool_machine_crowded(tpool_size(tp)))
            dot_rows(&j, 0, 1);
        else
            tpool_run(tp, dot_rows, &j);
    } else if (quantize_x(tp, &j, n_batch) != 0) {
        atomic_store(&j.failed, 1);
    } else {
        tpool_run(tp, dot_rows, &j);
    }
    if (atomic_load(&j.failed)) {
        OMNI_ERROR("matmul: out of memory for scratch (%lld x %lld)", (long long)n_batch,
                   (long long)n_in);
        fill_nan(y, n_batch * n_out);
    }
}

struct mm_multi {
    struct mm_job j[OMNI_MATMUL_MULTI_MAX];
    int n;
};

static void multi_rows(void *arg, int ith, int nth)
{
    struct mm_multi *m = arg;
    for (int k = 0; k < m->n; k++)
        dot_rows(&m->j[k], ith, nth);
}

#if defined(__x86_64__)
static void multi_gemm_rows(void *arg, int ith, int nth)
{
    struct mm_multi *m = arg;
    for (int k = 0; k < m->n; k++)
        gemm_rows(&m->j[k], ith, nth);
}

/* Batches (the engine's multi-sequence decode: q/k/v, gate/up) whose
 * weights all take the int8 GEMM of one activation type: x quantized once
 * and every product in one parallel region instead of a quantize region
 * and a GEMM region each (omni_matmul's kernels, so its bits). 0 when it
 * does not apply. */
static int multi_gemm(struct tpool *tp, const struct omni_tensor *const *w, int n_w, const float *x,
                      int64_t n_batch, float *const *y)
{
    const int level = omni_cpu_level();
    const int64_t n_in = w[0]->ne[0];
    struct mm_multi m = { .n = n_w };
    enum gemm_kind kind = GEMM_NONE;
    if (!tp || n_w < 2 || n_w > OMNI_MATMUL_MULTI_MAX || n_batch < 2 || n_batch > INT32_MAX || n_in > INT32_MAX)
        return 0;
    for (int k = 0; k < n_w; k++) {
        const struct omni_quant_ops *op = omni_quant_ops(w[k]->type);
        const int64_t n_out = w[k]->ne[1] > 0 ? w[k]->ne[1] : 1;
        const size_t w_row = ggml_row_size(w[k]->type, n_in);
        const enum gemm_kind g = use_gemm(w[k]->type, n_batch, level);
        if (!op || !w_row || w[k]->ne[0] != n_in || n_out > INT32_MAX || g == GEMM_NONE ||
            use_amx(w[k]->type, n_batch) || (k && (g != kind || op->dot_type != m.j[0].op->dot_type)))
            return 0;
        kind = g;
        m.j[k] = (struct mm_job){
            .op = op, .w_type = w[k]->type, .w = w[k]->data, .w_row = w_row, .x = x, .y = y[k],
            .n_in = n_in, .n_out = n_out, .n_batch = n_batch,
            .gemm_avx512 = level >= OMNI_CPU_AVX512VNNI, .gemm_avxvnni = level == OMNI_CPU_AVXVNNI,
            .gemm_k = g == GEMM_K, .gemm_prompt = g == GEMM_Q8_0 && use_gemm_prompt(w[k]->type, n_in, n_batch, level),
        };
    }
    const int64_t nbp = omni_x86_gemm_q8_0_blocks(n_in);
    const size_t aux_one = (size_t)(n_batch * nbp) * (sizeof(float) + sizeof(int32_t));
    uint8_t *aux = kind == GEMM_Q8_0 ? scratch_get(SCRATCH_GEMM, aux_one * (size_t)n_w) : NULL;
    int failed = (kind == GEMM_Q8_0 && !aux) || quantize_x(tp, &m.j[0], n_batch) != 0;
    for (int k = 0; !failed && k < n_w; k++) {
        struct mm_job *j = &m.j[k];
        j->xq = m.j[0].xq;
        j->xq_row = m.j[0].xq_row;
        if (kind == GEMM_Q8_0) { /* scales and offset corrections per weight type */
            j->ad = (float *)(aux + aux_one * (size_t)k);
            j->corr = (int32_t *)(aux + aux_one * (size_t)k + (size_t)(n_batch * nbp) * sizeof(float));
            omni_x86_gemm_q8_0_prep(j->gemm_avx512 ? omni_x86_gemm_q8_0_offset_avx512(j->w_type)
                                                   : omni_x86_gemm_q8_0_offset_avx2(j->w_type),
                                    j->xq, j->xq_row, n_batch, n_in, j->ad, j->corr);
        }
    }
    if (!failed)
        tpool_run(tp, multi_gemm_rows, &m);
    for (int k = 0; k < n_w; k++)
        if (failed || atomic_load(&m.j[k].failed)) {
            OMNI_ERROR("matmul: out of memory for scratch (%lld x %lld)", (long long)n_batch, (long long)n_in);
            fill_nan(y[k], n_batch * m.j[k].n_out);
        }
    return 1;
}
#endif

void omni_matmul_multi(struct tpool *tp, const struct omni_tensor *const *w, int n_w, const float *x,
                       int64_t n_batch, float *const *y)
{
    pthread_once(&init_once, matmul_init);
#if defined(__x86_64__)
    if (n_batch >= 2 && n_w >= 2 && multi_gemm(tp, w, n_w, x, n_batch, y))
        return;
#endif
    struct mm_multi m = { .n = n_w };
    /* one row, several threads, a quiet machine, quantized weights whose
     * dot types share scratch: otherwise one call each */
    int ok = n_batch == 1 && n_w >= 1 && n_w <= OMNI_MATMUL_MULTI_MAX && tp && tpool_size(tp) > 1 &&
             !tpool_machine_crowded(tpool_size(tp));
    for (int k = 0; ok && k < n_w; k++) {
        const struct omni_quant_ops *op = omni_quant_ops(w[k]->type);
        const int64_t n_in = w[k]->ne[0], n_out = w[k]->ne[1] > 0 ? w[k]->ne[1] : 1;
        const size_t w_row = ggml_row_size(w[k]->type, n_in);
        ok = op && op->from_float && w_row && n_in <= INT32_MAX && n_out <= INT32_MAX &&
             n_in == w[0]->ne[0];
        if (ok)
            m.j[k] = (struct mm_job){
                .op = op, .w_type = w[k]->type, .w = w[k]->data, .w_row = w_row, .x = x, .y = y[k],
                .n_in = n_in, .n_out = n_out, .n_batch = 1, .quant_each = 1,
                .xq_row = ggml_row_size(op->dot_type, n_in),
                /* x is already in this dot type in the thread's scratch */
                .reuse_xq = k > 0 && op->dot_type == m.j[k - 1].op->dot_type &&
                            op->act_prep == m.j[k - 1].op->act_prep,
            };
    }
    if (!ok) {
        for (int k = 0; k < n_w; k++)
            omni_matmul(tp, w[k], x, n_batch, y[k]);
        return;
    }
    tpool_run(tp, multi_rows, &m);
    for (int k = 0; k < n_w; k++)
        if (atomic_load(&m.j[k].failed)) {
            OMNI_ERROR("matmul: out of memory for scratch (1 x %lld)", (long long)m.j[k].n_in);
            fill_nan(y[k], m.j[k].n_out);
        }
}

void omni_tensor_get_row(const struct omni_tensor *w, int64_t r, float *out)
{
    const struct omni_quant_ops *op = omni_quant_ops(w->type);
    const size_t w_row = ggml_row_size(w->type, w->ne[0]);
    const int64_t n_out = w->ne[1] > 0 ? w->ne[1] : 1;
    if (!op || !w_row || r < 0 || r >= n_out) {
        OMNI_ERROR("tensor: row %lld of %s [%lld x %lld] unavailable", (long long)r,
                   ggml_type_name(w->type), (long long)w->ne[0], (long long)w->ne[1]);
        fill_nan(out, w->ne[0]);
        return;
    }
    op->to_float((const uint8_t *)w->data + (size_t)r * w_row, out, w->ne[0]);
}
