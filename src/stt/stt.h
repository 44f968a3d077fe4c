/* stt.h - the speech-to-text service behind the audio routes and realtime
 * sessions: one shared Whisper model (and optional Silero VAD model), one
 * batcher with the compute pool, and N worker threads ("lanes"), each owning
 * a whisper_state. Jobs run on whichever lane is free; the forward passes of
 * all running jobs are batched together (audio/whisper_batch.h), so
 * concurrent requests share every encoder and decoder pass instead of
 * queueing behind one lock.
 *
 *   struct stt_params p = stt_default_params();
 *   p.model_path = "ggml-base.en.bin"; p.vad_path = "silero.bin"; p.n_workers = 4;
 *   struct stt *s = stt_new(&p, err, sizeof err);
 *   stt_submit(s, my_job, my_data);     // my_job(ws, my_data) on a worker thread
 *   stt_free(s);
 *
 * Thread safety: stt_submit from any thread; the models are read-only and
 * shared. A job runs on one worker with that worker's state; it is called
 * with ws NULL when the service shuts down before running it (clean up only). */
#ifndef OMNI_STT_H
#define OMNI_STT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "audio/vad.h"
#include "audio/whisper.h"

struct stt;
struct compute;

struct stt_params {
    const char *model_path;  /* whisper.cpp ggml .bin; required */
    const char *vad_path;    /* Silero VAD ggml .bin; NULL: no VAD */
    int n_workers;           /* transcriptions in flight at once, batched together (default 4) */
    int n_threads;           /* compute threads of the shared pool (default: the budget's
                                size, or physical cores; at most the budget's size) */
    struct compute *compute; /* the process's compute budget: every pass takes its threads
                                from it, urgent while a final waits (stt_urgent); NULL = none */
    int max_queue;           /* waiting jobs before stt_submit refuses (default 64) */
    const char *device;      /* "cpu" (NULL) or "cuda" / "cuda:N": the encoder and decoder
                                passes on the GPU (audio/whisper_dev.h); a model the GPU
                                cannot run stays on the CPU, with a log line */
};
struct stt_params stt_default_params(void);

/* Loads the models and starts the workers. NULL + message on failure. */
struct stt *stt_new(const struct stt_params *p, char *err, size_t errlen);
/* Waits for running jobs, calls queued ones with ws NULL, frees. NULL is a no-op. */
void stt_free(struct stt *s);

const struct whisper_model *stt_model(const struct stt *s);
const struct vad_model *stt_vad(const struct stt *s);   /* NULL without one */
int stt_n_workers(const struct stt *s);
/* Sessions with a final transcript waiting to be decoded: partial decodes
 * (of any session) give way while there are any (stt_session.c keeps it). */
void stt_urgent_add(struct stt *s, int delta);
int stt_urgent(struct stt *s);
/* Counters of the shared passes (how many requests each one merged). */
struct whisper_batcher_stats;
void stt_batch_stats(struct stt *s, struct whisper_batcher_stats *out);

typedef void (*stt_job_fn)(struct whisper_state *ws, void *user);
/* Queue a job. OMNI_ERR_LIMIT when max_queue jobs wait already (the caller
 * keeps user), OMNI_ERR_NOMEM. */
int stt_submit(struct stt *s, stt_job_fn fn, void *user);

// ---- speech-only audio -----------------------------------------------------

/* Where a stretch of the speech-only audio came from. */
struct stt_span {
    int64_t src_start;   /* sample in the original audio */
    int64_t dst_start;   /* sample in the speech-only audio */
    int64_t len;
};

/* The speech in pcm[n] (16 kHz) by VAD: the segments joined with 100 ms of
 * silence between them. *out (malloc'd) holds *n_out samples (0 and NULL when
 * there is no speech); *spans (malloc'd) maps positions back. */
int stt_speech_only(const struct vad_model *vad, const float *pcm, size_t n, float **out,
                    size_t *n_out, struct stt_span **spans, size_t *n_spans, char *err,
                    size_t errlen);
/* A time in the speech-only audio (ms) -> the original audio's time (ms). */
int64_t stt_map_ms(const struct stt_span *spans, size_t n_spans, int64_t ms);

/* The state's last transcript: segment texts joined, leading space
 * removed (OpenAI's "text"). malloc'd; NULL when out of memory. */
char *stt_full_text(const struct whisper_state *ws);

/* The decoding settings every route starts from: greedy with temperature
 * fallback, OpenAI's suppression; times only when asked for. */
struct whisper_full_params stt_full_params(bool timestamps);

#endif
