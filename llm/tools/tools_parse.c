/* tools_parse.c - from the text of one tool-call region to calls: a lenient
 * JSON reader (what models write is often almost JSON), pythonic call lists,
 * the XML-ish <function=N><parameter=P> form, and the per-family spellings
 * of name + arguments; then argument coercion to the tool's schema types. */
#include "llm/tools/tools_int.h"

#include <cjson/cJSON.h>
#include <ctype.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define TOOLS_JSON_MAX_DEPTH 64

// ---- lenient JSON -----------------------------------------------------------------

struct lj {
    const char *s;
    size_t n, i;
    int depth;
};

static void lj_ws(struct lj *p)
{
    while (p->i < p->n && (p->s[p->i] == ' ' || p->s[p->i] == '\t' || p->s[p->i] == '\n' ||
                           p->s[p->i] == '\r'))
        p->i++;
}

static bool lj_eof(const struct lj *p) { return p->i >= p->n; }

static int lj_hex4(const char *s, size_t n)
{
    if (n < 4)
        return -1;
    int v = 0;
    for (int k = 0; k < 4; k++) {
        int c = s[k], d;
        if (c >= '0' && c <= '9') d = c - '0';
        else if (c >= 'a' && c <= 'f') d = c - 'a' + 10;
        else if (c >= 'A' && c <= 'F') d = c - 'A' + 10;
        else return -1;
        v = v * 16 + d;
    }
    return v;
}

static size_t lj_utf8(unsigned cp, char *out)
{
    if (cp < 0x80) { out[0] = (char)cp; return 1; }
    if (cp < 0x800) { out[0] = (char)(0xC0 | cp >> 6); out[1] = (char)(0x80 | (cp & 63)); return 2; }
    if (cp < 0x10000) {
        out[0] = (char)(0xE0 | cp >> 12); out[1] = (char)(0x80 | ((cp >> 6) & 63));
        out[2] = (char)(0x80 | (cp & 63));
        return 3;
    }
    out[0] = (char)(0xF0 | cp >> 18); out[1] = (char)(0x80 | ((cp >> 12) & 63));
    out[2] = (char)(0x80 | ((cp >> 6) & 63)); out[3] = (char)(0x80 | (cp & 63));
    return 4;
}

/* A string quoted by ' or "; raw control characters are kept as they are and
 * an unterminated string ends at the end of the text. malloc'd. */
static char *lj_string(struct lj *p)
{
    char q = p->s[p->i++];
    char *out = malloc(p->n - p->i + 1);
    if (!out)
        return NULL;
    size_t o = 0;
    while (p->i < p->n && p->s[p->i] != q) {
        char c = p->s[p->i++];
        if (c != '\\' || p->i >= p->n) {
            out[o++] = c;
            continue;
        }
        char e = p->s[p->i++];
        switch (e) {
        case 'n': out[o++] = '\n'; break;
        case 't': out[o++] = '\t'; break;
        case 'r': out[o++] = '\r'; break;
        case 'b': out[o++] = '\b'; break;
        case 'f': out[o++] = '\f'; break;
        case 'u': {
            int cp = lj_hex4(p->s + p->i, p->n - p->i);
            if (cp < 0) {
                out[o++] = 'u';
                break;
            }
            p->i += 4;
            if (cp >= 0xD800 && cp < 0xDC00 && p->i + 6 <= p->n && p->s[p->i] == '\\' &&
                p->s[p->i + 1] == 'u') {
                int lo = lj_hex4(p->s + p->i + 2, 4);
                if (lo >= 0xDC00 && lo < 0xE000) {
                    cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                    p->i += 6;
                }
            }
            if (cp >= 0xD800 && cp < 0xE000)
                cp = 0xFFFD;
            /* \uXXXX never takes more bytes than its six characters */
            o += lj_utf8((unsigned)cp, out + o);
            break;
        }
        default: out[o++] = e; break;   /* \" \\ \/ \' and unknown escapes: the character */
        }
    }
    if (p->i < p->n)
        p->i++;   /* closing quote */
    out[o] = 0;
    return out;
}

static bool lj_ident_char(char c) { return isalnum((unsigned char)c) || c == '_' || c == '$' || c == '-'; }

static cJSON *lj_value(struct lj *p);

static cJSON *lj_container(struct lj *p, bool object)
{
    char close = object ? '}' : ']';
    cJSON *v = object ? cJSON_CreateObject() : cJSON_CreateArray();
    if (!v)
        return NULL;
    p->i++;
    for (;;) {
        lj_ws(p);
        if (lj_eof(p))
            return v;   /* missing closing bracket(s) */
        char c = p->s[p->i];
        if (c == close) {
            p->i++;
            return v;
        }
        if (c == ',') {   /* trailing or doubled comma */
            p->i++;
            continue;
        }
        char *key = NULL;
        if (object) {
            if (c == '"' || c == '\'') {
                key = lj_string(p);
            } else if (lj_ident_char(c)) {
                size_t b = p->i;
                while (p->i < p->n && lj_ident_char(p->s[p->i]))
                    p->i++;
                key = strndup(p->s + b, p->i - b);
            } else {
                goto fail;
            }
            if (!key)
                goto fail;
            lj_ws(p);
            if (lj_eof(p)) {
                free(key);
                return v;
            }
            if (p->s[p->i] != ':' && p->s[p->i] != '=') {
                free(key);
                goto fail;
            }
            p->i++;
            lj_ws(p);
            if (lj_eof(p)) {
                free(key);
                return v;
            }
        }
        cJSON *item = lj_value(p);
        if (!item) {
            free(key);
            if (lj_eof(p))
                return v;
            goto fail;
        }
        if (object) {
            cJSON_AddItemToObject(v, key, item);
            free(key);
        } else {
            cJSON_AddItemToArray(v, item);
        }
        lj_ws(p);
        if (lj_eof(p))
            return v;
        c = p->s[p->i];
        if (c == ',') {
            p->i++;
        } else if (c != close && !(object && (c == '"' || c == '\''))) {
            goto fail;   /* a missing comma before a key is forgiven, nothing else */
        }
    }
fail:
    cJSON_Delete(v);
    return NULL;
}

