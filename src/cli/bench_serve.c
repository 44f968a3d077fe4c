/* bench_serve.c - `omniserve bench-serve --url http://127.0.0.1:PORT`: an HTTP
 * load generator (libcurl multi, one thread) for a running omniserve.
 *
 * Levels: for each concurrency c, --requests greedy /v1/completions requests
 * with c in flight (keep-alive connections), the same token prompt each;
 * latency and, with --stream, time to first token at p50/p95/p99, errors,
 * throughput. With -m FILE.gguf (the server's model) the HTTP layer's cost is
 * measured too: the same request alternately in-process (engine_generate)
 * and over HTTP, one at a time, so drift on a noisy machine hits both sides;
 * the per-pair difference is the overhead. --idle-streams N holds N streams
 * open for --hold seconds (behind `serve --max-seqs 1` they wait in the queue
 * and get keep-alive comments) and counts errors. Loopback targets only. */
#include "src/cli/cli.h"
#include "src/cli/args.h"
#include "src/cli/bench_util.h"

#include "llm/model.h"
#include "src/core/omni.h"
#include "src/engine/engine.h"

#include <cjson/cJSON.h>
#include <curl/curl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BS_MAX_LEVELS 16
#define BS_PROMPT_TEXT                                                                         \
    "Once upon a time, in a small village by the sea, there lived a girl who loved to watch " \
    "the boats come home in the evening. "

struct bs_opts {
    const char *url;             /* http://127.0.0.1:PORT (no trailing slash) */
    const char *api_key;
    const char *model;           /* -m: in-process comparison */
    int levels[BS_MAX_LEVELS];
    int n_levels;
    int n_requests, max_tokens, n_prompt, n_threads;
    int idle_streams;
    double hold_s, timeout_s;
    bool stream, json, new_conns;
};

struct bs_buf {
    char *data;
    size_t len, cap;
};

/* One HTTP request in flight. */
struct bs_xfer {
    CURL *h;
    struct curl_slist *hdrs;
    double t0, t_first, t_end;   /* seconds (omni_time_s) */
    struct bs_buf body;          /* non-stream body, or the unparsed tail of a stream */
    bool stream;
    bool done_event;             /* data: [DONE] */
    bool error_event;            /* data: {"error":...} */
    int keepalives;              /* ": keep-alive" comments */
    int completion_tokens;
};

static void bs_usage(FILE *f)
{
    fprintf(f,
            "usage: omniserve bench-serve --url http://127.0.0.1:PORT [options]\n"
            "  --url URL            a running omniserve (127.0.0.1 or localhost only)\n"
            "  --concurrency LIST   requests in flight, e.g. 1,8,32 (default)\n"
            "  --requests N         requests per level (default 64)\n"
            "  --stream             SSE streams; adds time to first token\n"
            "  --max-tokens N       generated tokens per request (default 16)\n"
            "  --prompt-tokens N    prompt length in tokens (default 32)\n"
            "  -m FILE.gguf         the server's model: also time the same requests in-process\n"
            "                       and report the HTTP/SSE layer's overhead\n"
            "  --threads N          threads of that in-process engine (default: physical cores)\n"
            "  --idle-streams N     instead: hold N streams open for --hold seconds (default 5)\n"
            "  --api-key KEY        (also $OMNISERVE_API_KEY)\n"
            "  --timeout S          per request (default 300); a timeout counts as an error\n"
            "  --new-connections    a fresh connection per request (default: keep-alive)\n"
            "  --json               one JSON object per line on stdout\n");
}

/* Seconds in (0, 86400]. */
static bool bs_secs(const char *opt, const char *s, double *out)
{
    if (cli_double("bench-serve", opt, s, 0, 86400, out))
        return false;
    if (*out == 0) {
        fprintf(stderr, "bench-serve: %s must be more than 0 seconds\n", opt);
        return false;
    }
    return true;
}

