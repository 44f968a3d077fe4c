/* bench_stt.c - `omniserve bench-stt -m ggml-*.bin --file AUDIO`: Whisper speed.
 *
 * Three numbers, each the median over --reps repetitions after one untimed
 * warm-up (which pages the mapped weights in): the encoder's time for one
 * 30 s window (whisper_encode, cross-attention K/V included; --audio-ctx:
 * the positions that transcription uses), the decoder's
 * time per token (single-token steps after the start-of-transcript prompt,
 * fed their own argmax so EOT never ends a run early: random-weight models
 * time the same as real ones), and the real-time factor of a whole greedy
 * transcription of the file (whisper_full without temperature fallback,
 * wall time / audio duration; below 1 is faster than real time).
 *
 * --stream VAD.bin measures streaming latency instead: the file is pushed
 * into an stt session (server VAD, partials every 500 ms, as /v1/realtime
 * runs it) in 20 ms chunks paced by the wall clock (--speed times real
 * time), then 1.5 s of silence; for each turn it reports the time from the
 * speech_stopped event to the final transcript, and from the moment the
 * speech's end (the stopped event's audio time) was pushed to the final.
 * With --concurrency N, N sessions (one lane each, one batcher) hear the file
 * at the same times: every turn ends together, the worst case.
 *
 * --concurrency N measures batching instead: N greedy transcriptions of the
 * file started together on N states of one batcher (as the server's speech
 * lanes run them) against the baseline of the same N transcriptions one
 * after another on one standalone state, same threads; it reports both wall
 * times, their ratio, and how many requests the passes merged. */
#include "src/cli/cli.h"
#include "src/cli/args.h"
#include "src/cli/bench_util.h"

#include "audio/mel.h"
#include "audio/whisper.h"
#include "audio/whisper_batch.h"
#include "media/audio.h"
#include "src/core/cpu.h"
#include "src/core/omni.h"
#include "src/core/threadpool.h"
#include "src/stt/stt.h"
#include "src/stt/stt_session.h"

#include <math.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct bstt_opts {
    const char *model, *file;
    int n_threads;
    int reps;
    int n_tokens;     /* decoder steps timed per repetition */
    int max_tokens;   /* per window in the RTF run; 0: the model's (half the text context) */
    bool json_only;
    const char *vad;  /* --stream: the Silero VAD model; measure streaming latency */
    double speed;     /* --stream: feed this many times faster than real time */
    int concurrency;  /* --concurrency: batched transcriptions against serial ones */
    int audio_ctx;    /* encoder positions (whisper_full_params.audio_ctx); 0: all */
};

static void bstt_usage(FILE *f)
{
    fprintf(f,
            "usage: omniserve bench-stt -m ggml-MODEL.bin --file AUDIO [options]\n"
            "  -m, --model FILE  whisper.cpp ggml model\n"
            "  --file AUDIO      audio of any format ffmpeg reads (the RTF is measured on it)\n"
            "  -t, --threads N   compute threads (default: physical cores, %d here)\n"
            "  --reps R          repetitions; medians are reported (default 3)\n"
            "  --tokens N        decoder steps timed per repetition (default 32)\n"
            "  --max-tokens N    tokens per 30 s window in the RTF run (default: half the\n"
            "                    text context; random weights never stop earlier)\n"
            "  --audio-ctx N|auto  encoder positions per window (default: all 1500); auto:\n"
            "                    the file's audio plus the default margin, as the live\n"
            "                    sessions decode\n"
            "  --json            print only {\"encoder_ms\":..,\"decoder_ms_per_token\":..,\"rtf\":..}\n"
            "  --stream VAD.bin  streaming latency instead: the file fed to an stt session with\n"
            "                    this Silero VAD model; per turn, speech end to final transcript\n"
            "  --speed X         --stream: feed X times real time (default 1)\n"
            "  --concurrency N   batching instead: N transcriptions at once through one batcher\n"
            "                    against the same N one after another (the baseline);\n"
            "                    prints {\"serial_s\":..,\"batched_s\":..,\"speedup\":..};\n"
            "                    with --stream: N sessions speaking at the same times\n",
            omni_physical_cores());
}

