/* ops_simd.h - the compute layer's ops (src/core/ops.h) written once over
 * GCC vector extensions of VW floats, included by one file per ISA level
 * (ops_avx2.c: VW 8, ops_avx512.c: VW 16) after its `#pragma GCC target`,
 * so that each copy is compiled for that level only (ops_sse.c: VW 4, the
 * x86-64-v2 floor). The includer defines
 *   VW                  lanes per vector
 *   LOAD_F16(p)         VW halves at p -> vf
 *   STORE_F16(p, v)     vf -> VW halves at p (round to nearest even)
 *   LOAD_BF16(p)        VW bfloat16 at p -> vf
 *   OPS_NAME, OPS_FILL  the table's name and its fill function
 * The exp and erf polynomials are ops_ref.c's, lane by lane; tails go
 * through the same vector code on a zero-padded copy. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "src/core/ops_impl.h"

#include "src/core/arch/x86/vec_simd.h"
static inline float hsum(vf v)
{
    float s = 0.0f;
    for (int l = 0; l < VW; l++)
        s += v[l];
    return s;
}
/* a where mask (all ones per lane), b elsewhere */
static inline vf sel(vi m, vf a, vf b) { return (vf)((m & (vi)a) | (~m & (vi)b)); }

static inline vf ld_f16_part(const uint16_t *p, int k)
{
    uint16_t buf[VW] = { 0 };
    memcpy(buf, p, (size_t)k * 2);
    return LOAD_F16(buf);
}
static inline vf ld_bf16_part(const uint16_t *p, int k)
{
    uint16_t buf[VW] = { 0 };
    memcpy(buf, p, (size_t)k * 2);
    return LOAD_BF16(buf);
}

/* omni_ref_expf1 lane by lane: e^x = 2^n e^r, n = round(x / ln 2) */
static inline vf vexp(vf x)
{
    const vf x_max = splat(88.0f), x_min = splat(-87.3f);
    x = sel(x > x_max, x_max, x);
    x = sel(x < x_min, x_min, x);
    const float magic = 12582912.0f;
    const vf t = x * 1.44269504088896341f + magic;
    const vf n = t - magic;
    const vf r = x - n * 0.693359375f + n * 2.12194440e-4f;
    vf p = 1.9875691500e-4f * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * r * r + r + 1.0f;
    return p * (vf)(((vi)t - 0x4b400000 + 127) << 23);
}

/* omni_ref_gelu_erf1 lane by lane */
static inline vf vgelu_erf(vf x)
{
    const vi sign = (vi){ 0 } + INT32_MIN; /* (not splat(-0.0f): 0.0f + -0.0f is +0) */
    const vf ax = (vf)((vi)x & ~sign);
    const vf z = ax * 0.70710678118654752f;
    const vf t = 1.0f / (1.0f + 0.3275911f * z);
    const vf e = vexp(-z * z);
    const vf p = t * (0.254829592f + t * (-0.284496736f + t * (1.421413741f +
                 t * (-1.453152027f + t * 1.061405429f))));
    const vf erf_abs = 1.0f - p * e;
    const vf erf = (vf)((vi)erf_abs | ((vi)x & sign));
    return 0.5f * x * (1.0f + erf);
}

static inline vf vgelu_tanh(vf x)
{
    return x / (1.0f + vexp(-1.5957691216057308f * (x + 0.044715f * x * x * x)));
}

static inline vf vsilu(vf x) { return x / (1.0f + vexp(-x)); }

// ---- vectors -----------------------------------------------------------------

static float dot_simd(const float *a, const float *b, int n)
{
    vf s0 = { 0 }, s1 = { 0 };
    int i = 0;
    for (; i + 2 * VW <= n; i += 2 * VW) {
        s0 += ld(a + i) * ld(b + i);
        s1 += ld(a + i + VW) * ld(b + i + VW);
    }
    for (; i + VW <= n; i += VW)
        s0 += ld(a + i) * ld(b + i);
    if (i < n)
        s1 += ld_part(a + i, n - i) * ld_part(b + i, n - i);
    return hsum(s0 + s1);
}

static void axpy_simd(float *y, float a, const float *x, int n)
{
    const vf va = splat(a);
    int i = 0;
    for (; i + VW <= n; i += VW)
        st(y + i, ld(y + i) + va * ld(x + i));
    if (i < n)
        st_part(y + i, ld_part(y + i, n - i) + va * ld_part(x + i, n - i), n - i);
}

static void scale_simd(float *y, float a, int n)
{
    const vf va = splat(a);
    int i = 0;
    for (; i + VW <= n; i += VW)
        st(y + i, ld(y + i) * va);
    for (; i < n; i++)
        y[i] *= a;
}

