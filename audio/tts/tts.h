/* tts.h - speech synthesis: voices, text in pieces, float PCM out in chunks.
 *
 *   struct tts *t = tts_new(NULL, err, sizeof err);           // espeak-ng built in
 *   struct tts_stream_params sp = tts_stream_default_params();
 *   sp.voice = "alloy";
 *   struct tts_stream *s = tts_stream_new(t, &sp, on_event, user, err, sizeof err);
 *   tts_stream_push(s, "Hello there. How are", 20);          // as an LLM writes it
 *   tts_stream_push(s, " you?", 5);
 *   tts_stream_finish(s);            // on_event: TTS_EV_AUDIO ..., TTS_EV_SENTENCE, ..., TTS_EV_DONE
 *   tts_stream_free(s);              // after TTS_EV_DONE (or at once: it cancels and waits)
 *   tts_free(t);
 *
 * Text is cut into sentences as it arrives (tts_splitter: numbers,
 * abbreviations, URLs and code do not end a sentence), and each sentence is
 * synthesized as soon as it is complete, so the first sentence's audio is out
 * while the rest of the text is still being written.
 *
 * Voices come from backends (tts_int.h). espeak-ng is built in: every
 * espeak-ng language ("en-us", "de") is a voice, "LANG+VARIANT" ("en-us+f3")
 * picks one of its variants, and OpenAI's voice names ("alloy" ... "verse")
 * map to distinct English voices. A voice whose acoustic model is a language
 * model run by src/engine says so (needs_engine); synthesis is incremental
 * for every backend.
 *
 * Thread safety: struct tts is shared by any number of threads. A stream's
 * push/finish/cancel may be called from any thread but by one at a time;
 * events arrive on a synthesis worker thread (one stream's from one at a
 * time), in order, and must not call back into the same stream except
 * tts_stream_cancel. Local voices (espeak-ng) are spoken by one worker, a
 * sentence at a time; voices run by the engine by up to engine_workers at
 * once, so several such streams speak together (their model rows batch in
 * the engine's steps). Streams marked urgent
 * (a realtime reply) go before the others at every sentence boundary. */
#ifndef OMNI_TTS_H
#define OMNI_TTS_H

#include <stdbool.h>
#include <stddef.h>

struct tts;
struct tts_stream;

#define TTS_VOICE_ID_MAX 64

struct tts_voice_info {
    char id[TTS_VOICE_ID_MAX];   /* what clients pass: "alloy", "en-us", "en-us+f3" */
    char name[64];               /* human-readable: "English (America)" */
    char language[32];           /* "en-us" */
    char engine[16];             /* backend name: "espeak-ng" */
    bool needs_engine;           /* acoustic model is a language model run by src/engine */
    int sample_rate_hz;          /* of the PCM this voice produces */
};

struct tts_params {
    int max_streams;             /* streams open at once; more: tts_stream_new fails LIMIT. default 64 */
    size_t max_text_bytes;       /* text one stream may push in all; default 1 MiB */
    int engine_workers;          /* sentences of engine-run voices in flight at once
                                    (1..TTS_MAX_ENGINE_WORKERS); default 4; 1: one
                                    after another */
    int engine_max_tokens;       /* tokens an engine-run voice may write per sentence;
                                    0 (default): from the text's length */
    bool engine_scripted;        /* benchmarks only: engine-run voices write scripted
                                    words (outetts_speak_params.scripted); default false */
};
#define TTS_MAX_ENGINE_WORKERS 8
struct tts_params tts_default_params(void);

/* Starts the synthesis worker and loads the built-in backends. p NULL:
 * defaults. NULL + message when espeak-ng cannot start (no voice data). */
struct tts *tts_new(const struct tts_params *p, char *err, size_t errlen);
/* Cancels every open stream, joins the worker. NULL is a no-op. */
void tts_free(struct tts *t);

struct engine;
struct dac_model;
/* Adds the OuteTTS 1.0 voices (audio/tts/outetts_speak.h): the language
 * model `model` of engine e (started), the DAC codec dac, and a voice per
 * speaker file NAME.json in voices_dir (NULL: none) besides voice "outetts"
 * (no speaker). e and dac are borrowed until tts_free. Call once, before
 * streams use these voices; listing threads see them atomically. 0 or a
 * negative omni_err + message (a malformed speaker file is named). */
int tts_add_outetts(struct tts *t, struct engine *e, int model, const struct dac_model *dac,
                    const char *voices_dir, char *err, size_t errlen);

/* Voices in listing order: OpenAI's names first, then every espeak-ng
 * language. Variants ("+f3") are accepted by tts_voice_find but not listed. */
