/* bench_whisper_dev.c - speed of Whisper's passes on a backend
 * (audio/whisper_dev.c) beside the CPU forward (whisper_forward.c) on the
 * same machine: per run, B streams each encode one 30 s window (the
 * device: in passes of up to 4 windows; the CPU: one state at a time on
 * a pool of --threads), then decode a 3-token prompt and N greedy steps,
 * every step one batched pass over the B streams' rows. Median of --reps
 * after one warm-up; one JSON line per (backend, B) on stdout, and for B =
 * 1 whether the greedy tokens of the device and the CPU agree.
 *   bench_whisper_dev -m ggml-base.en.bin [-n 32] [-b 1,8] [-r 3] [--threads 16]
 *                     [--backend cuda] [--no-cpu] */
#include "audio/whisper.h"
#include "audio/whisper_dev.h"
#include "audio/whisper_impl.h"
#include "src/core/omni.h"
#include "src/core/threadpool.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_B 64

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static int argmax_row(const float *x, int n)
{
    int best = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[best])
            best = i;
    return best;
}

struct run {
    double enc_s, dec_s; /* all B windows; N steps */
    int32_t toks[512];   /* stream 0's greedy tokens */
};

/* One run: B states encode feats (the device: whisper_dev_encode in passes;
 * the CPU: whisper_forward_encode per state), then prompt + n steps. */
static int one_run(struct whisper_model *m, struct whisper_dev *dev, struct whisper_work *work,
                   struct whisper_state **st, int B, const float *feats, int n, struct run *r, char *err,
                   size_t errlen)
{
    const struct whisper_hparams *hp = whisper_model_hparams(m);
    const int nv = hp->n_vocab;
    int32_t sot = whisper_token_special(m, WHISPER_TOKEN_SOT);
    int32_t prompt[3] = { sot >= 0 ? sot : 1, sot >= 0 ? sot + 1 : 2, sot >= 0 ? sot + 2 : 3 };
    const float *mel[MAX_B];
    int frames[MAX_B], off[MAX_B], ctx[MAX_B];
    for (int i = 0; i < B; i++) {
        mel[i] = feats;
        frames[i] = 3000;
        off[i] = 0;
        ctx[i] = hp->n_audio_ctx;
        st[i]->n_ctx = 0;
    }
    double t0 = now_s();
    int rc = 0;
    if (dev)
        rc = whisper_dev_encode(dev, st, mel, frames, off, ctx, B, err, errlen);
    else
        for (int i = 0; i < B && rc == 0; i++)
            rc = whisper_forward_encode(work, &st[i], &mel[i], &frames[i], &off[i], &ctx[i], 1, err, errlen);
    r->enc_s = now_s() - t0;
    if (rc < 0)
        return rc;
    struct whisper_row rows[MAX_B * 3];
    for (int i = 0; i < B; i++)
        if ((rc = whisper_state_logits_reserve(st[i], 1, err, errlen)) < 0)
            return rc;
    /* the prompt of every stream in one pass */
    for (int i = 0; i < B; i++)
        for (int t = 0; t < 3; t++)
            rows[i * 3 + t] = (struct whisper_row){ st[i], 0, t, t == 2 ? 0 : -1, prompt[t] };
    rc = dev ? whisper_dev_decode(dev, rows, 3 * B, err, errlen) : whisper_forward_decode(work, rows, 3 * B, err, errlen);
    if (rc < 0)
        return rc;
    t0 = now_s();
    for (int s = 0; s < n; s++) {
        for (int i = 0; i < B; i++) {
            const int32_t tok = argmax_row(st[i]->logits, nv);
            if (i == 0)
                r->toks[s] = tok;
            rows[i] = (struct whisper_row){ st[i], 0, 3 + s, 0, tok };
        }
        rc = dev ? whisper_dev_decode(dev, rows, B, err, errlen) : whisper_forward_decode(work, rows, B, err, errlen);
        if (rc < 0)
            return rc;
    }
    r->dec_s = now_s() - t0;
    return 0;
}

