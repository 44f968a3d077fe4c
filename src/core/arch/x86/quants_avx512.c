/* quants_avx512.c - AVX-512 dot products: level OMNI_CPU_AVX512 (F/BW/VL/DQ)
 * and, from the second half of the file on, OMNI_CPU_AVX512VNNI.
 *
 * AVX512: float weights (16 lanes, masked tails) and q6_K (a half block's
 * 64 elements per register, also for several activation rows at once).
 * AVX512VNNI adds the int8 dots decode runs: q8_0, q4_0, q5_0 (vpdpbusd on
 * 256 bits, a block at a time: 512-bit integer work shuts vector port 1 and
 * a block a 256-bit half measured slower for q5_0 on Sapphire Rapids),
 * q4_K/q5_K (vpdpwssd folds the scale products' add), and q8_0 for several
 * rows (32 registers of accumulators). Each keeps the integer lanes, scale
 * products and accumulation order of its AVX2 twin in quants_avx2.c, so the
 * results have the same bits as at level AVX2. Decode's one-row products
 * (vec_dot_prep) of q4_0/q5_0 (four blocks a 512-bit register), q4_K (two
 * registers a super-block) and q6_K (its scaling in 16 float lanes) are
 * their own forms with their own bits: they cut the per-block scale work,
 * which bound them (1.3-1.9x on Sapphire Rapids for q4_0/q5_0,
 * docs/benchmarks.md). All differ from the scalar _ref twins only in
 * float summation order. */
#if defined(__x86_64__)

#pragma GCC target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq")
/* as quants_avx2.c: no fused multiply-adds the AVX2 twins do not have */
#pragma GCC optimize("fp-contract=off")

#include "x86.h"

#include "src/core/cpu.h"

#include <immintrin.h>
#include <string.h>

#include "quants_x86_inl.h"

static inline int hsum_epi32_256(__m256i v)
{
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(1, 0, 3, 2)));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(2, 3, 0, 1)));
    return _mm_cvtsi128_si32(s);
}

// ---- float weights ---------------------------------------------------------

static float vec_dot_f32_f32_avx512(int64_t n, const void *w, const void *a)
{
    const float *x = w, *y = a;
    __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        acc0 = _mm512_fmadd_ps(_mm512_loadu_ps(x + i), _mm512_loadu_ps(y + i), acc0);
        acc1 = _mm512_fmadd_ps(_mm512_loadu_ps(x + i + 16), _mm512_loadu_ps(y + i + 16), acc1);
    }
    if (i < n) { /* masked tail: up to 31 elements */
        __mmask16 k0 = n - i >= 16 ? 0xffff : (__mmask16)((1u << (n - i)) - 1);
        __mmask16 k1 = n - i > 16 ? (__mmask16)((1u << (n - i - 16)) - 1) : 0;
        acc0 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(k0, x + i), _mm512_maskz_loadu_ps(k0, y + i), acc0);
        acc1 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(k1, x + i + 16), _mm512_maskz_loadu_ps(k1, y + i + 16), acc1);
    }
    return _mm512_reduce_add_ps(_mm512_add_ps(acc0, acc1));
}

/* f16 rows w[s], s < S, in lockstep (decode's row streams through
 * vec_dot_prep, below; pf: a line prefetched OMNI_X86_F16_PF_DIST bytes
 * ahead in each), each with the one-row steps: vec_dot's bits. 4 streams:
 * Llama-3.2-1B F16 tg32 on the AMD EPYC Zen 5 host (AVX-512 VNNI, 2
 * threads, A B A B) 16.3 / 16.8 -> 19.6 / 19.3 tok/s, level with the AVX2
 * level's streams; -DOMNI_X86_F16_STREAMS_512=1 keeps one row at a time.
 * Each stream's prefetch 2 KB ahead: there, 2048 x 8192 and 896 x 151936
 * read 67-70 and 71-72 GB/s (CPU time, 2 threads) at 1 KB, 75 and 76-79 at
 * 2 KB (A B three times; 4 KB below 1 KB), as the bandwidth probe's
 * 4-stream read peaks at 2 KB (membw.c). */
#ifndef OMNI_X86_F16_STREAMS_512
#define OMNI_X86_F16_STREAMS_512 4
#endif
#define F16_STREAMS_MAX_512 (OMNI_X86_F16_STREAMS_512 > 1 ? OMNI_X86_F16_STREAMS_512 : 1)
#ifndef OMNI_X86_F16_PF_DIST
#define OMNI_X86_F16_PF_DIST 2048
#endif
static inline __attribute__((always_inline)) void dot_f16_rows_avx512(int64_t n, const uint8_t *const *w,
                                                                      const void *a, const int S, const int pf,
                                                                      float *out)
{
    const float *y = a;
    __m512 acc0[F16_STREAMS_MAX_512], acc1[F16_STREAMS_MAX_512];
#pragma GCC unroll 4
    for (int s = 0; s < S; s++)
        acc0[s] = acc1[s] = _mm512_setzero_ps();
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
#pragma GCC unroll 4
        for (int s = 0; s < S; s++) {
            const ggml_half *x = (const ggml_half *)w[s];
            if (pf)
                _mm_prefetch((const char *)(x + i) + OMNI_X86_F16_PF_DIST, _MM_HINT_T0);
            __m512 w0 = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(x + i)));
            __m512 w1 = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(x + i + 16)));
            acc0[s] = _mm512_fmadd_ps(w0, _mm512_loadu_ps(y + i), acc0[s]);
            acc1[s] = _mm512_fmadd_ps(w1, _mm512_loadu_ps(y + i + 16), acc1[s]);
        }
    }
    const int64_t i_tail = i;
#pragma GCC unroll 4
    for (int s = 0; s < S; s++) {
        const ggml_half *x = (const ggml_half *)w[s];
        for (i = i_tail; i < n; i += 16) {
            __mmask16 k = n - i >= 16 ? 0xffff : (__mmask16)((1u << (n - i)) - 1);
            __m512 w0 = _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(k, x + i));
            acc0[s] = _mm512_fmadd_ps(w0, _mm512_maskz_loadu_ps(k, y + i), acc0[s]);
        }
        out[s] = _mm512_reduce_add_ps(_mm512_add_ps(acc0[s], acc1[s]));
    }
}

static float vec_dot_f16_f32_avx512(int64_t n, const void *w, const void *a)
{
    const uint8_t *x = w;
    float r;
    dot_f16_rows_avx512(n, &x, a, 1, 0, &r);
    return r;
}

/* bf16 -> f32 is exact: the 16 bits become the top of the float. */
static inline __m512 bf16x16_to_ps(__m256i v)
{
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(v), 16));
}

static float vec_dot_bf16_f32_avx512(int64_t n, const void *w, const void *a)
{
    const uint16_t *x = w;
    const float *y = a;
    __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        __m512 w0 = bf16x16_to_ps(_mm256_loadu_si256((const __m256i *)(x + i)));
        __m512 w1 = bf16x16_to_ps(_mm256_loadu_si256((const __m256i *)(x + i + 16)));
        acc0 = _mm512_fmadd_ps(w0, _mm512_loadu_ps(y + i), acc0);
        acc1 = _mm512_fmadd_ps(w1, _mm512_loadu_ps(y + i + 16), acc1);
    }
    for (; i < n; i += 16) {
        __mmask16 k = n - i >= 16 ? 0xffff : (__mmask16)((1u << (n - i)) - 1);
        __m512 w0 = bf16x16_to_ps(_mm256_maskz_loadu_epi16(k, x + i));
        acc0 = _mm512_fmadd_ps(w0, _mm512_maskz_loadu_ps(k, y + i), acc0);
    }
    return _mm512_reduce_add_ps(_mm512_add_ps(acc0, acc1));
}

// ---- K blocks ----------------------------------------------------------------

/* Decode's K-quant rows (q6_K here, q4_K/q5_K at VNNI below) through
 * vec_dot_prep: the thread's rows as OMNI_X86_K_STREAMS contiguous
 * sub-ranges walked in lockstep, each prefetched OMNI_X86_K_PF_DIST bytes
 * ahead in the block loop, every row with vec_dot's steps and bits (as the
 * AVX2 level's K_STREAM_ROWS; Intel host, job i_v3, 4864 x 896, 2 threads,
 * thread-CPU GB/s: q4_K 23.1 -> 39.1, q6_K 21.9 -> 35.4 at avx512vnni; the
 * AVX2 4-stream forms there 35.2 / 38.5). 1 = one row at a time (no
 * vec_dot_prep). */
#ifndef OMNI_X86_K_STREAMS
#define OMNI_X86_K_STREAMS 4
#endif
#define K_STREAMS_MAX (OMNI_X86_K_STREAMS > 1 ? OMNI_X86_K_STREAMS : 1)
#ifndef OMNI_X86_K_PF_DIST
#define OMNI_X86_K_PF_DIST 2048
#endif
static inline void k_prefetch(const void *block, size_t bytes)
{
    for (size_t o = 0; o < bytes; o += 64)
        _mm_prefetch((const char *)block + OMNI_X86_K_PF_DIST + o, _MM_HINT_T0);
}
#define K_STREAM_ROWS_512(rows_call)                                                       \
    (void)prep;                                                                            \
    const int64_t per = K_STREAMS_MAX > 1 ? n_rows / K_STREAMS_MAX : 0;                    \
    for (int64_t r = 0; r < per; r++) {                                                    \
        const uint8_t *ws[K_STREAMS_MAX];                                                  \
        float o[K_STREAMS_MAX];                                                            \
        for (int s = 0; s < K_STREAMS_MAX; s++)                                            \
            ws[s] = (const uint8_t *)w + (size_t)(r + s * per) * w_row;                    \
        rows_call(ws, K_STREAMS_MAX, o);                                                   \
        for (int s = 0; s < K_STREAMS_MAX; s++)                                            \
            y[r + s * per] = o[s];                                                         \
    }                                                                                      \
    for (int64_t r = (K_STREAMS_MAX > 1 ? K_STREAMS_MAX : 0) * per; r < n_rows; r++) {     \
        const uint8_t *wr = (const uint8_t *)w + (size_t)r * w_row;                       \
        rows_call(&wr, 1, &y[r]);                                                          \
    }

