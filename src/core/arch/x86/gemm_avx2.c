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
 * From that many rows up (q8_0: 3, q4_0/q5_0: 2; the engine's decode) q8_0
 * turns the roles around: 8 activation rows are transposed once per call,
 * one lane per row, and each weight block, read in its row's own layout,
 * is broadcast a dword at a time into tiles of 4 weight rows x 8
 * activation rows ("act8"). q4_0/q5_0 there unpack and transpose 8 weight
 * rows per block in registers (one lane per weight row) and broadcast each
 * activation row's dwords from its own block ("wt8"), with act8's integers
 * and float steps. Either way the int32 block sum, the scale and the float
 * steps of a block serve 8 rows at once. */
#if defined(__x86_64__)

#pragma GCC target("avx2,fma,f16c")

#include "x86.h"

#include <immintrin.h>
#include <stddef.h>
#include <string.h>
#include "gemm_act8_inl.h"

#define TILE_R 2 /* weight rows per register tile */
/* An int32 read at any address (activation qs sit at offset 2 of a block). */
typedef int32_t i32u __attribute__((aligned(1), may_alias));
#define TILE_C 4 /* activation rows per register tile */

/* acc + the sums of 4 u8 x s8 products per dword. The AVX-VNNI twin of
 * this file (gemm_avxvnni.c) has VEX vpdpbusd for it; here vpmaddubsw +
 * vpmaddwd + vpaddd, whose int16 pair sums never saturate at the callers'
 * ranges (at most 2 * 127 * 128), so both give the same int32 and the same
 * bits. */
#ifdef __AVXVNNI__
#define DPBUSD(acc, u, s) _mm256_dpbusd_avx_epi32(acc, u, s)
#else
#define DPBUSD(acc, u, s) _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1)))
#endif
void omni_x86_gemm_q8_0_prep(int offset, const void *xq, size_t xq_row, int64_t n_batch,
                             int64_t n_in, float *ad, int32_t *corr)
{
    const int k8 = offset / 8;
    const int64_t nb = n_in / QK8_0, nbp = omni_x86_gemm_q8_0_blocks(n_in);
    for (int64_t b = 0; b < n_batch; b++) {
        const block_q8_0 *x = (const block_q8_0 *)((const uint8_t *)xq + (size_t)b * xq_row);
        /* the caller runs this alone between two parallel regions: the
         * block sums by vpmaddubsw, and none for q8_0 (K = 0) */
        for (int64_t i = 0; i < nb; i++) {
            int s = 0;
            if (k8) {
                const __m256i p = _mm256_maddubs_epi16(_mm256_set1_epi8(1),
                                                       _mm256_loadu_si256((const __m256i *)x[i].qs));
                __m128i v = _mm_add_epi16(_mm256_castsi256_si128(p), _mm256_extracti128_si256(p, 1));
                v = _mm_madd_epi16(v, _mm_set1_epi16(1));
                v = _mm_add_epi32(v, _mm_shuffle_epi32(v, 0x4e));
                v = _mm_add_epi32(v, _mm_shuffle_epi32(v, 0xb1));
                s = _mm_cvtsi128_si32(v);
            }
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
    (void)ones; /* unused by the AVX-VNNI twin */
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
#ifdef __AVXVNNI__
                const __m256i dot = DPBUSD(WT != GGML_TYPE_Q8_0 ? k0 : _mm256_setzero_si256(), wa[r], s);
#else
                __m256i dot = _mm256_madd_epi16(_mm256_maddubs_epi16(wa[r], s), ones);
                if (WT != GGML_TYPE_Q8_0)
                    dot = _mm256_add_epi32(dot, k0);
#endif
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

// ---- 8 activation rows interleaved (q8_0) ----------------------------------

/* q8_0 from ACT8_MIN_Q8_0 rows: 8 activation rows transposed once per call
 * (lane c of register k = dword k of row c's block), so each weight block
 * is read once, in its row's own layout, and its dwords broadcast. A
 * register tile is ACT8_R weight rows x the 8 activation rows: each
 * activation register loaded serves ACT8_R weight rows. Batches that are
 * not a multiple of 8 pad their last 8 with zero rows (their lanes are
 * dropped).
 *
 * The product of two signed bytes: vpmaddubsw wants one operand unsigned,
 * so the pack holds |a| and a mask m = (a < 0 ? 0xff : 0), and each
 * broadcast weight dword is xor-ed with m: |a| * (w ^ m) is a * w where a
 * >= 0 and (-a) * (-w - 1) = a * w + a where a < 0. The sum of a over
 * a block's negative activations (packed once per call) comes off the
 * block's int32 sum, which is then exactly sum(a * w), for every weight
 * including -128 (w ^ m stays a byte; pair sums reach 2 * 127 * 128, which
 * fits int16, so each vpmaddubsw is widened to int32 at once). On Zen 3
 * vpsignb, vpabsb, vpmaddubsw and vpmaddwd share two pipes while vpxor
 * takes any of four: the earlier forms (|w| times a with w's sign, or |a|
 * times w with a's sign) spent three of the two pipes' slots per 32
 * products, this one two (the output projection 151,936 x 896 at 8 rows,
 * one thread: see docs/benchmarks.md). One float step per block and pair
 * (acc += float(sum) * (d * a.d)), which differs from the 2 x 4 tiles' (8
 * partial lanes per pair), so q8_0's act8 range is a kernel id of its own;
 * the integers are those of the earlier act8 forms, so are the bits. a: nb
 * blocks of (8 registers of |a|, 8 scales, 8 x minus the sum of the
 * negative a, 8 registers of m). */
#define ACT8_BYTES (8 * 32 + 8 * 4 + 8 * 4 + 8 * 32)
#define ACT8_D 256   /* offset of the 8 rows' scales in a block */
#define ACT8_NEG 288 /* offset of minus the 8 rows' sums of negative a */
#define ACT8_M 320   /* offset of the sign masks */
#define ACT8_R 4 /* weight rows per register tile */
/* how far ahead the tiles prefetch, in weight rows (896-wide q8_0 rows:
 * 15 KB): the output projection at 8 rows, one thread, A B A B x 5, load
 * 5.6-6: 2.89-2.94 ms per activation row 8 rows ahead, 2.69-2.88 at 16 (12,
 * 24 and 32 measured between the two, noisily) */
#define ACT8_PF_ROWS 16
/* fewest batch rows that take the act8 kernel (q8_0) or the wt8 kernel
 * below (q4_0/q5_0): where a pass over 8 rows costs less than the 2 x 4
 * tiles over the batch (one thread, tests/bench_matmul.c, load 14-16: q8_0
 * 4096 x 896 tiles 0.60 / 0.73 ms for 5 / 6 rows against 0.69 for act8;
 * q4_0 4864 x 896 0.54 / 0.84 for 4 / 5 against 0.64; q5_0 0.84 for 4
 * against 0.78; measured with act8, whose bits wt8 keeps; q8_0 again
 * with the |a| form, load 2: 4096 x 896 at 5 rows 0.116 ms per row
 * against 0.120 for the tiles, at 4 rows 0.144 against 0.118). wt8 pads
 * weight rows, never activation rows, so it costs per activation row and
 * wins from 2 rows (load 2.7, ms per row, tiles -> wt8: q5_0 4864 x 896 at
 * 2 / 3 rows 0.27-0.31 / 0.22-0.25 -> 0.14 / 0.12, q4_0 at 2 / 3 / 4
 * 0.17 / 0.15 / 0.14 -> 0.11-0.12 / 0.09 / 0.08); the 2 x 4 tiles keep
 * q4_0/q5_0 only for a single row. q8_0 from 3 rows since the sixth pass
 * (act4 / act2 for passes of up to 4 / 2 rows; matmul.c keeps 2-row q8_0
 * batches on the per-row dots, see its gemm_range): read from memory (49,152 x
 * 1024 and 16,384 x 3072, one thread, ms per row) act8 padded from 4 rows
 * took 1.90 / 1.84 against the tiles' 2.36 / 2.08, act4 1.48 / 1.37; at 3
 * rows act4 1.74-1.96 / 1.66-1.83 against the tiles' 2.81 / 2.45 and the
 * per-row dots' 2.20 / 2.31; at 2 rows act2 2.17 / 2.06 against the dots'
 * 2.45 / 2.52 and the tiles' 3.73 / 3.25 */
#ifndef ACT8_MIN_Q8_0 /* overridable for a benchmark build */
#define ACT8_MIN_Q8_0 3
#endif
#define ACT8_MIN_Q4_0 2
#define ACT8_MIN_Q5_0 2

/* An empty asm that takes and gives back an accumulator register: GCC
 * may no longer regroup the integer sum across it. Unhinted, it turned
 * the unrolled tiles' 32 vpmaddwd per block into 32 temporaries summed as
 * a tree, most of them spilled to the stack and read back. The sum is
 * exact int32 either way (same bits). */
#define KEEP_CHAIN(v) __asm__("" : "+x"(v))

/* nb blocks of act8_transpose_block, its signed registers turned into |a|
 * and the masks, its (zero) q8_0 corrections into minus the sums of the
 * negative a. */
static void act8_pack(const uint8_t *xq, size_t xq_row, const float *ad, const int32_t *corr,
                      int nc, int64_t nb, int64_t nbp, uint8_t *a)
{
    const __m256i zero = _mm256_setzero_si256(), ones8 = _mm256_set1_epi8(1), ones16 = _mm256_set1_epi16(1);
    for (int64_t i = 0; i < nb; i++) {
        uint8_t *o = a + (size_t)i * ACT8_BYTES;
        __m256i r[8];
        act8_transpose_block(xq, xq_row, ad, corr, nc, i, nbp, o, r);
        __m256i neg = zero;
        for (int k = 0; k < 8; k++) {
            _mm256_storeu_si256((__m256i *)o + k, _mm256_abs_epi8(r[k]));
            _mm256_storeu_si256((__m256i *)(o + ACT8_M) + k, _mm256_cmpgt_epi8(zero, r[k]));
            /* the negative bytes of each dword, summed into it */
            const __m256i n = _mm256_maddubs_epi16(ones8, _mm256_min_epi8(r[k], zero));
            neg = _mm256_sub_epi32(neg, _mm256_madd_epi16(n, ones16));
        }
        _mm256_storeu_si256((__m256i *)(o + ACT8_NEG), neg);
    }
}

/* y[c * y_stride + r] (c < nc, r < NR) for NR q8_0 weight rows (row r at
 * w + r * w_row) against the packed activations. */
static inline __attribute__((always_inline)) void
act8_tile(const uint8_t *w, size_t w_row, int64_t nb, const uint8_t *a, float *y, size_t y_stride,
          int nc, const int NR)
{
    const __m256i ones = _mm256_set1_epi16(1);
    (void)ones; /* unused by the AVX-VNNI twin */
    __m256 acc[ACT8_R];
#pragma GCC unroll 4
    for (int r = 0; r < NR; r++)
        acc[r] = _mm256_setzero_ps();
    for (int64_t i = 0; i < nb; i++) {
        const uint8_t *A = a + (size_t)i * ACT8_BYTES;
        __m256i dot[ACT8_R];
        float d[ACT8_R];
        const int8_t *q[ACT8_R];
        /* the same bytes ACT8_PF_ROWS rows on, a line at a time: one
         * burst of prefetches per 8 rows stalled on the fill buffers (5% of
         * an 8-sequence decode's samples sat on that loop; the 151,936-row
         * output projection 4.13 -> 3.31 ms per activation row) */
        if (((size_t)i * sizeof(block_q8_0) & 63) < sizeof(block_q8_0)) {
#pragma GCC unroll 4
            for (int r = 0; r < NR; r++)
                _mm_prefetch((const char *)((const block_q8_0 *)(w + (size_t)(r + ACT8_PF_ROWS) * w_row) + i) + 64,
                             _MM_HINT_T0);
        }
        /* the sums start at minus the block's negative a */
        const __m256i neg = _mm256_loadu_si256((const __m256i *)(A + ACT8_NEG));
#pragma GCC unroll 4
        for (int r = 0; r < NR; r++) {
            const block_q8_0 *x = (const block_q8_0 *)(w + (size_t)r * w_row) + i;
            q[r] = x->qs;
            d[r] = _cvtsh_ss(x->d);
            dot[r] = neg;
        }
#pragma GCC unroll 8
        for (int k = 0; k < 8; k++) {
            const __m256i aa = _mm256_loadu_si256((const __m256i *)A + k);
            const __m256i m = _mm256_loadu_si256((const __m256i *)(A + ACT8_M) + k);
#pragma GCC unroll 4
            for (int r = 0; r < NR; r++) {
                const __m256i wb = _mm256_set1_epi32(*(const i32u *)(q[r] + 4 * k));
#ifdef __AVXVNNI__
                dot[r] = DPBUSD(dot[r], aa, _mm256_xor_si256(wb, m));
#else
                const __m256i p = _mm256_maddubs_epi16(aa, _mm256_xor_si256(wb, m));
                dot[r] = _mm256_add_epi32(dot[r], _mm256_madd_epi16(p, ones));
#endif
                KEEP_CHAIN(dot[r]);
            }
        }
        const __m256 da = _mm256_loadu_ps((const float *)(A + ACT8_D));
#pragma GCC unroll 4
        for (int r = 0; r < NR; r++)
            acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot[r]),
                                     _mm256_mul_ps(_mm256_set1_ps(d[r]), da), acc[r]);
    }
    for (int r = 0; r < NR; r++) {
        float out[8];
        _mm256_storeu_ps(out, acc[r]);
        for (int c = 0; c < nc; c++)
            y[(size_t)c * y_stride + r] = out[c];
    }
}

#define ACT8_CASE(nr)                                                                           \
    case nr: act8_tile(wr, w_row, nb, a, yr, y_stride, nc, nr); break

static void act8_q8_0(const uint8_t *wr, size_t w_row, int64_t nb, const uint8_t *a, float *yr,
                      size_t y_stride, int nc, int nr)
{
    switch (nr) {
        ACT8_CASE(1); ACT8_CASE(2); ACT8_CASE(3); default:
        act8_tile(wr, w_row, nb, a, yr, y_stride, nc, ACT8_R);
        break;
    }
}

/* A pass of at most 4 activation rows (4-7 rows' batches left to act8
 * padded half their lanes): lane c of the low half is row c's dword k, of
 * the high half its dword k + 4, so the weight block, loaded as it is,
 * gives both halves' dwords by one vpshufd and a block takes 4 products
 * per weight row instead of 8. The halves' int32 sums are added before
 * the float step, so every row gets act8's integer and float steps: its
 * bits. act2, a pass of 1-2 rows, the same with lanes (row 0, row 1) x
 * dwords k, k + 2, k + 4, k + 6: 2 products per weight row and block. a:
 * nb blocks of (4 (act2: 2) registers of |a|, as many of the masks, minus
 * the sums of the negative a (rows 0-3 / 0-1, zero above), 8 scales). */
#define ACT4_BYTES (4 * 32 + 4 * 32 + 32 + 32)
#ifndef ACT4_MAX_ROWS /* overridable for a benchmark build (0: act8 only) */
#define ACT4_MAX_ROWS 4
#endif
#ifndef ACT2_MAX_ROWS /* passes of this many rows or fewer take act2 (0: none) */
#define ACT2_MAX_ROWS 2
#endif
#define ACT4_M 128
#define ACT4_NEG 256
#define ACT4_D 288

static inline __attribute__((always_inline)) void
act4_pack(const uint8_t *xq, size_t xq_row, const float *ad, const int32_t *corr, int nc, int64_t nb,
          int64_t nbp, uint8_t *a, const int G)
{
    const __m256i zero = _mm256_setzero_si256(), ones8 = _mm256_set1_epi8(1), ones16 = _mm256_set1_epi16(1);
    uint8_t t[ACT8_M] __attribute__((aligned(32))); /* the registers, scales and corrections */
    for (int64_t i = 0; i < nb; i++) {
        uint8_t *o = a + (size_t)i * ACT4_BYTES;
        __m256i r[8];
        act8_transpose_block(xq, xq_row, ad, corr, nc, i, nbp, t, r);
        __m256i neg = zero;
        for (int k = 0; k < G; k++) {
            /* rows nc.. are zero: only lanes 0-3 (0-1) of r[] count */
            const __m256i v = G == 4 ? _mm256_permute2x128_si256(r[k], r[k + 4], 0x20)
                                     : _mm256_permute2x128_si256(_mm256_unpacklo_epi64(r[k], r[k + 2]),
                                                                 _mm256_unpacklo_epi64(r[k + 4], r[k + 6]), 0x20);
            _mm256_storeu_si256((__m256i *)o + k, _mm256_abs_epi8(v));
            _mm256_storeu_si256((__m256i *)(o + ACT4_M) + k, _mm256_cmpgt_epi8(zero, v));
            const __m256i n = _mm256_maddubs_epi16(ones8, _mm256_min_epi8(v, zero));
            neg = _mm256_sub_epi32(neg, _mm256_madd_epi16(n, ones16));
        }
        /* lanes 4-7 hold the dwords k + 4 of rows 0-3: their sums of
         * negative a to lanes 0-3, zero above */
        neg = _mm256_add_epi32(neg, _mm256_permute2x128_si256(neg, neg, 0x01));
        if (G == 4)
            neg = _mm256_permute2x128_si256(neg, neg, 0x80);
        else /* act2: lanes 0-1 = rows 0-1, 2-3 their other dwords */
            neg = _mm256_blend_epi32(zero, _mm256_add_epi32(neg, _mm256_shuffle_epi32(neg, 0x4e)), 0x03);
        _mm256_storeu_si256((__m256i *)(o + ACT4_NEG), neg);
        memcpy(o + ACT4_D, t + ACT8_D, 32);
        if (G == 4) /* rows 0-3's scales in both halves: act4_tile's float
                     * step takes two weight rows a register */
            memcpy(o + ACT4_D + 16, t + ACT8_D, 16);
    }
}

/* y[c * y_stride + r] (c < nc <= 4 (G 4) or 2 (G 2), r < NR) for NR q8_0
 * weight rows. */
static inline __attribute__((always_inline)) void
act4_tile(const uint8_t *w, size_t w_row, int64_t nb, const uint8_t *a, float *y, size_t y_stride,
          int nc, const int NR, const int G)
{
    const __m256i ones = _mm256_set1_epi16(1);
    (void)ones; /* unused by the AVX-VNNI twin */
    /* G 4: acc[p] lanes 0-3 = weight row 2p, 4-7 = row 2p + 1 (an odd NR's
     * last row twice); G 2: acc[r] lanes 0-1 = weight row r */
    const int NA = G == 4 ? (NR + 1) / 2 : NR;
    __m256 acc[ACT8_R];
#pragma GCC unroll 4
    for (int r = 0; r < NA; r++)
        acc[r] = _mm256_setzero_ps();
    for (int64_t i = 0; i < nb; i++) {
        const uint8_t *A = a + (size_t)i * ACT4_BYTES;
        __m256i dot[ACT8_R], W[ACT8_R];
        uint16_t dh[ACT8_R];
        float d[ACT8_R];
        if (((size_t)i * sizeof(block_q8_0) & 63) < sizeof(block_q8_0)) {
#pragma GCC unroll 4
            for (int r = 0; r < NR; r++)
                _mm_prefetch((const char *)((const block_q8_0 *)(w + (size_t)(r + ACT8_PF_ROWS) * w_row) + i) + 64,
                             _MM_HINT_T0);
        }
        const __m256i neg = _mm256_loadu_si256((const __m256i *)(A + ACT4_NEG));
#pragma GCC unroll 4
        for (int r = 0; r < NR; r++) {
            const block_q8_0 *x = (const block_q8_0 *)(w + (size_t)r * w_row) + i;
            W[r] = _mm256_loadu_si256((const __m256i *)x->qs);
            if (G == 4)
                dh[r] = x->d;
            else
                d[r] = _cvtsh_ss(x->d);
            dot[r] = neg;
        }
#pragma GCC unroll 4
        for (int k = 0; k < G; k++) {
            const __m256i aa = _mm256_loadu_si256((const __m256i *)A + k);
            const __m256i m = _mm256_loadu_si256((const __m256i *)(A + ACT4_M) + k);
#pragma GCC unroll 4
            for (int r = 0; r < NR; r++) {
                /* G 4: dword k to the low half's lanes, k + 4 to the high
                 * half's; G 2: dwords k, k, k + 2, k + 2 and 4 on */
                __m256i wb;
                switch (G * 4 + k) {
                case 16: wb = _mm256_shuffle_epi32(W[r], 0x00); break;
                case 17: wb = _mm256_shuffle_epi32(W[r], 0x55); break;
                case 18: wb = _mm256_shuffle_epi32(W[r], 0xaa); break;
                case 19: wb = _mm256_shuffle_epi32(W[r], 0xff); break;
                case 8: wb = _mm256_shuffle_epi32(W[r], 0xa0); break;
                default: wb = _mm256_shuffle_epi32(W[r], 0xf5); break;
                }
#ifdef __AVXVNNI__
                dot[r] = DPBUSD(dot[r], aa, _mm256_xor_si256(wb, m));
#else
                const __m256i p = _mm256_maddubs_epi16(aa, _mm256_xor_si256(wb, m));
                dot[r] = _mm256_add_epi32(dot[r], _mm256_madd_epi16(p, ones));
#endif
                KEEP_CHAIN(dot[r]);
            }
        }
        const __m256 da = _mm256_loadu_ps((const float *)(A + ACT4_D));
        if (G == 4) {
            /* the weight rows' 4 scales converted at once, two rows a
             * register: (row 2p x 4, row 2p + 1 x 4) */
            const __m128 d4 = _mm_cvtph_ps(_mm_setr_epi16((short)dh[0], (short)dh[NR > 1 ? 1 : 0],
                                                          (short)dh[NR > 2 ? 2 : 0], (short)dh[NR > 3 ? 3 : 0],
                                                          0, 0, 0, 0));
#pragma GCC unroll 2
            for (int q = 0; q < NA; q++) {
                const int ra = 2 * q, rb = 2 * q + 1 < NR ? 2 * q + 1 : 2 * q;
                const __m256i s = _mm256_add_epi32(_mm256_permute2x128_si256(dot[ra], dot[rb], 0x20),
                                                   _mm256_permute2x128_si256(dot[ra], dot[rb], 0x31));
                const __m256 dd = _mm256_permutevar8x32_ps(_mm256_castps128_ps256(d4),
                                                           _mm256_setr_epi32(ra, ra, ra, ra, rb, rb, rb, rb));
                acc[q] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), _mm256_mul_ps(dd, da), acc[q]);
            }
            continue;
        }
#pragma GCC unroll 4
        for (int r = 0; r < NR; r++) {
            __m256i s = _mm256_add_epi32(dot[r], _mm256_permute2x128_si256(dot[r], dot[r], 0x01));
            if (G == 2)
                s = _mm256_add_epi32(s, _mm256_shuffle_epi32(s, 0x4e));
            acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), _mm256_mul_ps(_mm256_set1_ps(d[r]), da), acc[r]);
        }
    }
    for (int r = 0; r < NR; r++) {
        float out[8];
        _mm256_storeu_ps(out, acc[G == 4 ? r / 2 : r]);
        for (int c = 0; c < nc; c++)
            y[(size_t)c * y_stride + r] = out[(G == 4 ? (r & 1) * 4 : 0) + c];
    }
}

