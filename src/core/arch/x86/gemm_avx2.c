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
 * depends only on its two rows, never on the rest of the batch.
 *
 * From OMNI_X86_GEMM_AVX2_GROUP_MIN rows, q4_0/q5_0 go further: 8 weight
 * rows are unpacked and transposed into per-thread scratch once per call,
 * one lane per weight row, so the int32 sum, the scale and the float steps
 * of a block serve 8 rows at once (about 2.5 instead of 6 instructions per
 * row, block and activation row). The loops over the group's registers and
 * the tile's activation rows carry unroll pragmas: left to itself GCC 12
 * copied the 8 weight registers through the stack with a memcpy call per
 * block (the kernel ran 40% slower). Batches of a multiple of 8 rows (the
 * engine's 8-sequence decode) turn the roles around instead: the 8
 * activation rows are transposed once per call and each weight block,
 * unpacked in place, is broadcast a dword at a time (act8_rows: same
 * integers, same float steps, same bits as the groups; 5-8% less time for
 * q5_0 4864 x 896 at 8 rows). Both prefetch the next 8 weight rows. */
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

// ---- q4_0 / q5_0: 8 weight rows interleaved --------------------------------

/* An 8-row group of q4_0/q5_0 weights, unpacked to bytes and transposed so
 * that lane L of register k of block i holds bytes 4k..4k+3 of row L: one
 * broadcast activation dword then multiplies 8 rows at once, and the block
 * scale, the int32 sum and the float steps are shared by the 8 rows. Rows
 * past n_rows are zero. g: nb blocks of (8 registers, then 8 floats). */
#define GROUP_BYTES (8 * 32 + 8 * 4)

static void group_pack(const int WT, const uint8_t *w, size_t w_row, int n_rows, int64_t nb,
                       uint8_t *g)
{
    for (int64_t i = 0; i < nb; i++) {
        __m256i v[8];
        float *d = (float *)(g + (size_t)i * GROUP_BYTES + 256);
        for (int L = 0; L < 8; L++) {
            if (L >= n_rows) {
                v[L] = _mm256_setzero_si256();
                d[L] = 0.0f;
                continue;
            }
            float dl;
            v[L] = load_w(WT, w + (size_t)L * w_row, i, &dl);
            d[L] = dl;
        }
        /* 8x8 transpose of 32-bit elements */
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
        /* u[j] (j < 4) holds dword j of rows 0-3 (low lane: dword j, high
         * lane: dword j + 4); u[4 + j] the same for rows 4-7 */
        __m256i *o = (__m256i *)(g + (size_t)i * GROUP_BYTES);
        for (int j = 0; j < 4; j++) {
            _mm256_storeu_si256(o + j, _mm256_permute2x128_si256(u[j], u[4 + j], 0x20));
            _mm256_storeu_si256(o + j + 4, _mm256_permute2x128_si256(u[j], u[4 + j], 0x31));
        }
    }
}

/* y[c * y_stride + L] for the 8 rows of a packed group x NC activation rows. */
static inline __attribute__((always_inline)) void
group_tile(const int WT, const uint8_t *g, int64_t nb, int64_t nbp, const uint8_t *xq,
           size_t xq_row, const float *ad, const int32_t *corr, float *y, size_t y_stride,
           int n_rows, const int NC)
{
    const __m256i ones = _mm256_set1_epi16(1);
    __m256 acc[TILE_C];
    for (int c = 0; c < NC; c++)
        acc[c] = _mm256_setzero_ps();
    for (int64_t i = 0; i < nb; i++) {
        const __m256i *wk = (const __m256i *)(g + (size_t)i * GROUP_BYTES);
        const __m256 wd = _mm256_loadu_ps((const float *)(g + (size_t)i * GROUP_BYTES + 256));
        __m256i W[8];
#pragma GCC unroll 8
        for (int k = 0; k < 8; k++)
            W[k] = _mm256_loadu_si256(wk + k);
#pragma GCC unroll 4
        for (int c = 0; c < NC; c++) {
            /* the activation block's 8 dwords (qs sits at offset 2: unaligned) */
            const i32u *a = (const i32u *)((const block_q8_0 *)(xq + (size_t)c * xq_row) + i)->qs;
            __m256i dot;
            if (WT == GGML_TYPE_Q4_0) { /* 8 pair sums of at most 2 * 15 * 127 fit int16 */
                __m256i s0 = _mm256_maddubs_epi16(W[0], _mm256_set1_epi32(a[0]));
                __m256i s1 = _mm256_maddubs_epi16(W[4], _mm256_set1_epi32(a[4]));
#pragma GCC unroll 4
                for (int k = 1; k < 4; k++) { /* two chains: the adds' latency */
                    s0 = _mm256_add_epi16(s0, _mm256_maddubs_epi16(W[k], _mm256_set1_epi32(a[k])));
                    s1 = _mm256_add_epi16(s1, _mm256_maddubs_epi16(W[k + 4], _mm256_set1_epi32(a[k + 4])));
                }
                dot = _mm256_madd_epi16(_mm256_add_epi16(s0, s1), ones);
            } else { /* q5_0: 4 pair sums of at most 2 * 31 * 127 at a time */
                __m256i s0 = _mm256_maddubs_epi16(W[0], _mm256_set1_epi32(a[0]));
                __m256i s1 = _mm256_maddubs_epi16(W[4], _mm256_set1_epi32(a[4]));
#pragma GCC unroll 4
                for (int k = 1; k < 4; k++) {
                    s0 = _mm256_add_epi16(s0, _mm256_maddubs_epi16(W[k], _mm256_set1_epi32(a[k])));
                    s1 = _mm256_add_epi16(s1, _mm256_maddubs_epi16(W[k + 4], _mm256_set1_epi32(a[k + 4])));
                }
                dot = _mm256_add_epi32(_mm256_madd_epi16(s0, ones), _mm256_madd_epi16(s1, ones));
            }
            /* the offset K * sum(a): -K/8 * sum(a) per lane for 8 lanes */
            dot = _mm256_add_epi32(dot, _mm256_set1_epi32(8 * corr[c * nbp + i]));
            acc[c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), _mm256_mul_ps(wd, _mm256_broadcast_ss(ad + c * nbp + i)),
                                     acc[c]);
        }
    }
    for (int c = 0; c < NC; c++) {
        float out[8];
        _mm256_storeu_ps(out, acc[c]);
        for (int L = 0; L < n_rows; L++)
            y[(size_t)c * y_stride + L] = out[L];
    }
}

