/* bench_voice.c - `omniserve bench-voice`: voice-agent latency end to end.
 * Starts `omniserve serve` as a child process on a free loopback port with
 * the given chat, speech and VAD models, talks to it over the Realtime
 * WebSocket as a client would (the file at real-time speed, --turns times,
 * silence between, each turn waiting for its reply) and measures per turn
 * the end of the user's speech (the last sample above the file's speech
 * level, at the moment real time reaches it) -> first response.output_audio
 * .delta, and speech_stopped's arrival -> the same delta. Then
 * /v1/audio/speech: time to first audio byte of a one-sentence input and the
 * synthesizer's real-time factor on a paragraph. --load N keeps N streaming
 * /v1/chat/completions running (restarted as they finish) the whole time.
 *
 * Threads: main runs the lws client (the Realtime session) and then the
 * speech requests; each load stream has its own thread (libcurl easy). */
#include "src/cli/cli.h"
#include "src/cli/args.h"
#include "src/cli/bench_util.h"

#include "media/audio.h"
#include "src/core/omni.h"

#include <arpa/inet.h>
#include <cjson/cJSON.h>
#include <curl/curl.h>
#include <fcntl.h>
#include <libwebsockets.h>
#include <math.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#define BV_RATE_HZ 24000
#define BV_TICK_MS 20
#define BV_TURN_TIMEOUT_S 120
#define BV_SENTENCE "The quick brown fox jumps over the lazy dog near the river bank."
#define BV_PARAGRAPH                                                                        \
    "The quick brown fox jumps over the lazy dog near the river bank. It was a warm "     \
    "evening, and the birds were singing in the tall trees. Nobody in the village had "   \
    "ever seen a fox move so fast. The children laughed and ran after it until the sun " \
    "went down."
#define BV_LOAD_PROMPT "Tell me a very long story about a dragon who lives in a castle."

struct bv_opts {
    const char *chat, *stt, *vad, *voice, *file, *server_log;
    int turns, load, max_tokens, load_tokens, threads, stt_threads, speech_reps;
    double gap_s;
    double end_db;               /* speech ends where frames fall this far below the loudest */
    bool json, paired;
};

// ---- the server ---------------------------------------------------------------------

static int bv_free_port(void)
{
    int s = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
    socklen_t len = sizeof a;
    int port = -1;
    if (s >= 0 && !bind(s, (struct sockaddr *)&a, sizeof a) &&
        !getsockname(s, (struct sockaddr *)&a, &len))
        port = ntohs(a.sin_port);
    if (s >= 0)
        close(s);
    return port;
}

/* `serve` from this very binary, its output into log. */
static pid_t bv_serve(const struct bv_opts *o, int port, const char *log)
{
    char sport[16], sthreads[16], ssthreads[16];
    snprintf(sport, sizeof sport, "%d", port);
    snprintf(sthreads, sizeof sthreads, "%d", o->threads);
    snprintf(ssthreads, sizeof ssthreads, "%d", o->stt_threads);
    const char *argv[24];
    int n = 0;
    argv[n++] = "omniserve", argv[n++] = "serve", argv[n++] = "--host", argv[n++] = "127.0.0.1";
    argv[n++] = "--port", argv[n++] = sport, argv[n++] = "-m", argv[n++] = o->chat;
    argv[n++] = "--stt-model", argv[n++] = o->stt, argv[n++] = "--vad-model", argv[n++] = o->vad;
    if (o->threads > 0)
        argv[n++] = "--threads", argv[n++] = sthreads;
    if (o->stt_threads > 0)
        argv[n++] = "--stt-threads", argv[n++] = ssthreads;
    argv[n] = NULL;
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        int in = open("/dev/null", O_RDONLY);
        if (fd >= 0)
            dup2(fd, 1), dup2(fd, 2);
        if (in >= 0)
            dup2(in, 0);
        execv("/proc/self/exe", (char *const *)argv);
        _exit(127);
    }
    return pid;
}

static size_t bv_discard(char *d, size_t s, size_t n, void *u)
{
    (void)d, (void)u;
    return s * n;
}

/* A request to this server's path: GET, or a JSON POST when hdrs (the
 * Content-Type list) and body are given; the body goes to fn(data). */
static CURL *bv_easy(int port, const char *path, struct curl_slist *hdrs, const char *body,
                     size_t (*fn)(char *, size_t, size_t, void *), void *data)
{
    char url[128];
    snprintf(url, sizeof url, "http://127.0.0.1:%d%s", port, path);
    CURL *h = curl_easy_init();
    if (!h)
        return NULL;
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_NOPROXY, "*");
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    if (hdrs && body) {
        curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdrs);
        curl_easy_setopt(h, CURLOPT_POSTFIELDS, body);
    }
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, fn);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, data);
    return h;
}

/* Polls /health until 200 (the models are loaded) or the child exits. */
static int bv_wait_ready(pid_t pid, int port)
{
    CURL *h = bv_easy(port, "/health", NULL, NULL, bv_discard, NULL);
    if (!h)
        return -1;
    curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, 2000L);
    int rc = -1;
    for (int i = 0; i < 1200; i++) {
        long status = 0;
        if (curl_easy_perform(h) == CURLE_OK &&
            !curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status) && status == 200) {
            rc = 0;
            break;
        }
        if (waitpid(pid, NULL, WNOHANG) == pid)
            break;
        usleep(100 * 1000);
    }
    curl_easy_cleanup(h);
    return rc;
}

