/* test_matmul.c - omni_matmul for every weight type, batch sizes on both
 * sides of OMNI_MATMUL_BLAS_MIN, 1-3 threads and every CPU level, against a
 * double-precision product of the dequantized weights. */
#include "src/core/cpu.h"
#include "src/core/matmul.h"
#include "src/core/membw.h"
#include "src/core/quant.h"
#include "src/core/tensor.h"
#include "src/core/threadpool.h"
#include "tests/test.h"

#if defined(__x86_64__)
#include "src/core/arch/x86/x86.h"
#else
static int omni_amx_min_batch(int wtype) { (void)wtype; return 0; }
#define OMNI_X86_GEMM_AVX2_GROUP_MIN 8
#endif

#include <cblas.h>
#include <stdint.h>
#include <stdlib.h>
#include <strings.h>

/* Error budget relative to sum_k |w_k x_k|. Each output must match one of
 * two references that closely: the float product (the sgemm path) or the
 * scalar _ref dot on activations quantized to the dot type (the quantized
 * paths: vec_dot, AMX). Only float summation order may differ, so a broken
 * kernel or a wrong routing of rows matches neither. */
#define TOL_REL 2e-5

static void free_tpool(void *tp) { tpool_free(tp); }

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

/* Both references and the magnitude sum_k |w_k x_k| for nb rows of x. */
struct refs {
    double *exact, *quant, *mag; /* (nb, n_out) */
};

static int make_refs(const struct wfix *f, const float *x, int64_t nb, struct refs *r)
{
    const int64_t n_in = f->t.ne[0], n_out = f->t.ne[1];
    const struct omni_quant_ops *ref = omni_quant_ops_at(f->t.type, 0);
    const size_t w_row = ggml_row_size(f->t.type, n_in), n = (size_t)(nb * n_out);
    uint8_t *xq = malloc(ggml_row_size(GGML_TYPE_F32, n_in));
    r->exact = malloc(n * sizeof(double));
    r->quant = malloc(n * sizeof(double));
    r->mag = malloc(n * sizeof(double));
    if (!xq || !r->exact || !r->quant || !r->mag) {
        free(xq);
        return -1;
    }
    for (int64_t b = 0; b < nb; b++) {
        if (ref->from_float)
            ref->from_float(x + b * n_in, xq, n_in);
        else
            memcpy(xq, x + b * n_in, (size_t)n_in * sizeof(float));
        for (int64_t o = 0; o < n_out; o++) {
            double exact = 0, mag = 0;
            for (int64_t k = 0; k < n_in; k++) {
                double p = (double)f->deq[o * n_in + k] * x[b * n_in + k];
                exact += p;
                mag += fabs(p);
            }
            r->exact[b * n_out + o] = exact;
            r->mag[b * n_out + o] = mag;
            r->quant[b * n_out + o] = ref->vec_dot(n_in, (const uint8_t *)f->data + o * w_row, xq);
        }
    }
    free(xq);
    return 0;
}

static void free_refs(struct refs *r)
{
    free(r->exact);
    free(r->quant);
    free(r->mag);
}

/* Largest violation of the budget over nb x n_out outputs (<= 1 passes). */
static double check_product(const struct refs *r, int64_t nb, int64_t n_out, const float *y)
{
    double worst = 0;
    for (int64_t i = 0; i < nb * n_out; i++) {
        double e = fmin(fabs(y[i] - r->exact[i]), fabs(y[i] - r->quant[i])) /
                   (TOL_REL * r->mag[i] + 1e-6);
        if (!(e <= worst))
            worst = e; /* NaN sticks */
    }
    return worst;
}

static const int types[] = {
    GGML_TYPE_F32, GGML_TYPE_F16, GGML_TYPE_BF16, GGML_TYPE_Q8_0, GGML_TYPE_Q4_0,
    GGML_TYPE_Q4_1, GGML_TYPE_Q5_0, GGML_TYPE_Q5_1, GGML_TYPE_Q4_K, GGML_TYPE_Q5_K,
    GGML_TYPE_Q6_K,
};

