/* compute.c - the process's compute budget: a counter of free threads and a
 * queue of waiting acquires, under one mutex.
 *
 * Acquires are per unit of work (an engine step, not a matmul), so a mutex
 * and, only when the caller must wait, a condition variable on its stack
 * cost nothing next to the work they gate. Each waiter has its own
 * condition variable: a release wakes exactly the acquires it grants. */
#include "src/core/compute.h"

#include "src/core/omni.h"
#include "src/core/threadpool.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* One acquire waiting in the queue; lives on the acquiring thread's stack. */
struct waiter {
    struct compute_client *cl;
    bool asked_urgent;
    bool urgent;             /* asked so, or promoted after max_overtakes */
    int overtaken;           /* urgent grants that went before it */
    int result;              /* 0 while waiting, then threads granted or OMNI_ERR_LIMIT */
    pthread_cond_t cv;
    struct waiter *prev, *next;
};

struct compute_client {
    struct compute *c;
    char name[COMPUTE_NAME_MAX];
    int max_threads;
    void (*park)(void *user);
    void *park_user;
    /* {c->lock} */
    int held, waiting;
    bool marked_active;      /* compute_client_active */
    bool cancelled;
    double t_mark;           /* when held last changed (for busy_s) */
    uint64_t acquires, urgent_acquires, waits, n_cancelled;
    double wait_s, busy_s;
};

struct compute {
    int n_threads;
    int max_overtakes;
    pthread_mutex_t lock;
    /* {lock} */
    int free;
    int max_busy;
    struct waiter *head, *tail;          /* arrival order */
    struct compute_client *clients[COMPUTE_MAX_CLIENTS];
    int n_clients;
};

static _Atomic(struct compute *) compute_default_ptr;

struct compute_params compute_default_params(void)
{
    return (struct compute_params){ .n_threads = 0, .max_overtakes = 4 };
}

struct compute *compute_new(const struct compute_params *p, char *err, size_t errlen)
{
    struct compute_params prm = p ? *p : compute_default_params();
    struct compute *c = calloc(1, sizeof *c);
    if (!c) {
        omni_fail(err, errlen, OMNI_ERR_NOMEM, "compute: out of memory");
        return NULL;
    }
    c->n_threads = prm.n_threads > 0 ? prm.n_threads : omni_physical_cores();
    c->max_overtakes = prm.max_overtakes < 0 ? 0 : prm.max_overtakes;
    c->free = c->n_threads;
    pthread_mutex_init(&c->lock, NULL);
    return c;
}

void compute_free(struct compute *c)
{
    if (!c)
        return;
    struct compute *self = c;
    atomic_compare_exchange_strong(&compute_default_ptr, &self, NULL);
    pthread_mutex_destroy(&c->lock);
    free(c);
}

int compute_size(const struct compute *c)
{
    return c ? c->n_threads : 0;
}

// ---- clients ------------------------------------------------------------------

struct compute_client *compute_client_new(struct compute *c, const char *name, int max_threads,
                                          char *err, size_t errlen)
{
    struct compute_client *cl = calloc(1, sizeof *cl);
    if (!cl) {
        omni_fail(err, errlen, OMNI_ERR_NOMEM, "compute: out of memory");
        return NULL;
    }
    cl->c = c;
    snprintf(cl->name, sizeof cl->name, "%s", name ? name : "");
    cl->max_threads = max_threads < 1 ? 1 : max_threads > c->n_threads ? c->n_threads : max_threads;
    pthread_mutex_lock(&c->lock);
    if (c->n_clients == COMPUTE_MAX_CLIENTS) {
        pthread_mutex_unlock(&c->lock);
        free(cl);
        omni_fail(err, errlen, OMNI_ERR_LIMIT, "compute: client '%s': at most %d clients",
                  name ? name : "", COMPUTE_MAX_CLIENTS);
        return NULL;
    }
    cl->t_mark = omni_time_s();
    c->clients[c->n_clients++] = cl;
    pthread_mutex_unlock(&c->lock);
    return cl;
}

int compute_client_max_threads(const struct compute_client *cl)
{
    return cl->max_threads;
}

