/* bert.h - encoder models for embeddings and reranking.
 *
 * GGUF files as llama.cpp writes them for `bert` (bge, all-MiniLM, e5, and
 * cross-encoders with a classification head), `nomic-bert` (nomic-embed-text
 * v1/v1.5: rotary positions, SwiGLU) and `jina-bert-v2`. The tokenizer
 * (WordPiece, tokenizer.ggml.model = "bert") and the pooling type
 * (<arch>.pooling_type) come from the file.
 *
 *   struct bert_model *m = bert_model_load("bge-small.gguf", NULL, err, sizeof err);
 *   const struct bert_info *in = bert_model_info(m);
 *   struct bert_input x = {0};
 *   bert_tokenize(m, "hello world", NULL, &x, err, sizeof err);   // [CLS] ... [SEP]
 *   float *v = malloc(in->n_out * sizeof *v);
 *   bert_forward(m, &x, 1, in->pooling, true, v, err, sizeof err);
 *   bert_input_free(&x);
 *   bert_model_free(m);
 *
 * Thread safety: a loaded model is immutable; bert_forward may run on
 * several threads at once (each call allocates its own scratch). Its
 * threads come from the compute budget given at load (NULL: a private pool
 * of the physical cores). */
#ifndef OMNI_BERT_H
#define OMNI_BERT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct compute;
struct tokenizer;

/* Pooling; the values are llama.cpp's (GGUF <arch>.pooling_type). */
enum embed_pooling {
    EMBED_POOL_NONE = 0, /* per token (not served; the CLI may print it) */
    EMBED_POOL_MEAN = 1,
    EMBED_POOL_CLS = 2,
    EMBED_POOL_LAST = 3,
    EMBED_POOL_RANK = 4, /* classification head on the [CLS] state: relevance scores */
};
/* "none", "mean", "cls", "last", "rank" <-> enum; -1 when unknown. */
int embed_pooling_from_name(const char *name);
const char *embed_pooling_name(enum embed_pooling p);

struct bert_info {
    const char *arch;        /* "bert", "nomic-bert", "jina-bert-v2" */
    const char *name;        /* general.name, or the file's base name */
    int n_embd;              /* hidden size */
    int n_layer;
    int n_ctx_train;         /* the longest input, special tokens included */
    enum embed_pooling pooling; /* from the file (mean when it says nothing) */
    int n_out;               /* floats per input: n_embd, or the classifier's outputs (rank) */
};

/* One tokenized input: ids with the model's frame and the token type ids
 * (0 for the first text, 1 for the pair's second). */
struct bert_input {
    int32_t *ids;
    int32_t *type_ids;
    int n;
};

/* NULL + a line naming the file and the field on failure. */
struct bert_model *bert_model_load(const char *path, struct compute *compute, char *err,
                                   size_t errlen);
void bert_model_free(struct bert_model *m);
const struct bert_info *bert_model_info(const struct bert_model *m);
const struct tokenizer *bert_model_tokenizer(const struct bert_model *m);

/* [CLS] text [SEP], or [CLS] text [SEP] pair [SEP] with type ids 0/1 when
 * pair is non-NULL (cross-encoders). Longer than n_ctx_train -> OMNI_ERR_LIMIT
 * (the caller names the input in its 400). */
int bert_tokenize(const struct bert_model *m, const char *text, const char *pair,
                  struct bert_input *out, char *err, size_t errlen);
void bert_input_free(struct bert_input *in);

/* Forward n inputs as one batch (inputs of different lengths; no cross-talk:
 * each attends only to itself). out[i * n_out ...]: the pooled vector of
 * input i, L2-normalized when normalize (ignored for RANK), or for
 * EMBED_POOL_RANK the classifier's raw scores (logits; callers apply the
 * sigmoid where they want 0..1). Errors (OMNI_ERR_*) instead of NaN. */
int bert_forward(struct bert_model *m, const struct bert_input *in, int n,
                 enum embed_pooling pooling, bool normalize, float *out, char *err,
                 size_t errlen);

#endif
