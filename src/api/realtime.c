/* realtime.c - the OpenAI Realtime transcription protocol on a WebSocket.
 * Client events arrive on a ws worker thread (the handler is offloaded:
 * base64 decoding, resampling and VAD of a 16 MB append must not stall the
 * server), one message of a connection at a time and in order, and drive
 * the connection's stt_session; session events (VAD turns inside the
 * message handler, transcripts on stt workers) become server events queued
 * on the socket, which is safe from any thread. on_close is queued behind
 * the messages (ws_socket.h); should it ever come while a message is still
 * being handled, the session is closed by whichever of the two ends last.
 * A connection lives until both the socket side and the session released
 * it (its last decode may still be running). */
#include "src/api/realtime.h"

#include "src/api/api.h"
#include "src/api/realtime_conv.h"
#include "src/api/rt_common.h"
#include "src/core/omni.h"
#include "src/stt/stt.h"
#include "src/stt/stt_session.h"
#include "ws/ws_socket.h"

#include <cjson/cJSON.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define RT_DEFAULT_RATE 24000   /* OpenAI's pcm16 */

struct rt_conn {
    struct stt *stt;
    struct rt_io io;               /* io.sock: our reference, dropped when the connection is freed;
                                      io.id: the session id, also in item ids */
    atomic_int refs;               /* the socket side + the session side */
    pthread_mutex_t lock;
    struct rt_gate gate;           /* {lock} who ends the socket side */
    /* the message handler (one message at a time; the upgrade before the
     * first): the session and the settings it was given */
    struct stt_session *ss;
    struct stt_session_params sp;
    char *model, *language, *prompt;
    int prefix_padding_ms;
    bool ga;                       /* last update was session.update (GA naming) */
    char err[256];                 /* the message of a refused update */
};

static void rt_unref(struct rt_conn *c)
{
    if (atomic_fetch_sub(&c->refs, 1) != 1)
        return;
    ws_sock_release(c->io.sock);
    pthread_mutex_destroy(&c->lock);
    free(c->model);
    free(c->language);
    free(c->prompt);
    free(c);
}

static void rt_item_id(const struct rt_conn *c, int item, char *buf, size_t cap)
{
    snprintf(buf, cap, "item_%s_%d", c->io.id, item);
}

// ---- session events (inside a message handler, or on an stt worker) ----------------------

static void rt_on_event(void *user, const struct stt_event *ev)
{
    struct rt_conn *c = user;
    char item[80], prev[80];
    rt_item_id(c, ev->item, item, sizeof item);
    rt_item_id(c, ev->item - 1, prev, sizeof prev);
    if (ev->type == STT_EV_ERROR)
        rt_error(&c->io, "server_error", NULL, NULL, NULL, ev->text ? ev->text : "transcription failed");
    else
        rt_send_stt(&c->io, ev, item, ev->item > 1 ? prev : NULL, NULL);
}

static void rt_on_session_free(void *user) { rt_unref(user); }

// ---- session configuration ---------------------------------------------------------

static struct rt_turn rt_turn_of(const struct rt_conn *c)
{
    return (struct rt_turn){ .server_vad = c->sp.server_vad, .threshold = c->sp.vad.threshold,
                             .silence_ms = c->sp.vad.min_silence_duration_ms,
                             .prefix_ms = c->prefix_padding_ms };
}

static cJSON *rt_turn_detection_json(const struct rt_conn *c)
{
    struct rt_turn t = rt_turn_of(c);
    return rt_turn_json(&t, false);
}

static cJSON *rt_transcription_json(const struct rt_conn *c)
{
    cJSON *t = cJSON_CreateObject();
    cJSON_AddStringToObject(t, "model", c->model ? c->model : "whisper-1");
    if (c->language)
        cJSON_AddStringToObject(t, "language", c->language);
    else
        cJSON_AddNullToObject(t, "language");
    cJSON_AddStringToObject(t, "prompt", c->prompt ? c->prompt : "");
    return t;
}

/* The effective session, in the shape of the event that asked (beta
 * transcription_session.* or GA session.*). */
