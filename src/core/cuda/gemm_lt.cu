/* gemm_lt.cu - the batched steps' F16 GEMMs through cuBLASLt, the algorithm
 * timed per shape (gemm_lt.h).
 *
 * Why: a decode step of 33-64 sequences multiplies every weight matrix by
 * a few dozen activation columns. cublasGemmEx runs the heuristic's first
 * pick, and on an H100 that pick reads the F16 copies far below bandwidth
 * (docs/gpu.md: the 2048 x 2048 o product at 64 columns in 17 us, 8 MB,
 * about 0.5 TB/s): its tiles cover too few SMs. cuBLASLt offers several
 * candidates per shape (other tile sizes, split-K inside the kernel with
 * the workspace), and which is fastest depends on the card and the shape.
 * So at load (prepare) each F16 copy's shape is timed at the widths 16, 32,
 * 48 and 64 with every candidate, from memory (the L2 flushed between
 * runs), and the fastest serves that shape's products of up to that many
 * rows from then on, graph captures included. A model has few distinct
 * shapes (q/k/v, o, gate/up, down, output), each timed once. */
#include "src/core/cuda/gemm_lt.h"

#include <cublasLt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern "C" {
#include "src/core/omni.h"
}

#define LT_SHAPES 256   /* shapes kept; beyond that a shape runs untimed */
#define LT_CANDIDATES 16 /* algorithms the heuristic is asked for */
#define LT_REPS 3       /* timed runs of each candidate (the median counts) */
#define LT_BUCKET 16    /* widths timed: 16, 32, 48, 64 (gemm_lt_tune) */
#define LT_FLUSH_MIB 96 /* written between timed runs: more than any L2 (H100: 50 MiB) */

/* The three layouts of a shape (column-major as cuBLAS sees our row-major
 * arrays: A is cols x rows, x cols x n, y rows x n). */
struct lt_layouts {
    cublasLtMatrixLayout_t a, b, c;
};

struct lt_shape {
    int rows, n, cols;
    struct lt_layouts l;
    bool ok;                   /* false: no candidate ran, not taken */
    cublasLtMatmulAlgo_t algo; /* the fastest */
};

struct gemm_lt {
    cublasLtHandle_t h;
    cublasLtMatmulDesc_t desc; /* F32 compute and scale, A transposed */
    cublasLtMatmulPreference_t pref;
    void *ws;
    size_t ws_bytes;
    cudaEvent_t ev[2];
    struct lt_shape shapes[LT_SHAPES];
    int n_shapes, n_changed;
};

static void layouts_free(struct lt_layouts *l);

struct gemm_lt *gemm_lt_new(size_t workspace_bytes)
{
    struct gemm_lt *g = (struct gemm_lt *)calloc(1, sizeof *g);
    if (!g)
        return NULL;
    const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
    const uint64_t wsb = workspace_bytes;
    if (cublasLtCreate(&g->h) != CUBLAS_STATUS_SUCCESS) {
        free(g);
        return NULL;
    }
    if (cublasLtMatmulDescCreate(&g->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F) != CUBLAS_STATUS_SUCCESS ||
        cublasLtMatmulDescSetAttribute(g->desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta) !=
            CUBLAS_STATUS_SUCCESS ||
        cublasLtMatmulDescSetAttribute(g->desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb) !=
            CUBLAS_STATUS_SUCCESS ||
        cublasLtMatmulPreferenceCreate(&g->pref) != CUBLAS_STATUS_SUCCESS ||
        cublasLtMatmulPreferenceSetAttribute(g->pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &wsb,
                                             sizeof wsb) != CUBLAS_STATUS_SUCCESS ||
        (wsb && cudaMalloc(&g->ws, wsb) != cudaSuccess) ||
        cudaEventCreate(&g->ev[0]) != cudaSuccess || cudaEventCreate(&g->ev[1]) != cudaSuccess) {
        cudaGetLastError();
        gemm_lt_free(g);
        return NULL;
    }
    g->ws_bytes = wsb;
    return g;
}

void gemm_lt_free(struct gemm_lt *g)
{
    if (!g)
        return;
    for (int i = 0; i < g->n_shapes; i++)
        layouts_free(&g->shapes[i].l);
    if (g->ev[0])
        cudaEventDestroy(g->ev[0]);
    if (g->ev[1])
        cudaEventDestroy(g->ev[1]);
    cudaFree(g->ws);
    if (g->pref)
        cublasLtMatmulPreferenceDestroy(g->pref);
    if (g->desc)
        cublasLtMatmulDescDestroy(g->desc);
    cublasLtDestroy(g->h);
    free(g);
}

