/* quants_avx512.c - AVX-512 (F/BW/VL/DQ + VNNI) dot products.
 *
 * 32-element blocks go two at a time through 512-bit VNNI (vpdpbusd: u8 x s8
 * sums of 4); the K types use 512-bit maddubs/madd, whose int16 stage folds
 * in the 6- or 8-bit sub-block scales. Results differ from the scalar _ref
 * twins only in float summation order. */
#if defined(__x86_64__)

#pragma GCC target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512vnni")

#include "x86.h"

#include <immintrin.h>
#include <string.h>

static inline float h2f(ggml_half h)
{
    return _cvtsh_ss(h);
}

static inline int hsum_epi32_256(__m256i v)
{
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(1, 0, 3, 2)));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(2, 3, 0, 1)));
    return _mm_cvtsi128_si32(s);
}

/* Scale vector for a pair of blocks: da in lanes 0-7, db in lanes 8-15. */
static inline __m512 scale_pair(float da, float db)
{
    return _mm512_insertf32x8(_mm512_set1_ps(da), _mm256_set1_ps(db), 1);
}

static inline __m512i load_pair(const void *a, const void *b)
{
    return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)a)),
                              _mm256_loadu_si256((const __m256i *)b), 1);
}

/* Two blocks of 16 nibble bytes -> 64 bytes in element order (low nibbles,
 * then high nibbles, of block a, then of block b). */
static inline __m512i unpack_nibbles_pair(const uint8_t *a, const uint8_t *b)
{
    __m128i qa = _mm_loadu_si128((const __m128i *)a), qb = _mm_loadu_si128((const __m128i *)b);
    __m512i t = _mm512_castsi128_si512(qa);
    t = _mm512_inserti32x4(t, qa, 1);
    t = _mm512_inserti32x4(t, qb, 2);
    t = _mm512_inserti32x4(t, qb, 3);
    /* quarters 1 and 3 take the high nibbles */
    t = _mm512_mask_blend_epi64(0xcc, t, _mm512_srli_epi16(t, 4));
    return _mm512_and_si512(t, _mm512_set1_epi8(0x0f));
}

/* One block, 256-bit: the odd block at the end of a row. */
static inline __m256i unpack_nibbles_one(const uint8_t *q)
{
    __m128i v = _mm_loadu_si128((const __m128i *)q);
    return _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(v, 4), v), _mm256_set1_epi8(0x0f));
}

/* 5th bits of two q5 blocks as a 64-bit byte mask. */
static inline __mmask64 qh_pair(const uint8_t *a, const uint8_t *b)
{
    uint32_t ha, hb;
    memcpy(&ha, a, 4);
    memcpy(&hb, b, 4);
    return _cvtu64_mask64((uint64_t)ha | ((uint64_t)hb << 32));
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

static float vec_dot_f16_f32_avx512(int64_t n, const void *w, const void *a)
{
    const ggml_half *x = w;
    const float *y = a;
    __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        __m512 w0 = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(x + i)));
        __m512 w1 = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(x + i + 16)));
        acc0 = _mm512_fmadd_ps(w0, _mm512_loadu_ps(y + i), acc0);
        acc1 = _mm512_fmadd_ps(w1, _mm512_loadu_ps(y + i + 16), acc1);
    }
    for (; i < n; i += 16) {
        __mmask16 k = n - i >= 16 ? 0xffff : (__mmask16)((1u << (n - i)) - 1);
        __m512 w0 = _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(k, x + i));
        acc0 = _mm512_fmadd_ps(w0, _mm512_maskz_loadu_ps(k, y + i), acc0);
    }
    return _mm512_reduce_add_ps(_mm512_add_ps(acc0, acc1));
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

// ---- 32-element blocks -----------------------------------------------------

/* sum of x*y for signed x and y (y never -128): |x| as u8 against y with x's sign. */
static inline __m512i dot_i8_512(__m512i x, __m512i y)
{
    __m512i sy = _mm512_mask_sub_epi8(y, _mm512_movepi8_mask(x), _mm512_setzero_si512(), y);
    return _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_abs_epi8(x), sy);
}

