/* mcploop.c - the MCP tool loop over one api_call: a turn that ends with
 * calls to MCP tools hands them to the MCP module (whose threads bring the
 * results back), and the conversation grows by the assistant turn and the
 * tool messages before the next turn is rendered and submitted on the same
 * call, so the client gets one response however many turns it took. */
#include "src/api/mcploop.h"

#include "src/api/api.h"
#include "src/api/mcpapi.h"
#include "src/mcp/mcp.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MCPLOOP_MAX_SERVERS 64
#define MCPLOOP_MAX_CALLS 64     /* calls of one turn that run; more get an error result */

struct mcploop {
    struct api *a;
    cJSON *req;                  /* the client's chat request (copy), tools merged */
    struct apireq_gen g;         /* its sampling fields (taken) */
    struct mcp_toolset *ts;
    struct mcploop_hooks h;
    struct api_call *c;          /* the call, once a turn ended */
    cJSON *history;              /* {call lock} assistant and tool messages the loop added */
    int turn, max_turns;         /* {call lock} turn: 1-based, the one generating now */
    int prompt_total;            /* {call lock} prompt tokens of the turns so far */
    const char *stopped;         /* {call lock} */
    struct api_error err;        /* {call lock} a later turn that could not run */
    bool failed;
};

static bool mcploop_is_mcp_tool(const cJSON *t)
{
    const char *type = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(t, "type"));
    return type && !strcmp(type, "mcp");
}

/* {"type": "mcp", "server_label": NAME} entries of "tools" (the Responses
 * API's shape) -> names[*n] (pointing into req). "require_approval" may be
 * absent or "never" (this server asks nobody); "allowed_tools" is not
 * supported. -1 with a 400 naming the entry. */
static int mcploop_labels(const cJSON *req, const char **names, int *n, int max,
                          struct api_error *e)
{
    const cJSON *t, *tools = cJSON_GetObjectItemCaseSensitive(req, "tools");
    const cJSON *list = cJSON_IsArray(tools) ? tools : NULL;
    int i = 0;
    *n = 0;
    cJSON_ArrayForEach(t, list) {
        if (mcploop_is_mcp_tool(t)) {
            const char *label =
                cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(t, "server_label"));
            const cJSON *ra = cJSON_GetObjectItemCaseSensitive(t, "require_approval");
            if (!label)
                return api_error_set(e, 400, "tools", "'tools[%d].server_label' must be the name "
                                     "of an MCP server of this server's --mcp-config", i);
            if (ra && !cJSON_IsNull(ra) &&
                !(cJSON_IsString(ra) && !strcmp(ra->valuestring, "never")))
                return api_error_set(e, 400, "tools", "'tools[%d].require_approval' must be "
                                     "\"never\": this server runs MCP tools without asking", i);
            if (cJSON_GetObjectItemCaseSensitive(t, "allowed_tools"))
                return api_error_set(e, 400, "tools", "'tools[%d].allowed_tools' is not supported: "
                                     "every tool of the server is offered", i);
            if (cJSON_GetObjectItemCaseSensitive(t, "server_url"))
                return api_error_set(e, 400, "tools", "'tools[%d].server_url': this server only "
                                     "uses the MCP servers of its --mcp-config, by server_label", i);
            if (*n == max)
                return api_error_set(e, 400, "tools", "too many MCP servers in 'tools'");
            names[(*n)++] = label;
        }
        i++;
    }
    return 0;
}

/* The client's function tools, then the MCP tools; a name both have is a 400. */
static cJSON *mcploop_tools(const cJSON *req, const struct mcp_toolset *ts, cJSON *mcp_tools,
                            struct api_error *e)
{
    cJSON *merged = cJSON_CreateArray();
    const cJSON *ct = cJSON_GetObjectItemCaseSensitive(req, "tools");
    if (ct && !cJSON_IsNull(ct) && !cJSON_IsArray(ct)) {
        cJSON_Delete(merged);
        api_error_set(e, 400, "tools", "'tools' must be an array of function tools");
        return NULL;
    }
    int i = 0;
    const cJSON *t, *client = cJSON_IsArray(ct) ? ct : NULL;
    cJSON_ArrayForEach(t, client) {
        if (mcploop_is_mcp_tool(t)) {   /* a server label, taken by mcploop_labels */
            i++;
            continue;
        }
        const char *name = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(
            cJSON_GetObjectItemCaseSensitive(t, "function"), "name"));
        if (name && mcp_toolset_server(ts, name)) {
            cJSON_Delete(merged);
            api_error_set(e, 400, "tools", "'tools[%d]' is named '%s' like a tool of MCP server "
                                           "'%s'; rename it or leave the server out with "
                                           "'mcp_servers'", i, name, mcp_toolset_server(ts, name));
            return NULL;
        }
        cJSON_AddItemToArray(merged, cJSON_Duplicate(t, true));
        i++;
    }
    cJSON_ArrayForEach(t, mcp_tools)
        cJSON_AddItemToArray(merged, cJSON_Duplicate(t, true));
    if (cJSON_GetArraySize(merged) == 0) {
        cJSON_Delete(merged);
        api_error_set(e, 400, "mcp_servers",
                      "no tools to run: no MCP server is connected now (GET /v1/mcp/servers says "
                      "why) and the request has no tools of its own");
        return NULL;
    }
    return merged;
}

