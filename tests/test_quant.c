/* test_quant.c - block (de)quantizers against llama.cpp's gguf-py, and every
 * SIMD kernel against its scalar _ref twin at every CPU level available.
 * Fixtures: tests/fixtures/quant/<type>.bin, made by tools/make_quant_fixtures.py. */
#include "src/core/arch/x86/x86.h"
#include "src/core/cpu.h"
#include "src/core/matmul.h"
#include "src/core/quant.h"
#include "src/core/quant_lowbit.h"
#include "src/core/tensor.h"
#include "src/core/threadpool.h"
#include "tests/test.h"

#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

/* SIMD dots sum in another order than the scalar reference; the integer
 * parts are exact, so only float rounding of the partial sums differs. The
 * bound is relative to sum_k |w_k a_k|. */
#define TOL_DOT_REL 2e-5

static uint64_t rng_state;
static uint32_t rnd32(void)
{
    rng_state = rng_state * 6364136223846793005ULL + 1442695040888963407ULL;
    return (uint32_t)(rng_state >> 32);
}
static float frand(void) /* uniform in [-1, 1) */
{
    return (float)(rnd32() >> 8) * (1.0f / (1 << 23)) - 1.0f;
}

// ---- fixtures --------------------------------------------------------------

struct fixture {
    int type;
    uint32_t rows, cols, input_rows;
    size_t row_bytes;
    float *input;      /* (input_rows, cols) */
    uint8_t *blocks;   /* (rows, row_bytes) */
    float *deq;        /* (rows, cols) */
    char *buf;
};

static int load_fixture(const char *name, struct fixture *f)
{
    char rel[64];
    size_t len;
    snprintf(rel, sizeof rel, "quant/%s.bin", name);
    memset(f, 0, sizeof *f);
    f->buf = test_read_file(test_fixture(rel), &len);
    if (!f->buf || len < 24 || memcmp(f->buf, "OMNIQF1", 8) != 0)
        return -1;
    uint32_t h[4];
    memcpy(h, f->buf + 8, sizeof h);
    f->type = (int)h[0];
    f->rows = h[1];
    f->cols = h[2];
    f->input_rows = h[3];
    f->row_bytes = ggml_row_size(f->type, f->cols);
    size_t n_in = (size_t)f->input_rows * f->cols * 4, n_bl = f->rows * f->row_bytes,
           n_dq = (size_t)f->rows * f->cols * 4;
    if (!f->row_bytes || f->input_rows > f->rows || len != 24 + n_in + n_bl + n_dq)
        return -1;
    /* copy into aligned, typed buffers (the file layout is packed) */
    f->input = malloc(n_in + 4);
    f->blocks = malloc(n_bl);
    f->deq = malloc(n_dq);
    if (!f->input || !f->blocks || !f->deq)
        return -1;
    memcpy(f->input, f->buf + 24, n_in);
    memcpy(f->blocks, f->buf + 24 + n_in, n_bl);
    memcpy(f->deq, f->buf + 24 + n_in + n_bl, n_dq);
    return 0;
}

static void free_fixture(struct fixture *f)
{
    free(f->input);
    free(f->blocks);
    free(f->deq);
    free(f->buf);
}

static const char *fixture_names[] = {
    "f16", "bf16", "q8_0", "q4_0", "q4_1", "q5_0", "q5_1", "q4_K", "q5_K", "q6_K",
    "q2_K", "q3_K", "iq4_nl", "iq4_xs", "mxfp4",
};

/* Our dequantization, at every level, equals gguf-py's bit for bit. */
TEST(quant_dequantize_matches_gguf_py)
{
    for (size_t i = 0; i < sizeof fixture_names / sizeof *fixture_names; i++) {
        struct fixture f;
        CHECK_MSG(load_fixture(fixture_names[i], &f) == 0, "fixture %s missing or malformed",
                  fixture_names[i]);
        CHECK_STR_EQ(ggml_type_name(f.type), fixture_names[i]);
        float *out = malloc((size_t)f.rows * f.cols * sizeof(float));
        CHECK(out);
        for (int level = 0; level <= omni_cpu()->max_level; level++) {
            const struct omni_quant_ops *op = omni_quant_ops_at(f.type, level);
            CHECK(op != NULL);
            memset(out, 0xff, (size_t)f.rows * f.cols * sizeof(float));
            op->to_float(f.blocks, out, (int64_t)f.rows * f.cols);
            for (size_t k = 0; k < (size_t)f.rows * f.cols; k++) {
                uint32_t a, b;
                memcpy(&a, &out[k], 4);
                memcpy(&b, &f.deq[k], 4);
                if (a != b) {
                    const float got = out[k], want = f.deq[k];
                    free(out);
                    free_fixture(&f);
                    CHECK_MSG(0, "%s level %s: element %zu: %08x (%.9g) != gguf-py %08x (%.9g)",
                              fixture_names[i], omni_cpu_level_name(level), k, a, got, b, want);
                }
            }
        }
        free(out);
        free_fixture(&f);
    }
}

/* The SIMD f16/bf16 -> f32 conversions of every level give the scalar bits
 * for every length (vector bodies and scalar tails). */
TEST(quant_float_conversions_match_scalar_all_lengths)
{
    static const int types[] = { GGML_TYPE_F16, GGML_TYPE_BF16 };
    uint16_t src[100];
    float want[100], got[100];
    rng_state = 99;
    for (int i = 0; i < 100; i++)
        src[i] = (uint16_t)rnd32();
    for (size_t ti = 0; ti < sizeof types / sizeof *types; ti++)
        for (int n = 1; n <= 100; n++) {
            omni_quant_ops_at(types[ti], OMNI_CPU_SCALAR)->to_float(src, want, n);
            for (int level = 1; level <= omni_cpu()->max_level; level++) {
                memset(got, 0xff, sizeof got);
                omni_quant_ops_at(types[ti], level)->to_float(src, got, n);
                CHECK_MSG(memcmp(got, want, (size_t)n * sizeof(float)) == 0,
                          "%s level %s n=%d differs from scalar", ggml_type_name(types[ti]),
                          omni_cpu_level_name(level), n);
            }
        }
}

/* Our reference quantizers produce gguf-py's bytes exactly (gguf-py mirrors
 * ggml's *_ref quantizers, including roundf's ties away from zero). */
TEST(quant_quantize_matches_gguf_py)
{
    for (size_t i = 0; i < sizeof fixture_names / sizeof *fixture_names; i++) {
        struct fixture f;
        CHECK(load_fixture(fixture_names[i], &f) == 0);
        if (f.input_rows == 0) {
            free_fixture(&f);
            continue;
        }
        uint8_t *q = malloc(f.row_bytes * f.input_rows);
        CHECK(q);
        CHECK_EQ(quantize_row(f.type, f.input, q, (int64_t)f.input_rows * f.cols), 0);
        for (size_t k = 0; k < f.row_bytes * f.input_rows; k++)
            if (q[k] != f.blocks[k]) {
                size_t blk = k / ggml_type_traits_of(f.type)->type_size;
                int got = q[k], want = f.blocks[k];
                free(q);
                free_fixture(&f);
                CHECK_MSG(0, "%s: byte %zu (block %zu): %02x != gguf-py %02x", fixture_names[i],
                          k, blk, got, want);
            }
        free(q);
        free_fixture(&f);
    }
}

