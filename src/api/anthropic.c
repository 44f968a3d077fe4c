/* anthropic.c - Anthropic-compatible /v1/messages and count_tokens. The
 * request is translated into the OpenAI shape that chatreq.h renders with
 * the model's template (tool_use -> tool_calls, tool_result -> tool turns,
 * system turns in place or folded into the system prompt, thinking ->
 * enable_thinking and a budget, output_config -> reasoning_effort and
 * response_format); the answer's deltas become thinking, text and tool_use
 * blocks. A stream follows Anthropic's event sequence: message_start,
 * content_block_start, ping, content_block_delta..., content_block_stop (per
 * block), message_delta (stop_reason and usage), message_stop. The SDK reads
 * the event names, so every event carries both "event:" and its "type".
 * Agent clients (Claude Code) send fields this server has no use for
 * (context_management, metadata): they are ignored, each name logged once. */
#include "src/api/anthropic.h"

#include "src/api/api.h"
#include "src/api/images.h"
#include "src/core/omni.h"

#include <cjson/cJSON.h>
#include <ctype.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static cJSON *anthropic_typed(const char *type)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "type", type);
    return o;
}

/* A string item from bytes that are not NUL-terminated. */
static cJSON *anthropic_string_n(const char *s, size_t len)
{
    char *t = strndup(s, len);
    cJSON *item = cJSON_CreateString(t ? t : "");
    free(t);
    return item;
}

// ---- content blocks ---------------------------------------------------------------

enum anthropic_block { AB_NONE, AB_TEXT, AB_THINKING, AB_TOOL_USE };

struct anthropic_blocks {
    anthropic_event_fn fn;
    void *user;
    cJSON *content;          /* finished blocks */
    enum anthropic_block open;
    int index;               /* of the open block (= finished blocks before it) */
    char *buf;               /* the open block's text, thinking or input JSON */
    size_t len, cap;
    char *ws;                /* whitespace held until a text block has a reason to open */
    size_t ws_len, ws_cap;
    char id[64], name[128];  /* the open tool_use block's */
    bool tool_use;
    int max_tokens;          /* the request's; fewer at a length stop: the context ended */
};

static void anthropic_emit(struct anthropic_blocks *b, const char *name, cJSON *data)
{
    if (b->fn)
        b->fn(b->user, name, data);
    else
        cJSON_Delete(data);
}

static void anthropic_append(char **s, size_t *len, size_t *cap, const char *t, size_t n)
{
    if (*len + n + 1 > *cap) {
        size_t nc = *cap ? *cap * 2 : 256;
        while (nc < *len + n + 1)
            nc *= 2;
        char *ns = realloc(*s, nc);
        if (!ns)
            return;   /* the block loses text rather than the server crashing */
        *s = ns;
        *cap = nc;
    }
    memcpy(*s + *len, t, n);
    *len += n;
    (*s)[*len] = 0;
}

struct anthropic_blocks *anthropic_blocks_new(anthropic_event_fn fn, void *user)
{
    struct anthropic_blocks *b = calloc(1, sizeof *b);
    if (!b)
        return NULL;
    b->fn = fn;
    b->user = user;
    if (!(b->content = cJSON_CreateArray())) {
        free(b);
        return NULL;
    }
    return b;
}

void anthropic_blocks_free(struct anthropic_blocks *b)
{
    if (!b)
        return;
    cJSON_Delete(b->content);
    free(b->buf);
    free(b->ws);
    free(b);
}

static void anthropic_delta_event(struct anthropic_blocks *b, const char *type, const char *key,
                                  cJSON *value)
{
    cJSON *ev = anthropic_typed("content_block_delta");
    cJSON_AddNumberToObject(ev, "index", b->index);
    cJSON *delta = anthropic_typed(type);
    cJSON_AddItemToObject(delta, key, value);
    cJSON_AddItemToObject(ev, "delta", delta);
    anthropic_emit(b, "content_block_delta", ev);
}

/* The open block's final form, added to the content, and its stop event.
 * Thinking blocks end with a signature_delta, as the API sends them; the
 * signature is empty (nothing here can be verified by a client anyway). */
static void anthropic_close(struct anthropic_blocks *b)
{
    if (b->open == AB_NONE)
        return;
    const char *text = b->buf ? b->buf : "";
    cJSON *block;
    if (b->open == AB_TEXT) {
        block = anthropic_typed("text");
        cJSON_AddStringToObject(block, "text", text);
    } else if (b->open == AB_THINKING) {
        anthropic_delta_event(b, "signature_delta", "signature", cJSON_CreateString(""));
        block = anthropic_typed("thinking");
        cJSON_AddStringToObject(block, "thinking", text);
        cJSON_AddStringToObject(block, "signature", "");
    } else {
        block = anthropic_typed("tool_use");
        cJSON_AddStringToObject(block, "id", b->id);
        cJSON_AddStringToObject(block, "name", b->name);
        cJSON *input = cJSON_Parse(text);
        if (!cJSON_IsObject(input)) {
            cJSON_Delete(input);
            input = cJSON_CreateObject();
        }
        cJSON_AddItemToObject(block, "input", input);
    }
    cJSON_AddItemToArray(b->content, block);
    cJSON *ev = anthropic_typed("content_block_stop");
    cJSON_AddNumberToObject(ev, "index", b->index);
    anthropic_emit(b, "content_block_stop", ev);
    b->open = AB_NONE;
    b->index++;
    b->len = 0;
    if (b->buf)
        b->buf[0] = 0;
}

