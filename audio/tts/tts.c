/* tts.c - voices, streams and the synthesis workers behind tts.h.
 *
 * One worker thread per struct tts speaks the local voices (espeak-ng) one
 * sentence at a time: urgent streams first, otherwise the sentence queued
 * earliest. Interleaving at sentence boundaries keeps every stream's first
 * audio early; running sentences one at a time keeps synthesis to one core,
 * inside the process's compute budget, and suits espeak-ng, whose state is
 * process-wide. Voices run by the engine (OuteTTS) get engine_workers more
 * workers (tts_params) once such a backend is added: their sentences wait on the
 * engine, whose steps batch the language models of every stream at once,
 * so several streams speak at the same time, each sentence of a stream
 * still in order (a stream is served by one worker at a time). */
#include "audio/tts/tts.h"

#include "audio/tts/tts_int.h"
#include "src/core/compute.h"
#include "src/core/omni.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TTS_MAX_BACKENDS 4
#define TTS_SENTENCE_MAX_CHARS 300  /* longer sentences are cut at a comma or space */

struct tts_sentence {
    struct tts_sentence *next;
    uint64_t seq;                   /* queue order across streams */
    char text[];
};

struct tts_stream {
    struct tts *t;                  /* immutable */
    struct tts_voice_info voice;    /* immutable */
    int backend;                    /* immutable: index into t->backends */
    float speed;                    /* immutable */
    bool urgent;                    /* immutable */
    tts_event_fn fn;                /* immutable */
    void *user;                     /* immutable */
    struct tts_splitter *split;     /* the pushing thread's */
    size_t pushed_bytes;            /* the pushing thread's */
    bool spoken;                    /* the worker's: a sentence of it was synthesized */
    atomic_bool cancelled;
    struct tts_sentence *head, *tail; /* {t->lock} */
    bool finished;                  /* {t->lock} no more text will come */
    bool busy;                      /* {t->lock} the worker is speaking for it */
    bool done;                      /* {t->lock} TTS_EV_DONE was sent */
    bool detached;                  /* {t->lock} the worker frees it after DONE */
    char error[256];                /* {t->lock} set once synthesis failed */
    struct tts_stream *prev, *next; /* {t->lock} */
};

struct tts {
    struct tts_params p;
    struct tts_backend backends[TTS_MAX_BACKENDS];
    int n_backends;
    pthread_mutex_t lock;
    pthread_cond_t work;            /* the worker waits for sentences */
    pthread_cond_t idle;            /* stream_free waits for its DONE */
    pthread_t worker;               /* local voices */
    bool worker_started;
    pthread_t engine_workers[TTS_MAX_ENGINE_WORKERS];   /* voices run by the engine */
    int n_engine_workers;           /* started; written under lock, before the backend shows */
    struct compute_client *budget;  /* the process's compute budget, one thread; NULL = none */
    bool stop;                      /* {lock} */
    struct tts_stream *streams;     /* {lock} */
    int n_streams;                  /* {lock} */
    uint64_t seq;                   /* {lock} */
};

struct tts_params tts_default_params(void)
{
    return (struct tts_params){ .max_streams = 64, .max_text_bytes = 1u << 20,
                                .engine_workers = 4 };
}

struct tts_stream_params tts_stream_default_params(void)
{
    return (struct tts_stream_params){ .voice = "alloy", .speed = 1.0f };
}

// ---- voices -----------------------------------------------------------------

int tts_voice_count(const struct tts *t)
{
    int n = 0;
    for (int b = 0; b < t->n_backends; b++)
        n += t->backends[b].n_voices(t->backends[b].state);
    return n;
}

int tts_voice_get(const struct tts *t, int i, struct tts_voice_info *out)
{
    for (int b = 0; b < t->n_backends && i >= 0; b++) {
        int n = t->backends[b].n_voices(t->backends[b].state);
        if (i < n)
            return t->backends[b].voice(t->backends[b].state, i, out);
        i -= n;
    }
    return OMNI_ERR_NOTFOUND;
}

