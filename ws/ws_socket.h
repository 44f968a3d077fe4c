/* ws_socket.h - WebSocket connections on the ws_http server: whole messages
 * in (fragments joined, size-limited), text messages out from any thread.
 *
 *   my_upgrade(user, r):                      // ws_server_params.upgrade, service thread
 *     struct ws_sock *s = ws_req_accept_websocket(r, &my_handler, conn);
 *     ws_sock_send(s, "{\"type\":\"hello\"}", 16);    // any thread, queued
 *   my_handler.on_message(conn, s, data, len, binary)  // service thread
 *   my_handler.on_close(conn)                          // service thread; then ws_sock_release
 *
 * Thread safety: on_message and on_close run on the service thread. A
 * struct ws_sock is reference counted; ws_sock_send, ws_sock_close,
 * ws_sock_gone, ws_sock_retain and ws_sock_release take its lock and may be
 * called from any thread; senders wake the service thread with
 * lws_cancel_service(), which writes one message per WRITEABLE callback. */
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

// ---- for ws_http.c (service thread) ---------------------------------------------
struct lws;
struct lws_context;
/* A socket with two references: the connection's and the caller's. */
struct ws_sock *ws_sock_new(struct lws_context *ctx, const struct ws_sock_handler *h, void *user);
/* LWS_CALLBACK_ESTABLISHED / _RECEIVE / _SERVER_WRITEABLE for this socket;
 * -1 means close the connection. */
int ws_sock_on_established(struct ws_sock *s, struct lws *wsi);
int ws_sock_on_receive(struct ws_sock *s, struct lws *wsi, const void *in, size_t len);
int ws_sock_on_writeable(struct ws_sock *s, struct lws *wsi);
/* The connection went away: on_close, then the connection's reference is
 * dropped. Idempotent per socket (the second call does nothing). */
void ws_sock_on_closed(struct ws_sock *s);
/* Whether the service thread should ask for WRITEABLE (messages queued or a
 * close requested since it last looked). */
bool ws_sock_take_dirty(struct ws_sock *s);

#endif
