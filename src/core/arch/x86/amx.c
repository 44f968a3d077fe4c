/* amx.c - int8 AMX (TDPBSSD) products of quantized weights with Q8
 * activations, for batches (decode of several sequences, prompts).
 *
 * Weights q8_0, q4_0, q5_0, q4_1, q5_1, q4_K, q5_K (blocks of 32) and q6_K
 * (blocks of 16): every block of a row is s_w * q + o_w with int8 q (o_w is
 * 0, the block min, or -dmin * m), and every 32 activations d_a * q_a; one
 * TDPBSSD per block gives C[batch rows][16 weight rows] = sum q_a q, and
 *     y += d_a * s_w * C + o_w * (d_a * sum q_a)
 * goes into float accumulators held in zmm registers. Weights are repacked
 * on the fly, 16 rows at a time, into the tile layout (B row r = the r-th 4
 * bytes of each of the 16 rows) in per-thread scratch and reused for every
 * tile of batch rows: no weight copy outlives the call. Activation tiles
 * load straight from the Q8_0 / Q8_1 / Q8_K rows (tile stride = row stride).
 * The result of a batch row depends only on that row (C is exact, the float
 * accumulation order is fixed), not on the batch size. */
#if defined(__x86_64__)

#pragma GCC target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,amx-tile,amx-int8")

#include "x86.h"

#include <immintrin.h>
#include <stddef.h>
#include <string.h>

#define TILE_M 16        /* batch rows per tile */
#define TILE_N 16        /* weight rows per tile */
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

/* tmm0, tmm1: C (m_rows x 16 int32); tmm2, tmm3: A (m_rows x 32 bytes);
 * tmm4, tmm5: B (8 rows x 64 bytes). Two of each so that one block's
 * TDPBSSD can run while the previous block's C is being scaled. Small
 * batches use 4- or 8-row tiles: TDPBSSD and the scaling cost per row. */
static void tile_setup(int m_rows)
{
    struct tile_config cfg __attribute__((aligned(64)));
    memset(&cfg, 0, sizeof cfg);
    cfg.palette_id = 1;
    for (int t = 0; t < 2; t++) {
        cfg.rows[t] = (uint8_t)m_rows;
        cfg.colsb[t] = 64;
        cfg.rows[2 + t] = (uint8_t)m_rows;
        cfg.colsb[2 + t] = 32;
        cfg.rows[4 + t] = 8;
        cfg.colsb[4 + t] = 64;
    }
    tile_config_load(&cfg);
}

/* Where AMX beat the per-row dot kernels here (2 threads, 896 x 4864 and
 * 4864 x 896 matrices): from 2 rows for the 32-element types, whose tiles
 * pack cheaply; q4_K/q5_K from 4; q6_K, with two tile products per 32
 * elements, from 6. The VNNI GEMMs' activation-interleaved forms (q8_0,
 * q4_0, q5_0: gemm_avx512.c; q4_K, q6_K: gemm_k_avx512.c) need no weight
 * packing per call and beat these tiles at 8 rows (Intel host, 2 threads,
 * Llama-3.2-1B, 8 sequences decoded together, aggregate tok/s: Q8_0 AMX 87
 * vs 131, Q4_K_M 61 vs 98; job i_intel2), so those types take AMX from 16
 * rows (OMNI_X86_AMX_SMALL=1: the old bounds, a benchmark variant). */
#ifndef OMNI_X86_AMX_SMALL
#define OMNI_X86_AMX_SMALL 0
#endif
int omni_amx_min_batch(int wtype)
{
    switch (wtype) {
    case GGML_TYPE_Q8_0: case GGML_TYPE_Q4_0: case GGML_TYPE_Q5_0:
        return OMNI_X86_AMX_SMALL ? 2 : 16;
    case GGML_TYPE_Q4_1: case GGML_TYPE_Q5_1:
        return 2;
    case GGML_TYPE_Q4_K:
        return OMNI_X86_AMX_SMALL ? 4 : 16;
    case GGML_TYPE_Q5_K:
        return 4;
    case GGML_TYPE_Q6_K:
        return OMNI_X86_AMX_SMALL ? 6 : 16;
    default:
        return 0;
    }
}

