/* ws_socket.c - WebSocket messages behind ws_socket.h: RFC 6455 frames on the
 * raw connection ws_http.c hands over after the handshake. Incoming frames
 * are unmasked and joined into one message on the service thread; outgoing
 * messages wait in a FIFO under the socket's lock until a WRITEABLE callback
 * sends the oldest one (LWS_PRE bytes and room for the frame header reserved
 * in front of each). No extensions are negotiated, so RSV bits are errors. */
#include "ws/ws_socket.h"

#include "src/core/omni.h"

#include <libwebsockets.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define WS_FRAME_HDR_MAX 10                 /* server frames are not masked */
#define WS_MSG_PRE (LWS_PRE + WS_FRAME_HDR_MAX)

enum {
    WS_OP_CONT = 0x0, WS_OP_TEXT = 0x1, WS_OP_BINARY = 0x2,
    WS_OP_CLOSE = 0x8, WS_OP_PING = 0x9, WS_OP_PONG = 0xa,
};

struct ws_msg {                             /* outgoing */
    struct ws_msg *next;
    size_t len;
    unsigned char data[];                   /* WS_MSG_PRE + len */
};

struct ws_inmsg {                           /* incoming, queued for a worker (.offload) */
    struct ws_inmsg *next;
    bool close;                             /* the on_close marker, last in the queue */
    bool binary;
    size_t len;
    char *data;                             /* NUL-terminated */
};

/* Frame parser position (service thread). */
enum ws_rx_state { WS_RX_HEADER, WS_RX_PAYLOAD, WS_RX_IGNORE };

struct ws_sock {
    pthread_mutex_t lock;
    struct ws_server *srv;            /* immutable; worker pool */
    struct lws_context *ctx;          /* immutable; for lws_cancel_service */
    const struct ws_sock_handler *h;  /* immutable */
    void *user;                       /* immutable */
    int refs;                         /* {lock} */
    bool gone;                        /* {lock} connection closed */
    bool dirty;                       /* {lock} */
    int close_code;                   /* {lock} 0: none requested */
    char close_reason[64];            /* {lock} */
    struct ws_msg *head, *tail;       /* {lock} */
    size_t pending;                   /* {lock} queued bytes */
    bool overflow;                    /* {lock} */
    struct ws_inmsg *in_head, *in_tail; /* {lock} messages for the worker */
    bool in_scheduled;                /* {lock} a worker job is draining in_head */
    struct ws_inmsg *close_marker;    /* .offload: allocated up front so on_close cannot fail */
    /* service thread */
    enum ws_rx_state rx_state;
    unsigned char hdr[14];
    size_t hdr_len;
    int op;                           /* of the frame being read */
    bool fin;
    uint64_t left;                    /* payload bytes still to come */
    unsigned char mask[4];
    unsigned mask_pos;
    int msg_op;                       /* WS_OP_TEXT/BINARY while a message is open, else 0 */
    char *rx;                         /* the message so far */
    size_t rx_len, rx_cap;
    unsigned char ctl[125];           /* control frame payload */
    size_t ctl_len;
    unsigned char pong[125];          /* a pong owed */
    size_t pong_len;
    bool pong_due;
    bool closed_cb;
};

void ws_sock_accept_key(const char *key, char out[29])
{
    static const char guid[] = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11";
    char buf[128];
    unsigned char sha[20];
    size_t kl = strnlen(key, sizeof buf - sizeof guid);
    memcpy(buf, key, kl);
    memcpy(buf + kl, guid, sizeof guid - 1);
    lws_SHA1((const unsigned char *)buf, kl + sizeof guid - 1, sha);
    char b64[40];                        /* lws wants room beyond the 28 characters */
    if (lws_b64_encode_string((const char *)sha, 20, b64, sizeof b64) != 28)
        b64[0] = 0;
    memcpy(out, b64, 29);
}

