/* metrics.c - Prometheus text exposition for the server. Counters are kept
 * per (route, method, status) in a small table; routes are the router's
 * static labels, so the label set stays bounded however clients spell paths. */
#include "src/api/metrics.h"

#include "src/core/gpu_info.h"
#include "src/engine/engine.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vision/vision.h"
#include "audio/whisper_batch.h"
#include "src/core/compute.h"

#define METRICS_MAX_SERIES 256

static const double metrics_latency_buckets[] = { 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1,
                                                  2.5, 5, 10, 30, 60, 120 };
static const double metrics_itl_buckets[] = { 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
                                              0.25, 0.5, 1, 2.5 };
/* vllm:time_to_first_token_seconds keeps vLLM's own buckets (vllm/v1/metrics/
 * loggers.py), so dashboards and routers built for vLLM read it unchanged. */
static const double metrics_vllm_ttft_buckets[] = { 0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08,
                                                    0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10,
                                                    20, 40, 80, 160, 640, 2560 };
#define METRICS_MAX_BUCKETS 24
#define METRICS_N(a) ((int)(sizeof a / sizeof a[0]))

struct metrics_hist {
    const double *bounds;
    int n_bounds;
    uint64_t counts[METRICS_MAX_BUCKETS];   /* per bucket, not cumulative */
    uint64_t count;
    double sum;
};

struct metrics_series {
    const char *route, *method;
    int status;
    uint64_t count;
};

struct metrics {
    pthread_mutex_t lock;
    struct metrics_series series[METRICS_MAX_SERIES]; /* {lock} */
    int n_series;                                     /* {lock} */
    struct metrics_hist duration, ttft, itl;          /* {lock} */
    struct metrics_hist vllm_ttft;                    /* {lock} same data as ttft */
    uint64_t prompt_tokens, completion_tokens;        /* {lock} */
    bool has_vision;                                  /* {lock} serve --mmproj */
    struct vision_cache_stats vision;                 /* {lock} last metrics_vision */
    bool has_stt;                                     /* {lock} serve --stt-model */
    int gpu;                                          /* {lock} metrics_gpu's device, -1 none */
    struct whisper_batcher_stats stt;                 /* {lock} last metrics_stt */
};

static void metrics_hist_init(struct metrics_hist *h, const double *b, int n)
{
    memset(h, 0, sizeof *h);
    h->bounds = b;
    h->n_bounds = n;
}

struct metrics *metrics_new(void)
{
    struct metrics *m = calloc(1, sizeof *m);
    if (!m)
        return NULL;
    pthread_mutex_init(&m->lock, NULL);
    m->gpu = -1;
    int nl = METRICS_N(metrics_latency_buckets);
    metrics_hist_init(&m->duration, metrics_latency_buckets, nl);
    metrics_hist_init(&m->ttft, metrics_latency_buckets, nl);
    metrics_hist_init(&m->itl, metrics_itl_buckets, METRICS_N(metrics_itl_buckets));
    metrics_hist_init(&m->vllm_ttft, metrics_vllm_ttft_buckets,
                      METRICS_N(metrics_vllm_ttft_buckets));
    return m;
}

void metrics_free(struct metrics *m)
{
    if (!m)
        return;
    pthread_mutex_destroy(&m->lock);
    free(m);
}

static void metrics_observe(struct metrics_hist *h, double v)
{
    int i = 0;
    while (i < h->n_bounds && v > h->bounds[i])
        i++;
    h->counts[i]++;   /* i == n_bounds: the +Inf bucket */
    h->count++;
    h->sum += v;
}

void metrics_http(struct metrics *m, const char *route, const char *method, int status,
                  double seconds)
{
    pthread_mutex_lock(&m->lock);
    struct metrics_series *s = NULL;
    for (int i = 0; i < m->n_series && !s; i++)
        if (m->series[i].route == route && m->series[i].method == method &&
            m->series[i].status == status)
            s = &m->series[i];
    if (!s && m->n_series < METRICS_MAX_SERIES) {
        s = &m->series[m->n_series++];
        *s = (struct metrics_series){ route, method, status, 0 };
    }
    if (s)
        s->count++;
    metrics_observe(&m->duration, seconds);
    pthread_mutex_unlock(&m->lock);
}

