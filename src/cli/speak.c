/* speak.c - `omniserve speak "text" -o out.wav`: text to speech offline, the
 * same voices and formats as POST /v1/audio/speech (24 kHz mono, as
 * OpenAI's). Text from the arguments, else from stdin; `-o -` writes the
 * encoded audio to stdout. */
#include "audio/codec/dac.h"
#include "audio/tts/outetts.h"
#include "audio/tts/outetts_speak.h"
#include "audio/tts/tts.h"
#include "llm/model.h"
#include "src/core/compute.h"
#include "src/core/threadpool.h"
#include "src/engine/engine.h"
#include "media/audio.h"
#include "src/cli/args.h"
#include "src/cli/cli.h"
#include "src/core/omni.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SPEAK_RATE_HZ 24000
#define SPEAK_MAX_STDIN (1u << 20)

static void speak_usage(FILE *f)
{
    fprintf(f,
            "usage: omniserve speak [options] [TEXT...] -o OUT\n"
            "  --voice V          a voice: alloy, ash, ballad, coral, echo, fable, nova, onyx, sage,\n"
            "                     shimmer, verse, or an espeak-ng language (\"de\", \"en-gb+f3\")\n"
            "                     (default alloy; --list-voices prints them)\n"
            "  --format F         wav, mp3, opus, aac, flac, pcm (24 kHz s16le); default: from\n"
            "                     OUT's extension, else wav\n"
            "  --speed S          0.25 .. 4.0 (default 1)\n"
            "  -o, --output OUT   output file, '-' for stdout\n"
            "  -m, --model FILE   OuteTTS 1.0 GGUF (needs --codec and a --voice speaker file)\n"
            "  --codec FILE       DAC GGUF for -m (tools/hf_dac_to_gguf.py of DAC.speech.v1.0)\n"
            "                     with -m, --voice is an OuteTTS speaker JSON (none: random voice)\n"
            "  --max-tokens N     with -m: generated tokens (default: 64 + 40 per byte of text)\n"
            "  --seed N           with -m: sampling seed (default 0)\n"
            "  --threads N        with -m: compute threads (default: physical cores)\n"
            "  --list-voices      id, language, engine and name of every voice\n"
            "Without TEXT the text is read from stdin.\n");
}

/* The format named by OUT's extension, or -1. */
static int speak_format_of(const char *out)
{
    const char *dot = out ? strrchr(out, '.') : NULL;
    return dot ? media_audio_format_from_name(dot + 1) : -1;
}

static char *speak_read_stdin(void)
{
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap);
    while (buf) {
        if (n + 1 >= cap) {
            if (cap >= SPEAK_MAX_STDIN) {
                fprintf(stderr, "omniserve speak: more than %u bytes of text on stdin\n",
                        SPEAK_MAX_STDIN);
                free(buf);
                return NULL;
            }
            char *nb = realloc(buf, cap * 2);
            if (!nb) {
                free(buf);
                return NULL;
            }
            buf = nb;
            cap *= 2;
        }
        size_t got = fread(buf + n, 1, cap - n - 1, stdin);
        if (!got)
            break;
        n += got;
    }
    if (buf)
        buf[n] = 0;
    return buf;
}

static int speak_list(struct tts *t)
{
    struct tts_voice_info v;
    for (int i = 0; i < tts_voice_count(t); i++)
        if (tts_voice_get(t, i, &v) == 0)
            printf("%-10s %-8s %-10s %s\n", v.id, v.language, v.engine, v.name);
    return 0;
}

struct speak_pcm {
    float *p;
    size_t n, cap;
};

static int speak_collect(void *user, const float *pcm, size_t n)
{
    struct speak_pcm *b = user;
    if (b->n + n > b->cap) {
        size_t cap = b->cap ? 2 * b->cap : 65536;
        while (cap < b->n + n)
            cap *= 2;
        float *q = realloc(b->p, cap * sizeof *q);
        if (!q)
            return 1;
        b->p = q;
        b->cap = cap;
    }
    memcpy(b->p + b->n, pcm, n * sizeof *pcm);
    b->n += n;
    return 0;
}

