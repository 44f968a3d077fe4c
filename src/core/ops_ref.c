/* ops_ref.c - the scalar reference of the compute layer (ops.h): plain C,
 * the OMNI_CPU_SCALAR table and what tests/test_ops.c compares every SIMD
 * level against. The polynomials (exp, erf) are the ones the SIMD versions
 * evaluate lane by lane, so the levels differ only in summation order and
 * FMA contraction. Numerics follow PyTorch (biased variance in layer norm,
 * exact-erf GELU) so that golden tests against transformers match. */
#include "src/core/ops_impl.h"

#include <math.h>
#include <string.h>

static float h2f(uint16_t h)
{
    _Float16 f;
    memcpy(&f, &h, 2);
    return (float)f;
}

static uint16_t f2h(float x)
{
    _Float16 f = (_Float16)x;
    uint16_t h;
    memcpy(&h, &f, 2);
    return h;
}

static float bf2f(uint16_t h)
{
    const uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

float omni_ref_expf1(float x)
{
    x = x > 88.0f ? 88.0f : x;
    x = x < -87.3f ? -87.3f : x;
    const float magic = 12582912.0f; /* 1.5 * 2^23: n lands in the low mantissa bits */
    const float t = x * 1.44269504088896341f + magic;
    const float n = t - magic;
    const float r = x - n * 0.693359375f + n * 2.12194440e-4f;
    float p = 1.9875691500e-4f * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * r * r + r + 1.0f;
    int32_t ti;
    memcpy(&ti, &t, 4);
    const int32_t bits = (ti - 0x4b400000 + 127) << 23;
    float two_n;
    memcpy(&two_n, &bits, 4);
    return p * two_n;
}

static float dot_ref(const float *a, const float *b, int n)
{
    float s = 0.0f;
    for (int i = 0; i < n; i++)
        s += a[i] * b[i];
    return s;
}

static void axpy_ref(float *y, float a, const float *x, int n)
{
    for (int i = 0; i < n; i++)
        y[i] += a * x[i];
}

static void scale_ref(float *y, float a, int n)
{
    for (int i = 0; i < n; i++)
        y[i] *= a;
}

static float dot_f16_ref(const float *a, const uint16_t *b, int n)
{
    float s = 0.0f;
    for (int i = 0; i < n; i++)
        s += a[i] * h2f(b[i]);
    return s;
}

static void axpy_f16_ref(float *y, float a, const uint16_t *x, int n)
{
    for (int i = 0; i < n; i++)
        y[i] += a * h2f(x[i]);
}

static float dot_bf16_ref(const float *a, const uint16_t *b, int n)
{
    float s = 0.0f;
    for (int i = 0; i < n; i++)
        s += a[i] * bf2f(b[i]);
    return s;
}

static void axpy_bf16_ref(float *y, float a, const uint16_t *x, int n)
{
    for (int i = 0; i < n; i++)
        y[i] += a * bf2f(x[i]);
}

static void f16_to_f32_ref(const uint16_t *x, float *y, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        y[i] = h2f(x[i]);
}

static void f32_to_f16_ref(const float *x, uint16_t *y, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        y[i] = f2h(x[i]);
}

static void rmsnorm_ref(float *y, const float *x, const float *w, int n, float eps)
{
    double ss = 0.0;
    for (int i = 0; i < n; i++)
        ss += (double)x[i] * x[i];
    const float s = (float)(1.0 / sqrt(ss / n + eps));
    for (int i = 0; i < n; i++)
        y[i] = x[i] * s * w[i];
}

static void layernorm_ref(float *y, const float *x, const float *w, const float *b, int n, float eps)
{
    double sum = 0;
    for (int i = 0; i < n; i++)
        sum += x[i];
    const double mean = sum / n;
    double var = 0;
    for (int i = 0; i < n; i++)
        var += (x[i] - mean) * (x[i] - mean);
    const float inv = (float)(1.0 / sqrt(var / n + eps)), m = (float)mean;
    for (int i = 0; i < n; i++)
        y[i] = (x[i] - m) * inv * (w ? w[i] : 1.0f) + (b ? b[i] : 0.0f);
}

static void rope_ref(float *v, const float *cos_, const float *sin_, int n_rot, bool neox)
{
    const int half = n_rot / 2;
    for (int i = 0; i < half; i++) {
        float *a = neox ? &v[i] : &v[2 * i];
        float *b = neox ? &v[i + half] : &v[2 * i + 1];
        const float x0 = *a, x1 = *b;
        *a = x0 * cos_[i] - x1 * sin_[i];
        *b = x0 * sin_[i] + x1 * cos_[i];
    }
}

static void exp_ref(float *y, const float *x, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        y[i] = omni_ref_expf1(x[i]);
}

static void softmax_ref(float *x, int64_t n)
{
    float mx = -INFINITY;
    for (int64_t i = 0; i < n; i++)
        mx = x[i] > mx ? x[i] : mx;
    float sum = 0.0f;
    for (int64_t i = 0; i < n; i++) {
        x[i] = omni_ref_expf1(x[i] - mx);
        sum += x[i];
    }
    const float inv = 1.0f / sum;
    for (int64_t i = 0; i < n; i++)
        x[i] *= inv;
}

static float max_ref(const float *x, int64_t n)
{
    float mx = -INFINITY;
    for (int64_t i = 0; i < n; i++)
        mx = x[i] > mx ? x[i] : mx;
    return mx;
}

static float exp_shift_sum_ref(float *x, int64_t n, float m)
{
    float sum = 0.0f;
    for (int64_t i = 0; i < n; i++) {
        x[i] = omni_ref_expf1(x[i] - m);
        sum += x[i];
    }
    return sum;
}

/* erf(z) = 1 - P(t) e^(-z^2), t = 1 / (1 + p z) (Abramowitz & Stegun
 * 7.1.26, |error| <= 1.5e-7): libm's erff per element was a tenth of an
 * encoder's time. */
float omni_ref_gelu_erf1(float x)
{
    const float z = fabsf(x) * 0.70710678118654752f;
    const float t = 1.0f / (1.0f + 0.3275911f * z);
    const float e = omni_ref_expf1(-z * z);
    const float p = t * (0.254829592f + t * (-0.284496736f + t * (1.421413741f +
                    t * (-1.453152027f + t * 1.061405429f))));
    const float erf_abs = 1.0f - p * e;
    return 0.5f * x * (1.0f + (x < 0 ? -erf_abs : erf_abs));
}

/* 0.5 x (1 + tanh(u)) = x / (1 + e^(-2u)): one exp instead of tanhf */
static float gelu_tanh1(float x)
{
    return x / (1.0f + omni_ref_expf1(-1.5957691216057308f * (x + 0.044715f * x * x * x)));
}

static float silu1(float x) { return x / (1.0f + omni_ref_expf1(-x)); }

static void gelu_erf_ref(float *x, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        x[i] = omni_ref_gelu_erf1(x[i]);
}

static void gelu_tanh_ref(float *x, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        x[i] = gelu_tanh1(x[i]);
}

static void gelu_quick_ref(float *x, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        x[i] = x[i] / (1.0f + omni_ref_expf1(-1.702f * x[i]));
}

static void silu_ref(float *x, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        x[i] = silu1(x[i]);
}

static void swiglu_ref(const float *gate, float *up, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        up[i] *= silu1(gate[i]);
}

static void geglu_erf_ref(const float *gate, float *up, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        up[i] *= omni_ref_gelu_erf1(gate[i]);
}

static void geglu_tanh_ref(const float *gate, float *up, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        up[i] *= gelu_tanh1(gate[i]);
}

/* cap tanh(x / cap) = cap (1 - 2 / (e^(2x / cap) + 1)); the exp clamps its
 * argument, so large |x| give +-cap as tanhf would. */
static void softcap_ref(float *x, int64_t n, float cap)
{
    const float k = 2.0f / cap;
    for (int64_t i = 0; i < n; i++)
        x[i] = cap - 2.0f * cap / (omni_ref_expf1(x[i] * k) + 1.0f);
}

static void attn_scores_ref(float *s, const float *q, const float *const *k, int n, int d, float scale)
{
    for (int i = 0; i < n; i++)
        s[i] = dot_ref(q, k[i], d) * scale;
}

static void attn_scores_f16_ref(float *s, const float *q, const uint16_t *const *k, int n, int d,
                                float scale)
{
    for (int i = 0; i < n; i++)
        s[i] = dot_f16_ref(q, k[i], d) * scale;
}

static void attn_wsum_ref(float *acc, const float *w, const float *const *v, int n, int d)
{
    for (int i = 0; i < n; i++)
        axpy_ref(acc, w[i], v[i], d);
}

static void attn_wsum_f16_ref(float *acc, const float *w, const uint16_t *const *v, int n, int d)
{
    for (int i = 0; i < n; i++)
        axpy_f16_ref(acc, w[i], v[i], d);
}

/* Two passes over the keys (the scores computed twice: nothing allocated):
 * the call's max, then the weights against it. */
static void attn_online_f16_ref(float *acc, float *m, float *l, const float *q, int g,
                                const uint16_t *const *k, const uint16_t *const *v, int n, int d,
                                float scale)
{
    for (int r = 0; r < g; r++) {
        const float *qr = q + (size_t)r * d;
        float *ar = acc + (size_t)r * d, mx = m[r];
        for (int i = 0; i < n; i++) {
            const float s = dot_f16_ref(qr, k[i], d) * scale;
            mx = s > mx ? s : mx;
        }
        if (n < 1)
            continue;
        const float c = expf(m[r] - mx); /* 0 when m[r] is -INFINITY */
        l[r] *= c;
        scale_ref(ar, c, d);
        for (int i = 0; i < n; i++) {
            const float p = omni_ref_expf1(dot_f16_ref(qr, k[i], d) * scale - mx);
            l[r] += p;
            axpy_f16_ref(ar, p, v[i], d);
        }
        m[r] = mx;
    }
}

static void delta_rule_ref(float *S, const float *q, const float *k, const float *v, float decay,
                           float beta, int dk, int dv, float *o)
{
    /* u = beta (v - (decayed S)^T k), accumulated row by row of S */
    float u[1024];
    for (int j = 0; j < dv; j++)
        u[j] = 0.0f;
    for (int i = 0; i < dk; i++) {
        float *s = S + (size_t)i * dv;
        for (int j = 0; j < dv; j++) {
            s[j] *= decay;
            u[j] += s[j] * k[i];
        }
    }
    for (int j = 0; j < dv; j++) {
        u[j] = beta * (v[j] - u[j]);
        o[j] = 0.0f;
    }
    /* S += k u^T, then o = S^T q */
    for (int i = 0; i < dk; i++) {
        float *s = S + (size_t)i * dv;
        for (int j = 0; j < dv; j++) {
            s[j] += k[i] * u[j];
            o[j] += s[j] * q[i];
        }
    }
}

const struct omni_ops omni_ops_ref = {
    .name = "ref",
    .dot = dot_ref,
    .axpy = axpy_ref,
    .scale = scale_ref,
    .dot_f16 = dot_f16_ref,
    .axpy_f16 = axpy_f16_ref,
    .dot_bf16 = dot_bf16_ref,
    .axpy_bf16 = axpy_bf16_ref,
    .f16_to_f32 = f16_to_f32_ref,
    .f32_to_f16 = f32_to_f16_ref,
    .rmsnorm = rmsnorm_ref,
    .layernorm = layernorm_ref,
    .rope = rope_ref,
    .exp = exp_ref,
    .softmax = softmax_ref,
    .max = max_ref,
    .exp_shift_sum = exp_shift_sum_ref,
    .gelu_erf = gelu_erf_ref,
    .gelu_tanh = gelu_tanh_ref,
    .gelu_quick = gelu_quick_ref,
    .silu = silu_ref,
    .swiglu = swiglu_ref,
    .geglu_erf = geglu_erf_ref,
    .geglu_tanh = geglu_tanh_ref,
    .softcap = softcap_ref,
    .attn_scores = attn_scores_ref,
    .attn_scores_f16 = attn_scores_f16_ref,
    .attn_wsum = attn_wsum_ref,
    .attn_wsum_f16 = attn_wsum_f16_ref,
    .attn_online_f16 = attn_online_f16_ref,
    .delta_rule = delta_rule_ref,
};
