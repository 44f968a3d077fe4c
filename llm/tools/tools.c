/* tools.c - tool-call formats (markers per model family, detection from the
 * chat template) and the streaming splitter: content passes through except
 * the tail that could still become a call marker; call regions are buffered
 * until they close and then reported as calls (tools_parse.c reads them).
 * The formats are the families' documented output spellings. */
#include "llm/tools/tools_int.h"

#include "src/core/omni.h"

#include <cjson/cJSON.h>
#include <ctype.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

// ---- formats ----------------------------------------------------------------------

struct tools_marker {
    const char *open;
    const char *close;       /* NULL: the call runs to the next open marker or the end */
    bool keep;               /* the markers belong to the body (<function=N>...) */
    bool strict;             /* names must be tools of the request (``` fences) */
};

struct tools_fmt_info {
    const char *name;
    struct tools_marker m[3];
    const char *swallow[2];  /* wrappers around call lists, dropped from the content */
    bool bare;               /* a call may open the output without a marker */
    struct tools_wire wire;
};

/* DeepSeek's markers: fullwidth bars (U+FF5C) and U+2581 as the word separator. */
#define DS_BAR "\xef\xbd\x9c"
#define DS_SP "\xe2\x96\x81"
#define DS_CALLS_BEGIN "<" DS_BAR "tool" DS_SP "calls" DS_SP "begin" DS_BAR ">"
#define DS_CALLS_END "<" DS_BAR "tool" DS_SP "calls" DS_SP "end" DS_BAR ">"
#define DS_CALL_BEGIN "<" DS_BAR "tool" DS_SP "call" DS_SP "begin" DS_BAR ">"
#define DS_CALL_END "<" DS_BAR "tool" DS_SP "call" DS_SP "end" DS_BAR ">"
#define FENCE_JSON { "```json", "```", true, true }

static const struct tools_fmt_info tools_fmts[TOOLS_FMT_COUNT] = {
    [TOOLS_FMT_JSON] = { "json", { FENCE_JSON }, { NULL }, true,
                         { "", "[", "]", "", "", ", ", "name", "arguments" } },
    [TOOLS_FMT_HERMES] = { "hermes", { { "<tool_call>", "</tool_call>", false, false }, FENCE_JSON },
                           { NULL }, true,
                           { "<tool_call>", "", "", "<tool_call>\n", "\n</tool_call>", "\n", "name", "arguments" } },
    [TOOLS_FMT_QWEN3_CODER] = { "qwen3_coder",
                                { { "<tool_call>", "</tool_call>", false, false },
                                  { "<function=", "</function>", true, false }, FENCE_JSON },
                                { NULL }, true,
                                { "<tool_call>", "", "", "<tool_call>\n", "\n</tool_call>", "\n", "name", "arguments" } },
    [TOOLS_FMT_LLAMA3] = { "llama3", { { "<|python_tag|>", NULL, false, false }, FENCE_JSON }, { NULL }, true,
                           { "", "", "", "", "", "; ", "name", "parameters" } },
    [TOOLS_FMT_MISTRAL] = { "mistral", { { "[TOOL_CALLS]", NULL, false, false }, FENCE_JSON }, { NULL }, true,
                            { "[TOOL_CALLS]", "[TOOL_CALLS][", "]", "", "", ", ", "name", "arguments" } },
    [TOOLS_FMT_DEEPSEEK] = { "deepseek", { { DS_CALL_BEGIN, DS_CALL_END, false, false }, FENCE_JSON },
                             { DS_CALLS_BEGIN, DS_CALLS_END }, true,
                             { DS_CALLS_BEGIN, DS_CALLS_BEGIN, DS_CALLS_END, DS_CALL_BEGIN, DS_CALL_END, "",
                               "name", "arguments" } },
    [TOOLS_FMT_FUNCTIONARY] = { "functionary",
                                { { ">>>", NULL, false, false }, { "<function=", "</function>", true, false } },
                                { NULL }, true,
                                { ">>>", "", "", ">>>", "", "\n", "name", "arguments" } },
    [TOOLS_FMT_GRANITE] = { "granite", { { "<|tool_call|>", NULL, false, false }, FENCE_JSON }, { NULL }, true,
                            { "<|tool_call|>", "<|tool_call|>[", "]", "", "", ", ", "name", "arguments" } },
    [TOOLS_FMT_GEMMA] = { "gemma",
                          { { "```tool_code", "```", true, false },
                            { "<start_function_call>", "<end_function_call>", false, false }, FENCE_JSON },
                          { NULL }, true,
                          { "```tool_code", "", "", "```tool_code\n", "\n```", "\n", "name", "arguments" } },
    [TOOLS_FMT_PYTHONIC] = { "pythonic",
                             { { "<|tool_call_start|>", "<|tool_call_end|>", false, false }, FENCE_JSON },
                             { NULL }, true,
                             { "", "[", "]", "", "", ", ", "name", "arguments" } },
    [TOOLS_FMT_NONE] = { "none", { { NULL } }, { NULL }, false, { "", "", "", "", "", "", "name", "arguments" } },
};

