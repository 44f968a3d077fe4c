/* rt_client.c - the Realtime WebSocket client of the samples (see
 * rt_client.h): lws client protocol, event reassembly, the outgoing queues
 * (client events in order, then audio as append events), file pacing. */
#include "samples/rt_client.h"

#include "media/audio.h"

#include <libwebsockets.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct rtcl_msg {
    struct rtcl_msg *next;
    size_t len;
    char text[];
};

struct rtcl {
    struct rtcl_params p;
    char url[1024], path[1024];
    const char *prot, *host;
    int port;
    struct lws_context *ctx;
    struct lws *wsi;
    bool connected, closed;
    struct rtcl_msg *head, *tail;   /* client events waiting to be written */
    char *rx;                       /* message being reassembled */
    size_t rx_len, rx_cap;
    lws_sorted_usec_list_t tick;
    /* audio waiting to be sent */
    pthread_mutex_t lock;
    unsigned char *queue;           /* {lock} */
    size_t queue_len, queue_cap;    /* {lock} */
    bool woken;                     /* {lock} */
};

static volatile sig_atomic_t rtcl_interrupted;
static struct lws_context *rtcl_signal_ctx;

static void rtcl_on_signal(int sig)
{
    (void)sig;
    rtcl_interrupted = 1;
    if (rtcl_signal_ctx)
        lws_cancel_service(rtcl_signal_ctx);
}

double rtcl_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

void rtcl_queue_audio(struct rtcl *c, const void *data, size_t len)
{
    size_t max = (size_t)c->p.rate_hz * 2 * (size_t)(c->p.max_queue_s ? c->p.max_queue_s : 10);
    pthread_mutex_lock(&c->lock);
    if (c->queue_len + len > c->queue_cap) {
        size_t cap = c->queue_cap ? c->queue_cap : 65536;
        while (cap < c->queue_len + len)
            cap *= 2;
        unsigned char *q = realloc(c->queue, cap);
        if (!q) {
            pthread_mutex_unlock(&c->lock);
            return;   /* out of memory: this piece of audio is lost */
        }
        c->queue = q;
        c->queue_cap = cap;
    }
    memcpy(c->queue + c->queue_len, data, len);
    c->queue_len += len;
    if (c->queue_len > max) {   /* keep the newest audio: the live part matters */
        size_t drop = (c->queue_len - max + 1) & ~(size_t)1;
        memmove(c->queue, c->queue + drop, c->queue_len - drop);
        c->queue_len -= drop;
    }
    pthread_mutex_unlock(&c->lock);
}

size_t rtcl_queued_audio(struct rtcl *c)
{
    pthread_mutex_lock(&c->lock);
    size_t n = c->queue_len;
    pthread_mutex_unlock(&c->lock);
    return n;
}

void rtcl_wake(struct rtcl *c)
{
    pthread_mutex_lock(&c->lock);
    c->woken = true;
    pthread_mutex_unlock(&c->lock);
    lws_cancel_service(c->ctx);
}

int rtcl_send(struct rtcl *c, const char *json)
{
    size_t n = strlen(json);
    struct rtcl_msg *m = malloc(sizeof *m + n + 1);
    if (!m)
        return -1;
    m->next = NULL;
    m->len = n;
    memcpy(m->text, json, n + 1);
    if (c->tail)
        c->tail->next = m;
    else
        c->head = m;
    c->tail = m;
    if (c->wsi)
        lws_callback_on_writable(c->wsi);
    return 0;
}

static int rtcl_write_text(struct lws *wsi, const char *text, size_t n)
{
    unsigned char *buf = malloc(LWS_PRE + n);
    if (!buf)
        return -1;
    memcpy(buf + LWS_PRE, text, n);
    int w = lws_write(wsi, buf + LWS_PRE, n, LWS_WRITE_TEXT);
    free(buf);
    return w < (int)n ? -1 : 0;
}

/* One message per WRITEABLE: a queued client event, else up to 200 ms of
 * audio as an append event. */
