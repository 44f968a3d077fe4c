/* mcpapi.c - the MCP routes and the server-side tool loop of chat
 * completions. One api_call carries every turn: when a turn ends with
 * calls to MCP tools (api_proto.turn_end), the calls go to the MCP module,
 * whose threads bring the results back; the loop appends the assistant turn
 * and the tool messages to the conversation, renders it again and submits
 * the next turn on the same call, so the client sees one response. Streams
 * carry the intermediate calls and results as chunks with empty "choices"
 * and an "omniserve" field, which standard clients skip (they carry usage
 * the same way). */
#include "src/api/mcpapi.h"

#include "src/api/api.h"
#include "src/mcp/mcp.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MCPAPI_FINGERPRINT "fp_omniserve"
#define MCPAPI_MAX_SERVERS 64

// ---- routes ---------------------------------------------------------------------

static bool mcpapi_have(struct api *a, struct ws_req *r)
{
    if (api_mcp(a))
        return true;
    struct api_error e;
    api_error_set(&e, 404, NULL, "no MCP servers: start the server with --mcp-config FILE.json");
    api_respond_error(r, API_OPENAI, &e);
    return false;
}

void mcpapi_servers_route(struct api *a, struct ws_req *r, const char *arg)
{
    (void)arg;
    if (mcpapi_have(a, r))
        api_respond_json(r, 200, mcp_servers_json(api_mcp(a)));
}

void mcpapi_tools_route(struct api *a, struct ws_req *r, const char *arg)
{
    (void)arg;
    if (mcpapi_have(a, r))
        api_respond_json(r, 200, mcp_tools_json(api_mcp(a)));
}

int mcpapi_tools_for(struct api *a, const char *const *servers, int n, const char *field,
                     cJSON **tools, struct mcp_toolset **ts, struct api_error *e)
{
    *tools = NULL;
    *ts = NULL;
    struct mcp *m = api_mcp(a);
    if (!m)
        return api_error_set(e, 400, field, "this server runs no MCP servers: start it with "
                                            "--mcp-config FILE.json");
    char err[256];
    if (!(*ts = mcp_toolset_get(m, servers, n, err, sizeof err)))
        return api_error_set(e, strstr(err, "memory") ? 500 : 400, field, "%s", err);
    if (!(*tools = mcp_toolset_openai(*ts))) {
        mcp_toolset_free(*ts);
        *ts = NULL;
        return api_error_set(e, 500, NULL, "out of memory");
    }
    return 0;
}

// ---- the loop's state ------------------------------------------------------------------

struct mcpapi_state {
    struct api *a;
    cJSON *req;                  /* the client's request (copy) */
    struct apireq_gen g;         /* its sampling fields (taken) */
    cJSON *tools;                /* the client's function tools + the MCP tools */
    struct mcp_toolset *ts;
    cJSON *history;              /* {lock} assistant and tool messages the loop added */
    int turn, max_turns;         /* {lock} turn: 1-based, the one generating now */
    int prompt_total;            /* {lock} prompt tokens over the turns */
    int calls_total;             /* {lock} tool_calls streamed so far (their index) */
    const char *stopped;         /* {lock} why the loop ended: answer, max_turns, client_tool, error */
    struct api_error err;        /* {lock} a later turn that could not start */
    bool failed;
};

static void mcpapi_state_free(void *p)
{
    struct mcpapi_state *st = p;
    if (!st)
        return;
    cJSON_Delete(st->req);
    apireq_gen_free(&st->g);
    cJSON_Delete(st->tools);
    mcp_toolset_free(st->ts);
    cJSON_Delete(st->history);
    free(st);
}

// ---- output (OpenAI chat completion shapes) ------------------------------------------------

static cJSON *mcpapi_envelope(const struct api_call *c, const char *object, cJSON **choices)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "id", c->id);
    cJSON_AddStringToObject(o, "object", object);
    cJSON_AddNumberToObject(o, "created", (double)c->created);
    cJSON_AddStringToObject(o, "model", c->model_name);
    cJSON_AddStringToObject(o, "system_fingerprint", MCPAPI_FINGERPRINT);
    *choices = cJSON_AddArrayToObject(o, "choices");
    return o;
}

