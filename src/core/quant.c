/* quant.c - scalar reference (de)quantizers and dot products for the ggml
 * block types, and the per-level kernel tables that SIMD variants override.
 * Dequantization is bit-exact with GGML's formulas (checked against gguf-py
 * fixtures); the weight quantizers for the 32-element types produce the same
 * bytes as ggml's reference quantizers. */
#include "quant.h"

#include "cpu.h"
#include "quant_lowbit.h"
#include "omni.h"
#include "tensor.h"

#include <math.h>
#include <pthread.h>
#include <string.h>

#if defined(__x86_64__)
#include "arch/x86/x86.h"
#endif


/* y = d*q - m must be two roundings, as in ggml's scalar code and gguf-py:
 * a fused multiply-add would change the last bit of dequantized weights. */
#pragma GCC optimize("fp-contract=off")

static inline float h2f(ggml_half h)
{
    _Float16 f;
    memcpy(&f, &h, 2);
    return (float)f;
}

static inline ggml_half f2h(float x)
{
    _Float16 f = (_Float16)x;
    ggml_half h;
    memcpy(&h, &f, 2);
    return h;
}

/* Round half to even, for |x| < 2^22 (K-quant scale fitting). */
static inline int nearest_int(float x)
{
    return (int)lrintf(x);
}

#define MIN(a, b) ((a) < (b) ? (a) : (b))
#define MAX(a, b) ((a) > (b) ? (a) : (b))

// ---- dequantization --------------------------------------------------------

OMNI_CLONES void dequantize_row_f16(const ggml_half *x, float *y, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        y[i] = h2f(x[i]);
}

OMNI_CLONES void dequantize_row_bf16(const uint16_t *x, float *y, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        y[i] = omni_bf16_to_fp32(x[i]);
}

OMNI_CLONES void dequantize_row_q4_0(const block_q4_0 *x, float *y, int64_t n)
{
    for (int64_t i = 0; i < n / QK4_0; i++, y += QK4_0) {
        const float d = h2f(x[i].d);
        for (int j = 0; j < QK4_0 / 2; j++) {
            y[j] = d * (float)((x[i].qs[j] & 0x0f) - 8);
            y[j + QK4_0 / 2] = d * (float)((x[i].qs[j] >> 4) - 8);
        }
    }
}

OMNI_CLONES void dequantize_row_q4_1(const block_q4_1 *x, float *y, int64_t n)
{
    for (int64_t i = 0; i < n / QK4_1; i++, y += QK4_1) {
        const float d = h2f(x[i].d), m = h2f(x[i].m);
        for (int j = 0; j < QK4_1 / 2; j++) {
            y[j] = d * (float)(x[i].qs[j] & 0x0f) + m;
            y[j + QK4_1 / 2] = d * (float)(x[i].qs[j] >> 4) + m;
        }
    }
}

OMNI_CLONES void dequantize_row_q5_0(const block_q5_0 *x, float *y, int64_t n)
{
    for (int64_t i = 0; i < n / QK5_0; i++, y += QK5_0) {
        const float d = h2f(x[i].d);
        uint32_t qh;
        memcpy(&qh, x[i].qh, 4);
        for (int j = 0; j < QK5_0 / 2; j++) {
            int h0 = (qh >> j) & 1, h1 = (qh >> (j + 16)) & 1;
            y[j] = d * (float)(((x[i].qs[j] & 0x0f) | (h0 << 4)) - 16);
            y[j + QK5_0 / 2] = d * (float)(((x[i].qs[j] >> 4) | (h1 << 4)) - 16);
        }
    }
}

OMNI_CLONES void dequantize_row_q5_1(const block_q5_1 *x, float *y, int64_t n)
{
    for (int64_t i = 0; i < n / QK5_1; i++, y += QK5_1) {
        const float d = h2f(x[i].d), m = h2f(x[i].m);
        uint32_t qh;
        memcpy(&qh, x[i].qh, 4);
        for (int j = 0; j < QK5_1 / 2; j++) {
            int h0 = (qh >> j) & 1, h1 = (qh >> (j + 16)) & 1;
            y[j] = d * (float)((x[i].qs[j] & 0x0f) | (h0 << 4)) + m;
            y[j + QK5_1 / 2] = d * (float)((x[i].qs[j] >> 4) | (h1 << 4)) + m;
        }
    }
}

OMNI_CLONES void dequantize_row_q8_0(const block_q8_0 *x, float *y, int64_t n)
{
    for (int64_t i = 0; i < n / QK8_0; i++, y += QK8_0) {
        const float d = h2f(x[i].d);
        for (int j = 0; j < QK8_0; j++)
            y[j] = (float)x[i].qs[j] * d;
    }
}

/* The 8 6-bit scales and mins of a q4_K/q5_K block: bytes 0-3 hold scales
 * 0-3 (low 6 bits) and the top 2 bits of scales 4-7; bytes 4-7 the same for
 * mins; bytes 8-11 the low nibbles of scale (low) and min (high) 4-7. */
static inline void get_scale_min_k4(int j, const uint8_t *q, uint8_t *sc, uint8_t *m)
{
    if (j < 4) {
        *sc = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *sc = (q[j + 4] & 0x0f) | ((q[j - 4] >> 6) << 4);
        *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
    }
}