int64_t omni_amx_m_pad(int64_t n_batch)
{
    return n_batch <= 4 ? 4 : n_batch <= 8 ? 8 : (n_batch + TILE_M - 1) / TILE_M * TILE_M;
}

static int has_offset(int wtype)
{
    return wtype == GGML_TYPE_Q4_1 || wtype == GGML_TYPE_Q5_1 || wtype == GGML_TYPE_Q4_K ||
           wtype == GGML_TYPE_Q5_K;
}

/* Sized for the worst case, q6_K's n_in / 16 tile blocks. */
size_t omni_amx_scratch_bytes(int64_t n_in, int64_t m_pad)
{
    const size_t nbt = (size_t)(n_in / 16);
    return nbt * B_TILE_BYTES + 2 * nbt * TILE_N * sizeof(float) /* packed B, s_w, o_w */
           + 2 * nbt * (size_t)m_pad * sizeof(float)           /* d_a, d_a * sum q_a */
           + 2 * TILE_M * TILE_N * sizeof(int32_t) + 64;      /* C buffers */
}

// ---- weight packing --------------------------------------------------------

/* A gather puts one dword per weight row into the 16 lanes: lane n reads at
 * p + n * w_row. Lanes of rows past the matrix read nothing and hold 0;
 * their outputs are never stored. */
struct rows16 {
    __m512i offs;
    __mmask16 valid;
};

static inline __m512i gather_dw(const struct rows16 *g, const uint8_t *p)
{
    return _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), g->valid, g->offs, p, 1);
}

/* Bits shift .. shift+3 of each lane's 32-bit qh as 0x10 in bytes 0..3: the
 * 5th bits of 4 consecutive elements of a q5_0/q5_1 block. */
static inline __m512i q5_bits(__m512i qh, int shift)
{
    const __m512i x = _mm512_srl_epi32(qh, _mm_cvtsi32_si128(shift));
    const __m512i b01 = _mm512_or_si512(_mm512_and_si512(x, _mm512_set1_epi32(1)),
                                        _mm512_slli_epi32(_mm512_and_si512(x, _mm512_set1_epi32(2)), 7));
    const __m512i b23 = _mm512_or_si512(_mm512_slli_epi32(_mm512_and_si512(x, _mm512_set1_epi32(4)), 14),
                                        _mm512_slli_epi32(_mm512_and_si512(x, _mm512_set1_epi32(8)), 21));
    return _mm512_slli_epi32(_mm512_or_si512(b01, b23), 4);
}

