/* compute.h - one compute budget for the whole process.
 *
 * The engine, Whisper, the vision encoder and TTS all want CPU threads, and
 * a voice agent runs them at the same time. A struct compute holds the
 * budget (n threads, by default the physical cores); each workload is a
 * client that takes threads for one unit of work (an engine step, a Whisper
 * pass, an image encode, a spoken sentence) and gives them back after it,
 * so at no time do the clients together hold more than n threads. Pools
 * whose client holds nothing do not spin (see tpool_attach), so sleeping
 * threads beyond the budget cost nothing.
 *
 *   struct compute *c = compute_new(NULL, err, sizeof err);    // physical cores
 *   struct compute_client *cl = compute_client_new(c, "engine", 4, err, sizeof err);
 *   int n = compute_acquire(cl, urgent);   // blocks; then n (1..4) threads are ours
 *   ... run one unit of work on n threads ...
 *   compute_release(cl, n);
 *   compute_client_free(cl);
 *   compute_free(c);
 *
 * Order: waiters are served one at a time from the head of the queue. The
 * head is the oldest urgent waiter (latency-critical work: a realtime final,
 * the first sentence of a spoken reply, a prompt's first token), else the
 * oldest waiter. It is granted min(want, free) threads as soon as at least
 * half of what it wants, (want + 1) / 2, is free; until then nobody behind
 * it goes first. A batch waiter that urgent ones have overtaken
 * max_overtakes times counts as urgent from then on (it is older than they
 * are, so it goes next): batch work waits a bounded number of units.
 *
 * Shares: while several clients are active (holding threads, waiting, or
 * marked active between their units with compute_client_active), what one
 * asks for is capped at its fair share: the level L at which the active
 * clients' min(max_threads, L) cover the budget. Two workloads on 2 cores
 * then run side by side on one thread each instead of taking turns, so a
 * workload of short units in quick succession (a Whisper decoder pass per
 * token) does not wait a long unit of another (an engine step) before each
 * of its own; alone, a workload gets every thread.
 *
 * Thread safety: every function may be called from any thread; a client
 * may have several acquirers at once. compute_free after every client has
 * been freed. */
#ifndef OMNI_COMPUTE_H
#define OMNI_COMPUTE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct compute;
struct compute_client;

#define COMPUTE_MAX_CLIENTS 16
#define COMPUTE_NAME_MAX 32

struct compute_params {
    int n_threads;       /* the budget; <= 0: physical cores */
    int max_overtakes;   /* urgent grants a waiting batch acquire lets pass; default 4 */
};
struct compute_params compute_default_params(void);

/* p NULL: defaults. NULL + message when out of memory. */
struct compute *compute_new(const struct compute_params *p, char *err, size_t errlen);
/* After every client has been freed. NULL is a no-op. */
void compute_free(struct compute *c);
int compute_size(const struct compute *c);

/* A workload that takes at most max_threads threads at a time (clamped to
 * 1..budget). name (copied, COMPUTE_NAME_MAX - 1 bytes kept) labels its
 * statistics. NULL + message past COMPUTE_MAX_CLIENTS clients. */
struct compute_client *compute_client_new(struct compute *c, const char *name, int max_threads,
                                          char *err, size_t errlen);
/* The client must hold nothing and have no acquire waiting. NULL is a no-op. */
void compute_client_free(struct compute_client *cl);
int compute_client_max_threads(const struct compute_client *cl);

/* Called whenever the budget goes to another client while this one holds
 * nothing: a thread pool stops spinning so its idle workers sleep. Runs
 * with the budget's lock held, on the granting thread: it must be quick
 * and must not call back into the budget. */
void compute_client_set_park(struct compute_client *cl, void (*park)(void *user), void *user);

/* A workload with work in progress between its units (the engine while it
 * has sequences, the speech batcher while a transcription runs) says so:
 * the others' shares make room for its next unit. */
void compute_client_active(struct compute_client *cl, bool active);

/* Waits for threads; returns how many (1..max_threads) the caller now
 * holds, to give back with compute_release. OMNI_ERR_LIMIT once the client
 * is cancelled (at once, or when a waiting acquire is woken by it). */
int compute_acquire(struct compute_client *cl, bool urgent);
/* Gives back n threads taken by compute_acquire (also part of them early). */
void compute_release(struct compute_client *cl, int n);
/* Shutting a workload down: its waiting acquires return OMNI_ERR_LIMIT and
 * so do later ones. Threads it holds stay held until released. */
void compute_client_cancel(struct compute_client *cl);

struct compute_client_stats {
    char name[COMPUTE_NAME_MAX];
    int max_threads;
    bool active;             /* holding, waiting or marked active now */
    int busy;                /* threads held now */
    int waiting;             /* acquires waiting now (its queue depth) */
    uint64_t acquires;       /* granted acquires */
    uint64_t urgent_acquires;/* of which asked as urgent */
    uint64_t waits;          /* of which had to wait */
    uint64_t cancelled;      /* acquires refused or woken by compute_client_cancel */
    double wait_s;           /* time acquires spent waiting, in all */
    double busy_s;           /* thread-seconds held */
};

struct compute_stats {
    int n_threads;           /* the budget */
    int busy, waiting;       /* threads held and acquires waiting now, all clients */
    int max_busy;            /* the most threads ever held at once (<= n_threads) */
    int n_clients;
    struct compute_client_stats client[COMPUTE_MAX_CLIENTS];
};
/* A consistent snapshot. c NULL: all zero. */
void compute_stats(struct compute *c, struct compute_stats *out);

/* The process's budget, for modules whose constructor has no place to pass
 * one (TTS) and for /metrics: set by `serve` once made, NULL before and
 * after. NULL means no budget: work runs ungated. */
void compute_set_default(struct compute *c);
struct compute *compute_default(void);

#endif
