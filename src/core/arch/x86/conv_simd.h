/* conv_simd.h - conv_x86.h's kernels written once over GCC vector
 * extensions of VW floats, included by conv_sse.c (VW 4), conv_avx2.c (VW 8)
 * and conv_avx512.c (VW 16) after their `#pragma GCC target`. The includer
 * defines
 *   VW            lanes per vector
 *   MR            rows per register tile (MR x 2 accumulators)
 *   ANY(m)        nonzero when any lane of the vi mask m is set
 *   CONV_NAME, CONV_TABLE   the table's name and symbol
 *
 * The GEMM (conv_x86.h): a register tile of MR rows x 2 vectors of output
 * channels; each k step loads two weight vectors and broadcasts one A value
 * per row straight from the activations (tap j of row r is
 * A[r*lda + tap_off[j] + i]: the rows of a tap are contiguous, so no im2col
 * is built). Blocking: output channels in groups of NC whose K slab of KC
 * weights stays in L2 while every row tile of the thread's range runs
 * against it; the partial sums go through C between slabs, the first slab
 * adds bias / residual, the last applies Snake. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "conv_x86.h"
#include "src/core/arch/x86/vec_simd.h"

#define NR (2 * VW)              /* columns per register tile */
#define PK OMNI_CONV_NR          /* packed group width */
#define KC 1024                  /* most K values per slab (an A tile of MR rows: MR * 4 KB) */
#define SLAB_BYTES (384 * 1024)  /* a group's slab of weights in L2 */

// ---- Snake ----

/* sin(y)^2: y reduced by a multiple of pi (Cody-Waite, pi in three parts;
 * the square ignores the sign) to [-pi/2, pi/2], then the odd Taylor
 * polynomial to degree 11 (error < 6e-8 there). Past |y| = 8192 the
 * reduction loses bits: libm takes those lanes. */
static __attribute__((noinline)) vf vsin2_slow(vf y, vf out, vi bad)
{
    for (int l = 0; l < VW; l++)
        if (bad[l]) {
            const float v = sinf(y[l]);
            out[l] = v * v;
        }
    return out;
}

static inline vf vsin2(vf y)
{
    const vf ay = (vf)((vi)y & 0x7fffffff);
    const vi bad = ~(ay <= 8192.0f);   /* NaN too */
    const float magic = 12582912.0f;   /* 1.5 * 2^23: adding it rounds to an integer */
    const vf k = (y * 0.318309886183790672f + magic) - magic;
    const vf r = ((y - k * 3.140625f) - k * 9.67502593994140625e-4f) - k * 1.509957990978376432e-7f;
    const vf r2 = r * r;
    vf p = splat(-2.5052108385441718775e-8f);
    p = p * r2 + 2.7557319223985890653e-6f;
    p = p * r2 - 1.9841269841269841270e-4f;
    p = p * r2 + 8.3333333333333333333e-3f;
    p = p * r2 - 1.6666666666666666667e-1f;
    const vf s = r + r * r2 * p;
    const vf out = s * s;
    if (__builtin_expect(ANY(bad), 0))
        return vsin2_slow(y, out, bad);
    return out;
}

/* x + sin(a x)^2 / (a + 1e-9), inv = 1 / (a + 1e-9) */
static inline vf vsnake(vf x, vf a, vf inv) { return x + inv * vsin2(a * x); }

static void snake_simd(const float *x, int64_t ldx, int64_t t, int c, const float *alpha,
                       float *y, int64_t ldy)
{
    enum { CB = 256 };
    float inv[CB];
    for (int c0 = 0; c0 < c; c0 += CB) {
        const int cn = c - c0 < CB ? c - c0 : CB;
        const float *al = alpha + c0;
        for (int i = 0; i < cn; i++)
            inv[i] = 1.0f / (al[i] + 1e-9f);
        for (int64_t r = 0; r < t; r++) {
            const float *xr = x + r * ldx + c0;
            float *yr = y + r * ldy + c0;
            int i = 0;
            for (; i + VW <= cn; i += VW)
                st(yr + i, vsnake(ld(xr + i), ld(al + i), ld(inv + i)));
            if (i < cn)
                st_part(yr + i, vsnake(ld_part(xr + i, cn - i), ld_part(al + i, cn - i),
                                       ld_part(inv + i, cn - i)), cn - i);
        }
    }
}

