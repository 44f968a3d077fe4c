/* parser.c - tokens -> syntax tree, by recursive descent with jinja2's
 * precedence: conditional expression, or, and, not, comparisons (in, not in,
 * chained), + -, ~, * / // %, **, unary minus, then primaries with
 * attribute/item/slice/call postfixes, filters (|f) and tests (is t).
 * Filters and tests are looked up here, as jinja2 does at compile time. */
#include "llm/template/tpl_int.h"
#include "src/core/omni.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>


struct parser {
    struct tpl *t;
    const struct tpl_token *tk;
    size_t n, i;
    int depth;      /* expression / block nesting */
    int loops;      /* enclosing for-loops (break/continue) */
    char *err;
    size_t errlen;
    int rc;
};

static const struct tpl_token *cur(struct parser *p) { return &p->tk[p->i]; }
static const struct tpl_token *peek(struct parser *p, size_t k) { return &p->tk[p->i + k < p->n ? p->i + k : p->n - 1]; }
static void adv(struct parser *p) { if (p->i + 1 < p->n) p->i++; }

static bool tok_is(const struct tpl_token *t, enum tpl_tok type, const char *s)
{
    return t->type == type && (!s || (t->n == strlen(s) && !memcmp(t->p, s, t->n)));
}
static bool is_op(struct parser *p, const char *s) { return tok_is(cur(p), T_OP, s); }
static bool is_name(struct parser *p, const char *s) { return tok_is(cur(p), T_NAME, s); }

static void *fail_at(struct parser *p, uint32_t pos, const char *fmt, const char *arg)
{
    if (p->rc)
        return NULL;
    int line, col;
    tpl_position(p->t, pos, &line, &col);
    char msg[200];
    snprintf(msg, sizeof msg, fmt, arg);
    p->rc = omni_fail(p->err, p->errlen, OMNI_ERR_FORMAT, "line %d, column %d: %s", line, col, msg);
    return NULL;
}

/* "unexpected 'x'" with the token's text. */
static void *unexpected(struct parser *p, const char *expected)
{
    const struct tpl_token *t = cur(p);
    char what[80], msg[160];
    switch (t->type) {
    case T_EOF: snprintf(what, sizeof what, "end of template"); break;
    case T_BLOCK_END: snprintf(what, sizeof what, "'%%}'"); break;
    case T_VAR_END: snprintf(what, sizeof what, "'}}'"); break;
    case T_STRING: snprintf(what, sizeof what, "string"); break;
    default: snprintf(what, sizeof what, "'%.*s'", (int)(t->n < 40 ? t->n : 40), t->p);
    }
    snprintf(msg, sizeof msg, "unexpected %s, expected %s", what, expected);
    return fail_at(p, t->pos, "%s", msg);
}

static struct tpl_node *node(struct parser *p, enum tpl_nkind kind, uint32_t pos)
{
    struct tpl_node *n = tpl_arena_alloc(&p->t->arena, sizeof *n);
    if (!n) {
        if (!p->rc)
            p->rc = omni_fail(p->err, p->errlen, OMNI_ERR_NOMEM, "out of memory");
        return NULL;
    }
    n->kind = kind;
    n->pos = pos;
    return n;
}

static const char *tok_str(struct parser *p, const struct tpl_token *t)
{
    char *s = tpl_arena_strdup(&p->t->arena, t->p, t->n);
    if (!s && !p->rc)
        p->rc = omni_fail(p->err, p->errlen, OMNI_ERR_NOMEM, "out of memory");
    return s;
}

static bool expect_op(struct parser *p, const char *op)
{
    if (is_op(p, op)) {
        adv(p);
        return true;
    }
    char e[16];
    snprintf(e, sizeof e, "'%s'", op);
    unexpected(p, e);
    return false;
}

