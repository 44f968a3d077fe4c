/* bench_engine.c - `omniserve bench-engine -m FILE.gguf`: the engine under load.
 *
 * For each concurrency level c a fresh engine (empty prefix cache) gets c
 * greedy requests at once: --prompt-tokens seeded random ids each (the first
 * --shared-prefix of them common to all), --gen-tokens generated. Reported:
 * aggregate decode tok/s (tokens generated while all c sequences decode
 * together, over that window), per-sequence tok/s, TTFT p50/p95, prefix-cache
 * reuse, the share of step time spent scheduling (and outside llm_forward), the
 * mean step (prompt chunks included) and the mean decode-only step (one
 * generated token per sequence, no prompt chunk: the batched-decode cost). With
 * --shared-prefix, one request alone on the empty cache (cold) and one alone
 * after it (warm) time the first token first; --follow-up runs the shared
 * prefix alone as a first turn (untimed) before the warm request, as a
 * conversation's next turn extends the last prompt. --verify reruns every
 * sequence alone and counts those whose tokens differ. */
#include "src/cli/cli.h"
#include "src/cli/args.h"
#include "src/cli/bench_util.h"
#include "llm/model.h"
#include "src/core/omni.h"
#include "src/core/threadpool.h"
#include "src/engine/engine.h"

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#define BE_MAX_LEVELS 16

struct be_opts {
    const char *model;
    int levels[BE_MAX_LEVELS];
    int n_levels;
    int n_prompt, n_gen, shared_prefix;
    bool verify, json, follow_up;
    uint64_t seed;
    struct engine_params ep;
};

/* One request's tokens and times, written on the engine thread. */
struct be_seq {
    int32_t *tok;            /* [n_gen] */
    double *t;               /* [n_gen] arrival time of each token */
    int n;
    int cached_tokens;
    double ttft_ms;
    bool done, failed;
};

struct be_run {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int n_done;
};

struct be_ctx {
    struct be_run *run;
    struct be_seq *seq;
};

static void be_usage(FILE *f)
{
    fprintf(f,
            "usage: omniserve bench-engine -m FILE.gguf [options]\n"
            "  --concurrency LIST    comma-separated levels (default 1,4,8,16)\n"
            "  --prompt-tokens N     prompt length (default 128)\n"
            "  --gen-tokens N        generated tokens per sequence (default 64)\n"
            "  --shared-prefix N     first N prompt tokens common to all; adds cold/warm TTFT\n"
            "  --follow-up           the warm request follows a first turn of the prefix alone\n"
            "  --verify              rerun each sequence alone; count differing outputs\n"
            "  --deterministic       batch-invariant kernels (outputs independent of the batch)\n"
            "  --json                one JSON object per level on stdout\n"
            "  --threads N           compute threads (default: physical cores, %d here)\n"
            "  --kv-block-size N     tokens per KV block (default 16)\n"
            "  --state-snapshot-interval N  hybrids: tokens between state snapshots (default:\n"
            "                        every KV block; 0: none)\n"
            "  --state-snapshot-memory SIZE  hybrids: memory of those snapshots (default: a\n"
            "                        quarter of the KV budget, as serve; 0: none)\n"
            "  --kv-type T           KV storage: f16 (default), f32, q8_0\n"
            "  --kv-memory SIZE      KV pool size, e.g. 512MiB, 2GiB (default: from free RAM)\n"
            "  --max-batch-tokens N  per-step token budget (default 512)\n"
            "  --seed N              seed of the random prompts (default 42)\n"
            "  --device D            cpu (default), cuda or cuda:N: the forward on that GPU\n"
            "  --gpu-memory-fraction F  with --device cuda: share of free GPU memory for KV\n",
            omni_physical_cores());
}

/* "1024", "512MiB", "2GiB", "64KiB" (also MB/GB/KB, read as binary units). */
static bool be_size(const char *s, size_t *out)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || end == s)
        return false;
    unsigned shift = 0;
    if (!strcasecmp(end, "kib") || !strcasecmp(end, "kb") || !strcasecmp(end, "k"))
        shift = 10;
    else if (!strcasecmp(end, "mib") || !strcasecmp(end, "mb") || !strcasecmp(end, "m"))
        shift = 20;
    else if (!strcasecmp(end, "gib") || !strcasecmp(end, "gb") || !strcasecmp(end, "g"))
        shift = 30;
    else if (*end && strcasecmp(end, "b"))
        return false;
    if (v > (SIZE_MAX >> shift))
        return false;
    *out = (size_t)v << shift;
    return true;
}