#define ACT4_CASE(nr, G)                                                                        \
    case nr: act4_tile(wr, w_row, nb, a, yr, y_stride, nc, nr, G); break

static void act4_q8_0(const uint8_t *wr, size_t w_row, int64_t nb, const uint8_t *a, float *yr,
                      size_t y_stride, int nc, int nr)
{
    switch (nr) {
        ACT4_CASE(1, 4); ACT4_CASE(2, 4); ACT4_CASE(3, 4); default:
        act4_tile(wr, w_row, nb, a, yr, y_stride, nc, ACT8_R, 4);
        break;
    }
}

static void act2_q8_0(const uint8_t *wr, size_t w_row, int64_t nb, const uint8_t *a, float *yr,
                      size_t y_stride, int nc, int nr)
{
    switch (nr) {
        ACT4_CASE(1, 2); ACT4_CASE(2, 2); ACT4_CASE(3, 2); default:
        act4_tile(wr, w_row, nb, a, yr, y_stride, nc, ACT8_R, 2);
        break;
    }
}

static void act8_rows(const uint8_t *w, size_t w_row, int64_t n_in, int64_t n_out, const uint8_t *xq,
                      size_t xq_row, const float *ad, const int32_t *corr, int64_t n_batch, float *y,
                      int64_t r0, int64_t r1, uint8_t *a)
{
    const int64_t nb = n_in / QK8_0, nbp = omni_x86_gemm_q8_0_blocks(n_in);
    for (int64_t c = 0; c < n_batch; c += 8) {
        const int nc = n_batch - c < 8 ? (int)(n_batch - c) : 8;
        if (nc <= ACT4_MAX_ROWS) {
            const int two = nc <= ACT2_MAX_ROWS;
            if (two)
                act4_pack(xq + (size_t)c * xq_row, xq_row, ad + c * nbp, corr + c * nbp, nc, nb, nbp, a, 2);
            else
                act4_pack(xq + (size_t)c * xq_row, xq_row, ad + c * nbp, corr + c * nbp, nc, nb, nbp, a, 4);
            for (int64_t r = r0; r < r1; r += ACT8_R) {
                const int nr = r1 - r < ACT8_R ? (int)(r1 - r) : ACT8_R;
                (two ? act2_q8_0 : act4_q8_0)(w + (size_t)r * w_row, w_row, nb, a, y + c * n_out + r,
                                              (size_t)n_out, nc, nr);
            }
            continue;
        }
        act8_pack(xq + (size_t)c * xq_row, xq_row, ad + c * nbp, corr + c * nbp, nc, nb, nbp, a);
        for (int64_t r = r0; r < r1; r += ACT8_R) {
            const int nr = r1 - r < ACT8_R ? (int)(r1 - r) : ACT8_R;
            act8_q8_0(w + (size_t)r * w_row, w_row, nb, a, y + c * n_out + r, (size_t)n_out, nc, nr);
        }
    }
}