const char *tools_format_name(enum tools_format f)
{
    return (unsigned)f < TOOLS_FMT_COUNT ? tools_fmts[f].name : "?";
}

int tools_format_from_name(const char *name)
{
    for (int f = 0; name && f < TOOLS_FMT_COUNT; f++)
        if (!strcmp(name, tools_fmts[f].name))
            return f;
    /* Family names people type. gpt-oss's Harmony tool messages come out of
     * the reasoning splitter (llm/reasoning.h) spelled as hermes calls. */
    static const struct {
        const char *alias;
        enum tools_format f;
    } aliases[] = {
        { "qwen", TOOLS_FMT_HERMES },       { "qwen2.5", TOOLS_FMT_HERMES },
        { "qwen3", TOOLS_FMT_HERMES },      { "smollm3", TOOLS_FMT_HERMES },
        { "harmony", TOOLS_FMT_HERMES },    { "gpt-oss", TOOLS_FMT_HERMES },
        { "qwen3.5", TOOLS_FMT_QWEN3_CODER }, { "llama4", TOOLS_FMT_PYTHONIC },
        { "lfm2", TOOLS_FMT_PYTHONIC },     { "lfm2.5", TOOLS_FMT_PYTHONIC },
        { "gemma3", TOOLS_FMT_GEMMA },
    };
    for (size_t i = 0; name && i < sizeof aliases / sizeof aliases[0]; i++)
        if (!strcmp(name, aliases[i].alias))
            return aliases[i].f;
    return -1;
}

const char *tools_format_names(void)
{
    return "json, hermes (qwen, smollm3, harmony/gpt-oss), qwen3_coder (qwen3.5), llama3, mistral, "
           "deepseek, functionary, granite, gemma (gemma3), pythonic (llama4, lfm2), none";
}

void tools_wire_of(enum tools_format f, struct tools_wire *out)
{
    *out = tools_fmts[(unsigned)f < TOOLS_FMT_COUNT ? f : TOOLS_FMT_JSON].wire;
}

enum tools_format tools_format_detect(const char *t)
{
    if (!t || !*t)
        return TOOLS_FMT_JSON;
    /* gpt-oss: Harmony tool messages, turned into hermes calls by the
     * reasoning splitter (reasoning_format_detect gives "harmony"). */
    if (strstr(t, "<|channel|>") && strstr(t, "<|call|>"))
        return TOOLS_FMT_HERMES;
    if (strstr(t, "<parameter=") && strstr(t, "<function="))
        return TOOLS_FMT_QWEN3_CODER;
    if (strstr(t, "<tool_call>"))
        return TOOLS_FMT_HERMES;
    if (strstr(t, "tool" DS_SP "call"))
        return TOOLS_FMT_DEEPSEEK;
    if (strstr(t, "[TOOL_CALLS]"))
        return TOOLS_FMT_MISTRAL;
    if (strstr(t, "<|tool_call|>"))
        return TOOLS_FMT_GRANITE;
    /* LFM2: the template lists tools in <|tool_list_start|> (LFM2.5: "List of
     * tools: [") and the model answers <|tool_call_start|>[f(a=1)]<|tool_call_end|>. */
    if (strstr(t, "<|tool_call_start|>") || strstr(t, "<|tool_list_start|>") ||
        strstr(t, "<|tool_response_start|>") || strstr(t, "List of tools: ["))
        return TOOLS_FMT_PYTHONIC;
    if (strstr(t, ">>>all") || strstr(t, "<function="))
        return TOOLS_FMT_FUNCTIONARY;
    if (strstr(t, "<|header_start|>"))   /* Llama 4: pythonic lists */
        return TOOLS_FMT_PYTHONIC;
    if (strstr(t, "<|python_tag|>") || strstr(t, "<|start_header_id|>"))
        return TOOLS_FMT_LLAMA3;
    if (strstr(t, "tool_code") || strstr(t, "<start_function_call>") || strstr(t, "<start_of_turn>"))
        return TOOLS_FMT_GEMMA;
    return TOOLS_FMT_JSON;
}