/* Close what is open and start a block of kind (its start event carries the
 * empty form of the block). */
static void anthropic_open(struct anthropic_blocks *b, enum anthropic_block kind)
{
    anthropic_close(b);
    cJSON *block;
    if (kind == AB_TEXT) {
        block = anthropic_typed("text");
        cJSON_AddStringToObject(block, "text", "");
    } else if (kind == AB_THINKING) {
        block = anthropic_typed("thinking");
        cJSON_AddStringToObject(block, "thinking", "");
        cJSON_AddStringToObject(block, "signature", "");
    } else {
        block = anthropic_typed("tool_use");
        cJSON_AddStringToObject(block, "id", b->id);
        cJSON_AddStringToObject(block, "name", b->name);
        cJSON_AddObjectToObject(block, "input");
        b->tool_use = true;
    }
    cJSON *ev = anthropic_typed("content_block_start");
    cJSON_AddNumberToObject(ev, "index", b->index);
    cJSON_AddItemToObject(ev, "content_block", block);
    anthropic_emit(b, "content_block_start", ev);
    b->open = kind;
    b->ws_len = 0;   /* whitespace between blocks is not an answer */
}

static void anthropic_text_delta(struct anthropic_blocks *b, const char *text, size_t len)
{
    if (b->open != AB_TEXT) {
        size_t k = 0;
        while (k < len && isspace((unsigned char)text[k]))
            k++;
        if (k == len) {
            anthropic_append(&b->ws, &b->ws_len, &b->ws_cap, text, len);
            return;
        }
        size_t held = b->ws_len;
        char *ws = held ? strndup(b->ws, held) : NULL;
        anthropic_open(b, AB_TEXT);
        if (ws) {
            anthropic_append(&b->buf, &b->len, &b->cap, ws, held);
            anthropic_delta_event(b, "text_delta", "text", anthropic_string_n(ws, held));
            free(ws);
        }
    }
    anthropic_append(&b->buf, &b->len, &b->cap, text, len);
    anthropic_delta_event(b, "text_delta", "text", anthropic_string_n(text, len));
}

void anthropic_blocks_delta(void *blocks, const struct chatout_delta *d)
{
    struct anthropic_blocks *b = blocks;
    switch (d->kind) {
    case CHATOUT_CONTENT:
        anthropic_text_delta(b, d->text, d->len);
        break;
    case CHATOUT_REASONING:
        if (b->open != AB_THINKING)
            anthropic_open(b, AB_THINKING);
        anthropic_append(&b->buf, &b->len, &b->cap, d->text, d->len);
        anthropic_delta_event(b, "thinking_delta", "thinking", anthropic_string_n(d->text, d->len));
        break;
    case CHATOUT_CALL_START:
        anthropic_close(b);
        /* call_XXXX -> toolu_XXXX: Anthropic's id prefix on the same random part */
        snprintf(b->id, sizeof b->id, "toolu_%s",
                 strncmp(d->id, "call_", 5) ? d->id : d->id + 5);
        snprintf(b->name, sizeof b->name, "%s", d->name);
        anthropic_open(b, AB_TOOL_USE);
        break;
    case CHATOUT_CALL_ARGS:
        if (b->open != AB_TOOL_USE)
            break;
        anthropic_append(&b->buf, &b->len, &b->cap, d->text, d->len);
        anthropic_delta_event(b, "input_json_delta", "partial_json",
                              anthropic_string_n(d->text, d->len));
        break;
    }
}

void anthropic_blocks_end(struct anthropic_blocks *b)
{
    if (b->open == AB_NONE && b->index == 0) {
        char *ws = b->ws_len ? strndup(b->ws, b->ws_len) : NULL;
        anthropic_open(b, AB_TEXT);
        if (ws) {
            anthropic_text_delta(b, ws, strlen(ws));
            free(ws);
        }
    }
    anthropic_close(b);
}

const cJSON *anthropic_blocks_content(const struct anthropic_blocks *b) { return b->content; }
bool anthropic_blocks_tool_use(const struct anthropic_blocks *b) { return b->tool_use; }

// ---- responses ------------------------------------------------------------------

static void anthropic_event(struct api_call *c, const char *name, cJSON *data)
{
    char *s = cJSON_PrintUnformatted(data);
    cJSON_Delete(data);
    if (s) {
        ws_out_sse(c->out, name, s, strlen(s));
        free(s);
    }
}

/* The blocks' events on the wire; ping follows the first block's start, as
 * the API sends it. */
static void anthropic_sink(void *user, const char *name, cJSON *data)
{
    struct api_call *c = user;
    bool first_start = !c->state && !strcmp(name, "content_block_start");
    anthropic_event(c, name, data);
    if (first_start) {
        c->state = 1;
        anthropic_event(c, "ping", anthropic_typed("ping"));
    }
}