static float dot_f16_simd(const float *a, const uint16_t *b, int n)
{
    vf s0 = { 0 }, s1 = { 0 };
    int i = 0;
    for (; i + 2 * VW <= n; i += 2 * VW) {
        s0 += ld(a + i) * LOAD_F16(b + i);
        s1 += ld(a + i + VW) * LOAD_F16(b + i + VW);
    }
    for (; i + VW <= n; i += VW)
        s0 += ld(a + i) * LOAD_F16(b + i);
    if (i < n)
        s1 += ld_part(a + i, n - i) * ld_f16_part(b + i, n - i);
    return hsum(s0 + s1);
}

static void axpy_f16_simd(float *y, float a, const uint16_t *x, int n)
{
    const vf va = splat(a);
    int i = 0;
    for (; i + VW <= n; i += VW)
        st(y + i, ld(y + i) + va * LOAD_F16(x + i));
    if (i < n)
        st_part(y + i, ld_part(y + i, n - i) + va * ld_f16_part(x + i, n - i), n - i);
}

static float dot_bf16_simd(const float *a, const uint16_t *b, int n)
{
    vf s0 = { 0 }, s1 = { 0 };
    int i = 0;
    for (; i + 2 * VW <= n; i += 2 * VW) {
        s0 += ld(a + i) * LOAD_BF16(b + i);
        s1 += ld(a + i + VW) * LOAD_BF16(b + i + VW);
    }
    for (; i + VW <= n; i += VW)
        s0 += ld(a + i) * LOAD_BF16(b + i);
    if (i < n)
        s1 += ld_part(a + i, n - i) * ld_bf16_part(b + i, n - i);
    return hsum(s0 + s1);
}

static void axpy_bf16_simd(float *y, float a, const uint16_t *x, int n)
{
    const vf va = splat(a);
    int i = 0;
    for (; i + VW <= n; i += VW)
        st(y + i, ld(y + i) + va * LOAD_BF16(x + i));
    if (i < n)
        st_part(y + i, ld_part(y + i, n - i) + va * ld_bf16_part(x + i, n - i), n - i);
}

static void f16_to_f32_simd(const uint16_t *x, float *y, int64_t n)
{
    int64_t i = 0;
    for (; i + VW <= n; i += VW)
        st(y + i, LOAD_F16(x + i));
    if (i < n)
        st_part(y + i, ld_f16_part(x + i, (int)(n - i)), n - i);
}

static void f32_to_f16_simd(const float *x, uint16_t *y, int64_t n)
{
    int64_t i = 0;
    for (; i + VW <= n; i += VW)
        STORE_F16(y + i, ld(x + i));
    if (i < n) {
        uint16_t buf[VW];
        STORE_F16(buf, ld_part(x + i, n - i));
        memcpy(y + i, buf, (size_t)(n - i) * 2);
    }
}

// ---- norms -------------------------------------------------------------------

static void rmsnorm_simd(float *y, const float *x, const float *w, int n, float eps)
{
    vf s0 = { 0 }, s1 = { 0 };
    int i = 0;
    for (; i + 2 * VW <= n; i += 2 * VW) {
        const vf a = ld(x + i), b = ld(x + i + VW);
        s0 += a * a;
        s1 += b * b;
    }
    for (; i + VW <= n; i += VW) {
        const vf a = ld(x + i);
        s0 += a * a;
    }
    double ss = 0.0;
    for (int l = 0; l < VW; l++)
        ss += (double)s0[l] + (double)s1[l];
    for (; i < n; i++)
        ss += (double)x[i] * x[i];
    const float s = (float)(1.0 / sqrt(ss / n + eps));
    const vf vs = splat(s);
    for (i = 0; i + VW <= n; i += VW)
        st(y + i, ld(x + i) * vs * ld(w + i));
    for (; i < n; i++)
        y[i] = x[i] * s * w[i];
}

static void layernorm_simd(float *y, const float *x, const float *w, const float *b, int n, float eps)
{
    vf s = { 0 };
    int i = 0;
    for (; i + VW <= n; i += VW)
        s += ld(x + i);
    double sum = 0.0;
    for (int l = 0; l < VW; l++)
        sum += s[l];
    for (; i < n; i++)
        sum += x[i];
    const float m = (float)(sum / n);
    const vf vm = splat(m);
    vf v = { 0 };
    for (i = 0; i + VW <= n; i += VW) {
        const vf d = ld(x + i) - vm;
        v += d * d;
    }
    double var = 0.0;
    for (int l = 0; l < VW; l++)
        var += v[l];
    for (; i < n; i++)
        var += (double)(x[i] - m) * (x[i] - m);
    const float inv = (float)(1.0 / sqrt(var / n + eps));
    const vf vinv = splat(inv);
    for (i = 0; i + VW <= n; i += VW) {
        vf r = (ld(x + i) - vm) * vinv;
        if (w)
            r *= ld(w + i);
        if (b)
            r += ld(b + i);
        st(y + i, r);
    }
    for (; i < n; i++)
        y[i] = (x[i] - m) * inv * (w ? w[i] : 1.0f) + (b ? b[i] : 0.0f);
}

