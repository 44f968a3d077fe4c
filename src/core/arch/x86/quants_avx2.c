/* quants_avx2.c - AVX2/FMA/F16C dot products and activation quantizers.
 *
 * Integer parts are exact (products of int8 pairs summed with maddubs/madd),
 * so results differ from the scalar _ref twins only in float summation order.
 * The activation quantizers reproduce the reference bytes exactly.
 *
 * Compiled twice: here for level AVX2, and by quants_avxvnni.c with AVX-VNNI
 * on (__AVXVNNI__), where the u8 x s8 multiply-adds become one VEX vpdpbusd
 * into int32 lanes. Both forms give the same exact int32 sums (the AVX2
 * one's int16 pair sums never saturate on these ranges, noted at each
 * site), so the two levels agree bit for bit. */
#if defined(__x86_64__)

#pragma GCC target("avx2,fma,f16c")
/* x*id must round before the tie test in round_away (no fused multiply-add) */
#pragma GCC optimize("fp-contract=off")

#include "x86.h"

#include <immintrin.h>
#include <stddef.h>
#include <string.h>

#include "quants_x86_inl.h"

static inline ggml_half f2h(float f)
{
    return (ggml_half)_cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT);
}

static inline float hmax_ps(__m256 v)
{
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_movehdup_ps(m));
    return _mm_cvtss_f32(m);
}

/* int32 sums of 4 products of unsigned x (0..255) and signed y bytes. The
 * int16 pair sums cannot saturate for the weights used here (x <= 128). */
static inline __m256i dot_u8i8(__m256i x, __m256i y)
{
#ifdef __AVXVNNI__
    return _mm256_dpbusd_avx_epi32(_mm256_setzero_si256(), x, y);
#else
    return _mm256_madd_epi16(_mm256_maddubs_epi16(x, y), _mm256_set1_epi16(1));
#endif
}

/* Signed x signed: move x's sign onto y (y is never -128: our activation
 * quantizers stay in [-127, 127]). */
static inline __m256i dot_i8(__m256i x, __m256i y)
{
    return dot_u8i8(_mm256_sign_epi8(x, x), _mm256_sign_epi8(y, x));
}

/* 16 bytes of packed nibbles -> 32 bytes: low nibbles, then high nibbles
 * (the q4_0/q4_1/q5 element order). */
static inline __m256i unpack_nibbles(const uint8_t *qs)
{
    __m128i q = _mm_loadu_si128((const __m128i *)qs);
    __m256i v = _mm256_set_m128i(_mm_srli_epi16(q, 4), q);
    return _mm256_and_si256(v, _mm256_set1_epi8(0x0f));
}

// ---- float weights ---------------------------------------------------------

/* Decode's prefetch for the K-quant and f16 one-row dots: KQ_PF_DIST bytes ahead
 * of the block being read, a block's worth of lines per block (rows of a
 * thread are contiguous, so it runs on into the next row; past the last it
 * only touches lines that may not be ours: a prefetch never faults). The
 * per-row burst it replaces (matmul.c: a whole row ahead at the start of
 * each row, 43-128 prefetcht0 at once) stalled on the full miss buffers:
 * 11-14% of a Llama-3.2-1B Q4_K_M decode sampled on those prefetches. 0
 * turns it off (a benchmark variant: matmul.c then keeps its burst). */
#ifndef KQ_PF_DIST
#define KQ_PF_DIST 2048
#endif
/* f16 reads its bytes faster (less work per byte) and streamed better 1 KB
 * ahead. 2 threads, thread CPU time, load 4-5, A B C interleaved x3: the
 * 896x151936 output projection (1792-byte rows) 31.2-33.3 GB/s against
 * 26.7-29.2 at 2 KB and 32.6-34.9 with the row burst; 4864x896 (ffn_down)
 * 25.4-29.1 against 25.9-28.4 and 24.0-25.0. */
#define F16_PF_DIST (KQ_PF_DIST / 2)
static inline void prefetch_ahead(const void *block, size_t bytes, int dist)
{
    if (dist > 0)
        for (size_t o = 0; o < bytes; o += 64)
            _mm_prefetch((const char *)block + dist + o, _MM_HINT_T0);
}
static inline void kq_prefetch(const void *block, size_t bytes)
{
    prefetch_ahead(block, bytes, KQ_PF_DIST);
}

/* OMNI_X86_AVX2_STREAMS (S): streaming rows (over
 * DOT_PREP_STREAM_MIN_ROW_BYTES) as S contiguous sub-ranges of the call's
 * rows walked in lockstep, S rows at a time, so S streams of the weights
 * are in flight, each prefetched KQ_PF_DIST ahead (quants_avx512.c's
 * OMNI_X86_STREAMS for the AVX-512 VNNI dots). Every row keeps the one-row
 * loop's integer and float steps (its four accumulators: the same bits), so
 * S streams hold 4 S accumulators: past S = 2 they spill on AVX2's 16
 * registers. 1 = one row at a time. */
#ifndef OMNI_X86_AVX2_STREAMS
#define OMNI_X86_AVX2_STREAMS 4
#endif
#define AVX2_STREAMS_MAX (OMNI_X86_AVX2_STREAMS > 1 ? OMNI_X86_AVX2_STREAMS : 1)
/* f16's decode rows in the streams too (0: one row at a time, a benchmark variant) */
#ifndef OMNI_X86_F16_STREAMS
#define OMNI_X86_F16_STREAMS 1
#endif

static float vec_dot_f32_f32_avx2(int64_t n, const void *w, const void *a)
{
    const float *x = w, *y = a;
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i), acc0);
        acc1 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i + 8), _mm256_loadu_ps(y + i + 8), acc1);
    }
    float s = hsum_ps(_mm256_add_ps(acc0, acc1));
    for (; i < n; i++)
        s += x[i] * y[i];
    return s;
}

/* f16 rows w[s], s < S, in lockstep (decode's row streams, as the quant
 * dots below): each row with the one-row steps, so vec_dot's bits */
static inline __attribute__((always_inline)) void dot_f16_rows(int64_t n, const uint8_t *const *w, const void *a,
                                                               const int S, float *out)
{
    const float *y = a;
    __m256 acc0[AVX2_STREAMS_MAX], acc1[AVX2_STREAMS_MAX];
#pragma GCC unroll 4
    for (int s = 0; s < S; s++)
        acc0[s] = acc1[s] = _mm256_setzero_ps();
    int64_t i = 0;
    /* a line (32 halves) per step of two, prefetched F16_PF_DIST ahead
     * (decode's stream; matmul.c's row loop leaves it to this); the same
     * adds in the same order as one step at a time */
    for (; i + 32 <= n; i += 32) {
#pragma GCC unroll 4
        for (int s = 0; s < S; s++) {
            const ggml_half *x = (const ggml_half *)w[s];
            prefetch_ahead(x + i, 64, F16_PF_DIST);
#pragma GCC unroll 2
            for (int k = 0; k < 32; k += 16) {
                __m256 w0 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(x + i + k)));
                __m256 w1 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(x + i + k + 8)));
                acc0[s] = _mm256_fmadd_ps(w0, _mm256_loadu_ps(y + i + k), acc0[s]);
                acc1[s] = _mm256_fmadd_ps(w1, _mm256_loadu_ps(y + i + k + 8), acc1[s]);
            }
        }
    }
    const int64_t i_tail = i;
#pragma GCC unroll 4
    for (int s = 0; s < S; s++) {
        const ggml_half *x = (const ggml_half *)w[s];
        for (i = i_tail; i + 16 <= n; i += 16) {
            __m256 w0 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(x + i)));
            __m256 w1 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(x + i + 8)));
            acc0[s] = _mm256_fmadd_ps(w0, _mm256_loadu_ps(y + i), acc0[s]);
            acc1[s] = _mm256_fmadd_ps(w1, _mm256_loadu_ps(y + i + 8), acc1[s]);
        }
        float r = hsum_ps(_mm256_add_ps(acc0[s], acc1[s]));
        for (; i < n; i++)
            r += h2f(x[i]) * y[i];
        out[s] = r;
    }
}

static float vec_dot_f16_f32_avx2(int64_t n, const void *w, const void *a)
{
    const uint8_t *x = w;
    float r;
    dot_f16_rows(n, &x, a, 1, &r);
    return r;
}

static inline __m256 bf16x8_to_ps(const uint16_t *p)
{
    __m256i v = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
}

