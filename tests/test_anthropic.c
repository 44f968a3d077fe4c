/* test_anthropic.c - the Anthropic output mapping (anthropic_blocks): recorded
 * raw model outputs fed through chatout in several chunkings, as the route
 * feeds them, give the exact stream event sequence (thinking / text /
 * tool_use blocks with their deltas) and the same final content blocks.
 * And the request mapping (anthropic_to_chat) for what agent clients send:
 * system turns mid-conversation (in place, or folded), thinking adaptive,
 * output_config effort and format, cache_control on every kind of block,
 * and the 400s of malformed forms. */
#include "test.h"

#include "src/api/anthropic.h"
#include "src/api/chatout.h"
#include "src/api/errors.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <string.h>

/* The events of one answer: a compact trace (one word per event, runs of
 * the same delta merged) and the concatenated payload of each delta kind. */
struct trace {
    char seq[1024];
    char last[64];
    char thinking[512], text[512], json[512], signature[64];
    char tool_id[64];
    int bad_index;           /* events whose index is not the open block's */
    int open_index;
};

static void cat(char *dst, size_t cap, const char *s)
{
    if (strlen(dst) + strlen(s) < cap)
        strcat(dst, s);
}

static void on_event(void *user, const char *name, cJSON *data)
{
    struct trace *t = user;
    char word[96];
    const char *type = cJSON_GetObjectItem(data, "type")->valuestring;
    int index = cJSON_GetObjectItem(data, "index")->valueint;
    if (strcmp(type, name) != 0)
        t->bad_index++;
    if (!strcmp(name, "content_block_start")) {
        const cJSON *b = cJSON_GetObjectItem(data, "content_block");
        const char *bt = cJSON_GetObjectItem(b, "type")->valuestring;
        snprintf(word, sizeof word, "start:%s", bt);
        if (!strcmp(bt, "tool_use"))
            snprintf(t->tool_id, sizeof t->tool_id, "%s", cJSON_GetObjectItem(b, "id")->valuestring);
        t->open_index = index;
    } else if (!strcmp(name, "content_block_delta")) {
        const cJSON *d = cJSON_GetObjectItem(data, "delta");
        const char *dt = cJSON_GetObjectItem(d, "type")->valuestring;
        snprintf(word, sizeof word, "%s", dt);
        if (!strcmp(dt, "thinking_delta"))
            cat(t->thinking, sizeof t->thinking, cJSON_GetObjectItem(d, "thinking")->valuestring);
        else if (!strcmp(dt, "text_delta"))
            cat(t->text, sizeof t->text, cJSON_GetObjectItem(d, "text")->valuestring);
        else if (!strcmp(dt, "input_json_delta"))
            cat(t->json, sizeof t->json, cJSON_GetObjectItem(d, "partial_json")->valuestring);
        else
            cat(t->signature, sizeof t->signature, cJSON_GetObjectItem(d, "signature")->valuestring);
    } else {
        snprintf(word, sizeof word, "stop");
    }
    if (index != t->open_index)
        t->bad_index++;
    if (strcmp(word, t->last) != 0) {
        if (t->seq[0])
            cat(t->seq, sizeof t->seq, " ");
        cat(t->seq, sizeof t->seq, word);
    }
    snprintf(t->last, sizeof t->last, "%.*s", (int)sizeof t->last - 1, word);
    cJSON_Delete(data);
}

static const char *weather_tools =
    "[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"parameters\":"
    "{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\"},\"days\":{\"type\":\"integer\"}}}}}]";

/* raw through chatout (Qwen3 hermes calls and <think>) into blocks, in
 * chunks of `chunk` bytes (0: whole); the trace in t, the content returned
 * (caller deletes). */
static cJSON *run(const char *raw, bool starts_open, size_t chunk, struct trace *t)
{
    struct chatout_params cp = chatout_default_params();
    cp.rfmt = REASONING_THINK;
    cp.starts_open = starts_open;
    cp.tools = true;
    cp.tp.fmt = TOOLS_FMT_HERMES;
    cp.tp.tools_json = weather_tools;
    cp.tp.id_seed = 42;
    struct chatout *o = chatout_new(&cp);
    memset(t, 0, sizeof *t);
    struct anthropic_blocks *b = anthropic_blocks_new(on_event, t);
    size_t n = strlen(raw), step = chunk ? chunk : n;
    for (size_t i = 0; i < n; i += step)
        chatout_feed(o, raw + i, i + step > n ? n - i : step, true, anthropic_blocks_delta, b);
    chatout_finish(o, anthropic_blocks_delta, b);
    anthropic_blocks_end(b);
    cJSON *content = cJSON_Duplicate(anthropic_blocks_content(b), true);
    /* events or not, the content is the same */
    struct anthropic_blocks *quiet = anthropic_blocks_new(NULL, NULL);
    struct chatout *o2 = chatout_new(&cp);
    chatout_feed(o2, raw, n, true, anthropic_blocks_delta, quiet);
    chatout_finish(o2, anthropic_blocks_delta, quiet);
    anthropic_blocks_end(quiet);
    if (!cJSON_Compare(content, anthropic_blocks_content(quiet), true))
        t->bad_index += 1000;
    anthropic_blocks_free(quiet);
    chatout_free(o2);
    anthropic_blocks_free(b);
    chatout_free(o);
    return content;
}

