/* test_stt_session.c - the STT service and streaming sessions: the agreement
 * rule for partial deltas; with the espeak Whisper model and Silero VAD from
 * ../shared, a clip streamed in small chunks gives speech_started, partials,
 * speech_stopped, committed and a final transcript equal to decoding the
 * VAD's speech-only audio in one go; manual commits without server VAD; two
 * sessions decoding at once on two workers. Skips without ../shared. */
#include "test.h"

#include "media/audio.h"
#include "src/core/omni.h"
#include "src/stt/stt.h"
#include "src/stt/stt_session.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

TEST(stt_session_agree_rule)
{
    char *emitted = NULL, *d;
    d = stt_session_agree(NULL, "hello wor", &emitted);
    CHECK(d && !strcmp(d, "") && !emitted);
    free(d);
    d = stt_session_agree("hello wor", "hello world how", &emitted);
    CHECK(d && !strcmp(d, "hello") && !strcmp(emitted, "hello"));
    free(d);
    d = stt_session_agree("hello world how", "hello world how are", &emitted);
    CHECK(d && !strcmp(d, " world how") && !strcmp(emitted, "hello world how"));
    free(d);
    /* The hypothesis changed under what was emitted: nothing more. */
    d = stt_session_agree("hello world how are", "yellow world", &emitted);
    CHECK(d && !strcmp(d, "") && !strcmp(emitted, "hello world how"));
    free(d);
    d = stt_session_agree("same text.", "same text.", &emitted);
    CHECK(d && !strcmp(d, "") && !strcmp(emitted, "hello world how"));
    free(d);
    free(emitted);
    emitted = NULL;
    d = stt_session_agree("same text.", "same text.", &emitted);
    CHECK(d && !strcmp(d, "same text."));
    free(d);
    free(emitted);
}

// ---- with the real models -----------------------------------------------------------

struct collect {
    pthread_mutex_t lock;
    char log[8192];        /* one letter per event: S started, T stopped, C committed, P, F, E;
                              A early transcript, W its withdrawal */
    char finals[8][512];
    char early[512];       /* the last early transcript */
    int n_finals, n_partials;
    bool freed;
};

static void on_event(void *user, const struct stt_event *ev)
{
    struct collect *c = user;
    static const char letters[] = "STCPFEA";
    pthread_mutex_lock(&c->lock);
    size_t n = strlen(c->log);
    if (n + 1 < sizeof c->log)
        c->log[n] = ev->type == STT_EV_EARLY && !ev->text ? 'W' : letters[ev->type];
    if (ev->type == STT_EV_EARLY && ev->text)
        snprintf(c->early, sizeof c->early, "%s", ev->text);
    if (ev->type == STT_EV_FINAL && c->n_finals < 8)
        snprintf(c->finals[c->n_finals++], sizeof c->finals[0], "%s", ev->text);
    if (ev->type == STT_EV_PARTIAL)
        c->n_partials++;
    if (ev->type == STT_EV_ERROR)
        fprintf(stderr, "    session error: %s\n", ev->text);
    pthread_mutex_unlock(&c->lock);
}

static void on_free(void *user)
{
    struct collect *c = user;
    pthread_mutex_lock(&c->lock);
    c->freed = true;
    pthread_mutex_unlock(&c->lock);
}

/* Wait (generously: slow CI) until c has n finals; false on timeout. */
static bool wait_finals(struct collect *c, int n)
{
    for (int i = 0; i < 6000; i++) {
        pthread_mutex_lock(&c->lock);
        bool done = c->n_finals >= n;
        pthread_mutex_unlock(&c->lock);
        if (done)
            return true;
        usleep(10000);
    }
    return false;
}

static bool wait_freed(struct collect *c)
{
    for (int i = 0; i < 6000; i++) {
        pthread_mutex_lock(&c->lock);
        bool done = c->freed;
        pthread_mutex_unlock(&c->lock);
        if (done)
            return true;
        usleep(10000);
    }
    return false;
}

/* Until the session has no decode queued or running (60 s at most). */
static bool wait_idle(struct stt_session *ss)
{
    for (int i = 0; i < 60000; i++) {
        if (stt_session_idle(ss))
            return true;
        usleep(1000);
    }
    return false;
}