static float vec_dot_bf16_f32_avx2(int64_t n, const void *w, const void *a)
{
    const uint16_t *x = w;
    const float *y = a;
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        acc0 = _mm256_fmadd_ps(bf16x8_to_ps(x + i), _mm256_loadu_ps(y + i), acc0);
        acc1 = _mm256_fmadd_ps(bf16x8_to_ps(x + i + 8), _mm256_loadu_ps(y + i + 8), acc1);
    }
    float s = hsum_ps(_mm256_add_ps(acc0, acc1));
    for (; i < n; i++) {
        uint32_t u = (uint32_t)x[i] << 16;
        float f;
        memcpy(&f, &u, 4);
        s += f * y[i];
    }
    return s;
}

/* f16/bf16 -> f32 conversions are exact, so these give the scalar bits; the
 * f16 one serves the attention's F16 K/V rows and the BLAS path. */
static void dequantize_row_f16_avx2(const void *vx, float *y, int64_t n)
{
    const ggml_half *x = vx;
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        _mm256_storeu_ps(y + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(x + i))));
        _mm256_storeu_ps(y + i + 8, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(x + i + 8))));
    }
    for (; i < n; i++)
        y[i] = h2f(x[i]);
}

static void dequantize_row_bf16_avx2(const void *vx, float *y, int64_t n)
{
    const uint16_t *x = vx;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(y + i, bf16x8_to_ps(x + i));
    for (; i < n; i++) {
        uint32_t u = (uint32_t)x[i] << 16;
        memcpy(&y[i], &u, 4);
    }
}

/* q8_0 -> f32: d * q is one rounding, as in the scalar code (the attention's
 * Q8_0 K/V rows). */
static void dequantize_row_q8_0_avx2(const void *vx, float *y, int64_t n)
{
    const block_q8_0 *x = vx;
    for (int64_t i = 0; i < n / QK8_0; i++, y += QK8_0) {
        const __m256 d = _mm256_set1_ps(h2f(x[i].d));
        for (int k = 0; k < QK8_0; k += 8) {
            const __m256i q = _mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(x[i].qs + k)));
            _mm256_storeu_ps(y + k, _mm256_mul_ps(d, _mm256_cvtepi32_ps(q)));
        }
    }
}

// ---- 32-element blocks -----------------------------------------------------

/* Each block kernel adds d * dot(block i) to acc. Four accumulators hide the
 * FMA latency: one chain would cost ~4 cycles a block. */
typedef __m256 (*block_fn)(const void *w, const void *a, int64_t i, __m256 acc);

static inline __attribute__((always_inline)) float sum_blocks(int64_t nb, const void *w,
                                                              const void *a, block_fn f)
{
    __m256 acc0 = _mm256_setzero_ps(), acc1 = acc0, acc2 = acc0, acc3 = acc0;
    int64_t i = 0;
    for (; i + 4 <= nb; i += 4) {
        acc0 = f(w, a, i, acc0);
        acc1 = f(w, a, i + 1, acc1);
        acc2 = f(w, a, i + 2, acc2);
        acc3 = f(w, a, i + 3, acc3);
    }
    for (; i < nb; i++)
        acc0 = f(w, a, i, acc0);
    return hsum_ps(_mm256_add_ps(_mm256_add_ps(acc0, acc1), _mm256_add_ps(acc2, acc3)));
}

static inline __m256 scale_fma(float d, __m256i dot, __m256 acc)
{
    return _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(dot), acc);
}

static inline __m256 block_q8_0_q8_0(const void *w, const void *a, int64_t i, __m256 acc)
{
    const block_q8_0 *x = (const block_q8_0 *)w + i, *y = (const block_q8_0 *)a + i;
    __m256i qx = _mm256_loadu_si256((const __m256i *)x->qs);
    __m256i qy = _mm256_loadu_si256((const __m256i *)y->qs);
    return scale_fma(h2f(x->d) * h2f(y->d), dot_i8(qx, qy), acc);
}

static inline __m256 block_q4_0_q8_0(const void *w, const void *a, int64_t i, __m256 acc)
{
    const block_q4_0 *x = (const block_q4_0 *)w + i;
    const block_q8_0 *y = (const block_q8_0 *)a + i;
    __m256i qx = _mm256_sub_epi8(unpack_nibbles(x->qs), _mm256_set1_epi8(8));
    __m256i qy = _mm256_loadu_si256((const __m256i *)y->qs);
    return scale_fma(h2f(x->d) * h2f(y->d), dot_i8(qx, qy), acc);
}

static inline __m256 block_q4_1_q8_1(const void *w, const void *a, int64_t i, __m256 acc)
{
    const block_q4_1 *x = (const block_q4_1 *)w + i;
    const block_q8_1 *y = (const block_q8_1 *)a + i;
    __m256i qy = _mm256_loadu_si256((const __m256i *)y->qs);
    return scale_fma(h2f(x->d) * h2f(y->d), dot_u8i8(unpack_nibbles(x->qs), qy), acc);
}

static inline __m256 block_q5_0_q8_0(const void *w, const void *a, int64_t i, __m256 acc)
{
    const block_q5_0 *x = (const block_q5_0 *)w + i;
    const block_q8_0 *y = (const block_q8_0 *)a + i;
    __m256i hi = _mm256_and_si256(bits_to_bytes(x->qh), _mm256_set1_epi8(0x10));
    __m256i qx = _mm256_sub_epi8(_mm256_or_si256(unpack_nibbles(x->qs), hi), _mm256_set1_epi8(16));
    __m256i qy = _mm256_loadu_si256((const __m256i *)y->qs);
    return scale_fma(h2f(x->d) * h2f(y->d), dot_i8(qx, qy), acc);
}

static inline __m256 block_q5_1_q8_1(const void *w, const void *a, int64_t i, __m256 acc)
{
    const block_q5_1 *x = (const block_q5_1 *)w + i;
    const block_q8_1 *y = (const block_q8_1 *)a + i;
    __m256i hi = _mm256_and_si256(bits_to_bytes(x->qh), _mm256_set1_epi8(0x10));
    __m256i qx = _mm256_or_si256(unpack_nibbles(x->qs), hi);
    __m256i qy = _mm256_loadu_si256((const __m256i *)y->qs);
    return scale_fma(h2f(x->d) * h2f(y->d), dot_u8i8(qx, qy), acc);
}

/* sum_blocks with block_q8_0_q8_0, the four blocks' scale products from
 * one conversion (scales4, below): the same bits. */
static float vec_dot_q8_0_q8_0_avx2(int64_t n, const void *w, const void *a);

/* int32 lanes of sum (q - off) * y over 4 bytes for unsigned q and off
 * bytes (both <= 31, so no int16 pair saturates): the same lanes as
 * dot_i8(q - off, y), without moving signs. */
static inline __m256i dot_off(__m256i q, __m256i y, __m256i off)
{
#ifdef __AVXVNNI__
    return _mm256_sub_epi32(dot_u8i8(q, y), dot_u8i8(off, y));
#else
    const __m256i p = _mm256_sub_epi16(_mm256_maddubs_epi16(q, y), _mm256_maddubs_epi16(off, y));
    return _mm256_madd_epi16(p, _mm256_set1_epi16(1));
#endif
}

/* q4_0/q5_0 rows for decode, where these dots are the compute bound (about
 * 8.5 GB/s of weights per core before): the four blocks of an iteration
 * share one scale conversion and product (scales4), the nibbles come from
 * one broadcast load, and the -8/-16 offset is subtracted as int16 pair
 * sums (dot_off). Integer lanes, scale products and the four
 * accumulators' order are sum_blocks' with block_q4_0_q8_0 /
 * block_q5_0_q8_0, so the result has the same bits. */
static inline __attribute__((always_inline)) float dot_q4_q5_0(int64_t n, const void *w,
                                                               const void *a, const int five)
{
    const int64_t nb = n / QK8_0;
    const size_t bx = five ? sizeof(block_q5_0) : sizeof(block_q4_0);
    const uint8_t *xb = w;
    const block_q8_0 *y = a;
    const __m256i off = _mm256_set1_epi8(five ? 16 : 8);
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
            __m256i q, o = off;
            if (five) { /* nibble + 16 * bit - 16: the offset is 16 where the bit is clear */
                const block_q5_0 *x = (const block_q5_0 *)xb + i + k;
                q = unpack_nibbles_b(x->qs);
                o = _mm256_andnot_si256(bits_to_bytes(x->qh), off);
            } else {
                q = unpack_nibbles_b(((const block_q4_0 *)xb + i + k)->qs);
            }
            const __m256i qy = _mm256_loadu_si256((const __m256i *)y[i + k].qs);
            acc[k] = _mm256_fmadd_ps(d[k], _mm256_cvtepi32_ps(dot_off(q, qy, o)), acc[k]);
        }
    }
    for (; i < nb; i++)
        acc[0] = five ? block_q5_0_q8_0(w, a, i, acc[0]) : block_q4_0_q8_0(w, a, i, acc[0]);
    return hsum_ps(_mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3])));
}