static cJSON *lj_value(struct lj *p)
{
    lj_ws(p);
    if (lj_eof(p) || p->depth >= TOOLS_JSON_MAX_DEPTH)
        return NULL;
    char c = p->s[p->i];
    if (c == '{' || c == '[') {
        p->depth++;
        cJSON *v = lj_container(p, c == '{');
        p->depth--;
        return v;
    }
    if (c == '"' || c == '\'') {
        char *s = lj_string(p);
        cJSON *v = s ? cJSON_CreateString(s) : NULL;
        free(s);
        return v;
    }
    if (c == '-' || c == '+' || c == '.' || isdigit((unsigned char)c)) {
        char num[64];
        size_t k = 0;
        while (p->i < p->n && k < sizeof num - 1 &&
               (isdigit((unsigned char)p->s[p->i]) || strchr("+-.eE", p->s[p->i])))
            num[k++] = p->s[p->i++];
        num[k] = 0;
        char *end;
        double d = strtod(num, &end);
        if (end == num || !isfinite(d))
            return NULL;
        return cJSON_CreateNumber(d);
    }
    static const struct { const char *word; int kind; } words[] = {
        { "true", 1 }, { "True", 1 }, { "false", 0 }, { "False", 0 }, { "null", 2 }, { "None", 2 },
    };
    for (size_t k = 0; k < sizeof words / sizeof words[0]; k++) {
        size_t wl = strlen(words[k].word);
        if (p->n - p->i < wl && !memcmp(p->s + p->i, words[k].word, p->n - p->i)) {
            p->i = p->n;   /* cut off mid-word at the end of the text */
            return NULL;
        }
        if (p->n - p->i >= wl && !memcmp(p->s + p->i, words[k].word, wl) &&
            (p->i + wl == p->n || !lj_ident_char(p->s[p->i + wl]))) {
            p->i += wl;
            return words[k].kind == 2 ? cJSON_CreateNull() : cJSON_CreateBool(words[k].kind);
        }
    }
    return NULL;
}

cJSON *tools_json_parse_lenient(const char *text, size_t len, size_t *used)
{
    struct lj p = { text, len, 0, 0 };
    cJSON *v = lj_value(&p);
    if (used)
        *used = v ? p.i : 0;
    return v;
}

// ---- call shapes ----------------------------------------------------------------

void tools_calls_clear(struct tools_calls *c)
{
    for (int i = 0; i < c->n; i++) {
        free(c->v[i].name);
        cJSON_Delete(c->v[i].args);
    }
    free(c->v);
    memset(c, 0, sizeof *c);
}

/* Takes ownership of args (NULL: {}). name is copied (n bytes). */
static int tools_calls_add(struct tools_calls *c, const char *name, size_t n, cJSON *args)
{
    while (n > 0 && isspace((unsigned char)*name)) {
        name++;
        n--;
    }
    while (n > 0 && isspace((unsigned char)name[n - 1]))
        n--;
    if (n == 0 || (args && !cJSON_IsObject(args))) {
        cJSON_Delete(args);
        return -1;
    }
    if (c->n == c->cap) {
        int cap = c->cap ? c->cap * 2 : 4;
        struct tools_call *v = realloc(c->v, (size_t)cap * sizeof *v);
        if (!v) {
            cJSON_Delete(args);
            return -1;
        }
        c->v = v;
        c->cap = cap;
    }
    char *nm = strndup(name, n);
    if (!args)
        args = cJSON_CreateObject();
    if (!nm || !args) {
        free(nm);
        cJSON_Delete(args);
        return -1;
    }
    c->v[c->n].name = nm;
    c->v[c->n].args = args;
    c->n++;
    return 0;
}

/* Arguments given as a JSON string ("arguments": "{\"a\":1}") become the object. */
static cJSON *tools_args_value(cJSON *v)
{
    if (!v || cJSON_IsNull(v))
        return cJSON_CreateObject();
    if (cJSON_IsString(v)) {
        cJSON *o = tools_json_parse_lenient(v->valuestring, strlen(v->valuestring), NULL);
        if (cJSON_IsObject(o))
            return o;
        cJSON_Delete(o);
        return NULL;
    }
    return cJSON_IsObject(v) ? cJSON_Duplicate(v, true) : NULL;
}

/* One JSON call object in any of the shapes models use. */
static int tools_json_call(const cJSON *o, struct tools_calls *out)
{
    if (!cJSON_IsObject(o))
        return 0;
    const cJSON *fn = cJSON_GetObjectItemCaseSensitive(o, "function");
    if (cJSON_IsObject(fn))   /* {"type":"function","function":{"name",...}} */
        return tools_json_call(fn, out);
    const cJSON *calls = cJSON_GetObjectItemCaseSensitive(o, "tool_calls");
    if (cJSON_IsArray(calls)) {
        int got = 0;
        const cJSON *c;
        cJSON_ArrayForEach(c, calls) got += tools_json_call(c, out);
        return got;
    }
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(o, "name");
    if (!cJSON_IsString(name))
        name = cJSON_GetObjectItemCaseSensitive(o, "tool_name");
    if (!cJSON_IsString(name) && cJSON_IsString(fn))
        name = fn;
    if (!cJSON_IsString(name))
        return 0;
    const char *keys[] = { "arguments", "parameters", "args", "input", "tool_input" };
    cJSON *args = NULL;
    for (size_t k = 0; k < sizeof keys / sizeof keys[0] && !args; k++) {
        const cJSON *a = cJSON_GetObjectItemCaseSensitive(o, keys[k]);
        if (a)
            args = tools_args_value((cJSON *)a);
    }
    return tools_calls_add(out, name->valuestring, strlen(name->valuestring), args) == 0;
}

static int tools_json_calls(const cJSON *v, struct tools_calls *out)
{
    if (cJSON_IsArray(v)) {
        int got = 0;
        const cJSON *c;
        cJSON_ArrayForEach(c, v) got += tools_json_call(c, out);
        return got;
    }
    return tools_json_call(v, out);
}

static const char *tools_skip_ws(const char *s, const char *end)
{
    while (s < end && isspace((unsigned char)*s))
        s++;
    return s;
}

static bool tools_ident_start(char c) { return isalpha((unsigned char)c) || c == '_'; }
static bool tools_ident_char(char c) { return isalnum((unsigned char)c) || c == '_' || c == '.' || c == '-'; }

