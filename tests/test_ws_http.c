/* test_ws_http.c - the HTTP/1.1 server (ws/ws_http.c) and its WebSockets
 * (ws/ws_socket.c) on real loopback sockets: a ws_server with a test handler
 * runs on a thread, the tests speak raw HTTP to it. Pipelining, framing
 * errors (400/414/431/501/505), Host and Origin checks, WebSocket handshakes
 * refused with a status, frames, offloaded handlers and messages, request
 * timeouts, per-address and total connection limits, draining, and HTTPS /
 * WSS on the same port (an OpenSSL client; the certificate is made by the
 * openssl command at test time, the TLS tests skip without it).
 *
 * Nothing here depends on timing: every wait is for an event, with a
 * generous deadline (10 s) that only a hang reaches. */
#include "test.h"

#include "ws/ws_http.h"
#include "ws/ws_socket.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define T_WAIT_S 10  /* only a hang waits this long */

// ---- the server under test --------------------------------------------------

struct tsrv {
    struct ws_server *srv;
    struct ws_server_params p;
    pthread_t thread;
    int port;
    atomic_int n_done, n_aborted, last_status;
    atomic_int n_abort_cb, n_free_cb, worker_done;
    atomic_bool gate_open;                /* /offload-wait blocks until this */
    atomic_bool offload_waiting;          /* ... and says it is blocked */
    _Atomic(struct ws_out *) held;        /* /slow and /offload-wait keep their out here */
    char offload_route[64];               /* {done_lock} route logged for /offload */
    pthread_mutex_t done_lock;
    /* WebSockets with .offload */
    atomic_int ws_in_flight, ws_overlap, ws_msgs, ws_closed, ws_closed_after;
};

static double t_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void t_sleep_ms(int ms)
{
    struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };
    nanosleep(&ts, NULL);
}

/* Waits until *v >= want (or T_WAIT_S). */
static bool t_wait_int(atomic_int *v, int want)
{
    double end = t_now() + T_WAIT_S;
    while (atomic_load(v) < want && t_now() < end)
        t_sleep_ms(2);
    return atomic_load(v) >= want;
}

static void t_respond_text(struct ws_req *r, int status, const char *text)
{
    ws_req_respond(r, status, "text/plain", text, strlen(text));
}

static void t_abort_cb(void *user) { atomic_fetch_add(&((struct tsrv *)user)->n_abort_cb, 1); }
static void t_free_cb(void *user) { atomic_fetch_add(&((struct tsrv *)user)->n_free_cb, 1); }

/* Worker: everything the detached copy carries, set_route and a header. */
static void t_offload_echo(void *user, struct ws_req *r)
{
    (void)user;
    char buf[1024];
    size_t blen;
    const char *body = ws_req_body(r, &blen);
    const char *ct = ws_req_header(r, "content-type"), *x = ws_req_header(r, "x-custom"),
               *os = ws_req_header(r, "x-stainless-os"), *q = ws_req_query(r, "a");
    snprintf(buf, sizeof buf, "%s %s ct=%s x=%s os=%s a=%s draining=%d body=%.*s",
             ws_req_method_name(r), ws_req_path(r), ct ? ct : "-", x ? x : "-", os ? os : "-",
             q ? q : "-", ws_req_draining(r), (int)blen, body);
    ws_req_set_route(r, "/offload");
    ws_req_add_header(r, "x-worker", "yes");
    t_respond_text(r, 200, buf);
}

/* Worker: blocks until the test opens the gate, then defers. */
static void t_offload_wait(void *user, struct ws_req *r)
{
    struct tsrv *t = user;
    atomic_store(&t->offload_waiting, true);
    double end = t_now() + T_WAIT_S;
    while (!atomic_load(&t->gate_open) && t_now() < end)
        t_sleep_ms(2);
    struct ws_out *o = ws_req_defer(r, t_abort_cb, t_free_cb, t);
    atomic_store(&t->held, o);
    atomic_store(&t->worker_done, 1);
}

static void t_offload_silent(void *user, struct ws_req *r) { (void)user, (void)r; }

static void t_handler(void *user, struct ws_req *r)
{
    struct tsrv *t = user;
    const char *path = ws_req_path(r);
    if (!strcmp(path, "/echo")) {
        char buf[2048];
        size_t blen;
        const char *body = ws_req_body(r, &blen);
        const char *q = ws_req_query(r, "n");
        snprintf(buf, sizeof buf, "%s n=%s body=%.*s", ws_req_method_name(r), q ? q : "-",
                 (int)blen, body);
        t_respond_text(r, 200, buf);
    } else if (!strcmp(path, "/big")) {       /* n bytes of i % 251, with a Content-Length */
        const char *q = ws_req_query(r, "n");
        size_t n = q ? (size_t)atol(q) : 0;
        char chunk[4096];
        struct ws_out *o = ws_req_defer(r, NULL, NULL, NULL);
        ws_out_start(o, 200, "application/octet-stream", false);
        for (size_t at = 0; at < n; at += sizeof chunk) {
            size_t k = n - at < sizeof chunk ? n - at : sizeof chunk;
            for (size_t i = 0; i < k; i++)
                chunk[i] = (char)((at + i) % 251);
            ws_out_write(o, chunk, k);
        }
        ws_out_end(o);
        ws_out_release(o);
    } else if (!strcmp(path, "/empty")) {
        ws_req_respond(r, 200, "text/plain", NULL, 0);
    } else if (!strcmp(path, "/stream")) {
        struct ws_out *o = ws_req_defer(r, NULL, NULL, NULL);
        ws_out_start(o, 200, "text/event-stream", true);
        ws_out_sse(o, NULL, "one", 3);
        ws_out_sse(o, NULL, "two", 3);
        ws_out_end(o);
        ws_out_release(o);
    } else if (!strcmp(path, "/slow")) {
        atomic_store(&t->held, ws_req_defer(r, t_abort_cb, t_free_cb, t));
    } else if (!strcmp(path, "/draining")) {
        t_respond_text(r, 200, ws_req_draining(r) ? "yes" : "no");
    } else if (!strcmp(path, "/offload")) {
        ws_req_set_route(r, "/before-offload");
        ws_req_offload(r, t_offload_echo);
    } else if (!strcmp(path, "/offload-wait")) {
        ws_req_offload(r, t_offload_wait);
    } else if (!strcmp(path, "/offload-silent")) {
        ws_req_offload(r, t_offload_silent);
    } else {
        t_respond_text(r, 404, "no such test route");
    }
}

static void t_on_done(void *user, const struct ws_done_info *d)
{
    struct tsrv *t = user;
    pthread_mutex_lock(&t->done_lock);
    if (!strcmp(d->path, "/offload"))
        snprintf(t->offload_route, sizeof t->offload_route, "%s", d->route);
    pthread_mutex_unlock(&t->done_lock);
    atomic_store(&t->last_status, d->status);
    atomic_fetch_add(&t->n_aborted, d->aborted);
    atomic_fetch_add(&t->n_done, 1);
}

// WebSocket handlers: echo on the service thread, and an offloaded one that
// checks one message at a time, in order.
static void t_ws_echo(void *user, struct ws_sock *s, const char *data, size_t len, bool binary)
{
    (void)user;
    (void)binary;
    ws_sock_send(s, data, len);
}

static void t_ws_close_noop(void *user) { (void)user; }

static const struct ws_sock_handler t_echo_handler = {
    .on_message = t_ws_echo,
    .on_close = t_ws_close_noop,
};

