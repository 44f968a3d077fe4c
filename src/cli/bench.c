/* bench.c - `omniserve bench -m FILE.gguf`: prompt and generation speed.
 *
 * Each repetition runs p seeded random token ids as prefill (one batch, or
 * chunks of at most --batch tokens), then n single-token decode steps fed by
 * the argmax of the previous logits; only llm_forward calls are timed. An
 * untimed warm-up (one prefill chunk, one decode step) first pages the mapped
 * weights in. The median over --reps is printed for people and as one JSON
 * line for scripts. With --batch-decode B, each repetition also prefills B
 * sequences the same way and times n decode steps of B tokens (one per
 * sequence, all wanting logits): the aggregate tok/s of continuous batching,
 * reported beside its ratio to the single-sequence decode speed.
 * Every logit row is checked to be finite, so a broken kernel fails loudly.
 *
 * Before the runs of each thread count the machine's streaming read
 * bandwidth is measured with that many threads (bench_read_bandwidth3, 1 GiB:
 * the best of every vector read form membw.h has - vec, vec_pf, vec_4s and,
 * at the AVX-512 levels, vec_4s_512; the simple scalar sum loop's figure
 * beside it as bandwidth_scalar_gb_s, the reference it must not out-read by
 * much), and generation is reported as bandwidth_fraction: the weight bytes one
 * decode step reads (bench_decode_bytes: the k chosen experts of a MoE
 * layer, not all) times tg tok/s over that bandwidth - how close decode runs
 * to the memory limit; decode_bytes_read is the same counted during the
 * decode steps (llm_ctx_weight_bytes_read per step). -t takes a list (1,2,4,8,16):
 * the model is loaded once and each thread count prints its own lines. */
#include "src/cli/cli.h"
#include "src/cli/args.h"
#include "src/cli/bench_util.h"
#include "llm/model.h"
#include "llm/model_dev.h"
#include "src/core/cpu.h"
#include "src/core/gguf.h"
#include "src/core/omni.h"
#include "src/core/tensor.h"
#include "src/core/threadpool.h"

#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BENCH_KV_BLOCK 16
#define BENCH_MAX_THREAD_COUNTS 16
#define BENCH_BW_BYTES ((size_t)1 << 30)

struct bench_opts {
    const char *model;
    int n_prompt;
    int n_gen;
    int n_threads;
    int threads[BENCH_MAX_THREAD_COUNTS]; /* -t LIST */
    int n_thread_counts;
    int reps;
    int batch;           /* max tokens per prefill forward */
    int batch_decode;    /* sequences decoded together (0: off) */
    uint64_t seed;
    bool json_only;
    bool no_bandwidth;   /* skip the bandwidth measurement */
    const char *device;  /* --device cuda[:N]: llm_forward on that GPU (llm/model_dev.h) */
};

struct bench_result {
    double pp_tok_s, tg_tok_s;
    double bd_tok_s;     /* aggregate over batch_decode sequences */
    uint64_t tg_bytes;   /* weight bytes the decode steps' products read, per step */
};

static void bench_usage(FILE *f)
{
    fprintf(f,
            "usage: omniserve bench -m FILE.gguf [options]\n"
            "  -m FILE.gguf      model to load\n"
            "  -p N              prompt tokens, run as prefill (default 128)\n"
            "  -n N              generated tokens, one decode step each (default 64)\n"
            "  --threads N[,N..] worker threads, or a list run in turn (default: physical\n"
            "                    cores, %d here)\n"
            "  --no-bandwidth    skip measuring the read bandwidth (no bandwidth_fraction)\n"
            "  --reps R          repetitions; the median is reported (default 3)\n"
            "  --batch N         at most N tokens per prefill forward (default 512)\n"
            "  --batch-decode B  also decode B sequences together (aggregate tok/s)\n"
            "  --seed N          seed of the random prompt (default 42)\n"
            "  --device D        cpu (default), cuda or cuda:N: the forward on that GPU,\n"
            "                    logits copied back each step\n"
            "  --json            print only the JSON line on stdout\n",
            omni_physical_cores());
}

