/* test_compute.c - the process's compute budget (src/core/compute.h) and the
 * thread pools under it: clients never hold more threads than the budget,
 * urgent acquires overtake waiting batch ones at the next release, batch
 * ones are overtaken at most max_overtakes times, a waiter that cannot have
 * enough blocks those behind it, active clients split the budget into fair
 * shares, cancellation leaves the books balanced;
 * pools run exactly the width granted; the engine and the Whisper batcher
 * at once never run more pool threads than the budget, and an interactive
 * prompt's step (or a pass while a final waits, or an urgent stream's first
 * sentence) goes before batch work.
 *
 * Nothing here depends on timing: a test waits for a state it can observe
 * (an acquire queued, a grant made), then acts. */
#include "test.h"

#include "audio/tts/tts.h"
#include "audio/whisper.h"
#include "audio/whisper_batch.h"
#include "llm/model.h"
#include "src/core/compute.h"
#include "src/core/omni.h"
#include "src/core/threadpool.h"
#include "src/engine/engine.h"

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <time.h>

static void nap(void)
{
    struct timespec ts = { 0, 100 * 1000 };
    nanosleep(&ts, NULL);
}

static struct compute *budget(int n, int max_overtakes)
{
    struct compute_params p = compute_default_params();
    p.n_threads = n;
    p.max_overtakes = max_overtakes;
    return compute_new(&p, NULL, 0);
}

/* Until n acquires wait (the runner's timeout ends a hang). */
static void wait_waiting(struct compute *c, int n)
{
    struct compute_stats st;
    for (compute_stats(c, &st); st.waiting != n; compute_stats(c, &st))
        nap();
}

static const struct compute_client_stats *client_stats(const struct compute_stats *st,
                                                       const char *name)
{
    for (int i = 0; i < st->n_clients; i++)
        if (!strcmp(st->client[i].name, name))
            return &st->client[i];
    return NULL;
}

// ---- takers: one acquire on a thread of its own ---------------------------------

static atomic_int grant_order;

struct taker {
    struct compute_client *cl;
    bool urgent;
    bool hold;                 /* keep the threads until go; else give them back at once */
    struct compute *c;         /* with watch: the budget */
    const char *watch;         /* a client whose acquires to note at the grant, or NULL */
    int got;                   /* threads granted, or the error */
    int order;                 /* 1, 2, ... in grant order */
    uint64_t watch_acquires;
    atomic_int granted, go;
    pthread_t th;
};

static void *taker_main(void *arg)
{
    struct taker *t = arg;
    t->got = compute_acquire(t->cl, t->urgent);
    t->order = atomic_fetch_add(&grant_order, 1) + 1;
    if (t->watch) {
        struct compute_stats st;
        compute_stats(t->c, &st);
        const struct compute_client_stats *w = client_stats(&st, t->watch);
        t->watch_acquires = w ? w->acquires : 0;
    }
    atomic_store(&t->granted, 1);
    if (t->got > 0) {
        while (t->hold && !atomic_load(&t->go))
            nap();
        compute_release(t->cl, t->got);
    }
    return NULL;
}

static void taker_watch(struct taker *t, struct compute_client *cl, bool urgent, bool hold,
                        struct compute *c, const char *watch)
{
    memset(t, 0, sizeof *t);
    t->cl = cl;
    t->urgent = urgent;
    t->hold = hold;
    t->c = c;
    t->watch = watch;
    pthread_create(&t->th, NULL, taker_main, t);
}

static void taker_start(struct taker *t, struct compute_client *cl, bool urgent, bool hold)
{
    taker_watch(t, cl, urgent, hold, NULL, NULL);
}

static void wait_granted(struct taker *t)
{
    while (!atomic_load(&t->granted))
        nap();
}

// ---- the arbiter -------------------------------------------------------------------

#define HAMMER_THREADS 6
#define HAMMER_ROUNDS 3000

struct hammer {
    struct compute_client *cl;
    int max;
    unsigned seed;
    atomic_int *busy, *max_seen;
    int bad_grant;
    int rounds;
};

static void *hammer_main(void *arg)
{
    struct hammer *h = arg;
    for (int r = 0; r < HAMMER_ROUNDS; r++) {
        h->seed = h->seed * 1103515245u + 12345u;
        const int g = compute_acquire(h->cl, (h->seed >> 16) % 4 == 0);
        if (g < 1 || g > h->max)
            h->bad_grant++;
        const int now = atomic_fetch_add(h->busy, g) + g;
        int m = atomic_load(h->max_seen);
        while (now > m && !atomic_compare_exchange_weak(h->max_seen, &m, now))
            ;
        if ((h->seed >> 20) % 8 == 0)
            sched_yield();
        atomic_fetch_sub(h->busy, g);
        compute_release(h->cl, g);
        h->rounds++;
    }
    return NULL;
}

