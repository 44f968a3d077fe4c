/* ws_http.c - the HTTP/1.1 server behind ws_http.h.
 *
 * libwebsockets accepts the connections and moves bytes (its raw-socket
 * role); the HTTP/1.1 framing is ours (RFC 9112): request line and header
 * fields with limits (414, 431), Content-Length and chunked bodies, pipelined
 * requests answered one after another in order, keep-alive, the WebSocket
 * handshake (frames in ws_socket.c). lws 4.1's own h1 server could not be
 * made to do this: it parses bytes that arrive behind a request with that
 * request's parser state, waits for 100 MiB of body after a POST without
 * Content-Length, hangs up on oversized headers and hands chunked bodies on
 * raw and without an end.
 *
 * Each connection carries one transaction at a time (struct ws_req in the
 * per-session data); its response is a struct ws_out that other threads
 * fill under a lock and the service thread drains in WRITEABLE callbacks, at
 * most one write of WS_WRITE_CHUNK body bytes per callback, so a slow client
 * slows only its own stream. Handlers that call ws_req_offload continue on
 * the server's worker pool with a detached copy of the request. */
#include "ws/ws_http.h"

#include "src/core/omni.h"
#include "ws/ws_socket.h"

#include <arpa/inet.h>
#include <errno.h>
#include <libwebsockets.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#define WS_WRITE_CHUNK 16384         /* body bytes per WRITEABLE callback */
#define WS_HEADERS_MAX 16384         /* status line and response headers */
#define WS_MAX_EXTRA_HEADERS 8
#define WS_EXTRA_VALUE_MAX 1024
#define WS_MAX_COPIES 16             /* ws_req_query results kept per transaction */
#define WS_ID_MAX 64
#define WS_REQ_LINE_MAX 8192         /* request line; longer -> 414 */
#define WS_REQ_HEAD_MAX 16384        /* request line and header fields; more -> 431 */
#define WS_REQ_FIELDS_MAX 100        /* header fields; more -> 431 */
#define WS_CHUNKED_INITIAL 65536     /* first buffer of a body of unknown length */
#define WS_INBUF_PAUSE (1u << 20)    /* pipelined bytes buffered before reading pauses */
#define WS_KEEPALIVE_S 75.0          /* idle keep-alive connections; longer than clients' own */
#define WS_LINGER_S 2                /* after the last response: read and drop until EOF */
#define WS_ABORT_GRACE_S 2.0         /* after aborting at shutdown, wait this long for final events */
#define WS_TICK_US 250000            /* timeouts, SSE keep-alive, drain checks */
#define WS_IP_BUCKETS 256

// ---- the deferred response --------------------------------------------

struct ws_out {
    pthread_mutex_t lock;
    struct ws_server *srv;           /* immutable */
    ws_abort_fn on_abort;            /* {lock} set by ws_req_defer */
    ws_free_fn on_free;              /* {lock} */
    void *user;                      /* {lock} */
    int refs;                        /* {lock} */
    bool deferred;                   /* {lock} ws_req_defer handed it out: on_abort applies */
    bool abort_wanted, abort_called; /* {lock} on_abort runs once: wanted, deferred, not ended */
    bool started, stream, ended;     /* {lock} */
    bool gone;                       /* {lock} client left: writes are dropped */
    bool dirty;                      /* {lock} the service thread has not seen the latest change */
    bool overflow;                   /* {lock} more than max_pending_bytes unsent */
    int status;                      /* {lock} */
    char ctype[64];                  /* {lock} */
    char *buf;                       /* {lock} unsent bytes are buf[off, len) */
    size_t off, len, cap;            /* {lock} */
    int tokens_in, tokens_out;       /* {lock} */
    /* route and extra headers of an offloaded handler, read by the service
     * thread when it writes the headers and logs the transaction */
    const char *route;                                     /* {lock} */
    char *extra_name[WS_MAX_EXTRA_HEADERS], *extra_value[WS_MAX_EXTRA_HEADERS]; /* {lock} */
    int n_extra;                                           /* {lock} */
};

// ---- requests and connections -----------------------------------------

/* Where the chunked-body decoder is (RFC 9112 7.1): size line (hex digits,
 * optional ;extensions, CRLF), data, CRLF, ... a zero size, trailer lines,
 * an empty line. */
enum ws_dechunk_state {
    WS_CH_SIZE, WS_CH_EXT, WS_CH_SIZE_LF, WS_CH_DATA, WS_CH_DATA_CR, WS_CH_DATA_LF,
    WS_CH_TRAILER, WS_CH_TRAILER_LINE, WS_CH_TRAILER_LF, WS_CH_END_LF, WS_CH_DONE,
};

struct ws_dechunk {
    enum ws_dechunk_state state;
    uint64_t size;                        /* of the chunk being read */
    int digits;
};

struct ws_field {
    const char *name;                     /* lower case */
    const char *value;                    /* without surrounding whitespace */
};

/* One transaction. The connection's lives in struct ws_conn (service
 * thread); ws_req_offload makes a heap copy for a worker (conn NULL). */
struct ws_req {
    struct ws_server *srv;
    struct ws_conn *conn;                 /* NULL on a worker's copy */
    enum ws_method method;
    bool http10;                          /* HTTP/1.0: no chunked responses, no keep-alive */
    char *head;                           /* the header block, parsed in place */
    struct ws_field fields[WS_REQ_FIELDS_MAX];
    int n_fields;
    char *path;                           /* percent-decoded, without the query */
    char *query;                          /* raw, after '?'; NULL for none */
    char id[WS_ID_MAX + 1];
    const char *route;
    char *body;
    size_t body_len, body_cap;
    bool too_large;
    char *extra_name[WS_MAX_EXTRA_HEADERS], *extra_value[WS_MAX_EXTRA_HEADERS];
    int n_extra;
    char *copies[WS_MAX_COPIES];          /* ws_req_query results */
    int n_copies;
    struct ws_out *out;                   /* conn: the connection's reference; copy: the job's */
    bool claimed;                         /* ws_req_respond / ws_req_defer / ws_req_offload done */
    ws_handler_fn fn;                     /* copy: the offloaded handler */
    /* response progress (service thread) */
    double t_start;
    bool headers_sent, final_sent, aborted;
    double last_write;                    /* for SSE keep-alive comments */
};

/* A connection reads a request (IDLE -> HEAD -> BODY), waits for and
 * writes its response (WAIT), then reads the next one; LINGER drops input
 * until the client closes after the last response; WEBSOCKET after an
 * accepted upgrade. */
enum ws_conn_state { WS_C_IDLE, WS_C_HEAD, WS_C_BODY, WS_C_WAIT, WS_C_LINGER, WS_C_WEBSOCKET };

struct ws_ip {                            /* connections per client address */
    struct ws_ip *next;
    int n;
    char addr[INET6_ADDRSTRLEN];
};

struct ws_conn {                          /* lws per-session data: zeroed by lws */
    struct lws *wsi;
    struct ws_conn *prev, *next;          /* server's list of connections */
    bool linked;
    struct ws_ip *ip;
    enum ws_conn_state state;
    bool active;                          /* a transaction is in (headers read) and not done */
    bool close_after;                     /* close instead of keep-alive */
    bool send_continue;                   /* "100 Continue" owed */
    bool rx_paused;
    bool served;                          /* answered a request: idle means keep-alive */
    double t_idle;                        /* IDLE since */
    double t_req;                         /* first byte of the request being read */
    char *in;                             /* unread input in[in_off, in_len) */
    size_t in_off, in_len, in_cap;
    size_t scan;                          /* HEAD: where the search for the blank line resumes */
    bool chunked;
    uint64_t body_left;                   /* Content-Length bytes still to come */
    struct ws_dechunk dechunk;
    struct ws_req req;
    struct ws_sock *sock;                 /* after a WebSocket upgrade: the connection's reference */
    bool ws_handshake_due;                /* the 101 is still to be written */
    bool ws_realtime;                     /* the client offered the "realtime" subprotocol */
    bool in_upgrade;                      /* inside the upgrade hook: accept_websocket allowed */
    bool up;                              /* a byte was read or written: with TLS, the
                                             handshake is done */
    char ws_accept[29];
};

/* Offloaded handlers and WebSocket messages run here. */
struct ws_job {
    struct ws_job *next;
    void (*fn)(void *arg);
    void *arg;
};

struct ws_pool {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    struct ws_job *head, *tail;           /* {lock} */
    bool stopping;                        /* {lock} workers leave once the queue is empty */
    pthread_t *threads;                   /* owner: ws_server_new / ws_pool_stop */
    int n;                                /* {lock} running workers; 0: jobs run on the caller */
};

struct ws_server {
    struct ws_server_params p;
    char *host, *cors;                    /* owned copies */
    char *hosts_buf;                      /* allowed_hosts, split in place */
    const char **hosts;
    int n_hosts;
    bool any_host;                        /* allowed_hosts "*" */
    bool loopback;                        /* listening on a loopback address: Host is checked */
    bool tls;                             /* HTTPS and WSS (tls_cert, tls_key) */
    int max_conns;                        /* connections kept at once (room for new ones) */
    struct lws_context *ctx;
    struct lws_protocols protocols[2];
    struct ws_pool pool;
    struct ws_conn *conns;                /* service thread */
    int n_conns, n_active;                /* service thread */
    struct ws_ip *ips[WS_IP_BUCKETS];     /* service thread */
    volatile sig_atomic_t stop_requested; /* any thread / signal handler */
    atomic_bool draining_pub;             /* set by ws_server_stop: responses close, handlers
                                             see ws_req_draining; any thread */
    bool draining, aborted_all, finished; /* service thread */
    double drain_deadline, abort_deadline;
    lws_sorted_usec_list_t tick;
    char id_prefix[9];
    uint64_t next_id;                     /* service thread */
};

struct ws_server_params ws_default_params(void)
{
    return (struct ws_server_params){
        .host = "127.0.0.1",
        .port = 8000,
        .max_body_bytes = 32u << 20,
        .sse_keepalive_ms = 15000,
        .max_pending_bytes = 16u << 20,
        .shutdown_timeout_s = 10.0,
        .worker_threads = 4,
        .max_conns_per_ip = 128,
        .request_timeout_s = 30.0,
    };
}