/* Block b of a 32-element type for 16 rows: its B tile, s_w and o_w. */
static void pack_block32(int wtype, const struct rows16 *g, const uint8_t *blk, uint8_t *out,
                         float *sw, float *ow)
{
    const __m512i m4 = _mm512_set1_epi8(0x0f);
    /* dword 0 holds d in its low half and, for q4_1/q5_1, m in its high half */
    const __m512i dm = gather_dw(g, blk);
    _mm512_storeu_ps(sw, _mm512_cvtph_ps(_mm512_cvtepi32_epi16(dm)));
    if (wtype == GGML_TYPE_Q8_0) {
        for (int r = 0; r < 8; r++)
            _mm512_storeu_si512(out + 64 * r, gather_dw(g, blk + offsetof(block_q8_0, qs) + 4 * r));
        return;
    }
    int qs_off, qh_off = -1, zero_point = 0;
    switch (wtype) {
    case GGML_TYPE_Q4_0:
        qs_off = offsetof(block_q4_0, qs);
        zero_point = 8;
        break;
    case GGML_TYPE_Q5_0:
        qs_off = offsetof(block_q5_0, qs);
        qh_off = offsetof(block_q5_0, qh);
        zero_point = 16;
        break;
    case GGML_TYPE_Q4_1:
        qs_off = offsetof(block_q4_1, qs);
        break;
    default: /* q5_1 */
        qs_off = offsetof(block_q5_1, qs);
        qh_off = offsetof(block_q5_1, qh);
        break;
    }
    if (has_offset(wtype))
        _mm512_storeu_ps(ow, _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(dm, 16))));
    const __m512i qh = qh_off >= 0 ? gather_dw(g, blk + qh_off) : _mm512_setzero_si512();
    const __m512i zp = _mm512_set1_epi8((char)zero_point);
    for (int r = 0; r < 4; r++) {
        /* low nibbles are elements 0-15, high nibbles 16-31 */
        const __m512i v = gather_dw(g, blk + qs_off + 4 * r);
        __m512i lo = _mm512_and_si512(v, m4), hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
        if (qh_off >= 0) {
            lo = _mm512_or_si512(lo, q5_bits(qh, 4 * r));
            hi = _mm512_or_si512(hi, q5_bits(qh, 16 + 4 * r));
        }
        _mm512_storeu_si512(out + 64 * r, _mm512_sub_epi8(lo, zp));
        _mm512_storeu_si512(out + 64 * (r + 4), _mm512_sub_epi8(hi, zp));
    }
}

/* The 8 6-bit scales and mins of a q4_K/q5_K block (layout in quant.h). */
static inline void unpack_k4_scales(const uint8_t *q, uint8_t sc[8], uint8_t mn[8])
{
    for (int j = 0; j < 4; j++) {
        sc[j] = q[j] & 63;
        mn[j] = q[j + 4] & 63;
        sc[j + 4] = (uint8_t)((q[j + 8] & 0x0f) | ((q[j] >> 6) << 4));
        mn[j + 4] = (uint8_t)((q[j + 8] >> 4) | ((q[j + 4] >> 6) << 4));
    }
}

/* Super-block i of q4_K/q5_K for 16 rows: 8 blocks of 32 (B tiles, s_w =
 * d * sc, o_w = -dmin * m). Sub-blocks 2p and 2p+1 share the 32 qs bytes at
 * 32p (low and high nibbles); q5_K's 5th bit of element l of sub-block j is
 * bit j of qh[l]. */
static void pack_superblock_k(int wtype, const struct rows16 *g, const uint8_t *w0, size_t w_row,
                              int64_t n_valid, int64_t i, uint8_t *out, float *sw, float *ow)
{
    const size_t bsize = wtype == GGML_TYPE_Q4_K ? sizeof(block_q4_K) : sizeof(block_q5_K);
    const size_t qs_off = wtype == GGML_TYPE_Q4_K ? offsetof(block_q4_K, qs) : offsetof(block_q5_K, qs);
    const uint8_t *sb = w0 + i * bsize;
    const __m512i m4 = _mm512_set1_epi8(0x0f), one = _mm512_set1_epi8(1);
    __m512i qh[8];
    if (wtype == GGML_TYPE_Q5_K)
        for (int r = 0; r < 8; r++)
            qh[r] = gather_dw(g, sb + offsetof(block_q5_K, qh) + 4 * r);
    for (int p = 0; p < 4; p++)
        for (int r = 0; r < 8; r++) {
            const __m512i v = gather_dw(g, sb + qs_off + 32 * p + 4 * r);
            __m512i lo = _mm512_and_si512(v, m4), hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
            if (wtype == GGML_TYPE_Q5_K) {
                __m512i h0 = _mm512_and_si512(_mm512_srl_epi16(qh[r], _mm_cvtsi32_si128(2 * p)), one);
                __m512i h1 = _mm512_and_si512(_mm512_srl_epi16(qh[r], _mm_cvtsi32_si128(2 * p + 1)), one);
                lo = _mm512_or_si512(lo, _mm512_slli_epi16(h0, 4));
                hi = _mm512_or_si512(hi, _mm512_slli_epi16(h1, 4));
            }
            _mm512_storeu_si512(out + (2 * p) * B_TILE_BYTES + 64 * r, lo);
            _mm512_storeu_si512(out + (2 * p + 1) * B_TILE_BYTES + 64 * r, hi);
        }
    for (int n = 0; n < TILE_N; n++) {
        uint8_t sc[8] = { 0 }, mn[8] = { 0 };
        float d = 0.0f, dmin = 0.0f;
        if (n < n_valid) {
            const uint8_t *blk = w0 + n * w_row + i * bsize;
            ggml_half h[2];
            memcpy(h, blk, sizeof h); /* d, dmin lead both block types */
            d = _cvtsh_ss(h[0]);
            dmin = _cvtsh_ss(h[1]);
            unpack_k4_scales(blk + 4, sc, mn);
        }
        for (int j = 0; j < 8; j++) {
            sw[j * TILE_N + n] = d * sc[j];
            ow[j * TILE_N + n] = -dmin * mn[j];
        }
    }
}