/* 0 on success, 2 on bad usage, -1 when --help was printed. */
static int bench_parse(int argc, char **argv, struct bench_opts *o)
{
    *o = (struct bench_opts){ .n_prompt = 128, .n_gen = 64, .n_threads = omni_physical_cores(),
                              .reps = 3, .batch = 512, .seed = 42 };
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            bench_usage(stdout);
            return -1;
        }
        if (!strcmp(a, "--json")) {
            o->json_only = true;
            continue;
        }
        if (!strcmp(a, "--no-bandwidth")) {
            o->no_bandwidth = true;
            continue;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "bench: %s needs a value (see --help)\n", a);
            return 2;
        }
        const char *v = argv[++i];
        long n;
        if (!strcmp(a, "-m") || !strcmp(a, "--model")) {
            o->model = v;
            continue;
        }
        if (!strcmp(a, "-p")) {
            if (cli_long("bench", a, v, 1, 1 << 20, &n)) return 2;
            o->n_prompt = (int)n;
        } else if (!strcmp(a, "-n")) {
            if (cli_long("bench", a, v, 0, 1 << 20, &n)) return 2;
            o->n_gen = (int)n;
        } else if (!strcmp(a, "--threads") || !strcmp(a, "-t")) {
            int k = cli_int_list(v, 1, 1024, o->threads, BENCH_MAX_THREAD_COUNTS);
            if (k < 0) {
                fprintf(stderr, "bench: %s: '%s' is not a thread count or a list like 1,2,4 "
                        "(1..1024, at most %d)\n", a, v, BENCH_MAX_THREAD_COUNTS);
                return 2;
            }
            o->n_thread_counts = k;
        } else if (!strcmp(a, "--reps") || !strcmp(a, "-r")) {
            if (cli_long("bench", a, v, 1, 1000, &n)) return 2;
            o->reps = (int)n;
        } else if (!strcmp(a, "--batch") || !strcmp(a, "-b")) {
            if (cli_long("bench", a, v, 1, 1 << 16, &n)) return 2;
            o->batch = (int)n;
        } else if (!strcmp(a, "--batch-decode")) {
            if (cli_long("bench", a, v, 0, 256, &n)) return 2;
            o->batch_decode = (int)n;
        } else if (!strcmp(a, "--seed")) {
            if (cli_long("bench", a, v, 0, LONG_MAX, &n)) return 2;
            o->seed = (uint64_t)n;
        } else if (!strcmp(a, "--device")) {
            o->device = strcmp(v, "cpu") ? v : NULL;
        } else {
            fprintf(stderr, "bench: unknown option '%s' (see --help)\n", a);
            return 2;
        }
    }
    if (!o->model) {
        fprintf(stderr, "bench: -m FILE.gguf is required (see --help)\n");
        return 2;
    }
    if (o->n_thread_counts == 0) {
        o->threads[0] = o->n_threads;
        o->n_thread_counts = 1;
    }
    return 0;
}

/* Prefill o->n_prompt tokens of sequence s (seq ids: one per token, all s)
 * in chunks of o->batch; logits of the last token. Returns the seconds spent
 * in llm_forward, or -1 with a message on failure. */
static double bench_prefill(struct llm_ctx *ctx, struct llm_kv *kv, const struct llm_seq_view *seqs,
                            const struct bench_opts *o, const int32_t *prompt, float *logits,
                            int32_t *pos, const int32_t *seq_ids)
{
    double t = 0;
    for (int done = 0; done < o->n_prompt;) {
        int n = o->n_prompt - done < o->batch ? o->n_prompt - done : o->batch;
        for (int i = 0; i < n; i++)
            pos[i] = done + i;
        struct llm_batch b = { .n_tokens = n, .token = prompt + done, .pos = pos, .seq = seq_ids };
        double t0 = omni_time_s();
        int rc = llm_forward(ctx, &b, kv, seqs, logits);
        t += omni_time_s() - t0;
        if (rc != 1) {
            fprintf(stderr, "bench: prefill at position %d failed: %s\n", done,
                    rc < 0 ? omni_strerror(rc) : "wrong number of logit rows");
            return -1;
        }
        done += n;
    }
    return t;
}

