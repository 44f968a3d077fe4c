/* test_tools.c - tool-call parsing on recorded raw outputs of each format
 * (tests/fixtures/tools/cases.json: clean, broken, parallel, not-a-call),
 * fed whole and in chunks of many sizes: the same content and calls every
 * time, no markup in the content, the same arguments text to the byte, and
 * for clean JSON calls ("streams" in the manifest) arguments that arrive in
 * several fragments when they are longer than a chunk. Also the lenient JSON reader, schema
 * coercion, format detection and the wire spelling for forced calls. */
#include "test.h"

#include "llm/tools/tools.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

struct collect {
    char content[4096];
    size_t clen;
    cJSON *calls;            /* [{"id","name","arguments"(text)}] */
    int bad_order;           /* ARGS before START, index jumps, ... */
    int frags[8];            /* CALL_ARGS fragments per call */
};

static void collect_fn(void *user, const struct tools_event *ev)
{
    struct collect *c = user;
    if (ev->type == TOOLS_EV_CONTENT) {
        if (c->clen + ev->len < sizeof c->content) {
            memcpy(c->content + c->clen, ev->text, ev->len);
            c->clen += ev->len;
            c->content[c->clen] = 0;
        }
    } else if (ev->type == TOOLS_EV_CALL_START) {
        if (ev->index != cJSON_GetArraySize(c->calls) || strncmp(ev->id, "call_", 5) != 0 ||
            strlen(ev->id) != 29)
            c->bad_order++;
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "id", ev->id);
        cJSON_AddStringToObject(o, "name", ev->name);
        cJSON_AddStringToObject(o, "arguments", "");
        cJSON_AddItemToArray(c->calls, o);
    } else {
        cJSON *o = cJSON_GetArrayItem(c->calls, ev->index);
        if (!o || ev->index != cJSON_GetArraySize(c->calls) - 1) {
            c->bad_order++;
            return;
        }
        if (ev->index < 8)
            c->frags[ev->index]++;
        cJSON *a = cJSON_GetObjectItem(o, "arguments");
        size_t ol = strlen(a->valuestring);
        char *s = malloc(ol + ev->len + 1);
        memcpy(s, a->valuestring, ol);
        memcpy(s + ol, ev->text, ev->len);
        s[ol + ev->len] = 0;
        cJSON_SetValuestring(a, s);
        free(s);
    }
}

/* Run text through a parser in chunks of `chunk` bytes (0: all at once). */
static void run_parser(const struct tools_parser_params *pp, const char *text, size_t chunk,
                       struct collect *c)
{
    memset(c, 0, sizeof *c);
    c->calls = cJSON_CreateArray();
    struct tools_parser *p = tools_parser_new(pp);
    size_t n = strlen(text);
    if (!chunk)
        chunk = n ? n : 1;
    for (size_t i = 0; i < n; i += chunk)
        tools_parser_feed(p, text + i, i + chunk > n ? n - i : chunk, collect_fn, c);
    tools_parser_finish(p, collect_fn, c);
    tools_parser_free(p);
}

/* Does the parsed call list equal the expected [{"name","arguments":{}}]? */
static bool calls_equal(const cJSON *got, const cJSON *want, char *why, size_t whylen)
{
    if (cJSON_GetArraySize(got) != cJSON_GetArraySize(want)) {
        snprintf(why, whylen, "%d calls, want %d", cJSON_GetArraySize(got), cJSON_GetArraySize(want));
        return false;
    }
    for (int i = 0; i < cJSON_GetArraySize(want); i++) {
        const cJSON *g = cJSON_GetArrayItem(got, i), *w = cJSON_GetArrayItem(want, i);
        const char *gn = cJSON_GetObjectItem(g, "name")->valuestring;
        const char *args = cJSON_GetObjectItem(g, "arguments")->valuestring;
        cJSON *ga = cJSON_Parse(args);
        bool ok = !strcmp(gn, cJSON_GetObjectItem(w, "name")->valuestring) &&
                  cJSON_Compare(ga, cJSON_GetObjectItem(w, "arguments"), true);
        cJSON_Delete(ga);
        if (!ok) {
            snprintf(why, whylen, "call %d: %s %s", i, gn, args);
            return false;
        }
    }
    return true;
}

static const char *const markup[] = {
    "<tool_call>", "</tool_call>", "<function=", "<parameter=", "<|python_tag|>", "[TOOL_CALLS]",
    "[ARGS]", "tool\xe2\x96\x81", ">>>", "<|tool_call|>", "```tool_code", "<start_function_call>",
    "<|tool_call_start|>", "<|tool_call_end|>",
};

