/* mcp_config.c - the "mcpServers" JSON file: every field checked, every
 * error naming the file and the field, so that a typo stops `serve` at
 * startup instead of surfacing as a tool that silently never appears. */
#include "src/mcp/mcp_config.h"

#include "src/core/omni.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void mcp_config_free(struct mcp_config *c)
{
    if (!c)
        return;
    for (int i = 0; i < c->n_servers; i++) {
        struct mcp_server_spec *s = &c->servers[i];
        free(s->name);
        free(s->command);
        free(s->cwd);
        free(s->url);
        for (int k = 0; k < s->n_args; k++)
            free(s->args[k]);
        free(s->args);
        for (int k = 0; k < s->n_env; k++)
            free(s->env[k]);
        free(s->env);
        for (int k = 0; k < s->n_headers; k++)
            free(s->headers[k]);
        free(s->headers);
    }
    free(c->servers);
    free(c);
}

/* Server names become tool-name prefixes and log tags: keep them plain. */
static bool mcp_config_name_ok(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n > 64)
        return false;
    for (; *s; s++)
        if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9') ||
              *s == '_' || *s == '-' || *s == '.'))
            return false;
    return true;
}

static bool mcp_config_has_ctl(const char *s)
{
    for (; *s; s++)
        if ((unsigned char)*s < 0x20 || *s == 0x7f)
            return true;
    return false;
}

/* "args": an array of strings -> (*out)[*n]. */
static int mcp_config_strings(const cJSON *a, const char *file, const char *field, char ***out,
                              int *n, char *err, size_t errlen)
{
    if (!a || cJSON_IsNull(a))
        return 0;
    if (!cJSON_IsArray(a))
        return omni_fail(err, errlen, OMNI_ERR_FORMAT, "%s: '%s' must be an array of strings",
                         file, field);
    int count = cJSON_GetArraySize(a);
    if (count > 1024)
        return omni_fail(err, errlen, OMNI_ERR_LIMIT, "%s: '%s' has %d entries (at most 1024)",
                         file, field, count);
    if (!(*out = calloc((size_t)count + 1, sizeof **out)))
        return omni_fail(err, errlen, OMNI_ERR_NOMEM, "%s: out of memory", file);
    const cJSON *x;
    int i = 0;
    cJSON_ArrayForEach(x, a) {
        if (!cJSON_IsString(x))
            return omni_fail(err, errlen, OMNI_ERR_FORMAT, "%s: '%s[%d]' must be a string", file,
                             field, i);
        if (!((*out)[i] = strdup(x->valuestring)))
            return omni_fail(err, errlen, OMNI_ERR_NOMEM, "%s: out of memory", file);
        *n = ++i;
    }
    return 0;
}

/* "env" / "headers": an object of strings -> "K<sep>V" entries. */
static int mcp_config_pairs(const cJSON *o, const char *file, const char *field, const char *sep,
                            bool header, char ***out, int *n, char *err, size_t errlen)
{
    if (!o || cJSON_IsNull(o))
        return 0;
    if (!cJSON_IsObject(o))
        return omni_fail(err, errlen, OMNI_ERR_FORMAT, "%s: '%s' must be an object of strings",
                         file, field);
    int count = cJSON_GetArraySize(o);
    if (count > 256)
        return omni_fail(err, errlen, OMNI_ERR_LIMIT, "%s: '%s' has %d entries (at most 256)",
                         file, field, count);
    if (!(*out = calloc((size_t)count + 1, sizeof **out)))
        return omni_fail(err, errlen, OMNI_ERR_NOMEM, "%s: out of memory", file);
    const cJSON *x;
    cJSON_ArrayForEach(x, o) {
        if (!cJSON_IsString(x))
            return omni_fail(err, errlen, OMNI_ERR_FORMAT, "%s: '%s.%s' must be a string", file,
                             field, x->string);
        const char *k = x->string;
        if (!*k || strchr(k, '=') || (header && (strchr(k, ':') || strpbrk(k, " \t"))) ||
            mcp_config_has_ctl(k) || (header && mcp_config_has_ctl(x->valuestring)))
            return omni_fail(err, errlen, OMNI_ERR_FORMAT, "%s: '%s.%s' is not a valid %s", file,
                             field, k, header ? "header" : "variable");
        size_t len = strlen(k) + strlen(sep) + strlen(x->valuestring) + 1;
        char *s = malloc(len);
        if (!s)
            return omni_fail(err, errlen, OMNI_ERR_NOMEM, "%s: out of memory", file);
        snprintf(s, len, "%s%s%s", k, sep, x->valuestring);
        (*out)[(*n)++] = s;
    }
    return 0;
}

