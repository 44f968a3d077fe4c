/* tensor.c - the ggml type-traits table and scalar half/bfloat conversions. */
#include "tensor.h"

#include <string.h>
#include <strings.h>

static const struct ggml_type_traits type_traits[GGML_TYPE_COUNT] = {
    [GGML_TYPE_F32] = { "f32", 1, 4, true },
    [GGML_TYPE_F16] = { "f16", 1, 2, true },
    [GGML_TYPE_Q4_0] = { "q4_0", 32, 18, true },
    [GGML_TYPE_Q4_1] = { "q4_1", 32, 20, true },
    [GGML_TYPE_Q5_0] = { "q5_0", 32, 22, true },
    [GGML_TYPE_Q5_1] = { "q5_1", 32, 24, true },
    [GGML_TYPE_Q8_0] = { "q8_0", 32, 34, true },
    [GGML_TYPE_Q8_1] = { "q8_1", 32, 36, false },
    [GGML_TYPE_Q2_K] = { "q2_K", 256, 84, true },
    [GGML_TYPE_Q3_K] = { "q3_K", 256, 110, true },
    [GGML_TYPE_Q4_K] = { "q4_K", 256, 144, true },
    [GGML_TYPE_Q5_K] = { "q5_K", 256, 176, true },
    [GGML_TYPE_Q6_K] = { "q6_K", 256, 210, true },
    [GGML_TYPE_Q8_K] = { "q8_K", 256, 292, false },
    [GGML_TYPE_IQ2_XXS] = { "iq2_xxs", 256, 66, false },
    [GGML_TYPE_IQ2_XS] = { "iq2_xs", 256, 74, false },
    [GGML_TYPE_IQ3_XXS] = { "iq3_xxs", 256, 98, false },
    [GGML_TYPE_IQ1_S] = { "iq1_s", 256, 50, false },
    [GGML_TYPE_IQ4_NL] = { "iq4_nl", 32, 18, true },
    [GGML_TYPE_IQ3_S] = { "iq3_s", 256, 110, false },
    [GGML_TYPE_IQ2_S] = { "iq2_s", 256, 82, false },
    [GGML_TYPE_IQ4_XS] = { "iq4_xs", 256, 136, true },
    [GGML_TYPE_I8] = { "i8", 1, 1, false },
    [GGML_TYPE_I16] = { "i16", 1, 2, false },
    [GGML_TYPE_I32] = { "i32", 1, 4, false },
    [GGML_TYPE_I64] = { "i64", 1, 8, false },
    [GGML_TYPE_F64] = { "f64", 1, 8, false },
    [GGML_TYPE_IQ1_M] = { "iq1_m", 256, 56, false },
    [GGML_TYPE_BF16] = { "bf16", 1, 2, true },
    [GGML_TYPE_MXFP4] = { "mxfp4", 32, 17, true },
};

const struct ggml_type_traits *ggml_type_traits_of(int t)
{
    if (t < 0 || t >= GGML_TYPE_COUNT || !type_traits[t].name)
        return NULL;
    return &type_traits[t];
}

const char *ggml_type_name(int t)
{
    const struct ggml_type_traits *tr = ggml_type_traits_of(t);
    return tr ? tr->name : "?";
}

int ggml_type_from_name(const char *name)
{
    for (int t = 0; t < GGML_TYPE_COUNT; t++)
        if (type_traits[t].name && strcasecmp(type_traits[t].name, name) == 0)
            return t;
    return -1;
}

size_t ggml_row_size(int t, int64_t n)
{
    const struct ggml_type_traits *tr = ggml_type_traits_of(t);
    if (!tr || n < 0 || n % tr->blck_size)
        return 0;
    return (size_t)(n / tr->blck_size) * tr->type_size;
}

float omni_fp16_to_fp32(uint16_t h)
{
    _Float16 f;
    memcpy(&f, &h, 2);
    return (float)f;
}

uint16_t omni_fp32_to_fp16(float f)
{
    _Float16 h = (_Float16)f; /* round to nearest even, as ggml's F16C path */
    uint16_t u;
    memcpy(&u, &h, 2);
    return u;
}

float omni_bf16_to_fp32(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

uint16_t omni_fp32_to_bf16(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffff) > 0x7f800000) /* NaN: keep it quiet */
        return (uint16_t)((u >> 16) | 64);
    return (uint16_t)((u + (0x7fff + ((u >> 16) & 1))) >> 16);
}