OMNI_CLONES void dequantize_row_q4_K(const block_q4_K *x, float *y, int64_t n)
{
    for (int64_t i = 0; i < n / QK_K; i++) {
        const uint8_t *q = x[i].qs;
        const float d = h2f(x[i].d), dmin = h2f(x[i].dmin);
        for (int j = 0; j < QK_K / 64; j++, q += 32) {
            uint8_t sc, m;
            get_scale_min_k4(2 * j, x[i].scales, &sc, &m);
            const float d1 = d * sc, m1 = dmin * m;
            get_scale_min_k4(2 * j + 1, x[i].scales, &sc, &m);
            const float d2 = d * sc, m2 = dmin * m;
            for (int l = 0; l < 32; l++)
                *y++ = d1 * (float)(q[l] & 0x0f) - m1;
            for (int l = 0; l < 32; l++)
                *y++ = d2 * (float)(q[l] >> 4) - m2;
        }
    }
}

OMNI_CLONES void dequantize_row_q5_K(const block_q5_K *x, float *y, int64_t n)
{
    for (int64_t i = 0; i < n / QK_K; i++) {
        const uint8_t *ql = x[i].qs, *qh = x[i].qh;
        const float d = h2f(x[i].d), dmin = h2f(x[i].dmin);
        for (int j = 0; j < QK_K / 64; j++, ql += 32) {
            uint8_t sc, m;
            get_scale_min_k4(2 * j, x[i].scales, &sc, &m);
            const float d1 = d * sc, m1 = dmin * m;
            get_scale_min_k4(2 * j + 1, x[i].scales, &sc, &m);
            const float d2 = d * sc, m2 = dmin * m;
            const uint8_t u1 = (uint8_t)(1u << (2 * j)), u2 = (uint8_t)(2u << (2 * j));
            for (int l = 0; l < 32; l++)
                *y++ = d1 * (float)((ql[l] & 0x0f) + (qh[l] & u1 ? 16 : 0)) - m1;
            for (int l = 0; l < 32; l++)
                *y++ = d2 * (float)((ql[l] >> 4) + (qh[l] & u2 ? 16 : 0)) - m2;
        }
    }
}

OMNI_CLONES void dequantize_row_q6_K(const block_q6_K *x, float *y, int64_t n)
{
    for (int64_t i = 0; i < n / QK_K; i++) {
        const float d = h2f(x[i].d);
        const uint8_t *ql = x[i].ql, *qh = x[i].qh;
        const int8_t *sc = x[i].scales;
        /* Two halves of 128: ql low nibbles give elements 0-63, high nibbles
         * 64-127; qh bit pairs 0,2,4,6 extend the four groups of 32. */
        for (int half = 0; half < 2; half++, y += 128, ql += 64, qh += 32, sc += 8) {
            for (int l = 0; l < 32; l++) {
                int is = l / 16;
                int q1 = ((ql[l] & 0x0f) | (((qh[l] >> 0) & 3) << 4)) - 32;
                int q2 = ((ql[l + 32] & 0x0f) | (((qh[l] >> 2) & 3) << 4)) - 32;
                int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
                int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
                y[l] = d * sc[is] * (float)q1;
                y[l + 32] = d * sc[is + 2] * (float)q2;
                y[l + 64] = d * sc[is + 4] * (float)q3;
                y[l + 96] = d * sc[is + 6] * (float)q4;
            }
        }
    }
}

OMNI_CLONES void dequantize_row_q8_K(const block_q8_K *x, float *y, int64_t n)
{
    for (int64_t i = 0; i < n / QK_K; i++)
        for (int j = 0; j < QK_K; j++)
            *y++ = x[i].d * (float)x[i].qs[j];
}

// ---- quantization ----------------------------------------------------------

void quantize_row_f16_ref(const float *x, ggml_half *y, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        y[i] = f2h(x[i]);
}

void quantize_row_bf16_ref(const float *x, uint16_t *y, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        y[i] = omni_fp32_to_bf16(x[i]);
}

/* The element of largest magnitude (the first one on ties), sign kept. */
static float signed_absmax(const float *x, int n)
{
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < n; j++)
        if (amax < fabsf(x[j])) {
            amax = fabsf(x[j]);
            max = x[j];
        }
    return max;
}

void quantize_row_q4_0_ref(const float *x, block_q4_0 *y, int64_t n)
{
    for (int64_t i = 0; i < n / QK4_0; i++, x += QK4_0) {
        /* d = max/-8 maps the extreme value to q = 0 and keeps 15 levels for the rest */
        const float d = signed_absmax(x, QK4_0) / -8;
        const float id = d ? 1.0f / d : 0.0f;
        y[i].d = f2h(d);
        for (int j = 0; j < QK4_0 / 2; j++) {
            const float x0 = x[j] * id, x1 = x[QK4_0 / 2 + j] * id;
            const uint8_t q0 = (uint8_t)MIN(15, (int8_t)(x0 + 8.5f));
            const uint8_t q1 = (uint8_t)MIN(15, (int8_t)(x1 + 8.5f));
            y[i].qs[j] = (uint8_t)(q0 | (q1 << 4));
        }
    }
}