/* Super-block i of q6_K for 16 rows: 16 blocks of 16 (s_w = d * sc, no
 * offset: q - 32 fits int8). The tile of block 2p+k holds it in half k of
 * the 32 activations of pair p, the other half zero. Element l of group g (32
 * elements, g = 0..3) of half h is nibble g >> 1 of ql[64h + 32(g & 1) + l]
 * with bits 2g, 2g+1 of qh[32h + l] on top. */
static void pack_superblock_q6_K(const struct rows16 *g, const uint8_t *w0, size_t w_row,
                                 int64_t n_valid, int64_t i, uint8_t *out, float *sw)
{
    const uint8_t *sb = w0 + i * sizeof(block_q6_K);
    const __m512i m4 = _mm512_set1_epi8(0x0f), m3 = _mm512_set1_epi8(3), off = _mm512_set1_epi8(32);
    for (int h = 0; h < 2; h++)
        for (int r = 0; r < 8; r++) {
            /* elements l = 4r .. 4r + 3 of each group of 32 */
            const __m512i ql0 = gather_dw(g, sb + offsetof(block_q6_K, ql) + 64 * h + 4 * r);
            const __m512i ql1 = gather_dw(g, sb + offsetof(block_q6_K, ql) + 64 * h + 32 + 4 * r);
            const __m512i qh = gather_dw(g, sb + offsetof(block_q6_K, qh) + 32 * h + 4 * r);
            const __m512i e[4] = {
                _mm512_or_si512(_mm512_and_si512(ql0, m4), _mm512_slli_epi16(_mm512_and_si512(qh, m3), 4)),
                _mm512_or_si512(_mm512_and_si512(ql1, m4),
                                _mm512_slli_epi16(_mm512_and_si512(_mm512_srli_epi16(qh, 2), m3), 4)),
                _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(ql0, 4), m4),
                                _mm512_slli_epi16(_mm512_and_si512(_mm512_srli_epi16(qh, 4), m3), 4)),
                _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(ql1, 4), m4),
                                _mm512_slli_epi16(_mm512_and_si512(_mm512_srli_epi16(qh, 6), m3), 4)),
            };
            for (int k = 0; k < 4; k++) {
                /* group k of half h = 16-blocks 8h + 2k (l < 16) and 8h + 2k + 1;
                 * a block's 16 elements are dword rows 4 * (blk & 1) .. + 3 */
                const int blk = 8 * h + 2 * k + (r >= 4);
                _mm512_storeu_si512(out + blk * B_TILE_BYTES + 64 * (4 * (blk & 1) + (r & 3)),
                                    _mm512_sub_epi8(e[k], off));
            }
        }
    for (int blk = 0; blk < 16; blk++) /* the other block's half: zero */
        for (int row = 0; row < 4; row++)
            _mm512_storeu_si512(out + blk * B_TILE_BYTES + 64 * (4 * (~blk & 1) + row),
                                _mm512_setzero_si512());
    for (int n = 0; n < TILE_N; n++) {
        const block_q6_K *x = n < n_valid ? (const block_q6_K *)(w0 + n * w_row) + i : NULL;
        for (int j = 0; j < 16; j++)
            sw[j * TILE_N + n] = x ? _cvtsh_ss(x->d) * x->scales[j] : 0.0f;
    }
}

