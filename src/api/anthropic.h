/* anthropic.h - the Anthropic-compatible routes: /v1/messages (plain and
 * streamed with Anthropic's event sequence) and /v1/messages/count_tokens.
 * Same calling convention as openai.h. Thread safety: service thread only. */
#ifndef OMNI_API_ANTHROPIC_H
#define OMNI_API_ANTHROPIC_H

struct api;
struct ws_req;

void anthropic_messages(struct api *a, struct ws_req *r, const char *arg);
void anthropic_count_tokens(struct api *a, struct ws_req *r, const char *arg);

#endif