struct mcploop *mcploop_new(struct api *a, const cJSON *chat_req, struct apireq_gen *g,
                            const char *const *servers, int n_servers,
                            const struct mcploop_hooks *hooks, struct api_error *e)
{
    struct mcploop *l = calloc(1, sizeof *l);
    cJSON *mcp_tools = NULL, *tools = NULL;
    if (!l) {
        api_error_set(e, 500, NULL, "out of memory");
        return NULL;
    }
    l->a = a;
    l->g = *g;
    apireq_gen_init(g);   /* the loop owns the sampling fields now */
    l->turn = 1;
    l->max_turns = api_mcp_max_turns(a);
    if (hooks)
        l->h = *hooks;
    if (l->g.n != 1) {
        api_error_set(e, 400, "n", "'n' must be 1 when the server runs the tools");
        goto fail;
    }
    /* {"type": "mcp", "server_label"} tools name the servers too */
    const char *labels[MCPLOOP_MAX_SERVERS];
    int n_labels = 0;
    if (mcploop_labels(chat_req, labels, &n_labels, MCPLOOP_MAX_SERVERS, e) < 0)
        goto fail;
    if (n_labels > 0 && !servers) {
        servers = labels;
        n_servers = n_labels;
    } else if (n_labels > 0) {
        api_error_set(e, 400, "mcp_servers", "give the MCP servers either as 'mcp_servers' or as "
                                             "{\"type\": \"mcp\"} tools, not both");
        goto fail;
    }
    if (mcpapi_tools_for(a, servers, n_servers, n_labels ? "tools" : "mcp_servers", &mcp_tools,
                         &l->ts, e) < 0 ||
        !(tools = mcploop_tools(chat_req, l->ts, mcp_tools, e)))
        goto fail;
    if (!(l->req = cJSON_Duplicate(chat_req, true)) || !(l->history = cJSON_CreateArray())) {
        api_error_set(e, 500, NULL, "out of memory");
        goto fail;
    }
    /* the fields only the loop reads stay out of the chat request */
    cJSON_DeleteItemFromObjectCaseSensitive(l->req, "tool_execution");
    cJSON_DeleteItemFromObjectCaseSensitive(l->req, "mcp_servers");
    cJSON_DeleteItemFromObjectCaseSensitive(l->req, "tools");
    cJSON_AddItemToObject(l->req, "tools", tools);
    tools = NULL;
    l->g.logprobs = false;   /* not reported across turns */
    cJSON_Delete(mcp_tools);
    return l;
fail:
    cJSON_Delete(mcp_tools);
    cJSON_Delete(tools);
    mcploop_free(l);
    return NULL;
}

void mcploop_free(struct mcploop *l)
{
    if (!l)
        return;
    cJSON_Delete(l->req);
    apireq_gen_free(&l->g);
    mcp_toolset_free(l->ts);
    cJSON_Delete(l->history);
    free(l);
}

const struct apireq_gen *mcploop_gen(const struct mcploop *l) { return &l->g; }
int mcploop_turns(const struct mcploop *l) { return l->turn; }
const char *mcploop_stopped(const struct mcploop *l) { return l->stopped ? l->stopped : "answer"; }
const cJSON *mcploop_messages(const struct mcploop *l) { return l->history; }

bool mcploop_error(const struct mcploop *l, struct api_error *e)
{
    if (l->failed)
        *e = l->err;
    return l->failed;
}

cJSON *mcploop_request(const struct mcploop *l)
{
    cJSON *req = cJSON_Duplicate(l->req, true);
    if (!req)
        return NULL;
    cJSON *msgs = cJSON_GetObjectItemCaseSensitive(req, "messages");
    const cJSON *h;
    cJSON_ArrayForEach(h, l->history)
        cJSON_AddItemToArray(msgs, cJSON_Duplicate(h, true));
    if (l->turn > 1 || l->turn >= l->max_turns) {
        /* the client's tool_choice was for the first turn; the last turn
         * answers in text */
        cJSON_DeleteItemFromObjectCaseSensitive(req, "tool_choice");
        cJSON_AddStringToObject(req, "tool_choice", l->turn >= l->max_turns ? "none" : "auto");
    }
    return req;
}

/* Renders and submits the next turn on c (an MCP thread). */
static int mcploop_submit(struct mcploop *l, struct api_call *c, struct api_error *e)
{
    const struct api_model *m = api_model(l->a);
    cJSON *req = mcploop_request(l);
    struct chatreq cr = { .reasoning_budget = -1 };
    struct engine_request rq = engine_default_request();
    rq.model = m->index;
    rq.sampling = l->g.sp;
    rq.n = 1;
    rq.max_tokens = l->g.max_tokens;
    rq.timeout_s = l->g.timeout_s;
    int rc = -1;
    if (!req)
        api_error_set(e, 500, NULL, "out of memory");
    else if (chatreq_build(m, req, &l->g, &cr, e) >= 0 && chatreq_attach(&cr, m, c, &rq, e) >= 0)
        rc = api_call_resubmit(c, &rq, e);
    chatreq_free(&cr);
    cJSON_Delete(req);
    return rc;
}

