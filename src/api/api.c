/* api.c - routing, API key, model state, request log and metrics, and the
 * generation call shared by the OpenAI and Anthropic routes: it defers the
 * HTTP response, submits to the engine, turns engine events (engine thread)
 * into protocol output through the api_proto hooks, and cancels the engine
 * request when the client leaves. The service thread only routes and checks
 * (key, size, content type, draining); routes that read a body run on the
 * ws workers (ws_req_offload), so a 20 MB prompt or a huge schema never
 * holds up /health or other clients' streams. */
#include "src/api/api.h"

#include "llm/model.h"
#include "llm/template/template.h"
#include "llm/tokenizer.h"
#include "src/api/anthropic.h"
#include "src/api/responses.h"
#include "src/api/responses_store.h"
#include "src/api/audio.h"
#include "src/api/embeddings.h"
#include "src/api/images.h"
#include "src/api/mcpapi.h"
#include "src/api/metrics.h"
#include "src/api/openai.h"
#include "src/api/realtime.h"
#include "src/api/speech.h"
#include "src/api/web.h"
#include "audio/whisper_batch.h"
#include "src/stt/stt.h"
#include "src/core/gguf.h"
#include "src/core/omni.h"

#include <cjson/cJSON.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum api_state { API_LOADING, API_READY, API_UNAVAILABLE };

struct api {
    struct api_params p;
    char *api_key, *served_name, *version;   /* owned copies */
    char *tool_parser, *reasoning_format;    /* owned copies or NULL */
    long long started_at;
    _Atomic int state;                       /* enum api_state; set once from LOADING */
    struct api_model model;                  /* written before state becomes READY */
    char unavailable_why[512];               /* written before state becomes UNAVAILABLE */
    struct metrics *metrics;
    pthread_mutex_t reg_lock;
    struct api_call *calls;                  /* {reg_lock} in-flight calls, for cancel */
    struct stt *stt;                         /* set before serving; NULL: no speech model */
    struct api_images_pool *images;          /* set before serving; NULL: no vision model */
    struct tts *tts;                         /* set before serving; NULL: no speech synthesis */
    struct mcp *mcp;                         /* set before serving; NULL: no MCP servers */
    int mcp_max_turns;
    struct responses_store *responses;       /* stored Responses API answers (own lock) */
    struct embed_service *_Atomic embed;     /* set once by the loader; NULL: none (yet) */
};

struct api_params api_default_params(void)
{
    return (struct api_params){ .version = "",
                                .responses_store_max = RESPONSES_STORE_DEFAULT_MAX,
                                .responses_store_bytes = RESPONSES_STORE_DEFAULT_BYTES };
}

struct api *api_new(const struct api_params *p, char *err, size_t errlen)
{
    if (!p->served_model_name || !*p->served_model_name) {
        omni_fail(err, errlen, OMNI_ERR_ARG, "api: no served model name");
        return NULL;
    }
    struct api *a = calloc(1, sizeof *a);
    if (!a)
        goto nomem;
    a->p = *p;
    a->started_at = (long long)time(NULL);
    pthread_mutex_init(&a->reg_lock, NULL);
    if (!(a->served_name = strdup(p->served_model_name)) ||
        !(a->version = strdup(p->version ? p->version : "")) ||
        (p->api_key && *p->api_key && !(a->api_key = strdup(p->api_key))) ||
        (p->tool_parser && !(a->tool_parser = strdup(p->tool_parser))) ||
        (p->reasoning_format && !(a->reasoning_format = strdup(p->reasoning_format))) ||
        !(a->metrics = metrics_new()) ||
        !(a->responses = responses_store_new(p->responses_store_max, p->responses_store_bytes)))
        goto nomem;
    a->p.served_model_name = a->served_name;
    a->p.api_key = a->api_key;
    a->p.version = a->version;
    atomic_store(&a->state, API_LOADING);
    return a;
nomem:
    omni_fail(err, errlen, OMNI_ERR_NOMEM, "api: out of memory");
    api_free(a);
    return NULL;
}

void api_free(struct api *a)
{
    if (!a)
        return;
    metrics_free(a->metrics);
    responses_store_free(a->responses);
    pthread_mutex_destroy(&a->reg_lock);
    free(a->api_key);
    free(a->served_name);
    free(a->version);
    free(a->tool_parser);
    free(a->reasoning_format);
    free(a);
}

void api_set_engine(struct api *a, struct engine *e, int model)
{
    struct llm_model *m = engine_model(e, model);
    const struct llm_hparams *hp = llm_model_hparams(m);
    size_t tlen = 0;
    const char *tmpl = gguf_get_str(llm_model_gguf(m), "tokenizer.chat_template", &tlen);
    char *tz = tmpl ? strndup(tmpl, tlen) : NULL;
    a->model = (struct api_model){
        .engine = e,
        .index = model,
        .tok = llm_model_tokenizer(m),
        .n_ctx = hp->n_ctx_train,
        .n_vocab = hp->n_vocab,
        .fmt = chat_format_detect(tz),
        .name = a->served_name,
        .gguf = llm_model_gguf(m),
        .tools_fmt = tools_format_detect(tz),
        .rfmt = reasoning_format_detect(tz),
        .max_tokens_reject = a->p.max_tokens_reject,
    };
    /* Harmony's tool messages come out of the reasoning splitter as hermes calls. */
    if (a->model.rfmt == REASONING_HARMONY)
        a->model.tools_fmt = TOOLS_FMT_HERMES;
    int f;
    if (a->tool_parser && (f = tools_format_from_name(a->tool_parser)) >= 0)
        a->model.tools_fmt = (enum tools_format)f;
    if (a->reasoning_format && (f = reasoning_format_from_name(a->reasoning_format)) >= 0)
        a->model.rfmt = (enum reasoning_format)f;
    /* Templates that speak of these markers use them as (often control) tokens. */
    a->model.special_markup = tz && (strstr(tz, "<think>") || strstr(tz, "[THINK]") ||
                                     strstr(tz, "<|channel|>") || strstr(tz, "tool_call") ||
                                     strstr(tz, "<|python_tag|>") || strstr(tz, "[TOOL_CALLS]") ||
                                     strstr(tz, "tool\xe2\x96\x81"));
    free(tz);
    atomic_store(&a->state, API_READY);
}