// ---- load: streaming chat completions -------------------------------------------------

struct bv_load {
    int port, max_tokens;
    atomic_bool stop;
    atomic_long chunks, streams, errors;
    atomic_int running;          /* streams that have had their first chunk */
    atomic_bool paused;          /* --paired: streams stop for the baseline turns */
    atomic_int epoch, warm;      /* resumed epoch; streams producing since then */
    int n;                       /* streams */
    pthread_mutex_t lock;
    char error[320];             /* {lock} the first failure: status and body */
};

struct bv_load_stream {
    struct bv_load *l;
    bool first;
    int epoch;
    char head[256];              /* the start of the body, for an error */
    size_t n_head;
};

static size_t bv_load_body(char *d, size_t s, size_t n, void *u)
{
    struct bv_load_stream *st = u;
    size_t len = s * n;
    size_t k = len < sizeof st->head - 1 - st->n_head ? len : sizeof st->head - 1 - st->n_head;
    memcpy(st->head + st->n_head, d, k);
    st->n_head += k;
    st->head[st->n_head] = 0;
    /* each SSE event is one "data: " line */
    long events = 0;
    for (size_t i = 0; i + 6 <= len; i++)
        events += !memcmp(d + i, "data: ", 6) && (i == 0 || d[i - 1] == '\n');
    atomic_fetch_add(&st->l->chunks, events);
    if (!st->first && events) {
        st->first = true;
        atomic_fetch_add(&st->l->running, 1);
    }
    if (events && st->epoch != atomic_load(&st->l->epoch)) {
        st->epoch = atomic_load(&st->l->epoch);
        atomic_fetch_add(&st->l->warm, 1);
    }
    return atomic_load(&st->l->stop) || atomic_load(&st->l->paused) ? 0 : len;
}

static int bv_load_progress(void *u, curl_off_t a, curl_off_t b, curl_off_t c, curl_off_t d)
{
    (void)a, (void)b, (void)c, (void)d;
    struct bv_load *l = ((struct bv_load_stream *)u)->l;
    return atomic_load(&l->stop) || atomic_load(&l->paused);
}

static void *bv_load_thread(void *arg)
{
    struct bv_load *l = arg;
    char body[512];
    snprintf(body, sizeof body,
             "{\"model\":\"m\",\"stream\":true,\"max_tokens\":%d,\"temperature\":0.8,"
             "\"messages\":[{\"role\":\"user\",\"content\":\"" BV_LOAD_PROMPT "\"}]}",
             l->max_tokens);
    struct curl_slist *hdrs = curl_slist_append(NULL, "Content-Type: application/json");
    struct bv_load_stream st = { .l = l };
    while (!atomic_load(&l->stop)) {
        if (atomic_load(&l->paused)) {
            usleep(10 * 1000);
            continue;
        }
        st.n_head = 0;
        CURL *h = bv_easy(l->port, "/v1/chat/completions", hdrs, body, bv_load_body, &st);
        if (!h)
            break;
        curl_easy_setopt(h, CURLOPT_NOPROGRESS, 0L);
        curl_easy_setopt(h, CURLOPT_XFERINFOFUNCTION, bv_load_progress);
        curl_easy_setopt(h, CURLOPT_XFERINFODATA, &st);
        CURLcode cc = curl_easy_perform(h);
        long status = 0;
        curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
        if (!atomic_load(&l->stop) && !atomic_load(&l->paused) && (cc != CURLE_OK || status != 200)) {
            pthread_mutex_lock(&l->lock);
            if (!l->error[0])
                snprintf(l->error, sizeof l->error, "%s, HTTP %ld: %s", curl_easy_strerror(cc), status,
                         st.head);
            pthread_mutex_unlock(&l->lock);
            atomic_fetch_add(&l->errors, 1);
            usleep(100 * 1000);
        }
        atomic_fetch_add(&l->streams, 1);
        curl_easy_cleanup(h);
    }
    curl_slist_free_all(hdrs);
    return NULL;
}

/* --paired: the load stops for a baseline turn and resumes for a loaded one. */
static void bv_load_set(struct bv_load *l, bool on)
{
    if (on && atomic_load(&l->paused)) {
        atomic_store(&l->warm, 0);
        atomic_fetch_add(&l->epoch, 1);
        atomic_store(&l->paused, false);
    } else if (!on) {
        atomic_store(&l->paused, true);
    }
}

/* Every stream produces again (or no load is wanted). */
static bool bv_load_ready(struct bv_load *l)
{
    return atomic_load(&l->paused) || atomic_load(&l->warm) >= l->n;
}

// ---- the Realtime session --------------------------------------------------------------

struct bv_msg {
    struct bv_msg *next;
    size_t len;
    char text[];
};

/* One turn: the file, then silence until the reply is done, then gap_s. */
struct bv_turn {
    double t_eos;                /* when real time reached the end of the speech */
    double t_stopped;            /* the last speech_stopped after t_eos */
    double t_transcript;         /* its transcript */
    double t_first;              /* first audio delta of the reply */
    char resp[96];               /* the reply (created after t_eos) */
    size_t audio_bytes;
    bool done;
    bool loaded;                 /* the chat streams ran during this turn */
};

