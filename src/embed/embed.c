/* embed.c - the embedding and reranking service (embed.h): decoder models as
 * engine sequences (a window of each job's inputs in the engine at a time,
 * refilled from the engine's final events), encoder models through one
 * batcher thread that packs the waiting inputs of every job of a model into
 * one bert_forward. Decoder rerankers are scored from the final hidden state
 * against the two output-matrix rows of their yes/no labels, so no row of a
 * reranking request pays for the full vocabulary projection. */
#include "src/embed/embed.h"

#include "llm/model.h"
#include "llm/tokenizer.h"
#include "src/core/gguf.h"
#include "src/core/matmul.h"
#include "src/core/omni.h"
#include "src/engine/engine.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define EMBED_MAX_MODELS 16


/* Qwen3-Reranker's prompt (its model card): {query} and {document} are
 * replaced; a GGUF's tokenizer.chat_template.rerank takes precedence. */
static const char qwen3_rerank_template[] =
    "<|im_start|>system\nJudge whether the Document meets the requirements based on the Query "
    "and the Instruct provided. Note that the answer can only be \"yes\" or \"no\".<|im_end|>\n"
    "<|im_start|>user\n<Instruct>: Given a web search query, retrieve relevant passages that "
    "answer the query\n<Query>: {query}\n<Document>: {document}<|im_end|>\n"
    "<|im_start|>assistant\n<think>\n\n</think>\n\n";

struct emodel {
    struct embed_model_info info;
    char name[128];
    char arch[32];
    /* decoder */
    struct engine *engine;
    int engine_model;
    const struct tokenizer *tok;
    int n_vocab;
    int32_t eos_append;      /* id appended to text inputs, or -1 */
    char *rerank_tmpl;       /* owned: the prompt with {query} / {document} */
    float *yes_no;           /* [2][n_embd] output rows of the yes and no labels */
    /* encoder */
    struct bert_model *bert;
    int n_out;               /* floats per input from bert_forward */
};

struct input {
    struct embed_job *job;
    int32_t *ids, *type_ids;
    int n;
    uint64_t engine_id;      /* {job mu} while in the engine */
    bool inflight;           /* {job mu} */
};

struct embed_job {
    struct embed_service *s;
    int model;
    int n;
    struct input *in;        /* [n] */
    float *out;              /* [n][n_out] */
    int n_out;
    embed_done_fn on_done;
    void *user;
    pthread_mutex_t mu;
    /* {mu} */
    int next;                /* next input to hand out (engine window / batcher) */
    int n_inflight, n_finished;
    bool cancelled, stopped; /* stopped: nothing more is handed out */
    bool in_queue;           /* in the batcher's queue: only the batcher may settle the
                                inputs it has not taken (it removes the job then) */
    int err_code;
    char error[256];
    struct embed_job *qnext; /* {service mu} the batcher's queue, then the delivery queue */
};

struct embed_service {
    struct embed_params p;
    struct emodel models[EMBED_MAX_MODELS];
    int n_models;
    bool has_bert, started;
    pthread_t thread, deliver_thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;       /* the batcher waits here */
    pthread_cond_t dcv;      /* the delivery thread waits here */
    /* {mu} */
    bool stop, stop_deliver;
    struct embed_job *qhead, *qtail;
    int queued_inputs;
    struct embed_job *dhead, *dtail; /* finished jobs waiting for their on_done */
    struct { void *ptr; void (*free_fn)(void *); } kept[EMBED_MAX_MODELS]; /* embed_service_keep */
    int n_kept;
};

struct embed_params embed_default_params(void)
{
    return (struct embed_params){ .window = 32, .max_batch_inputs = 32,
                                  .max_batch_tokens = 8192, .max_queue_inputs = 16384 };
}

struct embed_service *embed_service_new(const struct embed_params *p, char *err, size_t errlen)
{
    struct embed_params ep = p ? *p : embed_default_params();
    if (ep.window < 1 || ep.max_batch_inputs < 1 || ep.max_batch_tokens < 1 ||
        ep.max_queue_inputs < 1) {
        omni_fail(err, errlen, OMNI_ERR_ARG, "embed: window, batch and queue sizes must be >= 1");
        return NULL;
    }
    struct embed_service *s = calloc(1, sizeof *s);
    if (!s) {
        omni_fail(err, errlen, OMNI_ERR_NOMEM, "embed: out of memory");
        return NULL;
    }
    s->p = ep;
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    pthread_cond_init(&s->dcv, NULL);
    return s;
}

// ---- models --------------------------------------------------------------------