static void ws_dispatch(struct ws_server *s, struct ws_conn *c);
static void ws_refuse(struct ws_server *s, struct ws_conn *c, int status, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

// ---- worker pool ----------------------------------------------------------

static void *ws_pool_main(void *arg)
{
    struct ws_pool *p = arg;
    pthread_mutex_lock(&p->lock);
    for (;;) {
        while (!p->head && !p->stopping)
            pthread_cond_wait(&p->cond, &p->lock);
        struct ws_job *j = p->head;
        if (!j)
            break;                        /* stopping and nothing left */
        p->head = j->next;
        if (!p->head)
            p->tail = NULL;
        pthread_mutex_unlock(&p->lock);
        j->fn(j->arg);
        free(j);
        pthread_mutex_lock(&p->lock);
    }
    pthread_mutex_unlock(&p->lock);
    return NULL;
}

static int ws_pool_start(struct ws_pool *p, int n)
{
    pthread_mutex_init(&p->lock, NULL);
    pthread_cond_init(&p->cond, NULL);
    if (n <= 0)
        return 0;
    if (!(p->threads = calloc((size_t)n, sizeof *p->threads)))
        return -1;
    for (; p->n < n; p->n++)
        if (pthread_create(&p->threads[p->n], NULL, ws_pool_main, p))
            return -1;
    return 0;
}

/* Workers finish the queue and leave; later jobs run on their caller. */
static void ws_pool_stop(struct ws_pool *p)
{
    pthread_mutex_lock(&p->lock);
    p->stopping = true;
    int n = p->n;
    pthread_cond_broadcast(&p->cond);
    pthread_mutex_unlock(&p->lock);
    for (int i = 0; i < n; i++)
        pthread_join(p->threads[i], NULL);
    pthread_mutex_lock(&p->lock);
    p->n = 0;
    pthread_mutex_unlock(&p->lock);
}

void ws_server_submit(struct ws_server *srv, void (*fn)(void *arg), void *arg)
{
    struct ws_pool *p = &srv->pool;
    struct ws_job *j = malloc(sizeof *j);
    pthread_mutex_lock(&p->lock);
    bool queued = j && p->n > 0 && !p->stopping;
    if (queued) {
        *j = (struct ws_job){ .fn = fn, .arg = arg };
        if (p->tail)
            p->tail->next = j;
        else
            p->head = j;
        p->tail = j;
        pthread_cond_signal(&p->cond);
    }
    pthread_mutex_unlock(&p->lock);
    if (!queued) {
        free(j);
        fn(arg);
    }
}

// ---- ws_out -------------------------------------------------------------

static struct ws_out *ws_out_new(struct ws_server *s, int refs)
{
    struct ws_out *o = calloc(1, sizeof *o);
    if (!o)
        return NULL;
    pthread_mutex_init(&o->lock, NULL);
    o->srv = s;
    o->refs = refs;
    return o;
}

/* Caller holds o->lock. Marks the change and tells whether the service
 * thread needs a wake-up (only the first change since it last looked). */
static bool ws_out_touch_locked(struct ws_out *o)
{
    bool wake = !o->dirty;
    o->dirty = true;
    return wake;
}

static void ws_out_wake(struct ws_out *o, bool wake)
{
    if (wake && o->srv->ctx)
        lws_cancel_service(o->srv->ctx);
}

/* Caller holds o->lock. Whether on_abort is due now; marks it called, so
 * that whichever thread sees this first is the only one to call it. */
static bool ws_out_take_abort_locked(struct ws_out *o)
{
    if (!o->abort_wanted || !o->deferred || o->abort_called || o->ended || !o->on_abort)
        return false;
    o->abort_called = true;
    return true;
}

void ws_out_start(struct ws_out *o, int status, const char *content_type, bool stream)
{
    pthread_mutex_lock(&o->lock);
    bool wake = false;
    if (!o->started) {
        o->started = true;
        o->status = status;
        o->stream = stream;
        snprintf(o->ctype, sizeof o->ctype, "%s", content_type ? content_type : "text/plain");
        wake = ws_out_touch_locked(o);
    }
    pthread_mutex_unlock(&o->lock);
    ws_out_wake(o, wake);
}

/* Caller holds o->lock. Appends unless the client is gone or the queue overflowed. */
static void ws_out_append_locked(struct ws_out *o, const char *data, size_t len)
{
    if (o->gone || o->overflow || o->ended || len == 0)
        return;
    size_t pending = o->len - o->off;
    if (pending + len > o->srv->p.max_pending_bytes) {
        o->overflow = true;               /* the service thread drops the client */
        return;
    }
    if (o->off > 0 && o->off >= o->len / 2) { /* compact before growing */
        memmove(o->buf, o->buf + o->off, pending);
        o->len = pending;
        o->off = 0;
    }
    if (o->len + len > o->cap) {
        size_t cap = o->cap ? o->cap : 4096;
        while (cap < o->len + len)
            cap *= 2;
        char *nb = realloc(o->buf, cap);
        if (!nb) {
            o->overflow = true;
            return;
        }
        o->buf = nb;
        o->cap = cap;
    }
    memcpy(o->buf + o->len, data, len);
    o->len += len;
}

void ws_out_write(struct ws_out *o, const char *data, size_t len)
{
    pthread_mutex_lock(&o->lock);
    ws_out_append_locked(o, data, len);
    bool wake = ws_out_touch_locked(o);
    pthread_mutex_unlock(&o->lock);
    ws_out_wake(o, wake);
}

size_t ws_sse_frame(char *dst, size_t cap, const char *event, const char *data, size_t len)
{
    size_t n = 0;
#define WS_PUT(src, cnt)                                                      \
    do {                                                                      \
        size_t c_ = (cnt);                                                    \
        if (n + c_ <= cap)                                                    \
            memcpy(dst + n, (src), c_);                                       \
        n += c_;                                                              \
    } while (0)
    if (event) {
        WS_PUT("event: ", 7);
        WS_PUT(event, strlen(event));
        WS_PUT("\n", 1);
    }
    /* Every line of data gets its own "data: " prefix (the SSE spec joins
     * them back with newlines); CR, LF and CRLF all end a line, and a final
     * line break does not start an empty line. */
    size_t i = 0;
    for (;;) {
        size_t j = i;
        while (j < len && data[j] != '\n' && data[j] != '\r')
            j++;
        WS_PUT("data: ", 6);
        WS_PUT(data + i, j - i);
        WS_PUT("\n", 1);
        if (j >= len)
            break;
        if (data[j] == '\r' && j + 1 < len && data[j + 1] == '\n')
            j++;
        i = j + 1;
        if (i >= len)
            break;
    }
    WS_PUT("\n", 1);
#undef WS_PUT
    return n;
}

void ws_out_sse(struct ws_out *o, const char *event, const char *data, size_t len)
{
    char small[1024];
    size_t need = ws_sse_frame(NULL, 0, event, data, len);
    char *buf = need <= sizeof small ? small : malloc(need);
    pthread_mutex_lock(&o->lock);
    if (buf) {
        ws_sse_frame(buf, need, event, data, len);
        ws_out_append_locked(o, buf, need);
    } else {
        o->overflow = true;
    }
    bool wake = ws_out_touch_locked(o);
    pthread_mutex_unlock(&o->lock);
    if (buf != small)
        free(buf);
    ws_out_wake(o, wake);
}

void ws_out_end(struct ws_out *o)
{
    pthread_mutex_lock(&o->lock);
    o->ended = true;
    bool wake = ws_out_touch_locked(o);
    pthread_mutex_unlock(&o->lock);
    ws_out_wake(o, wake);
}

void ws_out_set_tokens(struct ws_out *o, int tokens_in, int tokens_out)
{
    pthread_mutex_lock(&o->lock);
    o->tokens_in = tokens_in;
    o->tokens_out = tokens_out;
    pthread_mutex_unlock(&o->lock);
}

bool ws_out_gone(struct ws_out *o)
{
    pthread_mutex_lock(&o->lock);
    bool gone = o->gone;
    pthread_mutex_unlock(&o->lock);
    return gone;
}

void ws_out_release(struct ws_out *o)
{
    if (!o)
        return;
    pthread_mutex_lock(&o->lock);
    bool last = --o->refs == 0;
    ws_free_fn on_free = o->on_free;
    void *user = o->user;
    pthread_mutex_unlock(&o->lock);
    if (!last)
        return;
    if (on_free)
        on_free(user);
    for (int i = 0; i < o->n_extra; i++) {
        free(o->extra_name[i]);
        free(o->extra_value[i]);
    }
    pthread_mutex_destroy(&o->lock);
    free(o->buf);
    free(o);
}

// ---- requests -----------------------------------------------------------

static const char *const ws_method_names[] = {
    [WS_GET] = "GET", [WS_POST] = "POST", [WS_OPTIONS] = "OPTIONS", [WS_PUT] = "PUT",
    [WS_PATCH] = "PATCH", [WS_DELETE] = "DELETE", [WS_HEAD] = "HEAD", [WS_OTHER] = "OTHER",
};

enum ws_method ws_req_method(const struct ws_req *r) { return r->method; }
const char *ws_req_method_name(const struct ws_req *r) { return ws_method_names[r->method]; }
const char *ws_req_path(const struct ws_req *r) { return r->path ? r->path : "/"; }
const char *ws_req_id(const struct ws_req *r) { return r->id; }
bool ws_req_body_too_large(const struct ws_req *r) { return r->too_large; }

bool ws_req_draining(const struct ws_req *r)
{
    return atomic_load(&r->srv->draining_pub);
}

void ws_req_set_route(struct ws_req *r, const char *route)
{
    if (r->conn || !r->out) {
        r->route = route;
        return;
    }
    pthread_mutex_lock(&r->out->lock);   /* a worker: the service thread reads it there */
    r->out->route = route;
    pthread_mutex_unlock(&r->out->lock);
}

const char *ws_req_body(const struct ws_req *r, size_t *len)
{
    if (len)
        *len = r->body ? r->body_len : 0;
    return r->body ? r->body : "";
}

/* The first field of that name (any case), or NULL. */
static const char *ws_field(const struct ws_req *r, const char *name)
{
    for (int i = 0; i < r->n_fields; i++)
        if (!strcasecmp(r->fields[i].name, name))
            return r->fields[i].value;
    return NULL;
}

static int ws_field_count(const struct ws_req *r, const char *name)
{
    int n = 0;
    for (int i = 0; i < r->n_fields; i++)
        n += !strcasecmp(r->fields[i].name, name);
    return n;
}

/* Next element of a comma-separated list (RFC 9110 5.6.1) from *pp: its
 * start and length (parameters after ';' cut off), or false at the end. */
static bool ws_list_next(const char **pp, const char **tok, size_t *len)
{
    const char *p = *pp;
    for (;;) {
        while (*p == ' ' || *p == '\t' || *p == ',')
            p++;
        if (!*p)
            return false;
        const char *e = p;
        while (*e && *e != ',')
            e++;
        const char *t = p, *te = e;
        const char *semi = memchr(t, ';', (size_t)(te - t));
        if (semi)
            te = semi;
        while (te > t && (te[-1] == ' ' || te[-1] == '\t'))
            te--;
        *pp = e;
        p = e;
        if (te > t) {
            *tok = t;
            *len = (size_t)(te - t);
            return true;
        }
    }
}

/* Whether any field of that name lists token (case-insensitive). */
static bool ws_field_has_token(const struct ws_req *r, const char *name, const char *token)
{
    size_t tl = strlen(token);
    for (int i = 0; i < r->n_fields; i++) {
        if (strcasecmp(r->fields[i].name, name))
            continue;
        const char *p = r->fields[i].value, *t;
        size_t l;
        while (ws_list_next(&p, &t, &l))
            if (l == tl && !strncasecmp(t, token, l))
                return true;
    }
    return false;
}

const char *ws_req_header(struct ws_req *r, const char *name)
{
    return ws_field(r, name);
}

static int ws_hexval(char ch)
{
    return ch >= '0' && ch <= '9' ? ch - '0' : ch >= 'a' && ch <= 'f' ? ch - 'a' + 10
         : ch >= 'A' && ch <= 'F' ? ch - 'A' + 10 : -1;
}

/* Percent-decodes s[0, n) into dst (at most n bytes and a NUL); '+' is a
 * space when plus. false for a bad escape or an encoded NUL. */
static bool ws_pct_decode(char *dst, const char *s, size_t n, bool plus)
{
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] == '%') {
            if (i + 2 >= n)
                return false;
            int hi = ws_hexval(s[i + 1]), lo = ws_hexval(s[i + 2]);
            if (hi < 0 || lo < 0 || (hi == 0 && lo == 0))
                return false;
            dst[o++] = (char)(hi * 16 + lo);
            i += 2;
        } else {
            dst[o++] = plus && s[i] == '+' ? ' ' : s[i];
        }
    }
    dst[o] = 0;
    return true;
}

const char *ws_req_query(struct ws_req *r, const char *name)
{
    size_t nl = strlen(name);
    if (!r->query || r->n_copies >= WS_MAX_COPIES)
        return NULL;
    for (const char *p = r->query; *p;) {
        const char *e = strchr(p, '&');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        if (len > nl && p[nl] == '=' && !strncmp(p, name, nl)) {
            char *v = malloc(len - nl);
            if (!v || !ws_pct_decode(v, p + nl + 1, len - nl - 1, true)) {
                free(v);
                return NULL;
            }
            r->copies[r->n_copies++] = v;
            return v;
        }
        p += len + (e != NULL);
    }
    return NULL;
}

struct ws_sock *ws_req_accept_websocket(struct ws_req *r, const struct ws_sock_handler *h,
                                        void *user)
{
    struct ws_conn *c = r->conn;
    if (!c || !c->wsi || c->sock || !c->in_upgrade)
        return NULL;
    c->sock = ws_sock_new(r->srv, r->srv->ctx, h, user);
    return c->sock;
}

