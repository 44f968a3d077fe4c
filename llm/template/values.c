/* values.c - the Jinja renderer's values: arena, string builder, dicts,
 * truthiness, equality and ordering, and the three ways a value becomes text
 * (str() for output, repr() inside lists and dicts, json.dumps for tojson),
 * each byte for byte as Python prints it. JSON input goes through cJSON. */
#define _GNU_SOURCE /* memmem */
#include "llm/template/tpl_int.h"
#include "llm/unicode.h"
#include "src/core/omni.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// ---- arena ------------------------------------------------------------------

struct tpl_chunk {
    struct tpl_chunk *next;
    size_t used, cap;
    _Alignas(16) unsigned char data[];
};

void *tpl_arena_alloc(struct tpl_arena *a, size_t n)
{
    n = (n + 15) & ~(size_t)15;
    if (n == 0)
        n = 16;
    struct tpl_chunk *c = a->head;
    if (!c || c->cap - c->used < n) {
        size_t cap = n > 65536 ? n : 65536;
        if (a->max_bytes && a->used_bytes + cap > a->max_bytes)
            return NULL;
        c = malloc(sizeof *c + cap);
        if (!c)
            return NULL;
        c->used = 0;
        c->cap = cap;
        c->next = a->head;
        a->head = c;
        a->used_bytes += cap;
    }
    void *p = c->data + c->used;
    c->used += n;
    memset(p, 0, n);
    return p;
}

char *tpl_arena_strdup(struct tpl_arena *a, const char *s, size_t n)
{
    char *p = tpl_arena_alloc(a, n + 1);
    if (p && n)
        memcpy(p, s, n);
    return p;
}

void tpl_arena_free(struct tpl_arena *a)
{
    while (a->head) {
        struct tpl_chunk *next = a->head->next;
        free(a->head);
        a->head = next;
    }
    a->used_bytes = 0;
}

// ---- string builder -------------------------------------------------------------

int tpl_sb_put(struct tpl_sb *b, const char *s, size_t n)
{
    if (n == 0)
        return 0;
    if (b->max && (n > b->max || b->n > b->max - n))
        return OMNI_ERR_LIMIT;
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + n + 1)
            cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p)
            return OMNI_ERR_NOMEM;
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
    return 0;
}

int tpl_sb_putc(struct tpl_sb *b, char c) { return tpl_sb_put(b, &c, 1); }

void tpl_sb_free(struct tpl_sb *b)
{
    free(b->p);
    b->p = NULL;
    b->n = b->cap = 0;
}

/* An sb error as a render error. */
static int sb_err(struct tpl_ctx *c, int rc)
{
    if (rc == OMNI_ERR_LIMIT)
        return tpl_error(c, OMNI_ERR_LIMIT, "output longer than %zu bytes",
                         c->lim.max_output_bytes);
    return TPL_NOMEM(c);
}
#define PUT(c, b, s, n)                                                       \
    do {                                                                      \
        int rc_ = tpl_sb_put((b), (s), (n));                                  \
        if (rc_)                                                              \
            return sb_err((c), rc_);                                          \
    } while (0)
#define PUTS(c, b, s) PUT(c, b, s, strlen(s))

// ---- constructors ---------------------------------------------------------------

struct tpl_val tpl_undef(const char *msg) { return (struct tpl_val){ .t = TV_UNDEF, .s = { msg, 0 } }; }
struct tpl_val tpl_none(void) { return (struct tpl_val){ .t = TV_NONE }; }
struct tpl_val tpl_bool(bool b) { return (struct tpl_val){ .t = TV_BOOL, .b = b }; }
struct tpl_val tpl_int(int64_t i) { return (struct tpl_val){ .t = TV_INT, .i = i }; }
struct tpl_val tpl_float(double f) { return (struct tpl_val){ .t = TV_FLOAT, .f = f }; }
struct tpl_val tpl_str(const char *p, size_t n) { return (struct tpl_val){ .t = TV_STR, .s = { p, n } }; }

int tpl_str_new(struct tpl_ctx *c, const char *p, size_t n, struct tpl_val *out)
{
    if (c->lim.max_output_bytes && n > c->lim.max_output_bytes)
        return sb_err(c, OMNI_ERR_LIMIT);
    char *s = tpl_arena_strdup(&c->arena, p, n);
    if (!s)
        return TPL_NOMEM(c);
    *out = tpl_str(s, n);
    return 0;
}

