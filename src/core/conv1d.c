/* conv1d.c - Conv1d / ConvTranspose1d as GEMMs, and Snake, on time-major rows.
 *
 * The products go through omni_matmul with an F32 weight view, which splits
 * output channels across the pool and calls single-threaded sgemm; the
 * row-wise passes here (im2col, the transposed conv's gather, bias, Snake)
 * split time steps across the same pool. */
#include "src/core/conv1d.h"

#include "src/core/matmul.h"
#include "src/core/omni.h"
#include "src/core/tensor.h"
#include "src/core/threadpool.h"

#include <math.h>
#include <string.h>

void omni_conv1d_pack(const float *w_torch, int c_out, int c_in, int k, float *out)
{
    for (int o = 0; o < c_out; o++)
        for (int i = 0; i < c_in; i++)
            for (int j = 0; j < k; j++)
                out[((size_t)o * k + j) * c_in + i] = w_torch[((size_t)o * c_in + i) * k + j];
}

void omni_conv_t1d_pack(const float *w_torch, int c_in, int c_out, int k, float *out)
{
    for (int i = 0; i < c_in; i++)
        for (int o = 0; o < c_out; o++)
            for (int j = 0; j < k; j++)
                out[((size_t)j * c_out + o) * c_in + i] = w_torch[((size_t)i * c_out + o) * k + j];
}

int64_t omni_conv1d_out_len(const struct omni_conv1d *c, int64_t t_in)
{
    return t_in + 2 * (int64_t)c->pad - (int64_t)c->dilation * (c->k - 1);
}

int64_t omni_conv_t1d_out_len(const struct omni_conv_t1d *c, int64_t t_in)
{
    if (t_in <= 0)
        return 0;
    return (t_in - 1) * c->stride + c->k - 2 * (int64_t)c->pad;
}

/* the im2col rows (none for a 1x1 conv) */
static size_t col_floats(const struct omni_conv1d *c, int64_t t_out)
{
    if (t_out <= 0 || (c->k == 1 && c->pad == 0))
        return 0;
    return (size_t)t_out * c->k * c->c_in;
}

size_t omni_conv1d_scratch(const struct omni_conv1d *c, int64_t t_in, bool accumulate)
{
    int64_t t_out = omni_conv1d_out_len(c, t_in);
    if (t_out <= 0)
        return 0;
    return col_floats(c, t_out) + (accumulate ? (size_t)t_out * c->c_out : 0);
}

size_t omni_conv_t1d_scratch(const struct omni_conv_t1d *c, int64_t t_in)
{
    return t_in > 0 ? (size_t)t_in * c->k * c->c_out : 0;
}

/* [i0, i1) of n split into nth near-equal parts */
static void split(int64_t n, int ith, int nth, int64_t *i0, int64_t *i1)
{
    *i0 = n * ith / nth;
    *i1 = n * (ith + 1) / nth;
}

static void run_on(struct tpool *tp, tpool_fn fn, void *ctx)
{
    if (tp)
        tpool_run(tp, fn, ctx);
    else
        fn(ctx, 0, 1);
}

// ---- Conv1d ----

struct conv_job {
    const struct omni_conv1d *c;
    const float *x;
    int64_t t_in, t_out;
    float *col, *y, *tmp;
    bool accumulate;
};

/* col[t][j*c_in + i] = x[t + j*dilation - pad][i], zero outside the input */
static void im2col_rows(void *ctx, int ith, int nth)
{
    const struct conv_job *J = ctx;
    const struct omni_conv1d *c = J->c;
    int64_t t0, t1;
    split(J->t_out, ith, nth, &t0, &t1);
    size_t row = (size_t)c->c_in * sizeof(float);
    for (int64_t t = t0; t < t1; t++) {
        float *dst = J->col + (size_t)t * c->k * c->c_in;
        for (int j = 0; j < c->k; j++) {
            int64_t s = t + (int64_t)j * c->dilation - c->pad;
            if (s < 0 || s >= J->t_in)
                memset(dst + (size_t)j * c->c_in, 0, row);
            else
                memcpy(dst + (size_t)j * c->c_in, J->x + (size_t)s * c->c_in, row);
        }
    }
}

/* y (+)= tmp + b, row by row */
static void bias_rows(void *ctx, int ith, int nth)
{
    const struct conv_job *J = ctx;
    int n = J->c->c_out;
    const float *b = J->c->b;
    int64_t t0, t1;
    split(J->t_out, ith, nth, &t0, &t1);
    for (int64_t t = t0; t < t1; t++) {
        float *y = J->y + (size_t)t * n;
        const float *s = J->tmp ? J->tmp + (size_t)t * n : y;
        if (J->accumulate)
            for (int o = 0; o < n; o++)
                y[o] += s[o] + (b ? b[o] : 0.0f);
        else if (b)
            for (int o = 0; o < n; o++)
                y[o] = s[o] + b[o];
    }
}

