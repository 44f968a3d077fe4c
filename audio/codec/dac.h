/* dac.h - Descript Audio Codec (DAC) decoder: residual-VQ codes -> waveform.
 *
 * The codec of OuteTTS 1.0 (ibm-research/DAC.speech.v1.0: 24 kHz, 75 frames
 * a second, hop 320) and the descript/dac_* models, from the GGUF that
 * tools/hf_dac_to_gguf.py writes from a Hugging Face DacModel checkpoint.
 *
 *   char err[256];
 *   struct dac_model *m = dac_load("dac.gguf", err, sizeof err);
 *   float *pcm; int64_t n;                       // codes[q * n_frames + f]
 *   if (dac_decode(m, tp, codes, 2, n_frames, &pcm, &n, err, sizeof err) < 0) ...
 *   free(pcm);                                   // n = dac_samples_for_frames(m, n_frames)
 *
 *   struct dac_stream *s = dac_stream_new(m, NULL, 2, err, sizeof err);
 *   for each frame: dac_stream_push(s, tp, frame_codes, 1, &chunk, &n_chunk, err, sizeof err);
 *   dac_stream_finish(s, tp, &chunk, &n_chunk, err, sizeof err);
 *   dac_stream_free(s); dac_free(m);
 *
 * Decode = sum over codebooks of out_proj(codebook[code]) (precomputed per
 * entry at load), conv k7, upsampling blocks (Snake, transposed conv, three
 * residual units of Snake / dilated conv k7 / Snake / conv k1 with dilations
 * 1, 3, 9), Snake, conv k7 to one channel, tanh - transformers' DacModel
 * decode(audio_codes=...). A stream runs the layers as a pipeline: each
 * layer keeps the input rows its later outputs still read (left context)
 * and computes every output step its input determines, so nothing is
 * decoded twice; a sample comes out once the frames its receptive field
 * reaches (dac_context_frames to its right) are in. The one-shot decode
 * is the same pipeline fed in runs of frames (bounded memory), and the
 * stitched stream equals it bit for bit.
 *
 * Thread safety: a dac_model is read-only after dac_load and may be shared
 * by any number of threads; a dac_stream belongs to one thread at a time.
 * tp (may be NULL: one thread) is used by one call at a time. */
#ifndef OMNI_DAC_H
#define OMNI_DAC_H

#include <stddef.h>
#include <stdint.h>

struct tpool;
struct dac_model;
struct dac_stream;

struct dac_info {
    int sample_rate;       /* Hz */
    int hop;               /* samples per code frame (product of upsampling_ratios) */
    int n_codebooks;       /* codebooks in the file */
    int codebook_size;     /* entries per codebook: codes are 0 .. codebook_size-1 */
    int hidden_size;       /* latent channels */
    int decoder_hidden_size;
    int n_blocks;          /* upsampling blocks */
    int64_t n_params;      /* decoder parameters loaded (quantizer + decoder) */
};

/* Load the quantizer and decoder of a DAC GGUF. NULL + message naming the
 * file and the key or tensor on failure (a file that is not a DAC GGUF,
 * a missing tensor, a shape that does not match the metadata). */
struct dac_model *dac_load(const char *path, char *err, size_t errlen);
void dac_free(struct dac_model *m);
const struct dac_info *dac_get_info(const struct dac_model *m);

/* Samples a decode of n_frames frames gives: n_frames * hop less what the
 * odd strides' transposed convs drop (DAC.speech: 320 n - 8). */
int64_t dac_samples_for_frames(const struct dac_model *m, int64_t n_frames);
/* Frames of right context (lookahead) a sample needs: the samples of
 * frame f are final once frame f + dac_context_frames is in (DAC.speech: 10). */
int dac_context_frames(const struct dac_model *m);

/* One-shot decode of codes[q * n_frames + f] (n_q codebooks, the first n_q
 * of the model's, 1 <= n_q <= n_codebooks). *out (malloc'd, the caller
 * frees) gets dac_samples_for_frames(n_frames) samples in [-1, 1]. 0, or a
 * negative omni_err: OMNI_ERR_ARG for a code out of its codebook's range
 * (the message names codebook, frame and value) or bad counts. */
int dac_decode(const struct dac_model *m, struct tpool *tp, const int32_t *codes, int n_q,
               int64_t n_frames, float **out, int64_t *n_out, char *err, size_t errlen);

struct dac_stream_params {
    int first_chunk_frames;   /* frames per run until audio comes (small: time to first audio) */
    int chunk_frames;         /* frames per run after it */
};
struct dac_stream_params dac_stream_default_params(void);   /* 8, 32 */

/* A streaming decoder for frames of n_q codes. params NULL: the defaults. */
struct dac_stream *dac_stream_new(const struct dac_model *m, const struct dac_stream_params *p,
                                  int n_q, char *err, size_t errlen);
void dac_stream_free(struct dac_stream *s);
/* Add n_frames frames, frame-major (codes[f * n_q + q]); once
 * first_chunk_frames (until audio has come out, then chunk_frames) frames
 * are waiting, runs them through the layers. *out / *n_out: the samples now
 * final (n_out may be 0), valid until the next call on s. 0 or a negative
 * omni_err (a code out of range: nothing of this call is kept; a failed
 * decode, out of memory: the stream fails from then on). */
int dac_stream_push(struct dac_stream *s, struct tpool *tp, const int32_t *codes,
                    int n_frames, const float **out, int64_t *n_out, char *err, size_t errlen);
/* The end of the codes: decodes what is left. After it, pushes fail. */
int dac_stream_finish(struct dac_stream *s, struct tpool *tp, const float **out,
                      int64_t *n_out, char *err, size_t errlen);
/* Frames pushed so far, and samples emitted so far. */
int64_t dac_stream_frames(const struct dac_stream *s);
int64_t dac_stream_samples(const struct dac_stream *s);

#endif
