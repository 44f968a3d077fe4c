/* test_template.c - the Jinja renderer: every real template in
 * tests/fixtures/templates with every conversation in cases/, byte for byte
 * against jinja2's renderings (tools/render_template_ref.py); the chat
 * templates inside the shared vocabulary GGUFs; Python-exact printing; syntax
 * errors with positions; raise_exception; undefined values; hostile templates
 * stopped by the limits. */
#include "test.h"

#include "llm/template/template.h"
#include "llm/tokenizer.h"
#include "src/core/gguf.h"
#include "src/core/omni.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <stdlib.h>
#include <string.h>

/* Render src with messages (and optional kwargs); NULL + err on failure. */
static char *render(const char *src, const char *messages, const char *kwargs, char *err, size_t errlen,
                    int *code)
{
    struct tpl *t = tpl_parse(src, strlen(src), err, errlen);
    char *out = NULL;
    int rc = t ? tpl_render_chat(t, messages ? messages : "[]", NULL, kwargs, true, &out, NULL, err, errlen)
               : OMNI_ERR_FORMAT;
    tpl_free(t);
    if (code)
        *code = rc;
    return rc ? NULL : out;
}

/* Rendered text of src with no messages, or "(error: ...)". */
static const char *r(const char *src)
{
    static char buf[4096];
    char err[256];
    char *out = render(src, "[{\"role\":\"user\",\"content\":\"hi\"}]", NULL, err, sizeof err, NULL);
    snprintf(buf, sizeof buf, "%s", out ? out : err);
    free(out);
    return buf;
}

// ---- fixtures vs jinja2 --------------------------------------------------------------

/* strftime_now's clock for the fixtures: render_template_ref.py's
 * FIXTURE_EPOCH (2025-08-05 12:00 UTC), through SOURCE_DATE_EPOCH. */
#define FIXTURE_EPOCH "1754395200"

static void unset_epoch(void *unused)
{
    (void)unused;
    unsetenv("SOURCE_DATE_EPOCH");
}

/* The raw text of a top-level key's value in a JSON object (NUL-terminated
 * copy, caller frees), so numbers such as 1.0 reach the renderer as written:
 * a cJSON round trip would print them as 1. NULL when the key is absent. */
static char *raw_member(const char *json, const char *key)
{
    char pat[64];
    snprintf(pat, sizeof pat, "\"%s\"", key);
    const char *p = strstr(json, pat);
    if (!p)
        return NULL;
    p = strchr(p + strlen(pat), ':');
    if (!p)
        return NULL;
    for (p++; *p == ' ' || *p == '\n' || *p == '\t' || *p == '\r'; p++)
        ;
    const char *e = p;
    int depth = 0;
    for (; *e; e++) {
        if (*e == '"') {
            for (e++; *e && *e != '"'; e++)
                if (*e == '\\' && e[1])
                    e++;
        } else if (*e == '[' || *e == '{')
            depth++;
        else if (*e == ']' || *e == '}') {
            if (depth-- == 0)
                break;
            if (depth == 0) {
                e++;
                break;
            }
        } else if (*e == ',' && depth == 0)
            break;
    }
    char *s = malloc((size_t)(e - p) + 1);
    if (s) {
        memcpy(s, p, (size_t)(e - p));
        s[e - p] = 0;
    }
    return s;
}