void quantize_row_q4_1_ref(const float *x, block_q4_1 *y, int64_t n)
{
    for (int64_t i = 0; i < n / QK4_1; i++, x += QK4_1) {
        float min = INFINITY, max = -INFINITY;
        for (int j = 0; j < QK4_1; j++) {
            min = MIN(min, x[j]);
            max = MAX(max, x[j]);
        }
        const float d = (max - min) / 15;
        const float id = d ? 1.0f / d : 0.0f;
        y[i].d = f2h(d);
        y[i].m = f2h(min);
        for (int j = 0; j < QK4_1 / 2; j++) {
            const float x0 = (x[j] - min) * id, x1 = (x[QK4_1 / 2 + j] - min) * id;
            const uint8_t q0 = (uint8_t)MIN(15, (int8_t)(x0 + 0.5f));
            const uint8_t q1 = (uint8_t)MIN(15, (int8_t)(x1 + 0.5f));
            y[i].qs[j] = (uint8_t)(q0 | (q1 << 4));
        }
    }
}

void quantize_row_q5_0_ref(const float *x, block_q5_0 *y, int64_t n)
{
    for (int64_t i = 0; i < n / QK5_0; i++, x += QK5_0) {
        const float d = signed_absmax(x, QK5_0) / -16;
        const float id = d ? 1.0f / d : 0.0f;
        uint32_t qh = 0;
        y[i].d = f2h(d);
        for (int j = 0; j < QK5_0 / 2; j++) {
            const float x0 = x[j] * id, x1 = x[QK5_0 / 2 + j] * id;
            const uint8_t q0 = (uint8_t)MIN(31, (int8_t)(x0 + 16.5f));
            const uint8_t q1 = (uint8_t)MIN(31, (int8_t)(x1 + 16.5f));
            y[i].qs[j] = (uint8_t)((q0 & 0x0f) | ((q1 & 0x0f) << 4));
            qh |= (uint32_t)(q0 >> 4) << j;
            qh |= (uint32_t)(q1 >> 4) << (j + QK5_0 / 2);
        }
        memcpy(y[i].qh, &qh, 4);
    }
}

void quantize_row_q5_1_ref(const float *x, block_q5_1 *y, int64_t n)
{
    for (int64_t i = 0; i < n / QK5_1; i++, x += QK5_1) {
        float min = INFINITY, max = -INFINITY;
        for (int j = 0; j < QK5_1; j++) {
            min = MIN(min, x[j]);
            max = MAX(max, x[j]);
        }
        const float d = (max - min) / 31;
        const float id = d ? 1.0f / d : 0.0f;
        uint32_t qh = 0;
        y[i].d = f2h(d);
        y[i].m = f2h(min);
        for (int j = 0; j < QK5_1 / 2; j++) {
            const float x0 = (x[j] - min) * id, x1 = (x[QK5_1 / 2 + j] - min) * id;
            const uint8_t q0 = (uint8_t)(x0 + 0.5f), q1 = (uint8_t)(x1 + 0.5f);
            y[i].qs[j] = (uint8_t)((q0 & 0x0f) | ((q1 & 0x0f) << 4));
            qh |= (uint32_t)(q0 >> 4) << j;
            qh |= (uint32_t)(q1 >> 4) << (j + QK5_1 / 2);
        }
        memcpy(y[i].qh, &qh, 4);
    }
}

void quantize_row_q8_0_ref(const float *x, block_q8_0 *y, int64_t n)
{
    for (int64_t i = 0; i < n / QK8_0; i++, x += QK8_0) {
        float amax = 0.0f;
        for (int j = 0; j < QK8_0; j++)
            amax = MAX(amax, fabsf(x[j]));
        const float d = amax / 127;
        const float id = d ? 1.0f / d : 0.0f;
        y[i].d = f2h(d);
        for (int j = 0; j < QK8_0; j++)
            y[i].qs[j] = (int8_t)roundf(x[j] * id);
    }
}

void quantize_row_q8_1_ref(const float *x, block_q8_1 *y, int64_t n)
{
    for (int64_t i = 0; i < n / QK8_1; i++, x += QK8_1) {
        float amax = 0.0f;
        for (int j = 0; j < QK8_1; j++)
            amax = MAX(amax, fabsf(x[j]));
        const float d = amax / 127;
        const float id = d ? 1.0f / d : 0.0f;
        int sum = 0;
        y[i].d = f2h(d);
        for (int j = 0; j < QK8_1; j++) {
            y[i].qs[j] = (int8_t)roundf(x[j] * id);
            sum += y[i].qs[j];
        }
        y[i].s = f2h((float)sum * d);
    }
}

void quantize_row_q8_K_ref(const float *x, block_q8_K *y, int64_t n)
{
    for (int64_t i = 0; i < n / QK_K; i++, x += QK_K) {
        const float max = signed_absmax(x, QK_K);
        if (max == 0.0f) {
            memset(&y[i], 0, sizeof y[i]);
            continue;
        }
        /* -127/max (not -128) keeps every q in [-127, 127] */
        const float iscale = -127.f / max;
        for (int j = 0; j < QK_K; j++)
            y[i].qs[j] = (int8_t)MIN(127, nearest_int(iscale * x[j]));
        for (int j = 0; j < QK_K / 16; j++) {
            int sum = 0;
            for (int l = 0; l < 16; l++)
                sum += y[i].qs[16 * j + l];
            y[i].bsums[j] = (int16_t)sum;
        }
        y[i].d = 1 / iscale;
    }
}

/* Fit x[32] as d*q - m with q in [0, nmax], m >= 0 (the K-quant sub-block
 * form); returns the scale d and writes the offset m. */
