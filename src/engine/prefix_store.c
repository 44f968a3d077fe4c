/* prefix_store.c - saving and reloading hashed KV blocks (see prefix_store.h).
 *
 * The file is written to a temporary name and renamed, so a crash never
 * leaves a half-written cache under the real name; the trailing checksum
 * catches the rest (disk errors, edits, truncation). */
#include "prefix_store.h"

#include "kv_pool.h"
#include "llm/model.h"
#include "src/core/gguf.h"
#include "src/core/omni.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define STORE_MAGIC "OMNIKVC1"
#define STORE_VERSION 1
#define FP_SAMPLE 4096 /* bytes hashed at each end of every tensor */

struct manifest {
    uint32_t version, kv_type, block_size, n_layer, kv_dim, n_blocks;
    uint64_t fingerprint;
};

/* FNV-1a over bytes, folded into a running 64-bit state. */
static uint64_t fnv(uint64_t h, const void *p, size_t n)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * 0x100000001b3ull;
    return h;
}

static uint64_t model_fingerprint(const struct llm_model *m)
{
    const struct gguf *g = llm_model_gguf(m);
    uint64_t h = 0xcbf29ce484222325ull;
    const uint64_t size = gguf_file_size(g), n = (uint64_t)gguf_n_tensors(g);
    h = fnv(h, &size, sizeof size);
    h = fnv(h, &n, sizeof n);
    for (int64_t i = 0; i < gguf_n_tensors(g); i++) {
        const struct gguf_tensor *t = gguf_tensor_at(g, i);
        h = fnv(h, t->name, strlen(t->name));
        h = fnv(h, &t->offset, sizeof t->offset);
        h = fnv(h, &t->type, sizeof t->type);
        const size_t k = t->nbytes < FP_SAMPLE ? t->nbytes : FP_SAMPLE;
        h = fnv(h, t->data, k);
        h = fnv(h, (const char *)t->data + t->nbytes - k, k);
    }
    return h;
}

static size_t block_layer_bytes(const struct llm_kv *kv)
{
    return (size_t)kv->block_size * llm_kv_slot_bytes(kv->type, kv->kv_dim);
}

static void store_path(char *out, size_t cap, const char *dir, const char *name, bool tmp)
{
    snprintf(out, cap, "%s/%s.kvcache%s", dir, name, tmp ? ".tmp" : "");
}

static struct manifest expected(struct kv_pool *pool, const struct llm_model *m)
{
    const struct llm_kv *kv = kv_pool_kv(pool);
    return (struct manifest){ STORE_VERSION, (uint32_t)kv->type, (uint32_t)kv->block_size,
                              (uint32_t)kv->n_layer, (uint32_t)kv->kv_dim, 0,
                              model_fingerprint(m) };
}

/* fwrite that also folds the bytes into the checksum. */
static bool put(FILE *f, uint64_t *sum, const void *p, size_t n)
{
    *sum = fnv(*sum, p, n);
    return fwrite(p, 1, n, f) == n;
}

int prefix_store_save(struct kv_pool *pool, const struct llm_model *m, const char *dir,
                      const char *name)
{
    if (llm_model_has_state(m)) /* K/V alone cannot resume recurrent state */
        return 0;
    char path[4096], tmp[4096];
    store_path(path, sizeof path, dir, name, false);
    store_path(tmp, sizeof tmp, dir, name, true);
    struct llm_kv *kv = kv_pool_kv(pool);
    struct manifest mf = expected(pool, m);
    uint64_t h;
    for (int b = 0; b < kv_pool_n_blocks(pool); b++)
        mf.n_blocks += kv_pool_block_hash(pool, b, &h);
    FILE *f = fopen(tmp, "wb");
    if (!f) {
        OMNI_WARN("prefix cache: cannot write %s: %s", tmp, strerror(errno));
        return OMNI_ERR_IO;
    }
    uint64_t sum = 0xcbf29ce484222325ull;
    const size_t lb = block_layer_bytes(kv);
    bool ok = put(f, &sum, STORE_MAGIC, 8) && put(f, &sum, &mf, sizeof mf);
    for (int b = 0; ok && b < kv_pool_n_blocks(pool); b++) {
        if (!kv_pool_block_hash(pool, b, &h))
            continue;
        ok = put(f, &sum, &h, sizeof h);
        for (int l = 0; ok && l < kv->n_layer; l++)
            ok = put(f, &sum, (char *)kv->k[l] + (size_t)b * lb, lb) &&
                 put(f, &sum, (char *)kv->v[l] + (size_t)b * lb, lb);
    }
    ok = ok && fwrite(&sum, sizeof sum, 1, f) == 1;
    ok = (fclose(f) == 0) && ok;
    if (!ok || rename(tmp, path) != 0) {
        OMNI_WARN("prefix cache: writing %s failed: %s", path, strerror(errno));
        remove(tmp);
        return OMNI_ERR_IO;
    }
    return (int)mf.n_blocks;
}