/* The benchmark only ever talks to this machine. */
static bool bs_loopback(const char *url)
{
    CURLU *u = curl_url();
    char *scheme = NULL, *host = NULL;
    bool ok = u && !curl_url_set(u, CURLUPART_URL, url, 0) &&
              !curl_url_get(u, CURLUPART_SCHEME, &scheme, 0) &&
              !curl_url_get(u, CURLUPART_HOST, &host, 0) && !strcmp(scheme, "http") &&
              (!strcmp(host, "127.0.0.1") || !strcmp(host, "localhost") || !strcmp(host, "[::1]"));
    curl_free(scheme);
    curl_free(host);
    curl_url_cleanup(u);
    return ok;
}

/* 0 ok, -1 help printed, 2 usage error. */
static int bs_parse(int argc, char **argv, struct bs_opts *o)
{
    *o = (struct bs_opts){ .levels = { 1, 8, 32 }, .n_levels = 3, .n_requests = 64,
                           .max_tokens = 16, .n_prompt = 32, .hold_s = 5, .timeout_s = 300,
                           .api_key = getenv("OMNISERVE_API_KEY") };
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            bs_usage(stdout);
            return -1;
        }
        if (!strcmp(a, "--stream") || !strcmp(a, "--json") || !strcmp(a, "--new-connections")) {
            *(a[2] == 's' ? &o->stream : a[2] == 'j' ? &o->json : &o->new_conns) = true;
            continue;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "bench-serve: %s needs a value (see --help)\n", a);
            return 2;
        }
        const char *v = argv[++i];
        long n;
        if (!strcmp(a, "--url"))
            o->url = v;
        else if (!strcmp(a, "-m") || !strcmp(a, "--model"))
            o->model = v;
        else if (!strcmp(a, "--api-key"))
            o->api_key = v;
        else if (!strcmp(a, "--concurrency") || !strcmp(a, "-c")) {
            if ((o->n_levels = cli_int_list(v, 1, 1024, o->levels, BS_MAX_LEVELS)) < 0) {
                fprintf(stderr, "bench-serve: --concurrency: '%s' is not a list like 1,8,32 "
                        "(levels 1..1024, at most %d)\n", v, BS_MAX_LEVELS);
                return 2;
            }
        } else if (!strcmp(a, "--requests") || !strcmp(a, "-n")) {
            if (cli_long("bench-serve", a, v, 1, 1 << 20, &n)) return 2;
            o->n_requests = (int)n;
        } else if (!strcmp(a, "--max-tokens")) {
            if (cli_long("bench-serve", a, v, 1, 1 << 20, &n)) return 2;
            o->max_tokens = (int)n;
        } else if (!strcmp(a, "--prompt-tokens")) {
            if (cli_long("bench-serve", a, v, 1, 1 << 16, &n)) return 2;
            o->n_prompt = (int)n;
        } else if (!strcmp(a, "--threads")) {
            if (cli_long("bench-serve", a, v, 1, 1024, &n)) return 2;
            o->n_threads = (int)n;
        } else if (!strcmp(a, "--idle-streams")) {
            if (cli_long("bench-serve", a, v, 1, 4096, &n)) return 2;
            o->idle_streams = (int)n;
        } else if (!strcmp(a, "--hold")) {
            if (!bs_secs(a, v, &o->hold_s)) return 2;
        } else if (!strcmp(a, "--timeout")) {
            if (!bs_secs(a, v, &o->timeout_s)) return 2;
        } else {
            fprintf(stderr, "bench-serve: unknown option '%s' (see --help)\n", a);
            return 2;
        }
    }
    if (!o->url) {
        fprintf(stderr, "bench-serve: --url http://127.0.0.1:PORT is required (see --help)\n");
        return 2;
    }
    if (!bs_loopback(o->url)) {
        fprintf(stderr, "bench-serve: --url '%s': only http://127.0.0.1, localhost or [::1] "
                "targets are benchmarked\n", o->url);
        return 2;
    }
    return 0;
}

// ---- one request ------------------------------------------------------------------

static bool bs_append(struct bs_buf *b, const char *data, size_t len)
{
    if (b->len + len + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < b->len + len + 1)
            cap *= 2;
        char *d = realloc(b->data, cap);
        if (!d)
            return false;
        b->data = d;
        b->cap = cap;
    }
    memcpy(b->data + b->len, data, len);
    b->len += len;
    b->data[b->len] = 0;
    return true;
}