/* Elements per scale block: 32, or 16 for q6_K (whose B tiles hold the 16
 * weights of one block in their half of the 32-element tile and zeros in the
 * other, so that every TDPBSSD sees a single weight scale). */
static int block_elems(int wtype)
{
    return wtype == GGML_TYPE_Q6_K ? 16 : 32;
}

/* nb tile blocks of n_valid (<= 16) rows from w0: B tiles, s_w, o_w. */
static void pack_weights(int wtype, const uint8_t *w0, size_t w_row, int64_t nb, int64_t n_valid,
                         uint8_t *bpack, float *sw, float *ow)
{
    struct rows16 g;
    g.valid = n_valid >= TILE_N ? 0xffff : (__mmask16)((1u << n_valid) - 1);
    g.offs = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                _mm512_set1_epi32((int)w_row));
    if (wtype == GGML_TYPE_Q6_K) {
        for (int64_t i = 0; i < nb / 16; i++)
            pack_superblock_q6_K(&g, w0, w_row, n_valid, i, bpack + 16 * i * B_TILE_BYTES,
                                 sw + 16 * i * TILE_N);
        return;
    }
    if (wtype == GGML_TYPE_Q4_K || wtype == GGML_TYPE_Q5_K) {
        for (int64_t i = 0; i < nb / 8; i++)
            pack_superblock_k(wtype, &g, w0, w_row, n_valid, i, bpack + 8 * i * B_TILE_BYTES,
                              sw + 8 * i * TILE_N, ow + 8 * i * TILE_N);
        return;
    }
    const size_t bsize = ggml_type_traits_of(wtype)->type_size;
    for (int64_t b = 0; b < nb; b++)
        pack_block32(wtype, &g, w0 + b * bsize, bpack + b * B_TILE_BYTES, sw + b * TILE_N,
                     ow + b * TILE_N);
}

// ---- activations -----------------------------------------------------------

/* Byte offset, within an activation row, of the 32 int8 of block b. */
static inline size_t act_qs_offset(int act_type, int64_t b)
{
    switch (act_type) {
    case GGML_TYPE_Q8_1:
        return (size_t)b * sizeof(block_q8_1) + offsetof(block_q8_1, qs);
    case GGML_TYPE_Q8_K:
        return (size_t)(b / 8) * sizeof(block_q8_K) + offsetof(block_q8_K, qs) + 32 * (size_t)(b % 8);
    default:
        return (size_t)b * sizeof(block_q8_0) + offsetof(block_q8_0, qs);
    }
}

/* da[b][m] = scale of the activations of tile block b (32-element block
 * b >> shift) of row m; sa[b][m] = da * sum of its q (only for weights with
 * an offset, whose blocks are 32 elements). Block-major: the rows of a block
 * are adjacent. */
static void act_scales(int act_type, const uint8_t *act, size_t row, int64_t m_pad, int64_t nbt,
                       int shift, float *da, float *sa)
{
    for (int64_t m = 0; m < m_pad; m++) {
        const uint8_t *r = act + m * row;
        for (int64_t b = 0; b < nbt; b++) {
            const int64_t a = b >> shift;
            float d, s = 0.0f;
            if (act_type == GGML_TYPE_Q8_K) {
                const block_q8_K *k = (const block_q8_K *)r + a / 8;
                d = k->d;
                s = d * (float)(k->bsums[2 * (a % 8)] + k->bsums[2 * (a % 8) + 1]);
            } else if (act_type == GGML_TYPE_Q8_1) {
                const block_q8_1 *q = (const block_q8_1 *)r + a;
                d = _cvtsh_ss(q->d);
                s = _cvtsh_ss(q->s);
            } else {
                d = _cvtsh_ss(((const block_q8_0 *)r + a)->d);
            }
            da[b * m_pad + m] = d;
            if (sa)
                sa[b * m_pad + m] = s;
        }
    }
}

