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

/* Int8 GEMM for small batches of the weights whose dot type is Q8_0 (q8_0,
 * q4_0, q5_0): AVX2 (level OMNI_CPU_AVX2) and AVX-512 VNNI (OMNI_CPU_AVX512).
 * _offset_<isa>(wtype) is the weight offset K the kernel works with, or -1
 * when it does not take the type. xq holds n_batch activation rows in Q8_0
 * (stride xq_row); omni_x86_gemm_q8_0_prep(K, ...) fills, per activation row,
 * omni_x86_gemm_q8_0_blocks(n_in) block scales ad and offset corrections
 * corr (the padding block zero). The kernel computes y[b][r] for r0 <= r < r1;
 * y is (n_batch, n_out). Each result depends only on its weight row and
 * activation row (a fixed summation order), not on the rest of the batch. */
int omni_x86_gemm_q8_0_offset_avx2(int wtype);
int omni_x86_gemm_q8_0_offset_avx512(int wtype);
static inline int64_t omni_x86_gemm_q8_0_blocks(int64_t n_in)
{
    return (n_in / 32 + 1) & ~(int64_t)1;
}
void omni_x86_gemm_q8_0_prep(int offset, const void *xq, size_t xq_row, int64_t n_batch,
                             int64_t n_in, float *ad, int32_t *corr);
/* From OMNI_X86_GEMM_AVX2_GROUP_MIN batch rows the AVX2 kernel packs
 * q4_0/q5_0 weights 8 rows at a time into scratch
 * (omni_x86_gemm_q8_0_avx2_scratch(n_in) bytes per thread) and multiplies 8
 * rows per register; below that (the packing did not pay off, measured) it
 * keeps 2 x 4 register tiles. Rows agree bit for bit within each range. */
#define OMNI_X86_GEMM_AVX2_GROUP_MIN 8
size_t omni_x86_gemm_q8_0_avx2_scratch(int64_t n_in);
void omni_x86_gemm_q8_0_avx2(int wtype, const void *w, size_t w_row, int64_t n_in, int64_t n_out,
                             const void *xq, size_t xq_row, const float *ad, const int32_t *corr,
                             int64_t n_batch, float *y, int64_t r0, int64_t r1, void *scratch);
void omni_x86_gemm_q8_0_avx512(int wtype, const void *w, size_t w_row, int64_t n_in, int64_t n_out,
                               const void *xq, size_t xq_row, const float *ad, const int32_t *corr,
                               int64_t n_batch, float *y, int64_t r0, int64_t r1);

#endif
