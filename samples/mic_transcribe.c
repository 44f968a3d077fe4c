/* mic_transcribe.c - live transcription from the default microphone (or a
 * file played at real-time speed) through omniserve's OpenAI Realtime
 * transcription WebSocket: PCM16 goes out as input_audio_buffer.append
 * events, partial hypotheses are redrawn in place on one line and each
 * turn's final transcript is printed below.
 *
 *   build/samples/mic_transcribe [--url ws://127.0.0.1:8000/v1/realtime?intent=transcription]
 *                                [--rate 16000|24000] [--file talk.wav]
 *   (MT_DEBUG=1 in the environment shows libwebsockets' own log)
 *
 * Threads: the lws service thread (main) owns the socket and everything in
 * struct mt_app not tagged {lock}; the portaudio callback only appends to the
 * queue under the lock and wakes the service thread with lws_cancel_service(). */
#include "media/audio.h"

#include <cjson/cJSON.h>
#include <libwebsockets.h>
#include <portaudio.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MT_DEFAULT_URL "ws://127.0.0.1:8000/v1/realtime?intent=transcription"
#define MT_SEND_MS 100          /* audio per append event */
#define MT_TAIL_MS 1000         /* silence after a file, so the server VAD ends the turn */
#define MT_MAX_QUEUE_S 10       /* a stalled connection drops older microphone audio */
#define MT_END_TIMEOUT_S 30     /* after a file: give up waiting for transcripts */

struct mt_app {
    /* settings */
    const char *file;
    int rate_hz;
    struct lws_context *ctx;
    struct lws *wsi;
    /* audio waiting to be sent, PCM16 mono at rate_hz */
    pthread_mutex_t lock;
    unsigned char *queue;       /* {lock} */
    size_t queue_len, queue_cap; /* {lock} */
    /* file mode: the whole file, paced out by a timer */
    short *pcm;
    size_t n_pcm, n_fed;
    lws_usec_t t_start;
    lws_sorted_usec_list_t pace;
    bool file_done;             /* everything, tail included, is queued */
    double t_end;               /* when file_done became true */
    PaStream *mic;
    /* protocol state */
    bool send_update, streaming, server_vad, commit_sent, commit_failed;
    int started, completed, committed;
    char *rx;                   /* message being reassembled */
    size_t rx_len, rx_cap;
    bool partial_shown;
    bool finished;              /* leave the service loop */
    int exit_code;
};

static volatile sig_atomic_t mt_interrupted;
static struct lws_context *mt_signal_ctx;

static void mt_on_signal(int sig)
{
    (void)sig;
    mt_interrupted = 1;
    if (mt_signal_ctx)
        lws_cancel_service(mt_signal_ctx);
}

static void mt_usage(FILE *f)
{
    fprintf(f,
            "usage: mic_transcribe [--url URL] [--rate HZ] [--file AUDIO]\n"
            "  --url URL     realtime endpoint (default %s)\n"
            "  --rate HZ     PCM16 sample rate sent: 16000 or 24000 (default 16000)\n"
            "  --file AUDIO  stream a file (any format ffmpeg reads) at real-time speed\n"
            "                instead of the microphone; exits after its last transcript\n",
            MT_DEFAULT_URL);
}

/* Append PCM16 bytes to the send queue (any thread). */
static void mt_enqueue(struct mt_app *a, const void *data, size_t len)
{
    size_t max = (size_t)a->rate_hz * 2 * MT_MAX_QUEUE_S;
    pthread_mutex_lock(&a->lock);
    if (a->queue_len + len > a->queue_cap) {
        size_t cap = a->queue_cap ? a->queue_cap : 65536;
        while (cap < a->queue_len + len)
            cap *= 2;
        unsigned char *q = realloc(a->queue, cap);
        if (!q) {
            pthread_mutex_unlock(&a->lock);
            return;   /* out of memory: this piece of audio is lost */
        }
        a->queue = q;
        a->queue_cap = cap;
    }
    memcpy(a->queue + a->queue_len, data, len);
    a->queue_len += len;
    if (a->queue_len > max) {   /* keep the newest audio: the live part matters */
        size_t drop = (a->queue_len - max + 1) & ~(size_t)1;
        memmove(a->queue, a->queue + drop, a->queue_len - drop);
        a->queue_len -= drop;
    }
    pthread_mutex_unlock(&a->lock);
}