// ---- RoPE --------------------------------------------------------------------

static void rope_simd(float *v, const float *cos_, const float *sin_, int n_rot, bool neox)
{
    const int half = n_rot / 2;
    int i = 0;
    if (neox) {
        for (; i + VW <= half; i += VW) {
            const vf x0 = ld(v + i), x1 = ld(v + i + half), c = ld(cos_ + i), s = ld(sin_ + i);
            st(v + i, x0 * c - x1 * s);
            st(v + i + half, x0 * s + x1 * c);
        }
        for (; i < half; i++) {
            const float x0 = v[i], x1 = v[i + half];
            v[i] = x0 * cos_[i] - x1 * sin_[i];
            v[i + half] = x0 * sin_[i] + x1 * cos_[i];
        }
        return;
    }
    for (; i < half; i++) { /* interleaved pairs: short, gcc pairs them up */
        const float x0 = v[2 * i], x1 = v[2 * i + 1];
        v[2 * i] = x0 * cos_[i] - x1 * sin_[i];
        v[2 * i + 1] = x0 * sin_[i] + x1 * cos_[i];
    }
}

// ---- elementwise -------------------------------------------------------------

/* y = f(x) over n floats, the tail through a zero-padded vector */
#define MAP1(name, expr)                                                  \
    static void name(float *y, const float *x, int64_t n)                \
    {                                                                     \
        int64_t i = 0;                                                    \
        for (; i + VW <= n; i += VW) {                                    \
            const vf v = ld(x + i);                                       \
            st(y + i, (expr));                                            \
        }                                                                 \
        if (i < n) {                                                      \
            const vf v = ld_part(x + i, n - i);                           \
            st_part(y + i, (expr), n - i);                                \
        }                                                                 \
    }
MAP1(exp_map, vexp(v))
MAP1(gelu_erf_map, vgelu_erf(v))
MAP1(gelu_tanh_map, vgelu_tanh(v))
MAP1(silu_map, vsilu(v))
MAP1(gelu_quick_map, v / (1.0f + vexp(-1.702f * v)))

static void exp_simd(float *y, const float *x, int64_t n) { exp_map(y, x, n); }
static void gelu_erf_simd(float *x, int64_t n) { gelu_erf_map(x, x, n); }
static void gelu_tanh_simd(float *x, int64_t n) { gelu_tanh_map(x, x, n); }
static void silu_simd(float *x, int64_t n) { silu_map(x, x, n); }
static void gelu_quick_simd(float *x, int64_t n) { gelu_quick_map(x, x, n); }

/* up *= f(gate) */
#define GLU(name, fn)                                                         \
    static void name(const float *gate, float *up, int64_t n)                \
    {                                                                         \
        int64_t i = 0;                                                        \
        for (; i + VW <= n; i += VW)                                          \
            st(up + i, ld(up + i) * fn(ld(gate + i)));                        \
        if (i < n)                                                            \
            st_part(up + i, ld_part(up + i, n - i) * fn(ld_part(gate + i, n - i)), n - i); \
    }
GLU(swiglu_simd, vsilu)
GLU(geglu_erf_simd, vgelu_erf)
GLU(geglu_tanh_simd, vgelu_tanh)

static void softcap_simd(float *x, int64_t n, float cap)
{
    const float k = 2.0f / cap;
    int64_t i = 0;
    for (; i + VW <= n; i += VW)
        st(x + i, cap - 2.0f * cap / (vexp(ld(x + i) * k) + 1.0f));
    if (i < n)
        st_part(x + i, cap - 2.0f * cap / (vexp(ld_part(x + i, n - i) * k) + 1.0f), n - i);
}

static float max_simd(const float *x, int64_t n)
{
    vf vm = splat(-INFINITY);
    int64_t i = 0;
    for (; i + VW <= n; i += VW) {
        const vf v = ld(x + i);
        vm = sel(v > vm, v, vm);
    }
    float mx = -INFINITY;
    for (int l = 0; l < VW; l++)
        mx = vm[l] > mx ? vm[l] : mx;
    for (; i < n; i++)
        mx = x[i] > mx ? x[i] : mx;
    return mx;
}

