/* mcpapi.c - the MCP routes and chat completions with server-side tools:
 * the OpenAI chat output around the tool loop of mcploop.h. Streams carry
 * the loop's calls and results as chunks with empty "choices" and an
 * "omniserve" field, which standard clients skip (they get usage the same
 * way); the answer's own tool_calls deltas are held back, since a client
 * that saw them would try to run tools it does not have. */
#include "src/api/mcpapi.h"

#include "src/api/api.h"
#include "src/api/mcploop.h"
#include "src/api/openai.h"
#include "src/mcp/mcp.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

// ---- the state of one request -----------------------------------------------------------

struct mcpapi_state {
    struct mcploop *loop;
};

static void mcpapi_state_free(void *p)
{
    struct mcpapi_state *st = p;
    if (!st)
        return;
    mcploop_free(st->loop);
    free(st);
}

// ---- output (OpenAI chat completion shapes) ------------------------------------------------

/* A chunk of choice 0 whose delta the caller fills. */
static cJSON *mcpapi_chunk(struct api_call *c, cJSON **delta, const char *finish)
{
    cJSON *choices;
    cJSON *chunk = openai_envelope(c, "chat.completion.chunk", &choices);
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
    cJSON *chunk = openai_envelope(c, "chat.completion.chunk", &choices);
    cJSON_AddItemToObject(chunk, "omniserve", ext);
    openai_send(c, chunk);
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
    openai_send(c, chunk);
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
    openai_send(c, chunk);
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

static cJSON *mcpapi_summary(const struct mcploop *l, bool with_messages)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "tool_execution", "server");
    cJSON_AddNumberToObject(o, "turns", mcploop_turns(l));
    cJSON_AddStringToObject(o, "stopped", mcploop_stopped(l));
    if (with_messages)
        cJSON_AddItemToObject(o, "messages", cJSON_Duplicate(mcploop_messages(l), true));
    return o;
}

/* Every turn is over: the rest of the response. */
static void mcpapi_finish(struct api_call *c)
{
    struct mcpapi_state *st = c->proto_state;
    const struct api_choice *ch = &c->choices[0];
    struct api_error e;
    bool failed = mcploop_error(st->loop, &e);
    if (!failed && (failed = c->error[0] != 0))
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
        cJSON_AddItemToObject(chunk, "omniserve", mcpapi_summary(st->loop, false));
        openai_send(c, chunk);
        if (c->include_usage) {
            cJSON *choices;
            cJSON *u = openai_envelope(c, "chat.completion.chunk", &choices);
            cJSON_AddItemToObject(u, "usage", mcpapi_usage(c));
            openai_send(c, u);
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
    cJSON *body = openai_envelope(c, "chat.completion", &choices);
    cJSON *item = cJSON_CreateObject();
    cJSON_AddNumberToObject(item, "index", 0);
    cJSON_AddItemToObject(item, "message", mcpapi_message(ch));
    cJSON_AddNullToObject(item, "logprobs");
    cJSON_AddStringToObject(item, "finish_reason", mcpapi_finish_reason(ch));
    cJSON_AddItemToArray(choices, item);
    cJSON_AddItemToObject(body, "usage", mcpapi_usage(c));
    cJSON_AddItemToObject(body, "omniserve", mcpapi_summary(st->loop, true));
    char *s = cJSON_PrintUnformatted(body);
    cJSON_Delete(body);
    ws_out_start(c->out, s ? 200 : 500, "application/json", false);
    if (s)
        ws_out_write(c->out, s, strlen(s));
    free(s);
}

// ---- the loop's steps in the stream ---------------------------------------------------------

static void mcpapi_step_call(struct api_call *c, const cJSON *call, const char *server, int turn)
{
    cJSON *step = cJSON_CreateObject();
    cJSON_AddStringToObject(step, "type", "tool_call");
    cJSON_AddNumberToObject(step, "turn", turn);
    cJSON_AddStringToObject(step, "server", server);
    cJSON_AddItemToObject(step, "tool_call", cJSON_Duplicate(call, true));
    mcpapi_send_step(c, step);
}

static void mcpapi_step_result(struct api_call *c, const cJSON *msg, int turn)
{
    cJSON *step = cJSON_CreateObject();
    cJSON_AddStringToObject(step, "type", "tool_result");
    cJSON_AddNumberToObject(step, "turn", turn);
    cJSON_AddItemToObject(step, "message", cJSON_Duplicate(msg, true));
    mcpapi_send_step(c, step);
}

static bool mcpapi_turn_end(struct api_call *c)
{
    struct mcpapi_state *st = c->proto_state;
    return mcploop_turn_end(st->loop, c);
}

static const struct api_proto mcpapi_proto = {
    .text = mcpapi_text,
    .choice_done = mcpapi_choice_done,
    .finish = mcpapi_finish,
};

// ---- the request ---------------------------------------------------------------------------

bool mcpapi_wanted(const cJSON *req)
{
    if (cJSON_GetObjectItemCaseSensitive(req, "tool_execution") ||
        cJSON_GetObjectItemCaseSensitive(req, "mcp_servers"))
        return true;
    const cJSON *t, *tools = cJSON_GetObjectItemCaseSensitive(req, "tools");
    const cJSON *list = cJSON_IsArray(tools) ? tools : NULL;
    cJSON_ArrayForEach(t, list) {
        const char *type = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(t, "type"));
        if (type && !strcmp(type, "mcp"))
            return true;   /* the Responses API's {"type": "mcp", "server_label"} */
    }
    return false;
}