static int check_fixture(const char *name, const char *case_name, const cJSON *vars)
{
    char path[600], err[1024];
    snprintf(path, sizeof path, "templates/%.60s.jinja", name);
    char *src = test_read_file(test_fixture(path), NULL);
    snprintf(path, sizeof path, "templates/cases/%.60s.json", case_name);
    char *case_text = test_read_file(test_fixture(path), NULL);
    cJSON *c = case_text ? cJSON_Parse(case_text) : NULL;
    if (!src || !c) {
        test_fail(__FILE__, __LINE__, "%s.%s: cannot read template or case", name, case_name);
        return -1;
    }
    cJSON *kw = cJSON_Duplicate(cJSON_GetObjectItem(vars, name), 1);
    if (!kw)
        kw = cJSON_CreateObject();
    const cJSON *ckw = cJSON_GetObjectItem(c, "kwargs"), *e;
    cJSON_ArrayForEach(e, ckw) cJSON_AddItemToObject(kw, e->string, cJSON_Duplicate(e, 1));
    char *msgs = raw_member(case_text, "messages");
    char *tools_s = raw_member(case_text, "tools");
    char *kw_s = cJSON_PrintUnformatted(kw);
    const cJSON *agp = cJSON_GetObjectItem(c, "add_generation_prompt");

    struct tpl *t = tpl_parse(src, strlen(src), err, sizeof err);
    char *out = NULL;
    size_t out_len = 0;
    int rc = t ? tpl_render_chat(t, msgs, tools_s, kw_s, !cJSON_IsFalse(agp), &out, &out_len, err, sizeof err)
               : OMNI_ERR_FORMAT;
    int bad = 0;
    snprintf(path, sizeof path, "templates/expected/%.60s.%.60s.txt", name, case_name);
    size_t exp_len = 0;
    char *exp = test_read_file(test_fixture(path), &exp_len);
    if (exp) {
        if (rc || out_len != exp_len || memcmp(out, exp, exp_len)) {
            size_t i = 0;
            while (out && i < out_len && i < exp_len && out[i] == exp[i])
                i++;
            test_fail(__FILE__, __LINE__, "%s.%s: %s; first difference at byte %zu: got \"%.60s\" want \"%.60s\"",
                      name, case_name, rc ? err : "differs", i, out ? out + i : "", exp + i);
            bad = 1;
        }
    } else {
        snprintf(path, sizeof path, "templates/expected/%.60s.%.60s.err", name, case_name);
        char *want = test_read_file(test_fixture(path), NULL);
        if (!want || !rc) {
            test_fail(__FILE__, __LINE__, "%s.%s: rendered, but jinja2 raised %s", name, case_name,
                      want ? want : "(no .err file)");
            bad = 1;
        } else if (!strncmp(want, "raise: ", 7) && strcmp(err, want + 7)) {
            test_fail(__FILE__, __LINE__, "%s.%s: message \"%s\", jinja2 raised \"%s\"", name, case_name, err,
                      want + 7);
            bad = 1;
        }
        free(want);
    }
    free(exp);
    free(out);
    tpl_free(t);
    free(msgs);
    free(tools_s);
    cJSON_free(kw_s);
    cJSON_Delete(kw);
    cJSON_Delete(c);
    free(case_text);
    free(src);
    return bad;
}

/* Sorted names in dir ending in ext (without it); returns the count. */
static int list_dir(const char *dir, const char *ext, char names[][64], int max)
{
    DIR *d = opendir(dir);
    int n = 0;
    struct dirent *e;
    size_t el = strlen(ext);
    while (d && (e = readdir(d)) && n < max) {
        size_t l = strlen(e->d_name);
        if (l > el && l - el < 64 && !strcmp(e->d_name + l - el, ext)) {
            memcpy(names[n], e->d_name, l - el);
            names[n++][l - el] = 0;
        }
    }
    if (d)
        closedir(d);
    qsort(names, (size_t)n, sizeof names[0], (int (*)(const void *, const void *))strcmp);
    return n;
}

TEST(template_fixtures_match_jinja2)
{
    static char tpls[64][64], cases[64][64];
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", test_fixture("templates"));
    int nt = list_dir(dir, ".jinja", tpls, 64);
    snprintf(dir, sizeof dir, "%s", test_fixture("templates/cases"));
    int nc = list_dir(dir, ".json", cases, 64);
    CHECK(nt >= 10 && nc >= 8);
    /* Tests run one at a time, so the environment is ours until the cleanup. */
    setenv("SOURCE_DATE_EPOCH", FIXTURE_EPOCH, 1);
    test_defer(unset_epoch, NULL);
    char *vars_text = test_read_file(test_fixture("templates/vars.json"), NULL);
    cJSON *vars = vars_text ? cJSON_Parse(vars_text) : NULL;
    CHECK(vars != NULL);
    int bad = 0;
    for (int i = 0; i < nt && bad < 5; i++)
        for (int k = 0; k < nc && bad < 5; k++)
            bad += check_fixture(tpls[i], cases[k], vars) != 0;
    cJSON_Delete(vars);
    free(vars_text);
    CHECK_EQ(bad, 0);
}

