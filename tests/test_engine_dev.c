/* test_engine_dev.c - the engine with its model forward on a device
 * (engine_params.device, llm/model_dev.h) against the engine on the CPU:
 * several greedy sequences of different lengths sharing a prefix, run at
 * once through a KV pool too small for them (preemption and recompute),
 * give the tokens of solo runs through llm_forward; n = 2 choices fork a
 * partial block on the device; a request that needs its logits on the host
 * (logprobs) agrees too; the pool has no host K/V. The device is
 * $OMNI_DEV_BACKEND: "cpu" by default (engine device "cpu-dev": the same
 * path on the plain-C backend, so this runs in every build), "cuda" in
 * build/test_cuda on a GPU machine (docs/gpu.md). */
#include "test.h"

#include "llm/model.h"
#include "src/core/backend.h"
#include "src/core/omni.h"
#include "src/core/tensor.h"
#include "src/engine/engine.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define ED_GEN 24
#define ED_SEQS 6

static void ed_free_model(void *m) { llm_model_free(m); }
static void ed_free_engine(void *e) { engine_free(e); }

static const char *ed_device(void)
{
    const char *b = getenv("OMNI_DEV_BACKEND");
    return b && *b && strcmp(b, "cpu") ? b : "cpu-dev";
}

struct ed_out {
    pthread_mutex_t *mu;
    pthread_cond_t *cv;
    int *n_final;
    int32_t tok[2][ED_GEN];
    int n_tok[2];
    int errors;
    int cached_tokens;
    char error[256];
};

static void ed_event(void *user, const struct engine_event *ev)
{
    struct ed_out *o = user;
    pthread_mutex_lock(o->mu);
    const int c = ev->choice < 2 ? ev->choice : 1;
    if (ev->type == ENGINE_EV_TOKEN) {
        if (o->n_tok[c] < ED_GEN)
            o->tok[c][o->n_tok[c]++] = ev->token;
    } else {
        if (ev->type == ENGINE_EV_ERROR) {
            o->errors++;
            snprintf(o->error, sizeof o->error, "%s", ev->error ? ev->error : "?");
        }
        if (c == 0)
            o->cached_tokens = ev->usage.cached_tokens;
        (*o->n_final)++;
        pthread_cond_broadcast(o->cv);
    }
    pthread_mutex_unlock(o->mu);
}

struct ed_group {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int n_final;
};

static void ed_out_init(struct ed_out *o, struct ed_group *g)
{
    memset(o, 0, sizeof *o);
    o->mu = &g->mu;
    o->cv = &g->cv;
    o->n_final = &g->n_final;
}

static struct engine *ed_start(struct llm_model *m, struct engine_params *ep, char *err,
                               size_t errlen)
{
    struct engine *e = engine_new(ep, err, errlen);
    if (!e)
        return NULL;
    if (engine_add_model(e, m, "m", err, errlen) < 0 || engine_start(e, err, errlen) < 0) {
        engine_free(e);
        return NULL;
    }
    test_defer(ed_free_engine, e);
    return e;
}

static struct engine_request ed_greedy(const int32_t *ids, int n, struct ed_out *o)
{
    struct engine_request rq = engine_default_request();
    rq.prompt = ids;
    rq.n_prompt = n;
    rq.max_tokens = ED_GEN;
    rq.sampling.temperature = 0;
    rq.ignore_eog = true;
    rq.on_event = ed_event;
    rq.user = o;
    return rq;
}

/* Prompts: the first 8 tokens common, then each its own, 24 - i % 5 long. */
static void ed_prompts(int32_t ids[ED_SEQS][24], int n_vocab)
{
    uint64_t seed = 7;
    for (int i = 0; i < ED_SEQS; i++)
        for (int j = 0; j < 24; j++) {
            seed = seed * 6364136223846793005ull + 1442695040888963407ull;
            ids[i][j] = 3 + (int32_t)((seed >> 33) % (uint64_t)(n_vocab - 3));
            if (j < 8)
                ids[i][j] = ids[0][j];
        }
}

static void ed_wait(struct ed_group *g, int n)
{
    pthread_mutex_lock(&g->mu);
    while (g->n_final < n)
        pthread_cond_wait(&g->cv, &g->mu);
    pthread_mutex_unlock(&g->mu);
}