static float fit_min_max(const float *x, int nmax, float *m)
{
    float lo = 0.0f, hi = 0.0f; /* the range always includes 0: m >= 0 */
    for (int l = 0; l < 32; l++) {
        lo = MIN(lo, x[l]);
        hi = MAX(hi, x[l]);
    }
    *m = -lo;
    return (hi - lo) / nmax;
}

/* Shared by q4_K and q5_K: per-sub-block scales/mins quantized to 6 bits
 * against the block's d and dmin, then L[256] in [0, nmax]. */
static void quantize_k_scales(const float *x, int nmax, ggml_half *dh, ggml_half *dminh,
                              uint8_t scales[K_SCALE_SIZE], uint8_t *L)
{
    float sc[QK_K / 32], mn[QK_K / 32], max_sc = 0.0f, max_mn = 0.0f;
    uint8_t isc[QK_K / 32], imn[QK_K / 32];
    for (int j = 0; j < QK_K / 32; j++) {
        sc[j] = fit_min_max(x + 32 * j, nmax, &mn[j]);
        max_sc = MAX(max_sc, sc[j]);
        max_mn = MAX(max_mn, mn[j]);
    }
    const float inv_sc = max_sc > 0 ? 63.f / max_sc : 0.0f;
    const float inv_mn = max_mn > 0 ? 63.f / max_mn : 0.0f;
    for (int j = 0; j < QK_K / 32; j++) {
        isc[j] = (uint8_t)MIN(63, nearest_int(inv_sc * sc[j]));
        imn[j] = (uint8_t)MIN(63, nearest_int(inv_mn * mn[j]));
    }
    for (int j = 0; j < 4; j++) {
        scales[j] = (uint8_t)(isc[j] | ((isc[j + 4] >> 4) << 6));
        scales[j + 4] = (uint8_t)(imn[j] | ((imn[j + 4] >> 4) << 6));
        scales[j + 8] = (uint8_t)((isc[j + 4] & 0x0f) | ((imn[j + 4] & 0x0f) << 4));
    }
    *dh = f2h(max_sc / 63.f);
    *dminh = f2h(max_mn / 63.f);
    /* quantize against the stored (rounded) scales so dequantization matches */
    const float d = h2f(*dh), dmin = h2f(*dminh);
    for (int j = 0; j < QK_K / 32; j++) {
        uint8_t s, m;
        get_scale_min_k4(j, scales, &s, &m);
        const float ds = d * s, dm = dmin * m;
        for (int l = 0; l < 32; l++) {
            int q = ds ? nearest_int((x[32 * j + l] + dm) / ds) : 0;
            L[32 * j + l] = (uint8_t)MAX(0, MIN(nmax, q));
        }
    }
}

void quantize_row_q4_K_ref(const float *x, block_q4_K *y, int64_t n)
{
    uint8_t L[QK_K];
    for (int64_t i = 0; i < n / QK_K; i++, x += QK_K) {
        quantize_k_scales(x, 15, &y[i].d, &y[i].dmin, y[i].scales, L);
        for (int j = 0; j < QK_K / 64; j++)
            for (int l = 0; l < 32; l++)
                y[i].qs[32 * j + l] = (uint8_t)(L[64 * j + l] | (L[64 * j + 32 + l] << 4));
    }
}

void quantize_row_q5_K_ref(const float *x, block_q5_K *y, int64_t n)
{
    uint8_t L[QK_K];
    for (int64_t i = 0; i < n / QK_K; i++, x += QK_K) {
        quantize_k_scales(x, 31, &y[i].d, &y[i].dmin, y[i].scales, L);
        memset(y[i].qh, 0, sizeof y[i].qh);
        for (int j = 0; j < QK_K / 64; j++)
            for (int l = 0; l < 32; l++) {
                uint8_t lo = L[64 * j + l], hi = L[64 * j + 32 + l];
                y[i].qs[32 * j + l] = (uint8_t)((lo & 0x0f) | ((hi & 0x0f) << 4));
                y[i].qh[l] |= (uint8_t)(((lo >> 4) << (2 * j)) | ((hi >> 4) << (2 * j + 1)));
            }
    }
}

void quantize_row_q6_K_ref(const float *x, block_q6_K *y, int64_t n)
{
    int8_t L[QK_K];
    for (int64_t i = 0; i < n / QK_K; i++, x += QK_K) {
        float sc[QK_K / 16], max_sc = 0.0f, smax = 0.0f;
        for (int j = 0; j < QK_K / 16; j++) {
            sc[j] = signed_absmax(x + 16 * j, 16) / -32; /* q in [-32, 31] */
            if (fabsf(sc[j]) > max_sc) {
                max_sc = fabsf(sc[j]);
                smax = sc[j];
            }
        }
        const float iscale = smax ? -128.f / smax : 0.0f;
        y[i].d = f2h(smax ? 1 / iscale : 0.0f);
        const float d = h2f(y[i].d);
        for (int j = 0; j < QK_K / 16; j++) {
            y[i].scales[j] = (int8_t)MAX(-128, MIN(127, nearest_int(iscale * sc[j])));
            const float ds = d * y[i].scales[j];
            for (int l = 0; l < 16; l++) {
                int q = ds ? nearest_int(x[16 * j + l] / ds) : 0;
                L[16 * j + l] = (int8_t)(MAX(-32, MIN(31, q)) + 32);
            }
        }
        uint8_t *ql = y[i].ql, *qh = y[i].qh;
        for (int half = 0; half < 2; half++, ql += 64, qh += 32) {
            const int8_t *Lh = L + 128 * half;
            for (int l = 0; l < 32; l++) {
                uint8_t q1 = (uint8_t)Lh[l], q2 = (uint8_t)Lh[l + 32];
                uint8_t q3 = (uint8_t)Lh[l + 64], q4 = (uint8_t)Lh[l + 96];
                ql[l] = (uint8_t)((q1 & 0x0f) | ((q3 & 0x0f) << 4));
                ql[l + 32] = (uint8_t)((q2 & 0x0f) | ((q4 & 0x0f) << 4));
                qh[l] = (uint8_t)((q1 >> 4) | ((q2 >> 4) << 2) | ((q3 >> 4) << 4) | ((q4 >> 4) << 6));
            }
        }
    }
}

