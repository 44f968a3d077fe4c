/* engine.h - the one scheduler every language-model request goes through.
 *
 * One engine thread runs steps: it admits waiting requests while KV blocks and
 * the per-step token budget allow, takes one decode token from every running
 * sequence plus chunked prefill from the admitted ones, runs one batched
 * llm_forward over the paged KV pool, samples each sequence with its own
 * sampler, detokenizes, applies stop strings and delivers events. A model
 * with per-sequence recurrent state (lfm2) keeps it beside the KV blocks:
 * allocated with the sequence, copied on fork (n > 1), dropped on cancel,
 * finish or preemption; every full KV block keeps a snapshot of the state
 * after its last token, so a cached prefix (or a preempted sequence's
 * surviving blocks) resumes with exact state. Those blocks are not written
 * to the on-disk prefix store.
 *
 *   struct engine_params ep = engine_default_params();
 *   struct engine *e = engine_new(&ep, err, sizeof err);
 *   int chat = engine_add_model(e, model, "qwen2.5", err, sizeof err);
 *   engine_start(e, err, sizeof err);
 *   struct engine_request rq = engine_default_request();
 *   rq.model = chat; rq.prompt = ids; rq.n_prompt = n; rq.max_tokens = 64;
 *   rq.on_event = my_cb; rq.user = my_state;
 *   uint64_t id;
 *   if (engine_submit(e, &rq, &id, err, sizeof err) == OMNI_ERR_LIMIT) -> 429
 *   ...  my_cb(my_state, &ev) is called for each token and exactly once with
 *        ENGINE_EV_DONE (or ENGINE_EV_ERROR) per choice; then never again.
 *   engine_cancel(e, id);   // any time, any thread; unknown/finished id: no-op
 *   engine_free(e);         // stops the thread, cancels what is left
 *
 * Thread safety: engine_submit, engine_cancel and engine_stats may be called
 * from any thread. Callbacks run on the engine thread and must not block
 * (copy the event into your own queue and wake your I/O thread). The
 * engine does not touch rq.user after the last choice's final event, so the
 * owner keeps it alive until then - also after engine_cancel, which ends with
 * a final event whose finish reason is ENGINE_FINISH_CANCELLED. */
#ifndef OMNI_ENGINE_H
#define OMNI_ENGINE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "llm/bert.h"
#include "llm/sampler.h"

struct llm_model;
struct engine;
struct grammar;
struct compute;

struct engine_params {
    int n_threads;           /* compute threads; 0 = the budget's size, or physical cores */
    struct compute *compute; /* the process's compute budget (src/core/compute.h): each
                                step takes its threads from it; NULL = none (the pool
                                runs whenever it likes) */
    int kv_block_size;       /* tokens per KV block; default 16 */
    int kv_type;             /* GGML_TYPE_F16 (default), GGML_TYPE_F32, GGML_TYPE_Q8_0
                                (needs every model's n_head_kv * head_dim % 32 == 0) */
    size_t kv_memory_bytes;  /* KV pool size; 0 = from available RAM minus weights */
    int max_batch_tokens;    /* per-step token budget; default 512 */
    int max_seqs;            /* running sequences; default 16 */
    int max_queue;           /* waiting requests before submit refuses; default 256 */
    bool deterministic;      /* batch-invariant results */
    const char *prefix_cache_dir; /* persist hot prefixes there; NULL = off */
    int state_snapshot_interval; /* models with recurrent state (hybrids): tokens between the
                                    prefix cache's state snapshots, rounded up to whole blocks
                                    (the end of each prompt keeps one too); 0 = every block,
                                    -1 = none (no prefix cache for them) */
    int64_t state_snapshot_memory; /* hybrids: bytes of the snapshot store (all models); 0 =
                                    auto (a quarter of the KV budget the engine picks, taken
                                    from it; under kv_memory_bytes a quarter of that, beside
                                    it), -1 = none. Full: the least worth is evicted (thinned) */
    /* Where the model forward runs (read by engine_start): NULL or "cpu":
     * llm_forward here; "cuda" or "cuda:N": the GPU (llm/model_dev.h: weights
     * and the KV pool in GPU memory, the host pool keeps only the block
     * bookkeeping; greedy requests get their argmax from the GPU, others
     * their logits); "cpu-dev": that device path on the "cpu" backend (tests).
     * A model the device cannot run fails engine_start naming why. */
    const char *device;
    double gpu_memory_fraction; /* device: share of free GPU memory for KV when
                                   kv_memory_bytes is 0; 0 = 0.9 */
};
struct engine_params engine_default_params(void);
/* --kv-type names: "f16", "f32", "q8_0" -> GGML type, -1 when unknown; and
 * back, NULL for a type the engine does not store K/V in. */
