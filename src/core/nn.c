/* nn.c - row-wise float ops shared by the encoder models (see nn.h).
 *
 * Plain C written so that -O2 vectorizes the inner loops; the numerics
 * follow PyTorch (biased variance in layer norm, exact erf GELU) so that
 * golden tests against transformers match to float rounding. */
#include "src/core/nn.h"

#include <math.h>

#include "src/core/quant.h"

void omni_layer_norm_rows(const float *x, const float *w, const float *b, int64_t n_rows, int n,
                          float eps, float *y)
{
    for (int64_t r = 0; r < n_rows; r++) {
        const float *xr = x + r * n;
        float *yr = y + r * n;
        double sum = 0;
        for (int i = 0; i < n; i++)
            sum += xr[i];
        const double mean = sum / n;
        double var = 0;
        for (int i = 0; i < n; i++)
            var += (xr[i] - mean) * (xr[i] - mean);
        const float inv = (float)(1.0 / sqrt(var / n + eps)), m = (float)mean;
        for (int i = 0; i < n; i++)
            yr[i] = (xr[i] - m) * inv * w[i] + (b ? b[i] : 0.0f);
    }
}


/* GELU of n <= GELU_BLOCK values through erf(z) = 1 - P(t) e^(-z^2), t = 1 / (1 + p z)
 * (Abramowitz & Stegun 7.1.26, |error| <= 1.5e-7) with the vector exp: libm's
 * erff per element was a tenth of an encoder's time. */
enum { GELU_BLOCK = 256 };
static void gelu_block(const float *x, float *out, int n)
{
    float t[GELU_BLOCK], e[GELU_BLOCK] = { 0 }; /* (zeroed: GCC cannot see that n <= GELU_BLOCK) */
    for (int i = 0; i < n; i++) {
        const float z = fabsf(x[i]) * 0.70710678118654752f;
        t[i] = 1.0f / (1.0f + 0.3275911f * z);
        e[i] = -z * z;
    }
    omni_vec_expf(n, e, e);
    for (int i = 0; i < n; i++) {
        const float p = t[i] * (0.254829592f + t[i] * (-0.284496736f + t[i] * (1.421413741f +
                        t[i] * (-1.453152027f + t[i] * 1.061405429f))));
        const float erf_abs = 1.0f - p * e[i];
        out[i] = 0.5f * x[i] * (1.0f + (x[i] < 0 ? -erf_abs : erf_abs));
    }
}

void omni_gelu_erf(float *x, int64_t n)
{
    for (int64_t b = 0; b < n; b += GELU_BLOCK) {
        const int k = (int)(n - b < GELU_BLOCK ? n - b : GELU_BLOCK);
        gelu_block(x + b, x + b, k);
    }
}

void omni_swiglu(const float *gate, float *up, int64_t n)
{
    float e[GELU_BLOCK];
    for (int64_t b = 0; b < n; b += GELU_BLOCK) {
        const int k = (int)(n - b < GELU_BLOCK ? n - b : GELU_BLOCK);
        for (int i = 0; i < k; i++)
            e[i] = -gate[b + i];
        omni_vec_expf(k, e, e);
        for (int i = 0; i < k; i++)
            up[b + i] *= gate[b + i] / (1.0f + e[i]);
    }
}

/* cap tanh(x / cap) = cap (1 - 2 / (e^(2x / cap) + 1)); the vector exp clamps
 * its argument, so large |x| give +-cap exactly as tanhf would. */
void omni_softcap(float *x, int64_t n, float cap)
{
    float e[GELU_BLOCK];
    const float k = 2.0f / cap;
    for (int64_t b = 0; b < n; b += GELU_BLOCK) {
        const int m = (int)(n - b < GELU_BLOCK ? n - b : GELU_BLOCK);
        for (int i = 0; i < m; i++)
            e[i] = x[b + i] * k;
        omni_vec_expf(m, e, e);
        for (int i = 0; i < m; i++)
            x[b + i] = cap - 2.0f * cap / (e[i] + 1.0f);
    }
}

/* 0.5 g (1 + tanh(u)) = g / (1 + e^(-2u)): one vector exp instead of tanhf */
void omni_geglu_tanh(const float *gate, float *up, int64_t n)
{
    float e[GELU_BLOCK];
    for (int64_t b = 0; b < n; b += GELU_BLOCK) {
        const int k = (int)(n - b < GELU_BLOCK ? n - b : GELU_BLOCK);
        for (int i = 0; i < k; i++) {
            const float g = gate[b + i];
            e[i] = -1.5957691216057308f * (g + 0.044715f * g * g * g); /* -2 sqrt(2/pi) (...) */
        }
        omni_vec_expf(k, e, e);
        for (int i = 0; i < k; i++)
            up[b + i] *= gate[b + i] / (1.0f + e[i]);
    }
}

void omni_geglu_erf(const float *gate, float *up, int64_t n)
{
    float g[GELU_BLOCK];
    for (int64_t b = 0; b < n; b += GELU_BLOCK) {
        const int k = (int)(n - b < GELU_BLOCK ? n - b : GELU_BLOCK);
        gelu_block(gate + b, g, k);
        for (int i = 0; i < k; i++)
            up[b + i] *= g[i];
    }
}

void omni_rope_neox(float *x, int n_head, int head_dim, int pos, float base)
{
    const int half = head_dim / 2;
    for (int i = 0; i < half; i++) {
        /* the angle in double: positions up to a few thousand times a
         * frequency near 1 lose digits in float */
        const double theta = pos * pow((double)base, -2.0 * i / head_dim);
        const float c = (float)cos(theta), s = (float)sin(theta);
        for (int h = 0; h < n_head; h++) {
            float *p = x + (size_t)h * head_dim;
            const float x0 = p[i], x1 = p[i + half];
            p[i] = x0 * c - x1 * s;
            p[i + half] = x0 * s + x1 * c;
        }
    }
}

void omni_l2_normalize(float *x, int n)
{
    double ss = 0;
    for (int i = 0; i < n; i++)
        ss += (double)x[i] * x[i];
    if (ss <= 0)
        return;
    const float inv = (float)(1.0 / sqrt(ss));
    for (int i = 0; i < n; i++)
        x[i] *= inv;
}
