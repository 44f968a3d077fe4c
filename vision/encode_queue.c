/* encode_queue.c - the process's image-encode queue (see encode_queue.h):
 * callers append a job of preprocessed images and wait on a condition;
 * the encoder thread takes images from the head of the queue (several
 * jobs' when they wait together, up to max_batch) into one
 * vision_encode_batch call and hands each job its rows. A job leaves the
 * queue when all its images are taken, or when its caller gives up
 * (cancelled, shutdown) - never while a pass still holds its pixels. */
#include "vision/encode_queue.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "src/core/omni.h"

enum { VQ_BATCH_MAX = 64, VQ_POLL_MS = 50 };

struct vq_job {
    const struct vision_input *in;   /* [n], the caller's */
    struct vision_embd *outs;        /* [n], the caller's */
    int n;
    int (*cancelled)(void *user);
    void *user;
    int taken;                       /* images handed to passes {lock} */
    int finished;                    /* of which the pass has ended {lock} */
    int rc;                          /* first failure, or the caller gave up {lock} */
    char err[256];                   /* {lock} */
    bool queued;                     /* in the list {lock} */
    struct vq_job *next;             /* {lock} */
};

struct vision_queue {
    struct vision_ctx *vc;           /* the encoder thread's */
    int max_batch;
    pthread_mutex_t lock;
    pthread_cond_t wake;             /* the encoder: work or stop */
    pthread_cond_t done;             /* callers: a pass ended, or stop */
    struct vq_job *head, *tail;      /* {lock} jobs with images not taken yet */
    bool stop;                       /* {lock} */
    struct vision_queue_stats st;    /* {lock} */
    pthread_t thread;
    bool started;
    /* the running pass's jobs: the encoder thread's, read by pass_cancelled */
    struct vq_job *pass_jobs[VQ_BATCH_MAX];
    int pass_n_jobs;
};

struct vision_queue_params vision_queue_default_params(void)
{
    return (struct vision_queue_params){ .max_batch = 16 };
}

static void unlink_job(struct vision_queue *q, struct vq_job *j)
{
    struct vq_job **pp = &q->head, *prev = NULL;
    while (*pp && *pp != j)
        prev = *pp, pp = &(*pp)->next;
    if (*pp) {
        *pp = j->next;
        if (q->tail == j)
            q->tail = prev;
    }
    j->queued = false;
    j->next = NULL;
}

/* The pass stops only when every request in it has been cancelled. */
static int pass_cancelled(void *user)
{
    struct vision_queue *q = user;
    for (int i = 0; i < q->pass_n_jobs; i++) {
        const struct vq_job *j = q->pass_jobs[i];
        if (!j->cancelled || !j->cancelled(j->user))
            return 0;
    }
    return q->pass_n_jobs > 0;
}

static void *encoder_main(void *arg)
{
    struct vision_queue *q = arg;
    struct vision_input in[VQ_BATCH_MAX];
    struct vision_embd out[VQ_BATCH_MAX];
    struct vq_job *owner[VQ_BATCH_MAX];
    int idx[VQ_BATCH_MAX];
    char err[256];
    pthread_mutex_lock(&q->lock);
    while (!q->stop) {
        if (!q->head) {
            pthread_cond_wait(&q->wake, &q->lock);
            continue;
        }
        // gather: images from the head on, job after job, up to max_batch
        int k = 0;
        q->pass_n_jobs = 0;
        for (struct vq_job *j = q->head, *next; j && k < q->max_batch; j = next) {
            next = j->next;
            q->pass_jobs[q->pass_n_jobs++] = j;
            while (j->taken < j->n && k < q->max_batch) {
                in[k] = j->in[j->taken], owner[k] = j, idx[k] = j->taken;
                j->taken++, k++;
            }
            if (j->taken == j->n)
                unlink_job(q, j);
        }
        pthread_mutex_unlock(&q->lock);
        int rc = vision_encode_batch(q->vc, in, k, pass_cancelled, q, out, err, sizeof err);
        pthread_mutex_lock(&q->lock);
        // hand out the rows (or the failure); a job that gave up gets none
        for (int i = 0; i < k; i++) {
            struct vq_job *j = owner[i];
            if (rc >= 0 && j->rc >= 0) {
                j->outs[idx[i]] = out[i];
            } else {
                if (rc >= 0)
                    vision_embd_release(&out[i]);
                if (j->rc >= 0) {
                    j->rc = rc;
                    snprintf(j->err, sizeof j->err, "%s", err);
                    if (j->queued) /* its other images are not encoded */
                        unlink_job(q, j);
                }
            }
            j->finished++;
        }
        q->st.passes++;
        q->st.images += (uint64_t)k;
        q->st.shared_passes += q->pass_n_jobs > 1;
        q->pass_n_jobs = 0;
        pthread_cond_broadcast(&q->done);
    }
    pthread_mutex_unlock(&q->lock);
    return NULL;
}