int tpl_str_sb(struct tpl_ctx *c, struct tpl_sb *b, struct tpl_val *out)
{
    int rc = tpl_str_new(c, b->p ? b->p : "", b->n, out);
    tpl_sb_free(b);
    return rc;
}

struct tpl_list *tpl_list_new(struct tpl_ctx *c, size_t n)
{
    size_t bytes;
    if (omni_mul_size(n, sizeof(struct tpl_val), &bytes) ||
        omni_add_size(bytes, sizeof(struct tpl_list), &bytes))
        return NULL;
    struct tpl_list *l = tpl_arena_alloc(&c->arena, bytes);
    if (l)
        l->n = n;
    return l;
}

struct tpl_dict *tpl_dict_new(struct tpl_ctx *c) { return tpl_arena_alloc(&c->arena, sizeof(struct tpl_dict)); }

const struct tpl_val *tpl_dict_find(const struct tpl_dict *d, struct tpl_val key)
{
    for (size_t i = 0; i < d->n; i++)
        if (tpl_equal(d->k[i], key))
            return &d->v[i];
    return NULL;
}

const struct tpl_val *tpl_dict_get(const struct tpl_dict *d, const char *key, size_t n)
{
    for (size_t i = 0; i < d->n; i++)
        if (d->k[i].t == TV_STR && d->k[i].s.n == n && !memcmp(d->k[i].s.p, key, n))
            return &d->v[i];
    return NULL;
}

int tpl_dict_set(struct tpl_ctx *c, struct tpl_dict *d, struct tpl_val k, struct tpl_val v)
{
    for (size_t i = 0; i < d->n; i++)
        if (tpl_equal(d->k[i], k)) {
            d->v[i] = v;
            return 0;
        }
    if (d->n == d->cap) {
        size_t cap = d->cap ? d->cap * 2 : 8;
        struct tpl_val *nk = tpl_arena_alloc(&c->arena, cap * sizeof *nk);
        struct tpl_val *nv = tpl_arena_alloc(&c->arena, cap * sizeof *nv);
        if (!nk || !nv)
            return TPL_NOMEM(c);
        if (d->n) {
            memcpy(nk, d->k, d->n * sizeof *nk);
            memcpy(nv, d->v, d->n * sizeof *nv);
        }
        d->k = nk;
        d->v = nv;
        d->cap = cap;
    }
    d->k[d->n] = k;
    d->v[d->n] = v;
    d->n++;
    return 0;
}

// ---- predicates -------------------------------------------------------------------

const char *tpl_type_name(struct tpl_val v)
{
    switch (v.t) {
    case TV_UNDEF: return "Undefined";
    case TV_NONE: return "NoneType";
    case TV_BOOL: return "bool";
    case TV_INT: return "int";
    case TV_FLOAT: return "float";
    case TV_STR: return "str";
    case TV_LIST: return v.l->tuple ? "tuple" : "list";
    case TV_DICT: return "dict";
    case TV_NS: return "Namespace";
    case TV_LOOP: return "LoopContext";
    case TV_MACRO: return "Macro";
    case TV_FUNC: return "function";
    case TV_METHOD: return "builtin_function_or_method";
    }
    return "object";
}

bool tpl_truthy(struct tpl_val v)
{
    switch (v.t) {
    case TV_UNDEF: case TV_NONE: return false;
    case TV_BOOL: return v.b;
    case TV_INT: return v.i != 0;
    case TV_FLOAT: return v.f != 0;
    case TV_STR: return v.s.n != 0;
    case TV_LIST: return v.l->n != 0;
    case TV_DICT: return v.d->n != 0;
    default: return true;
    }
}

static bool is_num(struct tpl_val v) { return v.t == TV_INT || v.t == TV_FLOAT || v.t == TV_BOOL; }
static double num_f(struct tpl_val v) { return v.t == TV_FLOAT ? v.f : v.t == TV_INT ? (double)v.i : v.b; }