/* Header names are tokens and values plain text: anything that could end
 * the header line is refused here, so extra headers cannot inject others. */
static bool ws_header_ok(const char *name, const char *value)
{
    if (!*name || strlen(name) > 64 || strlen(value) > WS_EXTRA_VALUE_MAX)
        return false;
    for (const char *p = name; *p; p++)
        if (*p <= ' ' || *p == ':' || *p == 0x7f)
            return false;
    for (const char *p = value; *p; p++)
        if ((unsigned char)*p < ' ' && *p != '\t')
            return false;
    return true;
}

void ws_req_add_header(struct ws_req *r, const char *name, const char *value)
{
    if (!ws_header_ok(name, value))
        return;
    char *n = strdup(name), *v = strdup(value);
    if (!n || !v) {
        free(n);
        free(v);
        return;
    }
    bool added = false;
    if (r->conn || !r->out) {
        if (r->n_extra < WS_MAX_EXTRA_HEADERS) {
            r->extra_name[r->n_extra] = n;
            r->extra_value[r->n_extra++] = v;
            added = true;
        }
    } else {
        struct ws_out *o = r->out;       /* a worker: the service thread reads them there */
        pthread_mutex_lock(&o->lock);
        if (o->n_extra < WS_MAX_EXTRA_HEADERS) {
            o->extra_name[o->n_extra] = n;
            o->extra_value[o->n_extra++] = v;
            added = true;
        }
        pthread_mutex_unlock(&o->lock);
    }
    if (!added) {
        free(n);
        free(v);
    }
}

struct ws_out *ws_req_defer(struct ws_req *r, ws_abort_fn on_abort, ws_free_fn on_free,
                            void *user)
{
    if (r->claimed)
        return NULL;
    struct ws_out *o = r->out;
    if (!o) {
        if (!(o = ws_out_new(r->srv, 2)))
            return NULL;
        o->on_abort = on_abort;
        o->on_free = on_free;
        o->user = user;
        o->deferred = true;
        r->out = o;
    } else {                              /* a worker's copy: the out exists already */
        pthread_mutex_lock(&o->lock);
        o->on_abort = on_abort;
        o->on_free = on_free;
        o->user = user;
        o->deferred = true;
        o->refs++;                        /* the caller's */
        pthread_mutex_unlock(&o->lock);
    }
    r->claimed = true;
    return o;
}

void ws_req_respond(struct ws_req *r, int status, const char *content_type, const char *body,
                    size_t len)
{
    if (r->claimed)
        return;
    struct ws_out *o = r->out;
    if (!o && !(o = r->out = ws_out_new(r->srv, 1)))
        return;
    r->claimed = true;
    ws_out_start(o, status, content_type, false);
    ws_out_write(o, body, len);
    ws_out_end(o);
}

/* {"error":{...}} in the OpenAI shape, for answers the server gives itself. */
static void ws_respond_error(struct ws_req *r, int status, const char *msg)
{
    char esc[512], buf[768];
    size_t n = 0;
    for (const char *p = msg; *p && n + 7 < sizeof esc; p++) {
        unsigned char ch = (unsigned char)*p;
        if (ch == '"' || ch == '\\') {
            esc[n++] = '\\';
            esc[n++] = (char)ch;
        } else if (ch < 0x20) {
            n += (size_t)snprintf(esc + n, sizeof esc - n, "\\u%04x", ch);
        } else {
            esc[n++] = (char)ch;
        }
    }
    esc[n] = 0;
    const char *type = status == 503 ? "service_unavailable"
                     : status >= 500 ? "server_error" : "invalid_request_error";
    int len = snprintf(buf, sizeof buf,
                       "{\"error\":{\"message\":\"%s\",\"type\":\"%s\",\"param\":null,\"code\":null}}",
                       esc, type);
    ws_req_respond(r, status, "application/json", buf, (size_t)len);
}

/* Free what a transaction holds, keeping the connection and server links. */
static void ws_req_clear(struct ws_req *r)
{
    free(r->head);
    free(r->path);
    free(r->query);
    free(r->body);
    for (int i = 0; i < r->n_extra; i++) {
        free(r->extra_name[i]);
        free(r->extra_value[i]);
    }
    for (int i = 0; i < r->n_copies; i++)
        free(r->copies[i]);
    struct ws_conn *c = r->conn;
    struct ws_server *s = r->srv;
    memset(r, 0, sizeof *r);
    r->conn = c;
    r->srv = s;
}

// ---- offloading -----------------------------------------------------------

/* Worker: run the handler on the copy, then make sure the client hears
 * something and on_abort happens if the client left meanwhile. */
static void ws_offload_run(void *arg)
{
    struct ws_req *r = arg;
    struct ws_out *o = r->out;
    r->fn(r->srv->p.user, r);
    if (!r->claimed) {
        static const char msg[] = "internal error: no response";
        ws_respond_error(r, 500, msg);
    }
    pthread_mutex_lock(&o->lock);
    bool due = ws_out_take_abort_locked(o);
    ws_abort_fn on_abort = o->on_abort;
    void *user = o->user;
    pthread_mutex_unlock(&o->lock);
    if (due)
        on_abort(user);
    r->out = NULL;
    ws_req_clear(r);
    free(r);
    ws_out_release(o);                    /* the job's reference */
}

void ws_req_offload(struct ws_req *r, ws_handler_fn fn)
{
    struct ws_server *s = r->srv;
    if (!r->conn || r->claimed)
        return;
    struct ws_out *o = ws_out_new(s, 2);  /* the connection's and the job's */
    struct ws_req *w = o ? calloc(1, sizeof *w) : NULL;
    char *path = w ? strdup(ws_req_path(r)) : NULL;
    if (!path) {
        free(w);
        free(o);
        return;                           /* no response: the dispatcher answers 500 */
    }
    /* What the handler set so far moves to the out: from now on the service
     * thread reads the route and extra headers there. */
    o->route = r->route;
    for (int i = 0; i < r->n_extra; i++) {
        o->extra_name[i] = r->extra_name[i];
        o->extra_value[i] = r->extra_value[i];
    }
    o->n_extra = r->n_extra;
    r->n_extra = 0;

    w->srv = s;
    w->method = r->method;
    w->http10 = r->http10;
    w->head = r->head;                    /* the fields point into it: both move */
    memcpy(w->fields, r->fields, (size_t)r->n_fields * sizeof r->fields[0]);
    w->n_fields = r->n_fields;
    r->head = NULL;
    r->n_fields = 0;
    w->path = path;
    w->query = r->query;
    r->query = NULL;
    memcpy(w->id, r->id, sizeof w->id);
    w->route = r->route;
    w->body = r->body;
    w->body_len = r->body_len;
    w->too_large = r->too_large;
    r->body = NULL;
    r->body_len = 0;
    w->out = o;
    w->fn = fn;
    w->t_start = r->t_start;
    r->out = o;
    r->claimed = true;
    ws_server_submit(s, ws_offload_run, w);
}

// ---- parsing the request head ----------------------------------------------

static bool ws_tchar(unsigned char ch)
{
    return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
           (ch && strchr("!#$%&'*+-.^_`|~", ch));
}

/* Request line and header fields of the block h[0, n) (it ends with the
 * blank line), parsed in place: names lower-cased, names and values
 * NUL-terminated. Returns 0, or the status to refuse with and *why. */
static int ws_parse_head(struct ws_req *r, char *h, size_t n, char **target, const char **why)
{
    char *end = h + n;
    char *eol = memchr(h, '\n', n);
    char *le = eol > h && eol[-1] == '\r' ? eol - 1 : eol;
    *le = 0;
    if ((size_t)(le - h) > WS_REQ_LINE_MAX)
        return *why = "request line too long", 414;
    *why = "malformed request line";
    char *sp1 = strchr(h, ' ');
    char *sp2 = sp1 ? strchr(sp1 + 1, ' ') : NULL;
    if (!sp2 || strchr(sp2 + 1, ' ') || sp1 == h || sp2 == sp1 + 1)
        return 400;
    *sp1 = *sp2 = 0;
    const char *method = h, *version = sp2 + 1;
    *target = sp1 + 1;
    for (const char *p = method; *p; p++)
        if (!ws_tchar((unsigned char)*p))
            return 400;
    for (const char *p = *target; *p; p++)
        if ((unsigned char)*p <= ' ' || *p == 0x7f)
            return 400;
    if (!strcmp(version, "HTTP/1.1")) {
        r->http10 = false;
    } else if (!strcmp(version, "HTTP/1.0")) {
        r->http10 = true;
    } else if (!strncmp(version, "HTTP/", 5) && version[5] >= '0' && version[5] <= '9' &&
               version[6] == '.' && version[7] >= '0' && version[7] <= '9' && !version[8]) {
        return *why = "only HTTP/1.0 and HTTP/1.1 are served", 505;
    } else {
        return 400;
    }
    static const enum ws_method methods[] = { WS_GET, WS_POST, WS_OPTIONS, WS_PUT,
                                              WS_PATCH, WS_DELETE, WS_HEAD };
    r->method = WS_OTHER;
    for (size_t i = 0; i < sizeof methods / sizeof methods[0]; i++)
        if (!strcmp(method, ws_method_names[methods[i]]))
            r->method = methods[i];

    for (char *p = eol + 1; p < end;) {
        char *nl = memchr(p, '\n', (size_t)(end - p));
        char *fe = nl > p && nl[-1] == '\r' ? nl - 1 : nl;
        if (fe == p)
            break;                        /* the blank line */
        if (*p == ' ' || *p == '\t')
            return *why = "obsolete line folding in the header", 400;
        char *colon = memchr(p, ':', (size_t)(fe - p));
        if (!colon || colon == p)
            return *why = "malformed header field", 400;
        for (char *q = p; q < colon; q++) {
            if (!ws_tchar((unsigned char)*q))
                return *why = "malformed header field name", 400;
            if (*q >= 'A' && *q <= 'Z')
                *q = (char)(*q - 'A' + 'a');
        }
        char *v = colon + 1, *ve = fe;
        while (v < ve && (*v == ' ' || *v == '\t'))
            v++;
        while (ve > v && (ve[-1] == ' ' || ve[-1] == '\t'))
            ve--;
        for (char *q = v; q < ve; q++)
            if (((unsigned char)*q < ' ' && *q != '\t') || *q == 0x7f)
                return *why = "control character in a header field", 400;
        if (r->n_fields == WS_REQ_FIELDS_MAX)
            return *why = "too many header fields", 431;
        *colon = 0;
        *ve = 0;
        r->fields[r->n_fields++] = (struct ws_field){ p, v };
        p = nl + 1;
    }
    return 0;
}

/* Removes "." and ".." segments (RFC 3986 5.2.4) in place. */
static void ws_path_normalize(char *p)
{
    char *out = p;
    const char *in = p;
    bool dir = false;
    while (*in == '/') {
        const char *seg = in + 1, *e = strchr(seg, '/');
        size_t len = e ? (size_t)(e - seg) : strlen(seg);
        dir = false;
        if (len == 1 && seg[0] == '.') {
            dir = true;
        } else if (len == 2 && seg[0] == '.' && seg[1] == '.') {
            while (out > p && *--out != '/')
                ;
            dir = true;
        } else {
            *out++ = '/';
            memmove(out, seg, len);
            out += len;
        }
        in = seg + len;
    }
    if (dir || out == p)
        *out++ = '/';
    *out = 0;
}

/* Path and query from the request target: origin form ("/p?q"), absolute
 * form ("http://host/p?q": *authority gets the host) or "*" for OPTIONS.
 * false when it is none of them or badly escaped. */