/* Growable pointer array in the arena (doubles; old blocks stay until tpl_free). */
static bool grow(struct parser *p, void **arr, int n, size_t elem)
{
    if (n != 0 && (n < 4 || (n & (n - 1))))
        return true; /* room left: capacities are 4, 8, 16, ... */
    size_t cap = n ? (size_t)n * 2 : 4;
    void *na = tpl_arena_alloc(&p->t->arena, cap * elem);
    if (!na) {
        if (!p->rc)
            p->rc = omni_fail(p->err, p->errlen, OMNI_ERR_NOMEM, "out of memory");
        return false;
    }
    if (n)
        memcpy(na, *arr, (size_t)n * elem);
    *arr = na;
    return true;
}

static bool add_arg(struct parser *p, struct tpl_node *n, struct tpl_node *arg, const char *kw)
{
    if (!grow(p, (void **)&n->args, n->nargs, sizeof *n->args) ||
        !grow(p, (void **)&n->kw, n->nargs, sizeof *n->kw))
        return false;
    n->args[n->nargs] = arg;
    n->kw[n->nargs] = kw;
    n->nargs++;
    return true;
}

static struct tpl_node *parse_expr(struct parser *p, bool with_cond);
static struct tpl_node *parse_or(struct parser *p);
static struct tpl_node *parse_unary(struct parser *p, bool with_filter);

static bool enter(struct parser *p)
{
    if (++p->depth > TPL_MAX_PARSE_DEPTH) {
        char msg[96];
        snprintf(msg, sizeof msg, "expression or blocks nested too deeply (more than %d levels)",
                 TPL_MAX_PARSE_DEPTH);
        fail_at(p, cur(p)->pos, "%s", msg);
        return false;
    }
    return true;
}

/* One more link of a left-associative chain (a.b.c, x|f|g, 1 + 2 + 3, a and
 * b and c): built in a loop here but a level deeper for the evaluator, which
 * walks the tree recursively, so each link counts as nesting. The caller
 * gives the links back (p->depth -= links) when the chain ends. */
static bool chain_link(struct parser *p, int *links)
{
    if (!enter(p))
        return false;
    (*links)++;
    return true;
}

/* (args) after a callee, filter or test: positional, then name=value. */
static bool parse_call_args(struct parser *p, struct tpl_node *n)
{
    if (!expect_op(p, "("))
        return false;
    while (!is_op(p, ")")) {
        if (n->nargs && !expect_op(p, ","))
            return false;
        if (is_op(p, ")"))
            break;
        const char *kw = NULL;
        if (cur(p)->type == T_NAME && tok_is(peek(p, 1), T_OP, "=")) {
            kw = tok_str(p, cur(p));
            adv(p);
            adv(p);
        } else if (n->nargs && n->kw[n->nargs - 1])
            return unexpected(p, "a keyword argument (positional after keyword)"), false;
        struct tpl_node *a = parse_expr(p, true);
        if (!a || !add_arg(p, n, a, kw))
            return false;
    }
    adv(p);
    return !p->rc;
}

