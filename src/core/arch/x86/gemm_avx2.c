/* gemm_avx2.c - int8 GEMM for small batches (2 rows up) of the weight types
 * whose dot type is Q8_0 (q8_0, q4_0, q5_0), AVX2 (vpmaddubsw), and the
 * activation preparation both GEMM levels share (gemm_avx512.c has the
 * VNNI kernel).
 *
 * Below omni_x86_gemm_act8_min_avx2 rows a tile of 2 weight rows x 4
 * activation rows is multiplied in registers, so each weight block is
 * unpacked once per 4 activation rows instead of once per row. q4_0/q5_0
 * weights become unsigned bytes u = q + K (K = 8, 16): pmaddubsw's int16
 * pair sums stay below 2 * 31 * 127, and the offset comes off exactly as
 * -K/8 * sum(a) in each int32 lane. q8_0 moves the weight's sign onto the
 * activation instead (K = 0: a byte of 128 times 127, twice, still fits
 * int16). Every (weight row, activation row) pair keeps its own 8 float
 * lanes, summed over blocks in a fixed order, so a result depends only on
 * its two rows, never on the rest of the batch.
 *
 * From that many rows up (4-6 rows; the engine's 8-sequence decode) the roles turn
 * around: 8 activation rows are transposed once per call, one lane per
 * row, and each weight block, read in its row's own layout, is broadcast a
 * dword at a time into tiles of 4 weight rows x 8 activation rows; the
 * int32 block sum, the scale and the float steps of a block serve the 8
 * activation rows at once ("8 activation rows interleaved" below). */
#if defined(__x86_64__)

#pragma GCC target("avx2,fma,f16c")

#include "x86.h"

#include <immintrin.h>
#include <string.h>

#define TILE_R 2 /* weight rows per register tile */
/* An int32 read at any address (activation qs sit at offset 2 of a block). */
typedef int32_t i32u __attribute__((aligned(1), may_alias));
#define TILE_C 4 /* activation rows per register tile */
/* bytes at p into L1 (a prefetch never faults: only a hint) */
static inline void prefetch_bytes(const uint8_t *p, size_t bytes)
{
    for (size_t o = 0; o < bytes; o += 64)
        _mm_prefetch((const char *)p + o, _MM_HINT_T0);
}

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

// ---- 8 activation rows interleaved ------------------------------------------

/* The same products with the roles turned: 8 activation rows transposed
 * once per call (lane c of register k = dword k of row c's block), so each
 * weight block is read once, in its row's own layout, and its dwords
 * broadcast: no per-group transpose of the weights. A register tile is
 * ACT8_R weight rows x the 8 activation rows: each activation register
 * loaded serves ACT8_R weight rows (one weight row at a time left the
 * kernel waiting on its loads: two per vpmaddubsw). Batches that are not a
 * multiple of 8 pad their last 8 with zero rows (their lanes are dropped).
 *
 * q4_0/q5_0: per (weight row, activation row) the integer block sum is
 * exact, then one float step per block (acc += float(sum + K * sum(a)) *
 * (d * a.d)), so a row's bits do not depend on the batch size within the
 * act8 range (test_matmul pins the range to one kernel id). q8_0: the
 * weight's sign goes onto the activation (vpsignb; a is never -128) and
 * |w| (at most 128) into vpmaddubsw's unsigned side; each vpmaddubsw is
 * widened to int32 at once (two pair sums of 128 x 127 would not fit
 * int16). Its float step, one per block and pair as for q4_0/q5_0, differs
 * from the 2 x 4 tiles' (8 partial lanes per pair), so q8_0's act8 range
 * is a kernel id of its own. a: nb blocks of (8 registers, 8 scales, 8
 * corrections times 8). */
#define ACT8_BYTES (8 * 32 + 8 * 4 + 8 * 4)
#define ACT8_R 4 /* weight rows per register tile */
/* dword k (0-3) of each 128-bit half to all four of its dwords; a switch
 * because vpshufd takes an immediate (folded away once k is a constant in
 * the unrolled loops; an -O1 sanitizer build keeps the branches) */
