/* rope_yarn.h - YaRN rotary scaling (Peng et al. 2023, "YaRN: Efficient
 * Context Window Extension"): per rotated pair, a blend of the original
 * frequency (extrapolation, fast pairs) and the frequency divided by the
 * scale factor (interpolation, slow pairs), with a linear ramp between the
 * two correction dimensions; cos and sin are scaled by the attention factor.
 *
 *   float f[64];
 *   rope_yarn_inv_freq(f, 64, 150000.0f, 32.0f, 4096, 32.0f, 1.0f, false);
 *   float m = rope_yarn_mscale(32.0f);    // 0.1 ln(32) + 1
 *
 * Pure functions; thread-safe. */
#ifndef OMNI_ROPE_YARN_H
#define OMNI_ROPE_YARN_H

#include <stdbool.h>

/* inv_freq[i], i < n_rot / 2: the angle per position of pair i. beta_fast and
 * beta_slow are the rotation counts (over orig_ctx positions) that bound the
 * ramp; truncate rounds the correction dimensions outwards to integers (HF's
 * default and llama.cpp's always; gpt-oss's published config turns it off). */
void rope_yarn_inv_freq(float *inv_freq, int n_rot, float base, float factor, int orig_ctx,
                        float beta_fast, float beta_slow, bool truncate);

/* The default attention factor of a scale factor: 0.1 ln(factor) + 1 (1 for
 * factor <= 1). */
float rope_yarn_mscale(float factor);

#endif
