/* mcp.h - the Model Context Protocol client of `serve --mcp-config`: it
 * starts the stdio servers of the config (fork/exec, pipes, stderr to the
 * log under the server's name) and connects to the Streamable-HTTP ones
 * (libcurl), speaks MCP 2025-06-18 to both (initialize, initialized,
 * tools/list with its cursor, tools/call, tools/list_changed -> refresh,
 * ping), restarts a server that dies with exponential backoff, and runs the
 * tool calls a model asks for concurrently, each within the tool timeout.
 *
 *   struct mcp_params p = mcp_default_params();
 *   p.tool_timeout_s = 30;
 *   struct mcp *m = mcp_new(cfg, &p, err, sizeof err);     // returns at once; servers connect
 *   struct mcp_toolset *ts = mcp_toolset_get(m, NULL, 0, err, sizeof err);   // all servers
 *   cJSON *tools = mcp_toolset_openai(ts);                  // OpenAI function tools
 *   mcp_call_batch(m, ts, calls, n, on_done, user, err, sizeof err);
 *   ... on_done(user, results, n) on an MCP thread ...
 *   mcp_toolset_free(ts);
 *   mcp_free(m);                                            // children killed and reaped
 *
 * Thread safety: every function may be called from any thread. Each server
 * has a supervisor thread (connect, restart, refresh) and, for stdio, a
 * stdout and a stderr reader; each batch runs on threads of its own, which
 * call on_done. Tool calls never block the caller: a hanging server costs
 * its own call at most tool_timeout_s. */
#ifndef OMNI_MCP_H
#define OMNI_MCP_H

#include <stdbool.h>
#include <stddef.h>

#include "src/mcp/mcp_config.h"

struct cJSON;
struct mcp;
struct mcp_toolset;

struct mcp_params {
    double tool_timeout_s;       /* a tools/call answers within; default 60 */
    double init_timeout_s;       /* each start-up request (initialize, tools/list); default 30 */
    size_t max_message_bytes;    /* one JSON-RPC message from a server; default 16 MiB */
    size_t max_result_bytes;     /* tool output given to the model; default 32 KiB */
    double restart_min_s;        /* first restart delay of a failed server; default 1 */
    double restart_max_s;        /* the delay doubles up to this; default 60 */
    int max_calls;               /* calls of one batch run at once (the rest wait); default 16 */
    const char *client_version;  /* clientInfo.version; default "" */
};
struct mcp_params mcp_default_params(void);

/* Copies cfg and starts connecting to its servers in the background (a
 * stdio server that cannot start is a "failed" server, retried, not an
 * error here). NULL only when out of memory or a thread cannot start. */
struct mcp *mcp_new(const struct mcp_config *cfg, const struct mcp_params *p, char *err,
                    size_t errlen);
/* Stops everything: calls in flight fail at once (their batches' on_done
 * still run, before this returns), stdio servers get EOF and SIGTERM, then
 * SIGKILL after 2 s, and are reaped; HTTP sessions are deleted. NULL: no-op. */
void mcp_free(struct mcp *m);

/* Waits up to timeout_s for every server to be connected or failed (not
 * starting). true when none is starting any more. */
bool mcp_wait_ready(struct mcp *m, double timeout_s);
int mcp_n_servers(const struct mcp *m);
bool mcp_has_server(const struct mcp *m, const char *name);

/* GET /v1/mcp/servers: {"object":"list","data":[{"name","transport",
 * "status":"starting|connected|failed","error","restarts","tools",
 * "server_info"}]}. GET /v1/mcp/tools: {"object":"list","data":[{"server",
 * "name","function_name","description","inputSchema"}]}. Caller deletes. */
struct cJSON *mcp_servers_json(struct mcp *m);
struct cJSON *mcp_tools_json(struct mcp *m);

/* The tools of the named servers (servers NULL: every server; an empty
 * list: none) as they are now.
 * A tool's function_name - what the model calls it - is its MCP name, or
 * "server__name" when two servers have a tool of that name. NULL with err
 * when a name is not a configured server. */
struct mcp_toolset *mcp_toolset_get(struct mcp *m, const char *const *servers, int n,
                                    char *err, size_t errlen);
void mcp_toolset_free(struct mcp_toolset *ts);
int mcp_toolset_count(const struct mcp_toolset *ts);
/* The server of a function name in ts, or NULL when ts has no such tool. */
const char *mcp_toolset_server(const struct mcp_toolset *ts, const char *function_name);
/* [{"type":"function","function":{"name","description","parameters"}}]; caller deletes. */
struct cJSON *mcp_toolset_openai(const struct mcp_toolset *ts);

/* One call a model made: function name (as in the toolset) and arguments
 * (JSON text; "" means {}). */
struct mcp_call {
    const char *name;
    const char *arguments;
};
struct mcp_result {
    const char *server, *tool;   /* NULL when the name was not in the toolset */
    char *text;                  /* what the model reads: the output or why there is none */
    bool is_error;
    double ms;
};
/* Runs calls (copied) concurrently on threads of the MCP module; once all
 * are done, done(user, results, n) runs on one of them (results valid
 * during the call only). Failures - unknown tool, server down or
 * restarting, bad arguments, timeout, MCP error - are results with
 * is_error and a message for the model, never a missing callback. 0, or -1
 * (err) when the batch cannot start (done is then not called). */
typedef void (*mcp_done_fn)(void *user, struct mcp_result *results, int n);
int mcp_call_batch(struct mcp *m, const struct mcp_toolset *ts, const struct mcp_call *calls,
                   int n, mcp_done_fn done, void *user, char *err, size_t errlen);

#endif
