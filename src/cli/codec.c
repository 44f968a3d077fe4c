/* codec.c - `omniserve codec-decode`: neural audio codec codes to a waveform.
 *
 *   omniserve codec-decode --codec DAC.gguf --codes CODES.json -o out.wav
 *   omniserve codec-decode --codec DAC.gguf --codes CODES.json --f32 out.f32 --stream
 *
 * CODES.json is [codebooks][frames] of integers (the first codebooks of the
 * model, as DacModel.decode(audio_codes=...) takes them). --stream pushes
 * the frames one at a time through the streaming decoder (the path TTS
 * uses) and stitches its chunks; the result equals the one-shot decode to
 * float rounding. For tests, debugging and codes made elsewhere. */
#include "audio/codec/dac.h"
#include "media/audio.h"
#include "src/cli/args.h"
#include "src/cli/cli.h"
#include "src/core/omni.h"
#include "src/core/threadpool.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CODEC_MAX_FRAMES (1 << 22)

static void codec_usage(FILE *f)
{
    fprintf(f,
            "usage: omniserve codec-decode --codec DAC.gguf --codes CODES.json\n"
            "                              (-o OUT.wav | --f32 OUT.f32) [--stream] [--threads N]\n"
            "  --codes FILE   JSON array [codebooks][frames] of integer codes\n"
            "  -o FILE        16-bit wav at the codec's rate\n"
            "  --f32 FILE     raw float32 little-endian samples\n"
            "  --stream       decode frame by frame through the streaming decoder\n"
            "  --chunk N      frames per streamed chunk after the first (default 32)\n"
            "  --threads N    compute threads (default: physical cores)\n");
}

/* codes[q * n_frames + f] from the JSON text; 0 or -1 with err set */
static int codec_parse_codes(const char *text, int32_t **codes, int *n_q, int64_t *n_frames,
                             char *err, size_t errlen)
{
    cJSON *j = cJSON_Parse(text);
    int rc = -1;
    *codes = NULL;
    if (!j || !cJSON_IsArray(j) || cJSON_GetArraySize(j) < 1) {
        snprintf(err, errlen, "codes: not a JSON array [codebooks][frames]");
        goto done;
    }
    int nq = cJSON_GetArraySize(j);
    cJSON *row0 = cJSON_GetArrayItem(j, 0);
    if (!cJSON_IsArray(row0) || cJSON_GetArraySize(row0) < 1 ||
        cJSON_GetArraySize(row0) > CODEC_MAX_FRAMES) {
        snprintf(err, errlen, "codes: codebook 0 is not an array of 1..%d codes",
                 CODEC_MAX_FRAMES);
        goto done;
    }
    int nf = cJSON_GetArraySize(row0);
    int32_t *c = malloc((size_t)nq * nf * sizeof *c);
    if (!c) {
        snprintf(err, errlen, "out of memory");
        goto done;
    }
    int q = 0;
    cJSON *row;
    cJSON_ArrayForEach(row, j) {
        if (!cJSON_IsArray(row) || cJSON_GetArraySize(row) != nf) {
            snprintf(err, errlen, "codes: codebook %d has %d codes, codebook 0 has %d", q,
                     cJSON_IsArray(row) ? cJSON_GetArraySize(row) : -1, nf);
            free(c);
            goto done;
        }
        int f = 0;
        cJSON *v;
        cJSON_ArrayForEach(v, row) {
            double d = cJSON_IsNumber(v) ? v->valuedouble : NAN;
            if (!(d == floor(d) && fabs(d) < 2e9)) {
                snprintf(err, errlen, "codes: codebook %d frame %d is not an integer", q, f);
                free(c);
                goto done;
            }
            c[(size_t)q * nf + f++] = (int32_t)d;
        }
        q++;
    }
    *codes = c;
    *n_q = nq;
    *n_frames = nf;
    rc = 0;
done:
    cJSON_Delete(j);
    return rc;
}

static char *codec_read_file(const char *path, char *err, size_t errlen)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        snprintf(err, errlen, "cannot open %s", path);
        return NULL;
    }
    char *buf = NULL;
    size_t len = 0, cap = 0;
    for (;;) {
        if (len + 65536 + 1 > cap) {
            cap = cap ? 2 * cap : 131072;
            char *b = realloc(buf, cap);
            if (!b) {
                free(buf);
                fclose(f);
                snprintf(err, errlen, "out of memory reading %s", path);
                return NULL;
            }
            buf = b;
        }
        size_t n = fread(buf + len, 1, 65536, f);
        len += n;
        if (n < 65536)
            break;
    }
    fclose(f);
    buf[len] = 0;
    return buf;
}