static void mcpapi_send(struct api_call *c, cJSON *chunk)
{
    if (c->include_usage && !cJSON_GetObjectItemCaseSensitive(chunk, "usage"))
        cJSON_AddNullToObject(chunk, "usage");
    char *s = cJSON_PrintUnformatted(chunk);
    cJSON_Delete(chunk);
    if (s) {
        ws_out_sse(c->out, NULL, s, strlen(s));
        free(s);
    }
}

/* A chunk of choice 0 whose delta the caller fills. */
static cJSON *mcpapi_chunk(struct api_call *c, cJSON **delta, const char *finish)
{
    cJSON *choices;
    cJSON *chunk = mcpapi_envelope(c, "chat.completion.chunk", &choices);
    cJSON *item = cJSON_CreateObject();
    cJSON_AddNumberToObject(item, "index", 0);
    *delta = cJSON_AddObjectToObject(item, "delta");
    cJSON_AddNullToObject(item, "logprobs");
    if (finish)
        cJSON_AddStringToObject(item, "finish_reason", finish);
    else
        cJSON_AddNullToObject(item, "finish_reason");
    cJSON_AddItemToArray(choices, item);
    return chunk;
}

/* An intermediate step: {"choices": [], "omniserve": ext} (ext taken). */
static void mcpapi_send_step(struct api_call *c, cJSON *ext)
{
    if (!c->stream) {
        cJSON_Delete(ext);
        return;
    }
    cJSON *choices;
    cJSON *chunk = mcpapi_envelope(c, "chat.completion.chunk", &choices);
    cJSON_AddItemToObject(chunk, "omniserve", ext);
    mcpapi_send(c, chunk);
}

static void mcpapi_start(struct api_call *c)
{
    if (!c->stream)
        return;
    ws_out_start(c->out, 200, "text/event-stream", true);
    cJSON *delta;
    cJSON *chunk = mcpapi_chunk(c, &delta, NULL);
    cJSON_AddStringToObject(delta, "role", "assistant");
    cJSON_AddStringToObject(delta, "content", "");
    mcpapi_send(c, chunk);
}

/* Content and reasoning stream as they come; tool calls are held back: an
 * intermediate turn's calls go out as "omniserve" steps when it ends, the
 * final turn's (calls of the client's own tools) in the finish chunk. */
static void mcpapi_delta(void *user, const struct chatout_delta *d)
{
    struct api_call *c = user;
    if (d->kind != CHATOUT_CONTENT && d->kind != CHATOUT_REASONING)
        return;
    char *text = malloc(d->len + 1);
    if (!text)
        return;
    memcpy(text, d->text, d->len);
    text[d->len] = 0;
    cJSON *delta;
    cJSON *chunk = mcpapi_chunk(c, &delta, NULL);
    cJSON_AddStringToObject(delta, d->kind == CHATOUT_CONTENT ? "content" : "reasoning_content", text);
    free(text);
    mcpapi_send(c, chunk);
}

static void mcpapi_text(struct api_call *c, int choice, const char *text, size_t len,
                        const struct sampler_logprobs *lp, int32_t token)
{
    (void)lp;
    struct chatout *o = c->choices[choice].chat;
    if (o)
        chatout_feed(o, text, len, token >= 0, c->stream ? mcpapi_delta : NULL, c);
}

static void mcpapi_choice_done(struct api_call *c, int choice)
{
    const struct api_choice *ch = &c->choices[choice];
    if (ch->chat)
        chatout_finish(ch->chat, c->stream && !ch->error ? mcpapi_delta : NULL, c);
}

static const char *mcpapi_finish_reason(const struct api_choice *ch)
{
    if (ch->chat && chatout_n_calls(ch->chat) > 0 && ch->finish == ENGINE_FINISH_STOP)
        return "tool_calls";
    switch (ch->finish) {
    case ENGINE_FINISH_LENGTH: return "length";
    case ENGINE_FINISH_CANCELLED: return "cancelled";
    case ENGINE_FINISH_TIMEOUT: return "timeout";
    default: return "stop";
    }
}

static cJSON *mcpapi_usage(const struct api_call *c)
{
    cJSON *u = cJSON_CreateObject();
    cJSON_AddNumberToObject(u, "prompt_tokens", c->prompt_tokens);
    cJSON_AddNumberToObject(u, "completion_tokens", c->completion_tokens);
    cJSON_AddNumberToObject(u, "total_tokens", c->prompt_tokens + c->completion_tokens);
    return u;
}

