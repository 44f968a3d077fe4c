/* test_embed_engine.c - embedding requests through the engine (decoder
 * models as embedders): pooled vectors equal a plain llm_forward over the
 * whole prompt (last, mean, cls pooling; chunked prompts), the same vectors
 * alone and batched with other embeddings and a generation, normalization,
 * blocks freed afterwards and refused bad requests. Against the tiny golden
 * models (build/fixtures, $OMNI_GOLDEN_DIR). */
#include "test.h"

#include "llm/model.h"
#include "src/core/omni.h"
#include "src/core/tensor.h"
#include "src/engine/engine.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>

#define MAX_EMBD 1024

static void free_model(void *m) { llm_model_free(m); }
static void free_engine(void *e) { engine_free(e); }

static struct llm_model *golden(const char *name)
{
    char err[256];
    struct llm_model *m = llm_model_load(test_golden(name), NULL, err, sizeof err);
    test_defer(free_model, m);
    return m;
}

static struct engine *start(struct llm_model *m, bool deterministic, int max_batch_tokens)
{
    char err[256];
    struct engine_params ep = engine_default_params();
    ep.deterministic = deterministic;
    ep.kv_memory_bytes = 1 << 20;
    ep.max_batch_tokens = max_batch_tokens;
    struct engine *e = engine_new(&ep, err, sizeof err);
    if (!e)
        return NULL;
    if (engine_add_model(e, m, "m", err, sizeof err) != 0 || engine_start(e, err, sizeof err)) {
        fprintf(stderr, "engine: %s\n", err);
        engine_free(e);
        return NULL;
    }
    test_defer(free_engine, e);
    return e;
}

/* What one request delivered (engine thread, under the group's lock). */
struct out {
    float v[MAX_EMBD];
    int n_embd, prompt_tokens, cached_tokens, n_tokens_seen, finals;
    enum engine_finish finish;
    bool error;
};

struct group {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int done;
};

struct slot {
    struct group *g;
    struct out *o;
};

static void on_event(void *user, const struct engine_event *ev)
{
    struct slot *s = user;
    pthread_mutex_lock(&s->g->mu);
    if (ev->type == ENGINE_EV_TOKEN) {
        s->o->n_tokens_seen++;
    } else {
        s->o->finals++;
        s->o->error = ev->type == ENGINE_EV_ERROR;
        s->o->finish = ev->finish;
        s->o->prompt_tokens = ev->usage.prompt_tokens;
        s->o->cached_tokens = ev->usage.cached_tokens;
        if (ev->embd && ev->n_embd <= MAX_EMBD) {
            memcpy(s->o->v, ev->embd, (size_t)ev->n_embd * sizeof(float));
            s->o->n_embd = ev->n_embd;
        }
        s->g->done++;
        pthread_cond_broadcast(&s->g->cv);
    }
    pthread_mutex_unlock(&s->g->mu);
}

static void group_wait(struct group *g, int n)
{
    pthread_mutex_lock(&g->mu);
    while (g->done < n)
        pthread_cond_wait(&g->cv, &g->mu);
    pthread_mutex_unlock(&g->mu);
}

static void random_prompt(int32_t *ids, int n, int n_vocab, uint64_t seed)
{
    for (int i = 0; i < n; i++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        ids[i] = 3 + (int32_t)((seed >> 33) % (uint64_t)(n_vocab - 3));
    }
}

static struct engine_request embed_rq(const int32_t *ids, int n, enum embed_pooling pool,
                                      bool normalize, struct slot *s)
{
    struct engine_request rq = engine_default_request();
    rq.task = ENGINE_TASK_EMBED;
    rq.prompt = ids;
    rq.n_prompt = n;
    rq.pooling = pool;
    rq.normalize = normalize;
    rq.on_event = on_event;
    rq.user = s;
    return rq;
}

/* The reference: one llm_forward over the whole prompt with every hidden
 * state out, pooled here. */
