/* gemm_avx512.c - int8 GEMM for small batches (2 rows up) of the weight
 * types whose dot type is Q8_0 (q8_0, q4_0, q5_0), AVX-512 VNNI.
 *
 * The per-row dot kernels re-read every weight block once per activation
 * row; here a tile of 4 weight rows x 4 activation rows is multiplied in
 * registers, so each weight block is unpacked once per 4 activation rows.
 * Weights become unsigned bytes u = q + K (K = 128, 8, 16 for q8_0, q4_0,
 * q5_0) so that vpdpbusd (u8 x s8) takes them as they are; the int32
 * accumulator starts at -K/8 * sum(a) in each of the 8 lanes of a block,
 * which removes the offset exactly. A 512-bit register holds two 32-element
 * blocks; every (weight row, activation row) pair keeps its own 16 float
 * lanes, summed over blocks in a fixed order and reduced at the end, so a
 * result depends only on its two rows, never on the rest of the batch. */
#if defined(__x86_64__)

#pragma GCC target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512vnni")

#include "x86.h"

#include <immintrin.h>
#include <string.h>

#define TILE 4 /* weight rows and activation rows per register tile */

int omni_x86_gemm_q8_0_offset_avx512(int wtype)
{
    switch (wtype) {
    case GGML_TYPE_Q8_0: return 128;
    case GGML_TYPE_Q4_0: return 8;
    case GGML_TYPE_Q5_0: return 16;
    default: return -1;
    }
}

/* 32 bytes of block i of a q8_0 activation row; zero for the padding block. */
static inline __m256i act_qs(const block_q8_0 *a, int64_t i, int64_t nb)
{
    return i < nb ? _mm256_loadu_si256((const __m256i *)a[i].qs) : _mm256_setzero_si256();
}

/* Weight blocks i and i+1 (i+1 may be the padding block nb: zeros) of one
 * row as 64 unsigned bytes, and their scales, 8 lanes each. */
static inline __attribute__((always_inline)) void
load_w2(const int WT, const uint8_t *row, int64_t i, int64_t nb, __m512i *q, __m512 *d)
{
    const int two = i + 1 < nb;
    float d0, d1 = 0.0f;
    if (WT == GGML_TYPE_Q8_0) {
        const block_q8_0 *x = (const block_q8_0 *)row + i;
        const __m256i off = _mm256_set1_epi8((char)0x80);
        const __m256i lo = _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)x[0].qs), off);
        const __m256i hi = two ? _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)x[1].qs), off)
                               : _mm256_setzero_si256();
        *q = _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
        d0 = _cvtsh_ss(x[0].d);
        if (two)
            d1 = _cvtsh_ss(x[1].d);
    } else if (WT == GGML_TYPE_Q4_0) {
        const block_q4_0 *x = (const block_q4_0 *)row + i;
        const __m128i q0 = _mm_loadu_si128((const __m128i *)x[0].qs);
        const __m128i q1 = two ? _mm_loadu_si128((const __m128i *)x[1].qs) : _mm_setzero_si128();
        /* 128-bit lanes: q0, q0 >> 4, q1, q1 >> 4, each & 15 */
        const __m512i t = _mm512_permutexvar_epi64(_mm512_set_epi64(3, 2, 3, 2, 1, 0, 1, 0),
                                                   _mm512_castsi256_si512(_mm256_set_m128i(q1, q0)));
        *q = _mm512_and_si512(_mm512_srlv_epi64(t, _mm512_set_epi64(4, 4, 0, 0, 4, 4, 0, 0)),
                              _mm512_set1_epi8(0x0f));
        d0 = _cvtsh_ss(x[0].d);
        if (two)
            d1 = _cvtsh_ss(x[1].d);
    } else { /* Q5_0: nibbles | 5th bit from qh */
        const block_q5_0 *x = (const block_q5_0 *)row + i;
        const __m128i q0 = _mm_loadu_si128((const __m128i *)x[0].qs);
        const __m128i q1 = two ? _mm_loadu_si128((const __m128i *)x[1].qs) : _mm_setzero_si128();
        const __m512i t = _mm512_permutexvar_epi64(_mm512_set_epi64(3, 2, 3, 2, 1, 0, 1, 0),
                                                   _mm512_castsi256_si512(_mm256_set_m128i(q1, q0)));
        uint32_t h0, h1 = 0;
        memcpy(&h0, x[0].qh, 4);
        if (two)
            memcpy(&h1, x[1].qh, 4);
        const __mmask64 hm = _cvtu64_mask64((uint64_t)h0 | (uint64_t)h1 << 32);
        *q = _mm512_or_si512(_mm512_and_si512(_mm512_srlv_epi64(t, _mm512_set_epi64(4, 4, 0, 0, 4, 4, 0, 0)),
                                              _mm512_set1_epi8(0x0f)),
                             _mm512_maskz_mov_epi8(hm, _mm512_set1_epi8(0x10)));
        d0 = _cvtsh_ss(x[0].d);
        if (two)
            d1 = _cvtsh_ss(x[1].d);
    }
    *d = _mm512_insertf32x8(_mm512_castps256_ps512(_mm256_set1_ps(d0)), _mm256_set1_ps(d1), 1);
}