TEST(compute_never_exceeds_budget)
{
    struct compute *c = budget(3, 4);
    CHECK(c);
    CHECK_EQ(compute_size(c), 3);
    const int want[HAMMER_THREADS] = { 1, 2, 3, 5, 2, 1 }; /* 5 is clamped to 3 */
    const char *name[HAMMER_THREADS] = { "a", "b", "c", "d", "e", "f" };
    struct compute_client *cl[HAMMER_THREADS];
    for (int i = 0; i < HAMMER_THREADS; i++)
        cl[i] = compute_client_new(c, name[i], want[i], NULL, 0);
    atomic_int busy = 0, max_seen = 0;
    struct hammer h[HAMMER_THREADS];
    pthread_t th[HAMMER_THREADS];
    for (int i = 0; i < HAMMER_THREADS; i++) {
        h[i] = (struct hammer){ .cl = cl[i], .max = want[i] > 3 ? 3 : want[i], .seed = 7u * i + 1,
                                .busy = &busy, .max_seen = &max_seen };
        pthread_create(&th[i], NULL, hammer_main, &h[i]);
    }
    for (int i = 0; i < HAMMER_THREADS; i++)
        pthread_join(th[i], NULL);
    struct compute_stats st;
    compute_stats(c, &st);
    for (int i = 0; i < HAMMER_THREADS; i++)
        compute_client_free(cl[i]);
    compute_free(c);

    CHECK(atomic_load(&max_seen) <= 3);
    CHECK(st.max_busy <= 3);
    CHECK_EQ(st.busy, 0);
    CHECK_EQ(st.waiting, 0);
    CHECK_EQ(st.n_clients, HAMMER_THREADS);
    for (int i = 0; i < HAMMER_THREADS; i++) {
        CHECK_EQ(h[i].bad_grant, 0);
        CHECK_EQ(h[i].rounds, HAMMER_ROUNDS);
        CHECK_EQ(st.client[i].acquires, HAMMER_ROUNDS);
        CHECK_EQ(st.client[i].busy, 0);
        CHECK_EQ(st.client[i].max_threads, h[i].max);
        CHECK(st.client[i].busy_s >= 0 && st.client[i].wait_s >= 0);
    }
}

TEST(compute_urgent_overtakes_batch)
{
    struct compute *c = budget(1, 4);
    CHECK(c);
    struct compute_client *x = compute_client_new(c, "x", 1, NULL, 0);
    struct compute_client *batch = compute_client_new(c, "batch", 1, NULL, 0);
    struct compute_client *rt = compute_client_new(c, "realtime", 1, NULL, 0);
    const int held = compute_acquire(x, false);
    struct taker b1, b2, u;
    atomic_store(&grant_order, 0);
    taker_start(&b1, batch, false, false);
    wait_waiting(c, 1);
    taker_start(&b2, batch, false, false);
    wait_waiting(c, 2);
    taker_start(&u, rt, true, false);
    wait_waiting(c, 3);
    struct compute_stats st;
    compute_stats(c, &st);
    compute_release(x, held); /* the urgent one goes, then the batch ones in order */
    pthread_join(b1.th, NULL);
    pthread_join(b2.th, NULL);
    pthread_join(u.th, NULL);
    struct compute_stats end;
    compute_stats(c, &end);
    compute_client_free(x);
    compute_client_free(batch);
    compute_client_free(rt);
    compute_free(c);

    CHECK_EQ(held, 1);
    CHECK_EQ(client_stats(&st, "batch")->waiting, 2); /* the queue depth per client */
    CHECK_EQ(client_stats(&st, "realtime")->waiting, 1);
    CHECK_EQ(u.order, 1);
    CHECK_EQ(b1.order, 2);
    CHECK_EQ(b2.order, 3);
    CHECK_EQ(client_stats(&end, "realtime")->urgent_acquires, 1);
    CHECK_EQ(client_stats(&end, "batch")->waits, 2);
    CHECK_EQ(end.busy, 0);
}

TEST(compute_batch_not_starved)
{
    /* One thread, urgent acquires arriving one after the other: the batch
     * acquire lets max_overtakes = 2 of them pass, then goes. */
    struct compute *c = budget(1, 2);
    CHECK(c);
    struct compute_client *x = compute_client_new(c, "x", 1, NULL, 0);
    struct compute_client *batch = compute_client_new(c, "batch", 1, NULL, 0);
    struct compute_client *rt = compute_client_new(c, "realtime", 1, NULL, 0);
    atomic_store(&grant_order, 0);
    const int held = compute_acquire(x, false);
    struct taker b, u[3];
    taker_start(&b, batch, false, true);
    wait_waiting(c, 1);
    taker_start(&u[0], rt, true, true);
    wait_waiting(c, 2);
    compute_release(x, held);        /* u0 overtakes b (1) */
    wait_granted(&u[0]);
    taker_start(&u[1], rt, true, true);
    wait_waiting(c, 2);
    atomic_store(&u[0].go, 1);       /* u1 overtakes b (2) */
    wait_granted(&u[1]);
    taker_start(&u[2], rt, true, true);
    wait_waiting(c, 2);
    atomic_store(&u[1].go, 1);       /* b has waited long enough: it goes before u2 */
    wait_granted(&b);
    const int u2_early = atomic_load(&u[2].granted);
    atomic_store(&b.go, 1);
    wait_granted(&u[2]);
    atomic_store(&u[2].go, 1);
    pthread_join(b.th, NULL);
    for (int i = 0; i < 3; i++)
        pthread_join(u[i].th, NULL);
    struct compute_stats st;
    compute_stats(c, &st);
    compute_client_free(x);
    compute_client_free(batch);
    compute_client_free(rt);
    compute_free(c);

    CHECK_EQ(u2_early, 0);
    CHECK_EQ(u[0].order, 1);
    CHECK_EQ(u[1].order, 2);
    CHECK_EQ(b.order, 3);
    CHECK_EQ(u[2].order, 4);
    CHECK_EQ(st.busy, 0);
    CHECK_EQ(st.waiting, 0);
}

