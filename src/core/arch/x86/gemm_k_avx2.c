/* gemm_k_avx2.c - int8 GEMM for batches of K-quant weights (q4_K, q5_K,
 * q6_K against Q8_K activations), AVX2 (vpmaddubsw), and the weight packing
 * that gemm_k_avx512.c's VNNI kernel shares.
 *
 * The per-row dots unpack every 256-element super-block again for each
 * activation row and spend a vpmaddwd per 32 products on the sub-block
 * scale. Here 8 weight rows are transposed per super-block into registers
 * with one lane per row (lane L of register k = bytes 4k..4k+3 of row L), so
 * one broadcast activation dword multiplies 8 rows, and the int16 sums of a
 * whole sub-block take its 8 rows' scales in one vpmaddwd. The pack (1.7
 * to 2.3 KB) stays in L1 while up to 64 activation rows pass.
 *
 * Summation order: per (weight row, activation row) the super-block dot is
 * an exact int32 (the reference's sumi and summ), then one fixed float step
 * per super-block: acc += a.d * (d * sumi - dmin * summ) for q4_K/q5_K (one
 * FMA for the outer step, one fused multiply-subtract inside), acc +=
 * sumi * (a.d * d) for q6_K. No lane mixes two rows, so a result depends
 * only on its two rows, and the VNNI kernel, whose integers are the same,
 * gives the same bits. */
#if defined(__x86_64__)

#pragma GCC target("avx2,fma,f16c")

#include "x86.h"

#include <immintrin.h>
#include <stddef.h>
#include <string.h>
#include "gemm_act8_inl.h"

#define KG_ROWS 8   /* weight rows per pack (one per lane) */
#define KG_COLS 4   /* activation rows per register tile */
#define KG_CHUNK 64 /* activation rows whose accumulators stay on the stack */

int omni_x86_gemm_k_takes(int wtype)
{
    return wtype == GGML_TYPE_Q4_K || wtype == GGML_TYPE_Q5_K || wtype == GGML_TYPE_Q6_K;
}

// ---- packing -----------------------------------------------------------------

/* n_regs registers of dwords, row L's at rows[L] (NULL: zeros), transposed
 * into out: out register k lane L = dword k of row L. n_regs % 8 == 0. */
static void pack_dwords(const uint8_t *const rows[KG_ROWS], int n_regs, uint8_t *out)
{
    for (int k0 = 0; k0 < n_regs; k0 += 8) {
        __m256i v[8];
        for (int L = 0; L < KG_ROWS; L++)
            v[L] = rows[L] ? _mm256_loadu_si256((const __m256i *)(rows[L] + 4 * k0))
                           : _mm256_setzero_si256();
        transpose8_epi32(v);
        for (int k = 0; k < 8; k++)
            _mm256_store_si256((__m256i *)(out + 32 * (k0 + k)), v[k]);
    }
}

/* The 8 6-bit scales and 8 mins of a q4_K/q5_K block (layout in quant.h),
 * one byte each: bytes 0-3 hold scales 0-3 and the top 2 bits of scales
 * 4-7, bytes 4-7 the same for mins, bytes 8-11 the low nibbles of scale (low)
 * and min (high) 4-7; per byte, (b >> 6) << 4 is (B >> 2) & 0x30303030. */
static inline void k4_scales(const uint8_t *q, uint64_t *sc, uint64_t *mn)
{
    uint32_t A, B, C;
    memcpy(&A, q, 4);
    memcpy(&B, q + 4, 4);
    memcpy(&C, q + 8, 4);
    const uint32_t sc_hi = (C & 0x0f0f0f0f) | ((A >> 2) & 0x30303030);
    const uint32_t mn_hi = ((C >> 4) & 0x0f0f0f0f) | ((B >> 2) & 0x30303030);
    *sc = (A & 0x3f3f3f3f) | (uint64_t)sc_hi << 32;
    *mn = (B & 0x3f3f3f3f) | (uint64_t)mn_hi << 32;
}

/* 8 halves (one per row) to 8 floats at out. */
static inline void store_halves(const ggml_half h[KG_ROWS], uint8_t *out)
{
    __m128i v;
    memcpy(&v, h, sizeof v);
    _mm256_store_ps((float *)out, _mm256_cvtph_ps(v));
}

static inline void store_regs(const __m256i *v, int n, uint8_t *out)
{
    for (int k = 0; k < n; k++)
        _mm256_store_si256((__m256i *)out + k, v[k]);
}

/* int16 x -> the dword (x, x): vpmaddwd against it scales both halves. */
static inline __m256i twice16(__m256i x32)
{
    return _mm256_or_si256(_mm256_and_si256(x32, _mm256_set1_epi32(0xffff)), _mm256_slli_epi32(x32, 16));
}

