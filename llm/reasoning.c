/* reasoning.c - the reasoning/answer splitter. Tags are matched on the
 * text, not on token ids, so a tag split over several tokens (or chunks)
 * is found too; the tail that could still become a tag is held back. */
#include "llm/reasoning.h"

#include "src/core/omni.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

static const char *const reasoning_names[REASONING_FMT_COUNT] = {
    "none", "think", "mistral", "harmony",
};

const char *reasoning_format_name(enum reasoning_format f)
{
    return (unsigned)f < REASONING_FMT_COUNT ? reasoning_names[f] : "?";
}

int reasoning_format_from_name(const char *name)
{
    for (int f = 0; name && f < REASONING_FMT_COUNT; f++)
        if (!strcmp(name, reasoning_names[f]))
            return f;
    if (name && (!strcmp(name, "deepseek") || !strcmp(name, "qwen3")))
        return REASONING_THINK;
    if (name && !strcmp(name, "gpt-oss"))
        return REASONING_HARMONY;
    return -1;
}

enum reasoning_format reasoning_format_detect(const char *t)
{
    if (t && strstr(t, "<|channel|>"))
        return REASONING_HARMONY;
    if (t && strstr(t, "[THINK]"))
        return REASONING_THINK_BRACKET;
    return REASONING_THINK;
}

static const char *reasoning_open_tag(enum reasoning_format f)
{
    return f == REASONING_THINK ? "<think>" : f == REASONING_THINK_BRACKET ? "[THINK]" : NULL;
}

static const char *reasoning_close_tag(enum reasoning_format f)
{
    return f == REASONING_THINK ? "</think>" : f == REASONING_THINK_BRACKET ? "[/THINK]" : NULL;
}

const char *reasoning_close_text(enum reasoning_format f)
{
    switch (f) {
    case REASONING_THINK: return "\n</think>\n\n";
    case REASONING_THINK_BRACKET: return "[/THINK]";
    case REASONING_HARMONY: return "<|end|><|start|>assistant<|channel|>final<|message|>";
    default: return "";
    }
}

bool reasoning_prompt_opens(enum reasoning_format f, const char *prompt, size_t len)
{
    const char *open = reasoning_open_tag(f);
    if (!open || !prompt)
        return false;
    while (len > 0 && isspace((unsigned char)prompt[len - 1]))
        len--;
    size_t ol = strlen(open);
    return len >= ol && !memcmp(prompt + len - ol, open, ol);
}

// ---- the splitter --------------------------------------------------------------------

enum reasoning_state {
    RS_START,                /* before anything but blanks: an opening tag may come */
    RS_THINK,                /* inside reasoning */
    RS_ANSWER,
    RS_H_HEADER,             /* Harmony: reading a message header up to <|message|> */
    RS_H_BODY,               /* Harmony: a message body */
};

enum harmony_kind { H_ANALYSIS, H_FINAL, H_TOOL };

/* Longest Harmony header read before its <|message|>: "<|start|>assistant
 * to=functions.NAME<|channel|>commentary <|constrain|>json" with a long name
 * fits many times over. */
#define RS_H_MAX_HEADER 512

struct reasoning_parser {
    enum reasoning_format f;
    enum reasoning_state st;
    char *buf;
    size_t len, cap;
    bool skip_blanks;        /* drop blanks right after a closing tag */
    bool said;               /* some reasoning was reported */
    enum harmony_kind hk;
    char tool[128];          /* H_TOOL: the function name */
    bool oom;
};

struct reasoning_parser *reasoning_parser_new(enum reasoning_format f, bool starts_open)
{
    struct reasoning_parser *p = calloc(1, sizeof *p);
    if (!p)
        return NULL;
    p->f = (unsigned)f < REASONING_FMT_COUNT ? f : REASONING_NONE;
    if (p->f == REASONING_NONE)
        p->st = RS_ANSWER;
    else if (p->f == REASONING_HARMONY)
        p->st = RS_H_HEADER;
    else
        p->st = starts_open ? RS_THINK : RS_START;
    p->skip_blanks = starts_open;
    return p;
}

void reasoning_parser_free(struct reasoning_parser *p)
{
    if (!p)
        return;
    free(p->buf);
    free(p);
}

bool reasoning_parser_in_reasoning(const struct reasoning_parser *p)
{
    return p->st == RS_THINK || (p->st == RS_H_BODY && p->hk == H_ANALYSIS);
}

static void rp_emit(reasoning_fn fn, void *user, bool r, const char *s, size_t n)
{
    if (n > 0)
        fn(user, r, s, n);
}

static void rp_consume(struct reasoning_parser *p, size_t n)
{
    if (n == 0)
        return;                       /* buf may still be NULL (nothing was ever buffered) */
    memmove(p->buf, p->buf + n, p->len - n);
    p->len -= n;
}

