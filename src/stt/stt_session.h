/* stt_session.h - one live transcription stream: raw PCM in (any rate,
 * resampled to 16 kHz), Silero VAD segmenting turns, Whisper decoding on the
 * shared stt service: partial hypotheses while someone speaks and a final
 * transcript per turn.
 *
 *   struct stt_session_params p = stt_session_default_params();
 *   p.on_event = my_event; p.on_free = my_free; p.user = conn;
 *   struct stt_session *ss = stt_session_new(svc, &p, err, sizeof err);
 *   stt_session_push(ss, pcm16_bytes, len, err, sizeof err);  // speech_started/stopped, ...
 *   stt_session_commit(ss, err, sizeof err);                   // end the turn now
 *   stt_session_close(ss);                                     // on_free(user) follows later
 *
 * Events: SPEECH_STARTED, SPEECH_STOPPED and COMMITTED come from push or
 * commit (the caller's thread); PARTIAL and FINAL come from stt worker
 * threads. A session runs one decode at a time, so each turn's partials
 * precede its final, and finals arrive in turn order. EARLY comes from a
 * worker, its withdrawal from the owner's thread, in the order they happened
 * (a withdrawal never overtakes the announcement it withdraws).
 *
 * Thread safety: push, commit, clear, update and close belong to one thread
 * (the owner); on_event may run on the owner's thread or a worker and must
 * not call back into the session; on_free runs once, on any thread, after
 * close and the last event. */
#ifndef OMNI_STT_SESSION_H
#define OMNI_STT_SESSION_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "audio/vad.h"

struct stt;
struct stt_session;

enum stt_event_type {
    STT_EV_SPEECH_STARTED, /* audio_ms: where the turn starts */
    STT_EV_SPEECH_STOPPED, /* audio_ms: where it ends */
    STT_EV_COMMITTED,      /* the turn's audio is final and queued for decoding */
    STT_EV_PARTIAL,        /* text: current hypothesis; delta: newly stable text */
    STT_EV_FINAL,          /* text: the turn's transcript */
    STT_EV_ERROR,          /* text: what went wrong (the session goes on) */
    STT_EV_EARLY,          /* only with early_events: text: the transcript the turn's
                              final will have unless the speaker goes on (its early
                              final, ready before the VAD is sure the turn ended);
                              text NULL: withdrawn, the speaker went on */
};

struct stt_event {
    enum stt_event_type type;
    int item;              /* turn number, from 1 */
    int64_t audio_ms;      /* since the stream (or the last clear) began */
    const char *text;
    const char *delta;
};

struct stt_session_params {
    int input_rate_hz;     /* rate of the PCM16 pushed (default 24000) */
    bool server_vad;       /* segment turns by VAD (default); else only commit ends a turn */
    struct vad_params vad; /* turn rules (vad_default_params) */
    int partial_ms;        /* a partial hypothesis per this much new speech (default 500) */
    const char *language;  /* copied; NULL: the model's default / detection */
    const char *prompt;    /* copied; NULL: none */
    bool early_events;     /* announce early finals (STT_EV_EARLY): a voice agent may
                              start its reply on them (default false) */
    void (*on_event)(void *user, const struct stt_event *ev);
    void (*on_free)(void *user);
    void *user;
};
struct stt_session_params stt_session_default_params(void);

/* Server VAD needs the service's VAD model: OMNI_ERR_ARG without one. */
struct stt_session *stt_session_new(struct stt *svc, const struct stt_session_params *p,
                                    char *err, size_t errlen);
/* New settings (rate, VAD, language, prompt) for the audio that follows; the
 * buffered audio is kept unless the rate changes. */
int stt_session_update(struct stt_session *ss, const struct stt_session_params *p, char *err,
                       size_t errlen);
/* PCM16 little-endian mono at input_rate_hz, any byte count. */
int stt_session_push(struct stt_session *ss, const void *pcm16, size_t len, char *err,
                     size_t errlen);
/* End the current turn now and decode it. OMNI_ERR_ARG when there is less
 * than 100 ms of audio to commit. */
int stt_session_commit(struct stt_session *ss, char *err, size_t errlen);
/* Drop the buffered audio and any turn in progress. */
void stt_session_clear(struct stt_session *ss);
/* Stop: no more events after the one in progress; on_free(user) follows. */
void stt_session_close(struct stt_session *ss);
/* No decode of this session queued or running (its events so far are out). */
bool stt_session_idle(struct stt_session *ss);
/* Finals so far whose transcript was ready when their turn ended (decoded
 * early, while the VAD waited to be sure the speech had stopped). */
int stt_session_early_finals(struct stt_session *ss);

/* The newly stable text of a partial hypothesis (exposed for tests): the
 * words on which the previous and the current hypothesis agree, minus what
 * was already emitted. Returns the delta (malloc'd) and updates *emitted. */
char *stt_session_agree(const char *prev, const char *cur, char **emitted);

#endif
