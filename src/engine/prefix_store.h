/* prefix_store.h - the prefix cache of one model's KV pool saved to disk and
 * reloaded at start (--prefix-cache-dir), so hot prompts (system prompts,
 * few-shot examples) skip their prefill across restarts.
 *
 * File DIR/<model name>.kvcache:
 *   1. magic "OMNIKVC1"
 *   2. manifest: u32 version (1), u32 kv_type, u32 block_size, u32 n_layer,
 *      u32 kv_dim, u32 n_blocks, u64 model fingerprint (file size, tensor
 *      table and samples of every tensor's bytes)
 *   3. n_blocks records: u64 chain hash, then K and V of each layer
 *      (block_size * kv_dim elements of kv_type each)
 *   4. u64 checksum of everything before it
 * A file whose manifest does not match the model and KV settings, or that
 * is truncated or corrupt, is ignored with a warning.
 *
 *   prefix_store_load(pool, model, dir, name);   // after kv_pool_new
 *   prefix_store_save(pool, model, dir, name);   // before kv_pool_free
 *
 * Thread safety: the caller owns the pool (the engine, outside its thread). */
#ifndef OMNI_PREFIX_STORE_H
#define OMNI_PREFIX_STORE_H

struct kv_pool;
struct llm_model;

/* Writes every hashed block (used or cached). Number of blocks written, or
 * a negative omni_err (with a warning logged). */
int prefix_store_save(struct kv_pool *pool, const struct llm_model *m, const char *dir,
                      const char *name);

/* Loads blocks as cached (evictable) ones, at most half the pool. Number
 * loaded; 0 when the file is absent, mismatched or corrupt (warned). */
int prefix_store_load(struct kv_pool *pool, const struct llm_model *m, const char *dir,
                      const char *name);

#endif
