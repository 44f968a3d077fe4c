/* outetts.h - the OuteTTS 1.0 speaking model's text side: speaker profiles,
 * the interface-v3 prompt, and generated tokens back to DAC code frames.
 *
 * OuteTTS 1.0 (OuteAI/Llama-OuteTTS-1.0-1B, OuteAI/OuteTTS-1.0-0.6B) is a
 * language model that continues a prompt made of the text to speak (after
 * the speaker's own transcript) and the speaker's words, each with its
 * duration, prosody features and DAC codes, then writes the new words the
 * same way. Codes of the first two DAC codebooks alternate as <|c1_N|>
 * <|c2_N|> tokens, 75 frames a second (ibm-research/DAC.speech.v1.0).
 *
 *   struct outetts_speaker *spk = outetts_speaker_load("voice.json", err, sizeof err);
 *   char *prompt = outetts_prompt("Hello there.", spk, err, sizeof err);  // tokenize with
 *                                                   // special tokens parsed, run the LM
 *   struct outetts_vocab *v = outetts_vocab_new(tok, err, sizeof err);
 *   struct outetts_parser p; outetts_parser_init(&p);
 *   for each generated id: switch (outetts_parser_push(&p, v, id)) {
 *       case OUTETTS_WORD_END: decode p.frames[0 .. p.n_frames) (c1, c2 pairs); reset ...
 *   }
 *
 * Format facts (outetts 0.4 interface version 3, its published prompt
 * processor): prompt = "<|im_start|>\n<|text_start|>" + speaker transcript +
 * separator + text + "<|text_end|>\n<|audio_start|>\n" + the speaker's words
 * joined by "\n" + "\n<|word_start|>"; a word is "<|word_start|>" WORD
 * "<|features|><|t_D.DD|><|energy_E|><|spectral_centroid_S|><|pitch_P|>"
 * "<|code|>" + (<|c1_A|><|c2_B|>)* + "<|word_end|>". The text is normalized
 * first (whitespace runs to one space, curly quotes and dashes to ASCII,
 * "…" to "...", control characters dropped); the separator is ". " when the
 * transcript does not end in . ? ! (its "." then goes to the last speaker
 * word), else " " ("。" rules for Chinese and Japanese).
 *
 * Speaker JSON (what outetts' create_speaker saves): {"text": transcript,
 * "words": [{"word", "duration" (s), "c1": [codes], "c2": [codes],
 * "features": {"energy", "spectral_centroid", "pitch"} (optional, ints)}],
 * ...}; c1 and c2 of a word are equally long, codes 0..1023.
 *
 * Thread safety: speakers and vocabularies are immutable after creation and
 * may be shared; a parser belongs to one request. */
#ifndef OMNI_OUTETTS_H
#define OMNI_OUTETTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct tokenizer;
struct outetts_speaker;
struct outetts_vocab;

#define OUTETTS_CODEBOOK_SIZE 1024   /* DAC codes per codebook */
#define OUTETTS_FRAME_RATE_HZ 75     /* code frames per second */
#define OUTETTS_MAX_TEXT_BYTES 8192  /* one request's text */

/* Sampling the model card and outetts' generation config prescribe. */
#define OUTETTS_TEMPERATURE 0.4f
#define OUTETTS_TOP_K 40
#define OUTETTS_TOP_P 0.9f
#define OUTETTS_MIN_P 0.05f
#define OUTETTS_REPETITION_PENALTY 1.1f
#define OUTETTS_PENALTY_WINDOW 64    /* the penalty looks at the last 64 tokens only */

/* Parse a speaker profile. name (for messages) may be NULL. NULL + a
 * message naming the field on malformed JSON, a missing text or words, c1
 * and c2 of different lengths, codes out of 0..1023. */
struct outetts_speaker *outetts_speaker_parse(const char *json, size_t len, const char *name,
                                              char *err, size_t errlen);
struct outetts_speaker *outetts_speaker_load(const char *path, char *err, size_t errlen);
void outetts_speaker_free(struct outetts_speaker *s);
const char *outetts_speaker_text(const struct outetts_speaker *s);
int outetts_speaker_n_words(const struct outetts_speaker *s);
int outetts_speaker_n_frames(const struct outetts_speaker *s);

/* Interface-v3 text normalization of text[len]; malloc'd, the caller frees.
 * NULL on invalid UTF-8 or out of memory. */
char *outetts_normalize(const char *text, size_t len);

/* The completion prompt for text spoken by spk (NULL: no speaker - the
 * model picks a random voice). malloc'd; NULL + message for empty text
 * (after normalization) or text over OUTETTS_MAX_TEXT_BYTES. */
char *outetts_prompt(const char *text, const struct outetts_speaker *spk, char *err,
                     size_t errlen);

/* What the model would write for text (normalized here), for benchmarks of
 * random-weight models, which never end a word: each word as the format
 * writes it (duration ~0.12 s + 60 ms a character, features 50, random codes
 * from seed), words joined by "\n", then "\n<|audio_end|>". after_word_start:
 * the prompt already ends in "<|word_start|>" (it has a speaker), so the
 * first word leaves it out. malloc'd; the counts of words and code frames in
 * *n_words, *n_frames (may be NULL). NULL + message for text without words. */
char *outetts_script(const char *text, bool after_word_start, uint64_t seed, int *n_words,
                     int *n_frames, char *err, size_t errlen);

/* The ids of the format's tokens in a model's vocabulary. NULL + message
 * when the vocabulary lacks one of them (not an OuteTTS 1.0 model). */
struct outetts_vocab *outetts_vocab_new(const struct tokenizer *tok, char *err, size_t errlen);
void outetts_vocab_free(struct outetts_vocab *v);
/* Ids that end generation: <|audio_end|> and <|im_end|>. */
int outetts_vocab_stop_tokens(const struct outetts_vocab *v, int32_t out[2]);

enum outetts_event {
    OUTETTS_NONE = 0,    /* nothing complete yet */
    OUTETTS_FRAME,       /* a (c1, c2) pair completed: p->n_frames grew */
    OUTETTS_WORD_END,    /* <|word_end|>: the current word's frames are complete */
    OUTETTS_AUDIO_END,   /* <|audio_end|> or <|im_end|>: nothing more follows */
};

#define OUTETTS_MAX_WORD_FRAMES 1024

/* Generated tokens -> frames of the current word. Tokens outside the code
 * pairs (word text, durations, features) are skipped; a c2 without its c1,
 * or a c1 followed by another c1, drops the incomplete pair. */
struct outetts_parser {
    int32_t frames[OUTETTS_MAX_WORD_FRAMES][2]; /* (c1, c2) of the current word */
    int n_frames;
    int pending_c1;                             /* -1: none */
    int64_t total_frames, words;
};
void outetts_parser_init(struct outetts_parser *p);
/* Feed one generated id. After OUTETTS_WORD_END (and OUTETTS_AUDIO_END) the
 * caller takes frames[0 .. n_frames) and sets n_frames = 0. A word longer
 * than OUTETTS_MAX_WORD_FRAMES reports OUTETTS_WORD_END early (the caller
 * flushes what it has). */
enum outetts_event outetts_parser_push(struct outetts_parser *p, const struct outetts_vocab *v,
                                       int32_t id);

#endif