struct bv_rt {
    const struct bv_opts *o;
    struct lws_context *ctx;
    struct lws *wsi;
    struct bv_msg *head, *tail;
    char *rx;
    size_t rx_len, rx_cap;
    lws_sorted_usec_list_t tick;
    /* the stream: samples since t0, the file starting at turn_at for the current turn */
    const short *pcm;
    size_t n_pcm, eos;
    double t0;
    size_t fed, turn_at, gap_until; /* turn_at: SIZE_MAX while the turn waits to start */
    bool streaming;
    struct bv_load *load;
    int turn;                    /* current turn; == turns: finished */
    struct bv_turn *t;
    bool finished, failed;
};

static void bv_send(struct bv_rt *r, char *text)   /* takes text (malloc'd) */
{
    if (!text)
        return;
    size_t n = strlen(text);
    struct bv_msg *m = malloc(sizeof *m + n + 1);
    if (m) {
        m->next = NULL;
        m->len = n;
        memcpy(m->text, text, n + 1);
        if (r->tail)
            r->tail->next = m;
        else
            r->head = m;
        r->tail = m;
        if (r->wsi)
            lws_callback_on_writable(r->wsi);
    }
    free(text);
}

static void bv_fail(struct bv_rt *r, const char *fmt, const char *arg)
{
    fprintf(stderr, "bench-voice: ");
    fprintf(stderr, fmt, arg);
    fputc('\n', stderr);
    r->failed = r->finished = true;
}

/* Every tick: the samples due since t0 (file or silence) as one append
 * event; turn bookkeeping. */
static void bv_tick(lws_sorted_usec_list_t *sul)
{
    struct bv_rt *r = lws_container_of(sul, struct bv_rt, tick);
    double now = omni_time_s();
    size_t due = (size_t)((now - r->t0) * BV_RATE_HZ);
    /* a turn starts after half a second of silence and once the load is
     * where this turn wants it */
    if (r->streaming && r->turn < r->o->turns && r->turn_at == SIZE_MAX && r->fed >= BV_RATE_HZ / 2 &&
        bv_load_ready(r->load)) {
        r->turn_at = r->fed;
        r->t[r->turn].loaded = r->o->load > 0 && !atomic_load(&r->load->paused);
    }
    if (r->streaming && due > r->fed) {
        size_t n = due - r->fed;
        short *buf = calloc(n, sizeof *buf);
        if (!buf)
            return;
        for (size_t i = 0; i < n; i++) {
            size_t at = r->fed + i;
            if (r->turn_at != SIZE_MAX && at >= r->turn_at && at - r->turn_at < r->n_pcm)
                buf[i] = r->pcm[at - r->turn_at];
        }
        struct bv_turn *t = r->turn < r->o->turns ? &r->t[r->turn] : NULL;
        if (t && !t->t_eos && r->turn_at != SIZE_MAX && r->fed + n > r->turn_at + r->eos)
            t->t_eos = r->t0 + (double)(r->turn_at + r->eos) / BV_RATE_HZ;
        r->fed += n;
        uint8_t *le = malloc(n * 2);
        for (size_t i = 0; le && i < n; i++)
            le[2 * i] = (uint8_t)(buf[i] & 0xFF), le[2 * i + 1] = (uint8_t)((uint16_t)buf[i] >> 8);
        size_t b64 = (n * 2 + 2) / 3 * 4 + 8;
        char *ev = le ? malloc(b64 + 64) : NULL;
        if (ev) {
            int k = sprintf(ev, "{\"type\":\"input_audio_buffer.append\",\"audio\":\"");
            int m = lws_b64_encode_string((const char *)le, (int)(n * 2), ev + k, (int)b64);
            if (m >= 0) {
                strcpy(ev + k + m, "\"}");
                bv_send(r, ev);
                ev = NULL;
            }
        }
        free(ev);
        free(le);
        free(buf);
        /* the turn's reply is done and the gap is over: the next turn */
        if (t && t->done && r->fed >= r->gap_until) {
            r->turn++;
            r->turn_at = SIZE_MAX;
            if (r->turn == r->o->turns)
                r->finished = true;
            else if (r->o->paired)
                bv_load_set(r->load, r->turn % 2 == 1);
        } else if (t && t->t_eos && now - t->t_eos > BV_TURN_TIMEOUT_S) {
            char n_s[16];
            snprintf(n_s, sizeof n_s, "%d", r->turn + 1);
            bv_fail(r, "turn %s: no reply within 120 s", n_s);
        }
    }
    lws_sul_schedule(r->ctx, 0, &r->tick, bv_tick, BV_TICK_MS * LWS_US_PER_MS);
}

static const char *bv_str(const cJSON *o, const char *k)
{
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsString(x) ? x->valuestring : "";
}

/* Whether the turn's audio has started; its end-of-speech instant comes
 * from the schedule, so a server that ends the turn before the bench's end
 * of speech (its VAD stopping during a final fricative) still has its
 * events counted, with a negative latency. */
static bool bv_turn_on(struct bv_rt *r, struct bv_turn *t)
{
    if (!t || r->turn_at == SIZE_MAX)
        return false;
    if (!t->t_eos)
        t->t_eos = r->t0 + (double)(r->turn_at + r->eos) / BV_RATE_HZ;
    return true;
}

