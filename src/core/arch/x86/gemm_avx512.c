/* gemm_avx512.c - int8 GEMM for batches of the weight types whose dot type
 * is Q8_0 (q8_0, q4_0, q5_0), AVX-512 VNNI.
 *
 * The per-row dot kernels re-read every weight block once per activation
 * row; here each weight block is unpacked once per pass of up to 8
 * activation rows. Weights become unsigned bytes u = q + K (K = 128, 8, 16
 * for q8_0, q4_0, q5_0) so that vpdpbusd (u8 x s8) takes them as they are;
 * each (weight row, activation row) pair's int32 block sum starts at
 * 8 x corr = -K * sum(a), which removes the offset exactly, and then takes
 * acc = fma(float(sum), d_w * d_a, acc) block after block: gemm_avx2.c's
 * act8 integers and float steps, so a result depends only on its two rows,
 * never on the rest of the batch, and both levels give the same bits.
 *
 * Two forms: wt16 (up to OMNI_X86_WT16_MAX rows, the engine's decode of
 * several sequences) puts 16 weight rows in the lanes of a 512-bit register
 * and broadcasts activation dwords; act8 (larger batches, and shapes wt16
 * does not take) puts 8 activation rows in the lanes of a 256-bit register,
 * transposed once per call, and broadcasts weight dwords. */
#if defined(__x86_64__)

#pragma GCC target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512vnni")

#include "x86.h"

#include <immintrin.h>
#include <stddef.h>
#include <string.h>
#include "gemm_act8_inl.h"

int omni_x86_gemm_q8_0_offset_avx512(int wtype)
{
    switch (wtype) {
    case GGML_TYPE_Q8_0: return 128;
    case GGML_TYPE_Q4_0: return 8;
    case GGML_TYPE_Q5_0: return 16;
    default: return -1;
    }
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

// ---- 16 weight rows in the lanes of a 512-bit register ----------------------

/* Batches of up to OMNI_X86_WT16_MAX rows (the engine's 2-16 sequence
 * decode): per block, 16 weight rows are loaded as they lie in the GGUF file
 * and transposed in registers so that lane L of W[k] holds dword k of row
 * L's unsigned bytes u = q + K; each activation row's dword k is then one
 * broadcast operand of a vpdpbusd that serves all 16 weight rows. No weight
 * pack, no horizontal sums: per activation row and block 8 vpdpbusd, a
 * convert, a multiply and an FMA for 512 multiply-adds. The activations of a
 * pass of 8 rows are packed once per call block by block (qs, 8 x corr,
 * scales), so every operand is a fixed offset from one pointer. The int32
 * block sums start at 8 x corr as act8's do and the float steps are act8's,
 * so every row has act8's bits. */
#ifndef OMNI_X86_WT16_MAX
#define OMNI_X86_WT16_MAX 31
#endif
#define WT16_C 8             /* activation rows per pass (8 block sums + 8 float sums live) */
#define WT16_MAX_BLOCKS 512  /* rows of up to 16384: a pass's pack on the stack (160 KB) */
#define WT16_ROWS_CHUNK 256  /* batches of several passes: weight rows per round of passes (in L2) */
#define WT16_A 320           /* packed bytes per block: 8 x 32 qs, 8 x corr at 256, 8 scales at 288 */

/* The 16 bytes at offset o of 16 rows (row r at p + r * w_row) as z[d],
 * 128-bit lane L = row 4L + d: a 4 x 4 dword transpose in each lane then
 * leaves lane 4L + d = row 4L + d. */
static inline __attribute__((always_inline)) void
rows16_xmm(const uint8_t *p, size_t w_row, size_t o, __m512i z[4])
{
    const size_t s4 = 4 * w_row;
#pragma GCC unroll 4
    for (int d = 0; d < 4; d++) {
        const uint8_t *r = p + d * w_row + o;
        __m512i v = _mm512_castsi128_si512(_mm_loadu_si128((const __m128i *)r));
        v = _mm512_inserti32x4(v, _mm_loadu_si128((const __m128i *)(r + s4)), 1);
        v = _mm512_inserti32x4(v, _mm_loadu_si128((const __m128i *)(r + 2 * s4)), 2);
        z[d] = _mm512_inserti32x4(v, _mm_loadu_si128((const __m128i *)(r + 3 * s4)), 3);
    }
}

/* Block i's 16 weight rows (row r at p + r * w_row, p = row 0's block i) as
 * W[0..7] and their 16 scales. */
static inline __attribute__((always_inline)) void
wt16_unpack(const int WT, const uint8_t *p, size_t w_row, __m512i *W, __m512 *wd)
{
    /* the first 2 dwords of each row's block: d, then q5_0's qh in the
     * 16 bits after it and the 16 of dword 1 */
    __m512i h0, h1;
    {
        __m512i z[4];
        rows16_xmm(p, w_row, 0, z);
        const __m512i t0 = _mm512_unpacklo_epi32(z[0], z[1]), t2 = _mm512_unpacklo_epi32(z[2], z[3]);
        h0 = _mm512_unpacklo_epi64(t0, t2);
        h1 = _mm512_unpackhi_epi64(t0, t2);
    }
    const uint8_t *p1 = p + w_row, *p2 = p + 2 * w_row, *p3 = p + 3 * w_row;
    const uint8_t *const q[4] = { p, p1, p2, p3 };
    const size_t s4 = 4 * w_row;
    if (WT == GGML_TYPE_Q8_0) {
        /* z[c]: row c in the low half, row c + 8 in the high half; an 8 x 8
         * dword transpose in each half leaves lane L = row L */
        __m512i z[8], t[8], u[8];
#pragma GCC unroll 8
        for (int c = 0; c < 8; c++) {
            const uint8_t *r = q[c & 3] + (c >= 4 ? s4 : 0) + offsetof(block_q8_0, qs);
            z[c] = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)r)),
                                      _mm256_loadu_si256((const __m256i *)(r + 2 * s4)), 1);
        }
