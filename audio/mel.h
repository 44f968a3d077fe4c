/* mel.h - Whisper's log-mel spectrogram of 16 kHz mono audio.
 *
 * 25 ms periodic Hann window (n_fft 400), hop 160 (10 ms), power spectrum by
 * libavutil's av_tx FFTs (chirp-z, see mel.c), n_mels triangular filters (those stored in the
 * model file), log10 clamped at 1e-10 and at (max - 8), then (x + 4) / 4, as
 * OpenAI's whisper and transformers' WhisperFeatureExtractor compute it.
 *
 *   struct mel_spec mel;
 *   int rc = mel_compute(tp, filters, 80, pcm, n_samples, MEL_PAD_30S, &mel, err, sizeof err);
 *   // mel.data[m * mel.n_frames + t]; mel.n_frames = (n_samples + pad) / MEL_HOP
 *   mel_spec_free(&mel);
 *
 * The signal is extended by pad_samples zeros (MEL_PAD_30S: whisper's
 * 30 s, so every 30 s window starting inside the audio is complete) and
 * reflect-padded by n_fft/2 at both ends; the last STFT frame is dropped.
 * Frames are split across the pool's threads. Thread safety: reentrant, one
 * call at a time per pool. */
#ifndef OMNI_MEL_H
#define OMNI_MEL_H

#include <stddef.h>
#include <stdint.h>

struct tpool;

#define MEL_SAMPLE_RATE_HZ 16000
#define MEL_N_FFT 400
#define MEL_HOP 160
#define MEL_N_FREQ (MEL_N_FFT / 2 + 1)   /* 201 frequency bins */
#define MEL_PAD_30S (30 * MEL_SAMPLE_RATE_HZ)

struct mel_spec {
    int n_mels;
    int n_frames;
    float *data;  /* [n_mels][n_frames], owned; freed by mel_spec_free */
};

/* filters: [n_mels][MEL_N_FREQ]. tp may be NULL. 0, or OMNI_ERR_ARG (bad
 * sizes), OMNI_ERR_LIMIT (more than 2^31 frames), OMNI_ERR_NOMEM,
 * OMNI_ERR_UNSUPPORTED (av_tx refused the transform). */
int mel_compute(struct tpool *tp, const float *filters, int n_mels, const float *pcm,
                int64_t n_samples, int64_t pad_samples, struct mel_spec *out, char *err,
                size_t errlen);
void mel_spec_free(struct mel_spec *m);

#endif
