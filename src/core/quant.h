/* quant.h - ggml block layouts, (de)quantizers and dot-product kernels.
 *
 * Block layouts (bit-exact with GGML; the numbers are bytes):
 *   1. q4_0  d:f16 | qs[16]: x[j] = d*((qs[j]&15)-8), x[j+16] = d*((qs[j]>>4)-8)
 *   2. q4_1  d:f16 m:f16 | qs[16]: x = d*q + m
 *   3. q5_0  d:f16 | qh[4] (bit j = 5th bit of x[j]) | qs[16]: x = d*(q-16)
 *   4. q5_1  d:f16 m:f16 | qh[4] | qs[16]: x = d*q + m
 *   5. q8_0  d:f16 | qs[32] int8: x = d*q
 *   6. q8_1  d:f16 s:f16 (= d*sum(qs)) | qs[32]: activations for q4_1/q5_1 dots
 *   7. q4_K  d:f16 dmin:f16 | scales[12] (8 6-bit scales + 8 6-bit mins) | qs[128]
 *            sub-block i of 32: x = d*sc[i]*q - dmin*m[i]
 *   8. q5_K  as q4_K plus qh[32] before qs (bit 2j/2j+1 of qh[l] = 5th bits)
 *   9. q6_K  ql[128] | qh[64] | scales[16] int8 | d:f16: x = d*sc[i/16]*(q-32)
 *  10. q8_K  d:f32 | qs[256] int8 | bsums[16] (sums of 16 qs): activations for K dots
 *
 *   const struct omni_quant_ops *op = omni_quant_ops(GGML_TYPE_Q4_K);
 *   op->from_float(x, xq, n);             // x -> op->dot_type (Q8_K here)
 *   float s = op->vec_dot(n, w_row, xq);  // picked for the CPU level in use
 *
 * Thread safety: every function is reentrant; the ops tables are built once. */
#ifndef OMNI_QUANT_H
#define OMNI_QUANT_H

#include <assert.h>
#include <stddef.h>
#include <stdint.h>

typedef uint16_t ggml_half; /* IEEE binary16 bits */

#define QK4_0 32
#define QK4_1 32
#define QK5_0 32
#define QK5_1 32
#define QK8_0 32
#define QK8_1 32
#define QK_K 256
#define K_SCALE_SIZE 12

typedef struct {
    ggml_half d;
    uint8_t qs[QK4_0 / 2];
} block_q4_0;
static_assert(sizeof(block_q4_0) == 18, "block_q4_0 size");

typedef struct {
    ggml_half d, m;
    uint8_t qs[QK4_1 / 2];
} block_q4_1;
static_assert(sizeof(block_q4_1) == 20, "block_q4_1 size");

typedef struct {
    ggml_half d;
    uint8_t qh[4];
    uint8_t qs[QK5_0 / 2];
} block_q5_0;
static_assert(sizeof(block_q5_0) == 22, "block_q5_0 size");

typedef struct {
    ggml_half d, m;
    uint8_t qh[4];
    uint8_t qs[QK5_1 / 2];
} block_q5_1;
static_assert(sizeof(block_q5_1) == 24, "block_q5_1 size");

typedef struct {
    ggml_half d;
    int8_t qs[QK8_0];
} block_q8_0;
static_assert(sizeof(block_q8_0) == 34, "block_q8_0 size");

typedef struct {
    ggml_half d, s;
    int8_t qs[QK8_1];
} block_q8_1;
static_assert(sizeof(block_q8_1) == 36, "block_q8_1 size");

typedef struct {
    ggml_half d, dmin;
    uint8_t scales[K_SCALE_SIZE];
    uint8_t qs[QK_K / 2];
} block_q4_K;
static_assert(sizeof(block_q4_K) == 144, "block_q4_K size");

typedef struct {
    ggml_half d, dmin;
    uint8_t scales[K_SCALE_SIZE];
    uint8_t qh[QK_K / 8];
    uint8_t qs[QK_K / 2];
} block_q5_K;
static_assert(sizeof(block_q5_K) == 176, "block_q5_K size");

typedef struct {
    uint8_t ql[QK_K / 2];
    uint8_t qh[QK_K / 4];
    int8_t scales[QK_K / 16];
    ggml_half d;
} block_q6_K;
static_assert(sizeof(block_q6_K) == 210, "block_q6_K size");

