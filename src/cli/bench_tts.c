/* bench_tts.c - `omniserve bench-tts`: speed of neural speech synthesis.
 *
 *   omniserve bench-tts --codec DAC.gguf [--seconds 10] [--threads 2] [--n-q 2] [--json]
 *
 * The codec part: random codes for --seconds of audio decoded in one shot
 * and streamed frame by frame (the TTS path), median of --reps runs.
 * Prints codec frames/s, times real time (audio seconds per wall second),
 * the streamed / one-shot time ratio (the cost of the windows' context) and
 * the time to the first streamed chunk.
 *
 * With -m OUTETTS.gguf: whole syntheses of a 60-word paragraph (or --text)
 * through the tts module as `serve` runs them (a tts stream per request,
 * sentence by sentence, the engine batching the streams' language-model
 * rows), --concurrency N requests at once (a list: "1,4"), for each
 * --workers W (engine-voice sentences in flight at once; 1 is the old one
 * after another), --rounds R times interleaved; per level one JSON line
 * with the aggregate audio seconds per wall second, tokens/s (wall and
 * process CPU), rows per decode step, the median time to first audio and
 * its share of the request's time, the tokens/s ratio to the first level
 * and the load average. */
#include "audio/codec/dac.h"
#include "audio/tts/outetts.h"
#include "audio/tts/outetts_speak.h"
#include "audio/tts/tts.h"
#include "llm/model.h"
#include "src/core/compute.h"
#include "src/engine/engine.h"
#include "src/cli/args.h"
#include "src/cli/bench_util.h"
#include "src/cli/cli.h"
#include "src/core/omni.h"
#include "src/core/threadpool.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static void bench_tts_usage(FILE *f)
{
    fprintf(f,
            "usage: omniserve bench-tts --codec DAC.gguf [options]\n"
            "  --seconds S     audio per run (default 10)\n"
            "  --threads N     compute threads (default 2)\n"
            "  --n-q N         codebooks per frame (default 2, as OuteTTS 1.0)\n"
            "  --reps N        runs of each kind; the median counts (default 3)\n"
            "  --chunk N       frames per streamed chunk after the first (default 32)\n"
            "  --json          print only one JSON object\n"
            "  -m FILE         OuteTTS 1.0 GGUF: whole syntheses through the engine\n"
            "  --voice FILE    speaker JSON for -m (default: none)\n"
            "  --concurrency L requests at once, a list (default 1,4)\n"
            "  --text T        what to say (default: a 60-word paragraph)\n"
            "  --max-tokens N  per sentence (default: from the text's length)\n"
            "  --workers L     sentences of OuteTTS voices in flight at once, a list\n"
            "                  (default 4; 1 = one after another, as before)\n"
            "  --rounds N      repeat the workers x concurrency grid N times (default 1)\n"
            "  --scripted      with -m: the model's tokens are forced to well-formed words\n"
            "                  of random codes (each still costs its forward pass), so a\n"
            "                  random-weight model makes audio: time to first audio and\n"
            "                  the codec's share are measured on real work\n");
}

static const char *BENCH_TTS_TEXT =
    "The old lighthouse stood at the edge of the cliff, watching the grey sea roll in "
    "beneath a heavy sky. Every evening the keeper climbed the narrow stairs, lit the "
    "great lamp, and wrote a few lines in his worn notebook. Ships passed safely through "
    "the dark, and nobody in the village ever thought to thank him for the quiet work.";

static double bench_tts_cpu_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static double bench_tts_load(void)
{
    double l[3];
    return getloadavg(l, 3) < 1 ? -1 : l[0];
}

struct bench_tts_req {
    struct tts *t;
    const char *voice, *text;
    double t0, first_s, end_s;
    int64_t samples;
    bool done;
    char err[256];
    pthread_mutex_t mu;
    pthread_cond_t cv;
};

static void bench_tts_event(void *user, const struct tts_event *ev)
{
    struct bench_tts_req *r = user;
    pthread_mutex_lock(&r->mu);
    if (ev->type == TTS_EV_AUDIO) {
        if (r->samples == 0 && ev->n)
            r->first_s = omni_time_s() - r->t0;
        r->samples += (int64_t)ev->n;
    } else if (ev->type == TTS_EV_DONE) {
        if (ev->error)
            snprintf(r->err, sizeof r->err, "%s", ev->error);
        r->end_s = omni_time_s() - r->t0;
        r->done = true;
        pthread_cond_signal(&r->cv);
    }
    pthread_mutex_unlock(&r->mu);
}

