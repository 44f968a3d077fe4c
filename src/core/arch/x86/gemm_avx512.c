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
 * result depends only on its two rows, never on the rest of the batch.
 *
 * From omni_x86_gemm_act8_min_avx512 rows (the engine's 8-sequence decode)
 * the roles turn around as in gemm_avx2.c: 8 activation rows are transposed
 * once per call (lane c of register k = dword k of row c's block), each
 * weight block is made unsigned once and its dwords broadcast into tiles of
 * ACT8_R weight rows x 8 activation rows, one vpdpbusd per dword: the int32
 * block sums are exact and the float steps per block are gemm_avx2.c's
 * act8 ones, so these rows have the AVX2 act8 kernel's bits. */
#if defined(__x86_64__)

#pragma GCC target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512vnni")

#include "x86.h"

#include <immintrin.h>
#include <string.h>
#include "gemm_act8_inl.h"

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

// ---- 8 activation rows interleaved ------------------------------------------

/* Packed activations per block: 8 registers (dword k of the 8 rows), the 8
 * rows' scales, 8 x their offset corrections (gemm_avx2.c's layout). */
#define ACT8_BYTES (8 * 32 + 8 * 4 + 8 * 4)
/* Blocks per pass: a row of 8192 in one (80 KB of packed activations on the
 * stack); longer rows take several passes, the partial sums parked in y. */
#define ACT8_CHUNK 256
/* Weight rows per register tile: 8 int32 block sums + 8 float sums live,
 * each activation register loaded serves 8 weight rows (32 registers). */
#ifndef OMNI_X86_ACT8_R
#define OMNI_X86_ACT8_R 8
#endif
#define ACT8_R OMNI_X86_ACT8_R
/* Fewest batch rows for the act8 form (a benchmark knob; kernel_id reads
 * omni_x86_gemm_act8_min_avx512): a padded pass over 8 rows costs less than
 * the 4 x 4 tiles from 4 rows (Intel host, one thread, 2048 x 8192, ms per
 * row: act8 at 8 rows q8_0 0.177, q4_0 0.200, q5_0 0.259; the tiles at 4
 * rows 0.471, 0.472, 0.767). */
#ifndef OMNI_X86_ACT8_MIN
#define OMNI_X86_ACT8_MIN 4
#endif
/* OMNI_X86_ACT8_PF: 1 (default) prefetches the next tile's weight bytes
 * spread over the current tile's blocks (a line or so per block and row,
 * never a burst of whole rows); 0 leaves it to the hardware. */
#ifndef OMNI_X86_ACT8_PF
#define OMNI_X86_ACT8_PF 1
#endif
typedef int32_t i32u __attribute__((aligned(1), may_alias));

/* Blocks [i0, i0 + n) of rows [0, nc) as ACT8_BYTES each (act8_transpose_block). */
static void act8_pack(const uint8_t *xq, size_t xq_row, const float *ad, const int32_t *corr, int nc,
                      int64_t i0, int64_t n, int64_t nbp, uint8_t *a)
{
    for (int64_t j = 0; j < n; j++) {
        __m256i r[8];
        act8_transpose_block(xq, xq_row, ad, corr, nc, i0 + j, nbp, a + (size_t)j * ACT8_BYTES, r);
    }
}

/* Block i of one weight row as 32 unsigned bytes u = q + K, and its scale. */
static inline __attribute__((always_inline)) __m256i load_u(const int WT, const uint8_t *row, int64_t i, float *d)
{
    if (WT == GGML_TYPE_Q8_0) {
        const block_q8_0 *x = (const block_q8_0 *)row + i;
        *d = _cvtsh_ss(x->d);
        return _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)x->qs), _mm256_set1_epi8((char)0x80));
    }
    /* nibbles: one 128-bit broadcast, the upper lane shifted by 4 */
    const uint8_t *qs = WT == GGML_TYPE_Q4_0 ? ((const block_q4_0 *)row + i)->qs : ((const block_q5_0 *)row + i)->qs;
    const __m256i v = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)qs));
    const __m256i q = _mm256_and_si256(_mm256_srlv_epi64(v, _mm256_setr_epi64x(0, 0, 4, 4)), _mm256_set1_epi8(0x0f));
    if (WT == GGML_TYPE_Q4_0) {
        *d = _cvtsh_ss(((const block_q4_0 *)row + i)->d);
        return q;
    }
    const block_q5_0 *x = (const block_q5_0 *)row + i;
    uint32_t h;
    memcpy(&h, x->qh, 4);
    *d = _cvtsh_ss(x->d);
    return _mm256_or_si256(q, _mm256_maskz_mov_epi8(_cvtu32_mask32(h), _mm256_set1_epi8(0x10)));
}

