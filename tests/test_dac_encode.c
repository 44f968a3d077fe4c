/* test_dac_encode.c - the DAC encoder (audio/codec/dac_encode.c).
 *
 * Fixtures in tests/fixtures/dac/enc/ (tools/make_dac_encoder_golden.py on
 * the committed tiny checkpoint tests/fixtures/dac/hf_wn, transformers 5.17,
 * whose GGUF is tests/fixtures/dac/hf_tiny_enc.gguf): for input a (32 frames of
 * 40 samples) and b (1097 samples: the strided convs drop a remainder)
 *   enc_X_input.f32   the waveform
 *   enc_X_latent.f32  DacModel.encoder(input), [16][frames]
 *   enc_X_codes.json  DacModel.encode(input).audio_codes, [3][frames]
 *   enc_X_margin.f32  [3][frames]: the best score minus the second best of
 *                     each nearest-code choice (smallest 1.4e-4)
 * and mid_enc_X_* likewise for tests/fixtures/dac/mid_enc.gguf (below). */
#include "test.h"
#include "tests/dac_fixtures.h"

#include "audio/codec/dac_encode.h"
#include "src/core/omni.h"
#include "src/core/threadpool.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

static void free_enc(void *m) { dac_encoder_free(m); }
static void free_pool(void *tp) { tpool_free(tp); }

static float *read_f32(const char *rel, size_t *n)
{
    size_t len = 0;
    char *b = test_read_file(test_fixture(rel), &len);
    *n = len / sizeof(float);
    return (float *)b;
}

/* fixture dac/enc/<pfx>enc_<which>_*: n_q codebooks, hidden latent channels;
 * codes whose choice had a margin under min_margin may differ (counted) */
static void check_case_at(struct dac_encoder *m, struct tpool *tp, const char *pfx, char which,
                          int n_q_want, int hidden, double min_margin, int *n_close)
{
    char rel[96], err[256];
    size_t n_in = 0, n_lat = 0, n_mar = 0;
    snprintf(rel, sizeof rel, "dac/enc/%senc_%c_input.f32", pfx, which);
    float *in = read_f32(rel, &n_in);
    snprintf(rel, sizeof rel, "dac/enc/%senc_%c_latent.f32", pfx, which);
    float *lat_ref = read_f32(rel, &n_lat);
    snprintf(rel, sizeof rel, "dac/enc/%senc_%c_margin.f32", pfx, which);
    float *margin = read_f32(rel, &n_mar);
    int n_q = 0;
    int64_t nf_ref = 0;
    snprintf(rel, sizeof rel, "dac/enc/%senc_%c_codes.json", pfx, which);
    int32_t *codes_ref = dac_fixture_codes(test_fixture(rel), &n_q, &nf_ref);
    CHECK(in && lat_ref && margin && codes_ref);
    CHECK_EQ(n_q, n_q_want);
    int32_t *codes = NULL;
    float *lat = NULL;
    int64_t nf = 0;
    int rc = dac_encode(m, tp, in, (int64_t)n_in, n_q, &codes, &nf, &lat, err, sizeof err);
    CHECK_MSG(rc == 0, "%s", err);
    CHECK_EQ(nf, nf_ref);
    CHECK_EQ(dac_encoder_frames(m, (int64_t)n_in), nf_ref);
    CHECK_EQ((int64_t)n_lat, hidden * nf_ref);
    CHECK_EQ((int64_t)n_mar, n_q * nf_ref);
    double maxd = 0, rms = 0;
    for (size_t i = 0; i < n_lat; i++) {
        maxd = fmax(maxd, fabs((double)lat[i] - lat_ref[i]));
        rms += (double)lat_ref[i] * lat_ref[i];
    }
    rms = sqrt(rms / (double)n_lat);
    CHECK_MSG(maxd <= 1e-4 * fmax(1.0, rms), "latent %c: max diff %g (rms %g)", which, maxd, rms);
    /* a choice can flip only where its margin is within the latent's
     * rounding; once one flips, the residuals of the later codebooks of
     * that frame differ, so a frame's later codes are not compared */
    int diff = 0;
    for (int64_t f = 0; f < nf; f++)
        for (int q = 0; q < n_q; q++) {
            int64_t i = (int64_t)q * nf + f;
            if (codes[i] == codes_ref[i])
                continue;
            if (margin[i] < min_margin) {
                ++*n_close;
                break;
            }
            diff++;
        }
    CHECK_MSG(diff == 0, "%s input %c: %d of %lld codes differ", pfx, which, diff,
              (long long)(n_q * nf));
    /* the first 2 codebooks alone (OuteTTS): the same codes */
    int32_t *c2 = NULL;
    int64_t nf2 = 0;
    CHECK(dac_encode(m, tp, in, (int64_t)n_in, 2, &c2, &nf2, NULL, err, sizeof err) == 0);
    CHECK(nf2 == nf && memcmp(c2, codes, 2 * nf * sizeof *c2) == 0);
    free(c2);
    free(codes);
    free(lat);
    free(in);
    free(lat_ref);
    free(margin);
    free(codes_ref);
}

static void check_case(struct dac_encoder *m, struct tpool *tp, char which)
{
    int close = 0;
    check_case_at(m, tp, "", which, 3, 16, 0, &close);
    CHECK_EQ(close, 0);
}

