/* engine.c - the engine thread: continuous batching over the paged KV pools.
 *
 * Each step (one model at a time, models in turn): one decode token from
 * every running sequence, then prefill chunks of admitted prompts, then new
 * admissions with prefix-cache reuse, all within max_batch_tokens; one
 * batched llm_forward (plus one per embedding chunk); sampling, detokenizing,
 * stop strings and events. When a decode needs a block and none is left, the
 * most recently admitted sequence is preempted: its blocks are released and
 * it is recomputed later from its tokens, with its sampler state kept.
 * Embedding requests are prompt-only sequences: their rows skip the output
 * projection, their final hidden states are pooled as the chunks go by and
 * the pooled vector ends the sequence in its DONE event. Models with
 * per-sequence recurrent state (lfm2's conv state, llm_model_has_state) hold
 * one state slot of the pool's llm_kv per running sequence, copied on fork;
 * each full block keeps the state after its last token (kv_pool_block_state)
 * in the pool's snapshot store, as long as the store's budget allows (the
 * least worth evicted first: snap_level), and a sequence resuming after that
 * cached prefix copies it into its slot. */
#include "engine.h"

#include "kv_pool.h"
#include "prefix_store.h"
#include "llm/grammar/grammar.h"
#include "llm/model.h"
#include "llm/model_dev.h"
#include "llm/tokenizer.h"
#include "src/core/compute.h"
#include "src/core/matmul.h"
#include "src/core/omni.h"
#include "src/core/tensor.h"
#include "src/core/threadpool.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ENGINE_MAX_MODELS 8
#define HIST_CAP 8192          /* latency samples kept per histogram (a ring) */
#define TEXT_CAP 1024          /* bytes of text one event carries at most */
#define LAZY_TAIL 512          /* output bytes kept to find a lazy grammar's trigger */

enum seq_state { SEQ_WAITING, SEQ_RUNNING, SEQ_FORK_WAIT, SEQ_DONE };

/* One choice of a request. Engine thread only (created by engine_submit
 * before the request is queued). */
struct seq {
    struct request *rq;
    int choice;
    enum seq_state state;
    int32_t *tok;            /* [n_ctx] prompt then generated ids; -1 at embedding positions */
    int n_tok;
    int n_done;              /* positions whose K/V are in the blocks */
    int32_t *blocks;         /* [max_blocks] block table */
    uint64_t *hashes;        /* [max_blocks] chain hash of each full block */
    int n_blocks, n_hashed;
    int32_t state_slot;      /* recurrent state slot while running (lfm2), else -1 */
    uint64_t snap_epoch;     /* the snapshot store's epoch when it started running */
    int32_t reply_snap;      /* block holding its latest snapshot past the prompt, or -1 */
    bool admitted_once;
    uint64_t admit_order;
    int n_gen;
    double t_last_s;         /* time of the last token */
    int logit_row;           /* row of this step's logits, or -1 */
    bool dev_greedy;         /* plain greedy (no penalties, bias, logprobs, grammar, n = 1):
                                on a device its token is the device's argmax */
    float *pool_acc;         /* [n_embd] embedding requests: sum (mean) or the chosen row */
    struct sampler *smp;
    struct sampler_stop *stop;
    struct grammar_matcher *gm; /* request with a grammar: made at the first sample */
    bool lazy_wait;          /* the grammar waits for the trigger in the output */
    bool lazy_free;          /* the trigger came but the grammar could not follow it */
    char *lazy_tail;         /* [LAZY_TAIL] last output bytes, for a trigger across tokens */
    size_t lazy_len;
    struct tok_stream ts;
    struct engine_usage usage;
    struct seq *prev, *next; /* waiting list links */
};

struct request {
    struct request *next;    /* submit queue, then active list, then dead list */
    uint64_t id;
    int model;
    int32_t *prompt;         /* [n_prompt] ids, -1 at embedding positions */
    uint64_t *keys;          /* [n_prompt] prefix-hash keys */
    int32_t *embd_row;       /* [n_prompt] row in embd, -1 for tokens; NULL: text only */
    float *embd;             /* [rows][n_embd] */
    int32_t *rope_pos;       /* M-RoPE (qwen2vl): [3][n_prompt] rotary ids; NULL: the positions */
    int32_t rope_delta;      /* generated tokens: rotary id = position + rope_delta */
    /* gemma3 (llm_hparams.embd_bidirectional): [n_prompt] each, the first and
     * last position of the embedding segment holding a position (-1 for
     * tokens): its rows attend to each other both ways (llm_batch.span_*),
     * so a prefill chunk never ends inside one (chunk_len) */
    int32_t *span_first, *span_last;
    int n_prompt;
    int n, n_open;           /* choices, choices without a final event yet */
    struct seq *seqs;        /* [n] */
    int max_tokens;
    int32_t *stop_tokens;    /* [n_stop_tokens] */
    int n_stop_tokens;
    bool ignore_eog, echo_special, want_logprobs;
    bool interactive;        /* ENGINE_PRIORITY_INTERACTIVE */
    bool embed;              /* ENGINE_TASK_EMBED */
    bool normalize;          /* embed: L2-normalize */
    enum embed_pooling pooling; /* embed: LAST, MEAN or CLS */
    double t_submit_s, deadline_s;
    engine_event_fn on_event;
    int32_t (*force_token)(void *user, int choice);
    void *user;
    struct grammar *grammar; /* own reference, or NULL */
    char *grammar_trigger;   /* lazy grammar: its trigger text, or NULL */
    bool grammar_close;      /* close the grammar within the tokens left */
};

struct emodel {
    struct llm_model *m;
    char name[64];
    char file_name[64];      /* name with only [A-Za-z0-9._-], for the prefix store */
    const struct llm_hparams *hp;
    const struct tokenizer *tok;
    int n_ctx, max_blocks;   /* per sequence */
    struct kv_pool *pool;
    struct llm_ctx *ctx;
    struct grammar_vocab *gvocab; /* token trie, made by the first grammar request */
    struct seq *wait_head, *wait_tail;
    int n_waiting;
    struct seq **running;    /* [max_seqs] in admission order */
    int n_running;
    /* step scratch */
    struct item { struct seq *s; int start, n; bool embd; int hid_row; } *items;
    int n_items;
    int32_t *b_tok, *b_pos, *b_seq;
    int32_t *b_rpos;         /* [3][T] M-RoPE rotary ids of the batch (qwen2vl) */
    bool *b_want, *b_hid;
    float *hidden;           /* [max_batch_tokens][n_embd] hidden states of embedding rows */
    struct llm_seq_view *views;
    /* Models with per-sequence recurrent state (llm_model_has_state): one
     * slot of the pool's llm_kv per running sequence (max_seqs of them),
     * taken when it starts running, given back when it stops. */
    bool has_state;
    int32_t *state_free;     /* [max_seqs] free slots, a stack */
    int n_state_free;
    int32_t *view_slots;     /* [max_seqs] state slot of each view of a batch */
    float **b_snap;          /* [max_batch_tokens] where each token's state snapshot goes, or NULL */
    int snap_every;          /* a snapshot after every snap_every-th block (1 by default) and
                                where each prompt ends; 0: none (no prefix cache: a hybrid
                                cannot resume without one) */
    int n_snap;              /* slots of the pool's snapshot store */
    struct snap_want { int tok, level; float **dst; struct seq *s; int j; } *snap_want;
    int n_snap_want;         /* this step's blocks that want a snapshot (forward) */
    float *logits;           /* [max_seqs][n_vocab] */
    /* engine_params.device: the forward on a GPU (llm/model_dev.h); the pool
     * then has no host K/V (kv_pool_new_shape) */
    struct llm_dev *dev;
    int32_t *argmax;         /* [max_seqs] the device's argmax of each logit row */
    bool *row_logits;        /* [max_seqs] which logit rows come back to the host */
};

struct hist {
    double v[HIST_CAP];
    uint64_t n;              /* samples ever added; the ring holds the last HIST_CAP */
};

struct engine {
    struct engine_params p;  /* p.prefix_cache_dir points to cache_dir */
    char *cache_dir;         /* owned copy */
    struct emodel models[ENGINE_MAX_MODELS];
    int n_models;
    struct tpool *tp;
    bool started;            /* set by engine_start before the thread exists */
    pthread_t thread;

    pthread_mutex_t mu;
    pthread_cond_t cv;
    /* {mu} */
    bool stop;
    struct request *sub_head, *sub_tail;
    int n_sub;
    uint64_t *cancel_ids;
    int n_cancel, cap_cancel;
    uint64_t next_id;
    int n_waiting_seen;      /* waiting sequences at the end of the last step */
    struct engine_stats stats;
    struct hist ttft, itl;
    uint64_t submitted_prompt_tokens;

    /* engine thread only */
    bool busy;               /* told the compute budget it has work (tpool_active) */
    struct request *active, *dead;
    int rr;                  /* the model stepped last */
    uint64_t admit_counter;
    double *pend_ttft, *pend_itl; /* this step's latency samples, [max_seqs] each */
    int n_pend_ttft, n_pend_itl;
    struct engine_stats local;
};

struct engine_params engine_default_params(void)
{
    return (struct engine_params){ .kv_block_size = 16, .kv_type = GGML_TYPE_F16,
                                   .max_batch_tokens = 512, .max_seqs = 16,
                                   .max_queue = 256 };
}

struct engine_request engine_default_request(void)
{
    return (struct engine_request){ .sampling = sampler_default_params(), .n = 1,
                                    .pooling = EMBED_POOL_LAST };
}

static const struct { int type; const char *name; } kv_types[] = {
    { GGML_TYPE_F16, "f16" }, { GGML_TYPE_F32, "f32" }, { GGML_TYPE_Q8_0, "q8_0" },
};

int engine_kv_type_from_name(const char *name)
{
    for (size_t i = 0; name && i < sizeof kv_types / sizeof *kv_types; i++)
        if (!strcmp(name, kv_types[i].name))
            return kv_types[i].type;
    return -1;
}

const char *engine_kv_type_name(int kv_type)
{
    for (size_t i = 0; i < sizeof kv_types / sizeof *kv_types; i++)
        if (kv_type == kv_types[i].type)
            return kv_types[i].name;
    return NULL;
}

// ---- construction ----------------------------------------------------------

struct engine *engine_new(const struct engine_params *params, char *err, size_t errlen)
{
    struct engine_params p = params ? *params : engine_default_params();
    if (p.kv_block_size < 1 || p.kv_block_size > 4096 || p.max_batch_tokens < 1 ||
        p.max_batch_tokens > (1 << 16) || p.max_seqs < 1 || p.max_seqs > 4096 ||
        p.max_queue < 0 || p.n_threads < 0 || !engine_kv_type_name(p.kv_type) ||
        p.state_snapshot_interval < -1 || p.state_snapshot_memory < -1) {
        omni_fail(err, errlen, OMNI_ERR_ARG,
                  "engine: bad parameters (kv_block_size %d in 1..4096, kv_type f16/f32/q8_0, "
                  "max_batch_tokens %d in 1..65536, max_seqs %d in 1..4096, max_queue %d >= 0)",
                  p.kv_block_size, p.max_batch_tokens, p.max_seqs, p.max_queue);
        return NULL;
    }
    /* every running sequence must fit one decode token into a step */
    if (p.max_seqs > p.max_batch_tokens)
        p.max_seqs = p.max_batch_tokens;
    struct engine *e = calloc(1, sizeof *e);
    if (!e) {
        omni_fail(err, errlen, OMNI_ERR_NOMEM, "engine: out of memory");
        return NULL;
    }
    e->p = p;
    if (p.prefix_cache_dir && !(e->p.prefix_cache_dir = e->cache_dir = strdup(p.prefix_cache_dir))) {
        omni_fail(err, errlen, OMNI_ERR_NOMEM, "engine: out of memory");
        free(e);
        return NULL;
    }
    e->next_id = 1;
    e->rr = -1;
    pthread_mutex_init(&e->mu, NULL);
    pthread_cond_init(&e->cv, NULL);
    const int n_threads = p.n_threads ? p.n_threads
                          : p.compute ? compute_size(p.compute) : omni_physical_cores();
    e->tp = tpool_new(n_threads, err, errlen);
    e->pend_ttft = malloc((size_t)p.max_seqs * sizeof(double));
    e->pend_itl = malloc((size_t)p.max_seqs * sizeof(double));
    if (!e->tp || !e->pend_ttft || !e->pend_itl) {
        if (e->tp)
            omni_fail(err, errlen, OMNI_ERR_NOMEM, "engine: out of memory");
        engine_free(e);
        return NULL;
    }
    if (tpool_attach(e->tp, p.compute, "engine", err, errlen) < 0) {
        engine_free(e);
        return NULL;
    }
    return e;
}

