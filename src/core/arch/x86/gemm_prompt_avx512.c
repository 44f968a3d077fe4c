/* gemm_prompt_avx512.c - int8 GEMM for prompts (many activation rows) of the
 * weight types whose dot type is Q8_0 (q8_0, q4_0, q5_0), AVX-512 VNNI.
 *
 * gemm_avx512.c's act8 form puts 8 activation rows in the lanes of a 256-bit
 * register and unpacks every weight block once per 8 activation rows; at
 * hundreds of rows that unpacking and the weight reads from L2/L3 dominate.
 * Here the roles are those of a blocked GEMM: a panel of 16 weight rows is
 * unpacked once (u = q + K, the offsets of gemm_avx512.c) and transposed so
 * that lane L of 512-bit register k holds dword k of row L's block; a tile
 * of MC activation rows then runs against it, each activation dword
 * broadcast from memory into one vpdpbusd per 16 weight rows. Rows are cut
 * in chunks of KC blocks (the panel and a tile's chunk together fit L1):
 * the activation rows are packed per thread, a group of MB rows at a time
 * (in L2: qs, 8 x the offset correction and the scale of each block, tile
 * by tile) for one chunk, and every weight panel of the thread's range is
 * packed once per group and chunk; the float sums of a tile park in y
 * between chunks. A group holds a few hundred rows whatever n_in, so the
 * weights are read once or twice for a 512-token prompt.
 *
 * Each (weight row, activation row) pair sums its block's exact int32 dot
 * (starting at 8 x corr, so the offset K comes off exactly), then takes
 * acc = fma(float(dot), d_w * d_a, acc) block after block from zero: the
 * integers and the float steps of gemm_avx512.c's act8 form, so its bits. */
#if defined(__x86_64__)

#pragma GCC target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512vnni")

#include "x86.h"

#include <immintrin.h>
#include <string.h>

#define NR 16 /* weight rows per panel: one per lane */
/* Activation rows per register tile: MC int32 block sums + MC float sums
 * live, with the weight register and the scales (28 of 32 registers). */
#define MC 12
#define PANEL_BLOCK (8 * 64 + 64)   /* per block: 8 registers of u, 16 scales */
#define ACT_BLOCK (MC * 40)         /* per block: MC x (32 qs), MC corr, MC scales */
#define ACT_CORR (MC * 32)
#define ACT_D (MC * 36)
/* Bytes of packed activations a thread keeps per group (in L2 beside the
 * panel: Zen 5 has 1 MB a core). Overridable for a benchmark build, as KC:
 * one core, 512 rows, 896 x 4864 / 4864 x 896 q4_0 and 2048 x 8192 q8_0 ran
 * at 320-340 / 310-330 / 250-260 G multiply-adds/s with 384 KB and KC 32,
 * within the noise of 768 KB with KC 32 or 64, and 5-20% slower with KC
 * 16. */
#ifndef ACT_GROUP_BYTES
#define ACT_GROUP_BYTES (384 * 1024)
#endif
/* Blocks per chunk: an 18 KB panel and a 15 KB activation tile in L1. */
#ifndef KC
#define KC 32
#endif
/* Fewest batch rows for this kernel (below: act8). */
#ifndef OMNI_X86_PROMPT_MIN
#define OMNI_X86_PROMPT_MIN 32
#endif

typedef int32_t i32u __attribute__((aligned(1), may_alias));

int omni_x86_gemm_prompt_min_avx512(int wtype)
{
    return omni_x86_gemm_q8_0_offset_avx512(wtype) < 0 ? INT32_MAX : OMNI_X86_PROMPT_MIN;
}

/* Activation rows per group: whole tiles, at least one. */
static int64_t group_rows(int64_t n_batch)
{
    int64_t mb = ACT_GROUP_BYTES / (KC * ACT_BLOCK) * MC;
    if (mb < MC)
        mb = MC;
    /* equal groups (the last one not a sliver) */
    const int64_t groups = (n_batch + mb - 1) / mb;
    const int64_t rows = (n_batch + groups - 1) / groups;
    return (rows + MC - 1) / MC * MC;
}