TEST(compute_fifo_without_overtaking)
{
    /* max_overtakes 0: urgency changes nothing, first come first served */
    struct compute *c = budget(1, 0);
    CHECK(c);
    struct compute_client *x = compute_client_new(c, "x", 1, NULL, 0);
    struct compute_client *y = compute_client_new(c, "y", 1, NULL, 0);
    atomic_store(&grant_order, 0);
    const int held = compute_acquire(x, false);
    struct taker b, u;
    taker_start(&b, y, false, false);
    wait_waiting(c, 1);
    taker_start(&u, y, true, false);
    wait_waiting(c, 2);
    compute_release(x, held);
    pthread_join(b.th, NULL);
    pthread_join(u.th, NULL);
    compute_client_free(x);
    compute_client_free(y);
    compute_free(c);
    CHECK_EQ(b.order, 1);
    CHECK_EQ(u.order, 2);
}

TEST(compute_grants_shares_in_order)
{
    struct compute *c = budget(4, 4);
    CHECK(c);
    struct compute_client *x = compute_client_new(c, "x", 2, NULL, 0);
    struct compute_client *wide = compute_client_new(c, "wide", 4, NULL, 0);
    struct compute_client *one = compute_client_new(c, "one", 1, NULL, 0);
    const int gx = compute_acquire(x, false);       /* 2 of 4 */
    const int gw = compute_acquire(wide, false);    /* wants 4, x is active: its share, 2 */
    compute_release(wide, gw);
    const int gx2 = compute_acquire(x, false);      /* now 4 held by x, nothing free */
    struct taker w, o;
    taker_start(&w, wide, false, false);            /* needs 2 */
    wait_waiting(c, 1);
    taker_start(&o, one, false, false);             /* needs 1: waits, nothing is free */
    wait_waiting(c, 2);
    compute_release(x, gx);                         /* 2 free: the head takes both */
    pthread_join(w.th, NULL);                       /* ... and gives them back: one goes */
    pthread_join(o.th, NULL);
    compute_release(x, gx2);
    /* less than its share is free, but half of it: it takes what is free */
    struct compute_client *three = compute_client_new(c, "three", 3, NULL, 0);
    const int g3 = compute_acquire(three, false);   /* alone: 3 */
    const int gpart = compute_acquire(wide, false); /* share 2 (3 + 2 cover 4), 1 free */
    compute_release(wide, gpart);
    compute_release(three, g3);
    struct compute_stats st;
    compute_stats(c, &st);
    compute_client_free(x);
    compute_client_free(wide);
    compute_client_free(one);
    compute_client_free(three);
    compute_free(c);
    CHECK_EQ(g3, 3);
    CHECK_EQ(gpart, 1);
    CHECK_EQ(gx, 2);
    CHECK_EQ(gw, 2);
    CHECK_EQ(gx2, 2);                               /* alone again: all it asks for */
    CHECK_EQ(w.got, 2);
    CHECK_EQ(o.got, 1);
    CHECK(w.order < o.order);
    CHECK_EQ(st.max_busy, 4);
    CHECK_EQ(st.busy, 0);
}

TEST(compute_active_clients_share)
{
    struct compute *c = budget(4, 4);
    CHECK(c);
    struct compute_client *e = compute_client_new(c, "engine", 4, NULL, 0);
    struct compute_client *s = compute_client_new(c, "stt", 4, NULL, 0);
    struct compute_client *t = compute_client_new(c, "tts", 1, NULL, 0);
    int g[8], k = 0;
    g[k] = compute_acquire(e, false);      /* alone: all 4 */
    compute_release(e, g[k++]);
    compute_client_active(s, true);        /* stt between its passes */
    g[k] = compute_acquire(e, false);      /* 2 + 2 cover the budget */
    g[k + 1] = compute_acquire(s, false);  /* its share is free: no wait */
    compute_release(e, g[k++]);
    compute_release(s, g[k++]);
    compute_client_active(t, true);
    g[k] = compute_acquire(e, false);      /* 2 + 2 + 1 */
    compute_release(e, g[k++]);
    compute_client_active(s, false);
    g[k] = compute_acquire(e, false);      /* 3 + 1 */
    struct compute_stats st;
    compute_stats(c, &st);
    compute_release(e, g[k++]);
    compute_client_active(t, false);
    g[k] = compute_acquire(e, false);      /* alone again */
    compute_release(e, g[k++]);
    struct compute_stats end;
    compute_stats(c, &end);
    compute_client_free(e);
    compute_client_free(s);
    compute_client_free(t);
    compute_free(c);
    const int expect[] = { 4, 2, 2, 2, 3, 4 };
    CHECK_EQ(k, 6);
    for (int i = 0; i < k; i++)
        CHECK_MSG(g[i] == expect[i], "grant %d: %d threads, expected %d", i, g[i], expect[i]);
    CHECK(client_stats(&st, "engine")->active && client_stats(&st, "tts")->active);
    CHECK(!client_stats(&st, "stt")->active);
    CHECK(!client_stats(&end, "engine")->active && !client_stats(&end, "tts")->active);
    CHECK_EQ(end.max_busy, 4);
}