static const size_t chunkings[] = { 1, 2, 5, 13, 0 };

/* Reasoning (opened by the template), whitespace, then a call: a thinking
 * block closed by a signature_delta, no text block, a tool_use block. */
TEST(anthropic_blocks_thinking_then_tool_use)
{
    const char *raw = "The user wants Paris weather.\n</think>\n\n<tool_call>\n{\"name\": \"get_weather\", "
                      "\"arguments\": {\"city\": \"Paris\", \"days\": \"2\"}}\n</tool_call>";
    for (size_t k = 0; k < sizeof chunkings / sizeof chunkings[0]; k++) {
        struct trace t;
        cJSON *c = run(raw, true, chunkings[k], &t);
        CHECK_STR_EQ(t.seq, "start:thinking thinking_delta signature_delta stop start:tool_use "
                            "input_json_delta stop");
        CHECK_EQ(t.bad_index, 0);
        CHECK_STR_EQ(t.thinking, "The user wants Paris weather.");
        CHECK_STR_EQ(t.signature, "");
        CHECK_STR_EQ(t.json, "{\"city\":\"Paris\",\"days\":2}");
        CHECK_EQ(cJSON_GetArraySize(c), 2);
        const cJSON *th = cJSON_GetArrayItem(c, 0), *tu = cJSON_GetArrayItem(c, 1);
        CHECK_STR_EQ(cJSON_GetObjectItem(th, "type")->valuestring, "thinking");
        CHECK_STR_EQ(cJSON_GetObjectItem(th, "thinking")->valuestring, "The user wants Paris weather.");
        CHECK(cJSON_IsString(cJSON_GetObjectItem(th, "signature")));
        CHECK_STR_EQ(cJSON_GetObjectItem(tu, "type")->valuestring, "tool_use");
        CHECK_STR_EQ(cJSON_GetObjectItem(tu, "name")->valuestring, "get_weather");
        const char *id = cJSON_GetObjectItem(tu, "id")->valuestring;
        CHECK(!strncmp(id, "toolu_", 6) && strlen(id) == 6 + 24);
        CHECK_STR_EQ(id, t.tool_id);
        const cJSON *in = cJSON_GetObjectItem(tu, "input");
        CHECK(cJSON_IsObject(in));
        CHECK_STR_EQ(cJSON_GetObjectItem(in, "city")->valuestring, "Paris");
        CHECK_EQ(cJSON_GetObjectItem(in, "days")->valueint, 2);
        cJSON_Delete(c);
    }
}

/* Text before a call, then a second call: text, tool_use, tool_use. */
TEST(anthropic_blocks_text_then_two_calls)
{
    const char *raw = "Checking both.\n<tool_call>{\"name\":\"get_weather\",\"arguments\":{\"city\":\"Oslo\"}}</tool_call>\n"
                      "<tool_call>{\"name\":\"get_weather\",\"arguments\":{\"city\":\"Rome\"}}</tool_call>";
    for (size_t k = 0; k < sizeof chunkings / sizeof chunkings[0]; k++) {
        struct trace t;
        cJSON *c = run(raw, false, chunkings[k], &t);
        CHECK_STR_EQ(t.seq, "start:text text_delta stop start:tool_use input_json_delta stop "
                            "start:tool_use input_json_delta stop");
        CHECK_EQ(t.bad_index, 0);
        CHECK_EQ(cJSON_GetArraySize(c), 3);
        CHECK(!strncmp(cJSON_GetObjectItem(cJSON_GetArrayItem(c, 0), "text")->valuestring, "Checking both.", 14));
        CHECK_STR_EQ(t.json, "{\"city\":\"Oslo\"}{\"city\":\"Rome\"}");
        const cJSON *a = cJSON_GetArrayItem(c, 1), *b = cJSON_GetArrayItem(c, 2);
        CHECK_STR_EQ(cJSON_GetObjectItem(cJSON_GetObjectItem(b, "input"), "city")->valuestring, "Rome");
        CHECK(strcmp(cJSON_GetObjectItem(a, "id")->valuestring, cJSON_GetObjectItem(b, "id")->valuestring) != 0);
        cJSON_Delete(c);
    }
}