static bool ws_parse_target(struct ws_req *r, const char *t, char *authority, size_t alen)
{
    authority[0] = 0;
    if (!strcmp(t, "*")) {
        if (r->method != WS_OPTIONS)
            return false;
        return (r->path = strdup("*")) != NULL;
    }
    size_t skip = !strncasecmp(t, "http://", 7) ? 7 : !strncasecmp(t, "https://", 8) ? 8 : 0;
    if (skip) {
        const char *a = t + skip;
        size_t al = strcspn(a, "/?");
        if (!al || al >= alen)
            return false;
        memcpy(authority, a, al);
        authority[al] = 0;
        t = a + al;
    } else if (t[0] != '/') {
        return false;
    }
    size_t pl = strcspn(t, "?#");
    if (!(r->path = malloc(pl + 2)))
        return false;
    if (pl == 0) {
        strcpy(r->path, "/");
    } else if (!ws_pct_decode(r->path, t, pl, false)) {
        return false;
    }
    ws_path_normalize(r->path);
    if (t[pl] == '?') {
        size_t ql = strcspn(t + pl + 1, "#");
        if (!(r->query = strndup(t + pl + 1, ql)))
            return false;
    }
    return true;
}

/* Whether Host (name[:port]) names this machine's loopback or one of the
 * configured names. */
static bool ws_host_allowed(const struct ws_server *s, const char *host)
{
    if (s->any_host)
        return true;
    char name[256];
    size_t n;
    if (host[0] == '[') {
        const char *e = strchr(host, ']');
        if (!e)
            return false;
        n = (size_t)(e - host) + 1;
    } else {
        n = strcspn(host, ":");
    }
    const char *port = host + n;
    if (*port && (*port != ':' || strspn(port + 1, "0123456789") != strlen(port + 1)))
        return false;
    if (n == 0 || n >= sizeof name)
        return false;
    memcpy(name, host, n);
    name[n] = 0;
    if (n > 1 && name[n - 1] == '.')
        name[--n] = 0;                    /* "localhost." */
    struct in_addr a4;
    /* 0.0.0.0 reaches loopback too (curl http://0.0.0.0:8000); a page
     * cannot use it to read us: its Origin is refused. */
    if (!strcasecmp(name, "localhost") || !strcmp(name, "[::1]") || !strcmp(name, "0.0.0.0") ||
        (inet_pton(AF_INET, name, &a4) == 1 && (ntohl(a4.s_addr) >> 24) == 127))
        return true;
    for (int i = 0; i < s->n_hosts; i++)
        if (!strcasecmp(name, s->hosts[i]))
            return true;
    return false;
}

/* A browser's Origin is fine when --cors-origin allows it or it is this
 * server itself: the Host header's host:port, with https:// when we speak
 * TLS; without TLS either scheme, since a TLS-terminating proxy in front
 * passes https:// origins on. */
static bool ws_origin_allowed(const struct ws_server *s, const char *origin, const char *host)
{
    if (s->cors && (!strcmp(s->cors, "*") || !strcasecmp(s->cors, origin)))
        return true;
    size_t skip = !strncasecmp(origin, "https://", 8)               ? 8
                : !s->tls && !strncasecmp(origin, "http://", 7) ? 7 : 0;
    return skip && host && !strcasecmp(origin + skip, host);
}

// ---- transaction lifecycle --------------------------------------------------

static bool ws_id_char_ok(char ch)
{
    return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
           ch == '-' || ch == '_' || ch == '.';
}

/* The client's x-request-id when it is short and plain (so it can be echoed
 * into headers and logs safely), otherwise a fresh one. */
static void ws_assign_id(struct ws_server *s, struct ws_req *r)
{
    const char *cid = ws_field(r, "x-request-id");
    bool ok = cid && cid[0] && strlen(cid) <= WS_ID_MAX;
    for (const char *p = cid; ok && *p; p++)
        ok = ws_id_char_ok(*p);
    if (ok)
        snprintf(r->id, sizeof r->id, "%s", cid);
    else
        snprintf(r->id, sizeof r->id, "%s%08llx", s->id_prefix,
                 (unsigned long long)++s->next_id);
}

static void ws_done(struct ws_server *s, struct ws_conn *c, bool aborted)
{
    struct ws_req *r = &c->req;
    if (!s->p.on_done)
        return;
    struct ws_done_info d = {
        .request_id = r->id,
        .method = ws_method_names[r->method],
        .path = ws_req_path(r),
        .route = r->route ? r->route : "unmatched",
        .status = aborted ? 499 : 500,
        .duration_ms = (omni_time_s() - r->t_start) * 1e3,
        .aborted = aborted,
    };
    if (r->out) {
        pthread_mutex_lock(&r->out->lock);
        if (r->out->started)
            d.status = r->out->status;
        else if (aborted)
            d.status = 499;              /* client closed before an answer (nginx's code) */
        if (r->out->route)
            d.route = r->out->route;
        d.tokens_in = r->out->tokens_in;
        d.tokens_out = r->out->tokens_out;
        pthread_mutex_unlock(&r->out->lock);
    }
    s->p.on_done(s->p.user, &d);
}

/* The client left (client_gone) or shutdown gave up waiting: stop the
 * producer, once. At shutdown the client is still there, so the producer's
 * closing output (finish chunk, [DONE]) still reaches it. A handler still
 * running on a worker gets on_abort when it returns (ws_offload_run). */
static void ws_abort(struct ws_conn *c, bool client_gone)
{
    struct ws_out *o = c->req.out;
    if (!o || c->req.aborted)
        return;
    c->req.aborted = true;
    pthread_mutex_lock(&o->lock);
    o->gone |= client_gone;
    o->abort_wanted = true;
    bool due = ws_out_take_abort_locked(o);
    ws_abort_fn on_abort = o->on_abort;
    void *user = o->user;
    pthread_mutex_unlock(&o->lock);
    if (due)
        on_abort(user);
}

/* End of a transaction: log, drop the connection's reference. */
static void ws_finish(struct ws_server *s, struct ws_conn *c, bool aborted)
{
    if (!c->active)
        return;
    ws_done(s, c, aborted);
    ws_out_release(c->req.out);
    c->req.out = NULL;
    c->active = false;
    s->n_active--;
    ws_req_clear(&c->req);
}

/* A transaction begins: its headers are in (or the server answers before
 * reading them). */
static void ws_begin(struct ws_server *s, struct ws_conn *c)
{
    if (c->active)
        return;
    ws_req_clear(&c->req);
    c->req.t_start = c->t_req > 0 ? c->t_req : omni_time_s();
    c->active = true;
    s->n_active++;
}

/* Kill the connection without a word (lws closes it on its next pass). */
static void ws_kill(struct ws_conn *c)
{
    c->state = WS_C_LINGER;
    lws_set_timeout(c->wsi, PENDING_TIMEOUT_USER_OK, LWS_TO_KILL_ASYNC);
}

/* The server answers this request itself and closes the connection. */
static void ws_refuse(struct ws_server *s, struct ws_conn *c, int status, const char *fmt, ...)
{
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    struct ws_req *r = &c->req;
    if (!c->active) {
        ws_begin(s, c);
        r->method = WS_OTHER;
    }
    if (!r->id[0])
        ws_assign_id(s, r);
    c->close_after = true;
    c->send_continue = false;
    c->state = WS_C_WAIT;
    if (!r->claimed)
        ws_respond_error(r, status, msg);
    if (!r->out) {
        ws_kill(c);                       /* out of memory even for that */
        return;
    }
    lws_callback_on_writable(c->wsi);
}

static void ws_dispatch(struct ws_server *s, struct ws_conn *c)
{
    struct ws_req *r = &c->req;
    c->state = WS_C_WAIT;
    c->send_continue = false;
    if (r->body)
        r->body[r->body_len] = 0;
    s->p.handler(s->p.user, r);
    if (!r->out)
        ws_respond_error(r, 500, "internal error: no response");
    if (!r->out) {
        ws_kill(c);
        return;
    }
    lws_callback_on_writable(c->wsi);
}

// ---- reading requests ----------------------------------------------------------

/* Append n bytes of body, growing the buffer up to max_body_bytes. false
 * when the body is over the limit (or memory ran out): too_large. */
static bool ws_body_append(struct ws_server *s, struct ws_req *r, const char *in, size_t n)
{
    if (n > s->p.max_body_bytes - r->body_len) {
        r->too_large = true;
        return false;
    }
    if (r->body_len + n + 1 > r->body_cap) {
        size_t cap = r->body_cap * 2 > r->body_len + n + 1 ? r->body_cap * 2 : r->body_len + n + 1;
        if (cap > s->p.max_body_bytes + 1)
            cap = s->p.max_body_bytes + 1;
        char *nb = realloc(r->body, cap);
        if (!nb) {
            r->too_large = true;
            return false;
        }
        r->body = nb;
        r->body_cap = cap;
    }
    if (n)
        memcpy(r->body + r->body_len, in, n);
    r->body_len += n;
    return true;
}

/* Feed chunked-encoded bytes; *used tells how many belonged to the body
 * (what follows is the next request). 1 once the last chunk and the
 * trailer are in, 0 for more, -1 on broken framing or when the body went
 * over the limit (too_large). */
static int ws_dechunk_feed(struct ws_server *s, struct ws_req *r, struct ws_dechunk *d,
                           const char *in, size_t len, size_t *used)
{
    size_t i = 0;
    for (; i < len && d->state != WS_CH_DONE; i++) {
        char ch = in[i];
        switch (d->state) {
        case WS_CH_SIZE: {
            int v = ws_hexval(ch);
            if (v >= 0) {
                if (++d->digits > 15)      /* over 2^60: not a size anyone means */
                    return -1;
                d->size = d->size * 16 + (uint64_t)v;
            } else if (d->digits && (ch == ';' || ch == ' ' || ch == '\t')) {
                d->state = WS_CH_EXT;
            } else if (d->digits && ch == '\r') {
                d->state = WS_CH_SIZE_LF;
            } else {
                return -1;
            }
            break;
        }
        case WS_CH_EXT:                    /* chunk extensions are ignored */
            if (ch == '\r')
                d->state = WS_CH_SIZE_LF;
            else if (ch == '\n')
                return -1;
            break;
        case WS_CH_SIZE_LF:
            if (ch != '\n')
                return -1;
            d->state = d->size ? WS_CH_DATA : WS_CH_TRAILER;
            break;
        case WS_CH_DATA: {
            size_t n = len - i < d->size ? len - i : (size_t)d->size;
            if (!ws_body_append(s, r, in + i, n))
                return -1;
            d->size -= n;
            i += n - 1;
            if (!d->size)
                d->state = WS_CH_DATA_CR;
            break;
        }
        case WS_CH_DATA_CR:
            if (ch != '\r')
                return -1;
            d->state = WS_CH_DATA_LF;
            break;
        case WS_CH_DATA_LF:
            if (ch != '\n')
                return -1;
            d->state = WS_CH_SIZE;
            d->digits = 0;
            break;
        case WS_CH_TRAILER:                /* trailer fields are ignored */
            d->state = ch == '\r' ? WS_CH_END_LF : WS_CH_TRAILER_LINE;
            break;
        case WS_CH_TRAILER_LINE:
            if (ch == '\r')
                d->state = WS_CH_TRAILER_LF;
            break;
        case WS_CH_TRAILER_LF:
            if (ch != '\n')
                return -1;
            d->state = WS_CH_TRAILER;
            break;
        case WS_CH_END_LF:
            if (ch != '\n')
                return -1;
            d->state = WS_CH_DONE;
            break;
        case WS_CH_DONE:
            break;
        }
    }
    *used = i;
    return d->state == WS_CH_DONE;
}

/* Body bytes for the request in BODY; returns how many it took (the rest
 * belongs to the next request). Dispatches once the body is complete. */