// ---- GEMM ----

struct seg {
    int64_t off;   /* A offset of the segment's first value */
    int len;
};

/* Columns [n0, n0 + nc) of one tile row: acc + init (first slab) or + C
 * (later slabs), Snake on the last slab, stored. */
static inline __attribute__((always_inline)) void tile_store(const struct omni_conv_gemm *g,
                                                             int64_t row, int n0, int nc,
                                                             vf a0, vf a1, int first, int last,
                                                             const float *inv)
{
    float *c = g->c + row * g->ldc + n0;
    vf v[2] = { a0, a1 };
    for (int h = 0; h < 2; h++) {
        const int k = nc - h * VW;
        if (k <= 0)
            break;
        const int o = n0 + h * VW;
        vf acc = v[h];
        if (k >= VW) {
            if (first) {
                if (g->bias)
                    acc += ld(g->bias + o);
                if (g->resid)
                    acc += ld(g->resid + row * g->ldr + o);
            } else {
                acc += ld(c + h * VW);
            }
            if (last && g->snake_out)
                acc = vsnake(acc, ld(g->snake_out + o), ld(inv + h * VW));
            st(c + h * VW, acc);
        } else {
            if (first) {
                if (g->bias)
                    acc += ld_part(g->bias + o, k);
                if (g->resid)
                    acc += ld_part(g->resid + row * g->ldr + o, k);
            } else {
                acc += ld_part(c + h * VW, k);
            }
            if (last && g->snake_out)
                acc = vsnake(acc, ld_part(g->snake_out + o, k), ld_part(inv + h * VW, k));
            st_part(c + h * VW, acc, k);
        }
    }
}

/* mr (constant after inlining) rows x NR columns over the slab's segments.
 * The accumulators are named variables (ROWS below), not an array, so that
 * they stay in registers. Every SUB k steps they are added into partial
 * sums in L1 and restart from zero: short chains of float additions (the
 * rounding error of a chain grows with its length), for a few loads and
 * stores every SUB * 2 * MR multiply-adds. */
#define SUB 128
#define ACC_DECL(r) vf c##r##0 = { 0 }, c##r##1 = { 0 };
#define ACC_FMA(r) \
    if (r < mr) { \
        const vf x = SPLAT(a[r * lda + i]); \
        c##r##0 += x * b0; \
        c##r##1 += x * b1; \
    }
