/* whisper_batch.h - one Whisper model serving many transcriptions at once
 * through shared forward passes. A batcher owns the compute pool; each
 * transcription runs whisper_full on its own state and thread, and every
 * encoder window or decoder step it needs is queued to the batcher, which
 * runs the requests of all states that are waiting as one pass: encoder
 * windows side by side, decoder rows of every state in one set of matmuls
 * (the weights are read once per step for all of them). Attention alone
 * stays per state (its window, its caches).
 *
 *   struct whisper_batcher *b = whisper_batcher_new(model, NULL, err, sizeof err);
 *   struct whisper_state *s1 = whisper_state_new_batched(b, err, sizeof err);
 *   ... thread 1: whisper_full(s1, ...);  thread 2: whisper_full(s2, ...);
 *   whisper_state_free(s1); whisper_state_free(s2); whisper_batcher_free(b);
 *
 * A pass starts as soon as every busy state (one inside whisper_full) has a
 * request waiting, or gather_us after the first one arrived. Results equal
 * the standalone state's up to float summation order (larger batches may
 * take other matmul kernels). Under a compute budget (compute.h) each pass
 * takes its threads from it, asking as urgent while p.urgent says so.
 * Thread safety: states of one batcher run on any threads; the batcher's
 * own functions may be called from any thread. */
#ifndef OMNI_WHISPER_BATCH_H
#define OMNI_WHISPER_BATCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "audio/whisper.h"

struct whisper_batcher;
struct whisper_dev;
struct compute;

struct whisper_batcher_params {
    int n_threads;   /* compute threads of the pool (default: the budget's size, or
                        physical cores; never more than the budget) */
    struct compute *compute;         /* the process's compute budget; NULL = none */
    bool (*urgent)(void *user);      /* a pass asks the budget first while it returns
                                        true (a realtime final waits); NULL = never */
    void *urgent_user;
    int max_windows; /* encoder windows per pass (default 4) */
    int max_rows;    /* decoder token rows per pass (default 512; at least n_text_ctx) */
    int gather_us;   /* how long a pass waits for busy states' requests (default 1000) */
    struct whisper_dev *dev; /* run the passes on this backend (whisper_dev.h), or NULL:
                                the CPU; borrowed, outlives the batcher */
};
struct whisper_batcher_params whisper_batcher_default_params(void);

/* p NULL: defaults. The model stays the caller's and must outlive it. */
struct whisper_batcher *whisper_batcher_new(const struct whisper_model *m, const struct whisper_batcher_params *p,
                                            char *err, size_t errlen);
/* After every state of it has been freed. NULL is a no-op. */
void whisper_batcher_free(struct whisper_batcher *b);

/* A state whose passes go through b (free it with whisper_state_free). */
struct whisper_state *whisper_state_new_batched(struct whisper_batcher *b, char *err, size_t errlen);

struct whisper_batcher_stats {
    uint64_t enc_passes, enc_windows;               /* encoder passes and the windows in them */
    uint64_t dec_passes, dec_rows, dec_requests;    /* decoder passes, token rows, requests merged */
    int max_enc_windows, max_dec_requests;          /* the most any one pass held */
    int busy;                                       /* states inside whisper_full now */
};
void whisper_batcher_stats(struct whisper_batcher *b, struct whisper_batcher_stats *out);

#endif