size_t omni_x86_gemm_prompt_avx512_scratch(int64_t n_in, int64_t n_batch)
{
    const int64_t kc = n_in / QK8_0 < KC ? n_in / QK8_0 : KC;
    return (size_t)kc * PANEL_BLOCK + (size_t)(group_rows(n_batch) / MC) * (size_t)kc * ACT_BLOCK + 64;
}

/* Block i of one weight row as 32 unsigned bytes u = q + K, and its scale. */
static inline __attribute__((always_inline)) __m256i load_u(const int WT, const uint8_t *row, int64_t i, float *d)
{
    if (WT == GGML_TYPE_Q8_0) {
        const block_q8_0 *x = (const block_q8_0 *)row + i;
        *d = _cvtsh_ss(x->d);
        return _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)x->qs), _mm256_set1_epi8((char)0x80));
    }
    /* nibbles: elements 0-15 low, 16-31 high */
    const uint8_t *qs = WT == GGML_TYPE_Q4_0 ? ((const block_q4_0 *)row + i)->qs : ((const block_q5_0 *)row + i)->qs;
    const __m128i v = _mm_loadu_si128((const __m128i *)qs);
    const __m256i q = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(v, 4), v), _mm256_set1_epi8(0x0f));
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

/* nr <= 16 weight rows (row r at w + r * w_row), blocks [i0, i0 + n), into
 * the panel layout; rows nr..15 zero. */
static inline __attribute__((always_inline)) void
pack_panel(const int WT, const uint8_t *w, size_t w_row, int nr, int64_t i0, int64_t n, uint8_t *pw)
{
    const __m512i lo_idx = _mm512_set_epi64(13, 12, 5, 4, 9, 8, 1, 0);
    const __m512i hi_idx = _mm512_set_epi64(15, 14, 7, 6, 11, 10, 3, 2);
    for (int64_t i = i0; i < i0 + n; i++) {
        uint8_t *o = pw + (size_t)(i - i0) * PANEL_BLOCK;
        float d[NR];
        __m256i u[NR];
        for (int r = 0; r < NR; r++) {
            d[r] = 0.0f;
            u[r] = r < nr ? load_u(WT, w + (size_t)r * w_row, i, &d[r]) : _mm256_setzero_si256();
        }
        /* z[c]: row c in the low half, row c + 8 in the high half; then the
         * 8 x 8 dword transpose of each half (gemm_act8_inl.h's steps on
         * 512 bits) and a two-source permute that joins the halves */
        __m512i z[8], t[8], v[8];
        for (int c = 0; c < 8; c++)
            z[c] = _mm512_inserti64x4(_mm512_castsi256_si512(u[c]), u[c + 8], 1);
        for (int k = 0; k < 4; k++) {
            t[2 * k] = _mm512_unpacklo_epi32(z[2 * k], z[2 * k + 1]);
            t[2 * k + 1] = _mm512_unpackhi_epi32(z[2 * k], z[2 * k + 1]);
        }
        for (int k = 0; k < 2; k++) {
            v[4 * k] = _mm512_unpacklo_epi64(t[4 * k], t[4 * k + 2]);
            v[4 * k + 1] = _mm512_unpackhi_epi64(t[4 * k], t[4 * k + 2]);
            v[4 * k + 2] = _mm512_unpacklo_epi64(t[4 * k + 1], t[4 * k + 3]);
            v[4 * k + 3] = _mm512_unpackhi_epi64(t[4 * k + 1], t[4 * k + 3]);
        }
        /* v[j] (j < 4), 128-bit lanes: dword j of rows 0-3, dword j + 4 of
         * rows 0-3, dword j of rows 8-11, dword j + 4 of rows 8-11; v[4 + j]
         * the same for rows 4-7 and 12-15 */
        for (int j = 0; j < 4; j++) {
            _mm512_store_si512(o + 64 * j, _mm512_permutex2var_epi64(v[j], lo_idx, v[4 + j]));
            _mm512_store_si512(o + 64 * (j + 4), _mm512_permutex2var_epi64(v[j], hi_idx, v[4 + j]));
        }
        _mm512_store_ps(o + 512, _mm512_loadu_ps(d));
    }
}

