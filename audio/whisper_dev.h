/* whisper_dev.h - Whisper's encoder and decoder on a compute backend
 * (src/core/backend.h: "cuda", or "cpu" as the reference it is tested
 * against). The weights are uploaded once; each state that encodes audio
 * gets a stream (its cross-attention K/V in device memory, computed once
 * per window) and each of its decoder slots a self-attention cache in
 * device memory; only mel windows, token ids and the logits rows cross.
 *
 *   struct whisper_dev_params p = whisper_dev_default_params();   // "cuda", device 0
 *   struct whisper_dev *dev = whisper_dev_new(m, &p, err, sizeof err);
 *   whisper_state_use_dev(s, dev);            // a standalone state, or:
 *   bp.dev = dev; whisper_batcher_new(m, &bp, ...);   // every batched state
 *   ... whisper_full / whisper_encode / whisper_decode as before ...
 *   whisper_state_free(s); whisper_dev_free(dev);     // states first
 *
 * Thread safety: the passes of any states may come from any threads; one
 * lock inside serializes them (the backend is one stream). The model must
 * outlive the dev, the dev every state that used it. */
#ifndef OMNI_WHISPER_DEV_H
#define OMNI_WHISPER_DEV_H

#include <stddef.h>

struct whisper_model;
struct whisper_state;
struct whisper_row;
struct whisper_dev;

struct whisper_dev_params {
    const char *backend;    /* "cuda" (default) or "cpu" */
    int device;             /* GPU index */
    int max_windows;        /* encoder windows per pass (4) */
    int max_rows;           /* decoder token rows per pass (512, at least n_text_ctx) */
    int max_streams;        /* states holding an encoded window at once (16) */
    int max_seqs;           /* decoder slots holding a self-attention cache at once (64) */
};
struct whisper_dev_params whisper_dev_default_params(void);

/* NULL + message when the backend is missing, lacks Whisper's ops, cannot
 * multiply a tensor type of the model or has no memory for it. */
struct whisper_dev *whisper_dev_new(const struct whisper_model *m, const struct whisper_dev_params *p,
                                    char *err, size_t errlen);
void whisper_dev_free(struct whisper_dev *d);
/* e.g. "cuda: NVIDIA H100 80GB HBM3 (sm_90, 81008 MiB)"; owned by d. */
const char *whisper_dev_name(const struct whisper_dev *d);
/* Bytes of device memory d holds (weights, caches, scratch). */
size_t whisper_dev_bytes(const struct whisper_dev *d);

/* A standalone state (whisper_state_new) runs its passes on d from now on
 * (d NULL: back on the CPU). OMNI_OK or OMNI_ERR_ARG for a batched state
 * (give the batcher the dev instead). */
int whisper_state_use_dev(struct whisper_state *s, struct whisper_dev *d);

// ---- for audio/whisper*.c (whisper_impl.h's types) ----------------------------

/* The passes of whisper_forward_encode / whisper_forward_decode on the
 * device, same arguments and results (encoder output, logits rows). */
int whisper_dev_encode(struct whisper_dev *d, struct whisper_state *const *states, const float *const *mel,
                       const int *n_frames, const int *offset, const int *n_ctx, int n, char *err,
                       size_t errlen);
int whisper_dev_decode(struct whisper_dev *d, const struct whisper_row *rows, int n, char *err,
                       size_t errlen);
/* Rows [0, n) of every layer's self-attention cache from decoder slot
 * `from` of s to slot `to` (beam search). */
int whisper_dev_copy_cache(struct whisper_dev *d, struct whisper_state *s, int from, int to, int n,
                           char *err, size_t errlen);
/* s is going away: its stream and caches are free for others. */
void whisper_dev_release(struct whisper_dev *d, struct whisper_state *s);

#endif