/* Containers deeper than this compare by identity: equality has no error
 * path, and a loop can nest a list a million levels deep ({% set ns.l =
 * [ns.l] %}), which recursing into would overflow the stack. */
#define TPL_EQUAL_MAX_DEPTH 256

static bool equal_at(struct tpl_val a, struct tpl_val b, int depth);

bool tpl_equal(struct tpl_val a, struct tpl_val b)
{
    return equal_at(a, b, 0);
}

static bool equal_at(struct tpl_val a, struct tpl_val b, int depth)
{
    if (is_num(a) && is_num(b)) {
        if (a.t != TV_FLOAT && b.t != TV_FLOAT)
            return (a.t == TV_INT ? a.i : a.b) == (b.t == TV_INT ? b.i : b.b);
        return num_f(a) == num_f(b);
    }
    if (a.t != b.t)
        return false;
    switch (a.t) {
    case TV_UNDEF: case TV_NONE: return true;
    case TV_STR: return a.s.n == b.s.n && !memcmp(a.s.p, b.s.p, a.s.n);
    case TV_LIST:
        if (a.l == b.l)
            return true;
        if (a.l->n != b.l->n || a.l->tuple != b.l->tuple || depth >= TPL_EQUAL_MAX_DEPTH)
            return false;
        for (size_t i = 0; i < a.l->n; i++)
            if (!equal_at(a.l->v[i], b.l->v[i], depth + 1))
                return false;
        return true;
    case TV_DICT:
        if (a.d == b.d)
            return true;
        if (a.d->n != b.d->n || depth >= TPL_EQUAL_MAX_DEPTH)
            return false;
        for (size_t i = 0; i < a.d->n; i++) {
            const struct tpl_val *o = tpl_dict_find(b.d, a.d->k[i]);
            if (!o || !equal_at(a.d->v[i], *o, depth + 1))
                return false;
        }
        return true;
    case TV_NS: return a.d == b.d;
    case TV_LOOP: return a.loop == b.loop;
    case TV_MACRO: return a.m == b.m;
    case TV_FUNC: return a.fn == b.fn;
    default: return false;
    }
}

int tpl_compare(struct tpl_ctx *c, struct tpl_val a, struct tpl_val b, int *r)
{
    if (is_num(a) && is_num(b)) {
        if (a.t != TV_FLOAT && b.t != TV_FLOAT) {
            int64_t x = a.t == TV_INT ? a.i : a.b, y = b.t == TV_INT ? b.i : b.b;
            *r = (x > y) - (x < y);
        } else {
            double x = num_f(a), y = num_f(b);
            *r = (x > y) - (x < y);
        }
        return 0;
    }
    if (a.t == TV_STR && b.t == TV_STR) {
        /* Byte order of UTF-8 is code point order, as Python compares. */
        size_t n = a.s.n < b.s.n ? a.s.n : b.s.n;
        int k = memcmp(a.s.p, b.s.p, n);
        *r = k ? (k > 0 ? 1 : -1) : (a.s.n > b.s.n) - (a.s.n < b.s.n);
        return 0;
    }
    if (a.t == TV_LIST && b.t == TV_LIST) {
        for (size_t i = 0; i < a.l->n && i < b.l->n; i++) {
            if (tpl_equal(a.l->v[i], b.l->v[i]))
                continue;
            if (++c->depth > c->lim.max_depth)
                return tpl_error(c, OMNI_ERR_LIMIT, "values nested deeper than %d", c->lim.max_depth);
            int rc = tpl_compare(c, a.l->v[i], b.l->v[i], r);
            c->depth--;
            return rc;
        }
        *r = (a.l->n > b.l->n) - (a.l->n < b.l->n);
        return 0;
    }
    if (a.t == TV_UNDEF)
        return tpl_undef_error(c, a);
    if (b.t == TV_UNDEF)
        return tpl_undef_error(c, b);
    return tpl_error(c, OMNI_ERR_ARG, "'<' not supported between instances of '%s' and '%s'",
                     tpl_type_name(a), tpl_type_name(b));
}

