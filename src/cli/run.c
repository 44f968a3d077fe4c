/* run.c - `omniserve run`: generate text from a prompt (or answer one chat
 * question) with a GGUF model, streaming tokens to stdout.
 *
 * Mirrors llama2.c's run.c so its reference outputs reproduce byte for byte:
 * -n counts forward positions including the prompt (BOS included), the prompt
 * is echoed as its tokens decode, a sampled BOS ends generation, and a final
 * newline closes the output. Diagnostics and timings go to stderr. */
#include "src/cli/cli.h"

#include "llm/chat.h"
#include "llm/model.h"
#include "llm/sampler.h"
#include "llm/tokenizer.h"
#include "src/core/gguf.h"
#include "src/core/omni.h"
#include "src/core/tensor.h"
#include "src/core/threadpool.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define RUN_DEFAULT_STEPS 256     /* llama2.c's default -n */
#define RUN_CHAT_ANSWER_TOKENS 512 /* --chat without -n: room for the answer */
#define RUN_KV_BLOCK 16
#define RUN_PREFILL_CHUNK 512     /* prompt tokens per forward */

struct run_opts {
    const char *model;
    const char *prompt;
    const char *chat;
    const char *system;
    long steps;                   /* -1: default */
    int threads;                  /* 0: physical cores */
    struct sampler_params sp;
};

static void run_usage(FILE *f)
{
    fprintf(f,
            "usage: omniserve run -m FILE.gguf [-p PROMPT] [options]\n"
            "       omniserve run -m FILE.gguf --chat QUESTION [--system TEXT] [options]\n"
            "  -m, --model FILE        GGUF model\n"
            "  -p, --prompt TEXT       text to continue (default: empty, start from BOS)\n"
            "  -n N                    forward positions, prompt included, as llama2.c's\n"
            "                          steps (default %d; with --chat prompt + %d); capped\n"
            "                          at the context length; 0 = the context length\n"
            "  --chat QUESTION         format QUESTION with the model's chat format and\n"
            "                          print only the answer\n"
            "  --system TEXT           system message for --chat\n"
            "  --temp T                temperature, 0 = greedy (default 0.8)\n"
            "  --seed S                random seed (default: from the clock)\n"
            "  --top-k K               keep the K most likely tokens, 0 = off (default 40)\n"
            "  --top-p P               nucleus sampling, 1 = off (default 0.95)\n"
            "  --min-p P               drop tokens below P x the top probability (default 0.05)\n"
            "  --repeat-penalty R      penalise the last 64 tokens, 1 = off (default 1)\n"
            "  --threads N             worker threads (default: physical cores)\n",
            RUN_DEFAULT_STEPS, RUN_CHAT_ANSWER_TOKENS);
}

static int run_parse_long(const char *opt, const char *s, long lo, long hi, long *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi) {
        fprintf(stderr, "run: %s expects an integer in %ld..%ld, got '%s'\n", opt, lo, hi, s);
        return -1;
    }
    *out = v;
    return 0;
}

static int run_parse_float(const char *opt, const char *s, float lo, float hi, float *out)
{
    char *end;
    errno = 0;
    float v = strtof(s, &end);
    if (errno || end == s || *end || !(v >= lo && v <= hi)) {
        fprintf(stderr, "run: %s expects a number in %g..%g, got '%s'\n", opt, (double)lo,
                (double)hi, s);
        return -1;
    }
    *out = v;
    return 0;
}

static int run_parse_seed(const char *s, uint64_t *out)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || end == s || *end || *s == '-' || v == SAMPLER_SEED_RANDOM) {
        fprintf(stderr, "run: --seed expects an integer in 0..%llu, got '%s'\n",
                (unsigned long long)SAMPLER_SEED_RANDOM - 1, s);
        return -1;
    }
    *out = v;
    return 0;
}