/* [a, b], (a, b), {k: v}, literals and names. */
static struct tpl_node *parse_primary(struct parser *p)
{
    const struct tpl_token *t = cur(p);
    struct tpl_node *n = NULL;
    if (t->type == T_NAME) {
        static const char *const consts[] = { "true", "True", "false", "False", "none", "None" };
        for (int i = 0; i < 6; i++)
            if (tok_is(t, T_NAME, consts[i])) {
                if (!(n = node(p, E_LIT, t->pos)))
                    return NULL;
                n->lit = i < 4 ? tpl_bool(i < 2) : tpl_none();
                adv(p);
                return n;
            }
        if (!(n = node(p, E_NAME, t->pos)))
            return NULL;
        n->name = tok_str(p, t);
        adv(p);
        return n;
    }
    if (t->type == T_STRING) {
        /* Adjacent literals join, as in Python. */
        size_t len = 0, i = p->i;
        for (; p->tk[i].type == T_STRING; i++)
            len += p->tk[i].n;
        char *s = tpl_arena_alloc(&p->t->arena, len + 1);
        if (!s) {
            if (!p->rc)
                p->rc = omni_fail(p->err, p->errlen, OMNI_ERR_NOMEM, "out of memory");
            return NULL;
        }
        if (!(n = node(p, E_LIT, t->pos)))
            return NULL;
        len = 0;
        for (; cur(p)->type == T_STRING; adv(p)) {
            memcpy(s + len, cur(p)->p, cur(p)->n);
            len += cur(p)->n;
        }
        n->lit = tpl_str(s, len);
        return n;
    }
    if (t->type == T_INT || t->type == T_FLOAT) {
        if (!(n = node(p, E_LIT, t->pos)))
            return NULL;
        n->lit = t->type == T_INT ? tpl_int(t->i) : tpl_float(t->f);
        adv(p);
        return n;
    }
    if (is_op(p, "(")) {
        adv(p);
        if (is_op(p, ")")) {
            adv(p);
            return node(p, E_TUPLE, t->pos);
        }
        struct tpl_node *e = parse_expr(p, true);
        if (!e)
            return NULL;
        if (!is_op(p, ","))
            return expect_op(p, ")") ? e : NULL;
        if (!(n = node(p, E_TUPLE, t->pos)) || !add_arg(p, n, e, NULL))
            return NULL;
        while (is_op(p, ",")) {
            adv(p);
            if (is_op(p, ")"))
                break;
            if (!(e = parse_expr(p, true)) || !add_arg(p, n, e, NULL))
                return NULL;
        }
        return expect_op(p, ")") ? n : NULL;
    }
    if (is_op(p, "[") || is_op(p, "{")) {
        bool dict = is_op(p, "{");
        const char *close = dict ? "}" : "]";
        adv(p);
        if (!(n = node(p, dict ? E_DICT : E_LIST, t->pos)))
            return NULL;
        while (!is_op(p, close)) {
            if (n->nargs && !expect_op(p, ","))
                return NULL;
            if (is_op(p, close))
                break;
            struct tpl_node *e = parse_expr(p, true);
            if (!e || !add_arg(p, n, e, NULL))
                return NULL;
            if (dict) {
                if (!expect_op(p, ":") || !(e = parse_expr(p, true)) || !add_arg(p, n, e, NULL))
                    return NULL;
            }
        }
        adv(p);
        return n;
    }
    return unexpected(p, "an expression");
}

/* x.name, x.0, x[i], x[a:b:c], x(args) */
static struct tpl_node *parse_postfix(struct parser *p, struct tpl_node *n)
{
    int links = 0;
    while (n && !p->rc) {
        const struct tpl_token *t = cur(p);
        if ((is_op(p, ".") || is_op(p, "[") || is_op(p, "(")) && !chain_link(p, &links))
            return NULL;
        if (is_op(p, ".")) {
            adv(p);
            if (cur(p)->type == T_NAME) {
                struct tpl_node *a = node(p, E_ATTR, t->pos);
                if (!a)
                    return NULL;
                a->a = n;
                a->name = tok_str(p, cur(p));
                adv(p);
                n = a;
            } else if (cur(p)->type == T_INT) {
                struct tpl_node *a = node(p, E_ITEM, t->pos), *k = node(p, E_LIT, t->pos);
                if (!a || !k)
                    return NULL;
                k->lit = tpl_int(cur(p)->i);
                a->a = n;
                a->b = k;
                adv(p);
                n = a;
            } else
                return unexpected(p, "an attribute name");
        } else if (is_op(p, "[")) {
            adv(p);
            struct tpl_node *parts[3] = { NULL, NULL, NULL };
            int k = 0;
            bool slice = false;
            for (;;) {
                if (!is_op(p, ":") && !is_op(p, "]")) {
                    if (!(parts[k] = parse_expr(p, true)))
                        return NULL;
                }
                if (is_op(p, ":") && k < 2) {
                    slice = true;
                    k++;
                    adv(p);
                    continue;
                }
                break;
            }
            if (!expect_op(p, "]"))
                return NULL;
            struct tpl_node *a = node(p, slice ? E_SLICE : E_ITEM, t->pos);
            if (!a)
                return NULL;
            if (!slice && !parts[0])
                return fail_at(p, t->pos, "%s", "empty subscript");
            a->a = n;
            a->b = parts[0];
            a->c = parts[1];
            a->d = parts[2];
            n = a;
        } else if (is_op(p, "(")) {
            struct tpl_node *a = node(p, E_CALL, t->pos);
            if (!a)
                return NULL;
            a->a = n;
            if (!parse_call_args(p, a))
                return NULL;
            n = a;
        } else
            break;
    }
    p->depth -= links;
    return n;
}

