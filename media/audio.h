/* audio.h - audio in and out through ffmpeg: decode any container/codec
 * libavformat reads into mono float PCM at one rate, resample raw PCM
 * streams, and encode float PCM as wav/flac/mp3/opus/aac/raw pcm.
 *
 *   struct media_audio_params p = media_audio_default_params();  // 16 kHz
 *   float *pcm; size_t n;
 *   if (media_audio_decode_file("talk.m4a", &p, &pcm, &n, err, sizeof err) < 0) ...
 *   ...                           // pcm[0..n) in [-1, 1], mono, 16 kHz
 *   free(pcm);
 *
 *   struct media_resampler *rs = media_resampler_new(MEDIA_PCM_S16LE, 24000, &p, err, n);
 *   media_resampler_push(rs, bytes, len, err, n);        // any byte count
 *   size_t got = media_resampler_pull(rs, out, max);    // 16 kHz floats so far
 *   media_resampler_flush(rs, err, n);                  // end of stream: drain
 *   media_resampler_free(rs);
 *
 * Thread safety: every function is reentrant; a media_resampler is used by
 * one thread at a time. ffmpeg's own log output goes to omni_log at debug
 * level (installed on first use). Errors: negative enum omni_err plus one
 * line in err, e.g. "media: no audio stream". */
#ifndef MEDIA_AUDIO_H
#define MEDIA_AUDIO_H

#include <stddef.h>
#include <stdint.h>

struct media_audio_params {
    int sample_rate_hz;      /* output rate of decoded PCM (default 16000) */
    size_t max_input_bytes;  /* larger inputs fail with OMNI_ERR_LIMIT (default 512 MiB) */
    double max_duration_s;   /* longer audio fails with OMNI_ERR_LIMIT: the duration a file
                                declares before decoding (twice this when ffmpeg only
                                estimates it from the bitrate), then the decoded samples,
                                decoding stopping there (default 4 h) */
};

struct media_audio_params media_audio_default_params(void);

/* Decode a whole encoded file held in memory (wav, mp3, m4a/mp4, ogg/opus,
 * flac, webm/mkv, ...; the first audio stream). Channels are averaged to
 * mono, resampled to p->sample_rate_hz (p NULL = defaults). Input rates
 * outside 1000..384000 Hz (header or decoded) fail with OMNI_ERR_FORMAT
 * naming sample_rate, before anything is resampled. On success *pcm
 * (malloc'ed, caller frees) holds *n_samples floats; with zero decoded
 * samples *pcm may be NULL. Returns OMNI_OK or a negative enum omni_err. */
int media_audio_decode_memory(const void *data, size_t len, const struct media_audio_params *p,
                              float **pcm, size_t *n_samples, char *err, size_t errlen);

/* The same for a file on disk (read whole, size checked first). */
int media_audio_decode_file(const char *path, const struct media_audio_params *p, float **pcm,
                            size_t *n_samples, char *err, size_t errlen);

/* Raw mono PCM without a header, as WebSocket clients send it. */
enum media_pcm_format {
    MEDIA_PCM_S16LE, /* signed 16-bit little-endian; x / 32768 */
    MEDIA_PCM_F32LE, /* 32-bit float little-endian */
};

/* Convert a buffer of raw mono PCM at in_rate_hz to floats at
 * p->sample_rate_hz (a trailing partial sample is ignored). */
int media_audio_decode_raw(const void *data, size_t len, enum media_pcm_format fmt, int in_rate_hz,
                           const struct media_audio_params *p, float **pcm, size_t *n_samples,
                           char *err, size_t errlen);

/* ---- streaming resampler ----------------------------------------------
 * Push raw PCM chunks of any byte length (a sample split across two pushes is
 * joined), pull floats at p->sample_rate_hz. Output not yet pulled is
 * buffered; more than p->max_duration_s of it makes push fail with
 * OMNI_ERR_LIMIT. Resampling delays a few output samples until flush. */
struct media_resampler;

struct media_resampler *media_resampler_new(enum media_pcm_format fmt, int in_rate_hz,
                                            const struct media_audio_params *p, char *err,
                                            size_t errlen);
