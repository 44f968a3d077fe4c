/* ws_http.c - the libwebsockets HTTP/1.1 server behind ws_http.h.
 *
 * One lws context, one protocol callback, one service thread. Each connection
 * carries one transaction at a time (struct ws_req inside the per-session
 * data); its response is a struct ws_out that worker threads fill under a lock
 * and the service thread drains in WRITEABLE callbacks, at most one write of a
 * few KB per callback, so a slow client slows only its own stream. */
#include "ws/ws_http.h"

#include "src/core/omni.h"
#include "ws/ws_socket.h"

#include <libwebsockets.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#define WS_WRITE_CHUNK 16384         /* body bytes per WRITEABLE callback */
#define WS_HEADERS_MAX 4096          /* status line and response headers */
#define WS_MAX_EXTRA_HEADERS 8
#define WS_CHUNKED_INITIAL 65536     /* first buffer of a body of unknown length */
#define WS_MAX_HEADER_COPIES 16      /* ws_req_header results kept per transaction */
#define WS_ID_MAX 64
#define WS_ABORT_GRACE_S 2.0         /* after aborting at shutdown, wait this long for final events */
#define WS_TICK_US 100000            /* drain checks while shutting down */

// ---- the deferred response --------------------------------------------

struct ws_out {
    pthread_mutex_t lock;
    struct ws_server *srv;           /* immutable */
    ws_abort_fn on_abort;            /* immutable; service thread */
    ws_free_fn on_free;              /* immutable */
    void *user;                      /* immutable */
    int refs;                        /* {lock} */
    bool started, stream, ended;     /* {lock} */
    bool gone;                       /* {lock} client left: writes are dropped */
    bool dirty;                      /* {lock} the service thread has not seen the latest change */
    bool overflow;                   /* {lock} more than max_pending_bytes unsent */
    int status;                      /* {lock} */
    char ctype[64];                  /* {lock} */
    char *buf;                       /* {lock} unsent bytes are buf[off, len) */
    size_t off, len, cap;            /* {lock} */
    int tokens_in, tokens_out;       /* {lock} */
};

// ---- connections and transactions (service thread only) -------------------

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

struct ws_req {
    struct ws_conn *conn;
    enum ws_method method;
    char *path;
    char id[WS_ID_MAX + 1];
    const char *route;
    char *body;
    size_t body_len, body_cap;
    bool too_large;
    bool chunked;                         /* Transfer-Encoding: chunked, decoded by ws_dechunk */
    struct ws_dechunk dechunk;
    bool dispatched;
    bool body_complete;                   /* lws said BODY_COMPLETION (see ws_on_body_completion) */
    double t_start;
    char *extra_name[WS_MAX_EXTRA_HEADERS], *extra_value[WS_MAX_EXTRA_HEADERS];
    int n_extra;
    char *copies[WS_MAX_HEADER_COPIES];   /* ws_req_header results */
    int n_copies;
    struct ws_out *out;                   /* the connection's reference */
    bool headers_sent, final_sent, aborted;
    double last_write;                    /* for SSE keep-alive comments */
};

struct ws_conn {                          /* lws per-session data: zeroed by lws */
    struct lws *wsi;
    struct ws_conn *prev, *next;          /* server's list of connections */
    bool linked;
    bool active;                          /* a transaction is dispatched and not done */
    bool close_after;                     /* close instead of keep-alive */
    struct ws_req req;
    struct ws_sock *sock;                 /* after a WebSocket upgrade: the connection's reference */
};