static float vec_dot_q4_0_q8_0_avx2(int64_t n, const void *w, const void *a)
{
    return dot_q4_q5_0(n, w, a, 0);
}

static float vec_dot_q8_0_q8_0_avx2(int64_t n, const void *w, const void *a)
{
    const int64_t nb = n / QK8_0;
    const block_q8_0 *x = w, *y = a;
    __m256 acc[4];
#pragma GCC unroll 4
    for (int k = 0; k < 4; k++)
        acc[k] = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 4 <= nb; i += 4) {
        const __m128 d4 = scales4((const uint8_t *)(x + i), sizeof *x, (const uint8_t *)(y + i), sizeof *y);
        const __m256 d8 = _mm256_set_m128(d4, d4);
        __m256 d[4];
        d[0] = _mm256_permute_ps(d8, 0x00);
        d[1] = _mm256_permute_ps(d8, 0x55);
        d[2] = _mm256_permute_ps(d8, 0xaa);
        d[3] = _mm256_permute_ps(d8, 0xff);
#pragma GCC unroll 4
        for (int k = 0; k < 4; k++) {
            const __m256i qx = _mm256_loadu_si256((const __m256i *)x[i + k].qs);
            const __m256i qy = _mm256_loadu_si256((const __m256i *)y[i + k].qs);
            acc[k] = _mm256_fmadd_ps(d[k], _mm256_cvtepi32_ps(dot_i8(qx, qy)), acc[k]);
        }
    }
    for (; i < nb; i++)
        acc[0] = block_q8_0_q8_0(w, a, i, acc[0]);
    return hsum_ps(_mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3])));
}

static float vec_dot_q5_0_q8_0_avx2(int64_t n, const void *w, const void *a)
{
    return dot_q4_q5_0(n, w, a, 1);
}

// ---- decode with the activation prepared once (omni_vec_dot_prep_fn) ----------

/* prep[i] = y_i's scale, prep[nb + i] = that times the sum of y_i's int8s. */
static void act_prep_q8_0_avx2(const void *a, float *prep, int64_t n)
{
    const block_q8_0 *y = a;
    const int64_t nb = n / QK8_0;
    for (int64_t i = 0; i < nb; i++) {
        const __m256i qy = _mm256_loadu_si256((const __m256i *)y[i].qs);
        const int sum = hsum_epi32(dot_u8i8(_mm256_set1_epi8(1), qy));
        prep[i] = h2f(y[i].d);
        prep[nb + i] = prep[i] * (float)sum;
    }
}

/* OMNI_X86_NIBBLES_INSERT (a benchmark variant, tools/device_intel_decode.sh):
 * unpack q4_0/q5_0 nibbles with a 128-bit shift and insert instead of the
 * broadcast load and 64-bit variable shift. */
#ifdef OMNI_X86_NIBBLES_INSERT
#define PREP_NIBBLES unpack_nibbles
#else
#define PREP_NIBBLES unpack_nibbles_b
#endif


/* variant 0: q8_0 (the same steps and bits as vec_dot_q8_0_q8_0_avx2, its
 * activation scales read as floats); 1: q4_0 and 2: q5_0 (rows over 768
 * bytes; shorter ones go two at a time, dot_prep2_avx2 below; quants_avx512.c's
 * VNNI twins follow this form), their weights as
 * unsigned nibble (| 16 * the 5th bit) and the -8 / -16 offset subtracted
 * once per block: off * sum_i dx_i * prep[nb + i]. The integer work per
 * block drops to one vpmaddubsw + vpmaddwd (from two, a subtract and, for
 * q5_0, an andnot), and the activation half of each scale product to a load. */
static inline __attribute__((always_inline)) void dot_prep_avx2(int64_t n, const uint8_t *const *w, const void *a,
                                                                const float *prep, const int variant,
                                                                const int stream, const int S, float *out)
{
    const int64_t nb = n / QK8_0;
    const size_t bx = variant == 0 ? sizeof(block_q8_0) : variant == 1 ? sizeof(block_q4_0) : sizeof(block_q5_0);
    const block_q8_0 *y = a;
    const float *dy = prep, *sy = prep + nb;
    __m256 acc[AVX2_STREAMS_MAX][4];
    __m128 corr[AVX2_STREAMS_MAX];
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
            if (stream)
                kq_prefetch(xb + i * bx, 4 * bx);
            const __m128 dx4 = scales4_x(xb + i * bx, bx);
            const __m128 d4 = _mm_mul_ps(dx4, _mm_loadu_ps(dy + i));
            if (variant)
                corr[s] = _mm_add_ps(corr[s], _mm_mul_ps(dx4, _mm_loadu_ps(sy + i)));
            const __m256 d8 = _mm256_set_m128(d4, d4);
            /* (summing the four blocks' int16 pair sums with horizontal adds
             * first, for one conversion and FMA per four blocks, measured 8-14%
             * slower on an AMD EPYC) Block k's scale is broadcast where its FMA
             * needs it (a literal immediate each), not four held across the
             * step: with q5_0's constants those pushed the correction and a
             * scale out to the stack. The same values and order: same bits. */
#define PREP_STEP(k, imm)                                                                          \
    do {                                                                                           \
        const uint8_t *x = xb + (i + (k)) * bx;                                                    \
        const __m256i qy = _mm256_loadu_si256((const __m256i *)y[i + (k)].qs);                     \
        __m256i dot;                                                                               \
        if (variant == 0) {                                                                        \
            dot = dot_i8(_mm256_loadu_si256((const __m256i *)((const block_q8_0 *)x)->qs), qy);   \
        } else if (variant == 1) {                                                                 \
            dot = dot_u8i8(PREP_NIBBLES(((const block_q4_0 *)x)->qs), qy);                         \
        } else {                                                                                   \
            const block_q5_0 *x5 = (const block_q5_0 *)x;                                          \
            const __m256i hi = _mm256_and_si256(bits_to_bytes(x5->qh), _mm256_set1_epi8(0x10));   \
            dot = dot_u8i8(_mm256_or_si256(PREP_NIBBLES(x5->qs), hi), qy);                         \
        }                                                                                          \
        acc[s][k] = _mm256_fmadd_ps(_mm256_permute_ps(d8, imm), _mm256_cvtepi32_ps(dot), acc[s][k]); \
    } while (0)
            PREP_STEP(0, 0x00);
            PREP_STEP(1, 0x55);
            PREP_STEP(2, 0xaa);
            PREP_STEP(3, 0xff);
#undef PREP_STEP
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
            __m256i dot;
            if (variant == 0) {
                dot = dot_i8(_mm256_loadu_si256((const __m256i *)((const block_q8_0 *)x)->qs), qy);
            } else if (variant == 1) {
                dot = dot_u8i8(unpack_nibbles(((const block_q4_0 *)x)->qs), qy);
            } else {
                const block_q5_0 *x5 = (const block_q5_0 *)x;
                const __m256i hi = _mm256_and_si256(bits_to_bytes(x5->qh), _mm256_set1_epi8(0x10));
                dot = dot_u8i8(_mm256_or_si256(unpack_nibbles(x5->qs), hi), qy);
            }
            acc[s][0] = _mm256_fmadd_ps(_mm256_set1_ps(dx * dy[i]), _mm256_cvtepi32_ps(dot), acc[s][0]);
            if (variant)
                corr_s += dx * sy[i];
        }
        const float t = hsum_ps(_mm256_add_ps(_mm256_add_ps(acc[s][0], acc[s][1]), _mm256_add_ps(acc[s][2], acc[s][3])));
        out[s] = variant == 0 ? t : t - (variant == 1 ? 8.0f : 16.0f) * corr_s;
    }
}

/* The f16 scales opening blocks 0-3 of rows a and b (blocks of bx bytes,
 * 16 < bx < 32) as floats, in the order a0 a2 a1 a3 | b0 b2 b1 b3: each row
 * from two 32-byte loads (blocks 0-1 and 2-3) whose first and second scales
 * one word unpack pairs up, where a scalar gather of 8 halves took ~40
 * instructions. */