struct ws_sock *ws_sock_new(struct ws_server *srv, struct lws_context *ctx,
                            const struct ws_sock_handler *h, void *user)
{
    struct ws_sock *s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    pthread_mutex_init(&s->lock, NULL);
    s->srv = srv;
    s->ctx = ctx;
    s->h = h;
    s->user = user;
    s->refs = 2;
    if (h->offload && !(s->close_marker = calloc(1, sizeof *s->close_marker))) {
        pthread_mutex_destroy(&s->lock);
        free(s);
        return NULL;
    }
    return s;
}

static void ws_sock_wake(struct ws_sock *s, bool wake)
{
    if (wake && s->ctx)
        lws_cancel_service(s->ctx);
}

void ws_sock_send(struct ws_sock *s, const char *text, size_t len)
{
    struct ws_msg *m = malloc(sizeof *m + WS_MSG_PRE + len);
    pthread_mutex_lock(&s->lock);
    bool wake = false;
    if (s->gone || s->close_code || s->overflow) {
        free(m);
    } else if (!m || s->pending + len > WS_SOCK_MAX_PENDING) {
        free(m);
        s->overflow = true;   /* the service thread drops the client */
        wake = !s->dirty;
        s->dirty = true;
    } else {
        m->next = NULL;
        m->len = len;
        if (len)
            memcpy(m->data + WS_MSG_PRE, text, len);
        if (s->tail)
            s->tail->next = m;
        else
            s->head = m;
        s->tail = m;
        s->pending += len;
        wake = !s->dirty;
        s->dirty = true;
    }
    pthread_mutex_unlock(&s->lock);
    ws_sock_wake(s, wake);
}

void ws_sock_close(struct ws_sock *s, int code, const char *reason)
{
    pthread_mutex_lock(&s->lock);
    bool wake = false;
    if (!s->gone && !s->close_code) {
        s->close_code = code;
        snprintf(s->close_reason, sizeof s->close_reason, "%s", reason ? reason : "");
        wake = !s->dirty;
        s->dirty = true;
    }
    pthread_mutex_unlock(&s->lock);
    ws_sock_wake(s, wake);
}

bool ws_sock_gone(struct ws_sock *s)
{
    pthread_mutex_lock(&s->lock);
    bool gone = s->gone;
    pthread_mutex_unlock(&s->lock);
    return gone;
}

void ws_sock_retain(struct ws_sock *s)
{
    pthread_mutex_lock(&s->lock);
    s->refs++;
    pthread_mutex_unlock(&s->lock);
}

void ws_sock_release(struct ws_sock *s)
{
    if (!s)
        return;
    pthread_mutex_lock(&s->lock);
    bool last = --s->refs == 0;
    pthread_mutex_unlock(&s->lock);
    if (!last)
        return;
    for (struct ws_msg *m = s->head, *next; m; m = next) {
        next = m->next;
        free(m);
    }
    for (struct ws_inmsg *m = s->in_head, *next; m; m = next) {
        next = m->next;
        free(m->data);
        free(m);
    }
    free(s->close_marker);
    free(s->rx);
    pthread_mutex_destroy(&s->lock);
    free(s);
}

bool ws_sock_take_dirty(struct ws_sock *s)
{
    pthread_mutex_lock(&s->lock);
    bool d = s->dirty;
    s->dirty = false;
    pthread_mutex_unlock(&s->lock);
    return d;
}

// ---- incoming -----------------------------------------------------------

/* Worker job: hand the queued messages to on_message one at a time, then
 * on_close when its marker comes. Holds a reference while scheduled. */
static void ws_sock_run_inbox(void *arg)
{
    struct ws_sock *s = arg;
    for (;;) {
        pthread_mutex_lock(&s->lock);
        struct ws_inmsg *m = s->in_head;
        if (m) {
            s->in_head = m->next;
            if (!s->in_head)
                s->in_tail = NULL;
        } else {
            s->in_scheduled = false;
        }
        pthread_mutex_unlock(&s->lock);
        if (!m)
            break;
        if (m->close) {
            if (s->h->on_close)
                s->h->on_close(s->user);
        } else if (s->h->on_message) {
            s->h->on_message(s->user, s, m->data, m->len, m->binary);
        }
        free(m->data);
        free(m);
    }
    ws_sock_release(s);
}

