/* threadpool.c - fixed worker pool with spin-then-futex dispatch.
 *
 * A decode step issues a few hundred tpool_run calls of ~10-100 us each, so
 * waking workers through a condvar every time would dominate. Workers spin on
 * the job word for OMNI_SPIN_US after their last job and only then sleep on a
 * futex; the caller does the same while waiting for the last one.
 *
 * Under a compute budget a run may use fewer threads than the pool has (the
 * width granted for the unit of work). The job word carries the run's
 * generation and width together, so a worker always knows whether a run
 * includes it; the ones beyond the width neither run nor spin, and sleepers
 * are woken through a futex bitset that names only the participants, so an
 * idle worker is not woken by every matmul of a narrower unit.
 *
 * Spinning only pays while every spinner has a CPU of its own. When the
 * machine is oversubscribed (another process, or more busy threads than
 * CPUs), a spinner steals the CPU from the thread whose work it waits for,
 * and both engines on a shared machine collapse. So a spinning thread
 * sched_yield()s every few microseconds, and goes to sleep at once while the
 * kernel reports more runnable threads than the machine has online CPUs
 * (/proc/loadavg's running count, read at most every OMNI_BUSY_CHECK_US). */
#define _GNU_SOURCE /* sched_getaffinity, CPU_* */
#include "threadpool.h"

#include "compute.h"
#include "omni.h"

#include <limits.h>
#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/syscall.h>
#include <unistd.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define cpu_relax() _mm_pause()
#else
#define cpu_relax() ((void)0)
#endif

#if __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the job word's generation must be its first 32 bits (the futex word)"
#endif

#define OMNI_SPIN_US 300 /* how long an idle thread polls before sleeping */
#define OMNI_BUSY_CHECK_US 2000 /* how often a spinner re-reads the machine's load */
#define TPOOL_MAX_THREADS 512

/* The job word: generation (bumped once per run; its low half is the
 * workers' futex word) and the run's width, read together in one load. */
#define JOB(gen, nth) ((uint64_t)(uint32_t)(nth) << 32 | (uint32_t)(gen))
#define JOB_GEN(j) ((uint32_t)(j))
#define JOB_NTH(j) ((int)((j) >> 32))

struct tpool {
    int n_threads; /* caller + workers */
    pthread_t *workers;  /* n_threads - 1 */
    int n_started;
    int spin_us;   /* 0 when there are more threads than CPUs: spinning would
                      only steal the CPU from the thread that has work */
    tpool_fn fn;   /* the job of the current generation; written before job moves */
    void *ctx;
    _Atomic uint64_t job;       /* JOB(gen, nth) of the latest run */
    _Atomic uint32_t pending;   /* workers still running the current job (futex word for the caller) */
    _Atomic uint8_t *sleeping;  /* [n_threads]: worker i blocked (or about to block) on job */
    _Atomic int caller_sleeping;
    _Atomic int spin_width;     /* workers below it may spin; 0 parks every idle worker */
    _Atomic int stop;
    /* the budget (owner thread, except cl's park hook) */
    struct compute_client *cl;  /* NULL: ungated */
    int width;                  /* threads of the runs: the grant between begin and end */
    int held;                   /* threads held from the budget */
};

struct worker_arg {
    struct tpool *tp;
    int ith;
};

// ---- census ------------------------------------------------------------------

static atomic_bool census_on;
static _Atomic int census_now, census_max;

static bool census_enter(void)
{
    if (!atomic_load_explicit(&census_on, memory_order_relaxed))
        return false;
    int now = atomic_fetch_add(&census_now, 1) + 1;
    int max = atomic_load(&census_max);
    while (now > max && !atomic_compare_exchange_weak(&census_max, &max, now))
        ;
    return true;
}

static void census_leave(bool counted)
{
    if (counted)
        atomic_fetch_sub(&census_now, 1);
}

void tpool_census_enable(bool on)
{
    atomic_store(&census_max, atomic_load(&census_now));
    atomic_store(&census_on, on);
}

void tpool_census_get(struct tpool_census *out)
{
    out->now = atomic_load(&census_now);
    out->max = atomic_load(&census_max);
}

