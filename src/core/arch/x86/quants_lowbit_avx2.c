/* quants_lowbit_avx2.c - AVX2 dot products of the low-bit types (q2_K, q3_K,
 * iq4_xs against Q8_K; iq4_nl, mxfp4 against Q8_0; layouts in
 * quant_lowbit.h).
 *
 * The non-linear 4-bit levels (iq4, E2M1) are a 16-entry byte table looked
 * up with pshufb; the integer parts are exact, so dots differ from the
 * scalar _ref twins only in the float summation order, and dequantization
 * takes the reference's float steps (same bits). Also compiled by
 * quants_lowbit_avxvnni.c with AVX-VNNI on (__AVXVNNI__: VEX vpdpbusd where
 * the Q8_0 blocks' int32 sums are formed, vpdpwssd where int16 sums meet
 * their scales; the same exact sums). */
#if defined(__x86_64__)

#pragma GCC target("avx2,fma,f16c")
/* scalar a*b + c stays two roundings in every instance of a kernel, so the
 * one- and several-column versions agree bit for bit */
#pragma GCC optimize("fp-contract=off")

#include "src/core/quant_lowbit.h"

#include <immintrin.h>
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

/* int16 pair sums of signed x times signed y: x's sign moves onto y. No
 * saturation: |x| <= 127 and y in [-127, 127] (our activation quantizers). */
static inline __m256i madd_i8_i16(__m256i x, __m256i y)
{
    return _mm256_maddubs_epi16(_mm256_sign_epi8(x, x), _mm256_sign_epi8(y, x));
}

/* acc + p . s over int16 pairs into int32 lanes (exact): one vpdpwssd
 * with AVX-VNNI, else vpmaddwd + vpaddd */
static inline __m256i madd_acc(__m256i acc, __m256i p, __m256i s)
{
#ifdef __AVXVNNI__
    return _mm256_dpwssd_avx_epi32(acc, p, s);
#else
    return _mm256_add_epi32(acc, _mm256_madd_epi16(p, s));
#endif
}

/* 16 bytes of packed nibbles -> 32 table entries: the low nibbles' first,
 * then the high nibbles' (the iq4_nl / mxfp4 element order). */
static inline __m256i lookup_nibbles(const uint8_t *qs, __m256i table)
{
    __m128i q = _mm_loadu_si128((const __m128i *)qs);
    __m256i v = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(q, 4), q), _mm256_set1_epi8(0x0f));
    return _mm256_shuffle_epi8(table, v);
}

static inline __m256i table16(const int8_t *k)
{
    return _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)k));
}

/* Every dot kernel below is written for NC activation rows at once
 * (a + c * a_row, results s[c * s_stride]): the weights are decoded once
 * and each column then takes exactly the steps of the one-column kernel,
 * which is the same code with NC = 1, so vec_dot_n agrees with vec_dot bit
 * for bit. */
#define COLS_SWITCH(fn, n, w, a, a_row, nc, s, s_stride)      \
    switch (nc) {                                             \
    case 1: fn(n, w, a, a_row, s, s_stride, 1); break;        \
    case 2: fn(n, w, a, a_row, s, s_stride, 2); break;        \
    case 3: fn(n, w, a, a_row, s, s_stride, 3); break;        \
    default: fn(n, w, a, a_row, s, s_stride, 4); break;       \
    }
#define ACT(a, a_row, c) ((const void *)((const uint8_t *)(a) + (size_t)(c) * (a_row)))
#define INLINE static inline __attribute__((always_inline))

// ---- 32-element blocks against Q8_0 ------------------------------------------

/* The scale of a block of iq4_nl (f16 d first) or mxfp4 (E8M0 e first). */
INLINE float b32_scale(const uint8_t *blk, int mx)
{
    if (mx)
        return quant_e8m0_to_fp32_half(blk[0]);
    ggml_half d;
    memcpy(&d, blk, 2);
    return h2f(d);
}

/* The int32 sums (8 lanes) of decoded weights qx and one Q8_0 block. */
INLINE __m256i q8_block_dot(__m256i qx, const block_q8_0 *y)
{
    const __m256i qy = _mm256_loadu_si256((const __m256i *)y->qs);
#ifdef __AVXVNNI__ /* quants_lowbit_avxvnni.c: the same exact int32 sums in one step */
    return _mm256_dpbusd_avx_epi32(_mm256_setzero_si256(), _mm256_sign_epi8(qx, qx), _mm256_sign_epi8(qy, qx));
#else
    return _mm256_madd_epi16(madd_i8_i16(qx, qy), _mm256_set1_epi16(1));
#endif
}