static void group_rows(const int WT, const uint8_t *w, size_t w_row, int64_t n_in, int64_t n_out,
                       const uint8_t *xq, size_t xq_row, const float *ad, const int32_t *corr,
                       int64_t n_batch, float *y, int64_t r0, int64_t r1, uint8_t *g)
{
    const int64_t nb = n_in / QK8_0, nbp = omni_x86_gemm_q8_0_blocks(n_in);
    for (int64_t r = r0; r < r1; r += 8) {
        const int nr = r1 - r < 8 ? (int)(r1 - r) : 8;
        group_pack(WT, w + (size_t)r * w_row, w_row, nr, nb, g);
        /* the next group's rows arrive while this one multiplies: without,
         * each group's DRAM reads and its multiplications took turns (10%
         * less CPU time for the q5_0 groups of an 8-row Qwen2.5-0.5B decode;
         * the same prefetch in the 2 x 4 tiles and the K-quant GEMM measured
         * no better or worse: their weights stream in well without it) */
        if (r + 8 < r1)
            prefetch_bytes(w + (size_t)(r + 8) * w_row, (size_t)(r1 - r - 8 < 8 ? r1 - r - 8 : 8) * w_row);
        for (int64_t c = 0; c < n_batch; c += TILE_C) {
            const int nc = n_batch - c < TILE_C ? (int)(n_batch - c) : TILE_C;
            const uint8_t *xc = xq + (size_t)c * xq_row;
            float *yc = y + c * n_out + r;
            switch (nc) {
            case 1: group_tile(WT, g, nb, nbp, xc, xq_row, ad + c * nbp, corr + c * nbp, yc, (size_t)n_out, nr, 1); break;
            case 2: group_tile(WT, g, nb, nbp, xc, xq_row, ad + c * nbp, corr + c * nbp, yc, (size_t)n_out, nr, 2); break;
            case 3: group_tile(WT, g, nb, nbp, xc, xq_row, ad + c * nbp, corr + c * nbp, yc, (size_t)n_out, nr, 3); break;
            default: group_tile(WT, g, nb, nbp, xc, xq_row, ad + c * nbp, corr + c * nbp, yc, (size_t)n_out, nr, 4); break;
            }
        }
    }
}

// ---- q4_0 / q5_0: 8 activation rows interleaved ----------------------------

/* The same products with the roles turned: 8 activation rows transposed
 * once per call (lane c of register k = dword k of row c's block), so each
 * weight block is unpacked once, in its row's own layout, and its dwords
 * broadcast: no per-group transpose of the weights. Per (weight row,
 * activation row) the integers and the float steps are those of
 * group_tile, in the same order, so the bits are the same as its (test_matmul
 * pins the group range to one kernel id). a: nb blocks of (8 registers, 8
 * scales, 8 corrections times 8). */
#define ACT8_BYTES (8 * 32 + 8 * 4 + 8 * 4)