/* cli_long into an int field. */
static bool bstt_int(const char *opt, const char *s, long lo, long hi, int *out)
{
    long v;
    if (cli_long("bench-stt", opt, s, lo, hi, &v))
        return false;
    *out = (int)v;
    return true;
}

/* 0 on success, 2 on bad usage, -1 when --help was printed. */
static int bstt_parse(int argc, char **argv, struct bstt_opts *o)
{
    *o = (struct bstt_opts){ .n_threads = omni_physical_cores(), .reps = 3, .n_tokens = 32,
                             .speed = 1 };
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            bstt_usage(stdout);
            return -1;
        }
        if (!strcmp(a, "--json")) {
            o->json_only = true;
            continue;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "bench-stt: %s needs a value (see --help)\n", a);
            return 2;
        }
        const char *v = argv[++i];
        if (!strcmp(a, "-m") || !strcmp(a, "--model"))
            o->model = v;
        else if (!strcmp(a, "--file") || !strcmp(a, "-f"))
            o->file = v;
        else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) {
            if (!bstt_int(a, v, 1, 1024, &o->n_threads))
                return 2;
        } else if (!strcmp(a, "--reps") || !strcmp(a, "-r")) {
            if (!bstt_int(a, v, 1, 1000, &o->reps))
                return 2;
        } else if (!strcmp(a, "--tokens")) {
            if (!bstt_int(a, v, 1, 400, &o->n_tokens))
                return 2;
        } else if (!strcmp(a, "--max-tokens")) {
            if (!bstt_int(a, v, 1, 400, &o->max_tokens))
                return 2;
        } else if (!strcmp(a, "--audio-ctx")) {
            if (!strcmp(v, "auto"))
                o->audio_ctx = WHISPER_AUDIO_CTX_AUTO;
            else if (!bstt_int(a, v, 1, WHISPER_CHUNK_FRAMES / 2, &o->audio_ctx))
                return 2;
        } else if (!strcmp(a, "--concurrency")) {
            if (!bstt_int(a, v, 1, 64, &o->concurrency))
                return 2;
        } else if (!strcmp(a, "--stream")) {
            o->vad = v;
        } else if (!strcmp(a, "--speed")) {
            char *end;
            o->speed = strtod(v, &end);
            if (*end || !(o->speed >= 0.1 && o->speed <= 100)) {
                fprintf(stderr, "bench-stt: --speed wants a number in [0.1, 100], not '%s'\n", v);
                return 2;
            }
        } else {
            fprintf(stderr, "bench-stt: unknown option '%s' (see --help)\n", a);
            return 2;
        }
    }
    if (!o->model || !o->file) {
        fprintf(stderr, "bench-stt: -m MODEL and --file AUDIO are required (see --help)\n");
        return 2;
    }
    return 0;
}

/* Argmax of the last logits; -1 when one is NaN or infinite (a broken pass). */
static int32_t bstt_argmax(const struct whisper_state *s, int n_vocab)
{
    const float *l = whisper_logits(s);
    int32_t best = 0;
    for (int i = 0; i < n_vocab; i++) {
        if (!isfinite(l[i]))
            return -1;
        if (l[i] > l[best])
            best = i;
    }
    return best;
}

/* The decoder prompt of a transcription without timestamps: [sot, (en,
 * transcribe,) notimestamps]. Returns its length. */
static int bstt_prompt(const struct whisper_model *m, int32_t *p)
{
    int n = 0;
    p[n++] = whisper_token_special(m, WHISPER_TOKEN_SOT);
    if (whisper_is_multilingual(m)) {
        p[n++] = whisper_token_lang(m, whisper_lang_id("en"));
        p[n++] = whisper_token_special(m, WHISPER_TOKEN_TRANSCRIBE);
    }
    p[n++] = whisper_token_special(m, WHISPER_TOKEN_NOT);
    return n;
}

/* One decoder run: the prompt, then n_tokens timed single-token steps.
 * Returns ms per token, or -1 with a message. */
