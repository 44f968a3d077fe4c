/* ops_avx512.c - the compute layer's ops (src/core/ops.h) for AVX-512
 * F/BW/VL/DQ, 16 floats a vector: ops_simd.h compiled under this file's
 * target, the table used from level OMNI_CPU_AVX512 (VNNI not needed) when
 * CPUID reports it. */
#if defined(__x86_64__)

#pragma GCC target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq")

#include <immintrin.h>

#define VW 16
#define LOAD_F16(p) ((vf)_mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(const void *)(p))))
#define STORE_F16(p, v) \
    _mm256_storeu_si256((__m256i *)(void *)(p), _mm512_cvtps_ph((__m512)(v), _MM_FROUND_TO_NEAREST_INT))
#define LOAD_BF16(p) \
    ((vf)_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(const void *)(p))), 16))
#define OPS_NAME "avx512"
#define OPS_FILL omni_ops_fill_avx512

#include "ops_simd.h"

#else

#include "src/core/ops_impl.h"

void omni_ops_fill_avx512(struct omni_ops *ops) { (void)ops; }

#endif /* __x86_64__ */
