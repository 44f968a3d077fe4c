/* test_tts.c - speech synthesis: the sentence splitter, espeak-ng voices,
 * streaming order and cancellation, speed, and the round trip through the
 * espeak-trained Whisper of ../shared (speech made here must be heard back). */
#include "test.h"

#include "audio/tts/tts.h"
#include "audio/whisper.h"
#include "media/audio.h"
#include "src/core/omni.h"
#include "src/core/threadpool.h"

#include <cjson/cJSON.h>
#include <ctype.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

// ---- sentence splitting ---------------------------------------------------------

/* Feeds text in pieces of `step` bytes and collects every sentence, "|"-joined. */
static void split_all(const char *text, size_t step, char *out, size_t cap)
{
    struct tts_splitter *sp = tts_splitter_new(0);
    out[0] = 0;
    size_t n = strlen(text);
    for (size_t i = 0; i <= n; i += step) {
        bool final = i + step > n;
        if (i < n)
            tts_splitter_push(sp, text + i, n - i < step ? n - i : step);
        char *s;
        while ((s = tts_splitter_next(sp, final))) {
            if (out[0])
                strncat(out, "|", cap - strlen(out) - 1);
            strncat(out, s, cap - strlen(out) - 1);
            free(s);
        }
    }
    tts_splitter_free(sp);
}

TEST(tts_splitter_sentences)
{
    static const struct { const char *in, *want; } cases[] = {
        { "Hello there. How are you? Fine!", "Hello there.|How are you?|Fine!" },
        { "Pi is 3.14 today. It was 10.30 then.", "Pi is 3.14 today.|It was 10.30 then." },
        { "Dr. Smith met Mr. Jones at St. Paul. They talked.", "Dr. Smith met Mr. Jones at St. Paul.|They talked." },
        { "Use e.g. this one. Or i.e. that.", "Use e.g. this one.|Or i.e. that." },
        { "The U.S. Army left. Then J. R. R. Tolkien wrote.", "The U.S. Army left.|Then J. R. R. Tolkien wrote." },
        { "See https://example.com/a.b?c=d. Then go.", "See https://example.com/a.b?c=d.|Then go." },
        { "Mail bob@example.org now. OK.", "Mail bob@example.org now.|OK." },
        { "Run `make test. Now` please. Done.", "Run `make test. Now` please.|Done." },
        { "Code:\n```\nx = 1. Y = 2.\n```\nAfter. End.", "Code:\n```\nx = 1. Y = 2.\n```\nAfter.|End." },
        { "He said \"Stop.\" Then left.", "He said \"Stop.\"|Then left." },
        { "Wait... what? Really?! Yes.", "Wait... what?|Really?!|Yes." },
        { "1. Open it.\n2. Close it.", "1. Open it.|2. Close it." },
        { "First paragraph\n\nSecond paragraph", "First paragraph|Second paragraph" },
        { "no end mark at all", "no end mark at all" },
        { "你好。再见！", "你好。|再见！" },
    };
    char got[1024];
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        for (size_t step = 1; step <= 64; step = step * 4) {   /* any split gives the same cut */
            split_all(cases[i].in, step, got, sizeof got);
            CHECK_MSG(!strcmp(got, cases[i].want), "case %zu step %zu: got [%s] want [%s]", i, step,
                      got, cases[i].want);
        }
    }
}

TEST(tts_splitter_waits_for_the_next_word)
{
    struct tts_splitter *sp = tts_splitter_new(0);
    CHECK(sp);
    tts_splitter_push(sp, "It works.", 9);
    CHECK(tts_splitter_next(sp, false) == NULL);       /* "It works. really" may follow */
    tts_splitter_push(sp, " ", 1);
    CHECK(tts_splitter_next(sp, false) == NULL);
    tts_splitter_push(sp, "Next", 4);
    char *s = tts_splitter_next(sp, false);
    CHECK_STR_EQ(s, "It works.");
    free(s);
    CHECK(tts_splitter_next(sp, false) == NULL);
    s = tts_splitter_next(sp, true);
    CHECK_STR_EQ(s, "Next");
    free(s);
    tts_splitter_free(sp);
}

