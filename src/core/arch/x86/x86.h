/* x86.h - the x86 SIMD kernels: registration into quant.c's per-level
 * tables (each function overwrites the entries it has a faster kernel for
 * and leaves the others, inherited from the level below, alone) and the AMX
 * matmul used by matmul.c. Only call a level's code when omni_cpu() reports
 * that level. */
#ifndef OMNI_ARCH_X86_H
#define OMNI_ARCH_X86_H

#include "src/core/quant.h"
#include "src/core/tensor.h"

#include <stddef.h>

/* AVX2 + FMA + F16C kernels. */
void omni_x86_register_avx2(struct omni_quant_ops ops[GGML_TYPE_COUNT]);
/* AVX-512 F/BW/VL/DQ + VNNI kernels. */
void omni_x86_register_avx512(struct omni_quant_ops ops[GGML_TYPE_COUNT]);

/* AMX int8 (level OMNI_CPU_AMX). Weight types it takes: q8_0, q4_0, q5_0,
 * q4_1, q5_1, q4_K, q5_K, q6_K (omni_amx_min_batch), with activations xq in
 * the type's dot type (Q8_0, Q8_1 or Q8_K; row stride xq_row; m_pad =
 * omni_amx_m_pad(n_batch) rows, the extra rows zero). Computes y[m][r] for
 * weight rows r0 <= r < r1 (n_out rows of w_row bytes); y is (n_batch,
 * n_out). scratch: omni_amx_scratch_bytes(n_in, m_pad) bytes, 64-byte
 * aligned, per thread. */
/* Fewest batch rows for which AMX beats the dot kernels for wtype (always
 * >= OMNI_MATMUL_QUANT_MAX); 0 when AMX does not take the type. */
int omni_amx_min_batch(int wtype);
/* Batch rows including the zero padding: 4, 8, or a multiple of 16. */
int64_t omni_amx_m_pad(int64_t n_batch);
size_t omni_amx_scratch_bytes(int64_t n_in, int64_t m_pad);
void omni_amx_matmul(int wtype, const void *w, size_t w_row, int64_t n_in, int64_t n_out,
                     const void *xq, size_t xq_row, int64_t n_batch, int64_t m_pad, float *y,
                     int64_t r0, int64_t r1, void *scratch);

#endif
