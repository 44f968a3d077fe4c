/* transcribe.c - `omniserve transcribe`: speech to text with a whisper.cpp
 * ggml model. Audio of any format ffmpeg reads is decoded to 16 kHz mono
 * (media/audio.h); the result is printed as plain text, OpenAI's json /
 * verbose_json response bodies, or SRT / WebVTT subtitles. With --parallel N,
 * N files are transcribed at once through one batcher (audio/whisper_batch.h)
 * and printed in the order given. */
#include "src/cli/cli.h"
#include "src/cli/args.h"

#include "audio/whisper.h"
#include "audio/whisper_batch.h"
#include "audio/whisper_dev.h"
#include "media/audio.h"
#include "src/core/omni.h"
#include "src/core/threadpool.h"

#include <cJSON.h>
#include <ctype.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum fmt { FMT_TEXT, FMT_JSON, FMT_VERBOSE_JSON, FMT_SRT, FMT_VTT };
static const char *const fmt_names[] = { "text", "json", "verbose_json", "srt", "vtt" };

static void transcribe_usage(FILE *f)
{
    fprintf(f,
            "usage: omniserve transcribe -m ggml-MODEL.bin FILE... [options]\n"
            "  (several files: one result after another, one line each with json formats)\n"
            "  -m, --model FILE        whisper.cpp ggml model (any size, f16/f32/q4_0..q8_0)\n"
            "  --format F              text | json | verbose_json | srt | vtt (default text)\n"
            "  --language L            spoken language code (en, de, ...) or auto (default: auto;\n"
            "                          English-only models always use en)\n"
            "  --translate             translate to English instead of transcribing\n"
            "  --beam-size N           beam search with N beams (1..%d; default greedy)\n"
            "  --best-of N             candidates when sampling at temperature > 0 (default 5)\n"
            "  --temperature T         first decoding temperature (default 0)\n"
            "  --no-fallback           no retries at higher temperatures\n"
            "  --prompt TEXT           initial prompt (spelling, names, style)\n"
            "  --timestamps, --no-timestamps\n"
            "                          decode with / without timestamp tokens; default: with\n"
            "                          them for the formats that show times (verbose_json,\n"
            "                          srt, vtt), without for text and json, as the\n"
            "                          OpenAI API does\n"
            "  --no-suppress           sample blank, EOT and special tokens like any other\n"
            "  --max-tokens N          tokens per 30 s window (default: half the text context)\n"
            "  --audio-ctx N|auto      encoder positions per window, 20 ms each (default: all\n"
            "                          1500 = 30 s); N: windows of N * 20 ms; auto: each\n"
            "                          window's audio plus --audio-ctx-margin (faster on\n"
            "                          short audio; see docs/audio.md for the accuracy)\n"
            "  --audio-ctx-margin N    auto: positions past the audio's end (default %d)\n"
            "  --threads N             worker threads (default: physical cores)\n"
            "  --device cpu|cuda|cuda:N  where the encoder and decoder run (default cpu)\n"
            "  --parallel N            transcribe N files at once, sharing batched passes\n"
            "                          (default 1); results still come in the order given\n",
            WHISPER_MAX_BEAMS, WHISPER_AUDIO_CTX_MARGIN);
}

/* "00:01:02,345" (SRT) or "00:01:02.345" (VTT) */
static void print_time(int64_t ms, char sep)
{
    printf("%02lld:%02lld:%02lld%c%03lld", (long long)(ms / 3600000), (long long)(ms / 60000 % 60),
           (long long)(ms / 1000 % 60), sep, (long long)(ms % 1000));
}

static const char *skip_space(const char *s)
{
    while (isspace((unsigned char)*s))
        s++;
    return s;
}