static float exp_shift_sum_simd(float *x, int64_t n, float m)
{
    const vf vmx = splat(m);
    vf vs = { 0 };
    int64_t i = 0;
    for (; i + VW <= n; i += VW) {
        const vf e = vexp(ld(x + i) - vmx);
        st(x + i, e);
        vs += e;
    }
    if (i < n) {
        vf e = vexp(ld_part(x + i, n - i) - vmx);
        for (int64_t l = n - i; l < VW; l++) /* padding lanes out of the sum */
            e[l] = 0.0f;
        st_part(x + i, e, n - i);
        vs += e;
    }
    return hsum(vs);
}

static void softmax_simd(float *x, int64_t n)
{
    vf vm = splat(-INFINITY);
    int64_t i = 0;
    for (; i + VW <= n; i += VW) {
        const vf v = ld(x + i);
        vm = sel(v > vm, v, vm);
    }
    float mx = -INFINITY;
    for (int l = 0; l < VW; l++)
        mx = vm[l] > mx ? vm[l] : mx;
    for (int64_t j = i; j < n; j++)
        mx = x[j] > mx ? x[j] : mx;
    const vf vmx = splat(mx);
    vf vs = { 0 };
    for (i = 0; i + VW <= n; i += VW) {
        const vf e = vexp(ld(x + i) - vmx);
        st(x + i, e);
        vs += e;
    }
    if (i < n) {
        vf e = vexp(ld_part(x + i, n - i) - vmx);
        /* the padding lanes gave e^(0 - mx): keep them out of the sum */
        for (int64_t l = n - i; l < VW; l++)
            e[l] = 0.0f;
        st_part(x + i, e, n - i);
        vs += e;
    }
    const vf inv = splat(1.0f / hsum(vs));
    for (i = 0; i + VW <= n; i += VW)
        st(x + i, ld(x + i) * inv);
    for (; i < n; i++)
        x[i] *= inv[0];
}

// ---- attention ---------------------------------------------------------------

static void attn_scores_simd(float *s, const float *q, const float *const *k, int n, int d, float scale)
{
    for (int i = 0; i < n; i++)
        s[i] = dot_simd(q, k[i], d) * scale;
}

static void attn_scores_f16_simd(float *s, const float *q, const uint16_t *const *k, int n, int d,
                                 float scale)
{
    for (int i = 0; i < n; i++)
        s[i] = dot_f16_simd(q, k[i], d) * scale;
}

/* acc += sum w[i] v[i]: for heads of up to 8 vectors the accumulator stays
 * in registers across the keys instead of being loaded and stored per key */
static void attn_wsum_simd(float *acc, const float *w, const float *const *v, int n, int d)
{
    enum { MAXV = 8 };
    if (d % VW == 0 && d <= MAXV * VW) {
        const int nv = d / VW;
        vf a[MAXV];
        for (int c = 0; c < nv; c++)
            a[c] = ld(acc + c * VW);
        for (int i = 0; i < n; i++) {
            const vf wi = splat(w[i]);
            for (int c = 0; c < nv; c++)
                a[c] += wi * ld(v[i] + c * VW);
        }
        for (int c = 0; c < nv; c++)
            st(acc + c * VW, a[c]);
        return;
    }
    for (int i = 0; i < n; i++)
        axpy_simd(acc, w[i], v[i], d);
}

static void attn_wsum_f16_simd(float *acc, const float *w, const uint16_t *const *v, int n, int d)
{
    enum { MAXV = 8 };
    if (d % VW == 0 && d <= MAXV * VW) {
        const int nv = d / VW;
        vf a[MAXV];
        for (int c = 0; c < nv; c++)
            a[c] = ld(acc + c * VW);
        for (int i = 0; i < n; i++) {
            const vf wi = splat(w[i]);
            for (int c = 0; c < nv; c++)
                a[c] += wi * LOAD_F16(v[i] + c * VW);
        }
        for (int c = 0; c < nv; c++)
            st(acc + c * VW, a[c]);
        return;
    }
    for (int i = 0; i < n; i++)
        axpy_f16_simd(acc, w[i], v[i], d);
}

// ---- decode attention: online softmax over F16 rows --------------------------

/* Lane permutations as constant index lists for __builtin_shufflevector
 * (GCC 12+ and clang; GCC's __builtin_shuffle is not in clang, which the
 * fuzz build uses). SHUF(x, y, IDX...) picks lanes of x ++ y. */
