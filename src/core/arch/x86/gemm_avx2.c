/* gemm_avx2.c - int8 GEMM for small batches (2 rows up) of the weight types
 * whose dot type is Q8_0 (q8_0, q4_0, q5_0), AVX2 (vpmaddubsw), and the
 * activation preparation both GEMM levels share (gemm_avx512.c has the
 * VNNI kernel).
 *
 * A tile of 2 weight rows x 4 activation rows is multiplied in registers,
 * so each weight block is unpacked once per 4 activation rows instead of
 * once per row. q4_0/q5_0 weights become unsigned bytes u = q + K (K = 8,
 * 16): pmaddubsw's int16 pair sums stay below 2 * 31 * 127, and the offset
 * comes off exactly as -K/8 * sum(a) in each int32 lane. q8_0 moves the
 * weight's sign onto the activation instead (K = 0: a byte of 128 times 127,
 * twice, still fits int16). Every (weight row, activation row) pair keeps
 * its own 8 float lanes, summed over blocks in a fixed order, so a result
 * depends only on its two rows, never on the rest of the batch. */
#if defined(__x86_64__)

#pragma GCC target("avx2,fma,f16c")

#include "x86.h"

#include <immintrin.h>
#include <string.h>

#define TILE_R 2 /* weight rows per register tile */
#define TILE_C 4 /* activation rows per register tile */

void omni_x86_gemm_q8_0_prep(int offset, const void *xq, size_t xq_row, int64_t n_batch,
                             int64_t n_in, float *ad, int32_t *corr)
{
    const int k8 = offset / 8;
    const int64_t nb = n_in / QK8_0, nbp = omni_x86_gemm_q8_0_blocks(n_in);
    for (int64_t b = 0; b < n_batch; b++) {
        const block_q8_0 *x = (const block_q8_0 *)((const uint8_t *)xq + (size_t)b * xq_row);
        for (int64_t i = 0; i < nb; i++) {
            int s = 0;
            for (int k = 0; k < QK8_0; k++)
                s += x[i].qs[k];
            ad[b * nbp + i] = _cvtsh_ss(x[i].d);
            corr[b * nbp + i] = -k8 * s;
        }
        for (int64_t i = nb; i < nbp; i++) {
            ad[b * nbp + i] = 0.0f;
            corr[b * nbp + i] = 0;
        }
    }
}

int omni_x86_gemm_q8_0_offset_avx2(int wtype)
{
    switch (wtype) {
    case GGML_TYPE_Q8_0: return 0;
    case GGML_TYPE_Q4_0: return 8;
    case GGML_TYPE_Q5_0: return 16;
    default: return -1;
    }
}

static inline __m256i unpack_nibbles(const uint8_t *qs)
{
    const __m128i q = _mm_loadu_si128((const __m128i *)qs);
    return _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(q, 4), q), _mm256_set1_epi8(0x0f));
}

/* The 32 bits of qh as 32 bytes: 0x10 where bit j is set. */
static inline __m256i bits_to_0x10(const uint8_t qh[4])
{
    uint32_t b;
    memcpy(&b, qh, 4);
    const __m256i shuf = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1,
                                          2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3);
    const __m256i bit = _mm256_set1_epi64x(0x8040201008040201LL);
    const __m256i v = _mm256_and_si256(_mm256_shuffle_epi8(_mm256_set1_epi32((int)b), shuf), bit);
    return _mm256_and_si256(_mm256_cmpeq_epi8(v, bit), _mm256_set1_epi8(0x10));
}

/* Block i of one weight row: its bytes (unsigned, or for q8_0 signed) and
 * its scale. */
static inline __attribute__((always_inline)) __m256i load_w(const int WT, const uint8_t *row,
                                                            int64_t i, float *d)
{
    if (WT == GGML_TYPE_Q8_0) {
        const block_q8_0 *x = (const block_q8_0 *)row + i;
        *d = _cvtsh_ss(x->d);
        return _mm256_loadu_si256((const __m256i *)x->qs);
    }
    if (WT == GGML_TYPE_Q4_0) {
        const block_q4_0 *x = (const block_q4_0 *)row + i;
        *d = _cvtsh_ss(x->d);
        return unpack_nibbles(x->qs);
    }
    const block_q5_0 *x = (const block_q5_0 *)row + i;
    *d = _cvtsh_ss(x->d);
    return _mm256_or_si256(unpack_nibbles(x->qs), bits_to_0x10(x->qh));
}

