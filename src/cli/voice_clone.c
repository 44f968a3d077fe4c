/* voice_clone.c - `omniserve voice-clone`: an OuteTTS 1.0 speaker profile
 * from a reference recording and its transcript.
 *
 *   omniserve voice-clone REF.wav --text "transcript" -o speaker.json \
 *       --codec DAC.gguf --stt-model ggml-*.bin [--language en] [--threads N]
 *
 * The recording (any format ffmpeg reads, at most 20 s as outetts allows)
 * is encoded by the DAC encoder (the first two codebooks, 75 frames a
 * second for DAC.speech) and transcribed by Whisper; each text token's time
 * is the likeliest timestamp token of the distribution it was picked from
 * (whisper.cpp's token timestamps, audio/whisper.h), a word runs from its
 * first token's time to the next word's; the transcript's words take the
 * times of the recognized words they align with (outetts_clone_align).
 * A model whose timestamps say nothing (fewer than half the tokens with a
 * confident one, or words spanning under half of the speech: a model
 * trained without timestamps) falls back to spreading the words over the
 * speech by length, each boundary moved to the quietest 10 ms within 80 ms;
 * the summary on stderr says which was used. Then outetts' per-word codes
 * and features make the speaker JSON. */
#include "audio/codec/dac_encode.h"
#include "audio/tts/outetts.h"
#include "audio/tts/outetts_clone.h"
#include "audio/whisper.h"
#include "media/audio.h"
#include "src/cli/args.h"
#include "src/cli/cli.h"
#include "src/core/omni.h"
#include "src/core/threadpool.h"

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define VC_MAX_WORDS 1024
/* a token's timestamp counts when it and all timestamps are this likely
 * (whisper.cpp's thold_pt / thold_ptsum) */
#define VC_TS_MIN_P 0.01f

static void vc_usage(FILE *f)
{
    fprintf(f, "usage: omniserve voice-clone REF.wav --text \"transcript\" -o speaker.json \\\n"
               "           --codec DAC.gguf --stt-model ggml-*.bin [--language L] [--threads N]\n"
               "  REF.wav          speech of one speaker, at most %.0f s (any format ffmpeg reads)\n"
               "  --text T         what is said in it (the speaker's words)\n"
               "  --codec F        DAC GGUF with its encoder (tools/hf_dac_to_gguf.py)\n"
               "  --stt-model F    Whisper ggml model for the word times\n"
               "  --language L     for multilingual Whisper models (default: detect)\n",
            OUTETTS_CLONE_MAX_SECONDS);
}

/* The recognized words with times from Whisper's token timestamps;
 * *confident / *tokens: how many tokens (after each segment's first) had a
 * usable timestamp. */