/* iq4_nl (mx = 0, 18-byte blocks) and mxfp4 (mx = 1, 17 bytes): blocks in
 * pairs into two accumulators per column, hiding the FMA latency. */
INLINE void dot_b32(int64_t n, const uint8_t *w, const void *a, size_t a_row, float *s,
                    size_t s_stride, const int nc, const int mx)
{
    const size_t bs = mx ? sizeof(block_mxfp4) : sizeof(block_iq4_nl);
    const __m256i table = table16(mx ? kvalues_mxfp4 : kvalues_iq4nl);
    __m256 acc0[4], acc1[4];
    for (int c = 0; c < nc; c++)
        acc0[c] = acc1[c] = _mm256_setzero_ps();
    const int64_t nb = n / QK8_0;
    int64_t i = 0;
    for (; i + 2 <= nb; i += 2) {
        const uint8_t *x0 = w + (size_t)i * bs, *x1 = x0 + bs;
        const __m256i q0 = lookup_nibbles(x0 + bs - 16, table), q1 = lookup_nibbles(x1 + bs - 16, table);
        const float d0 = b32_scale(x0, mx), d1 = b32_scale(x1, mx);
        for (int c = 0; c < nc; c++) {
            const block_q8_0 *y = (const block_q8_0 *)ACT(a, a_row, c) + i;
            acc0[c] = _mm256_fmadd_ps(_mm256_set1_ps(d0 * h2f(y[0].d)), _mm256_cvtepi32_ps(q8_block_dot(q0, &y[0])), acc0[c]);
            acc1[c] = _mm256_fmadd_ps(_mm256_set1_ps(d1 * h2f(y[1].d)), _mm256_cvtepi32_ps(q8_block_dot(q1, &y[1])), acc1[c]);
        }
    }
    for (; i < nb; i++) {
        const uint8_t *x0 = w + (size_t)i * bs;
        const __m256i q0 = lookup_nibbles(x0 + bs - 16, table);
        const float d0 = b32_scale(x0, mx);
        for (int c = 0; c < nc; c++) {
            const block_q8_0 *y = (const block_q8_0 *)ACT(a, a_row, c) + i;
            acc0[c] = _mm256_fmadd_ps(_mm256_set1_ps(d0 * h2f(y->d)), _mm256_cvtepi32_ps(q8_block_dot(q0, y)), acc0[c]);
        }
    }
    for (int c = 0; c < nc; c++)
        s[c * s_stride] = hsum_ps(_mm256_add_ps(acc0[c], acc1[c]));
}

INLINE void dot_n_iq4_nl(int64_t n, const void *w, const void *a, size_t a_row, float *s,
                         size_t s_stride, const int nc)
{
    dot_b32(n, w, a, a_row, s, s_stride, nc, 0);
}

INLINE void dot_n_mxfp4(int64_t n, const void *w, const void *a, size_t a_row, float *s,
                        size_t s_stride, const int nc)
{
    dot_b32(n, w, a, a_row, s, s_stride, nc, 1);
}

// ---- super-blocks against Q8_K ---------------------------------------------