static int rtcl_on_writeable(struct rtcl *c, struct lws *wsi)
{
    if (c->head) {
        struct rtcl_msg *m = c->head;
        if (!(c->head = m->next))
            c->tail = NULL;
        int rc = rtcl_write_text(wsi, m->text, m->len);
        free(m);
        if (c->head || rtcl_queued_audio(c))
            lws_callback_on_writable(wsi);
        return rc;
    }
    size_t max = (size_t)c->p.rate_hz * 2 / 5;
    unsigned char pcm[96000 * 2 / 5];
    if (max > sizeof pcm)
        max = sizeof pcm;
    pthread_mutex_lock(&c->lock);
    size_t n = (c->queue_len < max ? c->queue_len : max) & ~(size_t)1;
    memcpy(pcm, c->queue, n);
    memmove(c->queue, c->queue + n, c->queue_len - n);
    c->queue_len -= n;
    bool more = c->queue_len > 0;
    pthread_mutex_unlock(&c->lock);
    if (!n)
        return 0;
    static const char head[] = "{\"type\":\"input_audio_buffer.append\",\"audio\":\"";
    size_t b64 = (n + 2) / 3 * 4 + 5;   /* lws wants room beyond the text and its NUL */
    char *ev = malloc(sizeof head + b64 + 2);
    if (!ev)
        return -1;
    memcpy(ev, head, sizeof head - 1);
    int len = lws_b64_encode_string((const char *)pcm, (int)n, ev + sizeof head - 1, (int)b64);
    int rc = -1;
    if (len >= 0) {
        strcpy(ev + sizeof head - 1 + len, "\"}");
        rc = rtcl_write_text(wsi, ev, sizeof head - 1 + (size_t)len + 2);
    }
    free(ev);
    if (more)
        lws_callback_on_writable(wsi);
    return rc;
}

static void rtcl_on_tick(lws_sorted_usec_list_t *sul)
{
    struct rtcl *c = lws_container_of(sul, struct rtcl, tick);
    if (c->p.on_tick)
        c->p.on_tick(c->p.user);
    if (c->wsi && rtcl_queued_audio(c))
        lws_callback_on_writable(c->wsi);
    lws_sul_schedule(c->ctx, 0, &c->tick, rtcl_on_tick, (lws_usec_t)c->p.tick_ms * LWS_US_PER_MS);
}

static int rtcl_callback(struct lws *wsi, enum lws_callback_reasons reason, void *user, void *in,
                         size_t len)
{
    (void)user;
    struct lws_context *ctx = lws_get_context(wsi);
    struct rtcl *c = ctx ? lws_context_user(ctx) : NULL;
    if (!c)
        return 0;
    switch (reason) {
    case LWS_CALLBACK_CLIENT_CONNECTION_ERROR:
        fprintf(stderr, "%s: cannot connect: %s\n", c->p.prog, in ? (const char *)in : "refused");
        c->wsi = NULL;
        c->closed = true;
        if (c->p.on_closed)
            c->p.on_closed(c->p.user, false);
        break;
    case LWS_CALLBACK_CLIENT_ESTABLISHED:
        c->wsi = wsi;
        c->connected = true;
        if (c->head)
            lws_callback_on_writable(wsi);
        break;
    case LWS_CALLBACK_CLIENT_RECEIVE:
        if (c->rx_len + len + 1 > c->rx_cap) {
            size_t cap = (c->rx_len + len + 1) * 2;
            char *r = realloc(c->rx, cap);
            if (!r)
                return -1;
            c->rx = r;
            c->rx_cap = cap;
        }
        memcpy(c->rx + c->rx_len, in, len);
        c->rx_len += len;
        if (lws_is_final_fragment(wsi) && !lws_remaining_packet_payload(wsi)) {
            cJSON *ev = cJSON_ParseWithLength(c->rx, c->rx_len);
            c->rx_len = 0;
            if (ev && c->p.on_event)
                c->p.on_event(c->p.user, ev);
            cJSON_Delete(ev);
        }
        break;
    case LWS_CALLBACK_CLIENT_WRITEABLE:
        if (c->closed)
            return -1;
        return rtcl_on_writeable(c, wsi);
    case LWS_CALLBACK_EVENT_WAIT_CANCELLED: {
        pthread_mutex_lock(&c->lock);
        bool woken = c->woken;
        c->woken = false;
        pthread_mutex_unlock(&c->lock);
        if (woken && c->p.on_wake)
            c->p.on_wake(c->p.user);
        if (c->wsi && (c->head || rtcl_queued_audio(c)))
            lws_callback_on_writable(c->wsi);
        break;
    }
    case LWS_CALLBACK_CLIENT_CLOSED:
        c->wsi = NULL;
        if (!c->closed) {
            c->closed = true;
            if (c->p.on_closed)
                c->p.on_closed(c->p.user, true);
        }
        break;
    default:
        break;
    }
    return 0;
}

