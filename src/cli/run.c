/* run.c - `omniserve run`: generate text from a prompt (or answer one chat
 * question) with a GGUF model, streaming tokens to stdout. One request
 * through the engine (src/engine/engine.h), printed from its event callback.
 *
 * Mirrors llama2.c's run.c so its reference outputs reproduce byte for byte:
 * -n counts forward positions including the prompt (BOS included), the prompt
 * is echoed as its tokens decode, a sampled BOS ends generation (a stop
 * token), F32 K/V by default, and a final newline closes the output. One
 * difference: the engine keeps prompt + output within the context, so at
 * -n = context the last token (llama2.c's, past the context) is not printed.
 * Diagnostics and timings go to stderr. */
#include "src/cli/args.h"
#include "src/cli/cli.h"

#include "llm/chat.h"
#include "llm/model.h"
#include "llm/sampler.h"
#include "llm/tokenizer.h"
#include "src/core/gguf.h"
#include "src/core/omni.h"
#include "src/core/tensor.h"
#include "src/core/threadpool.h"
#include "src/engine/engine.h"
#include "src/engine/kv_pool.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define RUN_DEFAULT_STEPS 256     /* llama2.c's default -n */
#define RUN_CHAT_ANSWER_TOKENS 512 /* --chat without -n: room for the answer */
#define RUN_PREFILL_CHUNK 512     /* prompt tokens per forward */

struct run_opts {
    const char *model;
    const char *prompt;
    const char *chat;
    const char *system;
    long steps;                   /* -1: default */
    struct sampler_params sp;
    struct engine_params ep;      /* n_threads 0: physical cores; kv_memory_bytes 0: the
                                     blocks -n needs */
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
            "  --threads N             worker threads (default: physical cores)\n"
            "  --kv-type T             K/V storage: f32 (default, as llama2.c), f16, q8_0\n"
            "  --kv-block-size N       tokens per KV block (default 16)\n"
            "  --kv-memory SIZE        KV pool size, K/M/G suffixes (default: what -n needs)\n"
            "  --state-snapshot-memory SIZE  hybrids: prefix-cache state snapshots (default 0:\n"
            "                          none, one prompt has nothing to resume)\n"
            "  --deterministic         batch-invariant kernels (as the server's option)\n",
            RUN_DEFAULT_STEPS, RUN_CHAT_ANSWER_TOKENS);
}

