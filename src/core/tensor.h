/* tensor.h - ggml tensor element types and their traits.
 *
 * The enum values are the ones stored in GGUF and whisper.cpp files; they are
 * never renumbered. Quantized types are stored in blocks of blck_size
 * elements taking type_size bytes (see quant.h for the block layouts).
 *
 *   const struct ggml_type_traits *t = ggml_type_traits_of(GGML_TYPE_Q4_K);
 *   size_t row = ggml_row_size(GGML_TYPE_Q4_K, 4096);   // bytes of one row
 *
 * Thread safety: everything here is read-only and safe from any thread. */
#ifndef OMNI_TENSOR_H
#define OMNI_TENSOR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum ggml_type {
    GGML_TYPE_F32 = 0,
    GGML_TYPE_F16 = 1,
    GGML_TYPE_Q4_0 = 2,
    GGML_TYPE_Q4_1 = 3,
    /* 4, 5: removed Q4_2, Q4_3 */
    GGML_TYPE_Q5_0 = 6,
    GGML_TYPE_Q5_1 = 7,
    GGML_TYPE_Q8_0 = 8,
    GGML_TYPE_Q8_1 = 9,
    GGML_TYPE_Q2_K = 10,
    GGML_TYPE_Q3_K = 11,
    GGML_TYPE_Q4_K = 12,
    GGML_TYPE_Q5_K = 13,
    GGML_TYPE_Q6_K = 14,
    GGML_TYPE_Q8_K = 15,
    GGML_TYPE_IQ2_XXS = 16,
    GGML_TYPE_IQ2_XS = 17,
    GGML_TYPE_IQ3_XXS = 18,
    GGML_TYPE_IQ1_S = 19,
    GGML_TYPE_IQ4_NL = 20,
    GGML_TYPE_IQ3_S = 21,
    GGML_TYPE_IQ2_S = 22,
    GGML_TYPE_IQ4_XS = 23,
    GGML_TYPE_I8 = 24,
    GGML_TYPE_I16 = 25,
    GGML_TYPE_I32 = 26,
    GGML_TYPE_I64 = 27,
    GGML_TYPE_F64 = 28,
    GGML_TYPE_IQ1_M = 29,
    GGML_TYPE_BF16 = 30,
    /* 31-33: removed Q4_0_4_4/4_8/8_8; 34, 35: TQ1_0, TQ2_0 (not read);
     * 36-38: removed IQ4_NL_4_4/4_8/8_8 */
    GGML_TYPE_MXFP4 = 39,
    GGML_TYPE_COUNT = 40,
};

struct ggml_type_traits {
    const char *name;   /* "q4_K", as ggml names it; NULL for unused ids */
    int blck_size;      /* elements per block (1 for plain types) */
    size_t type_size;   /* bytes per block */
    bool supported;     /* omniserve can dequantize and multiply it */
};

/* Traits of type t, or NULL when t is out of range or an unused id. */
const struct ggml_type_traits *ggml_type_traits_of(int t);
const char *ggml_type_name(int t); /* "?" when unknown */
/* Parse a name such as "q8_0", "Q4_K", "f16"; -1 when unknown. */
int ggml_type_from_name(const char *name);
/* Bytes of a row of n elements; 0 if n is not a multiple of the block size
 * or the type is unknown. */
size_t ggml_row_size(int t, int64_t n);

/* IEEE half <-> float, and bfloat16 -> float. */
float omni_fp16_to_fp32(uint16_t h);
uint16_t omni_fp32_to_fp16(float f);
float omni_bf16_to_fp32(uint16_t h);
uint16_t omni_fp32_to_bf16(float f);

#endif
