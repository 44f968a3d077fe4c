/* errors.h - API errors as HTTP statuses and JSON bodies, in the shape each
 * protocol's clients expect: OpenAI {"error":{"message","type","param","code"}}
 * and Anthropic {"type":"error","error":{"type","message"}}.
 *
 *   struct api_error e;
 *   api_error_set(&e, 400, "temperature", "'temperature' must be a number, got a string");
 *   size_t len; char *json = api_error_json(API_OPENAI, &e, &len);  // caller frees
 *
 * Thread safety: stateless; any thread. */
#ifndef OMNI_API_ERRORS_H
#define OMNI_API_ERRORS_H

#include <stddef.h>

enum api_flavor { API_OPENAI, API_ANTHROPIC };

struct api_error {
    int status;              /* HTTP status */
    char param[64];          /* OpenAI "param": the offending field, "" for none */
    const char *code;        /* OpenAI "code" (static string) or NULL */
    char message[512];
};

/* Fill e; param may be NULL. Returns -1 so parsers can `return api_error_set(...)`. */
int api_error_set(struct api_error *e, int status, const char *param, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* The error "type" string for a status in a flavor ("invalid_request_error",
 * "authentication_error", "not_found_error", "rate_limit_error", ...). */
const char *api_error_type(enum api_flavor f, int status);

/* Error body as a malloc'd NUL-terminated string (*len without the NUL), or
 * NULL when out of memory. */
char *api_error_json(enum api_flavor f, const struct api_error *e, size_t *len);

#endif