void omni_x86_gemm_k_pack(int wtype, const uint8_t *w, size_t w_row, int nr, int64_t i, uint8_t *pk)
{
    const uint8_t *qs[KG_ROWS], *qh[KG_ROWS];
    ggml_half d[KG_ROWS], dmin[KG_ROWS];
    __m256i v[KG_ROWS], u[KG_ROWS];
    if (wtype == GGML_TYPE_Q6_K) {
        for (int L = 0; L < KG_ROWS; L++) {
            const block_q6_K *b = (const block_q6_K *)(w + (size_t)(L < nr ? L : 0) * w_row) + i;
            qs[L] = L < nr ? b->ql : NULL;
            qh[L] = L < nr ? b->qh : NULL;
            d[L] = L < nr ? b->d : 0;
            /* scales 0-7 and 8-15 as int32, and the 16 as int16 pairs */
            const __m128i sc = L < nr ? _mm_loadu_si128((const __m128i *)b->scales) : _mm_setzero_si128();
            v[L] = _mm256_cvtepi8_epi32(sc);
            u[L] = _mm256_cvtepi8_epi32(_mm_srli_si128(sc, 8));
        }
        pack_dwords(qs, 32, pk + OMNI_KP6_QL);
        pack_dwords(qh, 16, pk + OMNI_KP6_QH);
        transpose8_epi32(v);
        transpose8_epi32(u);
        for (int k = 0; k < 8; k++) {
            _mm256_store_si256((__m256i *)(pk + OMNI_KP6_SC) + k, twice16(v[k]));
            _mm256_store_si256((__m256i *)(pk + OMNI_KP6_SC) + 8 + k, twice16(u[k]));
        }
        for (int L = 0; L < KG_ROWS; L++) {
            const block_q6_K *b = (const block_q6_K *)(w + (size_t)(L < nr ? L : 0) * w_row) + i;
            v[L] = L < nr ? _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)b->scales)) : _mm256_setzero_si256();
        }
        transpose8_epi32(v);
        store_regs(v, 8, pk + OMNI_KP6_SCP);
        store_halves(d, pk + OMNI_KP6_D);
        return;
    }
    static_assert(offsetof(block_q5_K, scales) == offsetof(block_q4_K, scales), "q4_K/q5_K head");
    for (int L = 0; L < KG_ROWS; L++) {
        /* q4_K and q5_K both open with d, dmin and the 12 scale bytes */
        const block_q4_K *b;
        if (wtype == GGML_TYPE_Q4_K) {
            b = (const block_q4_K *)(w + (size_t)(L < nr ? L : 0) * w_row) + i;
            qs[L] = L < nr ? b->qs : NULL;
        } else {
            const block_q5_K *b5 = (const block_q5_K *)(w + (size_t)(L < nr ? L : 0) * w_row) + i;
            b = (const block_q4_K *)b5;
            qs[L] = L < nr ? b5->qs : NULL;
            qh[L] = L < nr ? b5->qh : NULL;
        }
        uint64_t sc = 0, mn = 0;
        if (L < nr)
            k4_scales(b->scales, &sc, &mn);
        d[L] = L < nr ? b->d : 0;
        dmin[L] = L < nr ? b->dmin : 0;
        v[L] = twice16(_mm256_cvtepu8_epi32(_mm_cvtsi64_si128((long long)sc)));
        u[L] = _mm256_castsi128_si256(_mm_cvtepu8_epi16(_mm_cvtsi64_si128((long long)mn)));
    }
    pack_dwords(qs, 32, pk + OMNI_KP_QS);
    if (wtype == GGML_TYPE_Q5_K)
        pack_dwords(qh, 8, pk + OMNI_KP_QH);
    transpose8_epi32(v);
    store_regs(v, 8, pk + OMNI_KP_SC);
    transpose8_epi32(u); /* registers 4-7 are the zero upper halves */
    store_regs(u, 4, pk + OMNI_KP_MN);
    store_halves(d, pk + OMNI_KP_D);
    store_halves(dmin, pk + OMNI_KP_DMIN);
}

// ---- AVX2 kernel -----------------------------------------------------------

/* Four activation bytes as a dword broadcast to 8 lanes (memcpy: the
 * activation rows need not be 4-byte aligned). */
static inline __m256i bcast4(const int8_t *p)
{
    int32_t v;
    memcpy(&v, p, 4);
    return _mm256_set1_epi32(v);
}

/* The 5th bits of q5_K sub-block j (bit j of each qh byte) at 0x10. */
static inline __m256i q5_hbit(__m256i qh, int j)
{
    const __m256i h = j < 4 ? _mm256_slli_epi16(qh, 4 - j) : _mm256_srli_epi16(qh, j - 4);
    return _mm256_and_si256(h, _mm256_set1_epi8(0x10));
}

/* The 2 high bits of q6_K group g (bits 2g, 2g+1 of each qh byte) at 0x30. */
static inline __m256i q6_hbits(__m256i qh, int g)
{
    const __m256i h = g < 2 ? _mm256_slli_epi16(qh, 4 - 2 * g) : g == 2 ? qh : _mm256_srli_epi16(qh, 2);
    return _mm256_and_si256(h, _mm256_set1_epi8(0x30));
}

/* acc[c] (8 rows each) += super-block i of the packed rows x NC activation
 * rows (xq: the first, stride xq_row). */