static inline __attribute__((always_inline)) __m256i bcast_dw(__m256i v, int k)
{
    switch (k & 3) {
    case 0: return _mm256_shuffle_epi32(v, 0x00);
    case 1: return _mm256_shuffle_epi32(v, 0x55);
    case 2: return _mm256_shuffle_epi32(v, 0xaa);
    default: return _mm256_shuffle_epi32(v, 0xff);
    }
}
#define BCAST_DW(v, k) bcast_dw(v, k)
/* fewest batch rows that take the act8 kernel: where a pass over 8 rows
 * (padded) costs less than the 2 x 4 tiles over the batch (one thread,
 * tests/bench_matmul.c, load 14-16: q8_0 4096 x 896 tiles 0.60 / 0.73 ms
 * for 5 / 6 rows against 0.69 for act8; q4_0 4864 x 896 0.54 / 0.84 for 4 /
 * 5 against 0.64; q5_0 0.84 for 4 against 0.78) */
#define ACT8_MIN_Q8_0 6
#define ACT8_MIN_Q4_0 5
#define ACT8_MIN_Q5_0 4

/* Rows nc..7 of the pack are zero (no contribution, dropped on store). */
static void act8_pack(const uint8_t *xq, size_t xq_row, const float *ad, const int32_t *corr,
                      int nc, int64_t nb, int64_t nbp, uint8_t *a)
{
    for (int64_t i = 0; i < nb; i++) {
        __m256i v[8];
        uint8_t *o = a + (size_t)i * ACT8_BYTES;
        for (int c = 0; c < 8; c++) {
            if (c >= nc) {
                v[c] = _mm256_setzero_si256();
                ((float *)(o + 256))[c] = 0.0f;
                ((int32_t *)(o + 288))[c] = 0;
                continue;
            }
            v[c] = _mm256_loadu_si256((const __m256i *)((const block_q8_0 *)(xq + (size_t)c * xq_row) + i)->qs);
            ((float *)(o + 256))[c] = ad[c * nbp + i];
            ((int32_t *)(o + 288))[c] = 8 * corr[c * nbp + i];
        }
        __m256i t[8], u[8];
        for (int k = 0; k < 4; k++) {
            t[2 * k] = _mm256_unpacklo_epi32(v[2 * k], v[2 * k + 1]);
            t[2 * k + 1] = _mm256_unpackhi_epi32(v[2 * k], v[2 * k + 1]);
        }
        for (int k = 0; k < 2; k++) {
            u[4 * k] = _mm256_unpacklo_epi64(t[4 * k], t[4 * k + 2]);
            u[4 * k + 1] = _mm256_unpackhi_epi64(t[4 * k], t[4 * k + 2]);
            u[4 * k + 2] = _mm256_unpacklo_epi64(t[4 * k + 1], t[4 * k + 3]);
            u[4 * k + 3] = _mm256_unpackhi_epi64(t[4 * k + 1], t[4 * k + 3]);
        }
        for (int j = 0; j < 4; j++) {
            _mm256_storeu_si256((__m256i *)o + j, _mm256_permute2x128_si256(u[j], u[4 + j], 0x20));
            _mm256_storeu_si256((__m256i *)o + j + 4, _mm256_permute2x128_si256(u[j], u[4 + j], 0x31));
        }
    }
}

/* y[c * y_stride + r] (c < nc, r < NR) for NR weight rows (row r at
 * w + r * w_row) against the packed activations. */