TEST(compute_cancel_keeps_the_books)
{
    struct compute *c = budget(6, 4);
    CHECK(c);
    struct compute_client *x = compute_client_new(c, "x", 5, NULL, 0);
    struct compute_client *gone = compute_client_new(c, "gone", 6, NULL, 0);
    struct compute_client *one = compute_client_new(c, "one", 1, NULL, 0);
    const int gx = compute_acquire(x, false);       /* 5 of 6: 1 free */
    struct taker g[3], o;
    for (int i = 0; i < 3; i++) {                   /* share 3, so each needs 2: the head blocks */
        taker_start(&g[i], gone, i == 1, false);
        wait_waiting(c, i + 1);
    }
    taker_start(&o, one, false, false);             /* would fit, but waits behind them */
    wait_waiting(c, 4);
    struct compute_stats before;
    compute_stats(c, &before);
    compute_client_cancel(gone);                    /* its three give up; one goes */
    for (int i = 0; i < 3; i++)
        pthread_join(g[i].th, NULL);
    pthread_join(o.th, NULL);
    const int late = compute_acquire(gone, false);
    compute_release(x, gx);
    struct compute_stats st;
    compute_stats(c, &st);
    compute_client_free(x);
    compute_client_free(gone);
    compute_client_free(one);
    compute_free(c);

    CHECK_EQ(before.waiting, 4);
    CHECK_EQ(client_stats(&before, "one")->acquires, 0);
    for (int i = 0; i < 3; i++)
        CHECK_EQ(g[i].got, OMNI_ERR_LIMIT);
    CHECK_EQ(o.got, 1);
    CHECK_EQ(late, OMNI_ERR_LIMIT);
    CHECK_EQ(st.busy, 0);
    CHECK_EQ(st.waiting, 0);
    CHECK_EQ(client_stats(&st, "gone")->cancelled, 4);
    CHECK_EQ(client_stats(&st, "gone")->acquires, 0);
    CHECK_EQ(client_stats(&st, "one")->acquires, 1);
}

TEST(compute_rejects_too_many_clients)
{
    struct compute *c = budget(2, 4);
    CHECK(c);
    struct compute_client *cl[COMPUTE_MAX_CLIENTS];
    for (int i = 0; i < COMPUTE_MAX_CLIENTS; i++)
        cl[i] = compute_client_new(c, "many", 1, NULL, 0);
    char err[128] = "";
    struct compute_client *extra = compute_client_new(c, "extra", 1, err, sizeof err);
    for (int i = 0; i < COMPUTE_MAX_CLIENTS; i++)
        compute_client_free(cl[i]);
    compute_free(c);
    for (int i = 0; i < COMPUTE_MAX_CLIENTS; i++)
        CHECK(cl[i] != NULL);
    CHECK(extra == NULL);
    CHECK_STR_CONTAINS(err, "extra");
    compute_free(NULL);
    compute_client_free(NULL);
    struct compute_stats st;
    compute_stats(NULL, &st);
    CHECK_EQ(st.n_threads, 0);
}

// ---- pools under the budget ----------------------------------------------------------

#define POOL_MAX 4

struct width_ctx {
    atomic_int calls[POOL_MAX];
    atomic_int bad_nth;
    int expect_nth;
};

static void width_fn(void *arg, int ith, int nth)
{
    struct width_ctx *w = arg;
    if (nth != w->expect_nth || ith >= nth)
        atomic_fetch_add(&w->bad_nth, 1);
    atomic_fetch_add(&w->calls[ith], 1);
}

