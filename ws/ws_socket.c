/* ws_socket.c - WebSocket messages behind ws_socket.h. Incoming fragments
 * are joined into one message on the service thread; outgoing messages wait
 * in a FIFO under the socket's lock until a WRITEABLE callback sends the
 * oldest one (LWS_PRE bytes reserved in front of each, as lws_write needs). */
#include "ws/ws_socket.h"

#include "src/core/omni.h"

#include <libwebsockets.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

struct ws_msg {
    struct ws_msg *next;
    size_t len;
    unsigned char data[];   /* LWS_PRE + len */
};

struct ws_sock {
    pthread_mutex_t lock;
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
    /* service thread */
    char *rx;
    size_t rx_len, rx_cap;
    bool rx_too_big, closed_cb;
};

struct ws_sock *ws_sock_new(struct lws_context *ctx, const struct ws_sock_handler *h, void *user)
{
    struct ws_sock *s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    pthread_mutex_init(&s->lock, NULL);
    s->ctx = ctx;
    s->h = h;
    s->user = user;
    s->refs = 2;
    return s;
}

static void ws_sock_wake(struct ws_sock *s, bool wake)
{
    if (wake)
        lws_cancel_service(s->ctx);
}

void ws_sock_send(struct ws_sock *s, const char *text, size_t len)
{
    struct ws_msg *m = malloc(sizeof *m + LWS_PRE + len);
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
        memcpy(m->data + LWS_PRE, text, len);
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

int ws_sock_on_established(struct ws_sock *s, struct lws *wsi)
{
    (void)s;
    lws_callback_on_writable(wsi);   /* messages queued during the upgrade */
    return 0;
}

int ws_sock_on_receive(struct ws_sock *s, struct lws *wsi, const void *in, size_t len)
{
    if (lws_is_first_fragment(wsi)) {
        s->rx_len = 0;
        s->rx_too_big = false;
    }
    if (!s->rx_too_big) {
        if (s->rx_len + len > WS_SOCK_MAX_MESSAGE) {
            s->rx_too_big = true;
        } else {
            if (s->rx_len + len + 1 > s->rx_cap) {
                size_t cap = s->rx_cap ? s->rx_cap : 4096;
                while (cap < s->rx_len + len + 1)
                    cap *= 2;
                char *nb = realloc(s->rx, cap);
                if (!nb) {
                    lws_close_reason(wsi, LWS_CLOSE_STATUS_UNEXPECTED_CONDITION,
                                     (unsigned char *)"out of memory", 13);
                    return -1;
                }
                s->rx = nb;
                s->rx_cap = cap;
            }
            memcpy(s->rx + s->rx_len, in, len);
            s->rx_len += len;
            s->rx[s->rx_len] = 0;
        }
    }
    if (!lws_is_final_fragment(wsi) || lws_remaining_packet_payload(wsi) > 0)
        return 0;
    if (s->rx_too_big) {
        static const char why[] = "message too big";
        lws_close_reason(wsi, LWS_CLOSE_STATUS_MESSAGE_TOO_LARGE, (unsigned char *)why,
                         sizeof why - 1);
        return -1;
    }
    if (s->h->on_message)
        s->h->on_message(s->user, s, s->rx ? s->rx : "", s->rx_len, lws_frame_is_binary(wsi));
    return 0;
}

int ws_sock_on_writeable(struct ws_sock *s, struct lws *wsi)
{
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
        int n = lws_write(wsi, m->data + LWS_PRE, m->len, LWS_WRITE_TEXT);
        free(m);
        if (n < 0)
            return -1;
        if (more || code)
            lws_callback_on_writable(wsi);
        return 0;
    }
    if (code) {
        lws_close_reason(wsi, (enum lws_close_status)code, (unsigned char *)reason,
                         strlen(reason));
        return -1;
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
    if (s->h->on_close)
        s->h->on_close(s->user);
    ws_sock_release(s);
}
