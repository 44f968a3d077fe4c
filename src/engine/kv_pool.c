/* kv_pool.c - reference-counted KV blocks, the prefix-cache hash index and
 * LRU eviction of released cached blocks.
 *
 * The free list is a stack through next; the LRU list of cached blocks is
 * doubly linked (head = least recently released, evicted first); the index is
 * a power-of-two bucket array with chains through hnext. Models with
 * recurrent state also get a store of state snapshots owned by blocks,
 * evicted by priority (GreedyDual) when full. */
#include "kv_pool.h"

#include "llm/model.h"
#include "src/core/omni.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct kv_block {
    int32_t ref;
    int32_t prev, next;  /* LRU links when cached; next = free-list link when free */
    int32_t hnext;       /* index chain when hashed */
    int32_t snap;        /* its state snapshot slot, or -1 */
    bool hashed;
    uint64_t hash;
};

struct kv_pool {
    struct llm_kv *kv;
    int n_blocks, block_size;
    size_t slot_bytes;           /* one token slot of one layer's K (or V) */
    struct kv_block *b;          /* [n_blocks] */
    int32_t free_head;
    int n_free, n_cached;
    int32_t lru_head, lru_tail;
    int32_t *bucket;             /* [mask + 1] first block of each chain, -1 if none */
    uint32_t mask;
    /* models with recurrent state: the snapshot store, [n_snap][state_floats]
     * snapshots of the state after a block's last token, written by the
     * forward that fills it, each owned by one block (kv_pool_set_snap_slots) */
    float *snap;
    size_t state_floats;
    int n_snap;
    struct snap_slot *ss;        /* [n_snap] */
    int32_t *snap_free;          /* [n_snap] a stack of unowned slots */
    int n_snap_free;
    uint64_t snap_base;          /* GreedyDual's inflation: the priority last evicted */
    uint64_t snap_clock;         /* ticks of takes and touches (ties: older goes first) */
    uint64_t snap_pin;           /* slots taken at or after this tick are not evictable */
    uint64_t snap_evictions;
};

/* One snapshot slot: its owner block and its eviction priority. */
struct snap_slot {
    int32_t owner;               /* the block holding it, or -1 */
    int32_t level;               /* the engine's worth of it (kv_pool_snap_take) */
    uint64_t prio;               /* snap_base + level + 1 when last taken or touched */
    uint64_t tick;               /* snap_clock then */
};

size_t kv_pool_snap_bytes(const struct llm_model *m)
{
    return llm_model_state_floats(m) * sizeof(float);
}

size_t kv_pool_block_bytes(const struct llm_model *m, int type, int block_size)
{
    const struct llm_hparams *hp = llm_model_hparams(m);
    size_t bytes = llm_kv_slot_bytes(type, hp->n_head_kv * hp->head_dim);
    if (!bytes || block_size < 1 ||
        omni_mul_size(bytes, (size_t)block_size * 2, &bytes) ||
        /* layers with K/V: not lfm2's short-convolution blocks, nor Gated DeltaNet layers */
        omni_mul_size(bytes, (size_t)(hp->n_layer - hp->n_conv_layer - hp->n_gdn_layer), &bytes))
        return 0;
    return bytes;
}

static struct kv_pool *pool_new(const struct llm_model *m, int type, int block_size,
                                int n_blocks, bool storage, char *err, size_t errlen);

struct kv_pool *kv_pool_new(const struct llm_model *m, int type, int block_size, int n_blocks,
                            char *err, size_t errlen)
{
    return pool_new(m, type, block_size, n_blocks, true, err, errlen);
}

struct kv_pool *kv_pool_new_shape(const struct llm_model *m, int type, int block_size,
                                  int n_blocks, char *err, size_t errlen)
{
    return pool_new(m, type, block_size, n_blocks, false, err, errlen);
}