static const char *anthropic_stop_reason(const struct api_call *c, const char **sequence)
{
    const struct api_choice *ch = &c->choices[0];
    *sequence = NULL;
    switch (ch->finish) {
    case ENGINE_FINISH_LENGTH:
        /* max_tokens past the context is clamped: an answer that ends short
         * of it ran out of context, which the API reports by its own name */
        return ch->tokens < ((const struct anthropic_blocks *)c->proto_state)->max_tokens
                   ? "model_context_window_exceeded" : "max_tokens";
    case ENGINE_FINISH_CANCELLED: return "cancelled";
    case ENGINE_FINISH_TIMEOUT: return "timeout";
    default:
        /* The engine's stop list is the client's stop_sequences followed by
         * the chat format's end-of-turn text, which is a natural end. */
        if (ch->stop_index >= 0 && ch->stop_index < c->n_stops) {
            *sequence = c->stops[ch->stop_index];
            return "stop_sequence";
        }
        return anthropic_blocks_tool_use(c->proto_state) ? "tool_use" : "end_turn";
    }
}

/* The same four fields in message_start, message_delta and a whole message,
 * as the API sends them: input_tokens counts the prompt tokens not read from
 * the prefix cache. message_start has what is known when the engine takes
 * the request (output 0); message_delta the final counts, which the SDKs
 * copy over the start's. */
static cJSON *anthropic_usage(const struct api_call *c)
{
    cJSON *u = cJSON_CreateObject();
    cJSON_AddNumberToObject(u, "input_tokens", c->prompt_tokens - c->cached_tokens);
    cJSON_AddNumberToObject(u, "cache_creation_input_tokens", 0);
    cJSON_AddNumberToObject(u, "cache_read_input_tokens", c->cached_tokens);
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
    if (complete) {
        cJSON_AddItemToObject(m, "content", cJSON_Duplicate(anthropic_blocks_content(c->proto_state), true));
        const char *seq;
        cJSON_AddStringToObject(m, "stop_reason", anthropic_stop_reason(c, &seq));
        if (seq)
            cJSON_AddStringToObject(m, "stop_sequence", seq);
        else
            cJSON_AddNullToObject(m, "stop_sequence");
        cJSON_AddItemToObject(m, "usage", anthropic_usage(c));
    } else {
        cJSON_AddArrayToObject(m, "content");
        cJSON_AddNullToObject(m, "stop_reason");
        cJSON_AddNullToObject(m, "stop_sequence");
        cJSON_AddItemToObject(m, "usage", anthropic_usage(c));
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
}

static void anthropic_text(struct api_call *c, int choice, const char *text, size_t len,
                           const struct sampler_logprobs *lp, int32_t token)
{
    (void)lp;
    chatout_feed(c->choices[choice].chat, text, len, token >= 0, anthropic_blocks_delta,
                 c->proto_state);
}

static void anthropic_choice_done(struct api_call *c, int choice)
{
    if (c->choices[choice].error)
        return;
    chatout_finish(c->choices[choice].chat, anthropic_blocks_delta, c->proto_state);
    anthropic_blocks_end(c->proto_state);
}

static void anthropic_finish(struct api_call *c)
{
    struct api_error e;
    if (c->error[0])
        api_error_set(&e, apireq_engine_error_status(c->error), NULL, "%s", c->error);
    if (!c->stream) {
        if (c->error[0]) {
            size_t len = 0;
            char *s = api_error_json(API_ANTHROPIC, &e, &len);
            ws_out_start(c->out, e.status, "application/json", false);
            if (s)
                ws_out_write(c->out, s, len);
            free(s);
            return;
        }
        cJSON *m = anthropic_message(c, true);
        char *s = cJSON_PrintUnformatted(m);
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
    cJSON *md = anthropic_typed("message_delta");
    cJSON *delta = cJSON_AddObjectToObject(md, "delta");
    const char *seq;
    cJSON_AddStringToObject(delta, "stop_reason", anthropic_stop_reason(c, &seq));
    if (seq)
        cJSON_AddStringToObject(delta, "stop_sequence", seq);
    else
        cJSON_AddNullToObject(delta, "stop_sequence");
    cJSON_AddItemToObject(md, "usage", anthropic_usage(c));
    anthropic_event(c, "message_delta", md);
    anthropic_event(c, "message_stop", anthropic_typed("message_stop"));
}

static const struct api_proto anthropic_proto = {
    anthropic_text, anthropic_choice_done, anthropic_finish,
};

// ---- requests -----------------------------------------------------------------------

/* Growing text of one translated message. */
struct anthropic_text {
    char *s;
    size_t len, cap;
};

static void anthropic_text_add(struct anthropic_text *t, const char *s)
{
    if (t->len)
        anthropic_append(&t->s, &t->len, &t->cap, "\n", 1);
    anthropic_append(&t->s, &t->len, &t->cap, s, strlen(s));
}

static cJSON *anthropic_chat_message(cJSON *msgs, const char *role, const char *content)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "role", role);
    cJSON_AddStringToObject(o, "content", content ? content : "");
    cJSON_AddItemToArray(msgs, o);
    return o;
}

/* The text gathered so far as a message of role; the text starts over. */
static cJSON *anthropic_flush(cJSON *msgs, const char *role, struct anthropic_text *t)
{
    cJSON *o = anthropic_chat_message(msgs, role, t->s);
    t->len = 0;
    if (t->s)
        t->s[0] = 0;
    return o;
}