/* Batches around every switch point (AMX and the int8 GEMM from
 * OMNI_MATMUL_QUANT_MAX rows and the per-type omni_amx_min_batch, AMX tiles
 * of 4, 8 and 16 rows, GEMM register tiles of 2 and 4 rows, the BLAS path at
 * OMNI_MATMUL_BLAS_MIN, the GEMM's per-type ends at 32, 64, 128 and 256
 * rows) and partial tiles; weight shapes with an odd row
 * count (uneven thread split, partial 16-row groups) and, for 32-element
 * types, an odd block count. */
TEST(matmul_all_types_batches_threads_levels)
{
    static const struct { int64_t n_in, n_out; } shapes[] = { { 512, 37 }, { 544, 21 } };
    const int64_t batches[] = { 1,  2,  3,  4,  5,  6,  7,  8,  9,  10, 11, 12,  13,  14,  15,  16,
                                17, 23, 24, 31, 32, 33, 40, 63, 64, 65, 127, 128, 129, 255, 256, 257 };
    const int64_t max_nb = 257, max_in = 544, max_out = 37;
    float *x = malloc(sizeof(float) * (size_t)(max_in * max_nb));
    float *y = malloc(sizeof(float) * (size_t)(max_out * max_nb));
    struct tpool *pools[4] = { NULL, NULL, tpool_new(2, NULL, 0), tpool_new(3, NULL, 0) };
    test_defer(free_tpool, pools[2]);
    test_defer(free_tpool, pools[3]);
    CHECK(x && y && pools[2] && pools[3]);
    rng_state = 42;
    for (int64_t i = 0; i < max_in * max_nb; i++)
        x[i] = frand();
    const int saved = omni_cpu_level();
    char fail[256] = "";
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0] && !fail[0]; si++)
        for (size_t ti = 0; ti < sizeof types / sizeof types[0] && !fail[0]; ti++) {
            const int64_t n_in = shapes[si].n_in, n_out = shapes[si].n_out;
            if (n_in % ggml_type_traits_of(types[ti])->blck_size)
                continue;
            struct wfix f;
            struct refs r;
            CHECK(make_weights(&f, types[ti], n_in, n_out) == 0);
            CHECK(make_refs(&f, x, max_nb, &r) == 0);
            for (int level = 0; level <= omni_cpu()->max_level && !fail[0]; level++) {
                if (omni_cpu_set_level(level) != level) /* a level this CPU lacks (avxvnni without AVX-VNNI) */
                    continue;
                for (int nt = 1; nt <= 3 && !fail[0]; nt++)
                    for (size_t bi = 0; bi < sizeof batches / sizeof batches[0]; bi++) {
                        const int64_t nb = batches[bi];
                        omni_matmul(pools[nt], &f.t, x, nb, y);
                        double v = check_product(&r, nb, n_out, y);
                        if (!(v <= 1.0)) {
                            snprintf(fail, sizeof fail,
                                     "%s [%lld x %lld] level %s threads %d batch %lld: error %.3g x budget",
                                     ggml_type_name(types[ti]), (long long)n_out, (long long)n_in,
                                     omni_cpu_level_name(level), nt, (long long)nb, v);
                            break;
                        }
                    }
            }
            free_refs(&r);
            free_weights(&f);
        }
    omni_cpu_set_level(saved);
    test_release(pools[2]);
    test_release(pools[3]);
    free(x);
    free(y);
    CHECK_MSG(!fail[0], "%s", fail);
}