static int mt_mic_callback(const void *in, void *out, unsigned long frames,
                           const PaStreamCallbackTimeInfo *ti, PaStreamCallbackFlags flags,
                           void *user)
{
    (void)out;
    (void)ti;
    (void)flags;
    struct mt_app *a = user;
    if (in) {
        mt_enqueue(a, in, frames * 2);
        lws_cancel_service(a->ctx);
    }
    return paContinue;
}

/* File mode: queue the samples due by now (real time since the start), then
 * the silent tail; every MT_SEND_MS. */
static void mt_pace(lws_sorted_usec_list_t *sul)
{
    struct mt_app *a = lws_container_of(sul, struct mt_app, pace);
    size_t tail = (size_t)a->rate_hz * MT_TAIL_MS / 1000;
    size_t due = (size_t)((double)(lws_now_usecs() - a->t_start) * a->rate_hz / 1e6);
    if (due > a->n_pcm + tail)
        due = a->n_pcm + tail;
    while (a->n_fed < due) {
        if (a->n_fed < a->n_pcm) {
            size_t n = (due < a->n_pcm ? due : a->n_pcm) - a->n_fed;
            mt_enqueue(a, a->pcm + a->n_fed, n * 2);
            a->n_fed += n;
        } else {
            static const short zeros[1600];
            size_t n = due - a->n_fed < 1600 ? due - a->n_fed : 1600;
            mt_enqueue(a, zeros, n * 2);
            a->n_fed += n;
        }
    }
    if (a->wsi)
        lws_callback_on_writable(a->wsi);
    if (a->n_fed >= a->n_pcm + tail && !a->file_done) {
        a->file_done = true;
        a->t_end = (double)lws_now_usecs() / 1e6;
    }
    /* Keeps ticking after the file: the service loop checks the end timeout. */
    lws_sul_schedule(a->ctx, 0, &a->pace, mt_pace, MT_SEND_MS * LWS_US_PER_MS);
}

/* Every turn we know of has its transcript: done with a file. */
static void mt_check_done(struct mt_app *a)
{
    if (!a->file || !a->file_done)
        return;
    pthread_mutex_lock(&a->lock);
    bool drained = a->queue_len == 0;
    pthread_mutex_unlock(&a->lock);
    if (!drained)
        return;
    if (a->server_vad ? a->completed >= a->started
                      : a->commit_sent && (a->commit_failed ||
                                           (a->committed > 0 && a->completed >= a->committed)))
        a->finished = true;
}

static int mt_send_text(struct lws *wsi, const char *text)
{
    size_t n = strlen(text);
    unsigned char *buf = malloc(LWS_PRE + n);
    if (!buf)
        return -1;
    memcpy(buf + LWS_PRE, text, n);
    int w = lws_write(wsi, buf + LWS_PRE, n, LWS_WRITE_TEXT);
    free(buf);
    return w < (int)n ? -1 : 0;
}

/* One event per WRITEABLE: the session update, else up to 200 ms of audio,
 * else (a file without server VAD, all sent) the commit. */