/* All segment texts joined, leading space removed (OpenAI's "text"). */
static char *full_text(const struct whisper_state *s)
{
    size_t len = 1;
    for (int i = 0; i < whisper_full_n_segments(s); i++)
        len += strlen(whisper_full_get_segment(s, i)->text);
    char *t = malloc(len);
    if (!t)
        return NULL;
    t[0] = 0;
    for (int i = 0; i < whisper_full_n_segments(s); i++)
        strcat(t, whisper_full_get_segment(s, i)->text);
    memmove(t, skip_space(t), strlen(skip_space(t)) + 1);
    return t;
}

static int print_json(const struct whisper_state *s, bool verbose, bool translate, double duration_s)
{
    char *text = full_text(s);
    cJSON *o = cJSON_CreateObject();
    if (!text || !o)
        goto nomem;
    if (verbose) {
        cJSON_AddStringToObject(o, "task", translate ? "translate" : "transcribe");
        cJSON_AddStringToObject(o, "language", whisper_full_lang(s));
        cJSON_AddNumberToObject(o, "duration", duration_s);
    }
    cJSON_AddStringToObject(o, "text", text);
    if (verbose) {
        cJSON *segs = cJSON_AddArrayToObject(o, "segments");
        for (int i = 0; segs && i < whisper_full_n_segments(s); i++) {
            const struct whisper_segment *g = whisper_full_get_segment(s, i);
            cJSON *j = cJSON_CreateObject();
            if (!j)
                goto nomem;
            cJSON_AddItemToArray(segs, j);
            cJSON_AddNumberToObject(j, "id", i);
            cJSON_AddNumberToObject(j, "seek", (double)(g->t0_ms / 10));
            cJSON_AddNumberToObject(j, "start", g->t0_ms / 1000.0);
            cJSON_AddNumberToObject(j, "end", g->t1_ms / 1000.0);
            cJSON_AddStringToObject(j, "text", g->text);
            cJSON *toks = cJSON_AddArrayToObject(j, "tokens");
            for (int k = 0; toks && k < g->n_tokens; k++)
                cJSON_AddItemToArray(toks, cJSON_CreateNumber(g->tokens[k].id));
            cJSON_AddNumberToObject(j, "temperature", g->temperature);
            cJSON_AddNumberToObject(j, "avg_logprob", g->avg_logprob);
            cJSON_AddNumberToObject(j, "compression_ratio", g->compression_ratio);
            cJSON_AddNumberToObject(j, "no_speech_prob", g->no_speech_prob);
        }
    }
    char *out = cJSON_PrintUnformatted(o);
    if (!out)
        goto nomem;
    puts(out);
    cJSON_free(out);
    cJSON_Delete(o);
    free(text);
    return 0;
nomem:
    cJSON_Delete(o);
    free(text);
    fprintf(stderr, "transcribe: out of memory\n");
    return 1;
}

static int print_result(const struct whisper_state *s, enum fmt fmt, bool translate, double duration_s)
{
    const int n = whisper_full_n_segments(s);
    switch (fmt) {
    case FMT_TEXT: {
        char *t = full_text(s);
        if (!t)
            return 1;
        puts(t);
        free(t);
        return 0;
    }
    case FMT_JSON:
    case FMT_VERBOSE_JSON:
        return print_json(s, fmt == FMT_VERBOSE_JSON, translate, duration_s);
    case FMT_SRT:
    case FMT_VTT:
        if (fmt == FMT_VTT)
            printf("WEBVTT\n\n");
        for (int i = 0; i < n; i++) {
            const struct whisper_segment *g = whisper_full_get_segment(s, i);
            if (fmt == FMT_SRT)
                printf("%d\n", i + 1);
            print_time(g->t0_ms, fmt == FMT_SRT ? ',' : '.');
            printf(" --> ");
            print_time(g->t1_ms, fmt == FMT_SRT ? ',' : '.');
            printf("\n%s\n\n", skip_space(g->text));
        }
        return 0;
    }
    return 1;
}

// ---- --parallel: several files through one batcher -------------------------------