void api_set_unavailable(struct api *a, const char *why)
{
    snprintf(a->unavailable_why, sizeof a->unavailable_why, "%s", why ? why : "no model loaded");
    atomic_store(&a->state, API_UNAVAILABLE);
}

void api_set_stt(struct api *a, struct stt *stt) { a->stt = stt; }
struct stt *api_stt(struct api *a) { return a->stt; }

void api_set_images(struct api *a, struct api_images_pool *p) { a->images = p; }
struct api_images_pool *api_images(struct api *a) { return a->images; }
void api_set_tts(struct api *a, struct tts *t) { a->tts = t; }
void api_set_embed(struct api *a, struct embed_service *s) { atomic_store(&a->embed, s); }
struct embed_service *api_embed(struct api *a) { return atomic_load(&a->embed); }
bool api_loading(struct api *a) { return atomic_load(&a->state) == API_LOADING; }
struct tts *api_tts(struct api *a) { return a->tts; }
void api_set_mcp(struct api *a, struct mcp *m, int max_turns)
{
    a->mcp = m;
    a->mcp_max_turns = max_turns;
}
struct mcp *api_mcp(struct api *a) { return a->mcp; }
int api_mcp_max_turns(const struct api *a) { return a->mcp_max_turns > 0 ? a->mcp_max_turns : 8; }

/* Browsers and the openai SDK cannot set headers on a WebSocket: they offer
 * the key as a subprotocol, "Sec-WebSocket-Protocol: realtime,
 * openai-insecure-api-key.KEY". Only handshakes look there; the 101 answer
 * names "realtime" alone (ws_http.c), never the key. */
static bool api_ws_key_ok(struct ws_req *r, const char *key)
{
    static const char prefix[] = "openai-insecure-api-key.";
    const char *list = ws_req_header(r, "sec-websocket-protocol");
    if (!list || !ws_req_header(r, "sec-websocket-key"))
        return false;
    bool ok = false;
    for (const char *p = list; *p;) {
        p += strspn(p, ", \t");
        size_t n = strcspn(p, ", \t");
        if (n > sizeof prefix - 1 && !strncmp(p, prefix, sizeof prefix - 1)) {
            char tok[512];
            size_t kl = n - (sizeof prefix - 1);
            if (kl < sizeof tok) {
                memcpy(tok, p + sizeof prefix - 1, kl);
                tok[kl] = 0;
                ok |= apireq_key_ok(NULL, tok, key);   /* constant-time compare */
            }
        }
        p += n;
    }
    return ok;
}

bool api_key_ok(struct api *a, struct ws_req *r)
{
    return !a->api_key ||
           apireq_key_ok(ws_req_header(r, "authorization"), ws_req_header(r, "x-api-key"),
                         a->api_key) ||
           api_ws_key_ok(r, a->api_key);
}

long long api_started_at(const struct api *a) { return a->started_at; }
struct responses_store *api_responses_store(struct api *a) { return a->responses; }

struct metrics *api_metrics(struct api *a) { return a->metrics; }

// ---- responses ------------------------------------------------------------

void api_respond_json(struct ws_req *r, int status, cJSON *body)
{
    char *s = body ? cJSON_PrintUnformatted(body) : NULL;
    cJSON_Delete(body);
    if (!s) {
        static const char oom[] = "{\"error\":{\"message\":\"out of memory\",\"type\":\"server_error\","
                                  "\"param\":null,\"code\":null}}";
        ws_req_respond(r, 500, "application/json", oom, sizeof oom - 1);
        return;
    }
    ws_req_respond(r, status, "application/json", s, strlen(s));
    free(s);
}

void api_respond_error(struct ws_req *r, enum api_flavor f, const struct api_error *e)
{
    size_t len = 0;
    char *s = api_error_json(f, e, &len);
    if (!s) {
        ws_req_respond(r, 500, "text/plain", "out of memory", 13);
        return;
    }
    ws_req_respond(r, e->status, "application/json", s, len);
    free(s);
}

const struct api_model *api_model(struct api *a)
{
    return atomic_load(&a->state) == API_READY ? &a->model : NULL;
}

const char *api_served_name(const struct api *a) { return a->served_name; }

const struct api_model *api_model_or_503(struct api *a, struct ws_req *r, enum api_flavor f)
{
    int st = atomic_load(&a->state);
    if (st == API_READY)
        return &a->model;
    struct api_error e;
    if (st == API_LOADING) {
        api_error_set(&e, 503, NULL, "the model is still loading; retry in a moment");
        ws_req_add_header(r, "retry-after", "5");
    } else {
        /* Not 503: SDKs retry those for seconds, and no model will come
         * until the server restarts. */
        api_error_set(&e, 404, "model", "no model is loaded: %s", a->unavailable_why);
        e.code = "model_not_found";
    }
    api_respond_error(r, f, &e);
    return NULL;
}

