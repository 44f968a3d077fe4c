/* optimer.cu - GPU time of each op of the "cuda" backend (OMNI_CUDA_TIMERS=1,
 * for measuring: docs/gpu.md "Per-op GPU times"). The backend's ops table is
 * wrapped: every op is bracketed by two CUDA events on the backend's stream
 * and the elapsed times are summed per op and shape (e.g. "matmul q4_K
 * 2048x8192 n1") when a download or sync has waited for them. Graphs are
 * refused while timing (events cannot be timed inside a replay), so steps
 * run op by op.
 *
 * An event pair around a kernel measures the kernel only if the GPU has the
 * kernel queued when it reaches the first event; were the GPU idle, the
 * pair would time the host's launch too. So the first op after a wait
 * queues a sleeping kernel (OMNI_CUDA_TIMERS_SPIN_US, default 4000 us)
 * before its events, during which the host queues the rest of the step.
 * The sums are then device times without launch gaps or programmatic-launch
 * overlap; a step's "gap" (first event to last, less the ops) says how much
 * of the step the timing itself cost or the host failed to queue in time.
 * Each step also times an empty pair, "(empty event pair)": what a pair
 * adds to every op's time (small ops are mostly that).
 *
 * At the backend's destruction every key is printed to stderr as one JSON
 * line ({"bench":"optime",...}: calls, total and mean microseconds, bytes of
 * weights and their GB/s for products), then a "optime_step" line. One
 * backend is timed per process (the first made with the variable set). */
#include <cuda_runtime.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern "C" {
#include "src/core/backend.h"
#include "src/core/omni.h"
#include "src/core/tensor.h"

cudaStream_t omni_cuda_stream_raw(struct omni_backend *be);
void omni_cuda_optimer_install(struct omni_backend *be);
}

#define OPT_KEYS 512

struct opt_pair {
    int key;
    cudaEvent_t a, b;
};

static struct {
    struct omni_backend *be;  /* the timed backend */
    struct omni_backend orig; /* its ops before wrapping */
    cudaStream_t stream;
    long long spin_ns;
    struct { char name[112]; double ms; long calls; double bytes; } keys[OPT_KEYS];
    int n_keys;
    struct opt_pair *pend;    /* pairs queued since the last wait */
    int n_pend, cap_pend;
    cudaEvent_t *pool;        /* events to reuse */
    int n_pool, cap_pool;
    double step_ms, ops_ms;   /* over the steps: first event to last, sum of ops */
    long steps;
    bool failed;
} T;

__global__ void k_opt_spin(long long ns)
{
    unsigned long long t0, t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    do {
        __nanosleep(1000);
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    } while ((long long)(t - t0) < ns);
}

static cudaEvent_t ev_get(void)
{
    if (T.n_pool)
        return T.pool[--T.n_pool];
    cudaEvent_t e = NULL;
    if (cudaEventCreate(&e) != cudaSuccess) {
        cudaGetLastError();
        T.failed = true;
        return NULL;
    }
    return e;
}

static void ev_put(cudaEvent_t e)
{
    if (!e)
        return;
    if (T.n_pool == T.cap_pool) {
        int cap = T.cap_pool ? 2 * T.cap_pool : 256;
        cudaEvent_t *p = (cudaEvent_t *)realloc(T.pool, (size_t)cap * sizeof *p);
        if (!p) {
            cudaEventDestroy(e);
            return;
        }
        T.pool = p;
        T.cap_pool = cap;
    }
    T.pool[T.n_pool++] = e;
}

static int key_of(const char *name)
{
    for (int i = 0; i < T.n_keys; i++)
        if (!strcmp(T.keys[i].name, name))
            return i;
    if (T.n_keys == OPT_KEYS)
        return OPT_KEYS - 1; /* the last key takes the overflow */
    snprintf(T.keys[T.n_keys].name, sizeof T.keys[0].name, "%s", name);
    return T.n_keys++;
}