static void engine_on_device(const char *fixture)
{
    char file[256], err[512] = "";
    snprintf(file, sizeof file, "%s.gguf", fixture);
    struct llm_model *m = llm_model_load(test_golden(file), NULL, err, sizeof err);
    if (!m)
        SKIP("golden fixtures missing (make golden-fixtures)");
    test_defer(ed_free_model, m);
    const struct llm_hparams *hp = llm_model_hparams(m);
    int32_t ids[ED_SEQS][24];
    ed_prompts(ids, hp->n_vocab);
    struct ed_group g = { .n_final = 0 };
    pthread_mutex_init(&g.mu, NULL);
    pthread_cond_init(&g.cv, NULL);

    /* reference: the CPU engine, batch-invariant, each sequence alone */
    struct engine_params cp = engine_default_params();
    cp.deterministic = true;
    cp.kv_memory_bytes = 1 << 20;
    cp.kv_block_size = 4;
    struct engine *cpu = ed_start(m, &cp, err, sizeof err);
    CHECK_MSG(cpu, "cpu engine: %s", err);
    static struct ed_out ref[ED_SEQS], one;
    for (int i = 0; i < ED_SEQS; i++) {
        ed_out_init(&ref[i], &g);
        struct engine_request rq = ed_greedy(ids[i], 24 - i % 5, &ref[i]);
        CHECK_EQ(engine_generate(cpu, &rq, err, sizeof err), 0);
        CHECK_EQ(ref[i].n_tok[0], ED_GEN);
    }
    int32_t long_ids[37];
    for (int j = 0; j < 37; j++)
        long_ids[j] = ids[j % ED_SEQS][j % 24];
    ed_out_init(&one, &g);
    struct engine_request rq1 = ed_greedy(long_ids, 37, &one);
    CHECK_EQ(engine_generate(cpu, &rq1, err, sizeof err), 0);
    test_release(cpu);

    /* the device engine: 24 blocks of 4 tokens for 6 sequences of up to
     * 48 tokens - preemption happens; the first request warms the prefix
     * cache so the others share its blocks */
    struct engine_params dp = engine_default_params();
    dp.device = ed_device();
    dp.kv_block_size = 4;
    const size_t block = (size_t)hp->n_layer * 2 * (size_t)(hp->n_head_kv * hp->head_dim) * 2 * 4;
    dp.kv_memory_bytes = 24 * block;
    struct engine *e = ed_start(m, &dp, err, sizeof err);
    CHECK_MSG(e, "device engine: %s", err);
    static struct ed_out dev[ED_SEQS], two, lp;
    ed_out_init(&dev[0], &g);
    struct engine_request rq = ed_greedy(ids[0], 24, &dev[0]);
    CHECK_EQ(engine_generate(e, &rq, err, sizeof err), 0);
    g.n_final = 0;
    for (int i = 1; i < ED_SEQS; i++) {
        ed_out_init(&dev[i], &g);
        rq = ed_greedy(ids[i], 24 - i % 5, &dev[i]);
        CHECK_EQ(engine_submit(e, &rq, NULL, err, sizeof err), 0);
    }
    ed_wait(&g, ED_SEQS - 1);
    for (int i = 0; i < ED_SEQS; i++) {
        CHECK_MSG(dev[i].errors == 0, "sequence %d: %s", i, dev[i].error);
        CHECK_EQ(dev[i].n_tok[0], ED_GEN);
        CHECK_MSG(memcmp(dev[i].tok[0], ref[i].tok[0], sizeof ref[i].tok[0]) == 0,
                  "sequence %d: device tokens differ from llm_forward's", i);
    }
    struct engine_stats st;
    engine_stats(e, &st);
    CHECK_MSG(st.preemptions > 0, "no preemption happened");
    CHECK_MSG(st.prefix_hits > 0, "no prefix was shared");

    /* n = 2: the partial last prompt block forks on the device */
    g.n_final = 0;
    ed_out_init(&two, &g);
    rq = ed_greedy(long_ids, 37, &two);
    rq.n = 2;
    CHECK_EQ(engine_generate(e, &rq, err, sizeof err), 0);
    CHECK_EQ(two.errors, 0);
    for (int c = 0; c < 2; c++)
        CHECK_MSG(memcmp(two.tok[c], one.tok[0], sizeof one.tok[0]) == 0,
                  "choice %d differs from the n = 1 run", c);
    /* logprobs: the logits come back to the host and are sampled there */
    g.n_final = 0;
    ed_out_init(&lp, &g);
    rq = ed_greedy(ids[3], 24 - 3 % 5, &lp);
    rq.sampling.n_logprobs = 2;
    CHECK_EQ(engine_generate(e, &rq, err, sizeof err), 0);
    CHECK(memcmp(lp.tok[0], ref[3].tok[0], sizeof lp.tok[0]) == 0);
    test_release(e);
    pthread_mutex_destroy(&g.mu);
    pthread_cond_destroy(&g.cv);
}

TEST(engine_dev_qwen3_f32) { engine_on_device("qwen3-f32"); }
TEST(engine_dev_llama_f32) { engine_on_device("llama-f32"); }

/* Bad devices and models fail engine_start with the reason. */
TEST(engine_dev_refusals)
{
    char err[512] = "";
    struct llm_model *m = llm_model_load(test_golden("llama-f32.gguf"), NULL, err, sizeof err);
    if (!m)
        SKIP("golden fixtures missing (make golden-fixtures)");
    test_defer(ed_free_model, m);
    struct engine_params ep = engine_default_params();
    ep.kv_memory_bytes = 1 << 20;
    ep.device = "tpu";
    CHECK(!ed_start(m, &ep, err, sizeof err));
    CHECK_STR_CONTAINS(err, "cuda:N");
    ep.device = "cuda:x";
    CHECK(!ed_start(m, &ep, err, sizeof err));
    CHECK_STR_CONTAINS(err, "cuda:N");
    if (!omni_backend_available("cuda")) {
        ep.device = "cuda";
        CHECK(!ed_start(m, &ep, err, sizeof err));
        CHECK_STR_CONTAINS(err, "CUDA=1");
    }
    ep.device = "cpu-dev";
    ep.kv_type = GGML_TYPE_Q8_0;
    CHECK(!ed_start(m, &ep, err, sizeof err));
    CHECK_STR_CONTAINS(err, "q8_0");
    struct llm_model *g2 = llm_model_load(test_golden("gemma2-f32.gguf"), NULL, err, sizeof err);
    if (g2) {
        test_defer(ed_free_model, g2);
        ep.kv_type = GGML_TYPE_F16;
        CHECK(!ed_start(g2, &ep, err, sizeof err));
        CHECK_STR_CONTAINS(err, "gemma2");
    }
}