/* The name of the tool call id earlier in msgs (templates may print it with
 * the result), or NULL. */
static const char *anthropic_call_name(const cJSON *msgs, const char *id)
{
    const cJSON *m, *c;
    cJSON_ArrayForEach(m, msgs)
        cJSON_ArrayForEach(c, cJSON_GetObjectItemCaseSensitive(m, "tool_calls")) {
            const cJSON *cid = cJSON_GetObjectItemCaseSensitive(c, "id");
            if (cJSON_IsString(cid) && !strcmp(cid->valuestring, id))
                return cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(c, "function"),
                                                        "name")->valuestring;
        }
    return NULL;
}

/* One message's content blocks: text (joined by newlines), and for the user
 * tool_result (-> a tool turn, in order), for the assistant tool_use (->
 * tool_calls) and thinking (-> reasoning_content). */
static int anthropic_blocks_of(const cJSON *content, bool user, int i, cJSON *msgs,
                               struct api_error *e)
{
    struct anthropic_text text = { 0 }, thinking = { 0 };
    cJSON *calls = cJSON_CreateArray();
    const cJSON *b;
    int j = 0, rc = -1;
    cJSON_ArrayForEach(b, content) {
        char field[96];
        snprintf(field, sizeof field, "messages[%d].content[%d]", i, j++);
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(b, "type");
        if (!cJSON_IsObject(b) || !cJSON_IsString(type)) {
            api_error_set(e, 400, field, "%s: must be an object with a 'type'", field);
            goto out;
        }
        const char *ty = type->valuestring;
        const cJSON *v;
        if (!strcmp(ty, "text")) {
            if (!cJSON_IsString(v = cJSON_GetObjectItemCaseSensitive(b, "text"))) {
                api_error_set(e, 400, field, "%s.text: must be a string", field);
                goto out;
            }
            anthropic_text_add(&text, v->valuestring);
        } else if (user && !strcmp(ty, "tool_result")) {
            const cJSON *id = cJSON_GetObjectItemCaseSensitive(b, "tool_use_id");
            char *result = NULL;
            char cf[112];
            snprintf(cf, sizeof cf, "%s.content", field);
            if (!cJSON_IsString(id)) {
                api_error_set(e, 400, field, "%s.tool_use_id: must be a string", field);
                goto out;
            }
            if (apireq_text_content(cJSON_GetObjectItemCaseSensitive(b, "content"), cf, &result, e) < 0)
                goto out;
            if (text.len)
                anthropic_flush(msgs, "user", &text);
            cJSON *o = anthropic_chat_message(msgs, "tool", result);
            free(result);
            cJSON_AddStringToObject(o, "tool_call_id", id->valuestring);
            const char *name = anthropic_call_name(msgs, id->valuestring);
            if (name)
                cJSON_AddStringToObject(o, "name", name);
        } else if (!user && !strcmp(ty, "tool_use")) {
            const cJSON *id = cJSON_GetObjectItemCaseSensitive(b, "id");
            const cJSON *name = cJSON_GetObjectItemCaseSensitive(b, "name");
            const cJSON *input = cJSON_GetObjectItemCaseSensitive(b, "input");
            if (!cJSON_IsString(id) || !cJSON_IsString(name) || !cJSON_IsObject(input)) {
                api_error_set(e, 400, field, "%s: a tool_use block needs 'id' and 'name' (strings) and 'input' (an object)", field);
                goto out;
            }
            cJSON *c = cJSON_CreateObject();
            cJSON_AddStringToObject(c, "id", id->valuestring);
            cJSON_AddStringToObject(c, "type", "function");
            cJSON *f = cJSON_AddObjectToObject(c, "function");
            cJSON_AddStringToObject(f, "name", name->valuestring);
            cJSON_AddItemToObject(f, "arguments", cJSON_Duplicate(input, true));
            cJSON_AddItemToArray(calls, c);
        } else if (!user && !strcmp(ty, "thinking")) {
            if (cJSON_IsString(v = cJSON_GetObjectItemCaseSensitive(b, "thinking")))
                anthropic_text_add(&thinking, v->valuestring);
        } else if (user || strcmp(ty, "redacted_thinking") != 0) {
            api_error_set(e, 400, field, "%s.type: '%s' blocks are not supported in %s messages",
                          field, ty, user ? "user" : "assistant");
            goto out;
        }
    }
    if (user) {
        if (text.len || j == 0)
            anthropic_flush(msgs, "user", &text);
    } else {
        cJSON *o = anthropic_flush(msgs, "assistant", &text);
        if (cJSON_GetArraySize(calls)) {
            cJSON_AddItemToObject(o, "tool_calls", calls);
            calls = NULL;
        }
        if (thinking.len)
            cJSON_AddStringToObject(o, "reasoning_content", thinking.s);
    }
    rc = 0;
out:
    cJSON_Delete(calls);
    free(text.s);
    free(thinking.s);
    return rc;
}