#pragma GCC unroll 4
        for (int k = 0; k < 4; k++) {
            t[2 * k] = _mm512_unpacklo_epi32(z[2 * k], z[2 * k + 1]);
            t[2 * k + 1] = _mm512_unpackhi_epi32(z[2 * k], z[2 * k + 1]);
        }
#pragma GCC unroll 2
        for (int k = 0; k < 2; k++) {
            u[4 * k] = _mm512_unpacklo_epi64(t[4 * k], t[4 * k + 2]);
            u[4 * k + 1] = _mm512_unpackhi_epi64(t[4 * k], t[4 * k + 2]);
            u[4 * k + 2] = _mm512_unpacklo_epi64(t[4 * k + 1], t[4 * k + 3]);
            u[4 * k + 3] = _mm512_unpackhi_epi64(t[4 * k + 1], t[4 * k + 3]);
        }
        /* u[j] 128-bit lanes: dword j of rows 0-3, j + 4 of rows 0-3, j of
         * rows 8-11, j + 4 of rows 8-11; u[4 + j] rows 4-7 and 12-15 */
        const __m512i lo = _mm512_set_epi64(13, 12, 5, 4, 9, 8, 1, 0);
        const __m512i hi = _mm512_set_epi64(15, 14, 7, 6, 11, 10, 3, 2);
        const __m512i off = _mm512_set1_epi8((char)0x80);
#pragma GCC unroll 4
        for (int j = 0; j < 4; j++) {
            W[j] = _mm512_xor_si512(_mm512_permutex2var_epi64(u[j], lo, u[4 + j]), off);
            W[j + 4] = _mm512_xor_si512(_mm512_permutex2var_epi64(u[j], hi, u[4 + j]), off);
        }
    } else {
        /* the 16 nibble bytes of each row */
        const size_t qo = WT == GGML_TYPE_Q4_0 ? offsetof(block_q4_0, qs) : offsetof(block_q5_0, qs);
        __m512i z[4];
        rows16_xmm(p, w_row, qo, z);
        const __m512i t0 = _mm512_unpacklo_epi32(z[0], z[1]), t1 = _mm512_unpackhi_epi32(z[0], z[1]);
        const __m512i t2 = _mm512_unpacklo_epi32(z[2], z[3]), t3 = _mm512_unpackhi_epi32(z[2], z[3]);
        const __m512i P[4] = { _mm512_unpacklo_epi64(t0, t2), _mm512_unpackhi_epi64(t0, t2),
                               _mm512_unpacklo_epi64(t1, t3), _mm512_unpackhi_epi64(t1, t3) };
        const __m512i m4 = _mm512_set1_epi8(0x0f);
#pragma GCC unroll 4
        for (int j = 0; j < 4; j++) { /* elements 4j.. low nibbles, 16 + 4j.. high */
            W[j] = _mm512_and_si512(P[j], m4);
            W[j + 4] = _mm512_and_si512(_mm512_srli_epi16(P[j], 4), m4);
        }
        if (WT == GGML_TYPE_Q5_0) {
            /* fifth bits: byte k/2 of each row's qh copied to the dword's 4
             * bytes, byte e tested against bit e (k even) or e + 4 (k odd) */
            const __m512i qh = _mm512_or_si512(_mm512_srli_epi32(h0, 16), _mm512_slli_epi32(h1, 16));
            const __m512i c16 = _mm512_set1_epi8(0x10);
            const __m512i blo = _mm512_set1_epi32(0x08040201), bhi = _mm512_set1_epi32((int)0x80402010);
#pragma GCC unroll 4
            for (int j = 0; j < 4; j++) {
                const __m512i h = _mm512_shuffle_epi8(qh, _mm512_set4_epi32((12 + j) * 0x01010101, (8 + j) * 0x01010101,
                                                                            (4 + j) * 0x01010101, j * 0x01010101));
                W[2 * j] = _mm512_mask_add_epi8(W[2 * j], _mm512_test_epi8_mask(h, blo), W[2 * j], c16);
                W[2 * j + 1] = _mm512_mask_add_epi8(W[2 * j + 1], _mm512_test_epi8_mask(h, bhi), W[2 * j + 1], c16);
            }
        }
    }
    *wd = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(h0));
}