/* "completion_tokens":N somewhere in s, or -1. */
static int bs_completion_tokens(const char *s)
{
    const char *p = strstr(s, "\"completion_tokens\":");
    return p ? atoi(p + 20) : -1;
}

/* One SSE line of a completions stream. The first chunk with text is the
 * first token (a chat stream's role chunk has "content":"" and does not count). */
static void bs_sse_line(struct bs_xfer *x, const char *line)
{
    if (line[0] == ':') {
        x->keepalives++;
        return;
    }
    if (strncmp(line, "data: ", 6))
        return;
    const char *d = line + 6;
    if (!strcmp(d, "[DONE]")) {
        x->done_event = true;
        return;
    }
    if (!strncmp(d, "{\"error\"", 8))
        x->error_event = true;
    const char *t = strstr(d, "\"text\":\"");
    if (!t)
        t = strstr(d, "\"content\":\"");
    if (!x->t_first && t && strchr(t, ':')[2] != '"')
        x->t_first = omni_time_s();
    const int n = bs_completion_tokens(d);
    if (n >= 0)
        x->completion_tokens = n;
}

static size_t bs_on_body(char *data, size_t size, size_t n, void *user)
{
    struct bs_xfer *x = user;
    const size_t len = size * n;
    if (!bs_append(&x->body, data, len))
        return 0;
    if (!x->stream)
        return len;
    char *start = x->body.data, *nl;
    while ((nl = memchr(start, '\n', x->body.len - (size_t)(start - x->body.data)))) {
        *nl = 0;
        if (nl > start && nl[-1] == '\r')
            nl[-1] = 0;
        bs_sse_line(x, start);
        start = nl + 1;
    }
    x->body.len -= (size_t)(start - x->body.data);
    memmove(x->body.data, start, x->body.len + 1);
    return len;
}

