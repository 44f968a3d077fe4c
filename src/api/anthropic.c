/* anthropic.c - Anthropic-compatible /v1/messages and count_tokens. A
 * streamed answer follows Anthropic's event sequence: message_start,
 * content_block_start, ping, content_block_delta..., content_block_stop,
 * message_delta (stop_reason and output usage), message_stop. The SDK reads
 * the event names, so every event carries both "event:" and its "type". */
#include "src/api/anthropic.h"

#include "src/api/api.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void anthropic_event(struct api_call *c, const char *name, cJSON *data)
{
    char *s = cJSON_PrintUnformatted(data);
    cJSON_Delete(data);
    if (s) {
        ws_out_sse(c->out, name, s, strlen(s));
        free(s);
    }
}

static cJSON *anthropic_typed(const char *type)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "type", type);
    return o;
}

static const char *anthropic_stop_reason(const struct api_call *c, const char **sequence)
{
    const struct api_choice *ch = &c->choices[0];
    *sequence = NULL;
    switch (ch->finish) {
    case ENGINE_FINISH_LENGTH: return "max_tokens";
    case ENGINE_FINISH_CANCELLED: return "cancelled";
    case ENGINE_FINISH_TIMEOUT: return "timeout";
    default:
        /* The engine's stop list is the client's stop_sequences followed by
         * the chat format's end-of-turn text, which is a natural end. */
        if (ch->stop_index >= 0 && ch->stop_index < c->n_stops) {
            *sequence = c->stops[ch->stop_index];
            return "stop_sequence";
        }
        return "end_turn";
    }
}

static cJSON *anthropic_usage(const struct api_call *c, bool output_only)
{
    cJSON *u = cJSON_CreateObject();
    if (!output_only) {
        cJSON_AddNumberToObject(u, "input_tokens", c->prompt_tokens - c->cached_tokens);
        cJSON_AddNumberToObject(u, "cache_creation_input_tokens", 0);
        cJSON_AddNumberToObject(u, "cache_read_input_tokens", c->cached_tokens);
    }
    cJSON_AddNumberToObject(u, "output_tokens", c->completion_tokens);
    return u;
}

/* The message object; content filled only when the answer is complete. */
static cJSON *anthropic_message(const struct api_call *c, bool complete)
{
    cJSON *m = anthropic_typed("message");
    cJSON_AddStringToObject(m, "id", c->id);
    cJSON_AddStringToObject(m, "role", "assistant");
    cJSON_AddStringToObject(m, "model", c->model_name);
    cJSON *content = cJSON_AddArrayToObject(m, "content");
    if (complete) {
        cJSON *block = anthropic_typed("text");
        cJSON_AddStringToObject(block, "text", c->choices[0].text ? c->choices[0].text : "");
        cJSON_AddItemToArray(content, block);
        const char *seq;
        cJSON_AddStringToObject(m, "stop_reason", anthropic_stop_reason(c, &seq));
        if (seq)
            cJSON_AddStringToObject(m, "stop_sequence", seq);
        else
            cJSON_AddNullToObject(m, "stop_sequence");
        cJSON_AddItemToObject(m, "usage", anthropic_usage(c, false));
    } else {
        cJSON_AddNullToObject(m, "stop_reason");
        cJSON_AddNullToObject(m, "stop_sequence");
        /* Before the end only the prompt side is known. */
        cJSON *u = cJSON_AddObjectToObject(m, "usage");
        cJSON_AddNumberToObject(u, "input_tokens", c->prompt_tokens);
        cJSON_AddNumberToObject(u, "output_tokens", 0);
    }
    return m;
}

static void anthropic_start(struct api_call *c)
{
    if (!c->stream)
        return;
    ws_out_start(c->out, 200, "text/event-stream", true);
    cJSON *ms = anthropic_typed("message_start");
    cJSON_AddItemToObject(ms, "message", anthropic_message(c, false));
    anthropic_event(c, "message_start", ms);
    cJSON *bs = anthropic_typed("content_block_start");
    cJSON_AddNumberToObject(bs, "index", 0);
    cJSON *block = anthropic_typed("text");
    cJSON_AddStringToObject(block, "text", "");
    cJSON_AddItemToObject(bs, "content_block", block);
    anthropic_event(c, "content_block_start", bs);
    anthropic_event(c, "ping", anthropic_typed("ping"));
}

