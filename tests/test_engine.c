/* test_engine.c - the engine on the tiny golden models: greedy output equal
 * to a plain llm_forward loop, prefix-cache reuse, preemption and resume,
 * n > 1 choices, cancellation and timeouts freeing every block, identical
 * results at concurrency 8 and 1 with --deterministic, two models at once, a
 * stress run of hundreds of random requests, and refused bad requests. */
#include "test.h"

#include "llm/grammar/grammar.h"
#include "llm/model.h"
#include "llm/tokenizer.h"
#include "src/core/matmul.h"
#include "src/core/omni.h"
#include "src/core/tensor.h"
#include "src/engine/engine.h"
#include "src/engine/kv_pool.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>

#define MAX_CHOICES 4
#define MAX_GEN 128

static void free_model(void *m) { llm_model_free(m); }
static void free_engine(void *e) { engine_free(e); }

/* A golden model, freed after the test unless test_release(m) frees it
 * earlier; NULL if the fixture is missing. */
static struct llm_model *golden(const char *name)
{
    char file[256], err[256];
    snprintf(file, sizeof file, "%s.gguf", name);
    struct llm_model *m = llm_model_load(test_golden(file), NULL, err, sizeof err);
    test_defer(free_model, m);
    return m;
}

/* What one request delivered, filled on the engine thread. */
struct result {
    pthread_mutex_t *mu;
    pthread_cond_t *cv;
    int *n_finished;               /* shared by a group of requests */
    int32_t tok[MAX_CHOICES][MAX_GEN];
    float logprob[MAX_CHOICES][MAX_GEN]; /* of each token, when the request asked for them */
    int n_tok[MAX_CHOICES];
    int n_final;
    enum engine_finish finish[MAX_CHOICES];
    int stop_index[MAX_CHOICES];
    struct engine_usage usage[MAX_CHOICES];
    char text[MAX_CHOICES][2048];
    size_t text_len[MAX_CHOICES];
    int errors;
    int events_after_final;
    uint64_t id;
    struct engine *cancel_engine;  /* cancel after cancel_after tokens of choice 0 */
    int cancel_after;
};

static void on_event(void *user, const struct engine_event *ev)
{
    struct result *r = user;
    pthread_mutex_lock(r->mu);
    const int c = ev->choice;
    if (r->finish[c] != ENGINE_FINISH_NONE)
        r->events_after_final++;
    if (ev->text_len && r->text_len[c] + ev->text_len < sizeof r->text[c]) {
        memcpy(r->text[c] + r->text_len[c], ev->text, ev->text_len);
        r->text_len[c] += ev->text_len;
    }
    if (ev->type == ENGINE_EV_TOKEN) {
        if (r->n_tok[c] < MAX_GEN) {
            r->logprob[c][r->n_tok[c]] = ev->logprobs ? ev->logprobs->chosen.logprob : 0.0f;
            r->tok[c][r->n_tok[c]++] = ev->token;
        }
        if (r->cancel_engine && c == 0 && r->n_tok[0] == r->cancel_after)
            engine_cancel(r->cancel_engine, ev->request_id);
    } else {
        r->errors += ev->type == ENGINE_EV_ERROR;
        r->finish[c] = ev->type == ENGINE_EV_ERROR ? ENGINE_FINISH_STOP : ev->finish;
        r->stop_index[c] = ev->stop_index;
        r->usage[c] = ev->usage;
        r->n_final++;
        (*r->n_finished)++;
        pthread_cond_broadcast(r->cv);
    }
    pthread_mutex_unlock(r->mu);
}

struct group {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int n_finished;
};

static void group_init(struct group *g)
{
    pthread_mutex_init(&g->mu, NULL);
    pthread_cond_init(&g->cv, NULL);
    g->n_finished = 0;
}

static void group_wait(struct group *g, int n_final)
{
    pthread_mutex_lock(&g->mu);
    while (g->n_finished < n_final)
        pthread_cond_wait(&g->cv, &g->mu);
    pthread_mutex_unlock(&g->mu);
}

static void result_init(struct result *r, struct group *g)
{
    memset(r, 0, sizeof *r);
    r->mu = &g->mu;
    r->cv = &g->cv;
    r->n_finished = &g->n_finished;
}

static void random_prompt(int32_t *ids, int n, int n_vocab, uint64_t seed)
{
    for (int i = 0; i < n; i++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        ids[i] = 3 + (int32_t)((seed >> 33) % (uint64_t)(n_vocab - 3));
    }
}

/* Default engine settings with 1 MiB of KV cache, batch-invariant
 * (deterministic) or not. */
static struct engine_params small_params(bool deterministic)
{
    struct engine_params ep = engine_default_params();
    ep.deterministic = deterministic;
    ep.kv_memory_bytes = 1 << 20;
    return ep;
}

static struct engine *start(struct llm_model *m, struct engine_params *ep)
{
    char err[256];
    struct engine *e = engine_new(ep, err, sizeof err);
    if (!e)
        return NULL;
    if (engine_add_model(e, m, "m", err, sizeof err) != 0 || engine_start(e, err, sizeof err)) {
        fprintf(stderr, "engine: %s\n", err);
        engine_free(e);
        return NULL;
    }
    test_defer(free_engine, e); /* stopped after the test, also when a CHECK failed */
    return e;
}

static struct engine_request greedy(const int32_t *ids, int n, int max_tokens,
                                    struct result *res)
{
    struct engine_request rq = engine_default_request();
    rq.prompt = ids;
    rq.n_prompt = n;
    rq.max_tokens = max_tokens;
    rq.sampling.temperature = 0;
    rq.ignore_eog = true;
    rq.on_event = on_event;
    rq.user = res;
    return rq;
}

/* Blocks still used once everything has ended (the engine publishes its
 * statistics at the end of each step, right after the final events); waits
 * up to 60 s for that step to end, so a slow or busy machine is no failure. */
static int blocks_used_when_idle(struct engine *e)
{
    struct engine_stats st;
    struct timespec t0, now;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (;;) {
        engine_stats(e, &st);
        if (!st.running && !st.waiting && !st.kv_blocks_used)
            return 0;
        clock_gettime(CLOCK_MONOTONIC, &now);
        if (now.tv_sec - t0.tv_sec > 60)
            break;
        struct timespec ts = { 0, 1000000 };
        nanosleep(&ts, NULL);
    }
    return st.kv_blocks_used + 1000 * (st.running + st.waiting);
}

// ---- tests ---------------------------------------------------------------------

/* Greedy tokens through the engine equal a plain prefill + decode loop over
 * one scattered block table, both with K/V stored as kv_type. */
static void check_matches_plain_forward(const char *model, int kv_type)
{
    struct llm_model *m = golden(model);
    if (!m)
        SKIP("golden fixtures missing (make golden-fixtures)");
    const struct llm_hparams *hp = llm_model_hparams(m);
    enum { NP = 21, NG = 30 };
    int32_t ids[NP + NG];
    random_prompt(ids, NP, hp->n_vocab, 7);

    /* reference */
    char err[256];
    struct llm_ctx *ctx = llm_ctx_new(m, 64, NULL, err, sizeof err);
    struct llm_kv *kv = llm_kv_new(m, kv_type, 16, 8, err, sizeof err);
    CHECK(ctx && kv);
    llm_ctx_set_batch_invariant(ctx, true);
    int32_t table[8] = { 7, 3, 5, 1, 0, 2, 4, 6 }, pos[NP], seq[NP] = { 0 };
    struct llm_seq_view view = { table, 8 };
    float *logits = malloc((size_t)hp->n_vocab * sizeof(float));
    int32_t want[NG];
    for (int i = 0; i < NP; i++)
        pos[i] = i;
    int n = NP;
    for (int g = 0; g < NG; g++) {
        struct llm_batch b = { .n_tokens = g ? 1 : NP, .token = g ? &ids[n - 1] : ids,
                               .pos = g ? &(int32_t){ n - 1 } : pos, .seq = seq };
        CHECK_EQ(llm_forward(ctx, &b, kv, &view, logits), 1);
        int best = 0;
        for (int v = 1; v < hp->n_vocab; v++)
            best = logits[v] > logits[best] ? v : best;
        want[g] = ids[n++] = best;
    }
    free(logits);
    llm_kv_free(kv);
    llm_ctx_free(ctx);

    struct engine_params ep = small_params(true);
    ep.kv_type = kv_type;
    struct engine *e = start(m, &ep);
    CHECK(e);
    struct group g;
    group_init(&g);
    struct result res;
    result_init(&res, &g);
    struct engine_request rq = greedy(ids, NP, NG, &res);
    CHECK_EQ(engine_generate(e, &rq, err, sizeof err), 0);
    CHECK_EQ(res.n_tok[0], NG);
    for (int i = 0; i < NG; i++)
        CHECK_MSG(res.tok[0][i] == want[i], "token %d: %d, want %d", i, res.tok[0][i], want[i]);
    CHECK_EQ(res.finish[0], ENGINE_FINISH_LENGTH);
    CHECK_EQ(res.usage[0].prompt_tokens, NP);
    CHECK_EQ(res.usage[0].completion_tokens, NG);
    CHECK(res.usage[0].ttft_ms > 0 && res.usage[0].total_ms >= res.usage[0].ttft_ms);
    CHECK_EQ(blocks_used_when_idle(e), 0);
    test_release(e);
    test_release(m);
}

TEST(engine_matches_plain_forward) { check_matches_plain_forward("llama-q8_0", GGML_TYPE_F16); }