void gemm_lt_stats(const struct gemm_lt *g, int *shapes, int *changed)
{
    *shapes = g ? g->n_shapes : 0;
    *changed = g ? g->n_changed : 0;
}

static bool layouts_make(struct lt_layouts *l, int rows, int n, int cols)
{
    memset(l, 0, sizeof *l);
    if (cublasLtMatrixLayoutCreate(&l->a, CUDA_R_16F, cols, rows, cols) == CUBLAS_STATUS_SUCCESS &&
        cublasLtMatrixLayoutCreate(&l->b, CUDA_R_16F, cols, n, cols) == CUBLAS_STATUS_SUCCESS &&
        cublasLtMatrixLayoutCreate(&l->c, CUDA_R_32F, rows, n, rows) == CUBLAS_STATUS_SUCCESS)
        return true;
    return false;
}

static void layouts_free(struct lt_layouts *l)
{
    if (l->a)
        cublasLtMatrixLayoutDestroy(l->a);
    if (l->b)
        cublasLtMatrixLayoutDestroy(l->b);
    if (l->c)
        cublasLtMatrixLayoutDestroy(l->c);
}

static cublasStatus_t lt_matmul(struct gemm_lt *g, const struct lt_layouts *l,
                                const cublasLtMatmulAlgo_t *algo, cudaStream_t st,
                                const __half *A, const __half *x, float *y)
{
    const float one = 1.0f, zero = 0.0f;
    return cublasLtMatmul(g->h, g->desc, &one, A, l->a, x, l->b, &zero, y, l->c, y, l->c, algo,
                          g->ws, g->ws_bytes, st);
}

/* Median time (ms) of LT_REPS runs of one candidate after a warm-up run,
 * each after a write over flush; a negative value when it does not run. */
static float time_candidate(struct gemm_lt *g, const struct lt_layouts *l,
                            const cublasLtMatmulAlgo_t *algo, cudaStream_t st, const __half *A,
                            const __half *x, float *y, void *flush, size_t flush_bytes)
{
    float t[LT_REPS];
    if (lt_matmul(g, l, algo, st, A, x, y) != CUBLAS_STATUS_SUCCESS)
        return -1.0f;
    for (int r = 0; r < LT_REPS; r++) {
        if (cudaMemsetAsync(flush, r, flush_bytes, st) != cudaSuccess ||
            cudaEventRecord(g->ev[0], st) != cudaSuccess ||
            lt_matmul(g, l, algo, st, A, x, y) != CUBLAS_STATUS_SUCCESS ||
            cudaEventRecord(g->ev[1], st) != cudaSuccess ||
            cudaEventSynchronize(g->ev[1]) != cudaSuccess ||
            cudaEventElapsedTime(&t[r], g->ev[0], g->ev[1]) != cudaSuccess) {
            cudaGetLastError();
            return -1.0f;
        }
    }
    for (int i = 1; i < LT_REPS; i++) /* sort the few times */
        for (int j = i; j > 0 && t[j] < t[j - 1]; j--) {
            const float v = t[j];
            t[j] = t[j - 1];
            t[j - 1] = v;
        }
    return t[LT_REPS / 2];
}

/* Time the heuristic's candidates for a new shape; s->ok when one ran.
 * Each timed run follows a write over flush (flush_bytes: more than the
 * L2), so that the weights come from memory as in a decode step, where the
 * other layers' weights have evicted them: timed back to back, a matrix
 * that fits the L2 favours algorithms that re-read it. */