static void t_ws_off_message(void *user, struct ws_sock *s, const char *data, size_t len,
                             bool binary)
{
    struct tsrv *t = user;
    (void)binary;
    if (atomic_fetch_add(&t->ws_in_flight, 1) != 0)
        atomic_store(&t->ws_overlap, 1);
    t_sleep_ms(1);                        /* give a second worker the chance to overlap */
    char expect[32];
    snprintf(expect, sizeof expect, "m%d", atomic_load(&t->ws_msgs));
    if (len != strlen(expect) || memcmp(data, expect, len))
        atomic_store(&t->ws_overlap, 2);  /* out of order */
    atomic_fetch_add(&t->ws_msgs, 1);
    ws_sock_send(s, data, len);
    atomic_fetch_sub(&t->ws_in_flight, 1);
}

static void t_ws_off_close(void *user)
{
    struct tsrv *t = user;
    atomic_store(&t->ws_closed_after, atomic_load(&t->ws_msgs));
    if (atomic_load(&t->ws_in_flight))
        atomic_store(&t->ws_overlap, 3);  /* on_close while a message runs */
    atomic_fetch_add(&t->ws_closed, 1);
}

static const struct ws_sock_handler t_off_handler = {
    .on_message = t_ws_off_message,
    .on_close = t_ws_off_close,
    .offload = true,
};

static void t_upgrade(void *user, struct ws_req *r)
{
    const char *path = ws_req_path(r);
    struct ws_sock *s = NULL;
    if (!strcmp(path, "/ws"))
        s = ws_req_accept_websocket(r, &t_echo_handler, user);
    else if (!strcmp(path, "/ws-off"))
        s = ws_req_accept_websocket(r, &t_off_handler, user);
    else if (!strcmp(path, "/ws-401"))
        ws_req_respond(r, 401, "application/json", "{\"error\":\"key\"}", 15);
    if (s)
        ws_sock_release(s);               /* the connection keeps its own */
}

static void *t_run(void *arg)
{
    ws_server_run(((struct tsrv *)arg)->srv);
    return NULL;
}

static int t_free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
    socklen_t l = sizeof a;
    int port = -1;
    if (fd >= 0 && !bind(fd, (struct sockaddr *)&a, sizeof a) &&
        !getsockname(fd, (struct sockaddr *)&a, &l))
        port = ntohs(a.sin_port);
    if (fd >= 0)
        close(fd);
    return port;
}

static struct ws_server_params t_params(void)
{
    struct ws_server_params p = ws_default_params();
    p.shutdown_timeout_s = 2;
    p.worker_threads = 3;
    return p;
}

static bool t_start(struct tsrv *t, const struct ws_server_params *p)
{
    memset(t, 0, sizeof *t);
    signal(SIGPIPE, SIG_IGN);
    pthread_mutex_init(&t->done_lock, NULL);
    t->p = *p;
    t->p.handler = t_handler;
    t->p.on_done = t_on_done;
    t->p.upgrade = t_upgrade;
    t->p.user = t;
    char err[256];
    for (int i = 0; i < 10 && !t->srv; i++) {
        t->port = t->p.port = t_free_port();
        if (t->port > 0)
            t->srv = ws_server_new(&t->p, err, sizeof err);
    }
    if (!t->srv || pthread_create(&t->thread, NULL, t_run, t)) {
        ws_server_free(t->srv);
        t->srv = NULL;
        return false;
    }
    return true;
}

static void t_stop(struct tsrv *t)
{
    if (!t->srv)
        return;
    ws_server_stop(t->srv);
    atomic_store(&t->gate_open, true);
    struct ws_out *o = atomic_exchange(&t->held, NULL);
    if (o) {                              /* let a held response end */
        ws_out_end(o);
        ws_out_release(o);
    }
    pthread_join(t->thread, NULL);
    ws_server_free(t->srv);
    t->srv = NULL;
    pthread_mutex_destroy(&t->done_lock);
}

/* Runs body against a fresh server; the server stops even when a CHECK in
 * body failed. */
#define WITH_SERVER(params, body)                                             \
    do {                                                                      \
        static struct tsrv t_;                                                \
        struct ws_server_params p_ = (params);                                \
        CHECK(t_start(&t_, &p_));                                             \
        body(&t_);                                                            \
        t_stop(&t_);                                                          \
    } while (0)

// ---- a raw client -------------------------------------------------------------

struct tconn {
    int fd;
    SSL *ssl;                             /* t_tls_connect: TLS over fd */
    char buf[1 << 16];
    size_t len;                           /* unread bytes in buf */
};

struct tresp {
    int status;
    char headers[4096];                   /* lower-cased header lines */
    char body[1 << 15];
    size_t body_len;
};

