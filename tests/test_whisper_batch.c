/* test_whisper_batch.c - many whisper states through one batcher: passes
 * really merge (the batcher's counters), every state gets what a standalone
 * state computes (golden random model). The trained model through a batcher:
 * whisper_batch_espeak_transcripts in test_whisper.c. */
#include "test.h"

#include "audio/whisper.h"
#include "audio/whisper_batch.h"
#include "audio/whisper_impl.h" /* whisper_batcher_busy: hold the passes open */
#include "src/core/omni.h"

#include <limits.h>
#include <pthread.h>
#include <stdlib.h>

#define N_LANES 3
#define VOCAB 512
static const int32_t prompt[] = { 1, 5, 17, 300, 42, 7, 99, 511, 256, 3 };

static void free_batcher(void *b) { whisper_batcher_free(b); }
static void free_state(void *s) { whisper_state_free(s); }

/* tools/make_whisper_golden.py input_features(): [80][3000] */
static float *features(void)
{
    float *x = malloc(80 * 3000 * sizeof(float));
    for (int m = 0; x && m < 80; m++)
        for (int t = 0; t < 3000; t++)
            x[m * 3000 + t] = (float)(sin(0.0021 * (m + 1) * t + 0.37 * m) + 0.25 * cos(0.05 * t));
    return x;
}

/* What lane i computes: its own window offset, encoder positions (reduced
 * contexts side by side with a full one in one pass) and prompt length,
 * then three single steps; the logits of every call in order. */
struct lane {
    struct whisper_state *s;
    const float *mel;
    int i, rc;
    char err[256];
    float enc[4], logits[4][VOCAB];
};

static void lane_run(struct lane *l)
{
    static const int ctx[N_LANES] = { 1500, 700, 64 };
    const int offset = 100 * l->i, n_prompt = 5 + 2 * l->i;
    if ((l->rc = whisper_encode_ctx(l->s, l->mel, 3000, offset, ctx[l->i], l->err, sizeof l->err)) < 0)
        return;
    if (whisper_encoded_ctx(l->s) != ctx[l->i]) {
        l->rc = OMNI_ERR_ARG;
        return;
    }
    memcpy(l->enc, whisper_encoder_output(l->s) + 1000, sizeof l->enc);
    if ((l->rc = whisper_decode(l->s, 0, prompt, n_prompt, 0, false, l->err, sizeof l->err)) < 0)
        return;
    memcpy(l->logits[0], whisper_logits(l->s), sizeof l->logits[0]);
    for (int k = 1; k < 4; k++) {
        const int32_t tok = prompt[(n_prompt + k) % 10];
        const int slot = 2, pos = n_prompt + k - 1;
        if (k == 1 && (l->rc = whisper_decode(l->s, slot, prompt, n_prompt, 0, false, l->err, sizeof l->err)) < 0)
            return;
        if ((l->rc = whisper_decode_batch(l->s, &slot, &tok, &pos, 1, l->err, sizeof l->err)) < 0)
            return;
        memcpy(l->logits[k], whisper_logits(l->s), sizeof l->logits[k]);
    }
}

static void *lane_thread(void *arg)
{
    lane_run(arg);
    return NULL;
}