/* --kv-type q8_0: heads inside a 32-value block (llama, head_dim 16) and of
 * whole blocks (qwen3, head_dim 32); then n > 1 choices (copy of a partial
 * Q8_0 block) and prefix-cache reuse give the solo greedy tokens. */
TEST(engine_q8_0_kv)
{
    check_matches_plain_forward("llama-f32", GGML_TYPE_Q8_0);
    check_matches_plain_forward("qwen3-q8_0", GGML_TYPE_Q8_0);
    struct llm_model *m = golden("qwen2-f16");
    if (!m)
        SKIP("golden fixtures missing (make golden-fixtures)");
    struct engine_params ep = small_params(true);
    ep.kv_type = GGML_TYPE_Q8_0;
    struct engine *e = start(m, &ep);
    CHECK(e);
    int32_t ids[37];
    random_prompt(ids, 37, llm_model_hparams(m)->n_vocab, 13);
    struct group g;
    group_init(&g);
    struct result one, three, again;
    result_init(&one, &g);
    result_init(&three, &g);
    result_init(&again, &g);
    char err[256];
    struct engine_request rq = greedy(ids, 37, 20, &one);
    CHECK_EQ(engine_generate(e, &rq, err, sizeof err), 0);
    rq.user = &again;
    CHECK_EQ(engine_generate(e, &rq, err, sizeof err), 0);
    CHECK_EQ(again.usage[0].cached_tokens, 32);
    CHECK(memcmp(again.tok[0], one.tok[0], sizeof one.tok[0]) == 0);
    rq.n = 3;
    rq.user = &three;
    CHECK_EQ(engine_generate(e, &rq, err, sizeof err), 0);
    for (int c = 0; c < 3; c++)
        CHECK(memcmp(three.tok[c], one.tok[0], sizeof one.tok[0]) == 0);
    CHECK_EQ(blocks_used_when_idle(e), 0);
    test_release(e);
    test_release(m);
}

/* A repeated prompt reuses its full blocks (all but the last token). */
TEST(engine_prefix_cache_reuse)
{
    struct llm_model *m = golden("qwen2-q8_0");
    if (!m)
        SKIP("golden fixtures missing (make golden-fixtures)");
    struct engine_params ep = small_params(true);
    struct engine *e = start(m, &ep);
    CHECK(e);
    int32_t ids[50];
    random_prompt(ids, 50, llm_model_hparams(m)->n_vocab, 3);
    struct group g;
    group_init(&g);
    struct result a, b, c;
    result_init(&a, &g);
    result_init(&b, &g);
    result_init(&c, &g);
    char err[256];
    struct engine_request rq = greedy(ids, 48, 10, &a);
    CHECK_EQ(engine_generate(e, &rq, err, sizeof err), 0);
    CHECK_EQ(a.usage[0].cached_tokens, 0);
    rq.user = &b; /* 48 tokens: blocks 0-1 reused, block 2 holds the last token */
    CHECK_EQ(engine_generate(e, &rq, err, sizeof err), 0);
    CHECK_EQ(b.usage[0].cached_tokens, 32);
    CHECK(memcmp(a.tok[0], b.tok[0], sizeof a.tok[0]) == 0);
    rq.n_prompt = 50; /* longer: the first request's 3 full blocks */
    rq.user = &c;
    CHECK_EQ(engine_generate(e, &rq, err, sizeof err), 0);
    CHECK_EQ(c.usage[0].cached_tokens, 48);
    CHECK_EQ(blocks_used_when_idle(e), 0);
    struct engine_stats st;
    engine_stats(e, &st);
    CHECK_EQ(st.prefix_hits, 2);
    CHECK_EQ(st.prefix_hit_tokens, 80);
    CHECK(st.kv_blocks_cached > 0);
    test_release(e);
    test_release(m);
}

/* Solo greedy runs of count prompts, then all at once: identical tokens. */
static void concurrency_identity_snap(const char *model, int count, size_t kv_bytes,
                                      int block_size, bool expect_preemption, int64_t snap_bytes)
{
    struct llm_model *m = golden(model);
    if (!m)
        SKIP("golden fixtures missing (make golden-fixtures)");
    struct engine_params ep = engine_default_params();
    ep.deterministic = true;
    ep.kv_memory_bytes = kv_bytes;
    ep.kv_block_size = block_size;
    ep.state_snapshot_memory = snap_bytes;
    struct engine *e = start(m, &ep);
    CHECK(e);
    enum { NP = 24, NG = 40 };
    int32_t ids[16][NP];
    struct result *solo = calloc(16, sizeof *solo), *all = calloc(16, sizeof *all);
    struct group g;
    group_init(&g);
    char err[256];
    for (int i = 0; i < count; i++) {
        random_prompt(ids[i], NP, llm_model_hparams(m)->n_vocab, 100 + (uint64_t)i);
        result_init(&solo[i], &g);
        struct engine_request rq = greedy(ids[i], NP - i % 5, NG, &solo[i]);
        CHECK_EQ(engine_generate(e, &rq, err, sizeof err), 0);
    }
    struct engine_stats before;
    CHECK_EQ(blocks_used_when_idle(e), 0);
    engine_stats(e, &before);
    /* alone, every token after the first took a decode-only step of one row */
    CHECK_EQ(before.decode_steps, (uint64_t)count * (NG - 1));
    CHECK_EQ(before.decode_rows, before.decode_steps);
    CHECK(before.decode_step_ms <= before.step_ms);
    group_init(&g);
    for (int i = 0; i < count; i++) {
        result_init(&all[i], &g);
        struct engine_request rq = greedy(ids[i], NP - i % 5, NG, &all[i]);
        CHECK_EQ(engine_submit(e, &rq, NULL, err, sizeof err), 0);
    }
    group_wait(&g, count);
    for (int i = 0; i < count; i++) {
        CHECK_EQ(all[i].n_tok[0], NG);
        CHECK_MSG(memcmp(solo[i].tok[0], all[i].tok[0], sizeof solo[i].tok[0]) == 0,
                  "sequence %d differs from its solo run", i);
        CHECK_EQ(all[i].events_after_final, 0);
    }
    CHECK_EQ(blocks_used_when_idle(e), 0);
    struct engine_stats st;
    engine_stats(e, &st);
    if (expect_preemption)
        CHECK_MSG(st.preemptions > before.preemptions, "no preemption happened");
    /* together: decode-only steps of several rows, never more rows than tokens */
    const uint64_t d_steps = st.decode_steps - before.decode_steps;
    const uint64_t d_rows = st.decode_rows - before.decode_rows;
    CHECK(d_steps > 0 && d_rows <= (uint64_t)count * (NG - 1));
    CHECK(count == 1 || d_rows > d_steps);
    CHECK(st.decode_step_ms - before.decode_step_ms <= st.step_ms - before.step_ms);
    if (snap_bytes > 0) /* the snapshot store was full: thinned while they ran */
        CHECK_MSG(st.snap_evictions > 0 && st.snaps_held <= st.snap_slots,
                  "%llu snapshots evicted, %d held of %d", (unsigned long long)st.snap_evictions,
                  st.snaps_held, st.snap_slots);
    free(solo);
    free(all);
    test_release(e);
    test_release(m);
}

static void concurrency_identity(const char *model, int count, size_t kv_bytes, int block_size,
                                 bool expect_preemption)
{
    concurrency_identity_snap(model, count, kv_bytes, block_size, expect_preemption, 0);
}

TEST(engine_deterministic_concurrency_8)
{
    concurrency_identity("llama-q8_0", 8, 1 << 20, 16, false);
}

/* A pool of 24 blocks of 4 tokens cannot hold 6 sequences of 64 tokens:
 * the newest are preempted, recomputed, and still give the solo tokens. */
TEST(engine_preemption_same_output)
{
    struct llm_model *m = golden("qwen3-f32");
    if (!m)
        SKIP("golden fixtures missing (make golden-fixtures)");
    /* layers x (K, V) x kv_dim x f16 x 4 tokens */
    const struct llm_hparams *hp = llm_model_hparams(m);
    const size_t block = (size_t)hp->n_layer * 2 * (size_t)(hp->n_head_kv * hp->head_dim) * 2 * 4;
    test_release(m);
    concurrency_identity("qwen3-f32", 6, 24 * block, 4, true);
}

/* n choices share the prompt's blocks; greedy choices all equal the n = 1 run;
 * sampled ones use seeds seed + i. */
TEST(engine_n_choices)
{
    struct llm_model *m = golden("llama3-q8_0");
    if (!m)
        SKIP("golden fixtures missing (make golden-fixtures)");
    struct engine_params ep = small_params(true);
    struct engine *e = start(m, &ep);
    CHECK(e);
    int32_t ids[37];
    random_prompt(ids, 37, llm_model_hparams(m)->n_vocab, 11);
    struct group g;
    group_init(&g);
    struct result one, three, hot;
    result_init(&one, &g);
    result_init(&three, &g);
    result_init(&hot, &g);
    char err[256];
    struct engine_request rq = greedy(ids, 37, 20, &one);
    CHECK_EQ(engine_generate(e, &rq, err, sizeof err), 0);
    rq.n = 3;
    rq.user = &three;
    CHECK_EQ(engine_generate(e, &rq, err, sizeof err), 0);
    for (int c = 0; c < 3; c++) {
        CHECK_EQ(three.n_tok[c], 20);
        CHECK(memcmp(three.tok[c], one.tok[0], sizeof one.tok[0]) == 0);
        CHECK_EQ(three.usage[c].prompt_tokens, 37);
    }
    rq.sampling.temperature = 1.5f;
    rq.sampling.top_k = 0;
    rq.sampling.top_p = 1.0f;
    rq.sampling.min_p = 0;
    rq.sampling.seed = 5;
    rq.user = &hot;
    CHECK_EQ(engine_generate(e, &rq, err, sizeof err), 0);
    CHECK(memcmp(hot.tok[0], hot.tok[1], sizeof hot.tok[0]) != 0);
    CHECK_EQ(blocks_used_when_idle(e), 0);
    test_release(e);
    test_release(m);
}