/* tools [{name, description, input_schema}] -> OpenAI function tools. */
static int anthropic_tools(const cJSON *root, cJSON *req, struct api_error *e)
{
    const cJSON *tools = cJSON_GetObjectItemCaseSensitive(root, "tools");
    if (!tools || cJSON_IsNull(tools))
        return 0;
    if (!cJSON_IsArray(tools))
        return api_error_set(e, 400, "tools", "tools: must be an array");
    cJSON *out = cJSON_AddArrayToObject(req, "tools");
    const cJSON *t;
    int i = 0;
    cJSON_ArrayForEach(t, tools) {
        char field[48];
        snprintf(field, sizeof field, "tools[%d]", i++);
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(t, "type");
        const cJSON *name = cJSON_GetObjectItemCaseSensitive(t, "name");
        const cJSON *desc = cJSON_GetObjectItemCaseSensitive(t, "description");
        const cJSON *schema = cJSON_GetObjectItemCaseSensitive(t, "input_schema");
        if (!cJSON_IsObject(t))
            return api_error_set(e, 400, field, "%s: must be an object", field);
        if (type && !cJSON_IsNull(type) && !(cJSON_IsString(type) && !strcmp(type->valuestring, "custom")))
            return api_error_set(e, 400, field, "%s.type: only custom tools are supported, got %s",
                                 field, cJSON_IsString(type) ? type->valuestring : "a non-string");
        if (!cJSON_IsString(name) || !name->valuestring[0])
            return api_error_set(e, 400, field, "%s.name: field required (a non-empty string)", field);
        if (!cJSON_IsObject(schema))
            return api_error_set(e, 400, field, "%s.input_schema: field required (a JSON schema object)", field);
        if (desc && !cJSON_IsNull(desc) && !cJSON_IsString(desc))
            return api_error_set(e, 400, field, "%s.description: must be a string", field);
        cJSON *x = cJSON_CreateObject();
        cJSON_AddItemToArray(out, x);
        cJSON_AddStringToObject(x, "type", "function");
        cJSON *f = cJSON_AddObjectToObject(x, "function");
        cJSON_AddStringToObject(f, "name", name->valuestring);
        if (cJSON_IsString(desc))
            cJSON_AddStringToObject(f, "description", desc->valuestring);
        cJSON_AddItemToObject(f, "parameters", cJSON_Duplicate(schema, true));
    }
    return 0;
}

/* tool_choice {type: auto|any|tool|none, name, disable_parallel_tool_use}. */
static int anthropic_tool_choice(const cJSON *root, cJSON *req, struct api_error *e)
{
    const cJSON *tc = cJSON_GetObjectItemCaseSensitive(root, "tool_choice");
    if (!tc || cJSON_IsNull(tc))
        return 0;
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(tc, "type");
    if (!cJSON_IsObject(tc) || !cJSON_IsString(type))
        return api_error_set(e, 400, "tool_choice", "tool_choice: must be an object with a 'type'");
    const char *ty = type->valuestring;
    const cJSON *tools = cJSON_GetObjectItemCaseSensitive(req, "tools");
    if (!strcmp(ty, "auto") || !strcmp(ty, "none")) {
        cJSON_AddStringToObject(req, "tool_choice", ty);
    } else if (!strcmp(ty, "any") || !strcmp(ty, "tool")) {
        if (!cJSON_GetArraySize(tools))
            return api_error_set(e, 400, "tool_choice", "tool_choice: type '%s' needs 'tools'", ty);
        if (!strcmp(ty, "any")) {
            cJSON_AddStringToObject(req, "tool_choice", "required");
        } else {
            const cJSON *name = cJSON_GetObjectItemCaseSensitive(tc, "name");
            if (!cJSON_IsString(name))
                return api_error_set(e, 400, "tool_choice.name", "tool_choice.name: field required for type 'tool'");
            const cJSON *t;
            bool known = false;
            cJSON_ArrayForEach(t, tools) {
                const cJSON *fn = cJSON_GetObjectItemCaseSensitive(t, "function");
                known |= !strcmp(cJSON_GetObjectItemCaseSensitive(fn, "name")->valuestring, name->valuestring);
            }
            if (!known)
                return api_error_set(e, 400, "tool_choice.name", "tool_choice.name: no tool named '%s' in 'tools'",
                                     name->valuestring);
            cJSON *o = cJSON_AddObjectToObject(req, "tool_choice");
            cJSON_AddStringToObject(o, "type", "function");
            cJSON_AddStringToObject(cJSON_AddObjectToObject(o, "function"), "name", name->valuestring);
        }
    } else {
        return api_error_set(e, 400, "tool_choice.type", "tool_choice.type: must be auto, any, tool or none, got '%s'", ty);
    }
    bool one = false;
    struct api_error pe;
    if (apireq_bool(tc, "disable_parallel_tool_use", &one, &pe) < 0)
        return api_error_set(e, 400, "tool_choice.disable_parallel_tool_use",
                             "tool_choice.disable_parallel_tool_use: must be a boolean");
    cJSON_AddBoolToObject(req, "parallel_tool_calls", !one);
    return 0;
}

/* thinking {type: enabled, budget_tokens} | {type: disabled} | {type:
 * adaptive}: adaptive leaves the model's own default (its template decides
 * whether it reasons, with no budget). *off: thinking is disabled. */