struct tp_shared {
    const char *const *files;
    int n_files;
    const struct whisper_full_params *p;
    enum fmt fmt;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int next_file, next_print;   /* {mu} */
    bool failed;                 /* {mu} a file failed: stop taking and printing */
};

struct tp_lane {
    struct tp_shared *sh;
    struct whisper_state *s;
};

/* Take the next file, transcribe it, wait for its turn and print it. */
static void *tp_lane_main(void *arg)
{
    struct tp_lane *l = arg;
    struct tp_shared *sh = l->sh;
    struct media_audio_params ap = media_audio_default_params();
    ap.sample_rate_hz = WHISPER_SAMPLE_RATE_HZ;
    for (;;) {
        pthread_mutex_lock(&sh->mu);
        const int f = sh->failed ? sh->n_files : sh->next_file++;
        pthread_mutex_unlock(&sh->mu);
        if (f >= sh->n_files)
            return NULL;
        char err[512];
        float *pcm = NULL;
        size_t n = 0;
        int rc = media_audio_decode_file(sh->files[f], &ap, &pcm, &n, err, sizeof err);
        const double t0 = omni_time_s();
        if (rc == 0)
            rc = whisper_full(l->s, sh->p, pcm, (int64_t)n, err, sizeof err);
        free(pcm);
        pthread_mutex_lock(&sh->mu);
        while (sh->next_print != f && !sh->failed)
            pthread_cond_wait(&sh->cv, &sh->mu);
        if (!sh->failed) {
            const double dur = (double)n / WHISPER_SAMPLE_RATE_HZ;
            if (rc < 0) {
                fprintf(stderr, "transcribe: %s: %s\n", sh->files[f], err);
                sh->failed = true;
            } else {
                OMNI_INFO("transcribe: %s: %.2f s of audio in %.2f s (%d segments, language %s)", sh->files[f],
                          dur, omni_time_s() - t0, whisper_full_n_segments(l->s), whisper_full_lang(l->s));
                sh->failed = print_result(l->s, sh->fmt, sh->p->translate, dur) != 0;
                fflush(stdout);
            }
            sh->next_print++;
        }
        pthread_cond_broadcast(&sh->cv);
        pthread_mutex_unlock(&sh->mu);
    }
}

/* Whisper's passes on the GPU for `states` states (--device cuda[:N]), or
 * NULL with err set. */
static struct whisper_dev *tr_dev(const struct whisper_model *m, const char *device, int states, char *err,
                                  size_t errlen)
{
    if (strncmp(device, "cuda", 4) || (device[4] && device[4] != ':')) {
        omni_fail(err, errlen, OMNI_ERR_ARG, "--device: '%s' is not cpu, cuda or cuda:N", device);
        return NULL;
    }
    struct whisper_dev_params dp = whisper_dev_default_params();
    dp.device = device[4] == ':' ? atoi(device + 5) : 0;
    dp.max_streams = states;
    dp.max_seqs = states * WHISPER_MAX_DECODERS;
    struct whisper_dev *d = whisper_dev_new(m, &dp, err, errlen);
    if (d)
        OMNI_INFO("transcribe: encoder and decoder on %s", whisper_dev_name(d));
    return d;
}