static int mt_on_writeable(struct mt_app *a, struct lws *wsi)
{
    char msg[256];
    if (a->send_update) {
        a->send_update = false;
        snprintf(msg, sizeof msg,
                 "{\"type\":\"transcription_session.update\",\"session\":{"
                 "\"input_audio_format\":\"pcm16\",\"input_audio_sample_rate\":%d}}",
                 a->rate_hz);
        return mt_send_text(wsi, msg);
    }
    if (!a->streaming)
        return 0;
    size_t max = (size_t)a->rate_hz * 2 / 5;
    unsigned char pcm[96000 * 2 / 5];
    pthread_mutex_lock(&a->lock);
    size_t n = a->queue_len < max ? a->queue_len : max;
    n &= ~(size_t)1;
    memcpy(pcm, a->queue, n);
    memmove(a->queue, a->queue + n, a->queue_len - n);
    a->queue_len -= n;
    bool more = a->queue_len > 0;
    pthread_mutex_unlock(&a->lock);
    if (n) {
        static const char head[] = "{\"type\":\"input_audio_buffer.append\",\"audio\":\"";
        size_t b64 = (n + 2) / 3 * 4 + 5;   /* lws wants room beyond the text and its NUL */
        char *ev = malloc(sizeof head + b64 + 2);
        if (!ev)
            return -1;
        memcpy(ev, head, sizeof head - 1);
        int len = lws_b64_encode_string((const char *)pcm, (int)n, ev + sizeof head - 1, (int)b64);
        if (len < 0) {
            free(ev);
            return -1;
        }
        strcpy(ev + sizeof head - 1 + len, "\"}");
        int rc = mt_send_text(wsi, ev);
        free(ev);
        if (more)
            lws_callback_on_writable(wsi);
        return rc;
    }
    if (a->file && a->file_done && !a->server_vad && !a->commit_sent) {
        a->commit_sent = true;
        return mt_send_text(wsi, "{\"type\":\"input_audio_buffer.commit\"}");
    }
    return 0;
}

/* Redraw the current line with a partial hypothesis, or end it with a final one. */
static void mt_show(struct mt_app *a, const char *text, bool final)
{
    printf("\r\033[K%s%s", text, final ? "\n" : "");
    fflush(stdout);
    a->partial_shown = !final;
}

static int mt_start_audio(struct mt_app *a)
{
    a->streaming = true;
    if (a->file) {
        a->t_start = lws_now_usecs();
        mt_pace(&a->pace);
        return 0;
    }
    PaError e = Pa_OpenDefaultStream(&a->mic, 1, 0, paInt16, a->rate_hz,
                                     (unsigned long)a->rate_hz / 50, mt_mic_callback, a);
    if (e == paNoError)
        e = Pa_StartStream(a->mic);
    if (e != paNoError) {
        fprintf(stderr, "mic_transcribe: microphone: %s\n", Pa_GetErrorText(e));
        return -1;
    }
    fprintf(stderr, "mic_transcribe: listening (%d Hz); Ctrl-C to stop\n", a->rate_hz);
    return 0;
}

static void mt_on_event(struct mt_app *a, const cJSON *ev)
{
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(ev, "type");
    const char *t = cJSON_IsString(type) ? type->valuestring : "";
    if (!strcmp(t, "transcription_session.created")) {
        a->send_update = true;
        lws_callback_on_writable(a->wsi);
    } else if (!strcmp(t, "transcription_session.updated")) {
        const cJSON *s = cJSON_GetObjectItemCaseSensitive(ev, "session");
        const cJSON *td = cJSON_GetObjectItemCaseSensitive(s, "turn_detection");
        a->server_vad = cJSON_IsObject(td);
        if (!a->streaming && mt_start_audio(a) < 0) {
            a->exit_code = 1;
            a->finished = true;
        }
    } else if (!strcmp(t, "input_audio_buffer.speech_started")) {
        a->started++;
    } else if (!strcmp(t, "input_audio_buffer.committed")) {
        a->committed++;
    } else if (!strcmp(t, "conversation.item.input_audio_transcription.delta")) {
        const cJSON *p = cJSON_GetObjectItemCaseSensitive(ev, "partial");
        if (cJSON_IsString(p) && *p->valuestring)
            mt_show(a, p->valuestring, false);
    } else if (!strcmp(t, "conversation.item.input_audio_transcription.completed")) {
        const cJSON *tr = cJSON_GetObjectItemCaseSensitive(ev, "transcript");
        mt_show(a, cJSON_IsString(tr) ? tr->valuestring : "", true);
        a->completed++;
    } else if (!strcmp(t, "error")) {
        const cJSON *e = cJSON_GetObjectItemCaseSensitive(ev, "error");
        const cJSON *code = cJSON_GetObjectItemCaseSensitive(e, "code");
        const cJSON *m = cJSON_GetObjectItemCaseSensitive(e, "message");
        /* A commit after the server VAD already ended the last turn finds
         * nothing to commit: nothing is missing. */
        if (cJSON_IsString(code) && !strcmp(code->valuestring, "input_audio_buffer_commit_empty")) {
            a->commit_failed = true;
        } else {
            if (a->partial_shown)
                mt_show(a, "", false);
            fprintf(stderr, "mic_transcribe: server error: %s\n",
                    cJSON_IsString(m) ? m->valuestring : "(no message)");
        }
    }
    mt_check_done(a);
}

