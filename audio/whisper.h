/* whisper.h - speech recognition with whisper.cpp ggml models (tiny .. large-v3).
 *
 *   struct whisper_model *m = whisper_model_load("ggml-base.en.bin", err, sizeof err);
 *   struct whisper_state *s = whisper_state_new(m, tp, err, sizeof err);   // tp: a tpool or NULL
 *   struct whisper_full_params p = whisper_full_default_params(WHISPER_SAMPLING_GREEDY);
 *   whisper_full(s, &p, pcm, n_samples, err, sizeof err);                  // 16 kHz mono floats
 *   for (int i = 0; i < whisper_full_n_segments(s); i++) puts(whisper_full_get_segment(s, i)->text);
 *   whisper_state_free(s); whisper_model_free(m);
 *
 * Thread safety: a loaded model is read-only and shared by any number of
 * states on any threads; a state (mel, encoder output, cross-attention K/V,
 * per-decoder self-attention caches, results) belongs to one thread at a time.
 * Errors: negative enum omni_err plus one line in err naming file and field. */
#ifndef OMNI_WHISPER_H
#define OMNI_WHISPER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct tpool;
struct whisper_model;
struct whisper_state;

#define WHISPER_SAMPLE_RATE_HZ 16000
#define WHISPER_CHUNK_FRAMES 3000  /* mel frames in one 30 s window */
#define WHISPER_MAX_DECODERS 16    /* K/V cache slots: 2 per beam, 1 per sampled candidate */
#define WHISPER_MAX_BEAMS (WHISPER_MAX_DECODERS / 2)
#define WHISPER_AUDIO_CTX_AUTO (-1) /* whisper_full_params.audio_ctx: fit each window's audio */
#define WHISPER_AUDIO_CTX_MARGIN 384 /* its default margin, positions (7.68 s; see docs/audio.md) */

// ---- model ------------------------------------------------------------------

struct whisper_hparams {
    int32_t n_vocab;
    int32_t n_audio_ctx, n_audio_state, n_audio_head, n_audio_layer;
    int32_t n_text_ctx, n_text_state, n_text_head, n_text_layer;
    int32_t n_mels;
    int32_t ftype;  /* whisper.cpp file type, quantization version removed */
};

/* Reads and validates a whole whisper.cpp ggml .bin file (magic, hparams, mel
 * filters, vocab, every tensor's name, shape, type and size). Tensor types
 * F32, F16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0. NULL + message on failure. */
struct whisper_model *whisper_model_load(const char *path, char *err, size_t errlen);
void whisper_model_free(struct whisper_model *m);

const struct whisper_hparams *whisper_model_hparams(const struct whisper_model *m);
const float *whisper_model_mel_filters(const struct whisper_model *m); /* [n_mels][201] */
bool whisper_is_multilingual(const struct whisper_model *m);
/* Total bytes of tensor data held by the model. */
size_t whisper_model_size_bytes(const struct whisper_model *m);

// ---- tokens -----------------------------------------------------------------
/* Special ids depend on the vocabulary (English-only 51864, multilingual
 * 51865, large-v3 51866 with one more language); -1 when the model's
 * vocabulary is too small to hold them (test models). */

enum whisper_special_token {
    WHISPER_TOKEN_EOT, WHISPER_TOKEN_SOT, WHISPER_TOKEN_TRANSLATE, WHISPER_TOKEN_TRANSCRIBE,
    WHISPER_TOKEN_SOLM, WHISPER_TOKEN_PREV, WHISPER_TOKEN_NOSP, WHISPER_TOKEN_NOT,
    WHISPER_TOKEN_BEG, /* <|0.00|>; timestamp k (k * 20 ms) is BEG + k */
};
int32_t whisper_token_special(const struct whisper_model *m, enum whisper_special_token which);
/* <|xx|> of language id lang (see whisper_lang_id), or -1. */
int32_t whisper_token_lang(const struct whisper_model *m, int lang);
/* Bytes of a token (raw, may be part of a UTF-8 character); special tokens
 * read like "[_SOT_]". Never NULL; *len gets the length. */
const char *whisper_token_bytes(const struct whisper_model *m, int32_t id, size_t *len);
/* Greedy longest-match encoding of text to ids, using the vocab's byte
 * pieces (the initial prompt); returns the count written (<= max) or a
 * negative enum omni_err. */