static bool t_connect(struct tconn *c, int port)
{
    c->len = 0;
    c->ssl = NULL;
    c->fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                             .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
    struct timeval tv = { T_WAIT_S, 0 };
    int one = 1;
    setsockopt(c->fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    return c->fd >= 0 && connect(c->fd, (struct sockaddr *)&a, sizeof a) == 0;
}

static void t_close(struct tconn *c)
{
    SSL_free(c->ssl);
    c->ssl = NULL;
    if (c->fd >= 0)
        close(c->fd);
    c->fd = -1;
}

static bool t_send(struct tconn *c, const void *data, size_t len)
{
    const char *p = data;
    while (len) {
        ssize_t n = c->ssl ? SSL_write(c->ssl, p, (int)(len > (1u << 30) ? 1u << 30 : len))
                           : send(c->fd, p, len, MSG_NOSIGNAL);
        if (n <= 0)
            return false;
        p += n;
        len -= (size_t)n;
    }
    return true;
}

static bool t_sends(struct tconn *c, const char *s) { return t_send(c, s, strlen(s)); }

/* More bytes into c->buf: false at EOF, error or timeout. */
static bool t_fill(struct tconn *c)
{
    if (c->len == sizeof c->buf)
        return false;
    size_t room = sizeof c->buf - c->len;
    ssize_t n = c->ssl ? SSL_read(c->ssl, c->buf + c->len, (int)room)
                       : recv(c->fd, c->buf + c->len, room, 0);
    if (n <= 0)
        return false;
    c->len += (size_t)n;
    return true;
}

static void t_consume(struct tconn *c, size_t n)
{
    memmove(c->buf, c->buf + n, c->len - n);
    c->len -= n;
}

/* A line (without CRLF) into out; false on EOF. */
static bool t_line(struct tconn *c, char *out, size_t cap)
{
    for (;;) {
        char *nl = memchr(c->buf, '\n', c->len);
        if (nl) {
            size_t n = (size_t)(nl - c->buf);
            size_t k = n && c->buf[n - 1] == '\r' ? n - 1 : n;
            if (k >= cap)
                k = cap - 1;
            memcpy(out, c->buf, k);
            out[k] = 0;
            t_consume(c, n + 1);
            return true;
        }
        if (!t_fill(c))
            return false;
    }
}

static bool t_bytes(struct tconn *c, char *out, size_t n)
{
    while (c->len < n)
        if (!t_fill(c))
            return false;
    if (out)
        memcpy(out, c->buf, n);
    t_consume(c, n);
    return true;
}

static const char *t_header(const struct tresp *r, const char *name)
{
    static char v[512];
    char key[96];
    snprintf(key, sizeof key, "\n%s:", name);
    const char *p = strstr(r->headers, key);
    if (!p)
        return NULL;
    p += strlen(key);
    while (*p == ' ')
        p++;
    size_t n = strcspn(p, "\n");
    snprintf(v, sizeof v, "%.*s", (int)n, p);
    return v;
}

/* One response (interim 1xx included); false on EOF or a framing error. */
static bool t_read(struct tconn *c, struct tresp *r)
{
    char line[8192];
    memset(r, 0, sizeof *r);
    if (!t_line(c, line, sizeof line) || strncmp(line, "HTTP/1.1 ", 9))
        return false;
    r->status = atoi(line + 9);
    size_t hl = 0;
    r->headers[hl++] = '\n';
    for (;;) {
        if (!t_line(c, line, sizeof line))
            return false;
        if (!line[0])
            break;
        for (char *p = line; *p && *p != ':'; p++)
            if (*p >= 'A' && *p <= 'Z')
                *p = (char)(*p - 'A' + 'a');
        hl += (size_t)snprintf(r->headers + hl, sizeof r->headers - hl, "%s\n", line);
        if (hl >= sizeof r->headers)
            return false;
    }
    if (r->status < 200 || r->status == 204)
        return true;
    const char *cl = t_header(r, "content-length"), *te = t_header(r, "transfer-encoding");
    if (cl) {
        r->body_len = (size_t)atol(cl);
        if (r->body_len >= sizeof r->body || !t_bytes(c, r->body, r->body_len))
            return false;
    } else if (te && !strcmp(te, "chunked")) {
        for (;;) {
            if (!t_line(c, line, sizeof line))
                return false;
            size_t n = strtoul(line, NULL, 16);
            if (n == 0) {
                if (!t_line(c, line, sizeof line))
                    return false;
                break;
            }
            if (r->body_len + n >= sizeof r->body || !t_bytes(c, r->body + r->body_len, n) ||
                !t_bytes(c, NULL, 2))
                return false;
            r->body_len += n;
        }
    } else {
        return false;
    }
    r->body[r->body_len] = 0;
    return true;
}

/* True when the server closes the connection (EOF) before T_WAIT_S. */
static bool t_eof(struct tconn *c)
{
    if (c->ssl) {                         /* close_notify, or the TCP end */
        for (;;) {
            int n = SSL_read(c->ssl, c->buf, (int)sizeof c->buf);
            if (n > 0)
                continue;
            int e = SSL_get_error(c->ssl, n), err = errno;
            ERR_clear_error();
            return e == SSL_ERROR_ZERO_RETURN || (e == SSL_ERROR_SYSCALL && err == ECONNRESET);
        }
    }
    for (;;) {
        ssize_t n = recv(c->fd, c->buf, sizeof c->buf, 0);
        if (n == 0)
            return true;
        if (n < 0)
            return errno == ECONNRESET;
    }
}

static bool t_request(int port, const char *raw, struct tresp *r)
{
    static struct tconn c;
    bool ok = t_connect(&c, port) && t_sends(&c, raw) && t_read(&c, r);
    t_close(&c);
    return ok;
}

// ---- pipelining, keep-alive, framing ----------------------------------------

static void body_pipelined_gets(struct tsrv *t)
{
    static struct tconn c;
    static struct tresp r;
    CHECK(t_connect(&c, t->port));
    CHECK(t_sends(&c, "GET /echo?n=1 HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
                      "GET /echo?n=2 HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
                      "GET /echo?n=3 HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"));
    for (int i = 1; i <= 3; i++) {
        char want[32];
        snprintf(want, sizeof want, "GET n=%d body=", i);
        CHECK(t_read(&c, &r));
        CHECK_EQ(r.status, 200);
        CHECK_STR_EQ(r.body, want);
        CHECK(!t_header(&r, "connection"));
    }
    /* still open for more */
    CHECK(t_sends(&c, "GET /echo?n=4 HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"));
    CHECK(t_read(&c, &r));
    CHECK_STR_EQ(r.body, "GET n=4 body=");
    t_close(&c);
}

TEST(ws_http_pipelined_gets_answered_in_order)
{
    WITH_SERVER(t_params(), body_pipelined_gets);
}

static void body_pipelined_posts(struct tsrv *t)
{
    static struct tconn c;
    static struct tresp r;
    CHECK(t_connect(&c, t->port));
    /* Content-Length, chunked, no length at all (zero body), then a GET:
     * each framing ends exactly where the next request starts. */
    CHECK(t_sends(&c, "POST /echo?n=1 HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 5\r\n\r\nhello"
                      "POST /echo?n=2 HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: chunked\r\n\r\n"
                      "3\r\nabc\r\n2;ext=1\r\nde\r\n0\r\nTrailer: x\r\n\r\n"
                      "POST /echo?n=3 HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
                      "POST /stream HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 2\r\n\r\n{}"
                      "GET /echo?n=5 HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"));
    CHECK(t_read(&c, &r));
    CHECK_STR_EQ(r.body, "POST n=1 body=hello");
    CHECK(t_read(&c, &r));
    CHECK_STR_EQ(r.body, "POST n=2 body=abcde");
    CHECK(t_read(&c, &r));
    CHECK_STR_EQ(r.body, "POST n=3 body=");
    CHECK(t_read(&c, &r));
    CHECK_STR_EQ(t_header(&r, "transfer-encoding"), "chunked");
    CHECK_STR_EQ(r.body, "data: one\n\ndata: two\n\n");
    CHECK(t_read(&c, &r));
    CHECK_STR_EQ(r.body, "GET n=5 body=");
    t_close(&c);
}

TEST(ws_http_pipelined_posts_answered_in_order)
{
    WITH_SERVER(t_params(), body_pipelined_posts);
}

static void body_connection_close(struct tsrv *t)
{
    static struct tconn c;
    static struct tresp r;
    /* no Content-Length, Connection: close -> answered, then closed */
    CHECK(t_connect(&c, t->port));
    CHECK(t_sends(&c, "POST /echo HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"));
    CHECK(t_read(&c, &r));
    CHECK_EQ(r.status, 200);
    CHECK_STR_EQ(t_header(&r, "connection"), "close");
    CHECK(t_eof(&c));
    t_close(&c);
    /* HTTP/1.0 closes too (no Host needed) */
    CHECK(t_connect(&c, t->port));
    CHECK(t_sends(&c, "GET /echo HTTP/1.0\r\n\r\n"));
    CHECK(t_read(&c, &r));
    CHECK_EQ(r.status, 200);
    CHECK(t_eof(&c));
    t_close(&c);
}

TEST(ws_http_connection_close_closes)
{
    WITH_SERVER(t_params(), body_connection_close);
}

static void body_empty_and_head(struct tsrv *t)
{
    static struct tconn c;
    static struct tresp r;
    CHECK(t_connect(&c, t->port));
    /* an empty body (UBSan: no memcpy from a NULL buffer) and HEAD */
    CHECK(t_sends(&c, "GET /empty HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
                      "HEAD /echo HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
                      "GET /echo?n=3 HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"));
    CHECK(t_read(&c, &r));
    CHECK_EQ(r.status, 200);
    CHECK_STR_EQ(t_header(&r, "content-length"), "0");
    /* HEAD: the GET's length, no body (t_read would eat it otherwise) */
    char line[256];
    CHECK(t_line(&c, line, sizeof line));
    CHECK_STR_EQ(line, "HTTP/1.1 200 OK");
    while (t_line(&c, line, sizeof line) && line[0])
        ;
    CHECK(t_read(&c, &r));
    CHECK_STR_EQ(r.body, "GET n=3 body=");
    t_close(&c);
}

TEST(ws_http_empty_body_and_head)
{
    WITH_SERVER(t_params(), body_empty_and_head);
}

static void body_expect_continue(struct tsrv *t)
{
    static struct tconn c;
    static struct tresp r;
    CHECK(t_connect(&c, t->port));
    CHECK(t_sends(&c, "POST /echo HTTP/1.1\r\nHost: 127.0.0.1\r\nExpect: 100-continue\r\n"
                      "Content-Length: 5\r\n\r\n"));
    CHECK(t_read(&c, &r));
    CHECK_EQ(r.status, 100);
    CHECK(t_sends(&c, "hello"));
    CHECK(t_read(&c, &r));
    CHECK_STR_EQ(r.body, "POST n=- body=hello");
    t_close(&c);
}

TEST(ws_http_expect_100_continue)
{
    WITH_SERVER(t_params(), body_expect_continue);
}

/* raw request -> expected status, and the connection closes after it */
static bool t_refused(int port, const char *raw, int status, const char *in_body)
{
    static struct tconn c;
    static struct tresp r;
    bool ok = t_connect(&c, port) && t_sends(&c, raw) && t_read(&c, &r) && r.status == status &&
              strstr(r.body, in_body) && strstr(r.body, "\"error\"") &&
              t_header(&r, "connection") && !strcmp(t_header(&r, "connection"), "close") &&
              t_eof(&c);
    if (!ok)
        fprintf(stderr, "  %.40s...: got %d %s\n", raw, r.status, r.body);
    t_close(&c);
    return ok;
}

static void body_bad_framing(struct tsrv *t)
{
    int p = t->port;
    static char big[40000];
    /* oversized header block -> 431, oversized request line -> 414 */
    int n = snprintf(big, sizeof big, "GET /echo HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big: ");
    memset(big + n, 'a', 20000);
    strcpy(big + n + 20000, "\r\n\r\n");
    CHECK(t_refused(p, big, 431, "header"));
    n = snprintf(big, sizeof big, "GET /echo?");
    memset(big + n, 'a', 20000);
    strcpy(big + n + 20000, " HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n");
    CHECK(t_refused(p, big, 414, "request line"));
    /* 101 header fields -> 431 */
    n = snprintf(big, sizeof big, "GET /echo HTTP/1.1\r\nHost: 127.0.0.1\r\n");
    for (int i = 0; i < 101; i++)
        n += snprintf(big + n, sizeof big - (size_t)n, "X-%d: 1\r\n", i);
    strcpy(big + n, "\r\n");
    CHECK(t_refused(p, big, 431, "too many"));
    /* Transfer-Encoding (RFC 9112 6.1): final coding not chunked -> 400,
     * codings we cannot undo -> 501 */
    CHECK(t_refused(p, "POST /echo HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: notchunked\r\n\r\n"
                       "5\r\nhello\r\n0\r\n\r\n", 400, "chunked"));
    CHECK(t_refused(p, "POST /echo HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: chunked, gzip\r\n\r\n",
                    400, "chunked"));
    CHECK(t_refused(p, "POST /echo HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: gzip, chunked\r\n\r\n",
                    501, "not supported"));
    CHECK(t_refused(p, "POST /echo HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: chunked\r\n"
                       "Transfer-Encoding: chunked\r\n\r\n", 400, "once"));
    CHECK(t_refused(p, "POST /echo HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: chunked\r\n"
                       "Content-Length: 5\r\n\r\nhello", 400, "both"));
    CHECK(t_refused(p, "POST /echo HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 5\r\n"
                       "Content-Length: 6\r\n\r\nhello!", 400, "Content-Length"));
    CHECK(t_refused(p, "POST /echo HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: -1\r\n\r\n", 400,
                    "Content-Length"));
    CHECK(t_refused(p, "POST /echo HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: chunked\r\n\r\n"
                       "zz\r\n", 400, "chunked"));
    /* request line and fields */
    CHECK(t_refused(p, "GET /echo HTTP/2.0\r\nHost: 127.0.0.1\r\n\r\n", 505, "HTTP/1.1"));
    CHECK(t_refused(p, "hello\r\n\r\n", 400, "request line"));
    CHECK(t_refused(p, "GET /echo HTTP/1.1\r\nHost: 127.0.0.1\r\nX-A : 1\r\n\r\n", 400, "name"));
    CHECK(t_refused(p, "GET /echo HTTP/1.1\r\nHost: 127.0.0.1\r\nX-A: 1\r\n folded\r\n\r\n", 400,
                    "folding"));
    CHECK(t_refused(p, "GET /echo HTTP/1.1\r\n\r\n", 400, "Host"));
    CHECK(t_refused(p, "GET /a%00b HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", 400, "target"));
    CHECK(t_refused(p, "GET /echo HTTP/1.1\r\nHost: 127.0.0.1\r\nExpect: 200-ok\r\n\r\n", 417,
                    "Expect"));
    /* the server is fine afterwards */
    static struct tresp r;
    CHECK(t_request(p, "GET /echo HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", &r));
    CHECK_EQ(r.status, 200);
}

TEST(ws_http_bad_framing_gets_a_status)
{
    WITH_SERVER(t_params(), body_bad_framing);
}

static void body_body_limit(struct tsrv *t)
{
    static struct tresp r;
    /* over --max-body by Content-Length: the handler sees too_large at once */
    CHECK(t_request(t->port, "POST /echo HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 100\r\n\r\n",
                    &r));
    CHECK_EQ(r.status, 200);
    CHECK_STR_EQ(r.body, "POST n=- body=");
    CHECK_STR_EQ(t_header(&r, "connection"), "close");
    /* chunked past the limit */
    CHECK(t_request(t->port, "POST /echo HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: chunked\r\n\r\n"
                             "40\r\n0123456789012345678901234567890123456789012345678901234567890123\r\n",
                    &r));
    CHECK_STR_EQ(t_header(&r, "connection"), "close");
}

TEST(ws_http_body_limit)
{
    struct ws_server_params p = t_params();
    p.max_body_bytes = 32;
    WITH_SERVER(p, body_body_limit);
}

// ---- Host and Origin (DNS rebinding, cross-origin pages) ----------------------------

static void body_host_origin(struct tsrv *t)
{
    int p = t->port;
    static struct tresp r;
    char raw[512];
    CHECK(t_refused(p, "GET /echo HTTP/1.1\r\nHost: evil.example\r\n\r\n", 403, "Host"));
    CHECK(t_refused(p, "GET /echo HTTP/1.1\r\nHost: evil.example:8000\r\n\r\n", 403, "Host"));
    CHECK(t_refused(p, "GET /echo HTTP/1.1\r\nHost: 127.0.0.1.evil.example\r\n\r\n", 403, "Host"));
    CHECK(t_refused(p, "GET http://evil.example/echo HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", 403, "Host"));
    const char *ok_hosts[] = { "localhost", "LOCALHOST:1234", "127.0.0.1", "127.0.0.2:80", "[::1]:8000", "0.0.0.0:8000",
                               "my.box", "My.Box:99" };
    for (size_t i = 0; i < sizeof ok_hosts / sizeof ok_hosts[0]; i++) {
        snprintf(raw, sizeof raw, "GET /echo HTTP/1.1\r\nHost: %s\r\n\r\n", ok_hosts[i]);
        CHECK(t_request(p, raw, &r));
        CHECK_MSG(r.status == 200, "Host %s: %d", ok_hosts[i], r.status);
    }
    /* cross-origin requests need --cors-origin; same-origin ones pass */
    CHECK(t_refused(p, "POST /echo HTTP/1.1\r\nHost: 127.0.0.1\r\nOrigin: http://evil.example\r\n"
                       "Content-Length: 2\r\n\r\n{}", 403, "origin"));
    CHECK(t_refused(p, "GET /echo HTTP/1.1\r\nHost: 127.0.0.1\r\nOrigin: null\r\n\r\n", 403, "origin"));
    snprintf(raw, sizeof raw, "GET /echo HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nOrigin: http://127.0.0.1:%d\r\n\r\n",
             p, p);
    CHECK(t_request(p, raw, &r));
    CHECK_EQ(r.status, 200);
    CHECK(!t_header(&r, "access-control-allow-origin"));
}

TEST(ws_http_host_and_origin_checked_on_loopback)
{
    struct ws_server_params p = t_params();
    p.allowed_hosts = "my.box, other.example";
    WITH_SERVER(p, body_host_origin);
}

static void body_cors(struct tsrv *t)
{
    static struct tresp r;
    CHECK(t_request(t->port, "GET /echo HTTP/1.1\r\nHost: 127.0.0.1\r\nOrigin: http://app.example\r\n\r\n",
                    &r));
    CHECK_EQ(r.status, 200);
    CHECK_STR_EQ(t_header(&r, "access-control-allow-origin"), "http://app.example");
    CHECK(t_request(t->port, "OPTIONS /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                             "Origin: http://app.example\r\nAccess-Control-Request-Method: POST\r\n"
                             "Access-Control-Request-Headers: authorization, content-type\r\n\r\n", &r));
    CHECK_EQ(r.status, 204);
    CHECK_STR_EQ(t_header(&r, "access-control-allow-headers"), "authorization, content-type");
    CHECK(t_refused(t->port, "GET /echo HTTP/1.1\r\nHost: 127.0.0.1\r\nOrigin: http://other.example\r\n\r\n",
                    403, "origin"));
}

TEST(ws_http_cors_origin_allows_its_origin)
{
    struct ws_server_params p = t_params();
    p.cors_origin = "http://app.example";
    WITH_SERVER(p, body_cors);
}

// ---- WebSocket ----------------------------------------------------------------------

#define T_WS_KEY "dGhlIHNhbXBsZSBub25jZQ=="   /* RFC 6455 1.3 */

static void t_ws_upgrade_req(char *out, size_t cap, const char *path, const char *extra)
{
    snprintf(out, cap,
             "GET %s HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: keep-alive, Upgrade\r\n"
             "Sec-WebSocket-Key: " T_WS_KEY "\r\nSec-WebSocket-Version: 13\r\n%s\r\n",
             path, extra);
}

/* A masked client frame. */
static size_t t_ws_frame(unsigned char *out, int op, bool fin, const char *data, size_t len)
{
    static const unsigned char mask[4] = { 0x12, 0x34, 0x56, 0x78 };
    size_t n = 0;
    out[n++] = (unsigned char)((fin ? 0x80 : 0) | op);
    if (len < 126) {
        out[n++] = (unsigned char)(0x80 | len);
    } else {
        out[n++] = 0x80 | 126;
        out[n++] = (unsigned char)(len >> 8);
        out[n++] = (unsigned char)len;
    }
    memcpy(out + n, mask, 4);
    n += 4;
    for (size_t i = 0; i < len; i++)
        out[n + i] = (unsigned char)data[i] ^ mask[i & 3];
    return n + len;
}

/* A server frame: opcode and payload into data (NUL-terminated). */
static bool t_ws_read(struct tconn *c, int *op, char *data, size_t cap, size_t *len)
{
    unsigned char h[4];
    if (!t_bytes(c, (char *)h, 2))
        return false;
    *op = h[0] & 0x0f;
    size_t n = h[1] & 0x7f;
    if (h[1] & 0x80)
        return false;                     /* server frames are not masked */
    if (n == 126) {
        if (!t_bytes(c, (char *)h + 2, 2))
            return false;
        n = (size_t)h[2] << 8 | h[3];
    } else if (n == 127) {
        return false;
    }
    if (n >= cap || !t_bytes(c, data, n))
        return false;
    data[n] = 0;
    *len = n;
    return true;
}

static void body_ws_refusals(struct tsrv *t)
{
    int p = t->port;
    char raw[1024];
    static struct tresp r;
    t_ws_upgrade_req(raw, sizeof raw, "/ws", "Origin: http://evil.example\r\n");
    CHECK(t_refused(p, raw, 403, "origin"));
    t_ws_upgrade_req(raw, sizeof raw, "/nowhere", "");
    CHECK(t_refused(p, raw, 404, "no WebSocket endpoint at /nowhere"));
    t_ws_upgrade_req(raw, sizeof raw, "/ws-401", "");
    CHECK(t_request(p, raw, &r));
    CHECK_EQ(r.status, 401);
    CHECK_STR_EQ(t_header(&r, "connection"), "close");
    CHECK(t_refused(p, "GET /ws HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                       "Sec-WebSocket-Version: 13\r\n\r\n", 400, "Sec-WebSocket-Key"));
    CHECK(t_refused(p, "GET /ws HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                       "Sec-WebSocket-Key: " T_WS_KEY "\r\nSec-WebSocket-Version: 8\r\n\r\n", 400, "version"));
    CHECK(t_refused(p, "POST /ws HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                       "Sec-WebSocket-Key: " T_WS_KEY "\r\nSec-WebSocket-Version: 13\r\n\r\n", 400, "GET"));
}

TEST(ws_http_websocket_refusals_answer_with_a_status)
{
    WITH_SERVER(t_params(), body_ws_refusals);
}

static void body_ws_echo(struct tsrv *t)
{
    static struct tconn c;
    static struct tresp r;
    char raw[1024], data[70000];
    unsigned char f[70100];
    size_t len;
    int op;
    CHECK(t_connect(&c, t->port));
    t_ws_upgrade_req(raw, sizeof raw, "/ws", "Sec-WebSocket-Protocol: other, realtime\r\n");
    /* the first frame rides along with the handshake */
    size_t n = t_ws_frame(f, 0x1, true, "first", 5);
    CHECK(t_sends(&c, raw) && t_send(&c, f, n));
    CHECK(t_read(&c, &r));
    CHECK_EQ(r.status, 101);
    CHECK_STR_EQ(t_header(&r, "sec-websocket-accept"), "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=");
    CHECK_STR_EQ(t_header(&r, "sec-websocket-protocol"), "realtime");
    CHECK(t_ws_read(&c, &op, data, sizeof data, &len));
    CHECK_EQ(op, 1);
    CHECK_STR_EQ(data, "first");
    /* a fragmented message with a ping between the fragments */
    n = t_ws_frame(f, 0x1, false, "hel", 3);
    n += t_ws_frame(f + n, 0x9, true, "pp", 2);
    n += t_ws_frame(f + n, 0x0, true, "lo", 2);
    CHECK(t_send(&c, f, n));
    CHECK(t_ws_read(&c, &op, data, sizeof data, &len));
    CHECK_EQ(op, 0xa);
    CHECK_STR_EQ(data, "pp");
    CHECK(t_ws_read(&c, &op, data, sizeof data, &len));
    CHECK_EQ(op, 1);
    CHECK_STR_EQ(data, "hello");
    /* 16-bit length, sent a byte at a time */
    memset(data, 'x', 300);
    n = t_ws_frame(f, 0x1, true, data, 300);
    for (size_t i = 0; i < n; i++)
        CHECK(t_send(&c, f + i, 1));
    CHECK(t_ws_read(&c, &op, data, sizeof data, &len));
    CHECK_EQ(len, 300);
    /* close: echoed, then the server ends the connection */
    n = t_ws_frame(f, 0x8, true, "\x03\xe8" "bye", 5);
    CHECK(t_send(&c, f, n));
    CHECK(t_ws_read(&c, &op, data, sizeof data, &len));
    CHECK_EQ(op, 8);
    CHECK_EQ((unsigned char)data[0] << 8 | (unsigned char)data[1], 1000);
    CHECK(t_eof(&c));
    t_close(&c);
    /* an unmasked frame is a protocol error: close 1002 */
    CHECK(t_connect(&c, t->port));
    t_ws_upgrade_req(raw, sizeof raw, "/ws", "");
    CHECK(t_sends(&c, raw));
    CHECK(t_read(&c, &r));
    CHECK_EQ(r.status, 101);
    CHECK(!t_header(&r, "sec-websocket-protocol"));
    CHECK(t_send(&c, "\x81\x02hi", 4));
    CHECK(t_ws_read(&c, &op, data, sizeof data, &len));
    CHECK_EQ(op, 8);
    CHECK_EQ((unsigned char)data[0] << 8 | (unsigned char)data[1], 1002);
    CHECK(t_eof(&c));
    t_close(&c);
}

TEST(ws_http_websocket_frames)
{
    WITH_SERVER(t_params(), body_ws_echo);
}

static void body_ws_offload(struct tsrv *t)
{
    static struct tconn c;
    static struct tresp r;
    char raw[1024], data[256];
    static unsigned char f[64 * 40];
    size_t n = 0, len;
    int op;
    CHECK(t_connect(&c, t->port));
    t_ws_upgrade_req(raw, sizeof raw, "/ws-off", "");
    CHECK(t_sends(&c, raw));
    CHECK(t_read(&c, &r));
    CHECK_EQ(r.status, 101);
    /* 40 messages at once: the workers see them one at a time, in order */
    for (int i = 0; i < 40; i++) {
        char m[16];
        int ml = snprintf(m, sizeof m, "m%d", i);
        n += t_ws_frame(f + n, 0x1, true, m, (size_t)ml);
    }
    CHECK(t_send(&c, f, n));
    for (int i = 0; i < 40; i++) {
        char want[16];
        snprintf(want, sizeof want, "m%d", i);
        CHECK(t_ws_read(&c, &op, data, sizeof data, &len));
        CHECK_STR_EQ(data, want);
    }
    t_close(&c);
    CHECK(t_wait_int(&t->ws_closed, 1));
    CHECK_EQ(atomic_load(&t->ws_overlap), 0);
    CHECK_EQ(atomic_load(&t->ws_closed_after), 40);
}

TEST(ws_http_websocket_offload_in_order)
{
    WITH_SERVER(t_params(), body_ws_offload);
}

// ---- offloaded handlers ------------------------------------------------------------

static void body_offload(struct tsrv *t)
{
    static struct tconn c;
    static struct tresp r;
    CHECK(t_connect(&c, t->port));
    CHECK(t_sends(&c, "POST /offload?a=x%20y&b=2 HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                      "Content-Type: application/json\r\nX-Custom: custom value\r\n"
                      "X-Stainless-OS: Linux\r\nContent-Length: 7\r\n\r\n{\"k\":1}"
                      "GET /offload-silent HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
                      "GET /echo?n=3 HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"));
    CHECK(t_read(&c, &r));
    CHECK_EQ(r.status, 200);
    CHECK_STR_EQ(r.body, "POST /offload ct=application/json x=custom value os=Linux a=x y "
                         "draining=0 body={\"k\":1}");
    CHECK_STR_EQ(t_header(&r, "x-worker"), "yes");
    /* a worker that answers nothing: 500, and the connection goes on */
    CHECK(t_read(&c, &r));
    CHECK_EQ(r.status, 500);
    pthread_mutex_lock(&t->done_lock);    /* logged before the next request began */
    bool route_ok = !strcmp(t->offload_route, "/offload");
    pthread_mutex_unlock(&t->done_lock);
    CHECK(route_ok);
    CHECK(t_read(&c, &r));
    CHECK_STR_EQ(r.body, "GET n=3 body=");
    t_close(&c);
}

TEST(ws_http_offload_runs_on_a_detached_copy)
{
    WITH_SERVER(t_params(), body_offload);
}

static void body_offload_abort(struct tsrv *t)
{
    static struct tconn c;
    CHECK(t_connect(&c, t->port));
    CHECK(t_sends(&c, "GET /offload-wait HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"));
    double end = t_now() + T_WAIT_S;
    while (!atomic_load(&t->offload_waiting) && t_now() < end)
        t_sleep_ms(2);
    CHECK(atomic_load(&t->offload_waiting));
    t_close(&c);                          /* the client leaves before the worker deferred */
    CHECK(t_wait_int(&t->n_aborted, 1));
    CHECK_EQ(atomic_load(&t->n_abort_cb), 0);
    atomic_store(&t->gate_open, true);
    CHECK(t_wait_int(&t->worker_done, 1));
    CHECK(t_wait_int(&t->n_abort_cb, 1));
    struct ws_out *o = atomic_exchange(&t->held, NULL);
    CHECK(o);
    CHECK(ws_out_gone(o));
    ws_out_end(o);
    ws_out_release(o);
    CHECK(t_wait_int(&t->n_free_cb, 1));
    CHECK_EQ(atomic_load(&t->n_abort_cb), 1);
}

TEST(ws_http_offload_abort_exactly_once)
{
    WITH_SERVER(t_params(), body_offload_abort);
}

// ---- slow clients and connection limits ------------------------------------------------

static void body_request_timeout(struct tsrv *t)
{
    static struct tconn c, d;
    static struct tresp r;
    /* headers that never end -> 408 and close */
    CHECK(t_connect(&c, t->port));
    CHECK(t_sends(&c, "POST /echo HTTP/1.1\r\nHost: 127.0.0.1\r\n"));
    CHECK(t_read(&c, &r));
    CHECK_EQ(r.status, 408);
    CHECK(t_eof(&c));
    t_close(&c);
    /* a body trickling in -> 408 */
    CHECK(t_connect(&c, t->port));
    CHECK(t_sends(&c, "POST /echo HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 100\r\n\r\n{"));
    CHECK(t_read(&c, &r));
    CHECK_EQ(r.status, 408);
    CHECK(t_eof(&c));
    t_close(&c);
    /* a connection that says nothing is closed */
    CHECK(t_connect(&d, t->port));
    CHECK(t_eof(&d));
    t_close(&d);
}

TEST(ws_http_request_timeout)
{
    struct ws_server_params p = t_params();
    p.request_timeout_s = 0.3;
    WITH_SERVER(p, body_request_timeout);
}

static void body_per_ip(struct tsrv *t)
{
    static struct tconn a, b, c;
    static struct tresp r;
    const char *get = "GET /echo HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n";
    CHECK(t_connect(&a, t->port) && t_sends(&a, get) && t_read(&a, &r));
    CHECK(t_connect(&b, t->port) && t_sends(&b, get) && t_read(&b, &r));
    CHECK(t_connect(&c, t->port) && t_sends(&c, get) && t_read(&c, &r));
    CHECK_EQ(r.status, 503);
    CHECK_STR_EQ(t_header(&r, "connection"), "close");
    CHECK(t_eof(&c));
    t_close(&c);
    /* the first two still work; once one closes, a new one is let in */
    CHECK(t_sends(&a, get) && t_read(&a, &r));
    CHECK_EQ(r.status, 200);
    t_close(&b);
    double end = t_now() + T_WAIT_S;
    do {
        CHECK(t_connect(&c, t->port) && t_sends(&c, get) && t_read(&c, &r));
        t_close(&c);
    } while (r.status == 503 && t_now() < end);
    CHECK_EQ(r.status, 200);
    t_close(&a);
}

TEST(ws_http_connections_per_address_capped)
{
    struct ws_server_params p = t_params();
    p.max_conns_per_ip = 2;
    WITH_SERVER(p, body_per_ip);
}

static void body_room(struct tsrv *t)
{
    static struct tconn slow[4], c;
    static struct tresp r;
    /* every slot held by a request that trickles */
    for (int i = 0; i < 4; i++) {
        CHECK(t_connect(&slow[i], t->port));
        CHECK(t_sends(&slow[i], "POST /echo HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 100\r\n\r\n{"));
    }
    /* a new client still gets in: the oldest trickler makes room */
    CHECK(t_connect(&c, t->port));
    CHECK(t_sends(&c, "GET /echo HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"));
    CHECK(t_read(&c, &r));
    CHECK_EQ(r.status, 200);
    t_close(&c);
    /* one of the tricklers was closed for it */
    struct pollfd pf[4];
    for (int i = 0; i < 4; i++)
        pf[i] = (struct pollfd){ .fd = slow[i].fd, .events = POLLIN };
    CHECK(poll(pf, 4, T_WAIT_S * 1000) > 0);
    int closed = -1;
    for (int i = 0; i < 4 && closed < 0; i++)
        if (pf[i].revents)
            closed = i;
    CHECK(closed >= 0 && t_eof(&slow[closed]));
    for (int i = 0; i < 4; i++)
        t_close(&slow[i]);
}

TEST(ws_http_room_kept_for_new_connections)
{
    struct ws_server_params p = t_params();
    p.max_connections = 4;
    WITH_SERVER(p, body_room);
}

// ---- draining ------------------------------------------------------------------------

static void body_drain(struct tsrv *t)
{
    static struct tconn a, b, k;
    static struct tresp r;
    /* an idle keep-alive connection, and one whose response is pending */
    CHECK(t_connect(&k, t->port));
    CHECK(t_sends(&k, "GET /echo HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n") && t_read(&k, &r));
    CHECK(t_connect(&a, t->port));
    CHECK(t_sends(&a, "GET /slow HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"));
    double end = t_now() + T_WAIT_S;
    while (!atomic_load(&t->held) && t_now() < end)
        t_sleep_ms(2);
    CHECK(atomic_load(&t->held));
    ws_server_stop(t->srv);
    /* the idle keep-alive connection stays usable, with close now */
    CHECK(t_sends(&k, "GET /draining HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"));
    CHECK(t_read(&k, &r));
    CHECK_STR_EQ(r.body, "yes");
    CHECK_STR_EQ(t_header(&r, "connection"), "close");
    CHECK(t_eof(&k));
    /* new connections are still served, with close */
    CHECK(t_connect(&b, t->port));
    CHECK(t_sends(&b, "GET /draining HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"));
    CHECK(t_read(&b, &r));
    CHECK_EQ(r.status, 200);
    CHECK_STR_EQ(r.body, "yes");
    CHECK_STR_EQ(t_header(&r, "connection"), "close");
    CHECK(t_eof(&b));
    /* the pending response still completes */
    struct ws_out *o = atomic_exchange(&t->held, NULL);
    ws_out_start(o, 200, "text/plain", false);
    ws_out_write(o, "late", 4);
    ws_out_end(o);
    ws_out_release(o);
    CHECK(t_read(&a, &r));
    CHECK_STR_EQ(r.body, "late");
    CHECK_STR_EQ(t_header(&r, "connection"), "close");
    CHECK(t_eof(&a));
    t_close(&a);
    t_close(&b);
    t_close(&k);
}

TEST(ws_http_draining_serves_with_connection_close)
{
    WITH_SERVER(t_params(), body_drain);
}

// ---- TLS: HTTPS and WSS on the same port --------------------------------------------

static char t_tls_dir[64];
static SSL_CTX *t_tls_ctx;                /* the client: trusts only the test certificate */

/* A self-signed certificate for localhost and 127.0.0.1, its key and a
 * second key that does not match, made by the openssl command in a fresh
 * temporary directory. false when the command is absent or fails. */
static bool t_tls_make(void)
{
    snprintf(t_tls_dir, sizeof t_tls_dir, "/tmp/omni-tls-XXXXXX");
    if (system("openssl version >/dev/null 2>&1") != 0 || !mkdtemp(t_tls_dir))
        return false;
    char cmd[1024];
    snprintf(cmd, sizeof cmd,
             "openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 "
             "-subj /CN=localhost -addext subjectAltName=DNS:localhost,IP:127.0.0.1 "
             "-keyout %s/key.pem -out %s/cert.pem >/dev/null 2>&1 && "
             "openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:prime256v1 "
             "-out %s/other.pem >/dev/null 2>&1",
             t_tls_dir, t_tls_dir, t_tls_dir);
    return system(cmd) == 0;
}

static void t_tls_file(char *out, size_t cap, const char *name)
{
    snprintf(out, cap, "%s/%s", t_tls_dir, name);
}

static void t_tls_cleanup(void *unused)
{
    (void)unused;
    static const char *const names[] = { "cert.pem", "key.pem", "other.pem" };
    char path[128];
    for (int i = 0; i < 3; i++) {
        t_tls_file(path, sizeof path, names[i]);
        unlink(path);
    }
    rmdir(t_tls_dir);
    SSL_CTX_free(t_tls_ctx);
    t_tls_ctx = NULL;
}

/* A client that verifies the server against the test certificate and
 * offers h2 before http/1.1 in ALPN, as curl and browsers do. */
static bool t_tls_client(void)
{
    char ca[128];
    static const unsigned char alpn[] = "\x02h2\x08http/1.1";
    t_tls_file(ca, sizeof ca, "cert.pem");
    if (!(t_tls_ctx = SSL_CTX_new(TLS_client_method())))
        return false;
    SSL_CTX_set_verify(t_tls_ctx, SSL_VERIFY_PEER, NULL);
    return SSL_CTX_load_verify_locations(t_tls_ctx, ca, NULL) == 1 &&
           SSL_CTX_set_alpn_protos(t_tls_ctx, alpn, sizeof alpn - 1) == 0;
}

static bool t_tls_connect(struct tconn *c, int port)
{
    if (!t_connect(c, port) || !(c->ssl = SSL_new(t_tls_ctx)))
        return false;
    SSL_set_tlsext_host_name(c->ssl, "localhost");
    SSL_set1_host(c->ssl, "localhost");   /* the certificate must name it */
    SSL_set_fd(c->ssl, c->fd);
    bool ok = SSL_connect(c->ssl) == 1;
    if (!ok)
        ERR_print_errors_fp(stderr);
    return ok;
}

static void body_tls(struct tsrv *t)
{
    static struct tconn c;
    static struct tresp r;
    static char big[1500000 + 512];
    char raw[1024], data[512], origin[128];
    unsigned char f[600];
    const unsigned char *proto;
    unsigned proto_len;
    size_t len;
    int op;

    /* HTTPS: ALPN settles on http/1.1 (lws would pick h2); two GETs and a
     * POST whose 1.5 MB body outgrows the pipelining buffer, all in one
     * write - the server parses what TLS decrypted, answers in order. */
    CHECK(t_tls_connect(&c, t->port));
    SSL_get0_alpn_selected(c.ssl, &proto, &proto_len);
    CHECK(proto_len == 8 && !memcmp(proto, "http/1.1", 8));
    int n = snprintf(big, sizeof big,
                     "GET /echo?n=1 HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
                     "POST /echo?n=2 HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 1500000\r\n\r\n");
    memset(big + n, 'a', 1500000);
    n += 1500000;
    n += snprintf(big + n, sizeof big - (size_t)n,
                  "GET /echo?n=3 HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n");
    CHECK(t_send(&c, big, (size_t)n));
    CHECK(t_read(&c, &r));
    CHECK_EQ(r.status, 200);
    CHECK_STR_EQ(r.body, "GET n=1 body=");
    CHECK(t_read(&c, &r));
    CHECK_EQ(r.status, 200);
    CHECK(!strncmp(r.body, "POST n=2 body=aaaaaaaa", 22));
    CHECK(t_read(&c, &r));
    CHECK_STR_EQ(r.body, "GET n=3 body=");
    CHECK_STR_EQ(t_header(&r, "connection"), "close");
    CHECK(t_eof(&c));                     /* close_notify, then the end */
    t_close(&c);

    /* a 4 MB response: many writes that TLS cannot take at once */
    CHECK(t_tls_connect(&c, t->port));
    CHECK(t_sends(&c, "GET /big?n=4000000 HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"));
    char line[256];
    size_t content_length = 0;
    CHECK(t_line(&c, line, sizeof line));
    CHECK_STR_EQ(line, "HTTP/1.1 200 OK");
    while (t_line(&c, line, sizeof line) && line[0])
        if (!strncasecmp(line, "content-length:", 15))
            content_length = (size_t)atol(line + 15);
    CHECK_EQ(content_length, 4000000);
    bool same = true;
    for (size_t at = 0; at < content_length && same;) {
        char part[16384];
        size_t k = content_length - at < sizeof part ? content_length - at : sizeof part;
        CHECK(t_bytes(&c, part, k));
        for (size_t i = 0; i < k; i++)
            same &= (unsigned char)part[i] == (at + i) % 251;
        at += k;
    }
    CHECK(same);
    t_close(&c);

    /* WSS, from a page of this server (https origin); the key subprotocol
     * is not echoed */
    snprintf(origin, sizeof origin, "Origin: https://127.0.0.1\r\n"   /* Host: 127.0.0.1 */
             "Sec-WebSocket-Protocol: realtime, openai-insecure-api-key.sk-test\r\n");
    CHECK(t_tls_connect(&c, t->port));
    t_ws_upgrade_req(raw, sizeof raw, "/ws", origin);
    CHECK(t_sends(&c, raw));
    CHECK(t_read(&c, &r));
    CHECK_EQ(r.status, 101);
    CHECK_STR_EQ(t_header(&r, "sec-websocket-accept"), "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=");
    CHECK_STR_EQ(t_header(&r, "sec-websocket-protocol"), "realtime");
    memset(data, 'w', 300);
    size_t fl = t_ws_frame(f, 0x1, true, data, 300);
    CHECK(t_send(&c, f, fl));
    CHECK(t_ws_read(&c, &op, data, sizeof data, &len));
    CHECK_EQ(op, 1);
    CHECK_EQ(len, 300);
    CHECK(data[0] == 'w' && data[299] == 'w');
    fl = t_ws_frame(f, 0x8, true, "\x03\xe8", 2);
    CHECK(t_send(&c, f, fl));
    CHECK(t_ws_read(&c, &op, data, sizeof data, &len));
    CHECK_EQ(op, 8);
    CHECK(t_eof(&c));
    t_close(&c);

    /* with TLS on, an http:// origin is another site */
    snprintf(origin, sizeof origin, "Origin: http://127.0.0.1\r\n");
    CHECK(t_tls_connect(&c, t->port));
    t_ws_upgrade_req(raw, sizeof raw, "/ws", origin);
    CHECK(t_sends(&c, raw));
    CHECK(t_read(&c, &r));
    CHECK_EQ(r.status, 403);
    CHECK(t_eof(&c));
    t_close(&c);

    /* plain HTTP on the TLS port: closed without an answer */
    CHECK(t_connect(&c, t->port));
    CHECK(t_sends(&c, "GET /echo HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"));
    CHECK(t_eof(&c));
    CHECK_EQ(c.len, 0);
    t_close(&c);
}

TEST(ws_http_tls_https_and_wss_on_one_port)
{
    bool made = t_tls_make();
    test_defer(t_tls_cleanup, t_tls_dir);
    if (!made)
        SKIP("the openssl command is not available to make a test certificate");
    char cert[128], key[128];
    t_tls_file(cert, sizeof cert, "cert.pem");
    t_tls_file(key, sizeof key, "key.pem");
    struct ws_server_params p = t_params();
    p.tls_cert = cert;
    p.tls_key = key;
    CHECK(t_tls_client());
    WITH_SERVER(p, body_tls);
}

/* A refusal at accept time (over max_conns_per_ip) reaches a TLS client
 * once its handshake is done, whether it sends a request or stays silent. */
static void body_tls_cap(struct tsrv *t)
{
    static struct tconn a, b, c;
    static struct tresp r;
    CHECK(t_tls_connect(&a, t->port));
    CHECK(t_sends(&a, "GET /echo HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"));
    CHECK(t_read(&a, &r));
    CHECK_EQ(r.status, 200);              /* a is counted and stays open */
    CHECK(t_tls_connect(&b, t->port));    /* says nothing */
    CHECK(t_read(&b, &r));
    CHECK_EQ(r.status, 503);
    CHECK(t_eof(&b));
    CHECK(t_tls_connect(&c, t->port));
    CHECK(t_sends(&c, "GET /echo HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"));
    CHECK(t_read(&c, &r));
    CHECK_EQ(r.status, 503);
    CHECK_STR_CONTAINS(r.body, "too many connections");
    t_close(&a);
    t_close(&b);
    t_close(&c);
}

TEST(ws_http_tls_refusal_at_accept_reaches_the_client)
{
    bool made = t_tls_make();
    test_defer(t_tls_cleanup, t_tls_dir);
    if (!made)
        SKIP("the openssl command is not available to make a test certificate");
    char cert[128], key[128];
    t_tls_file(cert, sizeof cert, "cert.pem");
    t_tls_file(key, sizeof key, "key.pem");
    struct ws_server_params p = t_params();
    p.tls_cert = cert;
    p.tls_key = key;
    p.max_conns_per_ip = 1;
    CHECK(t_tls_client());
    WITH_SERVER(p, body_tls_cap);
}

/* Startup errors name the file that is wrong. */
TEST(ws_http_tls_bad_files_refused_at_startup)
{
    bool made = t_tls_make();
    test_defer(t_tls_cleanup, t_tls_dir);
    if (!made)
        SKIP("the openssl command is not available to make a test certificate");
    char cert[128], key[128], other[128], missing[128], err[512];
    t_tls_file(cert, sizeof cert, "cert.pem");
    t_tls_file(key, sizeof key, "key.pem");
    t_tls_file(other, sizeof other, "other.pem");
    t_tls_file(missing, sizeof missing, "missing.pem");
    struct ws_server_params p = t_params();
    p.handler = t_handler;
    p.port = 1;                           /* never bound: the files are checked first */
    const char *cases[][3] = {
        /* cert, key, in the message */
        { missing, key, missing },
        { cert, missing, missing },
        { key, key, key },                /* a key is not a certificate */
        { cert, other, other },           /* a key of another certificate */
        { cert, NULL, "both" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        p.tls_cert = cases[i][0];
        p.tls_key = cases[i][1];
        err[0] = 0;
        struct ws_server *s = ws_server_new(&p, err, sizeof err);
        CHECK(!s);
        CHECK_STR_CONTAINS(err, cases[i][2]);
    }
}
