/* speech.c - POST /v1/audio/speech and GET /v1/audio/voices (OpenAI shapes)
 * on the speech synthesizer (audio/tts).
 *
 * The request is checked on a ws worker, then the text goes to a tts stream;
 * its audio (tts worker thread) is resampled to 24 kHz (OpenAI's rate for
 * every format), encoded as it comes by a streaming encoder and written to
 * the response: with stream_format "audio" as chunked bytes, sentence by
 * sentence; with "sse" as speech.audio.delta events (base64) and a final
 * speech.audio.done with usage. A client that leaves cancels synthesis. */
#include "src/api/speech.h"

#include "audio/tts/tts.h"
#include "media/audio.h"
#include "src/api/api.h"
#include "src/core/omni.h"

#include <cjson/cJSON.h>
#include <libwebsockets.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define SPEECH_RATE_HZ 24000
#define SPEECH_MAX_INPUT_CHARS 4096
#define SPEECH_SSE_CHUNK 12288        /* encoded bytes per speech.audio.delta */

/* One /v1/audio/speech response. Referenced by the ws_out (until the
 * connection and this code let go) and by the tts stream (until its DONE). */
struct speech_job {
    pthread_mutex_t lock;
    int refs;                         /* {lock} */
    bool tts_done;                    /* {lock} the stream is gone: no more cancels */
    struct tts_stream *stream;        /* cancel only, and only before tts_done */
    struct ws_out *out;
    bool sse;
    enum media_audio_format fmt;
    struct media_resampler *rs;       /* tts worker thread from here on */
    struct media_audio_encoder *enc;
    float pcm[4096];
    uint8_t *pending;                 /* sse: encoded bytes not yet sent */
    size_t n_pending, cap_pending;
    size_t samples_out;               /* at 24 kHz */
    int input_chars;
    bool failed;
};

static void speech_job_unref(struct speech_job *j)
{
    pthread_mutex_lock(&j->lock);
    bool last = --j->refs == 0;
    pthread_mutex_unlock(&j->lock);
    if (!last)
        return;
    media_audio_encoder_free(j->enc);
    media_resampler_free(j->rs);
    free(j->pending);
    pthread_mutex_destroy(&j->lock);
    free(j);
}

static void speech_on_free(void *user) { speech_job_unref(user); }

/* The client left (service thread): stop synthesis. */
static void speech_on_abort(void *user)
{
    struct speech_job *j = user;
    pthread_mutex_lock(&j->lock);
    if (!j->tts_done)
        tts_stream_cancel(j->stream);
    pthread_mutex_unlock(&j->lock);
}

static void speech_send_delta(struct speech_job *j)
{
    if (!j->n_pending)
        return;
    size_t b64 = 4 * ((j->n_pending + 2) / 3) + 8;    /* lws wants room past the end */
    char *enc = malloc(b64), *json = malloc(b64 + 64);
    if (enc && json && lws_b64_encode_string((const char *)j->pending, (int)j->n_pending, enc,
                                             (int)b64) >= 0) {
        int n = snprintf(json, b64 + 64, "{\"type\":\"speech.audio.delta\",\"audio\":\"%s\"}", enc);
        ws_out_sse(j->out, NULL, json, (size_t)n);
    } else {
        j->failed = true;
    }
    free(enc);
    free(json);
    j->n_pending = 0;
}

/* Encoded bytes (tts worker thread): straight out, or gathered for SSE. */
static int speech_write(void *user, const uint8_t *data, size_t len)
{
    struct speech_job *j = user;
    if (j->out && ws_out_gone(j->out))
        return 1;
    if (j->out && !j->sse) {
        ws_out_write(j->out, (const char *)data, len);
        return 0;
    }
    /* SSE gathers bytes into deltas; before the response exists (the
     * muxer's header, written when the encoder opens) they wait here too. */
    if (j->n_pending + len > j->cap_pending) {
        size_t cap = j->cap_pending ? j->cap_pending * 2 : SPEECH_SSE_CHUNK * 2;
        while (cap < j->n_pending + len)
            cap *= 2;
        uint8_t *np = realloc(j->pending, cap);
        if (!np)
            return 1;
        j->pending = np;
        j->cap_pending = cap;
    }
    memcpy(j->pending + j->n_pending, data, len);
    j->n_pending += len;
    if (j->out && j->n_pending >= SPEECH_SSE_CHUNK)
        speech_send_delta(j);
    return 0;
}

