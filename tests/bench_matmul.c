/* bench_matmul.c - the batched matmul paths of matmul.c side by side on one
 * thread: per-row dot kernels ("dots"), the int8 GEMM ("gemm": gemm_*.c,
 * gemm_k_*.c) and dequantize + OpenBLAS sgemm ("blas"), for one weight type
 * and shape over a list of batch sizes. Repetitions are interleaved (dots,
 * gemm, blas, dots, ...) and timed in thread CPU time, so load from other
 * processes on a shared machine skews the three alike; each line gives the
 * medians in ms per activation row and gemm's speed-up over the others.
 *
 * Not a test and not built by make (it calls the kernels, not omni_matmul,
 * to pin a path per batch size). With -DNO_BLAS it needs no OpenBLAS, so a
 * static copy runs on machines without the Debian libraries:
 *   cc -O2 -mavx2 -mfma -mf16c -pthread -I. tests/bench_matmul.c src/core/quant.c \
 *      src/core/cpu.c src/core/tensor.c src/core/omni.c src/core/arch/x86/[a-z]*.c \
 *      $(pkg-config --libs openblas) -lm -o bench_matmul
 *   OMNI_CPU=avx2 ./bench_matmul -t q4_K -s 896x4864 -b 1,2,4,8,16,32,64,128,512
 *   ./bench_matmul --check      (the K GEMM at every level against the reference) */
#include "src/core/cpu.h"
#include "src/core/quant.h"
#include "src/core/tensor.h"

#if defined(__x86_64__)
#include "src/core/arch/x86/x86.h"
#endif
#ifndef NO_BLAS
#include <cblas.h>
#endif

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { PATH_DOTS, PATH_GEMM, PATH_BLAS, N_PATHS };
static const char *path_name[N_PATHS] = { "dots", "gemm", "blas" };

struct setup {
    int type;
    int64_t n_in, n_out, nb;
    const struct omni_quant_ops *op;
    uint8_t *w; /* (n_out, w_row) */
    size_t w_row;
    float *x, *y; /* (nb, n_in), (nb, n_out) */
    uint8_t *xq;
    size_t xq_row;
    float *ad, *deq;
    int32_t *corr;
    void *scratch;
};

static uint64_t rng = 1;
static float frand(void)
{
    rng = rng * 6364136223846793005ULL + 1442695040888963407ULL;
    return (float)((rng >> 40) * (1.0 / (1 << 23))) - 1.0f;
}

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}

static void quantize_x(struct setup *s)
{
    for (int64_t b = 0; b < s->nb; b++)
        s->op->from_float(s->x + b * s->n_in, s->xq + (size_t)b * s->xq_row, s->n_in);
}

static void run_dots(struct setup *s)
{
    quantize_x(s);
    for (int64_t r = 0; r < s->n_out; r++) {
        const uint8_t *wr = s->w + (size_t)r * s->w_row;
        int64_t b = 0;
        if (s->op->vec_dot_n && s->nb > 1)
            for (; b < s->nb; b += OMNI_DOT_COLS_MAX) {
                const int nc = s->nb - b < OMNI_DOT_COLS_MAX ? (int)(s->nb - b) : OMNI_DOT_COLS_MAX;
                s->op->vec_dot_n(s->n_in, wr, s->xq + (size_t)b * s->xq_row, s->xq_row, nc,
                                 s->y + b * s->n_out + r, (size_t)s->n_out);
            }
        for (; b < s->nb; b++)
            s->y[b * s->n_out + r] = s->op->vec_dot(s->n_in, wr, s->xq + (size_t)b * s->xq_row);
    }
}

/* 0, or -1 when no GEMM takes the type at this level */
static int run_gemm(struct setup *s)
{
#if defined(__x86_64__)
    const int level = omni_cpu_level();
    if (level < OMNI_CPU_AVX2)
        return -1;
    if (omni_x86_gemm_k_takes(s->type)) {
        quantize_x(s);
        if (level >= OMNI_CPU_AVX512VNNI)
            omni_x86_gemm_k_avx512(s->type, s->w, s->w_row, s->n_in, s->n_out, s->xq, s->xq_row, s->nb, s->y, 0, s->n_out);
        else
            omni_x86_gemm_k_avx2(s->type, s->w, s->w_row, s->n_in, s->n_out, s->xq, s->xq_row, s->nb, s->y, 0, s->n_out);
        return 0;
    }
    const int k = level >= OMNI_CPU_AVX512VNNI ? omni_x86_gemm_q8_0_offset_avx512(s->type)
                                           : omni_x86_gemm_q8_0_offset_avx2(s->type);
    if (k < 0)
        return -1;
    quantize_x(s);
    omni_x86_gemm_q8_0_prep(k, s->xq, s->xq_row, s->nb, s->n_in, s->ad, s->corr);
    if (level >= OMNI_CPU_AVX512VNNI)
        omni_x86_gemm_q8_0_avx512(s->type, s->w, s->w_row, s->n_in, s->n_out, s->xq, s->xq_row, s->ad, s->corr, s->nb, s->y, 0, s->n_out);
    else
        omni_x86_gemm_q8_0_avx2(s->type, s->w, s->w_row, s->n_in, s->n_out, s->xq, s->xq_row, s->ad, s->corr, s->nb, s->y, 0, s->n_out, s->scratch);
    return 0;
#else
    (void)s;
    return -1;
#endif
}