static inline __attribute__((always_inline)) void
k_tile(const int WT, const uint8_t *pk, const uint8_t *xq, size_t xq_row, int64_t i, __m256 *acc,
       const int NC)
{
    const __m256i m4 = _mm256_set1_epi8(0x0f);
    const block_q8_K *a[KG_COLS];
    __m256i sumi[KG_COLS];
    _Pragma("GCC unroll 8") for (int c = 0; c < NC; c++) {
        a[c] = (const block_q8_K *)(xq + (size_t)c * xq_row) + i;
        sumi[c] = _mm256_setzero_si256();
    }
    if (WT == GGML_TYPE_Q6_K) {
        const __m256i *QL = (const __m256i *)(pk + OMNI_KP6_QL), *QH = (const __m256i *)(pk + OMNI_KP6_QH);
        const __m256i *SC = (const __m256i *)(pk + OMNI_KP6_SC);
        _Pragma("GCC unroll 8") for (int ch = 0; ch < 8; ch++) { /* 32 elements: 128h + 32g + l */
            const int h = ch / 4, g = ch % 4;
            __m256i W[8];
            _Pragma("GCC unroll 8") for (int k = 0; k < 8; k++) {
                const __m256i lo = _mm256_srli_epi16(_mm256_load_si256(QL + 16 * h + 8 * (g & 1) + k), 4 * (g >> 1));
                W[k] = _mm256_or_si256(_mm256_and_si256(lo, m4), q6_hbits(_mm256_load_si256(QH + 8 * h + k), g));
            }
            const __m256i s0 = _mm256_load_si256(SC + 2 * ch), s1 = _mm256_load_si256(SC + 2 * ch + 1);
            _Pragma("GCC unroll 8") for (int c = 0; c < NC; c++) {
                const int8_t *q = a[c]->qs + 32 * ch;
                /* pair sums reach 2 * 63 * 127: two of them fit int16; each
                 * pair goes into the int32 sum at once (fewer live registers) */
                _Pragma("GCC unroll 8") for (int k = 0; k < 4; k++) {
                    const __m256i p = _mm256_add_epi16(_mm256_maddubs_epi16(W[2 * k], bcast4(q + 8 * k)),
                                                       _mm256_maddubs_epi16(W[2 * k + 1], bcast4(q + 8 * k + 4)));
                    sumi[c] = _mm256_add_epi32(sumi[c], _mm256_madd_epi16(p, k < 2 ? s0 : s1));
                }
            }
        }
        const __m256i *SCP = (const __m256i *)(pk + OMNI_KP6_SCP);
        const __m256 D = _mm256_load_ps((const float *)(pk + OMNI_KP6_D));
        _Pragma("GCC unroll 8") for (int c = 0; c < NC; c++) {
            /* the -32 offset: 32 * sum_s sc[s] * bsums[s] */
            __m256i off = _mm256_setzero_si256();
            _Pragma("GCC unroll 8") for (int p = 0; p < 8; p++) {
                int32_t bs;
                memcpy(&bs, a[c]->bsums + 2 * p, 4);
                off = _mm256_add_epi32(off, _mm256_madd_epi16(_mm256_load_si256(SCP + p), _mm256_set1_epi32(bs)));
            }
            const __m256i s = _mm256_sub_epi32(sumi[c], _mm256_slli_epi32(off, 5));
            acc[c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), _mm256_mul_ps(_mm256_set1_ps(a[c]->d), D), acc[c]);
        }
        return;
    }
    const __m256i *QS = (const __m256i *)(pk + OMNI_KP_QS), *QH = (const __m256i *)(pk + OMNI_KP_QH);
    const __m256i *SC = (const __m256i *)(pk + OMNI_KP_SC);
    _Pragma("GCC unroll 8") for (int j = 0; j < 8; j++) { /* sub-block j: nibbles 4 * (j & 1) of qs bytes 32 * (j / 2) + l */
        __m256i W[8];
        _Pragma("GCC unroll 8") for (int k = 0; k < 8; k++) {
            W[k] = _mm256_and_si256(_mm256_srli_epi16(_mm256_load_si256(QS + 8 * (j / 2) + k), 4 * (j & 1)), m4);
            if (WT == GGML_TYPE_Q5_K)
                W[k] = _mm256_or_si256(W[k], q5_hbit(_mm256_load_si256(QH + k), j));
        }
        const __m256i sc = _mm256_load_si256(SC + j);
        _Pragma("GCC unroll 8") for (int c = 0; c < NC; c++) {
            const int8_t *q = a[c]->qs + 32 * j;
            __m256i s0 = _mm256_maddubs_epi16(W[0], bcast4(q));
            __m256i s1 = _mm256_maddubs_epi16(W[4], bcast4(q + 16));
            _Pragma("GCC unroll 8") for (int k = 1; k < 4; k++) { /* two chains for the adds' latency */
                s0 = _mm256_add_epi16(s0, _mm256_maddubs_epi16(W[k], bcast4(q + 4 * k)));
                s1 = _mm256_add_epi16(s1, _mm256_maddubs_epi16(W[k + 4], bcast4(q + 16 + 4 * k)));
            }
            __m256i dot;
            if (WT == GGML_TYPE_Q4_K) /* 8 pair sums of at most 2 * 15 * 127 fit int16 */
                dot = _mm256_madd_epi16(_mm256_add_epi16(s0, s1), sc);
            else /* q5_K: 4 of 2 * 31 * 127 */
                dot = _mm256_add_epi32(_mm256_madd_epi16(s0, sc), _mm256_madd_epi16(s1, sc));
            sumi[c] = _mm256_add_epi32(sumi[c], dot);
        }
    }
    const __m256i *MN = (const __m256i *)(pk + OMNI_KP_MN);
    const __m256 D = _mm256_load_ps((const float *)(pk + OMNI_KP_D));
    const __m256 DMIN = _mm256_load_ps((const float *)(pk + OMNI_KP_DMIN));
    _Pragma("GCC unroll 8") for (int c = 0; c < NC; c++) {
        /* summ = sum_j m[j] * (bsums[2j] + bsums[2j+1]); a pair sum fits int16 */
        int32_t bs2[4];
        _mm_storeu_si128((__m128i *)bs2, _mm_hadd_epi16(_mm_loadu_si128((const __m128i *)a[c]->bsums),
                                                        _mm_loadu_si128((const __m128i *)(a[c]->bsums + 8))));
        __m256i summ = _mm256_setzero_si256();
        _Pragma("GCC unroll 8") for (int p = 0; p < 4; p++)
            summ = _mm256_add_epi32(summ, _mm256_madd_epi16(_mm256_load_si256(MN + p), _mm256_set1_epi32(bs2[p])));
        const __m256 v = _mm256_fmsub_ps(D, _mm256_cvtepi32_ps(sumi[c]),
                                         _mm256_mul_ps(DMIN, _mm256_cvtepi32_ps(summ)));
        acc[c] = _mm256_fmadd_ps(_mm256_set1_ps(a[c]->d), v, acc[c]);
    }
}