/* y[c * y_stride + r] for NR weight rows x NC activation rows. */
static inline __attribute__((always_inline)) void
gemm_tile(const int WT, const uint8_t *w, size_t w_row, int64_t nb, int64_t nbp,
          const uint8_t *xq, size_t xq_row, const float *ad, const int32_t *corr, float *y,
          size_t y_stride, const int NR, const int NC)
{
    __m512 acc[TILE][TILE];
    for (int r = 0; r < NR; r++)
        for (int c = 0; c < NC; c++)
            acc[r][c] = _mm512_setzero_ps();
    /* lanes 0-7 take element 0 of a pair, lanes 8-15 element 1 */
    const __m512i pair = _mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0);
    for (int64_t i = 0; i < nb; i += 2) {
        __m512i wq[TILE];
        __m512 wd[TILE];
        for (int r = 0; r < NR; r++)
            load_w2(WT, w + (size_t)r * w_row, i, nb, &wq[r], &wd[r]);
        for (int c = 0; c < NC; c++) {
            const block_q8_0 *a = (const block_q8_0 *)(xq + (size_t)c * xq_row);
            const __m512i av = _mm512_inserti64x4(_mm512_castsi256_si512(act_qs(a, i, nb)),
                                                  act_qs(a, i + 1, nb), 1);
            const __m512 da = _mm512_permutexvar_ps(
                pair, _mm512_castps128_ps512(_mm_castpd_ps(_mm_load_sd((const double *)(ad + c * nbp + i)))));
            const __m512i k0 = _mm512_permutexvar_epi32(
                pair, _mm512_castsi128_si512(_mm_loadl_epi64((const __m128i *)(corr + c * nbp + i))));
            for (int r = 0; r < NR; r++) {
                const __m512i dot = _mm512_dpbusd_epi32(k0, wq[r], av);
                acc[r][c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), _mm512_mul_ps(wd[r], da), acc[r][c]);
            }
        }
    }
    for (int r = 0; r < NR; r++)
        for (int c = 0; c < NC; c++)
            y[(size_t)c * y_stride + r] = _mm512_reduce_add_ps(acc[r][c]);
}

#define TILE_CASE(WT, nr, nc)                                                                   \
    case (nr) * 8 + (nc):                                                                       \
        gemm_tile(WT, w, w_row, nb, nbp, xq, xq_row, ad, corr, y, y_stride, nr, nc);            \
        break

#define TILE_SWITCH(WT)                                                                         \
    switch (nr * 8 + nc) {                                                                      \
        TILE_CASE(WT, 1, 1); TILE_CASE(WT, 1, 2); TILE_CASE(WT, 1, 3); TILE_CASE(WT, 1, 4);     \
        TILE_CASE(WT, 2, 1); TILE_CASE(WT, 2, 2); TILE_CASE(WT, 2, 3); TILE_CASE(WT, 2, 4);     \
        TILE_CASE(WT, 3, 1); TILE_CASE(WT, 3, 2); TILE_CASE(WT, 3, 3); TILE_CASE(WT, 3, 4);     \
        TILE_CASE(WT, 4, 1); TILE_CASE(WT, 4, 2); TILE_CASE(WT, 4, 3); default:                 \
        gemm_tile(WT, w, w_row, nb, nbp, xq, xq_row, ad, corr, y, y_stride, 4, 4);              \
        break;                                                                                  \
    }

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

void omni_x86_gemm_q8_0_avx512(int wtype, const void *w, size_t w_row, int64_t n_in, int64_t n_out,
                               const void *xq, size_t xq_row, const float *ad, const int32_t *corr,
                               int64_t n_batch, float *y, int64_t r0, int64_t r1)
{
    const int64_t nb = n_in / QK8_0, nbp = omni_x86_gemm_q8_0_blocks(n_in);
    void (*tile)(const uint8_t *, size_t, int64_t, int64_t, const uint8_t *, size_t,
                 const float *, const int32_t *, float *, size_t, int, int) =
        wtype == GGML_TYPE_Q8_0 ? tile_q8_0 : wtype == GGML_TYPE_Q4_0 ? tile_q4_0 : tile_q5_0;
    /* a tile of weight rows stays in L1 while every activation row passes */
    for (int64_t r = r0; r < r1; r += TILE) {
        const int nr = r1 - r < TILE ? (int)(r1 - r) : TILE;
        for (int64_t c = 0; c < n_batch; c += TILE) {
            const int nc = n_batch - c < TILE ? (int)(n_batch - c) : TILE;
            tile((const uint8_t *)w + (size_t)r * w_row, w_row, nb, nbp,
                 (const uint8_t *)xq + (size_t)c * xq_row, xq_row, ad + c * nbp, corr + c * nbp,
                 y + c * n_out + r, (size_t)n_out, nr, nc);
        }
    }
}

#endif /* __x86_64__ */
