/* embed.c - `omniserve embed`, `omniserve rerank` and `omniserve bench-embed`:
 * the embedding service (src/embed) in-process, as the server runs it -
 * encoder models through the batcher, decoder models as engine sequences.
 * bench-embed measures inputs/s and tokens/s per batch size (one job of B
 * inputs of T tokens each) and, with --url, the same inputs as one
 * /v1/embeddings request to a running server. Results on stdout (JSON with
 * --json), progress on stderr. */
#include "src/cli/args.h"
#include "src/cli/cli.h"

#include "llm/model.h"
#include "src/core/compute.h"
#include "src/core/gguf.h"
#include "src/core/omni.h"
#include "src/embed/embed.h"
#include "src/engine/engine.h"

#include <cjson/cJSON.h>
#include <curl/curl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define EMB_MAX_BATCHES 16

struct emb_opts {
    const char *cmd;
    const char *model;
    int pooling;              /* -1: from the file */
    int normalize;            /* -1: default (true) */
    bool json;
    int threads;              /* 0: physical cores */
    const char *query;        /* rerank */
    int batches[EMB_MAX_BATCHES];
    int n_batches;
    int tokens;               /* bench: tokens per input */
    int rounds;               /* bench: measured runs per batch size */
    int max_batch_tokens;     /* engine step budget (decoders) */
    const char *url;          /* bench: a server to compare with */
};

/* The service with the one model of -m, and what it needs. */
struct emb_rt {
    struct compute *budget;
    struct engine *engine;
    struct embed_service *svc;
    int model;
};

static void rt_free(struct emb_rt *rt)
{
    engine_free(rt->engine); /* before the service: its models live there */
    embed_service_free(rt->svc);
    compute_free(rt->budget);
}

static int rt_open(const struct emb_opts *o, enum embed_role role, int batch_inputs,
                   struct emb_rt *rt)
{
    char err[512];
    memset(rt, 0, sizeof *rt);
    struct compute_params cp = compute_default_params();
    cp.n_threads = o->threads;
    struct embed_params sp = embed_default_params();
    if (batch_inputs > sp.max_batch_inputs)
        sp.max_batch_inputs = batch_inputs;
    if (batch_inputs > sp.window)
        sp.window = batch_inputs;
    if ((long)batch_inputs * (o->tokens > 0 ? o->tokens + 2 : 512) > sp.max_batch_tokens)
        sp.max_batch_tokens = batch_inputs * (o->tokens > 0 ? o->tokens + 2 : 512);
    int enc;
    if (!(rt->budget = compute_new(&cp, err, sizeof err)) ||
        !(rt->svc = embed_service_new(&sp, err, sizeof err)) ||
        (enc = embed_file_is_encoder(o->model, err, sizeof err)) < 0)
        goto fail;
    if (!enc) {
        struct engine_params ep = engine_default_params();
        ep.compute = rt->budget;
        ep.max_seqs = batch_inputs > ep.max_seqs ? batch_inputs : ep.max_seqs;
        if (o->max_batch_tokens)
            ep.max_batch_tokens = o->max_batch_tokens;
        if (!(rt->engine = engine_new(&ep, err, sizeof err)))
            goto fail;
    }
    if ((rt->model = embed_service_load(rt->svc, o->model, role, rt->engine, rt->budget, NULL,
                                        o->pooling, o->normalize, err, sizeof err)) < 0 ||
        (rt->engine && engine_start(rt->engine, err, sizeof err) < 0) ||
        embed_service_start(rt->svc, err, sizeof err) < 0)
        goto fail;
    if (embed_service_model(rt->svc, rt->model)->role != role) {
        snprintf(err, sizeof err, "%s is a %s model", o->model,
                 role == EMBED_ROLE_EMBED ? "rerank (pooling rank)" : "embedding");
        goto fail;
    }
    return 0;
fail:
    fprintf(stderr, "%s: %s\n", o->cmd, err);
    rt_free(rt);
    return -1;
}