static inline __m256i dot_i8_256(__m256i x, __m256i y)
{
    return _mm256_dpbusd_epi32(_mm256_setzero_si256(), _mm256_sign_epi8(x, x), _mm256_sign_epi8(y, x));
}

/* sum of (u - off)*y for unsigned u: one dpbusd for u*y, one for off*y. */
static inline __m512i dot_u8_off_512(__m512i u, __m512i y, __m512i off)
{
    return _mm512_sub_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), u, y),
                            _mm512_dpbusd_epi32(_mm512_setzero_si512(), off, y));
}

static inline __m256i dot_u8_off_256(__m256i u, __m256i y, __m256i off)
{
    return _mm256_sub_epi32(_mm256_dpbusd_epi32(_mm256_setzero_si256(), u, y),
                            _mm256_dpbusd_epi32(_mm256_setzero_si256(), off, y));
}

/* Reduce a 512-bit float accumulator plus a 256-bit tail accumulator. */
static inline float reduce_acc(__m512 acc, __m256 tail)
{
    return _mm512_reduce_add_ps(_mm512_add_ps(acc, _mm512_insertf32x8(_mm512_setzero_ps(), tail, 0)));
}

static float vec_dot_q8_0_q8_0_avx512(int64_t n, const void *w, const void *a)
{
    const block_q8_0 *x = w, *y = a;
    const int64_t nb = n / QK8_0;
    __m512 acc = _mm512_setzero_ps();
    __m256 tail = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 2 <= nb; i += 2) {
        __m512i qx = load_pair(x[i].qs, x[i + 1].qs), qy = load_pair(y[i].qs, y[i + 1].qs);
        __m512 d = scale_pair(h2f(x[i].d) * h2f(y[i].d), h2f(x[i + 1].d) * h2f(y[i + 1].d));
        acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot_i8_512(qx, qy)), d, acc);
    }
    if (i < nb) {
        __m256i qx = _mm256_loadu_si256((const __m256i *)x[i].qs);
        __m256i qy = _mm256_loadu_si256((const __m256i *)y[i].qs);
        tail = _mm256_mul_ps(_mm256_cvtepi32_ps(dot_i8_256(qx, qy)),
                             _mm256_set1_ps(h2f(x[i].d) * h2f(y[i].d)));
    }
    return reduce_acc(acc, tail);
}

static float vec_dot_q4_0_q8_0_avx512(int64_t n, const void *w, const void *a)
{
    const block_q4_0 *x = w;
    const block_q8_0 *y = a;
    const int64_t nb = n / QK8_0;
    __m512 acc = _mm512_setzero_ps();
    __m256 tail = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 2 <= nb; i += 2) {
        __m512i qx = unpack_nibbles_pair(x[i].qs, x[i + 1].qs);
        __m512i qy = load_pair(y[i].qs, y[i + 1].qs);
        __m512 d = scale_pair(h2f(x[i].d) * h2f(y[i].d), h2f(x[i + 1].d) * h2f(y[i + 1].d));
        acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot_u8_off_512(qx, qy, _mm512_set1_epi8(8))), d, acc);
    }
    if (i < nb) {
        __m256i qy = _mm256_loadu_si256((const __m256i *)y[i].qs);
        __m256i s = dot_u8_off_256(unpack_nibbles_one(x[i].qs), qy, _mm256_set1_epi8(8));
        tail = _mm256_mul_ps(_mm256_cvtepi32_ps(s), _mm256_set1_ps(h2f(x[i].d) * h2f(y[i].d)));
    }
    return reduce_acc(acc, tail);
}

