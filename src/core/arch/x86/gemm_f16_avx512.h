/* gemm_f16_avx512.h - prompt-size products with F16 weights on AVX-512F:
 * gemm_f16_avx2.h's GEMM with 16-float lanes. x is packed by
 * omni_x86_gemm_f16_pack_x (the same panels), so only the scratch size and
 * the product differ:
 *
 *   omni_x86_gemm_f16_pack_x(x, n_in, n_batch, xp, ith, nth);  // all threads
 *   omni_x86_gemm_f16_avx512(w, n_in, n_out, xp, n_batch, y, r0, r1, scratch);
 *   // scratch: omni_x86_gemm_f16_scratch_avx512(n_in, n_batch) bytes, 64-byte aligned
 *
 * Every output is the same chain of multiply-adds over k as in the AVX2
 * kernel, so the two give the same bits, whatever the batch size or the
 * column split. */
#ifndef OMNI_GEMM_F16_AVX512_H
#define OMNI_GEMM_F16_AVX512_H

#include <stddef.h>
#include <stdint.h>

/* Bytes of per-thread scratch: the converted weights of a group and the
 * partial sums between K slabs. */
size_t omni_x86_gemm_f16_scratch_avx512(int64_t n_in, int64_t n_batch);

/* y[b * n_out + r] = sum_k x[b][k] * W[r][k] for b < n_batch, r0 <= r < r1;
 * w: n_out rows of n_in F16 values; xp: x packed by omni_x86_gemm_f16_pack_x. */
void omni_x86_gemm_f16_avx512(const void *w, int64_t n_in, int64_t n_out, const float *xp,
                              int64_t n_batch, float *y, int64_t r0, int64_t r1, void *scratch);

#endif