static inline __attribute__((always_inline)) void
act8_tile(const int WT, const uint8_t *w, size_t w_row, int64_t nb, const uint8_t *a, float *y,
          size_t y_stride, int nc, const int NR)
{
    const __m256i ones = _mm256_set1_epi16(1);
    __m256 acc[ACT8_R];
#pragma GCC unroll 4
    for (int r = 0; r < NR; r++)
        acc[r] = _mm256_setzero_ps();
    for (int64_t i = 0; i < nb; i++) {
        const __m256i *A = (const __m256i *)(a + (size_t)i * ACT8_BYTES);
        __m256i dot[ACT8_R];
        float d[ACT8_R];
        if (WT == GGML_TYPE_Q8_0) {
            const int8_t *q[ACT8_R];
#pragma GCC unroll 4
            for (int r = 0; r < NR; r++) {
                const block_q8_0 *x = (const block_q8_0 *)(w + (size_t)r * w_row) + i;
                q[r] = x->qs;
                d[r] = _cvtsh_ss(x->d);
                dot[r] = _mm256_setzero_si256();
            }
#pragma GCC unroll 8
            for (int k = 0; k < 8; k++) {
                const __m256i ak = _mm256_loadu_si256(A + k);
#pragma GCC unroll 4
                for (int r = 0; r < NR; r++) {
                    /* straight from the weights (a copy through the stack
                     * to save the vpabsb measured 60% slower) */
                    const __m256i wb = _mm256_set1_epi32(*(const i32u *)(q[r] + 4 * k));
                    const __m256i p = _mm256_maddubs_epi16(_mm256_abs_epi8(wb), _mm256_sign_epi8(ak, wb));
                    dot[r] = _mm256_add_epi32(dot[r], _mm256_madd_epi16(p, ones));
                }
            }
        } else {
            /* each block unpacked once; dword k broadcast in registers
             * (each half copied to both lanes, then vpshufd) */
            __m256i wl[ACT8_R], wh[ACT8_R];
#pragma GCC unroll 4
            for (int r = 0; r < NR; r++) {
                const __m256i q = load_w(WT, w + (size_t)r * w_row, i, &d[r]);
                wl[r] = _mm256_permute2x128_si256(q, q, 0x00);
                wh[r] = _mm256_permute2x128_si256(q, q, 0x11);
            }
            __m256i s[ACT8_R];
            /* q4_0: 8 pair sums of at most 2 * 15 * 127 fit int16; q5_0: 4
             * of 2 * 31 * 127, so two halves */
#pragma GCC unroll 4
            for (int h = 0; h < 2; h++) {
#pragma GCC unroll 4
                for (int k = 4 * h; k < 4 * h + 4; k++) {
                    const __m256i ak = _mm256_loadu_si256(A + k);
#pragma GCC unroll 4
                    for (int r = 0; r < NR; r++) {
                        const __m256i p = _mm256_maddubs_epi16(BCAST_DW(k < 4 ? wl[r] : wh[r], k & 3), ak);
                        s[r] = k == 4 * h && (h == 0 || WT == GGML_TYPE_Q5_0) ? p : _mm256_add_epi16(s[r], p);
                    }
                }
                if (WT == GGML_TYPE_Q5_0) {
#pragma GCC unroll 4
                    for (int r = 0; r < NR; r++)
                        dot[r] = h == 0 ? _mm256_madd_epi16(s[r], ones)
                                        : _mm256_add_epi32(dot[r], _mm256_madd_epi16(s[r], ones));
                }
            }
            const __m256i k8 = _mm256_loadu_si256((const __m256i *)(a + (size_t)i * ACT8_BYTES + 288));
#pragma GCC unroll 4
            for (int r = 0; r < NR; r++) {
                if (WT == GGML_TYPE_Q4_0)
                    dot[r] = _mm256_madd_epi16(s[r], ones);
                dot[r] = _mm256_add_epi32(dot[r], k8);
            }
        }
        const __m256 da = _mm256_loadu_ps((const float *)(a + (size_t)i * ACT8_BYTES + 256));
#pragma GCC unroll 4
        for (int r = 0; r < NR; r++)
            acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot[r]), _mm256_mul_ps(_mm256_set1_ps(d[r]), da), acc[r]);
    }
    for (int r = 0; r < NR; r++) {
        float out[8];
        _mm256_storeu_ps(out, acc[r]);
        for (int c = 0; c < nc; c++)
            y[(size_t)c * y_stride + r] = out[c];
    }
}