static float vec_dot_q4_1_q8_1_avx512(int64_t n, const void *w, const void *a)
{
    const block_q4_1 *x = w;
    const block_q8_1 *y = a;
    const int64_t nb = n / QK8_1;
    __m512 acc = _mm512_setzero_ps();
    __m256 tail = _mm256_setzero_ps();
    float summ = 0.0f;
    int64_t i = 0;
    for (; i + 2 <= nb; i += 2) {
        __m512i qx = unpack_nibbles_pair(x[i].qs, x[i + 1].qs);
        __m512i qy = load_pair(y[i].qs, y[i + 1].qs);
        __m512 d = scale_pair(h2f(x[i].d) * h2f(y[i].d), h2f(x[i + 1].d) * h2f(y[i + 1].d));
        __m512i s = _mm512_dpbusd_epi32(_mm512_setzero_si512(), qx, qy);
        acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), d, acc);
        summ += h2f(x[i].m) * h2f(y[i].s) + h2f(x[i + 1].m) * h2f(y[i + 1].s);
    }
    if (i < nb) {
        __m256i qy = _mm256_loadu_si256((const __m256i *)y[i].qs);
        __m256i s = _mm256_dpbusd_epi32(_mm256_setzero_si256(), unpack_nibbles_one(x[i].qs), qy);
        tail = _mm256_mul_ps(_mm256_cvtepi32_ps(s), _mm256_set1_ps(h2f(x[i].d) * h2f(y[i].d)));
        summ += h2f(x[i].m) * h2f(y[i].s);
    }
    return reduce_acc(acc, tail) + summ;
}

static float vec_dot_q5_0_q8_0_avx512(int64_t n, const void *w, const void *a)
{
    const block_q5_0 *x = w;
    const block_q8_0 *y = a;
    const int64_t nb = n / QK8_0;
    const __m512i bit4 = _mm512_set1_epi8(0x10), off = _mm512_set1_epi8(16);
    __m512 acc = _mm512_setzero_ps();
    __m256 tail = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 2 <= nb; i += 2) {
        __m512i qx = unpack_nibbles_pair(x[i].qs, x[i + 1].qs);
        qx = _mm512_or_si512(qx, _mm512_maskz_mov_epi8(qh_pair(x[i].qh, x[i + 1].qh), bit4));
        __m512i qy = load_pair(y[i].qs, y[i + 1].qs);
        __m512 d = scale_pair(h2f(x[i].d) * h2f(y[i].d), h2f(x[i + 1].d) * h2f(y[i + 1].d));
        acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot_u8_off_512(qx, qy, off)), d, acc);
    }
    if (i < nb) {
        uint32_t h;
        memcpy(&h, x[i].qh, 4);
        __m256i qx = _mm256_or_si256(unpack_nibbles_one(x[i].qs),
                                     _mm256_maskz_mov_epi8(_cvtu32_mask32(h), _mm256_set1_epi8(0x10)));
        __m256i qy = _mm256_loadu_si256((const __m256i *)y[i].qs);
        __m256i s = dot_u8_off_256(qx, qy, _mm256_set1_epi8(16));
        tail = _mm256_mul_ps(_mm256_cvtepi32_ps(s), _mm256_set1_ps(h2f(x[i].d) * h2f(y[i].d)));
    }
    return reduce_acc(acc, tail);
}

static float vec_dot_q5_1_q8_1_avx512(int64_t n, const void *w, const void *a)
{
    const block_q5_1 *x = w;
    const block_q8_1 *y = a;
    const int64_t nb = n / QK8_1;
    const __m512i bit4 = _mm512_set1_epi8(0x10);
    __m512 acc = _mm512_setzero_ps();
    __m256 tail = _mm256_setzero_ps();
    float summ = 0.0f;
    int64_t i = 0;
    for (; i + 2 <= nb; i += 2) {
        __m512i qx = unpack_nibbles_pair(x[i].qs, x[i + 1].qs);
        qx = _mm512_or_si512(qx, _mm512_maskz_mov_epi8(qh_pair(x[i].qh, x[i + 1].qh), bit4));
        __m512i qy = load_pair(y[i].qs, y[i + 1].qs);
        __m512 d = scale_pair(h2f(x[i].d) * h2f(y[i].d), h2f(x[i + 1].d) * h2f(y[i + 1].d));
        __m512i s = _mm512_dpbusd_epi32(_mm512_setzero_si512(), qx, qy);
        acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), d, acc);
        summ += h2f(x[i].m) * h2f(y[i].s) + h2f(x[i + 1].m) * h2f(y[i + 1].s);
    }
    if (i < nb) {
        uint32_t h;
        memcpy(&h, x[i].qh, 4);
        __m256i qx = _mm256_or_si256(unpack_nibbles_one(x[i].qs),
                                     _mm256_maskz_mov_epi8(_cvtu32_mask32(h), _mm256_set1_epi8(0x10)));
        __m256i qy = _mm256_loadu_si256((const __m256i *)y[i].qs);
        __m256i s = _mm256_dpbusd_epi32(_mm256_setzero_si256(), qx, qy);
        tail = _mm256_mul_ps(_mm256_cvtepi32_ps(s), _mm256_set1_ps(h2f(x[i].d) * h2f(y[i].d)));
        summ += h2f(x[i].m) * h2f(y[i].s);
    }
    return reduce_acc(acc, tail) + summ;
}

