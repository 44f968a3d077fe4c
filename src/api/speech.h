/* speech.h - text to speech over HTTP: POST /v1/audio/speech (OpenAI's
 * request: model, input, voice, instructions, response_format, speed,
 * stream_format) and GET /v1/audio/voices, on the server's struct tts.
 *
 *   api_set_tts(a, tts_new(NULL, err, sizeof err));    // serve, before running
 *   // api routes POST /v1/audio/speech -> speech_route (on a ws worker)
 *
 * Thread safety: the routes run on ws workers; synthesis and encoding run on
 * the tts worker thread and reach the client through the response's ws_out. */
#ifndef OMNI_API_SPEECH_H
#define OMNI_API_SPEECH_H

struct api;
struct ws_req;

void speech_route(struct api *a, struct ws_req *r, const char *arg);
void speech_voices_route(struct api *a, struct ws_req *r, const char *arg);

#endif