INLINE void dot_n_iq4_xs(int64_t n, const void *w, const void *a, size_t a_row, float *s,
                         size_t s_stride, const int nc)
{
    const block_iq4_xs *x = w;
    const __m256i table = table16(kvalues_iq4nl);
    __m256 acc[4];
    for (int c = 0; c < nc; c++)
        acc[c] = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / QK_K; i++) {
        __m256i sumi0[4], sumi1[4];
        for (int c = 0; c < nc; c++)
            sumi0[c] = sumi1[c] = _mm256_setzero_si256();
        const unsigned sh = x[i].scales_h;
        for (int b = 0; b < QK_K / 32; b += 2) {
            const int ls0 = ((x[i].scales_l[b / 2] & 0x0f) | ((sh >> (2 * b)) & 3) << 4) - 32;
            const int ls1 = ((x[i].scales_l[b / 2] >> 4) | ((sh >> (2 * b + 2)) & 3) << 4) - 32;
            const __m256i q0 = lookup_nibbles(x[i].qs + 16 * b, table);
            const __m256i q1 = lookup_nibbles(x[i].qs + 16 * b + 16, table);
            for (int c = 0; c < nc; c++) {
                const block_q8_K *y = (const block_q8_K *)ACT(a, a_row, c) + i;
                __m256i p0 = madd_i8_i16(q0, _mm256_loadu_si256((const __m256i *)(y->qs + 32 * b)));
                __m256i p1 = madd_i8_i16(q1, _mm256_loadu_si256((const __m256i *)(y->qs + 32 * b + 32)));
                sumi0[c] = madd_acc(sumi0[c], p0, _mm256_set1_epi16((short)ls0));
                sumi1[c] = madd_acc(sumi1[c], p1, _mm256_set1_epi16((short)ls1));
            }
        }
        for (int c = 0; c < nc; c++) {
            const block_q8_K *y = (const block_q8_K *)ACT(a, a_row, c) + i;
            acc[c] = _mm256_fmadd_ps(_mm256_set1_ps(h2f(x[i].d) * y->d),
                                     _mm256_cvtepi32_ps(_mm256_add_epi32(sumi0[c], sumi1[c])), acc[c]);
        }
    }
    for (int c = 0; c < nc; c++)
        s[c * s_stride] = hsum_ps(acc[c]);
}

/* pshufb masks: mask[j] picks int16 lane 2j of a 128-bit lane for the low
 * half of the result and lane 2j + 1 for the high half (the two scales of
 * the 32 elements j of a super-block half). */
static inline void pair_masks(__m256i mask[4])
{
    for (int j = 0; j < 4; j++)
        mask[j] = _mm256_set_m128i(_mm_set1_epi16((short)(0x0100 + 0x0202 * (2 * j + 1))),
                                   _mm_set1_epi16((short)(0x0100 + 0x0202 * (2 * j))));
}

/* The 4 x 32 unsigned 2-bit (q2_K) or 3-bit (q3_K: hm != NULL) values of
 * super-block half h: u[j] = (bytes of qs >> 2j) & 3, plus 4 where bit
 * 4h + j of hm is set. */
INLINE void half_values(const uint8_t *qs, const __m256i *hm, int h, __m256i u[4])
{
    const __m256i m3 = _mm256_set1_epi8(3), four = _mm256_set1_epi8(4);
    const __m256i q = _mm256_loadu_si256((const __m256i *)qs);
#pragma GCC unroll 4
    for (int j = 0; j < 4; j++) {
        u[j] = _mm256_and_si256(_mm256_srli_epi16(q, 2 * j), m3);
        if (hm) { /* bit m = 4h+j of each byte, moved to bit 2 (no bit of the
                   * other byte of a 16-bit lane reaches bit 2) */
            const int m = 4 * h + j;
            const __m256i t = m >= 2 ? _mm256_srli_epi16(*hm, m - 2) : _mm256_slli_epi16(*hm, 2 - m);
            u[j] = _mm256_or_si256(u[j], _mm256_and_si256(t, four));
        }
    }
}

/* sum_l sc[l / 16] * u[l] * y[l] over one half (128 elements) as 8 int32
 * lanes; sc8 = the 8 int16 scales of the half in both 128-bit lanes. */
INLINE __m256i half_dot(const __m256i u[4], const int8_t *ys, __m256i sc8, const __m256i mask[4])
{
    __m256i sum = _mm256_setzero_si256();
#pragma GCC unroll 4
    for (int j = 0; j < 4; j++) {
        __m256i p = _mm256_maddubs_epi16(u[j], _mm256_loadu_si256((const __m256i *)(ys + 32 * j)));
        sum = madd_acc(sum, p, _mm256_shuffle_epi8(sc8, mask[j]));
    }
    return sum;
}

/* q2_K: the 2-bit values of 32 elements are bits 2j..2j+1 of 32 qs bytes;
 * the mins need only the activations' 16-sums (bsums). */