/* -m: OuteTTS 1.0 through the engine and the DAC decoder, on one compute budget */
static int speak_neural(const char *model, const char *codec, const char *voice, const char *text,
                        int threads, int max_tokens, uint64_t seed, int fmt, const char *out)
{
    char err[512] = "";
    int rc = 1;
    struct llm_model *m = NULL;
    struct dac_model *dac = NULL;
    struct outetts_speaker *spk = NULL;
    struct compute *c = NULL;
    struct engine *e = NULL;
    struct tpool *tp = NULL;
    struct speak_pcm pcm = { 0 };
    uint8_t *bytes = NULL;
    size_t nbytes = 0;
    if (!codec) {
        snprintf(err, sizeof err, "-m needs --codec DAC.gguf");
        goto fail;
    }
    if (!threads)
        threads = omni_physical_cores();
    struct compute_params cp = compute_default_params();
    cp.n_threads = threads;
    struct engine_params ep = engine_default_params();
    ep.n_threads = threads;
    ep.kv_memory_bytes = (size_t)512 << 20;   /* a few sequences of OuteTTS' 8k context */
    ep.max_seqs = 4;
    if ((voice && !(spk = outetts_speaker_load(voice, err, sizeof err))) ||
        !(dac = dac_load(codec, err, sizeof err)) ||
        !(m = llm_model_load(model, NULL, err, sizeof err)) ||
        !(c = compute_new(&cp, err, sizeof err)))
        goto fail;
    ep.compute = c;
    if (!(e = engine_new(&ep, err, sizeof err)) || engine_add_model(e, m, "outetts", err, sizeof err) < 0 ||
        engine_start(e, err, sizeof err) < 0 || !(tp = tpool_new(threads, err, sizeof err)) ||
        tpool_attach(tp, c, "tts", err, sizeof err) < 0)
        goto fail;
    struct outetts_speak_params p = outetts_speak_default_params();
    p.text = text;
    p.speaker = spk;
    p.seed = seed;
    if (max_tokens > 0)
        p.max_tokens = max_tokens;
    struct outetts_speak_stats st;
    if (outetts_speak(e, 0, dac, tp, &p, speak_collect, &pcm, &st, err, sizeof err) < 0)
        goto fail;
    int rate = dac_get_info(dac)->sample_rate;
    if (media_audio_encode(pcm.p, pcm.n, rate, (enum media_audio_format)fmt, NULL, &bytes, &nbytes,
                           err, sizeof err) < 0)
        goto fail;
    FILE *f = strcmp(out, "-") ? fopen(out, "wb") : stdout;
    if (!f || fwrite(bytes, 1, nbytes, f) != nbytes || (f != stdout && fclose(f) != 0)) {
        snprintf(err, sizeof err, "cannot write %s", out);
        goto fail;
    }
    fflush(stdout);
    fprintf(stderr, "speak: %lld frames (%lld words%s) -> %lld samples, %.2f s at %d Hz; "
            "prompt %d tokens (%d cached), %d generated; first audio %.0f ms, total %.0f ms\n",
            (long long)st.frames, (long long)st.words, st.audio_end ? ", audio end" : ", cut",
            (long long)st.samples, (double)st.samples / rate, rate, st.prompt_tokens,
            st.cached_tokens, st.completion_tokens, st.first_audio_ms, st.total_ms);
    rc = 0;
    goto done;
fail:
    fprintf(stderr, "omniserve speak: %s\n", err);
done:
    free(bytes);
    free(pcm.p);
    engine_free(e);
    tpool_free(tp);
    compute_free(c);
    llm_model_free(m);
    dac_free(dac);
    outetts_speaker_free(spk);
    return rc;
}