/* The final message of the last turn (content, reasoning, client tool calls). */
static cJSON *mcpapi_message(const struct api_choice *ch)
{
    cJSON *msg = cJSON_CreateObject();
    cJSON_AddStringToObject(msg, "role", "assistant");
    const char *content = ch->chat ? chatout_content(ch->chat) : "";
    int n_calls = ch->chat ? chatout_n_calls(ch->chat) : 0;
    if (!*content && n_calls > 0)
        cJSON_AddNullToObject(msg, "content");
    else
        cJSON_AddStringToObject(msg, "content", content);
    if (ch->chat && *chatout_reasoning(ch->chat))
        cJSON_AddStringToObject(msg, "reasoning_content", chatout_reasoning(ch->chat));
    if (n_calls > 0)
        cJSON_AddItemToObject(msg, "tool_calls", cJSON_Duplicate(chatout_calls(ch->chat), true));
    return msg;
}

static cJSON *mcpapi_summary(const struct mcpapi_state *st, bool with_messages)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "tool_execution", "server");
    cJSON_AddNumberToObject(o, "turns", st->turn);
    cJSON_AddStringToObject(o, "stopped", st->stopped ? st->stopped : "answer");
    if (with_messages)
        cJSON_AddItemToObject(o, "messages", cJSON_Duplicate(st->history, true));
    return o;
}

/* Every turn is over: the rest of the response. */
static void mcpapi_finish(struct api_call *c)
{
    struct mcpapi_state *st = c->proto_state;
    const struct api_choice *ch = &c->choices[0];
    struct api_error e;
    bool failed = st->failed || c->error[0];
    if (st->failed)
        e = st->err;
    else if (c->error[0])
        api_error_set(&e, apireq_engine_error_status(c->error), NULL, "%s", c->error);
    if (c->stream) {
        if (failed) {
            size_t len = 0;
            char *s = api_error_json(API_OPENAI, &e, &len);
            if (s)
                ws_out_sse(c->out, NULL, s, len);
            free(s);
            return;
        }
        cJSON *delta;
        cJSON *chunk = mcpapi_chunk(c, &delta, mcpapi_finish_reason(ch));
        if (ch->chat && chatout_n_calls(ch->chat) > 0)   /* calls of the client's tools */
            cJSON_AddItemToObject(delta, "tool_calls",
                                  cJSON_Duplicate(chatout_calls(ch->chat), true));
        cJSON_AddItemToObject(chunk, "omniserve", mcpapi_summary(st, false));
        mcpapi_send(c, chunk);
        if (c->include_usage) {
            cJSON *choices;
            cJSON *u = mcpapi_envelope(c, "chat.completion.chunk", &choices);
            cJSON_AddItemToObject(u, "usage", mcpapi_usage(c));
            mcpapi_send(c, u);
        }
        ws_out_sse(c->out, NULL, "[DONE]", 6);
        return;
    }
    if (failed) {
        size_t len = 0;
        char *s = api_error_json(API_OPENAI, &e, &len);
        ws_out_start(c->out, e.status, "application/json", false);
        if (s)
            ws_out_write(c->out, s, len);
        free(s);
        return;
    }
    cJSON *choices;
    cJSON *body = mcpapi_envelope(c, "chat.completion", &choices);
    cJSON *item = cJSON_CreateObject();
    cJSON_AddNumberToObject(item, "index", 0);
    cJSON_AddItemToObject(item, "message", mcpapi_message(ch));
    cJSON_AddNullToObject(item, "logprobs");
    cJSON_AddStringToObject(item, "finish_reason", mcpapi_finish_reason(ch));
    cJSON_AddItemToArray(choices, item);
    cJSON_AddItemToObject(body, "usage", mcpapi_usage(c));
    cJSON_AddItemToObject(body, "omniserve", mcpapi_summary(st, true));
    char *s = cJSON_PrintUnformatted(body);
    cJSON_Delete(body);
    ws_out_start(c->out, s ? 200 : 500, "application/json", false);
    if (s)
        ws_out_write(c->out, s, strlen(s));
    free(s);
}

// ---- the loop ---------------------------------------------------------------------------

/* The request of the next turn: the client's, with the loop's messages
 * appended, the merged tools and this turn's tool_choice. NULL: no memory. */