INLINE void dot_n_q2_K(int64_t n, const void *w, const void *a, size_t a_row, float *s,
                       size_t s_stride, const int nc)
{
    const block_q2_K *x = w;
    __m256i mask[4];
    pair_masks(mask);
    __m256 acc[4], acc_m[4];
    for (int c = 0; c < nc; c++)
        acc[c] = acc_m[c] = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / QK_K; i++) {
        const __m128i sc8 = _mm_loadu_si128((const __m128i *)x[i].scales);
        const __m256i mins = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(sc8, 4), _mm_set1_epi8(0x0f)));
        const __m128i sc = _mm_and_si128(sc8, _mm_set1_epi8(0x0f));
        const __m256i lo = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(sc));
        const __m256i hi = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(_mm_srli_si128(sc, 8)));
        __m256i u[4], sumi[4];
        half_values(x[i].qs, NULL, 0, u); /* one half's values live at a time */
        for (int c = 0; c < nc; c++)
            sumi[c] = half_dot(u, ((const block_q8_K *)ACT(a, a_row, c) + i)->qs, lo, mask);
        half_values(x[i].qs + 32, NULL, 1, u);
        for (int c = 0; c < nc; c++)
            sumi[c] = _mm256_add_epi32(sumi[c], half_dot(u, ((const block_q8_K *)ACT(a, a_row, c) + i)->qs + 128, hi, mask));
        const float d = h2f(x[i].d), dmin = h2f(x[i].dmin);
        for (int c = 0; c < nc; c++) {
            const block_q8_K *y = (const block_q8_K *)ACT(a, a_row, c) + i;
            /* the min term in 8 int32 lanes too: one horizontal sum at the end */
            const __m256i summs = _mm256_madd_epi16(mins, _mm256_loadu_si256((const __m256i *)y->bsums));
            acc[c] = _mm256_fmadd_ps(_mm256_set1_ps(y->d * d), _mm256_cvtepi32_ps(sumi[c]), acc[c]);
            acc_m[c] = _mm256_fmadd_ps(_mm256_set1_ps(y->d * dmin), _mm256_cvtepi32_ps(summs), acc_m[c]);
        }
    }
    for (int c = 0; c < nc; c++)
        s[c * s_stride] = hsum_ps(acc[c]) - hsum_ps(acc_m[c]);
}

/* q3_K: q = u - 4 with u = low 2 bits | hmask bit << 2 in 0..7, so
 * sum(sc q y) = sum(sc u y) - 4 sum(sc bsum). */
INLINE void dot_n_q3_K(int64_t n, const void *w, const void *a, size_t a_row, float *s,
                       size_t s_stride, const int nc)
{
    const block_q3_K *x = w;
    __m256i mask[4];
    pair_masks(mask);
    __m256 acc[4];
    for (int c = 0; c < nc; c++)
        acc[c] = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / QK_K; i++) {
        /* the 16 scales as in quant_q3_K_scales, four bytes at a time */
        uint32_t a0, a1, hb;
        memcpy(&a0, x[i].scales, 4);
        memcpy(&a1, x[i].scales + 4, 4);
        memcpy(&hb, x[i].scales + 8, 4);
        const __m128i sc = _mm_sub_epi8(
            _mm_setr_epi32((int)((a0 & 0x0f0f0f0f) | ((hb & 0x03030303) << 4)),
                           (int)((a1 & 0x0f0f0f0f) | (((hb >> 2) & 0x03030303) << 4)),
                           (int)(((a0 >> 4) & 0x0f0f0f0f) | (((hb >> 4) & 0x03030303) << 4)),
                           (int)(((a1 >> 4) & 0x0f0f0f0f) | (((hb >> 6) & 0x03030303) << 4))),
            _mm_set1_epi8(32));
        const __m256i sc16 = _mm256_cvtepi8_epi16(sc);
        const __m256i lo = _mm256_permute2x128_si256(sc16, sc16, 0x00);
        const __m256i hi = _mm256_permute2x128_si256(sc16, sc16, 0x11);
        const __m256i hm = _mm256_loadu_si256((const __m256i *)x[i].hmask);
        __m256i u[4], sumi[4];
        half_values(x[i].qs, &hm, 0, u); /* one half's values live at a time */
        for (int c = 0; c < nc; c++)
            sumi[c] = half_dot(u, ((const block_q8_K *)ACT(a, a_row, c) + i)->qs, lo, mask);
        half_values(x[i].qs + 32, &hm, 1, u);
        for (int c = 0; c < nc; c++)
            sumi[c] = _mm256_add_epi32(sumi[c], half_dot(u, ((const block_q8_K *)ACT(a, a_row, c) + i)->qs + 128, hi, mask));
        const float d = h2f(x[i].d);
        for (int c = 0; c < nc; c++) {
            const block_q8_K *y = (const block_q8_K *)ACT(a, a_row, c) + i;
            /* - 4 sum(sc bsum), lane by lane: the lanes' total is what counts */
            const __m256i offset = _mm256_madd_epi16(sc16, _mm256_loadu_si256((const __m256i *)y->bsums));
            const __m256i q = _mm256_sub_epi32(sumi[c], _mm256_slli_epi32(offset, 2));
            acc[c] = _mm256_fmadd_ps(_mm256_set1_ps(d * y->d), _mm256_cvtepi32_ps(q), acc[c]);
        }
    }
    for (int c = 0; c < nc; c++)
        s[c * s_stride] = hsum_ps(acc[c]);
}