/* name(k=v, ...) at s; *s advanced past ')'. 1 ok, 0 not a call. */
static int tools_pycall(const char **sp, const char *end, struct tools_calls *out)
{
    const char *s = tools_skip_ws(*sp, end), *nb = s;
    if (s >= end || !tools_ident_start(*s))
        return 0;
    while (s < end && tools_ident_char(*s))
        s++;
    size_t nl = (size_t)(s - nb);
    s = tools_skip_ws(s, end);
    if (s >= end || *s != '(')
        return 0;
    s++;
    /* Llama's built-in tools: brave_search.call(query="...") */
    if (nl > 5 && !memcmp(nb + nl - 5, ".call", 5))
        nl -= 5;
    cJSON *args = cJSON_CreateObject();
    if (!args)
        return 0;
    for (;;) {
        s = tools_skip_ws(s, end);
        if (s >= end || *s == ')') {
            if (s < end)
                s++;
            break;
        }
        if (*s == ',') {
            s++;
            continue;
        }
        const char *kb = s;
        while (s < end && (isalnum((unsigned char)*s) || *s == '_'))
            s++;
        const char *ke = s;
        s = tools_skip_ws(s, end);
        if (ke == kb || s >= end || (*s != '=' && *s != ':')) {
            cJSON_Delete(args);
            return 0;
        }
        s++;
        size_t used = 0;
        cJSON *v = tools_json_parse_lenient(s, (size_t)(end - s), &used);
        if (!v) {
            cJSON_Delete(args);
            return 0;
        }
        char *key = strndup(kb, (size_t)(ke - kb));
        if (key)
            cJSON_AddItemToObject(args, key, v);
        else
            cJSON_Delete(v);
        free(key);
        s += used;
    }
    *sp = s;
    return tools_calls_add(out, nb, nl, args) == 0;
}

/* [f(a=1), g()] or f(a=1) (several separated by commas / newlines). */
static int tools_pythonic(const char *s, const char *end, struct tools_calls *out)
{
    s = tools_skip_ws(s, end);
    bool list = s < end && *s == '[';
    if (list)
        s++;
    int got = 0;
    for (;;) {
        s = tools_skip_ws(s, end);
        while (s < end && (*s == ',' || *s == ';'))
            s = tools_skip_ws(s + 1, end);
        if (s >= end || (list && *s == ']'))
            break;
        int r = tools_pycall(&s, end, out);
        if (r <= 0)
            break;
        got++;
    }
    return got;
}

/* Consecutive JSON values (Llama 3.1 joins several calls with ';'). */
static int tools_json_seq(const char *s, const char *end, struct tools_calls *out, bool *all)
{
    int got = 0;
    *all = true;
    for (;;) {
        s = tools_skip_ws(s, end);
        while (s < end && (*s == ';' || *s == ','))
            s = tools_skip_ws(s + 1, end);
        if (s >= end)
            break;
        if (*s != '{' && *s != '[') {
            *all = false;
            break;
        }
        size_t used = 0;
        cJSON *v = tools_json_parse_lenient(s, (size_t)(end - s), &used);
        if (!v) {
            *all = false;
            break;
        }
        int n = tools_json_calls(v, out);
        cJSON_Delete(v);
        if (n == 0) {
            *all = false;
            break;
        }
        got += n;
        s += used;
    }
    return got;
}

static const char *tools_find(const char *s, const char *end, const char *needle)
{
    size_t nl = strlen(needle);
    for (; s + nl <= end; s++)
        if (*s == *needle && !memcmp(s, needle, nl))
            return s;
    return NULL;
}

/* Trim one newline on each side: the XML form puts values on their own lines. */
static cJSON *tools_param_value(const char *b, const char *e)
{
    if (b < e && *b == '\n') b++;
    if (e > b && e[-1] == '\n') e--;
    char *v = strndup(b, (size_t)(e - b));
    cJSON *s = v ? cJSON_CreateString(v) : NULL;
    free(v);
    return s;
}

/* <function=N> then <parameter=P>V</parameter>... or a JSON object, up to
 * </function>; several in a row. */
static int tools_xml_functions(const char *s, const char *end, struct tools_calls *out)
{
    int got = 0;
    const char *f;
    while ((f = tools_find(s, end, "<function=")) != NULL) {
        const char *nb = f + 10, *ne = nb;
        while (ne < end && *ne != '>' && *ne != '\n')
            ne++;
        const char *fe = tools_find(ne, end, "</function>");
        const char *body_end = fe ? fe : end;
        const char *b = ne < end && *ne == '>' ? ne + 1 : ne;
        cJSON *args = NULL;
        const char *pb = tools_skip_ws(b, body_end);
        if (pb < body_end && *pb == '{') {
            args = tools_json_parse_lenient(pb, (size_t)(body_end - pb), NULL);
        } else {
            args = cJSON_CreateObject();
            const char *p;
            while (args && (p = tools_find(b, body_end, "<parameter=")) != NULL) {
                const char *kb = p + 11, *ke = kb;
                while (ke < body_end && *ke != '>' && *ke != '\n')
                    ke++;
                const char *vb = ke < body_end && *ke == '>' ? ke + 1 : ke;
                const char *ve = tools_find(vb, body_end, "</parameter>");
                const char *next = tools_find(vb, body_end, "<parameter=");
                if (!ve || (next && next < ve))
                    ve = next ? next : body_end;
                char *key = strndup(kb, (size_t)(ke - kb));
                cJSON *v = tools_param_value(vb, ve);
                if (key && v)
                    cJSON_AddItemToObject(args, key, v);
                else
                    cJSON_Delete(v);
                free(key);
                b = ve;
                if (b < body_end && !strncmp(b, "</parameter>", 12))
                    b += 12;
            }
        }
        got += tools_calls_add(out, nb, (size_t)(ne - nb), args) == 0;
        s = fe ? fe + 11 : end;
    }
    return got;
}

/* Strip a ```lang fence around the text (the closing one may be missing). */
static void tools_unfence(const char **b, const char **e)
{
    const char *s = tools_skip_ws(*b, *e);
    if (*e - s < 3 || memcmp(s, "```", 3) != 0)
        return;
    const char *nl = memchr(s, '\n', (size_t)(*e - s));
    s = nl ? nl + 1 : *e;
    const char *close = tools_find(s, *e, "```");
    *b = s;
    if (close)
        *e = close;
}