#define SHUF(x, y, ...) __builtin_shufflevector(x, y, __VA_ARGS__)
#if VW == 16
#define SW8 8, 9, 10, 11, 12, 13, 14, 15, 0, 1, 2, 3, 4, 5, 6, 7
#define SW4 4, 5, 6, 7, 0, 1, 2, 3, 12, 13, 14, 15, 8, 9, 10, 11
#define SW2 2, 3, 0, 1, 6, 7, 4, 5, 10, 11, 8, 9, 14, 15, 12, 13
#define SW1 1, 0, 3, 2, 5, 4, 7, 6, 9, 8, 11, 10, 13, 12, 15, 14
#define L1LO 0, 16, 1, 17, 4, 20, 5, 21, 8, 24, 9, 25, 12, 28, 13, 29
#define L1HI 2, 18, 3, 19, 6, 22, 7, 23, 10, 26, 11, 27, 14, 30, 15, 31
#define L2LO 0, 1, 16, 17, 4, 5, 20, 21, 8, 9, 24, 25, 12, 13, 28, 29
#define L2HI 2, 3, 18, 19, 6, 7, 22, 23, 10, 11, 26, 27, 14, 15, 30, 31
#define L3LO 0, 1, 2, 3, 8, 9, 10, 11, 16, 17, 18, 19, 24, 25, 26, 27
#define L3HI 4, 5, 6, 7, 12, 13, 14, 15, 20, 21, 22, 23, 28, 29, 30, 31
#define HALF_LO 0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23
#define HALF_HI 8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29, 30, 31
#elif VW == 8
#define SW4 4, 5, 6, 7, 0, 1, 2, 3
#define SW2 2, 3, 0, 1, 6, 7, 4, 5
#define SW1 1, 0, 3, 2, 5, 4, 7, 6
#define L1LO 0, 8, 1, 9, 4, 12, 5, 13
#define L1HI 2, 10, 3, 11, 6, 14, 7, 15
#define L2LO 0, 1, 8, 9, 4, 5, 12, 13
#define L2HI 2, 3, 10, 11, 6, 7, 14, 15
#define L3LO 0, 1, 2, 3, 8, 9, 10, 11
#define L3HI 4, 5, 6, 7, 12, 13, 14, 15
#define HALF_LO 0, 1, 2, 3, 8, 9, 10, 11
#define HALF_HI 4, 5, 6, 7, 12, 13, 14, 15
#else
#define SW2 2, 3, 0, 1
#define SW1 1, 0, 3, 2
#define L1LO 0, 4, 1, 5
#define L1HI 2, 6, 3, 7
#define L2LO 0, 1, 4, 5
#define L2HI 2, 3, 6, 7
#define HALF_LO 0, 1, 4, 5
#define HALF_HI 2, 3, 6, 7
#endif

/* v and the lanes of v permuted by IDX, the larger of each pair */
#define VMAX_STEP(v, IDX) ((v) = sel((v) > SHUF(v, v, IDX), (v), SHUF(v, v, IDX)))

/* All lanes = the largest lane of v: halves, quarters, ... swapped and compared. */
static inline vf vmax_all(vf v)
{
#if VW == 16
    VMAX_STEP(v, SW8);
#endif
#if VW >= 8
    VMAX_STEP(v, SW4);
#endif
    VMAX_STEP(v, SW2);
    VMAX_STEP(v, SW1);
    return v;
}

/* One level of a transpose-and-add tree: lane pairs of x and y picked by
 * LO and HI, added. */
#define TREE_LEVEL(x, y, LO, HI) (SHUF(x, y, LO) + SHUF(x, y, HI))

/* a[i] and b[i] (i < VW/2): per key i, the lanes of head 0's and head 1's
 * products with it. Returns head 0's VW/2 sums in lanes [0, VW/2) and head
 * 1's in [VW/2, VW): transpose and add, so one tree serves VW sums instead
 * of a horizontal reduction per key. */
static inline vf sum_lanes_pair(const vf *a, const vf *b)
{
#if VW == 16
    vf e[2];
    for (int h = 0; h < 2; h++) {
        const vf *x = h ? b : a;
        const vf b0 = TREE_LEVEL(x[0], x[1], L1LO, L1HI), b1 = TREE_LEVEL(x[2], x[3], L1LO, L1HI);
        const vf b2 = TREE_LEVEL(x[4], x[5], L1LO, L1HI), b3 = TREE_LEVEL(x[6], x[7], L1LO, L1HI);
        /* each 128-bit lane: keys 0-3 (c0) or 4-7 (c1), one partial sum each */
        const vf c0 = TREE_LEVEL(b0, b1, L2LO, L2HI), c1 = TREE_LEVEL(b2, b3, L2LO, L2HI);
        e[h] = TREE_LEVEL(c0, c1, L3LO, L3HI);
    }
    return TREE_LEVEL(e[0], e[1], L3LO, L3HI);
#elif VW == 8
    vf c[2];
    for (int h = 0; h < 2; h++) {
        const vf *x = h ? b : a;
        const vf b0 = TREE_LEVEL(x[0], x[1], L1LO, L1HI), b1 = TREE_LEVEL(x[2], x[3], L1LO, L1HI);
        c[h] = TREE_LEVEL(b0, b1, L2LO, L2HI);
    }
    return TREE_LEVEL(c[0], c[1], L3LO, L3HI);
#else
    const vf b0 = TREE_LEVEL(a[0], a[1], L1LO, L1HI), b1 = TREE_LEVEL(b[0], b[1], L1LO, L1HI);
    return TREE_LEVEL(b0, b1, L2LO, L2HI);
#endif
}