static void anthropic_text(struct api_call *c, int choice, const char *text, size_t len,
                           const struct sampler_logprobs *lp, int32_t token)
{
    (void)choice;
    (void)lp;
    (void)token;
    if (!c->stream || len == 0)
        return;
    char *t = strndup(text, len);
    if (!t)
        return;
    cJSON *ev = anthropic_typed("content_block_delta");
    cJSON_AddNumberToObject(ev, "index", 0);
    cJSON *delta = anthropic_typed("text_delta");
    cJSON_AddStringToObject(delta, "text", t);
    cJSON_AddItemToObject(ev, "delta", delta);
    free(t);
    anthropic_event(c, "content_block_delta", ev);
}

static void anthropic_choice_done(struct api_call *c, int choice)
{
    (void)c;
    (void)choice;   /* one choice: everything happens in finish */
}

static void anthropic_finish(struct api_call *c)
{
    struct api_error e;
    if (c->error[0])
        api_error_set(&e, 500, NULL, "%s", c->error);
    if (!c->stream) {
        if (c->error[0]) {
            size_t len = 0;
            char *s = api_error_json(API_ANTHROPIC, &e, &len);
            ws_out_start(c->out, 500, "application/json", false);
            if (s)
                ws_out_write(c->out, s, len);
            free(s);
            return;
        }
        char *s = NULL;
        cJSON *m = anthropic_message(c, true);
        s = cJSON_PrintUnformatted(m);
        cJSON_Delete(m);
        ws_out_start(c->out, s ? 200 : 500, "application/json", false);
        if (s)
            ws_out_write(c->out, s, strlen(s));
        free(s);
        return;
    }
    if (c->error[0]) {
        size_t len = 0;
        char *s = api_error_json(API_ANTHROPIC, &e, &len);
        if (s)
            ws_out_sse(c->out, "error", s, len);
        free(s);
        return;
    }
    cJSON *bs = anthropic_typed("content_block_stop");
    cJSON_AddNumberToObject(bs, "index", 0);
    anthropic_event(c, "content_block_stop", bs);
    cJSON *md = anthropic_typed("message_delta");
    cJSON *delta = cJSON_AddObjectToObject(md, "delta");
    const char *seq;
    cJSON_AddStringToObject(delta, "stop_reason", anthropic_stop_reason(c, &seq));
    if (seq)
        cJSON_AddStringToObject(delta, "stop_sequence", seq);
    else
        cJSON_AddNullToObject(delta, "stop_sequence");
    cJSON_AddItemToObject(md, "usage", anthropic_usage(c, true));
    anthropic_event(c, "message_delta", md);
    anthropic_event(c, "message_stop", anthropic_typed("message_stop"));
}

static const struct api_proto anthropic_proto = {
    anthropic_text, anthropic_choice_done, anthropic_finish,
};

/* system + messages -> chat messages; texts[] holds the malloc'd contents. */
static int anthropic_messages_of(const cJSON *root, struct chat_message **out, char ***texts,
                                 int *n, struct api_error *e)
{
    const cJSON *msgs = cJSON_GetObjectItemCaseSensitive(root, "messages");
    if (!cJSON_IsArray(msgs) || cJSON_GetArraySize(msgs) == 0)
        return api_error_set(e, 400, "messages", "'messages' must be a non-empty array");
    int count = cJSON_GetArraySize(msgs) + 1;
    *n = 0;
    *out = calloc((size_t)count, sizeof **out);
    *texts = calloc((size_t)count, sizeof **texts);
    if (!*out || !*texts)
        return api_error_set(e, 500, NULL, "out of memory");
    const cJSON *sys = cJSON_GetObjectItemCaseSensitive(root, "system");
    if (sys && !cJSON_IsNull(sys)) {
        if (apireq_text_content(sys, "system", &(*texts)[0], e) < 0)
            return -1;
        (*out)[0] = (struct chat_message){ "system", (*texts)[0] };
        *n = 1;
    }
    const cJSON *m;
    int i = 0;
    cJSON_ArrayForEach(m, msgs) {
        char field[64];
        snprintf(field, sizeof field, "messages[%d]", i);
        const cJSON *role = cJSON_GetObjectItemCaseSensitive(m, "role");
        if (!cJSON_IsObject(m) || !cJSON_IsString(role) ||
            (strcmp(role->valuestring, "user") != 0 && strcmp(role->valuestring, "assistant") != 0))
            return api_error_set(e, 400, field, "%s.role: must be \"user\" or \"assistant\"", field);
        snprintf(field, sizeof field, "messages[%d].content", i);
        const cJSON *content = cJSON_GetObjectItemCaseSensitive(m, "content");
        if (!content || cJSON_IsNull(content))
            return api_error_set(e, 400, field, "%s: field required", field);
        if (apireq_text_content(content, field, &(*texts)[*n], e) < 0)
            return -1;
        (*out)[*n] = (struct chat_message){
            !strcmp(role->valuestring, "user") ? "user" : "assistant", (*texts)[*n]
        };
        (*n)++;
        i++;
    }
    return 0;
}