static int transcribe_parallel(const char *model, const char *const *files, int n_files, int parallel, int threads,
                               const char *device, const struct whisper_full_params *p, enum fmt fmt)
{
    char err[512];
    struct whisper_model *m = whisper_model_load(model, err, sizeof err);
    struct whisper_batcher_params bp = whisper_batcher_default_params();
    bp.n_threads = threads;
    const int n_lanes = parallel < n_files ? parallel : n_files;
    struct whisper_dev *dev = m && device ? tr_dev(m, device, n_lanes, err, sizeof err) : NULL;
    bp.dev = dev;
    struct whisper_batcher *b = m && (dev || !device) ? whisper_batcher_new(m, &bp, err, sizeof err) : NULL;
    struct tp_shared sh = { .files = files, .n_files = n_files, .p = p, .fmt = fmt };
    pthread_mutex_init(&sh.mu, NULL);
    pthread_cond_init(&sh.cv, NULL);
    struct tp_lane lanes[64];
    pthread_t th[64];
    int n_states = 0, n_started = 0, rc = 1;
    for (; b && n_states < n_lanes; n_states++)
        if (!(lanes[n_states] = (struct tp_lane){ &sh, whisper_state_new_batched(b, err, sizeof err) }).s)
            break;
    if (!b || n_states < n_lanes) {
        fprintf(stderr, "transcribe: %s\n", err);
    } else {
        for (; n_started < n_lanes; n_started++)
            if (pthread_create(&th[n_started], NULL, tp_lane_main, &lanes[n_started]) != 0)
                break;
        for (int i = 0; i < n_started; i++)
            pthread_join(th[i], NULL);
        rc = sh.failed || sh.next_print < n_files ? 1 : 0;
    }
    for (int i = 0; i < n_states; i++)
        whisper_state_free(lanes[i].s);
    whisper_batcher_free(b);
    whisper_dev_free(dev);
    whisper_model_free(m);
    pthread_cond_destroy(&sh.cv);
    pthread_mutex_destroy(&sh.mu);
    return rc;
}