/* lanes [0, VW/2) of x then of y (*lo); lanes [VW/2, VW) of x then of y (*hi) */
static inline void split_halves(vf x, vf y, vf *lo, vf *hi)
{
    *lo = SHUF(x, y, HALF_LO);
    *hi = SHUF(x, y, HALF_HI);
}

enum {
    ATTN_MAX_NV = 16,   /* head_dim / VW the unrolled kernel handles (8 vectors on AVX-512 at 128) */
    ATTN_MAX_HEADS = 16, /* query heads per call kept in registers' reach (more: in slices) */
    ATTN_PREFETCH = 32, /* keys ahead whose rows are prefetched (16: 6% slower at 4 rows, 48: 2-7%) */
};

/* Products of keys kb[0 .. VW/2) (the first nb of them real) with the query
 * heads q0 and q1, summed: lanes as sum_lanes_pair. Each key's vectors are
 * widened once for both heads. */
static inline __attribute__((always_inline)) vf
attn_dots_pair(const float *q0, const float *q1, const uint16_t *const *kb, int nb, const int nv)
{
    vf a[VW / 2], b[VW / 2];
#pragma GCC unroll 8
    for (int i = 0; i < VW / 2; i++) {
        vf s0 = { 0 }, s1 = { 0 };
        if (i < nb) {
            const uint16_t *kr = kb[i];
#pragma GCC unroll 16
            for (int c = 0; c < nv; c++) {
                const vf x = LOAD_F16(kr + c * VW);
                s0 += ld(q0 + c * VW) * x;
                s1 += ld(q1 + c * VW) * x;
            }
        }
        a[i] = s0, b[i] = s1;
    }
    return sum_lanes_pair(a, b);
}

/* acc0 (and acc1 when two) += sum_i w0[i] (w1[i]) v[i] over nb keys, the
 * accumulators in registers for the block, each row widened once; with
 * each key, the K and V rows pk[i], pv[i] (i < npf) are prefetched. */
static inline __attribute__((always_inline)) void
attn_wsum_pair(float *acc0, float *acc1, const float *w0, const float *w1,
               const uint16_t *const *vb, int nb, const int nv, bool two,
               const uint16_t *const *pk, const uint16_t *const *pv, int npf)
{
    vf A0[ATTN_MAX_NV], A1[ATTN_MAX_NV];
#pragma GCC unroll 16
    for (int c = 0; c < nv; c++) {
        A0[c] = ld(acc0 + c * VW);
        A1[c] = two ? ld(acc1 + c * VW) : (vf){ 0 };
    }
    for (int i = 0; i < nb; i++) {
        const vf x0 = splat(w0[i]), x1 = splat(w1[i]);
        const uint16_t *vr = vb[i];
        if (i < npf)
            for (int c = 0; c < nv * VW * 2; c += 64) {
                __builtin_prefetch((const char *)pk[i] + c);
                __builtin_prefetch((const char *)pv[i] + c);
            }
#pragma GCC unroll 16
        for (int c = 0; c < nv; c++) {
            const vf x = LOAD_F16(vr + c * VW);
            A0[c] += x0 * x;
            if (two)
                A1[c] += x1 * x;
        }
    }
#pragma GCC unroll 16
    for (int c = 0; c < nv; c++) {
        st(acc0 + c * VW, A0[c]);
        if (two)
            st(acc1 + c * VW, A1[c]);
    }
}

/* Softmax step of one head over a block's scores s (lanes past nb
 * ignored): the running max m and sum lv (a vector: one horizontal sum at
 * the end) and acc (d floats) rescaled when the max grows; the block's
 * weights into w. */
static inline __attribute__((always_inline)) void
attn_softmax_block(vf s, int nb, float *m, vf *lv, float *acc, int d, float *w)
{
    for (int i = nb; i < VW; i++)
        s[i] = -INFINITY;
    const float bm = vmax_all(s)[0];
    if (bm > *m) {
        const float c = expf(*m - bm); /* 0 on the first block */
        *lv *= c;
        scale_simd(acc, c, d);
        *m = bm;
    }
    vf e = vexp(s - *m);
    for (int i = nb; i < VW; i++)
        e[i] = 0.0f;
    *lv += e;
    st(w, e);
}

