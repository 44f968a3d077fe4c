/* metrics.h - Prometheus counters and histograms for the server: HTTP
 * requests by route, method and status, request duration, time to first
 * token, inter-token latency, tokens in and out; rendered as the Prometheus
 * text format (version 0.0.4) together with the engine's gauges, also under
 * vLLM's metric names for inference routers.
 *
 *   struct metrics *m = metrics_new();
 *   metrics_http(m, "/v1/chat/completions", "POST", 200, 0.42);
 *   metrics_ttft(m, 0.05); metrics_itl(m, 0.01); metrics_tokens(m, 12, 30);
 *   char *text = metrics_render(m, &engine_stats_or_NULL, "0.1.0", "qwen2.5", &len); // caller frees
 *   metrics_free(m);
 *
 * Thread safety: every function may be called from any thread (one mutex);
 * route and method must be static strings. */
#ifndef OMNI_API_METRICS_H
#define OMNI_API_METRICS_H

#include <stddef.h>

struct metrics;
struct engine_stats;

struct metrics *metrics_new(void);
void metrics_free(struct metrics *m);

void metrics_http(struct metrics *m, const char *route, const char *method, int status,
                  double seconds);
void metrics_ttft(struct metrics *m, double seconds);
void metrics_itl(struct metrics *m, double seconds);
void metrics_tokens(struct metrics *m, long prompt_tokens, long completion_tokens);
/* The vision cache's counters (serve --mmproj) for the renders from now on. */
struct vision_cache_stats;
void metrics_vision(struct metrics *m, const struct vision_cache_stats *s);

/* The GPU the language model runs on (serve --device cuda[:N]): its memory
 * and utilisation in the renders from now on (src/core/gpu_info.h: NVML,
 * when the driver's library loads; nothing otherwise). */
void metrics_gpu(struct metrics *m, int device);

/* The speech model's batching counters (serve --stt-model) for the renders from now on. */
struct whisper_batcher_stats;
void metrics_stt(struct metrics *m, const struct whisper_batcher_stats *s);

/* The exposition text (malloc'd, NUL-terminated, *len without the NUL), or
 * NULL when out of memory. es may be NULL (no engine yet). With es, the
 * engine's numbers also appear under the names vLLM exports (vllm:*, with
 * model_name="<model_name>"), which inference routers and load balancers
 * scrape: vllm:num_requests_running, _waiting, _swapped (0),
 * vllm:kv_cache_usage_perc (0..1) and its older name gpu_cache_usage_perc,
 * vllm:prompt_tokens_total, vllm:generation_tokens_total,
 * vllm:num_preemptions_total, vllm:time_to_first_token_seconds. */
char *metrics_render(struct metrics *m, const struct engine_stats *es, const char *version,
                     const char *model_name, size_t *len);

#endif