static void act_prep_none_512(const void *a, float *prep, int64_t n)
{
    (void)a;
    (void)prep;
    (void)n;
}

/* q6_K in 512 bits: a half block's 64 ql bytes and its qh bytes (shifted by
 * 0 and 2) give 64 elements per register without any shuffles. S weight
 * rows w[s] in lockstep (pf: prefetch ahead in each), each with the one-row
 * steps. */
static inline __attribute__((always_inline)) void dot_q6_K_rows_avx512(int64_t n, const uint8_t *const *w,
                                                                       const void *a, const int S, const int pf,
                                                                       float *out)
{
    const block_q8_K *y = a;
    const __m512i m4 = _mm512_set1_epi8(0x0f), m2 = _mm512_set1_epi8(3), m30 = _mm512_set1_epi8(0x30);
    float acc[K_STREAMS_MAX];
    for (int s = 0; s < S; s++)
        acc[s] = 0.0f;
    for (int64_t i = 0; i < n / QK_K; i++) {
#pragma GCC unroll 4
      for (int s = 0; s < S; s++) {
        const block_q6_K *x = (const block_q6_K *)w[s];
        if (pf)
            k_prefetch(&x[i], sizeof x[i]);
        const __m256i sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)x[i].scales));
        /* the -32 offset: sum over 16-element sub-blocks of sc * sum(y) */
        const int offset = hsum_epi32_256(_mm256_madd_epi16(sc16, _mm256_loadu_si256((const __m256i *)y[i].bsums)));
        const __m512i sc512 = _mm512_castsi256_si512(sc16);
        __m512i sumi = _mm512_setzero_si512();
        for (int h = 0; h < 2; h++) {
            const __m512i ql = _mm512_loadu_si512(x[i].ql + 64 * h);
            const __m256i qh256 = _mm256_loadu_si256((const __m256i *)(x[i].qh + 32 * h));
            const __m512i qh = _mm512_inserti64x4(_mm512_castsi256_si512(qh256), _mm256_srli_epi16(qh256, 2), 1);
            /* elements 0-63 of this half: low nibbles + qh bits 0-1 / 2-3;
             * elements 64-127: high nibbles + qh bits 4-5 / 6-7 */
            __m512i q[2];
            q[0] = _mm512_or_si512(_mm512_and_si512(ql, m4), _mm512_slli_epi16(_mm512_and_si512(qh, m2), 4));
            q[1] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(ql, 4), m4), _mm512_and_si512(qh, m30));
            for (int k = 0; k < 2; k++) {
                /* sub-blocks 8h+4k .. 8h+4k+3, 8 int16 lanes each */
                const int s0 = 8 * h + 4 * k;
                const __m512i idx = _mm512_set_epi16(
                    s0 + 3, s0 + 3, s0 + 3, s0 + 3, s0 + 3, s0 + 3, s0 + 3, s0 + 3,
                    s0 + 2, s0 + 2, s0 + 2, s0 + 2, s0 + 2, s0 + 2, s0 + 2, s0 + 2,
                    s0 + 1, s0 + 1, s0 + 1, s0 + 1, s0 + 1, s0 + 1, s0 + 1, s0 + 1,
                    s0, s0, s0, s0, s0, s0, s0, s0);
                __m512i p = _mm512_maddubs_epi16(q[k], _mm512_loadu_si512(y[i].qs + 128 * h + 64 * k));
                sumi = _mm512_add_epi32(sumi, _mm512_madd_epi16(p, _mm512_permutexvar_epi16(idx, sc512)));
            }
        }
        acc[s] += y[i].d * h2f(x[i].d) * (float)(_mm512_reduce_add_epi32(sumi) - 32 * offset);
      }
    }
    for (int s = 0; s < S; s++)
        out[s] = acc[s];
}

static float vec_dot_q6_K_q8_K_avx512(int64_t n, const void *w, const void *a)
{
    const uint8_t *x = w;
    float r;
    dot_q6_K_rows_avx512(n, &x, a, 1, 0, &r);
    return r;
}

/* f16's decode rows in OMNI_X86_F16_STREAMS_512 streams (K_STREAM_ROWS_512's
 * loop with that count) */
static void vec_dot_prep_f16_avx512(int64_t n, const void *w, size_t w_row, int64_t n_rows, const void *a,
                                    const float *prep, float *y)
{
    (void)prep;
    const int64_t per = F16_STREAMS_MAX_512 > 1 ? n_rows / F16_STREAMS_MAX_512 : 0;
    for (int64_t r = 0; r < per; r++) {
        const uint8_t *ws[F16_STREAMS_MAX_512];
        float o[F16_STREAMS_MAX_512];
        for (int s = 0; s < F16_STREAMS_MAX_512; s++)
            ws[s] = (const uint8_t *)w + (size_t)(r + s * per) * w_row;
        dot_f16_rows_avx512(n, ws, a, F16_STREAMS_MAX_512, 1, o);
        for (int s = 0; s < F16_STREAMS_MAX_512; s++)
            y[r + s * per] = o[s];
    }
    for (int64_t r = (F16_STREAMS_MAX_512 > 1 ? F16_STREAMS_MAX_512 : 0) * per; r < n_rows; r++) {
        const uint8_t *wr = (const uint8_t *)w + (size_t)r * w_row;
        dot_f16_rows_avx512(n, &wr, a, 1, 1, &y[r]);
    }
}

#define Q6K_ROWS_512(ws, S, o) dot_q6_K_rows_avx512(n, ws, a, S, 1, o)
static void vec_dot_prep_q6_K_avx512(int64_t n, const void *w, size_t w_row, int64_t n_rows, const void *a,
                                     const float *prep, float *y)
{
    K_STREAM_ROWS_512(Q6K_ROWS_512)
}

/* vec_dot_q6_K_q8_K_avx512 for NC activation rows: the weights are unpacked
 * and their scales permuted once per super-block; every column then runs
 * the single-row kernel's integer and float steps in its order. */
static inline __attribute__((always_inline)) void
dot_n_q6_K(int64_t n, const block_q6_K *x, const uint8_t *a, size_t a_row, float *s,
           size_t s_stride, const int NC)
{
    const __m512i m4 = _mm512_set1_epi8(0x0f), m2 = _mm512_set1_epi8(3), m30 = _mm512_set1_epi8(0x30);
    float acc[OMNI_DOT_COLS_MAX] = { 0 };
    for (int64_t i = 0; i < n / QK_K; i++) {
        const block_q8_K *y[OMNI_DOT_COLS_MAX];
        for (int c = 0; c < NC; c++)
            y[c] = (const block_q8_K *)(a + c * a_row) + i;
        const __m256i sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)x[i].scales));
        const __m512i sc512 = _mm512_castsi256_si512(sc16);
        __m512i sumi[OMNI_DOT_COLS_MAX];
        for (int c = 0; c < NC; c++)
            sumi[c] = _mm512_setzero_si512();
        /* unrolled: the scale permutes must be constants */
#pragma GCC unroll 2
        for (int h = 0; h < 2; h++) {
            const __m512i ql = _mm512_loadu_si512(x[i].ql + 64 * h);
            const __m256i qh256 = _mm256_loadu_si256((const __m256i *)(x[i].qh + 32 * h));
            const __m512i qh = _mm512_inserti64x4(_mm512_castsi256_si512(qh256), _mm256_srli_epi16(qh256, 2), 1);
            __m512i q[2];
            q[0] = _mm512_or_si512(_mm512_and_si512(ql, m4), _mm512_slli_epi16(_mm512_and_si512(qh, m2), 4));
            q[1] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(ql, 4), m4), _mm512_and_si512(qh, m30));
#pragma GCC unroll 2
            for (int k = 0; k < 2; k++) {
                const int s0 = 8 * h + 4 * k;
                const __m512i idx = _mm512_set_epi16(
                    s0 + 3, s0 + 3, s0 + 3, s0 + 3, s0 + 3, s0 + 3, s0 + 3, s0 + 3,
                    s0 + 2, s0 + 2, s0 + 2, s0 + 2, s0 + 2, s0 + 2, s0 + 2, s0 + 2,
                    s0 + 1, s0 + 1, s0 + 1, s0 + 1, s0 + 1, s0 + 1, s0 + 1, s0 + 1,
                    s0, s0, s0, s0, s0, s0, s0, s0);
                const __m512i sc = _mm512_permutexvar_epi16(idx, sc512);
                for (int c = 0; c < NC; c++) {
                    __m512i p = _mm512_maddubs_epi16(q[k], _mm512_loadu_si512(y[c]->qs + 128 * h + 64 * k));
                    sumi[c] = _mm512_add_epi32(sumi[c], _mm512_madd_epi16(p, sc));
                }
            }
        }
        for (int c = 0; c < NC; c++) {
            const int offset = hsum_epi32_256(_mm256_madd_epi16(sc16, _mm256_loadu_si256((const __m256i *)y[c]->bsums)));
            acc[c] += y[c]->d * h2f(x[i].d) * (float)(_mm512_reduce_add_epi32(sumi[c]) - 32 * offset);
        }
    }
    for (int c = 0; c < NC; c++)
        s[c * s_stride] = acc[c];
}