/* Before an op of be: the spin at a step's start, the first event. -1: not timed. */
static int opt_begin(struct omni_backend *be, const char *name, double bytes)
{
    if (be != T.be || T.failed)
        return -1;
    if (T.n_pend == T.cap_pend) {
        int cap = T.cap_pend ? 2 * T.cap_pend : 1024;
        struct opt_pair *p = (struct opt_pair *)realloc(T.pend, (size_t)cap * sizeof *p);
        if (!p)
            return -1;
        T.pend = p;
        T.cap_pend = cap;
    }
    if (!T.n_pend && T.spin_ns > 0) {
        k_opt_spin<<<1, 1, 0, T.stream>>>(T.spin_ns);
        /* an event pair around nothing: what a pair adds to each op's time */
        struct opt_pair *e = &T.pend[T.n_pend];
        e->key = key_of("(empty event pair)");
        e->a = ev_get();
        e->b = ev_get();
        if (e->a && e->b) {
            cudaEventRecord(e->a, T.stream);
            cudaEventRecord(e->b, T.stream);
            T.n_pend++;
        } else {
            ev_put(e->a);
            ev_put(e->b);
        }
        if (T.n_pend == T.cap_pend)
            return -1;
    }
    struct opt_pair *q = &T.pend[T.n_pend];
    q->key = key_of(name);
    T.keys[q->key].bytes += bytes;
    q->a = ev_get();
    q->b = ev_get();
    if (!q->a || !q->b) {
        ev_put(q->a);
        ev_put(q->b);
        return -1;
    }
    cudaEventRecord(q->a, T.stream);
    return T.n_pend++;
}

static void opt_end(int i)
{
    if (i >= 0)
        cudaEventRecord(T.pend[i].b, T.stream);
}

/* After a wait on the stream: the pairs' times into their keys. */
static void opt_harvest(void)
{
    if (!T.n_pend)
        return;
    double ops = 0;
    for (int i = 0; i < T.n_pend; i++) {
        float ms = 0;
        if (cudaEventElapsedTime(&ms, T.pend[i].a, T.pend[i].b) == cudaSuccess) {
            T.keys[T.pend[i].key].ms += ms;
            T.keys[T.pend[i].key].calls++;
            ops += ms;
        } else {
            cudaGetLastError();
        }
    }
    float step = 0;
    if (cudaEventElapsedTime(&step, T.pend[0].a, T.pend[T.n_pend - 1].b) == cudaSuccess) {
        T.step_ms += step;
        T.ops_ms += ops;
        T.steps++;
    } else {
        cudaGetLastError();
    }
    for (int i = 0; i < T.n_pend; i++) {
        ev_put(T.pend[i].a);
        ev_put(T.pend[i].b);
    }
    T.n_pend = 0;
}

static double wbytes(const struct omni_btensor *w)
{
    return (double)ggml_row_size(w->type, w->cols) * (double)w->rows;
}

#define TIMED(nm, bytes, call)                     \
    do {                                           \
        int i_ = opt_begin(be, nm, bytes);         \
        int rc_ = call;                            \
        opt_end(i_);                               \
        return rc_;                                \
    } while (0)

static int t_matmul(struct omni_backend *be, const struct omni_btensor *w, const float *x, int n,
                    float *y)
{
    char k[112];
    snprintf(k, sizeof k, "matmul %s %lldx%lld n%d", ggml_type_name(w->type), (long long)w->rows,
             (long long)w->cols, n);
    TIMED(k, wbytes(w), T.orig.matmul(be, w, x, n, y));
}

static int t_matmul_multi(struct omni_backend *be, int nw, const struct omni_btensor *const *w,
                          const float *x, int n, float *const *y)
{
    char k[112];
    int o = snprintf(k, sizeof k, "matmul_multi");
    double b = 0;
    for (int i = 0; i < nw && o < (int)sizeof k; i++) {
        o += snprintf(k + o, sizeof k - o, " %s %lld", ggml_type_name(w[i]->type),
                      (long long)w[i]->rows);
        b += wbytes(w[i]);
    }
    if (o < (int)sizeof k)
        snprintf(k + o, sizeof k - o, " x%lld n%d", nw ? (long long)w[0]->cols : 0LL, n);
    TIMED(k, b, T.orig.matmul_multi(be, nw, w, x, n, y));
}

