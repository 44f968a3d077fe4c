/* stt.c - the speech-to-text service: shared models, a FIFO of jobs and N
 * worker threads ("lanes") that each own a whisper_state (encoder output,
 * K/V caches). Every lane's forward passes go through one batcher, so N
 * transcriptions share each encoder and decoder pass on one copy of the
 * weights and one compute pool. Also the VAD "speech only" helper the HTTP
 * route uses. */
#include "src/stt/stt.h"

#include "src/core/omni.h"
#include "audio/whisper_batch.h"
#include "audio/whisper_dev.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#define STT_GAP_SAMPLES 1600   /* 100 ms of silence between joined speech segments */

struct stt_job {
    stt_job_fn fn;
    void *user;
    struct stt_job *next;
};

struct stt_worker {
    struct stt *svc;
    pthread_t thread;
    bool started;
    struct whisper_state *ws;
};

struct stt {
    struct stt_params p;
    struct whisper_model *model;
    struct vad_model *vad;
    struct whisper_batcher *batcher;
    struct whisper_dev *dev;       /* the passes on the GPU, or NULL */
    struct stt_worker *workers;
    int n_workers;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    struct stt_job *head, *tail;   /* {lock} */
    int n_queued;                  /* {lock} */
    atomic_int urgent;             /* sessions with a final waiting to be decoded */
    bool stopping;                 /* {lock} */
};

struct stt_params stt_default_params(void)
{
    return (struct stt_params){ .n_workers = 4, .max_queue = 64 };
}

static void *stt_worker_main(void *arg)
{
    struct stt_worker *w = arg;
    struct stt *s = w->svc;
    for (;;) {
        pthread_mutex_lock(&s->lock);
        while (!s->head && !s->stopping)
            pthread_cond_wait(&s->cond, &s->lock);
        if (s->stopping) {
            pthread_mutex_unlock(&s->lock);
            return NULL;
        }
        struct stt_job *j = s->head;
        s->head = j->next;
        if (!s->head)
            s->tail = NULL;
        s->n_queued--;
        pthread_mutex_unlock(&s->lock);
        j->fn(w->ws, j->user);
        free(j);
    }
}

/* A pass of the batcher is urgent while a realtime final waits: the
 * sessions hold partial decodes back then, so the passes serve finals. */
static bool stt_pass_urgent(void *user)
{
    return stt_urgent(user) > 0;
}

struct stt *stt_new(const struct stt_params *p, char *err, size_t errlen)
{
    if (!p->model_path) {
        omni_fail(err, errlen, OMNI_ERR_ARG, "stt: no model");
        return NULL;
    }
    struct stt *s = calloc(1, sizeof *s);
    if (!s) {
        omni_fail(err, errlen, OMNI_ERR_NOMEM, "stt: out of memory");
        return NULL;
    }
    s->p = *p;
    if (s->p.n_workers < 1)
        s->p.n_workers = 1;
    if (s->p.max_queue < 0)
        s->p.max_queue = 0;
    pthread_mutex_init(&s->lock, NULL);
    pthread_cond_init(&s->cond, NULL);
    if (!(s->model = whisper_model_load(p->model_path, err, errlen)))
        goto fail;
    if (p->vad_path && !(s->vad = vad_model_load(p->vad_path, err, errlen)))
        goto fail;
    struct whisper_batcher_params bp = whisper_batcher_default_params();
    bp.n_threads = s->p.n_threads; /* < 1: the budget's or every core */
    bp.compute = s->p.compute;
    bp.urgent = stt_pass_urgent;
    bp.urgent_user = s;
    if (p->device && !strncmp(p->device, "cuda", 4)) {
        struct whisper_dev_params dp = whisper_dev_default_params();
        dp.device = p->device[4] == ':' ? atoi(p->device + 5) : 0;
        dp.max_streams = s->p.n_workers;                        /* one state per worker */
        dp.max_seqs = s->p.n_workers * WHISPER_MAX_DECODERS;
        char derr[256];
        if (!(s->dev = whisper_dev_new(s->model, &dp, derr, sizeof derr)))
            OMNI_WARN("stt: %s: the speech model runs on the CPU", derr);
        else
            OMNI_INFO("stt: speech model on %s (%.0f MiB)", whisper_dev_name(s->dev),
                      whisper_dev_bytes(s->dev) / 1048576.0);
        bp.dev = s->dev;
    }
    if (!(s->batcher = whisper_batcher_new(s->model, &bp, err, errlen)))
        goto fail;
    if (!(s->workers = calloc((size_t)s->p.n_workers, sizeof *s->workers))) {
        omni_fail(err, errlen, OMNI_ERR_NOMEM, "stt: out of memory");
        goto fail;
    }
    for (int i = 0; i < s->p.n_workers; i++) {
        struct stt_worker *w = &s->workers[i];
        w->svc = s;
        s->n_workers++;
        if (!(w->ws = whisper_state_new_batched(s->batcher, err, errlen)))
            goto fail;
        if (pthread_create(&w->thread, NULL, stt_worker_main, w) != 0) {
            omni_fail(err, errlen, OMNI_ERR_NOMEM, "stt: cannot start a worker thread");
            goto fail;
        }
        w->started = true;
    }
    return s;
fail:
    stt_free(s);
    return NULL;
}

