/* chatout.c - generated text -> assistant message: reasoning split off
 * first (tool calls are answers, not thoughts), then tool calls parsed out of
 * the answer; every piece is both reported as a delta and kept. */
#include "src/api/chatout.h"

#include "src/core/omni.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

struct chatout_buf {
    char *s;
    size_t len, cap;
};

struct chatout {
    struct chatout_params p;
    char *tools_json;        /* own copy of p.tp.tools_json */
    struct reasoning_parser *rp;
    struct tools_parser *tp;
    struct chatout_buf content, reasoning;
    cJSON *calls;
    int reasoning_tokens;
    chatout_fn fn;           /* during a feed/finish */
    void *user;
};

struct chatout_params chatout_default_params(void)
{
    return (struct chatout_params){ .rfmt = REASONING_NONE, .tp = tools_parser_default_params() };
}

static void chatout_append(struct chatout_buf *b, const char *s, size_t n)
{
    if (omni_reserve(&b->s, &b->cap, b->len + n + 1) < 0)
        return;   /* the message loses text rather than the server crashing */
    memcpy(b->s + b->len, s, n);
    b->len += n;
    b->s[b->len] = 0;
}

struct chatout *chatout_new(const struct chatout_params *p)
{
    struct chatout *o = calloc(1, sizeof *o);
    if (!o)
        return NULL;
    o->p = *p;
    if (p->tp.tools_json && !(o->tools_json = strdup(p->tp.tools_json)))
        goto fail;
    o->p.tp.tools_json = o->tools_json;
    if (!(o->rp = reasoning_parser_new(p->rfmt, p->starts_open)) || !(o->calls = cJSON_CreateArray()))
        goto fail;
    if (p->tools && !(o->tp = tools_parser_new(&p->tp)))
        goto fail;
    return o;
fail:
    chatout_free(o);
    return NULL;
}

void chatout_free(struct chatout *o)
{
    if (!o)
        return;
    reasoning_parser_free(o->rp);
    tools_parser_free(o->tp);
    free(o->content.s);
    free(o->reasoning.s);
    cJSON_Delete(o->calls);
    free(o->tools_json);
    free(o);
}

static void chatout_emit(struct chatout *o, const struct chatout_delta *d)
{
    if (o->fn)
        o->fn(o->user, d);
}

static void chatout_on_tool(void *user, const struct tools_event *ev)
{
    struct chatout *o = user;
    struct chatout_delta d = { .index = ev->index, .text = ev->text, .len = ev->len };
    if (ev->type == TOOLS_EV_CONTENT) {
        chatout_append(&o->content, ev->text, ev->len);
        d.kind = CHATOUT_CONTENT;
    } else if (ev->type == TOOLS_EV_CALL_START) {
        cJSON *c = cJSON_CreateObject();
        cJSON_AddStringToObject(c, "id", ev->id);
        cJSON_AddStringToObject(c, "type", "function");
        cJSON *f = cJSON_AddObjectToObject(c, "function");
        cJSON_AddStringToObject(f, "name", ev->name);
        cJSON_AddStringToObject(f, "arguments", "");
        cJSON_AddItemToArray(o->calls, c);
        d.kind = CHATOUT_CALL_START;
        d.id = ev->id;
        d.name = ev->name;
    } else {
        cJSON *f = cJSON_GetObjectItem(cJSON_GetArrayItem(o->calls, ev->index), "function");
        cJSON *a = cJSON_GetObjectItem(f, "arguments");
        if (a) {
            size_t ol = strlen(a->valuestring);
            char *s = malloc(ol + ev->len + 1);
            if (s) {
                memcpy(s, a->valuestring, ol);
                memcpy(s + ol, ev->text, ev->len);
                s[ol + ev->len] = 0;
                cJSON_SetValuestring(a, s);
                free(s);
            }
        }
        d.kind = CHATOUT_CALL_ARGS;
    }
    chatout_emit(o, &d);
}

static void chatout_on_split(void *user, bool reasoning, const char *text, size_t len)
{
    struct chatout *o = user;
    if (reasoning) {
        chatout_append(&o->reasoning, text, len);
        struct chatout_delta d = { .kind = CHATOUT_REASONING, .text = text, .len = len };
        chatout_emit(o, &d);
    } else if (o->tp) {
        tools_parser_feed(o->tp, text, len, chatout_on_tool, o);
    } else {
        struct tools_event ev = { .type = TOOLS_EV_CONTENT, .text = text, .len = len };
        chatout_on_tool(o, &ev);
    }
}

void chatout_feed(struct chatout *o, const char *text, size_t len, bool token, chatout_fn fn,
                  void *user)
{
    o->fn = fn;
    o->user = user;
    if (token && reasoning_parser_in_reasoning(o->rp))
        o->reasoning_tokens++;
    reasoning_parser_feed(o->rp, text, len, chatout_on_split, o);
    o->fn = NULL;
}

void chatout_finish(struct chatout *o, chatout_fn fn, void *user)
{
    o->fn = fn;
    o->user = user;
    reasoning_parser_finish(o->rp, chatout_on_split, o);
    if (o->tp) {
        tools_parser_finish(o->tp, chatout_on_tool, o);
        if (cJSON_GetArraySize(o->calls) == 0 && o->reasoning.len > 0) {
            tools_parse_calls_only(&o->p.tp, o->reasoning.s, o->reasoning.len, chatout_on_tool, o);
        }
    }
    o->fn = NULL;
}

const char *chatout_content(const struct chatout *o) { return o->content.s ? o->content.s : ""; }
const char *chatout_reasoning(const struct chatout *o) { return o->reasoning.s ? o->reasoning.s : ""; }
int chatout_reasoning_tokens(const struct chatout *o) { return o->reasoning_tokens; }
bool chatout_in_reasoning(const struct chatout *o) { return reasoning_parser_in_reasoning(o->rp); }
int chatout_n_calls(const struct chatout *o) { return cJSON_GetArraySize(o->calls); }
const cJSON *chatout_calls(const struct chatout *o) { return o->calls; }
