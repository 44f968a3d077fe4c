/* test_dac.c - the DAC decoder (audio/codec/dac.c) and src/core/conv1d.
 *
 * Fixtures in tests/fixtures/dac/:
 *   random_tiny.gguf, random_codes.json, random_ref.f32  a tiny random DAC
 *       (tools/random_dac.py --shape tiny --seed 7 --frames 24) and its
 *       numpy reference decode (float64 math)
 *   hf_tiny.gguf, hf_codes.json, hf_decode.f32, hf_decode_2cb.f32,
 *   hf_wn/ (config.json, model.safetensors)  a tiny random transformers
 *       DacModel (tools/make_dac_golden.py, weight norm applied and
 *       perturbed), converted by tools/hf_dac_to_gguf.py, and its
 *       DacModel.decode(audio_codes=...) output with 3 and 2 codebooks */
#define _GNU_SOURCE   /* memmem */
#include "test.h"
#include "tests/dac_fixtures.h"

#include "audio/codec/dac.h"
#include "src/cli/cli.h"
#include "src/core/conv1d.h"
#include "src/core/cpu.h"
#include "src/core/omni.h"
#include "src/core/threadpool.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

static void free_dac(void *m) { dac_free(m); }
static void free_pool(void *tp) { tpool_free(tp); }

/* tests/dac_fixtures.h */
int32_t *dac_fixture_codes(const char *path, int *n_q, int64_t *n_frames)
{
    char *text = test_read_file(path, NULL);
    cJSON *j = text ? cJSON_Parse(text) : NULL;
    free(text);
    if (!j)
        return NULL;
    *n_q = cJSON_GetArraySize(j);
    *n_frames = cJSON_GetArraySize(cJSON_GetArrayItem(j, 0));
    int32_t *c = malloc((size_t)*n_q * *n_frames * sizeof *c);
    for (int q = 0; c && q < *n_q; q++)
        for (int64_t f = 0; f < *n_frames; f++)
            c[q * *n_frames + f] = cJSON_GetArrayItem(cJSON_GetArrayItem(j, q), (int)f)->valueint;
    cJSON_Delete(j);
    return c;
}

/* One-shot decode of a fixture's codes (first n_q codebooks) against a reference. */
static void check_decode(const char *gguf, const char *codes_json, int n_q_use, const char *ref,
                         double tol)
{
    char err[256];
    struct dac_model *m = dac_load(test_fixture(gguf), err, sizeof err);
    CHECK_MSG(m, "%s", err);
    test_defer(free_dac, m);
    int n_q;
    int64_t n_frames;
    int32_t *codes = dac_fixture_codes(test_fixture(codes_json), &n_q, &n_frames);
    CHECK(codes);
    if (n_q_use)
        n_q = n_q_use;   /* the first n_q rows of codes[q * n_frames + f] */
    int64_t n_exp = dac_samples_for_frames(m, n_frames);
    float *want = test_read_floats(test_fixture(ref), (size_t)n_exp);
    CHECK_MSG(want, "%s: not %lld floats", ref, (long long)n_exp);
    for (int nth = 1; nth <= 3; nth += 2) {
        struct tpool *tp = tpool_new(nth, err, sizeof err);
        CHECK(tp);
        test_defer(free_pool, tp);
        float *pcm;
        int64_t n;
        CHECK_MSG(dac_decode(m, tp, codes, n_q, n_frames, &pcm, &n, err, sizeof err) == 0, "%s",
                  err);
        CHECK_EQ(n, n_exp);
        double d = test_max_diff(pcm, want, (size_t)n);
        free(pcm);
        CHECK_MSG(d <= tol, "%s threads %d: max diff %g > %g", ref, nth, d, tol);
        test_release(tp);
    }
    free(want);
    free(codes);
}

TEST(dac_random_matches_numpy_reference)
{
    check_decode("dac/random_tiny.gguf", "dac/random_codes.json", 0, "dac/random_ref.f32", 1e-4);
}

TEST(dac_golden_transformers)
{
    if (access(test_fixture("dac/hf_tiny.gguf"), R_OK) != 0)
        SKIP("tests/fixtures/dac/hf_tiny.gguf not made yet (tools/make_dac_golden.py)");
    check_decode("dac/hf_tiny.gguf", "dac/hf_codes.json", 0, "dac/hf_decode.f32", 1e-4);
    if (test_failed_now())
        return;
    check_decode("dac/hf_tiny.gguf", "dac/hf_codes.json", 2, "dac/hf_decode_2cb.f32", 1e-4);
}

