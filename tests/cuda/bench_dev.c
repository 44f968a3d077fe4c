/* bench_dev.c - speed of the device forward (llm/model_dev.c), llama-bench
 * style: pp<P> = one forward of P prompt tokens from an empty cache (only the
 * last token's argmax comes back), tg<N> = N single-token steps from an
 * empty cache (-d D: from position D, as llama-bench's depth; the K/V
 * before it are zeros), each returning its argmax. Median of --reps runs after one
 * warm-up; one JSON line per test on stdout.
 *   bench_dev -m M.gguf [-p 512] [-n 128] [-d 0] [-r 3] [--backend cuda] [--check N]
 * --check N first runs an N-token prompt and N greedy steps on the CPU
 * (llm_forward, 16 threads) and on the device side by side and prints the
 * largest top-5 log-prob difference and whether the greedy tokens agree:
 * the real-shape check of the quantized kernels (Q4_K, Q6_K, ...); then the
 * same against model_dev.c on the "cpu" backend (same steps, CPU kernels). */
#include "llm/model.h"
#include "llm/model_dev.h"
#include "src/core/threadpool.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static int argmax_row(const float *x, int n)
{
    int best = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[best])
            best = i;
    return best;
}

static void log_softmax(const float *x, int n, double *out)
{
    double mx = x[0], sum = 0;
    for (int i = 1; i < n; i++)
        mx = x[i] > mx ? x[i] : mx;
    for (int i = 0; i < n; i++)
        sum += exp(x[i] - mx);
    for (int i = 0; i < n; i++)
        out[i] = x[i] - mx - log(sum);
}

/* Largest |log p| difference over the CPU's top 5. */
static double top5_diff(const float *cpu, const float *dev, int n, double *a, double *b)
{
    log_softmax(cpu, n, a);
    log_softmax(dev, n, b);
    double worst = 0;
    int taken[5];
    for (int k = 0; k < 5; k++) {
        int best = -1;
        for (int i = 0; i < n; i++) {
            bool used = false;
            for (int u = 0; u < k; u++)
                used |= taken[u] == i;
            if (!used && (best < 0 || a[i] > a[best]))
                best = i;
        }
        taken[k] = best;
        worst = fmax(worst, fabs(a[best] - b[best]));
    }
    return worst;
}

/* ref_dev: the reference is the same forward on the "cpu" backend (the CPU
 * kernels under model_dev.c's steps) instead of llm_forward. */
static int check(const struct llm_model *m, struct llm_dev *d, const int32_t *table, int n_blocks,
                 int n, bool ref_dev)
{
    char err[256];
    const int V = llm_model_hparams(m)->n_vocab;
    struct tpool *tp = getenv("CHECK_THREADS") && atoi(getenv("CHECK_THREADS")) <= 1 ? NULL : tpool_new(getenv("CHECK_THREADS") ? atoi(getenv("CHECK_THREADS")) : 16, err, sizeof err);
    struct llm_ctx *ctx = llm_ctx_new(m, n, tp, err, sizeof err);
    struct llm_kv *kv = llm_kv_new(m, 1 /* F16 */, 16, n_blocks, err, sizeof err);
    struct llm_dev *ref = NULL;
    if (ref_dev) {
        struct llm_dev_params p = llm_dev_default_params();
        p.backend = "cpu";
        p.max_tokens = n;
        p.block_size = 16;
        p.n_blocks = n_blocks;
        if (!(ref = llm_dev_new(m, &p, err, sizeof err))) {
            fprintf(stderr, "check: %s\n", err);
            return 1;
        }
    }
    float *lc = malloc((size_t)V * sizeof(float)), *ld = malloc((size_t)V * sizeof(float));
    double *a = malloc((size_t)V * sizeof(double)), *b = malloc((size_t)V * sizeof(double));
    int32_t *tok = malloc((size_t)n * sizeof(int32_t)), *pos = malloc((size_t)n * sizeof(int32_t));
    int32_t *seq = calloc((size_t)n, sizeof(int32_t));
    if (!ctx || !kv || !lc || !ld || !a || !b || !tok || !pos || !seq) {
        fprintf(stderr, "check: %s\n", err);
        return 1;
    }
    for (int i = 0; i < n; i++)
        tok[i] = (int32_t)((i * 7919 + 13) % V), pos[i] = i;
    const struct llm_seq_view sv = { .block_table = table, .n_blocks = n_blocks };
    struct llm_batch bt = { .n_tokens = n, .token = tok, .pos = pos, .seq = seq };
    double worst = 0;
    int agree = 0, steps = 0;
    for (int step = 0; step <= n; step++) {
        int32_t am;
        const int rc_ref = ref ? llm_dev_forward(ref, &bt, &sv, lc, NULL)
                               : llm_forward(ctx, &bt, kv, &sv, lc);
        if (rc_ref != 1 || llm_dev_forward(d, &bt, &sv, ld, &am) != 1) {
            fprintf(stderr, "check: forward failed\n");
            return 1;
        }
        const double dstep = top5_diff(lc, ld, V, a, b);
        if (getenv("CHECK_VERBOSE"))
            fprintf(stderr, "check: step %d top-5 diff %.4g\n", step, dstep);
        worst = fmax(worst, dstep);
        const int next = argmax_row(lc, V);
        agree += am == next;
        steps++;
        tok[0] = next;
        pos[0] = n + step;
        bt.n_tokens = 1;
    }
    printf("{\"test\":\"check\",\"ref\":\"%s\",\"prompt\":%d,\"steps\":%d,\"greedy_agree\":%d,"
           "\"top5_logprob_max_diff\":%.4g}\n", ref ? "model_dev on cpu" : "llm_forward", n, steps,
           agree, worst);
    llm_dev_free(ref);
    llm_ctx_free(ctx);
    llm_kv_free(kv);
    tpool_free(tp);
    free(lc), free(ld), free(a), free(b), free(tok), free(pos), free(seq);
    return 0;
}