static void act8_pack(const uint8_t *xq, size_t xq_row, const float *ad, const int32_t *corr,
                      int64_t nb, int64_t nbp, uint8_t *a)
{
    for (int64_t i = 0; i < nb; i++) {
        __m256i v[8];
        uint8_t *o = a + (size_t)i * ACT8_BYTES;
        for (int c = 0; c < 8; c++) {
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

/* y[c * y_stride] (c < 8) for one weight row against the packed activations. */
static inline __attribute__((always_inline)) void act8_row(const int WT, const uint8_t *wrow, int64_t nb,
                                                           const uint8_t *a, float *y, size_t y_stride)
{
    const __m256i ones = _mm256_set1_epi16(1);
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < nb; i++) {
        const __m256i *A = (const __m256i *)(a + (size_t)i * ACT8_BYTES);
        float d;
        /* the block's dwords, each broadcast from the stack (a load, no shuffle) */
        _Alignas(32) int32_t wd[8];
        _mm256_store_si256((__m256i *)wd, load_w(WT, wrow, i, &d));
        __m256i s0 = _mm256_maddubs_epi16(_mm256_set1_epi32(wd[0]), _mm256_loadu_si256(A));
        __m256i s1 = _mm256_maddubs_epi16(_mm256_set1_epi32(wd[4]), _mm256_loadu_si256(A + 4));
#pragma GCC unroll 4
        for (int k = 1; k < 4; k++) {
            s0 = _mm256_add_epi16(s0, _mm256_maddubs_epi16(_mm256_set1_epi32(wd[k]), _mm256_loadu_si256(A + k)));
            s1 = _mm256_add_epi16(s1, _mm256_maddubs_epi16(_mm256_set1_epi32(wd[k + 4]), _mm256_loadu_si256(A + k + 4)));
        }
        __m256i dot = WT == GGML_TYPE_Q4_0
                          ? _mm256_madd_epi16(_mm256_add_epi16(s0, s1), ones)
                          : _mm256_add_epi32(_mm256_madd_epi16(s0, ones), _mm256_madd_epi16(s1, ones));
        dot = _mm256_add_epi32(dot, _mm256_loadu_si256((const __m256i *)(a + (size_t)i * ACT8_BYTES + 288)));
        acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot),
                              _mm256_mul_ps(_mm256_set1_ps(d), _mm256_loadu_ps((const float *)(a + (size_t)i * ACT8_BYTES + 256))),
                              acc);
    }
    float out[8];
    _mm256_storeu_ps(out, acc);
    for (int c = 0; c < 8; c++)
        y[(size_t)c * y_stride] = out[c];
}

static void act8_rows(const int WT, const uint8_t *w, size_t w_row, int64_t n_in, int64_t n_out,
                      const uint8_t *xq, size_t xq_row, const float *ad, const int32_t *corr,
                      int64_t n_batch, float *y, int64_t r0, int64_t r1, uint8_t *a)
{
    const int64_t nb = n_in / QK8_0, nbp = omni_x86_gemm_q8_0_blocks(n_in);
    for (int64_t c = 0; c < n_batch; c += 8) {
        act8_pack(xq + (size_t)c * xq_row, xq_row, ad + c * nbp, corr + c * nbp, nb, nbp, a);
        for (int64_t r = r0; r < r1; r++) {
            if ((r & 7) == 0 && r + 8 < r1) /* as group_rows: the next rows arrive meanwhile */
                prefetch_bytes(w + (size_t)(r + 8) * w_row, (size_t)(r1 - r - 8 < 8 ? r1 - r - 8 : 8) * w_row);
            act8_row(WT, w + (size_t)r * w_row, nb, a, y + c * n_out + r, (size_t)n_out);
        }
    }
}

size_t omni_x86_gemm_q8_0_avx2_scratch(int64_t n_in)
{
    return (size_t)(n_in / QK8_0) * (ACT8_BYTES > GROUP_BYTES ? ACT8_BYTES : GROUP_BYTES);
}

void omni_x86_gemm_q8_0_avx2(int wtype, const void *w, size_t w_row, int64_t n_in, int64_t n_out,
                             const void *xq, size_t xq_row, const float *ad, const int32_t *corr,
                             int64_t n_batch, float *y, int64_t r0, int64_t r1, void *scratch)
{
    if (wtype != GGML_TYPE_Q8_0 && scratch && n_batch % 8 == 0) {
        if (wtype == GGML_TYPE_Q4_0)
            act8_rows(GGML_TYPE_Q4_0, w, w_row, n_in, n_out, xq, xq_row, ad, corr, n_batch, y, r0, r1, scratch);
        else
            act8_rows(GGML_TYPE_Q5_0, w, w_row, n_in, n_out, xq, xq_row, ad, corr, n_batch, y, r0, r1, scratch);
        return;
    }
    if (wtype != GGML_TYPE_Q8_0 && scratch && n_batch >= OMNI_X86_GEMM_AVX2_GROUP_MIN) {
        if (wtype == GGML_TYPE_Q4_0)
            group_rows(GGML_TYPE_Q4_0, w, w_row, n_in, n_out, xq, xq_row, ad, corr, n_batch, y, r0, r1, scratch);
        else
            group_rows(GGML_TYPE_Q5_0, w, w_row, n_in, n_out, xq, xq_row, ad, corr, n_batch, y, r0, r1, scratch);
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