int64_t tpl_length(struct tpl_val v)
{
    switch (v.t) {
    case TV_UNDEF: return 0;
    case TV_STR: {
        int64_t n = 0;
        for (size_t i = 0; i < v.s.n; i++)
            n += ((unsigned char)v.s.p[i] & 0xc0) != 0x80;
        return n;
    }
    case TV_LIST: return (int64_t)v.l->n;
    case TV_DICT: case TV_NS: return (int64_t)v.d->n;
    default: return -1;
    }
}

/* Length of the UTF-8 character at p (1 for a stray byte). */
static size_t utf8_len(const char *p, size_t n)
{
    unsigned char c = (unsigned char)p[0];
    size_t k = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 1;
    if (k > n)
        return 1;
    for (size_t i = 1; i < k; i++)
        if (((unsigned char)p[i] & 0xc0) != 0x80)
            return 1;
    return k;
}

size_t tpl_utf8_offsets(struct tpl_ctx *c, const char *p, size_t n, size_t **offs)
{
    size_t *o = tpl_arena_alloc(&c->arena, (n + 1) * sizeof *o);
    if (!o) {
        *offs = NULL;
        return 0;
    }
    size_t k = 0;
    for (size_t i = 0; i < n; i += utf8_len(p + i, n - i))
        o[k++] = i;
    o[k] = n;
    *offs = o;
    return k;
}

int tpl_iterable(struct tpl_ctx *c, struct tpl_val v, struct tpl_list **out)
{
    struct tpl_list *l;
    switch (v.t) {
    case TV_UNDEF:
        l = tpl_list_new(c, 0);
        break;
    case TV_LIST:
        *out = v.l;
        return 0;
    case TV_DICT:
    case TV_NS:
        if ((l = tpl_list_new(c, v.d->n)))
            for (size_t i = 0; i < v.d->n; i++)
                l->v[i] = v.d->k[i];
        break;
    case TV_STR: {
        size_t *o;
        size_t n = tpl_utf8_offsets(c, v.s.p, v.s.n, &o);
        if (!o)
            return TPL_NOMEM(c);
        if ((l = tpl_list_new(c, n)))
            for (size_t i = 0; i < n; i++)
                l->v[i] = tpl_str(v.s.p + o[i], o[i + 1] - o[i]);
        break;
    }
    default:
        return tpl_error(c, OMNI_ERR_ARG, "'%s' object is not iterable", tpl_type_name(v));
    }
    if (!l)
        return TPL_NOMEM(c);
    *out = l;
    return 0;
}

// ---- text forms ---------------------------------------------------------------------

/* Python's repr(float): the shortest digits that read back the same, fixed
 * notation for exponents -4..15 (always with a fraction), else d.ddde+XX. */
static void float_repr(double x, char *buf, size_t cap, bool json)
{
    if (isnan(x)) {
        snprintf(buf, cap, json ? "NaN" : "nan");
        return;
    }
    if (isinf(x)) {
        snprintf(buf, cap, "%s%s", x < 0 ? "-" : "", json ? "Infinity" : "inf");
        return;
    }
    char e[40];
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(e, sizeof e, "%.*e", prec - 1, x);
        if (strtod(e, NULL) == x)
            break;
    }
    /* e = [-]d[.ddd]e[+-]XX */
    const char *s = e;
    bool neg = *s == '-';
    if (neg)
        s++;
    char digits[24];
    int nd = 0;
    for (; *s && *s != 'e'; s++)
        if (*s != '.')
            digits[nd++] = *s;
    while (nd > 1 && digits[nd - 1] == '0')
        nd--;
    digits[nd] = 0;
    int exp10 = atoi(s + 1);
    char *o = buf;
    size_t left = cap;
#define OUT(...) do { int k_ = snprintf(o, left, __VA_ARGS__); if (k_ > 0 && (size_t)k_ < left) { o += k_; left -= (size_t)k_; } } while (0)
    if (neg)
        OUT("-");
    if (exp10 < -4 || exp10 >= 16) {
        OUT("%c", digits[0]);
        if (nd > 1)
            OUT(".%s", digits + 1);
        OUT("e%c%02d", exp10 < 0 ? '-' : '+', exp10 < 0 ? -exp10 : exp10);
    } else if (exp10 < 0) {
        OUT("0.");
        for (int i = -1; i > exp10; i--)
            OUT("0");
        OUT("%s", digits);
    } else {
        for (int i = 0; i <= exp10; i++)
            OUT("%c", i < nd ? digits[i] : '0');
        OUT(".");
        if (nd > exp10 + 1)
            OUT("%s", digits + exp10 + 1);
        else
            OUT("0");
    }