/* Cancel from the event callback, a timeout, and engine_free with requests
 * in flight: each choice gets one final event and every block comes back. */
TEST(engine_cancel_timeout_free_blocks)
{
    struct llm_model *m = golden("llama-f16");
    if (!m)
        SKIP("golden fixtures missing (make golden-fixtures)");
    struct engine_params ep = small_params(false);
    struct engine *e = start(m, &ep);
    CHECK(e);
    int32_t ids[30];
    random_prompt(ids, 30, llm_model_hparams(m)->n_vocab, 5);
    struct group g;
    group_init(&g);
    struct result c, t;
    result_init(&c, &g);
    result_init(&t, &g);
    c.cancel_engine = e;
    c.cancel_after = 3;
    char err[256];
    struct engine_request rq = greedy(ids, 30, 0, &c);
    rq.n = 2;
    CHECK_EQ(engine_submit(e, &rq, NULL, err, sizeof err), 0);
    group_wait(&g, 2);
    CHECK_EQ(c.finish[0], ENGINE_FINISH_CANCELLED);
    CHECK_EQ(c.finish[1], ENGINE_FINISH_CANCELLED);
    CHECK(c.n_tok[0] >= 3 && c.n_tok[0] <= 4); /* cancelled within one step */
    CHECK_EQ(blocks_used_when_idle(e), 0);

    rq = greedy(ids, 30, 0, &t);
    rq.timeout_s = 1e-6;
    CHECK_EQ(engine_submit(e, &rq, NULL, err, sizeof err), 0);
    group_wait(&g, 3);
    CHECK_EQ(t.finish[0], ENGINE_FINISH_TIMEOUT);
    CHECK_EQ(blocks_used_when_idle(e), 0);
    engine_cancel(e, 987654); /* unknown id: nothing happens */

    struct result f[3];
    for (int i = 0; i < 3; i++) {
        result_init(&f[i], &g);
        rq = greedy(ids, 30 - i, 0, &f[i]);
        CHECK_EQ(engine_submit(e, &rq, NULL, err, sizeof err), 0);
    }
    test_release(e);
    for (int i = 0; i < 3; i++) {
        CHECK_EQ(f[i].n_final, 1);
        CHECK(f[i].finish[0] == ENGINE_FINISH_CANCELLED || f[i].finish[0] == ENGINE_FINISH_LENGTH);
    }
    test_release(m);
}

/* Two models with their own queues, stepped in turn, share the budget. */
TEST(engine_two_models)
{
    struct llm_model *a = golden("llama-q8_0"), *b = golden("qwen3-q8_0");
    if (!a || !b)
        SKIP("golden fixtures missing (make golden-fixtures)");
    char err[256];
    struct engine_params ep = small_params(true);
    struct engine *e = engine_new(&ep, err, sizeof err);
    CHECK(e);
    test_defer(free_engine, e);
    CHECK_EQ(engine_add_model(e, a, "a", err, sizeof err), 0);
    CHECK_EQ(engine_add_model(e, b, "b", err, sizeof err), 1);
    CHECK(engine_add_model(e, b, "b", err, sizeof err) < 0);
    CHECK_EQ(engine_find_model(e, "b"), 1);
    CHECK_EQ(engine_find_model(e, "c"), -1);
    CHECK_STR_EQ(engine_model_name(e, 0), "a");
    CHECK_EQ(engine_start(e, err, sizeof err), 0);
    int32_t ids[20];
    random_prompt(ids, 20, 300, 9);
    struct group g;
    group_init(&g);
    struct result solo[2], both[4];
    for (int i = 0; i < 2; i++) {
        result_init(&solo[i], &g);
        struct engine_request rq = greedy(ids, 20, 25, &solo[i]);
        rq.model = i;
        CHECK_EQ(engine_generate(e, &rq, err, sizeof err), 0);
    }
    CHECK(memcmp(solo[0].tok[0], solo[1].tok[0], sizeof solo[0].tok[0]) != 0);
    group_init(&g);
    for (int i = 0; i < 4; i++) {
        result_init(&both[i], &g);
        struct engine_request rq = greedy(ids, 20, 25, &both[i]);
        rq.model = i % 2;
        CHECK_EQ(engine_submit(e, &rq, NULL, err, sizeof err), 0);
    }
    group_wait(&g, 4);
    for (int i = 0; i < 4; i++)
        CHECK(memcmp(both[i].tok[0], solo[i % 2].tok[0], sizeof solo[0].tok[0]) == 0);
    struct engine_stats st;
    engine_stats(e, &st);
    CHECK(st.kv_blocks_total > 0 && st.kv_blocks_total % 2 == 0); /* equal shares */
    CHECK_EQ(blocks_used_when_idle(e), 0);
    test_release(e);
    test_release(a);
    test_release(b);
}

/* Stop strings end a choice without being part of its text. */
static bool occurs(const int32_t *ids, int n, int32_t id)
{
    for (int i = 0; i < n; i++)
        if (ids[i] == id)
            return true;
    return false;
}

/* Extra stop token ids end a choice like EOG (also with ignore_eog) and are
 * not delivered. */
TEST(engine_stop_tokens)
{
    struct llm_model *m = golden("llama-f32");
    if (!m)
        SKIP("golden fixtures missing (make golden-fixtures)");
    struct engine_params ep = small_params(false);
    struct engine *e = start(m, &ep);
    CHECK(e);
    int32_t ids[10];
    random_prompt(ids, 10, llm_model_hparams(m)->n_vocab, 3);
    struct group g;
    group_init(&g);
    struct result full, cut;
    result_init(&full, &g);
    result_init(&cut, &g);
    char err[256];
    struct engine_request rq = greedy(ids, 10, 30, &full);
    CHECK_EQ(engine_generate(e, &rq, err, sizeof err), 0);
    /* the first token past the first few that did not occur before it */
    int at = 3;
    while (at < full.n_tok[0] && occurs(full.tok[0], at, full.tok[0][at]))
        at++;
    if (at == full.n_tok[0])
        SKIP("greedy output repeats one token");
    const int32_t stop_ids[] = { -5, full.tok[0][at] };
    rq.stop_tokens = stop_ids;
    rq.n_stop_tokens = 2;
    rq.user = &cut;
    CHECK_EQ(engine_generate(e, &rq, err, sizeof err), 0);
    CHECK_EQ(cut.finish[0], ENGINE_FINISH_STOP);
    CHECK_EQ(cut.n_tok[0], at);
    CHECK(memcmp(cut.tok[0], full.tok[0], (size_t)at * sizeof(int32_t)) == 0);
    rq.stop_tokens = NULL; /* a count without ids is refused */
    CHECK_EQ(engine_submit(e, &rq, NULL, err, sizeof err), OMNI_ERR_ARG);
    test_release(e);
    test_release(m);
}

/* Forces two tokens after the first two sampled ones (res first: on_event
 * takes the same user pointer). */
struct forcer {
    struct result res;
    int32_t ids[2];
    int calls;
};

static int32_t force_two(void *user, int choice)
{
    struct forcer *f = user;
    (void)choice;
    int k = f->calls++ - 2;
    return k >= 0 && k < 2 ? f->ids[k] : -1;
}

/* Forced tokens are delivered in place of samples (without logprobs), count
 * towards max_tokens, and the model continues from them as from a prompt. */
TEST(engine_force_token)
{
    struct llm_model *m = golden("llama-f32");
    if (!m)
        SKIP("golden fixtures missing (make golden-fixtures)");
    struct engine_params ep = small_params(false);
    struct engine *e = start(m, &ep);
    CHECK(e);
    const int n_vocab = llm_model_hparams(m)->n_vocab;
    int32_t ids[16];
    random_prompt(ids, 10, n_vocab, 5);
    struct group g;
    group_init(&g);
    struct forcer f = { .ids = { 7, 11 } };
    result_init(&f.res, &g);
    char err[256];
    struct engine_request rq = greedy(ids, 10, 8, &f.res);
    rq.force_token = force_two;
    rq.sampling.n_logprobs = 1;
    CHECK_EQ(engine_generate(e, &rq, err, sizeof err), 0);
    CHECK_EQ(f.res.n_tok[0], 8);
    CHECK_EQ(f.res.finish[0], ENGINE_FINISH_LENGTH);
    CHECK_EQ(f.res.tok[0][2], 7);
    CHECK_EQ(f.res.tok[0][3], 11);
    /* the same continuation as a prompt that ends with the forced tokens */
    memcpy(ids + 10, f.res.tok[0], 4 * sizeof(int32_t));
    struct result plain;
    result_init(&plain, &g);
    rq = greedy(ids, 14, 4, &plain);
    CHECK_EQ(engine_generate(e, &rq, err, sizeof err), 0);
    CHECK(memcmp(plain.tok[0], f.res.tok[0] + 4, 4 * sizeof(int32_t)) == 0);
    test_release(e);
    test_release(m);
}

/* Submits `next` from the engine thread at the first token of the request
 * it watches, so that both meet in the next step. */
struct chain {
    struct result *first;
    struct engine *e;
    struct engine_request next;
    bool sent;
};