int main(int argc, char **argv)
{
    const char *path = NULL, *backend = "cuda";
    int P = 512, N = 128, reps = 3, check_n = 0, depth = 0;
    for (int i = 1; i < argc; i++) {
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(argv[i], "-m") && v) path = v, i++;
        else if (!strcmp(argv[i], "-p") && v) P = atoi(v), i++;
        else if (!strcmp(argv[i], "-n") && v) N = atoi(v), i++;
        else if (!strcmp(argv[i], "-r") && v) reps = atoi(v), i++;
        else if (!strcmp(argv[i], "-d") && v) depth = atoi(v), i++;
        else if (!strcmp(argv[i], "--backend") && v) backend = v, i++;
        else if (!strcmp(argv[i], "--check") && v) check_n = atoi(v), i++;
        else {
            fprintf(stderr, "usage: bench_dev -m M.gguf [-p 512] [-n 128] [-d 0] [-r 3] [--backend cuda] "
                            "[--check N]\n");
            return 2;
        }
    }
    if (!path || P < 1 || N < 1 || reps < 1 || reps > 100 || depth < 0 || depth > (1 << 20)) {
        fprintf(stderr, "bench_dev: need -m and positive -p/-n/-r\n");
        return 2;
    }
    char err[512];
    double t0 = now_s();
    struct llm_model *m = llm_model_load(path, NULL, err, sizeof err);
    if (!m) {
        fprintf(stderr, "bench_dev: %s\n", err);
        return 1;
    }
    const int bs = 16, n_blocks = (P + depth + N + 2 * check_n) / bs + 2;
    struct llm_dev_params p = llm_dev_default_params();
    p.backend = backend;
    p.max_tokens = P > check_n ? P : check_n;
    p.block_size = bs;
    p.n_blocks = n_blocks;
    struct llm_dev *d = llm_dev_new(m, &p, err, sizeof err);
    if (!d) {
        fprintf(stderr, "bench_dev: %s\n", err);
        return 1;
    }
    fprintf(stderr, "bench_dev: %s on %s: %.1f MiB weights, load %.2f s\n", path, llm_dev_device(d),
            llm_dev_weight_bytes(d) / 1048576.0, now_s() - t0);
    int32_t *table = malloc((size_t)n_blocks * sizeof(int32_t));
    int32_t *tok = malloc((size_t)P * sizeof(int32_t)), *pos = malloc((size_t)P * sizeof(int32_t));
    int32_t *seq = calloc((size_t)P, sizeof(int32_t));
    double *times = malloc((size_t)(reps + 1) * sizeof(double));
    if (!table || !tok || !pos || !seq || !times)
        return 1;
    for (int i = 0; i < n_blocks; i++)
        table[i] = n_blocks - 1 - i; /* scattered on purpose */
    if (check_n > 0 && (check(m, d, table, n_blocks, check_n, false) ||
                        check(m, d, table, n_blocks, check_n, true)))
        return 1;
    const struct llm_seq_view sv = { .block_table = table, .n_blocks = n_blocks };
    const int V = llm_model_hparams(m)->n_vocab;
    for (int i = 0; i < P; i++)
        tok[i] = (int32_t)((i * 7919 + 13) % V), pos[i] = i;

    /* pp: one P-token forward, last argmax back */
    for (int r = 0; r <= reps; r++) {
        struct llm_batch b = { .n_tokens = P, .token = tok, .pos = pos, .seq = seq };
        int32_t am;
        const double s = now_s();
        if (llm_dev_forward(d, &b, &sv, NULL, &am) != 1) {
            fprintf(stderr, "bench_dev: pp forward failed\n");
            return 1;
        }
        times[r] = now_s() - s;
    }
    qsort(times + 1, (size_t)reps, sizeof(double), cmp_double);
    const double pp = P / times[1 + reps / 2];
    printf("{\"model\":\"%s\",\"backend\":\"%s\",\"test\":\"pp%d\",\"tok_s\":%.1f,\"ms\":%.3f}\n",
           path, backend, P, pp, 1e3 * times[1 + reps / 2]);

    /* tg: N steps of one token each, argmax back each step */
    for (int r = 0; r <= reps; r++) {
        int32_t t = tok[0], am = 0;
        const double s = now_s();
        for (int i = 0; i < N; i++) {
            const int32_t ps = depth + i, sq = 0;
            struct llm_batch b = { .n_tokens = 1, .token = &t, .pos = &ps, .seq = &sq };
            if (llm_dev_forward(d, &b, &sv, NULL, &am) != 1) {
                fprintf(stderr, "bench_dev: tg forward failed\n");
                return 1;
            }
            t = am;
        }
        times[r] = now_s() - s;
    }
    qsort(times + 1, (size_t)reps, sizeof(double), cmp_double);
    const double tg = N / times[1 + reps / 2];
    const double gbs = tg * llm_dev_decode_bytes(d) / 1e9;
    printf("{\"model\":\"%s\",\"backend\":\"%s\",\"test\":\"tg%d\",\"depth\":%d,\"tok_s\":%.1f,"
           "\"ms_per_tok\":%.3f,\"decode_bytes\":%zu,\"weights_gb_s\":%.1f}\n",
           path, backend, N, depth, tg, 1e3 / tg, llm_dev_decode_bytes(d), gbs);
    llm_dev_free(d);
    llm_model_free(m);
    free(table), free(tok), free(pos), free(seq), free(times);
    return 0;
}
