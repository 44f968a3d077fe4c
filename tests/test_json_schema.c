/* test_json_schema.c - the JSON-Schema compiler keyword by keyword: hand
 * picked valid and invalid documents, then random documents generated
 * through the grammar (a random walk over the allowed bytes) checked with a
 * small validator of the same keywords, and errors naming the keyword. */
#include "test.h"

#include "llm/grammar/grammar.h"
#include "llm/grammar/json_schema.h"
#include "llm/tools/tools.h"
#include "src/core/omni.h"

#include <cjson/cJSON.h>
#include <stdint.h>
#include <stdlib.h>

static struct grammar *compile(const char *schema_text, char *err, size_t errlen)
{
    cJSON *s = cJSON_Parse(schema_text);
    if (!s) {
        snprintf(err, errlen, "bad test schema");
        return NULL;
    }
    char *gbnf = jschema_to_gbnf(s, err, errlen);
    cJSON_Delete(s);
    if (!gbnf)
        return NULL;
    struct grammar *g = grammar_parse(gbnf, strlen(gbnf), err, errlen);
    free(gbnf);
    return g;
}

// ---- a validator for the keywords under test ------------------------------------

static size_t utf8_len(const char *s)
{
    size_t n = 0;
    for (; *s; s++)
        n += ((unsigned char)*s & 0xC0) != 0x80;
    return n;
}

static bool valid(const cJSON *v, const cJSON *s, const cJSON *root);

static bool valid_type(const cJSON *v, const char *t)
{
    if (!strcmp(t, "object")) return cJSON_IsObject(v);
    if (!strcmp(t, "array")) return cJSON_IsArray(v);
    if (!strcmp(t, "string")) return cJSON_IsString(v);
    if (!strcmp(t, "number")) return cJSON_IsNumber(v);
    if (!strcmp(t, "integer")) return cJSON_IsNumber(v) && v->valuedouble == (double)(long long)v->valuedouble;
    if (!strcmp(t, "boolean")) return cJSON_IsBool(v);
    if (!strcmp(t, "null")) return cJSON_IsNull(v);
    return false;
}