/* dot + u x the int8 dword at p in every lane: vpdpbusd with an embedded
 * broadcast (GCC's intrinsic loads it by a separate vpbroadcastd, a vector
 * op more per 64 multiply-adds). */
static inline __attribute__((always_inline)) __m512i dpbusd_bcast(__m512i dot, __m512i u, const uint8_t *p)
{
    __asm__("vpdpbusd %2%{1to16%}, %1, %0" : "+v"(dot) : "v"(u), "m"(*(const int32_t *)p));
    return dot;
}

/* One group of 16 weight rows (row r at w + r * w_row) against the packed
 * activation rows [0, NC) of a pass, blocks [0, nb): y[c * n_out + r] for
 * the lanes r in m. pf: the next group's first row (prefetched spread over
 * the blocks), or NULL. */
static inline __attribute__((always_inline)) void
wt16_group(const int WT, const uint8_t *w, size_t w_row, int64_t nb, const uint8_t *pa, float *y, size_t n_out,
           __mmask16 m, const uint8_t *pf, const int NC)
{
    const size_t bx = WT == GGML_TYPE_Q8_0 ? sizeof(block_q8_0) : WT == GGML_TYPE_Q4_0 ? sizeof(block_q4_0)
                                                                                       : sizeof(block_q5_0);
    __m512 acc[WT16_C];
#pragma GCC unroll 8
    for (int c = 0; c < NC; c++)
        acc[c] = _mm512_setzero_ps();
    for (int64_t i = 0; i < nb; i++) {
        __m512i W[8];
        __m512 wd;
        if (pf) /* the next group's 16 rows (contiguous), a block's share */
            for (size_t o = 0; o < 16 * bx; o += 64)
                _mm_prefetch((const char *)pf + (size_t)i * 16 * bx + o, _MM_HINT_T0);
        wt16_unpack(WT, w + (size_t)i * bx, w_row, W, &wd);
        const uint8_t *A = pa + (size_t)i * WT16_A;
#pragma GCC unroll 8
        for (int c = 0; c < NC; c++) {
            __m512i dot = _mm512_set1_epi32(*(const int32_t *)(A + 256 + 4 * c));
#pragma GCC unroll 8
            for (int k = 0; k < 8; k++)
                dot = dpbusd_bcast(dot, W[k], A + 32 * c + 4 * k);
            acc[c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot),
                                     _mm512_mul_ps(wd, _mm512_set1_ps(*(const float *)(A + 288 + 4 * c))), acc[c]);
        }
    }
#pragma GCC unroll 8
    for (int c = 0; c < NC; c++)
        _mm512_mask_storeu_ps(y + (size_t)c * n_out, m, acc[c]);
}

#define WT16_CASE(WT, nc)                                                                       \
    case nc: wt16_group(WT, w, w_row, nb, pa, y, n_out, m, pf, nc); break

#define WT16_GROUPS(WT, name)                                                                   \
    static void name(const uint8_t *w, size_t w_row, int64_t nb, const uint8_t *pa, float *y,  \
                     size_t n_out, __mmask16 m, const uint8_t *pf, int nc)                      \
    {                                                                                           \
        switch (nc) {                                                                           \
            WT16_CASE(WT, 1); WT16_CASE(WT, 2); WT16_CASE(WT, 3); WT16_CASE(WT, 4);             \
            WT16_CASE(WT, 5); WT16_CASE(WT, 6); WT16_CASE(WT, 7); default:                      \
            wt16_group(WT, w, w_row, nb, pa, y, n_out, m, pf, WT16_C);                          \
            break;                                                                              \
        }                                                                                       \
    }