static void bv_on_event(struct bv_rt *r, const cJSON *ev)
{
    const char *type = bv_str(ev, "type");
    double now = omni_time_s();
    struct bv_turn *t = r->turn < r->o->turns ? &r->t[r->turn] : NULL;
    if (!strcmp(type, "session.created") || !strcmp(type, "transcription_session.created")) {
        const char *st = bv_str(cJSON_GetObjectItemCaseSensitive(ev, "session"), "type");
        if (strcmp(st, "realtime")) {
            bv_fail(r, "the server opened a '%s' session, not a conversation", *st ? st : "transcription");
            return;
        }
        cJSON *u = cJSON_CreateObject();
        cJSON_AddStringToObject(u, "type", "session.update");
        cJSON *s = cJSON_AddObjectToObject(u, "session");
        cJSON_AddStringToObject(s, "type", "realtime");
        cJSON_AddItemToArray(cJSON_AddArrayToObject(s, "output_modalities"), cJSON_CreateString("audio"));
        if (r->o->voice)
            cJSON_AddStringToObject(cJSON_AddObjectToObject(cJSON_AddObjectToObject(s, "audio"), "output"),
                                    "voice", r->o->voice);
        cJSON_AddNumberToObject(s, "max_output_tokens", r->o->max_tokens);
        bv_send(r, cJSON_PrintUnformatted(u));
        cJSON_Delete(u);
    } else if (!strcmp(type, "session.updated")) {
        const cJSON *in = cJSON_GetObjectItemCaseSensitive(
            cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(ev, "session"), "audio"), "input");
        if (!cJSON_IsObject(cJSON_GetObjectItemCaseSensitive(in, "turn_detection"))) {
            bv_fail(r, "%s", "the session has no server VAD");
            return;
        }
        if (!r->streaming) {
            r->streaming = true;
            r->t0 = now;
            r->turn_at = SIZE_MAX;
            if (r->o->paired)
                bv_load_set(r->load, false);   /* turn 1 is a baseline */
        }
    } else if (!strcmp(type, "input_audio_buffer.speech_stopped")) {
        if (bv_turn_on(r, t) && !t->t_first)
            t->t_stopped = now;
    } else if (!strcmp(type, "conversation.item.input_audio_transcription.completed")) {
        if (bv_turn_on(r, t) && !t->t_first)
            t->t_transcript = now;
    } else if (!strcmp(type, "response.created")) {
        if (bv_turn_on(r, t) && !t->resp[0])
            snprintf(t->resp, sizeof t->resp, "%s",
                     bv_str(cJSON_GetObjectItemCaseSensitive(ev, "response"), "id"));
    } else if (!strcmp(type, "response.output_audio.delta")) {
        if (t && t->resp[0] && !strcmp(bv_str(ev, "response_id"), t->resp)) {
            if (!t->t_first)
                t->t_first = now;
            t->audio_bytes += strlen(bv_str(ev, "delta")) / 4 * 3;
        }
    } else if (!strcmp(type, "response.done")) {
        const cJSON *resp = cJSON_GetObjectItemCaseSensitive(ev, "response");
        if (t && t->resp[0] && !strcmp(bv_str(resp, "id"), t->resp) && !t->done) {
            t->done = true;
            r->gap_until = r->fed + (size_t)(r->o->gap_s * BV_RATE_HZ);
            if (!t->t_first) {
                bv_fail(r, "a reply without audio (status %s)", bv_str(resp, "status"));
                return;
            }
            fprintf(stderr, "bench-voice: turn %d/%d: first audio %.0f ms after the end of speech, "
                            "%.0f ms after speech_stopped (transcript at +%.0f ms); reply %.1f s of audio\n",
                    r->turn + 1, r->o->turns, (t->t_first - t->t_eos) * 1000,
                    t->t_stopped ? (t->t_first - t->t_stopped) * 1000 : NAN,
                    t->t_stopped && t->t_transcript ? (t->t_transcript - t->t_stopped) * 1000 : NAN,
                    (double)t->audio_bytes / 2 / BV_RATE_HZ);
        }
    } else if (!strcmp(type, "error")) {
        fprintf(stderr, "bench-voice: server error: %s\n",
                bv_str(cJSON_GetObjectItemCaseSensitive(ev, "error"), "message"));
    }
}

static int bv_callback(struct lws *wsi, enum lws_callback_reasons reason, void *user, void *in,
                       size_t len)
{
    (void)user;
    struct lws_context *ctx = lws_get_context(wsi);
    struct bv_rt *r = ctx ? lws_context_user(ctx) : NULL;
    if (!r)
        return 0;
    switch (reason) {
    case LWS_CALLBACK_CLIENT_CONNECTION_ERROR:
        bv_fail(r, "cannot open the Realtime WebSocket: %s", in ? (const char *)in : "refused");
        r->wsi = NULL;
        break;
    case LWS_CALLBACK_CLIENT_ESTABLISHED:
        r->wsi = wsi;
        break;
    case LWS_CALLBACK_CLIENT_RECEIVE:
        if (r->rx_len + len + 1 > r->rx_cap) {
            size_t cap = (r->rx_len + len + 1) * 2;
            char *p = realloc(r->rx, cap);
            if (!p)
                return -1;
            r->rx = p;
            r->rx_cap = cap;
        }
        memcpy(r->rx + r->rx_len, in, len);
        r->rx_len += len;
        if (lws_is_final_fragment(wsi) && !lws_remaining_packet_payload(wsi)) {
            cJSON *ev = cJSON_ParseWithLength(r->rx, r->rx_len);
            r->rx_len = 0;
            if (ev)
                bv_on_event(r, ev);
            cJSON_Delete(ev);
        }
        break;
    case LWS_CALLBACK_CLIENT_WRITEABLE: {
        if (r->finished || !r->head)
            return r->finished ? -1 : 0;
        struct bv_msg *m = r->head;
        if (!(r->head = m->next))
            r->tail = NULL;
        unsigned char *buf = malloc(LWS_PRE + m->len);
        int w = buf ? (memcpy(buf + LWS_PRE, m->text, m->len),
                       lws_write(wsi, buf + LWS_PRE, m->len, LWS_WRITE_TEXT)) : -1;
        free(buf);
        free(m);
        if (r->head)
            lws_callback_on_writable(wsi);
        return w < 0 ? -1 : 0;
    }
    case LWS_CALLBACK_CLIENT_CLOSED:
        r->wsi = NULL;
        if (!r->finished)
            bv_fail(r, "%s", "the server closed the Realtime connection");
        break;
    default:
        break;
    }
    return 0;
}

