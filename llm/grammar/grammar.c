/* grammar.c - GBNF parser, byte-level pushdown matcher and token masks.
 *
 * Parsing lowers every character class and literal to single-byte terminals
 * (UTF-8 sequences as chains of byte sets), and every group and repetition to
 * generated rules, so the matcher only knows "byte set" and "rule call". A
 * matcher state is a set of interned call stacks; states are interned too and
 * transitions are memoized per byte (a lazy DFA), so a mask is one pruned
 * walk of the vocabulary's byte trie, cached per state. */
#include "grammar.h"

#include "llm/tokenizer.h"
#include "src/core/omni.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define GRAMMAR_MAX_MASKS 1024        /* cached masks per matcher */
#define TOKEN_MAX_BYTES 1024

/* Elements: kind in the low 2 bits, value above. */
enum { E_END = 0, E_BYTES = 1, E_REF = 2 };
#define EL(kind, v) ((int32_t)(((uint32_t)(v) << 2) | (kind)))
#define EL_KIND(e) ((e) & 3)
#define EL_VAL(e) ((int32_t)((uint32_t)(e) >> 2))

struct byteset { uint32_t w[8]; };

struct grammar {
    int refs;                /* atomic */
    struct grammar_limits lim; /* the matcher's limits come from here */
    int32_t *el;             /* [n_el] alternatives, each ended by E_END */
    int n_el;
    int32_t *alt;            /* [n_alt] start of each alternative */
    int32_t *rule_alt;       /* [n_rules + 1] first alternative of each rule */
    int n_rules;
    struct byteset *sets;    /* [n_sets] */
    int n_sets;
    int root;
    int32_t *minrest;        /* [n_el] fewest bytes from element i to the end of its
                                alternative (GRAMMAR_NO_END: none), for closing masks */
};

// ---- parsing ----------------------------------------------------------------

struct prule {
    char *name;
    size_t name_len;
    int32_t *el;             /* alternatives, each ended by E_END */
    int n, cap;
    size_t def_pos;          /* where it was defined (or first used) */
    bool defined, generated;
    int n_sub;               /* generated children, for their names */
};

struct cls {                 /* a code-point class, ranges sorted and merged */
    uint32_t (*r)[2];
    int n;
    int rule;                /* its lowered rule or byte set element */
};

/* Open-addressing index into one of the parser's arrays: a slot holds an
 * item's id + 1 (0: empty) and its hash, so growing never rehashes items.
 * It makes name, byte-set and class lookups O(1): a schema compiled to
 * 100,000 rules took 45 s when each lookup scanned every rule. */
struct hslot { uint32_t hash; int32_t id1; };
struct htab { struct hslot *slot; uint32_t cap, n; };

struct parser {
    const char *s;
    size_t len, pos;
    struct grammar_limits lim;
    struct prule *rules;
    int n_rules, cap_rules;
    struct htab rule_tab;    /* named (not generated) rules by name */
    struct byteset *sets;
    int n_sets, cap_sets;
    struct htab set_tab;
    struct cls *classes;     /* lowered classes, reused by equal ones */
    int n_classes, cap_classes;
    struct htab class_tab;
    size_t n_total;          /* elements in all rules */
    size_t n_alts;           /* alternatives in all rules (E_END elements) */
    int depth;               /* groups open around p->pos */
    char *err;
    size_t errlen;
    int code;                /* enum omni_err of the first error */
    bool failed;
};

struct grammar_limits grammar_default_limits(void)
{
    return (struct grammar_limits){
        .max_nesting = 256,
        .max_rules = 1 << 18,
        .max_alternatives = 1 << 20,
        .max_elements = 1 << 22,
        .max_repeat = 10000,
        .max_states = 1 << 16,
        .max_stack_nodes = 1 << 22,
        .max_closure = 1 << 20,
    };
}

static uint32_t hash_bytes(const void *data, size_t n)
{
    const unsigned char *b = data;
    uint32_t h = 2166136261u; /* FNV-1a */
    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * 16777619u;
    return h;
}

/* Room for one more entry (load at most 1/2); false when out of memory. */
static bool htab_reserve(struct htab *t)
{
    if ((t->n + 1) * 2 <= t->cap)
        return true;
    const uint32_t nc = t->cap ? t->cap * 2 : 256;
    struct hslot *s = calloc(nc, sizeof *s);
    if (!s)
        return false;
    for (uint32_t i = 0; i < t->cap; i++) {
        if (!t->slot[i].id1)
            continue;
        uint32_t h = t->slot[i].hash & (nc - 1);
        while (s[h].id1)
            h = (h + 1) & (nc - 1);
        s[h] = t->slot[i];
    }
    free(t->slot);
    t->slot = s;
    t->cap = nc;
    return true;
}

/* The slot where hash h with an equal item is, or the empty slot where it
 * goes; eq(p, id, key) compares. The table must have a free slot. */
static struct hslot *htab_find(struct htab *t, uint32_t h, const struct parser *p, const void *key,
                               bool (*eq)(const struct parser *, int32_t, const void *))
{
    const uint32_t mask = t->cap - 1;
    for (uint32_t i = h & mask;; i = (i + 1) & mask) {
        struct hslot *s = &t->slot[i];
        if (!s->id1 || (s->hash == h && eq(p, s->id1 - 1, key)))
            return s;
    }
}

static bool grow(void **p, int *cap, int need, size_t size)
{
    if (need <= *cap)
        return true;
    int nc = *cap ? *cap : 16;
    while (nc < need)
        nc *= 2;
    void *q = realloc(*p, (size_t)nc * size);
    if (!q)
        return false;
    *p = q;
    *cap = nc;
    return true;
}

