/* gemm_act8_inl.h - the activation pack the act8 GEMMs share (gemm_avx2.c,
 * gemm_avx512.c; its 8x8 dword transpose also serves gemm_k_avx2.c and
 * gemm_k_avx512.c): block i of up to 8 Q8_0 activation rows transposed so
 * that register k holds dword k of each row, beside the rows' scales and 8 x
 * their offset corrections. static inline, compiled under the including
 * file's target. Include after <immintrin.h> and x86.h. */
#ifndef OMNI_GEMM_ACT8_INL_H
#define OMNI_GEMM_ACT8_INL_H

/* Prefetches into L1 the cache lines that start within [block + dist,
 * block + dist + bytes): the K-quant 8-row kernels (gemm_k_avx2.c,
 * gemm_k_avx512.c) read their weight rows as one stream and call it for
 * each block they read; dist 0: nothing. */
static inline __attribute__((always_inline)) void act8_prefetch_ahead(const uint8_t *block, size_t bytes,
                                                                      size_t dist)
{
    if (!dist)
        return;
    const uintptr_t p = (uintptr_t)block + dist;
    for (uintptr_t l = (p + 63) & ~(uintptr_t)63; l < p + bytes; l += 64)
        _mm_prefetch((const char *)l, _MM_HINT_T0);
}

/* 8x8 transpose of 32-bit elements: v[L] dword k -> v[k] dword L. */
static inline __attribute__((always_inline)) void transpose8_epi32(__m256i v[8])
{
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
    /* u[j] (j < 4): dword j of rows 0-3 (low half: dword j, high: j + 4);
     * u[4 + j] the same for rows 4-7 */
    for (int j = 0; j < 4; j++) {
        v[j] = _mm256_permute2x128_si256(u[j], u[4 + j], 0x20);
        v[j + 4] = _mm256_permute2x128_si256(u[j], u[4 + j], 0x31);
    }
}

/* Writes block i of rows [0, nc) (row c at xq + c * xq_row, its scales and
 * corrections at ad / corr + c * nbp) to o: 8 registers, then 8 floats at
 * o + 256 and 8 int32 at o + 288; rows nc..7 are zero (no contribution,
 * dropped on store). The 8 registers are also left in r[] (r[k] at o + k)
 * for a caller that stores more of them. */
static inline __attribute__((always_inline)) void
act8_transpose_block(const uint8_t *xq, size_t xq_row, const float *ad, const int32_t *corr, int nc,
                     int64_t i, int64_t nbp, uint8_t *o, __m256i r[8])
{
    __m256i v[8];
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
    transpose8_epi32(v);
    for (int k = 0; k < 4; k++) {
        r[k] = v[k];
        r[k + 4] = v[k + 4];
        _mm256_storeu_si256((__m256i *)o + k, r[k]);
        _mm256_storeu_si256((__m256i *)o + k + 4, r[k + 4]);
    }
}

#endif