static inline __m256 scales_2rows(const uint8_t *xa, const uint8_t *xb, const size_t bx)
{
    /* after the unpack: lane 0's dword 0 = (s0, s2), lane 1's dword (bx - 16) / 2 = (s1, s3) */
    const int hi = 4 + (int)(bx - 16) / 2;
    const __m256i idx = _mm256_setr_epi32(0, hi, 0, hi, 0, hi, 0, hi);
    const __m256i ua = _mm256_unpacklo_epi16(_mm256_loadu_si256((const __m256i *)xa),
                                             _mm256_loadu_si256((const __m256i *)(xa + 2 * bx)));
    const __m256i ub = _mm256_unpacklo_epi16(_mm256_loadu_si256((const __m256i *)xb),
                                             _mm256_loadu_si256((const __m256i *)(xb + 2 * bx)));
    const __m256i h = _mm256_unpacklo_epi64(_mm256_permutevar8x32_epi32(ua, idx), _mm256_permutevar8x32_epi32(ub, idx));
    return _mm256_cvtph_ps(_mm256_castsi256_si128(h));
}

/* q4_0 (variant 1) / q5_0 (variant 2) of two weight rows a and b against one
 * prepared activation, written to *ra and *rb. Each 256-bit step holds a
 * block of row a in its low lane and the same block of row b in its high
 * lane: the 16 low nibbles (elements 0-15) in one register, the high ones
 * (16-31) in another, against the activation's two halves broadcast to both
 * lanes, the two int16 products added before one vpmaddwd, conversion and
 * FMA, which so serve two blocks: about 40% fewer instructions per block
 * than one row a block at a time (the unpack of a lone block wastes half a
 * register). A row's lanes never mix with the other's, so a row's bits do
 * not depend on its partner: a lone row runs as (a, a). */
static inline __attribute__((always_inline)) void dot_prep2_avx2(int64_t n, const uint8_t *xa, const uint8_t *xb,
                                                                  const void *act, const float *prep,
                                                                  const int variant, float *ra, float *rb)
{
    const int64_t nb = n / QK8_0;
    const size_t bx = variant == 1 ? sizeof(block_q4_0) : sizeof(block_q5_0);
    const size_t qs_off = variant == 1 ? offsetof(block_q4_0, qs) : offsetof(block_q5_0, qs);
    const block_q8_0 *y = act;
    const float *dy = prep, *sy = prep + nb;
    const __m256i m4 = _mm256_set1_epi8(0x0f), ones = _mm256_set1_epi16(1);
    /* q5_0: qh's bits 0-15 (16-31) spread over a lane's 16 bytes, one bit each */
    const __m256i shuf_lo = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1,
                                             0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1);
    const __m256i shuf_hi = _mm256_setr_epi8(2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3,
                                             2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3);
    const __m256i bit = _mm256_set1_epi64x(0x8040201008040201LL), b5 = _mm256_set1_epi8(0x10);
    /* two accumulators, the offset correction folded into the second: with
     * q5_0's six constants, four accumulators and a correction sum pushed
     * three of them out to the stack (an FMA through memory and a store per
     * block) */
    __m256 acc[2] = { _mm256_setzero_ps(), _mm256_setzero_ps() };
    /* int32 lanes of lo . y0 + hi . y1: nibbles (| 16) <= 31 against
     * |y| <= 127, so the AVX2 form's int16 sum of four products (<= 15748)
     * is exact, as VNNI's int32 one */
#ifdef __AVXVNNI__
#define PAIR_DOT(lo, hi, y0, y1) _mm256_dpbusd_avx_epi32(dot_u8i8(lo, y0), hi, y1)
    (void)ones;
#else
#define PAIR_DOT(lo, hi, y0, y1) \
    _mm256_madd_epi16(_mm256_add_epi16(_mm256_maddubs_epi16(lo, y0), _mm256_maddubs_epi16(hi, y1)), ones)
#endif
    const __m256 off8 = _mm256_set1_ps(variant == 1 ? 8.0f : 16.0f);
    int64_t i = 0;
    for (; i + 4 <= nb; i += 4) {
        /* lanes in block order 0 2 1 3 (scales_2rows) */
        const __m256 dx = scales_2rows(xa + i * bx, xb + i * bx, bx);
        const __m256 d = _mm256_mul_ps(dx, _mm256_permute_ps(_mm256_broadcast_ps((const __m128 *)(dy + i)), 0xd8));
        acc[1] = _mm256_fnmadd_ps(_mm256_mul_ps(dx, off8),
                                  _mm256_permute_ps(_mm256_broadcast_ps((const __m128 *)(sy + i)), 0xd8), acc[1]);
        /* block k's scale broadcast from d where its FMA needs it (a
         * literal immediate each): four held across the step, with q5_0's
         * six constants, pushed the accumulators out to the stack (an FMA
         * through memory per block) */
#define PAIR_STEP(k, imm)                                                                          \
    do {                                                                                           \
        const size_t o = (size_t)(i + (k)) * bx;                                                   \
        const __m256i v = _mm256_loadu2_m128i((const __m128i *)(xb + o + qs_off), (const __m128i *)(xa + o + qs_off)); \
        __m256i lo = _mm256_and_si256(v, m4), hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4); \
        if (variant == 2) {                                                                        \
            const __m256i h = _mm256_loadu2_m128i((const __m128i *)(xb + o + 2), (const __m128i *)(xa + o + 2)); \
            const __m256i hl = _mm256_and_si256(_mm256_shuffle_epi8(h, shuf_lo), bit);           \
            const __m256i hh = _mm256_and_si256(_mm256_shuffle_epi8(h, shuf_hi), bit);           \
            lo = _mm256_or_si256(lo, _mm256_and_si256(_mm256_cmpeq_epi8(hl, bit), b5));           \
            hi = _mm256_or_si256(hi, _mm256_and_si256(_mm256_cmpeq_epi8(hh, bit), b5));           \
        }                                                                                          \
        const __m256i y0 = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)y[i + (k)].qs)); \
        const __m256i y1 = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(y[i + (k)].qs + 16))); \
        acc[(k) & 1] = _mm256_fmadd_ps(_mm256_permute_ps(d, imm), _mm256_cvtepi32_ps(PAIR_DOT(lo, hi, y0, y1)), acc[(k) & 1]); \
    } while (0)
        PAIR_STEP(0, 0x00);
        PAIR_STEP(1, 0xaa);
        PAIR_STEP(2, 0x55);
        PAIR_STEP(3, 0xff);
#undef PAIR_STEP
    }
#undef PAIR_DOT
    const __m256 s = _mm256_add_ps(acc[0], acc[1]);
    float sa = hsum_ps128(_mm256_castps256_ps128(s)), sb = hsum_ps128(_mm256_extractf128_ps(s, 1));
    float ca = 0.0f, cb = 0.0f;
    for (; i < nb; i++) { /* the last nb % 4 blocks, one row at a time */
        const uint8_t *const xr[2] = { xa + i * bx, xb + i * bx };
        float *const sr[2] = { &sa, &sb }, *const cr[2] = { &ca, &cb };
        for (int r = 0; r < 2; r++) {
            ggml_half hd;
            memcpy(&hd, xr[r], sizeof hd);
            const float dx = h2f(hd);
            __m256i q = unpack_nibbles(xr[r] + qs_off);
            if (variant == 2)
                q = _mm256_or_si256(q, _mm256_and_si256(bits_to_bytes(xr[r] + 2), b5));
            const __m256i qy = _mm256_loadu_si256((const __m256i *)y[i].qs);
            *sr[r] += dx * dy[i] * (float)hsum_epi32(dot_u8i8(q, qy));
            *cr[r] += dx * sy[i];
        }
    }
    const float off = variant == 1 ? 8.0f : 16.0f;
    *ra = sa - off * ca;
    *rb = sb - off * cb;
}

/* Rows of up to this many bytes go two at a time: longer ones (2048 or
 * 4864 wide) streamed 9-22% slower in pairs than one at a time (2 threads,
 * thread CPU time: two interleaved streams, twice the bytes prefetched per
 * step), 896-1024 wide ones (504-616 bytes) 2-10% faster. A matrix's rows
 * all take one form, so bits never depend on the row split. */
