/* conv_x86.h - the kernels behind src/core/conv1d.c: a direct-convolution
 * GEMM over time-major rows and the Snake activation, one build per CPU
 * level (conv_sse.c for the x86-64-v2 floor, conv_avx2.c, conv_avx512.c:
 * conv_simd.h compiled under each file's target), picked by conv1d.c from
 * omni_cpu_level().
 *
 *   struct omni_conv_gemm g = { .a = x, .lda = c_in, .m = t_out, .tap_off = offs,
 *                               .n_taps = k, .c_in = c_in, .b = packed, .n = c_out,
 *                               .c = y, .ldc = c_out, .bias = b };
 *   omni_conv_kernels_at(level)->gemm(&g, m0, m1, n0, n1);   // a thread's share
 *
 * The product: for rows r < m and columns o < n,
 *   C[r][o] = snake_out(init + sum_{j < n_taps} sum_{i < c_in} A[r*lda + tap_off[j] + i] * B(j, i, o))
 * with init = bias[o] (0 without bias) + resid[r*ldr + o] (without resid: 0),
 * B packed as [n / OMNI_CONV_NR][n_taps * c_in][OMNI_CONV_NR] (columns past n
 * zero). A convolution's taps are row offsets into its input (no im2col).
 * Each output sums its products in one order fixed by (n_taps, c_in, n) and
 * the level, so rows do not change with how the rows are split or chunked.
 * Thread safety: pure functions of their arguments; threads take disjoint
 * (row, column) ranges of C. */
#ifndef OMNI_CONV_X86_H
#define OMNI_CONV_X86_H

#include <stddef.h>
#include <stdint.h>

#define OMNI_CONV_NR 32          /* output channels per packed group */
#define OMNI_CONV_MAX_TAPS 64    /* taps a GEMM may have */

struct omni_conv_gemm {
    const float *a;              /* A rows, stride lda floats */
    int64_t lda, m;
    const int64_t *tap_off;      /* [n_taps]: offset (floats) of tap j from a row's start */
    int n_taps, c_in;
    const float *b;              /* packed weights */
    int n;                       /* output columns */
    float *c;                    /* C rows, stride ldc */
    int64_t ldc;
    const float *bias;           /* [n] or NULL */
    const float *resid;          /* rows of n, stride ldr, or NULL; may be c itself */
    int64_t ldr;
    const float *snake_out;      /* [n] Snake alphas applied last, or NULL */
};

struct omni_conv_kernels {
    const char *name;
    int mr;                      /* rows per register tile (the split granularity) */
    /* C rows [m0, m1), columns [n0, n1) (n0 a multiple of OMNI_CONV_NR) */
    void (*gemm)(const struct omni_conv_gemm *g, int64_t m0, int64_t m1, int n0, int n1);
    /* y[t][i] = x[t][i] + sin(alpha[i] x[t][i])^2 / (alpha[i] + 1e-9), rows of c
     * floats at strides ldx / ldy; y may be x */
    void (*snake)(const float *x, int64_t ldx, int64_t t, int c, const float *alpha, float *y,
                  int64_t ldy);
};

extern const struct omni_conv_kernels omni_conv_kernels_sse;
extern const struct omni_conv_kernels omni_conv_kernels_avx2;
extern const struct omni_conv_kernels omni_conv_kernels_avx512;

#endif