static void vec_dot_n_q6_K_q8_K_avx512(int64_t n, const void *w, const void *a, size_t a_row,
                                        int n_cols, float *s, size_t s_stride)
{
    switch (n_cols) {
    case 1: dot_n_q6_K(n, w, a, a_row, s, s_stride, 1); break;
    case 2: dot_n_q6_K(n, w, a, a_row, s, s_stride, 2); break;
    case 3: dot_n_q6_K(n, w, a, a_row, s, s_stride, 3); break;
    default: dot_n_q6_K(n, w, a, a_row, s, s_stride, 4); break;
    }
}

void omni_x86_register_avx512(struct omni_quant_ops ops[GGML_TYPE_COUNT])
{
    ops[GGML_TYPE_F32].vec_dot = vec_dot_f32_f32_avx512;
    ops[GGML_TYPE_F16].vec_dot = vec_dot_f16_f32_avx512;
    ops[GGML_TYPE_BF16].vec_dot = vec_dot_bf16_f32_avx512;
    ops[GGML_TYPE_Q6_K].vec_dot = vec_dot_q6_K_q8_K_avx512;
    ops[GGML_TYPE_Q6_K].vec_dot_n = vec_dot_n_q6_K_q8_K_avx512;
    if (K_STREAMS_MAX > 1) { /* decode's row streams */
        ops[GGML_TYPE_Q6_K].act_prep = act_prep_none_512;
        ops[GGML_TYPE_Q6_K].vec_dot_prep = vec_dot_prep_q6_K_avx512;
    }
    if (F16_STREAMS_MAX_512 > 1) {
        ops[GGML_TYPE_F16].act_prep = act_prep_none_512;
        ops[GGML_TYPE_F16].vec_dot_prep = vec_dot_prep_f16_avx512;
    }
}

// ---- level AVX512VNNI ----------------------------------------------------------

#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512vnni")

// ---- 32-element blocks -----------------------------------------------------

/* 256-bit VNNI (see the top of the file). q5_0: the mask register builds
 * the 5th bits in one move. q4_1 and q5_1 keep their AVX2 kernels. */

static inline __m256i unpack_nibbles(const uint8_t *q)
{
    __m128i v = _mm_loadu_si128((const __m128i *)q);
    return _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(v, 4), v), _mm256_set1_epi8(0x0f));
}

/* d * dot of block i added to acc; y is never -128 (see the AVX2 dot_i8). */
static inline __m256 block_q5_0_q8_0(const block_q5_0 *x, const block_q8_0 *y, __m256 acc)
{
    uint32_t h;
    memcpy(&h, x->qh, 4);
    __m256i qx = _mm256_or_si256(unpack_nibbles(x->qs),
                                 _mm256_maskz_mov_epi8(_cvtu32_mask32(h), _mm256_set1_epi8(0x10)));
    qx = _mm256_sub_epi8(qx, _mm256_set1_epi8(16));
    __m256i qy = _mm256_loadu_si256((const __m256i *)y->qs);
    __m256i dot = _mm256_dpbusd_epi32(_mm256_setzero_si256(), _mm256_sign_epi8(qx, qx),
                                      _mm256_sign_epi8(qy, qx));
    return _mm256_fmadd_ps(_mm256_set1_ps(h2f(x->d) * h2f(y->d)), _mm256_cvtepi32_ps(dot), acc);
}

static float vec_dot_q5_0_q8_0_avx512(int64_t n, const void *w, const void *a)
{
    const block_q5_0 *x = w;
    const block_q8_0 *y = a;
    const int64_t nb = n / QK8_0;
    /* four accumulators hide the FMA latency */
    __m256 acc0 = _mm256_setzero_ps(), acc1 = acc0, acc2 = acc0, acc3 = acc0;
    int64_t i = 0;
    for (; i + 4 <= nb; i += 4) {
        acc0 = block_q5_0_q8_0(x + i, y + i, acc0);
        acc1 = block_q5_0_q8_0(x + i + 1, y + i + 1, acc1);
        acc2 = block_q5_0_q8_0(x + i + 2, y + i + 2, acc2);
        acc3 = block_q5_0_q8_0(x + i + 3, y + i + 3, acc3);
    }
    for (; i < nb; i++)
        acc0 = block_q5_0_q8_0(x + i, y + i, acc0);
    __m512 s = _mm512_insertf32x8(_mm512_castps256_ps512(_mm256_add_ps(acc0, acc1)),
                                  _mm256_add_ps(acc2, acc3), 1);
    return _mm512_reduce_add_ps(s);
}

/* The AVX2 q8_0 kernel (which this level keeps for one row) for NC
 * activation rows: the same four accumulators per row, block i into i % 4,
 * the same float steps, so each row's result has the single-row bits; the
 * weight block and its sign are loaded once, and 32 registers hold the
 * accumulators of four rows. y is never -128 (see the AVX2 dot_i8). */
static inline __attribute__((always_inline)) void
q8_0_block_n(const block_q8_0 *x, const uint8_t *a, size_t a_row, int64_t i,
             __m256 acc[OMNI_DOT_COLS_MAX][4], const int k, const int NC)
{
    const __m256i qx = _mm256_loadu_si256((const __m256i *)x[i].qs);
    const __m256i ax = _mm256_sign_epi8(qx, qx);
    const float dx = h2f(x[i].d);
    for (int c = 0; c < NC; c++) {
        const block_q8_0 *y = (const block_q8_0 *)(a + c * a_row) + i;
        const __m256i qy = _mm256_sign_epi8(_mm256_loadu_si256((const __m256i *)y->qs), qx);
        const __m256i dot = _mm256_dpbusd_epi32(_mm256_setzero_si256(), ax, qy);
        acc[c][k] = _mm256_fmadd_ps(_mm256_set1_ps(dx * h2f(y->d)), _mm256_cvtepi32_ps(dot), acc[c][k]);
    }
}

static inline __attribute__((always_inline)) void
dot_n_q8_0(int64_t n, const block_q8_0 *x, const uint8_t *a, size_t a_row, float *s,
           size_t s_stride, const int NC)
{
    const int64_t nb = n / QK8_0;
    __m256 acc[OMNI_DOT_COLS_MAX][4];
    for (int c = 0; c < NC; c++)
        for (int k = 0; k < 4; k++)
            acc[c][k] = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 4 <= nb; i += 4) {
        q8_0_block_n(x, a, a_row, i, acc, 0, NC);
        q8_0_block_n(x, a, a_row, i + 1, acc, 1, NC);
        q8_0_block_n(x, a, a_row, i + 2, acc, 2, NC);
        q8_0_block_n(x, a, a_row, i + 3, acc, 3, NC);
    }
    for (; i < nb; i++)
        q8_0_block_n(x, a, a_row, i, acc, 0, NC);
    for (int c = 0; c < NC; c++) {
        const __m256 t = _mm256_add_ps(_mm256_add_ps(acc[c][0], acc[c][1]), _mm256_add_ps(acc[c][2], acc[c][3]));
        __m128 v = _mm_add_ps(_mm256_castps256_ps128(t), _mm256_extractf128_ps(t, 1));
        v = _mm_add_ps(v, _mm_movehl_ps(v, v));
        v = _mm_add_ss(v, _mm_movehdup_ps(v));
        s[c * s_stride] = _mm_cvtss_f32(v);
    }
}

static void vec_dot_n_q8_0_q8_0_avx512(int64_t n, const void *w, const void *a, size_t a_row,
                                        int n_cols, float *s, size_t s_stride)
{
    switch (n_cols) {
    case 1: dot_n_q8_0(n, w, a, a_row, s, s_stride, 1); break;
    case 2: dot_n_q8_0(n, w, a, a_row, s, s_stride, 2); break;
    case 3: dot_n_q8_0(n, w, a, a_row, s, s_stride, 3); break;
    default: dot_n_q8_0(n, w, a, a_row, s, s_stride, 4); break;
    }
}

/* d * dot of four q8_0/q4_0 blocks: 256-bit vpdpbusd with the AVX2 twins'
 * integer lanes (q8_0: |x| * sign-moved y; q4_0: nibble * y - 8 * y, the
 * offset as a second vpdpbusd), the four scale products from one F16C
 * conversion (scales4), block k into accumulator k. y is never -128. */