TEST(quant_rejects_bad_lengths_and_types)
{
    float x[64] = { 0 };
    uint8_t q[128] = { 0 };
    CHECK_EQ(dequantize_row(GGML_TYPE_Q4_0, q, x, 33), -5 /* OMNI_ERR_ARG */);
    CHECK_EQ(quantize_row(GGML_TYPE_Q4_K, x, q, 64), -5);
    CHECK(dequantize_row(GGML_TYPE_IQ2_XXS, q, x, 256) < 0);
    CHECK(dequantize_row(999, q, x, 32) < 0);
    CHECK(quantize_row(GGML_TYPE_IQ2_XS, x, q, 256) < 0);
    CHECK(omni_quant_ops(GGML_TYPE_IQ3_S) == NULL);
    CHECK(omni_quant_ops(GGML_TYPE_COUNT) == NULL);
    CHECK(omni_quant_ops(35 /* TQ2_0: no traits */) == NULL);
    CHECK_EQ(quantize_row(GGML_TYPE_MXFP4, x, q, 48), -5);
    CHECK_EQ(dequantize_row(GGML_TYPE_IQ4_XS, q, x, 32), -5);
    CHECK(omni_quant_ops(-1) == NULL);
}

/* What tensor.c marks supported (the loaders' test) is exactly what has
 * kernels, at every level: a file never loads a type matmul cannot run. */
TEST(quant_supported_types_have_kernels)
{
    int n_supported = 0;
    for (int t = 0; t < GGML_TYPE_COUNT; t++) {
        const struct ggml_type_traits *tr = ggml_type_traits_of(t);
        const bool supported = tr && tr->supported;
        n_supported += supported;
        for (int level = 0; level <= omni_cpu()->max_level; level++) {
            const struct omni_quant_ops *op = omni_quant_ops_at(t, level);
            CHECK_MSG(supported == (op != NULL), "type %d (%s) level %d: supported %d, kernels %d",
                      t, ggml_type_name(t), level, supported, op != NULL);
            if (op)
                CHECK(op->to_float && op->vec_dot && (op->from_float || op->dot_type == GGML_TYPE_F32));
        }
    }
    CHECK_EQ(n_supported, 16); /* f32 f16 bf16 q8_0 q4_0 q4_1 q5_0 q5_1 q2..6_K iq4_nl iq4_xs mxfp4 */
    CHECK_STR_EQ(ggml_type_name(GGML_TYPE_MXFP4), "mxfp4");
    CHECK_EQ(ggml_type_from_name("MXFP4"), GGML_TYPE_MXFP4);
    CHECK_EQ(ggml_row_size(GGML_TYPE_MXFP4, 64), 34u);
    CHECK_EQ(ggml_row_size(GGML_TYPE_IQ4_XS, 512), 272u);
}

// ---- round trips -----------------------------------------------------------

/* Quantize -> dequantize error, relative to the RMS of the input. */
static double roundtrip_rel_rms(int type, const float *x, int64_t n)
{
    size_t bytes = ggml_row_size(type, n);
    uint8_t *q = malloc(bytes);
    float *y = malloc((size_t)n * sizeof(float));
    double err = 0, ref = 0;
    if (!q || !y || quantize_row(type, x, q, n) != 0 || dequantize_row(type, q, y, n) != 0) {
        free(q);
        free(y);
        return INFINITY;
    }
    for (int64_t i = 0; i < n; i++) {
        err += (double)(y[i] - x[i]) * (y[i] - x[i]);
        ref += (double)x[i] * x[i];
    }
    free(q);
    free(y);
    return sqrt(err / ref);
}

TEST(quant_roundtrip_error_bounds)
{
    static const struct { int type; double max_rel_rms; } cases[] = {
        { GGML_TYPE_F16, 1e-3 },  { GGML_TYPE_BF16, 4e-3 }, { GGML_TYPE_Q8_0, 0.007 },
        { GGML_TYPE_Q6_K, 0.025 }, { GGML_TYPE_Q5_0, 0.05 }, { GGML_TYPE_Q5_1, 0.05 },
        { GGML_TYPE_Q5_K, 0.05 },  { GGML_TYPE_Q4_0, 0.10 }, { GGML_TYPE_Q4_1, 0.10 },
        { GGML_TYPE_Q4_K, 0.10 },  { GGML_TYPE_IQ4_NL, 0.08 }, { GGML_TYPE_IQ4_XS, 0.08 },
        { GGML_TYPE_MXFP4, 0.13 }, { GGML_TYPE_Q3_K, 0.15 }, { GGML_TYPE_Q2_K, 0.30 },
    };
    enum { N = 4096 };
    static float x[N];
    rng_state = 99;
    for (int i = 0; i < N; i++) /* Gaussian-ish weights with per-block scale changes */
        x[i] = (frand() + frand() + frand()) * (0.02f + 0.01f * (float)((i / 32) % 5));
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        double e = roundtrip_rel_rms(cases[i].type, x, N);
        if (getenv("QUANT_PRINT_RMS"))
            printf("[%s %.4f] ", ggml_type_name(cases[i].type), e);
        CHECK_MSG(e <= cases[i].max_rel_rms, "%s: relative RMS error %.4f > %.4f",
                  ggml_type_name(cases[i].type), e, cases[i].max_rel_rms);
    }
}

TEST(quant_q8_K_bsums_and_zero_block)
{
    float x[2 * QK_K];
    block_q8_K y[2];
    rng_state = 5;
    for (int i = 0; i < QK_K; i++)
        x[i] = frand() * 3;
    memset(x + QK_K, 0, QK_K * sizeof(float));
    quantize_row_q8_K_ref(x, y, 2 * QK_K);
    for (int j = 0; j < QK_K / 16; j++) {
        int s = 0;
        for (int l = 0; l < 16; l++)
            s += y[0].qs[16 * j + l];
        CHECK_EQ(y[0].bsums[j], s);
        CHECK_EQ(y[1].bsums[j], 0);
    }
    CHECK(y[1].d == 0.0f);
    for (int i = 0; i < QK_K; i++)
        CHECK_NEAR(y[0].d * y[0].qs[i], x[i], fabsf(y[0].d) * 0.5f + 1e-7);
}

// ---- SIMD kernels vs the scalar reference -----------------------------------