static const char *rp_find(const struct reasoning_parser *p, const char *needle)
{
    size_t nl = strlen(needle);
    for (size_t i = 0; i + nl <= p->len; i++)
        if (p->buf[i] == needle[0] && !memcmp(p->buf + i, needle, nl))
            return p->buf + i;
    return NULL;
}

/* Length of the longest tail of buf that begins one of the tags. */
static size_t rp_hold(const struct reasoning_parser *p, const char *const *tags, int n)
{
    size_t hold = 0;
    for (int k = 0; k < n; k++) {
        size_t tl = strlen(tags[k]);
        for (size_t l = tl - 1; l > hold; l--)
            if (l <= p->len && !memcmp(p->buf + p->len - l, tags[k], l)) {
                hold = l;
                break;
            }
    }
    return hold;
}

static void rp_drop_blanks(struct reasoning_parser *p)
{
    size_t i = 0;
    while (i < p->len && isspace((unsigned char)p->buf[i]))
        i++;
    rp_consume(p, i);
    if (p->len > 0)
        p->skip_blanks = false;
}

/* Harmony's framing tokens: every header starts with one of these (the
 * prompt ends "<|start|>assistant", so the model opens with "<|channel|>",
 * or with " to=..." naming a recipient before the channel). */
static bool rp_harmony_framed(const char *h, size_t n, bool final)
{
    static const char *const starts[] = { "<|channel|>", "<|start|>", "<|constrain|>", "<|message|>", "to=" };
    size_t i = 0;
    while (i < n && isspace((unsigned char)h[i]))
        i++;
    if (i == n)
        return !final;                /* blanks only: wait for more */
    for (int k = 0; k < 5; k++) {
        size_t sl = strlen(starts[k]), m = n - i < sl ? n - i : sl;
        if (!memcmp(h + i, starts[k], m) && (m == sl || !final))
            return true;
    }
    return false;
}

/* A Harmony header: "<|start|>assistant to=functions.f<|channel|>commentary json"
 * or "<|channel|>commentary to=functions.f <|constrain|>json". A recipient
 * outside functions.* (the built-in browser / python tools) is the model's
 * own business: its message counts as reasoning. */
static void rp_harmony_header(struct reasoning_parser *p, const char *h, size_t n)
{
    p->hk = H_FINAL;
    p->tool[0] = 0;
    const char *ch = NULL;
    for (size_t i = 0; i + 11 <= n; i++)
        if (!memcmp(h + i, "<|channel|>", 11)) {
            ch = h + i + 11;
            break;
        }
    if (ch && (size_t)(h + n - ch) >= 8 && !memcmp(ch, "analysis", 8))
        p->hk = H_ANALYSIS;
    for (size_t i = 0; i + 3 <= n; i++) {
        if (memcmp(h + i, "to=", 3) || (i > 0 && !isspace((unsigned char)h[i - 1]) && h[i - 1] != '>'))
            continue;
        if (i + 13 > n || memcmp(h + i, "to=functions.", 13)) {
            p->hk = H_ANALYSIS;
            break;
        }
        /* the name as far as it is a name: it goes into JSON unescaped */
        size_t b = i + 13, e = b;
        while (e < n && (isalnum((unsigned char)h[e]) || h[e] == '_' || h[e] == '-' || h[e] == '.') &&
               e - b < sizeof p->tool - 1)
            e++;
        if (e == b)
            break;
        memcpy(p->tool, h + b, e - b);
        p->tool[e - b] = 0;
        p->hk = H_TOOL;
        break;
    }
}

/* A tool call's message, spelled for the hermes parser downstream: the
 * opening as soon as the header is read, the arguments as they come. */
static void rp_harmony_tool_open(struct reasoning_parser *p, reasoning_fn fn, void *user)
{
    static const char a[] = "<tool_call>{\"name\": \"", b[] = "\", \"arguments\": ";
    rp_emit(fn, user, false, a, sizeof a - 1);
    rp_emit(fn, user, false, p->tool, strlen(p->tool));
    rp_emit(fn, user, false, b, sizeof b - 1);
}