int api_check_model(struct api *a, const char *requested, struct api_error *e)
{
    if (!requested || !a->p.strict_model_id || !strcmp(requested, a->served_name))
        return 0;
    api_error_set(e, 404, "model", "The model '%s' does not exist (this server serves '%s')",
                  requested, a->served_name);
    e->code = "model_not_found";
    return -1;
}

// ---- prompts ----------------------------------------------------------------

int api_tokenize(const struct tokenizer *tok, const char *text, int flags, int32_t **ids, int *n,
                 struct api_error *e)
{
    size_t len = strlen(text);
    if (len > (1u << 30))
        return api_error_set(e, 400, NULL, "prompt is too long (%zu bytes)", len);
    int cap = (int)len + 16, needed = 0;
    for (int attempt = 0; attempt < 2; attempt++) {
        int32_t *buf = malloc((size_t)cap * sizeof *buf);
        if (!buf)
            return api_error_set(e, 500, NULL, "out of memory");
        int got = tokenizer_encode(tok, text, len, flags, buf, cap, &needed);
        if (got >= 0) {
            *ids = buf;
            *n = got;
            return 0;
        }
        free(buf);
        if (got == OMNI_ERR_FORMAT)
            return api_error_set(e, 400, NULL, "the text is not valid UTF-8");
        if (got != OMNI_ERR_LIMIT || needed <= cap)
            return api_error_set(e, 500, NULL, "cannot tokenize: %s", omni_strerror(got));
        cap = needed;
    }
    return api_error_set(e, 500, NULL, "cannot tokenize the prompt");
}

int api_chat_prompt_json(const struct api_model *m, const cJSON *messages, const cJSON *tools,
                         const cJSON *kwargs, int32_t **ids, int *n, char **text_out,
                         struct api_error *e)
{
    char *mj = cJSON_PrintUnformatted(messages);
    char *tj = tools ? cJSON_PrintUnformatted(tools) : NULL;
    char *kj = kwargs ? cJSON_PrintUnformatted(kwargs) : NULL;
    char *text = NULL, err[512] = "";
    size_t len = 0;
    int rc = -1;
    if (!mj || (tools && !tj) || (kwargs && !kj)) {
        api_error_set(e, 500, NULL, "out of memory");
        goto out;
    }
    int r = tpl_render_gguf(m->gguf, m->tok, mj, tj, kj, true, &text, &len, NULL, err, sizeof err);
    if (r == OMNI_ERR_NOMEM) {
        api_error_set(e, 500, NULL, "out of memory");
        goto out;
    }
    if (r < 0) {
        api_error_set(e, 400, "messages", "the model's chat template cannot render these messages: %s",
                      err[0] ? err : omni_strerror(r));
        goto out;
    }
    /* The turn markers in the rendered text are special tokens; a template
     * that writes the BOS itself gets no second one. */
    int flags = TOK_PARSE_SPECIAL;
    char bos[64];
    int32_t bos_id = tokenizer_bos(m->tok);
    size_t bl = bos_id >= 0 ? tokenizer_piece(m->tok, bos_id, true, bos, sizeof bos) : 0;
    if (!(bl > 0 && bl < sizeof bos && len >= bl && !memcmp(text, bos, bl)))
        flags |= TOK_ADD_SPECIAL;
    rc = api_tokenize(m->tok, text, flags, ids, n, e);
    if (rc == 0 && text_out) {
        *text_out = text;
        text = NULL;
    }
out:
    free(mj);
    free(tj);
    free(kj);
    free(text);
    return rc;
}

int api_check_context(const struct api_model *m, int n_prompt, const struct apireq_gen *g,
                      struct api_error *e)
{
    bool strict = g->max_tokens_set && m->max_tokens_reject;
    long want = (long)n_prompt + (strict ? g->max_tokens : 1);
    if (want <= m->n_ctx)
        return 0;
    if (strict)
        api_error_set(e, 400, "max_tokens",
                      "This model's maximum context length is %d tokens. However, you requested "
                      "%ld tokens (%d in the prompt, %d for the completion). Please reduce the "
                      "prompt or max_tokens.",
                      m->n_ctx, want, n_prompt, g->max_tokens);
    else
        api_error_set(e, 400, "messages",
                      "This model's maximum context length is %d tokens. However, your prompt is "
                      "%d tokens, which leaves no room for the completion.",
                      m->n_ctx, n_prompt);
    e->code = "context_length_exceeded";
    return -1;
}

// ---- the generation call ------------------------------------------------------

static void api_register(struct api_call *c)
{
    struct api *a = c->api;
    pthread_mutex_lock(&a->reg_lock);
    c->reg_next = a->calls;
    a->calls = c;
    pthread_mutex_unlock(&a->reg_lock);
}

static void api_unregister(struct api_call *c)
{
    struct api *a = c->api;
    pthread_mutex_lock(&a->reg_lock);
    for (struct api_call **pp = &a->calls; *pp; pp = &(*pp)->reg_next)
        if (*pp == c) {
            *pp = c->reg_next;
            break;
        }
    pthread_mutex_unlock(&a->reg_lock);
}

