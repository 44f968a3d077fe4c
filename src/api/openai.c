/* openai.c - OpenAI-compatible routes. Requests become engine requests (the
 * chat prompt rendered with the model's chat template, chatreq.h); engine events
 * become responses in the exact shape OpenAI sends: for streams a role chunk
 * per choice first, then content deltas, a finish chunk per choice, an
 * optional usage chunk with empty choices, and "data: [DONE]". */
#include "src/api/openai.h"

#include "llm/grammar/grammar.h"
#include "llm/tokenizer.h"
#include "src/api/api.h"
#include "src/api/embeddings.h"
#include "src/api/images.h"
#include "src/api/mcpapi.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define OPENAI_FINGERPRINT "fp_omniserve"

// ---- shared pieces --------------------------------------------------------------

static const char *openai_finish_reason(const struct api_choice *ch)
{
    if (ch->chat && chatout_n_calls(ch->chat) > 0 && ch->finish == ENGINE_FINISH_STOP)
        return "tool_calls";
    switch (ch->finish) {
    case ENGINE_FINISH_LENGTH: return "length";
    case ENGINE_FINISH_CANCELLED: return "cancelled";
    case ENGINE_FINISH_TIMEOUT: return "timeout";
    default: return "stop";
    }
}

/* A string item from bytes that are not NUL-terminated. */
static cJSON *openai_string_n(const char *s, size_t len)
{
    char small[256];
    char *tmp = len < sizeof small ? small : malloc(len + 1);
    if (!tmp)
        return NULL;
    memcpy(tmp, s, len);
    tmp[len] = 0;
    cJSON *item = cJSON_CreateString(tmp);
    if (tmp != small)
        free(tmp);
    return item;
}

/* The raw bytes of a token (pieces may be partial UTF-8 characters). */
static size_t openai_piece(const struct tokenizer *tok, int32_t id, char *buf, size_t cap)
{
    size_t n = tokenizer_piece(tok, id, true, buf, cap - 1);
    if (n > cap - 1)
        n = cap - 1;
    buf[n] = 0;
    return n;
}

static cJSON *openai_bytes(const char *s, size_t n)
{
    cJSON *a = cJSON_CreateArray();
    for (size_t i = 0; i < n; i++)
        cJSON_AddItemToArray(a, cJSON_CreateNumber((unsigned char)s[i]));
    return a;
}

/* Chat logprobs entry: {"token","logprob","bytes","top_logprobs":[...]}. */
static cJSON *openai_chat_lp_entry(const struct api_call *c, int32_t token,
                                   const struct sampler_logprobs *lp)
{
    char piece[256];
    size_t n = openai_piece(c->tok, token, piece, sizeof piece);
    cJSON *e = cJSON_CreateObject();
    cJSON_AddStringToObject(e, "token", piece);
    cJSON_AddNumberToObject(e, "logprob", lp->chosen.logprob);
    cJSON_AddItemToObject(e, "bytes", openai_bytes(piece, n));
    cJSON *top = cJSON_AddArrayToObject(e, "top_logprobs");
    for (int i = 0; i < lp->n_top && i < c->top_logprobs; i++) {
        n = openai_piece(c->tok, lp->top[i].token, piece, sizeof piece);
        cJSON *t = cJSON_CreateObject();
        cJSON_AddStringToObject(t, "token", piece);
        cJSON_AddNumberToObject(t, "logprob", lp->top[i].logprob);
        cJSON_AddItemToObject(t, "bytes", openai_bytes(piece, n));
        cJSON_AddItemToArray(top, t);
    }
    return e;
}

/* Legacy completions logprobs: parallel arrays over the tokens given. */
static cJSON *openai_legacy_lps(const struct api_call *c, const struct api_lp *lps, int n,
                                size_t text_offset)
{
    cJSON *o = cJSON_CreateObject();
    cJSON *tokens = cJSON_AddArrayToObject(o, "tokens");
    cJSON *tlp = cJSON_AddArrayToObject(o, "token_logprobs");
    cJSON *top = cJSON_AddArrayToObject(o, "top_logprobs");
    cJSON *off = cJSON_AddArrayToObject(o, "text_offset");
    char piece[256];
    for (int i = 0; i < n; i++) {
        size_t pl = openai_piece(c->tok, lps[i].token, piece, sizeof piece);
        cJSON_AddItemToArray(tokens, cJSON_CreateString(piece));
        cJSON_AddItemToArray(tlp, cJSON_CreateNumber(lps[i].lp.chosen.logprob));
        cJSON *alt = cJSON_CreateObject();
        for (int k = 0; k < lps[i].lp.n_top && k < c->top_logprobs; k++) {
            openai_piece(c->tok, lps[i].lp.top[k].token, piece, sizeof piece);
            if (!cJSON_GetObjectItemCaseSensitive(alt, piece))
                cJSON_AddNumberToObject(alt, piece, lps[i].lp.top[k].logprob);
        }
        cJSON_AddItemToArray(top, alt);
        cJSON_AddItemToArray(off, cJSON_CreateNumber((double)text_offset));
        text_offset += pl;
    }
    return o;
}