struct ws_server {
    struct ws_server_params p;
    char *host, *cors;                    /* owned copies */
    struct lws_context *ctx;
    struct lws_protocols protocols[3];
    struct ws_conn *conns;                /* service thread */
    int n_active;                         /* service thread */
    volatile sig_atomic_t stop_requested; /* any thread / signal handler */
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

// ---- ws_out -------------------------------------------------------------

static struct ws_out *ws_out_new(struct ws_server *s, int refs, ws_abort_fn on_abort,
                                 ws_free_fn on_free, void *user)
{
    struct ws_out *o = calloc(1, sizeof *o);
    if (!o)
        return NULL;
    pthread_mutex_init(&o->lock, NULL);
    o->srv = s;
    o->refs = refs;
    o->on_abort = on_abort;
    o->on_free = on_free;
    o->user = user;
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
    pthread_mutex_unlock(&o->lock);
    if (!last)
        return;
    if (o->on_free)
        o->on_free(o->user);
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
void ws_req_set_route(struct ws_req *r, const char *route) { r->route = route; }

const char *ws_req_body(const struct ws_req *r, size_t *len)
{
    if (len)
        *len = r->body ? r->body_len : 0;
    return r->body ? r->body : "";
}

/* Headers lws parses itself live in token slots; the rest are "custom"
 * headers looked up by "name:". */
static int ws_token_of(const char *name)
{
    static const struct { const char *name; int tok; } known[] = {
        { "authorization", WSI_TOKEN_HTTP_AUTHORIZATION },
        { "content-type", WSI_TOKEN_HTTP_CONTENT_TYPE },
        { "content-length", WSI_TOKEN_HTTP_CONTENT_LENGTH },
        { "origin", WSI_TOKEN_ORIGIN },
        { "host", WSI_TOKEN_HOST },
        { "accept", WSI_TOKEN_HTTP_ACCEPT },
        { "user-agent", WSI_TOKEN_HTTP_USER_AGENT },
        { "connection", WSI_TOKEN_CONNECTION },
        { "transfer-encoding", WSI_TOKEN_HTTP_TRANSFER_ENCODING },
        { "access-control-request-headers", WSI_TOKEN_HTTP_AC_REQUEST_HEADERS },
    };
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++)
        if (!strcmp(name, known[i].name))
            return known[i].tok;
    return -1;
}

/* Copy of a request header into a fresh string, or NULL when absent. */
static char *ws_header_dup(struct lws *wsi, const char *name)
{
    int tok = ws_token_of(name);
    int n;
    char cname[96];
    if (tok >= 0) {
        n = lws_hdr_total_length(wsi, (enum lws_token_indexes)tok);
    } else {
        int cl = snprintf(cname, sizeof cname, "%s:", name);
        if (cl <= 0 || (size_t)cl >= sizeof cname)
            return NULL;
        n = lws_hdr_custom_length(wsi, cname, cl);
    }
    if (n <= 0)
        return NULL;
    char *v = malloc((size_t)n + 1);
    if (!v)
        return NULL;
    int got = tok >= 0 ? lws_hdr_copy(wsi, v, n + 1, (enum lws_token_indexes)tok)
                       : lws_hdr_custom_copy(wsi, v, n + 1, cname, (int)strlen(cname));
    if (got < 0) {
        free(v);
        return NULL;
    }
    v[got] = 0;
    return v;
}

const char *ws_req_header(struct ws_req *r, const char *name)
{
    if (!r->conn || !r->conn->wsi || r->n_copies >= WS_MAX_HEADER_COPIES)
        return NULL;
    char *v = ws_header_dup(r->conn->wsi, name);
    if (v)
        r->copies[r->n_copies++] = v;
    return v;
}

const char *ws_req_query(struct ws_req *r, const char *name)
{
    char key[64], buf[1024];
    int kl = snprintf(key, sizeof key, "%s=", name);
    if (!r->conn || !r->conn->wsi || kl <= 0 || (size_t)kl >= sizeof key ||
        r->n_copies >= WS_MAX_HEADER_COPIES ||
        !lws_get_urlarg_by_name(r->conn->wsi, key, buf, (int)sizeof buf))
        return NULL;
    /* lws copies "name=value"; keep the value. */
    char *v = strdup(buf + kl);
    if (v)
        r->copies[r->n_copies++] = v;
    return v;
}

/* Interim: runs fn at once on the service thread (r2 is r) until the
 * worker pool lands; the contract is the one in ws_http.h. */
void ws_req_offload(struct ws_req *r, ws_handler_fn fn)
{
    struct ws_server *s = lws_context_user(lws_get_context(r->conn->wsi));
    fn(s->p.user, r);
}

bool ws_req_draining(const struct ws_req *r)
{
    struct ws_server *s = lws_context_user(lws_get_context(r->conn->wsi));
    return s->stop_requested != 0;
}

struct ws_sock *ws_req_accept_websocket(struct ws_req *r, const struct ws_sock_handler *h,
                                        void *user)
{
    struct ws_conn *c = r->conn;
    if (!c || !c->wsi || c->sock)
        return NULL;
    c->sock = ws_sock_new(lws_get_context(c->wsi), h, user);
    return c->sock;
}

void ws_req_add_header(struct ws_req *r, const char *name, const char *value)
{
    if (r->n_extra >= WS_MAX_EXTRA_HEADERS)
        return;
    char *n = strdup(name), *v = strdup(value);
    if (!n || !v) {
        free(n);
        free(v);
        return;
    }
    r->extra_name[r->n_extra] = n;
    r->extra_value[r->n_extra++] = v;
}

struct ws_out *ws_req_defer(struct ws_req *r, ws_abort_fn on_abort, ws_free_fn on_free,
                            void *user)
{
    if (r->out)
        return NULL;
    struct ws_out *o = ws_out_new(lws_context_user(lws_get_context(r->conn->wsi)), 2, on_abort,
                                  on_free, user);
    r->out = o;
    return o;
}

void ws_req_respond(struct ws_req *r, int status, const char *content_type, const char *body,
                    size_t len)
{
    if (r->out)
        return;
    struct ws_out *o = ws_out_new(lws_context_user(lws_get_context(r->conn->wsi)), 1, NULL,
                                  NULL, NULL);
    if (!o)
        return;
    r->out = o;
    ws_out_start(o, status, content_type, false);
    ws_out_write(o, body, len);
    ws_out_end(o);
}

/* Drop everything a finished transaction held (not the connection). */
static void ws_req_reset(struct ws_req *r)
{
    free(r->path);
    free(r->body);
    for (int i = 0; i < r->n_extra; i++) {
        free(r->extra_name[i]);
        free(r->extra_value[i]);
    }
    for (int i = 0; i < r->n_copies; i++)
        free(r->copies[i]);
    struct ws_conn *c = r->conn;
    memset(r, 0, sizeof *r);
    r->conn = c;
}

// ---- transaction lifecycle --------------------------------------------------

static bool ws_id_char_ok(char ch)
{
    return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
           ch == '-' || ch == '_' || ch == '.';
}

/* The client's x-request-id when it is short and plain (so it can be echoed
 * into headers and logs safely), otherwise a fresh one. */
static void ws_assign_id(struct ws_server *s, struct ws_req *r, struct lws *wsi)
{
    char *cid = ws_header_dup(wsi, "x-request-id");
    bool ok = cid && cid[0] && strlen(cid) <= WS_ID_MAX;
    for (const char *p = cid; ok && *p; p++)
        ok = ws_id_char_ok(*p);
    if (ok)
        snprintf(r->id, sizeof r->id, "%s", cid);
    else
        snprintf(r->id, sizeof r->id, "%s%08llx", s->id_prefix,
                 (unsigned long long)++s->next_id);
    free(cid);
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
        d.tokens_in = r->out->tokens_in;
        d.tokens_out = r->out->tokens_out;
        pthread_mutex_unlock(&r->out->lock);
    }
    s->p.on_done(s->p.user, &d);
}