// ---- 8 weight rows interleaved (q4_0, q5_0) ----------------------------------

/* The act8 range of q4_0/q5_0 with the roles turned back: per block, 8
 * weight rows are unpacked and transposed in registers (lane r of W[k] =
 * elements 4k..4k+3 of weight row r), and each activation row's dwords are
 * broadcast straight from its Q8_0 block (a load, no shuffle), so a
 * vpmaddubsw costs one add beside it instead of a vpshufd and an add, and
 * the unpacking of a weight block serves every activation row of the pass
 * (act8 unpacked 4 rows per tile and broadcast each dword by vpshufd:
 * about 5.5 vector ops per vpmaddubsw against 4 here). Per (weight row,
 * activation row) the integer block sum and the float step (acc +=
 * float(sum + K * sum(a)) * (d * a.d)) are act8's, so the bits are too
 * (the kernel id does not change). A remainder of fewer than 8 weight rows
 * repeats its first row in the missing lanes (dropped on store). */
#define WT8_C 16 /* activation rows per pass over a group of 8 weight rows */
#ifndef WT8_PF_ROWS
#define WT8_PF_ROWS 16 /* how far ahead wt8_group prefetches, in weight rows */
#endif

static inline __m256i load_2x128(const uint8_t *lo, const uint8_t *hi)
{
    return _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)lo)),
                                   _mm_loadu_si128((const __m128i *)hi), 1);
}