static inline __attribute__((always_inline)) float dot_q8_q4_0_vnni(int64_t n, const void *w,
                                                                     const void *a, const int four)
{
    const int64_t nb = n / QK8_0;
    const size_t bx = four ? sizeof(block_q4_0) : sizeof(block_q8_0);
    const uint8_t *xb = w;
    const block_q8_0 *y = a;
    const __m256i off = _mm256_set1_epi8(8);
    __m256 acc[4];
#pragma GCC unroll 4
    for (int k = 0; k < 4; k++)
        acc[k] = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 4 <= nb; i += 4) {
        const __m128 d4 = scales4(xb + i * bx, bx, (const uint8_t *)(y + i), sizeof *y);
        const __m256 d8 = _mm256_set_m128(d4, d4);
        __m256 d[4];
        d[0] = _mm256_permute_ps(d8, 0x00);
        d[1] = _mm256_permute_ps(d8, 0x55);
        d[2] = _mm256_permute_ps(d8, 0xaa);
        d[3] = _mm256_permute_ps(d8, 0xff);
#pragma GCC unroll 4
        for (int k = 0; k < 4; k++) {
            const __m256i qy = _mm256_loadu_si256((const __m256i *)y[i + k].qs);
            __m256i dot;
            if (four) {
                const __m256i q = unpack_nibbles_b(((const block_q4_0 *)xb + i + k)->qs);
                dot = _mm256_sub_epi32(_mm256_dpbusd_epi32(_mm256_setzero_si256(), q, qy),
                                       _mm256_dpbusd_epi32(_mm256_setzero_si256(), off, qy));
            } else {
                const __m256i qx = _mm256_loadu_si256((const __m256i *)((const block_q8_0 *)xb + i + k)->qs);
                dot = _mm256_dpbusd_epi32(_mm256_setzero_si256(), _mm256_abs_epi8(qx),
                                          _mm256_sign_epi8(qy, qx));
            }
            acc[k] = _mm256_fmadd_ps(d[k], _mm256_cvtepi32_ps(dot), acc[k]);
        }
    }
    for (; i < nb; i++) { /* the remainder into accumulator 0, one block at a time */
        const __m256i qy = _mm256_loadu_si256((const __m256i *)y[i].qs);
        __m256i dot;
        float dx;
        if (four) {
            const block_q4_0 *x = (const block_q4_0 *)xb + i;
            const __m256i q = unpack_nibbles_b(x->qs);
            dot = _mm256_sub_epi32(_mm256_dpbusd_epi32(_mm256_setzero_si256(), q, qy),
                                   _mm256_dpbusd_epi32(_mm256_setzero_si256(), off, qy));
            dx = h2f(x->d);
        } else {
            const block_q8_0 *x = (const block_q8_0 *)xb + i;
            const __m256i qx = _mm256_loadu_si256((const __m256i *)x->qs);
            dot = _mm256_dpbusd_epi32(_mm256_setzero_si256(), _mm256_abs_epi8(qx), _mm256_sign_epi8(qy, qx));
            dx = h2f(x->d);
        }
        acc[0] = _mm256_fmadd_ps(_mm256_set1_ps(dx * h2f(y[i].d)), _mm256_cvtepi32_ps(dot), acc[0]);
    }
    return hsum_ps(_mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3])));
}

static float vec_dot_q8_0_q8_0_vnni(int64_t n, const void *w, const void *a)
{
    return dot_q8_q4_0_vnni(n, w, a, 0);
}

static float vec_dot_q4_0_q8_0_vnni(int64_t n, const void *w, const void *a)
{
    return dot_q8_q4_0_vnni(n, w, a, 1);
}

/* vec_dot_prep for q8_0 / q4_0 / q5_0 (variant 0 / 1 / 2), quants_avx2.c's
 * one-row dot_prep_avx2 with vpdpbusd, one row at a time (each row's bits
 * independent of its neighbours): q8_0 keeps the bits of its vec_dot; q4_0
 * and q5_0 take unsigned weights and the offset once per block, in the
 * one-row form's order (the AVX2 level now pairs rows: other bits, within
 * the dot tolerance). The activation prep is the AVX2 level's. */
/* OMNI_X86_NIBBLES_INSERT (a benchmark variant, tools/device_intel_decode.sh):
 * unpack q4_0/q5_0 nibbles with a 128-bit shift and insert instead of the
 * broadcast load and 64-bit variable shift. */
#ifdef OMNI_X86_NIBBLES_INSERT
#define PREP_NIBBLES unpack_nibbles
#else
#define PREP_NIBBLES unpack_nibbles_b
#endif
/* Decode's prefetch (OMNI_X86_PF; the others are benchmark variants for
 * tools/device_intel_i.sh): 1 (default) a stream prefetch inside the block
 * loop, OMNI_X86_PF_DIST bytes ahead of the blocks being read (across rows:
 * a thread's rows are contiguous; with OMNI_X86_STREAMS below, ahead in each
 * stream), so the requests are spread over the row;
 * 0 the row OMNI_PREFETCH_ROWS ahead into L1 at the start of each row, as
 * the other levels (a burst of a whole row's lines); 2 none (hardware
 * prefetchers only); 3 the row ahead into L2; 4 the stream into L2. Intel host (Sapphire Rapids
 * class), 2 threads streaming q8_0 2048 x 8192 / 8192 x 2048, two rounds,
 * GB/s: 0: 15.5 14.0 / 10.8 15.7; 1 at 1024 bytes: 15.5 13.5 / 15.1 15.1;
 * at 2048: 17.5 16.4 / 17.3 18.7; at 4096: 19.2 19.3 / 19.4 18.9; 2: 11.1
 * 11.8 / 14.6 12.6; 3: 15.6 20.1 / 13.8 13.6 (q4_0 0 vs 1 at 2048: 11.6
 * 11.9 vs 12.1 15.7; one stream a thread, before OMNI_X86_STREAMS). */
#ifndef OMNI_X86_PF
#define OMNI_X86_PF 1
#endif
/* 2048 bytes ahead with the 4 row streams below (8 KB in flight a thread):
 * tg32 Q8_0 29.6 / 27.9 tok/s against 25.3 / 28.1 at 4096 (job i_2) */
#ifndef OMNI_X86_PF_DIST
#define OMNI_X86_PF_DIST 2048
#endif
/* OMNI_X86_Q8_U (a benchmark variant): q8_0 weights made unsigned (w ^ 0x80 =
 * w + 128) into one vpdpbusd, the offset taken off once per block through
 * the prepared activation sums as q4_0's (other bits than vec_dot's), instead
 * of vpabsb + vpsignb per block. */
#ifndef OMNI_X86_Q8_U
#define OMNI_X86_Q8_U 0
#endif

/* OMNI_X86_STREAMS (default 4; 1 = the one-row loop, a benchmark variant):
 * the thread's rows as S contiguous sub-ranges walked in lockstep, S rows
 * at a time, so S streams of the weights are in flight (each prefetched as
 * above) where one stream left the core's memory requests short (llama.cpp's
 * AMX-layout decode reads 4 tiles of 16 rows side by side). Every row's
 * integer and float steps are those of the one-row loop (the same bits).
 * Intel host (Sapphire Rapids class), 2 threads, q8_0 (tools/q8_stream.c,
 * 2048 x 8192 matrices over 768 MiB, two rounds, GB/s): 1 stream 19.5 /
 * 18.5, 2: 19.2 / 18.7, 4: 20.2 / 19.2; tg32 Llama-3.2-1B Q8_0 (two
 * rounds, host load rising to 12): llama.cpp 18.4 / 20.0 tok/s, 1 stream
 * 18.9 / 16.6, 2: 21.1 / 17.1, 4: 20.9 / 18.1 (job i_1); a quieter round:
 * llama.cpp 20.0 / 22.1, 1 stream 19.9 / 20.0, 2: 23.2 / 25.3, 4: 25.3 /
 * 28.1 (4 with 2048 bytes ahead: 29.6 / 27.9; job i_2). Q4_0 (its dot
 * computes slower than memory reads here): 28.6 -> 28.2, llama.cpp 27.5. */
#ifndef OMNI_X86_STREAMS
#define OMNI_X86_STREAMS 4
#endif

/* the integer dot of one block of variant's weights x at activation qy */
static inline __attribute__((always_inline)) __m256i block_prep_vnni(const uint8_t *x, __m256i qy, const int variant,
                                                                     const int tail)
{
    if (variant == 0 && OMNI_X86_Q8_U) {
        const __m256i qx = _mm256_loadu_si256((const __m256i *)((const block_q8_0 *)x)->qs);
        return _mm256_dpbusd_epi32(_mm256_setzero_si256(), _mm256_xor_si256(qx, _mm256_set1_epi8((char)0x80)), qy);
    }
    if (variant == 0) {
        const __m256i qx = _mm256_loadu_si256((const __m256i *)((const block_q8_0 *)x)->qs);
        return _mm256_dpbusd_epi32(_mm256_setzero_si256(), _mm256_abs_epi8(qx), _mm256_sign_epi8(qy, qx));
    }
    if (variant == 1)
        return _mm256_dpbusd_epi32(_mm256_setzero_si256(),
                                   tail ? unpack_nibbles(((const block_q4_0 *)x)->qs)
                                        : PREP_NIBBLES(((const block_q4_0 *)x)->qs), qy);
    const block_q5_0 *x5 = (const block_q5_0 *)x;
    uint32_t h;
    memcpy(&h, x5->qh, 4);
    const __m256i q = _mm256_or_si256(tail ? unpack_nibbles(x5->qs) : PREP_NIBBLES(x5->qs),
                                      _mm256_maskz_mov_epi8(_cvtu32_mask32(h), _mm256_set1_epi8(0x10)));
    return _mm256_dpbusd_epi32(_mm256_setzero_si256(), q, qy);
}

