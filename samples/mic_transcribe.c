/* mic_transcribe.c - live transcription from the default microphone (or a
 * file played at real-time speed) through omniserve's OpenAI Realtime
 * transcription WebSocket: PCM16 goes out as input_audio_buffer.append
 * events, partial hypotheses are redrawn in place on one line and each
 * turn's final transcript is printed below.
 *
 *   build/samples/mic_transcribe [--url ws://127.0.0.1:8000/v1/realtime?intent=transcription]
 *                                [--rate 16000|24000] [--file talk.wav]
 *   (RT_DEBUG=1 in the environment shows libwebsockets' own log)
 *
 * Threads: the lws service thread (main) owns everything in struct mt_app;
 * the portaudio callback only queues audio (rt_client.h). */
#include "samples/rt_client.h"

#include <cjson/cJSON.h>
#include <portaudio.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MT_DEFAULT_URL "ws://127.0.0.1:8000/v1/realtime?intent=transcription"
#define MT_TICK_MS 100          /* file pacing */
#define MT_TAIL_MS 1000         /* silence after a file, so the server VAD ends the turn */
#define MT_END_TIMEOUT_S 30     /* after a file: give up waiting for transcripts */

struct mt_app {
    const char *file;
    int rate_hz;
    struct rtcl *c;
    struct rtcl_pacer pace;     /* file mode */
    short *pcm;
    double t_end;               /* when the file, tail included, was queued */
    PaStream *mic;
    /* protocol state */
    bool streaming, server_vad, commit_sent, commit_failed;
    int started, completed, committed;
    bool partial_shown;
    bool finished;              /* leave the service loop */
    int exit_code;
};

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

static int mt_mic_callback(const void *in, void *out, unsigned long frames,
                           const PaStreamCallbackTimeInfo *ti, PaStreamCallbackFlags flags,
                           void *user)
{
    (void)out;
    (void)ti;
    (void)flags;
    struct mt_app *a = user;
    if (in) {
        rtcl_queue_audio(a->c, in, frames * 2);
        rtcl_wake(a->c);
    }
    return paContinue;
}

/* File mode: what is due now, then (once everything is queued and sent)
 * the commit when there is no server VAD. */
static void mt_tick(void *user)
{
    struct mt_app *a = user;
    if (!a->file || !a->streaming)
        return;
    rtcl_pace(a->c, &a->pace);
    if (rtcl_pace_done(&a->pace) && a->t_end == 0)
        a->t_end = rtcl_now();
    if (a->t_end > 0 && !a->server_vad && !a->commit_sent && !rtcl_queued_audio(a->c)) {
        a->commit_sent = true;
        rtcl_send(a->c, "{\"type\":\"input_audio_buffer.commit\"}");
    }
}

/* Every turn we know of has its transcript: done with a file. */
static void mt_check_done(struct mt_app *a)
{
    if (!a->file || a->t_end == 0 || rtcl_queued_audio(a->c))
        return;
    if (a->server_vad ? a->completed >= a->started
                      : a->commit_sent && (a->commit_failed ||
                                           (a->committed > 0 && a->completed >= a->committed)))
        a->finished = true;
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
        a->pace.t0 = rtcl_now();
        mt_tick(a);
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

static void mt_on_event(void *user, const cJSON *ev)
{
    struct mt_app *a = user;
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(ev, "type");
    const char *t = cJSON_IsString(type) ? type->valuestring : "";
    if (!strcmp(t, "transcription_session.created")) {
        char msg[256];
        snprintf(msg, sizeof msg,
                 "{\"type\":\"transcription_session.update\",\"session\":{"
                 "\"input_audio_format\":\"pcm16\",\"input_audio_sample_rate\":%d}}",
                 a->rate_hz);
        rtcl_send(a->c, msg);
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

static void mt_on_closed(void *user, bool connected)
{
    struct mt_app *a = user;
    if (!a->finished) {
        if (connected)
            fprintf(stderr, "mic_transcribe: the server closed the connection\n");
        a->exit_code = connected && !a->file ? 0 : 1;
    }
    a->finished = true;
}

int main(int argc, char **argv)
{
    static struct mt_app app = { .rate_hz = 16000 };
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
    struct rtcl_params p = { .prog = "mic_transcribe", .url = url, .rate_hz = a->rate_hz,
                             .tick_ms = MT_TICK_MS, .on_event = mt_on_event, .on_tick = mt_tick,
                             .on_closed = mt_on_closed, .user = a };
    if (!(a->c = rtcl_new(&p)))
        return 2;
    if (a->file) {
        if (!(a->pcm = rtcl_load_pcm16("mic_transcribe", a->file, a->rate_hz, &a->pace.n))) {
            rtcl_free(a->c);
            return 1;
        }
        a->pace.pcm = a->pcm;
        a->pace.tail = (size_t)a->rate_hz * MT_TAIL_MS / 1000;
    } else if (Pa_Initialize() != paNoError) {
        fprintf(stderr, "mic_transcribe: portaudio does not start\n");
        rtcl_free(a->c);
        return 1;
    }
    if (rtcl_connect(a->c) < 0) {
        a->exit_code = 1;
        a->finished = true;
    }
    while (!a->finished && rtcl_service(a->c) == 0) {
        mt_check_done(a);
        if (a->t_end > 0 && !a->finished && rtcl_now() - a->t_end > MT_END_TIMEOUT_S) {
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
    rtcl_free(a->c);
    free(a->pcm);
    return a->exit_code;
}
