/* json_schema.c - JSON Schema to GBNF: one rule per schema node, shared
 * rules for the JSON primitives, exact digit grammars for integer bounds, a
 * regex subset for "pattern", and the forced tool-call wrapper.
 *
 * Objects keep the schema's property order (as OpenAI's strict mode does):
 * required properties always appear, optional ones may be skipped, so a
 * property list is a chain of optional pieces with the commas placed by
 * which one comes first. */
#include "json_schema.h"

#include "llm/tools/tools.h"
#include "src/core/omni.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>


struct buf { char *s; size_t n, cap; bool oom; };

__attribute__((format(printf, 2, 3)))
static void bprintf(struct buf *b, const char *fmt, ...)
{
    if (b->oom)
        return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(b->s ? b->s + b->n : NULL, b->s ? b->cap - b->n : 0, fmt, ap);
        va_end(ap);
        if (n < 0) {
            b->oom = true;
            return;
        }
        if (b->s && b->n + (size_t)n < b->cap) {
            b->n += (size_t)n;
            return;
        }
        size_t nc = b->cap ? b->cap * 2 : 256;
        while (nc < b->n + (size_t)n + 1)
            nc *= 2;
        char *q = realloc(b->s, nc);
        if (!q) {
            b->oom = true;
            return;
        }
        b->s = q;
        b->cap = nc;
    }
}

static void bputs(struct buf *b, const char *s)
{
    bprintf(b, "%s", s);
}

/* text as a GBNF literal. */
static void blit(struct buf *b, const char *s, size_t n)
{
    bputs(b, "\"");
    for (size_t i = 0; i < n; i++) {
        const unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\')
            bprintf(b, "\\%c", c);
        else if (c == '\n')
            bputs(b, "\\n");
        else if (c == '\r')
            bputs(b, "\\r");
        else if (c == '\t')
            bputs(b, "\\t");
        else if (c < 0x20)
            bprintf(b, "\\x%02X", c);
        else
            bprintf(b, "%c", c);
    }
    bputs(b, "\"");
}

// ---- builder ------------------------------------------------------------------

struct jref { char *ref; int rule; };

struct jb {
    struct buf rules;        /* every rule but root */
    int n_rules;
    const cJSON *root;
    struct jref refs[JSCHEMA_MAX_REFS];
    int n_refs;
    char path[512];          /* JSON pointer of the node visited */
    int depth;
    char *err;
    size_t errlen;
    bool failed;
};