static void anthropic_free_texts(char **texts, int n)
{
    for (int i = 0; texts && i < n; i++)
        free(texts[i]);
    free(texts);
}

/* Common front: model ready, JSON, model id, messages -> prompt ids. */
static cJSON *anthropic_begin(struct api *a, struct ws_req *r, const struct api_model **m,
                              int32_t **ids, int *n_ids, struct api_error *e)
{
    if (!(*m = api_model_or_503(a, r, API_ANTHROPIC)))
        return NULL;
    size_t len;
    const char *body = ws_req_body(r, &len);
    cJSON *root = apireq_parse(body, len, e);
    const char *model = NULL;
    struct chat_message *msgs = NULL;
    char **texts = NULL;
    int n_msgs = 0;
    int rc = -1;
    if (root && apireq_string(root, "model", &model, e) >= 0 && api_check_model(a, model, e) >= 0 &&
        anthropic_messages_of(root, &msgs, &texts, &n_msgs, e) >= 0)
        rc = api_chat_prompt(*m, msgs, n_msgs, ids, n_ids, e);
    free(msgs);
    anthropic_free_texts(texts, n_msgs);
    if (rc < 0) {
        api_respond_error(r, API_ANTHROPIC, e);
        cJSON_Delete(root);
        return NULL;
    }
    return root;
}

void anthropic_messages(struct api *a, struct ws_req *r, const char *arg)
{
    (void)arg;
    struct api_error e;
    struct apireq_gen g;
    apireq_gen_init(&g);
    const struct api_model *m;
    int32_t *ids = NULL;
    int n_ids = 0;
    const char **stops = NULL;
    cJSON *root = anthropic_begin(a, r, &m, &ids, &n_ids, &e);
    if (!root)
        goto out;
    if (apireq_sampling(root, API_ANTHROPIC, false, m->n_vocab, &g, &e) < 0 ||
        api_check_context(m, n_ids, &g, &e) < 0)
        goto fail;
    if (!(stops = calloc((size_t)g.n_stop + 1, sizeof *stops))) {
        api_error_set(&e, 500, NULL, "out of memory");
        goto fail;
    }
    for (int i = 0; i < g.n_stop; i++)
        stops[i] = g.stop[i];
    stops[g.n_stop] = chat_format_end_of_turn(m->fmt);
    struct api_call *c = api_call_new(a, r, &anthropic_proto, API_ANTHROPIC, "msg_", &g);
    if (!c) {
        api_error_set(&e, 500, NULL, "out of memory");
        goto fail;
    }
    c->prompt_tokens = n_ids;   /* message_start reports it before the engine does */
    struct engine_request rq = engine_default_request();
    rq.model = m->index;
    rq.prompt = ids;
    rq.n_prompt = n_ids;
    rq.sampling = g.sp;
    rq.max_tokens = g.max_tokens;
    rq.stop = stops;
    rq.n_stop = g.n_stop + 1;
    rq.timeout_s = g.timeout_s;
    api_call_submit(c, r, &rq, anthropic_start);
    goto out;
fail:
    api_respond_error(r, API_ANTHROPIC, &e);
out:
    free(stops);
    free(ids);
    apireq_gen_free(&g);
    cJSON_Delete(root);
}

void anthropic_count_tokens(struct api *a, struct ws_req *r, const char *arg)
{
    (void)arg;
    struct api_error e;
    const struct api_model *m;
    int32_t *ids = NULL;
    int n_ids = 0;
    cJSON *root = anthropic_begin(a, r, &m, &ids, &n_ids, &e);
    if (!root)
        return;
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "input_tokens", n_ids);
    api_respond_json(r, 200, o);
    free(ids);
    cJSON_Delete(root);
}