static inline uint32_t load_u32(const uint8_t *p)
{
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}

/* The blocks at b[0..7] (one per weight row): W[k] lane r = unsigned
 * elements 4k..4k+3 of b[r] (q4_0: 0..15, q5_0: 0..31); *dw lane r = its
 * scale. */
static inline __attribute__((always_inline)) void
wt8_unpack(const int WT, const uint8_t *const b[8], __m256i W[8], __m256 *dw)
{
    const size_t qs_at = WT == GGML_TYPE_Q4_0 ? offsetof(block_q4_0, qs) : offsetof(block_q5_0, qs);
    /* rows r and r + 4 in the two halves, then a 4 x 4 dword transpose per
     * half: T[m] lane r = qs dword m of row r (low nibbles: elements 4m..,
     * high nibbles: 16 + 4m..) */
    const __m256i L0 = load_2x128(b[0] + qs_at, b[4] + qs_at), L1 = load_2x128(b[1] + qs_at, b[5] + qs_at);
    const __m256i L2 = load_2x128(b[2] + qs_at, b[6] + qs_at), L3 = load_2x128(b[3] + qs_at, b[7] + qs_at);
    const __m256i t0 = _mm256_unpacklo_epi32(L0, L1), t1 = _mm256_unpackhi_epi32(L0, L1);
    const __m256i t2 = _mm256_unpacklo_epi32(L2, L3), t3 = _mm256_unpackhi_epi32(L2, L3);
    const __m256i T0 = _mm256_unpacklo_epi64(t0, t2), T1 = _mm256_unpackhi_epi64(t0, t2);
    const __m256i T2 = _mm256_unpacklo_epi64(t1, t3), T3 = _mm256_unpackhi_epi64(t1, t3);
    const __m256i m4 = _mm256_set1_epi8(0x0f);
    W[0] = _mm256_and_si256(T0, m4);
    W[1] = _mm256_and_si256(T1, m4);
    W[2] = _mm256_and_si256(T2, m4);
    W[3] = _mm256_and_si256(T3, m4);
    W[4] = _mm256_and_si256(_mm256_srli_epi16(T0, 4), m4);
    W[5] = _mm256_and_si256(_mm256_srli_epi16(T1, 4), m4);
    W[6] = _mm256_and_si256(_mm256_srli_epi16(T2, 4), m4);
    W[7] = _mm256_and_si256(_mm256_srli_epi16(T3, 4), m4);
    /* d is the first field of both block types; Q lane r = row r's qh.
     * Scalar loads and inserts measured faster than two vpgatherdd (0.089
     * against 0.076 ms per row, q5_0 896 x 4864 at 8 rows), than 16-byte
     * loads of the block starts paired by vpunpcklqdq and sorted by vpshufb
     * (0.077), and for d than dword inserts + vpshufb + vpermq (q4_0 4864
     * x 896: 0.064-0.065 against 0.067-0.069) */
#define U32(r, at) (int)load_u32(b[r] + (at))
    const size_t h = offsetof(block_q5_0, qh);
    const __m256i Q = WT == GGML_TYPE_Q5_0 ? _mm256_setr_epi32(U32(0, h), U32(1, h), U32(2, h), U32(3, h), U32(4, h),
                                                               U32(5, h), U32(6, h), U32(7, h))
                                           : _mm256_setzero_si256();
#undef U32
#define D16(r) (short)*(const uint16_t *)b[r]
    *dw = _mm256_cvtph_ps(_mm_setr_epi16(D16(0), D16(1), D16(2), D16(3), D16(4), D16(5), D16(6), D16(7)));
#undef D16
    if (WT == GGML_TYPE_Q5_0) {
        /* bit 4k + b of row r's qh is the 0x10 of byte b of W[k] lane r
         * (k = 0..7): byte k/2 of qh to the 4 bytes of each lane, one
         * shuffle for W[k] and W[k + 1] (k even); bit b kept for W[k]
         * (one-hot 0, 1, 2, 4 or 8, which a table lookup turns into 0x10
         * or 0), bit 4 + b for W[k + 1] (0, 0x10, ..., 0x80: vpminub with
         * 0x10). 28 ops per block for the 8 registers instead of 35 (a
         * shuffle each and the qh nibbles split first). */
        const __m256i lo_bits = _mm256_set1_epi32(0x08040201), hi_bits = _mm256_set1_epi32((int)0x80402010u);
        const __m256i b5 = _mm256_set1_epi8(0x10);
        const __m256i to10 = _mm256_setr_epi8(0, 0x10, 0x10, 0, 0x10, 0, 0, 0, 0x10, 0, 0, 0, 0, 0, 0, 0, 0, 0x10,
                                              0x10, 0, 0x10, 0, 0, 0, 0x10, 0, 0, 0, 0, 0, 0, 0);
#pragma GCC unroll 4
        for (int k = 0; k < 8; k += 2) {
            const __m256i sh = _mm256_add_epi8(_mm256_setr_epi8(0, 0, 0, 0, 4, 4, 4, 4, 8, 8, 8, 8, 12, 12, 12, 12, 0, 0,
                                                                0, 0, 4, 4, 4, 4, 8, 8, 8, 8, 12, 12, 12, 12),
                                               _mm256_set1_epi8((char)(k / 2)));
            const __m256i x = _mm256_shuffle_epi8(Q, sh);
            W[k] = _mm256_or_si256(W[k], _mm256_shuffle_epi8(to10, _mm256_and_si256(x, lo_bits)));
            W[k + 1] = _mm256_or_si256(W[k + 1], _mm256_min_epu8(_mm256_and_si256(x, hi_bits), b5));
        }
    }
}

