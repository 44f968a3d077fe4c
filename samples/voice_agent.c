/* voice_agent.c - talk to omniserve's voice agent: the default microphone
 * goes to the Realtime conversation WebSocket (GA protocol, server VAD ends
 * each turn), the agent's spoken reply plays on the default output as it
 * arrives, and talking over it interrupts it (the server cancels the reply
 * on speech_started; the rest of its audio is dropped here). The user's
 * transcript and the agent's words are printed as "you: ..." / "agent: ..."
 * lines.
 *
 *   build/samples/voice_agent [--url ws://127.0.0.1:8000/v1/realtime] [--voice V]
 *                             [--instructions TEXT] [--max-tokens N]
 *   build/samples/voice_agent --file in.wav --out reply.wav
 *
 * --file plays a file to the server at real-time speed instead of the
 * microphone (silence follows, as from a quiet room), "plays" the replies
 * at real-time speed too, writes the audio heard to --out and exits once
 * every turn is answered: what the tests run, no audio device needed.
 * Use headphones live: the microphone hearing the agent interrupts it.
 *
 * Threads: the lws service thread (main) owns struct va_app except the
 * {lock} fields, which the portaudio callback shares (rt_client.h). */
#include "samples/rt_client.h"

#include <cjson/cJSON.h>
#include <portaudio.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define VA_DEFAULT_URL "ws://127.0.0.1:8000/v1/realtime"
#define VA_RATE_HZ 24000        /* pcm16 both ways, the protocol's default */
#define VA_TICK_MS 20           /* file pacing and file-mode playback */
#define VA_SETTLE_MS 1000       /* silence after a file before waiting on the turns */
#define VA_IDLE_TIMEOUT_S 30    /* after a file: give up when nothing happens this long */
#define VA_EXIT_NO_CONVERSATION 3

struct va_app {
    /* settings */
    const char *file, *out, *voice, *instructions;
    int max_tokens;             /* 0: the server's */
    bool trace;                 /* every server event on stderr */
    double t_start;
    struct rtcl *c;
    PaStream *pa;
    /* file mode */
    short *pcm;
    struct rtcl_pacer pace;
    bool file_sent;             /* the file and VA_SETTLE_MS of silence are queued */
    double t_tick, t_active;    /* last playback tick; last event or audio heard */
    short *heard;               /* what was played, for --out */
    size_t n_heard, cap_heard;
    /* the reply playing: PCM16 at VA_RATE_HZ */
    pthread_mutex_t lock;
    short *play;                /* {lock} */
    size_t play_head, play_len, play_cap; /* {lock} samples [play_head, play_len) wait */
    /* protocol */
    bool streaming, server_vad;
    int started, committed, completed, turns_answered;
    unsigned commit_seq, resp_seq;   /* resp_seq: commit_seq when the response began */
    bool resp_active;
    char resp_id[96], muted[96];     /* muted: a reply cut by barge-in */
    double t_stopped;                /* speech_stopped of the turn waiting for audio */
    bool line_open;                  /* an "agent: " line is being printed */
    bool finished;
    int exit_code;
};

static void va_usage(FILE *f)
{
    fprintf(f,
            "usage: voice_agent [--url URL] [--voice V] [--instructions TEXT] [--max-tokens N]\n"
            "                   [--file AUDIO --out REPLY.wav] [--trace]\n"
            "  --url URL           realtime endpoint (default %s)\n"
            "  --voice V           the agent's voice (GET /v1/audio/voices; default: the server's)\n"
            "  --instructions T    the system prompt\n"
            "  --max-tokens N      at most N tokens per reply\n"
            "  --file AUDIO        talk with a file (any format ffmpeg reads) at real-time speed\n"
            "                      instead of the microphone; exits when every turn is answered\n"
            "  --out REPLY.wav     with --file: write the agent's audio as heard (24 kHz WAV)\n"
            "  --trace             print every server event (with its time) on stderr\n"
            "exit: 0 done, 1 error, 2 usage, %d the server has no conversation mode\n",
            VA_DEFAULT_URL, VA_EXIT_NO_CONVERSATION);
}

// ---- playback -------------------------------------------------------------------

