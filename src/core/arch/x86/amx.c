/* amx.c - int8 AMX (TDPBSSD) products of Q8_0 / Q4_0 weights with Q8_0
 * activations, for batches (prompt processing).
 *
 * Every 32-element block has its own weight and activation scale, so one
 * TDPBSSD covers one block: C[16 batch rows][16 weight rows] += A . B with
 * K = 32. C is then scaled by d_act * d_w and added to float accumulators
 * held in 16 zmm registers. Weights are repacked on the fly, 16 rows at a
 * time, into the tile layout (B row r = the r-th 4 bytes of each of the 16
 * weight rows) in per-thread scratch and reused for every 16 batch rows: no
 * weight copy is kept between calls. Activation tiles load straight from the
 * Q8_0 rows (tile stride = the row stride). */
#if defined(__x86_64__)

#pragma GCC target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,amx-tile,amx-int8")

#include "x86.h"

#include <immintrin.h>
#include <stddef.h>
#include <string.h>

#define TILE_M 16 /* batch rows per tile */
#define TILE_N 16 /* weight rows per tile */
#define B_TILE_BYTES 512 /* 8 rows x 64 bytes: one block of 16 weight rows */

struct tile_config {
    uint8_t palette_id;
    uint8_t start_row;
    uint8_t reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
};
static_assert(sizeof(struct tile_config) == 64, "tile config is 64 bytes");

/* gcc 12's _tile_loadconfig declares an 8-byte memory operand, so stores to
 * the rest of the config may be dropped and the first tile instruction
 * faults; this asm names the whole 64-byte object. */
static void tile_config_load(const struct tile_config *cfg)
{
    __asm__ volatile("ldtilecfg %0" ::"m"(*cfg));
}

/* tmm0, tmm1: C (16 x 16 int32); tmm2, tmm3: A (16 rows x 32 bytes);
 * tmm4, tmm5: B (8 rows x 64 bytes). Two of each so that one block's
 * TDPBSSD can run while the previous block's C is being scaled. */
static void tile_setup(void)
{
    struct tile_config cfg __attribute__((aligned(64)));
    memset(&cfg, 0, sizeof cfg);
    cfg.palette_id = 1;
    for (int t = 0; t < 2; t++) {
        cfg.rows[t] = 16;
        cfg.colsb[t] = 64;
        cfg.rows[2 + t] = 16;
        cfg.colsb[2 + t] = 32;
        cfg.rows[4 + t] = 8;
        cfg.colsb[4 + t] = 64;
    }
    tile_config_load(&cfg);
}

size_t omni_amx_scratch_bytes(int64_t n_in, int64_t m_pad)
{
    const size_t nb = (size_t)(n_in / QK8_0);
    return nb * B_TILE_BYTES + nb * TILE_N * sizeof(float) /* packed B, d_w */
           + nb * (size_t)m_pad * sizeof(float)               /* d_act */
           + 2 * TILE_M * TILE_N * sizeof(int32_t) + 64;      /* C buffers */
}

/* Pack weight rows n0 .. n0+15 (rows >= n_out are zero) of all nb blocks:
 * B[b][r][n] = the r-th dword of row n's 32 int8 weights, and their scales. */
static void pack_weights(int wtype, const uint8_t *w, size_t w_row, int64_t nb, int64_t n_valid,
                         uint8_t *bpack, float *dw)
{
    const __mmask16 valid = n_valid >= 16 ? 0xffff : (__mmask16)((1u << n_valid) - 1);
    const __m512i rows = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10,
                                                              11, 12, 13, 14, 15),
                                            _mm512_set1_epi32((int)w_row));
    const size_t bsize = wtype == GGML_TYPE_Q8_0 ? sizeof(block_q8_0) : sizeof(block_q4_0);
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *blk = w + b * bsize;
        uint8_t *out = bpack + b * B_TILE_BYTES;
        /* the fp16 scale is the low half of the block's first dword */
        __m512i d = _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), valid, rows, blk, 1);
        _mm512_storeu_ps(dw + b * TILE_N, _mm512_cvtph_ps(_mm512_cvtepi32_epi16(d)));
        if (wtype == GGML_TYPE_Q8_0) {
            for (int r = 0; r < 8; r++) {
                __m512i v = _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), valid, rows,
                                                        blk + 2 + 4 * r, 1);
                _mm512_storeu_si512(out + 64 * r, v);
            }
        } else {
            /* q4_0: low nibbles are elements 0-15, high nibbles 16-31 */
            const __m512i m4 = _mm512_set1_epi8(0x0f), eight = _mm512_set1_epi8(8);
            for (int r = 0; r < 4; r++) {
                __m512i v = _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), valid, rows,
                                                        blk + 2 + 4 * r, 1);
                __m512i lo = _mm512_sub_epi8(_mm512_and_si512(v, m4), eight);
                __m512i hi = _mm512_sub_epi8(_mm512_and_si512(_mm512_srli_epi16(v, 4), m4), eight);
                /* padded rows must stay 0, not -8 */
                lo = _mm512_maskz_mov_epi32(valid, lo);
                hi = _mm512_maskz_mov_epi32(valid, hi);
                _mm512_storeu_si512(out + 64 * r, lo);
                _mm512_storeu_si512(out + 64 * (r + 4), hi);
            }
        }
    }
}

