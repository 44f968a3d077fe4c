/* test_api.c - the server's pure pieces: request parsing and validation
 * (fields named in errors, nesting limit, broken JSON), error bodies in both
 * protocols' shapes, the API-key and Content-Type checks, SSE framing and
 * the Prometheus text (ours and the vLLM names routers read). */
#include "test.h"

#include "src/api/apireq.h"
#include "src/api/errors.h"
#include "src/api/metrics.h"
#include "src/engine/engine.h"
#include "ws/ws_http.h"

#include <cjson/cJSON.h>
#include <stdlib.h>

static cJSON *parse(const char *s, struct api_error *e)
{
    return apireq_parse(s, strlen(s), e);
}

TEST(api_parse_rejects_broken_bodies)
{
    static const char *const bad[] = {
        "", "   ", "{", "{\"a\":}", "[1,2]", "\"str\"", "42", "{\"a\":1} trailing", "{'a':1}",
        "{\"a\":1,}", "nul",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        struct api_error e = { 0 };
        cJSON *j = parse(bad[i], &e);
        CHECK_MSG(!j, "accepted '%s'", bad[i]);
        CHECK_EQ(e.status, 400);
        CHECK(e.message[0]);
    }
    struct api_error e;
    cJSON *ok = parse(" {\"a\": [1, {\"b\": \"}]\"}]} \n", &e);
    CHECK(ok);
    cJSON_Delete(ok);
}

TEST(api_parse_limits_depth)
{
    char buf[400];
    int n = 0;
    for (int i = 0; i < 100; i++)
        buf[n++] = '[';
    for (int i = 0; i < 100; i++)
        buf[n++] = ']';
    buf[n] = 0;
    CHECK_EQ(apireq_json_depth(buf, (size_t)n, 1000), 100);
    CHECK_EQ(apireq_json_depth(buf, (size_t)n, 10), 11);
    struct api_error e;
    char obj[420];
    snprintf(obj, sizeof obj, "{\"x\":%s}", buf);
    CHECK(!parse(obj, &e));
    CHECK_STR_CONTAINS(e.message, "nested deeper");
    /* Brackets inside strings do not count. */
    CHECK_EQ(apireq_json_depth("{\"a\":\"[[[[\\\"[[\"}", 15, 64), 1);
}

TEST(api_getters_name_the_field)
{
    struct api_error e;
    cJSON *j = parse("{\"t\":\"hot\",\"n\":2.5,\"b\":1,\"s\":3,\"x\":null,\"big\":9}", &e);
    CHECK(j);
    double d = -1;
    long l = -1;
    bool b = false;
    const char *s = NULL;
    CHECK_EQ(apireq_number(j, "t", 0, 2, &d, &e), -1);
    CHECK_STR_EQ(e.param, "t");
    CHECK_STR_CONTAINS(e.message, "'t' must be a number, got a string");
    CHECK_EQ(apireq_int(j, "n", 0, 10, &l, &e), -1);
    CHECK_STR_CONTAINS(e.message, "integer");
    CHECK_EQ(apireq_bool(j, "b", &b, &e), -1);
    CHECK_EQ(apireq_string(j, "s", &s, &e), -1);
    CHECK_EQ(apireq_int(j, "big", 0, 5, &l, &e), -1);
    CHECK_STR_CONTAINS(e.message, "between 0 and 5");
    CHECK_EQ(apireq_number(j, "x", 0, 1, &d, &e), 0);      /* null = absent */
    CHECK_EQ(apireq_number(j, "missing", 0, 1, &d, &e), 0);
    CHECK_EQ(d, -1);
    CHECK_EQ(apireq_int(j, "big", 0, 10, &l, &e), 1);
    CHECK_EQ(l, 9);
    cJSON_Delete(j);
}