static cJSON *mcpapi_turn_request(const struct mcpapi_state *st)
{
    cJSON *req = cJSON_Duplicate(st->req, true);
    if (!req)
        return NULL;
    cJSON *msgs = cJSON_GetObjectItemCaseSensitive(req, "messages");
    const cJSON *h;
    cJSON_ArrayForEach(h, st->history)
        cJSON_AddItemToArray(msgs, cJSON_Duplicate(h, true));
    cJSON_DeleteItemFromObjectCaseSensitive(req, "tools");
    cJSON_AddItemToObject(req, "tools", cJSON_Duplicate(st->tools, true));
    if (st->turn > 1 || st->turn >= st->max_turns) {
        /* the client's tool_choice was for the first turn; the last one
         * answers in text */
        cJSON_DeleteItemFromObjectCaseSensitive(req, "tool_choice");
        cJSON_AddStringToObject(req, "tool_choice", st->turn >= st->max_turns ? "none" : "auto");
    }
    return req;
}

/* Renders and submits the current turn on c (first: the route's thread
 * with r; later: an MCP thread with r NULL). -1 with e when it cannot. */
static int mcpapi_submit_turn(struct api_call *c, struct ws_req *r, struct api_error *e)
{
    struct mcpapi_state *st = c->proto_state;
    const struct api_model *m = api_model(st->a);
    cJSON *req = mcpapi_turn_request(st);
    struct chatreq cr = { .reasoning_budget = -1 };
    struct engine_request rq = engine_default_request();
    rq.model = m->index;
    rq.sampling = st->g.sp;
    rq.n = 1;
    rq.max_tokens = st->g.max_tokens;
    rq.timeout_s = st->g.timeout_s;
    int rc = -1;
    if (!req) {
        api_error_set(e, 500, NULL, "out of memory");
    } else if (chatreq_build(m, req, &st->g, &cr, e) >= 0 && chatreq_attach(&cr, m, c, &rq, e) >= 0) {
        rc = r ? api_call_submit(c, r, &rq, mcpapi_start) : api_call_resubmit(c, &rq, e);
        if (r)
            rc = 0;   /* api_call_submit answered a refusal itself */
    }
    chatreq_free(&cr);
    cJSON_Delete(req);
    return rc;
}

/* MCP thread: one turn's tool results are in. */
static void mcpapi_results(void *user, struct mcp_result *res, int n)
{
    struct api_call *c = user;
    struct mcpapi_state *st = c->proto_state;
    pthread_mutex_lock(&c->lock);
    const cJSON *assistant = cJSON_GetArrayItem(st->history, cJSON_GetArraySize(st->history) - 1);
    const cJSON *calls = cJSON_GetObjectItemCaseSensitive(assistant, "tool_calls");
    for (int i = 0; i < n; i++) {
        const cJSON *call = cJSON_GetArrayItem(calls, i);
        const char *id = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(call, "id"));
        const char *fname = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(
            cJSON_GetObjectItemCaseSensitive(call, "function"), "name"));
        cJSON *tm = cJSON_CreateObject();
        cJSON_AddStringToObject(tm, "role", "tool");
        cJSON_AddStringToObject(tm, "tool_call_id", id ? id : "");
        cJSON_AddStringToObject(tm, "name", fname ? fname : "");
        cJSON_AddStringToObject(tm, "content", res[i].text ? res[i].text : "");
        /* not read by chat templates; for the client */
        if (res[i].server)
            cJSON_AddStringToObject(tm, "server", res[i].server);
        else
            cJSON_AddNullToObject(tm, "server");
        cJSON_AddBoolToObject(tm, "is_error", res[i].is_error);
        cJSON *step = cJSON_CreateObject();
        cJSON_AddStringToObject(step, "type", "tool_result");
        cJSON_AddNumberToObject(step, "turn", st->turn);
        cJSON_AddItemToObject(step, "message", cJSON_Duplicate(tm, true));
        mcpapi_send_step(c, step);
        cJSON_AddItemToArray(st->history, tm);
    }
    st->turn++;
    pthread_mutex_unlock(&c->lock);
    struct api_error e;
    if (ws_out_gone(c->out)) {
        api_error_set(&e, 499, NULL, "the client left");
    } else {
        api_call_next_turn(c);
        if (mcpapi_submit_turn(c, NULL, &e) == 0)
            return;
    }
    pthread_mutex_lock(&c->lock);
    st->failed = true;
    st->err = e;
    st->stopped = "error";
    c->prompt_tokens = st->prompt_total;
    pthread_mutex_unlock(&c->lock);
    api_call_end(c);
}

