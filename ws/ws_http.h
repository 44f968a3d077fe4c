/* ws_http.h - the HTTP/1.1 front door: routing hook, request bodies with a
 * size limit, responses produced later by other threads, SSE streams with
 * backpressure, keep-alive and pipelining, CORS, Host/Origin checks,
 * per-client limits, handlers offloaded to worker threads, graceful
 * shutdown and, with a certificate, HTTPS and WSS on the same port.
 * libwebsockets accepts connections, does TLS and moves bytes; the HTTP/1.1
 * framing (RFC 9112) and WebSocket framing (ws_socket.h) are done here.
 *
 *   struct ws_server_params p = ws_default_params();
 *   p.port = 8000; p.handler = my_handler; p.user = my_state;
 *   struct ws_server *s = ws_server_new(&p, err, sizeof err);
 *   ws_server_run(s);            // service loop on this thread until shutdown
 *   ws_server_free(s);
 *
 *   my_handler(user, r):         // service thread, once the whole body is in
 *     ws_req_respond(r, 200, "application/json", body, len);      // at once, or
 *     struct ws_out *o = ws_req_defer(r, on_abort, on_free, st);  // later:
 *     ... any thread: ws_out_start(o, 200, "text/event-stream", true);
 *                     ws_out_sse(o, NULL, json, len); ws_out_end(o); ws_out_release(o);
 *     ws_req_offload(r, my_worker_fn);                            // or: heavy work
 *
 * Thread safety: the service thread (the one inside ws_server_run) owns the
 * lws context, every socket and every struct ws_req it passes to handlers;
 * it only moves bytes, so anything slow (parsing a large body, templates,
 * grammars, media) belongs on a worker: ws_req_offload hands the request to
 * one of the server's worker threads as a detached copy. struct ws_out is
 * the only object other threads share: its functions take its lock and wake
 * the service thread with lws_cancel_service(), which then writes in
 * WRITEABLE callbacks. ws_server_stop() may be called from any thread or a
 * signal handler.
 *
 * What the server answers by itself (JSON error bodies, connection closed):
 * 400 malformed request line, header field, Content-Length or chunked body,
 * or a Transfer-Encoding whose final coding is not chunked; 501 other
 * transfer codings; 505 HTTP other than 1.0/1.1; 414 request line over 8 KiB;
 * 431 header block over 16 KiB or over 100 fields; 417 an Expect other than
 * 100-continue; 408 a request not complete within request_timeout_s; 403 a
 * Host that does not name this machine while listening on loopback, or an
 * Origin that is neither --cors-origin nor this server; 503 over
 * max_conns_per_ip or max_connections. With TLS on, a client that speaks
 * plain HTTP to the port gets no answer: the connection is closed. */
#ifndef OMNI_WS_HTTP_H
#define OMNI_WS_HTTP_H

#include <stdbool.h>
#include <stddef.h>

struct ws_server;
struct ws_req;  /* one HTTP transaction; valid during the handler (service thread), or
                   during an offloaded fn (its worker) */
struct ws_out;  /* a response produced by any thread; reference counted */

enum ws_method { WS_GET, WS_POST, WS_OPTIONS, WS_PUT, WS_PATCH, WS_DELETE, WS_HEAD, WS_OTHER };

/* What on_done hears when a transaction ends (service thread). */
struct ws_done_info {
    const char *request_id;
    const char *method;
    const char *path;
    const char *route;       /* ws_req_set_route() label, else "unmatched" */
    int status;
    double duration_ms;      /* headers in -> last byte out */
    int tokens_in, tokens_out; /* ws_out_set_tokens() */
    bool aborted;            /* the client left (or shutdown cut it) before the end */
};

typedef void (*ws_handler_fn)(void *user, struct ws_req *r);
/* A WebSocket handshake (service thread): r has the path, query and headers
 * but no body; accept with ws_req_accept_websocket, else it is refused: with
 * the answer the hook gave (ws_req_respond, e.g. 401), else 404. Handshakes
 * never reach the hook when malformed (400), from a Host or Origin not
 * allowed (403) or while draining (503). */