static struct emodel *model_slot(struct embed_service *s, const char *name, char *err,
                                 size_t errlen)
{
    if (s->started) {
        omni_fail(err, errlen, OMNI_ERR_ARG, "embed: add models before embed_service_start");
        return NULL;
    }
    if (s->n_models == EMBED_MAX_MODELS) {
        omni_fail(err, errlen, OMNI_ERR_LIMIT, "embed: at most %d embedding models",
                  EMBED_MAX_MODELS);
        return NULL;
    }
    if (!name || !*name || strlen(name) >= sizeof s->models[0].name) {
        omni_fail(err, errlen, OMNI_ERR_ARG, "embed: model name empty or too long");
        return NULL;
    }
    for (int i = 0; i < s->n_models; i++)
        if (!strcmp(s->models[i].name, name)) {
            omni_fail(err, errlen, OMNI_ERR_ARG, "embed: model name '%s' taken twice (use "
                      "distinct file names)", name);
            return NULL;
        }
    struct emodel *m = &s->models[s->n_models];
    memset(m, 0, sizeof *m);
    snprintf(m->name, sizeof m->name, "%s", name);
    m->info.name = m->name;
    m->info.arch = m->arch;
    m->eos_append = -1;
    return m;
}

/* <arch>.pooling_type of a GGUF: an embed_pooling, or -1 when absent. */
static int file_pooling(const struct gguf *g, const char *arch)
{
    char key[96];
    uint32_t v;
    snprintf(key, sizeof key, "%s.pooling_type", arch);
    return gguf_get_u32(g, key, &v) == 0 && v <= EMBED_POOL_RANK ? (int)v : -1;
}

/* The output-matrix rows of a decoder reranker's labels: cls.output.weight
 * ([n_embd, 2], llama.cpp's converter keeps the yes/no rows there) when the
 * file has it, else the rows of the labels' token ids in output.weight (or
 * the tied token_embd.weight). */
static int rerank_rows(struct emodel *m, const struct llm_model *lm, char *err, size_t errlen)
{
    const struct gguf *g = llm_model_gguf(lm);
    const int n_embd = m->info.n_embd;
    if (!(m->yes_no = malloc(2 * (size_t)n_embd * sizeof(float))))
        return omni_fail(err, errlen, OMNI_ERR_NOMEM, "embed: out of memory");
    const struct gguf_tensor *cls = gguf_find_tensor(g, "cls.output.weight");
    if (cls && cls->n_dims == 2 && cls->ne[0] == n_embd && cls->ne[1] == 2) {
        struct omni_tensor t = { .type = cls->type, .ne = { cls->ne[0], 2 }, .data = cls->data };
        omni_tensor_get_row(&t, 0, m->yes_no);
        omni_tensor_get_row(&t, 1, m->yes_no + n_embd);
        return 0;
    }
    const char *labels[2] = { "yes", "no" };
    char key[96];
    snprintf(key, sizeof key, "%s.classifier.output_labels", m->arch);
    size_t len[2] = { 3, 2 };
    for (int i = 0; i < 2; i++) {
        const char *l = gguf_get_arr_str(g, key, (uint64_t)i, &len[i]);
        if (l)
            labels[i] = l;
        else
            len[i] = strlen(labels[i]);
    }
    const struct gguf_tensor *w = gguf_find_tensor(g, "output.weight");
    if (!w)
        w = gguf_find_tensor(g, "token_embd.weight");
    if (!w || w->n_dims != 2 || w->ne[0] != n_embd)
        return omni_fail(err, errlen, OMNI_ERR_FORMAT, "embed: model '%s': no output matrix "
                         "to score the rerank labels with", m->name);
    struct omni_tensor t = { .type = w->type, .ne = { w->ne[0], w->ne[1] }, .data = w->data };
    for (int i = 0; i < 2; i++) {
        const int32_t id = tokenizer_find(m->tok, labels[i], len[i]);
        if (id < 0 || id >= w->ne[1])
            return omni_fail(err, errlen, OMNI_ERR_FORMAT, "embed: model '%s': the rerank "
                             "label '%.*s' is not one token of its vocabulary", m->name,
                             (int)(len[i] < 32 ? len[i] : 32), labels[i]);
        omni_tensor_get_row(&t, id, m->yes_no + (size_t)i * n_embd);
    }
    return 0;
}