/* Engine thread, under the call's lock (api_call.turn_end): a turn ended. true when the loop
 * goes on (the MCP calls are running; mcpapi_results submits the next). */
static bool mcpapi_turn_end(struct api_call *c)
{
    struct mcpapi_state *st = c->proto_state;
    const struct api_choice *ch = &c->choices[0];
    st->prompt_total += c->prompt_tokens;
    c->prompt_tokens = st->prompt_total;   /* usage and logs count every turn */
    int n = ch->chat ? chatout_n_calls(ch->chat) : 0;
    if (c->error[0] || ch->error || n == 0 || ch->finish == ENGINE_FINISH_CANCELLED ||
        ch->finish == ENGINE_FINISH_TIMEOUT) {
        st->stopped = c->error[0] || ch->error ? "error" : n ? "cancelled" : "answer";
        return false;
    }
    const cJSON *calls = chatout_calls(ch->chat);
    struct mcp_call mc[64];
    if (n > 64)
        n = 64;
    int i = 0;
    const cJSON *call;
    cJSON_ArrayForEach(call, calls) {
        if (i == n)
            break;
        const cJSON *fn = cJSON_GetObjectItemCaseSensitive(call, "function");
        mc[i].name = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(fn, "name"));
        mc[i].arguments = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(fn, "arguments"));
        if (!mc[i].name || !mcp_toolset_server(st->ts, mc[i].name)) {
            /* a tool of the client's: the client runs this turn's calls */
            st->stopped = "client_tool";
            return false;
        }
        i++;
    }
    if (st->turn >= st->max_turns) {
        st->stopped = "max_turns";
        return false;
    }
    /* the assistant turn as the next prompt needs it */
    cJSON *am = cJSON_CreateObject();
    cJSON_AddStringToObject(am, "role", "assistant");
    const char *content = chatout_content(ch->chat);
    if (*content)
        cJSON_AddStringToObject(am, "content", content);
    else
        cJSON_AddNullToObject(am, "content");
    cJSON *tc = cJSON_Duplicate(calls, true);
    cJSON_AddItemToObject(am, "tool_calls", tc);
    cJSON_AddItemToArray(st->history, am);
    const cJSON *t;
    cJSON_ArrayForEach(t, tc) {
        cJSON *step = cJSON_CreateObject();
        cJSON_AddStringToObject(step, "type", "tool_call");
        cJSON_AddNumberToObject(step, "turn", st->turn);
        const cJSON *fn = cJSON_GetObjectItemCaseSensitive(t, "function");
        const char *srv = mcp_toolset_server(st->ts, cJSON_GetStringValue(
                                                         cJSON_GetObjectItemCaseSensitive(fn, "name")));
        cJSON_AddStringToObject(step, "server", srv ? srv : "");
        cJSON_AddItemToObject(step, "tool_call", cJSON_Duplicate(t, true));
        mcpapi_send_step(c, step);
        st->calls_total++;
    }
    char err[256];
    if (mcp_call_batch(api_mcp(st->a), st->ts, mc, n, mcpapi_results, c, err, sizeof err) < 0) {
        st->failed = true;
        api_error_set(&st->err, 500, NULL, "cannot run the tool calls: %s", err);
        st->stopped = "error";
        return false;
    }
    return true;
}

static const struct api_proto mcpapi_proto = {
    .text = mcpapi_text,
    .choice_done = mcpapi_choice_done,
    .finish = mcpapi_finish,
};

// ---- the request ---------------------------------------------------------------------------

bool mcpapi_wanted(const cJSON *req)
{
    return cJSON_GetObjectItemCaseSensitive(req, "tool_execution") != NULL ||
           cJSON_GetObjectItemCaseSensitive(req, "mcp_servers") != NULL;
}

