/* quant_lowbit.c - scalar reference (de)quantizers and dot products of the
 * low-bit types (q2_K, q3_K, iq4_nl, iq4_xs, mxfp4; layouts in
 * quant_lowbit.h). Dequantization follows GGML's formulas step for step so
 * that it is bit-exact with gguf-py; the dots sum exact integers per block
 * and scale them once, as ggml's _ref kernels do. */
#include "quant_lowbit.h"

#include <math.h>
#include <string.h>

/* d*sc must round before it multiplies q (two roundings, as in ggml and
 * gguf-py): no fused multiply-add. */
#pragma GCC optimize("fp-contract=off")

const int8_t kvalues_iq4nl[16] = { -127, -104, -83, -65, -49, -35, -22, -10,
                                   1,    13,   25,  38,  53,  69,  89,  113 };
const int8_t kvalues_mxfp4[16] = { 0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12 };

static inline float h2f(ggml_half h)
{
    return omni_fp16_to_fp32(h);
}

static inline ggml_half f2h(float x)
{
    return omni_fp32_to_fp16(x);
}

#define MIN(a, b) ((a) < (b) ? (a) : (b))
#define MAX(a, b) ((a) > (b) ? (a) : (b))

void quant_q3_K_scales(const uint8_t scales[12], int8_t out[16])
{
    /* four bytes at a time (little endian): low nibbles of bytes 0-3 / 4-7
     * give scales 0-7, their high nibbles scales 8-15; byte k of bytes 8-11
     * holds bits 4-5 of scales k, k+4, k+8, k+12 in its bit pairs 0, 2, 4, 6 */
    uint32_t a0, a1, hi, aux[4];
    memcpy(&a0, scales, 4);
    memcpy(&a1, scales + 4, 4);
    memcpy(&hi, scales + 8, 4);
    aux[0] = (a0 & 0x0f0f0f0f) | ((hi & 0x03030303) << 4);
    aux[1] = (a1 & 0x0f0f0f0f) | (((hi >> 2) & 0x03030303) << 4);
    aux[2] = ((a0 >> 4) & 0x0f0f0f0f) | (((hi >> 4) & 0x03030303) << 4);
    aux[3] = ((a1 >> 4) & 0x0f0f0f0f) | (((hi >> 6) & 0x03030303) << 4);
    uint8_t u[16];
    memcpy(u, aux, 16);
    for (int i = 0; i < 16; i++)
        out[i] = (int8_t)(u[i] - 32);
}

/* The 6-bit scale of iq4_xs sub-block b (0..63, not yet minus 32). */
static inline int iq4_xs_scale(const block_iq4_xs *x, int b)
{
    return ((x->scales_l[b / 2] >> (4 * (b % 2))) & 0x0f) | (((x->scales_h >> (2 * b)) & 3) << 4);
}

// ---- dequantization --------------------------------------------------------

void dequantize_row_q2_K(const block_q2_K *x, float *y, int64_t n)
{
    for (int64_t i = 0; i < n / QK_K; i++) {
        const float d = h2f(x[i].d), dmin = h2f(x[i].dmin);
        for (int h = 0; h < 2; h++) {
            const uint8_t *q = x[i].qs + 32 * h;
            for (int j = 0; j < 4; j++)
                for (int half = 0; half < 2; half++) { /* 16 elements, one scale */
                    const uint8_t sc = x[i].scales[8 * h + 2 * j + half];
                    const float dl = d * (float)(sc & 0x0f), ml = dmin * (float)(sc >> 4);
                    for (int l = 16 * half; l < 16 * half + 16; l++)
                        *y++ = dl * (float)((q[l] >> (2 * j)) & 3) - ml;
                }
        }
    }
}

void dequantize_row_q3_K(const block_q3_K *x, float *y, int64_t n)
{
    for (int64_t i = 0; i < n / QK_K; i++) {
        const float d = h2f(x[i].d);
        int8_t sc[16];
        quant_q3_K_scales(x[i].scales, sc);
        for (int h = 0; h < 2; h++) {
            const uint8_t *q = x[i].qs + 32 * h;
            for (int j = 0; j < 4; j++) {
                const int m = 4 * h + j; /* hmask bit of these 32 elements */
                for (int half = 0; half < 2; half++) {
                    const float dl = d * (float)sc[8 * h + 2 * j + half];
                    for (int l = 16 * half; l < 16 * half + 16; l++)
                        *y++ = dl * (float)(((q[l] >> (2 * j)) & 3) - ((x[i].hmask[l] >> m) & 1 ? 0 : 4));
                }
            }
        }
    }
}