/* Random valid blocks: random bytes, then sane values in the scale fields. */
static void random_weights(int type, void *dst, int64_t n)
{
    const struct ggml_type_traits *tr = ggml_type_traits_of(type);
    uint8_t *p = dst;
    int64_t nb = n / tr->blck_size;
    for (size_t i = 0; i < (size_t)nb * tr->type_size; i++)
        p[i] = (uint8_t)rnd32();
    for (int64_t b = 0; b < nb; b++) {
        uint8_t *blk = p + b * tr->type_size;
        ggml_half d = omni_fp32_to_fp16(frand() * 0.05f), m = omni_fp32_to_fp16(frand() * 0.05f);
        ggml_half dpos = omni_fp32_to_fp16(fabsf(frand()) * 0.01f);
        switch (type) {
        case GGML_TYPE_F32: {
            float v = frand();
            memcpy(blk, &v, 4);
            break;
        }
        case GGML_TYPE_F16:
            memcpy(blk, &d, 2);
            break;
        case GGML_TYPE_BF16: {
            uint16_t v = omni_fp32_to_bf16(frand());
            memcpy(blk, &v, 2);
            break;
        }
        case GGML_TYPE_Q4_0: case GGML_TYPE_Q5_0: case GGML_TYPE_Q8_0:
            memcpy(blk, &d, 2);
            break;
        case GGML_TYPE_Q4_1: case GGML_TYPE_Q5_1:
            memcpy(blk, &d, 2);
            memcpy(blk + 2, &m, 2);
            break;
        case GGML_TYPE_Q4_K: case GGML_TYPE_Q5_K:
            memcpy(blk, &dpos, 2);
            dpos = omni_fp32_to_fp16(fabsf(frand()) * 0.01f);
            memcpy(blk + 2, &dpos, 2);
            break;
        case GGML_TYPE_Q6_K:
            memcpy(blk + 208, &dpos, 2);
            break;
        case GGML_TYPE_Q2_K:
            memcpy(blk + 80, &dpos, 2);
            dpos = omni_fp32_to_fp16(fabsf(frand()) * 0.01f);
            memcpy(blk + 82, &dpos, 2);
            break;
        case GGML_TYPE_Q3_K:
            memcpy(blk + 108, &d, 2);
            break;
        case GGML_TYPE_IQ4_NL: case GGML_TYPE_IQ4_XS:
            memcpy(blk, &d, 2);
            break;
        case GGML_TYPE_MXFP4: /* 2^(e - 128) around 2^-8 */
            blk[0] = (uint8_t)(116 + rnd32() % 8);
            break;
        }
    }
}

/* Activations of a dot type back to floats (q8_1/q8_K are no weight types,
 * so dequantize_row does not take them). */
static void act_to_float(int dot_type, const void *a, float *out, int64_t n)
{
    if (dot_type == GGML_TYPE_F32) {
        memcpy(out, a, (size_t)n * sizeof(float));
    } else if (dot_type == GGML_TYPE_Q8_1) {
        const block_q8_1 *b = a;
        for (int64_t i = 0; i < n; i++)
            out[i] = omni_fp16_to_fp32(b[i / QK8_1].d) * b[i / QK8_1].qs[i % QK8_1];
    } else if (dot_type == GGML_TYPE_Q8_K) {
        dequantize_row_q8_K(a, out, n);
    } else {
        dequantize_row_q8_0(a, out, n);
    }
}

static const int dot_types[] = {
    GGML_TYPE_F32, GGML_TYPE_F16, GGML_TYPE_BF16, GGML_TYPE_Q8_0, GGML_TYPE_Q4_0,
    GGML_TYPE_Q4_1, GGML_TYPE_Q5_0, GGML_TYPE_Q5_1, GGML_TYPE_Q4_K, GGML_TYPE_Q5_K,
    GGML_TYPE_Q6_K, GGML_TYPE_Q2_K, GGML_TYPE_Q3_K, GGML_TYPE_IQ4_NL, GGML_TYPE_IQ4_XS,
    GGML_TYPE_MXFP4,
};

/* Whether this CPU runs level lvl itself: a level it lacks below its best
 * (avxvnni on AVX-512 parts without AVX-VNNI, as this test's AMD VM) has the
 * level below's table, tested there. */
static bool level_present(int lvl)
{
    return omni_cpu_usable_level(omni_cpu(), lvl) == lvl;
}

/* The activation quantizer of every level gives the reference's bytes, and
 * every level's vec_dot equals the reference within TOL_DOT_REL. */
TEST(quant_simd_kernels_match_ref)
{
    enum { NMAX = 8 * QK_K };
    static float xf[NMAX], wdeq[NMAX], adeq[NMAX];
    static uint8_t w[NMAX * 4], a_ref[NMAX * 4 + 64], a_lvl[NMAX * 4 + 64];
    const int64_t lens_32[] = { 32, 96, 192, 1056, NMAX }; /* the decode dots take 4 blocks at a time */
    const int64_t lens_k[] = { 256, 768, NMAX };
    const int64_t lens_f[] = { 1, 7, 33, 100, 1000, NMAX };
    rng_state = 2024;
    for (size_t ti = 0; ti < sizeof dot_types / sizeof *dot_types; ti++) {
        const int type = dot_types[ti];
        const struct omni_quant_ops *ref = omni_quant_ops_at(type, OMNI_CPU_SCALAR);
        const int blck = ggml_type_traits_of(type)->blck_size;
        const int64_t *lens = blck == 1 ? lens_f : blck == 32 ? lens_32 : lens_k;
        const int n_lens = blck == 1 ? 6 : blck == 32 ? 5 : 3;
        CHECK(ref != NULL);
        for (int li = 0; li < n_lens; li++) {
            const int64_t n = lens[li];
            for (int trial = 0; trial < 4; trial++) {
                for (int64_t i = 0; i < n; i++)
                    xf[i] = frand() * (trial == 2 ? 1e-3f : 2.0f);
                if (trial == 3) /* scale 1 with half-integers: every rounding is a tie */
                    for (int64_t i = 0; i < n; i++)
                        xf[i] = i % 32 == 0 ? 127.0f : (float)((int)(rnd32() % 255) - 127) * 0.5f;
                random_weights(type, w, n);
                size_t a_bytes = ggml_row_size(ref->dot_type, n);
                if (ref->from_float)
                    ref->from_float(xf, a_ref, n);
                else
                    memcpy(a_ref, xf, a_bytes);
                /* magnitude sum_k |w_k a_k| from the dequantized operands */
                CHECK_EQ(dequantize_row(type, w, wdeq, n), 0);
                act_to_float(ref->dot_type, a_ref, adeq, n);
                double mag = 0, exact = 0;
                for (int64_t i = 0; i < n; i++) {
                    mag += fabs((double)wdeq[i] * adeq[i]);
                    exact += (double)wdeq[i] * adeq[i];
                }
                const float s_ref = ref->vec_dot(n, w, a_ref);
                /* the reference itself against the dot of the dequantized rows
                 * (q8_1's min term uses its f16-rounded sum s: not comparable) */
                CHECK_MSG(ref->dot_type == GGML_TYPE_Q8_1 || fabs(s_ref - exact) <= TOL_DOT_REL * mag + 1e-30,
                          "%s n=%lld: ref %.9g vs dequantized dot %.9g (|w a| sum %.3g)",
                          ggml_type_name(type), (long long)n, s_ref, exact, mag);
                for (int level = 1; level <= omni_cpu()->max_level; level++) {
                    if (!level_present(level))
                        continue;
                    const struct omni_quant_ops *op = omni_quant_ops_at(type, level);
                    if (op->from_float) {
                        memset(a_lvl, 0x5a, a_bytes);
                        op->from_float(xf, a_lvl, n);
                        CHECK_MSG(memcmp(a_lvl, a_ref, a_bytes) == 0,
                                  "%s level %s n=%lld: activation quantizer differs from ref",
                                  ggml_type_name(type), omni_cpu_level_name(level), (long long)n);
                    }
                    const float s = op->vec_dot(n, w, a_ref);
                    CHECK_MSG(fabs((double)s - s_ref) <= TOL_DOT_REL * mag + 1e-30,
                              "%s level %s n=%lld: %.9g vs ref %.9g (|w a| sum %.3g)",
                              ggml_type_name(type), omni_cpu_level_name(level), (long long)n, s,
                              s_ref, mag);
                }
            }
        }
    }
}