static int mt_callback(struct lws *wsi, enum lws_callback_reasons reason, void *user, void *in,
                       size_t len)
{
    (void)user;
    struct lws_context *ctx = lws_get_context(wsi);
    struct mt_app *a = ctx ? lws_context_user(ctx) : NULL;
    if (!a)
        return 0;
    switch (reason) {
    case LWS_CALLBACK_CLIENT_CONNECTION_ERROR:
        fprintf(stderr, "mic_transcribe: cannot connect: %s\n", in ? (const char *)in : "refused");
        a->wsi = NULL;
        a->exit_code = 1;
        a->finished = true;
        break;
    case LWS_CALLBACK_CLIENT_ESTABLISHED:
        a->wsi = wsi;
        break;
    case LWS_CALLBACK_CLIENT_RECEIVE:
        if (a->rx_len + len + 1 > a->rx_cap) {
            size_t cap = (a->rx_len + len + 1) * 2;
            char *r = realloc(a->rx, cap);
            if (!r)
                return -1;
            a->rx = r;
            a->rx_cap = cap;
        }
        memcpy(a->rx + a->rx_len, in, len);
        a->rx_len += len;
        if (lws_is_final_fragment(wsi) && !lws_remaining_packet_payload(wsi)) {
            cJSON *ev = cJSON_ParseWithLength(a->rx, a->rx_len);
            a->rx_len = 0;
            if (ev)
                mt_on_event(a, ev);
            cJSON_Delete(ev);
        }
        break;
    case LWS_CALLBACK_CLIENT_WRITEABLE:
        if (a->finished)
            return -1;
        return mt_on_writeable(a, wsi);
    case LWS_CALLBACK_EVENT_WAIT_CANCELLED:
        if (a->wsi)
            lws_callback_on_writable(a->wsi);
        break;
    case LWS_CALLBACK_CLIENT_CLOSED:
        if (!a->finished) {
            fprintf(stderr, "mic_transcribe: the server closed the connection\n");
            a->exit_code = a->file ? 1 : 0;
        }
        a->wsi = NULL;
        a->finished = true;
        break;
    default:
        break;
    }
    return 0;
}

/* The file decoded at rate_hz and converted to PCM16. */
static int mt_load_file(struct mt_app *a)
{
    struct media_audio_params p = media_audio_default_params();
    p.sample_rate_hz = a->rate_hz;
    float *f = NULL;
    size_t n = 0;
    char err[256];
    if (media_audio_decode_file(a->file, &p, &f, &n, err, sizeof err) < 0) {
        fprintf(stderr, "mic_transcribe: %s\n", err);
        return -1;
    }
    a->pcm = malloc(sizeof *a->pcm * (n ? n : 1));
    if (!a->pcm) {
        free(f);
        fprintf(stderr, "mic_transcribe: out of memory\n");
        return -1;
    }
    for (size_t i = 0; i < n; i++) {
        float v = f[i] * 32767.0f;
        a->pcm[i] = (short)(v > 32767.0f ? 32767 : v < -32768.0f ? -32768 : v);
    }
    a->n_pcm = n;
    free(f);
    return 0;
}