static void rp_run(struct reasoning_parser *p, bool final, reasoning_fn fn, void *user)
{
    static const char *const h_ends[] = { "<|end|>", "<|return|>", "<|call|>", "<|start|>", "<|channel|>" };
    for (;;) {
        if (p->skip_blanks && (p->st == RS_THINK || p->st == RS_ANSWER)) {
            rp_drop_blanks(p);
            if (p->len == 0)
                return;
        }
        switch (p->st) {
        case RS_START: {
            const char *open = reasoning_open_tag(p->f);
            size_t i = 0, ol = strlen(open);
            while (i < p->len && isspace((unsigned char)p->buf[i]))
                i++;
            size_t have = p->len - i;
            /* buf is NULL before any text: no memcmp on it */
            if (have < ol && (have == 0 || !memcmp(p->buf + i, open, have)) && !final)
                return;   /* blanks, or the start of the tag */
            if (have >= ol && !memcmp(p->buf + i, open, ol)) {
                rp_consume(p, i + ol);
                p->st = RS_THINK;
                p->skip_blanks = true;
            } else {
                p->st = RS_ANSWER;
            }
            continue;
        }
        case RS_THINK: {
            const char *close = reasoning_close_tag(p->f), *open = reasoning_open_tag(p->f);
            /* a template-opened block whose model repeats the opening tag */
            size_t ol = strlen(open);
            if (!p->said && p->len >= ol && !memcmp(p->buf, open, ol)) {
                rp_consume(p, ol);
                p->skip_blanks = true;
                continue;
            }
            if (!p->said && !final && p->len < ol && !memcmp(p->buf, open, p->len))
                return;
            const char *at = rp_find(p, close);
            if (at) {
                size_t n = (size_t)(at - p->buf);
                while (n > 0 && isspace((unsigned char)p->buf[n - 1]))
                    n--;
                rp_emit(fn, user, true, p->buf, n);
                rp_consume(p, (size_t)(at - p->buf) + strlen(close));
                p->st = RS_ANSWER;
                p->skip_blanks = true;
                continue;
            }
            const char *tags[] = { close };
            size_t keep = final ? 0 : rp_hold(p, tags, 1);
            /* blanks before a closing tag are not part of the reasoning */
            size_t n = p->len - keep;
            if (!final)
                while (n > 0 && isspace((unsigned char)p->buf[n - 1]))
                    n--;
            rp_emit(fn, user, true, p->buf, n);
            p->said |= n > 0;
            rp_consume(p, n);
            return;
        }
        case RS_ANSWER:
            rp_emit(fn, user, false, p->buf, p->len);
            p->len = 0;
            return;
        case RS_H_HEADER: {
            const char *at = rp_find(p, "<|message|>");
            /* Text that is not a header (a model that skipped the channels,
             * or a header past any sane length) is answer text, up to the
             * next framing token. */
            /* (with its <|message|> seen, the header is whole: no prefixes) */
            if (!rp_harmony_framed(p->buf, at ? (size_t)(at - p->buf) : p->len, final || at) ||
                (!at && p->len > RS_H_MAX_HEADER)) {
                p->hk = H_FINAL;
                p->st = RS_H_BODY;
                continue;
            }
            if (!at) {
                /* a header cut short by the end of the output says nothing */
                if (final)
                    p->len = 0;
                return;
            }
            rp_harmony_header(p, p->buf, (size_t)(at - p->buf));
            rp_consume(p, (size_t)(at - p->buf) + 11);
            p->st = RS_H_BODY;
            if (p->hk == H_TOOL)
                rp_harmony_tool_open(p, fn, user);
            continue;
        }
        case RS_H_BODY: {
            size_t best = p->len;
            for (int k = 0; k < 5; k++) {
                const char *at = rp_find(p, h_ends[k]);
                if (at && (size_t)(at - p->buf) < best)
                    best = (size_t)(at - p->buf);
            }
            bool ended = best < p->len || final;
            size_t n = best;
            if (!ended)
                n -= rp_hold(p, h_ends, 5);
            rp_emit(fn, user, p->hk == H_ANALYSIS, p->buf, n);
            rp_consume(p, n);
            if (!ended)
                return;
            if (p->hk == H_TOOL)
                rp_emit(fn, user, false, "}</tool_call>", 13);
            /* <|end|> and friends close the message; the next header follows */
            for (int k = 0; k < 3; k++)
                if (p->len >= strlen(h_ends[k]) && !memcmp(p->buf, h_ends[k], strlen(h_ends[k])))
                    rp_consume(p, strlen(h_ends[k]));
            p->st = RS_H_HEADER;
            if (final && p->len == 0)
                return;
            continue;
        }
        }
    }
}

int reasoning_parser_feed(struct reasoning_parser *p, const char *text, size_t len,
                          reasoning_fn fn, void *user)
{
    if (p->oom) {
        rp_emit(fn, user, false, text, len);
        return OMNI_ERR_NOMEM;
    }
    if (omni_reserve(&p->buf, &p->cap, p->len + len + 1) < 0) {
        p->oom = true;
        rp_emit(fn, user, false, p->buf, p->len);
        rp_emit(fn, user, false, text, len);
        p->len = 0;
        return OMNI_ERR_NOMEM;
    }
    memcpy(p->buf + p->len, text, len);
    p->len += len;
    rp_run(p, false, fn, user);
    return 0;
}

int reasoning_parser_finish(struct reasoning_parser *p, reasoning_fn fn, void *user)
{
    if (p->oom)
        return OMNI_ERR_NOMEM;
    rp_run(p, true, fn, user);
    return 0;
}