/* Each output row depends on its own activation row only: a batch gives
 * every row the bits of the same row in the batch reversed (another
 * composition), in the batch with one more row and computed alone, where
 * omni_matmul_same_kernels says those batch sizes take the same kernels
 * (the per-row dots, vec_dot_n included; the int8 GEMM, whose AVX2
 * q4_0/q5_0 kernel groups rows from OMNI_X86_GEMM_AVX2_GROUP_MIN and whose
 * K-quant kernels start at 2-8 rows; AMX tiles of 4, 8 or 16 rows). The
 * GEMM types must leave the per-row dots from 8 rows without AMX. The
 * batch-invariant mode builds on this. */
static int takes_gemm(int type, int level)
{
    return level >= OMNI_CPU_AVX2 && level < OMNI_CPU_AMX &&
           (type == GGML_TYPE_Q8_0 || type == GGML_TYPE_Q4_0 || type == GGML_TYPE_Q5_0 ||
            type == GGML_TYPE_Q4_K || type == GGML_TYPE_Q5_K || type == GGML_TYPE_Q6_K);
}

TEST(matmul_rows_independent_of_batch_size)
{
    static const int wtypes[] = { GGML_TYPE_Q8_0, GGML_TYPE_Q4_0, GGML_TYPE_Q5_0, GGML_TYPE_Q4_K,
                                  GGML_TYPE_Q5_K, GGML_TYPE_Q6_K };
    enum { NB = 20 };
    const int64_t n_in = 512, n_out = 37;
    float *x = malloc(sizeof(float) * (size_t)(n_in * NB));
    float *xr = malloc(sizeof(float) * (size_t)(n_in * NB)); /* the first b rows reversed */
    float *y1 = malloc(sizeof(float) * (size_t)(n_out * NB)); /* rows one at a time */
    float *y = malloc(sizeof(float) * (size_t)(n_out * NB));
    float *yr = malloc(sizeof(float) * (size_t)(n_out * NB));
    float *yp = malloc(sizeof(float) * (size_t)(n_out * NB)); /* b + 1 rows */
    struct tpool *tp = tpool_new(2, NULL, 0);
    test_defer(free_tpool, tp);
    CHECK(x && xr && y1 && y && yr && yp && tp);
    rng_state = 11;
    for (int64_t i = 0; i < n_in * NB; i++)
        x[i] = frand();
    const int saved = omni_cpu_level();
    char fail[160] = "";
    for (size_t ti = 0; ti < sizeof wtypes / sizeof *wtypes && !fail[0]; ti++) {
        const int t = wtypes[ti];
        struct wfix f;
        CHECK(make_weights(&f, t, n_in, n_out) == 0);
        for (int level = 0; level <= omni_cpu()->max_level && !fail[0]; level++) {
            if (omni_cpu_set_level(level) != level) /* a level this CPU lacks (avxvnni without AVX-VNNI) */
                continue;
            for (int64_t m = 0; m < NB; m++)
                omni_matmul(tp, &f.t, x + m * n_in, 1, y1 + m * n_out);
            for (int64_t b = 2; b < NB && !fail[0]; b++) {
                for (int64_t m = 0; m < b; m++)
                    memcpy(xr + m * n_in, x + (b - 1 - m) * n_in, sizeof(float) * (size_t)n_in);
                omni_matmul(tp, &f.t, x, b, y);
                omni_matmul(tp, &f.t, xr, b, yr);
                omni_matmul(tp, &f.t, x, b + 1, yp);
                const char *what = NULL;
                for (int64_t m = 0; m < b && !what; m++) {
                    const size_t row = sizeof(float) * (size_t)n_out;
                    if (memcmp(y + m * n_out, yr + (b - 1 - m) * n_out, row) != 0)
                        what = "the batch reversed";
                    else if (omni_matmul_same_kernels(t, b, b + 1) && memcmp(y + m * n_out, yp + m * n_out, row) != 0)
                        what = "one more row";
                    else if (omni_matmul_same_kernels(t, b, 1) && memcmp(y + m * n_out, y1 + m * n_out, row) != 0)
                        what = "single rows";
                }
                if (!what && b >= 8 && takes_gemm(t, level) && omni_matmul_same_kernels(t, b, 1))
                    what = "single rows' kernels (the per-row dots)";
                if (what)
                    snprintf(fail, sizeof fail, "%s level %s batch %lld: rows differ from %s",
                             ggml_type_name(t), omni_cpu_level_name(level), (long long)b, what);
            }
        }
        free_weights(&f);
    }
    omni_cpu_set_level(saved);
    test_release(tp);
    free(x);
    free(xr);
    free(y1);
    free(y);
    free(yr);
    free(yp);
    CHECK_MSG(!fail[0], "%s", fail);
}

