/* test_matmul.c - omni_matmul for every weight type, batch sizes on both
 * sides of OMNI_MATMUL_BLAS_MIN, 1-3 threads and every CPU level, against a
 * double-precision product of the dequantized weights. */
#include "src/core/cpu.h"
#include "src/core/matmul.h"
#include "src/core/quant.h"
#include "src/core/tensor.h"
#include "src/core/threadpool.h"
#include "tests/test.h"

#include <stdint.h>
#include <stdlib.h>

/* Error budget relative to sum_k |w_k x_k|: Q8 activations carry ~1/254 of
 * relative rounding error per element; the float sgemm path only summation
 * error. */
#define TOL_Q8_ACT 1.0e-2
#define TOL_FLOAT_ACT 1.0e-5

static uint64_t rng_state;
static float frand(void) /* uniform in [-1, 1) */
{
    rng_state = rng_state * 6364136223846793005ULL + 1442695040888963407ULL;
    return (float)((rng_state >> 40) * (1.0 / (1 << 23))) - 1.0f;
}

struct wfix {
    struct omni_tensor t;
    void *data;
    float *deq; /* (n_out, n_in) */
};

static int make_weights(struct wfix *f, int type, int64_t n_in, int64_t n_out)
{
    size_t row = ggml_row_size(type, n_in);
    float *src = malloc(sizeof(float) * (size_t)(n_in * n_out));
    f->data = malloc(row * (size_t)n_out);
    f->deq = malloc(sizeof(float) * (size_t)(n_in * n_out));
    if (!src || !f->data || !f->deq)
        return -1;
    for (int64_t i = 0; i < n_in * n_out; i++)
        src[i] = frand() * (1.0f + (float)(i % 7)); /* uneven block scales */
    for (int64_t r = 0; r < n_out; r++)
        if (quantize_row(type, src + r * n_in, (uint8_t *)f->data + r * row, n_in) != 0)
            return -1;
    for (int64_t r = 0; r < n_out; r++)
        if (dequantize_row(type, (uint8_t *)f->data + r * row, f->deq + r * n_in, n_in) != 0)
            return -1;
    free(src);
    f->t = (struct omni_tensor){ .type = type, .ne = { n_in, n_out }, .data = f->data };
    return 0;
}

static void free_weights(struct wfix *f)
{
    free(f->data);
    free(f->deq);
}

/* Largest violation of |y - ref| <= tol * sum|w x| + 1e-6 (<= 1 passes). */
static double check_product(const struct wfix *f, const float *x, int64_t nb, const float *y,
                            double tol)
{
    const int64_t n_in = f->t.ne[0], n_out = f->t.ne[1];
    double worst = 0;
    for (int64_t b = 0; b < nb; b++)
        for (int64_t r = 0; r < n_out; r++) {
            double ref = 0, mag = 0;
            for (int64_t k = 0; k < n_in; k++) {
                double p = (double)f->deq[r * n_in + k] * x[b * n_in + k];
                ref += p;
                mag += fabs(p);
            }
            double v = fabs(y[b * n_out + r] - ref) / (tol * mag + 1e-6);
            if (!(v <= worst))
                worst = v; /* NaN sticks */
        }
    return worst;
}

static const int types[] = {
    GGML_TYPE_F32, GGML_TYPE_F16, GGML_TYPE_BF16, GGML_TYPE_Q8_0, GGML_TYPE_Q4_0,
    GGML_TYPE_Q4_1, GGML_TYPE_Q5_0, GGML_TYPE_Q5_1, GGML_TYPE_Q4_K, GGML_TYPE_Q5_K,
    GGML_TYPE_Q6_K,
};

TEST(matmul_all_types_batches_threads_levels)
{
    const int64_t n_in = 512, n_out = 37; /* odd row count: uneven thread split */
    const int64_t batches[] = { 1, 7, 31, 32, 64 };
    const int64_t max_nb = 64;
    float *x = malloc(sizeof(float) * (size_t)(n_in * max_nb));
    float *y = malloc(sizeof(float) * (size_t)(n_out * max_nb));
    CHECK(x && y);
    rng_state = 42;
    for (int64_t i = 0; i < n_in * max_nb; i++)
        x[i] = frand();
    const int saved = omni_cpu_level();
    for (int level = 0; level <= omni_cpu()->max_level; level++) {
        omni_cpu_set_level(level);
        for (int nt = 1; nt <= 3; nt++) {
            struct tpool *tp = nt > 1 ? tpool_new(nt, NULL, 0) : NULL;
            for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
                struct wfix f;
                CHECK(make_weights(&f, types[ti], n_in, n_out) == 0);
                for (size_t bi = 0; bi < sizeof batches / sizeof batches[0]; bi++) {
                    const int64_t nb = batches[bi];
                    const struct omni_quant_ops *op = omni_quant_ops(types[ti]);
                    double tol = nb >= OMNI_MATMUL_BLAS_MIN || op->dot_type == GGML_TYPE_F32
                                     ? TOL_FLOAT_ACT : TOL_Q8_ACT;
                    omni_matmul(tp, &f.t, x, nb, y);
                    double v = check_product(&f, x, nb, y, tol);
                    if (!(v <= 1.0)) {
                        free_weights(&f);
                        tpool_free(tp);
                        omni_cpu_set_level(saved);
                        CHECK_MSG(0, "%s level %s threads %d batch %lld: error %.3g x budget",
                                  ggml_type_name(types[ti]), omni_cpu_level_name(level), nt,
                                  (long long)nb, v);
                    }
                }
                free_weights(&f);
            }
            tpool_free(tp);
        }
    }
    omni_cpu_set_level(saved);
    free(x);
    free(y);
}

TEST(matmul_get_row_matches_dequantize)
{
    struct wfix f;
    rng_state = 7;
    CHECK(make_weights(&f, GGML_TYPE_Q4_K, 256, 5) == 0);
    float row[256];
    omni_tensor_get_row(&f.t, 3, row);
    for (int k = 0; k < 256; k++)
        CHECK(row[k] == f.deq[3 * 256 + k]);
    free_weights(&f);
}

TEST(matmul_rejects_bad_shapes_without_crashing)
{
    float x[40] = { 0 }, y[2] = { 0 };
    uint8_t w[64] = { 0 };
    struct omni_tensor t = { .type = GGML_TYPE_Q4_0, .ne = { 40, 1 }, .data = w }; /* 40 % 32 */
    omni_matmul(NULL, &t, x, 1, y);
    CHECK(isnan(y[0]));
    t = (struct omni_tensor){ .type = GGML_TYPE_IQ2_XXS, .ne = { 256, 1 }, .data = w };
    omni_matmul(NULL, &t, x, 1, y);
    CHECK(isnan(y[0]));
}
