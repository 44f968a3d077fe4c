/* flash_attn.h - prompt attention over the paged KV pool on tensor cores,
 * FlashAttention style (src/core/cuda/flash_attn.cu; used by
 * backend_cuda.cu for steps of more than 64 tokens, docs/gpu.md "Prompt
 * attention"). C++ (nvcc) only. */
#ifndef OMNI_CUDA_FLASH_ATTN_H
#define OMNI_CUDA_FLASH_ATTN_H

#include <cuda_runtime.h>

extern "C" {
#include "src/core/backend.h"
}

/* Queues a->out = softmax(q k^T * scale) v for every token of a on s when
 * the shape is one the kernel takes (F16 or F32 pool, head_dim 64, 128 or
 * 256... see flash_attn.cu), and says whether it did; false: nothing was
 * queued and the caller runs its own kernel. */
bool flash_attn_launch(const struct omni_battn *a, cudaStream_t s);

#endif