static struct kv_pool *pool_new(const struct llm_model *m, int type, int block_size,
                                int n_blocks, bool storage, char *err, size_t errlen)
{
    if (n_blocks < 1 || n_blocks > (1 << 30)) {
        omni_fail(err, errlen, OMNI_ERR_ARG, "kv_pool: %d blocks out of range", n_blocks);
        return NULL;
    }
    struct kv_pool *p = calloc(1, sizeof *p);
    if (!p) {
        omni_fail(err, errlen, OMNI_ERR_NOMEM, "kv_pool: out of memory");
        return NULL;
    }
    p->kv = storage ? llm_kv_new(m, type, block_size, n_blocks, err, errlen)
                    : llm_kv_new_shape(m, type, block_size, n_blocks, err, errlen);
    if (!p->kv)
        goto fail;
    p->n_blocks = n_blocks;
    p->block_size = block_size;
    p->slot_bytes = llm_kv_slot_bytes(type, p->kv->kv_dim);
    uint32_t nb = 1;
    while (nb < (uint32_t)n_blocks)
        nb <<= 1;
    p->mask = nb - 1;
    p->b = calloc((size_t)n_blocks, sizeof *p->b);
    p->bucket = malloc((size_t)nb * sizeof *p->bucket);
    p->state_floats = llm_model_state_floats(m);
    if (!p->b || !p->bucket) {
        omni_fail(err, errlen, OMNI_ERR_NOMEM, "kv_pool: out of memory for %d blocks", n_blocks);
        goto fail;
    }
    memset(p->bucket, 0xff, (size_t)nb * sizeof *p->bucket);
    /* free list in block order: block 0 is handed out first */
    for (int i = 0; i < n_blocks; i++)
        p->b[i] = (struct kv_block){ .prev = -1, .next = i + 1 < n_blocks ? i + 1 : -1,
                                     .hnext = -1, .snap = -1 };
    p->free_head = 0;
    p->n_free = n_blocks;
    p->lru_head = p->lru_tail = -1;
    return p;
fail:
    kv_pool_free(p);
    return NULL;
}

void kv_pool_free(struct kv_pool *p)
{
    if (!p)
        return;
    llm_kv_free(p->kv);
    free(p->b);
    free(p->bucket);
    free(p->snap);
    free(p->ss);
    free(p->snap_free);
    free(p);
}

// ---- state snapshots -------------------------------------------------------------

int kv_pool_set_snap_slots(struct kv_pool *p, int n, char *err, size_t errlen)
{
    for (int i = 0; i < p->n_blocks; i++)
        p->b[i].snap = -1;
    free(p->snap);
    free(p->ss);
    free(p->snap_free);
    p->snap = NULL;
    p->ss = NULL;
    p->snap_free = NULL;
    p->n_snap = p->n_snap_free = 0;
    p->snap_base = p->snap_clock = p->snap_evictions = 0;
    p->snap_pin = UINT64_MAX; /* none pinned before the first kv_pool_snap_pin */
    if (!p->state_floats || n <= 0)
        return 0;
    if (n > p->n_blocks) /* a block keeps at most one */
        n = p->n_blocks;
    size_t bytes;
    if (omni_mul_size(p->state_floats * sizeof(float), (size_t)n, &bytes) ||
        !(p->snap = malloc(bytes)) || !(p->ss = malloc((size_t)n * sizeof *p->ss)) ||
        !(p->snap_free = malloc((size_t)n * sizeof(int32_t)))) {
        free(p->snap);
        p->snap = NULL;
        return omni_fail(err, errlen, OMNI_ERR_NOMEM,
                         "kv_pool: out of memory for %d state snapshots", n);
    }
    for (int i = 0; i < n; i++) {
        p->ss[i] = (struct snap_slot){ .owner = -1 };
        p->snap_free[i] = n - 1 - i;
    }
    p->n_snap = p->n_snap_free = n;
    return 0;
}

int kv_pool_n_snap_slots(const struct kv_pool *p) { return p->n_snap; }
int kv_pool_n_snaps(const struct kv_pool *p) { return p->n_snap - p->n_snap_free; }
uint64_t kv_pool_snap_evictions(const struct kv_pool *p) { return p->snap_evictions; }

/* The block no longer holds what its snapshot describes: the slot goes back. */
static void snap_drop(struct kv_pool *p, int block)
{
    const int32_t s = p->b[block].snap;
    if (s < 0)
        return;
    p->ss[s].owner = -1;
    p->snap_free[p->n_snap_free++] = s;
    p->b[block].snap = -1;
}

/* GreedyDual: a snapshot's priority is an inflation base (the epoch of the
 * sequence that wrote it, or the base when a sequence last resumed from it)
 * plus its worth, so one not used for a while falls behind newer ones of the
 * same worth and is evicted first, and a worthier one (kept by a coarser
 * thinning) survives longer. */