void metrics_ttft(struct metrics *m, double seconds)
{
    pthread_mutex_lock(&m->lock);
    metrics_observe(&m->ttft, seconds);
    metrics_observe(&m->vllm_ttft, seconds);
    pthread_mutex_unlock(&m->lock);
}

void metrics_itl(struct metrics *m, double seconds)
{
    pthread_mutex_lock(&m->lock);
    metrics_observe(&m->itl, seconds);
    pthread_mutex_unlock(&m->lock);
}

void metrics_vision(struct metrics *m, const struct vision_cache_stats *s)
{
    pthread_mutex_lock(&m->lock);
    m->has_vision = true;
    m->vision = *s;
    pthread_mutex_unlock(&m->lock);
}

void metrics_gpu(struct metrics *m, int device)
{
    pthread_mutex_lock(&m->lock);
    m->gpu = device;
    pthread_mutex_unlock(&m->lock);
}

void metrics_stt(struct metrics *m, const struct whisper_batcher_stats *s)
{
    pthread_mutex_lock(&m->lock);
    m->has_stt = true;
    m->stt = *s;
    pthread_mutex_unlock(&m->lock);
}

void metrics_tokens(struct metrics *m, long prompt_tokens, long completion_tokens)
{
    pthread_mutex_lock(&m->lock);
    m->prompt_tokens += (uint64_t)(prompt_tokens > 0 ? prompt_tokens : 0);
    m->completion_tokens += (uint64_t)(completion_tokens > 0 ? completion_tokens : 0);
    pthread_mutex_unlock(&m->lock);
}

struct metrics_buf {
    char *p;
    size_t len, cap;
    int failed;
};

static void metrics_printf(struct metrics_buf *b, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void metrics_printf(struct metrics_buf *b, const char *fmt, ...)
{
    if (b->failed)
        return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(b->p + b->len, b->cap - b->len, fmt, ap);
        va_end(ap);
        if (n < 0) {
            b->failed = 1;
            return;
        }
        if ((size_t)n < b->cap - b->len) {
            b->len += (size_t)n;
            return;
        }
        size_t cap = b->cap * 2 + (size_t)n;
        char *np = realloc(b->p, cap);
        if (!np) {
            b->failed = 1;
            return;
        }
        b->p = np;
        b->cap = cap;
    }
}

/* labels: "" or `k="v",` pairs each ending in a comma (they precede le). */
static void metrics_render_hist_labels(struct metrics_buf *b, const char *name, const char *help,
                                       const char *labels, const struct metrics_hist *h)
{
    metrics_printf(b, "# HELP %s %s\n# TYPE %s histogram\n", name, help, name);
    uint64_t cum = 0;
    for (int i = 0; i < h->n_bounds; i++) {
        cum += h->counts[i];
        metrics_printf(b, "%s_bucket{%sle=\"%g\"} %llu\n", name, labels, h->bounds[i],
                       (unsigned long long)cum);
    }
    /* the label set of _sum and _count: labels without the trailing comma */
    size_t ll = strlen(labels);
    int n = ll > 0 ? (int)ll - 1 : 0;
    metrics_printf(b, "%s_bucket{%sle=\"+Inf\"} %llu\n", name, labels,
                   (unsigned long long)h->count);
    metrics_printf(b, "%s_sum%s%.*s%s %.6f\n%s_count%s%.*s%s %llu\n", name, n ? "{" : "", n,
                   labels, n ? "}" : "", h->sum, name, n ? "{" : "", n, labels, n ? "}" : "",
                   (unsigned long long)h->count);
}

static void metrics_render_hist(struct metrics_buf *b, const char *name, const char *help,
                                const struct metrics_hist *h)
{
    metrics_render_hist_labels(b, name, help, "", h);
}

static void metrics_gauge(struct metrics_buf *b, const char *name, const char *type,
                          const char *help, double v)
{
    metrics_printf(b, "# HELP %s %s\n# TYPE %s %s\n%s %.17g\n", name, help, name, type, name, v);
}

/* A sample with one label set (labels: `k="v",...`, no trailing comma). */
static void metrics_labeled(struct metrics_buf *b, const char *name, const char *type,
                            const char *help, const char *labels, double v)
{
    metrics_printf(b, "# HELP %s %s\n# TYPE %s %s\n%s{%s} %.17g\n", name, help, name, type, name,
                   labels, v);
}

/* A label value as the exposition format wants it: backslash, quote and
 * newline escaped; cut to fit cap. */