int embed_service_add_engine(struct embed_service *s, struct engine *e, int model_index,
                             const char *name, enum embed_role role, int pooling, int normalize,
                             char *err, size_t errlen)
{
    struct llm_model *lm = engine_model(e, model_index);
    if (!lm)
        return omni_fail(err, errlen, OMNI_ERR_ARG, "embed: engine model %d unknown",
                         model_index);
    struct emodel *m = model_slot(s, name, err, errlen);
    if (!m)
        return OMNI_ERR_ARG;
    const struct llm_hparams *hp = llm_model_hparams(lm);
    const struct gguf *g = llm_model_gguf(lm);
    snprintf(m->arch, sizeof m->arch, "%s", hp->arch_name);
    m->engine = e;
    m->engine_model = model_index;
    m->tok = llm_model_tokenizer(lm);
    m->n_vocab = hp->n_vocab;
    const int fp = file_pooling(g, hp->arch_name);
    if (fp == EMBED_POOL_RANK)
        role = EMBED_ROLE_RERANK;
    m->info.role = role;
    m->info.decoder = true;
    m->info.n_embd = hp->n_embd;
    m->info.n_ctx = hp->n_ctx_train;
    /* a reranker reads the last position; an embedder pools as the file
     * says (a decoder's default: the last token, Qwen3-Embedding's way) */
    m->info.pooling = role == EMBED_ROLE_RERANK ? EMBED_POOL_LAST
                      : pooling >= 0 ? (enum embed_pooling)pooling
                      : fp == EMBED_POOL_MEAN || fp == EMBED_POOL_CLS || fp == EMBED_POOL_LAST
                          ? (enum embed_pooling)fp : EMBED_POOL_LAST;
    if (m->info.pooling != EMBED_POOL_LAST && m->info.pooling != EMBED_POOL_MEAN &&
        m->info.pooling != EMBED_POOL_CLS)
        return omni_fail(err, errlen, OMNI_ERR_ARG, "embed: model '%s': a decoder pools by "
                         "last, mean or cls", name);
    m->info.normalize = role == EMBED_ROLE_EMBED && normalize != 0;
    /* Qwen3-Embedding and gte-Qwen2 end every input with <|endoftext|>
     * (their tokenizer's post-processor): appended when the file does not
     * say itself whether to add an EOS. */
    bool add_eos;
    if (role == EMBED_ROLE_EMBED &&
        gguf_get_bool(g, "tokenizer.ggml.add_eos_token", &add_eos) == OMNI_ERR_NOTFOUND &&
        (hp->arch == LLM_ARCH_QWEN2 || hp->arch == LLM_ARCH_QWEN3)) {
        m->eos_append = tokenizer_find(m->tok, "<|endoftext|>", 13);
        if (m->eos_append < 0)
            m->eos_append = tokenizer_eos(m->tok);
    }
    if (role == EMBED_ROLE_RERANK) {
        size_t tl = 0;
        const char *t = gguf_get_str(g, "tokenizer.chat_template.rerank", &tl);
        m->rerank_tmpl = t ? strndup(t, tl) : strdup(qwen3_rerank_template);
        if (!m->rerank_tmpl)
            return omni_fail(err, errlen, OMNI_ERR_NOMEM, "embed: out of memory");
        int rc = rerank_rows(m, lm, err, errlen);
        if (rc < 0) {
            free(m->rerank_tmpl);
            free(m->yes_no);
            return rc;
        }
    }
    return s->n_models++;
}

int embed_service_load_bert(struct embed_service *s, const char *path, struct compute *compute,
                            const char *name, int pooling, int normalize, char *err,
                            size_t errlen)
{
    struct emodel *m = model_slot(s, name, err, errlen);
    if (!m)
        return OMNI_ERR_ARG;
    struct bert_model *bm = bert_model_load(path, compute, err, errlen);
    if (!bm)
        return OMNI_ERR_FORMAT;
    const struct bert_info *bi = bert_model_info(bm);
    snprintf(m->arch, sizeof m->arch, "%s", bi->arch);
    m->bert = bm;
    m->n_vocab = tokenizer_n_vocab(bert_model_tokenizer(bm));
    m->info.role = bi->pooling == EMBED_POOL_RANK ? EMBED_ROLE_RERANK : EMBED_ROLE_EMBED;
    m->info.pooling = m->info.role == EMBED_ROLE_RERANK ? EMBED_POOL_RANK
                      : pooling > EMBED_POOL_NONE && pooling < EMBED_POOL_RANK
                          ? (enum embed_pooling)pooling : bi->pooling;
    m->info.normalize = m->info.role == EMBED_ROLE_EMBED && normalize != 0;
    m->info.n_embd = bi->n_embd;
    m->info.n_ctx = bi->n_ctx_train;
    m->n_out = m->info.role == EMBED_ROLE_RERANK ? bi->n_out : bi->n_embd;
    if (m->n_out < 1) {
        bert_model_free(bm);
        m->bert = NULL;
        return omni_fail(err, errlen, OMNI_ERR_FORMAT, "embed: model '%s' has no outputs", name);
    }
    s->has_bert = true;
    return s->n_models++;
}

void embed_service_keep(struct embed_service *s, void *ptr, void (*free_fn)(void *))
{
    if (s->n_kept < EMBED_MAX_MODELS) {
        s->kept[s->n_kept].ptr = ptr;
        s->kept[s->n_kept++].free_fn = free_fn;
    }
}

