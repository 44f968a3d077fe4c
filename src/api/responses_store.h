/* responses_store.h - the bounded in-memory store behind the Responses API's
 * `store` and `previous_response_id`: per response id, the response object
 * (GET /v1/responses/{id}), the conversation it ended (chat-shaped messages
 * without the instructions, the assistant turn included, for chaining) and
 * its input items (GET .../input_items). Least recently used entries go
 * first once either limit is passed; nothing survives a restart.
 *
 *   struct responses_store *s = responses_store_new(1024, 64 << 20);
 *   responses_store_put(s, "resp_1", response_json, conversation_json, items_json);
 *   char *conv;
 *   if (responses_store_get(s, "resp_1", NULL, &conv, NULL) == 0) ... free(conv);
 *   responses_store_delete(s, "resp_1");
 *   responses_store_free(s);
 *
 * Thread safety: every function may be called from any thread (one lock);
 * returned strings are copies the caller frees. */
#ifndef OMNI_API_RESPONSES_STORE_H
#define OMNI_API_RESPONSES_STORE_H

#include <stdbool.h>
#include <stddef.h>

#define RESPONSES_STORE_DEFAULT_MAX 1024                  /* --responses-store */
#define RESPONSES_STORE_DEFAULT_BYTES ((size_t)64 << 20)  /* --responses-store-mb */

struct responses_store;

/* max_entries 0: nothing is kept (every put is refused). NULL: no memory. */
struct responses_store *responses_store_new(int max_entries, size_t max_bytes);
void responses_store_free(struct responses_store *s);   /* NULL: no-op */

/* Keeps copies of the three JSON texts under id (replacing an entry of the
 * same id), then evicts the least recently used entries past the limits.
 * 0, or -1 when the entry alone is larger than max_bytes, the store keeps
 * nothing, or memory ran out (the store is unchanged then). */
int responses_store_put(struct responses_store *s, const char *id, const char *response,
                        const char *conversation, const char *input_items);
/* Copies of what is asked for (NULL pointers: not wanted); marks the entry
 * recently used. 0, or -1 when id is not stored (or out of memory). */
int responses_store_get(struct responses_store *s, const char *id, char **response,
                        char **conversation, char **input_items);
bool responses_store_delete(struct responses_store *s, const char *id);
int responses_store_count(struct responses_store *s);
size_t responses_store_bytes(struct responses_store *s);

#endif