/* one request as the server makes it: a tts stream with the whole text */
static void *bench_tts_worker(void *arg)
{
    struct bench_tts_req *r = arg;
    struct tts_stream_params sp = tts_stream_default_params();
    sp.voice = r->voice;
    int code = 0;
    r->t0 = omni_time_s();
    struct tts_stream *s = tts_stream_new(r->t, &sp, bench_tts_event, r, &code, r->err,
                                          sizeof r->err);
    if (!s) {
        r->done = true;
        return NULL;
    }
    tts_stream_push(s, r->text, strlen(r->text));
    tts_stream_finish(s);
    pthread_mutex_lock(&r->mu);
    while (!r->done)
        pthread_cond_wait(&r->cv, &r->mu);
    pthread_mutex_unlock(&r->mu);
    tts_stream_free(s);
    return NULL;
}

/* One level: n requests at once through t; 0, or -1 with err set. */
static int bench_tts_level(struct tts *t, struct engine *e, const char *voice, const char *text,
                           int n, int workers, bool scripted, int rate, double *agg_out,
                           double base, char *err, size_t errlen)
{
    struct bench_tts_req *r = calloc((size_t)n, sizeof *r);
    pthread_t *th = calloc((size_t)n, sizeof *th);
    double *ttfa = calloc((size_t)n, sizeof *ttfa), *share = calloc((size_t)n, sizeof *share);
    int rc = -1, started = 0;
    if (!r || !th || !ttfa || !share) {
        snprintf(err, errlen, "out of memory");
        goto out;
    }
    struct engine_stats e0, e1;
    engine_stats(e, &e0);
    double cpu0 = bench_tts_cpu_s(), t0 = omni_time_s();
    for (int i = 0; i < n; i++) {
        r[i] = (struct bench_tts_req){ .t = t, .voice = voice, .text = text };
        pthread_mutex_init(&r[i].mu, NULL);
        pthread_cond_init(&r[i].cv, NULL);
        if (pthread_create(&th[i], NULL, bench_tts_worker, &r[i]) != 0)
            break;
        started++;
    }
    for (int i = 0; i < started; i++)
        pthread_join(th[i], NULL);
    double wall = omni_time_s() - t0, cpu = bench_tts_cpu_s() - cpu0, audio = 0;
    engine_stats(e, &e1);
    bool ok = started == n;
    if (!ok)
        snprintf(err, errlen, "cannot start request threads");
    for (int i = 0; i < started && ok; i++) {
        if (r[i].err[0]) {
            snprintf(err, errlen, "request %d: %s", i, r[i].err);
            ok = false;
        }
        audio += (double)r[i].samples / rate;
        ttfa[i] = r[i].samples ? r[i].first_s * 1e3 : r[i].end_s * 1e3;
        share[i] = r[i].end_s > 0 ? ttfa[i] / 1e3 / r[i].end_s : 0;
    }
    for (int i = 0; i < started; i++) {
        pthread_mutex_destroy(&r[i].mu);
        pthread_cond_destroy(&r[i].cv);
    }
    if (ok) {
        double toks = (double)(e1.generated_tokens - e0.generated_tokens);
        uint64_t ds = e1.decode_steps - e0.decode_steps, dr = e1.decode_rows - e0.decode_rows;
        *agg_out = toks / wall;
        printf("{\"workers\":%d,\"concurrency\":%d,\"scripted\":%s,"
               "\"wall_s\":%.3f,\"cpu_s\":%.3f,"
               "\"audio_s\":%.3f,\"x_realtime\":%.4f,\"tokens\":%.0f,\"tokens_per_s\":%.2f,"
               "\"tokens_per_cpu_s\":%.2f,\"rows_per_decode_step\":%.2f,"
               "\"decode_step_ms\":%.2f,\"ttfa_ms_median\":%.1f,\"ttfa_share_median\":%.4f,"
               "\"tokens_per_s_vs_base\":%.3f,\"load\":%.2f}\n",
               workers, n, scripted ? "true" : "false", wall, cpu, audio, audio / wall, toks,
               toks / wall, cpu > 0 ? toks / cpu : 0,
               ds ? (double)dr / (double)ds : 0,
               ds ? (e1.decode_step_ms - e0.decode_step_ms) / (double)ds : 0,
               bench_median(ttfa, n), bench_median(share, n),
               base > 0 ? toks / wall / base : 1.0, bench_tts_load());
        fflush(stdout);
        rc = 0;
    }
out:
    free(r);
    free(th);
    free(ttfa);
    free(share);
    return rc;
}

