/* embeddings.c - /v1/embeddings, /api/embed, /api/embeddings, /embedding and
 * /v1/rerank (+ /rerank): JSON in, one embed job per request, JSON out.
 * Parsing and tokenizing run on the route's ws worker; the answer is
 * formatted by the job's on_done on the embed service's delivery thread
 * (never the engine thread nor the lws service thread). Vectors are written
 * with 9 significant digits (float32 round-trips) by hand: cJSON's doubles
 * would double the text and the time of a 2048-input answer. */
#include "src/api/embeddings.h"

#include "src/api/api.h"
#include "src/api/rt_common.h"
#include "src/core/omni.h"
#include "src/embed/embed.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define EMB_MAX_INPUTS 2048     /* OpenAI's limit of inputs per request */
#define RERANK_MAX_DOCS 4096    /* documents per rerank request */

enum emb_shape { SHAPE_OPENAI, SHAPE_OLLAMA, SHAPE_OLLAMA_LEGACY, SHAPE_LLAMACPP, SHAPE_RERANK };

/* One request from its route to its answer. Owned by its ws_out: freed
 * (with the job) when both the connection and on_done let go. */
struct emb_call {
    struct ws_out *out;
    struct embed_job *job;
    enum emb_shape shape;
    char model[128];
    int n;                     /* inputs */
    int dimensions;            /* 0: all of them */
    bool base64, renormalize;
    int top_n;                 /* rerank */
    bool return_documents;
    char **docs;               /* [n] rerank: the documents' text (copied) */
    double t0;
};

static void call_free(void *user)
{
    struct emb_call *c = user;
    embed_job_free(c->job);
    for (int i = 0; c->docs && i < c->n; i++)
        free(c->docs[i]);
    free(c->docs);
    free(c);
}

static void call_abort(void *user)
{
    struct emb_call *c = user;
    embed_job_cancel(c->job);
}

// ---- models ---------------------------------------------------------------------

void embeddings_list_models(struct api *a, cJSON *data, const char *skip)
{
    struct embed_service *s = api_embed(a);
    for (int i = 0; i < embed_service_n_models(s); i++) {
        const struct embed_model_info *mi = embed_service_model(s, i);
        if (skip && !strcmp(skip, mi->name))
            continue;
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "id", mi->name);
        cJSON_AddStringToObject(o, "object", "model");
        cJSON_AddNumberToObject(o, "created", (double)api_started_at(a));
        cJSON_AddStringToObject(o, "owned_by", "omniserve");
        cJSON_AddNumberToObject(o, "max_model_len", mi->n_ctx);
        cJSON_AddStringToObject(o, "type", mi->role == EMBED_ROLE_RERANK ? "rerank" : "embedding");
        if (mi->role == EMBED_ROLE_EMBED)
            cJSON_AddNumberToObject(o, "dimensions", mi->n_embd);
        cJSON_AddItemToArray(data, o);
    }
}

int embeddings_has_model(struct api *a, const char *name)
{
    struct embed_service *s = api_embed(a);
    return embed_service_find(s, name, EMBED_ROLE_EMBED) >= 0 ||
           embed_service_find(s, name, EMBED_ROLE_RERANK) >= 0;
}

/* The model a request names (absent: the first of the role; unknown: the
 * first of the role unless --strict-model-id). -1 after answering. */
static int pick_model(struct api *a, struct ws_req *r, const char *name, enum embed_role role,
                      struct api_error *e)
{
    struct embed_service *s = api_embed(a);
    const char *what = role == EMBED_ROLE_RERANK ? "rerank" : "embedding";
    if (!s) {
        if (api_loading(a)) {
            ws_req_add_header(r, "retry-after", "5");
            return api_error_set(e, 503, NULL, "the models are still loading; retry in a moment");
        }
        return api_error_set(e, 404, "model", "this server has no %s model: start it with "
                             "--%s-model FILE.gguf%s", what, what,
                             role == EMBED_ROLE_EMBED ? " (or --embeddings to embed with the "
                                                        "chat model)" : "");
    }
    int i = name ? embed_service_find(s, name, role) : -1;
    if (i >= 0)
        return i;
    i = embed_service_find(s, NULL, role);
    if (i < 0 || (name && api_check_model(a, name, e) < 0)) {
        if (i >= 0)
            return -1; /* strict: e says 404 */
        api_error_set(e, 404, "model", "this server has no %s model%s%s%s: start it with "
                      "--%s-model FILE.gguf", what, name ? " '" : "", name ? name : "",
                      name ? "'" : "", what);
        e->code = "model_not_found";
        return -1;
    }
    return i;
}