static const char *dotted_name(struct parser *p)
{
    if (cur(p)->type != T_NAME)
        return unexpected(p, "a name");
    const char *s = tok_str(p, cur(p));
    adv(p);
    return s;
}

/* |filter(args) and "is [not] test args" chains. */
static struct tpl_node *parse_filters(struct parser *p, struct tpl_node *n)
{
    int links = 0;
    while (n && !p->rc) {
        const struct tpl_token *t = cur(p);
        if ((is_op(p, "|") || is_name(p, "is")) && !chain_link(p, &links))
            return NULL;
        if (is_op(p, "|")) {
            adv(p);
            struct tpl_node *f = node(p, E_FILTER, t->pos);
            if (!f || !(f->name = dotted_name(p)))
                return NULL;
            f->op = tpl_filter_find(f->name); /* unknown: an error when rendered (jinja2 defers it too) */
            f->a = n;
            if (is_op(p, "(") && !parse_call_args(p, f))
                return NULL;
            n = f;
        } else if (is_name(p, "is")) {
            adv(p);
            struct tpl_node *f = node(p, E_TEST, t->pos);
            if (!f)
                return NULL;
            if (is_name(p, "not")) {
                f->negate = true;
                adv(p);
            }
            if (!(f->name = dotted_name(p)))
                return NULL;
            if ((f->op = tpl_test_find(f->name)) < 0)
                return fail_at(p, t->pos, "no test named '%s'", f->name);
            f->a = n;
            const struct tpl_token *c = cur(p);
            if (is_op(p, "(")) {
                if (!parse_call_args(p, f))
                    return NULL;
            } else if ((c->type == T_NAME && !tok_is(c, T_NAME, "else") && !tok_is(c, T_NAME, "or") &&
                        !tok_is(c, T_NAME, "and") && !tok_is(c, T_NAME, "if") && !tok_is(c, T_NAME, "in") &&
                        !tok_is(c, T_NAME, "is") && !tok_is(c, T_NAME, "not")) ||
                       c->type == T_STRING || c->type == T_INT || c->type == T_FLOAT ||
                       tok_is(c, T_OP, "[") || tok_is(c, T_OP, "{")) {
                /* "x is divisibleby 3": one argument without parentheses. */
                struct tpl_node *a = parse_primary(p);
                if (!(a = parse_postfix(p, a)) || !add_arg(p, f, a, NULL))
                    return NULL;
            }
            n = f;
        } else
            break;
    }
    p->depth -= links;
    return n;
}

static struct tpl_node *parse_unary(struct parser *p, bool with_filter)
{
    if (!enter(p))
        return NULL;
    const struct tpl_token *t = cur(p);
    struct tpl_node *n;
    if (is_op(p, "-") || is_op(p, "+")) {
        adv(p);
        if (!(n = node(p, t->p[0] == '-' ? E_NEG : E_POS, t->pos)))
            return NULL;
        n->a = parse_unary(p, false);
        if (!n->a)
            return NULL;
    } else
        n = parse_primary(p);
    n = parse_postfix(p, n);
    if (with_filter)
        n = parse_filters(p, n);
    p->depth--;
    return n;
}

static struct tpl_node *binary(struct parser *p, int op, uint32_t pos, struct tpl_node *a, struct tpl_node *b)
{
    if (!a || !b)
        return NULL;
    struct tpl_node *n = node(p, E_BIN, pos);
    if (n) {
        n->op = op;
        n->a = a;
        n->b = b;
    }
    return n;
}

