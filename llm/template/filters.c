/* filters.c - the library the templates call: jinja2 filters (|trim,
 * |tojson, |selectattr, ...), tests (is defined, is string, ...), the
 * Python methods templates use on strings, dicts and lists, and the globals
 * (range, namespace, dict, raise_exception, strftime_now). Each behaves as
 * jinja2 3.1 in transformers' sandbox does; case mapping covers ASCII,
 * Latin-1, Greek and Cyrillic. */
#define _GNU_SOURCE /* memmem */
#include "llm/template/tpl_int.h"
#include "src/core/omni.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

const struct tpl_val *tpl_arg(const struct tpl_args *a, int i, const char *name)
{
    if (i >= 0 && i < a->n)
        return &a->v[i];
    for (int k = 0; name && k < a->nkw; k++)
        if (!strcmp(a->kwname[k], name))
            return &a->kw[k];
    return NULL;
}

static struct tpl_val list_val(struct tpl_list *l) { return (struct tpl_val){ .t = TV_LIST, .l = l }; }

// ---- text helpers ---------------------------------------------------------------------

static uint32_t dec(const char *p, size_t n, size_t *k)
{
    unsigned char c = (unsigned char)p[0];
    if (c >= 0xc0 && c < 0xe0 && n >= 2 && ((unsigned char)p[1] & 0xc0) == 0x80) {
        *k = 2;
        return (uint32_t)(c & 0x1f) << 6 | ((unsigned char)p[1] & 0x3f);
    }
    if (c >= 0xe0 && c < 0xf0 && n >= 3 && ((unsigned char)p[1] & 0xc0) == 0x80 && ((unsigned char)p[2] & 0xc0) == 0x80) {
        *k = 3;
        return (uint32_t)(c & 0x0f) << 12 | (uint32_t)((unsigned char)p[1] & 0x3f) << 6 | ((unsigned char)p[2] & 0x3f);
    }
    if (c >= 0xf0 && n >= 4 && ((unsigned char)p[1] & 0xc0) == 0x80 && ((unsigned char)p[2] & 0xc0) == 0x80 &&
        ((unsigned char)p[3] & 0xc0) == 0x80) {
        *k = 4;
        return (uint32_t)(c & 0x07) << 18 | (uint32_t)((unsigned char)p[1] & 0x3f) << 12 |
               (uint32_t)((unsigned char)p[2] & 0x3f) << 6 | ((unsigned char)p[3] & 0x3f);
    }
    *k = 1;
    return c;
}