static cJSON *openai_usage(const struct api_call *c)
{
    cJSON *u = cJSON_CreateObject();
    cJSON_AddNumberToObject(u, "prompt_tokens", c->prompt_tokens);
    cJSON_AddNumberToObject(u, "completion_tokens", c->completion_tokens);
    cJSON_AddNumberToObject(u, "total_tokens", c->prompt_tokens + c->completion_tokens);
    cJSON *d = cJSON_AddObjectToObject(u, "prompt_tokens_details");
    cJSON_AddNumberToObject(d, "cached_tokens", c->cached_tokens);
    if (c->choices[0].chat) {
        int rt = 0;
        for (int i = 0; i < c->n; i++)
            rt += c->choices[i].chat ? chatout_reasoning_tokens(c->choices[i].chat) : 0;
        cJSON *cd = cJSON_AddObjectToObject(u, "completion_tokens_details");
        cJSON_AddNumberToObject(cd, "reasoning_tokens", rt);
    }
    return u;
}

/* The envelope every response and chunk shares; choices is added empty. */
cJSON *openai_envelope(const struct api_call *c, const char *object, cJSON **choices)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "id", c->id);
    cJSON_AddStringToObject(o, "object", object);
    cJSON_AddNumberToObject(o, "created", (double)c->created);
    cJSON_AddStringToObject(o, "model", c->model_name);
    cJSON_AddStringToObject(o, "system_fingerprint", OPENAI_FINGERPRINT);
    *choices = cJSON_AddArrayToObject(o, "choices");
    return o;
}

void openai_send(struct api_call *c, cJSON *chunk)
{
    if (c->include_usage && !cJSON_GetObjectItemCaseSensitive(chunk, "usage"))
        cJSON_AddNullToObject(chunk, "usage");
    char *s = cJSON_PrintUnformatted(chunk);
    cJSON_Delete(chunk);
    if (s) {
        ws_out_sse(c->out, NULL, s, strlen(s));
        free(s);
    }
}

/* The end of a stream: error event or usage chunk, then [DONE]. */
static void openai_stream_end(struct api_call *c, const char *object)
{
    if (c->error[0]) {
        struct api_error e;
        api_error_set(&e, apireq_engine_error_status(c->error), NULL, "%s", c->error);
        size_t len = 0;
        char *s = api_error_json(API_OPENAI, &e, &len);
        if (s)
            ws_out_sse(c->out, NULL, s, len);
        free(s);
        return;
    }
    if (c->include_usage) {
        cJSON *choices;
        cJSON *chunk = openai_envelope(c, object, &choices);
        cJSON_AddItemToObject(chunk, "usage", openai_usage(c));
        openai_send(c, chunk);
    }
    ws_out_sse(c->out, NULL, "[DONE]", 6);
}

/* A non-streamed failure: the whole response is the error. */
static bool openai_error_response(struct api_call *c)
{
    if (!c->error[0])
        return false;
    struct api_error e;
    api_error_set(&e, apireq_engine_error_status(c->error), NULL, "%s", c->error);
    size_t len = 0;
    char *s = api_error_json(API_OPENAI, &e, &len);
    ws_out_start(c->out, e.status, "application/json", false);
    if (s)
        ws_out_write(c->out, s, len);
    free(s);
    return true;
}

static void openai_write_json(struct api_call *c, cJSON *body)
{
    char *s = cJSON_PrintUnformatted(body);
    cJSON_Delete(body);
    ws_out_start(c->out, s ? 200 : 500, "application/json", false);
    if (s)
        ws_out_write(c->out, s, strlen(s));
    free(s);
}

/* The envelope of a non-streamed response (object: its "object"), or NULL
 * when there is none to fill: a stream is ended (its chunks are
 * stream_object) or the error response was sent. */