int whisper_tokenize(const struct whisper_model *m, const char *text, int32_t *ids, int max);

/* Languages, in Whisper's token order: "en" is 0, "yue" (large-v3) 99. */
int whisper_lang_max_id(const struct whisper_model *m); /* last usable id, -1 for .en */
int whisper_lang_id(const char *code_or_name);          /* "en" or "english"; -1 unknown */
const char *whisper_lang_str(int id);                   /* "en"; NULL out of range */

// ---- state and the low-level passes ----------------------------------------

/* tp is borrowed (NULL: single-threaded); the caller keeps it alive and does
 * not run anything else on it while a call on this state is in progress. */
struct whisper_state *whisper_state_new(const struct whisper_model *m, struct tpool *tp, char *err,
                                        size_t errlen);
void whisper_state_free(struct whisper_state *s);

/* Encoder over the 30 s window of mel [n_mels][n_frames] starting at frame
 * offset; frames past n_frames read as 0, as in OpenAI's pad_or_trim (pass a
 * mel computed with MEL_PAD_30S to get transformers' padding instead). Also
 * computes every decoder layer's cross-attention K/V. */
int whisper_encode(struct whisper_state *s, const float *mel, int n_frames, int offset, char *err,
                   size_t errlen);
/* The same over the first n_ctx encoder positions only (whisper.cpp's
 * audio_ctx; 1 .. n_audio_ctx, two mel frames = 20 ms each): the window is
 * cut to 2 * n_ctx frames, the positional embedding's first n_ctx rows are
 * added, attention and the decoder's cross-attention span those positions.
 * Cost falls with n_ctx (attention with its square); the model never saw
 * windows other than 30 s in training, so results may differ a little. */
int whisper_encode_ctx(struct whisper_state *s, const float *mel, int n_frames, int offset,
                       int n_ctx, char *err, size_t errlen);
/* Encoder output of the last whisper_encode: [whisper_encoded_ctx][n_audio_state]. */
const float *whisper_encoder_output(const struct whisper_state *s);
/* Positions of the last whisper_encode (n_audio_ctx, or its n_ctx). */
int whisper_encoded_ctx(const struct whisper_state *s);

/* Run decoder `decoder` (0 .. WHISPER_MAX_DECODERS-1) over n_tokens tokens at
 * positions n_past.. of its self-attention cache. Logits of the last token
 * (or of every token with all_logits) are then at whisper_logits(). */
int whisper_decode(struct whisper_state *s, int decoder, const int32_t *tokens, int n_tokens,
                   int n_past, bool all_logits, char *err, size_t errlen);
/* One token for each of n distinct decoders (tokens[i] at position
 * n_past[i] of decoders[i]) in one pass: the weights are read once for all
 * beams or candidates. Logits [n][n_vocab] at whisper_logits(). */
int whisper_decode_batch(struct whisper_state *s, const int *decoders, const int32_t *tokens, const int *n_past,
                         int n, char *err, size_t errlen);
/* [n][n_vocab] floats from the last whisper_decode (n = 1 or n_tokens) or
 * whisper_decode_batch. */
const float *whisper_logits(const struct whisper_state *s);

/* After whisper_encode: probabilities of every language (probs[lang_id],
 * whisper_lang_max_id + 1 of them, may be NULL); returns the most likely id
 * or a negative enum omni_err (English-only models: OMNI_ERR_UNSUPPORTED). */
int whisper_lang_detect(struct whisper_state *s, float *probs, char *err, size_t errlen);

// ---- full transcription -----------------------------------------------------

enum whisper_sampling_strategy {
    WHISPER_SAMPLING_GREEDY,      /* best of greedy_best_of when temperature > 0 */
    WHISPER_SAMPLING_BEAM_SEARCH, /* beam_size beams at temperature 0 */
};

struct whisper_token_data {
    int32_t id;
    float p;        /* probability of the token where it was picked */
    float logprob;
    /* the timestamp tokens' distribution at that step (whisper.cpp's token
     * timestamps): the likeliest one (tid - WHISPER_TOKEN_BEG = 20 ms steps
     * from the window's start), its probability and their total */
    int32_t tid;
    float pt, ptsum;
};