void dequantize_row_iq4_nl(const block_iq4_nl *x, float *y, int64_t n)
{
    for (int64_t i = 0; i < n / QK4_NL; i++, y += QK4_NL) {
        const float d = h2f(x[i].d);
        for (int j = 0; j < QK4_NL / 2; j++) {
            y[j] = d * (float)kvalues_iq4nl[x[i].qs[j] & 0x0f];
            y[j + QK4_NL / 2] = d * (float)kvalues_iq4nl[x[i].qs[j] >> 4];
        }
    }
}

void dequantize_row_iq4_xs(const block_iq4_xs *x, float *y, int64_t n)
{
    for (int64_t i = 0; i < n / QK_K; i++) {
        const float d = h2f(x[i].d);
        for (int b = 0; b < QK_K / 32; b++, y += 32) {
            const float dl = d * (float)(iq4_xs_scale(&x[i], b) - 32);
            const uint8_t *qs = x[i].qs + 16 * b;
            for (int j = 0; j < 16; j++) {
                y[j] = dl * (float)kvalues_iq4nl[qs[j] & 0x0f];
                y[j + 16] = dl * (float)kvalues_iq4nl[qs[j] >> 4];
            }
        }
    }
}

void dequantize_row_mxfp4(const block_mxfp4 *x, float *y, int64_t n)
{
    for (int64_t i = 0; i < n / QK_MXFP4; i++, y += QK_MXFP4) {
        const float d = quant_e8m0_to_fp32_half(x[i].e);
        for (int j = 0; j < QK_MXFP4 / 2; j++) {
            y[j] = (float)kvalues_mxfp4[x[i].qs[j] & 0x0f] * d;
            y[j + QK_MXFP4 / 2] = (float)kvalues_mxfp4[x[i].qs[j] >> 4] * d;
        }
    }
}

// ---- weight quantizers -----------------------------------------------------

/* Round half away from zero, as ggml's nearest_int for these fits. */
static inline int round_int(float v)
{
    return (int)lroundf(v);
}

/* x[0..n) ~ scale * q - min, q in 0..qmax, scale >= 0, min >= 0: the
 * min/max line, then a few rounds of "round q, least-squares refit of scale
 * and min" keeping the best squared error. */
static void fit_scale_min(const float *x, int n, int qmax, float *scale, float *min)
{
    float lo = 0, hi = 0;
    for (int l = 0; l < n; l++) {
        lo = MIN(lo, x[l]);
        hi = MAX(hi, x[l]);
    }
    float a = (hi - lo) / (float)qmax, b = -lo, best = INFINITY;
    *scale = a;
    *min = b;
    for (int iter = 0; iter < 4 && a > 0; iter++) {
        double sq = 0, sqq = 0, sx = 0, sqx = 0, err = 0;
        for (int l = 0; l < n; l++) {
            const int q = MAX(0, MIN(qmax, round_int((x[l] + b) / a)));
            const float e = a * (float)q - b - x[l];
            err += (double)e * e;
            sq += q;
            sqq += (double)q * q;
            sx += x[l];
            sqx += (double)q * x[l];
        }
        if (err < best) {
            best = (float)err;
            *scale = a;
            *min = b;
        }
        const double det = n * sqq - sq * sq;
        if (det <= 0)
            break;
        double na = (n * sqx - sq * sx) / det, nb = (na * sq - sx) / n;
        if (nb < 0) { /* the min term cannot be negative: scale alone */
            nb = 0;
            na = sqq > 0 ? sqx / sqq : 0;
        }
        a = (float)na;
        b = (float)nb;
    }
}

/* x[0..n) ~ scale * q, q in qmin..qmax: the largest |x| onto qmin, then
 * rounds of "round q, least-squares scale" keeping the best error. */