// ---- dot products (scalar references) --------------------------------------

float vec_dot_f32_f32_ref(int64_t n, const void *w, const void *a)
{
    const float *x = w, *y = a;
    float s = 0.0f;
    for (int64_t i = 0; i < n; i++)
        s += x[i] * y[i];
    return s;
}

float vec_dot_f16_f32_ref(int64_t n, const void *w, const void *a)
{
    const ggml_half *x = w;
    const float *y = a;
    float s = 0.0f;
    for (int64_t i = 0; i < n; i++)
        s += h2f(x[i]) * y[i];
    return s;
}

float vec_dot_bf16_f32_ref(int64_t n, const void *w, const void *a)
{
    const uint16_t *x = w;
    const float *y = a;
    float s = 0.0f;
    for (int64_t i = 0; i < n; i++)
        s += omni_bf16_to_fp32(x[i]) * y[i];
    return s;
}

float vec_dot_q4_0_q8_0_ref(int64_t n, const void *w, const void *a)
{
    const block_q4_0 *x = w;
    const block_q8_0 *y = a;
    float s = 0.0f;
    for (int64_t i = 0; i < n / QK8_0; i++) {
        int sumi = 0;
        for (int j = 0; j < QK8_0 / 2; j++)
            sumi += ((x[i].qs[j] & 0x0f) - 8) * y[i].qs[j] +
                    ((x[i].qs[j] >> 4) - 8) * y[i].qs[j + QK8_0 / 2];
        s += (float)sumi * (h2f(x[i].d) * h2f(y[i].d));
    }
    return s;
}

float vec_dot_q4_1_q8_1_ref(int64_t n, const void *w, const void *a)
{
    const block_q4_1 *x = w;
    const block_q8_1 *y = a;
    float s = 0.0f;
    for (int64_t i = 0; i < n / QK8_1; i++) {
        int sumi = 0;
        for (int j = 0; j < QK8_1 / 2; j++)
            sumi += (x[i].qs[j] & 0x0f) * y[i].qs[j] + (x[i].qs[j] >> 4) * y[i].qs[j + QK8_1 / 2];
        /* the min term: m * sum(d_y * q_y) = m * s_y */
        s += (float)sumi * (h2f(x[i].d) * h2f(y[i].d)) + h2f(x[i].m) * h2f(y[i].s);
    }
    return s;
}

float vec_dot_q5_0_q8_0_ref(int64_t n, const void *w, const void *a)
{
    const block_q5_0 *x = w;
    const block_q8_0 *y = a;
    float s = 0.0f;
    for (int64_t i = 0; i < n / QK8_0; i++) {
        uint32_t qh;
        memcpy(&qh, x[i].qh, 4);
        int sumi = 0;
        for (int j = 0; j < QK8_0 / 2; j++) {
            int q0 = ((x[i].qs[j] & 0x0f) | (((qh >> j) & 1) << 4)) - 16;
            int q1 = ((x[i].qs[j] >> 4) | (((qh >> (j + 16)) & 1) << 4)) - 16;
            sumi += q0 * y[i].qs[j] + q1 * y[i].qs[j + QK8_0 / 2];
        }
        s += (float)sumi * (h2f(x[i].d) * h2f(y[i].d));
    }
    return s;
}

float vec_dot_q5_1_q8_1_ref(int64_t n, const void *w, const void *a)
{
    const block_q5_1 *x = w;
    const block_q8_1 *y = a;
    float s = 0.0f;
    for (int64_t i = 0; i < n / QK8_1; i++) {
        uint32_t qh;
        memcpy(&qh, x[i].qh, 4);
        int sumi = 0;
        for (int j = 0; j < QK8_1 / 2; j++) {
            int q0 = (x[i].qs[j] & 0x0f) | (((qh >> j) & 1) << 4);
            int q1 = (x[i].qs[j] >> 4) | (((qh >> (j + 16)) & 1) << 4);
            sumi += q0 * y[i].qs[j] + q1 * y[i].qs[j + QK8_1 / 2];
        }
        s += (float)sumi * (h2f(x[i].d) * h2f(y[i].d)) + h2f(x[i].m) * h2f(y[i].s);
    }
    return s;
}