static bool valid(const cJSON *v, const cJSON *s, const cJSON *root)
{
    const cJSON *k;
    if ((k = cJSON_GetObjectItemCaseSensitive(s, "$ref"))) {
        const char *p = k->valuestring + 1;
        const cJSON *t = root;
        char key[128];
        while (*p == '/') {
            size_t n = strcspn(++p, "/");
            snprintf(key, sizeof key, "%.*s", (int)n, p);
            t = cJSON_GetObjectItemCaseSensitive(t, key);
            p += n;
        }
        return valid(v, t, root);
    }
    if ((k = cJSON_GetObjectItemCaseSensitive(s, "anyOf")) || (k = cJSON_GetObjectItemCaseSensitive(s, "oneOf"))) {
        const cJSON *x;
        cJSON_ArrayForEach(x, k) if (valid(v, x, root)) return true;
        return false;
    }
    if ((k = cJSON_GetObjectItemCaseSensitive(s, "const")) && !cJSON_Compare(v, k, true))
        return false;
    if ((k = cJSON_GetObjectItemCaseSensitive(s, "enum"))) {
        const cJSON *x;
        bool any = false;
        cJSON_ArrayForEach(x, k) any |= cJSON_Compare(v, x, true);
        if (!any)
            return false;
    }
    if ((k = cJSON_GetObjectItemCaseSensitive(s, "type"))) {
        bool ok = false;
        if (cJSON_IsString(k))
            ok = valid_type(v, k->valuestring);
        const cJSON *x;
        if (cJSON_IsArray(k))
            cJSON_ArrayForEach(x, k) ok |= valid_type(v, x->valuestring);
        if (!ok)
            return false;
    }
    if (cJSON_IsNumber(v)) {
        if ((k = cJSON_GetObjectItemCaseSensitive(s, "minimum")) && v->valuedouble < k->valuedouble) return false;
        if ((k = cJSON_GetObjectItemCaseSensitive(s, "maximum")) && v->valuedouble > k->valuedouble) return false;
        if ((k = cJSON_GetObjectItemCaseSensitive(s, "exclusiveMinimum")) && v->valuedouble <= k->valuedouble) return false;
        if ((k = cJSON_GetObjectItemCaseSensitive(s, "exclusiveMaximum")) && v->valuedouble >= k->valuedouble) return false;
    }
    if (cJSON_IsString(v)) {
        size_t n = utf8_len(v->valuestring);
        if ((k = cJSON_GetObjectItemCaseSensitive(s, "minLength")) && n < (size_t)k->valueint) return false;
        if ((k = cJSON_GetObjectItemCaseSensitive(s, "maxLength")) && n > (size_t)k->valueint) return false;
    }
    if (cJSON_IsArray(v)) {
        int n = cJSON_GetArraySize(v);
        if ((k = cJSON_GetObjectItemCaseSensitive(s, "minItems")) && n < k->valueint) return false;
        if ((k = cJSON_GetObjectItemCaseSensitive(s, "maxItems")) && n > k->valueint) return false;
        const cJSON *items = cJSON_GetObjectItemCaseSensitive(s, "items"), *x;
        if (cJSON_IsObject(items))
            cJSON_ArrayForEach(x, v) if (!valid(x, items, root)) return false;
    }
    if (cJSON_IsObject(v)) {
        const cJSON *props = cJSON_GetObjectItemCaseSensitive(s, "properties");
        const cJSON *req = cJSON_GetObjectItemCaseSensitive(s, "required");
        const cJSON *add = cJSON_GetObjectItemCaseSensitive(s, "additionalProperties"), *x;
        cJSON_ArrayForEach(x, req) if (!cJSON_GetObjectItemCaseSensitive(v, x->valuestring)) return false;
        cJSON_ArrayForEach(x, v) {
            const cJSON *ps = cJSON_GetObjectItemCaseSensitive(props, x->string);
            if (ps && !valid(x, ps, root))
                return false;
            if (!ps && props && !cJSON_IsTrue(add) && !cJSON_IsObject(add))
                return false;
            if (!ps && cJSON_IsObject(add) && !valid(x, add, root))
                return false;
        }
    }
    return true;
}

/* A random document of the grammar: random allowed bytes, ending with
 * probability 1/4 wherever the grammar may end. NULL if it ran too long. */
static char *random_doc(struct grammar *g, uint64_t *rng)
{
    char err[256];
    struct grammar_matcher *m = grammar_matcher_new(g, NULL, err, sizeof err);
    char *buf = malloc(8192);
    size_t n = 0;
    while (m && buf && n < 8000) {
        *rng ^= *rng << 13, *rng ^= *rng >> 7, *rng ^= *rng << 17;
        if (grammar_matcher_can_end(m) && (grammar_matcher_must_end(m) || *rng % 4 == 0)) {
            buf[n] = 0;
            grammar_matcher_free(m);
            return buf;
        }
        uint32_t set[8];
        grammar_matcher_next_bytes(m, set);
        /* prefer ASCII so strings close now and then */
        int cand[256], nc = 0;
        for (int b = 0; b < 256; b++)
            if (set[b / 32] >> (b % 32) & 1)
                cand[nc++] = b;
        if (!nc)
            break;
        int pick = cand[(*rng >> 8) % (uint64_t)nc];
        for (int tries = 0; pick >= 0x80 && tries < 3; tries++)
            pick = cand[(*rng >> (16 + 8 * tries)) % (uint64_t)nc];
        buf[n++] = (char)pick;
        grammar_matcher_accept_bytes(m, buf + n - 1, 1);
    }
    grammar_matcher_free(m);
    free(buf);
    return NULL;
}

