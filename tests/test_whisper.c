/* test_whisper.c - Whisper: golden encoder/decoder outputs of a tiny random
 * model against transformers (tests/fixtures/whisper, converted to ggml by
 * tools/hf_whisper_to_ggml.py), hand-broken model files, and the trained
 * espeak model's transcripts against its references (../shared). */
#include "test.h"

#include "audio/mel.h"
#include "audio/whisper.h"
#include "media/audio.h"
#include "src/core/omni.h"
#include "src/core/threadpool.h"

#include <stdlib.h>

#define GOLDEN_VOCAB 512
#define GOLDEN_STATE 64
#define GOLDEN_CTX 1500
static const int32_t golden_tokens[] = { 1, 5, 17, 300, 42, 7, 99, 511, 256, 3 };
#define N_GOLDEN_TOKENS ((int)(sizeof golden_tokens / sizeof golden_tokens[0]))

static const char *golden_model(const char *type)
{
    static char path[4][512];
    static int slot;
    const char *dir = getenv("OMNI_GOLDEN_DIR");
    char *p = path[slot++ % 4];
    snprintf(p, 512, "%s/whisper-golden-%s.bin", dir ? dir : "build/fixtures", type);
    return p;
}

static float *read_floats(const char *path, size_t n)
{
    size_t len;
    char *buf = test_read_file(path, &len);
    if (!buf || len != n * sizeof(float)) {
        free(buf);
        return NULL;
    }
    return (float *)buf;
}

/* tools/make_whisper_golden.py input_features(): [80][3000] */
static float *golden_features(void)
{
    float *x = malloc(80 * 3000 * sizeof(float));
    for (int m = 0; x && m < 80; m++)
        for (int t = 0; t < 3000; t++)
            x[m * 3000 + t] = (float)(sin(0.0021 * (m + 1) * t + 0.37 * m) + 0.25 * cos(0.05 * t));
    return x;
}

static double max_abs_diff(const float *a, const float *b, size_t n)
{
    double d = 0;
    for (size_t i = 0; i < n; i++)
        d = fmax(d, fabs((double)a[i] - b[i]));
    return d;
}

/* Encoder output and the decoder's logits (all positions at once, then one
 * token at a time through the K/V cache of another decoder slot). */
static void check_golden(const char *type, double tol_enc, double tol_logits)
{
    char err[256];
    struct whisper_model *m = whisper_model_load(golden_model(type), err, sizeof err);
    if (!m)
        SKIP("golden whisper model not converted (make golden-fixtures)");
    float *feats = golden_features();
    float *ref_enc = read_floats(test_fixture("whisper/encoder_out.bin"), (size_t)GOLDEN_CTX * GOLDEN_STATE);
    float *ref_logits = read_floats(test_fixture("whisper/logits.bin"), (size_t)N_GOLDEN_TOKENS * GOLDEN_VOCAB);
    struct tpool *tp = tpool_new(2, err, sizeof err);
    struct whisper_state *s = whisper_state_new(m, tp, err, sizeof err);
    CHECK(feats && ref_enc && ref_logits && tp && s);
    CHECK_EQ(whisper_model_hparams(m)->n_vocab, GOLDEN_VOCAB);
    CHECK_EQ(whisper_token_special(m, WHISPER_TOKEN_SOT), -1); /* too small a vocab for specials */

    CHECK_EQ(whisper_encode(s, feats, 3000, 0, err, sizeof err), OMNI_OK);
    const double d_enc = max_abs_diff(whisper_encoder_output(s), ref_enc, (size_t)GOLDEN_CTX * GOLDEN_STATE);
    CHECK_EQ(whisper_decode(s, 0, golden_tokens, N_GOLDEN_TOKENS, 0, true, err, sizeof err), OMNI_OK);
    const double d_all = max_abs_diff(whisper_logits(s), ref_logits, (size_t)N_GOLDEN_TOKENS * GOLDEN_VOCAB);
    double d_step = 0;
    for (int t = 0; t < N_GOLDEN_TOKENS; t++) {
        CHECK_EQ(whisper_decode(s, 3, golden_tokens + t, 1, t, false, err, sizeof err), OMNI_OK);
        d_step = fmax(d_step, max_abs_diff(whisper_logits(s), ref_logits + (size_t)t * GOLDEN_VOCAB, GOLDEN_VOCAB));
    }
    fprintf(stderr, "[%s: encoder %.2e, logits %.2e, cached %.2e] ", type, d_enc, d_all, d_step);
    CHECK(d_enc < tol_enc);
    CHECK(d_all < tol_logits);
    CHECK(d_step < tol_logits);

    whisper_state_free(s);
    tpool_free(tp);
    whisper_model_free(m);
    free(feats);
    free(ref_enc);
    free(ref_logits);
}

TEST(whisper_golden_f32) { check_golden("f32", 1e-3, 1e-3); }
TEST(whisper_golden_f16) { check_golden("f16", 2e-2, 5e-2); }
TEST(whisper_golden_q8_0) { check_golden("q8_0", 1e-1, 5e-1); } /* activations are Q8_0 too */
