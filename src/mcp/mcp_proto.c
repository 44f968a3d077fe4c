/* mcp_proto.c - JSON-RPC messages, the SSE parser and tool results for the
 * MCP client. Every limit is a parameter: a server that streams an endless
 * event or a gigabyte of tool output gets an error, not the memory. */
#include "src/mcp/mcp_proto.h"

#include "src/core/omni.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum mcp_msg_kind mcp_msg_classify(const cJSON *msg, int64_t *id)
{
    *id = -1;
    if (!cJSON_IsObject(msg))
        return MCP_MSG_INVALID;
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(msg, "jsonrpc");
    if (!cJSON_IsString(v) || strcmp(v->valuestring, "2.0") != 0)
        return MCP_MSG_INVALID;
    const cJSON *jid = cJSON_GetObjectItemCaseSensitive(msg, "id");
    const cJSON *method = cJSON_GetObjectItemCaseSensitive(msg, "method");
    if (cJSON_IsNumber(jid) && jid->valuedouble >= 0 && jid->valuedouble < 9e15 &&
        jid->valuedouble == (double)(int64_t)jid->valuedouble)
        *id = (int64_t)jid->valuedouble;
    if (method) {
        if (!cJSON_IsString(method))
            return MCP_MSG_INVALID;
        if (!jid || cJSON_IsNull(jid))
            return MCP_MSG_NOTIFICATION;
        return cJSON_IsNumber(jid) || cJSON_IsString(jid) ? MCP_MSG_REQUEST : MCP_MSG_INVALID;
    }
    if (!jid)
        return MCP_MSG_INVALID;
    const cJSON *res = cJSON_GetObjectItemCaseSensitive(msg, "result");
    const cJSON *err = cJSON_GetObjectItemCaseSensitive(msg, "error");
    if ((res != NULL) == (err != NULL))
        return MCP_MSG_INVALID;
    return MCP_MSG_RESPONSE;
}

char *mcp_msg_request(int64_t id, const char *method, const cJSON *params)
{
    cJSON *o = cJSON_CreateObject();
    if (!o)
        return NULL;
    cJSON_AddStringToObject(o, "jsonrpc", "2.0");
    if (id >= 0)
        cJSON_AddNumberToObject(o, "id", (double)id);
    cJSON_AddStringToObject(o, "method", method);
    if (params)
        cJSON_AddItemToObject(o, "params", cJSON_Duplicate(params, true));
    char *s = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return s;
}

char *mcp_msg_response(const cJSON *id, int code, const char *message)
{
    cJSON *o = cJSON_CreateObject();
    if (!o)
        return NULL;
    cJSON_AddStringToObject(o, "jsonrpc", "2.0");
    cJSON_AddItemToObject(o, "id", id ? cJSON_Duplicate(id, true) : cJSON_CreateNull());
    if (code) {
        cJSON *e = cJSON_AddObjectToObject(o, "error");
        cJSON_AddNumberToObject(e, "code", code);
        cJSON_AddStringToObject(e, "message", message ? message : "error");
    } else {
        cJSON_AddObjectToObject(o, "result");
    }
    char *s = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return s;
}

// ---- SSE ----------------------------------------------------------------------

void mcp_sse_init(struct mcp_sse *p, size_t max_bytes)
{
    *p = (struct mcp_sse){ .max_bytes = max_bytes };
}

void mcp_sse_free(struct mcp_sse *p)
{
    free(p->line);
    free(p->data);
    *p = (struct mcp_sse){ 0 };
}

/* One complete line (without its end). */
static int mcp_sse_line(struct mcp_sse *p, mcp_sse_fn fn, void *user)
{
    const char *l = p->line ? p->line : "";
    size_t n = p->line_len;
    if (n == 0) {                    /* blank line: dispatch */
        if (p->has_data)
            fn(user, p->data ? p->data : "", p->data_len);
        p->data_len = 0;
        p->has_data = false;
        return 0;
    }
    if (l[0] == ':')                 /* comment */
        return 0;
    const char *colon = memchr(l, ':', n);
    size_t fl = colon ? (size_t)(colon - l) : n;
    if (fl != 4 || memcmp(l, "data", 4) != 0)
        return 0;                    /* event, id, retry: not needed here */
    const char *v = colon ? colon + 1 : l + n;
    size_t vl = colon ? n - fl - 1 : 0;
    if (vl > 0 && *v == ' ') {
        v++;
        vl--;
    }
    size_t need = p->data_len + (p->has_data ? 1 : 0) + vl + 1;
    if (need > p->max_bytes)
        return -1;
    if (omni_reserve(&p->data, &p->data_cap, need) < 0)
        return -1;
    if (p->has_data)
        p->data[p->data_len++] = '\n';
    memcpy(p->data + p->data_len, v, vl);
    p->data_len += vl;
    p->data[p->data_len] = 0;
    p->has_data = true;
    return 0;
}