/* attn_online_f16 for head_dim = nv VW (nv a constant after inlining):
 * blocks of VW keys; per pair of query heads, the VW dot products as two
 * trees of VW/2 keys, the softmax step, then the weighted sum of V. */
static inline __attribute__((always_inline)) void
attn_online_f16_nv(float *acc, float *m, float *l, const float *q, int g, const uint16_t *const *k,
                   const uint16_t *const *v, int n, float scale, const int nv)
{
    const int d = nv * VW;
    vf lv[ATTN_MAX_HEADS];
    for (int r = 0; r < g; r++) {
        lv[r] = (vf){ 0 };
        lv[r][0] = l[r];
    }
    for (int i0 = 0; i0 < n; i0 += VW) {
        const int nb = n - i0 < VW ? n - i0 : VW;
        /* the rows are paged (each key's row of this head apart from the
         * next by a whole slot, blocks anywhere), which the hardware
         * prefetchers follow poorly: the first pair's weighted sum asks for
         * the rows ATTN_PREFETCH keys on, one key's at a time (spread out,
         * not a burst a block) */
        const int ahead = n - i0 - ATTN_PREFETCH, npf = ahead < 0 ? 0 : ahead < nb ? ahead : nb;
        /* (pointers formed only inside the arrays) */
        const uint16_t *const *pk = npf ? k + i0 + ATTN_PREFETCH : k;
        const uint16_t *const *pv = npf ? v + i0 + ATTN_PREFETCH : v;
        const uint16_t *const *k2 = nb > VW / 2 ? k + i0 + VW / 2 : k + i0;
        for (int r0 = 0; r0 < g; r0 += 2) {
            const bool two = r0 + 1 < g;
            const int r1 = two ? r0 + 1 : r0; /* an odd last head: scored twice, summed once */
            const float *q0 = q + (size_t)r0 * d, *q1 = q + (size_t)r1 * d;
            const vf x = attn_dots_pair(q0, q1, k + i0, nb, nv);
            const vf y = attn_dots_pair(q0, q1, k2, nb - VW / 2, nv); /* zeros past nb */
            vf s0, s1;
            split_halves(x, y, &s0, &s1);
            float w[2][VW];
            attn_softmax_block(s0 * scale, nb, &m[r0], &lv[r0], acc + (size_t)r0 * d, d, w[0]);
            if (two) {
                attn_softmax_block(s1 * scale, nb, &m[r1], &lv[r1], acc + (size_t)r1 * d, d, w[1]);
                attn_wsum_pair(acc + (size_t)r0 * d, acc + (size_t)r1 * d, w[0], w[1], v + i0, nb,
                               nv, true, pk, pv, r0 ? 0 : npf);
            } else {
                attn_wsum_pair(acc + (size_t)r0 * d, NULL, w[0], w[0], v + i0, nb, nv, false, pk,
                               pv, r0 ? 0 : npf);
            }
        }
    }
    for (int r = 0; r < g; r++)
        l[r] = hsum(lv[r]);
}

/* Other head sizes: a key at a time through the dot and axpy kernels, the
 * softmax step per block of VW keys as above. */
static void attn_online_f16_any(float *acc, float *m, float *l, const float *q, int g,
                                const uint16_t *const *k, const uint16_t *const *v, int n, int d,
                                float scale)
{
    for (int r = 0; r < g; r++) {
        const float *qr = q + (size_t)r * d;
        float *ar = acc + (size_t)r * d;
        vf lv = { 0 };
        lv[0] = l[r];
        for (int i0 = 0; i0 < n; i0 += VW) {
            const int nb = n - i0 < VW ? n - i0 : VW;
            vf s = { 0 };
            float w[VW];
            for (int i = 0; i < nb; i++)
                s[i] = dot_f16_simd(qr, k[i0 + i], d) * scale;
            attn_softmax_block(s, nb, &m[r], &lv, ar, d, w);
            for (int i = 0; i < nb; i++)
                axpy_f16_simd(ar, w[i], v[i0 + i], d);
        }
        l[r] = hsum(lv);
    }
}

static void attn_online_f16_simd(float *acc, float *m, float *l, const float *q, int g,
                                 const uint16_t *const *k, const uint16_t *const *v, int n, int d,
                                 float scale)
{
    for (; g > ATTN_MAX_HEADS; g -= ATTN_MAX_HEADS) { /* in slices of heads */
        attn_online_f16_simd(acc, m, l, q, ATTN_MAX_HEADS, k, v, n, d, scale);
        acc += (size_t)ATTN_MAX_HEADS * d, q += (size_t)ATTN_MAX_HEADS * d;
        m += ATTN_MAX_HEADS, l += ATTN_MAX_HEADS;
    }
    if (d == 8 * VW)
        attn_online_f16_nv(acc, m, l, q, g, k, v, n, scale, 8);
    else if (d == 4 * VW)
        attn_online_f16_nv(acc, m, l, q, g, k, v, n, scale, 4);
    else if (d == 16 * VW)
        attn_online_f16_nv(acc, m, l, q, g, k, v, n, scale, 16);
    else
        attn_online_f16_any(acc, m, l, q, g, k, v, n, d, scale);
}

