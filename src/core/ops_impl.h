/* ops_impl.h - internal to the compute layer (ops.c, ops_ref.c and the
 * per-ISA files under src/core/arch/): the reference table and the scalar
 * polynomials the SIMD versions mirror, and the per-level fill functions.
 * Not for models: they include ops.h. */
#ifndef OMNI_OPS_IMPL_H
#define OMNI_OPS_IMPL_H

#include "src/core/ops.h"

/* The scalar reference table (ops_ref.c). */
extern const struct omni_ops omni_ops_ref;

/* One element through the vector polynomials (ops_ref.c). */
float omni_ref_expf1(float x);
float omni_ref_gelu_erf1(float x);

/* Overwrite the entries of *ops with a level's SIMD versions; call only when
 * omni_cpu() reports the level (src/core/arch/x86/ops_sse.c: the x86-64-v2
 * floor every build runs on; ops_avx2.c, ops_avx512.c). */
void omni_ops_fill_sse(struct omni_ops *ops);
void omni_ops_fill_avx2(struct omni_ops *ops);
void omni_ops_fill_avx512(struct omni_ops *ops);

#endif
