/* gemm_lt.h - the batched steps' F16 GEMMs through cuBLASLt with the
 * algorithm timed per shape (src/core/cuda/gemm_lt.cu; used by
 * backend_cuda.cu's gemm_f16, docs/gpu.md "GEMM algorithms timed per
 * shape"). cublasGemmEx takes the heuristic's first pick, which for the
 * few-column products of a decode step (n <= 64 activation rows) leaves most
 * SMs idle; here the candidates are timed once per shape at load and the
 * fastest kept. C++ (nvcc) only. */
#ifndef OMNI_CUDA_GEMM_LT_H
#define OMNI_CUDA_GEMM_LT_H

#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdbool.h>

struct gemm_lt;

/* A tuner with its own cuBLASLt handle and workspace (workspace_bytes of
 * device memory, made here: call outside a graph capture); NULL when
 * cuBLASLt cannot start (the caller keeps cublasGemmEx). */
struct gemm_lt *gemm_lt_new(size_t workspace_bytes);
void gemm_lt_free(struct gemm_lt *g);

/* Time the algorithms for A (rows x cols, F16) at widths 16, 32, ...
 * n_max (rounded up to 16) with scratch made and freed here; each width's
 * fastest then serves every product of that shape and up to that many
 * rows. Call at load, outside a graph capture (it synchronizes the
 * stream); shapes timed before are skipped. 0, or < 0 (an omni error
 * code) when the stream failed. No room for the scratch: nothing timed. */
int gemm_lt_tune(struct gemm_lt *g, cudaStream_t st, const __half *A, int rows, int cols,
                 int n_max);

/* y[n][rows] = x[n][cols] . A[rows][cols]^T (F16 in, F32 accumulate and
 * out) on stream st with the algorithm timed for this shape's width.
 * Returns 1 done, 0 not taken (no timed algorithm, or it does not take
 * this n: run the GEMM elsewhere). Nothing here synchronizes: graph
 * captures record it. */
int gemm_lt_run(struct gemm_lt *g, cudaStream_t st, const __half *A, int rows, int n, int cols,
                const __half *x, float *y);

/* Shapes timed so far and how many took another algorithm than the
 * heuristic's first (OMNI_CUDA_STATS=1 prints them). */
void gemm_lt_stats(const struct gemm_lt *g, int *shapes, int *changed);

#endif