static int anthropic_thinking(const cJSON *root, cJSON *req, bool *off, struct api_error *e)
{
    *off = false;
    const cJSON *th = cJSON_GetObjectItemCaseSensitive(root, "thinking");
    if (!th || cJSON_IsNull(th))
        return 0;
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(th, "type");
    if (!cJSON_IsObject(th) || !cJSON_IsString(type))
        return api_error_set(e, 400, "thinking", "thinking: must be an object with a 'type'");
    if (!strcmp(type->valuestring, "disabled")) {
        cJSON_AddBoolToObject(req, "enable_thinking", false);
        *off = true;
        return 0;
    }
    if (!strcmp(type->valuestring, "adaptive"))
        return 0;
    if (strcmp(type->valuestring, "enabled") != 0)
        return api_error_set(e, 400, "thinking.type",
                             "thinking.type: must be enabled, disabled or adaptive, got '%s'",
                             type->valuestring);
    const cJSON *bt = cJSON_GetObjectItemCaseSensitive(th, "budget_tokens");
    if (!cJSON_IsNumber(bt) || bt->valuedouble < 1 || bt->valuedouble > (1 << 30) ||
        bt->valuedouble != (double)(int)bt->valuedouble)
        return api_error_set(e, 400, "thinking.budget_tokens",
                             "thinking.budget_tokens: field required (a positive integer) when thinking is enabled");
    cJSON_AddBoolToObject(req, "enable_thinking", true);
    cJSON_AddNumberToObject(req, "thinking_budget", bt->valuedouble);
    return 0;
}

/* output_config {effort, format} (and the beta's top-level output_format):
 * effort -> reasoning_effort (the reasoning budget of chatreq.h; "max" and
 * "xhigh" are "high": no budget), ignored while thinking is off; format
 * {type: json_schema, schema} -> response_format, the same grammar as the
 * OpenAI route. Other keys (task_budget) have no meaning here. */
static int anthropic_output_config(const cJSON *root, cJSON *req, bool thinking_off,
                                   struct api_error *e)
{
    static const char *const efforts[][2] = {
        { "low", "low" }, { "medium", "medium" }, { "high", "high" }, { "xhigh", "high" },
        { "max", "high" },
    };
    const cJSON *oc = cJSON_GetObjectItemCaseSensitive(root, "output_config");
    const cJSON *format = cJSON_GetObjectItemCaseSensitive(root, "output_format");
    const char *fname = "output_format";
    if (oc && !cJSON_IsNull(oc)) {
        if (!cJSON_IsObject(oc))
            return api_error_set(e, 400, "output_config", "output_config: must be an object");
        const cJSON *ef = cJSON_GetObjectItemCaseSensitive(oc, "effort");
        if (ef && !cJSON_IsNull(ef)) {
            size_t k = 0, n = sizeof efforts / sizeof efforts[0];
            while (k < n && !(cJSON_IsString(ef) && !strcmp(ef->valuestring, efforts[k][0])))
                k++;
            if (k == n)
                return api_error_set(e, 400, "output_config.effort",
                                     "output_config.effort: must be low, medium, high, xhigh or max");
            if (!thinking_off)
                cJSON_AddStringToObject(req, "reasoning_effort", efforts[k][1]);
        }
        const cJSON *f = cJSON_GetObjectItemCaseSensitive(oc, "format");
        if (f && !cJSON_IsNull(f)) {
            format = f;
            fname = "output_config.format";
        }
    }
    if (!format || cJSON_IsNull(format))
        return 0;
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(format, "type");
    const cJSON *schema = cJSON_GetObjectItemCaseSensitive(format, "schema");
    if (!cJSON_IsObject(format) || !cJSON_IsString(type) || strcmp(type->valuestring, "json_schema") ||
        !cJSON_IsObject(schema))
        return api_error_set(e, 400, fname, "%s: must be {\"type\": \"json_schema\", \"schema\": {...}}",
                             fname);
    cJSON *rf = cJSON_AddObjectToObject(req, "response_format");
    cJSON_AddStringToObject(rf, "type", "json_schema");
    cJSON *js = cJSON_AddObjectToObject(rf, "json_schema");
    cJSON_AddStringToObject(js, "name", "output");
    cJSON_AddItemToObject(js, "schema", cJSON_Duplicate(schema, true));
    return 0;
}

/* Top-level fields this route reads; others (context_management, metadata,
 * service_tier, container, mcp_servers, speed, ...) are ignored, and each
 * name is logged once per process so that an operator sees what a client
 * asked for without a line per request. */
static const char *const anthropic_known[] = {
    "model", "messages", "system", "max_tokens", "stop_sequences", "stream", "temperature",
    "top_p", "top_k", "tools", "tool_choice", "thinking", "output_config", "output_format",
    "timeout",
};
#define ANTHROPIC_MAX_LOGGED 64

