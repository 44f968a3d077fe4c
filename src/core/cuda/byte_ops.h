/* byte_ops.h - per-byte integer steps the CUDA kernels share (backend_cuda.cu,
 * mmq.cu). C++ (nvcc) only. */
#ifndef OMNI_CUDA_BYTE_OPS_H
#define OMNI_CUDA_BYTE_OPS_H

#include <stdint.h>

/* Each byte of q minus the same byte of k, for bytes q < 128 and k <= 128
 * (a quant minus its offset: Q4_0's 8, Q6_K's 32), as signed bytes: with
 * bit 7 set first no byte borrows from the next, and flipping it back
 * leaves q - k. The bytes __vsubss4 gives there (nothing saturates), in 3
 * integer operations where sm_90 emulates __vsubss4 with several. */
__device__ __forceinline__ int bytes_minus(uint32_t q, uint32_t k)
{
    return (int)(((q | 0x80808080u) - k) ^ 0x80808080u);
}

#endif
