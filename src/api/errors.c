/* errors.c - API error bodies for OpenAI and Anthropic clients. Both SDKs pick
 * their exception class from the HTTP status and show "message"; the type
 * strings follow each vendor's documented list. */
#include "src/api/errors.h"

#include <cjson/cJSON.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

int api_error_set(struct api_error *e, int status, const char *param, const char *fmt, ...)
{
    e->status = status;
    e->code = NULL;
    snprintf(e->param, sizeof e->param, "%s", param ? param : "");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->message, sizeof e->message, fmt, ap);
    va_end(ap);
    return -1;
}

const char *api_error_type(enum api_flavor f, int status)
{
    if (f == API_ANTHROPIC) {
        switch (status) {
        case 401: return "authentication_error";
        case 403: return "permission_error";
        case 404: return "not_found_error";
        case 413: return "request_too_large";
        case 429: return "rate_limit_error";
        case 503: case 529: return "overloaded_error";
        default: return status >= 500 ? "api_error" : "invalid_request_error";
        }
    }
    switch (status) {
    case 401: return "authentication_error";
    case 403: return "permission_error";
    case 404: return "not_found_error";
    case 408: return "timeout_error";
    case 429: return "rate_limit_error";
    case 503: return "service_unavailable_error";
    default: return status >= 500 ? "server_error" : "invalid_request_error";
    }
}

char *api_error_json(enum api_flavor f, const struct api_error *e, size_t *len)
{
    cJSON *root = cJSON_CreateObject(), *err = cJSON_CreateObject();
    char *out = NULL;
    if (!root || !err) {
        cJSON_Delete(err);
        goto done;
    }
    if (f == API_ANTHROPIC)
        cJSON_AddStringToObject(root, "type", "error");
    cJSON_AddItemToObject(root, "error", err);
    if (f == API_ANTHROPIC) {
        cJSON_AddStringToObject(err, "type", api_error_type(f, e->status));
        cJSON_AddStringToObject(err, "message", e->message);
    } else {
        cJSON_AddStringToObject(err, "message", e->message);
        cJSON_AddStringToObject(err, "type", api_error_type(f, e->status));
        if (e->param[0])
            cJSON_AddStringToObject(err, "param", e->param);
        else
            cJSON_AddNullToObject(err, "param");
        if (e->code)
            cJSON_AddStringToObject(err, "code", e->code);
        else
            cJSON_AddNullToObject(err, "code");
    }
    out = cJSON_PrintUnformatted(root);
done:
    cJSON_Delete(root);
    if (out && len)
        *len = strlen(out);
    return out;
}