/* Reasoning then an answer: thinking block, then a text block with it. */
TEST(anthropic_blocks_thinking_then_text)
{
    const char *raw = "<think>Short.</think>\n\nOnce upon a time.";
    for (size_t k = 0; k < sizeof chunkings / sizeof chunkings[0]; k++) {
        struct trace t;
        cJSON *c = run(raw, false, chunkings[k], &t);
        CHECK_STR_EQ(t.seq, "start:thinking thinking_delta signature_delta stop start:text text_delta stop");
        CHECK_EQ(t.bad_index, 0);
        CHECK_STR_EQ(t.thinking, "Short.");
        CHECK_STR_EQ(cJSON_GetObjectItem(cJSON_GetArrayItem(c, 1), "text")->valuestring, t.text);
        CHECK(strstr(t.text, "Once upon a time.") != NULL);
        cJSON_Delete(c);
    }
}

/* No output (or only whitespace) still gives one text block. */
TEST(anthropic_blocks_empty_answer)
{
    const char *raws[] = { "", "\n \n" };
    for (int i = 0; i < 2; i++) {
        struct trace t;
        cJSON *c = run(raws[i], false, 1, &t);
        CHECK_STR_EQ(t.seq, i ? "start:text text_delta stop" : "start:text stop");
        CHECK_EQ(cJSON_GetArraySize(c), 1);
        CHECK_STR_EQ(cJSON_GetObjectItem(cJSON_GetArrayItem(c, 0), "text")->valuestring, raws[i]);
        cJSON_Delete(c);
    }
}

// ---- request mapping ----------------------------------------------------------

/* The translated request of a JSON body, or NULL (e says why). */
static cJSON *to_chat(const char *body, bool fold, int *n_system, struct api_error *e)
{
    cJSON *root = cJSON_Parse(body);
    if (!root)
        return NULL;
    cJSON *req = anthropic_to_chat(root, fold, n_system, e);
    cJSON_Delete(root);
    return req;
}

static const char *msg_field(const cJSON *req, int i, const char *key)
{
    const cJSON *v = cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(req, "messages"), i), key);
    return cJSON_IsString(v) ? v->valuestring : "";
}

/* Claude Code's shape: top-level system blocks with cache_control, a user
 * turn, a system turn after it, another user turn. In place the system turn
 * keeps its position; folded it joins the first system message. */
TEST(anthropic_to_chat_system_turns)
{
    const char *body =
        "{\"model\":\"claude-x\",\"max_tokens\":64000,"
        "\"system\":[{\"type\":\"text\",\"text\":\"You are an agent.\",\"cache_control\":{\"type\":\"ephemeral\"}}],"
        "\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"hello\","
        "\"cache_control\":{\"type\":\"ephemeral\",\"ttl\":\"1h\"}}]},"
        "{\"role\":\"system\",\"content\":\"Agent types: none.\"},"
        "{\"role\":\"user\",\"content\":\"go on\"}]}";
    struct api_error e = { 0 };
    int n = -1;
    cJSON *req = to_chat(body, false, &n, &e);
    CHECK(req != NULL);
    if (!req)
        return;
    CHECK_EQ(n, 1);
    CHECK_EQ(cJSON_GetArraySize(cJSON_GetObjectItem(req, "messages")), 4);
    CHECK_STR_EQ(msg_field(req, 0, "role"), "system");
    CHECK_STR_EQ(msg_field(req, 0, "content"), "You are an agent.");
    CHECK_STR_EQ(msg_field(req, 1, "content"), "hello");
    CHECK_STR_EQ(msg_field(req, 2, "role"), "system");
    CHECK_STR_EQ(msg_field(req, 2, "content"), "Agent types: none.");
    CHECK_STR_EQ(msg_field(req, 3, "role"), "user");
    cJSON_Delete(req);

    req = to_chat(body, true, &n, &e);
    CHECK(req != NULL);
    if (!req)
        return;
    CHECK_EQ(n, 1);
    CHECK_EQ(cJSON_GetArraySize(cJSON_GetObjectItem(req, "messages")), 3);
    CHECK_STR_EQ(msg_field(req, 0, "content"), "You are an agent.\n\nAgent types: none.");
    CHECK_STR_EQ(msg_field(req, 1, "role"), "user");
    CHECK_STR_EQ(msg_field(req, 2, "content"), "go on");
    cJSON_Delete(req);

    /* no top-level system: folding creates the system message in front */
    req = to_chat("{\"messages\":[{\"role\":\"user\",\"content\":\"a\"},"
                  "{\"role\":\"system\",\"content\":[{\"type\":\"text\",\"text\":\"s\"}]}]}",
                  true, &n, &e);
    CHECK(req != NULL);
    if (!req)
        return;
    CHECK_STR_EQ(msg_field(req, 0, "role"), "system");
    CHECK_STR_EQ(msg_field(req, 0, "content"), "s");
    CHECK_STR_EQ(msg_field(req, 1, "content"), "a");
    cJSON_Delete(req);
}