static void submit_on_first_token(void *user, const struct engine_event *ev)
{
    struct chain *c = user;
    if (ev->type == ENGINE_EV_TOKEN && !c->sent) {
        char err[256];
        c->sent = engine_submit(c->e, &c->next, NULL, err, sizeof err) == 0;
    }
    on_event(c->first, ev);
}

/* A decode token joining another request's prefill of BLAS_MIN + 8 tokens
 * ran in a batch past OMNI_MATMUL_BLAS_MIN rows where alone it would take
 * the per-row path: kernel_switches counts it on every CPU (and, on AMX
 * CPUs, steps after it, where 2-row decodes take tiles). Solo runs count
 * nothing, nor does deterministic mode. The joining prompt is not the solo
 * one: a prefix-cache hit would leave a step of 9 rows, past the switch
 * point on AMX CPUs only. */
TEST(engine_kernel_switches)
{
    struct llm_model *m = golden("qwen2-q8_0");
    if (!m)
        SKIP("golden fixtures missing (make golden-fixtures)");
    enum { NB = OMNI_MATMUL_BLAS_MIN + 8 };
    int32_t a_ids[12], b_ids[NB], c_ids[NB];
    random_prompt(a_ids, 12, llm_model_hparams(m)->n_vocab, 31);
    random_prompt(b_ids, NB, llm_model_hparams(m)->n_vocab, 32);
    random_prompt(c_ids, NB, llm_model_hparams(m)->n_vocab, 33);
    for (int det = 0; det < 2; det++) {
        struct engine_params ep = small_params(det);
        struct engine *e = start(m, &ep);
        CHECK(e);
        struct group g;
        group_init(&g);
        struct result a, b;
        result_init(&a, &g);
        result_init(&b, &g);
        char err[256];
        struct engine_request rq = greedy(b_ids, NB, 4, &b);
        CHECK_EQ(engine_generate(e, &rq, err, sizeof err), 0);
        struct engine_stats st;
        engine_stats(e, &st);
        CHECK_EQ(st.kernel_switches, 0);
        result_init(&b, &g);
        struct chain c = { &a, e, greedy(c_ids, NB, 4, &b), false };
        rq = greedy(a_ids, 12, 8, &a);
        rq.on_event = submit_on_first_token;
        rq.user = &c;
        CHECK_EQ(engine_submit(e, &rq, NULL, err, sizeof err), 0);
        group_wait(&g, 2);
        CHECK(c.sent);
        CHECK_EQ(blocks_used_when_idle(e), 0);
        engine_stats(e, &st);
        CHECK_EQ(st.prefix_hit_tokens, 0); /* every prompt token ran */
        CHECK_MSG(det ? st.kernel_switches == 0 : st.kernel_switches >= 1,
                  "deterministic %d: %llu kernel switches", det,
                  (unsigned long long)st.kernel_switches);
        test_release(e);
    }
    test_release(m);
}

TEST(engine_stop_string)
{
    struct llm_model *m = golden("llama-f32");
    if (!m)
        SKIP("golden fixtures missing (make golden-fixtures)");
    struct engine_params ep = small_params(false);
    struct engine *e = start(m, &ep);
    CHECK(e);
    int32_t ids[10];
    random_prompt(ids, 10, llm_model_hparams(m)->n_vocab, 1);
    struct group g;
    group_init(&g);
    struct result full, cut;
    result_init(&full, &g);
    result_init(&cut, &g);
    char err[256];
    struct engine_request rq = greedy(ids, 10, 40, &full);
    CHECK_EQ(engine_generate(e, &rq, err, sizeof err), 0);
    CHECK(full.text_len[0] > 6);
    /* a stop string made of text from the middle of the full output */
    char stop[4];
    memcpy(stop, full.text[0] + full.text_len[0] / 2, 3);
    stop[3] = 0;
    const char *stops[] = { "never-there", stop };
    rq.user = &cut;
    rq.stop = stops;
    rq.n_stop = 2;
    CHECK_EQ(engine_generate(e, &rq, err, sizeof err), 0);
    CHECK_EQ(cut.finish[0], ENGINE_FINISH_STOP);
    CHECK_EQ(cut.stop_index[0], 1);
    cut.text[0][cut.text_len[0]] = 0;
    CHECK(strstr(cut.text[0], stop) == NULL);
    CHECK(cut.text_len[0] < full.text_len[0]);
    CHECK(memcmp(cut.text[0], full.text[0], cut.text_len[0]) == 0);
    test_release(e);
    test_release(m);
}

/* GBNF string literal of text (quotes and backslashes escaped, other bytes
 * as \xHH). */
static void gbnf_literal(const char *text, size_t n, char *out, size_t cap)
{
    size_t o = 0;
    out[o++] = '"';
    for (size_t i = 0; i < n && o + 6 < cap; i++) {
        unsigned char c = (unsigned char)text[i];
        if (c >= 0x20 && c < 0x7f && c != '"' && c != '\\')
            out[o++] = (char)c;
        else
            o += (size_t)snprintf(out + o, cap - o, "\\x%02X", c);
    }
    out[o++] = '"';
    out[o] = 0;
}

/* A lazy grammar (tool_choice "auto"): the output is free text until the
 * trigger appears, then follows the grammar from the trigger on. Trigger =
 * the 6th generated token's text of a free run; the grammar says trigger,
 * then the text of the run's first token, then the end. So the constrained
 * run is the free run up to the trigger, that text, and an end of
 * generation. A trigger that never comes leaves the output free. */
TEST(engine_lazy_grammar)
{
    struct llm_model *m = golden("llama-f32");
    if (!m)
        SKIP("golden fixtures missing (make golden-fixtures)");
    const struct tokenizer *tok = llm_model_tokenizer(m);
    struct engine_params ep = small_params(false);
    struct engine *e = start(m, &ep);
    CHECK(e);
    int32_t ids[10];
    random_prompt(ids, 10, llm_model_hparams(m)->n_vocab, 3);
    struct group g;
    group_init(&g);
    struct result full, lazy, never;
    result_init(&full, &g);
    result_init(&lazy, &g);
    result_init(&never, &g);
    char err[256];
    struct engine_request rq = greedy(ids, 10, 24, &full);
    CHECK_EQ(engine_generate(e, &rq, err, sizeof err), 0);
    CHECK(full.n_tok[0] >= 8);
    /* the first token whose text is 2+ bytes, not seen before in the output,
     * from the 6th on; and the text of the run's first token */
    char trig[64], first[64], gbnf[512], lit1[160], lit2[160];
    size_t prefix = 0, tl = 0;
    int k = 0;
    for (int i = 0; i < full.n_tok[0]; i++) {
        char piece[64];
        size_t n = tokenizer_piece(tok, full.tok[0][i], true, piece, sizeof piece);
        CHECK(n < sizeof piece);
        if (i == 0)
            memcpy(first, piece, n + 1), first[n] = 0;
        bool seen = false;
        for (size_t j = 0; j + n <= prefix && !seen; j++)
            seen = !memcmp(full.text[0] + j, piece, n);
        if (i >= 5 && n >= 2 && !seen) {
            memcpy(trig, piece, n);
            trig[n] = 0;
            tl = n;
            k = i;
            break;
        }
        prefix += n;
    }
    CHECK_MSG(tl > 0 && strlen(first) > 0, "no usable trigger in the free run");
    gbnf_literal(trig, tl, lit1, sizeof lit1);
    gbnf_literal(first, strlen(first), lit2, sizeof lit2);
    snprintf(gbnf, sizeof gbnf, "root ::= %s %s\n", lit1, lit2);
    struct grammar *gr = grammar_parse(gbnf, strlen(gbnf), err, sizeof err);
    CHECK_MSG(gr, "%s: %s", gbnf, err);
    rq.user = &lazy;
    rq.grammar = gr;
    rq.grammar_trigger = trig;
    rq.ignore_eog = false;
    CHECK_EQ(engine_generate(e, &rq, err, sizeof err), 0);
    CHECK_EQ(lazy.errors, 0);
    CHECK_EQ(lazy.finish[0], ENGINE_FINISH_STOP);   /* the grammar ended: end of generation */
    CHECK(lazy.n_tok[0] >= k + 1);
    size_t at = 0; /* where the trigger ends in the free run's text */
    while (at + tl <= full.text_len[0] && memcmp(full.text[0] + at, trig, tl))
        at++;
    CHECK(at + tl <= full.text_len[0]);
    at += tl;
    CHECK_MSG(lazy.text_len[0] == at + strlen(first) && !memcmp(lazy.text[0], full.text[0], at) &&
                  !memcmp(lazy.text[0] + at, first, strlen(first)),
              "free '%.*s' trigger '%s' first '%s' -> '%.*s'", (int)full.text_len[0], full.text[0], trig,
              first, (int)lazy.text_len[0], lazy.text[0]);
    /* a trigger that never comes: the free run */
    rq.user = &never;
    rq.grammar_trigger = "\x01never";
    rq.ignore_eog = true;
    CHECK_EQ(engine_generate(e, &rq, err, sizeof err), 0);
    CHECK(never.text_len[0] == full.text_len[0] && !memcmp(never.text[0], full.text[0], full.text_len[0]));
    grammar_free(gr);
    test_release(e);
    test_release(m);
}

/* Hundreds of short random requests (random lengths, n, sampling, stops,
 * cancels) on a small pool; afterwards every block is free. */
