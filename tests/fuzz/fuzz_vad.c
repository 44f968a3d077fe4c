/* fuzz_vad.c - the Silero VAD side of audio/vad.h: the ggml loader
 * (vad_model_load_memory) and the segment rules (vad_segments_from_probs
 * with fuzzed parameters over fuzzed probabilities). A model that loads
 * runs over a short fixed signal.
 *
 * Input: byte 0 selects: even - the rest is a VAD model file; odd - 16
 * bytes of parameters, then one probability per byte (b / 255). */
#include "tests/fuzz/fz_util.h"

#include "audio/vad.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static void fz_vad_model(const uint8_t *data, size_t size)
{
    char err[256];
    struct vad_model *m = vad_model_load_memory(data, size, "fuzz-vad.bin", err, sizeof err);
    if (!m)
        return;
    float pcm[3 * VAD_WINDOW + 100];
    for (size_t i = 0; i < sizeof pcm / sizeof *pcm; i++)
        pcm[i] = 0.3f * sinf((float)i * 0.07f);
    float *probs = NULL;
    size_t n_probs = 0;
    if (vad_detect(m, pcm, sizeof pcm / sizeof *pcm, &probs, &n_probs, err, sizeof err) == 0) {
        struct vad_params p = vad_default_params();
        struct vad_segment *segs = NULL;
        size_t n_segs = 0;
        vad_segments_from_probs(probs, n_probs, &p, &segs, &n_segs, err, sizeof err);
        free(segs);
    }
    free(probs);
    vad_model_free(m);
}

static void fz_vad_segments(const uint8_t *data, size_t size)
{
    if (size < 16)
        return;
    struct vad_params p = vad_default_params();
    p.threshold = data[0] / 255.0f;
    p.min_speech_duration_ms = (data[1] | data[2] << 8) - 1000;
    p.min_silence_duration_ms = (data[3] | data[4] << 8) - 1000;
    p.max_speech_duration_s = data[5] == 255 ? 1e30f : data[5] / 8.0f - 1;
    p.speech_pad_ms = (data[6] | data[7] << 8) - 1000;
    p.samples_overlap_s = data[8] / 50.0f - 1;
    p.merge_gap_ms = (data[9] | data[10] << 8) - 1000;
    size_t n = size - 16;
    float *probs = malloc((n ? n : 1) * sizeof *probs);
    if (!probs)
        abort();
    for (size_t i = 0; i < n; i++)
        probs[i] = data[16 + i] / 255.0f;
    char err[256];
    struct vad_segment *segs = NULL;
    size_t n_segs = 0;
    if (vad_segments_from_probs(probs, n, &p, &segs, &n_segs, err, sizeof err) == 0) {
        /* segments lie inside the audio, in order */
        const int64_t total = (int64_t)n * VAD_WINDOW;
        for (size_t i = 0; i < n_segs; i++)
            if (segs[i].start_sample < 0 || segs[i].end_sample > total ||
                segs[i].start_sample > segs[i].end_sample ||
                (i && segs[i].start_sample < segs[i - 1].start_sample))
                abort();
    }
    free(segs);
    free(probs);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    if (data[0] & 1)
        fz_vad_segments(data + 1, size - 1);
    else
        fz_vad_model(data + 1, size - 1);
    return 0;
}