#ifndef DOT_PREP2_MAX_ROW_BYTES
#define DOT_PREP2_MAX_ROW_BYTES 768
#endif
/* Rows one at a time over this many bytes stream (kq_prefetch inside the
 * block loop, as the K-quant dots); shorter ones prefetch the row
 * OMNI_PREFETCH_ROWS ahead at the start of each row, at most 8 KB ahead (as
 * matmul.c's per-row loop did). 2 threads, thread CPU time, A B A B, load
 * 7-8: 8192-wide q8_0 rows (8.7 KB) 25.1-25.5 -> 28.0-30.6 GB/s, 4864-wide
 * q5_0 (3.3 KB) 19.8-19.9 -> 21.1-21.5; but 896-wide q8_0 rows (952 bytes,
 * the output projection) 35.6-37.1 -> 30.0-32.6, and the paired q4_0/q5_0
 * rows 12-43% slower streaming: a burst of 15-16 lines does not fill the
 * miss buffers, and the in-loop prefetches cost instructions (896-wide
 * q8_0 with 2 lines per 4 blocks instead of 3, the cheapest stream: 35.9-36.0
 * -> 28.3-31.6 GB/s). With 4 row streams a thread (OMNI_X86_AVX2_STREAMS)
 * q8_0 streams at every width: 896-wide rows 32.6-32.9 -> 45.4-45.7 GB/s,
 * the output projection (896 x 151936) 35.8-40.9 -> 50.6-54.8 (bench_decode
 * at avx2, 2 threads, thread CPU time, A B x3, load 2.5-2.9); q4_0/q5_0's
 * pairs stay (896 wide, all streamed: +1-7%, within the noise of their
 * compute bound; DOT_PREP_Q8_STREAM_MIN_ROW_BYTES is q8_0's). */
#ifndef DOT_PREP_STREAM_MIN_ROW_BYTES
#define DOT_PREP_STREAM_MIN_ROW_BYTES 1024
#endif
#ifndef DOT_PREP_Q8_STREAM_MIN_ROW_BYTES
#define DOT_PREP_Q8_STREAM_MIN_ROW_BYTES 0
#endif

/* The rows of a vec_dot_prep call: long rows streamed (dot_prep_avx2, S
 * streams), shorter ones one at a time with the row OMNI_PREFETCH_ROWS
 * ahead prefetched at its start. */
#define DOT_PREP_ROWS_CAPPED(variant)                                                      \
    if (KQ_PF_DIST > 0 && w_row > (variant ? DOT_PREP_STREAM_MIN_ROW_BYTES : DOT_PREP_Q8_STREAM_MIN_ROW_BYTES)) { \
        const int64_t per = AVX2_STREAMS_MAX > 1 ? n_rows / AVX2_STREAMS_MAX : 0;          \
        for (int64_t r = 0; r < per; r++) {                                                \
            const uint8_t *ws[AVX2_STREAMS_MAX];                                           \
            float o[AVX2_STREAMS_MAX];                                                     \
            for (int s = 0; s < AVX2_STREAMS_MAX; s++)                                     \
                ws[s] = (const uint8_t *)w + (size_t)(r + s * per) * w_row;                \
            dot_prep_avx2(n, ws, a, prep, variant, 1, AVX2_STREAMS_MAX, o);                \
            for (int s = 0; s < AVX2_STREAMS_MAX; s++)                                     \
                y[r + s * per] = o[s];                                                     \
        }                                                                                  \
        for (int64_t r = (AVX2_STREAMS_MAX > 1 ? AVX2_STREAMS_MAX : 0) * per; r < n_rows; r++) { \
            const uint8_t *wr = (const uint8_t *)w + (size_t)r * w_row;                   \
            dot_prep_avx2(n, &wr, a, prep, variant, 1, 1, &y[r]);                          \
        }                                                                                  \
    } else {                                                                               \
        const size_t fit = 8192 / (w_row ? w_row : 1); /* one row: w_row may be 0 */      \
        const int64_t ahead = fit < 1 ? 1 : fit < OMNI_PREFETCH_ROWS ? (int64_t)fit : OMNI_PREFETCH_ROWS; \
        for (int64_t r = 0; r < n_rows; r++) {                                             \
            const uint8_t *wr = (const uint8_t *)w + (size_t)r * w_row;                   \
            if (r + ahead < n_rows)                                                        \
                prefetch_bytes_l1(wr + ahead * w_row, w_row);                              \
            dot_prep_avx2(n, &wr, a, prep, variant, 0, 1, &y[r]);                          \
        }                                                                                  \
    }

#define DOT_PREP2_ROWS(variant)                                                            \
    if ((size_t)(n / QK8_0) * (variant == 1 ? sizeof(block_q4_0) : sizeof(block_q5_0)) >   \
        DOT_PREP2_MAX_ROW_BYTES) {                                                         \
        DOT_PREP_ROWS_CAPPED(variant)                                                      \
        return;                                                                            \
    }                                                                                      \
    const uint8_t *const w0 = w, *const end = w0 + (size_t)n_rows * w_row;                 \
    for (int64_t r = 0; r < n_rows; r += 2) {                                              \
        const uint8_t *wr = w0 + (size_t)r * w_row;                                        \
        const uint8_t *pf = wr + OMNI_PREFETCH_ROWS * w_row;                               \
        if (pf + 2 * w_row <= end)                                                         \
            prefetch_bytes_l1(pf, 2 * w_row);                                              \
        float lone;                                                                        \
        if (r + 1 < n_rows)                                                                \
            dot_prep2_avx2(n, wr, wr + w_row, a, prep, variant, &y[r], &y[r + 1]);         \
        else                                                                               \
            dot_prep2_avx2(n, wr, wr, a, prep, variant, &y[r], &lone);                     \
    }

static void vec_dot_prep_q8_0_avx2(int64_t n, const void *w, size_t w_row, int64_t n_rows, const void *a,
                                    const float *prep, float *y)
{
    DOT_PREP_ROWS_CAPPED(0)
}

static void vec_dot_prep_q4_0_avx2(int64_t n, const void *w, size_t w_row, int64_t n_rows, const void *a,
                                    const float *prep, float *y)
{
    DOT_PREP2_ROWS(1)
}

static void vec_dot_prep_q5_0_avx2(int64_t n, const void *w, size_t w_row, int64_t n_rows, const void *a,
                                    const float *prep, float *y)
{
    DOT_PREP2_ROWS(2)
}

/* q4_1/q5_1: the min term m * s of every block, summed apart */
static float vec_dot_q4_1_q8_1_avx2(int64_t n, const void *w, const void *a)
{
    const block_q4_1 *x = w;
    const block_q8_1 *y = a;
    float summ = 0.0f;
    for (int64_t i = 0; i < n / QK8_1; i++)
        summ += h2f(x[i].m) * h2f(y[i].s);
    return sum_blocks(n / QK8_1, w, a, block_q4_1_q8_1) + summ;
}

static float vec_dot_q5_1_q8_1_avx2(int64_t n, const void *w, const void *a)
{
    const block_q5_1 *x = w;
    const block_q8_1 *y = a;
    float summ = 0.0f;
    for (int64_t i = 0; i < n / QK8_1; i++)
        summ += h2f(x[i].m) * h2f(y[i].s);
    return sum_blocks(n / QK8_1, w, a, block_q5_1_q8_1) + summ;
}

// ---- K blocks ----------------------------------------------------------------

/* The mins of a q4_K/q5_K block against the activation's 16 sums of 16:
 * sum_j m[j] * (bsums[2j] + bsums[2j+1]) in 8 int32 lanes (each min
 * doubled to 16 int16 by a byte unpack, one vpmaddwd), left in lanes for a
 * vector accumulator: the scalar form (mins_dot_bsums: hadd, horizontal
 * sum, conversion, scalar FMA) was ~20 of the ~100 instructions of a
 * 256-element block. */
static inline __m256i k4_mins_lanes(uint64_t mn, const int16_t *bsums)
{
    const __m128i m = _mm_cvtsi64_si128((long long)mn);
    return _mm256_madd_epi16(_mm256_cvtepu8_epi16(_mm_unpacklo_epi8(m, m)),
                             _mm256_loadu_si256((const __m256i *)bsums));
}

/* acc + p0 . s0 + p1 . s1: int16 pair products summed into int32 lanes (the
 * K-quants' int16 sums times their sub-block scales; exact, no overflow at
 * these ranges, so any order of the adds gives the same lanes). AVX-VNNI:
 * two vpdpwssd in place of two vpmaddwd and two vpaddd (OMNI_X86_VNNI_KQ=0,
 * a benchmark variant, keeps the AVX2 form there). */
#ifndef OMNI_X86_VNNI_KQ
#define OMNI_X86_VNNI_KQ 1
#endif
static inline __m256i kq_madd2(__m256i acc, __m256i p0, __m256i s0, __m256i p1, __m256i s1)
{
#if defined(__AVXVNNI__) && OMNI_X86_VNNI_KQ
    return _mm256_dpwssd_avx_epi32(_mm256_dpwssd_avx_epi32(acc, p0, s0), p1, s1);
#else
    return _mm256_add_epi32(acc, _mm256_add_epi32(_mm256_madd_epi16(p0, s0), _mm256_madd_epi16(p1, s1)));
#endif
}

static inline __m256i kq_madd(__m256i acc, __m256i p, __m256i s)
{
#if defined(__AVXVNNI__) && OMNI_X86_VNNI_KQ
    return _mm256_dpwssd_avx_epi32(acc, p, s);
#else
    return _mm256_add_epi32(acc, _mm256_madd_epi16(p, s));
#endif
}