/* 0 on success, 2 on bad usage, -1 when --help was printed. */
static int be_parse(int argc, char **argv, struct be_opts *o)
{
    *o = (struct be_opts){ .levels = { 1, 4, 8, 16 }, .n_levels = 4, .n_prompt = 128,
                           .n_gen = 64, .seed = 42, .ep = engine_default_params() };
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            be_usage(stdout);
            return -1;
        }
        if (!strcmp(a, "--follow-up")) {
            o->follow_up = true;
            continue;
        }
        if (!strcmp(a, "--json") || !strcmp(a, "--verify") || !strcmp(a, "--deterministic")) {
            if (a[2] == 'j')
                o->json = true;
            else if (a[2] == 'v')
                o->verify = true;
            else
                o->ep.deterministic = true;
            continue;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "bench-engine: %s needs a value (see --help)\n", a);
            return 2;
        }
        const char *v = argv[++i];
        long n;
        if (!strcmp(a, "-m") || !strcmp(a, "--model")) {
            o->model = v;
        } else if (!strcmp(a, "--concurrency") || !strcmp(a, "-c")) {
            if ((o->n_levels = cli_int_list(v, 1, 256, o->levels, BE_MAX_LEVELS)) < 0) {
                fprintf(stderr, "bench-engine: --concurrency: '%s' is not a list like 1,4,8 "
                        "(levels 1..256, at most %d)\n", v, BE_MAX_LEVELS);
                return 2;
            }
        } else if (!strcmp(a, "--prompt-tokens")) {
            if (cli_long("bench-engine", a, v, 1, 1 << 20, &n)) return 2;
            o->n_prompt = (int)n;
        } else if (!strcmp(a, "--gen-tokens")) {
            if (cli_long("bench-engine", a, v, 1, 1 << 20, &n)) return 2;
            o->n_gen = (int)n;
        } else if (!strcmp(a, "--shared-prefix")) {
            if (cli_long("bench-engine", a, v, 0, 1 << 20, &n)) return 2;
            o->shared_prefix = (int)n;
        } else if (!strcmp(a, "--threads") || !strcmp(a, "-t")) {
            if (cli_long("bench-engine", a, v, 1, 1024, &n)) return 2;
            o->ep.n_threads = (int)n;
        } else if (!strcmp(a, "--kv-block-size")) {
            if (cli_long("bench-engine", a, v, 1, 4096, &n)) return 2;
            o->ep.kv_block_size = (int)n;
        } else if (!strcmp(a, "--state-snapshot-interval")) {
            if (cli_long("bench-engine", a, v, 0, 1 << 20, &n)) return 2;
            o->ep.state_snapshot_interval = n ? (int)n : -1;
        } else if (!strcmp(a, "--state-snapshot-memory")) {
            size_t sz;
            if (!be_size(v, &sz)) {
                fprintf(stderr, "bench-engine: --state-snapshot-memory: '%s' is not a size like 512MiB\n", v);
                return 2;
            }
            o->ep.state_snapshot_memory = !sz ? -1 : sz > INT64_MAX ? INT64_MAX : (int64_t)sz;
        } else if (!strcmp(a, "--max-batch-tokens")) {
            if (cli_long("bench-engine", a, v, 1, 1 << 16, &n)) return 2;
            o->ep.max_batch_tokens = (int)n;
        } else if (!strcmp(a, "--seed")) {
            if (cli_long("bench-engine", a, v, 0, LONG_MAX, &n)) return 2;
            o->seed = (uint64_t)n;
        } else if (!strcmp(a, "--kv-type")) {
            if ((o->ep.kv_type = engine_kv_type_from_name(v)) < 0) {
                fprintf(stderr, "bench-engine: --kv-type: '%s' is not f16, f32 or q8_0\n", v);
                return 2;
            }
        } else if (!strcmp(a, "--device")) {
            o->ep.device = v;
        } else if (!strcmp(a, "--gpu-memory-fraction")) {
            double f;
            if (cli_double("bench-engine", a, v, 0.01, 1.0, &f)) return 2;
            o->ep.gpu_memory_fraction = f;
        } else if (!strcmp(a, "--kv-memory")) {
            if (!be_size(v, &o->ep.kv_memory_bytes) || !o->ep.kv_memory_bytes) {
                fprintf(stderr, "bench-engine: --kv-memory: '%s' is not a size like 512MiB\n", v);
                return 2;
            }
        } else {
            fprintf(stderr, "bench-engine: unknown option '%s' (see --help)\n", a);
            return 2;
        }
    }
    if (!o->model) {
        fprintf(stderr, "bench-engine: -m FILE.gguf is required (see --help)\n");
        return 2;
    }
    if (o->shared_prefix >= o->n_prompt) {
        fprintf(stderr, "bench-engine: --shared-prefix %d must be below --prompt-tokens %d\n",
                o->shared_prefix, o->n_prompt);
        return 2;
    }
    int max_c = 1;
    for (int i = 0; i < o->n_levels; i++)
        max_c = o->levels[i] > max_c ? o->levels[i] : max_c;
    o->ep.max_seqs = max_c;
    o->ep.max_queue = max_c;
    return 0;
}

