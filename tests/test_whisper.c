/* test_whisper.c - Whisper: golden encoder/decoder outputs of a tiny random
 * model against transformers (tests/fixtures/whisper, converted to ggml by
 * tools/hf_whisper_to_ggml.py), hand-broken model files, and the trained
 * espeak model's transcripts against its references (../shared). */
#include "test.h"

#include "audio/mel.h"
#include "audio/whisper.h"
#include "audio/whisper_batch.h"
#include "media/audio.h"
#include "src/core/omni.h"
#include "src/core/threadpool.h"

#include <cJSON.h>
#include <limits.h>
#include <pthread.h>
#include <stdlib.h>

#define GOLDEN_VOCAB 512
#define GOLDEN_STATE 64
#define GOLDEN_CTX 1500
static const int32_t golden_tokens[] = { 1, 5, 17, 300, 42, 7, 99, 511, 256, 3 };
#define N_GOLDEN_TOKENS ((int)(sizeof golden_tokens / sizeof golden_tokens[0]))

static void free_tpool(void *tp) { tpool_free(tp); }
static void free_batcher(void *b) { whisper_batcher_free(b); }
static void free_state(void *s) { whisper_state_free(s); }

static const char *golden_model(const char *type)
{
    char name[64];
    snprintf(name, sizeof name, "whisper-golden-%s.bin", type);
    return test_golden(name);
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

/* Encoder output and the decoder's logits (all positions at once, then one
 * token at a time through the K/V cache of another decoder slot). */
static void check_golden(const char *type, double tol_enc, double tol_logits)
{
    char err[256];
    struct whisper_model *m = whisper_model_load(golden_model(type), err, sizeof err);
    if (!m)
        SKIP("golden whisper model not converted (make golden-fixtures)");
    float *feats = golden_features();
    float *ref_enc = test_read_floats(test_fixture("whisper/encoder_out.bin"), (size_t)GOLDEN_CTX * GOLDEN_STATE);
    float *ref_logits = test_read_floats(test_fixture("whisper/logits.bin"), (size_t)N_GOLDEN_TOKENS * GOLDEN_VOCAB);
    struct tpool *tp = tpool_new(2, err, sizeof err);
    test_defer(free_tpool, tp);
    struct whisper_state *s = whisper_state_new(m, tp, err, sizeof err);
    CHECK(feats && ref_enc && ref_logits && tp && s);
    CHECK_EQ(whisper_model_hparams(m)->n_vocab, GOLDEN_VOCAB);
    CHECK_EQ(whisper_token_special(m, WHISPER_TOKEN_SOT), -1); /* too small a vocab for specials */

    CHECK_EQ(whisper_encode(s, feats, 3000, 0, err, sizeof err), OMNI_OK);
    const double d_enc = test_max_diff(whisper_encoder_output(s), ref_enc, (size_t)GOLDEN_CTX * GOLDEN_STATE);
    CHECK_EQ(whisper_decode(s, 0, golden_tokens, N_GOLDEN_TOKENS, 0, true, err, sizeof err), OMNI_OK);
    const double d_all = test_max_diff(whisper_logits(s), ref_logits, (size_t)N_GOLDEN_TOKENS * GOLDEN_VOCAB);
    double d_step = 0;
    for (int t = 0; t < N_GOLDEN_TOKENS; t++) {
        CHECK_EQ(whisper_decode(s, 3, golden_tokens + t, 1, t, false, err, sizeof err), OMNI_OK);
        d_step = fmax(d_step, test_max_diff(whisper_logits(s), ref_logits + (size_t)t * GOLDEN_VOCAB, GOLDEN_VOCAB));
    }
    /* two sequences of different lengths stepped in one batch */
    CHECK_EQ(whisper_decode(s, 4, golden_tokens, 5, 0, false, err, sizeof err), OMNI_OK);
    CHECK_EQ(whisper_decode(s, 5, golden_tokens, 7, 0, false, err, sizeof err), OMNI_OK);
    const int slots[2] = { 5, 4 }, pos[2] = { 7, 5 };
    const int32_t toks[2] = { golden_tokens[7], golden_tokens[5] };
    CHECK_EQ(whisper_decode_batch(s, slots, toks, pos, 2, err, sizeof err), OMNI_OK);
    d_step = fmax(d_step, test_max_diff(whisper_logits(s), ref_logits + 7 * GOLDEN_VOCAB, GOLDEN_VOCAB));
    d_step = fmax(d_step, test_max_diff(whisper_logits(s) + GOLDEN_VOCAB, ref_logits + 5 * GOLDEN_VOCAB, GOLDEN_VOCAB));
    const int dup[2] = { 4, 4 };
    CHECK_EQ(whisper_decode_batch(s, dup, toks, pos, 2, err, sizeof err), OMNI_ERR_ARG);
    fprintf(stderr, "[%s: encoder %.2e, logits %.2e, cached %.2e] ", type, d_enc, d_all, d_step);
    CHECK(d_enc < tol_enc);
    CHECK(d_all < tol_logits);
    CHECK(d_step < tol_logits);

    whisper_state_free(s);
    test_release(tp);
    whisper_model_free(m);
    free(feats);
    free(ref_enc);
    free(ref_logits);
}

TEST(whisper_golden_f32) { check_golden("f32", 1e-3, 1e-3); }
TEST(whisper_golden_f16) { check_golden("f16", 2e-2, 5e-2); }
TEST(whisper_golden_q8_0) { check_golden("q8_0", 1e-1, 5e-1); } /* activations are Q8_0 too */

// ---- hand-broken model files ---------------------------------------------------

static void write_file(const char *path, const char *data, size_t len)
{
    FILE *f = fopen(path, "wb");
    if (f) {
        fwrite(data, 1, len, f);
        fclose(f);
    }
}

/* Load data[0..len) from a temp file; the load must fail naming the file and
 * containing `what`. Returns 0 when it did. */
static int expect_load_failure(const char *data, size_t len, const char *what)
{
    char path[512], err[512] = "";
    snprintf(path, sizeof path, "%s/broken-whisper.bin", test_tmpdir());
    write_file(path, data, len);
    struct whisper_model *m = whisper_model_load(path, err, sizeof err);
    if (m) {
        whisper_model_free(m);
        fprintf(stderr, "\n    loaded a broken file (%zu bytes, expected '%s')", len, what);
        return -1;
    }
    if (!strstr(err, path) || !strstr(err, what)) {
        fprintf(stderr, "\n    message '%s' lacks the path or '%s'", err, what);
        return -1;
    }
    return 0;
}

TEST(whisper_rejects_broken_files)
{
    size_t len;
    char *good = test_read_file(golden_model("f32"), &len);
    if (!good)
        SKIP("golden whisper model not converted (make golden-fixtures)");
    char *buf = malloc(len);
    CHECK(buf);
    /* offset of the first tensor: magic, hparams, filters, vocab */
    size_t off = 4 + 44 + 8 + 80 * 201 * 4;
    int32_t n_pieces;
    memcpy(&n_pieces, good + off, 4);
    off += 4;
    for (int i = 0; i < n_pieces; i++) {
        uint32_t l;
        memcpy(&l, good + off, 4);
        off += 4 + l;
    }
    const size_t first_tensor = off;

    /* truncated anywhere */
    const size_t cuts[] = { 0, 3, 20, 50, 60000, 64380, first_tensor - 3, first_tensor + 5, first_tensor + 40,
                            len / 2, len - 1 };
    for (size_t i = 0; i < sizeof cuts / sizeof cuts[0]; i++)
        CHECK_MSG(expect_load_failure(good, cuts[i], "whisper: ") == 0, "cut at %zu", cuts[i]);
    CHECK(expect_load_failure(good, 20, "truncated") == 0);
    CHECK(expect_load_failure(good, len - 1, "past end of file") == 0);

    /* one field broken at a time */
    struct {
        size_t at;
        int32_t value;
        const char *what;
    } edits[] = {
        { 0, 0x12345678, "bad magic" },
        { 4, 0, "n_vocab" },
        { 8, 1499, "n_audio_ctx" },
        { 12, 63, "n_audio_state" },
        { 16, 3, "divisible" },
        { 40, 1 << 20, "n_mels" },
        { 48, 81, "mel filters" },
        { 4 + 44 + 8 + 80 * 201 * 4, 1 << 30, "vocab" },
        { first_tensor, 7, "n_dims" },
        { first_tensor + 4, 1000, "name length" },
        { first_tensor + 8, 14, "not allowed" },        /* q6_K conv kernel */
        { first_tensor + 12, 4, "shape" },
    };
    for (size_t i = 0; i < sizeof edits / sizeof edits[0]; i++) {
        memcpy(buf, good, len);
        memcpy(buf + edits[i].at, &edits[i].value, 4);
        CHECK_MSG(expect_load_failure(buf, len, edits[i].what) == 0, "edit %zu (%s)", i, edits[i].what);
    }
    /* a renamed tensor, and a duplicated file tail */
    memcpy(buf, good, len);
    int32_t name_len;
    memcpy(&name_len, good + first_tensor + 4, 4);
    int32_t n_dims;
    memcpy(&n_dims, good + first_tensor, 4);
    buf[first_tensor + 12 + 4 * n_dims] ^= 0x20;
    CHECK(expect_load_failure(buf, len, "unknown tensor") == 0);
    char *twice = malloc(len + (len - first_tensor));
    CHECK(twice);
    memcpy(twice, good, len);
    memcpy(twice + len, good + first_tensor, len - first_tensor);
    CHECK(expect_load_failure(twice, len + (len - first_tensor), "twice") == 0);
    free(twice);
    CHECK(expect_load_failure("", 0, "truncated") == 0);
    char err[256];
    CHECK(whisper_model_load("/nonexistent/ggml.bin", err, sizeof err) == NULL);
    CHECK_STR_CONTAINS(err, "cannot open");
    free(buf);
    free(good);
}

TEST(whisper_golden_model_has_no_specials_for_full)
{
    char err[256];
    struct whisper_model *m = whisper_model_load(golden_model("f32"), err, sizeof err);
    if (!m)
        SKIP("golden whisper model not converted (make golden-fixtures)");
    struct whisper_state *s = whisper_state_new(m, NULL, err, sizeof err);
    CHECK(s);
    float pcm[1600] = { 0 };
    struct whisper_full_params p = whisper_full_default_params(WHISPER_SAMPLING_GREEDY);
    CHECK_EQ(whisper_full(s, &p, pcm, 1600, err, sizeof err), OMNI_ERR_UNSUPPORTED);
    CHECK_EQ(whisper_decode(s, 0, (int32_t[]){ 512 }, 1, 0, false, err, sizeof err), OMNI_ERR_ARG);
    CHECK_EQ(whisper_decode(s, 0, (int32_t[]){ 1 }, 1, 64, false, err, sizeof err), OMNI_ERR_ARG);
    CHECK_EQ(whisper_decode(s, WHISPER_MAX_DECODERS, (int32_t[]){ 1 }, 1, 0, false, err, sizeof err), OMNI_ERR_ARG);
    whisper_state_free(s);
    whisper_model_free(m);
}

TEST(whisper_languages_and_tokens)
{
    CHECK_EQ(whisper_lang_id("en"), 0);
    CHECK_EQ(whisper_lang_id("german"), 2);
    CHECK_EQ(whisper_lang_id("yue"), 99);
    CHECK_EQ(whisper_lang_id("xx"), -1);
    CHECK_STR_EQ(whisper_lang_str(6), "fr");
    CHECK(whisper_lang_str(100) == NULL);
}

// ---- the trained espeak model (../shared) -----------------------------------------

/* The model and its parsed reference.json, or NULL (both) when absent. */
static struct whisper_model *espeak_load(cJSON **ref)
{
    char err[512];
    char *json = test_read_file(test_shared("models/whisper-tiny-espeak/reference.json"), NULL);
    struct whisper_model *m = json ? whisper_model_load(test_shared("models/whisper-tiny-espeak/ggml-tiny-espeak-q8_0.bin"),
                                                        err, sizeof err) : NULL;
    *ref = m ? cJSON_Parse(json) : NULL;
    free(json);
    if (m && !*ref) {
        whisper_model_free(m);
        m = NULL;
    }
    return m;
}

/* How the references were made: greedy, forced [sot, notimestamps], no
 * suppression, no fallback, at most 60 tokens. */
static struct whisper_full_params espeak_params(void)
{
    struct whisper_full_params p = whisper_full_default_params(WHISPER_SAMPLING_GREEDY);
    p.no_timestamps = true;
    p.temperature_inc = 0;
    p.suppress_blank = p.suppress_special = false;
    p.max_tokens = 60;
    return p;
}

/* Clip t of the reference as PCM into *pcm (the caller frees it). On the
 * test's own thread only: test_shared's path buffers are a ring that every
 * caller shares, so two threads can be handed the same one. */
static int espeak_pcm(const cJSON *t, float **pcm, size_t *n, char *err, size_t errlen)
{
    char rel[256];
    snprintf(rel, sizeof rel, "models/whisper-tiny-espeak/test/%s", cJSON_GetObjectItem(t, "wav")->valuestring);
    *pcm = NULL;
    return media_audio_decode_file(test_shared(rel), NULL, pcm, n, err, errlen);
}

/* Clip t of the reference through whisper_full on s. */
static int espeak_transcribe(struct whisper_state *s, const cJSON *t, char *err, size_t errlen)
{
    const struct whisper_full_params p = espeak_params();
    float *pcm;
    size_t n;
    int rc = espeak_pcm(t, &pcm, &n, err, errlen);
    if (rc == OMNI_OK)
        rc = whisper_full(s, &p, pcm, (int64_t)n, err, errlen);
    free(pcm);
    return rc;
}

/* The model and reference into m and ref, or skip the test without them. */
#define ESPEAK_OR_SKIP(m, ref)                                                \
    do {                                                                      \
        SKIP_IF_NO_SHARED();                                                  \
        if (!((m) = espeak_load(&(ref))))                                     \
            SKIP("whisper-tiny-espeak not present");                          \
    } while (0)

static bool espeak_clear(const cJSON *t) { return cJSON_GetObjectItem(t, "hf_min_top2_margin")->valuedouble >= 0.25; }

/* transformers' tokens on every clip whose margin is >= 0.25 (every fourth
 * clip here; the CLI test tests/tools/test_whisper_espeak.sh takes all 30
 * and the WER). */
TEST(whisper_espeak_matches_transformers)
{
    char err[512];
    cJSON *ref;
    struct whisper_model *m;
    ESPEAK_OR_SKIP(m, ref);
    CHECK(!whisper_is_multilingual(m));
    CHECK_EQ(whisper_token_special(m, WHISPER_TOKEN_SOT), 50257);
    CHECK_EQ(whisper_token_special(m, WHISPER_TOKEN_NOT), 50362);
    CHECK_EQ(whisper_token_special(m, WHISPER_TOKEN_BEG), 50363);
    size_t tl;
    CHECK(!memcmp(whisper_token_bytes(m, 50257, &tl), "[_SOT_]", 7) && tl == 7);
    CHECK(!memcmp(whisper_token_bytes(m, 50363 + 50, &tl), "[_TT_50]", 8) && tl == 8);
    int32_t ids[8];
    CHECK_EQ(whisper_tokenize(m, " where is", ids, 8), 2);
    CHECK_EQ(ids[0], 810);
    CHECK_EQ(ids[1], 318);

    cJSON *tests = cJSON_GetObjectItem(ref, "tests");
    struct tpool *tp = tpool_new(2, err, sizeof err);
    test_defer(free_tpool, tp);
    struct whisper_state *s = whisper_state_new(m, tp, err, sizeof err);
    CHECK(cJSON_IsArray(tests) && tp && s);
    int checked = 0;
    for (int i = 0; i < cJSON_GetArraySize(tests); i += 4) {
        const cJSON *t = cJSON_GetArrayItem(tests, i);
        if (!espeak_clear(t))
            continue;
        const char *wav = cJSON_GetObjectItem(t, "wav")->valuestring;
        CHECK_MSG(espeak_transcribe(s, t, err, sizeof err) == OMNI_OK, "%s: %s", wav, err);
        CHECK_EQ(whisper_full_n_segments(s), 1);
        const struct whisper_segment *g = whisper_full_get_segment(s, 0);
        const cJSON *want = cJSON_GetObjectItem(t, "hf_tokens");
        const int n_want = cJSON_GetArraySize(want) - 1; /* without the final <|endoftext|> */
        CHECK_MSG(g->n_tokens == n_want, "%s: %d tokens, want %d (\"%s\")", wav, g->n_tokens, n_want, g->text);
        for (int k = 0; k < n_want; k++)
            CHECK_MSG(g->tokens[k].id == cJSON_GetArrayItem(want, k)->valueint, "%s: token %d", wav, k);
        CHECK_STR_EQ(g->text, cJSON_GetObjectItem(t, "hf_text")->valuestring);
        checked++;
    }
    CHECK(checked >= 6);
    cJSON_Delete(ref);
    whisper_state_free(s);
    test_release(tp);
    whisper_model_free(m);
}

// ---- transcriptions sharing batched passes ------------------------------------------

/* A clear clip of the reference, decoded before the lanes start: a lane
 * that built its path through test_shared could be handed the buffer
 * another lane was writing and transcribe that lane's clip instead (this
 * test failed so once, as if the batcher had mixed up two states). */
struct clip {
    const char *wav, *want; /* NULL wav: the end of the list */
    float *pcm;
    size_t n;
};

static void free_clips(void *arg)
{
    struct clip *c = arg;
    for (int i = 0; c[i].wav; i++)
        free(c[i].pcm);
    free(c);
}

/* Lane `lane` transcribes clips lane, lane + n_lanes, ... on its state. */
struct clip_job {
    struct whisper_state *s;
    const struct clip *clips;
    int n_clips, lane, n_lanes, checked, rc;
    pthread_barrier_t *meet; /* NULL, or where the lanes wait for each other once */
    bool met;
    char err[512];
};

/* whisper_full's abort callback, never aborting. Its first call holds the
 * lane until every lane is inside whisper_full, that is busy in the batcher,
 * before any has queued a pass. */
static bool lanes_meet(void *arg)
{
    struct clip_job *j = arg;
    if (j->meet && !j->met) {
        j->met = true;
        pthread_barrier_wait(j->meet);
    }
    return false;
}

static void *clip_thread(void *arg)
{
    struct clip_job *j = arg;
    struct whisper_full_params p = espeak_params();
    p.abort_callback = lanes_meet;
    p.abort_callback_user_data = j;
    for (int i = j->lane; i < j->n_clips; i += j->n_lanes) {
        const struct clip *c = &j->clips[i];
        if ((j->rc = whisper_full(j->s, &p, c->pcm, (int64_t)c->n, j->err, sizeof j->err)) < 0)
            return NULL;
        const char *got = whisper_full_n_segments(j->s) == 1 ? whisper_full_get_segment(j->s, 0)->text : "";
        if (strcmp(got, c->want)) {
            snprintf(j->err, sizeof j->err, "%s: \"%s\", want \"%s\"", c->wav, got, c->want);
            j->rc = OMNI_ERR_ARG;
            return NULL;
        }
        j->checked++;
    }
    return NULL;
}

/* Four lanes through one batcher: every clear clip still equals its
 * reference, whichever states' windows and steps share a pass. Twice: with
 * gather_us unbounded and the lanes meeting inside their first whisper_full,
 * every pass holds a request of each busy lane (so passes surely merge: all
 * four windows in the first, all four prompts in the next); with gather_us
 * 0, each pass takes whatever happens to be queued. */
TEST(whisper_batch_espeak_transcripts)
{
    char err[512];
    cJSON *ref;
    struct whisper_model *m;
    ESPEAK_OR_SKIP(m, ref);
    CHECK(!whisper_is_multilingual(m)); /* no language pass before the lanes meet */
    const cJSON *tests = cJSON_GetObjectItem(ref, "tests");
    struct clip *clips = calloc((size_t)cJSON_GetArraySize(tests) + 1, sizeof *clips);
    CHECK(clips);
    test_defer(free_clips, clips);
    int n_clips = 0;
    for (int i = 0; i < cJSON_GetArraySize(tests); i++) {
        const cJSON *t = cJSON_GetArrayItem(tests, i);
        if (!espeak_clear(t))
            continue;
        struct clip *c = &clips[n_clips++];
        c->wav = cJSON_GetObjectItem(t, "wav")->valuestring;
        c->want = cJSON_GetObjectItem(t, "hf_text")->valuestring;
        CHECK_MSG(espeak_pcm(t, &c->pcm, &c->n, err, sizeof err) == OMNI_OK, "%s: %s", c->wav, err);
    }
    enum { LANES = 4 };
    CHECK(n_clips >= 5 * LANES);
    for (int round = 0; round < 2; round++) {
        const bool lockstep = round == 0;
        struct whisper_batcher_params bp = whisper_batcher_default_params();
        bp.n_threads = 2;
        bp.max_windows = LANES;
        bp.gather_us = lockstep ? INT_MAX : 0;
        struct whisper_batcher *b = whisper_batcher_new(m, &bp, err, sizeof err);
        CHECK_MSG(b, "%s", err);
        test_defer(free_batcher, b);
        pthread_barrier_t meet;
        CHECK(pthread_barrier_init(&meet, NULL, LANES) == 0);
        struct clip_job jobs[LANES];
        pthread_t th[LANES];
        for (int i = 0; i < LANES; i++) {
            jobs[i] = (struct clip_job){ .s = whisper_state_new_batched(b, err, sizeof err), .clips = clips,
                                         .n_clips = n_clips, .lane = i, .n_lanes = LANES,
                                         .meet = lockstep ? &meet : NULL };
            CHECK(jobs[i].s);
            test_defer(free_state, jobs[i].s); /* before the batcher */
        }
        for (int i = 0; i < LANES; i++)
            CHECK(pthread_create(&th[i], NULL, clip_thread, &jobs[i]) == 0);
        int checked = 0;
        for (int i = 0; i < LANES; i++) {
            pthread_join(th[i], NULL);
            checked += jobs[i].checked;
        }
        pthread_barrier_destroy(&meet);
        for (int i = 0; i < LANES; i++)
            CHECK_MSG(jobs[i].rc == OMNI_OK, "gather_us %d: lane %d: %s", bp.gather_us, i, jobs[i].err);
        struct whisper_batcher_stats st;
        whisper_batcher_stats(b, &st);
        fprintf(stderr, "[gather_us %d: %d clips; %llu decoder steps in %llu passes, at most %d together; %llu "
                "windows in %llu encoder passes, at most %d together] ", bp.gather_us, checked,
                (unsigned long long)st.dec_requests, (unsigned long long)st.dec_passes, st.max_dec_requests,
                (unsigned long long)st.enc_windows, (unsigned long long)st.enc_passes, st.max_enc_windows);
        CHECK_EQ(checked, n_clips);
        CHECK_EQ(st.enc_windows, n_clips);
        CHECK_EQ(st.busy, 0);
        if (lockstep) {
            CHECK_EQ(st.max_enc_windows, LANES);
            CHECK_EQ(st.max_dec_requests, LANES);
        }
        for (int i = 0; i < LANES; i++)
            test_release(jobs[i].s);
        test_release(b);
    }
    test_release(clips);
    cJSON_Delete(ref);
    whisper_model_free(m);
}

// ---- reduced audio context ------------------------------------------------------

/* whisper.cpp's audio_ctx: the arguments, the full context through the new
 * call equal to whisper_encode, the positions per window, and the trained
 * model hearing the two clips the same with the automatic context. */
TEST(whisper_audio_ctx)
{
    char err[512];
    struct whisper_model *g = whisper_model_load(test_golden("whisper-golden-f32.bin"), err, sizeof err);
    if (g) {
        struct whisper_state *s = whisper_state_new(g, NULL, err, sizeof err);
        float *mel = malloc(80 * 3000 * sizeof *mel), *full = malloc(1500 * 64 * sizeof *full);
        CHECK(s && mel && full);
        for (int i = 0; i < 80 * 3000; i++)
            mel[i] = (float)sin(0.001 * i);
        int32_t tok = 1;
        CHECK(whisper_decode(s, 0, &tok, 1, 0, false, err, sizeof err) == OMNI_ERR_ARG);
        CHECK_STR_CONTAINS(err, "no audio encoded");
        CHECK(whisper_encode_ctx(s, mel, 3000, 0, 0, err, sizeof err) == OMNI_ERR_ARG);
        CHECK(whisper_encode_ctx(s, mel, 3000, 0, 1501, err, sizeof err) == OMNI_ERR_ARG);
        CHECK_STR_CONTAINS(err, "audio context 1501");
        CHECK(whisper_encode(s, mel, 3000, 0, err, sizeof err) == OMNI_OK);
        CHECK_EQ(whisper_encoded_ctx(s), 1500);
        memcpy(full, whisper_encoder_output(s), 1500 * 64 * sizeof *full);
        CHECK(whisper_encode_ctx(s, mel, 3000, 0, 1500, err, sizeof err) == OMNI_OK);
        CHECK(!memcmp(full, whisper_encoder_output(s), 1500 * 64 * sizeof *full));
        CHECK(whisper_encode_ctx(s, mel, 3000, 0, 100, err, sizeof err) == OMNI_OK);
        CHECK_EQ(whisper_encoded_ctx(s), 100);
        CHECK(whisper_decode(s, 0, &tok, 1, 0, false, err, sizeof err) == OMNI_OK);
        /* a reduced window is another computation, not a prefix of the full one */
        CHECK(test_max_diff(full, whisper_encoder_output(s), 100 * 64) > 1e-3);
        struct whisper_full_params p = whisper_full_default_params(WHISPER_SAMPLING_GREEDY);
        CHECK_EQ(whisper_full_window_ctx(g, &p, 160), 1500);
        p.audio_ctx = 100;
        CHECK_EQ(whisper_full_window_ctx(g, &p, 160), 100);
        p.audio_ctx = WHISPER_AUDIO_CTX_AUTO;
        CHECK_EQ(whisper_full_window_ctx(g, &p, 160), (80 + WHISPER_AUDIO_CTX_MARGIN + 63) / 64 * 64);
        CHECK_EQ(whisper_full_window_ctx(g, &p, 100000), 1500);
        p.audio_ctx_margin = 0;
        CHECK_EQ(whisper_full_window_ctx(g, &p, 1), 64);
        whisper_state_free(s);
        free(mel);
        free(full);
        whisper_model_free(g);
    }

    SKIP_IF_NO_SHARED();
    struct whisper_model *m = whisper_model_load(test_shared("models/whisper-tiny-espeak/ggml-tiny-espeak-q8_0.bin"),
                                                 err, sizeof err);
    if (!m)
        SKIP("whisper-tiny-espeak not present");
    struct whisper_state *s = whisper_state_new(m, NULL, err, sizeof err);
    CHECK(s);
    struct whisper_full_params p = whisper_full_default_params(WHISPER_SAMPLING_GREEDY);
    p.no_timestamps = true;
    p.max_tokens = 24;
    float pcm1[1600] = { 0 };
    p.audio_ctx = -2;
    CHECK(whisper_full(s, &p, pcm1, 1600, err, sizeof err) == OMNI_ERR_ARG);
    p.audio_ctx = 1501;
    CHECK(whisper_full(s, &p, pcm1, 1600, err, sizeof err) == OMNI_ERR_ARG);
    p.audio_ctx = WHISPER_AUDIO_CTX_AUTO;
    p.audio_ctx_margin = -1;
    CHECK(whisper_full(s, &p, pcm1, 1600, err, sizeof err) == OMNI_ERR_ARG);
    CHECK_STR_CONTAINS(err, "audio_ctx");
    p.audio_ctx_margin = WHISPER_AUDIO_CTX_MARGIN;
    static const struct { const char *wav, *text; } clips[] = {
        { "audio/turn-on-the-kitchen-lights.wav", " turn on the kitchen lights." },
        { "audio/what-is-the-weather-like-today.wav", " what is the weather like" }, /* then a city */
    };
    for (int i = 0; i < 2; i++) {
        float *pcm = NULL;
        size_t n = 0;
        CHECK_MSG(media_audio_decode_file(test_shared(clips[i].wav), NULL, &pcm, &n, err, sizeof err) == OMNI_OK,
                  "%s", err);
        p.audio_ctx = WHISPER_AUDIO_CTX_AUTO;
        CHECK_MSG(whisper_full(s, &p, pcm, (int64_t)n, err, sizeof err) == OMNI_OK, "%s", err);
        CHECK(whisper_encoded_ctx(s) < 1500);
        CHECK_EQ(whisper_full_n_segments(s), 1);
        const char *got = whisper_full_get_segment(s, 0)->text;
        CHECK_MSG(!strncmp(got, clips[i].text, strlen(clips[i].text)), "\"%s\"", got);
        /* fixed windows of 0.64 s: the clip is cut into several, all decoded
         * (words split at a cut may come out wrong) */
        p.audio_ctx = 32;
        CHECK_MSG(whisper_full(s, &p, pcm, (int64_t)n, err, sizeof err) == OMNI_OK, "%s", err);
        CHECK_EQ(whisper_encoded_ctx(s), 32);
        CHECK(whisper_full_n_segments(s) >= 2);
        CHECK(whisper_full_get_segment(s, whisper_full_n_segments(s) - 1)->t1_ms >= (int64_t)n / 16 - 10);
        free(pcm);
    }
    whisper_state_free(s);
    whisper_model_free(m);
}

// ---- one model, several sessions -------------------------------------------

struct session_job {
    const struct whisper_model *m;
    const float *pcm;
    size_t n;
    char text[256];
    int rc;
};

static void *session_thread(void *arg)
{
    struct session_job *j = arg;
    char err[256];
    struct whisper_state *s = whisper_state_new(j->m, NULL, err, sizeof err);
    struct whisper_full_params p = whisper_full_default_params(WHISPER_SAMPLING_GREEDY);
    p.no_timestamps = true;
    j->rc = s ? whisper_full(s, &p, j->pcm, (int64_t)j->n, err, sizeof err) : OMNI_ERR_NOMEM;
    if (j->rc == OMNI_OK && whisper_full_n_segments(s) > 0)
        snprintf(j->text, sizeof j->text, "%s", whisper_full_get_segment(s, 0)->text);
    whisper_state_free(s);
    return NULL;
}

/* Two states on two threads share one loaded model and hear the same words. */
TEST(whisper_states_share_a_model)
{
    SKIP_IF_NO_SHARED();
    char err[512];
    struct whisper_model *m = whisper_model_load(test_shared("models/whisper-tiny-espeak/ggml-tiny-espeak-q8_0.bin"),
                                                 err, sizeof err);
    if (!m)
        SKIP("whisper-tiny-espeak not present");
    struct session_job jobs[2] = { { .m = m }, { .m = m } };
    const char *wavs[2] = { "audio/turn-on-the-kitchen-lights.wav", "audio/what-is-the-weather-like-today.wav" };
    float *pcm[2] = { NULL, NULL };
    for (int i = 0; i < 2; i++) {
        CHECK_MSG(media_audio_decode_file(test_shared(wavs[i]), NULL, &pcm[i], &jobs[i].n, err, sizeof err) == OMNI_OK,
                  "%s", err);
        jobs[i].pcm = pcm[i];
    }
    pthread_t th[2];
    for (int i = 0; i < 2; i++)
        CHECK(pthread_create(&th[i], NULL, session_thread, &jobs[i]) == 0);
    for (int i = 0; i < 2; i++)
        pthread_join(th[i], NULL);
    CHECK_EQ(jobs[0].rc, OMNI_OK);
    CHECK_EQ(jobs[1].rc, OMNI_OK);
    CHECK_STR_EQ(jobs[0].text, " turn on the kitchen lights.");
    CHECK_STR_EQ(jobs[1].text, " what is the weather like in dublin?"); /* what whisper.cpp hears too */
    free(pcm[0]);
    free(pcm[1]);
    whisper_model_free(m);
}

// ---- other weight types ----------------------------------------------------

#include "src/core/quant.h"
#include "src/core/tensor.h"

/* The golden f32 file with every 2-D matrix re-quantized to `type` (ggml's
 * reference quantizers); NULL when the f32 file is missing. */
static char *requantize_golden(int type, size_t *out_len)
{
    size_t len;
    char *in = test_read_file(golden_model("f32"), &len);
    char *out = in ? malloc(len) : NULL;
    if (!out) {
        free(in);
        return NULL;
    }
    size_t o = 4 + 44 + 8 + 80 * 201 * 4, w;
    int32_t n_pieces;
    memcpy(&n_pieces, in + o, 4);
    o += 4;
    for (int i = 0; i < n_pieces; i++) {
        uint32_t l;
        memcpy(&l, in + o, 4);
        o += 4 + l;
    }
    memcpy(out, in, o);
    w = o;
    while (o < len) {
        int32_t hdr[3], ne[3] = { 1, 1, 1 };
        memcpy(hdr, in + o, 12);
        memcpy(ne, in + o + 12, 4 * hdr[0]);
        const char *name = in + o + 12 + 4 * hdr[0];
        const size_t head = 12 + 4 * (size_t)hdr[0] + hdr[1], n = (size_t)ne[0] * ne[1] * ne[2];
        const bool quant = hdr[0] == 2 && ne[0] % 32 == 0 && ne[1] > 1 && strncmp(name, "encoder.positional", 18) &&
                           strncmp(name, "decoder.positional", 18);
        memcpy(out + w, in + o, head);
        if (quant) {
            memcpy(out + w + 8, &type, 4);
            /* the file's data is not aligned: quantize between aligned copies */
            const size_t qbytes = ggml_row_size(type, ne[0]) * ne[1];
            float *x = malloc(n * sizeof(float));
            void *q = malloc(qbytes);
            if (x && q) {
                memcpy(x, in + o + head, n * sizeof(float));
                quantize_row(type, x, q, (int64_t)n);
                memcpy(out + w + head, q, qbytes);
            }
            free(x);
            free(q);
            w += head + ggml_row_size(type, ne[0]) * ne[1];
        } else {
            memcpy(out + w + head, in + o + head, n * 4);
            w += head + n * 4;
        }
        o += head + n * 4;
    }
    free(in);
    *out_len = w;
    return out;
}

TEST(whisper_quantized_weights)
{
    const int types[] = { GGML_TYPE_Q4_0, GGML_TYPE_Q4_1, GGML_TYPE_Q5_0, GGML_TYPE_Q5_1 };
    float *feats = golden_features();
    float *ref = test_read_floats(test_fixture("whisper/logits.bin"), (size_t)N_GOLDEN_TOKENS * GOLDEN_VOCAB);
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++) {
        size_t len;
        char *bin = requantize_golden(types[i], &len);
        if (!bin) {
            free(feats);
            free(ref);
            SKIP("golden whisper model not converted (make golden-fixtures)");
        }
        char path[512], err[256];
        snprintf(path, sizeof path, "%s/whisper-%s.bin", test_tmpdir(), ggml_type_name(types[i]));
        FILE *f = fopen(path, "wb");
        CHECK(f && fwrite(bin, 1, len, f) == len);
        fclose(f);
        free(bin);
        struct whisper_model *m = whisper_model_load(path, err, sizeof err);
        CHECK_MSG(m, "%s", err);
        struct whisper_state *s = whisper_state_new(m, NULL, err, sizeof err);
        CHECK(s && feats && ref);
        CHECK_EQ(whisper_encode(s, feats, 3000, 0, err, sizeof err), OMNI_OK);
        CHECK_EQ(whisper_decode(s, 0, golden_tokens, N_GOLDEN_TOKENS, 0, true, err, sizeof err), OMNI_OK);
        const double d = test_max_diff(whisper_logits(s), ref, (size_t)N_GOLDEN_TOKENS * GOLDEN_VOCAB);
        fprintf(stderr, "[%s %.2f] ", ggml_type_name(types[i]), d);
        CHECK(d < 4.0); /* 4-5 bit weights, Q8 activations, random weights: logits reach 15.8 */
        whisper_state_free(s);
        whisper_model_free(m);
    }
    free(feats);
    free(ref);
}

