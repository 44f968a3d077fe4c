/* audio.c - /v1/audio/transcriptions and /v1/audio/translations. The
 * service thread parses and checks the form, defers the response and queues
 * a job on the stt service; the worker decodes the file (any format ffmpeg
 * reads), keeps only the speech when a VAD model is loaded (no hallucinated
 * text on silence), runs Whisper and writes the body in the asked format.
 * json/text decode without timestamp tokens, the timed formats with them. */
#include "src/api/audio.h"

#include "media/audio.h"
#include "src/api/api.h"
#include "src/core/omni.h"
#include "src/stt/stt.h"
#include "ws/ws_multipart.h"

#include <cjson/cJSON.h>
#include <ctype.h>
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum audio_fmt { FMT_JSON, FMT_TEXT, FMT_SRT, FMT_VTT, FMT_VERBOSE_JSON };
static const char *const audio_fmt_names[] = { "json", "text", "srt", "vtt", "verbose_json" };

struct audio_job {
    struct stt *stt;
    struct ws_out *out;
    struct ws_multipart *form;     /* owns the file bytes */
    const struct ws_part *file;
    char *language, *prompt;
    enum audio_fmt fmt;
    bool translate, stream, words;
    float temperature;
    bool temperature_set;
    atomic_bool cancelled;
    bool first_delta_sent;
    char req_id[72];
};

static void audio_job_free(void *user)
{
    struct audio_job *j = user;
    ws_multipart_free(j->form);
    free(j->language);
    free(j->prompt);
    free(j);
}

static void audio_job_abort(void *user)
{
    struct audio_job *j = user;
    atomic_store(&j->cancelled, true);
}

static bool audio_abort_cb(void *user) { return atomic_load(&((struct audio_job *)user)->cancelled); }

// ---- output (worker thread) --------------------------------------------------------

static void audio_fail(struct audio_job *j, int status, const char *msg)
{
    struct api_error e;
    api_error_set(&e, status, status == 400 || status == 413 ? "file" : NULL, "%s", msg);
    size_t len = 0;
    char *body = api_error_json(API_OPENAI, &e, &len);
    if (j->stream) {
        /* Headers went out with the stream: the error is an event. */
        ws_out_sse(j->out, NULL, body ? body : "{}", body ? len : 2);
    } else {
        ws_out_start(j->out, status, "application/json", false);
        if (body)
            ws_out_write(j->out, body, len);
    }
    free(body);
}

static void audio_send_json(struct ws_out *o, cJSON *obj, bool sse)
{
    char *s = obj ? cJSON_PrintUnformatted(obj) : NULL;
    cJSON_Delete(obj);
    if (!s)
        return;
    if (sse) {
        ws_out_sse(o, NULL, s, strlen(s));
    } else {
        ws_out_start(o, 200, "application/json", false);
        ws_out_write(o, s, strlen(s));
    }
    free(s);
}

/* "00:01:02,345" (SRT) or "00:01:02.345" (VTT) appended to buf. */
static void audio_time(char *buf, size_t cap, int64_t ms, char sep)
{
    size_t n = strlen(buf);
    snprintf(buf + n, cap - n, "%02lld:%02lld:%02lld%c%03lld", (long long)(ms / 3600000),
             (long long)(ms / 60000 % 60), (long long)(ms / 1000 % 60), sep, (long long)(ms % 1000));
}

static const char *audio_skip_space(const char *s)
{
    while (isspace((unsigned char)*s))
        s++;
    return s;
}

/* Words of a segment with times spread over its span by character count:
 * Whisper gives segment times, not word times, so these are estimates. */
static void audio_add_words(cJSON *words, const char *text, double t0, double t1)
{
    size_t total = strlen(text), at = 0;
    const char *p = text;
    while (*p) {
        while (*p == ' ')
            p++, at++;
        if (!*p)
            break;
        const char *w = p;
        while (*p && *p != ' ')
            p++;
        size_t wl = (size_t)(p - w);
        cJSON *o = cJSON_CreateObject();
        char *word = strndup(w, wl);
        cJSON_AddStringToObject(o, "word", word ? word : "");
        free(word);
        cJSON_AddNumberToObject(o, "start", t0 + (t1 - t0) * (double)at / (double)total);
        at += wl;
        cJSON_AddNumberToObject(o, "end", t0 + (t1 - t0) * (double)at / (double)total);
        cJSON_AddItemToArray(words, o);
    }
}