/* Blocking run of a job: on_done signals. */
struct waiter {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool done;
};

static void on_done(void *user, struct embed_job *j)
{
    (void)j;
    struct waiter *w = user;
    pthread_mutex_lock(&w->mu);
    w->done = true;
    pthread_cond_signal(&w->cv);
    pthread_mutex_unlock(&w->mu);
}

static int run_job(const char *cmd, struct embed_job *j)
{
    struct waiter w = { PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, false };
    char err[512];
    if (embed_job_submit(j, on_done, &w, err, sizeof err) < 0) {
        fprintf(stderr, "%s: %s\n", cmd, err);
        return -1;
    }
    pthread_mutex_lock(&w.mu);
    while (!w.done)
        pthread_cond_wait(&w.cv, &w.mu);
    pthread_mutex_unlock(&w.mu);
    if (embed_job_error(j)) {
        fprintf(stderr, "%s: %s\n", cmd, embed_job_error(j));
        return -1;
    }
    return 0;
}

static int parse_common(int argc, char **argv, struct emb_opts *o, const char *usage,
                        int *first_text)
{
    *first_text = argc;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        long n;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            fputs(usage, stdout);
            return 1;
        }
        if (!strcmp(a, "--json")) {
            o->json = true;
        } else if (!strcmp(a, "--normalize")) {
            o->normalize = 1;
        } else if (!strcmp(a, "--no-normalize")) {
            o->normalize = 0;
        } else if (a[0] == '-' && a[1] && i + 1 >= argc) {
            fprintf(stderr, "%s: %s: unknown option or missing value\n%s", o->cmd, a, usage);
            return 2;
        } else if (!strcmp(a, "-m") || !strcmp(a, "--model")) {
            o->model = argv[++i];
        } else if (!strcmp(a, "--pooling")) {
            o->pooling = embed_pooling_from_name(argv[++i]);
            if (o->pooling != EMBED_POOL_CLS && o->pooling != EMBED_POOL_MEAN &&
                o->pooling != EMBED_POOL_LAST) {
                fprintf(stderr, "%s: --pooling expects cls, mean or last; got '%s'\n", o->cmd,
                        argv[i]);
                return 2;
            }
        } else if (!strcmp(a, "--threads") || !strcmp(a, "-t")) {
            if (cli_long(o->cmd, a, argv[++i], 1, 1024, &n))
                return 2;
            o->threads = (int)n;
        } else if (!strcmp(a, "--query") || !strcmp(a, "-q")) {
            o->query = argv[++i];
        } else if (!strcmp(a, "--tokens")) {
            if (cli_long(o->cmd, a, argv[++i], 1, 1 << 20, &n))
                return 2;
            o->tokens = (int)n;
        } else if (!strcmp(a, "--rounds")) {
            if (cli_long(o->cmd, a, argv[++i], 1, 1000, &n))
                return 2;
            o->rounds = (int)n;
        } else if (!strcmp(a, "--max-batch-tokens")) {
            if (cli_long(o->cmd, a, argv[++i], 1, 65536, &n))
                return 2;
            o->max_batch_tokens = (int)n;
        } else if (!strcmp(a, "--batch")) {
            o->n_batches = cli_int_list(argv[++i], 1, 4096, o->batches, EMB_MAX_BATCHES);
            if (o->n_batches < 1) {
                fprintf(stderr, "%s: --batch expects sizes 1..4096 like 1,8,32; got '%s'\n",
                        o->cmd, argv[i]);
                return 2;
            }
        } else if (!strcmp(a, "--url")) {
            o->url = argv[++i];
        } else if (!strcmp(a, "--")) {
            *first_text = i + 1;
            break;
        } else if (a[0] == '-' && a[1]) {
            fprintf(stderr, "%s: unknown option '%s'\n%s", o->cmd, a, usage);
            return 2;
        } else {
            *first_text = i;
            break;
        }
    }
    if (!o->model) {
        fprintf(stderr, "%s: -m FILE.gguf is required\n%s", o->cmd, usage);
        return 2;
    }
    return 0;
}