#define K_TILES(WT)                                                                              \
    static void tiles_##WT(const uint8_t *pk, const uint8_t *xq, size_t xq_row, int64_t i,      \
                           float *acc, int n)                                                    \
    {                                                                                            \
        int c = 0;                                                                               \
        for (; c + KG_COLS <= n; c += KG_COLS)                                                   \
            k_tile(GGML_TYPE_##WT, pk, xq + (size_t)c * xq_row, xq_row, i, (__m256 *)acc + c, KG_COLS); \
        switch (n - c) {                                                                         \
        case 1: k_tile(GGML_TYPE_##WT, pk, xq + (size_t)c * xq_row, xq_row, i, (__m256 *)acc + c, 1); break; \
        case 2: k_tile(GGML_TYPE_##WT, pk, xq + (size_t)c * xq_row, xq_row, i, (__m256 *)acc + c, 2); break; \
        case 3: k_tile(GGML_TYPE_##WT, pk, xq + (size_t)c * xq_row, xq_row, i, (__m256 *)acc + c, 3); break; \
        default: break;                                                                          \
        }                                                                                        \
    }

K_TILES(Q4_K)
K_TILES(Q5_K)
K_TILES(Q6_K)

void omni_x86_gemm_k_run(omni_x86_gemm_k_tiles_fn tiles, int wtype, const void *w, size_t w_row,
                         int64_t n_in, int64_t n_out, const void *xq, size_t xq_row, int64_t n_batch,
                         float *y, int64_t r0, int64_t r1)
{
    _Alignas(32) uint8_t pk[OMNI_X86_GEMM_K_PACK_BYTES];
    _Alignas(32) float acc[KG_CHUNK * KG_ROWS];
    const int64_t nsb = n_in / QK_K;
    for (int64_t r = r0; r < r1; r += KG_ROWS) {
        const int nr = r1 - r < KG_ROWS ? (int)(r1 - r) : KG_ROWS;
        /* the pack of a super-block serves up to KG_CHUNK activation rows */
        for (int64_t c0 = 0; c0 < n_batch; c0 += KG_CHUNK) {
            const int nc = n_batch - c0 < KG_CHUNK ? (int)(n_batch - c0) : KG_CHUNK;
            memset(acc, 0, sizeof(float) * KG_ROWS * (size_t)nc);
            for (int64_t i = 0; i < nsb; i++) {
                omni_x86_gemm_k_pack(wtype, (const uint8_t *)w + (size_t)r * w_row, w_row, nr, i, pk);
                tiles(pk, (const uint8_t *)xq + (size_t)c0 * xq_row, xq_row, i, acc, nc);
            }
            for (int c = 0; c < nc; c++)
                memcpy(y + (c0 + c) * n_out + r, acc + KG_ROWS * c, sizeof(float) * (size_t)nr);
        }
    }
}

// ---- q4_K / q6_K: 8 activation rows interleaved ------------------------------

/* From A8_MIN rows (the engine's 8-sequence decode) the roles turn around
 * (as gemm_avx2.c's act8 kernel for q8_0/q4_0/q5_0): the 8 activation rows
 * of a few super-blocks are transposed once (lane c of register 8j + k =
 * dword k of 32-element group j of row c), and each weight row's
 * super-block is unpacked in registers and broadcast a dword at a time
 * by vpshufd, so no weights are packed and every weight row streams from
 * memory in order. The pack puts dwords k and k + 4 of 4 activation rows
 * in one register's two halves, so one vpshufd of the 32 unpacked weights
 * (dword k in the low half, k + 4 in the high) feeds two vpmaddubsw (rows
 * 0-3, rows 4-7) and the halves of each row's int32 sum are added once per
 * super-block: half the vpshufd of a broadcast per dword and no lane-
 * crossing copies of the weights' halves (896 x 4864 at 8 rows, one thread:
 * q4_K 0.065 -> 0.060 ms per activation row, q6_K 0.083 -> 0.075). A batch that is not a
 * multiple of 8 pads its last 8 with zero rows (their lanes dropped), or
 * leaves a remainder of 1-3 rows to the packed kernel. Per
 * (weight row, activation row) the integers (sumi, summ or the q6_K offset)
 * and the float steps are those of k_tile, in the same order: the same
 * bits. Partial sums live in y between chunks of super-blocks (a float
 * stored and reloaded is unchanged). */
/* An empty asm that takes and gives back an accumulator register: GCC
 * may no longer regroup the int32 sum across it (unhinted, the unrolled
 * super-block's vpmaddwd results were kept as temporaries and summed as a
 * tree, half of them spilled to the stack). Exact integers either way. */
#define KEEP_CHAIN(v) __asm__("" : "+x"(v))
/* fewest batch rows: 4 since the sixth pass (a pass padded to 8 beat the
 * packed kernel from 4 rows, one thread, 896 x 4864, ms per activation
 * row: q6_K at 4 / 5 / 6 / 7 rows 0.146-0.171 / 0.115-0.126 / 0.098-0.111
 * / 0.084-0.090 against 0.241-0.281 / 0.227-0.239 / 0.218-0.279 /
 * 0.203-0.259, q4_K 0.114-0.120 / 0.091-0.099 / 0.076 / 0.066-0.068 against
 * 0.123-0.137 / 0.124-0.126 / 0.124-0.125 / 0.118-0.120); overridable for
 * a benchmark build */
#ifndef A8_MIN
#define A8_MIN 4
#endif
#define A8_MAX_Q6K 32                           /* q6_K: batches below this many rows */
#define A8_PAD 4                                /* fewest remainder rows padded to 8 */
/* super-blocks per chunk (a 75 KB pack on the stack): a whole row of up to
 * 8192 elements in one pass. Chunks of 8 read each weight row in several
 * strided passes: 19-super-block rows (896 x 4864 at 8 rows, one thread)
 * took 0.17-0.22 ms per activation row for q6_K against 0.09-0.10 in one
 * pass, q4_K 0.077-0.114 against 0.069-0.072. */
#define A8_SB 32
/* ... but the pack of a super-block is 2.3 KB: rows of more than A8_SB_L1
 * (the pack past L1's 48 KB; Llama-3.2-1B's 8192-wide ffn_down: 75 KB)
 * go in passes of at most A8_SB_PASS super-blocks (OMNI_CPU=avx2, 2
 * threads, `bench --batch-decode 8`, A B x3: Llama-3.2-1B Q4_K_M 178-180
 * -> 183-191 tok/s in two passes of 16; Qwen2.5-0.5B's 19-super-block
 * rows in two passes measured within noise, so they stay in one) */
#define A8_SB_L1 24
#define A8_SB_PASS 16
#define A8_BYTES (64 * 32 + 8 * 4 + 8 * 32)     /* per super-block: qs, d, bsums */
#define A8_D 2048                               /* offset of the 8 rows' d */
#define A8_BS 2080                              /* offset of the bsums registers */
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

/* Super-block i of activation rows 0..nc-1 (rows nc..7 zero). bsums:
 * q4_K: register p lane c = (b[4p] + b[4p+1], b[4p+2] + b[4p+3]) of row c
 * (p < 4); q6_K: register p = (b[2p], b[2p+1]) (p < 8). */
static void a8_pack(int wtype, const uint8_t *xq, size_t xq_row, int nc, int64_t i, uint8_t *o)
{
    const uint8_t *rows[KG_ROWS];
    int32_t *bs = (int32_t *)(o + A8_BS);
    for (int c = 0; c < KG_ROWS; c++) {
        if (c >= nc) {
            rows[c] = NULL;
            ((float *)(o + A8_D))[c] = 0.0f;
            for (int p = 0; p < 8; p++)
                bs[8 * p + c] = 0;
            continue;
        }
        const block_q8_K *a = (const block_q8_K *)(xq + (size_t)c * xq_row) + i;
        rows[c] = (const uint8_t *)a->qs;
        ((float *)(o + A8_D))[c] = a->d;
        if (wtype == GGML_TYPE_Q6_K) {
            for (int p = 0; p < 8; p++)
                memcpy(bs + 8 * p + c, a->bsums + 2 * p, 4);
        } else {
            int32_t bs2[4];
            _mm_storeu_si128((__m128i *)bs2, _mm_hadd_epi16(_mm_loadu_si128((const __m128i *)a->bsums),
                                                            _mm_loadu_si128((const __m128i *)(a->bsums + 8))));
            for (int p = 0; p < 4; p++)
                bs[8 * p + c] = bs2[p];
        }
    }
    pack_dwords(rows, 64, o);
    /* register 8j + k (k < 4): dword k of rows 0-3 in the low half, dword
     * k + 4 of rows 0-3 in the high half; 8j + 4 + k: the same for rows 4-7
     * (a weight register's vpshufd then serves both halves, see a8_q4k) */
    __m256i *v = (__m256i *)o;
    for (int j = 0; j < 8; j++)
        for (int k = 0; k < 4; k++) {
            const __m256i t0 = _mm256_load_si256(v + 8 * j + k), t1 = _mm256_load_si256(v + 8 * j + k + 4);
            _mm256_store_si256(v + 8 * j + k, _mm256_permute2x128_si256(t0, t1, 0x20));
            _mm256_store_si256(v + 8 * j + 4 + k, _mm256_permute2x128_si256(t0, t1, 0x31));
        }
}

/* The int16 pair sums of weight dwords k (low half) and k + 4 (high half)
 * of the 32 weights in W against the activation register A[k] (rows 0-3)
 * or A[4 + k] (rows 4-7): one vpshufd of W serves both, and no lane-
 * crossing copy of W's halves is needed (two vpermi128 and four vpshufd
 * per 32 weights fewer than one broadcast per dword). The halves of a row's
 * int32 sum are added once per super-block (a8_halves). */
#define A8_MADD(W, A, k) _mm256_maddubs_epi16(BCAST_DW(W, k), _mm256_load_si256((A) + (k)))

/* Lanes 0-3 of the result: rows 0-3 (low + high half of s03), lanes 4-7:
 * rows 4-7 (of s47). */
static inline __m256i a8_halves(__m256i s03, __m256i s47)
{
    return _mm256_add_epi32(_mm256_permute2x128_si256(s03, s47, 0x20), _mm256_permute2x128_si256(s03, s47, 0x31));
}

/* acc (8 activation rows) += super-block i of one q4_K weight row. */
static inline __m256 a8_q4k(const block_q4_K *b, const uint8_t *o, __m256 acc)
{
    const __m256i m4 = _mm256_set1_epi8(0x0f);
    uint64_t sc, mn;
    k4_scales(b->scales, &sc, &mn);
    /* the 8 scales and 8 mins as int16 in both halves: int16 j of sc16 is
     * scale j, dword p of mn16 the pair (m[2p], m[2p + 1]) */
    const __m256i sc16 = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(_mm_cvtsi64_si128((long long)sc)));
    const __m256i mn16 = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(_mm_cvtsi64_si128((long long)mn)));
    const __m256i *A = (const __m256i *)o;
    __m256i sum03 = _mm256_setzero_si256(), sum47 = _mm256_setzero_si256();
#pragma GCC unroll 4
    for (int p = 0; p < 4; p++) { /* sub-blocks 2p (low nibbles) and 2p + 1 */
        const __m256i q = _mm256_loadu_si256((const __m256i *)(b->qs + 32 * p));
#pragma GCC unroll 2
        for (int e = 0; e < 2; e++) {
            const int j = 2 * p + e;
            const __m256i W = e ? _mm256_and_si256(_mm256_srli_epi16(q, 4), m4) : _mm256_and_si256(q, m4);
            const __m256i *Aj = A + 8 * j;
            __m256i s03 = A8_MADD(W, Aj, 0), s47 = A8_MADD(W, Aj + 4, 0);
#pragma GCC unroll 4
            for (int k = 1; k < 4; k++) { /* 4 pair sums of at most 2 * 15 * 127 per lane */
                s03 = _mm256_add_epi16(s03, A8_MADD(W, Aj, k));
                s47 = _mm256_add_epi16(s47, A8_MADD(W, Aj + 4, k));
            }
            const char l = (char)(2 * j);
            const __m256i scv = _mm256_shuffle_epi8(sc16, _mm256_setr_epi8(l, l + 1, l, l + 1, l, l + 1, l, l + 1,
                                                                           l, l + 1, l, l + 1, l, l + 1, l, l + 1,
                                                                           l, l + 1, l, l + 1, l, l + 1, l, l + 1,
                                                                           l, l + 1, l, l + 1, l, l + 1, l, l + 1));
            sum03 = _mm256_add_epi32(sum03, _mm256_madd_epi16(s03, scv));
            sum47 = _mm256_add_epi32(sum47, _mm256_madd_epi16(s47, scv));
            KEEP_CHAIN(sum03);
            KEEP_CHAIN(sum47);
        }
    }
    const __m256i sumi = a8_halves(sum03, sum47);
    /* summ = sum_j m[j] * (bsums[2j] + bsums[2j+1]), two sub-blocks per vpmaddwd */
    __m256i summ = _mm256_setzero_si256();
#pragma GCC unroll 4
    for (int p = 0; p < 4; p++)
        summ = _mm256_add_epi32(summ, _mm256_madd_epi16(BCAST_DW(mn16, p),
                                                        _mm256_load_si256((const __m256i *)(o + A8_BS) + p)));
    const __m256 v = _mm256_fmsub_ps(_mm256_set1_ps(_cvtsh_ss(b->d)), _mm256_cvtepi32_ps(sumi),
                                     _mm256_mul_ps(_mm256_set1_ps(_cvtsh_ss(b->dmin)), _mm256_cvtepi32_ps(summ)));
    return _mm256_fmadd_ps(_mm256_load_ps((const float *)(o + A8_D)), v, acc);
}

/* acc (8 activation rows) += super-block i of one q6_K weight row: element
 * 128h + 32g + l takes the nibble 4 * (g >> 1) of ql[64h + 32(g & 1) + l],
 * bits 2g of qh[32h + l] and scale 8h + 2g + l / 16, minus 32. */
static inline __m256 a8_q6k(const block_q6_K *b, const uint8_t *o, __m256 acc)
{
    const __m256i m4 = _mm256_set1_epi8(0x0f);
    const __m256i *A = (const __m256i *)o;
    /* the 16 scales as int16, scales 8h..8h+7 in both halves of sch[h]:
     * one vpshufb per 32 elements gives the pair (s, s + 1) below, one
     * vpshufd per two scales the offset's pairs (a scalar build and
     * vmovd + vpshufd + vinserti128 per pair before: OMNI_CPU=avx2 on Zen
     * 5, one thread, tests/bench_matmul.c 896 x 4864 at 8 rows, 0.049-0.051
     * -> 0.043-0.044 ms per activation row; a8_q4k's scales and mins the
     * same way, 0.036-0.037 -> 0.035) */
    const __m256i sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)b->scales));
    const __m256i sch[2] = { _mm256_permute2x128_si256(sc16, sc16, 0x00), _mm256_permute2x128_si256(sc16, sc16, 0x11) };
    __m256i sum03 = _mm256_setzero_si256(), sum47 = _mm256_setzero_si256();
