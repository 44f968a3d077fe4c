/* embed.h - the embedding and reranking service: models that embed or score
 * by name, and jobs of many inputs that run batched with other jobs.
 *
 * Two kinds of model: decoder models (llama/qwen2/qwen3: Qwen3-Embedding,
 * gte-Qwen2, Qwen3-Reranker) run as engine sequences that end after their
 * prompt (ENGINE_TASK_EMBED), batched with chat in the engine's steps;
 * encoder models (llm/bert.h: bert, nomic-bert, jina-bert-v2) run through
 * one batcher thread that gathers the waiting inputs of all jobs into one
 * bert_forward (its threads come from the compute budget the model was
 * loaded with).
 *
 *   struct embed_service *s = embed_service_new(NULL, err, sizeof err);
 *   embed_service_add_engine(s, engine, idx, "qwen3-emb", EMBED_ROLE_EMBED, -1, -1, err, n);
 *   embed_service_start(s, err, sizeof err);
 *   struct embed_job *j = embed_job_new(s, model, n_inputs);
 *   embed_job_set_text(j, 0, "hello", NULL, err, sizeof err);  // OMNI_ERR_LIMIT: too long
 *   embed_job_submit(j, on_done, user, err, sizeof err);        // OMNI_ERR_LIMIT: busy
 *   ... on_done(user, j) on a service thread: embed_job_output(j, i), embed_job_error(j)
 *   embed_job_free(j);
 *   embed_service_free(s);   // after engine_free (decoder jobs end with the engine)
 *
 * Rerank scores are probabilities in 0..1: a cross-encoder's logit through
 * the sigmoid; a decoder reranker's softmax over its "yes"/"no" logits at
 * the last position (Qwen3-Reranker's convention).
 *
 * Thread safety: the service is configured on one thread before
 * embed_service_start; then embed_job_* may be called from any thread, one
 * thread per job at a time until submit. on_done runs exactly once per
 * submitted job, on the service's delivery thread (so formatting a large
 * answer there holds up neither the engine nor the encoder batcher); the
 * service does not touch the job after it. embed_job_cancel may
 * be called from any thread until embed_job_free. */
#ifndef OMNI_EMBED_H
#define OMNI_EMBED_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "llm/bert.h"

struct compute;
struct engine;
struct embed_service;
struct embed_job;

/* embed_job_error_code of a cancelled job (beside the OMNI_ERR_* codes). */
#define EMBED_ERR_CANCELLED (-64)

enum embed_role {
    EMBED_ROLE_EMBED,  /* vectors */
    EMBED_ROLE_RERANK, /* one relevance score per (query, document) pair */
};

struct embed_params {
    int window;             /* decoder inputs of one job in the engine at once; default 32 */
    int max_batch_inputs;   /* encoder inputs per bert_forward; default 32 */
    int max_batch_tokens;   /* encoder tokens per bert_forward; default 8192 */
    int max_queue_inputs;   /* encoder inputs waiting before submit refuses; default 16384 */
};
struct embed_params embed_default_params(void);

struct embed_model_info {
    const char *name;
    const char *arch;       /* "qwen3", "bert", ... */
    enum embed_role role;
    bool decoder;           /* an engine model (else bert.h) */
    enum embed_pooling pooling;
    bool normalize;
    int n_embd;             /* floats per vector (embed role) */
    int n_ctx;              /* tokens per input at most */
};

struct embed_service *embed_service_new(const struct embed_params *p, char *err, size_t errlen);
/* Stops the batcher; jobs still queued end with an error. Call after
 * engine_free of the engine whose models were added. NULL: no-op. */
void embed_service_free(struct embed_service *s);

/* A decoder model of a (not yet started or started) engine. pooling < 0:
 * <arch>.pooling_type from the file, else last; normalize < 0: true. For
 * EMBED_ROLE_RERANK the yes/no token ids come from <arch>.classifier.
 * output_labels (default "yes", "no") and the prompt from
 * tokenizer.chat_template.rerank (default: Qwen3-Reranker's format).
 * Returns the service's model index. */