static void rt_send_session(struct rt_conn *c, const char *type)
{
    cJSON *ev = rt_event(type);
    cJSON *s = cJSON_AddObjectToObject(ev, "session");
    cJSON_AddStringToObject(s, "id", c->io.id);
    cJSON_AddStringToObject(s, "object", "realtime.transcription_session");
    if (c->ga) {
        cJSON_AddStringToObject(s, "type", "transcription");
        cJSON *in = cJSON_AddObjectToObject(cJSON_AddObjectToObject(s, "audio"), "input");
        cJSON *fmt = cJSON_AddObjectToObject(in, "format");
        cJSON_AddStringToObject(fmt, "type", "audio/pcm");
        cJSON_AddNumberToObject(fmt, "rate", c->sp.input_rate_hz);
        cJSON_AddItemToObject(in, "transcription", rt_transcription_json(c));
        cJSON_AddItemToObject(in, "turn_detection", rt_turn_detection_json(c));
        cJSON_AddNullToObject(in, "noise_reduction");
    } else {
        cJSON_AddStringToObject(s, "input_audio_format", "pcm16");
        cJSON_AddNumberToObject(s, "input_audio_sample_rate", c->sp.input_rate_hz);
        cJSON_AddItemToObject(s, "input_audio_transcription", rt_transcription_json(c));
        cJSON_AddItemToObject(s, "turn_detection", rt_turn_detection_json(c));
        cJSON_AddNullToObject(s, "input_audio_noise_reduction");
    }
    cJSON_AddNullToObject(s, "include");
    rt_send(&c->io, ev);
}

/* Replace *dst with a copy of the string item (NULL or "" clears). */
static int rt_set_str(char **dst, const cJSON *item)
{
    if (!item || cJSON_IsNull(item)) {
        free(*dst);
        *dst = NULL;
        return 0;
    }
    if (!cJSON_IsString(item))
        return -1;
    char *v = *item->valuestring ? strdup(item->valuestring) : NULL;
    free(*dst);
    *dst = v;
    return 0;
}

/* Applies the fields present in one update to a copy of the settings; the
 * session takes them only when all are valid. Returns NULL, or the message
 * for an error event (param set to the offending field). */
static const char *rt_apply(struct rt_conn *c, const cJSON *format, const cJSON *rate,
                            const cJSON *transcription, const cJSON *turn, bool turn_present,
                            const char **param)
{
    struct stt_session_params sp = c->sp;
    int pad = c->prefix_padding_ms;
    if (format) {
        const char *f = cJSON_IsString(format) ? format->valuestring : NULL;
        if (cJSON_IsObject(format)) {
            const cJSON *t = cJSON_GetObjectItemCaseSensitive(format, "type");
            f = cJSON_IsString(t) ? t->valuestring : "";
            if (!rate)
                rate = cJSON_GetObjectItemCaseSensitive(format, "rate");
        }
        if (!f || (strcmp(f, "pcm16") && strcmp(f, "audio/pcm"))) {
            *param = "input_audio_format";
            return "only 16-bit PCM input is supported ('pcm16' / 'audio/pcm')";
        }
    }
    if (rate) {
        if (!cJSON_IsNumber(rate) || rate->valuedouble < 8000 || rate->valuedouble > 96000) {
            *param = "rate";
            return "the sample rate must be a number in 8000..96000";
        }
        sp.input_rate_hz = (int)rate->valuedouble;
    }
    if (turn_present) {
        struct rt_turn t = rt_turn_of(c);
        const char *msg = rt_turn_parse(turn, &t, param);
        if (msg)
            return msg;
        sp.server_vad = t.server_vad;
        sp.vad.threshold = t.threshold;
        sp.vad.min_silence_duration_ms = t.silence_ms;
        pad = t.prefix_ms;
        /* The streaming VAD pads at most 100 ms (so a turn's start never
         * waits for the next one). */
        sp.vad.speech_pad_ms = pad < 100 ? pad : 100;
    }
    char *model = c->model ? strdup(c->model) : NULL, *lang = c->language ? strdup(c->language) : NULL,
         *prompt = c->prompt ? strdup(c->prompt) : NULL;
    const char *msg = NULL;
    if (transcription && !cJSON_IsNull(transcription)) {
        const cJSON *l = cJSON_GetObjectItemCaseSensitive(transcription, "language");
        if (!cJSON_IsObject(transcription)) {
            *param = "input_audio_transcription";
            msg = "the transcription settings must be an object";
        } else if (rt_set_str(&model, cJSON_GetObjectItemCaseSensitive(transcription, "model")) ||
                   rt_set_str(&lang, l) ||
                   rt_set_str(&prompt, cJSON_GetObjectItemCaseSensitive(transcription, "prompt"))) {
            *param = "input_audio_transcription";
            msg = "model, language and prompt must be strings";
        } else if (lang && whisper_lang_id(lang) < 0) {
            *param = "input_audio_transcription.language";
            msg = "unknown language";
        }
    }
    char err[256];
    if (!msg) {
        sp.language = lang;
        sp.prompt = prompt;
        if (stt_session_update(c->ss, &sp, err, sizeof err) < 0) {
            *param = "turn_detection";
            msg = err;   /* copied into the error event before returning */
        }
    }
    if (msg) {
        snprintf(c->err, sizeof c->err, "%s", msg);
        free(model);
        free(lang);
        free(prompt);
        return c->err;
    }
    sp.language = sp.prompt = NULL;   /* the session copied them; ours are below */
    c->sp = sp;
    c->prefix_padding_ms = pad;
    free(c->model);
    free(c->language);
    free(c->prompt);
    c->model = model;
    c->language = lang;
    c->prompt = prompt;
    return NULL;
}