/* The converter on the weight-normed safetensors gives the same decode. */
TEST(dac_golden_converter)
{
    if (access(test_fixture("dac/hf_wn/model.safetensors"), R_OK) != 0)
        SKIP("tests/fixtures/dac/hf_wn not made yet (tools/make_dac_golden.py)");
    if (system("/usr/bin/python3 -c 'import numpy' >/dev/null 2>&1") != 0)
        SKIP("no /usr/bin/python3 with numpy");
    char out[600], cmd[2048];
    snprintf(out, sizeof out, "%s/dac_conv.gguf", test_tmpdir());
    snprintf(cmd, sizeof cmd, "/usr/bin/python3 tools/hf_dac_to_gguf.py %s -o %s 2>/dev/null",
             test_fixture("dac/hf_wn"), out);
    CHECK(system(cmd) == 0);
    char err[256];
    struct dac_model *m = dac_load(out, err, sizeof err);
    CHECK_MSG(m, "%s", err);
    test_defer(free_dac, m);
    int n_q;
    int64_t n_frames;
    int32_t *codes = dac_fixture_codes(test_fixture("dac/hf_codes.json"), &n_q, &n_frames);
    CHECK(codes);
    int64_t n_exp = dac_samples_for_frames(m, n_frames);
    float *want = test_read_floats(test_fixture("dac/hf_decode.f32"), (size_t)n_exp), *pcm;
    CHECK(want);
    int64_t n;
    CHECK_MSG(dac_decode(m, NULL, codes, n_q, n_frames, &pcm, &n, err, sizeof err) == 0, "%s",
              err);
    double d = test_max_diff(pcm, want, (size_t)n);
    free(pcm);
    free(want);
    free(codes);
    CHECK_MSG(d <= 1e-4, "max diff %g", d);
}

/* Frames pushed one by one (and in bursts) through the stream, stitched,
 * equal the one-shot decode bit for bit (the same layer pipeline, whose
 * kernels sum in an order that does not depend on the rows a run has);
 * every chunk size, every codebook count. */
TEST(dac_stream_equals_one_shot)
{
    char err[256];
    struct dac_model *m = dac_load(test_fixture("dac/random_tiny.gguf"), err, sizeof err);
    CHECK_MSG(m, "%s", err);
    test_defer(free_dac, m);
    struct tpool *tp = tpool_new(2, err, sizeof err);
    CHECK(tp);
    test_defer(free_pool, tp);
    const int64_t n_frames = 150;
    int32_t codes[3 * 150], frames[150 * 3];
    uint32_t seed = 12345;
    for (int i = 0; i < 3 * 150; i++) {
        seed = seed * 1664525u + 1013904223u;
        codes[i] = (int32_t)((seed >> 8) % 64);
    }
    for (int n_q = 1; n_q <= 3; n_q++) {
        float *one;
        int64_t n_one;
        CHECK_MSG(dac_decode(m, tp, codes, n_q, n_frames, &one, &n_one, err, sizeof err) == 0,
                  "%s", err);
        CHECK_EQ(n_one, dac_samples_for_frames(m, n_frames));
        for (int64_t f = 0; f < n_frames; f++)
            for (int q = 0; q < n_q; q++)
                frames[f * n_q + q] = codes[q * n_frames + f];
        static const int chunks[][3] = { { 8, 32, 1 }, { 1, 1, 1 }, { 3, 7, 5 }, { 40, 40, 150 } };
        for (size_t c = 0; c < sizeof chunks / sizeof chunks[0]; c++) {
            if (chunks[c][1] == 1 && n_q != 2)
                continue;   /* a window per frame: slow, once is enough */
            struct dac_stream_params p = { .first_chunk_frames = chunks[c][0],
                                           .chunk_frames = chunks[c][1] };
            int burst = chunks[c][2];
            struct dac_stream *s = dac_stream_new(m, &p, n_q, err, sizeof err);
            CHECK_MSG(s, "%s", err);
            float *got = malloc((size_t)n_one * sizeof *got);
            int64_t n = 0, k;
            const float *part;
            bool ok = true, first_early = false;
            for (int64_t f = 0; f < n_frames && ok; f += burst) {
                int nf = (int)(f + burst <= n_frames ? burst : n_frames - f);
                ok = dac_stream_push(s, tp, frames + f * n_q, nf, &part, &k, err, sizeof err) ==
                     0 && n + k <= n_one;
                if (ok && k > 0) { /* part is NULL while nothing is ready */
                    memcpy(got + n, part, (size_t)k * sizeof *got);
                    n += k;
                    first_early |= f + nf < n_frames;
                }
            }
            ok = ok && dac_stream_finish(s, tp, &part, &k, err, sizeof err) == 0 &&
                 n + k == n_one;
            if (ok && k > 0) {
                memcpy(got + n, part, (size_t)k * sizeof *got);
                n += k;
            }
            double d = ok ? test_max_diff(got, one, (size_t)n_one) : 1e9;
            dac_stream_free(s);
            free(got);
            if (!ok)
                free(one);
            CHECK_MSG(ok, "n_q %d chunks %d/%d burst %d: %s", n_q, chunks[c][0], chunks[c][1],
                      burst, err);
            if (burst < 150 && !first_early) {
                free(one);
                CHECK_MSG(0, "n_q %d chunks %d/%d: no audio before the end", n_q,
                          chunks[c][0], chunks[c][1]);
            }
            if (d != 0)
                free(one);
            CHECK_MSG(d == 0, "n_q %d chunks %d/%d burst %d: max diff %g", n_q,
                      chunks[c][0], chunks[c][1], burst, d);
        }
        free(one);
    }
}