/* The turns over one Realtime session; 0 when all were answered. */
static int bv_session(struct bv_rt *r, int port)
{
    static const struct lws_protocols protocols[] = {
        { .name = "bench-voice", .callback = bv_callback },
        { .name = NULL },
    };
    struct lws_context_creation_info info;
    memset(&info, 0, sizeof info);
    info.port = CONTEXT_PORT_NO_LISTEN;
    info.protocols = protocols;
    info.user = r;
    lws_set_log_level(LLL_ERR, NULL);
    if (!(r->ctx = lws_create_context(&info))) {
        fprintf(stderr, "bench-voice: cannot create the lws context\n");
        return -1;
    }
    struct lws_client_connect_info ci;
    memset(&ci, 0, sizeof ci);
    ci.context = r->ctx;
    ci.address = ci.host = ci.origin = "127.0.0.1";
    ci.port = port;
    ci.path = "/v1/realtime";
    ci.local_protocol_name = protocols[0].name;
    if (!lws_client_connect_via_info(&ci))
        bv_fail(r, "%s", "cannot connect to the server");
    lws_sul_schedule(r->ctx, 0, &r->tick, bv_tick, BV_TICK_MS * LWS_US_PER_MS);
    while (!r->finished && lws_service(r->ctx, 0) >= 0)
        ;
    lws_sul_cancel(&r->tick);
    lws_context_destroy(r->ctx);
    while (r->head) {
        struct bv_msg *m = r->head;
        r->head = m->next;
        free(m);
    }
    free(r->rx);
    return r->failed ? -1 : 0;
}

// ---- /v1/audio/speech ------------------------------------------------------------------

struct bv_speech {
    double t0, t_first;
    size_t bytes;
};

static size_t bv_speech_body(char *d, size_t s, size_t n, void *u)
{
    (void)d;
    struct bv_speech *sp = u;
    if (!sp->bytes && s * n > 0)
        sp->t_first = omni_time_s();
    sp->bytes += s * n;
    return s * n;
}

/* One request (pcm, streamed as made): seconds to the first audio byte and
 * in all, and the audio's length. -1 on failure. */
static int bv_speak(int port, const char *voice, const char *text, double *ttfb, double *total,
                    double *audio_s)
{
    cJSON *b = cJSON_CreateObject();
    cJSON_AddStringToObject(b, "model", "tts-1");
    cJSON_AddStringToObject(b, "input", text);
    cJSON_AddStringToObject(b, "voice", voice ? voice : "alloy");
    cJSON_AddStringToObject(b, "response_format", "pcm");
    char *body = cJSON_PrintUnformatted(b);
    cJSON_Delete(b);
    struct curl_slist *hdrs = curl_slist_append(NULL, "Content-Type: application/json");
    struct bv_speech sp = { 0 };
    CURL *h = body && hdrs ? bv_easy(port, "/v1/audio/speech", hdrs, body, bv_speech_body, &sp) : NULL;
    int rc = -1;
    if (h) {
        curl_easy_setopt(h, CURLOPT_TIMEOUT, 60L);
        sp.t0 = omni_time_s();
        CURLcode cc = curl_easy_perform(h);
        double t_end = omni_time_s();
        long status = 0;
        curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
        if (cc == CURLE_OK && status == 200 && sp.bytes > 0) {
            *ttfb = sp.t_first - sp.t0;
            *total = t_end - sp.t0;
            *audio_s = (double)sp.bytes / 2 / BV_RATE_HZ;
            rc = 0;
        } else {
            fprintf(stderr, "bench-voice: /v1/audio/speech: %s, HTTP %ld\n", curl_easy_strerror(cc), status);
        }
    }
    curl_slist_free_all(hdrs);
    curl_easy_cleanup(h);
    free(body);
    return rc;
}

// ---- options, report -------------------------------------------------------------------

static void bv_usage(FILE *f)
{
    fprintf(f,
            "usage: omniserve bench-voice -m CHAT.gguf --stt-model W.bin --vad-model V.bin --file SPEECH\n"
            "                             [options]\n"
            "Starts `serve` with these models on a free 127.0.0.1 port and talks to its voice agent\n"
            "over the Realtime WebSocket: SPEECH at real-time speed, --turns times, each turn\n"
            "waiting for its spoken reply. Per turn: end of speech -> first audio delta.\n"
            "  --voice V          the agent's voice (default: the server's)\n"
            "  --turns N          turns (default 5)\n"
            "  --gap S            silence after each reply before the next turn (default 1)\n"
            "  --end-db D         the speech ends after the last 20 ms frame within D dB of the\n"
            "                     loudest (default 40: unvoiced consonants such as a final\n"
            "                     's' sit 20-25 dB below the vowels and are speech)\n"
            "  --max-tokens N     reply length cap (default 32)\n"
            "  --load N           N streaming /v1/chat/completions running meanwhile (default 0)\n"
            "  --paired           with --load: odd turns without the load (stopped), even turns\n"
            "                     with it, so that drift on a shared machine hits both; reports both\n"
            "  --load-tokens N    max_tokens of each load stream (default 512, restarted when done;\n"
            "                     prompt + N must fit the model's context)\n"
            "  --speech-reps N    /v1/audio/speech requests for time to first byte (default 20)\n"
            "  --threads N        serve --threads (default: serve's)\n"
            "  --stt-threads N    serve --stt-threads (default: serve's)\n"
            "  --server-log FILE  keep the server's log there (default: a temporary file,\n"
            "                     removed after a successful run)\n"
            "  --json             one JSON object on stdout\n");
}