static cJSON *openai_final_body(struct api_call *c, const char *stream_object, const char *object,
                                cJSON **choices)
{
    if (c->stream) {
        openai_stream_end(c, stream_object);
        return NULL;
    }
    if (openai_error_response(c))
        return NULL;
    return openai_envelope(c, object, choices);
}

/* Closes one choice of a non-streamed response: "logprobs" (lps, taken;
 * null when NULL) and "finish_reason", then item goes into choices. */
static void openai_final_choice(cJSON *choices, cJSON *item, const struct api_choice *ch,
                                cJSON *lps)
{
    if (lps)
        cJSON_AddItemToObject(item, "logprobs", lps);
    else
        cJSON_AddNullToObject(item, "logprobs");
    cJSON_AddStringToObject(item, "finish_reason", openai_finish_reason(ch));
    cJSON_AddItemToArray(choices, item);
}

/* Adds "usage" to the filled response body and sends it (takes body). */
static void openai_final_send(struct api_call *c, cJSON *body)
{
    cJSON_AddItemToObject(body, "usage", openai_usage(c));
    openai_write_json(c, body);
}

/* Sampling fields -> engine request (the caller adds prompt and stops). */
static void openai_engine_request(const struct api_model *m, const struct apireq_gen *g,
                                  struct engine_request *rq)
{
    *rq = engine_default_request();
    rq->model = m->index;
    rq->sampling = g->sp;
    /* The engine reports log-probabilities only when alternatives are asked
     * for; the chosen token's value comes with them. */
    if (g->logprobs && rq->sampling.n_logprobs < 1)
        rq->sampling.n_logprobs = 1;
    rq->n = g->n;
    rq->max_tokens = g->max_tokens;
    rq->timeout_s = g->timeout_s;
}

/* Common front of the generation routes: model ready, JSON, model id, sampling. */
static cJSON *openai_begin(struct api *a, struct ws_req *r, bool completions,
                           const struct api_model **m, struct apireq_gen *g, struct api_error *e)
{
    if (!(*m = api_model_or_503(a, r, API_OPENAI)))
        return NULL;
    size_t len;
    const char *body = ws_req_body(r, &len);
    cJSON *root = apireq_parse(body, len, e);
    const char *model = NULL;
    if (!root || apireq_string(root, "model", &model, e) < 0 || api_check_model(a, model, e) < 0 ||
        apireq_sampling(root, API_OPENAI, completions, (*m)->n_vocab, g, e) < 0) {
        api_respond_error(r, API_OPENAI, e);
        cJSON_Delete(root);
        return NULL;
    }
    return root;
}

// ---- chat completions -------------------------------------------------------------

/* One chunk of a choice with one delta field set by the caller. */
static cJSON *openai_chat_chunk(struct api_call *c, int choice, cJSON **delta, cJSON **item)
{
    cJSON *choices;
    cJSON *chunk = openai_envelope(c, "chat.completion.chunk", &choices);
    *item = cJSON_CreateObject();
    cJSON_AddNumberToObject(*item, "index", choice);
    *delta = cJSON_AddObjectToObject(*item, "delta");
    cJSON_AddItemToArray(choices, *item);
    return chunk;
}

static void openai_chat_start(struct api_call *c)
{
    if (!c->stream)
        return;
    ws_out_start(c->out, 200, "text/event-stream", true);
    for (int i = 0; i < c->n; i++) {
        cJSON *delta, *item;
        cJSON *chunk = openai_chat_chunk(c, i, &delta, &item);
        cJSON_AddStringToObject(delta, "role", "assistant");
        cJSON_AddStringToObject(delta, "content", "");
        cJSON_AddNullToObject(item, "logprobs");
        cJSON_AddNullToObject(item, "finish_reason");
        openai_send(c, chunk);
    }
}

struct openai_delta_ctx {
    struct api_call *c;
    int choice;
    const struct sampler_logprobs *lp;   /* goes with the first delta of the token */
    int32_t token;
};

/* A chatout delta as OpenAI streams it: content, reasoning_content, or
 * tool_calls (the first with id, type, name and "" arguments, then
 * argument fragments under the same index). */