/* -m: whole syntheses through the tts module (as serve runs them) at each
 * concurrency level, for each number of engine-voice workers, --rounds
 * times interleaved; 0 or 1 */
static int bench_tts_lm(const char *lm_path, const struct dac_model *dac, const char *voice,
                        const char *text, const int *conc, int n_conc, const int *workers,
                        int n_workers, int rounds, int threads, int max_tokens, bool scripted)
{
    char err[512] = "";
    int rc = 1;
    struct llm_model *m = NULL;
    struct compute *c = NULL;
    struct engine *e = NULL;
    struct tts *ts[8] = { 0 };
    char dir[64] = "", link_path[128] = "";
    const char *voice_id = "outetts";
    struct compute_params cp = compute_default_params();
    cp.n_threads = threads;
    struct engine_params ep = engine_default_params();
    ep.n_threads = threads;
    ep.kv_memory_bytes = (size_t)1 << 30;
    if (voice) {   /* the speaker file as voice "bench" of a voices directory */
        snprintf(dir, sizeof dir, "/tmp/omni-bench-tts-XXXXXX");
        char abs[4096];
        if (!mkdtemp(dir) || !realpath(voice, abs)) {
            snprintf(err, sizeof err, "%s: cannot read the speaker file", voice);
            dir[0] = 0;
            goto fail;
        }
        snprintf(link_path, sizeof link_path, "%s/bench.json", dir);
        if (symlink(abs, link_path) != 0) {
            snprintf(err, sizeof err, "cannot link %s", link_path);
            goto fail;
        }
        voice_id = "bench";
    }
    if (!(m = llm_model_load(lm_path, NULL, err, sizeof err)) ||
        !(c = compute_new(&cp, err, sizeof err)))
        goto fail;
    ep.compute = c;
    compute_set_default(c);   /* the tts module's decoder pools join this budget */
    if (!(e = engine_new(&ep, err, sizeof err)) ||
        engine_add_model(e, m, "outetts", err, sizeof err) < 0 || engine_start(e, err, sizeof err) < 0)
        goto fail;
    for (int w = 0; w < n_workers; w++) {
        struct tts_params tp = tts_default_params();
        tp.engine_workers = workers[w];
        tp.engine_max_tokens = max_tokens;
        tp.engine_scripted = scripted;
        if (!(ts[w] = tts_new(&tp, err, sizeof err)) ||
            tts_add_outetts(ts[w], e, 0, dac, voice ? dir : NULL, err, sizeof err) < 0)
            goto fail;
    }
    int rate = dac_get_info(dac)->sample_rate;
    for (int round = 0; round < rounds; round++)
        for (int w = 0; w < n_workers; w++) {
            double base = 0;
            for (int k = 0; k < n_conc; k++) {
                double agg = 0;
                if (bench_tts_level(ts[w], e, voice_id, text, conc[k], workers[w], scripted,
                                    rate, &agg, base, err, sizeof err) < 0)
                    goto fail;
                if (k == 0)
                    base = agg;
            }
        }
    rc = 0;
    goto done;
fail:
    fprintf(stderr, "omniserve bench-tts: %s\n", err);
done:
    for (int w = 0; w < 8; w++)
        tts_free(ts[w]);
    engine_free(e);
    compute_set_default(NULL);
    compute_free(c);
    llm_model_free(m);
    if (link_path[0])
        unlink(link_path);
    if (dir[0])
        rmdir(dir);
    return rc;
}