TEST(tts_splitter_cuts_long_sentences)
{
    char text[2000] = "";
    for (int i = 0; i < 100; i++)
        strcat(text, "word, ");
    struct tts_splitter *sp = tts_splitter_new(100);
    tts_splitter_push(sp, text, strlen(text));
    int n = 0;
    char *s;
    while ((s = tts_splitter_next(sp, true))) {
        CHECK_MSG(strlen(s) <= 100, "piece of %zu chars", strlen(s));
        CHECK(s[strlen(s) - 1] == ',');                 /* cut after a comma, not mid-word */
        free(s);
        n++;
    }
    CHECK(n >= 6);
    tts_splitter_free(sp);
}

// ---- voices -----------------------------------------------------------------------

static struct tts *tts_or_fail(void)
{
    char err[256];
    struct tts *t = tts_new(NULL, err, sizeof err);
    if (!t)
        fprintf(stderr, "    tts_new: %s\n", err);
    return t;
}

TEST(tts_voices)
{
    struct tts *t = tts_or_fail();
    CHECK(t);
    static const char *openai[] = { "alloy", "ash", "ballad", "coral", "echo", "fable",
                                    "nova", "onyx", "sage", "shimmer", "verse" };
    CHECK(tts_voice_count(t) > 50);   /* every espeak-ng language */
    struct tts_voice_info v;
    char err[256];
    for (int i = 0; i < 11; i++) {
        CHECK(tts_voice_get(t, i, &v) == 0);
        CHECK_STR_EQ(v.id, openai[i]);
        CHECK_STR_EQ(v.engine, "espeak-ng");
        CHECK(!v.needs_engine && v.sample_rate_hz == 22050);
    }
    CHECK(tts_voice_find(t, "en-us", &v, err, sizeof err) == 0);
    CHECK_STR_EQ(v.language, "en-us");
    CHECK(tts_voice_find(t, "DE", &v, err, sizeof err) == 0);
    CHECK_STR_EQ(v.id, "de");
    CHECK(tts_voice_find(t, "en-gb+f3", &v, err, sizeof err) == 0);
    CHECK_STR_EQ(v.id, "en-gb+f3");
    CHECK(tts_voice_find(t, "Nova", &v, err, sizeof err) == 0);
    CHECK_STR_EQ(v.id, "nova");
    CHECK(tts_voice_find(t, "en-us+nosuchvariant", &v, err, sizeof err) == OMNI_ERR_NOTFOUND);
    CHECK(tts_voice_find(t, "xx-nope", &v, err, sizeof err) == OMNI_ERR_NOTFOUND);
    CHECK_STR_CONTAINS(err, "xx-nope");
    int code = 0;
    struct tts_stream_params sp = tts_stream_default_params();
    sp.voice = "klingon";
    CHECK(tts_stream_new(t, &sp, NULL, NULL, &code, err, sizeof err) == NULL);
    CHECK_EQ(code, OMNI_ERR_NOTFOUND);
    sp.voice = "alloy";
    sp.speed = 4.5f;
    CHECK(tts_stream_new(t, &sp, NULL, NULL, &code, err, sizeof err) == NULL);
    CHECK_EQ(code, OMNI_ERR_ARG);
    tts_free(t);
}

/* RMS of pcm: speech, not silence or garbage. */
static double tts_rms(const float *pcm, size_t n)
{
    double acc = 0;
    for (size_t i = 0; i < n; i++)
        acc += (double)pcm[i] * pcm[i];
    return n ? sqrt(acc / (double)n) : 0;
}

TEST(tts_speed_changes_duration)
{
    struct tts *t = tts_or_fail();
    CHECK(t);
    const char *text = "The quick brown fox jumps over the lazy dog. It was a sunny day.";
    static const float speeds[] = { 0.25f, 0.5f, 1.0f, 2.0f, 4.0f };
    double dur[5];
    char err[256];
    for (int i = 0; i < 5; i++) {
        struct tts_stream_params p = tts_stream_default_params();
        p.speed = speeds[i];
        float *pcm;
        size_t n;
        int rate;
        CHECK_MSG(tts_synthesize(t, &p, text, &pcm, &n, &rate, err, sizeof err) == 0, "%s", err);
        CHECK(rate == 22050);
        dur[i] = (double)n / rate;
        double rms = tts_rms(pcm, n);
        free(pcm);
        CHECK_MSG(rms > 0.02 && rms < 0.7, "speed %g: rms %.3f", (double)speeds[i], rms);
    }
    CHECK_MSG(dur[2] > 2.5 && dur[2] < 7.0, "normal speed: %.2f s", dur[2]);
    for (int i = 0; i < 5; i++) {
        double want = dur[2] / speeds[i];
        CHECK_MSG(dur[i] > want * 0.75 && dur[i] < want * 1.3, "speed %g: %.2f s, want ~%.2f s",
                  (double)speeds[i], dur[i], want);
    }
    tts_free(t);
}