static void openai_chat_delta(void *user, const struct chatout_delta *d)
{
    struct openai_delta_ctx *x = user;
    struct api_call *c = x->c;
    cJSON *delta, *item;
    cJSON *chunk = openai_chat_chunk(c, x->choice, &delta, &item);
    if (d->kind == CHATOUT_CONTENT || d->kind == CHATOUT_REASONING) {
        cJSON_AddItemToObject(delta, d->kind == CHATOUT_CONTENT ? "content" : "reasoning_content",
                              openai_string_n(d->text, d->len));
    } else {
        cJSON *tc = cJSON_AddArrayToObject(delta, "tool_calls");
        cJSON *t = cJSON_CreateObject();
        cJSON_AddNumberToObject(t, "index", d->index);
        if (d->kind == CHATOUT_CALL_START) {
            cJSON_AddStringToObject(t, "id", d->id);
            cJSON_AddStringToObject(t, "type", "function");
        }
        cJSON *f = cJSON_AddObjectToObject(t, "function");
        if (d->kind == CHATOUT_CALL_START) {
            cJSON_AddStringToObject(f, "name", d->name);
            cJSON_AddStringToObject(f, "arguments", "");
        } else {
            cJSON_AddItemToObject(f, "arguments", openai_string_n(d->text, d->len));
        }
        cJSON_AddItemToArray(tc, t);
    }
    if (x->lp && x->token >= 0) {
        cJSON *l = cJSON_AddObjectToObject(item, "logprobs");
        cJSON *content = cJSON_AddArrayToObject(l, "content");
        cJSON_AddItemToArray(content, openai_chat_lp_entry(c, x->token, x->lp));
        x->lp = NULL;
    } else {
        cJSON_AddNullToObject(item, "logprobs");
    }
    cJSON_AddNullToObject(item, "finish_reason");
    openai_send(c, chunk);
}

static void openai_chat_text(struct api_call *c, int choice, const char *text, size_t len,
                             const struct sampler_logprobs *lp, int32_t token)
{
    struct openai_delta_ctx x = { c, choice, lp, token };
    struct chatout *o = c->choices[choice].chat;
    if (o) {
        chatout_feed(o, text, len, token >= 0, c->stream ? openai_chat_delta : NULL, &x);
        /* A token that made no delta (no text, as a stray <s>, or text the
         * parser holds back) still gets its logprobs entry, in a chunk with
         * empty content, so the stream lists every generated token. */
        if (c->stream && c->logprobs && x.lp && token >= 0) {
            struct chatout_delta d = { .kind = CHATOUT_CONTENT, .text = "", .len = 0 };
            openai_chat_delta(&x, &d);
        }
        return;
    }
    if (!c->stream)
        return;
    struct chatout_delta d = { .kind = CHATOUT_CONTENT, .text = text, .len = len };
    openai_chat_delta(&x, &d);
}

static void openai_chat_choice_done(struct api_call *c, int choice)
{
    const struct api_choice *ch = &c->choices[choice];
    if (ch->chat) {
        struct openai_delta_ctx x = { c, choice, NULL, -1 };
        chatout_finish(ch->chat, c->stream && !ch->error ? openai_chat_delta : NULL, &x);
    }
    if (!c->stream || ch->error)
        return;
    cJSON *delta, *item;
    cJSON *chunk = openai_chat_chunk(c, choice, &delta, &item);
    cJSON_AddNullToObject(item, "logprobs");
    cJSON_AddStringToObject(item, "finish_reason", openai_finish_reason(ch));
    openai_send(c, chunk);
}

static void openai_chat_finish(struct api_call *c)
{
    cJSON *choices;
    cJSON *body = openai_final_body(c, "chat.completion.chunk", "chat.completion", &choices);
    if (!body)
        return;
    for (int i = 0; i < c->n; i++) {
        const struct api_choice *ch = &c->choices[i];
        cJSON *item = cJSON_CreateObject();
        cJSON_AddNumberToObject(item, "index", i);
        cJSON *msg = cJSON_AddObjectToObject(item, "message");
        cJSON_AddStringToObject(msg, "role", "assistant");
        if (ch->chat) {
            const char *content = chatout_content(ch->chat), *r = chatout_reasoning(ch->chat);
            if (!*content && chatout_n_calls(ch->chat) > 0)
                cJSON_AddNullToObject(msg, "content");
            else
                cJSON_AddStringToObject(msg, "content", content);
            if (*r)
                cJSON_AddStringToObject(msg, "reasoning_content", r);
            if (chatout_n_calls(ch->chat) > 0)
                cJSON_AddItemToObject(msg, "tool_calls", cJSON_Duplicate(chatout_calls(ch->chat), true));
        } else {
            cJSON_AddStringToObject(msg, "content", ch->text ? ch->text : "");
        }
        cJSON *l = NULL;
        if (c->logprobs) {
            l = cJSON_CreateObject();
            cJSON *content = cJSON_AddArrayToObject(l, "content");
            for (int k = 0; k < ch->n_lps; k++)
                cJSON_AddItemToArray(content, openai_chat_lp_entry(c, ch->lps[k].token,
                                                                   &ch->lps[k].lp));
        }
        openai_final_choice(choices, item, ch, l);
    }
    openai_final_send(c, body);
}

