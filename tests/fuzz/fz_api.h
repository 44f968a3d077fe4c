/* fz_api.h - the HTTP API (src/api) without sockets, threads or models, for
 * the fuzz_api_* targets. fz_api.c replaces, at link time, the modules the
 * routes talk to: the transport (ws/ws_http.h, ws/ws_socket.h: requests
 * built in memory, responses collected and checked), the engine
 * (src/engine/engine.h: a request is recorded and then answered with
 * generated text from the fuzz input), the model (llm/model.h: a tiny
 * vocabulary and one of the chat templates under tests/fixtures/templates)
 * and the speech service (src/stt: sessions that count audio and emit
 * canned events). Everything between - routing, the API-key check, body
 * parsing, chat rendering, grammars, output mapping - is the real code.
 *
 *   fz_api_init();                                        // LLVMFuzzerInitialize
 *   struct fz_http h = { .method = "POST", .path = "/v1/chat/completions",
 *                        .body = body, .body_len = n, .model = 3 };
 *   fz_api_http(&h, generated, generated_len);            // aborts on a finding
 *
 * Findings (abort): a handler that returns without answering, a 5xx answer,
 * a JSON body or event that does not parse, a response that never ends after
 * the engine's final events. Leaks are LeakSanitizer's. Single-threaded. */
#ifndef OMNI_FZ_API_H
#define OMNI_FZ_API_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* What the fake engine does with a submitted request. */
enum fz_engine_mode {
    FZ_ENGINE_ACCEPT,       /* take it and answer with the generated text */
    FZ_ENGINE_BUSY,         /* OMNI_ERR_LIMIT: queue full (429) */
    FZ_ENGINE_REFUSE,       /* OMNI_ERR_ARG: prompt too long for the context (400) */
    FZ_ENGINE_CLIENT_LEAVES,/* take it, then the client disconnects mid-answer */
};

struct fz_http {
    const char *method;          /* "GET", "POST", ... */
    const char *path;            /* without the query */
    const char *query;           /* "a=1&b=2" or NULL */
    const char *content_type;    /* header value or NULL */
    const char *authorization;   /* header value or NULL */
    const uint8_t *body;
    size_t body_len;
    int model;                   /* template index, any int (taken modulo fz_api_n_models) */
    enum fz_engine_mode engine;
    bool finish_length;          /* the engine's choices end by length, not stop */
    bool with_stt;               /* a speech service is loaded */
    bool stt_vad;                /* ... with a VAD model */
};

void fz_api_init(void);
int fz_api_n_models(void);
/* The fields every target takes from its first two input bytes: flags bits
 * 0-1 engine mode, 2 finish by length, 3 send an Authorization header (4: the
 * right key), 5 no speech service, 6 speech service with VAD; bit 7 is the
 * target's own; model picks the chat template. */
void fz_api_flags(struct fz_http *h, uint8_t flags, uint8_t model);
/* One HTTP transaction; gen[gen_len] is what the model "generates" for
 * every choice (made valid UTF-8 and cut into tokens). */
void fz_api_http(const struct fz_http *h, const uint8_t *gen, size_t gen_len);

/* One WebSocket connection to path: the handshake (h's method and body are
 * ignored), then each message in turn (a message whose first byte is 0x01
 * is sent as binary, without that byte), each followed by the engine's
 * answers (reply[reply_len] for every request a conversation submitted),
 * then the client closes. */
void fz_api_ws(const struct fz_http *h, const uint8_t *const *msg, const size_t *msg_len,
               int n_msg, const uint8_t *reply, size_t reply_len);

#endif