static void ws_sock_enqueue_in(struct ws_sock *s, struct ws_inmsg *m)
{
    pthread_mutex_lock(&s->lock);
    m->next = NULL;
    if (s->in_tail)
        s->in_tail->next = m;
    else
        s->in_head = m;
    s->in_tail = m;
    bool submit = !s->in_scheduled;
    if (submit) {
        s->in_scheduled = true;
        s->refs++;
    }
    pthread_mutex_unlock(&s->lock);
    if (submit)
        ws_server_submit(s->srv, ws_sock_run_inbox, s);
}

/* A whole message is in s->rx. */
static int ws_sock_deliver(struct ws_sock *s, bool binary)
{
    if (!s->h->offload) {
        if (s->h->on_message)
            s->h->on_message(s->user, s, s->rx ? s->rx : "", s->rx_len, binary);
        return 0;
    }
    struct ws_inmsg *m = calloc(1, sizeof *m);
    if (!m)
        return -1;
    m->binary = binary;
    m->len = s->rx_len;
    m->data = s->rx ? s->rx : strdup("");   /* the buffer moves to the worker */
    if (!m->data) {
        free(m);
        return -1;
    }
    s->rx = NULL;
    s->rx_cap = 0;
    ws_sock_enqueue_in(s, m);
    return 0;
}

/* Fail the connection: a close frame with this code, nothing more read. */
static void ws_sock_fail(struct ws_sock *s, int code, const char *why)
{
    OMNI_INFO("ws: closing with %d: %s", code, why);
    s->rx_state = WS_RX_IGNORE;
    pthread_mutex_lock(&s->lock);
    if (!s->close_code) {
        s->close_code = code;
        snprintf(s->close_reason, sizeof s->close_reason, "%s", why);
    }
    s->dirty = true;
    pthread_mutex_unlock(&s->lock);
}

/* A complete control frame (payload in s->ctl). */
static void ws_sock_on_control(struct ws_sock *s)
{
    if (s->op == WS_OP_PING) {
        memcpy(s->pong, s->ctl, s->ctl_len);
        s->pong_len = s->ctl_len;
        s->pong_due = true;
        pthread_mutex_lock(&s->lock);
        s->dirty = true;
        pthread_mutex_unlock(&s->lock);
    } else if (s->op == WS_OP_CLOSE) {
        /* Echo the client's code (RFC 6455 5.5.1), then the connection ends. */
        int code = 1000;
        if (s->ctl_len == 1) {
            ws_sock_fail(s, 1002, "bad close frame");
            return;
        }
        if (s->ctl_len >= 2) {
            code = s->ctl[0] << 8 | s->ctl[1];
            if (code < 1000 || code == 1004 || code == 1005 || code == 1006 ||
                (code > 1014 && code < 3000) || code > 4999)
                code = 1002;
        }
        s->rx_state = WS_RX_IGNORE;
        pthread_mutex_lock(&s->lock);
        if (!s->close_code)
            s->close_code = code;
        s->dirty = true;
        pthread_mutex_unlock(&s->lock);
    }
    /* pongs need nothing */
}