static const struct api_proto openai_chat_proto = {
    openai_chat_text, openai_chat_choice_done, openai_chat_finish,
};

/* The chat request past its images (the handler's thread, or a vision
 * worker's with r NULL): render, attach, submit. */
static int openai_chat_then(struct api_call *c, struct ws_req *r, cJSON *root,
                            const struct apireq_gen *g, struct api_images *im, struct api_error *e)
{
    const struct api_model *m = api_model(c->api);
    struct chatreq cr = { .reasoning_budget = -1 };
    struct engine_request rq;
    openai_engine_request(m, g, &rq);
    int rc = -1;
    if (chatreq_build(m, root, g, &cr, e) >= 0 && chatreq_attach(&cr, m, c, &rq, e) >= 0 &&
        (!im || !im->n || api_images_attach(api_images(c->api), m, &cr, g, im, &rq, e) >= 0)) {
        api_call_submit(c, r, &rq, openai_chat_start);
        rc = 0;
    }
    chatreq_free(&cr);
    return rc;
}

void openai_chat(struct api *a, struct ws_req *r, const char *arg)
{
    (void)arg;
    struct api_error e;
    struct apireq_gen g;
    apireq_gen_init(&g);
    const struct api_model *m;
    cJSON *root = openai_begin(a, r, false, &m, &g, &e);
    if (!root)
        goto out;
    if (mcpapi_wanted(root)) {   /* the server runs the MCP tools the model calls */
        mcpapi_chat(a, r, root, &g);
        goto out;
    }
    struct api_call *c = api_call_new(a, r, &openai_chat_proto, API_OPENAI, "chatcmpl-", &g);
    if (!c) {
        api_error_set(&e, 500, NULL, "out of memory");
        goto fail;
    }
    int rc = api_images_defer(api_images(a), c, r, &root, &g, openai_chat_then, &e);
    if (rc == 0)
        rc = openai_chat_then(c, r, root, &g, NULL, &e);
    if (rc < 0) {
        api_call_free(c);
        goto fail;
    }
    goto out;
fail:
    api_respond_error(r, API_OPENAI, &e);
out:
    apireq_gen_free(&g);
    cJSON_Delete(root);
}

// ---- completions (legacy) -----------------------------------------------------------

static void openai_cmpl_send_text(struct api_call *c, int choice, const char *text, size_t len,
                                  const struct api_lp *lp, const char *finish)
{
    cJSON *choices;
    cJSON *chunk = openai_envelope(c, "text_completion", &choices);
    cJSON *ch = cJSON_CreateObject();
    cJSON_AddItemToObject(ch, "text", openai_string_n(text, len));
    cJSON_AddNumberToObject(ch, "index", choice);
    if (lp)
        cJSON_AddItemToObject(ch, "logprobs", openai_legacy_lps(c, lp, 1, c->choices[choice].len - len));
    else
        cJSON_AddNullToObject(ch, "logprobs");
    if (finish)
        cJSON_AddStringToObject(ch, "finish_reason", finish);
    else
        cJSON_AddNullToObject(ch, "finish_reason");
    cJSON_AddItemToArray(choices, ch);
    openai_send(c, chunk);
}

static void openai_cmpl_start(struct api_call *c)
{
    if (!c->stream)
        return;
    ws_out_start(c->out, 200, "text/event-stream", true);
    if (c->echo_text)
        for (int i = 0; i < c->n; i++)
            openai_cmpl_send_text(c, i, c->echo_text, strlen(c->echo_text), NULL, NULL);
}

static void openai_cmpl_text(struct api_call *c, int choice, const char *text, size_t len,
                             const struct sampler_logprobs *lp, int32_t token)
{
    if (!c->stream)
        return;
    struct api_lp one;
    if (lp && token >= 0) {
        one.token = token;
        one.lp = *lp;
    }
    openai_cmpl_send_text(c, choice, text, len, lp && token >= 0 ? &one : NULL, NULL);
}

static void openai_cmpl_choice_done(struct api_call *c, int choice)
{
    const struct api_choice *ch = &c->choices[choice];
    if (c->stream && !ch->error)
        openai_cmpl_send_text(c, choice, "", 0, NULL, openai_finish_reason(ch));
}