static int bv_parse(int argc, char **argv, struct bv_opts *o)
{
    *o = (struct bv_opts){ .turns = 5, .max_tokens = 32, .load_tokens = 512, .speech_reps = 20,
                           .gap_s = 1.0, .end_db = 40.0 };
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        long v;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            bv_usage(stdout);
            return 1;
        }
        if (!strcmp(a, "--json") || !strcmp(a, "--paired")) {
            *(!strcmp(a, "--json") ? &o->json : &o->paired) = true;
            continue;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "bench-voice: %s needs a value\n", a);
            return -1;
        }
        const char *s = argv[++i];
        if (!strcmp(a, "-m") || !strcmp(a, "--model"))
            o->chat = s;
        else if (!strcmp(a, "--stt-model"))
            o->stt = s;
        else if (!strcmp(a, "--vad-model"))
            o->vad = s;
        else if (!strcmp(a, "--voice"))
            o->voice = s;
        else if (!strcmp(a, "--file"))
            o->file = s;
        else if (!strcmp(a, "--server-log"))
            o->server_log = s;
        else if (!strcmp(a, "--end-db")) {
            if (cli_double("bench-voice", a, s, 6, 90, &o->end_db))
                return -1;
        } else if (!strcmp(a, "--gap")) {
            if (cli_double("bench-voice", a, s, 0.2, 60, &o->gap_s))
                return -1;
        } else {
            int *dst = !strcmp(a, "--turns") ? &o->turns : !strcmp(a, "--load") ? &o->load
                     : !strcmp(a, "--max-tokens") ? &o->max_tokens : !strcmp(a, "--load-tokens") ? &o->load_tokens
                     : !strcmp(a, "--speech-reps") ? &o->speech_reps : !strcmp(a, "--threads") ? &o->threads
                     : !strcmp(a, "--stt-threads") ? &o->stt_threads : NULL;
            if (!dst) {
                fprintf(stderr, "bench-voice: unknown option '%s'\n", a);
                bv_usage(stderr);
                return -1;
            }
            long lo = dst == &o->load ? 0 : 1, hi = dst == &o->max_tokens || dst == &o->load_tokens ? 4096 : 1000;
            if (cli_long("bench-voice", a, s, lo, hi, &v))
                return -1;
            *dst = (int)v;
        }
    }
    if (o->paired && (!o->load || o->turns < 2)) {
        fprintf(stderr, "bench-voice: --paired needs --load N and at least 2 turns\n");
        return -1;
    }
    if (!o->chat || !o->stt || !o->vad || !o->file) {
        fprintf(stderr, "bench-voice: -m, --stt-model, --vad-model and --file are required\n");
        bv_usage(stderr);
        return -1;
    }
    return 0;
}

/* The last sample of speech in the file: the end of the last 20 ms frame
 * whose RMS is within end_db of the loudest frame's. 40 dB by default: the
 * final 's' of "lights" in the shared espeak clip is 20-24 dB below its
 * vowels for 160 ms (a 20 dB rule put the end before it), and the file's
 * silence after it is digital zero. */
static size_t bv_speech_end(const short *pcm, size_t n, double end_db)
{
    const double floor_ratio = pow(10.0, -end_db / 20.0);
    size_t frame = BV_RATE_HZ / 50, end = 0;
    double peak = 0;
    for (int pass = 0; pass < 2; pass++)
        for (size_t at = 0; at + frame <= n; at += frame) {
            double e = 0;
            for (size_t i = at; i < at + frame; i++)
                e += (double)pcm[i] * pcm[i];
            e = sqrt(e / (double)frame);
            if (pass == 0 && e > peak)
                peak = e;
            else if (pass == 1 && e > peak * floor_ratio)
                end = at + frame;
        }
    return end ? end : n;
}

struct bv_stat {
    double median, p95, min, max;
};

static struct bv_stat bv_stat(double *v, int n)
{
    if (n <= 0)
        return (struct bv_stat){ NAN, NAN, NAN, NAN };
    bench_sort(v, n);
    int k95 = (int)ceil(0.95 * n) - 1;
    return (struct bv_stat){ bench_median(v, n), v[k95 < 0 ? 0 : k95], v[0], v[n - 1] };
}

static void bv_json_stat(cJSON *o, const char *name, struct bv_stat s)
{
    cJSON *x = cJSON_AddObjectToObject(o, name);
    cJSON_AddNumberToObject(x, "median", round(s.median * 10) / 10);
    cJSON_AddNumberToObject(x, "p95", round(s.p95 * 10) / 10);
    cJSON_AddNumberToObject(x, "min", round(s.min * 10) / 10);
    cJSON_AddNumberToObject(x, "max", round(s.max * 10) / 10);
}