/* ws NULL: there was no speech at all (an empty transcript). */
static void audio_write_result(struct audio_job *j, struct whisper_state *ws,
                               const struct stt_span *spans, size_t n_spans, double duration_s)
{
    char *text = ws ? stt_full_text(ws) : strdup("");
    if (!text) {
        audio_fail(j, 500, "out of memory");
        return;
    }
    const int n = ws ? whisper_full_n_segments(ws) : 0;
    cJSON *usage = cJSON_CreateObject();
    cJSON_AddStringToObject(usage, "type", "duration");
    cJSON_AddNumberToObject(usage, "seconds", ceil(duration_s));
    if (j->stream) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "type", "transcript.text.done");
        cJSON_AddStringToObject(o, "text", text);
        cJSON_AddItemToObject(o, "usage", usage);
        audio_send_json(j->out, o, true);
    } else if (j->fmt == FMT_JSON || j->fmt == FMT_VERBOSE_JSON) {
        cJSON *o = cJSON_CreateObject();
        if (j->fmt == FMT_VERBOSE_JSON) {
            cJSON_AddStringToObject(o, "task", j->translate ? "translate" : "transcribe");
            cJSON_AddStringToObject(o, "language",
                                    ws ? whisper_full_lang(ws) : j->language ? j->language : "en");
            cJSON_AddNumberToObject(o, "duration", duration_s);
        }
        cJSON_AddStringToObject(o, "text", text);
        if (j->fmt == FMT_VERBOSE_JSON) {
            cJSON *segs = cJSON_AddArrayToObject(o, "segments");
            cJSON *words = j->words ? cJSON_AddArrayToObject(o, "words") : NULL;
            for (int i = 0; i < n; i++) {
                const struct whisper_segment *g = whisper_full_get_segment(ws, i);
                double t0 = stt_map_ms(spans, n_spans, g->t0_ms) / 1000.0;
                double t1 = stt_map_ms(spans, n_spans, g->t1_ms) / 1000.0;
                cJSON *s = cJSON_CreateObject();
                cJSON_AddNumberToObject(s, "id", i);
                cJSON_AddNumberToObject(s, "seek", (double)(g->t0_ms / 10));
                cJSON_AddNumberToObject(s, "start", t0);
                cJSON_AddNumberToObject(s, "end", t1);
                cJSON_AddStringToObject(s, "text", g->text);
                cJSON *toks = cJSON_AddArrayToObject(s, "tokens");
                for (int k = 0; k < g->n_tokens; k++)
                    cJSON_AddItemToArray(toks, cJSON_CreateNumber(g->tokens[k].id));
                cJSON_AddNumberToObject(s, "temperature", g->temperature);
                cJSON_AddNumberToObject(s, "avg_logprob", g->avg_logprob);
                cJSON_AddNumberToObject(s, "compression_ratio", g->compression_ratio);
                cJSON_AddNumberToObject(s, "no_speech_prob", g->no_speech_prob);
                cJSON_AddItemToArray(segs, s);
                if (words)
                    audio_add_words(words, g->text, t0, t1);
            }
        }
        cJSON_AddItemToObject(o, "usage", usage);
        audio_send_json(j->out, o, false);
    } else {
        cJSON_Delete(usage);
        /* Text formats: one buffer, sized by the segments. */
        size_t cap = strlen(text) + 16;
        for (int i = 0; i < n; i++)
            cap += strlen(whisper_full_get_segment(ws, i)->text) + 64;
        char *buf = calloc(1, cap);
        if (!buf) {
            free(text);
            audio_fail(j, 500, "out of memory");
            return;
        }
        if (j->fmt == FMT_TEXT) {
            snprintf(buf, cap, "%s\n", text);
        } else {
            if (j->fmt == FMT_VTT)
                strcat(buf, "WEBVTT\n\n");
            char sep = j->fmt == FMT_SRT ? ',' : '.';
            for (int i = 0; i < n; i++) {
                const struct whisper_segment *g = whisper_full_get_segment(ws, i);
                size_t len = strlen(buf);
                if (j->fmt == FMT_SRT)
                    snprintf(buf + len, cap - len, "%d\n", i + 1);
                audio_time(buf, cap, stt_map_ms(spans, n_spans, g->t0_ms), sep);
                strcat(buf, " --> ");
                audio_time(buf, cap, stt_map_ms(spans, n_spans, g->t1_ms), sep);
                len = strlen(buf);
                snprintf(buf + len, cap - len, "\n%s\n\n", audio_skip_space(g->text));
            }
        }
        ws_out_start(j->out, 200,
                     j->fmt == FMT_VTT ? "text/vtt; charset=utf-8" : "text/plain; charset=utf-8",
                     false);
        ws_out_write(j->out, buf, strlen(buf));
        free(buf);
    }
    free(text);
}