TEST(api_sampling_openai)
{
    struct api_error e;
    cJSON *j = parse("{\"temperature\":0.5,\"top_p\":0.9,\"top_k\":5,\"min_p\":0.1,\"seed\":42,"
                     "\"n\":2,\"max_tokens\":7,\"stop\":[\"a\",\"\",\"bc\"],\"logprobs\":true,"
                     "\"top_logprobs\":3,\"stream\":true,\"stream_options\":{\"include_usage\":true},"
                     "\"logit_bias\":{\"5\":-100,\"7\":2.5},\"presence_penalty\":1,"
                     "\"frequency_penalty\":-1,\"repetition_penalty\":1.1,\"timeout\":3}", &e);
    CHECK(j);
    struct apireq_gen g;
    apireq_gen_init(&g);
    CHECK_EQ(apireq_sampling(j, API_OPENAI, false, 100, &g, &e), 0);
    CHECK_NEAR(g.sp.temperature, 0.5, 1e-6);
    CHECK_NEAR(g.sp.top_p, 0.9, 1e-6);
    CHECK_EQ(g.sp.top_k, 5);
    CHECK_EQ(g.sp.seed, 42);
    CHECK_EQ(g.n, 2);
    CHECK_EQ(g.max_tokens, 7);
    CHECK(g.max_tokens_set);
    CHECK_EQ(g.n_stop, 2);                  /* the empty one is dropped */
    CHECK_STR_EQ(g.stop[1], "bc");
    CHECK(g.logprobs && g.top_logprobs == 3 && g.sp.n_logprobs == 3);
    CHECK(g.stream && g.include_usage);
    CHECK_EQ(g.sp.n_logit_bias, 2);
    CHECK(isinf(g.sp.logit_bias[0].bias) && g.sp.logit_bias[0].bias < 0);
    CHECK_NEAR(g.timeout_s, 3, 0);
    apireq_gen_free(&g);
    cJSON_Delete(j);
}

TEST(api_sampling_rejects_bad_values)
{
    static const struct { const char *body, *param; } bad[] = {
        { "{\"temperature\":3}", "temperature" },
        { "{\"top_p\":-0.1}", "top_p" },
        { "{\"n\":0}", "n" },
        { "{\"n\":1000}", "n" },
        { "{\"max_tokens\":-1}", "max_tokens" },
        { "{\"stop\":5}", "stop" },
        { "{\"stop\":[1]}", "stop" },
        { "{\"logit_bias\":{\"abc\":1}}", "logit_bias" },
        { "{\"logit_bias\":{\"100\":1}}", "logit_bias" },
        { "{\"logit_bias\":{\"1\":500}}", "logit_bias" },
        { "{\"stream_options\":{\"include_usage\":true}}", "stream_options" },
        { "{\"top_logprobs\":2}", "top_logprobs" },
        { "{\"seed\":1.5}", "seed" },
        { "{\"timeout\":-1}", "timeout" },
        { "{\"user\":5}", "user" },
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        struct api_error e = { 0 };
        cJSON *j = parse(bad[i].body, &e);
        CHECK(j);
        struct apireq_gen g;
        apireq_gen_init(&g);
        int rc = apireq_sampling(j, API_OPENAI, false, 100, &g, &e);
        apireq_gen_free(&g);
        cJSON_Delete(j);
        CHECK_MSG(rc < 0, "accepted %s", bad[i].body);
        CHECK_EQ(e.status, 400);
        CHECK_STR_EQ(e.param, bad[i].param);
    }
}

TEST(api_sampling_anthropic_and_legacy)
{
    struct api_error e;
    struct apireq_gen g;
    cJSON *j = parse("{\"temperature\":0.2}", &e);
    apireq_gen_init(&g);
    CHECK_EQ(apireq_sampling(j, API_ANTHROPIC, false, 0, &g, &e), -1);
    CHECK_STR_CONTAINS(e.message, "'max_tokens' is required");
    apireq_gen_free(&g);
    cJSON_Delete(j);

    j = parse("{\"max_tokens\":4,\"temperature\":1.5}", &e);
    apireq_gen_init(&g);
    CHECK_EQ(apireq_sampling(j, API_ANTHROPIC, false, 0, &g, &e), -1);  /* Anthropic: 0..1 */
    apireq_gen_free(&g);
    cJSON_Delete(j);

    j = parse("{\"max_tokens\":4,\"stop_sequences\":[\"x\"]}", &e);
    apireq_gen_init(&g);
    CHECK_EQ(apireq_sampling(j, API_ANTHROPIC, false, 0, &g, &e), 0);
    CHECK_EQ(g.n_stop, 1);
    CHECK_EQ(g.max_tokens, 4);
    apireq_gen_free(&g);
    cJSON_Delete(j);

    j = parse("{\"logprobs\":2,\"max_tokens\":3}", &e);   /* /v1/completions: a count */
    apireq_gen_init(&g);
    CHECK_EQ(apireq_sampling(j, API_OPENAI, true, 0, &g, &e), 0);
    CHECK(g.logprobs);
    CHECK_EQ(g.top_logprobs, 2);
    apireq_gen_free(&g);
    cJSON_Delete(j);
}