// ---- the streaming splitter ----------------------------------------------------------

enum tools_mode {
    TM_START,                /* only blanks so far: a bare call may still open the output */
    TM_TEXT,
    TM_CALL,                 /* inside marker m of the format */
    TM_BARE,                 /* a bare call: buffered to the end */
};

struct tools_parser {
    struct tools_parser_params p;
    const struct tools_fmt_info *fi;
    cJSON *tools;            /* parsed p.tools_json, or NULL */
    char *buf;               /* text not yet resolved */
    size_t len, cap;
    enum tools_mode mode;
    int marker;              /* TM_CALL: which */
    size_t body_from;        /* TM_CALL: where to look for the close marker */
    bool after_call;         /* drop blanks between and after calls */
    int n_calls;
    struct tools_partials sent;  /* calls of the open region announced so far, with the
                                    arguments text sent for each */
    int region_base;         /* the index of its first */
    uint64_t rng;
    bool oom;
};

struct tools_parser_params tools_parser_default_params(void)
{
    return (struct tools_parser_params){ .fmt = TOOLS_FMT_JSON, .parallel = true };
}

struct tools_parser *tools_parser_new(const struct tools_parser_params *pp)
{
    struct tools_parser *p = calloc(1, sizeof *p);
    if (!p)
        return NULL;
    p->p = *pp;
    p->p.tools_json = NULL;
    if ((unsigned)p->p.fmt >= TOOLS_FMT_COUNT)
        p->p.fmt = TOOLS_FMT_JSON;
    p->fi = &tools_fmts[p->p.fmt];
    if (pp->tools_json) {
        p->tools = cJSON_Parse(pp->tools_json);
        if (p->tools && !cJSON_IsArray(p->tools)) {
            cJSON_Delete(p->tools);
            p->tools = NULL;
        }
    }
    p->rng = pp->id_seed ? pp->id_seed
                         : (uint64_t)time(NULL) ^ (uint64_t)(uintptr_t)p ^ ((uint64_t)clock() << 32);
    return p;
}

void tools_parser_free(struct tools_parser *p)
{
    if (!p)
        return;
    cJSON_Delete(p->tools);
    tools_partials_clear(&p->sent);
    free(p->buf);
    free(p);
}

int tools_parser_n_calls(const struct tools_parser *p) { return p->n_calls; }

static void tools_emit_content(tools_event_fn fn, void *user, const char *s, size_t n)
{
    if (n == 0)
        return;
    struct tools_event ev = { .type = TOOLS_EV_CONTENT, .text = s, .len = n };
    fn(user, &ev);
}