/* y[s] = the dot of weight row w[s] with the prepared activation, s < S */
static inline __attribute__((always_inline)) void dot_prep_vnni(int64_t n, const uint8_t *const *w, const void *a,
                                                                const float *prep, const int variant, const int S,
                                                                float *out)
{
    const int64_t nb = n / QK8_0;
    const size_t bx = variant == 0 ? sizeof(block_q8_0) : variant == 1 ? sizeof(block_q4_0) : sizeof(block_q5_0);
    const block_q8_0 *y = a;
    const float *dy = prep, *sy = prep + nb;
    __m256 acc[4][4];
    __m128 corr[4];
#pragma GCC unroll 4
    for (int s = 0; s < S; s++) {
#pragma GCC unroll 4
        for (int k = 0; k < 4; k++)
            acc[s][k] = _mm256_setzero_ps();
        corr[s] = _mm_setzero_ps();
    }
    int64_t i = 0;
    for (; i + 4 <= nb; i += 4) {
#pragma GCC unroll 4
        for (int s = 0; s < S; s++) {
            const uint8_t *xb = w[s];
            if (OMNI_X86_PF == 1 || OMNI_X86_PF == 4) { /* 4 blocks: 136 (q8_0), 72, 88 bytes */
                const char *p = (const char *)xb + i * bx + OMNI_X86_PF_DIST;
                _mm_prefetch(p, OMNI_X86_PF == 1 ? _MM_HINT_T0 : _MM_HINT_T1);
                _mm_prefetch(p + 64, OMNI_X86_PF == 1 ? _MM_HINT_T0 : _MM_HINT_T1);
                if (variant == 0)
                    _mm_prefetch(p + 128, OMNI_X86_PF == 1 ? _MM_HINT_T0 : _MM_HINT_T1);
            }
            const __m128 dx4 = scales4_x(xb + i * bx, bx);
            const __m128 d4 = _mm_mul_ps(dx4, _mm_loadu_ps(dy + i));
            if (variant || OMNI_X86_Q8_U)
                corr[s] = _mm_add_ps(corr[s], _mm_mul_ps(dx4, _mm_loadu_ps(sy + i)));
            const __m256 d8 = _mm256_set_m128(d4, d4);
            __m256 d[4];
            d[0] = _mm256_permute_ps(d8, 0x00);
            d[1] = _mm256_permute_ps(d8, 0x55);
            d[2] = _mm256_permute_ps(d8, 0xaa);
            d[3] = _mm256_permute_ps(d8, 0xff);
#pragma GCC unroll 4
            for (int k = 0; k < 4; k++) {
                const __m256i qy = _mm256_loadu_si256((const __m256i *)y[i + k].qs);
                const __m256i dot = block_prep_vnni(xb + (i + k) * bx, qy, variant, 0);
                acc[s][k] = _mm256_fmadd_ps(d[k], _mm256_cvtepi32_ps(dot), acc[s][k]);
            }
        }
    }
    const int64_t i_tail = i;
#pragma GCC unroll 4
    for (int s = 0; s < S; s++) {
        float corr_s = hsum_ps128(corr[s]);
        for (i = i_tail; i < nb; i++) {
            const uint8_t *x = w[s] + i * bx;
            ggml_half hd;
            memcpy(&hd, x, sizeof hd);
            const float dx = h2f(hd);
            const __m256i qy = _mm256_loadu_si256((const __m256i *)y[i].qs);
            const __m256i dot = block_prep_vnni(x, qy, variant, 1);
            acc[s][0] = _mm256_fmadd_ps(_mm256_set1_ps(dx * dy[i]), _mm256_cvtepi32_ps(dot), acc[s][0]);
            if (variant || OMNI_X86_Q8_U)
                corr_s += dx * sy[i];
        }
        const float t = hsum_ps(_mm256_add_ps(_mm256_add_ps(acc[s][0], acc[s][1]), _mm256_add_ps(acc[s][2], acc[s][3])));
        out[s] = variant == 0 ? (OMNI_X86_Q8_U ? t - 128.0f * corr_s : t)
                              : t - (variant == 1 ? 8.0f : 16.0f) * corr_s;
    }
}

/* quants_x86_inl.h's DOT_PREP_ROWS with the OMNI_X86_PF and OMNI_X86_STREAMS
 * variants: rows [0, S * per) as S sub-ranges of per rows in lockstep, the
 * rest one at a time */
#define DOT_PREP_ROWS_PF(dot, variant)                                                     \
    const int64_t per = OMNI_X86_STREAMS > 1 ? n_rows / OMNI_X86_STREAMS : 0;             \
    for (int64_t r = 0; r < per; r++) {                                                    \
        const uint8_t *ws[OMNI_X86_STREAMS > 1 ? OMNI_X86_STREAMS : 1];                    \
        float o[OMNI_X86_STREAMS > 1 ? OMNI_X86_STREAMS : 1];                              \
        for (int s = 0; s < OMNI_X86_STREAMS; s++)                                         \
            ws[s] = (const uint8_t *)w + (size_t)(r + s * per) * w_row;                    \
        dot(n, ws, a, prep, variant, OMNI_X86_STREAMS > 1 ? OMNI_X86_STREAMS : 1, o);      \
        for (int s = 0; s < OMNI_X86_STREAMS; s++)                                         \
            y[r + s * per] = o[s];                                                         \
    }                                                                                      \
    for (int64_t r = (OMNI_X86_STREAMS > 1 ? OMNI_X86_STREAMS : 0) * per; r < n_rows; r++) { \
        const uint8_t *wr = (const uint8_t *)w + (size_t)r * w_row;                       \
        if ((OMNI_X86_PF == 0 || OMNI_X86_PF == 3) && r + OMNI_PREFETCH_ROWS < n_rows) {   \
            const uint8_t *p = wr + OMNI_PREFETCH_ROWS * w_row;                            \
            for (size_t o = 0; o < w_row; o += 64)                                         \
                __builtin_prefetch(p + o, 0, OMNI_X86_PF == 3 ? 2 : 3);                    \
        }                                                                                  \
        dot(n, &wr, a, prep, variant, 1, &y[r]);                                           \
    }

/* q4_0 decode, four blocks a register (OMNI_X86_Q40_W4 1, the default; 0:
 * dot_prep_vnni's block at a time). The one-block form spends most of its
 * instructions per block on the block's own scale: a float conversion and a
 * multiply-add of 8 partial sums, a broadcast of the scale product, the f16
 * scales gathered by scalar loads. Here blocks i..i+3 of a row go into the
 * four 128-bit lanes of one zmm (a load and three inserts of their 16 quant
 * bytes), their four f16 scales come from one 64-byte load of the same
 * bytes by one vpermw straight into the lanes' pattern (block k's scale in
 * lanes 4k..4k+3), and one conversion and multiply-add take the 16 partial
 * sums of the four blocks. The activation is laid out to match once per
 * call (struct q40w4_act: blocks' low and high 16 quants by lanes, their
 * scales and sums in the same pattern). Each row's sums have their own
 * fixed order (lanes, then the tail blocks one at a time), whatever its
 * neighbours: S rows in lockstep give each row the bits it has alone. */
#ifndef OMNI_X86_Q40_W4
#define OMNI_X86_Q40_W4 1
#endif
#ifndef OMNI_X86_Q50_W4 /* the same for q5_0 (0: a block at a time) */
#define OMNI_X86_Q50_W4 1
#endif

/* The forms' laid-out activation lives in act_prep's floats after the block
 * scales and sums (OMNI_ACT_PREP_FLOATS leaves it room, 64-byte aligned), so
 * a thread lays it out once per product, not once per call of its rows. */
static inline void *prep_layout(const float *prep, int64_t n)
{
    return (void *)(((uintptr_t)(prep + 2 * (n / QK8_0)) + 63) & ~(uintptr_t)63);
}

/* prep[i] = block i's scale, prep[nb + i] = that times the sum of its int8s
 * (quant.h) */
static void act_prep_blocks_512(const void *a, float *prep, int64_t n)
{
    const block_q8_0 *y = a;
    const int64_t nb = n / QK8_0;
    for (int64_t i = 0; i < nb; i++) {
        const __m256i qy = _mm256_loadu_si256((const __m256i *)y[i].qs);
        const int sum = hsum_epi32_256(_mm256_dpbusd_epi32(_mm256_setzero_si256(), _mm256_set1_epi8(1), qy));
        prep[i] = h2f(y[i].d);
        prep[nb + i] = prep[i] * (float)sum;
    }
}

/* The decode stream's prefetch (OMNI_X86_PF 1 or 4): lines 64-byte lines
 * OMNI_X86_PF_DIST bytes ahead of p */
static inline __attribute__((always_inline)) void stream_prefetch(const uint8_t *p, const int lines)
{
    if (OMNI_X86_PF != 1 && OMNI_X86_PF != 4)
        return;
    for (int l = 0; l < lines; l++)
        _mm_prefetch((const char *)p + OMNI_X86_PF_DIST + 64 * l, OMNI_X86_PF == 1 ? _MM_HINT_T0 : _MM_HINT_T1);
}

struct q40w4_act { /* blocks 4g .. 4g + 3 of the activation */
    _Alignas(64) int8_t lo[64]; /* lane k: block 4g + k's quants 0-15 (the low nibbles') */
    int8_t hi[64];              /* its quants 16-31 (the high nibbles') */
    float dy[16];               /* its scale, in lanes 4k .. 4k + 3 */
    int32_t off[16];            /* -8 (q4_0) or -16 (q5_0) x the sum of the quants lane 4k + j's dot takes */
};

static void q40w4_layout(int64_t ng, const block_q8_0 *y, const float *prep, int offset, struct q40w4_act *g)
{
    for (int64_t i = 0; i < ng; i++)
        for (int k = 0; k < 4; k++) {
            const int64_t b = 4 * i + k;
            memcpy(g[i].lo + 16 * k, y[b].qs, 16);
            memcpy(g[i].hi + 16 * k, y[b].qs + 16, 16);
            for (int l = 0; l < 4; l++) {
                int sum = 0;
                for (int j = 0; j < 4; j++)
                    sum += y[b].qs[4 * l + j] + y[b].qs[16 + 4 * l + j];
                g[i].dy[4 * k + l] = prep[b];
                g[i].off[4 * k + l] = -offset * sum;
            }
        }
}