static void openai_cmpl_finish(struct api_call *c)
{
    cJSON *choices;
    cJSON *body = openai_final_body(c, "text_completion", "text_completion", &choices);
    if (!body)
        return;
    size_t echo_len = c->echo_text ? strlen(c->echo_text) : 0;
    for (int i = 0; i < c->n; i++) {
        const struct api_choice *ch = &c->choices[i];
        size_t tl = echo_len + ch->len;
        char *text = malloc(tl + 1);
        if (text) {
            memcpy(text, c->echo_text ? c->echo_text : "", echo_len);
            memcpy(text + echo_len, ch->text ? ch->text : "", ch->len);
            text[tl] = 0;
        }
        cJSON *item = cJSON_CreateObject();
        cJSON_AddStringToObject(item, "text", text ? text : "");
        free(text);
        cJSON_AddNumberToObject(item, "index", i);
        openai_final_choice(choices, item, ch,
                            c->logprobs ? openai_legacy_lps(c, ch->lps, ch->n_lps, echo_len) : NULL);
    }
    openai_final_send(c, body);
}

static const struct api_proto openai_cmpl_proto = {
    openai_cmpl_text, openai_cmpl_choice_done, openai_cmpl_finish,
};

/* "prompt": a string, one-string array, token array or one token array. */
static int openai_prompt(const struct api_model *m, const cJSON *root, int32_t **ids, int *n,
                         struct api_error *e)
{
    const cJSON *p = cJSON_GetObjectItemCaseSensitive(root, "prompt");
    if (!p || cJSON_IsNull(p))
        return api_error_set(e, 400, "prompt", "'prompt' is required");
    if (cJSON_IsArray(p) && cJSON_GetArraySize(p) == 1 &&
        (cJSON_IsString(p->child) || cJSON_IsArray(p->child)))
        p = p->child;   /* a batch of one */
    if (cJSON_IsString(p))
        return api_tokenize(m->tok, p->valuestring, TOK_ADD_SPECIAL | TOK_PARSE_SPECIAL, ids, n, e);
    if (!cJSON_IsArray(p))
        return api_error_set(e, 400, "prompt", "'prompt' must be a string or an array of token ids");
    int count = cJSON_GetArraySize(p);
    if (count == 0)
        return api_error_set(e, 400, "prompt", "'prompt' is empty");
    if (!cJSON_IsNumber(p->child))
        return api_error_set(e, 400, "prompt", "'prompt' holds several prompts; send one per request");
    if (!(*ids = malloc((size_t)count * sizeof **ids)))
        return api_error_set(e, 500, NULL, "out of memory");
    int i = 0;
    const cJSON *t;
    cJSON_ArrayForEach(t, p) {
        if (!cJSON_IsNumber(t) || t->valuedouble < 0 || t->valuedouble >= m->n_vocab ||
            t->valuedouble != (double)(int32_t)t->valuedouble)
            return api_error_set(e, 400, "prompt", "'prompt[%d]' is not a token id in 0..%d", i,
                                 m->n_vocab - 1);
        (*ids)[i++] = (int32_t)t->valuedouble;
    }
    *n = count;
    return 0;
}

void openai_completions(struct api *a, struct ws_req *r, const char *arg)
{
    (void)arg;
    struct api_error e;
    struct apireq_gen g;
    apireq_gen_init(&g);
    const struct api_model *m;
    int32_t *ids = NULL;
    int n_ids = 0;
    bool echo = false;
    long best_of = 1;
    struct grammar *gram = NULL;
    cJSON *root = openai_begin(a, r, true, &m, &g, &e);
    if (!root)
        goto out;
    const cJSON *suffix = cJSON_GetObjectItemCaseSensitive(root, "suffix");
    if (suffix && !cJSON_IsNull(suffix)) {
        api_error_set(&e, 400, "suffix", "'suffix' (fill-in-the-middle) is not supported");
        goto fail;
    }
    if (apireq_bool(root, "echo", &echo, &e) < 0 ||
        apireq_int(root, "best_of", 1, 1, &best_of, &e) < 0 ||
        openai_prompt(m, root, &ids, &n_ids, &e) < 0 || api_check_context(m, n_ids, &g, &e) < 0 ||
        apireq_grammar(root, &gram, &e) < 0)
        goto fail;
    struct api_call *c = api_call_new(a, r, &openai_cmpl_proto, API_OPENAI, "cmpl-", &g);
    if (!c) {
        api_error_set(&e, 500, NULL, "out of memory");
        goto fail;
    }
    if (echo) {
        size_t need = tokenizer_decode(m->tok, ids, n_ids, false, NULL, 0);
        if ((c->echo_text = malloc(need + 1)))
            tokenizer_decode(m->tok, ids, n_ids, false, c->echo_text, need + 1);
    }
    struct engine_request rq;
    openai_engine_request(m, &g, &rq);
    rq.prompt = ids;
    rq.n_prompt = n_ids;
    rq.stop = (const char *const *)g.stop;
    rq.n_stop = g.n_stop;
    rq.grammar = gram;
    api_call_submit(c, r, &rq, openai_cmpl_start);
    goto out;
fail:
    api_respond_error(r, API_OPENAI, &e);
out:
    grammar_free(gram);
    free(ids);
    apireq_gen_free(&g);
    cJSON_Delete(root);
}