TEST(compute_pool_runs_the_width_granted)
{
    struct compute *c = budget(3, 4);
    CHECK(c);
    char err[128];
    struct tpool *tp = tpool_new(POOL_MAX, err, sizeof err);
    struct compute_client *x = compute_client_new(c, "x", 1, NULL, 0);
    const int rc = tp ? tpool_attach(tp, c, "pool", err, sizeof err) : -1;
    const int again = tp ? tpool_attach(tp, c, "pool", NULL, 0) : 0;
    /* Units alternate between 2 threads (x holds one) and 3 (the budget,
     * less than the pool's 4): the workers beyond each width never run,
     * also while the widths change under them. */
    struct width_ctx w2 = { .expect_nth = 2 }, w3 = { .expect_nth = 3 };
    int widths_ok = 1;
    const int units = 30, runs = 200;
    for (int u = 0; rc == 0 && u < units; u++) {
        const int gx = compute_acquire(x, false);
        const int n2 = tpool_begin(tp, false);
        widths_ok &= n2 == 2;
        for (int r = 0; r < runs; r++)
            tpool_run(tp, width_fn, &w2);
        tpool_end(tp);
        compute_release(x, gx);
        const int n3 = tpool_begin(tp, u % 2);
        widths_ok &= n3 == 3;
        for (int r = 0; r < runs; r++)
            tpool_run(tp, width_fn, &w3);
        tpool_end(tp);
    }
    /* outside begin/end a pool runs on all its threads */
    struct width_ctx w4 = { .expect_nth = POOL_MAX };
    for (int r = 0; rc == 0 && r < runs; r++)
        tpool_run(tp, width_fn, &w4);
    tpool_cancel(tp);
    const int cancelled = tp ? tpool_begin(tp, false) : 0;
    struct compute_stats st;
    compute_stats(c, &st);
    compute_client_free(x);
    tpool_free(tp);
    compute_free(c);

    CHECK_MSG(rc == 0, "%s", err);
    CHECK(again < 0);
    CHECK(widths_ok);
    CHECK_EQ(atomic_load(&w2.bad_nth) + atomic_load(&w3.bad_nth) + atomic_load(&w4.bad_nth), 0);
    for (int i = 0; i < POOL_MAX; i++) {
        CHECK_EQ(atomic_load(&w2.calls[i]), i < 2 ? units * runs : 0);
        CHECK_EQ(atomic_load(&w3.calls[i]), i < 3 ? units * runs : 0);
        CHECK_EQ(atomic_load(&w4.calls[i]), runs);
    }
    CHECK_EQ(cancelled, OMNI_ERR_LIMIT);
    const struct compute_client_stats *p = client_stats(&st, "pool");
    CHECK(p != NULL);
    CHECK_EQ(p->max_threads, 3);
    CHECK_EQ(p->acquires, 2 * units);
    CHECK_EQ(p->urgent_acquires, units / 2);
    CHECK_EQ(st.busy, 0);
    /* a pool without a budget: begin gives all, end and cancel do nothing */
    struct tpool *free_tp = tpool_new(2, NULL, 0);
    CHECK(free_tp);
    CHECK_EQ(tpool_attach(free_tp, NULL, "none", NULL, 0), 0);
    CHECK_EQ(tpool_begin(free_tp, true), 2);
    tpool_end(free_tp);
    tpool_cancel(free_tp);
    CHECK_EQ(tpool_begin(free_tp, false), 2);
    tpool_free(free_tp);
    CHECK_EQ(tpool_begin(NULL, false), 1);
}

/* A kernel that keeps its thread busy for a while. */
static void busy_fn(void *arg, int ith, int nth)
{
    (void)arg;
    (void)ith;
    (void)nth;
    volatile double x = 1;
    for (int i = 0; i < 2000; i++)
        x = x * 1.0000001 + 1e-9;
}

struct pool_user {
    struct tpool *tp;
    int units;
    bool urgent;
};

static void *pool_user_main(void *arg)
{
    struct pool_user *u = arg;
    for (int k = 0; k < u->units; k++) {
        if (tpool_begin(u->tp, u->urgent && k % 3 == 0) < 0)
            break;
        for (int r = 0; r < 20; r++)
            tpool_run(u->tp, busy_fn, NULL);
        tpool_end(u->tp);
    }
    return NULL;
}

TEST(compute_pools_share_the_budget)
{
    /* Three pools of 2 threads (6 in all) on a budget of 2: never more
     * than 2 threads inside a job at once. */
    struct compute *c = budget(2, 4);
    CHECK(c);
    struct pool_user u[3];
    pthread_t th[3];
    const char *names[3] = { "p0", "p1", "p2" };
    int ok = 1;
    for (int i = 0; i < 3; i++) {
        u[i] = (struct pool_user){ .tp = tpool_new(2, NULL, 0), .units = 150, .urgent = i == 1 };
        ok &= u[i].tp && tpool_attach(u[i].tp, c, names[i], NULL, 0) == 0;
    }
    tpool_census_enable(true);
    for (int i = 0; ok && i < 3; i++)
        pthread_create(&th[i], NULL, pool_user_main, &u[i]);
    for (int i = 0; ok && i < 3; i++)
        pthread_join(th[i], NULL);
    struct tpool_census cen;
    tpool_census_get(&cen);
    tpool_census_enable(false);
    struct compute_stats st;
    compute_stats(c, &st);
    for (int i = 0; i < 3; i++)
        tpool_free(u[i].tp);
    compute_free(c);

    CHECK(ok);
    fprintf(stderr, "[census max %d, budget max %d] ", cen.max, st.max_busy);
    CHECK(cen.max >= 1 && cen.max <= 2);
    CHECK_EQ(cen.now, 0);
    CHECK(st.max_busy <= 2);
    for (int i = 0; i < 3; i++)
        CHECK_EQ(client_stats(&st, names[i])->acquires, 150);
}

