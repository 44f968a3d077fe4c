/* test_kv_pool.c - KV block pool: allocation, reference counts, prefix index,
 * LRU eviction and copy-on-write, checked against a shadow model after every
 * operation of a seeded random run, with kv_pool_check's invariants. */
#include "test.h"

#include "llm/model.h"
#include "src/core/omni.h"
#include "src/core/tensor.h"
#include "src/engine/kv_pool.h"

#include <stdint.h>
#include <stdlib.h>

static struct llm_model *tiny_model(void)
{
    char err[256];
    return llm_model_load(test_golden("llama-f32.gguf"), NULL, err, sizeof err);
}

TEST(kv_pool_alloc_ref_evict)
{
    struct llm_model *m = tiny_model();
    if (!m)
        SKIP("golden fixture llama-f32.gguf missing (make golden-fixtures)");
    char err[256];
    struct kv_pool *p = kv_pool_new(m, GGML_TYPE_F16, 4, 3, err, sizeof err);
    CHECK_MSG(p, "%s", err);
    int a = kv_pool_alloc(p), b = kv_pool_alloc(p), c = kv_pool_alloc(p);
    CHECK(a >= 0 && b >= 0 && c >= 0 && a != b && b != c && a != c);
    CHECK_EQ(kv_pool_alloc(p), -1);
    CHECK(kv_pool_publish(p, a, 111));
    CHECK(!kv_pool_publish(p, b, 111)); /* hash taken: b stays unhashed */
    CHECK(kv_pool_publish(p, b, 222));
    kv_pool_unref(p, a);                /* cached */
    kv_pool_unref(p, b);                /* cached, more recent */
    kv_pool_unref(p, c);                /* free */
    CHECK_EQ(kv_pool_n_free(p), 1);
    CHECK_EQ(kv_pool_n_cached(p), 2);
    CHECK_EQ(kv_pool_lookup(p, 111), a);
    CHECK_EQ(kv_pool_alloc(p), c);      /* the free block first */
    CHECK_EQ(kv_pool_alloc(p), a);      /* then the least recently released */
    CHECK_EQ(kv_pool_lookup(p, 111), -1);
    kv_pool_ref(p, b);                  /* reuse keeps b from eviction */
    CHECK_EQ(kv_pool_n_cached(p), 0);
    CHECK_EQ(kv_pool_alloc(p), -1);
    CHECK_EQ(kv_pool_check(p, err, sizeof err), 0);
    kv_pool_free(p);
    llm_model_free(m);
}

TEST(kv_pool_copy_on_write)
{
    struct llm_model *m = tiny_model();
    if (!m)
        SKIP("golden fixture llama-f32.gguf missing (make golden-fixtures)");
    char err[256];
    struct kv_pool *p = kv_pool_new(m, GGML_TYPE_F32, 4, 2, err, sizeof err);
    CHECK_MSG(p, "%s", err);
    struct llm_kv *kv = kv_pool_kv(p);
    const int a = kv_pool_alloc(p), b = kv_pool_alloc(p), n = 4 * kv->kv_dim;
    for (int l = 0; l < kv->n_layer; l++)
        for (int i = 0; i < n; i++) {
            ((float *)kv->k[l])[(size_t)a * n + i] = (float)(l * 1000 + i);
            ((float *)kv->v[l])[(size_t)a * n + i] = (float)-(l * 1000 + i);
        }
    kv_pool_copy(p, b, a, 3);
    for (int l = 0; l < kv->n_layer; l++)
        for (int i = 0; i < n; i++) {
            const float want = i < 3 * kv->kv_dim ? (float)(l * 1000 + i) : 0.0f;
            CHECK(((float *)kv->k[l])[(size_t)b * n + i] == want);
            CHECK(((float *)kv->v[l])[(size_t)b * n + i] == -want);
        }
    kv_pool_free(p);
    llm_model_free(m);
}

/* Random alloc/ref/unref/publish/lookup against a shadow reference count;
 * every step must keep the pool's invariants and agree with the shadow. */