int engine_add_model(struct engine *e, struct llm_model *m, const char *name, char *err,
                     size_t errlen)
{
    if (e->started)
        return omni_fail(err, errlen, OMNI_ERR_ARG, "engine: add models before engine_start");
    if (e->n_models == ENGINE_MAX_MODELS)
        return omni_fail(err, errlen, OMNI_ERR_LIMIT, "engine: at most %d models",
                         ENGINE_MAX_MODELS);
    if (!m || !name || !*name || strlen(name) >= sizeof e->models[0].name ||
        engine_find_model(e, name) >= 0)
        return omni_fail(err, errlen, OMNI_ERR_ARG,
                         "engine: model name '%s' empty, too long or taken", name ? name : "");
    struct emodel *em = &e->models[e->n_models];
    memset(em, 0, sizeof *em);
    em->m = m;
    snprintf(em->name, sizeof em->name, "%s", name);
    for (size_t i = 0; name[i]; i++) {
        const char c = name[i];
        const bool plain = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                           (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-';
        em->file_name[i] = plain && !(i == 0 && c == '.') ? c : '_';
    }
    em->hp = llm_model_hparams(m);
    em->tok = llm_model_tokenizer(m);
    em->n_ctx = em->hp->n_ctx_train;
    em->max_blocks = (em->n_ctx + e->p.kv_block_size - 1) / e->p.kv_block_size;
    return e->n_models++;
}

int engine_find_model(const struct engine *e, const char *name)
{
    for (int i = 0; i < e->n_models; i++)
        if (!strcmp(e->models[i].name, name))
            return i;
    return -1;
}

int engine_n_models(const struct engine *e) { return e->n_models; }

const char *engine_model_name(const struct engine *e, int model)
{
    return model >= 0 && model < e->n_models ? e->models[model].name : NULL;
}

struct llm_model *engine_model(const struct engine *e, int model)
{
    return model >= 0 && model < e->n_models ? e->models[model].m : NULL;
}

/* Blocks per model: the budget is shared so that every model holds the
 * same number of tokens. Default budget: half of what is available after
 * the weights, and no more than two full contexts per running sequence. */
/* Blocks per recurrent-state snapshot (engine_params.state_snapshot_interval
 * in tokens, rounded up to whole blocks; 0 there: every block). 0: none. */
static int snap_interval(const struct engine *e, const struct llm_model *m)
{
    const int bs = e->p.kv_block_size, t = e->p.state_snapshot_interval;
    if (!llm_model_has_state(m) || t < 0 || e->p.state_snapshot_memory < 0)
        return 0;
    return t ? (int)(((long)t + bs - 1) / bs) : 1;
}

/* Blocks of each model's pool (K/V only) and slots of each hybrid's
 * snapshot store. The snapshot budget is state_snapshot_memory, or by
 * default a quarter of the KV budget: taken from it when the engine picks
 * the budget (and no more than a snapshot per block of the pools' most),
 * beside it under an explicit kv_memory_bytes (which stays all K/V). Every
 * hybrid gets the same number of snapshots. */
static int size_pools(struct engine *e, int *n_blocks, char *err, size_t errlen)
{
    const int bs = e->p.kv_block_size;
    size_t per_block = 0, weights = 0, want = 0, per_snap = 0, max_every = 1;
    for (int i = 0; i < e->n_models; i++) {
        const struct llm_hparams *hp = e->models[i].hp;
        const int kv_dim = hp->n_head_kv * hp->head_dim;
        if (!llm_kv_slot_bytes(e->p.kv_type, kv_dim))
            return omni_fail(err, errlen, OMNI_ERR_UNSUPPORTED,
                             "engine: model '%s': KV type %s needs n_head_kv * head_dim (%d) "
                             "a multiple of 32; use f16", e->models[i].name,
                             engine_kv_type_name(e->p.kv_type), kv_dim);
        struct emodel *em = &e->models[i];
        em->snap_every = snap_interval(e, em->m);
        if (em->snap_every) {
            per_snap += kv_pool_snap_bytes(em->m);
            if ((size_t)em->snap_every > max_every)
                max_every = (size_t)em->snap_every;
        }
        size_t b = kv_pool_block_bytes(em->m, e->p.kv_type, bs);
        if (!b)
            return omni_fail(err, errlen, OMNI_ERR_ARG, "engine: KV block size overflows");
        per_block += b;
        weights += llm_model_weight_bytes(e->models[i].m);
        size_t blocks = (size_t)e->models[i].max_blocks * (size_t)e->p.max_seqs * 2;
        if (blocks > want)
            want = blocks;
    }
    size_t budget = e->p.kv_memory_bytes, snap_budget = 0;
    const bool snap_set = e->p.state_snapshot_memory > 0;
    if (snap_set)
        snap_budget = (size_t)e->p.state_snapshot_memory;
    size_t blocks;
    if (budget) { /* K/V only; the snapshots beside it */
        blocks = budget / per_block;
        if (!snap_set)
            snap_budget = budget / 4;
    } else if (e->p.device && strcmp(e->p.device, "cpu")) {
        blocks = want; /* at most this; the device sizes the pool from its memory */
        budget = blocks * per_block;
        if (!snap_set)
            snap_budget = budget / 4;
    } else {
        size_t avail = (size_t)omni_meminfo_bytes("MemAvailable");
        avail = avail > weights ? avail - weights : 0;
        budget = avail / 2;
        if (!snap_set && per_snap) { /* no more than a snapshot per block the pools can want */
            snap_budget = budget / 4;
            const size_t most = (want / max_every + (size_t)e->p.max_seqs) * per_snap;
            if (snap_budget > most)
                snap_budget = most;
        }
        blocks = (budget - (snap_budget < budget ? snap_budget : budget)) / per_block;
        if (blocks > want)
            blocks = want;
        budget = blocks * per_block;
    }
    if (blocks > (1u << 30))
        blocks = 1u << 30;
    if (blocks < 1)
        return omni_fail(err, errlen, OMNI_ERR_LIMIT,
                         "engine: KV memory of %zu bytes holds no block (one block of every "
                         "model takes %zu bytes)", budget, per_block);
    /* as many snapshots for every hybrid; more than one per block is of no use */
    size_t n_snap = per_snap ? snap_budget / per_snap : 0;
    if (n_snap > blocks)
        n_snap = blocks;
    for (int i = 0; i < e->n_models; i++) {
        n_blocks[i] = (int)blocks;
        e->models[i].n_snap = e->models[i].snap_every ? (int)n_snap : 0;
    }
    return 0;
}

static void *engine_thread(void *arg);
static void publish_stats(struct engine *e);

/* The model's forward on engine_params.device ("cuda", "cuda:N", "cpu-dev"):
 * weights and a pool of at most n_blocks blocks in its memory (all of them
 * when kv_memory_bytes says so, else what gpu_memory_fraction of the free
 * memory holds). A model it cannot run fails here, naming why. */
static int engine_dev_new(struct engine *e, struct emodel *em, int n_blocks, char *err,
                          size_t errlen)
{
    struct llm_dev_params dp = llm_dev_default_params();
    char name[16];
    const char *dev = e->p.device, *colon = strchr(dev, ':');
    if (!strcmp(dev, "cpu-dev")) {
        dp.backend = "cpu";
    } else {
        const size_t len = colon ? (size_t)(colon - dev) : strlen(dev);
        char *end = NULL;
        if (len >= sizeof name || (colon && (!colon[1] || (dp.device = (int)strtol(colon + 1, &end, 10)) < 0 || *end)))
            return omni_fail(err, errlen, OMNI_ERR_ARG,
                             "engine: device '%s': expected cpu, cuda or cuda:N", dev);
        memcpy(name, dev, len);
        name[len] = 0;
        if (strcmp(name, "cuda"))
            return omni_fail(err, errlen, OMNI_ERR_ARG,
                             "engine: device '%s': expected cpu, cuda or cuda:N", dev);
        dp.backend = "cuda";
    }
    if (e->p.kv_type != GGML_TYPE_F16 && e->p.kv_type != GGML_TYPE_F32)
        return omni_fail(err, errlen, OMNI_ERR_UNSUPPORTED,
                         "engine: device %s keeps K/V as f16 or f32, not %s", dev,
                         engine_kv_type_name(e->p.kv_type));
    dp.max_tokens = e->p.max_batch_tokens;
    dp.block_size = e->p.kv_block_size;
    dp.kv_type = e->p.kv_type;
    dp.n_blocks = e->p.kv_memory_bytes ? n_blocks : 0;
    dp.n_blocks_max = n_blocks;
    dp.mem_fraction = e->p.gpu_memory_fraction;
    char derr[384];
    em->dev = llm_dev_new(em->m, &dp, derr, sizeof derr);
    if (!em->dev)
        return omni_fail(err, errlen, OMNI_ERR_UNSUPPORTED,
                         "engine: model '%s' on %s: %s (--device cpu runs it on the CPU)",
                         em->name, dev, derr);
    OMNI_INFO("engine: model '%s' on %s (%s): %.2f GiB of weights, %d KV blocks of %d (%.2f GiB)",
              em->name, dev, llm_dev_device(em->dev), llm_dev_weight_bytes(em->dev) / 1073741824.0,
              llm_dev_n_blocks(em->dev), e->p.kv_block_size,
              llm_dev_kv_bytes(em->dev) / 1073741824.0);
    if (e->p.prefix_cache_dir)
        OMNI_INFO("engine: model '%s': no on-disk prefix cache on a device (its K/V are there)",
                  em->name);
    return 0;
}

int engine_start(struct engine *e, char *err, size_t errlen)
{
    if (e->started)
        return omni_fail(err, errlen, OMNI_ERR_ARG, "engine: already started");
    if (!e->n_models)
        return omni_fail(err, errlen, OMNI_ERR_ARG, "engine: no model added");
    int n_blocks[ENGINE_MAX_MODELS];
    int rc = size_pools(e, n_blocks, err, errlen);
    if (rc < 0)
        return rc;
    const int T = e->p.max_batch_tokens, S = e->p.max_seqs;
    for (int i = 0; i < e->n_models; i++) {
        struct emodel *em = &e->models[i];
        if (e->p.device && strcmp(e->p.device, "cpu")) {
            if ((rc = engine_dev_new(e, em, n_blocks[i], err, errlen)) < 0)
                return rc;
            n_blocks[i] = llm_dev_n_blocks(em->dev);
            em->pool = kv_pool_new_shape(em->m, e->p.kv_type, e->p.kv_block_size, n_blocks[i],
                                         err, errlen);
        } else {
            em->pool = kv_pool_new(em->m, e->p.kv_type, e->p.kv_block_size, n_blocks[i], err,
                                   errlen);
        }
        if (!em->pool)
            return OMNI_ERR_NOMEM;
        if (em->n_snap && (rc = kv_pool_set_snap_slots(em->pool, em->n_snap, err, errlen)) < 0)
            return rc;
        if (llm_model_has_state(em->m)) {
            if (!em->n_snap)
                em->snap_every = 0;
            OMNI_DEBUG("engine: model '%s': %d recurrent-state snapshots of %.1f MiB, one every "
                       "%d tokens at most%s", em->name, em->n_snap,
                       kv_pool_snap_bytes(em->m) / 1048576.0, em->snap_every * e->p.kv_block_size,
                       em->snap_every ? "" : " (none: no prefix cache for it)");
        }
        em->ctx = llm_ctx_new(em->m, T, e->tp, err, errlen);
        if (!em->ctx)
            return OMNI_ERR_NOMEM;
        if (em->dev) { /* llm_forward(em->ctx) (embedding chunks) runs there too */
            llm_dev_attach(em->dev, em->ctx);
            em->argmax = malloc((size_t)S * sizeof *em->argmax);
            em->row_logits = malloc((size_t)S * sizeof *em->row_logits);
            if (!em->argmax || !em->row_logits)
                return omni_fail(err, errlen, OMNI_ERR_NOMEM, "engine: out of memory");
        }
        llm_ctx_set_batch_invariant(em->ctx, e->p.deterministic);
        if (e->p.prefix_cache_dir && !em->dev) { /* the store reads host K/V */
            int n = prefix_store_load(em->pool, em->m, e->p.prefix_cache_dir, em->file_name);
            if (n > 0)
                OMNI_INFO("engine: model '%s': %d prefix blocks loaded from %s", em->name, n,
                          e->p.prefix_cache_dir);
        }
        em->running = calloc((size_t)S, sizeof *em->running);
        em->items = calloc((size_t)S, sizeof *em->items);
        em->b_tok = malloc((size_t)T * sizeof(int32_t));
        em->b_pos = malloc((size_t)T * sizeof(int32_t));
        em->b_rpos = malloc((size_t)T * 3 * sizeof(int32_t));
        em->b_seq = malloc((size_t)T * sizeof(int32_t));
        em->b_want = malloc((size_t)T * sizeof(bool));
        em->b_hid = malloc((size_t)T * sizeof(bool));
        em->hidden = malloc((size_t)T * (size_t)em->hp->n_embd * sizeof(float));
        em->views = malloc((size_t)S * sizeof *em->views);
        em->logits = malloc((size_t)S * (size_t)em->hp->n_vocab * sizeof(float));
        em->has_state = llm_model_has_state(em->m);
        if (em->has_state) {
            em->state_free = malloc((size_t)S * sizeof(int32_t));
            em->view_slots = malloc((size_t)S * sizeof(int32_t));
            em->b_snap = calloc((size_t)T, sizeof *em->b_snap);
            em->snap_want = calloc((size_t)T, sizeof *em->snap_want);
            if (!em->state_free || !em->view_slots || !em->b_snap || !em->snap_want ||
                llm_kv_set_state_slots(kv_pool_kv(em->pool), S) < 0)
                return omni_fail(err, errlen, OMNI_ERR_NOMEM, "engine: out of memory");
            for (int k = 0; k < S; k++)
                em->state_free[k] = S - 1 - k;
            em->n_state_free = S;
        }
        if (!em->running || !em->items || !em->b_tok || !em->b_pos || !em->b_rpos || !em->b_seq ||
            !em->b_want || !em->b_hid || !em->hidden || !em->views || !em->logits)
            return omni_fail(err, errlen, OMNI_ERR_NOMEM, "engine: out of memory");
        OMNI_DEBUG("engine: model '%s': %d KV blocks of %d tokens (%s, %.1f MiB)", em->name,
                  n_blocks[i], e->p.kv_block_size,
                  engine_kv_type_name(e->p.kv_type),
                  (double)n_blocks[i] * (double)kv_pool_block_bytes(em->m, e->p.kv_type,
                                                                     e->p.kv_block_size) /
                      (1 << 20));
    }
    publish_stats(e);
    e->started = true;
    if (pthread_create(&e->thread, NULL, engine_thread, e) != 0) {
        e->started = false;
        return omni_fail(err, errlen, OMNI_ERR_NOMEM, "engine: cannot start the engine thread");
    }
    return 0;
}

static void request_free(struct request *r)
{
    if (!r)
        return;
    for (int i = 0; r->seqs && i < r->n; i++) {
        struct seq *s = &r->seqs[i];
        free(s->tok);
        free(s->blocks);
        free(s->hashes);
        sampler_free(s->smp);
        sampler_stop_free(s->stop);
        grammar_matcher_free(s->gm);
        free(s->lazy_tail);
        free(s->pool_acc);
    }
    grammar_free(r->grammar);
    free(r->grammar_trigger);
    free(r->seqs);
    free(r->stop_tokens);
    free(r->prompt);
    free(r->keys);
    free(r->embd_row);
    free(r->embd);
    free(r->rope_pos);
    free(r->span_first);
    free(r->span_last);
    free(r);
}

void engine_free(struct engine *e)
{
    if (!e)
        return;
    if (e->started) {
        pthread_mutex_lock(&e->mu);
        e->stop = true;
        pthread_cond_signal(&e->cv);
        pthread_mutex_unlock(&e->mu);
        tpool_cancel(e->tp); /* a step waiting for the budget gives up */
        pthread_join(e->thread, NULL);
    }
    for (int i = 0; i < e->n_models; i++) {
        struct emodel *em = &e->models[i];
        if (e->started && e->p.prefix_cache_dir && !em->dev)
            prefix_store_save(em->pool, em->m, e->p.prefix_cache_dir, em->file_name);
        kv_pool_free(em->pool);
        llm_ctx_free(em->ctx);
        llm_dev_free(em->dev);
        free(em->argmax);
        free(em->row_logits);
        grammar_vocab_free(em->gvocab);
        free(em->running);
        free(em->items);
        free(em->b_tok);
        free(em->b_pos);
        free(em->b_rpos);
        free(em->b_seq);
        free(em->b_want);
        free(em->b_hid);
        free(em->hidden);
        free(em->views);
        free(em->state_free);
        free(em->view_slots);
        free(em->b_snap);
        free(em->snap_want);
        free(em->logits);
    }
    tpool_free(e->tp);
    free(e->cancel_ids);
    free(e->cache_dir);
    free(e->pend_ttft);
    free(e->pend_itl);
    pthread_mutex_destroy(&e->mu);
    pthread_cond_destroy(&e->cv);
    free(e);
}

// ---- submission (any thread) -------------------------------------------------

/* The prompt as ids, prefix keys and embedding rows, copied from rq. */
static int copy_prompt(const struct engine *e, const struct emodel *em,
                       const struct engine_request *rq, struct request *r, char *err,
                       size_t errlen)
{
    /* an embedding row: n_embd, plus DeepStack parts (qwen3vl, llm_batch.embd) */
    const int n_vocab = em->hp->n_vocab, n_embd = em->hp->n_embd * (1 + em->hp->n_deepstack);
    struct engine_segment one = { .tokens = rq->prompt, .n = rq->n_prompt };
    const struct engine_segment *segs = rq->segments ? rq->segments : &one;
    const int n_segs = rq->segments ? rq->n_segments : 1;
    int64_t total = 0, rows = 0;
    for (int i = 0; i < n_segs; i++) {
        if (segs[i].n < 0 || (segs[i].n > 0 && !segs[i].tokens && !segs[i].embd))
            return omni_fail(err, errlen, OMNI_ERR_ARG, "engine: segment %d: no tokens or "
                             "embeddings for %d positions", i, segs[i].n);
        total += segs[i].n;
        rows += segs[i].tokens ? 0 : segs[i].n;
    }
    if (total < 1)
        return omni_fail(err, errlen, OMNI_ERR_ARG, "engine: empty prompt");
    if (total > em->n_ctx || (rq->task != ENGINE_TASK_EMBED && total == em->n_ctx))
        return omni_fail(err, errlen, OMNI_ERR_ARG,
                         "engine: prompt of %lld tokens does not fit the context of %d tokens "
                         "of model '%s'", (long long)total, em->n_ctx, em->name);
    const int bs = e->p.kv_block_size, pool_blocks = kv_pool_n_blocks(em->pool);
    if ((total + bs) / bs > pool_blocks)
        return omni_fail(err, errlen, OMNI_ERR_ARG,
                         "engine: prompt of %lld tokens needs %lld KV blocks of %d tokens; the "
                         "pool of model '%s' has %d", (long long)total,
                         (long long)((total + bs) / bs), bs, em->name, pool_blocks);
    r->n_prompt = (int)total;
    r->prompt = malloc((size_t)total * sizeof *r->prompt);
    r->keys = malloc((size_t)total * sizeof *r->keys);
    if (rows) {
        r->embd_row = malloc((size_t)total * sizeof *r->embd_row);
        r->embd = malloc((size_t)rows * (size_t)n_embd * sizeof(float));
    }
    if (!r->prompt || !r->keys || (rows && (!r->embd_row || !r->embd)))
        return omni_fail(err, errlen, OMNI_ERR_NOMEM, "engine: out of memory for the prompt");
    int p = 0, row = 0;
    for (int i = 0; i < n_segs; i++) {
        for (int j = 0; j < segs[i].n; j++, p++) {
            if (segs[i].tokens) {
                const int32_t t = segs[i].tokens[j];
                if (t < 0 || t >= n_vocab)
                    return omni_fail(err, errlen, OMNI_ERR_ARG,
                                     "engine: prompt token %d at position %d outside the "
                                     "vocabulary of %d", t, p, n_vocab);
                r->prompt[p] = t;
                r->keys[p] = (uint64_t)t;
                if (r->embd_row)
                    r->embd_row[p] = -1;
            } else {
                r->prompt[p] = -1;
                r->keys[p] = kv_hash_media_key(segs[i].media_hash, j);
                r->embd_row[p] = row;
                memcpy(r->embd + (size_t)row++ * n_embd, segs[i].embd + (size_t)j * n_embd,
                       (size_t)n_embd * sizeof(float));
            }
        }
    }
    if (em->hp->embd_bidirectional && rows) {
        r->span_first = malloc((size_t)total * sizeof *r->span_first);
        r->span_last = malloc((size_t)total * sizeof *r->span_last);
        if (!r->span_first || !r->span_last)
            return omni_fail(err, errlen, OMNI_ERR_NOMEM, "engine: out of memory for the prompt");
        p = 0;
        for (int i = 0; i < n_segs; i++) {
            if (!segs[i].tokens && segs[i].n > e->p.max_batch_tokens)
                return omni_fail(err, errlen, OMNI_ERR_ARG, "engine: an image of %d rows does not fit "
                                 "one batch of %d tokens (its rows attend to each other, so they "
                                 "are computed together)", segs[i].n, e->p.max_batch_tokens);
            for (int j = 0; j < segs[i].n; j++, p++) {
                r->span_first[p] = segs[i].tokens ? -1 : p - j;
                r->span_last[p] = segs[i].tokens ? -1 : p - j + segs[i].n - 1;
            }
        }
    }
    /* M-RoPE (qwen2vl): text advances the three rotary ids together; an
     * image grid's rows sit at (s, s + row, s + column), s one past the
     * largest id so far, and the text after it continues past the image;
     * a video's k-th temporal patch at temporal id s + floor(k * t_step) */
    if (em->hp->arch == LLM_ARCH_QWEN2VL || em->hp->arch == LLM_ARCH_QWEN3VL ||
        em->hp->arch == LLM_ARCH_QWEN3VLMOE) {
        if (!(r->rope_pos = malloc((size_t)total * 3 * sizeof *r->rope_pos)))
            return omni_fail(err, errlen, OMNI_ERR_NOMEM, "engine: out of memory for the prompt");
        int32_t next = 0, *t = r->rope_pos, *h = t + total, *w = h + total;
        p = 0;
        for (int i = 0; i < n_segs; i++) {
            const int R = segs[i].grid_rows, C = segs[i].grid_cols;
            const int G = segs[i].grid_t > 1 ? segs[i].grid_t : 1;
            const bool grid = !segs[i].tokens && R > 0 && C > 0 && (int64_t)G * R * C == segs[i].n &&
                              (G == 1 || (segs[i].t_step >= 0 && segs[i].t_step <= 1e6));
            int32_t top = (R > C ? R : C) - 1;
            for (int j = 0; j < segs[i].n; j++, p++) {
                const int k = grid ? j / (R * C) : 0, q = grid ? j % (R * C) : 0;
                const int32_t dt = k ? (int32_t)((double)k * segs[i].t_step + 1e-6) : 0;
                t[p] = grid ? next + dt : next + j;
                h[p] = grid ? next + q / C : next + j;
                w[p] = grid ? next + q % C : next + j;
                top = dt > top ? dt : top;
            }
            next += grid ? top + 1 : segs[i].n;
        }
        r->rope_delta = next - (int32_t)total;
    }
    return 0;
}

static int make_seqs(const struct emodel *em, const struct engine_request *rq,
                     struct request *r, char *err, size_t errlen)
{
    r->seqs = calloc((size_t)r->n, sizeof *r->seqs);
    if (!r->seqs)
        return omni_fail(err, errlen, OMNI_ERR_NOMEM, "engine: out of memory");
    for (int i = 0; i < r->n; i++) {
        struct seq *s = &r->seqs[i];
        s->rq = r;
        s->choice = i;
        s->state = i == 0 ? SEQ_WAITING : SEQ_FORK_WAIT;
        s->logit_row = -1;
        s->state_slot = -1;
        s->reply_snap = -1;
        /* an embedding never grows past its prompt */
        s->tok = malloc((size_t)(r->embed ? r->n_prompt : em->n_ctx) * sizeof *s->tok);
        s->blocks = malloc((size_t)em->max_blocks * sizeof *s->blocks);
        s->hashes = malloc((size_t)em->max_blocks * sizeof *s->hashes);
        if (!s->tok || !s->blocks || !s->hashes)
            return omni_fail(err, errlen, OMNI_ERR_NOMEM, "engine: out of memory");
        memcpy(s->tok, r->prompt, (size_t)r->n_prompt * sizeof *s->tok);
        s->n_tok = r->n_prompt;
        s->usage.prompt_tokens = r->n_prompt;
        if (r->embed) { /* no sampler, stop matcher or grammar: nothing is sampled */
            if (!(s->pool_acc = calloc((size_t)em->hp->n_embd, sizeof(float))))
                return omni_fail(err, errlen, OMNI_ERR_NOMEM, "engine: out of memory");
            continue;
        }
        struct sampler_params sp = rq->sampling;
        if (sp.seed != SAMPLER_SEED_RANDOM)
            sp.seed += (uint64_t)i;
        char serr[256];
        s->smp = sampler_new(&sp, em->hp->n_vocab, serr, sizeof serr);
        if (!s->smp)
            return omni_fail(err, errlen, OMNI_ERR_ARG, "engine: %s", serr);
        for (int p = 0; p < r->n_prompt; p++)
            if (r->prompt[p] >= 0 && sampler_accept(s->smp, r->prompt[p]) < 0)
                return omni_fail(err, errlen, OMNI_ERR_NOMEM, "engine: out of memory");
        s->dev_greedy = sp.temperature <= 0.0f && sp.n_logit_bias == 0 && sp.n_logprobs == 0 &&
                        !rq->grammar && r->n == 1 &&
                        (sp.penalty_last_n == 0 ||
                         (sp.repetition_penalty == 1.0f && sp.presence_penalty == 0.0f &&
                          sp.frequency_penalty == 0.0f));
        s->stop = sampler_stop_new(rq->stop, rq->n_stop, serr, sizeof serr);
        if (!s->stop)
            return omni_fail(err, errlen, OMNI_ERR_ARG, "engine: %s", serr);
        s->usage.prompt_tokens = r->n_prompt;
        if (r->grammar_trigger) {
            s->lazy_wait = true;
            if (!(s->lazy_tail = malloc(LAZY_TAIL)))
                return omni_fail(err, errlen, OMNI_ERR_NOMEM, "engine: out of memory");
        }
    }
    return 0;
}

int engine_submit(struct engine *e, const struct engine_request *rq, uint64_t *id, char *err,
                  size_t errlen)
{
    if (!e->started)
        return omni_fail(err, errlen, OMNI_ERR_ARG, "engine: not started");
    if (!rq || rq->model < 0 || rq->model >= e->n_models)
        return omni_fail(err, errlen, OMNI_ERR_ARG, "engine: model index %d unknown (%d models)",
                         rq ? rq->model : -1, e->n_models);
    if (rq->n < 1 || rq->n > e->p.max_seqs || rq->n_stop < 0 || (rq->n_stop && !rq->stop) ||
        rq->n_stop_tokens < 0 || (rq->n_stop_tokens && !rq->stop_tokens) ||
        rq->timeout_s < 0 || (!rq->segments && !rq->prompt) ||
        (rq->priority != ENGINE_PRIORITY_INTERACTIVE && rq->priority != ENGINE_PRIORITY_BATCH) ||
        (rq->task != ENGINE_TASK_GENERATE && rq->task != ENGINE_TASK_EMBED))
        return omni_fail(err, errlen, OMNI_ERR_ARG,
                         "engine: bad request (n %d in 1..%d, %d stop strings, %d stop tokens, "
                         "timeout %g s, prompt %s, priority %d)", rq->n, e->p.max_seqs, rq->n_stop,
                         rq->n_stop_tokens, rq->timeout_s,
                         rq->segments || rq->prompt ? "given" : "missing", (int)rq->priority);
    const struct emodel *em = &e->models[rq->model];
    if (rq->task == ENGINE_TASK_EMBED) {
        bool text_only = true;
        for (int i = 0; rq->segments && i < rq->n_segments; i++)
            text_only &= !rq->segments[i].embd;
        const enum embed_pooling pl = rq->pooling == EMBED_POOL_NONE ? EMBED_POOL_LAST : rq->pooling;
        if (rq->n != 1 || !text_only ||
            (pl != EMBED_POOL_LAST && pl != EMBED_POOL_MEAN && pl != EMBED_POOL_CLS))
            return omni_fail(err, errlen, OMNI_ERR_ARG,
                             "engine: an embedding request takes n = 1 (got %d), token prompts "
                             "and last, mean or cls pooling (got %d)", rq->n, (int)rq->pooling);
    }
    struct request *r = calloc(1, sizeof *r);
    if (!r)
        return omni_fail(err, errlen, OMNI_ERR_NOMEM, "engine: out of memory");
    r->model = rq->model;
    r->n = r->n_open = rq->n;
    r->max_tokens = rq->max_tokens;
    r->ignore_eog = rq->ignore_eog;
    r->echo_special = rq->echo_special;
    r->want_logprobs = rq->sampling.n_logprobs > 0;
    r->interactive = rq->priority == ENGINE_PRIORITY_INTERACTIVE;
    r->embed = rq->task == ENGINE_TASK_EMBED;
    r->normalize = rq->normalize;
    r->pooling = rq->pooling == EMBED_POOL_NONE ? EMBED_POOL_LAST : rq->pooling;
    r->on_event = rq->on_event;
    r->force_token = rq->force_token;
    r->user = rq->user;
    r->grammar = grammar_ref(rq->grammar);
    r->grammar_close = rq->grammar_close;
    if (r->grammar && rq->grammar_trigger && *rq->grammar_trigger &&
        (strlen(rq->grammar_trigger) >= LAZY_TAIL / 2 || !(r->grammar_trigger = strdup(rq->grammar_trigger)))) {
        request_free(r);
        return omni_fail(err, errlen, OMNI_ERR_ARG, "engine: grammar trigger too long (or out of memory)");
    }
    if (rq->n_stop_tokens) {
        r->stop_tokens = malloc((size_t)rq->n_stop_tokens * sizeof *r->stop_tokens);
        if (!r->stop_tokens) {
            free(r);
            return omni_fail(err, errlen, OMNI_ERR_NOMEM, "engine: out of memory");
        }
        memcpy(r->stop_tokens, rq->stop_tokens, (size_t)rq->n_stop_tokens * sizeof(int32_t));
        r->n_stop_tokens = rq->n_stop_tokens;
    }
    int rc = copy_prompt(e, em, rq, r, err, errlen);
    if (rc == 0)
        rc = make_seqs(em, rq, r, err, errlen);
    if (rc < 0) {
        request_free(r);
        return rc;
    }
    r->t_submit_s = omni_time_s();
    r->deadline_s = rq->timeout_s > 0 ? r->t_submit_s + rq->timeout_s : 0;

    pthread_mutex_lock(&e->mu);
    if (e->n_sub + e->n_waiting_seen >= e->p.max_queue || e->stop) {
        int waiting = e->n_sub + e->n_waiting_seen;
        pthread_mutex_unlock(&e->mu);
        request_free(r);
        return omni_fail(err, errlen, OMNI_ERR_LIMIT,
                         "engine: server busy: %d requests waiting (max_queue %d); retry later",
                         waiting, e->p.max_queue);
    }
    r->id = e->next_id++;
    if (e->sub_tail)
        e->sub_tail->next = r;
    else
        e->sub_head = r;
    e->sub_tail = r;
    e->n_sub++;
    e->submitted_prompt_tokens += (uint64_t)r->n_prompt;
    if (id)
        *id = r->id;
    pthread_cond_signal(&e->cv);
    pthread_mutex_unlock(&e->mu);
    return 0;
}

void engine_cancel(struct engine *e, uint64_t id)
{
    if (!e || !e->started)
        return;
    pthread_mutex_lock(&e->mu);
    if (e->n_cancel == e->cap_cancel) {
        int cap = e->cap_cancel ? 2 * e->cap_cancel : 16;
        uint64_t *ids = realloc(e->cancel_ids, (size_t)cap * sizeof *ids);
        if (!ids) {
            pthread_mutex_unlock(&e->mu);
            OMNI_ERROR("engine: out of memory cancelling request %llu", (unsigned long long)id);
            return;
        }
        e->cancel_ids = ids;
        e->cap_cancel = cap;
    }
    e->cancel_ids[e->n_cancel++] = id;
    pthread_cond_signal(&e->cv);
    pthread_mutex_unlock(&e->mu);
}

// ---- sequences (engine thread) ---------------------------------------------

static void wait_push(struct emodel *em, struct seq *s, bool front)
{
    s->state = SEQ_WAITING;
    s->prev = s->next = NULL;
    if (front) {
        s->next = em->wait_head;
        if (em->wait_head)
            em->wait_head->prev = s;
        else
            em->wait_tail = s;
        em->wait_head = s;
    } else {
        s->prev = em->wait_tail;
        if (em->wait_tail)
            em->wait_tail->next = s;
        else
            em->wait_head = s;
        em->wait_tail = s;
    }
    em->n_waiting++;
}

static void wait_remove(struct emodel *em, struct seq *s)
{
    if (s->prev)
        s->prev->next = s->next;
    else
        em->wait_head = s->next;
    if (s->next)
        s->next->prev = s->prev;
    else
        em->wait_tail = s->prev;
    s->prev = s->next = NULL;
    em->n_waiting--;
}

/* s joins the running sequences (the caller checked n_running < max_seqs,
 * so a state slot is free where the model has state). */
static void running_add(struct emodel *em, struct seq *s)
{
    if (em->has_state)
        s->state_slot = em->state_free[--em->n_state_free];
    em->running[em->n_running++] = s;
}

static void running_remove(struct emodel *em, struct seq *s)
{
    for (int i = 0; i < em->n_running; i++)
        if (em->running[i] == s) {
            memmove(&em->running[i], &em->running[i + 1],
                    (size_t)(em->n_running - i - 1) * sizeof *em->running);
            em->n_running--;
            if (em->has_state && s->state_slot >= 0) {
                em->state_free[em->n_state_free++] = s->state_slot;
                s->state_slot = -1;
            }
            return;
        }
}

static void release_blocks(struct emodel *em, struct seq *s)
{
    for (int i = 0; i < s->n_blocks; i++)
        kv_pool_unref(em->pool, s->blocks[i]);
    s->n_blocks = s->n_hashed = s->n_done = 0;
    s->reply_snap = -1;
}

static void emit(struct request *r, const struct engine_event *ev)
{
    if (r->on_event)
        r->on_event(r->user, ev);
}

/* Final event of a choice; its blocks go back to the pool. */
static void seq_finish(struct engine *e, struct seq *s, enum engine_finish why, int stop_index,
                       const char *error)
{
    struct request *r = s->rq;
    struct emodel *em = &e->models[r->model];
    if (s->state == SEQ_DONE)
        return;
    if (s->state == SEQ_RUNNING)
        running_remove(em, s);
    else if (s->state == SEQ_WAITING)
        wait_remove(em, s);
    release_blocks(em, s);
    s->state = SEQ_DONE;
    /* choice 0 ending before its first token takes the choices waiting to fork */
    if (s->choice == 0 && s->n_gen == 0)
        for (int c = 1; c < r->n; c++)
            if (r->seqs[c].state == SEQ_FORK_WAIT)
                seq_finish(e, &r->seqs[c], why, -1, error);

    char text[TEXT_CAP];
    size_t len = 0;
    if (!error && !r->embed) {
        /* release what the detokenizer and the stop matcher still hold */
        char tail[64];
        size_t n = tokenizer_stream_flush(em->tok, &s->ts, tail, sizeof tail);
        const char *t;
        size_t tl;
        if (sampler_stop_feed(s->stop, tail, n, &t, &tl) >= 0 && tl <= sizeof text) {
            memcpy(text, t, tl);
            len = tl;
        }
        sampler_stop_flush(s->stop, &t, &tl);
        if (len + tl <= sizeof text) {
            memcpy(text + len, t, tl);
            len += tl;
        }
    }
    const double now = omni_time_s();
    s->usage.completion_tokens = s->n_gen;
    s->usage.total_ms = (now - r->t_submit_s) * 1e3;
    struct engine_event ev = {
        .type = error ? ENGINE_EV_ERROR : ENGINE_EV_DONE, .request_id = r->id,
        .choice = s->choice, .token = -1, .text = text, .text_len = len, .finish = why,
        .stop_index = stop_index, .usage = s->usage, .error = error,
        .embd = r->embed && !error && why == ENGINE_FINISH_STOP ? s->pool_acc : NULL,
        .n_embd = r->embed && !error && why == ENGINE_FINISH_STOP ? em->hp->n_embd : 0,
    };
    text[len < sizeof text ? len : sizeof text - 1] = 0;
    emit(r, &ev);
    if (--r->n_open == 0) {
        /* freed at the end of the step: other items of this step may still point here */
        struct request **link = &e->active;
        while (*link && *link != r)
            link = &(*link)->next;
        if (*link)
            *link = r->next;
        r->next = e->dead;
        e->dead = r;
    }
}

static void request_finish(struct engine *e, struct request *r, enum engine_finish why)
{
    for (int i = 0; i < r->n; i++)
        seq_finish(e, &r->seqs[i], why, -1, NULL);
}

/* Release a running sequence's blocks and queue it first in line: it is
 * recomputed from its tokens (through the prefix cache where blocks survive),
 * its sampler untouched, so it continues exactly where it stopped. */
static void seq_preempt(struct engine *e, struct emodel *em, struct seq *s)
{
    running_remove(em, s);
    release_blocks(em, s);
    wait_push(em, s, true);
    e->local.preemptions++;
}

/* Key of position p for the prefix hash. */
static uint64_t seq_key(const struct seq *s, int p)
{
    return p < s->rq->n_prompt ? s->rq->keys[p] : (uint64_t)s->tok[p];
}

static uint64_t block_hash(const struct seq *s, int j, int bs, uint64_t parent)
{
    uint64_t keys[256];
    uint64_t h = parent;
    /* blocks longer than the key buffer hash as a chain of pieces */
    for (int o = 0; o < bs; o += 256) {
        const int n = bs - o < 256 ? bs - o : 256;
        for (int i = 0; i < n; i++)
            keys[i] = seq_key(s, j * bs + o + i);
        h = kv_hash_block(h, keys, n);
    }
    return h;
}

/* Index the sequence's newly completed blocks in the prefix cache. */
static void seq_publish(struct emodel *em, struct seq *s)
{
    const int bs = kv_pool_block_size(em->pool);
    for (int j = s->n_hashed; j < s->n_done / bs; j++) {
        s->hashes[j] = block_hash(s, j, bs, j ? s->hashes[j - 1] : KV_HASH_ROOT);
        /* a twin already indexed (this one recomputed past the last
         * snapshot): give it this block's snapshot if it lost its own */
        if (!kv_pool_publish(em->pool, s->blocks[j], s->hashes[j]) && em->snap_every)
            kv_pool_snap_move(em->pool, kv_pool_lookup(em->pool, s->hashes[j]), s->blocks[j]);
    }
    if (s->n_done / bs > s->n_hashed)
        s->n_hashed = s->n_done / bs;
}

enum { ADMIT_OK, ADMIT_NO_ROOM, ADMIT_NEVER };

/* Worth of the snapshot after block j of s (kv_pool_snap_take's level), or
 * -1 when that block keeps none. A chain's snapshots are thinned as the
 * store fills: block d = j + 1 (in snap_every units) is worth the number of
 * times 2 divides d, so every 2nd goes first, then every 4th, ... (older
 * chains before newer ones: kv_pool_snap_take's epoch). The block where a
 * prompt's last full block ends is worth the most (a follow-up turn resumes
 * there), and the few before it more than their place alone says
 * (SNAP_NEAR - log2 of the distance: a prompt that differs only in its last
 * message resumes close to where it diverges). Past the prompt (the reply)
 * only the latest full block keeps one, worth as much as the prompt's end: a
 * follow-up turn holds the whole reply, and a preempted sequence resumes
 * there. */
enum { SNAP_NEAR = 4, SNAP_END = 16 };

static int snap_level(const struct emodel *em, const struct seq *s, int j)
{
    const int bs = kv_pool_block_size(em->pool), end = s->rq->n_prompt / bs, d = j + 1;
    /* a prompt pooled over all its rows (embeddings) is never looked up */
    const bool lookup = !s->rq->embed || s->rq->pooling == EMBED_POOL_LAST;
    if (d > end || (lookup && d == end))
        return SNAP_END;
    if (d % em->snap_every)
        return -1;
    int level = __builtin_ctz((unsigned)(d / em->snap_every));
    if (lookup) {
        const int dist = (end - d) / em->snap_every > 1 ? (end - d) / em->snap_every : 1;
        const int near = SNAP_NEAR - (31 - __builtin_clz((unsigned)dist));
        level = near > level ? near : level;
    }
    return level;
}

/* Batch row `row` holds position p of s, whose part of the batch ends
 * before position `stop`: no snapshot after it (dst[row] = NULL) unless p
 * ends a block that keeps one, which is noted for snap_assign (of the reply,
 * only the last block of the part). */
static void snap_note(struct emodel *em, struct seq *s, int p, int stop, int row, float **dst)
{
    const int bs = kv_pool_block_size(em->pool);
    dst[row] = NULL;
    if ((p + 1) % bs || !em->snap_every)
        return;
    const int j = p / bs;
    if (j + 1 > s->rq->n_prompt / bs && p + bs < stop)
        return; /* a later block of the reply in this part keeps the one */
    const int level = snap_level(em, s, j);
    if (level >= 0)
        em->snap_want[em->n_snap_want++] = (struct snap_want){ row, level, dst, s, j };
}

static int snap_want_cmp(const void *a, const void *b)
{
    const struct snap_want *x = a, *y = b;
    return x->level != y->level ? (x->level < y->level ? 1 : -1) : (x->tok > y->tok) - (x->tok < y->tok);
}

/* The snapshots noted since the last call get their slots, the worthiest
 * first: when the store is full and pinned by this step, the least worthy
 * blocks of the step go without. A reply block's replaces the sequence's
 * previous one past its prompt. */
static void snap_assign(struct emodel *em)
{
    if (em->n_snap_want > 1)
        qsort(em->snap_want, (size_t)em->n_snap_want, sizeof *em->snap_want, snap_want_cmp);
    for (int i = 0; i < em->n_snap_want; i++) {
        const struct snap_want *w = &em->snap_want[i];
        struct seq *s = w->s;
        const int block = s->blocks[w->j];
        const bool reply = w->j + 1 > s->rq->n_prompt / kv_pool_block_size(em->pool);
        if (reply && s->reply_snap >= 0 && s->reply_snap != block)
            kv_pool_snap_drop(em->pool, s->reply_snap);
        w->dst[w->tok] = kv_pool_snap_take(em->pool, block, w->level, s->snap_epoch);
        if (reply && w->dst[w->tok])
            s->reply_snap = block;
    }
    em->n_snap_want = 0;
}

/* Give a waiting sequence its blocks: the longest cached chain of full blocks
 * (never the last token, whose logits are needed) plus fresh ones for the
 * rest of its tokens. */
static int seq_admit(struct engine *e, struct emodel *em, struct seq *s)
{
    struct kv_pool *pool = em->pool;
    const int bs = kv_pool_block_size(pool);
    int hits = 0;
    uint64_t parent = KV_HASH_ROOT;
    /* an embedding pooled over its rows (mean, cls) needs every row computed;
     * last-token pooling needs only the last, like a generation prompt */
    const bool lookup = !s->rq->embed || s->rq->pooling == EMBED_POOL_LAST;
    while (lookup && (hits + 1) * bs <= s->n_tok - 1) {
        const uint64_t h = block_hash(s, hits, bs, parent);
        const int b = kv_pool_lookup(pool, h);
        if (b < 0)
            break;
        kv_pool_ref(pool, b);
        s->blocks[hits] = b;
        s->hashes[hits++] = parent = h;
    }
    /* recurrent state resumes only at a block with a snapshot: the last
     * snapshotted boundary at or before the cached prefix (an interval's end
     * or where an earlier prompt ended); the rest is recomputed (into fresh
     * blocks: the cached ones stay as they are) */
    if (em->has_state) {
        int keep = em->snap_every ? hits : 0;
        while (keep > 0 && !kv_pool_block_state(pool, s->blocks[keep - 1]))
            keep--;
        while (hits > keep)
            kv_pool_unref(pool, s->blocks[--hits]);
        for (int i = 0; i < hits; i++) /* this chain's snapshots are in use: renewed */
            kv_pool_snap_touch(pool, s->blocks[i]);
        s->snap_epoch = kv_pool_snap_epoch(pool);
    }
    const int need = (s->n_tok + bs - 1) / bs - hits;
    if (need > kv_pool_n_available(pool)) {
        for (int i = 0; i < hits; i++)
            kv_pool_unref(pool, s->blocks[i]);
        return hits + need > kv_pool_n_blocks(pool) ? ADMIT_NEVER : ADMIT_NO_ROOM;
    }
    for (int i = 0; i < need; i++)
        s->blocks[hits + i] = kv_pool_alloc(pool); /* cannot fail: checked above */
    s->n_blocks = hits + need;
    s->n_hashed = hits;
    s->n_done = hits * bs;
    if (hits) {
        e->local.prefix_hits++;
        e->local.prefix_hit_tokens += (uint64_t)(hits * bs);
    } else {
        e->local.prefix_misses++;
    }
    if (!s->admitted_once)
        s->usage.cached_tokens = hits * bs;
    if (s->pool_acc) /* (re)computed from n_done: a preempted one starts over */
        memset(s->pool_acc, 0, (size_t)em->hp->n_embd * sizeof(float));
    s->admitted_once = true;
    wait_remove(em, s);
    s->state = SEQ_RUNNING;
    s->admit_order = ++e->admit_counter;
    running_add(em, s);
    /* recurrent state: resume from the snapshot taken after the last cached block */
    if (em->has_state && hits)
        memcpy(llm_kv_state(kv_pool_kv(pool), s->state_slot),
               kv_pool_block_state(pool, s->blocks[hits - 1]),
               llm_model_state_floats(em->m) * sizeof(float));
    return ADMIT_OK;
}

/* Blocks for positions below n_pos, preempting the newest sequences when the
 * pool is out of blocks. false when s itself was preempted or finished. */
static bool seq_grow(struct engine *e, struct emodel *em, struct seq *s, int n_pos)
{
    const int bs = kv_pool_block_size(em->pool);
    while (s->n_blocks * bs < n_pos) {
        const int b = kv_pool_alloc(em->pool);
        if (b >= 0) {
            s->blocks[s->n_blocks++] = b;
            continue;
        }
        struct seq *victim = em->running[em->n_running - 1];
        if (victim == s && em->n_running == 1) {
            seq_finish(e, s, ENGINE_FINISH_LENGTH, -1, NULL); /* s holds the whole pool */
            return false;
        }
        seq_preempt(e, em, victim);
        if (victim == s)
            return false;
    }
    return true;
}

/* Prefill chunk of s starting at n_done: at most budget positions, all text
 * or all embeddings; a bidirectional span is never cut (the chunk stops
 * before it, or takes all of it past the budget when it starts there). */
static int chunk_len(const struct seq *s, int budget, bool *embd)
{
    const int32_t *row = s->rq->embd_row;
    const int p0 = s->n_done;
    *embd = row && p0 < s->rq->n_prompt && row[p0] >= 0;
    int n = 0;
    while (n < budget && p0 + n < s->n_tok) {
        const bool is_embd = row && p0 + n < s->rq->n_prompt && row[p0 + n] >= 0;
        if (is_embd != *embd)
            break;
        n++;
    }
    const struct request *r = s->rq;
    const int q = p0 + n - 1; /* the chunk's last position */
    if (*embd && r->span_last && n > 0 && r->span_last[q] > q)
        n = r->span_first[q] > p0 ? r->span_first[q] - p0 : r->span_last[q] + 1 - p0;
    return n;
}

// ---- sampling and events -----------------------------------------------------

static void hist_add(double *pend, int *n, int cap, double ms)
{
    if (*n < cap)
        pend[(*n)++] = ms;
}

/* logits with what the request's grammar forbids at -inf (the matcher and
 * the model's token trie are made on first use); NULL with the reason. */
static const float *seq_constrain(struct emodel *em, struct seq *s, const float *logits,
                                  char *err, size_t errlen)
{
    if (!em->gvocab && !(em->gvocab = grammar_vocab_new(em->tok, err, errlen)))
        return NULL;
    if (!s->gm && !(s->gm = grammar_matcher_new(s->rq->grammar, em->gvocab, err, errlen)))
        return NULL;
    /* this token and the rest up to max_tokens or the end of the context */
    int64_t left = -1;
    if (s->rq->grammar_close) {
        left = (int64_t)em->n_ctx - s->n_tok;
        if (s->rq->max_tokens > 0 && s->rq->max_tokens - s->n_gen < left)
            left = s->rq->max_tokens - s->n_gen;
    }
    const float *out = grammar_matcher_apply_budget(s->gm, logits, left);
    if (!out)
        snprintf(err, errlen, "engine: %s", grammar_matcher_error(s->gm));
    return out;
}

/* A lazy grammar's trigger: append token id's text to s's output tail; once
 * the trigger is in it, start the grammar there and feed it the trigger and
 * what followed in that token. Output the grammar cannot continue leaves the
 * choice free (lazy_wait off, no matcher). */
static void seq_lazy_check(struct emodel *em, struct seq *s, int32_t id)
{
    const char *trig = s->rq->grammar_trigger;
    const size_t tl = strlen(trig);
    char piece[256];
    size_t n = tokenizer_piece(em->tok, id, true, piece, sizeof piece);
    if (n > sizeof piece)
        n = sizeof piece;
    if (s->lazy_len + n > LAZY_TAIL) { /* keep what a trigger across tokens needs */
        const size_t keep = tl - 1 < s->lazy_len ? tl - 1 : s->lazy_len;
        memmove(s->lazy_tail, s->lazy_tail + s->lazy_len - keep, keep);
        s->lazy_len = keep;
    }
    if (n > LAZY_TAIL - s->lazy_len)
        n = LAZY_TAIL - s->lazy_len;
    memcpy(s->lazy_tail + s->lazy_len, piece, n);
    s->lazy_len += n;
    const char *at = NULL;
    for (size_t i = 0; !at && i + tl <= s->lazy_len; i++)
        if (!memcmp(s->lazy_tail + i, trig, tl))
            at = s->lazy_tail + i;
    if (!at)
        return;
    s->lazy_wait = false;
    char gerr[256];
    if ((em->gvocab || (em->gvocab = grammar_vocab_new(em->tok, gerr, sizeof gerr))) &&
        (s->gm = grammar_matcher_new(s->rq->grammar, em->gvocab, gerr, sizeof gerr)) &&
        grammar_matcher_accept_bytes(s->gm, at, (size_t)(s->lazy_tail + s->lazy_len - at)) >= 0)
        return;
    grammar_matcher_free(s->gm); /* not the grammar's text after all: stay free */
    s->gm = NULL;
    s->lazy_free = true;
}

/* Why no token could be sampled from raw (the model's logits). A grammar
 * that allows no token of the vocabulary and a logit_bias that bans the rest
 * are the request's doing: those messages say "every token is banned", which
 * the API answers with 400 (apireq_engine_error_status); no finite logit
 * from the model is ours. */
static const char *seq_no_token_reason(const struct emodel *em, struct seq *s, const float *raw)
{
    const int32_t n = em->hp->n_vocab;
    int32_t finite = 0;
    while (finite < n && !(raw[finite] > -INFINITY))
        finite++;
    if (finite == n)
        return "engine: the model gave no finite logit";
    const uint32_t *mask = s->gm ? grammar_matcher_mask(s->gm) : NULL; /* cached: no new work */
    const int32_t words = mask ? (grammar_vocab_n_tokens(em->gvocab) + 31) / 32 : 0;
    bool any = !mask;
    for (int32_t w = 0; !any && w < words; w++)
        any = mask[w] != 0;
    return any ? "engine: every token is banned: logit_bias bans every token the grammar (if any) allows"
               : "engine: every token is banned: the grammar allows no token of the vocabulary here";
}

/* Sample s's next token from logits and deliver it; dev_id >= 0: the
 * device's argmax, taken as is for a plain greedy sequence (logits may then
 * be stale: not downloaded). */
static void seq_sample(struct engine *e, struct emodel *em, struct seq *s, const float *logits,
                       int32_t dev_id)
{
    struct request *r = s->rq;
    const float *raw = logits;
    struct sampler_logprobs lp;
    char gerr[256];
    int32_t forced = r->force_token ? r->force_token(r->user, s->choice) : -1;
    if (forced >= em->hp->n_vocab)
        forced = -1;
    const bool constrained = r->grammar && !s->lazy_wait && !s->lazy_free;
    if (forced < 0 && constrained && !(logits = seq_constrain(em, s, logits, gerr, sizeof gerr))) {
        seq_finish(e, s, ENGINE_FINISH_NONE, -1, gerr);
        return;
    }
    const bool want_lp = r->want_logprobs && forced < 0;
    const int32_t id = forced >= 0                    ? forced
                       : dev_id >= 0 && s->dev_greedy ? dev_id
                                                      : sampler_sample(s->smp, logits, want_lp ? &lp : NULL);
    if (id < 0) {
        seq_finish(e, s, ENGINE_FINISH_NONE, -1, seq_no_token_reason(em, s, raw));
        return;
    }
    sampler_accept(s->smp, id);
    if (forced < 0 && s->gm && grammar_matcher_accept(s->gm, id) < 0) {
        /* a limit met on the way (the grammar's fault), else a bug of ours */
        const char *why = grammar_matcher_error(s->gm);
        snprintf(gerr, sizeof gerr, "engine: %s", why[0] ? why : "sampled a token the grammar forbids");
        seq_finish(e, s, ENGINE_FINISH_NONE, -1, gerr);
        return;
    }
    if (s->lazy_wait)
        seq_lazy_check(em, s, id);
    s->tok[s->n_tok++] = id;
    s->n_gen++;
    e->local.generated_tokens++;
    const double now = omni_time_s();
    if (s->n_gen == 1) {
        s->usage.ttft_ms = (now - r->t_submit_s) * 1e3;
        hist_add(e->pend_ttft, &e->n_pend_ttft, e->p.max_seqs, s->usage.ttft_ms);
    } else {
        hist_add(e->pend_itl, &e->n_pend_itl, e->p.max_seqs, (now - s->t_last_s) * 1e3);
    }
    s->t_last_s = now;

    bool stop_token = !r->ignore_eog && tokenizer_is_eog(em->tok, id);
    for (int i = 0; i < r->n_stop_tokens && !stop_token; i++)
        stop_token = id == r->stop_tokens[i];
    if (stop_token) {
        seq_finish(e, s, ENGINE_FINISH_STOP, -1, NULL);
        return;
    }
    char piece[TEXT_CAP / 2];
    size_t n = tokenizer_stream_piece(em->tok, &s->ts, id, piece, sizeof piece);
    if (r->echo_special && n == 0)
        n = tokenizer_piece(em->tok, id, true, piece, sizeof piece);
    if (n > sizeof piece)
        n = sizeof piece;
    const char *text;
    size_t text_len;
    const int st = sampler_stop_feed(s->stop, piece, n, &text, &text_len);
    if (st < 0) {
        seq_finish(e, s, ENGINE_FINISH_NONE, -1, "engine: out of memory in the stop matcher");
        return;
    }
    struct engine_event ev = {
        .type = ENGINE_EV_TOKEN, .request_id = r->id, .choice = s->choice, .token = id,
        .text = text, .text_len = text_len, .logprobs = want_lp ? &lp : NULL,
        .stop_index = -1,
    };
    emit(r, &ev);
    if (st == 1)
        seq_finish(e, s, ENGINE_FINISH_STOP, sampler_stop_which(s->stop), NULL);
    else if (s->gm && grammar_matcher_must_end(s->gm))
        seq_finish(e, s, ENGINE_FINISH_STOP, -1, NULL); /* nothing may follow: no end token needed */
    else if ((r->max_tokens > 0 && s->n_gen >= r->max_tokens) || s->n_tok >= em->n_ctx)
        seq_finish(e, s, ENGINE_FINISH_LENGTH, -1, NULL);
}

/* Choice c of a request starts from choice 0's prompt: full blocks shared by
 * reference, the partial last block copied (copy-on-write), then its own
 * sample from the same logits. Without room it queues like any prompt (and
 * finds the full blocks in the prefix cache). */
static void seq_fork(struct engine *e, struct emodel *em, struct seq *parent, struct seq *c,
                     const float *logits)
{
    struct kv_pool *pool = em->pool;
    const int bs = kv_pool_block_size(pool), full = parent->n_done / bs;
    const bool partial = parent->n_done % bs != 0;
    if (em->n_running >= e->p.max_seqs || (partial && kv_pool_n_available(pool) < 1)) {
        wait_push(em, c, true);
        return;
    }
    for (int j = 0; j < full; j++) {
        kv_pool_ref(pool, parent->blocks[j]);
        c->blocks[j] = parent->blocks[j];
        c->hashes[j] = parent->hashes[j];
    }
    c->n_blocks = c->n_hashed = full;
    if (partial) {
        const int b = kv_pool_alloc(pool);
        if (em->dev && llm_dev_copy_block(em->dev, b, parent->blocks[full], parent->n_done % bs) < 0) {
            kv_pool_unref(pool, b);
            seq_finish(e, c, ENGINE_FINISH_NONE, -1, "engine: device copy of a KV block failed");
            return;
        }
        kv_pool_copy(pool, b, parent->blocks[full], parent->n_done % bs);
        c->blocks[c->n_blocks++] = b;
    }
    c->n_done = parent->n_done;
    c->usage.cached_tokens = parent->usage.cached_tokens;
    c->admitted_once = true;
    c->state = SEQ_RUNNING;
    c->admit_order = ++e->admit_counter;
    running_add(em, c);
    if (em->has_state) { /* the child continues from the parent's state */
        llm_kv_copy_state(kv_pool_kv(pool), c->state_slot, parent->state_slot);
        c->snap_epoch = parent->snap_epoch;
        c->reply_snap = -1;
    }
    seq_sample(e, em, c, logits, -1);
}

// ---- one step ----------------------------------------------------------------

static void add_item(struct emodel *em, struct seq *s, int n, bool embd)
{
    em->items[em->n_items++] = (struct item){ s, s->n_done, n, embd, 0 };
}

/* Build this step's work for model em: decodes, prefill chunks, admissions. */
static void schedule(struct engine *e, struct emodel *em)
{
    int budget = e->p.max_batch_tokens;
    em->n_items = 0;
    /* one decode token from every sequence whose tokens are all computed but
     * the last (oldest first: preemption takes the newest) */
    for (int i = 0; i < em->n_running && budget > 0; i++) {
        struct seq *s = em->running[i];
        if (s->n_tok - s->n_done != 1)
            continue;
        if (!seq_grow(e, em, s, s->n_tok)) {
            i--; /* s left the running array */
            continue;
        }
        add_item(em, s, 1, false);
        budget--;
    }
    /* prefill chunks of admitted prompts (their blocks were reserved) */
    for (int i = 0; i < em->n_running && budget > 0; i++) {
        struct seq *s = em->running[i];
        if (s->n_tok - s->n_done <= 1)
            continue;
        bool embd;
        const int n = chunk_len(s, budget, &embd);
        add_item(em, s, n, embd);
        budget -= n;
    }
    /* admissions, first come first served */
    while (budget > 0 && em->wait_head && em->n_running < e->p.max_seqs) {
        struct seq *s = em->wait_head;
        const int rc = seq_admit(e, em, s);
        if (rc == ADMIT_NO_ROOM)
            break;
        if (rc == ADMIT_NEVER) {
            seq_finish(e, s, ENGINE_FINISH_LENGTH, -1, NULL);
            continue;
        }
        bool embd;
        const int n = chunk_len(s, budget, &embd);
        add_item(em, s, n, embd);
        budget -= n;
    }
}

/* Count the text items of a batch of n_tok tokens and n_rows logit rows
 * whose matmuls took other kernels than the item alone would (per-row dots,
 * int8 GEMM, AMX or BLAS, and their switch points per weight type: matmul.h,
 * omni_matmul_same_kernels): there a row's bits may differ from a solo run. */
static void count_kernel_switches(struct engine *e, const struct emodel *em, int n_tok,
                                  int n_rows)
{
    const bool rows_switch = !omni_matmul_same_kernels(-1, n_rows, 1);
    for (int k = 0; k < em->n_items; k++) {
        const struct item *it = &em->items[k];
        if (it->embd)
            continue;
        e->local.kernel_switches += !omni_matmul_same_kernels(-1, n_tok, it->n) ||
                                    (it->s->logit_row >= 0 && rows_switch);
    }
}

/* M-RoPE rotary id (axis 0..2) of position p of r's sequences: the
 * prompt's own, then position + delta; the position itself without M-RoPE. */
static int32_t rope_id(const struct request *r, int p, int axis)
{
    if (!r->rope_pos)
        return p;
    return p < r->n_prompt ? r->rope_pos[(size_t)axis * r->n_prompt + p] : p + r->rope_delta;
}

/* Run the forwards of this step's items; 0 or a negative omni_err. Logit
 * rows go to em->logits in item order. */
static int forward(struct engine *e, struct emodel *em)
{
    int n_tok = 0, n_views = 0, n_rows = 0, n_hid = 0;
    bool rope = false;
    if (em->has_state) /* the snapshots this step's forwards write stay put */
        kv_pool_snap_pin(em->pool);
    for (int k = 0; k < em->n_items; k++) {
        struct item *it = &em->items[k];
        it->s->logit_row = -1;
        it->hid_row = n_hid;
        if (it->embd)
            continue;
        const struct request *r = it->s->rq;
        em->views[n_views] = (struct llm_seq_view){ it->s->blocks, it->s->n_blocks };
        if (em->has_state)
            em->view_slots[n_views] = it->s->state_slot;
        for (int i = 0; i < it->n; i++) {
            const int p = it->start + i;
            em->b_tok[n_tok] = it->s->tok[p];
            em->b_pos[n_tok] = p;
            for (int a = 0; a < 3; a++) /* M-RoPE ids (filled for all; used when a request has them) */
                em->b_rpos[(size_t)a * e->p.max_batch_tokens + n_tok] = rope_id(r, p, a);
            rope |= r->rope_pos != NULL;
            em->b_seq[n_tok] = n_views;
            em->b_want[n_tok] = !r->embed && p == it->s->n_tok - 1;
            if (em->has_state)
                snap_note(em, it->s, p, it->start + it->n, n_tok, em->b_snap);
            em->b_hid[n_tok] = r->embed && (r->pooling == EMBED_POOL_MEAN ||
                                            (r->pooling == EMBED_POOL_CLS && p == 0) ||
                                            (r->pooling == EMBED_POOL_LAST && p == it->s->n_tok - 1));
            if (em->b_want[n_tok])
                it->s->logit_row = n_rows++;
            n_hid += em->b_hid[n_tok];
            n_tok++;
        }
        n_views++;
    }
    const size_t n_vocab = (size_t)em->hp->n_vocab;
    if (n_tok && rope) /* llm_batch.rope_pos is [3][n_tok]: close the gaps */
        for (int a = 1; a < 3; a++)
            memmove(em->b_rpos + (size_t)a * n_tok, em->b_rpos + (size_t)a * e->p.max_batch_tokens,
                    (size_t)n_tok * sizeof(int32_t));
    if (em->has_state)
        snap_assign(em);
    if (n_tok) {
        struct llm_batch b = { .n_tokens = n_tok, .token = em->b_tok, .pos = em->b_pos,
                               .seq = em->b_seq, .want_logits = em->b_want,
                               .want_hidden = n_hid ? em->b_hid : NULL, .hidden = em->hidden,
                               .rope_pos = rope ? em->b_rpos : NULL,
                               .state_slot = em->has_state ? em->view_slots : NULL,
                               .state_snap = em->has_state ? em->b_snap : NULL };
        int rc;
        if (em->dev) { /* logits back only for rows that sample from them */
            for (int k = 0; k < em->n_items; k++) {
                const struct seq *s = em->items[k].s;
                if (!em->items[k].embd && s->logit_row >= 0)
                    em->row_logits[s->logit_row] = !s->dev_greedy;
            }
            rc = llm_dev_forward_rows(em->dev, &b, em->views, em->logits, em->row_logits,
                                      em->argmax);
        } else {
            rc = llm_forward(em->ctx, &b, kv_pool_kv(em->pool), em->views, em->logits);
        }
        if (rc < 0)
            return rc;
        if (!e->p.deterministic) /* deterministic: every matmul row runs on its own */
            count_kernel_switches(e, em, n_tok, n_rows);
    }
    /* embedding chunks (multimodal prompts) run one by one */
    for (int k = 0; k < em->n_items; k++) {
        struct item *it = &em->items[k];
        if (!it->embd)
            continue;
        struct request *r = it->s->rq;
        for (int i = 0; i < it->n; i++) {
            em->b_pos[i] = it->start + i;
            em->b_seq[i] = 0;
            em->b_want[i] = it->start + i == it->s->n_tok - 1;
            if (em->has_state)
                snap_note(em, it->s, it->start + i, it->start + it->n, i, em->b_snap);
            for (int a = 0; a < 3; a++)
                em->b_rpos[(size_t)a * it->n + i] = rope_id(r, it->start + i, a);
        }
        if (em->has_state)
            snap_assign(em);
        struct llm_seq_view view = { it->s->blocks, it->s->n_blocks };
        struct llm_batch b = {
            .n_tokens = it->n, .pos = em->b_pos, .seq = em->b_seq, .want_logits = em->b_want,
            .embd = r->embd + (size_t)r->embd_row[it->start] * (size_t)em->hp->n_embd * (1 + em->hp->n_deepstack),
            .rope_pos = r->rope_pos ? em->b_rpos : NULL,
            .span_first = r->span_first ? r->span_first + it->start : NULL,
            .span_last = r->span_last ? r->span_last + it->start : NULL,
            .state_slot = em->has_state ? &it->s->state_slot : NULL,
            .state_snap = em->has_state ? em->b_snap : NULL,
        };
        int rc = llm_forward(em->ctx, &b, kv_pool_kv(em->pool), &view,
                             em->logits + (size_t)n_rows * n_vocab);
        if (rc < 0)
            return rc;
        if (rc > 0)
            it->s->logit_row = n_rows++;
    }
    return 0;
}

/* A step that computes an interactive request's prompt: someone waits for
 * its first token. */
static bool step_urgent(const struct emodel *em)
{
    for (int k = 0; k < em->n_items; k++) {
        const struct seq *s = em->items[k].s;
        if (s->rq->interactive && s->n_gen == 0)
            return true;
    }
    return false;
}

/* An embedding's rows of this step into its pool; after its last prompt
 * token, the vector (mean, optionally unit length) ends the sequence. */
static void seq_pool(struct engine *e, struct emodel *em, const struct item *it)
{
    struct seq *s = it->s;
    const struct request *r = s->rq;
    const int n_embd = em->hp->n_embd;
    const int rows = r->pooling == EMBED_POOL_MEAN ? it->n
                     : r->pooling == EMBED_POOL_CLS ? it->start == 0
                     : it->start + it->n == s->n_tok;
    for (int k = 0; k < rows; k++) {
        const float *h = em->hidden + (size_t)(it->hid_row + k) * n_embd;
        for (int i = 0; i < n_embd; i++)
            s->pool_acc[i] += h[i];
    }
    if (s->n_done < s->n_tok)
        return;
    float *v = s->pool_acc;
    if (r->pooling == EMBED_POOL_MEAN)
        for (int i = 0; i < n_embd; i++)
            v[i] /= (float)s->n_tok;
    if (r->normalize) {
        double ss = 0;
        for (int i = 0; i < n_embd; i++)
            ss += (double)v[i] * v[i];
        /* as sentence-transformers' normalize: x / max(|x|, 1e-12) */
        const float inv = (float)(1.0 / (sqrt(ss) > 1e-12 ? sqrt(ss) : 1e-12));
        for (int i = 0; i < n_embd; i++)
            v[i] *= inv;
    }
    seq_finish(e, s, ENGINE_FINISH_STOP, -1, NULL);
}

static void model_step(struct engine *e, struct emodel *em)
{
    const double t0 = omni_time_s();
    schedule(e, em);
    if (!em->n_items)
        return;
    const double t1 = omni_time_s();
    e->local.sched_ms += (t1 - t0) * 1e3;
    /* a decode-only step: one generated token per item, no prompt chunk */
    bool decode_only = true;
    for (int k = 0; k < em->n_items && decode_only; k++) {
        const struct item *it = &em->items[k];
        decode_only = !it->embd && it->n == 1 && it->start >= it->s->rq->n_prompt &&
                      it->start == it->s->n_tok - 1;
    }
    /* The step's threads come from the compute budget, once per step (not
     * per matmul); it holds them through sampling, which runs on this
     * thread, one of them. */
    const bool urgent = step_urgent(em);
    if (tpool_begin(e->tp, urgent) < 0)
        return; /* engine_free: the scheduled sequences end cancelled */
    const double t1w = omni_time_s();
    e->local.compute_wait_ms += (t1w - t1) * 1e3;
    e->local.urgent_steps += urgent;
    int rc = forward(e, em);
    const double t2 = omni_time_s();
    e->local.forward_ms += (t2 - t1w) * 1e3;
    if (rc < 0) {
        tpool_end(e->tp);
        char msg[128];
        snprintf(msg, sizeof msg, "engine: forward failed: %s", omni_strerror(rc));
        for (int k = 0; k < em->n_items; k++)
            seq_finish(e, em->items[k].s, ENGINE_FINISH_NONE, -1, msg);
        return;
    }
    const size_t n_vocab = (size_t)em->hp->n_vocab;
    for (int k = 0; k < em->n_items; k++) {
        struct item *it = &em->items[k];
        struct seq *s = it->s;
        if (s->state != SEQ_RUNNING)
            continue;
        s->n_done += it->n;
        seq_publish(em, s);
        if (s->rq->embed) {
            seq_pool(e, em, it);
            continue;
        }
        if (s->logit_row < 0)
            continue;
        const float *logits = em->logits + (size_t)s->logit_row * n_vocab;
        if (s->choice == 0 && s->n_gen == 0)
            for (int c = 1; c < s->rq->n; c++)
                if (s->rq->seqs[c].state == SEQ_FORK_WAIT)
                    seq_fork(e, em, s, &s->rq->seqs[c], logits);
        seq_sample(e, em, s, logits, em->dev && !it->embd ? em->argmax[s->logit_row] : -1);
    }
    tpool_end(e->tp);
    const double ms = (omni_time_s() - t0) * 1e3;
    e->local.steps++;
    e->local.step_ms += ms;
    if (decode_only) {
        e->local.decode_steps++;
        e->local.decode_rows += (uint64_t)em->n_items;
        e->local.decode_step_ms += ms;
    }
}

// ---- the engine thread -------------------------------------------------------

static void hist_push(struct hist *h, const double *v, int n)
{
    for (int i = 0; i < n; i++)
        h->v[h->n++ % HIST_CAP] = v[i];
}

static bool has_work(const struct engine *e)
{
    for (int i = 0; i < e->n_models; i++)
        if (e->models[i].n_running || e->models[i].wait_head)
            return true;
    return false;
}

/* Statistics of the engine thread copied where engine_stats reads them. */
static void publish_stats(struct engine *e)
{
    struct engine_stats *st = &e->local;
    st->running = st->waiting = 0;
    st->kv_blocks_total = st->kv_blocks_used = st->kv_blocks_cached = 0;
    st->snap_slots = st->snaps_held = 0;
    st->snap_evictions = 0;
    for (int i = 0; i < e->n_models; i++) {
        const struct emodel *em = &e->models[i];
        st->running += em->n_running;
        st->waiting += em->n_waiting;
        for (const struct request *r = e->active; r; r = r->next)
            for (int c = 0; r->model == i && c < r->n; c++)
                st->waiting += r->seqs[c].state == SEQ_FORK_WAIT;
        st->kv_blocks_total += kv_pool_n_blocks(em->pool);
        st->kv_blocks_used += kv_pool_n_used(em->pool);
        st->kv_blocks_cached += kv_pool_n_cached(em->pool);
        st->snap_slots += kv_pool_n_snap_slots(em->pool);
        st->snaps_held += kv_pool_n_snaps(em->pool);
        st->snap_evictions += kv_pool_snap_evictions(em->pool);
    }
    pthread_mutex_lock(&e->mu);
    const uint64_t prompt_tokens = e->submitted_prompt_tokens;
    e->stats = *st;
    e->stats.prompt_tokens = prompt_tokens;
    e->n_waiting_seen = st->waiting;
    hist_push(&e->ttft, e->pend_ttft, e->n_pend_ttft);
    hist_push(&e->itl, e->pend_itl, e->n_pend_itl);
    pthread_mutex_unlock(&e->mu);
    e->n_pend_ttft = e->n_pend_itl = 0;
}

/* While sequences run or wait, the engine keeps its share of the compute
 * budget between steps; idle, it leaves every thread to the others. */
static void set_busy(struct engine *e, bool busy)
{
    if (busy != e->busy) {
        e->busy = busy;
        tpool_active(e->tp, busy);
    }
}

static void *engine_thread(void *arg)
{
    struct engine *e = arg;
    uint64_t *cancels = NULL;
    int cap_cancels = 0;
    for (;;) {
        set_busy(e, has_work(e));
        pthread_mutex_lock(&e->mu);
        while (!e->stop && !e->sub_head && !e->n_cancel && !has_work(e))
            pthread_cond_wait(&e->cv, &e->mu);
        const bool stop = e->stop;
        struct request *subs = e->sub_head;
        e->sub_head = e->sub_tail = NULL;
        e->n_sub = 0;
        int n_cancel = e->n_cancel;
        if (n_cancel > cap_cancels) {
            uint64_t *c = realloc(cancels, (size_t)n_cancel * sizeof *c);
            if (c) {
                cancels = c;
                cap_cancels = n_cancel;
            }
        }
        if (n_cancel > cap_cancels)
            n_cancel = 0; /* out of memory: keep them queued for the next step */
        if (n_cancel) { /* both arrays may still be NULL otherwise */
            memcpy(cancels, e->cancel_ids, (size_t)n_cancel * sizeof *cancels);
            e->n_cancel -= n_cancel;
            memmove(e->cancel_ids, e->cancel_ids + n_cancel,
                    (size_t)e->n_cancel * sizeof *cancels);
        }
        pthread_mutex_unlock(&e->mu);

        while (subs) {
            struct request *r = subs;
            subs = r->next;
            r->next = e->active;
            e->active = r;
            wait_push(&e->models[r->model], &r->seqs[0], false);
        }
        if (stop)
            break;
        set_busy(e, has_work(e));
        for (int i = 0; i < n_cancel; i++)
            for (struct request *r = e->active; r; r = r->next)
                if (r->id == cancels[i]) {
                    request_finish(e, r, ENGINE_FINISH_CANCELLED);
                    break;
                }
        const double now = omni_time_s();
        for (struct request *r = e->active, *next; r; r = next) {
            next = r->next;
            if (r->deadline_s > 0 && now >= r->deadline_s)
                request_finish(e, r, ENGINE_FINISH_TIMEOUT);
        }
        for (int k = 0; k < e->n_models; k++) {
            const int i = (e->rr + 1 + k) % e->n_models;
            if (e->models[i].n_running || e->models[i].wait_head) {
                e->rr = i;
                model_step(e, &e->models[i]);
                break;
            }
        }
        while (e->dead) {
            struct request *r = e->dead;
            e->dead = r->next;
            request_free(r);
        }
        publish_stats(e);
    }
    /* engine_free: every request still here ends cancelled */
    set_busy(e, false);
    while (e->active)
        request_finish(e, e->active, ENGINE_FINISH_CANCELLED);
    while (e->dead) {
        struct request *r = e->dead;
        e->dead = r->next;
        request_free(r);
    }
    publish_stats(e);
    free(cancels);
    return NULL;
}

// ---- blocking use and statistics -------------------------------------------------

struct gen_wait {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int open;
    int rc;
    char *err;
    size_t errlen;
    engine_event_fn fn;
    int32_t (*force)(void *user, int choice);
    void *user;
};

static int32_t gen_force(void *user, int choice)
{
    struct gen_wait *w = user;
    return w->force(w->user, choice);
}

static void gen_event(void *user, const struct engine_event *ev)
{
    struct gen_wait *w = user;
    if (w->fn)
        w->fn(w->user, ev);
    if (ev->type == ENGINE_EV_TOKEN)
        return;
    pthread_mutex_lock(&w->mu);
    if (ev->type == ENGINE_EV_ERROR && w->rc == 0)
        w->rc = omni_fail(w->err, w->errlen, OMNI_ERR_ARG, "%s", ev->error);
    if (--w->open == 0)
        pthread_cond_signal(&w->cv);
    pthread_mutex_unlock(&w->mu);
}

int engine_generate(struct engine *e, const struct engine_request *rq, char *err,
                    size_t errlen)
{
    struct gen_wait w = { .open = rq->n, .err = err, .errlen = errlen, .fn = rq->on_event,
                          .force = rq->force_token, .user = rq->user };
    pthread_mutex_init(&w.mu, NULL);
    pthread_cond_init(&w.cv, NULL);
    struct engine_request r = *rq;
    r.on_event = gen_event;
    r.force_token = rq->force_token ? gen_force : NULL;
    r.user = &w;
    int rc = engine_submit(e, &r, NULL, err, errlen);
    if (rc == 0) {
        pthread_mutex_lock(&w.mu);
        while (w.open > 0)
            pthread_cond_wait(&w.cv, &w.mu);
        rc = w.rc;
        pthread_mutex_unlock(&w.mu);
    }
    pthread_mutex_destroy(&w.mu);
    pthread_cond_destroy(&w.cv);
    return rc;
}

static int cmp_double(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Percentiles of a ring copied out under the lock (nearest rank). */
static void hist_summary(double *v, uint64_t n_all, struct engine_hist *out)
{
    const size_t n = n_all < HIST_CAP ? (size_t)n_all : HIST_CAP;
    *out = (struct engine_hist){ .count = n_all };
    if (!n)
        return;
    qsort(v, n, sizeof *v, cmp_double);
    out->p50 = v[(n - 1) * 50 / 100];
    out->p95 = v[(n - 1) * 95 / 100];
    out->p99 = v[(n - 1) * 99 / 100];
}

void engine_stats(struct engine *e, struct engine_stats *out)
{
    static __thread double ttft[HIST_CAP], itl[HIST_CAP];
    pthread_mutex_lock(&e->mu);
    *out = e->stats;
    out->waiting += e->n_sub;
    const uint64_t n_ttft = e->ttft.n, n_itl = e->itl.n;
    memcpy(ttft, e->ttft.v, sizeof ttft);
    memcpy(itl, e->itl.v, sizeof itl);
    pthread_mutex_unlock(&e->mu);
    hist_summary(ttft, n_ttft, &out->ttft_ms);
    hist_summary(itl, n_itl, &out->itl_ms);
}