__attribute__((format(printf, 2, 3)))
static int jfail(struct jb *b, const char *fmt, ...)
{
    if (b->failed)
        return -1;
    b->failed = true;
    char msg[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    /* a deep path keeps its end, so that the message itself still fits */
    const size_t len = strlen(b->path);
    const char *path = len > 120 ? b->path + len - 117 : b->path[0] ? b->path : "/";
    omni_fail(b->err, b->errlen, OMNI_ERR_ARG, "json_schema: %s%s: %s", len > 120 ? "..." : "",
              path, msg);
    return -1;
}

/* Start rule s<N>: returns N; the caller writes the body and a newline. */
static int rule_begin(struct jb *b)
{
    bprintf(&b->rules, "s%d ::= ", b->n_rules);
    return b->n_rules++;
}

static const char *const primitives =
    "ws ::= (\" \" | \"\\n\" [ \\t]{0,16})?\n"
    "json-char ::= [^\"\\\\\\x00-\\x1F] | \"\\\\\" ([\"\\\\/bfnrt] | \"u\" [0-9a-fA-F]{4})\n"
    "json-string ::= \"\\\"\" json-char* \"\\\"\"\n"
    "json-int ::= \"-\"? (\"0\" | [1-9] [0-9]{0,15})\n"
    /* two exponent digits keep every number a finite double (3e621 would
     * read back as inf, printed as null: a type error in the arguments) */
    "json-number ::= json-int (\".\" [0-9]{1,16})? ([eE] [-+]? [0-9]{1,2})?\n"
    "json-value ::= json-object | json-array | json-string | json-number | \"true\" | \"false\" | \"null\"\n"
    "json-object ::= \"{\" ws (json-string ws \":\" ws json-value ws (\",\" ws json-string ws \":\" ws json-value ws)*)? \"}\"\n"
    "json-array ::= \"[\" ws (json-value ws (\",\" ws json-value ws)*)? \"]\"\n";

static int visit(struct jb *b, const cJSON *s);

/* Visit a child schema with path suffix "/key". */
static int visit_at(struct jb *b, const cJSON *s, const char *key)
{
    size_t len = strlen(b->path);
    snprintf(b->path + len, sizeof b->path - len, "/%s", key);
    int r = visit(b, s);
    b->path[len] = 0;
    return r;
}

static int visit_at_index(struct jb *b, const cJSON *s, const char *key, int i)
{
    char k[96];
    snprintf(k, sizeof k, "%s/%d", key, i);
    return visit_at(b, s, k);
}

static const cJSON *get(const cJSON *s, const char *k)
{
    return cJSON_GetObjectItemCaseSensitive(s, k);
}

/* Names -> small ints, for objects with thousands of properties: cJSON's
 * lookups are linear, and a lookup per property made 'required' and allOf
 * quadratic. Keys are borrowed, not copied. */
struct nameset { const char **key; int *val; uint32_t cap, n; };

static uint32_t name_hash(const char *s)
{
    uint32_t h = 2166136261u; /* FNV-1a */
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 16777619u;
    return h;
}

/* The slot of key, or the empty slot where it goes. */
static uint32_t nameset_slot(const struct nameset *t, const char *key)
{
    uint32_t i = name_hash(key) & (t->cap - 1);
    while (t->key[i] && strcmp(t->key[i], key) != 0)
        i = (i + 1) & (t->cap - 1);
    return i;
}

/* Room for n names; false when out of memory. */
static bool nameset_init(struct nameset *t, int n)
{
    t->cap = 16;
    while (t->cap < 2 * (uint32_t)n + 2)
        t->cap *= 2;
    t->key = calloc(t->cap, sizeof *t->key);
    t->val = calloc(t->cap, sizeof *t->val);
    t->n = 0;
    return t->key && t->val;
}

/* key's value, or -1. */
static int nameset_get(const struct nameset *t, const char *key)
{
    const uint32_t i = nameset_slot(t, key);
    return t->key[i] ? t->val[i] : -1;
}

/* Adds key -> val unless key is there (the first one stays, as cJSON's
 * lookup finds the first of duplicate keys). Room was reserved by init. */
static void nameset_put(struct nameset *t, const char *key, int val)
{
    const uint32_t i = nameset_slot(t, key);
    if (!t->key[i] && 2 * (t->n + 1) <= t->cap) {
        t->key[i] = key;
        t->val[i] = val;
        t->n++;
    }
}

static void nameset_free(struct nameset *t)
{
    free(t->key);
    free(t->val);
}

/* A JSON value's exact text as a literal. */
static int lit_value(struct jb *b, const cJSON *v)
{
    char *t = cJSON_PrintUnformatted(v);
    if (!t)
        return jfail(b, "out of memory");
    blit(&b->rules, t, strlen(t));
    free(t);
    return 0;
}

// ---- integers and numbers ---------------------------------------------------------

/* Digit strings of equal length d between lo and hi (inclusive, as text). */
static void digits_between(struct buf *o, const char *lo, const char *hi, int d)
{
    if (d == 0)
        return;
    if (lo[0] == hi[0]) {
        bprintf(o, "\"%c\" ", lo[0]);
        digits_between(o, lo + 1, hi + 1, d - 1);
        return;
    }
    bool lo_zero = true, hi_nine = true;
    for (int i = 1; i < d; i++) {
        lo_zero &= lo[i] == '0';
        hi_nine &= hi[i] == '9';
    }
    if (lo_zero && hi_nine) {
        bprintf(o, "[%c-%c]", lo[0], hi[0]);
        if (d > 1)
            bprintf(o, " [0-9]{%d}", d - 1);
        bputs(o, " ");
        return;
    }
    char nines[24], zeros[24];
    memset(nines, '9', sizeof nines);
    memset(zeros, '0', sizeof zeros);
    bputs(o, "(");
    bprintf(o, "\"%c\" ", lo[0]);
    digits_between(o, lo + 1, nines, d - 1);
    if (lo[0] + 1 <= hi[0] - 1) {
        bprintf(o, "| [%c-%c]", lo[0] + 1, hi[0] - 1);
        if (d > 1)
            bprintf(o, " [0-9]{%d}", d - 1);
        bputs(o, " ");
    }
    bprintf(o, "| \"%c\" ", hi[0]);
    digits_between(o, zeros, hi + 1, d - 1);
    bputs(o, ") ");
}

/* Decimal integers in [lo, hi] without sign or leading zeros; hi < 0: no
 * upper bound (up to 18 digits). */
static void nonneg_range(struct buf *o, long long lo, long long hi)
{
    char a[24], z[24];
    int la = snprintf(a, sizeof a, "%lld", lo);
    bputs(o, "(");
    bool first = true;
    for (int d = la; d <= 18; d++) {
        long long p10 = 1;
        for (int i = 1; i < d; i++)
            p10 *= 10;
        long long from = d == la ? lo : p10, to = p10 * 10 - 1;
        if (hi >= 0 && to > hi)
            to = hi;
        if (hi >= 0 && from > hi)
            break;
        if (!first)
            bputs(o, "| ");
        first = false;
        if (hi < 0 && d > la) { /* every longer number */
            bprintf(o, "[1-9] [0-9]{%d,%d} ", d - 1, 17);
            break;
        }
        snprintf(a, sizeof a, "%lld", from);
        snprintf(z, sizeof z, "%lld", to);
        digits_between(o, a, z, d);
    }
    bputs(o, ")");
}

/* Integers in [lo, hi]; has_lo/has_hi say which bounds exist. */
static void int_range(struct buf *o, bool has_lo, long long lo, bool has_hi, long long hi)
{
    bool alt = false;
    bputs(o, "(");
    if (!has_lo || lo < 0) { /* negatives: "-" then magnitude in [max(1,-hi), -lo] */
        long long mlo = has_hi && hi < 0 ? -hi : 1;
        bputs(o, "\"-\" ");
        nonneg_range(o, mlo, has_lo ? -lo : -1);
        alt = true;
    }
    if (!has_hi || hi >= 0) {
        if (alt)
            bputs(o, " | ");
        nonneg_range(o, has_lo && lo > 0 ? lo : 0, has_hi ? hi : -1);
    }
    bputs(o, ")");
}

/* Read minimum/maximum/exclusive* as an integer range. */
static int bounds(struct jb *b, const cJSON *s, bool integer, bool *has_lo, long long *lo,
                  bool *has_hi, long long *hi)
{
    const cJSON *mn = get(s, "minimum"), *mx = get(s, "maximum");
    const cJSON *emn = get(s, "exclusiveMinimum"), *emx = get(s, "exclusiveMaximum");
    *has_lo = *has_hi = false;
    struct { const cJSON *v; bool excl, low; const char *name; } k[4] = {
        { mn, cJSON_IsTrue(emn), true, "minimum" }, { mx, cJSON_IsTrue(emx), false, "maximum" },
        { cJSON_IsNumber(emn) ? emn : NULL, true, true, "exclusiveMinimum" },
        { cJSON_IsNumber(emx) ? emx : NULL, true, false, "exclusiveMaximum" },
    };
    for (int i = 0; i < 4; i++) {
        if (!k[i].v)
            continue;
        if (!cJSON_IsNumber(k[i].v))
            return jfail(b, "'%s' must be a number", k[i].name);
        double v = k[i].v->valuedouble;
        if (fabs(v) > 1e17)
            return jfail(b, "'%s' %g is out of the supported range (|x| <= 1e17)", k[i].name, v);
        if (!integer && (v != floor(v) || k[i].excl))
            return jfail(b, "'%s' %g on a number: only inclusive integral bounds are supported",
                         k[i].name, v);
        long long x;
        if (k[i].low)
            x = (long long)(k[i].excl ? floor(v) + 1 : ceil(v));
        else
            x = (long long)(k[i].excl ? ceil(v) - 1 : floor(v));
        if (k[i].low && (!*has_lo || x > *lo)) {
            *lo = x;
            *has_lo = true;
        } else if (!k[i].low && (!*has_hi || x < *hi)) {
            *hi = x;
            *has_hi = true;
        }
    }
    if (*has_lo && *has_hi && *lo > *hi)
        return jfail(b, "no value lies between minimum %lld and maximum %lld", *lo, *hi);
    return 0;
}

/* Numbers in [lo, hi] with integral bounds: the integer part below the upper
 * bound takes any fraction, the bound itself only zeros. */
static void number_range(struct buf *o, bool has_lo, long long lo, bool has_hi, long long hi)
{
    const char *frac = "(\".\" [0-9]{1,16})?", *zeros = "(\".\" \"0\"{1,16})?";
    bool alt = false;
    bputs(o, "(");
    if (!has_lo || lo < 0) { /* "-" y with y in [max(0, -hi), -lo] */
        long long ylo = has_hi && hi < 0 ? -hi : 0;
        bputs(o, "\"-\" (");
        if (!has_lo) {
            nonneg_range(o, ylo, -1);
            bprintf(o, " %s", frac);
        } else {
            if (-lo - 1 >= ylo) {
                nonneg_range(o, ylo, -lo - 1);
                bprintf(o, " %s | ", frac);
            }
            bprintf(o, "\"%lld\" %s", -lo, zeros);
        }
        bputs(o, ")");
        alt = true;
    }
    if (!has_hi || hi >= 0) {
        long long xlo = has_lo && lo > 0 ? lo : 0;
        if (alt)
            bputs(o, " | ");
        bputs(o, "(");
        if (!has_hi) {
            nonneg_range(o, xlo, -1);
            bprintf(o, " %s", frac);
        } else {
            if (hi - 1 >= xlo) {
                nonneg_range(o, xlo, hi - 1);
                bprintf(o, " %s | ", frac);
            }
            bprintf(o, "\"%lld\" %s", hi, zeros);
        }
        bputs(o, ")");
    }
    bputs(o, ")");
}

// ---- pattern (regex subset) ----------------------------------------------------

struct rx {
    const char *s;
    size_t n, i;
    int depth;               /* groups open around i */
    struct jb *b;
    struct buf *o;
};

static int rx_fail(struct rx *r, const char *what)
{
    return jfail(r->b, "pattern: %s at offset %zu", what, r->i);
}

/* One literal character of the pattern as JSON string text. */
static void rx_lit(struct rx *r, unsigned char c)
{
    if (c == '"')
        bputs(r->o, "\"\\\\\\\"\" ");  /* the JSON text \" */
    else if (c == '\\')
        bputs(r->o, "\"\\\\\\\\\" ");  /* the JSON text \\ */
    else {
        char t[2] = { (char)c, 0 };
        blit(r->o, t, 1);
        bputs(r->o, " ");
    }
}

static const char *rx_class_escape(char c)
{
    switch (c) {
    case 'd': return "0-9";
    case 'w': return "a-zA-Z0-9_";
    case 's': return " ";
    default: return NULL;
    }
}

/* [...] as a GBNF class without the characters JSON must escape. */
static int rx_class(struct rx *r)
{
    r->i++;
    bool neg = r->i < r->n && r->s[r->i] == '^';
    if (neg)
        r->i++;
    bputs(r->o, neg ? "[^\"\\\\\\x00-\\x1F" : "[");
    bool any = false;
    while (r->i < r->n && r->s[r->i] != ']') {
        unsigned char c = (unsigned char)r->s[r->i++];
        if (c == '\\' && r->i < r->n) {
            char e = r->s[r->i++];
            const char *cls = rx_class_escape(e);
            if (cls) {
                bputs(r->o, cls);
                any = true;
                continue;
            }
            if (e == 'D' || e == 'W' || e == 'S')
                return rx_fail(r, "negated class escape inside [...]");
            c = e == 'n' ? '\n' : e == 't' ? '\t' : (unsigned char)e;
        }
        if ((c == '"' || c == '\\' || c < 0x20) && !neg)
            continue; /* would need a JSON escape: left out */
        if (c == ']' || c == '[' || c == '\\' || c == '^' || c == '"')
            bprintf(r->o, "\\%c", c);
        else if (c < 0x20)
            bprintf(r->o, "\\x%02X", c);
        else
            bprintf(r->o, "%c", c);
        any = true;
    }
    if (r->i >= r->n)
        return rx_fail(r, "unterminated [");
    r->i++;
    if (!any && !neg)
        return rx_fail(r, "empty class");
    bputs(r->o, "] ");
    return 0;
}

static int rx_alt(struct rx *r);

static int rx_atom(struct rx *r)
{
    const char c = r->s[r->i];
    if (c == '(') {
        /* groups recurse here and nest three parentheses deep in the GBNF
         * each (atom, group, sequence): the limit keeps both bounded */
        if (r->depth >= JSCHEMA_MAX_PATTERN_NESTING) {
            char what[80];
            snprintf(what, sizeof what, "groups nested deeper than %d levels (JSCHEMA_MAX_PATTERN_NESTING)",
                     JSCHEMA_MAX_PATTERN_NESTING);
            return rx_fail(r, what);
        }
        r->i++;
        if (r->i < r->n && r->s[r->i] == '?') {
            if (r->i + 1 < r->n && r->s[r->i + 1] == ':')
                r->i += 2;
            else
                return rx_fail(r, "unsupported group (lookaround or named)");
        }
        bputs(r->o, "(");
        r->depth++;
        const int rc = rx_alt(r);
        r->depth--;
        if (rc < 0)
            return -1;
        if (r->i >= r->n || r->s[r->i] != ')')
            return rx_fail(r, "missing )");
        r->i++;
        bputs(r->o, ") ");
        return 0;
    }
    if (c == '[')
        return rx_class(r);
    if (c == '.') {
        r->i++;
        bputs(r->o, "json-char ");
        return 0;
    }
    if (c == '\\') {
        if (++r->i >= r->n)
            return rx_fail(r, "trailing \\");
        const char e = r->s[r->i++];
        const char *cls = rx_class_escape(e);
        if (cls) {
            bprintf(r->o, "[%s] ", cls);
            return 0;
        }
        if (e == 'D' || e == 'W' || e == 'S') {
            bprintf(r->o, "[^\"\\\\\\x00-\\x1F%s] ", rx_class_escape((char)(e + 32)));
            return 0;
        }
        if ((e >= '0' && e <= '9') || e == 'b' || e == 'B' || e == 'k')
            return rx_fail(r, "unsupported escape (backreference or word boundary)");
        if (e == 'n' || e == 't') { /* JSON escapes of the control characters */
            bprintf(r->o, "\"\\\\%c\" ", e);
            return 0;
        }
        rx_lit(r, (unsigned char)e);
        return 0;
    }
    if (c == '*' || c == '+' || c == '?' || c == '{')
        return rx_fail(r, "quantifier without a preceding atom");
    r->i++;
    rx_lit(r, (unsigned char)c);
    return 0;
}

static int rx_seq(struct rx *r)
{
    bputs(r->o, "(");
    while (r->i < r->n && r->s[r->i] != '|' && r->s[r->i] != ')') {
        if (r->s[r->i] == '$' && r->i + 1 == r->n)
            break;
        if (r->s[r->i] == '^' || r->s[r->i] == '$')
            return rx_fail(r, "anchor inside the pattern");
        /* each atom is a group so quantifiers apply to all of it */
        bputs(r->o, "(");
        if (rx_atom(r) < 0)
            return -1;
        bputs(r->o, ")");
        if (r->i < r->n && strchr("*+?{", r->s[r->i])) {
            const char q = r->s[r->i++];
            if (q == '{') {
                /* {m}, {m,} or {m,n} with m <= n: read, checked and written
                 * again, so the grammar gets only what it accepts. */
                long lo = -1, hi = -1;
                bool comma = false;
                size_t j = r->i;
                for (; j < r->n && r->s[j] != '}'; j++) {
                    const char ch = r->s[j];
                    long *v = comma ? &hi : &lo;
                    if (ch >= '0' && ch <= '9' && (*v < 0 ? 0 : *v) <= 100000)
                        *v = (*v < 0 ? 0 : *v * 10) + (ch - '0');
                    else if (ch == ',' && !comma)
                        comma = true;
                    else
                        return rx_fail(r, "bad {m,n}");
                }
                if (j >= r->n || lo < 0 || lo > 10000 || hi > 10000)
                    return rx_fail(r, "bad {m,n} (numbers up to 10000)");
                if (comma && hi >= 0 && hi < lo)
                    return rx_fail(r, "{m,n} with n below m");
                if (!comma)
                    bprintf(r->o, "{%ld}", lo);
                else if (hi < 0)
                    bprintf(r->o, "{%ld,}", lo);
                else
                    bprintf(r->o, "{%ld,%ld}", lo, hi);
                r->i = j + 1;
            } else {
                bprintf(r->o, "%c", q);
            }
            if (r->i < r->n && (r->s[r->i] == '?' || r->s[r->i] == '+'))
                r->i++; /* lazy/possessive: same language */
        }
        bputs(r->o, " ");
    }
    bputs(r->o, ")");
    return 0;
}

static int rx_alt(struct rx *r)
{
    if (rx_seq(r) < 0)
        return -1;
    while (r->i < r->n && r->s[r->i] == '|') {
        r->i++;
        bputs(r->o, " | ");
        if (rx_seq(r) < 0)
            return -1;
    }
    return 0;
}

static int pattern(struct jb *b, const char *pat)
{
    struct rx r = { .s = pat, .n = strlen(pat), .b = b, .o = &b->rules };
    bool start = r.n && pat[0] == '^';
    bool end = r.n > 1 && pat[r.n - 1] == '$' && pat[r.n - 2] != '\\';
    if (start)
        r.i = 1;
    /* JSON Schema patterns are not anchored: free text may surround them */
    bputs(&b->rules, "\"\\\"\" ");
    if (!start)
        bputs(&b->rules, "json-char* ");
    bputs(&b->rules, "(");
    if (rx_alt(&r) < 0)
        return -1;
    if (r.i < r.n && !(end && r.i == r.n - 1))
        return rx_fail(&r, "unbalanced )");
    bputs(&b->rules, ") ");
    if (!end)
        bputs(&b->rules, "json-char* ");
    bputs(&b->rules, "\"\\\"\"");
    return 0;
}

// ---- schema nodes ---------------------------------------------------------------

static const char *const known_keys[] = {
    "type", "properties", "required", "additionalProperties", "enum", "const", "items",
    "prefixItems", "minItems", "maxItems", "anyOf", "oneOf", "allOf", "$ref", "$defs",
    "definitions", "minLength", "maxLength", "pattern", "minimum", "maximum",
    "exclusiveMinimum", "exclusiveMaximum", "format",
    /* annotations */
    "title", "description", "default", "examples", "$schema", "$id", "$comment", "strict",
    "readOnly", "writeOnly", "deprecated", NULL,
};

static int check_keys(struct jb *b, const cJSON *s)
{
    for (const cJSON *k = s->child; k; k = k->next) {
        bool ok = false;
        for (int i = 0; known_keys[i] && !ok; i++)
            ok = !strcmp(k->string, known_keys[i]);
        if (!ok)
            return jfail(b, "unsupported keyword '%s'", k->string);
    }
    return 0;
}

static int count_get(struct jb *b, const cJSON *s, const char *k, long *out)
{
    const cJSON *v = get(s, k);
    if (!v)
        return 0;
    if (!cJSON_IsNumber(v) || v->valuedouble < 0 || v->valuedouble > 10000 ||
        v->valuedouble != floor(v->valuedouble))
        return jfail(b, "'%s' must be an integer in 0..10000", k);
    *out = (long)v->valuedouble;
    return 1;
}

/* Resolve "#/a/b" against the root document. */
static const cJSON *resolve(struct jb *b, const char *ref)
{
    if (ref[0] != '#')
        return jfail(b, "$ref '%s': only local references (#/...) are supported", ref), NULL;
    const cJSON *cur = b->root;
    const char *p = ref + 1;
    if (*p && *p != '/')     /* "#x": an anchor name, not a JSON pointer */
        return jfail(b, "$ref '%s': only JSON-pointer references (#/...) are supported", ref), NULL;
    while (*p == '/') {
        p++;
        char key[256];
        size_t n = 0;
        while (*p && *p != '/' && n + 1 < sizeof key) {
            if (p[0] == '~' && (p[1] == '0' || p[1] == '1')) {
                key[n++] = p[1] == '0' ? '~' : '/';
                p += 2;
            } else {
                key[n++] = *p++;
            }
        }
        key[n] = 0;
        cur = cJSON_IsArray(cur) ? cJSON_GetArrayItem(cur, atoi(key)) : get(cur, key);
        if (!cur)
            return jfail(b, "$ref '%s' points to nothing", ref), NULL;
    }
    return cur;
}

static int ref_rule(struct jb *b, const char *ref)
{
    for (int i = 0; i < b->n_refs; i++)
        if (!strcmp(b->refs[i].ref, ref))
            return b->refs[i].rule;
    if (b->n_refs == JSCHEMA_MAX_REFS)
        return jfail(b, "more than %d distinct $ref targets", JSCHEMA_MAX_REFS);
    const cJSON *target = resolve(b, ref);
    if (!target)
        return -1;
    char *copy = strdup(ref);
    if (!copy)
        return jfail(b, "out of memory");
    /* the rule is named before its body exists, so recursion refers to it */
    const int rule = b->n_rules++;
    b->refs[b->n_refs++] = (struct jref){ copy, rule };
    char saved[sizeof b->path];
    memcpy(saved, b->path, sizeof saved);
    snprintf(b->path, sizeof b->path, "%s", ref + 1);
    const int body = visit(b, target);
    memcpy(b->path, saved, sizeof saved);
    if (body < 0)
        return -1;
    if (body == rule)        /* {"$ref":"#"} at the root: a schema that is only itself */
        return jfail(b, "$ref '%s' refers to itself without describing a value", ref);
    bprintf(&b->rules, "s%d ::= s%d\n", rule, body);
    return rule;
}

static int object_rule(struct jb *b, const cJSON *props, const cJSON *required,
                       const cJSON *additional);

/* allOf of object schemas: their properties and required lists merged. */
static int all_of(struct jb *b, const cJSON *all)
{
    const int n = cJSON_GetArraySize(all);
    if (n == 1)
        return visit_at(b, all->child, "allOf/0");
    /* the parts ($ref resolved) first, to size the name index once */
    const cJSON **part = calloc((size_t)n, sizeof *part);
    if (!part)
        return jfail(b, "out of memory");
    int i = 0, total = 0, rc = 0;
    for (const cJSON *s = all->child; s && !rc; s = s->next, i++) {
        const cJSON *t = s, *ref = get(s, "$ref");
        if (cJSON_IsString(ref) && !(t = resolve(b, ref->valuestring)))
            rc = -1;
        else if (!cJSON_IsObject(get(t, "properties")))
            rc = jfail(b, "allOf/%d: only object schemas with properties can be combined", i);
        else
            total += cJSON_GetArraySize(get(part[i] = t, "properties"));
    }
    cJSON *props = cJSON_CreateObject(), *req = cJSON_CreateArray();
    struct nameset seen = { 0 };
    if (!rc && (!props || !req || !nameset_init(&seen, total)))
        rc = jfail(b, "out of memory");
    for (i = 0; i < n && !rc; i++) {
        const cJSON *p = get(part[i], "properties"), *r = get(part[i], "required");
        for (const cJSON *k = p->child; k; k = k->next)
            if (nameset_get(&seen, k->string) < 0) {
                nameset_put(&seen, k->string, 0);
                cJSON_AddItemReferenceToObject(props, k->string, (cJSON *)k);
            }
        for (const cJSON *k = cJSON_IsArray(r) ? r->child : NULL; k; k = k->next)
            cJSON_AddItemReferenceToArray(req, (cJSON *)k);
    }
    if (!rc)
        rc = object_rule(b, props, req, NULL);
    nameset_free(&seen);
    free(part);
    cJSON_Delete(props);
    cJSON_Delete(req);
    return rc;
}

/* { props in order, required ones mandatory, extras when additional allows }. */
static int object_rule(struct jb *b, const cJSON *props, const cJSON *required,
                       const cJSON *additional)
{
    const int n = cJSON_GetArraySize(props);
    if (additional && !cJSON_IsBool(additional) && !cJSON_IsObject(additional))
        return jfail(b, "'additionalProperties' must be a boolean or a schema");
    /* kv rules: "\"name\"" ws ":" ws value */
    int *kv = calloc((size_t)n + 1, sizeof *kv);
    bool *req = calloc((size_t)n + 1, sizeof *req);
    struct nameset index = { 0 };
    if (!kv || !req || !nameset_init(&index, n)) {
        free(kv), free(req), nameset_free(&index);
        return jfail(b, "out of memory");
    }
    int i = 0, rc = 0;
    for (const cJSON *p = props ? props->child : NULL; p; p = p->next, i++)
        nameset_put(&index, p->string, i);
    for (const cJSON *r = cJSON_IsArray(required) ? required->child : NULL; r && !rc; r = r->next) {
        const int k = cJSON_IsString(r) ? nameset_get(&index, r->valuestring) : -1;
        if (k < 0)
            rc = jfail(b, "'required' names '%s', which is not in 'properties'",
                       cJSON_IsString(r) ? r->valuestring : "(not a string)");
        else
            req[k] = true;
    }
    nameset_free(&index);
    i = 0;
    for (const cJSON *p = props ? props->child : NULL; p && !rc; p = p->next, i++) {
        char key[300];
        snprintf(key, sizeof key, "properties/%s", p->string);
        const int v = visit_at(b, p, key);
        if (v < 0) {
            rc = -1;
            break;
        }
        cJSON *name = cJSON_CreateString(p->string);
        char *text = name ? cJSON_PrintUnformatted(name) : NULL;
        cJSON_Delete(name);
        if (!text) {
            rc = jfail(b, "out of memory");
            break;
        }
        kv[i] = rule_begin(b);
        blit(&b->rules, text, strlen(text));
        bprintf(&b->rules, " ws \":\" ws s%d\n", v);
        free(text);
    }
    int extra = -1;
    if (!rc && additional && !cJSON_IsFalse(additional)) {
        int v = cJSON_IsObject(additional) ? visit_at(b, additional, "additionalProperties") : -2;
        if (v == -1) {
            rc = -1;
        } else {
            extra = rule_begin(b);
            if (v >= 0)
                bprintf(&b->rules, "json-string ws \":\" ws s%d\n", v);
            else
                bputs(&b->rules, "json-string ws \":\" ws json-value\n");
        }
    }
    if (rc) {
        free(kv), free(req);
        return -1;
    }
    /* rest_i: the properties after i, each behind its comma */
    int rest_next = -1;
    int *rest = calloc((size_t)n + 1, sizeof *rest);
    if (!rest) {
        free(kv), free(req);
        return jfail(b, "out of memory");
    }
    for (int k = n; k >= 0; k--) {
        rest[k] = rule_begin(b);
        if (k == n) {
            if (extra >= 0)
                bprintf(&b->rules, "(ws \",\" ws s%d)*\n", extra);
            else
                bputs(&b->rules, "\"\"\n");
        } else {
            bprintf(&b->rules, "(ws \",\" ws s%d)%s s%d\n", kv[k], req[k] ? "" : "?",
                    rest_next);
        }
        rest_next = rest[k];
    }
    /* first: the first property present is some optional-prefix j */
    const int first = rule_begin(b);
    bool alt = false, all_optional = true;
    for (int j = 0; j < n; j++) {
        bprintf(&b->rules, "%ss%d s%d", alt ? " | " : "", kv[j], rest[j + 1]);
        alt = true;
        if (req[j]) {
            all_optional = false;
            break;
        }
    }
    if (all_optional && extra >= 0) {
        bprintf(&b->rules, "%ss%d s%d", alt ? " | " : "", extra, rest[n]);
        alt = true;
    }
    if (!alt)
        bputs(&b->rules, "\"\"");
    bputs(&b->rules, "\n");
    const int obj = rule_begin(b);
    if (all_optional && (n || extra >= 0))
        bprintf(&b->rules, "\"{\" ws (s%d ws)? \"}\"\n", first);
    else if (all_optional)
        bputs(&b->rules, "\"{\" ws \"}\"\n");
    else
        bprintf(&b->rules, "\"{\" ws s%d ws \"}\"\n", first);
    free(kv), free(req), free(rest);
    return obj;
}

/* The items after the first k of an array: it (the items schema's rule)
 * behind commas, at most total_max in all (< 0: no limit); nothing when
 * items is false (-3). */
static void array_tail(struct jb *b, int item, const char *it, long total_max, long k)
{
    if (item == -3 || (total_max >= 0 && k >= total_max))
        return;
    char rep[32];
    if (total_max < 0)
        snprintf(rep, sizeof rep, "*");
    else
        snprintf(rep, sizeof rep, "{0,%ld}", total_max - k - (k == 0));
    if (k == 0)
        bprintf(&b->rules, "(%s ws (\",\" ws %s ws)%s)?", it, it, rep);
    else
        bprintf(&b->rules, "(\",\" ws %s ws)%s", it, rep);
}

static int array_rule(struct jb *b, const cJSON *s)
{
    long min = 0, max = -1;
    if (count_get(b, s, "minItems", &min) < 0 || count_get(b, s, "maxItems", &max) < 0)
        return -1;
    if (max >= 0 && max < min)
        return jfail(b, "maxItems %ld below minItems %ld", max, min);
    const cJSON *items = get(s, "items"), *prefix = get(s, "prefixItems");
    if (cJSON_IsArray(items)) { /* draft 4-7 tuple form */
        prefix = items;
        items = NULL;
    }
    int item = -2;
    if (items && !cJSON_IsTrue(items)) {
        if (cJSON_IsFalse(items))
            item = -3;
        else if ((item = visit_at(b, items, "items")) < 0)
            return -1;
    }
    const int np = cJSON_IsArray(prefix) ? cJSON_GetArraySize(prefix) : 0;
    int *pr = calloc((size_t)np + 1, sizeof *pr);
    if (!pr)
        return jfail(b, "out of memory");
    int i = 0;
    for (const cJSON *p = np ? prefix->child : NULL; p; p = p->next, i++)
        if ((pr[i] = visit_at_index(b, p, cJSON_IsArray(get(s, "prefixItems")) ? "prefixItems" : "items", i)) < 0) {
            free(pr);
            return -1;
        }
    char it[32];
    if (item >= 0)
        snprintf(it, sizeof it, "s%d", item);
    else
        snprintf(it, sizeof it, "json-value");
    /* element k (0-based): a prefix item or the items schema */
    const long total_max = item == -3 ? (max >= 0 && max < np ? max : np) : max;
    if (min > np && item == -3) {
        free(pr);
        return jfail(b, "minItems %ld needs more than the %d prefixItems and items is false", min, np);
    }
    /* the first minItems elements, then the optional prefix items, then
     * the rest behind commas. The optional prefix items are a chain of
     * rules, each "(, item) next?", written last to first: groups nested as
     * deep as prefixItems is long would pass the grammar's nesting limit. */
    long k_end = total_max >= 0 && total_max < np ? total_max : np;
    if (k_end < min)
        k_end = min;
    int next = -1;
    for (long k = k_end - 1; k >= min; k--) {
        const int c = rule_begin(b);
        bprintf(&b->rules, "%ss%d ws ", k ? "\",\" ws " : "", pr[k]);
        if (next >= 0)
            bprintf(&b->rules, "s%d?", next);
        else
            array_tail(b, item, it, total_max, k_end);
        bputs(&b->rules, "\n");
        next = c;
    }
    const int r = rule_begin(b);
    bputs(&b->rules, "\"[\" ws ");
    for (long k = 0; k < min; k++) {
        if (k)
            bputs(&b->rules, "\",\" ws ");
        if (k < np)
            bprintf(&b->rules, "s%d ws ", pr[k]);
        else
            bprintf(&b->rules, "%s ws ", it);
    }
    if (next >= 0)
        bprintf(&b->rules, "s%d?", next);
    else
        array_tail(b, item, it, total_max, k_end);
    bputs(&b->rules, " \"]\"\n");
    free(pr);
    return r;
}

static int string_rule(struct jb *b, const cJSON *s)
{
    const cJSON *pat = get(s, "pattern"), *fmt = get(s, "format");
    long min = 0, max = -1;
    if (count_get(b, s, "minLength", &min) < 0 || count_get(b, s, "maxLength", &max) < 0)
        return -1;
    if (max >= 0 && max < min)
        return jfail(b, "maxLength %ld below minLength %ld", max, min);
    const int r = rule_begin(b);
    if (pat) {
        if (!cJSON_IsString(pat))
            return jfail(b, "'pattern' must be a string");
        if (pattern(b, pat->valuestring) < 0)
            return -1;
        bputs(&b->rules, "\n");
        return r;
    }
    if (fmt) {
        static const char *const date = "[0-9]{4} \"-\" (\"0\" [1-9] | \"1\" [0-2]) \"-\" (\"0\" [1-9] | [12] [0-9] | \"3\" [01])";
        static const char *const time = "([01] [0-9] | \"2\" [0-3]) \":\" [0-5] [0-9] \":\" [0-5] [0-9] (\".\" [0-9]{1,6})? (\"Z\" | [+-] ([01] [0-9] | \"2\" [0-3]) \":\" [0-5] [0-9])";
        const char *f = cJSON_IsString(fmt) ? fmt->valuestring : "";
        if (!strcmp(f, "date"))
            bprintf(&b->rules, "\"\\\"\" %s \"\\\"\"\n", date);
        else if (!strcmp(f, "time"))
            bprintf(&b->rules, "\"\\\"\" %s \"\\\"\"\n", time);
        else if (!strcmp(f, "date-time"))
            bprintf(&b->rules, "\"\\\"\" %s \"T\" %s \"\\\"\"\n", date, time);
        else if (!strcmp(f, "uuid"))
            bputs(&b->rules, "\"\\\"\" [0-9a-f]{8} \"-\" [0-9a-f]{4} \"-\" [0-9a-f]{4} \"-\" [0-9a-f]{4} \"-\" [0-9a-f]{12} \"\\\"\"\n");
        else
            return jfail(b, "unsupported format '%s' (date, time, date-time, uuid)", f);
        return r;
    }
    if (max >= 0)
        bprintf(&b->rules, "\"\\\"\" json-char{%ld,%ld} \"\\\"\"\n", min, max);
    else if (min > 0)
        bprintf(&b->rules, "\"\\\"\" json-char{%ld,} \"\\\"\"\n", min);
    else
        bputs(&b->rules, "\"\\\"\" json-char* \"\\\"\"\n");
    return r;
}

/* The node for one JSON type name. */
static int typed(struct jb *b, const cJSON *s, const char *t)
{
    if (!strcmp(t, "object")) {
        const cJSON *props = get(s, "properties"), *add = get(s, "additionalProperties");
        if (props && !cJSON_IsObject(props))
            return jfail(b, "'properties' must be an object");
        const cJSON *req = get(s, "required");
        if (req && !cJSON_IsArray(req))
            return jfail(b, "'required' must be an array");
        if (!props && (!add || cJSON_IsTrue(add))) {
            const int r = rule_begin(b);
            bputs(&b->rules, "json-object\n");
            return r;
        }
        return object_rule(b, props, req, add);
    }
    if (!strcmp(t, "array"))
        return array_rule(b, s);
    if (!strcmp(t, "string"))
        return string_rule(b, s);
    if (!strcmp(t, "integer") || !strcmp(t, "number")) {
        const bool integer = t[0] == 'i';
        bool hl, hh;
        long long lo = 0, hi = 0;
        if (bounds(b, s, integer, &hl, &lo, &hh, &hi) < 0)
            return -1;
        const int r = rule_begin(b);
        if (!hl && !hh) {
            bputs(&b->rules, integer ? "json-int\n" : "json-number\n");
        } else {
            (integer ? int_range : number_range)(&b->rules, hl, lo, hh, hi);
            bputs(&b->rules, "\n");
        }
        return r;
    }
    const int r = rule_begin(b);
    if (!strcmp(t, "boolean"))
        bputs(&b->rules, "\"true\" | \"false\"\n");
    else if (!strcmp(t, "null"))
        bputs(&b->rules, "\"null\"\n");
    else
        return jfail(b, "unknown type '%s'", t);
    return r;
}

static int visit(struct jb *b, const cJSON *s)
{
    if (b->failed)
        return -1;
    if (b->depth >= JSCHEMA_MAX_DEPTH)
        return jfail(b, "schema nested deeper than %d levels (JSCHEMA_MAX_DEPTH)", JSCHEMA_MAX_DEPTH);
    /* every visit writes a rule: this bounds the time as well, also when
     * allOf visits shared $ref targets again and again */
    if (b->rules.n > JSCHEMA_MAX_GBNF_BYTES)
        return jfail(b, "schema too large: its grammar passes %d bytes (JSCHEMA_MAX_GBNF_BYTES)",
                     JSCHEMA_MAX_GBNF_BYTES);
    b->depth++;
    int r = -1;
    if (cJSON_IsTrue(s)) {
        r = rule_begin(b);
        bputs(&b->rules, "json-value\n");
        goto done;
    }
    if (!cJSON_IsObject(s)) {
        r = jfail(b, cJSON_IsFalse(s) ? "schema 'false' matches nothing"
                                      : "a schema must be an object or a boolean");
        goto done;
    }
    if (check_keys(b, s) < 0)
        goto done;
    const cJSON *ref = get(s, "$ref"), *cnst = get(s, "const"), *en = get(s, "enum");
    const cJSON *any = get(s, "anyOf"), *one = get(s, "oneOf"), *all = get(s, "allOf");
    const cJSON *type = get(s, "type");
    if (ref) {
        r = cJSON_IsString(ref) ? ref_rule(b, ref->valuestring) : jfail(b, "'$ref' must be a string");
    } else if (cnst) {
        r = rule_begin(b);
        if (lit_value(b, cnst) < 0)
            r = -1;
        bputs(&b->rules, "\n");
    } else if (en) {
        if (!cJSON_IsArray(en) || !cJSON_GetArraySize(en)) {
            r = jfail(b, "'enum' must be a non-empty array");
            goto done;
        }
        r = rule_begin(b);
        for (const cJSON *v = en->child; v; v = v->next) {
            if (v != en->child)
                bputs(&b->rules, " | ");
            if (lit_value(b, v) < 0) {
                r = -1;
                goto done;
            }
        }
        bputs(&b->rules, "\n");
    } else if (any || one) {
        const cJSON *list = any ? any : one;
        const char *key = any ? "anyOf" : "oneOf";
        if (!cJSON_IsArray(list) || !cJSON_GetArraySize(list)) {
            r = jfail(b, "'%s' must be a non-empty array", key);
            goto done;
        }
        const int n = cJSON_GetArraySize(list);
        int *alts = malloc((size_t)n * sizeof *alts);
        if (!alts) {
            r = jfail(b, "out of memory");
            goto done;
        }
        int i = 0;
        for (const cJSON *v = list->child; v; v = v->next, i++)
            if ((alts[i] = visit_at_index(b, v, key, i)) < 0) {
                free(alts);
                goto done;
            }
        r = rule_begin(b);
        for (i = 0; i < n; i++)
            bprintf(&b->rules, "%ss%d", i ? " | " : "", alts[i]);
        bputs(&b->rules, "\n");
        free(alts);
    } else if (all) {
        r = cJSON_IsArray(all) && cJSON_GetArraySize(all) ? all_of(b, all)
                                                          : jfail(b, "'allOf' must be a non-empty array");
    } else if (cJSON_IsArray(type)) {
        const int n = cJSON_GetArraySize(type);
        int *alts = malloc(((size_t)n + 1) * sizeof *alts);
        if (!alts || !n) {
            free(alts);
            r = jfail(b, n ? "out of memory" : "'type' must not be empty");
            goto done;
        }
        int i = 0;
        for (const cJSON *t = type->child; t; t = t->next, i++) {
            if (!cJSON_IsString(t)) {
                free(alts);
                r = jfail(b, "'type' entries must be strings");
                goto done;
            }
            if ((alts[i] = typed(b, s, t->valuestring)) < 0) {
                free(alts);
                goto done;
            }
        }
        r = rule_begin(b);
        for (i = 0; i < n; i++)
            bprintf(&b->rules, "%ss%d", i ? " | " : "", alts[i]);
        bputs(&b->rules, "\n");
        free(alts);
    } else if (type) {
        r = cJSON_IsString(type) ? typed(b, s, type->valuestring) : jfail(b, "'type' must be a string or an array");
    } else if (get(s, "properties") || get(s, "additionalProperties")) {
        r = typed(b, s, "object");
    } else if (get(s, "items") || get(s, "prefixItems")) {
        r = typed(b, s, "array");
    } else if (get(s, "pattern") || get(s, "minLength") || get(s, "maxLength") || get(s, "format")) {
        r = typed(b, s, "string");
    } else {
        r = rule_begin(b);
        bputs(&b->rules, "json-value\n");
    }
done:
    b->depth--;
    return b->failed ? -1 : r;
}

/* Assemble "root ::= <root_body>" + rules + the primitives. */
static char *finish(struct jb *b, const char *root_body)
{
    struct buf o = { 0 };
    bprintf(&o, "root ::= %s\n", root_body);
    if (b->rules.n)
        bputs(&o, b->rules.s);
    bputs(&o, primitives);
    free(b->rules.s);
    for (int i = 0; i < b->n_refs; i++)
        free(b->refs[i].ref);
    if (o.oom || b->rules.oom) {
        free(o.s);
        omni_fail(b->err, b->errlen, OMNI_ERR_NOMEM, "json_schema: out of memory");
        return NULL;
    }
    return o.s;
}

static void cleanup(struct jb *b)
{
    free(b->rules.s);
    for (int i = 0; i < b->n_refs; i++)
        free(b->refs[i].ref);
}

char *jschema_to_gbnf(const cJSON *schema, char *err, size_t errlen)
{
    struct jb b = { .root = schema, .err = err, .errlen = errlen };
    if (!schema) {
        omni_fail(err, errlen, OMNI_ERR_ARG, "json_schema: no schema");
        return NULL;
    }
    const int r = visit(&b, schema);
    if (r < 0) {
        cleanup(&b);
        return NULL;
    }
    char body[32];
    snprintf(body, sizeof body, "s%d", r);
    return finish(&b, body);
}

char *jschema_object_gbnf(void)
{
    struct jb b = { 0 };
    return finish(&b, "json-object");
}

char *jschema_tool_call_gbnf(const cJSON *tools, const char *name, const struct tools_wire *wire,
                             bool parallel, char *err, size_t errlen)
{
    struct jb b = { .root = tools, .err = err, .errlen = errlen };
    if (!cJSON_IsArray(tools) || !cJSON_GetArraySize(tools)) {
        omni_fail(err, errlen, OMNI_ERR_ARG, "tools: a non-empty array is required");
        return NULL;
    }
    struct buf calls = { 0 };
    int i = 0, n_calls = 0;
    for (const cJSON *t = tools->child; t; t = t->next, i++) {
        const cJSON *fn = get(t, "function");
        const cJSON *fname = get(fn, "name");
        if (!cJSON_IsString(fname)) {
            snprintf(b.path, sizeof b.path, "/%d/function/name", i);
            jfail(&b, "a function needs a name");
            break;
        }
        if (name && strcmp(name, fname->valuestring) != 0)
            continue;
        const cJSON *params = get(fn, "parameters");
        snprintf(b.path, sizeof b.path, "tools/%d/function/parameters", i);
        int args = -1;
        if (params) {
            args = visit(&b, params);
        } else {
            args = rule_begin(&b);
            bputs(&b.rules, "\"{\" ws \"}\"\n");
        }
        if (args < 0)
            break;
        b.path[0] = 0;
        cJSON *nm = cJSON_CreateString(fname->valuestring);
        char *nmt = nm ? cJSON_PrintUnformatted(nm) : NULL;
        cJSON_Delete(nm);
        if (!nmt) {
            jfail(&b, "out of memory");
            break;
        }
        const int c = rule_begin(&b);
        bputs(&b.rules, "\"{\" ws ");
        char key[128];
        snprintf(key, sizeof key, "\"%s\"", wire->name_key);
        blit(&b.rules, key, strlen(key));
        bputs(&b.rules, " ws \":\" ws ");
        blit(&b.rules, nmt, strlen(nmt));
        bputs(&b.rules, " ws \",\" ws ");
        snprintf(key, sizeof key, "\"%s\"", wire->args_key);
        blit(&b.rules, key, strlen(key));
        bprintf(&b.rules, " ws \":\" ws s%d ws \"}\"\n", args);
        free(nmt);
        bprintf(&calls, "%ss%d", n_calls++ ? " | " : "", c);
    }
    if (!b.failed && !n_calls) {
        omni_fail(err, errlen, OMNI_ERR_ARG, "tool_choice: no function named '%s' in tools",
                  name ? name : "");
        b.failed = true;
    }
    if (b.failed || calls.oom) {
        free(calls.s);
        cleanup(&b);
        return NULL;
    }
    /* call ::= call_open ws object ws call_close, then the list around it */
    const int call = rule_begin(&b);
    if (wire->call_open && wire->call_open[0]) {
        blit(&b.rules, wire->call_open, strlen(wire->call_open));
        bputs(&b.rules, " ws ");
    }
    bprintf(&b.rules, "(%s)", calls.s);
    if (wire->call_close && wire->call_close[0]) {
        bputs(&b.rules, " ws ");
        blit(&b.rules, wire->call_close, strlen(wire->call_close));
    }
    bputs(&b.rules, "\n");
    free(calls.s);
    struct buf root = { 0 };
    if (wire->list_open && wire->list_open[0]) {
        blit(&root, wire->list_open, strlen(wire->list_open));
        bputs(&root, " ws ");
    }
    bprintf(&root, "s%d", call);
    if (parallel) {
        bputs(&root, " (ws ");
        if (wire->sep && wire->sep[0]) {
            blit(&root, wire->sep, strlen(wire->sep));
            bputs(&root, " ws ");
        }
        bprintf(&root, "s%d)*", call);
    }
    if (wire->list_close && wire->list_close[0]) {
        bputs(&root, " ws ");
        blit(&root, wire->list_close, strlen(wire->list_close));
    }
    if (root.oom) {
        free(root.s);
        cleanup(&b);
        omni_fail(err, errlen, OMNI_ERR_NOMEM, "json_schema: out of memory");
        return NULL;
    }
    char *out = finish(&b, root.s);
    free(root.s);
    return out;
}