#pragma GCC unroll 2
    for (int h = 0; h < 2; h++) {
        const __m256i ql0 = _mm256_loadu_si256((const __m256i *)(b->ql + 64 * h));
        const __m256i ql1 = _mm256_loadu_si256((const __m256i *)(b->ql + 64 * h + 32));
        const __m256i qh = _mm256_loadu_si256((const __m256i *)(b->qh + 32 * h));
#pragma GCC unroll 4
        for (int g = 0; g < 4; g++) {
            const __m256i lo = _mm256_srli_epi16(g & 1 ? ql1 : ql0, 4 * (g >> 1));
            const __m256i W = _mm256_or_si256(_mm256_and_si256(lo, m4), q6_hbits(qh, g));
            const __m256i *Ac = A + 8 * (4 * h + g);
            /* the low half's dwords are elements 0-15 (scale s = 8h + 2g,
             * int16 2g of sch[h]), the high half's 16-31 (scale s + 1) */
            const char l = (char)(4 * g), u = (char)(4 * g + 2);
            const __m256i sv = _mm256_shuffle_epi8(sch[h], _mm256_setr_epi8(l, l + 1, l, l + 1, l, l + 1, l, l + 1,
                                                                             l, l + 1, l, l + 1, l, l + 1, l, l + 1,
                                                                             u, u + 1, u, u + 1, u, u + 1, u, u + 1,
                                                                             u, u + 1, u, u + 1, u, u + 1, u, u + 1));
            /* pair sums reach 2 * 63 * 127: two of them fit int16 */
#pragma GCC unroll 2
            for (int k = 0; k < 4; k += 2) {
                const __m256i p03 = _mm256_add_epi16(A8_MADD(W, Ac, k), A8_MADD(W, Ac, k + 1));
                const __m256i p47 = _mm256_add_epi16(A8_MADD(W, Ac + 4, k), A8_MADD(W, Ac + 4, k + 1));
                sum03 = _mm256_add_epi32(sum03, _mm256_madd_epi16(p03, sv));
                sum47 = _mm256_add_epi32(sum47, _mm256_madd_epi16(p47, sv));
                KEEP_CHAIN(sum03);
                KEEP_CHAIN(sum47);
            }
        }
    }
    const __m256i sumi = a8_halves(sum03, sum47);
    /* the -32 offset: 32 * sum_s sc[s] * bsums[s], two scales per vpmaddwd
     * (dword p of sc16 is the pair (sc[2p], sc[2p + 1])) */
    __m256i off = _mm256_setzero_si256();