#undef OUT
}

/* Python's repr(str): single quotes unless the text has ' and no ". */
static int write_str_repr(struct tpl_ctx *c, struct tpl_sb *b, const char *p, size_t n)
{
    bool sq = memchr(p, '\'', n) != NULL, dq = memchr(p, '"', n) != NULL;
    char q = sq && !dq ? '"' : '\'';
    PUT(c, b, &q, 1);
    for (size_t i = 0; i < n;) {
        unsigned char ch = (unsigned char)p[i];
        size_t k = utf8_len(p + i, n - i);
        char esc[8] = "";
        if (ch == '\\' || ch == (unsigned char)q)
            snprintf(esc, sizeof esc, "\\%c", ch);
        else if (ch == '\n')
            strcpy(esc, "\\n");
        else if (ch == '\r')
            strcpy(esc, "\\r");
        else if (ch == '\t')
            strcpy(esc, "\\t");
        else if (ch < 0x20 || ch == 0x7f)
            snprintf(esc, sizeof esc, "\\x%02x", ch);
        else if (k == 2 && ch == 0xc2 && ((unsigned char)p[i + 1] < 0xa1 || (unsigned char)p[i + 1] == 0xad))
            snprintf(esc, sizeof esc, "\\x%02x", (unsigned char)p[i + 1]); /* C1, NBSP, SHY: not printable */
        if (esc[0])
            PUTS(c, b, esc);
        else
            PUT(c, b, p + i, k);
        i += k;
    }
    PUT(c, b, &q, 1);
    return 0;
}

static int write_inner(struct tpl_ctx *c, struct tpl_sb *b, struct tpl_val v, bool repr);

static int write_container(struct tpl_ctx *c, struct tpl_sb *b, struct tpl_val v)
{
    if (++c->depth > c->lim.max_depth)
        return tpl_error(c, OMNI_ERR_LIMIT, "values nested deeper than %d", c->lim.max_depth);
    int rc = 0;
    if (v.t == TV_LIST) {
        PUTS(c, b, v.l->tuple ? "(" : "[");
        for (size_t i = 0; i < v.l->n && !rc; i++) {
            if (i)
                PUTS(c, b, ", ");
            rc = write_inner(c, b, v.l->v[i], true);
        }
        if (v.l->tuple && v.l->n == 1)
            PUTS(c, b, ",");
        if (!rc)
            PUTS(c, b, v.l->tuple ? ")" : "]");
    } else {
        if (v.t == TV_NS)
            PUTS(c, b, "<Namespace ");
        PUTS(c, b, "{");
        for (size_t i = 0; i < v.d->n && !rc; i++) {
            if (i)
                PUTS(c, b, ", ");
            if (!(rc = write_inner(c, b, v.d->k[i], true))) {
                PUTS(c, b, ": ");
                rc = write_inner(c, b, v.d->v[i], true);
            }
        }
        if (!rc)
            PUTS(c, b, v.t == TV_NS ? "}>" : "}");
    }
    c->depth--;
    return rc;
}

static int write_inner(struct tpl_ctx *c, struct tpl_sb *b, struct tpl_val v, bool repr)
{
    char buf[64];
    switch (v.t) {
    case TV_UNDEF:
        if (repr)
            PUTS(c, b, "Undefined");
        return 0;
    case TV_NONE: PUTS(c, b, "None"); return 0;
    case TV_BOOL: PUTS(c, b, v.b ? "True" : "False"); return 0;
    case TV_INT:
        snprintf(buf, sizeof buf, "%lld", (long long)v.i);
        PUTS(c, b, buf);
        return 0;
    case TV_FLOAT:
        float_repr(v.f, buf, sizeof buf, false);
        PUTS(c, b, buf);
        return 0;
    case TV_STR:
        if (repr)
            return write_str_repr(c, b, v.s.p, v.s.n);
        PUT(c, b, v.s.p, v.s.n);
        return 0;
    case TV_LIST: case TV_DICT: case TV_NS:
        return write_container(c, b, v);
    case TV_LOOP:
        snprintf(buf, sizeof buf, "<LoopContext %zu/%zu>", v.loop->index0 + 1, v.loop->items->n);
        PUTS(c, b, buf);
        return 0;
    case TV_MACRO:
        PUTS(c, b, "<Macro>");
        return 0;
    case TV_FUNC: case TV_METHOD:
        PUTS(c, b, "<built-in function>");
        return 0;
    }
    return 0;
}

