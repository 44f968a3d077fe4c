/* outetts_clone.h - an OuteTTS 1.0 speaker profile (interface v3 JSON) from
 * a reference recording: its DAC codes, its words with their times, and the
 * per-word energy / spectral centroid / pitch features as outetts computes
 * them. `omniserve voice-clone` (src/cli/voice_clone.c) runs the DAC
 * encoder and Whisper and hands the results here.
 *
 *   struct outetts_clone_word w[N];     // the transcript's words, timed
 *   outetts_clone_align(transcript, whisper_words, n_ww, w, &n, N, err, sizeof err);
 *   struct outetts_clone_input in = { .text = transcript, .words = w, .n_words = n,
 *       .pcm = pcm24k, .n_samples = n24, .sample_rate = 24000,
 *       .c1 = codes, .c2 = codes + n_frames, .n_frames = n_frames, .frames_per_s = 75 };
 *   char *json = outetts_clone_speaker_json(&in, err, sizeof err);   // free()
 *
 * Thread safety: no shared state. */
#ifndef OMNI_OUTETTS_CLONE_H
#define OMNI_OUTETTS_CLONE_H

#include <stddef.h>
#include <stdint.h>

#define OUTETTS_CLONE_MAX_WORD 96      /* bytes of one word, NUL included */
#define OUTETTS_CLONE_MAX_SECONDS 20.0 /* outetts' limit on a reference */

struct outetts_clone_word {
    char word[OUTETTS_CLONE_MAX_WORD];
    double t0_s, t1_s;                 /* from the start of the recording */
};

struct outetts_features {
    int energy, spectral_centroid, pitch;   /* 0..100 */
};

/* outetts' features of pcm[0..n) at rate_hz: RMS energy (clipped to 1),
 * the magnitude-weighted mean frequency of the spectrum over rate/2, and the
 * mean autocorrelation pitch of the voiced 400-sample frames (hop 160, Hann,
 * 75..600 Hz, voiced when the peak is over 0.3 of lag 0) mapped from
 * 75..600 Hz to 0..1; each scaled to 0..100 and rounded. n == 0: all 0. */
void outetts_features(const float *pcm, int64_t n, int rate_hz, struct outetts_features *f);

/* The transcript's words (split at white space, as written) timed by the
 * recognizer's words ww[0..n_ww): the two word sequences (lowercased,
 * punctuation dropped) are aligned by edit distance; a transcript word
 * matched or substituted takes its partner's times, the others share the
 * time between their timed neighbours by length. *n_out words into
 * out[0..max). 0, or OMNI_ERR_ARG (an empty transcript, more than max words,
 * no timed word), OMNI_ERR_NOMEM. */
int outetts_clone_align(const char *transcript, const struct outetts_clone_word *ww, int n_ww,
                        struct outetts_clone_word *out, int *n_out, int max, char *err,
                        size_t errlen);

struct outetts_clone_input {
    const char *text;                         /* the transcript */
    const struct outetts_clone_word *words;   /* timed, in order */
    int n_words;
    const float *pcm;                         /* the recording at the codec's rate */
    int64_t n_samples;
    int sample_rate;
    const int32_t *c1, *c2;                   /* the first two codebooks' codes */
    int64_t n_frames;
    double frames_per_s;                      /* 75 for DAC.speech */
};

/* The speaker profile as outetts' create_speaker saves it: {"text" (the
 * normalized transcript), "words": [{"word", "duration" (its frames / rate,
 * 2 decimals), "c1", "c2", "features"}], "global_features"}. A word's codes
 * run from where the previous one ended to its end time (the first starts
 * 20 frames early, the last ends 20 late, as outetts extends them); its
 * features are of its own samples. malloc'd text, or NULL + message. */
char *outetts_clone_speaker_json(const struct outetts_clone_input *in, char *err, size_t errlen);

#endif