TEST(tools_recorded_outputs_all_chunkings)
{
    char *manifest = test_read_file(test_fixture("tools/cases.json"), NULL);
    char *tools = test_read_file(test_fixture("tools/tools.json"), NULL);
    CHECK(manifest && tools);
    cJSON *cases = cJSON_Parse(manifest);
    CHECK(cJSON_IsArray(cases) && cJSON_GetArraySize(cases) >= 25);
    const cJSON *tc;
    int k = 0;
    cJSON_ArrayForEach(tc, cases) {
        const char *file = cJSON_GetObjectItem(tc, "file")->valuestring;
        const char *fmt = cJSON_GetObjectItem(tc, "format")->valuestring;
        char rel[128];
        snprintf(rel, sizeof rel, "tools/%s", file);
        char *raw = test_read_file(test_fixture(rel), NULL);
        CHECK_MSG(raw, "missing %s", rel);
        struct tools_parser_params pp = tools_parser_default_params();
        CHECK_MSG(tools_format_from_name(fmt) >= 0, "format %s", fmt);
        pp.fmt = (enum tools_format)tools_format_from_name(fmt);
        pp.tools_json = tools;
        const cJSON *par = cJSON_GetObjectItem(tc, "parallel");
        pp.parallel = !cJSON_IsFalse(par);
        pp.id_seed = 7;
        bool streams = cJSON_IsTrue(cJSON_GetObjectItem(tc, "streams"));
        struct collect whole;
        run_parser(&pp, raw, 0, &whole);
        static const size_t chunks[] = { 0, 1, 2, 3, 5, 7, 11, 16, 64 };
        for (size_t ci = 0; ci < sizeof chunks / sizeof chunks[0]; ci++) {
            struct collect c;
            run_parser(&pp, raw, chunks[ci], &c);
            char why[512] = "";
            bool ok = calls_equal(c.calls, cJSON_GetObjectItem(tc, "calls"), why, sizeof why);
            for (int i = 0; ok && i < cJSON_GetArraySize(c.calls); i++) {
                const char *a = cJSON_GetObjectItem(cJSON_GetArrayItem(c.calls, i), "arguments")->valuestring;
                const char *w = cJSON_GetObjectItem(cJSON_GetArrayItem(whole.calls, i), "arguments")->valuestring;
                if (strcmp(a, w) != 0)
                    snprintf(why, sizeof why, "call %d: arguments %s, whole %s", i, a, w);
                else if (streams && chunks[ci] > 0 && strlen(a) > chunks[ci] && i < 8 && c.frags[i] < 2)
                    snprintf(why, sizeof why, "call %d: %d fragment(s) of %s", i, c.frags[i], a);
                ok = !*why;
            }
            const char *want = cJSON_GetObjectItem(tc, "content")->valuestring;
            bool content_ok = !strcmp(c.content, want);
            bool leak = false;
            if (cJSON_GetArraySize(cJSON_GetObjectItem(tc, "calls")) > 0)
                for (size_t m = 0; m < sizeof markup / sizeof markup[0]; m++)
                    leak |= strstr(c.content, markup[m]) != NULL;
            int bad = c.bad_order;
            cJSON_Delete(c.calls);
            CHECK_MSG(ok, "case %d (%s as %s, chunk %zu): %s", k, file, fmt, chunks[ci], why);
            CHECK_MSG(content_ok, "case %d (%s as %s, chunk %zu): content '%s', want '%s'", k,
                      file, fmt, chunks[ci], c.content, want);
            CHECK_MSG(!leak, "case %d: markup in content '%s'", k, c.content);
            CHECK_MSG(bad == 0, "case %d: events out of order", k);
        }
        cJSON_Delete(whole.calls);
        free(raw);
        k++;
    }
    cJSON_Delete(cases);
    free(manifest);
    free(tools);
}

TEST(tools_ids_stable_and_unique)
{
    char *raw = test_read_file(test_fixture("tools/hermes_parallel.txt"), NULL);
    CHECK(raw);
    struct tools_parser_params pp = tools_parser_default_params();
    pp.fmt = TOOLS_FMT_HERMES;
    struct collect c;
    run_parser(&pp, raw, 3, &c);
    CHECK_EQ(cJSON_GetArraySize(c.calls), 2);
    const char *a = cJSON_GetObjectItem(cJSON_GetArrayItem(c.calls, 0), "id")->valuestring;
    const char *b = cJSON_GetObjectItem(cJSON_GetArrayItem(c.calls, 1), "id")->valuestring;
    CHECK(strcmp(a, b) != 0);
    CHECK_EQ(c.bad_order, 0);
    cJSON_Delete(c.calls);
    free(raw);
}

