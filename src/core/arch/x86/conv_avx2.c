/* conv_avx2.c - conv_x86.h's kernels for AVX2 + FMA, 8 floats a vector:
 * conv_simd.h compiled under this file's target, a 6 x 16 register tile
 * (12 accumulators of the 16 ymm registers), used from level OMNI_CPU_AVX2
 * when CPUID reports it. */
#if defined(__x86_64__)

#pragma GCC target("avx2,fma,f16c")

#include <immintrin.h>

#define VW 8
#define MR 6
#define ANY(m) _mm256_movemask_ps((__m256)(m))
#define TILE_CASES TILE_CASE(1) TILE_CASE(2) TILE_CASE(3) TILE_CASE(4) TILE_CASE(5) \
    TILE_CASE(6)
#define ROWS(X) X(0) X(1) X(2) X(3) X(4) X(5)
#define SPLAT(x) ((vf)_mm256_set1_ps(x))
#define CONV_NAME "avx2"
#define CONV_TABLE omni_conv_kernels_avx2

#include "conv_simd.h"

#endif /* __x86_64__ */
