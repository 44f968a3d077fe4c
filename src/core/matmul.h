/* matmul.h - products of quantized weight matrices with float activations.
 *
 * A weight matrix W has n_out rows of n_in elements of one ggml type, rows
 * contiguous (row r at W->data + r * ggml_row_size(type, n_in)); this is the
 * GGUF layout where ne[0] = n_in and ne[1] = n_out.
 *
 *   struct omni_tensor w = { .type = GGML_TYPE_Q4_K, .ne = { n_in, n_out }, .data = p };
 *   omni_matmul(tp, &w, x, n_batch, y);   // y[b][r] = sum_k W[r][k] * x[b][k]
 *
 * Small batches quantize x to the weight type's dot type (Q8_0 or Q8_K) and
 * use the SIMD dot kernels picked at startup from CPUID/XGETBV (AVX-512
 * VNNI, AVX2, scalar). With AMX, batches of OMNI_MATMUL_QUANT_MAX rows or
 * more of the quantized types it takes run as int8 tile products. Without,
 * from OMNI_MATMUL_QUANT_MAX rows (4 for q4_K, 3 for q5_K) q8_0, q4_0, q5_0,
 * q4_K, q5_K and q6_K weights go through an int8 GEMM (AVX2 or AVX-512
 * VNNI: a few weight rows x 4 activation rows in registers, each weight
 * block unpacked once per 4 rows; on AVX2 from 4-8 rows 8 activation rows
 * transposed once and broadcast weight dwords), up to a per-type batch size where
 * sgemm catches up (AVX2: q8_0 32, q4_0/q5_0 64, q6_K 128, q5_K 256, q4_K
 * none; AVX-512 VNNI: matmul.c's gemm_range). Other batches of OMNI_MATMUL_BLAS_MIN rows or more
 * dequantize W a block of rows at a time and call OpenBLAS cblas_sgemm.
 * Rows are split across the pool's
 * threads. Thread safety: one call at a time per pool. */
#ifndef OMNI_MATMUL_H
#define OMNI_MATMUL_H

#include <stdint.h>

struct tpool;

/* A read-only view of a 2-D (or 1-D) weight tensor. */
struct omni_tensor {
    int type;          /* enum ggml_type */
    int64_t ne[2];     /* ne[0] = n_in (row length), ne[1] = n_out (rows) */
    const void *data;
};

#define OMNI_MATMUL_BLAS_MIN 32
/* Batches of fewer rows than this always take the per-row quantized dot
 * path: each output is one vec_dot of its weight row and activation row,
 * whatever else is in the batch. Larger batches may take AMX tiles or the
 * int8 GEMM, which also compute every row on its own but sum in another
 * order; a caller that needs results independent of the batch (a
 * deterministic mode) splits its rows into calls of fewer than this many. */
#define OMNI_MATMUL_QUANT_MAX 2

/* 1 when batches of n_a and of n_b rows of weight type (every type when
 * type < 0) take the same kernels on this CPU at its level in use, so that
 * each output row has the same bits in both; 0 when they switch kernels. */
int omni_matmul_same_kernels(int type, int64_t n_a, int64_t n_b);

/* y[n_batch][n_out] = x[n_batch][n_in] * W^T. x and y are row-major floats.
 * tp may be NULL (single-threaded). */
void omni_matmul(struct tpool *tp, const struct omni_tensor *w, const float *x,
                 int64_t n_batch, float *y);

/* y[k] = x * w[k]^T for n_w (at most OMNI_MATMUL_MULTI_MAX) weights that
 * share the input x, each exactly as omni_matmul would compute it (the same
 * bits). One-row products of quantized weights run in one parallel region
 * instead of n_w, each thread quantizing x once (decode's q/k/v and
 * gate/up); so do batches whose weights all take the int8 GEMM of one
 * activation type (x quantized once for all; the engine's multi-sequence
 * decode); anything else is n_w omni_matmul calls. */
#define OMNI_MATMUL_MULTI_MAX 4
void omni_matmul_multi(struct tpool *tp, const struct omni_tensor *const *w, int n_w, const float *x,
                       int64_t n_batch, float *const *y);

/* Row r of W as floats (n_in of them) - for embedding lookups. */
void omni_tensor_get_row(const struct omni_tensor *w, int64_t r, float *out);

#endif
