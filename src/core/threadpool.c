/* threadpool.c - fixed worker pool with spin-then-futex dispatch.
 *
 * A decode step issues a few hundred tpool_run calls of ~10-100 us each, so
 * waking workers through a condvar every time would dominate. Workers spin on
 * a generation counter for OMNI_SPIN_US after their last job and only then
 * sleep on a futex; the caller does the same while waiting for the last one. */
#define _GNU_SOURCE /* sched_getaffinity, CPU_* */
#include "threadpool.h"

#include "omni.h"

#include <limits.h>
#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define cpu_relax() _mm_pause()
#else
#define cpu_relax() ((void)0)
#endif

#define OMNI_SPIN_US 300 /* how long an idle thread polls before sleeping */
#define TPOOL_MAX_THREADS 512

struct tpool {
    int n_threads; /* caller + workers */
    pthread_t *workers;  /* n_threads - 1 */
    int n_started;
    int spin_us;   /* 0 when there are more threads than CPUs: spinning would
                      only steal the CPU from the thread that has work */
    tpool_fn fn;   /* the job of the current generation; written before gen moves */
    void *ctx;
    _Atomic uint32_t gen;       /* bumped once per tpool_run (futex word for workers) */
    _Atomic uint32_t pending;   /* workers still running the current job (futex word for the caller) */
    _Atomic int n_sleeping;     /* workers blocked (or about to block) on gen */
    _Atomic int caller_sleeping;
    _Atomic int stop;
};

struct worker_arg {
    struct tpool *tp;
    int ith;
};

static void futex_wait(_Atomic uint32_t *addr, uint32_t expected)
{
    syscall(SYS_futex, (uint32_t *)addr, FUTEX_WAIT_PRIVATE, expected, NULL, NULL, 0);
}

static void futex_wake_all(_Atomic uint32_t *addr)
{
    syscall(SYS_futex, (uint32_t *)addr, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
}

/* Spin while (*addr == value) == while_equal, up to spin_us; true when the
 * condition ended, false when the budget ran out first. */
static int spin(_Atomic uint32_t *addr, uint32_t value, int while_equal, int spin_us)
{
    double deadline = 0;
    for (unsigned i = 1;; i++) {
        if ((atomic_load_explicit(addr, memory_order_acquire) == value) != while_equal)
            return 1;
        if (spin_us == 0)
            return 0;
        cpu_relax();
        if ((i & 255) == 0) { /* reading the clock is ~20 ns: not every round */
            double now = omni_time_s();
            if (deadline == 0)
                deadline = now + spin_us * 1e-6;
            else if (now > deadline)
                return 0;
        }
    }
}

static void *worker_main(void *p)
{
    struct worker_arg *wa = p;
    struct tpool *tp = wa->tp;
    const int ith = wa->ith;
    uint32_t seen = 0;
    free(wa);
    for (;;) {
        if (!spin(&tp->gen, seen, 1, tp->spin_us)) {
            /* Announce the sleep before re-checking gen inside futex_wait:
             * tpool_run bumps gen before reading n_sleeping (both seq_cst),
             * so either it sees us and wakes us, or the wait returns at once. */
            atomic_fetch_add(&tp->n_sleeping, 1);
            while (atomic_load(&tp->gen) == seen)
                futex_wait(&tp->gen, seen);
            atomic_fetch_sub(&tp->n_sleeping, 1);
        }
        seen = atomic_load_explicit(&tp->gen, memory_order_acquire);
        if (atomic_load_explicit(&tp->stop, memory_order_relaxed))
            break;
        tp->fn(tp->ctx, ith, tp->n_threads);
        if (atomic_fetch_sub_explicit(&tp->pending, 1, memory_order_acq_rel) == 1 &&
            atomic_load(&tp->caller_sleeping))
            futex_wake_all(&tp->pending);
    }
    return NULL;
}

/* Publish (fn, ctx) as a new generation and wake sleepers. */
static void start_generation(struct tpool *tp, tpool_fn fn, void *ctx)
{
    tp->fn = fn;
    tp->ctx = ctx;
    atomic_store(&tp->pending, (uint32_t)(tp->n_started));
    atomic_fetch_add(&tp->gen, 1);
    if (atomic_load(&tp->n_sleeping) > 0)
        futex_wake_all(&tp->gen);
}

/* Wait until every worker has finished the current generation. */
static void wait_workers(struct tpool *tp)
{
    if (spin(&tp->pending, 0, 0, tp->spin_us))
        return;
    /* Same handshake as the workers' sleep, on the pending word. */
    atomic_store(&tp->caller_sleeping, 1);
    uint32_t p;
    while ((p = atomic_load(&tp->pending)) != 0)
        futex_wait(&tp->pending, p);
    atomic_store(&tp->caller_sleeping, 0);
}

struct tpool *tpool_new(int n_threads, char *err, size_t errlen)
{
    if (n_threads < 1 || n_threads > TPOOL_MAX_THREADS) {
        omni_fail(err, errlen, OMNI_ERR_ARG, "threadpool: %d threads (1..%d)", n_threads,
                  TPOOL_MAX_THREADS);
        return NULL;
    }
    struct tpool *tp = calloc(1, sizeof *tp);
    if (!tp)
        goto nomem;
    tp->n_threads = n_threads;
    cpu_set_t set;
    int n_cpus = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set)
                                                             : (int)sysconf(_SC_NPROCESSORS_ONLN);
    tp->spin_us = n_threads <= n_cpus ? OMNI_SPIN_US : 0;
    if (n_threads > 1) {
        tp->workers = calloc((size_t)n_threads - 1, sizeof *tp->workers);
        if (!tp->workers)
            goto nomem;
    }
    for (int i = 1; i < n_threads; i++) {
        struct worker_arg *wa = malloc(sizeof *wa);
        if (!wa)
            goto nomem;
        *wa = (struct worker_arg){ tp, i };
        int rc = pthread_create(&tp->workers[i - 1], NULL, worker_main, wa);
        if (rc != 0) {
            free(wa);
            omni_fail(err, errlen, OMNI_ERR_NOMEM, "threadpool: pthread_create: %s",
                      strerror(rc));
            tpool_free(tp);
            return NULL;
        }
        tp->n_started++;
    }
    return tp;
nomem:
    omni_fail(err, errlen, OMNI_ERR_NOMEM, "threadpool: out of memory");
    tpool_free(tp);
    return NULL;
}