int embed_service_n_models(const struct embed_service *s) { return s ? s->n_models : 0; }

const struct embed_model_info *embed_service_model(const struct embed_service *s, int i)
{
    return s && i >= 0 && i < s->n_models ? &s->models[i].info : NULL;
}

int embed_service_find(const struct embed_service *s, const char *name, enum embed_role role)
{
    for (int i = 0; s && i < s->n_models; i++)
        if (s->models[i].info.role == role && (!name || !strcmp(name, s->models[i].name)))
            return i;
    return -1;
}

// ---- jobs ------------------------------------------------------------------------

struct embed_job *embed_job_new(struct embed_service *s, int model, int n_inputs)
{
    if (!s || model < 0 || model >= s->n_models || n_inputs < 1 || n_inputs > 65536)
        return NULL;
    struct embed_job *j = calloc(1, sizeof *j);
    if (!j)
        return NULL;
    const struct emodel *m = &s->models[model];
    j->s = s;
    j->model = model;
    j->n = n_inputs;
    j->n_out = m->info.role == EMBED_ROLE_RERANK ? 1 : m->bert ? m->n_out : m->info.n_embd;
    j->in = calloc((size_t)n_inputs, sizeof *j->in);
    j->out = calloc((size_t)n_inputs * (size_t)j->n_out, sizeof(float));
    if (!j->in || !j->out) {
        free(j->in);
        free(j->out);
        free(j);
        return NULL;
    }
    for (int i = 0; i < n_inputs; i++)
        j->in[i].job = j;
    pthread_mutex_init(&j->mu, NULL);
    return j;
}

void embed_job_free(struct embed_job *j)
{
    if (!j)
        return;
    for (int i = 0; i < j->n; i++) {
        free(j->in[i].ids);
        free(j->in[i].type_ids);
    }
    free(j->in);
    free(j->out);
    pthread_mutex_destroy(&j->mu);
    free(j);
}

/* Replace {query} and {document} in tmpl; malloc'd, NULL when out of memory. */
static char *fill_template(const char *tmpl, const char *query, const char *doc)
{
    size_t cap = strlen(tmpl) + 1, ql = strlen(query), dl = strlen(doc);
    for (const char *p = tmpl; (p = strchr(p, '{')); p++)
        cap += ql + dl; /* generous: every '{' might take the longer text */
    char *out = malloc(cap), *o = out;
    if (!out)
        return NULL;
    for (const char *p = tmpl; *p;) {
        if (!strncmp(p, "{query}", 7)) {
            memcpy(o, query, ql), o += ql, p += 7;
        } else if (!strncmp(p, "{document}", 10)) {
            memcpy(o, doc, dl), o += dl, p += 10;
        } else {
            *o++ = *p++;
        }
    }
    *o = 0;
    return out;
}

static int set_ids(struct embed_job *j, int i, int32_t *ids, int n, char *err, size_t errlen)
{
    const struct emodel *m = &j->s->models[j->model];
    if (n < 1) {
        free(ids);
        return omni_fail(err, errlen, OMNI_ERR_ARG, "input %d is empty", i);
    }
    if (n > m->info.n_ctx) {
        free(ids);
        return omni_fail(err, errlen, OMNI_ERR_LIMIT, "input %d has %d tokens; model '%s' "
                         "takes at most %d", i, n, m->name, m->info.n_ctx);
    }
    free(j->in[i].ids);
    free(j->in[i].type_ids);
    j->in[i].ids = ids;
    j->in[i].type_ids = NULL;
    j->in[i].n = n;
    return 0;
}

