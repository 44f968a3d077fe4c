/* model_dev.h - the llama / qwen2 / qwen3 forward on a compute backend
 * (src/core/backend.h: "cuda", or "cpu" for tests): weights uploaded in
 * their GGUF quantized layout, the paged KV pool in backend memory with the
 * same block tables as the host's, every op of the step on the backend;
 * per step only tokens, positions and block tables go in and logits (or
 * their argmax) come out.
 *
 *   struct llm_dev_params p = llm_dev_default_params();   // "cuda", 512 tokens
 *   p.n_blocks = 0;                // pool: 90% of the free GPU memory
 *   struct llm_dev *d = llm_dev_new(m, &p, err, sizeof err);
 *   llm_dev_attach(d, ctx);        // llm_forward(ctx, ...) now runs on the GPU
 *   int32_t next;                  // or, without the host logits:
 *   llm_dev_forward(d, &batch, seqs, NULL, &next);
 *   llm_dev_free(d);               // after the last llm_forward on ctx
 *
 * The device keeps its own KV pool (block_size x n_blocks slots, F16, or F32
 * with LLM_DEV_KV_F32): llm_forward's llm_kv is only checked for the same
 * geometry, its host storage is not touched (llm_kv_new_shape makes one
 * without any). Sequences are addressed by the
 * block tables exactly as on the CPU, so the engine's bookkeeping (prefix
 * sharing, preemption) carries over.
 *
 * Not yet on the device (llm_dev_new says so): gemma2/3, phi3, qwen3moe,
 * smollm3, sliding windows, LongRoPE.
 *
 * Thread safety: a llm_dev belongs to one thread at a time; the model must
 * outlive it. */
#ifndef OMNI_MODEL_DEV_H
#define OMNI_MODEL_DEV_H

#include "model.h"

#include <stdint.h>

struct llm_dev;

/* kv_type: 0 for the default (F16), or GGML_TYPE_F32 / GGML_TYPE_F16.
 * n_blocks 0 sizes the pool from the device: mem_fraction (0: 0.9) of the
 * memory free after the weights, buffers and matmul scratch, at most
 * n_blocks_max blocks (0: no cap; a backend that does not know its free
 * memory, "cpu", then needs n_blocks_max). */
struct llm_dev_params {
    const char *backend;   /* "cuda" (default) or "cpu" */
    int device;            /* GPU index */
    int max_tokens;        /* tokens per forward */
    int block_size;        /* KV slots per block */
    int n_blocks;          /* KV blocks in the pool, or 0 (above) */
    int kv_type;
    int n_blocks_max;
    double mem_fraction;
};
struct llm_dev_params llm_dev_default_params(void);

struct llm_dev *llm_dev_new(const struct llm_model *m, const struct llm_dev_params *p, char *err,
                            size_t errlen);
void llm_dev_free(struct llm_dev *d);
/* The backend's device name, e.g. "NVIDIA H100 80GB HBM3". */
const char *llm_dev_device(const struct llm_dev *d);
/* Bytes of backend memory the weights and the KV pool take. */
size_t llm_dev_weight_bytes(const struct llm_dev *d);
size_t llm_dev_kv_bytes(const struct llm_dev *d);
/* Bytes of weights one decoded token reads (every matrix it multiplies;
 * token_embd only when tied as the output). */
size_t llm_dev_decode_bytes(const struct llm_dev *d);

/* llm_forward's contract, run on the backend: logits of the want_logits
 * tokens into logits (host, may be NULL) and their argmax into argmax (host,
 * may be NULL: only the indices cross the bus). Returns rows or a negative
 * omni_err. The batch is checked as llm_forward checks it. */
int llm_dev_forward(struct llm_dev *d, const struct llm_batch *batch,
                    const struct llm_seq_view *seqs, float *logits, int32_t *argmax);

/* llm_dev_forward with a choice of logit rows: row_logits[r] (r < the
 * returned rows) says whether output row r's logits go to logits + r *
 * n_vocab; the argmax of every row goes to argmax. row_logits NULL: all
 * rows. Greedy sequences then cost 4 bytes of transfer instead of n_vocab
 * floats. Decode steps of fewer than 32 tokens run as CUDA graphs, one per
 * (tokens, output rows, block-table width) shape, recorded the second time
 * a shape comes (OMNI_DEV_GRAPHS=0: never). */
int llm_dev_forward_rows(struct llm_dev *d, const struct llm_batch *batch,
                         const struct llm_seq_view *seqs, float *logits, const bool *row_logits,
                         int32_t *argmax);

/* The pool's size in blocks (n_blocks, or what the device memory holds). */
int llm_dev_n_blocks(const struct llm_dev *d);

/* Copy the first n_slots token slots of every layer's K and V from block
 * src to block dst of the device pool (the engine's copy-on-write of a
 * partial block when a request forks into n > 1 choices). 0 or an error. */
int llm_dev_copy_block(struct llm_dev *d, int dst, int src, int n_slots);

/* Make llm_forward(ctx, ...) run on d (llm_ctx_set_forward). d must outlive
 * that use; ctx's model must be d's. */
void llm_dev_attach(struct llm_dev *d, struct llm_ctx *ctx);

#endif