// ---- streams ------------------------------------------------------------------------

struct tts_log {
    pthread_mutex_t lock;
    pthread_cond_t cv;
    char order[64];          /* stream tags in the order their sentences finished */
    int done;
    bool cancelled;
    size_t samples;
    char first_sentence[128];
    bool gate_closed;        /* a gated stream's first audio waits while this is set */
    bool gate_reached;
};

/* Default mutex and condition: nothing to initialize or destroy. */
#define TTS_LOG_INIT(...) \
    { .lock = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER, .order = "", __VA_ARGS__ }

struct tts_tagged {
    struct tts_log *log;
    char tag;
    struct tts_stream *self;
    bool cancel_on_audio;
    bool gated;
};

static void tts_log_event(void *user, const struct tts_event *ev)
{
    struct tts_tagged *tg = user;
    struct tts_log *l = tg->log;
    pthread_mutex_lock(&l->lock);
    if (ev->type == TTS_EV_AUDIO) {
        l->samples += ev->n;
        if (tg->cancel_on_audio)
            tts_stream_cancel(tg->self);
        if (tg->gated) {                 /* hold the worker: the test queues meanwhile */
            l->gate_reached = true;
            pthread_cond_broadcast(&l->cv);
            while (l->gate_closed)
                pthread_cond_wait(&l->cv, &l->lock);
        }
    } else if (ev->type == TTS_EV_SENTENCE) {
        size_t k = strlen(l->order);
        if (k + 1 < sizeof l->order)
            l->order[k] = tg->tag;
        if (!l->first_sentence[0])
            snprintf(l->first_sentence, sizeof l->first_sentence, "%.*s", (int)ev->len, ev->text);
        pthread_cond_broadcast(&l->cv);
    } else {
        l->done++;
        l->cancelled |= ev->cancelled;
        pthread_cond_broadcast(&l->cv);
    }
    pthread_mutex_unlock(&l->lock);
}

static void tts_log_wait(struct tts_log *l, int done)
{
    pthread_mutex_lock(&l->lock);
    while (l->done < done)
        pthread_cond_wait(&l->cv, &l->lock);
    pthread_mutex_unlock(&l->lock);
}

TEST(tts_stream_speaks_before_the_text_is_finished)
{
    struct tts *t = tts_or_fail();
    CHECK(t);
    struct tts_log l = TTS_LOG_INIT();
    char err[256];
    struct tts_tagged a = { &l, 'a', NULL, false, false };
    a.self = tts_stream_new(t, NULL, tts_log_event, &a, NULL, err, sizeof err);
    CHECK(a.self);
    /* Text arrives in pieces, as from an LLM: the first sentence is spoken
     * once the next one begins, before the text is finished. */
    const char *pieces[] = { "One", " two three.", " Four" };
    for (int i = 0; i < 3; i++)
        CHECK(tts_stream_push(a.self, pieces[i], strlen(pieces[i])) == 0);
    pthread_mutex_lock(&l.lock);
    while (!l.order[0])
        pthread_cond_wait(&l.cv, &l.lock);
    pthread_mutex_unlock(&l.lock);
    CHECK_STR_EQ(l.first_sentence, "One two three.");
    CHECK(l.done == 0 && l.samples > 22050 / 2);
    CHECK(tts_stream_push(a.self, " five six.", 10) == 0);
    CHECK(tts_stream_finish(a.self) == 0);
    tts_log_wait(&l, 1);
    CHECK_STR_EQ(l.order, "aa");
    CHECK(!l.cancelled);
    CHECK(tts_stream_push(a.self, "late", 4) == OMNI_ERR_ARG);
    tts_stream_free(a.self);
    tts_free(t);
}