/* The client left (client_gone) or shutdown gave up waiting: stop the
 * producer, once. At shutdown the client is still there, so the producer's
 * closing output (finish chunk, [DONE]) still reaches it. */
static void ws_abort(struct ws_conn *c, bool client_gone)
{
    struct ws_out *o = c->req.out;
    if (!o || c->req.aborted)
        return;
    c->req.aborted = true;
    pthread_mutex_lock(&o->lock);
    bool ended = o->ended;
    o->gone |= client_gone;
    pthread_mutex_unlock(&o->lock);
    if (!ended && o->on_abort)
        o->on_abort(o->user);
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
    ws_req_reset(&c->req);
}

static void ws_dispatch(struct ws_server *s, struct ws_conn *c)
{
    struct ws_req *r = &c->req;
    r->dispatched = true;
    if (r->body)
        r->body[r->body_len] = 0;
    s->p.handler(s->p.user, r);
    if (!r->out) {
        static const char msg[] = "{\"error\":{\"message\":\"internal error: no response\","
                                  "\"type\":\"server_error\",\"param\":null,\"code\":null}}";
        ws_req_respond(r, 500, "application/json", msg, sizeof msg - 1);
    }
    if (!r->out) {                       /* out of memory even for that */
        c->close_after = true;
        return;
    }
    lws_callback_on_writable(c->wsi);
}

static void ws_link(struct ws_server *s, struct ws_conn *c, struct lws *wsi)
{
    if (c->linked)
        return;
    c->wsi = wsi;
    c->req.conn = c;
    c->prev = NULL;
    c->next = s->conns;
    if (s->conns)
        s->conns->prev = c;
    s->conns = c;
    c->linked = true;
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
}

static void ws_respond_plain_json(struct ws_req *r, int status, const char *msg, const char *type)
{
    char buf[256];
    int n = snprintf(buf, sizeof buf,
                     "{\"error\":{\"message\":\"%s\",\"type\":\"%s\",\"param\":null,\"code\":null}}",
                     msg, type);
    ws_req_respond(r, status, "application/json", buf, (size_t)n);
}