// ---- dispatch ------------------------------------------------------------------

static uint32_t *job_futex(struct tpool *tp)
{
    return (uint32_t *)&tp->job; /* the generation half (little endian) */
}

static uint32_t worker_bit(int ith)
{
    return 1u << (ith & 31);
}

static void futex_wait(uint32_t *addr, uint32_t expected, uint32_t bitset)
{
    syscall(SYS_futex, addr, FUTEX_WAIT_BITSET_PRIVATE, expected, NULL, NULL, bitset);
}

static void futex_wake(uint32_t *addr, uint32_t bitset)
{
    syscall(SYS_futex, addr, FUTEX_WAKE_BITSET_PRIVATE, INT_MAX, NULL, NULL, bitset);
}

// ---- oversubscription ----------------------------------------------------------

/* The machine's online CPUs: /proc/loadavg counts the runnable threads of
 * the whole kernel, so a container's cpuset (where other tenants' threads
 * do not compete for our CPUs) must not be compared against it. */
static int n_cpus_online(void)
{
    const long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

/* Runnable threads on the machine from the 4th field of a /proc/loadavg
 * line ("0.52 0.58 0.59 3/613 4242": 3 running now); -1 when malformed. */
int tpool_loadavg_running(const char *line)
{
    const char *p = line;
    for (int field = 0; field < 3; field++) {
        p = strchr(p, ' ');
        if (!p)
            return -1;
        p++;
    }
    char *end;
    long r = strtol(p, &end, 10);
    return end != p && *end == '/' && r >= 0 && r < INT_MAX ? (int)r : -1;
}

int tpool_running_share(int running, int online, int mine)
{
    if (running < 0 || online <= 0 || mine <= 0 || mine >= online)
        return running;
    return (int)(((int64_t)running * mine + online - 1) / online);
}

/* CPUs this process may run on (taskset, a cpuset); the online count when
 * unknown. Pinned to 2 of a 16-CPU host that other jobs kept busy, the
 * whole kernel's runnable count had turned on the crowded path (caller
 * alone) while our two CPUs were ours: decode at half speed. */
static int n_cpus_mine(int online)
{
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) != 0)
        return online;
    const int n = CPU_COUNT(&set);
    return n > 0 && n < online ? n : online;
}

static _Atomic int busy_fd = -2; /* -2: not opened yet; -1: unavailable */
static _Atomic int64_t busy_checked_us;
static atomic_bool busy;
static _Atomic int busy_running; /* the runnable threads last read */
static int busy_cpus;      /* online */
static int busy_cpus_mine; /* of them, those this process may use */

/* True while more threads are runnable than the machine has CPUs: spinning
 * would take a CPU from a thread with work. Re-read at most every
 * OMNI_BUSY_CHECK_US, by whichever spinner gets there first. */
bool tpool_machine_busy(void)
{
    const int64_t now = (int64_t)(omni_time_s() * 1e6);
    int64_t last = atomic_load_explicit(&busy_checked_us, memory_order_relaxed);
    if (now - last < OMNI_BUSY_CHECK_US ||
        !atomic_compare_exchange_strong(&busy_checked_us, &last, now))
        return atomic_load_explicit(&busy, memory_order_relaxed);
    int fd = atomic_load(&busy_fd);
    if (fd == -2) {
        busy_cpus = n_cpus_online();
        busy_cpus_mine = n_cpus_mine(busy_cpus);
        int f = open("/proc/loadavg", O_RDONLY | O_CLOEXEC);
        int expect = -2;
        if (!atomic_compare_exchange_strong(&busy_fd, &expect, f < 0 ? -1 : f)) {
            if (f >= 0)
                close(f);
        }
        fd = atomic_load(&busy_fd);
    }
    if (fd < 0)
        return false;
    char line[128];
    ssize_t n = pread(fd, line, sizeof line - 1, 0);
    if (n <= 0)
        return false;
    line[n] = 0;
    const int running = tpool_running_share(tpool_loadavg_running(line), busy_cpus, busy_cpus_mine);
    const bool b = running > busy_cpus_mine;
    atomic_store_explicit(&busy_running, running, memory_order_relaxed);
    atomic_store_explicit(&busy, b, memory_order_relaxed);
    return b;
}