/* Activation rows [0, nc) (row c at xq + c * xq_row; scales and corrections
 * at ad / corr + c * nbp) as tiles of MC rows, blocks [i0, i0 + n) each;
 * rows nc.. of the last tile zero. */
static void pack_act(const uint8_t *xq, size_t xq_row, const float *ad, const int32_t *corr, int64_t nc,
                     int64_t i0, int64_t n, int64_t nbp, uint8_t *pa)
{
    for (int64_t t = 0; t < nc; t += MC) {
        uint8_t *ot = pa + (size_t)(t / MC) * (size_t)n * ACT_BLOCK;
        for (int64_t i = i0; i < i0 + n; i++) {
            uint8_t *o = ot + (size_t)(i - i0) * ACT_BLOCK;
            for (int c = 0; c < MC; c++) {
                const int64_t b = t + c;
                if (b < nc) {
                    memcpy(o + 32 * c, ((const block_q8_0 *)(xq + (size_t)b * xq_row) + i)->qs, 32);
                    ((int32_t *)(o + ACT_CORR))[c] = 8 * corr[b * nbp + i];
                    ((float *)(o + ACT_D))[c] = ad[b * nbp + i];
                } else {
                    memset(o + 32 * c, 0, 32);
                    ((int32_t *)(o + ACT_CORR))[c] = 0;
                    ((float *)(o + ACT_D))[c] = 0.0f;
                }
            }
        }
    }
}

/* y[c * y_stride + lane] (c < nc, lanes in m) for one panel against one
 * activation tile, nb blocks; go_on: from the partial sums in y (an earlier
 * chunk: the same float steps in the same order), else from zero. */
static void tile(const uint8_t *pw, const uint8_t *pa, int64_t nb, float *y, size_t y_stride, int nc, __mmask16 m,
                 int go_on)
{
    __m512 acc[MC];
#pragma GCC unroll 16
    for (int c = 0; c < MC; c++)
        acc[c] = go_on && c < nc ? _mm512_maskz_loadu_ps(m, y + (size_t)c * y_stride) : _mm512_setzero_ps();
    for (int64_t i = 0; i < nb; i++) {
        const uint8_t *A = pa + (size_t)i * ACT_BLOCK;
        const uint8_t *W = pw + (size_t)i * PANEL_BLOCK;
        __m512i dot[MC];
#pragma GCC unroll 16
        for (int c = 0; c < MC; c++)
            dot[c] = _mm512_set1_epi32(((const int32_t *)(A + ACT_CORR))[c]);
#pragma GCC unroll 8
        for (int k = 0; k < 8; k++) {
            const __m512i wk = _mm512_load_si512(W + 64 * k);
#pragma GCC unroll 16
            for (int c = 0; c < MC; c++)
                dot[c] = _mm512_dpbusd_epi32(dot[c], wk, _mm512_set1_epi32(*(const i32u *)(A + 32 * c + 4 * k)));
        }
        const __m512 wd = _mm512_load_ps(W + 512);
#pragma GCC unroll 16
        for (int c = 0; c < MC; c++)
            acc[c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot[c]),
                                     _mm512_mul_ps(wd, _mm512_set1_ps(((const float *)(A + ACT_D))[c])), acc[c]);
    }
    for (int c = 0; c < nc; c++)
        _mm512_mask_storeu_ps(y + (size_t)c * y_stride, m, acc[c]);
}

static void pack_q8_0(const uint8_t *w, size_t w_row, int nr, int64_t i0, int64_t n, uint8_t *pw)
{
    pack_panel(GGML_TYPE_Q8_0, w, w_row, nr, i0, n, pw);
}

