/* vec_simd.h - the GNU vector type of VW floats and its loads and stores,
 * shared by the generic-vector kernels (ops_simd.h, conv_simd.h), which each
 * file compiles at its own ISA level with VW set (4, 8 or 16 lanes).
 * Loads and stores go through memcpy: no alignment is assumed. */
#ifndef OMNI_VEC_SIMD_H
#define OMNI_VEC_SIMD_H

#include <stdint.h>
#include <string.h>

typedef float vf __attribute__((vector_size(VW * 4)));
typedef int32_t vi __attribute__((vector_size(VW * 4)));

static inline vf ld(const float *p) { vf v; memcpy(&v, p, sizeof v); return v; }
static inline void st(float *p, vf v) { memcpy(p, &v, sizeof v); }
/* the first k lanes (k < VW), the rest zero */
static inline vf ld_part(const float *p, int64_t k)
{
    vf v = { 0 };
    memcpy(&v, p, (size_t)k * sizeof(float));
    return v;
}
static inline void st_part(float *p, vf v, int64_t k) { memcpy(p, &v, (size_t)k * sizeof(float)); }
static inline vf splat(float x) { return (vf){ 0 } + x; }

#endif