/* Blocks [0, n) of the packed activations (block i0 + j of the weights) for
 * NR weight rows (row r at w + r * w_row); acc in/out: 8 float lanes per
 * weight row (lane c = activation row c). pf: the next tile's first weight
 * byte (prefetched spread over the blocks), or NULL. */
static inline __attribute__((always_inline)) void
act8_tile(const int WT, const uint8_t *w, size_t w_row, int64_t i0, int64_t n, const uint8_t *a,
          __m256 *acc_io, const uint8_t *pf, const int NR)
{
    __m256 acc[ACT8_R]; /* in registers across the block loop */
#pragma GCC unroll 8
    for (int r = 0; r < NR; r++)
        acc[r] = acc_io[r];
    const size_t bx = WT == GGML_TYPE_Q8_0 ? sizeof(block_q8_0) : WT == GGML_TYPE_Q4_0 ? sizeof(block_q4_0)
                                                                                        : sizeof(block_q5_0);
    uint8_t st[ACT8_R][32] __attribute__((aligned(32)));
    for (int64_t j = 0; j < n; j++) {
        const int64_t i = i0 + j;
        const uint8_t *A = a + (size_t)j * ACT8_BYTES;
        if (OMNI_X86_ACT8_PF && pf) {
            /* NR * bx bytes of the next tile per block: its rows are
             * contiguous (w_row = nb * bx) when the pass is a whole row */
            const uint8_t *p = pf + (size_t)j * NR * bx;
            for (size_t o = 0; o < NR * bx; o += 64)
                _mm_prefetch((const char *)p + o, _MM_HINT_T0);
        }
        float d[ACT8_R];
        /* each block made unsigned once, then its dwords broadcast from
         * memory (load ports, no shuffles); the barrier keeps GCC from
         * turning the loads back into extracts of the registers */
#pragma GCC unroll 8
        for (int r = 0; r < NR; r++)
            _mm256_store_si256((__m256i *)st[r], load_u(WT, w + (size_t)r * w_row, i, &d[r]));
        __asm__ volatile("" : : "r"(st) : "memory");
        const __m256i k8 = _mm256_loadu_si256((const __m256i *)(A + 288));
        __m256i dot[ACT8_R];
#pragma GCC unroll 8
        for (int r = 0; r < NR; r++)
            dot[r] = k8;
#pragma GCC unroll 8
        for (int k = 0; k < 8; k++) {
            const __m256i ak = _mm256_load_si256((const __m256i *)A + k);
#pragma GCC unroll 8
            for (int r = 0; r < NR; r++)
                dot[r] = _mm256_dpbusd_epi32(dot[r], _mm256_set1_epi32(*(const i32u *)(st[r] + 4 * k)), ak);
        }
        const __m256 da = _mm256_load_ps((const float *)(A + 256));
#pragma GCC unroll 8
        for (int r = 0; r < NR; r++)
            acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot[r]), _mm256_mul_ps(_mm256_set1_ps(d[r]), da), acc[r]);
    }
#pragma GCC unroll 8
    for (int r = 0; r < NR; r++)
        acc_io[r] = acc[r];
}

#define ACT8_CASE(WT, nr)                                                                       \
    case nr: act8_tile(WT, w, w_row, i0, n, a, acc, pf, (nr) < ACT8_R ? (nr) : ACT8_R); break

#define ACT8_TILES(WT, name)                                                                    \
    static void name(const uint8_t *w, size_t w_row, int64_t i0, int64_t n, const uint8_t *a,   \
                     __m256 *acc, const uint8_t *pf, int nr)                                    \
    {                                                                                           \
        switch (nr) {                                                                           \
            ACT8_CASE(WT, 1); ACT8_CASE(WT, 2); ACT8_CASE(WT, 3); ACT8_CASE(WT, 4);             \
            ACT8_CASE(WT, 5); ACT8_CASE(WT, 6); ACT8_CASE(WT, 7); default:                      \
            act8_tile(WT, w, w_row, i0, n, a, acc, pf, ACT8_R);                                 \
            break;                                                                              \
        }                                                                                       \
    }