TEST(tools_content_streams_before_the_call)
{
    /* Text before a marker comes out as soon as it cannot be a marker. */
    struct tools_parser_params pp = tools_parser_default_params();
    pp.fmt = TOOLS_FMT_HERMES;
    struct tools_parser *p = tools_parser_new(&pp);
    struct collect c;
    memset(&c, 0, sizeof c);
    c.calls = cJSON_CreateArray();
    tools_parser_feed(p, "Hello there <tool", 17, collect_fn, &c);
    CHECK_STR_EQ(c.content, "Hello there ");
    tools_parser_feed(p, "_call>{\"name\":\"f\",\"arguments\":{}}</tool_call>", 45, collect_fn, &c);
    CHECK_EQ(cJSON_GetArraySize(c.calls), 1);
    tools_parser_finish(p, collect_fn, &c);
    CHECK_STR_EQ(c.content, "Hello there ");
    tools_parser_free(p);
    cJSON_Delete(c.calls);
}

TEST(tools_calls_inside_reasoning)
{
    const char *r = "I should call the tool.\n<tool_call>\n{\"name\": \"get_time\", \"arguments\": "
                    "{\"tz\": \"UTC\"}}\n</tool_call>";
    struct tools_parser_params pp = tools_parser_default_params();
    pp.fmt = TOOLS_FMT_HERMES;
    struct collect c;
    memset(&c, 0, sizeof c);
    c.calls = cJSON_CreateArray();
    CHECK_EQ(tools_parse_calls_only(&pp, r, strlen(r), collect_fn, &c), 1);
    CHECK_EQ(c.clen, 0);
    CHECK_STR_EQ(cJSON_GetObjectItem(cJSON_GetArrayItem(c.calls, 0), "name")->valuestring, "get_time");
    cJSON_Delete(c.calls);
}