/* 0 ok, 1 help printed, 2 usage error (message printed). */
static int run_parse_args(int argc, char **argv, struct run_opts *o)
{
    *o = (struct run_opts){ .steps = -1, .sp = sampler_default_params(),
                            .ep = engine_default_params() };
    o->ep.kv_type = GGML_TYPE_F32;
    o->ep.state_snapshot_memory = -1; /* one request: no prefix to resume */
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            run_usage(stdout);
            return 1;
        }
        if (!strcmp(a, "--deterministic")) {
            o->ep.deterministic = true;
            continue;
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
            rc = cli_long("run", a, v, 0, 1L << 30, &o->steps);
        else if (!strcmp(a, "--temp"))
            rc = cli_float("run", a, v, 0.0f, 1e6f, &o->sp.temperature);
        else if (!strcmp(a, "--seed"))
            rc = cli_u64("run", a, v, SAMPLER_SEED_RANDOM, &o->sp.seed);
        else if (!strcmp(a, "--top-k")) {
            rc = cli_long("run", a, v, 0, 1L << 30, &n);
            o->sp.top_k = (int)n;
        } else if (!strcmp(a, "--top-p"))
            rc = cli_float("run", a, v, 0.0f, 1.0f, &o->sp.top_p);
        else if (!strcmp(a, "--min-p"))
            rc = cli_float("run", a, v, 0.0f, 1.0f, &o->sp.min_p);
        else if (!strcmp(a, "--repeat-penalty"))
            rc = cli_float("run", a, v, 1e-3f, 1e3f, &o->sp.repetition_penalty);
        else if (!strcmp(a, "--threads")) {
            rc = cli_long("run", a, v, 1, 1024, &n);
            o->ep.n_threads = (int)n;
        } else if (!strcmp(a, "--kv-type")) {
            if ((o->ep.kv_type = engine_kv_type_from_name(v)) < 0) {
                fprintf(stderr, "run: --kv-type expects f32, f16 or q8_0, got '%s'\n", v);
                rc = -1;
            }
        } else if (!strcmp(a, "--kv-block-size")) {
            rc = cli_long("run", a, v, 1, 4096, &n);
            o->ep.kv_block_size = (int)n;
        } else if (!strcmp(a, "--kv-memory")) {
            rc = cli_size("run", a, v, 1, &o->ep.kv_memory_bytes);
        } else if (!strcmp(a, "--state-snapshot-memory")) {
            size_t sz;
            if (!(rc = cli_size("run", a, v, 0, &sz)))
                o->ep.state_snapshot_memory = !sz ? -1 : sz > INT64_MAX ? INT64_MAX : (int64_t)sz;
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

/* What the event callback keeps; written on the engine thread, read by
 * cli_run after engine_generate returns. */
struct run_out {
    bool strip_space;             /* drop the leading space of the first text (after BOS) */
    bool first;                   /* no token event yet */
    int n_gen;                    /* tokens printed */
    struct engine_usage usage;
};

/* Token text straight to stdout; the engine already held back incomplete
 * UTF-8 and text that may begin a stop string, and flushes it at the end. */
static void run_event(void *user, const struct engine_event *ev)
{
    struct run_out *o = user;
    const char *text = ev->text;
    size_t len = ev->text_len;
    switch (ev->type) {
    case ENGINE_EV_TOKEN:
        /* llama2.c's decoder drops the leading space of the first piece after
         * BOS; the engine detokenizes from the end of the prompt on, so the
         * prompt's BOS is ours to account for */
        if (o->first && o->strip_space && len && text[0] == ' ') {
            text++;
            len--;
        }
        o->first = false;
        o->n_gen++;
        break;
    case ENGINE_EV_DONE:
        o->usage = ev->usage;
        break;
    case ENGINE_EV_ERROR: /* engine_generate returns it */
        return;
    }
    fwrite(text, 1, len, stdout);
    fflush(stdout);
}

/* Bytes of KV for the first `steps` positions (a block more for the engine's
 * admission check), or 0 to let the engine decide (it reports a bad type). */
/* the pool's own block size: K/V of the attention layers (hybrids' state
 * snapshots are sized apart: --state-snapshot-memory) */
static size_t run_kv_bytes(const struct llm_model *m, const struct engine_params *ep,
                           long steps)
{
    const size_t block = kv_pool_block_bytes(m, ep->kv_type, ep->kv_block_size);
    const size_t blocks = (size_t)steps / (size_t)ep->kv_block_size + 2;
    size_t bytes;
    if (!block || omni_mul_size(block, blocks, &bytes))
        return 0;
    return bytes;
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
    struct engine *e = NULL;
    int32_t *prompt = NULL;
    char *chat_text = NULL;
    const char *eot = NULL;

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
        eot = chat_format_end_of_turn(fmt);
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
    /* the seed drawn here, so that it can be reported */
    if (o.sp.seed == SAMPLER_SEED_RANDOM) {
        struct sampler *smp = sampler_new(&o.sp, hp->n_vocab, err, sizeof err);
        if (!smp) {
            fprintf(stderr, "run: %s\n", err);
            goto out;
        }
        o.sp.seed = sampler_seed(smp);
        sampler_free(smp);
    }

    /* ---- an engine for one sequence ---- */
    struct engine_params ep = o.ep;
    if (!ep.n_threads)
        ep.n_threads = omni_physical_cores();
    ep.max_seqs = 1;
    ep.max_queue = 1;
    ep.max_batch_tokens = RUN_PREFILL_CHUNK;
    if (!ep.kv_memory_bytes)
        ep.kv_memory_bytes = run_kv_bytes(m, &ep, steps);
    if (!(e = engine_new(&ep, err, sizeof err)) ||
        engine_add_model(e, m, "run", err, sizeof err) < 0 ||
        engine_start(e, err, sizeof err) < 0) {
        fprintf(stderr, "run: %s\n", err);
        goto out;
    }
    fprintf(stderr, "run: %s: %s, %d layers, vocab %d, context %d; %d prompt tokens, %ld steps, "
                    "%d threads, KV %s, seed %llu%s%s\n",
            o.model, hp->arch_name, hp->n_layer, hp->n_vocab, n_ctx, n_prompt, steps,
            ep.n_threads, engine_kv_type_name(ep.kv_type), (unsigned long long)o.sp.seed,
            o.chat ? ", chat format " : "", o.chat ? chat_format_name(fmt) : "");

    /* ---- echo the prompt as its tokens decode (plain mode) ---- */
    double t1 = omni_time_s();
    struct tok_stream ts = { 0 };
    for (int i = 0; !o.chat && i < n_prompt; i++) {
        char piece[4096];
        size_t n = tokenizer_stream_piece(tok, &ts, prompt[i], piece, sizeof piece);
        fwrite(piece, 1, n < sizeof piece ? n : sizeof piece, stdout);
    }
    fflush(stdout);

    /* ---- generation: the token at position p is printed iff p <= steps
     * (llama2.c prints the successor of each of its `steps` forwards) ---- */
    const int32_t bos = tokenizer_bos(tok);
    struct run_out out = {
        .strip_space = tokenizer_kind(tok) == TOK_KIND_SPM && ts.after_bos && !ts.n_pending,
        .first = true,
    };
    struct engine_request rq = engine_default_request();
    rq.prompt = prompt;
    rq.n_prompt = n_prompt;
    rq.sampling = o.sp;
    rq.max_tokens = (int)(steps - n_prompt + 1);
    rq.stop = &eot;
    rq.n_stop = eot ? 1 : 0;
    rq.stop_tokens = &bos;
    rq.n_stop_tokens = bos >= 0 ? 1 : 0;
    rq.on_event = run_event;
    rq.user = &out;
    if (engine_generate(e, &rq, err, sizeof err) < 0) {
        fprintf(stderr, "\nrun: %s\n", err);
        goto out;
    }
    fputc('\n', stdout);
    fflush(stdout);
    const double prompt_s = out.usage.ttft_ms / 1e3;
    const double gen_s = (out.usage.total_ms - out.usage.ttft_ms) / 1e3;
    fprintf(stderr, "run: load %.0f ms; prompt %d tokens in %.1f ms to the first token "
                    "(%.1f tok/s); generated %d tokens in %.1f ms (%.1f tok/s)\n",
            (t1 - t0) * 1e3, n_prompt, prompt_s * 1e3, n_prompt / (prompt_s > 0 ? prompt_s : 1e-9),
            out.n_gen, gen_s * 1e3, out.n_gen / (gen_s > 0 ? gen_s : 1e-9));
    status = 0;

out:
    engine_free(e);
    free(chat_text);
    free(prompt);
    llm_model_free(m);
    return status;
}
