/* rt_client.h - the OpenAI Realtime WebSocket client the samples share
 * (mic_transcribe, voice_agent): one libwebsockets client connection,
 * server events reassembled and parsed into cJSON for a callback, client
 * events queued and written one per WRITEABLE, microphone or file audio
 * queued as PCM16 and sent as input_audio_buffer.append events (up to
 * 200 ms each), a timer tick for pacing a file at real-time speed.
 *
 *   struct rtcl_params p = { .prog = "voice_agent", .url = url, .rate_hz = 24000,
 *                            .on_event = on_event, .on_tick = on_tick, .user = app };
 *   struct rtcl *c = rtcl_new(&p);           // NULL: bad URL (message printed)
 *   rtcl_connect(c);
 *   while (!app->done && rtcl_service(c) == 0) ...
 *   rtcl_free(c);
 *
 * Threads: everything runs on the thread calling rtcl_service (the lws
 * service thread), callbacks included, except rtcl_queue_audio and
 * rtcl_wake, which any thread may call (a portaudio callback). */
#ifndef OMNI_SAMPLES_RT_CLIENT_H
#define OMNI_SAMPLES_RT_CLIENT_H

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stddef.h>

struct rtcl;

struct rtcl_params {
    const char *prog;          /* prefix of the messages printed to stderr */
    const char *url;           /* ws:// or wss:// */
    int rate_hz;               /* of the queued PCM16 (sizes the append events) */
    int max_queue_s;           /* queued audio kept at most (older is dropped); 0: 10 s */
    int tick_ms;               /* on_tick period; 0: no ticks */
    void (*on_event)(void *user, const cJSON *ev);   /* each server event */
    void (*on_tick)(void *user);
    void (*on_wake)(void *user);                     /* after rtcl_wake */
    void (*on_closed)(void *user, bool connected);   /* connection failed or closed */
    void *user;
};

/* Parses the URL; NULL (with a message) if it is not ws:// or wss://. */
struct rtcl *rtcl_new(const struct rtcl_params *p);
/* Starts connecting; -1 (with a message) when it cannot even start. */
int rtcl_connect(struct rtcl *c);
/* One round of the event loop; -1 after SIGINT/SIGTERM or a dead context. */
int rtcl_service(struct rtcl *c);
void rtcl_free(struct rtcl *c);

/* Queues one client event (a copy of json) to go out in order. */
int rtcl_send(struct rtcl *c, const char *json);
/* Any thread: PCM16 mono bytes for input_audio_buffer.append. */
void rtcl_queue_audio(struct rtcl *c, const void *pcm, size_t bytes);
/* Bytes of audio not sent yet. */
size_t rtcl_queued_audio(struct rtcl *c);
/* Any thread: on_wake runs on the service thread. */
void rtcl_wake(struct rtcl *c);
/* Seconds on a monotonic clock. */
double rtcl_now(void);

/* A file played at real-time speed: rtcl_pace (from on_tick) queues the
 * samples due since t0, then up to tail samples of silence
 * (tail = (size_t)-1: silence until the caller stops calling). */
struct rtcl_pacer {
    const short *pcm;
    size_t n, tail, fed;
    double t0;
};
void rtcl_pace(struct rtcl *c, struct rtcl_pacer *p);
/* Everything, tail included, has been queued. */
bool rtcl_pace_done(const struct rtcl_pacer *p);

/* The file (any format ffmpeg reads) as PCM16 mono at rate_hz, malloc'd;
 * NULL with a message. */
short *rtcl_load_pcm16(const char *prog, const char *path, int rate_hz, size_t *n);
/* Base64 to bytes (malloc'd, *len); NULL if it is not base64. */
unsigned char *rtcl_b64_decode(const char *s, size_t *len);
/* A 16-bit mono WAV file; -1 with a message. */
int rtcl_write_wav(const char *prog, const char *path, const short *pcm, size_t n, int rate_hz);

#endif