/* The frame header in s->hdr is complete: check it, start the payload. */
static int ws_sock_on_header(struct ws_sock *s)
{
    const unsigned char *h = s->hdr;
    s->fin = h[0] & 0x80;
    s->op = h[0] & 0x0f;
    size_t at = 2;
    uint64_t len = h[1] & 0x7f;
    if (len == 126) {
        len = (uint64_t)h[2] << 8 | h[3];
        at = 4;
    } else if (len == 127) {
        len = 0;
        for (int i = 0; i < 8; i++)
            len = len << 8 | h[2 + i];
        at = 10;
    }
    if (h[1] & 0x80)
        memcpy(s->mask, h + at, 4);
    s->mask_pos = 0;
    s->left = len;
    if (h[0] & 0x70)
        return ws_sock_fail(s, 1002, "reserved bits set"), 0;
    if (!(h[1] & 0x80))
        return ws_sock_fail(s, 1002, "client frame not masked"), 0;
    if (len >> 63)
        return ws_sock_fail(s, 1002, "bad frame length"), 0;
    if (s->op & 0x8) {
        if (s->op != WS_OP_CLOSE && s->op != WS_OP_PING && s->op != WS_OP_PONG)
            return ws_sock_fail(s, 1002, "unknown opcode"), 0;
        if (!s->fin || len > 125)
            return ws_sock_fail(s, 1002, "bad control frame"), 0;
        s->ctl_len = 0;
    } else {
        if (s->op != WS_OP_CONT && s->op != WS_OP_TEXT && s->op != WS_OP_BINARY)
            return ws_sock_fail(s, 1002, "unknown opcode"), 0;
        if ((s->op == WS_OP_CONT) != (s->msg_op != 0))
            return ws_sock_fail(s, 1002, "bad fragment sequence"), 0;
        if (s->op != WS_OP_CONT) {
            s->msg_op = s->op;
            s->rx_len = 0;
        }
        if (len > WS_SOCK_MAX_MESSAGE - s->rx_len)
            return ws_sock_fail(s, 1009, "message too big"), 0;
        size_t need = s->rx_len + (size_t)len + 1;
        if (need > s->rx_cap) {
            size_t cap = s->rx_cap ? s->rx_cap : 4096;
            while (cap < need)
                cap *= 2;
            char *nb = realloc(s->rx, cap);
            if (!nb)
                return -1;
            s->rx = nb;
            s->rx_cap = cap;
        }
    }
    s->rx_state = WS_RX_PAYLOAD;
    return 0;
}

/* The payload of the current frame is complete. */
static int ws_sock_on_frame_end(struct ws_sock *s)
{
    s->rx_state = WS_RX_HEADER;
    s->hdr_len = 0;
    if (s->op & 0x8) {
        ws_sock_on_control(s);
        return 0;
    }
    if (!s->fin)
        return 0;
    bool binary = s->msg_op == WS_OP_BINARY;
    s->msg_op = 0;
    s->rx[s->rx_len] = 0;
    return ws_sock_deliver(s, binary);
}

int ws_sock_on_receive(struct ws_sock *s, const void *in, size_t len)
{
    const unsigned char *p = in, *end = p + len;
    while (p < end || (s->rx_state == WS_RX_PAYLOAD && s->left == 0)) {
        if (s->rx_state == WS_RX_IGNORE)
            return 0;
        if (s->rx_state == WS_RX_HEADER) {
            /* 2 bytes, then the extended length and the mask key */
            s->hdr[s->hdr_len++] = *p++;
            if (s->hdr_len < 2)
                continue;
            unsigned l7 = s->hdr[1] & 0x7f;
            size_t need = 2 + (l7 == 126 ? 2 : l7 == 127 ? 8 : 0) + (s->hdr[1] & 0x80 ? 4 : 0);
            if (s->hdr_len < need)
                continue;
            if (ws_sock_on_header(s) < 0)
                return -1;
            continue;
        }
        /* payload: unmask into the message or the control buffer */
        size_t n = (size_t)((uint64_t)(end - p) < s->left ? (uint64_t)(end - p) : s->left);
        unsigned char *dst = (s->op & 0x8) ? s->ctl + s->ctl_len : (unsigned char *)s->rx + s->rx_len;
        for (size_t i = 0; i < n; i++)
            dst[i] = p[i] ^ s->mask[(s->mask_pos + i) & 3];
        s->mask_pos = (unsigned)((s->mask_pos + n) & 3);
        if (s->op & 0x8)
            s->ctl_len += n;
        else
            s->rx_len += n;
        p += n;
        s->left -= n;
        if (s->left == 0 && ws_sock_on_frame_end(s) < 0)
            return -1;
    }
    return 0;
}