static void snap_stamp(struct kv_pool *p, int32_t s, int level, uint64_t epoch)
{
    p->ss[s].level = level;
    p->ss[s].prio = epoch + (uint64_t)level + 1;
    p->ss[s].tick = ++p->snap_clock;
}

uint64_t kv_pool_snap_epoch(const struct kv_pool *p) { return p->snap_base; }

bool kv_pool_snap_drop(struct kv_pool *p, int block)
{
    if (block < 0 || block >= p->n_blocks || p->b[block].snap < 0 ||
        p->ss[p->b[block].snap].tick >= p->snap_pin)
        return false;
    snap_drop(p, block);
    return true;
}

void kv_pool_snap_pin(struct kv_pool *p) { p->snap_pin = p->snap_clock + 1; }

float *kv_pool_snap_take(struct kv_pool *p, int block, int level, uint64_t epoch)
{
    if (!p->n_snap || block < 0 || block >= p->n_blocks || level < 0)
        return NULL;
    if (level > 1 << 20)
        level = 1 << 20;
    int32_t s = p->b[block].snap;
    if (s < 0) {
        if (!p->n_snap_free) {
            /* the lowest priority, oldest first, of the snapshots not taken
             * for this step's forward; evicted only when worth no more than
             * the new one (else the new one is the one left out) */
            int32_t v = -1;
            for (int32_t i = 0; i < p->n_snap; i++) {
                const struct snap_slot *c = &p->ss[i];
                if (c->tick >= p->snap_pin)
                    continue;
                if (v < 0 || c->prio < p->ss[v].prio ||
                    (c->prio == p->ss[v].prio && c->tick < p->ss[v].tick))
                    v = i;
            }
            if (v < 0 || p->ss[v].prio > epoch + (uint64_t)level + 1)
                return NULL;
            if (p->ss[v].prio > p->snap_base)
                p->snap_base = p->ss[v].prio;
            snap_drop(p, p->ss[v].owner);
            p->snap_evictions++;
        }
        s = p->snap_free[--p->n_snap_free];
        p->ss[s].owner = block;
        p->b[block].snap = s;
    }
    snap_stamp(p, s, level, epoch);
    return p->snap + (size_t)s * p->state_floats;
}

void kv_pool_snap_touch(struct kv_pool *p, int block)
{
    if (block >= 0 && block < p->n_blocks && p->b[block].snap >= 0)
        snap_stamp(p, p->b[block].snap, p->ss[p->b[block].snap].level, p->snap_base);
}

void kv_pool_snap_move(struct kv_pool *p, int dst, int src)
{
    if (dst < 0 || src < 0 || dst >= p->n_blocks || src >= p->n_blocks || dst == src ||
        p->b[src].snap < 0 || p->b[dst].snap >= 0)
        return;
    p->b[dst].snap = p->b[src].snap;
    p->ss[p->b[dst].snap].owner = dst;
    p->b[src].snap = -1;
}

float *kv_pool_block_state(struct kv_pool *p, int block)
{
    return block >= 0 && block < p->n_blocks && p->b[block].snap >= 0
               ? p->snap + (size_t)p->b[block].snap * p->state_floats
               : NULL;
}

struct llm_kv *kv_pool_kv(struct kv_pool *p) { return p->kv; }
int kv_pool_n_blocks(const struct kv_pool *p) { return p->n_blocks; }
int kv_pool_block_size(const struct kv_pool *p) { return p->block_size; }
int kv_pool_n_free(const struct kv_pool *p) { return p->n_free; }
int kv_pool_n_cached(const struct kv_pool *p) { return p->n_cached; }
int kv_pool_n_used(const struct kv_pool *p) { return p->n_blocks - p->n_free - p->n_cached; }
int kv_pool_n_available(const struct kv_pool *p) { return p->n_free + p->n_cached; }

// ---- index and LRU -----------------------------------------------------------

static uint32_t bucket_of(const struct kv_pool *p, uint64_t hash)
{
    return (uint32_t)(hash ^ (hash >> 32)) & p->mask;
}