static void tools_make_id(struct tools_parser *p, char id[32])
{
    static const char al[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    memcpy(id, "call_", 5);
    for (int i = 0; i < 24; i++) {
        /* splitmix64: ids only need to be unique, not secret */
        const uint64_t z = omni_splitmix64(&p->rng);
        id[5 + i] = al[z % (sizeof al - 1)];
    }
    id[29] = 0;
}

static bool tools_known(const struct tools_parser *p, const char *name)
{
    if (!p->tools)
        return true;
    const cJSON *t;
    cJSON_ArrayForEach(t, p->tools) {
        const cJSON *fn = cJSON_GetObjectItemCaseSensitive(t, "function");
        const cJSON *n = cJSON_GetObjectItemCaseSensitive(cJSON_IsObject(fn) ? fn : t, "name");
        if (cJSON_IsString(n) && !strcmp(n->valuestring, name))
            return true;
    }
    return false;
}

static void tools_emit_args(tools_event_fn fn, void *user, int index, const char *s, size_t n)
{
    if (n == 0)
        return;
    struct tools_event ev = { .type = TOOLS_EV_CALL_ARGS, .index = index, .text = s, .len = n };
    fn(user, &ev);
}

static void tools_emit_start(struct tools_parser *p, const char *name, tools_event_fn fn, void *user)
{
    char id[32];
    tools_make_id(p, id);
    struct tools_event ev = { .type = TOOLS_EV_CALL_START, .index = p->n_calls++, .id = id, .name = name };
    fn(user, &ev);
}

/* The end of announced call i of the region: what its final arguments add
 * to the text already sent. When the final reading disagrees with what was
 * sent (the text stopped being a call after the name and part of the
 * arguments went out), the announced call stands: its arguments are the
 * sent text, closed. */
static void tools_finish_sent(struct tools_parser *p, int i, const char *name, const char *args,
                              tools_event_fn fn, void *user)
{
    const struct tools_partial *s = &p->sent.v[i];
    const char *sent = s->len ? s->args : "";
    char *fix = NULL;
    const char *rest = "";
    if (args && !strcmp(name, s->name) && !strncmp(args, sent, s->len)) {
        rest = args + s->len;
    } else if (s->len == 0) {
        rest = "{}";
    } else {
        cJSON *v = tools_json_parse_lenient(sent, s->len, NULL);
        fix = v ? cJSON_PrintUnformatted(v) : NULL;
        cJSON_Delete(v);
        if (fix && !strncmp(fix, sent, s->len))
            rest = fix + s->len;
    }
    tools_emit_args(fn, user, p->region_base + i, rest, strlen(rest));
    free(fix);
}

/* Parse one call region; report its calls (finishing those announced while
 * it streamed). false when it holds no call (or, strict, a call of an
 * unknown tool): the caller shows it as content. */
static bool tools_region(struct tools_parser *p, const char *s, size_t n, bool strict,
                         tools_event_fn fn, void *user)
{
    struct tools_calls calls = { 0 };
    int got = tools_body_calls(s, n, &calls);
    for (int i = 0; strict && i < got; i++)
        if (!tools_known(p, calls.v[i].name))
            got = 0;
    for (int i = 0; i < got; i++) {
        if (i >= p->sent.n && !p->p.parallel && p->n_calls >= 1)
            break;
        if (p->tools)
            tools_coerce_args(calls.v[i].args, tools_find_schema(p->tools, calls.v[i].name));
        char *args = cJSON_PrintUnformatted(calls.v[i].args);
        if (i < p->sent.n) {
            tools_finish_sent(p, i, calls.v[i].name, args, fn, user);
        } else {
            tools_emit_start(p, calls.v[i].name, fn, user);
            tools_emit_args(fn, user, p->n_calls - 1, args ? args : "{}", args ? strlen(args) : 2);
        }
        free(args);
    }
    for (int i = got; i < p->sent.n; i++)
        tools_finish_sent(p, i, NULL, NULL, fn, user);
    bool any = got > 0 || p->sent.n > 0;
    tools_partials_clear(&p->sent);
    tools_calls_clear(&calls);
    return any;
}

/* Longest tail of buf that is a proper start of marker m. */
static size_t tools_tail_of(const char *buf, size_t len, const char *m)
{
    for (size_t l = strlen(m) - 1; l > 0; l--)
        if (l <= len && !memcmp(buf + len - l, m, l))
            return l;
    return 0;
}

/* An open call region, not closed yet: announce its calls as soon as their
 * names are known and send what is certain of their arguments (see
 * tools_partial_scan); a tail that could be the close marker waits. */
static void tools_progress(struct tools_parser *p, tools_event_fn fn, void *user)
{
    size_t n = p->len;
    bool strict = p->mode == TM_BARE;
    if (p->mode == TM_CALL) {
        const struct tools_marker *m = &p->fi->m[p->marker];
        if (m->keep)
            return;
        n -= tools_tail_of(p->buf, p->len, m->close ? m->close : m->open);
    }
    struct tools_partials now = { 0 };
    tools_partial_scan(p->buf, n, p->tools, &now);
    for (int k = 0; k < now.n; k++) {
        struct tools_partial *c = &now.v[k];
        if (k == p->sent.n) {
            if ((!p->p.parallel && p->n_calls >= 1) || (strict && !tools_known(p, c->name)))
                break;
            if (p->sent.n == p->sent.cap) {
                int cap = p->sent.cap ? p->sent.cap * 2 : 4;
                struct tools_partial *v = realloc(p->sent.v, (size_t)cap * sizeof *v);
                if (!v)
                    break;   /* the call is reported whole when the region ends */
                p->sent.v = v;
                p->sent.cap = cap;
            }
            if (k == 0)
                p->region_base = p->n_calls;
            p->sent.v[p->sent.n++] = (struct tools_partial){ .name = c->name };
            c->name = NULL;
            tools_emit_start(p, p->sent.v[k].name, fn, user);
        }
        struct tools_partial *s = &p->sent.v[k];
        if (c->len > s->len && (s->len == 0 || !memcmp(c->args, s->args, s->len))) {
            tools_emit_args(fn, user, p->region_base + k, c->args + s->len, c->len - s->len);
            free(s->args);
            s->args = c->args;
            s->len = c->len;
            c->args = NULL;
        }
    }
    tools_partials_clear(&now);
}

static const char *tools_memmem(const char *h, size_t hn, const char *n)
{
    size_t nn = strlen(n);
    for (size_t i = 0; nn <= hn && i + nn <= hn; i++)
        if (h[i] == n[0] && !memcmp(h + i, n, nn))
            return h + i;
    return NULL;
}

/* Earliest marker (open or swallow) in buf: its offset, which one (kind 0:
 * open m[which], 1: swallow[which]); SIZE_MAX when none. */
static size_t tools_next_marker(const struct tools_parser *p, int *kind, int *which)
{
    size_t best = SIZE_MAX;
    for (int k = 0; k < 3; k++) {
        const char *o = p->fi->m[k].open;
        const char *at = o ? tools_memmem(p->buf, p->len, o) : NULL;
        if (at && (size_t)(at - p->buf) < best) {
            best = (size_t)(at - p->buf);
            *kind = 0;
            *which = k;
        }
    }
    for (int k = 0; k < 2; k++) {
        const char *o = p->fi->swallow[k];
        const char *at = o ? tools_memmem(p->buf, p->len, o) : NULL;
        if (at && (size_t)(at - p->buf) < best) {
            best = (size_t)(at - p->buf);
            *kind = 1;
            *which = k;
        }
    }
    return best;
}

/* Longest tail of buf that is the start of some marker (held back). */
static size_t tools_hold(const struct tools_parser *p)
{
    size_t hold = 0;
    for (int k = 0; k < 5; k++) {
        const char *o = k < 3 ? p->fi->m[k].open : p->fi->swallow[k - 3];
        size_t l = o ? tools_tail_of(p->buf, p->len, o) : 0;
        if (l > hold)
            hold = l;
    }
    return hold;
}

/* Does a marker start at buf[i]? 1 yes, 0 no, -1 the text so far is the
 * start of one. */
static int tools_marker_at(const struct tools_parser *p, size_t i)
{
    int r = 0;
    for (int k = 0; k < 5; k++) {
        const char *o = k < 3 ? p->fi->m[k].open : p->fi->swallow[k - 3];
        if (!o)
            continue;
        size_t ol = strlen(o), have = p->len - i;
        if (!memcmp(p->buf + i, o, have < ol ? have : ol)) {
            if (have >= ol)
                return 1;
            r = -1;
        }
    }
    return r;
}

static void tools_consume(struct tools_parser *p, size_t n)
{
    memmove(p->buf, p->buf + n, p->len - n);
    p->len -= n;
}

static void tools_run(struct tools_parser *p, bool final, tools_event_fn fn, void *user)
{
    for (;;) {
        if (p->mode == TM_START || (p->mode == TM_TEXT && p->after_call)) {
            size_t i = 0;
            while (i < p->len && isspace((unsigned char)p->buf[i]))
                i++;
            if (i == p->len) {
                if (final && p->mode == TM_START)
                    tools_emit_content(fn, user, p->buf, p->len);
                if (final || p->after_call)
                    p->len = 0;
                return;
            }
            if (p->after_call) {
                tools_consume(p, i);
                p->after_call = false;
                continue;
            }
            /* a marker of the format wins over a bare call */
            int mk = tools_marker_at(p, i);
            if (mk < 0 && !final)
                return;
            if (mk > 0) {
                tools_consume(p, i);
                p->mode = TM_TEXT;
                continue;
            }
            int bare = p->fi->bare ? tools_bare_check(p->buf + i, p->len - i,
                                                      p->p.fmt == TOOLS_FMT_FUNCTIONARY)
                                   : 0;
            if (bare < 0 && !final)
                return;
            if (bare > 0 && p->p.fmt == TOOLS_FMT_FUNCTIONARY && p->buf[i] != '{' &&
                p->buf[i] != '[' && p->buf[i] != '`') {
                /* the template ended with ">>>": the output starts inside a call */
                tools_consume(p, i);
                p->mode = TM_CALL;
                p->marker = 0;
                p->body_from = 0;
            } else if (bare > 0) {
                tools_consume(p, i);
                p->mode = TM_BARE;
            } else {
                if (p->p.fmt == TOOLS_FMT_FUNCTIONARY && p->len - i >= 4 &&
                    !memcmp(p->buf + i, "all\n", 4))
                    tools_consume(p, i + 4);   /* Functionary's "text follows" */
                p->mode = TM_TEXT;
            }
            continue;
        }
        if (p->mode == TM_TEXT) {
            int kind = 0, which = 0;
            size_t at = tools_next_marker(p, &kind, &which);
            if (at == SIZE_MAX) {
                size_t keep = final ? 0 : tools_hold(p);
                tools_emit_content(fn, user, p->buf, p->len - keep);
                tools_consume(p, p->len - keep);
                return;
            }
            tools_emit_content(fn, user, p->buf, at);
            tools_consume(p, at);
            if (kind == 1) {
                tools_consume(p, strlen(p->fi->swallow[which]));
                p->after_call = true;
                continue;
            }
            const struct tools_marker *m = &p->fi->m[which];
            size_t ol = strlen(m->open);
            if (!m->keep)
                tools_consume(p, ol);
            p->mode = TM_CALL;
            p->marker = which;
            p->body_from = m->keep ? ol : 0;
            continue;
        }
        if (p->mode == TM_CALL) {
            const struct tools_marker *m = &p->fi->m[p->marker];
            const char *close = m->close ? m->close : m->open;
            const char *at = tools_memmem(p->buf + p->body_from, p->len - p->body_from, close);
            if (!at && !final) {
                tools_progress(p, fn, user);
                return;
            }
            size_t end = at ? (size_t)(at - p->buf) : p->len;
            size_t body = end + (at && m->keep && m->close ? strlen(close) : 0);
            size_t used = end + (at && m->close ? strlen(close) : 0);
            if (!tools_region(p, p->buf, body, m->strict, fn, user)) {
                /* not a call after all: the text stays, without our own markers */
                size_t b = 0;
                if (!m->keep && p->p.fmt == TOOLS_FMT_FUNCTIONARY && body >= 4 &&
                    !memcmp(p->buf, "all\n", 4))
                    b = 4;
                tools_emit_content(fn, user, p->buf + b, body - b);
                p->after_call = false;
            } else {
                p->after_call = true;
            }
            tools_consume(p, used);
            p->mode = TM_TEXT;
            continue;
        }
        /* TM_BARE: the whole rest of the output decides */
        if (!final) {
            tools_progress(p, fn, user);
            return;
        }
        if (!tools_region(p, p->buf, p->len, true, fn, user))
            tools_emit_content(fn, user, p->buf, p->len);
        p->len = 0;
        p->mode = TM_TEXT;
        return;
    }
}

int tools_parser_feed(struct tools_parser *p, const char *text, size_t len, tools_event_fn fn,
                      void *user)
{
    if (p->oom) {
        tools_emit_content(fn, user, text, len);
        return OMNI_ERR_NOMEM;
    }
    if (omni_reserve(&p->buf, &p->cap, p->len + len + 1) < 0) {
        /* pass everything through rather than lose the answer */
        p->oom = true;
        tools_emit_content(fn, user, p->buf, p->len);
        tools_emit_content(fn, user, text, len);
        p->len = 0;
        return OMNI_ERR_NOMEM;
    }
    memcpy(p->buf + p->len, text, len);
    p->len += len;
    tools_run(p, false, fn, user);
    return 0;
}

int tools_parser_finish(struct tools_parser *p, tools_event_fn fn, void *user)
{
    if (!p->oom)
        tools_run(p, true, fn, user);
    return p->oom ? OMNI_ERR_NOMEM : 0;
}

struct tools_calls_only {
    tools_event_fn fn;
    void *user;
};

static void tools_drop_content(void *user, const struct tools_event *ev)
{
    struct tools_calls_only *co = user;
    if (ev->type != TOOLS_EV_CONTENT)
        co->fn(co->user, ev);
}

int tools_parse_calls_only(const struct tools_parser_params *pp, const char *text, size_t len,
                           tools_event_fn fn, void *user)
{
    struct tools_parser *p = tools_parser_new(pp);
    if (!p)
        return OMNI_ERR_NOMEM;
    struct tools_calls_only co = { fn, user };
    /* Reasoning is prose: calls there are only those with markers. */
    p->mode = TM_TEXT;
    int rc = tools_parser_feed(p, text, len, tools_drop_content, &co);
    if (rc == 0)
        rc = tools_parser_finish(p, tools_drop_content, &co);
    int n = p->n_calls;
    tools_parser_free(p);
    return rc < 0 ? rc : n;
}