TEST(tools_lenient_json)
{
    static const struct { const char *in, *want; } cases[] = {
        { "{\"a\": 1}", "{\"a\":1}" },
        { "{'a': 'x', 'b': [1, 2,],}", "{\"a\":\"x\",\"b\":[1,2]}" },
        { "{\"s\": \"line\nbreak\"}", "{\"s\":\"line\\nbreak\"}" },
        { "{\"a\": {\"b\": [1, {\"c\": tru", "{\"a\":{\"b\":[1,{}]}}" },
        { "{\"a\": {\"b\": [1, 2", "{\"a\":{\"b\":[1,2]}}" },
        { "{\"s\": \"unterminated", "{\"s\":\"unterminated\"}" },
        { "{a: True, b: None, c: False}", "{\"a\":true,\"b\":null,\"c\":false}" },
        { "{\"u\": \"\\u00e9\\ud83d\\ude00\"}", "{\"u\":\"\xc3\xa9\xf0\x9f\x98\x80\"}" },
        { "{\"a\": 1 \"b\": 2}", "{\"a\":1,\"b\":2}" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        cJSON *v = tools_json_parse_lenient(cases[i].in, strlen(cases[i].in), NULL);
        char *s = v ? cJSON_PrintUnformatted(v) : NULL;
        bool ok = s && !strcmp(s, cases[i].want);
        char got[256];
        snprintf(got, sizeof got, "%s", s ? s : "(null)");
        free(s);
        cJSON_Delete(v);
        CHECK_MSG(ok, "case %zu: %s -> %s", i, cases[i].in, got);
    }
    /* hostile: never crash, bounded depth */
    static const char *const bad[] = { "", "}", "{:", "[[[[", "{\"a\" 1}", "nul", "-", "{'a': @}" };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        cJSON_Delete(tools_json_parse_lenient(bad[i], strlen(bad[i]), NULL));
    char deep[300];
    memset(deep, '[', sizeof deep);
    cJSON_Delete(tools_json_parse_lenient(deep, sizeof deep, NULL));
}

TEST(tools_coercion_to_schema)
{
    cJSON *schema = cJSON_Parse(
        "{\"type\":\"object\",\"properties\":{\"n\":{\"type\":\"integer\"},\"x\":{\"type\":\"number\"},"
        "\"b\":{\"type\":\"boolean\"},\"s\":{\"type\":\"string\"},\"o\":{\"type\":\"object\","
        "\"properties\":{\"k\":{\"type\":\"integer\"}}},\"l\":{\"type\":\"array\",\"items\":"
        "{\"type\":\"integer\"}},\"bad\":{\"type\":\"integer\"}}}");
    cJSON *args = cJSON_Parse("{\"n\":\"42\",\"x\":\" 2.5 \",\"b\":\"True\",\"s\":7,\"o\":\"{'k': '3'}\","
                              "\"l\":[\"1\",2],\"bad\":\"abc\",\"extra\":\"1\"}");
    tools_coerce_args(args, schema);
    char *s = cJSON_PrintUnformatted(args);
    CHECK_STR_EQ(s, "{\"n\":42,\"x\":2.5,\"b\":true,\"s\":\"7\",\"o\":{\"k\":3},\"l\":[1,2],"
                    "\"bad\":\"abc\",\"extra\":\"1\"}");
    free(s);
    cJSON_Delete(args);
    cJSON_Delete(schema);
}

TEST(tools_format_detection_and_names)
{
    CHECK_EQ(tools_format_detect(NULL), TOOLS_FMT_JSON);
    CHECK_EQ(tools_format_detect("{{'<|im_start|>'}}<tool_call>"), TOOLS_FMT_HERMES);
    CHECK_EQ(tools_format_detect("<tool_call>\n<function=x>\n<parameter=y>"), TOOLS_FMT_QWEN3_CODER);
    CHECK_EQ(tools_format_detect("<|start_header_id|>ipython<|python_tag|>"), TOOLS_FMT_LLAMA3);
    CHECK_EQ(tools_format_detect("[AVAILABLE_TOOLS][TOOL_CALLS]"), TOOLS_FMT_MISTRAL);
    CHECK_EQ(tools_format_detect("<\xef\xbd\x9ctool\xe2\x96\x81" "calls\xe2\x96\x81" "begin\xef\xbd\x9c>"),
             TOOLS_FMT_DEEPSEEK);
    CHECK_EQ(tools_format_detect(">>>all\n"), TOOLS_FMT_FUNCTIONARY);
    CHECK_EQ(tools_format_detect("<|start_of_role|><|tool_call|>"), TOOLS_FMT_GRANITE);
    CHECK_EQ(tools_format_detect("<start_of_turn>model\n"), TOOLS_FMT_GEMMA);
    CHECK_EQ(tools_format_detect("<|tool_call_start|>"), TOOLS_FMT_PYTHONIC);
    CHECK_EQ(tools_format_detect("<|header_start|>assistant<|header_end|>"), TOOLS_FMT_PYTHONIC);
    for (int f = 0; f < TOOLS_FMT_COUNT; f++)
        CHECK_EQ(tools_format_from_name(tools_format_name((enum tools_format)f)), f);
    CHECK_EQ(tools_format_from_name("qwen"), TOOLS_FMT_HERMES);
    CHECK_EQ(tools_format_from_name("nope"), -1);
}

/* The published templates of the families (tests/fixtures/templates) pick
 * the format their models write. */
TEST(tools_format_detection_on_family_templates)
{
    static const struct {
        const char *file;
        enum tools_format f;
    } cases[] = {
        { "gpt-oss", TOOLS_FMT_HERMES },   /* Harmony, through the reasoning splitter */
        { "qwen3.5", TOOLS_FMT_QWEN3_CODER }, { "qwen3", TOOLS_FMT_HERMES },
        { "lfm2", TOOLS_FMT_PYTHONIC },    { "lfm2.5", TOOLS_FMT_PYTHONIC },
        { "smollm3", TOOLS_FMT_HERMES },   { "gemma3", TOOLS_FMT_GEMMA },
        { "llama3.1", TOOLS_FMT_LLAMA3 },  { "mistral-v0.3", TOOLS_FMT_MISTRAL },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char rel[128];
        snprintf(rel, sizeof rel, "templates/%s.jinja", cases[i].file);
        char *t = test_read_file(test_fixture(rel), NULL);
        CHECK_MSG(t, "missing %s", rel);
        enum tools_format got = tools_format_detect(t);
        free(t);
        CHECK_MSG(got == cases[i].f, "%s: %s, want %s", cases[i].file, tools_format_name(got),
                  tools_format_name(cases[i].f));
    }
    CHECK_EQ(tools_format_from_name("harmony"), TOOLS_FMT_HERMES);
    CHECK_EQ(tools_format_from_name("gpt-oss"), TOOLS_FMT_HERMES);
    CHECK_EQ(tools_format_from_name("smollm3"), TOOLS_FMT_HERMES);
    CHECK_EQ(tools_format_from_name("lfm2"), TOOLS_FMT_PYTHONIC);
    CHECK_EQ(tools_format_from_name("gemma3"), TOOLS_FMT_GEMMA);
}

/* Feed text in two pieces cut at `cut` (then finish). */
static void run_cut(const struct tools_parser_params *pp, const char *text, size_t cut, struct collect *c)
{
    memset(c, 0, sizeof *c);
    c->calls = cJSON_CreateArray();
    struct tools_parser *p = tools_parser_new(pp);
    size_t n = strlen(text);
    tools_parser_feed(p, text, cut, collect_fn, c);
    tools_parser_feed(p, text + cut, n - cut, collect_fn, c);
    tools_parser_finish(p, collect_fn, c);
    tools_parser_free(p);
}

/* LFM2's Pythonic calls: Python literals become JSON, the same at every cut
 * of the text and one byte at a time; what is not a call stays text (without
 * the markers); nesting past the reader's depth limit is not a call. */
TEST(tools_lfm2_pythonic_every_split)
{
    static char deep[400];
    if (!deep[0]) {
        strcpy(deep, "<|tool_call_start|>[get_weather(city=");
        for (int i = 0; i < 100; i++)
            strcat(deep, "[");
        strcat(deep, ")]<|tool_call_end|>");
    }
    static const struct {
        const char *text, *content;
        int n;
        const char *name, *args;
    } cases[] = {
        { "<|tool_call_start|>[get_weather(city=\"Paris\", days=2, ratio=-2.5e1, exact=True, note=None, "
          "tags=['a', \"b\"], opts={'deep': {'x': [1, False]}})]<|tool_call_end|>",
          "", 1, "get_weather",
          "{\"city\":\"Paris\",\"days\":2,\"ratio\":-25,\"exact\":true,\"note\":null,\"tags\":[\"a\",\"b\"],"
          "\"opts\":{\"deep\":{\"x\":[1,false]}}}" },
        { "Checking.<|tool_call_start|>[get_weather(city='it\\'s'), get_time(tz=\"UTC\")]<|tool_call_end|>",
          "Checking.", 2, "get_weather", "{\"city\":\"it's\"}" },
        { "<|tool_call_start|>[get_time()]<|tool_call_end|>Done.", "Done.", 1, "get_time", "{}" },
        { "<|tool_call_start|>[get_weather(city=\"Lima\")]", "", 1, "get_weather", "{\"city\":\"Lima\"}" },
        { "Sure <|tool_call_start|>[get_weather(city=]<|tool_call_end|> ok", "Sure [get_weather(city=] ok", 0, NULL, NULL },
        { "<|tool_call_start|>not a call<|tool_call_end|>", "not a call", 0, NULL, NULL },
        { "<|tool_call_start|>[get_weather(\"positional\")]<|tool_call_end|>", "[get_weather(\"positional\")]", 0, NULL, NULL },
        { "A list [1, 2] and f(x) in prose.", "A list [1, 2] and f(x) in prose.", 0, NULL, NULL },
        { "<|tool_call_", "<|tool_call_", 0, NULL, NULL },
    };
    struct tools_parser_params pp = tools_parser_default_params();
    pp.fmt = (enum tools_format)tools_format_from_name("lfm2");
    pp.tools_json = "[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\"}},"
                    "{\"type\":\"function\",\"function\":{\"name\":\"get_time\"}}]";
    pp.parallel = true;
    pp.id_seed = 3;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        size_t n = strlen(cases[i].text);
        for (size_t cut = 0; cut <= n + 1; cut++) {
            struct collect c;
            if (cut <= n)
                run_cut(&pp, cases[i].text, cut, &c);
            else
                run_parser(&pp, cases[i].text, 1, &c);
            int got = cJSON_GetArraySize(c.calls);
            const cJSON *c0 = cJSON_GetArrayItem(c.calls, 0);
            bool ok = got == cases[i].n && !strcmp(c.content, cases[i].content) && c.bad_order == 0 &&
                      (!got || (!strcmp(cJSON_GetObjectItem(c0, "name")->valuestring, cases[i].name) &&
                                !strcmp(cJSON_GetObjectItem(c0, "arguments")->valuestring, cases[i].args)));
            char why[512];
            snprintf(why, sizeof why, "%d calls %s, content '%.200s'", got,
                     got ? cJSON_GetObjectItem(c0, "arguments")->valuestring : "", c.content);
            cJSON_Delete(c.calls);
            CHECK_MSG(ok, "case %zu cut %zu: %s", i, cut, why);
        }
    }
    struct collect c;
    run_parser(&pp, deep, 7, &c);
    CHECK_EQ(cJSON_GetArraySize(c.calls), 0);
    CHECK(!strstr(c.content, "<|tool_call"));
    cJSON_Delete(c.calls);
}