static struct tpl_node *parse_pow(struct parser *p)
{
    struct tpl_node *n = parse_unary(p, true);
    int links = 0;
    while (n && is_op(p, "**")) {
        uint32_t pos = cur(p)->pos;
        if (!chain_link(p, &links))
            return NULL;
        adv(p);
        n = binary(p, OP_POW, pos, n, parse_unary(p, true));
    }
    p->depth -= links;
    return n;
}

static struct tpl_node *parse_math2(struct parser *p)
{
    struct tpl_node *n = parse_pow(p);
    int links = 0;
    for (;;) {
        int op = is_op(p, "*") ? OP_MUL : is_op(p, "/") ? OP_DIV : is_op(p, "//") ? OP_FLOORDIV
                 : is_op(p, "%") ? OP_MOD : -1;
        if (!n || op < 0)
            break;
        uint32_t pos = cur(p)->pos;
        if (!chain_link(p, &links))
            return NULL;
        adv(p);
        n = binary(p, op, pos, n, parse_pow(p));
    }
    p->depth -= links;
    return n;
}

static struct tpl_node *parse_concat(struct parser *p)
{
    struct tpl_node *n = parse_math2(p);
    int links = 0;
    while (n && is_op(p, "~")) {
        uint32_t pos = cur(p)->pos;
        if (!chain_link(p, &links))
            return NULL;
        adv(p);
        n = binary(p, OP_CONCAT, pos, n, parse_math2(p));
    }
    p->depth -= links;
    return n;
}

static struct tpl_node *parse_math1(struct parser *p)
{
    struct tpl_node *n = parse_concat(p);
    int links = 0;
    for (;;) {
        int op = is_op(p, "+") ? OP_ADD : is_op(p, "-") ? OP_SUB : -1;
        if (!n || op < 0)
            break;
        uint32_t pos = cur(p)->pos;
        if (!chain_link(p, &links))
            return NULL;
        adv(p);
        n = binary(p, op, pos, n, parse_concat(p));
    }
    p->depth -= links;
    return n;
}

/* a < b < c is (a < b) and (b < c), as in Python. */
static struct tpl_node *parse_compare(struct parser *p)
{
    struct tpl_node *n = parse_math1(p), *prev = n, *result = NULL;
    int links = 0;
    for (;;) {
        uint32_t pos = cur(p)->pos;
        int op = is_op(p, "==") ? OP_EQ : is_op(p, "!=") ? OP_NE : is_op(p, "<") ? OP_LT
                 : is_op(p, ">") ? OP_GT : is_op(p, "<=") ? OP_LE : is_op(p, ">=") ? OP_GE
                 : is_name(p, "in") ? OP_IN : -1;
        if (op < 0 && is_name(p, "not") && tok_is(peek(p, 1), T_NAME, "in")) {
            op = OP_NOTIN;
            adv(p);
        }
        if (!prev || op < 0)
            break;
        if (!chain_link(p, &links))
            return NULL;
        adv(p);
        struct tpl_node *rhs = parse_math1(p);
        struct tpl_node *cmp = binary(p, op, pos, prev, rhs);
        if (!cmp)
            return NULL;
        if (result) {
            struct tpl_node *a = node(p, E_AND, pos);
            if (!a)
                return NULL;
            a->a = result;
            a->b = cmp;
            result = a;
        } else
            result = cmp;
        prev = rhs;
    }
    p->depth -= links;
    return result ? result : n;
}

static struct tpl_node *parse_not(struct parser *p)
{
    if (is_name(p, "not")) {
        if (!enter(p))
            return NULL;
        struct tpl_node *n = node(p, E_NOT, cur(p)->pos);
        adv(p);
        if (n && !(n->a = parse_not(p)))
            return NULL;
        p->depth--;
        return n;
    }
    return parse_compare(p);
}

static struct tpl_node *parse_and(struct parser *p)
{
    struct tpl_node *n = parse_not(p);
    int links = 0;
    while (n && is_name(p, "and")) {
        if (!chain_link(p, &links))
            return NULL;
        struct tpl_node *a = node(p, E_AND, cur(p)->pos);
        adv(p);
        if (!a || !(a->b = parse_not(p)))
            return NULL;
        a->a = n;
        n = a;
    }
    p->depth -= links;
    return n;
}