#pragma GCC unroll 8
    for (int p = 0; p < 8; p++)
        off = _mm256_add_epi32(off, _mm256_madd_epi16(BCAST_DW(sch[p / 4], p),
                                                      _mm256_load_si256((const __m256i *)(o + A8_BS) + p)));
    const __m256i si = _mm256_sub_epi32(sumi, _mm256_slli_epi32(off, 5));
    return _mm256_fmadd_ps(_mm256_cvtepi32_ps(si),
                           _mm256_mul_ps(_mm256_load_ps((const float *)(o + A8_D)), _mm256_set1_ps(_cvtsh_ss(b->d))), acc);
}

/* How far ahead of the super-block being read a8_rows prefetches, in bytes
 * (the thread's weight rows are one stream, read in order; 0: none). Each
 * block prefetches the lines that start within its own bytes that far on.
 * Without it the 8-row decode waited on memory here (perf of Qwen2.5-0.5B
 * Q4_K_M's 8-sequence decode steps: a8_rows 24% of the samples for 21% of
 * the multiply-adds, q5_0's wt8 39% for 51%; with it 15% against 44%).
 * OMNI_CPU=avx2 on Zen 5, 2 threads, `bench --batch-decode 8`, A B A B:
 * Qwen2.5-0.5B Q4_K_M 313 -> 345-353 tok/s, Llama-3.2-1B Q4_K_M 118-120
 * -> 164-166 (1024 bytes: 338-342 / 151; 8192: 347 / 153-165). */
