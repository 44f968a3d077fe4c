/* encode_queue.h - one queue for every image and video-frame encode of the
 * process: callers (the server's request workers) hand in preprocessed
 * images and wait; one encoder thread owns the vision_ctx (its pool is a
 * client of the shared compute budget, one unit per encoder block) and
 * runs the queue in arrival order, putting the waiting images of several
 * requests into one vision_encode_batch call (Qwen2.5-VL: one encoder
 * pass over all of them) instead of a global lock held per image.
 *
 *   struct vision_queue *q = vision_queue_new(vc, NULL, err, sizeof err);
 *   struct vision_input in[2] = { ... };     // vision_preprocess outputs
 *   struct vision_embd out[2];
 *   rc = vision_queue_encode(q, in, 2, client_gone, conn, out, err, sizeof err);
 *   ... use out, vision_embd_release each ...
 *   vision_queue_shutdown(q);                // waiting and later encodes fail
 *   vision_queue_free(q);
 *
 * Cancellation: cancelled(user) is polled by the waiting caller (every
 * 50 ms) and by the encoder between blocks. A request whose images wait
 * in the queue leaves at once; one whose images are in the running pass
 * stops that pass between blocks when every request in it is cancelled,
 * otherwise waits for the pass and its rows are dropped. Either way every
 * buffer is freed before vision_queue_encode returns.
 *
 * Thread safety: vision_queue_encode from any number of threads at once;
 * cancelled() is called from the caller's and the encoder's threads. The
 * vision_ctx belongs to the queue's thread until vision_queue_free. */
#ifndef OMNI_VISION_ENCODE_QUEUE_H
#define OMNI_VISION_ENCODE_QUEUE_H

#include <stddef.h>
#include <stdint.h>

#include "vision/vision.h"

struct vision_queue;

struct vision_queue_params {
    int max_batch;           /* images per vision_encode_batch call (default 16) */
};
struct vision_queue_params vision_queue_default_params(void);

/* The queue and its encoder thread over vc (borrowed: free it after
 * vision_queue_free). p NULL: defaults. NULL + err. */
struct vision_queue *vision_queue_new(struct vision_ctx *vc, const struct vision_queue_params *p,
                                      char *err, size_t errlen);
/* Waiting and later encodes fail with OMNI_ERR_LIMIT ("shutting down");
 * a running pass finishes. Any thread; idempotent. */
void vision_queue_shutdown(struct vision_queue *q);
/* Shuts down, joins the encoder thread. No caller may be inside
 * vision_queue_encode. NULL is a no-op. */
void vision_queue_free(struct vision_queue *q);

/* Encode n preprocessed images (in[] and their pixels stay the caller's
 * and must live until the return) into outs[n] as vision_encode_batch
 * does. Blocks until done, failed or cancelled: OMNI_OK, or a negative
 * enum omni_err with err (OMNI_ERR_LIMIT when cancelled or shutting
 * down); on failure every out is released. */
int vision_queue_encode(struct vision_queue *q, const struct vision_input *in, int n,
                        int (*cancelled)(void *user), void *user, struct vision_embd *outs,
                        char *err, size_t errlen);

struct vision_queue_stats {
    uint64_t passes;         /* vision_encode_batch calls */
    uint64_t images;         /* images encoded */
    uint64_t shared_passes;  /* calls that held images of more than one request */
    uint64_t cancelled;      /* requests that left cancelled */
    int waiting;             /* requests in the queue now */
};
struct vision_queue_stats vision_queue_stats(struct vision_queue *q);

#endif