static void be_event(void *user, const struct engine_event *ev)
{
    struct be_ctx *c = user;
    struct be_seq *s = c->seq;
    pthread_mutex_lock(&c->run->mu);
    if (ev->type == ENGINE_EV_TOKEN) {
        s->tok[s->n] = ev->token;
        s->t[s->n++] = omni_time_s();
    } else {
        s->done = true;
        s->failed = ev->type == ENGINE_EV_ERROR;
        s->cached_tokens = ev->usage.cached_tokens;
        s->ttft_ms = ev->usage.ttft_ms;
        if (s->failed)
            fprintf(stderr, "bench-engine: %s\n", ev->error);
        c->run->n_done++;
        pthread_cond_signal(&c->run->cv);
    }
    pthread_mutex_unlock(&c->run->mu);
}

/* splitmix64 over the seed: prompt i's token ids, the shared prefix first. */
static void be_prompt(const struct be_opts *o, int level, int i, int n_vocab, int32_t *ids)
{
    for (int p = 0; p < o->n_prompt; p++) {
        const uint64_t z = omni_mix64(
            o->seed * 0x9e3779b97f4a7c15ull +
            (p < o->shared_prefix ? 0 : (uint64_t)(level * 1000 + i + 1) << 32) + (uint64_t)p);
        ids[p] = (int32_t)(z % (uint64_t)n_vocab);
    }
}

/* Submit n requests (prompts[i], seqs[i]) together and wait for them all.
 * 0, or 1 with a message. */
static int be_run(struct engine *e, const struct be_opts *o, int32_t **prompts, int n,
                  int max_tokens, struct be_seq *seqs)
{
    struct be_run run = { .n_done = 0 };
    pthread_mutex_init(&run.mu, NULL);
    pthread_cond_init(&run.cv, NULL);
    struct be_ctx *ctx = calloc((size_t)n, sizeof *ctx);
    int rc = ctx ? 0 : 1, submitted = 0;
    for (int i = 0; i < n && !rc; i++) {
        ctx[i] = (struct be_ctx){ &run, &seqs[i] };
        seqs[i].n = 0;
        seqs[i].done = seqs[i].failed = false;
        struct engine_request rq = engine_default_request();
        rq.prompt = prompts[i];
        rq.n_prompt = o->n_prompt;
        rq.max_tokens = max_tokens;
        rq.sampling.temperature = 0;
        rq.ignore_eog = true;
        rq.on_event = be_event;
        rq.user = &ctx[i];
        char err[256];
        if (engine_submit(e, &rq, NULL, err, sizeof err) != 0) {
            fprintf(stderr, "bench-engine: %s\n", err);
            rc = 1;
        } else {
            submitted++;
        }
    }
    pthread_mutex_lock(&run.mu);
    while (run.n_done < submitted)
        pthread_cond_wait(&run.cv, &run.mu);
    pthread_mutex_unlock(&run.mu);
    for (int i = 0; i < submitted; i++)
        rc |= seqs[i].failed;
    free(ctx);
    pthread_mutex_destroy(&run.mu);
    pthread_cond_destroy(&run.cv);
    return rc;
}

static double be_pct(double *v, int n, int pct)
{
    bench_sort(v, n);
    return v[(n - 1) * pct / 100];
}

struct be_level {
    int c;
    double agg_tok_s, per_seq_tok_s, ttft_p50, ttft_p95, ttft_cold, ttft_warm;
    double prompt_tok_s;   /* uncached prompt tokens / the last first token's time */
    long cached_tokens;
    int mismatches;
    double sched_pct, host_pct, step_ms;
    double decode_step_ms, decode_rows; /* mean time and rows of the decode-only steps */
    uint64_t preemptions;
    uint64_t kernel_switches;
};