#ifndef A8_PF_DIST
#define A8_PF_DIST 4096
#endif
static inline void a8_prefetch(const uint8_t *block, size_t bytes, size_t dist)
{
    act8_prefetch_ahead(block, bytes, A8_PF_DIST > 0 ? dist : 0);
}

static void a8_rows(int wtype, const uint8_t *w, size_t w_row, int64_t n_in, int64_t n_out, const uint8_t *xq,
                    size_t xq_row, int64_t n_batch, float *y, int64_t r0, int64_t r1)
{
    _Alignas(32) uint8_t apk[A8_SB * A8_BYTES];
    const int64_t nsb = n_in / QK_K;
    for (int64_t c0 = 0; c0 < n_batch; c0 += KG_ROWS) {
        const int nc = n_batch - c0 < KG_ROWS ? (int)(n_batch - c0) : KG_ROWS;
        const uint8_t *xc = xq + (size_t)c0 * xq_row;
        float *yc = y + c0 * n_out;
        /* rows of more than A8_SB_L1 super-blocks in passes of at most
         * A8_SB_PASS, each prefetching the next row's part of its pass */
        const int64_t nch = nsb > A8_SB_L1 ? (nsb + A8_SB_PASS - 1) / A8_SB_PASS : 1;
        const int64_t chunk = (nsb + nch - 1) / nch;
        const size_t dist = nch > 1 ? w_row : (size_t)A8_PF_DIST;
        for (int64_t i0 = 0; i0 < nsb; i0 += chunk) {
            const int64_t ni = nsb - i0 < chunk ? nsb - i0 : chunk;
            for (int64_t i = 0; i < ni; i++)
                a8_pack(wtype, xc, xq_row, nc, i0 + i, apk + (size_t)i * A8_BYTES);
            for (int64_t r = r0; r < r1; r++) {
                __m256 acc = _mm256_setzero_ps();
                if (i0) { /* the sum so far, parked in y */
                    float in[KG_ROWS] = { 0 };
                    for (int c = 0; c < nc; c++)
                        in[c] = yc[(size_t)c * n_out + r];
                    acc = _mm256_loadu_ps(in);
                }
                const uint8_t *wr = w + (size_t)r * w_row;
                if (wtype == GGML_TYPE_Q6_K)
                    for (int64_t i = 0; i < ni; i++) {
                        const block_q6_K *b = (const block_q6_K *)wr + i0 + i;
                        a8_prefetch((const uint8_t *)b, sizeof *b, dist);
                        acc = a8_q6k(b, apk + (size_t)i * A8_BYTES, acc);
                    }
                else
                    for (int64_t i = 0; i < ni; i++) {
                        const block_q4_K *b = (const block_q4_K *)wr + i0 + i;
                        a8_prefetch((const uint8_t *)b, sizeof *b, dist);
                        acc = a8_q4k(b, apk + (size_t)i * A8_BYTES, acc);
                    }
                float out[KG_ROWS];
                _mm256_storeu_ps(out, acc);
                for (int c = 0; c < nc; c++)
                    yc[(size_t)c * n_out + r] = out[c];
            }
        }
    }
}

