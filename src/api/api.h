/* api.h - the HTTP API on top of ws/ and the engine: routing, API key, CORS
 * (through ws), one log line and metrics per request, and the generation
 * "call" that carries a request to the engine and its events back to the
 * client. The protocol mappings live in openai.c and anthropic.c.
 *
 *   struct api_params ap = api_default_params();
 *   ap.served_model_name = "qwen2.5"; ap.api_key = key_or_NULL;
 *   struct api *a = api_new(&ap, err, sizeof err);
 *   wp.handler = api_handle; wp.on_done = api_on_done; wp.user = a;  // ws_server_params
 *   ... later, from the loader thread: api_set_engine(a, engine, model_index);
 *   ... or: api_set_unavailable(a, "no model: pass -m FILE.gguf");
 *
 * Thread safety: api_handle, api_upgrade and api_on_done run on the lws
 * service thread, which only routes and checks (API key, body size, content
 * type, draining) and answers the cheap GET routes (/health, /livez,
 * /metrics, /v1/models) and the cancel route; every route that reads a body
 * runs on a ws worker thread (ws_req_offload), as do its protocol functions
 * below up to api_call_submit. Several run at once: what they share is
 * read-only (the model, set before READY), atomic (the state) or locked (the
 * call registry, the metrics, each call); the engine, stt and image pool
 * take submissions from any thread. api_set_engine / api_set_unavailable
 * may be called once from any thread; engine events arrive on the engine
 * thread and touch only their own call (under its lock) and the metrics
 * (their own lock). */
#ifndef OMNI_API_H
#define OMNI_API_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "llm/chat.h"
#include "llm/reasoning.h"
#include "llm/tools/tools.h"
#include "llm/sampler.h"
#include "src/api/apireq.h"
#include "src/api/chatout.h"
#include "src/api/chatreq.h"
#include "src/api/errors.h"
#include "src/engine/engine.h"
#include "ws/ws_http.h"

struct cJSON;
struct tokenizer;
struct gguf;
struct api;

struct api_params {
    const char *api_key;           /* NULL or "": no key needed */
    const char *served_model_name; /* id in /v1/models and in responses; required */
    bool strict_model_id;          /* unknown "model" -> 404 (else served anyway) */
    const char *version;           /* for omniserve_build_info */
    const char *tool_parser;       /* tools_format name; NULL: from the chat template */
    const char *reasoning_format;  /* reasoning_format name; NULL: from the chat template */
    int responses_store_max;       /* stored Responses API answers (0: none are kept) */
    size_t responses_store_bytes;  /* and their total size */
    bool max_tokens_reject;        /* max_tokens past the context -> 400 (else clamped) */
};
struct api_params api_default_params(void);

struct api *api_new(const struct api_params *p, char *err, size_t errlen);
/* After the ws server is gone (no more handlers, no calls in flight). */
void api_free(struct api *a);

/* The model is loaded and the engine started: generation routes work and
 * /health answers 200. The api borrows e until api_free. */
void api_set_engine(struct api *a, struct engine *e, int model);
/* No model will come: generation routes answer 404 model_not_found with why
 * (copied) - a condition that retrying does not change. */
void api_set_unavailable(struct api *a, const char *why);

/* The speech service (serve --stt-model) for the audio and realtime routes;
 * set once before the server runs; the api borrows it. */
struct stt;
void api_set_stt(struct api *a, struct stt *stt);
struct stt *api_stt(struct api *a);   /* NULL: no speech model */

/* The image workers over the vision model (serve --mmproj, src/api/images.h);
 * set once before the server runs; the api borrows them. */
struct api_images_pool;
void api_set_images(struct api *a, struct api_images_pool *p);
struct api_images_pool *api_images(struct api *a);   /* NULL: no vision model */

/* The speech synthesizer (audio/tts) for /v1/audio/speech and voices; set
 * once before the server runs; the api borrows it. */
struct tts;
void api_set_tts(struct api *a, struct tts *t);
struct tts *api_tts(struct api *a);   /* NULL: no speech synthesis */

/* The MCP servers (serve --mcp-config, src/mcp/mcp.h) for the /v1/mcp routes and
 * "tool_execution": "server" (src/api/mcpapi.h), with the loop's turn limit;
 * set once before the server runs; the api borrows them. */
struct mcp;
void api_set_mcp(struct api *a, struct mcp *m, int max_turns);
struct mcp *api_mcp(struct api *a);   /* NULL: no MCP servers */
int api_mcp_max_turns(const struct api *a);

/* The embedding and rerank service (serve --embedding-model, --rerank-model,
 * --embeddings; src/embed/embed.h) once its models are loaded: set once
 * from any thread; the api borrows it. NULL: none (yet). */