static struct bs_xfer *bs_xfer_new(const struct bs_opts *o, const char *path, const char *json,
                                   bool stream)
{
    struct bs_xfer *x = calloc(1, sizeof *x);
    if (!x || !(x->h = curl_easy_init())) {
        free(x);
        return NULL;
    }
    char url[1024], auth[600];
    snprintf(url, sizeof url, "%s%s", o->url, path);
    x->hdrs = curl_slist_append(NULL, "Content-Type: application/json");
    if (o->api_key && *o->api_key) {
        snprintf(auth, sizeof auth, "Authorization: Bearer %.500s", o->api_key);
        x->hdrs = curl_slist_append(x->hdrs, auth);
    }
    x->stream = stream;
    curl_easy_setopt(x->h, CURLOPT_URL, url);
    curl_easy_setopt(x->h, CURLOPT_NOPROXY, "*");
    curl_easy_setopt(x->h, CURLOPT_PROTOCOLS_STR, "http");
    curl_easy_setopt(x->h, CURLOPT_HTTPHEADER, x->hdrs);
    if (json)
        curl_easy_setopt(x->h, CURLOPT_COPYPOSTFIELDS, json);
    curl_easy_setopt(x->h, CURLOPT_WRITEFUNCTION, bs_on_body);
    curl_easy_setopt(x->h, CURLOPT_WRITEDATA, x);
    curl_easy_setopt(x->h, CURLOPT_PRIVATE, x);
    curl_easy_setopt(x->h, CURLOPT_TIMEOUT_MS, (long)(o->timeout_s * 1000));
    curl_easy_setopt(x->h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(x->h, CURLOPT_FORBID_REUSE, o->new_conns ? 1L : 0L);
    x->completion_tokens = -1;
    x->t0 = omni_time_s();
    return x;
}

static void bs_xfer_free(struct bs_xfer *x)
{
    if (!x)
        return;
    curl_easy_cleanup(x->h);
    curl_slist_free_all(x->hdrs);
    free(x->body.data);
    free(x);
}

/* After completion: 0 when it worked (HTTP 200, a [DONE] for streams, no
 * error event), else -1 with why in err. */
static int bs_xfer_check(struct bs_xfer *x, CURLcode cc, char *err, size_t errlen)
{
    long status = 0;
    curl_easy_getinfo(x->h, CURLINFO_RESPONSE_CODE, &status);
    if (cc != CURLE_OK)
        return omni_fail(err, errlen, -1, "%s", curl_easy_strerror(cc));
    if (status != 200)
        return omni_fail(err, errlen, -1, "HTTP %ld: %.200s", status,
                         x->body.data ? x->body.data : "");
    if (x->stream && (x->error_event || !x->done_event))
        return omni_fail(err, errlen, -1, "stream %s", x->error_event ? "sent an error event"
                                                                     : "ended without [DONE]");
    if (!x->stream && x->body.data)
        x->completion_tokens = bs_completion_tokens(x->body.data);
    return 0;
}

/* One request, start to end, on its own (the overhead pairs). */
static int bs_xfer_run(CURLM *m, struct bs_xfer *x, char *err, size_t errlen)
{
    curl_multi_add_handle(m, x->h);
    int running = 1;
    CURLcode cc = CURLE_OK;
    while (running) {
        curl_multi_perform(m, &running);
        if (running)
            curl_multi_poll(m, NULL, 0, 100, NULL);
    }
    CURLMsg *msg;
    int left;
    while ((msg = curl_multi_info_read(m, &left)))
        if (msg->msg == CURLMSG_DONE)
            cc = msg->data.result;
    x->t_end = omni_time_s();
    curl_multi_remove_handle(m, x->h);
    return bs_xfer_check(x, cc, err, errlen);
}

// ---- statistics ---------------------------------------------------------------------

struct bs_pct {
    double p50, p95, p99;
};

/* Nearest-rank percentiles (sorts v). */
static struct bs_pct bs_pcts(double *v, int n)
{
    if (n <= 0)
        return (struct bs_pct){ 0 };
    bench_sort(v, n);
    return (struct bs_pct){ v[(n - 1) * 50 / 100], v[(n - 1) * 95 / 100], v[(n - 1) * 99 / 100] };
}

// ---- the workload ---------------------------------------------------------------------

/* The prompt as token ids from the server's own tokenizer: the text repeated
 * until n tokens. Malloc'd; NULL with a message. */
static int32_t *bs_prompt_ids(CURLM *m, const struct bs_opts *o)
{
    char text[8192] = "", err[256];
    int32_t *ids = NULL;
    for (int rep = 0; rep < 16; rep++) {
        strncat(text, BS_PROMPT_TEXT, sizeof text - strlen(text) - 1);
        cJSON *req = cJSON_CreateObject();
        cJSON_AddStringToObject(req, "prompt", text);
        cJSON_AddBoolToObject(req, "add_special_tokens", false);
        char *body = cJSON_PrintUnformatted(req);
        cJSON_Delete(req);
        struct bs_xfer *x = body ? bs_xfer_new(o, "/tokenize", body, false) : NULL;
        free(body);
        if (!x || bs_xfer_run(m, x, err, sizeof err)) {
            fprintf(stderr, "bench-serve: POST %s/tokenize: %s\n", o->url, x ? err : "out of memory");
            bs_xfer_free(x);
            return NULL;
        }
        cJSON *r = cJSON_Parse(x->body.data);
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(r, "tokens");
        const int n = cJSON_GetArraySize(t);
        if (n >= o->n_prompt && (ids = malloc((size_t)o->n_prompt * sizeof *ids))) {
            for (int i = 0; i < o->n_prompt; i++)
                ids[i] = (int32_t)cJSON_GetArrayItem(t, i)->valueint;
        }
        cJSON_Delete(r);
        bs_xfer_free(x);
        if (ids || !cJSON_IsArray(t))
            break;
    }
    if (!ids)
        fprintf(stderr, "bench-serve: could not build a %d-token prompt through /tokenize\n",
                o->n_prompt);
    return ids;
}

/* The /v1/completions body: the token prompt, greedy, max_tokens. */
static char *bs_body(const struct bs_opts *o, const int32_t *ids, bool stream)
{
    cJSON *req = cJSON_CreateObject();
    cJSON *p = cJSON_AddArrayToObject(req, "prompt");
    for (int i = 0; i < o->n_prompt; i++)
        cJSON_AddItemToArray(p, cJSON_CreateNumber(ids[i]));
    cJSON_AddNumberToObject(req, "max_tokens", o->max_tokens);
    cJSON_AddNumberToObject(req, "temperature", 0);
    cJSON_AddBoolToObject(req, "stream", stream);
    if (stream)
        cJSON_AddTrueToObject(cJSON_AddObjectToObject(req, "stream_options"), "include_usage");
    char *s = cJSON_PrintUnformatted(req);
    cJSON_Delete(req);
    return s;
}

struct bs_level {
    int c, n, errors;
    double wall_s, tokens;
    struct bs_pct lat_ms, ttft_ms;
    char first_error[256];
};

/* o->n_requests requests with c in flight. */
static int bs_level(CURLM *m, const struct bs_opts *o, const char *body, int c,
                    struct bs_level *L)
{
    const int n = o->n_requests;
    double *lat = calloc((size_t)n, sizeof *lat), *ttft = calloc((size_t)n, sizeof *ttft);
    if (!lat || !ttft) {
        free(lat);
        free(ttft);
        return -1;
    }
    *L = (struct bs_level){ .c = c, .n = n };
    curl_multi_setopt(m, CURLMOPT_MAXCONNECTS, (long)c + 8);
    int started = 0, finished = 0, in_flight = 0, n_ok = 0, n_ttft = 0;
    const double t0 = omni_time_s();
    while (finished < n) {
        while (in_flight < c && started < n) {
            struct bs_xfer *x = bs_xfer_new(o, "/v1/completions", body, o->stream);
            if (!x) {
                L->errors++;
                finished++;
                started++;
                continue;
            }
            curl_multi_add_handle(m, x->h);
            started++;
            in_flight++;
        }
        int running;
        curl_multi_perform(m, &running);
        CURLMsg *msg;
        int left;
        while ((msg = curl_multi_info_read(m, &left))) {
            if (msg->msg != CURLMSG_DONE)
                continue;
            struct bs_xfer *x;
            curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, (char **)&x);
            const CURLcode cc = msg->data.result;
            x->t_end = omni_time_s();
            curl_multi_remove_handle(m, x->h);
            char err[256];
            if (bs_xfer_check(x, cc, err, sizeof err)) {
                if (!L->errors++)
                    snprintf(L->first_error, sizeof L->first_error, "%s", err);
            } else {
                lat[n_ok++] = (x->t_end - x->t0) * 1000;
                if (x->t_first)
                    ttft[n_ttft++] = (x->t_first - x->t0) * 1000;
                L->tokens += x->completion_tokens > 0 ? x->completion_tokens : 0;
            }
            bs_xfer_free(x);
            in_flight--;
            finished++;
        }
        if (finished < n && (in_flight == c || started == n))
            curl_multi_poll(m, NULL, 0, 100, NULL);
    }
    L->wall_s = omni_time_s() - t0;
    L->lat_ms = bs_pcts(lat, n_ok);
    L->ttft_ms = bs_pcts(ttft, n_ttft);
    free(lat);
    free(ttft);
    return 0;
}