float vec_dot_q8_0_q8_0_ref(int64_t n, const void *w, const void *a)
{
    const block_q8_0 *x = w;
    const block_q8_0 *y = a;
    float s = 0.0f;
    for (int64_t i = 0; i < n / QK8_0; i++) {
        int sumi = 0;
        for (int j = 0; j < QK8_0; j++)
            sumi += x[i].qs[j] * y[i].qs[j];
        s += (float)sumi * (h2f(x[i].d) * h2f(y[i].d));
    }
    return s;
}

float vec_dot_q4_K_q8_K_ref(int64_t n, const void *w, const void *a)
{
    const block_q4_K *x = w;
    const block_q8_K *y = a;
    float s = 0.0f;
    for (int64_t i = 0; i < n / QK_K; i++) {
        const uint8_t *q = x[i].qs;
        const int8_t *p = y[i].qs;
        int sumi = 0, summ = 0;
        for (int j = 0; j < QK_K / 32; j++) {
            uint8_t sc, m;
            get_scale_min_k4(j, x[i].scales, &sc, &m);
            const uint8_t *qj = q + 32 * (j / 2);
            const int shift = (j & 1) * 4;
            int dot = 0;
            for (int l = 0; l < 32; l++)
                dot += ((qj[l] >> shift) & 0x0f) * p[32 * j + l];
            sumi += sc * dot;
            /* sum of the activations of sub-block j from the two 16-sums */
            summ += m * (y[i].bsums[2 * j] + y[i].bsums[2 * j + 1]);
        }
        s += y[i].d * (h2f(x[i].d) * (float)sumi - h2f(x[i].dmin) * (float)summ);
    }
    return s;
}

float vec_dot_q5_K_q8_K_ref(int64_t n, const void *w, const void *a)
{
    const block_q5_K *x = w;
    const block_q8_K *y = a;
    float s = 0.0f;
    for (int64_t i = 0; i < n / QK_K; i++) {
        const int8_t *p = y[i].qs;
        int sumi = 0, summ = 0;
        for (int j = 0; j < QK_K / 32; j++) {
            uint8_t sc, m;
            get_scale_min_k4(j, x[i].scales, &sc, &m);
            const uint8_t *qj = x[i].qs + 32 * (j / 2);
            const int shift = (j & 1) * 4;
            int dot = 0;
            for (int l = 0; l < 32; l++) {
                int q = ((qj[l] >> shift) & 0x0f) | (((x[i].qh[l] >> j) & 1) << 4);
                dot += q * p[32 * j + l];
            }
            sumi += sc * dot;
            summ += m * (y[i].bsums[2 * j] + y[i].bsums[2 * j + 1]);
        }
        s += y[i].d * (h2f(x[i].d) * (float)sumi - h2f(x[i].dmin) * (float)summ);
    }
    return s;
}

float vec_dot_q6_K_q8_K_ref(int64_t n, const void *w, const void *a)
{
    const block_q6_K *x = w;
    const block_q8_K *y = a;
    float s = 0.0f;
    for (int64_t i = 0; i < n / QK_K; i++) {
        const int8_t *p = y[i].qs;
        int sumi = 0;
        for (int half = 0; half < 2; half++) {
            const uint8_t *ql = x[i].ql + 64 * half, *qh = x[i].qh + 32 * half;
            const int8_t *sc = x[i].scales + 8 * half;
            const int8_t *ph = p + 128 * half;
            for (int l = 0; l < 32; l++) {
                int is = l / 16;
                int q1 = ((ql[l] & 0x0f) | (((qh[l] >> 0) & 3) << 4)) - 32;
                int q2 = ((ql[l + 32] & 0x0f) | (((qh[l] >> 2) & 3) << 4)) - 32;
                int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
                int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
                sumi += sc[is] * q1 * ph[l] + sc[is + 2] * q2 * ph[l + 32] +
                        sc[is + 4] * q3 * ph[l + 64] + sc[is + 6] * q4 * ph[l + 96];
            }
        }
        s += y[i].d * h2f(x[i].d) * (float)sumi;
    }
    return s;
}

// ---- generic entry points and kernel tables --------------------------------

static void to_float_f32(const void *x, float *y, int64_t n)
{
    memcpy(y, x, (size_t)n * sizeof(float));
}

static void from_float_f32(const float *x, void *y, int64_t n)
{
    memcpy(y, x, (size_t)n * sizeof(float));
}

#define TO_FLOAT(fn) ((omni_to_float_fn)(void (*)(void))(fn))
#define FROM_FLOAT(fn) ((omni_from_float_fn)(void (*)(void))(fn))