/* vec_dot (one column) and vec_dot_n entry points of each type */
#define DOT_ENTRIES(type, act)                                                                  \
    static float vec_dot_##type##_##act##_avx2(int64_t n, const void *w, const void *a)          \
    {                                                                                           \
        float s;                                                                                \
        dot_n_##type(n, w, a, 0, &s, 1, 1);                                                     \
        return s;                                                                               \
    }                                                                                           \
    static void vec_dot_n_##type##_##act##_avx2(int64_t n, const void *w, const void *a,         \
                                                size_t a_row, int nc, float *s, size_t s_stride) \
    {                                                                                           \
        COLS_SWITCH(dot_n_##type, n, w, a, a_row, nc, s, s_stride)                              \
    }
DOT_ENTRIES(iq4_nl, q8_0)
DOT_ENTRIES(mxfp4, q8_0)
DOT_ENTRIES(iq4_xs, q8_K)
DOT_ENTRIES(q2_K, q8_K)
DOT_ENTRIES(q3_K, q8_K)

// ---- dequantization (the scalar steps: dl*q, then - ml; same bits) ----------

/* y[0..15] = dl * q - ml for 16 int8 q (ml = 0: the subtraction is exact). */
static inline void store16(float *y, __m128i q, float dl, float ml)
{
    const __m256 vd = _mm256_set1_ps(dl), vm = _mm256_set1_ps(ml);
    __m256 a = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q));
    __m256 b = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(q, 8)));
    _mm256_storeu_ps(y, _mm256_sub_ps(_mm256_mul_ps(a, vd), vm));
    _mm256_storeu_ps(y + 8, _mm256_sub_ps(_mm256_mul_ps(b, vd), vm));
}

/* 32 table-coded weights of one block times d. */
static inline void store32_table(float *y, const uint8_t *qs, __m256i table, float d)
{
    const __m256i v = lookup_nibbles(qs, table);
    store16(y, _mm256_castsi256_si128(v), d, 0.0f);
    store16(y + 16, _mm256_extracti128_si256(v, 1), d, 0.0f);
}

static void dequantize_row_iq4_nl_avx2(const void *vx, float *y, int64_t n)
{
    const block_iq4_nl *x = vx;
    const __m256i table = table16(kvalues_iq4nl);
    for (int64_t i = 0; i < n / QK4_NL; i++, y += QK4_NL)
        store32_table(y, x[i].qs, table, h2f(x[i].d));
}

static void dequantize_row_mxfp4_avx2(const void *vx, float *y, int64_t n)
{
    const block_mxfp4 *x = vx;
    const __m256i table = table16(kvalues_mxfp4);
    for (int64_t i = 0; i < n / QK_MXFP4; i++, y += QK_MXFP4)
        store32_table(y, x[i].qs, table, quant_e8m0_to_fp32_half(x[i].e));
}

static void dequantize_row_iq4_xs_avx2(const void *vx, float *y, int64_t n)
{
    const block_iq4_xs *x = vx;
    const __m256i table = table16(kvalues_iq4nl);
    for (int64_t i = 0; i < n / QK_K; i++) {
        const float d = h2f(x[i].d);
        for (int b = 0; b < QK_K / 32; b++, y += 32) {
            const int ls = ((x[i].scales_l[b / 2] >> (4 * (b % 2))) & 0x0f) | ((x[i].scales_h >> (2 * b)) & 3) << 4;
            store32_table(y, x[i].qs + 16 * b, table, d * (float)(ls - 32));
        }
    }
}

