/* lexer.c - Jinja source -> tokens: text between tags, {{ }}, {% %} and the
 * expression tokens inside them; comments and {% raw %} handled here.
 * Whitespace control follows jinja2's lexer with trim_blocks and
 * lstrip_blocks on: "-" strips all whitespace on that side, a block or
 * comment tag alone on its line loses the indentation before it, and the
 * first newline after %} or #} goes. */
#include "llm/template/tpl_int.h"
#include "src/core/omni.h"

#include <stdlib.h>
#include <string.h>

struct lexer {
    struct tpl *t;
    const char *s;   /* t->src */
    size_t n, pos;
    struct tpl_token *toks;
    size_t ntoks, cap;
    char *err;
    size_t errlen;
};

void tpl_position(const struct tpl *t, uint32_t pos, int *line, int *col)
{
    int l = 1, c = 1;
    for (uint32_t i = 0; i < pos && i < t->len; i++) {
        if (t->src[i] == '\n') {
            l++;
            c = 1;
        } else if (((unsigned char)t->src[i] & 0xc0) != 0x80)
            c++;
    }
    *line = l;
    *col = c;
}

static int lex_error(struct lexer *lx, size_t pos, const char *msg)
{
    int line, col;
    tpl_position(lx->t, (uint32_t)pos, &line, &col);
    return omni_fail(lx->err, lx->errlen, OMNI_ERR_FORMAT, "line %d, column %d: %s", line, col, msg);
}

static struct tpl_token *push(struct lexer *lx, enum tpl_tok type, size_t pos, const char *p, size_t n)
{
    if (lx->ntoks == lx->cap) {
        size_t cap = lx->cap ? lx->cap * 2 : 256;
        struct tpl_token *nt = realloc(lx->toks, cap * sizeof *nt);
        if (!nt)
            return NULL;
        lx->toks = nt;
        lx->cap = cap;
    }
    struct tpl_token *t = &lx->toks[lx->ntoks++];
    *t = (struct tpl_token){ .type = type, .pos = (uint32_t)pos, .p = p, .n = n };
    return t;
}

static bool is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }
static bool is_alpha(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
static bool is_digit(char c) { return c >= '0' && c <= '9'; }

/* Python's splitlines + "\n".join: every line break becomes \n, and the
 * final one goes (keep_trailing_newline is off). */
static char *normalize(struct tpl_arena *a, const char *src, size_t len, size_t *out_len)
{
    char *d = tpl_arena_alloc(a, len + 1);
    if (!d)
        return NULL;
    size_t k = 0;
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)src[i];
        if (c == '\r') {
            if (i + 1 < len && src[i + 1] == '\n')
                i++;
            d[k++] = '\n';
        } else if (c == '\v' || c == '\f' || (c >= 0x1c && c <= 0x1e))
            d[k++] = '\n';
        else if (c == 0xc2 && i + 1 < len && (unsigned char)src[i + 1] == 0x85) {
            d[k++] = '\n';
            i++;
        } else if (c == 0xe2 && i + 2 < len && (unsigned char)src[i + 1] == 0x80 &&
                   ((unsigned char)src[i + 2] == 0xa8 || (unsigned char)src[i + 2] == 0xa9)) {
            d[k++] = '\n';
            i += 2;
        } else
            d[k++] = (char)c;
    }
    if (k && d[k - 1] == '\n')
        k--;
    d[k] = 0;
    *out_len = k;
    return d;
}

static void put_utf8(char *o, size_t *k, uint32_t cp)
{
    if (cp < 0x80)
        o[(*k)++] = (char)cp;
    else if (cp < 0x800) {
        o[(*k)++] = (char)(0xc0 | cp >> 6);
        o[(*k)++] = (char)(0x80 | (cp & 0x3f));
    } else if (cp < 0x10000) {
        o[(*k)++] = (char)(0xe0 | cp >> 12);
        o[(*k)++] = (char)(0x80 | ((cp >> 6) & 0x3f));
        o[(*k)++] = (char)(0x80 | (cp & 0x3f));
    } else {
        o[(*k)++] = (char)(0xf0 | cp >> 18);
        o[(*k)++] = (char)(0x80 | ((cp >> 12) & 0x3f));
        o[(*k)++] = (char)(0x80 | ((cp >> 6) & 0x3f));
        o[(*k)++] = (char)(0x80 | (cp & 0x3f));
    }
}