int cli_codec_decode(int argc, char **argv)
{
    const char *codec = NULL, *codes_path = NULL, *out_wav = NULL, *out_f32 = NULL;
    bool stream = false;
    long threads = 0, chunk = 32;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--codec") && i + 1 < argc)
            codec = argv[++i];
        else if (!strcmp(a, "--codes") && i + 1 < argc)
            codes_path = argv[++i];
        else if (!strcmp(a, "-o") && i + 1 < argc)
            out_wav = argv[++i];
        else if (!strcmp(a, "--f32") && i + 1 < argc)
            out_f32 = argv[++i];
        else if (!strcmp(a, "--stream"))
            stream = true;
        else if (!strcmp(a, "--threads") && i + 1 < argc) {
            if (cli_long("codec-decode", a, argv[++i], 1, 256, &threads))
                return 2;
        } else if (!strcmp(a, "--chunk") && i + 1 < argc) {
            if (cli_long("codec-decode", a, argv[++i], 1, 4096, &chunk))
                return 2;
        } else if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            codec_usage(stdout);
            return 0;
        } else {
            fprintf(stderr, "omniserve codec-decode: unknown or incomplete option '%s'\n", a);
            codec_usage(stderr);
            return 2;
        }
    }
    if (!codec || !codes_path || (!out_wav && !out_f32)) {
        fprintf(stderr, "omniserve codec-decode: --codec, --codes and -o or --f32 are needed\n");
        codec_usage(stderr);
        return 2;
    }

    char err[512] = "";
    int rc = 1;
    struct dac_model *m = NULL;
    struct tpool *tp = NULL;
    struct dac_stream *s = NULL;
    int32_t *codes = NULL, *frame = NULL;
    float *pcm = NULL;
    uint8_t *bytes = NULL;
    char *text = NULL;
    int n_q = 0;
    int64_t n_frames = 0, n = 0;
    if (!(text = codec_read_file(codes_path, err, sizeof err)))
        goto fail;
    if (codec_parse_codes(text, &codes, &n_q, &n_frames, err, sizeof err))
        goto fail;
    if (!(m = dac_load(codec, err, sizeof err)))
        goto fail;
    if (!(tp = tpool_new(threads ? (int)threads : omni_physical_cores(), err, sizeof err)))
        goto fail;
    const struct dac_info *info = dac_get_info(m);
    double t0 = omni_time_s();
    if (!stream) {
        if (dac_decode(m, tp, codes, n_q, n_frames, &pcm, &n, err, sizeof err) < 0)
            goto fail;
    } else {
        struct dac_stream_params sp = dac_stream_default_params();
        sp.chunk_frames = (int)chunk;
        int64_t want = dac_samples_for_frames(m, n_frames);
        if (!(s = dac_stream_new(m, &sp, n_q, err, sizeof err)) ||
            !(frame = malloc((size_t)n_q * sizeof *frame)) ||
            !(pcm = malloc((size_t)want * sizeof *pcm))) {
            if (!err[0])
                snprintf(err, sizeof err, "out of memory");
            goto fail;
        }
        const float *part;
        int64_t k;
        for (int64_t f = 0; f <= n_frames; f++) {
            int r;
            if (f < n_frames) {
                for (int q = 0; q < n_q; q++)
                    frame[q] = codes[(size_t)q * n_frames + f];
                r = dac_stream_push(s, tp, frame, 1, &part, &k, err, sizeof err);
            } else {
                r = dac_stream_finish(s, tp, &part, &k, err, sizeof err);
            }
            if (r < 0)
                goto fail;
            if (n + k > want) {
                snprintf(err, sizeof err, "stream gave more than %lld samples", (long long)want);
                goto fail;
            }
            if (k > 0)
                memcpy(pcm + n, part, (size_t)k * sizeof *pcm);
            n += k;
        }
    }
    double dt = omni_time_s() - t0;
    double audio_s = (double)n / info->sample_rate;
    fprintf(stderr, "codec-decode: %lld frames x %d codebooks -> %lld samples (%.2f s at %d Hz) "
            "in %.3f s (%.1fx real time%s)\n", (long long)n_frames, n_q, (long long)n, audio_s,
            info->sample_rate, dt, dt > 0 ? audio_s / dt : 0.0, stream ? ", streamed" : "");
    if (out_f32) {
        FILE *f = fopen(out_f32, "wb");
        if (!f || fwrite(pcm, sizeof *pcm, (size_t)n, f) != (size_t)n || fclose(f) != 0) {
            snprintf(err, sizeof err, "cannot write %s", out_f32);
            goto fail;
        }
    }
    if (out_wav) {
        size_t nbytes = 0;
        if (media_audio_encode(pcm, (size_t)n, info->sample_rate, MEDIA_AUDIO_WAV, NULL, &bytes,
                               &nbytes, err, sizeof err) < 0)
            goto fail;
        FILE *f = fopen(out_wav, "wb");
        if (!f || fwrite(bytes, 1, nbytes, f) != nbytes || fclose(f) != 0) {
            snprintf(err, sizeof err, "cannot write %s", out_wav);
            goto fail;
        }
    }
    rc = 0;
    goto done;
fail:
    fprintf(stderr, "omniserve codec-decode: %s\n", err);
done:
    free(bytes);
    free(pcm);
    free(frame);
    free(codes);
    free(text);
    dac_stream_free(s);
    tpool_free(tp);
    dac_free(m);
    return rc;
}