static double bstt_decode(struct whisper_state *s, const struct whisper_model *m, int n_tokens,
                          char *err, size_t errlen)
{
    const struct whisper_hparams *hp = whisper_model_hparams(m);
    int32_t prompt[4];
    int n_past = bstt_prompt(m, prompt);
    for (int i = 0; i < n_past; i++)
        if (prompt[i] < 0) {
            snprintf(err, errlen, "the vocabulary (%d) lacks Whisper's special tokens", hp->n_vocab);
            return -1;
        }
    if (n_past + n_tokens > hp->n_text_ctx)
        n_tokens = hp->n_text_ctx - n_past;
    if (whisper_decode(s, 0, prompt, n_past, 0, false, err, errlen) < 0)
        return -1;
    int32_t tok = bstt_argmax(s, hp->n_vocab);
    double t = 0;
    for (int i = 0; i < n_tokens && tok >= 0; i++, n_past++) {
        double t0 = omni_time_s();
        int rc = whisper_decode(s, 0, &tok, 1, n_past, false, err, errlen);
        t += omni_time_s() - t0;
        if (rc < 0)
            return -1;
        tok = bstt_argmax(s, hp->n_vocab);
    }
    if (tok < 0) {
        snprintf(err, errlen, "non-finite logits (NaN or inf): the decoder is broken");
        return -1;
    }
    return t * 1e3 / n_tokens;
}

// ---- --stream: speech end to final transcript ---------------------------------

#define BSTT_MAX_TURNS 256

/* What the session reported, per turn (item 1.. at index item-1). */
struct bstt_rec {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    double t0;                                 /* wall time the first sample was pushed */
    double speed;
    double stopped_s[BSTT_MAX_TURNS];          /* wall time of speech_stopped; {lock} */
    double speech_end_s[BSTT_MAX_TURNS];       /* wall time the speech's end was pushed; {lock} */
    double final_s[BSTT_MAX_TURNS];            /* wall time of the final; {lock} */
    int n_stopped, n_final;                    /* {lock} */
    bool freed;                                /* {lock} */
};

static void bstt_on_event(void *user, const struct stt_event *ev)
{
    struct bstt_rec *r = user;
    double now = omni_time_s();
    int i = ev->item - 1;
    if (i < 0 || i >= BSTT_MAX_TURNS)
        return;
    pthread_mutex_lock(&r->lock);
    if (ev->type == STT_EV_SPEECH_STOPPED) {
        r->stopped_s[i] = now;
        r->speech_end_s[i] = r->t0 + ev->audio_ms / 1e3 / r->speed;
        r->n_stopped++;
    } else if (ev->type == STT_EV_FINAL) {
        r->final_s[i] = now;
        r->n_final++;
        fprintf(stderr, "bench-stt: turn %d: %.0f ms after speech_stopped:%s\n", ev->item,
                (now - r->stopped_s[i]) * 1e3, ev->text);
    } else if (ev->type == STT_EV_ERROR) {
        fprintf(stderr, "bench-stt: turn %d: %s\n", ev->item, ev->text);
    }
    pthread_cond_broadcast(&r->cond);
    pthread_mutex_unlock(&r->lock);
}

static void bstt_on_free(void *user)
{
    struct bstt_rec *r = user;
    pthread_mutex_lock(&r->lock);
    r->freed = true;
    pthread_cond_broadcast(&r->cond);
    pthread_mutex_unlock(&r->lock);
}

static void bstt_sleep_until(double t)
{
    double d = t - omni_time_s();
    if (d > 0) {
        struct timespec ts = { (time_t)d, (long)((d - (time_t)d) * 1e9) };
        nanosleep(&ts, NULL);
    }
}

/* Push n samples (silence when pcm is NULL) in 20 ms chunks, each once the
 * wall clock reaches its time; *pushed counts the samples of the stream. */