typedef void (*ws_upgrade_fn)(void *user, struct ws_req *r);
typedef void (*ws_done_fn)(void *user, const struct ws_done_info *d);
/* Per-response callbacks: on_abort runs once, when the client disconnects
 * before ws_out_end (or shutdown gives up waiting): on the service thread, or
 * - when an offloaded handler deferred after the client had left - on its
 * worker right after the handler returns. on_free runs on whichever thread
 * drops the last reference. */
typedef void (*ws_abort_fn)(void *user);
typedef void (*ws_free_fn)(void *user);

struct ws_server_params {
    const char *host;          /* listen address; default "127.0.0.1" */
    int port;                  /* default 8000; must be > 0 */
    size_t max_body_bytes;     /* larger bodies get 413; default 32 MiB */
    const char *cors_origin;   /* NULL: no CORS headers; "*" or one origin */
    int sse_keepalive_ms;      /* ": keep-alive" comment on idle streams; default 15000 */
    size_t max_pending_bytes;  /* unsent bytes per response before the client counts
                                  as stuck and is dropped; default 16 MiB */
    double shutdown_timeout_s; /* graceful drain before in-flight work is aborted; default 10 */
    ws_handler_fn handler;     /* required */
    ws_done_fn on_done;        /* optional: one call per finished transaction */
    ws_upgrade_fn upgrade;     /* optional: WebSocket handshakes (none: all refused) */
    void *user;                /* passed to handler and on_done */
    int worker_threads;        /* threads that run ws_req_offload'ed handlers and offloaded
                                  WebSocket messages; default 4; 0: they run on the
                                  service thread */
    const char *allowed_hosts; /* comma-separated extra Host names (without port) accepted when
                                  the listen address is loopback; NULL: only localhost, 127.x,
                                  [::1] and 0.0.0.0; "*": any Host */
    int max_conns_per_ip;      /* default 128; more from one address are refused (503 + close);
                                  0: no cap. A local reverse proxy or sidecar is one address */
    double request_timeout_s;  /* headers and body must be in within this many seconds of the
                                  request's first byte (a new connection's first byte within
                                  this of connecting); default 30 -> 408 + close; 0: none */
    int max_connections;       /* connections kept open at once; 0 (default): the fd limit
                                  less a reserve. At the limit a new connection closes an idle
                                  keep-alive one, else the slowest unfinished request, else it
                                  gets 503 + close */
    const char *tls_cert;      /* PEM certificate file (the chain: leaf first): the port speaks
                                  HTTPS and WSS only; NULL (default): plain HTTP */
    const char *tls_key;       /* PEM private key of tls_cert, unencrypted; both or neither.
                                  Read by ws_server_new (NULL + message naming the file when
                                  unreadable or not matching) */
};
struct ws_server_params ws_default_params(void);

/* Binds the socket (and loads the TLS certificate). NULL + message when the
 * address is taken or bad, or the certificate or key cannot be used. */
struct ws_server *ws_server_new(const struct ws_server_params *p, char *err, size_t errlen);
/* Serves on the calling thread (which becomes the service thread) until
 * ws_server_stop, then drains: new connections and requests are still taken
 * and dispatched (handlers see ws_req_draining), every response carries
 * Connection: close and closes its connection, WebSockets get a 1001 close.
 * Once no request is in flight - or after shutdown_timeout_s, aborting the
 * rest (on_abort) with a short grace to end - it stops the worker threads
 * (queued jobs still run) and returns 0. */
int ws_server_run(struct ws_server *s);
/* Begin the graceful shutdown. Any thread; async-signal-safe. */
void ws_server_stop(struct ws_server *s);
/* After ws_server_run returned (or instead of it). NULL is a no-op. */
void ws_server_free(struct ws_server *s);

/* ---- the request (service thread inside the handler, or an offloaded fn's
 * worker with its copy) ---- */
enum ws_method ws_req_method(const struct ws_req *r);
const char *ws_req_method_name(const struct ws_req *r);
const char *ws_req_path(const struct ws_req *r);   /* percent-decoded, no query string */
/* Header value by name, any case ("authorization", "x-api-key"): the first
 * field of that name, without surrounding whitespace, or NULL. Every header
 * of the request is there (a worker's copy too). The string lives as long as
 * r (until the handler, or the offloaded fn, returns). */