/* y[c * y_stride + r] for NR weight rows x NC activation rows. */
static inline __attribute__((always_inline)) void
gemm_tile(const int WT, const uint8_t *w, size_t w_row, int64_t nb, int64_t nbp,
          const uint8_t *xq, size_t xq_row, const float *ad, const int32_t *corr, float *y,
          size_t y_stride, const int NR, const int NC)
{
    const __m256i ones = _mm256_set1_epi16(1);
    __m256 acc[TILE_R][TILE_C];
    for (int r = 0; r < NR; r++)
        for (int c = 0; c < NC; c++)
            acc[r][c] = _mm256_setzero_ps();
    for (int64_t i = 0; i < nb; i++) {
        __m256i wq[TILE_R], wa[TILE_R];
        __m256 wd[TILE_R];
        for (int r = 0; r < NR; r++) {
            float d;
            wq[r] = load_w(WT, w + (size_t)r * w_row, i, &d);
            wa[r] = WT == GGML_TYPE_Q8_0 ? _mm256_sign_epi8(wq[r], wq[r]) : wq[r];
            wd[r] = _mm256_set1_ps(d);
        }
        for (int c = 0; c < NC; c++) {
            const block_q8_0 *a = (const block_q8_0 *)(xq + (size_t)c * xq_row) + i;
            const __m256i av = _mm256_loadu_si256((const __m256i *)a->qs);
            const __m256 da = _mm256_broadcast_ss(ad + c * nbp + i);
            const __m256i k0 = _mm256_set1_epi32(corr[c * nbp + i]);
            for (int r = 0; r < NR; r++) {
                /* q8_0: |w| times a with w's sign (a is never -128) */
                const __m256i s = WT == GGML_TYPE_Q8_0 ? _mm256_sign_epi8(av, wq[r]) : av;
                __m256i dot = _mm256_madd_epi16(_mm256_maddubs_epi16(wa[r], s), ones);
                if (WT != GGML_TYPE_Q8_0)
                    dot = _mm256_add_epi32(dot, k0);
                acc[r][c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), _mm256_mul_ps(wd[r], da), acc[r][c]);
            }
        }
    }
    for (int r = 0; r < NR; r++)
        for (int c = 0; c < NC; c++) {
            const __m256 t = acc[r][c];
            __m128 v = _mm_add_ps(_mm256_castps256_ps128(t), _mm256_extractf128_ps(t, 1));
            v = _mm_add_ps(v, _mm_movehl_ps(v, v));
            v = _mm_add_ss(v, _mm_movehdup_ps(v));
            y[(size_t)c * y_stride + r] = _mm_cvtss_f32(v);
        }
}

#define TILE_CASE(WT, nr, nc)                                                                   \
    case (nr) * 8 + (nc):                                                                       \
        gemm_tile(WT, w, w_row, nb, nbp, xq, xq_row, ad, corr, y, y_stride, nr, nc);            \
        break

#define TILE_SWITCH(WT)                                                                         \
    switch (nr * 8 + nc) {                                                                      \
        TILE_CASE(WT, 1, 1); TILE_CASE(WT, 1, 2); TILE_CASE(WT, 1, 3); TILE_CASE(WT, 1, 4);     \
        TILE_CASE(WT, 2, 1); TILE_CASE(WT, 2, 2); TILE_CASE(WT, 2, 3); default:                 \
        gemm_tile(WT, w, w_row, nb, nbp, xq, xq_row, ad, corr, y, y_stride, 2, 4);              \
        break;                                                                                  \
    }

typedef void (*tile_fn)(const uint8_t *w, size_t w_row, int64_t nb, int64_t nbp, const uint8_t *xq,
                        size_t xq_row, const float *ad, const int32_t *corr, float *y,
                        size_t y_stride, int nr, int nc);

static void tile_q8_0(const uint8_t *w, size_t w_row, int64_t nb, int64_t nbp, const uint8_t *xq,
                      size_t xq_row, const float *ad, const int32_t *corr, float *y,
                      size_t y_stride, int nr, int nc)
{
    TILE_SWITCH(GGML_TYPE_Q8_0)
}

static void tile_q4_0(const uint8_t *w, size_t w_row, int64_t nb, int64_t nbp, const uint8_t *xq,
                      size_t xq_row, const float *ad, const int32_t *corr, float *y,
                      size_t y_stride, int nr, int nc)
{
    TILE_SWITCH(GGML_TYPE_Q4_0)
}

static void tile_q5_0(const uint8_t *w, size_t w_row, int64_t nb, int64_t nbp, const uint8_t *xq,
                      size_t xq_row, const float *ad, const int32_t *corr, float *y,
                      size_t y_stride, int nr, int nc)
{
    TILE_SWITCH(GGML_TYPE_Q5_0)
}

void omni_x86_gemm_q8_0_avx2(int wtype, const void *w, size_t w_row, int64_t n_in, int64_t n_out,
                             const void *xq, size_t xq_row, const float *ad, const int32_t *corr,
                             int64_t n_batch, float *y, int64_t r0, int64_t r1)
{
    const int64_t nb = n_in / QK8_0, nbp = omni_x86_gemm_q8_0_blocks(n_in);
    const tile_fn tile = wtype == GGML_TYPE_Q8_0 ? tile_q8_0 : wtype == GGML_TYPE_Q4_0 ? tile_q4_0 : tile_q5_0;
    /* a tile of weight rows stays in L1 while every activation row passes */
    for (int64_t r = r0; r < r1; r += TILE_R) {
        const int nr = r1 - r < TILE_R ? (int)(r1 - r) : TILE_R;
        for (int64_t c = 0; c < n_batch; c += TILE_C) {
            const int nc = n_batch - c < TILE_C ? (int)(n_batch - c) : TILE_C;
            tile((const uint8_t *)w + (size_t)r * w_row, w_row, nb, nbp,
                 (const uint8_t *)xq + (size_t)c * xq_row, xq_row, ad + c * nbp, corr + c * nbp,
                 y + c * n_out + r, (size_t)n_out, nr, nc);
        }
    }
}

#endif /* __x86_64__ */