/* y[c * y_stride + r] (r < nr <= 8, c < nc <= WT8_C). Each vpmaddubsw
 * takes one activation broadcast (on this Zen 3 a vpbroadcastd from memory
 * takes a vector pipe as a vpshufd does: 0.235 against 0.176 ns per
 * vpmaddubsw + vpaddw without it); sharing a broadcast between two groups
 * of 8 weight rows measured slower (register spills). */
static inline __attribute__((always_inline)) void
wt8_group(const int WT, const uint8_t *w, size_t w_row, int nr, int64_t nb, int64_t nbp,
          const uint8_t *xq, size_t xq_row, const float *ad, const int32_t *corr, const int CSH, int nc,
          float *y, size_t y_stride)
{
    const size_t bs = WT == GGML_TYPE_Q4_0 ? sizeof(block_q4_0) : sizeof(block_q5_0);
    const __m256i ones = _mm256_set1_epi16(1);
    (void)ones; /* unused by the AVX-VNNI twin */
    /* block i of row r at b[r]; missing rows repeat row 0 */
    const uint8_t *b[8];
#pragma GCC unroll 8
    for (int r = 0; r < 8; r++)
        b[r] = w + (r < nr ? (size_t)r * w_row : 0);
    __m256 acc[WT8_C];
#pragma GCC unroll 16
    for (int c = 0; c < WT8_C; c++)
        acc[c] = _mm256_setzero_ps();
    for (int64_t i = 0; i < nb; i++) {
        __m256i W[8];
        __m256 dw;
        wt8_unpack(WT, b, W, &dw);
        /* the same bytes WT8_PF_ROWS rows on, a line at a time (as in
         * act8_tile: a burst per group measured slower) */
        if (((size_t)i * bs & 63) < bs) {
#pragma GCC unroll 8
            for (int r = 0; r < 8; r++)
                _mm_prefetch((const char *)b[r] + WT8_PF_ROWS * w_row + 64, _MM_HINT_T0);
        }
#pragma GCC unroll 8
        for (int r = 0; r < 8; r++)
            b[r] += bs;
        const uint8_t *xa = xq + (size_t)i * sizeof(block_q8_0) + offsetof(block_q8_0, qs);
        for (int c = 0; c < nc; c++, xa += xq_row) {
            const i32u *aq = (const i32u *)xa;
            /* corr times 8 (one per lane), or already so (CSH 0) */
            const __m256i k = _mm256_set1_epi32(corr[c * nbp + i]);
            __m256i dot;
#ifdef __AVXVNNI__
            /* straight into int32, from the correction on: two chains */
            __m256i d0 = CSH ? _mm256_slli_epi32(k, CSH) : k, d1 = _mm256_setzero_si256();
#pragma GCC unroll 4
            for (int j = 0; j < 4; j++) {
                d0 = DPBUSD(d0, W[j], _mm256_set1_epi32(aq[j]));
                d1 = DPBUSD(d1, W[j + 4], _mm256_set1_epi32(aq[j + 4]));
            }
            dot = _mm256_add_epi32(d0, d1);
#else
            if (WT == GGML_TYPE_Q4_0) {
                /* 8 pair sums of at most 2 * 15 * 127 fit int16 */
                __m256i s = _mm256_maddubs_epi16(W[0], _mm256_set1_epi32(aq[0]));
#pragma GCC unroll 8
                for (int k = 1; k < 8; k++)
                    s = _mm256_add_epi16(s, _mm256_maddubs_epi16(W[k], _mm256_set1_epi32(aq[k])));
                dot = _mm256_madd_epi16(s, ones);
            } else {
                /* q5_0: 4 of 2 * 31 * 127 */
                __m256i s0 = _mm256_maddubs_epi16(W[0], _mm256_set1_epi32(aq[0]));
                __m256i s1 = _mm256_maddubs_epi16(W[4], _mm256_set1_epi32(aq[4]));
#pragma GCC unroll 4
                for (int k = 1; k < 4; k++) {
                    s0 = _mm256_add_epi16(s0, _mm256_maddubs_epi16(W[k], _mm256_set1_epi32(aq[k])));
                    s1 = _mm256_add_epi16(s1, _mm256_maddubs_epi16(W[k + 4], _mm256_set1_epi32(aq[k + 4])));
                }
                dot = _mm256_add_epi32(_mm256_madd_epi16(s0, ones), _mm256_madd_epi16(s1, ones));
            }
            dot = _mm256_add_epi32(dot, CSH ? _mm256_slli_epi32(k, CSH) : k);
#endif
            acc[c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), _mm256_mul_ps(dw, _mm256_set1_ps(ad[c * nbp + i])),
                                     acc[c]);
        }
    }
    if (nr == 8) {
        for (int c = 0; c < nc; c++)
            _mm256_storeu_ps(y + (size_t)c * y_stride, acc[c]);
        return;
    }
    for (int c = 0; c < nc; c++) {
        float out[8];
        _mm256_storeu_ps(out, acc[c]);
        for (int r = 0; r < nr; r++)
            y[(size_t)c * y_stride + r] = out[r];
    }
}