const char *ws_req_header(struct ws_req *r, const char *name);
/* The body, NUL-terminated (len excludes the NUL); "" for none. */
const char *ws_req_body(const struct ws_req *r, size_t *len);
/* The body went over max_body_bytes and was dropped: answer 413. */
bool ws_req_body_too_large(const struct ws_req *r);
/* The id in the x-request-id response header: the client's x-request-id when
 * it is short and plain, else a fresh one. */
const char *ws_req_id(const struct ws_req *r);
/* Label for logs and metrics ("/v1/models/{id}"); must be a static string.
 * On a worker, set it before ws_out_start. */
void ws_req_set_route(struct ws_req *r, const char *route);
/* Extra response header (e.g. "retry-after"); copied; up to 8 per response;
 * dropped when the name is not a token or the value has control characters
 * or is over 1 KiB. On a worker, set it before ws_out_start. */
void ws_req_add_header(struct ws_req *r, const char *name, const char *value);
/* Answer now with a complete body (copied). */
void ws_req_respond(struct ws_req *r, int status, const char *content_type, const char *body,
                    size_t len);
/* Answer later from any thread. The returned out holds two references: the
 * connection's (dropped by the server when the response is done or the client
 * leaves) and the caller's (dropped with ws_out_release). NULL when out of
 * memory (the server then answers 500). */
struct ws_out *ws_req_defer(struct ws_req *r, ws_abort_fn on_abort, ws_free_fn on_free,
                            void *user);

/* Continue this request on a worker thread: fn(user, r2) runs there with r2
 * a detached copy of r (method, path, id, every request header, query
 * string, body). Every ws_req_* function works on r2 from that worker
 * (respond, defer, add_header, set_route, header, query, body) except
 * ws_req_accept_websocket. After ws_req_offload the service-thread handler
 * must not touch r again. r2 and the strings it hands out live until fn
 * returns. If fn neither responds nor defers, the server answers 500. If
 * the client leaves before fn has deferred, the on_abort given to
 * ws_req_defer is still called exactly once (possibly on the worker, right
 * after fn returns). */
void ws_req_offload(struct ws_req *r, ws_handler_fn fn);
/* True while the server drains after ws_server_stop (probes should answer
 * 503). Any thread, on r or a worker's r2. */
bool ws_req_draining(const struct ws_req *r);

/* Query-string argument by name ("intent"), percent-decoded, or NULL.
 * Lives as long as r; up to 16 per request. */
const char *ws_req_query(struct ws_req *r, const char *name);
/* Inside an upgrade handler: accept the WebSocket with handler h (see
 * ws/ws_socket.h). The socket comes with a reference for the caller (drop it
 * with ws_sock_release). NULL when out of memory (refused). */
struct ws_sock_handler;
struct ws_sock *ws_req_accept_websocket(struct ws_req *r, const struct ws_sock_handler *h,
                                        void *user);

/* ---- the deferred response (any thread) ---- */
/* Status line and content type. stream: chunked transfer, each write is
 * flushed as it comes; otherwise the body is collected and sent with a
 * Content-Length at ws_out_end. Only the first call counts. */
void ws_out_start(struct ws_out *o, int status, const char *content_type, bool stream);
void ws_out_write(struct ws_out *o, const char *data, size_t len);
/* One server-sent event: "event: NAME\n" (when event is non-NULL) and one
 * "data: " line per line of data, then a blank line. */
void ws_out_sse(struct ws_out *o, const char *event, const char *data, size_t len);
void ws_out_end(struct ws_out *o);
/* Token counts for the request's log line and metrics. */
void ws_out_set_tokens(struct ws_out *o, int tokens_in, int tokens_out);
/* True once the client is gone: producers may stop early. */
bool ws_out_gone(struct ws_out *o);
void ws_out_release(struct ws_out *o);

/* ---- SSE framing (pure; exposed for tests) ----
 * Writes the event into dst[cap] (not NUL-terminated) and returns its full
 * length; cap 0 measures. */
size_t ws_sse_frame(char *dst, size_t cap, const char *event, const char *data, size_t len);

#endif