/* B = o->batch_decode sequences (seqs[0..B-1]) prefilled one after the
 * other (untimed), then o->n_gen steps of one forward with a token of each.
 * bufs: pos/seq/tok (B + max prefill chunk), want (B). 0, or 1 with a
 * message. */
static int bench_batch_decode(struct llm_ctx *ctx, struct llm_kv *kv,
                              const struct llm_seq_view *seqs, const struct bench_opts *o,
                              const int32_t *prompt, int n_vocab, float *logits, int32_t *pos,
                              int32_t *seq_ids, int32_t *tok, bool *want, struct bench_result *r)
{
    const int B = o->batch_decode;
    for (int s = 0; s < B; s++) {
        for (int i = 0; i < o->batch && i < o->n_prompt; i++)
            seq_ids[i] = s;
        if (bench_prefill(ctx, kv, seqs, o, prompt, logits + (size_t)s * n_vocab, pos, seq_ids) < 0)
            return 1;
        tok[s] = bench_argmax_finite(logits + (size_t)s * n_vocab, n_vocab);
    }
    double t = 0;
    for (int i = 0; i < o->n_gen; i++) {
        for (int s = 0; s < B; s++) {
            if (tok[s] < 0) {
                fprintf(stderr, "bench: non-finite logits (NaN or inf) in batch decode\n");
                return 1;
            }
            pos[s] = o->n_prompt + i;
            seq_ids[s] = s;
            want[s] = true;
        }
        struct llm_batch b = { .n_tokens = B, .token = tok, .pos = pos, .seq = seq_ids,
                               .want_logits = want };
        double t0 = omni_time_s();
        int rc = llm_forward(ctx, &b, kv, seqs, logits);
        t += omni_time_s() - t0;
        if (rc != B) {
            fprintf(stderr, "bench: batch decode step %d failed: %s\n", i,
                    rc < 0 ? omni_strerror(rc) : "wrong number of logit rows");
            return 1;
        }
        for (int s = 0; s < B; s++)
            tok[s] = bench_argmax_finite(logits + (size_t)s * n_vocab, n_vocab);
    }
    r->bd_tok_s = o->n_gen ? (double)B * o->n_gen / t : 0;
    return 0;
}

/* One repetition: prefill o->n_prompt tokens in chunks, then o->n_gen decode
 * steps. Returns 0, or 1 with a message on a failed forward or bad logits. */
static int bench_once(struct llm_ctx *ctx, struct llm_kv *kv, const struct llm_seq_view *seq,
                      const struct bench_opts *o, const int32_t *prompt, int n_vocab,
                      float *logits, int32_t *pos, int32_t *zeros, struct bench_result *r)
{
    double t_pp = bench_prefill(ctx, kv, seq, o, prompt, logits, pos, zeros);
    if (t_pp < 0)
        return 1;
    llm_ctx_reset_weight_bytes_read(ctx);
    double t_tg = bench_decode("bench", ctx, kv, seq, bench_argmax_finite(logits, n_vocab),
                               o->n_prompt, o->n_gen, logits, n_vocab, zeros);
    if (t_tg < 0)
        return 1;
    /* counted where the products run: MoE steps count only the experts read */
    r->tg_bytes = o->n_gen ? llm_ctx_weight_bytes_read(ctx) / (uint64_t)o->n_gen : 0;
    r->pp_tok_s = o->n_prompt / t_pp;
    r->tg_tok_s = o->n_gen ? o->n_gen / t_tg : 0;
    return 0;
}

/* JSON string (quotes included); control bytes escaped, UTF-8 passed through. */
static void bench_json_str(FILE *f, const char *s)
{
    fputc('"', f);
    for (const unsigned char *u = (const unsigned char *)s; *u; u++) {
        if (*u == '"' || *u == '\\')
            fprintf(f, "\\%c", *u);
        else if (*u < 0x20)
            fprintf(f, "\\u%04x", *u);
        else
            fputc(*u, f);
    }
    fputc('"', f);
}

/* Tensor counts per ggml type, e.g. {"q5_0": 132, "f32": 121, ...}, in type
 * id order; human form "q5_0 132, f32 121" when json is false. */
