/* quants_avx512.c - AVX-512 (F/BW/VL/DQ + VNNI) dot products.
 *
 * Only the kernels that measured faster than their AVX2 versions on Sapphire
 * Rapids: float weights (16 lanes, masked tails), q5_0 (VNNI + mask moves)
 * and q6_K (also for several activation rows at once), and q8_0 for several
 * rows (VNNI, 32 registers of accumulators); the AVX512 level inherits the
 * AVX2 kernels for the rest. Results
 * differ from the scalar _ref twins only in float summation order. */
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

/* q5_0 uses 256-bit VNNI: 512-bit integer work shuts vector port 1 and was
 * measured slower here. The mask register builds the 5th bits in one move;
 * q8_0, q4_0, q4_1 and q5_1 measured no faster than their AVX2 kernels, which
 * this level keeps. */

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

// ---- K blocks ----------------------------------------------------------------

/* q6_K in 512 bits: a half block's 64 ql bytes and its qh bytes (shifted by
 * 0 and 2) give 64 elements per register without any shuffles; q4_K/q5_K
 * stay on their AVX2 kernels, which measured faster. */
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
    ops[GGML_TYPE_Q5_0].vec_dot = vec_dot_q5_0_q8_0_avx512;
    ops[GGML_TYPE_Q8_0].vec_dot_n = vec_dot_n_q8_0_q8_0_avx512;
    ops[GGML_TYPE_Q6_K].vec_dot = vec_dot_q6_K_q8_K_avx512;
    ops[GGML_TYPE_Q6_K].vec_dot_n = vec_dot_n_q6_K_q8_K_avx512;
}

#endif /* __x86_64__ */