static size_t ws_body_feed(struct ws_server *s, struct ws_conn *c, const char *in, size_t len)
{
    struct ws_req *r = &c->req;
    if (!c->chunked) {
        size_t n = len < c->body_left ? len : (size_t)c->body_left;
        if (n)
            memcpy(r->body + r->body_len, in, n);
        r->body_len += n;
        c->body_left -= n;
        if (!c->body_left)
            ws_dispatch(s, c);
        return n;
    }
    size_t used = len;
    int rc = ws_dechunk_feed(s, r, &c->dechunk, in, len, &used);
    if (rc == 0)
        return used;
    if (rc < 0 && !r->too_large) {
        ws_refuse(s, c, 400, "malformed chunked request body");
        return len;
    }
    if (rc < 0) {                         /* over --max-body: the handler answers 413 */
        free(r->body);
        r->body = NULL;
        r->body_len = 0;
        c->close_after = true;
        ws_dispatch(s, c);
        return len;
    }
    ws_dispatch(s, c);
    return used;
}

/* Offset just past the blank line that ends the header block in p[0, len),
 * or 0 for more; *scan says where the search resumes. */
static size_t ws_head_end(const char *p, size_t len, size_t *scan)
{
    for (size_t i = *scan; i < len; i++) {
        if (p[i] != '\n')
            continue;
        if (i + 1 >= len) {
            *scan = i;
            return 0;
        }
        if (p[i + 1] == '\n')
            return i + 2;
        if (p[i + 1] == '\r') {
            if (i + 2 >= len) {
                *scan = i;
                return 0;
            }
            if (p[i + 2] == '\n')
                return i + 3;
        }
    }
    *scan = len;
    return 0;
}

static void ws_on_upgrade(struct ws_server *s, struct ws_conn *c);

/* The header block in[in_off, +n) is complete: parse it, check it and
 * start reading the body or dispatch. */
static void ws_on_head(struct ws_server *s, struct ws_conn *c, size_t n)
{
    struct ws_req *r = &c->req;
    ws_begin(s, c);
    r->head = malloc(n + 1);
    if (!r->head) {
        ws_refuse(s, c, 500, "out of memory");
        return;
    }
    memcpy(r->head, c->in + c->in_off, n);
    r->head[n] = 0;
    c->in_off += n;
    const char *why = NULL;
    char *target = NULL, authority[256];
    int status = ws_parse_head(r, r->head, n, &target, &why);
    ws_assign_id(s, r);
    if (status) {
        ws_refuse(s, c, status, "%s", why);
        return;
    }
    if (!ws_parse_target(r, target, authority, sizeof authority)) {
        ws_refuse(s, c, 400, "malformed request target");
        return;
    }
    if (r->http10 || ws_field_has_token(r, "connection", "close"))
        c->close_after = true;

    /* Host (RFC 9112 3.2): one, and on loopback one that names this machine,
     * so that a page whose DNS name rebinds to 127.0.0.1 cannot read us. */
    int n_host = ws_field_count(r, "host");
    const char *host = authority[0] ? authority : ws_field(r, "host");
    if (n_host > 1 || (n_host == 0 && !r->http10)) {
        ws_refuse(s, c, 400, n_host ? "more than one Host header" : "missing Host header");
        return;
    }
    if (s->loopback && host && !ws_host_allowed(s, host)) {
        ws_refuse(s, c, 403, "Host not allowed: the server listens on loopback and answers "
                             "only localhost, 127.0.0.1, [::1], 0.0.0.0 and --allowed-hosts");
        return;
    }
    /* Browsers send Origin on cross-origin requests: only --cors-origin may. */
    const char *origin = ws_field(r, "origin");
    if (origin && !ws_origin_allowed(s, origin, host)) {
        ws_refuse(s, c, 403, "cross-origin request refused: origin not allowed (serve --cors-origin)");
        return;
    }
    const char *upgrade = ws_field(r, "upgrade");
    if (upgrade && ws_field_has_token(r, "upgrade", "websocket")) {
        ws_on_upgrade(s, c);
        return;
    }

    /* Body framing (RFC 9112 6): Transfer-Encoding chunked, else
     * Content-Length, else none. */
    int n_te = ws_field_count(r, "transfer-encoding");
    int n_cl = ws_field_count(r, "content-length");
    bool chunked = false;
    uint64_t clen = 0;
    if (n_te) {
        if (n_cl || r->http10) {
            ws_refuse(s, c, 400, n_cl ? "both Transfer-Encoding and Content-Length"
                                      : "Transfer-Encoding in an HTTP/1.0 request");
            return;
        }
        /* The final coding must be chunked (400 otherwise); codings we do
         * not know or cannot undo get 501. */
        int count = 0, n_chunked = 0;
        bool last_chunked = false, unknown = false;
        for (int i = 0; i < r->n_fields; i++) {
            if (strcmp(r->fields[i].name, "transfer-encoding"))
                continue;
            const char *p = r->fields[i].value, *t;
            size_t l;
            while (ws_list_next(&p, &t, &l)) {
                count++;
                last_chunked = l == 7 && !strncasecmp(t, "chunked", 7);
                n_chunked += last_chunked;
                if (!last_chunked)
                    unknown = true;       /* gzip, deflate, compress: not decoded here */
            }
        }
        if (!count || !last_chunked || n_chunked > 1) {
            ws_refuse(s, c, 400, "Transfer-Encoding must end with chunked (once)");
            return;
        }
        if (unknown) {
            ws_refuse(s, c, 501, "transfer codings other than chunked are not supported");
            return;
        }
        chunked = true;
    } else if (n_cl) {
        const char *prev = NULL;
        for (int i = 0; i < r->n_fields; i++) {
            if (strcmp(r->fields[i].name, "content-length"))
                continue;
            const char *v = r->fields[i].value;
            size_t l = strlen(v);
            if (!l || l > 18 || strspn(v, "0123456789") != l || (prev && strcmp(prev, v))) {
                ws_refuse(s, c, 400, "bad Content-Length");
                return;
            }
            prev = v;
        }
        clen = strtoull(prev, NULL, 10);
    }
    bool has_body = chunked || clen > 0;

    const char *expect = ws_field(r, "expect");
    if (expect && strcasecmp(expect, "100-continue")) {
        ws_refuse(s, c, 417, "only 'Expect: 100-continue' is understood");
        return;
    }
    if (r->method == WS_OPTIONS && s->cors) { /* CORS preflight */
        if (has_body)
            c->close_after = true;
        r->route = "preflight";
        const char *want = ws_field(r, "access-control-request-headers");
        ws_req_add_header(r, "access-control-allow-methods", "GET, POST, OPTIONS");
        ws_req_add_header(r, "access-control-allow-headers",
                          want && *want && strlen(want) < WS_EXTRA_VALUE_MAX ? want : "*");
        ws_req_add_header(r, "access-control-max-age", "600");
        c->state = WS_C_WAIT;
        ws_req_respond(r, 204, "text/plain", "", 0);
        lws_callback_on_writable(c->wsi);
        return;
    }
    if (!has_body) {
        ws_dispatch(s, c);
        return;
    }
    if (!chunked && clen > s->p.max_body_bytes) {
        /* Too large: answer (the handler says 413) and close rather than
         * read what would be thrown away. */
        r->too_large = true;
        c->close_after = true;
        ws_dispatch(s, c);
        return;
    }
    c->chunked = chunked;
    c->body_left = clen;
    memset(&c->dechunk, 0, sizeof c->dechunk);
    r->body_cap = chunked ? WS_CHUNKED_INITIAL : (size_t)clen + 1;
    if (chunked && r->body_cap > s->p.max_body_bytes + 1)
        r->body_cap = s->p.max_body_bytes + 1;
    if (!(r->body = malloc(r->body_cap))) {
        ws_refuse(s, c, 500, "out of memory");
        return;
    }
    c->state = WS_C_BODY;
    if (expect && !r->http10) {
        c->send_continue = true;
        lws_callback_on_writable(c->wsi);
    }
}

static void ws_in_drop(struct ws_conn *c)
{
    c->in_off = c->in_len = 0;
}

/* Keep n unread bytes: false when out of memory. */
static bool ws_in_append(struct ws_conn *c, const char *data, size_t n)
{
    if (c->in_off == c->in_len)
        c->in_off = c->in_len = 0;
    if (c->in_len + n > c->in_cap && c->in_off) {
        memmove(c->in, c->in + c->in_off, c->in_len - c->in_off);
        c->in_len -= c->in_off;
        c->in_off = 0;
    }
    if (c->in_len + n > c->in_cap) {
        size_t cap = c->in_cap ? c->in_cap : 4096;
        while (cap < c->in_len + n)
            cap *= 2;
        char *nb = realloc(c->in, cap);
        if (!nb)
            return false;
        c->in = nb;
        c->in_cap = cap;
    }
    memcpy(c->in + c->in_len, data, n);
    c->in_len += n;
    return true;
}

/* Work through the buffered input: headers, body, the next request. */
static void ws_conn_advance(struct ws_server *s, struct ws_conn *c)
{
    for (;;) {
        size_t avail = c->in_len - c->in_off;
        switch (c->state) {
        case WS_C_IDLE:
            /* RFC 9112 2.2: blank lines before a request line are ignored */
            while (avail && (c->in[c->in_off] == '\r' || c->in[c->in_off] == '\n')) {
                c->in_off++;
                avail--;
            }
            if (!avail)
                return;
            c->state = WS_C_HEAD;
            c->t_req = omni_time_s();
            c->scan = 0;
            continue;
        case WS_C_HEAD: {
            const char *p = c->in + c->in_off;
            size_t end = ws_head_end(p, avail, &c->scan);
            size_t line = end ? end : avail;
            const char *nl = memchr(p, '\n', line < WS_REQ_LINE_MAX + 2 ? line : WS_REQ_LINE_MAX + 2);
            if (!nl && line > WS_REQ_LINE_MAX + 1) {
                ws_refuse(s, c, 414, "request line longer than %d bytes", WS_REQ_LINE_MAX);
                return;
            }
            if ((end ? end : avail) > WS_REQ_HEAD_MAX) {
                ws_refuse(s, c, 431, "request header fields larger than %d bytes", WS_REQ_HEAD_MAX);
                return;
            }
            if (!end)
                return;
            ws_on_head(s, c, end);
            continue;
        }
        case WS_C_BODY:
            if (!avail)
                return;
            c->in_off += ws_body_feed(s, c, c->in + c->in_off, avail);
            if (c->state == WS_C_BODY)
                return;
            continue;
        case WS_C_WAIT:
            if (c->close_after) {
                ws_in_drop(c);            /* nothing after this response is read */
            } else if (avail > WS_INBUF_PAUSE && !c->rx_paused) {
                lws_rx_flow_control(c->wsi, 0);
                c->rx_paused = true;
            }
            return;
        case WS_C_WEBSOCKET:
            if (c->ws_handshake_due || !avail)
                return;
            if (ws_sock_on_receive(c->sock, c->in + c->in_off, avail) < 0)
                ws_kill(c);
            else if (ws_sock_take_dirty(c->sock))
                lws_callback_on_writable(c->wsi);
            ws_in_drop(c);
            return;
        case WS_C_LINGER:
            ws_in_drop(c);
            return;
        }
    }
}

static int ws_on_rx(struct ws_server *s, struct ws_conn *c, const char *in, size_t len)
{
    switch (c->state) {
    case WS_C_LINGER:
        return 0;
    case WS_C_WEBSOCKET:
        if (c->ws_handshake_due)
            break;                        /* kept until the 101 is out */
        if (ws_sock_on_receive(c->sock, in, len) < 0)
            return -1;
        if (ws_sock_take_dirty(c->sock))
            lws_callback_on_writable(c->wsi);
        return 0;
    case WS_C_WAIT:
        if (c->close_after)
            return 0;
        break;
    case WS_C_BODY:
        if (c->in_off == c->in_len) {     /* straight into the body, no copy */
            size_t used = ws_body_feed(s, c, in, len);
            in += used;
            len -= used;
        }
        break;
    default:
        break;
    }
    if (len && !ws_in_append(c, in, len))
        return -1;
    ws_conn_advance(s, c);
    return 0;
}

// ---- WebSocket handshake ----------------------------------------------------------

/* Upgrade: websocket (RFC 6455 4.2). Refusals are HTTP answers with a JSON
 * body: 400 malformed handshake, 403 (host/origin, checked before), 404 no
 * endpoint, 503 draining, or whatever the upgrade hook answered. */
