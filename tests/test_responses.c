/* test_responses.c - the Responses API pieces that run without a server:
 * the request translation (input items -> chat messages, flat function
 * tools, text.format, errors naming the field), the output items and their
 * stream events from recorded raw model outputs in several chunkings, and
 * the bounded LRU store. */
#include "test.h"

#include "src/api/chatout.h"
#include "src/api/responses.h"
#include "src/api/responses_out.h"
#include "src/api/responses_store.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// ---- request translation --------------------------------------------------------

/* Translate body; the chat request (caller deletes) or NULL with e set. */
static cJSON *translate(const char *body, const char *prev, struct api_error *e, cJSON **conv)
{
    cJSON *root = cJSON_Parse(body), *p = prev ? cJSON_Parse(prev) : NULL;
    cJSON *chat = NULL, *c = NULL, *items = NULL;
    int rc = root ? responses_request(root, p, &chat, &c, &items, e) : -1;
    cJSON_Delete(root);
    cJSON_Delete(p);
    cJSON_Delete(items);
    if (conv)
        *conv = c;
    else
        cJSON_Delete(c);
    return rc == 0 ? chat : NULL;
}

static const char *str(const cJSON *o, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsString(v) ? v->valuestring : "(none)";
}

TEST(responses_request_string_input_and_instructions)
{
    struct api_error e;
    cJSON *chat = translate("{\"model\":\"m\",\"instructions\":\"Be brief.\",\"input\":\"Hi\","
                            "\"max_output_tokens\":7,\"temperature\":0.5,\"stream\":true,"
                            "\"reasoning\":{\"effort\":\"low\"}}", NULL, &e, NULL);
    CHECK(chat);
    const cJSON *msgs = cJSON_GetObjectItem(chat, "messages");
    CHECK_EQ(cJSON_GetArraySize(msgs), 2);
    CHECK_STR_EQ(str(cJSON_GetArrayItem(msgs, 0), "role"), "system");
    CHECK_STR_EQ(str(cJSON_GetArrayItem(msgs, 0), "content"), "Be brief.");
    CHECK_STR_EQ(str(cJSON_GetArrayItem(msgs, 1), "role"), "user");
    CHECK_STR_EQ(str(cJSON_GetArrayItem(msgs, 1), "content"), "Hi");
    CHECK_EQ(cJSON_GetObjectItem(chat, "max_tokens")->valueint, 7);
    CHECK_NEAR(cJSON_GetObjectItem(chat, "temperature")->valuedouble, 0.5, 1e-9);
    CHECK(cJSON_IsTrue(cJSON_GetObjectItem(chat, "stream")));
    CHECK_STR_EQ(str(chat, "reasoning_effort"), "low");
    cJSON_Delete(chat);
}

/* A tool round trip as clients send it back: developer messages first
 * (merged into one system turn), reasoning + text + call as one assistant
 * turn, the output as a tool turn with the call's name. */
