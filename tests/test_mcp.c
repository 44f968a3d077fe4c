/* test_mcp.c - the pure parts of the MCP client (src/mcp/mcp_config.h,
 * src/mcp/mcp_proto.h): config files hand-broken field by field, JSON-RPC
 * message classification, the SSE parser fed byte by byte and over its
 * limit, and tool results turned into capped text; then the client
 * (src/mcp/mcp.h) against a small stdio server in Python. Streamable HTTP
 * and the chat tool loop are tested in tests/clients/mcp.test.mjs. */
#include "test.h"

#include "src/mcp/mcp_config.h"
#include "src/mcp/mcp_proto.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

static int parse(const char *text, struct mcp_config **c, char *err, size_t n)
{
    return mcp_config_parse(text, strlen(text), "m.json", c, err, n);
}

TEST(mcp_config_reads_both_transports)
{
    char err[256];
    struct mcp_config *c;
    CHECK(parse("{\"mcpServers\": {\"fs\": {\"command\": \"node\", \"args\": [\"a.js\", \"-v\"], "
                "\"env\": {\"K\": \"V\"}}, \"web\": {\"url\": \"https://x/mcp\", \"headers\": "
                "{\"Authorization\": \"Bearer t\"}}, \"off\": {\"command\": \"x\", \"disabled\": true}}}",
                &c, err, sizeof err) == 0);
    CHECK(c->n_servers == 2);
    CHECK(c->servers[0].transport == MCP_STDIO);
    CHECK_STR_EQ(c->servers[0].command, "node");
    CHECK(c->servers[0].n_args == 2);
    CHECK_STR_EQ(c->servers[0].args[1], "-v");
    CHECK_STR_EQ(c->servers[0].env[0], "K=V");
    CHECK(c->servers[1].transport == MCP_HTTP);
    CHECK_STR_EQ(c->servers[1].url, "https://x/mcp");
    CHECK_STR_EQ(c->servers[1].headers[0], "Authorization: Bearer t");
    mcp_config_free(c);
}