static void free_stt(void *s) { stt_free(s); }
static void close_session(void *ss) { stt_session_close(ss); }

/* The service, freed after the test unless test_release(s) frees it earlier. */
static struct stt *open_stt(int workers)
{
    char err[512];
    struct stt_params p = stt_default_params();
    p.model_path = test_shared("models/whisper-tiny-espeak/ggml-tiny-espeak-q8_0.bin");
    p.vad_path = test_shared("models/silero-vad/silero-v6.2.0-ggml.bin");
    p.n_workers = workers;
    p.n_threads = 1;
    struct stt *s = stt_new(&p, err, sizeof err);
    if (!s)
        fprintf(stderr, "    %s\n", err);
    test_defer(free_stt, s);
    return s;
}

/* A clip as PCM16 at 16 kHz, with 1 s of silence appended (so the VAD sees
 * the turn end) and the float version for the one-shot reference. */
static short *load_clip(const char *rel, size_t *n, float **pcm, size_t *n_pcm)
{
    char err[256];
    struct media_audio_params ap = media_audio_default_params();
    if (media_audio_decode_file(test_shared(rel), &ap, pcm, n_pcm, err, sizeof err) < 0)
        return NULL;
    *n = *n_pcm + 16000;
    short *s = calloc(*n, sizeof *s);
    for (size_t i = 0; s && i < *n_pcm; i++) {
        float v = (*pcm)[i] * 32768.0f;
        s[i] = (short)(v > 32767 ? 32767 : v < -32768 ? -32768 : v);
    }
    for (size_t i = 0; i < *n_pcm; i++)   /* the reference hears exactly what the session hears */
        (*pcm)[i] = s[i] / 32768.0f;
    return s;
}

static char *reference_text(struct stt *svc, const float *pcm, size_t n)
{
    char err[256];
    float *speech;
    size_t n_speech, n_spans;
    struct stt_span *spans;
    if (stt_speech_only(stt_vad(svc), pcm, n, &speech, &n_speech, &spans, &n_spans, err,
                        sizeof err) < 0)
        return NULL;
    struct whisper_state *ws = whisper_state_new(stt_model(svc), NULL, err, sizeof err);
    struct whisper_full_params wp = stt_full_params(false);
    char *text = NULL;
    if (ws && whisper_full(ws, &wp, speech, (int64_t)n_speech, err, sizeof err) == 0)
        text = stt_full_text(ws);
    whisper_state_free(ws);
    free(speech);
    free(spans);
    return text;
}

/* The kitchen clip streamed into a session: its one final transcript must
 * equal a one-shot decode of the clip.
 *  - early false: odd chunk sizes (samples split across pushes), partials
 *    interleaving; every partial precedes the final.
 *  - early true: 20 ms pushes, each once the session is idle (as if decoding
 *    were instant, so the test does not depend on the machine's speed), then
 *    silence: the final's transcript is decoded while the VAD waits to be
 *    sure the speech stopped (an early final). With merge_gap_ms 0 (as
 *    conversations run) the STOP comes once min_silence has passed: the
 *    early final must have started at the first quiet window to be used. */