// ---- K blocks ----------------------------------------------------------------

/* The 8 6-bit scales and mins of a q4_K/q5_K block (layout in quant.h). */
static inline void unpack_k4_scales(const uint8_t *q, uint8_t sc[8], uint8_t m[8])
{
    for (int j = 0; j < 4; j++) {
        sc[j] = q[j] & 63;
        m[j] = q[j + 4] & 63;
        sc[j + 4] = (uint8_t)((q[j + 8] & 0x0f) | ((q[j] >> 6) << 4));
        m[j + 4] = (uint8_t)((q[j + 8] >> 4) | ((q[j + 4] >> 6) << 4));
    }
}

static inline int mins_dot_bsums(const uint8_t m[8], const int16_t *bsums)
{
    __m256i mins = _mm256_setr_epi16(m[0], m[0], m[1], m[1], m[2], m[2], m[3], m[3], m[4], m[4],
                                     m[5], m[5], m[6], m[6], m[7], m[7]);
    return hsum_epi32_256(_mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)bsums), mins));
}

/* int16 scale vector for a 64-element chunk j: scale 2j in lanes 0-15 and
 * 2j+1 in lanes 16-31 (maddubs lanes = element pairs). */
static inline __m512i k4_scale_chunk(__m512i sc16, int j)
{
    const __m512i idx = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_set1_epi16((short)(2 * j))),
                                           _mm256_set1_epi16((short)(2 * j + 1)), 1);
    return _mm512_permutexvar_epi16(idx, sc16);
}

static float vec_dot_q4_K_q8_K_avx512(int64_t n, const void *w, const void *a)
{
    const block_q4_K *x = w;
    const block_q8_K *y = a;
    const __m512i m4 = _mm512_set1_epi8(0x0f);
    __m512 acc = _mm512_setzero_ps();
    float acc_m = 0.0f;
    for (int64_t i = 0; i < n / QK_K; i++) {
        uint8_t sc[8], mn[8];
        unpack_k4_scales(x[i].scales, sc, mn);
        uint64_t sc8;
        memcpy(&sc8, sc, 8);
        const __m512i sc16 = _mm512_cvtepu8_epi16(_mm256_castsi128_si256(_mm_cvtsi64_si128((long long)sc8)));
        __m512i sumi = _mm512_setzero_si512();
        for (int j = 0; j < QK_K / 64; j++) {
            __m256i q = _mm256_loadu_si256((const __m256i *)(x[i].qs + 32 * j));
            __m512i qq = _mm512_inserti64x4(_mm512_castsi256_si512(q), _mm256_srli_epi16(q, 4), 1);
            qq = _mm512_and_si512(qq, m4);
            __m512i p = _mm512_maddubs_epi16(qq, _mm512_loadu_si512(y[i].qs + 64 * j));
            sumi = _mm512_add_epi32(sumi, _mm512_madd_epi16(p, k4_scale_chunk(sc16, j)));
        }
        acc = _mm512_fmadd_ps(_mm512_set1_ps(y[i].d * h2f(x[i].d)), _mm512_cvtepi32_ps(sumi), acc);
        acc_m += y[i].d * h2f(x[i].dmin) * (float)mins_dot_bsums(mn, y[i].bsums);
    }
    return _mm512_reduce_add_ps(acc) - acc_m;
}