TEST(tts_stream_urgent_first)
{
    struct tts *t = tts_or_fail();
    CHECK(t);
    struct tts_log l = TTS_LOG_INIT(.gate_closed = true);
    char err[256];
    struct tts_tagged g = { &l, 'g', NULL, false, true }, a = { &l, 'a', NULL, false, false },
                      u = { &l, 'u', NULL, false, false };
    struct tts_stream_params pu = tts_stream_default_params();
    pu.urgent = true;
    pu.voice = "en-gb";
    g.self = tts_stream_new(t, NULL, tts_log_event, &g, NULL, err, sizeof err);
    a.self = tts_stream_new(t, NULL, tts_log_event, &a, NULL, err, sizeof err);
    u.self = tts_stream_new(t, &pu, tts_log_event, &u, NULL, err, sizeof err);
    CHECK(g.self && a.self && u.self);
    /* The worker is held inside g's first sentence while a (queued first)
     * and then the urgent u queue theirs: u's go first once it is free. */
    CHECK(tts_stream_push(g.self, "Hold on.", 8) == 0 && tts_stream_finish(g.self) == 0);
    pthread_mutex_lock(&l.lock);
    while (!l.gate_reached)
        pthread_cond_wait(&l.cv, &l.lock);
    pthread_mutex_unlock(&l.lock);
    CHECK(tts_stream_push(a.self, "First normal. Second normal.", 28) == 0);
    CHECK(tts_stream_finish(a.self) == 0);
    CHECK(tts_stream_push(u.self, "Urgent one. Urgent two.", 23) == 0);
    CHECK(tts_stream_finish(u.self) == 0);
    pthread_mutex_lock(&l.lock);
    l.gate_closed = false;
    pthread_cond_broadcast(&l.cv);
    pthread_mutex_unlock(&l.lock);
    tts_log_wait(&l, 3);
    CHECK_STR_EQ(l.order, "guuaa");
    tts_stream_free(g.self);
    tts_stream_free(a.self);
    tts_stream_free(u.self);
    tts_free(t);
}

TEST(tts_stream_cancel_stops_mid_sentence)
{
    struct tts *t = tts_or_fail();
    CHECK(t);
    struct tts_log l = TTS_LOG_INIT();
    char err[256];
    struct tts_tagged c = { &l, 'c', NULL, true, false };
    c.self = tts_stream_new(t, NULL, tts_log_event, &c, NULL, err, sizeof err);
    CHECK(c.self);
    const char *text = "This is a rather long sentence that would take several seconds to speak, "
                       "if it were spoken to the end. And another one follows it here.";
    CHECK(tts_stream_push(c.self, text, strlen(text)) == 0);
    CHECK(tts_stream_finish(c.self) == 0);
    tts_log_wait(&l, 1);
    CHECK(l.cancelled);
    CHECK_MSG(l.samples < 22050 / 2, "%zu samples after cancel", l.samples);  /* one chunk, not seconds */
    CHECK(l.order[0] == 0);                                /* no sentence completed */
    tts_stream_free(c.self);
    /* Freeing a stream that is still speaking cancels it and waits. */
    struct tts_stream *s = tts_stream_new(t, NULL, tts_log_event, &c, NULL, err, sizeof err);
    c.cancel_on_audio = false;
    CHECK(s && tts_stream_push(s, text, strlen(text)) == 0);
    tts_stream_free(s);
    tts_free(t);
}

TEST(tts_limits)
{
    char err[256];
    struct tts_params p = tts_default_params();
    p.max_streams = 2;
    p.max_text_bytes = 16;
    struct tts *t = tts_new(&p, err, sizeof err);
    CHECK(t);
    int code = 0;
    struct tts_log l = TTS_LOG_INIT();
    struct tts_tagged tg = { &l, 'x', NULL, false, false };
    struct tts_stream *a = tts_stream_new(t, NULL, tts_log_event, &tg, NULL, err, sizeof err);
    struct tts_stream *b = tts_stream_new(t, NULL, tts_log_event, &tg, NULL, err, sizeof err);
    CHECK(a && b);
    CHECK(tts_stream_new(t, NULL, tts_log_event, &tg, &code, err, sizeof err) == NULL);
    CHECK_EQ(code, OMNI_ERR_LIMIT);
    CHECK(tts_stream_push(a, "0123456789", 10) == 0);
    CHECK(tts_stream_push(a, "0123456789", 10) == OMNI_ERR_LIMIT);
    tts_stream_free(a);
    tts_stream_free(b);
    tts_free(t);
    CHECK_EQ(l.done, 2);
}

// ---- the round trip through the espeak-trained Whisper ------------------------------