int media_resampler_push(struct media_resampler *rs, const void *data, size_t len, char *err,
                         size_t errlen);
/* End of stream: emit the samples the resampler still holds. Pushing again
 * after a flush starts a new stream. */
int media_resampler_flush(struct media_resampler *rs, char *err, size_t errlen);
/* Number of output samples ready to pull. */
size_t media_resampler_available(const struct media_resampler *rs);
/* Copy up to max ready samples into out; returns how many. */
size_t media_resampler_pull(struct media_resampler *rs, float *out, size_t max);
void media_resampler_free(struct media_resampler *rs);

/* ---- G.711 (ITU-T): telephone audio, 8 kHz, one byte a sample ---------
 * mu-law (North America, Japan) and A-law (elsewhere), as the Realtime
 * API's g711_ulaw / g711_alaw formats carry them. */
uint8_t media_g711_ulaw_from_s16(int16_t x);
uint8_t media_g711_alaw_from_s16(int16_t x);
int16_t media_g711_ulaw_to_s16(uint8_t u);
int16_t media_g711_alaw_to_s16(uint8_t a);

/* Route ffmpeg's own log output to omni_log at debug level. Idempotent and
 * thread-safe; every decode/encode entry point calls it. */
void media_log_init(void);

/* ---- encoding (media/audio_encode.c) ----------------------------------- */
enum media_audio_format {
    MEDIA_AUDIO_WAV,   /* RIFF WAVE, 16-bit PCM */
    MEDIA_AUDIO_FLAC,  /* native FLAC stream, 16-bit */
    MEDIA_AUDIO_MP3,   /* MPEG-1/2 layer III (libmp3lame) */
    MEDIA_AUDIO_OPUS,  /* Opus in Ogg (libopus) */
    MEDIA_AUDIO_AAC,   /* AAC-LC in ADTS (ffmpeg's native encoder) */
    MEDIA_AUDIO_PCM,   /* raw signed 16-bit little-endian, no header */
};

struct media_encode_params {
    int bitrate_bps; /* mp3/opus/aac target bitrate; 0 = codec default */
};

struct media_encode_params media_encode_default_params(void);

/* "wav", "flac", "mp3", "opus", "aac", "pcm" -> format; -1 if unknown. */
int media_audio_format_from_name(const char *name);
/* MIME type of the encoded bytes, e.g. "audio/mpeg". */
const char *media_audio_format_mime(enum media_audio_format fmt);

/* Encode mono float PCM (clipped to [-1, 1]) at sample_rate_hz. Codecs with
 * a fixed set of rates (mp3, opus, aac) get the input resampled to the
 * nearest rate they accept (opus: 48 kHz or lower standard rates). On success
 * *out (malloc'ed, caller frees) holds *out_len bytes. p NULL = defaults. */
int media_audio_encode(const float *pcm, size_t n_samples, int sample_rate_hz,
                       enum media_audio_format fmt, const struct media_encode_params *p,
                       uint8_t **out, size_t *out_len, char *err, size_t errlen);

/* Streaming: PCM pushed in pieces, encoded bytes handed to write(user, ...)
 * as soon as the muxer has them (after each push: everything the encoder
 * could finish). The muxers write their live forms: a WAV header with the
 * sizes 0xFFFFFFFF, FLAC without the total, MP3 without a Xing frame. write
 * returns nonzero to stop (the client left): later calls fail OMNI_ERR_IO. */
typedef int (*media_write_fn)(void *user, const uint8_t *data, size_t len);
struct media_audio_encoder;
struct media_audio_encoder *media_audio_encoder_new(enum media_audio_format fmt, int sample_rate_hz,
                                                    const struct media_encode_params *p,
                                                    media_write_fn write, void *user, char *err,
                                                    size_t errlen);
int media_audio_encoder_push(struct media_audio_encoder *e, const float *pcm, size_t n, char *err,
                             size_t errlen);
/* End of the audio: flushes the encoder and writes the trailer. */
int media_audio_encoder_finish(struct media_audio_encoder *e, char *err, size_t errlen);
void media_audio_encoder_free(struct media_audio_encoder *e);

#endif
