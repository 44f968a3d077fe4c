/* cblas.h - the few CBLAS declarations omniserve uses, for the bench-only
 * binary (tools/bench_only) on machines without OpenBLAS: bench_only.c
 * implements them in plain C. Enum values are the CBLAS standard's. */
#ifndef OMNI_BENCH_ONLY_CBLAS_H
#define OMNI_BENCH_ONLY_CBLAS_H

enum CBLAS_ORDER { CblasRowMajor = 101, CblasColMajor = 102 };
enum CBLAS_TRANSPOSE { CblasNoTrans = 111, CblasTrans = 112, CblasConjTrans = 113 };

void cblas_sgemm(enum CBLAS_ORDER order, enum CBLAS_TRANSPOSE ta, enum CBLAS_TRANSPOSE tb, int m,
                 int n, int k, float alpha, const float *a, int lda, const float *b, int ldb,
                 float beta, float *c, int ldc);
void openblas_set_num_threads(int n);
char *openblas_get_corename(void);

#endif
