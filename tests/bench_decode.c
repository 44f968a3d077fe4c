/* bench_decode.c - decode's matrix-vector product at the memory limit: one
 * activation row against weight matrices too big for the caches (or, with
 * -c 1, one matrix that stays in cache: the kernel's compute bound), through
 * the level's vec_dot per row as matmul.c runs it (a row prefetched -p rows
 * ahead); and the thread pool's cost of one empty parallel region.
 *
 * Not a test and not built by make. To compare two trees, build it against
 * each tree's libomni.a and run the binaries alternately (A B A B): the
 * printed checksum of the output bits must agree.
 *   make BUILD=build-b build-b/libomni.a
 *   cc -O2 -pthread -I. tests/bench_decode.c build-b/libomni.a -lopenblas -lm -o /tmp/bench_decode
 *   /tmp/bench_decode -t q4_0 -s 896x4864 [-n threads] [-r reps] [-c copies] [-p rows] [-h hint]
 * -p: rows ahead the per-row loop prefetches; by default as matmul.c (4, at
 * most 8 KB; none where the level's vec_dot streams: vec_dot_streams).
 * -h: the prefetch's locality hint, 3 (into L1, as matmul.c) down to 0.
 * -x 1: vec_dot even where the level has vec_dot_prep (which matmul.c's
 * one-row products use, as this does by default).
 * -B 1: after each rep, the bandwidth probe's three reads of a 1 GiB buffer
 * on the same threads (membw.h: vec, vec_pf, scalar), one JSON line per rep
 * with the kernel's wall-time GB/s beside them and its ratio to each: the
 * kernel against memory in the same seconds (A B A B within one process).
 * One JSON line per run: GB/s of weights in wall time and in the calling
 * thread's CPU time (the robust number on a loaded machine), and the kernel
 * level (OMNI_CPU caps it). */