TEST(mcp_config_errors_name_file_and_field)
{
    static const struct { const char *text, *want; } cases[] = {
        { "", "m.json: not valid JSON" },
        { "[]", "'mcpServers' must be an object" },
        { "{\"mcpServers\": []}", "'mcpServers' must be an object" },
        { "{\"mcpServers\": {\"a\": 1}}", "'mcpServers.a' must be an object" },
        { "{\"mcpServers\": {\"a\": {}}}", "'mcpServers.a' needs 'command'" },
        { "{\"mcpServers\": {\"a b\": {\"command\": \"x\"}}}", "'mcpServers.a b': a server name" },
        { "{\"mcpServers\": {\"a\": {\"command\": \"\"}}}", "'mcpServers.a.command' must be a non-empty" },
        { "{\"mcpServers\": {\"a\": {\"command\": \"x\", \"url\": \"http://y\"}}}", "has both" },
        { "{\"mcpServers\": {\"a\": {\"command\": \"x\", \"args\": \"-v\"}}}", "'mcpServers.a.args' must be an array" },
        { "{\"mcpServers\": {\"a\": {\"command\": \"x\", \"args\": [null]}}}", "'mcpServers.a.args[0]' must be a string" },
        { "{\"mcpServers\": {\"a\": {\"command\": \"x\", \"env\": {\"A=B\": \"1\"}}}}", "'mcpServers.a.env.A=B' is not a valid" },
        { "{\"mcpServers\": {\"a\": {\"url\": \"file:///etc\"}}}", "'mcpServers.a.url' must be an http" },
        { "{\"mcpServers\": {\"a\": {\"url\": \"http://x\", \"headers\": {\"X\": \"a\\nb\"}}}}", "'mcpServers.a.headers.X' is not a valid header" },
        { "{\"mcpServers\": {\"a\": {\"type\": \"sse\", \"url\": \"http://x\"}}}", "'mcpServers.a.type' must be" },
        { "{\"mcpServers\": {\"a\": {\"type\": \"http\", \"command\": \"x\"}}}", "'mcpServers.a.url' is required" },
        { "{\"mcpServers\": {\"a\": {\"command\": \"x\", \"cwd\": 3}}}", "'mcpServers.a.cwd' must be a string" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char err[256] = "";
        struct mcp_config *c = (struct mcp_config *)1;
        CHECK(parse(cases[i].text, &c, err, sizeof err) < 0);
        CHECK(c == NULL);
        CHECK_STR_CONTAINS(err, "m.json: ");
        CHECK_STR_CONTAINS(err, cases[i].want);
    }
    char err[256];
    struct mcp_config *c;
    CHECK(mcp_config_load("/nonexistent/mcp.json", &c, err, sizeof err) < 0);
    CHECK_STR_CONTAINS(err, "/nonexistent/mcp.json: cannot open");
}

TEST(mcp_msg_classify_kinds)
{
    static const struct { const char *text; enum mcp_msg_kind kind; long long id; } cases[] = {
        { "{\"jsonrpc\":\"2.0\",\"id\":3,\"result\":{}}", MCP_MSG_RESPONSE, 3 },
        { "{\"jsonrpc\":\"2.0\",\"id\":4,\"error\":{\"code\":-1,\"message\":\"x\"}}", MCP_MSG_RESPONSE, 4 },
        { "{\"jsonrpc\":\"2.0\",\"id\":\"p1\",\"method\":\"ping\"}", MCP_MSG_REQUEST, -1 },
        { "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/tools/list_changed\"}", MCP_MSG_NOTIFICATION, -1 },
        { "{\"jsonrpc\":\"1.0\",\"id\":1,\"result\":{}}", MCP_MSG_INVALID, 1 },
        { "{\"jsonrpc\":\"2.0\",\"id\":1}", MCP_MSG_INVALID, 1 },
        { "{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":1,\"error\":{}}", MCP_MSG_INVALID, 1 },
        { "{\"jsonrpc\":\"2.0\",\"method\":5}", MCP_MSG_INVALID, -1 },
        { "[1]", MCP_MSG_INVALID, -1 },
        { "{\"jsonrpc\":\"2.0\",\"id\":1.5,\"result\":{}}", MCP_MSG_RESPONSE, -1 },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        cJSON *m = cJSON_Parse(cases[i].text);
        int64_t id;
        CHECK(m);
        CHECK(mcp_msg_classify(m, &id) == cases[i].kind);
        if (cases[i].kind != MCP_MSG_INVALID)
            CHECK(id == cases[i].id);
        cJSON_Delete(m);
    }
    char *s = mcp_msg_request(7, "tools/list", NULL);
    CHECK_STR_EQ(s, "{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"tools/list\"}");
    free(s);
    s = mcp_msg_request(-1, "notifications/initialized", NULL);
    CHECK_STR_EQ(s, "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}");
    free(s);
}

struct sse_events {
    char got[8][64];
    int n;
};

static void on_event(void *user, const char *data, size_t len)
{
    struct sse_events *ev = user;
    if (ev->n < 8)
        snprintf(ev->got[ev->n++], sizeof ev->got[0], "%.*s", (int)len, data);
}

TEST(mcp_sse_parses_events_in_any_split)
{
    static const char stream[] = ": comment\r\nevent: message\r\ndata: {\"a\":1}\r\n\r\n"
                                 "id: 5\ndata:x\ndata: y\n\nevent: ping\n\n";
    for (size_t step = 1; step <= sizeof stream; step++) {
        struct mcp_sse p;
        struct sse_events ev = { .n = 0 };
        mcp_sse_init(&p, 1024);
        for (size_t i = 0; i < sizeof stream - 1; i += step) {
            size_t n = sizeof stream - 1 - i < step ? sizeof stream - 1 - i : step;
            CHECK(mcp_sse_feed(&p, stream + i, n, on_event, &ev) == 0);
        }
        mcp_sse_free(&p);
        CHECK(ev.n == 2);
        CHECK_STR_EQ(ev.got[0], "{\"a\":1}");
        CHECK_STR_EQ(ev.got[1], "x\ny");
    }
}

TEST(mcp_sse_refuses_events_over_the_limit)
{
    struct mcp_sse p;
    struct sse_events ev = { .n = 0 };
    mcp_sse_init(&p, 64);
    char line[200];
    memset(line, 'a', sizeof line);
    CHECK(mcp_sse_feed(&p, "data: ", 6, on_event, &ev) == 0);
    CHECK(mcp_sse_feed(&p, line, sizeof line, on_event, &ev) < 0);
    mcp_sse_free(&p);
    /* many short data lines of one event add up too */
    mcp_sse_init(&p, 64);
    int rc = 0;
    for (int i = 0; i < 40 && rc == 0; i++)
        rc = mcp_sse_feed(&p, "data: abc\n", 10, on_event, &ev);
    CHECK(rc < 0);
    CHECK(ev.n == 0);
    mcp_sse_free(&p);
}

TEST(mcp_result_text_joins_parts_and_caps)
{
    cJSON *r = cJSON_Parse("{\"content\":[{\"type\":\"text\",\"text\":\"one\"},"
                           "{\"type\":\"image\",\"data\":\"AAAA\",\"mimeType\":\"image/png\"},"
                           "{\"type\":\"resource\",\"resource\":{\"uri\":\"f://a\",\"text\":\"body\"}},"
                           "{\"type\":\"resource_link\",\"uri\":\"f://b\"}],\"isError\":true}");
    bool is_error = false;
    char *t = mcp_result_text(r, 1000, &is_error);
    CHECK_STR_EQ(t, "one\n[image: image/png, 4 bytes of base64]\nbody\n[resource link: f://b]");
    CHECK(is_error);
    free(t);
    cJSON_Delete(r);
    r = cJSON_Parse("{\"content\":[],\"structuredContent\":{\"v\":1}}");
    t = mcp_result_text(r, 1000, &is_error);
    CHECK_STR_EQ(t, "{\"v\":1}");
    CHECK(!is_error);
    free(t);
    cJSON_Delete(r);
    /* over the cap: cut at a character boundary, with a note */
    r = cJSON_Parse("{\"content\":[{\"type\":\"text\",\"text\":\"ab\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\"}]}");
    t = mcp_result_text(r, 4, &is_error);
    CHECK(!strncmp(t, "ab\xc3\xa9\n", 5));
    CHECK_STR_CONTAINS(t, "truncated");
    free(t);
    t = mcp_result_text(r, 3, &is_error);
    CHECK(!strncmp(t, "ab\n", 3));
    free(t);
    cJSON_Delete(r);
    /* no content at all */
    r = cJSON_Parse("{}");
    t = mcp_result_text(r, 10, &is_error);
    CHECK_STR_EQ(t, "");
    free(t);
    cJSON_Delete(r);
}

// ---- the client against a real stdio server -----------------------------------------------

#include "src/mcp/mcp.h"

#include <pthread.h>
#include <unistd.h>

/* A small MCP server in Python (the build already needs python3): echo,
 * slow (never answers), crash (exits 3). */
static const char mcp_py[] =
    "import sys, json\n"
    "def send(m):\n"
    "    sys.stdout.write(json.dumps(m) + '\\n'); sys.stdout.flush()\n"
    "for line in sys.stdin:\n"
    "    m = json.loads(line)\n"
    "    i = m.get('id'); meth = m.get('method')\n"
    "    if meth == 'initialize':\n"
    "        send({'jsonrpc': '2.0', 'id': i, 'result': {'protocolVersion': '2025-06-18',\n"
    "              'capabilities': {'tools': {}}, 'serverInfo': {'name': 'py', 'version': '1'}}})\n"
    "    elif meth == 'tools/list':\n"
    "        send({'jsonrpc': '2.0', 'id': i, 'result': {'tools': [\n"
    "            {'name': 'echo', 'inputSchema': {'type': 'object'}},\n"
    "            {'name': 'slow', 'inputSchema': {'type': 'object'}},\n"
    "            {'name': 'crash', 'inputSchema': {'type': 'object'}}]}})\n"
    "    elif meth == 'tools/call':\n"
    "        n = m['params']['name']\n"
    "        if n == 'crash': sys.exit(3)\n"
    "        if n == 'echo':\n"
    "            send({'jsonrpc': '2.0', 'id': i, 'result': {'content': [{'type': 'text',\n"
    "                  'text': 'echo ' + json.dumps(m['params']['arguments'])}]}})\n";

struct mcp_wait {
    pthread_mutex_t mu;
    pthread_cond_t cond;
    bool done;
    char text[3][256];
    bool is_error[3];
    int n;
};

static void mcp_test_done(void *user, struct mcp_result *res, int n)
{
    struct mcp_wait *w = user;
    pthread_mutex_lock(&w->mu);
    for (int i = 0; i < n && i < 3; i++) {
        snprintf(w->text[i], sizeof w->text[i], "%s", res[i].text);
        w->is_error[i] = res[i].is_error;
    }
    w->n = n;
    w->done = true;
    pthread_cond_signal(&w->cond);
    pthread_mutex_unlock(&w->mu);
}

static void mcp_test_free(void *m) { mcp_free(m); }

/* Runs calls as one batch and waits for its results. */
static int mcp_test_batch(struct mcp *m, const struct mcp_call *calls, int n, struct mcp_wait *w)
{
    char err[256];
    *w = (struct mcp_wait){ .mu = PTHREAD_MUTEX_INITIALIZER, .cond = PTHREAD_COND_INITIALIZER };
    struct mcp_toolset *ts = mcp_toolset_get(m, NULL, 0, err, sizeof err);
    if (!ts)
        return -1;
    int rc = mcp_call_batch(m, ts, calls, n, mcp_test_done, w, err, sizeof err);
    mcp_toolset_free(ts);
    if (rc < 0)
        return -1;
    pthread_mutex_lock(&w->mu);
    while (!w->done)
        pthread_cond_wait(&w->cond, &w->mu);
    pthread_mutex_unlock(&w->mu);
    return 0;
}

static bool mcp_test_connected(struct mcp *m, int min_restarts)
{
    for (int i = 0; i < 3000; i++) {   /* the test's own deadline bounds this */
        cJSON *s = mcp_servers_json(m);
        const cJSON *x = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(s, "data"), 0);
        const char *st = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(x, "status"));
        int restarts = cJSON_GetObjectItemCaseSensitive(x, "restarts")->valueint;
        bool ok = st && !strcmp(st, "connected") && restarts >= min_restarts;
        cJSON_Delete(s);
        if (ok)
            return true;
        usleep(20 * 1000);
    }
    return false;
}