static int t_matmul_glu(struct omni_backend *be, const struct omni_btensor *wg,
                        const struct omni_btensor *wu, const float *x, int n, float *y)
{
    char k[112];
    snprintf(k, sizeof k, "matmul_glu %s/%s %lldx%lld n%d", ggml_type_name(wg->type),
             ggml_type_name(wu->type), (long long)wg->rows, (long long)wg->cols, n);
    TIMED(k, wbytes(wg) + wbytes(wu), T.orig.matmul_glu(be, wg, wu, x, n, y));
}

static int t_get_rows(struct omni_backend *be, const struct omni_btensor *w, const int32_t *ids,
                      int n, float *out)
{
    char k[112];
    snprintf(k, sizeof k, "get_rows %s n%d", ggml_type_name(w->type), n);
    TIMED(k, 0, T.orig.get_rows(be, w, ids, n, out));
}

static int t_rmsnorm(struct omni_backend *be, float *y, const float *x, const float *w, int rows,
                     int dim, float eps)
{
    char k[112];
    snprintf(k, sizeof k, "rmsnorm %dx%d", rows, dim);
    TIMED(k, 0, T.orig.rmsnorm(be, y, x, w, rows, dim, eps));
}

static int t_add_rmsnorm(struct omni_backend *be, float *x, const float *dx, float *y,
                         const float *w, int rows, int dim, float eps)
{
    char k[112];
    snprintf(k, sizeof k, "add_rmsnorm %dx%d", rows, dim);
    TIMED(k, 0, T.orig.add_rmsnorm(be, x, dx, y, w, rows, dim, eps));
}

static int t_add(struct omni_backend *be, float *y, const float *x, const float *b, int rows,
                 int dim)
{
    char k[112];
    snprintf(k, sizeof k, "add %dx%d", rows, dim);
    TIMED(k, 0, T.orig.add(be, y, x, b, rows, dim));
}

static int t_rope(struct omni_backend *be, float *x, const int32_t *pos, int n_tok, int n_head,
                  int head_dim, int n_rot, const float *inv_freq, float attn_factor, bool neox)
{
    char k[112];
    snprintf(k, sizeof k, "rope %dx%d", n_tok, n_head);
    TIMED(k, 0, T.orig.rope(be, x, pos, n_tok, n_head, head_dim, n_rot, inv_freq, attn_factor, neox));
}

static int t_swiglu(struct omni_backend *be, const float *g, float *u, int64_t n)
{
    char k[112];
    snprintf(k, sizeof k, "swiglu %lld", (long long)n);
    TIMED(k, 0, T.orig.swiglu(be, g, u, n));
}

static int t_kv_store(struct omni_backend *be, const float *kk, const float *v, void *kc, void *vc,
                      int kv_type, const int64_t *slot, int n, int kv_dim)
{
    char k[112];
    snprintf(k, sizeof k, "kv_store n%d", n);
    TIMED(k, 0, T.orig.kv_store(be, kk, v, kc, vc, kv_type, slot, n, kv_dim));
}

static int t_rope_kv(struct omni_backend *be, const struct omni_brope_kv *r)
{
    char k[112];
    snprintf(k, sizeof k, "rope_kv n%d", r->n_tok);
    TIMED(k, 0, T.orig.rope_kv(be, r));
}

static int t_attention(struct omni_backend *be, const struct omni_battn *a)
{
    char k[112];
    snprintf(k, sizeof k, "attention n%d heads %d/%d hd%d", a->n_tok, a->n_head, a->n_head_kv,
             a->head_dim);
    TIMED(k, 0, T.orig.attention(be, a));
}