struct whisper_segment {
    int64_t t0_ms, t1_ms;   /* from the start of the audio */
    char *text;             /* UTF-8, as decoded (leading space kept) */
    int n_tokens;
    struct whisper_token_data *tokens; /* text tokens (no timestamp tokens) */
    float avg_logprob;      /* of the window's chosen sequence */
    float compression_ratio;
    float temperature;      /* at which the window was finally decoded */
    float no_speech_prob;
};

typedef void (*whisper_new_segment_fn)(struct whisper_state *s, int n_new, void *user_data);
typedef bool (*whisper_abort_fn)(void *user_data);

struct whisper_full_params {
    enum whisper_sampling_strategy strategy;
    const char *language;       /* "en", "de", ... or "auto"/NULL: detect (multilingual models) */
    bool translate;             /* task <|translate|> (to English) instead of <|transcribe|> */
    bool no_timestamps;         /* decode with <|notimestamps|>: one segment per window */
    bool no_context;            /* do not condition on the previous window's text */
    bool suppress_blank;        /* no blank or EOT as the first sampled token (OpenAI) */
    bool suppress_special;      /* never sample <|startoftranscript|>, task, <|startofprev|>,
                                   <|startoflm|>, <|nospeech|> (OpenAI) */
    const char *initial_prompt; /* text before the first window (<|startofprev|> ...) */
    int offset_ms;              /* start decoding this far into the audio */
    int duration_ms;            /* decode at most this much audio; 0: all */
    int max_tokens;             /* sampled tokens per window; 0: n_text_ctx / 2 */
    int audio_ctx;              /* encoder positions per window (20 ms each; whisper.cpp's
                                   audio_ctx): 0 all n_audio_ctx (30 s, OpenAI's); N > 0 the
                                   first N only, so a window spans 2 N mel frames and seeks
                                   by at most that; WHISPER_AUDIO_CTX_AUTO: each window's
                                   audio plus audio_ctx_margin, rounded up to 64 (short
                                   audio: far less work, see docs/audio.md for accuracy) */
    int audio_ctx_margin;       /* WHISPER_AUDIO_CTX_AUTO: positions past the audio's end
                                   (WHISPER_AUDIO_CTX_MARGIN) */
    float max_initial_ts_s;     /* first timestamp at most this (1.0 s) */
    int greedy_best_of;         /* candidates when sampling at temperature > 0 (5, <= 16) */
    int beam_size;              /* beams for WHISPER_SAMPLING_BEAM_SEARCH (5, <= 8) */
    float length_penalty;       /* < 0: rank by sum logprob / length (OpenAI default) */
    float temperature;          /* first attempt (0 = greedy argmax) */
    float temperature_inc;      /* fallback step; <= 0 disables fallback (0.2) */
    float compression_ratio_thold; /* fallback when above (2.4) */
    float logprob_thold;        /* fallback when avg logprob below (-1.0) */
    float no_speech_thold;      /* silent window when no_speech_prob above and logprob low (0.6) */
    uint64_t seed;              /* sampling at temperature > 0 */
    whisper_new_segment_fn new_segment_callback;
    void *new_segment_callback_user_data;
    whisper_abort_fn abort_callback; /* checked between tokens; true stops with OMNI_ERR_LIMIT */
    void *abort_callback_user_data;
};
struct whisper_full_params whisper_full_default_params(enum whisper_sampling_strategy strategy);

/* Transcribe (or translate) pcm[n_samples] (16 kHz mono floats): log-mel,
 * then 30 s windows seeked by the last timestamp token of each. Results
 * replace the state's previous ones. p NULL: greedy defaults. Memory: the
 * state holds the cross-attention K/V of every decoder layer (f32) and one
 * self-attention cache per decoder slot in use (2 per beam). */
int whisper_full(struct whisper_state *s, const struct whisper_full_params *p, const float *pcm,
                 int64_t n_samples, char *err, size_t errlen);
int whisper_full_n_segments(const struct whisper_state *s);
/* Encoder positions whisper_full gives a window holding n_frames mel frames
 * of audio under p's audio_ctx (n_audio_ctx when it is 0). */
int whisper_full_window_ctx(const struct whisper_model *m, const struct whisper_full_params *p, int n_frames);
/* Segment i, owned by the state until its next whisper_full or free. */
const struct whisper_segment *whisper_full_get_segment(const struct whisper_state *s, int i);
/* Language the last whisper_full used ("en" for English-only models). */
const char *whisper_full_lang(const struct whisper_state *s);

#endif