/* The turns' latencies: want -1 all, 0 those without the load, 1 those with it. */
struct bv_turn_stats {
    int n;
    struct bv_stat eos, stop, stt, reply;   /* stt: speech_stopped -> transcript; reply: -> audio */
};

static struct bv_turn_stats bv_turn_stats(const struct bv_turn *t, int n, int want, double *scratch)
{
    double *eos = scratch, *stop = scratch + n, *stt = scratch + 2 * n, *reply = scratch + 3 * n;
    int k = 0, n_stop = 0, n_tr = 0;
    for (int i = 0; i < n; i++) {
        if (want >= 0 && t[i].loaded != (want == 1))
            continue;
        eos[k++] = (t[i].t_first - t[i].t_eos) * 1000;
        if (t[i].t_stopped)
            stop[n_stop++] = (t[i].t_first - t[i].t_stopped) * 1000;
        if (t[i].t_stopped && t[i].t_transcript) {
            stt[n_tr] = (t[i].t_transcript - t[i].t_stopped) * 1000;
            reply[n_tr++] = (t[i].t_first - t[i].t_transcript) * 1000;
        }
    }
    return (struct bv_turn_stats){ k, bv_stat(eos, k), bv_stat(stop, n_stop), bv_stat(stt, n_tr),
                                   bv_stat(reply, n_tr) };
}

static void bv_print_turns(const char *what, const struct bv_turn_stats *s, int load)
{
    fprintf(stderr,
            "bench-voice: %s%send of speech -> first audio: median %.0f ms, p95 %.0f ms (%d turns, load %d)\n"
            "bench-voice: %s%sspeech_stopped -> first audio: median %.0f ms, p95 %.0f ms "
            "(-> transcript %.0f ms, transcript -> first audio %.0f ms, medians)\n",
            what ? what : "", what ? ": " : "", s->eos.median, s->eos.p95, s->n, load,
            what ? what : "", what ? ": " : "", s->stop.median, s->stop.p95, s->stt.median,
            s->reply.median);
}

static void bv_json_turns(cJSON *j, const struct bv_turn_stats *s)
{
    bv_json_stat(j, "eos_to_first_audio_ms", s->eos);
    bv_json_stat(j, "stopped_to_first_audio_ms", s->stop);
    bv_json_stat(j, "stopped_to_transcript_ms", s->stt);
    bv_json_stat(j, "transcript_to_first_audio_ms", s->reply);
}