/* matmul.c's blas_rows on one thread: 8 MB of dequantized rows per sgemm */
static int run_blas(struct setup *s)
{
#ifdef NO_BLAS
    (void)s;
    return -1;
#else
    /* as matmul.c: OpenBLAS's own threads would run beside this thread's
     * CPU clock (before this line the blas column read 1.5-2x too fast) */
    openblas_set_num_threads(1);
    int64_t chunk = 2 * 1024 * 1024 / s->n_in;
    if (chunk < 64)
        chunk = 64;
    if (chunk > s->n_out)
        chunk = s->n_out;
    for (int64_t c0 = 0; c0 < s->n_out; c0 += chunk) {
        const int64_t c1 = c0 + chunk < s->n_out ? c0 + chunk : s->n_out;
        s->op->to_float(s->w + (size_t)c0 * s->w_row, s->deq, (c1 - c0) * s->n_in);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)s->nb, (int)(c1 - c0), (int)s->n_in, 1.0f,
                    s->x, (int)s->n_in, s->deq, (int)s->n_in, 0.0f, s->y + c0, (int)s->n_out);
    }
    return 0;
#endif
}

static int cmp_d(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static int parse_type(const char *name)
{
    for (int t = 0; t < GGML_TYPE_COUNT; t++)
        if (ggml_type_traits_of(t) && ggml_type_name(t) && !strcmp(ggml_type_name(t), name))
            return t;
    return -1;
}

#if defined(__x86_64__)
/* The K GEMM at AVX2 and (where present) AVX-512 against the scalar
 * reference, and the two levels' bits against each other. 0 when all hold. */
static int check_k(void)
{
    static const int types[] = { GGML_TYPE_Q4_K, GGML_TYPE_Q5_K, GGML_TYPE_Q6_K };
    const int64_t n_in = 1024, n_out = 29, nb = 37;
    int bad = 0;
    for (size_t ti = 0; ti < 3; ti++) {
        const int t = types[ti];
        const size_t w_row = ggml_row_size(t, n_in), xq_row = ggml_row_size(GGML_TYPE_Q8_K, n_in);
        float *src = malloc(sizeof(float) * (size_t)(n_in * (n_out > nb ? n_out : nb)));
        uint8_t *w = malloc(w_row * (size_t)n_out), *xq = malloc(xq_row * (size_t)nb);
        float *y2 = malloc(sizeof(float) * (size_t)(nb * n_out)), *y5 = malloc(sizeof(float) * (size_t)(nb * n_out));
        for (int64_t i = 0; i < n_in * n_out; i++)
            src[i] = frand() * (1.0f + (float)(i % 5));
        for (int64_t r = 0; r < n_out; r++)
            quantize_row(t, src + r * n_in, w + (size_t)r * w_row, n_in);
        for (int64_t i = 0; i < n_in * nb; i++)
            src[i] = frand();
        for (int64_t b = 0; b < nb; b++)
            quantize_row(GGML_TYPE_Q8_K, src + b * n_in, xq + (size_t)b * xq_row, n_in);
        omni_x86_gemm_k_avx2(t, w, w_row, n_in, n_out, xq, xq_row, nb, y2, 0, n_out);
        double worst = 0;
        const struct omni_quant_ops *ref = omni_quant_ops_at(t, 0);
        for (int64_t b = 0; b < nb; b++)
            for (int64_t r = 0; r < n_out; r++) {
                const double want = ref->vec_dot(n_in, w + (size_t)r * w_row, xq + (size_t)b * xq_row);
                const double e = fabs(y2[b * n_out + r] - want) / (fabs(want) + 1.0);
                worst = e > worst ? e : worst;
            }
        int same = -1;
        if (omni_cpu()->max_level >= OMNI_CPU_AVX512VNNI) {
            omni_x86_gemm_k_avx512(t, w, w_row, n_in, n_out, xq, xq_row, nb, y5, 0, n_out);
            same = memcmp(y2, y5, sizeof(float) * (size_t)(nb * n_out)) == 0;
        }
        printf("check %s: avx2 vs reference max rel err %.2e; avx512 bits %s\n", ggml_type_name(t), worst,
               same < 0 ? "not run (no AVX-512)" : same ? "equal to avx2" : "DIFFER");
        bad |= !(worst < 1e-4) || same == 0;
        free(src);
        free(w);
        free(xq);
        free(y2);
        free(y5);
    }
    return bad;
}
#endif

int main(int argc, char **argv)
{
    const char *type_s = "q4_K", *shape_s = "896x4864", *batch_s = "1,2,4,8,16,31,32,64,128,256,512";
    int reps = 7;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--check")) {
#if defined(__x86_64__)
            return check_k();
#else
            return 0;
#endif
        } else if (!strcmp(argv[i], "-t") && i + 1 < argc)
            type_s = argv[++i];
        else if (!strcmp(argv[i], "-s") && i + 1 < argc)
            shape_s = argv[++i];
        else if (!strcmp(argv[i], "-b") && i + 1 < argc)
            batch_s = argv[++i];
        else if (!strcmp(argv[i], "-r") && i + 1 < argc)
            reps = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: %s [-t TYPE] [-s OUTxIN] [-b N,N,...] [-r REPS] | --check\n", argv[0]);
            return 2;
        }
    }
    struct setup s = { .type = parse_type(type_s) };
    long long n_out, n_in;
    if (s.type < 0 || sscanf(shape_s, "%lldx%lld", &n_out, &n_in) != 2 || n_in % ggml_type_traits_of(s.type)->blck_size) {
        fprintf(stderr, "bad type %s or shape %s\n", type_s, shape_s);
        return 2;
    }
    s.n_in = n_in;
    s.n_out = n_out;
    s.op = omni_quant_ops(s.type);
    s.w_row = ggml_row_size(s.type, s.n_in);
    int64_t max_nb = 1;
    for (const char *p = batch_s; *p;) {
        const long v = strtol(p, (char **)&p, 10);
        max_nb = v > max_nb ? v : max_nb;
        if (*p == ',')
            p++;
        else if (*p)
            break;
    }
    float *src = malloc(sizeof(float) * (size_t)s.n_in);
    s.w = malloc(s.w_row * (size_t)s.n_out);
    s.x = malloc(sizeof(float) * (size_t)(s.n_in * max_nb));
    s.y = malloc(sizeof(float) * (size_t)(s.n_out * max_nb));
    s.xq_row = ggml_row_size(s.op->dot_type == GGML_TYPE_F32 ? GGML_TYPE_F32 : s.op->dot_type, s.n_in);
    s.xq = malloc(s.xq_row * (size_t)max_nb);
    s.ad = malloc(sizeof(float) * (size_t)(max_nb * (s.n_in / 32 + 2)));
    s.corr = malloc(sizeof(int32_t) * (size_t)(max_nb * (s.n_in / 32 + 2)));
    s.deq = malloc(sizeof(float) * (size_t)(2 * 1024 * 1024 + 64 * s.n_in));