#if defined(__x86_64__)
/* The K-quant GEMM kernels called directly, for every batch size the
 * dispatch might give them (and chunk edges past it: 64 activation rows
 * share a pack) and row ranges that start and end inside 8-row groups:
 * each output within TOL_REL of the scalar reference dot, and bit for bit
 * the same as the same pair computed in a batch of one, at every level
 * (AVX2 and AVX-512 VNNI share their integer sums and float steps). */
TEST(matmul_gemm_k_any_batch_matches_reference)
{
    static const int ktypes[] = { GGML_TYPE_Q4_K, GGML_TYPE_Q5_K, GGML_TYPE_Q6_K };
    static const int64_t batches[] = { 1, 2, 3, 4, 5, 7, 8, 9, 13, 16, 31, 32, 40, 63, 64, 65, 70 };
    enum { MAX_NB = 70 };
    const int64_t n_in = 768, n_out = 45, r0 = 3, r1 = 42; /* 3 super-blocks; groups cut at both ends */
    const int max_level = omni_cpu()->max_level;
    if (max_level < OMNI_CPU_AVX2)
        SKIP("no AVX2");
    float *x = malloc(sizeof(float) * (size_t)(n_in * MAX_NB));
    float *y = malloc(sizeof(float) * (size_t)(n_out * MAX_NB));
    float *y1 = malloc(sizeof(float) * (size_t)(n_out * MAX_NB)); /* each row alone, AVX2 */
    const size_t xq_row = ggml_row_size(GGML_TYPE_Q8_K, n_in);
    uint8_t *xq = malloc(xq_row * MAX_NB);
    CHECK(x && y && y1 && xq);
    rng_state = 5;
    for (int64_t i = 0; i < n_in * MAX_NB; i++)
        x[i] = frand() * (i % 97 == 0 ? 8.0f : 1.0f);
    for (int64_t b = 0; b < MAX_NB; b++)
        CHECK(quantize_row(GGML_TYPE_Q8_K, x + b * n_in, xq + (size_t)b * xq_row, n_in) == 0);
    char fail[200] = "";
    for (size_t ti = 0; ti < sizeof ktypes / sizeof *ktypes && !fail[0]; ti++) {
        struct wfix f;
        CHECK(make_weights(&f, ktypes[ti], n_in, n_out) == 0);
        const size_t w_row = ggml_row_size(ktypes[ti], n_in);
        const struct omni_quant_ops *ref = omni_quant_ops_at(ktypes[ti], 0);
        for (int64_t b = 0; b < MAX_NB; b++)
            omni_x86_gemm_k_avx2(ktypes[ti], f.data, w_row, n_in, n_out, xq + (size_t)b * xq_row,
                                 xq_row, 1, y1 + b * n_out, r0, r1);
        for (int64_t b = 0; b < MAX_NB && !fail[0]; b++)
            for (int64_t o = r0; o < r1; o++) {
                double mag = 0;
                for (int64_t k = 0; k < n_in; k++)
                    mag += fabs((double)f.deq[o * n_in + k] * x[b * n_in + k]);
                const double want = ref->vec_dot(n_in, (const uint8_t *)f.data + o * w_row, xq + (size_t)b * xq_row);
                if (!(fabs(y1[b * n_out + o] - want) <= TOL_REL * mag + 1e-6)) {
                    snprintf(fail, sizeof fail, "%s row %lld x %lld: %g, reference %g",
                             ggml_type_name(ktypes[ti]), (long long)o, (long long)b, y1[b * n_out + o], want);
                    break;
                }
            }
        for (int use512 = 0; use512 <= (max_level >= OMNI_CPU_AVX512VNNI) && !fail[0]; use512++) {
            for (size_t bi = 0; bi < sizeof batches / sizeof *batches && !fail[0]; bi++) {
                const int64_t nb = batches[bi];
                for (int64_t i = 0; i < n_out * nb; i++)
                    y[i] = -1.0f; /* outside r0..r1 stays */
                if (use512)
                    omni_x86_gemm_k_avx512(ktypes[ti], f.data, w_row, n_in, n_out, xq, xq_row, nb, y, r0, r1);
                else
                    omni_x86_gemm_k_avx2(ktypes[ti], f.data, w_row, n_in, n_out, xq, xq_row, nb, y, r0, r1);
                for (int64_t b = 0; b < nb && !fail[0]; b++)
                    for (int64_t o = 0; o < n_out; o++) {
                        const float want = o >= r0 && o < r1 ? y1[b * n_out + o] : -1.0f;
                        if (memcmp(&y[b * n_out + o], &want, sizeof want) != 0) {
                            snprintf(fail, sizeof fail, "%s level %s batch %lld: row %lld x %lld %.9g, alone %.9g",
                                     ggml_type_name(ktypes[ti]), use512 ? "avx512" : "avx2", (long long)nb,
                                     (long long)o, (long long)b, y[b * n_out + o], want);
                            break;
                        }
                    }
            }
        }
        free_weights(&f);
    }
    free(x);
    free(y);
    free(y1);
    free(xq);
    CHECK_MSG(!fail[0], "%s", fail);
}
#endif