/* Moves what the resampler has into the encoder. */
static void speech_encode_ready(struct speech_job *j)
{
    char err[256];
    size_t got;
    while (!j->failed && (got = media_resampler_pull(j->rs, j->pcm, 4096)) > 0) {
        j->samples_out += got;
        if (media_audio_encoder_push(j->enc, j->pcm, got, err, sizeof err) < 0) {
            if (!ws_out_gone(j->out))
                OMNI_WARN("speech: %s", err);
            j->failed = true;
        }
    }
}

static void speech_finish(struct speech_job *j, const struct tts_event *ev)
{
    char err[256];
    if (!j->failed && !ev->cancelled && !ev->error) {
        if (media_resampler_flush(j->rs, err, sizeof err) == 0)
            speech_encode_ready(j);
        if (!j->failed && media_audio_encoder_finish(j->enc, err, sizeof err) < 0)
            j->failed = true;
    }
    if (ev->error)
        OMNI_WARN("speech: %s", ev->error);
    if (j->sse && !ws_out_gone(j->out)) {
        speech_send_delta(j);
        if (ev->error || j->failed) {
            char msg[384];
            int n = snprintf(msg, sizeof msg, "{\"type\":\"error\",\"error\":{\"message\":\"%s\","
                                              "\"type\":\"server_error\"}}",
                             ev->error ? "speech synthesis failed" : "audio encoding failed");
            ws_out_sse(j->out, NULL, msg, (size_t)n);
        } else {
            /* Tokens as OpenAI bills them are unknown to espeak: the input
             * counts ~4 characters a token, the output 50 audio frames a second. */
            int in_tok = (j->input_chars + 3) / 4;
            int out_tok = (int)(j->samples_out * 50 / SPEECH_RATE_HZ);
            char done[256];
            int n = snprintf(done, sizeof done,
                             "{\"type\":\"speech.audio.done\",\"usage\":{\"input_tokens\":%d,"
                             "\"output_tokens\":%d,\"total_tokens\":%d}}",
                             in_tok, out_tok, in_tok + out_tok);
            ws_out_sse(j->out, NULL, done, (size_t)n);
        }
    }
    ws_out_end(j->out);
}

/* tts worker thread. */
static void speech_on_tts(void *user, const struct tts_event *ev)
{
    struct speech_job *j = user;
    char err[256];
    if (ev->type == TTS_EV_AUDIO) {
        if (j->failed)
            return;
        if (media_resampler_push(j->rs, ev->pcm, ev->n * sizeof *ev->pcm, err, sizeof err) < 0)
            j->failed = true;
        else
            speech_encode_ready(j);
        if (j->failed || ws_out_gone(j->out))
            tts_stream_cancel(j->stream);   /* still ours: DONE has not come */
        return;
    }
    if (ev->type != TTS_EV_DONE)
        return;
    speech_finish(j, ev);
    pthread_mutex_lock(&j->lock);
    j->tts_done = true;
    pthread_mutex_unlock(&j->lock);
    ws_out_release(j->out);                 /* this code's reference */
    speech_job_unref(j);                    /* the stream's */
}

// ---- the request ----------------------------------------------------------------

struct speech_req {
    const char *input, *voice, *format, *stream_format;
    double speed;
};

static int speech_utf8_chars(const char *s)
{
    int n = 0;
    for (; *s; s++)
        n += ((unsigned char)*s & 0xC0) != 0x80;
    return n;
}

