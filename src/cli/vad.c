/* vad.c - `omniserve vad -m silero.bin FILE`: the speech segments Silero VAD
 * finds in any audio file ffmpeg decodes, one "start - end" line each (in
 * seconds, to whisper.cpp's centisecond precision), or with --json
 * {"probabilities":N,"segments":[{"start":s,"end":s},...]}. */
#include "audio/vad.h"
#include "media/audio.h"
#include "src/cli/args.h"
#include "src/cli/cli.h"
#include "src/core/omni.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void vad_usage(FILE *f)
{
    fprintf(f,
            "usage: omniserve vad -m SILERO.bin [options] FILE\n"
            "  -m, --model FILE        Silero VAD in whisper.cpp's ggml format\n"
            "  --json                  {\"probabilities\":N,\"segments\":[{\"start\":s,\"end\":s},...]}\n"
            "  --probs                 also print every window's speech probability\n"
            "  --threshold P           speech probability threshold (0.5)\n"
            "  --min-speech-ms N       drop shorter speech (250)\n"
            "  --min-silence-ms N      silence that ends a segment (100)\n"
            "  --max-speech-s S        split longer segments (no limit)\n"
            "  --pad-ms N              padding around each segment (30)\n"
            "FILE is any audio (or video with audio) ffmpeg reads; it is resampled to 16 kHz mono.\n");
}

int cli_vad(int argc, char **argv)
{
    const char *model = NULL, *file = NULL;
    int json = 0, show_probs = 0;
    struct vad_params vp = vad_default_params();
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        double v;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            vad_usage(stdout);
            return 0;
        } else if ((!strcmp(a, "-m") || !strcmp(a, "--model")) && i + 1 < argc) {
            model = argv[++i];
        } else if (!strcmp(a, "--json")) {
            json = 1;
        } else if (!strcmp(a, "--probs")) {
            show_probs = 1;
        } else if (!strcmp(a, "--threshold") && i + 1 < argc) {
            if (cli_double("vad", a, argv[++i], 0, 1, &v))
                return 2;
            vp.threshold = (float)v;
        } else if (!strcmp(a, "--min-speech-ms") && i + 1 < argc) {
            if (cli_double("vad", a, argv[++i], 0, 3600000, &v))
                return 2;
            vp.min_speech_duration_ms = (int)v;
        } else if (!strcmp(a, "--min-silence-ms") && i + 1 < argc) {
            if (cli_double("vad", a, argv[++i], 0, 3600000, &v))
                return 2;
            vp.min_silence_duration_ms = (int)v;
        } else if (!strcmp(a, "--max-speech-s") && i + 1 < argc) {
            if (cli_double("vad", a, argv[++i], 0.1, 1e9, &v))
                return 2;
            vp.max_speech_duration_s = (float)v;
        } else if (!strcmp(a, "--pad-ms") && i + 1 < argc) {
            if (cli_double("vad", a, argv[++i], 0, 60000, &v))
                return 2;
            vp.speech_pad_ms = (int)v;
        } else if (a[0] == '-' && a[1]) {
            fprintf(stderr, "omniserve vad: unknown or incomplete option '%s'\n", a);
            vad_usage(stderr);
            return 2;
        } else if (!file) {
            file = a;
        } else {
            fprintf(stderr, "omniserve vad: more than one input file\n");
            return 2;
        }
    }
    if (!model || !file) {
        vad_usage(stderr);
        return 2;
    }

    char err[512];
    int rc = 1;
    float *pcm = NULL, *probs = NULL;
    size_t n = 0, n_probs = 0, n_segs = 0;
    struct vad_segment *segs = NULL;
    struct vad_model *m = vad_model_load(model, err, sizeof err);
    if (!m)
        goto fail;
    if (media_audio_decode_file(file, NULL, &pcm, &n, err, sizeof err) < 0 ||
        vad_detect(m, pcm, n, &probs, &n_probs, err, sizeof err) < 0 ||
        vad_segments_from_probs(probs, n_probs, &vp, &segs, &n_segs, err, sizeof err) < 0)
        goto fail;

    if (json) {
        printf("{\"probabilities\":%zu,\"segments\":[", n_probs);
        for (size_t i = 0; i < n_segs; i++)
            printf("%s{\"start\":%.2f,\"end\":%.2f}", i ? "," : "",
                   vad_samples_to_cs(segs[i].start_sample) / 100.0,
                   vad_samples_to_cs(segs[i].end_sample) / 100.0);
        printf("]");
        if (show_probs) {
            printf(",\"probs\":[");
            for (size_t i = 0; i < n_probs; i++)
                printf("%s%.6f", i ? "," : "", probs[i]);
            printf("]");
        }
        printf("}\n");
    } else {
        printf("%s: %.2f s, %zu windows, %zu speech segment%s\n", file, n / (double)VAD_SAMPLE_RATE,
               n_probs, n_segs, n_segs == 1 ? "" : "s");
        for (size_t i = 0; i < n_segs; i++)
            printf("  %7.2f - %7.2f s\n", vad_samples_to_cs(segs[i].start_sample) / 100.0,
                   vad_samples_to_cs(segs[i].end_sample) / 100.0);
        for (size_t i = 0; show_probs && i < n_probs; i++)
            printf("%8.3f %.6f\n", i * (double)VAD_WINDOW / VAD_SAMPLE_RATE, probs[i]);
    }
    rc = 0;
    goto done;
fail:
    fprintf(stderr, "omniserve vad: %s\n", err);
done:
    free(segs);
    free(probs);
    free(pcm);
    vad_model_free(m);
    return rc;
}