static void ws_on_upgrade(struct ws_server *s, struct ws_conn *c)
{
    struct ws_req *r = &c->req;
    const char *key = ws_field(r, "sec-websocket-key");
    const char *ver = ws_field(r, "sec-websocket-version");
    const char *cl = ws_field(r, "content-length");
    c->state = WS_C_WAIT;
    if (r->method != WS_GET || r->http10 || !ws_field_has_token(r, "connection", "upgrade") ||
        !key || strlen(key) != 24 || strspn(key, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
                                                  "0123456789+/=") != 24 ||
        (cl && strcmp(cl, "0")) || ws_field(r, "transfer-encoding")) {
        ws_refuse(s, c, 400, "malformed WebSocket handshake (needs GET, HTTP/1.1, Connection: "
                             "Upgrade and a 16-byte base64 Sec-WebSocket-Key)");
        return;
    }
    if (!ver || strcmp(ver, "13")) {
        ws_req_add_header(r, "sec-websocket-version", "13");
        ws_refuse(s, c, 400, "unsupported WebSocket version (13 only)");
        return;
    }
    if (atomic_load(&s->draining_pub)) {
        ws_refuse(s, c, 503, "server is shutting down");
        return;
    }
    if (s->p.upgrade) {
        c->in_upgrade = true;
        s->p.upgrade(s->p.user, r);
        c->in_upgrade = false;
    }
    if (!c->sock) {
        if (r->claimed) {                 /* the hook answered */
            c->close_after = true;
            lws_callback_on_writable(c->wsi);
        } else {
            ws_refuse(s, c, 404, "no WebSocket endpoint at %s", ws_req_path(r));
        }
        return;
    }
    ws_sock_accept_key(key, c->ws_accept);
    c->ws_realtime = ws_field_has_token(r, "sec-websocket-protocol", "realtime");
    c->ws_handshake_due = true;
    c->state = WS_C_WEBSOCKET;
    /* Not an HTTP transaction any more: no on_done, not in flight. */
    ws_out_release(r->out);
    r->out = NULL;
    c->active = false;
    s->n_active--;
    ws_req_clear(r);
    lws_callback_on_writable(c->wsi);
}

// ---- writing responses ---------------------------------------------------------

static const char *ws_reason(int status)
{
    switch (status) {
    case 100: return "Continue";
    case 101: return "Switching Protocols";
    case 200: return "OK";
    case 201: return "Created";
    case 202: return "Accepted";
    case 204: return "No Content";
    case 206: return "Partial Content";
    case 301: return "Moved Permanently";
    case 302: return "Found";
    case 304: return "Not Modified";
    case 307: return "Temporary Redirect";
    case 308: return "Permanent Redirect";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 402: return "Payment Required";
    case 403: return "Forbidden";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 406: return "Not Acceptable";
    case 408: return "Request Timeout";
    case 409: return "Conflict";
    case 410: return "Gone";
    case 411: return "Length Required";
    case 413: return "Content Too Large";
    case 414: return "URI Too Long";
    case 415: return "Unsupported Media Type";
    case 416: return "Range Not Satisfiable";
    case 417: return "Expectation Failed";
    case 421: return "Misdirected Request";
    case 422: return "Unprocessable Content";
    case 426: return "Upgrade Required";
    case 429: return "Too Many Requests";
    case 431: return "Request Header Fields Too Large";
    case 500: return "Internal Server Error";
    case 501: return "Not Implemented";
    case 502: return "Bad Gateway";
    case 503: return "Service Unavailable";
    case 504: return "Gateway Timeout";
    case 505: return "HTTP Version Not Supported";
    default: return "Status";
    }
}