int main(int argc, char **argv)
{
    static struct mt_app app = { .rate_hz = 16000, .lock = PTHREAD_MUTEX_INITIALIZER };
    struct mt_app *a = &app;
    const char *url = MT_DEFAULT_URL;
    for (int i = 1; i < argc; i++) {
        const char *o = argv[i];
        if (!strcmp(o, "-h") || !strcmp(o, "--help")) {
            mt_usage(stdout);
            return 0;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "mic_transcribe: %s needs a value\n", o);
            return 2;
        }
        if (!strcmp(o, "--url")) {
            url = argv[++i];
        } else if (!strcmp(o, "--file")) {
            a->file = argv[++i];
        } else if (!strcmp(o, "--rate")) {
            a->rate_hz = atoi(argv[++i]);
            if (a->rate_hz != 16000 && a->rate_hz != 24000) {
                fprintf(stderr, "mic_transcribe: --rate must be 16000 or 24000\n");
                return 2;
            }
        } else {
            fprintf(stderr, "mic_transcribe: unknown option '%s'\n", o);
            mt_usage(stderr);
            return 2;
        }
    }
    char ubuf[1024];
    const char *prot, *host, *path;
    int port;
    snprintf(ubuf, sizeof ubuf, "%s", url);
    if (lws_parse_uri(ubuf, &prot, &host, &port, &path) ||
        (strcmp(prot, "ws") && strcmp(prot, "wss"))) {
        fprintf(stderr, "mic_transcribe: --url %s: not a ws:// or wss:// URL\n", url);
        return 2;
    }
    char full_path[1024];
    snprintf(full_path, sizeof full_path, "/%s", path);   /* lws_parse_uri drops the '/' */
    if (a->file ? mt_load_file(a) < 0 : Pa_Initialize() != paNoError) {
        if (!a->file)
            fprintf(stderr, "mic_transcribe: portaudio does not start\n");
        return 1;
    }

    static const struct lws_protocols protocols[] = {
        { .name = "realtime-client", .callback = mt_callback },
        { .name = NULL },
    };
    struct lws_context_creation_info info;
    memset(&info, 0, sizeof info);
    info.port = CONTEXT_PORT_NO_LISTEN;
    info.protocols = protocols;
    info.user = a;
    if (!strcmp(prot, "wss"))
        info.options = LWS_SERVER_OPTION_DO_SSL_GLOBAL_INIT;
    lws_set_log_level(getenv("MT_DEBUG") ? LLL_ERR | LLL_WARN | LLL_NOTICE | LLL_INFO | LLL_CLIENT : LLL_ERR, NULL);
    a->ctx = lws_create_context(&info);
    if (!a->ctx) {
        fprintf(stderr, "mic_transcribe: cannot create the lws context\n");
        return 1;
    }
    mt_signal_ctx = a->ctx;
    signal(SIGINT, mt_on_signal);
    signal(SIGTERM, mt_on_signal);

    struct lws_client_connect_info ci;
    memset(&ci, 0, sizeof ci);
    ci.context = a->ctx;
    ci.address = host;
    ci.port = port;
    ci.path = full_path;
    ci.host = host;
    ci.origin = host;
    ci.ssl_connection = !strcmp(prot, "wss") ? LCCSCF_USE_SSL : 0;
    ci.local_protocol_name = protocols[0].name;
    if (!lws_client_connect_via_info(&ci)) {
        fprintf(stderr, "mic_transcribe: cannot connect to %s\n", url);
        a->exit_code = 1;
        a->finished = true;
    }
    while (!a->finished && !mt_interrupted) {
        if (lws_service(a->ctx, 0) < 0)
            break;
        mt_check_done(a);
        if (a->file_done && !a->finished &&
            (double)lws_now_usecs() / 1e6 - a->t_end > MT_END_TIMEOUT_S) {
            fprintf(stderr, "mic_transcribe: no transcript %d s after the end of the file\n",
                    MT_END_TIMEOUT_S);
            a->exit_code = 1;
            break;
        }
    }
    if (a->partial_shown)
        putchar('\n');
    if (a->mic) {
        Pa_StopStream(a->mic);
        Pa_CloseStream(a->mic);
    }
    if (!a->file)
        Pa_Terminate();
    lws_sul_cancel(&a->pace);
    lws_context_destroy(a->ctx);
    free(a->pcm);
    free(a->queue);
    free(a->rx);
    return a->exit_code;
}