static void metrics_label_escape(const char *v, char *out, size_t cap)
{
    size_t n = 0;
    for (; *v && n + 3 < cap; v++) {
        if (*v == '\\' || *v == '"' || *v == '\n') {
            out[n++] = '\\';
            out[n++] = *v == '\n' ? 'n' : *v;
        } else {
            out[n++] = *v;
        }
    }
    out[n] = 0;
}

/* The names and types vLLM exports (vllm/v1/metrics/loggers.py), which
 * inference routers scrape: the Gateway API Inference Extension's endpoint
 * picker reads vllm:num_requests_waiting, vllm:num_requests_running and
 * vllm:kv_cache_usage_perc by default. Labelled with the served model like
 * vLLM's (model_name). Running and waiting count engine sequences and
 * queued requests; KV usage is blocks held by sequences over the pool
 * (prefix-cache blocks that are free count as free, as in vLLM). */
static void metrics_render_vllm(struct metrics_buf *b, const struct engine_stats *es,
                                const char *labels)
{
    double kv = es->kv_blocks_total > 0 ? (double)es->kv_blocks_used / es->kv_blocks_total : 0;
    metrics_labeled(b, "vllm:num_requests_running", "gauge",
                    "Number of requests in model execution batches.", labels, es->running);
    metrics_labeled(b, "vllm:num_requests_waiting", "gauge",
                    "Number of requests waiting to be processed.", labels, es->waiting);
    metrics_labeled(b, "vllm:num_requests_swapped", "gauge",
                    "Number of requests swapped to CPU (always 0: preempted sequences are "
                    "recomputed).", labels, 0);
    metrics_labeled(b, "vllm:kv_cache_usage_perc", "gauge",
                    "KV-cache usage. 1 means 100 percent usage.", labels, kv);
    metrics_labeled(b, "vllm:gpu_cache_usage_perc", "gauge",
                    "KV-cache usage. 1 means 100 percent usage. DEPRECATED: Use "
                    "vllm:kv_cache_usage_perc instead.", labels, kv);
    metrics_labeled(b, "vllm:prompt_tokens_total", "counter",
                    "Number of prefill tokens processed.", labels, (double)es->prompt_tokens);
    metrics_labeled(b, "vllm:generation_tokens_total", "counter",
                    "Number of generation tokens processed.", labels,
                    (double)es->generated_tokens);
    metrics_labeled(b, "vllm:num_preemptions_total", "counter",
                    "Cumulative number of preemption from the engine.", labels,
                    (double)es->preemptions);
}

/* The process's compute budget (serve makes one; compute.h), per workload:
 * threads held and acquires queued now, and in all since the start. */
static void metrics_render_compute(struct metrics_buf *b)
{
    struct compute_stats cs;
    compute_stats(compute_default(), &cs);
    if (!cs.n_threads)
        return;
    /* clients of one name (two pools of one workload) add up */
    struct compute_client_stats w[COMPUTE_MAX_CLIENTS];
    int n = 0;
    for (int i = 0; i < cs.n_clients; i++) {
        const struct compute_client_stats *c = &cs.client[i];
        int k = 0;
        while (k < n && strcmp(w[k].name, c->name))
            k++;
        if (k == n) {
            w[n++] = *c;
            continue;
        }
        w[k].busy += c->busy;
        w[k].waiting += c->waiting;
        w[k].acquires += c->acquires;
        w[k].urgent_acquires += c->urgent_acquires;
        w[k].wait_s += c->wait_s;
        w[k].busy_s += c->busy_s;
    }
    metrics_gauge(b, "omniserve_compute_threads", "gauge",
                  "Compute threads of the budget the workloads share (--threads).", cs.n_threads);
    metrics_gauge(b, "omniserve_compute_busy_threads_max", "gauge",
                  "Most compute threads the workloads held at once (never above the budget).",
                  cs.max_busy);
    static const struct {
        const char *name, *type, *help;
    } fam[] = {
        { "omniserve_compute_busy_threads", "gauge", "Compute threads a workload holds now." },
        { "omniserve_compute_queue_depth", "gauge", "Units of work of a workload waiting for compute threads." },
        { "omniserve_compute_acquires_total", "counter", "Units of work (engine steps, speech passes, image encodes, sentences) that got compute threads." },
        { "omniserve_compute_urgent_acquires_total", "counter", "Of those, latency-critical ones served before batch work." },
        { "omniserve_compute_wait_seconds_total", "counter", "Time units of work waited for compute threads." },
        { "omniserve_compute_busy_thread_seconds_total", "counter", "Compute thread-seconds a workload held." },
    };
    for (int f = 0; f < METRICS_N(fam); f++) {
        metrics_printf(b, "# HELP %s %s\n# TYPE %s %s\n", fam[f].name, fam[f].help, fam[f].name,
                       fam[f].type);
        for (int k = 0; k < n; k++) {
            const double v[] = { w[k].busy, w[k].waiting, (double)w[k].acquires,
                                 (double)w[k].urgent_acquires, w[k].wait_s, w[k].busy_s };
            char name[2 * COMPUTE_NAME_MAX];
            metrics_label_escape(w[k].name, name, sizeof name);
            metrics_printf(b, "%s{workload=\"%s\"} %.17g\n", fam[f].name, name, v[f]);
        }
    }
}