static int mcp_config_server(const cJSON *v, const char *file, struct mcp_server_spec *s,
                             char *err, size_t errlen)
{
    char f[160];
    const char *name = v->string;
    if (!mcp_config_name_ok(name))
        return omni_fail(err, errlen, OMNI_ERR_FORMAT,
                         "%s: 'mcpServers.%.64s': a server name is 1-64 letters, digits, '_', '-' or '.'",
                         file, name);
    if (!(s->name = strdup(name)))
        return omni_fail(err, errlen, OMNI_ERR_NOMEM, "%s: out of memory", file);
    if (!cJSON_IsObject(v))
        return omni_fail(err, errlen, OMNI_ERR_FORMAT, "%s: 'mcpServers.%s' must be an object",
                         file, name);
    const cJSON *cmd = cJSON_GetObjectItemCaseSensitive(v, "command");
    const cJSON *url = cJSON_GetObjectItemCaseSensitive(v, "url");
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(v, "type");
    if (!type)
        type = cJSON_GetObjectItemCaseSensitive(v, "transport");
    if (type && !cJSON_IsNull(type)) {
        const char *t = cJSON_IsString(type) ? type->valuestring : "";
        bool http = !strcmp(t, "http") || !strcmp(t, "streamable-http") ||
                    !strcmp(t, "streamableHttp") || !strcmp(t, "streamable_http");
        if (!http && strcmp(t, "stdio") != 0)
            return omni_fail(err, errlen, OMNI_ERR_UNSUPPORTED,
                             "%s: 'mcpServers.%s.type' must be \"stdio\" or \"http\" "
                             "(Streamable HTTP; the old SSE transport is not supported)",
                             file, name);
        if (http && !url)
            return omni_fail(err, errlen, OMNI_ERR_FORMAT, "%s: 'mcpServers.%s.url' is required "
                             "for an http server", file, name);
        if (!http && !cmd)
            return omni_fail(err, errlen, OMNI_ERR_FORMAT, "%s: 'mcpServers.%s.command' is "
                             "required for a stdio server", file, name);
    }
    if (cmd && url)
        return omni_fail(err, errlen, OMNI_ERR_FORMAT,
                         "%s: 'mcpServers.%s' has both 'command' and 'url'; give one", file, name);
    if (!cmd && !url)
        return omni_fail(err, errlen, OMNI_ERR_FORMAT,
                         "%s: 'mcpServers.%s' needs 'command' (stdio) or 'url' (HTTP)", file, name);
    if (cmd) {
        s->transport = MCP_STDIO;
        if (!cJSON_IsString(cmd) || !*cmd->valuestring)
            return omni_fail(err, errlen, OMNI_ERR_FORMAT,
                             "%s: 'mcpServers.%s.command' must be a non-empty string", file, name);
        if (!(s->command = strdup(cmd->valuestring)))
            return omni_fail(err, errlen, OMNI_ERR_NOMEM, "%s: out of memory", file);
        snprintf(f, sizeof f, "mcpServers.%s.args", name);
        if (mcp_config_strings(cJSON_GetObjectItemCaseSensitive(v, "args"), file, f, &s->args,
                               &s->n_args, err, errlen) < 0)
            return -1;
        snprintf(f, sizeof f, "mcpServers.%s.env", name);
        if (mcp_config_pairs(cJSON_GetObjectItemCaseSensitive(v, "env"), file, f, "=", false,
                             &s->env, &s->n_env, err, errlen) < 0)
            return -1;
        const cJSON *cwd = cJSON_GetObjectItemCaseSensitive(v, "cwd");
        if (cwd && !cJSON_IsNull(cwd)) {
            if (!cJSON_IsString(cwd))
                return omni_fail(err, errlen, OMNI_ERR_FORMAT,
                                 "%s: 'mcpServers.%s.cwd' must be a string", file, name);
            if (!(s->cwd = strdup(cwd->valuestring)))
                return omni_fail(err, errlen, OMNI_ERR_NOMEM, "%s: out of memory", file);
        }
    } else {
        s->transport = MCP_HTTP;
        if (!cJSON_IsString(url) || (strncmp(url->valuestring, "http://", 7) != 0 &&
                                     strncmp(url->valuestring, "https://", 8) != 0) ||
            mcp_config_has_ctl(url->valuestring))
            return omni_fail(err, errlen, OMNI_ERR_FORMAT,
                             "%s: 'mcpServers.%s.url' must be an http:// or https:// URL", file,
                             name);
        if (!(s->url = strdup(url->valuestring)))
            return omni_fail(err, errlen, OMNI_ERR_NOMEM, "%s: out of memory", file);
        snprintf(f, sizeof f, "mcpServers.%s.headers", name);
        if (mcp_config_pairs(cJSON_GetObjectItemCaseSensitive(v, "headers"), file, f, ": ", true,
                             &s->headers, &s->n_headers, err, errlen) < 0)
            return -1;
    }
    return 0;
}

