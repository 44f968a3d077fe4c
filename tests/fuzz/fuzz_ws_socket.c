/* fuzz_ws_socket.c - WebSocket message handling of ws/ws_socket.c: client
 * bytes (RFC 6455 frames: masking, 16/64-bit lengths, fragments, ping /
 * pong / close, oversized and malformed frames) fed to ws_sock_on_receive in
 * chunks of varying sizes, each complete message handed to on_message -
 * inline, or queued for a worker with .offload - then the connection closes.
 * The handler answers some messages (ws_sock_send) and may close first.
 *
 * Input: byte 0 flags (bit 0 offload, bit 1 the handler closes after the
 * second message, bits 2-7 the chunking), then the bytes from the client.
 * ws_http.c is not linked: the worker pool is the stopped one of
 * ws_server_submit's contract (the job runs at once, on this thread). */
#include "tests/fuzz/fz_util.h"

#include "ws/ws_socket.h"

#include <stdlib.h>
#include <string.h>

void ws_server_submit(struct ws_server *srv, void (*fn)(void *arg), void *arg)
{
    (void)srv;
    fn(arg);
}

struct fz_conn {
    int messages, closes;
    bool close_early;
};

static void fz_on_message(void *user, struct ws_sock *s, const char *data, size_t len, bool binary)
{
    struct fz_conn *c = user;
    if (c->closes)
        abort();   /* a message after on_close */
    volatile unsigned char sink = 0;
    for (size_t i = 0; i < len; i++)   /* every byte handed over must be readable */
        sink ^= (unsigned char)data[i];
    (void)sink;
    if (!binary && c->messages % 2 == 0)
        ws_sock_send(s, data, len);
    if (++c->messages == 2 && c->close_early)
        ws_sock_close(s, 1000, "bye");
}

static void fz_on_close(void *user) { ((struct fz_conn *)user)->closes++; }

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    const uint8_t flags = data[0];
    struct ws_sock_handler h = { fz_on_message, fz_on_close, flags & 1 };
    struct fz_conn conn = { .close_early = flags & 2 };
    struct ws_sock *s = ws_sock_new(NULL, NULL, &h, &conn);
    if (!s)
        return 0;
    const size_t step = 1 + (flags >> 2);   /* 1..64 bytes per read, then shifting */
    for (size_t off = 1, k = 0; off < size; k++) {
        size_t chunk = step + k % 5;
        if (chunk > size - off)
            chunk = size - off;
        /* an exact-size copy, as a socket read gives it */
        uint8_t *c = malloc(chunk);
        if (!c)
            abort();
        memcpy(c, data + off, chunk);
        int rc = ws_sock_on_receive(s, c, chunk);
        free(c);
        if (rc < 0)
            break;
        off += chunk;
        (void)ws_sock_take_dirty(s);
    }
    char key[29];
    ws_sock_accept_key("dGhlIHNhbXBsZSBub25jZQ==", key);
    if (strcmp(key, "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="))
        abort();   /* RFC 6455's own example */
    ws_sock_on_closed(s);
    ws_sock_on_closed(s);   /* idempotent */
    if (conn.closes != 1)
        abort();
    ws_sock_release(s);     /* the caller's reference; on_closed dropped the connection's */
    return 0;
}
