/* mcpapi.h - MCP tools over HTTP: GET /v1/mcp/servers and /v1/mcp/tools,
 * and chat completions with "tool_execution": "server", where the server
 * runs the MCP tools the model calls (src/mcp/mcp.h) and generates again
 * until the model answers without calls, at most --mcp-max-turns times:
 *
 *   generate -> tool calls (the model's tool parser) -> MCP calls, run
 *   concurrently -> the results as tool messages -> generate again
 *
 * The last allowed turn runs with tool_choice "none", so an answer always
 * ends in text. See docs/mcp.md for the request and response fields.
 *
 *   serve: api_set_mcp(api, mcp, max_turns);
 *   openai_chat: if (mcpapi_wanted(root)) { mcpapi_chat(a, r, root, &g); ... }
 *
 * The loop itself is protocol-independent (mcploop.h): the Responses API
 * ({"type": "mcp", "server_label": ...} tools) runs it the same way.
 *
 * Thread safety: the routes run where api.c runs them (the service thread
 * for the GET routes, a ws worker for chat); the loop's turns end on the
 * engine thread and its tool results arrive on MCP threads, each touching
 * its call under the call's lock. */
#ifndef OMNI_API_MCPAPI_H
#define OMNI_API_MCPAPI_H

#include <stdbool.h>

#include "src/api/errors.h"

struct api;
struct ws_req;
struct cJSON;
struct apireq_gen;
struct mcp_toolset;

/* GET /v1/mcp/servers and GET /v1/mcp/tools (404 without --mcp-config). */
void mcpapi_servers_route(struct api *a, struct ws_req *r, const char *arg);
void mcpapi_tools_route(struct api *a, struct ws_req *r, const char *arg);

/* Does this chat request ask for server-side tool execution? (a cheap look
 * at "tool_execution"; the field is checked properly by mcpapi_chat) */
bool mcpapi_wanted(const struct cJSON *req);
/* The chat completion with server-side MCP tools; answers r itself (400s
 * included). Takes *g (left empty for the caller's apireq_gen_free). */
void mcpapi_chat(struct api *a, struct ws_req *r, const struct cJSON *req, struct apireq_gen *g);

/* The MCP tools of the named servers (NULL: all; an empty list: none) for
 * a request, as OpenAI function tools in *tools (caller deletes) and the
 * toolset in *ts (free with mcp_toolset_free: it maps function names back
 * to servers for mcp_call_batch). -1 with a 400 naming field when a server
 * is unknown or no --mcp-config was given. */
int mcpapi_tools_for(struct api *a, const char *const *servers, int n, const char *field,
                     struct cJSON **tools, struct mcp_toolset **ts, struct api_error *e);

#endif
