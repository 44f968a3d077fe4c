/* gemm_k_avx512.c - int8 GEMM for batches of K-quant weights (q4_K, q5_K,
 * q6_K against Q8_K activations), AVX-512 VNNI.
 *
 * The layout is gemm_k_avx2.c's (8 weight rows transposed per super-block,
 * one lane per row, packed by omni_x86_gemm_k_pack); vpdpbusd on 256-bit
 * registers with broadcast activation dwords replaces vpmaddubsw, the int16
 * adds and vpmaddwd, and sums each sub-block's 32 products (16 for q6_K)
 * into int32 lanes that vpmulld scales. The int32 super-block sums, and the
 * float steps after them, are those of the AVX2 kernel, so both levels give
 * the same bits. (256 bits, not 512: the packing and the per-row lanes stay
 * shared, and Zen 4 splits 512-bit operations in two anyway.) */
#if defined(__x86_64__)

#pragma GCC target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512vnni")

#include "x86.h"

#include <immintrin.h>
#include <string.h>
#include "gemm_act8_inl.h"

#define KG_COLS 4 /* activation rows per register tile */

static inline __m256i bcast4(const int8_t *p)
{
    int32_t v;
    memcpy(&v, p, 4);
    return _mm256_set1_epi32(v);
}

static inline __m256i q5_hbit(__m256i qh, int j)
{
    const __m256i h = j < 4 ? _mm256_slli_epi16(qh, 4 - j) : _mm256_srli_epi16(qh, j - 4);
    return _mm256_and_si256(h, _mm256_set1_epi8(0x10));
}

static inline __m256i q6_hbits(__m256i qh, int g)
{
    const __m256i h = g < 2 ? _mm256_slli_epi16(qh, 4 - 2 * g) : g == 2 ? qh : _mm256_srli_epi16(qh, 2);
    return _mm256_and_si256(h, _mm256_set1_epi8(0x30));
}

/* Dwords k0..k0+n-1 of W against the activation bytes q + 4k: the int32
 * dot per lane, in two chains for vpdpbusd's latency. */