// ---- tiles -----------------------------------------------------------------

/* acc[m] += d_a[m] * s_w * C[m] (+ sa[m] * o_w) for the M rows of a C tile. */
static inline __attribute__((always_inline)) void
scale_accumulate(__m512 acc[TILE_M], const int32_t *cbuf, const float *sw, const float *ow,
                 const float *da, const float *sa, const int offset, const int M)
{
    const __m512 vsw = _mm512_loadu_ps(sw);
    const __m512 vow = offset ? _mm512_loadu_ps(ow) : _mm512_setzero_ps();
#pragma GCC unroll 16
    for (int m = 0; m < M; m++) {
        __m512 c = _mm512_cvtepi32_ps(_mm512_load_si512(cbuf + TILE_N * m));
        acc[m] = _mm512_fmadd_ps(c, _mm512_mul_ps(vsw, _mm512_set1_ps(da[m])), acc[m]);
        if (offset)
            acc[m] = _mm512_fmadd_ps(vow, _mm512_set1_ps(sa[m]), acc[m]);
    }
}

/* All nbt tile blocks of M batch rows (A tiles at a0, stride xq_row)
 * against the packed 16 weight rows; the first m_valid rows of the result
 * into y (row stride n_out), the lanes of nmask. acc is indexed by constants
 * only (M is one, the loops unroll), so gcc keeps it in zmm registers: a
 * runtime index would put it on the stack, a load and a store per row and
 * block. */
static inline __attribute__((always_inline)) void
tile_row(int act_type, const uint8_t *a0, size_t xq_row, int64_t nbt, const uint8_t *bpack,
         const float *sw, const float *ow, const float *da, const float *sa, int64_t m_pad,
         int32_t *cbuf, float *y, int64_t n_out, int64_t m_valid, __mmask16 nmask,
         const int offset, const int M, const int shift)
{
    __m512 acc[TILE_M];
#pragma GCC unroll 16
    for (int m = 0; m < M; m++)
        acc[m] = _mm512_setzero_ps();
    int64_t b = 0;
    for (; b + 2 <= nbt; b += 2) {
        _tile_loadd(2, a0 + act_qs_offset(act_type, b >> shift), xq_row);
        _tile_loadd(4, bpack + b * B_TILE_BYTES, 64);
        _tile_zero(0);
        _tile_dpbssd(0, 2, 4);
        _tile_loadd(3, a0 + act_qs_offset(act_type, (b + 1) >> shift), xq_row);
        _tile_loadd(5, bpack + (b + 1) * B_TILE_BYTES, 64);
        _tile_zero(1);
        _tile_dpbssd(1, 3, 5);
        _tile_stored(0, cbuf, 64);
        scale_accumulate(acc, cbuf, sw + b * TILE_N, ow + b * TILE_N, da + b * m_pad,
                         sa + b * m_pad, offset, M);
        _tile_stored(1, cbuf + TILE_M * TILE_N, 64);
        scale_accumulate(acc, cbuf + TILE_M * TILE_N, sw + (b + 1) * TILE_N, ow + (b + 1) * TILE_N,
                         da + (b + 1) * m_pad, sa + (b + 1) * m_pad, offset, M);
    }
    if (b < nbt) {
        _tile_loadd(2, a0 + act_qs_offset(act_type, b >> shift), xq_row);
        _tile_loadd(4, bpack + b * B_TILE_BYTES, 64);
        _tile_zero(0);
        _tile_dpbssd(0, 2, 4);
        _tile_stored(0, cbuf, 64);
        scale_accumulate(acc, cbuf, sw + b * TILE_N, ow + b * TILE_N, da + b * m_pad,
                         sa + b * m_pad, offset, M);
    }
#pragma GCC unroll 16
    for (int m = 0; m < M; m++)
        if (m < m_valid)
            _mm512_mask_storeu_ps(y + m * n_out, nmask, acc[m]);
}

