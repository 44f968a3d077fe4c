/* conv_avx512.c - conv_x86.h's kernels for AVX-512F, 16 floats a vector:
 * conv_simd.h compiled under this file's target, a 12 x 32 register tile
 * (24 accumulators: Zen 5 and Skylake-X run two 512-bit FMAs a cycle),
 * used from level OMNI_CPU_AVX512 when CPUID reports it. */
#if defined(__x86_64__)

#pragma GCC target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq")

#include <immintrin.h>

#define VW 16
#define MR 12
#define ANY(m) _mm512_test_epi32_mask((__m512i)(m), (__m512i)(m))
#define TILE_CASES TILE_CASE(1) TILE_CASE(2) TILE_CASE(3) TILE_CASE(4) TILE_CASE(5) \
    TILE_CASE(6) TILE_CASE(7) TILE_CASE(8) TILE_CASE(9) TILE_CASE(10) TILE_CASE(11) \
    TILE_CASE(12)
#define ROWS(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11)
#define SPLAT(x) ((vf)_mm512_set1_ps(x))
#define CONV_NAME "avx512"
#define CONV_TABLE omni_conv_kernels_avx512

#include "conv_simd.h"

#endif /* __x86_64__ */
