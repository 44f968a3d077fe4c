/* tpl_int.h - what the files of the Jinja renderer share: the arena, the
 * value type, string builders, tokens and syntax-tree nodes. Internal to
 * llm/template/; everything else includes only llm/template/template.h.
 * Values and nodes live in arenas: nothing is freed one by one, a template's
 * tree goes with tpl_free and a render's values go when the render ends. */
#ifndef OMNI_TPL_INT_H
#define OMNI_TPL_INT_H

#include "llm/template/template.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

// ---- arena ------------------------------------------------------------------

struct tpl_chunk;
struct tpl_arena {
    struct tpl_chunk *head;
    size_t used_bytes; /* all chunks together */
    size_t max_bytes;  /* 0: no cap */
};
/* Zeroed, 16-byte aligned memory; NULL when out of memory or over the cap. */
void *tpl_arena_alloc(struct tpl_arena *a, size_t n);
char *tpl_arena_strdup(struct tpl_arena *a, const char *s, size_t n);
void tpl_arena_free(struct tpl_arena *a);

// ---- values -------------------------------------------------------------------

enum tpl_vtype {
    TV_UNDEF,  /* s: the message using it gives ("'x' is undefined"), may be NULL */
    TV_NONE, TV_BOOL, TV_INT, TV_FLOAT,
    TV_STR,    /* s: UTF-8 bytes, not NUL-terminated */
    TV_LIST,   /* l (tuples too: l->tuple) */
    TV_DICT,   /* d */
    TV_NS,     /* d: namespace(), the one mutable object */
    TV_LOOP,   /* loop: the for-loop variable */
    TV_MACRO,  /* m */
    TV_FUNC,   /* fn: a global function (range, namespace, raise_exception, ...) */
    TV_METHOD, /* meth: a method bound to its object ("a b".split) */
};

struct tpl_list;
struct tpl_dict;
struct tpl_loop;
struct tpl_macro;
struct tpl_method;

struct tpl_val {
    enum tpl_vtype t;
    union {
        bool b;
        int64_t i;
        double f;
        struct { const char *p; size_t n; } s;
        struct tpl_list *l;
        struct tpl_dict *d;
        struct tpl_loop *loop;
        struct tpl_macro *m;
        int fn;
        struct tpl_method *meth;
    };
};

struct tpl_list {
    size_t n;
    bool tuple; /* prints as (a, b) */
    struct tpl_val v[];
};

/* Insertion-ordered; keys compared with tpl_equal (small dicts: linear). */
struct tpl_dict {
    size_t n, cap;
    struct tpl_val *k, *v;
};

struct tpl_loop {
    struct tpl_list *items;
    size_t index0;
    int depth;
};

struct tpl_scope;
struct tpl_node;
struct tpl_macro {
    const struct tpl_node *def;   /* N_MACRO or N_CALLBLOCK */
    struct tpl_scope *closure;    /* where it was defined */
    struct tpl_val caller;        /* TV_MACRO for the body of {% call %}, else undefined */
};

struct tpl_method {
    struct tpl_val self;
    const char *name;
};

/* Call arguments: n positional values, then nkw keyword values. */
struct tpl_args {
    int n, nkw;
    const struct tpl_val *v;
    const char *const *kwname;
    const struct tpl_val *kw;
};

// ---- growable byte buffer (malloc), with a size cap ---------------------------

struct tpl_sb {
    char *p;
    size_t n, cap, max; /* max 0: no cap */
};
int tpl_sb_put(struct tpl_sb *b, const char *s, size_t n); /* 0, OMNI_ERR_LIMIT or _NOMEM */
int tpl_sb_putc(struct tpl_sb *b, char c);
void tpl_sb_free(struct tpl_sb *b);

// ---- syntax tree --------------------------------------------------------------

enum tpl_nkind {
    /* statements */
    N_TEXT, N_OUT, N_IF, N_FOR, N_SET, N_SETBLOCK, N_MACRO, N_CALLBLOCK, N_BREAK,
    N_CONTINUE, N_BLOCK,
    /* expressions */
    E_LIT, E_NAME, E_LIST, E_TUPLE, E_DICT, E_ATTR, E_ITEM, E_SLICE, E_CALL, E_FILTER,
    E_TEST, E_NEG, E_POS, E_NOT, E_BIN, E_AND, E_OR, E_COND,
};