static int bstt_feed(struct stt_session *ss, const struct bstt_rec *r, const float *pcm,
                     size_t n, int64_t *pushed, char *err, size_t errlen)
{
    enum { CHUNK = WHISPER_SAMPLE_RATE_HZ / 50 };
    int16_t buf[CHUNK];
    for (size_t i = 0; i < n; i += CHUNK) {
        size_t k = n - i < CHUNK ? n - i : CHUNK;
        for (size_t j = 0; j < k; j++) {
            float v = pcm ? pcm[i + j] * 32767.0f : 0.0f;
            buf[j] = (int16_t)(v > 32767.0f ? 32767.0f : v < -32768.0f ? -32768.0f : v);
        }
        *pushed += (int64_t)k;
        bstt_sleep_until(r->t0 + (double)*pushed / WHISPER_SAMPLE_RATE_HZ / r->speed);
        if (stt_session_push(ss, buf, k * sizeof *buf, err, errlen) < 0)
            return -1;
    }
    return 0;
}

static double bstt_max(const double *v, int n)
{
    double m = 0;
    for (int i = 0; i < n; i++)
        m = v[i] > m ? v[i] : m;
    return m;
}

/* One streaming session and the thread that feeds it. */
struct bstt_feeder {
    struct stt_session *ss;
    struct bstt_rec *r;
    const struct bstt_opts *o;
    const float *pcm;
    size_t n_pcm;
    int rc;
    char err[256];
};

/* The file --reps times into the session, 1.5 s of silence after each. */
static void *bstt_feeder_main(void *arg)
{
    struct bstt_feeder *f = arg;
    int64_t pushed = 0;
    for (int rep = 0; rep < f->o->reps && f->rc == 0; rep++)
        if (bstt_feed(f->ss, f->r, f->pcm, f->n_pcm, &pushed, f->err, sizeof f->err) < 0 ||
            bstt_feed(f->ss, f->r, NULL, WHISPER_SAMPLE_RATE_HZ * 3 / 2, &pushed, f->err, sizeof f->err) < 0)
            f->rc = -1;
    return NULL;
}

/* --stream: --concurrency sessions (default 1) speaking at the same times,
 * one lane each, all through one batcher. */