TEST(compute_default_budget)
{
    CHECK(compute_default() == NULL);
    struct compute *c = budget(2, 4);
    CHECK(c);
    compute_set_default(c);
    const int same = compute_default() == c;
    compute_free(c); /* also clears the default it was */
    CHECK(same);
    CHECK(compute_default() == NULL);
}

// ---- the engine and Whisper under one budget ------------------------------------------

static void free_model(void *m) { llm_model_free(m); }
static void free_engine(void *e) { engine_free(e); }
static void free_wmodel(void *m) { whisper_model_free(m); }
static void free_batcher(void *b) { whisper_batcher_free(b); }
static void free_state(void *s) { whisper_state_free(s); }
static void free_budget(void *c) { compute_free(c); }

static void free_tts(void *t) { tts_free(t); }

TEST(compute_tts_sentences_are_units)
{
    /* TTS takes the process's budget when it is made: a sentence is one
     * unit of one thread, and an urgent stream's first sentence asks first. */
    char err[256];
    struct compute *c = budget(2, 4);
    CHECK(c);
    compute_set_default(c);
    struct tts *t = tts_new(NULL, err, sizeof err);
    compute_set_default(NULL);
    test_defer(free_budget, c);
    test_defer(free_tts, t);
    CHECK_MSG(t, "%s", err);
    struct tts_stream_params sp = tts_stream_default_params();
    sp.urgent = true;
    float *pcm = NULL;
    size_t n = 0;
    int rate = 0;
    const int rc = tts_synthesize(t, &sp, "Hello there. How are you today?", &pcm, &n, &rate, err,
                                  sizeof err);
    free(pcm);
    CHECK_MSG(rc == 0, "%s", err);
    CHECK(n > 0);
    struct compute_stats st;
    compute_stats(c, &st);
    const struct compute_client_stats *ct = client_stats(&st, "tts");
    CHECK(ct != NULL);
    CHECK_EQ(ct->max_threads, 1);
    CHECK_EQ(ct->acquires, 2);
    CHECK_EQ(ct->urgent_acquires, 1);
    CHECK_EQ(ct->busy, 0);
    test_release(t);
}

struct gen {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int done, tokens, errors;
    int first_order;           /* grant_order value at the first token */
};

static void gen_event(void *user, const struct engine_event *ev)
{
    struct gen *g = user;
    pthread_mutex_lock(&g->mu);
    if (ev->type == ENGINE_EV_TOKEN) {
        if (g->tokens++ == 0)
            g->first_order = atomic_fetch_add(&grant_order, 1) + 1;
    } else {
        g->errors += ev->type == ENGINE_EV_ERROR;
        g->done++;
        pthread_cond_broadcast(&g->cv);
    }
    pthread_mutex_unlock(&g->mu);
}

static void gen_wait(struct gen *g, int n)
{
    pthread_mutex_lock(&g->mu);
    while (g->done < n)
        pthread_cond_wait(&g->cv, &g->mu);
    pthread_mutex_unlock(&g->mu);
}

static struct engine *budget_engine(struct llm_model *m, struct compute *c, char *err, size_t errlen)
{
    struct engine_params ep = engine_default_params();
    ep.compute = c;
    ep.kv_memory_bytes = 8 << 20;
    struct engine *e = engine_new(&ep, err, errlen);
    test_defer(free_engine, e);
    if (e && (engine_add_model(e, m, "m", err, errlen) < 0 || engine_start(e, err, errlen) < 0))
        return NULL;
    return e;
}

/* The budget held by x; a batch acquire queued; then a request whose
 * first step waits for the budget too. Who goes first at the release? */