struct rtcl *rtcl_new(const struct rtcl_params *p)
{
    struct rtcl *c = calloc(1, sizeof *c);
    if (!c)
        return NULL;
    c->p = *p;
    pthread_mutex_init(&c->lock, NULL);
    snprintf(c->url, sizeof c->url, "%s", p->url);
    const char *path;
    if (lws_parse_uri(c->url, &c->prot, &c->host, &c->port, &path) ||
        (strcmp(c->prot, "ws") && strcmp(c->prot, "wss"))) {
        fprintf(stderr, "%s: --url %s: not a ws:// or wss:// URL\n", p->prog, p->url);
        rtcl_free(c);
        return NULL;
    }
    snprintf(c->path, sizeof c->path, "/%s", path);   /* lws_parse_uri drops the '/' */
    return c;
}

int rtcl_connect(struct rtcl *c)
{
    static const struct lws_protocols protocols[] = {
        { .name = "realtime-client", .callback = rtcl_callback },
        { .name = NULL },
    };
    struct lws_context_creation_info info;
    memset(&info, 0, sizeof info);
    info.port = CONTEXT_PORT_NO_LISTEN;
    info.protocols = protocols;
    info.user = c;
    bool tls = !strcmp(c->prot, "wss");
    if (tls)
        info.options = LWS_SERVER_OPTION_DO_SSL_GLOBAL_INIT;
    lws_set_log_level(getenv("RT_DEBUG") ? LLL_ERR | LLL_WARN | LLL_NOTICE | LLL_INFO | LLL_CLIENT
                                         : LLL_ERR, NULL);
    if (!(c->ctx = lws_create_context(&info))) {
        fprintf(stderr, "%s: cannot create the lws context\n", c->p.prog);
        return -1;
    }
    rtcl_signal_ctx = c->ctx;
    signal(SIGINT, rtcl_on_signal);
    signal(SIGTERM, rtcl_on_signal);
    struct lws_client_connect_info ci;
    memset(&ci, 0, sizeof ci);
    ci.context = c->ctx;
    ci.address = c->host;
    ci.port = c->port;
    ci.path = c->path;
    ci.host = c->host;
    ci.origin = c->host;
    ci.ssl_connection = tls ? LCCSCF_USE_SSL : 0;
    ci.local_protocol_name = protocols[0].name;
    if (!lws_client_connect_via_info(&ci)) {
        fprintf(stderr, "%s: cannot connect to %s\n", c->p.prog, c->p.url);
        return -1;
    }
    if (c->p.tick_ms > 0)
        lws_sul_schedule(c->ctx, 0, &c->tick, rtcl_on_tick, (lws_usec_t)c->p.tick_ms * LWS_US_PER_MS);
    return 0;
}

int rtcl_service(struct rtcl *c)
{
    if (rtcl_interrupted || lws_service(c->ctx, 0) < 0)
        return -1;
    return rtcl_interrupted ? -1 : 0;
}

void rtcl_free(struct rtcl *c)
{
    if (!c)
        return;
    if (c->ctx) {
        lws_sul_cancel(&c->tick);
        rtcl_signal_ctx = NULL;
        lws_context_destroy(c->ctx);
    }
    while (c->head) {
        struct rtcl_msg *m = c->head;
        c->head = m->next;
        free(m);
    }
    pthread_mutex_destroy(&c->lock);
    free(c->queue);
    free(c->rx);
    free(c);
}