// ---- answers -------------------------------------------------------------------------

struct buf {
    char *p;
    size_t len, cap;
    bool oom;
};

static void put(struct buf *b, const char *s, size_t n)
{
    if (b->oom || omni_reserve(&b->p, &b->cap, b->len + n + 1) < 0) {
        b->oom = true;
        return;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = 0;
}

static void putf(struct buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void putf(struct buf *b, const char *fmt, ...)
{
    char tmp[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n > 0)
        put(b, tmp, (size_t)n < sizeof tmp ? (size_t)n : sizeof tmp - 1);
}

static void put_json_string(struct buf *b, const char *s)
{
    cJSON *n = cJSON_CreateString(s);
    char *t = n ? cJSON_PrintUnformatted(n) : NULL;
    cJSON_Delete(n);
    if (!t) {
        b->oom = true;
        return;
    }
    put(b, t, strlen(t));
    free(t);
}

/* v[0..n) as a JSON array of numbers (9 significant digits: float32 exactly;
 * non-finite values, which a model should never give, as 0). */
static void put_floats(struct buf *b, const float *v, int n)
{
    if (omni_reserve(&b->p, &b->cap, b->len + (size_t)n * 17 + 3) < 0) {
        b->oom = true;
        return;
    }
    b->p[b->len++] = '[';
    for (int i = 0; i < n; i++) {
        const double x = isfinite(v[i]) ? v[i] : 0.0;
        b->len += (size_t)snprintf(b->p + b->len, 17, i ? ",%.9g" : "%.9g", x);
    }
    b->p[b->len++] = ']';
    b->p[b->len] = 0;
}

/* Output i truncated to c->dimensions and made unit length again. */
static const float *vector_of(struct emb_call *c, int i, float *tmp, int *n)
{
    const float *v = embed_job_output(c->job, i);
    const int full = embed_job_n_out(c->job);
    if (!c->dimensions || c->dimensions >= full) {
        *n = full;
        return v;
    }
    *n = c->dimensions;
    double ss = 0;
    for (int k = 0; k < *n; k++)
        ss += (double)v[k] * v[k];
    const double inv = c->renormalize && ss > 0 ? 1.0 / sqrt(ss) : 1.0;
    for (int k = 0; k < *n; k++)
        tmp[k] = (float)(v[k] * inv);
    return tmp;
}

static void answer_embeddings(struct emb_call *c, struct buf *b)
{
    const int tokens = embed_job_tokens(c->job);
    float *tmp = malloc((size_t)embed_job_n_out(c->job) * sizeof *tmp);
    if (!tmp) {
        b->oom = true;
        return;
    }
    switch (c->shape) {
    case SHAPE_OPENAI:
        put(b, "{\"object\":\"list\",\"data\":[", 25);
        for (int i = 0; i < c->n && !b->oom; i++) {
            int n;
            const float *v = vector_of(c, i, tmp, &n);
            putf(b, "%s{\"object\":\"embedding\",\"index\":%d,\"embedding\":", i ? "," : "", i);
            if (c->base64) {
                /* little-endian float32, as OpenAI's base64 encoding (x86 is LE) */
                char *s = rt_base64_encode(v, (size_t)n * sizeof(float));
                if (!s)
                    b->oom = true;
                else
                    put(b, "\"", 1), put(b, s, strlen(s)), put(b, "\"", 1);
                free(s);
            } else {
                put_floats(b, v, n);
            }
            put(b, "}", 1);
        }
        put(b, "],\"model\":", 10);
        put_json_string(b, c->model);
        putf(b, ",\"usage\":{\"prompt_tokens\":%d,\"total_tokens\":%d}}", tokens, tokens);
        break;
    case SHAPE_OLLAMA:
    case SHAPE_OLLAMA_LEGACY:
        put(b, "{\"model\":", 9);
        put_json_string(b, c->model);
        put(b, c->shape == SHAPE_OLLAMA ? ",\"embeddings\":[" : ",\"embedding\":", c->shape == SHAPE_OLLAMA ? 15 : 13);
        for (int i = 0; i < c->n && !b->oom; i++) {
            int n;
            const float *v = vector_of(c, i, tmp, &n);
            if (i)
                put(b, ",", 1);
            put_floats(b, v, n);
        }
        if (c->shape == SHAPE_OLLAMA)
            putf(b, "],\"total_duration\":%lld,\"load_duration\":0,\"prompt_eval_count\":%d}",
                 (long long)((omni_time_s() - c->t0) * 1e9), tokens);
        else
            put(b, "}", 1);
        break;
    case SHAPE_LLAMACPP:
        put(b, "[", 1);
        for (int i = 0; i < c->n && !b->oom; i++) {
            int n;
            const float *v = vector_of(c, i, tmp, &n);
            putf(b, "%s{\"index\":%d,\"embedding\":[", i ? "," : "", i);
            put_floats(b, v, n);
            put(b, "]}", 2);
        }
        put(b, "]", 1);
        break;
    case SHAPE_RERANK:
        break;
    }
    free(tmp);
}

struct ranked {
    int index;
    float score;
};

static int cmp_ranked(const void *x, const void *y)
{
    const struct ranked *a = x, *b = y;
    if (a->score != b->score)
        return a->score < b->score ? 1 : -1;
    return a->index - b->index; /* ties: the documents' order */
}

static void answer_rerank(struct emb_call *c, struct buf *b)
{
    struct ranked *rk = malloc((size_t)c->n * sizeof *rk);
    if (!rk) {
        b->oom = true;
        return;
    }
    for (int i = 0; i < c->n; i++)
        rk[i] = (struct ranked){ i, embed_job_output(c->job, i)[0] };
    qsort(rk, (size_t)c->n, sizeof *rk, cmp_ranked);
    const int tokens = embed_job_tokens(c->job);
    put(b, "{\"object\":\"list\",\"model\":", 25);
    put_json_string(b, c->model);
    put(b, ",\"results\":[", 12);
    const int top = c->top_n > 0 && c->top_n < c->n ? c->top_n : c->n;
    for (int k = 0; k < top && !b->oom; k++) {
        putf(b, "%s{\"index\":%d,\"relevance_score\":%.9g", k ? "," : "", rk[k].index,
             (double)rk[k].score);
        if (c->return_documents) {
            put(b, ",\"document\":{\"text\":", 20);
            put_json_string(b, c->docs[rk[k].index]);
            put(b, "}", 1);
        }
        put(b, "}", 1);
    }
    putf(b, "],\"usage\":{\"prompt_tokens\":%d,\"total_tokens\":%d}}", tokens, tokens);
    free(rk);
}

/* The delivery thread: the job ended; answer and let go. */
static void call_done(void *user, struct embed_job *j)
{
    struct emb_call *c = user;
    struct ws_out *o = c->out;
    const char *why = embed_job_error(j);
    if (why) {
        struct api_error e;
        const int code = embed_job_error_code(j);
        if (code == OMNI_ERR_LIMIT) {
            api_error_set(&e, 429, NULL, "the server is busy: %s", why);
            e.code = "rate_limit_exceeded";
        } else if (code == EMBED_ERR_CANCELLED) {
            api_error_set(&e, 503, NULL, "%s", why);
        } else {
            api_error_set(&e, code == OMNI_ERR_ARG ? 400 : 500, NULL, "%s", why);
        }
        size_t len = 0;
        char *body = api_error_json(API_OPENAI, &e, &len);
        ws_out_start(o, e.status, "application/json", false);
        if (body)
            ws_out_write(o, body, len);
        free(body);
    } else {
        struct buf b = { 0 };
        if (c->shape == SHAPE_RERANK)
            answer_rerank(c, &b);
        else
            answer_embeddings(c, &b);
        if (b.oom) {
            static const char oom[] = "{\"error\":{\"message\":\"out of memory\",\"type\":"
                                      "\"server_error\",\"param\":null,\"code\":null}}";
            ws_out_start(o, 500, "application/json", false);
            ws_out_write(o, oom, sizeof oom - 1);
        } else {
            ws_out_start(o, 200, "application/json", false);
            ws_out_write(o, b.p, b.len);
        }
        free(b.p);
        ws_out_set_tokens(o, embed_job_tokens(j), 0);
    }
    ws_out_end(o);
    ws_out_release(o); /* may free c and the job */
}

/* Defer the response and submit the job; the call belongs to the response
 * from here on (also when this answers an error itself). */
static void submit(struct api *a, struct ws_req *r, struct emb_call *c)
{
    (void)a;
    struct ws_out *o = ws_req_defer(r, call_abort, call_free, c);
    if (!o) {
        call_free(c);
        struct api_error e;
        api_error_set(&e, 500, NULL, "out of memory");
        api_respond_error(r, API_OPENAI, &e);
        return;
    }
    c->out = o;
    char err[512] = "";
    int rc = embed_job_submit(c->job, call_done, c, err, sizeof err);
    if (rc == 0)
        return;
    struct api_error e;
    if (rc == OMNI_ERR_LIMIT) {
        api_error_set(&e, 429, NULL, "the server is busy (%s); retry shortly", err);
        e.code = "rate_limit_exceeded";
        ws_req_add_header(r, "retry-after", "1");
    } else {
        api_error_set(&e, rc == OMNI_ERR_ARG ? 400 : 500, NULL, "%s", err);
    }
    size_t len = 0;
    char *body = api_error_json(API_OPENAI, &e, &len);
    ws_out_start(o, e.status, "application/json", false);
    if (body)
        ws_out_write(o, body, len);
    free(body);
    ws_out_end(o);
    ws_out_release(o);
}

// ---- requests -------------------------------------------------------------------------

/* 400 for input i that could not be set (param "input[i]", or "input"). */
static int input_error(struct api_error *e, const char *field, int i, int n_inputs, int rc,
                       const char *err)
{
    char param[64];
    if (n_inputs > 1 || i > 0)
        snprintf(param, sizeof param, "%s[%d]", field, i);
    else
        snprintf(param, sizeof param, "%s", field);
    api_error_set(e, rc == OMNI_ERR_NOMEM ? 500 : 400, param, "%s", err);
    if (rc == OMNI_ERR_LIMIT)
        e->code = "context_length_exceeded";
    return -1;
}

/* An array of token ids into a malloc'd int array; -1 with a 400. */
static int parse_ids(const cJSON *arr, const char *param, int32_t **out, int *n,
                     struct api_error *e)
{
    const int count = cJSON_GetArraySize(arr);
    if (count < 1)
        return api_error_set(e, 400, param, "'%s' must not be an empty list of tokens", param);
    int32_t *ids = malloc((size_t)count * sizeof *ids);
    if (!ids)
        return api_error_set(e, 500, NULL, "out of memory");
    int k = 0;
    for (const cJSON *t = arr->child; t; t = t->next, k++) {
        if (!cJSON_IsNumber(t) || t->valuedouble != floor(t->valuedouble) ||
            t->valuedouble < 0 || t->valuedouble > INT32_MAX) {
            free(ids);
            return api_error_set(e, 400, param, "'%s' must hold token ids (integers >= 0); "
                                 "item %d is not one", param, k);
        }
        ids[k] = (int32_t)t->valuedouble;
    }
    *out = ids;
    *n = count;
    return 0;
}

/* The inputs of field (string | string[] | int[] | int[][], as OpenAI;
 * Ollama and llama.cpp send the string forms) into a new job. */
static struct embed_job *parse_inputs(struct api *a, const cJSON *in, const char *field, int model,
                                      int *n_inputs, struct api_error *e)
{
    struct embed_service *s = api_embed(a);
    int n;
    bool one_list_of_ids = false;
    if (cJSON_IsString(in)) {
        n = 1;
    } else if (cJSON_IsArray(in)) {
        n = cJSON_GetArraySize(in);
        if (n < 1) {
            api_error_set(e, 400, field, "'%s' must not be an empty list", field);
            return NULL;
        }
        one_list_of_ids = cJSON_IsNumber(in->child);
        if (one_list_of_ids)
            n = 1;
        if (n > EMB_MAX_INPUTS) {
            api_error_set(e, 400, field, "'%s' has %d inputs; at most %d per request", field, n,
                          EMB_MAX_INPUTS);
            return NULL;
        }
    } else {
        api_error_set(e, 400, field, "'%s' must be a string, an array of strings, an array of "
                      "token ids or an array of such arrays", field);
        return NULL;
    }
    struct embed_job *j = embed_job_new(s, model, n);
    if (!j) {
        api_error_set(e, 500, NULL, "out of memory");
        return NULL;
    }
    char err[512];
    char param[64];
    const cJSON *item = cJSON_IsArray(in) && !one_list_of_ids ? in->child : in;
    for (int i = 0; i < n; i++, item = item->next) {
        int rc;
        snprintf(param, sizeof param, cJSON_IsArray(in) && !one_list_of_ids ? "%s[%d]" : "%s",
                 field, i);
        if (cJSON_IsString(item)) {
            if (!item->valuestring[0]) {
                api_error_set(e, 400, param, "'%s' must not be an empty string", param);
                goto fail;
            }
            rc = embed_job_set_text(j, i, item->valuestring, NULL, err, sizeof err);
        } else if (cJSON_IsArray(item) && (one_list_of_ids || !cJSON_IsString(item->child))) {
            int32_t *ids = NULL;
            int k = 0;
            if (parse_ids(item, param, &ids, &k, e) < 0)
                goto fail;
            rc = embed_job_set_tokens(j, i, ids, k, err, sizeof err);
            free(ids);
        } else {
            api_error_set(e, 400, param, "'%s' must be a string or an array of token ids", param);
            goto fail;
        }
        if (rc < 0) {
            api_error_set(e, rc == OMNI_ERR_NOMEM ? 500 : 400, param, "%s", err);
            if (rc == OMNI_ERR_LIMIT)
                e->code = "context_length_exceeded";
            goto fail;
        }
    }
    *n_inputs = n;
    return j;
fail:
    embed_job_free(j);
    return NULL;
}

static void embed_common(struct api *a, struct ws_req *r, enum emb_shape shape)
{
    struct api_error e;
    size_t len;
    const char *body = ws_req_body(r, &len);
    cJSON *root = apireq_parse(body, len, &e);
    struct emb_call *c = NULL;
    const char *model_name = NULL, *fmt = NULL;
    long dims = 0;
    if (!root || apireq_string(root, "model", &model_name, &e) < 0 ||
        apireq_string(root, "encoding_format", &fmt, &e) < 0 ||
        apireq_int(root, "dimensions", 1, 1 << 20, &dims, &e) < 0)
        goto fail;
    if (fmt && strcmp(fmt, "float") && strcmp(fmt, "base64")) {
        api_error_set(&e, 400, "encoding_format", "'encoding_format' must be 'float' or "
                      "'base64', got '%.40s'", fmt);
        goto fail;
    }
    int model = pick_model(a, r, model_name, EMBED_ROLE_EMBED, &e);
    if (model < 0)
        goto fail;
    const struct embed_model_info *mi = embed_service_model(api_embed(a), model);
    if (dims > mi->n_embd) {
        api_error_set(&e, 400, "dimensions", "'dimensions' is %ld; model '%s' has %d", dims,
                      mi->name, mi->n_embd);
        goto fail;
    }
    const char *field = shape == SHAPE_OLLAMA_LEGACY ? "prompt"
                        : shape == SHAPE_LLAMACPP && !cJSON_GetObjectItemCaseSensitive(root, "input")
                            ? "content" : "input";
    const cJSON *in = cJSON_GetObjectItemCaseSensitive(root, field);
    if (!in || cJSON_IsNull(in)) {
        api_error_set(&e, 400, field, "'%s' is required", field);
        goto fail;
    }
    if (shape == SHAPE_OLLAMA_LEGACY && !cJSON_IsString(in)) {
        api_error_set(&e, 400, field, "'prompt' must be a string");
        goto fail;
    }
    if (!(c = calloc(1, sizeof *c))) {
        api_error_set(&e, 500, NULL, "out of memory");
        goto fail;
    }
    c->t0 = omni_time_s();
    c->shape = shape;
    c->base64 = fmt && !strcmp(fmt, "base64");
    c->dimensions = (int)dims;
    c->renormalize = mi->normalize;
    snprintf(c->model, sizeof c->model, "%s", mi->name);
    if (!(c->job = parse_inputs(a, in, field, model, &c->n, &e)))
        goto fail;
    cJSON_Delete(root);
    submit(a, r, c);
    return;
fail:
    if (c)
        call_free(c);
    cJSON_Delete(root);
    api_respond_error(r, API_OPENAI, &e);
}

void embeddings_route(struct api *a, struct ws_req *r, const char *arg)
{
    (void)arg;
    embed_common(a, r, SHAPE_OPENAI);
}

void embeddings_ollama_route(struct api *a, struct ws_req *r, const char *arg)
{
    (void)arg;
    embed_common(a, r, SHAPE_OLLAMA);
}

void embeddings_ollama_legacy_route(struct api *a, struct ws_req *r, const char *arg)
{
    (void)arg;
    embed_common(a, r, SHAPE_OLLAMA_LEGACY);
}

void embeddings_llamacpp_route(struct api *a, struct ws_req *r, const char *arg)
{
    (void)arg;
    embed_common(a, r, SHAPE_LLAMACPP);
}

/* {query, documents: [string | {text}], top_n, return_documents, model} */
void rerank_route(struct api *a, struct ws_req *r, const char *arg)
{
    (void)arg;
    struct api_error e;
    size_t len;
    const char *body = ws_req_body(r, &len);
    cJSON *root = apireq_parse(body, len, &e);
    struct emb_call *c = NULL;
    const char *model_name = NULL, *query = NULL;
    long top_n = 0;
    bool ret_docs = false;
    if (!root || apireq_string(root, "model", &model_name, &e) < 0 ||
        apireq_string(root, "query", &query, &e) < 0 ||
        apireq_int(root, "top_n", 1, 1L << 30, &top_n, &e) < 0 ||
        apireq_bool(root, "return_documents", &ret_docs, &e) < 0)
        goto fail;
    if (!query || !*query) {
        api_error_set(&e, 400, "query", "'query' is required (a non-empty string)");
        goto fail;
    }
    const cJSON *docs = cJSON_GetObjectItemCaseSensitive(root, "documents");
    const int n = cJSON_IsArray(docs) ? cJSON_GetArraySize(docs) : -1;
    if (n < 1 || n > RERANK_MAX_DOCS) {
        api_error_set(&e, 400, "documents", "'documents' must be a list of 1 to %d strings or "
                      "{\"text\": ...} objects", RERANK_MAX_DOCS);
        goto fail;
    }
    int model = pick_model(a, r, model_name, EMBED_ROLE_RERANK, &e);
    if (model < 0)
        goto fail;
    if (!(c = calloc(1, sizeof *c)) || !(c->docs = calloc((size_t)n, sizeof *c->docs)) ||
        !(c->job = embed_job_new(api_embed(a), model, n))) {
        api_error_set(&e, 500, NULL, "out of memory");
        goto fail;
    }
    c->n = n;
    c->shape = SHAPE_RERANK;
    c->top_n = (int)top_n;
    c->return_documents = ret_docs;
    c->t0 = omni_time_s();
    snprintf(c->model, sizeof c->model, "%s", embed_service_model(api_embed(a), model)->name);
    int i = 0;
    for (const cJSON *d = docs->child; d; d = d->next, i++) {
        const cJSON *t = cJSON_IsObject(d) ? cJSON_GetObjectItemCaseSensitive(d, "text") : d;
        char param[64], err[512];
        snprintf(param, sizeof param, "documents[%d]", i);
        if (!cJSON_IsString(t)) {
            api_error_set(&e, 400, param, "'%s' must be a string or {\"text\": string}", param);
            goto fail;
        }
        if (!(c->docs[i] = strdup(t->valuestring))) {
            api_error_set(&e, 500, NULL, "out of memory");
            goto fail;
        }
        int rc = embed_job_set_text(c->job, i, query, t->valuestring, err, sizeof err);
        if (rc < 0) {
            input_error(&e, "documents", i, 2, rc, err);
            goto fail;
        }
    }
    cJSON_Delete(root);
    submit(a, r, c);
    return;
fail:
    if (c)
        call_free(c);
    cJSON_Delete(root);
    api_respond_error(r, API_OPENAI, &e);
}