TEST(responses_request_items_round_trip)
{
    struct api_error e;
    cJSON *conv = NULL;
    cJSON *chat = translate(
        "{\"input\":["
        "{\"type\":\"message\",\"role\":\"developer\",\"content\":[{\"type\":\"input_text\",\"text\":\"A\"}]},"
        "{\"type\":\"message\",\"role\":\"developer\",\"content\":[{\"type\":\"input_text\",\"text\":\"B\"}]},"
        "{\"role\":\"user\",\"content\":\"weather?\"},"
        "{\"type\":\"reasoning\",\"id\":\"rs_1\",\"summary\":[{\"type\":\"summary_text\",\"text\":\"think\"}]},"
        "{\"type\":\"message\",\"role\":\"assistant\",\"content\":[{\"type\":\"output_text\",\"text\":\"Checking.\"}]},"
        "{\"type\":\"function_call\",\"call_id\":\"call_1\",\"name\":\"get_weather\",\"arguments\":\"{\\\"city\\\":\\\"Oslo\\\"}\"},"
        "{\"type\":\"function_call_output\",\"call_id\":\"call_1\",\"output\":\"sunny\"}],"
        "\"tools\":[{\"type\":\"function\",\"name\":\"get_weather\",\"parameters\":{\"type\":\"object\"},\"strict\":true},"
        "{\"type\":\"namespace\",\"name\":\"ns\",\"tools\":[{\"type\":\"function\",\"name\":\"inner\"}]}],"
        "\"tool_choice\":{\"type\":\"function\",\"name\":\"get_weather\"},\"parallel_tool_calls\":false}",
        NULL, &e, &conv);
    CHECK_MSG(chat, "%s", e.message);
    const cJSON *msgs = cJSON_GetObjectItem(chat, "messages");
    CHECK_EQ(cJSON_GetArraySize(msgs), 4);
    const cJSON *sys = cJSON_GetArrayItem(msgs, 0), *asst = cJSON_GetArrayItem(msgs, 2),
                *tool = cJSON_GetArrayItem(msgs, 3);
    CHECK_STR_EQ(str(sys, "role"), "system");
    CHECK_STR_EQ(str(sys, "content"), "A\n\nB");
    CHECK_STR_EQ(str(asst, "role"), "assistant");
    CHECK_STR_EQ(str(asst, "reasoning_content"), "think");
    const cJSON *part = cJSON_GetArrayItem(cJSON_GetObjectItem(asst, "content"), 0);
    CHECK_STR_EQ(str(part, "text"), "Checking.");
    const cJSON *call = cJSON_GetArrayItem(cJSON_GetObjectItem(asst, "tool_calls"), 0);
    CHECK_STR_EQ(str(call, "id"), "call_1");
    CHECK_STR_EQ(str(cJSON_GetObjectItem(call, "function"), "name"), "get_weather");
    CHECK_STR_EQ(str(tool, "role"), "tool");
    CHECK_STR_EQ(str(tool, "tool_call_id"), "call_1");
    CHECK_STR_EQ(str(tool, "name"), "get_weather");
    const cJSON *tools = cJSON_GetObjectItem(chat, "tools");
    CHECK_EQ(cJSON_GetArraySize(tools), 2);
    CHECK_STR_EQ(str(cJSON_GetObjectItem(cJSON_GetArrayItem(tools, 1), "function"), "name"), "inner");
    CHECK(cJSON_IsTrue(cJSON_GetObjectItem(cJSON_GetObjectItem(cJSON_GetArrayItem(tools, 0), "function"), "strict")));
    CHECK_STR_EQ(str(cJSON_GetObjectItem(cJSON_GetObjectItem(chat, "tool_choice"), "function"), "name"),
                 "get_weather");
    CHECK(cJSON_IsFalse(cJSON_GetObjectItem(chat, "parallel_tool_calls")));
    /* the conversation kept for chaining has no instructions but the
     * developer turns, as sent */
    CHECK_EQ(cJSON_GetArraySize(conv), 5);
    cJSON_Delete(conv);
    cJSON_Delete(chat);
}

/* previous_response_id: the stored conversation, then the new input. */
TEST(responses_request_chained)
{
    struct api_error e;
    cJSON *chat = translate("{\"input\":\"and then?\",\"instructions\":\"new\"}",
                            "[{\"role\":\"user\",\"content\":\"one\"},{\"role\":\"assistant\",\"content\":\"two\"}]",
                            &e, NULL);
    CHECK(chat);
    const cJSON *msgs = cJSON_GetObjectItem(chat, "messages");
    CHECK_EQ(cJSON_GetArraySize(msgs), 4);
    CHECK_STR_EQ(str(cJSON_GetArrayItem(msgs, 0), "content"), "new");
    CHECK_STR_EQ(str(cJSON_GetArrayItem(msgs, 2), "content"), "two");
    CHECK_STR_EQ(str(cJSON_GetArrayItem(msgs, 3), "content"), "and then?");
    cJSON_Delete(chat);
}