TEST(matmul_same_kernels)
{
    CHECK(omni_matmul_same_kernels(-1, 1, 1));
    CHECK(omni_matmul_same_kernels(GGML_TYPE_Q4_K, 300, 300));
    CHECK(!omni_matmul_same_kernels(-1, 1, OMNI_MATMUL_BLAS_MIN + 8)); /* dots vs tiles or BLAS */
    CHECK(!omni_matmul_same_kernels(GGML_TYPE_Q8_0, 1, 40));
    CHECK(omni_matmul_same_kernels(GGML_TYPE_F32, 1, 31)); /* f32 takes the dots below BLAS */
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

/* matmul.c re-runs OpenBLAS's kernel choice when it fell back to a pre-AVX2
 * core on a CPU that has AVX2 (Debian's 0.3.21 on Sapphire Rapids). */
TEST(matmul_openblas_uses_simd_kernels)
{
    if (omni_cpu()->max_level < OMNI_CPU_AVX2 || getenv("OPENBLAS_CORETYPE"))
        SKIP("no AVX2, or OPENBLAS_CORETYPE set by the user");
    const char *core = openblas_get_corename();
    CHECK(core != NULL);
    CHECK_MSG(strcasecmp(core, "prescott") != 0 && strcasecmp(core, "nehalem") != 0 &&
                  strcasecmp(core, "core2") != 0 && strcasecmp(core, "sandybridge") != 0,
              "OpenBLAS core %s", core);
}

/* omni_matmul_multi gives each weight omni_matmul's bits: one row through
 * the shared parallel region (dot types mixed, Q8_0 activations reused
 * between neighbours, float weights falling back), 2 and 3 threads, every
 * level; several rows and no pool through the fallback. */
TEST(matmul_multi_equals_single)
{
    enum { N_IN = 512, N_OUT = 37 };
    static const int sets[][3] = {
        { GGML_TYPE_Q5_0, GGML_TYPE_Q5_0, GGML_TYPE_Q8_0 }, /* Qwen2.5 Q4_K_M's q/k/v */
        { GGML_TYPE_Q4_0, GGML_TYPE_Q4_K, GGML_TYPE_Q6_K },
        { GGML_TYPE_F16, GGML_TYPE_Q8_0, GGML_TYPE_Q4_0 },
    };
    static float x[3 * N_IN], ya[3][3 * (N_OUT + 2)], yb[3][3 * (N_OUT + 2)];
    rng_state = 99;
    for (int i = 0; i < 3 * N_IN; i++)
        x[i] = frand();
    struct tpool *pools[2] = { tpool_new(2, NULL, 0), tpool_new(3, NULL, 0) };
    test_defer(free_tpool, pools[0]);
    test_defer(free_tpool, pools[1]);
    const int start_level = omni_cpu_level();
    for (size_t si = 0; si < sizeof sets / sizeof sets[0]; si++) {
        struct wfix f[3];
        const struct omni_tensor *w[3];
        for (int k = 0; k < 3; k++) {
            CHECK_EQ(make_weights(&f[k], sets[si][k], N_IN, N_OUT + k), 0);
            w[k] = &f[k].t;
        }
        for (int level = 0; level <= omni_cpu()->max_level; level++) {
            if (omni_cpu_set_level(level) != level) /* a level this CPU lacks (avxvnni without AVX-VNNI) */
                continue;
            for (int pi = -1; pi < 2; pi++) {
                struct tpool *tp = pi < 0 ? NULL : pools[pi];
                for (int64_t nb = 1; nb <= 3; nb += 2) {
                    float *const yp[3] = { ya[0], ya[1], ya[2] };
                    memset(ya, 0xff, sizeof ya);
                    omni_matmul_multi(tp, w, 3, x, nb, yp);
                    for (int k = 0; k < 3; k++) {
                        omni_matmul(tp, w[k], x, nb, yb[k]);
                        CHECK_MSG(memcmp(ya[k], yb[k], sizeof(float) * (size_t)(nb * (N_OUT + k))) == 0,
                                  "set %zu weight %d (%s) level %s threads %d rows %lld: multi != single",
                                  si, k, ggml_type_name(sets[si][k]), omni_cpu_level_name(level),
                                  tp ? pi + 2 : 1, (long long)nb);
                    }
                }
            }
        }
        omni_cpu_set_level(start_level);
        for (int k = 0; k < 3; k++)
            free_weights(&f[k]);
    }
}

/* The bandwidth probe's passes (bench's bandwidth_fraction, bench_decode -B)
 * read a buffer on one or two threads, and bad arguments give 0, not a
 * crash (its speed is a benchmark's business, not a test's). */
TEST(membw_passes_read_and_reject_bad_input)
{
    const size_t bytes = (size_t)1 << 20;
    void *buf = omni_membw_alloc(bytes);
    CHECK(buf != NULL);
    if (!buf)
        return;
    struct tpool *tp = tpool_new(2, NULL, 0);
    CHECK(tp != NULL);
    for (int md = 0; md < OMNI_MEMBW_MODES; md++) {
        CHECK_MSG(omni_membw_pass(NULL, buf, bytes, md) > 0, "mode %s, 1 thread", omni_membw_mode_name(md));
        if (tp)
            CHECK_MSG(omni_membw_pass(tp, buf, bytes, md) > 0, "mode %s, 2 threads", omni_membw_mode_name(md));
    }
    CHECK(omni_membw_pass(NULL, NULL, bytes, OMNI_MEMBW_VEC) == 0);
    CHECK(omni_membw_pass(NULL, buf, 100, OMNI_MEMBW_VEC) == 0); /* under one 256-byte step */
    CHECK(omni_membw_pass(NULL, buf, bytes, OMNI_MEMBW_MODES) == 0);
    CHECK(omni_membw_alloc(0) == NULL);
    if (tp)
        tpool_free(tp);
    omni_membw_free(buf);
}