/* MCP thread: one turn's tool results are in. */
static void mcploop_results(void *user, struct mcp_result *res, int n)
{
    struct mcploop *l = user;
    struct api_call *c = l->c;
    pthread_mutex_lock(&c->lock);
    const cJSON *assistant = cJSON_GetArrayItem(l->history, cJSON_GetArraySize(l->history) - 1);
    const cJSON *calls = cJSON_GetObjectItemCaseSensitive(assistant, "tool_calls");
    int i = 0;
    const cJSON *call;
    cJSON_ArrayForEach(call, calls) {
        const char *id = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(call, "id"));
        const char *fname = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(
            cJSON_GetObjectItemCaseSensitive(call, "function"), "name"));
        cJSON *tm = cJSON_CreateObject();
        cJSON_AddStringToObject(tm, "role", "tool");
        cJSON_AddStringToObject(tm, "tool_call_id", id ? id : "");
        cJSON_AddStringToObject(tm, "name", fname ? fname : "");
        if (i < n) {
            cJSON_AddStringToObject(tm, "content", res[i].text ? res[i].text : "");
            /* not read by chat templates; for the client */
            if (res[i].server)
                cJSON_AddStringToObject(tm, "server", res[i].server);
            else
                cJSON_AddNullToObject(tm, "server");
            cJSON_AddBoolToObject(tm, "is_error", res[i].is_error);
        } else {
            cJSON_AddStringToObject(tm, "content", "error: too many tool calls in one turn; this "
                                                   "one was not run");
            cJSON_AddNullToObject(tm, "server");
            cJSON_AddBoolToObject(tm, "is_error", true);
        }
        if (l->h.tool_result)
            l->h.tool_result(c, tm, l->turn);
        cJSON_AddItemToArray(l->history, tm);
        i++;
    }
    l->turn++;
    pthread_mutex_unlock(&c->lock);
    struct api_error e;
    if (ws_out_gone(c->out)) {
        api_error_set(&e, 499, NULL, "the client left");
    } else {
        api_call_next_turn(c);
        if (mcploop_submit(l, c, &e) == 0)
            return;
    }
    pthread_mutex_lock(&c->lock);
    l->failed = true;
    l->err = e;
    l->stopped = "error";
    c->prompt_tokens = l->prompt_total;
    pthread_mutex_unlock(&c->lock);
    api_call_end(c);
}

bool mcploop_turn_end(struct mcploop *l, struct api_call *c)
{
    const struct api_choice *ch = &c->choices[0];
    l->c = c;
    l->prompt_total += c->prompt_tokens;
    c->prompt_tokens = l->prompt_total;   /* usage and logs count every turn */
    int n = ch->chat ? chatout_n_calls(ch->chat) : 0;
    if (c->error[0] || ch->error || n == 0 || ch->finish == ENGINE_FINISH_CANCELLED ||
        ch->finish == ENGINE_FINISH_TIMEOUT) {
        l->stopped = c->error[0] || ch->error ? "error" : n ? "cancelled" : "answer";
        return false;
    }
    const cJSON *calls = chatout_calls(ch->chat);
    struct mcp_call mc[MCPLOOP_MAX_CALLS];
    int k = 0;
    const cJSON *call;
    cJSON_ArrayForEach(call, calls) {
        const cJSON *fn = cJSON_GetObjectItemCaseSensitive(call, "function");
        const char *name = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(fn, "name"));
        if (!name || !mcp_toolset_server(l->ts, name)) {
            /* a tool of the client's: the client runs this turn's calls */
            l->stopped = "client_tool";
            return false;
        }
        if (k < MCPLOOP_MAX_CALLS) {
            mc[k].name = name;
            mc[k].arguments = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(fn, "arguments"));
            k++;
        }
    }
    if (l->turn >= l->max_turns) {
        l->stopped = "max_turns";
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
    cJSON_AddItemToArray(l->history, am);
    const cJSON *t;
    cJSON_ArrayForEach(t, tc) {
        const cJSON *fn = cJSON_GetObjectItemCaseSensitive(t, "function");
        const char *srv = mcp_toolset_server(l->ts, cJSON_GetStringValue(
                                                        cJSON_GetObjectItemCaseSensitive(fn, "name")));
        if (l->h.tool_call)
            l->h.tool_call(c, t, srv ? srv : "", l->turn);
    }
    char err[256];
    if (mcp_call_batch(api_mcp(l->a), l->ts, mc, k, mcploop_results, l, err, sizeof err) < 0) {
        l->failed = true;
        api_error_set(&l->err, 500, NULL, "cannot run the tool calls: %s", err);
        l->stopped = "error";
        return false;
    }
    return true;
}