static int bstt_stream(const struct bstt_opts *o)
{
    const int n_sess = o->concurrency > 0 ? o->concurrency : 1;
    char err[512];
    struct stt *svc = NULL;
    float *pcm = NULL;
    size_t n_pcm = 0;
    int ret = 1, started = 0;
    struct bstt_rec *recs = calloc((size_t)n_sess, sizeof *recs);
    struct bstt_feeder *feeders = calloc((size_t)n_sess, sizeof *feeders);
    pthread_t *th = calloc((size_t)n_sess, sizeof *th);
    double *from_stop = calloc((size_t)n_sess * BSTT_MAX_TURNS, sizeof *from_stop);
    double *from_end = calloc((size_t)n_sess * BSTT_MAX_TURNS, sizeof *from_end);
    if (!recs || !feeders || !th || !from_stop || !from_end) {
        fprintf(stderr, "bench-stt: out of memory\n");
        goto done;
    }
    struct stt_params sp = stt_default_params();
    sp.model_path = o->model;
    sp.vad_path = o->vad;
    sp.n_workers = n_sess;
    sp.n_threads = o->n_threads;
    struct media_audio_params ap = media_audio_default_params();
    if (!(svc = stt_new(&sp, err, sizeof err)) ||
        media_audio_decode_file(o->file, &ap, &pcm, &n_pcm, err, sizeof err) < 0) {
        fprintf(stderr, "bench-stt: %s\n", err);
        goto done;
    }
    for (int i = 0; i < n_sess; i++) {
        struct bstt_rec *r = &recs[i];
        pthread_mutex_init(&r->lock, NULL);
        pthread_cond_init(&r->cond, NULL);
        r->speed = o->speed;
        struct stt_session_params p = stt_session_default_params();
        p.input_rate_hz = WHISPER_SAMPLE_RATE_HZ;
        p.language = "en";
        p.on_event = bstt_on_event;
        p.on_free = bstt_on_free;
        p.user = r;
        feeders[i] = (struct bstt_feeder){ .r = r, .o = o, .pcm = pcm, .n_pcm = n_pcm };
        if (!(feeders[i].ss = stt_session_new(svc, &p, err, sizeof err))) {
            fprintf(stderr, "bench-stt: %s\n", err);
            goto done;
        }
    }
    fprintf(stderr, "bench-stt: streaming %s %d times at %.1fx real time into %d session(s), %d threads\n",
            o->file, o->reps, o->speed, n_sess, o->n_threads);
    const double t0 = omni_time_s();
    for (int i = 0; i < n_sess; i++)
        recs[i].t0 = t0;
    for (; started < n_sess; started++)
        if (pthread_create(&th[started], NULL, bstt_feeder_main, &feeders[started]) != 0)
            break;
    for (int i = 0; i < started; i++)
        pthread_join(th[i], NULL);
    for (int i = 0; i < n_sess; i++)
        if (i >= started || feeders[i].rc < 0) {
            fprintf(stderr, "bench-stt: session %d: %s\n", i, i < started ? feeders[i].err : "no thread");
            goto done;
        }
    int n_ok = 0, n_stopped = 0;
    const double deadline = omni_time_s() + 120;
    for (int i = 0; i < n_sess; i++) {
        struct bstt_rec *r = &recs[i];
        pthread_mutex_lock(&r->lock);
        while (r->n_final < r->n_stopped && omni_time_s() < deadline) {
            pthread_mutex_unlock(&r->lock);
            bstt_sleep_until(omni_time_s() + 0.01);
            pthread_mutex_lock(&r->lock);
        }
        const int n = r->n_stopped < BSTT_MAX_TURNS ? r->n_stopped : BSTT_MAX_TURNS;
        n_stopped += n;
        for (int k = 0; k < n; k++)
            if (r->final_s[k] > 0 && r->stopped_s[k] > 0) {
                from_stop[n_ok] = (r->final_s[k] - r->stopped_s[k]) * 1e3;
                from_end[n_ok++] = (r->final_s[k] - r->speech_end_s[k]) * 1e3;
            }
        pthread_mutex_unlock(&r->lock);
    }
    if (!n_ok) {
        fprintf(stderr, "bench-stt: no turn got a final transcript (%d stopped)\n", n_stopped);
        goto done;
    }
    double max_stop = bstt_max(from_stop, n_ok), max_end = bstt_max(from_end, n_ok);
    double med_stop = bench_median(from_stop, n_ok), med_end = bench_median(from_end, n_ok);
    if (!o->json_only) {
        printf("model    %s, %d threads, %.1fx real time, %d session(s)\n", o->model, o->n_threads, o->speed,
               n_sess);
        printf("final    %.0f ms after speech_stopped (median of %d turns; max %.0f)\n", med_stop, n_ok,
               max_stop);
        printf("final    %.0f ms after the speech's end was pushed (median; max %.0f)\n", med_end, max_end);
    }
    printf("{\"final_after_stopped_ms\":%.1f,\"final_after_stopped_max_ms\":%.1f,"
           "\"final_after_speech_end_ms\":%.1f,\"final_after_speech_end_max_ms\":%.1f,"
           "\"turns\":%d,\"sessions\":%d,\"threads\":%d,\"speed\":%.2f}\n",
           med_stop, max_stop, med_end, max_end, n_ok, n_sess, o->n_threads, o->speed);
    fflush(stdout);
    ret = 0;
done:
    for (int i = 0; feeders && i < n_sess; i++) {
        if (!feeders[i].ss)
            continue;
        struct bstt_rec *r = &recs[i];
        stt_session_close(feeders[i].ss);
        pthread_mutex_lock(&r->lock);
        while (!r->freed)
            pthread_cond_wait(&r->cond, &r->lock);
        pthread_mutex_unlock(&r->lock);
    }
    stt_free(svc);
    free(pcm);
    free(recs);
    free(feeders);
    free(th);
    free(from_stop);
    free(from_end);
    return ret;
}

// ---- --concurrency: batched transcriptions against serial ones -------------------

struct bstt_lane {
    struct whisper_state *s;
    const struct whisper_full_params *fp;
    const float *pcm;
    size_t n;
    int rc;
    char err[256];
    char *text;      /* the transcript, to compare with the serial one */
};