// ---- HTTP vs in-process ------------------------------------------------------------------

struct bs_overhead {
    int pairs, errors, token_mismatches;
    struct bs_pct http_ms, engine_ms, diff_ms, http_ttft_ms, engine_ttft_ms, diff_ttft_ms;
};

struct bs_engine_run {
    int tokens;
    double ttft_ms;
};

static void bs_engine_event(void *user, const struct engine_event *ev)
{
    struct bs_engine_run *r = user;
    if (ev->type == ENGINE_EV_DONE) {
        r->tokens = ev->usage.completion_tokens;
        r->ttft_ms = ev->usage.ttft_ms;
    }
}

/* Alternate: the request in-process, then over HTTP; n pairs after two
 * untimed warm-up pairs. */
static int bs_overhead(CURLM *m, const struct bs_opts *o, const int32_t *ids, const char *body,
                       struct bs_overhead *out)
{
    char err[512];
    struct llm_model *model = llm_model_load(o->model, NULL, err, sizeof err);
    struct engine_params ep = engine_default_params();
    ep.n_threads = o->n_threads;
    ep.max_seqs = 1;
    struct engine *e = model ? engine_new(&ep, err, sizeof err) : NULL;
    if (!e || engine_add_model(e, model, "bench", err, sizeof err) < 0 ||
        engine_start(e, err, sizeof err) < 0) {
        fprintf(stderr, "bench-serve: -m %s: %s\n", o->model, err);
        engine_free(e);
        llm_model_free(model);
        return -1;
    }
    const int n = o->n_requests;
    double *v = calloc((size_t)n * 6, sizeof *v);
    double *h_ms = v, *e_ms = v + n, *d_ms = v + 2 * n, *h_tt = v + 3 * n, *e_tt = v + 4 * n,
           *d_tt = v + 5 * n;
    *out = (struct bs_overhead){ 0 };
    int rc = v ? 0 : -1;
    for (int i = -2; i < n && !rc; i++) {
        struct bs_engine_run er = { 0 };
        struct engine_request rq = engine_default_request();
        rq.prompt = ids;
        rq.n_prompt = o->n_prompt;
        rq.max_tokens = o->max_tokens;
        rq.sampling.temperature = 0;
        rq.on_event = bs_engine_event;
        rq.user = &er;
        const double t0 = omni_time_s();
        if (engine_generate(e, &rq, err, sizeof err)) {
            fprintf(stderr, "bench-serve: in-process: %s\n", err);
            rc = -1;
            break;
        }
        const double t_engine = (omni_time_s() - t0) * 1000;
        struct bs_xfer *x = bs_xfer_new(o, "/v1/completions", body, o->stream);
        if (!x || bs_xfer_run(m, x, err, sizeof err)) {
            if (!out->errors++)
                fprintf(stderr, "bench-serve: overhead pair: %s\n", x ? err : "out of memory");
            bs_xfer_free(x);
            continue;
        }
        if (i >= 0) {
            const int k = out->pairs++;
            h_ms[k] = (x->t_end - x->t0) * 1000;
            e_ms[k] = t_engine;
            d_ms[k] = h_ms[k] - e_ms[k];
            h_tt[k] = x->t_first ? (x->t_first - x->t0) * 1000 : 0;
            e_tt[k] = er.ttft_ms;
            d_tt[k] = h_tt[k] - e_tt[k];
            out->token_mismatches += x->completion_tokens != er.tokens;
        }
        bs_xfer_free(x);
    }
    if (!rc) {
        out->http_ms = bs_pcts(h_ms, out->pairs);
        out->engine_ms = bs_pcts(e_ms, out->pairs);
        out->diff_ms = bs_pcts(d_ms, out->pairs);
        if (o->stream) {
            out->http_ttft_ms = bs_pcts(h_tt, out->pairs);
            out->engine_ttft_ms = bs_pcts(e_tt, out->pairs);
            out->diff_ttft_ms = bs_pcts(d_tt, out->pairs);
        }
    }
    free(v);
    engine_free(e);
    llm_model_free(model);
    return rc;
}