/* Valid and invalid samples, then random documents that must all validate. */
static int check_schema(const char *schema_text, const char *const *good, const char *const *bad)
{
    char err[256];
    struct grammar *g = compile(schema_text, err, sizeof err);
    if (!g) {
        fprintf(stderr, "%s: %s\n", schema_text, err);
        return -1;
    }
    int fails = 0;
    for (int i = 0; good && good[i]; i++)
        if (!grammar_match(g, good[i], strlen(good[i])) && ++fails)
            fprintf(stderr, "%s: rejects valid %s\n", schema_text, good[i]);
    for (int i = 0; bad && bad[i]; i++)
        if (grammar_match(g, bad[i], strlen(bad[i])) && ++fails)
            fprintf(stderr, "%s: accepts invalid %s\n", schema_text, bad[i]);
    cJSON *schema = cJSON_Parse(schema_text);
    uint64_t rng = 0x1234567887654321ULL;
    int made = 0;
    for (int i = 0; i < 60; i++) {
        char *doc = random_doc(g, &rng);
        if (!doc)
            continue;
        made++;
        cJSON *v = cJSON_Parse(doc);
        if ((!v || !valid(v, schema, schema)) && fails++ < 3)
            fprintf(stderr, "%s: generated invalid %s\n", schema_text, doc);
        cJSON_Delete(v);
        free(doc);
    }
    if (made < 20 && ++fails)
        fprintf(stderr, "%s: only %d random documents finished\n", schema_text, made);
    cJSON_Delete(schema);
    grammar_free(g);
    return fails;
}

#define SCHEMA_CASE(name, schema, ...)                                           \
    TEST(name)                                                                   \
    {                                                                            \
        static const char *const lists[2][12] = __VA_ARGS__;                     \
        CHECK(check_schema(schema, lists[0], lists[1]) == 0);                    \
    }

SCHEMA_CASE(jschema_types, "{\"type\":[\"boolean\",\"null\",\"integer\"]}",
            { { "true", "null", "-12", "0", NULL }, { "1.5", "\"x\"", "01", "-0x", NULL } })
SCHEMA_CASE(jschema_properties_required,
            "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"},\"b\":{\"type\":\"string\",\"maxLength\":5},"
            "\"c\":{\"type\":\"boolean\"}},\"required\":[\"b\"]}",
            { { "{\"b\":\"x\"}", "{\"a\":1, \"b\":\"\",\"c\":true}", "{ \"b\" : \"q\" , \"c\" : false }", NULL },
              { "{}", "{\"a\":1}", "{\"b\":\"x\",\"d\":1}", "{\"b\":\"x\",\"a\":1}", "{\"b\":\"toolong\"}", NULL } })
SCHEMA_CASE(jschema_additional_properties,
            "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"null\"}},\"additionalProperties\":{\"type\":\"integer\"}}",
            { { "{}", "{\"a\":null,\"x\":1,\"y\":2}", "{\"z\":3}", NULL }, { "{\"x\":\"s\"}", NULL } })
SCHEMA_CASE(jschema_enum_const,
            "{\"type\":\"object\",\"properties\":{\"e\":{\"enum\":[\"red\",2,null,{\"k\":[1]}]},\"c\":{\"const\":\"fixed\"}},"
            "\"required\":[\"e\",\"c\"]}",
            { { "{\"e\":\"red\",\"c\":\"fixed\"}", "{\"e\":{\"k\":[1]},\"c\":\"fixed\"}", NULL },
              { "{\"e\":\"blue\",\"c\":\"fixed\"}", "{\"e\":2,\"c\":\"other\"}", NULL } })
SCHEMA_CASE(jschema_items_min_max,
            "{\"type\":\"array\",\"items\":{\"type\":\"integer\",\"minimum\":-20,\"maximum\":300},\"minItems\":2,\"maxItems\":4}",
            { { "[1,2]", "[-20, 300, 0, 99]", NULL }, { "[1]", "[1,2,3,4,5]", "[301,1]", "[-21,1]", "[1.5,2]", NULL } })
SCHEMA_CASE(jschema_any_one_of,
            "{\"anyOf\":[{\"type\":\"string\",\"minLength\":2,\"maxLength\":3},{\"oneOf\":[{\"type\":\"integer\",\"exclusiveMinimum\":5}]}]}",
            { { "\"ab\"", "\"abc\"", "6", NULL }, { "\"a\"", "\"abcd\"", "5", NULL } })
