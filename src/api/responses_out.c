/* responses_out.c - chatout deltas -> Responses API output items and their
 * stream events. One item is open at a time; a delta of another kind closes
 * it (its *.done events and output_item.done) before the next one opens,
 * the same way a model writes reasoning, then text, then calls. */
#include "src/api/responses_out.h"

#include "src/api/chatout.h"

#include <cjson/cJSON.h>
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum ro_kind { RO_NONE, RO_MESSAGE, RO_REASONING, RO_CALL };

struct responses_out {
    responses_event_fn fn;
    void *user;
    char base[48];
    cJSON *items;             /* finished items */
    enum ro_kind open;
    char item_id[96];         /* the open item's */
    char call_id[80], name[128];
    char *buf;                /* the open item's text or arguments */
    size_t len, cap;
    char *ws;                 /* whitespace held until a message has a reason to open */
    size_t ws_len, ws_cap;
    int n_items;              /* = output_index of the open item */
    bool calls;
    cJSON *skip;              /* tool names whose calls make no item, or NULL */
    bool skipping;            /* inside such a call */
};

static void ro_append(char **s, size_t *len, size_t *cap, const char *t, size_t n)
{
    if (*len + n + 1 > *cap) {
        size_t nc = *cap ? *cap * 2 : 256;
        while (nc < *len + n + 1)
            nc *= 2;
        char *ns = realloc(*s, nc);
        if (!ns)
            return;   /* the item loses text rather than the server crashing */
        *s = ns;
        *cap = nc;
    }
    memcpy(*s + *len, t, n);
    *len += n;
    (*s)[*len] = 0;
}

static cJSON *ro_string_n(const char *s, size_t len)
{
    char *t = strndup(s, len);
    cJSON *item = cJSON_CreateString(t ? t : "");
    free(t);
    return item;
}

struct responses_out *responses_out_new(const char *id_base, responses_event_fn fn, void *user)
{
    struct responses_out *o = calloc(1, sizeof *o);
    if (!o)
        return NULL;
    o->fn = fn;
    o->user = user;
    snprintf(o->base, sizeof o->base, "%s", id_base ? id_base : "0");
    if (!(o->items = cJSON_CreateArray())) {
        free(o);
        return NULL;
    }
    return o;
}

void responses_out_free(struct responses_out *o)
{
    if (!o)
        return;
    cJSON_Delete(o->items);
    cJSON_Delete(o->skip);
    free(o->buf);
    free(o->ws);
    free(o);
}

/* An event of type with output_index (and item_id when the item has one). */
static cJSON *ro_event(struct responses_out *o, const char *type, bool item_id)
{
    cJSON *ev = cJSON_CreateObject();
    cJSON_AddStringToObject(ev, "type", type);
    if (item_id)
        cJSON_AddStringToObject(ev, "item_id", o->item_id);
    cJSON_AddNumberToObject(ev, "output_index", o->n_items);
    return ev;
}

static void ro_emit(struct responses_out *o, cJSON *ev)
{
    if (o->fn)
        o->fn(o->user, ev);
    else
        cJSON_Delete(ev);
}

/* The open item as it stands (done: its final form, else the empty one
 * output_item.added carries). */
static cJSON *ro_item(struct responses_out *o, bool done)
{
    const char *text = done && o->buf ? o->buf : "";
    cJSON *it = cJSON_CreateObject();
    cJSON_AddStringToObject(it, "id", o->item_id);
    switch (o->open) {
    case RO_MESSAGE: {
        cJSON_AddStringToObject(it, "type", "message");
        cJSON_AddStringToObject(it, "status", done ? "completed" : "in_progress");
        cJSON_AddStringToObject(it, "role", "assistant");
        cJSON *content = cJSON_AddArrayToObject(it, "content");
        if (done) {
            cJSON *part = cJSON_CreateObject();
            cJSON_AddStringToObject(part, "type", "output_text");
            cJSON_AddStringToObject(part, "text", text);
            cJSON_AddArrayToObject(part, "annotations");
            cJSON_AddArrayToObject(part, "logprobs");
            cJSON_AddItemToArray(content, part);
        }
        break;
    }
    case RO_REASONING: {
        cJSON_AddStringToObject(it, "type", "reasoning");
        cJSON *summary = cJSON_AddArrayToObject(it, "summary");
        if (done) {
            /* the text is both the summary clients show and the raw
             * reasoning_text content open-weight models report */
            cJSON *part = cJSON_CreateObject();
            cJSON_AddStringToObject(part, "type", "summary_text");
            cJSON_AddStringToObject(part, "text", text);
            cJSON_AddItemToArray(summary, part);
            cJSON *content = cJSON_AddArrayToObject(it, "content");
            part = cJSON_CreateObject();
            cJSON_AddStringToObject(part, "type", "reasoning_text");
            cJSON_AddStringToObject(part, "text", text);
            cJSON_AddItemToArray(content, part);
        }
        break;
    }
    default:
        cJSON_AddStringToObject(it, "type", "function_call");
        cJSON_AddStringToObject(it, "status", done ? "completed" : "in_progress");
        cJSON_AddStringToObject(it, "call_id", o->call_id);
        cJSON_AddStringToObject(it, "name", o->name);
        cJSON_AddStringToObject(it, "arguments", text);
        break;
    }
    return it;
}