static void rt_update(struct rt_conn *c, const cJSON *msg, bool ga, const char *client_eid)
{
    const cJSON *s = cJSON_GetObjectItemCaseSensitive(msg, "session");
    if (!cJSON_IsObject(s)) {
        rt_error(&c->io, "invalid_request_error", "invalid_value", "session", client_eid,
                 "'session' must be an object");
        return;
    }
    const char *param = NULL, *err;
    if (ga) {
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(s, "type");
        if (type && (!cJSON_IsString(type) || strcmp(type->valuestring, "transcription"))) {
            rt_error(&c->io, "invalid_request_error", "invalid_value", "session.type", client_eid,
                     "this endpoint serves transcription sessions only (session.type "
                     "\"transcription\")");
            return;
        }
        const cJSON *audio = cJSON_GetObjectItemCaseSensitive(s, "audio");
        const cJSON *in = cJSON_GetObjectItemCaseSensitive(audio, "input");
        err = rt_apply(c, cJSON_GetObjectItemCaseSensitive(in, "format"), NULL,
                       cJSON_GetObjectItemCaseSensitive(in, "transcription"),
                       cJSON_GetObjectItemCaseSensitive(in, "turn_detection"),
                       cJSON_HasObjectItem(in, "turn_detection"), &param);
    } else {
        err = rt_apply(c, cJSON_GetObjectItemCaseSensitive(s, "input_audio_format"),
                       cJSON_GetObjectItemCaseSensitive(s, "input_audio_sample_rate"),
                       cJSON_GetObjectItemCaseSensitive(s, "input_audio_transcription"),
                       cJSON_GetObjectItemCaseSensitive(s, "turn_detection"),
                       cJSON_HasObjectItem(s, "turn_detection"), &param);
    }
    if (err) {
        rt_error(&c->io, "invalid_request_error", "invalid_value", param, client_eid, err);
        return;
    }
    c->ga = ga;
    rt_send_session(c, ga ? "session.updated" : "transcription_session.updated");
}

// ---- client events (a ws worker, one message at a time) -------------------------------

static void rt_append(struct rt_conn *c, const cJSON *msg, const char *eid)
{
    const cJSON *audio = cJSON_GetObjectItemCaseSensitive(msg, "audio");
    if (!cJSON_IsString(audio)) {
        rt_error(&c->io, "invalid_request_error", "invalid_value", "audio", eid,
                 "'audio' must be a base64 string of PCM16 samples");
        return;
    }
    size_t len = strlen(audio->valuestring);
    unsigned char *pcm = malloc(len / 4 * 3 + 3);
    long n = pcm ? rt_base64_decode(audio->valuestring, len, pcm) : -1;
    char err[256];
    if (n < 0) {
        rt_error(&c->io, "invalid_request_error", "invalid_value", "audio", eid,
                 pcm ? "'audio' is not valid base64" : "out of memory");
    } else if (stt_session_push(c->ss, pcm, (size_t)n, err, sizeof err) < 0) {
        rt_error(&c->io, "invalid_request_error", "input_audio_buffer_append_failed", "audio", eid, err);
    }
    free(pcm);
}