static int speech_parse(const cJSON *body, struct speech_req *q, struct api_error *e)
{
    if (!cJSON_IsObject(body))
        return api_error_set(e, 400, NULL, "the body must be a JSON object");
    const cJSON *input = cJSON_GetObjectItem(body, "input");
    if (!cJSON_IsString(input))
        return api_error_set(e, 400, "input", "'input' is required: the text to speak, a string");
    q->input = input->valuestring;
    int chars = speech_utf8_chars(q->input);
    if (chars == 0)
        return api_error_set(e, 400, "input", "'input' is empty");
    if (chars > SPEECH_MAX_INPUT_CHARS)
        return api_error_set(e, 400, "input", "'input' has %d characters; the limit is %d", chars,
                             SPEECH_MAX_INPUT_CHARS);
    const cJSON *model = cJSON_GetObjectItem(body, "model");
    if (model && !cJSON_IsString(model) && !cJSON_IsNull(model))
        return api_error_set(e, 400, "model", "'model' must be a string");
    const cJSON *voice = cJSON_GetObjectItem(body, "voice");
    if (cJSON_IsObject(voice))                       /* {"id": "voice_..."} */
        voice = cJSON_GetObjectItem(voice, "id");
    if (voice && !cJSON_IsString(voice))
        return api_error_set(e, 400, "voice", "'voice' must be a voice name or {\"id\": name}");
    q->voice = voice ? voice->valuestring : "alloy";
    const cJSON *instr = cJSON_GetObjectItem(body, "instructions");
    if (instr && !cJSON_IsString(instr) && !cJSON_IsNull(instr))
        return api_error_set(e, 400, "instructions", "'instructions' must be a string");
    const cJSON *fmt = cJSON_GetObjectItem(body, "response_format");
    if (fmt && !cJSON_IsString(fmt))
        return api_error_set(e, 400, "response_format", "'response_format' must be a string");
    q->format = fmt ? fmt->valuestring : "mp3";
    if (media_audio_format_from_name(q->format) < 0)
        return api_error_set(e, 400, "response_format",
                             "unknown response_format '%.32s' (mp3, opus, aac, flac, wav, pcm)",
                             q->format);
    const cJSON *speed = cJSON_GetObjectItem(body, "speed");
    if (speed && !cJSON_IsNumber(speed))
        return api_error_set(e, 400, "speed", "'speed' must be a number");
    q->speed = speed ? speed->valuedouble : 1.0;
    if (!(q->speed >= 0.25 && q->speed <= 4.0))
        return api_error_set(e, 400, "speed", "'speed' must be between 0.25 and 4.0");
    const cJSON *sf = cJSON_GetObjectItem(body, "stream_format");
    if (sf && !cJSON_IsString(sf))
        return api_error_set(e, 400, "stream_format", "'stream_format' must be \"audio\" or \"sse\"");
    q->stream_format = sf ? sf->valuestring : "audio";
    if (strcmp(q->stream_format, "audio") && strcmp(q->stream_format, "sse"))
        return api_error_set(e, 400, "stream_format",
                             "unknown stream_format '%.32s' (audio or sse)", q->stream_format);
    return 0;
}