static void index_remove(struct kv_pool *p, int block)
{
    struct kv_block *b = &p->b[block];
    int32_t *link = &p->bucket[bucket_of(p, b->hash)];
    while (*link != block)
        link = &p->b[*link].hnext;
    *link = b->hnext;
    b->hnext = -1;
    b->hashed = false;
}

static void lru_unlink(struct kv_pool *p, int block)
{
    struct kv_block *b = &p->b[block];
    if (b->prev >= 0)
        p->b[b->prev].next = b->next;
    else
        p->lru_head = b->next;
    if (b->next >= 0)
        p->b[b->next].prev = b->prev;
    else
        p->lru_tail = b->prev;
    b->prev = b->next = -1;
    p->n_cached--;
}

static void lru_append(struct kv_pool *p, int block)
{
    struct kv_block *b = &p->b[block];
    b->prev = p->lru_tail;
    b->next = -1;
    if (p->lru_tail >= 0)
        p->b[p->lru_tail].next = block;
    else
        p->lru_head = block;
    p->lru_tail = block;
    p->n_cached++;
}

// ---- references --------------------------------------------------------------

int kv_pool_alloc(struct kv_pool *p)
{
    int block = p->free_head;
    if (block >= 0) {
        p->free_head = p->b[block].next;
        p->n_free--;
    } else if ((block = p->lru_head) >= 0) {
        lru_unlink(p, block);
        index_remove(p, block);
    } else {
        return -1;
    }
    snap_drop(p, block);
    p->b[block] = (struct kv_block){ .ref = 1, .prev = -1, .next = -1, .hnext = -1, .snap = -1 };
    return block;
}

void kv_pool_ref(struct kv_pool *p, int block)
{
    struct kv_block *b = &p->b[block];
    if (b->ref == 0)
        lru_unlink(p, block); /* only hashed blocks have ref 0 outside the free list */
    b->ref++;
}

void kv_pool_unref(struct kv_pool *p, int block)
{
    struct kv_block *b = &p->b[block];
    if (b->ref <= 0)
        return; /* the engine never does this; ignoring it keeps the lists sound */
    if (--b->ref > 0)
        return;
    if (b->hashed) {
        lru_append(p, block);
    } else {
        snap_drop(p, block);
        b->next = p->free_head;
        p->free_head = block;
        p->n_free++;
    }
}

int kv_pool_ref_count(const struct kv_pool *p, int block) { return p->b[block].ref; }

bool kv_pool_publish(struct kv_pool *p, int block, uint64_t hash)
{
    struct kv_block *b = &p->b[block];
    if (b->hashed || b->ref <= 0 || kv_pool_lookup(p, hash) >= 0)
        return false;
    uint32_t k = bucket_of(p, hash);
    b->hash = hash;
    b->hashed = true;
    b->hnext = p->bucket[k];
    p->bucket[k] = block;
    return true;
}

int kv_pool_lookup(const struct kv_pool *p, uint64_t hash)
{
    for (int32_t i = p->bucket[bucket_of(p, hash)]; i >= 0; i = p->b[i].hnext)
        if (p->b[i].hash == hash)
            return i;
    return -1;
}

bool kv_pool_block_hash(const struct kv_pool *p, int block, uint64_t *hash)
{
    if (!p->b[block].hashed)
        return false;
    *hash = p->b[block].hash;
    return true;
}

void kv_pool_copy(struct kv_pool *p, int dst, int src, int n_slots)
{
    const size_t block_bytes = p->slot_bytes * (size_t)p->block_size;
    const size_t n = p->slot_bytes * (size_t)n_slots;
    for (int l = 0; l < p->kv->n_layer; l++) {
        if (!p->kv->k[l]) /* a layer without K/V (lfm2's conv blocks) */
            continue;
        memcpy((char *)p->kv->k[l] + (size_t)dst * block_bytes,
               (char *)p->kv->k[l] + (size_t)src * block_bytes, n);
        memcpy((char *)p->kv->v[l] + (size_t)dst * block_bytes,
               (char *)p->kv->v[l] + (size_t)src * block_bytes, n);
    }
}

// ---- invariants --------------------------------------------------------------