struct vision_queue *vision_queue_new(struct vision_ctx *vc, const struct vision_queue_params *p,
                                      char *err, size_t errlen)
{
    struct vision_queue_params def = vision_queue_default_params();
    if (!p)
        p = &def;
    if (!vc || p->max_batch < 1 || p->max_batch > VQ_BATCH_MAX) {
        omni_fail(err, errlen, OMNI_ERR_ARG, "vision: queue: max_batch must be 1..%d", VQ_BATCH_MAX);
        return NULL;
    }
    struct vision_queue *q = calloc(1, sizeof *q);
    if (!q) {
        omni_fail(err, errlen, OMNI_ERR_NOMEM, "vision: queue: out of memory");
        return NULL;
    }
    q->vc = vc, q->max_batch = p->max_batch;
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC); /* the callers' polling waits */
    pthread_mutex_init(&q->lock, NULL);
    pthread_cond_init(&q->wake, NULL);
    pthread_cond_init(&q->done, &ca);
    pthread_condattr_destroy(&ca);
    if (pthread_create(&q->thread, NULL, encoder_main, q) != 0) {
        omni_fail(err, errlen, OMNI_ERR_NOMEM, "vision: queue: cannot start the encoder thread");
        vision_queue_free(q);
        return NULL;
    }
    q->started = true;
    return q;
}

void vision_queue_shutdown(struct vision_queue *q)
{
    if (!q)
        return;
    pthread_mutex_lock(&q->lock);
    q->stop = true;
    pthread_cond_broadcast(&q->wake);
    pthread_cond_broadcast(&q->done);
    pthread_mutex_unlock(&q->lock);
}

void vision_queue_free(struct vision_queue *q)
{
    if (!q)
        return;
    vision_queue_shutdown(q);
    if (q->started)
        pthread_join(q->thread, NULL);
    pthread_cond_destroy(&q->done);
    pthread_cond_destroy(&q->wake);
    pthread_mutex_destroy(&q->lock);
    free(q);
}

int vision_queue_encode(struct vision_queue *q, const struct vision_input *in, int n,
                        int (*cancelled)(void *user), void *user, struct vision_embd *outs,
                        char *err, size_t errlen)
{
    if (n < 0)
        return omni_fail(err, errlen, OMNI_ERR_ARG, "vision: queue: %d images", n);
    for (int i = 0; i < n; i++)
        memset(&outs[i], 0, sizeof outs[i]);
    if (n == 0)
        return OMNI_OK;
    struct vq_job j = { .in = in, .outs = outs, .n = n, .cancelled = cancelled, .user = user };
    bool gave_up = false;
    pthread_mutex_lock(&q->lock);
    if (q->stop) {
        pthread_mutex_unlock(&q->lock);
        return omni_fail(err, errlen, OMNI_ERR_LIMIT, "vision: shutting down");
    }
    j.queued = true;
    if (q->tail)
        q->tail->next = &j;
    else
        q->head = &j;
    q->tail = &j;
    q->st.waiting++;
    pthread_cond_signal(&q->wake);
    for (;;) {
        /* done once no pass holds our images and none will take more */
        if (j.finished == j.taken && (j.taken == j.n || j.rc < 0))
            break;
        if (!gave_up) {
            bool stop = q->stop;
            pthread_mutex_unlock(&q->lock); /* cancelled() may take its own locks */
            bool gone = !stop && cancelled && cancelled(user);
            pthread_mutex_lock(&q->lock);
            if (stop || gone || q->stop) {
                gave_up = true;
                if (j.rc >= 0) {
                    j.rc = OMNI_ERR_LIMIT;
                    snprintf(j.err, sizeof j.err, "vision: %s",
                             gone ? "the encode was cancelled" : "shutting down");
                }
                if (j.queued)
                    unlink_job(q, &j);
                continue;
            }
        }
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        ts.tv_nsec += VQ_POLL_MS * 1000000L;
        if (ts.tv_nsec >= 1000000000L)
            ts.tv_sec++, ts.tv_nsec -= 1000000000L;
        pthread_cond_timedwait(&q->done, &q->lock, &ts);
    }
    if (j.queued)
        unlink_job(q, &j);
    q->st.waiting--;
    pthread_mutex_unlock(&q->lock);
    if (j.rc < 0) {
        for (int i = 0; i < n; i++)
            vision_embd_release(&outs[i]);
        if (cancelled && cancelled(user)) { /* seen here or by the pass */
            pthread_mutex_lock(&q->lock);
            q->st.cancelled++;
            pthread_mutex_unlock(&q->lock);
        }
        return omni_fail(err, errlen, j.rc, "%s", j.err);
    }
    return OMNI_OK;
}

struct vision_queue_stats vision_queue_stats(struct vision_queue *q)
{
    struct vision_queue_stats s = { 0 };
    if (!q)
        return s;
    pthread_mutex_lock(&q->lock);
    s = q->st;
    pthread_mutex_unlock(&q->lock);
    return s;
}
