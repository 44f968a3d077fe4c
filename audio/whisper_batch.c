/* whisper_batch.c - the batcher: a thread that collects the encoder and
 * decoder requests of many whisper states and runs each kind as one pass on
 * the shared pool. Callers block on their request; the pass writes straight
 * into their states (encoder output, cross K/V, self-attention caches,
 * logits), so a request carries only pointers. */
#include "audio/whisper_batch.h"

#include "audio/whisper_impl.h"
#include "src/core/compute.h"
#include "src/core/omni.h"
#include "src/core/threadpool.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* One caller's pass, waiting in the queue: an encoder window (rows NULL) or
 * decoder rows. */
struct breq {
    struct whisper_state *s;
    const float *mel;
    int n_frames, offset, n_ctx;
    const struct whisper_row *rows;
    int n_rows;
    int rc;
    char *err;           /* the caller's, written before done */
    size_t errlen;
    bool done;           /* {lock} */
    struct breq *next;
};

struct whisper_batcher {
    const struct whisper_model *m;
    struct whisper_batcher_params p;
    struct tpool *tp;
    struct whisper_work *work;      /* batcher thread only */
    struct whisper_row *rows;       /* batcher thread only: a decoder pass's rows */
    int cap_rows;
    pthread_t thread;
    bool started;

    pthread_mutex_t lock;
    pthread_cond_t work_cond, done_cond;
    struct breq *head, *tail;       /* {lock} */
    int n_pending, n_busy;          /* {lock} */
    bool stopping;                  /* {lock} */
    struct whisper_batcher_stats st; /* {lock} */
};

struct whisper_batcher_params whisper_batcher_default_params(void)
{
    return (struct whisper_batcher_params){ .max_windows = 4, .max_rows = 512, .gather_us = 1000 };
}

// ---- the batcher thread ---------------------------------------------------------

/* Each pass is one unit of the compute budget: the engine's steps and other
 * workloads get their turn between passes. 0, or OMNI_ERR_LIMIT when the
 * pool was cancelled. */
static int pass_begin(struct whisper_batcher *b, char *err, size_t errlen)
{
    const bool urgent = b->p.urgent && b->p.urgent(b->p.urgent_user);
    if (tpool_begin(b->tp, urgent) < 0)
        return omni_fail(err, errlen, OMNI_ERR_LIMIT, "whisper: batch: shutting down");
    return 0;
}

static void finish(struct whisper_batcher *b, struct breq *const *reqs, int n, int rc, const char *err)
{
    pthread_mutex_lock(&b->lock);
    for (int i = 0; i < n; i++) {
        reqs[i]->rc = rc;
        if (rc < 0 && reqs[i]->err && reqs[i]->errlen)
            snprintf(reqs[i]->err, reqs[i]->errlen, "%s", err);
        reqs[i]->done = true;
    }
    pthread_cond_broadcast(&b->done_cond);
    pthread_mutex_unlock(&b->lock);
}

/* Encoder windows of reqs[0..n), n <= max_windows. */
static void run_encode(struct whisper_batcher *b, struct breq *const *reqs, int n)
{
    struct whisper_state *states[n];
    const float *mel[n];
    int frames[n], offset[n], n_ctx[n];
    for (int i = 0; i < n; i++) {
        states[i] = reqs[i]->s;
        mel[i] = reqs[i]->mel;
        frames[i] = reqs[i]->n_frames;
        offset[i] = reqs[i]->offset;
        n_ctx[i] = reqs[i]->n_ctx;
    }
    char err[256] = "";
    int rc = pass_begin(b, err, sizeof err);
    if (rc == 0) {
        rc = whisper_forward_encode(b->work, states, mel, frames, offset, n_ctx, n, err, sizeof err);
        tpool_end(b->tp);
    }
    pthread_mutex_lock(&b->lock);
    b->st.enc_passes++;
    b->st.enc_windows += (uint64_t)n;
    b->st.max_enc_windows = n > b->st.max_enc_windows ? n : b->st.max_enc_windows;
    pthread_mutex_unlock(&b->lock);
    finish(b, reqs, n, rc, err);
}