/* What a grammar forces (tools_wire_of) must be read back by every parser. */
TEST(tools_wire_round_trips)
{
    for (int f = 0; f < TOOLS_FMT_COUNT; f++) {
        if (f == TOOLS_FMT_NONE)
            continue;
        struct tools_wire w;
        tools_wire_of((enum tools_format)f, &w);
        char text[1024];
        snprintf(text, sizeof text,
                 "%s%s{\"%s\": \"get_weather\", \"%s\": {\"city\": \"Oslo\"}}%s%s%s{\"%s\": "
                 "\"get_time\", \"%s\": {}}%s%s",
                 w.list_open, w.call_open, w.name_key, w.args_key, w.call_close, w.sep,
                 w.call_open, w.name_key, w.args_key, w.call_close, w.list_close);
        struct tools_parser_params pp = tools_parser_default_params();
        pp.fmt = (enum tools_format)f;
        pp.tools_json = "[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\"}},"
                        "{\"type\":\"function\",\"function\":{\"name\":\"get_time\"}}]";
        struct collect c;
        run_parser(&pp, text, 4, &c);
        int n = cJSON_GetArraySize(c.calls);
        const cJSON *c0 = cJSON_GetArrayItem(c.calls, 0);
        bool ok = n == 2 && !strcmp(cJSON_GetObjectItem(c0, "name")->valuestring, "get_weather") &&
                  !strcmp(cJSON_GetObjectItem(c0, "arguments")->valuestring, "{\"city\":\"Oslo\"}");
        char content[256];
        snprintf(content, sizeof content, "%.200s", c.content);
        cJSON_Delete(c.calls);
        CHECK_MSG(ok && content[0] == 0, "%s: %d calls, content '%s' from %s",
                  tools_format_name((enum tools_format)f), n, content, text);
    }
}

