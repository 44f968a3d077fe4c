/* realtime.h - streaming transcription over WebSocket with the OpenAI
 * Realtime protocol: GET /v1/realtime?intent=transcription, client events
 * transcription_session.update / session.update (type "transcription"),
 * input_audio_buffer.append / commit / clear; server events
 * transcription_session.created/updated (session.updated), speech_started /
 * speech_stopped / committed, conversation.item.input_audio_transcription.
 * delta / completed, error. One stt_session per connection; all sessions
 * share the server's speech model and workers. Without intent and with a
 * chat model loaded, the connection is a conversation instead
 * (realtime_conv.h).
 * Thread safety: realtime_upgrade runs on the service thread; client events
 * are handled on ws worker threads (one message of a connection at a time). */
#ifndef OMNI_API_REALTIME_H
#define OMNI_API_REALTIME_H

struct api;
struct ws_req;

/* Accepts the handshake (API key, a speech model loaded) or refuses it. */
void realtime_upgrade(struct api *a, struct ws_req *r);

#endif
