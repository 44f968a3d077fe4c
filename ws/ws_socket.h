/* ws_socket.h - WebSocket connections on the ws_http server (RFC 6455 framing
 * done here): whole messages in (fragments joined, size-limited), text
 * messages out from any thread, pings answered, the close handshake.
 *
 *   my_upgrade(user, r):                      // ws_server_params.upgrade, service thread
 *     struct ws_sock *s = ws_req_accept_websocket(r, &my_handler, conn);
 *     ws_sock_send(s, "{\"type\":\"hello\"}", 16);    // any thread, queued
 *   my_handler.on_message(conn, s, data, len, binary)  // service thread (or a worker: .offload)
 *   my_handler.on_close(conn)                          // likewise; then ws_sock_release
 *
 * Thread safety: on_message and on_close run on the service thread, or with
 * .offload on a ws worker thread (one at a time per socket, in order). A
 * struct ws_sock is reference counted; ws_sock_send, ws_sock_close,
 * ws_sock_gone, ws_sock_retain and ws_sock_release take its lock and may be
 * called from any thread; senders wake the service thread with
 * lws_cancel_service(), which writes one frame per WRITEABLE callback. */
#ifndef OMNI_WS_SOCKET_H
#define OMNI_WS_SOCKET_H

#include <stdbool.h>
#include <stddef.h>

struct ws_sock;

struct ws_sock_handler {
    /* One complete message (text is not validated as UTF-8 here). */
    void (*on_message)(void *user, struct ws_sock *s, const char *data, size_t len, bool binary);
    /* The connection is gone (either side closed it). No more on_message. */
    void (*on_close)(void *user);
    /* on_message runs on a ws worker thread (ws_server_params.worker_threads),
     * the messages of one socket in order, one at a time; on_close then runs
     * on that worker too, after the last on_message. */
    bool offload;
};

#define WS_SOCK_MAX_MESSAGE (16u << 20)   /* larger incoming messages close with 1009 */
#define WS_SOCK_MAX_PENDING (16u << 20)   /* unsent bytes before a client counts as stuck */

/* Queue a text message (copied). Dropped once the socket is gone or closing. */
void ws_sock_send(struct ws_sock *s, const char *text, size_t len);
/* Close with a status code (1000 normal, 1008 policy, 1011 server error)
 * after the queued messages went out. */
void ws_sock_close(struct ws_sock *s, int code, const char *reason);
/* True once the connection closed: producers may stop. */
bool ws_sock_gone(struct ws_sock *s);
void ws_sock_retain(struct ws_sock *s);
void ws_sock_release(struct ws_sock *s);

// ---- for ws_http.c (service thread unless said otherwise) -------------------------
struct lws;
struct lws_context;
struct ws_server;
/* Run fn(arg) on one of the server's worker threads, in submission order.
 * Any thread. Once the pool has stopped (server shut down), fn runs at once
 * on the caller. */
void ws_server_submit(struct ws_server *srv, void (*fn)(void *arg), void *arg);
/* Sec-WebSocket-Accept for a Sec-WebSocket-Key: base64(SHA-1(key + GUID)),
 * 28 characters and a NUL. */
void ws_sock_accept_key(const char *key, char out[29]);
/* A socket with two references: the connection's and the caller's. */
struct ws_sock *ws_sock_new(struct ws_server *srv, struct lws_context *ctx,
                            const struct ws_sock_handler *h, void *user);
/* Bytes from the client, split anywhere. Complete messages go to
 * on_message (or the worker queue). A protocol error or an oversized
 * message queues a close frame (1002 / 1009) and ignores what follows.
 * Returns 0, or -1: close the connection now (out of memory). */
int ws_sock_on_receive(struct ws_sock *s, const void *in, size_t len);
/* One frame out: a pong, the oldest queued message or, once they are out,
 * the close frame. 0: sent (or nothing to send), 1: the close frame went out
 * (the caller ends the connection), -1: close now. */
int ws_sock_on_writeable(struct ws_sock *s, struct lws *wsi);
/* The connection went away: on_close (queued behind the messages with
 * .offload), then the connection's reference is dropped. Idempotent per
 * socket. */
void ws_sock_on_closed(struct ws_sock *s);
/* Whether the service thread should ask for WRITEABLE (something queued
 * since it last looked). */
bool ws_sock_take_dirty(struct ws_sock *s);

#endif