SCHEMA_CASE(jschema_ref_defs_recursive,
            "{\"$defs\":{\"node\":{\"type\":\"object\",\"properties\":{\"v\":{\"type\":\"integer\",\"minimum\":0,\"maximum\":9},"
            "\"kids\":{\"type\":\"array\",\"items\":{\"$ref\":\"#/$defs/node\"},\"maxItems\":2}},\"required\":[\"v\",\"kids\"]}},"
            "\"$ref\":\"#/$defs/node\"}",
            { { "{\"v\":1,\"kids\":[{\"v\":2,\"kids\":[]}]}", NULL }, { "{\"v\":1,\"kids\":[{\"v\":22,\"kids\":[]}]}", NULL } })
SCHEMA_CASE(jschema_string_lengths_unicode,
            "{\"type\":\"string\",\"minLength\":2,\"maxLength\":3}",
            { { "\"\xc3\xa9\xc3\xa9\"", "\"a\\nb\"", "\"\\u00e9x\"", NULL }, { "\"\xc3\xa9\"", "\"abcd\"", NULL } })
SCHEMA_CASE(jschema_pattern,
            "{\"type\":\"object\",\"properties\":{\"id\":{\"type\":\"string\",\"pattern\":\"^[A-Z]{2}-\\\\d{3}(x|yz)?$\"}},\"required\":[\"id\"]}",
            { { "{\"id\":\"AB-123\"}", "{\"id\":\"QQ-000yz\"}", NULL }, { "{\"id\":\"ab-123\"}", "{\"id\":\"AB-12\"}", "{\"id\":\"AB-123y\"}", NULL } })
SCHEMA_CASE(jschema_number_bounds,
            "{\"type\":\"number\",\"minimum\":-3,\"maximum\":12}",
            { { "-3", "-2.5", "0", "11.999", "12", "12.000", NULL }, { "-3.5", "12.5", "13", "-4", NULL } })

TEST(jschema_errors_name_the_keyword)
{
    static const struct { const char *schema, *want; } bad[] = {
        { "{\"type\":\"object\",\"properties\":{\"a\":{\"not\":{}}}}", "/properties/a: unsupported keyword 'not'" },
        { "{\"type\":\"array\",\"items\":{\"contains\":{}}}", "/items: unsupported keyword 'contains'" },
        { "{\"type\":\"strange\"}", "unknown type 'strange'" },
        { "{\"$ref\":\"#/$defs/missing\"}", "$ref '#/$defs/missing' points to nothing" },
        { "{\"$ref\":\"http://x/y.json\"}", "only local references" },
        { "{\"type\":\"string\",\"pattern\":\"(?=a)b\"}", "pattern: unsupported group" },
        { "{\"type\":\"string\",\"pattern\":\"(a)\\\\1\"}", "backreference" },
        { "{\"type\":\"string\",\"format\":\"email\"}", "unsupported format 'email'" },
        { "{\"type\":\"integer\",\"minimum\":5,\"maximum\":1}", "no value lies between" },
        { "{\"type\":\"number\",\"minimum\":0.5}", "only inclusive integral bounds" },
        { "{\"type\":\"array\",\"minItems\":3,\"maxItems\":1}", "maxItems 1 below minItems 3" },
        { "{\"type\":\"object\",\"properties\":{\"a\":{}},\"required\":[\"b\"]}", "'required' names 'b'" },
        { "{\"anyOf\":[]}", "'anyOf' must be a non-empty array" },
        { "false", "matches nothing" },
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        char err[256] = "";
        struct grammar *g = compile(bad[i].schema, err, sizeof err);
        CHECK_MSG(!g, "schema %zu compiled", i);
        CHECK_MSG(strstr(err, bad[i].want), "schema %zu: '%s' lacks '%s'", i, err, bad[i].want);
    }
}

