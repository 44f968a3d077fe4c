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

void omni_x86_gemm_k_avx512(int wtype, const void *w, size_t w_row, int64_t n_in, int64_t n_out,
                            const void *xq, size_t xq_row, int64_t n_batch, float *y, int64_t r0,
                            int64_t r1)
{
    omni_x86_gemm_k_run(wtype == GGML_TYPE_Q4_K ? tiles_Q4_K : wtype == GGML_TYPE_Q5_K ? tiles_Q5_K : tiles_Q6_K,
                        wtype, w, w_row, n_in, n_out, xq, xq_row, n_batch, y, r0, r1);
}

#endif /* __x86_64__ */