int engine_kv_type_from_name(const char *name);
const char *engine_kv_type_name(int kv_type);

/* A run of prompt input: token ids, or precomputed embeddings (an image's
 * projected patches) with a content hash for the prefix cache. */
struct engine_segment {
    const int32_t *tokens;   /* n tokens, or NULL when embd is set */
    const float *embd;       /* [n][n_embd] (DeepStack LMs, qwen3vl: [n][n_embd * (1 + n_deepstack)]) */
    int n;
    uint64_t media_hash;     /* content hash of the media behind embd; 0 for tokens */
    int grid_rows, grid_cols;/* M-RoPE models (qwen2vl): the image's merged grid, rows x cols
                                = n (0: rows in sequence, as text) */
    int grid_t;              /* qwen2vl video: grid_t temporal patches of rows x cols (= n); the
                                k-th at temporal id floor(k * t_step) past the grid's start */
    float t_step;
};

enum engine_finish {
    ENGINE_FINISH_NONE = 0,  /* not finished (token events) */
    ENGINE_FINISH_STOP,      /* EOG token or stop string */
    ENGINE_FINISH_LENGTH,    /* max_tokens or context full */
    ENGINE_FINISH_CANCELLED, /* engine_cancel or engine_free */
    ENGINE_FINISH_TIMEOUT,   /* timeout_s elapsed */
};

enum engine_event_type {
    ENGINE_EV_TOKEN,         /* one generated token and the text it made safe to emit */
    ENGINE_EV_DONE,          /* final event of a choice: finish reason and usage */
    ENGINE_EV_ERROR,         /* final event of a choice: error message */
};

struct engine_usage {
    int prompt_tokens;
    int cached_tokens;       /* prompt tokens whose KV came from the prefix cache */
    int completion_tokens;
    double ttft_ms;          /* submit -> first token */
    double total_ms;
};

struct engine_event {
    enum engine_event_type type;
    uint64_t request_id;
    int choice;              /* 0..n-1 */
    int32_t token;           /* TOKEN: the sampled id */
    const char *text;        /* TOKEN: UTF-8 now safe to emit (may be ""); DONE: any
                                held-back text to flush; valid during the callback */
    size_t text_len;
    const struct sampler_logprobs *logprobs; /* TOKEN with n_logprobs > 0, else NULL */
    enum engine_finish finish;               /* DONE */
    int stop_index;          /* DONE by stop string: which one; else -1 */
    struct engine_usage usage;               /* DONE */
    const char *error;       /* ERROR */
    const float *embd;       /* DONE of an ENGINE_TASK_EMBED request: the pooled vector
                                (n_embd floats), valid during the callback; else NULL */
    int n_embd;
};

typedef void (*engine_event_fn)(void *user, const struct engine_event *ev);

/* Who waits for a request. Under a compute budget a step that computes an
 * interactive request's prompt (up to its first token) asks for its threads
 * as urgent, so time to first token does not queue behind batch work
 * (Whisper transcriptions, image encodes, batch requests). */
enum engine_priority {
    ENGINE_PRIORITY_INTERACTIVE = 0, /* a user waits for the first token (default) */
    ENGINE_PRIORITY_BATCH,           /* throughput work: its steps never ask first */
};

/* What a request computes. */
enum engine_task {
    ENGINE_TASK_GENERATE = 0,         /* sample tokens (default) */
    /* An embedding: the sequence ends after its prompt - no sampling, no
     * output projection; the final hidden states (after the output norm)
     * pooled as rq.pooling says, delivered in the DONE event (ev.embd). Its
     * KV blocks go back to the pool (full ones stay in the prefix cache).
     * Needs n == 1 and token prompts; max_tokens, sampling, stop and grammar
     * are ignored. */
    ENGINE_TASK_EMBED,
};