void speech_route(struct api *a, struct ws_req *r, const char *arg)
{
    (void)arg;
    struct api_error e;
    struct tts *t = api_tts(a);
    if (!t) {
        api_error_set(&e, 503, NULL, "speech synthesis is not available on this server");
        api_respond_error(r, API_OPENAI, &e);
        return;
    }
    size_t len;
    const char *text = ws_req_body(r, &len);
    cJSON *body = cJSON_ParseWithLength(text, len);
    struct speech_req q = { 0 };
    if (!body) {
        api_error_set(&e, 400, NULL, "the body is not valid JSON");
        api_respond_error(r, API_OPENAI, &e);
        return;
    }
    if (speech_parse(body, &q, &e) < 0) {
        api_respond_error(r, API_OPENAI, &e);
        cJSON_Delete(body);
        return;
    }
    char err[256];
    struct tts_voice_info v;
    if (tts_voice_find(t, q.voice, &v, err, sizeof err) < 0) {
        api_error_set(&e, 400, "voice", "%s", err);
        api_respond_error(r, API_OPENAI, &e);
        cJSON_Delete(body);
        return;
    }

    struct speech_job *j = calloc(1, sizeof *j);
    struct media_audio_params ap = media_audio_default_params();
    ap.sample_rate_hz = SPEECH_RATE_HZ;
    if (!j) {
        api_error_set(&e, 500, NULL, "out of memory");
        goto fail;
    }
    pthread_mutex_init(&j->lock, NULL);
    j->refs = 1;                             /* this function's until the out takes it */
    j->sse = !strcmp(q.stream_format, "sse");
    j->fmt = (enum media_audio_format)media_audio_format_from_name(q.format);
    j->input_chars = speech_utf8_chars(q.input);
    if (!(j->rs = media_resampler_new(MEDIA_PCM_F32LE, v.sample_rate_hz, &ap, err, sizeof err)) ||
        !(j->enc = media_audio_encoder_new(j->fmt, SPEECH_RATE_HZ, NULL, speech_write, j, err,
                                           sizeof err))) {
        api_error_set(&e, 500, NULL, "%s", err);
        goto fail;
    }
    struct tts_stream_params sp = tts_stream_default_params();
    sp.voice = v.id;
    sp.speed = (float)q.speed;
    int code = 0;
    j->stream = tts_stream_new(t, &sp, speech_on_tts, j, &code, err, sizeof err);
    if (!j->stream) {
        api_error_set(&e, code == OMNI_ERR_LIMIT ? 429 : 400, code == OMNI_ERR_LIMIT ? NULL : "voice",
                      "%s", err);
        goto fail;
    }
    j->out = ws_req_defer(r, speech_on_abort, speech_on_free, j);
    if (!j->out) {
        tts_stream_free(j->stream);
        api_error_set(&e, 500, NULL, "out of memory");
        goto fail;
    }
    j->refs = 2;                             /* the out's (on_free) and the stream's (DONE) */
    ws_out_start(j->out, 200, j->sse ? "text/event-stream" : media_audio_format_mime(j->fmt), true);
    if (!j->sse && j->n_pending) {           /* the container's header */
        ws_out_write(j->out, (const char *)j->pending, j->n_pending);
        j->n_pending = 0;
    }
    int rc = tts_stream_push(j->stream, q.input, strlen(q.input));
    if (rc == 0)
        rc = tts_stream_finish(j->stream);
    if (rc < 0)
        tts_stream_cancel(j->stream);        /* ends the response through DONE */
    tts_stream_detach(j->stream);            /* DONE may come before this returns */
    cJSON_Delete(body);
    return;
fail:
    if (j) {
        media_audio_encoder_free(j->enc);
        media_resampler_free(j->rs);
        pthread_mutex_destroy(&j->lock);
        free(j);
    }
    api_respond_error(r, API_OPENAI, &e);
    cJSON_Delete(body);
}

void speech_voices_route(struct api *a, struct ws_req *r, const char *arg)
{
    (void)arg;
    struct tts *t = api_tts(a);
    cJSON *o = cJSON_CreateObject(), *data = cJSON_AddArrayToObject(o, "data");
    cJSON_AddStringToObject(o, "object", "list");
    struct tts_voice_info v;
    for (int i = 0; t && i < tts_voice_count(t); i++) {
        if (tts_voice_get(t, i, &v) < 0)
            continue;
        cJSON *x = cJSON_CreateObject();
        cJSON_AddStringToObject(x, "id", v.id);
        cJSON_AddStringToObject(x, "object", "voice");
        cJSON_AddStringToObject(x, "name", v.name);
        cJSON_AddStringToObject(x, "language", v.language);
        cJSON_AddStringToObject(x, "engine", v.engine);
        cJSON_AddNumberToObject(x, "sample_rate", v.sample_rate_hz);
        cJSON_AddBoolToObject(x, "needs_model", v.needs_engine);
        cJSON_AddItemToArray(data, x);
    }
    api_respond_json(r, 200, o);
}