/* Texts: argv[first..] or the lines of stdin. */
static char **read_texts(int argc, char **argv, int first, int *n)
{
    if (first < argc) {
        *n = argc - first;
        return argv + first;
    }
    int cap = 64;
    char **v = malloc((size_t)cap * sizeof *v), *line = NULL;
    size_t lcap = 0;
    ssize_t len;
    *n = 0;
    while (v && (len = getline(&line, &lcap, stdin)) >= 0) {
        while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r'))
            line[--len] = 0;
        if (!len)
            continue;
        if (*n == cap) {
            char **nv = realloc(v, (size_t)(cap *= 2) * sizeof *nv);
            if (!nv)
                break;
            v = nv;
        }
        if (!(v[*n] = strdup(line)))
            break;
        (*n)++;
    }
    free(line);
    return v;
}

static const char embed_usage[] =
    "usage: omniserve embed -m FILE.gguf [--pooling cls|mean|last] [--normalize|--no-normalize]\n"
    "                       [--json] [--threads N] TEXT...\n"
    "  one vector per TEXT (or per line of stdin when no TEXT): floats separated by spaces,\n"
    "  one line each; --json: {\"model\", \"data\": [{\"index\", \"tokens\", \"embedding\"}]}\n";

int cli_embed(int argc, char **argv)
{
    struct emb_opts o = { .cmd = "embed", .pooling = -1, .normalize = -1 };
    int first, rc = parse_common(argc, argv, &o, embed_usage, &first);
    if (rc)
        return rc == 1 ? 0 : rc;
    int n = 0;
    char **texts = read_texts(argc, argv, first, &n);
    if (!texts || n < 1) {
        fprintf(stderr, "embed: no text (give TEXT arguments or lines on stdin)\n");
        if (texts != argv + first)
            free(texts);
        return 2;
    }
    struct emb_rt rt;
    rc = 1;
    struct embed_job *j = NULL;
    if (rt_open(&o, EMBED_ROLE_EMBED, n < 64 ? n : 64, &rt) < 0)
        goto out;
    char err[512];
    if (!(j = embed_job_new(rt.svc, rt.model, n))) {
        fprintf(stderr, "embed: out of memory\n");
        goto close;
    }
    for (int i = 0; i < n; i++)
        if (embed_job_set_text(j, i, texts[i], NULL, err, sizeof err) < 0) {
            fprintf(stderr, "embed: text %d: %s\n", i + 1, err);
            goto close;
        }
    if (run_job("embed", j) < 0)
        goto close;
    const struct embed_model_info *mi = embed_service_model(rt.svc, rt.model);
    const int d = embed_job_n_out(j);
    fprintf(stderr, "embed: %d input(s), %d tokens, %d dims (%s, %s pooling%s)\n", n,
            embed_job_tokens(j), d, mi->arch, embed_pooling_name(mi->pooling),
            mi->normalize ? ", normalized" : "");
    if (o.json) {
        printf("{\"model\":\"%s\",\"dimensions\":%d,\"data\":[", mi->name, d);
        for (int i = 0; i < n; i++) {
            const float *v = embed_job_output(j, i);
            printf("%s{\"index\":%d,\"tokens\":%d,\"embedding\":[", i ? "," : "", i,
                   embed_job_input_tokens(j, i));
            for (int k = 0; k < d; k++)
                printf(k ? ",%.9g" : "%.9g", (double)v[k]);
            printf("]}");
        }
        printf("]}\n");
    } else {
        for (int i = 0; i < n; i++) {
            const float *v = embed_job_output(j, i);
            for (int k = 0; k < d; k++)
                printf(k ? " %.9g" : "%.9g", (double)v[k]);
            printf("\n");
        }
    }
    rc = 0;
close:
    embed_job_free(j);
    rt_free(&rt);
out:
    if (texts != argv + first) {
        for (int i = 0; i < n; i++)
            free(texts[i]);
        free(texts);
    }
    return rc;
}