int tpl_write_str(struct tpl_ctx *c, struct tpl_sb *b, struct tpl_val v) { return write_inner(c, b, v, false); }
int tpl_write_repr(struct tpl_ctx *c, struct tpl_sb *b, struct tpl_val v) { return write_inner(c, b, v, true); }

int tpl_to_str(struct tpl_ctx *c, struct tpl_val v, struct tpl_val *out)
{
    if (v.t == TV_STR) {
        *out = v;
        return 0;
    }
    struct tpl_sb b = { .max = c->lim.max_output_bytes };
    int rc = tpl_write_str(c, &b, v);
    if (rc) {
        tpl_sb_free(&b);
        return rc;
    }
    return tpl_str_sb(c, &b, out);
}

/* json.dumps string: ", \ and controls escaped; with ensure_ascii every
 * non-ASCII character too (bytes that are not UTF-8 count as U+FFFD). */
static int write_json_str(struct tpl_ctx *c, struct tpl_sb *b, const char *p, size_t n, bool ascii)
{
    PUTS(c, b, "\"");
    size_t run = 0;
    for (size_t i = 0; i < n;) {
        unsigned char ch = (unsigned char)p[i];
        if (ch >= 0x20 && ch != '"' && ch != '\\' && (ch < 0x80 || !ascii)) {
            i++;
            continue;
        }
        PUT(c, b, p + run, i - run);
        char esc[16];
        size_t len = 1;
        switch (ch) {
        case '"': strcpy(esc, "\\\""); break;
        case '\\': strcpy(esc, "\\\\"); break;
        case '\n': strcpy(esc, "\\n"); break;
        case '\r': strcpy(esc, "\\r"); break;
        case '\t': strcpy(esc, "\\t"); break;
        case '\b': strcpy(esc, "\\b"); break;
        case '\f': strcpy(esc, "\\f"); break;
        default:
            if (ch < 0x80) {
                snprintf(esc, sizeof esc, "\\u%04x", ch);
            } else {
                uint32_t cp;
                int k = unicode_utf8_decode(p + i, n - i, &cp);
                if (k <= 0)
                    cp = 0xFFFD;
                else
                    len = (size_t)k;
                if (cp > 0xFFFF)
                    snprintf(esc, sizeof esc, "\\u%04x\\u%04x", 0xD800 + ((cp - 0x10000) >> 10),
                             0xDC00 + ((cp - 0x10000) & 0x3FF));
                else
                    snprintf(esc, sizeof esc, "\\u%04x", cp);
            }
        }
        PUTS(c, b, esc);
        i += len;
        run = i;
    }
    PUT(c, b, p + run, n - run);
    PUTS(c, b, "\"");
    return 0;
}

static int json_newline(struct tpl_ctx *c, struct tpl_sb *b, int indent, int level)
{
    PUTS(c, b, "\n");
    for (int i = 0; i < indent * level; i++)
        PUTS(c, b, " ");
    return 0;
}

/* Key order of a dict for sort_keys (Python's sorted(): str with str,
 * numbers with numbers; mixing them is a TypeError). */
struct key_sort {
    const struct tpl_val *keys;
    bool mixed;
};
static _Thread_local struct key_sort *key_sort_now;

static int key_cmp(const void *pa, const void *pb)
{
    const struct tpl_val *a = &key_sort_now->keys[*(const size_t *)pa], *b = &key_sort_now->keys[*(const size_t *)pb];
    if ((a->t == TV_STR) != (b->t == TV_STR)) {
        key_sort_now->mixed = true;
        return 0;
    }
    if (a->t == TV_STR) {
        int r = memcmp(a->s.p, b->s.p, a->s.n < b->s.n ? a->s.n : b->s.n);
        return r ? r : (a->s.n > b->s.n) - (a->s.n < b->s.n);
    }
    const double x = a->t == TV_FLOAT ? a->f : a->t == TV_INT ? (double)a->i : a->t == TV_BOOL ? a->b : 0;
    const double y = b->t == TV_FLOAT ? b->f : b->t == TV_INT ? (double)b->i : b->t == TV_BOOL ? b->b : 0;
    if (a->t == TV_NONE || b->t == TV_NONE)
        key_sort_now->mixed = true;
    return (x > y) - (x < y);
}