static char *bstt_text(const struct whisper_state *s)
{
    size_t len = 1;
    for (int i = 0; i < whisper_full_n_segments(s); i++)
        len += strlen(whisper_full_get_segment(s, i)->text);
    char *t = calloc(1, len);
    for (int i = 0; t && i < whisper_full_n_segments(s); i++)
        strcat(t, whisper_full_get_segment(s, i)->text);
    return t;
}

static void *bstt_lane_main(void *arg)
{
    struct bstt_lane *l = arg;
    l->rc = whisper_full(l->s, l->fp, l->pcm, (int64_t)l->n, l->err, sizeof l->err);
    free(l->text);
    l->text = l->rc < 0 ? NULL : bstt_text(l->s);
    return NULL;
}

static int bstt_concurrent(const struct bstt_opts *o)
{
    const int n = o->concurrency;
    char err[512];
    struct whisper_model *m = NULL;
    struct whisper_batcher *b = NULL;
    struct tpool *tp = NULL;
    struct whisper_state *solo = NULL;
    struct bstt_lane lanes[64] = { 0 };
    float *pcm = NULL;
    size_t n_pcm = 0;
    double *serial = calloc((size_t)o->reps, sizeof *serial), *batched = calloc((size_t)o->reps, sizeof *batched);
    char *serial_text = NULL;
    int ret = 1, identical = 0;

    fprintf(stderr, "bench-stt: loading %s\n", o->model);
    struct whisper_batcher_params bp = whisper_batcher_default_params();
    bp.n_threads = o->n_threads;
    struct media_audio_params ap = media_audio_default_params();
    if (!serial || !batched || !(m = whisper_model_load(o->model, err, sizeof err)) ||
        !(tp = tpool_new(o->n_threads, err, sizeof err)) || !(solo = whisper_state_new(m, tp, err, sizeof err)) ||
        !(b = whisper_batcher_new(m, &bp, err, sizeof err)) ||
        media_audio_decode_file(o->file, &ap, &pcm, &n_pcm, err, sizeof err) < 0)
        goto fail;
    struct whisper_full_params fp = whisper_full_default_params(WHISPER_SAMPLING_GREEDY);
    fp.language = "en";
    fp.no_timestamps = true;
    fp.temperature_inc = 0;
    fp.max_tokens = o->max_tokens;
    for (int i = 0; i < n; i++) {
        lanes[i] = (struct bstt_lane){ .s = whisper_state_new_batched(b, err, sizeof err), .fp = &fp, .pcm = pcm,
                                       .n = n_pcm };
        if (!lanes[i].s)
            goto fail;
    }
    const double audio_s = (double)n_pcm / WHISPER_SAMPLE_RATE_HZ;
    fprintf(stderr, "bench-stt: %d transcriptions of %.2f s of audio, %d threads: serial, then batched\n", n,
            audio_s, o->n_threads);
    for (int r = -1; r < o->reps; r++) {   /* r = -1: warm-up */
        double t0 = omni_time_s();
        for (int i = 0; i < n; i++)
            if (whisper_full(solo, &fp, pcm, (int64_t)n_pcm, err, sizeof err) < 0)
                goto fail;
        const double t_serial = omni_time_s() - t0;
        free(serial_text);
        if (!(serial_text = bstt_text(solo)))
            goto nomem;
        pthread_t th[64];
        int started = 0;
        t0 = omni_time_s();
        for (; started < n; started++)
            if (pthread_create(&th[started], NULL, bstt_lane_main, &lanes[started]) != 0)
                break;
        for (int i = 0; i < started; i++)
            pthread_join(th[i], NULL);
        const double t_batched = omni_time_s() - t0;
        if (started < n) {
            snprintf(err, sizeof err, "cannot start %d threads", n);
            goto fail;
        }
        identical = 0;
        for (int i = 0; i < n; i++) {
            if (lanes[i].rc < 0) {
                snprintf(err, sizeof err, "%s", lanes[i].err);
                goto fail;
            }
            identical += lanes[i].text && !strcmp(lanes[i].text, serial_text);
        }
        if (r < 0)
            continue;
        serial[r] = t_serial;
        batched[r] = t_batched;
        fprintf(stderr, "bench-stt: rep %d/%d: serial %.3f s, batched %.3f s (%.2fx), %d/%d transcripts "
                "identical\n", r + 1, o->reps, t_serial, t_batched, t_serial / t_batched, identical, n);
    }
    struct whisper_batcher_stats st;
    whisper_batcher_stats(b, &st);
    const double ts = bench_median(serial, o->reps), tb = bench_median(batched, o->reps);
    const double per_pass = st.dec_passes ? (double)st.dec_requests / st.dec_passes : 0;
    if (!o->json_only) {
        printf("model    %s, %d threads, %d transcriptions of %.2f s\n", o->model, o->n_threads, n, audio_s);
        printf("serial   %.3f s (baseline: one after another; median of %d)\n", ts, o->reps);
        printf("batched  %.3f s (all at once through one batcher) = %.2fx the baseline's speed\n", tb, ts / tb);
        printf("passes   %.2f requests per decoder pass (at most %d), %.2f windows per encoder pass\n", per_pass,
               st.max_dec_requests, st.enc_passes ? (double)st.enc_windows / st.enc_passes : 0);
    }
    printf("{\"concurrency\":%d,\"serial_s\":%.4f,\"batched_s\":%.4f,\"speedup\":%.3f,"
           "\"requests_per_decoder_pass\":%.2f,\"decoder_batch_max\":%d,\"identical\":%d,\"threads\":%d,"
           "\"audio_s\":%.3f,\"reps\":%d}\n",
           n, ts, tb, ts / tb, per_pass, st.max_dec_requests, identical, o->n_threads, audio_s, o->reps);
    fflush(stdout);
    ret = 0;
    goto done;
nomem:
    snprintf(err, sizeof err, "out of memory");
fail:
    fprintf(stderr, "bench-stt: %s\n", err);
done:
    for (int i = 0; i < n; i++) {
        whisper_state_free(lanes[i].s);
        free(lanes[i].text);
    }
    whisper_batcher_free(b);
    whisper_state_free(solo);
    tpool_free(tp);
    whisper_model_free(m);
    free(pcm);
    free(serial);
    free(batched);
    free(serial_text);
    return ret;
}