static int ws_on_http(struct ws_server *s, struct ws_conn *c, struct lws *wsi)
{
    ws_link(s, c, wsi);
    if (c->active) /* a pipelined request while the previous one runs: not supported */
        return -1;
    struct ws_req *r = &c->req;
    ws_req_reset(r);
    r->t_start = omni_time_s();
    c->active = true;
    s->n_active++;

    char *uri = NULL;
    int ulen = 0;
    int m = lws_http_get_uri_and_method(wsi, &uri, &ulen);
    static const enum ws_method map[] = {
        [LWSHUMETH_GET] = WS_GET, [LWSHUMETH_POST] = WS_POST, [LWSHUMETH_OPTIONS] = WS_OPTIONS,
        [LWSHUMETH_PUT] = WS_PUT, [LWSHUMETH_PATCH] = WS_PATCH, [LWSHUMETH_DELETE] = WS_DELETE,
        [LWSHUMETH_HEAD] = WS_HEAD,
    };
    r->method = m >= 0 && m < (int)(sizeof map / sizeof map[0]) ? map[m] : WS_OTHER;
    r->path = uri && ulen > 0 ? strndup(uri, (size_t)ulen) : strdup("/");
    ws_assign_id(s, r, wsi);
    if (!r->path) {
        c->close_after = true;
        ws_respond_plain_json(r, 500, "out of memory", "server_error");
        lws_callback_on_writable(wsi);
        return 0;
    }

    if (s->draining) {
        c->close_after = true;
        r->dispatched = true;
        ws_respond_plain_json(r, 503, "server is shutting down", "service_unavailable");
        lws_callback_on_writable(wsi);
        return 0;
    }
    if (r->method == WS_OPTIONS && s->cors) { /* CORS preflight */
        r->dispatched = true;
        r->route = "preflight";
        char *want = ws_header_dup(wsi, "access-control-request-headers");
        ws_req_add_header(r, "access-control-allow-methods", "GET, POST, OPTIONS");
        ws_req_add_header(r, "access-control-allow-headers", want && *want ? want : "*");
        ws_req_add_header(r, "access-control-max-age", "600");
        free(want);
        ws_req_respond(r, 204, "text/plain", "", 0);
        lws_callback_on_writable(wsi);
        return 0;
    }

    bool has_body = r->method == WS_POST || r->method == WS_PUT || r->method == WS_PATCH;
    long long clen = 0;
    char *cl = ws_header_dup(wsi, "content-length");
    bool have_length = cl != NULL;
    if (cl) {
        char *end;
        clen = strtoll(cl, &end, 10);
        if (end == cl || *end || clen < 0)
            clen = -1;
        free(cl);
    }
    char *te = have_length ? NULL : ws_header_dup(wsi, "transfer-encoding");
    bool chunked = te && strstr(te, "chunked");
    free(te);
    if (has_body && !have_length && chunked) {
        /* lws 4.1 passes a body without Content-Length on raw, framing
         * included, and never reports its end: ws_on_body decodes the chunks
         * and dispatches at the last one. lws still expects more body bytes
         * afterwards, so this connection closes after the response. */
        r->chunked = true;
        c->close_after = true;
        r->body_cap = WS_CHUNKED_INITIAL;
        r->body = malloc(r->body_cap);
        if (!r->body) {
            r->dispatched = true;
            ws_respond_plain_json(r, 500, "out of memory", "server_error");
            lws_callback_on_writable(wsi);
        }
        return 0;
    }
    if (!has_body || clen == 0) {
        ws_dispatch(s, c);
        return 0;
    }
    if (clen < 0 || (unsigned long long)clen > s->p.max_body_bytes) {
        /* Too large (or unreadable length): answer now and close rather than
         * read what we would throw away. */
        r->too_large = clen >= 0;
        c->close_after = true;
        if (clen < 0) {
            r->dispatched = true;
            ws_respond_plain_json(r, 400, "bad Content-Length", "invalid_request_error");
            lws_callback_on_writable(wsi);
        } else {
            ws_dispatch(s, c);
        }
        return 0;
    }
    r->body_cap = (size_t)clen + 1;
    r->body = malloc(r->body_cap);
    if (!r->body) {
        c->close_after = true;
        r->dispatched = true;
        ws_respond_plain_json(r, 500, "out of memory", "server_error");
        lws_callback_on_writable(wsi);
    }
    return 0;
}

/* Append n body bytes, growing the buffer up to max_body_bytes. false when
 * the body is over the limit (or memory ran out): it is dropped, too_large. */
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
    memcpy(r->body + r->body_len, in, n);
    r->body_len += n;
    return true;
}

/* Feed raw chunked-encoded bytes. 1 once the last chunk and the trailer are
 * in, 0 for more, -1 on broken framing; data goes through ws_body_append
 * (its failure also ends with -1, too_large set). */