static cJSON *ro_part(const char *type, const char *text)
{
    cJSON *p = cJSON_CreateObject();
    cJSON_AddStringToObject(p, "type", type);
    cJSON_AddStringToObject(p, "text", text);
    if (!strcmp(type, "output_text")) {
        cJSON_AddArrayToObject(p, "annotations");
        cJSON_AddArrayToObject(p, "logprobs");
    }
    return p;
}

static void ro_close(struct responses_out *o)
{
    if (o->open == RO_NONE)
        return;
    const char *text = o->buf ? o->buf : "";
    cJSON *ev;
    if (o->open == RO_MESSAGE) {
        ev = ro_event(o, "response.output_text.done", true);
        cJSON_AddNumberToObject(ev, "content_index", 0);
        cJSON_AddStringToObject(ev, "text", text);
        cJSON_AddArrayToObject(ev, "logprobs");
        ro_emit(o, ev);
        ev = ro_event(o, "response.content_part.done", true);
        cJSON_AddNumberToObject(ev, "content_index", 0);
        cJSON_AddItemToObject(ev, "part", ro_part("output_text", text));
        ro_emit(o, ev);
    } else if (o->open == RO_REASONING) {
        ev = ro_event(o, "response.reasoning_summary_text.done", true);
        cJSON_AddNumberToObject(ev, "summary_index", 0);
        cJSON_AddStringToObject(ev, "text", text);
        ro_emit(o, ev);
        ev = ro_event(o, "response.reasoning_summary_part.done", true);
        cJSON_AddNumberToObject(ev, "summary_index", 0);
        cJSON_AddItemToObject(ev, "part", ro_part("summary_text", text));
        ro_emit(o, ev);
    } else {
        ev = ro_event(o, "response.function_call_arguments.done", true);
        cJSON_AddStringToObject(ev, "name", o->name);
        cJSON_AddStringToObject(ev, "arguments", text);
        ro_emit(o, ev);
    }
    cJSON *item = ro_item(o, true);
    if (o->fn) {
        ev = ro_event(o, "response.output_item.done", false);
        cJSON_AddItemToObject(ev, "item", cJSON_Duplicate(item, true));
        ro_emit(o, ev);
    }
    cJSON_AddItemToArray(o->items, item);
    o->open = RO_NONE;
    o->n_items++;
    o->len = 0;
    if (o->buf)
        o->buf[0] = 0;
}

static void ro_open(struct responses_out *o, enum ro_kind kind)
{
    ro_close(o);
    o->open = kind;
    static const char *const prefix[] = { [RO_MESSAGE] = "msg", [RO_REASONING] = "rs",
                                          [RO_CALL] = "fc" };
    snprintf(o->item_id, sizeof o->item_id, "%s_%s_%d", prefix[kind], o->base, o->n_items);
    cJSON *ev = ro_event(o, "response.output_item.added", false);
    cJSON_AddItemToObject(ev, "item", ro_item(o, false));
    ro_emit(o, ev);
    if (kind == RO_MESSAGE) {
        ev = ro_event(o, "response.content_part.added", true);
        cJSON_AddNumberToObject(ev, "content_index", 0);
        cJSON_AddItemToObject(ev, "part", ro_part("output_text", ""));
        ro_emit(o, ev);
    } else if (kind == RO_REASONING) {
        ev = ro_event(o, "response.reasoning_summary_part.added", true);
        cJSON_AddNumberToObject(ev, "summary_index", 0);
        cJSON_AddItemToObject(ev, "part", ro_part("summary_text", ""));
        ro_emit(o, ev);
    }
    o->ws_len = 0;   /* whitespace between items is not an answer */
}