static float fit_scale(const float *x, int n, int qmin, int qmax)
{
    float amax = 0, vmax = 0;
    for (int l = 0; l < n; l++)
        if (fabsf(x[l]) > amax) {
            amax = fabsf(x[l]);
            vmax = x[l];
        }
    float a = vmax / (float)qmin, best_a = a, best = INFINITY;
    for (int iter = 0; iter < 4 && a != 0; iter++) {
        double sqq = 0, sqx = 0, err = 0;
        for (int l = 0; l < n; l++) {
            const int q = MAX(qmin, MIN(qmax, round_int(x[l] / a)));
            const float e = a * (float)q - x[l];
            err += (double)e * e;
            sqq += (double)q * q;
            sqx += (double)q * x[l];
        }
        if (err < best) {
            best = (float)err;
            best_a = a;
        }
        if (sqq <= 0)
            break;
        a = (float)(sqx / sqq);
    }
    return best_a;
}

void quantize_row_q2_K_ref(const float *x, block_q2_K *y, int64_t n)
{
    for (int64_t i = 0; i < n / QK_K; i++, x += QK_K) {
        /* per 16 elements: x ~ scale * q - min with q in 0..3, min >= 0 */
        float scale[16], mins[16], max_scale = 0, max_min = 0;
        for (int s = 0; s < 16; s++) {
            fit_scale_min(x + 16 * s, 16, 3, &scale[s], &mins[s]);
            max_scale = MAX(max_scale, scale[s]);
            max_min = MAX(max_min, mins[s]);
        }
        const float d = max_scale / 15, dmin = max_min / 15;
        y[i].d = f2h(d);
        y[i].dmin = f2h(dmin);
        const float dh = h2f(y[i].d), dminh = h2f(y[i].dmin);
        uint8_t L[QK_K];
        for (int s = 0; s < 16; s++) {
            int sc = dh > 0 ? MIN(15, round_int(scale[s] / dh)) : 0;
            int m = dminh > 0 ? MIN(15, round_int(mins[s] / dminh)) : 0;
            y[i].scales[s] = (uint8_t)(sc | m << 4);
            const float dl = dh * (float)sc, ml = dminh * (float)m;
            for (int l = 0; l < 16; l++) {
                int q = dl > 0 ? round_int((x[16 * s + l] + ml) / dl) : 0;
                L[16 * s + l] = (uint8_t)MAX(0, MIN(3, q));
            }
        }
        memset(y[i].qs, 0, sizeof y[i].qs);
        for (int e = 0; e < QK_K; e++)
            y[i].qs[32 * (e / 128) + e % 32] |= (uint8_t)(L[e] << (2 * ((e / 32) % 4)));
    }
}

void quantize_row_q3_K_ref(const float *x, block_q3_K *y, int64_t n)
{
    for (int64_t i = 0; i < n / QK_K; i++, x += QK_K) {
        /* per 16 elements a signed scale (fit_scale: the largest |x| onto -4, refined) */
        float scale[16], max_scale = 0;
        for (int s = 0; s < 16; s++) {
            scale[s] = fit_scale(x + 16 * s, 16, -4, 3);
            if (fabsf(scale[s]) > fabsf(max_scale))
                max_scale = scale[s];
        }
        const float d = max_scale / -32; /* the largest scale becomes -32 */
        y[i].d = f2h(d);
        const float dh = h2f(y[i].d);
        memset(y[i].scales, 0, sizeof y[i].scales);
        uint8_t L[QK_K];
        for (int s = 0; s < 16; s++) {
            int ls = dh != 0 ? MAX(-32, MIN(31, round_int(scale[s] / dh))) : 0;
            const int u = ls + 32;
            y[i].scales[s % 8] |= (uint8_t)((u & 0x0f) << (4 * (s / 8)));
            y[i].scales[8 + s % 4] |= (uint8_t)((u >> 4) << (2 * (s / 4)));
            const float dl = dh * (float)ls;
            for (int l = 0; l < 16; l++) {
                int q = dl != 0 ? round_int(x[16 * s + l] / dl) : 0;
                L[16 * s + l] = (uint8_t)(MAX(-4, MIN(3, q)) + 4);
            }
        }
        memset(y[i].qs, 0, sizeof y[i].qs);
        memset(y[i].hmask, 0, sizeof y[i].hmask);
        for (int e = 0; e < QK_K; e++) {
            const int h = e / 128, j = (e / 32) % 4, l = e % 32;
            y[i].qs[32 * h + l] |= (uint8_t)((L[e] & 3) << (2 * j));
            if (L[e] & 4)
                y[i].hmask[l] |= (uint8_t)(1u << (4 * h + j));
        }
    }
}