static int hexval(char c)
{
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

/* A string literal's body with Python's escapes (jinja2 decodes literals
 * with "unicode-escape"); unknown escapes keep their backslash. */
static int lex_string(struct lexer *lx, size_t start)
{
    char q = lx->s[start];
    size_t i = start + 1;
    while (i < lx->n && lx->s[i] != q)
        i += lx->s[i] == '\\' && i + 1 < lx->n ? 2 : 1;
    if (i >= lx->n)
        return lex_error(lx, start, "unterminated string");
    const char *p = lx->s + start + 1;
    size_t n = i - start - 1;
    char *o = tpl_arena_alloc(&lx->t->arena, n + 1);
    if (!o)
        return OMNI_ERR_NOMEM;
    size_t k = 0;
    for (size_t j = 0; j < n; j++) {
        if (p[j] != '\\' || j + 1 >= n) {
            o[k++] = p[j];
            continue;
        }
        char e = p[++j];
        int digits = e == 'x' ? 2 : e == 'u' ? 4 : e == 'U' ? 8 : 0;
        switch (e) {
        case 'n': o[k++] = '\n'; break;
        case 't': o[k++] = '\t'; break;
        case 'r': o[k++] = '\r'; break;
        case '\\': o[k++] = '\\'; break;
        case '\'': o[k++] = '\''; break;
        case '"': o[k++] = '"'; break;
        case 'a': o[k++] = '\a'; break;
        case 'b': o[k++] = '\b'; break;
        case 'f': o[k++] = '\f'; break;
        case 'v': o[k++] = '\v'; break;
        case '\n': break;
        case 'x': case 'u': case 'U': {
            uint32_t cp = 0;
            int d = 0;
            for (; d < digits && j + 1 + d < n && hexval(p[j + 1 + d]) >= 0; d++)
                cp = cp * 16 + (uint32_t)hexval(p[j + 1 + d]);
            if (d < digits || cp > 0x10ffff)
                return lex_error(lx, start, "malformed \\x, \\u or \\U escape in string");
            j += (size_t)digits;
            put_utf8(o, &k, cp); /* at most 4 bytes for the 4..10 escape bytes read */
            break;
        }
        default:
            if (e >= '0' && e <= '7') {
                uint32_t cp = 0;
                int d = 0;
                for (; d < 3 && j + d < n && p[j + d] >= '0' && p[j + d] <= '7'; d++)
                    cp = cp * 8 + (uint32_t)(p[j + d] - '0');
                j += (size_t)d - 1;
                put_utf8(o, &k, cp);
            } else {
                o[k++] = '\\';
                o[k++] = e;
            }
        }
    }
    o[k] = 0;
    struct tpl_token *t = push(lx, T_STRING, start, o, k);
    if (!t)
        return OMNI_ERR_NOMEM;
    lx->pos = i + 1;
    return 0;
}

static int lex_number(struct lexer *lx, size_t start)
{
    const char *s = lx->s;
    size_t i = start;
    char buf[64];
    size_t k = 0;
    bool flt = false;
    while (i < lx->n && (is_digit(s[i]) || (s[i] == '_' && i + 1 < lx->n && is_digit(s[i + 1])))) {
        if (s[i] != '_' && k < sizeof buf - 1)
            buf[k++] = s[i];
        i++;
    }
    /* After a dot (x.0.1) only an integer: jinja2's (?<!\.) rule. */
    bool after_dot = start > 0 && s[start - 1] == '.';
    if (!after_dot && i + 1 < lx->n && s[i] == '.' && is_digit(s[i + 1])) {
        flt = true;
        buf[k++] = s[i++];
        while (i < lx->n && (is_digit(s[i]) || (s[i] == '_' && i + 1 < lx->n && is_digit(s[i + 1])))) {
            if (s[i] != '_' && k < sizeof buf - 1)
                buf[k++] = s[i];
            i++;
        }
    }
    if (!after_dot && i < lx->n && (s[i] == 'e' || s[i] == 'E')) {
        size_t j = i + 1;
        if (j < lx->n && (s[j] == '+' || s[j] == '-'))
            j++;
        if (j < lx->n && is_digit(s[j])) {
            flt = true;
            while (i < j && k < sizeof buf - 1)
                buf[k++] = s[i++];
            while (i < lx->n && is_digit(s[i])) {
                if (k < sizeof buf - 1)
                    buf[k++] = s[i];
                i++;
            }
        }
    }
    buf[k] = 0;
    struct tpl_token *t = push(lx, flt ? T_FLOAT : T_INT, start, s + start, i - start);
    if (!t)
        return OMNI_ERR_NOMEM;
    if (flt)
        t->f = strtod(buf, NULL);
    else {
        char *end;
        unsigned long long v = strtoull(buf, &end, 10);
        if (k > 18 && (v > INT64_MAX || strlen(buf) > 19))
            return lex_error(lx, start, "integer literal too large");
        t->i = (int64_t)v;
    }
    lx->pos = i;
    return 0;
}

static const char *const ops2[] = { "//", "**", "==", "!=", "<=", ">=" };
static const char ops1[] = "+-*/%~<>=()[]{},.:|";

/* Whitespace after a tag end: all of it after "-", one newline after %} or #}
 * (trim_blocks). Returns whether the text that follows starts a line. */
static bool after_tag(struct lexer *lx, bool strip, bool trim)
{
    size_t start = lx->pos;
    if (strip)
        while (lx->pos < lx->n && is_ws(lx->s[lx->pos]))
            lx->pos++;
    else if (trim && lx->pos < lx->n && lx->s[lx->pos] == '\n')
        lx->pos++;
    return lx->pos > start && lx->s[lx->pos - 1] == '\n';
}

/* Tokens of one {% %} or {{ }} up to its end marker (brackets balanced). */
static int lex_tag(struct lexer *lx, bool block, size_t tag_pos, bool *strip_after)
{
    int depth = 0;
    const char *end = block ? "%}" : "}}";
    for (;;) {
        while (lx->pos < lx->n && is_ws(lx->s[lx->pos]))
            lx->pos++;
        size_t p = lx->pos;
        if (p >= lx->n)
            return lex_error(lx, tag_pos, block ? "unexpected end of template, expected '%}'"
                                                : "unexpected end of template, expected '}}'");
        const char *s = lx->s + p;
        if (depth == 0 && (!strncmp(s, end, 2) || (s[0] == '-' && !strncmp(s + 1, end, 2)))) {
            *strip_after = s[0] == '-';
            if (!push(lx, block ? T_BLOCK_END : T_VAR_END, p, s, 0))
                return OMNI_ERR_NOMEM;
            lx->pos = p + (*strip_after ? 3 : 2);
            return 0;
        }
        int rc;
        if (*s == '\'' || *s == '"') {
            if ((rc = lex_string(lx, p)))
                return rc;
            continue;
        }
        if (is_digit(*s)) {
            if ((rc = lex_number(lx, p)))
                return rc;
            continue;
        }
        if (is_alpha(*s)) {
            size_t i = p;
            while (i < lx->n && (is_alpha(lx->s[i]) || is_digit(lx->s[i])))
                i++;
            if (!push(lx, T_NAME, p, s, i - p))
                return OMNI_ERR_NOMEM;
            lx->pos = i;
            continue;
        }
        size_t oplen = 0;
        for (size_t i = 0; i < sizeof ops2 / sizeof ops2[0]; i++)
            if (p + 1 < lx->n && !strncmp(s, ops2[i], 2))
                oplen = 2;
        if (!oplen && strchr(ops1, *s))
            oplen = 1;
        if (!oplen)
            return lex_error(lx, p, "unexpected character in expression");
        if (*s == '(' || *s == '[' || *s == '{')
            depth++;
        else if ((*s == ')' || *s == ']' || *s == '}') && depth > 0)
            depth--;
        if (!push(lx, T_OP, p, s, oplen))
            return OMNI_ERR_NOMEM;
        lx->pos = p + oplen;
    }
}

/* {% raw %} at p (after "{%" and its sign)? Sets *body to after "%}". */
static bool is_keyword_tag(const struct lexer *lx, size_t p, const char *kw, size_t *after, bool *strip)
{
    while (p < lx->n && is_ws(lx->s[p]))
        p++;
    size_t k = strlen(kw);
    if (p + k > lx->n || strncmp(lx->s + p, kw, k) || (p + k < lx->n && (is_alpha(lx->s[p + k]) || is_digit(lx->s[p + k]))))
        return false;
    p += k;
    while (p < lx->n && is_ws(lx->s[p]))
        p++;
    *strip = p < lx->n && lx->s[p] == '-';
    if (*strip)
        p++;
    if (p + 2 > lx->n || strncmp(lx->s + p, "%}", 2))
        return false;
    *after = p + 2;
    return true;
}

static size_t rstrip_len(const char *s, size_t n)
{
    while (n && is_ws(s[n - 1]))
        n--;
    return n;
}

static int emit_text(struct lexer *lx, size_t pos, size_t n)
{
    if (n && !push(lx, T_TEXT, pos, lx->s + pos, n))
        return OMNI_ERR_NOMEM;
    return 0;
}

int tpl_lex(struct tpl *t, const char *src, size_t len, struct tpl_token **toks, size_t *ntoks,
            char *err, size_t errlen)
{
    struct lexer lx = { .t = t, .err = err, .errlen = errlen };
    if (!(t->src = normalize(&t->arena, src, len, &t->len)))
        return omni_fail(err, errlen, OMNI_ERR_NOMEM, "out of memory");
    lx.s = t->src;
    lx.n = t->len;
    bool line_start = true;
    int rc = 0;
    while (lx.pos < lx.n && !rc) {
        size_t k = lx.pos;
        const char *tag = NULL;
        for (; k + 1 < lx.n; k++)
            if (lx.s[k] == '{' && (lx.s[k + 1] == '{' || lx.s[k + 1] == '%' || lx.s[k + 1] == '#')) {
                tag = lx.s + k;
                break;
            }
        if (!tag) {
            rc = emit_text(&lx, lx.pos, lx.n - lx.pos);
            lx.pos = lx.n;
            break;
        }
        char kind = tag[1], sign = k + 2 < lx.n ? tag[2] : 0;
        if (sign != '-' && sign != '+')
            sign = 0;
        size_t text_n = k - lx.pos;
        const char *text = lx.s + lx.pos;
        if (sign == '-')
            text_n = rstrip_len(text, text_n);
        else if (sign != '+' && kind != '{') {
            /* lstrip_blocks: only whitespace between the line start and the tag. */
            size_t l = text_n;
            while (l && text[l - 1] != '\n')
                l--;
            bool blank = l < text_n;
            for (size_t i = l; i < text_n; i++)
                blank &= is_ws(text[i]);
            if ((l > 0 || line_start) && blank)
                text_n = l;
        }
        if ((rc = emit_text(&lx, lx.pos, text_n)))
            break;
        size_t body = k + 2 + (sign ? 1 : 0);
        if (kind == '#') {
            const char *e = NULL;
            for (size_t i = body; i + 1 < lx.n; i++)
                if (lx.s[i] == '#' && lx.s[i + 1] == '}') {
                    e = lx.s + i;
                    break;
                }
            if (!e) {
                rc = lex_error(&lx, k, "unexpected end of template, comment not closed ('#}')");
                break;
            }
            bool strip = (size_t)(e - lx.s) > body && e[-1] == '-';
            lx.pos = (size_t)(e - lx.s) + 2;
            line_start = after_tag(&lx, strip, true);
            continue;
        }
        size_t after;
        bool strip;
        if (kind == '%' && is_keyword_tag(&lx, body, "raw", &after, &strip)) {
            /* Everything up to {% endraw %} is text. */
            lx.pos = after;
            after_tag(&lx, strip, true);
            size_t i = lx.pos, end_after = 0;
            bool estrip = false, found = false;
            char esign = 0;
            for (; i + 1 < lx.n; i++)
                if (lx.s[i] == '{' && lx.s[i + 1] == '%') {
                    esign = i + 2 < lx.n && (lx.s[i + 2] == '-' || lx.s[i + 2] == '+') ? lx.s[i + 2] : 0;
                    if (is_keyword_tag(&lx, i + 2 + (esign ? 1 : 0), "endraw", &end_after, &estrip)) {
                        found = true;
                        break;
                    }
                }
            if (!found) {
                rc = lex_error(&lx, k, "missing end of raw directive");
                break;
            }
            size_t tn = i - lx.pos;
            if (esign == '-')
                tn = rstrip_len(lx.s + lx.pos, tn);
            if ((rc = emit_text(&lx, lx.pos, tn)))
                break;
            lx.pos = end_after;
            line_start = after_tag(&lx, estrip, true);
            continue;
        }
        bool block = kind == '%';
        if (!push(&lx, block ? T_BLOCK_BEGIN : T_VAR_BEGIN, k, tag, 0)) {
            rc = OMNI_ERR_NOMEM;
            break;
        }
        lx.pos = body;
        bool strip_after = false;
        if ((rc = lex_tag(&lx, block, k, &strip_after)))
            break;
        line_start = after_tag(&lx, strip_after, block);
    }
    if (!rc && !push(&lx, T_EOF, lx.n, lx.s + lx.n, 0))
        rc = OMNI_ERR_NOMEM;
    if (rc == OMNI_ERR_NOMEM)
        omni_fail(err, errlen, rc, "out of memory");
    if (rc) {
        free(lx.toks);
        return rc;
    }
    *toks = lx.toks;
    *ntoks = lx.ntoks;
    return 0;
}