/* 0 ok, 1 help printed, 2 usage error (message printed). */
static int run_parse_args(int argc, char **argv, struct run_opts *o)
{
    *o = (struct run_opts){ .steps = -1, .sp = sampler_default_params() };
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            run_usage(stdout);
            return 1;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "run: %s: %s\n", a,
                    a[0] == '-' ? "unknown option or missing value" : "unexpected argument");
            return 2;
        }
        const char *v = argv[++i];
        long n;
        int rc = 0;
        if (!strcmp(a, "-m") || !strcmp(a, "--model"))
            o->model = v;
        else if (!strcmp(a, "-p") || !strcmp(a, "--prompt"))
            o->prompt = v;
        else if (!strcmp(a, "--chat"))
            o->chat = v;
        else if (!strcmp(a, "--system"))
            o->system = v;
        else if (!strcmp(a, "-n"))
            rc = run_parse_long(a, v, 0, 1L << 30, &o->steps);
        else if (!strcmp(a, "--temp"))
            rc = run_parse_float(a, v, 0.0f, 1e6f, &o->sp.temperature);
        else if (!strcmp(a, "--seed"))
            rc = run_parse_seed(v, &o->sp.seed);
        else if (!strcmp(a, "--top-k")) {
            rc = run_parse_long(a, v, 0, 1L << 30, &n);
            o->sp.top_k = (int)n;
        } else if (!strcmp(a, "--top-p"))
            rc = run_parse_float(a, v, 0.0f, 1.0f, &o->sp.top_p);
        else if (!strcmp(a, "--min-p"))
            rc = run_parse_float(a, v, 0.0f, 1.0f, &o->sp.min_p);
        else if (!strcmp(a, "--repeat-penalty"))
            rc = run_parse_float(a, v, 1e-3f, 1e3f, &o->sp.repetition_penalty);
        else if (!strcmp(a, "--threads")) {
            rc = run_parse_long(a, v, 1, 1024, &n);
            o->threads = (int)n;
        } else {
            fprintf(stderr, "run: unknown option '%s'\n", a);
            return 2;
        }
        if (rc)
            return 2;
    }
    if (!o->model) {
        fprintf(stderr, "run: no model given (-m FILE.gguf)\n");
        return 2;
    }
    if (o->chat && o->prompt) {
        fprintf(stderr, "run: give either -p PROMPT or --chat QUESTION, not both\n");
        return 2;
    }
    if (o->system && !o->chat) {
        fprintf(stderr, "run: --system needs --chat\n");
        return 2;
    }
    return 0;
}

/* The chat prompt: system + question in the format the GGUF's template names. */
static char *run_chat_prompt(const struct llm_model *m, const struct run_opts *o,
                             enum chat_format *fmt)
{
    const char *tmpl = NULL;
    size_t tlen = 0;
    char *tz = NULL;
    if ((tmpl = gguf_get_str(llm_model_gguf(m), "tokenizer.chat_template", &tlen)) &&
        !(tz = strndup(tmpl, tlen)))
        return NULL;
    *fmt = chat_format_detect(tz);
    free(tz);
    struct chat_message msgs[2];
    int n = 0;
    if (o->system)
        msgs[n++] = (struct chat_message){ "system", o->system };
    msgs[n++] = (struct chat_message){ "user", o->chat };
    size_t need = 0;
    if (chat_format_apply(*fmt, msgs, n, true, NULL, 0, &need) != 0)
        return NULL;
    char *text = malloc(need + 1);
    if (text && chat_format_apply(*fmt, msgs, n, true, text, need + 1, &need) != 0) {
        free(text);
        text = NULL;
    }
    return text;
}

/* Encode text into a fresh array; *n_out tokens. Negative omni_err on failure. */
static int run_encode(const struct tokenizer *tok, const char *text, int flags, int32_t **out,
                      int *n_out)
{
    size_t len = strlen(text);
    if (len > (1u << 30))
        return OMNI_ERR_LIMIT;
    int cap = (int)len + 16, needed = 0;
    for (int attempt = 0; attempt < 2; attempt++) {
        int32_t *ids = malloc((size_t)cap * sizeof *ids);
        if (!ids)
            return OMNI_ERR_NOMEM;
        int n = tokenizer_encode(tok, text, len, flags, ids, cap, &needed);
        if (n >= 0) {
            *out = ids;
            *n_out = n;
            return 0;
        }
        free(ids);
        if (n != OMNI_ERR_LIMIT || needed <= cap)
            return n;
        cap = needed;
    }
    return OMNI_ERR_LIMIT;
}

/* Write text to stdout, through the stop matcher when there is one.
 * Returns 1 when a stop string completed (text after it is dropped). */
static int run_write(struct sampler_stop *stop, const char *text, size_t len)
{
    int hit = 0;
    if (stop)
        hit = sampler_stop_feed(stop, text, len, &text, &len) == 1;
    fwrite(text, 1, len, stdout);
    fflush(stdout);
    return hit;
}