// ---- models, tokenize, detokenize --------------------------------------------------

static cJSON *openai_model_object(struct api *a, const struct api_model *m)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "id", api_served_name(a));
    cJSON_AddStringToObject(o, "object", "model");
    cJSON_AddNumberToObject(o, "created", (double)api_started_at(a));
    cJSON_AddStringToObject(o, "owned_by", "omniserve");
    if (m)
        cJSON_AddNumberToObject(o, "max_model_len", m->n_ctx);
    return o;
}

/* The Anthropic fields of a model object next to OpenAI's (type,
 * display_name, created_at as RFC 3339), so that one answer serves both SDKs'
 * models.list / retrieve (clients of either ignore the other's fields). */
static void openai_model_anthropic(cJSON *item)
{
    const cJSON *id = cJSON_GetObjectItemCaseSensitive(item, "id");
    const cJSON *created = cJSON_GetObjectItemCaseSensitive(item, "created");
    char when[32] = "1970-01-01T00:00:00Z";
    time_t t = cJSON_IsNumber(created) ? (time_t)created->valuedouble : 0;
    struct tm tm;
    if (gmtime_r(&t, &tm))
        strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", &tm);
    /* embedding models carry their own "type" (embedding, rerank): kept */
    if (!cJSON_HasObjectItem(item, "type"))
        cJSON_AddStringToObject(item, "type", "model");
    cJSON_AddStringToObject(item, "display_name", cJSON_IsString(id) ? id->valuestring : "");
    cJSON_AddStringToObject(item, "created_at", when);
}

void openai_models(struct api *a, struct ws_req *r, const char *arg)
{
    (void)arg;
    const struct api_model *m = api_model(a);
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "object", "list");
    cJSON *data = cJSON_AddArrayToObject(o, "data");
    if (m)
        cJSON_AddItemToArray(data, openai_model_object(a, m));
    embeddings_list_models(a, data, m ? api_served_name(a) : NULL);
    /* Anthropic's page fields: one page holds them all */
    cJSON *it, *last = NULL;
    cJSON_ArrayForEach(it, data) {
        openai_model_anthropic(it);
        last = it;
    }
    cJSON_AddBoolToObject(o, "has_more", false);
    const cJSON *first_id = cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(data, 0), "id");
    const cJSON *last_id = cJSON_GetObjectItemCaseSensitive(last, "id");
    if (cJSON_IsString(first_id) && cJSON_IsString(last_id)) {
        cJSON_AddStringToObject(o, "first_id", first_id->valuestring);
        cJSON_AddStringToObject(o, "last_id", last_id->valuestring);
    } else {
        cJSON_AddNullToObject(o, "first_id");
        cJSON_AddNullToObject(o, "last_id");
    }
    api_respond_json(r, 200, o);
}

void openai_model(struct api *a, struct ws_req *r, const char *arg)
{
    const struct api_model *m = api_model(a);
    if ((!m || strcmp(arg, api_served_name(a)) != 0) && embeddings_has_model(a, arg)) {
        cJSON *list = cJSON_CreateArray(), *hit = NULL;
        embeddings_list_models(a, list, NULL);
        for (cJSON *it = list ? list->child : NULL; it && !hit; it = it->next)
            if (!strcmp(cJSON_GetObjectItemCaseSensitive(it, "id")->valuestring, arg))
                hit = cJSON_DetachItemViaPointer(list, it);
        cJSON_Delete(list);
        if (hit)
            openai_model_anthropic(hit);
        api_respond_json(r, 200, hit);
        return;
    }
    if (!m || strcmp(arg, api_served_name(a)) != 0) {
        struct api_error e;
        api_error_set(&e, 404, "model", "The model '%s' does not exist", arg);
        e.code = "model_not_found";
        api_respond_error(r, API_OPENAI, &e);
        return;
    }
    cJSON *o = openai_model_object(a, m);
    openai_model_anthropic(o);
    api_respond_json(r, 200, o);
}