#define Q40W4_VBMI 0
#include "quants_q40w4_inl.h" /* vec_dot_prep_q4_0_vnni, vec_dot_prep_q5_0_vnni */
#undef Q40W4_VBMI

static void act_prep_q4_0_w4(const void *a, float *prep, int64_t n)
{
    act_prep_blocks_512(a, prep, n);
    if (n >= 4 * QK8_0)
        q40w4_layout(n / QK8_0 / 4, a, prep, 8, prep_layout(prep, n));
}

static void act_prep_q5_0_w4(const void *a, float *prep, int64_t n)
{
    act_prep_blocks_512(a, prep, n);
    if (n >= 4 * QK8_0)
        q40w4_layout(n / QK8_0 / 4, a, prep, 16, prep_layout(prep, n));
}

/* q8_0 decode in the same form (OMNI_X86_Q80_W4 1, the default; 0:
 * dot_prep_vnni, vec_dot's bits): blocks i, i + 1 and i + 2, i + 3 of a row
 * as two zmm of their 32 quants, made unsigned (w + 128, so one vpdpbusd
 * each instead of vpabsb + vpsignb + vpdpbusd) with the -128 x sum started
 * in the integer lanes, their four scales from two 64-byte loads by one
 * vpermw into the lanes' pattern, one conversion and multiply-add of 16
 * lanes per two blocks. Its own bits (within the dot tolerance). */
#ifndef OMNI_X86_Q80_W4
#define OMNI_X86_Q80_W4 1
#endif

struct q80w4_act { /* blocks 4g .. 4g + 3 of the activation */
    _Alignas(64) int8_t q[128]; /* their 32 quants each, in order */
    float dy[32];               /* block k's scale in lanes 8k .. 8k + 7 */
    int32_t off[32];            /* -128 x the sum of the 4 quants lane j's dot takes */
};

static void q80w4_layout(int64_t ng, const block_q8_0 *y, const float *prep, struct q80w4_act *g)
{
    for (int64_t i = 0; i < ng; i++)
        for (int k = 0; k < 4; k++) {
            const int64_t b = 4 * i + k;
            memcpy(g[i].q + 32 * k, y[b].qs, 32);
            for (int l = 0; l < 8; l++) {
                int sum = 0;
                for (int j = 0; j < 4; j++)
                    sum += y[b].qs[4 * l + j];
                g[i].dy[8 * k + l] = prep[b];
                g[i].off[8 * k + l] = -128 * sum;
            }
        }
}

static inline __attribute__((always_inline)) void q80w4_rows(int64_t n, const uint8_t *const *w,
                                                             const struct q80w4_act *g, const void *a,
                                                             const float *prep, const int S, float *out)
{
    const int64_t nb = n / QK8_0, ng = nb / 4;
    const block_q8_0 *y = a;
    const __m512i sign = _mm512_set1_epi8((char)0x80);
    /* scales at bytes 0, 34 (words 0, 17 of the first load) and 68, 102
     * (words 2, 19 of the second, at byte 64), 8 lanes each */
    const __m512i sidx = _mm512_set_epi16(19, 19, 19, 19, 19, 19, 19, 19, 2, 2, 2, 2, 2, 2, 2, 2, 17, 17, 17, 17,
                                          17, 17, 17, 17, 0, 0, 0, 0, 0, 0, 0, 0);
    __m512 acc[K_STREAMS_MAX];
#pragma GCC unroll 4
    for (int s = 0; s < S; s++)
        acc[s] = _mm512_setzero_ps();
    for (int64_t i = 0; i < ng; i++) {
        const struct q80w4_act *ga = &g[i];
#pragma GCC unroll 4
        for (int s = 0; s < S; s++) {
            const uint8_t *p = w[s] + 4 * sizeof(block_q8_0) * i;
            stream_prefetch(p, 3);
            const __m512i q0 = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)(p + 2))),
                                                  _mm256_loadu_si256((const __m256i *)(p + 36)), 1);
            const __m512i q1 = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)(p + 70))),
                                                  _mm256_loadu_si256((const __m256i *)(p + 104)), 1);
            const __m512i sw = _mm512_mask_permutexvar_epi16(
                _mm512_permutexvar_epi16(sidx, _mm512_loadu_si512((const void *)p)), (__mmask32)0xffff0000u, sidx,
                _mm512_loadu_si512((const void *)(p + 64)));
            const __m512i d0 = _mm512_dpbusd_epi32(_mm512_load_si512((const void *)ga->off), _mm512_xor_si512(q0, sign),
                                                   _mm512_load_si512((const void *)ga->q));
            const __m512i d1 = _mm512_dpbusd_epi32(_mm512_load_si512((const void *)(ga->off + 16)),
                                                   _mm512_xor_si512(q1, sign), _mm512_load_si512((const void *)(ga->q + 64)));
            const __m512 w0 = _mm512_cvtph_ps(_mm512_castsi512_si256(sw)), w1 = _mm512_cvtph_ps(_mm512_extracti64x4_epi64(sw, 1));
            acc[s] = _mm512_fmadd_ps(_mm512_mul_ps(w0, _mm512_load_ps(ga->dy)), _mm512_cvtepi32_ps(d0), acc[s]);
            acc[s] = _mm512_fmadd_ps(_mm512_mul_ps(w1, _mm512_load_ps(ga->dy + 16)), _mm512_cvtepi32_ps(d1), acc[s]);
        }
    }
#pragma GCC unroll 4
    for (int s = 0; s < S; s++) {
        float t = _mm512_reduce_add_ps(acc[s]);
        for (int64_t i = 4 * ng; i < nb; i++) { /* the last 1-3 blocks one at a time */
            const block_q8_0 *x = (const block_q8_0 *)(w[s] + i * sizeof(block_q8_0));
            const __m256i qy = _mm256_loadu_si256((const __m256i *)y[i].qs);
            const __m256i dot = block_prep_vnni((const uint8_t *)x, qy, 0, 1);
            t += h2f(x->d) * prep[i] * (float)hsum_epi32_256(dot);
        }
        out[s] = t;
    }
}

static void act_prep_q8_0_w4(const void *a, float *prep, int64_t n)
{
    act_prep_blocks_512(a, prep, n);
    if (n >= 4 * QK8_0)
        q80w4_layout(n / QK8_0 / 4, a, prep, prep_layout(prep, n));
}

static void vec_dot_prep_q8_0_vnni(int64_t n, const void *w, size_t w_row, int64_t n_rows, const void *a,
                                    const float *prep, float *y)
{
    if (OMNI_X86_Q80_W4 && n >= 4 * QK8_0) {
        const struct q80w4_act *g = prep_layout(prep, n);
#define Q80W4_ROWS(ws, S, o) q80w4_rows(n, ws, g, a, prep, S, o)
        K_STREAM_ROWS_512(Q80W4_ROWS)
#undef Q80W4_ROWS
        return;
    }
    DOT_PREP_ROWS_PF(dot_prep_vnni, 0)
}

/* The same forms with VBMI's byte permutes and BITALG's bit shuffle, for
 * the CPUs that have them (q40w4_vbmi): on Zen 5, q5_0 1.2-1.3x and q4_0
 * 1.1x one core in cache */
#pragma GCC push_options
#pragma GCC target("avx512vbmi,avx512bitalg")
#define Q40W4_VBMI 1
#include "quants_q40w4_inl.h" /* vec_dot_prep_q4_0_vbmi, vec_dot_prep_q5_0_vbmi */
#undef Q40W4_VBMI
#pragma GCC pop_options

void omni_x86_q40w4_rows(int five, int vbmi, int64_t n, const void *w, size_t w_row, int64_t n_rows,
                         const void *a, const float *prep, float *y)
{
    (vbmi ? five ? vec_dot_prep_q5_0_vbmi : vec_dot_prep_q4_0_vbmi
          : five ? vec_dot_prep_q5_0_vnni : vec_dot_prep_q4_0_vnni)(n, w, w_row, n_rows, a, prep, y);
}

/* OMNI_X86_Q40_VBMI 0: the forms above without the byte permutes even where
 * the CPU has them (benchmark variant) */
#ifndef OMNI_X86_Q40_VBMI
#define OMNI_X86_Q40_VBMI 1
#endif

static bool q40w4_vbmi(void)
{
    const struct omni_cpu_features *f = omni_cpu();
    return OMNI_X86_Q40_VBMI && f->avx512_vbmi && f->avx512_bitalg && f->os_zmm;
}

// ---- K blocks at VNNI ----------------------------------------------------------

/* The mins of a q4_K/q5_K block against the activation's 16 sums of 16 in
 * 8 int32 lanes, and y.d * x.d / y.d * x.dmin in lanes 0 / 1: the AVX2
 * twins' helpers (quants_avx2.c), so the float steps match theirs. */
static inline __m256i k4_mins_lanes_vnni(uint64_t mn, const int16_t *bsums)
{
    const __m128i m = _mm_cvtsi64_si128((long long)mn);
    return _mm256_madd_epi16(_mm256_cvtepu8_epi16(_mm_unpacklo_epi8(m, m)),
                             _mm256_loadu_si256((const __m256i *)bsums));
}

static inline __m128 k4_dd_vnni(const void *xd, float yd)
{
    uint32_t h;
    memcpy(&h, xd, 4);
    return _mm_mul_ps(_mm_cvtph_ps(_mm_cvtsi32_si128((int)h)), _mm_set1_ps(yd));
}