static void wt8_q4_0(const uint8_t *w, size_t w_row, int nr, int64_t nb, int64_t nbp, const uint8_t *xq,
                     size_t xq_row, const float *ad, const int32_t *corr, const int32_t *c8, int nc, float *y,
                     size_t y_stride)
{
    if (c8)
        wt8_group(GGML_TYPE_Q4_0, w, w_row, nr, nb, nbp, xq, xq_row, ad, c8, 0, nc, y, y_stride);
    else
        wt8_group(GGML_TYPE_Q4_0, w, w_row, nr, nb, nbp, xq, xq_row, ad, corr, 3, nc, y, y_stride);
}

static void wt8_q5_0(const uint8_t *w, size_t w_row, int nr, int64_t nb, int64_t nbp, const uint8_t *xq,
                     size_t xq_row, const float *ad, const int32_t *corr, const int32_t *c8, int nc, float *y,
                     size_t y_stride)
{
    if (c8)
        wt8_group(GGML_TYPE_Q5_0, w, w_row, nr, nb, nbp, xq, xq_row, ad, c8, 0, nc, y, y_stride);
    else
        wt8_group(GGML_TYPE_Q5_0, w, w_row, nr, nb, nbp, xq, xq_row, ad, corr, 3, nc, y, y_stride);
}