static void pack_q4_0(const uint8_t *w, size_t w_row, int nr, int64_t i0, int64_t n, uint8_t *pw)
{
    pack_panel(GGML_TYPE_Q4_0, w, w_row, nr, i0, n, pw);
}

static void pack_q5_0(const uint8_t *w, size_t w_row, int nr, int64_t i0, int64_t n, uint8_t *pw)
{
    pack_panel(GGML_TYPE_Q5_0, w, w_row, nr, i0, n, pw);
}

/* bytes of nr rows (stride w_row) into L1. The packing otherwise waits on
 * its 16 strided rows (Llama-3.2-1B Q4_0 pp512, one thread, perf: packing
 * 8.6-8.7% of the samples without, 6.6-6.7% with, the loop itself +0.25%,
 * the tiles unchanged; the T2 hint: 7.6%). */
static void prefetch_chunk(const uint8_t *p, size_t w_row, int nr, size_t bytes)
{
    for (int k = 0; k < nr; k++)
        for (size_t o = 0; o < bytes + 63; o += 64)
            _mm_prefetch((const char *)p + (size_t)k * w_row + o, _MM_HINT_T0);
}

void omni_x86_gemm_prompt_avx512(int wtype, const void *w, size_t w_row, int64_t n_in, int64_t n_out,
                                 const void *xq, size_t xq_row, const float *ad, const int32_t *corr,
                                 int64_t n_batch, float *y, int64_t r0, int64_t r1, void *scratch)
{
    const int64_t nb = n_in / QK8_0, nbp = omni_x86_gemm_q8_0_blocks(n_in);
    void (*pack)(const uint8_t *, size_t, int, int64_t, int64_t, uint8_t *) =
        wtype == GGML_TYPE_Q8_0 ? pack_q8_0 : wtype == GGML_TYPE_Q4_0 ? pack_q4_0 : pack_q5_0;
    uint8_t *pw = (uint8_t *)(((uintptr_t)scratch + 63) & ~(uintptr_t)63);
    uint8_t *pa = pw + (size_t)(nb < KC ? nb : KC) * PANEL_BLOCK;
    const int64_t mb = group_rows(n_batch);
    const size_t bx = wtype == GGML_TYPE_Q8_0   ? sizeof(block_q8_0)
                      : wtype == GGML_TYPE_Q4_0 ? sizeof(block_q4_0)
                                                : sizeof(block_q5_0);
    for (int64_t g = 0; g < n_batch; g += mb) {
        const int64_t ng = n_batch - g < mb ? n_batch - g : mb;
        for (int64_t i0 = 0; i0 < nb; i0 += KC) {
            const int64_t n = nb - i0 < KC ? nb - i0 : KC;
            pack_act((const uint8_t *)xq + (size_t)g * xq_row, xq_row, ad + g * nbp, corr + g * nbp, ng, i0, n, nbp,
                     pa);
            for (int64_t r = r0; r < r1; r += NR) {
                const int nr = r1 - r < NR ? (int)(r1 - r) : NR;
                pack((const uint8_t *)w + (size_t)r * w_row, w_row, nr, i0, n, pw);
                if (r + NR < r1) /* the next panel's chunk, from memory while the tiles run */
                    prefetch_chunk((const uint8_t *)w + (size_t)(r + NR) * w_row + (size_t)i0 * bx, w_row,
                                   r1 - r - NR < NR ? (int)(r1 - r - NR) : NR, (size_t)n * bx);
                const __mmask16 m = (__mmask16)((1u << nr) - 1);
                for (int64_t t = 0; t < ng; t += MC) {
                    const int nc = ng - t < MC ? (int)(ng - t) : MC;
                    tile(pw, pa + (size_t)(t / MC) * (size_t)n * ACT_BLOCK, n, y + (g + t) * n_out + r,
                         (size_t)n_out, nc, m, i0 > 0);
                }
            }
        }
    }
}

#endif /* __x86_64__ */
