/* threadpool.h - a fixed pool of worker threads for data-parallel kernels.
 *
 *   struct tpool *tp = tpool_new(4, err, sizeof err);   // 4 = caller + 3 workers
 *   tpool_run(tp, my_kernel, &args);   // my_kernel(&args, ith, nth) on every thread
 *   tpool_free(tp);
 *
 * tpool_run blocks until every thread has returned from fn; the calling thread
 * runs ith 0. Workers spin briefly before sleeping so back-to-back runs (one per
 * matmul in a decode step) cost microseconds. Thread safety: one tpool_run at a
 * time per pool (the engine thread owns it). */
#ifndef OMNI_THREADPOOL_H
#define OMNI_THREADPOOL_H

#include <stddef.h>

struct tpool;
typedef void (*tpool_fn)(void *ctx, int ith, int nth);

struct tpool *tpool_new(int n_threads, char *err, size_t errlen);
void tpool_free(struct tpool *tp);
int tpool_size(const struct tpool *tp);
void tpool_run(struct tpool *tp, tpool_fn fn, void *ctx);

/* Physical cores of this machine (>= 1): the default for --threads. */
int omni_physical_cores(void);

#endif