static int tts_find_backend(const struct tts *t, const char *id, struct tts_voice_info *out)
{
    for (int b = 0; b < t->n_backends; b++)
        if (t->backends[b].find(t->backends[b].state, id, out) == 0)
            return b;
    return OMNI_ERR_NOTFOUND;
}

int tts_voice_find(const struct tts *t, const char *id, struct tts_voice_info *out, char *err,
                   size_t errlen)
{
    if (!id || !*id)
        id = "alloy";
    if (tts_find_backend(t, id, out) < 0)
        return omni_fail(err, errlen, OMNI_ERR_NOTFOUND,
                         "tts: no voice '%.64s' (GET /v1/audio/voices lists them)", id);
    return 0;
}

// ---- the worker ---------------------------------------------------------------

static int tts_emit_pcm(void *user, const float *pcm, size_t n)
{
    struct tts_stream *s = user;
    if (atomic_load(&s->cancelled))
        return 1;
    if (n == 0)   /* a backend asking whether to go on (tts_int.h) */
        return 0;
    struct tts_event ev = { .type = TTS_EV_AUDIO, .pcm = pcm, .n = n,
                            .sample_rate_hz = s->voice.sample_rate_hz };
    s->fn(s->user, &ev);
    return atomic_load(&s->cancelled) ? 1 : 0;
}

struct tts_slow {
    float *pcm;
    size_t n, cap;
    bool nomem;
};

static int tts_collect_pcm(void *user, const float *pcm, size_t n)
{
    struct tts_slow *c = user;
    if (n == 0)
        return 0;
    if (c->n + n > c->cap) {
        size_t cap = c->cap ? c->cap * 2 : 65536;
        while (cap < c->n + n)
            cap *= 2;
        float *np = realloc(c->pcm, cap * sizeof *np);
        if (!np) {
            c->nomem = true;
            return 1;
        }
        c->pcm = np;
        c->cap = cap;
    }
    memcpy(c->pcm + c->n, pcm, n * sizeof *pcm);
    c->n += n;
    return 0;
}

/* One sentence of s through its backend (worker thread). Below the
 * backend's slowest speed the sentence is made at that speed and stretched. */
static int tts_speak(struct tts *t, struct tts_stream *s, const char *text, char *err, size_t errlen)
{
    const struct tts_backend *b = &t->backends[s->backend];
    if (s->speed >= b->min_speed)
        return b->synth(b->state, &s->voice, s->speed, text, tts_emit_pcm, s, err, errlen);
    struct tts_slow c = { 0 };
    int rc = b->synth(b->state, &s->voice, b->min_speed, text, tts_collect_pcm, &c, err, errlen);
    if (c.nomem)
        rc = omni_fail(err, errlen, OMNI_ERR_NOMEM, "tts: out of memory");
    float *y = NULL;
    size_t ny = 0;
    if (rc == 0 && c.n)
        rc = tts_stretch(c.pcm, c.n, s->voice.sample_rate_hz, b->min_speed / s->speed, &y, &ny);
    free(c.pcm);
    if (rc < 0) {
        free(y);
        return rc == OMNI_ERR_NOMEM && !err[0] ? omni_fail(err, errlen, rc, "tts: out of memory") : rc;
    }
    for (size_t i = 0; i < ny && rc == 0; i += 2048)
        rc = tts_emit_pcm(s, y + i, ny - i < 2048 ? ny - i : 2048);
    free(y);
    return rc;
}

/* Caller holds t->lock. The stream a worker for engine voices (engine) or
 * local ones should serve next, and whether that is its end (DONE) rather
 * than a sentence. */
static struct tts_stream *tts_pick(struct tts *t, bool engine, bool *ending)
{
    struct tts_stream *best = NULL;
    for (struct tts_stream *s = t->streams; s; s = s->next) {
        if (s->done || s->busy || s->voice.needs_engine != engine)
            continue;
        if (atomic_load(&s->cancelled) || s->error[0] || (s->finished && !s->head)) {
            *ending = true;
            return s;
        }
        if (!s->head)
            continue;
        if (!best || (s->urgent && !best->urgent) ||
            (s->urgent == best->urgent && s->head->seq < best->head->seq))
            best = s;
    }
    *ending = false;
    return best;
}