static const char rerank_usage[] =
    "usage: omniserve rerank -m FILE.gguf --query Q [--json] [--threads N] DOC...\n"
    "  relevance of each DOC (or each line of stdin) to Q, 0..1, best first:\n"
    "  'score<TAB>index<TAB>document' lines; --json: {\"results\": [{\"index\", \"relevance_score\"}]}\n";

struct scored {
    int index;
    float score;
};

static int cmp_scored(const void *x, const void *y)
{
    const struct scored *a = x, *b = y;
    return a->score != b->score ? (a->score < b->score ? 1 : -1) : a->index - b->index;
}

int cli_rerank(int argc, char **argv)
{
    struct emb_opts o = { .cmd = "rerank", .pooling = -1, .normalize = -1 };
    int first, rc = parse_common(argc, argv, &o, rerank_usage, &first);
    if (rc)
        return rc == 1 ? 0 : rc;
    if (!o.query) {
        fprintf(stderr, "rerank: --query Q is required\n%s", rerank_usage);
        return 2;
    }
    int n = 0;
    char **docs = read_texts(argc, argv, first, &n);
    if (!docs || n < 1) {
        fprintf(stderr, "rerank: no document (give DOC arguments or lines on stdin)\n");
        if (docs != argv + first)
            free(docs);
        return 2;
    }
    struct emb_rt rt;
    struct embed_job *j = NULL;
    struct scored *s = NULL;
    rc = 1;
    if (rt_open(&o, EMBED_ROLE_RERANK, n < 64 ? n : 64, &rt) < 0)
        goto out;
    char err[512];
    if (!(j = embed_job_new(rt.svc, rt.model, n)) || !(s = malloc((size_t)n * sizeof *s))) {
        fprintf(stderr, "rerank: out of memory\n");
        goto close;
    }
    for (int i = 0; i < n; i++)
        if (embed_job_set_text(j, i, o.query, docs[i], err, sizeof err) < 0) {
            fprintf(stderr, "rerank: document %d: %s\n", i + 1, err);
            goto close;
        }
    if (run_job("rerank", j) < 0)
        goto close;
    for (int i = 0; i < n; i++)
        s[i] = (struct scored){ i, embed_job_output(j, i)[0] };
    qsort(s, (size_t)n, sizeof *s, cmp_scored);
    if (o.json) {
        printf("{\"model\":\"%s\",\"results\":[", embed_service_model(rt.svc, rt.model)->name);
        for (int i = 0; i < n; i++)
            printf("%s{\"index\":%d,\"relevance_score\":%.9g}", i ? "," : "", s[i].index,
                   (double)s[i].score);
        printf("]}\n");
    } else {
        for (int i = 0; i < n; i++)
            printf("%.6f\t%d\t%s\n", (double)s[i].score, s[i].index, docs[s[i].index]);
    }
    rc = 0;
close:
    free(s);
    embed_job_free(j);
    rt_free(&rt);
out:
    if (docs != argv + first) {
        for (int i = 0; i < n; i++)
            free(docs[i]);
        free(docs);
    }
    return rc;
}

// ---- bench-embed ------------------------------------------------------------------

static const char bench_usage[] =
    "usage: omniserve bench-embed -m FILE.gguf [--batch 1,8,32] [--tokens 128] [--rounds N]\n"
    "                             [--threads N] [--max-batch-tokens N] [--url URL] [--json]\n"
    "  inputs/s and tokens/s for jobs of B inputs of T tokens each (random ids of the\n"
    "  vocabulary), through the embedding service as the server runs it. --url: the same\n"
    "  inputs of the largest batch as one POST URL/v1/embeddings to a running server\n"
    "  (serve --embedding-model FILE), timed the same way.\n";

/* Input i of a bench: T token ids spread over the vocabulary (ids 0..99 are
 * left out: control tokens of small vocabularies live there). */