int mcp_sse_feed(struct mcp_sse *p, const char *buf, size_t len, mcp_sse_fn fn, void *user)
{
    for (size_t i = 0; i < len; i++) {
        char ch = buf[i];
        if (ch == '\n') {
            /* CRLF: the CR was kept; drop it */
            if (p->line_len > 0 && p->line[p->line_len - 1] == '\r')
                p->line_len--;
            if (mcp_sse_line(p, fn, user) < 0)
                return -1;
            p->line_len = 0;
            continue;
        }
        if (p->line_len + 2 > p->max_bytes)
            return -1;
        if (omni_reserve(&p->line, &p->line_cap, p->line_len + 2) < 0)
            return -1;
        p->line[p->line_len++] = ch;
        p->line[p->line_len] = 0;
    }
    return 0;
}

// ---- tool results -----------------------------------------------------------------

char *mcp_text_cap(char *s, size_t cap)
{
    if (!s)
        return NULL;
    size_t n = strlen(s);
    if (n <= cap)
        return s;
    size_t cut = cap;
    /* back up over UTF-8 continuation bytes so no character is split */
    while (cut > 0 && ((unsigned char)s[cut] & 0xC0) == 0x80)
        cut--;
    char note[96];
    int nl = snprintf(note, sizeof note, "\n[... truncated: %zu of %zu bytes shown]", cut, n);
    char *o = malloc(cut + (size_t)nl + 1);
    if (o) {
        memcpy(o, s, cut);
        memcpy(o + cut, note, (size_t)nl + 1);
    }
    free(s);
    return o;
}

static int mcp_append(char **buf, size_t *len, size_t *cap, const char *s, size_t n, size_t limit)
{
    /* keep collecting a little past the cap: mcp_text_cap reports the size */
    if (*len >= limit)
        return 0;
    if (n > limit - *len)
        n = limit - *len;
    if (omni_reserve(buf, cap, *len + n + 2) < 0)
        return -1;
    if (*len > 0)
        (*buf)[(*len)++] = '\n';
    memcpy(*buf + *len, s, n);
    *len += n;
    (*buf)[*len] = 0;
    return 0;
}

char *mcp_result_text(const cJSON *result, size_t cap, bool *is_error)
{
    *is_error = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(result, "isError"));
    size_t limit = cap < ((size_t)1 << 40) ? cap + 1 : cap;   /* one byte over: "was cut" */
    char *buf = NULL, tmp[256];
    size_t len = 0, bcap = 0;
    const cJSON *content = cJSON_GetObjectItemCaseSensitive(result, "content");
    const cJSON *part, *parts = cJSON_IsArray(content) ? content : NULL;
    int rc = 0;
    cJSON_ArrayForEach(part, parts) {
        const char *type = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(part, "type"));
        const char *text = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(part, "text"));
        const char *mime = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(part, "mimeType"));
        if (type && !strcmp(type, "text") && text) {
            rc = mcp_append(&buf, &len, &bcap, text, strlen(text), limit);
        } else if (type && (!strcmp(type, "image") || !strcmp(type, "audio"))) {
            const char *d = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(part, "data"));
            int n = snprintf(tmp, sizeof tmp, "[%s: %.60s, %zu bytes of base64]", type,
                             mime ? mime : "unknown type", d ? strlen(d) : 0);
            rc = mcp_append(&buf, &len, &bcap, tmp, (size_t)n, limit);
        } else if (type && !strcmp(type, "resource")) {
            const cJSON *r = cJSON_GetObjectItemCaseSensitive(part, "resource");
            const char *rt = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(r, "text"));
            const char *uri = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(r, "uri"));
            if (rt) {
                rc = mcp_append(&buf, &len, &bcap, rt, strlen(rt), limit);
            } else {
                int n = snprintf(tmp, sizeof tmp, "[resource: %.200s]", uri ? uri : "?");
                rc = mcp_append(&buf, &len, &bcap, tmp, (size_t)n, limit);
            }
        } else if (type && !strcmp(type, "resource_link")) {
            const char *uri = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(part, "uri"));
            int n = snprintf(tmp, sizeof tmp, "[resource link: %.200s]", uri ? uri : "?");
            rc = mcp_append(&buf, &len, &bcap, tmp, (size_t)n, limit);
        }
        if (rc < 0)
            break;
    }
    if (rc == 0 && len == 0) {
        const cJSON *sc = cJSON_GetObjectItemCaseSensitive(result, "structuredContent");
        char *s = sc ? cJSON_PrintUnformatted(sc) : NULL;
        if (s)
            rc = mcp_append(&buf, &len, &bcap, s, strlen(s), limit);
        free(s);
    }
    if (rc < 0) {
        free(buf);
        return NULL;
    }
    if (!buf)
        return strdup("");
    /* the real size is unknown once collection stopped at the limit; say so */
    if (len > cap) {
        size_t cut = cap;
        while (cut > 0 && ((unsigned char)buf[cut] & 0xC0) == 0x80)
            cut--;
        int n = snprintf(tmp, sizeof tmp, "\n[... truncated: the tool's output is over %zu bytes]",
                         cap);
        char *o = malloc(cut + (size_t)n + 1);
        if (o) {
            memcpy(o, buf, cut);
            memcpy(o + cut, tmp, (size_t)n + 1);
        }
        free(buf);
        return o;
    }
    return buf;
}