/* The rows of reqs[0..n) as one decoder pass. */
static void run_decode(struct whisper_batcher *b, struct breq *const *reqs, int n)
{
    char err[256] = "";
    int total = 0, rc = OMNI_OK;
    for (int i = 0; i < n; i++)
        total += reqs[i]->n_rows;
    if (total > b->cap_rows) {
        struct whisper_row *r = realloc(b->rows, (size_t)total * sizeof *r);
        if (r) {
            b->rows = r;
            b->cap_rows = total;
        } else {
            rc = omni_fail(err, sizeof err, OMNI_ERR_NOMEM, "whisper: batch: out of memory for %d rows", total);
        }
    }
    if (rc == OMNI_OK)
        rc = pass_begin(b, err, sizeof err);
    if (rc == OMNI_OK) {
        int at = 0;
        for (int i = 0; i < n; i++) {
            memcpy(b->rows + at, reqs[i]->rows, (size_t)reqs[i]->n_rows * sizeof *b->rows);
            at += reqs[i]->n_rows;
        }
        rc = whisper_forward_decode(b->work, b->rows, total, err, sizeof err);
        tpool_end(b->tp);
    }
    pthread_mutex_lock(&b->lock);
    b->st.dec_passes++;
    b->st.dec_rows += (uint64_t)total;
    b->st.dec_requests += (uint64_t)n;
    b->st.max_dec_requests = n > b->st.max_dec_requests ? n : b->st.max_dec_requests;
    pthread_mutex_unlock(&b->lock);
    finish(b, reqs, n, rc, err);
}

/* Everything taken from the queue: decoder steps first (short, and their
 * states go on sampling while the encoder runs), in passes of at most
 * max_rows rows (a request is never split), then encoder windows in passes
 * of at most max_windows. */
static void run_all(struct whisper_batcher *b, struct breq *list, int n)
{
    struct breq *dec[n], *enc[n];
    int n_dec = 0, n_enc = 0;
    for (struct breq *r = list; r; r = r->next)
        if (r->rows)
            dec[n_dec++] = r;
        else
            enc[n_enc++] = r;
    for (int i = 0; i < n_dec;) {
        int k = 1, rows = dec[i]->n_rows;
        while (i + k < n_dec && rows + dec[i + k]->n_rows <= b->p.max_rows)
            rows += dec[i + k++]->n_rows;
        run_decode(b, dec + i, k);
        i += k;
    }
    for (int i = 0; i < n_enc; i += b->p.max_windows)
        run_encode(b, enc + i, n_enc - i < b->p.max_windows ? n_enc - i : b->p.max_windows);
}

static void *batcher_main(void *arg)
{
    struct whisper_batcher *b = arg;
    pthread_mutex_lock(&b->lock);
    for (;;) {
        while (!b->head && !b->stopping)
            pthread_cond_wait(&b->work_cond, &b->lock);
        if (!b->head)
            break;
        /* Every busy state has at most one request in flight: wait a moment
         * for the others, which are sampling their last step's logits. */
        if (b->n_pending < b->n_busy && b->p.gather_us > 0) {
            struct timespec until;
            clock_gettime(CLOCK_MONOTONIC, &until);
            until.tv_nsec += (long)b->p.gather_us * 1000;
            until.tv_sec += until.tv_nsec / 1000000000;
            until.tv_nsec %= 1000000000;
            while (b->n_pending < b->n_busy && !b->stopping &&
                   pthread_cond_timedwait(&b->work_cond, &b->lock, &until) != ETIMEDOUT)
                ;
        }
        struct breq *list = b->head;
        int n = b->n_pending;
        b->head = b->tail = NULL;
        b->n_pending = 0;
        pthread_mutex_unlock(&b->lock);
        run_all(b, list, n);
        pthread_mutex_lock(&b->lock);
    }
    pthread_mutex_unlock(&b->lock);
    return NULL;
}

// ---- callers --------------------------------------------------------------------

static int submit(struct whisper_batcher *b, struct breq *r)
{
    pthread_mutex_lock(&b->lock);
    if (b->stopping) {
        pthread_mutex_unlock(&b->lock);
        return omni_fail(r->err, r->errlen, OMNI_ERR_LIMIT, "whisper: batch: shutting down");
    }
    if (b->tail)
        b->tail->next = r;
    else
        b->head = r;
    b->tail = r;
    b->n_pending++;
    pthread_cond_signal(&b->work_cond);
    while (!r->done)
        pthread_cond_wait(&b->done_cond, &b->lock);
    pthread_mutex_unlock(&b->lock);
    return r->rc;
}

int whisper_batcher_encode(struct whisper_batcher *b, struct whisper_state *s, const float *mel, int n_frames,
                           int offset, int n_ctx, char *err, size_t errlen)
{
    struct breq r = { .s = s, .mel = mel, .n_frames = n_frames, .offset = offset, .n_ctx = n_ctx, .err = err,
                      .errlen = errlen };
    return submit(b, &r);
}