int mcp_config_parse(const char *text, size_t len, const char *file, struct mcp_config **out,
                     char *err, size_t errlen)
{
    *out = NULL;
    struct mcp_config *c = calloc(1, sizeof *c);
    if (!c)
        return omni_fail(err, errlen, OMNI_ERR_NOMEM, "%s: out of memory", file);
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(text, len, &end, false);
    int rc = -1;
    if (!root) {
        size_t off = end && end >= text ? (size_t)(end - text) : 0;
        rc = omni_fail(err, errlen, OMNI_ERR_FORMAT, "%s: not valid JSON (near byte %zu)", file,
                       off);
        goto out;
    }
    const cJSON *servers = cJSON_GetObjectItemCaseSensitive(root, "mcpServers");
    if (!cJSON_IsObject(root) || !cJSON_IsObject(servers)) {
        rc = omni_fail(err, errlen, OMNI_ERR_FORMAT,
                       "%s: 'mcpServers' must be an object of servers ({\"mcpServers\": "
                       "{\"name\": {\"command\": ...} | {\"url\": ...}}})", file);
        goto out;
    }
    int n = cJSON_GetArraySize(servers);
    if (n > MCP_CONFIG_MAX_SERVERS) {
        rc = omni_fail(err, errlen, OMNI_ERR_LIMIT, "%s: 'mcpServers' has %d servers (at most %d)",
                       file, n, MCP_CONFIG_MAX_SERVERS);
        goto out;
    }
    if (!(c->servers = calloc((size_t)(n ? n : 1), sizeof *c->servers))) {
        rc = omni_fail(err, errlen, OMNI_ERR_NOMEM, "%s: out of memory", file);
        goto out;
    }
    const cJSON *v;
    cJSON_ArrayForEach(v, servers) {
        const cJSON *dis = cJSON_GetObjectItemCaseSensitive(v, "disabled");
        if (cJSON_IsTrue(dis))
            continue;
        for (int i = 0; i < c->n_servers; i++)
            if (!strcmp(c->servers[i].name, v->string)) {
                rc = omni_fail(err, errlen, OMNI_ERR_FORMAT,
                               "%s: 'mcpServers.%.64s' is given twice", file, v->string);
                goto out;
            }
        struct mcp_server_spec *s = &c->servers[c->n_servers++];
        if ((rc = mcp_config_server(v, file, s, err, errlen)) < 0)
            goto out;
    }
    rc = 0;
    *out = c;
    c = NULL;
out:
    cJSON_Delete(root);
    mcp_config_free(c);
    return rc;
}

int mcp_config_load(const char *path, struct mcp_config **out, char *err, size_t errlen)
{
    *out = NULL;
    FILE *f = fopen(path, "rb");
    if (!f)
        return omni_fail(err, errlen, OMNI_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    char *buf = malloc(MCP_CONFIG_MAX_BYTES + 1);
    size_t n = buf ? fread(buf, 1, MCP_CONFIG_MAX_BYTES + 1, f) : 0;
    bool rerr = ferror(f);
    fclose(f);
    int rc;
    if (!buf)
        rc = omni_fail(err, errlen, OMNI_ERR_NOMEM, "%s: out of memory", path);
    else if (rerr)
        rc = omni_fail(err, errlen, OMNI_ERR_IO, "%s: cannot read", path);
    else if (n > MCP_CONFIG_MAX_BYTES)
        rc = omni_fail(err, errlen, OMNI_ERR_LIMIT, "%s: larger than %d bytes", path,
                       MCP_CONFIG_MAX_BYTES);
    else
        rc = mcp_config_parse(buf, n, path, out, err, errlen);
    free(buf);
    return rc;
}