static float vec_dot_q5_K_q8_K_avx512(int64_t n, const void *w, const void *a)
{
    const block_q5_K *x = w;
    const block_q8_K *y = a;
    const __m512i m4 = _mm512_set1_epi8(0x0f), bit4 = _mm512_set1_epi8(0x10);
    __m512 acc = _mm512_setzero_ps();
    float acc_m = 0.0f;
    for (int64_t i = 0; i < n / QK_K; i++) {
        uint8_t sc[8], mn[8];
        unpack_k4_scales(x[i].scales, sc, mn);
        uint64_t sc8;
        memcpy(&sc8, sc, 8);
        const __m512i sc16 = _mm512_cvtepu8_epi16(_mm256_castsi128_si256(_mm_cvtsi64_si128((long long)sc8)));
        const __m512i qh = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)x[i].qh));
        __m512i sumi = _mm512_setzero_si512();
        for (int j = 0; j < QK_K / 64; j++) {
            __m256i q = _mm256_loadu_si256((const __m256i *)(x[i].qs + 32 * j));
            __m512i qq = _mm512_inserti64x4(_mm512_castsi256_si512(q), _mm256_srli_epi16(q, 4), 1);
            qq = _mm512_and_si512(qq, m4);
            /* bit 2j of qh[l] extends the low nibbles, bit 2j+1 the high ones */
            const __m512i bits = _mm512_inserti64x4(_mm512_set1_epi8((char)(1 << (2 * j))),
                                                    _mm256_set1_epi8((char)(2 << (2 * j))), 1);
            qq = _mm512_or_si512(qq, _mm512_maskz_mov_epi8(_mm512_test_epi8_mask(qh, bits), bit4));
            __m512i p = _mm512_maddubs_epi16(qq, _mm512_loadu_si512(y[i].qs + 64 * j));
            sumi = _mm512_add_epi32(sumi, _mm512_madd_epi16(p, k4_scale_chunk(sc16, j)));
        }
        acc = _mm512_fmadd_ps(_mm512_set1_ps(y[i].d * h2f(x[i].d)), _mm512_cvtepi32_ps(sumi), acc);
        acc_m += y[i].d * h2f(x[i].dmin) * (float)mins_dot_bsums(mn, y[i].bsums);
    }
    return _mm512_reduce_add_ps(acc) - acc_m;
}

static float vec_dot_q6_K_q8_K_avx512(int64_t n, const void *w, const void *a)
{
    const block_q6_K *x = w;
    const block_q8_K *y = a;
    const __m512i m4 = _mm512_set1_epi8(0x0f), m2 = _mm512_set1_epi8(3), m30 = _mm512_set1_epi8(0x30);
    float acc = 0.0f;
    for (int64_t i = 0; i < n / QK_K; i++) {
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
        acc += y[i].d * h2f(x[i].d) * (float)(_mm512_reduce_add_epi32(sumi) - 32 * offset);
    }
    return acc;
}

void omni_x86_register_avx512(struct omni_quant_ops ops[GGML_TYPE_COUNT])
{
    ops[GGML_TYPE_F32].vec_dot = vec_dot_f32_f32_avx512;
    ops[GGML_TYPE_F16].vec_dot = vec_dot_f16_f32_avx512;
    ops[GGML_TYPE_BF16].vec_dot = vec_dot_bf16_f32_avx512;
    ops[GGML_TYPE_Q8_0].vec_dot = vec_dot_q8_0_q8_0_avx512;
    ops[GGML_TYPE_Q4_0].vec_dot = vec_dot_q4_0_q8_0_avx512;
    ops[GGML_TYPE_Q4_1].vec_dot = vec_dot_q4_1_q8_1_avx512;
    ops[GGML_TYPE_Q5_0].vec_dot = vec_dot_q5_0_q8_0_avx512;
    ops[GGML_TYPE_Q5_1].vec_dot = vec_dot_q5_1_q8_1_avx512;
    ops[GGML_TYPE_Q4_K].vec_dot = vec_dot_q4_K_q8_K_avx512;
    ops[GGML_TYPE_Q5_K].vec_dot = vec_dot_q5_K_q8_K_avx512;
    ops[GGML_TYPE_Q6_K].vec_dot = vec_dot_q6_K_q8_K_avx512;
}

#endif /* __x86_64__ */
