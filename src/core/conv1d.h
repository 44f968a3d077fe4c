/* conv1d.h - 1-D convolutions and the Snake activation on time-major
 * activations ([t][channels], row-major), as direct-convolution GEMMs.
 *
 *   float *wp = malloc(omni_conv1d_packed_floats(c_out, c_in, 7) * sizeof(float));
 *   omni_conv1d_pack(w_torch, c_out, c_in, 7, wp);
 *   struct omni_conv1d c = { .c_in = 64, .c_out = 64, .k = 7, .dilation = 3,
 *                            .pad = 9, .w = wp, .b = bias };
 *   float *scratch = malloc(omni_conv1d_scratch(&c, t, false) * sizeof(float));
 *   omni_conv1d_run(tp, &c, x, t, scratch, y, false);   // y: [t_out][64]
 *
 * A Conv1d (stride 1) is one product of the input rows with the packed
 * [k * c_in][c_out] weight in which tap j of output step t reads input row
 * t + j*dilation directly (src/core/arch/x86/conv_x86.h: no im2col); zero
 * padding is a copy of the input with zero rows on both sides. A
 * ConvTranspose1d is stride products, one per output phase (outputs
 * t = i*stride + phase - pad), each a Conv1d of ceil(k / stride) taps over
 * the input with zero rows ahead (polyphase: no product of zeros, no
 * overlap-add). The _valid / _part forms compute a range of a longer
 * signal's outputs from the rows the caller holds, for streaming, and fuse
 * Snake before and after the product and a residual add (struct
 * omni_conv_fuse).
 * The pool (may be NULL) splits the work; one call at a time per pool. The
 * caller owns every buffer; nothing is allocated here. Each output's sum
 * runs in an order fixed by the layer's shape and the CPU level, so a
 * signal computed in ranges equals it computed whole, bit for bit. */
#ifndef OMNI_CONV1D_H
#define OMNI_CONV1D_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct tpool;

/* Conv1d, stride 1: y[t][o] = b[o] + sum_{j,i} w[o][i][j] * x[t + j*dilation - pad][i]
 * (torch's weight w (c_out, c_in, k)). */
struct omni_conv1d {
    int c_in, c_out, k, dilation, pad;
    const float *w;   /* omni_conv1d_pack's layout */
    const float *b;   /* [c_out], or NULL */
};

/* ConvTranspose1d: y[i*stride + j - pad][o] += sum_c x[i][c] * w[c][o][j] (torch), + b[o]. */
struct omni_conv_t1d {
    int c_in, c_out, k, stride, pad;
    const float *w;   /* omni_conv_t1d_pack's layout (for this stride) */
    const float *b;   /* [c_out], or NULL */
};

/* What a product may fuse (NULL fields: nothing). */
struct omni_conv_fuse {
    const float *snake_in;    /* [c_in]: the conv reads Snake(x) (made in scratch) */
    const float *snake_out;   /* [c_out]: y = Snake(conv(x) + b) */
    const float *resid;       /* rows of c_out: y = resid + conv(x) + b; may be y itself */
};

/* Floats of the packed weights: output channels padded to a multiple of 32. */
size_t omni_conv1d_packed_floats(int c_out, int c_in, int k);
size_t omni_conv_t1d_packed_floats(int c_in, int c_out, int k, int stride);
/* torch's Conv1d weight (c_out, c_in, k) packed: groups of 32 output
 * channels, each [k * c_in][32] (row j * c_in + i), zero past c_out. A
 * pack for (c_out, c_in, k) is also the pack for (c_out, c_in * k / k2, k2)
 * when the taps merge evenly (the encoder's strided convs use that). */
void omni_conv1d_pack(const float *w_torch, int c_out, int c_in, int k, float *out);
/* torch's ConvTranspose1d weight (c_in, c_out, k) packed per phase of stride. */
void omni_conv_t1d_pack(const float *w_torch, int c_in, int c_out, int k, int stride, float *out);

/* Output steps for t_in input steps (<= 0: the input is too short). */
int64_t omni_conv1d_out_len(const struct omni_conv1d *c, int64_t t_in);
int64_t omni_conv_t1d_out_len(const struct omni_conv_t1d *c, int64_t t_in);
/* Floats of scratch a run over t_in steps needs (the padded copy of x). */
size_t omni_conv1d_scratch(const struct omni_conv1d *c, int64_t t_in, bool accumulate);
size_t omni_conv_t1d_scratch(const struct omni_conv_t1d *c, int64_t t_in);

/* y[t_out][c_out] = conv(x[t_in][c_in]); with accumulate, y += conv(x)
 * instead. x and y must not overlap. 0, or OMNI_ERR_ARG for bad shapes. */
int omni_conv1d_run(struct tpool *tp, const struct omni_conv1d *c, const float *x,
                    int64_t t_in, float *scratch, float *y, bool accumulate);
/* y[t_out][c_out] = conv_transpose(x[t_in][c_in]). 0, or OMNI_ERR_ARG. */
int omni_conv_t1d_run(struct tpool *tp, const struct omni_conv_t1d *c, const float *x,
                      int64_t t_in, float *scratch, float *y);

/* Conv1d without padding (c->pad ignored): y[t] for t < t_in - (k-1)*dilation
 * from x rows t .. t + (k-1)*dilation, fused with f (may be NULL). Scratch:
 * t_in * c_in floats with f->snake_in, else none. y must not overlap x
 * (f->resid may be y). 0, or OMNI_ERR_ARG. */
int omni_conv1d_valid(struct tpool *tp, const struct omni_conv1d *c, const float *x,
                      int64_t t_in, float *scratch, float *y, const struct omni_conv_fuse *f);

/* Input steps [*s0, *s1) that ConvTranspose1d outputs [o0, o1) read
 * (steps < 0 or >= the input's length are zero rows the caller supplies). */
void omni_conv_t1d_reads(const struct omni_conv_t1d *c, int64_t o0, int64_t o1, int64_t *s0,
                         int64_t *s1);
/* ConvTranspose1d outputs [o0, o1) of a signal into y (row 0 = output o0)
 * from x, whose n rows are input steps [x0, x0 + n) covering
 * omni_conv_t1d_reads(o0, o1); f: snake_in and snake_out (resid not
 * supported). Scratch: n * c_in floats with f->snake_in. 0, or OMNI_ERR_ARG. */
int omni_conv_t1d_part(struct tpool *tp, const struct omni_conv_t1d *c, const float *x,
                       int64_t x0, int64_t n, int64_t o0, int64_t o1, float *scratch, float *y,
                       const struct omni_conv_fuse *f);

/* Snake (DAC, BigVGAN): y = x + sin(alpha * x)^2 / (alpha + 1e-9), per
 * channel alpha; x, y: [t][c], y may be x. */
void omni_snake(struct tpool *tp, const float *x, int64_t t, int c, const float *alpha,
                float *y);

#endif