void rtcl_pace(struct rtcl *c, struct rtcl_pacer *p)
{
    static const short zeros[1600];
    size_t due = (size_t)((rtcl_now() - p->t0) * c->p.rate_hz);
    size_t end = p->tail == (size_t)-1 ? (size_t)-1 : p->n + p->tail;
    if (due > end)
        due = end;
    while (p->fed < due) {
        size_t n;
        if (p->fed < p->n) {
            n = (due < p->n ? due : p->n) - p->fed;
            rtcl_queue_audio(c, p->pcm + p->fed, n * 2);
        } else {
            n = due - p->fed < 1600 ? due - p->fed : 1600;
            rtcl_queue_audio(c, zeros, n * 2);
        }
        p->fed += n;
    }
}

bool rtcl_pace_done(const struct rtcl_pacer *p)
{
    return p->tail != (size_t)-1 && p->fed >= p->n + p->tail;
}

short *rtcl_load_pcm16(const char *prog, const char *path, int rate_hz, size_t *n_out)
{
    struct media_audio_params p = media_audio_default_params();
    p.sample_rate_hz = rate_hz;
    float *f = NULL;
    size_t n = 0;
    char err[256];
    if (media_audio_decode_file(path, &p, &f, &n, err, sizeof err) < 0) {
        fprintf(stderr, "%s: %s\n", prog, err);
        return NULL;
    }
    short *pcm = malloc(sizeof *pcm * (n ? n : 1));
    if (!pcm) {
        free(f);
        fprintf(stderr, "%s: out of memory\n", prog);
        return NULL;
    }
    for (size_t i = 0; i < n; i++) {
        float v = f[i] * 32767.0f;
        pcm[i] = (short)(v > 32767.0f ? 32767 : v < -32768.0f ? -32768 : v);
    }
    free(f);
    *n_out = n;
    return pcm;
}

unsigned char *rtcl_b64_decode(const char *s, size_t *len)
{
    size_t n = strlen(s);
    unsigned char *out = malloc(n / 4 * 3 + 4);
    if (!out)
        return NULL;
    int got = lws_b64_decode_string_len(s, (int)n, (char *)out, (int)(n / 4 * 3 + 4));
    if (got < 0) {
        free(out);
        return NULL;
    }
    *len = (size_t)got;
    return out;
}

static void rtcl_le32(unsigned char *p, unsigned v)
{
    p[0] = v & 0xFF, p[1] = (v >> 8) & 0xFF, p[2] = (v >> 16) & 0xFF, p[3] = v >> 24;
}

int rtcl_write_wav(const char *prog, const char *path, const short *pcm, size_t n, int rate_hz)
{
    unsigned char h[44];
    unsigned bytes = (unsigned)(n * 2);
    memcpy(h, "RIFF", 4), rtcl_le32(h + 4, 36 + bytes), memcpy(h + 8, "WAVEfmt ", 8);
    rtcl_le32(h + 16, 16);
    h[20] = 1, h[21] = 0, h[22] = 1, h[23] = 0;             /* PCM, mono */
    rtcl_le32(h + 24, (unsigned)rate_hz), rtcl_le32(h + 28, (unsigned)rate_hz * 2);
    h[32] = 2, h[33] = 0, h[34] = 16, h[35] = 0;            /* block align, bits */
    memcpy(h + 36, "data", 4), rtcl_le32(h + 40, bytes);
    FILE *f = fopen(path, "wb");
    bool ok = f && fwrite(h, 1, sizeof h, f) == sizeof h;
    for (size_t i = 0; ok && i < n; i++) {   /* little-endian whatever the host */
        unsigned char s[2] = { (unsigned char)(pcm[i] & 0xFF), (unsigned char)((unsigned short)pcm[i] >> 8) };
        ok = fwrite(s, 1, 2, f) == 2;
    }
    if (f && fclose(f) != 0)
        ok = false;
    if (!ok)
        fprintf(stderr, "%s: cannot write %s\n", prog, path);
    return ok ? 0 : -1;
}