struct api_call *api_call_new(struct api *a, struct ws_req *r, const struct api_proto *proto,
                              enum api_flavor f, const char *id_prefix,
                              const struct apireq_gen *g)
{
    struct api_call *c = calloc(1, sizeof *c);
    if (!c)
        return NULL;
    pthread_mutex_init(&c->lock, NULL);
    c->api = a;
    c->proto = proto;
    c->flavor = f;
    c->tok = a->model.tok;
    c->model_name = a->served_name;
    c->created = (long long)time(NULL);
    c->stream = g->stream;
    c->include_usage = g->include_usage;
    c->logprobs = g->logprobs;
    c->top_logprobs = g->top_logprobs;
    c->n = g->n;
    snprintf(c->req_id, sizeof c->req_id, "%s", ws_req_id(r));
    snprintf(c->id, sizeof c->id, "%s%s", id_prefix, c->req_id);
    if (!(c->choices = calloc((size_t)g->n, sizeof *c->choices)))
        goto fail;
    if (g->n_stop > 0) {
        if (!(c->stops = calloc((size_t)g->n_stop, sizeof *c->stops)))
            goto fail;
        for (c->n_stops = 0; c->n_stops < g->n_stop; c->n_stops++)
            if (!(c->stops[c->n_stops] = strdup(g->stop[c->n_stops])))
                goto fail;
    }
    return c;
fail:
    api_call_free(c);
    return NULL;
}

void api_call_free(struct api_call *c)
{
    if (!c)
        return;
    for (int i = 0; c->choices && i < c->n; i++) {
        free(c->choices[i].text);
        free(c->choices[i].lps);
        chatout_free(c->choices[i].chat);
    }
    free(c->choices);
    for (int i = 0; i < c->n_stops; i++)
        free(c->stops[i]);
    free(c->stops);
    free(c->echo_text);
    free(c->force_ids);
    if (c->proto_state_free)
        c->proto_state_free(c->proto_state);
    pthread_mutex_destroy(&c->lock);
    free(c);
}

static void api_call_free_cb(void *user) { api_call_free(user); }

/* The client left (or shutdown gave up): stop generating. The service
 * thread, or the ws worker right after the route returned when the client
 * left while it ran (the engine id is set by then). A call still with a
 * vision worker has no engine id yet: the worker sees ws_out_gone, before
 * or right after it submits. */
static void api_call_abort(void *user)
{
    struct api_call *c = user;
    pthread_mutex_lock(&c->lock);
    uint64_t id = c->engine_id;
    pthread_mutex_unlock(&c->lock);
    if (id)
        engine_cancel(c->api->model.engine, id);
}

static void api_choice_append(struct api_choice *ch, const char *text, size_t len)
{
    if (len == 0)
        return;
    if (omni_reserve(&ch->text, &ch->cap, ch->len + len + 1) < 0)
        return;   /* the response loses text rather than the server crashing */
    memcpy(ch->text + ch->len, text, len);
    ch->len += len;
    ch->text[ch->len] = 0;
}

static void api_choice_add_lp(struct api_choice *ch, int32_t token, const struct sampler_logprobs *lp)
{
    if (ch->n_lps == ch->cap_lps) {
        int cap = ch->cap_lps ? ch->cap_lps * 2 : 32;
        struct api_lp *n = realloc(ch->lps, (size_t)cap * sizeof *n);
        if (!n)
            return;
        ch->lps = n;
        ch->cap_lps = cap;
    }
    ch->lps[ch->n_lps].token = token;
    ch->lps[ch->n_lps].lp = *lp;
    ch->n_lps++;
}

/* Engine thread: one event of one choice. */
static void api_call_event(void *user, const struct engine_event *ev)
{
    struct api_call *c = user;
    if (ev->choice < 0 || ev->choice >= c->n)
        return;
    struct api_choice *ch = &c->choices[ev->choice];
    struct metrics *m = c->api->metrics;
    double now = omni_time_s();
    bool last = false;
    pthread_mutex_lock(&c->lock);
    if (ev->type == ENGINE_EV_TOKEN) {
        if (!c->first_token_seen) {
            c->first_token_seen = true;
            metrics_ttft(m, now - c->t_submit);
        } else if (ch->tokens > 0) {
            metrics_itl(m, now - ch->last_token_s);
        }
        ch->last_token_s = now;
        ch->tokens++;
        if (c->logprobs && ev->logprobs)
            api_choice_add_lp(ch, ev->token, ev->logprobs);
        api_choice_append(ch, ev->text, ev->text_len);
        if (ev->text_len > 0 || (c->logprobs && ev->logprobs))
            c->proto->text(c, ev->choice, ev->text ? ev->text : "", ev->text_len,
                           c->logprobs ? ev->logprobs : NULL, ev->token);
    } else if (!ch->done) {
        if (ev->type == ENGINE_EV_DONE && ev->text_len > 0) {
            api_choice_append(ch, ev->text, ev->text_len);
            c->proto->text(c, ev->choice, ev->text, ev->text_len, NULL, -1);
        }
        ch->done = true;
        ch->finish = ev->finish;
        ch->stop_index = ev->stop_index;
        if (ev->type == ENGINE_EV_ERROR) {
            ch->error = true;
            if (!c->error[0])
                snprintf(c->error, sizeof c->error, "%s", ev->error ? ev->error : "engine error");
        } else {
            c->prompt_tokens = ev->usage.prompt_tokens;
            c->cached_tokens = ev->usage.cached_tokens;
            c->completion_tokens += ev->usage.completion_tokens;
            if (ev->finish == ENGINE_FINISH_TIMEOUT)
                c->timed_out = true;
        }
        c->proto->choice_done(c, ev->choice);
        if (++c->n_done == c->n && c->turn_end && c->turn_end(c)) {
            /* another turn follows: the protocol holds the response open */
        } else if (c->n_done == c->n) {
            c->proto->finish(c);
            ws_out_set_tokens(c->out, c->prompt_tokens, c->completion_tokens);
            metrics_tokens(m, c->prompt_tokens, c->completion_tokens);
            ws_out_end(c->out);
            last = true;
        }
    }
    pthread_mutex_unlock(&c->lock);
    if (last) {
        api_unregister(c);
        ws_out_release(c->out);   /* may free c */
    }
}