void compute_client_set_park(struct compute_client *cl, void (*park)(void *user), void *user)
{
    pthread_mutex_lock(&cl->c->lock);
    cl->park = park;
    cl->park_user = user;
    pthread_mutex_unlock(&cl->c->lock);
}

/* Add cl's thread-seconds since its last change; caller holds the lock. */
static void account(struct compute_client *cl, double now)
{
    cl->busy_s += cl->held * (now - cl->t_mark);
    cl->t_mark = now;
}

// ---- shares ------------------------------------------------------------------------

static bool is_active(const struct compute_client *cl)
{
    return cl->marked_active || cl->held || cl->waiting;
}

/* What cl may take now: its max_threads, capped at the fair level L when
 * others are active too - the smallest L at which every active client's
 * min(max_threads, L) add up to the budget (max-min fairness; the level
 * rounds up, so no thread is left to nobody). Caller holds the lock. */
static int share(const struct compute *c, const struct compute_client *cl)
{
    int others = 0;
    for (int i = 0; i < c->n_clients; i++)
        others += c->clients[i] != cl && is_active(c->clients[i]);
    if (!others)
        return cl->max_threads;
    for (int level = 1; level < cl->max_threads; level++) {
        int sum = level < cl->max_threads ? level : cl->max_threads;
        for (int i = 0; i < c->n_clients; i++) {
            const struct compute_client *x = c->clients[i];
            if (x != cl && is_active(x))
                sum += x->max_threads < level ? x->max_threads : level;
        }
        if (sum >= c->n_threads)
            return level;
    }
    return cl->max_threads;
}

// ---- the queue -------------------------------------------------------------------

static void unlink_waiter(struct compute *c, struct waiter *w)
{
    if (w->prev)
        w->prev->next = w->next;
    else
        c->head = w->next;
    if (w->next)
        w->next->prev = w->prev;
    else
        c->tail = w->prev;
    w->prev = w->next = NULL;
}

/* Idle pools of other clients stop spinning: the threads just granted are
 * about to run, and a spinning worker would take one of their cores. */
static void park_others(struct compute *c, const struct compute_client *grantee)
{
    for (int i = 0; i < c->n_clients; i++) {
        struct compute_client *x = c->clients[i];
        if (x != grantee && x->held == 0 && x->park)
            x->park(x->park_user);
    }
}

static void take(struct compute *c, struct compute_client *cl, int g, double now)
{
    account(cl, now);
    cl->held += g;
    c->free -= g;
    if (c->n_threads - c->free > c->max_busy)
        c->max_busy = c->n_threads - c->free;
    park_others(c, cl);
}

/* Grant what the queue's head can have, as long as it can. Caller holds the
 * lock. */
static void dispatch(struct compute *c, double now)
{
    for (;;) {
        struct waiter *w = c->head;
        for (struct waiter *x = c->head; x; x = x->next)
            if (x->urgent) {
                w = x;
                break;
            }
        if (!w)
            return;
        const int want = share(c, w->cl), need = (want + 1) / 2;
        if (c->free < need)
            return;
        /* every waiter before the first urgent one is a batch one it overtakes */
        for (struct waiter *x = c->head; x != w; x = x->next)
            if (++x->overtaken >= c->max_overtakes)
                x->urgent = true;
        unlink_waiter(c, w);
        const int g = want < c->free ? want : c->free;
        w->cl->waiting--;
        take(c, w->cl, g, now);
        w->result = g;
        pthread_cond_signal(&w->cv);
    }
}

int compute_acquire(struct compute_client *cl, bool urgent)
{
    struct compute *c = cl->c;
    pthread_mutex_lock(&c->lock);
    if (cl->cancelled) {
        cl->n_cancelled++;
        pthread_mutex_unlock(&c->lock);
        return OMNI_ERR_LIMIT;
    }
    const double t0 = omni_time_s();
    struct waiter w = {
        .cl = cl, .asked_urgent = urgent, .urgent = urgent || c->max_overtakes == 0,
    };
    pthread_cond_init(&w.cv, NULL); /* dispatch signals it, also when it grants at once */
    /* Queued even when it can go at once, so that dispatch alone decides
     * who goes first. */
    w.prev = c->tail;
    if (c->tail)
        c->tail->next = &w;
    else
        c->head = &w;
    c->tail = &w;
    cl->waiting++;
    dispatch(c, t0);
    bool waited = false;
    while (w.result == 0) {
        waited = true;
        pthread_cond_wait(&w.cv, &c->lock);
    }
    pthread_cond_destroy(&w.cv);
    if (w.result > 0) {
        cl->acquires++;
        cl->urgent_acquires += urgent;
        if (waited) {
            cl->waits++;
            cl->wait_s += omni_time_s() - t0;
        }
    } else {
        cl->n_cancelled++;
    }
    pthread_mutex_unlock(&c->lock);
    return w.result;
}