struct embed_service;
void api_set_embed(struct api *a, struct embed_service *s);
struct embed_service *api_embed(struct api *a);
/* Still loading models (the state before api_set_engine/_unavailable). */
bool api_loading(struct api *a);

/* ws_server_params.handler, .upgrade and .on_done (service thread). Routes:
 * GET|HEAD /health (readiness: 503 while loading or draining), /livez
 * (liveness), /metrics, /v1/models[/{id}] inline; POST /v1/chat/completions,
 * /v1/completions, /v1/messages, /v1/messages/count_tokens, /tokenize,
 * /detokenize, /v1/responses (JSON bodies), GET|DELETE /v1/responses/{id}
 * and GET /v1/responses/{id}/input_items, /v1/audio/transcriptions|translations
 * (multipart) on a worker; POST /v1/requests/{id}/cancel inline. A body of
 * the wrong Content-Type gets 415; new generation requests get 503 while
 * the server drains. */
void api_handle(void *api, struct ws_req *r);
void api_upgrade(void *api, struct ws_req *r);
void api_on_done(void *api, const struct ws_done_info *d);

// ---- for the protocol files (openai.c, anthropic.c) ------------------------

/* The served model; fixed once api_set_engine ran. */
struct api_model {
    struct engine *engine;
    int index;                     /* engine model index */
    const struct tokenizer *tok;
    int n_ctx;
    int n_vocab;
    enum chat_format fmt;
    const char *name;              /* served name */
    const struct gguf *gguf;       /* for the chat template */
    enum tools_format tools_fmt;   /* how the model writes tool calls */
    enum reasoning_format rfmt;    /* how it marks reasoning */
    bool special_markup;           /* its tool/reasoning markers are control tokens to keep */
    bool max_tokens_reject;        /* api_params.max_tokens_reject */
};

/* The model, or NULL while none is ready (no response is sent). */
const struct api_model *api_model(struct api *a);
const char *api_served_name(const struct api *a);
/* The API key check of a request (true when no key is configured). */
bool api_key_ok(struct api *a, struct ws_req *r);
/* The model, or NULL after answering in flavor f: 503 + Retry-After while it
 * loads, 404 model_not_found when none will come. */
const struct api_model *api_model_or_503(struct api *a, struct ws_req *r, enum api_flavor f);
/* The "model" field against the served name: 0, or -1 with a 404 when
 * --strict-model-id is on and the name is unknown. NULL/absent is fine. */
int api_check_model(struct api *a, const char *requested, struct api_error *e);
long long api_started_at(const struct api *a); /* unix seconds */
struct metrics *api_metrics(struct api *a);
/* The store behind /v1/responses store and previous_response_id (any thread). */
struct responses_store *api_responses_store(struct api *a);

void api_respond_error(struct ws_req *r, enum api_flavor f, const struct api_error *e);
/* Prints body (then deletes it) as the response. */
void api_respond_json(struct ws_req *r, int status, struct cJSON *body);

/* text -> malloc'd ids (*ids, *n). flags: TOK_ADD_SPECIAL | TOK_PARSE_SPECIAL. */
int api_tokenize(const struct tokenizer *tok, const char *text, int flags, int32_t **ids, int *n,
                 struct api_error *e);
/* Render an OpenAI-shaped messages array (tool_calls, tool turns), the
 * tools array (NULL: none) and template kwargs (enable_thinking, ...; NULL)
 * with the model's chat template (built-in format as the fallback), and
 * tokenize. *text (may be NULL) gets the rendered prompt (caller frees). A
 * template that raises gives a 400 with its message. */
int api_chat_prompt_json(const struct api_model *m, const struct cJSON *messages,
                         const struct cJSON *tools, const struct cJSON *kwargs, int32_t **ids,
                         int *n, char **text, struct api_error *e);
/* 400 "context_length_exceeded" naming both numbers when the prompt leaves
 * no room for the completion, or (max_tokens_reject) when prompt plus
 * max_tokens does not fit. Otherwise max_tokens past the context is clamped:
 * the engine ends the answer at the context's end (finish "length"), as
 * llama.cpp's server does. */
int api_check_context(const struct api_model *m, int n_prompt, const struct apireq_gen *g,
                      struct api_error *e);

struct api_lp {                    /* one generated token with its log-probabilities */
    int32_t token;
    struct sampler_logprobs lp;
};

struct api_choice {                /* engine thread, under the call's lock */
    char *text;                    /* everything generated so far */
    size_t len, cap;
    struct api_lp *lps;            /* when logprobs were asked for */
    int n_lps, cap_lps;
    bool done, error;
    enum engine_finish finish;
    int stop_index;
    int tokens;
    double last_token_s;           /* for inter-token latency */
    struct chatout *chat;          /* chat routes: reasoning / tool-call split (freed with the call) */
    int n_forced;                  /* reasoning budget: closing tokens forced so far */
};

