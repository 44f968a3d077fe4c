/* conv1d.c - Conv1d / ConvTranspose1d as direct-convolution GEMMs, and
 * Snake, on time-major rows.
 *
 * The products run on the kernels of the CPU level in use
 * (src/core/arch/x86/conv_x86.h: conv_sse.c, conv_avx2.c, conv_avx512.c);
 * this file packs weights, makes the padded (and Snake'd) copies of inputs
 * and splits rows, or output channels when there are few rows, across the
 * pool. */
#include "src/core/conv1d.h"

#include "src/core/arch/x86/conv_x86.h"
#include "src/core/cpu.h"
#include "src/core/omni.h"
#include "src/core/threadpool.h"

#include <string.h>

#define PK OMNI_CONV_NR
#define MAX_PHASES 64

static const struct omni_conv_kernels *kernels(void)
{
#if defined(__x86_64__)
    const int level = omni_cpu_level();
    if (level >= OMNI_CPU_AVX512)
        return &omni_conv_kernels_avx512;
    if (level >= OMNI_CPU_AVX2)
        return &omni_conv_kernels_avx2;
#endif
    return &omni_conv_kernels_sse;
}

static size_t groups(int c_out) { return ((size_t)c_out + PK - 1) / PK; }

size_t omni_conv1d_packed_floats(int c_out, int c_in, int k)
{
    return groups(c_out) * PK * (size_t)k * c_in;
}

/* taps per phase of a transposed conv */
static int t_taps(int k, int stride) { return (k + stride - 1) / stride; }

size_t omni_conv_t1d_packed_floats(int c_in, int c_out, int k, int stride)
{
    return (size_t)stride * omni_conv1d_packed_floats(c_out, c_in, t_taps(k, stride));
}

void omni_conv1d_pack(const float *w_torch, int c_out, int c_in, int k, float *out)
{
    const size_t K = (size_t)k * c_in;
    memset(out, 0, omni_conv1d_packed_floats(c_out, c_in, k) * sizeof(float));
    for (int j = 0; j < k; j++)
        for (int i = 0; i < c_in; i++)   /* o innermost: the writes run along a group */
            for (int o = 0; o < c_out; o++)
                out[((size_t)(o / PK) * K + (size_t)j * c_in + i) * PK + o % PK] =
                    w_torch[((size_t)o * c_in + i) * k + j];
}

/* Phase p (outputs u = t + pad with u mod stride = p, i = u div stride)
 * reads x[i - (T-1) + m] with torch tap j = p + (T-1-m)*stride, m < T. */