/* Codes identical to transformers' DacModel.encode, latent within 1e-4. */
TEST(dac_encode_golden)
{
    char err[256];
    struct dac_encoder *m = dac_encoder_load(test_fixture("dac/hf_tiny_enc.gguf"), err, sizeof err);
    CHECK_MSG(m, "%s", err);
    test_defer(free_enc, m);
    const struct dac_encoder_info *I = dac_encoder_get_info(m);
    CHECK_EQ(I->hop, 40);
    CHECK_EQ(I->n_codebooks, 3);
    CHECK_EQ(I->encoder_hidden_size, 4);
    CHECK_EQ(I->n_blocks, 3);
    check_case(m, NULL, 'a');
    check_case(m, NULL, 'b');
    struct tpool *tp = tpool_new(2, err, sizeof err);
    CHECK(tp);
    test_defer(free_pool, tp);
    check_case(m, tp, 'a');
}

/* Tiles of any size give the same codes and the same latent bits. */
TEST(dac_encode_tiles)
{
    char err[256];
    struct dac_encoder *m = dac_encoder_load(test_fixture("dac/hf_tiny_enc.gguf"), err, sizeof err);
    CHECK_MSG(m, "%s", err);
    test_defer(free_enc, m);
    size_t n_in = 0;
    float *a = read_f32("dac/enc/enc_a_input.f32", &n_in);
    CHECK(a);
    /* 4 times input a, reversed every other time: 5120 samples */
    float *x = malloc(4 * n_in * sizeof *x);
    CHECK(x);
    for (size_t r = 0; r < 4; r++)
        for (size_t i = 0; i < n_in; i++)
            x[r * n_in + i] = r % 2 ? a[n_in - 1 - i] : a[i];
    int32_t *c_ref = NULL, *c = NULL;
    float *l_ref = NULL, *l = NULL;
    int64_t nf_ref = 0, nf = 0;
    CHECK(dac_encode(m, NULL, x, 4 * (int64_t)n_in, 3, &c_ref, &nf_ref, &l_ref, err, sizeof err) == 0);
    static const int tiles[] = { 1, 7, 64, 1000 };
    for (int k = 0; k < 4; k++) {
        dac_encoder_set_tile(m, tiles[k]);
        CHECK(dac_encode(m, NULL, x, 4 * (int64_t)n_in, 3, &c, &nf, &l, err, sizeof err) == 0);
        CHECK_EQ(nf, nf_ref);
        CHECK_MSG(memcmp(c, c_ref, 3 * nf * sizeof *c) == 0, "tile %d: codes differ", tiles[k]);
        double maxd = 0;
        for (int64_t i = 0; i < 16 * nf; i++)
            maxd = fmax(maxd, fabs((double)l[i] - l_ref[i]));
        CHECK_MSG(maxd < 1e-4, "tile %d: latent differs by %g", tiles[k], maxd);
        free(c);
        free(l);
    }
    free(c_ref);
    free(l_ref);
    free(x);
    free(a);
}

/* Bad input gets a named error, never a crash. */
TEST(dac_encode_rejects_bad_input)
{
    char err[256];
    /* a decoder-only file (tools/random_dac.py writes no encoder) */
    CHECK(dac_encoder_load(test_fixture("dac/random_tiny.gguf"), err, sizeof err) == NULL);
    CHECK_STR_CONTAINS(err, "encoder");
    /* not a DAC GGUF, not a file */
    CHECK(dac_encoder_load(test_fixture("outetts/speaker_tiny.json"), err, sizeof err) == NULL);
    CHECK(dac_encoder_load("/nonexistent/dac.gguf", err, sizeof err) == NULL);
    struct dac_encoder *m = dac_encoder_load(test_fixture("dac/hf_tiny_enc.gguf"), err, sizeof err);
    CHECK(m);
    test_defer(free_enc, m);
    float x[64] = { 0 };
    int32_t *codes = NULL;
    int64_t nf = 0;
    CHECK(dac_encode(m, NULL, x, 10, 2, &codes, &nf, NULL, err, sizeof err) == OMNI_ERR_ARG);
    CHECK_STR_CONTAINS(err, "less than one frame");
    CHECK(dac_encode(m, NULL, x, 64, 4, &codes, &nf, NULL, err, sizeof err) == OMNI_ERR_ARG);
    CHECK(dac_encode(m, NULL, x, 64, 0, &codes, &nf, NULL, err, sizeof err) == OMNI_ERR_ARG);
    CHECK(codes == NULL && nf == 0);
    /* silence encodes (zero latent rows normalize to zero, not NaN) */
    CHECK(dac_encode(m, NULL, x, 64, 3, &codes, &nf, NULL, err, sizeof err) == 0);
    CHECK(nf >= 1);
    free(codes);
}

/* DAC.speech's strides (2, 4, 5, 8: kernels 4, 8, 10, 16, odd stride 5) and
 * codebooks (4 x 1024 x 8) with narrow channels (tests/fixtures/dac/
 * mid_enc.gguf from tools/make_dac_encoder_golden.py --mid, GPU job
 * h_dacenc2, transformers 5.17; smallest score margin 8.8e-4). */
TEST(dac_encode_golden_speech_strides)
{
    char err[256];
    struct dac_encoder *m = dac_encoder_load(test_fixture("dac/mid_enc.gguf"), err, sizeof err);
    CHECK_MSG(m, "%s", err);
    test_defer(free_enc, m);
    const struct dac_encoder_info *I = dac_encoder_get_info(m);
    CHECK_EQ(I->hop, 320);
    CHECK_EQ(I->n_codebooks, 4);
    CHECK_EQ(I->codebook_size, 1024);
    int close = 0;
    check_case_at(m, NULL, "mid_", 'a', 4, 64, 0, &close);
    check_case_at(m, NULL, "mid_", 'b', 4, 64, 0, &close);
    CHECK_EQ(close, 0);
}
