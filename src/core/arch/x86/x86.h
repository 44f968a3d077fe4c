/* x86.h - registration of the x86 SIMD kernels into quant.c's per-level
 * tables. Each function overwrites the entries it has a faster kernel for
 * and leaves the others (inherited from the level below) alone. Only call
 * a level's function when omni_cpu() reports that level. */
#ifndef OMNI_ARCH_X86_H
#define OMNI_ARCH_X86_H

#include "src/core/quant.h"
#include "src/core/tensor.h"

/* AVX2 + FMA + F16C kernels. */
void omni_x86_register_avx2(struct omni_quant_ops ops[GGML_TYPE_COUNT]);
/* AVX-512 F/BW/VL/DQ + VNNI kernels. */
void omni_x86_register_avx512(struct omni_quant_ops ops[GGML_TYPE_COUNT]);

#endif
