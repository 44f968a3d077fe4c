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
#define FD_DEFAULT_WIDE_TOKENS 32 /* and OMNI_CUDA_FDW's (H100 job f_w1) */

/* Decode steps (flash decoding): the number of key slices a step of a
 * takes on a card of n_sm SMs - 2 or more when its block tables hold at
 * least min_keys keys and its (token, K/V head) pairs leave SMs idle; 1
 * (the kernel unsplit) for a step of wide_min+ tokens otherwise, whatever
 * its context; 0: not this kernel (short contexts, another shape; min_keys
 * 0 and wide_min 0 turn the two uses off). */
int flash_decode_splits(const struct omni_battn *a, int n_sm, int min_keys, int wide_min);

/* Queues that step with ns = flash_decode_splits(...) slices. *scratch
 * (the slices' partial results; NULL at first; not needed for one slice)
 * is allocated here on the first call outside a graph capture and freed by
 * the caller with cudaFree; false: nothing queued (no scratch while
 * capturing). pdl 1: launched with programmatic stream serialization (the
 * kernel waits for the previous one before reading what it wrote); 2: also
 * sends its key and value rows to L2 before that wait; 0: plain launch. */
bool flash_decode_launch(const struct omni_battn *a, int ns, int n_sm, bool capturing, int pdl,
                         void **scratch, cudaStream_t s);

#endif