int embed_service_add_engine(struct embed_service *s, struct engine *e, int engine_model,
                             const char *name, enum embed_role role, int pooling, int normalize,
                             char *err, size_t errlen);
/* Is path an encoder model's GGUF (general.architecture bert, nomic-bert,
 * jina-bert-v2, ...)? 1 yes, 0 no (a decoder), negative when unreadable. */
int embed_file_is_encoder(const char *path, char *err, size_t errlen);
/* Load an encoder model (owned by the service) with its threads from
 * compute (NULL: a private pool). The role is rerank when the file's pooling
 * is rank. pooling < 0 / normalize < 0: the file's / true. */
int embed_service_load_bert(struct embed_service *s, const char *path, struct compute *compute,
                            const char *name, int pooling, int normalize, char *err,
                            size_t errlen);
/* embed_load.c (the loaders, apart so that users of the service alone do
 * not link the model loaders): load path as a model of role: an encoder through bert.h (its threads
 * from compute), a decoder through llm_model_load and engine_add_model on e
 * (before engine_start; its engine name is "embed-N"). The service owns what
 * it loads (free it after engine_free). name NULL: the file's base name
 * without .gguf. */
int embed_service_load(struct embed_service *s, const char *path, enum embed_role role,
                       struct engine *e, struct compute *compute, const char *name, int pooling,
                       int normalize, char *err, size_t errlen);

/* Free ptr with free_fn in embed_service_free (what embed_service_load
 * loaded for the engine, which must outlive it; at most 16). */
void embed_service_keep(struct embed_service *s, void *ptr, void (*free_fn)(void *));

/* Starts the batcher thread (when an encoder model was added). */
int embed_service_start(struct embed_service *s, char *err, size_t errlen);

int embed_service_n_models(const struct embed_service *s);
const struct embed_model_info *embed_service_model(const struct embed_service *s, int i);
/* The model named name with that role; NULL name: the first one of the
 * role. -1 when none. */
int embed_service_find(const struct embed_service *s, const char *name, enum embed_role role);

/* A job of n_inputs inputs (1..65536) for model i; NULL when out of memory
 * or a bad index. Owned by the caller: embed_job_free after on_done (or
 * instead of submitting). */
struct embed_job *embed_job_new(struct embed_service *s, int model, int n_inputs);
void embed_job_free(struct embed_job *j);
/* Input i as text (pair: the document of a rerank pair, text its query);
 * tokenized here (the model's special tokens, frame and EOS convention).
 * OMNI_ERR_LIMIT (longer than the model's context) or OMNI_ERR_ARG (empty,
 * not UTF-8) with a message. */
int embed_job_set_text(struct embed_job *j, int i, const char *text, const char *pair,
                       char *err, size_t errlen);
/* Input i as token ids, used as given (embed role). OMNI_ERR_ARG for an id
 * outside the vocabulary or an empty list; OMNI_ERR_LIMIT when too long. */
int embed_job_set_tokens(struct embed_job *j, int i, const int32_t *ids, int n, char *err,
                         size_t errlen);
int embed_job_input_tokens(const struct embed_job *j, int i);

typedef void (*embed_done_fn)(void *user, struct embed_job *j);
/* Every input must be set. 0, or OMNI_ERR_LIMIT when the server is busy
 * (nothing runs, on_done is not called). */
int embed_job_submit(struct embed_job *j, embed_done_fn on_done, void *user, char *err,
                     size_t errlen);
/* Stop early (the client left): on_done still comes, with an error. */
void embed_job_cancel(struct embed_job *j);

/* After on_done: NULL when every input has its output, else why not. */
const char *embed_job_error(const struct embed_job *j);
/* OMNI_ERR_* of the error (0 when none). */
int embed_job_error_code(const struct embed_job *j);
/* Output of input i: n_embd floats (embed role) or one score (rerank). */
const float *embed_job_output(const struct embed_job *j, int i);
int embed_job_n_out(const struct embed_job *j);
int embed_job_tokens(const struct embed_job *j); /* all inputs' tokens */

#endif