static inline __attribute__((always_inline)) __m256i dot_dwords(const __m256i *W, const int8_t *q, int k0, int n)
{
    __m256i d0 = _mm256_dpbusd_epi32(_mm256_setzero_si256(), W[k0], bcast4(q + 4 * k0));
    __m256i d1 = _mm256_dpbusd_epi32(_mm256_setzero_si256(), W[k0 + 1], bcast4(q + 4 * k0 + 4));
    _Pragma("GCC unroll 4") for (int k = k0 + 2; k < k0 + n; k += 2) {
        d0 = _mm256_dpbusd_epi32(d0, W[k], bcast4(q + 4 * k));
        d1 = _mm256_dpbusd_epi32(d1, W[k + 1], bcast4(q + 4 * k + 4));
    }
    return _mm256_add_epi32(d0, d1);
}

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
        _Pragma("GCC unroll 8") for (int ch = 0; ch < 8; ch++) {
            const int h = ch / 4, g = ch % 4;
            __m256i W[8];
            _Pragma("GCC unroll 8") for (int k = 0; k < 8; k++) {
                const __m256i lo = _mm256_srli_epi16(_mm256_load_si256(QL + 16 * h + 8 * (g & 1) + k), 4 * (g >> 1));
                W[k] = _mm256_or_si256(_mm256_and_si256(lo, m4), q6_hbits(_mm256_load_si256(QH + 8 * h + k), g));
            }
            /* the packed int16 pair (sc, sc) >> 16: sc sign-extended */
            const __m256i s0 = _mm256_srai_epi32(_mm256_load_si256(SC + 2 * ch), 16);
            const __m256i s1 = _mm256_srai_epi32(_mm256_load_si256(SC + 2 * ch + 1), 16);
            _Pragma("GCC unroll 8") for (int c = 0; c < NC; c++) {
                const int8_t *q = a[c]->qs + 32 * ch;
                const __m256i lo = _mm256_mullo_epi32(dot_dwords(W, q, 0, 4), s0);
                const __m256i hi = _mm256_mullo_epi32(dot_dwords(W, q, 4, 4), s1);
                sumi[c] = _mm256_add_epi32(sumi[c], _mm256_add_epi32(lo, hi));
            }
        }
        const __m256i *SCP = (const __m256i *)(pk + OMNI_KP6_SCP);
        const __m256 D = _mm256_load_ps((const float *)(pk + OMNI_KP6_D));
        _Pragma("GCC unroll 8") for (int c = 0; c < NC; c++) {
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
    _Pragma("GCC unroll 8") for (int j = 0; j < 8; j++) {
        __m256i W[8];
        _Pragma("GCC unroll 8") for (int k = 0; k < 8; k++) {
            W[k] = _mm256_and_si256(_mm256_srli_epi16(_mm256_load_si256(QS + 8 * (j / 2) + k), 4 * (j & 1)), m4);
            if (WT == GGML_TYPE_Q5_K)
                W[k] = _mm256_or_si256(W[k], q5_hbit(_mm256_load_si256(QH + k), j));
        }
        const __m256i sc = _mm256_srli_epi32(_mm256_load_si256(SC + j), 16);
        _Pragma("GCC unroll 8") for (int c = 0; c < NC; c++)
            sumi[c] = _mm256_add_epi32(sumi[c], _mm256_mullo_epi32(dot_dwords(W, a[c]->qs + 32 * j, 0, 8), sc));
    }
    const __m256i *MN = (const __m256i *)(pk + OMNI_KP_MN);
    const __m256 D = _mm256_load_ps((const float *)(pk + OMNI_KP_D));
    const __m256 DMIN = _mm256_load_ps((const float *)(pk + OMNI_KP_DMIN));
    _Pragma("GCC unroll 8") for (int c = 0; c < NC; c++) {
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

// ---- 8 activation rows interleaved ------------------------------------------

/* gemm_k_avx2.c's a8 form with vpdpbusd: per call, each super-block of 8
 * activation rows is transposed once (register k lane c = dword k of row
 * c's qs; the 8 scales; the bsums pairs), each weight super-block is
 * unpacked once into 256 unsigned bytes on the stack and its dwords are
 * broadcast from there into tiles of A8_R weight rows x 8 activation rows;
 * no per-call weight packing. A sub-block's 32 (q6_K: 16) products sum
 * exactly in int32 and vpmulld scales them: the super-block sums and float
 * steps are k_tile's, so the bits are the packed kernel's (kernel_id 4). */
#define A8_BYTES (64 * 32 + 8 * 4 + 8 * 32) /* per super-block: qs, d, bsums */
#define A8_D 2048
#define A8_BS 2080
#define A8_SB 32 /* super-blocks per pass: a row of 8192 (75 KB on the stack) */
#ifndef OMNI_X86_A8K_R
#define OMNI_X86_A8K_R 4 /* weight rows per tile: each activation load serves 4 */
#endif
#define A8_R OMNI_X86_A8K_R
/* Fewest batch rows (a benchmark knob); q6_K below A8_MAX_Q6K rows, as at
 * AVX2. */
#ifndef OMNI_X86_A8K_MIN
#define OMNI_X86_A8K_MIN 8
#endif
#define A8_MAX_Q6K 32
#define A8_PAD 4 /* fewest remainder rows padded to 8 */

static void a8k_pack(int wtype, const uint8_t *xq, size_t xq_row, int nc, int64_t i, uint8_t *o)
{
    int32_t *bs = (int32_t *)(o + A8_BS);
    for (int k0 = 0; k0 < 64; k0 += 8) {
        __m256i v[8];
        for (int c = 0; c < 8; c++)
            v[c] = c < nc ? _mm256_loadu_si256((const __m256i *)(((const block_q8_K *)(xq + (size_t)c * xq_row) + i)->qs + 4 * k0))
                          : _mm256_setzero_si256();
        transpose8_epi32(v);
        for (int j = 0; j < 4; j++) {
            _mm256_store_si256((__m256i *)o + k0 + j, v[j]);
            _mm256_store_si256((__m256i *)o + k0 + j + 4, v[j + 4]);
        }
    }
    for (int c = 0; c < 8; c++) {
        if (c >= nc) {
            ((float *)(o + A8_D))[c] = 0.0f;
            for (int p = 0; p < 8; p++)
                bs[8 * p + c] = 0;
            continue;
        }
        const block_q8_K *a = (const block_q8_K *)(xq + (size_t)c * xq_row) + i;
        ((float *)(o + A8_D))[c] = a->d;
        if (wtype == GGML_TYPE_Q6_K) { /* register p = (b[2p], b[2p+1]) */
            for (int p = 0; p < 8; p++)
                memcpy(bs + 8 * p + c, a->bsums + 2 * p, 4);
        } else { /* register p = (b[4p] + b[4p+1], b[4p+2] + b[4p+3]) */
            int32_t bs2[4];
            _mm_storeu_si128((__m128i *)bs2, _mm_hadd_epi16(_mm_loadu_si128((const __m128i *)a->bsums),
                                                            _mm_loadu_si128((const __m128i *)(a->bsums + 8))));
            for (int p = 0; p < 4; p++)
                bs[8 * p + c] = bs2[p];
        }
    }
}

/* The 256 unsigned weights of super-block b in element order. */
static inline __attribute__((always_inline)) void a8k_unpack(const int WT, const uint8_t *blk, uint8_t *st)
{
    const __m256i m4 = _mm256_set1_epi8(0x0f);
    if (WT == GGML_TYPE_Q6_K) {
        const block_q6_K *b = (const block_q6_K *)blk;
#pragma GCC unroll 2
        for (int h = 0; h < 2; h++) {
            const __m256i ql0 = _mm256_loadu_si256((const __m256i *)(b->ql + 64 * h));
            const __m256i ql1 = _mm256_loadu_si256((const __m256i *)(b->ql + 64 * h + 32));
            const __m256i qh = _mm256_loadu_si256((const __m256i *)(b->qh + 32 * h));
#pragma GCC unroll 4
            for (int g = 0; g < 4; g++) {
                const __m256i lo = _mm256_srli_epi16(g & 1 ? ql1 : ql0, 4 * (g >> 1));
                _mm256_store_si256((__m256i *)(st + 128 * h + 32 * g),
                                   _mm256_or_si256(_mm256_and_si256(lo, m4), q6_hbits(qh, g)));
            }
        }
        return;
    }
    const block_q4_K *b = (const block_q4_K *)blk;
#pragma GCC unroll 4
    for (int p = 0; p < 4; p++) { /* sub-blocks 2p (low nibbles) and 2p + 1 */
        const __m256i q = _mm256_loadu_si256((const __m256i *)(b->qs + 32 * p));
        _mm256_store_si256((__m256i *)(st + 64 * p), _mm256_and_si256(q, m4));
        _mm256_store_si256((__m256i *)(st + 64 * p + 32), _mm256_and_si256(_mm256_srli_epi16(q, 4), m4));
    }
}

/* q4_K's 6-bit scales and mins (gemm_k_avx2.c's k4_scales): byte j of *sc
 * / *mn = sub-block j's. */
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

typedef int32_t a8k_i32u __attribute__((aligned(1), may_alias));

/* How far ahead of the super-block being read a8k_tile prefetches each
 * row's stream, in bytes (0: none): the AVX2 twin's a8_prefetch, which
 * took the 8-row decode there from waiting on memory (docs/benchmarks.md,
 * "AVX2 level on Zen 5"). Each block prefetches the lines that start
 * within its own bytes that far on. */
#ifndef A8K_PF_DIST
#define A8K_PF_DIST 4096
#endif

/* acc[r] (8 activation rows) += super-blocks [0, n) of the pack for NR
 * weight rows (row r at w + r * w_row, super-block i0 + j). */
static inline __attribute__((always_inline)) void
a8k_tile(const int WT, const uint8_t *w, size_t w_row, int64_t i0, int64_t n, const uint8_t *apk,
         __m256 *acc_io, const int NR)
{
    const size_t bsz = WT == GGML_TYPE_Q6_K ? sizeof(block_q6_K) : sizeof(block_q4_K);
    uint8_t st[A8_R][256] __attribute__((aligned(32)));
    __m256 acc[A8_R];
#pragma GCC unroll 4
    for (int r = 0; r < NR; r++)
        acc[r] = acc_io[r];
    for (int64_t j = 0; j < n; j++) {
        const uint8_t *o = apk + (size_t)j * A8_BYTES;
        const __m256i *A = (const __m256i *)o;
#pragma GCC unroll 4
        for (int r = 0; r < NR; r++) {
            const uint8_t *blk = w + (size_t)r * w_row + (size_t)(i0 + j) * bsz;
            act8_prefetch_ahead(blk, bsz, A8K_PF_DIST > 0 ? (size_t)A8K_PF_DIST : 0);
            a8k_unpack(WT, blk, st[r]);
        }
        /* the barrier keeps GCC from turning the broadcast loads back into
         * extracts of the registers just stored */
        __asm__ volatile("" : : "r"(st) : "memory");
        __m256i sumi[A8_R];
#pragma GCC unroll 4
        for (int r = 0; r < NR; r++)
            sumi[r] = _mm256_setzero_si256();
        /* 16 groups of 16 elements (4 activation registers each): q4_K's
         * sub-block j = groups 2j, 2j + 1 (one scale), q6_K's scale s =
         * group s */
#pragma GCC unroll 2
        for (int s = 0; s < 16; s += 2) {
            __m256i d0[A8_R], d1[A8_R];
#pragma GCC unroll 4
            for (int r = 0; r < NR; r++)
                d0[r] = d1[r] = _mm256_setzero_si256();
#pragma GCC unroll 4
            for (int k = 0; k < 4; k++) {
                const __m256i a0 = _mm256_load_si256(A + 4 * s + k), a1 = _mm256_load_si256(A + 4 * s + 4 + k);
#pragma GCC unroll 4
                for (int r = 0; r < NR; r++) {
                    d0[r] = _mm256_dpbusd_epi32(d0[r], _mm256_set1_epi32(*(const a8k_i32u *)(st[r] + 16 * s + 4 * k)), a0);
                    d1[r] = _mm256_dpbusd_epi32(d1[r], _mm256_set1_epi32(*(const a8k_i32u *)(st[r] + 16 * s + 16 + 4 * k)), a1);
                }
            }
#pragma GCC unroll 4
            for (int r = 0; r < NR; r++) {
                const uint8_t *blk = w + (size_t)r * w_row + (size_t)(i0 + j) * bsz;
                if (WT == GGML_TYPE_Q6_K) {
                    const int8_t *sc = ((const block_q6_K *)blk)->scales;
                    sumi[r] = _mm256_add_epi32(sumi[r], _mm256_add_epi32(_mm256_mullo_epi32(d0[r], _mm256_set1_epi32(sc[s])),
                                                                         _mm256_mullo_epi32(d1[r], _mm256_set1_epi32(sc[s + 1]))));
                } else {
                    uint64_t sc, mn;
                    k4_scales(((const block_q4_K *)blk)->scales, &sc, &mn);
                    const int scj = (int)((sc >> (4 * s)) & 0xff); /* sub-block s / 2 */
                    sumi[r] = _mm256_add_epi32(sumi[r], _mm256_mullo_epi32(_mm256_add_epi32(d0[r], d1[r]), _mm256_set1_epi32(scj)));
                }
            }
        }
        const __m256 ad = _mm256_load_ps((const float *)(o + A8_D));
#pragma GCC unroll 4
        for (int r = 0; r < NR; r++) {
            const uint8_t *blk = w + (size_t)r * w_row + (size_t)(i0 + j) * bsz;
            if (WT == GGML_TYPE_Q6_K) {
                const block_q6_K *b = (const block_q6_K *)blk;
                /* the -32 offset: 32 * sum_s sc[s] * bsums[s], two scales per vpmaddwd */
                __m256i off = _mm256_setzero_si256();
#pragma GCC unroll 8
                for (int p = 0; p < 8; p++) {
                    const uint32_t pr = (uint32_t)(uint16_t)(int16_t)b->scales[2 * p] |
                                        (uint32_t)(uint16_t)(int16_t)b->scales[2 * p + 1] << 16;
                    off = _mm256_add_epi32(off, _mm256_madd_epi16(_mm256_set1_epi32((int)pr),
                                                                  _mm256_load_si256((const __m256i *)(o + A8_BS) + p)));
                }
                const __m256i si = _mm256_sub_epi32(sumi[r], _mm256_slli_epi32(off, 5));
                acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(si), _mm256_mul_ps(ad, _mm256_set1_ps(_cvtsh_ss(b->d))), acc[r]);
            } else {
                const block_q4_K *b = (const block_q4_K *)blk;
                uint64_t sc, mn;
                k4_scales(b->scales, &sc, &mn);
                __m256i summ = _mm256_setzero_si256();
#pragma GCC unroll 4
                for (int p = 0; p < 4; p++) {
                    const uint32_t m2 = (uint32_t)(mn >> (16 * p)) & 0xff, m2b = (uint32_t)(mn >> (16 * p + 8)) & 0xff;
                    summ = _mm256_add_epi32(summ, _mm256_madd_epi16(_mm256_set1_epi32((int)(m2 | m2b << 16)),
                                                                    _mm256_load_si256((const __m256i *)(o + A8_BS) + p)));
                }
                const __m256 v = _mm256_fmsub_ps(_mm256_set1_ps(_cvtsh_ss(b->d)), _mm256_cvtepi32_ps(sumi[r]),
                                                 _mm256_mul_ps(_mm256_set1_ps(_cvtsh_ss(b->dmin)), _mm256_cvtepi32_ps(summ)));
                acc[r] = _mm256_fmadd_ps(ad, v, acc[r]);
            }
        }
    }
#pragma GCC unroll 4
    for (int r = 0; r < NR; r++)
        acc_io[r] = acc[r];
}

#define A8K_CASE(WT, nr)                                                                        \
    case nr: a8k_tile(WT, w, w_row, i0, n, apk, acc, (nr) < A8_R ? (nr) : A8_R); break

#define A8K_TILES(WT, name)                                                                     \
    static void name(const uint8_t *w, size_t w_row, int64_t i0, int64_t n, const uint8_t *apk, \
                     __m256 *acc, int nr)                                                       \
    {                                                                                           \
        switch (nr) {                                                                           \
            A8K_CASE(WT, 1); A8K_CASE(WT, 2); A8K_CASE(WT, 3); default:                         \
            a8k_tile(WT, w, w_row, i0, n, apk, acc, A8_R);                                      \
            break;                                                                              \
        }                                                                                       \
    }

A8K_TILES(GGML_TYPE_Q4_K, a8k_q4k)
A8K_TILES(GGML_TYPE_Q6_K, a8k_q6k)

static void a8k_rows(int wtype, const uint8_t *w, size_t w_row, int64_t n_in, int64_t n_out, const uint8_t *xq,
                     size_t xq_row, int64_t n_batch, float *y, int64_t r0, int64_t r1)
{
    _Alignas(64) uint8_t apk[A8_SB * A8_BYTES];
    const int64_t nsb = n_in / QK_K;
    for (int64_t c0 = 0; c0 < n_batch; c0 += 8) {
        const int nc = n_batch - c0 < 8 ? (int)(n_batch - c0) : 8;
        const uint8_t *xc = xq + (size_t)c0 * xq_row;
        float *yc = y + c0 * n_out;
        for (int64_t i0 = 0; i0 < nsb; i0 += A8_SB) {
            const int64_t ni = nsb - i0 < A8_SB ? nsb - i0 : A8_SB;
            for (int64_t i = 0; i < ni; i++)
                a8k_pack(wtype, xc, xq_row, nc, i0 + i, apk + (size_t)i * A8_BYTES);
            for (int64_t r = r0; r < r1; r += A8_R) {
                const int nr = r1 - r < A8_R ? (int)(r1 - r) : A8_R;
                __m256 acc[A8_R];
                for (int k = 0; k < nr; k++) { /* a later pass: the sums so far, parked in y */
                    float in[8] = { 0 };
                    if (i0)
                        for (int c = 0; c < nc; c++)
                            in[c] = yc[(size_t)c * n_out + r + k];
                    acc[k] = _mm256_loadu_ps(in);
                }
                (wtype == GGML_TYPE_Q6_K ? a8k_q6k : a8k_q4k)(w + (size_t)r * w_row, w_row, i0, ni, apk, acc, nr);
                for (int k = 0; k < nr; k++) {
                    float out[8];
                    _mm256_storeu_ps(out, acc[k]);
                    for (int c = 0; c < nc; c++)
                        yc[(size_t)c * n_out + r + k] = out[c];
                }
            }
        }
    }
}

void omni_x86_gemm_k_avx512(int wtype, const void *w, size_t w_row, int64_t n_in, int64_t n_out,
                            const void *xq, size_t xq_row, int64_t n_batch, float *y, int64_t r0,
                            int64_t r1)
{
    if ((wtype == GGML_TYPE_Q4_K || (wtype == GGML_TYPE_Q6_K && n_batch < A8_MAX_Q6K)) && n_batch >= OMNI_X86_A8K_MIN &&
        n_in >= QK_K) {
        /* a remainder of fewer than A8_PAD rows goes to the packed kernel
         * (same bits either way) */
        const int64_t rem = n_batch % 8, n8 = rem >= A8_PAD ? n_batch : n_batch - rem;
        a8k_rows(wtype, w, w_row, n_in, n_out, xq, xq_row, n8, y, r0, r1);
        if (n8 < n_batch)
            omni_x86_gemm_k_run(wtype == GGML_TYPE_Q4_K ? tiles_Q4_K : tiles_Q6_K, wtype, w, w_row, n_in, n_out,
                                (const uint8_t *)xq + (size_t)n8 * xq_row, xq_row, n_batch - n8, y + n8 * n_out, r0, r1);
        return;
    }
    omni_x86_gemm_k_run(wtype == GGML_TYPE_Q4_K ? tiles_Q4_K : wtype == GGML_TYPE_Q5_K ? tiles_Q5_K : tiles_Q6_K,
                        wtype, w, w_row, n_in, n_out, xq, xq_row, n_batch, y, r0, r1);
}

#endif /* __x86_64__ */
