/* nn.c - row-wise float ops shared by the encoder models (see nn.h).
 *
 * Plain C written so that -O2 vectorizes the inner loops; the numerics
 * follow PyTorch (biased variance in layer norm, exact erf GELU) so that
 * golden tests against transformers match to float rounding. */
#include "src/core/nn.h"

#include <math.h>

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

static inline float gelu_erf1(float x) { return 0.5f * x * (1.0f + erff(x * 0.70710678118654752f)); }

void omni_gelu_erf(float *x, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        x[i] = gelu_erf1(x[i]);
}

void omni_swiglu(const float *gate, float *up, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        up[i] *= gate[i] / (1.0f + expf(-gate[i]));
}

void omni_geglu_erf(const float *gate, float *up, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        up[i] *= gelu_erf1(gate[i]);
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