TEST(api_text_content)
{
    struct api_error e;
    cJSON *j = parse("{\"a\":\"hi\",\"b\":[{\"type\":\"text\",\"text\":\"x\"},{\"type\":\"text\",\"text\":\"y\"}],"
                     "\"c\":[{\"type\":\"image_url\"}],\"d\":5,\"e\":[{\"type\":\"text\"}]}", &e);
    char *s = NULL;
    CHECK_EQ(apireq_text_content(cJSON_GetObjectItem(j, "a"), "a", &s, &e), 0);
    CHECK_STR_EQ(s, "hi");
    free(s);
    CHECK_EQ(apireq_text_content(cJSON_GetObjectItem(j, "b"), "b", &s, &e), 0);
    CHECK_STR_EQ(s, "x\ny");
    free(s);
    CHECK_EQ(apireq_text_content(NULL, "n", &s, &e), 0);
    CHECK_STR_EQ(s, "");
    free(s);
    CHECK_EQ(apireq_text_content(cJSON_GetObjectItem(j, "c"), "c", &s, &e), -1);
    CHECK_STR_CONTAINS(e.message, "image_url");
    CHECK_EQ(apireq_text_content(cJSON_GetObjectItem(j, "d"), "d", &s, &e), -1);
    CHECK_EQ(apireq_text_content(cJSON_GetObjectItem(j, "e"), "e", &s, &e), -1);
    CHECK_STR_CONTAINS(e.message, "e[0].text");
    cJSON_Delete(j);
}

TEST(api_key_check)
{
    CHECK(apireq_key_ok("Bearer sekret", NULL, "sekret"));
    CHECK(apireq_key_ok("bearer  sekret", NULL, "sekret"));
    CHECK(apireq_key_ok(NULL, "sekret", "sekret"));
    CHECK(apireq_key_ok("Bearer wrong", "sekret", "sekret"));
    CHECK(!apireq_key_ok(NULL, NULL, "sekret"));
    CHECK(!apireq_key_ok("Bearer sekre", NULL, "sekret"));
    CHECK(!apireq_key_ok("Bearer sekrett", NULL, "sekret"));
    CHECK(!apireq_key_ok("sekret", NULL, "sekret"));
    CHECK(!apireq_key_ok("Bearer ", "", "sekret"));
}

TEST(api_content_type_check)
{
    const enum apireq_body J = APIREQ_BODY_JSON, M = APIREQ_BODY_MULTIPART;
    CHECK(apireq_content_type_ok("application/json", J));
    CHECK(apireq_content_type_ok("application/json; charset=utf-8", J));
    CHECK(apireq_content_type_ok("Application/JSON;charset=UTF-8", J));
    CHECK(apireq_content_type_ok("  application/json  ", J));
    CHECK(apireq_content_type_ok("application/json ; charset=utf-8", J));
    CHECK(apireq_content_type_ok("application/vnd.api+json", J));
    CHECK(apireq_content_type_ok("application/merge-patch+json; charset=utf-8", J));
    /* the bodies a web page may send without a CORS preflight */
    CHECK(!apireq_content_type_ok("text/plain", J));
    CHECK(!apireq_content_type_ok("text/plain;charset=UTF-8", J));
    CHECK(!apireq_content_type_ok("application/x-www-form-urlencoded", J));
    CHECK(!apireq_content_type_ok("multipart/form-data; boundary=x", J));
    CHECK(!apireq_content_type_ok(NULL, J));
    CHECK(!apireq_content_type_ok("", J));
    CHECK(!apireq_content_type_ok("application/jsonx", J));
    CHECK(!apireq_content_type_ok("application/json5", J));
    CHECK(!apireq_content_type_ok("text/json", J));
    CHECK(!apireq_content_type_ok("application/+json", J));
    CHECK(!apireq_content_type_ok("application/a/b+json", J));
    CHECK(!apireq_content_type_ok("application/a b+json", J));
    CHECK(apireq_content_type_ok("multipart/form-data; boundary=----x", M));
    CHECK(apireq_content_type_ok("Multipart/Form-Data;boundary=b", M));
    CHECK(!apireq_content_type_ok("multipart/mixed; boundary=b", M));
    CHECK(!apireq_content_type_ok("application/json", M));
    CHECK(!apireq_content_type_ok(NULL, M));
    CHECK(apireq_content_type_ok(NULL, APIREQ_BODY_ANY));
    CHECK(apireq_content_type_ok("text/plain", APIREQ_BODY_ANY));
}