/* {"prompt": TEXT} or {"messages": [...]} (rendered with the chat template,
 * with "tools" and the template fields of chat completions);
 * "add_special_tokens" (default true). */
void openai_tokenize(struct api *a, struct ws_req *r, const char *arg)
{
    (void)arg;
    struct api_error e;
    const struct api_model *m = api_model_or_503(a, r, API_OPENAI);
    if (!m)
        return;
    size_t len;
    const char *body = ws_req_body(r, &len);
    cJSON *root = apireq_parse(body, len, &e);
    struct chatreq cr = { .reasoning_budget = -1 };
    int n_ids = 0;
    int32_t *ids = NULL;
    bool add_special = true;
    const char *prompt = NULL;
    if (!root || apireq_bool(root, "add_special_tokens", &add_special, &e) < 0 ||
        apireq_string(root, "prompt", &prompt, &e) < 0)
        goto fail;
    if (prompt) {
        if (api_tokenize(m->tok, prompt, (add_special ? TOK_ADD_SPECIAL : 0) | TOK_PARSE_SPECIAL,
                         &ids, &n_ids, &e) < 0)
            goto fail;
    } else if (cJSON_GetObjectItemCaseSensitive(root, "messages")) {
        if (chatreq_render(m, root, &cr, &e) < 0)
            goto fail;
        ids = cr.ids;
        n_ids = cr.n_ids;
        cr.ids = NULL;
    } else {
        api_error_set(&e, 400, "prompt", "give 'prompt' (a string) or 'messages'");
        goto fail;
    }
    cJSON *o = cJSON_CreateObject();
    cJSON_AddItemToObject(o, "tokens", cJSON_CreateIntArray(ids, n_ids));
    cJSON_AddNumberToObject(o, "count", n_ids);
    cJSON_AddNumberToObject(o, "max_model_len", m->n_ctx);
    api_respond_json(r, 200, o);
    goto out;
fail:
    api_respond_error(r, API_OPENAI, &e);
out:
    free(ids);
    chatreq_free(&cr);
    cJSON_Delete(root);
}

/* {"tokens": [ids]} -> {"prompt": TEXT} */
void openai_detokenize(struct api *a, struct ws_req *r, const char *arg)
{
    (void)arg;
    struct api_error e;
    const struct api_model *m = api_model_or_503(a, r, API_OPENAI);
    if (!m)
        return;
    size_t len;
    const char *body = ws_req_body(r, &len);
    cJSON *root = apireq_parse(body, len, &e);
    int32_t *ids = NULL;
    char *text = NULL;
    if (!root)
        goto fail;
    const cJSON *toks = cJSON_GetObjectItemCaseSensitive(root, "tokens");
    if (!cJSON_IsArray(toks)) {
        api_error_set(&e, 400, "tokens", "'tokens' must be an array of token ids");
        goto fail;
    }
    int n = cJSON_GetArraySize(toks), i = 0;
    if (!(ids = malloc((size_t)(n ? n : 1) * sizeof *ids))) {
        api_error_set(&e, 500, NULL, "out of memory");
        goto fail;
    }
    const cJSON *t;
    cJSON_ArrayForEach(t, toks) {
        if (!cJSON_IsNumber(t) || t->valuedouble < 0 || t->valuedouble >= m->n_vocab ||
            t->valuedouble != (double)(int32_t)t->valuedouble) {
            api_error_set(&e, 400, "tokens", "'tokens[%d]' is not a token id in 0..%d", i,
                          m->n_vocab - 1);
            goto fail;
        }
        ids[i++] = (int32_t)t->valuedouble;
    }
    size_t need = tokenizer_decode(m->tok, ids, n, false, NULL, 0);
    if (!(text = malloc(need + 1))) {
        api_error_set(&e, 500, NULL, "out of memory");
        goto fail;
    }
    tokenizer_decode(m->tok, ids, n, false, text, need + 1);
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "prompt", text);
    api_respond_json(r, 200, o);
    goto out;
fail:
    api_respond_error(r, API_OPENAI, &e);
out:
    free(text);
    free(ids);
    cJSON_Delete(root);
}
