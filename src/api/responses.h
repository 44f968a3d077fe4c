/* responses.h - the OpenAI Responses API: POST /v1/responses on the chat
 * path (the request becomes a chat-completions request that chatreq.h
 * renders with the model's template; the answer's chatout deltas become
 * output items, responses_out.h), plain or streamed with the Responses
 * event sequence; GET and DELETE /v1/responses/{id} and GET
 * /v1/responses/{id}/input_items over the bounded store of
 * responses_store.h, which also chains previous_response_id.
 *
 *   routes (api.c): responses_create, responses_get, responses_delete,
 *                   responses_input_items (arg: the {id})
 *   tests:  responses_request(root, prev_conversation, &chat, &conv, &items, &e)
 *
 * Thread safety: the routes run on ws workers (they parse bodies or print
 * stored JSON); the stream is written from the engine thread under the
 * call's lock; responses_request is stateless. */
#ifndef OMNI_API_RESPONSES_H
#define OMNI_API_RESPONSES_H

#include "src/api/errors.h"

struct api;
struct ws_req;
struct cJSON;

void responses_create(struct api *a, struct ws_req *r, const char *arg);      /* POST /v1/responses */
void responses_get(struct api *a, struct ws_req *r, const char *arg);         /* GET /v1/responses/{id} */
void responses_delete(struct api *a, struct ws_req *r, const char *arg);      /* DELETE /v1/responses/{id} */
void responses_input_items(struct api *a, struct ws_req *r, const char *arg); /* GET .../{id}/input_items */

/* A Responses request body -> the chat-completions request chatreq.h takes
 * (*chat: messages with the instructions as the system turn, function
 * tools, tool_choice, parallel_tool_calls, response_format from
 * text.format, reasoning_effort, max_tokens from max_output_tokens,
 * sampling fields, stream), *conversation (the chat messages without the
 * instructions: prev, when not NULL, then this input) and *items (the input
 * items as a list, each with an id). Built-in tools and unknown item or
 * part types give a 400 naming them. The caller deletes the three. */
int responses_request(const struct cJSON *root, const struct cJSON *prev, struct cJSON **chat,
                      struct cJSON **conversation, struct cJSON **items, struct api_error *e);

#endif