static const struct omni_quant_ops scalar_ops[GGML_TYPE_COUNT] = {
    [GGML_TYPE_F32] = { GGML_TYPE_F32, NULL, vec_dot_f32_f32_ref, to_float_f32 },
    [GGML_TYPE_F16] = { GGML_TYPE_F32, NULL, vec_dot_f16_f32_ref, TO_FLOAT(dequantize_row_f16) },
    [GGML_TYPE_BF16] = { GGML_TYPE_F32, NULL, vec_dot_bf16_f32_ref, TO_FLOAT(dequantize_row_bf16) },
    [GGML_TYPE_Q4_0] = { GGML_TYPE_Q8_0, FROM_FLOAT(quantize_row_q8_0_ref), vec_dot_q4_0_q8_0_ref,
                         TO_FLOAT(dequantize_row_q4_0) },
    [GGML_TYPE_Q4_1] = { GGML_TYPE_Q8_1, FROM_FLOAT(quantize_row_q8_1_ref), vec_dot_q4_1_q8_1_ref,
                         TO_FLOAT(dequantize_row_q4_1) },
    [GGML_TYPE_Q5_0] = { GGML_TYPE_Q8_0, FROM_FLOAT(quantize_row_q8_0_ref), vec_dot_q5_0_q8_0_ref,
                         TO_FLOAT(dequantize_row_q5_0) },
    [GGML_TYPE_Q5_1] = { GGML_TYPE_Q8_1, FROM_FLOAT(quantize_row_q8_1_ref), vec_dot_q5_1_q8_1_ref,
                         TO_FLOAT(dequantize_row_q5_1) },
    [GGML_TYPE_Q8_0] = { GGML_TYPE_Q8_0, FROM_FLOAT(quantize_row_q8_0_ref), vec_dot_q8_0_q8_0_ref,
                         TO_FLOAT(dequantize_row_q8_0) },
    [GGML_TYPE_Q4_K] = { GGML_TYPE_Q8_K, FROM_FLOAT(quantize_row_q8_K_ref), vec_dot_q4_K_q8_K_ref,
                         TO_FLOAT(dequantize_row_q4_K) },
    [GGML_TYPE_Q5_K] = { GGML_TYPE_Q8_K, FROM_FLOAT(quantize_row_q8_K_ref), vec_dot_q5_K_q8_K_ref,
                         TO_FLOAT(dequantize_row_q5_K) },
    [GGML_TYPE_Q6_K] = { GGML_TYPE_Q8_K, FROM_FLOAT(quantize_row_q8_K_ref), vec_dot_q6_K_q8_K_ref,
                         TO_FLOAT(dequantize_row_q6_K) },
};

/* ops_table[level] = scalar_ops with the SIMD kernels of every level up to
 * it patched in; levels above what the CPU supports stay copies of the best
 * supported one. AVXVNNI is a side branch: the AVX-512 levels build on the
 * AVX2 table (a CPU may have AVX-512 without AVX-VNNI), and on a CPU without
 * AVX-VNNI its table is the AVX2 one. */
static struct omni_quant_ops ops_table[OMNI_CPU_LEVELS][GGML_TYPE_COUNT];
static pthread_once_t tables_once = PTHREAD_ONCE_INIT;

static void build_tables(void)
{
    const struct omni_cpu_features *f = omni_cpu();
    const int max_level = f->max_level;
    memcpy(ops_table[0], scalar_ops, sizeof scalar_ops);
    quant_lowbit_register(ops_table[0]); /* q2_K, q3_K, iq4_nl, iq4_xs, mxfp4 */
    for (int lvl = 1; lvl < OMNI_CPU_LEVELS; lvl++) {
        const int below = lvl > max_level ? max_level : lvl == OMNI_CPU_AVX512 ? OMNI_CPU_AVX2 : lvl - 1;
        memcpy(ops_table[lvl], ops_table[below], sizeof scalar_ops);
        if (lvl > max_level || omni_cpu_usable_level(f, lvl) != lvl)
            continue;
#if defined(__x86_64__)
        if (lvl == OMNI_CPU_AVX2) {
            omni_x86_register_avx2(ops_table[lvl]);
            omni_x86_register_lowbit_avx2(ops_table[lvl]);
        }
        else if (lvl == OMNI_CPU_AVXVNNI) { /* the AVX2 sources again, built with AVX-VNNI */
            omni_x86_register_avxvnni(ops_table[lvl]);
            omni_x86_register_lowbit_avxvnni(ops_table[lvl]);
        }
        else if (lvl == OMNI_CPU_AVX512)
            omni_x86_register_avx512(ops_table[lvl]);
        else if (lvl == OMNI_CPU_AVX512VNNI)
            omni_x86_register_avx512vnni(ops_table[lvl]);
#endif
        /* a K-quant's or f16's vec_dot_prep is its level's vec_dot in row
         * streams: a level with another vec_dot drops the one it inherited
         * (the Q8_0 family's prepared dots are kernels of their own) */
        for (int t = 0; t < GGML_TYPE_COUNT; t++) {
            struct omni_quant_ops *o = &ops_table[lvl][t];
            const struct omni_quant_ops *b = &ops_table[below][t];
            if (o->dot_type != GGML_TYPE_Q8_0 && o->vec_dot != b->vec_dot && o->vec_dot_prep == b->vec_dot_prep)
                o->act_prep = NULL, o->vec_dot_prep = NULL;
        }
    }
}

const struct omni_quant_ops *omni_quant_ops_at(int type, int level)
{
    if (type < 0 || type >= GGML_TYPE_COUNT)
        return NULL;
    pthread_once(&tables_once, build_tables);
    if (level < 0)
        level = 0;
    if (level >= OMNI_CPU_LEVELS)
        level = OMNI_CPU_LEVELS - 1;
    const struct omni_quant_ops *op = &ops_table[level][type];
    return op->vec_dot ? op : NULL;
}

const struct omni_quant_ops *omni_quant_ops(int type)
{
    return omni_quant_ops_at(type, omni_cpu_level());
}

int dequantize_row(int type, const void *src, float *dst, int64_t n)
{
    const struct omni_quant_ops *op = omni_quant_ops(type);
    const struct ggml_type_traits *tr = ggml_type_traits_of(type);
    if (!op || !tr)
        return OMNI_ERR_UNSUPPORTED;
    if (n < 0 || n % tr->blck_size)
        return OMNI_ERR_ARG;
    op->to_float(src, dst, n);
    return OMNI_OK;
}