TEST(engine_stress_random_requests)
{
    struct llm_model *m = golden("qwen2-q8_0");
    if (!m)
        SKIP("golden fixtures missing (make golden-fixtures)");
    struct engine_params ep = engine_default_params();
    ep.kv_memory_bytes = 60 * 4096; /* 60 blocks of 16 tokens: preemption happens */
    ep.max_seqs = 8;
    ep.max_batch_tokens = 64;
    struct engine *e = start(m, &ep);
    CHECK(e);
    enum { N = 300 };
    struct result *res = calloc(N, sizeof *res);
    int32_t ids[64];
    struct group g;
    group_init(&g);
    uint64_t rng = 77;
    int finals = 0, submitted = 0;
    char err[256];
    const char *stops[] = { "a", "e " };
    for (int i = 0; i < N; i++) {
        rng = rng * 6364136223846793005ull + 1442695040888963407ull;
        const unsigned r = (unsigned)(rng >> 33);
        random_prompt(ids, 64, llm_model_hparams(m)->n_vocab, rng);
        result_init(&res[i], &g);
        struct engine_request rq = greedy(ids, 1 + r % 60, 1 + (r >> 8) % 24, &res[i]);
        rq.n = 1 + (r >> 13) % 3;
        rq.ignore_eog = (r >> 15) & 1;
        if ((r >> 16) & 1)
            rq.sampling.temperature = 0.9f, rq.sampling.seed = r;
        if ((r >> 17) % 4 == 0)
            rq.stop = stops, rq.n_stop = 2;
        if ((r >> 19) % 8 == 0)
            res[i].cancel_engine = e, res[i].cancel_after = 2;
        if ((r >> 22) % 16 == 0)
            rq.timeout_s = 1e-3;
        int rc = engine_submit(e, &rq, NULL, err, sizeof err);
        CHECK_MSG(rc == 0 || rc == OMNI_ERR_LIMIT, "%s", err);
        if (rc == 0) {
            finals += rq.n;
            submitted++;
        }
        if (i % 50 == 49)
            group_wait(&g, finals); /* keep the queue below max_queue */
    }
    group_wait(&g, finals);
    for (int i = 0; i < N; i++)
        CHECK_EQ(res[i].events_after_final, 0);
    CHECK_EQ(blocks_used_when_idle(e), 0);
    struct engine_stats st;
    engine_stats(e, &st);
    CHECK(st.generated_tokens > 0);
    CHECK(st.ttft_ms.count > 0 && st.ttft_ms.p50 <= st.ttft_ms.p95 &&
          st.ttft_ms.p95 <= st.ttft_ms.p99);
    CHECK(st.itl_ms.count > 0);
    free(res);
    test_release(e);
    test_release(m);
}

/* Refused at submit with a message naming the numbers; no callback runs. */
TEST(engine_bad_requests)
{
    struct llm_model *m = golden("llama-f32");
    if (!m)
        SKIP("golden fixtures missing (make golden-fixtures)");
    char err[256];
    struct engine_params ep = engine_default_params();
    ep.kv_memory_bytes = 4 * 4096; /* 4 blocks of 16 tokens */
    struct engine *e = engine_new(&ep, err, sizeof err);
    CHECK(e);
    test_defer(free_engine, e);
    int32_t ids[200];
    random_prompt(ids, 200, llm_model_hparams(m)->n_vocab, 2);
    struct group g;
    group_init(&g);
    struct result r;
    result_init(&r, &g);
    struct engine_request rq = greedy(ids, 10, 5, &r);
    CHECK_EQ(engine_submit(e, &rq, NULL, err, sizeof err), OMNI_ERR_ARG); /* not started */
    CHECK_EQ(engine_add_model(e, m, "m", err, sizeof err), 0);
    CHECK_EQ(engine_start(e, err, sizeof err), 0);
    rq.n_prompt = 128;
    CHECK_EQ(engine_submit(e, &rq, NULL, err, sizeof err), OMNI_ERR_ARG);
    CHECK_STR_CONTAINS(err, "context of 128");
    rq.n_prompt = 70;
    CHECK_EQ(engine_submit(e, &rq, NULL, err, sizeof err), OMNI_ERR_ARG);
    CHECK_STR_CONTAINS(err, "pool");
    rq.n_prompt = 10;
    rq.model = 3;
    CHECK_EQ(engine_submit(e, &rq, NULL, err, sizeof err), OMNI_ERR_ARG);
    rq.model = 0;
    rq.sampling.min_p = 2;
    CHECK_EQ(engine_submit(e, &rq, NULL, err, sizeof err), OMNI_ERR_ARG);
    rq.sampling.min_p = 0;
    ids[3] = 1 << 20;
    CHECK_EQ(engine_submit(e, &rq, NULL, err, sizeof err), OMNI_ERR_ARG);
    CHECK_STR_CONTAINS(err, "vocabulary");
    ids[3] = 5;
    rq.n = 0;
    CHECK_EQ(engine_submit(e, &rq, NULL, err, sizeof err), OMNI_ERR_ARG);
    rq.n = 1;
    /* a sequence that outgrows the pool ends with "length", not a failure */
    rq.n_prompt = 40;
    rq.max_tokens = 100;
    CHECK_EQ(engine_generate(e, &rq, err, sizeof err), 0);
    CHECK_EQ(r.finish[0], ENGINE_FINISH_LENGTH);
    CHECK_EQ(r.n_tok[0], 64 - 40 + 1); /* the token that found no slot is still delivered */
    CHECK_EQ(blocks_used_when_idle(e), 0);
    test_release(e);

    ep.max_queue = 0;
    e = start(m, &ep);
    CHECK(e);
    rq.n_prompt = 10;
    CHECK_EQ(engine_submit(e, &rq, NULL, err, sizeof err), OMNI_ERR_LIMIT);
    CHECK_STR_CONTAINS(err, "busy");
    test_release(e);
    CHECK_EQ(r.n_final, 1);
    test_release(m);
}

/* --prefix-cache-dir: blocks saved at engine_free come back at the next
 * start; a corrupt file or other KV settings are ignored. */
TEST(engine_prefix_store_roundtrip)
{
    struct llm_model *m = golden("qwen2-q8_0");
    if (!m)
        SKIP("golden fixtures missing (make golden-fixtures)");
    char dir[512], path[600];
    snprintf(dir, sizeof dir, "%s", test_tmpdir());
    snprintf(path, sizeof path, "%s/m.kvcache", dir);
    remove(path);
    struct engine_params ep = small_params(true);
    ep.prefix_cache_dir = dir;
    int32_t ids[40];
    random_prompt(ids, 40, llm_model_hparams(m)->n_vocab, 21);
    struct group g;
    group_init(&g);
    struct result r[4];
    char err[256];
    for (int run = 0; run < 4; run++) {
        if (run == 2) { /* flip one byte in the middle */
            size_t len = 0;
            char *buf = test_read_file(path, &len);
            CHECK(buf && len > 100);
            buf[len / 2] ^= 1;
            FILE *f = fopen(path, "wb");
            CHECK(f && fwrite(buf, 1, len, f) == len);
            fclose(f);
            free(buf);
        }
        ep.kv_type = run == 3 ? GGML_TYPE_F32 : GGML_TYPE_F16;
        struct engine *e = start(m, &ep);
        CHECK(e);
        result_init(&r[run], &g);
        struct engine_request rq = greedy(ids, 40, 8, &r[run]);
        CHECK_EQ(engine_generate(e, &rq, err, sizeof err), 0);
        test_release(e);
        CHECK(memcmp(r[run].tok[0], r[0].tok[0], sizeof r[0].tok[0]) == 0 || run == 3);
    }
    CHECK_EQ(r[0].usage[0].cached_tokens, 0);
    CHECK_EQ(r[1].usage[0].cached_tokens, 32);  /* reloaded from the file */
    CHECK_EQ(r[2].usage[0].cached_tokens, 0);   /* corrupt: ignored */
    CHECK_EQ(r[3].usage[0].cached_tokens, 0);   /* f16 file, f32 pool: ignored */
    test_release(m);
}

/* Sliding-window models through the engine (gemma2: every other layer,
 * gemma3: five in six with their own rope base, phi3 and mistral: all;
 * windows of 5-8 tokens, so every prompt crosses them): greedy tokens equal
 * the plain forward loop; a repeated prompt resumes from cached blocks that
 * reach past the window with the same tokens; preempted and recomputed
 * sequences give the solo tokens. */
TEST(engine_sliding_window_models)
{
    static const char *models[] = { "gemma2-f32", "gemma3-f32", "phi3-f32", "mistral-f32" };
    for (int k = 0; k < 4 && !test_failed_now(); k++)
        check_matches_plain_forward(models[k], GGML_TYPE_F16);
    struct llm_model *m = golden("gemma3-f32");
    if (!m)
        SKIP("golden fixtures missing (make golden-fixtures)");
    struct engine_params ep = small_params(true);
    struct engine *e = start(m, &ep);
    CHECK(e);
    int32_t ids[37];
    random_prompt(ids, 37, llm_model_hparams(m)->n_vocab, 17);
    struct group g;
    group_init(&g);
    struct result one, again;
    result_init(&one, &g);
    result_init(&again, &g);
    char err[256];
    struct engine_request rq = greedy(ids, 37, 20, &one);
    CHECK_EQ(engine_generate(e, &rq, err, sizeof err), 0);
    rq.user = &again;
    CHECK_EQ(engine_generate(e, &rq, err, sizeof err), 0);
    CHECK_EQ(again.usage[0].cached_tokens, 32);
    CHECK(memcmp(again.tok[0], one.tok[0], sizeof one.tok[0]) == 0);
    CHECK_EQ(blocks_used_when_idle(e), 0);
    test_release(e);
    test_release(m);
    /* 24 blocks of 4 tokens for 6 sequences of 64, as engine_preemption_same_output */
    m = golden("gemma2-f32");
    const struct llm_hparams *hp = llm_model_hparams(m);
    const size_t block = (size_t)hp->n_layer * 2 * (size_t)(hp->n_head_kv * hp->head_dim) * 2 * 4;
    test_release(m);
    concurrency_identity("gemma2-f32", 6, 24 * block, 4, true);
}