int tools_body_calls(const char *text, size_t len, struct tools_calls *out)
{
    const char *b = text, *e = text + len;
    tools_unfence(&b, &e);
    b = tools_skip_ws(b, e);
    while (e > b && isspace((unsigned char)e[-1]))
        e--;
    if (b >= e)
        return 0;
    /* DeepSeek: [function]<｜tool▁sep｜>NAME\n```json\n{...}\n``` or NAME<｜tool▁sep｜>{...} */
    static const char sep[] = "<\xef\xbd\x9ctool\xe2\x96\x81sep\xef\xbd\x9c>";
    const char *sp = tools_find(b, e, sep);
    if (sp) {
        const char *r = sp + sizeof sep - 1;
        const char *nb = b, *ne = sp;
        size_t ll = (size_t)(sp - b);
        if (ll == 0 || (ll == 8 && !memcmp(b, "function", 8))) {
            nb = tools_skip_ws(r, e);
            ne = nb;
            while (ne < e && *ne != '\n' && *ne != '{' && *ne != '`')
                ne++;
            r = ne;
        }
        const char *ab = r, *ae = e;
        tools_unfence(&ab, &ae);
        ab = tools_skip_ws(ab, ae);
        cJSON *args = ab < ae ? tools_json_parse_lenient(ab, (size_t)(ae - ab), NULL) : NULL;
        return tools_calls_add(out, nb, (size_t)(ne - nb), args) == 0;
    }
    /* Mistral v11: NAME[ARGS]{...} (with an optional [CALL_ID]id before [ARGS]) */
    const char *ar = tools_find(b, e, "[ARGS]");
    if (ar) {
        const char *ne = tools_find(b, ar, "[CALL_ID]");
        if (!ne)
            ne = ar;
        cJSON *args = tools_json_parse_lenient(ar + 6, (size_t)(e - ar - 6), NULL);
        return tools_calls_add(out, b, (size_t)(ne - b), args) == 0;
    }
    if (tools_find(b, e, "<function="))
        return tools_xml_functions(b, e, out);
    /* FunctionGemma: call:NAME{key:<escape>text<escape>,n:1} */
    if (e - b > 5 && !memcmp(b, "call:", 5)) {
        const char *brace = memchr(b, '{', (size_t)(e - b));
        if (!brace)
            return 0;
        size_t al = (size_t)(e - brace);
        char *a = malloc(al + 1);
        if (!a)
            return 0;
        size_t o = 0;
        for (const char *q = brace; q < e;) {
            if (e - q >= 8 && !memcmp(q, "<escape>", 8)) {
                a[o++] = '"';
                q += 8;
            } else {
                a[o++] = *q++;
            }
        }
        cJSON *args = tools_json_parse_lenient(a, o, NULL);
        free(a);
        return tools_calls_add(out, b + 5, (size_t)(brace - b - 5), args) == 0;
    }
    if (*b == '{' || *b == '[') {
        const char *q = tools_skip_ws(b + 1, e);
        if (*b == '[' && q < e && tools_ident_start(*q))
            return tools_pythonic(b, e, out);
        bool all;
        return tools_json_seq(b, e, out, &all);
    }
    if (tools_ident_start(*b)) {
        const char *q = b;
        while (q < e && tools_ident_char(*q))
            q++;
        const char *r = tools_skip_ws(q, e);
        if (r < e && *r == '(')
            return tools_pythonic(b, e, out);
        if (r < e && *r == '{' && q > b) {   /* Functionary: NAME\n{...} */
            cJSON *args = tools_json_parse_lenient(r, (size_t)(e - r), NULL);
            return tools_calls_add(out, b, (size_t)(q - b), args) == 0;
        }
    }
    return 0;
}

int tools_bare_check(const char *s, size_t n, bool functionary)
{
    if (n == 0)
        return -1;
    if (s[0] == '`') {
        if (n < 3)
            return !memcmp(s, "```", n) ? -1 : 0;
        if (memcmp(s, "```", 3) != 0)
            return 0;
        const char *nl = memchr(s, '\n', n);
        if (!nl)
            return n < 24 ? -1 : 0;
        size_t ll = (size_t)(nl - s - 3);
        const char *lang = s + 3;
        static const char *const langs[] = { "", "json", "tool_code", "tool_call", "python", "tool_calls" };
        bool ok = false;
        for (size_t k = 0; k < sizeof langs / sizeof langs[0]; k++)
            ok |= strlen(langs[k]) == ll && !memcmp(lang, langs[k], ll);
        if (!ok)
            return 0;
        const char *r = nl + 1, *end = s + n;
        r = tools_skip_ws(r, end);
        return r >= end ? -1 : tools_bare_check(r, (size_t)(end - r), false);
    }
    if (s[0] == '{') {
        size_t i = 1;
        while (i < n && isspace((unsigned char)s[i]))
            i++;
        if (i >= n)
            return -1;
        if (s[i] != '"' && s[i] != '\'')
            return 0;
        size_t kb = ++i;
        while (i < n && s[i] != s[kb - 1])
            i++;
        if (i >= n)
            return n - kb < 16 ? -1 : 0;
        size_t kl = i - kb;
        static const char *const keys[] = { "name", "function", "type", "tool_calls", "tool_name" };
        for (size_t k = 0; k < sizeof keys / sizeof keys[0]; k++)
            if (strlen(keys[k]) == kl && !memcmp(s + kb, keys[k], kl))
                return 1;
        return 0;
    }
    if (s[0] == '[') {
        size_t i = 1;
        while (i < n && isspace((unsigned char)s[i]))
            i++;
        if (i >= n)
            return -1;
        if (s[i] == '{')
            return tools_bare_check(s + i, n - i, false);
        if (!tools_ident_start(s[i]))
            return 0;
        while (i < n && tools_ident_char(s[i]))
            i++;
        if (i >= n)
            return -1;
        return s[i] == '(';
    }
    if (functionary && tools_ident_start(s[0])) {
        size_t i = 0;
        while (i < n && tools_ident_char(s[i]))
            i++;
        if (i >= n)
            return i < 64 ? -1 : 0;
        if (s[i] != '\n')
            return 0;
        i++;
        if (i >= n)
            return -1;
        return s[i] == '{';
    }
    return 0;
}

// ---- schema coercion --------------------------------------------------------------

const cJSON *tools_find_schema(const cJSON *tools, const char *name)
{
    const cJSON *t;
    cJSON_ArrayForEach(t, tools) {
        const cJSON *fn = cJSON_GetObjectItemCaseSensitive(t, "function");
        if (!cJSON_IsObject(fn))
            fn = t;   /* a flat {"name","parameters"} tool */
        const cJSON *n = cJSON_GetObjectItemCaseSensitive(fn, "name");
        if (cJSON_IsString(n) && !strcmp(n->valuestring, name)) {
            const cJSON *p = cJSON_GetObjectItemCaseSensitive(fn, "parameters");
            if (!p)
                p = cJSON_GetObjectItemCaseSensitive(fn, "input_schema");   /* Anthropic */
            return p;
        }
    }
    return NULL;
}

static bool tools_type_allows(const cJSON *schema, const char *type)
{
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(schema, "type");
    if (cJSON_IsString(t))
        return !strcmp(t->valuestring, type);
    const cJSON *x;
    cJSON_ArrayForEach(x, t) if (cJSON_IsString(x) && !strcmp(x->valuestring, type)) return true;
    return false;
}

static bool tools_has_type(const cJSON *schema)
{
    return cJSON_GetObjectItemCaseSensitive(schema, "type") != NULL;
}