// ---- idle streams ------------------------------------------------------------------------

struct bs_idle {
    int streams, opened, completed, open_at_end, errors, keepalives;
    bool healthy_after;
    char first_error[256];
};

/* N streams at once, held for o->hold_s seconds, then closed by us. */
static int bs_idle(CURLM *m, const struct bs_opts *o, const char *body, struct bs_idle *out)
{
    const int n = o->idle_streams;
    struct bs_xfer **xs = calloc((size_t)n, sizeof *xs);
    if (!xs)
        return -1;
    *out = (struct bs_idle){ .streams = n };
    curl_multi_setopt(m, CURLMOPT_MAXCONNECTS, (long)n + 8);
    for (int i = 0; i < n; i++) {
        if (!(xs[i] = bs_xfer_new(o, "/v1/completions", body, true))) {
            out->errors++;
            continue;
        }
        curl_multi_add_handle(m, xs[i]->h);
    }
    const double t_end = omni_time_s() + o->hold_s;
    while (omni_time_s() < t_end) {
        int running;
        curl_multi_perform(m, &running);
        CURLMsg *msg;
        int left;
        while ((msg = curl_multi_info_read(m, &left))) {
            if (msg->msg != CURLMSG_DONE)
                continue;
            struct bs_xfer *x;
            curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, (char **)&x);
            x->t_end = omni_time_s();
            char err[256];
            if (bs_xfer_check(x, msg->data.result, err, sizeof err)) {
                if (!out->errors++)
                    snprintf(out->first_error, sizeof out->first_error, "%s", err);
            } else {
                out->completed++;
            }
        }
        curl_multi_poll(m, NULL, 0, 100, NULL);
    }
    for (int i = 0; i < n; i++) {
        if (!xs[i])
            continue;
        long status = 0;
        curl_easy_getinfo(xs[i]->h, CURLINFO_RESPONSE_CODE, &status);
        out->opened += status == 200;
        out->open_at_end += !xs[i]->t_end && status == 200;
        if (!xs[i]->t_end && status != 200) {
            if (!out->errors++)
                snprintf(out->first_error, sizeof out->first_error,
                         "no response headers within --hold");
        }
        out->keepalives += xs[i]->keepalives;
        curl_multi_remove_handle(m, xs[i]->h);
        bs_xfer_free(xs[i]);
    }
    free(xs);
    char err[256];
    struct bs_xfer *h = bs_xfer_new(o, "/health", NULL, false);
    out->healthy_after = h && !bs_xfer_run(m, h, err, sizeof err);
    bs_xfer_free(h);
    return 0;
}