int tpl_write_json(struct tpl_ctx *c, struct tpl_sb *b, struct tpl_val v, const struct tpl_json_fmt *f, int level)
{
    char buf[64];
    int rc = 0;
    switch (v.t) {
    case TV_NONE: PUTS(c, b, "null"); return 0;
    case TV_BOOL: PUTS(c, b, v.b ? "true" : "false"); return 0;
    case TV_INT:
        snprintf(buf, sizeof buf, "%lld", (long long)v.i);
        PUTS(c, b, buf);
        return 0;
    case TV_FLOAT:
        float_repr(v.f, buf, sizeof buf, true);
        PUTS(c, b, buf);
        return 0;
    case TV_STR: return write_json_str(c, b, v.s.p, v.s.n, f->ensure_ascii);
    case TV_LIST: case TV_DICT: {
        if (level >= c->lim.max_depth)
            return tpl_error(c, OMNI_ERR_LIMIT, "values nested deeper than %d", c->lim.max_depth);
        bool list = v.t == TV_LIST;
        size_t n = list ? v.l->n : v.d->n;
        PUTS(c, b, list ? "[" : "{");
        if (n == 0) {
            PUTS(c, b, list ? "]" : "}");
            return 0;
        }
        size_t *order = NULL;
        if (!list && f->sort_keys) {
            if (!(order = tpl_arena_alloc(&c->arena, n * sizeof *order)))
                return TPL_NOMEM(c);
            for (size_t i = 0; i < n; i++)
                order[i] = i;
            struct key_sort ks = { v.d->k, false }, *saved = key_sort_now;
            key_sort_now = &ks;
            qsort(order, n, sizeof *order, key_cmp);
            key_sort_now = saved;
            if (ks.mixed)
                return tpl_error(c, OMNI_ERR_ARG, "tojson: sort_keys cannot order keys of mixed types");
        }
        for (size_t j = 0; j < n && !rc; j++) {
            const size_t i = order ? order[j] : j;
            if (j)
                PUTS(c, b, f->item_sep);
            if (f->indent >= 0 && (rc = json_newline(c, b, f->indent, level + 1)))
                return rc;
            if (!list) {
                struct tpl_val k = v.d->k[i];
                /* json.dumps turns int, float, bool and None keys into strings. */
                if (k.t == TV_STR)
                    rc = write_json_str(c, b, k.s.p, k.s.n, f->ensure_ascii);
                else if (k.t == TV_INT || k.t == TV_FLOAT || k.t == TV_BOOL || k.t == TV_NONE) {
                    struct tpl_sb kb = { .max = c->lim.max_output_bytes };
                    const struct tpl_json_fmt plain = { -1, ", ", ": ", false, false };
                    if (!(rc = tpl_write_json(c, &kb, k, &plain, level)))
                        rc = write_json_str(c, b, kb.p, kb.n, false);
                    tpl_sb_free(&kb);
                } else
                    return tpl_error(c, OMNI_ERR_ARG, "keys must be str, int, float, bool or None, not %s",
                                     tpl_type_name(k));
                if (rc)
                    return rc;
                PUTS(c, b, f->key_sep);
            }
            rc = tpl_write_json(c, b, list ? v.l->v[i] : v.d->v[i], f, level + 1);
        }
        if (rc)
            return rc;
        if (f->indent >= 0 && (rc = json_newline(c, b, f->indent, level)))
            return rc;
        PUTS(c, b, list ? "]" : "}");
        return 0;
    }
    default:
        return tpl_error(c, OMNI_ERR_ARG, "Object of type %s is not JSON serializable", tpl_type_name(v));
    }
}

// ---- JSON input -------------------------------------------------------------------