static size_t enc(uint32_t cp, char *o)
{
    if (cp < 0x80) { o[0] = (char)cp; return 1; }
    if (cp < 0x800) { o[0] = (char)(0xc0 | cp >> 6); o[1] = (char)(0x80 | (cp & 0x3f)); return 2; }
    if (cp < 0x10000) {
        o[0] = (char)(0xe0 | cp >> 12); o[1] = (char)(0x80 | ((cp >> 6) & 0x3f)); o[2] = (char)(0x80 | (cp & 0x3f));
        return 3;
    }
    o[0] = (char)(0xf0 | cp >> 18); o[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
    o[2] = (char)(0x80 | ((cp >> 6) & 0x3f)); o[3] = (char)(0x80 | (cp & 0x3f));
    return 4;
}

static uint32_t to_upper(uint32_t c)
{
    if (c >= 'a' && c <= 'z') return c - 32;
    if ((c >= 0xe0 && c <= 0xfe && c != 0xf7) || (c >= 0x3b1 && c <= 0x3c9 && c != 0x3c2) || (c >= 0x430 && c <= 0x44f))
        return c - 32;
    if (c >= 0x450 && c <= 0x45f) return c - 80;
    return c;
}

static uint32_t to_lower(uint32_t c)
{
    if (c >= 'A' && c <= 'Z') return c + 32;
    if ((c >= 0xc0 && c <= 0xde && c != 0xd7) || (c >= 0x391 && c <= 0x3a9 && c != 0x3a2) || (c >= 0x410 && c <= 0x42f))
        return c + 32;
    if (c >= 0x400 && c <= 0x40f) return c + 80;
    return c;
}

static bool is_cased(uint32_t c) { return to_upper(c) != c || to_lower(c) != c; }
static bool is_space_cp(uint32_t c) { return c == ' ' || (c >= 9 && c <= 13) || (c >= 0x1c && c <= 0x1f) || c == 0x85 || c == 0xa0 || c == 0x3000 || (c >= 0x2000 && c <= 0x200a) || c == 0x2028 || c == 0x2029; }

enum casemode { CASE_UPPER, CASE_LOWER, CASE_CAPITALIZE, CASE_TITLE_METHOD, CASE_TITLE_FILTER };

static int change_case(struct tpl_ctx *c, struct tpl_val v, enum casemode mode, struct tpl_val *out)
{
    int rc = tpl_to_str(c, v, &v);
    if (rc)
        return rc;
    char *o = tpl_arena_alloc(&c->arena, v.s.n + 1);
    if (!o)
        return TPL_NOMEM(c);
    size_t k = 0;
    bool prev_cased = false, word_start = true, first = true;
    for (size_t i = 0; i < v.s.n;) {
        size_t len;
        uint32_t cp = dec(v.s.p + i, v.s.n - i, &len), r = cp;
        switch (mode) {
        case CASE_UPPER: r = to_upper(cp); break;
        case CASE_LOWER: r = to_lower(cp); break;
        case CASE_CAPITALIZE: r = first ? to_upper(cp) : to_lower(cp); break;
        case CASE_TITLE_METHOD:
            /* str.title: upper after an uncased character, lower after a cased one. */
            r = prev_cased ? to_lower(cp) : to_upper(cp);
            prev_cased = is_cased(cp);
            break;
        case CASE_TITLE_FILTER: {
            /* jinja2 |title: words start after runs of whitespace - ( { [ < */
            bool sep = is_space_cp(cp) || cp == '-' || cp == '(' || cp == '{' || cp == '[' || cp == '<';
            r = sep ? cp : word_start ? to_upper(cp) : to_lower(cp);
            word_start = sep;
            break;
        }
        }
        first = false;
        /* The mapped ranges keep their UTF-8 length. */
        size_t w = enc(r, o + k);
        if (w != len) {
            memcpy(o + k, v.s.p + i, len);
            w = len;
        }
        k += w;
        i += len;
    }
    *out = tpl_str(o, k);
    return 0;
}

/* Python str.strip family: chars NULL strips whitespace. which: 1 left, 2 right, 3 both. */
static int strip(struct tpl_ctx *c, struct tpl_val v, const struct tpl_val *chars, int which, struct tpl_val *out)
{
    int rc = tpl_to_str(c, v, &v);
    if (rc)
        return rc;
    if (chars && chars->t != TV_NONE && chars->t != TV_STR)
        return tpl_error(c, OMNI_ERR_ARG, "strip arg must be None or str");
    const char *cs = chars && chars->t == TV_STR ? chars->s.p : NULL;
    size_t cn = cs ? chars->s.n : 0;
    size_t b = 0, e = v.s.n;
    while (which & 1 && b < e) {
        size_t len;
        uint32_t cp = dec(v.s.p + b, e - b, &len);
        bool hit = cs ? memmem(cs, cn, v.s.p + b, len) != NULL : is_space_cp(cp);
        if (!hit)
            break;
        b += len;
    }
    while (which & 2 && e > b) {
        size_t s = e - 1;
        while (s > b && ((unsigned char)v.s.p[s] & 0xc0) == 0x80)
            s--;
        size_t len;
        uint32_t cp = dec(v.s.p + s, e - s, &len);
        bool hit = cs ? memmem(cs, cn, v.s.p + s, e - s) != NULL : is_space_cp(cp);
        if (!hit)
            break;
        e = s;
    }
    *out = tpl_str(v.s.p + b, e - b);
    return 0;
}

static int need_str(struct tpl_ctx *c, const struct tpl_val *v, const char *what)
{
    if (!v || v->t != TV_STR)
        return tpl_error(c, OMNI_ERR_ARG, "%s must be a string", what);
    return 0;
}

static int replace(struct tpl_ctx *c, struct tpl_val s, struct tpl_val old, struct tpl_val new,
                   int64_t count, struct tpl_val *out)
{
    struct tpl_sb b = { .max = c->lim.max_output_bytes };
    int rc = 0;
    int64_t done = 0;
    if (old.s.n == 0) {
        /* Python inserts new before every character and at the end. */
        size_t i = 0;
        while (!rc && (count < 0 || done < count)) {
            rc = tpl_sb_put(&b, new.s.p, new.s.n);
            done++;
            if (i >= s.s.n)
                break;
            size_t len;
            dec(s.s.p + i, s.s.n - i, &len);
            if (!rc)
                rc = tpl_sb_put(&b, s.s.p + i, len);
            i += len;
        }
        if (!rc && i < s.s.n)
            rc = tpl_sb_put(&b, s.s.p + i, s.s.n - i);
    } else {
        size_t i = 0;
        while (!rc) {
            const char *hit = count >= 0 && done >= count ? NULL : memmem(s.s.p + i, s.s.n - i, old.s.p, old.s.n);
            if (!hit) {
                rc = tpl_sb_put(&b, s.s.p + i, s.s.n - i);
                break;
            }
            size_t at = (size_t)(hit - s.s.p);
            rc = tpl_sb_put(&b, s.s.p + i, at - i);
            if (!rc)
                rc = tpl_sb_put(&b, new.s.p, new.s.n);
            i = at + old.s.n;
            done++;
        }
    }
    if (rc) {
        tpl_sb_free(&b);
        return tpl_error(c, OMNI_ERR_LIMIT, "string longer than %zu bytes", c->lim.max_output_bytes);
    }
    return tpl_str_sb(c, &b, out);
}

/* str.split / rsplit: sep NULL splits on whitespace runs and drops empties. */
static int split(struct tpl_ctx *c, struct tpl_val s, const struct tpl_val *sep, int64_t maxsplit, bool right,
                 struct tpl_val *out)
{
    if (sep && sep->t == TV_NONE)
        sep = NULL;
    if (sep && (sep->t != TV_STR || sep->s.n == 0))
        return tpl_error(c, OMNI_ERR_ARG, sep->t == TV_STR ? "empty separator" : "separator must be a string");
    struct tpl_list *l = tpl_list_new(c, s.s.n + 1);
    if (!l)
        return TPL_NOMEM(c);
    size_t n = 0;
    const char *p = s.s.p;
    size_t len = s.s.n;
    if (!sep) {
        /* Whitespace split (ASCII whitespace; the rare Unicode spaces stay). */
        size_t i = 0;
        if (!right) {
            while (i < len) {
                while (i < len && is_space_cp((unsigned char)p[i]))
                    i++;
                if (i >= len)
                    break;
                if (maxsplit >= 0 && (int64_t)n >= maxsplit) {
                    size_t e = len;
                    while (e > i && is_space_cp((unsigned char)p[e - 1]))
                        e--;
                    l->v[n++] = tpl_str(p + i, e - i);
                    break;
                }
                size_t b = i;
                while (i < len && !is_space_cp((unsigned char)p[i]))
                    i++;
                l->v[n++] = tpl_str(p + b, i - b);
            }
        } else {
            size_t e = len;
            while (e > 0) {
                while (e > 0 && is_space_cp((unsigned char)p[e - 1]))
                    e--;
                if (e == 0)
                    break;
                if (maxsplit >= 0 && (int64_t)n >= maxsplit) {
                    size_t b = 0;
                    while (b < e && is_space_cp((unsigned char)p[b]))
                        b++;
                    l->v[n++] = tpl_str(p + b, e - b);
                    break;
                }
                size_t b = e;
                while (b > 0 && !is_space_cp((unsigned char)p[b - 1]))
                    b--;
                l->v[n++] = tpl_str(p + b, e - b);
                e = b;
            }
        }
    } else if (!right) {
        size_t i = 0;
        for (;;) {
            const char *hit = maxsplit >= 0 && (int64_t)n >= maxsplit ? NULL : memmem(p + i, len - i, sep->s.p, sep->s.n);
            if (!hit) {
                l->v[n++] = tpl_str(p + i, len - i);
                break;
            }
            l->v[n++] = tpl_str(p + i, (size_t)(hit - p) - i);
            i = (size_t)(hit - p) + sep->s.n;
        }
    } else {
        size_t e = len;
        for (;;) {
            const char *hit = NULL;
            if (!(maxsplit >= 0 && (int64_t)n >= maxsplit))
                for (size_t k = e; k >= sep->s.n; k--)
                    if (!memcmp(p + k - sep->s.n, sep->s.p, sep->s.n)) {
                        hit = p + k - sep->s.n;
                        break;
                    }
            if (!hit) {
                l->v[n++] = tpl_str(p, e);
                break;
            }
            l->v[n++] = tpl_str(hit + sep->s.n, e - (size_t)(hit - p) - sep->s.n);
            e = (size_t)(hit - p);
        }
    }
    l->n = n;
    if (right)
        for (size_t i = 0; i < n / 2; i++) {
            struct tpl_val t = l->v[i];
            l->v[i] = l->v[n - 1 - i];
            l->v[n - 1 - i] = t;
        }
    *out = list_val(l);
    return 0;
}

static int int_arg(struct tpl_ctx *c, const struct tpl_val *v, int64_t dflt, int64_t *out)
{
    if (!v || v->t == TV_NONE) {
        *out = dflt;
        return 0;
    }
    if (v->t == TV_INT || v->t == TV_BOOL) {
        *out = v->t == TV_INT ? v->i : v->b;
        return 0;
    }
    return tpl_error(c, OMNI_ERR_ARG, "an integer is required, not '%s'", tpl_type_name(*v));
}

// ---- attribute paths ("a.b.0"), shared by map/selectattr/sort/... ----------------

static int get_path(struct tpl_ctx *c, struct tpl_val v, struct tpl_val path, struct tpl_val *out)
{
    if (path.t != TV_STR) {
        if (path.t == TV_INT)
            return tpl_getitem(c, v, path, out);
        return tpl_error(c, OMNI_ERR_ARG, "attribute must be a string");
    }
    const char *p = path.s.p, *end = p + path.s.n;
    while (p <= end) {
        const char *dot = memchr(p, '.', (size_t)(end - p));
        if (!dot)
            dot = end;
        struct tpl_val key = tpl_str(p, (size_t)(dot - p));
        bool digits = dot > p;
        for (const char *q = p; q < dot; q++)
            digits &= *q >= '0' && *q <= '9';
        if (digits)
            key = tpl_int(strtoll(p, NULL, 10));
        int rc = tpl_getitem(c, v, key, &v);
        if (rc)
            return rc;
        p = dot + 1;
    }
    *out = v;
    return 0;
}

// ---- tests -------------------------------------------------------------------------

typedef int (*test_fn)(struct tpl_ctx *c, struct tpl_val v, const struct tpl_args *a, bool *out);

#define TEST_SIMPLE(fname, expr)                                                        \
    static int fname(struct tpl_ctx *c, struct tpl_val v, const struct tpl_args *a, bool *out) \
    {                                                                                   \
        (void)c;                                                                        \
        (void)a;                                                                        \
        *out = (expr);                                                                  \
        return 0;                                                                       \
    }

TEST_SIMPLE(t_defined, v.t != TV_UNDEF)
TEST_SIMPLE(t_undefined, v.t == TV_UNDEF)
TEST_SIMPLE(t_none, v.t == TV_NONE)
TEST_SIMPLE(t_boolean, v.t == TV_BOOL)
TEST_SIMPLE(t_true, v.t == TV_BOOL && v.b)
TEST_SIMPLE(t_false, v.t == TV_BOOL && !v.b)
TEST_SIMPLE(t_integer, v.t == TV_INT)
TEST_SIMPLE(t_float, v.t == TV_FLOAT)
TEST_SIMPLE(t_number, v.t == TV_INT || v.t == TV_FLOAT || v.t == TV_BOOL)
TEST_SIMPLE(t_string, v.t == TV_STR)
TEST_SIMPLE(t_mapping, v.t == TV_DICT)
TEST_SIMPLE(t_iterable, v.t == TV_STR || v.t == TV_LIST || v.t == TV_DICT || v.t == TV_UNDEF)
TEST_SIMPLE(t_sequence, v.t == TV_STR || v.t == TV_LIST || v.t == TV_DICT || v.t == TV_UNDEF)
TEST_SIMPLE(t_callable, v.t == TV_MACRO || v.t == TV_FUNC || v.t == TV_METHOD)

static int t_cmp(struct tpl_ctx *c, struct tpl_val v, const struct tpl_args *a, int op, bool *out)
{
    const struct tpl_val *o = tpl_arg(a, 0, NULL);
    if (!o)
        return tpl_error(c, OMNI_ERR_ARG, "test needs an argument");
    if (op == 0 || op == 1) {
        *out = tpl_equal(v, *o) == (op == 0);
        return 0;
    }
    int r;
    int rc = tpl_compare(c, v, *o, &r);
    *out = op == 2 ? r < 0 : op == 3 ? r <= 0 : op == 4 ? r > 0 : r >= 0;
    return rc;
}
static int t_eq(struct tpl_ctx *c, struct tpl_val v, const struct tpl_args *a, bool *o) { return t_cmp(c, v, a, 0, o); }
static int t_ne(struct tpl_ctx *c, struct tpl_val v, const struct tpl_args *a, bool *o) { return t_cmp(c, v, a, 1, o); }
static int t_lt(struct tpl_ctx *c, struct tpl_val v, const struct tpl_args *a, bool *o) { return t_cmp(c, v, a, 2, o); }
static int t_le(struct tpl_ctx *c, struct tpl_val v, const struct tpl_args *a, bool *o) { return t_cmp(c, v, a, 3, o); }
static int t_gt(struct tpl_ctx *c, struct tpl_val v, const struct tpl_args *a, bool *o) { return t_cmp(c, v, a, 4, o); }
static int t_ge(struct tpl_ctx *c, struct tpl_val v, const struct tpl_args *a, bool *o) { return t_cmp(c, v, a, 5, o); }

static int t_sameas(struct tpl_ctx *c, struct tpl_val v, const struct tpl_args *a, bool *out)
{
    const struct tpl_val *o = tpl_arg(a, 0, NULL);
    if (!o)
        return tpl_error(c, OMNI_ERR_ARG, "sameas needs an argument");
    *out = v.t == o->t && tpl_equal(v, *o);
    return 0;
}

static int t_in(struct tpl_ctx *c, struct tpl_val v, const struct tpl_args *a, bool *out)
{
    const struct tpl_val *seq = tpl_arg(a, 0, NULL);
    if (!seq)
        return tpl_error(c, OMNI_ERR_ARG, "in needs an argument");
    struct tpl_list *l;
    if (seq->t == TV_STR) {
        *out = v.t == TV_STR && (v.s.n == 0 || memmem(seq->s.p, seq->s.n, v.s.p, v.s.n));
        return 0;
    }
    if (seq->t == TV_DICT) {
        *out = tpl_dict_find(seq->d, v) != NULL;
        return 0;
    }
    int rc = tpl_iterable(c, *seq, &l);
    *out = false;
    for (size_t i = 0; !rc && i < l->n && !*out; i++)
        *out = tpl_equal(l->v[i], v);
    return rc;
}

static int t_odd_even(struct tpl_ctx *c, struct tpl_val v, bool odd, bool *out)
{
    if (v.t != TV_INT && v.t != TV_BOOL)
        return tpl_error(c, OMNI_ERR_ARG, "odd/even need an integer");
    int64_t i = v.t == TV_INT ? v.i : v.b;
    *out = (i % 2 != 0) == odd;
    return 0;
}
static int t_odd(struct tpl_ctx *c, struct tpl_val v, const struct tpl_args *a, bool *o) { (void)a; return t_odd_even(c, v, true, o); }
static int t_even(struct tpl_ctx *c, struct tpl_val v, const struct tpl_args *a, bool *o) { (void)a; return t_odd_even(c, v, false, o); }

static int t_divisibleby(struct tpl_ctx *c, struct tpl_val v, const struct tpl_args *a, bool *out)
{
    int64_t d = 0, x = 0;
    int rc = int_arg(c, tpl_arg(a, 0, "num"), 0, &d);
    if (!rc)
        rc = int_arg(c, &v, 0, &x);
    if (rc)
        return rc;
    if (d == 0)
        return tpl_error(c, OMNI_ERR_ARG, "integer division or modulo by zero");
    *out = x % d == 0;
    return 0;
}

static int t_lower_upper(struct tpl_ctx *c, struct tpl_val v, bool upper, bool *out)
{
    int rc = tpl_to_str(c, v, &v);
    bool cased = false, ok = true;
    for (size_t i = 0; !rc && i < v.s.n;) {
        size_t len;
        uint32_t cp = dec(v.s.p + i, v.s.n - i, &len);
        if (is_cased(cp)) {
            cased = true;
            ok &= upper ? to_upper(cp) == cp : to_lower(cp) == cp;
        }
        i += len;
    }
    *out = cased && ok;
    return rc;
}
static int t_lower(struct tpl_ctx *c, struct tpl_val v, const struct tpl_args *a, bool *o) { (void)a; return t_lower_upper(c, v, false, o); }
static int t_upper(struct tpl_ctx *c, struct tpl_val v, const struct tpl_args *a, bool *o) { (void)a; return t_lower_upper(c, v, true, o); }

static const struct {
    const char *name;
    test_fn fn;
} tests[] = {
    { "defined", t_defined }, { "undefined", t_undefined }, { "none", t_none },
    { "boolean", t_boolean }, { "true", t_true }, { "false", t_false },
    { "integer", t_integer }, { "float", t_float }, { "number", t_number },
    { "string", t_string }, { "mapping", t_mapping }, { "iterable", t_iterable },
    { "sequence", t_sequence }, { "callable", t_callable }, { "sameas", t_sameas },
    { "eq", t_eq }, { "equalto", t_eq }, { "==", t_eq }, { "ne", t_ne }, { "!=", t_ne },
    { "lt", t_lt }, { "lessthan", t_lt }, { "le", t_le }, { "gt", t_gt },
    { "greaterthan", t_gt }, { "ge", t_ge }, { "in", t_in }, { "odd", t_odd },
    { "even", t_even }, { "divisibleby", t_divisibleby }, { "lower", t_lower },
    { "upper", t_upper },
};

int tpl_test_find(const char *name)
{
    for (size_t i = 0; i < sizeof tests / sizeof tests[0]; i++)
        if (!strcmp(tests[i].name, name))
            return (int)i;
    return -1;
}

int tpl_test_apply(struct tpl_ctx *c, int id, struct tpl_val v, const struct tpl_args *a, bool *out)
{
    return tests[id].fn(c, v, a, out);
}

// ---- filters -----------------------------------------------------------------------

typedef int (*filter_fn)(struct tpl_ctx *c, struct tpl_val v, const struct tpl_args *a, struct tpl_val *out);

static int f_safe(struct tpl_ctx *c, struct tpl_val v, const struct tpl_args *a, struct tpl_val *out)
{
    (void)c; (void)a;
    *out = v;
    return 0;
}

static int f_string(struct tpl_ctx *c, struct tpl_val v, const struct tpl_args *a, struct tpl_val *out)
{
    (void)a;
    return tpl_to_str(c, v, out);
}

static int f_trim(struct tpl_ctx *c, struct tpl_val v, const struct tpl_args *a, struct tpl_val *out)
{
    return strip(c, v, tpl_arg(a, 0, "chars"), 3, out);
}

static int f_upper(struct tpl_ctx *c, struct tpl_val v, const struct tpl_args *a, struct tpl_val *o) { (void)a; return change_case(c, v, CASE_UPPER, o); }
static int f_lower(struct tpl_ctx *c, struct tpl_val v, const struct tpl_args *a, struct tpl_val *o) { (void)a; return change_case(c, v, CASE_LOWER, o); }
static int f_capitalize(struct tpl_ctx *c, struct tpl_val v, const struct tpl_args *a, struct tpl_val *o) { (void)a; return change_case(c, v, CASE_CAPITALIZE, o); }
static int f_title(struct tpl_ctx *c, struct tpl_val v, const struct tpl_args *a, struct tpl_val *o) { (void)a; return change_case(c, v, CASE_TITLE_FILTER, o); }

static int f_length(struct tpl_ctx *c, struct tpl_val v, const struct tpl_args *a, struct tpl_val *out)
{
    (void)a;
    int64_t n = tpl_length(v);
    if (n < 0)
        return tpl_error(c, OMNI_ERR_ARG, "object of type '%s' has no len()", tpl_type_name(v));
    *out = tpl_int(n);
    return 0;
}

static int f_tojson(struct tpl_ctx *c, struct tpl_val v, const struct tpl_args *a, struct tpl_val *out)
{
    /* transformers' tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False) */
    const struct tpl_val *ascii = tpl_arg(a, 0, "ensure_ascii"), *ind = tpl_arg(a, 1, "indent"),
                         *seps = tpl_arg(a, 2, "separators"), *sort = tpl_arg(a, 3, "sort_keys");
    int64_t indent = -1;
    if (ind && ind->t != TV_NONE) {
        int rc = int_arg(c, ind, -1, &indent);
        if (rc)
            return rc;
        if (indent < 0)
            indent = 0;
        if (indent > 64)
            return tpl_error(c, OMNI_ERR_LIMIT, "tojson: indent above 64");
    }
    const char *item_sep = indent >= 0 ? "," : ", ", *key_sep = ": ";
    if (seps && seps->t != TV_NONE) {
        if (seps->t != TV_LIST || seps->l->n != 2 || seps->l->v[0].t != TV_STR || seps->l->v[1].t != TV_STR)
            return tpl_error(c, OMNI_ERR_ARG, "tojson: separators must be a pair of strings");
        char *is = tpl_arena_strdup(&c->arena, seps->l->v[0].s.p, seps->l->v[0].s.n);
        char *ks = tpl_arena_strdup(&c->arena, seps->l->v[1].s.p, seps->l->v[1].s.n);
        if (!is || !ks)
            return TPL_NOMEM(c);
        item_sep = is;
        key_sep = ks;
    }
    struct tpl_sb b = { .max = c->lim.max_output_bytes };
    const struct tpl_json_fmt fmt = { (int)indent, item_sep, key_sep, ascii && tpl_truthy(*ascii),
                                      sort && tpl_truthy(*sort) };
    int rc = tpl_write_json(c, &b, v, &fmt, 0);
    if (rc) {
        tpl_sb_free(&b);
        return rc;
    }
    return tpl_str_sb(c, &b, out);
}

/* The inverse of tojson, as llama.cpp's and vLLM's template engines offer it
 * (DeepSeek V3.2's template parses tool-call arguments with it). */
static int f_from_json(struct tpl_ctx *c, struct tpl_val v, const struct tpl_args *a, struct tpl_val *out)
{
    (void)a;
    if (v.t != TV_STR)
        return tpl_error(c, OMNI_ERR_ARG, "from_json needs a string, not %s", tpl_type_name(v));
    char *json = tpl_arena_strdup(&c->arena, v.s.p, v.s.n);
    return json ? tpl_from_json(c, json, "from_json", out) : TPL_NOMEM(c);
}

static int f_replace(struct tpl_ctx *c, struct tpl_val v, const struct tpl_args *a, struct tpl_val *out)
{
    const struct tpl_val *old = tpl_arg(a, 0, "old"), *new = tpl_arg(a, 1, "new");
    int64_t count;
    int rc = tpl_to_str(c, v, &v);
    if (!rc)
        rc = int_arg(c, tpl_arg(a, 2, "count"), -1, &count);
    struct tpl_val o, n;
    if (!rc && (!old || !new))
        rc = tpl_error(c, OMNI_ERR_ARG, "replace needs old and new");
    if (!rc)
        rc = tpl_to_str(c, *old, &o);
    if (!rc)
        rc = tpl_to_str(c, *new, &n);
    return rc ? rc : replace(c, v, o, n, count, out);
}

/* Items of v, each mapped through attribute (NULL: as they are). */
static int items_of(struct tpl_ctx *c, struct tpl_val v, const struct tpl_val *attribute, struct tpl_list **out)
{
    struct tpl_list *l;
    int rc = tpl_iterable(c, v, &l);
    if (rc || !attribute || attribute->t == TV_NONE) {
        *out = l;
        return rc;
    }
    struct tpl_list *m = tpl_list_new(c, l->n);
    if (!m)
        return TPL_NOMEM(c);
    for (size_t i = 0; i < l->n; i++)
        if ((rc = get_path(c, l->v[i], *attribute, &m->v[i])))
            return rc;
    *out = m;
    return 0;
}

static int f_join(struct tpl_ctx *c, struct tpl_val v, const struct tpl_args *a, struct tpl_val *out)
{
    const struct tpl_val *d = tpl_arg(a, 0, "d");
    struct tpl_val sep = tpl_str("", 0);
    struct tpl_list *l;
    int rc = d ? tpl_to_str(c, *d, &sep) : 0;
    if (!rc)
        rc = items_of(c, v, tpl_arg(a, 1, "attribute"), &l);
    struct tpl_sb b = { .max = c->lim.max_output_bytes };
    for (size_t i = 0; !rc && i < l->n; i++) {
        if (i && tpl_sb_put(&b, sep.s.p, sep.s.n))
            rc = tpl_error(c, OMNI_ERR_LIMIT, "string longer than %zu bytes", c->lim.max_output_bytes);
        if (!rc)
            rc = tpl_write_str(c, &b, l->v[i]);
    }
    if (rc) {
        tpl_sb_free(&b);
        return rc;
    }
    return tpl_str_sb(c, &b, out);
}

static int f_default(struct tpl_ctx *c, struct tpl_val v, const struct tpl_args *a, struct tpl_val *out)
{
    (void)c;
    const struct tpl_val *d = tpl_arg(a, 0, "default_value"), *boolean = tpl_arg(a, 1, "boolean");
    bool use = v.t == TV_UNDEF || (boolean && tpl_truthy(*boolean) && !tpl_truthy(v));
    *out = use ? (d ? *d : tpl_str("", 0)) : v;
    return 0;
}

static int f_first(struct tpl_ctx *c, struct tpl_val v, const struct tpl_args *a, struct tpl_val *out)
{
    (void)a;
    struct tpl_list *l;
    int rc = tpl_iterable(c, v, &l);
    if (!rc)
        *out = l->n ? l->v[0] : tpl_undef("No first item, sequence was empty.");
    return rc;
}

static int f_last(struct tpl_ctx *c, struct tpl_val v, const struct tpl_args *a, struct tpl_val *out)
{
    (void)a;
    struct tpl_list *l;
    int rc = tpl_iterable(c, v, &l);
    if (!rc)
        *out = l->n ? l->v[l->n - 1] : tpl_undef("No last item, sequence was empty.");
    return rc;
}

static int dict_items(struct tpl_ctx *c, struct tpl_val v, struct tpl_val *out)
{
    size_t n = v.t == TV_DICT || v.t == TV_NS ? v.d->n : 0;
    struct tpl_list *l = tpl_list_new(c, n);
    if (!l)
        return TPL_NOMEM(c);
    for (size_t i = 0; i < n; i++) {
        struct tpl_list *pair = tpl_list_new(c, 2);
        if (!pair)
            return TPL_NOMEM(c);
        pair->tuple = true;
        pair->v[0] = v.d->k[i];
        pair->v[1] = v.d->v[i];
        l->v[i] = list_val(pair);
    }
    *out = list_val(l);
    return 0;
}

static int f_items(struct tpl_ctx *c, struct tpl_val v, const struct tpl_args *a, struct tpl_val *out)
{
    (void)a;
    if (v.t != TV_UNDEF && v.t != TV_DICT)
        return tpl_error(c, OMNI_ERR_ARG, "Can only get item pairs from a mapping.");
    return dict_items(c, v, out);
}

static int f_list(struct tpl_ctx *c, struct tpl_val v, const struct tpl_args *a, struct tpl_val *out)
{
    (void)a;
    struct tpl_list *l;
    int rc = tpl_iterable(c, v, &l);
    if (rc)
        return rc;
    struct tpl_list *m = tpl_list_new(c, l->n);
    if (!m)
        return TPL_NOMEM(c);
    memcpy(m->v, l->v, l->n * sizeof *m->v);
    *out = list_val(m);
    return 0;
}

/* select/reject/selectattr/rejectattr: keep items where the test (truthiness
 * when none is named) is want; attr items are read through the path first. */
/* jinja2's select/reject/map are generators that look at their input only
 * when it is truthy: none, undefined or "" give an empty sequence, even with
 * arguments that would not do (functionary v3.1 filters tools = none). */
static int empty_if_falsy(struct tpl_ctx *c, struct tpl_val v, struct tpl_val *out, bool *done)
{
    *done = !tpl_truthy(v);
    if (!*done)
        return 0;
    struct tpl_list *o = tpl_list_new(c, 0);
    if (!o)
        return TPL_NOMEM(c);
    o->n = 0;
    *out = list_val(o);
    return 0;
}

static int select_common(struct tpl_ctx *c, struct tpl_val v, const struct tpl_args *a, bool attr, bool want,
                         struct tpl_val *out)
{
    bool done;
    int rc = empty_if_falsy(c, v, out, &done);
    if (rc || done)
        return rc;
    struct tpl_list *l;
    rc = tpl_iterable(c, v, &l);
    if (rc)
        return rc;
    int k = 0;
    const struct tpl_val *path = NULL;
    if (attr && !(path = tpl_arg(a, k++, NULL)))
        return tpl_error(c, OMNI_ERR_ARG, "selectattr/rejectattr need an attribute");
    const struct tpl_val *tname = tpl_arg(a, k++, NULL);
    int test = -1;
    if (tname) {
        char name[32];
        if (tname->t != TV_STR || tname->s.n >= sizeof name)
            return tpl_error(c, OMNI_ERR_ARG, "test name must be a string");
        memcpy(name, tname->s.p, tname->s.n);
        name[tname->s.n] = 0;
        if ((test = tpl_test_find(name)) < 0)
            return tpl_error(c, OMNI_ERR_UNSUPPORTED, "no test named '%s'", name);
    }
    struct tpl_args rest = { .n = a->n > k ? a->n - k : 0, .v = a->v + (a->n > k ? k : a->n) };
    struct tpl_list *o = tpl_list_new(c, l->n);
    if (!o)
        return TPL_NOMEM(c);
    o->n = 0;
    for (size_t i = 0; i < l->n; i++) {
        struct tpl_val x = l->v[i];
        bool r;
        if (path && (rc = get_path(c, x, *path, &x)))
            return rc;
        if (test >= 0) {
            if ((rc = tpl_test_apply(c, test, x, &rest, &r)))
                return rc;
        } else
            r = tpl_truthy(x);
        if (r == want)
            o->v[o->n++] = l->v[i];
    }
    *out = list_val(o);
    return 0;
}
static int f_select(struct tpl_ctx *c, struct tpl_val v, const struct tpl_args *a, struct tpl_val *o) { return select_common(c, v, a, false, true, o); }
static int f_reject(struct tpl_ctx *c, struct tpl_val v, const struct tpl_args *a, struct tpl_val *o) { return select_common(c, v, a, false, false, o); }
static int f_selectattr(struct tpl_ctx *c, struct tpl_val v, const struct tpl_args *a, struct tpl_val *o) { return select_common(c, v, a, true, true, o); }
static int f_rejectattr(struct tpl_ctx *c, struct tpl_val v, const struct tpl_args *a, struct tpl_val *o) { return select_common(c, v, a, true, false, o); }

static int f_map(struct tpl_ctx *c, struct tpl_val v, const struct tpl_args *a, struct tpl_val *out)
{
    bool done;
    int rc = empty_if_falsy(c, v, out, &done);
    if (rc || done)
        return rc;
    struct tpl_list *l;
    rc = tpl_iterable(c, v, &l);
    if (rc)
        return rc;
    struct tpl_list *o = tpl_list_new(c, l->n);
    if (!o)
        return TPL_NOMEM(c);
    const struct tpl_val *attr = tpl_arg(a, -1, "attribute");
    if (attr) {
        const struct tpl_val *dflt = tpl_arg(a, -1, "default");
        for (size_t i = 0; i < l->n; i++) {
            if ((rc = get_path(c, l->v[i], *attr, &o->v[i])))
                return rc;
            if (dflt && o->v[i].t == TV_UNDEF)
                o->v[i] = *dflt;
        }
    } else {
        const struct tpl_val *fname = tpl_arg(a, 0, NULL);
        char name[32];
        if (!fname || fname->t != TV_STR || fname->s.n >= sizeof name)
            return tpl_error(c, OMNI_ERR_ARG, "map needs a filter name or attribute=");
        memcpy(name, fname->s.p, fname->s.n);
        name[fname->s.n] = 0;
        int f = tpl_filter_find(name);
        if (f < 0)
            return tpl_error(c, OMNI_ERR_UNSUPPORTED, "no filter named '%s'", name);
        struct tpl_args rest = *a;
        rest.n--;
        rest.v++;
        for (size_t i = 0; i < l->n; i++)
            if ((rc = tpl_filter_apply(c, f, l->v[i], &rest, &o->v[i])))
                return rc;
    }
    *out = list_val(o);
    return 0;
}

/* A whole string (trailing whitespace allowed) as a number, as Python's
 * float() reads it for the int and float filters. */
static bool str_to_double(const char *buf, double *out)
{
    char *end;
    double x = strtod(buf, &end);
    while (*end == ' ' || *end == '\t' || *end == '\n')
        end++;
    if (end == buf || *end)
        return false;
    *out = x;
    return true;
}

static int f_int(struct tpl_ctx *c, struct tpl_val v, const struct tpl_args *a, struct tpl_val *out)
{
    int64_t dflt, base;
    int rc = int_arg(c, tpl_arg(a, 0, "default"), 0, &dflt);
    if (!rc)
        rc = int_arg(c, tpl_arg(a, 1, "base"), 10, &base);
    if (rc)
        return rc;
    switch (v.t) {
    case TV_INT: *out = v; return 0;
    case TV_BOOL: *out = tpl_int(v.b); return 0;
    case TV_FLOAT:
        *out = isfinite(v.f) && fabs(v.f) < 9.2e18 ? tpl_int((int64_t)v.f) : tpl_int(dflt);
        return 0;
    case TV_STR: {
        char buf[64];
        size_t n = 0;
        for (size_t i = 0; i < v.s.n && n < sizeof buf - 1; i++)
            if (v.s.p[i] != '_')
                buf[n++] = v.s.p[i];
        buf[n] = 0;
        char *end;
        long long i = strtoll(buf, &end, (int)base);
        while (*end == ' ' || *end == '\t' || *end == '\n')
            end++;
        if (end != buf && !*end && n == v.s.n) {
            *out = tpl_int(i);
            return 0;
        }
        double d;
        *out = str_to_double(buf, &d) && isfinite(d) && fabs(d) < 9.2e18 ? tpl_int((int64_t)d)
                                                                          : tpl_int(dflt);
        return 0;
    }
    default: *out = tpl_int(dflt); return 0;
    }
}

static int f_float(struct tpl_ctx *c, struct tpl_val v, const struct tpl_args *a, struct tpl_val *out)
{
    (void)c;
    const struct tpl_val *d = tpl_arg(a, 0, "default");
    double dflt = d && d->t == TV_FLOAT ? d->f : d && d->t == TV_INT ? (double)d->i : 0.0;
    switch (v.t) {
    case TV_INT: *out = tpl_float((double)v.i); return 0;
    case TV_BOOL: *out = tpl_float(v.b); return 0;
    case TV_FLOAT: *out = v; return 0;
    case TV_STR: {
        char buf[64];
        size_t n = v.s.n < sizeof buf - 1 ? v.s.n : sizeof buf - 1;
        memcpy(buf, v.s.p, n);
        buf[n] = 0;
        double x;
        *out = tpl_float(str_to_double(buf, &x) ? x : dflt);
        return 0;
    }
    default: *out = tpl_float(dflt); return 0;
    }
}

static int f_abs(struct tpl_ctx *c, struct tpl_val v, const struct tpl_args *a, struct tpl_val *out)
{
    (void)a;
    if (v.t == TV_INT && v.i != INT64_MIN)
        *out = tpl_int(v.i < 0 ? -v.i : v.i);
    else if (v.t == TV_BOOL)
        *out = tpl_int(v.b);
    else if (v.t == TV_FLOAT)
        *out = tpl_float(fabs(v.f));
    else
        return tpl_error(c, OMNI_ERR_ARG, "bad operand type for abs(): '%s'", tpl_type_name(v));
    return 0;
}

static int f_round(struct tpl_ctx *c, struct tpl_val v, const struct tpl_args *a, struct tpl_val *out)
{
    int64_t prec;
    int rc = int_arg(c, tpl_arg(a, 0, "precision"), 0, &prec);
    if (rc)
        return rc;
    const struct tpl_val *m = tpl_arg(a, 1, "method");
    if (v.t != TV_INT && v.t != TV_FLOAT && v.t != TV_BOOL)
        return tpl_error(c, OMNI_ERR_ARG, "round needs a number, not '%s'", tpl_type_name(v));
    double x = v.t == TV_FLOAT ? v.f : v.t == TV_INT ? (double)v.i : v.b;
    double scale = pow(10.0, (double)prec);
    if (!m || (m->t == TV_STR && m->s.n == 6 && !memcmp(m->s.p, "common", 6)))
        x = nearbyint(x * scale) / scale; /* Python's round(): half to even */
    else if (m->t == TV_STR && m->s.n == 4 && !memcmp(m->s.p, "ceil", 4))
        x = ceil(x * scale) / scale;
    else if (m->t == TV_STR && m->s.n == 5 && !memcmp(m->s.p, "floor", 5))
        x = floor(x * scale) / scale;
    else
        return tpl_error(c, OMNI_ERR_ARG, "method must be common, ceil or floor");
    *out = tpl_float(x);
    return 0;
}

static int f_reverse(struct tpl_ctx *c, struct tpl_val v, const struct tpl_args *a, struct tpl_val *out)
{
    (void)a;
    struct tpl_list *l;
    int rc = tpl_iterable(c, v, &l);
    if (rc)
        return rc;
    struct tpl_list *o = tpl_list_new(c, l->n);
    if (!o)
        return TPL_NOMEM(c);
    for (size_t i = 0; i < l->n; i++)
        o->v[i] = l->v[l->n - 1 - i];
    if (v.t != TV_STR) {
        *out = list_val(o);
        return 0;
    }
    struct tpl_sb b = { .max = c->lim.max_output_bytes };
    for (size_t i = 0; i < o->n; i++)
        if (tpl_sb_put(&b, o->v[i].s.p, o->v[i].s.n)) {
            tpl_sb_free(&b);
            return TPL_NOMEM(c);
        }
    return tpl_str_sb(c, &b, out);
}

/* Sort key: attribute path, then lowercased strings unless case_sensitive. */
static int sort_key(struct tpl_ctx *c, struct tpl_val v, const struct tpl_val *attr, bool cs, struct tpl_val *out)
{
    int rc = 0;
    if (attr && attr->t != TV_NONE && (rc = get_path(c, v, *attr, &v)))
        return rc;
    if (!cs && v.t == TV_STR)
        return change_case(c, v, CASE_LOWER, out);
    *out = v;
    return 0;
}

/* Stable merge sort of l by keys; reverse as Python's sorted(reverse=True). */
static int sort_by_keys(struct tpl_ctx *c, struct tpl_list *l, struct tpl_val *keys, bool reverse)
{
    size_t n = l->n;
    struct tpl_val *tv = tpl_arena_alloc(&c->arena, n * sizeof *tv + 1), *tk = tpl_arena_alloc(&c->arena, n * sizeof *tk + 1);
    if (!tv || !tk)
        return TPL_NOMEM(c);
    for (size_t w = 1; w < n; w *= 2) {
        for (size_t lo = 0; lo < n; lo += 2 * w) {
            size_t mid = lo + w < n ? lo + w : n, hi = lo + 2 * w < n ? lo + 2 * w : n;
            size_t i = lo, j = mid, k = lo;
            while (i < mid && j < hi) {
                int r;
                int rc = tpl_compare(c, keys[j], keys[i], &r);
                if (rc)
                    return rc;
                bool take_right = reverse ? r > 0 : r < 0;
                size_t s = take_right ? j++ : i++;
                tv[k] = l->v[s];
                tk[k++] = keys[s];
            }
            for (; i < mid; i++, k++) { tv[k] = l->v[i]; tk[k] = keys[i]; }
            for (; j < hi; j++, k++) { tv[k] = l->v[j]; tk[k] = keys[j]; }
        }
        memcpy(l->v, tv, n * sizeof *tv);
        memcpy(keys, tk, n * sizeof *tk);
    }
    return 0;
}

static int f_sort(struct tpl_ctx *c, struct tpl_val v, const struct tpl_args *a, struct tpl_val *out)
{
    const struct tpl_val *rev = tpl_arg(a, 0, "reverse"), *cs = tpl_arg(a, 1, "case_sensitive"),
                         *attr = tpl_arg(a, 2, "attribute");
    struct tpl_val lv;
    int rc = f_list(c, v, a, &lv);
    if (rc)
        return rc;
    struct tpl_val *keys = tpl_arena_alloc(&c->arena, lv.l->n * sizeof *keys + 1);
    if (!keys)
        return TPL_NOMEM(c);
    for (size_t i = 0; i < lv.l->n; i++)
        if ((rc = sort_key(c, lv.l->v[i], attr, cs && tpl_truthy(*cs), &keys[i])))
            return rc;
    if ((rc = sort_by_keys(c, lv.l, keys, rev && tpl_truthy(*rev))))
        return rc;
    *out = lv;
    return 0;
}

static int f_dictsort(struct tpl_ctx *c, struct tpl_val v, const struct tpl_args *a, struct tpl_val *out)
{
    const struct tpl_val *cs = tpl_arg(a, 0, "case_sensitive"), *by = tpl_arg(a, 1, "by"),
                         *rev = tpl_arg(a, 2, "reverse");
    if (v.t != TV_DICT)
        return tpl_error(c, OMNI_ERR_ARG, "dictsort needs a mapping");
    bool by_value = by && by->t == TV_STR && by->s.n == 5 && !memcmp(by->s.p, "value", 5);
    struct tpl_val items;
    int rc = dict_items(c, v, &items);
    if (rc)
        return rc;
    struct tpl_val *keys = tpl_arena_alloc(&c->arena, items.l->n * sizeof *keys + 1);
    if (!keys)
        return TPL_NOMEM(c);
    for (size_t i = 0; i < items.l->n; i++)
        if ((rc = sort_key(c, items.l->v[i].l->v[by_value], NULL, cs && tpl_truthy(*cs), &keys[i])))
            return rc;
    if ((rc = sort_by_keys(c, items.l, keys, rev && tpl_truthy(*rev))))
        return rc;
    *out = items;
    return 0;
}

static int f_unique(struct tpl_ctx *c, struct tpl_val v, const struct tpl_args *a, struct tpl_val *out)
{
    const struct tpl_val *cs = tpl_arg(a, 0, "case_sensitive"), *attr = tpl_arg(a, 1, "attribute");
    struct tpl_list *l;
    int rc = tpl_iterable(c, v, &l);
    if (rc)
        return rc;
    struct tpl_list *o = tpl_list_new(c, l->n);
    struct tpl_val *seen = tpl_arena_alloc(&c->arena, l->n * sizeof *seen + 1);
    if (!o || !seen)
        return TPL_NOMEM(c);
    o->n = 0;
    for (size_t i = 0; i < l->n; i++) {
        struct tpl_val k;
        if ((rc = sort_key(c, l->v[i], attr, cs && tpl_truthy(*cs), &k)))
            return rc;
        bool dup = false;
        for (size_t j = 0; j < o->n && !dup; j++)
            dup = tpl_equal(seen[j], k);
        if (!dup) {
            seen[o->n] = k;
            o->v[o->n++] = l->v[i];
        }
    }
    *out = list_val(o);
    return 0;
}

static int minmax(struct tpl_ctx *c, struct tpl_val v, const struct tpl_args *a, bool max, struct tpl_val *out)
{
    const struct tpl_val *cs = tpl_arg(a, 0, "case_sensitive"), *attr = tpl_arg(a, 1, "attribute");
    struct tpl_list *l;
    int rc = tpl_iterable(c, v, &l);
    if (rc)
        return rc;
    if (!l->n) {
        *out = tpl_undef(max ? "No aggregated item, sequence was empty." : "No aggregated item, sequence was empty.");
        return 0;
    }
    struct tpl_val best, bk;
    for (size_t i = 0; i < l->n; i++) {
        struct tpl_val k;
        int r = 0;
        if ((rc = sort_key(c, l->v[i], attr, cs && tpl_truthy(*cs), &k)))
            return rc;
        if (i && (rc = tpl_compare(c, k, bk, &r)))
            return rc;
        if (!i || (max ? r > 0 : r < 0)) {
            best = l->v[i];
            bk = k;
        }
    }
    *out = best;
    return 0;
}
static int f_max(struct tpl_ctx *c, struct tpl_val v, const struct tpl_args *a, struct tpl_val *o) { return minmax(c, v, a, true, o); }
static int f_min(struct tpl_ctx *c, struct tpl_val v, const struct tpl_args *a, struct tpl_val *o) { return minmax(c, v, a, false, o); }

static int f_sum(struct tpl_ctx *c, struct tpl_val v, const struct tpl_args *a, struct tpl_val *out)
{
    const struct tpl_val *start = tpl_arg(a, 1, "start");
    struct tpl_list *l;
    int rc = items_of(c, v, tpl_arg(a, 0, "attribute"), &l);
    if (rc)
        return rc;
    struct tpl_val acc = start ? *start : tpl_int(0);
    for (size_t i = 0; i < l->n; i++) {
        struct tpl_val x = l->v[i];
        if ((acc.t != TV_INT && acc.t != TV_FLOAT) || (x.t != TV_INT && x.t != TV_FLOAT && x.t != TV_BOOL))
            return tpl_error(c, OMNI_ERR_ARG, "sum needs numbers");
        if (acc.t == TV_INT && x.t != TV_FLOAT) {
            int64_t y = x.t == TV_INT ? x.i : x.b;
            if (__builtin_add_overflow(acc.i, y, &acc.i))
                return tpl_error(c, OMNI_ERR_LIMIT, "integer overflow");
        } else
            acc = tpl_float((acc.t == TV_FLOAT ? acc.f : (double)acc.i) + (x.t == TV_FLOAT ? x.f : x.t == TV_INT ? (double)x.i : x.b));
    }
    *out = acc;
    return 0;
}

static int f_indent(struct tpl_ctx *c, struct tpl_val v, const struct tpl_args *a, struct tpl_val *out)
{
    const struct tpl_val *w = tpl_arg(a, 0, "width"), *first = tpl_arg(a, 1, "first"), *blank = tpl_arg(a, 2, "blank");
    struct tpl_val ind;
    int rc = tpl_to_str(c, v, &v);
    if (rc)
        return rc;
    if (w && w->t == TV_STR)
        ind = *w;
    else {
        int64_t n;
        if ((rc = int_arg(c, w, 4, &n)))
            return rc;
        if (n < 0)
            n = 0;
        if (n > 256)
            return tpl_error(c, OMNI_ERR_LIMIT, "indent width above 256");
        char *sp = tpl_arena_alloc(&c->arena, (size_t)n + 1);
        if (!sp)
            return TPL_NOMEM(c);
        memset(sp, ' ', (size_t)n);
        ind = tpl_str(sp, (size_t)n);
    }
    /* jinja2: (s + "\n").splitlines(), the first line unindented unless first=True,
     * blank lines indented only with blank=True. */
    struct tpl_sb b = { .max = c->lim.max_output_bytes };
    bool bl = blank && tpl_truthy(*blank);
    if (first && tpl_truthy(*first))
        rc = tpl_sb_put(&b, ind.s.p, ind.s.n);
    size_t i = 0, line = 0;
    while (!rc && i < v.s.n + 1) {
        const char *nl = memchr(v.s.p + i, '\n', v.s.n - i);
        size_t e = nl ? (size_t)(nl - v.s.p) : v.s.n;
        if (!nl && e == i && line > 0)
            break; /* the "\n" added before splitlines ends the last line */
        if (line > 0) {
            rc = tpl_sb_putc(&b, '\n');
            if (!rc && (bl || e > i))
                rc = tpl_sb_put(&b, ind.s.p, ind.s.n);
        }
        if (!rc)
            rc = tpl_sb_put(&b, v.s.p + i, e - i);
        line++;
        i = e + 1;
        if (!nl)
            break;
    }
    if (rc) {
        tpl_sb_free(&b);
        return tpl_error(c, OMNI_ERR_LIMIT, "string longer than %zu bytes", c->lim.max_output_bytes);
    }
    return tpl_str_sb(c, &b, out);
}

static const struct {
    const char *name;
    filter_fn fn;
} filters[] = {
    { "abs", f_abs }, { "capitalize", f_capitalize }, { "count", f_length }, { "d", f_default },
    { "default", f_default }, { "dictsort", f_dictsort }, { "first", f_first }, { "float", f_float },
    { "from_json", f_from_json },
    { "indent", f_indent }, { "int", f_int }, { "items", f_items }, { "join", f_join },
    { "last", f_last }, { "length", f_length }, { "list", f_list }, { "lower", f_lower },
    { "map", f_map }, { "max", f_max }, { "min", f_min }, { "reject", f_reject },
    { "rejectattr", f_rejectattr }, { "replace", f_replace }, { "reverse", f_reverse },
    { "round", f_round }, { "safe", f_safe }, { "select", f_select }, { "selectattr", f_selectattr },
    { "sort", f_sort }, { "string", f_string }, { "sum", f_sum }, { "title", f_title },
    { "tojson", f_tojson }, { "trim", f_trim }, { "unique", f_unique }, { "upper", f_upper },
};

int tpl_filter_find(const char *name)
{
    for (size_t i = 0; i < sizeof filters / sizeof filters[0]; i++)
        if (!strcmp(filters[i].name, name))
            return (int)i;
    return -1;
}

int tpl_filter_apply(struct tpl_ctx *c, int id, struct tpl_val v, const struct tpl_args *a, struct tpl_val *out)
{
    return filters[id].fn(c, v, a, out);
}

// ---- methods -------------------------------------------------------------------------

static const char *const str_methods[] = {
    "startswith", "endswith", "split", "rsplit", "strip", "lstrip", "rstrip", "title", "upper",
    "lower", "capitalize", "replace", "format", "find", "count", "join", "isdigit", "isalpha",
    "isalnum", "isspace", "islower", "isupper", NULL,
};
static const char *const dict_methods[] = { "items", "keys", "values", "get", NULL };
static const char *const list_methods[] = { "index", "count", NULL };

static bool in_list(const char *const *names, const char *name)
{
    for (; *names; names++)
        if (!strcmp(*names, name))
            return true;
    return false;
}

bool tpl_has_method(struct tpl_val self, const char *name)
{
    switch (self.t) {
    case TV_STR: return in_list(str_methods, name);
    case TV_DICT: return in_list(dict_methods, name);
    case TV_LIST: return in_list(list_methods, name);
    default: return false;
    }
}

static bool affix_match(struct tpl_val s, struct tpl_val x, bool end)
{
    if (x.t != TV_STR || x.s.n > s.s.n)
        return false;
    return !memcmp(s.s.p + (end ? s.s.n - x.s.n : 0), x.s.p, x.s.n);
}

/* "{} {0} {name}" with {{ and }}; format specs and conversions are not supported. */
static int str_format(struct tpl_ctx *c, struct tpl_val s, const struct tpl_args *a, struct tpl_val *out)
{
    struct tpl_sb b = { .max = c->lim.max_output_bytes };
    int rc = 0, auto_idx = 0;
    for (size_t i = 0; !rc && i < s.s.n; i++) {
        char ch = s.s.p[i];
        if ((ch == '{' || ch == '}') && i + 1 < s.s.n && s.s.p[i + 1] == ch) {
            rc = tpl_sb_putc(&b, ch);
            i++;
            continue;
        }
        if (ch != '{') {
            rc = ch == '}' ? tpl_error(c, OMNI_ERR_ARG, "Single '}' encountered in format string") : tpl_sb_putc(&b, ch);
            continue;
        }
        const char *close = memchr(s.s.p + i, '}', s.s.n - i);
        if (!close) {
            rc = tpl_error(c, OMNI_ERR_ARG, "Single '{' encountered in format string");
            break;
        }
        char field[64];
        size_t fl = (size_t)(close - s.s.p) - i - 1;
        if (fl >= sizeof field || memchr(s.s.p + i + 1, ':', fl) || memchr(s.s.p + i + 1, '!', fl)) {
            rc = tpl_error(c, OMNI_ERR_UNSUPPORTED, "format: specs and conversions are not supported");
            break;
        }
        memcpy(field, s.s.p + i + 1, fl);
        field[fl] = 0;
        const struct tpl_val *v;
        if (fl == 0)
            v = tpl_arg(a, auto_idx++, NULL);
        else if (field[0] >= '0' && field[0] <= '9')
            v = tpl_arg(a, atoi(field), NULL);
        else
            v = tpl_arg(a, -1, field);
        if (!v) {
            rc = tpl_error(c, OMNI_ERR_ARG, "format: no argument for '{%s}'", field);
            break;
        }
        rc = tpl_write_str(c, &b, *v);
        i = (size_t)(close - s.s.p);
    }
    if (rc) {
        tpl_sb_free(&b);
        return rc < 0 && rc != OMNI_ERR_LIMIT && rc != OMNI_ERR_NOMEM ? rc : tpl_error(c, OMNI_ERR_LIMIT, "format result too long");
    }
    return tpl_str_sb(c, &b, out);
}

static int char_class(struct tpl_val s, int kind)
{
    if (!s.s.n)
        return 0;
    bool cased = false, ok = true;
    for (size_t i = 0; i < s.s.n; i++) {
        unsigned char ch = (unsigned char)s.s.p[i];
        bool digit = ch >= '0' && ch <= '9', alpha = (ch | 32) >= 'a' && (ch | 32) <= 'z';
        switch (kind) {
        case 0: ok &= digit; break;
        case 1: ok &= alpha || ch >= 0x80; break;
        case 2: ok &= alpha || digit || ch >= 0x80; break;
        case 3: ok &= is_space_cp(ch); break;
        case 4: if (alpha) { cased = true; ok &= ch >= 'a'; } break;
        case 5: if (alpha) { cased = true; ok &= ch <= 'Z'; } break;
        }
    }
    return ok && (kind < 4 || cased);
}

static int str_method(struct tpl_ctx *c, struct tpl_val s, const char *m, const struct tpl_args *a, struct tpl_val *out)
{
    const struct tpl_val *a0 = tpl_arg(a, 0, NULL), *a1 = tpl_arg(a, 1, NULL);
    int rc = 0;
    if (!strcmp(m, "startswith") || !strcmp(m, "endswith")) {
        bool end = m[0] == 'e', r = false;
        if (!a0)
            return tpl_error(c, OMNI_ERR_ARG, "%s needs an argument", m);
        if (a0->t == TV_LIST) {
            for (size_t i = 0; i < a0->l->n && !r; i++)
                r = affix_match(s, a0->l->v[i], end);
        } else if ((rc = need_str(c, a0, m)))
            return rc;
        else
            r = affix_match(s, *a0, end);
        *out = tpl_bool(r);
        return 0;
    }
    if (!strcmp(m, "split") || !strcmp(m, "rsplit")) {
        int64_t maxsplit;
        if ((rc = int_arg(c, tpl_arg(a, 1, "maxsplit"), -1, &maxsplit)))
            return rc;
        return split(c, s, tpl_arg(a, 0, "sep"), maxsplit, m[0] == 'r', out);
    }
    if (!strcmp(m, "strip")) return strip(c, s, a0, 3, out);
    if (!strcmp(m, "lstrip")) return strip(c, s, a0, 1, out);
    if (!strcmp(m, "rstrip")) return strip(c, s, a0, 2, out);
    if (!strcmp(m, "title")) return change_case(c, s, CASE_TITLE_METHOD, out);
    if (!strcmp(m, "upper")) return change_case(c, s, CASE_UPPER, out);
    if (!strcmp(m, "lower")) return change_case(c, s, CASE_LOWER, out);
    if (!strcmp(m, "capitalize")) return change_case(c, s, CASE_CAPITALIZE, out);
    if (!strcmp(m, "replace")) {
        int64_t count;
        if ((rc = need_str(c, a0, "replace old")) || (rc = need_str(c, a1, "replace new")) ||
            (rc = int_arg(c, tpl_arg(a, 2, NULL), -1, &count)))
            return rc;
        return replace(c, s, *a0, *a1, count, out);
    }
    if (!strcmp(m, "format")) return str_format(c, s, a, out);
    if (!strcmp(m, "find") || !strcmp(m, "count")) {
        if ((rc = need_str(c, a0, m)))
            return rc;
        if (m[0] == 'f') {
            const char *hit = memmem(s.s.p, s.s.n, a0->s.p, a0->s.n);
            *out = tpl_int(hit ? tpl_length(tpl_str(s.s.p, (size_t)(hit - s.s.p))) : -1);
        } else {
            int64_t n = 0;
            if (!a0->s.n)
                n = tpl_length(s) + 1;
            else
                for (const char *p = s.s.p, *e = s.s.p + s.s.n; (p = memmem(p, (size_t)(e - p), a0->s.p, a0->s.n)); p += a0->s.n)
                    n++;
            *out = tpl_int(n);
        }
        return 0;
    }
    if (!strcmp(m, "join")) {
        struct tpl_list *l;
        if (!a0)
            return tpl_error(c, OMNI_ERR_ARG, "join needs an argument");
        if ((rc = tpl_iterable(c, *a0, &l)))
            return rc;
        struct tpl_sb b = { .max = c->lim.max_output_bytes };
        for (size_t i = 0; !rc && i < l->n; i++) {
            if (l->v[i].t != TV_STR)
                rc = tpl_error(c, OMNI_ERR_ARG, "sequence item %zu: expected str instance, %s found", i,
                               tpl_type_name(l->v[i]));
            else if ((i && tpl_sb_put(&b, s.s.p, s.s.n)) || tpl_sb_put(&b, l->v[i].s.p, l->v[i].s.n))
                rc = tpl_error(c, OMNI_ERR_LIMIT, "string longer than %zu bytes", c->lim.max_output_bytes);
        }
        if (rc) {
            tpl_sb_free(&b);
            return rc;
        }
        return tpl_str_sb(c, &b, out);
    }
    static const char *const classes[] = { "isdigit", "isalpha", "isalnum", "isspace", "islower", "isupper" };
    for (int k = 0; k < 6; k++)
        if (!strcmp(m, classes[k])) {
            *out = tpl_bool(char_class(s, k));
            return 0;
        }
    return tpl_error(c, OMNI_ERR_UNSUPPORTED, "str has no method '%s'", m);
}

int tpl_method_call(struct tpl_ctx *c, const struct tpl_method *m, const struct tpl_args *a, struct tpl_val *out)
{
    struct tpl_val s = m->self;
    const struct tpl_val *a0 = tpl_arg(a, 0, NULL);
    if (s.t == TV_STR)
        return str_method(c, s, m->name, a, out);
    if (s.t == TV_DICT) {
        if (!strcmp(m->name, "items"))
            return dict_items(c, s, out);
        if (!strcmp(m->name, "keys") || !strcmp(m->name, "values")) {
            struct tpl_list *l = tpl_list_new(c, s.d->n);
            if (!l)
                return TPL_NOMEM(c);
            for (size_t i = 0; i < s.d->n; i++)
                l->v[i] = m->name[0] == 'k' ? s.d->k[i] : s.d->v[i];
            *out = list_val(l);
            return 0;
        }
        if (!strcmp(m->name, "get")) {
            if (!a0)
                return tpl_error(c, OMNI_ERR_ARG, "get expected at least 1 argument");
            const struct tpl_val *v = tpl_dict_find(s.d, *a0), *d = tpl_arg(a, 1, NULL);
            *out = v ? *v : d ? *d : tpl_none();
            return 0;
        }
    }
    if (s.t == TV_LIST && a0) {
        int64_t n = 0, at = -1;
        for (size_t i = 0; i < s.l->n; i++)
            if (tpl_equal(s.l->v[i], *a0)) {
                n++;
                if (at < 0)
                    at = (int64_t)i;
            }
        if (!strcmp(m->name, "count")) {
            *out = tpl_int(n);
            return 0;
        }
        if (at < 0)
            return tpl_error(c, OMNI_ERR_ARG, "value is not in list");
        *out = tpl_int(at);
        return 0;
    }
    if (s.t == TV_LOOP) {
        if (!a->n)
            return tpl_error(c, OMNI_ERR_ARG, "no items for cycling given");
        *out = a->v[s.loop->index0 % (size_t)a->n];
        return 0;
    }
    return tpl_error(c, OMNI_ERR_ARG, "bad call of method '%s'", m->name);
}

// ---- globals ---------------------------------------------------------------------------

enum { G_RANGE, G_NAMESPACE, G_DICT, G_RAISE, G_STRFTIME, G_COUNT };
void tpl_clock(struct tm *out)
{
    /* The local clock, as transformers; SOURCE_DATE_EPOCH fixes it, in UTC. */
    time_t now = time(NULL);
    const char *epoch = getenv("SOURCE_DATE_EPOCH");
    char *end = NULL;
    long long fixed = epoch && *epoch ? strtoll(epoch, &end, 10) : 0;
    if (end && !*end && fixed >= 0) {
        now = (time_t)fixed;
        gmtime_r(&now, out);
    } else {
        localtime_r(&now, out);
    }
}

static const char *const globals[G_COUNT] = { "range", "namespace", "dict", "raise_exception", "strftime_now" };

int tpl_global_find(const char *name)
{
    for (int i = 0; i < G_COUNT; i++)
        if (!strcmp(globals[i], name))
            return i;
    return -1;
}

int tpl_global_call(struct tpl_ctx *c, int fn, const struct tpl_args *a, struct tpl_val *out)
{
    int rc = 0;
    switch (fn) {
    case G_RANGE: {
        int64_t start = 0, stop, step = 1;
        if (a->n == 1)
            rc = int_arg(c, &a->v[0], 0, &stop);
        else if (a->n == 2 || a->n == 3) {
            rc = int_arg(c, &a->v[0], 0, &start);
            if (!rc)
                rc = int_arg(c, &a->v[1], 0, &stop);
            if (!rc && a->n == 3)
                rc = int_arg(c, &a->v[2], 1, &step);
        } else
            return tpl_error(c, OMNI_ERR_ARG, "range expected 1 to 3 arguments, got %d", a->n);
        if (rc)
            return rc;
        if (step == 0)
            return tpl_error(c, OMNI_ERR_ARG, "range() arg 3 must not be zero");
        double count = step > 0 ? (stop > start ? ((double)stop - (double)start) / (double)step : 0)
                                : (start > stop ? ((double)start - (double)stop) / (double)-step : 0);
        count = ceil(count);
        if (count > (double)c->lim.max_loop_iterations)
            return tpl_error(c, OMNI_ERR_LIMIT, "range of %.0f items is over the loop limit", count);
        struct tpl_list *l = tpl_list_new(c, (size_t)count);
        if (!l)
            return TPL_NOMEM(c);
        for (size_t i = 0; i < l->n; i++)
            l->v[i] = tpl_int(start + (int64_t)i * step);
        *out = list_val(l);
        return 0;
    }
    case G_NAMESPACE: case G_DICT: {
        struct tpl_dict *d = tpl_dict_new(c);
        if (!d)
            return TPL_NOMEM(c);
        for (int i = 0; i < a->n && !rc; i++) {
            if (a->v[i].t != TV_DICT)
                return tpl_error(c, OMNI_ERR_ARG, "%s() takes mappings and keyword arguments", globals[fn]);
            for (size_t k = 0; k < a->v[i].d->n && !rc; k++)
                rc = tpl_dict_set(c, d, a->v[i].d->k[k], a->v[i].d->v[k]);
        }
        for (int i = 0; i < a->nkw && !rc; i++)
            rc = tpl_dict_set(c, d, tpl_str(a->kwname[i], strlen(a->kwname[i])), a->kw[i]);
        *out = (struct tpl_val){ .t = fn == G_NAMESPACE ? TV_NS : TV_DICT, .d = d };
        return rc;
    }
    case G_RAISE: {
        /* The template's own message, word for word (no line prefix). */
        struct tpl_val msg = tpl_str("", 0);
        if (a->n && (rc = tpl_to_str(c, a->v[0], &msg)))
            return rc;
        return omni_fail(c->err, c->errlen, OMNI_ERR_ARG, "%.*s", (int)msg.s.n, msg.s.p);
    }
    case G_STRFTIME: {
        struct tpl_val f;
        if (!a->n || (rc = tpl_to_str(c, a->v[0], &f)))
            return rc ? rc : tpl_error(c, OMNI_ERR_ARG, "strftime_now needs a format");
        char fmt[128], buf[256];
        if (f.s.n >= sizeof fmt)
            return tpl_error(c, OMNI_ERR_LIMIT, "strftime_now: format too long");
        memcpy(fmt, f.s.p, f.s.n);
        fmt[f.s.n] = 0;
        struct tm tm;
        tpl_clock(&tm);
        size_t n = strftime(buf, sizeof buf, fmt, &tm);
        return tpl_str_new(c, buf, n, out);
    }
    }
    return tpl_error(c, OMNI_ERR_UNSUPPORTED, "unknown function");
}