// ---- main ------------------------------------------------------------------------------

int cli_bench_serve(int argc, char **argv)
{
    struct bs_opts o;
    int rc = bs_parse(argc, argv, &o);
    if (rc)
        return rc < 0 ? 0 : rc;
    curl_global_init(CURL_GLOBAL_DEFAULT);
    CURLM *m = curl_multi_init();
    int32_t *ids = m ? bs_prompt_ids(m, &o) : NULL;
    char *body = ids ? bs_body(&o, ids, o.stream) : NULL;
    if (!body) {
        rc = 1;
        goto done;
    }
    if (o.idle_streams) {
        struct bs_idle I;
        char *sbody = bs_body(&o, ids, true);
        rc = sbody && !bs_idle(m, &o, sbody, &I) ? 0 : 1;
        free(sbody);
        if (rc)
            goto done;
        if (o.json)
            printf("{\"mode\":\"idle_streams\",\"streams\":%d,\"opened\":%d,\"open_at_end\":%d,"
                   "\"completed\":%d,\"errors\":%d,\"keepalive_comments\":%d,\"hold_s\":%.1f,"
                   "\"healthy_after\":%s}\n", I.streams, I.opened, I.open_at_end, I.completed,
                   I.errors, I.keepalives, o.hold_s, I.healthy_after ? "true" : "false");
        else
            printf("idle streams: %d requested, %d opened (200), %d still open after %.1f s, "
                   "%d completed, %d errors, %d keep-alive comments; server %s afterwards\n",
                   I.streams, I.opened, I.open_at_end, o.hold_s, I.completed, I.errors,
                   I.keepalives, I.healthy_after ? "healthy" : "NOT healthy");
        if (I.errors)
            fprintf(stderr, "bench-serve: first error: %s\n", I.first_error);
        rc = I.errors || !I.healthy_after;
        goto done;
    }
    if (!o.json)
        printf("%s: /v1/completions, prompt %d tokens, %d generated, %s, %d requests per level\n\n"
               "%5s %7s %8s %9s %9s %9s %9s%s\n", o.url, o.n_prompt, o.max_tokens,
               o.stream ? "streaming" : "not streaming", o.n_requests, "conc", "errors",
               "req/s", "tok/s", "lat p50", "lat p95", "lat p99",
               o.stream ? "  ttft p50  ttft p95  ttft p99" : "");
    for (int i = 0; i < o.n_levels; i++) {
        struct bs_level L;
        if (bs_level(m, &o, body, o.levels[i], &L)) {
            rc = 1;
            goto done;
        }
        if (o.json) {
            printf("{\"mode\":\"level\",\"concurrency\":%d,\"requests\":%d,\"errors\":%d,"
                   "\"stream\":%s,\"wall_s\":%.3f,\"req_s\":%.2f,\"tok_s\":%.2f,"
                   "\"latency_ms_p50\":%.3f,\"latency_ms_p95\":%.3f,\"latency_ms_p99\":%.3f",
                   L.c, L.n, L.errors, o.stream ? "true" : "false", L.wall_s,
                   L.wall_s > 0 ? (L.n - L.errors) / L.wall_s : 0,
                   L.wall_s > 0 ? L.tokens / L.wall_s : 0, L.lat_ms.p50, L.lat_ms.p95,
                   L.lat_ms.p99);
            if (o.stream)
                printf(",\"ttft_ms_p50\":%.3f,\"ttft_ms_p95\":%.3f,\"ttft_ms_p99\":%.3f",
                       L.ttft_ms.p50, L.ttft_ms.p95, L.ttft_ms.p99);
            printf("}\n");
        } else {
            printf("%5d %7d %8.2f %9.1f %9.2f %9.2f %9.2f", L.c, L.errors,
                   L.wall_s > 0 ? (L.n - L.errors) / L.wall_s : 0,
                   L.wall_s > 0 ? L.tokens / L.wall_s : 0, L.lat_ms.p50, L.lat_ms.p95,
                   L.lat_ms.p99);
            if (o.stream)
                printf(" %9.2f %9.2f %9.2f", L.ttft_ms.p50, L.ttft_ms.p95, L.ttft_ms.p99);
            printf("\n");
        }
        if (L.errors) {
            fprintf(stderr, "bench-serve: c=%d: %d errors, the first: %s\n", L.c, L.errors,
                    L.first_error);
            rc = 1;
        }
        fflush(stdout);
    }
    if (o.model) {
        struct bs_overhead V;
        if (bs_overhead(m, &o, ids, body, &V)) {
            rc = 1;
            goto done;
        }
        if (o.json) {
            printf("{\"mode\":\"overhead\",\"pairs\":%d,\"errors\":%d,\"token_mismatches\":%d,"
                   "\"stream\":%s,\"http_ms_p50\":%.3f,\"engine_ms_p50\":%.3f,"
                   "\"overhead_ms_p50\":%.3f,\"overhead_ms_p95\":%.3f,\"overhead_ms_p99\":%.3f",
                   V.pairs, V.errors, V.token_mismatches, o.stream ? "true" : "false",
                   V.http_ms.p50, V.engine_ms.p50, V.diff_ms.p50, V.diff_ms.p95, V.diff_ms.p99);
            if (o.stream)
                printf(",\"http_ttft_ms_p50\":%.3f,\"engine_ttft_ms_p50\":%.3f,"
                       "\"ttft_overhead_ms_p50\":%.3f,\"ttft_overhead_ms_p95\":%.3f",
                       V.http_ttft_ms.p50, V.engine_ttft_ms.p50, V.diff_ttft_ms.p50,
                       V.diff_ttft_ms.p95);
            printf("}\n");
        } else {
            printf("\nHTTP vs in-process (%d alternating pairs, one at a time): request p50 "
                   "%.2f ms vs %.2f ms; overhead p50 %.3f ms, p95 %.3f ms, p99 %.3f ms\n",
                   V.pairs, V.http_ms.p50, V.engine_ms.p50, V.diff_ms.p50, V.diff_ms.p95,
                   V.diff_ms.p99);
            if (o.stream)
                printf("time to first token: %.2f ms vs %.2f ms; overhead p50 %.3f ms, p95 %.3f ms\n",
                       V.http_ttft_ms.p50, V.engine_ttft_ms.p50, V.diff_ttft_ms.p50,
                       V.diff_ttft_ms.p95);
        }
        if (V.errors || V.token_mismatches) {
            fprintf(stderr, "bench-serve: overhead: %d errors, %d pairs with different token "
                    "counts (is -m the server's model?)\n", V.errors, V.token_mismatches);
            rc = 1;
        }
    }
done:
    free(body);
    free(ids);
    curl_multi_cleanup(m);
    curl_global_cleanup();
    return rc;
}
