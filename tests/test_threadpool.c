/* test_threadpool.c - the pool runs every thread index exactly once per
 * tpool_run, over many back-to-back runs and with sleeps between them. */
#include "src/core/threadpool.h"
#include "tests/test.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <time.h>

#define MAX_T 8

static void free_tpool(void *tp) { tpool_free(tp); }

struct count_ctx {
    _Atomic int calls[MAX_T];
    _Atomic int bad_nth;
    int expect_nth;
    long long *slots; /* each thread adds to its own slot */
};

static void count_fn(void *p, int ith, int nth)
{
    struct count_ctx *c = p;
    if (nth != c->expect_nth || ith < 0 || ith >= nth)
        atomic_fetch_add(&c->bad_nth, 1);
    else
        atomic_fetch_add(&c->calls[ith], 1);
}

TEST(threadpool_runs_each_index_once)
{
    for (int n = 1; n <= 4; n++) {
        char err[128];
        struct tpool *tp = tpool_new(n, err, sizeof err);
        CHECK(tp != NULL);
        test_defer(free_tpool, tp);
        CHECK_EQ(tpool_size(tp), n);
        struct count_ctx c = { .expect_nth = n };
        /* more threads than cores take the futex path: slower, fewer runs */
        const int runs = n <= 2 ? 20000 : 3000;
        for (int r = 0; r < runs; r++)
            tpool_run(tp, count_fn, &c);
        test_release(tp);
        CHECK_EQ(atomic_load(&c.bad_nth), 0);
        for (int i = 0; i < n; i++)
            CHECK_EQ(atomic_load(&c.calls[i]), runs);
    }
}

/* Each run sums a slice of an array; the results of a run must be complete
 * when tpool_run returns (no straggler writes after it). */
struct sum_ctx {
    const int *data;
    int n;
    long long partial[MAX_T];
};

static void sum_fn(void *p, int ith, int nth)
{
    struct sum_ctx *c = p;
    long long s = 0;
    for (int i = c->n * ith / nth; i < c->n * (ith + 1) / nth; i++)
        s += c->data[i];
    c->partial[ith] = s;
}

TEST(threadpool_results_visible_after_run)
{
    enum { N = 4099 };
    static int data[N];
    long long want = 0;
    for (int i = 0; i < N; i++) {
        data[i] = i * 7 - 300;
        want += data[i];
    }
    for (int n = 1; n <= 4; n++) {
        struct tpool *tp = tpool_new(n, NULL, 0);
        CHECK(tp != NULL);
        test_defer(free_tpool, tp);
        for (int r = 0; r < 2000; r++) {
            struct sum_ctx c = { .data = data, .n = N };
            for (int i = 0; i < MAX_T; i++)
                c.partial[i] = -1;
            tpool_run(tp, sum_fn, &c);
            long long got = 0;
            for (int i = 0; i < n; i++)
                got += c.partial[i];
            CHECK_EQ(got, want);
            /* now and then let the workers fall asleep on the futex */
            if (r % 500 == 499) {
                struct timespec ts = { 0, 2 * 1000 * 1000 };
                nanosleep(&ts, NULL);
            }
        }
        test_release(tp);
    }
}

TEST(threadpool_rejects_bad_sizes)
{
    char err[128] = "";
    CHECK(tpool_new(0, err, sizeof err) == NULL);
    CHECK_STR_CONTAINS(err, "threads");
    CHECK(tpool_new(-3, NULL, 0) == NULL);
    tpool_free(NULL);
    CHECK_EQ(tpool_size(NULL), 1);
}

TEST(threadpool_physical_cores)
{
    int n = omni_physical_cores();
    CHECK(n >= 1 && n <= 4096);
}

/* The running count of /proc/loadavg lines, good and malformed. */
TEST(threadpool_loadavg_running_parses)
{
    CHECK_EQ(tpool_loadavg_running("0.52 0.58 0.59 3/613 4242\n"), 3);
    CHECK_EQ(tpool_loadavg_running("10.00 9.00 8.00 17/2000 1"), 17);
    CHECK_EQ(tpool_loadavg_running("0.52 0.58 0.59"), -1);
    CHECK_EQ(tpool_loadavg_running("0.52 0.58 0.59 x/613 1"), -1);
    CHECK_EQ(tpool_loadavg_running("0.52 0.58 0.59 3 1"), -1);
    CHECK_EQ(tpool_loadavg_running(""), -1);
    /* pinned to 2 of 16 CPUs: 16 runnable is 2 on ours, 17 is 3 */
    CHECK_EQ(tpool_running_share(16, 16, 2), 2);
    CHECK_EQ(tpool_running_share(17, 16, 2), 3);
    CHECK_EQ(tpool_running_share(5, 2, 2), 5);
    CHECK_EQ(tpool_running_share(5, 2, 4), 5);
    CHECK_EQ(tpool_running_share(-1, 16, 2), -1);
    bool b = tpool_machine_busy(); /* whatever the load: a boolean, no crash */
    CHECK(b == true || b == false);
}

/* Two pools, each as wide as the machine, run back to back from two
 * threads at once: oversubscribed, every run still completes with every
 * index once (the spinners yield and sleep rather than starve the others). */
struct over_arg {
    struct tpool *tp;
    struct count_ctx c;
    int runs;
};

static void *over_main(void *p)
{
    struct over_arg *a = p;
    for (int r = 0; r < a->runs; r++)
        tpool_run(a->tp, count_fn, &a->c);
    return NULL;
}

TEST(threadpool_oversubscribed_pools_finish)
{
    const int n = omni_physical_cores() < MAX_T ? omni_physical_cores() + 1 : MAX_T;
    struct over_arg a[2];
    pthread_t th[2];
    char err[128];
    for (int k = 0; k < 2; k++) {
        a[k] = (struct over_arg){ .tp = tpool_new(n, err, sizeof err), .runs = 2000 };
        CHECK(a[k].tp != NULL);
        test_defer(free_tpool, a[k].tp);
        a[k].c.expect_nth = n;
    }
    for (int k = 0; k < 2; k++)
        CHECK_EQ(pthread_create(&th[k], NULL, over_main, &a[k]), 0);
    for (int k = 0; k < 2; k++)
        pthread_join(th[k], NULL);
    for (int k = 0; k < 2; k++) {
        CHECK_EQ(atomic_load(&a[k].c.bad_nth), 0);
        for (int i = 0; i < n; i++)
            CHECK_EQ(atomic_load(&a[k].c.calls[i]), a[k].runs);
    }
}