int omni_conv1d_run(struct tpool *tp, const struct omni_conv1d *c, const float *x,
                    int64_t t_in, float *scratch, float *y, bool accumulate)
{
    int64_t t_out = omni_conv1d_out_len(c, t_in);
    if (c->c_in <= 0 || c->c_out <= 0 || c->k <= 0 || c->dilation <= 0 || c->pad < 0 ||
        t_in <= 0 || t_out <= 0)
        return OMNI_ERR_ARG;
    struct conv_job J = { .c = c, .x = x, .t_in = t_in, .t_out = t_out, .y = y,
                          .accumulate = accumulate };
    const float *in = x;
    size_t n_col = col_floats(c, t_out);
    if (n_col) {
        J.col = scratch;
        run_on(tp, im2col_rows, &J);
        in = scratch;
    }
    struct omni_tensor w = { .type = GGML_TYPE_F32, .ne = { (int64_t)c->k * c->c_in, c->c_out },
                             .data = c->w };
    /* accumulating: the product goes to scratch after the im2col, then y += it + b */
    J.tmp = accumulate ? scratch + n_col : NULL;
    omni_matmul(tp, &w, in, t_out, accumulate ? J.tmp : y);
    if (c->b || accumulate)
        run_on(tp, bias_rows, &J);
    return 0;
}

// ---- ConvTranspose1d ----

struct convt_job {
    const struct omni_conv_t1d *c;
    const float *z;     /* [t_in][k][c_out] */
    int64_t t_in, t_out;
    float *y;
};

/* y[t] = b + sum over input steps i and taps j with i*stride + j - pad = t of z[i][j] */
static void convt_gather(void *ctx, int ith, int nth)
{
    const struct convt_job *J = ctx;
    const struct omni_conv_t1d *c = J->c;
    int n = c->c_out, s = c->stride;
    int64_t t0, t1;
    split(J->t_out, ith, nth, &t0, &t1);
    for (int64_t t = t0; t < t1; t++) {
        float *y = J->y + (size_t)t * n;
        if (c->b)
            memcpy(y, c->b, (size_t)n * sizeof(float));
        else
            memset(y, 0, (size_t)n * sizeof(float));
        int64_t u = t + c->pad;           /* = i*stride + j */
        int64_t i_hi = u / s;             /* j = u - i*s >= 0 */
        int64_t i_lo = u - (c->k - 1) <= 0 ? 0 : (u - (c->k - 1) + s - 1) / s;  /* j < k */
        if (i_hi >= J->t_in)
            i_hi = J->t_in - 1;
        for (int64_t i = i_lo; i <= i_hi; i++) {
            const float *z = J->z + ((size_t)i * c->k + (size_t)(u - i * s)) * n;
            for (int o = 0; o < n; o++)
                y[o] += z[o];
        }
    }
}

int omni_conv_t1d_run(struct tpool *tp, const struct omni_conv_t1d *c, const float *x,
                      int64_t t_in, float *scratch, float *y)
{
    int64_t t_out = omni_conv_t1d_out_len(c, t_in);
    if (c->c_in <= 0 || c->c_out <= 0 || c->k <= 0 || c->stride <= 0 || c->pad < 0 ||
        t_in <= 0 || t_out <= 0)
        return OMNI_ERR_ARG;
    struct omni_tensor w = { .type = GGML_TYPE_F32, .ne = { c->c_in, (int64_t)c->k * c->c_out },
                             .data = c->w };
    omni_matmul(tp, &w, x, t_in, scratch);
    struct convt_job J = { .c = c, .z = scratch, .t_in = t_in, .t_out = t_out, .y = y };
    run_on(tp, convt_gather, &J);
    return 0;
}

// ---- Snake ----

struct snake_job {
    const float *x, *alpha;
    float *y;
    int64_t t;
    int c;
};

/* sin(y)^2 without libm's sinf (a fifth of the DAC decoder's time with
 * it): the square does not care about the sign, so y is reduced by a
 * multiple of pi (Cody-Waite, pi in three parts) to [-pi/2, pi/2] and the
 * odd Taylor polynomial to degree 11 (error < 6e-8 there) does the rest.
 * Past |y| = 8192 the reduction loses bits: libm takes those. */
static inline float sin2f(float y)
{
    if (!(fabsf(y) <= 8192.0f)) {
        float s = sinf(y);
        return s * s;
    }
    float k = rintf(y * 0.318309886183790672f);
    float r = ((y - k * 3.140625f) - k * 9.67502593994140625e-4f) - k * 1.509957990978376432e-7f;
    float r2 = r * r;
    float p = -2.5052108385441718775e-8f;
    p = p * r2 + 2.7557319223985890653e-6f;
    p = p * r2 - 1.9841269841269841270e-4f;
    p = p * r2 + 8.3333333333333333333e-3f;
    p = p * r2 - 1.6666666666666666667e-1f;
    float s = r + r * r2 * p;
    return s * s;
}

static void snake_rows(void *ctx, int ith, int nth)
{
    const struct snake_job *J = ctx;
    int64_t t0, t1;
    split(J->t, ith, nth, &t0, &t1);
    for (int64_t t = t0; t < t1; t++) {
        const float *x = J->x + (size_t)t * J->c;
        float *y = J->y + (size_t)t * J->c;
        for (int i = 0; i < J->c; i++) {
            /* as the reference: x + (alpha + 1e-9)^-1 * sin(alpha x)^2 */
            float a = J->alpha[i];
            y[i] = x[i] + (1.0f / (a + 1e-9f)) * sin2f(a * x[i]);
        }
    }
}

void omni_snake(struct tpool *tp, const float *x, int64_t t, int c, const float *alpha,
                float *y)
{
    struct snake_job J = { .x = x, .alpha = alpha, .y = y, .t = t, .c = c };
    run_on(tp, snake_rows, &J);
}