int whisper_batcher_decode(struct whisper_batcher *b, const struct whisper_row *rows, int n, char *err,
                           size_t errlen)
{
    struct breq r = { .rows = rows, .n_rows = n, .err = err, .errlen = errlen };
    return submit(b, &r);
}

void whisper_batcher_busy(struct whisper_batcher *b, int delta)
{
    pthread_mutex_lock(&b->lock);
    const bool was = b->n_busy > 0;
    b->n_busy += delta;
    /* While a transcription runs, its passes come one after another with
     * sampling in between: keep the speech share of the compute budget so
     * each pass need not wait for a whole engine step. */
    if (was != (b->n_busy > 0))
        tpool_active(b->tp, b->n_busy > 0);
    pthread_cond_signal(&b->work_cond); /* one fewer to wait for */
    pthread_mutex_unlock(&b->lock);
}

// ---- lifetime -------------------------------------------------------------------

struct whisper_batcher *whisper_batcher_new(const struct whisper_model *m, const struct whisper_batcher_params *p,
                                            char *err, size_t errlen)
{
    struct whisper_batcher_params prm = p ? *p : whisper_batcher_default_params();
    const struct whisper_hparams *hp = whisper_model_hparams(m);
    const int budget = compute_size(prm.compute); /* 0 without one */
    if (prm.n_threads < 1)
        prm.n_threads = budget ? budget : omni_physical_cores();
    if (budget && prm.n_threads > budget)
        prm.n_threads = budget; /* more could never run at once */
    if (prm.max_windows < 1 || prm.max_rows < 1 || prm.gather_us < 0) {
        omni_fail(err, errlen, OMNI_ERR_ARG, "whisper: batch: max_windows %d, max_rows %d (>= 1) or gather_us %d "
                  "(>= 0) out of range", prm.max_windows, prm.max_rows, prm.gather_us);
        return NULL;
    }
    if (prm.max_rows < hp->n_text_ctx)
        prm.max_rows = hp->n_text_ctx; /* the longest single request: a whole prompt */
    struct whisper_batcher *b = calloc(1, sizeof *b);
    if (!b) {
        omni_fail(err, errlen, OMNI_ERR_NOMEM, "whisper: batch: out of memory");
        return NULL;
    }
    b->m = m;
    b->p = prm;
    pthread_mutex_init(&b->lock, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&b->work_cond, &ca);
    pthread_condattr_destroy(&ca);
    pthread_cond_init(&b->done_cond, NULL);
    if (!(b->tp = tpool_new(prm.n_threads, err, errlen)) ||
        tpool_attach(b->tp, prm.compute, "stt", err, errlen) < 0)
        goto fail;
    if (!(b->work = whisper_work_new(m, b->tp))) {
        omni_fail(err, errlen, OMNI_ERR_NOMEM, "whisper: batch: out of memory");
        goto fail;
    }
    b->work->dev = prm.dev; /* NULL: the CPU passes */
    if (pthread_create(&b->thread, NULL, batcher_main, b) != 0) {
        omni_fail(err, errlen, OMNI_ERR_NOMEM, "whisper: batch: cannot start its thread");
        goto fail;
    }
    b->started = true;
    return b;
fail:
    whisper_batcher_free(b);
    return NULL;
}

void whisper_batcher_free(struct whisper_batcher *b)
{
    if (!b)
        return;
    pthread_mutex_lock(&b->lock);
    b->stopping = true;
    pthread_cond_broadcast(&b->work_cond);
    pthread_mutex_unlock(&b->lock);
    if (b->started)
        pthread_join(b->thread, NULL); /* it finishes what is queued first */
    whisper_work_free(b->work);
    tpool_free(b->tp);
    free(b->rows);
    pthread_cond_destroy(&b->work_cond);
    pthread_cond_destroy(&b->done_cond);
    pthread_mutex_destroy(&b->lock);
    free(b);
}

struct whisper_state *whisper_state_new_batched(struct whisper_batcher *b, char *err, size_t errlen)
{
    struct whisper_state *s = whisper_state_alloc(b->m, err, errlen);
    if (s)
        s->batcher = b;
    return s;
}

void whisper_batcher_stats(struct whisper_batcher *b, struct whisper_batcher_stats *out)
{
    pthread_mutex_lock(&b->lock);
    *out = b->st;
    out->busy = b->n_busy;
    pthread_mutex_unlock(&b->lock);
}