TEST(tools_hostile_inputs_never_crash)
{
    static const char *const inputs[] = {
        "<tool_call>", "<tool_call></tool_call>", "<tool_call>{\"name\": 5}</tool_call>",
        "[TOOL_CALLS]", "[TOOL_CALLS][ARGS]", "<function=>", "<function=x><parameter=",
        "```", "```json", "```json\n{", "[f(", "[f(a=", "[f(a=1", ">>>", "{\"name\"",
        "<|python_tag|>", "\xef\xbd\x9c", "call:", "<start_function_call>call:{",
    };
    for (int f = 0; f < TOOLS_FMT_COUNT; f++)
        for (size_t i = 0; i < sizeof inputs / sizeof inputs[0]; i++) {
            struct tools_parser_params pp = tools_parser_default_params();
            pp.fmt = (enum tools_format)f;
            struct collect c;
            run_parser(&pp, inputs[i], 1, &c);
            cJSON_Delete(c.calls);
        }
}

// ---- the API's output builder (src/api/chatout.h) ---------------------------------

#include "src/api/chatout.h"

struct deltas {
    char kinds[256];         /* one letter per delta: c r S A */
    int n;
    char content[512], reasoning[512];
};

static void delta_fn(void *user, const struct chatout_delta *d)
{
    struct deltas *x = user;
    if (x->n < 255)
        x->kinds[x->n++] = "crSA"[d->kind];
    char *dst = d->kind == CHATOUT_CONTENT ? x->content : d->kind == CHATOUT_REASONING ? x->reasoning : NULL;
    if (dst && strlen(dst) + d->len < 512)
        strncat(dst, d->text, d->len);
}

/* Qwen3 with a template-opened <think>, a call written after the reasoning,
 * fed one character at a time as a stream would be. */