typedef void (*act8_fn)(const uint8_t *w, size_t w_row, int64_t i0, int64_t n, const uint8_t *a,
                        __m256 *acc, const uint8_t *pf, int nr);
ACT8_TILES(GGML_TYPE_Q8_0, act8_q8_0)
ACT8_TILES(GGML_TYPE_Q4_0, act8_q4_0)
ACT8_TILES(GGML_TYPE_Q5_0, act8_q5_0)

static void act8_rows(int wtype, const uint8_t *w, size_t w_row, int64_t n_in, int64_t n_out,
                      const uint8_t *xq, size_t xq_row, const float *ad, const int32_t *corr,
                      int64_t n_batch, float *y, int64_t r0, int64_t r1)
{
    const int64_t nb = n_in / QK8_0, nbp = omni_x86_gemm_q8_0_blocks(n_in);
    const act8_fn tile = wtype == GGML_TYPE_Q8_0 ? act8_q8_0 : wtype == GGML_TYPE_Q4_0 ? act8_q4_0 : act8_q5_0;
    const size_t bx = wtype == GGML_TYPE_Q8_0 ? sizeof(block_q8_0) : wtype == GGML_TYPE_Q4_0 ? sizeof(block_q4_0)
                                                                                         : sizeof(block_q5_0);
    uint8_t a[ACT8_CHUNK * ACT8_BYTES] __attribute__((aligned(64)));
    for (int64_t c = 0; c < n_batch; c += 8) {
        const int nc = n_batch - c < 8 ? (int)(n_batch - c) : 8;
        for (int64_t i0 = 0; i0 < nb; i0 += ACT8_CHUNK) {
            const int64_t n = nb - i0 < ACT8_CHUNK ? nb - i0 : ACT8_CHUNK;
            act8_pack(xq + (size_t)c * xq_row, xq_row, ad + c * nbp, corr + c * nbp, nc, i0, n, nbp, a);
            for (int64_t r = r0; r < r1; r += ACT8_R) {
                const int nr = r1 - r < ACT8_R ? (int)(r1 - r) : ACT8_R;
                float *yr = y + c * n_out + r;
                __m256 acc[ACT8_R];
                for (int k = 0; k < nr; k++) {
                    /* a later pass goes on from the partial sums parked in y:
                     * the same float steps in the same order */
                    float in[8] = { 0 };
                    if (i0)
                        for (int b = 0; b < nc; b++)
                            in[b] = yr[(size_t)b * n_out + k];
                    acc[k] = _mm256_loadu_ps(in);
                }
                const uint8_t *pf = r + ACT8_R < r1 ? w + (size_t)(r + ACT8_R) * w_row + (size_t)i0 * bx : NULL;
                tile(w + (size_t)r * w_row, w_row, i0, n, a, acc, pf, nr);
                for (int k = 0; k < nr; k++) {
                    float out[8];
                    _mm256_storeu_ps(out, acc[k]);
                    for (int b = 0; b < nc; b++)
                        yr[(size_t)b * n_out + k] = out[b];
                }
            }
        }
    }
}

int omni_x86_gemm_act8_min_avx512(int wtype)
{
    return omni_x86_gemm_q8_0_offset_avx512(wtype) < 0 ? INT32_MAX : OMNI_X86_ACT8_MIN;
}

void omni_x86_gemm_q8_0_avx512(int wtype, const void *w, size_t w_row, int64_t n_in, int64_t n_out,
                               const void *xq, size_t xq_row, const float *ad, const int32_t *corr,
                               int64_t n_batch, float *y, int64_t r0, int64_t r1)
{
    if (n_batch >= omni_x86_gemm_act8_min_avx512(wtype) && n_in >= QK8_0) {
        act8_rows(wtype, w, w_row, n_in, n_out, xq, xq_row, ad, corr, n_batch, y, r0, r1);
        return;
    }
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
