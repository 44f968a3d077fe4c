/* sgemm_fast.c - a register-blocked AVX2/FMA cblas_sgemm for tools/bench_only
 * on machines without OpenBLAS (the GPU host's CPU), so that a prompt's
 * float products (prefill attention: Q K^T and P V) do not dominate pp
 * numbers the way bench_only.c's plain loop does. Row-major only (all
 * omniserve asks); any transposes; alpha and beta as BLAS defines them.
 * B is packed per 16-column panel into [p][16] floats (op(B) read once per
 * panel), then tiles of 4 rows x 16 columns are kept in 8 registers.
 * Not part of the server build: tools/device_intel_i.sh links it in place
 * of bench_only.c's sgemm (compiled with -Dcblas_sgemm=...). */
#include <cblas.h>

#include <immintrin.h>
#include <stdlib.h>
#include <string.h>

#define NR 16 /* columns per panel */
#define MR 4  /* rows per register tile */

static float a_at(const float *a, int lda, int ta, int i, int p)
{
    return ta ? a[(size_t)p * lda + i] : a[(size_t)i * lda + p];
}

/* C[i][j0 .. j0 + nc) for rows i0 .. i0 + mr (mr <= MR) from the panel bp
 * (k x NR floats, columns past nc zero). */
__attribute__((target("avx2,fma"))) static void tile(int mr, int nc, int k, const float *a, int lda, int ta,
                                                     int i0, const float *bp, float alpha, float beta,
                                                     float *c, int ldc, int j0)
{
    __m256 acc[MR][2];
    for (int r = 0; r < MR; r++)
        acc[r][0] = acc[r][1] = _mm256_setzero_ps();
    if (!ta && mr == MR) {
        const float *a0 = a + (size_t)i0 * lda;
        for (int p = 0; p < k; p++) {
            const __m256 b0 = _mm256_loadu_ps(bp + (size_t)p * NR), b1 = _mm256_loadu_ps(bp + (size_t)p * NR + 8);
#pragma GCC unroll 4
            for (int r = 0; r < MR; r++) {
                const __m256 av = _mm256_broadcast_ss(a0 + (size_t)r * lda + p);
                acc[r][0] = _mm256_fmadd_ps(av, b0, acc[r][0]);
                acc[r][1] = _mm256_fmadd_ps(av, b1, acc[r][1]);
            }
        }
    } else {
        for (int p = 0; p < k; p++) {
            const __m256 b0 = _mm256_loadu_ps(bp + (size_t)p * NR), b1 = _mm256_loadu_ps(bp + (size_t)p * NR + 8);
            for (int r = 0; r < mr; r++) {
                const __m256 av = _mm256_set1_ps(a_at(a, lda, ta, i0 + r, p));
                acc[r][0] = _mm256_fmadd_ps(av, b0, acc[r][0]);
                acc[r][1] = _mm256_fmadd_ps(av, b1, acc[r][1]);
            }
        }
    }
    for (int r = 0; r < mr; r++) {
        float out[NR];
        _mm256_storeu_ps(out, acc[r][0]);
        _mm256_storeu_ps(out + 8, acc[r][1]);
        float *cr = c + (size_t)(i0 + r) * ldc + j0;
        for (int j = 0; j < nc; j++)
            cr[j] = alpha * out[j] + (beta == 0 ? 0 : beta * cr[j]);
    }
}

void cblas_sgemm(enum CBLAS_ORDER order, enum CBLAS_TRANSPOSE ta, enum CBLAS_TRANSPOSE tb, int m,
                 int n, int k, float alpha, const float *a, int lda, const float *b, int ldb,
                 float beta, float *c, int ldc)
{
    if (order != CblasRowMajor || m <= 0 || n <= 0)
        return;
    const int at = ta != CblasNoTrans, bt = tb != CblasNoTrans;
    float *bp = aligned_alloc(64, ((size_t)(k > 0 ? k : 1) * NR * sizeof(float) + 63) / 64 * 64);
    if (!bp)
        return;
    for (int j0 = 0; j0 < n; j0 += NR) {
        const int nc = n - j0 < NR ? n - j0 : NR;
        /* panel: op(B)[p][j0 + j], zero past nc */
        for (int p = 0; p < k; p++) {
            float *o = bp + (size_t)p * NR;
            for (int j = 0; j < NR; j++)
                o[j] = j >= nc ? 0.0f : bt ? b[(size_t)(j0 + j) * ldb + p] : b[(size_t)p * ldb + j0 + j];
        }
        for (int i0 = 0; i0 < m; i0 += MR)
            tile(m - i0 < MR ? m - i0 : MR, nc, k, a, lda, at, i0, bp, alpha, beta, c, ldc, j0);
    }
    free(bp);
}