/* A copy of the tiny model with the bytes of `from` replaced by `to`
 * (same length) at their first occurrence. */
static const char *patched_copy(const char *name, const char *from, const char *to, size_t skip)
{
    static char path[4][600];
    static int slot;
    char *p = path[slot++ & 3];
    size_t len;
    char *buf = test_read_file(test_fixture("dac/random_tiny.gguf"), &len);
    if (!buf)
        return NULL;
    size_t fl = strlen(from);
    char *hit = memmem(buf, len, from, fl);
    if (!hit) {
        free(buf);
        return NULL;
    }
    memcpy(hit + skip, to, strlen(to));
    snprintf(p, 600, "%s/%s", test_tmpdir(), name);
    FILE *f = fopen(p, "wb");
    bool ok = f && fwrite(buf, 1, len, f) == len;
    if (f)
        ok = fclose(f) == 0 && ok;
    free(buf);
    return ok ? p : NULL;
}

TEST(dac_rejects_bad_files)
{
    char err[256];
    /* not a DAC: general.architecture's value (after the key, type u32 and length u64) */
    const char *p = patched_copy("arch.gguf", "general.architecture",
                                 "lla", strlen("general.architecture") + 4 + 8);
    CHECK(p);
    CHECK(dac_load(p, err, sizeof err) == NULL);
    CHECK_STR_CONTAINS(err, "general.architecture is 'lla', not 'dac'");
    CHECK_STR_CONTAINS(err, "arch.gguf");
    /* a tensor renamed away */
    p = patched_copy("tensor.gguf", "decoder.block.1.res_unit2.conv1.weight",
                     "decoder.block.1.res_unit2.conv1.weighx", 0);
    CHECK(p);
    CHECK(dac_load(p, err, sizeof err) == NULL);
    CHECK_STR_CONTAINS(err, "tensor 'decoder.block.1.res_unit2.conv1.weight' missing");
    CHECK_STR_CONTAINS(err, "tensor.gguf");
    /* a key renamed away */
    p = patched_copy("key.gguf", "dac.codebook_size", "dac.codebook_sizx", 0);
    CHECK(p);
    CHECK(dac_load(p, err, sizeof err) == NULL);
    CHECK_STR_CONTAINS(err, "dac.codebook_size");
    /* not a GGUF at all, and a missing file */
    CHECK(dac_load(test_fixture("dac/random_codes.json"), err, sizeof err) == NULL);
    CHECK(dac_load("/nonexistent/dac.gguf", err, sizeof err) == NULL);
}

