/* bench_only.c - `bench_only ARGS` = `omniserve bench ARGS` without the
 * server's libraries: for machines that have a compiler but none of the
 * Debian packages (the GPU host's CPU, tools/device_thread_scaling.sh).
 * It links the forward pass (src/core, llm/) and pcre2 only; OpenBLAS is
 * replaced by the plain sgemm below, which only batches of 32 or more rows
 * (prompts) and prefill attention reach - decode speed is unaffected, prompt
 * speed is not representative. Built by hand, not by make:
 *   cc -O2 -march=native -pthread -I. -Itools/bench_only tools/bench_only/bench_only.c \
 *      src/cli/bench.c src/cli/bench_util.c src/cli/args.c ... -lpcre2-8 -lm
 * (the script has the file list). */
#include "src/cli/cli.h"

#include <cblas.h>
#include <stddef.h>

/* C = alpha * op(A) * op(B) + beta * C, row-major only (all omniserve asks). */
void cblas_sgemm(enum CBLAS_ORDER order, enum CBLAS_TRANSPOSE ta, enum CBLAS_TRANSPOSE tb, int m,
                 int n, int k, float alpha, const float *a, int lda, const float *b, int ldb,
                 float beta, float *c, int ldc)
{
    if (order != CblasRowMajor)
        return;
    for (int i = 0; i < m; i++)
        for (int j = 0; j < n; j++) {
            float s = 0;
            if (ta == CblasNoTrans && tb == CblasTrans) { /* both rows contiguous */
                const float *ar = a + (size_t)i * lda, *br = b + (size_t)j * ldb;
                for (int p = 0; p < k; p++)
                    s += ar[p] * br[p];
            } else {
                for (int p = 0; p < k; p++) {
                    const float av = ta == CblasNoTrans ? a[(size_t)i * lda + p] : a[(size_t)p * lda + i];
                    const float bv = tb == CblasNoTrans ? b[(size_t)p * ldb + j] : b[(size_t)j * ldb + p];
                    s += av * bv;
                }
            }
            float *cv = c + (size_t)i * ldc + j;
            *cv = alpha * s + (beta == 0 ? 0 : beta * *cv);
        }
}

void openblas_set_num_threads(int n)
{
    (void)n;
}

char *openblas_get_corename(void)
{
    static char name[] = "bench_only";
    return name;
}

int main(int argc, char **argv)
{
    return cli_bench(argc, argv);
}
