/* kv_pool.h - the paged KV block pool of one model, with its prefix-cache index.
 *
 * A pool owns one llm_kv (n_blocks blocks of block_size token slots, K and V
 * per layer) and hands out block ids with reference counts. Every block is in
 * exactly one state:
 *   free    ref 0, no hash, on the free list
 *   used    ref > 0 (one reference per block table holding it), maybe hashed
 *   cached  ref 0 with a hash: still found by kv_pool_lookup, on an LRU list,
 *           its hash dropped (evicted) when an allocation finds no free block
 *
 *   struct kv_pool *p = kv_pool_new(model, GGML_TYPE_F16, 16, 1024, err, sizeof err);
 *   int b = kv_pool_alloc(p);          // ref 1, or -1 when every block is used
 *   kv_pool_publish(p, b, h);          // b is full: index it under chain hash h
 *   int c = kv_pool_lookup(p, h);      // later: a block holding h, or -1
 *   if (c >= 0) kv_pool_ref(p, c);     // share it
 *   kv_pool_unref(p, b);               // ref 0: cached when hashed, else free
 *   kv_pool_free(p);
 *
 * Only full blocks are hashed, and a full block is never written again, so a
 * hashed block may be shared by any number of sequences.
 * Thread safety: none; the engine thread owns its pools. */
#ifndef OMNI_KV_POOL_H
#define OMNI_KV_POOL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct llm_model;
struct llm_kv;
struct kv_pool;

/* Bytes one block takes for model m with this KV type and block size: K and
 * V of every layer with attention (lfm2's conv blocks and the Gated DeltaNet
 * layers have none); 0 for an unsupported type (Q8_0 with a kv_dim not a
 * multiple of 32) or overflow. State snapshots are not in it: they live in
 * the pool's snapshot store, sized on its own (kv_pool_set_snap_slots). */
size_t kv_pool_block_bytes(const struct llm_model *m, int type, int block_size);
/* Bytes of one state snapshot of a model with recurrent state; 0 without. */
size_t kv_pool_snap_bytes(const struct llm_model *m);

struct kv_pool *kv_pool_new(const struct llm_model *m, int type, int block_size, int n_blocks,
                            char *err, size_t errlen);
/* The same pool whose llm_kv has no K/V storage (llm_kv_new_shape): the
 * blocks' contents live on a device (llm/model_dev.h); kv_pool_copy is then
 * a no-op and the device copies (llm_dev_copy_block). */
struct kv_pool *kv_pool_new_shape(const struct llm_model *m, int type, int block_size,
                                  int n_blocks, char *err, size_t errlen);
void kv_pool_free(struct kv_pool *p);

struct llm_kv *kv_pool_kv(struct kv_pool *p); /* owned by p; attention reads it */
int kv_pool_n_blocks(const struct kv_pool *p);
int kv_pool_block_size(const struct kv_pool *p);
int kv_pool_n_free(const struct kv_pool *p);   /* free list only */
int kv_pool_n_cached(const struct kv_pool *p); /* ref 0 but hashed (evictable) */
int kv_pool_n_used(const struct kv_pool *p);   /* ref > 0 */
/* Blocks an allocation can still get: free + cached. */
int kv_pool_n_available(const struct kv_pool *p);

/* A block with ref 1: from the free list, else the least recently released
 * cached block (its hash is dropped). -1 when every block is used. */
int kv_pool_alloc(struct kv_pool *p);
void kv_pool_ref(struct kv_pool *p, int block);
void kv_pool_unref(struct kv_pool *p, int block);
int kv_pool_ref_count(const struct kv_pool *p, int block);

/* Index used block `block` under hash. Returns true when it is now indexed;
 * false when it already was, or when another block holds that hash (then
 * this one stays unhashed and goes back to the free list when released). */
bool kv_pool_publish(struct kv_pool *p, int block, uint64_t hash);
/* A block (used or cached) holding hash, or -1. Does not take a reference. */
int kv_pool_lookup(const struct kv_pool *p, uint64_t hash);
/* The hash a block is indexed under; false when it is not hashed. */
bool kv_pool_block_hash(const struct kv_pool *p, int block, uint64_t *hash);

/* Models with recurrent state (llm_model_has_state): a store of snapshots
 * of a sequence's state after a block's last token (llm_model_state_floats
 * floats), which the forward filling the block writes (llm_batch.state_snap)
 * and a sequence resuming after this block's prefix copies into its slot.
 * A block owns at most one; its slot goes back when the block is freed or
 * evicted. A new pool has none: set_snap_slots drops every snapshot and
 * makes n slots (at most n_blocks; 0: none); OMNI_ERR_NOMEM. */
int kv_pool_set_snap_slots(struct kv_pool *p, int n, char *err, size_t errlen);
int kv_pool_n_snap_slots(const struct kv_pool *p); /* all of them, taken or free */
int kv_pool_n_snaps(const struct kv_pool *p);      /* held by a block */
/* snapshots taken from a block for another since the store was sized */
uint64_t kv_pool_snap_evictions(const struct kv_pool *p);
/* The block's snapshot, giving it a slot when it has none: a free one, else
 * the one with the lowest priority (GreedyDual: epoch + level + 1; the
 * oldest among equals), provided that is no more than the new one's; the
 * pool's epoch then rises to the evicted priority. `level` is the caller's
 * worth of it (the engine: higher for blocks kept by a coarser thinning,
 * and for where a prompt ends); `epoch` is kv_pool_snap_epoch when the
 * writing sequence started, so one chain's snapshots compete by level
 * alone (thinned evenly) while older chains fall behind newer ones. NULL
 * when the store is empty or every snapshot is worth more (the block then
 * keeps none). Slots taken since the last kv_pool_snap_pin (none before
 * the first) are never evicted: the engine pins before building a step,
 * whose forward writes the snapshots it took. */
float *kv_pool_snap_take(struct kv_pool *p, int block, int level, uint64_t epoch);
uint64_t kv_pool_snap_epoch(const struct kv_pool *p);
void kv_pool_snap_pin(struct kv_pool *p);
/* A sequence resumed from the block's snapshot: its priority is renewed at
 * the current epoch. */
void kv_pool_snap_touch(struct kv_pool *p, int block);
/* Give up the block's snapshot (not one pinned); false when it had none. */
bool kv_pool_snap_drop(struct kv_pool *p, int block);
/* Hand src's snapshot to dst when dst has none (a recomputed block whose
 * twin holds its hash: the indexed one is what lookups find). */
void kv_pool_snap_move(struct kv_pool *p, int dst, int src);
/* The block's snapshot, or NULL when it keeps none. */
float *kv_pool_block_state(struct kv_pool *p, int block);

/* Copy the first n_slots token slots of every layer's K and V from block src
 * to block dst (copy-on-write of a partially filled block). */
void kv_pool_copy(struct kv_pool *p, int dst, int src, int n_slots);

/* Check every invariant (states partition the blocks, list links, counts,
 * index consistency). 0, or OMNI_ERR_FORMAT with the first violation in err. */
int kv_pool_check(const struct kv_pool *p, char *err, size_t errlen);

/* ---- prefix hashing ----
 * The hash of a full block chains its parent's hash with the block's keys:
 * token ids for text positions, kv_hash_media_key() for embedding positions. */
uint64_t kv_hash_block(uint64_t parent, const uint64_t *keys, int n);
uint64_t kv_hash_media_key(uint64_t media_hash, int offset);
#define KV_HASH_ROOT 0x6f6d6e69u /* parent of a sequence's first block */

#endif