bool tpool_machine_crowded(int extra)
{
    return tpool_machine_busy() &&
           atomic_load_explicit(&busy_running, memory_order_relaxed) > busy_cpus_mine + extra;
}

/* One round of spinning done: yield the CPU to anything runnable, and tell
 * the spinner to sleep when the machine is oversubscribed. */
static bool spin_should_stop(void)
{
    sched_yield();
    return tpool_machine_busy();
}

/* Spin while worker ith has no new job (generation seen), up to spin_us and
 * while the pool lets it spin; true when a job came. */
static int spin_job(struct tpool *tp, int ith, uint32_t seen)
{
    double deadline = 0;
    for (unsigned i = 1;; i++) {
        if (JOB_GEN(atomic_load_explicit(&tp->job, memory_order_acquire)) != seen)
            return 1;
        if (tp->spin_us == 0 || ith >= atomic_load_explicit(&tp->spin_width, memory_order_relaxed))
            return 0;
        cpu_relax();
        if ((i & 255) == 0) { /* reading the clock is ~20 ns: not every round */
            double now = omni_time_s();
            if (deadline == 0)
                deadline = now + tp->spin_us * 1e-6;
            else if (now > deadline || spin_should_stop())
                return 0;
        }
    }
}

/* The caller's wait for pending == 0: true when it came within spin_us. */
static int spin_pending(struct tpool *tp)
{
    double deadline = 0;
    for (unsigned i = 1;; i++) {
        if (atomic_load_explicit(&tp->pending, memory_order_acquire) == 0)
            return 1;
        if (tp->spin_us == 0)
            return 0;
        cpu_relax();
        if ((i & 255) == 0) {
            double now = omni_time_s();
            if (deadline == 0)
                deadline = now + tp->spin_us * 1e-6;
            else if (now > deadline || spin_should_stop())
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
    bool was_in = true; /* took part in the last run: may spin for the next */
    free(wa);
    for (;;) {
        if (!was_in || !spin_job(tp, ith, seen)) {
            /* Announce the sleep before re-checking the job inside
             * futex_wait: tpool_run moves the job before reading sleeping
             * (both seq_cst), so either it sees us and wakes us, or the wait
             * returns at once. */
            atomic_store(&tp->sleeping[ith], 1);
            while (JOB_GEN(atomic_load(&tp->job)) == seen)
                futex_wait(job_futex(tp), seen, worker_bit(ith));
            atomic_store(&tp->sleeping[ith], 0);
        }
        const uint64_t job = atomic_load_explicit(&tp->job, memory_order_acquire);
        seen = JOB_GEN(job);
        if (atomic_load_explicit(&tp->stop, memory_order_relaxed))
            break;
        /* A run that includes us cannot finish, nor the word move on,
         * before we take part, so this one load gives its width; a run
         * without us may be over already: was_in = false sends us to sleep
         * (not to spin) until a job names us. */
        was_in = ith < JOB_NTH(job);
        if (!was_in)
            continue;
        const bool counted = census_enter();
        tp->fn(tp->ctx, ith, JOB_NTH(job));
        census_leave(counted);
        if (atomic_fetch_sub_explicit(&tp->pending, 1, memory_order_acq_rel) == 1 &&
            atomic_load(&tp->caller_sleeping))
            syscall(SYS_futex, (uint32_t *)&tp->pending, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
    }
    return NULL;
}

/* Publish (fn, ctx) as a new job for threads 1..nth-1 and wake sleepers among them. */
static void start_job(struct tpool *tp, tpool_fn fn, void *ctx, int nth)
{
    tp->fn = fn;
    tp->ctx = ctx;
    atomic_store(&tp->pending, (uint32_t)(nth - 1));
    const uint64_t old = atomic_load_explicit(&tp->job, memory_order_relaxed);
    atomic_store(&tp->job, JOB(JOB_GEN(old) + 1, nth));
    uint32_t wake = 0;
    for (int i = 1; i < nth; i++)
        if (atomic_load(&tp->sleeping[i]))
            wake |= worker_bit(i);
    if (wake)
        futex_wake(job_futex(tp), wake);
}

/* Wait until every worker has finished the current job. */
static void wait_workers(struct tpool *tp)
{
    if (spin_pending(tp))
        return;
    /* Same handshake as the workers' sleep, on the pending word. */
    atomic_store(&tp->caller_sleeping, 1);
    uint32_t p;
    while ((p = atomic_load(&tp->pending)) != 0)
        syscall(SYS_futex, (uint32_t *)&tp->pending, FUTEX_WAIT_PRIVATE, p, NULL, NULL, 0);
    atomic_store(&tp->caller_sleeping, 0);
}

// ---- lifetime ------------------------------------------------------------------

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
    tp->n_threads = tp->width = n_threads;
    cpu_set_t set;
    int n_cpus = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set)
                                                             : (int)sysconf(_SC_NPROCESSORS_ONLN);
    tp->spin_us = n_threads <= n_cpus ? OMNI_SPIN_US : 0;
    atomic_init(&tp->spin_width, n_threads);
    if (!(tp->sleeping = calloc((size_t)n_threads, sizeof *tp->sleeping)))
        goto nomem;
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
        const uint64_t old = atomic_load(&tp->job);
        atomic_store(&tp->job, JOB(JOB_GEN(old) + 1, tp->n_threads));
        futex_wake(job_futex(tp), FUTEX_BITSET_MATCH_ANY);
        for (int i = 0; i < tp->n_started; i++)
            pthread_join(tp->workers[i], NULL);
    }
    if (tp->cl) {
        if (tp->held)
            compute_release(tp->cl, tp->held);
        compute_client_free(tp->cl);
    }
    free(tp->workers);
    free(tp->sleeping);
    free(tp);
}

