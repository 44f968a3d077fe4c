/* audio.h - the OpenAI speech-to-text routes: POST /v1/audio/transcriptions
 * and /v1/audio/translations (multipart/form-data in; json, text, srt, vtt or
 * verbose_json out, or an SSE stream of transcript.text.delta events). The
 * audio is decoded, trimmed to speech by VAD (when a VAD model is loaded) and
 * transcribed on an stt worker; the service thread only parses the form.
 * Thread safety: the route functions run on the service thread. */
#ifndef OMNI_API_AUDIO_H
#define OMNI_API_AUDIO_H

struct api;
struct ws_req;

void audio_transcriptions(struct api *a, struct ws_req *r, const char *arg);
void audio_translations(struct api *a, struct ws_req *r, const char *arg);

#endif