/* seconds for a streamed decode of codes (frame-major), and to its first chunk */
static double bench_tts_stream(const struct dac_model *m, struct tpool *tp, int chunk,
                               const int32_t *fm, int n_q, int64_t n_frames, double *first_s,
                               char *err, size_t errlen)
{
    struct dac_stream_params p = dac_stream_default_params();
    p.chunk_frames = chunk;
    struct dac_stream *s = dac_stream_new(m, &p, n_q, err, errlen);
    if (!s)
        return -1;
    const float *part;
    int64_t k;
    *first_s = -1;
    double t0 = omni_time_s();
    for (int64_t f = 0; f < n_frames; f++) {
        if (dac_stream_push(s, tp, fm + f * n_q, 1, &part, &k, err, errlen) < 0) {
            dac_stream_free(s);
            return -1;
        }
        if (k > 0 && *first_s < 0)
            *first_s = omni_time_s() - t0;
    }
    int rc = dac_stream_finish(s, tp, &part, &k, err, errlen);
    double dt = omni_time_s() - t0;
    if (*first_s < 0)
        *first_s = dt;
    dac_stream_free(s);
    return rc < 0 ? -1 : dt;
}

int cli_bench_tts(int argc, char **argv)
{
    const char *codec = NULL, *lm = NULL, *voice = NULL, *text = BENCH_TTS_TEXT;
    int conc[8] = { 1, 4 }, n_conc = 2, workers[8] = { 4 }, n_workers = 1;
    long rounds = 1;
    long max_tokens = 0;
    double seconds = 10;
    long threads = 2, n_q = 2, reps = 3, chunk = 32;
    bool json = false, scripted = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--codec") && i + 1 < argc)
            codec = argv[++i];
        else if (!strcmp(a, "--seconds") && i + 1 < argc) {
            if (cli_double("bench-tts", a, argv[++i], 0.1, 3600, &seconds))
                return 2;
        } else if (!strcmp(a, "--threads") && i + 1 < argc) {
            if (cli_long("bench-tts", a, argv[++i], 1, 256, &threads))
                return 2;
        } else if (!strcmp(a, "--n-q") && i + 1 < argc) {
            if (cli_long("bench-tts", a, argv[++i], 1, 64, &n_q))
                return 2;
        } else if (!strcmp(a, "--reps") && i + 1 < argc) {
            if (cli_long("bench-tts", a, argv[++i], 1, 100, &reps))
                return 2;
        } else if (!strcmp(a, "--chunk") && i + 1 < argc) {
            if (cli_long("bench-tts", a, argv[++i], 1, 4096, &chunk))
                return 2;
        } else if (!strcmp(a, "--json"))
            json = true;
        else if (!strcmp(a, "--scripted"))
            scripted = true;
        else if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            bench_tts_usage(stdout);
            return 0;
        } else if (!strcmp(a, "-m") && i + 1 < argc) {
            lm = argv[++i];
        } else if (!strcmp(a, "--voice") && i + 1 < argc) {
            voice = argv[++i];
        } else if (!strcmp(a, "--text") && i + 1 < argc) {
            text = argv[++i];
        } else if (!strcmp(a, "--max-tokens") && i + 1 < argc) {
            if (cli_long("bench-tts", a, argv[++i], 1, 1 << 20, &max_tokens))
                return 2;
        } else if (!strcmp(a, "--workers") && i + 1 < argc) {
            if ((n_workers = cli_int_list(argv[++i], 1, TTS_MAX_ENGINE_WORKERS, workers, 8)) <= 0) {
                fprintf(stderr, "omniserve bench-tts: --workers: a list of 1..%d, e.g. 1,4\n",
                        TTS_MAX_ENGINE_WORKERS);
                return 2;
            }
        } else if (!strcmp(a, "--rounds") && i + 1 < argc) {
            if (cli_long("bench-tts", a, argv[++i], 1, 100, &rounds))
                return 2;
        } else if (!strcmp(a, "--concurrency") && i + 1 < argc) {
            if ((n_conc = cli_int_list(argv[++i], 1, 64, conc, 8)) <= 0) {
                fprintf(stderr, "omniserve bench-tts: --concurrency: a list of 1..64, e.g. 1,4\n");
                return 2;
            }
        } else {
            fprintf(stderr, "omniserve bench-tts: unknown or incomplete option '%s'\n", a);
            bench_tts_usage(stderr);
            return 2;
        }
    }
    if (!codec) {
        bench_tts_usage(stderr);
        return 2;
    }
    char err[512] = "";
    int rc = 1;
    struct tpool *tp = NULL;
    int32_t *cm = NULL, *fm = NULL;
    float *pcm = NULL;
    double *t_one = calloc((size_t)reps, sizeof *t_one);
    double *t_str = calloc((size_t)reps, sizeof *t_str);
    double *t_first = calloc((size_t)reps, sizeof *t_first);
    struct dac_model *m = dac_load(codec, err, sizeof err);
    if (!m || !t_one || !t_str || !t_first)
        goto fail;
    const struct dac_info *I = dac_get_info(m);
    if (lm) {
        rc = bench_tts_lm(lm, m, voice, text, conc, n_conc, workers, n_workers, (int)rounds,
                          (int)threads, (int)max_tokens, scripted);
        goto done;
    }
    if (n_q > I->n_codebooks) {
        snprintf(err, sizeof err, "--n-q %ld: %s has %d codebooks", n_q, codec, I->n_codebooks);
        goto fail;
    }
    if (!(tp = tpool_new((int)threads, err, sizeof err)))
        goto fail;
    int64_t n_frames = (int64_t)(seconds * I->sample_rate / I->hop + 0.5);
    if (n_frames < 1)
        n_frames = 1;
    cm = malloc((size_t)n_frames * n_q * sizeof *cm);
    fm = malloc((size_t)n_frames * n_q * sizeof *fm);
    if (!cm || !fm) {
        snprintf(err, sizeof err, "out of memory");
        goto fail;
    }
    uint32_t seed = 42;
    for (int64_t f = 0; f < n_frames; f++)
        for (int q = 0; q < n_q; q++) {
            seed = seed * 1664525u + 1013904223u;
            int32_t c = (int32_t)((seed >> 8) % (uint32_t)I->codebook_size);
            cm[q * n_frames + f] = c;
            fm[f * n_q + q] = c;
        }
    int64_t n = 0;
    for (long r = 0; r < reps; r++) {
        double t0 = omni_time_s();
        if (dac_decode(m, tp, cm, (int)n_q, n_frames, &pcm, &n, err, sizeof err) < 0)
            goto fail;
        t_one[r] = omni_time_s() - t0;
        free(pcm);
        pcm = NULL;
        if ((t_str[r] = bench_tts_stream(m, tp, (int)chunk, fm, (int)n_q, n_frames, &t_first[r],
                                         err, sizeof err)) < 0)
            goto fail;
    }
    double one = bench_median(t_one, (int)reps), str = bench_median(t_str, (int)reps);
    double first = bench_median(t_first, (int)reps), audio_s = (double)n / I->sample_rate;
    if (!json)
        fprintf(stderr, "bench-tts: codec %s: %d Hz, hop %d, %lld M params; %lld frames x %ld "
                "codebooks = %.2f s of audio, %ld threads, %ld reps (medians)\n", codec,
                I->sample_rate, I->hop, (long long)(I->n_params / 1000000), (long long)n_frames,
                n_q, audio_s, threads, reps);
    printf("{\"codec_frames\":%lld,\"audio_s\":%.3f,\"threads\":%ld,\"n_q\":%ld,"
           "\"codec_one_shot_s\":%.4f,\"codec_frames_per_s\":%.1f,\"codec_x_realtime\":%.3f,"
           "\"stream_s\":%.4f,\"stream_x_realtime\":%.3f,\"stream_vs_one_shot\":%.3f,"
           "\"stream_first_chunk_ms\":%.1f,\"context_frames\":%d,\"chunk_frames\":%ld}\n",
           (long long)n_frames, audio_s, threads, n_q, one, n_frames / one, audio_s / one, str,
           audio_s / str, str / one, first * 1e3, dac_context_frames(m), chunk);
    rc = 0;
    goto done;
fail:
    fprintf(stderr, "omniserve bench-tts: %s\n", err[0] ? err : "out of memory");
done:
    free(pcm);
    free(cm);
    free(fm);
    free(t_one);
    free(t_str);
    free(t_first);
    tpool_free(tp);
    dac_free(m);
    return rc;
}
