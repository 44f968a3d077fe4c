/* conv_sse.c - conv_x86.h's kernels for the binary's floor (x86-64-v2,
 * SSE4.2: level "scalar"), 4 floats a vector: conv_simd.h compiled without
 * a target pragma, a 6 x 8 register tile (12 of the 16 xmm registers). */
#define VW 4
#define MR 6
#if defined(__x86_64__)
#include <immintrin.h>
#define ANY(m) _mm_movemask_ps((__m128)(m))
#else
#define ANY(m) ((m)[0] | (m)[1] | (m)[2] | (m)[3])
#endif
#define TILE_CASES TILE_CASE(1) TILE_CASE(2) TILE_CASE(3) TILE_CASE(4) TILE_CASE(5) \
    TILE_CASE(6)
#define ROWS(X) X(0) X(1) X(2) X(3) X(4) X(5)
#define SPLAT(x) ((vf){ (x), (x), (x), (x) })
#define CONV_NAME "sse4"
#define CONV_TABLE omni_conv_kernels_sse

#include "conv_simd.h"