void tpool_free(struct tpool *tp)
{
    if (!tp)
        return;
    if (tp->n_started > 0) {
        atomic_store(&tp->stop, 1);
        atomic_fetch_add(&tp->gen, 1);
        futex_wake_all(&tp->gen);
        for (int i = 0; i < tp->n_started; i++)
            pthread_join(tp->workers[i], NULL);
    }
    free(tp->workers);
    free(tp);
}

int tpool_size(const struct tpool *tp)
{
    return tp ? tp->n_threads : 1;
}

void tpool_run(struct tpool *tp, tpool_fn fn, void *ctx)
{
    if (!tp || tp->n_started == 0) {
        fn(ctx, 0, 1);
        return;
    }
    start_generation(tp, fn, ctx);
    fn(ctx, 0, tp->n_threads);
    wait_workers(tp);
}

// ---- physical cores --------------------------------------------------------

static int read_int_file(const char *path, int *out)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    int ok = fscanf(f, "%d", out) == 1;
    fclose(f);
    return ok ? 0 : -1;
}

/* Distinct (package, core) pairs among the CPUs this process may run on, so
 * SMT siblings count once and a container's cpuset is respected. */
int omni_physical_cores(void)
{
    cpu_set_t set;
    int n_logical = (int)sysconf(_SC_NPROCESSORS_ONLN);
    if (n_logical < 1)
        n_logical = 1;
    if (sched_getaffinity(0, sizeof set, &set) != 0)
        return n_logical;
    int n_allowed = CPU_COUNT(&set);
    long *seen = calloc(CPU_SETSIZE, sizeof *seen);
    if (!seen)
        return n_allowed > 0 ? n_allowed : n_logical;
    int n_cores = 0;
    for (int cpu = 0; cpu < CPU_SETSIZE; cpu++) {
        if (!CPU_ISSET(cpu, &set))
            continue;
        char path[128];
        int core, pkg;
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu%d/topology/core_id", cpu);
        if (read_int_file(path, &core) != 0)
            goto fallback;
        snprintf(path, sizeof path,
                 "/sys/devices/system/cpu/cpu%d/topology/physical_package_id", cpu);
        if (read_int_file(path, &pkg) != 0)
            goto fallback;
        long key = ((long)pkg << 32) | (unsigned)core;
        int dup = 0;
        for (int i = 0; i < n_cores && !dup; i++)
            dup = seen[i] == key;
        if (!dup)
            seen[n_cores++] = key;
    }
    free(seen);
    return n_cores > 0 ? n_cores : 1;
fallback:
    free(seen);
    return n_allowed > 0 ? n_allowed : n_logical;
}
