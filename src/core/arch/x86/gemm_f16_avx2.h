/* gemm_f16_avx2.h - prompt-size products with F16 weights on AVX2 + FMA +
 * F16C: y = x * W^T with x in floats and W in F16, the F16 -> F32
 * conversion folded into the packing of W (no float copy of W is kept).
 *
 *   float *xp = <omni_x86_gemm_f16_x_bytes(n_in, n_batch) bytes, 64-byte aligned>;
 *   omni_x86_gemm_f16_pack_x(x, n_in, n_batch, xp, ith, nth);   // every thread its share
 *   // then, after all have packed, each thread with its own scratch of
 *   // omni_x86_gemm_f16_scratch(n_in, n_batch) bytes and its columns r0..r1-1:
 *   omni_x86_gemm_f16_avx2(w, n_in, n_out, xp, n_batch, y, r0, r1, scratch);
 *
 * Threads take disjoint column ranges; xp is read-only once packed. An
 * output depends only on its own x row and W row (the sum runs over k in
 * one fixed order), so its bits do not change with the batch size or the
 * column split. */
#ifndef OMNI_GEMM_F16_AVX2_H
#define OMNI_GEMM_F16_AVX2_H

#include <stddef.h>
#include <stdint.h>

/* Bytes of the packed copy of x (n_batch rows of n_in floats, rows
 * padded to a multiple of 6). */
size_t omni_x86_gemm_f16_x_bytes(int64_t n_in, int64_t n_batch);

/* Thread ith of nth packs its share of x into xp (panels of 6 rows per
 * slab of 256 columns). */
void omni_x86_gemm_f16_pack_x(const float *x, int64_t n_in, int64_t n_batch, float *xp, int ith, int nth);

/* KC: the K values of a slab of x panels, as packed by
 * omni_x86_gemm_f16_pack_x (panel p of the slab from k0 starts at
 * xp + k0 * panels * 6 + p * 6 * kw, kw the slab's width). */
#define OMNI_GEMM_F16_KC 256
#define OMNI_GEMM_F16_MR 6

/* Weight rows r .. r + nr - 1 (nr <= 16) of w (n_in F16 values a row),
 * columns k0 .. k0 + kw - 1, converted into b[k * ldb + j] (zero for
 * j >= nr); b and ldb * 4 bytes 32-byte aligned. */
void omni_x86_gemm_f16_pack_w(const void *w, int64_t n_in, int64_t r, int nr, int64_t k0, int kw, float *b,
                              int ldb);

/* Bytes of per-thread scratch (64-byte aligned): 128 KB of converted
 * weights and 3 KB per 6 rows of x for the partial sums between K slabs
 * (386 KB at 512 rows). */
size_t omni_x86_gemm_f16_scratch(int64_t n_in, int64_t n_batch);

/* y[b * n_out + r] = sum_k x[b][k] * W[r][k] for b < n_batch, r0 <= r < r1;
 * w: n_out rows of n_in F16 values (ggml_half); xp: x packed as above. */
void omni_x86_gemm_f16_avx2(const void *w, int64_t n_in, int64_t n_out, const float *xp,
                            int64_t n_batch, float *y, int64_t r0, int64_t r1, void *scratch);

#endif