TEST(dac_rejects_bad_codes)
{
    char err[256];
    struct dac_model *m = dac_load(test_fixture("dac/random_tiny.gguf"), err, sizeof err);
    CHECK_MSG(m, "%s", err);
    test_defer(free_dac, m);
    int32_t codes[2 * 4] = { 1, 2, 3, 4, 5, 6, 64, 7 };
    float *pcm = NULL;
    int64_t n;
    CHECK(dac_decode(m, NULL, codes, 2, 4, &pcm, &n, err, sizeof err) == OMNI_ERR_ARG);
    CHECK(pcm == NULL);
    CHECK_STR_CONTAINS(err, "code 64 of codebook 1 at frame 2 is out of range [0, 64)");
    codes[6] = -1;
    CHECK(dac_decode(m, NULL, codes, 2, 4, &pcm, &n, err, sizeof err) == OMNI_ERR_ARG);
    codes[6] = 0;
    CHECK(dac_decode(m, NULL, codes, 4, 2, &pcm, &n, err, sizeof err) == OMNI_ERR_ARG);
    CHECK_STR_CONTAINS(err, "model has 3");
    CHECK(dac_decode(m, NULL, codes, 2, 0, &pcm, &n, err, sizeof err) == OMNI_ERR_ARG);
    /* a stream keeps nothing of a bad push and goes on */
    struct dac_stream *s = dac_stream_new(m, NULL, 2, err, sizeof err);
    CHECK(s);
    const float *part;
    int32_t bad[2] = { 0, 99 }, good[2] = { 0, 1 };
    bool ok = dac_stream_push(s, NULL, bad, 1, &part, &n, err, sizeof err) == OMNI_ERR_ARG &&
              dac_stream_frames(s) == 0 &&
              dac_stream_push(s, NULL, good, 1, &part, &n, err, sizeof err) == 0 &&
              dac_stream_finish(s, NULL, &part, &n, err, sizeof err) == 0 &&
              n == dac_samples_for_frames(m, 1) &&
              dac_stream_push(s, NULL, good, 1, &part, &n, err, sizeof err) < 0;
    dac_stream_free(s);
    CHECK(ok);
    CHECK(dac_stream_new(m, NULL, 0, err, sizeof err) == NULL);
}

/* codec-decode: wav and f32 outputs, one shot and streamed, bad codes named. */
TEST(dac_cli_codec_decode)
{
    char f1[600], f2[600], wav[600], bad[600];
    snprintf(f1, sizeof f1, "%s/cd_one.f32", test_tmpdir());
    snprintf(f2, sizeof f2, "%s/cd_stream.f32", test_tmpdir());
    snprintf(wav, sizeof wav, "%s/cd.wav", test_tmpdir());
    snprintf(bad, sizeof bad, "%s/cd_bad.json", test_tmpdir());
    char *gg = strdup(test_fixture("dac/random_tiny.gguf"));
    char *cj = strdup(test_fixture("dac/random_codes.json"));
    char *a1[] = { "codec-decode", "--codec", gg, "--codes", cj, "--f32", f1, "-o", wav,
                   "--threads", "2" };
    char *a2[] = { "codec-decode", "--codec", gg, "--codes", cj, "--f32", f2, "--stream",
                   "--chunk", "3" };
    int r1 = cli_codec_decode(11, a1), r2 = cli_codec_decode(10, a2);
    FILE *f = fopen(bad, "w");
    if (f) {
        fputs("[[1, 2, 3], [4, 5, 1000]]", f);
        fclose(f);
    }
    char *a3[] = { "codec-decode", "--codec", gg, "--codes", bad, "--f32", f2 };
    int r3 = cli_codec_decode(7, a3);
    f = fopen(bad, "w");
    if (f) {
        fputs("[[1, 2, 3], [4, 5]]", f);
        fclose(f);
    }
    int r4 = cli_codec_decode(7, a3);
    free(gg);
    free(cj);
    CHECK_EQ(r1, 0);
    CHECK_EQ(r2, 0);
    CHECK_EQ(r3, 1);
    CHECK_EQ(r4, 1);
    float *a = test_read_floats(f1, 956), *b = test_read_floats(f2, 956);
    bool same = a && b && test_max_diff(a, b, 956) <= 1e-4;
    free(a);
    free(b);
    CHECK(same);
    struct stat st;
    CHECK(stat(wav, &st) == 0);
    CHECK(st.st_size >= 44 + 2 * 956 && st.st_size < 200 + 2 * 956);   /* 16-bit mono */
}

/* conv1d.h against direct sums: dilation, padding, accumulate, transposed
 * convs with even and odd strides, 1 and 3 threads. */