void stt_free(struct stt *s)
{
    if (!s)
        return;
    pthread_mutex_lock(&s->lock);
    s->stopping = true;
    pthread_cond_broadcast(&s->cond);
    pthread_mutex_unlock(&s->lock);
    for (int i = 0; i < s->n_workers; i++) {
        struct stt_worker *w = &s->workers[i];
        if (w->started)
            pthread_join(w->thread, NULL);
        whisper_state_free(w->ws);
    }
    /* Jobs nobody will run still own their data: let them clean up. */
    for (struct stt_job *j = s->head, *next; j; j = next) {
        next = j->next;
        j->fn(NULL, j->user);
        free(j);
    }
    free(s->workers);
    whisper_batcher_free(s->batcher);
    whisper_dev_free(s->dev);
    whisper_model_free(s->model);
    vad_model_free(s->vad);
    pthread_cond_destroy(&s->cond);
    pthread_mutex_destroy(&s->lock);
    free(s);
}

const struct whisper_model *stt_model(const struct stt *s) { return s->model; }
const struct vad_model *stt_vad(const struct stt *s) { return s->vad; }
int stt_n_workers(const struct stt *s) { return s->n_workers; }

void stt_urgent_add(struct stt *s, int delta) { atomic_fetch_add(&s->urgent, delta); }
int stt_urgent(struct stt *s) { return atomic_load(&s->urgent); }

void stt_batch_stats(struct stt *s, struct whisper_batcher_stats *out)
{
    whisper_batcher_stats(s->batcher, out);
}

int stt_submit(struct stt *s, stt_job_fn fn, void *user)
{
    struct stt_job *j = malloc(sizeof *j);
    if (!j)
        return OMNI_ERR_NOMEM;
    *j = (struct stt_job){ .fn = fn, .user = user };
    pthread_mutex_lock(&s->lock);
    if (s->stopping || s->n_queued >= s->p.max_queue) {
        pthread_mutex_unlock(&s->lock);
        free(j);
        return OMNI_ERR_LIMIT;
    }
    if (s->tail)
        s->tail->next = j;
    else
        s->head = j;
    s->tail = j;
    s->n_queued++;
    pthread_cond_signal(&s->cond);
    pthread_mutex_unlock(&s->lock);
    return 0;
}

// ---- speech-only audio ----------------------------------------------------------

int stt_speech_only(const struct vad_model *vad, const float *pcm, size_t n, float **out,
                    size_t *n_out, struct stt_span **spans, size_t *n_spans, char *err,
                    size_t errlen)
{
    *out = NULL;
    *spans = NULL;
    *n_out = *n_spans = 0;
    float *probs = NULL;
    size_t n_probs = 0;
    struct vad_segment *segs = NULL;
    size_t n_segs = 0;
    struct vad_params vp = vad_default_params();
    int rc = vad_detect(vad, pcm, n, &probs, &n_probs, err, errlen);
    if (rc == 0)
        rc = vad_segments_from_probs(probs, n_probs, &vp, &segs, &n_segs, err, errlen);
    free(probs);
    if (rc < 0 || n_segs == 0) {
        free(segs);
        return rc;
    }
    size_t total = 0;
    for (size_t i = 0; i < n_segs; i++) {
        int64_t a = segs[i].start_sample < 0 ? 0 : segs[i].start_sample;
        int64_t b = segs[i].end_sample > (int64_t)n ? (int64_t)n : segs[i].end_sample;
        segs[i].start_sample = a;
        segs[i].end_sample = b > a ? b : a;
        total += (size_t)(segs[i].end_sample - a) + (i ? STT_GAP_SAMPLES : 0);
    }
    float *buf = calloc(total ? total : 1, sizeof *buf);
    struct stt_span *sp = calloc(n_segs, sizeof *sp);
    if (!buf || !sp) {
        free(buf);
        free(sp);
        free(segs);
        return omni_fail(err, errlen, OMNI_ERR_NOMEM, "stt: out of memory");
    }
    size_t at = 0;
    for (size_t i = 0; i < n_segs; i++) {
        if (i)
            at += STT_GAP_SAMPLES;   /* calloc'd: silence */
        size_t len = (size_t)(segs[i].end_sample - segs[i].start_sample);
        memcpy(buf + at, pcm + segs[i].start_sample, len * sizeof *buf);
        sp[i] = (struct stt_span){ segs[i].start_sample, (int64_t)at, (int64_t)len };
        at += len;
    }
    free(segs);
    *out = buf;
    *n_out = total;
    *spans = sp;
    *n_spans = n_segs;
    return 0;
}

int64_t stt_map_ms(const struct stt_span *spans, size_t n_spans, int64_t ms)
{
    if (!spans || n_spans == 0)
        return ms;
    int64_t t = ms * (WHISPER_SAMPLE_RATE_HZ / 1000);
    size_t i = 0;
    while (i + 1 < n_spans && t >= spans[i + 1].dst_start)
        i++;
    int64_t off = t - spans[i].dst_start;
    if (off < 0)
        off = 0;
    if (off > spans[i].len)
        off = spans[i].len;   /* inside the gap after span i: its end */
    return (spans[i].src_start + off) / (WHISPER_SAMPLE_RATE_HZ / 1000);
}

char *stt_full_text(const struct whisper_state *ws)
{
    size_t len = 1;
    for (int i = 0; i < whisper_full_n_segments(ws); i++)
        len += strlen(whisper_full_get_segment(ws, i)->text);
    char *t = malloc(len), *at = t;
    if (!t)
        return NULL;
    for (int i = 0; i < whisper_full_n_segments(ws); i++) {
        const char *seg = whisper_full_get_segment(ws, i)->text;
        if (at == t)
            seg += strspn(seg, " \t\n");
        size_t n = strlen(seg);
        memcpy(at, seg, n);
        at += n;
    }
    *at = 0;
    return t;
}

struct whisper_full_params stt_full_params(bool timestamps)
{
    struct whisper_full_params p = whisper_full_default_params(WHISPER_SAMPLING_GREEDY);
    p.no_timestamps = !timestamps;
    return p;
}