static int engine_step_vs_batch(enum engine_priority prio, int *engine_first, char *err,
                                size_t errlen)
{
    struct llm_model *m = llm_model_load(test_golden("llama-f32.gguf"), NULL, err, errlen);
    test_defer(free_model, m);
    if (!m)
        return 1;
    struct compute *c = budget(2, 4);
    test_defer(free_budget, c);
    struct engine *e = budget_engine(m, c, err, errlen);
    if (!e)
        return -1;
    /* y keeps one of the two threads throughout and x the other until the
     * release: then one thread is free, for one of the two waiters. */
    struct compute_client *y = compute_client_new(c, "y", 1, NULL, 0);
    struct compute_client *x = compute_client_new(c, "x", 1, NULL, 0);
    struct compute_client *batch = compute_client_new(c, "batch", 2, NULL, 0);
    atomic_store(&grant_order, 0);
    const int held_y = compute_acquire(y, false);
    const int held = compute_acquire(x, false);
    struct taker b;
    taker_start(&b, batch, false, false);
    wait_waiting(c, 1);
    struct gen g = { .mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER };
    const int32_t prompt[] = { 1, 17, 42, 99, 7, 300, 12, 5 };
    struct engine_request rq = engine_default_request();
    rq.prompt = prompt;
    rq.n_prompt = 8;
    rq.max_tokens = 1;
    rq.priority = prio;
    rq.on_event = gen_event;
    rq.user = &g;
    int rc = engine_submit(e, &rq, NULL, err, errlen);
    if (rc == 0) {
        wait_waiting(c, 2); /* the engine's first step waits behind the batch acquire */
        compute_release(x, held);
        gen_wait(&g, 1);
    } else {
        compute_release(x, held);
    }
    pthread_join(b.th, NULL);
    struct compute_stats st;
    compute_stats(c, &st);
    const struct compute_client_stats *ce = client_stats(&st, "engine");
    const uint64_t urgent = ce ? ce->urgent_acquires : 99;
    test_release(e);
    compute_release(y, held_y);
    compute_client_free(y);
    compute_client_free(x);
    compute_client_free(batch);
    if (rc < 0)
        return rc;
    *engine_first = g.first_order < b.order;
    if (g.tokens != 1 || g.errors || urgent != (prio == ENGINE_PRIORITY_INTERACTIVE))
        return omni_fail(err, errlen, OMNI_ERR_ARG, "tokens %d, errors %d, urgent steps %llu",
                         g.tokens, g.errors, (unsigned long long)urgent);
    return 0;
}

TEST(compute_interactive_prompt_goes_first)
{
    char err[256] = "";
    int first = -1;
    int rc = engine_step_vs_batch(ENGINE_PRIORITY_INTERACTIVE, &first, err, sizeof err);
    if (rc == 1)
        SKIP("golden fixtures missing (make golden-fixtures)");
    CHECK_MSG(rc == 0, "%s", err);
    CHECK_EQ(first, 1);
    rc = engine_step_vs_batch(ENGINE_PRIORITY_BATCH, &first, err, sizeof err);
    CHECK_MSG(rc == 0, "%s", err);
    CHECK_EQ(first, 0);
    /* an unknown priority is refused */
    struct llm_model *m = llm_model_load(test_golden("llama-f32.gguf"), NULL, err, sizeof err);
    test_defer(free_model, m);
    struct engine *e = budget_engine(m, NULL, err, sizeof err);
    CHECK_MSG(e, "%s", err);
    const int32_t prompt[] = { 1, 2, 3 };
    struct engine_request rq = engine_default_request();
    rq.prompt = prompt;
    rq.n_prompt = 3;
    rq.priority = (enum engine_priority)7;
    CHECK_EQ(engine_submit(e, &rq, NULL, err, sizeof err), OMNI_ERR_ARG);
    CHECK_STR_CONTAINS(err, "priority 7");
}

static atomic_bool final_waits;
static bool final_waits_fn(void *user)
{
    (void)user;
    return atomic_load(&final_waits);
}

/* tools/make_whisper_golden.py input_features(): [80][3000] */
static float *features(void)
{
    float *x = malloc(80 * 3000 * sizeof(float));
    for (int m = 0; x && m < 80; m++)
        for (int t = 0; t < 3000; t++)
            x[m * 3000 + t] = (float)(sin(0.0021 * (m + 1) * t + 0.37 * m) + 0.25 * cos(0.05 * t));
    return x;
}

struct lane {
    struct whisper_state *s;
    const float *mel;
    int rounds, rc;
    char err[256];
};

static void *lane_main(void *arg)
{
    struct lane *l = arg;
    static const int32_t prompt[] = { 1, 5, 17, 300, 42, 7 };
    for (int k = 0; k < l->rounds && l->rc == 0; k++) {
        l->rc = whisper_encode(l->s, l->mel, 3000, 100 * k, l->err, sizeof l->err);
        if (l->rc == 0)
            l->rc = whisper_decode(l->s, 0, prompt, 6, 0, false, l->err, sizeof l->err);
    }
    return NULL;
}

