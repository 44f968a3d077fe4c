/* rt_common.h - what the two Realtime protocols on /v1/realtime share
 * (transcription sessions in realtime.c, conversations in realtime_conv.c):
 * server events with ids, error events that name the offending param,
 * base64 in and out, and turn_detection objects.
 *
 *   struct rt_io io = { .sock = s };  snprintf(io.id, sizeof io.id, "sess_%s", rid);
 *   cJSON *ev = rt_event("session.updated"); ...; rt_send(&io, ev);   // takes ev
 *   rt_error(&io, "invalid_request_error", "invalid_value", "audio", client_eid, "...");
 *
 * Thread safety: rt_send and rt_error may be called from any thread (the
 * socket queues); rt_gate_* take the caller's lock; the rest are pure. */
#ifndef OMNI_API_RT_COMMON_H
#define OMNI_API_RT_COMMON_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>

struct cJSON;
struct ws_sock;

struct rt_io {
    struct ws_sock *sock;
    atomic_ullong next_event;
    char id[48];                   /* session id: "sess_<request id>" */
};

/* {"type": type} */
struct cJSON *rt_event(const char *type);
/* Adds an event_id, sends and deletes ev. */
void rt_send(struct rt_io *io, struct cJSON *ev);
/* An "error" event: {error: {type, code, message, param, event_id}}; NULLs
 * are sent as null. */
void rt_error(struct rt_io *io, const char *type, const char *code, const char *param,
              const char *client_event_id, const char *msg);

/* One client message as a JSON object with a string type; NULL after an
 * error event (binary frame, not JSON). *eid: the client's event_id or NULL
 * (valid while the object lives). */
struct cJSON *rt_parse(struct rt_io *io, const char *data, size_t len, bool binary,
                       const char **type, const char **eid);

/* A speech session's event as the protocols send it: speech_started /
 * speech_stopped (item), committed (item, previous_item: NULL -> null),
 * input_audio_transcription.delta / .completed (text overrides ev->text
 * when not NULL). STT_EV_ERROR is not sent here. */
struct stt_event;
void rt_send_stt(struct rt_io *io, const struct stt_event *ev, const char *item,
                 const char *previous_item, const char *text);

/* Standard base64 (padding optional; whitespace skipped) into out, which
 * holds at least len * 3 / 4 + 3 bytes. Returns the byte count or -1. */
long rt_base64_decode(const char *in, size_t len, unsigned char *out);
/* base64 of data as a malloc'd string, NULL when out of memory. */
char *rt_base64_encode(const void *data, size_t len);

/* Who ends a connection: on_close may come (from the service thread) while
 * a message is still being handled on a ws worker; the side that comes last
 * runs the caller's finish. The fields are under the caller's lock. */
struct rt_gate {
    bool busy;                     /* a message is being handled */
    bool closed;                   /* on_close ran */
};
/* on_message starts: false when the socket already closed (skip it). */
bool rt_gate_enter(struct rt_gate *g, pthread_mutex_t *lock);
/* on_message ends: true when on_close came meanwhile (finish now). */
bool rt_gate_leave(struct rt_gate *g, pthread_mutex_t *lock);
/* on_close: true when no message is being handled (finish now). */
bool rt_gate_close(struct rt_gate *g, pthread_mutex_t *lock);

/* turn_detection as both protocols take it. */
struct rt_turn {
    bool server_vad;               /* false: turns end with input_audio_buffer.commit */
    float threshold;               /* 0..1 */
    int silence_ms;                /* silence_duration_ms */
    int prefix_ms;                 /* prefix_padding_ms as given */
    bool create_response;          /* conversations: a response per committed turn */
    bool interrupt_response;       /* conversations: speech cancels the response (barge-in) */
};
/* Applies the fields present in turn (an object, null or absent: NULL) to
 * *t. NULL, or the message for an error event with *param set. */
const char *rt_turn_parse(const struct cJSON *turn, struct rt_turn *t, const char **param);
/* null, or {type: "server_vad", threshold, prefix_padding_ms,
 * silence_duration_ms[, create_response, interrupt_response]}. */
struct cJSON *rt_turn_json(const struct rt_turn *t, bool conversation);

#endif