/* "tool_execution" and "mcp_servers" -> names[*n] (pointing into req). */
static int mcpapi_fields(const cJSON *req, const char **names, int *n, struct api_error *e)
{
    const char *te = NULL;
    *n = 0;
    if (apireq_string(req, "tool_execution", &te, e) < 0)
        return -1;
    /* absent with {"type": "mcp"} tools: they ask for the server's execution */
    if (!te && !cJSON_GetObjectItemCaseSensitive(req, "mcp_servers"))
        te = "server";
    if (!te || strcmp(te, "server") != 0)
        return api_error_set(e, 400, "tool_execution",
                             "'tool_execution' must be \"server\" (MCP tools run by this server); "
                             "leave it out to run tools in the client");
    const cJSON *sv = cJSON_GetObjectItemCaseSensitive(req, "mcp_servers");
    if (!sv || cJSON_IsNull(sv))
        return 0;
    if (!cJSON_IsArray(sv) || cJSON_GetArraySize(sv) > MCPAPI_MAX_SERVERS)
        return api_error_set(e, 400, "mcp_servers",
                             "'mcp_servers' must be an array of MCP server names");
    const cJSON *x;
    cJSON_ArrayForEach(x, sv) {
        if (!cJSON_IsString(x))
            return api_error_set(e, 400, "mcp_servers", "'mcp_servers[%d]' must be a string", *n);
        names[(*n)++] = x->valuestring;
    }
    return 0;
}

void mcpapi_chat(struct api *a, struct ws_req *r, const cJSON *req, struct apireq_gen *g)
{
    static const struct mcploop_hooks hooks = { mcpapi_step_call, mcpapi_step_result };
    struct api_error e;
    const char *names[MCPAPI_MAX_SERVERS];
    int n = 0;
    struct mcpapi_state *st = NULL;
    struct api_call *c = NULL;
    cJSON *turn1 = NULL;
    if (mcpapi_fields(req, names, &n, &e) < 0)
        goto fail;
    if (!(st = calloc(1, sizeof *st))) {
        api_error_set(&e, 500, NULL, "out of memory");
        goto fail;
    }
    bool listed = cJSON_IsArray(cJSON_GetObjectItemCaseSensitive(req, "mcp_servers"));
    if (!(st->loop = mcploop_new(a, req, g, listed ? names : NULL, n, &hooks, &e)))
        goto fail;
    const struct apireq_gen *lg = mcploop_gen(st->loop);
    if (!(c = api_call_new(a, r, &mcpapi_proto, API_OPENAI, "chatcmpl-", lg)) ||
        !(turn1 = mcploop_request(st->loop))) {
        api_call_free(c);
        api_error_set(&e, 500, NULL, "out of memory");
        goto fail;
    }
    c->proto_state = st;
    c->proto_state_free = mcpapi_state_free;
    c->turn_end = mcpapi_turn_end;
    st = NULL;
    const struct api_model *m = api_model(a);
    struct chatreq cr = { .reasoning_budget = -1 };
    struct engine_request rq = engine_default_request();
    rq.model = m->index;
    rq.sampling = lg->sp;
    rq.n = 1;
    rq.max_tokens = lg->max_tokens;
    rq.timeout_s = lg->timeout_s;
    if (chatreq_build(m, turn1, lg, &cr, &e) < 0 || chatreq_attach(&cr, m, c, &rq, &e) < 0) {
        chatreq_free(&cr);
        api_call_free(c);
        goto fail;
    }
    api_call_submit(c, r, &rq, mcpapi_start);   /* answers a refusal itself */
    chatreq_free(&cr);
    cJSON_Delete(turn1);
    return;
fail:
    cJSON_Delete(turn1);
    mcpapi_state_free(st);
    api_respond_error(r, API_OPENAI, &e);
}