/* The coerced value, or NULL to keep v. */
static cJSON *tools_coerce_value(const cJSON *v, const cJSON *schema)
{
    if (!cJSON_IsObject(schema) || !tools_has_type(schema))
        return NULL;
    bool want_str = tools_type_allows(schema, "string");
    if (cJSON_IsString(v)) {
        if (want_str)
            return NULL;
        const char *s = v->valuestring;
        size_t sl = strlen(s);
        while (sl > 0 && isspace((unsigned char)s[sl - 1]))
            sl--;
        while (sl > 0 && isspace((unsigned char)*s)) {
            s++;
            sl--;
        }
        if (tools_type_allows(schema, "integer") || tools_type_allows(schema, "number")) {
            char *end;
            char *tmp = strndup(s, sl);
            double d = tmp ? strtod(tmp, &end) : 0;
            bool ok = tmp && sl > 0 && *end == 0 && isfinite(d);
            free(tmp);
            if (ok && (tools_type_allows(schema, "number") || d == floor(d)))
                return cJSON_CreateNumber(d);
        }
        if (tools_type_allows(schema, "boolean")) {
            if ((sl == 4 && !strncasecmp(s, "true", 4)) || (sl == 1 && *s == '1'))
                return cJSON_CreateTrue();
            if ((sl == 5 && !strncasecmp(s, "false", 5)) || (sl == 1 && *s == '0'))
                return cJSON_CreateFalse();
        }
        if (tools_type_allows(schema, "object") || tools_type_allows(schema, "array")) {
            cJSON *o = tools_json_parse_lenient(s, sl, NULL);
            if ((cJSON_IsObject(o) && tools_type_allows(schema, "object")) ||
                (cJSON_IsArray(o) && tools_type_allows(schema, "array"))) {
                cJSON *inner = tools_coerce_value(o, schema);
                if (inner) {
                    cJSON_Delete(o);
                    return inner;
                }
                return o;
            }
            cJSON_Delete(o);
        }
        if (tools_type_allows(schema, "null") && sl == 4 && !strncmp(s, "null", 4))
            return cJSON_CreateNull();
        return NULL;
    }
    if (want_str && (cJSON_IsNumber(v) || cJSON_IsBool(v) || cJSON_IsObject(v) || cJSON_IsArray(v))) {
        if (cJSON_IsNumber(v) && (tools_type_allows(schema, "number") || tools_type_allows(schema, "integer")))
            return NULL;
        char *s = cJSON_PrintUnformatted(v);
        cJSON *r = s ? cJSON_CreateString(s) : NULL;
        free(s);
        return r;
    }
    if (cJSON_IsNumber(v) && tools_type_allows(schema, "boolean") && !tools_type_allows(schema, "number") &&
        !tools_type_allows(schema, "integer") && (v->valuedouble == 0 || v->valuedouble == 1))
        return cJSON_CreateBool(v->valuedouble == 1);
    if (cJSON_IsObject(v)) {
        tools_coerce_args((cJSON *)v, schema);
    } else if (cJSON_IsArray(v)) {
        const cJSON *items = cJSON_GetObjectItemCaseSensitive(schema, "items");
        for (int i = 0; cJSON_IsObject(items) && i < cJSON_GetArraySize(v); i++) {
            cJSON *r = tools_coerce_value(cJSON_GetArrayItem(v, i), items);
            if (r)
                cJSON_ReplaceItemInArray((cJSON *)v, i, r);
        }
    }
    return NULL;
}

void tools_coerce_args(cJSON *args, const cJSON *schema)
{
    const cJSON *props = cJSON_GetObjectItemCaseSensitive(schema, "properties");
    if (!cJSON_IsObject(args) || !cJSON_IsObject(props))
        return;
    for (cJSON *a = args->child; a; a = a->next) {
        const cJSON *ps = cJSON_GetObjectItemCaseSensitive(props, a->string);
        cJSON *r = tools_coerce_value(a, ps);
        if (!r)
            continue;
        char *key = strdup(a->string);
        if (key && cJSON_ReplaceItemInObjectCaseSensitive(args, key, r))
            a = r;
        else
            cJSON_Delete(r);
        free(key);
    }
}

// ---- streaming scan ---------------------------------------------------------------

void tools_partials_clear(struct tools_partials *ps)
{
    for (int i = 0; i < ps->n; i++) {
        free(ps->v[i].name);
        free(ps->v[i].args);
    }
    free(ps->v);
    memset(ps, 0, sizeof *ps);
}

/* End of the string whose opening quote is at s[i] (past its closing quote),
 * or 0 while it is not closed. */
static size_t ts_string_end(const char *s, size_t n, size_t i)
{
    for (i++; i < n; i++) {
        if (s[i] == '\\')
            i++;
        else if (s[i] == '"')
            return i + 1;
    }
    return 0;
}

/* Where a string's content (from i) can be cut so that decoding the prefix
 * gives what decoding the whole gives: never inside an escape, a surrogate
 * pair or a UTF-8 sequence. Stops at the closing quote. */
static size_t ts_string_safe(const char *s, size_t n, size_t i)
{
    while (i < n && s[i] != '"') {
        size_t u = 1;
        unsigned char c = (unsigned char)s[i];
        if (c == '\\') {
            u = i + 1 < n && s[i + 1] == 'u' ? 6 : 2;
            if (u == 6 && i + 6 <= n && lj_hex4(s + i + 2, 4) >= 0xD800 && lj_hex4(s + i + 2, 4) < 0xDC00)
                u = 12;   /* a high surrogate: lj_string looks at the next six bytes */
        } else if (c >= 0xC0) {
            u = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : 2;
        }
        if (i + u > n)
            break;
        i += u;
    }
    return i;
}

/* The decoded content of s[i..end) (i at the opening quote) printed as cJSON
 * prints strings; closed: with the closing quote. malloc'd, NULL on no memory. */
static char *ts_print_string(const char *s, size_t i, size_t end, bool closed)
{
    struct lj l = { s, end, i, 0 };
    char *raw = lj_string(&l);
    cJSON *str = raw ? cJSON_CreateString(raw) : NULL;
    char *out = str ? cJSON_PrintUnformatted(str) : NULL;
    free(raw);
    cJSON_Delete(str);
    if (out && !closed)
        out[strlen(out) - 1] = 0;
    return out;
}