static void tts_drop_queue(struct tts_stream *s)
{
    while (s->head) {
        struct tts_sentence *x = s->head;
        s->head = x->next;
        free(x);
    }
    s->tail = NULL;
}

/* Caller holds t->lock; s is done and nobody waits for it. */
static void tts_stream_destroy_locked(struct tts_stream *s)
{
    struct tts *t = s->t;
    if (s->prev)
        s->prev->next = s->next;
    else
        t->streams = s->next;
    if (s->next)
        s->next->prev = s->prev;
    t->n_streams--;
    tts_drop_queue(s);
    tts_splitter_free(s->split);
    free(s);
}

static void tts_worker_loop(struct tts *t, bool engine)
{
    pthread_mutex_lock(&t->lock);
    for (;;) {
        bool ending;
        struct tts_stream *s = tts_pick(t, engine, &ending);
        if (!s) {
            if (t->stop)
                break;
            pthread_cond_wait(&t->work, &t->lock);
            continue;
        }
        s->busy = true;
        if (ending) {
            tts_drop_queue(s);
            char error[sizeof s->error];
            memcpy(error, s->error, sizeof error);
            pthread_mutex_unlock(&t->lock);
            struct tts_event ev = { .type = TTS_EV_DONE, .cancelled = atomic_load(&s->cancelled),
                                    .error = error[0] ? error : NULL };
            s->fn(s->user, &ev);
            pthread_mutex_lock(&t->lock);
            s->busy = false;
            s->done = true;
            if (s->detached)
                tts_stream_destroy_locked(s);
            pthread_cond_broadcast(&t->idle);
            continue;
        }
        struct tts_sentence *x = s->head;
        s->head = x->next;
        if (!s->head)
            s->tail = NULL;
        pthread_mutex_unlock(&t->lock);

        /* A sentence is one unit of the compute budget; a realtime reply's
         * first sentence goes before batch work. A refused acquire means
         * tts_free: every stream is cancelled then. */
        char err[256] = "";
        /* A voice run by the engine takes no thread here: the engine's steps
         * and the backend's decoder pool take their own from the budget, and
         * one held while this thread waits for tokens would starve them. */
        const int held = t->budget && !s->voice.needs_engine
                             ? compute_acquire(t->budget, s->urgent && !s->spoken) : 0;
        int rc = held < 0 ? 0 : tts_speak(t, s, x->text, err, sizeof err);
        if (held > 0)
            compute_release(t->budget, held);
        s->spoken = true;
        if (rc == 0 && !atomic_load(&s->cancelled)) {
            struct tts_event ev = { .type = TTS_EV_SENTENCE, .text = x->text, .len = strlen(x->text) };
            s->fn(s->user, &ev);
        }
        free(x);

        pthread_mutex_lock(&t->lock);
        if (rc < 0)
            snprintf(s->error, sizeof s->error, "%s", err[0] ? err : "tts: synthesis failed");
        s->busy = false;
        /* the stream's next sentence or end may be for another worker */
        pthread_cond_broadcast(&t->work);
    }
    pthread_mutex_unlock(&t->lock);
}

static void *tts_worker_main(void *arg)
{
    tts_worker_loop(arg, false);
    return NULL;
}

static void *tts_engine_worker_main(void *arg)
{
    tts_worker_loop(arg, true);
    return NULL;
}

// ---- the synthesizer -------------------------------------------------------------

