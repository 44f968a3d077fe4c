/* dac_conv.h - what the DAC decoder (dac.c) and encoder (dac_encode.c)
 * load alike from a DAC GGUF: tensors as floats with their numpy shapes
 * checked, convolutions packed for src/core/conv1d.h, Snake alphas, the
 * residual units both stacks share, and the header keys.
 *
 *   struct dac_weights w = { .missing_hint = "not a DAC GGUF?" };
 *   if (dac_load_conv(&w, g, "decoder.conv1", H, C, 7, 1, &conv, err, n)) goto fail;
 *   ...
 *   dac_weights_free(&w);   // every array loaded through w
 *
 * One loader at a time per dac_weights; the arrays stay valid until
 * dac_weights_free. */
#ifndef OMNI_AUDIO_CODEC_DAC_CONV_H
#define OMNI_AUDIO_CODEC_DAC_CONV_H

#include <stddef.h>
#include <stdint.h>

#include "src/core/conv1d.h"

struct gguf;

/* Every array a model loads, for one free. */
struct dac_weights {
    void **owned;
    int n_owned, cap_owned;
    int64_t n_params;            /* floats read from tensors (not the packed copies) */
    const char *missing_hint;    /* said after "tensor 'X' missing" (NULL: nothing) */
};

/* A DAC residual unit on c channels: x += conv2(snake2(conv1(snake1(x)))). */
struct dac_res_unit {
    float *alpha1, *alpha2;          /* [c] */
    struct omni_conv1d conv1;        /* k7, dilation 1/3/9 */
    struct omni_conv1d conv2;        /* k1 */
};

/* bytes (at least 1) malloc'ed and owned by w; NULL when out of memory. */
void *dac_weights_alloc(struct dac_weights *w, size_t bytes);
/* Frees every owned array; w is empty after it. */
void dac_weights_free(struct dac_weights *w);

/* Tensor name with numpy shape dims[0..nd) (GGUF stores it reversed) as
 * F32 in a new owned array (F16 / BF16 widened); NULL + message on any
 * mismatch. */
float *dac_load_tensor(struct dac_weights *w, const struct gguf *g, const char *name, int nd,
                       const int64_t *dims, char *err, size_t errlen);
/* prefix.weight (c_out, c_in, k) + prefix.bias packed into *c, padding
 * (k - 1) * dilation / 2. 0 or a negative omni_err. */
int dac_load_conv(struct dac_weights *w, const struct gguf *g, const char *prefix, int c_in,
                  int c_out, int k, int dilation, struct omni_conv1d *c, char *err, size_t errlen);
/* prefix.alpha, c floats. */
float *dac_load_alpha(struct dac_weights *w, const struct gguf *g, const char *prefix, int c,
                      char *err, size_t errlen);
/* block.res_unit<j + 1> (j = 0..2: dilation 1, 3, 9) on c channels. */
int dac_load_res_unit(struct dac_weights *w, const struct gguf *g, const char *block, int j, int c,
                      struct dac_res_unit *r, char *err, size_t errlen);

/* general.architecture is "dac", else a message naming path. */
int dac_check_arch(const struct gguf *g, const char *path, char *err, size_t errlen);
/* A u32 key in 1..2^20 into *out, else a message. */
int dac_get_u32(const struct gguf *g, const char *key, int *out, char *err, size_t errlen);

#endif