/* End of a complete JSON value at s[i], 0 while it may still grow. */
static size_t ts_value_end(const char *s, size_t n, size_t i)
{
    if (s[i] == '"')
        return ts_string_end(s, n, i);
    if (s[i] == '{' || s[i] == '[') {
        int depth = 0;
        for (; i < n; i++) {
            if (s[i] == '"') {
                size_t e = ts_string_end(s, n, i);
                if (!e)
                    return 0;
                i = e - 1;
            } else if (s[i] == '{' || s[i] == '[') {
                depth++;
            } else if ((s[i] == '}' || s[i] == ']') && --depth == 0) {
                return i + 1;
            }
        }
        return 0;
    }
    while (i < n && (isalnum((unsigned char)s[i]) || s[i] == '-' || s[i] == '+' || s[i] == '.'))
        i++;
    return i < n ? i : 0;
}

struct ts_out {
    char *s;
    size_t len;
    bool oom;
};

static void ts_put(struct ts_out *o, const char *s, size_t n)
{
    char *ns = o->oom ? NULL : realloc(o->s, o->len + n + 1);
    if (!ns) {
        o->oom = true;
        return;
    }
    memcpy(ns + o->len, s, n);
    o->len += n;
    ns[o->len] = 0;
    o->s = ns;
}

static void ts_put_owned(struct ts_out *o, char *s)
{
    if (s)
        ts_put(o, s, strlen(s));
    else
        o->oom = true;
    free(s);
}

/* Would tools_coerce_args leave a string under key alone? */
static bool ts_string_kept(const cJSON *schema, const char *key)
{
    const cJSON *props = cJSON_GetObjectItemCaseSensitive(schema, "properties");
    if (!cJSON_IsObject(props))
        return true;
    const cJSON *ps = cJSON_GetObjectItemCaseSensitive(props, key);
    return !cJSON_IsObject(ps) || !tools_has_type(ps) || tools_type_allows(ps, "string");
}

/* The next member of an object being scanned, from s[*ip] (just past '{'
 * when first, else past the previous value): 1 with *ip at the key's opening
 * quote, *ke past its closing one and *v at the value; 0 with *ip at the
 * closing '}'; -1 when s ends first or the text is no member. */
static int ts_member(const char *s, size_t n, size_t *ip, bool first, size_t *ke, size_t *v)
{
    size_t i = *ip;
    while (i < n && isspace((unsigned char)s[i]))
        i++;
    if (i >= n)
        return -1;
    if (s[i] == '}') {
        *ip = i;
        return 0;
    }
    if (!first) {
        if (s[i] != ',')
            return -1;
        for (i++; i < n && isspace((unsigned char)s[i]); i++) {}
    }
    size_t e = i < n && s[i] == '"' ? ts_string_end(s, n, i) : 0;
    size_t w = e;
    while (w && w < n && isspace((unsigned char)s[w]))
        w++;
    if (!e || w >= n || s[w] != ':')
        return -1;
    for (w++; w < n && isspace((unsigned char)s[w]); w++) {}
    if (w >= n)
        return -1;
    *ip = i;
    *ke = e;
    *v = w;
    return 1;
}

/* The member "key":val (val taken over, coerced to the schema as
 * tools_coerce_args does it) in compact print, after a comma unless first.
 * false when out of memory. */
static bool ts_put_member(struct ts_out *o, const char *key, cJSON *val, const cJSON *schema, bool first)
{
    cJSON *one = cJSON_CreateObject();
    if (!one) {
        cJSON_Delete(val);
        return false;
    }
    cJSON_AddItemToObject(one, key, val);
    tools_coerce_args(one, schema);
    char *pr = cJSON_PrintUnformatted(one);   /* {"key":value} */
    if (pr) {
        if (!first)
            ts_put(o, ",", 1);
        ts_put(o, pr + 1, strlen(pr) - 2);
    } else {
        o->oom = true;
    }
    free(pr);
    cJSON_Delete(one);
    return pr != NULL;
}

/* The arguments object at s[*ip] ('{'): what is certain of its print goes
 * to o. true when it closed (*ip past it). */
static bool ts_args(const char *s, size_t n, size_t *ip, const cJSON *schema, struct ts_out *o)
{
    size_t i = *ip + 1;
    ts_put(o, "{", 1);
    for (bool first = true;; first = false) {
        size_t ke, v;
        int m = ts_member(s, n, &i, first, &ke, &v);
        if (m < 0)
            return false;
        if (m == 0) {
            ts_put(o, "}", 1);
            *ip = i + 1;
            return true;
        }
        struct lj kl = { s, ke, i, 0 };
        char *key = lj_string(&kl);
        if (!key) {
            o->oom = true;
            return false;
        }
        size_t ve = ts_value_end(s, n, v);
        if (s[v] == '"' && ts_string_kept(schema, key)) {
            /* a string value streams as it comes */
            if (!first)
                ts_put(o, ",", 1);
            ts_put_owned(o, ts_print_string(s, i, ke, true));
            ts_put(o, ":", 1);
            ts_put_owned(o, ts_print_string(s, v, ve ? ve : ts_string_safe(s, n, v + 1), ve != 0));
            free(key);
            if (!ve)
                return false;
            i = ve;
            continue;
        }
        cJSON *val = ve ? cJSON_ParseWithLength(s + v, ve - v) : NULL;
        bool ok = val && ts_put_member(o, key, val, schema, first);
        free(key);
        if (!ok)
            return false;
        i = ve;
    }
}

/* Adds a call named s[b..e) (a JSON string when quoted) to out; its schema. */
static struct tools_partial *ts_call(const char *s, size_t b, size_t e, bool quoted,
                                     struct tools_partials *out)
{
    struct lj l = { s, e, b, 0 };
    char *name = quoted ? lj_string(&l) : strndup(s + b, e - b);
    if (!name)
        return NULL;
    /* as tools_calls_add trims it */
    size_t nb = 0, nl = strlen(name);
    while (nb < nl && isspace((unsigned char)name[nb]))
        nb++;
    while (nl > nb && isspace((unsigned char)name[nl - 1]))
        nl--;
    memmove(name, name + nb, nl - nb);
    name[nl - nb] = 0;
    if (!*name) {
        free(name);
        return NULL;
    }
    if (out->n == out->cap) {
        int cap = out->cap ? out->cap * 2 : 4;
        struct tools_partial *v = realloc(out->v, (size_t)cap * sizeof *v);
        if (!v) {
            free(name);
            return NULL;
        }
        out->v = v;
        out->cap = cap;
    }
    struct tools_partial *c = &out->v[out->n++];
    *c = (struct tools_partial){ .name = name };
    return c;
}

static void ts_done(struct tools_partial *c, struct ts_out *o)
{
    c->args = o->s;
    c->len = o->oom ? 0 : o->len;
    if (o->oom && c->args)
        c->args[0] = 0;
}

