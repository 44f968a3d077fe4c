/* responses_out.h - the output items of a Responses API answer, built from
 * the chat output builder's deltas (chatout.h): reasoning -> a "reasoning"
 * item (streamed as a summary part, the form the OpenAI clients display),
 * content -> a "message" item with one "output_text" part, each tool call
 * -> a "function_call" item. With an event function every step is also a
 * stream event in the order OpenAI sends them (output_item.added,
 * content_part.added, output_text.delta..., output_text.done,
 * content_part.done, output_item.done; function_call_arguments.delta/done;
 * reasoning_summary_part.added, reasoning_summary_text.delta/done,
 * reasoning_summary_part.done). The caller numbers the events.
 *
 *   struct responses_out *o = responses_out_new("0123abcd", on_event, user);
 *   chatout_feed(co, text, len, true, responses_out_delta, o);   // per token
 *   chatout_finish(co, responses_out_delta, o);
 *   responses_out_end(o);                 // closes the open item
 *   ... responses_out_items(o) ...
 *   responses_out_free(o);
 *
 * Thread safety: an object belongs to one call (used under its lock). */
#ifndef OMNI_API_RESPONSES_OUT_H
#define OMNI_API_RESPONSES_OUT_H

#include <stdbool.h>

struct cJSON;
struct chatout_delta;

/* One stream event ({"type": ..., ...}); the callee owns it. */
typedef void (*responses_event_fn)(void *user, struct cJSON *event);

/* id_base: the random part of item ids ("msg_<base>_<n>"), copied. fn
 * NULL: no events. NULL when out of memory. */
struct responses_out *responses_out_new(const char *id_base, responses_event_fn fn, void *user);
void responses_out_free(struct responses_out *o);
/* A chatout_fn (user: the builder). Whitespace alone opens no message. */
void responses_out_delta(void *out, const struct chatout_delta *d);
/* Closes the open item (the end of one generation turn). */
void responses_out_close(struct responses_out *o);
/* Closes the open item; an answer without any item gets an empty message. */
void responses_out_end(struct responses_out *o);
/* Calls of these tool names (a JSON array of strings, copied; NULL: none)
 * make no item: the server runs them (MCP) and adds its own item. */
void responses_out_skip_calls(struct responses_out *o, const struct cJSON *names);
/* A finished item made elsewhere (an mcp_call), taken: its added and done
 * events, in output order. Its "id" is set to "<prefix>_<base>_<n>". */
void responses_out_add(struct responses_out *o, const char *prefix, struct cJSON *item);
/* The finished items (owned by o). */
const struct cJSON *responses_out_items(const struct responses_out *o);
bool responses_out_has_calls(const struct responses_out *o);

#endif
