/* bench_stt.c - `omniserve bench-stt -m ggml-*.bin --file AUDIO`: Whisper speed.
 *
 * Three numbers, each the median over --reps repetitions after one untimed
 * warm-up (which pages the mapped weights in): the encoder's time for one
 * 30 s window (whisper_encode, cross-attention K/V included), the decoder's
 * time per token (single-token steps after the start-of-transcript prompt,
 * fed their own argmax so EOT never ends a run early: random-weight models
 * time the same as real ones), and the real-time factor of a whole greedy
 * transcription of the file (whisper_full without temperature fallback,
 * wall time / audio duration; below 1 is faster than real time). */
#include "src/cli/cli.h"
#include "src/cli/args.h"

#include "audio/mel.h"
#include "audio/whisper.h"
#include "media/audio.h"
#include "src/core/cpu.h"
#include "src/core/omni.h"
#include "src/core/threadpool.h"

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct bstt_opts {
    const char *model, *file;
    int n_threads;
    int reps;
    int n_tokens;     /* decoder steps timed per repetition */
    int max_tokens;   /* per window in the RTF run; 0: the model's (half the text context) */
    bool json_only;
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
            "  --json            print only {\"encoder_ms\":..,\"decoder_ms_per_token\":..,\"rtf\":..}\n",
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
    *o = (struct bstt_opts){ .n_threads = omni_physical_cores(), .reps = 3, .n_tokens = 32 };
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

static int bstt_cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double bstt_median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, bstt_cmp);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
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

int cli_bench_stt(int argc, char **argv)
{
    struct bstt_opts o;
    int rc = bstt_parse(argc, argv, &o);
    if (rc)
        return rc < 0 ? 0 : rc;

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
    int n_tokens_out = 0;
    for (int r = -1; r < o.reps; r++) {   /* r = -1: warm-up */
        double t0 = omni_time_s();
        if (whisper_encode(s, mel.data, mel.n_frames, 0, err, sizeof err) < 0)
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
    double enc_ms = bstt_median(enc, o.reps), dec_ms = bstt_median(dec, o.reps),
           rtf_med = bstt_median(rtf, o.reps);
    if (!o.json_only) {
        char cpu[160];
        omni_cpu_describe(cpu, sizeof cpu);
        printf("model    %s (%d/%d layers, state %d, vocab %d)\n", o.model, hp->n_audio_layer,
               hp->n_text_layer, hp->n_audio_state, hp->n_vocab);
        printf("cpu      %s, %d threads\n", cpu, o.n_threads);
        printf("encoder  %.1f ms per 30 s window  (median of %d)\n", enc_ms, o.reps);
        printf("decoder  %.2f ms per token  (median of %d, %d tokens)\n", dec_ms, o.reps,
               o.n_tokens);
        printf("rtf      %.4f on %.2f s of audio (%d tokens; median of %d)\n", rtf_med, audio_s,
               n_tokens_out, o.reps);
    }
    printf("{\"encoder_ms\":%.3f,\"decoder_ms_per_token\":%.3f,\"rtf\":%.5f,\"threads\":%d,"
           "\"cpu\":\"%s\",\"audio_s\":%.3f,\"reps\":%d}\n",
           enc_ms, dec_ms, rtf_med, o.n_threads, omni_cpu_level_name(omni_cpu_level()), audio_s,
           o.reps);
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