TEST(api_error_shapes)
{
    struct api_error e;
    api_error_set(&e, 400, "temperature", "bad %s", "value");
    size_t len;
    char *s = api_error_json(API_OPENAI, &e, &len);
    CHECK(s && len == strlen(s));
    cJSON *j = cJSON_Parse(s);
    free(s);
    cJSON *err = cJSON_GetObjectItem(j, "error");
    CHECK_STR_EQ(cJSON_GetObjectItem(err, "message")->valuestring, "bad value");
    CHECK_STR_EQ(cJSON_GetObjectItem(err, "type")->valuestring, "invalid_request_error");
    CHECK_STR_EQ(cJSON_GetObjectItem(err, "param")->valuestring, "temperature");
    CHECK(cJSON_IsNull(cJSON_GetObjectItem(err, "code")));
    cJSON_Delete(j);

    api_error_set(&e, 429, NULL, "busy");
    s = api_error_json(API_ANTHROPIC, &e, &len);
    j = cJSON_Parse(s);
    free(s);
    CHECK_STR_EQ(cJSON_GetObjectItem(j, "type")->valuestring, "error");
    err = cJSON_GetObjectItem(j, "error");
    CHECK_STR_EQ(cJSON_GetObjectItem(err, "type")->valuestring, "rate_limit_error");
    CHECK_STR_EQ(cJSON_GetObjectItem(err, "message")->valuestring, "busy");
    cJSON_Delete(j);

    CHECK_STR_EQ(api_error_type(API_OPENAI, 401), "authentication_error");
    CHECK_STR_EQ(api_error_type(API_ANTHROPIC, 404), "not_found_error");
    CHECK_STR_EQ(api_error_type(API_ANTHROPIC, 413), "request_too_large");
    CHECK_STR_EQ(api_error_type(API_ANTHROPIC, 503), "overloaded_error");
    CHECK_STR_EQ(api_error_type(API_OPENAI, 500), "server_error");
}

static void check_frame(const char *event, const char *data, const char *want)
{
    size_t need = ws_sse_frame(NULL, 0, event, data, strlen(data));
    char buf[256];
    CHECK(need < sizeof buf);
    CHECK_EQ(ws_sse_frame(buf, sizeof buf, event, data, strlen(data)), need);
    buf[need] = 0;
    CHECK_STR_EQ(buf, want);
}

TEST(api_sse_framing)
{
    check_frame(NULL, "{\"a\":1}", "data: {\"a\":1}\n\n");
    check_frame("ping", "{}", "event: ping\ndata: {}\n\n");
    check_frame(NULL, "", "data: \n\n");
    check_frame(NULL, "a\nb", "data: a\ndata: b\n\n");
    check_frame(NULL, "a\r\nb\rc", "data: a\ndata: b\ndata: c\n\n");
    check_frame(NULL, "a\n", "data: a\n\n");
    check_frame(NULL, "a\n\nb", "data: a\ndata: \ndata: b\n\n");
    /* Too small a buffer: nothing past cap is written, the length is still full. */
    char small[4] = "xyz";
    CHECK_EQ(ws_sse_frame(small, 3, NULL, "abc", 3), 11);
}

TEST(api_metrics_text)
{
    struct metrics *m = metrics_new();
    CHECK(m);
    metrics_http(m, "/v1/chat/completions", "POST", 200, 0.3);
    metrics_http(m, "/v1/chat/completions", "POST", 200, 0.004);
    metrics_http(m, "/health", "GET", 200, 0.0001);
    metrics_ttft(m, 0.02);
    metrics_itl(m, 0.003);
    metrics_tokens(m, 10, 20);
    struct engine_stats es = { .running = 2, .kv_blocks_total = 8, .kv_blocks_used = 2,
                               .kernel_switches = 5 };
    size_t len;
    char *t = metrics_render(m, &es, "9.9", "tiny", &len);
    CHECK(t && strlen(t) == len);
    CHECK_STR_CONTAINS(t, "omniserve_http_requests_total{route=\"/v1/chat/completions\",method=\"POST\",status=\"200\"} 2\n");
    CHECK_STR_CONTAINS(t, "omniserve_http_requests_total{route=\"/health\",method=\"GET\",status=\"200\"} 1\n");
    CHECK_STR_CONTAINS(t, "omniserve_http_request_duration_seconds_bucket{le=\"0.005\"} 2\n");
    CHECK_STR_CONTAINS(t, "omniserve_http_request_duration_seconds_bucket{le=\"0.5\"} 3\n");
    CHECK_STR_CONTAINS(t, "omniserve_http_request_duration_seconds_bucket{le=\"+Inf\"} 3\n");
    CHECK_STR_CONTAINS(t, "omniserve_time_to_first_token_seconds_count 1\n");
    CHECK_STR_CONTAINS(t, "omniserve_inter_token_latency_seconds_bucket{le=\"0.005\"} 1\n");
    CHECK_STR_CONTAINS(t, "omniserve_generation_tokens_total 20\n");
    CHECK_STR_CONTAINS(t, "omniserve_requests_running 2\n");
    CHECK_STR_CONTAINS(t, "omniserve_kv_usage_ratio 0.25\n");
    CHECK_STR_CONTAINS(t, "omniserve_engine_kernel_switches_total 5\n");
    CHECK_STR_CONTAINS(t, "omniserve_build_info{version=\"9.9\"} 1\n");
    free(t);
    t = metrics_render(m, NULL, "x", "tiny", &len);   /* no engine yet: no gauges */
    CHECK(t && !strstr(t, "omniserve_requests_running") && !strstr(t, "vllm:"));
    free(t);
    metrics_free(m);
}