/* qwen3moe (experts routed per token), smollm3 (NoPE layers) and gptoss
 * (sinks, sliding window, biased experts) through the engine: greedy tokens
 * equal the plain forward; 6 sequences preempted and recomputed in
 * deterministic mode give their solo tokens (the expert products go through
 * the model's batch-invariant matmul). */
TEST(engine_moe_and_nope_models)
{
    static const char *models[] = { "qwen3moe-f32", "smollm3-f32", "gptoss-f32" };
    for (int k = 0; k < 3 && !test_failed_now(); k++) {
        check_matches_plain_forward(models[k], GGML_TYPE_F16);
        struct llm_model *m = golden(models[k]);
        if (!m)
            SKIP("golden fixtures missing (make golden-fixtures)");
        const struct llm_hparams *hp = llm_model_hparams(m);
        const size_t block = (size_t)hp->n_layer * 2 * (size_t)(hp->n_head_kv * hp->head_dim) * 2 * 4;
        test_release(m);
        concurrency_identity(models[k], 6, 24 * block, 4, true);
    }
}

/* lfm2 (per-sequence conv state in the pool's llm_kv) through the engine:
 * greedy == plain forward; a repeated prompt resumes from its cached blocks
 * and the state snapshot of the last one with the same tokens; n = 3 greedy
 * choices forked from one prompt (the state copied to each child) all give
 * the single choice's tokens; 6 sequences preempted and resumed give their
 * solo tokens; every slot and block comes back. */
static void recurrent_state_case(const char *name)
{
    check_matches_plain_forward(name, GGML_TYPE_F16);
    struct llm_model *m = golden(name);
    if (!m)
        SKIP("golden fixtures missing (make golden-fixtures)");
    struct engine_params ep = small_params(true);
    ep.state_snapshot_interval = ep.kv_block_size; /* a snapshot per block */
    struct engine *e = start(m, &ep);
    CHECK(e);
    int32_t ids[37];
    random_prompt(ids, 37, llm_model_hparams(m)->n_vocab, 23);
    struct group g;
    group_init(&g);
    struct result one, three, again;
    result_init(&one, &g);
    result_init(&three, &g);
    result_init(&again, &g);
    char err[256];
    struct engine_request rq = greedy(ids, 37, 20, &one);
    CHECK_EQ(engine_generate(e, &rq, err, sizeof err), 0);
    rq.user = &again;
    CHECK_EQ(engine_generate(e, &rq, err, sizeof err), 0);
    CHECK_EQ(again.usage[0].cached_tokens, 32); /* resumed from the block-32 snapshot */
    CHECK(memcmp(again.tok[0], one.tok[0], sizeof one.tok[0]) == 0);
    rq.n = 3;
    rq.user = &three;
    CHECK_EQ(engine_generate(e, &rq, err, sizeof err), 0);
    for (int c = 0; c < 3; c++) {
        CHECK_EQ(three.n_tok[c], 20);
        CHECK_MSG(memcmp(three.tok[c], one.tok[0], sizeof one.tok[0]) == 0, "choice %d", c);
    }
    CHECK_EQ(blocks_used_when_idle(e), 0);
    test_release(e);
    const struct llm_hparams *hp = llm_model_hparams(m);
    /* K/V in the attention layers only: the snapshots have a store of their own */
    const size_t block = (size_t)(hp->n_layer - hp->n_conv_layer - hp->n_gdn_layer) * 2 *
                         (size_t)(hp->n_head_kv * hp->head_dim) * 2 * 4;
    CHECK_EQ(kv_pool_block_bytes(m, GGML_TYPE_F16, 4), block);
    const int64_t snap = (int64_t)kv_pool_snap_bytes(m);
    CHECK_EQ(snap, (int64_t)(llm_model_state_floats(m) * sizeof(float)));
    test_release(m);
    concurrency_identity(name, 6, 24 * block, 4, true);
    /* a store of 5 snapshots for 6 sequences of up to 16 blocks: thinned
     * while they run and are preempted, still their solo tokens */
    concurrency_identity_snap(name, 6, 24 * block, 4, true, 5 * snap);
}

/* A snapshot every 3 blocks of 4 tokens: a prompt sharing 30 tokens with a
 * cached one (7 full blocks) resumes at the snapshot after block 6 (token
 * 24) and recomputes the rest; the same prompt again resumes at token 36;
 * with snapshots off nothing is cached. Every run gives the fresh engine's
 * tokens. */
static void snapshot_interval_case(const char *name)
{
    struct llm_model *m = golden(name);
    if (!m)
        SKIP("golden fixtures missing (make golden-fixtures)");
    const int n_vocab = llm_model_hparams(m)->n_vocab;
    int32_t a[37], b[37];
    random_prompt(a, 37, n_vocab, 23);
    random_prompt(b, 37, n_vocab, 29);
    memcpy(b, a, 30 * sizeof *b); /* the shared prefix ends inside the third interval */
    struct group g;
    group_init(&g);
    struct result fresh_b, ra, rb, again;
    result_init(&fresh_b, &g);
    result_init(&ra, &g);
    result_init(&rb, &g);
    result_init(&again, &g);
    char err[256];
    struct engine_params ep = small_params(true);
    ep.kv_block_size = 4;
    struct engine *e = start(m, &ep); /* b alone, nothing cached */
    CHECK(e);
    struct engine_request rq = greedy(b, 37, 12, &fresh_b);
    CHECK_EQ(engine_generate(e, &rq, err, sizeof err), 0);
    CHECK_EQ(fresh_b.usage[0].cached_tokens, 0);
    test_release(e);
    for (int off = 0; off < 2; off++) {
        ep.state_snapshot_interval = off ? -1 : 10; /* 10 tokens: 3 blocks */
        e = start(m, &ep);
        CHECK(e);
        result_init(&ra, &g);
        result_init(&rb, &g);
        result_init(&again, &g);
        rq = greedy(a, 37, 12, &ra);
        CHECK_EQ(engine_generate(e, &rq, err, sizeof err), 0);
        rq = greedy(b, 37, 12, &rb);
        CHECK_EQ(engine_generate(e, &rq, err, sizeof err), 0);
        CHECK_EQ(rb.usage[0].cached_tokens, off ? 0 : 24);
        CHECK(memcmp(rb.tok[0], fresh_b.tok[0], sizeof rb.tok[0]) == 0);
        rq = greedy(b, 37, 12, &again);
        CHECK_EQ(engine_generate(e, &rq, err, sizeof err), 0);
        CHECK_EQ(again.usage[0].cached_tokens, off ? 0 : 36);
        CHECK(memcmp(again.tok[0], fresh_b.tok[0], sizeof again.tok[0]) == 0);
        CHECK_EQ(blocks_used_when_idle(e), 0);
        test_release(e);
    }
    test_release(m);
}

TEST(engine_recurrent_state_lfm2) { recurrent_state_case("lfm2-f32"); }
/* qwen3next / qwen35: conv inputs and DeltaNet state per sequence, a
 * snapshot of both per full block */
TEST(engine_recurrent_state_qwen3next) { recurrent_state_case("qwen3next-f32"); }
TEST(engine_recurrent_state_qwen35) { recurrent_state_case("qwen35-f32"); }
TEST(engine_recurrent_state_qwen35moe) { recurrent_state_case("qwen35moe-f32"); }
/* The pool's snapshot store: a free slot first; when full, the lowest
 * priority (level + 1 over the inflation base, the oldest among equals) is
 * evicted if worth no more than the new one, else the new block goes
 * without; slots taken since the last pin are never evicted; a touch
 * renews a snapshot; freeing a block returns its slot; evicted snapshots
 * raise the base, so old ones age out; the invariants hold throughout. */