int cli_speak(int argc, char **argv)
{
    const char *out = NULL, *model = NULL, *format = NULL, *codec = NULL;
    long threads = 0, max_tokens = 0;
    uint64_t seed = 0;
    struct tts_stream_params sp = tts_stream_default_params();
    bool list = false;
    size_t text_len = 0;
    char *text = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            speak_usage(stdout);
            free(text);
            return 0;
        } else if ((!strcmp(a, "-o") || !strcmp(a, "--output")) && i + 1 < argc) {
            out = argv[++i];
        } else if ((!strcmp(a, "-m") || !strcmp(a, "--model")) && i + 1 < argc) {
            model = argv[++i];
        } else if (!strcmp(a, "--codec") && i + 1 < argc) {
            codec = argv[++i];
        } else if (!strcmp(a, "--threads") && i + 1 < argc) {
            if (cli_long("speak", a, argv[++i], 1, 256, &threads)) {
                free(text);
                return 2;
            }
        } else if (!strcmp(a, "--max-tokens") && i + 1 < argc) {
            if (cli_long("speak", a, argv[++i], 1, 1 << 20, &max_tokens)) {
                free(text);
                return 2;
            }
        } else if (!strcmp(a, "--seed") && i + 1 < argc) {
            if (cli_u64("speak", a, argv[++i], UINT64_MAX, &seed)) {
                free(text);
                return 2;
            }
        } else if (!strcmp(a, "--voice") && i + 1 < argc) {
            sp.voice = argv[++i];
        } else if (!strcmp(a, "--format") && i + 1 < argc) {
            format = argv[++i];
        } else if (!strcmp(a, "--speed") && i + 1 < argc) {
            if (cli_float("speak", a, argv[++i], 0.25f, 4.0f, &sp.speed)) {
                free(text);
                return 2;
            }
        } else if (!strcmp(a, "--list-voices")) {
            list = true;
        } else if (a[0] == '-' && a[1]) {
            fprintf(stderr, "omniserve speak: unknown or incomplete option '%s'\n", a);
            speak_usage(stderr);
            free(text);
            return 2;
        } else {                                   /* words of the text */
            size_t al = strlen(a);
            char *nt = realloc(text, text_len + al + 2);
            if (!nt) {
                free(text);
                return 1;
            }
            text = nt;
            if (text_len)
                text[text_len++] = ' ';
            memcpy(text + text_len, a, al + 1);
            text_len += al;
        }
    }
    int fmt = format ? media_audio_format_from_name(format) : speak_format_of(out);
    if (format && fmt < 0) {
        fprintf(stderr, "omniserve speak: unknown --format '%s' (wav, mp3, opus, aac, flac, pcm)\n",
                format);
        free(text);
        return 2;
    }
    if (fmt < 0)
        fmt = MEDIA_AUDIO_WAV;
    if (!out && !list) {
        fprintf(stderr, "omniserve speak: no output (-o FILE, or -o - for stdout)\n");
        speak_usage(stderr);
        free(text);
        return 2;
    }
    if (model && !list) {
        if (!text && !(text = speak_read_stdin()))
            return 1;
        int r = speak_neural(model, codec, sp.voice, text, (int)threads, (int)max_tokens, seed,
                             fmt, out);
        free(text);
        return r;
    }

    char err[512];
    int rc = 1;
    float *pcm = NULL, *pcm24 = NULL;
    size_t n = 0, n24 = 0, nbytes = 0;
    uint8_t *bytes = NULL;
    FILE *f = NULL;
    struct tts *t = tts_new(NULL, err, sizeof err);
    if (!t)
        goto fail;
    if (list) {
        rc = speak_list(t);
        goto done;
    }
    if (!text && !(text = speak_read_stdin())) {
        snprintf(err, sizeof err, "cannot read the text from stdin");
        goto fail;
    }
    int sr;
    struct media_audio_params ap = media_audio_default_params();
    ap.sample_rate_hz = SPEAK_RATE_HZ;
    if (tts_synthesize(t, &sp, text, &pcm, &n, &sr, err, sizeof err) < 0 ||
        (n && media_audio_decode_raw(pcm, n * sizeof *pcm, MEDIA_PCM_F32LE, sr, &ap, &pcm24, &n24,
                                     err, sizeof err) < 0) ||
        media_audio_encode(pcm24, n24, SPEAK_RATE_HZ, (enum media_audio_format)fmt, NULL, &bytes,
                           &nbytes, err, sizeof err) < 0)
        goto fail;
    f = strcmp(out, "-") ? fopen(out, "wb") : stdout;
    if (!f || fwrite(bytes, 1, nbytes, f) != nbytes || (f != stdout && fclose(f) != 0)) {
        snprintf(err, sizeof err, "cannot write %s", out);
        f = NULL;
        goto fail;
    }
    if (f == stdout)
        fflush(stdout);
    if (strcmp(out, "-"))
        fprintf(stderr, "speak: %.2f s of speech -> %s (%zu bytes)\n",
                (double)n24 / SPEAK_RATE_HZ, out, nbytes);
    rc = 0;
    goto done;
fail:
    fprintf(stderr, "omniserve speak: %s\n", err);
done:
    free(bytes);
    free(pcm24);
    free(pcm);
    free(text);
    tts_free(t);
    return rc;
}