/* Streams: each new segment's text as a transcript.text.delta event. */
static void audio_on_segment(struct whisper_state *ws, int n_new, void *user)
{
    struct audio_job *j = user;
    int n = whisper_full_n_segments(ws);
    for (int i = n - n_new; i < n; i++) {
        const char *t = whisper_full_get_segment(ws, i)->text;
        if (!j->first_delta_sent)
            t = audio_skip_space(t);   /* the deltas add up to the done event's text */
        if (!*t)
            continue;
        j->first_delta_sent = true;
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "type", "transcript.text.delta");
        cJSON_AddStringToObject(o, "delta", t);
        cJSON_AddNullToObject(o, "logprobs");
        audio_send_json(j->out, o, true);
    }
}

static void audio_run(struct whisper_state *ws, void *user)
{
    struct audio_job *j = user;
    char err[512];
    float *pcm = NULL, *speech = NULL;
    size_t n = 0, n_speech = 0, n_spans = 0;
    struct stt_span *spans = NULL;
    if (!ws) {
        audio_fail(j, 503, "the server is shutting down");
        goto done;
    }
    if (atomic_load(&j->cancelled))
        goto done;
    struct media_audio_params ap = media_audio_default_params();
    ap.sample_rate_hz = WHISPER_SAMPLE_RATE_HZ;
    int rc = media_audio_decode_memory(j->file->data, j->file->len, &ap, &pcm, &n, err, sizeof err);
    if (rc < 0) {
        /* The file's own problems (format, sample rate, duration) are 400s;
         * too many bytes is 413, as the request body limit is. */
        int status = rc == OMNI_ERR_NOMEM                                     ? 500
                     : rc == OMNI_ERR_LIMIT && j->file->len > ap.max_input_bytes ? 413
                                                                              : 400;
        char msg[600];
        snprintf(msg, sizeof msg, "cannot decode the audio file: %s", err);
        audio_fail(j, status, msg);
        goto done;
    }
    const float *in = pcm;
    size_t n_in = n;
    if (stt_vad(j->stt)) {
        if (stt_speech_only(stt_vad(j->stt), pcm, n, &speech, &n_speech, &spans, &n_spans, err,
                            sizeof err) < 0) {
            audio_fail(j, 500, err);
            goto done;
        }
        in = speech;
        n_in = n_speech;
    }
    struct whisper_full_params wp = stt_full_params(j->fmt != FMT_JSON && j->fmt != FMT_TEXT);
    wp.language = j->language;
    wp.initial_prompt = j->prompt;
    wp.translate = j->translate;
    if (j->temperature_set)
        wp.temperature = j->temperature;
    wp.abort_callback = audio_abort_cb;
    wp.abort_callback_user_data = j;
    if (j->stream) {
        wp.new_segment_callback = audio_on_segment;
        wp.new_segment_callback_user_data = j;
    }
    /* No speech at all: an empty transcript rather than Whisper's guesses. */
    rc = n_in ? whisper_full(ws, &wp, in, (int64_t)n_in, err, sizeof err) : 0;
    if (atomic_load(&j->cancelled))
        goto done;
    if (rc < 0) {
        audio_fail(j, 500, err);
        goto done;
    }
    audio_write_result(j, n_in ? ws : NULL, spans, n_spans, (double)n / WHISPER_SAMPLE_RATE_HZ);
    OMNI_INFO("audio: %s: %.2f s of audio (%.2f s of speech), %d segments", j->req_id,
              (double)n / WHISPER_SAMPLE_RATE_HZ, (double)n_in / WHISPER_SAMPLE_RATE_HZ,
              n_in ? whisper_full_n_segments(ws) : 0);
done:
    free(pcm);
    free(speech);
    free(spans);
    ws_out_end(j->out);
    ws_out_release(j->out);   /* may free j */
}

// ---- the routes (service thread) -----------------------------------------------------

static int audio_bool(const char *v, bool *out)
{
    if (!strcmp(v, "true") || !strcmp(v, "1"))
        *out = true;
    else if (!strcmp(v, "false") || !strcmp(v, "0"))
        *out = false;
    else
        return -1;
    return 0;
}

