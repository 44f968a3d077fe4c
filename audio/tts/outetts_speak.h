/* outetts_speak.h - text to waveform with OuteTTS 1.0: the speaking model
 * runs as an ordinary engine request (paged KV, batching with chat,
 * prefix caching of the speaker prompt, cancellation), and each word's DAC
 * codes go to a streaming DAC decoder as soon as the word is complete.
 * The interface-v3 prompt puts the text before the speaker's words, so the
 * prefix cache shares a speaker's KV only between requests for the same
 * text (and the transcript's first blocks between any two).
 *
 *   int lm = engine_add_model(e, model, "outetts", err, sizeof err);  ... engine_start
 *   struct dac_model *dac = dac_load("dac.gguf", err, sizeof err);
 *   struct outetts_speak_params p = outetts_speak_default_params();
 *   p.text = "Hello there."; p.speaker = spk;
 *   struct outetts_speak_stats st;
 *   outetts_speak(e, lm, dac, tp, &p, on_audio, user, &st, err, sizeof err);
 *   // on_audio(user, pcm, n) per decoded chunk (24 kHz mono floats), on the calling thread
 *
 * Text over 300 characters is spoken in chunks of whole sentences up to
 * that size, one request each, one after the other into on_audio.
 *
 * outetts_speak blocks: the engine thread samples tokens and parses them
 * into code frames (cheap); the calling thread decodes the frames with tp
 * (may be NULL), taking its threads from tp's compute budget when tp has
 * one (tpool_attach), one chunk at a time, so decoding and the language
 * model share the cores. Thread safety: any number of calls at once on
 * one engine, each with its own tp. */
#ifndef OMNI_OUTETTS_SPEAK_H
#define OMNI_OUTETTS_SPEAK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct engine;
struct dac_model;
struct tpool;
struct outetts_speaker;

struct outetts_speak_params {
    const char *text;                      /* what to say (normalized here) */
    const struct outetts_speaker *speaker; /* NULL: no speaker (a random voice) */
    int max_tokens;                        /* generated tokens per chunk; 0 (default): 64
                                              + 40 per byte of the chunk, at most 8192 */
    uint64_t seed;                         /* sampling seed; default 0 */
    float temperature;                     /* default 0.4 (the model card's); 0: greedy */
    int first_chunk_frames, chunk_frames;  /* DAC stream chunking; default 8, 32 */
    /* NULL, or asked about every OUTETTS_POLL_MS while the model writes (its
     * words may come only at the end): nonzero stops the request as a
     * nonzero on_audio does (the client left), freeing its sequence at once */
    int (*poll)(void *poll_user);
    void *poll_user;
    /* Benchmarks of random-weight models (which never end a word): every
     * token the model writes is forced to outetts_script's words for the
     * chunk (seeded by seed) instead of sampled. Each still costs its
     * forward pass, so time to first audio, the codec's share and batching
     * are measured on real work; the voice is noise. Default false. */
    bool scripted;
};
#define OUTETTS_POLL_MS 50
struct outetts_speak_params outetts_speak_default_params(void);

struct outetts_speak_stats {
    int prompt_tokens, cached_tokens, completion_tokens;
    int64_t frames, words, samples;
    double first_audio_ms;   /* call -> first on_audio */
    double total_ms;
    bool audio_end;          /* the model ended the audio itself (not max_tokens) */
};

/* Return nonzero to stop (the client left): the request is cancelled. */
typedef int (*outetts_audio_fn)(void *user, const float *pcm, size_t n);

/* Speak p->text. 0 once the audio is complete (or stopped by on_audio),
 * else a negative omni_err + message: a model without the OuteTTS tokens, a
 * codec with fewer than 2 codebooks or codes past its size, empty or
 * over-long text, a refused request (OMNI_ERR_LIMIT: the engine is busy). */
int outetts_speak(struct engine *e, int model, const struct dac_model *dac, struct tpool *tp,
                  const struct outetts_speak_params *p, outetts_audio_fn on_audio, void *user,
                  struct outetts_speak_stats *st, char *err, size_t errlen);

#endif