/* Lower-case words without punctuation, for the word error rate. */
static int tts_words(const char *s, char words[][32], int max)
{
    int n = 0;
    size_t k = 0;
    for (const char *p = s;; p++) {
        if (isalnum((unsigned char)*p) || *p == '\'') {
            if (k < 31 && n < max)
                words[n][k++] = (char)tolower((unsigned char)*p);
        } else {
            if (k && n < max) {
                words[n][k] = 0;
                n++;
            }
            k = 0;
            if (!*p)
                break;
        }
    }
    return n;
}

/* Word-level edit distance between ref and hyp. */
static int tts_word_errors(char ref[][32], int nr, char hyp[][32], int nh)
{
    int d[65][65];
    for (int i = 0; i <= nr; i++)
        d[i][0] = i;
    for (int j = 0; j <= nh; j++)
        d[0][j] = j;
    for (int i = 1; i <= nr; i++)
        for (int j = 1; j <= nh; j++) {
            int sub = d[i - 1][j - 1] + (strcmp(ref[i - 1], hyp[j - 1]) != 0);
            int del = d[i - 1][j] + 1, ins = d[i][j - 1] + 1;
            d[i][j] = sub < del ? (sub < ins ? sub : ins) : (del < ins ? del : ins);
        }
    return d[nr][nh];
}

TEST(tts_round_trip_through_whisper)
{
    SKIP_IF_NO_SHARED();
    char err[512];
    char *json = test_read_file(test_shared("models/whisper-tiny-espeak/reference.json"), NULL);
    struct whisper_model *m = json ? whisper_model_load(
        test_shared("models/whisper-tiny-espeak/ggml-tiny-espeak-q8_0.bin"), err, sizeof err) : NULL;
    if (!m) {
        free(json);
        SKIP("whisper-tiny-espeak not present");
    }
    cJSON *ref = cJSON_Parse(json);
    free(json);
    cJSON *tests = cJSON_GetObjectItem(ref, "tests");
    struct tts *t = tts_or_fail();
    struct tpool *tp = tpool_new(2, err, sizeof err);
    struct whisper_state *ws = whisper_state_new(m, tp, err, sizeof err);
    CHECK(t && tp && ws && cJSON_GetArraySize(tests) >= 20);
    struct whisper_full_params wp = whisper_full_default_params(WHISPER_SAMPLING_GREEDY);
    wp.no_timestamps = true;
    wp.max_tokens = 60;
    static const char *voices[] = { "alloy", "echo", "en-us", "onyx", "nova" };
    int errors = 0, words = 0, n = cJSON_GetArraySize(tests);
    for (int i = 0; i < n && i < 24; i++) {
        const char *text = cJSON_GetObjectItem(cJSON_GetArrayItem(tests, i), "text")->valuestring;
        struct tts_stream_params p = tts_stream_default_params();
        p.voice = voices[i % 5];
        float *pcm, *pcm16;
        size_t np, n16;
        int rate;
        CHECK_MSG(tts_synthesize(t, &p, text, &pcm, &np, &rate, err, sizeof err) == 0, "%s", err);
        int rc = media_audio_decode_raw(pcm, np * sizeof *pcm, MEDIA_PCM_F32LE, rate, NULL, &pcm16,
                                        &n16, err, sizeof err);
        free(pcm);
        CHECK_MSG(rc == 0, "%s", err);
        rc = whisper_full(ws, &wp, pcm16, (int64_t)n16, err, sizeof err);
        free(pcm16);
        CHECK_MSG(rc == 0, "%s", err);
        char heard[1024] = "";
        for (int k = 0; k < whisper_full_n_segments(ws); k++)
            strncat(heard, whisper_full_get_segment(ws, k)->text, sizeof heard - strlen(heard) - 1);
        char rw[64][32], hw[64][32];
        int nr = tts_words(text, rw, 64), nh = tts_words(heard, hw, 64);
        int e = tts_word_errors(rw, nr, hw, nh);
        errors += e;
        words += nr;
        if (e)
            fprintf(stderr, "    [%s] \"%s\" -> \"%s\" (%d errors)\n", p.voice, text, heard, e);
    }
    double wer = (double)errors / words;
    fprintf(stderr, "    round trip WER %.1f%% (%d/%d words)\n", 100 * wer, errors, words);
    CHECK_MSG(wer <= 0.35, "word error rate %.1f%%", 100 * wer);
    whisper_state_free(ws);
    tpool_free(tp);
    whisper_model_free(m);
    tts_free(t);
    cJSON_Delete(ref);
}