static void bench_ids(int32_t *ids, int t, int n_vocab, uint64_t seed)
{
    const int lo = n_vocab > 200 ? 100 : 0;
    for (int k = 0; k < t; k++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        ids[k] = lo + (int32_t)((seed >> 33) % (uint64_t)(n_vocab - lo));
    }
}

static int model_vocab(const struct emb_rt *rt, const char *path)
{
    (void)rt;
    char err[256];
    struct gguf *g = gguf_open(path, err, sizeof err);
    if (!g)
        return -1;
    enum gguf_type t;
    uint64_t n = 0;
    int rc = gguf_get_arr(g, "tokenizer.ggml.tokens", &t, &n);
    gguf_free(g);
    return rc < 0 || n < 2 || n > INT32_MAX ? -1 : (int)n;
}

static size_t curl_sink(char *p, size_t sz, size_t n, void *user)
{
    (void)p;
    *(size_t *)user += sz * n;
    return sz * n;
}

/* Seconds of one POST of body to url; -1 on failure (message printed). */
static double post_seconds(const char *url, const char *body, long *status)
{
    CURL *c = curl_easy_init();
    if (!c)
        return -1;
    struct curl_slist *h = curl_slist_append(NULL, "Content-Type: application/json");
    size_t got = 0;
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
    curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, curl_sink);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &got);
    const double t0 = omni_time_s();
    CURLcode rc = curl_easy_perform(c);
    const double dt = omni_time_s() - t0;
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, status);
    curl_slist_free_all(h);
    curl_easy_cleanup(c);
    if (rc != CURLE_OK) {
        fprintf(stderr, "bench-embed: %s: %s\n", url, curl_easy_strerror(rc));
        return -1;
    }
    return dt;
}