/* Every level's multi-row kernel equals, bit for bit, its vec_dot of each
 * activation row (so a row's result does not depend on its neighbours), and
 * the scalar reference within TOL_DOT_REL; output stride and row stride as
 * matmul.c uses them. */
TEST(quant_vec_dot_n_matches_vec_dot)
{
    enum { N = 4 * QK_K, STRIDE = 3 };
    static float xf[N], wdeq[N], adeq[N];
    static uint8_t w[N * 4], a[OMNI_DOT_COLS_MAX][N * 4];
    rng_state = 77;
    int tested = 0;
    for (size_t ti = 0; ti < sizeof dot_types / sizeof *dot_types; ti++) {
        const int type = dot_types[ti];
        const struct omni_quant_ops *ref = omni_quant_ops_at(type, OMNI_CPU_SCALAR);
        const size_t a_row = sizeof a[0];
        random_weights(type, w, N);
        CHECK_EQ(dequantize_row(type, w, wdeq, N), 0);
        float want_ref[OMNI_DOT_COLS_MAX];
        double mag[OMNI_DOT_COLS_MAX];
        for (int c = 0; c < OMNI_DOT_COLS_MAX; c++) {
            for (int64_t i = 0; i < N; i++)
                xf[i] = frand() * 2.0f;
            if (ref->from_float)
                ref->from_float(xf, a[c], N);
            else
                memcpy(a[c], xf, sizeof xf);
            act_to_float(ref->dot_type, a[c], adeq, N);
            mag[c] = 0;
            for (int64_t i = 0; i < N; i++)
                mag[c] += fabs((double)wdeq[i] * adeq[i]);
            want_ref[c] = ref->vec_dot(N, w, a[c]);
        }
        for (int level = 0; level <= omni_cpu()->max_level; level++) {
            const struct omni_quant_ops *op = omni_quant_ops_at(type, level);
            if (!op->vec_dot_n || !level_present(level))
                continue;
            tested++;
            for (int nc = 1; nc <= OMNI_DOT_COLS_MAX; nc++) {
                float s[OMNI_DOT_COLS_MAX * STRIDE];
                memset(s, 0xff, sizeof s);
                op->vec_dot_n(N, w, a[0], a_row, nc, s, STRIDE);
                for (int c = 0; c < nc; c++) {
                    const float one = op->vec_dot(N, w, a[c]);
                    CHECK_MSG(memcmp(&s[c * STRIDE], &one, sizeof one) == 0,
                              "%s level %s cols %d: column %d %.9g != vec_dot %.9g",
                              ggml_type_name(type), omni_cpu_level_name(level), nc, c,
                              s[c * STRIDE], one);
                    CHECK_MSG(fabs((double)one - want_ref[c]) <= TOL_DOT_REL * mag[c] + 1e-30,
                              "%s level %s: %.9g vs ref %.9g", ggml_type_name(type),
                              omni_cpu_level_name(level), one, want_ref[c]);
                }
            }
        }
    }
    if (omni_cpu()->max_level >= OMNI_CPU_AVX2)
        CHECK(tested > 0);
}

/* Every level's vec_dot_prep (decode's one-row dot with the activation's
 * per-block data prepared once) equals the scalar reference within
 * TOL_DOT_REL, q8_0's equals its vec_dot bit for bit below AVX-512 VNNI (its
 * 512-bit form has its own bits there), and every length of
 * blocks runs (the kernels take 4 blocks at a time, the rest one by one);
 * act_prep's floats are the block scales and scale * sum of the int8s. */