TEST(chatout_reasoning_then_tool_call_stream)
{
    const char *raw = "The user wants Paris weather.\n</think>\n\n<tool_call>\n{\"name\": \"get_weather\", "
                      "\"arguments\": {\"city\": \"Paris\", \"days\": \"2\"}}\n</tool_call>";
    struct chatout_params cp = chatout_default_params();
    cp.rfmt = REASONING_THINK;
    cp.starts_open = true;
    cp.tools = true;
    cp.tp.fmt = TOOLS_FMT_HERMES;
    cp.tp.tools_json = "[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"parameters\":"
                       "{\"type\":\"object\",\"properties\":{\"days\":{\"type\":\"integer\"}}}}}]";
    struct chatout *o = chatout_new(&cp);
    struct deltas x;
    memset(&x, 0, sizeof x);
    for (size_t i = 0; raw[i]; i++)
        chatout_feed(o, raw + i, 1, true, delta_fn, &x);
    chatout_finish(o, delta_fn, &x);
    CHECK_STR_EQ(x.reasoning, "The user wants Paris weather.");
    CHECK_STR_EQ(x.content, "");
    CHECK_STR_EQ(chatout_content(o), "");
    CHECK_STR_EQ(chatout_reasoning(o), "The user wants Paris weather.");
    /* reasoning deltas, then exactly one call start and its arguments */
    const char *sa = strchr(x.kinds, 'S');
    CHECK(sa && sa[1] == 'A' && !strchr(sa + 2, 'S') && !strchr(x.kinds, 'c'));
    CHECK_EQ(chatout_n_calls(o), 1);
    const cJSON *f = cJSON_GetObjectItem(cJSON_GetArrayItem(chatout_calls(o), 0), "function");
    CHECK_STR_EQ(cJSON_GetObjectItem(f, "arguments")->valuestring, "{\"city\":\"Paris\",\"days\":2}");
    CHECK(chatout_reasoning_tokens(o) > 20);
    chatout_free(o);
}

/* A call the model wrote inside its reasoning only is still reported. */
TEST(chatout_call_inside_reasoning)
{
    const char *raw = "<think>I'll call it: <tool_call>{\"name\":\"get_time\",\"arguments\":{}}</tool_call></think>";
    struct chatout_params cp = chatout_default_params();
    cp.rfmt = REASONING_THINK;
    cp.tools = true;
    cp.tp.fmt = TOOLS_FMT_HERMES;
    struct chatout *o = chatout_new(&cp);
    struct deltas x;
    memset(&x, 0, sizeof x);
    chatout_feed(o, raw, strlen(raw), false, delta_fn, &x);
    chatout_finish(o, delta_fn, &x);
    CHECK_EQ(chatout_n_calls(o), 1);
    CHECK_STR_EQ(chatout_content(o), "");
    chatout_free(o);
}

/* One family's raw output through the API's builder, cut at every byte and
 * fed one byte at a time: the same reasoning, content and call each time,
 * the arguments in more than one fragment when fed bytewise. */
static void check_family_output(enum reasoning_format rf, enum tools_format tf, const char *raw,
                                const char *reasoning, const char *content, const char *name,
                                const char *args)
{
    size_t n = strlen(raw);
    for (size_t cut = 0; cut <= n + 1; cut++) {
        struct chatout_params cp = chatout_default_params();
        cp.rfmt = rf;
        cp.tools = true;
        cp.tp.fmt = tf;
        cp.tp.tools_json = "[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"parameters\":"
                           "{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\"},"
                           "\"days\":{\"type\":\"integer\"}}}}}]";
        struct chatout *o = chatout_new(&cp);
        struct deltas x;
        memset(&x, 0, sizeof x);
        if (cut <= n) {
            chatout_feed(o, raw, cut, true, delta_fn, &x);
            chatout_feed(o, raw + cut, n - cut, true, delta_fn, &x);
        } else
            for (size_t i = 0; i < n; i++)
                chatout_feed(o, raw + i, 1, true, delta_fn, &x);
        chatout_finish(o, delta_fn, &x);
        const cJSON *f = cJSON_GetObjectItem(cJSON_GetArrayItem(chatout_calls(o), 0), "function");
        bool ok = !strcmp(x.reasoning, reasoning) && !strcmp(x.content, content) &&
                  !strcmp(chatout_content(o) ? chatout_content(o) : "", content) &&
                  chatout_n_calls(o) == (name ? 1 : 0) &&
                  (!name || (!strcmp(cJSON_GetObjectItem(f, "name")->valuestring, name) &&
                             !strcmp(cJSON_GetObjectItem(f, "arguments")->valuestring, args)));
        if (ok && name && cut > n) {
            const char *a = strchr(x.kinds, 'A');
            ok = a && a[1] == 'A';    /* the arguments streamed */
        }
        CHECK_MSG(ok, "cut %zu: reasoning '%s' content '%s' calls %d (%s)", cut, x.reasoning, x.content,
                  chatout_n_calls(o), x.kinds);
        chatout_free(o);
    }
}