/* y.d * x.d in lane 0 and y.d * x.dmin in lane 1 (the f16 pair that opens
 * a q4_K/q5_K block, one conversion): the products the scalar form took. */
static inline __m128 k4_dd(const void *xd, float yd)
{
    uint32_t h;
    memcpy(&h, xd, 4);
    return _mm_mul_ps(_mm_cvtph_ps(_mm_cvtsi32_si128((int)h)), _mm_set1_ps(yd));
}


/* q4_K: the scale products in 8 float lanes (acc), the mins in 8 more
 * (acc_m), one horizontal sum each per row. dot_q4_K_rows runs S weight
 * rows w[s] in lockstep (decode's row streams, below), each row with the
 * one-row steps. */
static inline __attribute__((always_inline)) void dot_q4_K_rows(int64_t n, const uint8_t *const *w, const void *a,
                                                                const int S, float *out)
{
    const block_q8_K *y = a;
    const __m256i m4 = _mm256_set1_epi8(0x0f);
    __m256 acc[AVX2_STREAMS_MAX], acc_m[AVX2_STREAMS_MAX];
#pragma GCC unroll 4
    for (int s = 0; s < S; s++)
        acc[s] = acc_m[s] = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / QK_K; i++) {
#pragma GCC unroll 4
        for (int s = 0; s < S; s++) {
            const block_q4_K *x = (const block_q4_K *)w[s] + i;
            kq_prefetch(x, sizeof *x);
            uint64_t sc, mn;
            unpack_k4_scales(x->scales, &sc, &mn);
            const __m256i sc16 = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(_mm_cvtsi64_si128((long long)sc)));
            __m256i sumi = _mm256_setzero_si256();
            /* unrolled: k4_scale_pair's shuffle masks become constants (GCC
             * otherwise rebuilds them with two broadcasts per j) */
#pragma GCC unroll 4
            for (int j = 0; j < QK_K / 64; j++) {
                __m256i q = _mm256_loadu_si256((const __m256i *)(x->qs + 32 * j));
                __m256i lo = _mm256_and_si256(q, m4);
                __m256i hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
                __m256i s0, s1;
                k4_scale_pair(sc16, j, &s0, &s1);
                __m256i p0 = _mm256_maddubs_epi16(lo, _mm256_loadu_si256((const __m256i *)(y[i].qs + 64 * j)));
                __m256i p1 = _mm256_maddubs_epi16(hi, _mm256_loadu_si256((const __m256i *)(y[i].qs + 64 * j + 32)));
                sumi = kq_madd2(sumi, p0, s0, p1, s1);
            }
            const __m128 dd = k4_dd(&x->d, y[i].d);
            acc[s] = _mm256_fmadd_ps(_mm256_broadcastss_ps(dd), _mm256_cvtepi32_ps(sumi), acc[s]);
            acc_m[s] = _mm256_fmadd_ps(_mm256_broadcastss_ps(_mm_movehdup_ps(dd)),
                                       _mm256_cvtepi32_ps(k4_mins_lanes(mn, y[i].bsums)), acc_m[s]);
        }
    }
#pragma GCC unroll 4
    for (int s = 0; s < S; s++)
        out[s] = hsum_ps(acc[s]) - hsum_ps(acc_m[s]);
}

static float vec_dot_q4_K_q8_K_avx2(int64_t n, const void *w, const void *a)
{
    const uint8_t *x = w;
    float r;
    dot_q4_K_rows(n, &x, a, 1, &r);
    return r;
}

/* vec_dot_q4_K_q8_K_avx2 for NC activation rows: nibbles and scales are
 * unpacked once per super-block; every column then runs the single-row
 * kernel's integer and float steps in its order. */
static inline __attribute__((always_inline)) void
dot_n_q4_K(int64_t n, const block_q4_K *x, const uint8_t *a, size_t a_row, float *s,
           size_t s_stride, const int NC)
{
    const __m256i m4 = _mm256_set1_epi8(0x0f);
    __m256 acc[OMNI_DOT_COLS_MAX], acc_m[OMNI_DOT_COLS_MAX];
    for (int c = 0; c < NC; c++)
        acc[c] = acc_m[c] = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / QK_K; i++) {
        const block_q8_K *y[OMNI_DOT_COLS_MAX];
        for (int c = 0; c < NC; c++)
            y[c] = (const block_q8_K *)(a + c * a_row) + i;
        uint64_t sc, mn;
        unpack_k4_scales(x[i].scales, &sc, &mn);
        const __m256i sc16 = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(_mm_cvtsi64_si128((long long)sc)));
        __m256i sumi[OMNI_DOT_COLS_MAX];
        for (int c = 0; c < NC; c++)
            sumi[c] = _mm256_setzero_si256();
        /* unrolled: k4_scale_pair's shuffle masks become constants (GCC
         * otherwise rebuilds them with two broadcasts per j) */
#pragma GCC unroll 4
        for (int j = 0; j < QK_K / 64; j++) {
            __m256i q = _mm256_loadu_si256((const __m256i *)(x[i].qs + 32 * j));
            __m256i lo = _mm256_and_si256(q, m4);
            __m256i hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
            __m256i s0, s1;
            k4_scale_pair(sc16, j, &s0, &s1);
            for (int c = 0; c < NC; c++) {
                __m256i p0 = _mm256_maddubs_epi16(lo, _mm256_loadu_si256((const __m256i *)(y[c]->qs + 64 * j)));
                __m256i p1 = _mm256_maddubs_epi16(hi, _mm256_loadu_si256((const __m256i *)(y[c]->qs + 64 * j + 32)));
                sumi[c] = kq_madd2(sumi[c], p0, s0, p1, s1);
            }
        }
        for (int c = 0; c < NC; c++) {
            const __m128 dd = k4_dd(&x[i].d, y[c]->d);
            acc[c] = _mm256_fmadd_ps(_mm256_broadcastss_ps(dd), _mm256_cvtepi32_ps(sumi[c]), acc[c]);
            acc_m[c] = _mm256_fmadd_ps(_mm256_broadcastss_ps(_mm_movehdup_ps(dd)),
                                       _mm256_cvtepi32_ps(k4_mins_lanes(mn, y[c]->bsums)), acc_m[c]);
        }
    }
    for (int c = 0; c < NC; c++)
        s[c * s_stride] = hsum_ps(acc[c]) - hsum_ps(acc_m[c]);
}

static void vec_dot_n_q4_K_q8_K_avx2(int64_t n, const void *w, const void *a, size_t a_row,
                                     int n_cols, float *s, size_t s_stride)
{
    switch (n_cols) {
    case 1: dot_n_q4_K(n, w, a, a_row, s, s_stride, 1); break;
    case 2: dot_n_q4_K(n, w, a, a_row, s, s_stride, 2); break;
    case 3: dot_n_q4_K(n, w, a, a_row, s, s_stride, 3); break;
    default: dot_n_q4_K(n, w, a, a_row, s, s_stride, 4); break;
    }
}

/* q5_K, S weight rows w[s] in lockstep as dot_q4_K_rows */
static inline __attribute__((always_inline)) void dot_q5_K_rows(int64_t n, const uint8_t *const *w, const void *a,
                                                                const int S, float *out)
{
    const block_q8_K *y = a;
    const __m256i m4 = _mm256_set1_epi8(0x0f), one = _mm256_set1_epi8(1);
    __m256 acc[AVX2_STREAMS_MAX], acc_m[AVX2_STREAMS_MAX];
#pragma GCC unroll 4
    for (int s = 0; s < S; s++)
        acc[s] = acc_m[s] = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / QK_K; i++) {
#pragma GCC unroll 4
        for (int s = 0; s < S; s++) {
            const block_q5_K *x = (const block_q5_K *)w[s] + i;
            kq_prefetch(x, sizeof *x);
            uint64_t sc, mn;
            unpack_k4_scales(x->scales, &sc, &mn);
            const __m256i sc16 = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(_mm_cvtsi64_si128((long long)sc)));
            const __m256i qh = _mm256_loadu_si256((const __m256i *)x->qh);
            __m256i sumi = _mm256_setzero_si256();
            /* unrolled: k4_scale_pair's shuffle masks become constants (GCC
             * otherwise rebuilds them with two broadcasts per j) */
#pragma GCC unroll 4
            for (int j = 0; j < QK_K / 64; j++) {
                __m256i q = _mm256_loadu_si256((const __m256i *)(x->qs + 32 * j));
                /* bit 2j of qh[l] is the 5th bit of the low nibble, 2j+1 of the high */
                __m256i h0 = _mm256_and_si256(_mm256_srli_epi16(qh, 2 * j), one);
                __m256i h1 = _mm256_and_si256(_mm256_srli_epi16(qh, 2 * j + 1), one);
                __m256i lo = _mm256_or_si256(_mm256_and_si256(q, m4), _mm256_slli_epi16(h0, 4));
                __m256i hi = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(q, 4), m4),
                                             _mm256_slli_epi16(h1, 4));
                __m256i s0, s1;
                k4_scale_pair(sc16, j, &s0, &s1);
                __m256i p0 = _mm256_maddubs_epi16(lo, _mm256_loadu_si256((const __m256i *)(y[i].qs + 64 * j)));
                __m256i p1 = _mm256_maddubs_epi16(hi, _mm256_loadu_si256((const __m256i *)(y[i].qs + 64 * j + 32)));
                sumi = kq_madd2(sumi, p0, s0, p1, s1);
            }
            const __m128 dd = k4_dd(&x->d, y[i].d);
            acc[s] = _mm256_fmadd_ps(_mm256_broadcastss_ps(dd), _mm256_cvtepi32_ps(sumi), acc[s]);
            acc_m[s] = _mm256_fmadd_ps(_mm256_broadcastss_ps(_mm_movehdup_ps(dd)),
                                       _mm256_cvtepi32_ps(k4_mins_lanes(mn, y[i].bsums)), acc_m[s]);
        }
    }