TEST(compute_final_pass_goes_first)
{
    char err[256];
    struct whisper_model *wm = whisper_model_load(test_golden("whisper-golden-f32.bin"), err, sizeof err);
    test_defer(free_wmodel, wm);
    if (!wm)
        SKIP("golden whisper model not converted (make golden-fixtures)");
    float *mel = features();
    test_defer(free, mel);
    struct compute *c = budget(2, 4);
    test_defer(free_budget, c);
    struct whisper_batcher_params bp = whisper_batcher_default_params();
    bp.compute = c;
    bp.n_threads = 8; /* capped at the budget */
    bp.urgent = final_waits_fn;
    struct whisper_batcher *b = whisper_batcher_new(wm, &bp, err, sizeof err);
    test_defer(free_batcher, b);
    CHECK_MSG(mel && b, "%s", err);
    struct lane l = { .s = whisper_state_new_batched(b, err, sizeof err), .mel = mel, .rounds = 1 };
    test_defer(free_state, l.s);
    CHECK(l.s);
    struct compute_client *y = compute_client_new(c, "y", 1, NULL, 0);
    struct compute_client *x = compute_client_new(c, "x", 1, NULL, 0);
    struct compute_client *batch = compute_client_new(c, "batch", 2, NULL, 0);
    const int held_y = compute_acquire(y, false); /* one thread free at the release */
    const int held = compute_acquire(x, false);
    struct taker t;
    taker_watch(&t, batch, false, false, c, "stt");
    wait_waiting(c, 1);
    atomic_store(&final_waits, true);
    pthread_t th;
    pthread_create(&th, NULL, lane_main, &l);
    wait_waiting(c, 2);          /* the encoder pass waits behind the batch acquire */
    compute_release(x, held);    /* ... and goes first: a final waits */
    pthread_join(t.th, NULL);
    pthread_join(th, NULL);
    atomic_store(&final_waits, false);
    struct compute_stats st;
    compute_stats(c, &st);
    compute_release(y, held_y);
    compute_client_free(y);
    compute_client_free(x);
    compute_client_free(batch);
    CHECK_MSG(l.rc == 0, "%s", l.err);
    const struct compute_client_stats *s = client_stats(&st, "stt");
    CHECK(s != NULL);
    CHECK_EQ(s->max_threads, 2);
    CHECK_EQ(t.watch_acquires, 1); /* the batch acquire came after the encoder pass */
    CHECK(s->urgent_acquires >= 1);
}

TEST(compute_engine_and_whisper_share_two_threads)
{
    char err[256];
    struct llm_model *m = llm_model_load(test_golden("llama-f32.gguf"), NULL, err, sizeof err);
    test_defer(free_model, m);
    struct whisper_model *wm = whisper_model_load(test_golden("whisper-golden-f32.bin"), err, sizeof err);
    test_defer(free_wmodel, wm);
    if (!m || !wm)
        SKIP("golden fixtures missing (make golden-fixtures)");
    float *mel = features();
    test_defer(free, mel);
    struct compute *c = budget(2, 4);
    test_defer(free_budget, c);
    struct engine *e = budget_engine(m, c, err, sizeof err);
    CHECK_MSG(e, "%s", err);
    struct whisper_batcher_params bp = whisper_batcher_default_params();
    bp.compute = c;
    struct whisper_batcher *b = whisper_batcher_new(wm, &bp, err, sizeof err);
    test_defer(free_batcher, b);
    CHECK_MSG(mel && b, "%s", err);
    struct lane lanes[2];
    for (int i = 0; i < 2; i++) {
        lanes[i] = (struct lane){ .s = whisper_state_new_batched(b, err, sizeof err), .mel = mel,
                                  .rounds = 3 };
        test_defer(free_state, lanes[i].s);
        CHECK(lanes[i].s);
    }

    tpool_census_enable(true);
    struct gen g = { .mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER };
    int32_t prompt[4][24];
    int submitted = 0;
    for (int r = 0; r < 4; r++) {
        for (int i = 0; i < 24; i++)
            prompt[r][i] = 3 + (r * 131 + i * 17) % 200;
        struct engine_request rq = engine_default_request();
        rq.prompt = prompt[r];
        rq.n_prompt = 24;
        rq.max_tokens = 40;
        rq.ignore_eog = true;
        rq.priority = r % 2 ? ENGINE_PRIORITY_BATCH : ENGINE_PRIORITY_INTERACTIVE;
        rq.on_event = gen_event;
        rq.user = &g;
        submitted += engine_submit(e, &rq, NULL, err, sizeof err) == 0;
    }
    pthread_t th[2];
    for (int i = 0; i < 2; i++)
        pthread_create(&th[i], NULL, lane_main, &lanes[i]);
    for (int i = 0; i < 2; i++)
        pthread_join(th[i], NULL);
    gen_wait(&g, submitted);
    struct tpool_census cen;
    tpool_census_get(&cen);
    tpool_census_enable(false);
    struct compute_stats st;
    compute_stats(c, &st);

    CHECK_EQ(submitted, 4);
    CHECK_EQ(g.errors, 0);
    CHECK_EQ(g.tokens, 4 * 40);
    for (int i = 0; i < 2; i++)
        CHECK_MSG(lanes[i].rc == 0, "lane %d: %s", i, lanes[i].err);
    const struct compute_client_stats *ce = client_stats(&st, "engine");
    const struct compute_client_stats *cs = client_stats(&st, "stt");
    CHECK(ce && cs);
    fprintf(stderr, "[census max %d; engine %llu units waited %.3f s, stt %llu units waited %.3f s] ",
            cen.max, (unsigned long long)ce->acquires, ce->wait_s,
            (unsigned long long)cs->acquires, cs->wait_s);
    CHECK(cen.max >= 1 && cen.max <= 2);
    CHECK(st.max_busy <= 2);
    CHECK(ce->acquires >= 40);
    CHECK(cs->acquires >= 6);   /* an encoder and a decoder pass per round, merged or not */
    CHECK_EQ(st.busy, 0);
}
