/* chatout.h - one choice's generated text as an assistant message: the
 * reasoning splitter (llm/reasoning.h) then the tool-call parser
 * (llm/tools/tools.h), reporting deltas for streams and keeping the whole
 * message (content, reasoning, tool calls) for the final response. Shared by
 * the OpenAI and Anthropic output builders, and testable without a server.
 *
 *   struct chatout_params cp = chatout_default_params();
 *   cp.rfmt = REASONING_THINK; cp.starts_open = true; cp.tools = true; cp.tp.fmt = ...;
 *   struct chatout *o = chatout_new(&cp);
 *   chatout_feed(o, text, len, true, on_delta, user);  // per engine token
 *   chatout_finish(o, on_delta, user);
 *   ... chatout_content(o), chatout_reasoning(o), chatout_calls(o) ...
 *   chatout_free(o);
 *
 * Thread safety: an object belongs to one call (used under its lock). */
#ifndef OMNI_API_CHATOUT_H
#define OMNI_API_CHATOUT_H

#include <stdbool.h>
#include <stddef.h>

#include "llm/reasoning.h"
#include "llm/tools/tools.h"

struct cJSON;

enum chatout_kind { CHATOUT_CONTENT, CHATOUT_REASONING, CHATOUT_CALL_START, CHATOUT_CALL_ARGS };

struct chatout_delta {
    enum chatout_kind kind;
    int index;               /* calls */
    const char *id, *name;   /* CALL_START */
    const char *text;        /* CONTENT, REASONING, CALL_ARGS */
    size_t len;
};
typedef void (*chatout_fn)(void *user, const struct chatout_delta *d);

struct chatout_params {
    enum reasoning_format rfmt;
    bool starts_open;        /* the prompt opened reasoning */
    bool tools;              /* parse tool calls (tools given and tool_choice not "none") */
    struct tools_parser_params tp;
};
struct chatout_params chatout_default_params(void);

struct chatout *chatout_new(const struct chatout_params *p);   /* NULL: no memory */
void chatout_free(struct chatout *o);
/* token: the text came with one generated token (counted for reasoning_tokens). */
void chatout_feed(struct chatout *o, const char *text, size_t len, bool token, chatout_fn fn,
                  void *user);
/* Flushes held text; calls written only inside the reasoning are reported
 * when the answer has none. */
void chatout_finish(struct chatout *o, chatout_fn fn, void *user);

const char *chatout_content(const struct chatout *o);     /* never NULL */
const char *chatout_reasoning(const struct chatout *o);   /* never NULL */
int chatout_reasoning_tokens(const struct chatout *o);
bool chatout_in_reasoning(const struct chatout *o);        /* inside reasoning now */
int chatout_n_calls(const struct chatout *o);
/* OpenAI tool_calls: [{"id","type":"function","function":{"name","arguments"}}] (owned by o). */
const struct cJSON *chatout_calls(const struct chatout *o);

#endif
