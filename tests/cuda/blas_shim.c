/* blas_shim.c - the three CBLAS / OpenBLAS calls omniserve makes, in plain
 * C, for the GPU test binary (make test-cuda BLAS_SHIM=1) on machines that
 * have a compiler and CUDA but not OpenBLAS's headers (the GPU host). Only
 * CPU prefill of 32+ rows reaches cblas_sgemm, i.e. the CPU side of the
 * comparisons, on tiny models; compile with -Itools/bench_only for cblas.h. */
#include <cblas.h>
#include <stddef.h>

/* C = alpha * op(A) * op(B) + beta * C, row-major (all omniserve asks). */
void cblas_sgemm(enum CBLAS_ORDER order, enum CBLAS_TRANSPOSE ta, enum CBLAS_TRANSPOSE tb, int m,
                 int n, int k, float alpha, const float *a, int lda, const float *b, int ldb,
                 float beta, float *c, int ldc)
{
    if (order != CblasRowMajor)
        return;
    for (int i = 0; i < m; i++)
        for (int j = 0; j < n; j++) {
            float s = 0;
            for (int p = 0; p < k; p++)
                s += (ta == CblasNoTrans ? a[(size_t)i * lda + p] : a[(size_t)p * lda + i]) *
                     (tb == CblasNoTrans ? b[(size_t)p * ldb + j] : b[(size_t)j * ldb + p]);
            float *cv = c + (size_t)i * ldc + j;
            *cv = alpha * s + (beta == 0 ? 0 : beta * *cv);
        }
}

void openblas_set_num_threads(int n) { (void)n; }

char *openblas_get_corename(void)
{
    static char name[] = "blas_shim";
    return name;
}