/* q4_K/q5_K: the AVX2 twins' steps with each pair of scale products and its
 * add as one vpdpwssd (int32 sums: the same lanes), the scale products and
 * the mins in 8 float lanes each as theirs (the same bits). five: q5_K's
 * 5th bits from qh. */
/* S weight rows w[s] in lockstep (pf: prefetch ahead in each), each with
 * the one-row steps (K_STREAM_ROWS_512) */
static inline __attribute__((always_inline)) void dot_q45_K_rows_vnni(int64_t n, const uint8_t *const *w,
                                                                      const void *a, const int five, const int S,
                                                                      const int pf, float *out)
{
    const block_q8_K *y = a;
    const __m256i m4 = _mm256_set1_epi8(0x0f), one = _mm256_set1_epi8(1);
    const size_t bx = five ? sizeof(block_q5_K) : sizeof(block_q4_K);
    __m256 acc[K_STREAMS_MAX], acc_m[K_STREAMS_MAX];
#pragma GCC unroll 4
    for (int s = 0; s < S; s++)
        acc[s] = acc_m[s] = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / QK_K; i++) {
#pragma GCC unroll 4
      for (int s = 0; s < S; s++) {
        const uint8_t *xb = w[s] + i * bx;
        if (pf)
            k_prefetch(xb, bx);
        const uint8_t *scales = five ? ((const block_q5_K *)xb)->scales : ((const block_q4_K *)xb)->scales;
        const uint8_t *qs = five ? ((const block_q5_K *)xb)->qs : ((const block_q4_K *)xb)->qs;
        /* d, then dmin: the block's first 4 bytes in both types */
        const void *xd = five ? (const void *)&((const block_q5_K *)xb)->d : (const void *)&((const block_q4_K *)xb)->d;
        uint64_t sc, mn;
        unpack_k4_scales(scales, &sc, &mn);
        const __m256i sc16 = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(_mm_cvtsi64_si128((long long)sc)));
        const __m256i qh = five ? _mm256_loadu_si256((const __m256i *)((const block_q5_K *)xb)->qh)
                                : _mm256_setzero_si256();
        __m256i sumi = _mm256_setzero_si256();
        /* unrolled: k4_scale_pair's shuffle masks become constants */
#pragma GCC unroll 4
        for (int j = 0; j < QK_K / 64; j++) {
            const __m256i q = _mm256_loadu_si256((const __m256i *)(qs + 32 * j));
            __m256i lo = _mm256_and_si256(q, m4);
            __m256i hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
            if (five) { /* bit 2j of qh[l] is the 5th bit of the low nibble, 2j+1 of the high */
                lo = _mm256_or_si256(lo, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2 * j), one), 4));
                hi = _mm256_or_si256(hi, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2 * j + 1), one), 4));
            }
            __m256i s0, s1;
            k4_scale_pair(sc16, j, &s0, &s1);
            const __m256i p0 = _mm256_maddubs_epi16(lo, _mm256_loadu_si256((const __m256i *)(y[i].qs + 64 * j)));
            const __m256i p1 = _mm256_maddubs_epi16(hi, _mm256_loadu_si256((const __m256i *)(y[i].qs + 64 * j + 32)));
            sumi = _mm256_dpwssd_epi32(_mm256_dpwssd_epi32(sumi, p0, s0), p1, s1);
        }
        const __m128 dd = k4_dd_vnni(xd, y[i].d);
        acc[s] = _mm256_fmadd_ps(_mm256_broadcastss_ps(dd), _mm256_cvtepi32_ps(sumi), acc[s]);
        acc_m[s] = _mm256_fmadd_ps(_mm256_broadcastss_ps(_mm_movehdup_ps(dd)),
                                   _mm256_cvtepi32_ps(k4_mins_lanes_vnni(mn, y[i].bsums)), acc_m[s]);
      }
    }
#pragma GCC unroll 4
    for (int s = 0; s < S; s++)
        out[s] = hsum_ps(acc[s]) - hsum_ps(acc_m[s]);
}

static float vec_dot_q4_K_q8_K_vnni(int64_t n, const void *w, const void *a)
{
    const uint8_t *x = w;
    float r;
    dot_q45_K_rows_vnni(n, &x, a, 0, 1, 0, &r);
    return r;
}

static float vec_dot_q5_K_q8_K_vnni(int64_t n, const void *w, const void *a)
{
    const uint8_t *x = w;
    float r;
    dot_q45_K_rows_vnni(n, &x, a, 1, 1, 0, &r);
    return r;
}

/* q4_K decode in 512 bits (OMNI_X86_Q4K_W 1, the default; 0: the AVX2
 * twin's steps above). A super-block's 128 quant bytes are two zmm; the
 * low nibbles of the first hold sub-blocks 0 and 2, its high nibbles 1 and
 * 3, the second's 4, 6 and 5, 7. The activation is laid out to match once
 * per call (struct q4kw_act: its 256 quants in those 32-byte chunks, the
 * sums of its 8 sub-blocks, its scale), so a super-block takes 4 vpmaddubsw
 * and 4 vpdpwssd with the sub-block scales spread by 4 vpermw (one int32
 * sum, one conversion and multiply-add), where the 256-bit steps take twice
 * the integer instructions and convert 8 lanes twice. Other bits than
 * vec_dot (the sums in other lanes): within the dot tolerance; each row's
 * order is fixed whatever its neighbours. */
#ifndef OMNI_X86_Q4K_W
#define OMNI_X86_Q4K_W 1
#endif

struct q4kw_act { /* one super-block of the activation */
    _Alignas(64) int8_t q[256]; /* values 0-31 64-95 | 32-63 96-127 | 128-159 192-223 | 160-191 224-255 */
    int16_t sums[8];            /* the sums of its 8 sub-blocks of 32 */
    float d;
    char pad[44];
};

static void q4kw_layout(int64_t nsb, const block_q8_K *y, struct q4kw_act *g)
{
    static const int16_t from[8] = { 0, 64, 32, 96, 128, 192, 160, 224 };
    for (int64_t i = 0; i < nsb; i++) {
        for (int c = 0; c < 8; c++)
            memcpy(g[i].q + 32 * c, y[i].qs + from[c], 32);
        for (int j = 0; j < 8; j++)
            g[i].sums[j] = (int16_t)(y[i].bsums[2 * j] + y[i].bsums[2 * j + 1]);
        g[i].d = y[i].d;
    }
}

/* act_prep of q4_K's form: only the laid-out activation */
static void act_prep_q4kw(const void *a, float *prep, int64_t n)
{
    q4kw_layout(n / QK_K, a, prep_layout(prep, n));
}

static inline __attribute__((always_inline)) void q4kw_rows(int64_t n, const uint8_t *const *w,
                                                            const struct q4kw_act *g, const int S, float *out)
{
    const __m512i m4 = _mm512_set1_epi8(0x0f);
    /* sub-block scales (words 0-7) into 16-word halves: (0, 2) (1, 3) (4, 6) (5, 7) */
    const __m512i p02 = _mm512_set_epi64(0x0002000200020002ll, 0x0002000200020002ll, 0x0002000200020002ll,
                                         0x0002000200020002ll, 0, 0, 0, 0);
    const __m512i p13 = _mm512_add_epi16(p02, _mm512_set1_epi16(1));
    const __m512i p46 = _mm512_add_epi16(p02, _mm512_set1_epi16(4));
    const __m512i p57 = _mm512_add_epi16(p02, _mm512_set1_epi16(5));
    __m512 acc[K_STREAMS_MAX];
    __m128 acc_m[K_STREAMS_MAX];
#pragma GCC unroll 4
    for (int s = 0; s < S; s++) {
        acc[s] = _mm512_setzero_ps();
        acc_m[s] = _mm_setzero_ps();
    }
    for (int64_t i = 0; i < n / QK_K; i++) {
        const struct q4kw_act *ga = &g[i];
#pragma GCC unroll 4
        for (int s = 0; s < S; s++) {
            const block_q4_K *x = (const block_q4_K *)w[s] + i;
            k_prefetch(x, sizeof *x);
            uint64_t sc, mn;
            unpack_k4_scales(x->scales, &sc, &mn);
            const __m512i sc16 = _mm512_castsi128_si512(_mm_cvtepu8_epi16(_mm_cvtsi64_si128((long long)sc)));
            const __m512i q0 = _mm512_loadu_si512((const void *)x->qs);
            const __m512i q1 = _mm512_loadu_si512((const void *)(x->qs + 64));
            const __m512i l0 = _mm512_and_si512(q0, m4), h0 = _mm512_and_si512(_mm512_srli_epi16(q0, 4), m4);
            const __m512i l1 = _mm512_and_si512(q1, m4), h1 = _mm512_and_si512(_mm512_srli_epi16(q1, 4), m4);
            __m512i sumi = _mm512_madd_epi16(_mm512_maddubs_epi16(l0, _mm512_load_si512((const void *)ga->q)),
                                             _mm512_permutexvar_epi16(p02, sc16));
            sumi = _mm512_dpwssd_epi32(sumi, _mm512_maddubs_epi16(h0, _mm512_load_si512((const void *)(ga->q + 64))),
                                       _mm512_permutexvar_epi16(p13, sc16));
            sumi = _mm512_dpwssd_epi32(sumi, _mm512_maddubs_epi16(l1, _mm512_load_si512((const void *)(ga->q + 128))),
                                       _mm512_permutexvar_epi16(p46, sc16));
            sumi = _mm512_dpwssd_epi32(sumi, _mm512_maddubs_epi16(h1, _mm512_load_si512((const void *)(ga->q + 192))),
                                       _mm512_permutexvar_epi16(p57, sc16));
            const __m128 dd = k4_dd_vnni(&x->d, ga->d); /* d * y.d, dmin * y.d */
            acc[s] = _mm512_fmadd_ps(_mm512_broadcastss_ps(dd), _mm512_cvtepi32_ps(sumi), acc[s]);
            const __m128i mins = _mm_madd_epi16(_mm_cvtepu8_epi16(_mm_cvtsi64_si128((long long)mn)),
                                                _mm_loadu_si128((const __m128i *)ga->sums));
            acc_m[s] = _mm_fmadd_ps(_mm_shuffle_ps(dd, dd, 0x55), _mm_cvtepi32_ps(mins), acc_m[s]);
        }
    }
#pragma GCC unroll 4
    for (int s = 0; s < S; s++)
        out[s] = _mm512_reduce_add_ps(acc[s]) - hsum_ps128(acc_m[s]);
}