/* Appends to the header buffer; false when it is full. */
static bool ws_hput(char **pp, char *end, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static bool ws_hput(char **pp, char *end, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(*pp, (size_t)(end - *pp), fmt, ap);
    va_end(ap);
    if (n < 0 || n >= end - *pp)
        return false;
    *pp += n;
    return true;
}

/* Status line and headers into *pp (up to end), ready to go out with the
 * first body bytes in one write. framing: 'c' chunked, 'l' Content-Length,
 * 'n' none (no body), 'e' until the connection closes (HTTP/1.0 stream). */
static int ws_put_headers(struct ws_server *s, struct ws_conn *c, int status, const char *ctype,
                          char framing, size_t content_len, char **pp, char *end)
{
    struct ws_req *r = &c->req;
    bool close = c->close_after || atomic_load(&s->draining_pub) || framing == 'e';
    if (!ws_hput(pp, end, "HTTP/1.1 %d %s\r\n", status, ws_reason(status)) ||
        (status != 204 && !ws_hput(pp, end, "Content-Type: %s\r\n", ctype)) ||
        !ws_hput(pp, end, "X-Request-Id: %s\r\n", r->id))
        return -1;
    if ((framing == 'c' && !ws_hput(pp, end, "Transfer-Encoding: chunked\r\n")) ||
        ((framing == 'c' || framing == 'e') && !ws_hput(pp, end, "Cache-Control: no-cache\r\n")) ||
        (framing == 'l' && !ws_hput(pp, end, "Content-Length: %zu\r\n", content_len)) ||
        (close && !ws_hput(pp, end, "Connection: close\r\n")))
        return -1;
    if (s->cors && (!ws_hput(pp, end, "Access-Control-Allow-Origin: %s\r\n", s->cors) ||
                    !ws_hput(pp, end, "Access-Control-Expose-Headers: x-request-id, retry-after\r\n")))
        return -1;
    for (int i = 0; i < r->n_extra; i++)
        if (!ws_hput(pp, end, "%s: %s\r\n", r->extra_name[i], r->extra_value[i]))
            return -1;
    struct ws_out *o = r->out;
    pthread_mutex_lock(&o->lock);
    bool ok = true;
    for (int i = 0; i < o->n_extra && ok; i++)
        ok = ws_hput(pp, end, "%s: %s\r\n", o->extra_name[i], o->extra_value[i]);
    pthread_mutex_unlock(&o->lock);
    if (!ok || !ws_hput(pp, end, "\r\n"))
        return -1;
    r->headers_sent = true;
    if (close)
        c->close_after = true;
    return 0;
}

/* After the last response: half-close and read until the client closes
 * (or WS_LINGER_S), so that bytes it is still sending do not turn our close
 * into a reset that destroys the response before it is read. */
static void ws_linger(struct ws_conn *c)
{
    c->state = WS_C_LINGER;
    ws_in_drop(c);
    if (c->rx_paused) {
        lws_rx_flow_control(c->wsi, 1);
        c->rx_paused = false;
    }
    /* TLS: close_notify first, so that the client sees a clean end rather
     * than a truncation (best effort: a full socket buffer skips it). */
    SSL *ssl = c->req.srv->tls ? lws_get_ssl(c->wsi) : NULL;
    if (ssl) {
        SSL_shutdown(ssl);
        ERR_clear_error();
    }
    int fd = lws_get_socket_fd(c->wsi);
    if (fd >= 0)
        shutdown(fd, SHUT_WR);
    lws_set_timeout(c->wsi, PENDING_TIMEOUT_USER_OK, WS_LINGER_S);
}

static int ws_ws_writeable(struct ws_server *s, struct ws_conn *c)
{
    if (c->ws_handshake_due) {
        char buf[LWS_PRE + 256], *p = buf + LWS_PRE;
        int n = snprintf(p, 256,
                         "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
                         "Connection: Upgrade\r\nSec-WebSocket-Accept: %s\r\n%s\r\n",
                         c->ws_accept, c->ws_realtime ? "Sec-WebSocket-Protocol: realtime\r\n" : "");
        if (lws_write(c->wsi, (unsigned char *)p, (size_t)n, LWS_WRITE_RAW) < n)
            return -1;
        c->ws_handshake_due = false;
        lws_callback_on_writable(c->wsi);     /* messages queued during the upgrade */
        ws_conn_advance(s, c);                /* frames that came with the handshake */
        return 0;
    }
    int rc = ws_sock_on_writeable(c->sock, c->wsi);
    if (rc < 0)
        return -1;
    if (rc == 1)
        ws_linger(c);                         /* the close frame is out */
    return 0;
}

/* One step of sending the response, one write per call: the headers with
 * the first body bytes, then up to WS_WRITE_CHUNK body bytes per call (a
 * stream's chunk framing around them and, at the end, the last chunk). Once
 * all of it is out the transaction ends and the next pipelined request, if
 * one is buffered, starts. */
static int ws_on_writeable(struct ws_server *s, struct ws_conn *c)
{
    if (c->state == WS_C_WEBSOCKET)
        return ws_ws_writeable(s, c);
    if (c->state == WS_C_LINGER)
        return 0;
    if (c->send_continue) {
        static const char cont[] = "HTTP/1.1 100 Continue\r\n\r\n";
        unsigned char b[LWS_PRE + sizeof cont];
        memcpy(b + LWS_PRE, cont, sizeof cont - 1);
        c->send_continue = false;
        if (lws_write(c->wsi, b + LWS_PRE, sizeof cont - 1, LWS_WRITE_RAW) < (int)sizeof cont - 1)
            return -1;
        if (c->req.out)
            lws_callback_on_writable(c->wsi);
        return 0;
    }
    struct ws_req *r = &c->req;
    struct ws_out *o = r->out;
    if (!c->active || !o || c->state != WS_C_WAIT)
        return 0;
    if (r->final_sent)
        goto complete;       /* lws has flushed what it buffered of the last write */
    char buf[LWS_PRE + WS_HEADERS_MAX + 16 + WS_WRITE_CHUNK + 2 + 5];
    char *start = buf + LWS_PRE, *p = start;

    pthread_mutex_lock(&o->lock);
    o->dirty = false;
    bool started = o->started, stream = o->stream, ended = o->ended, overflow = o->overflow;
    int status = o->status;
    char ctype[sizeof o->ctype];
    memcpy(ctype, o->ctype, sizeof ctype);
    size_t total = o->len - o->off;
    pthread_mutex_unlock(&o->lock);

    if (overflow) {
        OMNI_WARN("http: %s: client is not reading; dropping the connection", r->id);
        return -1;
    }
    /* No body for HEAD, 204 and 304 (a HEAD's Content-Length is the GET's). */
    bool no_body = r->method == WS_HEAD || status == 204 || status == 304;
    if (no_body)
        stream = false;
    if (!started || (!stream && !ended))
        return 0;  /* nothing to send yet; the producer will wake us */
    char framing = !stream ? (status == 204 || status == 304 ? 'n' : 'l')
                 : r->http10 ? 'e' : 'c';
    if (!r->headers_sent &&
        ws_put_headers(s, c, status, ctype, framing, total, &p, start + WS_HEADERS_MAX) < 0)
        return -1;

    pthread_mutex_lock(&o->lock);
    size_t n = o->len - o->off < WS_WRITE_CHUNK ? o->len - o->off : WS_WRITE_CHUNK;
    if (no_body) {
        o->off = o->len;
        n = 0;
    }
    if (framing == 'c' && n > 0)
        p += snprintf(p, 16, "%zx\r\n", n);
    if (n > 0)
        memcpy(p, o->buf + o->off, n);
    p += n;
    o->off += n;
    bool more = o->off < o->len, done = o->ended && !more;
    pthread_mutex_unlock(&o->lock);
    if (framing == 'c' && n > 0) {
        memcpy(p, "\r\n", 2);
        p += 2;
    }
    if (framing == 'c' && done) {
        memcpy(p, "0\r\n\r\n", 5);
        p += 5;
    }
    if (p > start) {
        if (lws_write(c->wsi, (unsigned char *)start, (size_t)(p - start), LWS_WRITE_RAW) <
            (int)(p - start))
            return -1;
        r->last_write = omni_time_s();
    }
    if (!done) {
        if (more)
            lws_callback_on_writable(c->wsi);
        return 0;
    }
    r->final_sent = true;
    if (lws_send_pipe_choked(c->wsi)) {
        lws_callback_on_writable(c->wsi);   /* end once lws has sent what it holds */
        return 0;
    }
complete:;
    bool close = c->close_after || atomic_load(&s->draining_pub);
    ws_finish(s, c, false);
    if (close) {
        ws_linger(c);
        return 0;
    }
    c->state = WS_C_IDLE;
    c->served = true;
    c->t_idle = omni_time_s();
    c->t_req = 0;
    if (c->rx_paused) {
        lws_rx_flow_control(c->wsi, 1);
        c->rx_paused = false;
    }
    ws_conn_advance(s, c);                  /* a pipelined request already here */
    return 0;
}

// ---- connections --------------------------------------------------------------------

static unsigned ws_ip_hash(const char *a)
{
    unsigned h = 2166136261u;
    for (; *a; a++)
        h = (h ^ (unsigned char)*a) * 16777619u;
    return h % WS_IP_BUCKETS;
}

static struct ws_ip *ws_ip_acquire(struct ws_server *s, const char *addr)
{
    struct ws_ip **b = &s->ips[ws_ip_hash(addr)], *e;
    for (e = *b; e; e = e->next)
        if (!strcmp(e->addr, addr))
            break;
    if (!e) {
        if (!(e = calloc(1, sizeof *e)))
            return NULL;
        snprintf(e->addr, sizeof e->addr, "%s", addr);
        e->next = *b;
        *b = e;
    }
    e->n++;
    return e;
}

static void ws_ip_release(struct ws_server *s, struct ws_ip *e)
{
    if (!e || --e->n > 0)
        return;
    for (struct ws_ip **pp = &s->ips[ws_ip_hash(e->addr)]; *pp; pp = &(*pp)->next)
        if (*pp == e) {
            *pp = e->next;
            free(e);
            return;
        }
}

static void ws_link(struct ws_server *s, struct ws_conn *c)
{
    c->prev = NULL;
    c->next = s->conns;
    if (s->conns)
        s->conns->prev = c;
    s->conns = c;
    c->linked = true;
    s->n_conns++;
}

static void ws_unlink(struct ws_server *s, struct ws_conn *c)
{
    if (!c->linked)
        return;
    if (c->prev)
        c->prev->next = c->next;
    else
        s->conns = c->next;
    if (c->next)
        c->next->prev = c->prev;
    c->linked = false;
    s->n_conns--;
}

/* At the connection limit: close the connection that matters least - an
 * idle keep-alive one, else the one that has been sending its request the
 * longest - so that a new client gets in. false when there is none. */
static bool ws_evict(struct ws_server *s, struct ws_conn *newc)
{
    struct ws_conn *victim = NULL;
    int vclass = 2;
    double vt = 0;
    for (struct ws_conn *c = s->conns; c; c = c->next) {
        int cls;
        double t;
        if (c == newc)
            continue;
        if (c->state == WS_C_IDLE && c->in_off == c->in_len) {
            cls = 0;
            t = c->t_idle;
        } else if (c->state == WS_C_HEAD || c->state == WS_C_BODY ||
                   (c->state == WS_C_IDLE && c->in_off < c->in_len)) {
            cls = 1;
            t = c->t_req;
        } else {
            continue;
        }
        if (cls < vclass || (cls == vclass && t < vt)) {
            victim = c;
            vclass = cls;
            vt = t;
        }
    }
    if (!victim)
        return false;
    OMNI_INFO("http: %d connections (the limit %d): closing %s", s->n_conns, s->max_conns,
              vclass == 0 ? "an idle keep-alive connection" : "the slowest unfinished request");
    ws_kill(victim);
    return true;
}

static void ws_on_adopt(struct ws_server *s, struct ws_conn *c, struct lws *wsi)
{
    c->wsi = wsi;
    c->req.conn = c;
    c->req.srv = s;
    c->state = WS_C_IDLE;
    c->t_idle = omni_time_s();
    ws_link(s, c);
    struct sockaddr_storage sa;
    socklen_t sl = sizeof sa;
    char addr[INET6_ADDRSTRLEN] = "?";
    int fd = lws_get_socket_fd(wsi);
    if (fd >= 0 && !getpeername(fd, (struct sockaddr *)&sa, &sl)) {
        if (sa.ss_family == AF_INET)
            inet_ntop(AF_INET, &((struct sockaddr_in *)&sa)->sin_addr, addr, sizeof addr);
        else if (sa.ss_family == AF_INET6)
            inet_ntop(AF_INET6, &((struct sockaddr_in6 *)&sa)->sin6_addr, addr, sizeof addr);
    }
    c->ip = ws_ip_acquire(s, addr);
    if (s->p.max_conns_per_ip > 0 && c->ip && c->ip->n > s->p.max_conns_per_ip) {
        OMNI_INFO("http: %s has %d connections open (limit %d): refused", addr, c->ip->n - 1,
                  s->p.max_conns_per_ip);
        ws_refuse(s, c, 503, "too many connections from this address");
        return;
    }
    if (s->n_conns > s->max_conns && !ws_evict(s, c)) {
        OMNI_INFO("http: %d connections, none idle: refused", s->n_conns);
        ws_refuse(s, c, 503, "server is at its connection limit");
    }
}

static void ws_conn_closed(struct ws_server *s, struct ws_conn *c)
{
    if (c->sock) {
        ws_sock_on_closed(c->sock);   /* drops the connection's reference */
        c->sock = NULL;
    }
    if (c->active) {
        /* Everything was sent and only the bookkeeping was left: not an abort. */
        bool complete = false;
        struct ws_out *o = c->req.out;
        if (o && c->req.headers_sent) {
            pthread_mutex_lock(&o->lock);
            complete = o->ended && o->off == o->len && c->req.final_sent;
            pthread_mutex_unlock(&o->lock);
        }
        if (!complete)
            ws_abort(c, true);
        ws_finish(s, c, !complete);
    }
    ws_req_clear(&c->req);
    free(c->in);
    c->in = NULL;
    ws_ip_release(s, c->ip);
    c->ip = NULL;
    ws_unlink(s, c);
    c->wsi = NULL;
}

/* Producers changed some responses or sockets: ask for WRITEABLE there. */
static void ws_wake_dirty(struct ws_server *s)
{
    for (struct ws_conn *c = s->conns; c; c = c->next) {
        if (c->sock) {
            if (ws_sock_take_dirty(c->sock))
                lws_callback_on_writable(c->wsi);
            continue;
        }
        struct ws_out *o = c->req.out;
        if (!c->active || !o)
            continue;
        pthread_mutex_lock(&o->lock);
        bool dirty = o->dirty;
        pthread_mutex_unlock(&o->lock);
        if (dirty)
            lws_callback_on_writable(c->wsi);
    }
}

/* Timeouts (request, keep-alive idle) and SSE keep-alive comments. */
static void ws_check_timers(struct ws_server *s)
{
    double now = omni_time_s(), req_to = s->p.request_timeout_s;
    for (struct ws_conn *c = s->conns; c; c = c->next) {
        switch (c->state) {
        case WS_C_IDLE:
            /* a fresh connection has the request timeout to start its
             * request, a served one the keep-alive time. Draining does not
             * close them: a client may be sending on one right now (it
             * gets its answer with Connection: close). */
            if (c->served ? now - c->t_idle >= WS_KEEPALIVE_S
                          : req_to > 0 && now - c->t_idle >= req_to)
                ws_kill(c);
            break;
        case WS_C_HEAD:
        case WS_C_BODY:
            if (req_to > 0 && now - c->t_req >= req_to)
                ws_refuse(s, c, 408, "request timeout: the request line, headers and body must "
                                     "arrive within %.0f s", req_to);
            break;
        case WS_C_WAIT: {
            struct ws_req *r = &c->req;
            struct ws_out *o = r->out;
            /* A refusal at accept time (503) on a TLS connection: lws drops
             * a WRITEABLE asked for during the handshake, so ask again
             * until the handshake is done (the first read asks too). */
            if (s->tls && !c->up) {
                lws_callback_on_writable(c->wsi);
                break;
            }
            if (!c->active || !o || !r->headers_sent || s->p.sse_keepalive_ms <= 0 ||
                (now - r->last_write) * 1e3 < s->p.sse_keepalive_ms)
                break;
            pthread_mutex_lock(&o->lock);
            bool stream = o->stream && !o->ended;
            pthread_mutex_unlock(&o->lock);
            if (stream) {
                static const char ka[] = ": keep-alive\n\n";
                ws_out_write(o, ka, sizeof ka - 1);
                r->last_write = now;
                lws_callback_on_writable(c->wsi);
            }
            break;
        }
        default:
            break;
        }
    }
}

/* The timer period: WS_TICK_US, shorter where SSE keep-alive comments are
 * asked for more often (a comment is due at most half a period late). */
static lws_usec_t ws_tick_us(const struct ws_server *s)
{
    lws_usec_t us = WS_TICK_US;
    if (s->p.sse_keepalive_ms > 0 && (lws_usec_t)s->p.sse_keepalive_ms * 500 < us)
        us = (lws_usec_t)s->p.sse_keepalive_ms * 500;
    return us < 1000 ? 1000 : us;
}

static void ws_tick(lws_sorted_usec_list_t *sul)
{
    struct ws_server *s = lws_container_of(sul, struct ws_server, tick);
    ws_check_timers(s);
    if (!s->finished)
        lws_sul_schedule(s->ctx, 0, &s->tick, ws_tick, ws_tick_us(s));
}

static int ws_callback(struct lws *wsi, enum lws_callback_reasons reason, void *user, void *in,
                       size_t len)
{
    struct lws_context *ctx = lws_get_context(wsi);
    struct ws_server *s = ctx ? lws_context_user(ctx) : NULL;
    struct ws_conn *c = user;
    if (!s)
        return 0;
    switch (reason) {
    case LWS_CALLBACK_RAW_ADOPT:
        if (c)
            ws_on_adopt(s, c, wsi);
        return 0;
    case LWS_CALLBACK_RAW_RX:
        if (!c || !c->linked)
            return 0;
        if (!c->up && s->tls)
            lws_callback_on_writable(wsi);    /* see ws_check_timers */
        c->up = true;
        return ws_on_rx(s, c, in, len);
    case LWS_CALLBACK_RAW_WRITEABLE:
        if (!c || !c->linked)
            return 0;
        c->up = true;
        return ws_on_writeable(s, c);
    case LWS_CALLBACK_RAW_CLOSE:
        if (c && c->linked)
            ws_conn_closed(s, c);
        return 0;
    case LWS_CALLBACK_EVENT_WAIT_CANCELLED:
        ws_wake_dirty(s);
        return 0;
    default:
        return 0;
    }
}

// ---- server ----------------------------------------------------------------

static void ws_log_emit(int level, const char *line)
{
    size_t n = strlen(line);
    while (n && (line[n - 1] == '\n' || line[n - 1] == '\r'))
        n--;
    omni_log(level & LLL_ERR ? OMNI_LOG_ERROR : OMNI_LOG_WARN, "lws: %.*s", (int)n, line);
}

static bool ws_is_loopback(const char *host)
{
    struct in_addr a4;
    return !strcmp(host, "localhost") || !strcmp(host, "::1") ||
           (inet_pton(AF_INET, host, &a4) == 1 && (ntohl(a4.s_addr) >> 24) == 127);
}

/* OpenSSL would prompt on the terminal for an encrypted key: refuse instead. */
static int ws_tls_no_passphrase(char *buf, int size, int rwflag, void *user)
{
    (void)buf, (void)size, (void)rwflag, (void)user;
    return 0;
}

/* The certificate and key load and belong together. lws checks this too,
 * but its failure reads "cannot create context"; here the message names
 * the file and OpenSSL's reason. */
static int ws_tls_check(const char *cert, const char *key, char *err, size_t errlen)
{
    if (!cert || !key || !*cert || !*key) {
        omni_fail(err, errlen, OMNI_ERR_ARG, "http: TLS needs both a certificate and a key "
                                             "(--tls-cert FILE --tls-key FILE)");
        return -1;
    }
    const char *files[2] = {cert, key};
    for (int i = 0; i < 2; i++)
        if (access(files[i], R_OK)) {
            omni_fail(err, errlen, OMNI_ERR_IO, "http: cannot read TLS %s %s: %s",
                      i ? "key" : "certificate", files[i], strerror(errno));
            return -1;
        }
    SSL_CTX *ctx = SSL_CTX_new(TLS_server_method());
    if (!ctx) {
        omni_fail(err, errlen, OMNI_ERR_NOMEM, "http: cannot create a TLS context");
        return -1;
    }
    SSL_CTX_set_default_passwd_cb(ctx, ws_tls_no_passphrase);
    int rc = 0;
    char why[256] = "";
    ERR_clear_error();
    if (SSL_CTX_use_certificate_chain_file(ctx, cert) != 1) {
        ERR_error_string_n(ERR_peek_error(), why, sizeof why);
        omni_fail(err, errlen, OMNI_ERR_FORMAT, "http: TLS certificate %s: not a PEM certificate "
                  "(%s)", cert, why);
        rc = -1;
    } else if (SSL_CTX_use_PrivateKey_file(ctx, key, SSL_FILETYPE_PEM) != 1) {
        ERR_error_string_n(ERR_peek_error(), why, sizeof why);
        omni_fail(err, errlen, OMNI_ERR_FORMAT, "http: TLS key %s: not an unencrypted PEM "
                  "private key (%s)", key, why);
        rc = -1;
    } else if (SSL_CTX_check_private_key(ctx) != 1) {
        /* OpenSSL drops the certificate when the key does not match it */
        omni_fail(err, errlen, OMNI_ERR_FORMAT, "http: TLS key %s does not belong to the "
                  "certificate %s", key, cert);
        rc = -1;
    }
    ERR_clear_error();
    SSL_CTX_free(ctx);
    return rc;
}

/* allowed_hosts "a, b.example" -> hosts[] (split in place). */
static int ws_parse_hosts(struct ws_server *s, const char *list)
{
    if (!list || !*list)
        return 0;
    if (!(s->hosts_buf = strdup(list)))
        return -1;
    size_t n = 1;
    for (const char *p = list; *p; p++)
        n += *p == ',';
    if (!(s->hosts = calloc(n, sizeof *s->hosts)))
        return -1;
    for (char *save = NULL, *t = strtok_r(s->hosts_buf, ", \t", &save); t;
         t = strtok_r(NULL, ", \t", &save)) {
        if (!strcmp(t, "*"))
            s->any_host = true;
        else
            s->hosts[s->n_hosts++] = t;
    }
    return 0;
}

/* The listen address as lws should get it, checked by binding a socket to
 * it first: lws takes an interface name or an address literal, and for
 * anything else (a typo, a name, an address of another machine) it starts
 * without a listening socket instead of failing - the server would log
 * "listening" and answer nothing. A host name is resolved here (IPv4
 * first); an interface name ("eth0") is passed on as it is. */
static int ws_bind_check(const char *host, int port, char *iface, size_t cap, char *err,
                         size_t errlen)
{
    char service[16];
    snprintf(service, sizeof service, "%d", port);
    struct addrinfo hints = { .ai_flags = AI_PASSIVE | AI_NUMERICSERV, .ai_socktype = SOCK_STREAM };
    struct addrinfo *res = NULL;
    hints.ai_family = AF_INET;
    int gr = getaddrinfo(host, service, &hints, &res);
    if (gr != 0) {
        hints.ai_family = AF_UNSPEC;
        gr = getaddrinfo(host, service, &hints, &res);
    }
    if (gr != 0) {
        if (if_nametoindex(host)) {
            snprintf(iface, cap, "%s", host);
            return 0;
        }
        return omni_fail(err, errlen, OMNI_ERR_ARG,
                         "http: --host '%s' is neither an address, a resolvable name nor a "
                         "network interface (%s)", host, gai_strerror(gr));
    }
    int rc = 0, fd = socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0), one = 1;
    if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) < 0 ||
        bind(fd, res->ai_addr, res->ai_addrlen) < 0) {
        int en = errno;
        rc = omni_fail(err, errlen, OMNI_ERR_IO, "http: cannot listen on %s:%d: %s%s", host, port,
                       strerror(en),
                       en == EADDRNOTAVAIL ? " (not an address of this machine)"
                       : en == EADDRINUSE ? " (another process has the port)" : "");
    } else if (getnameinfo(res->ai_addr, res->ai_addrlen, iface, (socklen_t)cap, NULL, 0,
                           NI_NUMERICHOST) != 0) {
        rc = omni_fail(err, errlen, OMNI_ERR_ARG, "http: --host '%s': no numeric form", host);
    }
    if (fd >= 0)
        close(fd);
    freeaddrinfo(res);
    return rc;
}