int prefix_store_load(struct kv_pool *pool, const struct llm_model *m, const char *dir,
                      const char *name)
{
    if (llm_model_has_state(m)) /* never reused: see prefix_store_save */
        return 0;
    char path[4096];
    store_path(path, sizeof path, dir, name, false);
    FILE *f = fopen(path, "rb");
    if (!f)
        return 0;
    struct llm_kv *kv = kv_pool_kv(pool);
    const struct manifest want = expected(pool, m);
    struct manifest mf;
    char magic[8];
    const char *why = NULL;
    uint64_t sum = 0xcbf29ce484222325ull;
    if (fread(magic, 1, 8, f) != 8 || memcmp(magic, STORE_MAGIC, 8) ||
        fread(&mf, sizeof mf, 1, f) != 1)
        why = "not a prefix cache file";
    else if (mf.version != want.version || mf.kv_type != want.kv_type ||
             mf.block_size != want.block_size || mf.n_layer != want.n_layer ||
             mf.kv_dim != want.kv_dim)
        why = "made with other KV settings (type, block size or model shape)";
    else if (mf.fingerprint != want.fingerprint)
        why = "made for another model file";
    if (why) {
        fclose(f);
        OMNI_WARN("prefix cache: ignoring %s: %s", path, why);
        return 0;
    }
    sum = fnv(sum, magic, 8);
    sum = fnv(sum, &mf, sizeof mf);
    /* load into blocks first, index them only once the checksum holds */
    const size_t lb = block_layer_bytes(kv);
    const int limit = kv_pool_n_blocks(pool) / 2;
    int32_t *blocks = malloc(sizeof *blocks * (size_t)(limit > 0 ? limit : 1));
    uint64_t *hashes = malloc(sizeof *hashes * (size_t)(limit > 0 ? limit : 1));
    char *skip = malloc(lb);
    int n = 0;
    bool ok = blocks && hashes && skip;
    for (uint32_t i = 0; ok && i < mf.n_blocks; i++) {
        uint64_t h;
        ok = fread(&h, sizeof h, 1, f) == 1;
        sum = fnv(sum, &h, sizeof h);
        const int b = ok && n < limit ? kv_pool_alloc(pool) : -1;
        if (b >= 0) {
            blocks[n] = b;
            hashes[n++] = h;
        }
        for (int l = 0; ok && l < kv->n_layer; l++)
            for (int kvi = 0; ok && kvi < 2; kvi++) {
                char *dst = b >= 0 ? (char *)(kvi ? kv->v[l] : kv->k[l]) + (size_t)b * lb : skip;
                ok = fread(dst, 1, lb, f) == lb;
                sum = fnv(sum, dst, lb);
            }
    }
    uint64_t stored;
    ok = ok && fread(&stored, sizeof stored, 1, f) == 1 && stored == sum && fgetc(f) == EOF;
    fclose(f);
    for (int i = 0; i < n; i++) {
        if (ok)
            kv_pool_publish(pool, blocks[i], hashes[i]);
        kv_pool_unref(pool, blocks[i]); /* cached when published, else free again */
    }
    free(blocks);
    free(hashes);
    free(skip);
    if (!ok) {
        OMNI_WARN("prefix cache: ignoring %s: truncated or corrupt", path);
        return 0;
    }
    return n;
}
