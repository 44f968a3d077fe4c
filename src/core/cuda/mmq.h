/* mmq.h - products of 9-64 activation rows with K-quant weights on int8
 * tensor cores, reading the quantized blocks (src/core/cuda/mmq.cu; used by
 * backend_cuda.cu for the batched decode steps, docs/gpu.md "Batched steps
 * on the quantized blocks"). C++ (nvcc) only. */
#ifndef OMNI_CUDA_MMQ_H
#define OMNI_CUDA_MMQ_H

#include <cuda_runtime.h>
#include <stddef.h>
#include <stdint.h>

#define MMQ_MAX_ROWS 64     /* activation rows a product takes at most */
#define MMQ_DEFAULT_ROWS 32 /* backend_cuda.cu's default (OMNI_CUDA_MMQ) */

/* A matrix as the kernels read it. Q4_K: q = the GGUF rows (144-byte
 * super-blocks, qrb bytes a row). Q6_K: prepare's repacked copy (the mv2
 * one): q = 192 quant bytes a super-block (ql, qh), sc = its 16 int8
 * scales, d = its F16 scale, each array rows x super-blocks in row order. */
struct mmq_w {
    int type; /* GGML_TYPE_Q4_K or GGML_TYPE_Q6_K */
    const uint8_t *q;
    const int8_t *sc;
    const uint16_t *d;
    size_t qrb;
};

/* Whether a product of n rows with w (rows x cols) can run here. */
bool mmq_shape_ok(int type, int64_t rows, int64_t cols, int n);

/* Bytes of the activations' quantized form for n rows of cols: int8
 * values, a float scale per 256 values (Q8_K-like, as the CPU's K-quant
 * dots use), the int16 sum of each 32 values. */
size_t mmq_act_bytes(int n, int cols);

/* x (n rows of cols, F32, 16-byte aligned) into act (mmq_act_bytes). */
cudaError_t mmq_quantize(const float *x, int n, int cols, void *act, cudaStream_t st);

/* y[t][r] = sum_c W[r][c] x[t][c] for t < n from act (mmq_quantize of x);
 * ks > 0 forces the warps a block splits K over (1, 2 or 4), 0 picks them
 * from the shape and the SM count. */
cudaError_t mmq_product(const struct mmq_w *w, int rows, int cols, int n, const void *act,
                        float *y, int n_sm, int ks, cudaStream_t st);

#endif