struct ws_server *ws_server_new(const struct ws_server_params *p, char *err, size_t errlen)
{
    if (!p->handler || p->port <= 0 || p->port > 65535) {
        omni_fail(err, errlen, OMNI_ERR_ARG, "http: %s",
                  p->handler ? "port must be in 1..65535" : "no request handler");
        return NULL;
    }
    struct ws_server *s = calloc(1, sizeof *s);
    if (!s)
        goto nomem;
    s->p = *p;
    if (!(s->host = strdup(p->host ? p->host : "127.0.0.1")))
        goto nomem;
    if (p->cors_origin && *p->cors_origin && !(s->cors = strdup(p->cors_origin)))
        goto nomem;
    if (ws_parse_hosts(s, p->allowed_hosts) < 0)
        goto nomem;
    s->p.allowed_hosts = NULL;
    s->loopback = ws_is_loopback(s->host);
    s->tls = p->tls_cert || p->tls_key;
    if (s->tls && ws_tls_check(p->tls_cert, p->tls_key, err, errlen) < 0) {
        ws_server_free(s);
        return NULL;
    }
    atomic_init(&s->draining_pub, false);
    /* Room for new connections: what the fd limit allows (lws sizes its
     * table from it too), less a reserve for the model, logs and workers. */
    struct rlimit rl;
    long fds = getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY
                   ? (long)rl.rlim_cur : 1024;
    if (fds > (1L << 20))
        fds = 1L << 20;
    long room = fds - 64 - fds / 16;
    s->max_conns = room < 16 ? 16 : (int)room;
    if (p->max_connections > 0 && p->max_connections < s->max_conns)
        s->max_conns = p->max_connections;
    uint32_t rnd = 0;
    if (getrandom(&rnd, sizeof rnd, 0) != sizeof rnd)
        rnd = (uint32_t)(omni_time_s() * 1e6);
    snprintf(s->id_prefix, sizeof s->id_prefix, "%08x", rnd);
    if (ws_pool_start(&s->pool, p->worker_threads) < 0) {
        omni_fail(err, errlen, OMNI_ERR_IO, "http: cannot start %d worker threads",
                  p->worker_threads);
        ws_server_free(s);
        return NULL;
    }

    /* Every connection is a raw socket: lws moves the bytes, this file
     * speaks HTTP/1.1 on them. */
    s->protocols[0] = (struct lws_protocols){
        .name = "omni-http",
        .callback = ws_callback,
        .per_session_data_size = sizeof(struct ws_conn),
    };
    lws_set_log_level(LLL_ERR | LLL_WARN, ws_log_emit);
    char iface[NI_MAXHOST];
    if (ws_bind_check(s->host, p->port, iface, sizeof iface, err, errlen) < 0) {
        ws_server_free(s);
        return NULL;
    }
    struct lws_context_creation_info info;
    memset(&info, 0, sizeof info);
    info.port = p->port;
    info.iface = iface;
    info.protocols = s->protocols;
    info.user = s;
    info.options = LWS_SERVER_OPTION_ADOPT_APPLY_LISTEN_ACCEPT_CONFIG |
                   LWS_SERVER_OPTION_DISABLE_IPV6 * (strchr(iface, ':') == NULL);
    info.listen_accept_role = "raw-skt";
    info.listen_accept_protocol = "omni-http";
    if (s->tls) {
        /* The raw role takes TLS from the vhost: lws accepts the handshake
         * and the RX callbacks see decrypted bytes. ALPN must offer only
         * http/1.1 - lws's default list starts with h2, which clients would
         * then speak. A plain-HTTP client on this port is not a TLS hello:
         * lws closes the connection (its ALLOW_NON_SSL_ON_SSL_PORT does not
         * reach the raw role in 4.1). */
        info.options |= LWS_SERVER_OPTION_DO_SSL_GLOBAL_INIT;
        info.ssl_cert_filepath = p->tls_cert;
        info.ssl_private_key_filepath = p->tls_key;
        info.alpn = "http/1.1";
        info.ssl_options_set = SSL_OP_NO_TLSv1 | SSL_OP_NO_TLSv1_1;
    }
    info.pt_serv_buf_size = 65536;        /* bytes per read and per write */
    s->ctx = lws_create_context(&info);
    if (!s->ctx) {
        omni_fail(err, errlen, OMNI_ERR_IO, "http: cannot listen on %s:%d (address in use?%s)",
                  s->host, p->port, s->tls ? " or TLS setup failed: see the lws log lines" : "");
        ws_server_free(s);
        return NULL;
    }
    lws_sul_schedule(s->ctx, 0, &s->tick, ws_tick, ws_tick_us(s));
    return s;
nomem:
    omni_fail(err, errlen, OMNI_ERR_NOMEM, "http: out of memory");
    ws_server_free(s);
    return NULL;
}

void ws_server_stop(struct ws_server *s)
{
    s->stop_requested = 1;
    atomic_store(&s->draining_pub, true);   /* lock-free: fine in a signal handler */
    if (s->ctx)
        lws_cancel_service(s->ctx);
}

/* Shutdown state machine, checked after every service pass. While draining
 * the server still accepts and serves; every response closes its
 * connection. */
static void ws_check_drain(struct ws_server *s)
{
    double now = omni_time_s();
    if (s->stop_requested && !s->draining) {
        s->draining = true;
        s->drain_deadline = now + s->p.shutdown_timeout_s;
        OMNI_INFO("http: shutting down: %d request(s) in flight, waiting up to %.0f s",
                  s->n_active, s->p.shutdown_timeout_s);
        for (struct ws_conn *c = s->conns; c; c = c->next)
            if (c->sock)
                ws_sock_close(c->sock, 1001, "server shutting down");
    }
    if (!s->draining)
        return;
    if (s->n_active == 0) {
        s->finished = true;
    } else if (!s->aborted_all && now >= s->drain_deadline) {
        OMNI_INFO("http: shutdown timeout: cancelling %d request(s)", s->n_active);
        for (struct ws_conn *c = s->conns; c; c = c->next)
            if (c->active)
                ws_abort(c, false);
        s->aborted_all = true;
        s->abort_deadline = now + WS_ABORT_GRACE_S;
    } else if (s->aborted_all && now >= s->abort_deadline) {
        s->finished = true;
    }
}

int ws_server_run(struct ws_server *s)
{
    while (!s->finished) {
        if (lws_service(s->ctx, 0) < 0)
            break;
        ws_check_drain(s);
    }
    /* Handlers still queued run now; after this nothing runs on a worker. */
    ws_pool_stop(&s->pool);
    return 0;
}

void ws_server_free(struct ws_server *s)
{
    if (!s)
        return;
    ws_pool_stop(&s->pool);               /* callbacks from the teardown run here */
    if (s->ctx) {
        lws_sul_cancel(&s->tick);
        lws_context_destroy(s->ctx);      /* closes what is left: RAW_CLOSE aborts them */
    }
    for (int i = 0; i < WS_IP_BUCKETS; i++)
        for (struct ws_ip *e = s->ips[i], *next; e; e = next) {
            next = e->next;
            free(e);
        }
    pthread_mutex_destroy(&s->pool.lock);
    pthread_cond_destroy(&s->pool.cond);
    free(s->pool.threads);
    free(s->hosts);
    free(s->hosts_buf);
    free(s->host);
    free(s->cors);
    free(s);
}