static void rt_handle(struct rt_conn *c, const char *data, size_t len, bool binary)
{
    const char *t, *eid;
    cJSON *msg = rt_parse(&c->io, data, len, binary, &t, &eid);
    if (!msg)
        return;
    char err[256];
    if (!strcmp(t, "input_audio_buffer.append")) {
        rt_append(c, msg, eid);
    } else if (!strcmp(t, "input_audio_buffer.commit")) {
        if (stt_session_commit(c->ss, err, sizeof err) < 0)
            rt_error(&c->io, "invalid_request_error", "input_audio_buffer_commit_empty", NULL, eid, err);
    } else if (!strcmp(t, "input_audio_buffer.clear")) {
        stt_session_clear(c->ss);
        rt_send(&c->io, rt_event("input_audio_buffer.cleared"));
    } else if (!strcmp(t, "transcription_session.update")) {
        rt_update(c, msg, false, eid);
    } else if (!strcmp(t, "session.update")) {
        rt_update(c, msg, true, eid);
    } else {
        char m[160];
        snprintf(m, sizeof m, "unknown or unsupported event type '%.60s'", t);
        rt_error(&c->io, "invalid_request_error", "invalid_event", "type", eid, m);
    }
    cJSON_Delete(msg);
}

/* The socket side ends: close the session (its on_free drops the session
 * side) and drop the socket side. Runs once, after on_close and after the
 * message being handled then, on whichever thread saw the later of the two. */
static void rt_finish(struct rt_conn *c)
{
    OMNI_INFO("realtime: session %s closed", c->io.id);
    stt_session_close(c->ss);
    c->ss = NULL;
    rt_unref(c);
}

/* A ws worker thread: one message at a time per connection. */
static void rt_on_message(void *user, struct ws_sock *s, const char *data, size_t len,
                          bool binary)
{
    (void)s;
    struct rt_conn *c = user;
    if (!rt_gate_enter(&c->gate, &c->lock))
        return;   /* queued before the close: nobody will read the answer */
    rt_handle(c, data, len, binary);
    if (rt_gate_leave(&c->gate, &c->lock))
        rt_finish(c);   /* on_close came while we were busy and left the session to us */
}

/* A ws worker, after the last message (or the service thread). */
static void rt_on_close(void *user)
{
    struct rt_conn *c = user;
    if (rt_gate_close(&c->gate, &c->lock))
        rt_finish(c);
}

static const struct ws_sock_handler rt_handler = {
    .on_message = rt_on_message,
    .on_close = rt_on_close,
    .offload = true,
};

void realtime_upgrade(struct api *a, struct ws_req *r)
{
    ws_req_set_route(r, "/v1/realtime");
    struct stt *stt = api_stt(a);
    const char *intent = ws_req_query(r, "intent");
    /* No intent with a chat model loaded: a conversation (the voice agent). */
    const struct api_model *m = api_model(a);
    if (!intent && m) {
        realtime_conv_upgrade(a, r, m);
        return;
    }
    if (!stt || (intent && strcmp(intent, "transcription")) || !api_key_ok(a, r)) {
        OMNI_INFO("realtime: %s refused: %s", ws_req_id(r),
                  !stt ? "no speech model (serve --stt-model)"
                  : intent && strcmp(intent, "transcription") ? "only intent=transcription is served"
                                                              : "missing or invalid API key");
        return;
    }
    struct rt_conn *c = calloc(1, sizeof *c);
    if (!c)
        return;
    c->stt = stt;
    atomic_init(&c->refs, 2);
    pthread_mutex_init(&c->lock, NULL);
    snprintf(c->io.id, sizeof c->io.id, "sess_%s", ws_req_id(r));
    /* whisper.cpp's 200 ms merge gap stays: a transcript item is better as a
     * whole sentence than cut at every short pause, and nothing waits on the
     * end of the turn but its transcript (decoded early anyway). */
    c->sp = stt_session_default_params();
    c->sp.input_rate_hz = RT_DEFAULT_RATE;
    c->sp.server_vad = stt_vad(stt) != NULL;
    c->sp.on_event = rt_on_event;
    c->sp.on_free = rt_on_session_free;
    c->sp.user = c;
    c->prefix_padding_ms = c->sp.vad.speech_pad_ms;
    char err[256];
    if (!(c->ss = stt_session_new(stt, &c->sp, err, sizeof err))) {
        OMNI_WARN("realtime: %s: %s", ws_req_id(r), err);
        pthread_mutex_destroy(&c->lock);
        free(c);
        return;
    }
    if (!(c->io.sock = ws_req_accept_websocket(r, &rt_handler, c))) {
        stt_session_close(c->ss);   /* drops the session side; then ours */
        rt_unref(c);
        return;
    }
    /* No message can arrive before this handler returns (the handshake
     * completes after it), so the settings are still ours to read. */
    OMNI_INFO("realtime: session %s opened", c->io.id);
    rt_send_session(c, "transcription_session.created");
}
