/* dac_encode.h - Descript Audio Codec (DAC) encoder: waveform -> residual-VQ
 * codes, the inverse of dac.h (voice cloning: a reference recording's codes
 * for an OuteTTS speaker profile).
 *
 *   char err[256];
 *   struct dac_encoder *m = dac_encoder_load("dac.gguf", err, sizeof err);
 *   int32_t *codes; int64_t n_frames;            // codes[q * n_frames + f]
 *   if (dac_encode(m, tp, pcm, n, 2, &codes, &n_frames, NULL, err, sizeof err) < 0) ...
 *   free(codes); dac_encoder_free(m);
 *
 * Encode = conv k7 (1 -> C), per downsampling block three residual units
 * (Snake / dilated conv k7 / Snake / conv k1, dilations 1, 3, 9), Snake and
 * a strided conv (k 2s, stride s, C -> 2C); Snake, conv k3 to the latent;
 * then per codebook: in_proj to the codebook dimension, the nearest entry by
 * transformers' rule (both sides L2-normalized, the largest
 * -(|e|^2 - 2 e.c) + |c|^2), out_proj of that entry subtracted from the
 * residual - transformers' DacModel.encode. The GGUF is
 * tools/hf_dac_to_gguf.py's without --no-encoder. Long inputs run in time
 * tiles (bounded memory); a tile's halo covers its layers' reach, so the
 * result does not depend on the tiling.
 *
 * Thread safety: a dac_encoder is read-only after loading and may be shared;
 * tp (NULL: one thread) is used by one call at a time. */
#ifndef OMNI_DAC_ENCODE_H
#define OMNI_DAC_ENCODE_H

#include <stddef.h>
#include <stdint.h>

struct tpool;
struct dac_encoder;

struct dac_encoder_info {
    int sample_rate;       /* Hz: the input's rate */
    int hop;               /* samples per code frame (product of downsampling_ratios) */
    int n_codebooks;
    int codebook_size;
    int hidden_size;       /* latent channels */
    int encoder_hidden_size;
    int n_blocks;          /* downsampling blocks */
};

/* Load the encoder and quantizer of a DAC GGUF. NULL + message naming the
 * file and the key or tensor (a file without the encoder: converted with
 * --no-encoder, or not a DAC GGUF). */
struct dac_encoder *dac_encoder_load(const char *path, char *err, size_t errlen);
void dac_encoder_free(struct dac_encoder *m);
const struct dac_encoder_info *dac_encoder_get_info(const struct dac_encoder *m);

/* Output steps of one convolution tile (default 2048; >= 1): memory against
 * per-call overhead. The codes do not depend on it (tested). Before the
 * model is shared. */
void dac_encoder_set_tile(struct dac_encoder *m, int steps);

/* Frames an input of n samples gives (as torch's strided convs count them). */
int64_t dac_encoder_frames(const struct dac_encoder *m, int64_t n);

/* Encode pcm[0..n) (mono, at info.sample_rate, about [-1, 1]) into the codes
 * of the first n_q codebooks: *codes (malloc'd, the caller frees)
 * [q * n_frames + f]. latent, when not NULL, gets the encoder's output
 * before quantization (malloc'd, [hidden_size][n_frames], channels first as
 * transformers has it). 0, or a negative omni_err: OMNI_ERR_ARG for bad
 * counts or an input shorter than one frame, OMNI_ERR_NOMEM. */
int dac_encode(const struct dac_encoder *m, struct tpool *tp, const float *pcm, int64_t n,
               int n_q, int32_t **codes, int64_t *n_frames, float **latent, char *err,
               size_t errlen);

#endif