static void wt8_rows(int wtype, const uint8_t *w, size_t w_row, int64_t n_in, int64_t n_out,
                     const uint8_t *xq, size_t xq_row, const float *ad, const int32_t *corr,
                     int64_t n_batch, float *y, int64_t r0, int64_t r1, int32_t *c8)
{
    const int64_t nb = n_in / QK8_0, nbp = omni_x86_gemm_q8_0_blocks(n_in);
    for (int64_t c = 0; c < n_batch; c += WT8_C) {
        const int nc = n_batch - c < WT8_C ? (int)(n_batch - c) : WT8_C;
        /* the pass's corrections times 8 once, not a vpslld per row and
         * block */
        if (c8)
            for (int64_t k = 0; k < nc * nbp; k++)
                c8[k] = corr[c * nbp + k] * 8;
        for (int64_t r = r0; r < r1; r += 8) {
            const int nr = r1 - r < 8 ? (int)(r1 - r) : 8;
            (wtype == GGML_TYPE_Q4_0 ? wt8_q4_0 : wt8_q5_0)(w + (size_t)r * w_row, w_row, nr, nb, nbp,
                                                           xq + (size_t)c * xq_row, xq_row, ad + c * nbp,
                                                           corr + c * nbp, c8, nc, y + c * n_out + r,
                                                           (size_t)n_out);
        }
    }
}

size_t omni_x86_gemm_q8_0_avx2_scratch(int64_t n_in)
{
    /* act8's packed blocks, or wt8's corrections of a pass */
    const size_t a = (size_t)(n_in / QK8_0) * ACT8_BYTES, c = (size_t)WT8_C * omni_x86_gemm_q8_0_blocks(n_in) * 4;
    return a > c ? a : c;
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
    if (n_batch >= omni_x86_gemm_act8_min_avx2(wtype) && wtype != GGML_TYPE_Q8_0) {
        wt8_rows(wtype, w, w_row, n_in, n_out, xq, xq_row, ad, corr, n_batch, y, r0, r1, scratch);
        return;
    }
    if (scratch && n_batch >= omni_x86_gemm_act8_min_avx2(wtype)) {
        act8_rows(w, w_row, n_in, n_out, xq, xq_row, ad, corr, n_batch, y, r0, r1, scratch);
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