typedef void (*wt16_fn)(const uint8_t *w, size_t w_row, int64_t nb, const uint8_t *pa, float *y, size_t n_out,
                        __mmask16 m, const uint8_t *pf, int nc);
WT16_GROUPS(GGML_TYPE_Q8_0, wt16_q8_0)
WT16_GROUPS(GGML_TYPE_Q4_0, wt16_q4_0)
WT16_GROUPS(GGML_TYPE_Q5_0, wt16_q5_0)

static int wt16_takes(int64_t n_batch, int64_t n_in, int64_t n_out, size_t w_row)
{
    return n_batch <= OMNI_X86_WT16_MAX && n_in >= QK8_0 && n_in / QK8_0 <= WT16_MAX_BLOCKS && n_out >= 16 &&
           w_row * 16 < INT32_MAX;
}

/* Activation rows [0, nc) of a pass, blocks [0, nb), in wt16's layout. */
static void wt16_pack(const uint8_t *xq, size_t xq_row, const float *ad, const int32_t *corr, int nc, int64_t nb,
                      int64_t nbp, uint8_t *pa)
{
    for (int64_t i = 0; i < nb; i++) {
        uint8_t *o = pa + (size_t)i * WT16_A;
        for (int c = 0; c < nc; c++) {
            memcpy(o + 32 * c, ((const block_q8_0 *)(xq + (size_t)c * xq_row) + i)->qs, 32);
            ((int32_t *)(o + 256))[c] = 8 * corr[c * nbp + i];
            ((float *)(o + 288))[c] = ad[c * nbp + i];
        }
    }
}

static void wt16_rows(int wtype, const uint8_t *w, size_t w_row, int64_t n_in, int64_t n_out, const uint8_t *xq,
                      size_t xq_row, const float *ad, const int32_t *corr, int64_t n_batch, float *y, int64_t r0,
                      int64_t r1)
{
    const int64_t nb = n_in / QK8_0, nbp = omni_x86_gemm_q8_0_blocks(n_in);
    const wt16_fn group = wtype == GGML_TYPE_Q8_0 ? wt16_q8_0 : wtype == GGML_TYPE_Q4_0 ? wt16_q4_0 : wt16_q5_0;
    uint8_t pa[WT16_MAX_BLOCKS * WT16_A] __attribute__((aligned(64)));
    /* one pass: packed once; several: a round of passes per chunk of rows */
    const int64_t chunk = n_batch <= WT16_C ? r1 - r0 : WT16_ROWS_CHUNK;
    for (int64_t rc = r0; rc < r1; rc += chunk) {
        const int64_t rc1 = r1 - rc < chunk ? r1 : rc + chunk;
        for (int64_t c = 0; c < n_batch; c += WT16_C) {
            const int nc = n_batch - c < WT16_C ? (int)(n_batch - c) : WT16_C;
            if (rc == r0 || n_batch > WT16_C)
                wt16_pack(xq + (size_t)c * xq_row, xq_row, ad + c * nbp, corr + c * nbp, nc, nb, nbp, pa);
            for (int64_t r = rc; r < rc1; r += 16) {
                /* a short last group takes the 16 rows that end at rc1 (or
                 * at n_out), storing only its own */
                const int64_t g = rc1 - r >= 16 ? r : rc1 >= 16 ? rc1 - 16 : 0;
                const int64_t e = r + 16 < rc1 ? r + 16 : rc1;
                const __mmask16 m = (__mmask16)(((1u << (e - g)) - 1) & ~((1u << (r - g)) - 1));
                const uint8_t *pf = r + 32 <= rc1 ? w + (size_t)(r + 16) * w_row : NULL;
                group(w + (size_t)g * w_row, w_row, nb, pa, y + c * n_out + g, (size_t)n_out, m, pf, nc);
            }
        }
    }
}

int omni_x86_gemm_act8_min_avx512(int wtype)
{
    /* wt16 and act8 alike: act8's bits from one row */
    return omni_x86_gemm_q8_0_offset_avx512(wtype) < 0 ? INT32_MAX : 1;
}

void omni_x86_gemm_q8_0_avx512(int wtype, const void *w, size_t w_row, int64_t n_in, int64_t n_out,
                               const void *xq, size_t xq_row, const float *ad, const int32_t *corr,
                               int64_t n_batch, float *y, int64_t r0, int64_t r1)
{
    if (wt16_takes(n_batch, n_in, n_out, w_row))
        wt16_rows(wtype, w, w_row, n_in, n_out, xq, xq_row, ad, corr, n_batch, y, r0, r1);
    else
        act8_rows(wtype, w, w_row, n_in, n_out, xq, xq_row, ad, corr, n_batch, y, r0, r1);
}

#endif /* __x86_64__ */