struct engine_request {
    int model;                        /* from engine_add_model */
    enum engine_task task;            /* default ENGINE_TASK_GENERATE */
    enum embed_pooling pooling;       /* EMBED: EMBED_POOL_LAST (default), _MEAN or _CLS
                                         (the first token) */
    bool normalize;                   /* EMBED: L2-normalize the pooled vector */
    const int32_t *prompt;            /* token prompt (copied), or use segments */
    int n_prompt;
    const struct engine_segment *segments; /* alternative to prompt (copied) */
    int n_segments;
    struct sampler_params sampling;   /* per choice; choice i uses seed + i */
    int n;                            /* choices sharing the prompt's KV blocks; default 1 */
    int max_tokens;                   /* generated tokens per choice; <= 0: up to the context */
    const char *const *stop;          /* stop strings (copied); not part of the output */
    int n_stop;
    bool ignore_eog;                  /* keep going past end-of-generation tokens */
    const int32_t *stop_tokens;       /* more ids that end a choice like an EOG token, not
                                         delivered, also with ignore_eog (copied); e.g. the
                                         BOS that ends llama2.c's run */
    int n_stop_tokens;
    bool echo_special;                /* detokenize control tokens into text */
    double timeout_s;                 /* 0 = none */
    enum engine_priority priority;    /* default interactive */
    engine_event_fn on_event;
    void *user;
    struct grammar *grammar;          /* constrain every choice to it (llm/grammar); the
                                         engine takes its own reference. NULL: free text */
    const char *grammar_trigger;      /* with grammar: a choice is free text until its output
                                         contains this (copied), then the grammar applies from
                                         the trigger on, as if the grammar had produced it (a
                                         tool call under tool_choice "auto"); output that does
                                         not fit the grammar there leaves the choice free.
                                         NULL or "": the grammar applies from the start */
    bool grammar_close;               /* with grammar: once the tokens left (max_tokens, the
                                         context) only just cover the shortest way to the
                                         grammar's end, sample on such a way, so the output
                                         ends complete instead of cut (tool calls) */
    /* Forced tokens (a reasoning budget's closing tag): called with user on
     * the engine thread before each sample of a choice; a token id >= 0 is
     * that choice's next token instead of a sampled one, -1 samples. A forced
     * token bypasses the grammar and counts, stops and is reported (TOKEN
     * event, logprobs NULL) like a sampled one. NULL: always sample. */
    int32_t (*force_token)(void *user, int choice);
};
struct engine_request engine_default_request(void);

struct engine *engine_new(const struct engine_params *params, char *err, size_t errlen);
/* Stops the engine thread (cancelling what runs, with final events), frees
 * everything. Models stay owned by the caller; free them after. */
void engine_free(struct engine *e);

/* Register a model before engine_start; returns its index (>= 0) or an error.
 * The engine borrows m (read-only) until engine_free. */
int engine_add_model(struct engine *e, struct llm_model *m, const char *name, char *err,
                     size_t errlen);
int engine_find_model(const struct engine *e, const char *name); /* -1 if unknown */
int engine_n_models(const struct engine *e);
const char *engine_model_name(const struct engine *e, int model);
struct llm_model *engine_model(const struct engine *e, int model);

/* Sizes the KV pool and starts the engine thread. */
int engine_start(struct engine *e, char *err, size_t errlen);

/* Queue a request. 0 and *id on success; OMNI_ERR_LIMIT when the queue is
 * full (server busy: retry later); OMNI_ERR_ARG for a prompt longer than the
 * context or the pool, bad model index or bad sampling parameters - with a
 * message naming the numbers. No callback runs for a refused request. */
int engine_submit(struct engine *e, const struct engine_request *rq, uint64_t *id,
                  char *err, size_t errlen);
void engine_cancel(struct engine *e, uint64_t id);

/* Run one request to completion on the calling thread's behalf (blocks until
 * its final event): for the CLI and tests. */
int engine_generate(struct engine *e, const struct engine_request *rq, char *err,
                    size_t errlen);

struct engine_hist {                  /* latency histogram, milliseconds */
    double p50, p95, p99;
    uint64_t count;
};

struct engine_stats {
    int running, waiting;
    int kv_blocks_total, kv_blocks_used, kv_blocks_cached;
    uint64_t prefix_hits, prefix_misses, prefix_hit_tokens;
    uint64_t prompt_tokens, generated_tokens;
    uint64_t preemptions;
    uint64_t steps;
    /* Sequence-steps whose batch took another matmul kernel family (per-row
     * dot, AMX tiles, BLAS) than the sequence's own tokens alone would: its
     * logits may differ in the last bits from a solo run. 0 when deterministic. */
    uint64_t kernel_switches;
    struct engine_hist ttft_ms, itl_ms;
    double step_ms;          /* total time spent in steps */
    double forward_ms;       /* of which in llm_forward (the rest: scheduling, sampling, events) */
    double sched_ms;         /* of which in scheduling (admission, prefix lookup, preemption) */
    /* Decode-only steps: every item one generated token of its sequence, no
     * prompt chunk in the batch (their mean time is the batched-decode cost) */
    uint64_t decode_steps;
    uint64_t decode_rows;    /* tokens of those steps (rows per step = decode_rows / decode_steps) */
    double decode_step_ms;   /* total time of those steps */
    double compute_wait_ms;  /* of which waiting for threads from the compute budget */
    uint64_t urgent_steps;   /* steps that asked the budget first (an interactive prompt) */
    /* hybrids' state snapshots (prefix cache): slots of the store, held now,
     * and taken from a block for another (thinning) since the start */
    int snap_slots, snaps_held;
    uint64_t snap_evictions;
};
void engine_stats(struct engine *e, struct engine_stats *out);

#endif