static int reference(struct llm_model *m, const int32_t *ids, int n, enum embed_pooling pool,
                     float *out)
{
    const struct llm_hparams *hp = llm_model_hparams(m);
    char err[256];
    struct llm_ctx *ctx = llm_ctx_new(m, n, NULL, err, sizeof err);
    struct llm_kv *kv = llm_kv_new(m, GGML_TYPE_F16, 16, (n + 15) / 16, err, sizeof err);
    int32_t *pos = malloc((size_t)n * sizeof *pos), *seq = calloc((size_t)n, sizeof *seq);
    int32_t *table = malloc((size_t)((n + 15) / 16) * sizeof *table);
    bool *want = malloc((size_t)n * sizeof *want), *no = calloc((size_t)n, sizeof *no);
    float *h = malloc((size_t)n * hp->n_embd * sizeof *h);
    int rc = -1;
    if (ctx && kv && pos && seq && table && want && no && h) {
        for (int i = 0; i < n; i++)
            pos[i] = i, want[i] = true;
        for (int i = 0; i < (n + 15) / 16; i++)
            table[i] = i;
        struct llm_seq_view view = { table, (n + 15) / 16 };
        llm_ctx_set_batch_invariant(ctx, true);
        struct llm_batch b = { .n_tokens = n, .token = ids, .pos = pos, .seq = seq,
                               .want_logits = no, .want_hidden = want, .hidden = h };
        rc = llm_forward(ctx, &b, kv, &view, NULL);
        for (int i = 0; rc == 0 && i < hp->n_embd; i++) {
            double acc = 0;
            if (pool == EMBED_POOL_MEAN) {
                for (int t = 0; t < n; t++)
                    acc += h[(size_t)t * hp->n_embd + i];
                acc /= n;
            } else {
                acc = h[(size_t)(pool == EMBED_POOL_CLS ? 0 : n - 1) * hp->n_embd + i];
            }
            out[i] = (float)acc;
        }
    }
    free(h);
    free(no);
    free(want);
    free(table);
    free(seq);
    free(pos);
    llm_kv_free(kv);
    llm_ctx_free(ctx);
    return rc;
}

static double cosine(const float *a, const float *b, int n)
{
    double ab = 0, aa = 0, bb = 0;
    for (int i = 0; i < n; i++)
        ab += (double)a[i] * b[i], aa += (double)a[i] * a[i], bb += (double)b[i] * b[i];
    return ab / (sqrt(aa * bb) + 1e-30);
}

static double max_abs_diff(const float *a, const float *b, int n)
{
    double d = 0;
    for (int i = 0; i < n; i++)
        d = fabs((double)a[i] - b[i]) > d ? fabs((double)a[i] - b[i]) : d;
    return d;
}

static int blocks_used_when_idle(struct engine *e)
{
    struct engine_stats st;
    for (int i = 0; i < 60000; i++) {
        engine_stats(e, &st);
        if (!st.running && !st.waiting && !st.kv_blocks_used)
            return 0;
        struct timespec ts = { 0, 1000000 };
        nanosleep(&ts, NULL);
    }
    return st.kv_blocks_used + 1000 * (st.running + st.waiting);
}

/* Pooled vectors equal the plain forward's, for prompts shorter and longer
 * than a step's token budget (chunked prefill pools across steps). */
TEST(embed_engine_matches_plain_forward)
{
    struct llm_model *m = golden("qwen3-f32.gguf");
    if (!m)
        SKIP("golden fixtures missing (make golden-fixtures)");
    const struct llm_hparams *hp = llm_model_hparams(m);
    CHECK(hp->n_embd <= MAX_EMBD);
    struct engine *e = start(m, true, 32);
    CHECK(e);
    const enum embed_pooling pools[] = { EMBED_POOL_LAST, EMBED_POOL_MEAN, EMBED_POOL_CLS };
    const int lens[] = { 1, 9, 70 };
    static float want[MAX_EMBD];
    for (int p = 0; p < 3; p++)
        for (int l = 0; l < 3; l++) {
            int32_t ids[70];
            random_prompt(ids, lens[l], hp->n_vocab, 11 + (uint64_t)l);
            CHECK_EQ(reference(m, ids, lens[l], pools[p], want), 0);
            struct group g = { PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0 };
            struct out o = { 0 };
            struct slot s = { &g, &o };
            struct engine_request rq = embed_rq(ids, lens[l], pools[p], false, &s);
            char err[256];
            CHECK_EQ(engine_submit(e, &rq, NULL, err, sizeof err), 0);
            group_wait(&g, 1);
            CHECK(!o.error);
            CHECK_EQ((int)o.finish, (int)ENGINE_FINISH_STOP);
            CHECK_EQ(o.n_embd, hp->n_embd);
            CHECK_EQ(o.prompt_tokens, lens[l]);
            CHECK_EQ(o.n_tokens_seen, 0);
            CHECK_EQ(o.finals, 1);
            CHECK(max_abs_diff(o.v, want, hp->n_embd) < 1e-4);
        }
    CHECK_EQ(blocks_used_when_idle(e), 0);
}