TEST(responses_request_text_format)
{
    struct api_error e;
    cJSON *chat = translate("{\"input\":\"x\",\"text\":{\"format\":{\"type\":\"json_schema\",\"name\":\"p\","
                            "\"schema\":{\"type\":\"object\"},\"strict\":true}}}", NULL, &e, NULL);
    CHECK(chat);
    const cJSON *rf = cJSON_GetObjectItem(chat, "response_format");
    CHECK_STR_EQ(str(rf, "type"), "json_schema");
    CHECK_STR_EQ(str(cJSON_GetObjectItem(rf, "json_schema"), "name"), "p");
    CHECK(cJSON_IsObject(cJSON_GetObjectItem(cJSON_GetObjectItem(rf, "json_schema"), "schema")));
    cJSON_Delete(chat);
    chat = translate("{\"input\":\"x\",\"text\":{\"format\":{\"type\":\"text\"}}}", NULL, &e, NULL);
    CHECK(chat && !cJSON_GetObjectItem(chat, "response_format"));
    cJSON_Delete(chat);
}

/* Hand-broken requests: each a 400 naming the field. */
TEST(responses_request_errors_name_the_field)
{
    static const struct { const char *body, *param, *needle; } cases[] = {
        { "{\"input\":\"x\",\"tools\":[{\"type\":\"web_search\"}]}", "tools[0].type", "web_search" },
        { "{\"input\":\"x\",\"tools\":[{\"type\":\"function\",\"name\":\"f\"},{\"type\":\"image_generation\"}]}",
          "tools[1].type", "image_generation" },
        { "{\"input\":\"x\",\"tools\":[{\"type\":\"code_interpreter\"}]}", "tools[0].type", "code_interpreter" },
        { "{\"input\":\"x\",\"tools\":[{\"type\":\"function\"}]}", "tools[0]", "name" },
        { "{\"input\":\"x\",\"tools\":[{\"type\":\"nope\"}]}", "tools[0].type", "nope" },
        { "{}", "input", "required" },
        { "{\"input\":[]}", "input", "required" },
        { "{\"input\":42}", "input", "string" },
        { "{\"input\":[{\"type\":\"item_reference\",\"id\":\"x\"}]}", "input[0]", "item_reference" },
        { "{\"input\":[{\"type\":\"message\",\"role\":\"tool\",\"content\":\"x\"}]}", "input[0]", "role" },
        { "{\"input\":[{\"role\":\"user\",\"content\":[{\"type\":\"input_file\",\"file_id\":\"f\"}]}]}",
          "input[0].content[0]", "input_file" },
        { "{\"input\":[{\"role\":\"user\",\"content\":[{\"type\":\"input_image\",\"file_id\":\"f\"}]}]}",
          "input[0].content[0]", "image_url" },
        { "{\"input\":[{\"type\":\"function_call\",\"name\":\"f\"}]}", "input[0]", "call_id" },
        { "{\"input\":\"x\",\"max_output_tokens\":0}", "max_output_tokens", "positive" },
        { "{\"input\":\"x\",\"max_output_tokens\":1.5}", "max_output_tokens", "positive" },
        { "{\"input\":\"x\",\"text\":{\"format\":{\"type\":\"json_schema\"}}}", "text.format.schema", "schema" },
        { "{\"input\":\"x\",\"text\":{\"format\":{\"type\":\"yaml\"}}}", "text.format.type", "yaml" },
        { "{\"input\":\"x\",\"tools\":[{\"type\":\"function\",\"name\":\"f\"}],\"tool_choice\":{\"type\":\"function\",\"name\":\"g\"}}",
          "tool_choice.name", "'g'" },
        { "{\"input\":\"x\",\"tool_choice\":{\"type\":\"web_search\"}}", "tool_choice.type", "web_search" },
        { "{\"input\":\"x\",\"background\":true}", "background", "background" },
        { "{\"input\":\"x\",\"instructions\":5}", "instructions", "string" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct api_error e = { 0 };
        cJSON *chat = translate(cases[i].body, NULL, &e, NULL);
        CHECK_MSG(!chat, "case %zu accepted", i);
        CHECK_EQ(e.status, 400);
        CHECK_STR_EQ(e.param, cases[i].param);
        CHECK_MSG(strstr(e.message, cases[i].needle), "case %zu: %s", i, e.message);
    }
}

// ---- output items and events ------------------------------------------------------

struct events {
    char seq[2048];
    char last[64];
    char text[256], args[256], summary[256];
    int bad;                 /* events whose output_index or item_id is not the open item's */
    int index;
    char item_id[96];
};

static void cat(char *dst, size_t cap, const char *s)
{
    if (strlen(dst) + strlen(s) < cap)
        strcat(dst, s);
}

static void on_event(void *user, cJSON *ev)
{
    struct events *t = user;
    const char *type = str(ev, "type");
    const cJSON *oi = cJSON_GetObjectItem(ev, "output_index");
    const char *word = strncmp(type, "response.", 9) ? type : type + 9;
    if (!strcmp(type, "response.output_item.added")) {
        t->index = oi->valueint;
        snprintf(t->item_id, sizeof t->item_id, "%s", str(cJSON_GetObjectItem(ev, "item"), "id"));
    }
    if (!cJSON_IsNumber(oi) || oi->valueint != t->index)
        t->bad++;
    const cJSON *id = cJSON_GetObjectItem(ev, "item_id");
    if (id && strcmp(id->valuestring, t->item_id) != 0)
        t->bad++;
    if (!strcmp(type, "response.output_text.delta"))
        cat(t->text, sizeof t->text, str(ev, "delta"));
    else if (!strcmp(type, "response.function_call_arguments.delta"))
        cat(t->args, sizeof t->args, str(ev, "delta"));
    else if (!strcmp(type, "response.reasoning_summary_text.delta"))
        cat(t->summary, sizeof t->summary, str(ev, "delta"));
    if (strcmp(word, t->last) != 0) {
        if (t->seq[0])
            cat(t->seq, sizeof t->seq, " ");
        cat(t->seq, sizeof t->seq, word);
    }
    snprintf(t->last, sizeof t->last, "%s", word);
    cJSON_Delete(ev);
}

static const char *weather_tools =
    "[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"parameters\":"
    "{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\"}}}}}]";

/* raw (Qwen3 hermes calls, <think>) through chatout into items in chunks of
 * `chunk` bytes (0: whole); the events in t, the items returned (caller
 * deletes); the same items come without events. */
static cJSON *run(const char *raw, bool starts_open, size_t chunk, struct events *t)
{
    struct chatout_params cp = chatout_default_params();
    cp.rfmt = REASONING_THINK;
    cp.starts_open = starts_open;
    cp.tools = true;
    cp.tp.fmt = TOOLS_FMT_HERMES;
    cp.tp.tools_json = weather_tools;
    cp.tp.id_seed = 7;
    memset(t, 0, sizeof *t);
    t->index = -1;
    cJSON *items[2] = { NULL, NULL };
    for (int pass = 0; pass < 2; pass++) {
        struct chatout *o = chatout_new(&cp);
        struct responses_out *ro = responses_out_new("abc", pass == 0 ? on_event : NULL, t);
        size_t n = strlen(raw), step = chunk ? chunk : n;
        for (size_t i = 0; i < n; i += step)
            chatout_feed(o, raw + i, i + step > n ? n - i : step, true, responses_out_delta, ro);
        chatout_finish(o, responses_out_delta, ro);
        responses_out_end(ro);
        items[pass] = cJSON_Duplicate(responses_out_items(ro), true);
        responses_out_free(ro);
        chatout_free(o);
    }
    if (!cJSON_Compare(items[0], items[1], true))
        t->bad += 1000;
    cJSON_Delete(items[1]);
    return items[0];
}

static const size_t chunkings[] = { 1, 3, 11, 0 };

TEST(responses_out_reasoning_text_call)
{
    const char *raw = "Paris, then.\n</think>\n\nLet me check.\n<tool_call>\n{\"name\": \"get_weather\", "
                      "\"arguments\": {\"city\": \"Paris\"}}\n</tool_call>";
    for (size_t k = 0; k < sizeof chunkings / sizeof chunkings[0]; k++) {
        struct events t;
        cJSON *items = run(raw, true, chunkings[k], &t);
        CHECK_STR_EQ(t.seq,
                     "output_item.added reasoning_summary_part.added reasoning_summary_text.delta "
                     "reasoning_summary_text.done reasoning_summary_part.done output_item.done "
                     "output_item.added content_part.added output_text.delta output_text.done "
                     "content_part.done output_item.done output_item.added "
                     "function_call_arguments.delta function_call_arguments.done output_item.done");
        CHECK_EQ(t.bad, 0);
        CHECK_STR_EQ(t.summary, "Paris, then.");
        CHECK_EQ(cJSON_GetArraySize(items), 3);
        const cJSON *rs = cJSON_GetArrayItem(items, 0), *msg = cJSON_GetArrayItem(items, 1),
                    *fc = cJSON_GetArrayItem(items, 2);
        CHECK_STR_EQ(str(rs, "type"), "reasoning");
        CHECK_STR_EQ(str(rs, "id"), "rs_abc_0");
        CHECK_STR_EQ(str(cJSON_GetArrayItem(cJSON_GetObjectItem(rs, "summary"), 0), "text"), "Paris, then.");
        CHECK_STR_EQ(str(msg, "type"), "message");
        CHECK_STR_EQ(str(msg, "role"), "assistant");
        const char *text = str(cJSON_GetArrayItem(cJSON_GetObjectItem(msg, "content"), 0), "text");
        CHECK(!strncmp(text, "Let me check.", 13));
        CHECK_STR_EQ(text, t.text);
        CHECK_STR_EQ(str(fc, "type"), "function_call");
        CHECK_STR_EQ(str(fc, "id"), "fc_abc_2");
        CHECK_STR_EQ(str(fc, "name"), "get_weather");
        CHECK(!strncmp(str(fc, "call_id"), "call_", 5));
        CHECK_STR_EQ(str(fc, "arguments"), "{\"city\":\"Paris\"}");
        CHECK_STR_EQ(t.args, "{\"city\":\"Paris\"}");
        cJSON_Delete(items);
    }
}

/* Whitespace alone is no message; an answer with nothing gets an empty one. */
TEST(responses_out_empty_and_whitespace)
{
    struct events t;
    cJSON *items = run("<tool_call>{\"name\":\"get_weather\",\"arguments\":{}}</tool_call>\n", false, 0, &t);
    CHECK_EQ(cJSON_GetArraySize(items), 1);
    CHECK_STR_EQ(str(cJSON_GetArrayItem(items, 0), "type"), "function_call");
    cJSON_Delete(items);
    items = run("", false, 0, &t);
    CHECK_EQ(cJSON_GetArraySize(items), 1);
    CHECK_STR_EQ(str(cJSON_GetArrayItem(items, 0), "type"), "message");
    CHECK_STR_EQ(t.seq, "output_item.added content_part.added output_text.done content_part.done "
                        "output_item.done");
    cJSON_Delete(items);
}

// ---- store ----------------------------------------------------------------------------

TEST(responses_store_lru_and_limits)
{
    struct responses_store *s = responses_store_new(2, 1 << 20);
    CHECK(s);
    CHECK_EQ(responses_store_put(s, "a", "{\"id\":\"a\"}", "[]", "[]"), 0);
    CHECK_EQ(responses_store_put(s, "b", "{\"id\":\"b\"}", "[]", "[]"), 0);
    char *r = NULL;
    CHECK_EQ(responses_store_get(s, "a", &r, NULL, NULL), 0);   /* a is now the most recent */
    CHECK_STR_EQ(r, "{\"id\":\"a\"}");
    free(r);
    CHECK_EQ(responses_store_put(s, "c", "{}", "[1]", "[]"), 0);  /* evicts b */
    CHECK_EQ(responses_store_count(s), 2);
    CHECK_EQ(responses_store_get(s, "b", &r, NULL, NULL), -1);
    CHECK(r == NULL);
    char *conv = NULL;
    CHECK_EQ(responses_store_get(s, "c", NULL, &conv, NULL), 0);
    CHECK_STR_EQ(conv, "[1]");
    free(conv);
    CHECK(responses_store_delete(s, "a"));
    CHECK(!responses_store_delete(s, "a"));
    CHECK_EQ(responses_store_count(s), 1);
    responses_store_free(s);

    /* the byte cap: an entry larger than it is refused, smaller ones push
     * the oldest out */
    s = responses_store_new(100, 600);
    char big[700];
    memset(big, 'x', sizeof big - 1);
    big[sizeof big - 1] = 0;
    CHECK_EQ(responses_store_put(s, "big", big, "[]", "[]"), -1);
    char mid[200];
    memset(mid, 'y', sizeof mid - 1);
    mid[sizeof mid - 1] = 0;
    for (int i = 0; i < 5; i++) {
        char id[16];
        snprintf(id, sizeof id, "m%d", i);
        CHECK_EQ(responses_store_put(s, id, mid, "[]", "[]"), 0);
        CHECK(responses_store_bytes(s) <= 600);
    }
    CHECK(responses_store_count(s) < 5);
    CHECK_EQ(responses_store_get(s, "m4", NULL, NULL, NULL), 0);
    CHECK_EQ(responses_store_get(s, "m0", NULL, NULL, NULL), -1);
    responses_store_free(s);

    s = responses_store_new(0, 1 << 20);   /* --responses-store 0 keeps none */
    CHECK_EQ(responses_store_put(s, "a", "{}", "[]", "[]"), -1);
    responses_store_free(s);
}

/* Calls of server-run (MCP) tools make no item; the server's own mcp_call
 * item comes in output order with its added and done events. */
TEST(responses_out_skipped_calls_and_added_items)
{
    struct chatout_params cp = chatout_default_params();
    cp.rfmt = REASONING_THINK;
    cp.tools = true;
    cp.tp.fmt = TOOLS_FMT_HERMES;
    cp.tp.tools_json = weather_tools;
    cp.tp.id_seed = 7;
    struct events t;
    memset(&t, 0, sizeof t);
    t.index = -1;
    struct chatout *o = chatout_new(&cp);
    struct responses_out *ro = responses_out_new("abc", on_event, &t);
    cJSON *skip = cJSON_Parse("[\"get_weather\"]");
    responses_out_skip_calls(ro, skip);
    cJSON_Delete(skip);
    const char *raw = "<tool_call>{\"name\":\"get_weather\",\"arguments\":{\"city\":\"Oslo\"}}</tool_call>";
    chatout_feed(o, raw, strlen(raw), true, responses_out_delta, ro);
    chatout_finish(o, responses_out_delta, ro);
    responses_out_close(ro);
    CHECK_EQ(cJSON_GetArraySize(responses_out_items(ro)), 0);
    CHECK(!responses_out_has_calls(ro));
    cJSON *item = cJSON_Parse("{\"type\":\"mcp_call\",\"name\":\"get_weather\",\"output\":\"sunny\"}");
    responses_out_add(ro, "mcp", item);
    chatout_free(o);
    o = chatout_new(&cp);   /* the next turn answers */
    chatout_feed(o, "Sunny.", 6, true, responses_out_delta, ro);
    chatout_finish(o, responses_out_delta, ro);
    responses_out_end(ro);
    const cJSON *items = responses_out_items(ro);
    CHECK_EQ(cJSON_GetArraySize(items), 2);
    CHECK_STR_EQ(str(cJSON_GetArrayItem(items, 0), "id"), "mcp_abc_0");
    CHECK_STR_EQ(str(cJSON_GetArrayItem(items, 1), "id"), "msg_abc_1");
    CHECK_STR_EQ(t.seq, "output_item.added output_item.done output_item.added content_part.added "
                        "output_text.delta output_text.done content_part.done output_item.done");
    CHECK_EQ(t.bad, 0);
    responses_out_free(ro);
    chatout_free(o);
}