void omni_x86_gemm_k_avx2(int wtype, const void *w, size_t w_row, int64_t n_in, int64_t n_out,
                          const void *xq, size_t xq_row, int64_t n_batch, float *y, int64_t r0,
                          int64_t r1)
{
    /* q6_K's packed kernel wins again from A8_MAX_Q6K rows (its pack then
     * serves many more activation rows than 8) */
    if ((wtype == GGML_TYPE_Q4_K || (wtype == GGML_TYPE_Q6_K && n_batch < A8_MAX_Q6K)) && n_batch >= A8_MIN) {
        /* a remainder of fewer than A8_PAD rows costs less through the
         * packed kernel than padded to 8 (same bits either way) */
        const int64_t rem = n_batch % KG_ROWS, n8 = rem >= A8_PAD ? n_batch : n_batch - rem;
        a8_rows(wtype, w, w_row, n_in, n_out, xq, xq_row, n8, y, r0, r1);
        if (n8 < n_batch)
            omni_x86_gemm_k_run(wtype == GGML_TYPE_Q4_K ? tiles_Q4_K : tiles_Q6_K, wtype, w, w_row, n_in,
                                n_out, (const uint8_t *)xq + (size_t)n8 * xq_row, xq_row, n_batch - n8,
                                y + n8 * n_out, r0, r1);
        return;
    }
    omni_x86_gemm_k_run(wtype == GGML_TYPE_Q4_K ? tiles_Q4_K : wtype == GGML_TYPE_Q5_K ? tiles_Q5_K : tiles_Q6_K,
                        wtype, w, w_row, n_in, n_out, xq, xq_row, n_batch, y, r0, r1);
}

#endif /* __x86_64__ */