TEST(kv_pool_random_invariants)
{
    struct llm_model *m = tiny_model();
    if (!m)
        SKIP("golden fixture llama-f32.gguf missing (make golden-fixtures)");
    enum { N = 37, STEPS = 20000 };
    char err[256];
    struct kv_pool *p = kv_pool_new(m, GGML_TYPE_F16, 16, N, err, sizeof err);
    CHECK_MSG(p, "%s", err);
    int ref[N] = { 0 };
    bool hashed[N] = { false };
    uint64_t hash_of[N] = { 0 };
    uint64_t rng = 12345;
    for (int step = 0; step < STEPS; step++) {
        rng = rng * 6364136223846793005ull + 1442695040888963407ull;
        const unsigned r = (unsigned)(rng >> 33);
        const int blk = (int)((r >> 4) % N);
        switch (r % 5) {
        case 0: {
            int b = kv_pool_alloc(p);
            int want_avail = 0;
            for (int i = 0; i < N; i++)
                want_avail += ref[i] == 0;
            CHECK_MSG((b < 0) == (want_avail == 0), "step %d: alloc %d with %d available", step,
                      b, want_avail);
            if (b >= 0) {
                CHECK_MSG(ref[b] == 0, "step %d: alloc handed out used block %d", step, b);
                ref[b] = 1;
                hashed[b] = false;
            }
            break;
        }
        case 1:
            if (ref[blk] > 0 || hashed[blk]) {
                kv_pool_ref(p, blk);
                ref[blk]++;
            }
            break;
        case 2:
        case 3:
            if (ref[blk] > 0) {
                kv_pool_unref(p, blk);
                ref[blk]--;
            }
            break;
        case 4:
            if (ref[blk] > 0) {
                uint64_t h = (r >> 10) % 64; /* few hashes: collisions happen */
                int holder = kv_pool_lookup(p, h);
                bool ok = kv_pool_publish(p, blk, h);
                CHECK_MSG(ok == (!hashed[blk] && holder < 0), "step %d: publish", step);
                if (ok) {
                    hashed[blk] = true;
                    hash_of[blk] = h;
                }
            }
            break;
        }
        /* a block evicted by alloc loses its hash in the shadow too */
        for (int i = 0; i < N; i++) {
            uint64_t h;
            if (hashed[i] && !kv_pool_block_hash(p, i, &h))
                hashed[i] = false;
            CHECK_MSG(kv_pool_ref_count(p, i) == ref[i], "step %d: block %d ref %d, want %d",
                      step, i, kv_pool_ref_count(p, i), ref[i]);
            if (hashed[i])
                CHECK_EQ(kv_pool_lookup(p, hash_of[i]), i);
        }
        CHECK_MSG(kv_pool_check(p, err, sizeof err) == 0, "step %d: %s", step, err);
    }
    for (int i = 0; i < N; i++)
        while (ref[i]-- > 0)
            kv_pool_unref(p, i);
    CHECK_EQ(kv_pool_n_used(p), 0);
    CHECK_EQ(kv_pool_n_available(p), N);
    CHECK_EQ(kv_pool_check(p, err, sizeof err), 0);
    kv_pool_free(p);
    llm_model_free(m);
}

TEST(kv_hash_chain)
{
    uint64_t a[4] = { 1, 2, 3, 4 }, b[4] = { 1, 2, 3, 5 };
    CHECK(kv_hash_block(KV_HASH_ROOT, a, 4) == kv_hash_block(KV_HASH_ROOT, a, 4));
    CHECK(kv_hash_block(KV_HASH_ROOT, a, 4) != kv_hash_block(KV_HASH_ROOT, b, 4));
    CHECK(kv_hash_block(1, a, 4) != kv_hash_block(2, a, 4));
    CHECK(kv_hash_media_key(7, 0) != kv_hash_media_key(7, 1));
    CHECK(kv_hash_media_key(7, 0) != kv_hash_media_key(8, 0));
    CHECK(kv_hash_media_key(7, 0) > INT32_MAX);
}
