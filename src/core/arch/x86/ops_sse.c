/* ops_sse.c - the compute layer's ops (src/core/ops.h) for the binary's
 * floor, x86-64-v2 (SSE4.2), 4 floats a vector: ops_simd.h compiled without
 * a target pragma, the table of level OMNI_CPU_SCALAR (CPUs without AVX2).
 * No F16C there: halves widen through exact bit arithmetic, and the
 * f32 -> f16 rounding stays the reference's. */
#if defined(__x86_64__)

#include <stdint.h>
#include <string.h>

#define VW 4

/* IEEE half -> float, exact: the half's bits moved into a float's place
 * and scaled by 2^112 (normals and subnormals alike), Inf/NaN by hand */
static inline float h2f_bits(uint16_t h)
{
    const uint32_t sign = (uint32_t)(h & 0x8000) << 16, em = h & 0x7fff;
    uint32_t u;
    float f;
    if (em >= 0x7c00) {
        u = sign | 0x7f800000u | ((em & 0x3ffu) << 13);
    } else {
        u = em << 13;
        memcpy(&f, &u, 4);
        f *= 0x1p112f;
        memcpy(&u, &f, 4);
        u |= sign;
    }
    memcpy(&f, &u, 4);
    return f;
}

static inline float bf2f_bits(uint16_t h)
{
    const uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

#define LOAD_F16(p) ((vf){ h2f_bits((p)[0]), h2f_bits((p)[1]), h2f_bits((p)[2]), h2f_bits((p)[3]) })
#define LOAD_BF16(p) ((vf){ bf2f_bits((p)[0]), bf2f_bits((p)[1]), bf2f_bits((p)[2]), bf2f_bits((p)[3]) })
/* unused: omni_ops_fill_sse puts the reference's rounding back */
#define STORE_F16(p, v) ({ const vf v_ = (v); omni_ops_ref.f32_to_f16((const float *)&v_, (p), VW); })
#define OPS_NAME "sse4"
#define OPS_FILL ops_fill_sse_all

#include "ops_simd.h"

void omni_ops_fill_sse(struct omni_ops *ops)
{
    ops_fill_sse_all(ops);
    ops->f32_to_f16 = omni_ops_ref.f32_to_f16;
}

#else

#include "src/core/ops_impl.h"

void omni_ops_fill_sse(struct omni_ops *ops) { (void)ops; }

#endif /* __x86_64__ */
