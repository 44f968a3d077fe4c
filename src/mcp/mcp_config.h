/* mcp_config.h - the MCP servers file of `serve --mcp-config FILE.json`, in
 * the format most MCP clients share:
 *
 *   {"mcpServers": {
 *      "files": {"command": "node", "args": ["srv.js"], "env": {"K": "V"}},
 *      "web":   {"url": "http://127.0.0.1:9000/mcp", "headers": {"Authorization": "Bearer x"}}}}
 *
 * A server with "command" speaks MCP over its stdin/stdout; one with "url"
 * over Streamable HTTP. "type"/"transport" ("stdio", "http",
 * "streamable-http") may say which; "disabled": true leaves one out.
 *
 *   struct mcp_config *cfg;
 *   if (mcp_config_load("mcp.json", &cfg, err, sizeof err) < 0) -> err names file and field
 *   ... cfg->servers[i] ...
 *   mcp_config_free(cfg);
 *
 * Thread safety: a config is read-only once loaded. */
#ifndef OMNI_MCP_CONFIG_H
#define OMNI_MCP_CONFIG_H

#include <stddef.h>

#define MCP_CONFIG_MAX_SERVERS 64
#define MCP_CONFIG_MAX_BYTES (1 << 20)   /* a larger file is not a config */

enum mcp_transport { MCP_STDIO, MCP_HTTP };

struct mcp_server_spec {
    char *name;
    enum mcp_transport transport;
    char *command;        /* stdio: the program (searched in PATH) */
    char **args;          /* stdio: argv[1..], n_args of them */
    int n_args;
    char **env;           /* stdio: "KEY=VALUE" added to the server's environment */
    int n_env;
    char *cwd;            /* stdio: working directory, or NULL */
    char *url;            /* http: the MCP endpoint */
    char **headers;       /* http: "Name: value" sent with every request */
    int n_headers;
};

struct mcp_config {
    struct mcp_server_spec *servers;
    int n_servers;
};

/* Reads and checks path. 0, or a negative omni_err with err naming the file
 * and the field ("mcp.json: 'mcpServers.web.url' must be an http(s) URL"). */
int mcp_config_load(const char *path, struct mcp_config **out, char *err, size_t errlen);
/* The same from text in memory; file only names it in messages. */
int mcp_config_parse(const char *text, size_t len, const char *file, struct mcp_config **out,
                     char *err, size_t errlen);
void mcp_config_free(struct mcp_config *c);

#endif
