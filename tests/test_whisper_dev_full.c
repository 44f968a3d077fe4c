/* test_whisper_dev_full.c - whisper_full on a state whose passes run on a
 * backend (audio/whisper_dev.h; $OMNI_DEV_BACKEND, "cpu" by default) gives
 * the CPU state's transcript: greedy with timestamps, beam search (the
 * device's cache copies) and a batched state, on the trained espeak model
 * of ../shared. Kept apart from test_whisper_dev.c, which the GPU job
 * builds without whisper_full's libraries (zlib, media). */
#include "test.h"

#include "audio/whisper.h"
#include "audio/whisper_batch.h"
#include "audio/whisper_dev.h"
#include "media/audio.h"
#include "src/core/omni.h"

#include <stdlib.h>
#include <string.h>

static void free_dev(void *d) { whisper_dev_free(d); }
static void free_model(void *m) { whisper_model_free(m); }
static void free_state(void *s) { whisper_state_free(s); }
static void free_batcher(void *b) { whisper_batcher_free(b); }

/* The transcript of s as one string (segments joined, timestamps in ms). */
static void transcript(const struct whisper_state *s, char *out, size_t cap)
{
    size_t at = 0;
    out[0] = 0;
    for (int i = 0; i < whisper_full_n_segments(s) && at < cap; i++) {
        const struct whisper_segment *g = whisper_full_get_segment(s, i);
        at += (size_t)snprintf(out + at, cap - at, "[%lld-%lld]%s", (long long)g->t0_ms, (long long)g->t1_ms,
                               g->text);
    }
}

TEST(whisper_dev_full_matches_cpu)
{
    SKIP_IF_NO_SHARED();
    char err[256];
    struct whisper_model *m =
        whisper_model_load(test_shared("models/whisper-tiny-espeak/ggml-tiny-espeak-q8_0.bin"), err, sizeof err);
    if (!m)
        SKIP("whisper-tiny-espeak not present");
    test_defer(free_model, m);
    const char *be = getenv("OMNI_DEV_BACKEND");
    struct whisper_dev_params dp = whisper_dev_default_params();
    dp.backend = be && *be ? be : "cpu";
    dp.max_streams = 2;
    dp.max_seqs = 2 * WHISPER_MAX_DECODERS;
    struct whisper_dev *dev = whisper_dev_new(m, &dp, err, sizeof err);
    CHECK_MSG(dev, "%s", err);
    test_defer(free_dev, dev);
    struct whisper_state *c = whisper_state_new(m, NULL, err, sizeof err);
    struct whisper_state *g = whisper_state_new(m, NULL, err, sizeof err);
    CHECK(c && g);
    test_defer(free_state, c);
    test_defer(free_state, g);
    CHECK_EQ(whisper_state_use_dev(g, dev), OMNI_OK);
    struct whisper_batcher_params bp = whisper_batcher_default_params();
    bp.n_threads = 1;
    bp.dev = dev;
    struct whisper_batcher *b = whisper_batcher_new(m, &bp, err, sizeof err);
    struct whisper_state *bs = b ? whisper_state_new_batched(b, err, sizeof err) : NULL;
    CHECK(b && bs);
    test_defer(free_batcher, b);
    test_defer(free_state, bs);

    float *pcm = NULL;
    size_t n = 0;
    CHECK_EQ(media_audio_decode_file(test_shared("models/whisper-tiny-espeak/test/test_001.wav"), NULL, &pcm, &n,
                                     err, sizeof err), OMNI_OK);
    struct whisper_full_params p = whisper_full_default_params(WHISPER_SAMPLING_GREEDY);
    p.temperature_inc = 0;
    p.audio_ctx = WHISPER_AUDIO_CTX_AUTO; /* a short window: the cpu backend is single-threaded */
    p.max_tokens = 40;
    char want[1024], got[1024];
    for (int beam = 0; beam < 2; beam++) {
        if (beam) {
            p = whisper_full_default_params(WHISPER_SAMPLING_BEAM_SEARCH);
            p.beam_size = 3;
            p.temperature_inc = 0;
            p.audio_ctx = WHISPER_AUDIO_CTX_AUTO;
            p.max_tokens = 40;
        }
        CHECK_EQ(whisper_full(c, &p, pcm, (int64_t)n, err, sizeof err), OMNI_OK);
        transcript(c, want, sizeof want);
        CHECK_MSG(whisper_full(g, &p, pcm, (int64_t)n, err, sizeof err) == OMNI_OK, "%s", err);
        transcript(g, got, sizeof got);
        CHECK_STR_EQ(got, want);
        CHECK(whisper_full_n_segments(c) >= 1 && strlen(want) > 10);
        if (!beam) { /* the batched state through the batcher's device */
            CHECK_MSG(whisper_full(bs, &p, pcm, (int64_t)n, err, sizeof err) == OMNI_OK, "%s", err);
            transcript(bs, got, sizeof got);
            CHECK_STR_EQ(got, want);
        }
    }
    free(pcm);
}
