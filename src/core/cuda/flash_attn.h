/* flash_attn.h - attention over the paged KV pool on tensor cores
 * (src/core/cuda/flash_attn.cu; used by backend_cuda.cu): FlashAttention
 * style for steps of more than 64 tokens, flash decoding for decode steps
 * over long contexts (docs/gpu.md "Prompt attention", "Decode over long
 * contexts"). C++ (nvcc) only. */
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

#define FD_DEFAULT_MIN_KEYS 1024 /* backend_cuda.cu's default (OMNI_CUDA_FD) */

/* Decode steps over long contexts (flash decoding): the number of key
 * slices a step of a takes on a card of n_sm SMs when its block tables
 * hold at least min_keys keys (0: not this kernel - short contexts, a
 * large batch, another shape; min_keys 0 turns it off). */
int flash_decode_splits(const struct omni_battn *a, int n_sm, int min_keys);

/* Queues that step with ns = flash_decode_splits(...) slices. *scratch
 * (the slices' partial results; NULL at first) is allocated here on the
 * first call outside a graph capture and freed by the caller with
 * cudaFree; false: nothing queued (no scratch while capturing). */
bool flash_decode_launch(const struct omni_battn *a, int ns, int n_sm, bool capturing,
                         void **scratch, cudaStream_t s);

#endif