/* acc[m] += d_w * d_act[m] * C[m] for the 16 rows of one C tile in cbuf. */
static inline void scale_accumulate(__m512 acc[TILE_M], const int32_t *cbuf, __m512 dw,
                                    const float *da)
{
#pragma GCC unroll 16
    for (int m = 0; m < TILE_M; m++) {
        __m512 c = _mm512_cvtepi32_ps(_mm512_load_si512(cbuf + TILE_N * m));
        acc[m] = _mm512_fmadd_ps(c, _mm512_mul_ps(dw, _mm512_set1_ps(da[m])), acc[m]);
    }
}

void omni_amx_matmul_q8(int wtype, const void *w, size_t w_row, int64_t n_in, int64_t n_out,
                        const void *xq, size_t xq_row, int64_t n_batch, int64_t m_pad, float *y,
                        int64_t r0, int64_t r1, void *scratch)
{
    const int64_t nb = n_in / QK8_0;
    uint8_t *bpack = scratch;
    float *dw = (float *)(bpack + nb * B_TILE_BYTES);
    float *da = dw + nb * TILE_N; /* [nb][m_pad] */
    int32_t *cbuf = (int32_t *)(((uintptr_t)(da + nb * m_pad) + 63) & ~(uintptr_t)63);
    const uint8_t *act = xq;

    /* activation scales, block-major so 16 rows of a block are contiguous */
    for (int64_t m = 0; m < m_pad; m++) {
        const block_q8_0 *row = (const block_q8_0 *)(act + m * xq_row);
        for (int64_t b = 0; b < nb; b++)
            da[b * m_pad + m] = _cvtsh_ss(row[b].d);
    }

    tile_setup();
    for (int64_t n0 = r0; n0 < r1; n0 += TILE_N) {
        const int64_t n_valid = r1 - n0 < TILE_N ? r1 - n0 : TILE_N;
        pack_weights(wtype, (const uint8_t *)w + n0 * w_row, w_row, nb, n_valid, bpack, dw);
        /* the packed tiles are read by tileloadd, which gcc does not see as
         * a memory read: keep the stores above it */
        __asm__ volatile("" ::: "memory");
        const __mmask16 nmask = n_valid >= 16 ? 0xffff : (__mmask16)((1u << n_valid) - 1);
        for (int64_t m0 = 0; m0 < n_batch; m0 += TILE_M) {
            __m512 acc[TILE_M];
            for (int m = 0; m < TILE_M; m++)
                acc[m] = _mm512_setzero_ps();
            /* A tile of block b: 16 activation rows' qs, row stride xq_row */
            const uint8_t *a0 = act + m0 * xq_row + offsetof(block_q8_0, qs);
            int64_t b = 0;
            for (; b + 2 <= nb; b += 2) {
                _tile_loadd(2, a0 + b * sizeof(block_q8_0), xq_row);
                _tile_loadd(4, bpack + b * B_TILE_BYTES, 64);
                _tile_zero(0);
                _tile_dpbssd(0, 2, 4);
                _tile_loadd(3, a0 + (b + 1) * sizeof(block_q8_0), xq_row);
                _tile_loadd(5, bpack + (b + 1) * B_TILE_BYTES, 64);
                _tile_zero(1);
                _tile_dpbssd(1, 3, 5);
                _tile_stored(0, cbuf, 64);
                scale_accumulate(acc, cbuf, _mm512_loadu_ps(dw + b * TILE_N), da + b * m_pad + m0);
                _tile_stored(1, cbuf + TILE_M * TILE_N, 64);
                scale_accumulate(acc, cbuf + TILE_M * TILE_N, _mm512_loadu_ps(dw + (b + 1) * TILE_N),
                                 da + (b + 1) * m_pad + m0);
            }
            if (b < nb) {
                _tile_loadd(2, a0 + b * sizeof(block_q8_0), xq_row);
                _tile_loadd(4, bpack + b * B_TILE_BYTES, 64);
                _tile_zero(0);
                _tile_dpbssd(0, 2, 4);
                _tile_stored(0, cbuf, 64);
                scale_accumulate(acc, cbuf, _mm512_loadu_ps(dw + b * TILE_N), da + b * m_pad + m0);
            }
            const int64_t m_valid = n_batch - m0 < TILE_M ? n_batch - m0 : TILE_M;
            for (int64_t m = 0; m < m_valid; m++)
                _mm512_mask_storeu_ps(y + (m0 + m) * n_out + n0, nmask, acc[m]);
        }
    }
    _tile_release();
}

#endif /* __x86_64__ */