/* cJSON keeps no number text, so one lexical pass over the JSON records, in
 * document order, which number literals Python would read as floats ("1.0"
 * stays a float through tojson). */
struct json_kinds {
    bool *is_float;
    size_t n, next;
};

static void json_scan_numbers(const char *s, bool *is_float, size_t *n)
{
    size_t k = 0;
    for (const char *p = s; *p; p++) {
        if (*p == '"') {
            for (p++; *p && *p != '"'; p++)
                if (*p == '\\' && p[1])
                    p++;
            if (!*p)
                break;
        } else if (*p == '-' || (*p >= '0' && *p <= '9')) {
            bool f = false;
            for (; *p && strchr("+-0123456789.eE", *p); p++)
                f |= *p == '.' || *p == 'e' || *p == 'E';
            if (is_float)
                is_float[k] = f;
            k++;
            p--;
        }
    }
    *n = k;
}

/* Recursive, so bounded: cJSON_Parse stops at CJSON_NESTING_LIMIT levels
 * already (1000, about 130 KB of stack in cJSON itself); the same bound is
 * checked here so that it does not rest on the library's build options. */
static int from_cjson(struct tpl_ctx *c, const cJSON *j, struct json_kinds *nk, struct tpl_val *out,
                      int depth)
{
    if (depth > CJSON_NESTING_LIMIT)
        return tpl_error(c, OMNI_ERR_LIMIT, "JSON nested deeper than %d levels", CJSON_NESTING_LIMIT);
    if (cJSON_IsNull(j))
        *out = tpl_none();
    else if (cJSON_IsBool(j))
        *out = tpl_bool(cJSON_IsTrue(j));
    else if (cJSON_IsNumber(j)) {
        bool f = nk->next < nk->n ? nk->is_float[nk->next] : false;
        nk->next++;
        double d = j->valuedouble;
        if (!f && d >= -9007199254740992.0 && d <= 9007199254740992.0 && d == floor(d))
            *out = tpl_int((int64_t)d);
        else
            *out = tpl_float(d);
    } else if (cJSON_IsString(j))
        return tpl_str_new(c, j->valuestring, strlen(j->valuestring), out);
    else if (cJSON_IsArray(j)) {
        struct tpl_list *l = tpl_list_new(c, (size_t)cJSON_GetArraySize(j));
        if (!l)
            return TPL_NOMEM(c);
        size_t i = 0;
        for (const cJSON *e = j->child; e; e = e->next) {
            int rc = from_cjson(c, e, nk, &l->v[i++], depth + 1);
            if (rc)
                return rc;
        }
        *out = (struct tpl_val){ .t = TV_LIST, .l = l };
    } else if (cJSON_IsObject(j)) {
        struct tpl_dict *d = tpl_dict_new(c);
        if (!d)
            return TPL_NOMEM(c);
        for (const cJSON *e = j->child; e; e = e->next) {
            struct tpl_val k, v;
            int rc = tpl_str_new(c, e->string, strlen(e->string), &k);
            if (!rc)
                rc = from_cjson(c, e, nk, &v, depth + 1);
            if (!rc)
                rc = tpl_dict_set(c, d, k, v);
            if (rc)
                return rc;
        }
        *out = (struct tpl_val){ .t = TV_DICT, .d = d };
    } else
        *out = tpl_none();
    return 0;
}

int tpl_from_json(struct tpl_ctx *c, const char *json, const char *what, struct tpl_val *out)
{
    cJSON *j = cJSON_Parse(json);
    if (!j) {
        const char *at = cJSON_GetErrorPtr();
        return omni_fail(c->err, c->errlen, OMNI_ERR_ARG, "%s: invalid JSON near byte %td", what,
                         at && at >= json ? at - json : (ptrdiff_t)0);
    }
    struct json_kinds nk = { 0 };
    json_scan_numbers(json, NULL, &nk.n);
    nk.is_float = tpl_arena_alloc(&c->arena, nk.n + 1);
    int rc;
    if (!nk.is_float)
        rc = TPL_NOMEM(c);
    else {
        json_scan_numbers(json, nk.is_float, &nk.n);
        rc = from_cjson(c, j, &nk, out, 0);
    }
    cJSON_Delete(j);
    return rc;
}
