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
/* The same sources compiled a second time for level OMNI_CPU_AVXVNNI (AVX2 +
 * AVX-VNNI): quants_avxvnni.c includes quants_avx2.c after
 * `#pragma GCC target("avxvnni")` with `#define omni_x86_register_avx2
 * omni_x86_register_avxvnni`, and the kernels take `#ifdef __AVXVNNI__`
 * forms at their multiply-add sites (VEX vpdpbusd into int32, the same
 * exact integer sums as vpmaddubsw + vpmaddwd: the same bits as AVX2).
 * Likewise quants_lowbit_avxvnni.c, gemm_avxvnni.c and gemm_k_avxvnni.c,
 * which rename every function the included file exports. */
void omni_x86_register_avxvnni(struct omni_quant_ops ops[GGML_TYPE_COUNT]);
/* quants_lowbit_avx2.c's twin (its AVX2 form: quant_lowbit.h). */
void omni_x86_register_lowbit_avxvnni(struct omni_quant_ops ops[GGML_TYPE_COUNT]);
/* AVX-512 F/BW/VL/DQ kernels, then those that also need VNNI. */
void omni_x86_register_avx512(struct omni_quant_ops ops[GGML_TYPE_COUNT]);
void omni_x86_register_avx512vnni(struct omni_quant_ops ops[GGML_TYPE_COUNT]);
/* The VNNI level's q4_0 (five 0) / q5_0 (five 1) one-row decode form for
 * tests: vbmi 1 with the byte permutes and bit shuffle (only where
 * omni_cpu() has avx512_vbmi and avx512_bitalg), 0 without; both the same
 * bits. As vec_dot_prep, with prep from that level's act_prep. */
void omni_x86_q40w4_rows(int five, int vbmi, int64_t n, const void *w, size_t w_row, int64_t n_rows,
                         const void *a, const float *prep, float *y);

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
 * q4_0, q5_0): AVX2 (level OMNI_CPU_AVX2) and AVX-512 VNNI (OMNI_CPU_AVX512VNNI).
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
/* From omni_x86_gemm_act8_min_avx2(wtype) batch rows the AVX2 kernel
 * transposes the activations 8 rows at a time into scratch
 * (omni_x86_gemm_q8_0_avx2_scratch(n_in) bytes per thread; the last 8
 * padded with zero rows) and multiplies 4 weight rows x 8 activation rows
 * per register tile (q8_0), or transposes 8 weight rows per block in
 * registers against each activation row (q4_0/q5_0, no scratch); below
 * that it keeps 2 x 4 tiles. Rows agree bit for
 * bit within each range (INT32_MAX: the type has no act8 range). */
int omni_x86_gemm_act8_min_avx2(int wtype);
size_t omni_x86_gemm_q8_0_avx2_scratch(int64_t n_in);
void omni_x86_gemm_q8_0_avx2(int wtype, const void *w, size_t w_row, int64_t n_in, int64_t n_out,
                             const void *xq, size_t xq_row, const float *ad, const int32_t *corr,
                             int64_t n_batch, float *y, int64_t r0, int64_t r1, void *scratch);
/* Level avxvnni's twins (gemm_avxvnni.c: gemm_avx2.c built with AVX-VNNI):
 * the same contracts and bits as the _avx2 functions. */
int omni_x86_gemm_q8_0_offset_avxvnni(int wtype);
int omni_x86_gemm_act8_min_avxvnni(int wtype);
size_t omni_x86_gemm_q8_0_avxvnni_scratch(int64_t n_in);
void omni_x86_gemm_q8_0_avxvnni(int wtype, const void *w, size_t w_row, int64_t n_in, int64_t n_out,
                                const void *xq, size_t xq_row, const float *ad, const int32_t *corr,
                                int64_t n_batch, float *y, int64_t r0, int64_t r1, void *scratch);
/* From omni_x86_gemm_act8_min_avx512(wtype) batch rows (INT32_MAX: none)
 * the VNNI kernel takes the same 8-activation-row form, with the AVX2 act8
 * kernel's bits. */
int omni_x86_gemm_act8_min_avx512(int wtype);
void omni_x86_gemm_q8_0_avx512(int wtype, const void *w, size_t w_row, int64_t n_in, int64_t n_out,
                               const void *xq, size_t xq_row, const float *ad, const int32_t *corr,
                               int64_t n_batch, float *y, int64_t r0, int64_t r1);