int embed_job_set_text(struct embed_job *j, int i, const char *text, const char *pair,
                       char *err, size_t errlen)
{
    if (i < 0 || i >= j->n || !text)
        return omni_fail(err, errlen, OMNI_ERR_ARG, "input %d out of range", i);
    const struct emodel *m = &j->s->models[j->model];
    const bool rerank = m->info.role == EMBED_ROLE_RERANK;
    if (!*text && !rerank)
        return omni_fail(err, errlen, OMNI_ERR_ARG, "input %d is an empty string", i);
    if (rerank && !pair)
        return omni_fail(err, errlen, OMNI_ERR_ARG, "input %d: a reranker scores a pair", i);
    if (m->bert) {
        struct bert_input bi = { 0 };
        char e[384] = "";
        int rc = bert_tokenize(m->bert, text, rerank ? pair : NULL, &bi, e, sizeof e);
        if (rc < 0)
            return omni_fail(err, errlen, rc, "input %d: %s", i, e);
        rc = set_ids(j, i, bi.ids, bi.n, err, errlen);
        if (rc == 0)
            j->in[i].type_ids = bi.type_ids;
        else
            free(bi.type_ids);
        return rc;
    }
    char *prompt = rerank ? fill_template(m->rerank_tmpl, text, pair) : NULL;
    if (rerank && !prompt)
        return omni_fail(err, errlen, OMNI_ERR_NOMEM, "embed: out of memory");
    const char *src = prompt ? prompt : text;
    const size_t len = strlen(src);
    /* a rerank prompt's turn markers are special tokens; a user's text is text */
    const int flags = TOK_ADD_SPECIAL | (rerank ? TOK_PARSE_SPECIAL : 0);
    int cap = (int)(len < (size_t)m->info.n_ctx ? len : (size_t)m->info.n_ctx) + 8, needed = 0;
    int32_t *ids = malloc((size_t)cap * sizeof *ids);
    int n = ids ? tokenizer_encode(m->tok, src, len, flags, ids, cap - 1, &needed) : OMNI_ERR_NOMEM;
    free(prompt);
    if (n == OMNI_ERR_LIMIT) {
        free(ids);
        return omni_fail(err, errlen, OMNI_ERR_LIMIT, "input %d has %d tokens; model '%s' "
                         "takes at most %d", i, needed + (m->eos_append >= 0), m->name,
                         m->info.n_ctx);
    }
    if (n < 0) {
        free(ids);
        return omni_fail(err, errlen, n == OMNI_ERR_FORMAT ? OMNI_ERR_ARG : n,
                         "input %d: %s", i, n == OMNI_ERR_FORMAT ? "not valid UTF-8"
                                                                : omni_strerror(n));
    }
    if (m->eos_append >= 0 && (n == 0 || ids[n - 1] != m->eos_append))
        ids[n++] = m->eos_append;
    return set_ids(j, i, ids, n, err, errlen);
}

int embed_job_set_tokens(struct embed_job *j, int i, const int32_t *ids, int n, char *err,
                         size_t errlen)
{
    if (i < 0 || i >= j->n || n < 0 || (n && !ids))
        return omni_fail(err, errlen, OMNI_ERR_ARG, "input %d out of range", i);
    const struct emodel *m = &j->s->models[j->model];
    const int n_vocab = m->n_vocab;
    for (int k = 0; k < n; k++)
        if (ids[k] < 0 || ids[k] >= n_vocab)
            return omni_fail(err, errlen, OMNI_ERR_ARG, "input %d: token %d at %d is outside "
                             "the vocabulary of %d", i, ids[k], k, n_vocab);
    int32_t *copy = n ? malloc((size_t)n * sizeof *copy) : NULL;
    if (n && !copy)
        return omni_fail(err, errlen, OMNI_ERR_NOMEM, "embed: out of memory");
    if (n)
        memcpy(copy, ids, (size_t)n * sizeof *copy);
    int rc = set_ids(j, i, copy, n, err, errlen);
    if (rc == 0 && m->bert && !(j->in[i].type_ids = calloc((size_t)n, sizeof(int32_t))))
        return omni_fail(err, errlen, OMNI_ERR_NOMEM, "embed: out of memory");
    return rc;
}

int embed_job_input_tokens(const struct embed_job *j, int i)
{
    return i >= 0 && i < j->n ? j->in[i].n : 0;
}

const char *embed_job_error(const struct embed_job *j) { return j->error[0] ? j->error : NULL; }
int embed_job_error_code(const struct embed_job *j) { return j->err_code; }
const float *embed_job_output(const struct embed_job *j, int i)
{
    return i >= 0 && i < j->n ? j->out + (size_t)i * j->n_out : NULL;
}
int embed_job_n_out(const struct embed_job *j) { return j->n_out; }
int embed_job_tokens(const struct embed_job *j)
{
    int t = 0;
    for (int i = 0; i < j->n; i++)
        t += j->in[i].n;
    return t;
}

/* {mu} first error wins; nothing more is handed out. */
static void job_error(struct embed_job *j, int code, const char *msg)
{
    if (!j->error[0]) {
        j->err_code = code;
        snprintf(j->error, sizeof j->error, "%s", msg);
    }
    j->stopped = true;
}

/* {mu} inputs never handed out count as finished once the job stops; true
 * when the job is over (call on_done outside the lock). */
static bool job_over(struct embed_job *j)
{
    if (j->stopped && j->next < j->n && !j->in_queue) {
        j->n_finished += j->n - j->next;
        j->next = j->n;
    }
    return j->n_finished == j->n && j->n_inflight == 0;
}

static float sigmoidf(float x) { return 1.0f / (1.0f + expf(-x)); }

/* A finished job goes to the delivery thread: on_done may format a large
 * response, which must hold up neither the engine's steps nor the next
 * encoder batch. */