TEST(conv1d_matches_direct_sums)
{
    char err[128];
    uint32_t seed = 7;
    float w[96], wp[1024], b[5], x[20 * 4], y[40 * 5], ref[40 * 5], scr[4096];
#define RND() ((seed = seed * 1664525u + 1013904223u), (float)((seed >> 8) % 2001) / 1000.0f - 1.0f)
    for (size_t i = 0; i < sizeof w / sizeof *w; i++)
        w[i] = RND();
    for (int i = 0; i < 5; i++)
        b[i] = RND();
    for (int i = 0; i < 80; i++)
        x[i] = RND();
    for (int nth = 1; nth <= 3; nth += 2) {
        struct tpool *tp = tpool_new(nth, err, sizeof err);
        CHECK(tp);
        test_defer(free_pool, tp);
        /* Conv1d c_in 4 -> c_out 5, k 3, dilation 2, pad 2; torch layout w[o][i][j] */
        CHECK(omni_conv1d_packed_floats(5, 4, 3) <= 1024);
        omni_conv1d_pack(w, 5, 4, 3, wp);
        struct omni_conv1d c = { .c_in = 4, .c_out = 5, .k = 3, .dilation = 2, .pad = 2,
                                 .w = wp, .b = b };
        int64_t to = omni_conv1d_out_len(&c, 20);
        CHECK_EQ(to, 20);
        CHECK(omni_conv1d_scratch(&c, 20, true) <= 4096);
        for (int64_t t = 0; t < to; t++)
            for (int o = 0; o < 5; o++) {
                double s = b[o];
                for (int i = 0; i < 4; i++)
                    for (int j = 0; j < 3; j++) {
                        int64_t u = t + j * 2 - 2;
                        if (u >= 0 && u < 20)
                            s += (double)w[(o * 4 + i) * 3 + j] * x[u * 4 + i];
                    }
                ref[t * 5 + o] = (float)s;
            }
        CHECK(omni_conv1d_run(tp, &c, x, 20, scr, y, false) == 0);
        CHECK(test_max_diff(y, ref, 100) <= 1e-5);
        CHECK(omni_conv1d_run(tp, &c, x, 20, scr, y, true) == 0);   /* y = 2 ref */
        for (int i = 0; i < 100; i++)
            ref[i] *= 2;
        CHECK(test_max_diff(y, ref, 100) <= 1e-5);
        /* ConvTranspose1d c_in 4 -> c_out 3 (torch w[i][o][j]), strides 2 and 3 */
        for (int s = 2; s <= 3; s++) {
            int k = 2 * s, pad = (s + 1) / 2;
            CHECK(omni_conv_t1d_packed_floats(4, 3, k, s) <= 1024);
            omni_conv_t1d_pack(w, 4, 3, k, s, wp);
            struct omni_conv_t1d u = { .c_in = 4, .c_out = 3, .k = k, .stride = s, .pad = pad,
                                       .w = wp, .b = b };
            int64_t tu = omni_conv_t1d_out_len(&u, 10);
            CHECK_EQ(tu, 9 * s + k - 2 * pad);
            double full[64 * 3] = { 0 };
            for (int i = 0; i < 10; i++)
                for (int j = 0; j < k; j++)
                    for (int o = 0; o < 3; o++)
                        for (int c2 = 0; c2 < 4; c2++)
                            full[(i * s + j) * 3 + o] += (double)x[i * 4 + c2] *
                                                         w[(c2 * 3 + o) * k + j];
            for (int64_t t = 0; t < tu; t++)
                for (int o = 0; o < 3; o++)
                    ref[t * 3 + o] = (float)(full[(t + pad) * 3 + o] + b[o]);
            CHECK(omni_conv_t1d_scratch(&u, 10) <= 4096);
            CHECK(omni_conv_t1d_run(tp, &u, x, 10, scr, y) == 0);
            CHECK(test_max_diff(y, ref, (size_t)tu * 3) <= 1e-5);
        }
        test_release(tp);
    }
#undef RND
}

