/* bench_mv.c - bandwidth of the backend's one-row products (decode at
 * batch 1), one weight matrix at a time: the shapes of Llama-3.2-1B and
 * Qwen2.5-7B (q, k, o, gate, down, output) in their Q4_K_M / Q8_0 types.
 * Each matrix gets random quant bytes (timing only: the values do not
 * matter), is uploaded and prepared as llm_dev_new does, in as many copies
 * as make 256 MiB (an H100 keeps 50 MB in L2: a matrix read again right
 * after would come from there), then the copies are multiplied in turn,
 * --iters products back to back by one activation row (quantized once: the
 * backend reuses it) with a single sync at the end. One JSON line a matrix:
 * microseconds a product and GB/s of weights read. Small matrices measure
 * the launch rate more than the kernel.
 *   bench_mv [--backend cuda] [--iters 200] [--only 1b|7b] [--matrix ffn_gate] */
#include "src/core/backend.h"
#include "src/core/tensor.h"

#include <stdint.h>
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

struct shape {
    const char *model, *name;
    int type;
    int64_t rows, cols;
};

static const struct shape shapes[] = {
    { "1b", "attn_q", GGML_TYPE_Q4_K, 2048, 2048 },
    { "1b", "attn_k", GGML_TYPE_Q4_K, 512, 2048 },
    { "1b", "ffn_gate", GGML_TYPE_Q4_K, 8192, 2048 },
    { "1b", "ffn_down", GGML_TYPE_Q6_K, 2048, 8192 },
    { "1b", "ffn_down", GGML_TYPE_Q4_K, 2048, 8192 },
    { "1b", "output", GGML_TYPE_Q6_K, 128256, 2048 },
    { "1b", "attn_q", GGML_TYPE_Q8_0, 2048, 2048 },
    { "1b", "ffn_gate", GGML_TYPE_Q8_0, 8192, 2048 },
    { "1b", "ffn_down", GGML_TYPE_Q8_0, 2048, 8192 },
    { "1b", "output", GGML_TYPE_Q8_0, 128256, 2048 },
    { "7b", "attn_q", GGML_TYPE_Q4_K, 3584, 3584 },
    { "7b", "attn_k", GGML_TYPE_Q4_K, 512, 3584 },
    { "7b", "ffn_gate", GGML_TYPE_Q4_K, 18944, 3584 },
    { "7b", "ffn_down", GGML_TYPE_Q4_K, 3584, 18944 },
    { "7b", "ffn_down", GGML_TYPE_Q6_K, 3584, 18944 },
    { "7b", "output", GGML_TYPE_Q6_K, 152064, 3584 },
};

int main(int argc, char **argv)
{
    const char *backend = "cuda", *only = NULL, *matrix = NULL;
    int iters = 200;
    for (int i = 1; i < argc; i++) {
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(argv[i], "--backend") && v) backend = v, i++;
        else if (!strcmp(argv[i], "--iters") && v) iters = atoi(v), i++;
        else if (!strcmp(argv[i], "--only") && v) only = v, i++;
        else if (!strcmp(argv[i], "--matrix") && v) matrix = v, i++;
        else {
            fprintf(stderr, "usage: bench_mv [--backend cuda] [--iters N] [--only 1b|7b] [--matrix NAME]\n");
            return 2;
        }
    }
    if (iters < 1)
        iters = 1;
    char err[256];
    struct omni_backend *be = omni_backend_new(backend, 0, err, sizeof err);
    if (!be) {
        fprintf(stderr, "bench_mv: %s\n", err);
        return 1;
    }
    uint64_t rng = 0x9e3779b97f4a7c15ull;
    int rc = 0;
    for (size_t si = 0; si < sizeof shapes / sizeof *shapes && rc == 0; si++) {
        const struct shape *sh = &shapes[si];
        if ((only && strcmp(only, sh->model)) || (matrix && strcmp(matrix, sh->name)))
            continue;
        const size_t rb = ggml_row_size(sh->type, sh->cols), bytes = rb * (size_t)sh->rows;
        enum { MAXC = 512 };
        const int nc = (int)((256u << 20) / bytes) + 1 > MAXC ? MAXC : (int)((256u << 20) / bytes) + 1;
        uint8_t *h = malloc(bytes);
        float *x = malloc((size_t)sh->cols * sizeof(float));
        void *dw[MAXC] = { 0 };
        bool ok = true;
        for (int c = 0; c < nc; c++)
            ok = ok && (dw[c] = be->alloc(be, bytes)) != NULL;
        float *dx = be->alloc(be, (size_t)sh->cols * sizeof(float));
        float *dy = be->alloc(be, (size_t)sh->rows * sizeof(float));
        if (!h || !x || !ok || !dx || !dy) {
            fprintf(stderr, "bench_mv: out of memory at %s %s\n", sh->model, sh->name);
            rc = 1;
        } else {
            for (size_t i = 0; i < bytes; i += 8) {
                rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
                memcpy(h + i, &rng, bytes - i < 8 ? bytes - i : 8);
            }
            for (int64_t i = 0; i < sh->cols; i++)
                x[i] = (float)((i * 7919) % 2001 - 1000) * 1e-3f;
            struct omni_btensor t[MAXC];
            rc = be->upload(be, dx, x, (size_t)sh->cols * sizeof(float));
            for (int c = 0; c < nc && rc == 0; c++) {
                t[c] = (struct omni_btensor){ sh->type, sh->cols, sh->rows, dw[c] };
                rc = be->upload(be, dw[c], h, bytes);
                if (rc == 0 && be->prepare)
                    rc = be->prepare(be, &t[c]);
            }
            for (int i = 0; rc == 0 && i < nc + 2; i++)
                rc = be->matmul(be, &t[i % nc], dx, 1, dy);
            if (rc == 0)
                rc = be->sync(be);
            const double t0 = now_s();
            for (int i = 0; rc == 0 && i < iters; i++)
                rc = be->matmul(be, &t[i % nc], dx, 1, dy);
            if (rc == 0)
                rc = be->sync(be);
            const double us = (now_s() - t0) / iters * 1e6;
            if (rc == 0)
                printf("{\"bench\":\"mv\",\"model\":\"%s\",\"matrix\":\"%s\",\"type\":\"%s\","
                       "\"rows\":%lld,\"cols\":%lld,\"mib\":%.2f,\"copies\":%d,\"us\":%.2f,\"gb_s\":%.1f}\n",
                       sh->model, sh->name, ggml_type_name(sh->type), (long long)sh->rows,
                       (long long)sh->cols, bytes / 1048576.0, nc, us, bytes / us * 1e-3);
            else
                fprintf(stderr, "bench_mv: %s %s: error %d\n", sh->model, sh->name, rc);
            fflush(stdout);
        }
        for (int c = 0; c < nc; c++)
            if (dw[c])
                be->free(be, dw[c]);
        if (dx)
            be->free(be, dx);
        if (dy)
            be->free(be, dy);
        free(h);
        free(x);
    }
    be->destroy(be);
    return rc != 0;
}