struct tts *tts_new(const struct tts_params *p, char *err, size_t errlen)
{
    struct tts *t = calloc(1, sizeof *t);
    if (!t) {
        omni_fail(err, errlen, OMNI_ERR_NOMEM, "tts: out of memory");
        return NULL;
    }
    t->p = p ? *p : tts_default_params();
    if (t->p.max_streams <= 0)
        t->p.max_streams = 64;
    if (!t->p.max_text_bytes)
        t->p.max_text_bytes = 1u << 20;
    if (t->p.engine_workers <= 0)
        t->p.engine_workers = 4;
    if (t->p.engine_workers > TTS_MAX_ENGINE_WORKERS)
        t->p.engine_workers = TTS_MAX_ENGINE_WORKERS;
    pthread_mutex_init(&t->lock, NULL);
    pthread_cond_init(&t->work, NULL);
    pthread_cond_init(&t->idle, NULL);
    if (tts_espeak_open(&t->backends[0], err, errlen) < 0)
        goto fail;
    t->n_backends = 1;
    /* tts_params has no field for it: the budget is the process's */
    if (compute_default() &&
        !(t->budget = compute_client_new(compute_default(), "tts", 1, err, errlen)))
        goto fail;
    if (pthread_create(&t->worker, NULL, tts_worker_main, t) != 0) {
        omni_fail(err, errlen, OMNI_ERR_NOMEM, "tts: cannot start the synthesis thread");
        goto fail;
    }
    t->worker_started = true;
    return t;
fail:
    tts_free(t);
    return NULL;
}

int tts_add_outetts(struct tts *t, struct engine *e, int model, const struct dac_model *dac,
                    const char *voices_dir, char *err, size_t errlen)
{
    int n = __atomic_load_n(&t->n_backends, __ATOMIC_ACQUIRE);
    if (n >= TTS_MAX_BACKENDS)
        return omni_fail(err, errlen, OMNI_ERR_LIMIT, "tts: no room for another voice backend");
    int rc = tts_outetts_open(&t->backends[n], e, model, dac, voices_dir, t->p.engine_max_tokens,
                              t->p.engine_scripted, err, errlen);
    if (rc < 0)
        return rc;
    /* workers for engine voices, once (they wait on the engine, not the cores) */
    pthread_mutex_lock(&t->lock);
    while (t->n_engine_workers < t->p.engine_workers &&
           pthread_create(&t->engine_workers[t->n_engine_workers], NULL, tts_engine_worker_main,
                          t) == 0)
        t->n_engine_workers++;
    int started = t->n_engine_workers;
    pthread_mutex_unlock(&t->lock);
    if (started == 0) {
        t->backends[n].free(t->backends[n].state);
        return omni_fail(err, errlen, OMNI_ERR_NOMEM, "tts: cannot start a synthesis thread");
    }
    /* the backend is complete before readers of n_backends can see it */
    __atomic_store_n(&t->n_backends, n + 1, __ATOMIC_RELEASE);
    return 0;
}

void tts_free(struct tts *t)
{
    if (!t)
        return;
    if (t->worker_started) {
        pthread_mutex_lock(&t->lock);
        for (struct tts_stream *s = t->streams; s; s = s->next)
            atomic_store(&s->cancelled, true);
        t->stop = true;
        pthread_cond_broadcast(&t->work);
        pthread_mutex_unlock(&t->lock);
        if (t->budget)
            compute_client_cancel(t->budget); /* a sentence waiting for threads gives up */
        pthread_join(t->worker, NULL);
    }
    /* they stop like the first one: every stream cancelled, t->stop set */
    for (int i = 0; i < t->n_engine_workers; i++)
        pthread_join(t->engine_workers[i], NULL);
    compute_client_free(t->budget);
    for (int b = 0; b < t->n_backends; b++)
        if (t->backends[b].free)
            t->backends[b].free(t->backends[b].state);
    pthread_cond_destroy(&t->idle);
    pthread_cond_destroy(&t->work);
    pthread_mutex_destroy(&t->lock);
    free(t);
}

// ---- streams ---------------------------------------------------------------------