/* The iq4 level nearest to v (in units of the block scale). */
static inline int best_index_iq4nl(float v)
{
    int best = 0;
    float err = fabsf(v - kvalues_iq4nl[0]);
    for (int k = 1; k < 16; k++)
        if (fabsf(v - kvalues_iq4nl[k]) < err) {
            err = fabsf(v - kvalues_iq4nl[k]);
            best = k;
        }
    return best;
}

/* The scale of n values (an iq4_nl block or an iq4_xs sub-block): 15
 * starting scales that put the signed largest value on or near level 0
 * (-127 + t, |t| <= 7, as ggml's search), each followed by a least-squares
 * refit for the levels it picked; the refit with the largest
 * sum(x v)^2 / sum(v v) (the least squared error) wins. L gets the level
 * indices for the winning scale. */
static float iq4_fit(const float *x, int n, uint8_t *L)
{
    float amax = 0, vmax = 0;
    for (int l = 0; l < n; l++)
        if (fabsf(x[l]) > amax) {
            amax = fabsf(x[l]);
            vmax = x[l];
        }
    if (amax == 0) {
        memset(L, 8, (size_t)n); /* kvalues_iq4nl[8] = 1: times d = 0 */
        return 0;
    }
    float d = vmax / kvalues_iq4nl[0];
    double best = -1;
    for (int t = -7; t <= 7; t++) {
        const float id = (float)(kvalues_iq4nl[0] + t) / vmax;
        double sxv = 0, svv = 0;
        for (int l = 0; l < n; l++) {
            const int k = best_index_iq4nl(x[l] * id);
            sxv += (double)x[l] * kvalues_iq4nl[k];
            svv += (double)kvalues_iq4nl[k] * kvalues_iq4nl[k];
        }
        if (svv > 0 && sxv * sxv / svv > best) {
            best = sxv * sxv / svv;
            d = (float)(sxv / svv);
        }
    }
    for (int l = 0; l < n; l++)
        L[l] = (uint8_t)best_index_iq4nl(x[l] / d);
    return d;
}

void quantize_row_iq4_nl_ref(const float *x, block_iq4_nl *y, int64_t n)
{
    for (int64_t i = 0; i < n / QK4_NL; i++, x += QK4_NL) {
        uint8_t L[QK4_NL];
        const float d = iq4_fit(x, QK4_NL, L);
        y[i].d = f2h(d);
        const float dh = h2f(y[i].d);
        if (dh != 0) /* re-pick the levels for the rounded scale */
            for (int l = 0; l < QK4_NL; l++)
                L[l] = (uint8_t)best_index_iq4nl(x[l] / dh);
        for (int j = 0; j < QK4_NL / 2; j++)
            y[i].qs[j] = (uint8_t)(L[j] | L[j + QK4_NL / 2] << 4);
    }
}

void quantize_row_iq4_xs_ref(const float *x, block_iq4_xs *y, int64_t n)
{
    for (int64_t i = 0; i < n / QK_K; i++, x += QK_K) {
        uint8_t L[32];
        float scale[QK_K / 32], max_scale = 0;
        for (int b = 0; b < QK_K / 32; b++) {
            scale[b] = iq4_fit(x + 32 * b, 32, L);
            if (fabsf(scale[b]) > fabsf(max_scale))
                max_scale = scale[b];
        }
        const float d = max_scale / -32; /* the largest sub-block scale becomes -32 */
        y[i].d = f2h(d);
        const float dh = h2f(y[i].d);
        y[i].scales_h = 0;
        memset(y[i].scales_l, 0, sizeof y[i].scales_l);
        for (int b = 0; b < QK_K / 32; b++) {
            const float *xb = x + 32 * b;
            const int ls = dh != 0 ? MAX(-32, MIN(31, round_int(scale[b] / dh))) : 0;
            const int u = ls + 32;
            y[i].scales_l[b / 2] |= (uint8_t)((u & 0x0f) << (4 * (b % 2)));
            y[i].scales_h |= (uint16_t)((u >> 4) << (2 * b));
            const float dl = dh * (float)ls;
            for (int l = 0; l < 32; l++)
                L[l] = dl != 0 ? (uint8_t)best_index_iq4nl(xb[l] / dl) : 8;
            for (int j = 0; j < 16; j++)
                y[i].qs[16 * b + j] = (uint8_t)(L[j] | L[j + 16] << 4);
        }
    }
}