/* Snake's fast sin^2 against libm over small, large and huge arguments. */
TEST(conv1d_snake_matches_libm)
{
    enum { T = 64, C = 48 };
    float x[T * C], y[T * C], alpha[C];
    uint32_t seed = 99;
    for (int i = 0; i < C; i++) {
        seed = seed * 1664525u + 1013904223u;
        alpha[i] = 0.05f + (float)((seed >> 8) % 3000) / 1000.0f;
    }
    for (int i = 0; i < T * C; i++) {
        seed = seed * 1664525u + 1013904223u;
        float u = (float)((seed >> 8) % 2000001) / 1000000.0f - 1.0f;   /* -1..1 */
        float scale = i % 3 == 0 ? 3.0f : i % 3 == 1 ? 300.0f : 30000.0f;
        x[i] = u * scale;
    }
    omni_snake(NULL, x, T, C, alpha, y);
    double worst = 0;
    for (int t = 0; t < T; t++)
        for (int c = 0; c < C; c++) {
            double a = alpha[c], v = x[t * C + c];
            double s = sin((double)(float)(alpha[c] * x[t * C + c]));   /* the float product */
            double want = v + (1.0 / (a + 1e-9)) * s * s;
            double d = fabs(y[t * C + c] - want) / (1.0 + fabs(want));
            worst = d > worst ? d : worst;
        }
    CHECK_MSG(worst < 2e-6, "worst relative error %g", worst);
}

/* The kernels (src/core/arch/x86/conv_x86.h) at every level this CPU has,
 * against double sums, on shapes that take several K slabs, several column
 * groups, partial row tiles and a partial column tile: padded and
 * accumulating runs, the fused valid form (Snake in and out, residual), a
 * transposed conv whole and in ranges (the ranges equal the whole bit for
 * bit), 1 and 3 threads. Bound: 1e-5 of the sum of |terms| (float32
 * summation). */
static double snake_d(double x, double a)
{
    double s = sin((double)(float)((float)a * (float)x));
    return x + s * s / (a + 1e-9);
}

static float rndf(uint32_t *seed)
{
    *seed = *seed * 1664525u + 1013904223u;
    return (float)((*seed >> 8) % 2001) / 1000.0f - 1.0f;
}