/* jinja2's select/reject/map look at their input only when it is truthy:
 * functionary v3.1 filters `tools = none` with selectattr. */
TEST(template_select_and_map_of_nothing)
{
    CHECK_STR_EQ(r("{{ none | selectattr('type', 'equalto', 'x') | list | length }}"), "0");
    CHECK_STR_EQ(r("{{ none | rejectattr('type') | list }}"), "[]");
    CHECK_STR_EQ(r("{{ nothing | map(attribute='a') | list }}"), "[]");
    CHECK_STR_EQ(r("{{ '' | select | list }}"), "[]");
    CHECK_STR_EQ(r("{{ [0, 1, 2] | select | list }}"), "[1, 2]");
}

/* The templates stored in the shared vocabularies, with their BOS/EOS texts. */
TEST(template_shared_vocab_gguf)
{
    SKIP_IF_NO_SHARED();
    static const struct {
        const char *file, *want;
    } cases[] = {
        { "vocab/ggml-vocab-qwen2.gguf",
          "<|im_start|>system\nYou are a helpful assistant<|im_end|>\n<|im_start|>user\nHi \xc3\xa9<|im_end|>\n"
          "<|im_start|>assistant\nHello<|im_end|>\n<|im_start|>user\nBye<|im_end|>\n<|im_start|>assistant\n" },
        { "vocab/ggml-vocab-phi-3.gguf",
          "<s><|user|>\nHi \xc3\xa9<|end|>\n<|assistant|>\nHello<|end|>\n<|user|>\nBye<|end|>\n<|assistant|>\n" },
    };
    const char *msgs = "[{\"role\":\"user\",\"content\":\"Hi \xc3\xa9\"},{\"role\":\"assistant\",\"content\":\"Hello\"},"
                       "{\"role\":\"user\",\"content\":\"Bye\"}]";
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char err[512];
        struct gguf *g = gguf_open(test_shared(cases[i].file), err, sizeof err);
        CHECK_MSG(g, "%s", err);
        struct tokenizer *tok = tokenizer_from_gguf(g, err, sizeof err);
        char *out = NULL;
        bool fallback = true;
        int rc = tok ? tpl_render_gguf(g, tok, msgs, NULL, NULL, true, &out, NULL, &fallback, err, sizeof err) : -1;
        tokenizer_free(tok);
        gguf_free(g);
        CHECK_MSG(rc == 0, "%s: %s", cases[i].file, err);
        CHECK(!fallback);
        int same = !strcmp(out, cases[i].want);
        if (!same)
            test_fail(__FILE__, __LINE__, "%s: got \"%s\"", cases[i].file, out);
        free(out);
        if (!same)
            return;
    }
}

