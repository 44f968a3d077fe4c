/* apireq.h - request-body parsing shared by the OpenAI and Anthropic routes:
 * JSON with a nesting limit, typed field getters whose errors name the field,
 * sampling parameters, stop strings, text content, and the API-key check.
 *
 *   struct api_error e;
 *   cJSON *root = apireq_parse(body, len, &e);          // NULL: 400 in e
 *   struct apireq_gen g; apireq_gen_init(&g);
 *   if (apireq_sampling(root, API_OPENAI, n_vocab, &g, &e) < 0) -> respond e
 *   ... g.sp, g.max_tokens, g.stop ...
 *   apireq_gen_free(&g); cJSON_Delete(root);
 *
 * Thread safety: stateless; any thread (a struct apireq_gen belongs to one). */
#ifndef OMNI_API_APIREQ_H
#define OMNI_API_APIREQ_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "llm/sampler.h"
#include "src/api/errors.h"

struct cJSON;

#define APIREQ_MAX_DEPTH 64    /* deepest JSON nesting a request may use */
#define APIREQ_MAX_STOPS 16
#define APIREQ_MAX_N 16        /* choices per request */

/* The body as a JSON object; NULL with a 400 in e for an empty body,
 * malformed JSON (with the byte offset), nesting beyond APIREQ_MAX_DEPTH or a
 * top level that is not an object. Free with cJSON_Delete. */
struct cJSON *apireq_parse(const char *body, size_t len, struct api_error *e);

/* Deepest nesting of objects and arrays in JSON text (string contents are
 * skipped). Stops scanning once limit is passed and returns limit + 1. */
int apireq_json_depth(const char *text, size_t len, int limit);

/* Typed getters. Return 0 when the key is absent or null (out untouched), 1
 * when present and valid, -1 with a 400 naming the field otherwise. */
int apireq_number(const struct cJSON *obj, const char *key, double lo, double hi, double *out,
                  struct api_error *e);
int apireq_int(const struct cJSON *obj, const char *key, long lo, long hi, long *out,
               struct api_error *e);
int apireq_bool(const struct cJSON *obj, const char *key, bool *out, struct api_error *e);
int apireq_string(const struct cJSON *obj, const char *key, const char **out,
                  struct api_error *e);

/* What a generation route asks for, protocol-independent. */
struct apireq_gen {
    struct sampler_params sp;           /* sp.logit_bias points into bias */
    struct sampler_logit_bias *bias;
    char **stop;                        /* n_stop strings, owned */
    int n_stop;
    int n;                              /* choices; default 1 */
    int max_tokens;                     /* 0 = up to the context */
    bool max_tokens_set;
    bool stream;
    bool include_usage;                 /* stream_options.include_usage */
    bool logprobs;
    int top_logprobs;
    double timeout_s;                   /* "timeout" field; 0 = none */
};
void apireq_gen_init(struct apireq_gen *g);
void apireq_gen_free(struct apireq_gen *g);

/* Sampling and generation fields of the flavor (OpenAI: temperature, top_p,
 * top_k, min_p, presence/frequency/repetition_penalty, seed, n, max_tokens or
 * max_completion_tokens, stop, logit_bias, logprobs/top_logprobs, stream,
 * stream_options, timeout; Anthropic: temperature, top_p, top_k, max_tokens
 * (required), stop_sequences, stream, timeout). n_vocab bounds logit_bias ids
 * (0: unchecked). completions: the legacy route, where "logprobs" is a count. */
int apireq_sampling(const struct cJSON *root, enum api_flavor f, bool completions, int n_vocab,
                    struct apireq_gen *g, struct api_error *e);

/* Server-wide logit biases added to every generation request that does not
 * bias the same token itself (serve --logit-bias, llama.cpp's -l): spec is
 * "ID+BIAS,ID-BIAS,..." (BIAS in -100..100; "ID-inf" bans). Call once
 * before serving (not thread-safe); NULL or "" clears. 0, or an omni_err
 * with the reason in err. */
int apireq_set_default_bias(const char *spec, char *err, size_t errlen);

/* Message content as one string: a string, or an array of {"type":"text",
 * "text":...} parts joined with newlines; null gives "". field names the
 * content in errors ("messages[2].content"). *out is malloc'd. */
int apireq_text_content(const struct cJSON *content, const char *field, char **out,
                        struct api_error *e);

/* The output constraint a request asks for: "grammar" (GBNF text, a
 * llama.cpp server extension) or "response_format" json_object / json_schema
 * ({"json_schema": {"name", "schema", "strict"}}). 0 with *out NULL when the
 * output is free; 0 with a grammar (caller frees with grammar_free); -1 with
 * a 400 naming the grammar position or the schema keyword. */
struct grammar;
struct tools_wire;
int apireq_grammar(const struct cJSON *root, struct grammar **out, struct api_error *e);

/* The grammar that forces a tool call when tool_choice is "required" or
 * names a function ({"type":"function","function":{"name":N}}), spelled as
 * wire says. Under "auto" (or no tool_choice) with tools, the same grammar
 * for any of them as a lazy one: *trigger is the format's call marker, the
 * engine applies it from there on (NULL trigger: formats without a marker,
 * or tools whose schemas it cannot compile; then *out is NULL too).
 * 0 with *out NULL for "none" or no tools. */
int apireq_tool_grammar(const struct cJSON *root, const struct tools_wire *wire, bool parallel,
                        struct grammar **out, const char **trigger, struct api_error *e);

/* The HTTP status for an engine's error event (engine_event.error): 400 when
 * the request caused it - a limit of its grammar ("grammar: limit: ...") or
 * "every token is banned" by its grammar or logit_bias - else 500. */
int apireq_engine_error_status(const char *error);

/* The API key check: "Authorization: Bearer KEY" or "x-api-key: KEY",
 * compared in constant time for a given key length. */
bool apireq_key_ok(const char *authorization, const char *x_api_key, const char *key);

/* What a route's body must be, by its Content-Type header. A JSON body is
 * "application/json" or "application/<anything>+json"; multipart is
 * "multipart/form-data". Parameters (charset, boundary) are allowed, case
 * is ignored. Requiring the type keeps browsers from posting to the API
 * without a CORS preflight (text/plain and form bodies need none). */
enum apireq_body { APIREQ_BODY_ANY, APIREQ_BODY_JSON, APIREQ_BODY_MULTIPART };
bool apireq_content_type_ok(const char *content_type, enum apireq_body want);

#endif