/* Normalized vectors have unit length and the direction of the raw ones;
 * mean and last pooling differ. */
TEST(embed_engine_normalize_and_pooling)
{
    struct llm_model *m = golden("qwen3-f32.gguf");
    if (!m)
        SKIP("golden fixtures missing (make golden-fixtures)");
    const int n_embd = llm_model_hparams(m)->n_embd;
    struct engine *e = start(m, false, 512);
    CHECK(e);
    int32_t ids[20];
    random_prompt(ids, 20, llm_model_hparams(m)->n_vocab, 5);
    struct group g = { PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0 };
    static struct out o[3];
    memset(o, 0, sizeof o);
    struct slot s[3] = { { &g, &o[0] }, { &g, &o[1] }, { &g, &o[2] } };
    struct engine_request rq[3] = { embed_rq(ids, 20, EMBED_POOL_LAST, false, &s[0]),
                                    embed_rq(ids, 20, EMBED_POOL_LAST, true, &s[1]),
                                    embed_rq(ids, 20, EMBED_POOL_MEAN, true, &s[2]) };
    char err[256];
    for (int i = 0; i < 3; i++)
        CHECK_EQ(engine_submit(e, &rq[i], NULL, err, sizeof err), 0);
    group_wait(&g, 3);
    double norm = 0;
    for (int i = 0; i < n_embd; i++)
        norm += (double)o[1].v[i] * o[1].v[i];
    CHECK(fabs(norm - 1) < 1e-5);
    CHECK(cosine(o[0].v, o[1].v, n_embd) > 0.9999);
    CHECK(cosine(o[1].v, o[2].v, n_embd) < 0.999);
}

/* The same inputs alone and batched together (and with a generation in
 * the same steps): the same vectors - bit for bit with --deterministic,
 * cosine >= 0.9999 without. The generation's tokens are unchanged. */
static void check_batched_equals_alone(bool deterministic)
{
    struct llm_model *m = golden("qwen3-f32.gguf");
    if (!m)
        SKIP("golden fixtures missing (make golden-fixtures)");
    const struct llm_hparams *hp = llm_model_hparams(m);
    struct engine *e = start(m, deterministic, 64);
    CHECK(e);
    enum { N = 6 };
    const int lens[N] = { 3, 17, 40, 1, 90, 33 };
    static int32_t ids[N][90];
    static struct out alone[N], batched[N], gen_alone, gen_batched;
    memset(alone, 0, sizeof alone);
    memset(batched, 0, sizeof batched);
    memset(&gen_alone, 0, sizeof gen_alone);
    memset(&gen_batched, 0, sizeof gen_batched);
    for (int i = 0; i < N; i++)
        random_prompt(ids[i], lens[i], hp->n_vocab, 100 + (uint64_t)i);
    char err[256];
    int32_t gen_prompt[12];
    random_prompt(gen_prompt, 12, hp->n_vocab, 999);
    for (int round = 0; round < 2; round++) {
        struct out *o = round ? batched : alone;
        struct out *go = round ? &gen_batched : &gen_alone;
        struct group g = { PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0 };
        struct slot s[N + 1];
        struct engine_request grq = engine_default_request();
        grq.prompt = gen_prompt;
        grq.n_prompt = 12;
        grq.max_tokens = 8;
        grq.ignore_eog = true;
        grq.sampling.temperature = 0;
        grq.on_event = on_event;
        s[N] = (struct slot){ &g, go };
        grq.user = &s[N];
        CHECK_EQ(engine_submit(e, &grq, NULL, err, sizeof err), 0);
        for (int i = 0; i < N; i++) {
            s[i] = (struct slot){ &g, &o[i] };
            struct engine_request rq =
                embed_rq(ids[i], lens[i], i % 2 ? EMBED_POOL_MEAN : EMBED_POOL_LAST, true, &s[i]);
            CHECK_EQ(engine_submit(e, &rq, NULL, err, sizeof err), 0);
            if (!round) /* alone: one at a time */
                group_wait(&g, i + 1);
        }
        group_wait(&g, N + 1);
    }
    for (int i = 0; i < N; i++) {
        CHECK(!alone[i].error && !batched[i].error);
        CHECK_EQ(batched[i].n_embd, hp->n_embd);
        if (deterministic)
            CHECK(!memcmp(alone[i].v, batched[i].v, (size_t)hp->n_embd * sizeof(float)));
        else
            CHECK(cosine(alone[i].v, batched[i].v, hp->n_embd) >= 0.9999);
    }
    CHECK_EQ(gen_alone.n_tokens_seen, 8);
    CHECK_EQ(gen_batched.n_tokens_seen, 8);
    CHECK_EQ(blocks_used_when_idle(e), 0);
}