int kv_pool_check(const struct kv_pool *p, char *err, size_t errlen)
{
    int n_free = 0, n_cached = 0, n_used = 0, n_hashed = 0;
    for (int32_t i = p->free_head; i >= 0; i = p->b[i].next) {
        if (++n_free > p->n_blocks)
            return omni_fail(err, errlen, OMNI_ERR_FORMAT, "kv_pool: free list has a cycle");
        if (p->b[i].ref != 0 || p->b[i].hashed)
            return omni_fail(err, errlen, OMNI_ERR_FORMAT,
                             "kv_pool: free block %d has ref %d, hashed %d", i, p->b[i].ref,
                             p->b[i].hashed);
    }
    int32_t prev = -1;
    for (int32_t i = p->lru_head; i >= 0; prev = i, i = p->b[i].next) {
        if (++n_cached > p->n_blocks)
            return omni_fail(err, errlen, OMNI_ERR_FORMAT, "kv_pool: LRU list has a cycle");
        if (p->b[i].ref != 0 || !p->b[i].hashed || p->b[i].prev != prev)
            return omni_fail(err, errlen, OMNI_ERR_FORMAT,
                             "kv_pool: cached block %d: ref %d, hashed %d, prev %d (want %d)", i,
                             p->b[i].ref, p->b[i].hashed, p->b[i].prev, prev);
    }
    if (prev != p->lru_tail)
        return omni_fail(err, errlen, OMNI_ERR_FORMAT, "kv_pool: LRU tail %d, list ends at %d",
                         p->lru_tail, prev);
    for (int i = 0; i < p->n_blocks; i++) {
        const struct kv_block *b = &p->b[i];
        if (b->ref < 0)
            return omni_fail(err, errlen, OMNI_ERR_FORMAT, "kv_pool: block %d has ref %d", i,
                             b->ref);
        n_used += b->ref > 0;
        if (b->hashed) {
            n_hashed++;
            if (kv_pool_lookup(p, b->hash) != i)
                return omni_fail(err, errlen, OMNI_ERR_FORMAT,
                                 "kv_pool: block %d hashed but not found by its hash", i);
        }
    }
    int n_owned = 0;
    for (int i = 0; i < p->n_blocks; i++) {
        const int32_t s = p->b[i].snap;
        if (s >= 0 && (s >= p->n_snap || p->ss[s].owner != i))
            return omni_fail(err, errlen, OMNI_ERR_FORMAT,
                             "kv_pool: block %d's snapshot slot %d is not its own", i, s);
        n_owned += s >= 0;
    }
    if (n_owned + p->n_snap_free != p->n_snap)
        return omni_fail(err, errlen, OMNI_ERR_FORMAT,
                         "kv_pool: %d snapshots owned + %d free of %d", n_owned, p->n_snap_free,
                         p->n_snap);
    int n_indexed = 0;
    for (uint32_t k = 0; k <= p->mask; k++)
        for (int32_t i = p->bucket[k]; i >= 0; i = p->b[i].hnext)
            if (++n_indexed > p->n_blocks || !p->b[i].hashed || bucket_of(p, p->b[i].hash) != k)
                return omni_fail(err, errlen, OMNI_ERR_FORMAT,
                                 "kv_pool: index bucket %u holds block %d wrongly", k, i);
    if (n_free != p->n_free || n_cached != p->n_cached || n_indexed != n_hashed ||
        n_free + n_cached + n_used != p->n_blocks)
        return omni_fail(err, errlen, OMNI_ERR_FORMAT,
                         "kv_pool: counts free %d/%d cached %d/%d used %d indexed %d/%d of %d",
                         n_free, p->n_free, n_cached, p->n_cached, n_used, n_indexed, n_hashed,
                         p->n_blocks);
    return 0;
}

// ---- prefix hashing ------------------------------------------------------------


uint64_t kv_hash_block(uint64_t parent, const uint64_t *keys, int n)
{
    uint64_t h = omni_mix64(parent ^ 0x9e3779b97f4a7c15ull);
    for (int i = 0; i < n; i++)
        h = omni_mix64(h ^ keys[i]) + 0x9e3779b97f4a7c15ull * (uint64_t)(i + 1);
    return omni_mix64(h ^ (uint64_t)n);
}

uint64_t kv_hash_media_key(uint64_t media_hash, int offset)
{
    /* the top bit keeps media keys apart from token ids (< 2^31) */
    return omni_mix64(media_hash + (uint64_t)offset * 0x9e3779b97f4a7c15ull) | (1ull << 63);
}