TEST(quant_vec_dot_prep_matches_ref)
{
    enum { NMAX = 160 * 32 };
    static float xf[NMAX], wdeq[NMAX], adeq[NMAX], prep[OMNI_ACT_PREP_FLOATS(NMAX)];
    static uint8_t w[NMAX * 4], a[NMAX * 4];
    static const int types[] = { GGML_TYPE_Q8_0, GGML_TYPE_Q4_0, GGML_TYPE_Q5_0 };
    const int64_t lens[] = { 32, 64, 96, 128, 160, 896, 4864, NMAX };
    rng_state = 4242;
    int tested = 0;
    for (size_t ti = 0; ti < sizeof types / sizeof *types; ti++) {
        const int type = types[ti];
        const struct omni_quant_ops *ref = omni_quant_ops_at(type, OMNI_CPU_SCALAR);
        for (size_t li = 0; li < sizeof lens / sizeof *lens; li++) {
            const int64_t n = lens[li], nb = n / 32;
            for (int trial = 0; trial < 3; trial++) {
                for (int64_t i = 0; i < n; i++)
                    xf[i] = frand() * (trial == 1 ? 1e-3f : 2.0f);
                random_weights(type, w, n);
                ref->from_float(xf, a, n);
                CHECK_EQ(dequantize_row(type, w, wdeq, n), 0);
                act_to_float(ref->dot_type, a, adeq, n);
                double mag = 0;
                for (int64_t i = 0; i < n; i++)
                    mag += fabs((double)wdeq[i] * adeq[i]);
                const float s_ref = ref->vec_dot(n, w, a);
                for (int level = 0; level <= omni_cpu()->max_level; level++) {
                    const struct omni_quant_ops *op = omni_quant_ops_at(type, level);
                    CHECK(!op->act_prep == !op->vec_dot_prep);
                    if (!op->vec_dot_prep || !level_present(level))
                        continue;
                    tested++;
                    for (int64_t i = 0; i < OMNI_ACT_PREP_FLOATS(n); i++)
                        prep[i] = NAN;
                    op->act_prep(a, prep, n);
                    const block_q8_0 *yb = (const block_q8_0 *)a;
                    for (int64_t i = 0; i < nb; i++) {
                        int sum = 0;
                        for (int k = 0; k < 32; k++)
                            sum += yb[i].qs[k];
                        CHECK_MSG(prep[i] == omni_fp16_to_fp32(yb[i].d) && prep[nb + i] == prep[i] * (float)sum,
                                  "level %s n=%lld block %lld: prep %.9g %.9g, want %.9g %.9g",
                                  omni_cpu_level_name(level), (long long)n, (long long)i, prep[i], prep[nb + i],
                                  omni_fp16_to_fp32(yb[i].d), omni_fp16_to_fp32(yb[i].d) * (float)sum);
                    }
                    float s;
                    op->vec_dot_prep(n, w, 0, 1, a, prep, &s);
                    CHECK_MSG(fabs((double)s - s_ref) <= TOL_DOT_REL * mag + 1e-30,
                              "%s level %s n=%lld: prep %.9g vs ref %.9g (|w a| sum %.3g)",
                              ggml_type_name(type), omni_cpu_level_name(level), (long long)n, s, s_ref, mag);
                    if (type == GGML_TYPE_Q8_0 && level < OMNI_CPU_AVX512VNNI) { /* (its own form there) */
                        const float one = op->vec_dot(n, w, a);
                        CHECK_MSG(memcmp(&s, &one, sizeof s) == 0, "q8_0 level %s n=%lld: prep %.9g != vec_dot %.9g",
                                  omni_cpu_level_name(level), (long long)n, s, one);
                    }
                }
            }
        }
    }
    if (omni_cpu()->max_level >= OMNI_CPU_AVX2)
        CHECK(tested > 0);
}

/* vec_dot_prep over several weight rows (the AVX2 q4_0/q5_0 kernels take
 * them two at a time, an odd last row alone): every row's output is the bits
 * of that row run by itself, whatever its neighbours and the row count (so
 * decode's bits do not depend on how threads split the rows), and within
 * TOL_DOT_REL of the reference; a stride wider than the row is honoured. */
TEST(quant_vec_dot_prep_rows_independent)
{
    enum { NMAX = 2048, ROWS = 9, STRIDE_PAD = 40 };
    static float xf[NMAX], wdeq[NMAX], prep[OMNI_ACT_PREP_FLOATS(NMAX)];
    static uint8_t w[ROWS * (2 * NMAX + STRIDE_PAD)], a[NMAX * 4]; /* rows of up to 34 bytes per 32 */
    /* 800: pairs with 25 blocks (a tail past the 4-block steps); 896: pairs;
     * 2048: rows of 1152-1408 bytes, one at a time */
    static const int64_t lens[] = { 800, 896, 2048 };
    static const int types[] = { GGML_TYPE_Q8_0, GGML_TYPE_Q4_0, GGML_TYPE_Q5_0 };
    rng_state = 777;
    int tested = 0;
    for (size_t li = 0; li < sizeof lens / sizeof *lens; li++)
    for (size_t ti = 0; ti < sizeof types / sizeof *types; ti++) {
        const int64_t N = lens[li];
        const int type = types[ti];
        const struct omni_quant_ops *ref = omni_quant_ops_at(type, OMNI_CPU_SCALAR);
        const size_t row = ggml_row_size(type, N), stride = row + STRIDE_PAD;
        for (int r = 0; r < ROWS; r++)
            random_weights(type, w + (size_t)r * stride, N);
        for (int64_t i = 0; i < N; i++)
            xf[i] = frand();
        ref->from_float(xf, a, N);
        for (int level = 0; level <= omni_cpu()->max_level; level++) {
            const struct omni_quant_ops *op = omni_quant_ops_at(type, level);
            if (!op->vec_dot_prep || !level_present(level))
                continue;
            tested++;
            op->act_prep(a, prep, N);
            float alone[ROWS];
            for (int r = 0; r < ROWS; r++)
                op->vec_dot_prep(N, w + (size_t)r * stride, stride, 1, a, prep, &alone[r]);
            for (int first = 0; first < 3; first++)
                for (int n_rows = 1; first + n_rows <= ROWS; n_rows++) {
                    float y[ROWS + 1];
                    y[n_rows] = 12345.0f; /* nothing written past the last row */
                    op->vec_dot_prep(N, w + (size_t)first * stride, stride, n_rows, a, prep, y);
                    CHECK(y[n_rows] == 12345.0f);
                    for (int r = 0; r < n_rows; r++)
                        CHECK_MSG(memcmp(&y[r], &alone[first + r], sizeof(float)) == 0,
                                  "%s level %s n=%lld rows %d+%d: row %d %.9g, alone %.9g", ggml_type_name(type),
                                  omni_cpu_level_name(level), (long long)N, first, n_rows, r, y[r], alone[first + r]);
                }
            for (int r = 0; r < ROWS; r++) {
                CHECK_EQ(dequantize_row(type, w + (size_t)r * stride, wdeq, N), 0);
                double mag = 0;
                for (int64_t i = 0; i < N; i++)
                    mag += fabs((double)wdeq[i] * xf[i]);
                const float s_ref = ref->vec_dot(N, w + (size_t)r * stride, a);
                CHECK_MSG(fabs((double)alone[r] - s_ref) <= TOL_DOT_REL * mag + 1e-30, "%s level %s row %d: %.9g vs ref %.9g",
                          ggml_type_name(type), omni_cpu_level_name(level), r, alone[r], s_ref);
            }
        }
    }
    if (omni_cpu()->max_level >= OMNI_CPU_AVX2)
        CHECK(tested > 0);
}

#if defined(__x86_64__)
/* The AVX-512 VNNI level's q4_0/q5_0 decode form with VBMI's byte permutes
 * and BITALG's bit shuffle gives the bits of the form without them (it only
 * moves the same bytes), for any row count, and neither reads past the last
 * row's end: the rows end at a page the test made unreadable. */
