/* quants_x86_inl.h - small helpers the x86 dot kernels share
 * (quants_avx2.c, quants_avx512.c): static inline, compiled under the
 * including file's target, so each level gets its own copy. Include after
 * <immintrin.h> and x86.h. */
#ifndef OMNI_QUANTS_X86_INL_H
#define OMNI_QUANTS_X86_INL_H

#include <string.h>

static inline float h2f(ggml_half h)
{
    return _cvtsh_ss(h);
}

static inline float hsum_ps(__m256 v)
{
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

static inline int hsum_epi32(__m256i v)
{
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(1, 0, 3, 2)));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(2, 3, 0, 1)));
    return _mm_cvtsi128_si32(s);
}

/* The 32 bits of qh as 32 bytes: 0xff where bit j is set. */
static inline __m256i bits_to_bytes(const uint8_t qh[4])
{
    uint32_t b;
    memcpy(&b, qh, 4);
    const __m256i shuf = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1,
                                          2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3);
    const __m256i bit = _mm256_set1_epi64x(0x8040201008040201LL);
    __m256i v = _mm256_shuffle_epi8(_mm256_set1_epi32((int)b), shuf);
    return _mm256_cmpeq_epi8(_mm256_and_si256(v, bit), bit);
}

/* The products h2f(x.d) * h2f(y.d) of blocks i..i+3 (the f16 scale opens
 * every block; blocks of bx and by bytes), each lane rounded as the scalar
 * product: four scales per F16C conversion instead of one. */
static inline __m128 scales4(const uint8_t *x, size_t bx, const uint8_t *y, size_t by)
{
    uint64_t hx = 0, hy = 0;
#pragma GCC unroll 4
    for (int k = 0; k < 4; k++) {
        uint16_t a, b;
        memcpy(&a, x + k * bx, 2);
        memcpy(&b, y + k * by, 2);
        hx |= (uint64_t)a << 16 * k;
        hy |= (uint64_t)b << 16 * k;
    }
    return _mm_mul_ps(_mm_cvtph_ps(_mm_cvtsi64_si128((long long)hx)),
                      _mm_cvtph_ps(_mm_cvtsi64_si128((long long)hy)));
}

/* The f16 scales opening blocks i..i+3 (blocks of bx bytes) as floats. */
static inline __m128 scales4_x(const uint8_t *x, size_t bx)
{
    uint64_t hx = 0;
#pragma GCC unroll 4
    for (int k = 0; k < 4; k++) {
        uint16_t a;
        memcpy(&a, x + k * bx, 2);
        hx |= (uint64_t)a << 16 * k;
    }
    return _mm_cvtph_ps(_mm_cvtsi64_si128((long long)hx));
}

/* bytes from p into L1, a line at a time (decode's rows ahead) */
static inline void prefetch_bytes_l1(const uint8_t *p, size_t bytes)
{
    for (size_t o = 0; o < bytes; o += 64)
        __builtin_prefetch(p + o, 0, 3);
}

/* The loop of a vec_dot_prep kernel: dot(n, row, a, prep, variant) of every
 * row, the row OMNI_PREFETCH_ROWS ahead prefetched first (as matmul.c's
 * other dot loops do); dot is inlined into it. */
#define DOT_PREP_ROWS(dot, variant)                                                        \
    for (int64_t r = 0; r < n_rows; r++) {                                                 \
        const uint8_t *wr = (const uint8_t *)w + (size_t)r * w_row;                       \
        if (r + OMNI_PREFETCH_ROWS < n_rows)                                               \
            prefetch_bytes_l1(wr + OMNI_PREFETCH_ROWS * w_row, w_row);                     \
        y[r] = dot(n, wr, a, prep, variant);                                               \
    }

static inline float hsum_ps128(__m128 v)
{
    v = _mm_add_ps(v, _mm_movehl_ps(v, v));
    v = _mm_add_ss(v, _mm_movehdup_ps(v));
    return _mm_cvtss_f32(v);
}

/* 16 bytes of nibbles -> 32 bytes as unpack_nibbles, from one 128-bit
 * broadcast load: the upper lane shifted by 4 (its 64-bit lanes: the bits
 * crossing bytes are masked off with the rest). */
static inline __m256i unpack_nibbles_b(const uint8_t *qs)
{
    const __m256i v = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)qs));
    return _mm256_and_si256(_mm256_srlv_epi64(v, _mm256_setr_epi64x(0, 0, 4, 4)), _mm256_set1_epi8(0x0f));
}

/* The 8 6-bit scales and 8 mins of a q4_K/q5_K block (layout in quant.h),
 * one byte each, four at a time: byte lanes of 32-bit words A, B, C = bytes
 * 0-3, 4-7, 8-11; (a >> 6) << 4 per byte is (A >> 2) & 0x30303030. */
static inline void unpack_k4_scales(const uint8_t *q, uint64_t *sc, uint64_t *mn)
{
    uint32_t A, B, C;
    memcpy(&A, q, 4);
    memcpy(&B, q + 4, 4);
    memcpy(&C, q + 8, 4);
    const uint32_t sc_lo = A & 0x3f3f3f3f, mn_lo = B & 0x3f3f3f3f;
    const uint32_t sc_hi = (C & 0x0f0f0f0f) | ((A >> 2) & 0x30303030);
    const uint32_t mn_hi = ((C >> 4) & 0x0f0f0f0f) | ((B >> 2) & 0x30303030);
    *sc = sc_lo | (uint64_t)sc_hi << 32;
    *mn = mn_lo | (uint64_t)mn_hi << 32;
}

/* sum_j m[j] * (bsums[2j] + bsums[2j+1]): the activation sums the mins hit.
 * A pair sum is at most 32 * 127, so the int16 hadd cannot overflow. */
static inline int mins_dot_bsums(uint64_t mn, const int16_t *bsums)
{
    __m128i pairs = _mm_hadd_epi16(_mm_loadu_si128((const __m128i *)bsums),
                                   _mm_loadu_si128((const __m128i *)(bsums + 8)));
    __m128i m = _mm_cvtepu8_epi16(_mm_cvtsi64_si128((long long)mn));
    __m128i s = _mm_madd_epi16(pairs, m);
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(1, 0, 3, 2)));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(2, 3, 0, 1)));
    return _mm_cvtsi128_si32(s);
}

/* int16 broadcasts of scales 2j and 2j+1 out of the 8 scales as int16. */
static inline void k4_scale_pair(__m256i sc16, int j, __m256i *s0, __m256i *s1)
{
    const __m256i b0 = _mm256_set1_epi16((short)(0x0100 + 0x0202 * 2 * j));
    const __m256i b1 = _mm256_set1_epi16((short)(0x0100 + 0x0202 * (2 * j + 1)));
    *s0 = _mm256_shuffle_epi8(sc16, b0);
    *s1 = _mm256_shuffle_epi8(sc16, b1);
}

#endif