/* gpt-oss: analysis reasoning, a commentary preamble, a Harmony tool call. */
TEST(chatout_gpt_oss_harmony_call)
{
    check_family_output(REASONING_HARMONY, TOOLS_FMT_HERMES,
                        "<|channel|>analysis<|message|>User wants weather.<|end|><|start|>assistant"
                        "<|channel|>commentary<|message|>Checking.<|end|><|start|>assistant<|channel|>commentary "
                        "to=functions.get_weather <|constrain|>json<|message|>{\"city\": \"Paris\", \"days\": \"2\"}"
                        "<|call|>",
                        "User wants weather.", "Checking.", "get_weather", "{\"city\":\"Paris\",\"days\":2}");
    check_family_output(REASONING_HARMONY, TOOLS_FMT_HERMES,
                        "<|channel|>analysis<|message|>Easy.<|end|><|start|>assistant<|channel|>final<|message|>"
                        "Hi there.<|return|>",
                        "Easy.", "Hi there.", NULL, NULL);
}

/* SmolLM3 (/think): <think> reasoning, then a hermes <tool_call>. */
TEST(chatout_smollm3_think_then_call)
{
    check_family_output(REASONING_THINK, TOOLS_FMT_HERMES,
                        "<think>\nNeed the weather tool.\n</think>\n<tool_call>\n{\"name\": \"get_weather\", "
                        "\"arguments\": {\"city\": \"Oslo\"}}\n</tool_call>",
                        "Need the weather tool.", "", "get_weather", "{\"city\":\"Oslo\"}");
}

/* LFM2: <think> (LFM2.5 thinking models) and a Pythonic call. */
TEST(chatout_lfm2_pythonic_call)
{
    check_family_output(REASONING_THINK, TOOLS_FMT_PYTHONIC,
                        "<think>Weather.</think>Let me look.<|tool_call_start|>[get_weather(city='Oslo', days=3)]"
                        "<|tool_call_end|>",
                        "Weather.", "Let me look.", "get_weather", "{\"city\":\"Oslo\",\"days\":3}");
}

/* Random mixes of Pythonic pieces (LFM2 markers, calls, literals, text):
 * never a crash, and the same calls and content whole, cut in two
 * anywhere, or fed byte by byte (text that is not a call, markers included,
 * stays text). */
TEST(tools_pythonic_random_pieces_consistent)
{
    static const char *const pieces[] = { "<|tool_call_start|>", "<|tool_call_end|>", "[", "]", "get_weather",
                                           "(", ")", "city=", "days=", "'x'", "\"y\"", "1", ", ", "True",
                                           "None", "[1, ", "{'a': ", "}", "text ", "\n" };
    const size_t np = sizeof pieces / sizeof pieces[0];
    struct tools_parser_params pp = tools_parser_default_params();
    pp.fmt = TOOLS_FMT_PYTHONIC;
    pp.tools_json = "[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\"}}]";
    pp.parallel = true;
    pp.id_seed = 5;
    unsigned long long seed = 777;
    for (int iter = 0; iter < 300; iter++) {
        char text[512] = "";
        int k = 1 + (int)(seed % 14);
        for (int j = 0; j < k; j++) {
            seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
            strcat(text, pieces[(seed >> 33) % np]);
        }
        size_t n = strlen(text);
        struct collect whole;
        run_parser(&pp, text, 0, &whole);
        char *wc = cJSON_PrintUnformatted(whole.calls);
        for (size_t cut = 0; cut <= n + 1; cut++) {
            struct collect c;
            if (cut <= n)
                run_cut(&pp, text, cut, &c);
            else
                run_parser(&pp, text, 1, &c);
            /* ids are per parser: compare names and arguments */
            cJSON *e;
            cJSON_ArrayForEach(e, c.calls) cJSON_DeleteItemFromObject(e, "id");
            cJSON_ArrayForEach(e, whole.calls) cJSON_DeleteItemFromObject(e, "id");
            char *cc = cJSON_PrintUnformatted(c.calls);
            free(wc);
            wc = cJSON_PrintUnformatted(whole.calls);
            bool ok = !strcmp(cc, wc) && !strcmp(c.content, whole.content) && c.bad_order == 0;
            CHECK_MSG(ok, "'%s' cut %zu: calls %s content '%s'; whole %s '%s'", text, cut, cc, c.content, wc,
                      whole.content);
            free(cc);
            cJSON_Delete(c.calls);
        }
        free(wc);
        cJSON_Delete(whole.calls);
    }
}