TEST(mcp_stdio_calls_timeouts_and_restarts)
{
    if (access("/usr/bin/python3", X_OK) != 0) {
        test_skip("no /usr/bin/python3");
        return;
    }
    char err[256];
    char *args[] = { "-u", "-c", (char *)mcp_py };
    struct mcp_server_spec spec = { .name = "py", .transport = MCP_STDIO,
                                    .command = "/usr/bin/python3", .args = args, .n_args = 3 };
    struct mcp_config cfg = { .servers = &spec, .n_servers = 1 };
    struct mcp_params p = mcp_default_params();
    p.tool_timeout_s = 3;   /* only "slow" ever reaches it */
    p.init_timeout_s = 60;
    p.restart_min_s = 0.05;
    p.max_result_bytes = 20;
    struct mcp *m = mcp_new(&cfg, &p, err, sizeof err);
    CHECK(m);
    test_defer(mcp_test_free, m);
    CHECK(mcp_test_connected(m, 0));

    cJSON *tools = mcp_tools_json(m);
    CHECK(cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(tools, "data")) == 3);
    cJSON_Delete(tools);

    /* three at once: a result, a capped result, an unknown tool */
    struct mcp_wait w;
    struct mcp_call calls[3] = { { "echo", "{\"a\":1}" }, { "echo", "{\"long\":\"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\"}" },
                                 { "nope", "" } };
    CHECK(mcp_test_batch(m, calls, 3, &w) == 0);
    CHECK(w.n == 3);
    CHECK_STR_EQ(w.text[0], "echo {\"a\": 1}");
    CHECK(!w.is_error[0]);
    CHECK_STR_CONTAINS(w.text[1], "truncated");
    CHECK(w.is_error[2]);
    CHECK_STR_CONTAINS(w.text[2], "no tool 'nope'");

    /* bad arguments and a hanging tool: error results */
    struct mcp_call bad[2] = { { "echo", "[1,2]" }, { "slow", "{}" } };
    CHECK(mcp_test_batch(m, bad, 2, &w) == 0);
    CHECK(w.is_error[0] && w.is_error[1]);
    CHECK_STR_CONTAINS(w.text[0], "not a JSON object");
    CHECK_STR_CONTAINS(w.text[1], "no answer within 3 s");

    /* a crash: an error result, then the server is back */
    struct mcp_call crash = { "crash", "{}" };
    CHECK(mcp_test_batch(m, &crash, 1, &w) == 0);
    CHECK(w.is_error[0]);
    CHECK_STR_CONTAINS(w.text[0], "exited");
    CHECK(mcp_test_connected(m, 1));
    struct mcp_call again = { "echo", "{}" };
    CHECK(mcp_test_batch(m, &again, 1, &w) == 0);
    CHECK(!w.is_error[0]);
    test_release(m);   /* mcp_free: the child is stopped and reaped */
}