#pragma GCC unroll 4
    for (int s = 0; s < S; s++)
        out[s] = hsum_ps(acc[s]) - hsum_ps(acc_m[s]);
}

static float vec_dot_q5_K_q8_K_avx2(int64_t n, const void *w, const void *a)
{
    const uint8_t *x = w;
    float r;
    dot_q5_K_rows(n, &x, a, 1, &r);
    return r;
}

/* q6_K, S weight rows w[s] in lockstep as dot_q4_K_rows */
static inline __attribute__((always_inline)) void dot_q6_K_rows(int64_t n, const uint8_t *const *w, const void *a,
                                                                const int S, float *out)
{
    const block_q8_K *y = a;
    const __m256i m4 = _mm256_set1_epi8(0x0f), m2 = _mm256_set1_epi8(3);
    __m256 acc[AVX2_STREAMS_MAX];
#pragma GCC unroll 4
    for (int s = 0; s < S; s++)
        acc[s] = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / QK_K; i++) {
#pragma GCC unroll 4
      for (int s = 0; s < S; s++) {
        const block_q6_K *x = (const block_q6_K *)w[s];
        kq_prefetch(&x[i], sizeof x[i]);
        const int8_t *sc = x[i].scales;
        /* the -32 offset: sum over 16-element sub-blocks of sc * sum(y),
         * subtracted in the integer lanes (|lane| < 2^26: no overflow) and
         * the block's scale product added in 8 float lanes, one horizontal
         * sum per row: the scalar tail per block (two horizontal sums, a
         * conversion and scalar FMA) was ~15 of ~100 instructions */
        __m256i sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)sc));
        __m256i sumi = _mm256_sub_epi32(_mm256_setzero_si256(),
                                        _mm256_slli_epi32(_mm256_madd_epi16(sc16, _mm256_loadu_si256((const __m256i *)y[i].bsums)), 5));
#pragma GCC unroll 2
        for (int h = 0; h < 2; h++) {
            /* scales 8h..8h+7 as int16 in both lanes: one in-lane shuffle
             * per k gives scale 2k to the low lane, 2k+1 to the high one */
            const __m256i sch = h ? _mm256_permute2x128_si256(sc16, sc16, 0x11)
                                  : _mm256_permute2x128_si256(sc16, sc16, 0x00);
            const __m256i ql0 = _mm256_loadu_si256((const __m256i *)(x[i].ql + 64 * h));
            const __m256i ql1 = _mm256_loadu_si256((const __m256i *)(x[i].ql + 64 * h + 32));
            const __m256i qh = _mm256_loadu_si256((const __m256i *)(x[i].qh + 32 * h));
            __m256i q[4];
            q[0] = _mm256_or_si256(_mm256_and_si256(ql0, m4), _mm256_slli_epi16(_mm256_and_si256(qh, m2), 4));
            q[1] = _mm256_or_si256(_mm256_and_si256(ql1, m4),
                                   _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2), m2), 4));
            q[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql0, 4), m4),
                                   _mm256_and_si256(qh, _mm256_set1_epi8(0x30)));
            q[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql1, 4), m4),
                                   _mm256_and_si256(_mm256_srli_epi16(qh, 2), _mm256_set1_epi8(0x30)));
#pragma GCC unroll 4
            for (int k = 0; k < 4; k++) {
                const int8_t *yk = y[i].qs + 128 * h + 32 * k;
                __m256i p = _mm256_maddubs_epi16(q[k], _mm256_loadu_si256((const __m256i *)yk));
                /* int16 lanes 0-7 are elements 0-15 (scale 2k), 8-15 the next 16 */
                const char lo = (char)(4 * k), hi = (char)(4 * k + 2);
                __m256i s = _mm256_shuffle_epi8(sch, _mm256_setr_epi8(lo, lo + 1, lo, lo + 1, lo, lo + 1, lo, lo + 1,
                                                                      lo, lo + 1, lo, lo + 1, lo, lo + 1, lo, lo + 1,
                                                                      hi, hi + 1, hi, hi + 1, hi, hi + 1, hi, hi + 1,
                                                                      hi, hi + 1, hi, hi + 1, hi, hi + 1, hi, hi + 1));
                sumi = kq_madd(sumi, p, s);
            }
        }
        acc[s] = _mm256_fmadd_ps(_mm256_set1_ps(y[i].d * h2f(x[i].d)), _mm256_cvtepi32_ps(sumi), acc[s]);
      }
    }
#pragma GCC unroll 4
    for (int s = 0; s < S; s++)
        out[s] = hsum_ps(acc[s]);
}

static float vec_dot_q6_K_q8_K_avx2(int64_t n, const void *w, const void *a)
{
    const uint8_t *x = w;
    float r;
    dot_q6_K_rows(n, &x, a, 1, &r);
    return r;
}



/* Decode's K-quant (q4_K, q5_K, q6_K) and f16 rows through vec_dot_prep (quant.h): the thread's rows
 * as AVX2_STREAMS_MAX contiguous sub-ranges walked in lockstep, the rest
 * one at a time; every row's bits are vec_dot's. The activation needs no
 * preparation (act_prep does nothing). */
#define K_STREAM_ROWS(rows_fn)                                                             \
    (void)prep;                                                                            \
    const int64_t per = AVX2_STREAMS_MAX > 1 ? n_rows / AVX2_STREAMS_MAX : 0;              \
    for (int64_t r = 0; r < per; r++) {                                                    \
        const uint8_t *ws[AVX2_STREAMS_MAX];                                               \
        float o[AVX2_STREAMS_MAX];                                                         \
        for (int s = 0; s < AVX2_STREAMS_MAX; s++)                                         \
            ws[s] = (const uint8_t *)w + (size_t)(r + s * per) * w_row;                    \
        rows_fn(n, ws, a, AVX2_STREAMS_MAX, o);                                            \
        for (int s = 0; s < AVX2_STREAMS_MAX; s++)                                         \
            y[r + s * per] = o[s];                                                         \
    }                                                                                      \
    for (int64_t r = (AVX2_STREAMS_MAX > 1 ? AVX2_STREAMS_MAX : 0) * per; r < n_rows; r++) { \
        const uint8_t *wr = (const uint8_t *)w + (size_t)r * w_row;                       \
        rows_fn(n, &wr, a, 1, &y[r]);                                                      \
    }

static void act_prep_none(const void *a, float *prep, int64_t n)
{
    (void)a;
    (void)prep;
    (void)n;
}

static void vec_dot_prep_q4_K_avx2(int64_t n, const void *w, size_t w_row, int64_t n_rows, const void *a,
                                   const float *prep, float *y)
{
    K_STREAM_ROWS(dot_q4_K_rows)
}

static void vec_dot_prep_q6_K_avx2(int64_t n, const void *w, size_t w_row, int64_t n_rows, const void *a,
                                   const float *prep, float *y)
{
    K_STREAM_ROWS(dot_q6_K_rows)
}

static void vec_dot_prep_q5_K_avx2(int64_t n, const void *w, size_t w_row, int64_t n_rows, const void *a,
                                   const float *prep, float *y)
{
    K_STREAM_ROWS(dot_q5_K_rows)
}