static void va_play_push(struct va_app *a, const short *s, size_t n)
{
    pthread_mutex_lock(&a->lock);
    if (a->play_head > 0 && a->play_head == a->play_len)
        a->play_head = a->play_len = 0;
    if (a->play_len + n > a->play_cap && a->play_head > 0) {   /* compact first */
        memmove(a->play, a->play + a->play_head, (a->play_len - a->play_head) * sizeof *a->play);
        a->play_len -= a->play_head;
        a->play_head = 0;
    }
    if (a->play_len + n > a->play_cap) {
        size_t cap = a->play_cap ? a->play_cap * 2 : VA_RATE_HZ * 4;
        while (cap < a->play_len + n)
            cap *= 2;
        short *p = realloc(a->play, cap * sizeof *p);
        if (!p) {
            pthread_mutex_unlock(&a->lock);
            return;
        }
        a->play = p;
        a->play_cap = cap;
    }
    memcpy(a->play + a->play_len, s, n * sizeof *s);
    a->play_len += n;
    pthread_mutex_unlock(&a->lock);
}

/* Takes up to max samples to play into out (NULL: discard); returns how many. */
static size_t va_play_pop(struct va_app *a, short *out, size_t max)
{
    pthread_mutex_lock(&a->lock);
    size_t n = a->play_len - a->play_head;
    if (n > max)
        n = max;
    if (out)
        memcpy(out, a->play + a->play_head, n * sizeof *out);
    a->play_head += n;
    pthread_mutex_unlock(&a->lock);
    return n;
}

static size_t va_play_pending(struct va_app *a)
{
    pthread_mutex_lock(&a->lock);
    size_t n = a->play_len - a->play_head;
    pthread_mutex_unlock(&a->lock);
    return n;
}

static void va_play_clear(struct va_app *a)
{
    pthread_mutex_lock(&a->lock);
    a->play_head = a->play_len = 0;
    pthread_mutex_unlock(&a->lock);
}

/* Full duplex: the microphone goes out, the reply comes in. */
static int va_pa_callback(const void *in, void *out, unsigned long frames,
                          const PaStreamCallbackTimeInfo *ti, PaStreamCallbackFlags flags, void *user)
{
    (void)ti;
    (void)flags;
    struct va_app *a = user;
    if (in) {
        rtcl_queue_audio(a->c, in, frames * 2);
        rtcl_wake(a->c);
    }
    if (out) {
        size_t n = va_play_pop(a, out, frames);
        memset((short *)out + n, 0, (frames - n) * sizeof(short));
    }
    return paContinue;
}

/* File mode, every VA_TICK_MS: the file (then silence) goes out at real
 * time, and the reply is "played" at real time into the heard buffer. */
static void va_tick(void *user)
{
    struct va_app *a = user;
    if (!a->file || !a->streaming)
        return;
    double now = rtcl_now();
    rtcl_pace(a->c, &a->pace);
    if (!a->file_sent && a->pace.fed >= a->pace.n + (size_t)VA_RATE_HZ * VA_SETTLE_MS / 1000) {
        a->file_sent = true;
        a->t_active = now;
        if (!a->server_vad) {   /* push-to-talk: the whole file is one turn */
            rtcl_send(a->c, "{\"type\":\"input_audio_buffer.commit\"}");
            rtcl_send(a->c, "{\"type\":\"response.create\"}");
        }
    }
    size_t due = (size_t)((now - a->t_tick) * VA_RATE_HZ);
    a->t_tick = now;
    if (a->n_heard + due > a->cap_heard) {
        size_t cap = a->cap_heard ? a->cap_heard * 2 : VA_RATE_HZ * 8;
        while (cap < a->n_heard + due)
            cap *= 2;
        short *h = realloc(a->heard, cap * sizeof *h);
        if (!h)
            return;
        a->heard = h;
        a->cap_heard = cap;
    }
    size_t got = va_play_pop(a, a->heard + a->n_heard, due);
    a->n_heard += got;
    if (got)
        a->t_active = now;
}

// ---- protocol -------------------------------------------------------------------