TEST(kv_pool_snapshot_store)
{
    struct llm_model *m = golden("lfm2-f32");
    if (!m)
        SKIP("golden fixtures missing (make golden-fixtures)");
    char err[256];
    struct kv_pool *p = kv_pool_new(m, GGML_TYPE_F16, 4, 8, err, sizeof err);
    CHECK(p);
    CHECK_EQ(kv_pool_n_snap_slots(p), 0); /* none until sized */
    int b[8];
    for (int i = 0; i < 8; i++)
        b[i] = kv_pool_alloc(p);
    CHECK(kv_pool_snap_take(p, b[0], 0, kv_pool_snap_epoch(p)) == NULL);
    CHECK_EQ(kv_pool_set_snap_slots(p, 3, err, sizeof err), 0);
    CHECK_EQ(kv_pool_n_snap_slots(p), 3);
    CHECK_EQ(kv_pool_set_snap_slots(p, 1, err, sizeof err), 0);
    float *only = kv_pool_snap_take(p, b[0], 0, 0);
    CHECK(only && kv_pool_snap_take(p, b[1], 0, 0) == only); /* nothing pinned before a pin */
    CHECK(kv_pool_block_state(p, b[0]) == NULL && kv_pool_block_state(p, b[1]) == only);
    CHECK_EQ(kv_pool_set_snap_slots(p, 2, err, sizeof err), 0);
    float *s0 = kv_pool_snap_take(p, b[0], 3, kv_pool_snap_epoch(p)), *s1 = kv_pool_snap_take(p, b[1], 3, kv_pool_snap_epoch(p)); /* prio 4 */
    CHECK(s0 && s1 && s0 != s1);
    CHECK(kv_pool_snap_take(p, b[0], 3, kv_pool_snap_epoch(p)) == s0 && kv_pool_block_state(p, b[0]) == s0);
    CHECK_EQ(kv_pool_n_snaps(p), 2);
    kv_pool_snap_pin(p);
    CHECK(kv_pool_snap_take(p, b[2], 0, kv_pool_snap_epoch(p)) == NULL); /* prio 1: worth less than both */
    CHECK(kv_pool_block_state(p, b[2]) == NULL && kv_pool_snap_evictions(p) == 0);
    /* as much: the older (b[1]) goes; the epoch rises to 4 (b[2] keeps prio 4:
     * taken at epoch 0) */
    CHECK(kv_pool_snap_take(p, b[2], 3, kv_pool_snap_epoch(p)) == s1);
    CHECK(kv_pool_block_state(p, b[1]) == NULL && kv_pool_snap_evictions(p) == 1);
    CHECK(kv_pool_snap_take(p, b[3], 9, kv_pool_snap_epoch(p)) == s0); /* b[2]'s is pinned (taken since the pin) */
    CHECK(kv_pool_snap_take(p, b[4], 9, kv_pool_snap_epoch(p)) == NULL); /* both pinned */
    kv_pool_snap_pin(p);
    CHECK(kv_pool_snap_take(p, b[4], 0, 0) == NULL); /* prio 1 at epoch 0: < 4 and 14 */
    /* at epoch 4 a level-0 snapshot (prio 5) outranks b[2]'s older level-3 one */
    CHECK(kv_pool_snap_take(p, b[4], 0, kv_pool_snap_epoch(p)) == s1);
    CHECK(kv_pool_block_state(p, b[2]) == NULL && kv_pool_block_state(p, b[3]) == s0);
    CHECK_EQ(kv_pool_snap_evictions(p), 3); /* since the store was last sized */
    CHECK_EQ(kv_pool_check(p, err, sizeof err), 0);
    /* a touch renews: of two equal ones the other, older now, goes */
    CHECK_EQ(kv_pool_set_snap_slots(p, 2, err, sizeof err), 0); /* drops every snapshot */
    CHECK(kv_pool_block_state(p, b[3]) == NULL && kv_pool_n_snaps(p) == 0);
    s0 = kv_pool_snap_take(p, b[0], 0, kv_pool_snap_epoch(p));
    s1 = kv_pool_snap_take(p, b[1], 0, kv_pool_snap_epoch(p));
    kv_pool_snap_touch(p, b[0]);
    kv_pool_snap_pin(p);
    CHECK(kv_pool_snap_take(p, b[2], 0, kv_pool_snap_epoch(p)) == s1 && kv_pool_block_state(p, b[0]) == s0);
    kv_pool_snap_pin(p);
    CHECK(kv_pool_snap_take(p, b[5], 0, kv_pool_snap_epoch(p)) == s0); /* b[0]'s: b[2]'s is newer */
    /* a cached block keeps its snapshot; moved to a recomputed twin's place */
    CHECK(kv_pool_publish(p, b[5], 55));
    kv_pool_unref(p, b[5]);
    CHECK(kv_pool_block_state(p, b[5]) == s0);
    kv_pool_snap_move(p, b[6], b[5]);
    CHECK(kv_pool_block_state(p, b[6]) == s0 && kv_pool_block_state(p, b[5]) == NULL);
    kv_pool_unref(p, b[6]); /* unhashed: freed, its slot back */
    CHECK_EQ(kv_pool_n_snaps(p), 1);
    kv_pool_snap_pin(p);
    CHECK(kv_pool_snap_take(p, b[7], 0, kv_pool_snap_epoch(p)) == s0);
    CHECK_EQ(kv_pool_check(p, err, sizeof err), 0);
    /* more slots than blocks are of no use */
    CHECK_EQ(kv_pool_set_snap_slots(p, 100, err, sizeof err), 0);
    CHECK_EQ(kv_pool_n_snap_slots(p), 8);
    CHECK(kv_pool_block_state(p, b[7]) == NULL);
    CHECK_EQ(kv_pool_set_snap_slots(p, 0, err, sizeof err), 0); /* none at all */
    CHECK(kv_pool_snap_take(p, b[7], 3, kv_pool_snap_epoch(p)) == NULL);
    CHECK_EQ(kv_pool_check(p, err, sizeof err), 0);
    kv_pool_free(p);
}

TEST(engine_recurrent_state_interval_lfm2) { snapshot_interval_case("lfm2-f32"); }
TEST(engine_recurrent_state_interval_qwen35) { snapshot_interval_case("qwen35-f32"); }

/* A second turn - the first prompt (14 tokens), its 6-token reply and 5
 * more - resumes from the snapshot of the reply's latest full block (token
 * 16), kept with a snapshot every 6 blocks of 4 tokens (longer than the
 * first prompt) as at the default (every block), and gives the fresh
 * engine's tokens and log-probabilities, with prefill chunks of 512, 7 and 3
 * tokens, and as n = 2 greedy choices. */
static void prompt_end_case(const char *name)
{
    struct llm_model *m = golden(name);
    if (!m)
        SKIP("golden fixtures missing (make golden-fixtures)");
    const int n_vocab = llm_model_hparams(m)->n_vocab;
    enum { NA = 14, NR = 6, NB = NA + NR + 5, NG = 10 };
    int32_t a[NA], b[NB];
    random_prompt(a, NA, n_vocab, 31);
    random_prompt(b, NB, n_vocab, 37);
    struct group g;
    group_init(&g);
    struct result *r = calloc(5, sizeof *r); /* turn 1, fresh turn 2, turn 2, n = 2, scratch */
    char err[256];
    struct engine_params ep = small_params(true);
    ep.kv_block_size = 4;
    struct engine *e = start(m, &ep); /* turn 1 and, alone on a fresh engine, turn 2 */
    CHECK(e);
    result_init(&r[0], &g);
    struct engine_request rq = greedy(a, NA, NR, &r[0]);
    CHECK_EQ(engine_generate(e, &rq, err, sizeof err), 0);
    CHECK_EQ(r[0].n_tok[0], NR);
    memcpy(b, a, sizeof a);
    memcpy(b + NA, r[0].tok[0], NR * sizeof *b);
    test_release(e);
    e = start(m, &ep);
    CHECK(e);
    result_init(&r[1], &g);
    rq = greedy(b, NB, NG, &r[1]);
    rq.sampling.n_logprobs = 1;
    CHECK_EQ(engine_generate(e, &rq, err, sizeof err), 0);
    CHECK_EQ(r[1].usage[0].cached_tokens, 0);
    test_release(e);
    const int chunks[] = { 512, 7, 3 };
    for (int k = 0; k < 6; k++) {
        ep.max_batch_tokens = chunks[k % 3];
        ep.state_snapshot_interval = k < 3 ? 24 : 0; /* the reply's keeps one either way */
        e = start(m, &ep);
        CHECK(e);
        for (int i = 2; i < 5; i++)
            result_init(&r[i], &g);
        rq = greedy(a, NA, NR, &r[4]);
        CHECK_EQ(engine_generate(e, &rq, err, sizeof err), 0);
        CHECK(memcmp(r[4].tok[0], r[0].tok[0], NR * sizeof *b) == 0);
        rq = greedy(b, NB, NG, &r[2]);
        rq.sampling.n_logprobs = 1;
        CHECK_EQ(engine_generate(e, &rq, err, sizeof err), 0);
        CHECK_MSG(r[2].usage[0].cached_tokens == 16, "chunks of %d: %d tokens cached",
                  chunks[k % 3], r[2].usage[0].cached_tokens);
        CHECK_EQ(r[2].n_tok[0], NG);
        CHECK_MSG(memcmp(r[2].tok[0], r[1].tok[0], NG * sizeof *b) == 0, "chunks of %d", chunks[k % 3]);
        CHECK_MSG(memcmp(r[2].logprob[0], r[1].logprob[0], NG * sizeof(float)) == 0,
                  "chunks of %d: log-probs differ", chunks[k % 3]);
        rq = greedy(b, NB, NG, &r[3]);
        rq.n = 2;
        CHECK_EQ(engine_generate(e, &rq, err, sizeof err), 0);
        for (int c = 0; c < 2; c++)
            CHECK_MSG(memcmp(r[3].tok[c], r[1].tok[0], NG * sizeof *b) == 0, "choice %d", c);
        CHECK_EQ(blocks_used_when_idle(e), 0);
        test_release(e);
    }
    free(r);
    test_release(m);
}

TEST(engine_recurrent_state_prompt_end_qwen35) { prompt_end_case("qwen35-f32"); }
TEST(engine_recurrent_state_prompt_end_qwen3next) { prompt_end_case("qwen3next-f32"); }

/* Two different prompts of 37 tokens sharing their first 30 (blocks of 4):
 * at the default settings the second resumes at the last block boundary
 * below where they diverge (28 tokens: every block keeps a snapshot) and
 * gives the tokens and log-probabilities of a fresh engine, with prefill
 * chunks of 512, 7 and 3 tokens and as n = 2 greedy choices. Then with a
 * snapshot store of 3 (the first prompt's 12 blocks thinned to the worthiest:
 * its end and the blocks just before) and of 2: the second resumes from an
 * earlier snapshot where one survives, recomputes the rest, same output. */