int main(int argc, char **argv)
{
    const char *path = NULL, *backend = "cuda", *bs = "1,8";
    int n = 32, reps = 3, threads = 16;
    bool cpu = true;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-m") && i + 1 < argc)
            path = argv[++i];
        else if (!strcmp(argv[i], "-n") && i + 1 < argc)
            n = atoi(argv[++i]);
        else if (!strcmp(argv[i], "-b") && i + 1 < argc)
            bs = argv[++i];
        else if (!strcmp(argv[i], "-r") && i + 1 < argc)
            reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--threads") && i + 1 < argc)
            threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--backend") && i + 1 < argc)
            backend = argv[++i];
        else if (!strcmp(argv[i], "--no-cpu"))
            cpu = false;
        else {
            fprintf(stderr, "usage: %s -m MODEL.bin [-n 32] [-b 1,8] [-r 3] [--threads 16] [--backend cuda] "
                            "[--no-cpu]\n", argv[0]);
            return 2;
        }
    }
    if (!path || n < 1 || n > 400 || reps < 1 || threads < 1) {
        fprintf(stderr, "bench_whisper_dev: -m MODEL needed; -n 1..400, -r and --threads >= 1\n");
        return 2;
    }
    char err[256];
    struct whisper_model *m = whisper_model_load(path, err, sizeof err);
    if (!m) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    const struct whisper_hparams *hp = whisper_model_hparams(m);
    if (n + 3 > hp->n_text_ctx)
        n = hp->n_text_ctx - 3;
    float *feats = malloc((size_t)hp->n_mels * 3000 * sizeof(float));
    for (int c = 0; feats && c < hp->n_mels; c++)
        for (int t = 0; t < 3000; t++)
            feats[c * 3000 + t] = (float)(sin(0.0021 * (c + 1) * t + 0.37 * c) + 0.25 * cos(0.05 * t));
    struct whisper_dev_params dp = whisper_dev_default_params();
    dp.backend = backend;
    dp.max_streams = MAX_B;
    dp.max_seqs = MAX_B;
    struct whisper_dev *dev = whisper_dev_new(m, &dp, err, sizeof err);
    if (!dev || !feats) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    fprintf(stderr, "bench_whisper_dev: %s on %s (%.1f MiB of device memory)\n", path, whisper_dev_name(dev),
            whisper_dev_bytes(dev) / 1048576.0);
    struct tpool *tp = tpool_new(threads, err, sizeof err);
    struct whisper_work *work = tp ? whisper_work_new(m, tp) : NULL;
    if (!work) {
        fprintf(stderr, "bench_whisper_dev: no pool\n");
        return 1;
    }
    int32_t dev_toks[512] = { 0 };
    for (const char *p = bs; p && *p;) {
        const int B = atoi(p);
        p = strchr(p, ',');
        p = p ? p + 1 : NULL;
        if (B < 1 || B > MAX_B)
            continue;
        for (int side = 0; side < (cpu ? 2 : 1); side++) {
            struct whisper_state *st[MAX_B];
            for (int i = 0; i < B; i++)
                st[i] = whisper_state_new(m, NULL, err, sizeof err);
            struct whisper_dev *d = side == 0 ? dev : NULL;
            struct run r;
            double enc[16], dec[16];
            const int R = side == 0 ? reps : 1; /* the CPU: one timed run */
            /* a warm-up run on the device (the CPU needs none: its one timed run is long) */
            int rc = side == 0 ? one_run(m, d, work, st, B, feats, 4, &r, err, sizeof err) : 0;
            for (int k = 0; k < R && k < 16 && rc == 0; k++) {
                rc = one_run(m, d, work, st, B, feats, n, &r, err, sizeof err);
                enc[k] = r.enc_s;
                dec[k] = r.dec_s;
            }
            if (rc < 0) {
                fprintf(stderr, "bench_whisper_dev: %s\n", err);
                return 1;
            }
            qsort(enc, R, sizeof *enc, cmp_double);
            qsort(dec, R, sizeof *dec, cmp_double);
            int agree = -1;
            if (B == 1 && side == 0)
                memcpy(dev_toks, r.toks, sizeof dev_toks);
            if (B == 1 && side == 1)
                for (agree = 0; agree < n && dev_toks[agree] == r.toks[agree]; agree++)
                    ;
            printf("{\"backend\":\"%s\",\"model\":\"%s\",\"streams\":%d,\"steps\":%d,\"encode_ms\":%.2f,"
                   "\"encode_ms_per_window\":%.2f,\"decode_ms_per_step\":%.3f,\"decode_tok_s\":%.1f,"
                   "\"threads\":%d%s",
                   side == 0 ? backend : "cpu-forward", path, B, n, enc[R / 2] * 1e3, enc[R / 2] * 1e3 / B,
                   dec[R / 2] * 1e3 / n, B * n / dec[R / 2], side == 0 ? 0 : threads, agree >= 0 ? "" : "}\n");
            if (agree >= 0)
                printf(",\"greedy_tokens_equal_to_device\":%d}\n", agree);
            fflush(stdout);
            for (int i = 0; i < B; i++)
                whisper_state_free(st[i]);
        }
    }
    whisper_work_free(work);
    tpool_free(tp);
    whisper_dev_free(dev);
    whisper_model_free(m);
    free(feats);
    return 0;
}