int quantize_row(int type, const float *src, void *dst, int64_t n)
{
    static const omni_from_float_fn quantizers[GGML_TYPE_COUNT] = {
        [GGML_TYPE_F32] = from_float_f32,
        [GGML_TYPE_F16] = FROM_FLOAT(quantize_row_f16_ref),
        [GGML_TYPE_BF16] = FROM_FLOAT(quantize_row_bf16_ref),
        [GGML_TYPE_Q4_0] = FROM_FLOAT(quantize_row_q4_0_ref),
        [GGML_TYPE_Q4_1] = FROM_FLOAT(quantize_row_q4_1_ref),
        [GGML_TYPE_Q5_0] = FROM_FLOAT(quantize_row_q5_0_ref),
        [GGML_TYPE_Q5_1] = FROM_FLOAT(quantize_row_q5_1_ref),
        [GGML_TYPE_Q8_0] = FROM_FLOAT(quantize_row_q8_0_ref),
        [GGML_TYPE_Q8_1] = FROM_FLOAT(quantize_row_q8_1_ref),
        [GGML_TYPE_Q4_K] = FROM_FLOAT(quantize_row_q4_K_ref),
        [GGML_TYPE_Q5_K] = FROM_FLOAT(quantize_row_q5_K_ref),
        [GGML_TYPE_Q6_K] = FROM_FLOAT(quantize_row_q6_K_ref),
        [GGML_TYPE_Q8_K] = FROM_FLOAT(quantize_row_q8_K_ref),
    };
    const struct ggml_type_traits *tr = ggml_type_traits_of(type);
    const omni_from_float_fn q = !tr ? NULL : quantizers[type] ? quantizers[type] : quant_lowbit_quantizer(type);
    if (!q)
        return OMNI_ERR_UNSUPPORTED;
    if (n < 0 || n % tr->blck_size)
        return OMNI_ERR_ARG;
    q(src, dst, n);
    return OMNI_OK;
}

// ---- elementwise float math ------------------------------------------------

typedef float v16f __attribute__((vector_size(64)));
typedef int32_t v16i __attribute__((vector_size(64)));

/* a where mask (all ones per lane), b elsewhere (C has no vector ?:). */
static inline v16f select16(v16i mask, v16f a, v16f b)
{
    return (v16f)((mask & (v16i)a) | (~mask & (v16i)b));
}

/* e^x = 2^n * e^r with n = round(x / ln 2), r = x - n ln 2 in [-ln2/2,
 * ln2/2] (ln 2 split in two so that n ln 2 is exact), e^r by Cephes'
 * expf polynomial, 2^n built in the exponent bits. n is rounded by adding
 * 1.5 * 2^23, which leaves it in the low mantissa bits. */
static v16f exp_v16f(v16f x)
{
    const v16f x_max = (v16f){ 0 } + 88.0f, x_min = (v16f){ 0 } - 87.3f;
    x = select16(x > x_max, x_max, x);
    x = select16(x < x_min, x_min, x);
    const float magic = 12582912.0f; /* 1.5 * 2^23, bits 0x4b400000 */
    const v16f t = x * 1.44269504088896341f + magic;
    const v16f n = t - magic;
    const v16f r = x - n * 0.693359375f + n * 2.12194440e-4f;
    v16f p = 1.9875691500e-4f * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * r * r + r + 1.0f;
    return p * (v16f)(((v16i)t - 0x4b400000 + 127) << 23);
}

OMNI_CLONES float omni_vec_max(int64_t n, const float *x)
{
    float m16[16];
    for (int k = 0; k < 16; k++)
        m16[k] = -INFINITY;
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        for (int k = 0; k < 16; k++)
            m16[k] = x[i + k] > m16[k] ? x[i + k] : m16[k];
    float mx = -INFINITY;
    for (int k = 0; k < 16; k++)
        mx = m16[k] > mx ? m16[k] : mx;
    for (; i < n; i++)
        mx = x[i] > mx ? x[i] : mx;
    return mx;
}

OMNI_CLONES void omni_vec_softmax(int64_t n, float *x)
{
    const float mx = omni_vec_max(n, x);
    for (int64_t i = 0; i < n; i++)
        x[i] -= mx;
    omni_vec_expf(n, x, x);
    float s16[16] = { 0 };
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        for (int k = 0; k < 16; k++)
            s16[k] += x[i + k];
    float sum = 0.0f;
    for (int k = 0; k < 16; k++)
        sum += s16[k];
    for (; i < n; i++)
        sum += x[i];
    const float inv = 1.0f / sum;
    for (i = 0; i < n; i++)
        x[i] *= inv;
}

OMNI_CLONES void omni_vec_expf(int64_t n, float *y, const float *x)
{
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        v16f v;
        memcpy(&v, x + i, sizeof v);
        v = exp_v16f(v);
        memcpy(y + i, &v, sizeof v);
    }
    if (i < n) { /* the tail padded with zeros: the same code for every element */
        v16f v = { 0 };
        memcpy(&v, x + i, (size_t)(n - i) * sizeof(float));
        v = exp_v16f(v);
        memcpy(y + i, &v, (size_t)(n - i) * sizeof(float));
    }
}
