/* speak.c - `omniserve speak "text" -o out.wav`: text to speech offline, the
 * same voices and formats as POST /v1/audio/speech (24 kHz mono, as
 * OpenAI's). Text from the arguments, else from stdin; `-o -` writes the
 * encoded audio to stdout. */
#include "audio/tts/tts.h"
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
            "  -m, --model FILE   a neural voice model (none is built in yet: espeak-ng speaks)\n"
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

int cli_speak(int argc, char **argv)
{
    const char *out = NULL, *model = NULL, *format = NULL;
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
    if (model) {
        fprintf(stderr, "omniserve speak: %s: neural voice models are not supported by this build "
                        "(espeak-ng voices need no model)\n", model);
        free(text);
        return 2;
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