static void shared_prefix_case(const char *name)
{
    struct llm_model *m = golden(name);
    if (!m)
        SKIP("golden fixtures missing (make golden-fixtures)");
    const int n_vocab = llm_model_hparams(m)->n_vocab;
    enum { NP = 37, NS = 30, NG = 12 };
    int32_t a[NP], b[NP];
    random_prompt(a, NP, n_vocab, 41);
    random_prompt(b, NP, n_vocab, 43);
    memcpy(b, a, NS * sizeof *b);
    struct group g;
    group_init(&g);
    struct result *r = calloc(4, sizeof *r); /* fresh b, a, b, b with n = 2 */
    char err[256];
    struct engine_params ep = small_params(true);
    ep.kv_block_size = 4;
    struct engine *e = start(m, &ep);
    CHECK(e);
    result_init(&r[0], &g);
    struct engine_request rq = greedy(b, NP, NG, &r[0]);
    rq.sampling.n_logprobs = 1;
    CHECK_EQ(engine_generate(e, &rq, err, sizeof err), 0);
    CHECK_EQ(r[0].usage[0].cached_tokens, 0);
    test_release(e);
    const int chunks[] = { 512, 7, 3 };
    const int64_t snap = (int64_t)kv_pool_snap_bytes(m);
    const int64_t stores[] = { 0, 4 * snap, 3 * snap };
    for (int k = 0; k < 5; k++) {
        ep.max_batch_tokens = chunks[k < 3 ? k : k - 2]; /* the stores: chunks of 7 and 3 */
        ep.state_snapshot_memory = stores[k < 3 ? 0 : k - 2];
        e = start(m, &ep);
        CHECK(e);
        for (int i = 1; i < 4; i++)
            result_init(&r[i], &g);
        rq = greedy(a, NP, NG, &r[1]);
        CHECK_EQ(engine_generate(e, &rq, err, sizeof err), 0);
        CHECK_EQ(blocks_used_when_idle(e), 0); /* a retired: its snapshots counted */
        struct engine_stats st;
        engine_stats(e, &st);
        rq = greedy(b, NP, NG, &r[2]);
        rq.sampling.n_logprobs = 1;
        CHECK_EQ(engine_generate(e, &rq, err, sizeof err), 0);
        const int cached = r[2].usage[0].cached_tokens;
        if (k < 3) {
            CHECK_MSG(cached == 28, "chunks of %d: %d tokens cached", chunks[k], cached);
            CHECK_EQ(st.snap_evictions, 0);
            CHECK_EQ(st.snaps_held, 10); /* a's 9 prompt blocks and its reply's latest full one */
        } else {
            /* a's snapshots thinned to what the store holds; b resumes from an
             * earlier one than its divergence where one survives */
            CHECK_MSG(st.snap_evictions > 0 && st.snaps_held == (int)(stores[k - 2] / snap),
                      "store %d: %llu evicted, %d held", (int)(stores[k - 2] / snap),
                      (unsigned long long)st.snap_evictions, st.snaps_held);
            /* 4: a's end, its reply's latest, 8 and 7 (the two before a's end);
             * 3: none at or before b's 7 cached blocks, so nothing */
            CHECK_MSG(cached == (k == 3 ? 28 : 0), "store %d: %d tokens cached",
                      (int)(stores[k - 2] / snap), cached);
        }
        CHECK_EQ(r[2].n_tok[0], NG);
        CHECK_MSG(memcmp(r[2].tok[0], r[0].tok[0], NG * sizeof *b) == 0, "case %d", k);
        CHECK_MSG(memcmp(r[2].logprob[0], r[0].logprob[0], NG * sizeof(float)) == 0,
                  "case %d: log-probs differ", k);
        rq = greedy(b, NP, NG, &r[3]);
        rq.n = 2;
        CHECK_EQ(engine_generate(e, &rq, err, sizeof err), 0);
        for (int c = 0; c < 2; c++)
            CHECK_MSG(memcmp(r[3].tok[c], r[0].tok[0], NG * sizeof *b) == 0, "case %d, choice %d",
                      k, c);
        CHECK_EQ(blocks_used_when_idle(e), 0);
        test_release(e);
    }
    free(r);
    test_release(m);
}

/* A 64-token prompt (16 blocks of 4) and a store of 6 snapshots, filled
 * by prefill chunks of 7: the chain is thinned to its end, the reply's
 * latest, 15, 14, 13 (near the end) and 8 (every 8th). A prompt sharing its
 * first 40 tokens (10 blocks) resumes from the one after block 8 (32
 * tokens), recomputes the rest and gives the fresh engine's tokens and
 * log-probabilities. */
static void thinned_chain_case(const char *name)
{
    struct llm_model *m = golden(name);
    if (!m)
        SKIP("golden fixtures missing (make golden-fixtures)");
    const int n_vocab = llm_model_hparams(m)->n_vocab;
    enum { NP = 64, NS = 40, NG = 12 };
    int32_t a[NP], b[NP];
    random_prompt(a, NP, n_vocab, 47);
    random_prompt(b, NP, n_vocab, 53);
    memcpy(b, a, NS * sizeof *b);
    struct group g;
    group_init(&g);
    struct result *r = calloc(3, sizeof *r);
    char err[256];
    struct engine_params ep = small_params(true);
    ep.kv_block_size = 4;
    ep.max_batch_tokens = 7;
    struct engine *e = start(m, &ep);
    CHECK(e);
    for (int i = 0; i < 3; i++)
        result_init(&r[i], &g);
    struct engine_request rq = greedy(b, NP, NG, &r[0]);
    rq.sampling.n_logprobs = 1;
    CHECK_EQ(engine_generate(e, &rq, err, sizeof err), 0);
    test_release(e);
    ep.state_snapshot_memory = 6 * (int64_t)kv_pool_snap_bytes(m);
    e = start(m, &ep);
    CHECK(e);
    rq = greedy(a, NP, NG, &r[1]);
    CHECK_EQ(engine_generate(e, &rq, err, sizeof err), 0);
    rq = greedy(b, NP, NG, &r[2]);
    rq.sampling.n_logprobs = 1;
    CHECK_EQ(engine_generate(e, &rq, err, sizeof err), 0);
    CHECK_EQ(r[2].usage[0].cached_tokens, 32);
    CHECK(memcmp(r[2].tok[0], r[0].tok[0], sizeof r[0].tok[0]) == 0);
    CHECK(memcmp(r[2].logprob[0], r[0].logprob[0], sizeof r[0].logprob[0]) == 0);
    CHECK_EQ(blocks_used_when_idle(e), 0);
    struct engine_stats st;
    engine_stats(e, &st);
    CHECK(st.snap_evictions > 0 && st.snaps_held == 6);
    free(r);
    test_release(e);
    test_release(m);
}

/* A hybrid's request cancelled mid-generation (n = 2) gives back every
 * block and state slot; its cached prompt then resumes another request for
 * the same prompt at the snapshot where the prompt's last full block ends
 * (28 of 30 tokens), with a fresh engine's tokens and log-probabilities. */
TEST(engine_recurrent_state_cancel_qwen35)
{
    struct llm_model *m = golden("qwen35-f32");
    if (!m)
        SKIP("golden fixtures missing (make golden-fixtures)");
    int32_t ids[30];
    random_prompt(ids, 30, llm_model_hparams(m)->n_vocab, 59);
    struct group g;
    group_init(&g);
    struct result *r = calloc(3, sizeof *r); /* fresh, cancelled, again */
    for (int i = 0; i < 3; i++)
        result_init(&r[i], &g);
    char err[256];
    struct engine_params ep = small_params(true);
    ep.kv_block_size = 4;
    struct engine *e = start(m, &ep);
    CHECK(e);
    struct engine_request rq = greedy(ids, 30, 10, &r[0]);
    rq.sampling.n_logprobs = 1;
    CHECK_EQ(engine_generate(e, &rq, err, sizeof err), 0);
    test_release(e);
    e = start(m, &ep);
    CHECK(e);
    r[1].cancel_engine = e;
    r[1].cancel_after = 3;
    rq = greedy(ids, 30, 0, &r[1]);
    rq.n = 2;
    CHECK_EQ(engine_submit(e, &rq, NULL, err, sizeof err), 0);
    group_wait(&g, 3);
    CHECK_EQ(r[1].finish[0], ENGINE_FINISH_CANCELLED);
    CHECK_EQ(r[1].finish[1], ENGINE_FINISH_CANCELLED);
    CHECK_EQ(blocks_used_when_idle(e), 0);
    rq = greedy(ids, 30, 10, &r[2]);
    rq.sampling.n_logprobs = 1;
    CHECK_EQ(engine_generate(e, &rq, err, sizeof err), 0);
    CHECK_EQ(r[2].usage[0].cached_tokens, 28);
    CHECK(memcmp(r[2].tok[0], r[0].tok[0], sizeof r[0].tok[0]) == 0);
    CHECK(memcmp(r[2].logprob[0], r[0].logprob[0], sizeof r[0].logprob[0]) == 0);
    /* the reply reaches us before the engine retires its sequence */
    CHECK_EQ(blocks_used_when_idle(e), 0);
    struct engine_stats st;
    engine_stats(e, &st);
    CHECK(st.snaps_held > 0 && st.snaps_held <= st.snap_slots && st.running == 0);
    free(r);
    test_release(e);
    test_release(m);
}

TEST(engine_recurrent_state_thinned_qwen35) { thinned_chain_case("qwen35-f32"); }
TEST(engine_recurrent_state_thinned_lfm2) { thinned_chain_case("lfm2-f32"); }
TEST(engine_recurrent_state_shared_prefix_qwen35) { shared_prefix_case("qwen35-f32"); }
TEST(engine_recurrent_state_shared_prefix_qwen3next) { shared_prefix_case("qwen3next-f32"); }
TEST(engine_recurrent_state_shared_prefix_lfm2) { shared_prefix_case("lfm2-f32"); }