// ---- callbacks -----------------------------------------------------------------

static void count_segments(struct whisper_state *s, int n_new, void *user)
{
    (void)s;
    *(int *)user += n_new;
}

static bool abort_now(void *user)
{
    return ++*(int *)user > 2;
}

TEST(whisper_callbacks)
{
    SKIP_IF_NO_SHARED();
    char err[512];
    struct whisper_model *m = whisper_model_load(test_shared("models/whisper-tiny-espeak/ggml-tiny-espeak-q8_0.bin"),
                                                 err, sizeof err);
    if (!m)
        SKIP("whisper-tiny-espeak not present");
    float *pcm;
    size_t n;
    CHECK(media_audio_decode_file(test_shared("audio/turn-on-the-kitchen-lights.wav"), NULL, &pcm, &n, err,
                                  sizeof err) == OMNI_OK);
    struct whisper_state *s = whisper_state_new(m, NULL, err, sizeof err);
    struct whisper_full_params p = whisper_full_default_params(WHISPER_SAMPLING_GREEDY);
    int segs = 0, calls = 0;
    p.no_timestamps = true;
    p.new_segment_callback = count_segments;
    p.new_segment_callback_user_data = &segs;
    CHECK_EQ(whisper_full(s, &p, pcm, (int64_t)n, err, sizeof err), OMNI_OK);
    CHECK_EQ(segs, 1);
    p.abort_callback = abort_now;
    p.abort_callback_user_data = &calls;
    CHECK_EQ(whisper_full(s, &p, pcm, (int64_t)n, err, sizeof err), OMNI_ERR_LIMIT);
    CHECK_STR_CONTAINS(err, "aborted");
    /* offset past the end: nothing to do */
    p.abort_callback = NULL;
    p.offset_ms = 5000;
    CHECK_EQ(whisper_full(s, &p, pcm, (int64_t)n, err, sizeof err), OMNI_OK);
    CHECK_EQ(whisper_full_n_segments(s), 0);
    whisper_state_free(s);
    whisper_model_free(m);
    free(pcm);
}