struct api_call;
/* Protocol hooks, called on the engine thread under the call's lock. */
struct api_proto {
    /* Text now safe to show for one choice (stream deltas); lp/token may be
     * NULL/-1 for text flushed at the end. */
    void (*text)(struct api_call *c, int choice, const char *text, size_t len,
                 const struct sampler_logprobs *lp, int32_t token);
    /* A choice ended (c->choices[choice] tells how). */
    void (*choice_done)(struct api_call *c, int choice);
    /* Every choice ended: write the rest (the whole body when not streaming).
     * The caller then ends the response. */
    void (*finish)(struct api_call *c);
};

/* One generation request from submission to its last event. Owned by its
 * ws_out: freed when both the connection and the engine side let go. Fields
 * below `lock` are written on the engine thread under it. */
struct api_call {
    struct api *api;
    const struct api_proto *proto;
    enum api_flavor flavor;
    struct ws_out *out;
    const struct tokenizer *tok;
    uint64_t engine_id;            /* {lock} set when the engine took it */
    struct api_call *reg_next;     /* {api registry lock} */
    char id[96];                   /* response id: "chatcmpl-<request id>", ... */
    char req_id[72];               /* x-request-id */
    const char *model_name;
    long long created;             /* unix seconds */
    bool stream, include_usage, logprobs, echo;
    int top_logprobs;
    int n;
    char **stops;                  /* the client's stop strings (copied), for reports */
    int n_stops;
    char *echo_text;               /* /v1/completions echo: the prompt text */
    double t_submit;
    pthread_mutex_t lock;
    struct api_choice *choices;    /* [n] */
    int n_done;
    int prompt_tokens, cached_tokens, completion_tokens;
    bool first_token_seen;
    bool timed_out;
    char error[256];               /* first ENGINE_EV_ERROR message */
    int state;                     /* the protocol's own progress marker */
    void *proto_state;             /* the protocol's own object, freed with proto_state_free */
    void (*proto_state_free)(void *);
    /* Optional (set after api_call_new), before proto->finish: every choice
     * ended. true: another turn follows on this call (mcpapi.c's tool
     * loop): the response stays open until the protocol calls
     * api_call_next_turn + api_call_resubmit, or api_call_end. */
    bool (*turn_end)(struct api_call *c);
    /* Reasoning budget: once a choice has generated reasoning_budget tokens
     * inside its reasoning, force_ids (the closing text) are fed to it. */
    int32_t *force_ids;
    int n_force_ids, reasoning_budget;
};

/* A call for n choices with the id "<id_prefix><request id>"; stream,
 * include_usage and logprobs come from g. NULL when out of memory. */
struct api_call *api_call_new(struct api *a, struct ws_req *r, const struct api_proto *proto,
                              enum api_flavor f, const char *id_prefix,
                              const struct apireq_gen *g);
/* Frees a call that was never submitted. */
void api_call_free(struct api_call *c);
/* Defer the response (r NULL: api_call_defer did; then any thread), submit
 * rq (on_event/user are filled in) and, once the engine took it, run
 * start(c) under the call's lock so its output (role chunk, message_start)
 * precedes every token. On refusal answers 429 with
 * Retry-After (queue full), 400 (context, bad parameters) or 500 itself.
 * The call belongs to the response from here on, also on failure. */
int api_call_submit(struct api_call *c, struct ws_req *r, struct engine_request *rq,
                    void (*start)(struct api_call *c));
/* The first half of api_call_submit (the route's thread): the response is
 * deferred, so that another thread can call api_call_submit(c, NULL, ...)
 * later (a 429 then has no Retry-After) or answer with api_call_fail.
 * 0, or -1 after answering 500 (the call is freed). */
int api_call_defer(struct api_call *c, struct ws_req *r);
/* Answer a deferred call that was not submitted with e (any thread); the
 * call belongs to its response from here on. */
void api_call_fail(struct api_call *c, const struct api_error *e);
/* A call whose turn_end went on (any thread, the call's lock not held):
 * api_call_next_turn clears the choices (text, output builders, forced
 * tokens) for the next turn; api_call_resubmit submits it (rq as for
 * api_call_submit; -1 with e when the engine refuses); api_call_end
 * finishes the response (proto->finish) and lets the call go. */
void api_call_next_turn(struct api_call *c);
int api_call_resubmit(struct api_call *c, struct engine_request *rq, struct api_error *e);
void api_call_end(struct api_call *c);

#endif