int cli_bench_embed(int argc, char **argv)
{
    struct emb_opts o = { .cmd = "bench-embed", .pooling = -1, .normalize = -1, .tokens = 128,
                          .rounds = 3, .batches = { 1, 8, 32 }, .n_batches = 3 };
    int first, rc = parse_common(argc, argv, &o, bench_usage, &first);
    if (rc)
        return rc == 1 ? 0 : rc;
    int max_b = 0;
    for (int i = 0; i < o.n_batches; i++)
        max_b = o.batches[i] > max_b ? o.batches[i] : max_b;
    struct emb_rt rt;
    if (rt_open(&o, EMBED_ROLE_EMBED, max_b, &rt) < 0)
        return 1;
    const struct embed_model_info *mi = embed_service_model(rt.svc, rt.model);
    const int n_vocab = model_vocab(&rt, o.model);
    int32_t *ids = malloc((size_t)o.tokens * sizeof *ids);
    double ips[EMB_MAX_BATCHES] = { 0 };
    rc = 1;
    if (n_vocab < 2 || !ids) {
        fprintf(stderr, "bench-embed: cannot read the vocabulary of %s\n", o.model);
        goto out;
    }
    if (o.tokens > mi->n_ctx) {
        fprintf(stderr, "bench-embed: --tokens %d is over the model's context of %d\n", o.tokens,
                mi->n_ctx);
        goto out;
    }
    fprintf(stderr, "bench-embed: %s (%s, %s, %d dims), %d tokens per input, %d threads\n",
            mi->name, mi->arch, mi->decoder ? "engine" : "encoder batcher", mi->n_embd, o.tokens,
            compute_size(rt.budget));
    for (int bi = 0; bi < o.n_batches; bi++) {
        const int b = o.batches[bi];
        double best = 1e30;
        /* one warm-up run, then the best of --rounds (least disturbed by other load) */
        for (int round = 0; round <= o.rounds; round++) {
            struct embed_job *j = embed_job_new(rt.svc, rt.model, b);
            char err[512];
            if (!j)
                goto out;
            for (int i = 0; i < b; i++) {
                bench_ids(ids, o.tokens, n_vocab, (uint64_t)(i + 1) * 7919 + (uint64_t)round);
                if (embed_job_set_tokens(j, i, ids, o.tokens, err, sizeof err) < 0) {
                    fprintf(stderr, "bench-embed: %s\n", err);
                    embed_job_free(j);
                    goto out;
                }
            }
            const double t0 = omni_time_s();
            const int r = run_job("bench-embed", j);
            const double dt = omni_time_s() - t0;
            embed_job_free(j);
            if (r < 0)
                goto out;
            if (round > 0 && dt < best)
                best = dt;
        }
        ips[bi] = b / best;
        fprintf(stderr, "  batch %4d: %8.1f inputs/s %10.0f tokens/s  (%.1f ms per batch)\n", b,
                ips[bi], ips[bi] * o.tokens, best * 1e3);
    }
    /* the same inputs through a running server */
    double server_ips = 0, server_inproc = 0;
    if (o.url) {
        char url[1024];
        snprintf(url, sizeof url, "%s/v1/embeddings", o.url);
        cJSON *root = cJSON_CreateObject(), *in = cJSON_AddArrayToObject(root, "input");
        for (int i = 0; i < max_b; i++) {
            bench_ids(ids, o.tokens, n_vocab, (uint64_t)(i + 1) * 7919 + 1);
            cJSON_AddItemToArray(in, cJSON_CreateIntArray(ids, o.tokens));
        }
        char *body = cJSON_PrintUnformatted(root);
        cJSON_Delete(root);
        double best = 1e30;
        long status = 0;
        for (int round = 0; body && round <= o.rounds; round++) {
            const double dt = post_seconds(url, body, &status);
            if (dt < 0 || status != 200) {
                if (dt >= 0)
                    fprintf(stderr, "bench-embed: %s answered %ld\n", url, status);
                free(body);
                goto out;
            }
            if (round > 0 && dt < best)
                best = dt;
        }
        free(body);
        server_ips = max_b / best;
        for (int bi = 0; bi < o.n_batches; bi++)
            if (o.batches[bi] == max_b)
                server_inproc = ips[bi];
        fprintf(stderr, "  server %4d: %8.1f inputs/s (%.0f%% of in-process)\n", max_b,
                server_ips, 100 * server_ips / server_inproc);
    }
    double one = 0;
    for (int bi = 0; bi < o.n_batches; bi++)
        if (o.batches[bi] == 1)
            one = ips[bi];
    if (o.json) {
        printf("{\"model\":\"%s\",\"arch\":\"%s\",\"path\":\"%s\",\"tokens\":%d,\"threads\":%d,"
               "\"results\":[", mi->name, mi->arch, mi->decoder ? "engine" : "encoder",
               o.tokens, compute_size(rt.budget));
        for (int bi = 0; bi < o.n_batches; bi++) {
            printf("%s{\"batch\":%d,\"inputs_per_s\":%.2f,\"tokens_per_s\":%.1f,"
                   "\"vs_batch_1\":", bi ? "," : "", o.batches[bi], ips[bi], ips[bi] * o.tokens);
            if (one > 0)
                printf("%.3f}", ips[bi] / one);
            else
                printf("null}");
        }
        printf("]");
        if (o.url)
            printf(",\"server\":{\"batch\":%d,\"inputs_per_s\":%.2f,\"ratio_to_in_process\":%.3f}",
                   max_b, server_ips, server_ips / server_inproc);
        printf("}\n");
    } else {
        for (int bi = 0; bi < o.n_batches; bi++)
            printf("batch %d\t%.2f inputs/s\t%.1f tokens/s\n", o.batches[bi], ips[bi],
                   ips[bi] * o.tokens);
        if (o.url)
            printf("server batch %d\t%.2f inputs/s\t%.3f of in-process\n", max_b, server_ips,
                   server_ips / server_inproc);
    }
    rc = 0;
out:
    free(ids);
    rt_free(&rt);
    return rc;
}