static int vc_whisper_words(const struct whisper_model *wm, struct whisper_state *ws,
                            struct outetts_clone_word *out, int max, int *confident, int *tokens)
{
    *confident = *tokens = 0;
    const int32_t beg = whisper_token_special(wm, WHISPER_TOKEN_BEG);
    int n = 0;
    for (int si = 0; si < whisper_full_n_segments(ws); si++) {
        const struct whisper_segment *g = whisper_full_get_segment(ws, si);
        int nt = g->n_tokens;
        if (nt <= 0)
            continue;
        double t0 = g->t0_ms / 1e3, t1 = g->t1_ms / 1e3;
        double *tau = malloc((size_t)nt * sizeof *tau);
        if (!tau)
            return -1;
        /* token j starts at the timestamp its distribution favoured, when
         * that is confident and moves forward; the rest interpolated */
        double last = t0;
        for (int j = 0; j < nt; j++) {
            const struct whisper_token_data *d = &g->tokens[j];
            double ts = (d->tid - beg) * 0.02;
            tau[j] = NAN;
            if (j == 0)
                tau[j] = t0;
            else if (++*tokens, beg >= 0 && d->tid >= beg && d->pt > VC_TS_MIN_P && d->ptsum > VC_TS_MIN_P &&
                     ts > last && ts < t1) {
                tau[j] = ts;
                last = ts;
                ++*confident;
            }
        }
        for (int j = 1; j < nt; j++) {
            if (!isnan(tau[j]))
                continue;
            int k = j;
            while (k < nt && isnan(tau[k]))
                k++;
            double a = tau[j - 1], b = k < nt ? tau[k] : t1;
            for (int i = j; i < k; i++)
                tau[i] = a + (b - a) * (i - j + 1) / (double)(k - j + 1);
            j = k - 1;
        }
        /* words: a token with a leading space starts one */
        for (int j = 0; j < nt; j++) {
            size_t len = 0;
            const char *b = whisper_token_bytes(wm, g->tokens[j].id, &len);
            if (!b || len == 0)
                continue;
            bool starts = j == 0 || b[0] == ' ' || n == 0;
            if (starts) {
                if (n == max)
                    break;
                if (n > 0 && isnan(out[n - 1].t1_s))
                    out[n - 1].t1_s = tau[j];
                memset(&out[n], 0, sizeof out[n]);
                out[n].t0_s = tau[j];
                out[n].t1_s = NAN;
                n++;
            }
            struct outetts_clone_word *w = &out[n - 1];
            size_t have = strlen(w->word);
            for (size_t i = 0; i < len && have + 1 < sizeof w->word; i++)
                if (!(have == 0 && b[i] == ' '))
                    w->word[have++] = b[i];
            w->word[have] = 0;
        }
        if (n > 0 && isnan(out[n - 1].t1_s))
            out[n - 1].t1_s = t1;
        free(tau);
    }
    return n;
}

/* 10 ms frame energies (dB) of pcm at rate; the speech span: the first
 * and last frame within 40 dB of the loudest */
static double *vc_frames_db(const float *pcm, size_t n, int rate, int *n_fr, double *s0, double *s1)
{
    int hop = rate / 100, nf = (int)(n / (size_t)hop);
    double *db = malloc((size_t)(nf > 0 ? nf : 1) * sizeof *db), top = -1e9;
    if (!db)
        return NULL;
    for (int f = 0; f < nf; f++) {
        double e = 0;
        for (int i = 0; i < hop; i++)
            e += (double)pcm[(size_t)f * hop + i] * pcm[(size_t)f * hop + i];
        db[f] = 10 * log10(e / hop + 1e-12);
        top = db[f] > top ? db[f] : top;
    }
    int a = 0, b = nf - 1;
    while (a < nf && db[a] < top - 40)
        a++;
    while (b > a && db[b] < top - 40)
        b--;
    *n_fr = nf;
    *s0 = a * 0.01;
    *s1 = (b + 1) * 0.01;
    return db;
}

/* Fallback word times: words[] spread over [s0, s1] by length, each inner
 * boundary moved to the quietest frame within 80 ms. */
static void vc_spread(struct outetts_clone_word *w, int n, double s0, double s1, const double *db,
                      int n_fr)
{
    size_t total = 0;
    for (int i = 0; i < n; i++)
        total += strlen(w[i].word) + 1;
    double t = s0;
    for (int i = 0; i < n; i++) {
        w[i].t0_s = t;
        t += (s1 - s0) * (double)(strlen(w[i].word) + 1) / (double)(total ? total : 1);
        w[i].t1_s = t;
    }
    for (int i = 0; i + 1 < n; i++) {
        int c = (int)(w[i].t1_s * 100), best = c;
        for (int f = c - 8; f <= c + 8; f++)
            if (f >= 0 && f < n_fr && f * 0.01 > w[i].t0_s && f * 0.01 < w[i + 1].t1_s &&
                (best < 0 || best >= n_fr || db[f] < db[best]))
                best = f;
        w[i].t1_s = w[i + 1].t0_s = best * 0.01;
    }
}