/* No template at all: the built-in format, flagged as a fallback. */
TEST(template_gguf_fallback)
{
    char err[256], *out = NULL;
    bool fallback = false;
    CHECK_EQ(tpl_render_gguf(NULL, NULL, "[{\"role\":\"user\",\"content\":\"Hi\"}]", NULL, NULL, true, &out, NULL,
                             &fallback, err, sizeof err), 0);
    CHECK(fallback);
    CHECK_STR_EQ(out, "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
    free(out);
}

// ---- semantics (expected strings are what jinja2 3.1 prints) -------------------------

TEST(template_python_printing)
{
    CHECK_STR_EQ(r("{{ 1.0 }} {{ 1e20 }} {{ 1e16 }} {{ 1e15 }} {{ 0.0001 }} {{ 0.00001 }} {{ 3.14 }} {{ 7 / 2 }} {{ 4 / 2 }}"),
                 "1.0 1e+20 1e+16 1000000000000000.0 0.0001 1e-05 3.14 3.5 2.0");
    CHECK_STR_EQ(r("{{ [1, 'a', none, true, {'k': 1.5}, (1, 2), (3,)] }}"),
                 "[1, 'a', None, True, {'k': 1.5}, (1, 2), (3,)]");
    CHECK_STR_EQ(r("{{ \"it's\" }} {{ [\"it's\", 'say \"x\"', 'a\\nb'] }}"),
                 "it's [\"it's\", 'say \"x\"', 'a\\nb']");
    CHECK_STR_EQ(r("{{ {'a': [1, 2], 'b': 'é\"'}|tojson }}|{{ {'a': [1]}|tojson(indent=2) }}"),
                 "{\"a\": [1, 2], \"b\": \"é\\\"\"}|{\n  \"a\": [\n    1\n  ]\n}");
    CHECK_STR_EQ(r("{{ 5 // 2 }} {{ -5 // 2 }} {{ -5 % 3 }} {{ 2 ** 10 }} {{ 'ab' * 2 }} {{ 1 ~ 2 }}"),
                 "2 -3 1 1024 abab 12");
    CHECK_STR_EQ(r("{{ 2.5|round }} {{ 3.5|round }} {{ -2.5|round }} {{ 3.14159|round(2) }}"), "2.0 4.0 -2.0 3.14");
}

TEST(template_strings_and_slices)
{
    CHECK_STR_EQ(r("{{ '  a b  '.split() }} {{ 'a,b,,c'.split(',') }} {{ 'abc'[::-1] }} {{ 'héllo'[1:3] }} {{ 'héllo'|length }}"),
                 "['a', 'b'] ['a', 'b', '', 'c'] cba él 5");
    CHECK_STR_EQ(r("{{ 'hello world-foo'|title }} {{ \"they're bill's\".title() }} {{ 'x'|capitalize }} {{ 'aé'.upper() }}"),
                 "Hello World-Foo They'Re Bill'S X AÉ");
    CHECK_STR_EQ(r("{{ [1,2,3,4,5][1:-1] }} {{ [1,2,3][::-2] }} {{ [1,2,3][5:] }} {{ 'x\\n\\n'.rstrip('\\n') }}|"),
                 "[2, 3, 4] [3, 1] [] x|");
    CHECK_STR_EQ(r("{{ '{} and {name}'.format(1, name='b') }} {{ 'a-b-c'.replace('-', '+', 1) }} {{ 'abc'.startswith(('x', 'a')) }}"),
                 "1 and b a+b-c True");
}

TEST(template_statements)
{
    /* A set inside a loop body does not leak; namespace() carries state out. */
    CHECK_STR_EQ(r("{% set x = 1 %}{% for i in [1,2] %}{{ x }}{% set x = 2 %}{% endfor %}{{ x }}"), "111");
    CHECK_STR_EQ(r("{% set ns = namespace(n=0) %}{% for i in range(4) %}{% set ns.n = ns.n + i %}{% endfor %}{{ ns.n }}"), "6");
    CHECK_STR_EQ(r("{% for i in 'abc' %}{{ loop.index }}{{ loop.revindex0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }};{% endfor %}"),
                 "12TrueFalse3;21FalseFalse3;30FalseTrue3;");
    CHECK_STR_EQ(r("{% for k, v in {'a': 1, 'b': 2}.items() %}{{ k }}={{ v }}{% if not loop.last %},{% endif %}{% endfor %}"), "a=1,b=2");
    CHECK_STR_EQ(r("{% for x in [] %}x{% else %}empty{% endfor %}"), "empty");
    CHECK_STR_EQ(r("{% for x in range(10) if x is odd %}{% if x > 6 %}{% break %}{% endif %}{% if x == 3 %}{% continue %}{% endif %}{{ x }}{% endfor %}"), "15");
    CHECK_STR_EQ(r("{% macro m(a, b=2) %}[{{ a }}{{ b }}{{ c }}]{% endmacro %}{% set c = 9 %}{{ m(1) }}{{ m(b=3, a=0) }}"), "[129][039]");
    CHECK_STR_EQ(r("{% macro w(t) %}<{{ t }}:{{ caller() }}>{% endmacro %}{% call w('b') %}in{% endcall %}"), "<b:in>");
    CHECK_STR_EQ(r("{% set a, b = [1, 2] %}{{ a }}{{ b }}{% set t = 1, 2 %}{{ t }}{% set blk %}x{{ a }}{% endset %}{{ blk }}"), "12(1, 2)x1");
    CHECK_STR_EQ(r("{{ 'y' if false }}|{{ 'a' if 1 > 2 else 'b' }}|{{ 1 < 2 < 3 }}{{ 3 not in [1] }}"), "|b|TrueTrue");
    CHECK_STR_EQ(r("{% raw %}{{ x }}{% endraw %}"), "{{ x }}");
}

TEST(template_whitespace_control)
{
    CHECK_STR_EQ(r("  {% if true %}\n  x\n  {% endif %}\n  {{ 1 }}\n{# c #}\n  {#- c #}\nend\n"), "  x\n  1\nend");
    CHECK_STR_EQ(r("{%- if true -%}  \n a {%+ if 1 %} b{% endif %}\n{% endif %}"), "a  b");
    CHECK_STR_EQ(r("a\r\nb  {{- 'c' -}}  \n d\n"), "a\nbcd");
}

TEST(template_filters_and_tests)
{
    CHECK_STR_EQ(r("{{ {'b':1,'a':2}|dictsort }}{{ ['B','a']|sort }}{{ ['a','A','b']|unique|list }}"),
                 "[('a', 2), ('b', 1)]['a', 'B']['a', 'b']");
    CHECK_STR_EQ(r("{{ [1,2,3]|map('string')|join(',') }}|{{ [{'a':1},{'a':2}]|map(attribute='a')|list }}|{{ [{'r':'u'},{'r':'a'}]|selectattr('r','equalto','u')|list }}"),
                 "1,2,3|[1, 2]|[{'r': 'u'}]");
    CHECK_STR_EQ(r("{{ x|default('d') }}{{ ''|default('e', true) }}{{ ' t '|trim }}{{ [3,1]|first }}{{ [3,1]|last }}{{ '42'|int + 1 }}{{ '1.5'|float }}"),
                 "det31431.5");
    CHECK_STR_EQ(r("{{ 's' is string }}{{ {} is mapping }}{{ 's' is sequence }}{{ true is number }}{{ none is none }}{{ x is defined }}{{ 4 is divisibleby 2 }}"),
                 "TrueTrueTrueTrueTrueFalseTrue");
}

// ---- errors --------------------------------------------------------------------------

TEST(template_syntax_errors_have_positions)
{
    static const struct {
        const char *src, *want;
    } cases[] = {
        { "{% if x %}a", "line 1, column 12: unexpected end of template, expected 'elif', 'else' or 'endif'" },
        { "a\nb {{ 1 + }}", "line 2, column 10: unexpected '}}', expected an expression" },
        { "{{ y is nosuch }}", "no test named 'nosuch'" },
        { "{% frobnicate %}", "line 1, column 4: unknown or unexpected tag 'frobnicate'" },
        { "{{ 'abc }}", "unterminated string" },
        { "{{ x", "expected '}}'" },
        { "{# never closed", "comment not closed" },
        { "{% break %}", "'break' outside of a for-loop" },
        { "{% for x in y %}{% endif %}", "unknown or unexpected tag 'endif'" },
        { "{{ a $ b }}", "unexpected character" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char err[256] = "";
        struct tpl *t = tpl_parse(cases[i].src, strlen(cases[i].src), err, sizeof err);
        CHECK_MSG(!t, "'%s' parsed", cases[i].src);
        CHECK_STR_CONTAINS(err, cases[i].want);
    }
}

/* As in jinja2, an unknown filter is an error only when it is reached: a
 * real template (DeepSeek V3.2's) uses one in a branch plain chats skip. */
TEST(template_unknown_filter_at_render)
{
    CHECK_STR_EQ(r("{% if false %}{{ y | nosuch }}{% endif %}ok"), "ok");
    CHECK_STR_CONTAINS(r("x\n\n  {{ y | nosuch }}"), "line 3: no filter named 'nosuch'");
}

/* transformers' tojson options and llama.cpp's from_json. */
TEST(template_tojson_options_and_from_json)
{
    CHECK_STR_EQ(r("{{ {'b': 1, 'a': ['\u00e9', '\U0001F600', '\\\\'], 'c': {'z': 1, 'y': 2}}|tojson(ensure_ascii=true, sort_keys=true) }}"),
                 "{\"a\": [\"\\u00e9\", \"\\ud83d\\ude00\", \"\\\\\"], \"b\": 1, \"c\": {\"y\": 2, \"z\": 1}}");
    CHECK_STR_EQ(r("{{ {2: 'x', 1: 'y'}|tojson(sort_keys=true) }}"), "{\"1\": \"y\", \"2\": \"x\"}");
    CHECK_STR_CONTAINS(r("{{ {2: 'x', 'a': 'y'}|tojson(sort_keys=true) }}"), "mixed types");
    CHECK_STR_EQ(r("{% set v = '{\"a\": [1, 2.0, \"\u00e9\"]}' | from_json %}{{ v.a[1] }} {{ v.a|length }} {{ v['a'][2] }}"),
                 "2.0 3 \u00e9");
    CHECK_STR_CONTAINS(r("{{ '{nope' | from_json }}"), "invalid JSON");
}

TEST(template_raise_exception_message)
{
    char err[256];
    int code = 0;
    char *out = render("{% if messages|length > 0 %}{{ raise_exception('Roles must alternate: ' ~ messages[0].role) }}{% endif %}",
                       "[{\"role\":\"bot\",\"content\":\"x\"}]", NULL, err, sizeof err, &code);
    CHECK(out == NULL);
    CHECK_EQ(code, OMNI_ERR_ARG);
    CHECK_STR_EQ(err, "Roles must alternate: bot");
}

TEST(template_undefined_semantics)
{
    /* Printing, testing, iterating and defaulting undefined values is fine... */
    CHECK_STR_EQ(r("[{{ nope }}]{{ nope is defined }}{% for x in nope %}x{% endfor %}{{ nope|length }}{{ messages[0].missing }}{{ none.x }}{{ nope|default('d') }}"),
                 "[]False0d");
    /* ...using them the way jinja2's Undefined refuses is an error with its message. */
    CHECK_STR_CONTAINS(r("{{ nope.x }}"), "'nope' is undefined");
    CHECK_STR_CONTAINS(r("\n{{ messages[0].missing.x }}"), "line 2: 'dict object' has no attribute 'missing'");
    CHECK_STR_CONTAINS(r("{{ messages[5].role }}"), "list object has no element 5");
    CHECK_STR_CONTAINS(r("{{ nope + 1 }}"), "'nope' is undefined");
    CHECK_STR_CONTAINS(r("{{ 1 + 'a' }}"), "unsupported operand type(s) for +: 'int' and 'str'");
    CHECK_STR_CONTAINS(r("{% for x in none %}{% endfor %}"), "'NoneType' object is not iterable");
}

TEST(template_bad_json_input)
{
    char err[256];
    int code = 0;
    CHECK(render("x", "[{\"role\": ", NULL, err, sizeof err, &code) == NULL);
    CHECK_EQ(code, OMNI_ERR_ARG);
    CHECK_STR_CONTAINS(err, "messages: invalid JSON");
    CHECK(render("x", "{}", NULL, err, sizeof err, &code) == NULL);
    CHECK_STR_CONTAINS(err, "expected a JSON array");
    CHECK(render("x", "[]", "[1]", err, sizeof err, &code) == NULL);
    CHECK_STR_CONTAINS(err, "kwargs: expected a JSON object");
}

/* Hostile templates end with OMNI_ERR_LIMIT (or a parse error), quickly. */
TEST(template_hostile_limits)
{
    static const char *const bombs[] = {
        "{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}",
        "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
        "{% set ns = namespace(s='x') %}{% for i in range(80) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}",
        "{% for i in range(1000000) %}{{ 'xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx' }}{% endfor %}",
        "{{ 'x' * 100000000000 }}",
        "{{ range(10000000000) }}",
        "{% set ns = namespace(l=[1]) %}{% for i in range(80) %}{% set ns.l = ns.l + ns.l %}{% endfor %}",
    };
    struct tpl_limits lim = tpl_default_limits();
    lim.max_output_bytes = 1 << 20;
    lim.max_memory_bytes = 64 << 20;
    double t0 = omni_time_s();
    for (size_t i = 0; i < sizeof bombs / sizeof bombs[0]; i++) {
        char err[256], *out = NULL;
        struct tpl *t = tpl_parse(bombs[i], strlen(bombs[i]), err, sizeof err);
        CHECK_MSG(t, "%s", err);
        int rc = tpl_render_chat_limits(t, "[]", NULL, NULL, true, &lim, &out, NULL, err, sizeof err);
        tpl_free(t);
        free(out);
        CHECK_MSG(rc == OMNI_ERR_LIMIT || rc == OMNI_ERR_NOMEM, "bomb %zu: rc %d (%s)", i, rc, err);
    }
    /* Deep nesting is a parse error, not a stack overflow. */
    size_t n = 100000;
    char *deep = malloc(2 * n + 16);
    CHECK(deep != NULL);
    strcpy(deep, "{{ ");
    memset(deep + 3, '(', n);
    deep[3 + n] = '1';
    memset(deep + 4 + n, ')', n);
    strcpy(deep + 4 + 2 * n, " }}");
    char err[256];
    struct tpl *t = tpl_parse(deep, strlen(deep), err, sizeof err);
    free(deep);
    CHECK(t == NULL);
    CHECK_STR_CONTAINS(err, "nested too deeply");
    CHECK_MSG(omni_time_s() - t0 < 20, "limits took %.1f s", omni_time_s() - t0);
}

// ---- bounded recursion -----------------------------------------------------------------

/* prefix + n copies of unit + middle + n copies of close + suffix (malloc'd). */
static char *repeat_src(const char *prefix, const char *unit, const char *middle, const char *close,
                        const char *suffix, size_t n)
{
    const size_t lu = strlen(unit), lc = strlen(close);
    char *s = malloc(strlen(prefix) + n * (lu + lc) + strlen(middle) + strlen(suffix) + 1);
    if (!s)
        return NULL;
    char *p = stpcpy(s, prefix);
    for (size_t i = 0; i < n; i++)
        p = stpcpy(p, unit);
    p = stpcpy(p, middle);
    for (size_t i = 0; i < n; i++)
        p = stpcpy(p, close);
    stpcpy(p, suffix);
    return s;
}

/* 100,000-deep nesting of every recursive construct, and 100,000-long chains
 * of the left-associative ones (which the parser builds in loops but the
 * evaluator walks recursively): a parse error naming the nesting, never a
 * stack overflow. */
TEST(template_deep_nesting_is_a_parse_error)
{
    static const struct { const char *prefix, *unit, *middle, *close, *suffix; } shapes[] = {
        { "{{ ", "(", "1", ")", " }}" },
        { "{{ ", "[", "1", "]", " }}" },
        { "{{ ", "{'a': ", "1", "}", " }}" },
        { "{{ ", "not ", "x", "", " }}" },
        { "{{ ", "-", "1", "", " }}" },
        { "{{ ", "f(", "1", ")", " }}" },
        { "{{ ", "1 if x else ", "2", "", " }}" },
        { "", "{% if x %}", "y", "{% endif %}", "" },
        { "", "{% for x in y %}", "z", "{% endfor %}", "" },
        { "", "{% macro m() %}", "z", "{% endmacro %}", "" },
        { "", "{% set x %}", "z", "{% endset %}", "" },
        { "", "{% if x %}{% else %}", "y", "{% endif %}", "" },
        { "{{ x", ".a", "", "", " }}" },
        { "{{ x", "[0]", "", "", " }}" },
        { "{{ x", "(1)", "", "", " }}" },
        { "{{ x", "|lower", "", "", " }}" },
        { "{{ x", " is string", "", "", " }}" },
        { "{{ 1", " + 1", "", "", " }}" },
        { "{{ 1", " * 1", "", "", " }}" },
        { "{{ 1", " ~ 1", "", "", " }}" },
        { "{{ 1", " ** 1", "", "", " }}" },
        { "{{ 1", " < 1", "", "", " }}" },
        { "{{ x", " and x", "", "", " }}" },
        { "{{ x", " or x", "", "", " }}" },
        { "{{ x", " if x", "", "", " }}" },
    };
    for (size_t i = 0; i < sizeof shapes / sizeof *shapes; i++) {
        char *src = repeat_src(shapes[i].prefix, shapes[i].unit, shapes[i].middle, shapes[i].close,
                               shapes[i].suffix, 100000);
        CHECK(src);
        char err[256] = "";
        struct tpl *t = tpl_parse(src, strlen(src), err, sizeof err);
        free(src);
        tpl_free(t);
        CHECK_MSG(!t, "shape %zu (%s) parsed", i, shapes[i].unit);
        CHECK_MSG(strstr(err, "nested too deeply"), "shape %zu (%s): %s", i, shapes[i].unit, err);
    }
    /* 150 levels is an ordinary template */
    char *src = repeat_src("{{ ", "(", "1 + 1", ")", " }}", 60);
    CHECK(src);
    CHECK_STR_EQ(r(src), "2");
    free(src);
    src = repeat_src("", "{% if true %}", "y", "{% endif %}", "", 60);
    CHECK(src);
    CHECK_STR_EQ(r(src), "y");
    free(src);
}

/* Rendering recursion is bounded as a whole: macros calling macros through
 * deep expressions, deep values compared or printed, deep JSON input. */
TEST(template_render_recursion_is_bounded)
{
    /* each call 70 lists deep, calls nested as deep as max_depth allows:
     * 64 x 70 levels would take 9 MB of stack with AddressSanitizer */
    char *body = repeat_src("{% macro f(n) %}{% if n < 64 %}{{ ", "[", "f(n + 1)", "]",
                            " }}{% endif %}{% endmacro %}{{ f(0) }}", 70);
    CHECK(body);
    char err[256];
    int code = 0;
    char *out = render(body, "[]", NULL, err, sizeof err, &code);
    free(body);
    free(out);
    CHECK_MSG(code == OMNI_ERR_LIMIT, "rc %d: %s", code, err);
    CHECK_STR_CONTAINS(err, "nested deeper than 1000 levels while rendering");

    /* a list nested 100,000 deep, built in a loop */
    static const char *const uses[] = {
        "{{ ns.l == ns.l }}", "{{ ns.l != [ns.l] }}", "{{ ns.l < ns.l }}", "{{ ns.l | string | length }}",
        "{{ ns.l | tojson | length }}", "{{ [ns.l, ns.l] | unique | list | length }}",
        "{{ ns.l in [ns.l] }}", "{{ [ns.l, [ns.l]] | sort | length }}",
    };
    for (size_t i = 0; i < sizeof uses / sizeof *uses; i++) {
        char src[512];
        snprintf(src, sizeof src, "{%% set ns = namespace(l=[]) %%}{%% for i in range(100000) %%}"
                 "{%% set ns.l = [ns.l] %%}{%% endfor %%}%s", uses[i]);
        struct tpl *t = tpl_parse(src, strlen(src), err, sizeof err);
        CHECK_MSG(t, "%s", err);
        out = NULL;
        int rc = tpl_render_chat(t, "[]", NULL, NULL, false, &out, NULL, err, sizeof err);
        tpl_free(t);
        CHECK_MSG(rc == 0 || rc == OMNI_ERR_LIMIT || rc == OMNI_ERR_ARG, "use %zu: rc %d (%s)", i, rc, err);
        free(out);
    }

    /* JSON input: cJSON stops at 1,000 levels; 999 render */
    for (int depth = 999; depth <= 1001; depth += 2) {
        char *msgs = repeat_src("[", "[", "1", "]", "]", (size_t)depth - 1);
        CHECK(msgs);
        out = render("{{ messages | length }}", msgs, NULL, err, sizeof err, &code);
        free(msgs);
        if (depth < 1000)
            CHECK_MSG(out && !strcmp(out, "1"), "%s", out ? out : err);
        else
            CHECK_MSG(!out && code == OMNI_ERR_ARG, "depth %d: rc %d", depth, code);
        free(out);
    }
}