int tts_voice_count(const struct tts *t);
int tts_voice_get(const struct tts *t, int i, struct tts_voice_info *out);
/* Looks a voice up by id (case-insensitive; "LANG+VARIANT" too). 0, or
 * OMNI_ERR_NOTFOUND with a message naming the voice. */
int tts_voice_find(const struct tts *t, const char *id, struct tts_voice_info *out, char *err,
                   size_t errlen);

// ---- streams ----------------------------------------------------------------

enum tts_event_type {
    TTS_EV_AUDIO,      /* pcm[n] mono float at sample_rate_hz */
    TTS_EV_SENTENCE,   /* text[len] was spoken completely (after its audio) */
    TTS_EV_DONE,       /* the last event: finished, cancelled or failed (error set) */
};

struct tts_event {
    enum tts_event_type type;
    const float *pcm;          /* AUDIO: valid during the call */
    size_t n;
    int sample_rate_hz;
    const char *text;          /* SENTENCE: valid during the call, not NUL-terminated */
    size_t len;
    bool cancelled;            /* DONE */
    const char *error;         /* DONE: NULL, or why synthesis failed */
};
typedef void (*tts_event_fn)(void *user, const struct tts_event *ev);

struct tts_stream_params {
    const char *voice;         /* voice id; NULL or "": "alloy" */
    float speed;               /* 0.25 .. 4.0; 1 is the voice's normal rate */
    bool urgent;               /* latency-critical (a realtime reply): synthesized first */
};
struct tts_stream_params tts_stream_default_params(void);

/* A new utterance. Events go to fn(user, ev) on the worker. NULL + message
 * for an unknown voice (OMNI_ERR_NOTFOUND), a speed out of range (ARG) or too
 * many open streams (LIMIT); the code is in *code when code is non-NULL. */
struct tts_stream *tts_stream_new(struct tts *t, const struct tts_stream_params *p,
                                  tts_event_fn fn, void *user, int *code, char *err, size_t errlen);
/* Appends text (UTF-8, any split). Complete sentences are queued at once.
 * OMNI_ERR_LIMIT past max_text_bytes, ARG after finish/cancel. */
int tts_stream_push(struct tts_stream *s, const char *text, size_t len);
/* No more text: what is left is spoken, then TTS_EV_DONE. */
int tts_stream_finish(struct tts_stream *s);
/* Stops as soon as possible (mid-sentence): queued text is dropped, the
 * sentence being synthesized stops at its next chunk, then TTS_EV_DONE with
 * cancelled set. Idempotent; any thread. */
void tts_stream_cancel(struct tts_stream *s);
/* Cancels if still running, waits until the worker has let go, frees. NULL
 * is a no-op. Not from inside the stream's own event callback. */
void tts_stream_free(struct tts_stream *s);
/* For callers that live on events (an HTTP response): the worker frees the
 * stream itself right after its TTS_EV_DONE callback returns (at once if that
 * already happened). Speaking goes on. After the call only
 * tts_stream_cancel may still be used, and only until TTS_EV_DONE arrives. */
void tts_stream_detach(struct tts_stream *s);

/* One-shot helper: synthesizes all of text into a malloc'd PCM buffer
 * (*pcm, *n at *rate_hz). 0 or a negative enum omni_err + message. */
int tts_synthesize(struct tts *t, const struct tts_stream_params *p, const char *text,
                   float **pcm, size_t *n, int *rate_hz, char *err, size_t errlen);

// ---- sentence splitting (pure; exposed for tests) ---------------------------

/* Cuts streaming text into sentences. A sentence ends at . ! ? (or a run of
 * them, closing quotes/brackets included) followed by white space and then
 * something that does not continue the sentence; also at a blank line. Not
 * an end: decimal points and times ("3.14", "10.30"), abbreviations ("Dr.",
 * "e.g.", "U.S."), a next word in lower case, URLs, paths and e-mail
 * addresses (no white space), text inside `code` or ``` fences. Sentences
 * longer than max_chars are cut at the last comma/semicolon/space before it. */
struct tts_splitter;
struct tts_splitter *tts_splitter_new(size_t max_chars);
void tts_splitter_free(struct tts_splitter *sp);
/* Appends text; 0 or OMNI_ERR_NOMEM. */
int tts_splitter_push(struct tts_splitter *sp, const char *text, size_t len);
/* Next complete sentence (trimmed, malloc'd, caller frees) or NULL when none
 * is complete yet. With final set, the remainder counts as complete. */
char *tts_splitter_next(struct tts_splitter *sp, bool final);

#endif