/* {"name": "N", "arguments": {...}} at s[*ip]; true when it closed. */
static bool ts_call_object(const char *s, size_t n, size_t *ip, const cJSON *tools,
                           struct tools_partials *out)
{
    size_t i = *ip + 1;
    struct tools_partial *c = NULL;
    bool had_args = false;
    for (bool first = true;; first = false) {
        size_t ke, v;
        int m = ts_member(s, n, &i, first, &ke, &v);
        if (m < 0)
            return false;
        if (m == 0) {
            *ip = i + 1;
            return c != NULL;
        }
        size_t ve = ts_value_end(s, n, v);
        size_t kl = ke - i - 2;
        const char *k = s + i + 1;
        if (kl == 4 && !memcmp(k, "name", 4) && !c && s[v] == '"') {
            if (!ve || !(c = ts_call(s, v, ve, true, out)))
                return false;
        } else if (((kl == 9 && !memcmp(k, "arguments", 9)) || (kl == 10 && !memcmp(k, "parameters", 10))) &&
                   c && !had_args && s[v] == '{') {
            /* the body parser prefers "arguments": a later one would win */
            had_args = true;
            struct ts_out o = { 0 };
            size_t a = v;
            bool closed = ts_args(s, n, &a, tools ? tools_find_schema(tools, c->name) : NULL, &o);
            ts_done(c, &o);
            if (!closed)
                return false;
            ve = a;
        } else if (!((kl == 4 && !memcmp(k, "type", 4)) || (kl == 2 && !memcmp(k, "id", 2))) ||
                   s[v] != '"' || !ve) {
            return false;   /* a shape the body parser may read otherwise */
        }
        i = ve;
    }
}

/* name(k=v, ...) at s[*ip] (Pythonic calls, LFM2 / Llama 4), read as
 * tools_pycall reads it: the call is known with its first member, and each k=v member is
 * certain once the ',' or ')' after its value shows the value whole; the
 * value is printed as the final arguments print it (the lenient reader's
 * value, coerced on its own: coercion is per property). true when the call
 * closed (*ip past its ')'). */
static bool ts_pycall(const char *s, size_t n, size_t *ip, const cJSON *tools, struct tools_partials *out)
{
    size_t i = *ip, b = i;
    while (i < n && tools_ident_char(s[i]))
        i++;
    size_t e = i;
    while (i < n && isspace((unsigned char)s[i]))
        i++;
    if (i >= n || s[i] != '(')
        return false;
    i++;
    if (e - b > 5 && !memcmp(s + e - 5, ".call", 5))
        e -= 5;
    struct tools_partial *c = ts_call(s, b, e, false, out);
    if (!c)
        return false;
    const cJSON *schema = tools ? tools_find_schema(tools, c->name) : NULL;
    struct ts_out o = { 0 };
    ts_put(&o, "{", 1);
    bool first = true, closed = false;
    for (;;) {
        while (i < n && (isspace((unsigned char)s[i]) || s[i] == ','))
            i++;
        if (i >= n)
            break;
        if (s[i] == ')') {
            ts_put(&o, "}", 1);
            i++;
            closed = true;
            break;
        }
        size_t kb = i;
        while (i < n && (isalnum((unsigned char)s[i]) || s[i] == '_'))
            i++;
        size_t ke = i;
        while (i < n && isspace((unsigned char)s[i]))
            i++;
        if (ke == kb || i >= n || (s[i] != '=' && s[i] != ':'))
            break;
        i++;
        size_t used = 0;
        cJSON *v = tools_json_parse_lenient(s + i, n - i, &used);
        size_t after = i + used;
        while (after < n && isspace((unsigned char)s[after]))
            after++;
        if (!v || after >= n || (s[after] != ',' && s[after] != ')')) {
            cJSON_Delete(v);
            break;
        }
        char *key = strndup(s + kb, ke - kb);
        cJSON *one = cJSON_CreateObject();
        if (!key || !one) {
            free(key);
            cJSON_Delete(one);
            cJSON_Delete(v);
            break;
        }
        cJSON_AddItemToObject(one, key, v);
        tools_coerce_args(one, schema);
        char *printed = cJSON_PrintUnformatted(one);   /* {"k":v} */
        cJSON_Delete(one);
        free(key);
        if (!printed)
            break;
        if (!first)
            ts_put(&o, ",", 1);
        ts_put(&o, printed + 1, strlen(printed) - 2);
        free(printed);
        first = false;
        i = after;
    }
    if (first && !closed) {
        /* nothing certain yet: announced only once a member or the ')' is
         * there, so that a call broken in its first argument stays text
         * however the output was chunked */
        free(o.s);
        free(c->name);
        out->n--;
        return false;
    }
    ts_done(c, &o);
    *ip = i;
    return closed;
}

/* Length of the longest tail of s[b..e) that is a proper start of one of
 * the markers (text that may still become one). */
static size_t ts_marker_tail(const char *s, size_t b, size_t e, const char *const *markers)
{
    size_t hold = 0;
    for (; *markers; markers++)
        for (size_t l = strlen(*markers) - 1; l > hold; l--)
            if (l <= e - b && !memcmp(s + e - l, *markers, l)) {
                hold = l;
                break;
            }
    return hold;
}

/* Backs e off so that s[b..e) does not end inside a UTF-8 sequence. */
static size_t ts_utf8_cut(const char *s, size_t b, size_t e)
{
    size_t k = e;
    while (k > b && ((unsigned char)s[k - 1] & 0xC0) == 0x80)
        k--;
    if (k > b && (unsigned char)s[k - 1] >= 0xC0) {
        unsigned char c = (unsigned char)s[k - 1];
        size_t need = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : 2;
        if (e - (k - 1) < need)
            return k - 1;
    }
    return e;
}

/* <function=N><parameter=P>V</parameter>...</function> (qwen3-coder), read
 * as tools_xml_functions reads it: the call is known at the '>' after its
 * name, a parameter is certain once the next tag ends it, and a string
 * parameter streams as it comes: its first newline dropped, a last newline
 * and any tail that could begin a tag held back. */