/* thinking adaptive leaves the template's default (no kwarg, no budget);
 * output_config.effort maps to reasoning_effort unless thinking is off;
 * output_config.format (and the beta output_format) to response_format. */
TEST(anthropic_to_chat_thinking_and_output_config)
{
    struct api_error e = { 0 };
    int n;
    cJSON *req = to_chat("{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],"
                         "\"thinking\":{\"type\":\"adaptive\"},\"output_config\":{\"effort\":\"max\"},"
                         "\"context_management\":{\"edits\":[{\"type\":\"clear_thinking_20251015\",\"keep\":\"all\"}]}}",
                         false, &n, &e);
    CHECK(req != NULL);
    if (!req)
        return;
    CHECK(cJSON_GetObjectItem(req, "enable_thinking") == NULL);
    CHECK(cJSON_GetObjectItem(req, "thinking_budget") == NULL);
    CHECK_STR_EQ(cJSON_GetObjectItem(req, "reasoning_effort")->valuestring, "high");
    CHECK(cJSON_GetObjectItem(req, "response_format") == NULL);
    cJSON_Delete(req);

    req = to_chat("{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],"
                  "\"thinking\":{\"type\":\"disabled\"},\"output_config\":{\"effort\":\"low\","
                  "\"format\":{\"type\":\"json_schema\",\"schema\":{\"type\":\"object\"}}}}",
                  false, &n, &e);
    CHECK(req != NULL);
    if (!req)
        return;
    CHECK(cJSON_IsFalse(cJSON_GetObjectItem(req, "enable_thinking")));
    CHECK(cJSON_GetObjectItem(req, "reasoning_effort") == NULL);
    const cJSON *rf = cJSON_GetObjectItem(req, "response_format");
    CHECK_STR_EQ(cJSON_GetObjectItem(rf, "type")->valuestring, "json_schema");
    CHECK_STR_EQ(cJSON_GetObjectItem(cJSON_GetObjectItem(cJSON_GetObjectItem(rf, "json_schema"), "schema"),
                                     "type")->valuestring, "object");
    cJSON_Delete(req);

    req = to_chat("{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],"
                  "\"output_format\":{\"type\":\"json_schema\",\"schema\":{\"type\":\"string\"}}}",
                  false, &n, &e);
    CHECK(req != NULL && cJSON_GetObjectItem(req, "response_format") != NULL);
    cJSON_Delete(req);

    req = to_chat("{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],"
                  "\"thinking\":{\"type\":\"enabled\",\"budget_tokens\":1024},\"output_config\":{\"effort\":\"medium\"}}",
                  false, &n, &e);
    CHECK(req != NULL);
    if (!req)
        return;
    CHECK(cJSON_IsTrue(cJSON_GetObjectItem(req, "enable_thinking")));
    CHECK_EQ(cJSON_GetObjectItem(req, "thinking_budget")->valueint, 1024);
    CHECK_STR_EQ(cJSON_GetObjectItem(req, "reasoning_effort")->valuestring, "medium");
    cJSON_Delete(req);
}

/* Malformed forms are a 400 naming the field, never a crash. */
TEST(anthropic_to_chat_bad_forms)
{
    static const struct { const char *extra, *param; } cases[] = {
        { "\"thinking\":{\"type\":\"sometimes\"}", "thinking.type" },
        { "\"thinking\":\"adaptive\"", "thinking" },
        { "\"output_config\":[]", "output_config" },
        { "\"output_config\":{\"effort\":\"extreme\"}", "output_config.effort" },
        { "\"output_config\":{\"effort\":3}", "output_config.effort" },
        { "\"output_config\":{\"format\":{\"type\":\"json_schema\"}}", "output_config.format" },
        { "\"output_config\":{\"format\":{\"type\":\"xml\",\"schema\":{}}}", "output_config.format" },
        { "\"output_format\":\"json\"", "output_format" },
        { "\"messages\":[{\"role\":\"system\",\"content\":[{\"type\":\"image\"}]}]", "messages[0].content" },
        { "\"messages\":[{\"role\":\"system\",\"content\":7}]", "messages[0].content" },
        { "\"messages\":[{\"role\":\"developer\",\"content\":\"x\"}]", "messages[0]" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char body[512];
        bool own_messages = strstr(cases[i].extra, "\"messages\"") != NULL;
        snprintf(body, sizeof body, "{%s%s%s}",
                 own_messages ? "" : "\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]",
                 own_messages ? "" : ",", cases[i].extra);
        struct api_error e = { 0 };
        int n;
        cJSON *req = to_chat(body, false, &n, &e);
        CHECK(req == NULL);
        cJSON_Delete(req);
        CHECK_EQ(e.status, 400);
        CHECK_STR_EQ(e.param, cases[i].param);
    }
}