struct tts_stream *tts_stream_new(struct tts *t, const struct tts_stream_params *p,
                                  tts_event_fn fn, void *user, int *code, char *err, size_t errlen)
{
    struct tts_stream_params d = tts_stream_default_params();
    if (!p)
        p = &d;
    int rc = 0;
    struct tts_stream *s = NULL;
    if (!(p->speed >= 0.25f && p->speed <= 4.0f)) {
        rc = omni_fail(err, errlen, OMNI_ERR_ARG, "tts: speed %g is outside 0.25..4.0", (double)p->speed);
        goto out;
    }
    s = calloc(1, sizeof *s);
    if (!s || !(s->split = tts_splitter_new(TTS_SENTENCE_MAX_CHARS))) {
        rc = omni_fail(err, errlen, OMNI_ERR_NOMEM, "tts: out of memory");
        goto out;
    }
    const char *id = p->voice && *p->voice ? p->voice : "alloy";
    s->backend = tts_find_backend(t, id, &s->voice);
    if (s->backend < 0) {
        rc = omni_fail(err, errlen, OMNI_ERR_NOTFOUND,
                       "tts: no voice '%.64s' (GET /v1/audio/voices lists them)", id);
        goto out;
    }
    s->t = t;
    s->speed = p->speed;
    s->urgent = p->urgent;
    s->fn = fn;
    s->user = user;
    atomic_init(&s->cancelled, false);
    pthread_mutex_lock(&t->lock);
    if (t->n_streams >= t->p.max_streams || t->stop) {
        pthread_mutex_unlock(&t->lock);
        rc = omni_fail(err, errlen, OMNI_ERR_LIMIT, "tts: %d speech streams are open (the limit)",
                       t->n_streams);
        goto out;
    }
    s->next = t->streams;
    if (t->streams)
        t->streams->prev = s;
    t->streams = s;
    t->n_streams++;
    pthread_mutex_unlock(&t->lock);
    return s;
out:
    if (s)
        tts_splitter_free(s->split);
    free(s);
    if (code)
        *code = rc;
    return NULL;
}

/* Moves the splitter's complete sentences into the queue. */
static int tts_stream_flush(struct tts_stream *s, bool final)
{
    struct tts *t = s->t;
    char *text;
    while ((text = tts_splitter_next(s->split, final))) {
        size_t n = strlen(text);
        struct tts_sentence *x = malloc(sizeof *x + n + 1);
        if (!x) {
            free(text);
            return OMNI_ERR_NOMEM;
        }
        memcpy(x->text, text, n + 1);
        free(text);
        x->next = NULL;
        pthread_mutex_lock(&t->lock);
        x->seq = ++t->seq;
        if (atomic_load(&s->cancelled) || s->done) {
            free(x);
        } else {
            if (s->tail)
                s->tail->next = x;
            else
                s->head = x;
            s->tail = x;
            pthread_cond_broadcast(&t->work);   /* workers of both kinds wait on it */
        }
        pthread_mutex_unlock(&t->lock);
    }
    return 0;
}

int tts_stream_push(struct tts_stream *s, const char *text, size_t len)
{
    struct tts *t = s->t;
    pthread_mutex_lock(&t->lock);
    bool closed = s->finished || s->done;
    pthread_mutex_unlock(&t->lock);
    if (closed || atomic_load(&s->cancelled))
        return OMNI_ERR_ARG;
    if (len > t->p.max_text_bytes - s->pushed_bytes)
        return OMNI_ERR_LIMIT;
    s->pushed_bytes += len;
    int rc = tts_splitter_push(s->split, text, len);
    return rc < 0 ? rc : tts_stream_flush(s, false);
}

int tts_stream_finish(struct tts_stream *s)
{
    struct tts *t = s->t;
    int rc = tts_stream_flush(s, true);
    pthread_mutex_lock(&t->lock);
    s->finished = true;
    pthread_cond_broadcast(&t->work);   /* workers of both kinds wait on it */
    pthread_mutex_unlock(&t->lock);
    return rc;
}

void tts_stream_cancel(struct tts_stream *s)
{
    if (!s)
        return;
    struct tts *t = s->t;
    atomic_store(&s->cancelled, true);
    pthread_mutex_lock(&t->lock);
    tts_drop_queue(s);
    pthread_cond_broadcast(&t->work);   /* workers of both kinds wait on it */
    pthread_mutex_unlock(&t->lock);
}