TEST(conv1d_kernels_every_level)
{
    enum { CI = 300, CO = 230, K = 5, DIL = 3, PAD = 6, T = 29, TO = T + 2 * PAD - DIL * (K - 1) };
    enum { TCI = 40, TCO = 37, S = 5, TK = 10, TPAD = 3, TT = 13 };
    uint32_t seed = 11;
    float *w = malloc(sizeof(float) * CO * CI * K), *b = malloc(sizeof(float) * CO);
    float *x = malloc(sizeof(float) * T * CI), *ai = malloc(sizeof(float) * CI);
    float *ao = malloc(sizeof(float) * CO), *res = malloc(sizeof(float) * TO * CO);
    float *wp = malloc(sizeof(float) * omni_conv1d_packed_floats(CO, CI, K));
    float *y = malloc(sizeof(float) * TO * CO), *scr = malloc(sizeof(float) * (T + 2 * PAD) * CI);
    double *ref = malloc(sizeof(double) * TO * CO), *bound = malloc(sizeof(double) * TO * CO);
    double *fref = malloc(sizeof(double) * TO * CO), *fbound = malloc(sizeof(double) * TO * CO);
    float *tw = malloc(sizeof(float) * TCI * TCO * TK), *twp =
        malloc(sizeof(float) * omni_conv_t1d_packed_floats(TCI, TCO, TK, S));
    float *tx = malloc(sizeof(float) * TT * TCI), *ty = malloc(sizeof(float) * 80 * TCO);
    float *ty2 = malloc(sizeof(float) * 80 * TCO), *tscr = malloc(sizeof(float) * 80 * TCI);
    double *tref = calloc((size_t)80 * TCO, sizeof(double)), *tbound = calloc((size_t)80 * TCO,
                                                                               sizeof(double));
    CHECK(w && b && x && ai && ao && res && wp && y && scr && ref && bound && fref && fbound &&
          tw && twp && tx && ty && ty2 && tscr && tref && tbound);
    for (int i = 0; i < CO * CI * K; i++)
        w[i] = rndf(&seed);
    for (int i = 0; i < CO; i++)
        b[i] = rndf(&seed), ao[i] = 0.1f + 0.5f * (rndf(&seed) + 1.0f);
    for (int i = 0; i < CI; i++)
        ai[i] = 0.1f + 0.5f * (rndf(&seed) + 1.0f);
    for (int i = 0; i < T * CI; i++)
        x[i] = 2.0f * rndf(&seed);
    for (int i = 0; i < TO * CO; i++)
        res[i] = rndf(&seed);
    omni_conv1d_pack(w, CO, CI, K, wp);
    /* plain: ref; fused (valid over the padded rows, Snake in/out, + res): fref before snake_out */
    for (int t = 0; t < TO; t++)
        for (int o = 0; o < CO; o++) {
            double s = b[o], sa = fabs(b[o]), f = b[o] + (double)res[t * CO + o];
            double fa = fabs(b[o]) + fabs(res[t * CO + o]);
            for (int j = 0; j < K; j++) {
                int u = t + j * DIL - PAD;
                if (u < 0 || u >= T)
                    continue;
                for (int i = 0; i < CI; i++) {
                    double p = (double)w[((size_t)o * CI + i) * K + j] * x[u * CI + i];
                    double q = (double)w[((size_t)o * CI + i) * K + j] * snake_d(x[u * CI + i], ai[i]);
                    s += p, sa += fabs(p), f += q, fa += fabs(q);
                }
            }
            ref[t * CO + o] = s, bound[t * CO + o] = 1e-5 * (sa + 1);
            fref[t * CO + o] = snake_d(f, ao[o]);
            /* Snake's slope is at most 2: the bound carries through */
            fbound[t * CO + o] = 1e-5 * (2 * fa + 1);
        }
    for (int i = 0; i < TCI * TCO * TK; i++)
        tw[i] = rndf(&seed);
    for (int i = 0; i < TT * TCI; i++)
        tx[i] = rndf(&seed);
    struct omni_conv_t1d tc = { .c_in = TCI, .c_out = TCO, .k = TK, .stride = S, .pad = TPAD,
                                .w = twp, .b = b };
    omni_conv_t1d_pack(tw, TCI, TCO, TK, S, twp);
    const int64_t tto = omni_conv_t1d_out_len(&tc, TT);
    CHECK(tto <= 80 && omni_conv_t1d_scratch(&tc, TT) <= 80 * TCI);
    for (int i = 0; i < TT; i++)
        for (int j = 0; j < TK; j++) {
            int64_t t = (int64_t)i * S + j - TPAD;
            if (t < 0 || t >= tto)
                continue;
            for (int o = 0; o < TCO; o++)
                for (int c = 0; c < TCI; c++) {
                    double p = (double)tx[i * TCI + c] * tw[((size_t)c * TCO + o) * TK + j];
                    tref[t * TCO + o] += p, tbound[t * TCO + o] += fabs(p);
                }
        }
    for (int64_t t = 0; t < tto; t++)
        for (int o = 0; o < TCO; o++)
            tref[t * TCO + o] += b[o], tbound[t * TCO + o] = 1e-5 * (tbound[t * TCO + o] + 2);
    char err[128];
    const int max_level = omni_cpu()->max_level;
    for (int lvl = OMNI_CPU_SCALAR; lvl <= max_level; lvl++) {
        if (omni_cpu_usable_level(omni_cpu(), lvl) != lvl)
            continue;
        CHECK_EQ(omni_cpu_set_level(lvl), lvl);
        for (int nth = 1; nth <= 3; nth += 2) {
            struct tpool *tp = tpool_new(nth, err, sizeof err);
            CHECK(tp);
            test_defer(free_pool, tp);
            struct omni_conv1d c = { .c_in = CI, .c_out = CO, .k = K, .dilation = DIL, .pad = PAD,
                                     .w = wp, .b = b };
            CHECK(omni_conv1d_scratch(&c, T, true) <= (size_t)(T + 2 * PAD) * CI);
            CHECK(omni_conv1d_run(tp, &c, x, T, scr, y, false) == 0);
            double worst = 0;
            for (int i = 0; i < TO * CO; i++)
                worst = fmax(worst, fabs(y[i] - ref[i]) / bound[i]);
            CHECK_MSG(worst <= 1, "level %s threads %d: conv off by %g bounds",
                      omni_cpu_level_name(lvl), nth, worst);
            CHECK(omni_conv1d_run(tp, &c, x, T, scr, y, true) == 0);   /* y = 2 ref */
            worst = 0;
            for (int i = 0; i < TO * CO; i++)
                worst = fmax(worst, fabs(y[i] - 2 * ref[i]) / (2 * bound[i]));
            CHECK_MSG(worst <= 1, "level %s threads %d: accumulate off by %g bounds",
                      omni_cpu_level_name(lvl), nth, worst);
            /* the fused form over the padded rows */
            float *xp = calloc((size_t)(T + 2 * PAD) * CI, sizeof *xp), *s2 =
                malloc(sizeof(float) * (T + 2 * PAD) * CI);
            CHECK(xp && s2);
            memcpy(xp + PAD * CI, x, sizeof(float) * T * CI);
            memcpy(y, res, sizeof(float) * TO * CO);
            struct omni_conv_fuse f = { .snake_in = ai, .snake_out = ao, .resid = y };
            int rc = omni_conv1d_valid(tp, &c, xp, T + 2 * PAD, s2, y, &f);
            free(xp);
            free(s2);
            CHECK(rc == 0);
            worst = 0;
            for (int i = 0; i < TO * CO; i++)
                worst = fmax(worst, fabs(y[i] - fref[i]) / fbound[i]);
            CHECK_MSG(worst <= 1, "level %s threads %d: fused off by %g bounds",
                      omni_cpu_level_name(lvl), nth, worst);
            /* three output channels (the narrow path): the first three of the above */
            {
                float *wp3 = malloc(sizeof(float) * omni_conv1d_packed_floats(3, CI, K));
                float *y3 = malloc(sizeof(float) * TO * 3), *xp3 = calloc((size_t)(T + 2 * PAD) * CI,
                                                                          sizeof *xp3);
                float *s3 = malloc(sizeof(float) * (T + 2 * PAD) * CI);
                CHECK(wp3 && y3 && xp3 && s3);
                omni_conv1d_pack(w, 3, CI, K, wp3);
                memcpy(xp3 + PAD * CI, x, sizeof(float) * T * CI);
                for (int t = 0; t < TO; t++)
                    for (int o = 0; o < 3; o++)
                        y3[t * 3 + o] = res[t * CO + o];
                struct omni_conv1d c3 = { .c_in = CI, .c_out = 3, .k = K, .dilation = DIL,
                                          .w = wp3, .b = b };
                struct omni_conv_fuse f3 = { .snake_in = ai, .snake_out = ao, .resid = y3 };
                rc = omni_conv1d_valid(tp, &c3, xp3, T + 2 * PAD, s3, y3, &f3);
                worst = 0;
                for (int t = 0; t < TO; t++)
                    for (int o = 0; o < 3; o++)
                        worst = fmax(worst, fabs(y3[t * 3 + o] - fref[t * CO + o]) /
                                                fbound[t * CO + o]);
                free(wp3), free(y3), free(xp3), free(s3);
                CHECK(rc == 0);
                CHECK_MSG(worst <= 1, "level %s threads %d: 3 channels off by %g bounds",
                          omni_cpu_level_name(lvl), nth, worst);
            }
            /* transposed: whole, then in three ranges from the rows each reads */
            CHECK(omni_conv_t1d_run(tp, &tc, tx, TT, tscr, ty) == 0);
            worst = 0;
            for (int64_t i = 0; i < tto * TCO; i++)
                worst = fmax(worst, fabs(ty[i] - tref[i]) / tbound[i]);
            CHECK_MSG(worst <= 1, "level %s threads %d: conv_t off by %g bounds",
                      omni_cpu_level_name(lvl), nth, worst);
            const int64_t cut[4] = { 0, 7, 33, tto };
            for (int r = 0; r < 3; r++) {
                int64_t s0, s1;
                omni_conv_t1d_reads(&tc, cut[r], cut[r + 1], &s0, &s1);
                float rows[40 * TCI];
                CHECK(s1 - s0 <= 40);
                for (int64_t q = s0; q < s1; q++)
                    for (int c2 = 0; c2 < TCI; c2++)
                        rows[(q - s0) * TCI + c2] = q < 0 || q >= TT ? 0.0f : tx[q * TCI + c2];
                CHECK(omni_conv_t1d_part(tp, &tc, rows, s0, s1 - s0, cut[r], cut[r + 1], NULL,
                                         ty2 + cut[r] * TCO, NULL) == 0);
            }
            CHECK_MSG(memcmp(ty, ty2, sizeof(float) * tto * TCO) == 0,
                      "level %s threads %d: conv_t in ranges differs", omni_cpu_level_name(lvl),
                      nth);
            test_release(tp);
        }
    }
    free(w), free(b), free(x), free(ai), free(ao), free(res), free(wp), free(y), free(scr);
    free(ref), free(bound), free(fref), free(fbound), free(tw), free(twp), free(tx), free(ty);
    free(ty2), free(tscr), free(tref), free(tbound);
}