TEST(whisper_batch_matches_standalone)
{
    char err[256];
    struct whisper_model *m = whisper_model_load(test_golden("whisper-golden-f32.bin"), err, sizeof err);
    if (!m)
        SKIP("golden whisper model not converted (make golden-fixtures)");
    float *mel = features();
    /* gather_us without end (the runner's timeout stops a hang): with
     * N_LANES marked busy, every pass waits for all of them, so each one
     * holds exactly N_LANES requests however slow the machine */
    struct whisper_batcher_params bp = whisper_batcher_default_params();
    bp.n_threads = 2;
    bp.gather_us = INT_MAX;
    struct whisper_batcher *b = whisper_batcher_new(m, &bp, err, sizeof err);
    test_defer(free_batcher, b);
    CHECK_MSG(mel && b, "%s", err);
    struct lane lanes[N_LANES], solo[N_LANES];
    memset(lanes, 0, sizeof lanes);
    memset(solo, 0, sizeof solo);
    for (int i = 0; i < N_LANES; i++) {
        lanes[i] = (struct lane){ .s = whisper_state_new_batched(b, err, sizeof err), .mel = mel, .i = i };
        solo[i] = (struct lane){ .s = whisper_state_new(m, NULL, err, sizeof err), .mel = mel, .i = i };
        test_defer(free_state, lanes[i].s); /* before the batcher */
        test_defer(free_state, solo[i].s);
        CHECK(lanes[i].s && solo[i].s);
    }
    whisper_batcher_busy(b, +N_LANES);
    pthread_t th[N_LANES];
    for (int i = 0; i < N_LANES; i++)
        CHECK(pthread_create(&th[i], NULL, lane_thread, &lanes[i]) == 0);
    for (int i = 0; i < N_LANES; i++)
        pthread_join(th[i], NULL);
    whisper_batcher_busy(b, -N_LANES);

    struct whisper_batcher_stats st;
    whisper_batcher_stats(b, &st);
    fprintf(stderr, "[enc %llu passes / %llu windows, dec %llu passes / %llu requests] ",
            (unsigned long long)st.enc_passes, (unsigned long long)st.enc_windows,
            (unsigned long long)st.dec_passes, (unsigned long long)st.dec_requests);
    CHECK_EQ(st.enc_passes, 1);
    CHECK_EQ(st.enc_windows, N_LANES);
    CHECK_EQ(st.max_enc_windows, N_LANES);
    CHECK_EQ(st.dec_passes, 5); /* prompt, prompt into slot 2 + step 1, steps 2 and 3 */
    CHECK_EQ(st.dec_requests, 5 * N_LANES);
    CHECK_EQ(st.max_dec_requests, N_LANES);
    CHECK_EQ(st.busy, 0);

    double d = 0;
    for (int i = 0; i < N_LANES; i++) {
        CHECK_MSG(lanes[i].rc == OMNI_OK, "lane %d: %s", i, lanes[i].err);
        lane_run(&solo[i]);
        CHECK_MSG(solo[i].rc == OMNI_OK, "solo %d: %s", i, solo[i].err);
        d = fmax(d, test_max_diff(lanes[i].enc, solo[i].enc, 4));
        d = fmax(d, test_max_diff(lanes[i].logits[0], solo[i].logits[0], 4 * VOCAB));
        if (i > 0) /* the lanes really saw different inputs */
            CHECK(test_max_diff(lanes[i].logits[3], lanes[0].logits[3], VOCAB) > 1e-3);
    }
    fprintf(stderr, "[max diff %.2e] ", d);
    CHECK(d < 1e-4);

    for (int i = 0; i < N_LANES; i++) {
        test_release(lanes[i].s);
        test_release(solo[i].s);
    }
    test_release(b);
    whisper_model_free(m);
    free(mel);
}

TEST(whisper_batch_rejects_bad_params)
{
    char err[256];
    struct whisper_model *m = whisper_model_load(test_golden("whisper-golden-f32.bin"), err, sizeof err);
    if (!m)
        SKIP("golden whisper model not converted (make golden-fixtures)");
    struct whisper_batcher_params bp = whisper_batcher_default_params();
    bp.max_windows = 0;
    CHECK(whisper_batcher_new(m, &bp, err, sizeof err) == NULL);
    CHECK_STR_CONTAINS(err, "max_windows");
    /* a lone state is never held back by gathering (nothing else is busy) */
    bp = whisper_batcher_default_params();
    bp.n_threads = 1;
    struct whisper_batcher *b = whisper_batcher_new(m, &bp, err, sizeof err);
    test_defer(free_batcher, b);
    struct whisper_state *s = b ? whisper_state_new_batched(b, err, sizeof err) : NULL;
    test_defer(free_state, s);
    CHECK_MSG(s, "%s", err);
    CHECK_EQ(whisper_decode(s, 0, prompt, 3, 447, false, err, sizeof err), OMNI_ERR_ARG); /* past n_text_ctx */
    test_release(s);
    test_release(b);
    whisper_model_free(m);
}