// ---- outgoing -----------------------------------------------------------

/* Frame header for a payload of len bytes, written to end just before the
 * payload; returns its start. */
static unsigned char *ws_frame_header(unsigned char *payload, int op, size_t len)
{
    unsigned char *h;
    if (len < 126) {
        h = payload - 2;
        h[1] = (unsigned char)len;
    } else if (len < 65536) {
        h = payload - 4;
        h[1] = 126;
        h[2] = (unsigned char)(len >> 8);
        h[3] = (unsigned char)len;
    } else {
        h = payload - 10;
        h[1] = 127;
        for (int i = 0; i < 8; i++)
            h[2 + i] = (unsigned char)((uint64_t)len >> (56 - 8 * i));
    }
    h[0] = (unsigned char)(0x80 | op);
    return h;
}

static int ws_sock_write_frame(struct lws *wsi, unsigned char *payload, int op, size_t len)
{
    unsigned char *h = ws_frame_header(payload, op, len);
    size_t n = (size_t)(payload - h) + len;
    return lws_write(wsi, h, n, LWS_WRITE_RAW) < (int)n ? -1 : 0;
}

int ws_sock_on_writeable(struct ws_sock *s, struct lws *wsi)
{
    unsigned char ctl[LWS_PRE + WS_FRAME_HDR_MAX + 125];
    unsigned char *cp = ctl + LWS_PRE + WS_FRAME_HDR_MAX;
    if (s->pong_due) {
        s->pong_due = false;
        if (s->pong_len)
            memcpy(cp, s->pong, s->pong_len);
        if (ws_sock_write_frame(wsi, cp, WS_OP_PONG, s->pong_len) < 0)
            return -1;
        lws_callback_on_writable(wsi);   /* the queue may hold more */
        return 0;
    }
    pthread_mutex_lock(&s->lock);
    struct ws_msg *m = s->head;
    if (m) {
        s->head = m->next;
        if (!s->head)
            s->tail = NULL;
        s->pending -= m->len;
    }
    bool more = s->head != NULL, overflow = s->overflow;
    int code = s->close_code;
    char reason[sizeof s->close_reason];
    memcpy(reason, s->close_reason, sizeof reason);
    pthread_mutex_unlock(&s->lock);

    if (overflow) {
        free(m);
        OMNI_WARN("ws: client is not reading; dropping the connection");
        return -1;
    }
    if (m) {
        int rc = ws_sock_write_frame(wsi, m->data + WS_MSG_PRE, WS_OP_TEXT, m->len);
        free(m);
        if (rc < 0)
            return -1;
        if (more || code)
            lws_callback_on_writable(wsi);
        return 0;
    }
    if (code) {
        size_t rl = strnlen(reason, sizeof reason);
        cp[0] = (unsigned char)(code >> 8);
        cp[1] = (unsigned char)code;
        memcpy(cp + 2, reason, rl);
        if (ws_sock_write_frame(wsi, cp, WS_OP_CLOSE, 2 + rl) < 0)
            return -1;
        return 1;
    }
    return 0;
}

void ws_sock_on_closed(struct ws_sock *s)
{
    if (s->closed_cb)
        return;
    s->closed_cb = true;
    pthread_mutex_lock(&s->lock);
    s->gone = true;
    pthread_mutex_unlock(&s->lock);
    if (s->h->offload) {
        struct ws_inmsg *m = s->close_marker;
        s->close_marker = NULL;
        m->close = true;
        ws_sock_enqueue_in(s, m);
    } else if (s->h->on_close) {
        s->h->on_close(s->user);
    }
    ws_sock_release(s);
}