static struct tpl_node *parse_or(struct parser *p)
{
    struct tpl_node *n = parse_and(p);
    int links = 0;
    while (n && is_name(p, "or")) {
        if (!chain_link(p, &links))
            return NULL;
        struct tpl_node *a = node(p, E_OR, cur(p)->pos);
        adv(p);
        if (!a || !(a->b = parse_and(p)))
            return NULL;
        a->a = n;
        n = a;
    }
    p->depth -= links;
    return n;
}

/* with_cond false inside "for x in EXPR if cond": the if belongs to the loop. */
static struct tpl_node *parse_expr(struct parser *p, bool with_cond)
{
    if (!enter(p))
        return NULL;
    struct tpl_node *n = parse_or(p);
    int links = 0;
    while (with_cond && n && is_name(p, "if")) {
        if (!chain_link(p, &links))
            return NULL;
        struct tpl_node *c = node(p, E_COND, cur(p)->pos);
        adv(p);
        if (!c || !(c->a = parse_or(p)))
            return NULL;
        c->b = n;
        if (is_name(p, "else")) {
            adv(p);
            if (!(c->c = parse_expr(p, true)))
                return NULL;
        }
        n = c;
    }
    p->depth -= links + 1;
    return n;
}

/* "a, b = ..." at statement level: one expression or a tuple. */
static struct tpl_node *parse_tuple_expr(struct parser *p, bool with_cond)
{
    uint32_t pos = cur(p)->pos;
    struct tpl_node *e = parse_expr(p, with_cond);
    if (!e || !is_op(p, ","))
        return e;
    struct tpl_node *n = node(p, E_TUPLE, pos);
    if (!n || !add_arg(p, n, e, NULL))
        return NULL;
    while (is_op(p, ",")) {
        adv(p);
        if (cur(p)->type == T_BLOCK_END || cur(p)->type == T_VAR_END || is_name(p, "if"))
            break;
        if (!(e = parse_expr(p, with_cond)) || !add_arg(p, n, e, NULL))
            return NULL;
    }
    return n;
}

// ---- statements ---------------------------------------------------------------

static struct tpl_node *parse_body(struct parser *p, const char *const *stops, const char *expected);

static bool expect_block_end(struct parser *p)
{
    if (cur(p)->type == T_BLOCK_END) {
        adv(p);
        return true;
    }
    unexpected(p, "'%}'");
    return false;
}

/* Targets of for/set: name, or names separated by commas (parentheses allowed). */
static bool parse_targets(struct parser *p, struct tpl_node *n)
{
    bool paren = is_op(p, "(");
    if (paren)
        adv(p);
    for (;;) {
        if (cur(p)->type != T_NAME)
            return unexpected(p, "a variable name"), false;
        if (!grow(p, (void **)&n->names, n->nnames, sizeof *n->names))
            return false;
        n->names[n->nnames++] = tok_str(p, cur(p));
        adv(p);
        if (!is_op(p, ","))
            break;
        n->unpack = true;
        adv(p);
    }
    return !paren || expect_op(p, ")");
}

/* Macro / call-block parameters: (a, b=default, ...). */
static bool parse_params(struct parser *p, struct tpl_node *n)
{
    if (!expect_op(p, "("))
        return false;
    while (!is_op(p, ")")) {
        if (n->nnames && !expect_op(p, ","))
            return false;
        if (cur(p)->type != T_NAME)
            return unexpected(p, "a parameter name"), false;
        if (!grow(p, (void **)&n->names, n->nnames, sizeof *n->names) ||
            !grow(p, (void **)&n->defaults, n->nnames, sizeof *n->defaults))
            return false;
        n->names[n->nnames] = tok_str(p, cur(p));
        n->defaults[n->nnames] = NULL;
        adv(p);
        if (is_op(p, "=")) {
            adv(p);
            if (!(n->defaults[n->nnames] = parse_expr(p, true)))
                return false;
        } else if (n->nnames && n->defaults[n->nnames - 1])
            return fail_at(p, cur(p)->pos, "%s", "non-default argument follows default argument"), false;
        n->nnames++;
    }
    adv(p);
    return true;
}