static void va_send_update(struct va_app *a)
{
    cJSON *ev = cJSON_CreateObject();
    cJSON_AddStringToObject(ev, "type", "session.update");
    cJSON *s = cJSON_AddObjectToObject(ev, "session");
    cJSON_AddStringToObject(s, "type", "realtime");
    cJSON_AddItemToArray(cJSON_AddArrayToObject(s, "output_modalities"), cJSON_CreateString("audio"));
    cJSON *audio = cJSON_AddObjectToObject(s, "audio");
    cJSON *fmt = cJSON_AddObjectToObject(cJSON_AddObjectToObject(audio, "input"), "format");
    cJSON_AddStringToObject(fmt, "type", "audio/pcm");
    cJSON_AddNumberToObject(fmt, "rate", VA_RATE_HZ);
    cJSON *out = cJSON_AddObjectToObject(audio, "output");
    fmt = cJSON_AddObjectToObject(out, "format");
    cJSON_AddStringToObject(fmt, "type", "audio/pcm");
    cJSON_AddNumberToObject(fmt, "rate", VA_RATE_HZ);
    if (a->voice)
        cJSON_AddStringToObject(out, "voice", a->voice);
    if (a->instructions)
        cJSON_AddStringToObject(s, "instructions", a->instructions);
    if (a->max_tokens > 0)
        cJSON_AddNumberToObject(s, "max_output_tokens", a->max_tokens);
    char *text = cJSON_PrintUnformatted(ev);
    if (text)
        rtcl_send(a->c, text);
    free(text);
    cJSON_Delete(ev);
}

static int va_start_audio(struct va_app *a)
{
    a->streaming = true;
    if (a->file) {
        a->pace.t0 = a->t_tick = a->t_active = rtcl_now();
        va_tick(a);
        fprintf(stderr, "voice_agent: talking with %s\n", a->file);
        return 0;
    }
    if (!a->server_vad) {
        fprintf(stderr, "voice_agent: the server has no VAD (serve --vad-model): "
                        "live talk needs it\n");
        return -1;
    }
    PaError e = Pa_OpenDefaultStream(&a->pa, 1, 1, paInt16, VA_RATE_HZ, VA_RATE_HZ / 50,
                                     va_pa_callback, a);
    if (e == paNoError)
        e = Pa_StartStream(a->pa);
    if (e != paNoError) {
        fprintf(stderr, "voice_agent: audio device: %s\n", Pa_GetErrorText(e));
        return -1;
    }
    fprintf(stderr, "voice_agent: listening; talk, and talk over the agent to interrupt it; "
                    "Ctrl-C to stop\n");
    return 0;
}

static const char *va_str(const cJSON *o, const char *key)
{
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsString(x) ? x->valuestring : "";
}

static void va_end_line(struct va_app *a, const char *suffix)
{
    if (a->line_open) {
        printf("%s\n", suffix);
        fflush(stdout);
        a->line_open = false;
    }
}

static void va_on_session(struct va_app *a, const cJSON *ev, bool created)
{
    const cJSON *s = cJSON_GetObjectItemCaseSensitive(ev, "session");
    const char *type = va_str(s, "type");
    if (strcmp(type, "realtime")) {
        fprintf(stderr, "voice_agent: the server opened a '%s' session, not a conversation "
                        "(start it with -m CHAT.gguf)\n", *type ? type : "untyped");
        a->exit_code = VA_EXIT_NO_CONVERSATION;
        a->finished = true;
        return;
    }
    if (created) {
        va_send_update(a);
        return;
    }
    const cJSON *in = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(s, "audio"), "input");
    a->server_vad = cJSON_IsObject(cJSON_GetObjectItemCaseSensitive(in, "turn_detection"));
    if (!a->streaming && va_start_audio(a) < 0) {
        a->exit_code = 1;
        a->finished = true;
    }
}

static void va_on_audio(struct va_app *a, const cJSON *ev)
{
    if (!strcmp(va_str(ev, "response_id"), a->muted))
        return;   /* the rest of a reply cut by barge-in */
    size_t len;
    unsigned char *b = rtcl_b64_decode(va_str(ev, "delta"), &len);
    if (!b)
        return;
    short *s = malloc(len / 2 * sizeof *s + 1);
    for (size_t i = 0; s && i < len / 2; i++)   /* little-endian on the wire */
        s[i] = (short)(unsigned short)(b[2 * i] | b[2 * i + 1] << 8);
    if (s)
        va_play_push(a, s, len / 2);
    free(s);
    free(b);
    if (a->t_stopped > 0) {
        fprintf(stderr, "voice_agent: first audio %.0f ms after speech_stopped\n",
                (rtcl_now() - a->t_stopped) * 1000);
        a->t_stopped = 0;
    }
}