void omni_amx_matmul(int wtype, const void *w, size_t w_row, int64_t n_in, int64_t n_out,
                     const void *xq, size_t xq_row, int64_t n_batch, int64_t m_pad, float *y,
                     int64_t r0, int64_t r1, void *scratch)
{
    const int shift = block_elems(wtype) == 16;
    const int64_t nbt = n_in / block_elems(wtype);
    const int offset = has_offset(wtype);
    const int m_tile = m_pad < TILE_M ? (int)m_pad : TILE_M;
    const int act_type = wtype == GGML_TYPE_Q4_K || wtype == GGML_TYPE_Q5_K ||
                                 wtype == GGML_TYPE_Q6_K ? GGML_TYPE_Q8_K
                         : wtype == GGML_TYPE_Q4_1 || wtype == GGML_TYPE_Q5_1 ? GGML_TYPE_Q8_1
                                                                              : GGML_TYPE_Q8_0;
    uint8_t *bpack = scratch;
    float *sw = (float *)(bpack + nbt * B_TILE_BYTES);
    float *ow = sw + nbt * TILE_N;
    float *da = ow + nbt * TILE_N; /* [nbt][m_pad] */
    float *sa = da + nbt * m_pad;
    int32_t *cbuf = (int32_t *)(((uintptr_t)(sa + nbt * m_pad) + 63) & ~(uintptr_t)63);
    const uint8_t *act = xq;

    act_scales(act_type, act, xq_row, m_pad, nbt, shift, da, offset ? sa : NULL);
    tile_setup(m_tile);
    for (int64_t n0 = r0; n0 < r1; n0 += TILE_N) {
        const int64_t n_valid = r1 - n0 < TILE_N ? r1 - n0 : TILE_N;
        pack_weights(wtype, (const uint8_t *)w + n0 * w_row, w_row, nbt, n_valid, bpack, sw, ow);
        /* tileloadd reads the packed tiles behind gcc's back (its asm has no
         * memory operand): keep the stores above it */
        __asm__ volatile("" ::: "memory");
        const __mmask16 nmask = n_valid >= TILE_N ? 0xffff : (__mmask16)((1u << n_valid) - 1);
        for (int64_t m0 = 0; m0 < n_batch; m0 += m_tile) {
            const uint8_t *a0 = act + m0 * xq_row;
            const int64_t m_valid = n_batch - m0 < m_tile ? n_batch - m0 : m_tile;
#define TILE_ROW(OFFSET, M, SHIFT)                                                                 \
    tile_row(act_type, a0, xq_row, nbt, bpack, sw, ow, da + m0, sa + m0, m_pad, cbuf,             \
             y + m0 * n_out + n0, n_out, m_valid, nmask, OFFSET, M, SHIFT)
            if (offset)
                m_tile == 4 ? TILE_ROW(1, 4, 0) : m_tile == 8 ? TILE_ROW(1, 8, 0) : TILE_ROW(1, 16, 0);
            else if (shift)
                m_tile == 4 ? TILE_ROW(0, 4, 1) : m_tile == 8 ? TILE_ROW(0, 8, 1) : TILE_ROW(0, 16, 1);
            else
                m_tile == 4 ? TILE_ROW(0, 4, 0) : m_tile == 8 ? TILE_ROW(0, 8, 0) : TILE_ROW(0, 16, 0);
#undef TILE_ROW
        }
    }
    _tile_release();
}

#endif /* __x86_64__ */