/* The first of the 16 E2M1 levels nearest to v at scale d (ggml's order). */
static inline int best_index_mxfp4(float v, float d)
{
    int best = 0;
    float err = fabsf((float)kvalues_mxfp4[0] * d - v);
    for (int k = 1; k < 16; k++) {
        const float e = fabsf((float)kvalues_mxfp4[k] * d - v);
        if (e < err) {
            err = e;
            best = k;
        }
    }
    return best;
}

void quantize_row_mxfp4_ref(const float *x, block_mxfp4 *y, int64_t n)
{
    for (int64_t i = 0; i < n / QK_MXFP4; i++, x += QK_MXFP4) {
        float amax = 0;
        for (int j = 0; j < QK_MXFP4; j++)
            amax = MAX(amax, fabsf(x[j]));
        /* ggml: e = floor(log2(amax)) - 2 + 127 (the largest level, 6 = 12/2,
         * lies in [4, 8)); clamped here where ggml's cast would overflow */
        int e = 0;
        if (amax > 0)
            e = MAX(0, MIN(255, (int)floorf(log2f(amax)) - 2 + 127));
        const float d = quant_e8m0_to_fp32_half((uint8_t)e);
        y[i].e = (uint8_t)e;
        for (int j = 0; j < QK_MXFP4 / 2; j++)
            y[i].qs[j] = (uint8_t)(best_index_mxfp4(x[j], d) |
                                   best_index_mxfp4(x[j + QK_MXFP4 / 2], d) << 4);
    }
}

// ---- dot products (scalar references) --------------------------------------

float vec_dot_q2_K_q8_K_ref(int64_t n, const void *w, const void *a)
{
    const block_q2_K *x = w;
    const block_q8_K *y = a;
    float s = 0.0f;
    for (int64_t i = 0; i < n / QK_K; i++) {
        int isum = 0, summs = 0;
        for (int sb = 0; sb < 16; sb++) {
            /* the min term needs only the activations' 16-sums */
            summs += y[i].bsums[sb] * (x[i].scales[sb] >> 4);
            int dot = 0;
            for (int e = 16 * sb; e < 16 * sb + 16; e++)
                dot += ((x[i].qs[32 * (e / 128) + e % 32] >> (2 * ((e / 32) % 4))) & 3) * y[i].qs[e];
            isum += (x[i].scales[sb] & 0x0f) * dot;
        }
        const float dall = y[i].d * h2f(x[i].d), dmin = y[i].d * h2f(x[i].dmin);
        s += dall * (float)isum - dmin * (float)summs;
    }
    return s;
}

float vec_dot_q3_K_q8_K_ref(int64_t n, const void *w, const void *a)
{
    const block_q3_K *x = w;
    const block_q8_K *y = a;
    float s = 0.0f;
    for (int64_t i = 0; i < n / QK_K; i++) {
        int8_t sc[16];
        quant_q3_K_scales(x[i].scales, sc);
        int isum = 0;
        for (int sb = 0; sb < 16; sb++) {
            int dot = 0;
            for (int e = 16 * sb; e < 16 * sb + 16; e++) {
                const int h = e / 128, j = (e / 32) % 4, l = e % 32;
                const int q = ((x[i].qs[32 * h + l] >> (2 * j)) & 3) -
                              ((x[i].hmask[l] >> (4 * h + j)) & 1 ? 0 : 4);
                dot += q * y[i].qs[e];
            }
            isum += sc[sb] * dot;
        }
        s += h2f(x[i].d) * y[i].d * (float)isum;
    }
    return s;
}

float vec_dot_iq4_xs_q8_K_ref(int64_t n, const void *w, const void *a)
{
    const block_iq4_xs *x = w;
    const block_q8_K *y = a;
    float s = 0.0f;
    for (int64_t i = 0; i < n / QK_K; i++) {
        int isum = 0;
        for (int b = 0; b < QK_K / 32; b++) {
            const uint8_t *qs = x[i].qs + 16 * b;
            const int8_t *p = y[i].qs + 32 * b;
            int dot = 0;
            for (int j = 0; j < 16; j++)
                dot += kvalues_iq4nl[qs[j] & 0x0f] * p[j] + kvalues_iq4nl[qs[j] >> 4] * p[j + 16];
            isum += (iq4_xs_scale(&x[i], b) - 32) * dot;
        }
        s += h2f(x[i].d) * y[i].d * (float)isum;
    }
    return s;
}

