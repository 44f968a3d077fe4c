/* tts_stretch.c - slows speech down without changing its pitch (WSOLA:
 * waveform-similarity overlap-add).
 *
 * Used for speeds below what a backend can synthesize itself (espeak-ng
 * speaks no slower than 80 words per minute): output frames are taken from
 * the input at 1/factor of their output spacing, each shifted by up to a
 * quarter frame to where it best continues the previous one, and
 * overlap-added with a Hann window, so periods line up and no echo appears. */
#include "audio/tts/tts_int.h"

#include "src/core/omni.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

int tts_stretch(const float *in, size_t n, int rate_hz, double factor, float **out, size_t *n_out)
{
    *out = NULL;
    *n_out = 0;
    size_t frame = (size_t)(rate_hz / 50);          /* 20 ms */
    if (frame < 16)
        frame = 16;
    size_t hop = frame / 2, search = frame / 4;
    size_t total = (size_t)((double)n * factor) + frame;
    float *y = calloc(total + frame, sizeof *y), *w = calloc(frame, sizeof *w);
    float *norm = calloc(total + frame, sizeof *norm);
    if (!y || !w || !norm) {
        free(y);
        free(w);
        free(norm);
        return OMNI_ERR_NOMEM;
    }
    for (size_t i = 0; i < frame; i++)
        w[i] = 0.5f - 0.5f * cosf(2.0f * (float)M_PI * (float)i / (float)frame);
    size_t prev = 0;                                /* input start of the previous frame */
    size_t k = 0;
    for (;; k++) {
        size_t opos = k * hop;
        double nominal = (double)opos / factor;
        if (opos + frame > total || nominal + frame > (double)n)
            break;
        size_t best = (size_t)nominal;
        if (k > 0) {
            /* The previous frame's natural continuation is in[prev + hop ..];
             * pick the shift whose frame resembles it most. */
            const float *ref = in + prev + hop;
            size_t lo = best > search ? best - search : 0, hi = best + search;
            if (hi + frame > n)
                hi = n - frame;
            double best_c = -INFINITY;
            for (size_t c = lo; c <= hi && prev + hop + frame <= n; c++) {
                double acc = 0;
                for (size_t i = 0; i < frame; i += 2)
                    acc += (double)ref[i] * in[c + i];
                if (acc > best_c) {
                    best_c = acc;
                    best = c;
                }
            }
        }
        for (size_t i = 0; i < frame; i++) {
            y[opos + i] += w[i] * in[best + i];
            norm[opos + i] += w[i];
        }
        prev = best;
    }
    size_t len = k ? (k - 1) * hop + frame : 0;
    for (size_t i = 0; i < len; i++)
        y[i] = norm[i] > 1e-3f ? y[i] / norm[i] : 0.0f;
    free(w);
    free(norm);
    *out = y;
    *n_out = len;
    return 0;
}
