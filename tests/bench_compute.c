/* bench_compute.c - what the one compute budget does, in one process: chat
 * streams on the engine and transcriptions on the speech service at once,
 * the way `serve` runs them. With the budget (default) both take their
 * threads from one budget of --threads; with --no-budget each has its own
 * pool of --threads threads, as serve had before (--threads for the engine,
 * --stt-threads defaulting to every core for speech).
 *
 * Phases, one JSON line each: transcriptions alone (one after another),
 * chat alone (--chats streams kept in flight for --seconds), then both:
 * the same chat load with the same transcriptions during it. Reported:
 * transcription latency p50/p90, chat tokens/s and time to first token, and
 * the census of pool threads inside a job at once (tpool_census: with the
 * budget never above --threads). --urgent marks each transcription as a
 * realtime final (stt_urgent_add), which goes before batch work.
 *
 * Not a test and not built by make: it links libomni.a's engine and speech
 * parts only (OpenBLAS, PCRE2, libavutil's FFT, zlib), so a copy linked
 * against their static libraries runs on machines without the server's
 * (docs/engine.md, "One compute budget", has that command line).
 *   make BUILD=build build/libomni.a
 *   cc -O2 -pthread -I. tests/bench_compute.c build/libomni.a \
 *      $(pkg-config --libs openblas libpcre2-8 libavutil zlib) -lm -o build/bench_compute
 *   taskset -c 0,1 build/bench_compute -m llm.gguf -w ggml-tiny.bin -a speech.wav
 */
#include "llm/model.h"
#include "src/core/compute.h"
#include "src/core/omni.h"
#include "src/core/threadpool.h"
#include "src/engine/engine.h"
#include "src/stt/stt.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_CHATS 64
#define MAX_SAMPLES 4096

struct opts {
    const char *llm, *whisper, *wav;
    int threads, chats, gen, prompt, transcriptions;
    double seconds;
    bool budget, urgent;
};

// ---- audio ---------------------------------------------------------------------

/* A 16 kHz mono 16-bit PCM WAV (the speech samples are) as floats. */
static float *read_wav(const char *path, int64_t *n)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    unsigned char h[12];
    float *pcm = NULL;
    if (fread(h, 1, 12, f) != 12 || memcmp(h, "RIFF", 4) || memcmp(h + 8, "WAVE", 4))
        goto done;
    for (;;) {
        unsigned char ch[8];
        if (fread(ch, 1, 8, f) != 8)
            goto done;
        const uint32_t len = ch[4] | ch[5] << 8 | ch[6] << 16 | (uint32_t)ch[7] << 24;
        if (memcmp(ch, "data", 4)) {
            if (fseek(f, (long)(len + (len & 1)), SEEK_CUR))
                goto done;
            continue;
        }
        int16_t *s = malloc(len);
        if (!s || fread(s, 1, len, f) != len) {
            free(s);
            goto done;
        }
        *n = len / 2;
        if ((pcm = malloc((size_t)*n * sizeof *pcm)))
            for (int64_t i = 0; i < *n; i++)
                pcm[i] = s[i] / 32768.0f;
        free(s);
        goto done;
    }
done:
    fclose(f);
    return pcm;
}

// ---- percentiles -----------------------------------------------------------------

struct samples {
    double v[MAX_SAMPLES];
    int n;
};