/* After {% NAME: the statement; cur(p) is the keyword. */
static struct tpl_node *parse_statement(struct parser *p)
{
    const struct tpl_token *kw = cur(p);
    uint32_t pos = kw->pos;
    struct tpl_node *n = NULL;
    if (kw->type != T_NAME)
        return unexpected(p, "a statement name");
    if (!enter(p))
        return NULL;
    if (is_name(p, "if")) {
        adv(p);
        struct tpl_node *top = NULL, *last = NULL;
        for (;;) {
            struct tpl_node *c = node(p, N_IF, pos);
            if (!c || !(c->a = parse_expr(p, true)) || !expect_block_end(p))
                return NULL;
            static const char *const stops[] = { "elif", "else", "endif", NULL };
            c->c = parse_body(p, stops, "'elif', 'else' or 'endif'");
            if (p->rc)
                return NULL;
            if (last)
                last->d = c;
            else
                top = c;
            last = c;
            pos = cur(p)->pos;
            if (is_name(p, "elif")) {
                adv(p);
                continue;
            }
            if (is_name(p, "else")) {
                /* The else body is wrapped in an N_BLOCK so that an if at its
                 * start is not taken for an elif. */
                struct tpl_node *e = node(p, N_BLOCK, pos);
                adv(p);
                static const char *const stops2[] = { "endif", NULL };
                if (!e || !expect_block_end(p))
                    return NULL;
                e->c = parse_body(p, stops2, "'endif'");
                if (p->rc)
                    return NULL;
                last->d = e;
            }
            adv(p); /* endif */
            break;
        }
        n = top;
    } else if (is_name(p, "for")) {
        adv(p);
        if (!(n = node(p, N_FOR, pos)) || !parse_targets(p, n))
            return NULL;
        if (!is_name(p, "in"))
            return unexpected(p, "'in'");
        adv(p);
        if (!(n->a = parse_tuple_expr(p, false)))
            return NULL;
        if (is_name(p, "if")) {
            adv(p);
            if (!(n->b = parse_expr(p, true)))
                return NULL;
        }
        if (is_name(p, "recursive"))
            return fail_at(p, cur(p)->pos, "%s", "recursive for-loops are not supported");
        if (!expect_block_end(p))
            return NULL;
        static const char *const stops[] = { "else", "endfor", NULL };
        p->loops++;
        n->c = parse_body(p, stops, "'else' or 'endfor'");
        p->loops--;
        if (p->rc)
            return NULL;
        if (is_name(p, "else")) {
            adv(p);
            static const char *const stops2[] = { "endfor", NULL };
            if (!expect_block_end(p))
                return NULL;
            int saved = p->loops;
            p->loops = 0; /* break in the else part leaves no loop */
            n->d = parse_body(p, stops2, "'endfor'");
            p->loops = saved;
            if (p->rc)
                return NULL;
        }
        adv(p);
    } else if (is_name(p, "set")) {
        adv(p);
        if (!(n = node(p, N_SET, pos)))
            return NULL;
        if (cur(p)->type == T_NAME && tok_is(peek(p, 1), T_OP, ".") && peek(p, 2)->type == T_NAME) {
            n->name = tok_str(p, cur(p));
            adv(p);
            adv(p);
            n->attr = tok_str(p, cur(p));
            adv(p);
        } else if (!parse_targets(p, n))
            return NULL;
        if (is_op(p, "=")) {
            adv(p);
            if (!(n->a = parse_tuple_expr(p, true)))
                return NULL;
        } else if (cur(p)->type == T_BLOCK_END && !n->attr && !n->unpack) {
            n->kind = N_SETBLOCK;
            adv(p);
            static const char *const stops[] = { "endset", NULL };
            n->c = parse_body(p, stops, "'endset'");
            if (p->rc)
                return NULL;
            adv(p);
            if (!expect_block_end(p))
                return NULL;
            p->depth--;
            return n;
        } else
            return unexpected(p, "'='");
    } else if (is_name(p, "macro")) {
        adv(p);
        if (!(n = node(p, N_MACRO, pos)))
            return NULL;
        if (cur(p)->type != T_NAME)
            return unexpected(p, "a macro name");
        n->name = tok_str(p, cur(p));
        adv(p);
        if (!parse_params(p, n) || !expect_block_end(p))
            return NULL;
        static const char *const stops[] = { "endmacro", NULL };
        int saved = p->loops;
        p->loops = 0;
        n->c = parse_body(p, stops, "'endmacro'");
        p->loops = saved;
        if (p->rc)
            return NULL;
        adv(p);
        if (cur(p)->type == T_NAME)
            adv(p); /* {% endmacro name %} */
    } else if (is_name(p, "call")) {
        adv(p);
        if (!(n = node(p, N_CALLBLOCK, pos)))
            return NULL;
        if (is_op(p, "(") && !parse_params(p, n))
            return NULL;
        if (!(n->a = parse_expr(p, true)))
            return NULL;
        if (n->a->kind != E_CALL)
            return fail_at(p, pos, "%s", "expected a macro call after 'call'");
        if (!expect_block_end(p))
            return NULL;
        static const char *const stops[] = { "endcall", NULL };
        n->c = parse_body(p, stops, "'endcall'");
        if (p->rc)
            return NULL;
        adv(p);
    } else if (is_name(p, "break") || is_name(p, "continue")) {
        bool brk = is_name(p, "break");
        if (!p->loops)
            return fail_at(p, pos, "'%s' outside of a for-loop", brk ? "break" : "continue");
        adv(p);
        n = node(p, brk ? N_BREAK : N_CONTINUE, pos);
    } else if (is_name(p, "generation")) {
        /* transformers' {% generation %} marks assistant text; it renders its body. */
        adv(p);
        if (!(n = node(p, N_BLOCK, pos)) || !expect_block_end(p))
            return NULL;
        static const char *const stops[] = { "endgeneration", NULL };
        n->c = parse_body(p, stops, "'endgeneration'");
        if (p->rc)
            return NULL;
        adv(p);
    } else {
        char name[48];
        snprintf(name, sizeof name, "%.*s", (int)(kw->n < 40 ? kw->n : 40), kw->p);
        return fail_at(p, pos, "unknown or unexpected tag '%s'", name);
    }
    if (!n || !expect_block_end(p))
        return NULL;
    p->depth--;
    return n;
}