/* Engine thread: the next token of a choice whose reasoning ran over its
 * budget is the next token of the closing text (once). */
static int32_t api_call_force(void *user, int choice)
{
    struct api_call *c = user;
    int32_t id = -1;
    pthread_mutex_lock(&c->lock);
    struct api_choice *ch = &c->choices[choice];
    if (ch->chat && ch->n_forced < c->n_force_ids &&
        (ch->n_forced > 0 || (chatout_reasoning_tokens(ch->chat) >= c->reasoning_budget &&
                              chatout_in_reasoning(ch->chat))))
        id = c->force_ids[ch->n_forced++];
    pthread_mutex_unlock(&c->lock);
    return id;
}

int api_call_defer(struct api_call *c, struct ws_req *r)
{
    enum api_flavor f = c->flavor;
    struct ws_out *o = ws_req_defer(r, api_call_abort, api_call_free_cb, c);
    if (!o) {
        api_call_free(c);
        struct api_error e;
        api_error_set(&e, 500, NULL, "out of memory");
        api_respond_error(r, f, &e);
        return -1;
    }
    c->out = o;
    return 0;
}

void api_call_fail(struct api_call *c, const struct api_error *e)
{
    struct ws_out *o = c->out;
    size_t len = 0;
    char *body = api_error_json(c->flavor, e, &len);
    ws_out_start(o, e->status, "application/json", false);
    if (body)
        ws_out_write(o, body, len);
    ws_out_end(o);
    free(body);
    ws_out_release(o);   /* the connection's reference frees the call */
}

int api_call_submit(struct api_call *c, struct ws_req *r, struct engine_request *rq,
                    void (*start)(struct api_call *c))
{
    if (r && api_call_defer(c, r) < 0)
        return -1;
    rq->on_event = api_call_event;
    rq->force_token = c->n_force_ids > 0 ? api_call_force : NULL;
    rq->user = c;
    char err[512] = "";
    pthread_mutex_lock(&c->lock);
    c->t_submit = omni_time_s();
    int rc = engine_submit(c->api->model.engine, rq, &c->engine_id, err, sizeof err);
    if (rc == 0) {
        if (start)
            start(c);
        api_register(c);
    }
    pthread_mutex_unlock(&c->lock);
    if (rc == 0) {
        if (!r && ws_out_gone(c->out)) /* left while a worker prepared it */
            engine_cancel(c->api->model.engine, c->engine_id);
        return 0;
    }

    struct api_error e;
    if (rc == OMNI_ERR_LIMIT) {
        api_error_set(&e, 429, NULL, "the server is busy (request queue full); retry shortly");
        e.code = "rate_limit_exceeded";
        if (r)
            ws_req_add_header(r, "retry-after", "1");
    } else if (rc == OMNI_ERR_ARG) {
        api_error_set(&e, 400, NULL, "%s", err[0] ? err : "invalid request");
        if (strstr(err, "context"))
            e.code = "context_length_exceeded";
    } else {
        api_error_set(&e, 500, NULL, "cannot start generation: %s",
                      err[0] ? err : omni_strerror(rc));
    }
    api_call_fail(c, &e);
    return -1;
}

void api_call_next_turn(struct api_call *c)
{
    pthread_mutex_lock(&c->lock);
    for (int i = 0; i < c->n; i++) {
        struct api_choice *ch = &c->choices[i];
        free(ch->text);
        free(ch->lps);
        chatout_free(ch->chat);
        *ch = (struct api_choice){ 0 };
    }
    free(c->force_ids);
    c->force_ids = NULL;
    c->n_force_ids = 0;
    c->n_done = 0;
    pthread_mutex_unlock(&c->lock);
}

int api_call_resubmit(struct api_call *c, struct engine_request *rq, struct api_error *e)
{
    rq->on_event = api_call_event;
    rq->force_token = c->n_force_ids > 0 ? api_call_force : NULL;
    rq->user = c;
    char err[512] = "";
    pthread_mutex_lock(&c->lock);
    int rc = engine_submit(c->api->model.engine, rq, &c->engine_id, err, sizeof err);
    pthread_mutex_unlock(&c->lock);
    if (rc == 0) {
        if (ws_out_gone(c->out))
            engine_cancel(c->api->model.engine, c->engine_id);
        return 0;
    }
    if (rc == OMNI_ERR_LIMIT)
        api_error_set(e, 429, NULL, "the server is busy (request queue full); retry shortly");
    else
        api_error_set(e, rc == OMNI_ERR_ARG ? 400 : 500, NULL, "cannot start generation: %s",
                      err[0] ? err : omni_strerror(rc));
    return -1;
}