float vec_dot_iq4_nl_q8_0_ref(int64_t n, const void *w, const void *a)
{
    const block_iq4_nl *x = w;
    const block_q8_0 *y = a;
    float s = 0.0f;
    for (int64_t i = 0; i < n / QK8_0; i++) {
        int sumi = 0;
        for (int j = 0; j < QK8_0 / 2; j++)
            sumi += kvalues_iq4nl[x[i].qs[j] & 0x0f] * y[i].qs[j] +
                    kvalues_iq4nl[x[i].qs[j] >> 4] * y[i].qs[j + QK8_0 / 2];
        s += h2f(x[i].d) * h2f(y[i].d) * (float)sumi;
    }
    return s;
}

float vec_dot_mxfp4_q8_0_ref(int64_t n, const void *w, const void *a)
{
    const block_mxfp4 *x = w;
    const block_q8_0 *y = a;
    float s = 0.0f;
    for (int64_t i = 0; i < n / QK8_0; i++) {
        int sumi = 0;
        for (int j = 0; j < QK8_0 / 2; j++)
            sumi += kvalues_mxfp4[x[i].qs[j] & 0x0f] * y[i].qs[j] +
                    kvalues_mxfp4[x[i].qs[j] >> 4] * y[i].qs[j + QK8_0 / 2];
        s += quant_e8m0_to_fp32_half(x[i].e) * h2f(y[i].d) * (float)sumi;
    }
    return s;
}

// ---- registration ----------------------------------------------------------

#define TO_FLOAT(fn) ((omni_to_float_fn)(void (*)(void))(fn))
#define FROM_FLOAT(fn) ((omni_from_float_fn)(void (*)(void))(fn))

void quant_lowbit_register(struct omni_quant_ops ops[GGML_TYPE_COUNT])
{
    const omni_from_float_fn q8_K = FROM_FLOAT(quantize_row_q8_K_ref);
    const omni_from_float_fn q8_0 = FROM_FLOAT(quantize_row_q8_0_ref);
    ops[GGML_TYPE_Q2_K] = (struct omni_quant_ops){ .dot_type = GGML_TYPE_Q8_K, .from_float = q8_K,
                                                   .vec_dot = vec_dot_q2_K_q8_K_ref, .to_float = TO_FLOAT(dequantize_row_q2_K) };
    ops[GGML_TYPE_Q3_K] = (struct omni_quant_ops){ .dot_type = GGML_TYPE_Q8_K, .from_float = q8_K,
                                                   .vec_dot = vec_dot_q3_K_q8_K_ref, .to_float = TO_FLOAT(dequantize_row_q3_K) };
    ops[GGML_TYPE_IQ4_XS] = (struct omni_quant_ops){ .dot_type = GGML_TYPE_Q8_K, .from_float = q8_K,
                                                     .vec_dot = vec_dot_iq4_xs_q8_K_ref, .to_float = TO_FLOAT(dequantize_row_iq4_xs) };
    ops[GGML_TYPE_IQ4_NL] = (struct omni_quant_ops){ .dot_type = GGML_TYPE_Q8_0, .from_float = q8_0,
                                                     .vec_dot = vec_dot_iq4_nl_q8_0_ref, .to_float = TO_FLOAT(dequantize_row_iq4_nl) };
    ops[GGML_TYPE_MXFP4] = (struct omni_quant_ops){ .dot_type = GGML_TYPE_Q8_0, .from_float = q8_0,
                                                    .vec_dot = vec_dot_mxfp4_q8_0_ref, .to_float = TO_FLOAT(dequantize_row_mxfp4) };
}

omni_from_float_fn quant_lowbit_quantizer(int type)
{
    switch (type) {
    case GGML_TYPE_Q2_K: return FROM_FLOAT(quantize_row_q2_K_ref);
    case GGML_TYPE_Q3_K: return FROM_FLOAT(quantize_row_q3_K_ref);
    case GGML_TYPE_IQ4_NL: return FROM_FLOAT(quantize_row_iq4_nl_ref);
    case GGML_TYPE_IQ4_XS: return FROM_FLOAT(quantize_row_iq4_xs_ref);
    case GGML_TYPE_MXFP4: return FROM_FLOAT(quantize_row_mxfp4_ref);
    default: return NULL;
    }
}