static int ws_dechunk_feed(struct ws_server *s, struct ws_req *r, const char *in, size_t len)
{
    struct ws_dechunk *d = &r->dechunk;
    for (size_t i = 0; i < len && d->state != WS_CH_DONE; i++) {
        char ch = in[i];
        switch (d->state) {
        case WS_CH_SIZE: {
            int v = ch >= '0' && ch <= '9' ? ch - '0' : ch >= 'a' && ch <= 'f' ? ch - 'a' + 10
                  : ch >= 'A' && ch <= 'F' ? ch - 'A' + 10 : -1;
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
    return d->state == WS_CH_DONE;
}

/* Does the body start with this request's own request line? lws 4.1 does
 * that to a request it parses out of bytes it stashed (one pipelined behind
 * another): it hands the stash from its start, headers included, as the
 * body. No real body begins with "POST /path". */
static bool ws_body_is_own_headers(const struct ws_req *r, const char *in, size_t len)
{
    const char *m = ws_method_names[r->method], *path = ws_req_path(r);
    size_t ml = strlen(m), pl = strlen(path);
    return r->body_len == 0 && len > ml + 1 + pl && !memcmp(in, m, ml) && in[ml] == ' ' &&
           !memcmp(in + ml + 1, path, pl);
}

static int ws_on_body(struct ws_server *s, struct ws_conn *c, const void *in, size_t len)
{
    struct ws_req *r = &c->req;
    if (r->dispatched || !r->body)
        return 0;
    if (ws_body_is_own_headers(r, in, len)) {
        OMNI_INFO("http: %s: pipelined request (not supported): closing the connection", r->id);
        return -1;
    }
    if (r->chunked) {
        int rc = ws_dechunk_feed(s, r, in, len);
        if (rc == 0)
            return 0;
        if (rc < 0 && !r->too_large) {
            r->dispatched = true;
            ws_respond_plain_json(r, 400, "malformed chunked request body", "invalid_request_error");
            lws_callback_on_writable(c->wsi);
            return 0;
        }
        if (r->too_large) {
            free(r->body);
            r->body = NULL;
            r->body_len = 0;
        }
        ws_dispatch(s, c);
        return 0;
    }
    if (r->body_len + len + 1 > r->body_cap) { /* more than Content-Length promised */
        free(r->body);
        r->body = NULL;
        r->body_len = 0;
        r->too_large = true;
        c->close_after = true;
        ws_dispatch(s, c);
        return 0;
    }
    memcpy(r->body + r->body_len, in, len);
    r->body_len += len;
    return 0;
}

/* The end of a request body - or, the second time in one transaction, lws
 * 4.1 telling that bytes past it arrived before the transaction completed
 * (a pipelined request). It has stashed them and offers them again on every
 * service pass, each time as another BODY_COMPLETION, while this
 * connection's WRITEABLE never comes; completing the transaction would
 * parse the next request from the stash with the wrong bytes as its body.
 * The connection cannot go on: -1 closes it (the current request counts as
 * aborted). Clients that wait for each response never get here:
 * ws_on_writeable completes the transaction in the callback that writes
 * its last byte, before the service thread reads again. */
static int ws_on_body_completion(struct ws_server *s, struct ws_conn *c)
{
    struct ws_req *r = &c->req;
    if (!c->active)
        return 0;
    if (r->body_complete) {
        OMNI_INFO("http: %s: pipelined request (not supported): closing the connection", r->id);
        return -1;
    }
    r->body_complete = true;
    if (r->dispatched)
        return 0;
    if (r->chunked) {
        /* lws' own cap on a body without a length (100 MiB) came before
         * the last chunk: too large, not a truncated body. */
        free(r->body);
        r->body = NULL;
        r->body_len = 0;
        r->too_large = true;
    }
    ws_dispatch(s, c);
    return 0;
}

/* Status line and headers into *pp (up to end), ready to go out with the
 * first body bytes in one write. The Content-Length is a plain header (not
 * lws_add_http_header_content_length): lws counts nothing, and the
 * transaction ends when ws_on_writeable says so. Returns 0, or -1 when the
 * connection must close. */
static int ws_put_headers(struct ws_server *s, struct ws_conn *c, int status, const char *ctype,
                          bool stream, size_t content_len, unsigned char **pp, unsigned char *end)
{
    struct lws *wsi = c->wsi;
    struct ws_req *r = &c->req;
    if (lws_add_http_header_status(wsi, (unsigned)status | LWSAHH_FLAG_NO_SERVER_NAME, pp, end) ||
        lws_add_http_header_by_token(wsi, WSI_TOKEN_HTTP_CONTENT_TYPE,
                                     (const unsigned char *)ctype, (int)strlen(ctype), pp, end) ||
        lws_add_http_header_by_name(wsi, (const unsigned char *)"x-request-id:",
                                    (const unsigned char *)r->id, (int)strlen(r->id), pp, end))
        return -1;
    if (stream) {
        /* Chunked framing is ours (ws_on_writeable): the connection stays
         * reusable after the terminating zero-length chunk. */
        static const char te[] = "chunked", cc[] = "no-cache";
        if (lws_add_http_header_by_token(wsi, WSI_TOKEN_HTTP_TRANSFER_ENCODING,
                                         (const unsigned char *)te, sizeof te - 1, pp, end) ||
            lws_add_http_header_by_token(wsi, WSI_TOKEN_HTTP_CACHE_CONTROL,
                                         (const unsigned char *)cc, sizeof cc - 1, pp, end))
            return -1;
    } else {
        char cl[24];
        int n = snprintf(cl, sizeof cl, "%zu", content_len);
        if (lws_add_http_header_by_token(wsi, WSI_TOKEN_HTTP_CONTENT_LENGTH,
                                         (const unsigned char *)cl, n, pp, end))
            return -1;
    }
    if (c->close_after || s->draining) {
        static const char cl[] = "close";
        if (lws_add_http_header_by_token(wsi, WSI_TOKEN_CONNECTION, (const unsigned char *)cl,
                                         sizeof cl - 1, pp, end))
            return -1;
    }
    if (s->cors) {
        static const char expose[] = "x-request-id, retry-after";
        if (lws_add_http_header_by_name(wsi, (const unsigned char *)"access-control-allow-origin:",
                                        (const unsigned char *)s->cors, (int)strlen(s->cors), pp,
                                        end) ||
            lws_add_http_header_by_name(wsi,
                                        (const unsigned char *)"access-control-expose-headers:",
                                        (const unsigned char *)expose, sizeof expose - 1, pp, end))
            return -1;
    }
    for (int i = 0; i < r->n_extra; i++) {
        char name[80];
        snprintf(name, sizeof name, "%s:", r->extra_name[i]);
        if (lws_add_http_header_by_name(wsi, (const unsigned char *)name,
                                        (const unsigned char *)r->extra_value[i],
                                        (int)strlen(r->extra_value[i]), pp, end))
            return -1;
    }
    if (lws_finalize_http_header(wsi, pp, end))
        return -1;
    r->headers_sent = true;
    if (stream && s->p.sse_keepalive_ms > 0)
        lws_set_timer_usecs(wsi, (lws_usec_t)s->p.sse_keepalive_ms * 1000);
    return 0;
}

/* One step of sending the response, one write per call: the headers with
 * the first body bytes, then up to WS_WRITE_CHUNK body bytes per call (a
 * stream's chunk framing around them and, at the end, the last chunk), and
 * the end of the transaction right after the last byte.
 *
 * Ending the transaction in the same callback as the last write matters
 * for keep-alive: the client sends its next request as soon as it has the
 * response, and lws 4.1 must not read it before lws_http_transaction_completed
 * (it would stash it and later parse it wrongly; see ws_on_body_completion). */
static int ws_on_writeable(struct ws_server *s, struct ws_conn *c)
{
    struct ws_req *r = &c->req;
    struct ws_out *o = r->out;
    if (!c->active || !o)
        return 0;
    if (r->final_sent)
        goto complete;       /* lws has flushed what it buffered of the last write */
    unsigned char buf[LWS_PRE + WS_HEADERS_MAX + 16 + WS_WRITE_CHUNK + 2 + 5];
    unsigned char *start = buf + LWS_PRE, *p = start;

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
    if (!started || (!stream && !ended))
        return 0;  /* nothing to send yet; the producer will wake us */
    if (!r->headers_sent &&
        ws_put_headers(s, c, status, ctype, stream, total, &p, start + WS_HEADERS_MAX) < 0)
        return -1;

    pthread_mutex_lock(&o->lock);
    size_t n = o->len - o->off < WS_WRITE_CHUNK ? o->len - o->off : WS_WRITE_CHUNK;
    if (stream && n > 0)
        p += snprintf((char *)p, 16, "%zx\r\n", n);
    memcpy(p, o->buf + o->off, n);
    p += n;
    o->off += n;
    bool more = o->off < o->len, done = o->ended && !more;
    pthread_mutex_unlock(&o->lock);
    if (stream && n > 0) {
        memcpy(p, "\r\n", 2);
        p += 2;
    }
    if (stream && done) {
        memcpy(p, "0\r\n\r\n", 5);
        p += 5;
    }
    if (p > start) {
        if (lws_write(c->wsi, start, (size_t)(p - start), LWS_WRITE_HTTP) < (int)(p - start))
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
        /* lws holds part of it: end once that is out (the client cannot
         * have the whole response yet, so no next request comes before). */
        lws_callback_on_writable(c->wsi);
        return 0;
    }
complete:
    lws_set_timer_usecs(c->wsi, LWS_SET_TIMER_USEC_CANCEL);  /* a stream's keep-alive timer */
    bool close = c->close_after || s->draining;
    ws_finish(s, c, false);
    if (close)
        return -1;
    return lws_http_transaction_completed(c->wsi) ? -1 : 0;
}

/* SSE keep-alive: a comment line when a stream has been quiet for a while,
 * so proxies and clients do not give up on a request waiting in the queue. */
static void ws_on_timer(struct ws_server *s, struct ws_conn *c)
{
    struct ws_req *r = &c->req;
    if (!c->active || !r->out || !r->headers_sent || s->p.sse_keepalive_ms <= 0)
        return;
    double idle_ms = (omni_time_s() - r->last_write) * 1e3;
    if (idle_ms >= s->p.sse_keepalive_ms * 0.9) {
        static const char ka[] = ": keep-alive\n\n";
        ws_out_write(r->out, ka, sizeof ka - 1);
        lws_callback_on_writable(c->wsi);
    }
    lws_set_timer_usecs(c->wsi, (lws_usec_t)s->p.sse_keepalive_ms * 1000);
}

static void ws_conn_closed(struct ws_server *s, struct ws_conn *c)
{
    if (c->active) {
        /* Everything was sent and only the bookkeeping was left: not an abort. */
        bool complete = false;
        struct ws_out *o = c->req.out;
        if (o && c->req.headers_sent) {
            pthread_mutex_lock(&o->lock);
            complete = o->ended && o->off == o->len && (!o->stream || c->req.final_sent);
            pthread_mutex_unlock(&o->lock);
        }
        if (!complete)
            ws_abort(c, true);
        ws_finish(s, c, !complete);
    }
    ws_req_reset(&c->req);
    ws_unlink(s, c);
    c->wsi = NULL;
}

/* A WebSocket handshake: the upgrade hook sees it as a request without a
 * body and may accept it; the connection then joins the list so that
 * senders' wake-ups reach it. Nonzero refuses. */
static int ws_on_upgrade(struct ws_server *s, struct ws_conn *c, struct lws *wsi)
{
    if (!c || s->draining || !s->p.upgrade || c->sock || c->active)
        return 1;
    ws_link(s, c, wsi);
    struct ws_req *r = &c->req;
    ws_req_reset(r);
    r->t_start = omni_time_s();
    r->method = WS_GET;
    int ulen = lws_hdr_total_length(wsi, WSI_TOKEN_GET_URI);
    r->path = ulen > 0 ? malloc((size_t)ulen + 1) : NULL;
    if (r->path && lws_hdr_copy(wsi, r->path, ulen + 1, WSI_TOKEN_GET_URI) < 0) {
        free(r->path);
        r->path = NULL;
    }
    if (r->path) {
        char *q = strchr(r->path, '?');
        if (q)
            *q = 0;
        ws_assign_id(s, r, wsi);
        r->dispatched = true;
        s->p.upgrade(s->p.user, r);
    }
    ws_req_reset(r);
    if (!c->sock) {
        ws_unlink(s, c);
        return 1;
    }
    return 0;
}

/* Producers changed some responses: ask for WRITEABLE on those connections. */
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

static int ws_callback(struct lws *wsi, enum lws_callback_reasons reason, void *user, void *in,
                       size_t len)
{
    struct lws_context *ctx = lws_get_context(wsi);
    struct ws_server *s = ctx ? lws_context_user(ctx) : NULL;
    struct ws_conn *c = user;
    if (!s)
        return lws_callback_http_dummy(wsi, reason, user, in, len);
    switch (reason) {
    case LWS_CALLBACK_FILTER_NETWORK_CONNECTION:
        return s->draining ? 1 : 0;   /* stop taking connections while draining */
    case LWS_CALLBACK_HTTP:
        return ws_on_http(s, c, wsi);
    case LWS_CALLBACK_HTTP_BODY:
        return ws_on_body(s, c, in, len);
    case LWS_CALLBACK_HTTP_BODY_COMPLETION:
        return ws_on_body_completion(s, c);
    case LWS_CALLBACK_HTTP_WRITEABLE:
        return ws_on_writeable(s, c);
    case LWS_CALLBACK_TIMER:
        ws_on_timer(s, c);
        return 0;
    case LWS_CALLBACK_EVENT_WAIT_CANCELLED:
        ws_wake_dirty(s);
        return 0;
    case LWS_CALLBACK_FILTER_PROTOCOL_CONNECTION:
        return ws_on_upgrade(s, c, wsi);
    case LWS_CALLBACK_ESTABLISHED:
        return c && c->sock ? ws_sock_on_established(c->sock, wsi) : -1;
    case LWS_CALLBACK_RECEIVE:
        return c && c->sock ? ws_sock_on_receive(c->sock, wsi, in, len) : -1;
    case LWS_CALLBACK_SERVER_WRITEABLE:
        return c && c->sock ? ws_sock_on_writeable(c->sock, wsi) : 0;
    case LWS_CALLBACK_CLOSED:
    case LWS_CALLBACK_WSI_DESTROY:
        if (c && c->sock) {
            ws_sock_on_closed(c->sock);   /* drops the connection's reference */
            c->sock = NULL;
            ws_unlink(s, c);
        }
        break;
    case LWS_CALLBACK_CLOSED_HTTP:
    case LWS_CALLBACK_HTTP_DROP_PROTOCOL:
        if (c && c->linked && !c->sock)
            ws_conn_closed(s, c);
        break;
    default:
        break;
    }
    return lws_callback_http_dummy(wsi, reason, user, in, len);
}

// ---- server ----------------------------------------------------------------

static void ws_log_emit(int level, const char *line)
{
    size_t n = strlen(line);
    while (n && (line[n - 1] == '\n' || line[n - 1] == '\r'))
        n--;
    omni_log(level & LLL_ERR ? OMNI_LOG_ERROR : OMNI_LOG_WARN, "lws: %.*s", (int)n, line);
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
    uint32_t rnd = 0;
    if (getrandom(&rnd, sizeof rnd, 0) != sizeof rnd)
        rnd = (uint32_t)(omni_time_s() * 1e6);
    snprintf(s->id_prefix, sizeof s->id_prefix, "%08x", rnd);

    s->protocols[0] = (struct lws_protocols){
        .name = "http",
        .callback = ws_callback,
        .per_session_data_size = sizeof(struct ws_conn),
    };
    /* Clients that name a subprotocol (OpenAI's Realtime clients send
     * "realtime") land here; the rest upgrade on "http", the default. */
    s->protocols[1] = s->protocols[0];
    s->protocols[1].name = "realtime";
    lws_set_log_level(LLL_ERR | LLL_WARN, ws_log_emit);
    struct lws_context_creation_info info;
    memset(&info, 0, sizeof info);
    info.port = p->port;
    info.iface = s->host;
    info.protocols = s->protocols;
    info.user = s;
    info.options = LWS_SERVER_OPTION_DISABLE_IPV6 * (strchr(s->host, ':') == NULL);
    info.keepalive_timeout = 75;          /* longer than the clients' own idle timeouts */
    info.timeout_secs = 60;               /* slow request bodies */
    info.max_http_header_data = 16384;
    info.max_http_header_pool = 1024;     /* every open stream keeps its headers */
    s->ctx = lws_create_context(&info);
    if (!s->ctx) {
        omni_fail(err, errlen, OMNI_ERR_IO, "http: cannot listen on %s:%d (address in use?)",
                  s->host, p->port);
        ws_server_free(s);
        return NULL;
    }
    return s;
nomem:
    omni_fail(err, errlen, OMNI_ERR_NOMEM, "http: out of memory");
    ws_server_free(s);
    return NULL;
}

void ws_server_stop(struct ws_server *s)
{
    s->stop_requested = 1;
    if (s->ctx)
        lws_cancel_service(s->ctx);
}

static void ws_tick(lws_sorted_usec_list_t *sul)
{
    struct ws_server *s = lws_container_of(sul, struct ws_server, tick);
    if (s->draining && !s->finished)
        lws_sul_schedule(s->ctx, 0, &s->tick, ws_tick, WS_TICK_US);
}

/* Shutdown state machine, checked after every service pass. */
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
        lws_sul_schedule(s->ctx, 0, &s->tick, ws_tick, WS_TICK_US);
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
    return 0;
}

void ws_server_free(struct ws_server *s)
{
    if (!s)
        return;
    if (s->ctx) {
        lws_sul_cancel(&s->tick);
        lws_context_destroy(s->ctx);  /* closes what is left: CLOSED_HTTP aborts them */
    }
    free(s->host);
    free(s->cors);
    free(s);
}