void api_call_end(struct api_call *c)
{
    pthread_mutex_lock(&c->lock);
    c->proto->finish(c);
    ws_out_set_tokens(c->out, c->prompt_tokens, c->completion_tokens);
    metrics_tokens(c->api->metrics, c->prompt_tokens, c->completion_tokens);
    ws_out_end(c->out);
    pthread_mutex_unlock(&c->lock);
    api_unregister(c);
    ws_out_release(c->out);   /* may free c */
}

// ---- small routes -----------------------------------------------------------

/* Readiness: 200 while new work is welcome here, 503 while the model loads
 * or the server drains (a load balancer then sends nothing new). A server
 * without a model is ready for what it has (speech, metrics). */
static void api_health(struct api *a, struct ws_req *r, const char *arg)
{
    (void)arg;
    int st = atomic_load(&a->state);
    bool draining = ws_req_draining(r);
    cJSON *o = cJSON_CreateObject();
    if (draining) {
        cJSON_AddStringToObject(o, "status", "draining");
    } else if (st == API_READY) {
        cJSON_AddStringToObject(o, "status", "ok");
        cJSON_AddStringToObject(o, "model", a->served_name);
    } else if (st == API_LOADING) {
        cJSON_AddStringToObject(o, "status", "loading");
    } else {
        cJSON_AddStringToObject(o, "status", "no_model");
        cJSON_AddStringToObject(o, "message", a->unavailable_why);
    }
    api_respond_json(r, draining || st == API_LOADING ? 503 : 200, o);
}

/* Liveness: the process serves HTTP (loading and draining included). */
static void api_livez(struct api *a, struct ws_req *r, const char *arg)
{
    (void)a;
    (void)arg;
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "status", "alive");
    api_respond_json(r, 200, o);
}

static void api_metrics_route(struct api *a, struct ws_req *r, const char *arg)
{
    (void)arg;
    struct engine_stats es;
    bool ready = atomic_load(&a->state) == API_READY;
    if (ready)
        engine_stats(a->model.engine, &es);
    if (a->images) {
        struct vision_cache_stats vs = vision_cache_stats(api_images_cache(a->images));
        metrics_vision(a->metrics, &vs);
    }
    if (a->stt) {
        struct whisper_batcher_stats ts;
        stt_batch_stats(a->stt, &ts);
        metrics_stt(a->metrics, &ts);
    }
    size_t len = 0;
    char *text = metrics_render(a->metrics, ready ? &es : NULL, a->version, a->served_name, &len);
    if (!text) {
        ws_req_respond(r, 500, "text/plain", "out of memory\n", 14);
        return;
    }
    ws_req_respond(r, 200, "text/plain; version=0.0.4; charset=utf-8", text, len);
    free(text);
}

/* POST /v1/requests/{id}/cancel: id is the x-request-id or a response id. */
static void api_cancel_route(struct api *a, struct ws_req *r, const char *arg)
{
    bool found = false;
    uint64_t eid = 0;
    pthread_mutex_lock(&a->reg_lock);
    for (struct api_call *c = a->calls; c && !found; c = c->reg_next)
        if (!strcmp(c->req_id, arg) || !strcmp(c->id, arg)) {
            found = true;
            eid = c->engine_id;
        }
    pthread_mutex_unlock(&a->reg_lock);
    if (!found) {
        struct api_error e;
        api_error_set(&e, 404, NULL, "no request '%s' in flight", arg);
        api_respond_error(r, API_OPENAI, &e);
        return;
    }
    engine_cancel(a->model.engine, eid);
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "id", arg);
    cJSON_AddStringToObject(o, "object", "request.cancel");
    cJSON_AddBoolToObject(o, "cancelled", true);
    api_respond_json(r, 200, o);
}

// ---- routing ------------------------------------------------------------------

typedef void (*api_route_fn)(struct api *a, struct ws_req *r, const char *arg);

struct api_route {
    const char *prefix;       /* path, or the part before {arg} */
    const char *suffix;       /* after {arg}; NULL: exact path */
    const char *label;        /* for logs and metrics */
    enum ws_method method;    /* a GET route also answers HEAD (ws sends no body) */
    enum api_flavor flavor;
    bool open;                /* no API key needed */
    enum apireq_body body;    /* the Content-Type its body needs, else 415 */
    bool worker;              /* runs on a ws worker: it parses a body or does real work */
    bool generation;          /* new ones get 503 while the server drains */
    api_route_fn fn;
};