static void job_deliver(struct embed_job *j)
{
    struct embed_service *s = j->s;
    pthread_mutex_lock(&s->mu);
    j->qnext = NULL;
    if (s->dtail)
        s->dtail->qnext = j;
    else
        s->dhead = j;
    s->dtail = j;
    pthread_cond_signal(&s->dcv);
    pthread_mutex_unlock(&s->mu);
}

static void *deliverer(void *arg)
{
    struct embed_service *s = arg;
    pthread_mutex_lock(&s->mu);
    for (;;) {
        while (!s->dhead && !s->stop_deliver)
            pthread_cond_wait(&s->dcv, &s->mu);
        if (!s->dhead)
            break; /* stopping, nothing left */
        struct embed_job *j = s->dhead;
        s->dhead = j->qnext;
        if (!s->dhead)
            s->dtail = NULL;
        pthread_mutex_unlock(&s->mu);
        j->on_done(j->user, j); /* the job may be freed from here on */
        pthread_mutex_lock(&s->mu);
    }
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

// ---- decoder models: through the engine ---------------------------------------------

static void engine_event(void *user, const struct engine_event *ev);

/* {mu} hand inputs to the engine up to the window. The first call may
 * return OMNI_ERR_LIMIT (busy) before anything runs. */
static int engine_fill(struct embed_job *j, char *err, size_t errlen)
{
    const struct emodel *m = &j->s->models[j->model];
    while (!j->stopped && j->next < j->n && j->n_inflight < j->s->p.window) {
        struct input *in = &j->in[j->next];
        struct engine_request rq = engine_default_request();
        rq.task = ENGINE_TASK_EMBED;
        rq.model = m->engine_model;
        rq.prompt = in->ids;
        rq.n_prompt = in->n;
        rq.pooling = m->info.pooling;
        rq.normalize = m->info.normalize;
        /* one input: someone waits for it (a query); many: a batch */
        rq.priority = j->n == 1 ? ENGINE_PRIORITY_INTERACTIVE : ENGINE_PRIORITY_BATCH;
        rq.on_event = engine_event;
        rq.user = in;
        char e[256];
        int rc = engine_submit(m->engine, &rq, &in->engine_id, e, sizeof e);
        if (rc < 0) {
            if (err)
                snprintf(err, errlen, "%s", e);
            if (j->n_inflight == 0 && j->n_finished == 0)
                return rc; /* nothing ran: the caller answers (429 / 400) */
            job_error(j, rc, e);
            return 0;
        }
        in->inflight = true;
        j->next++;
        j->n_inflight++;
    }
    return 0;
}

/* Engine thread: the final event of one input. */
static void engine_event(void *user, const struct engine_event *ev)
{
    if (ev->type == ENGINE_EV_TOKEN)
        return;
    struct input *in = user;
    struct embed_job *j = in->job;
    const struct emodel *m = &j->s->models[j->model];
    pthread_mutex_lock(&j->mu);
    in->inflight = false;
    j->n_inflight--;
    j->n_finished++;
    if (ev->type == ENGINE_EV_ERROR) {
        job_error(j, OMNI_ERR_ARG, ev->error ? ev->error : "engine error");
    } else if (!ev->embd || ev->n_embd != m->info.n_embd) {
        job_error(j, EMBED_ERR_CANCELLED, ev->finish == ENGINE_FINISH_CANCELLED
                                             ? "cancelled" : "the engine ended the input early");
    } else {
        float *out = j->out + (size_t)(in - j->in) * j->n_out;
        if (m->info.role == EMBED_ROLE_RERANK) {
            /* softmax over (yes, no) = sigmoid(yes - no) */
            double yes = 0, no = 0;
            for (int i = 0; i < ev->n_embd; i++) {
                yes += (double)ev->embd[i] * m->yes_no[i];
                no += (double)ev->embd[i] * m->yes_no[ev->n_embd + i];
            }
            out[0] = sigmoidf((float)(yes - no));
        } else {
            memcpy(out, ev->embd, (size_t)ev->n_embd * sizeof(float));
        }
    }
    engine_fill(j, NULL, 0);
    const bool over = job_over(j);
    pthread_mutex_unlock(&j->mu);
    if (over)
        job_deliver(j); /* the job may be freed from here on */
}

// ---- encoder models: the batcher -------------------------------------------------------

/* Batcher thread: the next batch of one model's waiting inputs, up to the
 * input and token limits. Jobs whose inputs are all handed out leave the
 * queue; those stopped with nothing in flight are over and go to *ended
 * (linked by qnext) for their on_done. {s->mu} */
static int gather(struct embed_service *s, struct input **batch, int *model,
                  struct embed_job **ended)
{
    int n = 0, tokens = 0;
    *model = -1;
    for (struct embed_job **pp = &s->qhead, *j; (j = *pp);) {
        pthread_mutex_lock(&j->mu);
        if (*model < 0)
            *model = j->model;
        bool out = false;
        if (j->model == *model) {
            while (!j->stopped && j->next < j->n && n < s->p.max_batch_inputs &&
                   (n == 0 || tokens + j->in[j->next].n <= s->p.max_batch_tokens)) {
                struct input *in = &j->in[j->next++];
                in->inflight = true;
                j->n_inflight++;
                tokens += in->n;
                batch[n++] = in;
                s->queued_inputs--;
            }
        }
        bool over = false;
        if (j->stopped || j->next == j->n) {
            s->queued_inputs -= j->n - j->next;
            out = true;
            j->in_queue = false;
            over = j->stopped && job_over(j);
        }
        pthread_mutex_unlock(&j->mu);
        if (out) {
            *pp = j->qnext;
            if (s->qtail == j) {
                s->qtail = NULL;
                for (struct embed_job *t = s->qhead; t; t = t->qnext)
                    s->qtail = t;
            }
            j->qnext = over ? *ended : NULL;
            if (over)
                *ended = j;
        } else {
            pp = &j->qnext;
        }
        if (n == s->p.max_batch_inputs)
            break;
    }
    return n;
}

/* Jobs are told after the whole batch is written (a job may appear several
 * times in a batch). */
static void finish_batch(struct input **batch, int n, int rc, const char *msg)
{
    for (int k = 0; k < n; k++) {
        struct embed_job *j = batch[k]->job;
        pthread_mutex_lock(&j->mu);
        batch[k]->inflight = false;
        j->n_inflight--;
        j->n_finished++;
        if (rc < 0)
            job_error(j, rc, msg);
        /* over at the job's last input in the batch: no later entry is its */
        const bool over = job_over(j);
        pthread_mutex_unlock(&j->mu);
        if (over)
            job_deliver(j);
    }
}

static void *batcher(void *arg)
{
    struct embed_service *s = arg;
    struct input **batch = malloc((size_t)s->p.max_batch_inputs * sizeof *batch);
    struct bert_input *bi = malloc((size_t)s->p.max_batch_inputs * sizeof *bi);
    float *out = NULL;
    size_t out_cap = 0;
    for (;;) {
        pthread_mutex_lock(&s->mu);
        while (!s->stop && !s->qhead)
            pthread_cond_wait(&s->cv, &s->mu);
        if (s->stop) {
            pthread_mutex_unlock(&s->mu);
            break;
        }
        int model = -1;
        struct embed_job *ended = NULL;
        const int n = batch && bi ? gather(s, batch, &model, &ended) : 0;
        pthread_mutex_unlock(&s->mu);
        while (ended) { /* cancelled while queued: no compute */
            struct embed_job *j = ended;
            ended = j->qnext;
            job_deliver(j);
        }
        if (!n)
            continue;
        struct emodel *m = &s->models[model];
        const size_t need = (size_t)n * (size_t)m->n_out;
        char err[256] = "";
        int rc = 0;
        if (need > out_cap) {
            float *o = realloc(out, need * sizeof *o);
            if (o) {
                out = o;
                out_cap = need;
            } else {
                rc = omni_fail(err, sizeof err, OMNI_ERR_NOMEM, "embed: out of memory");
            }
        }
        for (int k = 0; k < n; k++)
            bi[k] = (struct bert_input){ batch[k]->ids, batch[k]->type_ids, batch[k]->n };
        if (rc == 0)
            rc = bert_forward(m->bert, bi, n, m->info.pooling, m->info.normalize, out, err,
                              sizeof err);
        for (int k = 0; rc == 0 && k < n; k++) {
            struct embed_job *j = batch[k]->job;
            float *dst = j->out + (size_t)(batch[k] - j->in) * j->n_out;
            const float *src = out + (size_t)k * m->n_out;
            if (m->info.role == EMBED_ROLE_RERANK)
                dst[0] = sigmoidf(src[0]);
            else
                memcpy(dst, src, (size_t)m->n_out * sizeof(float));
        }
        if (!batch || !bi)
            rc = omni_fail(err, sizeof err, OMNI_ERR_NOMEM, "embed: out of memory");
        finish_batch(batch, n, rc, err);
    }
    free(out);
    free(batch);
    free(bi);
    return NULL;
}

int embed_service_start(struct embed_service *s, char *err, size_t errlen)
{
    if (s->started)
        return omni_fail(err, errlen, OMNI_ERR_ARG, "embed: already started");
    if (pthread_create(&s->deliver_thread, NULL, deliverer, s) != 0)
        return omni_fail(err, errlen, OMNI_ERR_NOMEM, "embed: cannot start the delivery thread");
    if (s->has_bert && pthread_create(&s->thread, NULL, batcher, s) != 0) {
        pthread_mutex_lock(&s->mu);
        s->stop_deliver = true;
        pthread_cond_signal(&s->dcv);
        pthread_mutex_unlock(&s->mu);
        pthread_join(s->deliver_thread, NULL);
        return omni_fail(err, errlen, OMNI_ERR_NOMEM, "embed: cannot start the batcher thread");
    }
    s->started = true;
    return 0;
}

int embed_job_submit(struct embed_job *j, embed_done_fn on_done, void *user, char *err,
                     size_t errlen)
{
    struct embed_service *s = j->s;
    const struct emodel *m = &s->models[j->model];
    for (int i = 0; i < j->n; i++)
        if (!j->in[i].ids)
            return omni_fail(err, errlen, OMNI_ERR_ARG, "embed: input %d not set", i);
    j->on_done = on_done;
    j->user = user;
    if (!s->started)
        return omni_fail(err, errlen, OMNI_ERR_ARG, "embed: service not started");
    pthread_mutex_lock(&j->mu);
    const bool cancelled = j->stopped; /* the client left before this ran */
    pthread_mutex_unlock(&j->mu);
    if (cancelled) {
        pthread_mutex_lock(&j->mu);
        job_over(j);
        pthread_mutex_unlock(&j->mu);
        job_deliver(j);
        return 0;
    }
    if (m->engine) {
        pthread_mutex_lock(&j->mu);
        int rc = engine_fill(j, err, errlen);
        pthread_mutex_unlock(&j->mu);
        return rc == OMNI_ERR_LIMIT || rc == 0 ? rc : omni_fail(err, errlen, rc, "%s", err);
    }
    pthread_mutex_lock(&s->mu);
    if (s->stop || s->queued_inputs + j->n > s->p.max_queue_inputs) {
        const int q = s->queued_inputs;
        pthread_mutex_unlock(&s->mu);
        return omni_fail(err, errlen, OMNI_ERR_LIMIT, "embed: server busy: %d inputs waiting "
                         "(max %d); retry later", q, s->p.max_queue_inputs);
    }
    s->queued_inputs += j->n;
    pthread_mutex_lock(&j->mu);
    j->in_queue = true;
    pthread_mutex_unlock(&j->mu);
    if (s->qtail)
        s->qtail->qnext = j;
    else
        s->qhead = j;
    s->qtail = j;
    pthread_cond_signal(&s->cv);
    pthread_mutex_unlock(&s->mu);
    return 0;
}

void embed_job_cancel(struct embed_job *j)
{
    if (!j)
        return;
    const struct emodel *m = &j->s->models[j->model];
    enum { MAX_IDS = 64 };
    uint64_t ids[MAX_IDS];
    int n_ids = 0;
    pthread_mutex_lock(&j->mu);
    j->cancelled = true;
    job_error(j, EMBED_ERR_CANCELLED, "cancelled");
    for (int i = 0; m->engine && i < j->n && n_ids < MAX_IDS; i++)
        if (j->in[i].inflight)
            ids[n_ids++] = j->in[i].engine_id;
    /* engine_cancel under the job's lock: an id cannot finish and be reused
     * meanwhile (the final event waits for the lock) */
    for (int i = 0; i < n_ids; i++)
        engine_cancel(m->engine, ids[i]);
    pthread_mutex_unlock(&j->mu);
}

void embed_service_free(struct embed_service *s)
{
    if (!s)
        return;
    if (s->started && s->has_bert) {
        pthread_mutex_lock(&s->mu);
        s->stop = true;
        pthread_cond_signal(&s->cv);
        pthread_mutex_unlock(&s->mu);
        pthread_join(s->thread, NULL);
    }
    /* jobs still queued end with an error */
    while (s->qhead) {
        struct embed_job *j = s->qhead;
        s->qhead = j->qnext;
        pthread_mutex_lock(&j->mu);
        j->in_queue = false;
        job_error(j, EMBED_ERR_CANCELLED, "the server is shutting down");
        const bool over = job_over(j);
        pthread_mutex_unlock(&j->mu);
        if (over)
            job_deliver(j);
    }
    /* the delivery thread answers what is left, then ends */
    if (s->started) {
        pthread_mutex_lock(&s->mu);
        s->stop_deliver = true;
        pthread_cond_signal(&s->dcv);
        pthread_mutex_unlock(&s->mu);
        pthread_join(s->deliver_thread, NULL);
    }
    for (int i = 0; i < s->n_models; i++) {
        free(s->models[i].rerank_tmpl);
        free(s->models[i].yes_no);
        bert_model_free(s->models[i].bert);
    }
    for (int i = 0; i < s->n_kept; i++)
        s->kept[i].free_fn(s->kept[i].ptr);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv);
    pthread_cond_destroy(&s->dcv);
    free(s);
}