/* "tool_execution", "mcp_servers" and the merged tools into st. */
static int mcpapi_fields(struct api *a, const cJSON *req, struct mcpapi_state *st,
                         struct api_error *e)
{
    const char *te = NULL;
    if (apireq_string(req, "tool_execution", &te, e) < 0)
        return -1;
    if (!te || strcmp(te, "server") != 0)
        return api_error_set(e, 400, "tool_execution",
                             "'tool_execution' must be \"server\" (MCP tools run by this server); "
                             "leave it out to run tools in the client");
    const cJSON *sv = cJSON_GetObjectItemCaseSensitive(req, "mcp_servers");
    const char *names[MCPAPI_MAX_SERVERS];
    int n = 0;
    if (sv && !cJSON_IsNull(sv)) {
        if (!cJSON_IsArray(sv) || cJSON_GetArraySize(sv) > MCPAPI_MAX_SERVERS)
            return api_error_set(e, 400, "mcp_servers",
                                 "'mcp_servers' must be an array of MCP server names");
        const cJSON *x;
        cJSON_ArrayForEach(x, sv) {
            if (!cJSON_IsString(x))
                return api_error_set(e, 400, "mcp_servers", "'mcp_servers[%d]' must be a string", n);
            names[n++] = x->valuestring;
        }
    }
    if (mcpapi_tools_for(a, names, n, "mcp_servers", &st->tools, &st->ts, e) < 0)
        return -1;
    /* the client's own function tools come first; a name both have is an error */
    const cJSON *ct = cJSON_GetObjectItemCaseSensitive(req, "tools");
    if (ct && !cJSON_IsNull(ct)) {
        if (!cJSON_IsArray(ct))
            return api_error_set(e, 400, "tools", "'tools' must be an array of function tools");
        int i = 0;
        const cJSON *t;
        cJSON *merged = cJSON_CreateArray();
        cJSON_ArrayForEach(t, ct) {
            const char *name = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(
                cJSON_GetObjectItemCaseSensitive(t, "function"), "name"));
            if (name && mcp_toolset_server(st->ts, name)) {
                cJSON_Delete(merged);
                return api_error_set(e, 400, "tools",
                                     "'tools[%d]' is named '%s' like a tool of MCP server '%s'; "
                                     "rename it or leave the server out with 'mcp_servers'",
                                     i, name, mcp_toolset_server(st->ts, name));
            }
            cJSON_AddItemToArray(merged, cJSON_Duplicate(t, true));
            i++;
        }
        const cJSON *x;
        cJSON_ArrayForEach(x, st->tools)
            cJSON_AddItemToArray(merged, cJSON_Duplicate(x, true));
        cJSON_Delete(st->tools);
        st->tools = merged;
    }
    if (cJSON_GetArraySize(st->tools) == 0)
        return api_error_set(e, 400, "mcp_servers",
                             "no tools to run: no MCP server is connected now (GET /v1/mcp/servers "
                             "says why) and the request has no tools of its own");
    return 0;
}

void mcpapi_chat(struct api *a, struct ws_req *r, const cJSON *req, struct apireq_gen *g)
{
    struct api_error e;
    struct mcpapi_state *st = calloc(1, sizeof *st);
    struct api_call *c = NULL;
    if (!st) {
        api_error_set(&e, 500, NULL, "out of memory");
        goto fail;
    }
    st->a = a;
    st->g = *g;
    apireq_gen_init(g);   /* the state owns the sampling fields now */
    st->turn = 1;
    st->max_turns = api_mcp_max_turns(a);
    if (mcpapi_fields(a, req, st, &e) < 0)
        goto fail;
    if (st->g.n != 1) {
        api_error_set(&e, 400, "n", "'n' must be 1 with \"tool_execution\": \"server\"");
        goto fail;
    }
    if (!(st->req = cJSON_Duplicate(req, true)) || !(st->history = cJSON_CreateArray())) {
        api_error_set(&e, 500, NULL, "out of memory");
        goto fail;
    }
    /* the fields only this loop reads stay out of the chat request */
    cJSON_DeleteItemFromObjectCaseSensitive(st->req, "tool_execution");
    cJSON_DeleteItemFromObjectCaseSensitive(st->req, "mcp_servers");
    st->g.logprobs = false;   /* not reported across turns */
    if (!(c = api_call_new(a, r, &mcpapi_proto, API_OPENAI, "chatcmpl-", &st->g))) {
        api_error_set(&e, 500, NULL, "out of memory");
        goto fail;
    }
    c->proto_state = st;
    c->proto_state_free = mcpapi_state_free;
    c->turn_end = mcpapi_turn_end;
    st = NULL;
    if (mcpapi_submit_turn(c, r, &e) < 0) {
        api_call_free(c);
        goto fail;
    }
    return;
fail:
    mcpapi_state_free(st);
    api_respond_error(r, API_OPENAI, &e);
}