static void stream_kitchen(bool early, int merge_gap_ms)
{
    struct stt *svc = open_stt(1);
    CHECK(svc);
    size_t n, n_pcm;
    float *pcm = NULL;
    short *s16 = load_clip("audio/turn-on-the-kitchen-lights.wav", &n, &pcm, &n_pcm);
    CHECK(s16);
    char *want = reference_text(svc, pcm, n_pcm);
    CHECK(want && strlen(want) > 0);

    struct collect c = { .lock = PTHREAD_MUTEX_INITIALIZER };
    struct stt_session_params p = stt_session_default_params();
    p.input_rate_hz = 16000;
    p.partial_ms = early ? 0 : p.partial_ms; /* early: nothing but the turn's own decodes */
    p.vad.merge_gap_ms = merge_gap_ms;
    p.on_event = on_event;
    p.on_free = on_free;
    p.user = &c;
    char err[256];
    struct stt_session *ss = stt_session_new(svc, &p, err, sizeof err);
    CHECK(ss);
    test_defer(close_session, ss);
    if (!early) {
        for (size_t off = 0; off < n * 2; off += 3001) {
            size_t len = n * 2 - off < 3001 ? n * 2 - off : 3001;
            CHECK(stt_session_push(ss, (const char *)s16 + off, len, err, sizeof err) == 0);
            usleep(2000);   /* let partial jobs interleave */
        }
    } else {
        enum { CHUNK = 320 }; /* 20 ms */
        static const short silence[CHUNK];
        for (size_t off = 0; off < n; off += CHUNK) {
            CHECK(stt_session_push(ss, s16 + off, (n - off < CHUNK ? n - off : CHUNK) * 2, err, sizeof err) == 0);
            CHECK(wait_idle(ss));
        }
        for (int i = 0; i < 75 && c.n_finals == 0; i++) { /* up to 1.5 s of silence */
            CHECK(stt_session_push(ss, silence, sizeof silence, err, sizeof err) == 0);
            CHECK(wait_idle(ss));
        }
    }
    CHECK_MSG(wait_finals(&c, 1), "no final transcript (events %s)", c.log);
    if (early)
        CHECK_EQ(stt_session_early_finals(ss), 1);
    test_release(ss); /* stt_session_close */
    CHECK(wait_freed(&c));
    CHECK_MSG(!strcmp(c.finals[0], want), "stream '%s' vs one-shot '%s'", c.finals[0], want);
    CHECK_MSG(c.log[0] == 'S' && strstr(c.log, "TC") && strchr(c.log, 'F') &&
                  !strchr(c.log, 'E') && c.n_finals == 1,
              "events %s", c.log);
    CHECK(!strchr(strchr(c.log, 'F'), 'P'));
    free(want);
    free(pcm);
    free(s16);
    test_release(svc);
}

TEST(stt_session_stream_equals_one_shot)
{
    SKIP_IF_NO_SHARED();
    stream_kitchen(false, 200);
}

TEST(stt_session_early_final)
{
    SKIP_IF_NO_SHARED();
    stream_kitchen(true, 200);
    stream_kitchen(true, 0);
}

/* Early transcripts announced (early_events): the clip, a pause shorter than
 * min_silence, the clip again, then silence, each 20 ms push once the
 * session is idle. Every pause announces the turn's likely transcript, and
 * speech going on withdraws it; the last announcement comes before the STOP
 * and is the final's transcript. */
TEST(stt_session_early_events)
{
    SKIP_IF_NO_SHARED();
    struct stt *svc = open_stt(1);
    CHECK(svc);
    size_t n, n_pcm;
    float *pcm = NULL;
    short *s16 = load_clip("audio/turn-on-the-kitchen-lights.wav", &n, &pcm, &n_pcm);
    CHECK(s16);
    const size_t pause = 16000 * 3 / 10, total = 2 * n_pcm + pause + 24000;
    short *audio = calloc(total, sizeof *audio);
    CHECK(audio);
    memcpy(audio, s16, n_pcm * sizeof *audio);
    memcpy(audio + n_pcm + pause, s16, n_pcm * sizeof *audio);
    struct collect c = { .lock = PTHREAD_MUTEX_INITIALIZER };
    struct stt_session_params p = stt_session_default_params();
    p.input_rate_hz = 16000;
    p.partial_ms = 0;
    p.early_events = true;
    p.vad.merge_gap_ms = 0;
    p.vad.min_silence_duration_ms = 1000;   /* the pause does not end the turn */
    p.on_event = on_event;
    p.on_free = on_free;
    p.user = &c;
    char err[256];
    struct stt_session *ss = stt_session_new(svc, &p, err, sizeof err);
    CHECK(ss);
    test_defer(close_session, ss);
    for (size_t off = 0; off < total && c.n_finals == 0; off += 320) {
        CHECK(stt_session_push(ss, audio + off, (total - off < 320 ? total - off : 320) * 2, err, sizeof err) == 0);
        CHECK(wait_idle(ss));
    }
    CHECK_MSG(wait_finals(&c, 1), "no final transcript (events %s)", c.log);
    CHECK_EQ(stt_session_early_finals(ss), 1);
    test_release(ss);
    CHECK(wait_freed(&c));
    fprintf(stderr, "[events %s] ", c.log);
    /* S, then pairs of A W while the speaker goes on, the last A, then T C F */
    const char *last_a = strrchr(c.log, 'A'), *t = strchr(c.log, 'T');
    CHECK_MSG(c.log[0] == 'S' && strchr(c.log, 'W') && last_a && t && last_a < t && !strchr(last_a, 'W') &&
                  strstr(t, "TCF") && !strchr(c.log, 'E') && c.n_finals == 1,
              "events %s", c.log);
    for (const char *a = strchr(c.log, 'A'); a && a < last_a; a = strchr(a + 1, 'A'))
        CHECK_MSG(a[1] == 'W', "an early transcript not withdrawn: events %s", c.log);
    CHECK_MSG(!strcmp(c.early, c.finals[0]), "early '%s', final '%s'", c.early, c.finals[0]);
    free(audio);
    free(pcm);
    free(s16);
    test_release(svc);
}