static int cmp_double(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double pct(struct samples *s, int p)
{
    if (!s->n)
        return 0;
    qsort(s->v, (size_t)s->n, sizeof *s->v, cmp_double);
    return s->v[(s->n - 1) * p / 100];
}

// ---- transcriptions ----------------------------------------------------------------

struct tr_job {
    const float *pcm;
    int64_t n;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool done;
    int rc;
    char text[256];
};

static void tr_run(struct whisper_state *ws, void *user)
{
    struct tr_job *j = user;
    int rc = OMNI_ERR_LIMIT;
    if (ws) {
        struct whisper_full_params fp = stt_full_params(false);
        char err[256];
        rc = whisper_full(ws, &fp, j->pcm, j->n, err, sizeof err);
        char *t = rc == 0 ? stt_full_text(ws) : NULL;
        snprintf(j->text, sizeof j->text, "%s", t ? t : err);
        free(t);
    }
    pthread_mutex_lock(&j->mu);
    j->rc = rc;
    j->done = true;
    pthread_cond_signal(&j->cv);
    pthread_mutex_unlock(&j->mu);
}

/* n transcriptions one after another; their latencies (ms) into out. */
static int transcribe(struct stt *s, const float *pcm, int64_t n_pcm, int n, bool urgent,
                      struct samples *out)
{
    for (int i = 0; i < n; i++) {
        struct tr_job j = { .pcm = pcm, .n = n_pcm };
        pthread_mutex_init(&j.mu, NULL);
        pthread_cond_init(&j.cv, NULL);
        const double t0 = omni_time_s();
        if (urgent)
            stt_urgent_add(s, +1);
        if (stt_submit(s, tr_run, &j) < 0)
            return -1;
        pthread_mutex_lock(&j.mu);
        while (!j.done)
            pthread_cond_wait(&j.cv, &j.mu);
        pthread_mutex_unlock(&j.mu);
        if (urgent)
            stt_urgent_add(s, -1);
        if (j.rc < 0) {
            fprintf(stderr, "bench_compute: transcription: %s\n", j.text);
            return -1;
        }
        if (out->n < MAX_SAMPLES)
            out->v[out->n++] = (omni_time_s() - t0) * 1e3;
        pthread_mutex_destroy(&j.mu);
        pthread_cond_destroy(&j.cv);
    }
    return 0;
}

// ---- chat load ------------------------------------------------------------------------

/* --chats requests kept in flight: a driver thread submits a new one as
 * each ends, until stopped. */
struct chat {
    struct engine *e;
    const struct opts *o;
    int n_vocab;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int in_flight;                 /* {mu} */
    bool stop;                     /* {mu} */
    uint64_t seed;
    atomic_uint_fast64_t tokens;   /* generated, all requests */
    struct samples ttft;           /* {mu} of requests submitted while counting */
    bool counting;                 /* {mu} */
    pthread_t th;
};

static void chat_event(void *user, const struct engine_event *ev)
{
    struct chat *c = user;
    if (ev->type == ENGINE_EV_TOKEN) {
        atomic_fetch_add(&c->tokens, 1);
        return;
    }
    pthread_mutex_lock(&c->mu);
    if (c->counting && ev->type == ENGINE_EV_DONE && c->ttft.n < MAX_SAMPLES)
        c->ttft.v[c->ttft.n++] = ev->usage.ttft_ms;
    c->in_flight--;
    pthread_cond_signal(&c->cv);
    pthread_mutex_unlock(&c->mu);
}

static void *chat_main(void *arg)
{
    struct chat *c = arg;
    int32_t prompt[4096];
    const int np = c->o->prompt < 4096 ? c->o->prompt : 4096;
    pthread_mutex_lock(&c->mu);
    while (!c->stop) {
        if (c->in_flight >= c->o->chats) {
            pthread_cond_wait(&c->cv, &c->mu);
            continue;
        }
        for (int i = 0; i < np; i++) {
            c->seed = c->seed * 6364136223846793005ull + 1442695040888963407ull;
            prompt[i] = 3 + (int32_t)((c->seed >> 33) % (uint64_t)(c->n_vocab - 3));
        }
        struct engine_request rq = engine_default_request();
        rq.prompt = prompt;
        rq.n_prompt = np;
        rq.max_tokens = c->o->gen;
        rq.ignore_eog = true;
        rq.on_event = chat_event;
        rq.user = c;
        c->in_flight++;
        pthread_mutex_unlock(&c->mu);
        char err[256];
        const int rc = engine_submit(c->e, &rq, NULL, err, sizeof err);
        pthread_mutex_lock(&c->mu);
        if (rc < 0) {
            c->in_flight--;
            fprintf(stderr, "bench_compute: submit: %s\n", err);
            break;
        }
    }
    while (c->in_flight > 0) /* the requests still running end on their own */
        pthread_cond_wait(&c->cv, &c->mu);
    pthread_mutex_unlock(&c->mu);
    return NULL;
}

static void chat_start(struct chat *c)
{
    c->stop = false;
    c->ttft.n = 0;
    c->counting = true;
    pthread_create(&c->th, NULL, chat_main, c);
}

static void chat_stop(struct chat *c)
{
    pthread_mutex_lock(&c->mu);
    c->stop = true;
    c->counting = false;
    pthread_cond_signal(&c->cv);
    pthread_mutex_unlock(&c->mu);
    pthread_join(c->th, NULL);
}

// ---- phases ----------------------------------------------------------------------------

static void report(const struct opts *o, const char *phase, struct samples *tr, double tok_s,
                   struct samples *ttft, struct compute *budget)
{
    struct tpool_census cen;
    tpool_census_get(&cen);
    printf("{\"bench\":\"compute\",\"mode\":\"%s\",\"phase\":\"%s\",\"threads\":%d,"
           "\"urgent\":%s,\"transcriptions\":%d,\"transcribe_ms_p50\":%.0f,"
           "\"transcribe_ms_p90\":%.0f,\"chats\":%d,\"chat_tok_s\":%.2f,\"ttft_ms_p50\":%.0f,"
           "\"ttft_ms_p90\":%.0f,\"census_max_threads\":%d",
           o->budget ? "budget" : "no-budget", phase, o->threads, o->urgent ? "true" : "false",
           tr ? tr->n : 0, tr ? pct(tr, 50) : 0, tr ? pct(tr, 90) : 0,
           tok_s > 0 ? o->chats : 0, tok_s, ttft ? pct(ttft, 50) : 0, ttft ? pct(ttft, 90) : 0,
           cen.max);
    struct compute_stats st;
    compute_stats(budget, &st);
    for (int i = 0; i < st.n_clients; i++)
        printf(",\"%s_units\":%llu,\"%s_wait_s\":%.3f", st.client[i].name,
               (unsigned long long)st.client[i].acquires, st.client[i].name,
               st.client[i].wait_s);
    printf("}\n");
    fflush(stdout);
    tpool_census_enable(true); /* the next phase counts from zero */
}

static void usage(void)
{
    fprintf(stderr,
            "usage: bench_compute -m LLM.gguf -w WHISPER.bin -a SPEECH.wav [options]\n"
            "  --threads N          the budget, or each pool's size with --no-budget (default 2)\n"
            "  --no-budget          every workload its own pool (serve before the budget)\n"
            "  --chats N            chat requests in flight (default 4)\n"
            "  --gen N --prompt N   tokens generated / prompt tokens per request (48 / 32)\n"
            "  --transcriptions N   per phase (default 8)\n"
            "  --seconds S          chat-alone window (default 20)\n"
            "  --urgent             transcriptions count as realtime finals\n");
}

int main(int argc, char **argv)
{
    struct opts o = { .threads = 2, .chats = 4, .gen = 48, .prompt = 32, .transcriptions = 8,
                      .seconds = 20, .budget = true };
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--no-budget"))
            o.budget = false;
        else if (!strcmp(a, "--urgent"))
            o.urgent = true;
        else if (v && !strcmp(a, "-m"))
            o.llm = argv[++i];
        else if (v && !strcmp(a, "-w"))
            o.whisper = argv[++i];
        else if (v && !strcmp(a, "-a"))
            o.wav = argv[++i];
        else if (v && !strcmp(a, "--threads"))
            o.threads = atoi(argv[++i]);
        else if (v && !strcmp(a, "--chats"))
            o.chats = atoi(argv[++i]);
        else if (v && !strcmp(a, "--gen"))
            o.gen = atoi(argv[++i]);
        else if (v && !strcmp(a, "--prompt"))
            o.prompt = atoi(argv[++i]);
        else if (v && !strcmp(a, "--transcriptions"))
            o.transcriptions = atoi(argv[++i]);
        else if (v && !strcmp(a, "--seconds"))
            o.seconds = atof(argv[++i]);
        else {
            usage();
            return 2;
        }
    }
    if (!o.llm || !o.whisper || !o.wav || o.threads < 1 || o.chats < 1 || o.chats > MAX_CHATS ||
        o.gen < 1 || o.prompt < 1 || o.transcriptions < 1 || o.transcriptions > MAX_SAMPLES) {
        usage();
        return 2;
    }
    char err[512];
    int64_t n_pcm = 0;
    float *pcm = read_wav(o.wav, &n_pcm);
    if (!pcm) {
        fprintf(stderr, "bench_compute: %s: not a 16-bit PCM WAV\n", o.wav);
        return 1;
    }
    struct compute *budget = NULL;
    if (o.budget) {
        struct compute_params cp = compute_default_params();
        cp.n_threads = o.threads;
        budget = compute_new(&cp, err, sizeof err);
    }
    struct llm_model *m = llm_model_load(o.llm, NULL, err, sizeof err);
    struct engine_params ep = engine_default_params();
    ep.n_threads = o.threads;
    ep.compute = budget;
    ep.kv_memory_bytes = (size_t)256 << 20;
    struct engine *e = m ? engine_new(&ep, err, sizeof err) : NULL;
    if (!e || engine_add_model(e, m, "llm", err, sizeof err) < 0 ||
        engine_start(e, err, sizeof err) < 0) {
        fprintf(stderr, "bench_compute: %s\n", err);
        return 1;
    }
    struct stt_params sp = stt_default_params();
    sp.model_path = o.whisper;
    sp.n_workers = 1;
    sp.n_threads = o.threads;
    sp.compute = budget;
    struct stt *s = stt_new(&sp, err, sizeof err);
    if (!s) {
        fprintf(stderr, "bench_compute: %s\n", err);
        return 1;
    }
    struct chat c = { .e = e, .o = &o, .n_vocab = llm_model_hparams(m)->n_vocab, .seed = 42 };
    pthread_mutex_init(&c.mu, NULL);
    pthread_cond_init(&c.cv, NULL);

    /* warm-up: weights paged in, scratch grown */
    struct samples warm = { .n = 0 };
    if (transcribe(s, pcm, n_pcm, 1, false, &warm) < 0)
        return 1;
    tpool_census_enable(true);

    struct samples tr = { .n = 0 };
    if (transcribe(s, pcm, n_pcm, o.transcriptions, o.urgent, &tr) < 0)
        return 1;
    report(&o, "transcribe_alone", &tr, 0, NULL, budget);

    chat_start(&c);
    struct timespec ts = { (time_t)o.seconds, (long)((o.seconds - (time_t)o.seconds) * 1e9) };
    const uint64_t k0 = atomic_load(&c.tokens);
    const double t0 = omni_time_s();
    nanosleep(&ts, NULL);
    const double tok_s = (double)(atomic_load(&c.tokens) - k0) / (omni_time_s() - t0);
    pthread_mutex_lock(&c.mu);
    c.counting = false;
    struct samples ttft = c.ttft;
    pthread_mutex_unlock(&c.mu);
    report(&o, "chat_alone", NULL, tok_s, &ttft, budget);

    /* both: the chat load runs on (its in-flight requests were not
     * stopped), the transcriptions come during it */
    pthread_mutex_lock(&c.mu);
    c.ttft.n = 0;
    c.counting = true;
    pthread_mutex_unlock(&c.mu);
    tr.n = 0;
    const uint64_t k1 = atomic_load(&c.tokens);
    const double t1 = omni_time_s();
    if (transcribe(s, pcm, n_pcm, o.transcriptions, o.urgent, &tr) < 0)
        return 1;
    const double tok_s_both = (double)(atomic_load(&c.tokens) - k1) / (omni_time_s() - t1);
    pthread_mutex_lock(&c.mu);
    c.counting = false;
    ttft = c.ttft;
    pthread_mutex_unlock(&c.mu);
    report(&o, "both", &tr, tok_s_both, &ttft, budget);
    chat_stop(&c);

    stt_free(s);
    engine_free(e);
    llm_model_free(m);
    compute_free(budget);
    free(pcm);
    return 0;
}
