/* openai.h - the OpenAI-compatible routes: chat completions, completions,
 * models, and the tokenize/detokenize extras. Each takes the request after
 * api_handle routed it and checked the key; arg is the path parameter
 * ({id}) or "". Thread safety: service thread only. */
#ifndef OMNI_API_OPENAI_H
#define OMNI_API_OPENAI_H

#include <cjson/cJSON.h>

struct api;
struct ws_req;
struct api_call;

void openai_models(struct api *a, struct ws_req *r, const char *arg);      /* GET /v1/models */
void openai_model(struct api *a, struct ws_req *r, const char *arg);       /* GET /v1/models/{id} */
void openai_chat(struct api *a, struct ws_req *r, const char *arg);        /* POST /v1/chat/completions */
void openai_completions(struct api *a, struct ws_req *r, const char *arg); /* POST /v1/completions */
void openai_tokenize(struct api *a, struct ws_req *r, const char *arg);    /* POST /tokenize */
void openai_detokenize(struct api *a, struct ws_req *r, const char *arg);  /* POST /detokenize */

/* A chat completion (chunk) envelope: id, object, created, model,
 * system_fingerprint and an empty choices array (*choices). */
cJSON *openai_envelope(const struct api_call *c, const char *object, cJSON **choices);
/* Send one chunk as an SSE event (usage: null added when the stream asked
 * for usage and the chunk has none); the chunk is freed. */
void openai_send(struct api_call *c, cJSON *chunk);

#endif
