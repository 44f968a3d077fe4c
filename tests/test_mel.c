/* test_mel.c - log-mel spectrogram against transformers' WhisperFeatureExtractor
 * (tests/fixtures/whisper/mel_80.bin, from tools/make_whisper_golden.py), and
 * the converter's slaney filters against the extractor's. */
#include "test.h"

#include "audio/mel.h"
#include "src/core/omni.h"
#include "src/core/threadpool.h"

#include <stdlib.h>

#define MEL_REF_FRAMES 400

static void free_tpool(void *tp) { tpool_free(tp); }

/* tools/make_whisper_golden.py test_waveform(): 3 s at 16 kHz */
static float *golden_waveform(int64_t *n)
{
    *n = 48000;
    float *x = malloc(48000 * sizeof(float));
    for (int i = 0; x && i < 48000; i++) {
        const double t = i / 16000.0;
        x[i] = (float)(0.4 * sin(2 * M_PI * 440.0 * t) + 0.3 * sin(2 * M_PI * (100.0 + 400.0 * t) * t) +
                       0.1 * sin(2 * M_PI * 3000.0 * t) * (t < 1.5));
    }
    return x;
}

TEST(mel_matches_whisper_feature_extractor)
{
    float *filters = test_read_floats(test_fixture("whisper/mel_filters_80.bin"), 80 * MEL_N_FREQ);
    float *ref = test_read_floats(test_fixture("whisper/mel_80.bin"), 80 * MEL_REF_FRAMES);
    int64_t n;
    float *pcm = golden_waveform(&n);
    CHECK(filters && ref && pcm);
    char err[256];
    struct tpool *tp = tpool_new(2, err, sizeof err);
    struct mel_spec mel;
    CHECK(tp);
    test_defer(free_tpool, tp);
    CHECK_EQ(mel_compute(tp, filters, 80, pcm, n, MEL_PAD_30S, &mel, err, sizeof err), OMNI_OK);
    CHECK_EQ(mel.n_frames, (48000 + MEL_PAD_30S) / MEL_HOP);
    double max_diff = 0;
    for (int m = 0; m < 80; m++)
        for (int t = 0; t < MEL_REF_FRAMES; t++)
            max_diff = fmax(max_diff, fabs(mel.data[(size_t)m * mel.n_frames + t] - ref[m * MEL_REF_FRAMES + t]));
    fprintf(stderr, "[mel max diff %.2e] ", max_diff);
    CHECK(max_diff < 1e-3);

    /* the same with one thread, and without the 30 s padding (frames agree
     * where the signal is the same, the global max does too here) */
    struct mel_spec one;
    CHECK_EQ(mel_compute(NULL, filters, 80, pcm, n, MEL_PAD_30S, &one, err, sizeof err), OMNI_OK);
    for (size_t i = 0; i < (size_t)80 * mel.n_frames; i++)
        CHECK(one.data[i] == mel.data[i]);
    mel_spec_free(&one);
    mel_spec_free(&mel);
    test_release(tp);
    free(filters);
    free(ref);
    free(pcm);
}

TEST(mel_rejects_bad_arguments)
{
    float filters[MEL_N_FREQ] = { 0 }, pcm[16] = { 0 };
    struct mel_spec mel;
    char err[256];
    CHECK_EQ(mel_compute(NULL, filters, 0, pcm, 16, 0, &mel, err, sizeof err), OMNI_ERR_ARG);
    CHECK_EQ(mel_compute(NULL, filters, 1, pcm, 16, 0, &mel, err, sizeof err), OMNI_ERR_ARG); /* < 1 hop */
    CHECK_EQ(mel_compute(NULL, filters, 1, NULL, 16, 0, &mel, err, sizeof err), OMNI_ERR_ARG);
    CHECK(mel.data == NULL);
    /* silence: every value at the floor, finite */
    CHECK_EQ(mel_compute(NULL, filters, 1, pcm, 16, MEL_HOP * 4, &mel, err, sizeof err), OMNI_OK);
    CHECK_EQ(mel.n_frames, 4);
    for (int t = 0; t < 4; t++)
        CHECK_NEAR(mel.data[t], (-10.0 + 4.0) / 4.0, 1e-6);
    mel_spec_free(&mel);
    mel_spec_free(NULL);
}

TEST(mel_converter_filters_match_transformers)
{
    /* tools/hf_whisper_to_ggml.py writes its numpy filters into the model
     * file; the golden f32 model's must equal WhisperFeatureExtractor's. */
    size_t len;
    char *bin = test_read_file(test_golden("whisper-golden-f32.bin"), &len);
    if (!bin)
        SKIP("golden whisper model not converted (make golden-fixtures)");
    float *ref = test_read_floats(test_fixture("whisper/mel_filters_80.bin"), 80 * MEL_N_FREQ);
    CHECK(ref && len > 4 + 44 + 8 + 80 * MEL_N_FREQ * 4);
    const float *f = (const float *)(bin + 4 + 44 + 8);
    double max_diff = 0;
    for (int i = 0; i < 80 * MEL_N_FREQ; i++)
        max_diff = fmax(max_diff, fabs(f[i] - ref[i]));
    free(bin);
    free(ref);
    CHECK(max_diff < 1e-7);
}