typedef struct {
    float d;
    int8_t qs[QK_K];
    int16_t bsums[QK_K / 16];
} block_q8_K;
static_assert(sizeof(block_q8_K) == 292, "block_q8_K size");

/* ---- generic entry points (n elements, a multiple of the block size) ---- */

/* Dequantize n elements of type to floats. 0, or OMNI_ERR_UNSUPPORTED /
 * OMNI_ERR_ARG (n not a multiple of the block size). Uses the SIMD variant of
 * the CPU level in use where one exists; every variant gives the same bits. */
int dequantize_row(int type, const void *src, float *dst, int64_t n);
/* Reference weight quantizer for type (f32, f16, bf16, q8_0, q4_0, q4_1, q5_0,
 * q5_1, q8_1, q4_K, q5_K, q6_K, q8_K; q2_K, q3_K, iq4_nl, iq4_xs, mxfp4 from
 * quant_lowbit.h). Same return codes. */
int quantize_row(int type, const float *src, void *dst, int64_t n);

/* ---- scalar reference kernels ---- */

void dequantize_row_f16(const ggml_half *x, float *y, int64_t n);
void dequantize_row_bf16(const uint16_t *x, float *y, int64_t n);
void dequantize_row_q4_0(const block_q4_0 *x, float *y, int64_t n);
void dequantize_row_q4_1(const block_q4_1 *x, float *y, int64_t n);
void dequantize_row_q5_0(const block_q5_0 *x, float *y, int64_t n);
void dequantize_row_q5_1(const block_q5_1 *x, float *y, int64_t n);
void dequantize_row_q8_0(const block_q8_0 *x, float *y, int64_t n);
void dequantize_row_q4_K(const block_q4_K *x, float *y, int64_t n);
void dequantize_row_q5_K(const block_q5_K *x, float *y, int64_t n);
void dequantize_row_q6_K(const block_q6_K *x, float *y, int64_t n);
void dequantize_row_q8_K(const block_q8_K *x, float *y, int64_t n);

void quantize_row_f16_ref(const float *x, ggml_half *y, int64_t n);
void quantize_row_bf16_ref(const float *x, uint16_t *y, int64_t n);
void quantize_row_q4_0_ref(const float *x, block_q4_0 *y, int64_t n);
void quantize_row_q4_1_ref(const float *x, block_q4_1 *y, int64_t n);
void quantize_row_q5_0_ref(const float *x, block_q5_0 *y, int64_t n);
void quantize_row_q5_1_ref(const float *x, block_q5_1 *y, int64_t n);
void quantize_row_q8_0_ref(const float *x, block_q8_0 *y, int64_t n);
void quantize_row_q8_1_ref(const float *x, block_q8_1 *y, int64_t n);
void quantize_row_q8_K_ref(const float *x, block_q8_K *y, int64_t n);
/* K-quant weight quantizers: a plain min/max fit per sub-block (correct
 * blocks, not llama.cpp's error-minimising search). */
void quantize_row_q4_K_ref(const float *x, block_q4_K *y, int64_t n);
void quantize_row_q5_K_ref(const float *x, block_q5_K *y, int64_t n);
void quantize_row_q6_K_ref(const float *x, block_q6_K *y, int64_t n);

/* Dot product of a weight row w (n elements of the weight type) with an
 * activation row a of the op's dot_type. */
typedef float (*omni_vec_dot_fn)(int64_t n, const void *w, const void *a);
/* The dot products of one weight row w with n_cols (1..OMNI_DOT_COLS_MAX)
 * activation rows a + c * a_row bytes, into s[c * s_stride], reading w once.
 * Each equals the same level's vec_dot of that column. */
#define OMNI_DOT_COLS_MAX 4
typedef void (*omni_vec_dot_n_fn)(int64_t n, const void *w, const void *a, size_t a_row,
                                  int n_cols, float *s, size_t s_stride);
/* Decode's one-row dots for weights whose dot type is Q8_0: act_prep
 * fills OMNI_ACT_PREP_FLOATS(n) floats from the activation row a once
 * (block i: prep[i] = its f16 scale as a float, prep[n/32 + i] = that times
 * the sum of its 32 int8s; after them a level's kernel may keep the row laid
 * out as it reads it, up to 24 floats a block from the next 64-byte
 * boundary), and vec_dot_prep uses them with n_rows weight
 * rows w + r * w_row (weight offsets applied once per block, not per
 * element), y[r] for each, prefetching OMNI_PREFETCH_ROWS rows ahead within
 * them. Each y[r] equals vec_dot within the dot tolerance (q8_0 below
 * AVX-512 VNNI: the same bits), and has the same bits whatever rows it is
 * called with. The K-quants and f16 may have them too (the rows in row
 * streams, act_prep does nothing or only the layout; vec_dot's bits except
 * q4_K/q6_K at AVX-512 VNNI). */