static void anthropic_log_unknown(const cJSON *root)
{
    static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
    static char logged[ANTHROPIC_MAX_LOGGED][48];   /* {lock} */
    static int n_logged;                            /* {lock} */
    const cJSON *f;
    cJSON_ArrayForEach(f, root) {
        bool known = false;
        for (size_t k = 0; k < sizeof anthropic_known / sizeof anthropic_known[0] && !known; k++)
            known = !strcmp(f->string, anthropic_known[k]);
        if (known)
            continue;
        pthread_mutex_lock(&lock);
        bool seen = false;
        for (int k = 0; k < n_logged && !seen; k++)
            seen = !strncmp(logged[k], f->string, sizeof logged[k] - 1);
        if (!seen && n_logged < ANTHROPIC_MAX_LOGGED) {
            snprintf(logged[n_logged++], sizeof logged[0], "%s", f->string);
            OMNI_INFO("anthropic: ignoring the field '%.47s' of /v1/messages (logged once)",
                      f->string);
        }
        pthread_mutex_unlock(&lock);
    }
}

/* A system message's text at its place (a mid-conversation system turn),
 * or with fold appended to the first system message, created at the front
 * when there is none - for templates that raise on a system turn after the
 * first message. */
static int anthropic_system(cJSON *msgs, const cJSON *content, const char *field, bool fold,
                            struct api_error *e)
{
    char *text = NULL;
    if (apireq_text_content(content, field, &text, e) < 0)
        return -1;
    cJSON *first = cJSON_GetArrayItem(msgs, 0);
    const cJSON *role = cJSON_GetObjectItemCaseSensitive(first, "role");
    if (!fold || !first) {
        anthropic_chat_message(msgs, "system", text);
    } else if (cJSON_IsString(role) && !strcmp(role->valuestring, "system")) {
        const char *old = cJSON_GetObjectItemCaseSensitive(first, "content")->valuestring;
        size_t n = strlen(old) + strlen(text) + 3;
        char *joined = malloc(n);
        if (!joined) {
            free(text);
            return api_error_set(e, 500, NULL, "out of memory");
        }
        snprintf(joined, n, "%s%s%s", old, *old ? "\n\n" : "", text);
        cJSON_ReplaceItemInObjectCaseSensitive(first, "content", cJSON_CreateString(joined));
        free(joined);
    } else {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "role", "system");
        cJSON_AddStringToObject(o, "content", text);
        cJSON_InsertItemInArray(msgs, 0, o);
    }
    free(text);
    return 0;
}

/* The request in the OpenAI shape chatreq.h takes; NULL with a 400 naming
 * the field. System turns inside messages stay in place unless fold;
 * *n_system counts them. */
cJSON *anthropic_to_chat(const cJSON *root, bool fold, int *n_system, struct api_error *e)
{
    cJSON *req = cJSON_CreateObject();
    cJSON *msgs = cJSON_AddArrayToObject(req, "messages");
    *n_system = 0;
    const cJSON *sys = cJSON_GetObjectItemCaseSensitive(root, "system");
    if (sys && !cJSON_IsNull(sys)) {
        char *text = NULL;
        if (apireq_text_content(sys, "system", &text, e) < 0)
            goto fail;
        anthropic_chat_message(msgs, "system", text);
        free(text);
    }
    const cJSON *in = cJSON_GetObjectItemCaseSensitive(root, "messages");
    if (!cJSON_IsArray(in) || cJSON_GetArraySize(in) == 0) {
        api_error_set(e, 400, "messages", "messages: must be a non-empty array");
        goto fail;
    }
    const cJSON *m;
    int i = 0;
    cJSON_ArrayForEach(m, in) {
        char field[64];
        snprintf(field, sizeof field, "messages[%d]", i);
        const cJSON *role = cJSON_GetObjectItemCaseSensitive(m, "role");
        if (!cJSON_IsObject(m) || !cJSON_IsString(role) ||
            (strcmp(role->valuestring, "user") != 0 && strcmp(role->valuestring, "assistant") != 0 &&
             strcmp(role->valuestring, "system") != 0)) {
            api_error_set(e, 400, field, "%s.role: must be \"user\", \"assistant\" or \"system\"", field);
            goto fail;
        }
        bool user = !strcmp(role->valuestring, "user");
        const cJSON *content = cJSON_GetObjectItemCaseSensitive(m, "content");
        if (!strcmp(role->valuestring, "system")) {
            char cf[80];
            snprintf(cf, sizeof cf, "%s.content", field);
            if (anthropic_system(msgs, content, cf, fold, e) < 0)
                goto fail;
            (*n_system)++;
        } else if (cJSON_IsString(content)) {
            anthropic_chat_message(msgs, user ? "user" : "assistant", content->valuestring);
        } else if (cJSON_IsArray(content)) {
            if (anthropic_blocks_of(content, user, i, msgs, e) < 0)
                goto fail;
        } else {
            api_error_set(e, 400, field, "%s.content: field required (a string or an array of blocks)", field);
            goto fail;
        }
        i++;
    }
    bool thinking_off;
    if (anthropic_tools(root, req, e) < 0 || anthropic_tool_choice(root, req, e) < 0 ||
        anthropic_thinking(root, req, &thinking_off, e) < 0 ||
        anthropic_output_config(root, req, thinking_off, e) < 0)
        goto fail;
    return req;
fail:
    cJSON_Delete(req);
    return NULL;
}