static void va_on_event(void *user, const cJSON *ev)
{
    struct va_app *a = user;
    const char *t = va_str(ev, "type");
    a->t_active = rtcl_now();
    if (a->trace)
        fprintf(stderr, "voice_agent: %9.3f s  %s\n", a->t_active - a->t_start, t);
    if (!strcmp(t, "session.created") || !strcmp(t, "transcription_session.created")) {
        va_on_session(a, ev, true);
    } else if (!strcmp(t, "session.updated")) {
        va_on_session(a, ev, false);
    } else if (!strcmp(t, "input_audio_buffer.speech_started")) {
        a->started++;
        /* barge-in: the server cancels the reply; stop playing it now */
        if (a->resp_active || va_play_pending(a)) {
            snprintf(a->muted, sizeof a->muted, "%s", a->resp_id);
            va_play_clear(a);
            va_end_line(a, " [interrupted]");
        }
    } else if (!strcmp(t, "input_audio_buffer.speech_stopped")) {
        a->t_stopped = rtcl_now();
    } else if (!strcmp(t, "input_audio_buffer.committed")) {
        a->committed++;
        a->commit_seq++;
    } else if (!strcmp(t, "conversation.item.input_audio_transcription.completed")) {
        va_end_line(a, "");
        printf("you: %s\n", va_str(ev, "transcript"));
        fflush(stdout);
        a->completed++;
    } else if (!strcmp(t, "response.created")) {
        const cJSON *r = cJSON_GetObjectItemCaseSensitive(ev, "response");
        snprintf(a->resp_id, sizeof a->resp_id, "%s", va_str(r, "id"));
        a->resp_active = true;
        a->resp_seq = a->commit_seq;
    } else if (!strcmp(t, "response.output_audio.delta")) {
        va_on_audio(a, ev);
    } else if (!strcmp(t, "response.output_audio_transcript.delta") ||
               !strcmp(t, "response.output_text.delta")) {
        if (strcmp(va_str(ev, "response_id"), a->muted)) {
            /* one line per speaker: the reply's line breaks print as spaces */
            fputs(a->line_open ? "" : "agent: ", stdout);
            for (const char *c = va_str(ev, "delta"); *c; c++)
                putchar(*c == '\n' || *c == '\r' ? ' ' : *c);
            fflush(stdout);
            a->line_open = true;
        }
    } else if (!strcmp(t, "response.done")) {
        const cJSON *r = cJSON_GetObjectItemCaseSensitive(ev, "response");
        const char *status = va_str(r, "status");
        va_end_line(a, !strcmp(status, "cancelled") ? " [interrupted]" : "");
        if (!strcmp(status, "failed")) {
            const cJSON *d = cJSON_GetObjectItemCaseSensitive(r, "status_details");
            fprintf(stderr, "voice_agent: the reply failed: %s\n",
                    va_str(cJSON_GetObjectItemCaseSensitive(d, "error"), "message"));
        }
        a->resp_active = false;
        if (a->resp_seq == a->commit_seq)
            a->turns_answered = (int)a->commit_seq;
    } else if (!strcmp(t, "error")) {
        const cJSON *e = cJSON_GetObjectItemCaseSensitive(ev, "error");
        va_end_line(a, "");
        fprintf(stderr, "voice_agent: server error: %s\n", va_str(e, "message"));
        if (!a->streaming) {   /* the session itself was refused */
            a->exit_code = 1;
            a->finished = true;
        }
    }
}

/* File mode: every turn heard, transcribed, answered and played. */
static void va_check_done(struct va_app *a)
{
    if (!a->file || !a->file_sent || a->resp_active || va_play_pending(a))
        return;
    if (a->committed > 0 && a->started <= a->committed && a->completed >= a->committed &&
        a->turns_answered == (int)a->commit_seq)
        a->finished = true;
}

