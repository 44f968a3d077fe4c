/* mcploop.h - the server-side MCP tool loop of one generation call, for
 * any protocol mapping that renders an OpenAI-shaped chat request (chat
 * completions in mcpapi.c; the Responses API can use it the same way):
 *
 *   generate -> tool calls (the model's tool parser) -> MCP calls, run
 *   concurrently -> the assistant turn and one tool message per call
 *   appended -> generate again, on the same api_call
 *
 * until a turn has no calls, calls a tool that is not an MCP tool (the
 * client's: that turn is the answer), or --mcp-max-turns generations ran
 * (the last one with tool_choice "none", so it answers in text).
 *
 *   struct mcploop_hooks h = { .tool_call = show_call, .tool_result = show_result };
 *   struct mcploop *l = mcploop_new(a, chat_req, &g, servers, n, &h, &e);  // takes g
 *   cJSON *turn1 = mcploop_request(l);     // render + submit it as usual (chatreq_build,
 *   ...                                    // chatreq_attach, api_call_submit)
 *   c->turn_end = my_turn_end;             // { return mcploop_turn_end(state->l, c); }
 *   ... proto->finish: mcploop_error(l, &e), mcploop_messages(l), mcploop_turns(l) ...
 *   mcploop_free(l);                       // with the protocol's state
 *
 * The client's tool_choice applies to the first turn; later turns use
 * "auto". Usage: c->prompt_tokens is the sum over the turns when finish
 * runs (completion tokens add up in api.c already).
 *
 * Thread safety: mcploop_turn_end runs on the engine thread under the
 * call's lock (api_call.turn_end); the hooks run under the call's lock, on
 * the engine thread (tool_call) or an MCP thread (tool_result); the next
 * turn is rendered and submitted on the MCP thread. */
#ifndef OMNI_API_MCPLOOP_H
#define OMNI_API_MCPLOOP_H

#include <stdbool.h>

#include "src/api/errors.h"

struct api;
struct api_call;
struct apireq_gen;
struct cJSON;

struct mcploop_hooks {
    /* A call the loop runs: the OpenAI tool_calls entry and its server. */
    void (*tool_call)(struct api_call *c, const struct cJSON *call, const char *server, int turn);
    /* Its result: {"role":"tool","tool_call_id","name","content","server","is_error"}. */
    void (*tool_result)(struct api_call *c, const struct cJSON *msg, int turn);
};

struct mcploop;

/* A loop over chat_req (copied; "tool_execution" and "mcp_servers" are left
 * out of it) with the MCP tools of the named servers (NULL: those of its
 * {"type": "mcp", "server_label"} tools if it has any, else all; an empty
 * list: none, only the request's own tools) added to
 * its "tools". Takes *g (the caller's is left empty). NULL with a 400 in e:
 * no --mcp-config, an unknown server, a client tool named like an MCP tool,
 * no tools at all, n other than 1. hooks may be NULL; copied. */
struct mcploop *mcploop_new(struct api *a, const struct cJSON *chat_req, struct apireq_gen *g,
                            const char *const *servers, int n_servers,
                            const struct mcploop_hooks *hooks, struct api_error *e);
void mcploop_free(struct mcploop *l);

/* The sampling fields (owned by the loop) for the first turn's engine request. */
const struct apireq_gen *mcploop_gen(const struct mcploop *l);
/* The chat request of the current turn (caller deletes); NULL: no memory. */
struct cJSON *mcploop_request(const struct mcploop *l);
/* For api_call.turn_end: true when another turn follows (the loop then
 * submits it, or ends the call with api_call_end when it cannot). */
bool mcploop_turn_end(struct mcploop *l, struct api_call *c);

/* What the loop did, for the protocol's finish (under the call's lock). */
int mcploop_turns(const struct mcploop *l);
/* "answer", "client_tool", "max_turns", "cancelled" or "error". */
const char *mcploop_stopped(const struct mcploop *l);
/* The assistant and tool messages the loop added (OpenAI-shaped). */
const struct cJSON *mcploop_messages(const struct mcploop *l);
/* true with e when a later turn could not run (context full, ...). */
bool mcploop_error(const struct mcploop *l, struct api_error *e);

#endif