int tpool_size(const struct tpool *tp)
{
    return tp ? tp->n_threads : 1;
}

void tpool_run(struct tpool *tp, tpool_fn fn, void *ctx)
{
    const int nth = tp ? tp->width : 1;
    if (nth <= 1 || tp->n_started == 0) {
        const bool counted = census_enter();
        fn(ctx, 0, 1);
        census_leave(counted);
        return;
    }
    start_job(tp, fn, ctx, nth);
    const bool counted = census_enter();
    fn(ctx, 0, nth);
    census_leave(counted);
    wait_workers(tp);
}

// ---- the compute budget -----------------------------------------------------------

/* compute's park hook: the budget went to another client while this pool
 * holds nothing, so its idle workers must sleep rather than spin. */
static void tpool_park(void *arg)
{
    struct tpool *tp = arg;
    atomic_store_explicit(&tp->spin_width, 0, memory_order_relaxed);
}

int tpool_attach(struct tpool *tp, struct compute *c, const char *name, char *err,
                 size_t errlen)
{
    if (!c)
        return 0;
    if (tp->cl)
        return omni_fail(err, errlen, OMNI_ERR_ARG, "threadpool: '%s': already attached", name);
    if (!(tp->cl = compute_client_new(c, name, tp->n_threads, err, errlen)))
        return OMNI_ERR_NOMEM;
    compute_client_set_park(tp->cl, tpool_park, tp);
    return 0;
}

int tpool_begin(struct tpool *tp, bool urgent)
{
    if (!tp)
        return 1;
    if (!tp->cl)
        return tp->n_threads;
    const int g = compute_acquire(tp->cl, urgent);
    if (g < 0)
        return g;
    tp->held = tp->width = g;
    atomic_store_explicit(&tp->spin_width, g, memory_order_relaxed);
    return g;
}

void tpool_end(struct tpool *tp)
{
    if (!tp || !tp->cl || !tp->held)
        return;
    const int g = tp->held;
    tp->held = 0;
    tp->width = tp->n_threads;
    compute_release(tp->cl, g);
}

void tpool_cancel(struct tpool *tp)
{
    if (tp && tp->cl)
        compute_client_cancel(tp->cl);
}

void tpool_active(struct tpool *tp, bool active)
{
    if (tp && tp->cl)
        compute_client_active(tp->cl, active);
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