#if defined(__x86_64__)
    s.scratch = aligned_alloc(64, (omni_x86_gemm_q8_0_avx2_scratch(s.n_in) + 63) & ~(size_t)63);
#endif
    for (int64_t r = 0; r < s.n_out; r++) {
        for (int64_t k = 0; k < s.n_in; k++)
            src[k] = frand() * (1.0f + (float)(k % 7));
        quantize_row(s.type, src, s.w + (size_t)r * s.w_row, s.n_in);
    }
    for (int64_t i = 0; i < s.n_in * max_nb; i++)
        s.x[i] = frand();
    printf("%s %lld x %lld, level %s, 1 thread, median of %d, ms per activation row\n", type_s, n_out, n_in,
           omni_cpu_level_name(omni_cpu_level()), reps);
    printf("%6s %9s %9s %9s %10s %10s\n", "rows", "dots", "gemm", "blas", "dots/gemm", "blas/gemm");
    for (const char *p = batch_s; *p;) {
        s.nb = strtol(p, (char **)&p, 10);
        if (*p == ',')
            p++;
        double *t[N_PATHS];
        int ok[N_PATHS] = { 1, 1, 1 };
        for (int k = 0; k < N_PATHS; k++)
            t[k] = calloc((size_t)reps, sizeof(double));
        for (int r = 0; r < reps; r++)
            for (int k = 0; k < N_PATHS; k++) {
                if (!ok[k])
                    continue;
                const double t0 = now_ms();
                if (k == PATH_DOTS)
                    run_dots(&s);
                else if (k == PATH_GEMM)
                    ok[k] = run_gemm(&s) == 0;
                else
                    ok[k] = run_blas(&s) == 0;
                t[k][r] = (now_ms() - t0) / (double)s.nb;
            }
        double med[N_PATHS];
        for (int k = 0; k < N_PATHS; k++) {
            qsort(t[k], (size_t)reps, sizeof(double), cmp_d);
            med[k] = ok[k] ? t[k][reps / 2] : NAN;
            free(t[k]);
        }
        printf("%6lld %9.4f %9.4f %9.4f %10.2f %10.2f\n", (long long)s.nb, med[PATH_DOTS], med[PATH_GEMM],
               med[PATH_BLAS], med[PATH_DOTS] / med[PATH_GEMM], med[PATH_BLAS] / med[PATH_GEMM]);
        fflush(stdout);
    }
    (void)path_name;
    return 0;
}