#define JSON APIREQ_BODY_JSON
#define FORM APIREQ_BODY_MULTIPART
#define ANY APIREQ_BODY_ANY
static const struct api_route api_routes[] = {
    /* prefix, suffix, label, method, flavor, open, body, worker, generation, fn */
    { "/health", NULL, "/health", WS_GET, API_OPENAI, true, ANY, false, false, api_health },
    { "/livez", NULL, "/livez", WS_GET, API_OPENAI, true, ANY, false, false, api_livez },
    { "/metrics", NULL, "/metrics", WS_GET, API_OPENAI, false, ANY, false, false, api_metrics_route },
    { "/v1/models", NULL, "/v1/models", WS_GET, API_OPENAI, false, ANY, false, false, openai_models },
    { "/v1/models/", "", "/v1/models/{id}", WS_GET, API_OPENAI, false, ANY, false, false, openai_model },
    { "/v1/mcp/servers", NULL, "/v1/mcp/servers", WS_GET, API_OPENAI, false, ANY, false, false,
      mcpapi_servers_route },
    { "/v1/mcp/tools", NULL, "/v1/mcp/tools", WS_GET, API_OPENAI, false, ANY, false, false,
      mcpapi_tools_route },
    { "/v1/chat/completions", NULL, "/v1/chat/completions", WS_POST, API_OPENAI, false, JSON, true,
      true, openai_chat },
    { "/v1/completions", NULL, "/v1/completions", WS_POST, API_OPENAI, false, JSON, true, true,
      openai_completions },
    { "/tokenize", NULL, "/tokenize", WS_POST, API_OPENAI, false, JSON, true, false, openai_tokenize },
    { "/detokenize", NULL, "/detokenize", WS_POST, API_OPENAI, false, JSON, true, false,
      openai_detokenize },
    /* the body is not read: any type (or none) */
    { "/v1/requests/", "/cancel", "/v1/requests/{id}/cancel", WS_POST, API_OPENAI, false, ANY, false,
      false, api_cancel_route },
    { "/v1/messages", NULL, "/v1/messages", WS_POST, API_ANTHROPIC, false, JSON, true, true,
      anthropic_messages },
    { "/v1/responses", NULL, "/v1/responses", WS_POST, API_OPENAI, false, JSON, true, true,
      responses_create },
    /* before /v1/responses/{id}, whose {id} would take "ID/input_items" */
    { "/v1/responses/", "/input_items", "/v1/responses/{id}/input_items", WS_GET, API_OPENAI, false,
      ANY, true, false, responses_input_items },
    { "/v1/responses/", "", "/v1/responses/{id}", WS_GET, API_OPENAI, false, ANY, true, false,
      responses_get },
    { "/v1/responses/", "", "/v1/responses/{id}", WS_DELETE, API_OPENAI, false, ANY, true, false,
      responses_delete },
    { "/v1/audio/transcriptions", NULL, "/v1/audio/transcriptions", WS_POST, API_OPENAI, false, FORM,
      true, true, audio_transcriptions },
    { "/v1/audio/translations", NULL, "/v1/audio/translations", WS_POST, API_OPENAI, false, FORM,
      true, true, audio_translations },
    { "/v1/messages/count_tokens", NULL, "/v1/messages/count_tokens", WS_POST, API_ANTHROPIC, false,
      JSON, true, false, anthropic_count_tokens },
    { "/v1/audio/speech", NULL, "/v1/audio/speech", WS_POST, API_OPENAI, false, JSON, true, true,
      speech_route },
    { "/v1/audio/voices", NULL, "/v1/audio/voices", WS_GET, API_OPENAI, false, ANY, false, false,
      speech_voices_route },
    /* embeddings and reranking (embeddings.c): OpenAI, Ollama, llama.cpp, Jina/Cohere shapes */
    { "/v1/embeddings", NULL, "/v1/embeddings", WS_POST, API_OPENAI, false, JSON, true, true,
      embeddings_route },
    { "/api/embed", NULL, "/api/embed", WS_POST, API_OPENAI, false, JSON, true, true,
      embeddings_ollama_route },
    { "/api/embeddings", NULL, "/api/embeddings", WS_POST, API_OPENAI, false, JSON, true, true,
      embeddings_ollama_legacy_route },
    { "/embedding", NULL, "/embedding", WS_POST, API_OPENAI, false, JSON, true, true,
      embeddings_llamacpp_route },
    { "/v1/rerank", NULL, "/v1/rerank", WS_POST, API_OPENAI, false, JSON, true, true, rerank_route },
    { "/rerank", NULL, "/rerank", WS_POST, API_OPENAI, false, JSON, true, true, rerank_route },
    /* the web playground (web.c): open, so that the page can ask for a key */
    { "/", NULL, "/", WS_GET, API_OPENAI, true, ANY, true, false, web_index },
    { "/web/info", NULL, "/web/info", WS_GET, API_OPENAI, true, ANY, false, false, web_info },
    { "/web/", "", "/web/{file}", WS_GET, API_OPENAI, true, ANY, true, false, web_file },
};
#undef JSON
#undef FORM
#undef ANY

/* Does path match route? *arg gets the {arg} part (malloc'd) for patterns. */
static bool api_route_match(const struct api_route *rt, const char *path, char **arg)
{
    size_t pl = strlen(rt->prefix), len = strlen(path);
    if (!rt->suffix)
        return !strcmp(path, rt->prefix);
    size_t sl = strlen(rt->suffix);
    if (len <= pl + sl || strncmp(path, rt->prefix, pl) || strcmp(path + len - sl, rt->suffix))
        return false;
    size_t al = len - pl - sl;
    if (memchr(path + pl, '/', al) && sl > 0)
        return false;   /* {id} of /v1/requests/{id}/cancel is one segment */
    *arg = strndup(path + pl, al);
    return *arg != NULL;
}

/* The route of method + path, or NULL; *arg as api_route_match; *wrong the
 * first route of that path under another method. HEAD takes GET routes. */
static const struct api_route *api_route_find(const char *path, enum ws_method method,
                                              char **arg, const struct api_route **wrong)
{
    *arg = NULL;
    *wrong = NULL;
    for (size_t i = 0; i < sizeof api_routes / sizeof api_routes[0]; i++) {
        const struct api_route *rt = &api_routes[i];
        char *x = NULL;
        if (!api_route_match(rt, path, &x))
            continue;
        if (rt->method == method || (method == WS_HEAD && rt->method == WS_GET)) {
            *arg = x;
            return rt;
        }
        *wrong = *wrong ? *wrong : rt;
        free(x);
    }
    return NULL;
}