static int be_measure(struct llm_model *m, const struct be_opts *o, int c, struct be_level *out)
{
    const int n_vocab = llm_model_hparams(m)->n_vocab;
    const int n_req = c + 2; /* the concurrent ones, then cold and warm */
    char err[256];
    int rc = 1;
    struct engine *e = engine_new(&o->ep, err, sizeof err);
    int32_t **prompts = calloc((size_t)n_req, sizeof *prompts);
    struct be_seq *seqs = calloc((size_t)n_req, sizeof *seqs);
    double *ttft = calloc((size_t)c, sizeof *ttft);
    if (!e || !prompts || !seqs || !ttft) {
        fprintf(stderr, "bench-engine: %s\n", e ? "out of memory" : err);
        goto done;
    }
    if (engine_add_model(e, m, "bench", err, sizeof err) < 0 ||
        engine_start(e, err, sizeof err) < 0) {
        fprintf(stderr, "bench-engine: %s\n", err);
        goto done;
    }
    for (int i = 0; i < n_req; i++) {
        prompts[i] = malloc((size_t)o->n_prompt * sizeof(int32_t));
        seqs[i].tok = malloc((size_t)o->n_gen * sizeof(int32_t));
        seqs[i].t = malloc((size_t)o->n_gen * sizeof(double));
        if (!prompts[i] || !seqs[i].tok || !seqs[i].t) {
            fprintf(stderr, "bench-engine: out of memory\n");
            goto done;
        }
        be_prompt(o, c, i, n_vocab, prompts[i]);
    }
    /* untimed warm-up: pages the weights in */
    if (be_run(e, o, &prompts[c], 1, 2, &seqs[c]))
        goto done;
    engine_free(e);
    if (!(e = engine_new(&o->ep, err, sizeof err)) ||
        engine_add_model(e, m, "bench", err, sizeof err) < 0 ||
        engine_start(e, err, sizeof err) < 0) {
        fprintf(stderr, "bench-engine: %s\n", err);
        goto done;
    }
    *out = (struct be_level){ .c = c, .mismatches = -1 };
    if (o->shared_prefix) {
        struct be_opts first = *o; /* the warm prompt's first turn: the prefix alone */
        first.n_prompt = o->shared_prefix;
        if (be_run(e, o, &prompts[c], 1, 1, &seqs[c]) ||
            (o->follow_up && be_run(e, &first, &prompts[c + 1], 1, 1, &seqs[c + 1])) ||
            be_run(e, o, &prompts[c + 1], 1, 1, &seqs[c + 1]))
            goto done;
        out->ttft_cold = seqs[c].ttft_ms;
        out->ttft_warm = seqs[c + 1].ttft_ms;
    }
    struct engine_stats st0, st1;
    engine_stats(e, &st0);
    if (be_run(e, o, prompts, c, o->n_gen, seqs))
        goto done;
    /* decode window: from the moment every sequence has its first token */
    double t_all = 0, t_end = 0;
    for (int i = 0; i < c; i++) {
        t_all = seqs[i].t[0] > t_all ? seqs[i].t[0] : t_all;
        t_end = seqs[i].t[seqs[i].n - 1] > t_end ? seqs[i].t[seqs[i].n - 1] : t_end;
        ttft[i] = seqs[i].ttft_ms;
        out->cached_tokens += seqs[i].cached_tokens;
    }
    long in_window = 0;
    for (int i = 0; i < c; i++)
        for (int k = 0; k < seqs[i].n; k++)
            in_window += seqs[i].t[k] > t_all;
    out->agg_tok_s = t_end > t_all ? (double)in_window / (t_end - t_all) : 0;
    out->per_seq_tok_s = out->agg_tok_s / c;
    /* prompt throughput: every prompt goes in at once, so the last first
     * token closes the prefill of all of them */
    double ttft_max = 0;
    for (int i = 0; i < c; i++)
        ttft_max = ttft[i] > ttft_max ? ttft[i] : ttft_max;
    out->prompt_tok_s = ttft_max > 0
        ? (double)((long)c * o->n_prompt - out->cached_tokens) / (ttft_max / 1e3) : 0;
    out->ttft_p50 = be_pct(ttft, c, 50);
    out->ttft_p95 = be_pct(ttft, c, 95);
    /* the stats trail the last final event by the end of its step */
    for (int tries = 0; tries < 1000; tries++) {
        engine_stats(e, &st1);
        if (!st1.running && !st1.waiting)
            break;
        struct timespec ts = { 0, 1000000 };
        nanosleep(&ts, NULL);
    }
    const double step_ms = st1.step_ms - st0.step_ms, fwd_ms = st1.forward_ms - st0.forward_ms;
    const uint64_t steps = st1.steps - st0.steps;
    out->sched_pct = step_ms > 0 ? 100.0 * (st1.sched_ms - st0.sched_ms) / step_ms : 0;
    out->host_pct = step_ms > 0 ? 100.0 * (step_ms - fwd_ms) / step_ms : 0;
    out->step_ms = steps ? step_ms / (double)steps : 0;
    const uint64_t dsteps = st1.decode_steps - st0.decode_steps;
    out->decode_step_ms = dsteps ? (st1.decode_step_ms - st0.decode_step_ms) / (double)dsteps : 0;
    out->decode_rows = dsteps ? (double)(st1.decode_rows - st0.decode_rows) / (double)dsteps : 0;
    out->preemptions = st1.preemptions - st0.preemptions;
    out->kernel_switches = st1.kernel_switches - st0.kernel_switches;
    if (o->verify) {
        out->mismatches = 0;
        struct be_seq solo = { .tok = seqs[c].tok, .t = seqs[c].t };
        for (int i = 0; i < c; i++) {
            if (be_run(e, o, &prompts[i], 1, o->n_gen, &solo))
                goto done;
            out->mismatches += solo.n != seqs[i].n ||
                               memcmp(solo.tok, seqs[i].tok, (size_t)solo.n * sizeof(int32_t));
        }
    }
    rc = 0;
done:
    engine_free(e);
    for (int i = 0; prompts && seqs && i < n_req; i++) {
        free(prompts[i]);
        free(seqs[i].tok);
        free(seqs[i].t);
    }
    free(prompts);
    free(seqs);
    free(ttft);
    return rc;
}