static void ts_xml(const char *s, size_t n, size_t i, const cJSON *tools, struct tools_partials *out)
{
    static const char *const tags[] = { "</parameter>", "<parameter=", "</function>", NULL };
    const char *end = s + n;
    while (i < n) {
        const char *f = tools_find(s + i, end, "<function=");
        if (!f)
            return;
        const char *nb = f + 10, *ne = nb;
        while (ne < end && *ne != '>' && *ne != '\n')
            ne++;
        if (ne >= end)
            return;
        struct tools_partial *c = ts_call(s, (size_t)(nb - s), (size_t)(ne - s), false, out);
        if (!c)
            return;
        const cJSON *schema = tools ? tools_find_schema(tools, c->name) : NULL;
        const char *fe = tools_find(ne, end, "</function>");
        const char *body_end = fe ? fe : end, *b = *ne == '>' ? ne + 1 : ne;
        const char *pb = tools_skip_ws(b, body_end);
        struct ts_out o = { 0 };
        if (pb < body_end && *pb == '{') {   /* a JSON object instead of parameters */
            size_t a = (size_t)(pb - s);
            ts_args(s, n, &a, schema, &o);
            ts_done(c, &o);
            if (!fe)
                return;
            i = (size_t)(fe - s) + 11;
            continue;
        }
        ts_put(&o, "{", 1);
        bool first = true, open = false;
        const char *p;
        while ((p = tools_find(b, body_end, "<parameter=")) != NULL) {
            const char *kb = p + 11, *ke = kb;
            while (ke < body_end && *ke != '>' && *ke != '\n')
                ke++;
            if (ke >= end) {
                open = true;
                break;
            }
            const char *vb = *ke == '>' ? ke + 1 : ke;
            const char *ve = tools_find(vb, body_end, "</parameter>");
            const char *next = tools_find(vb, body_end, "<parameter=");
            if (!ve || (next && next < ve))
                ve = next ? next : fe ? body_end : NULL;
            char *key = strndup(kb, (size_t)(ke - kb));
            if (!key) {
                o.oom = true;
                break;
            }
            if (ve) {
                cJSON *v = tools_param_value(vb, ve);
                if (!v || !ts_put_member(&o, key, v, schema, first))
                    o.oom = true;
            } else if (ts_string_kept(schema, key) && vb < end) {
                /* still being written: the certain part of the string */
                const size_t cb = (size_t)(vb - s) + (*vb == '\n');
                size_t ce = n - ts_marker_tail(s, cb, n, tags);
                if (ce > cb && s[ce - 1] == '\n')
                    ce--;
                ce = ts_utf8_cut(s, cb, ce);
                char *raw = strndup(s + cb, ce - cb);
                cJSON *str = raw ? cJSON_CreateString(raw) : NULL;
                cJSON *kj = cJSON_CreateString(key);
                char *ks = kj ? cJSON_PrintUnformatted(kj) : NULL, *vs = str ? cJSON_PrintUnformatted(str) : NULL;
                if (ks && vs) {
                    if (!first)
                        ts_put(&o, ",", 1);
                    ts_put(&o, ks, strlen(ks));
                    ts_put(&o, ":", 1);
                    ts_put(&o, vs, strlen(vs) - 1);   /* without the closing quote */
                } else {
                    o.oom = true;
                }
                free(raw);
                free(ks);
                free(vs);
                cJSON_Delete(str);
                cJSON_Delete(kj);
                free(key);
                open = true;
                break;
            } else {
                free(key);
                open = true;
                break;
            }
            free(key);
            first = false;
            b = ve;
            if (b < body_end && !strncmp(b, "</parameter>", 12))
                b += 12;
        }
        if (!open && fe)
            ts_put(&o, "}", 1);
        ts_done(c, &o);
        if (open || !fe)
            return;
        i = (size_t)(fe - s) + 11;
    }
}

void tools_partial_scan(const char *s, size_t n, const cJSON *tools, struct tools_partials *out)
{
    size_t i = 0;
    while (i < n && isspace((unsigned char)s[i]))
        i++;
    if (i >= n)
        return;
    if (n - i >= 10 && !memcmp(s + i, "<function=", 10)) {
        ts_xml(s, n, i, tools, out);
        return;
    }
    if (tools_ident_start(s[i])) {
        /* N[ARGS]{...} (Mistral v11), N\n{...} (Functionary), and DeepSeek's
         * N<｜tool▁sep｜>{...} (V3.1) or function<｜tool▁sep｜>N\n```json\n{...} (R1) */
        static const char ds_sep[] = "<\xef\xbd\x9ctool\xe2\x96\x81sep\xef\xbd\x9c>";
        const size_t ds_len = sizeof ds_sep - 1;
        size_t b = i;
        while (i < n && tools_ident_char(s[i]))
            i++;
        size_t e = i;
        size_t w = i;
        while (w < n && isspace((unsigned char)s[w]))
            w++;
        if (w < n && s[w] == '(') {          /* a bare Pythonic call */
            i = b;
            ts_pycall(s, n, &i, tools, out);
            return;
        }
        if (n - i >= 6 && !memcmp(s + i, "[ARGS]", 6)) {
            i += 6;
        } else if (i < n && s[i] == '\n') {
            i++;
        } else if (n - i >= ds_len && !memcmp(s + i, ds_sep, ds_len)) {
            i += ds_len;
            if (e - b == 8 && !memcmp(s + b, "function", 8)) { /* the name follows the separator */
                while (i < n && isspace((unsigned char)s[i]))
                    i++;
                b = i;
                while (i < n && s[i] != '\n' && s[i] != '{' && s[i] != '`')
                    i++;
                if (i >= n)
                    return;   /* the name may go on */
                e = i;
            }
            while (i < n && isspace((unsigned char)s[i]))
                i++;
            if (n - i >= 3 && !memcmp(s + i, "```", 3)) { /* ```json fence line */
                while (i < n && s[i] != '\n')
                    i++;
            }
        } else {
            return;
        }
        while (i < n && isspace((unsigned char)s[i]))
            i++;
        if (i >= n || s[i] != '{')
            return;
        struct tools_partial *c = ts_call(s, b, e, false, out);
        if (!c)
            return;
        struct ts_out o = { 0 };
        ts_args(s, n, &i, tools ? tools_find_schema(tools, c->name) : NULL, &o);
        ts_done(c, &o);
        return;
    }
    bool list = s[i] == '[';
    if (list)
        i++;
    while (list && i < n && isspace((unsigned char)s[i]))
        i++;
    if (list && i < n && tools_ident_start(s[i])) {
        /* [f(a=1), g(b="x")] */
        while (ts_pycall(s, n, &i, tools, out))
            while (i < n && (isspace((unsigned char)s[i]) || s[i] == ','))
                i++;
        return;
    }
    for (;;) {
        while (i < n && (isspace((unsigned char)s[i]) || (out->n > 0 && (s[i] == ',' || s[i] == ';'))))
            i++;
        if (i >= n || s[i] != '{' || !ts_call_object(s, n, &i, tools, out))
            return;
    }
}