/* New generation work while the server drains: 503 (true when answered). */
static bool api_refuse_draining(const struct api_route *rt, struct ws_req *r)
{
    if (!rt->generation || !ws_req_draining(r))
        return false;
    struct api_error e;
    api_error_set(&e, 503, NULL, "the server is shutting down; send the request to another "
                                 "replica or retry once it is back");
    api_respond_error(r, rt->flavor, &e);
    return true;
}

/* A ws worker: the rest of a route that api_handle offloaded. r is the
 * worker's copy of the request; the route is looked up again (cheap). */
static void api_worker(void *user, struct ws_req *r)
{
    struct api *a = user;
    char *arg;
    const struct api_route *wrong;
    const struct api_route *hit = api_route_find(ws_req_path(r), ws_req_method(r), &arg, &wrong);
    if (!hit) {   /* cannot happen: api_handle found it */
        struct api_error e;
        api_error_set(&e, 500, NULL, "route lost on the way to a worker");
        api_respond_error(r, API_OPENAI, &e);
        return;
    }
    ws_req_set_route(r, hit->label);
    if (!api_refuse_draining(hit, r))   /* the drain may have begun while it waited */
        hit->fn(a, r, arg ? arg : "");
    free(arg);
}

/* Service thread: routing, key, size, content type and drain checks; then
 * the cheap GET routes run here and the rest go to a ws worker. */
void api_handle(void *user, struct ws_req *r)
{
    struct api *a = user;
    const char *path = ws_req_path(r);
    const struct api_route *wrong_method;
    char *arg;
    const struct api_route *hit = api_route_find(path, ws_req_method(r), &arg, &wrong_method);
    struct api_error e;
    enum api_flavor f = !strncmp(path, "/v1/messages", 12) ? API_ANTHROPIC : API_OPENAI;
    if (!hit) {
        if (wrong_method) {
            bool get = wrong_method->method == WS_GET;
            ws_req_set_route(r, wrong_method->label);
            ws_req_add_header(r, "allow", get ? "GET, HEAD" : "POST");
            api_error_set(&e, 405, NULL, "%s is not allowed on %s (use %s)", ws_req_method_name(r),
                          path, get ? "GET" : "POST");
        } else {
            ws_req_set_route(r, "unmatched");
            api_error_set(&e, 404, NULL, "no route %s %s", ws_req_method_name(r), path);
        }
        api_respond_error(r, f, &e);
        return;
    }
    ws_req_set_route(r, hit->label);
    const char *ctype = ws_req_header(r, "content-type");
    if (a->api_key && !hit->open &&
        !apireq_key_ok(ws_req_header(r, "authorization"), ws_req_header(r, "x-api-key"),
                       a->api_key)) {
        api_error_set(&e, 401, NULL, "missing or invalid API key (send 'Authorization: Bearer KEY' "
                                     "or 'x-api-key: KEY')");
        e.code = "invalid_api_key";
        api_respond_error(r, hit->flavor, &e);
    } else if (ws_req_body_too_large(r)) {
        api_error_set(&e, 413, NULL, "request body is larger than the server's limit (--max-body)");
        api_respond_error(r, hit->flavor, &e);
    } else if (!apireq_content_type_ok(ctype, hit->body)) {
        bool form = hit->body == APIREQ_BODY_MULTIPART;
        api_error_set(&e, 415, NULL, "%s %s takes a %s body: send 'Content-Type: %s' (got %s%.80s%s)",
                      ws_req_method_name(r), path, form ? "multipart/form-data" : "JSON",
                      form ? "multipart/form-data; boundary=...": "application/json",
                      ctype ? "'" : "no Content-Type", ctype ? ctype : "", ctype ? "'" : "");
        e.code = "unsupported_media_type";
        api_respond_error(r, hit->flavor, &e);
    } else if (api_refuse_draining(hit, r)) {
        /* answered */
    } else if (hit->worker) {
        ws_req_offload(r, api_worker);   /* r is the worker's now */
    } else {
        hit->fn(a, r, arg ? arg : "");
    }
    free(arg);
}

/* WebSocket handshakes: only the Realtime endpoint takes them; a missing
 * or wrong key gets 401 (the handshake then fails in the client). */
void api_upgrade(void *user, struct ws_req *r)
{
    struct api *a = user;
    if (strcmp(ws_req_path(r), "/v1/realtime")) {
        OMNI_INFO("http: WebSocket upgrade refused: no WebSocket endpoint at %s", ws_req_path(r));
        return;
    }
    if (!api_key_ok(a, r)) {
        struct api_error e;
        ws_req_set_route(r, "/v1/realtime");
        api_error_set(&e, 401, NULL, "missing or invalid API key (send 'Authorization: Bearer KEY', "
                                     "or from a browser the WebSocket subprotocol "
                                     "'openai-insecure-api-key.KEY' next to 'realtime')");
        e.code = "invalid_api_key";
        OMNI_INFO("realtime: %s refused: missing or invalid API key", ws_req_id(r));
        api_respond_error(r, API_OPENAI, &e);
        return;
    }
    realtime_upgrade(a, r);
}

void api_on_done(void *user, const struct ws_done_info *d)
{
    struct api *a = user;
    metrics_http(a->metrics, d->route, d->method, d->status, d->duration_ms / 1e3);
    omni_log(OMNI_LOG_INFO, "http: %s %s %d %s%.1f ms tokens %d/%d id %s", d->method, d->path,
             d->status, d->aborted ? "(client left) " : "", d->duration_ms, d->tokens_in,
             d->tokens_out, d->request_id);
}
