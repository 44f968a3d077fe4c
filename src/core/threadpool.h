/* threadpool.h - a fixed pool of worker threads for data-parallel kernels.
 *
 *   struct tpool *tp = tpool_new(4, err, sizeof err);   // 4 = caller + 3 workers
 *   tpool_run(tp, my_kernel, &args);   // my_kernel(&args, ith, nth) on every thread
 *   tpool_free(tp);
 *
 * tpool_run blocks until every thread has returned from fn; the calling thread
 * runs ith 0. Workers spin briefly before sleeping so back-to-back runs (one per
 * matmul in a decode step) cost microseconds; they yield while spinning and
 * sleep at once when the machine has more runnable threads than CPUs. Thread safety: one tpool_run at a
 * time per pool (the engine thread owns it).
 *
 * Under the process's compute budget (compute.h) a pool is a client of it:
 *
 *   tpool_attach(tp, budget, "engine", err, sizeof err);
 *   int nth = tpool_begin(tp, urgent);   // per unit of work (an engine step): waits
 *   tpool_run(tp, ...); ...              // runs use nth threads (nth <= tpool_size)
 *   tpool_end(tp);                       // the threads go back to the budget
 *
 * The workers beyond nth sleep, and an idle pool's workers stop spinning as
 * soon as the budget goes to another client. A pool without a budget (or
 * runs outside begin/end) uses all its threads. begin/run/end come from the
 * pool's owner thread, one unit at a time. */
#ifndef OMNI_THREADPOOL_H
#define OMNI_THREADPOOL_H

#include <stdbool.h>
#include <stddef.h>

struct tpool;
struct compute;
typedef void (*tpool_fn)(void *ctx, int ith, int nth);

struct tpool *tpool_new(int n_threads, char *err, size_t errlen);
void tpool_free(struct tpool *tp);
int tpool_size(const struct tpool *tp);
void tpool_run(struct tpool *tp, tpool_fn fn, void *ctx);

/* Make tp a client of budget c named name (for its statistics), taking at
 * most tpool_size threads at a time. Once, before the first tpool_begin;
 * the pool frees the client. c NULL: nothing (the pool stays ungated).
 * 0, or a negative omni_err + message. */
int tpool_attach(struct tpool *tp, struct compute *c, const char *name, char *err,
                 size_t errlen);
/* Start a unit of work: waits for the budget (urgent ones go first) and
 * returns the threads tpool_run uses until tpool_end (1..tpool_size); without
 * a budget, tpool_size at once. OMNI_ERR_LIMIT after tpool_cancel: skip the
 * work and do not call tpool_end. */
int tpool_begin(struct tpool *tp, bool urgent);
void tpool_end(struct tpool *tp);
/* Any thread: a tpool_begin waiting for the budget, and every later one,
 * returns OMNI_ERR_LIMIT (the owner is shutting down). */
void tpool_cancel(struct tpool *tp);
/* Any thread: the owner has work in progress between its units, so its
 * share of the budget stays reserved (compute_client_active). No-op
 * without a budget. */
void tpool_active(struct tpool *tp, bool active);

/* Census of threads running a job (inside fn) across every pool of the
 * process: the evidence that pools together stay within the budget. Off by
 * default (two atomic operations per thread and run when on). */
struct tpool_census {
    int now, max;            /* running fn now; the most since the last reset */
};
void tpool_census_enable(bool on);   /* also resets max */
void tpool_census_get(struct tpool_census *out);

/* Oversubscription: true while the kernel reports more runnable threads
 * than the machine has online CPUs (a process allowed fewer CPUs, by
 * taskset or a cpuset, compares its share of them with its own CPUs:
 * tpool_running_share); spinning workers then yield and sleep. Cached,
 * re-read at most every 2 ms; any thread. */
bool tpool_machine_busy(void);
/* True while the runnable threads exceed the online CPUs by more than
 * extra (pass the pool's size: its own threads count while they run): the
 * machine is crowded by others, waking a worker for a short job costs
 * more than it saves, and the caller does better running it alone.
 * Same cache as tpool_machine_busy. */
bool tpool_machine_crowded(int extra);
/* The running-thread count of a /proc/loadavg line, -1 when malformed
 * (exposed for tests). */
int tpool_loadavg_running(const char *line);
/* The part of running (the whole kernel's runnable threads) that competes
 * for mine of the machine's online CPUs, the scheduler spreading them
 * evenly: running x mine / online rounded up; running itself when mine is
 * all of them (exposed for tests). */
int tpool_running_share(int running, int online, int mine);

/* Physical cores of this machine (>= 1): the default for --threads. */
int omni_physical_cores(void);

#endif