/* The names, types and values an inference router reads (vLLM's). */
TEST(api_metrics_vllm_names)
{
    struct metrics *m = metrics_new();
    CHECK(m);
    metrics_ttft(m, 0.03);
    metrics_ttft(m, 3000);
    struct engine_stats es = { .running = 3, .waiting = 7, .kv_blocks_total = 8,
                               .kv_blocks_used = 6, .prompt_tokens = 100,
                               .generated_tokens = 40, .preemptions = 2 };
    size_t len;
    char *t = metrics_render(m, &es, "9.9", "q\"w\\n\nx", &len);
    CHECK(t);
#define L "{model_name=\"q\\\"w\\\\n\\nx\"}"
    CHECK_STR_CONTAINS(t, "# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running" L " 3\n");
    CHECK_STR_CONTAINS(t, "# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting" L " 7\n");
    CHECK_STR_CONTAINS(t, "# TYPE vllm:num_requests_swapped gauge\nvllm:num_requests_swapped" L " 0\n");
    CHECK_STR_CONTAINS(t, "# TYPE vllm:kv_cache_usage_perc gauge\nvllm:kv_cache_usage_perc" L " 0.75\n");
    CHECK_STR_CONTAINS(t, "# TYPE vllm:gpu_cache_usage_perc gauge\nvllm:gpu_cache_usage_perc" L " 0.75\n");
    CHECK_STR_CONTAINS(t, "# TYPE vllm:prompt_tokens_total counter\nvllm:prompt_tokens_total" L " 100\n");
    CHECK_STR_CONTAINS(t, "# TYPE vllm:generation_tokens_total counter\nvllm:generation_tokens_total" L " 40\n");
    CHECK_STR_CONTAINS(t, "vllm:num_preemptions_total" L " 2\n");
    CHECK_STR_CONTAINS(t, "# TYPE vllm:time_to_first_token_seconds histogram\n");
    CHECK_STR_CONTAINS(t, "vllm:time_to_first_token_seconds_bucket{model_name=\"q\\\"w\\\\n\\nx\",le=\"0.02\"} 0\n");
    CHECK_STR_CONTAINS(t, "vllm:time_to_first_token_seconds_bucket{model_name=\"q\\\"w\\\\n\\nx\",le=\"0.04\"} 1\n");
    CHECK_STR_CONTAINS(t, "vllm:time_to_first_token_seconds_bucket{model_name=\"q\\\"w\\\\n\\nx\",le=\"2560\"} 1\n");
    CHECK_STR_CONTAINS(t, "vllm:time_to_first_token_seconds_bucket{model_name=\"q\\\"w\\\\n\\nx\",le=\"+Inf\"} 2\n");
    CHECK_STR_CONTAINS(t, "vllm:time_to_first_token_seconds_count" L " 2\n");
    CHECK_STR_CONTAINS(t, "vllm:time_to_first_token_seconds_sum" L " 3000.030000\n");
#undef L
    /* our own histogram keeps its buckets and has no labels */
    CHECK_STR_CONTAINS(t, "omniserve_time_to_first_token_seconds_count 2\n");
    /* every sample line ends in " VALUE": the escaped newline did not split one */
    for (const char *l = t, *nl; *l; l = nl + 1) {
        nl = strchr(l, '\n');
        CHECK(nl != NULL);
        if (*l == '#')
            continue;
        const char *sp = NULL;
        for (const char *p = l; p < nl; p++)
            sp = *p == ' ' ? p : sp;
        char *end = NULL;
        CHECK(sp && (strtod(sp + 1, &end), end == nl));
    }
    free(t);
    metrics_free(m);
}