static void va_on_closed(void *user, bool connected)
{
    struct va_app *a = user;
    if (!a->finished) {
        if (connected)
            fprintf(stderr, "voice_agent: the server closed the connection\n");
        a->exit_code = connected && !a->file ? 0 : 1;
    }
    a->finished = true;
}

int main(int argc, char **argv)
{
    static struct va_app app = { .lock = PTHREAD_MUTEX_INITIALIZER };
    struct va_app *a = &app;
    const char *url = VA_DEFAULT_URL;
    for (int i = 1; i < argc; i++) {
        const char *o = argv[i];
        if (!strcmp(o, "-h") || !strcmp(o, "--help")) {
            va_usage(stdout);
            return 0;
        }
        if (!strcmp(o, "--trace")) {
            a->trace = true;
            continue;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "voice_agent: %s needs a value\n", o);
            return 2;
        }
        const char *v = argv[++i];
        if (!strcmp(o, "--url"))
            url = v;
        else if (!strcmp(o, "--file"))
            a->file = v;
        else if (!strcmp(o, "--out"))
            a->out = v;
        else if (!strcmp(o, "--voice"))
            a->voice = v;
        else if (!strcmp(o, "--instructions"))
            a->instructions = v;
        else if (!strcmp(o, "--max-tokens") && (a->max_tokens = atoi(v)) >= 1 && a->max_tokens <= 4096)
            ;
        else {
            fprintf(stderr, "voice_agent: %s '%s': %s\n", o, v,
                    !strcmp(o, "--max-tokens") ? "want 1..4096" : "unknown option");
            va_usage(stderr);
            return 2;
        }
    }
    if (a->out && !a->file) {
        fprintf(stderr, "voice_agent: --out needs --file (live replies go to the speaker)\n");
        return 2;
    }
    struct rtcl_params p = { .prog = "voice_agent", .url = url, .rate_hz = VA_RATE_HZ,
                             .tick_ms = VA_TICK_MS, .on_event = va_on_event, .on_tick = va_tick,
                             .on_closed = va_on_closed, .user = a };
    if (!(a->c = rtcl_new(&p)))
        return 2;
    if (a->file) {
        if (!(a->pcm = rtcl_load_pcm16("voice_agent", a->file, VA_RATE_HZ, &a->pace.n))) {
            rtcl_free(a->c);
            return 1;
        }
        a->pace.pcm = a->pcm;
        a->pace.tail = (size_t)-1;   /* a quiet room after the file */
    } else if (Pa_Initialize() != paNoError) {
        fprintf(stderr, "voice_agent: portaudio does not start\n");
        rtcl_free(a->c);
        return 1;
    }
    a->t_start = rtcl_now();
    if (rtcl_connect(a->c) < 0) {
        a->exit_code = 1;
        a->finished = true;
    }
    while (!a->finished && rtcl_service(a->c) == 0) {
        va_check_done(a);
        if (a->file_sent && !a->finished && rtcl_now() - a->t_active > VA_IDLE_TIMEOUT_S) {
            fprintf(stderr, "voice_agent: %s: nothing happened for %d s (%d turns heard, %d answered)\n",
                    a->committed ? "a turn is not answered" : "no turn was heard",
                    VA_IDLE_TIMEOUT_S, a->committed, a->turns_answered);
            a->exit_code = 1;
            break;
        }
    }
    va_end_line(a, "");
    if (a->pa) {
        Pa_StopStream(a->pa);
        Pa_CloseStream(a->pa);
    }
    if (!a->file)
        Pa_Terminate();
    rtcl_free(a->c);
    if (a->out && a->exit_code == 0 && rtcl_write_wav("voice_agent", a->out, a->heard, a->n_heard, VA_RATE_HZ) < 0)
        a->exit_code = 1;
    if (a->out && a->exit_code == 0)
        fprintf(stderr, "voice_agent: wrote %.2f s of the agent's audio to %s\n",
                (double)a->n_heard / VA_RATE_HZ, a->out);
    free(a->pcm);
    free(a->heard);
    free(a->play);
    return a->exit_code;
}
