/* tts_int.h - the backend contract behind tts.h (audio/tts only).
 *
 * A backend owns a family of voices. The core (tts.c) runs the synthesis
 * calls of local voices on its one worker thread, one sentence at a time,
 * so a backend whose library is a process-wide singleton (espeak-ng) needs
 * no lock of its own for synthesis. A neural backend (an LLM that writes
 * codec tokens, decoded to audio) sets needs_engine on its voices; their
 * synth is called by up to tts_params.engine_workers threads at once (different
 * streams), so its per-call state (the decoder's pool) is per call. */
#ifndef OMNI_TTS_INT_H
#define OMNI_TTS_INT_H

#include "audio/tts/tts.h"

/* Called by a backend's synth for each chunk of audio; nonzero stops it.
 * n == 0 (pcm may be NULL) only asks whether to go on: a backend that
 * waits long between chunks polls with it. */
typedef int (*tts_pcm_fn)(void *user, const float *pcm, size_t n);

struct tts_backend {
    const char *name;
    void *state;
    /* Voices this backend lists (tts_voice_get order). */
    int (*n_voices)(void *state);
    int (*voice)(void *state, int i, struct tts_voice_info *out);
    /* Resolves an id this backend knows (listed or not, e.g. "en+f3");
     * OMNI_ERR_NOTFOUND otherwise. */
    int (*find)(void *state, const char *id, struct tts_voice_info *out);
    /* Speaks one sentence with the voice, feeding emit; returns 0, 1 when
     * emit asked to stop, or a negative enum omni_err + message. Worker
     * threads only: one at a time for local voices, up to
     * tts_params.engine_workers at once for needs_engine ones. */
    int (*synth)(void *state, const struct tts_voice_info *v, float speed, const char *text,
                 tts_pcm_fn emit, void *user, char *err, size_t errlen);
    void (*free)(void *state);
    float min_speed;   /* slowest speed synth does itself; slower is stretched (tts_stretch) */
};

/* Time-stretches in[n] by factor (> 1: longer) keeping the pitch: *out
 * (malloc'd, *n_out samples). 0 or OMNI_ERR_NOMEM. */
int tts_stretch(const float *in, size_t n, int rate_hz, double factor, float **out, size_t *n_out);

/* The built-in espeak-ng backend; 0 or a negative enum omni_err + message. */
int tts_espeak_open(struct tts_backend *b, char *err, size_t errlen);

struct engine;
struct dac_model;
/* The OuteTTS 1.0 backend (tts_outetts.c): model in e, codec dac, speaker
 * files NAME.json of voices_dir (may be NULL) as voices; max_tokens per
 * sentence (0: from the text); scripted: benchmark words instead of sampled
 * ones (outetts_speak_params.scripted). */
int tts_outetts_open(struct tts_backend *b, struct engine *e, int model,
                     const struct dac_model *dac, const char *voices_dir, int max_tokens,
                     bool scripted, char *err, size_t errlen);

#endif