/* Binary operators (E_BIN op). */
enum tpl_binop {
    OP_ADD, OP_SUB, OP_MUL, OP_DIV, OP_FLOORDIV, OP_MOD, OP_POW, OP_CONCAT,
    OP_EQ, OP_NE, OP_LT, OP_GT, OP_LE, OP_GE, OP_IN, OP_NOTIN,
};

struct tpl_node {
    enum tpl_nkind kind;
    int op;            /* E_BIN operator; E_FILTER/E_TEST: table index */
    uint32_t pos;      /* byte offset in the source, for messages */
    struct tpl_node *next;           /* next statement of a body */
    struct tpl_node *a, *b, *c, *d;  /* operands; N_IF/N_FOR: c body, d else */
    struct tpl_node **args;          /* call/filter/test args, list items, dict k,v pairs */
    const char **kw;                 /* kw[i]: keyword of args[i], or NULL */
    int nargs;
    const char *name;  /* E_NAME, E_ATTR, E_FILTER, E_TEST, N_SET target, N_MACRO */
    const char *attr;  /* N_SET of ns.attr */
    const char **names;              /* N_FOR/N_SET targets, macro parameters */
    struct tpl_node **defaults;      /* macro parameter defaults (NULL: none) */
    int nnames;
    bool negate;       /* E_TEST: "is not" */
    bool unpack;       /* N_FOR/N_SET: target was a tuple */
    struct tpl_val lit;
};

struct tpl {
    struct tpl_arena arena;
    char *src;        /* normalized source (newlines), NUL-terminated */
    size_t len;
    struct tpl_node *body;
};

/* Lexer + parser (lexer.c, parser.c). */
enum tpl_tok { T_EOF, T_TEXT, T_BLOCK_BEGIN, T_BLOCK_END, T_VAR_BEGIN, T_VAR_END,
               T_NAME, T_STRING, T_INT, T_FLOAT, T_OP };
struct tpl_token {
    enum tpl_tok type;
    uint32_t pos;
    const char *p;   /* T_TEXT/T_NAME/T_OP: bytes; T_STRING: decoded bytes */
    size_t n;
    int64_t i;
    double f;
};
/* Normalizes src into t->src (newlines as jinja2: \r\n, \r, ... -> \n, one
 * trailing newline dropped) and cuts it into tokens (*toks: malloc'd). */
int tpl_lex(struct tpl *t, const char *src, size_t len, struct tpl_token **toks,
            size_t *ntoks, char *err, size_t errlen);
int tpl_parse_tokens(struct tpl *t, const struct tpl_token *toks, size_t ntoks, char *err,
                     size_t errlen);
/* "line L, column C" of a byte offset into buf. */
void tpl_position(const struct tpl *t, uint32_t pos, int *line, int *col);

// ---- render context (eval.c) --------------------------------------------------

struct tpl_ctx {
    const struct tpl *t;
    struct tpl_arena arena;     /* this render's values */
    struct tpl_sb *out;         /* where text goes now (macros capture their own) */
    struct tpl_limits lim;
    uint64_t iterations;
    int depth;                  /* macro calls, or levels of a value being walked */
    int recursion;              /* eval and exec_stmt frames on the stack */
    uint32_t pos;               /* node being evaluated, for messages */
    char *err;
    size_t errlen;
};

/* Record an error (with the line of c->pos unless it came from raise_exception)
 * and return code. */
