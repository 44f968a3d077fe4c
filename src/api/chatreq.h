/* chatreq.h - the front of a chat request, shared by the OpenAI and
 * Anthropic routes: an OpenAI-shaped request (messages with tool_calls,
 * reasoning_content and tool turns; tools, tool_choice, parallel_tool_calls,
 * chat_template_kwargs, enable_thinking, reasoning_effort, thinking_budget,
 * grammar, response_format) becomes the prompt rendered by the model's chat
 * template, the output constraint, and per choice the output builder and
 * the reasoning budget. The Anthropic route translates its fields first.
 *
 *   struct chatreq cr;
 *   if (chatreq_build(m, req, &g, &cr, &e) < 0) -> respond e
 *   struct api_call *c = api_call_new(...);
 *   rq = sampling fields from g;
 *   if (chatreq_attach(&cr, m, c, &rq, &e) < 0) -> api_call_free(c), respond e
 *   api_call_submit(c, r, &rq, start);
 *   chatreq_free(&cr);   // after submit: the engine copied what it needs
 *
 * Thread safety: stateless functions; a struct chatreq belongs to one thread. */
#ifndef OMNI_API_CHATREQ_H
#define OMNI_API_CHATREQ_H

#include <stdbool.h>
#include <stdint.h>

#include "src/api/errors.h"

struct cJSON;
struct api_model;
struct api_call;
struct apireq_gen;
struct engine_request;
struct grammar;

/* Reasoning budgets of reasoning_effort (tokens; "high": none). */
#define CHATREQ_BUDGET_MINIMAL 128
#define CHATREQ_BUDGET_LOW 1024
#define CHATREQ_BUDGET_MEDIUM 4096

struct chatreq {
    int32_t *ids;                /* the rendered prompt's tokens */
    int n_ids;
    char *prompt;                /* the rendered prompt */
    char *tools_text;            /* the OpenAI tools array as JSON, or NULL */
    bool tools_on;               /* tools given and tool_choice not "none" */
    bool parallel;               /* parallel_tool_calls */
    int reasoning_budget;        /* tokens inside reasoning before the close is forced; -1: none */
    struct grammar *grammar;     /* the output constraint (forced call, schema) or NULL */
    const char *grammar_trigger; /* lazy grammar (tool_choice auto): the call marker, static */
    bool grammar_close;          /* the grammar spells tool calls: close it within max_tokens */
    const char **stops;          /* the client's stops, then the end-of-turn text */
    int n_stops;
};

/* Validate the messages and agent fields of req and render them with the
 * model's template (for /tokenize and count_tokens too). 0, or -1 with a
 * 400 naming the field. cr is fully set (free with chatreq_free either way). */
int chatreq_render(const struct api_model *m, const struct cJSON *req, struct chatreq *cr,
                   struct api_error *e);
/* chatreq_render, then the context check against g, the output grammar
 * (tool_choice required/named replaces grammar/response_format) and stops. */
int chatreq_build(const struct api_model *m, const struct cJSON *req,
                  const struct apireq_gen *g, struct chatreq *cr, struct api_error *e);
/* The chat parts of an engine request (prompt, stops, grammar, control-token
 * text) and of the call (an output builder per choice, the reasoning budget).
 * rq borrows cr's prompt, stops and grammar until api_call_submit returns. */
int chatreq_attach(const struct chatreq *cr, const struct api_model *m, struct api_call *c,
                   struct engine_request *rq, struct api_error *e);
void chatreq_free(struct chatreq *cr);

#endif