void tts_stream_free(struct tts_stream *s)
{
    if (!s)
        return;
    struct tts *t = s->t;
    tts_stream_cancel(s);
    pthread_mutex_lock(&t->lock);
    while (!s->done && !t->stop)
        pthread_cond_wait(&t->idle, &t->lock);
    while (s->busy)                 /* stop: the worker may still be in its last call */
        pthread_cond_wait(&t->idle, &t->lock);
    tts_stream_destroy_locked(s);
    pthread_mutex_unlock(&t->lock);
}

void tts_stream_detach(struct tts_stream *s)
{
    if (!s)
        return;
    struct tts *t = s->t;
    pthread_mutex_lock(&t->lock);
    if (s->done && !s->busy)
        tts_stream_destroy_locked(s);
    else
        s->detached = true;
    pthread_mutex_unlock(&t->lock);
}

// ---- one-shot ----------------------------------------------------------------------

struct tts_collect {
    pthread_mutex_t lock;
    pthread_cond_t done_cv;
    float *pcm;
    size_t n, cap;
    int rate_hz;
    bool done, nomem;
    char error[256];
};

static void tts_collect_event(void *user, const struct tts_event *ev)
{
    struct tts_collect *c = user;
    pthread_mutex_lock(&c->lock);
    if (ev->type == TTS_EV_AUDIO && !c->nomem) {
        c->rate_hz = ev->sample_rate_hz;
        if (c->n + ev->n > c->cap) {
            size_t cap = c->cap ? c->cap * 2 : 65536;
            while (cap < c->n + ev->n)
                cap *= 2;
            float *np = realloc(c->pcm, cap * sizeof *np);
            if (!np)
                c->nomem = true;
            else {
                c->pcm = np;
                c->cap = cap;
            }
        }
        if (!c->nomem) {
            memcpy(c->pcm + c->n, ev->pcm, ev->n * sizeof *ev->pcm);
            c->n += ev->n;
        }
    } else if (ev->type == TTS_EV_DONE) {
        if (ev->error)
            snprintf(c->error, sizeof c->error, "%s", ev->error);
        c->done = true;
        pthread_cond_broadcast(&c->done_cv);
    }
    pthread_mutex_unlock(&c->lock);
}

int tts_synthesize(struct tts *t, const struct tts_stream_params *p, const char *text,
                   float **pcm, size_t *n, int *rate_hz, char *err, size_t errlen)
{
    *pcm = NULL;
    *n = 0;
    struct tts_collect c = { .rate_hz = 0 };
    pthread_mutex_init(&c.lock, NULL);
    pthread_cond_init(&c.done_cv, NULL);
    int rc = 0;
    struct tts_stream *s = tts_stream_new(t, p, tts_collect_event, &c, &rc, err, errlen);
    if (s) {
        rc = tts_stream_push(s, text, strlen(text));
        int rc2 = tts_stream_finish(s);
        if (rc == 0)
            rc = rc2;
        if (rc < 0) {
            tts_stream_cancel(s);
            omni_fail(err, errlen, rc, "tts: %s", rc == OMNI_ERR_LIMIT ? "text too long" : "out of memory");
        }
        pthread_mutex_lock(&c.lock);
        while (!c.done)
            pthread_cond_wait(&c.done_cv, &c.lock);
        pthread_mutex_unlock(&c.lock);
        tts_stream_free(s);
        if (rc == 0 && c.error[0])
            rc = omni_fail(err, errlen, OMNI_ERR_IO, "%s", c.error);
        if (rc == 0 && c.nomem)
            rc = omni_fail(err, errlen, OMNI_ERR_NOMEM, "tts: out of memory");
    }
    pthread_cond_destroy(&c.done_cv);
    pthread_mutex_destroy(&c.lock);
    if (rc < 0) {
        free(c.pcm);
        return rc;
    }
    *pcm = c.pcm;
    *n = c.n;
    *rate_hz = c.rate_hz ? c.rate_hz : 22050;
    return 0;
}