/* Statements until {% STOP (cursor left on STOP) or end of template. */
static struct tpl_node *parse_body(struct parser *p, const char *const *stops, const char *expected)
{
    struct tpl_node *head = NULL, **tail = &head;
    for (;;) {
        const struct tpl_token *t = cur(p);
        struct tpl_node *n = NULL;
        if (t->type == T_EOF) {
            if (stops)
                return unexpected(p, expected);
            return head;
        }
        if (t->type == T_TEXT) {
            if ((n = node(p, N_TEXT, t->pos)))
                n->lit = tpl_str(t->p, t->n);
            adv(p);
        } else if (t->type == T_VAR_BEGIN) {
            adv(p);
            if (!(n = node(p, N_OUT, t->pos)) || !(n->a = parse_tuple_expr(p, true)))
                return NULL;
            if (cur(p)->type != T_VAR_END)
                return unexpected(p, "'}}'");
            adv(p);
        } else if (t->type == T_BLOCK_BEGIN) {
            adv(p);
            for (int i = 0; stops && stops[i]; i++)
                if (is_name(p, stops[i]))
                    return head;
            n = parse_statement(p);
        } else
            return unexpected(p, "text or a tag");
        if (!n)
            return NULL;
        *tail = n;
        tail = &n->next;
    }
}

int tpl_parse_tokens(struct tpl *t, const struct tpl_token *toks, size_t ntoks, char *err, size_t errlen)
{
    struct parser p = { .t = t, .tk = toks, .n = ntoks, .err = err, .errlen = errlen };
    t->body = parse_body(&p, NULL, NULL);
    return p.rc;
}