int tpl_error(struct tpl_ctx *c, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
#define TPL_NOMEM(c) tpl_error((c), OMNI_ERR_NOMEM, "out of memory (or over the memory limit)")

/* values.c */
struct tpl_val tpl_undef(const char *msg);
struct tpl_val tpl_none(void);
struct tpl_val tpl_bool(bool b);
struct tpl_val tpl_int(int64_t i);
struct tpl_val tpl_float(double f);
struct tpl_val tpl_str(const char *p, size_t n);
int tpl_str_new(struct tpl_ctx *c, const char *p, size_t n, struct tpl_val *out);
int tpl_str_sb(struct tpl_ctx *c, struct tpl_sb *b, struct tpl_val *out); /* frees b */
struct tpl_list *tpl_list_new(struct tpl_ctx *c, size_t n);
struct tpl_dict *tpl_dict_new(struct tpl_ctx *c);
int tpl_dict_set(struct tpl_ctx *c, struct tpl_dict *d, struct tpl_val k, struct tpl_val v);
const struct tpl_val *tpl_dict_get(const struct tpl_dict *d, const char *key, size_t n);
const struct tpl_val *tpl_dict_find(const struct tpl_dict *d, struct tpl_val key);
const char *tpl_type_name(struct tpl_val v);
bool tpl_truthy(struct tpl_val v);
bool tpl_equal(struct tpl_val a, struct tpl_val b);
/* -1/0/1 into *r; error for values Python cannot order. */
int tpl_compare(struct tpl_ctx *c, struct tpl_val a, struct tpl_val b, int *r);
/* str() and repr() as Python prints them. */
int tpl_write_str(struct tpl_ctx *c, struct tpl_sb *b, struct tpl_val v);
int tpl_write_repr(struct tpl_ctx *c, struct tpl_sb *b, struct tpl_val v);
int tpl_to_str(struct tpl_ctx *c, struct tpl_val v, struct tpl_val *out);
/* json.dumps options: indent < 0 for none; separators; ensure_ascii escapes
 * every non-ASCII character as \uXXXX (surrogate pairs above U+FFFF);
 * sort_keys orders object keys (str with str, numbers with numbers). */
struct tpl_json_fmt {
    int indent;
    const char *item_sep, *key_sep;
    bool ensure_ascii, sort_keys;
};
int tpl_write_json(struct tpl_ctx *c, struct tpl_sb *b, struct tpl_val v, const struct tpl_json_fmt *f, int level);
/* JSON text -> value (cJSON); error message names what is wrong. */
int tpl_from_json(struct tpl_ctx *c, const char *json, const char *what, struct tpl_val *out);
/* Iterate: list items, dict keys, string characters; undefined: empty. */
int tpl_iterable(struct tpl_ctx *c, struct tpl_val v, struct tpl_list **out);
/* Length in Python terms (characters for strings); -1 if it has none. */
int64_t tpl_length(struct tpl_val v);
/* UTF-8 helpers: characters of s as offsets (n+1 entries); returns count. */
size_t tpl_utf8_offsets(struct tpl_ctx *c, const char *p, size_t n, size_t **offs);

/* eval.c - attribute/item access with jinja2's fallbacks, calls. */
int tpl_getattr(struct tpl_ctx *c, struct tpl_val obj, const char *name, struct tpl_val *out);
int tpl_getitem(struct tpl_ctx *c, struct tpl_val obj, struct tpl_val key, struct tpl_val *out);
int tpl_call(struct tpl_ctx *c, struct tpl_val fn, const struct tpl_args *a, struct tpl_val *out);
/* Render c->t into c->out with the top-level variables vars. */
int tpl_eval_template(struct tpl_ctx *c, struct tpl_dict *vars);
/* Error for using an undefined value the way jinja2's Undefined fails. */
int tpl_undef_error(struct tpl_ctx *c, struct tpl_val v);

/* filters.c - filter/test/method/global tables. */
int tpl_filter_find(const char *name);   /* -1 if unknown */
int tpl_test_find(const char *name);
int tpl_filter_apply(struct tpl_ctx *c, int id, struct tpl_val v, const struct tpl_args *a,
                     struct tpl_val *out);
int tpl_test_apply(struct tpl_ctx *c, int id, struct tpl_val v, const struct tpl_args *a,
                   bool *out);
int tpl_method_call(struct tpl_ctx *c, const struct tpl_method *m, const struct tpl_args *a,
                    struct tpl_val *out);
bool tpl_has_method(struct tpl_val self, const char *name);
int tpl_global_find(const char *name);   /* TV_FUNC id, -1 if none */
int tpl_global_call(struct tpl_ctx *c, int fn, const struct tpl_args *a, struct tpl_val *out);
/* Argument i (positional) or keyword name; NULL when not given. */
const struct tpl_val *tpl_arg(const struct tpl_args *a, int i, const char *name);

#endif
