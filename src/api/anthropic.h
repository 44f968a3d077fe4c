/* anthropic.h - the Anthropic-compatible routes: /v1/messages (plain and
 * streamed with Anthropic's event sequence; tools, tool_use / tool_result
 * and thinking blocks) and /v1/messages/count_tokens. Same calling
 * convention as openai.h. Thread safety: the routes run on the service
 * thread; a struct anthropic_blocks belongs to one call (under its lock).
 *
 * The content blocks of an answer come from the output builder's deltas
 * (chatout.h), as the route does it and tests can:
 *
 *   struct anthropic_blocks *b = anthropic_blocks_new(on_event, user);
 *   chatout_feed(o, text, len, true, anthropic_blocks_delta, b);  // per token
 *   chatout_finish(o, anthropic_blocks_delta, b);
 *   anthropic_blocks_end(b);          // closes the last block
 *   ... anthropic_blocks_content(b) ...
 *   anthropic_blocks_free(b); */
#ifndef OMNI_API_ANTHROPIC_H
#define OMNI_API_ANTHROPIC_H

#include <stdbool.h>

struct api;
struct ws_req;
struct cJSON;
struct chatout_delta;

void anthropic_messages(struct api *a, struct ws_req *r, const char *arg);
void anthropic_count_tokens(struct api *a, struct ws_req *r, const char *arg);

/* The /v1/messages body root as the OpenAI-shaped request chatreq.h takes
 * (messages with system/tool turns, tools, tool_choice, parallel_tool_calls,
 * enable_thinking/thinking_budget, reasoning_effort, response_format). System
 * turns inside messages stay in place, or with fold are appended to the
 * first system message; *n_system counts them. NULL with a 400 naming the
 * field. Caller frees with cJSON_Delete. */
struct api_error;
struct cJSON *anthropic_to_chat(const struct cJSON *root, bool fold, int *n_system,
                                struct api_error *e);

/* A stream event: name ("content_block_start", ...) and its data, which the
 * callee owns. */
typedef void (*anthropic_event_fn)(void *user, const char *name, struct cJSON *data);

/* fn NULL: no events, only the content. NULL when out of memory. */
struct anthropic_blocks *anthropic_blocks_new(anthropic_event_fn fn, void *user);
void anthropic_blocks_free(struct anthropic_blocks *b);
/* A chatout_fn (user: the blocks): reasoning -> thinking block
 * (thinking_delta, then signature_delta when it closes), content -> text
 * block (text_delta; whitespace alone opens none), a call -> tool_use block
 * (id "toolu_...", input_json_delta fragments). */
void anthropic_blocks_delta(void *blocks, const struct chatout_delta *d);
/* Closes the open block; an answer without any block gets an empty text one. */
void anthropic_blocks_end(struct anthropic_blocks *b);
/* The finished blocks: text {text}, thinking {thinking, signature},
 * tool_use {id, name, input (object)}. Owned by b. */
const struct cJSON *anthropic_blocks_content(const struct anthropic_blocks *b);
bool anthropic_blocks_tool_use(const struct anthropic_blocks *b);

#endif