/* f16 the same way (its activation is f32: nothing to prepare) */
static void vec_dot_prep_f16_avx2(int64_t n, const void *w, size_t w_row, int64_t n_rows, const void *a,
                                  const float *prep, float *y)
{
    K_STREAM_ROWS(dot_f16_rows)
}

// ---- activation quantizers -------------------------------------------------

/* roundf(): to nearest, ties away from zero. v - trunc(v) is exact. */
static inline __m256 round_away(__m256 v)
{
    const __m256 sign = _mm256_set1_ps(-0.0f);
    __m256 t = _mm256_round_ps(v, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
    __m256 frac = _mm256_andnot_ps(sign, _mm256_sub_ps(v, t));
    __m256 step = _mm256_or_ps(_mm256_and_ps(v, sign), _mm256_set1_ps(1.0f));
    __m256 tie_or_more = _mm256_cmp_ps(frac, _mm256_set1_ps(0.5f), _CMP_GE_OQ);
    return _mm256_add_ps(t, _mm256_and_ps(tie_or_more, step));
}

/* 32 int32 values (4 vectors, in order) -> 32 int8 bytes. */
static inline __m256i pack_i32x32(__m256i i0, __m256i i1, __m256i i2, __m256i i3)
{
    __m256i b = _mm256_packs_epi16(_mm256_packs_epi32(i0, i1), _mm256_packs_epi32(i2, i3));
    /* the packs work per 128-bit lane: restore element order */
    return _mm256_permutevar8x32_epi32(b, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

static void quantize_row_q8_0_avx2(const float *x, void *vy, int64_t n)
{
    block_q8_0 *y = vy;
    const __m256 sign = _mm256_set1_ps(-0.0f);
    for (int64_t i = 0; i < n / QK8_0; i++, x += QK8_0) {
        __m256 v[4];
        for (int k = 0; k < 4; k++)
            v[k] = _mm256_loadu_ps(x + 8 * k);
        __m256 m = _mm256_max_ps(_mm256_max_ps(_mm256_andnot_ps(sign, v[0]), _mm256_andnot_ps(sign, v[1])),
                                 _mm256_max_ps(_mm256_andnot_ps(sign, v[2]), _mm256_andnot_ps(sign, v[3])));
        const float d = hmax_ps(m) / 127;
        const float id = d ? 1.0f / d : 0.0f;
        y[i].d = f2h(d);
        const __m256 vid = _mm256_set1_ps(id);
        __m256i q[4];
        for (int k = 0; k < 4; k++)
            q[k] = _mm256_cvtps_epi32(round_away(_mm256_mul_ps(v[k], vid)));
        _mm256_storeu_si256((__m256i *)y[i].qs, pack_i32x32(q[0], q[1], q[2], q[3]));
    }
}

static void quantize_row_q8_K_avx2(const float *x, void *vy, int64_t n)
{
    block_q8_K *y = vy;
    const __m256 sign = _mm256_set1_ps(-0.0f);
    for (int64_t i = 0; i < n / QK_K; i++, x += QK_K) {
        __m256 m = _mm256_setzero_ps();
        for (int k = 0; k < QK_K; k += 8)
            m = _mm256_max_ps(m, _mm256_andnot_ps(sign, _mm256_loadu_ps(x + k)));
        const float amax = hmax_ps(m);
        if (amax == 0.0f) {
            memset(&y[i], 0, sizeof y[i]);
            continue;
        }
        int first = 0; /* the reference keeps the sign of the first maximum */
        while (__builtin_fabsf(x[first]) != amax)
            first++;
        const float iscale = -127.f / x[first];
        const __m256 vs = _mm256_set1_ps(iscale), lim = _mm256_set1_ps(127.f);
        for (int k = 0; k < QK_K; k += 32) {
            __m256i q[4];
            for (int l = 0; l < 4; l++) {
                __m256 v = _mm256_mul_ps(_mm256_loadu_ps(x + k + 8 * l), vs);
                v = _mm256_min_ps(_mm256_round_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC), lim);
                q[l] = _mm256_cvtps_epi32(v);
            }
            _mm256_storeu_si256((__m256i *)(y[i].qs + k), pack_i32x32(q[0], q[1], q[2], q[3]));
        }
        for (int j = 0; j < QK_K / 16; j++) {
            __m256i v = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(y[i].qs + 16 * j)));
            y[i].bsums[j] = (int16_t)hsum_epi32(_mm256_madd_epi16(v, _mm256_set1_epi16(1)));
        }
        y[i].d = 1 / iscale;
    }
}

void omni_x86_register_avx2(struct omni_quant_ops ops[GGML_TYPE_COUNT])
{
    ops[GGML_TYPE_F32].vec_dot = vec_dot_f32_f32_avx2;
    ops[GGML_TYPE_F16].vec_dot = vec_dot_f16_f32_avx2;
    ops[GGML_TYPE_BF16].vec_dot = vec_dot_bf16_f32_avx2;
    ops[GGML_TYPE_F16].to_float = dequantize_row_f16_avx2;
    ops[GGML_TYPE_BF16].to_float = dequantize_row_bf16_avx2;
    ops[GGML_TYPE_Q8_0].to_float = dequantize_row_q8_0_avx2;
    ops[GGML_TYPE_Q8_0].vec_dot = vec_dot_q8_0_q8_0_avx2;
    ops[GGML_TYPE_Q4_0].vec_dot = vec_dot_q4_0_q8_0_avx2;
    ops[GGML_TYPE_Q4_1].vec_dot = vec_dot_q4_1_q8_1_avx2;
    ops[GGML_TYPE_Q5_0].vec_dot = vec_dot_q5_0_q8_0_avx2;
    ops[GGML_TYPE_Q5_1].vec_dot = vec_dot_q5_1_q8_1_avx2;
    ops[GGML_TYPE_Q8_0].act_prep = ops[GGML_TYPE_Q4_0].act_prep = ops[GGML_TYPE_Q5_0].act_prep = act_prep_q8_0_avx2;
    ops[GGML_TYPE_Q8_0].vec_dot_prep = vec_dot_prep_q8_0_avx2;
    ops[GGML_TYPE_Q4_0].vec_dot_prep = vec_dot_prep_q4_0_avx2;
    ops[GGML_TYPE_Q5_0].vec_dot_prep = vec_dot_prep_q5_0_avx2;
    ops[GGML_TYPE_Q4_K].vec_dot = vec_dot_q4_K_q8_K_avx2;
    ops[GGML_TYPE_Q4_K].vec_dot_n = vec_dot_n_q4_K_q8_K_avx2;
    ops[GGML_TYPE_Q5_K].vec_dot = vec_dot_q5_K_q8_K_avx2;
    ops[GGML_TYPE_Q6_K].vec_dot = vec_dot_q6_K_q8_K_avx2;
    if (AVX2_STREAMS_MAX > 1) { /* decode's row streams (K_STREAM_ROWS) */
        ops[GGML_TYPE_Q4_K].act_prep = ops[GGML_TYPE_Q5_K].act_prep = ops[GGML_TYPE_Q6_K].act_prep = act_prep_none;
        ops[GGML_TYPE_Q4_K].vec_dot_prep = vec_dot_prep_q4_K_avx2;
        ops[GGML_TYPE_Q5_K].vec_dot_prep = vec_dot_prep_q5_K_avx2;
        ops[GGML_TYPE_Q6_K].vec_dot_prep = vec_dot_prep_q6_K_avx2;
        if (OMNI_X86_F16_STREAMS) {
            ops[GGML_TYPE_F16].act_prep = act_prep_none;
            ops[GGML_TYPE_F16].vec_dot_prep = vec_dot_prep_f16_avx2;
        }
    }
    if (KQ_PF_DIST > 0) { /* these stream: matmul.c's row loop leaves the prefetch to them */
        ops[GGML_TYPE_F16].vec_dot_streams = vec_dot_f16_f32_avx2;
        ops[GGML_TYPE_Q4_K].vec_dot_streams = vec_dot_q4_K_q8_K_avx2;
        ops[GGML_TYPE_Q5_K].vec_dot_streams = vec_dot_q5_K_q8_K_avx2;
        ops[GGML_TYPE_Q6_K].vec_dot_streams = vec_dot_q6_K_q8_K_avx2;
    }
    for (int t = 0; t < GGML_TYPE_COUNT; t++) {
        if (ops[t].dot_type == GGML_TYPE_Q8_0)
            ops[t].from_float = quantize_row_q8_0_avx2;
        else if (ops[t].dot_type == GGML_TYPE_Q8_K)
            ops[t].from_float = quantize_row_q8_K_avx2;
    }
}

#endif /* __x86_64__ */