static void tune(struct gemm_lt *g, struct lt_shape *s, cudaStream_t st, const __half *A,
                 const __half *x, float *y, void *flush, size_t flush_bytes)
{
    const struct lt_layouts *l = &s->l;
    cublasLtMatmulHeuristicResult_t res[LT_CANDIDATES];
    int got = 0;
    if (cublasLtMatmulAlgoGetHeuristic(g->h, g->desc, l->a, l->b, l->c, l->c, g->pref,
                                       LT_CANDIDATES, res, &got) != CUBLAS_STATUS_SUCCESS)
        got = 0;
    float best = -1.0f;
    int best_i = -1;
    for (int i = 0; i < got; i++) {
        if (res[i].state != CUBLAS_STATUS_SUCCESS)
            continue;
        const float t = time_candidate(g, l, &res[i].algo, st, A, x, y, flush, flush_bytes);
        if (t >= 0.0f && (best_i < 0 || t < best)) {
            best = t;
            best_i = i;
        }
    }
    if (best_i < 0)
        return;
    s->algo = res[best_i].algo;
    s->ok = true;
    g->n_changed += best_i != 0;
    if (getenv("OMNI_CUDA_LT_LOG"))
        fprintf(stderr, "gemm_lt: %d x %d x %d: %d candidates, #%d fastest (%.1f us)\n", s->rows,
                s->n, s->cols, got, best_i, 1000.0f * best);
}

static struct lt_shape *find_shape(struct gemm_lt *g, int rows, int n, int cols)
{
    for (int i = 0; i < g->n_shapes; i++)
        if (g->shapes[i].rows == rows && g->shapes[i].n == n && g->shapes[i].cols == cols)
            return &g->shapes[i];
    return NULL;
}

/* The widths a shape is timed at: n rounds up to a multiple of LT_BUCKET,
 * and the algorithm timed there serves every n of its bucket. */
static int bucket(int n) { return (n + LT_BUCKET - 1) / LT_BUCKET * LT_BUCKET; }

int gemm_lt_tune(struct gemm_lt *g, cudaStream_t st, const __half *A, int rows, int cols,
                 int n_max)
{
    n_max = bucket(n_max);
    bool todo = false;
    for (int b = LT_BUCKET; b <= n_max; b += LT_BUCKET)
        todo |= !find_shape(g, rows, b, cols);
    if (!todo)
        return 0;
    const size_t flush_bytes = (size_t)LT_FLUSH_MIB << 20;
    __half *x = NULL;
    float *y = NULL;
    void *flush = NULL;
    if (cudaMalloc((void **)&x, (size_t)n_max * cols * sizeof(__half)) != cudaSuccess ||
        cudaMalloc((void **)&y, (size_t)n_max * rows * sizeof(float)) != cudaSuccess ||
        cudaMalloc(&flush, flush_bytes) != cudaSuccess ||
        cudaMemsetAsync(x, 0, (size_t)n_max * cols * sizeof(__half), st) != cudaSuccess) {
        cudaGetLastError(); /* no room: these shapes keep cublasGemmEx */
        cudaFree(x);
        cudaFree(y);
        cudaFree(flush);
        return 0;
    }
    for (int b = LT_BUCKET; b <= n_max && g->n_shapes < LT_SHAPES; b += LT_BUCKET) {
        if (find_shape(g, rows, b, cols))
            continue;
        struct lt_shape *s = &g->shapes[g->n_shapes];
        memset(s, 0, sizeof *s);
        s->rows = rows;
        s->n = b;
        s->cols = cols;
        if (!layouts_make(&s->l, rows, b, cols)) {
            layouts_free(&s->l);
            continue;
        }
        g->n_shapes++;
        tune(g, s, st, A, x, y, flush, flush_bytes);
    }
    const cudaError_t e = cudaStreamSynchronize(st);
    cudaFree(x);
    cudaFree(y);
    cudaFree(flush);
    if (e != cudaSuccess) {
        fprintf(stderr, "backend: cuda: gemm_lt: timing %d x %d: %s\n", rows, cols,
                cudaGetErrorString(e));
        return OMNI_ERR_IO;
    }
    return 0;
}

int gemm_lt_run(struct gemm_lt *g, cudaStream_t st, const __half *A, int rows, int n, int cols,
                const __half *x, float *y)
{
    if (n < 1)
        return 0;
    const struct lt_shape *s = find_shape(g, rows, bucket(n), cols);
    if (!s || !s->ok)
        return 0;
    struct lt_layouts l;
    if (!layouts_make(&l, rows, n, cols)) {
        layouts_free(&l);
        return 0;
    }
    /* an algorithm timed at the bucket's width that does not take this n
     * is not an error: cublasGemmEx runs it */
    const cublasStatus_t e = lt_matmul(g, &l, &s->algo, st, A, x, y);
    layouts_free(&l);
    return e == CUBLAS_STATUS_SUCCESS ? 1 : 0;
}
