/* conv1d.h - 1-D convolutions and the Snake activation on time-major
 * activations ([t][channels], row-major), as GEMMs on omni_matmul.
 *
 *   float *wp = malloc(...);  omni_conv1d_pack(w_torch, c_out, c_in, 7, wp);
 *   struct omni_conv1d c = { .c_in = 64, .c_out = 64, .k = 7, .dilation = 3,
 *                            .pad = 9, .w = wp, .b = bias };
 *   float *scratch = malloc(omni_conv1d_scratch(&c, t, false) * sizeof(float));
 *   omni_conv1d_run(tp, &c, x, t, scratch, y, false);   // y: [t_out][64]
 *
 * A Conv1d (stride 1) is an im2col (the k taps of each output step side by
 * side) and one product with the [c_out][k * c_in] weight; a 1x1 conv skips
 * the im2col. A ConvTranspose1d is one product x * W giving every (input
 * step, tap, channel) contribution, then a gather of the contributions that
 * land on each output step. Zero padding on both sides, as torch's padding=.
 * The pool (may be NULL) splits the work; one call at a time per pool. The
 * caller owns every buffer; nothing is allocated here. */
#ifndef OMNI_CONV1D_H
#define OMNI_CONV1D_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct tpool;

/* Conv1d, stride 1: y[t][o] = b[o] + sum_{j,i} w[o][j][i] * x[t + j*dilation - pad][i]. */
struct omni_conv1d {
    int c_in, c_out, k, dilation, pad;
    const float *w;   /* [c_out][k][c_in] (omni_conv1d_pack of torch's (c_out, c_in, k)) */
    const float *b;   /* [c_out], or NULL */
};

/* ConvTranspose1d: y[i*stride + j - pad][o] += sum_c x[i][c] * w[c][o][j] (torch), + b[o]. */
struct omni_conv_t1d {
    int c_in, c_out, k, stride, pad;
    const float *w;   /* [k][c_out][c_in] (omni_conv_t1d_pack of torch's (c_in, c_out, k)) */
    const float *b;   /* [c_out], or NULL */
};

/* Reorder torch's Conv1d weight (c_out, c_in, k) into [c_out][k][c_in]. */
void omni_conv1d_pack(const float *w_torch, int c_out, int c_in, int k, float *out);
/* Reorder torch's ConvTranspose1d weight (c_in, c_out, k) into [k][c_out][c_in]. */
void omni_conv_t1d_pack(const float *w_torch, int c_in, int c_out, int k, float *out);

/* Output steps for t_in input steps (<= 0: the input is too short). */
int64_t omni_conv1d_out_len(const struct omni_conv1d *c, int64_t t_in);
int64_t omni_conv_t1d_out_len(const struct omni_conv_t1d *c, int64_t t_in);
/* Floats of scratch a run over t_in steps needs: the im2col (none for a
 * 1x1 conv), and with accumulate the product before it is added. */
size_t omni_conv1d_scratch(const struct omni_conv1d *c, int64_t t_in, bool accumulate);
size_t omni_conv_t1d_scratch(const struct omni_conv_t1d *c, int64_t t_in);

/* y[t_out][c_out] = conv(x[t_in][c_in]); with accumulate, y += conv(x)
 * instead. x and y must not overlap. 0, or OMNI_ERR_ARG for bad shapes. */
int omni_conv1d_run(struct tpool *tp, const struct omni_conv1d *c, const float *x,
                    int64_t t_in, float *scratch, float *y, bool accumulate);
/* y[t_out][c_out] = conv_transpose(x[t_in][c_in]). 0, or OMNI_ERR_ARG. */
int omni_conv_t1d_run(struct tpool *tp, const struct omni_conv_t1d *c, const float *x,
                      int64_t t_in, float *scratch, float *y);

/* Snake (DAC, BigVGAN): y = x + sin(alpha * x)^2 / (alpha + 1e-9), per
 * channel alpha; x, y: [t][c], y may be x. */
void omni_snake(struct tpool *tp, const float *x, int64_t t, int c, const float *alpha,
                float *y);

#endif
