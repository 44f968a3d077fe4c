/* cache.c - the vision-embedding cache: projected embeddings keyed by a hash
 * of (mmproj file hash, preprocessing parameters, encoded image bytes), kept
 * in a doubly linked LRU list with an open-addressing index, bounded in
 * bytes; one mutex guards everything (lookups copy out under it). */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "vision/vision.h"

uint64_t vision_hash(uint64_t h, const void *data, size_t len)
{
    const uint8_t *p = data;
    const uint64_t k = 0x9E3779B97F4A7C15ULL;
    h ^= len * k;
    for (; len >= 8; p += 8, len -= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        h = (h ^ w) * k;
        h ^= h >> 29;
    }
    uint64_t tail = 0;
    memcpy(&tail, p, len);
    h = (h ^ tail ^ len) * k;
    h ^= h >> 32;
    return h * 0xBF58476D1CE4E5B9ULL ^ (h >> 31);
}

struct entry {
    uint64_t key;
    struct vision_embd e;
    size_t bytes;
    struct entry *prev, *next; /* LRU list: head = most recent */
};

struct vision_cache {
    pthread_mutex_t lock;
    struct entry *head, *tail;     /* {lock} */
    struct entry **slots;          /* {lock} open addressing by key; NULL = empty */
    size_t n_slots;
    struct vision_cache_stats st;  /* {lock} */
};

struct vision_cache *vision_cache_new(size_t max_bytes)
{
    struct vision_cache *c = calloc(1, sizeof *c);
    if (!c)
        return NULL;
    c->n_slots = 64;
    c->slots = calloc(c->n_slots, sizeof *c->slots);
    if (!c->slots) {
        free(c);
        return NULL;
    }
    pthread_mutex_init(&c->lock, NULL);
    c->st.max_bytes = max_bytes;
    return c;
}

void vision_cache_free(struct vision_cache *c)
{
    if (!c)
        return;
    for (struct entry *e = c->head, *n; e; e = n) {
        n = e->next;
        free(e->e.data);
        free(e);
    }
    free(c->slots);
    pthread_mutex_destroy(&c->lock);
    free(c);
}

uint64_t vision_cache_key(const struct vision_model *m, const void *data, size_t len)
{
    const struct vision_info *in = vision_model_info(m);
    uint64_t parts[2] = { in->file_hash, in->preprocess_hash };
    return vision_hash(vision_hash(0, parts, sizeof parts), data, len);
}

static size_t slot_of(const struct vision_cache *c, uint64_t key)
{
    size_t i = key & (c->n_slots - 1);
    while (c->slots[i] && c->slots[i]->key != key)
        i = (i + 1) & (c->n_slots - 1);
    return i;
}

/* Remove slot i, re-inserting the rest of its probe run (linear probing). */
static void slot_remove(struct vision_cache *c, size_t i)
{
    c->slots[i] = NULL;
    for (size_t j = (i + 1) & (c->n_slots - 1); c->slots[j]; j = (j + 1) & (c->n_slots - 1)) {
        struct entry *e = c->slots[j];
        c->slots[j] = NULL;
        c->slots[slot_of(c, e->key)] = e;
    }
}

static void unlink_entry(struct vision_cache *c, struct entry *e)
{
    if (e->prev)
        e->prev->next = e->next;
    else
        c->head = e->next;
    if (e->next)
        e->next->prev = e->prev;
    else
        c->tail = e->prev;
    e->prev = e->next = NULL;
}

static void push_front(struct vision_cache *c, struct entry *e)
{
    e->next = c->head;
    e->prev = NULL;
    if (c->head)
        c->head->prev = e;
    c->head = e;
    if (!c->tail)
        c->tail = e;
}

static int copy_embd(struct vision_embd *dst, const struct vision_embd *src)
{
    size_t n = sizeof(float) * (size_t)src->n_tokens * src->n_embd;
    *dst = *src;
    dst->data = malloc(n ? n : 1);
    if (!dst->data)
        return -1;
    memcpy(dst->data, src->data, n);
    return 0;
}

bool vision_cache_get(struct vision_cache *c, uint64_t key, struct vision_embd *out)
{
    bool hit = false;
    pthread_mutex_lock(&c->lock);
    struct entry *e = c->slots[slot_of(c, key)];
    if (e && copy_embd(out, &e->e) == 0) {
        unlink_entry(c, e);
        push_front(c, e);
        hit = true;
    }
    if (hit)
        c->st.hits++;
    else
        c->st.misses++;
    pthread_mutex_unlock(&c->lock);
    return hit;
}

static void evict_tail(struct vision_cache *c)
{
    struct entry *e = c->tail;
    unlink_entry(c, e);
    slot_remove(c, slot_of(c, e->key));
    c->st.bytes -= e->bytes;
    c->st.entries--;
    c->st.evictions++;
    free(e->e.data);
    free(e);
}

/* Double the index when it is half full. */
static int grow(struct vision_cache *c)
{
    if ((c->st.entries + 1) * 2 <= c->n_slots)
        return 0;
    struct entry **old = c->slots;
    size_t n_old = c->n_slots;
    struct entry **slots = calloc(n_old * 2, sizeof *slots);
    if (!slots)
        return -1;
    c->slots = slots, c->n_slots = n_old * 2;
    for (size_t i = 0; i < n_old; i++)
        if (old[i])
            c->slots[slot_of(c, old[i]->key)] = old[i];
    free(old);
    return 0;
}

void vision_cache_put(struct vision_cache *c, uint64_t key, const struct vision_embd *e,
                      double encode_ms)
{
    size_t bytes = sizeof(float) * (size_t)e->n_tokens * e->n_embd + sizeof(struct entry);
    pthread_mutex_lock(&c->lock);
    c->st.encode_ms_total += encode_ms;
    if (bytes > c->st.max_bytes || c->slots[slot_of(c, key)])
        goto out;
    while (c->tail && c->st.bytes + bytes > c->st.max_bytes)
        evict_tail(c);
    struct entry *n = calloc(1, sizeof *n);
    if (!n || grow(c) < 0 || copy_embd(&n->e, e) < 0) {
        free(n);
        goto out;
    }
    n->key = key, n->bytes = bytes, n->e.key_hash = key;
    c->slots[slot_of(c, key)] = n;
    push_front(c, n);
    c->st.bytes += bytes;
    c->st.entries++;
out:
    pthread_mutex_unlock(&c->lock);
}

struct vision_cache_stats vision_cache_stats(struct vision_cache *c)
{
    pthread_mutex_lock(&c->lock);
    struct vision_cache_stats s = c->st;
    pthread_mutex_unlock(&c->lock);
    return s;
}