#define ACC_FLUSH(r) \
    if (r < mr) { \
        if (flushed) { \
            c##r##0 += ld(part + (2 * r) * VW); \
            c##r##1 += ld(part + (2 * r + 1) * VW); \
        } \
        st(part + (2 * r) * VW, c##r##0); \
        st(part + (2 * r + 1) * VW, c##r##1); \
        c##r##0 = c##r##1 = (vf){ 0 }; \
    }
#define ACC_STORE(r) \
    if (r < mr) { \
        if (flushed) { \
            c##r##0 += ld(part + (2 * r) * VW); \
            c##r##1 += ld(part + (2 * r + 1) * VW); \
        } \
        tile_store(g, m + r, n0, nc, c##r##0, c##r##1, first, last, inv); \
    }

static inline __attribute__((always_inline)) void tile(const int mr,
                                                       const struct omni_conv_gemm *g,
                                                       int64_t m, int n0, int nc,
                                                       const struct seg *sg, int n_seg,
                                                       const float *b, int first, int last,
                                                       const float *inv)
{
    ROWS(ACC_DECL)
    float part[2 * MR * VW];
    int flushed = 0, left = SUB;
    const int64_t lda = g->lda;
    const float *arow = g->a + m * lda;
    for (int s = 0; s < n_seg; s++) {
        const float *a = arow + sg[s].off;
        const int len = sg[s].len;
        for (int i = 0; i < len;) {
            const int e = len - i < left ? len : i + left;
            left -= e - i;
            for (; i < e; i++, b += PK) {
                const vf b0 = ld(b), b1 = ld(b + VW);
                ROWS(ACC_FMA)
            }
            if (left == 0) {
                ROWS(ACC_FLUSH)
                flushed = 1;
                left = SUB;
            }
        }
    }
    ROWS(ACC_STORE)
}

#define TILE_CASE(R) \
    case R: \
        tile(R, g, m, n, nc, sg, n_seg, b, first, last, iv); \
        break;

/* A few output channels (DAC's conv_out has one): per row and channel a
 * dot product over the taps' contiguous rows, the channel's weights
 * gathered once from the packed groups, instead of a 32-wide tile of
 * mostly zero columns. */
#define NARROW_MAX_N 4
#define NARROW_MAX_K 8192

static void gemm_narrow(const struct omni_conv_gemm *g, int64_t m0, int64_t m1, int n0, int n1)
{
    const int ci = g->c_in;
    const int64_t K = (int64_t)g->n_taps * ci;
    float w[NARROW_MAX_K];
    for (int o = n0; o < n1; o++) {
        const float *b = g->b + (size_t)(o / PK) * (size_t)K * PK + o % PK;
        for (int64_t k = 0; k < K; k++)
            w[k] = b[k * PK];
        const float inv = g->snake_out ? 1.0f / (g->snake_out[o] + 1e-9f) : 0.0f;
        for (int64_t r = m0; r < m1; r++) {
            vf acc = { 0 };
            for (int j = 0; j < g->n_taps; j++) {
                const float *a = g->a + r * g->lda + g->tap_off[j], *wj = w + (size_t)j * ci;
                int i = 0;
                for (; i + VW <= ci; i += VW)
                    acc += ld(a + i) * ld(wj + i);
                if (i < ci)
                    acc += ld_part(a + i, ci - i) * ld_part(wj + i, ci - i);
            }
            float sum = 0.0f;
            for (int l = 0; l < VW; l++)
                sum += acc[l];
            if (g->bias)
                sum += g->bias[o];
            if (g->resid)
                sum += g->resid[r * g->ldr + o];
            if (g->snake_out)
                sum = vsnake(splat(sum), splat(g->snake_out[o]), splat(inv))[0];
            g->c[r * g->ldc + o] = sum;
        }
    }
}

static void gemm_simd(const struct omni_conv_gemm *g, int64_t m0, int64_t m1, int n0, int n1)
{
    if (g->n <= NARROW_MAX_N && (int64_t)g->n_taps * g->c_in <= NARROW_MAX_K) {
        gemm_narrow(g, m0, m1, n0, n1);
        return;
    }
    const int64_t K = (int64_t)g->n_taps * g->c_in;
    /* columns per group: the slab (KC x NC floats) in L2 */
    int NCg = SLAB_BYTES / (KC * 4) / PK * PK;
    if (NCg < PK)
        NCg = PK;
    /* slabs of equal size, at most KC */
    const int64_t kc = (K + (K + KC - 1) / KC - 1) / ((K + KC - 1) / KC);
    float inv[SLAB_BYTES / (KC * 4) + PK];
    for (int g0 = n0; g0 < n1; g0 += NCg) {
        const int g1 = g0 + NCg < n1 ? g0 + NCg : n1;
        if (g->snake_out)
            for (int o = g0; o < g1; o++)
                inv[o - g0] = 1.0f / (g->snake_out[o] + 1e-9f);
        for (int64_t k0 = 0; k0 < K; k0 += kc) {
            const int64_t k1 = k0 + kc < K ? k0 + kc : K;
            struct seg sg[OMNI_CONV_MAX_TAPS];   /* a slab meets each tap once at most */
            int n_seg = 0;
            for (int64_t kk = k0; kk < k1;) {
                const int j = (int)(kk / g->c_in), i = (int)(kk % g->c_in);
                const int len = (int)(k1 - kk < g->c_in - i ? k1 - kk : g->c_in - i);
                sg[n_seg++] = (struct seg){ g->tap_off[j] + i, len };
                kk += len;
            }
            const int first = k0 == 0, last = k1 == K;
            for (int64_t m = m0; m < m1; m += MR) {
                const int mr = m1 - m < MR ? (int)(m1 - m) : MR;
                for (int n = g0; n < g1; n += NR) {
                    const int nc = g1 - n < NR ? g1 - n : NR;
                    const float *b = g->b + (size_t)(n / PK) * (size_t)K * PK + (size_t)k0 * PK +
                                     n % PK;
                    const float *iv = inv + (n - g0);
                    switch (mr) {
                        TILE_CASES
                    }
                }
            }
        }
    }
}

const struct omni_conv_kernels CONV_TABLE = {
    .name = CONV_NAME,
    .mr = MR,
    .gemm = gemm_simd,
    .snake = snake_simd,
};