TEST(quant_q40w4_vbmi_same_bits)
{
    enum { ROWS = 7 };
    if (!level_present(OMNI_CPU_AVX512VNNI))
        SKIP("no AVX-512 VNNI on this CPU");
    const bool vbmi = omni_cpu()->avx512_vbmi && omni_cpu()->avx512_bitalg;
    static const int types[] = { GGML_TYPE_Q4_0, GGML_TYPE_Q5_0 };
    static const int64_t lens[] = { 128, 800, 896, 4864 };
    static float xf[4864], prep[OMNI_ACT_PREP_FLOATS(4864)];
    static uint8_t a[4864 * 2];
    const size_t page = (size_t)sysconf(_SC_PAGESIZE), span = 16 * page;
    uint8_t *map = mmap(NULL, span + page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    CHECK(map != MAP_FAILED);
    if (map == MAP_FAILED)
        return;
    CHECK_EQ(mprotect(map + span, page, PROT_NONE), 0);
    rng_state = 4040;
    for (size_t ti = 0; ti < sizeof types / sizeof *types; ti++)
        for (size_t li = 0; li < sizeof lens / sizeof *lens; li++) {
            const int type = types[ti], five = type == GGML_TYPE_Q5_0;
            const int64_t n = lens[li];
            const size_t row = ggml_row_size(type, n);
            uint8_t *w = map + span - ROWS * row; /* the last row ends at the unreadable page */
            for (int r = 0; r < ROWS; r++)
                random_weights(type, w + (size_t)r * row, n);
            for (int64_t i = 0; i < n; i++)
                xf[i] = frand();
            const struct omni_quant_ops *op = omni_quant_ops_at(type, OMNI_CPU_AVX512VNNI);
            op->from_float(xf, a, n);
            op->act_prep(a, prep, n);
            for (int first = 0; first < ROWS; first++) {
                float plain[ROWS], fast[ROWS];
                omni_x86_q40w4_rows(five, 0, n, w + (size_t)first * row, row, ROWS - first, a, prep, plain);
                if (!vbmi)
                    continue;
                omni_x86_q40w4_rows(five, 1, n, w + (size_t)first * row, row, ROWS - first, a, prep, fast);
                CHECK_MSG(memcmp(plain, fast, sizeof(float) * (size_t)(ROWS - first)) == 0,
                          "%s n=%lld rows %d..%d: vbmi %.9g, plain %.9g", ggml_type_name(type), (long long)n, first,
                          ROWS - 1, fast[0], plain[0]);
            }
        }
    munmap(map, span + page);
}
#endif

/* The K-quants' and f16's vec_dot_prep (decode's rows in streams: act_prep
 * does nothing or lays the activation out) gives every row the bits it has alone, for any row count and
 * split (rows in 4 lockstep sub-ranges plus a remainder), a stride wider than
 * the row honoured and nothing written past the last row; those bits are
 * vec_dot's, except q4_K's and q6_K's from the AVX-512 VNNI level on
 * (their own decode forms, quants_avx512.c's q4kw_rows and q6kw_rows: other
 * lanes, so within the dot tolerance of the reference). */
TEST(quant_k_vec_dot_prep_is_vec_dot)
{
    enum { N = 1024, ROWS = 13, PAD = 48 };
    static const int types[] = { GGML_TYPE_Q4_K, GGML_TYPE_Q5_K, GGML_TYPE_Q6_K, GGML_TYPE_F16 };
    static uint8_t w[ROWS * (2 * N + PAD)], a[N * 4]; /* f16 rows, f32 activations */
    static float xf[N], prep[OMNI_ACT_PREP_FLOATS(N)], wdeq[N];
    rng_state = 99;
    int tested = 0;
    for (size_t ti = 0; ti < sizeof types / sizeof *types; ti++) {
        const int type = types[ti];
        const size_t stride = ggml_row_size(type, N) + PAD;
        for (int r = 0; r < ROWS; r++)
            random_weights(type, w + (size_t)r * stride, N);
        for (int i = 0; i < N; i++)
            xf[i] = frand();
        const struct omni_quant_ops *ref = omni_quant_ops_at(type, OMNI_CPU_SCALAR);
        if (ref->from_float)
            ref->from_float(xf, a, N);
        else
            memcpy(a, xf, sizeof xf);
        for (int level = 0; level <= omni_cpu()->max_level; level++) {
            const struct omni_quant_ops *op = omni_quant_ops_at(type, level);
            CHECK(!op->act_prep == !op->vec_dot_prep);
            if (!op->vec_dot_prep || !level_present(level))
                continue;
            tested++;
            const bool own_bits = (type == GGML_TYPE_Q4_K || type == GGML_TYPE_Q6_K) && level >= OMNI_CPU_AVX512VNNI;
            op->act_prep(a, prep, N);
            float alone[ROWS];
            for (int r = 0; r < ROWS; r++) {
                op->vec_dot_prep(N, w + (size_t)r * stride, stride, 1, a, prep, &alone[r]);
                const float one = op->vec_dot(N, w + (size_t)r * stride, a);
                if (!own_bits) {
                    CHECK_MSG(memcmp(&alone[r], &one, sizeof one) == 0, "%s level %s row %d: %.9g, vec_dot %.9g",
                              ggml_type_name(type), omni_cpu_level_name(level), r, alone[r], one);
                    continue;
                }
                CHECK_EQ(dequantize_row(type, w + (size_t)r * stride, wdeq, N), 0);
                double mag = 0;
                for (int i = 0; i < N; i++)
                    mag += fabs((double)wdeq[i] * xf[i]);
                const float s_ref = ref->vec_dot(N, w + (size_t)r * stride, a);
                CHECK_MSG(fabs((double)alone[r] - s_ref) <= TOL_DOT_REL * mag + 1e-30,
                          "%s level %s row %d: %.9g vs ref %.9g", ggml_type_name(type),
                          omni_cpu_level_name(level), r, alone[r], s_ref);
            }
            for (int first = 0; first < 2; first++)
                for (int n_rows = 1; first + n_rows <= ROWS; n_rows++) {
                    float y[ROWS + 1];
                    y[n_rows] = 777.0f;
                    op->vec_dot_prep(N, w + (size_t)first * stride, stride, n_rows, a, prep, y);
                    CHECK(y[n_rows] == 777.0f);
                    for (int r = 0; r < n_rows; r++)
                        CHECK_MSG(memcmp(&y[r], &alone[first + r], sizeof(float)) == 0,
                                  "%s level %s rows %d+%d: row %d %.9g, alone %.9g", ggml_type_name(type),
                                  omni_cpu_level_name(level), first, n_rows, r, y[r], alone[first + r]);
                }
        }
    }
    if (omni_cpu()->max_level >= OMNI_CPU_AVX2)
        CHECK(tested > 0);
}

/* The low-bit types through omni_matmul, on the per-row dot path (batch 1
 * and 5, threads) and the dequantize + sgemm path (40 rows): every output
 * equals the float product of the dequantized weights and the activations,
 * within the activation quantization's error (Q8: 1/254 of a block's
 * largest value, relative to sum |w x|) or float rounding for sgemm. */
TEST(quant_lowbit_matmul)
{
    static const int types[] = { GGML_TYPE_Q2_K, GGML_TYPE_Q3_K, GGML_TYPE_IQ4_NL,
                                 GGML_TYPE_IQ4_XS, GGML_TYPE_MXFP4 };
    enum { N_IN = 512, N_OUT = 24, B_MAX = 40 };
    static float wf[N_OUT * N_IN], x[B_MAX * N_IN], y[B_MAX * N_OUT];
    static uint8_t w[N_OUT * N_IN];
    char err[128];
    struct tpool *tp = tpool_new(2, err, sizeof err);
    CHECK(tp);
    rng_state = 31;
    for (size_t ti = 0; ti < sizeof types / sizeof *types; ti++) {
        const int type = types[ti];
        random_weights(type, w, (int64_t)N_OUT * N_IN);
        CHECK_EQ(dequantize_row(type, w, wf, (int64_t)N_OUT * N_IN), 0);
        const struct omni_tensor t = { .type = type, .ne = { N_IN, N_OUT }, .data = w };
        static const int batches[] = { 1, 5, B_MAX };
        for (int bi = 0; bi < 3; bi++) {
            const int nb = batches[bi];
            for (int i = 0; i < nb * N_IN; i++)
                x[i] = frand();
            omni_matmul(tp, &t, x, nb, y);
            for (int b = 0; b < nb; b++)
                for (int r = 0; r < N_OUT; r++) {
                    double want = 0, mag = 0;
                    for (int k = 0; k < N_IN; k++) {
                        want += (double)wf[r * N_IN + k] * x[b * N_IN + k];
                        mag += fabs((double)wf[r * N_IN + k] * x[b * N_IN + k]);
                    }
                    CHECK_MSG(fabs(y[b * N_OUT + r] - want) <= 0.01 * mag + 1e-20,
                              "%s batch %d row %d col %d: %.6g vs %.6g (|w x| %.3g)",
                              ggml_type_name(type), nb, b, r, y[b * N_OUT + r], want, mag);
                }
        }
    }
    tpool_free(tp);
}

/* Weights whose integer parts sit at the ends of their ranges (every
 * payload byte c: nibbles 15 or 8, q8_0's -128 or -1, q6_K's 63, scales 63)
 * with sane f16 scales: the products that would saturate an int16 pair sum
 * if any could. */
static void extreme_weights(int type, uint8_t *w, int64_t n, uint8_t c)
{
    const struct ggml_type_traits *tr = ggml_type_traits_of(type);
    const int64_t nb = n / tr->blck_size;
    memset(w, c, (size_t)nb * tr->type_size);
    const ggml_half d = omni_fp32_to_fp16(0.01f), m = omni_fp32_to_fp16(0.003f);
    for (int64_t b = 0; b < nb; b++) {
        uint8_t *blk = w + b * tr->type_size;
        size_t od = 0, om = SIZE_MAX;
        switch (type) {
        case GGML_TYPE_Q4_1: om = offsetof(block_q4_1, m); break;
        case GGML_TYPE_Q5_1: om = offsetof(block_q5_1, m); break;
        case GGML_TYPE_Q4_K: om = offsetof(block_q4_K, dmin); break;
        case GGML_TYPE_Q5_K: om = offsetof(block_q5_K, dmin); break;
        case GGML_TYPE_Q6_K: od = offsetof(block_q6_K, d); break;
        case GGML_TYPE_Q2_K: od = offsetof(block_q2_K, d); om = offsetof(block_q2_K, dmin); break;
        case GGML_TYPE_Q3_K: od = offsetof(block_q3_K, d); break;
        case GGML_TYPE_MXFP4: blk[0] = 120; od = SIZE_MAX; break; /* E8M0 2^-7 */
        default: break;
        }
        if (od != SIZE_MAX)
            memcpy(blk + od, &d, sizeof d);
        if (om != SIZE_MAX)
            memcpy(blk + om, &m, sizeof m);
    }
}

/* Level avxvnni (the AVX2 sources built with AVX-VNNI: vpdpbusd in place of
 * vpmaddubsw + vpmaddwd) gives the AVX2 level's bits in every dot kernel:
 * random and extreme weights, activations at +-127 and random. Runs where
 * the CPU has AVX-VNNI (Intel Alder Lake and later, Sapphire Rapids). */
TEST(quant_avxvnni_matches_avx2_bits)
{
    if (!level_present(OMNI_CPU_AVXVNNI))
        SKIP("no AVX-VNNI on this CPU (CPUID.7.1:EAX[4]): level avxvnni not run here");
    enum { NMAX = 20 * QK_K, NC = OMNI_DOT_COLS_MAX };
    static float xf[NMAX], prep2[OMNI_ACT_PREP_FLOATS(NMAX)], prepv[OMNI_ACT_PREP_FLOATS(NMAX)];
    static uint8_t w[3 * NMAX * 4], a[NC][NMAX * 4]; /* f32 rows: 4 bytes an element */
    const int64_t lens[] = { 256, 768, 1024, 4864, NMAX };
    static const uint8_t fills[] = { 0xff, 0x80, 0x88, 0x77 };
    rng_state = 1313;
    int compared = 0;
    for (size_t ti = 0; ti < sizeof dot_types / sizeof *dot_types; ti++) {
        const int type = dot_types[ti];
        const struct omni_quant_ops *o2 = omni_quant_ops_at(type, OMNI_CPU_AVX2);
        const struct omni_quant_ops *ov = omni_quant_ops_at(type, OMNI_CPU_AVXVNNI);
        CHECK(o2 && ov);
        const int blck = ggml_type_traits_of(type)->blck_size;
        for (size_t li = 0; li < sizeof lens / sizeof *lens; li++) {
            const int64_t n = lens[li] / blck * blck;
            const size_t row = ggml_row_size(type, n);
            for (int trial = 0; trial < 6; trial++) {
                for (int r = 0; r < 3; r++) {
                    uint8_t *wr = w + (size_t)r * row;
                    if (trial < 2 || blck == 1)
                        random_weights(type, wr, n);
                    else
                        extreme_weights(type, wr, n, fills[(trial - 2 + r) % 4]);
                }
                for (int c = 0; c < NC; c++) {
                    for (int64_t i = 0; i < n; i++) /* trial 1, 3, 5: every activation +-127 */
                        xf[i] = trial % 2 ? ((rnd32() >> 7) & 1 ? 1.0f : -1.0f) : frand();
                    if (o2->from_float)
                        o2->from_float(xf, a[c], n);
                    else
                        memcpy(a[c], xf, (size_t)n * sizeof(float));
                }
                float s2[3 * NC], sv[3 * NC];
                for (int r = 0; r < 3; r++) {
                    s2[r] = o2->vec_dot(n, w + (size_t)r * row, a[0]);
                    sv[r] = ov->vec_dot(n, w + (size_t)r * row, a[0]);
                }
                CHECK_MSG(memcmp(s2, sv, 3 * sizeof(float)) == 0, "%s n=%lld trial %d: vec_dot %.9g %.9g %.9g (avx2) vs %.9g %.9g %.9g",
                          ggml_type_name(type), (long long)n, trial, s2[0], s2[1], s2[2], sv[0], sv[1], sv[2]);
                compared++;
                if (o2->vec_dot_n && ov->vec_dot_n) {
                    o2->vec_dot_n(n, w, a[0], sizeof a[0], NC, s2, 1);
                    ov->vec_dot_n(n, w, a[0], sizeof a[0], NC, sv, 1);
                    CHECK_MSG(memcmp(s2, sv, NC * sizeof(float)) == 0, "%s n=%lld trial %d: vec_dot_n differs",
                              ggml_type_name(type), (long long)n, trial);
                }
                if (o2->vec_dot_prep && ov->vec_dot_prep) {
                    o2->act_prep(a[0], prep2, n);
                    ov->act_prep(a[0], prepv, n);
                    if (o2->dot_type == GGML_TYPE_Q8_0) /* the K-quants' act_prep writes nothing */
                        CHECK(memcmp(prep2, prepv, OMNI_ACT_PREP_FLOATS(n) * sizeof(float)) == 0);
                    o2->vec_dot_prep(n, w, row, 3, a[0], prep2, s2);
                    ov->vec_dot_prep(n, w, row, 3, a[0], prepv, sv);
                    CHECK_MSG(memcmp(s2, sv, 3 * sizeof(float)) == 0, "%s n=%lld trial %d: vec_dot_prep %.9g vs %.9g",
                              ggml_type_name(type), (long long)n, trial, s2[0], sv[0]);
                }
            }
        }
    }
    CHECK(compared > 0);
}

/* The AVX-512 levels' tables never hold a level-avxvnni kernel (a CPU may
 * have AVX-512 without AVX-VNNI): every entry there that is not the AVX2
 * table's is not the avxvnni table's either (levels this CPU has; those
 * above its best copy the best one). */
TEST(quant_avx512_tables_without_avxvnni)
{
    for (int type = 0; type < GGML_TYPE_COUNT; type++) {
        const struct omni_quant_ops *o2 = omni_quant_ops_at(type, OMNI_CPU_AVX2);
        const struct omni_quant_ops *ov = omni_quant_ops_at(type, OMNI_CPU_AVXVNNI);
        if (!o2 || !ov)
            continue;
        const void *f2[] = { (void *)o2->vec_dot, (void *)o2->vec_dot_n, (void *)o2->vec_dot_prep, (void *)o2->vec_dot_streams };
        const void *fv[] = { (void *)ov->vec_dot, (void *)ov->vec_dot_n, (void *)ov->vec_dot_prep, (void *)ov->vec_dot_streams };
        for (int lvl = OMNI_CPU_AVX512; lvl <= omni_cpu()->max_level; lvl++) {
            const struct omni_quant_ops *o = omni_quant_ops_at(type, lvl);
            const void *f[] = { (void *)o->vec_dot, (void *)o->vec_dot_n, (void *)o->vec_dot_prep, (void *)o->vec_dot_streams };
            for (int k = 0; k < 4; k++)
                CHECK_MSG(!f[k] || f[k] == f2[k] || f[k] != fv[k], "%s level %s: kernel %d is avxvnni's",
                          ggml_type_name(type), omni_cpu_level_name(lvl), k);
        }
    }
}

TEST(quant_cpu_levels_and_describe)
{
    const struct omni_cpu_features *f = omni_cpu();
    CHECK(f->max_level >= OMNI_CPU_SCALAR && f->max_level < OMNI_CPU_LEVELS);
    CHECK(omni_cpu_level() <= f->max_level);
    char line[160];
    omni_cpu_describe(line, sizeof line);
    CHECK_STR_CONTAINS(line, "(level ");
    if (f->max_level >= OMNI_CPU_AVX2)
        CHECK_STR_CONTAINS(line, "AVX2 FMA F16C");
    const int saved = omni_cpu_level();
    CHECK_EQ(omni_cpu_set_level(OMNI_CPU_SCALAR), OMNI_CPU_SCALAR);
    CHECK_EQ(omni_cpu_set_level(99), f->max_level);
    omni_cpu_set_level(saved);
    CHECK_EQ(omni_cpu_level_from_name("AVX512"), OMNI_CPU_AVX512);
    CHECK_EQ(omni_cpu_level_from_name("avxvnni"), OMNI_CPU_AVXVNNI);
    CHECK_STR_EQ(omni_cpu_level_name(OMNI_CPU_AVXVNNI), "avxvnni");
    CHECK_EQ(omni_cpu_set_level(OMNI_CPU_AVXVNNI), omni_cpu_usable_level(f, OMNI_CPU_AVXVNNI));
    if (f->max_level >= OMNI_CPU_AVXVNNI)
        CHECK_EQ(omni_cpu_set_level(OMNI_CPU_AVXVNNI), f->avx_vnni ? OMNI_CPU_AVXVNNI : OMNI_CPU_AVX2);
    omni_cpu_set_level(saved);
    CHECK_EQ(omni_cpu_level_from_name("sse"), -1);
    char tiny[4];
    omni_cpu_describe(tiny, sizeof tiny); /* truncates, stays terminated */
    CHECK(strlen(tiny) < sizeof tiny);
}

/* omni_vec_expf against libm's expf (the scalar reference) over the range it
 * promises, random and on a grid, every tail length, in place; and the
 * clamped ends. */
TEST(quant_vec_expf_matches_libm)
{
    rng_state = 7;
    enum { N = 4099 };
    float *x = malloc(N * sizeof *x), *y = malloc(N * sizeof *y);
    CHECK(x && y);
    for (int i = 0; i < N; i++)
        x[i] = i % 2 ? -87.0f + 175.0f * (float)i / N : 20.0f * frand();
    double worst = 0.0;
    for (int n = N - 17; n <= N; n++) {
        omni_vec_expf(n, y, x);
        for (int i = 0; i < n; i++) {
            const double want = expf(x[i]), rel = fabs(y[i] - want) / want;
            worst = rel > worst ? rel : worst;
        }
    }
    CHECK_MSG(worst <= OMNI_EXPF_REL_ERR, "worst relative error %g", worst);
    memcpy(y, x, N * sizeof *x);
    omni_vec_expf(N, y, y);
    for (int i = 0; i < N; i++)
        CHECK(fabs(y[i] - expf(x[i])) <= OMNI_EXPF_REL_ERR * expf(x[i]));
    const float ends[4] = { -1000.0f, -INFINITY, 1000.0f, 0.0f };
    float e[4];
    omni_vec_expf(4, e, ends);
    CHECK(e[0] >= 0.0f && e[0] < 1e-37f && e[1] >= 0.0f && e[1] < 1e-37f);
    CHECK(isfinite(e[2]) && e[2] > 1e38f);
    CHECK_EQ(e[3], 1.0f);
    free(x);
    free(y);
}
