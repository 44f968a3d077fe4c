/* ops_avx2.c - the compute layer's ops (src/core/ops.h) for AVX2 + FMA +
 * F16C, 8 floats a vector: ops_simd.h compiled under this file's target, the
 * table used from level OMNI_CPU_AVX2 when CPUID reports it. */
#if defined(__x86_64__)

#pragma GCC target("avx2,fma,f16c")

#include <immintrin.h>

#define VW 8
#define LOAD_F16(p) ((vf)_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)(p))))
#define STORE_F16(p, v) \
    _mm_storeu_si128((__m128i *)(void *)(p), _mm256_cvtps_ph((__m256)(v), _MM_FROUND_TO_NEAREST_INT))
#define LOAD_BF16(p) \
    ((vf)_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(const void *)(p))), 16))
#define OPS_NAME "avx2"
#define OPS_FILL omni_ops_fill_avx2

#include "ops_simd.h"

#else

#include "src/core/ops_impl.h"

void omni_ops_fill_avx2(struct omni_ops *ops) { (void)ops; }

#endif /* __x86_64__ */