/* Stream one token's text (complete UTF-8 characters only). */
static int run_emit(const struct tokenizer *tok, struct tok_stream *ts, struct sampler_stop *stop,
                    int32_t id)
{
    char piece[4096];
    size_t n = tokenizer_stream_piece(tok, ts, id, piece, sizeof piece);
    return run_write(stop, piece, n < sizeof piece ? n : sizeof piece);
}

int cli_run(int argc, char **argv)
{
    struct run_opts o;
    int rc = run_parse_args(argc, argv, &o);
    if (rc == 1)
        return 0;
    if (rc == 2) {
        fprintf(stderr, "run: see 'omniserve run --help'\n");
        return 2;
    }

    char err[512];
    int status = 1;
    struct llm_model *m = NULL;
    struct tpool *tp = NULL;
    struct llm_ctx *ctx = NULL;
    struct llm_kv *kv = NULL;
    struct sampler *smp = NULL;
    struct sampler_stop *stop = NULL;
    int32_t *prompt = NULL, *table = NULL, *pos = NULL, *seq = NULL;
    float *logits = NULL;
    char *chat_text = NULL;

    double t0 = omni_time_s();
    m = llm_model_load(o.model, NULL, err, sizeof err);
    if (!m) {
        fprintf(stderr, "run: %s\n", err);
        goto out;
    }
    const struct llm_hparams *hp = llm_model_hparams(m);
    const struct tokenizer *tok = llm_model_tokenizer(m);
    int n_ctx = hp->n_ctx_train;

    /* ---- the prompt ---- */
    const char *text = o.prompt ? o.prompt : "";
    int flags = TOK_ADD_SPECIAL;
    enum chat_format fmt = CHAT_FORMAT_CHATML;
    if (o.chat) {
        if (!(chat_text = run_chat_prompt(m, &o, &fmt))) {
            fprintf(stderr, "run: out of memory formatting the chat prompt\n");
            goto out;
        }
        text = chat_text;
        flags |= TOK_PARSE_SPECIAL; /* the turn markers are special tokens */
        /* Vocabularies that do not mark the end-of-turn token as EOG still stop. */
        const char *eot = chat_format_end_of_turn(fmt);
        if (!(stop = sampler_stop_new(&eot, 1, err, sizeof err))) {
            fprintf(stderr, "run: %s\n", err);
            goto out;
        }
    }
    int n_prompt = 0;
    rc = run_encode(tok, text, flags, &prompt, &n_prompt);
    if (rc < 0) {
        fprintf(stderr, "run: %s\n", rc == OMNI_ERR_FORMAT ? "prompt is not valid UTF-8"
                                                            : "cannot tokenize the prompt");
        goto out;
    }
    if (n_prompt == 0) {
        fprintf(stderr, "run: empty prompt and the vocabulary adds no BOS: nothing to start from\n");
        goto out;
    }
    if (n_prompt > n_ctx) {
        fprintf(stderr, "run: prompt is %d tokens, longer than the context (%d)\n", n_prompt,
                n_ctx);
        goto out;
    }
    long steps = o.steps;
    if (steps < 0)
        steps = o.chat ? n_prompt + RUN_CHAT_ANSWER_TOKENS : RUN_DEFAULT_STEPS;
    if (steps == 0 || steps > n_ctx)
        steps = n_ctx;
    if (steps < n_prompt) {
        fprintf(stderr, "run: -n %ld leaves no room after the %d-token prompt\n", steps, n_prompt);
        goto out;
    }

    /* ---- per-run state: KV for exactly `steps` positions, identity table ---- */
    int threads = o.threads > 0 ? o.threads : omni_physical_cores();
    if (!(tp = tpool_new(threads, err, sizeof err))) {
        fprintf(stderr, "run: %s\n", err);
        goto out;
    }
    int chunk = n_prompt < RUN_PREFILL_CHUNK ? n_prompt : RUN_PREFILL_CHUNK;
    if (!(ctx = llm_ctx_new(m, chunk, tp, err, sizeof err))) {
        fprintf(stderr, "run: %s\n", err);
        goto out;
    }
    int n_blocks = (int)((steps + RUN_KV_BLOCK - 1) / RUN_KV_BLOCK);
    /* F32 K/V, as llama2.c keeps them, so greedy outputs match it exactly. */
    if (!(kv = llm_kv_new(m, GGML_TYPE_F32, RUN_KV_BLOCK, n_blocks, err, sizeof err))) {
        fprintf(stderr, "run: %s\n", err);
        goto out;
    }
    if (!(smp = sampler_new(&o.sp, hp->n_vocab, err, sizeof err))) {
        fprintf(stderr, "run: %s\n", err);
        goto out;
    }
    table = malloc((size_t)n_blocks * sizeof *table);
    logits = malloc((size_t)hp->n_vocab * sizeof *logits);
    pos = malloc((size_t)chunk * sizeof *pos);
    seq = calloc((size_t)chunk, sizeof *seq); /* every token in sequence 0 */
    if (!table || !logits || !pos || !seq) {
        fprintf(stderr, "run: out of memory\n");
        goto out;
    }
    for (int i = 0; i < n_blocks; i++)
        table[i] = i;
    struct llm_seq_view view = { table, n_blocks };
    fprintf(stderr, "run: %s: %s, %d layers, vocab %d, context %d; %d prompt tokens, %ld steps, "
                    "%d threads, seed %llu%s%s\n",
            o.model, hp->arch_name, hp->n_layer, hp->n_vocab, n_ctx, n_prompt, steps, threads,
            (unsigned long long)sampler_seed(smp), o.chat ? ", chat format " : "",
            o.chat ? chat_format_name(fmt) : "");

    /* ---- prompt: echo it as its tokens decode (plain mode) and prefill ---- */
    double t1 = omni_time_s();
    struct tok_stream ts = { 0 };
    for (int i = 0; i < n_prompt; i++) {
        sampler_accept(smp, prompt[i]);
        if (!o.chat)
            run_emit(tok, &ts, NULL, prompt[i]);
    }
    for (int done = 0; done < n_prompt; done += chunk) {
        int nb = n_prompt - done < chunk ? n_prompt - done : chunk;
        for (int i = 0; i < nb; i++)
            pos[i] = done + i;
        struct llm_batch b = { .n_tokens = nb, .token = prompt + done, .pos = pos, .seq = seq };
        rc = llm_forward(ctx, &b, kv, &view, logits);
        if (rc < 0) {
            fprintf(stderr, "\nrun: forward failed on the prompt: %s\n", omni_strerror(rc));
            goto out;
        }
    }

    /* ---- generation: the token at position p is printed iff p <= steps
     * (llama2.c prints the successor of each of its `steps` forwards) ---- */
    double t2 = omni_time_s();
    int n_gen = 0, stopped = 0;
    int32_t bos = tokenizer_bos(tok);
    for (;;) {
        int32_t next = sampler_sample(smp, logits, NULL);
        if (next < 0 || next == bos || tokenizer_is_eog(tok, next))
            break;
        sampler_accept(smp, next);
        n_gen++;
        if ((stopped = run_emit(tok, &ts, stop, next)))
            break;
        int32_t p = n_prompt + n_gen - 1;
        if (p >= steps)
            break;
        struct llm_batch b = { .n_tokens = 1, .token = &next, .pos = &p, .seq = seq };
        rc = llm_forward(ctx, &b, kv, &view, logits);
        if (rc < 0) {
            fprintf(stderr, "\nrun: forward failed at position %d: %s\n", p, omni_strerror(rc));
            goto out;
        }
    }
    if (!stopped) { /* release an incomplete character, then what the matcher held */
        char tail[16];
        size_t nt = tokenizer_stream_flush(tok, &ts, tail, sizeof tail);
        stopped = run_write(stop, tail, nt < sizeof tail ? nt : sizeof tail);
        if (stop && !stopped) {
            const char *held;
            size_t nh;
            sampler_stop_flush(stop, &held, &nh);
            fwrite(held, 1, nh, stdout);
        }
    }
    fputc('\n', stdout);
    fflush(stdout);
    double t3 = omni_time_s();
    fprintf(stderr, "run: load %.0f ms; prompt %d tokens in %.1f ms (%.1f tok/s); "
                    "generated %d tokens in %.1f ms (%.1f tok/s)\n",
            (t1 - t0) * 1e3, n_prompt, (t2 - t1) * 1e3, n_prompt / (t2 - t1 > 0 ? t2 - t1 : 1e-9),
            n_gen, (t3 - t2) * 1e3, n_gen / (t3 - t2 > 0 ? t3 - t2 : 1e-9));
    status = 0;

out:
    free(chat_text);
    free(prompt);
    free(table);
    free(pos);
    free(seq);
    free(logits);
    sampler_stop_free(stop);
    sampler_free(smp);
    llm_kv_free(kv);
    llm_ctx_free(ctx);
    tpool_free(tp);
    llm_model_free(m);
    return status;
}