TEST(stt_session_manual_commit_and_two_sessions)
{
    SKIP_IF_NO_SHARED();
    struct stt *svc = open_stt(2);
    CHECK(svc);
    size_t n, n_pcm;
    float *pcm = NULL;
    short *s16 = load_clip("audio/turn-on-the-kitchen-lights.wav", &n, &pcm, &n_pcm);
    CHECK(s16);
    struct collect c[2] = { { .lock = PTHREAD_MUTEX_INITIALIZER },
                            { .lock = PTHREAD_MUTEX_INITIALIZER } };
    struct stt_session *ss[2];
    char err[256];
    for (int i = 0; i < 2; i++) {
        struct stt_session_params p = stt_session_default_params();
        p.input_rate_hz = 16000;
        p.server_vad = false;
        p.on_event = on_event;
        p.on_free = on_free;
        p.user = &c[i];
        ss[i] = stt_session_new(svc, &p, err, sizeof err);
        CHECK(ss[i]);
        test_defer(close_session, ss[i]);
        /* Less than 100 ms cannot be committed. */
        CHECK(stt_session_push(ss[i], s16, 1000 * 2, err, sizeof err) == 0);
        CHECK(stt_session_commit(ss[i], err, sizeof err) == OMNI_ERR_ARG);
        CHECK(strstr(err, "buffer too small"));
        stt_session_clear(ss[i]);
    }
    for (int i = 0; i < 2; i++) {
        CHECK(stt_session_push(ss[i], s16, n_pcm * 2, err, sizeof err) == 0);
        CHECK(stt_session_commit(ss[i], err, sizeof err) == 0);
    }
    for (int i = 0; i < 2; i++)
        CHECK(wait_finals(&c[i], 1));
    CHECK_MSG(!strcmp(c[0].finals[0], c[1].finals[0]) && strlen(c[0].finals[0]) > 0, "'%s' vs '%s'",
              c[0].finals[0], c[1].finals[0]);
    CHECK_MSG(!strcmp(c[0].log, "CF"), "events %s", c[0].log);
    for (int i = 0; i < 2; i++) {
        test_release(ss[i]); /* stt_session_close */
        CHECK(wait_freed(&c[i]));
    }
    free(pcm);
    free(s16);
    test_release(svc);
}

TEST(stt_speech_only_maps_times)
{
    struct stt_span spans[2] = { { 16000, 0, 8000 }, { 48000, 9600, 16000 } };
    CHECK(stt_map_ms(spans, 2, 0) == 1000);
    CHECK(stt_map_ms(spans, 2, 250) == 1250);
    CHECK(stt_map_ms(spans, 2, 550) == 1500);    /* in the gap: end of the first span */
    CHECK(stt_map_ms(spans, 2, 600) == 3000);
    CHECK(stt_map_ms(spans, 2, 1000) == 3400);
    CHECK(stt_map_ms(NULL, 0, 1234) == 1234);
}