/* Common front: model ready, JSON, model id (unknown fields logged). */
static cJSON *anthropic_begin(struct api *a, struct ws_req *r, const struct api_model **m,
                              struct api_error *e)
{
    if (!(*m = api_model_or_503(a, r, API_ANTHROPIC)))
        return NULL;
    size_t len;
    const char *body = ws_req_body(r, &len);
    cJSON *root = apireq_parse(body, len, e);
    const char *model = NULL;
    if (root)
        anthropic_log_unknown(root);
    if (root && apireq_string(root, "model", &model, e) >= 0 && api_check_model(a, model, e) >= 0)
        return root;
    api_respond_error(r, API_ANTHROPIC, e);
    cJSON_Delete(root);
    return NULL;
}

static void anthropic_blocks_free_cb(void *b) { anthropic_blocks_free(b); }

/* Translate and render (g NULL: render only, as count_tokens does; else
 * chatreq_build). System turns after the first message stay in place where
 * the template takes them; a template that raises on them (Gemma's and
 * Mistral's insist on alternating user/assistant turns) gets them folded
 * into the system prompt instead. cr is set either way (chatreq_free). */
static int anthropic_build(const struct api_model *m, const cJSON *root, const struct apireq_gen *g,
                           struct chatreq *cr, struct api_error *e)
{
    int n_system, rc = -1;
    *cr = (struct chatreq){ .reasoning_budget = -1 };
    for (int fold = 0; fold < 2; fold++) {
        cJSON *req = anthropic_to_chat(root, fold, &n_system, e);
        if (!req)
            return -1;
        chatreq_free(cr);
        rc = g ? chatreq_build(m, req, g, cr, e) : chatreq_render(m, req, cr, e);
        cJSON_Delete(req);
        /* only a refusal by the template itself is worth the second try */
        if (rc >= 0 || !n_system || e->status != 400 || strcmp(e->param, "messages") ||
            !strstr(e->message, "chat template"))
            break;
    }
    return rc;
}

/* The request past its images (the handler's thread, or a vision worker's
 * with r NULL; image blocks are image markers by now): translate, render,
 * attach, submit. */
static int anthropic_then(struct api_call *c, struct ws_req *r, cJSON *root,
                          const struct apireq_gen *g, struct api_images *im, struct api_error *e)
{
    const struct api_model *m = api_model(c->api);
    struct chatreq cr = { .reasoning_budget = -1 };
    int rc = -1;
    ((struct anthropic_blocks *)c->proto_state)->max_tokens = g->max_tokens;
    if (anthropic_build(m, root, g, &cr, e) >= 0) {
        c->prompt_tokens = cr.n_ids;   /* message_start reports it before the engine does */
        struct engine_request rq = engine_default_request();
        rq.model = m->index;
        rq.sampling = g->sp;
        rq.max_tokens = g->max_tokens;
        rq.timeout_s = g->timeout_s;
        if (chatreq_attach(&cr, m, c, &rq, e) >= 0 &&
            (!im || !im->n || api_images_attach(api_images(c->api), m, &cr, g, im, &rq, e) >= 0)) {
            if (im && im->n)
                c->prompt_tokens = im->vp.n_positions;
            api_call_submit(c, r, &rq, anthropic_start);
            rc = 0;
        }
    }
    chatreq_free(&cr);
    return rc;
}

void anthropic_messages(struct api *a, struct ws_req *r, const char *arg)
{
    (void)arg;
    struct api_error e;
    struct apireq_gen g;
    apireq_gen_init(&g);
    const struct api_model *m;
    cJSON *root = anthropic_begin(a, r, &m, &e);
    if (!root)
        goto out;
    if (apireq_sampling(root, API_ANTHROPIC, false, m->n_vocab, &g, &e) < 0)
        goto fail;
    struct api_call *c = api_call_new(a, r, &anthropic_proto, API_ANTHROPIC, "msg_", &g);
    if (!c) {
        api_error_set(&e, 500, NULL, "out of memory");
        goto fail;
    }
    c->proto_state = anthropic_blocks_new(c->stream ? anthropic_sink : NULL, c);
    c->proto_state_free = anthropic_blocks_free_cb;
    if (!c->proto_state) {
        api_error_set(&e, 500, NULL, "out of memory");
        api_call_free(c);
        goto fail;
    }
    int rc = api_images_defer(api_images(a), c, r, &root, &g, anthropic_then, &e);
    if (rc == 0)
        rc = anthropic_then(c, r, root, &g, NULL, &e);
    if (rc < 0) {
        api_call_free(c);
        goto fail;
    }
    goto out;
fail:
    api_respond_error(r, API_ANTHROPIC, &e);
out:
    apireq_gen_free(&g);
    cJSON_Delete(root);
}

/* {"input_tokens": N} for the prompt the template renders (tools included). */
void anthropic_count_tokens(struct api *a, struct ws_req *r, const char *arg)
{
    (void)arg;
    struct api_error e;
    const struct api_model *m;
    struct chatreq cr;
    cJSON *root = anthropic_begin(a, r, &m, &e);
    if (!root)
        return;
    if (anthropic_build(m, root, NULL, &cr, &e) < 0) {
        api_respond_error(r, API_ANTHROPIC, &e);
    } else {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddNumberToObject(o, "input_tokens", cr.n_ids);
        api_respond_json(r, 200, o);
    }
    chatreq_free(&cr);
    cJSON_Delete(root);
}