__attribute__((format(printf, 3, 4)))
static int perr(struct parser *p, size_t at, const char *fmt, ...)
{
    if (p->failed)
        return -1;
    p->failed = true;
    int line = 1, col = 1;
    for (size_t i = 0; i < at && i < p->len; i++) {
        if (p->s[i] == '\n') {
            line++;
            col = 1;
        } else {
            col++;
        }
    }
    char msg[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    omni_fail(p->err, p->errlen, p->code ? p->code : OMNI_ERR_FORMAT, "grammar: line %d col %d: %s",
              line, col, msg);
    return -1;
}

static int nomem(struct parser *p)
{
    if (!p->failed)
        p->code = OMNI_ERR_NOMEM;
    return perr(p, p->pos, "out of memory");
}

/* A size limit of grammar_limits was passed: the message names it. */
__attribute__((format(printf, 3, 4)))
static int plimit(struct parser *p, size_t at, const char *fmt, ...)
{
    if (p->failed)
        return -1;
    char msg[200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    p->code = OMNI_ERR_LIMIT;
    return perr(p, at, "%s", msg);
}

static int push_el(struct parser *p, int rule, int32_t e)
{
    struct prule *r = &p->rules[rule];
    if (++p->n_total > (size_t)p->lim.max_elements)
        return plimit(p, p->pos, "grammar too large: more than %d elements (limit max_elements)",
                      p->lim.max_elements);
    if (EL_KIND(e) == E_END && ++p->n_alts > (size_t)p->lim.max_alternatives)
        return plimit(p, p->pos, "grammar too large: more than %d alternatives (limit max_alternatives)",
                      p->lim.max_alternatives);
    if (!grow((void **)&r->el, &r->cap, r->n + 1, sizeof *r->el))
        return nomem(p);
    r->el[r->n++] = e;
    return 0;
}

static bool rule_eq(const struct parser *p, int32_t id, const void *key)
{
    const struct prule *r = &p->rules[id], *k = key;
    return r->name_len == k->name_len && !memcmp(r->name, k->name, k->name_len);
}

static int new_rule(struct parser *p, const char *name, size_t nlen, size_t at, bool generated)
{
    if (p->n_rules >= p->lim.max_rules)
        return plimit(p, at, "grammar too large: more than %d rules (limit max_rules)",
                      p->lim.max_rules);
    if (!grow((void **)&p->rules, &p->cap_rules, p->n_rules + 1, sizeof *p->rules) ||
        (!generated && !htab_reserve(&p->rule_tab)))
        return nomem(p);
    struct prule *r = &p->rules[p->n_rules];
    memset(r, 0, sizeof *r);
    if (!(r->name = malloc(nlen + 1)))
        return nomem(p);
    memcpy(r->name, name, nlen);
    r->name[nlen] = 0;
    r->name_len = nlen;
    r->def_pos = at;
    r->generated = generated;
    if (!generated) {
        const uint32_t h = hash_bytes(name, nlen);
        struct hslot *s = htab_find(&p->rule_tab, h, p, r, rule_eq);
        *s = (struct hslot){ h, p->n_rules + 1 };
        p->rule_tab.n++;
    }
    return p->n_rules++;
}

/* A generated rule named after its parent: "parent-3". */
static int sub_rule(struct parser *p, int parent)
{
    char name[160];
    int n = snprintf(name, sizeof name, "%.120s-%d", p->rules[parent].name,
                     ++p->rules[parent].n_sub);
    int r = new_rule(p, name, (size_t)n, p->pos, true);
    if (r >= 0)
        p->rules[r].defined = true;
    return r;
}

/* The named rule name[nlen], declared (undefined) on first use. */
static int find_rule(struct parser *p, const char *name, size_t nlen, size_t at)
{
    if (p->rule_tab.cap) {
        const struct prule key = { .name = (char *)name, .name_len = nlen };
        const struct hslot *s = htab_find(&p->rule_tab, hash_bytes(name, nlen), p, &key, rule_eq);
        if (s->id1)
            return s->id1 - 1;
    }
    return new_rule(p, name, nlen, at, false);
}

static bool set_eq(const struct parser *p, int32_t id, const void *key)
{
    return !memcmp(&p->sets[id], key, sizeof p->sets[id]);
}

static int32_t add_set(struct parser *p, const struct byteset *b)
{
    if (!htab_reserve(&p->set_tab))
        return nomem(p);
    const uint32_t h = hash_bytes(b, sizeof *b);
    struct hslot *s = htab_find(&p->set_tab, h, p, b, set_eq);
    if (s->id1)
        return EL(E_BYTES, s->id1 - 1);
    if (!grow((void **)&p->sets, &p->cap_sets, p->n_sets + 1, sizeof *p->sets))
        return nomem(p);
    p->sets[p->n_sets] = *b;
    *s = (struct hslot){ h, p->n_sets + 1 };
    p->set_tab.n++;
    return EL(E_BYTES, p->n_sets++);
}

static void set_range(struct byteset *b, unsigned lo, unsigned hi)
{
    for (unsigned c = lo; c <= hi; c++)
        b->w[c >> 5] |= 1u << (c & 31);
}

static int32_t byte_el(struct parser *p, unsigned c)
{
    struct byteset b = { { 0 } };
    set_range(&b, c, c);
    return add_set(p, &b);
}

static int utf8_encode(uint32_t c, unsigned char *out)
{
    if (c < 0x80) {
        out[0] = (unsigned char)c;
        return 1;
    }
    if (c < 0x800) {
        out[0] = (unsigned char)(0xC0 | (c >> 6));
        out[1] = (unsigned char)(0x80 | (c & 0x3F));
        return 2;
    }
    if (c < 0x10000) {
        out[0] = (unsigned char)(0xE0 | (c >> 12));
        out[1] = (unsigned char)(0x80 | ((c >> 6) & 0x3F));
        out[2] = (unsigned char)(0x80 | (c & 0x3F));
        return 3;
    }
    out[0] = (unsigned char)(0xF0 | (c >> 18));
    out[1] = (unsigned char)(0x80 | ((c >> 12) & 0x3F));
    out[2] = (unsigned char)(0x80 | ((c >> 6) & 0x3F));
    out[3] = (unsigned char)(0x80 | (c & 0x3F));
    return 4;
}

/* One UTF-8 character of the grammar text at p->pos; -1 if invalid. */
static int32_t utf8_next(struct parser *p)
{
    const unsigned char *s = (const unsigned char *)p->s + p->pos;
    size_t left = p->len - p->pos;
    uint32_t c = s[0];
    int n = c < 0x80 ? 1 : (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 0;
    if (!n || (size_t)n > left)
        return -1;
    if (n > 1) {
        c &= 0x3F >> (n - 1);
        for (int i = 1; i < n; i++) {
            if ((s[i] & 0xC0) != 0x80)
                return -1;
            c = (c << 6) | (s[i] & 0x3F);
        }
        static const uint32_t min[5] = { 0, 0, 0x80, 0x800, 0x10000 };
        if (c < min[n] || c > 0x10FFFF || (c >= 0xD800 && c <= 0xDFFF))
            return -1;
    }
    p->pos += (size_t)n;
    return (int32_t)c;
}

static int hexval(char c)
{
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10
         : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

/* A character inside a literal or class, escapes decoded; -1 on error. */
static int32_t parse_char(struct parser *p)
{
    const size_t at = p->pos;
    if (p->pos >= p->len)
        return perr(p, at, "unexpected end of grammar");
    if (p->s[p->pos] != '\\') {
        int32_t c = utf8_next(p);
        return c < 0 ? perr(p, at, "invalid UTF-8") : c;
    }
    if (++p->pos >= p->len)
        return perr(p, at, "unexpected end after '\\'");
    const char e = p->s[p->pos++];
    int digits = e == 'x' ? 2 : e == 'u' ? 4 : e == 'U' ? 8 : 0;
    if (digits) {
        uint32_t v = 0;
        for (int i = 0; i < digits; i++) {
            int h = p->pos < p->len ? hexval(p->s[p->pos]) : -1;
            if (h < 0)
                return perr(p, p->pos, "expected %d hex digits after '\\%c'", digits, e);
            v = v * 16 + (uint32_t)h;
            p->pos++;
        }
        if (v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF))
            return perr(p, at, "escape '\\%c' is not a Unicode scalar value", e);
        return (int32_t)v;
    }
    switch (e) {
    case 'n': return '\n';
    case 'r': return '\r';
    case 't': return '\t';
    case '0': return 0;
    case '\\': case '"': case '\'': case '[': case ']': case '-': case '^': case '/':
        return e;
    default:
        return perr(p, at, "unknown escape '\\%c'", e);
    }
}

/* Skip blanks and comments; newlines too when nl. */
static void skip_space(struct parser *p, bool nl)
{
    while (p->pos < p->len) {
        const char c = p->s[p->pos];
        if (c == ' ' || c == '\t' || (nl && (c == '\n' || c == '\r'))) {
            p->pos++;
        } else if (c == '#') {
            while (p->pos < p->len && p->s[p->pos] != '\n')
                p->pos++;
        } else {
            break;
        }
    }
}

static bool is_name_char(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           c == '-' || c == '_';
}

static int cmp_range(const void *a, const void *b)
{
    const uint32_t *x = a, *y = b;
    return x[0] < y[0] ? -1 : x[0] > y[0];
}

/* Sort and merge ranges in place, then complement when neg; surrogates are
 * removed (they are not characters, so UTF-8 never holds them). */
static int normalize_ranges(uint32_t (**rp)[2], int *np, int *cap, bool neg)
{
    uint32_t (*r)[2] = *rp;
    int n = *np;
    qsort(r, (size_t)n, sizeof *r, cmp_range);
    int m = 0;
    for (int i = 0; i < n; i++) {
        if (m && r[i][0] <= r[m - 1][1] + 1) {
            if (r[i][1] > r[m - 1][1])
                r[m - 1][1] = r[i][1];
        } else {
            r[m][0] = r[i][0];
            r[m][1] = r[i][1];
            m++;
        }
    }
    if (neg) {
        uint32_t (*c)[2] = malloc((size_t)(m + 1) * sizeof *c);
        if (!c)
            return -1;
        int k = 0;
        uint32_t next = 0;
        for (int i = 0; i < m; i++) {
            if (r[i][0] > next) {
                c[k][0] = next;
                c[k++][1] = r[i][0] - 1;
            }
            next = r[i][1] + 1;
        }
        if (next <= 0x10FFFF) {
            c[k][0] = next;
            c[k++][1] = 0x10FFFF;
        }
        free(r);
        r = c;
        m = k;
        *cap = m + 1;
    }
    /* cut the surrogate block out */
    int k = 0;
    uint32_t (*o)[2] = malloc((size_t)(2 * m + 1) * sizeof *o);
    if (!o)
        return -1;
    for (int i = 0; i < m; i++) {
        uint32_t lo = r[i][0], hi = r[i][1];
        if (hi < 0xD800 || lo > 0xDFFF) {
            o[k][0] = lo;
            o[k++][1] = hi;
            continue;
        }
        if (lo < 0xD800) {
            o[k][0] = lo;
            o[k++][1] = 0xD7FF;
        }
        if (hi > 0xDFFF) {
            o[k][0] = 0xE000;
            o[k++][1] = hi;
        }
    }
    free(r);
    *rp = o;
    *np = k;
    *cap = 2 * m + 1;
    return 0;
}

/* Alternatives of byte-range sequences for code points lo..hi (the classic
 * UTF-8 range split: cut at encoding-length borders, then until every
 * continuation byte spans its full 0x80..0xBF or the range is one prefix). */
static int utf8_split(struct parser *p, int rule, uint32_t lo, uint32_t hi)
{
    if (lo > hi)
        return 0;
    static const uint32_t border[3] = { 0x7F, 0x7FF, 0xFFFF };
    for (int i = 0; i < 3; i++)
        if (lo <= border[i] && hi > border[i])
            return utf8_split(p, rule, lo, border[i]) < 0 ? -1
                 : utf8_split(p, rule, border[i] + 1, hi);
    if (hi >= 0x80) {
        for (int i = 1; i < 4; i++) {
            const uint32_t m = (1u << (6 * i)) - 1;
            if ((lo & ~m) != (hi & ~m)) {
                if ((lo & m) != 0)
                    return utf8_split(p, rule, lo, lo | m) < 0 ? -1
                         : utf8_split(p, rule, (lo | m) + 1, hi);
                if ((hi & m) != m)
                    return utf8_split(p, rule, lo, (hi & ~m) - 1) < 0 ? -1
                         : utf8_split(p, rule, hi & ~m, hi);
            }
        }
    }
    unsigned char a[4], b[4];
    const int n = utf8_encode(lo, a);
    utf8_encode(hi, b);
    for (int i = 0; i < n; i++) {
        struct byteset s = { { 0 } };
        set_range(&s, a[i], b[i]);
        int32_t e = add_set(p, &s);
        if (e < 0 || push_el(p, rule, e) < 0)
            return -1;
    }
    return push_el(p, rule, EL(E_END, 0));
}

static bool class_eq(const struct parser *p, int32_t id, const void *key)
{
    const struct cls *c = &p->classes[id], *k = key;
    return c->n == k->n && !memcmp(c->r, k->r, (size_t)k->n * sizeof *k->r);
}

/* The element for a class: one byte set when it is all ASCII, else a rule
 * whose alternatives are the ASCII set and the multi-byte sequences. Equal
 * classes share it. Takes ownership of r. */
static int32_t class_el(struct parser *p, uint32_t (*r)[2], int n, int parent)
{
    const struct cls key = { r, n, 0 };
    const uint32_t h = hash_bytes(r, (size_t)n * sizeof *r);
    if (!htab_reserve(&p->class_tab))
        return free(r), nomem(p);
    const struct hslot *found = htab_find(&p->class_tab, h, p, &key, class_eq);
    if (found->id1) {
        free(r);
        return p->classes[found->id1 - 1].rule;
    }
    struct byteset ascii = { { 0 } };
    bool has_ascii = false, wide = false;
    for (int i = 0; i < n; i++) {
        if (r[i][0] < 0x80) {
            set_range(&ascii, r[i][0], r[i][1] < 0x80 ? r[i][1] : 0x7F);
            has_ascii = true;
        }
        if (r[i][1] >= 0x80)
            wide = true;
    }
    int32_t e;
    if (!wide) {
        if (!has_ascii) {
            free(r);
            return perr(p, p->pos, "empty character class");
        }
        e = add_set(p, &ascii);
    } else {
        int sub = sub_rule(p, parent);
        if (sub < 0)
            return free(r), -1;
        if (has_ascii) {
            int32_t a = add_set(p, &ascii);
            if (a < 0 || push_el(p, sub, a) < 0 || push_el(p, sub, EL(E_END, 0)) < 0)
                return free(r), -1;
        }
        for (int i = 0; i < n; i++)
            if (r[i][1] >= 0x80 && utf8_split(p, sub, r[i][0] < 0x80 ? 0x80 : r[i][0], r[i][1]) < 0)
                return free(r), -1;
        e = EL(E_REF, sub);
    }
    if (e < 0 || !grow((void **)&p->classes, &p->cap_classes, p->n_classes + 1, sizeof *p->classes))
        return free(r), e < 0 ? -1 : nomem(p);
    p->classes[p->n_classes] = (struct cls){ r, n, e };
    *htab_find(&p->class_tab, h, p, &key, class_eq) = (struct hslot){ h, p->n_classes + 1 };
    p->class_tab.n++;
    p->n_classes++;
    return e;
}

static int parse_alternates(struct parser *p, int rule, bool nested);

/* "[...]" at p->pos, or "." when dot. */
static int parse_class(struct parser *p, int rule, bool dot)
{
    int n = 0, cap = 8;
    uint32_t (*r)[2] = malloc((size_t)cap * sizeof *r);
    if (!r)
        return nomem(p);
    bool neg = false;
    const size_t at = p->pos;
    if (dot) {
        p->pos++;
        r[n][0] = 0;
        r[n++][1] = 0x10FFFF;
    } else {
        p->pos++;
        if (p->pos < p->len && p->s[p->pos] == '^') {
            neg = true;
            p->pos++;
        }
        while (p->pos < p->len && p->s[p->pos] != ']') {
            int32_t lo = parse_char(p), hi = lo;
            if (lo < 0)
                return free(r), -1;
            if (p->pos + 1 < p->len && p->s[p->pos] == '-' && p->s[p->pos + 1] != ']') {
                p->pos++;
                const size_t hat = p->pos;
                if ((hi = parse_char(p)) < 0)
                    return free(r), -1;
                if (hi < lo)
                    return free(r), perr(p, hat, "range end U+%04X below its start U+%04X",
                                         (unsigned)hi, (unsigned)lo);
            }
            if (n == cap) {
                void *q = realloc(r, (size_t)(cap *= 2) * sizeof *r);
                if (!q)
                    return free(r), nomem(p);
                r = q;
            }
            r[n][0] = (uint32_t)lo;
            r[n++][1] = (uint32_t)hi;
        }
        if (p->pos >= p->len)
            return free(r), perr(p, at, "unterminated character class");
        p->pos++;
        if (!n && !neg)
            return free(r), perr(p, at, "empty character class");
    }
    if (normalize_ranges(&r, &n, &cap, neg) < 0)
        return free(r), nomem(p);
    if (!n)
        return free(r), perr(p, at, "character class matches nothing");
    int32_t e = class_el(p, r, n, rule);
    return e < 0 ? -1 : push_el(p, rule, e);
}

/* Move elements [start, end) of rule into a fresh rule and return a
 * reference to it (a single reference is returned as is). */
static int32_t wrap(struct parser *p, int rule, int start)
{
    const int n = p->rules[rule].n - start;
    if (n == 1 && EL_KIND(p->rules[rule].el[start]) == E_REF) {
        p->rules[rule].n = start;
        p->n_total--;
        return p->rules[rule].el[start];
    }
    int sub = sub_rule(p, rule);
    if (sub < 0)
        return -1;
    for (int i = 0; i < n; i++)
        if (push_el(p, sub, p->rules[rule].el[start + i]) < 0)
            return -1;
    if (push_el(p, sub, EL(E_END, 0)) < 0)
        return -1;
    p->rules[rule].n = start;
    p->n_total -= (size_t)n;
    return EL(E_REF, sub);
}

/* Apply x{min,max} (max < 0: unbounded) to the symbol at [start, end). */
static int repeat(struct parser *p, int rule, int start, int min, int max)
{
    int32_t x = wrap(p, rule, start);
    if (x < 0)
        return -1;
    for (int i = 0; i < min; i++)
        if (push_el(p, rule, x) < 0)
            return -1;
    if (max < 0) {
        /* star ::= x star | "" (the tail call keeps matcher stacks flat) */
        int star = sub_rule(p, rule);
        if (star < 0 || push_el(p, star, x) < 0 || push_el(p, star, EL(E_REF, star)) < 0 ||
            push_el(p, star, EL(E_END, 0)) < 0 || push_el(p, star, EL(E_END, 0)) < 0)
            return -1;
        return push_el(p, rule, EL(E_REF, star));
    }
    /* opt_k ::= x opt_(k-1) | "", nested max - min deep */
    int32_t tail = -1;
    for (int k = 0; k < max - min; k++) {
        int opt = sub_rule(p, rule);
        if (opt < 0 || push_el(p, opt, x) < 0 || (tail >= 0 && push_el(p, opt, tail) < 0) ||
            push_el(p, opt, EL(E_END, 0)) < 0 || push_el(p, opt, EL(E_END, 0)) < 0)
            return -1;
        tail = EL(E_REF, opt);
    }
    return tail >= 0 ? push_el(p, rule, tail) : 0;
}

static int parse_int(struct parser *p, int *out)
{
    const size_t at = p->pos;
    long v = 0;
    if (p->pos >= p->len || p->s[p->pos] < '0' || p->s[p->pos] > '9')
        return perr(p, at, "expected a number");
    while (p->pos < p->len && p->s[p->pos] >= '0' && p->s[p->pos] <= '9') {
        v = v * 10 + (p->s[p->pos++] - '0');
        if (v > p->lim.max_repeat)
            return plimit(p, at, "repetition count above %d (limit max_repeat)", p->lim.max_repeat);
    }
    *out = (int)v;
    return 0;
}

static int parse_sequence(struct parser *p, int rule, bool nested)
{
    int last = -1; /* start of the last symbol, for postfix operators */
    while (p->pos < p->len && !p->failed) {
        const char c = p->s[p->pos];
        const size_t at = p->pos;
        if (c == '"') {
            last = p->rules[rule].n;
            p->pos++;
            while (p->pos < p->len && p->s[p->pos] != '"') {
                int32_t ch = parse_char(p);
                if (ch < 0)
                    return -1;
                unsigned char b[4];
                for (int i = 0, n = utf8_encode((uint32_t)ch, b); i < n; i++) {
                    int32_t e = byte_el(p, b[i]);
                    if (e < 0 || push_el(p, rule, e) < 0)
                        return -1;
                }
            }
            if (p->pos >= p->len)
                return perr(p, at, "unterminated literal");
            p->pos++;
            if (p->rules[rule].n == last)
                last = -1; /* "" has nothing to repeat */
        } else if (c == '[' || c == '.') {
            last = p->rules[rule].n;
            if (parse_class(p, rule, c == '.') < 0)
                return -1;
        } else if (c == '(') {
            /* groups recurse: the limit keeps the C stack bounded */
            if (p->depth >= p->lim.max_nesting)
                return plimit(p, at, "groups nested deeper than %d levels (limit max_nesting)",
                              p->lim.max_nesting);
            p->pos++;
            int sub = sub_rule(p, rule);
            if (sub < 0)
                return -1;
            skip_space(p, true);
            p->depth++;
            const int rc = parse_alternates(p, sub, true);
            p->depth--;
            if (rc < 0)
                return -1;
            if (p->pos >= p->len || p->s[p->pos] != ')')
                return perr(p, at, "group without its closing ')'");
            p->pos++;
            last = p->rules[rule].n;
            if (push_el(p, rule, EL(E_REF, sub)) < 0)
                return -1;
        } else if (is_name_char(c)) {
            size_t b = p->pos;
            while (p->pos < p->len && is_name_char(p->s[p->pos]))
                p->pos++;
            /* a name followed by ::= starts the next rule */
            size_t save = p->pos;
            skip_space(p, false);
            if (p->pos + 3 <= p->len && !memcmp(p->s + p->pos, "::=", 3)) {
                if (nested)
                    return perr(p, b, "rule definition inside a group");
                p->pos = b;
                return 0;
            }
            p->pos = save;
            int ref = find_rule(p, p->s + b, save - b, b);
            if (ref < 0)
                return -1;
            last = p->rules[rule].n;
            if (push_el(p, rule, EL(E_REF, ref)) < 0)
                return -1;
        } else if (c == '*' || c == '+' || c == '?' || c == '{') {
            if (last < 0)
                return perr(p, at, "'%c' without a preceding symbol", c);
            int min = c == '+' ? 1 : 0, max = c == '?' ? 1 : -1;
            p->pos++;
            if (c == '{') {
                skip_space(p, nested);
                if (parse_int(p, &min) < 0)
                    return -1;
                skip_space(p, nested);
                max = min;
                if (p->pos < p->len && p->s[p->pos] == ',') {
                    p->pos++;
                    skip_space(p, nested);
                    max = -1;
                    if (p->pos < p->len && p->s[p->pos] != '}' && parse_int(p, &max) < 0)
                        return -1;
                    skip_space(p, nested);
                }
                if (p->pos >= p->len || p->s[p->pos] != '}')
                    return perr(p, p->pos, "expected '}' to close the repetition");
                p->pos++;
                if (max >= 0 && max < min)
                    return perr(p, at, "repetition {%d,%d}: maximum below minimum", min, max);
            }
            if (repeat(p, rule, last, min, max) < 0)
                return -1;
            last = -1;
        } else if (c == '|' || c == ')' || c == '\n' || c == '\r') {
            break;
        } else {
            return perr(p, at, "unexpected character '%c'", c);
        }
        skip_space(p, nested);
    }
    return p->failed ? -1 : push_el(p, rule, EL(E_END, 0));
}

static int parse_alternates(struct parser *p, int rule, bool nested)
{
    if (parse_sequence(p, rule, nested) < 0)
        return -1;
    for (;;) {
        /* at top level a line starting with '|' continues the rule */
        size_t save = p->pos;
        if (!nested)
            skip_space(p, true);
        if (p->pos < p->len && p->s[p->pos] == '|') {
            p->pos++;
            skip_space(p, true);
            if (parse_sequence(p, rule, nested) < 0)
                return -1;
        } else {
            p->pos = save;
            return 0;
        }
    }
}

static int parse_rules(struct parser *p)
{
    skip_space(p, true);
    while (p->pos < p->len) {
        const size_t at = p->pos;
        while (p->pos < p->len && is_name_char(p->s[p->pos]))
            p->pos++;
        if (p->pos == at)
            return perr(p, at, "expected a rule name");
        int r = find_rule(p, p->s + at, p->pos - at, at);
        if (r < 0)
            return -1;
        if (p->rules[r].defined)
            return perr(p, at, "rule '%s' defined twice", p->rules[r].name);
        p->rules[r].defined = true;
        p->rules[r].def_pos = at;
        skip_space(p, false);
        if (p->pos + 3 > p->len || memcmp(p->s + p->pos, "::=", 3) != 0)
            return perr(p, p->pos, "expected '::=' after rule name '%s'", p->rules[r].name);
        p->pos += 3;
        skip_space(p, true);
        if (parse_alternates(p, r, false) < 0)
            return -1;
        skip_space(p, false);
        if (p->pos < p->len && p->s[p->pos] != '\n' && p->s[p->pos] != '\r')
            return perr(p, p->pos, "expected the end of the line after rule '%s'",
                        p->rules[r].name);
        skip_space(p, true);
    }
    return 0;
}

// ---- checks and flattening ----------------------------------------------------

/* Which rules can match the empty string: a worklist over "alternative
 * made only of rule calls, n of them not yet known nullable", so each
 * element is looked at a bounded number of times (a fixpoint that re-scans
 * every rule until nothing changes is quadratic on long chains). */
static bool *nullable_rules(const struct grammar *g)
{
    const int n = g->n_rules, n_alt = g->rule_alt[n];
    bool *nullable = calloc((size_t)n + 1, sizeof *nullable);
    int *left = malloc(((size_t)n_alt + 1) * sizeof *left);     /* calls not yet nullable, -1: has bytes */
    int *alt_rule = malloc(((size_t)n_alt + 1) * sizeof *alt_rule);
    int *occ_start = calloc((size_t)n + 2, sizeof *occ_start);  /* alternatives calling rule r */
    int *occ = NULL, *queue = malloc(((size_t)n + 1) * sizeof *queue);
    int nq = 0;
    if (!nullable || !left || !alt_rule || !occ_start || !queue)
        goto fail;
    size_t n_occ = 0;
    for (int r = 0; r < n; r++)
        for (int a = g->rule_alt[r]; a < g->rule_alt[r + 1]; a++) {
            alt_rule[a] = r;
            left[a] = 0;
            const int32_t *e = g->el + g->alt[a];
            for (; EL_KIND(*e) != E_END; e++)
                if (EL_KIND(*e) == E_BYTES) {
                    left[a] = -1;
                    break;
                }
            if (left[a] < 0)
                continue;
            for (e = g->el + g->alt[a]; EL_KIND(*e) == E_REF; e++) {
                left[a]++;
                occ_start[EL_VAL(*e) + 1]++;
                n_occ++;
            }
            if (!left[a] && !nullable[r]) {
                nullable[r] = true;
                queue[nq++] = r;
            }
        }
    for (int r = 0; r < n; r++)
        occ_start[r + 1] += occ_start[r];
    if (!(occ = malloc((n_occ + 1) * sizeof *occ)))
        goto fail;
    for (int a = 0; a < n_alt; a++) /* fill, using occ_start[r] as r's cursor */
        for (const int32_t *e = g->el + g->alt[a]; left[a] >= 0 && EL_KIND(*e) == E_REF; e++)
            occ[occ_start[EL_VAL(*e)]++] = a;
    for (int r = n; r > 0; r--) /* each cursor ended at the next rule's start: shift back */
        occ_start[r] = occ_start[r - 1];
    occ_start[0] = 0;
    for (int qi = 0; qi < nq; qi++) {
        const int x = queue[qi];
        for (int k = occ_start[x]; k < occ_start[x + 1]; k++) {
            const int a = occ[k];
            if (--left[a] == 0 && !nullable[alt_rule[a]]) {
                nullable[alt_rule[a]] = true;
                queue[nq++] = alt_rule[a];
            }
        }
    }
    free(left), free(alt_rule), free(occ_start), free(occ), free(queue);
    return nullable;
fail:
    free(nullable), free(left), free(alt_rule), free(occ_start), free(occ), free(queue);
    return NULL;
}

/* Left recursion would make expansion endless: reject it by name. A
 * depth-first walk over "r can start with a call of s" edges, on an explicit
 * stack (rule, alternative, element) so that long call chains cost no C
 * stack and each edge is followed once. */
static int check_left_recursion(struct parser *p, const struct grammar *g)
{
    const int n = g->n_rules;
    bool *nullable = nullable_rules(g);
    unsigned char *color = calloc((size_t)n + 1, 1); /* 0 new, 1 on the stack, 2 done */
    struct frame { int rule, alt, el; } *stack = malloc(((size_t)n + 1) * sizeof *stack);
    if (!nullable || !color || !stack) {
        free(nullable), free(color), free(stack);
        return nomem(p);
    }
    int rc = 0;
    for (int s = 0; s < n && !rc; s++) {
        if (color[s])
            continue;
        int sp = 0;
        stack[sp++] = (struct frame){ s, g->rule_alt[s], g->alt[g->rule_alt[s]] };
        color[s] = 1;
        while (sp && !rc) {
            struct frame *f = &stack[sp - 1];
            /* the next call at the left edge of f's rule, advancing f past it */
            int found = -1;
            while (found < 0 && f->alt < g->rule_alt[f->rule + 1]) {
                const int32_t e = g->el[f->el];
                if (EL_KIND(e) == E_REF) {
                    found = EL_VAL(e);
                    if (nullable[found]) {
                        f->el++;
                        continue;
                    }
                }
                /* a byte, the end, or a call that consumes: next alternative */
                if (++f->alt < g->rule_alt[f->rule + 1])
                    f->el = g->alt[f->alt];
            }
            if (found < 0) {
                color[f->rule] = 2;
                sp--;
            } else if (color[found] == 1) {
                rc = perr(p, p->rules[found].def_pos, "rule '%s' is left-recursive",
                          p->rules[found].name);
            } else if (!color[found]) {
                color[found] = 1;
                stack[sp++] = (struct frame){ found, g->rule_alt[found], g->alt[g->rule_alt[found]] };
            }
        }
    }
    free(nullable), free(color), free(stack);
    return rc;
}

/* Saturating length arithmetic: GRAMMAR_NO_END stands for "no finite way". */
static int32_t len_add(int64_t a, int64_t b)
{
    const int64_t s = a + b;
    return s >= GRAMMAR_NO_END ? GRAMMAR_NO_END : (int32_t)s;
}

static bool set_empty(const struct byteset *b)
{
    for (int i = 0; i < 8; i++)
        if (b->w[i])
            return false;
    return true;
}

/* The fewest bytes every rule can produce, then g->minrest for every
 * element: what closing masks steer by. Knuth's generalisation of Dijkstra
 * to grammars: an alternative's length is known once all the rules it calls
 * are, and rules are finished shortest first from a heap, so the work is
 * O(elements log alternatives) even for deep recursive grammars (a fixpoint
 * that re-scans every rule is quadratic). Rules without a finite expansion
 * keep GRAMMAR_NO_END. */
static int grammar_min_lengths(struct grammar *g)
{
    const int n = g->n_rules, n_alt = g->rule_alt[n];
    int32_t *minlen = malloc(((size_t)n + 1) * sizeof *minlen);
    bool *done = calloc((size_t)n + 1, sizeof *done);
    int32_t *left = malloc(((size_t)n_alt + 1) * sizeof *left);      /* calls not yet known */
    int32_t *sum = malloc(((size_t)n_alt + 1) * sizeof *sum);        /* bytes + known calls */
    int32_t *alt_rule = malloc(((size_t)n_alt + 1) * sizeof *alt_rule);
    int32_t *occ_start = calloc((size_t)n + 2, sizeof *occ_start);   /* alternatives calling r */
    int32_t *occ = NULL;
    struct hitem { int32_t len, rule; } *heap = malloc(((size_t)n_alt + 1) * sizeof *heap);
    int nh = 0, rc = -1;
    g->minrest = malloc(((size_t)g->n_el + 1) * sizeof *g->minrest);
    if (!minlen || !done || !left || !sum || !alt_rule || !occ_start || !heap || !g->minrest)
        goto out;
    size_t n_occ = 0;
    for (int r = 0; r < n; r++) {
        minlen[r] = GRAMMAR_NO_END;
        for (int a = g->rule_alt[r]; a < g->rule_alt[r + 1]; a++) {
            alt_rule[a] = r;
            left[a] = sum[a] = 0;
            for (const int32_t *e = g->el + g->alt[a]; EL_KIND(*e) != E_END; e++) {
                if (EL_KIND(*e) == E_REF) {
                    left[a]++;
                    occ_start[EL_VAL(*e) + 1]++;
                    n_occ++;
                } else {
                    sum[a] = len_add(sum[a], set_empty(&g->sets[EL_VAL(*e)]) ? GRAMMAR_NO_END : 1);
                }
            }
        }
    }
    for (int r = 0; r < n; r++)
        occ_start[r + 1] += occ_start[r];
    if (!(occ = malloc((n_occ + 1) * sizeof *occ)))
        goto out;
    for (int a = 0; a < n_alt; a++) /* fill, using occ_start[r] as r's cursor */
        for (const int32_t *e = g->el + g->alt[a]; EL_KIND(*e) != E_END; e++)
            if (EL_KIND(*e) == E_REF)
                occ[occ_start[EL_VAL(*e)]++] = a;
    for (int r = n; r > 0; r--) /* each cursor ended at the next rule's start: shift back */
        occ_start[r] = occ_start[r - 1];
    occ_start[0] = 0;
    /* a binary min-heap of (length, rule); stale entries are skipped when
     * popped. Every alternative pushes at most once (when its last call
     * becomes known), so n_alt entries suffice. */
#define HEAP_PUSH(L, R)                                                              \
    do {                                                                             \
        int i_ = nh++;                                                               \
        while (i_ > 0 && heap[(i_ - 1) / 2].len > (L)) {                             \
            heap[i_] = heap[(i_ - 1) / 2];                                           \
            i_ = (i_ - 1) / 2;                                                       \
        }                                                                            \
        heap[i_] = (struct hitem){ (L), (R) };                                       \
    } while (0)
    for (int a = 0; a < n_alt; a++)
        if (left[a] == 0 && sum[a] < minlen[alt_rule[a]]) {
            minlen[alt_rule[a]] = sum[a];
            HEAP_PUSH(sum[a], alt_rule[a]);
        }
    while (nh > 0) {
        const struct hitem top = heap[0], last = heap[--nh];
        int i = 0;
        for (;;) { /* sift the last item down from the root */
            int c = 2 * i + 1;
            if (c >= nh)
                break;
            if (c + 1 < nh && heap[c + 1].len < heap[c].len)
                c++;
            if (heap[c].len >= last.len)
                break;
            heap[i] = heap[c];
            i = c;
        }
        if (nh > 0)
            heap[i] = last;
        if (done[top.rule] || top.len > minlen[top.rule])
            continue;
        done[top.rule] = true;
        for (int k = occ_start[top.rule]; k < occ_start[top.rule + 1]; k++) {
            const int a = occ[k], r = alt_rule[a];
            sum[a] = len_add(sum[a], top.len);
            if (--left[a] == 0 && !done[r] && sum[a] < minlen[r]) {
                minlen[r] = sum[a];
                HEAP_PUSH(sum[a], r);
            }
        }
    }
#undef HEAP_PUSH
    /* suffix sums within each alternative */
    for (int a = 0; a < n_alt; a++) {
        int32_t p = g->alt[a];
        while (EL_KIND(g->el[p]) != E_END)
            p++;
        int32_t rest = 0;
        g->minrest[p] = 0;
        while (p-- > g->alt[a]) {
            const int32_t e = g->el[p];
            rest = len_add(rest, EL_KIND(e) == E_REF ? minlen[EL_VAL(e)]
                                 : set_empty(&g->sets[EL_VAL(e)]) ? GRAMMAR_NO_END : 1);
            g->minrest[p] = rest;
        }
    }
    rc = 0;
out:
    free(minlen), free(done), free(left), free(sum), free(alt_rule), free(occ_start), free(occ),
        free(heap);
    return rc;
}

static void parser_free(struct parser *p)
{
    free(p->rule_tab.slot);
    free(p->set_tab.slot);
    free(p->class_tab.slot);
    for (int i = 0; i < p->n_rules; i++) {
        free(p->rules[i].name);
        free(p->rules[i].el);
    }
    for (int i = 0; i < p->n_classes; i++)
        free(p->classes[i].r);
    free(p->rules);
    free(p->sets);
    free(p->classes);
}

struct grammar *grammar_parse(const char *text, size_t len, char *err, size_t errlen)
{
    return grammar_parse_limits(text, len, NULL, err, errlen, NULL);
}

struct grammar *grammar_parse_limits(const char *text, size_t len, const struct grammar_limits *lim,
                                     char *err, size_t errlen, int *code)
{
    struct parser p = { .s = text, .len = len, .err = err, .errlen = errlen,
                        .lim = lim ? *lim : grammar_default_limits() };
    struct grammar *g = calloc(1, sizeof *g);
    if (code)
        *code = OMNI_ERR_FORMAT;
    if (!g) {
        omni_fail(err, errlen, OMNI_ERR_NOMEM, "grammar: out of memory");
        if (code)
            *code = OMNI_ERR_NOMEM;
        return NULL;
    }
    g->refs = 1;
    g->lim = p.lim;
    if (!text || parse_rules(&p) < 0)
        goto fail;
    g->root = -1;
    for (int i = 0; i < p.n_rules; i++) {
        if (!p.rules[i].defined) {
            perr(&p, p.rules[i].def_pos, "undefined rule '%s'", p.rules[i].name);
            goto fail;
        }
        if (!p.rules[i].generated && !strcmp(p.rules[i].name, "root"))
            g->root = i;
    }
    if (g->root < 0) {
        omni_fail(err, errlen, OMNI_ERR_FORMAT, "grammar: no rule named 'root'");
        goto fail;
    }
    /* flatten: all alternatives in one array */
    int n_alt = 0;
    for (int i = 0; i < p.n_rules; i++)
        for (int k = 0; k < p.rules[i].n; k++)
            n_alt += EL_KIND(p.rules[i].el[k]) == E_END;
    g->n_rules = p.n_rules;
    g->el = malloc(((size_t)p.n_total + 1) * sizeof *g->el);
    g->alt = malloc(((size_t)n_alt + 1) * sizeof *g->alt);
    g->rule_alt = malloc(((size_t)p.n_rules + 1) * sizeof *g->rule_alt);
    if (!g->el || !g->alt || !g->rule_alt) {
        nomem(&p);
        goto fail;
    }
    int ne = 0, na = 0;
    for (int i = 0; i < p.n_rules; i++) {
        g->rule_alt[i] = na;
        bool start = true;
        for (int k = 0; k < p.rules[i].n; k++) {
            if (start)
                g->alt[na++] = ne;
            g->el[ne++] = p.rules[i].el[k];
            start = EL_KIND(p.rules[i].el[k]) == E_END;
        }
    }
    g->rule_alt[p.n_rules] = na;
    g->n_el = ne;
    g->sets = p.sets;
    g->n_sets = p.n_sets;
    p.sets = NULL;
    if (check_left_recursion(&p, g) < 0)
        goto fail;
    if (grammar_min_lengths(g) < 0) {
        nomem(&p);
        goto fail;
    }
    parser_free(&p);
    if (code)
        *code = OMNI_OK;
    return g;
fail:
    if (code && p.code)
        *code = p.code;
    parser_free(&p);
    g->refs = 1;
    grammar_free(g);
    return NULL;
}

struct grammar *grammar_ref(struct grammar *g)
{
    if (g)
        __atomic_add_fetch(&g->refs, 1, __ATOMIC_RELAXED);
    return g;
}

void grammar_free(struct grammar *g)
{
    if (!g || __atomic_sub_fetch(&g->refs, 1, __ATOMIC_ACQ_REL) > 0)
        return;
    free(g->el);
    free(g->alt);
    free(g->rule_alt);
    free(g->sets);
    free(g->minrest);
    free(g);
}

// ---- vocabulary trie ------------------------------------------------------------

struct grammar_vocab {
    int32_t n_vocab;
    /* trie in preorder: node i's subtree is [i, end[i]) */
    int32_t n_nodes;
    uint8_t *byte;           /* [n_nodes] */
    uint16_t *depth;         /* [n_nodes] 1 for children of the root */
    int32_t *end;            /* [n_nodes] */
    int32_t *tok_start;      /* [n_nodes + 1] tokens ending at i: ids[tok_start[i]..tok_start[i+1]) */
    int32_t *ids;
    int max_depth;
    /* each token's bytes */
    char *bytes;
    int64_t *off;            /* [n_vocab + 1] */
    int32_t *eog;            /* end-of-generation ids */
    int n_eog;
};

struct vtok { int32_t id; uint32_t len; const char *s; };

static int vtok_cmp(const void *a, const void *b)
{
    const struct vtok *x = a, *y = b;
    const uint32_t n = x->len < y->len ? x->len : y->len;
    int c = memcmp(x->s, y->s, n);
    if (c)
        return c;
    return x->len != y->len ? (x->len < y->len ? -1 : 1) : (x->id > y->id) - (x->id < y->id);
}

struct grammar_vocab *grammar_vocab_new(const struct tokenizer *tok, char *err, size_t errlen)
{
    struct grammar_vocab *v = calloc(1, sizeof *v);
    struct vtok *vt = NULL;
    int32_t *open = NULL;
    if (!v)
        goto nomem;
    const int32_t n = tokenizer_n_vocab(tok);
    v->n_vocab = n;
    char buf[TOKEN_MAX_BYTES];
    int64_t total = 0;
    for (int32_t i = 0; i < n; i++) {
        size_t len = tokenizer_piece(tok, i, false, buf, sizeof buf);
        total += len <= sizeof buf ? (int64_t)len : 0;
    }
    v->bytes = malloc((size_t)total + 1);
    v->off = malloc(((size_t)n + 1) * sizeof *v->off);
    v->eog = malloc(((size_t)n + 1) * sizeof *v->eog);
    vt = malloc(((size_t)n + 1) * sizeof *vt);
    if (!v->bytes || !v->off || !v->eog || !vt)
        goto nomem;
    int64_t o = 0;
    int nv = 0;
    for (int32_t i = 0; i < n; i++) {
        v->off[i] = o;
        size_t len = tokenizer_piece(tok, i, false, buf, sizeof buf);
        if (tokenizer_is_eog(tok, i))
            v->eog[v->n_eog++] = i;
        else if (len > 0 && len <= sizeof buf) {
            memcpy(v->bytes + o, buf, len);
            vt[nv++] = (struct vtok){ i, (uint32_t)len, v->bytes + o };
            o += (int64_t)len;
        }
    }
    v->off[n] = o;
    qsort(vt, (size_t)nv, sizeof *vt, vtok_cmp);
    /* nodes: at most one per byte of all tokens */
    const size_t cap = (size_t)o + 1;
    v->byte = malloc(cap);
    v->depth = malloc(cap * sizeof *v->depth);
    v->end = malloc(cap * sizeof *v->end);
    v->tok_start = malloc((cap + 1) * sizeof *v->tok_start);
    v->ids = malloc(((size_t)nv + 1) * sizeof *v->ids);
    open = malloc((TOKEN_MAX_BYTES + 1) * sizeof *open); /* node at each depth of the path */
    if (!v->byte || !v->depth || !v->end || !v->tok_start || !v->ids || !open)
        goto nomem;
    int32_t nn = 0, nids = 0;
    uint32_t path = 0; /* depth of the current path */
    const struct vtok *prev = NULL;
    for (int k = 0; k < nv; k++) {
        const struct vtok *t = &vt[k];
        uint32_t lcp = 0;
        if (prev)
            while (lcp < prev->len && lcp < t->len && prev->s[lcp] == t->s[lcp])
                lcp++;
        while (path > lcp)
            v->end[open[--path]] = nn;
        for (uint32_t d = lcp; d < t->len; d++) {
            v->byte[nn] = (uint8_t)t->s[d];
            v->depth[nn] = (uint16_t)(d + 1);
            v->tok_start[nn] = nids;
            open[path++] = nn++;
        }
        if ((int)t->len > v->max_depth)
            v->max_depth = (int)t->len;
        v->ids[nids++] = t->id;
        prev = t;
    }
    while (path > 0)
        v->end[open[--path]] = nn;
    v->tok_start[nn] = nids;
    v->n_nodes = nn;
    free(vt);
    free(open);
    return v;
nomem:
    free(vt);
    free(open);
    grammar_vocab_free(v);
    omni_fail(err, errlen, OMNI_ERR_NOMEM, "grammar: out of memory for the vocabulary trie");
    return NULL;
}

void grammar_vocab_free(struct grammar_vocab *v)
{
    if (!v)
        return;
    free(v->byte);
    free(v->depth);
    free(v->end);
    free(v->tok_start);
    free(v->ids);
    free(v->bytes);
    free(v->off);
    free(v->eog);
    free(v);
}

int32_t grammar_vocab_n_tokens(const struct grammar_vocab *v)
{
    return v->n_vocab;
}

// ---- matcher ---------------------------------------------------------------------

#define ST_UNKNOWN (-2)
#define ST_DEAD (-1)

struct mstate {
    int32_t off, n;          /* its stack-top nodes: ids[off .. off + n) */
    bool accept;             /* the grammar may end here */
    int32_t dist;            /* bytes of its shortest way to an end (0 when accept) */
    int32_t next_max;        /* largest dist after one allowed token (with the mask) */
    int32_t *next;           /* [256] lazily: ST_UNKNOWN, ST_DEAD or a state */
    uint32_t *mask;          /* cached token mask, or NULL */
};

/* Open-addressing table of int32 ids (slot holds id + 1). */
struct itab { int32_t *slot; uint32_t cap, n; };

struct grammar_matcher {
    struct grammar *g;
    bool owns_ref;
    const struct grammar_vocab *v;
    /* stack nodes: (element position, parent node or -1), and the bytes of
     * the shortest way from the node to the end of the whole grammar */
    int32_t *npos, *npar, *ndist;
    int n_nodes, cap_nodes;
    struct itab node_tab;
    /* states */
    struct mstate *st;
    int n_st, cap_st;
    int32_t *sids;           /* state node lists */
    int n_sids, cap_sids;
    struct itab st_tab;
    int n_masks;
    /* closure scratch */
    int32_t *tmp;
    int n_tmp, cap_tmp;
    bool tmp_accept;
    uint64_t *vkey;          /* visited (pos, parent) of the current closure */
    uint32_t *vstamp, stamp, vcap, vn;
    struct wpair { int32_t pos, par; } *work; /* pairs the closure has still to expand */
    int cap_work;
    /* current position */
    int32_t cur;             /* state, or ST_DEAD after end of generation */
    bool ended;
    uint32_t *mask_buf;
    float *logit_buf;
    int32_t *walk;           /* [max_depth + 1] trie walk states */
    char err[160];
    bool failed;
};

static uint32_t hash_u64(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ULL;
    x ^= x >> 33;
    return (uint32_t)x;
}

__attribute__((format(printf, 2, 3)))
static int mfail(struct grammar_matcher *m, const char *fmt, ...)
{
    if (!m->failed) {
        const int k = snprintf(m->err, sizeof m->err, "grammar: ");
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(m->err + k, sizeof m->err - (size_t)k, fmt, ap);
        va_end(ap);
    }
    m->failed = true;
    return -1;
}

static int itab_grow(struct itab *t, uint32_t (*hash)(const struct grammar_matcher *, int32_t),
                     const struct grammar_matcher *m)
{
    uint32_t nc = t->cap ? t->cap * 2 : 1024;
    int32_t *s = calloc(nc, sizeof *s);
    if (!s)
        return -1;
    for (uint32_t i = 0; i < t->cap; i++) {
        if (!t->slot[i])
            continue;
        uint32_t h = hash(m, t->slot[i] - 1) & (nc - 1);
        while (s[h])
            h = (h + 1) & (nc - 1);
        s[h] = t->slot[i];
    }
    free(t->slot);
    t->slot = s;
    t->cap = nc;
    return 0;
}

static uint32_t node_hash_of(int32_t pos, int32_t par)
{
    return hash_u64(((uint64_t)(uint32_t)pos << 32) | (uint32_t)par);
}

static uint32_t node_hash(const struct grammar_matcher *m, int32_t id)
{
    return node_hash_of(m->npos[id], m->npar[id]);
}

static int32_t node_intern(struct grammar_matcher *m, int32_t pos, int32_t par)
{
    if ((m->node_tab.n + 1) * 2 > m->node_tab.cap && itab_grow(&m->node_tab, node_hash, m) < 0)
        return mfail(m, "out of memory");
    const uint32_t mask = m->node_tab.cap - 1;
    uint32_t h = node_hash_of(pos, par) & mask;
    for (; m->node_tab.slot[h]; h = (h + 1) & mask) {
        int32_t id = m->node_tab.slot[h] - 1;
        if (m->npos[id] == pos && m->npar[id] == par)
            return id;
    }
    if (m->n_nodes >= m->g->lim.max_stack_nodes)
        return mfail(m, "limit: grammar too ambiguous, more than %d parser stack nodes "
                        "(max_stack_nodes)", m->g->lim.max_stack_nodes);
    if (m->n_nodes == m->cap_nodes) { /* npos, npar and ndist grow together */
        int cap = m->cap_nodes;
        if (!grow((void **)&m->npos, &cap, m->n_nodes + 1, sizeof *m->npos))
            return mfail(m, "out of memory");
        void *q = realloc(m->npar, (size_t)cap * sizeof *m->npar);
        if (!q)
            return mfail(m, "out of memory");
        m->npar = q;
        if (!(q = realloc(m->ndist, (size_t)cap * sizeof *m->ndist)))
            return mfail(m, "out of memory");
        m->ndist = q;
        m->cap_nodes = cap;
    }
    m->npos[m->n_nodes] = pos;
    m->npar[m->n_nodes] = par;
    /* the rest of this alternative, then whatever the return stack still needs */
    m->ndist[m->n_nodes] = len_add(m->g->minrest[pos], par >= 0 ? m->ndist[par] : 0);
    m->node_tab.slot[h] = m->n_nodes + 1;
    m->node_tab.n++;
    return m->n_nodes++;
}

static bool visit(struct grammar_matcher *m, int32_t pos, int32_t par)
{
    if ((m->vn + 1) * 2 > m->vcap) {
        uint32_t nc = m->vcap ? m->vcap * 2 : 256;
        uint64_t *k = malloc(nc * sizeof *k);
        uint32_t *s = calloc(nc, sizeof *s);
        if (!k || !s) {
            free(k), free(s);
            mfail(m, "out of memory");
            return false;
        }
        for (uint32_t i = 0; i < m->vcap; i++) {
            if (m->vstamp[i] != m->stamp)
                continue;
            uint32_t h = hash_u64(m->vkey[i]) & (nc - 1);
            while (s[h] == m->stamp)
                h = (h + 1) & (nc - 1);
            s[h] = m->stamp;
            k[h] = m->vkey[i];
        }
        free(m->vkey), free(m->vstamp);
        m->vkey = k;
        m->vstamp = s;
        m->vcap = nc;
    }
    const uint64_t key = ((uint64_t)(uint32_t)pos << 32) | (uint32_t)par;
    uint32_t h = hash_u64(key) & (m->vcap - 1);
    for (; m->vstamp[h] == m->stamp; h = (h + 1) & (m->vcap - 1))
        if (m->vkey[h] == key)
            return false;
    m->vstamp[h] = m->stamp;
    m->vkey[h] = key;
    m->vn++;
    return true;
}

/* Queue (pos, par) for the closure unless this closure has seen it; false
 * when a limit or memory stops the closure (m->failed is set). */
static bool closure_push(struct grammar_matcher *m, int *n, int32_t pos, int32_t par)
{
    if (!visit(m, pos, par))
        return !m->failed;
    if (m->vn > (uint32_t)m->g->lim.max_closure) {
        mfail(m, "limit: grammar too ambiguous, more than %d parser positions after one byte "
                 "(max_closure)", m->g->lim.max_closure);
        return false;
    }
    if (!grow((void **)&m->work, &m->cap_work, *n + 1, sizeof *m->work)) {
        mfail(m, "out of memory");
        return false;
    }
    m->work[(*n)++] = (struct wpair){ pos, par };
    return true;
}

/* Every stack reachable from continuing at element pos with return stack
 * par, stopping at byte terminals: appended to m->tmp. Worked off an
 * explicit list of (pos, parent) pairs, each taken once, so a chain of
 * thousands of nullable calls - ("x"?){5000} - costs heap, not C stack;
 * max_closure bounds the work one byte may cause. */
static void closure(struct grammar_matcher *m, int32_t pos, int32_t par)
{
    const struct grammar *g = m->g;
    int n = 0;
    if (m->failed || !closure_push(m, &n, pos, par))
        return;
    while (n) {
        const struct wpair w = m->work[--n];
        const int32_t e = g->el[w.pos];
        switch (EL_KIND(e)) {
        case E_BYTES: {
            int32_t id = node_intern(m, w.pos, w.par);
            if (id < 0)
                return;
            if (!grow((void **)&m->tmp, &m->cap_tmp, m->n_tmp + 1, sizeof *m->tmp)) {
                mfail(m, "out of memory");
                return;
            }
            m->tmp[m->n_tmp++] = id;
            break;
        }
        case E_END:
            if (w.par < 0)
                m->tmp_accept = true;
            else if (!closure_push(m, &n, m->npos[w.par], m->npar[w.par]))
                return;
            break;
        default: {
            /* a call in tail position returns straight to the caller's caller */
            int32_t ret = w.par;
            if (EL_KIND(g->el[w.pos + 1]) != E_END && (ret = node_intern(m, w.pos + 1, w.par)) < 0)
                return;
            const int r = EL_VAL(e);
            for (int a = g->rule_alt[r]; a < g->rule_alt[r + 1]; a++)
                if (!closure_push(m, &n, g->alt[a], ret))
                    return;
        }
        }
    }
}

static int cmp_i32(const void *a, const void *b)
{
    const int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

static uint32_t state_hash_of(const int32_t *ids, int n, bool accept)
{
    uint64_t h = 0x9E3779B97F4A7C15ULL ^ (uint64_t)accept;
    for (int i = 0; i < n; i++)
        h = (h ^ (uint32_t)ids[i]) * 0x100000001B3ULL;
    return hash_u64(h);
}

static uint32_t state_hash(const struct grammar_matcher *m, int32_t id)
{
    return state_hash_of(m->sids + m->st[id].off, m->st[id].n, m->st[id].accept);
}

/* Intern m->tmp (+ tmp_accept) as a state; ST_DEAD when it is empty. */
static int32_t state_from_tmp(struct grammar_matcher *m)
{
    if (m->failed)
        return -1;
    if (!m->n_tmp && !m->tmp_accept)
        return ST_DEAD;
    if (m->n_tmp > 1)                 /* tmp may be NULL when empty: qsort(NULL, 0) is UB */
        qsort(m->tmp, (size_t)m->n_tmp, sizeof *m->tmp, cmp_i32);
    int n = 0;
    for (int i = 0; i < m->n_tmp; i++)
        if (!n || m->tmp[i] != m->tmp[n - 1])
            m->tmp[n++] = m->tmp[i];
    if ((m->st_tab.n + 1) * 2 > m->st_tab.cap && itab_grow(&m->st_tab, state_hash, m) < 0)
        return mfail(m, "out of memory"), -3;
    const uint32_t mask = m->st_tab.cap - 1;
    uint32_t h = state_hash_of(m->tmp, n, m->tmp_accept) & mask;
    for (; m->st_tab.slot[h]; h = (h + 1) & mask) {
        const struct mstate *s = &m->st[m->st_tab.slot[h] - 1];
        if (s->n == n && s->accept == m->tmp_accept &&
            (n == 0 || !memcmp(m->sids + s->off, m->tmp, (size_t)n * sizeof *m->tmp)))
            return m->st_tab.slot[h] - 1;
    }
    if (m->n_st >= m->g->lim.max_states)
        return mfail(m, "limit: more than %d grammar states in one sequence (max_states)",
                     m->g->lim.max_states), -3;
    if (!grow((void **)&m->st, &m->cap_st, m->n_st + 1, sizeof *m->st) ||
        !grow((void **)&m->sids, &m->cap_sids, m->n_sids + n, sizeof *m->sids))
        return mfail(m, "out of memory"), -3;
    if (n > 0)                        /* an accept-only state: sids may still be NULL */
        memcpy(m->sids + m->n_sids, m->tmp, (size_t)n * sizeof *m->tmp);
    int32_t dist = m->tmp_accept ? 0 : GRAMMAR_NO_END;
    for (int i = 0; i < n; i++)
        if (m->ndist[m->tmp[i]] < dist)
            dist = m->ndist[m->tmp[i]];
    m->st[m->n_st] = (struct mstate){ .off = m->n_sids, .n = n, .accept = m->tmp_accept, .dist = dist };
    m->n_sids += n;
    m->st_tab.slot[h] = m->n_st + 1;
    m->st_tab.n++;
    return m->n_st++;
}

static void closure_begin(struct grammar_matcher *m)
{
    m->n_tmp = 0;
    m->tmp_accept = false;
    m->vn = 0;
    if (++m->stamp == 0) { /* wrapped: forget every old mark */
        if (m->vstamp)
            memset(m->vstamp, 0, m->vcap * sizeof *m->vstamp);
        m->stamp = 1;
    }
}

/* The state after byte b from state s (memoized); ST_DEAD, or -3 on failure. */
static int32_t step(struct grammar_matcher *m, int32_t s, unsigned b)
{
    struct mstate *ms = &m->st[s];
    if (!ms->next) {
        if (!(ms->next = malloc(256 * sizeof *ms->next)))
            return mfail(m, "out of memory"), -3;
        for (int i = 0; i < 256; i++)
            ms->next[i] = ST_UNKNOWN;
    }
    int32_t t = ms->next[b];
    if (t != ST_UNKNOWN)
        return t;
    closure_begin(m);
    for (int i = 0; i < m->st[s].n; i++) {
        const int32_t id = m->sids[m->st[s].off + i];
        const struct byteset *set = &m->g->sets[EL_VAL(m->g->el[m->npos[id]])];
        if (set->w[b >> 5] >> (b & 31) & 1)
            closure(m, m->npos[id] + 1, m->npar[id]);
    }
    t = state_from_tmp(m);
    if (t == -3 || m->failed)
        return -3;
    m->st[s].next[b] = t;
    return t;
}

static int matcher_init(struct grammar_matcher *m, struct grammar *g,
                        const struct grammar_vocab *v)
{
    m->g = g;
    m->v = v;
    closure_begin(m);
    const int r = g->root;
    for (int a = g->rule_alt[r]; a < g->rule_alt[r + 1]; a++)
        closure(m, g->alt[a], -1);
    m->cur = state_from_tmp(m);
    if (m->cur == ST_DEAD)
        return mfail(m, "the grammar matches nothing");
    if (m->failed || m->cur < 0)
        return -1;
    if (v) {
        size_t words = ((size_t)v->n_vocab + 31) / 32;
        m->mask_buf = malloc(words * sizeof *m->mask_buf);
        m->logit_buf = malloc((size_t)v->n_vocab * sizeof *m->logit_buf);
        m->walk = malloc(((size_t)v->max_depth + 1) * sizeof *m->walk);
        if (!m->mask_buf || !m->logit_buf || !m->walk)
            return mfail(m, "out of memory");
    }
    return 0;
}

static void matcher_release(struct grammar_matcher *m)
{
    for (int i = 0; i < m->n_st; i++) {
        free(m->st[i].next);
        free(m->st[i].mask);
    }
    free(m->st);
    free(m->sids);
    free(m->st_tab.slot);
    free(m->npos);
    free(m->npar);
    free(m->ndist);
    free(m->node_tab.slot);
    free(m->tmp);
    free(m->vkey);
    free(m->vstamp);
    free(m->work);
    free(m->mask_buf);
    free(m->logit_buf);
    free(m->walk);
}

struct grammar_matcher *grammar_matcher_new(struct grammar *g, const struct grammar_vocab *v,
                                            char *err, size_t errlen)
{
    struct grammar_matcher *m = calloc(1, sizeof *m);
    if (!m) {
        omni_fail(err, errlen, OMNI_ERR_NOMEM, "grammar: out of memory");
        return NULL;
    }
    if (matcher_init(m, g, v) < 0) {
        omni_fail(err, errlen, OMNI_ERR_ARG, "%s", m->err);
        matcher_release(m);
        free(m);
        return NULL;
    }
    m->g = grammar_ref(g);
    m->owns_ref = true;
    return m;
}

void grammar_matcher_free(struct grammar_matcher *m)
{
    if (!m)
        return;
    matcher_release(m);
    if (m->owns_ref)
        grammar_free(m->g);
    free(m);
}

const char *grammar_matcher_error(const struct grammar_matcher *m)
{
    return m->failed ? m->err : "";
}

bool grammar_matcher_can_end(const struct grammar_matcher *m)
{
    return m->ended || (m->cur >= 0 && m->st[m->cur].accept);
}

bool grammar_matcher_must_end(const struct grammar_matcher *m)
{
    return m->ended || (m->cur >= 0 && m->st[m->cur].accept && m->st[m->cur].n == 0);
}

int grammar_matcher_accept_bytes(struct grammar_matcher *m, const char *s, size_t len)
{
    if (m->failed || m->ended)
        return OMNI_ERR_ARG;
    int32_t cur = m->cur;
    for (size_t i = 0; i < len; i++) {
        cur = step(m, cur, (unsigned char)s[i]);
        if (cur < 0)
            return cur == -3 ? OMNI_ERR_NOMEM : OMNI_ERR_ARG;
    }
    m->cur = cur;
    return 0;
}

int grammar_matcher_next_bytes(struct grammar_matcher *m, uint32_t set[8])
{
    memset(set, 0, 8 * sizeof *set);
    if (m->failed || m->ended)
        return m->failed ? OMNI_ERR_NOMEM : 0;
    for (unsigned b = 0; b < 256; b++) {
        const int32_t t = step(m, m->cur, b);
        if (t == -3)
            return OMNI_ERR_NOMEM;
        if (t >= 0)
            set[b >> 5] |= 1u << (b & 31);
    }
    return 0;
}

static bool is_eog(const struct grammar_vocab *v, int32_t t)
{
    for (int i = 0; i < v->n_eog; i++)
        if (v->eog[i] == t)
            return true;
    return false;
}

int grammar_matcher_accept(struct grammar_matcher *m, int32_t token)
{
    const struct grammar_vocab *v = m->v;
    if (!v || token < 0 || token >= v->n_vocab || m->ended)
        return OMNI_ERR_ARG;
    if (is_eog(v, token)) {
        if (!m->st[m->cur].accept)
            return OMNI_ERR_ARG;
        m->ended = true;
        return 0;
    }
    const int64_t len = v->off[token + 1] - v->off[token];
    if (len == 0)
        return OMNI_ERR_ARG;
    return grammar_matcher_accept_bytes(m, v->bytes + v->off[token], (size_t)len);
}

/* Which tokens a trie walk allows. */
enum walk_mode {
    WALK_ALL,                /* every token the grammar takes */
    WALK_SHORTEST,           /* those that keep to a shortest way to the end */
    WALK_WITHIN,             /* those after which an end is at most limit bytes away,
                                and no farther than it is now */
};

/* Walk the trie from state s; a token is allowed when none of its bytes
 * leads to a dead state (and, by mode, when it keeps the end near).
 * Subtrees behind a dead byte are skipped whole; WALK_SHORTEST also skips
 * every byte that does not bring the end one byte closer (no byte brings
 * it closer by more), so it costs little more than the path itself. Sets
 * m->st[s].next_max for WALK_ALL; *any: some token is allowed. */
static int walk_mask(struct grammar_matcher *m, int32_t s, uint32_t *bits, enum walk_mode mode,
                     int64_t limit, bool *any)
{
    const struct grammar_vocab *v = m->v;
    memset(bits, 0, ((size_t)v->n_vocab + 31) / 32 * sizeof *bits);
    const int32_t d0 = m->st[s].dist;
    int32_t next_max = 0;
    bool got = false;
    int32_t *walk = m->walk;
    walk[0] = s;
    const int32_t n = v->n_nodes;
    for (int32_t i = 0; i < n;) {
        const int32_t from = walk[v->depth[i] - 1];
        const int32_t *next = m->st[from].next;
        int32_t t = next ? next[v->byte[i]] : ST_UNKNOWN;
        if (t == ST_UNKNOWN && (t = step(m, from, v->byte[i])) == -3)
            return -1;
        if (t < 0 || (mode == WALK_SHORTEST && m->st[t].dist != d0 - v->depth[i])) {
            i = v->end[i];
            continue;
        }
        walk[v->depth[i]] = t;
        if (v->tok_start[i] < v->tok_start[i + 1] && (mode != WALK_WITHIN || (m->st[t].dist <= limit && m->st[t].dist <= d0))) {
            if (m->st[t].dist > next_max)
                next_max = m->st[t].dist;
            got = true;
            for (int32_t k = v->tok_start[i]; k < v->tok_start[i + 1]; k++)
                bits[v->ids[k] >> 5] |= 1u << (v->ids[k] & 31);
        }
        i++;
    }
    if (m->st[s].accept) {
        for (int i = 0; i < v->n_eog; i++)
            bits[v->eog[i] >> 5] |= 1u << (v->eog[i] & 31);
        got = got || v->n_eog > 0;
    }
    if (mode == WALK_ALL) /* m->st may have moved during the walk */
        m->st[s].next_max = next_max;
    if (any)
        *any = got;
    return 0;
}

static int compute_mask(struct grammar_matcher *m, int32_t s, uint32_t *bits)
{
    return walk_mask(m, s, bits, WALK_ALL, 0, NULL);
}

const uint32_t *grammar_matcher_mask(struct grammar_matcher *m)
{
    if (!m->v) {
        mfail(m, "no vocabulary");
        return NULL;
    }
    if (m->failed)
        return NULL;
    const size_t words = ((size_t)m->v->n_vocab + 31) / 32;
    if (m->ended) {
        memset(m->mask_buf, 0, words * sizeof *m->mask_buf);
        return m->mask_buf;
    }
    struct mstate *s = &m->st[m->cur];
    if (s->mask)
        return s->mask;
    uint32_t *bits = m->mask_buf;
    if (m->n_masks < GRAMMAR_MAX_MASKS) {
        if (!(bits = malloc(words * sizeof *bits)))
            return mfail(m, "out of memory"), NULL;
    }
    if (compute_mask(m, m->cur, bits) < 0) {
        if (bits != m->mask_buf)
            free(bits);
        return NULL;
    }
    if (bits != m->mask_buf) {
        m->st[m->cur].mask = bits; /* m->st may have moved during the walk */
        m->n_masks++;
    }
    return bits;
}

/* logits with the tokens not in bits at -inf, in m's buffer. */
static const float *apply_bits(struct grammar_matcher *m, const uint32_t *bits, const float *logits)
{
    const int32_t n = m->v->n_vocab;
    float *out = m->logit_buf;
    for (int32_t w = 0; w * 32 < n; w++) {
        const int32_t base = w * 32, cnt = n - base < 32 ? n - base : 32;
        const uint32_t b = bits[w];
        if (b == 0) {
            for (int k = 0; k < cnt; k++)
                out[base + k] = -INFINITY;
        } else if (b == UINT32_MAX && cnt == 32) {
            memcpy(out + base, logits + base, 32 * sizeof *out);
        } else {
            for (int k = 0; k < cnt; k++)
                out[base + k] = (b >> k & 1) ? logits[base + k] : -INFINITY;
        }
    }
    return out;
}

const float *grammar_matcher_apply(struct grammar_matcher *m, const float *logits)
{
    const uint32_t *bits = grammar_matcher_mask(m);
    return bits ? apply_bits(m, bits, logits) : NULL;
}

int32_t grammar_matcher_distance(const struct grammar_matcher *m)
{
    if (m->failed)
        return GRAMMAR_NO_END;
    return m->ended ? 0 : m->st[m->cur].dist;
}

const uint32_t *grammar_matcher_mask_closing(struct grammar_matcher *m)
{
    if (!m->v) {
        mfail(m, "no vocabulary");
        return NULL;
    }
    if (m->failed)
        return NULL;
    bool any;
    if (m->ended) {
        memset(m->mask_buf, 0, ((size_t)m->v->n_vocab + 31) / 32 * sizeof *m->mask_buf);
        return m->mask_buf;
    }
    return walk_mask(m, m->cur, m->mask_buf, WALK_SHORTEST, 0, &any) < 0 ? NULL : m->mask_buf;
}

const float *grammar_matcher_apply_budget(struct grammar_matcher *m, const float *logits,
                                          int64_t tokens_left)
{
    const uint32_t *plain = grammar_matcher_mask(m); /* cached; sets next_max */
    if (!plain)
        return NULL;
    const int32_t d = m->ended ? GRAMMAR_NO_END : m->st[m->cur].dist;
    /* After this token, tokens_left - 1 remain: the bytes to the end plus
     * the end token must fit in them (a byte costs at most one token). Near
     * the limit nothing new is opened either (no token that moves the end
     * away: a further call of a list, an optional key), so what is open
     * gets the rest of the tokens. */
    const int64_t limit = tokens_left - 2;
    if (tokens_left < 0 || d == GRAMMAR_NO_END || m->st[m->cur].next_max <= limit)
        return apply_bits(m, plain, logits); /* every allowed token keeps the end in reach */
    bool any = false;
    if (d <= limit + 1 && walk_mask(m, m->cur, m->mask_buf, WALK_WITHIN, limit, &any) < 0)
        return NULL;
    /* already out of reach (the limit was met before the grammar started):
     * the shortest way, to end as close as possible */
    if (!any && walk_mask(m, m->cur, m->mask_buf, WALK_SHORTEST, 0, &any) < 0)
        return NULL;
    if (any)
        return apply_bits(m, m->mask_buf, logits);
    /* no token spells a shortest way (a vocabulary without byte tokens):
     * the plain mask, and the limit may cut the output */
    return apply_bits(m, grammar_matcher_mask(m), logits);
}

bool grammar_match(const struct grammar *g, const char *text, size_t len)
{
    struct grammar_matcher m = { 0 };
    /* the matcher only reads g; it is not retained past this call */
    bool ok = matcher_init(&m, (struct grammar *)g, NULL) == 0 &&
              grammar_matcher_accept_bytes(&m, text, len) == 0 && m.st[m.cur].accept;
    matcher_release(&m);
    return ok;
}