void omni_conv_t1d_pack(const float *w_torch, int c_in, int c_out, int k, int stride,
                        float *out)
{
    const int T = t_taps(k, stride);
    const size_t K = (size_t)T * c_in, per = omni_conv1d_packed_floats(c_out, c_in, T);
    memset(out, 0, (size_t)stride * per * sizeof(float));
    for (int p = 0; p < stride; p++)
        for (int m = 0; m < T; m++) {
            const int j = p + (T - 1 - m) * stride;
            if (j >= k)
                continue;
            for (int i = 0; i < c_in; i++)   /* o innermost: the writes run along a group */
                for (int o = 0; o < c_out; o++)
                    out[p * per + ((size_t)(o / PK) * K + (size_t)m * c_in + i) * PK + o % PK] =
                        w_torch[((size_t)i * c_out + o) * k + j];
        }
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

size_t omni_conv1d_scratch(const struct omni_conv1d *c, int64_t t_in, bool accumulate)
{
    (void)accumulate;
    if (omni_conv1d_out_len(c, t_in) <= 0 || c->pad == 0)
        return 0;
    return (size_t)(t_in + 2 * (int64_t)c->pad) * c->c_in;
}

/* floor division for possibly negative a */
static int64_t fdiv(int64_t a, int64_t b) { return a >= 0 ? a / b : -((-a + b - 1) / b); }

void omni_conv_t1d_reads(const struct omni_conv_t1d *c, int64_t o0, int64_t o1, int64_t *s0,
                         int64_t *s1)
{
    const int T = t_taps(c->k, c->stride);
    *s0 = fdiv(o0 + c->pad, c->stride) - (T - 1);
    *s1 = fdiv(o1 - 1 + c->pad, c->stride) + 1;
}

size_t omni_conv_t1d_scratch(const struct omni_conv_t1d *c, int64_t t_in)
{
    int64_t t_out = omni_conv_t1d_out_len(c, t_in), s0, s1;
    if (t_out <= 0)
        return 0;
    omni_conv_t1d_reads(c, 0, t_out, &s0, &s1);
    return (size_t)(s1 - s0) * c->c_in;
}

/* [i0, i1) of n split into nth near-equal parts, in units of q */
static void split(int64_t n, int64_t q, int ith, int nth, int64_t *i0, int64_t *i1)
{
    int64_t units = (n + q - 1) / q;
    *i0 = units * ith / nth * q;
    *i1 = units * (ith + 1) / nth * q;
    if (*i0 > n)
        *i0 = n;
    if (*i1 > n)
        *i1 = n;
}

static void run_on(struct tpool *tp, tpool_fn fn, void *ctx)
{
    if (tp)
        tpool_run(tp, fn, ctx);
    else
        fn(ctx, 0, 1);
}

// ---- row passes: padded / Snake'd copies, Snake ----

struct rows_job {
    const struct omni_conv_kernels *K;
    const float *x;          /* source rows [0, t_src) */
    int64_t t_src, lead;     /* dst row r = source row r - lead (zero outside) */
    int64_t t_dst;
    int c;
    const float *alpha;      /* Snake, or NULL: a copy */
    float *y;
};

static void rows_fn(void *ctx, int ith, int nth)
{
    const struct rows_job *J = ctx;
    int64_t r0, r1;
    split(J->t_dst, 1, ith, nth, &r0, &r1);
    const size_t row = (size_t)J->c * sizeof(float);
    /* zero rows ahead, then the run of source rows, then zero rows after */
    int64_t a = J->lead, b = J->lead + J->t_src;
    for (int64_t r = r0; r < r1 && r < a; r++)
        memset(J->y + (size_t)r * J->c, 0, row);
    int64_t s0 = r0 > a ? r0 : a, s1 = r1 < b ? r1 : b;
    if (s1 > s0) {
        const float *src = J->x + (size_t)(s0 - J->lead) * J->c;
        float *dst = J->y + (size_t)s0 * J->c;
        if (J->alpha)
            J->K->snake(src, J->c, s1 - s0, J->c, J->alpha, dst, J->c);
        else if (dst != src)
            memcpy(dst, src, (size_t)(s1 - s0) * row);
    }
    for (int64_t r = (r0 > b ? r0 : b); r < r1; r++)
        memset(J->y + (size_t)r * J->c, 0, row);
}

static void rows_pass(struct tpool *tp, const struct omni_conv_kernels *K, const float *x,
                      int64_t t_src, int64_t lead, int64_t t_dst, int c, const float *alpha,
                      float *y)
{
    struct rows_job J = { .K = K, .x = x, .t_src = t_src, .lead = lead, .t_dst = t_dst, .c = c,
                          .alpha = alpha, .y = y };
    run_on(tp, rows_fn, &J);
}

void omni_snake(struct tpool *tp, const float *x, int64_t t, int c, const float *alpha,
                float *y)
{
    rows_pass(tp, kernels(), x, t, 0, t, c, alpha, y);
}

// ---- products ----

struct gemm_job {
    const struct omni_conv_kernels *K;
    struct omni_conv_gemm g[MAX_PHASES];
    int n_g;
};

/* Thread ith's rows and columns of an m x n product: rows in tiles when
 * there are enough of them, else groups of output channels. */
static void share(int64_t m, int n, int mr, int ith, int nth, int64_t *m0, int64_t *m1, int *n0,
                  int *n1)
{
    int ng = (int)groups(n);
    int nn = 1;
    while (nn < nth && nn < ng && m < (int64_t)(nth / nn) * 4 * mr)
        nn *= 2;
    if (nn > nth)
        nn = nth;
    if (nn > ng)
        nn = ng;
    int nm = nth / nn;
    if (ith >= nm * nn) {   /* nth not a multiple: this thread idles */
        *m0 = *m1 = 0;
        *n0 = *n1 = 0;
        return;
    }
    split(m, mr, ith / nn, nm, m0, m1);
    int64_t g0, g1;
    split(ng, 1, ith % nn, nn, &g0, &g1);
    *n0 = (int)g0 * PK;
    *n1 = (int)(g1 * PK < n ? g1 * PK : n);
}

static void gemm_fn(void *ctx, int ith, int nth)
{
    const struct gemm_job *J = ctx;
    for (int p = 0; p < J->n_g; p++) {
        const struct omni_conv_gemm *g = &J->g[p];
        int64_t m0, m1;
        int n0, n1;
        share(g->m, g->n, J->K->mr, ith, nth, &m0, &m1, &n0, &n1);
        if (m1 > m0 && n1 > n0)
            J->K->gemm(g, m0, m1, n0, n1);
    }
}

int omni_conv1d_valid(struct tpool *tp, const struct omni_conv1d *c, const float *x,
                      int64_t t_in, float *scratch, float *y, const struct omni_conv_fuse *f)
{
    const int64_t reach = (int64_t)c->dilation * (c->k - 1), t_out = t_in - reach;
    if (c->c_in <= 0 || c->c_out <= 0 || c->k <= 0 || c->k > OMNI_CONV_MAX_TAPS ||
        c->dilation <= 0 || t_in <= 0 || t_out <= 0)
        return OMNI_ERR_ARG;
    const struct omni_conv_kernels *K = kernels();
    const struct omni_conv_fuse none = { 0 };
    if (!f)
        f = &none;
    if (f->snake_in) {
        rows_pass(tp, K, x, t_in, 0, t_in, c->c_in, f->snake_in, scratch);
        x = scratch;
    }
    int64_t off[OMNI_CONV_MAX_TAPS];
    for (int j = 0; j < c->k; j++)
        off[j] = (int64_t)j * c->dilation * c->c_in;
    struct gemm_job J = { .K = K, .n_g = 1 };
    J.g[0] = (struct omni_conv_gemm){ .a = x, .lda = c->c_in, .m = t_out, .tap_off = off,
                                      .n_taps = c->k, .c_in = c->c_in, .b = c->w, .n = c->c_out,
                                      .c = y, .ldc = c->c_out, .bias = c->b, .resid = f->resid,
                                      .ldr = c->c_out, .snake_out = f->snake_out };
    run_on(tp, gemm_fn, &J);
    return 0;
}

int omni_conv1d_run(struct tpool *tp, const struct omni_conv1d *c, const float *x,
                    int64_t t_in, float *scratch, float *y, bool accumulate)
{
    int64_t t_out = omni_conv1d_out_len(c, t_in);
    if (c->c_in <= 0 || c->c_out <= 0 || c->k <= 0 || c->dilation <= 0 || c->pad < 0 ||
        t_in <= 0 || t_out <= 0)
        return OMNI_ERR_ARG;
    const int64_t t_p = t_in + 2 * (int64_t)c->pad;
    if (c->pad > 0) {
        rows_pass(tp, kernels(), x, t_in, c->pad, t_p, c->c_in, NULL, scratch);
        x = scratch;
    }
    struct omni_conv_fuse f = { .resid = accumulate ? y : NULL };
    return omni_conv1d_valid(tp, c, x, t_p, NULL, y, &f);
}

int omni_conv_t1d_part(struct tpool *tp, const struct omni_conv_t1d *c, const float *x,
                       int64_t x0, int64_t n, int64_t o0, int64_t o1, float *scratch, float *y,
                       const struct omni_conv_fuse *f)
{
    const int s = c->stride, T = c->stride > 0 ? t_taps(c->k, c->stride) : 0;
    int64_t s0, s1;
    if (c->c_in <= 0 || c->c_out <= 0 || c->k <= 0 || s <= 0 || s > MAX_PHASES ||
        T > OMNI_CONV_MAX_TAPS || c->pad < 0 || o1 <= o0 || n <= 0)
        return OMNI_ERR_ARG;
    omni_conv_t1d_reads(c, o0, o1, &s0, &s1);
    if (s0 < x0 || s1 > x0 + n || (f && f->resid))
        return OMNI_ERR_ARG;
    const struct omni_conv_kernels *K = kernels();
    if (f && f->snake_in) {
        rows_pass(tp, K, x, n, 0, n, c->c_in, f->snake_in, scratch);
        x = scratch;
    }
    int64_t off[OMNI_CONV_MAX_TAPS];
    for (int j = 0; j < T; j++)
        off[j] = (int64_t)j * c->c_in;
    const size_t per = omni_conv1d_packed_floats(c->c_out, c->c_in, T);
    struct gemm_job J = { .K = K };
    for (int p = 0; p < s; p++) {
        /* outputs t = i*s + p - pad in [o0, o1): i in [i0, i1) */
        int64_t i0 = fdiv(o0 + c->pad - p + s - 1, s), i1 = fdiv(o1 - 1 + c->pad - p, s) + 1;
        if (i1 <= i0)
            continue;
        int64_t t0 = i0 * s + p - c->pad;
        J.g[J.n_g++] = (struct omni_conv_gemm){
            .a = x + (size_t)(i0 - (T - 1) - x0) * c->c_in, .lda = c->c_in, .m = i1 - i0,
            .tap_off = off, .n_taps = T, .c_in = c->c_in, .b = c->w + (size_t)p * per,
            .n = c->c_out, .c = y + (size_t)(t0 - o0) * c->c_out, .ldc = (int64_t)s * c->c_out,
            .bias = c->b, .snake_out = f ? f->snake_out : NULL };
    }
    run_on(tp, gemm_fn, &J);
    return 0;
}

int omni_conv_t1d_run(struct tpool *tp, const struct omni_conv_t1d *c, const float *x,
                      int64_t t_in, float *scratch, float *y)
{
    int64_t t_out = omni_conv_t1d_out_len(c, t_in), s0, s1;
    if (c->c_in <= 0 || c->c_out <= 0 || c->k <= 0 || c->stride <= 0 || c->pad < 0 ||
        t_in <= 0 || t_out <= 0)
        return OMNI_ERR_ARG;
    omni_conv_t1d_reads(c, 0, t_out, &s0, &s1);
    /* the input with zero rows for steps s0 .. -1 and t_in .. s1 - 1 */
    rows_pass(tp, kernels(), x, t_in, -s0, s1 - s0, c->c_in, NULL, scratch);
    return omni_conv_t1d_part(tp, c, scratch, s0, s1 - s0, 0, t_out, NULL, y, NULL);
}