void compute_release(struct compute_client *cl, int n)
{
    struct compute *c = cl->c;
    if (n <= 0)
        return;
    pthread_mutex_lock(&c->lock);
    const double now = omni_time_s();
    if (n > cl->held) /* a caller's bug: never let the budget grow */
        n = cl->held;
    account(cl, now);
    cl->held -= n;
    c->free += n;
    dispatch(c, now);
    pthread_mutex_unlock(&c->lock);
}

void compute_client_active(struct compute_client *cl, bool active)
{
    struct compute *c = cl->c;
    pthread_mutex_lock(&c->lock);
    if (cl->marked_active != active) {
        cl->marked_active = active;
        dispatch(c, omni_time_s()); /* shares changed: a waiter may need less now */
    }
    pthread_mutex_unlock(&c->lock);
}

void compute_client_cancel(struct compute_client *cl)
{
    struct compute *c = cl->c;
    pthread_mutex_lock(&c->lock);
    cl->cancelled = true;
    for (struct waiter *w = c->head, *next; w; w = next) {
        next = w->next;
        if (w->cl != cl)
            continue;
        unlink_waiter(c, w);
        cl->waiting--;
        w->result = OMNI_ERR_LIMIT;
        pthread_cond_signal(&w->cv);
    }
    /* the head may have been one of them */
    dispatch(c, omni_time_s());
    pthread_mutex_unlock(&c->lock);
}

void compute_client_free(struct compute_client *cl)
{
    if (!cl)
        return;
    struct compute *c = cl->c;
    compute_client_cancel(cl); /* a waiter left behind would wait forever */
    pthread_mutex_lock(&c->lock);
    if (cl->held) { /* threads never given back: return them to the others */
        c->free += cl->held;
        cl->held = 0;
        dispatch(c, omni_time_s());
    }
    for (int i = 0; i < c->n_clients; i++)
        if (c->clients[i] == cl) {
            memmove(c->clients + i, c->clients + i + 1,
                    (size_t)(c->n_clients - i - 1) * sizeof *c->clients);
            c->n_clients--;
            break;
        }
    pthread_mutex_unlock(&c->lock);
    free(cl);
}

// ---- statistics and the process default ------------------------------------------

void compute_stats(struct compute *c, struct compute_stats *out)
{
    memset(out, 0, sizeof *out);
    if (!c)
        return;
    pthread_mutex_lock(&c->lock);
    const double now = omni_time_s();
    out->n_threads = c->n_threads;
    out->busy = c->n_threads - c->free;
    out->max_busy = c->max_busy;
    out->n_clients = c->n_clients;
    for (int i = 0; i < c->n_clients; i++) {
        struct compute_client *cl = c->clients[i];
        struct compute_client_stats *s = &out->client[i];
        account(cl, now);
        memcpy(s->name, cl->name, sizeof s->name);
        s->max_threads = cl->max_threads;
        s->active = is_active(cl);
        s->busy = cl->held;
        s->waiting = cl->waiting;
        s->acquires = cl->acquires;
        s->urgent_acquires = cl->urgent_acquires;
        s->waits = cl->waits;
        s->cancelled = cl->n_cancelled;
        s->wait_s = cl->wait_s;
        s->busy_s = cl->busy_s;
        out->waiting += cl->waiting;
    }
    pthread_mutex_unlock(&c->lock);
}

void compute_set_default(struct compute *c)
{
    atomic_store(&compute_default_ptr, c);
}

struct compute *compute_default(void)
{
    return atomic_load(&compute_default_ptr);
}