#define OMNI_ACT_PREP_FLOATS(n) (26 * ((n) / 32) + 24)
#define OMNI_PREFETCH_ROWS 4
typedef void (*omni_act_prep_fn)(const void *a, float *prep, int64_t n);
typedef void (*omni_vec_dot_prep_fn)(int64_t n, const void *w, size_t w_row, int64_t n_rows,
                                     const void *a, const float *prep, float *y);
typedef void (*omni_from_float_fn)(const float *x, void *y, int64_t n);
typedef void (*omni_to_float_fn)(const void *x, float *y, int64_t n);

float vec_dot_f32_f32_ref(int64_t n, const void *w, const void *a);
float vec_dot_f16_f32_ref(int64_t n, const void *w, const void *a);
float vec_dot_bf16_f32_ref(int64_t n, const void *w, const void *a);
float vec_dot_q4_0_q8_0_ref(int64_t n, const void *w, const void *a);
float vec_dot_q4_1_q8_1_ref(int64_t n, const void *w, const void *a);
float vec_dot_q5_0_q8_0_ref(int64_t n, const void *w, const void *a);
float vec_dot_q5_1_q8_1_ref(int64_t n, const void *w, const void *a);
float vec_dot_q8_0_q8_0_ref(int64_t n, const void *w, const void *a);
float vec_dot_q4_K_q8_K_ref(int64_t n, const void *w, const void *a);
float vec_dot_q5_K_q8_K_ref(int64_t n, const void *w, const void *a);
float vec_dot_q6_K_q8_K_ref(int64_t n, const void *w, const void *a);

/* ---- elementwise float math ---- */

/* y[i] = e^x[i] for n floats (y may be x), 16 at a time in GCC vector code
 * (AVX-512 with -march=native): Cephes' expf range reduction and degree-6
 * polynomial, at most OMNI_EXPF_REL_ERR relative error against libm's expf
 * for x in [-87, 88]; x below is clamped to -87.3 (e^x about 1.2e-38),
 * x above to 88 (e^x about 1.65e38). The result of an element depends only on its
 * value, not on n or its position. */
void omni_vec_expf(int64_t n, float *y, const float *x);
/* The largest of n floats (-inf for n = 0; NaN never wins), 16 lanes at a
 * time so that -O2 vectorizes it. */
float omni_vec_max(int64_t n, const float *x);
/* x = softmax(x) in place over n >= 1 floats (max subtracted, omni_vec_expf,
 * 16 partial sums), vectorized. */
void omni_vec_softmax(int64_t n, float *x);
#define OMNI_EXPF_REL_ERR 4e-7

/* ---- per-type kernels for a CPU level (see cpu.h) ---- */

struct omni_quant_ops {
    int dot_type;                  /* activation type: Q8_0, Q8_1, Q8_K or F32 */
    omni_from_float_fn from_float; /* floats -> dot_type; NULL when F32 */
    omni_vec_dot_fn vec_dot;
    omni_to_float_fn to_float;
    omni_vec_dot_n_fn vec_dot_n;   /* several activation rows at once, or NULL */
    omni_act_prep_fn act_prep;     /* with vec_dot_prep, or both NULL */
    omni_vec_dot_prep_fn vec_dot_prep;
    /* == vec_dot when that kernel prefetches the blocks ahead of the ones it
     * reads (decode streaming a thread's contiguous rows): matmul.c's row
     * loop then skips its own prefetch of the rows ahead. NULL otherwise. */
    omni_vec_dot_fn vec_dot_streams;
};

/* Kernels of type for the level in use (omni_cpu_level()); NULL when the
 * type is not supported. */
const struct omni_quant_ops *omni_quant_ops(int type);
/* Kernels of type at an explicit level, capped at what this CPU supports
 * (tests compare every level against the scalar one). */
const struct omni_quant_ops *omni_quant_ops_at(int type, int level);

#endif