int cli_bench_stt(int argc, char **argv)
{
    struct bstt_opts o;
    int rc = bstt_parse(argc, argv, &o);
    if (rc)
        return rc < 0 ? 0 : rc;
    if (o.vad)
        return bstt_stream(&o);
    if (o.concurrency)
        return bstt_concurrent(&o);

    char err[512];
    struct whisper_model *m = NULL;
    struct whisper_state *s = NULL;
    struct tpool *tp = NULL;
    struct mel_spec mel = { 0 };
    float *pcm = NULL;
    size_t n_pcm = 0;
    double *enc = NULL, *dec = NULL, *rtf = NULL;
    int ret = 1;

    fprintf(stderr, "bench-stt: loading %s\n", o.model);
    if (!(m = whisper_model_load(o.model, err, sizeof err)) ||
        !(tp = tpool_new(o.n_threads, err, sizeof err)) ||
        !(s = whisper_state_new(m, tp, err, sizeof err))) {
        fprintf(stderr, "bench-stt: %s\n", err);
        goto done;
    }
    const struct whisper_hparams *hp = whisper_model_hparams(m);
    struct media_audio_params ap = media_audio_default_params();
    if (media_audio_decode_file(o.file, &ap, &pcm, &n_pcm, err, sizeof err) < 0) {
        fprintf(stderr, "bench-stt: %s\n", err);
        goto done;
    }
    double audio_s = (double)n_pcm / WHISPER_SAMPLE_RATE_HZ;
    if (n_pcm < WHISPER_SAMPLE_RATE_HZ / 10) {
        fprintf(stderr, "bench-stt: %s: %.2f s of audio is too short to measure\n", o.file, audio_s);
        goto done;
    }
    if (mel_compute(tp, whisper_model_mel_filters(m), hp->n_mels, pcm, (int64_t)n_pcm, MEL_PAD_30S,
                    &mel, err, sizeof err) < 0) {
        fprintf(stderr, "bench-stt: %s\n", err);
        goto done;
    }
    enc = malloc(sizeof *enc * (size_t)o.reps);
    dec = malloc(sizeof *dec * (size_t)o.reps);
    rtf = malloc(sizeof *rtf * (size_t)o.reps);
    if (!enc || !dec || !rtf) {
        fprintf(stderr, "bench-stt: out of memory\n");
        goto done;
    }
    fprintf(stderr, "bench-stt: %d layers, %.1f MiB of weights, %.2f s of audio, %d threads\n",
            hp->n_audio_layer, whisper_model_size_bytes(m) / 1048576.0, audio_s, o.n_threads);

    struct whisper_full_params fp = whisper_full_default_params(WHISPER_SAMPLING_GREEDY);
    fp.language = "en";
    fp.no_timestamps = true;
    fp.temperature_inc = 0;   /* one pass per window: random weights would retry every time */
    fp.max_tokens = o.max_tokens;
    fp.audio_ctx = o.audio_ctx;
    const int enc_ctx = whisper_full_window_ctx(m, &fp, (int)(n_pcm / MEL_HOP));
    int n_tokens_out = 0;
    for (int r = -1; r < o.reps; r++) {   /* r = -1: warm-up */
        double t0 = omni_time_s();
        if (whisper_encode_ctx(s, mel.data, mel.n_frames, 0, enc_ctx, err, sizeof err) < 0)
            goto fail;
        double e = (omni_time_s() - t0) * 1e3;
        double d = bstt_decode(s, m, o.n_tokens, err, sizeof err);
        if (d < 0)
            goto fail;
        t0 = omni_time_s();
        if (whisper_full(s, &fp, pcm, (int64_t)n_pcm, err, sizeof err) < 0)
            goto fail;
        double f = omni_time_s() - t0;
        n_tokens_out = 0;
        for (int i = 0; i < whisper_full_n_segments(s); i++)
            n_tokens_out += whisper_full_get_segment(s, i)->n_tokens;
        if (r < 0)
            continue;
        enc[r] = e;
        dec[r] = d;
        rtf[r] = f / audio_s;
        fprintf(stderr, "bench-stt: rep %d/%d: encoder %.1f ms, decoder %.2f ms/token, "
                "rtf %.3f (%d tokens)\n", r + 1, o.reps, e, d, rtf[r], n_tokens_out);
    }
    double enc_ms = bench_median(enc, o.reps), dec_ms = bench_median(dec, o.reps),
           rtf_med = bench_median(rtf, o.reps);
    if (!o.json_only) {
        char cpu[160];
        omni_cpu_describe(cpu, sizeof cpu);
        printf("model    %s (%d/%d layers, state %d, vocab %d)\n", o.model, hp->n_audio_layer,
               hp->n_text_layer, hp->n_audio_state, hp->n_vocab);
        printf("cpu      %s, %d threads\n", cpu, o.n_threads);
        printf("encoder  %.1f ms per window of %d positions (%.2f s; median of %d)\n", enc_ms, enc_ctx,
               enc_ctx * 0.02, o.reps);
        printf("decoder  %.2f ms per token  (median of %d, %d tokens)\n", dec_ms, o.reps,
               o.n_tokens);
        printf("rtf      %.4f on %.2f s of audio (%d tokens; median of %d)\n", rtf_med, audio_s,
               n_tokens_out, o.reps);
    }
    printf("{\"encoder_ms\":%.3f,\"decoder_ms_per_token\":%.3f,\"rtf\":%.5f,\"threads\":%d,"
           "\"cpu\":\"%s\",\"audio_s\":%.3f,\"reps\":%d,\"audio_ctx\":%d}\n",
           enc_ms, dec_ms, rtf_med, o.n_threads, omni_cpu_level_name(omni_cpu_level()), audio_s,
           o.reps, enc_ctx);
    fflush(stdout);
    ret = 0;
    goto done;
fail:
    fprintf(stderr, "bench-stt: %s\n", err);
done:
    free(enc);
    free(dec);
    free(rtf);
    mel_spec_free(&mel);
    free(pcm);
    whisper_state_free(s);
    tpool_free(tp);
    whisper_model_free(m);
    return ret;
}