#include "src/core/cpu.h"
#include "src/core/membw.h"
#include "src/core/quant.h"
#include "src/core/tensor.h"
#include "src/core/threadpool.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_s(clockid_t c)
{
    struct timespec ts;
    clock_gettime(c, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

struct job {
    const struct omni_quant_ops *op;
    const uint8_t *w;
    size_t w_row;
    int64_t n_in, n_out;
    const uint8_t *xq;
    float *y;
    int pf, hint;
    const float *prep; /* vec_dot_prep's activation data, or NULL: vec_dot */
};

static void run_job(void *arg, int ith, int nth)
{
    const struct job *j = arg;
    const int64_t r0 = j->n_out * ith / nth, r1 = j->n_out * (ith + 1) / nth;
    if (j->prep) { /* matmul.c's one-row path: the kernel loops and prefetches */
        j->op->vec_dot_prep(j->n_in, j->w + (size_t)r0 * j->w_row, j->w_row, r1 - r0, j->xq, j->prep, j->y + r0);
        return;
    }
    for (int64_t r = r0; r < r1; r++) {
        const uint8_t *wr = j->w + (size_t)r * j->w_row;
        if (j->pf && r + j->pf < r1) {
            const uint8_t *next = wr + j->pf * j->w_row;
            /* the hint must be a constant */
            for (size_t o = 0; o < j->w_row; o += 64)
                switch (j->hint) {
                case 0: __builtin_prefetch(next + o, 0, 0); break;
                case 1: __builtin_prefetch(next + o, 0, 1); break;
                case 2: __builtin_prefetch(next + o, 0, 2); break;
                default: __builtin_prefetch(next + o, 0, 3); break;
                }
        }
        j->y[r] = j->op->vec_dot(j->n_in, wr, j->xq);
    }
}

static void empty(void *arg, int ith, int nth)
{
    (void)arg;
    (void)ith;
    (void)nth;
}

int main(int argc, char **argv)
{
    const char *tname = "q8_0";
    int64_t n_in = 896, n_out = 151936;
    int n_thr = 1, reps = 5, copies = 0, pf = -1, hint = 3, plain = 0, probe = 0;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "-t"))
            tname = argv[i + 1];
        else if (!strcmp(argv[i], "-s"))
            sscanf(argv[i + 1], "%ldx%ld", &n_in, &n_out);
        else if (!strcmp(argv[i], "-n"))
            n_thr = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "-r"))
            reps = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "-c")) /* 1: W stays in cache (compute only) */
            copies = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "-p")) /* rows ahead the dot path prefetches; 0: none */
            pf = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "-h"))
            hint = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "-x"))
            plain = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "-B"))
            probe = atoi(argv[i + 1]);
    }
    int type = -1;
    for (int t = 0; t < GGML_TYPE_COUNT; t++)
        if (ggml_type_name(t) && !strcmp(ggml_type_name(t), tname))
            type = t;
    const struct omni_quant_ops *op = type >= 0 ? omni_quant_ops(type) : NULL;
    if (!op) {
        fprintf(stderr, "bench_decode: no kernels for '%s'\n", tname);
        return 1;
    }
    /* enough copies of W that a pass streams >= 512 MB from memory */
    const size_t w_row = ggml_row_size(type, n_in), w_bytes = w_row * (size_t)n_out;
    if (copies <= 0)
        copies = (int)((512u << 20) / w_bytes + 1);
    const int passes = copies == 1 ? 50 : 1;
    uint8_t *w = malloc(w_bytes * copies);
    float *x = malloc(sizeof(float) * n_in), *y = malloc(sizeof(float) * n_out);
    uint8_t *xq = malloc(ggml_row_size(op->dot_type ? op->dot_type : 0, n_in) + n_in * 4);
    if (!w || !x || !y || !xq)
        return 1;
    uint64_t s = 1;
    /* valid scales: requantize every row of the first copy from floats; the
     * others are its bytes again (they only need other addresses) */
    float *row = malloc(sizeof(float) * n_in);
    for (int64_t r = 0; r < n_out; r++) {
        for (int64_t k = 0; k < n_in; k++) {
            s = s * 6364136223846793005ULL + 1442695040888963407ULL;
            row[k] = (float)((int64_t)(s >> 40) - (1 << 23)) / (1 << 23);
        }
        if (quantize_row(type, row, w + (size_t)r * w_row, n_in) != 0)
            return 1;
    }
    for (int c = 1; c < copies; c++)
        memcpy(w + (size_t)c * w_bytes, w, w_bytes);
    for (int64_t k = 0; k < n_in; k++)
        x[k] = row[k];
    if (op->from_float)
        op->from_float(x, xq, n_in);
    else
        memcpy(xq, x, sizeof(float) * n_in);
    float *prep = NULL;
    if (op->vec_dot_prep && !plain) {
        prep = malloc(sizeof(float) * OMNI_ACT_PREP_FLOATS(n_in));
        if (!prep)
            return 1;
        op->act_prep(xq, prep, n_in);
    }
    if (pf < 0) { /* matmul.c's dot_rows */
        const size_t fit = 8192 / w_row;
        pf = op->vec_dot_streams && op->vec_dot_streams == op->vec_dot ? 0 : fit < 1 ? 1 : fit < 4 ? (int)fit : 4;
    }
    struct tpool *tp = tpool_new(n_thr, NULL, 0);
    const size_t probe_bytes = (size_t)1 << 30;
    void *probe_buf = probe ? omni_membw_alloc(probe_bytes) : NULL;
    if (probe && !probe_buf)
        return 1;
    double best = 1e9, cpu = 1e9;
    for (int rep = 0; rep < reps; rep++) {
        const double t0 = now_s(CLOCK_MONOTONIC), c0 = now_s(CLOCK_THREAD_CPUTIME_ID);
        for (int c = 0; c < copies * passes; c++) {
            struct job j = { op, w + (size_t)(c % copies) * w_bytes, w_row, n_in, n_out, xq, y, pf, hint, prep };
            tpool_run(tp, run_job, &j);
        }
        const double t = now_s(CLOCK_MONOTONIC) - t0, ct = now_s(CLOCK_THREAD_CPUTIME_ID) - c0;
        best = t < best ? t : best;
        cpu = ct < cpu ? ct : cpu;
        if (probe) {
            const double k = (double)w_bytes * copies * passes / t / 1e9;
            double m[OMNI_MEMBW_MODES];
            for (int md = 0; md < OMNI_MEMBW_MODES; md++)
                m[md] = omni_membw_pass(tp, probe_buf, probe_bytes, md) / 1e9;
            printf("{\"rep\":%d,\"type\":\"%s\",\"kernel_gb_s\":%.2f", rep, tname, k);
            for (int md = 0; md < OMNI_MEMBW_MODES; md++)
                printf(",\"%s_gb_s\":%.2f", omni_membw_mode_name(md), m[md]);
            for (int md = 0; md < OMNI_MEMBW_MODES; md++)
                printf(",\"kernel_over_%s\":%.3f", omni_membw_mode_name(md), m[md] > 0 ? k / m[md] : 0);
            printf("}\n");
        }
    }
    omni_membw_free(probe_buf);
    uint64_t sum = 0; /* FNV-1a of the last copy's output bits */
    for (int64_t r = 0; r < n_out * 4; r++)
        sum = (sum ^ ((const uint8_t *)y)[r]) * 1099511628211ULL;
    const double gb = (double)w_bytes * copies * passes / 1e9;
    printf("{\"type\":\"%s\",\"level\":\"%s\",\"shape\":\"%ldx%ld\",\"threads\":%d,\"copies\":%d,"
           "\"prefetch_rows\":%d,\"hint\":%d,\"prep\":%d,\"gb_s\":%.2f,\"gb_s_cpu\":%.2f,\"checksum\":\"%016llx\"}\n",
           tname, omni_cpu_level_name(omni_cpu_level()), n_in, n_out, n_thr, copies, pf, hint, prep != NULL, gb / best,
           gb / cpu, (unsigned long long)sum);
    /* the cost of one empty parallel region */
    const int n_regions = 20000;
    double t0 = now_s(CLOCK_MONOTONIC);
    for (int i = 0; i < n_regions; i++)
        tpool_run(tp, empty, NULL);
    printf("{\"threads\":%d,\"empty_region_us\":%.3f}\n", n_thr,
           (now_s(CLOCK_MONOTONIC) - t0) / n_regions * 1e6);
    tpool_free(tp);
    free(w);
    free(x);
    free(y);
    free(xq);
    free(row);
    free(prep);
    return 0;
}