/* q6_K decode at the VNNI level (OMNI_X86_Q6K_W 1, the default; 0: level
 * AVX512's dot_q6_K_rows_avx512 above): its integer steps with each scale
 * product and its add as one vpdpwssd, the -32 offset (sum of scale x
 * sub-block sums) subtracted in the integer lanes, and the super-block's
 * sum converted and scaled in 16 float lanes, where the one-row form sums
 * two vectors horizontally per super-block and scales on the scalar side.
 * Other bits than vec_dot (float lanes), within the dot tolerance; each
 * row's order is fixed whatever its neighbours. */
#ifndef OMNI_X86_Q6K_W
#define OMNI_X86_Q6K_W 1
#endif

static inline __attribute__((always_inline)) void q6kw_rows(int64_t n, const uint8_t *const *w, const void *a,
                                                            const int S, float *out)
{
    const block_q8_K *y = a;
    const __m512i m4 = _mm512_set1_epi8(0x0f), m2 = _mm512_set1_epi8(3), m30 = _mm512_set1_epi8(0x30);
    /* sub-blocks s0 .. s0 + 3 (8 int16 lanes each) for s0 = 0, 4, 8, 12 */
    const __m512i i0 = _mm512_set_epi64(0x0003000300030003ll, 0x0003000300030003ll, 0x0002000200020002ll,
                                        0x0002000200020002ll, 0x0001000100010001ll, 0x0001000100010001ll, 0, 0);
    const __m512i idx[4] = { i0, _mm512_add_epi16(i0, _mm512_set1_epi16(4)), _mm512_add_epi16(i0, _mm512_set1_epi16(8)),
                             _mm512_add_epi16(i0, _mm512_set1_epi16(12)) };
    __m512 acc[K_STREAMS_MAX];
#pragma GCC unroll 4
    for (int s = 0; s < S; s++)
        acc[s] = _mm512_setzero_ps();
    for (int64_t i = 0; i < n / QK_K; i++) {
        const __m256i bsums = _mm256_loadu_si256((const __m256i *)y[i].bsums);
#pragma GCC unroll 4
        for (int s = 0; s < S; s++) {
            const block_q6_K *x = (const block_q6_K *)w[s] + i;
            k_prefetch(x, sizeof *x);
            const __m256i sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)x->scales));
            const __m512i sc512 = _mm512_castsi256_si512(sc16);
            __m512i sumi = _mm512_setzero_si512();
#pragma GCC unroll 2
            for (int h = 0; h < 2; h++) {
                const __m512i ql = _mm512_loadu_si512(x->ql + 64 * h);
                const __m256i qh256 = _mm256_loadu_si256((const __m256i *)(x->qh + 32 * h));
                const __m512i qh = _mm512_inserti64x4(_mm512_castsi256_si512(qh256), _mm256_srli_epi16(qh256, 2), 1);
                const __m512i q0 = _mm512_or_si512(_mm512_and_si512(ql, m4), _mm512_slli_epi16(_mm512_and_si512(qh, m2), 4));
                const __m512i q1 = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(ql, 4), m4), _mm512_and_si512(qh, m30));
                sumi = _mm512_dpwssd_epi32(sumi, _mm512_maddubs_epi16(q0, _mm512_loadu_si512(y[i].qs + 128 * h)),
                                           _mm512_permutexvar_epi16(idx[2 * h], sc512));
                sumi = _mm512_dpwssd_epi32(sumi, _mm512_maddubs_epi16(q1, _mm512_loadu_si512(y[i].qs + 128 * h + 64)),
                                           _mm512_permutexvar_epi16(idx[2 * h + 1], sc512));
            }
            /* - 32 x sum of sc x (the sub-block's activation sum), in lanes 0-7 */
            sumi = _mm512_sub_epi32(sumi, _mm512_zextsi256_si512(_mm256_slli_epi32(_mm256_madd_epi16(sc16, bsums), 5)));
            const float dd = y[i].d * h2f(x->d);
            acc[s] = _mm512_fmadd_ps(_mm512_set1_ps(dd), _mm512_cvtepi32_ps(sumi), acc[s]);
        }
    }
#pragma GCC unroll 4
    for (int s = 0; s < S; s++)
        out[s] = _mm512_reduce_add_ps(acc[s]);
}

#define Q6KW_ROWS(ws, S, o) q6kw_rows(n, ws, a, S, o)
static void vec_dot_prep_q6_K_vnni(int64_t n, const void *w, size_t w_row, int64_t n_rows, const void *a,
                                   const float *prep, float *y)
{
    K_STREAM_ROWS_512(Q6KW_ROWS)
}

#define Q4K_ROWS_VNNI(ws, S, o) dot_q45_K_rows_vnni(n, ws, a, 0, S, 1, o)
#define Q5K_ROWS_VNNI(ws, S, o) dot_q45_K_rows_vnni(n, ws, a, 1, S, 1, o)
static void vec_dot_prep_q4_K_vnni(int64_t n, const void *w, size_t w_row, int64_t n_rows, const void *a,
                                   const float *prep, float *y)
{
    if (OMNI_X86_Q4K_W) {
        const struct q4kw_act *g = prep_layout(prep, n);
#define Q4KW_ROWS(ws, S, o) q4kw_rows(n, ws, g, S, o)
        K_STREAM_ROWS_512(Q4KW_ROWS)
#undef Q4KW_ROWS
        return;
    }
    K_STREAM_ROWS_512(Q4K_ROWS_VNNI)
}

static void vec_dot_prep_q5_K_vnni(int64_t n, const void *w, size_t w_row, int64_t n_rows, const void *a,
                                   const float *prep, float *y)
{
    K_STREAM_ROWS_512(Q5K_ROWS_VNNI)
}

void omni_x86_register_avx512vnni(struct omni_quant_ops ops[GGML_TYPE_COUNT])
{
    ops[GGML_TYPE_Q8_0].vec_dot = vec_dot_q8_0_q8_0_vnni;
    ops[GGML_TYPE_Q8_0].vec_dot_n = vec_dot_n_q8_0_q8_0_avx512;
    ops[GGML_TYPE_Q4_0].vec_dot = vec_dot_q4_0_q8_0_vnni;
    ops[GGML_TYPE_Q5_0].vec_dot = vec_dot_q5_0_q8_0_avx512;
    ops[GGML_TYPE_Q4_K].vec_dot = vec_dot_q4_K_q8_K_vnni;
    ops[GGML_TYPE_Q5_K].vec_dot = vec_dot_q5_K_q8_K_vnni;
    ops[GGML_TYPE_Q8_0].vec_dot_prep = vec_dot_prep_q8_0_vnni;
    ops[GGML_TYPE_Q4_0].vec_dot_prep = OMNI_X86_Q40_W4 && q40w4_vbmi() ? vec_dot_prep_q4_0_vbmi : vec_dot_prep_q4_0_vnni;
    ops[GGML_TYPE_Q5_0].vec_dot_prep = OMNI_X86_Q50_W4 && q40w4_vbmi() ? vec_dot_prep_q5_0_vbmi : vec_dot_prep_q5_0_vnni;
    ops[GGML_TYPE_Q8_0].act_prep = OMNI_X86_Q80_W4 ? act_prep_q8_0_w4 : act_prep_blocks_512;
    ops[GGML_TYPE_Q4_0].act_prep = OMNI_X86_Q40_W4 ? act_prep_q4_0_w4 : act_prep_blocks_512;
    ops[GGML_TYPE_Q5_0].act_prep = OMNI_X86_Q50_W4 ? act_prep_q5_0_w4 : act_prep_blocks_512;
    if (K_STREAMS_MAX > 1) { /* decode's row streams */
        ops[GGML_TYPE_Q4_K].act_prep = OMNI_X86_Q4K_W ? act_prep_q4kw : act_prep_none_512;
        ops[GGML_TYPE_Q5_K].act_prep = act_prep_none_512;
        ops[GGML_TYPE_Q4_K].vec_dot_prep = vec_dot_prep_q4_K_vnni;
        ops[GGML_TYPE_Q5_K].vec_dot_prep = vec_dot_prep_q5_K_vnni;
        if (OMNI_X86_Q6K_W) /* (act_prep: level AVX512's) */
            ops[GGML_TYPE_Q6_K].vec_dot_prep = vec_dot_prep_q6_K_vnni;
    }
}

#pragma GCC pop_options

#endif /* __x86_64__ */