int cli_transcribe(int argc, char **argv)
{
    const char *model = NULL;
    const char **files = calloc(argc, sizeof *files);
    int n_files = 0;
    enum fmt fmt = FMT_TEXT;
    long threads = 0, parallel = 1, v;
    const char *device = NULL; /* NULL: the CPU */
    int timestamps = -1; /* -1: by format */
    struct whisper_full_params p = whisper_full_default_params(WHISPER_SAMPLING_GREEDY);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *val = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            transcribe_usage(stdout);
            free(files);
            return 0;
        } else if ((!strcmp(a, "-m") || !strcmp(a, "--model")) && val) {
            model = argv[++i];
        } else if (!strcmp(a, "--format") && val) {
            int k = -1;
            for (int j = 0; j < (int)(sizeof fmt_names / sizeof fmt_names[0]); j++)
                if (!strcmp(val, fmt_names[j]))
                    k = j;
            if (k < 0) {
                fprintf(stderr, "transcribe: unknown --format '%s' (text, json, verbose_json, srt, vtt)\n", val);
                goto bad;
            }
            fmt = (enum fmt)k;
            i++;
        } else if (!strcmp(a, "--language") && val) {
            p.language = argv[++i];
        } else if (!strcmp(a, "--translate")) {
            p.translate = true;
        } else if (!strcmp(a, "--beam-size") && val) {
            if (cli_long("transcribe", a, argv[++i], 1, WHISPER_MAX_BEAMS, &v))
                goto bad;
            p.strategy = WHISPER_SAMPLING_BEAM_SEARCH;
            p.beam_size = (int)v;
        } else if (!strcmp(a, "--best-of") && val) {
            if (cli_long("transcribe", a, argv[++i], 1, WHISPER_MAX_DECODERS, &v))
                goto bad;
            p.greedy_best_of = (int)v;
        } else if (!strcmp(a, "--temperature") && val) {
            if (cli_float("transcribe", a, argv[++i], 0, 2, &p.temperature))
                goto bad;
        } else if (!strcmp(a, "--no-fallback")) {
            p.temperature_inc = 0;
        } else if (!strcmp(a, "--prompt") && val) {
            p.initial_prompt = argv[++i];
        } else if (!strcmp(a, "--no-timestamps") || !strcmp(a, "--timestamps")) {
            timestamps = !strcmp(a, "--timestamps");
        } else if (!strcmp(a, "--no-suppress")) {
            p.suppress_blank = p.suppress_special = false;
        } else if (!strcmp(a, "--max-tokens") && val) {
            if (cli_long("transcribe", a, argv[++i], 1, 1 << 16, &v))
                goto bad;
            p.max_tokens = (int)v;
        } else if (!strcmp(a, "--audio-ctx") && val) {
            if (!strcmp(val, "auto")) {
                p.audio_ctx = WHISPER_AUDIO_CTX_AUTO;
                i++;
            } else if (cli_long("transcribe", a, argv[++i], 1, WHISPER_CHUNK_FRAMES / 2, &v)) {
                return 2;
            } else {
                p.audio_ctx = (int)v;
            }
        } else if (!strcmp(a, "--audio-ctx-margin") && val) {
            if (cli_long("transcribe", a, argv[++i], 0, WHISPER_CHUNK_FRAMES / 2, &v))
                return 2;
            p.audio_ctx_margin = (int)v;
        } else if (!strcmp(a, "--threads") && val) {
            if (cli_long("transcribe", a, argv[++i], 1, 1024, &threads))
                goto bad;
        } else if (!strcmp(a, "--device") && val) {
            device = strcmp(argv[++i], "cpu") ? argv[i] : NULL;
        } else if (!strcmp(a, "--parallel") && val) {
            if (cli_long("transcribe", a, argv[++i], 1, 64, &parallel))
                goto bad;
        } else if (a[0] != '-' && files) {
            files[n_files++] = a;
        } else {
            fprintf(stderr, "transcribe: unknown or incomplete option '%s'\n", a);
            goto usage;
        }
    }
    if (!model || n_files == 0)
        goto usage;
    p.no_timestamps = timestamps < 0 ? fmt == FMT_TEXT || fmt == FMT_JSON : !timestamps;

    if (parallel > 1 && n_files > 1) {
        int prc = transcribe_parallel(model, files, n_files, (int)parallel, (int)threads, device, &p, fmt);
        free(files);
        return prc;
    }

    char err[512];
    float *pcm = NULL;
    size_t n = 0;
    struct whisper_model *m = NULL;
    struct whisper_state *s = NULL;
    struct whisper_dev *dev = NULL;
    struct tpool *tp = NULL;
    int rc = 1;
    struct media_audio_params ap = media_audio_default_params();
    ap.sample_rate_hz = WHISPER_SAMPLE_RATE_HZ;
    if (!(m = whisper_model_load(model, err, sizeof err)) ||
        !(tp = tpool_new(threads > 0 ? (int)threads : omni_physical_cores(), err, sizeof err)) ||
        !(s = whisper_state_new(m, tp, err, sizeof err)) ||
        (device && (!(dev = tr_dev(m, device, 1, err, sizeof err)) || whisper_state_use_dev(s, dev) < 0))) {
        fprintf(stderr, "transcribe: %s\n", err);
        goto out;
    }
    for (int f = 0; f < n_files; f++) {
        free(pcm);
        pcm = NULL;
        if (media_audio_decode_file(files[f], &ap, &pcm, &n, err, sizeof err) < 0) {
            fprintf(stderr, "transcribe: %s\n", err);
            goto out;
        }
        const double t0 = omni_time_s();
        if (whisper_full(s, &p, pcm, (int64_t)n, err, sizeof err) < 0) {
            fprintf(stderr, "transcribe: %s: %s\n", files[f], err);
            goto out;
        }
        const double dur = (double)n / WHISPER_SAMPLE_RATE_HZ;
        OMNI_INFO("transcribe: %s: %.2f s of audio in %.2f s (%d segments, language %s)", files[f], dur,
                  omni_time_s() - t0, whisper_full_n_segments(s), whisper_full_lang(s));
        if (print_result(s, fmt, p.translate, dur) != 0)
            goto out;
    }
    rc = 0;
out:
    whisper_state_free(s);
    whisper_dev_free(dev);
    tpool_free(tp);
    whisper_model_free(m);
    free(pcm);
    free(files);
    return rc;
usage:
    transcribe_usage(stderr);
bad:
    free(files);
    return 2;
}