#define ACT8_CASE(WT, nr)                                                                       \
    case nr: act8_tile(WT, wr, w_row, nb, a, yr, y_stride, nc, nr); break

#define ACT8_TILES(WT, name)                                                                    \
    static void name(const uint8_t *wr, size_t w_row, int64_t nb, const uint8_t *a, float *yr,  \
                     size_t y_stride, int nc, int nr)                                           \
    {                                                                                           \
        switch (nr) {                                                                           \
            ACT8_CASE(WT, 1); ACT8_CASE(WT, 2); ACT8_CASE(WT, 3); default:                      \
            act8_tile(WT, wr, w_row, nb, a, yr, y_stride, nc, ACT8_R);                          \
            break;                                                                              \
        }                                                                                       \
    }

typedef void (*act8_fn)(const uint8_t *wr, size_t w_row, int64_t nb, const uint8_t *a, float *yr,
                        size_t y_stride, int nc, int nr);
ACT8_TILES(GGML_TYPE_Q8_0, act8_q8_0)
ACT8_TILES(GGML_TYPE_Q4_0, act8_q4_0)
ACT8_TILES(GGML_TYPE_Q5_0, act8_q5_0)

static void act8_rows(int wtype, const uint8_t *w, size_t w_row, int64_t n_in, int64_t n_out,
                      const uint8_t *xq, size_t xq_row, const float *ad, const int32_t *corr,
                      int64_t n_batch, float *y, int64_t r0, int64_t r1, uint8_t *a)
{
    const int64_t nb = n_in / QK8_0, nbp = omni_x86_gemm_q8_0_blocks(n_in);
    const act8_fn tile = wtype == GGML_TYPE_Q8_0 ? act8_q8_0 : wtype == GGML_TYPE_Q4_0 ? act8_q4_0 : act8_q5_0;
    for (int64_t c = 0; c < n_batch; c += 8) {
        const int nc = n_batch - c < 8 ? (int)(n_batch - c) : 8;
        act8_pack(xq + (size_t)c * xq_row, xq_row, ad + c * nbp, corr + c * nbp, nc, nb, nbp, a);
        for (int64_t r = r0; r < r1; r += ACT8_R) {
            /* the next 8 weight rows arrive while these multiply (10% less
             * CPU for the q5_0 products of an 8-row Qwen2.5-0.5B decode) */
            if (((r - r0) & 7) == 0 && r + 8 < r1)
                prefetch_bytes(w + (size_t)(r + 8) * w_row, (size_t)(r1 - r - 8 < 8 ? r1 - r - 8 : 8) * w_row);
            const int nr = r1 - r < ACT8_R ? (int)(r1 - r) : ACT8_R;
            tile(w + (size_t)r * w_row, w_row, nb, a, y + c * n_out + r, (size_t)n_out, nc, nr);
        }
    }
}

size_t omni_x86_gemm_q8_0_avx2_scratch(int64_t n_in)
{
    return (size_t)(n_in / QK8_0) * ACT8_BYTES;
}

int omni_x86_gemm_act8_min_avx2(int wtype)
{
    switch (wtype) {
    case GGML_TYPE_Q8_0: return ACT8_MIN_Q8_0;
    case GGML_TYPE_Q4_0: return ACT8_MIN_Q4_0;
    case GGML_TYPE_Q5_0: return ACT8_MIN_Q5_0;
    default: return INT32_MAX;
    }
}

void omni_x86_gemm_q8_0_avx2(int wtype, const void *w, size_t w_row, int64_t n_in, int64_t n_out,
                             const void *xq, size_t xq_row, const float *ad, const int32_t *corr,
                             int64_t n_batch, float *y, int64_t r0, int64_t r1, void *scratch)
{
    if (scratch && n_batch >= omni_x86_gemm_act8_min_avx2(wtype)) {
        act8_rows(wtype, w, w_row, n_in, n_out, xq, xq_row, ad, corr, n_batch, y, r0, r1, scratch);
        return;
    }
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
