/* eval.c - runs the syntax tree: scopes, statements, expressions, macros.
 * Semantics mirror jinja2 where chat templates depend on them: a for-loop
 * body gets a fresh scope each iteration (a set inside does not leak out,
 * which is why templates use namespace()), obj.name tries the attribute
 * (dict methods) before the key, and undefined values print as nothing but
 * fail, with jinja2's message, when an attribute, item or call is taken. */
#define _GNU_SOURCE /* memmem */
#include "llm/template/tpl_int.h"
#include "src/core/omni.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { FLOW_BREAK = 1, FLOW_CONTINUE = 2 };

struct tpl_scope {
    struct tpl_scope *parent;
    struct tpl_dict vars;
};

int tpl_error(struct tpl_ctx *c, int code, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    int line, col;
    tpl_position(c->t, c->pos, &line, &col);
    return omni_fail(c->err, c->errlen, code, "line %d: %s", line, msg);
}

/* An undefined value whose message is printf-formatted (arena string). */
static struct tpl_val undef_fmt(struct tpl_ctx *c, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static struct tpl_val undef_fmt(struct tpl_ctx *c, const char *fmt, ...)
{
    char msg[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return tpl_undef(tpl_arena_strdup(&c->arena, msg, strlen(msg)));
}

int tpl_undef_error(struct tpl_ctx *c, struct tpl_val v)
{
    return tpl_error(c, OMNI_ERR_ARG, "%s", v.s.p ? v.s.p : "value is undefined");
}

/* jinja2's object_type_repr: "'dict object'", "'None'", ... */
static const char *obj_desc(struct tpl_val v)
{
    switch (v.t) {
    case TV_NONE: return "'None'";
    case TV_DICT: return "'dict object'";
    case TV_LIST: return v.l->tuple ? "'tuple object'" : "'list object'";
    case TV_STR: return "'str object'";
    case TV_INT: return "'int object'";
    case TV_FLOAT: return "'float object'";
    case TV_BOOL: return "'bool object'";
    case TV_NS: return "'jinja2.utils.Namespace object'";
    case TV_LOOP: return "'jinja2.runtime.LoopContext object'";
    default: return "'object'";
    }
}

static int scope_set(struct tpl_ctx *c, struct tpl_scope *s, const char *name, struct tpl_val v)
{
    return tpl_dict_set(c, &s->vars, tpl_str(name, strlen(name)), v);
}

static struct tpl_scope *scope_new(struct tpl_ctx *c, struct tpl_scope *parent)
{
    struct tpl_scope *s = tpl_arena_alloc(&c->arena, sizeof *s);
    if (s)
        s->parent = parent;
    return s;
}

static const struct tpl_val *scope_get(const struct tpl_scope *s, const char *name)
{
    size_t n = strlen(name);
    for (; s; s = s->parent) {
        const struct tpl_val *v = tpl_dict_get(&s->vars, name, n);
        if (v)
            return v;
    }
    return NULL;
}

// ---- attribute and item access ----------------------------------------------------

static int loop_attr(struct tpl_ctx *c, struct tpl_val obj, const char *name, struct tpl_val *out)
{
    const struct tpl_loop *l = obj.loop;
    size_t n = l->items->n, i = l->index0;
    if (!strcmp(name, "index")) *out = tpl_int((int64_t)i + 1);
    else if (!strcmp(name, "index0")) *out = tpl_int((int64_t)i);
    else if (!strcmp(name, "revindex")) *out = tpl_int((int64_t)(n - i));
    else if (!strcmp(name, "revindex0")) *out = tpl_int((int64_t)(n - i - 1));
    else if (!strcmp(name, "first")) *out = tpl_bool(i == 0);
    else if (!strcmp(name, "last")) *out = tpl_bool(i + 1 == n);
    else if (!strcmp(name, "length")) *out = tpl_int((int64_t)n);
    else if (!strcmp(name, "depth")) *out = tpl_int(l->depth);
    else if (!strcmp(name, "depth0")) *out = tpl_int(l->depth - 1);
    else if (!strcmp(name, "previtem"))
        *out = i > 0 ? l->items->v[i - 1] : tpl_undef("there is no previous item");
    else if (!strcmp(name, "nextitem"))
        *out = i + 1 < n ? l->items->v[i + 1] : tpl_undef("there is no next item");
    else if (!strcmp(name, "cycle")) {
        struct tpl_method *m = tpl_arena_alloc(&c->arena, sizeof *m);
        if (!m)
            return TPL_NOMEM(c);
        m->self = obj;
        m->name = "cycle";
        *out = (struct tpl_val){ .t = TV_METHOD, .meth = m };
    } else
        *out = undef_fmt(c, "%s has no attribute '%s'", obj_desc(obj), name);
    return 0;
}

int tpl_getattr(struct tpl_ctx *c, struct tpl_val obj, const char *name, struct tpl_val *out)
{
    if (obj.t == TV_UNDEF)
        return tpl_undef_error(c, obj);
    if (obj.t == TV_LOOP)
        return loop_attr(c, obj, name, out);
    if (tpl_has_method(obj, name)) {
        struct tpl_method *m = tpl_arena_alloc(&c->arena, sizeof *m);
        if (!m)
            return TPL_NOMEM(c);
        m->self = obj;
        m->name = name;
        *out = (struct tpl_val){ .t = TV_METHOD, .meth = m };
        return 0;
    }
    if (obj.t == TV_DICT || obj.t == TV_NS) {
        const struct tpl_val *v = tpl_dict_get(obj.d, name, strlen(name));
        if (v) {
            *out = *v;
            return 0;
        }
    }
    *out = undef_fmt(c, "%s has no attribute '%s'", obj_desc(obj), name);
    return 0;
}

/* Python's index normalisation; false when out of range. */
static bool norm_index(int64_t i, size_t n, size_t *out)
{
    if (i < 0)
        i += (int64_t)n;
    if (i < 0 || (uint64_t)i >= n)
        return false;
    *out = (size_t)i;
    return true;
}

int tpl_getitem(struct tpl_ctx *c, struct tpl_val obj, struct tpl_val key, struct tpl_val *out)
{
    if (obj.t == TV_UNDEF)
        return tpl_undef_error(c, obj);
    if (obj.t == TV_DICT || obj.t == TV_NS) {
        const struct tpl_val *v = tpl_dict_find(obj.d, key);
        if (v) {
            *out = *v;
            return 0;
        }
    } else if ((obj.t == TV_LIST || obj.t == TV_STR) && (key.t == TV_INT || key.t == TV_BOOL)) {
        int64_t k = key.t == TV_INT ? key.i : key.b;
        size_t i;
        if (obj.t == TV_LIST) {
            if (norm_index(k, obj.l->n, &i)) {
                *out = obj.l->v[i];
                return 0;
            }
        } else {
            size_t *o;
            size_t n = tpl_utf8_offsets(c, obj.s.p, obj.s.n, &o);
            if (!o)
                return TPL_NOMEM(c);
            if (norm_index(k, n, &i)) {
                *out = tpl_str(obj.s.p + o[i], o[i + 1] - o[i]);
                return 0;
            }
        }
    }
    if (key.t == TV_STR) {
        char *name = tpl_arena_strdup(&c->arena, key.s.p, key.s.n);
        if (!name)
            return TPL_NOMEM(c);
        return tpl_getattr(c, obj, name, out);
    }
    struct tpl_sb b = { .max = 200 };
    tpl_write_repr(c, &b, key);
    const char *d = obj_desc(obj);
    /* jinja2 drops the quotes for "has no element". */
    *out = undef_fmt(c, "%.*s has no element %s", (int)strlen(d) - 2, d + 1, b.p ? b.p : "");
    tpl_sb_free(&b);
    return 0;
}

static int slice(struct tpl_ctx *c, struct tpl_val obj, const struct tpl_val *lo, const struct tpl_val *hi,
                 const struct tpl_val *st, struct tpl_val *out)
{
    if (obj.t == TV_UNDEF)
        return tpl_undef_error(c, obj);
    size_t *o = NULL;
    int64_t n;
    if (obj.t == TV_LIST)
        n = (int64_t)obj.l->n;
    else if (obj.t == TV_STR) {
        n = (int64_t)tpl_utf8_offsets(c, obj.s.p, obj.s.n, &o);
        if (!o)
            return TPL_NOMEM(c);
    } else
        return tpl_error(c, OMNI_ERR_ARG, "'%s' object is not subscriptable", tpl_type_name(obj));
    const struct tpl_val *b[3] = { lo, hi, st };
    int64_t v[3];
    for (int k = 0; k < 3; k++) {
        if (!b[k] || b[k]->t == TV_NONE)
            continue;
        if (b[k]->t != TV_INT && b[k]->t != TV_BOOL)
            return tpl_error(c, OMNI_ERR_ARG, "slice indices must be integers or None");
        v[k] = b[k]->t == TV_INT ? b[k]->i : b[k]->b;
    }
    int64_t step = st && st->t != TV_NONE ? v[2] : 1;
    if (step == 0)
        return tpl_error(c, OMNI_ERR_ARG, "slice step cannot be zero");
    int64_t start, stop;
    if (!lo || lo->t == TV_NONE)
        start = step < 0 ? n - 1 : 0;
    else {
        start = v[0];
        if (start < 0) {
            start += n;
            if (start < 0)
                start = step < 0 ? -1 : 0;
        } else if (start >= n)
            start = step < 0 ? n - 1 : n;
    }
    if (!hi || hi->t == TV_NONE)
        stop = step < 0 ? -1 : n;
    else {
        stop = v[1];
        if (stop < 0) {
            stop += n;
            if (stop < 0)
                stop = step < 0 ? -1 : 0;
        } else if (stop >= n)
            stop = step < 0 ? n - 1 : n;
    }
    int64_t count = step > 0 ? (start < stop ? (stop - start - 1) / step + 1 : 0)
                             : (stop < start ? (start - stop - 1) / (-step) + 1 : 0);
    if (obj.t == TV_LIST) {
        struct tpl_list *l = tpl_list_new(c, (size_t)count);
        if (!l)
            return TPL_NOMEM(c);
        l->tuple = obj.l->tuple;
        for (int64_t i = 0; i < count; i++)
            l->v[i] = obj.l->v[start + i * step];
        *out = (struct tpl_val){ .t = TV_LIST, .l = l };
        return 0;
    }
    if (step == 1) {
        *out = tpl_str(obj.s.p + o[start], count ? o[start + count] - o[start] : 0);
        return 0;
    }
    struct tpl_sb sb = { .max = c->lim.max_output_bytes };
    for (int64_t i = 0; i < count; i++) {
        int64_t k = start + i * step;
        if (tpl_sb_put(&sb, obj.s.p + o[k], o[k + 1] - o[k])) {
            tpl_sb_free(&sb);
            return TPL_NOMEM(c);
        }
    }
    return tpl_str_sb(c, &sb, out);
}

// ---- operators -----------------------------------------------------------------------

static bool is_intlike(struct tpl_val v) { return v.t == TV_INT || v.t == TV_BOOL; }
static int64_t as_int(struct tpl_val v) { return v.t == TV_INT ? v.i : v.b; }
static bool is_number(struct tpl_val v) { return is_intlike(v) || v.t == TV_FLOAT; }
static double as_float(struct tpl_val v) { return v.t == TV_FLOAT ? v.f : (double)as_int(v); }

static const char *op_name(int op)
{
    static const char *const names[] = { "+", "-", "*", "/", "//", "%", "**", "~",
                                         "==", "!=", "<", ">", "<=", ">=", "in", "not in" };
    return names[op];
}

static int type_error(struct tpl_ctx *c, int op, struct tpl_val a, struct tpl_val b)
{
    return tpl_error(c, OMNI_ERR_ARG, "unsupported operand type(s) for %s: '%s' and '%s'", op_name(op),
                     tpl_type_name(a), tpl_type_name(b));
}

static int repeat(struct tpl_ctx *c, struct tpl_val seq, int64_t times, struct tpl_val *out)
{
    if (times < 0)
        times = 0;
    size_t unit = seq.t == TV_STR ? seq.s.n : seq.l->n * sizeof(struct tpl_val);
    if (unit && (uint64_t)times > c->lim.max_output_bytes / unit)
        return tpl_error(c, OMNI_ERR_LIMIT, "repetition result too large");
    if (seq.t == TV_STR) {
        struct tpl_sb sb = { .max = c->lim.max_output_bytes };
        for (int64_t i = 0; i < times; i++)
            if (tpl_sb_put(&sb, seq.s.p, seq.s.n)) {
                tpl_sb_free(&sb);
                return TPL_NOMEM(c);
            }
        return tpl_str_sb(c, &sb, out);
    }
    struct tpl_list *l = tpl_list_new(c, seq.l->n * (size_t)times);
    if (!l)
        return TPL_NOMEM(c);
    for (int64_t i = 0; i < times; i++)
        memcpy(l->v + (size_t)i * seq.l->n, seq.l->v, seq.l->n * sizeof *l->v);
    *out = (struct tpl_val){ .t = TV_LIST, .l = l };
    return 0;
}

static int contains(struct tpl_ctx *c, struct tpl_val item, struct tpl_val seq, bool *r)
{
    switch (seq.t) {
    case TV_UNDEF: *r = false; return 0;
    case TV_STR:
        if (item.t != TV_STR)
            return tpl_error(c, OMNI_ERR_ARG, "'in <string>' requires string as left operand, not %s",
                             tpl_type_name(item));
        *r = item.s.n == 0 || memmem(seq.s.p, seq.s.n, item.s.p, item.s.n) != NULL;
        return 0;
    case TV_LIST:
        *r = false;
        for (size_t i = 0; i < seq.l->n && !*r; i++)
            *r = tpl_equal(seq.l->v[i], item);
        return 0;
    case TV_DICT: case TV_NS:
        *r = tpl_dict_find(seq.d, item) != NULL;
        return 0;
    default:
        return tpl_error(c, OMNI_ERR_ARG, "argument of type '%s' is not iterable", tpl_type_name(seq));
    }
}

static int binop(struct tpl_ctx *c, int op, struct tpl_val a, struct tpl_val b, struct tpl_val *out)
{
    if (op == OP_CONCAT) {
        struct tpl_sb sb = { .max = c->lim.max_output_bytes };
        int rc = tpl_write_str(c, &sb, a);
        if (!rc)
            rc = tpl_write_str(c, &sb, b);
        if (rc) {
            tpl_sb_free(&sb);
            return rc;
        }
        return tpl_str_sb(c, &sb, out);
    }
    if (op == OP_EQ || op == OP_NE) {
        *out = tpl_bool(tpl_equal(a, b) == (op == OP_EQ));
        return 0;
    }
    if (op == OP_IN || op == OP_NOTIN) {
        bool r = false;
        int rc = contains(c, a, b, &r);
        *out = tpl_bool(r == (op == OP_IN));
        return rc;
    }
    if (op >= OP_LT && op <= OP_GE) {
        int r = 0;
        int rc = tpl_compare(c, a, b, &r);
        *out = tpl_bool(op == OP_LT ? r < 0 : op == OP_GT ? r > 0 : op == OP_LE ? r <= 0 : r >= 0);
        return rc;
    }
    if (a.t == TV_UNDEF)
        return tpl_undef_error(c, a);
    if (b.t == TV_UNDEF)
        return tpl_undef_error(c, b);
    if (is_intlike(a) && is_intlike(b)) {
        int64_t x = as_int(a), y = as_int(b), r = 0;
        bool ovf = false;
        switch (op) {
        case OP_ADD: ovf = __builtin_add_overflow(x, y, &r); break;
        case OP_SUB: ovf = __builtin_sub_overflow(x, y, &r); break;
        case OP_MUL: ovf = __builtin_mul_overflow(x, y, &r); break;
        case OP_DIV:
            if (y == 0)
                return tpl_error(c, OMNI_ERR_ARG, "division by zero");
            *out = tpl_float((double)x / (double)y);
            return 0;
        case OP_FLOORDIV: case OP_MOD:
            if (y == 0)
                return tpl_error(c, OMNI_ERR_ARG, "integer division or modulo by zero");
            if (x == INT64_MIN && y == -1) {
                ovf = op == OP_FLOORDIV;
                break;
            }
            r = op == OP_FLOORDIV ? x / y - ((x % y != 0) && ((x < 0) != (y < 0)))
                                  : ((x % y) + y) % y;
            if (op == OP_MOD && x % y == 0)
                r = 0;
            break;
        case OP_POW:
            if (y < 0) {
                *out = tpl_float(pow((double)x, (double)y));
                return 0;
            }
            r = 1;
            for (int64_t i = 0; i < y && !ovf; i++)
                ovf = __builtin_mul_overflow(r, x, &r);
            break;
        }
        if (ovf)
            return tpl_error(c, OMNI_ERR_LIMIT, "integer overflow");
        *out = tpl_int(r);
        return 0;
    }
    if (is_number(a) && is_number(b)) {
        double x = as_float(a), y = as_float(b), r = 0;
        switch (op) {
        case OP_ADD: r = x + y; break;
        case OP_SUB: r = x - y; break;
        case OP_MUL: r = x * y; break;
        case OP_DIV: case OP_FLOORDIV: case OP_MOD:
            if (y == 0)
                return tpl_error(c, OMNI_ERR_ARG, "float division by zero");
            if (op == OP_DIV)
                r = x / y;
            else if (op == OP_FLOORDIV)
                r = floor(x / y);
            else {
                r = fmod(x, y);
                if (r != 0 && ((r < 0) != (y < 0)))
                    r += y;
            }
            break;
        case OP_POW: r = pow(x, y); break;
        }
        *out = tpl_float(r);
        return 0;
    }
    if (op == OP_ADD && a.t == TV_STR && b.t == TV_STR) {
        struct tpl_sb sb = { .max = c->lim.max_output_bytes };
        if (tpl_sb_put(&sb, a.s.p, a.s.n) || tpl_sb_put(&sb, b.s.p, b.s.n)) {
            tpl_sb_free(&sb);
            return tpl_error(c, OMNI_ERR_LIMIT, "string longer than %zu bytes", c->lim.max_output_bytes);
        }
        return tpl_str_sb(c, &sb, out);
    }
    if (op == OP_ADD && a.t == TV_LIST && b.t == TV_LIST) {
        struct tpl_list *l = tpl_list_new(c, a.l->n + b.l->n);
        if (!l)
            return TPL_NOMEM(c);
        memcpy(l->v, a.l->v, a.l->n * sizeof *l->v);
        memcpy(l->v + a.l->n, b.l->v, b.l->n * sizeof *l->v);
        l->tuple = a.l->tuple;
        *out = (struct tpl_val){ .t = TV_LIST, .l = l };
        return 0;
    }
    if (op == OP_MUL && (a.t == TV_STR || a.t == TV_LIST) && is_intlike(b))
        return repeat(c, a, as_int(b), out);
    if (op == OP_MUL && (b.t == TV_STR || b.t == TV_LIST) && is_intlike(a))
        return repeat(c, b, as_int(a), out);
    if (op == OP_MOD && a.t == TV_STR)
        return tpl_error(c, OMNI_ERR_UNSUPPORTED, "printf-style '%%' string formatting is not supported");
    return type_error(c, op, a, b);
}

// ---- expressions -------------------------------------------------------------------

static int eval(struct tpl_ctx *c, const struct tpl_node *n, struct tpl_scope *s, struct tpl_val *out);
static int exec_body(struct tpl_ctx *c, const struct tpl_node *n, struct tpl_scope *s);

/* Evaluated arguments of a call, filter or test node (from args[first]). */
static int eval_args(struct tpl_ctx *c, const struct tpl_node *n, int first, struct tpl_scope *s,
                     struct tpl_args *a)
{
    int total = n->nargs - first;
    struct tpl_val *v = tpl_arena_alloc(&c->arena, (size_t)(total + 1) * 2 * sizeof *v);
    const char **kw = tpl_arena_alloc(&c->arena, (size_t)(total + 1) * sizeof *kw);
    if (!v || !kw)
        return TPL_NOMEM(c);
    int np = 0, nk = 0;
    struct tpl_val *kv = v + total + 1;
    for (int i = first; i < n->nargs; i++) {
        struct tpl_val x;
        int rc = eval(c, n->args[i], s, &x);
        if (rc)
            return rc;
        if (n->kw[i]) {
            kw[nk] = n->kw[i];
            kv[nk++] = x;
        } else
            v[np++] = x;
    }
    *a = (struct tpl_args){ .n = np, .nkw = nk, .v = v, .kwname = kw, .kw = kv };
    return 0;
}

static int call_macro(struct tpl_ctx *c, const struct tpl_macro *m, const struct tpl_args *a, struct tpl_val *out)
{
    const struct tpl_node *def = m->def;
    struct tpl_scope *s = scope_new(c, m->closure);
    if (!s)
        return TPL_NOMEM(c);
    int rc = 0;
    for (int i = 0; i < def->nnames && !rc; i++) {
        const struct tpl_val *v = tpl_arg(a, i, def->names[i]);
        struct tpl_val x;
        if (v)
            x = *v;
        else if (def->defaults[i])
            rc = eval(c, def->defaults[i], s, &x);
        else
            x = undef_fmt(c, "parameter '%s' was not provided", def->names[i]);
        if (!rc)
            rc = scope_set(c, s, def->names[i], x);
    }
    if (rc)
        return rc;
    /* Extra arguments are reachable as varargs / kwargs, as in jinja2. */
    struct tpl_list *va = tpl_list_new(c, a->n > def->nnames ? (size_t)(a->n - def->nnames) : 0);
    struct tpl_dict *kwd = tpl_dict_new(c);
    if (!va || !kwd)
        return TPL_NOMEM(c);
    for (size_t i = 0; i < va->n; i++)
        va->v[i] = a->v[def->nnames + (int)i];
    for (int i = 0; i < a->nkw && !rc; i++) {
        bool param = false;
        for (int k = 0; k < def->nnames; k++)
            param |= !strcmp(def->names[k], a->kwname[i]);
        if (!param)
            rc = tpl_dict_set(c, kwd, tpl_str(a->kwname[i], strlen(a->kwname[i])), a->kw[i]);
    }
    if (!rc)
        rc = scope_set(c, s, "varargs", (struct tpl_val){ .t = TV_LIST, .l = va });
    if (!rc)
        rc = scope_set(c, s, "kwargs", (struct tpl_val){ .t = TV_DICT, .d = kwd });
    if (!rc && m->caller.t == TV_MACRO)
        rc = scope_set(c, s, "caller", m->caller);
    if (rc)
        return rc;
    struct tpl_sb buf = { .max = c->lim.max_output_bytes }, *saved = c->out;
    c->out = &buf;
    rc = exec_body(c, def->c, s);
    c->out = saved;
    if (rc < 0) {
        tpl_sb_free(&buf);
        return rc;
    }
    return tpl_str_sb(c, &buf, out);
}

int tpl_call(struct tpl_ctx *c, struct tpl_val fn, const struct tpl_args *a, struct tpl_val *out)
{
    switch (fn.t) {
    case TV_MACRO: {
        if (++c->depth > c->lim.max_depth)
            return tpl_error(c, OMNI_ERR_LIMIT, "macro calls nested deeper than %d", c->lim.max_depth);
        int rc = call_macro(c, fn.m, a, out);
        c->depth--;
        return rc;
    }
    case TV_FUNC: return tpl_global_call(c, fn.fn, a, out);
    case TV_METHOD: return tpl_method_call(c, fn.meth, a, out);
    case TV_UNDEF: return tpl_undef_error(c, fn);
    default: return tpl_error(c, OMNI_ERR_ARG, "'%s' object is not callable", tpl_type_name(fn));
    }
}

static int eval_node(struct tpl_ctx *c, const struct tpl_node *n, struct tpl_scope *s, struct tpl_val *out);

/* eval and exec_stmt recurse for every level of the tree and every macro
 * call: one budget for them together bounds the C stack of a render (the
 * parser's limit alone allows TPL_MAX_PARSE_DEPTH levels per macro level). */
static int recursion_enter(struct tpl_ctx *c)
{
    if (++c->recursion > c->lim.max_recursion) {
        c->recursion--;
        return tpl_error(c, OMNI_ERR_LIMIT, "expressions, blocks and macro calls nested deeper than "
                         "%d levels while rendering", c->lim.max_recursion);
    }
    return 0;
}

static int eval(struct tpl_ctx *c, const struct tpl_node *n, struct tpl_scope *s, struct tpl_val *out)
{
    int rc = recursion_enter(c);
    if (rc)
        return rc;
    rc = eval_node(c, n, s, out);
    c->recursion--;
    return rc;
}

static int eval_node(struct tpl_ctx *c, const struct tpl_node *n, struct tpl_scope *s, struct tpl_val *out)
{
    struct tpl_val a, b;
    int rc = 0;
    c->pos = n->pos;
    switch (n->kind) {
    case E_LIT:
        *out = n->lit;
        return 0;
    case E_NAME: {
        const struct tpl_val *v = scope_get(s, n->name);
        if (v)
            *out = *v;
        else {
            int fn = tpl_global_find(n->name);
            *out = fn >= 0 ? (struct tpl_val){ .t = TV_FUNC, .fn = fn }
                           : undef_fmt(c, "'%s' is undefined", n->name);
        }
        return 0;
    }
    case E_LIST: case E_TUPLE: {
        struct tpl_list *l = tpl_list_new(c, (size_t)n->nargs);
        if (!l)
            return TPL_NOMEM(c);
        l->tuple = n->kind == E_TUPLE;
        for (int i = 0; i < n->nargs; i++)
            if ((rc = eval(c, n->args[i], s, &l->v[i])))
                return rc;
        *out = (struct tpl_val){ .t = TV_LIST, .l = l };
        return 0;
    }
    case E_DICT: {
        struct tpl_dict *d = tpl_dict_new(c);
        if (!d)
            return TPL_NOMEM(c);
        for (int i = 0; i + 1 < n->nargs; i += 2) {
            if ((rc = eval(c, n->args[i], s, &a)) || (rc = eval(c, n->args[i + 1], s, &b)) ||
                (rc = tpl_dict_set(c, d, a, b)))
                return rc;
        }
        *out = (struct tpl_val){ .t = TV_DICT, .d = d };
        return 0;
    }
    case E_ATTR:
        if ((rc = eval(c, n->a, s, &a)))
            return rc;
        c->pos = n->pos;
        return tpl_getattr(c, a, n->name, out);
    case E_ITEM:
        if ((rc = eval(c, n->a, s, &a)) || (rc = eval(c, n->b, s, &b)))
            return rc;
        c->pos = n->pos;
        return tpl_getitem(c, a, b, out);
    case E_SLICE: {
        struct tpl_val v[3];
        const struct tpl_node *parts[3] = { n->b, n->c, n->d };
        if ((rc = eval(c, n->a, s, &a)))
            return rc;
        for (int i = 0; i < 3; i++)
            if (parts[i] && (rc = eval(c, parts[i], s, &v[i])))
                return rc;
        c->pos = n->pos;
        return slice(c, a, n->b ? &v[0] : NULL, n->c ? &v[1] : NULL, n->d ? &v[2] : NULL, out);
    }
    case E_CALL: {
        struct tpl_args args;
        if ((rc = eval(c, n->a, s, &a)) || (rc = eval_args(c, n, 0, s, &args)))
            return rc;
        c->pos = n->pos;
        return tpl_call(c, a, &args, out);
    }
    case E_FILTER: {
        struct tpl_args args;
        if ((rc = eval(c, n->a, s, &a)) || (rc = eval_args(c, n, 0, s, &args)))
            return rc;
        c->pos = n->pos;
        if (n->op < 0)
            return tpl_error(c, OMNI_ERR_UNSUPPORTED, "no filter named '%s'", n->name);
        return tpl_filter_apply(c, n->op, a, &args, out);
    }
    case E_TEST: {
        struct tpl_args args;
        bool r;
        if ((rc = eval(c, n->a, s, &a)) || (rc = eval_args(c, n, 0, s, &args)))
            return rc;
        c->pos = n->pos;
        if ((rc = tpl_test_apply(c, n->op, a, &args, &r)))
            return rc;
        *out = tpl_bool(r != n->negate);
        return 0;
    }
    case E_NEG: case E_POS:
        if ((rc = eval(c, n->a, s, &a)))
            return rc;
        c->pos = n->pos;
        if (a.t == TV_UNDEF)
            return tpl_undef_error(c, a);
        if (!is_number(a))
            return tpl_error(c, OMNI_ERR_ARG, "bad operand type for unary %c: '%s'",
                             n->kind == E_NEG ? '-' : '+', tpl_type_name(a));
        if (n->kind == E_POS)
            *out = a.t == TV_BOOL ? tpl_int(a.b) : a;
        else if (a.t == TV_FLOAT)
            *out = tpl_float(-a.f);
        else if (as_int(a) == INT64_MIN)
            return tpl_error(c, OMNI_ERR_LIMIT, "integer overflow");
        else
            *out = tpl_int(-as_int(a));
        return 0;
    case E_NOT:
        if ((rc = eval(c, n->a, s, &a)))
            return rc;
        *out = tpl_bool(!tpl_truthy(a));
        return 0;
    case E_AND: case E_OR:
        if ((rc = eval(c, n->a, s, &a)))
            return rc;
        if (tpl_truthy(a) == (n->kind == E_OR)) {
            *out = a;
            return 0;
        }
        return eval(c, n->b, s, out);
    case E_COND:
        if ((rc = eval(c, n->a, s, &a)))
            return rc;
        if (tpl_truthy(a))
            return eval(c, n->b, s, out);
        if (n->c)
            return eval(c, n->c, s, out);
        *out = tpl_undef("the inline if-expression evaluated to false and no else section was defined");
        return 0;
    case E_BIN:
        if ((rc = eval(c, n->a, s, &a)) || (rc = eval(c, n->b, s, &b)))
            return rc;
        c->pos = n->pos;
        return binop(c, n->op, a, b, out);
    default:
        return tpl_error(c, OMNI_ERR_UNSUPPORTED, "not an expression");
    }
}

// ---- statements --------------------------------------------------------------------

/* Bind for/set targets: one name, or unpack a sequence of the same length. */
static int assign(struct tpl_ctx *c, const struct tpl_node *n, struct tpl_scope *s, struct tpl_val v)
{
    if (!n->unpack)
        return scope_set(c, s, n->names[0], v);
    if (v.t == TV_UNDEF)
        return tpl_undef_error(c, v);
    struct tpl_list *l;
    int rc = tpl_iterable(c, v, &l);
    if (rc)
        return rc;
    if (l->n != (size_t)n->nnames)
        return tpl_error(c, OMNI_ERR_ARG, "%s values to unpack (expected %d, got %zu)",
                         l->n > (size_t)n->nnames ? "too many" : "not enough", n->nnames, l->n);
    for (int i = 0; i < n->nnames && !rc; i++)
        rc = scope_set(c, s, n->names[i], l->v[i]);
    return rc;
}

static int exec_for(struct tpl_ctx *c, const struct tpl_node *n, struct tpl_scope *s)
{
    struct tpl_val seq;
    struct tpl_list *items;
    int rc = eval(c, n->a, s, &seq);
    if (rc)
        return rc;
    c->pos = n->pos;
    if ((rc = tpl_iterable(c, seq, &items)))
        return rc;
    if (n->b) {
        /* "for x in xs if cond": filter first; loop.length counts what is kept. */
        struct tpl_list *kept = tpl_list_new(c, items->n);
        if (!kept)
            return TPL_NOMEM(c);
        kept->n = 0;
        for (size_t i = 0; i < items->n; i++) {
            struct tpl_scope *fs = scope_new(c, s);
            struct tpl_val ok;
            if (!fs)
                return TPL_NOMEM(c);
            if ((rc = assign(c, n, fs, items->v[i])) || (rc = eval(c, n->b, fs, &ok)))
                return rc;
            if (tpl_truthy(ok))
                kept->v[kept->n++] = items->v[i];
        }
        items = kept;
    }
    const struct tpl_val *outer = scope_get(s, "loop");
    int depth = outer && outer->t == TV_LOOP ? outer->loop->depth + 1 : 1;
    for (size_t i = 0; i < items->n; i++) {
        if (++c->iterations > c->lim.max_loop_iterations)
            return tpl_error(c, OMNI_ERR_LIMIT, "more than %llu loop iterations",
                             (unsigned long long)c->lim.max_loop_iterations);
        struct tpl_scope *is = scope_new(c, s);
        struct tpl_loop *lp = tpl_arena_alloc(&c->arena, sizeof *lp);
        if (!is || !lp)
            return TPL_NOMEM(c);
        *lp = (struct tpl_loop){ .items = items, .index0 = i, .depth = depth };
        c->pos = n->pos;
        if ((rc = assign(c, n, is, items->v[i])) ||
            (rc = scope_set(c, is, "loop", (struct tpl_val){ .t = TV_LOOP, .loop = lp })))
            return rc;
        rc = exec_body(c, n->c, is);
        if (rc < 0)
            return rc;
        if (rc == FLOW_BREAK)
            break;
    }
    if (items->n == 0 && n->d)
        return exec_body(c, n->d, s);
    return 0;
}

static int exec_stmt_node(struct tpl_ctx *c, const struct tpl_node *n, struct tpl_scope *s);

static int exec_stmt(struct tpl_ctx *c, const struct tpl_node *n, struct tpl_scope *s)
{
    int rc = recursion_enter(c);
    if (rc)
        return rc;
    rc = exec_stmt_node(c, n, s);
    c->recursion--;
    return rc;
}

static int exec_stmt_node(struct tpl_ctx *c, const struct tpl_node *n, struct tpl_scope *s)
{
    struct tpl_val v;
    int rc;
    c->pos = n->pos;
    switch (n->kind) {
    case N_TEXT:
        if ((rc = tpl_sb_put(c->out, n->lit.s.p, n->lit.s.n)))
            return rc == OMNI_ERR_LIMIT ? tpl_error(c, rc, "output longer than %zu bytes", c->lim.max_output_bytes)
                                        : TPL_NOMEM(c);
        return 0;
    case N_OUT:
        if ((rc = eval(c, n->a, s, &v)))
            return rc;
        return tpl_write_str(c, c->out, v);
    case N_IF:
        for (; n && n->kind == N_IF; n = n->d) {
            if ((rc = eval(c, n->a, s, &v)))
                return rc;
            if (tpl_truthy(v))
                return exec_body(c, n->c, s);
        }
        return n ? exec_body(c, n->c, s) : 0; /* the else N_BLOCK */
    case N_FOR:
        return exec_for(c, n, s);
    case N_SET:
        if ((rc = eval(c, n->a, s, &v)))
            return rc;
        c->pos = n->pos;
        if (n->attr) {
            const struct tpl_val *ns = scope_get(s, n->name);
            if (!ns || ns->t != TV_NS)
                return tpl_error(c, OMNI_ERR_ARG, "cannot assign attribute on non-namespace object");
            return tpl_dict_set(c, ns->d, tpl_str(n->attr, strlen(n->attr)), v);
        }
        return assign(c, n, s, v);
    case N_SETBLOCK: {
        struct tpl_sb buf = { .max = c->lim.max_output_bytes }, *saved = c->out;
        c->out = &buf;
        rc = exec_body(c, n->c, s);
        c->out = saved;
        if (rc < 0 || (rc = tpl_str_sb(c, &buf, &v))) {
            tpl_sb_free(&buf);
            return rc;
        }
        return scope_set(c, s, n->names[0], v);
    }
    case N_MACRO: {
        struct tpl_macro *m = tpl_arena_alloc(&c->arena, sizeof *m);
        if (!m)
            return TPL_NOMEM(c);
        *m = (struct tpl_macro){ .def = n, .closure = s, .caller = tpl_undef(NULL) };
        return scope_set(c, s, n->name, (struct tpl_val){ .t = TV_MACRO, .m = m });
    }
    case N_CALLBLOCK: {
        struct tpl_val fn;
        struct tpl_args args;
        if ((rc = eval(c, n->a->a, s, &fn)) || (rc = eval_args(c, n->a, 0, s, &args)))
            return rc;
        c->pos = n->pos;
        if (fn.t != TV_MACRO)
            return tpl_error(c, OMNI_ERR_ARG, "{%% call %%} needs a macro, not '%s'", tpl_type_name(fn));
        struct tpl_macro *caller = tpl_arena_alloc(&c->arena, sizeof *caller);
        struct tpl_macro *m = tpl_arena_alloc(&c->arena, sizeof *m);
        if (!caller || !m)
            return TPL_NOMEM(c);
        *caller = (struct tpl_macro){ .def = n, .closure = s, .caller = tpl_undef(NULL) };
        *m = *fn.m;
        m->caller = (struct tpl_val){ .t = TV_MACRO, .m = caller };
        if ((rc = tpl_call(c, (struct tpl_val){ .t = TV_MACRO, .m = m }, &args, &v)))
            return rc;
        return tpl_write_str(c, c->out, v);
    }
    case N_BREAK: return FLOW_BREAK;
    case N_CONTINUE: return FLOW_CONTINUE;
    case N_BLOCK: return exec_body(c, n->c, s);
    default: return tpl_error(c, OMNI_ERR_UNSUPPORTED, "not a statement");
    }
}

/* Returns 0, FLOW_BREAK / FLOW_CONTINUE to the enclosing loop, or an error. */
static int exec_body(struct tpl_ctx *c, const struct tpl_node *n, struct tpl_scope *s)
{
    for (; n; n = n->next) {
        int rc = exec_stmt(c, n, s);
        if (rc)
            return rc;
    }
    return 0;
}

int tpl_eval_template(struct tpl_ctx *c, struct tpl_dict *vars)
{
    struct tpl_scope *s = scope_new(c, NULL);
    if (!s)
        return TPL_NOMEM(c);
    s->vars = *vars;
    int rc = exec_body(c, c->t->body, s);
    return rc > 0 ? 0 : rc;
}