TEST(embed_engine_batched_equals_alone_deterministic) { check_batched_equals_alone(true); }
TEST(embed_engine_batched_equals_alone) { check_batched_equals_alone(false); }

/* An embedding may fill the whole context (nothing is generated after it);
 * n > 1, embedding segments and rank pooling are refused. */
TEST(embed_engine_refuses_bad_requests)
{
    struct llm_model *m = golden("qwen3-f32.gguf");
    if (!m)
        SKIP("golden fixtures missing (make golden-fixtures)");
    const struct llm_hparams *hp = llm_model_hparams(m);
    struct engine *e = start(m, false, 512);
    CHECK(e);
    int32_t ids[4] = { 5, 6, 7, 8 };
    char err[256];
    struct group g = { PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0 };
    struct out o = { 0 };
    struct slot s = { &g, &o };
    struct engine_request rq = embed_rq(ids, 4, EMBED_POOL_LAST, true, &s);
    rq.n = 2;
    CHECK_EQ(engine_submit(e, &rq, NULL, err, sizeof err), OMNI_ERR_ARG);
    rq.n = 1;
    rq.pooling = EMBED_POOL_RANK;
    CHECK_EQ(engine_submit(e, &rq, NULL, err, sizeof err), OMNI_ERR_ARG);
    CHECK_STR_CONTAINS(err, "pooling");
    rq.pooling = EMBED_POOL_MEAN;
    int32_t *full = malloc((size_t)hp->n_ctx_train * sizeof *full);
    CHECK(full);
    random_prompt(full, hp->n_ctx_train, hp->n_vocab, 3);
    rq.prompt = full;
    rq.n_prompt = hp->n_ctx_train;
    int rc = engine_submit(e, &rq, NULL, err, sizeof err);
    if (rc == 0)
        group_wait(&g, 1);
    free(full);
    /* the pool of 1 MiB may be too small for the whole context of a model */
    CHECK(rc == 0 || strstr(err, "KV blocks"));
    if (rc == 0)
        CHECK(!o.error && o.n_embd == hp->n_embd);
    rq.n_prompt = hp->n_ctx_train + 1;
    rq.prompt = ids; /* refused before it is read */
    CHECK_EQ(engine_submit(e, &rq, NULL, err, sizeof err), OMNI_ERR_ARG);
}

/* Last-token pooling reuses the prefix cache (the blocks of an earlier
 * embedding of the same text stay cached): the second run computes only the
 * tail and gives the same vector; mean pooling computes every row again. */
TEST(embed_engine_prefix_cache)
{
    struct llm_model *m = golden("qwen3-f32.gguf");
    if (!m)
        SKIP("golden fixtures missing (make golden-fixtures)");
    const int n_embd = llm_model_hparams(m)->n_embd;
    struct engine *e = start(m, true, 512);
    CHECK(e);
    int32_t ids[40];
    random_prompt(ids, 40, llm_model_hparams(m)->n_vocab, 77);
    static struct out o[4];
    memset(o, 0, sizeof o);
    const enum embed_pooling pools[4] = { EMBED_POOL_LAST, EMBED_POOL_LAST, EMBED_POOL_MEAN,
                                          EMBED_POOL_MEAN };
    char err[256];
    for (int i = 0; i < 4; i++) {
        struct group g = { PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0 };
        struct slot s = { &g, &o[i] };
        struct engine_request rq = embed_rq(ids, 40, pools[i], false, &s);
        CHECK_EQ(engine_submit(e, &rq, NULL, err, sizeof err), 0);
        group_wait(&g, 1);
        CHECK(!o[i].error && o[i].n_embd == n_embd);
    }
    CHECK_EQ(o[0].cached_tokens, 0);
    CHECK_EQ(o[1].cached_tokens, 32); /* two full blocks of 16; never the last token */
    CHECK(!memcmp(o[0].v, o[1].v, (size_t)n_embd * sizeof(float)));
    CHECK_EQ(o[3].cached_tokens, 0);
    CHECK(!memcmp(o[2].v, o[3].v, (size_t)n_embd * sizeof(float)));
    CHECK_EQ(blocks_used_when_idle(e), 0);
}