char *metrics_render(struct metrics *m, const struct engine_stats *es, const char *version,
                     const char *model_name, size_t *len)
{
    struct metrics_buf b = { malloc(16384), 0, 16384, 0 };
    if (!b.p)
        return NULL;
    char name[256], labels[300];
    metrics_label_escape(model_name ? model_name : "", name, sizeof name);
    snprintf(labels, sizeof labels, "model_name=\"%s\"", name);
    struct metrics_hist vllm_ttft;
    pthread_mutex_lock(&m->lock);
    vllm_ttft = m->vllm_ttft;
    metrics_printf(&b, "# HELP omniserve_build_info Build information.\n"
                       "# TYPE omniserve_build_info gauge\n"
                       "omniserve_build_info{version=\"%s\"} 1\n", version ? version : "");
    metrics_printf(&b, "# HELP omniserve_http_requests_total HTTP requests by route, method and status.\n"
                       "# TYPE omniserve_http_requests_total counter\n");
    for (int i = 0; i < m->n_series; i++)
        metrics_printf(&b, "omniserve_http_requests_total{route=\"%s\",method=\"%s\",status=\"%d\"} %llu\n",
                       m->series[i].route, m->series[i].method, m->series[i].status,
                       (unsigned long long)m->series[i].count);
    metrics_render_hist(&b, "omniserve_http_request_duration_seconds",
                        "Time from request headers to the last response byte.", &m->duration);
    metrics_render_hist(&b, "omniserve_time_to_first_token_seconds",
                        "Time from submission to the first generated token.", &m->ttft);
    metrics_render_hist(&b, "omniserve_inter_token_latency_seconds",
                        "Time between consecutive generated tokens of one sequence.", &m->itl);
    metrics_gauge(&b, "omniserve_prompt_tokens_total", "counter",
                  "Prompt tokens of finished requests.", (double)m->prompt_tokens);
    metrics_gauge(&b, "omniserve_generation_tokens_total", "counter",
                  "Generated tokens of finished requests.", (double)m->completion_tokens);
    if (m->has_stt) {
        const struct whisper_batcher_stats *t = &m->stt;
        metrics_gauge(&b, "omniserve_stt_encoder_passes_total", "counter",
                      "Whisper encoder passes (each runs the windows of every waiting request).",
                      (double)t->enc_passes);
        metrics_gauge(&b, "omniserve_stt_encoder_windows_total", "counter",
                      "30 s windows the Whisper encoder ran.", (double)t->enc_windows);
        metrics_gauge(&b, "omniserve_stt_decoder_passes_total", "counter",
                      "Whisper decoder passes (each runs the steps of every waiting request).",
                      (double)t->dec_passes);
        metrics_gauge(&b, "omniserve_stt_decoder_requests_total", "counter",
                      "Decoder steps of transcriptions merged into those passes.", (double)t->dec_requests);
        metrics_gauge(&b, "omniserve_stt_decoder_rows_total", "counter",
                      "Token rows the Whisper decoder ran.", (double)t->dec_rows);
        metrics_gauge(&b, "omniserve_stt_decoder_batch_max", "gauge",
                      "Most transcriptions any one decoder pass held.", t->max_dec_requests);
        metrics_gauge(&b, "omniserve_stt_busy", "gauge", "Transcriptions being decoded now.", t->busy);
    }
    if (m->has_vision) {
        const struct vision_cache_stats *v = &m->vision;
        metrics_gauge(&b, "omniserve_vision_cache_hits_total", "counter",
                      "Images and frames whose embeddings came from the vision cache.", (double)v->hits);
        metrics_gauge(&b, "omniserve_vision_cache_misses_total", "counter",
                      "Images and frames the vision encoder ran on.", (double)v->misses);
        metrics_gauge(&b, "omniserve_vision_cache_evictions_total", "counter",
                      "Vision cache entries evicted to make room.", (double)v->evictions);
        metrics_gauge(&b, "omniserve_vision_cache_bytes", "gauge",
                      "Bytes of embeddings held by the vision cache.", (double)v->bytes);
        metrics_gauge(&b, "omniserve_vision_encoder_seconds_total", "counter",
                      "Vision encoder time spent on cache misses.", v->encode_ms_total / 1e3);
    }
    const int gpu = m->gpu;
    pthread_mutex_unlock(&m->lock);
    metrics_render_compute(&b);
    struct gpu_info gi;
    if (gpu >= 0 && gpu_info_read(gpu, &gi) == 0) {
        metrics_gauge(&b, "omniserve_gpu_memory_used_bytes", "gauge",
                      "Memory in use on the GPU (all processes).", (double)gi.mem_used);
        metrics_gauge(&b, "omniserve_gpu_memory_total_bytes", "gauge",
                      "Memory of the GPU.", (double)gi.mem_total);
        metrics_gauge(&b, "omniserve_gpu_utilization_ratio", "gauge",
                      "Fraction of the last sample period in which a kernel ran on the GPU (NVML).",
                      gi.util_pct / 100.0);
    }
    if (es) {
        metrics_gauge(&b, "omniserve_requests_running", "gauge", "Sequences being generated.", es->running);
        metrics_gauge(&b, "omniserve_requests_waiting", "gauge", "Requests waiting in the queue.", es->waiting);
        metrics_gauge(&b, "omniserve_kv_blocks_total", "gauge", "KV cache blocks in the pool.", es->kv_blocks_total);
        metrics_gauge(&b, "omniserve_kv_blocks_used", "gauge", "KV cache blocks held by sequences.", es->kv_blocks_used);
        metrics_gauge(&b, "omniserve_kv_blocks_cached", "gauge", "Free KV blocks kept for the prefix cache.", es->kv_blocks_cached);
        metrics_gauge(&b, "omniserve_kv_usage_ratio", "gauge", "Fraction of KV blocks in use.",
                      es->kv_blocks_total > 0 ? (double)es->kv_blocks_used / es->kv_blocks_total : 0);
        metrics_gauge(&b, "omniserve_prefix_cache_hits_total", "counter", "Prefix cache block hits.", (double)es->prefix_hits);
        metrics_gauge(&b, "omniserve_prefix_cache_misses_total", "counter", "Prefix cache block misses.", (double)es->prefix_misses);
        metrics_gauge(&b, "omniserve_prefix_cache_hit_tokens_total", "counter", "Prompt tokens served from the prefix cache.", (double)es->prefix_hit_tokens);
        metrics_gauge(&b, "omniserve_engine_prompt_tokens_total", "counter", "Prompt tokens the engine processed.", (double)es->prompt_tokens);
        metrics_gauge(&b, "omniserve_engine_generated_tokens_total", "counter", "Tokens the engine generated.", (double)es->generated_tokens);
        metrics_gauge(&b, "omniserve_preemptions_total", "counter", "Sequences preempted for lack of KV blocks.", (double)es->preemptions);
        metrics_gauge(&b, "omniserve_engine_steps_total", "counter", "Engine steps run.", (double)es->steps);
        metrics_gauge(&b, "omniserve_engine_kernel_switches_total", "counter", "Sequence steps batched across a matmul kernel switch point (results may differ from a solo run).", (double)es->kernel_switches);
        metrics_render_vllm(&b, es, labels);
        char hl[310];
        snprintf(hl, sizeof hl, "%s,", labels);
        metrics_render_hist_labels(&b, "vllm:time_to_first_token_seconds",
                                   "Histogram of time to first token in seconds.", hl, &vllm_ttft);
    }
    if (b.failed) {
        free(b.p);
        return NULL;
    }
    if (len)
        *len = b.len;
    return b.p;
}