/* Int8 GEMM for the K-quants (q4_K, q5_K, q6_K; activations Q8_K, stride
 * xq_row, n_batch rows): AVX2 (vpmaddubsw) and AVX-512 VNNI (vpdpbusd on
 * 256 bits). Weights are repacked per call, one super-block of 8 rows at a
 * time, into OMNI_X86_GEMM_K_PACK_BYTES on the stack (lane L of every
 * register = weight row L); computes y[b][r] for r0 <= r < r1, y (n_batch,
 * n_out). Every (weight row, activation row) pair sums its exact int32
 * super-block dot and then takes the same float steps in the same order at
 * both levels, so a result depends only on its two rows: not on the batch,
 * the thread split, nor on AVX2 vs AVX-512. */
int omni_x86_gemm_k_takes(int wtype);
#define OMNI_X86_GEMM_K_PACK_BYTES 2368
/* Byte offsets in a packed super-block of 8 rows; "reg" = 32 bytes, 8 int32
 * lanes. q4_K/q5_K: QS 32 regs (reg k = dword k of each row's qs), QH 8 regs
 * (q5_K: dword k of qh), SC 8 regs (scale j as int16 twice), MN 4 regs (mins
 * 2p and 2p+1 as int16), D and DMIN 8 floats. q6_K: QL 32 regs, QH 16 regs,
 * SC 16 regs (the 16-element scale s as int16 twice), SCP 8 regs (scales 2p
 * and 2p+1), D 8 floats. */
enum {
    OMNI_KP_QS = 0, OMNI_KP_QH = 1024, OMNI_KP_SC = 1280, OMNI_KP_MN = 1536, OMNI_KP_D = 1664,
    OMNI_KP_DMIN = 1696,
    OMNI_KP6_QL = 0, OMNI_KP6_QH = 1024, OMNI_KP6_SC = 1536, OMNI_KP6_SCP = 2048, OMNI_KP6_D = 2304,
};
/* One super-block i of nr <= 8 weight rows (w: the first, stride w_row) in
 * the kernels' layout (gemm_k_avx2.c); rows nr..7 zero. pk: 32-byte aligned. */
void omni_x86_gemm_k_pack(int wtype, const uint8_t *w, size_t w_row, int nr, int64_t i, uint8_t *pk);
/* The loop both levels share: per 8 weight rows and up to 64 activation
 * rows, each super-block packed once, then tiles(pk, xq rows, xq_row, i,
 * acc, n) adds super-block i of n activation rows into acc (8 floats per
 * activation row, lane L = weight row L, 32-byte aligned). */
typedef void (*omni_x86_gemm_k_tiles_fn)(const uint8_t *pk, const uint8_t *xq, size_t xq_row,
                                         int64_t i, float *acc, int n);
void omni_x86_gemm_k_run(omni_x86_gemm_k_tiles_fn tiles, int wtype, const void *w, size_t w_row,
                         int64_t n_in, int64_t n_out, const void *xq, size_t xq_row, int64_t n_batch,
                         float *y, int64_t r0, int64_t r1);
void omni_x86_gemm_k_avx2(int wtype, const void *w, size_t w_row, int64_t n_in, int64_t n_out,
                          const void *xq, size_t xq_row, int64_t n_batch, float *y, int64_t r0,
                          int64_t r1);
/* Level avxvnni's twin (gemm_k_avxvnni.c: gemm_k_avx2.c built with AVX-VNNI). */
void omni_x86_gemm_k_avxvnni(int wtype, const void *w, size_t w_row, int64_t n_in, int64_t n_out,
                             const void *xq, size_t xq_row, int64_t n_batch, float *y, int64_t r0,
                             int64_t r1);
void omni_x86_gemm_k_avx512(int wtype, const void *w, size_t w_row, int64_t n_in, int64_t n_out,
                            const void *xq, size_t xq_row, int64_t n_batch, float *y, int64_t r0,
                            int64_t r1);

/* Prompts (gemm_prompt_avx512.c): from omni_x86_gemm_prompt_min_avx512(wtype)
 * batch rows (INT32_MAX: not this type) the VNNI kernel's blocked form, 16
 * weight rows per panel packed once per group of activation rows, with the
 * act8 form's bits. The same arguments as omni_x86_gemm_q8_0_avx512 (ad and
 * corr from omni_x86_gemm_q8_0_prep with omni_x86_gemm_q8_0_offset_avx512),
 * n_in >= 32, and per-thread scratch of
 * omni_x86_gemm_prompt_avx512_scratch(n_in, n_batch) bytes. */
int omni_x86_gemm_prompt_min_avx512(int wtype);
size_t omni_x86_gemm_prompt_avx512_scratch(int64_t n_in, int64_t n_batch);
void omni_x86_gemm_prompt_avx512(int wtype, const void *w, size_t w_row, int64_t n_in, int64_t n_out,
                                 const void *xq, size_t xq_row, const float *ad, const int32_t *corr,
                                 int64_t n_batch, float *y, int64_t r0, int64_t r1, void *scratch);

#endif