TEST(jschema_json_object_and_tool_call)
{
    char *gbnf = jschema_object_gbnf();
    char err[256];
    struct grammar *g = grammar_parse(gbnf, strlen(gbnf), err, sizeof err);
    free(gbnf);
    CHECK(g);
    const char *doc = "{\"a\":[1,{\"b\":null}],\"c\":\"d\"}";
    CHECK(grammar_match(g, doc, strlen(doc)));
    CHECK(!grammar_match(g, "[1]", 3));
    CHECK(!grammar_match(g, "{} ", 3)); /* nothing after the value: it ends generation */
    grammar_free(g);

    cJSON *tools = cJSON_Parse(
        "[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"parameters\":{\"type\":\"object\","
        "\"properties\":{\"city\":{\"type\":\"string\"}},\"required\":[\"city\"]}}},"
        "{\"type\":\"function\",\"function\":{\"name\":\"noop\"}}]");
    const struct tools_wire hermes = {
        .trigger = "<tool_call>", .list_open = "", .list_close = "", .call_open = "<tool_call>",
        .call_close = "</tool_call>", .sep = "\n", .name_key = "name", .args_key = "arguments",
    };
    gbnf = jschema_tool_call_gbnf(tools, NULL, &hermes, true, err, sizeof err);
    CHECK(gbnf);
    g = grammar_parse(gbnf, strlen(gbnf), err, sizeof err);
    free(gbnf);
    CHECK(g);
    const char *one = "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>";
    const char *two = "<tool_call>{\"name\":\"noop\",\"arguments\":{}}</tool_call>\n<tool_call>{\"name\":\"noop\",\"arguments\":{}}</tool_call>";
    CHECK(grammar_match(g, one, strlen(one)));
    CHECK(grammar_match(g, two, strlen(two)));
    const char *wrong = "<tool_call>{\"name\":\"get_weather\",\"arguments\":{}}</tool_call>";
    CHECK(!grammar_match(g, wrong, strlen(wrong))); /* city is required */
    grammar_free(g);
    gbnf = jschema_tool_call_gbnf(tools, "missing", &hermes, false, err, sizeof err);
    CHECK(!gbnf);
    CHECK_STR_CONTAINS(err, "no function named 'missing'");
    cJSON_Delete(tools);
}

// ---- hostile schemas: bounded depth, time and size ----------------------------

/* Every good document matches and no bad one does. */
static int check_lists(const char *schema_text, const char *const *good, const char *const *bad)
{
    char err[256];
    struct grammar *g = compile(schema_text, err, sizeof err);
    if (!g) {
        fprintf(stderr, "%s: %s\n", schema_text, err);
        return -1;
    }
    int fails = 0;
    for (int i = 0; good[i]; i++)
        if (!grammar_match(g, good[i], strlen(good[i])) && ++fails)
            fprintf(stderr, "%s: rejects valid %s\n", schema_text, good[i]);
    for (int i = 0; bad[i]; i++)
        if (grammar_match(g, bad[i], strlen(bad[i])) && ++fails)
            fprintf(stderr, "%s: accepts invalid %s\n", schema_text, bad[i]);
    grammar_free(g);
    return fails;
}

/* prefixItems became a chain of rules instead of groups nested as deep as
 * the list is long; the bounds around it keep their meaning. */