int cli_bench_voice(int argc, char **argv)
{
    struct bv_opts o;
    int prc = bv_parse(argc, argv, &o);
    if (prc)
        return prc > 0 ? 0 : 2;
    struct media_audio_params ap = media_audio_default_params();
    ap.sample_rate_hz = BV_RATE_HZ;
    float *f = NULL;
    size_t n = 0;
    char err[256];
    if (media_audio_decode_file(o.file, &ap, &f, &n, err, sizeof err) < 0) {
        fprintf(stderr, "bench-voice: %s\n", err);
        return 1;
    }
    short *pcm = malloc((n ? n : 1) * sizeof *pcm);
    struct bv_turn *turns = calloc((size_t)o.turns, sizeof *turns);
    if (!pcm || !turns) {
        free(f), free(pcm), free(turns);
        fprintf(stderr, "bench-voice: out of memory\n");
        return 1;
    }
    for (size_t i = 0; i < n; i++)
        pcm[i] = (short)lrintf(fminf(fmaxf(f[i] * 32767.0f, -32768.0f), 32767.0f));
    free(f);
    size_t eos = bv_speech_end(pcm, n, o.end_db);

    int rc = 1;
    pid_t srv = -1;
    char tmp_log[] = "/tmp/omni-bench-voice-XXXXXX";
    int lfd = o.server_log ? 0 : mkstemp(tmp_log);
    if (lfd > 0)
        close(lfd);
    const char *log = o.server_log ? o.server_log : tmp_log;
    curl_global_init(CURL_GLOBAL_DEFAULT);
    int port = bv_free_port();
    struct bv_load load = { .port = port, .max_tokens = o.load_tokens, .n = o.load,
                            .lock = PTHREAD_MUTEX_INITIALIZER };
    pthread_t *th = o.load ? calloc((size_t)o.load, sizeof *th) : NULL;
    int n_th = 0;
    double *lat = calloc((size_t)o.turns * 4 + (size_t)o.speech_reps + 8, sizeof *lat);
    if (port < 0 || lfd < 0 || !lat || (o.load && !th)) {
        fprintf(stderr, "bench-voice: cannot set up (port, log file or memory)\n");
        goto out;
    }
    fprintf(stderr, "bench-voice: starting serve on 127.0.0.1:%d (log %s)\n", port, log);
    if ((srv = bv_serve(&o, port, log)) < 0 || bv_wait_ready(srv, port) < 0) {
        fprintf(stderr, "bench-voice: the server did not start; see %s\n", log);
        goto out;
    }

    /* the load first, each stream producing before the turns start */
    for (; n_th < o.load; n_th++)
        if (pthread_create(&th[n_th], NULL, bv_load_thread, &load))
            break;
    double t_load0 = omni_time_s();
    while (o.load && atomic_load(&load.running) < o.load && !atomic_load(&load.errors) &&
           omni_time_s() - t_load0 < 120)
        usleep(50 * 1000);
    if (atomic_load(&load.errors)) {
        pthread_mutex_lock(&load.lock);
        fprintf(stderr, "bench-voice: the load's chat requests fail (--load-tokens beyond the "
                        "model's context?): %s\n", load.error);
        pthread_mutex_unlock(&load.lock);
        goto out;
    }
    if (o.load)
        fprintf(stderr, "bench-voice: %d chat streams running\n", atomic_load(&load.running));
    long chunks0 = atomic_load(&load.chunks);
    double t_turns0 = omni_time_s();

    fprintf(stderr, "bench-voice: %d turns of %s (%.2f s, speech ends at %.2f s)\n", o.turns, o.file,
            (double)n / BV_RATE_HZ, (double)eos / BV_RATE_HZ);
    struct bv_rt r = { .o = &o, .pcm = pcm, .n_pcm = n, .eos = eos, .t = turns, .load = &load };
    if (bv_session(&r, port) < 0) {
        fprintf(stderr, "bench-voice: the voice session failed; server log: %s\n", log);
        goto out;
    }
    double load_s = omni_time_s() - t_turns0;
    if (o.paired)
        bv_load_set(&load, true);   /* /v1/audio/speech beside the load, as without --paired */
    long load_chunks = atomic_load(&load.chunks) - chunks0;

    /* /v1/audio/speech: first byte of one sentence, real-time factor of a paragraph */
    double *ttfb = lat + 4 * o.turns, total, audio_s, rtf[5];
    int n_ttfb = 0, n_rtf = 0;
    for (int i = 0; i < o.speech_reps; i++)
        if (bv_speak(port, o.voice, BV_SENTENCE, &ttfb[n_ttfb], &total, &audio_s) == 0)
            ttfb[n_ttfb++] *= 1000;
    for (int i = 0; i < 5; i++) {
        double t1;
        if (bv_speak(port, o.voice, BV_PARAGRAPH, &t1, &total, &audio_s) == 0 && audio_s > 0)
            rtf[n_rtf++] = total / audio_s;
    }
    if (!n_ttfb || !n_rtf)
        goto out;

    struct bv_turn_stats all = bv_turn_stats(turns, o.turns, o.paired ? 1 : -1, lat);
    struct bv_turn_stats base = bv_turn_stats(turns, o.turns, o.paired ? 0 : 2, lat);
    double reply_s = 0;
    for (int i = 0; i < o.turns; i++)
        reply_s += (double)turns[i].audio_bytes / 2 / BV_RATE_HZ;
    struct bv_stat s_ttfb = bv_stat(ttfb, n_ttfb);
    double tts_rtf = bench_median(rtf, n_rtf);
    bv_print_turns(o.paired ? "with the load" : NULL, &all, o.load);
    if (o.paired) {
        bv_print_turns("baseline (load stopped)", &base, 0);
        fprintf(stderr, "bench-voice: with the load / baseline, end of speech -> first audio medians: %.2fx\n",
                all.eos.median / base.eos.median);
    }
    fprintf(stderr,
            "bench-voice: /v1/audio/speech one sentence: first byte median %.1f ms, p95 %.1f ms (%d requests)\n"
            "bench-voice: TTS real-time factor %.3f (%.0fx real time)\n",
            s_ttfb.median, s_ttfb.p95, n_ttfb, tts_rtf, 1 / tts_rtf);
    if (o.load)
        fprintf(stderr, "bench-voice: load: %.1f chat chunks/s over the turns, %ld streams, %ld errors\n",
                (double)load_chunks / load_s, atomic_load(&load.streams), atomic_load(&load.errors));
    if (o.json) {
        cJSON *j = cJSON_CreateObject();
        cJSON_AddNumberToObject(j, "turns", all.n);
        bv_json_turns(j, &all);
        if (o.paired) {
            cJSON *b = cJSON_AddObjectToObject(j, "baseline");
            cJSON_AddNumberToObject(b, "turns", base.n);
            bv_json_turns(b, &base);
            cJSON_AddNumberToObject(j, "load_ratio", round(all.eos.median / base.eos.median * 100) / 100);
        }
        cJSON_AddNumberToObject(j, "tts_rtf", round(tts_rtf * 10000) / 10000);
        bv_json_stat(j, "speech_ttfb_ms", s_ttfb);
        cJSON_AddNumberToObject(j, "reply_audio_s", round(reply_s / o.turns * 100) / 100);
        cJSON_AddNumberToObject(j, "load", o.load);
        cJSON_AddNumberToObject(j, "load_chunks_per_s", round((double)load_chunks / load_s * 10) / 10);
        cJSON_AddNumberToObject(j, "load_errors", (double)atomic_load(&load.errors));
        cJSON_AddNumberToObject(j, "max_tokens", o.max_tokens);
        cJSON_AddNumberToObject(j, "speech_end_s", (double)eos / BV_RATE_HZ);
        cJSON_AddNumberToObject(j, "end_db", o.end_db);
        char *txt = cJSON_PrintUnformatted(j);
        if (txt)
            printf("%s\n", txt);
        free(txt);
        cJSON_Delete(j);
    }
    rc = 0;
out:
    atomic_store(&load.stop, true);
    for (int i = 0; i < n_th; i++)
        pthread_join(th[i], NULL);
    if (srv > 0) {
        kill(srv, SIGTERM);
        waitpid(srv, NULL, 0);
    }
    if (rc == 0 && !o.server_log && lfd >= 0)
        unlink(log);
    curl_global_cleanup();
    free(th);
    free(lat);
    free(turns);
    free(pcm);
    return rc;
}
