/* quant_lowbit.h - the low-bit ggml types of today's downloads: Q2_K, Q3_K
 * (the Q2_K / Q3_K_M files of big models), IQ4_NL, IQ4_XS (30B-class
 * downloads) and MXFP4 (gpt-oss experts).
 *
 * Block layouts (bit-exact with GGML; the numbers are bytes):
 *   1. q2_K   scales[16] (low nibble scale, high nibble min) | qs[64] | d:f16 |
 *             dmin:f16. Element e = 128h + 32j + l (h < 2, j < 4, l < 32) is
 *             q = (qs[32h + l] >> 2j) & 3; x = d*sc[e/16]*q - dmin*m[e/16]
 *   2. q3_K   hmask[32] | qs[64] | scales[12] (16 6-bit scales, below) | d:f16
 *             q = ((qs[32h + l] >> 2j) & 3) - (bit 4h+j of hmask[l] ? 0 : 4);
 *             x = d*(sc[e/16] - 32)*q. Scale i: low nibble of scales[i] (i < 8)
 *             or high nibble of scales[i-8]; bits 4-5 from scales[8 + i%4]
 *             >> 2*(i/4)
 *   3. iq4_nl d:f16 | qs[16] (q4_0's nibble order): x = d*kvalues_iq4nl[q]
 *   4. iq4_xs d:f16 | scales_h:u16 | scales_l[4] | qs[128]: sub-block b of 32
 *             has ls = (nibble b of scales_l) | ((scales_h >> 2b) & 3) << 4 and
 *             its 16 bytes of qs in iq4_nl order: x = d*(ls - 32)*kvalues_iq4nl[q]
 *   5. mxfp4  e:u8 (E8M0 exponent) | qs[16] (q4_0 order): x = 2^(e-128) *
 *             kvalues_mxfp4[q] (E2M1 values doubled, hence the half exponent)
 *
 * Dots pair them with activations as ggml does: q2_K, q3_K, iq4_xs with Q8_K;
 * iq4_nl, mxfp4 with Q8_0. quant.c merges these kernels into its per-level
 * tables (quant_lowbit_register, then the x86 levels' registration), so use
 * them through omni_quant_ops() / dequantize_row() / quantize_row().
 *
 * Thread safety: every function is reentrant. */
#ifndef OMNI_QUANT_LOWBIT_H
#define OMNI_QUANT_LOWBIT_H

#include "quant.h"
#include "tensor.h"

/* GGML_TYPE_MXFP4 lives in tensor.h (id 39); QK for the 32-element types. */
#define QK4_NL 32
#define QK_MXFP4 32

typedef struct {
    uint8_t scales[QK_K / 16];
    uint8_t qs[QK_K / 4];
    ggml_half d, dmin;
} block_q2_K;
static_assert(sizeof(block_q2_K) == 84, "block_q2_K size");

typedef struct {
    uint8_t hmask[QK_K / 8];
    uint8_t qs[QK_K / 4];
    uint8_t scales[12];
    ggml_half d;
} block_q3_K;
static_assert(sizeof(block_q3_K) == 110, "block_q3_K size");

typedef struct {
    ggml_half d;
    uint8_t qs[QK4_NL / 2];
} block_iq4_nl;
static_assert(sizeof(block_iq4_nl) == 18, "block_iq4_nl size");

typedef struct {
    ggml_half d;
    uint16_t scales_h;
    uint8_t scales_l[QK_K / 64];
    uint8_t qs[QK_K / 2];
} block_iq4_xs;
static_assert(sizeof(block_iq4_xs) == 136, "block_iq4_xs size");

typedef struct {
    uint8_t e;
    uint8_t qs[QK_MXFP4 / 2];
} block_mxfp4;
static_assert(sizeof(block_mxfp4) == 17, "block_mxfp4 size");

/* The 16 non-linear levels of iq4_nl / iq4_xs, and E2M1 times two. */
extern const int8_t kvalues_iq4nl[16];
extern const int8_t kvalues_mxfp4[16];

/* 2^(e - 128) exactly (half the E8M0 scale; e < 2 gives denormals). */
static inline float quant_e8m0_to_fp32_half(uint8_t e)
{
    union { uint32_t u; float f; } v;
    v.u = e < 2 ? 0x00200000u << e : (uint32_t)(e - 1) << 23;
    return v.f;
}

/* The 16 signed 6-bit scales (already minus 32) of a q3_K block. */
void quant_q3_K_scales(const uint8_t scales[12], int8_t out[16]);

/* ---- scalar references ---- */

void dequantize_row_q2_K(const block_q2_K *x, float *y, int64_t n);
void dequantize_row_q3_K(const block_q3_K *x, float *y, int64_t n);
void dequantize_row_iq4_nl(const block_iq4_nl *x, float *y, int64_t n);
void dequantize_row_iq4_xs(const block_iq4_xs *x, float *y, int64_t n);
void dequantize_row_mxfp4(const block_mxfp4 *x, float *y, int64_t n);

/* Weight quantizers. mxfp4 gives ggml's (and gguf-py's) bytes; the others
 * are plain fits (per sub-block a min/max or absmax start refined by
 * least-squares rounds), valid blocks but not llama.cpp's
 * importance-weighted search. */
void quantize_row_q2_K_ref(const float *x, block_q2_K *y, int64_t n);
void quantize_row_q3_K_ref(const float *x, block_q3_K *y, int64_t n);
void quantize_row_iq4_nl_ref(const float *x, block_iq4_nl *y, int64_t n);
void quantize_row_iq4_xs_ref(const float *x, block_iq4_xs *y, int64_t n);
void quantize_row_mxfp4_ref(const float *x, block_mxfp4 *y, int64_t n);

float vec_dot_q2_K_q8_K_ref(int64_t n, const void *w, const void *a);
float vec_dot_q3_K_q8_K_ref(int64_t n, const void *w, const void *a);
float vec_dot_iq4_xs_q8_K_ref(int64_t n, const void *w, const void *a);
float vec_dot_iq4_nl_q8_0_ref(int64_t n, const void *w, const void *a);
float vec_dot_mxfp4_q8_0_ref(int64_t n, const void *w, const void *a);

/* ---- registration (called by quant.c) ---- */

/* Fill the scalar entries of these types into a level-0 ops table. */
void quant_lowbit_register(struct omni_quant_ops ops[GGML_TYPE_COUNT]);
/* The reference weight quantizer of a type here, or NULL. */
omni_from_float_fn quant_lowbit_quantizer(int type);
#if defined(__x86_64__)
/* AVX2 dots of these types (quants_lowbit_avx2.c). */
void omni_x86_register_lowbit_avx2(struct omni_quant_ops ops[GGML_TYPE_COUNT]);
#endif

#endif