static void dequantize_row_q2_K_avx2(const void *vx, float *y, int64_t n)
{
    const block_q2_K *x = vx;
    const __m128i m3 = _mm_set1_epi8(3);
    for (int64_t i = 0; i < n / QK_K; i++) {
        const float d = h2f(x[i].d), dmin = h2f(x[i].dmin);
        for (int h = 0; h < 2; h++)
            for (int j = 0; j < 4; j++)
                for (int half = 0; half < 2; half++, y += 16) {
                    const uint8_t sc = x[i].scales[8 * h + 2 * j + half];
                    __m128i q = _mm_loadu_si128((const __m128i *)(x[i].qs + 32 * h + 16 * half));
                    q = _mm_and_si128(_mm_srl_epi16(q, _mm_cvtsi32_si128(2 * j)), m3);
                    store16(y, q, d * (float)(sc & 0x0f), dmin * (float)(sc >> 4));
                }
    }
}

static void dequantize_row_q3_K_avx2(const void *vx, float *y, int64_t n)
{
    const block_q3_K *x = vx;
    const __m128i m3 = _mm_set1_epi8(3), one = _mm_set1_epi8(1);
    for (int64_t i = 0; i < n / QK_K; i++) {
        const float d = h2f(x[i].d);
        int8_t sc[16];
        quant_q3_K_scales(x[i].scales, sc);
        for (int h = 0; h < 2; h++)
            for (int j = 0; j < 4; j++)
                for (int half = 0; half < 2; half++, y += 16) {
                    __m128i q = _mm_loadu_si128((const __m128i *)(x[i].qs + 32 * h + 16 * half));
                    __m128i hm = _mm_loadu_si128((const __m128i *)(x[i].hmask + 16 * half));
                    q = _mm_and_si128(_mm_srl_epi16(q, _mm_cvtsi32_si128(2 * j)), m3);
                    hm = _mm_and_si128(_mm_srl_epi16(hm, _mm_cvtsi32_si128(4 * h + j)), one);
                    /* q - 4 where the hmask bit is clear */
                    q = _mm_sub_epi8(q, _mm_slli_epi16(_mm_xor_si128(hm, one), 2));
                    store16(y, q, d * (float)sc[8 * h + 2 * j + half], 0.0f);
                }
    }
}

void omni_x86_register_lowbit_avx2(struct omni_quant_ops ops[GGML_TYPE_COUNT])
{
    ops[GGML_TYPE_IQ4_NL].vec_dot = vec_dot_iq4_nl_q8_0_avx2;
    ops[GGML_TYPE_IQ4_NL].vec_dot_n = vec_dot_n_iq4_nl_q8_0_avx2;
    ops[GGML_TYPE_MXFP4].vec_dot_n = vec_dot_n_mxfp4_q8_0_avx2;
    ops[GGML_TYPE_IQ4_XS].vec_dot_n = vec_dot_n_iq4_xs_q8_K_avx2;
    ops[GGML_TYPE_Q2_K].vec_dot_n = vec_dot_n_q2_K_q8_K_avx2;
    ops[GGML_TYPE_Q3_K].vec_dot_n = vec_dot_n_q3_K_q8_K_avx2;
    ops[GGML_TYPE_MXFP4].vec_dot = vec_dot_mxfp4_q8_0_avx2;
    ops[GGML_TYPE_IQ4_XS].vec_dot = vec_dot_iq4_xs_q8_K_avx2;
    ops[GGML_TYPE_Q2_K].vec_dot = vec_dot_q2_K_q8_K_avx2;
    ops[GGML_TYPE_Q3_K].vec_dot = vec_dot_q3_K_q8_K_avx2;
    ops[GGML_TYPE_IQ4_NL].to_float = dequantize_row_iq4_nl_avx2;
    ops[GGML_TYPE_MXFP4].to_float = dequantize_row_mxfp4_avx2;
    ops[GGML_TYPE_IQ4_XS].to_float = dequantize_row_iq4_xs_avx2;
    ops[GGML_TYPE_Q2_K].to_float = dequantize_row_q2_K_avx2;
    ops[GGML_TYPE_Q3_K].to_float = dequantize_row_q3_K_avx2;
}

#endif /* __x86_64__ */