int cli_bench_engine(int argc, char **argv)
{
    struct be_opts o;
    int rc = be_parse(argc, argv, &o);
    if (rc)
        return rc < 0 ? 0 : rc;
    char err[512];
    struct llm_model *m = llm_model_load(o.model, NULL, err, sizeof err);
    if (!m) {
        fprintf(stderr, "bench-engine: %s\n", err);
        return 1;
    }
    if (!o.json)
        printf("%s: prompt %d (shared %d), generate %d, %s\n\n"
               "%5s %12s %12s %12s %10s %10s %8s %7s %9s %9s%s%s\n", o.model, o.n_prompt,
               o.shared_prefix, o.n_gen, o.ep.deterministic ? "deterministic" : "fastest kernels",
               "conc", "agg tok/s", "seq tok/s", "prompt tok/s", "ttft p50", "ttft p95", "cached", "sched%",
               "step ms", "decode ms", o.shared_prefix ? "  ttft cold  ttft warm" : "",
               o.verify ? "  mismatches" : "");
    for (int i = 0; i < o.n_levels && !rc; i++) {
        struct be_level L;
        if (be_measure(m, &o, o.levels[i], &L)) {
            rc = 1;
            break;
        }
        if (o.json) {
            printf("{\"concurrency\":%d,\"aggregate_tok_s\":%.2f,\"per_seq_tok_s\":%.2f,"
                   "\"prompt_tok_s\":%.1f,\"ttft_ms_p50\":%.2f,\"ttft_ms_p95\":%.2f,\"cached_tokens\":%ld,"
                   "\"sched_overhead_pct\":%.3f,\"outside_forward_pct\":%.3f,\"step_ms\":%.3f,"
                   "\"decode_step_ms\":%.3f,\"decode_rows\":%.2f,"
                   "\"preemptions\":%llu,\"kernel_switches\":%llu",
                   L.c, L.agg_tok_s, L.per_seq_tok_s, L.prompt_tok_s, L.ttft_p50, L.ttft_p95, L.cached_tokens,
                   L.sched_pct, L.host_pct, L.step_ms, L.decode_step_ms, L.decode_rows,
                   (unsigned long long)L.preemptions, (unsigned long long)L.kernel_switches);
            if (o.shared_prefix)
                printf(",\"ttft_ms_cold\":%.2f,\"ttft_ms_warm\":%.2f", L.ttft_cold, L.ttft_warm);
            if (o.verify)
                printf(",\"mismatches\":%d", L.mismatches);
            printf("}\n");
        } else {
            printf("%5d %12.2f %12.2f %12.1f %10.1f %10.1f %8ld %7.2f %9.2f %9.2f", L.c,
                   L.agg_tok_s, L.per_seq_tok_s, L.prompt_tok_s, L.ttft_p50, L.ttft_p95, L.cached_tokens, L.sched_pct,
                   L.step_ms, L.decode_step_ms);
            if (o.shared_prefix)
                printf(" %10.1f %10.1f", L.ttft_cold, L.ttft_warm);
            if (o.verify)
                printf(" %11d", L.mismatches);
            printf("\n");
        }
        fflush(stdout);
    }
    llm_model_free(m);
    return rc;
}
