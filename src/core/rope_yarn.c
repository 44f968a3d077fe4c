/* rope_yarn.c - YaRN rotary frequencies (see rope_yarn.h). The correction
 * dimension of r rotations is the pair index whose wavelength fits r times
 * into orig_ctx: d ln(orig_ctx / (2 pi r)) / (2 ln base). */
#include "rope_yarn.h"

#include <math.h>

static double corr_dim(int n_rot, double base, int orig_ctx, double rotations)
{
    return n_rot * log(orig_ctx / (rotations * 2.0 * M_PI)) / (2.0 * log(base));
}

void rope_yarn_inv_freq(float *inv_freq, int n_rot, float base, float factor, int orig_ctx,
                        float beta_fast, float beta_slow, bool truncate)
{
    double lo = corr_dim(n_rot, base, orig_ctx, beta_fast);
    double hi = corr_dim(n_rot, base, orig_ctx, beta_slow);
    if (truncate)
        lo = floor(lo), hi = ceil(hi);
    lo = lo > 0 ? lo : 0;
    hi = hi < n_rot - 1 ? hi : n_rot - 1;
    if (hi == lo)
        hi += 0.001; /* keep the ramp's slope finite */
    for (int i = 0; i < n_rot / 2; i++) {
        const double extra = 1.0 / pow((double)base, (double)(2 * i) / n_rot);
        const double inter = extra / factor;
        double ramp = (i - lo) / (hi - lo);
        ramp = ramp < 0 ? 0 : ramp > 1 ? 1 : ramp;
        /* ramp 0: pair below lo, keeps its frequency; 1: above hi, interpolated */
        inv_freq[i] = (float)(inter * ramp + extra * (1.0 - ramp));
    }
}

float rope_yarn_mscale(float factor)
{
    return factor <= 1.0f ? 1.0f : 0.1f * logf(factor) + 1.0f;
}