static int t_argmax(struct omni_backend *be, const float *x, int rows, int n, int32_t *out)
{
    char k[112];
    snprintf(k, sizeof k, "argmax %dx%d", rows, n);
    TIMED(k, 0, T.orig.argmax(be, x, rows, n, out));
}

static int t_download(struct omni_backend *be, void *dst, const void *src, size_t bytes)
{
    int rc = T.orig.download(be, dst, src, bytes);
    if (be == T.be)
        opt_harvest();
    return rc;
}

static int t_sync(struct omni_backend *be)
{
    int rc = T.orig.sync(be);
    if (be == T.be)
        opt_harvest();
    return rc;
}

static int t_graph_begin(struct omni_backend *be)
{
    (void)be;
    return OMNI_ERR_UNSUPPORTED; /* no graphs while timing */
}

static void t_destroy(struct omni_backend *be)
{
    if (be == T.be) {
        cudaStreamSynchronize(T.stream);
        opt_harvest();
        for (int i = 0; i < T.n_keys; i++) {
            const double us = 1e3 * T.keys[i].ms, calls = (double)T.keys[i].calls;
            fprintf(stderr,
                    "{\"bench\":\"optime\",\"op\":\"%s\",\"calls\":%ld,\"us_total\":%.1f,"
                    "\"us_avg\":%.3f,\"us_per_step\":%.3f,\"bytes_avg\":%.0f,\"gb_s\":%.1f}\n",
                    T.keys[i].name, T.keys[i].calls, us, calls ? us / calls : 0.0,
                    T.steps ? us / T.steps : 0.0, calls ? T.keys[i].bytes / calls : 0.0,
                    T.keys[i].ms > 0 ? T.keys[i].bytes / (T.keys[i].ms * 1e6) : 0.0);
        }
        fprintf(stderr,
                "{\"bench\":\"optime_step\",\"steps\":%ld,\"step_us\":%.1f,\"ops_us\":%.1f,"
                "\"gap_us\":%.1f,\"spin_us\":%lld}\n",
                T.steps, T.steps ? 1e3 * T.step_ms / T.steps : 0.0,
                T.steps ? 1e3 * T.ops_ms / T.steps : 0.0,
                T.steps ? 1e3 * (T.step_ms - T.ops_ms) / T.steps : 0.0, T.spin_ns / 1000);
        for (int i = 0; i < T.n_pool; i++)
            cudaEventDestroy(T.pool[i]);
        free(T.pool);
        free(T.pend);
        void (*destroy)(struct omni_backend *) = T.orig.destroy;
        memset(&T, 0, sizeof T);
        destroy(be);
        return;
    }
    T.orig.destroy(be);
}

/* Wraps be's ops when OMNI_CUDA_TIMERS=1 and no other backend is timed. */
extern "C" void omni_cuda_optimer_install(struct omni_backend *be)
{
    const char *on = getenv("OMNI_CUDA_TIMERS");
    if (!on || strcmp(on, "1") || T.be)
        return;
    const char *sp = getenv("OMNI_CUDA_TIMERS_SPIN_US");
    T.spin_ns = 1000LL * (sp ? atoll(sp) : 4000);
    T.be = be;
    T.orig = *be;
    T.stream = omni_cuda_stream_raw(be);
    fprintf(stderr, "backend: cuda: per-op GPU timers on (graphs off, %lld us spin a step)\n",
            T.spin_ns / 1000);
#define WRAP(op) if (be->op) be->op = t_##op
    WRAP(matmul);
    WRAP(matmul_multi);
    WRAP(matmul_glu);
    WRAP(get_rows);
    WRAP(rmsnorm);
    WRAP(add_rmsnorm);
    WRAP(add);
    WRAP(rope);
    WRAP(swiglu);
    WRAP(kv_store);
    WRAP(rope_kv);
    WRAP(attention);
    WRAP(argmax);
    WRAP(download);
    WRAP(sync);
    WRAP(graph_begin);
    WRAP(destroy);
#undef WRAP
}