/* The form's fields into j; 0, or -1 with e filled. */
static int audio_parse(struct audio_job *j, struct ws_multipart *form, bool translate,
                       struct api_error *e)
{
    j->file = ws_multipart_find(form, "file");
    if (!j->file || !j->file->len)
        return api_error_set(e, 400, "file", "'file' is required: an audio file as a form part");
    j->translate = translate;
    for (int i = 0; i < ws_multipart_count(form); i++) {
        const struct ws_part *pt = ws_multipart_part(form, i);
        const char *v = pt->data;
        if (!strcmp(pt->name, "response_format")) {
            int k = -1;
            for (int f = 0; f < 5; f++)
                if (!strcmp(v, audio_fmt_names[f]))
                    k = f;
            if (k < 0)
                return api_error_set(e, 400, "response_format",
                                     "'response_format' must be json, text, srt, vtt or "
                                     "verbose_json, got '%.40s'", v);
            j->fmt = (enum audio_fmt)k;
        } else if (!strcmp(pt->name, "language") && !translate) {
            if (*v && whisper_lang_id(v) < 0)
                return api_error_set(e, 400, "language", "unknown language '%.40s'", v);
            free(j->language);                /* a repeated field: the last one counts */
            j->language = NULL;
            if (*v && !(j->language = strdup(v)))
                return api_error_set(e, 500, NULL, "out of memory");
        } else if (!strcmp(pt->name, "prompt")) {
            free(j->prompt);
            j->prompt = NULL;
            if (*v && !(j->prompt = strdup(v)))
                return api_error_set(e, 500, NULL, "out of memory");
        } else if (!strcmp(pt->name, "temperature")) {
            char *end;
            double t = strtod(v, &end);
            if (end == v || *end || !(t >= 0 && t <= 1))
                return api_error_set(e, 400, "temperature",
                                     "'temperature' must be a number in 0..1, got '%.40s'", v);
            j->temperature = (float)t;
            j->temperature_set = true;
        } else if (!strcmp(pt->name, "timestamp_granularities[]") ||
                   !strcmp(pt->name, "timestamp_granularities")) {
            if (!strcmp(v, "word"))
                j->words = true;
            else if (strcmp(v, "segment"))
                return api_error_set(e, 400, "timestamp_granularities",
                                     "timestamp granularities are 'word' and 'segment', got '%.40s'",
                                     v);
        } else if (!strcmp(pt->name, "stream")) {
            if (audio_bool(v, &j->stream))
                return api_error_set(e, 400, "stream", "'stream' must be true or false");
        }
    }
    if (j->words && j->fmt != FMT_VERBOSE_JSON)
        return api_error_set(e, 400, "timestamp_granularities",
                             "timestamp_granularities needs response_format verbose_json");
    if (j->stream && j->fmt != FMT_JSON && j->fmt != FMT_TEXT)
        return api_error_set(e, 400, "stream", "streaming works with response_format json or text");
    return 0;
}

static void audio_route(struct api *a, struct ws_req *r, bool translate)
{
    struct api_error e;
    struct stt *stt = api_stt(a);
    if (!stt) {
        api_error_set(&e, 503, NULL, "no speech model is loaded: start the server with "
                                     "'omniserve serve --stt-model ggml-MODEL.bin'");
        api_respond_error(r, API_OPENAI, &e);
        return;
    }
    char err[256];
    size_t len = 0;
    const char *body = ws_req_body(r, &len);
    struct ws_multipart *form = ws_multipart_new(ws_req_header(r, "content-type"), NULL, err,
                                                 sizeof err);
    int rc = form ? ws_multipart_feed(form, body, len, err, sizeof err) : OMNI_ERR_FORMAT;
    if (rc == 0)
        rc = ws_multipart_finish(form, err, sizeof err);
    if (rc < 0) {
        ws_multipart_free(form);
        api_error_set(&e, rc == OMNI_ERR_LIMIT ? 413 : 400, NULL, "%s", err);
        api_respond_error(r, API_OPENAI, &e);
        return;
    }
    struct audio_job *j = calloc(1, sizeof *j);
    if (!j) {
        ws_multipart_free(form);
        api_error_set(&e, 500, NULL, "out of memory");
        api_respond_error(r, API_OPENAI, &e);
        return;
    }
    j->stt = stt;
    j->form = form;
    snprintf(j->req_id, sizeof j->req_id, "%s", ws_req_id(r));
    /* "model" is not checked: clients send "whisper-1" and the like, and
     * the server has one speech model. */
    if (audio_parse(j, form, translate, &e) < 0) {
        audio_job_free(j);
        api_respond_error(r, API_OPENAI, &e);
        return;
    }
    j->out = ws_req_defer(r, audio_job_abort, audio_job_free, j);
    if (!j->out) {
        audio_job_free(j);
        api_error_set(&e, 500, NULL, "out of memory");
        api_respond_error(r, API_OPENAI, &e);
        return;
    }
    if (j->stream)
        ws_out_start(j->out, 200, "text/event-stream", true);
    if (stt_submit(stt, audio_run, j) < 0) {
        api_error_set(&e, 429, NULL, "the speech workers are busy (queue full); retry shortly");
        e.code = "rate_limit_exceeded";
        ws_req_add_header(r, "retry-after", "1");
        audio_fail(j, 429, e.message);
        ws_out_end(j->out);
        ws_out_release(j->out);
    }
}

void audio_transcriptions(struct api *a, struct ws_req *r, const char *arg)
{
    (void)arg;
    audio_route(a, r, false);
}

void audio_translations(struct api *a, struct ws_req *r, const char *arg)
{
    (void)arg;
    audio_route(a, r, true);
}
