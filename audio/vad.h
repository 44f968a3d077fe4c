/* vad.h - Silero VAD v6 (16 kHz) in whisper.cpp's ggml format: a speech
 * probability for every 512-sample window, speech segments with whisper.cpp's
 * rules, and a streaming detector with start/stop events.
 *
 *   struct vad_model *m = vad_model_load("silero-v6.2.0-ggml.bin", err, sizeof err);
 *   float *probs; size_t n_probs;
 *   vad_detect(m, pcm, n, &probs, &n_probs, err, sizeof err);  // pcm: mono 16 kHz
 *   struct vad_params vp = vad_default_params();
 *   struct vad_segment *segs; size_t n_segs;
 *   vad_segments_from_probs(probs, n_probs, &vp, &segs, &n_segs, err, sizeof err);
 *   free(segs); free(probs); vad_model_free(m);
 *
 * File layout (little-endian, no padding), as whisper.cpp's converter writes it:
 *   1. u32 magic 0x67676d6c; i32 len + model type string ("silero-16k");
 *      i32 version major, minor, patch
 *   2. i32 n_window (512), n_context (64, unused: each window is reflect-padded)
 *   3. i32 n_encoder_layers (4), then (in, out, kernel) per layer
 *   4. i32 lstm_input, lstm_hidden, final_conv_in, final_conv_out
 *   5. until end of file, tensor records: i32 n_dims, i32 name_len, i32 type
 *      (0 f32, 1 f16), n_dims i32 extents (fastest first), name, raw data
 *
 * Thread safety: a vad_model is read-only after loading and may be shared by
 * any number of threads; a vad_stream belongs to one thread at a time. */
#ifndef AUDIO_VAD_H
#define AUDIO_VAD_H

#include <stddef.h>
#include <stdint.h>

#define VAD_SAMPLE_RATE 16000
#define VAD_WINDOW 512 /* samples per probability (32 ms) */

struct vad_model;

/* NULL on failure with one line in err naming the file and the field. */
struct vad_model *vad_model_load(const char *path, char *err, size_t errlen);
/* The same from bytes in memory (copied; name is used in messages). */
struct vad_model *vad_model_load_memory(const void *data, size_t len, const char *name, char *err,
                                        size_t errlen);
void vad_model_free(struct vad_model *m);

/* Speech probability of every window of pcm (mono float at 16 kHz):
 * ceil(n / 512) values, the last window zero-padded, LSTM state starting at
 * zero. *probs is malloc'ed (caller frees; NULL when n is 0). */
int vad_detect(const struct vad_model *m, const float *pcm, size_t n, float **probs,
               size_t *n_probs, char *err, size_t errlen);

/* Segment rules, whisper.cpp's whisper_vad_default_params(). */
struct vad_params {
    float threshold;             /* speech when prob >= threshold (0.5) */
    int min_speech_duration_ms;  /* shorter speech is dropped (250) */
    int min_silence_duration_ms; /* silence that ends a segment (100) */
    float max_speech_duration_s; /* longer segments are split; > 100000 = no limit (FLT_MAX) */
    int speech_pad_ms;           /* added before and after each segment (30) */
    float samples_overlap_s;     /* overlap when stitching speech for Whisper (0.1) */
    int merge_gap_ms;            /* segments closer than this are merged (200, whisper.cpp's
                                    constant); 0 never merges, so that min_silence_duration_ms
                                    alone ends a segment (what a realtime turn wants) */
};

struct vad_params vad_default_params(void);

/* One speech segment: samples [start, end) at 16 kHz. */
struct vad_segment {
    int64_t start_sample, end_sample;
};

/* Time of a sample position in whisper.cpp's centiseconds (rounded). */
int64_t vad_samples_to_cs(int64_t samples);

/* Speech segments from the probabilities (the audio length is taken as
 * n_probs * 512): start/stop with threshold hysteresis, segments closer than
 * merge_gap_ms merged, short ones dropped, padding added (neighbours closer
 * than twice the padding split the gap). *segs malloc'ed (caller frees;
 * NULL when none). */
int vad_segments_from_probs(const float *probs, size_t n_probs, const struct vad_params *p,
                            struct vad_segment **segs, size_t *n_segs, char *err, size_t errlen);

/* ---- streaming ----------------------------------------------------------
 * One stream per live audio session: push 16 kHz samples in chunks of any
 * size; every full window yields a probability (same values as vad_detect on
 * the concatenated audio) and the segment rules run incrementally. An event
 * is emitted as soon as it is certain: START once the speech is sure to last
 * min_speech_duration_ms, STOP once no later speech can merge with it
 * (merge_gap_ms after the end found by the min_silence_duration_ms rule; at
 * least 2 * speech_pad_ms, where the next segment's start decides the
 * padding). Over a whole stream, the START/STOP pairs equal
 * vad_segments_from_probs on its probabilities. Requires speech_pad_ms <= 100
 * (the session keeps no more audio before a START). */
struct vad_stream;

enum vad_event_type { VAD_SPEECH_START, VAD_SPEECH_STOP };

struct vad_event {
    enum vad_event_type type;
    int64_t sample; /* padded segment start or end, samples since the stream began */
};

struct vad_stream *vad_stream_new(const struct vad_model *m, const struct vad_params *p,
                                  char *err, size_t errlen);
int vad_stream_push(struct vad_stream *s, const float *pcm, size_t n, char *err, size_t errlen);
/* End of audio: the partial window is zero-padded and processed, an open
 * segment is closed at the end. Pushing afterwards fails until reset. */
int vad_stream_finish(struct vad_stream *s, char *err, size_t errlen);
/* Feed probabilities computed elsewhere (another detector, tests) instead of
 * audio: each counts as one 512-sample window. Not to be mixed with a
 * partial window of pushed audio (OMNI_ERR_ARG). */
int vad_stream_push_probs(struct vad_stream *s, const float *probs, size_t n, char *err,
                          size_t errlen);
/* Forget all audio, state and queued output (positions restart at 0). */
void vad_stream_reset(struct vad_stream *s);
/* Copy up to max probabilities not yet pulled; returns how many. At most
 * 65536 wait unpulled (about 35 min); older ones are dropped. */
size_t vad_stream_pull_probs(struct vad_stream *s, float *out, size_t max);
/* Pop the next event: 1 if *ev was filled, 0 if none is queued. */
int vad_stream_next_event(struct vad_stream *s, struct vad_event *ev);
/* Probabilities computed so far (windows processed). */
uint64_t vad_stream_n_windows(const struct vad_stream *s);
/* 1 between a START and its STOP. */
int vad_stream_in_speech(const struct vad_stream *s);
/* 1 when the speech has paused where it would end at *end (the STOP's
 * padded sample) unless more speech follows: from the first window below
 * the stop threshold (threshold - 0.15) on, before min_silence_duration_ms
 * and merge_gap_ms have passed and the STOP comes. 0 while speech goes on. */
int vad_stream_pending_end(const struct vad_stream *s, int64_t *end);
void vad_stream_free(struct vad_stream *s);

#endif
