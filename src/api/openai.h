/* openai.h - the OpenAI-compatible routes: chat completions, completions,
 * models, and the tokenize/detokenize extras. Each takes the request after
 * api_handle routed it and checked the key; arg is the path parameter
 * ({id}) or "". Thread safety: service thread only. */
#ifndef OMNI_API_OPENAI_H
#define OMNI_API_OPENAI_H

struct api;
struct ws_req;

void openai_models(struct api *a, struct ws_req *r, const char *arg);      /* GET /v1/models */
void openai_model(struct api *a, struct ws_req *r, const char *arg);       /* GET /v1/models/{id} */
void openai_chat(struct api *a, struct ws_req *r, const char *arg);        /* POST /v1/chat/completions */
void openai_completions(struct api *a, struct ws_req *r, const char *arg); /* POST /v1/completions */
void openai_tokenize(struct api *a, struct ws_req *r, const char *arg);    /* POST /tokenize */
void openai_detokenize(struct api *a, struct ws_req *r, const char *arg);  /* POST /detokenize */

#endif