static void ro_text(struct responses_out *o, const char *text, size_t len)
{
    if (o->open != RO_MESSAGE) {
        size_t k = 0;
        while (k < len && isspace((unsigned char)text[k]))
            k++;
        if (k == len) {
            ro_append(&o->ws, &o->ws_len, &o->ws_cap, text, len);
            return;
        }
        size_t held = o->ws_len;
        char *ws = held ? strndup(o->ws, held) : NULL;
        ro_open(o, RO_MESSAGE);
        if (ws) {
            ro_text(o, ws, strlen(ws));
            free(ws);
        }
    }
    ro_append(&o->buf, &o->len, &o->cap, text, len);
    cJSON *ev = ro_event(o, "response.output_text.delta", true);
    cJSON_AddNumberToObject(ev, "content_index", 0);
    cJSON_AddItemToObject(ev, "delta", ro_string_n(text, len));
    cJSON_AddArrayToObject(ev, "logprobs");
    ro_emit(o, ev);
}

void responses_out_delta(void *out, const struct chatout_delta *d)
{
    struct responses_out *o = out;
    cJSON *ev;
    if (d->kind == CHATOUT_CALL_START) {
        o->skipping = false;
        const cJSON *n;
        cJSON_ArrayForEach(n, o->skip)
            if (cJSON_IsString(n) && d->name && !strcmp(n->valuestring, d->name))
                o->skipping = true;
        if (o->skipping) {
            ro_close(o);
            return;
        }
    } else if (o->skipping && d->kind == CHATOUT_CALL_ARGS) {
        return;
    } else {
        o->skipping = false;
    }
    switch (d->kind) {
    case CHATOUT_CONTENT:
        ro_text(o, d->text, d->len);
        break;
    case CHATOUT_REASONING:
        if (o->open != RO_REASONING)
            ro_open(o, RO_REASONING);
        ro_append(&o->buf, &o->len, &o->cap, d->text, d->len);
        ev = ro_event(o, "response.reasoning_summary_text.delta", true);
        cJSON_AddNumberToObject(ev, "summary_index", 0);
        cJSON_AddItemToObject(ev, "delta", ro_string_n(d->text, d->len));
        ro_emit(o, ev);
        break;
    case CHATOUT_CALL_START:
        ro_close(o);
        snprintf(o->call_id, sizeof o->call_id, "%s", d->id ? d->id : "call_0");
        snprintf(o->name, sizeof o->name, "%s", d->name ? d->name : "");
        o->calls = true;
        ro_open(o, RO_CALL);
        break;
    case CHATOUT_CALL_ARGS:
        if (o->open != RO_CALL)
            break;
        ro_append(&o->buf, &o->len, &o->cap, d->text, d->len);
        ev = ro_event(o, "response.function_call_arguments.delta", true);
        cJSON_AddItemToObject(ev, "delta", ro_string_n(d->text, d->len));
        ro_emit(o, ev);
        break;
    }
}

void responses_out_close(struct responses_out *o)
{
    ro_close(o);
}

void responses_out_skip_calls(struct responses_out *o, const cJSON *names)
{
    cJSON_Delete(o->skip);
    o->skip = names ? cJSON_Duplicate(names, true) : NULL;
}

void responses_out_add(struct responses_out *o, const char *prefix, cJSON *item)
{
    ro_close(o);
    char id[96];
    snprintf(id, sizeof id, "%s_%s_%d", prefix, o->base, o->n_items);
    cJSON_DeleteItemFromObjectCaseSensitive(item, "id");
    cJSON_AddStringToObject(item, "id", id);
    if (o->fn) {
        cJSON *ev = ro_event(o, "response.output_item.added", false);
        cJSON_AddItemToObject(ev, "item", cJSON_Duplicate(item, true));
        ro_emit(o, ev);
        ev = ro_event(o, "response.output_item.done", false);
        cJSON_AddItemToObject(ev, "item", cJSON_Duplicate(item, true));
        ro_emit(o, ev);
    }
    cJSON_AddItemToArray(o->items, item);
    o->n_items++;
}

void responses_out_end(struct responses_out *o)
{
    if (o->open == RO_NONE && o->n_items == 0) {
        char *ws = o->ws_len ? strndup(o->ws, o->ws_len) : NULL;
        ro_open(o, RO_MESSAGE);
        if (ws) {
            ro_text(o, ws, strlen(ws));
            free(ws);
        }
    }
    ro_close(o);
}

const cJSON *responses_out_items(const struct responses_out *o) { return o->items; }
bool responses_out_has_calls(const struct responses_out *o) { return o->calls; }