TEST(jschema_prefix_items)
{
    static const struct { const char *schema, *good[6], *bad[6]; } cases[] = {
        { "{\"prefixItems\":[{\"const\":1},{\"const\":2},{\"const\":3}]}",
          { "[]", "[1]", "[1,2]", "[1,2,3]", "[1, 2, 3, \"x\", null]", NULL }, { "[2]", "[1,3]", "[1,2,4]", NULL } },
        { "{\"prefixItems\":[{\"const\":1},{\"const\":2},{\"const\":3}],\"items\":false}",
          { "[]", "[1]", "[1,2,3]", NULL }, { "[1,2,3,4]", "[1,2,3,1]", NULL } },
        { "{\"prefixItems\":[{\"const\":1},{\"const\":2},{\"const\":3}],\"items\":false,\"minItems\":2}",
          { "[1,2]", "[1,2,3]", NULL }, { "[]", "[1]", "[1,2,3,4]", NULL } },
        { "{\"prefixItems\":[{\"const\":1},{\"const\":2},{\"const\":3}],\"items\":{\"type\":\"integer\"},\"maxItems\":2}",
          { "[]", "[1]", "[1,2]", NULL }, { "[1,2,3]", "[5]", NULL } },
        { "{\"prefixItems\":[{\"const\":1},{\"const\":2},{\"const\":3}],\"items\":{\"type\":\"integer\"},\"minItems\":4}",
          { "[1,2,3,7]", "[1,2,3,7,8]", NULL }, { "[1,2,3]", "[1,2,3,\"x\"]", "[1,2,7,7]", NULL } },
        { "{\"type\":\"array\",\"items\":[{\"type\":\"string\"},{\"type\":\"null\"}],\"maxItems\":3}",
          { "[\"a\"]", "[\"a\",null]", "[\"a\",null,true]", NULL }, { "[null]", "[\"a\",null,1,2]", NULL } },
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
        CHECK_MSG(check_lists(cases[i].schema, cases[i].good, cases[i].bad) == 0, "case %zu", i);

    /* 2,000 prefix items: no nesting limit in the way */
    cJSON *s = cJSON_CreateObject(), *pi = cJSON_AddArrayToObject(s, "prefixItems");
    for (int i = 0; i < 2000; i++) {
        cJSON *c = cJSON_CreateObject();
        cJSON_AddNumberToObject(c, "const", i % 10);
        cJSON_AddItemToArray(pi, c);
    }
    char err[256];
    char *gbnf = jschema_to_gbnf(s, err, sizeof err);
    cJSON_Delete(s);
    CHECK_MSG(gbnf, "%s", err);
    struct grammar *g = grammar_parse(gbnf, strlen(gbnf), err, sizeof err);
    free(gbnf);
    CHECK_MSG(g, "%s", err);
    CHECK(grammar_match(g, "[0,1,2,3,4,5,6,7,8,9,0]", 23));
    CHECK(!grammar_match(g, "[0,1,2,3,4,5,6,7,8,9,1]", 23));
    grammar_free(g);
}

/* "pattern": n nested groups around "a" (malloc'd). */
static char *nested_pattern_schema(int n)
{
    char *s = malloc(2 * (size_t)n + 64);
    if (!s)
        return NULL;
    int k = sprintf(s, "{\"type\":\"string\",\"pattern\":\"^");
    memset(s + k, '(', (size_t)n);
    k += n;
    s[k++] = 'a';
    memset(s + k, ')', (size_t)n);
    k += n;
    strcpy(s + k, "$\"}");
    return s;
}

/* Issue 7.1: a pattern of nested groups recursed without bound in the regex
 * translation and again in the GBNF parser, through response_format and
 * through a tool's parameters under tool_choice "required". */
TEST(jschema_pattern_nesting_is_bounded)
{
    char err[256];
    char *text = nested_pattern_schema(100000);
    CHECK(text);
    struct grammar *g = compile(text, err, sizeof err);
    free(text);
    CHECK(!g);
    CHECK_STR_CONTAINS(err, "pattern: groups nested deeper than 64 levels (JSCHEMA_MAX_PATTERN_NESTING)");

    /* the deepest allowed pattern fits the grammar's own nesting limit */
    text = nested_pattern_schema(JSCHEMA_MAX_PATTERN_NESTING);
    CHECK(text);
    g = compile(text, err, sizeof err);
    free(text);
    CHECK_MSG(g, "%s", err);
    CHECK(grammar_match(g, "\"a\"", 3));
    CHECK(!grammar_match(g, "\"aa\"", 4));
    grammar_free(g);

    /* a tool's parameter, as tool_choice "required" compiles it */
    text = nested_pattern_schema(100000);
    CHECK(text);
    cJSON *tools = cJSON_CreateArray(), *t = cJSON_CreateObject();
    cJSON_AddItemToArray(tools, t);
    cJSON *fn = cJSON_AddObjectToObject(t, "function");
    cJSON_AddStringToObject(fn, "name", "f");
    cJSON *params = cJSON_AddObjectToObject(fn, "parameters");
    cJSON_AddStringToObject(params, "type", "object");
    cJSON *props = cJSON_AddObjectToObject(params, "properties");
    cJSON_AddItemToObject(props, "x", cJSON_Parse(text));
    free(text);
    const struct tools_wire wire = { .name_key = "name", .args_key = "arguments" };
    char *gbnf = jschema_tool_call_gbnf(tools, NULL, &wire, false, err, sizeof err);
    cJSON_Delete(tools);
    CHECK(!gbnf);
    CHECK_STR_CONTAINS(err, "tools/0/function/parameters/properties/x: pattern: groups nested deeper than 64");
}

/* Schemas nested 10,000 deep (built in memory: cJSON_Parse stops at 1,000)
 * stop at JSCHEMA_MAX_DEPTH, through every keyword that recurses. */
TEST(jschema_deep_schemas_are_bounded)
{
    static const char *const via[] = { "items", "properties", "anyOf", "additionalProperties", "allOf" };
    for (size_t v = 0; v < sizeof via / sizeof *via; v++) {
        cJSON *root = cJSON_CreateObject(), *cur = root;
        for (int i = 0; i < 10000; i++) {
            cJSON *next = cJSON_CreateObject();
            if (v == 0) {
                cJSON_AddItemToObject(cur, "items", next);
            } else if (v == 1 || v == 4) {
                cJSON *props = cJSON_AddObjectToObject(cur, "properties");
                if (v == 4) { /* allOf of one schema is that schema */
                    cJSON *all = cJSON_CreateArray();
                    cJSON_AddItemToArray(all, next);
                    cJSON *wrap = cJSON_CreateObject();
                    cJSON_AddItemToObject(wrap, "allOf", all);
                    cJSON_AddItemToObject(props, "p", wrap);
                } else {
                    cJSON_AddItemToObject(props, "p", next);
                }
            } else if (v == 2) {
                cJSON *any = cJSON_AddArrayToObject(cur, "anyOf");
                cJSON_AddItemToArray(any, next);
            } else {
                cJSON_AddItemToObject(cur, "additionalProperties", next);
            }
            cur = next;
        }
        char err[256];
        char *gbnf = jschema_to_gbnf(root, err, sizeof err);
        cJSON_Delete(root);
        CHECK_MSG(!gbnf, "via %s compiled", via[v]);
        CHECK_MSG(strstr(err, "schema nested deeper than 64 levels (JSCHEMA_MAX_DEPTH)"), "via %s: %s",
                  via[v], err);
        CHECK_MSG(!strncmp(err, "json_schema: ...", 16), "via %s: %s", via[v], err);
    }
}

/* allOf visits its $ref targets again each time it is met: a chain of
 * definitions each combining the next one twice doubles the work per link.
 * The output cap stops it (before: 2^30 visits, within the depth limit). */
TEST(jschema_exponential_all_of_is_bounded)
{
    const int n = 30;
    cJSON *root = cJSON_CreateObject(), *defs = cJSON_AddObjectToObject(root, "$defs");
    for (int i = 0; i < n; i++) {
        char name[16], ref[32];
        snprintf(name, sizeof name, "d%d", i);
        snprintf(ref, sizeof ref, "#/$defs/d%d", i + 1);
        cJSON *d = cJSON_AddObjectToObject(defs, name);
        cJSON *props = cJSON_AddObjectToObject(d, "properties");
        for (int k = 0; k < 2 && i + 1 < n; k++) {
            cJSON *p = cJSON_AddObjectToObject(props, k ? "b" : "a");
            cJSON *all = cJSON_AddArrayToObject(p, "allOf");
            cJSON *r = cJSON_CreateObject();
            cJSON_AddStringToObject(r, "$ref", ref);
            cJSON_AddItemToArray(all, r);
            cJSON_AddItemToArray(all, cJSON_Parse("{\"properties\":{\"z\":{\"type\":\"integer\"}}}"));
        }
        if (i + 1 == n)
            cJSON_AddItemToObject(props, "leaf", cJSON_Parse("{\"type\":\"null\"}"));
    }
    cJSON_AddStringToObject(root, "$ref", "#/$defs/d0");
    char err[256];
    double t0 = omni_time_s();
    char *gbnf = jschema_to_gbnf(root, err, sizeof err);
    const double ms = (omni_time_s() - t0) * 1e3;
    cJSON_Delete(root);
    CHECK(!gbnf);
    CHECK_STR_CONTAINS(err, "(JSCHEMA_MAX_GBNF_BYTES)");
    printf("    (stopped after %.0f ms)\n", ms);
}

/* Issue 7.2: a 589 KB schema with 20,000 properties took 45 s to compile
 * (quadratic rule lookups in the grammar parser, quadratic 'required'
 * checks). Correctness is checked; the time is printed, not asserted. */
TEST(jschema_20000_properties)
{
    const int n = 20000;
    size_t cap = (size_t)n * 48 + 64, k = 0;
    char *text = malloc(cap);
    CHECK(text);
    k += (size_t)sprintf(text + k, "{\"type\":\"object\",\"properties\":{");
    for (int i = 0; i < n; i++)
        k += (size_t)sprintf(text + k, "%s\"p%d\":{\"type\":\"%s\"}", i ? "," : "", i,
                             i % 2 ? "integer" : "string");
    k += (size_t)sprintf(text + k, "},\"required\":[");
    for (int i = 0; i < n; i += 1000)
        k += (size_t)sprintf(text + k, "%s\"p%d\"", i ? "," : "", i);
    sprintf(text + k, "]}");
    const size_t schema_bytes = strlen(text);
    cJSON *schema = cJSON_Parse(text);
    free(text);
    CHECK(schema);
    char err[256];
    double t0 = omni_time_s();
    char *gbnf = jschema_to_gbnf(schema, err, sizeof err);
    const double t_gbnf = omni_time_s() - t0;
    cJSON_Delete(schema);
    CHECK_MSG(gbnf, "%s", err);
    struct grammar *g = grammar_parse(gbnf, strlen(gbnf), err, sizeof err);
    const double t_all = omni_time_s() - t0;
    const size_t gbnf_bytes = strlen(gbnf);
    free(gbnf);
    CHECK_MSG(g, "%s", err);
    /* every 1000th property is required; the others may be left out, in order */
    struct { char *s; size_t n, cap; } doc = { 0 };
    doc.cap = 1 << 20;
    doc.s = malloc(doc.cap);
    CHECK(doc.s);
    doc.n = (size_t)sprintf(doc.s, "{");
    for (int i = 0; i < n; i += 1000)
        doc.n += (size_t)sprintf(doc.s + doc.n, "%s\"p%d\":\"x\"", i ? "," : "", i);
    doc.n += (size_t)sprintf(doc.s + doc.n, ",\"p19999\":5}");
    CHECK(grammar_match(g, doc.s, doc.n));
    doc.s[doc.n - 2] = '"'; /* an integer property given a string */
    CHECK(!grammar_match(g, doc.s, doc.n));
    CHECK(!grammar_match(g, "{\"p1\":1}", 8)); /* p0 is required */
    free(doc.s);
    grammar_free(g);
    printf("    (%zu-byte schema: GBNF (%zu bytes) in %.1f ms, parsed grammar in %.1f ms total)\n",
           schema_bytes, gbnf_bytes, t_gbnf * 1e3, t_all * 1e3);
}

/* {m,n} in a pattern is read, checked and rewritten: n below m, several
 * commas or huge counts are the schema's error, never GBNF the grammar
 * parser refuses (found by fuzz_json_schema: "\\d{7,5}"). */
TEST(jschema_pattern_counts_are_checked)
{
    char err[256];
    static const char *bad[] = {
        "{\"type\":\"string\",\"pattern\":\"^\\\\d{7,5}$\"}",
        "{\"type\":\"string\",\"pattern\":\"^a{1,2,3}$\"}",
        "{\"type\":\"string\",\"pattern\":\"^a{,3}$\"}",
        "{\"type\":\"string\",\"pattern\":\"^a{99999}$\"}",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        CHECK_MSG(compile(bad[i], err, sizeof err) == NULL, "%s compiled", bad[i]);
        CHECK_STR_CONTAINS(err, "pattern");
    }
    struct grammar *g = compile("{\"type\":\"string\",\"pattern\":\"^[A-Z]-\\\\d{2,3}x{2}y{1,}$\"}", err,
                                sizeof err);
    CHECK_MSG(g, "%s", err);
    CHECK(grammar_match(g, "\"B-123xxyyy\"", 12));
    CHECK(!grammar_match(g, "\"B-1xxy\"", 8));
    grammar_free(g);
}