// ---- linear attention ---------------------------------------------------------

/* Columns [j, j + nv VW) of the delta rule (nv <= 4: 8 independent FMA
 * chains): a block of dk rows x nv vectors is read for S_old^T k and
 * S_old^T q, then - still in L1 - rewritten as decay S + k u^T, so S comes
 * from memory once per token; u = beta (v - decay S_old^T k) and
 * o = S_new^T q = decay S_old^T q + (q . k) u are per column. */
static inline __attribute__((always_inline)) void
delta_cols(float *S, const float *q, const float *k, const float *v, float decay, float beta,
           float qk, int dk, int dv, int j, int nv, float *o)
{
    vf ks[4] = { { 0 } }, qs[4] = { { 0 } }, u[4];
    for (int i = 0; i < dk; i++) {
        const float *s = S + (size_t)i * dv + j;
        const vf ki = splat(k[i]), qi = splat(q[i]);
        for (int c = 0; c < nv; c++) {
            const vf x = ld(s + c * VW);
            ks[c] += ki * x;
            qs[c] += qi * x;
        }
    }
    const vf vd = splat(decay), vb = splat(beta), vqk = splat(qk);
    for (int c = 0; c < nv; c++) {
        u[c] = vb * (ld(v + j + c * VW) - vd * ks[c]);
        st(o + j + c * VW, vd * qs[c] + vqk * u[c]);
    }
    for (int i = 0; i < dk; i++) {
        float *s = S + (size_t)i * dv + j;
        const vf ki = splat(k[i]);
        for (int c = 0; c < nv; c++)
            st(s + c * VW, vd * ld(s + c * VW) + ki * u[c]);
    }
}

static void delta_rule_simd(float *S, const float *q, const float *k, const float *v, float decay,
                            float beta, int dk, int dv, float *o)
{
    const float qk = dot_simd(q, k, dk);
    int j = 0;
    for (; j + 4 * VW <= dv; j += 4 * VW)
        delta_cols(S, q, k, v, decay, beta, qk, dk, dv, j, 4, o);
    for (; j + VW <= dv; j += VW)
        delta_cols(S, q, k, v, decay, beta, qk, dk, dv, j, 1, o);
    for (; j < dv; j++) { /* the last dv % VW columns, one at a time */
        float ks = 0.0f, qs = 0.0f;
        for (int i = 0; i < dk; i++) {
            ks += k[i] * S[(size_t)i * dv + j];
            qs += q[i] * S[(size_t)i * dv + j];
        }
        const float u = beta * (v[j] - decay * ks);
        o[j] = decay * qs + qk * u;
        for (int i = 0; i < dk; i++)
            S[(size_t)i * dv + j] = decay * S[(size_t)i * dv + j] + k[i] * u;
    }
}

void OPS_FILL(struct omni_ops *o);
void OPS_FILL(struct omni_ops *o)
{
    o->name = OPS_NAME;
    o->dot = dot_simd;
    o->axpy = axpy_simd;
    o->scale = scale_simd;
    o->dot_f16 = dot_f16_simd;
    o->axpy_f16 = axpy_f16_simd;
    o->dot_bf16 = dot_bf16_simd;
    o->axpy_bf16 = axpy_bf16_simd;
    o->f16_to_f32 = f16_to_f32_simd;
    o->f32_to_f16 = f32_to_f16_simd;
    o->rmsnorm = rmsnorm_simd;
    o->layernorm = layernorm_simd;
    o->rope = rope_simd;
    o->exp = exp_simd;
    o->softmax = softmax_simd;
    o->max = max_simd;
    o->exp_shift_sum = exp_shift_sum_simd;
    o->gelu_erf = gelu_erf_simd;
    o->gelu_tanh = gelu_tanh_simd;
    o->gelu_quick = gelu_quick_simd;
    o->silu = silu_simd;
    o->swiglu = swiglu_simd;
    o->geglu_erf = geglu_erf_simd;
    o->geglu_tanh = geglu_tanh_simd;
    o->softcap = softcap_simd;
    o->attn_scores = attn_scores_simd;
    o->attn_scores_f16 = attn_scores_f16_simd;
    o->attn_wsum = attn_wsum_simd;
    o->attn_wsum_f16 = attn_wsum_f16_simd;
    o->attn_online_f16 = attn_online_f16_simd;
    o->delta_rule = delta_rule_simd;
}
