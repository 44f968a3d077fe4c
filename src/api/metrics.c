/* metrics.c - Prometheus text exposition for the server. Counters are kept
 * per (route, method, status) in a small table; routes are the router's
 * static labels, so the label set stays bounded however clients spell paths. */
#include "src/api/metrics.h"

#include "src/engine/engine.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vision/vision.h"
#include "audio/whisper_batch.h"

#define METRICS_MAX_SERIES 256

static const double metrics_latency_buckets[] = { 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1,
                                                  2.5, 5, 10, 30, 60, 120 };
static const double metrics_itl_buckets[] = { 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
                                              0.25, 0.5, 1, 2.5 };
#define METRICS_MAX_BUCKETS 16

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
    uint64_t prompt_tokens, completion_tokens;        /* {lock} */
    bool has_vision;                                  /* {lock} serve --mmproj */
    struct vision_cache_stats vision;                 /* {lock} last metrics_vision */
    bool has_stt;                                     /* {lock} serve --stt-model */
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
    int nl = (int)(sizeof metrics_latency_buckets / sizeof metrics_latency_buckets[0]);
    metrics_hist_init(&m->duration, metrics_latency_buckets, nl);
    metrics_hist_init(&m->ttft, metrics_latency_buckets, nl);
    metrics_hist_init(&m->itl, metrics_itl_buckets,
                      (int)(sizeof metrics_itl_buckets / sizeof metrics_itl_buckets[0]));
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

static void metrics_render_hist(struct metrics_buf *b, const char *name, const char *help,
                                const struct metrics_hist *h)
{
    metrics_printf(b, "# HELP %s %s\n# TYPE %s histogram\n", name, help, name);
    uint64_t cum = 0;
    for (int i = 0; i < h->n_bounds; i++) {
        cum += h->counts[i];
        metrics_printf(b, "%s_bucket{le=\"%g\"} %llu\n", name, h->bounds[i],
                       (unsigned long long)cum);
    }
    metrics_printf(b, "%s_bucket{le=\"+Inf\"} %llu\n%s_sum %.6f\n%s_count %llu\n", name,
                   (unsigned long long)h->count, name, h->sum, name,
                   (unsigned long long)h->count);
}

static void metrics_gauge(struct metrics_buf *b, const char *name, const char *type,
                          const char *help, double v)
{
    metrics_printf(b, "# HELP %s %s\n# TYPE %s %s\n%s %.17g\n", name, help, name, type, name, v);
}

char *metrics_render(struct metrics *m, const struct engine_stats *es, const char *version,
                     size_t *len)
{
    struct metrics_buf b = { malloc(8192), 0, 8192, 0 };
    if (!b.p)
        return NULL;
    pthread_mutex_lock(&m->lock);
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
    pthread_mutex_unlock(&m->lock);
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
    }
    if (b.failed) {
        free(b.p);
        return NULL;
    }
    if (len)
        *len = b.len;
    return b.p;
}