int cli_voice_clone(int argc, char **argv)
{
    const char *ref = NULL, *text = NULL, *out = NULL, *codec = NULL, *stt = NULL, *lang = NULL;
    long threads = 2;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--text") && i + 1 < argc)
            text = argv[++i];
        else if (!strcmp(a, "-o") && i + 1 < argc)
            out = argv[++i];
        else if (!strcmp(a, "--codec") && i + 1 < argc)
            codec = argv[++i];
        else if (!strcmp(a, "--stt-model") && i + 1 < argc)
            stt = argv[++i];
        else if (!strcmp(a, "--language") && i + 1 < argc)
            lang = argv[++i];
        else if (!strcmp(a, "--threads") && i + 1 < argc) {
            if (cli_long("voice-clone", a, argv[++i], 1, 256, &threads))
                return 2;
        } else if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            vc_usage(stdout);
            return 0;
        } else if (a[0] != '-' && !ref)
            ref = a;
        else {
            fprintf(stderr, "omniserve voice-clone: unknown or incomplete option '%s'\n", a);
            vc_usage(stderr);
            return 2;
        }
    }
    if (!ref || !text || !out || !codec || !stt) {
        vc_usage(stderr);
        return 2;
    }
    bool blank = true;
    for (const char *p = text; *p && blank; p++)
        blank = *p == ' ' || *p == '\t' || *p == '\n' || *p == '\r';
    if (blank) {
        fprintf(stderr, "omniserve voice-clone: empty transcript (--text): say what the "
                        "recording says\n");
        return 2;
    }
    char err[512] = "";
    int rc = 1;
    float *pcm16 = NULL, *pcm = NULL;
    size_t n16 = 0, n = 0;
    int32_t *codes = NULL;
    char *json = NULL;
    struct dac_encoder *enc = NULL;
    struct whisper_model *wm = NULL;
    struct whisper_state *ws = NULL;
    struct tpool *tp = NULL;
    struct outetts_clone_word *ww = calloc(VC_MAX_WORDS, sizeof *ww);
    struct outetts_clone_word *words = calloc(VC_MAX_WORDS, sizeof *words);
    if (!ww || !words) {
        snprintf(err, sizeof err, "out of memory");
        goto fail;
    }
    if (!(enc = dac_encoder_load(codec, err, sizeof err)))
        goto fail;
    const struct dac_encoder_info *I = dac_encoder_get_info(enc);
    if (I->n_codebooks < 2) {
        snprintf(err, sizeof err, "%s has %d codebook(s); OuteTTS needs 2", codec, I->n_codebooks);
        goto fail;
    }
    /* the recording at Whisper's rate and at the codec's */
    struct media_audio_params ap = media_audio_default_params();
    ap.max_duration_s = 4 * OUTETTS_CLONE_MAX_SECONDS;
    if (media_audio_decode_file(ref, &ap, &pcm16, &n16, err, sizeof err) < 0)
        goto fail;
    double secs = (double)n16 / WHISPER_SAMPLE_RATE_HZ;
    if (secs > OUTETTS_CLONE_MAX_SECONDS) {
        snprintf(err, sizeof err, "%s is %.1f s long; a reference is at most %.0f s (outetts' "
                 "limit): cut it to a few sentences", ref, secs, OUTETTS_CLONE_MAX_SECONDS);
        goto fail;
    }
    if (secs < 0.2) {
        snprintf(err, sizeof err, "%s holds %.2f s of audio: too short for a speaker", ref, secs);
        goto fail;
    }
    ap.sample_rate_hz = I->sample_rate;
    if (media_audio_decode_file(ref, &ap, &pcm, &n, err, sizeof err) < 0)
        goto fail;
    if (!(tp = tpool_new((int)threads, err, sizeof err)))
        goto fail;

    /* word times from Whisper (one 30 s window: the audio is under 20 s) */
    if (!(wm = whisper_model_load(stt, err, sizeof err)) ||
        !(ws = whisper_state_new(wm, tp, err, sizeof err)))
        goto fail;
    struct whisper_full_params wp = whisper_full_default_params(WHISPER_SAMPLING_GREEDY);
    wp.language = lang;
    wp.no_timestamps = false;
    if (whisper_full(ws, &wp, pcm16, (int64_t)n16, err, sizeof err) < 0)
        goto fail;
    int confident = 0, n_tok = 0, n_fr = 0;
    int n_ww = vc_whisper_words(wm, ws, ww, VC_MAX_WORDS, &confident, &n_tok);
    double s0 = 0, s1 = 0;
    double *db = n_ww >= 0 ? vc_frames_db(pcm16, n16, WHISPER_SAMPLE_RATE_HZ, &n_fr, &s0, &s1) : NULL;
    if (n_ww < 0 || !db) {
        snprintf(err, sizeof err, "out of memory");
        goto fail;
    }
    const char *method = "Whisper token timestamps";
    const int n_heard = n_ww;
    bool spread = n_ww > 0 && (2 * confident < n_tok ||
                               ww[n_ww - 1].t1_s - ww[0].t0_s < 0.5 * (s1 - s0));
    if (spread) {   /* the transcript's own words, spread below */
        memset(&ww[0], 0, sizeof ww[0]);
        ww[0].t0_s = s0;
        ww[0].t1_s = s1;
        n_ww = 1;
        method = "spread over the speech by length (the model's timestamps were not usable)";
    }
    int n_words = 0;
    int arc = outetts_clone_align(text, ww, n_ww, words, &n_words, VC_MAX_WORDS, err, sizeof err);
    if (arc == 0 && spread)
        vc_spread(words, n_words, s0, s1, db, n_fr);
    free(db);
    if (arc < 0)
        goto fail;

    /* the codes */
    int64_t n_frames = 0;
    if (dac_encode(enc, tp, pcm, (int64_t)n, 2, &codes, &n_frames, NULL, err, sizeof err) < 0)
        goto fail;
    struct outetts_clone_input in = { .text = text, .words = words, .n_words = n_words,
                                      .pcm = pcm, .n_samples = (int64_t)n,
                                      .sample_rate = I->sample_rate, .c1 = codes,
                                      .c2 = codes + n_frames, .n_frames = n_frames,
                                      .frames_per_s = (double)I->sample_rate / I->hop };
    if (!(json = outetts_clone_speaker_json(&in, err, sizeof err)))
        goto fail;
    /* what we write must load as a speaker */
    struct outetts_speaker *chk = outetts_speaker_parse(json, strlen(json), out, err, sizeof err);
    if (!chk)
        goto fail;
    outetts_speaker_free(chk);
    FILE *f = fopen(out, "wb");
    if (!f || fputs(json, f) < 0 || fputc('\n', f) == EOF) {
        if (f)
            fclose(f);
        snprintf(err, sizeof err, "cannot write %s", out);
        goto fail;
    }
    if (fclose(f) != 0) {
        snprintf(err, sizeof err, "cannot write %s", out);
        goto fail;
    }
    fprintf(stderr, "voice-clone: %s: %.2f s (speech %.2f-%.2f s), %lld frames at %.1f/s; Whisper "
            "heard %d words (%d of %d tokens with a confident timestamp), the transcript has %d; "
            "word times: %s -> %s\n", ref, secs, s0, s1, (long long)n_frames, in.frames_per_s,
            n_heard, confident, n_tok, n_words, method, out);
    for (int i = 0; i < n_words; i++)
        fprintf(stderr, "  %6.2f-%6.2f s  %s\n", words[i].t0_s, words[i].t1_s, words[i].word);
    rc = 0;
    goto done;
fail:
    fprintf(stderr, "omniserve voice-clone: %s\n", err[0] ? err : "failed");
done:
    free(json);
    free(codes);
    free(pcm);
    free(pcm16);
    free(ww);
    free(words);
    whisper_state_free(ws);
    whisper_model_free(wm);
    dac_encoder_free(enc);
    tpool_free(tp);
    return rc;
}