static void bench_type_mix(FILE *f, const struct gguf *g, bool json)
{
    int64_t count[GGML_TYPE_COUNT] = { 0 };
    for (int64_t i = 0; i < gguf_n_tensors(g); i++) {
        int t = gguf_tensor_at(g, i)->type;
        if (t >= 0 && t < GGML_TYPE_COUNT)
            count[t]++;
    }
    bool first = true;
    if (json)
        fputc('{', f);
    for (int t = 0; t < GGML_TYPE_COUNT; t++) {
        if (!count[t])
            continue;
        if (json)
            fprintf(f, "%s\"%s\": %lld", first ? "" : ", ", ggml_type_name(t), (long long)count[t]);
        else
            fprintf(f, "%s%s %lld", first ? "" : ", ", ggml_type_name(t), (long long)count[t]);
        first = false;
    }
    if (json)
        fputc('}', f);
}

/* Every run of o at n_threads threads on the loaded model m: bandwidth,
 * warm-up, o->reps repetitions, the report. 0, or 1 with a message. */
static int bench_threads(struct llm_model *m, const struct bench_opts *opts, int n_threads,
                         double load_s)
{
    struct bench_opts o = *opts;
    o.n_threads = n_threads;
    char err[512];
    struct tpool *tp = NULL;
    struct llm_ctx *ctx = NULL;
    struct llm_kv *kv = NULL;
    struct llm_dev *dev = NULL;
    int32_t *prompt = NULL, *pos = NULL, *zeros = NULL, *table = NULL;
    int32_t *seq_ids = NULL, *bd_tok = NULL;
    bool *want = NULL;
    struct llm_seq_view *seqs = NULL;
    float *logits = NULL;
    double *pp = NULL, *tg = NULL, *bd = NULL;
    int ret = 1;
    const struct llm_hparams *hp = llm_model_hparams(m);

    if (!(tp = tpool_new(o.n_threads, err, sizeof err))) {
        fprintf(stderr, "bench: %s\n", err);
        goto done;
    }
    double bw = 0, bw_plain = 0, bw_scalar = 0;
    if (!o.no_bandwidth) {
        /* 3 rounds of each vector read form and the scalar reference loop */
        bw = bench_read_bandwidth3(tp, BENCH_BW_BYTES, 3, &bw_plain, &bw_scalar);
        if (bw > 0)
            fprintf(stderr, "bench: read bandwidth %.2f GB/s (%d threads)\n", bw / 1e9, o.n_threads);
        else
            fprintf(stderr, "bench: no memory to measure the read bandwidth\n");
    }
    int max_tokens = o.n_prompt < o.batch ? o.n_prompt : o.batch;
    const int n_seqs = o.batch_decode > 0 ? o.batch_decode : 1;
    const int ctx_tokens = max_tokens > o.batch_decode ? max_tokens : o.batch_decode;
    if (!(ctx = llm_ctx_new(m, ctx_tokens, tp, err, sizeof err))) {
        fprintf(stderr, "bench: %s\n", err);
        goto done;
    }
    int n_ctx = o.n_prompt + (o.n_gen > 1 ? o.n_gen : 1); /* the warm-up decodes one token (-n 0) */
    int n_blocks = (n_ctx + BENCH_KV_BLOCK - 1) / BENCH_KV_BLOCK;
    if (o.device) { /* the forward on the GPU: its own pool, the host one only a shape */
        struct llm_dev_params dp = llm_dev_default_params();
        const char *colon = strchr(o.device, ':');
        dp.device = colon ? atoi(colon + 1) : 0;
        if (strncmp(o.device, "cuda", 4) || (o.device[4] && o.device[4] != ':')) {
            fprintf(stderr, "bench: --device: '%s' is not cpu, cuda or cuda:N\n", o.device);
            goto done;
        }
        dp.max_tokens = ctx_tokens;
        dp.block_size = BENCH_KV_BLOCK;
        dp.n_blocks = n_blocks * n_seqs;
        if (!(dev = llm_dev_new(m, &dp, err, sizeof err))) {
            fprintf(stderr, "bench: %s\n", err);
            goto done;
        }
        llm_dev_attach(dev, ctx);
        fprintf(stderr, "bench: forward on %s (%s)\n", o.device, llm_dev_device(dev));
    }
    if (!(kv = (dev ? llm_kv_new_shape : llm_kv_new)(m, GGML_TYPE_F16, BENCH_KV_BLOCK,
                                                      n_blocks * n_seqs, err, sizeof err))) {
        fprintf(stderr, "bench: %s\n", err);
        goto done;
    }
    prompt = malloc(sizeof *prompt * (size_t)o.n_prompt);
    pos = malloc(sizeof *pos * (size_t)ctx_tokens);
    zeros = calloc((size_t)max_tokens, sizeof *zeros);
    seq_ids = malloc(sizeof *seq_ids * (size_t)ctx_tokens);
    bd_tok = malloc(sizeof *bd_tok * (size_t)n_seqs);
    want = malloc(sizeof *want * (size_t)n_seqs);
    table = malloc(sizeof *table * (size_t)n_blocks * (size_t)n_seqs);
    seqs = malloc(sizeof *seqs * (size_t)n_seqs);
    logits = malloc(sizeof *logits * (size_t)hp->n_vocab * (size_t)n_seqs);
    pp = malloc(sizeof *pp * (size_t)o.reps);
    tg = malloc(sizeof *tg * (size_t)o.reps);
    bd = malloc(sizeof *bd * (size_t)o.reps);
    if (!prompt || !pos || !zeros || !seq_ids || !bd_tok || !want || !table || !seqs || !logits ||
        !pp || !tg || !bd) {
        fprintf(stderr, "bench: out of memory\n");
        goto done;
    }
    uint64_t state = o.seed;
    for (int i = 0; i < o.n_prompt; i++)
        prompt[i] = (int32_t)(omni_splitmix64(&state) % (uint64_t)hp->n_vocab);
    for (int i = 0; i < n_blocks * n_seqs; i++)
        table[i] = i;
    for (int s = 0; s < n_seqs; s++)
        seqs[s] = (struct llm_seq_view){ table + (size_t)s * n_blocks, n_blocks };
    struct llm_seq_view seq = seqs[0];

    struct bench_opts warm = o;
    warm.n_prompt = max_tokens;
    warm.n_gen = 1;
    struct bench_result res;
    if (bench_once(ctx, kv, &seq, &warm, prompt, hp->n_vocab, logits, pos, zeros, &res))
        goto done;
    for (int r = 0; r < o.reps; r++) {
        if (bench_once(ctx, kv, &seq, &o, prompt, hp->n_vocab, logits, pos, zeros, &res))
            goto done;
        res.bd_tok_s = 0;
        if (o.batch_decode && bench_batch_decode(ctx, kv, seqs, &o, prompt, hp->n_vocab, logits,
                                                 pos, seq_ids, bd_tok, want, &res))
            goto done;
        pp[r] = res.pp_tok_s;
        tg[r] = res.tg_tok_s;
        bd[r] = res.bd_tok_s;
        fprintf(stderr, "bench: rep %d/%d: pp%d %.1f tok/s, tg%d %.1f tok/s", r + 1, o.reps,
                o.n_prompt, res.pp_tok_s, o.n_gen, res.tg_tok_s);
        if (o.batch_decode)
            fprintf(stderr, ", %d x tg%d %.1f tok/s", o.batch_decode, o.n_gen, res.bd_tok_s);
        fputc('\n', stderr);
    }
    double pp_med = bench_median(pp, o.reps), tg_med = bench_median(tg, o.reps);
    double bd_med = bench_median(bd, o.reps);
    int level = omni_cpu_level();
    const size_t decode_bytes = bench_decode_bytes(m);
    const double frac = bw > 0 ? (double)decode_bytes * tg_med / bw : 0;

    if (!o.json_only) {
        char cpu[160];
        omni_cpu_describe(cpu, sizeof cpu);
        printf("model    %s\n", o.model);
        printf("arch     %s, %d layers, %.1f MiB of weights, tensors: ", hp->arch_name, hp->n_layer,
               llm_model_weight_bytes(m) / 1048576.0);
        bench_type_mix(stdout, llm_model_gguf(m), false);
        printf("\ncpu      %s, %d threads\n", cpu, o.n_threads);
        printf("load     %.2f s\n", load_s);
        printf("pp%-6d %.2f tok/s  (median of %d)\n", o.n_prompt, pp_med, o.reps);
        if (o.n_gen)
            printf("tg%-6d %.2f tok/s  (median of %d)\n", o.n_gen, tg_med, o.reps);
        if (o.n_gen && bw > 0)
            printf("bandwidth %.2f GB/s read, decode reads %.1f MiB per token: %.1f%% of it "
                   "(bandwidth_fraction %.3f)\n",
                   bw / 1e9, decode_bytes / 1048576.0, 100 * frac, frac);
        if (o.n_gen && o.batch_decode)
            printf("%d x tg%-3d %.2f tok/s aggregate, %.2fx one sequence  (median of %d)\n",
                   o.batch_decode, o.n_gen, bd_med, tg_med > 0 ? bd_med / tg_med : 0, o.reps);
    }
    printf("{\"model\": ");
    bench_json_str(stdout, o.model);
    printf(", \"arch\": ");
    bench_json_str(stdout, hp->arch_name);
    printf(", \"n_layer\": %d, \"weight_bytes\": %zu, \"type_mix\": ", hp->n_layer,
           llm_model_weight_bytes(m));
    bench_type_mix(stdout, llm_model_gguf(m), true);
    printf(", \"threads\": %d, \"cpu\": \"%s\", \"p\": %d, \"n\": %d, \"reps\": %d, "
           "\"pp_tok_s\": %.3f, \"tg_tok_s\": %.3f, \"batch_decode\": %d, \"bd_tok_s\": %.3f, "
           "\"load_s\": %.3f, \"decode_bytes\": %zu, \"decode_bytes_read\": %llu, "
           "\"bandwidth_gb_s\": %.3f, \"bandwidth_fraction\": %.4f, \"bandwidth_plain_gb_s\": %.3f, "
           "\"bandwidth_fraction_plain\": %.4f, \"bandwidth_scalar_gb_s\": %.3f, "
           "\"bandwidth_fraction_scalar\": %.4f}\n",
           o.n_threads, omni_cpu_level_name(level), o.n_prompt, o.n_gen, o.reps, pp_med, tg_med,
           o.batch_decode, bd_med, load_s, decode_bytes, (unsigned long long)res.tg_bytes, bw / 1e9,
           frac, bw_plain / 1e9, bw_plain > 0 ? (double)decode_bytes * tg_med / bw_plain : 0, bw_scalar / 1e9,
           bw_scalar > 0 ? (double)decode_bytes * tg_med / bw_scalar : 0);
    fflush(stdout);
    ret = 0;

done:
    free(prompt);
    free(pos);
    free(zeros);
    free(seq_ids);
    free(bd_tok);
    free(want);
    free(table);
    free(seqs);
    free(logits);
    free(pp);
    free(tg);
    free(bd);
    llm_kv_free(kv);
    llm_ctx_free(ctx);
    llm_dev_free(dev);
    tpool_free(tp);
    return ret;
}

int cli_bench(int argc, char **argv)
{
    struct bench_opts o;
    int rc = bench_parse(argc, argv, &o);
    if (rc)
        return rc < 0 ? 0 : rc;

    char err[512];
    fprintf(stderr, "bench: loading %s\n", o.model);
    double t0 = omni_time_s();
    struct llm_model *m = llm_model_load(o.model, NULL, err, sizeof err);
    if (!m) {
        fprintf(stderr, "bench: %s\n", err);
        return 1;
    }
    double load_s = omni_time_s() - t0;
    const struct llm_hparams *hp = llm_model_hparams(m);
    fprintf(stderr, "bench: loaded %s (%d layers, %.1f MiB of weights) in %.2f s\n", hp->arch_name,
            hp->n_layer, llm_model_weight_bytes(m) / 1048576.0, load_s);
    if (o.n_prompt + o.n_gen > hp->n_ctx_train)
        fprintf(stderr, "bench: warning: %d tokens exceed the training context (%d)\n",
                o.n_prompt + o.n_gen, hp->n_ctx_train);
    int ret = 0;
    for (int i = 0; i < o.n_thread_counts && !ret; i++)
        ret = bench_threads(m, &o, o.threads[i], load_s);
    llm_model_free(m);
    return ret;
}
