/* tokenizer.h - text <-> token ids for GGUF vocabularies.
 *
 * Supports tokenizer.ggml.model = "llama" (SentencePiece BPE driven by scores,
 * byte fallback, "▁" for spaces) and "gpt2" (byte-level BPE driven by merge
 * ranks, with the pre-tokenizer regex selected by tokenizer.ggml.pre:
 * llama-bpe, qwen2, gpt-2, smollm, default). Pre-tokenization uses PCRE2.
 *
 *   struct tokenizer *tok = tokenizer_from_gguf(g, err, sizeof err);
 *   int32_t ids[256];
 *   int n = tokenizer_encode(tok, "Hello", 5, TOK_ADD_SPECIAL, ids, 256);
 *   struct tok_stream st = {0};
 *   char out[64]; size_t len = tokenizer_stream_piece(tok, &st, ids[i], out, sizeof out);
 *   tokenizer_free(tok);
 *
 * Thread safety: a tokenizer is immutable after construction and may be used
 * from any number of threads at once; struct tok_stream is per stream. */
#ifndef OMNI_TOKENIZER_H
#define OMNI_TOKENIZER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct gguf;
struct tokenizer;

enum tok_kind { TOK_KIND_SPM, TOK_KIND_BPE, TOK_KIND_WPM };

/* Token attributes from tokenizer.ggml.token_type. */
enum tok_attr {
    TOK_TYPE_NORMAL = 1, TOK_TYPE_UNKNOWN = 2, TOK_TYPE_CONTROL = 3,
    TOK_TYPE_USER_DEFINED = 4, TOK_TYPE_UNUSED = 5, TOK_TYPE_BYTE = 6,
};

enum tok_encode_flags {
    TOK_ADD_SPECIAL = 1 << 0,   /* add BOS/EOS as the vocabulary asks (add_bos/add_eos) */
    TOK_PARSE_SPECIAL = 1 << 1, /* text of control/user-defined tokens becomes those tokens */
};

/* Build from the tokenizer.* keys of g. g may be freed afterwards (all data
 * copied). NULL + message when keys are missing or inconsistent. */
struct tokenizer *tokenizer_from_gguf(const struct gguf *g, char *err, size_t errlen);
void tokenizer_free(struct tokenizer *tok);

enum tok_kind tokenizer_kind(const struct tokenizer *tok);
int32_t tokenizer_n_vocab(const struct tokenizer *tok);
int32_t tokenizer_bos(const struct tokenizer *tok);  /* -1 if none */
int32_t tokenizer_eos(const struct tokenizer *tok);  /* -1 if none */
bool tokenizer_add_bos(const struct tokenizer *tok);
/* End of generation: eos, eot (<|im_end|>, <|eot_id|>, <end_of_turn>, ...). */
bool tokenizer_is_eog(const struct tokenizer *tok, int32_t id);
int tokenizer_token_type(const struct tokenizer *tok, int32_t id);
/* Raw vocabulary string of id (as stored: "▁the", "Ġthe", "<0x0A>"), or NULL. */
const char *tokenizer_token_text(const struct tokenizer *tok, int32_t id);
/* Id of an exact vocabulary string, or -1. */
int32_t tokenizer_find(const struct tokenizer *tok, const char *text, size_t len);

/* Encode text[len] (UTF-8) into out[max_out]. Returns the number of ids;
 * OMNI_ERR_FORMAT for invalid UTF-8; OMNI_ERR_LIMIT when max_out is too small
 * (then *needed, if non-NULL, gets the full count). */
int tokenizer_encode(const struct tokenizer *tok, const char *text, size_t len,
                     int flags, int32_t *out, int max_out, int *needed);

/* Bytes of one token as text: "▁" -> " ", byte tokens -> the byte, BPE
 * byte-level chars -> bytes; control tokens give "" unless special is true.
 * Writes up to cap bytes; returns the full length. */
size_t tokenizer_piece(const struct tokenizer *tok, int32_t id, bool special,
                       char *buf, size_t cap);

/* Streaming decode: holds back incomplete UTF-8 sequences across tokens so
 * every chunk returned is valid UTF-8. For SPM, strips the leading space of
 * the first piece after BOS when lstrip_first is set (run.c does this). */
struct tok_stream {
    char pending[8];
    int n_pending;
    bool after_bos;
};
size_t tokenizer_stream_piece(const struct tokenizer *tok, struct tok_stream *st,
                              int32_t id, char *buf, size_t cap);
/* Flush what is still pending at the end (invalid bytes become U+FFFD). */
size_t tokenizer_stream_flush(const struct tokenizer *tok, struct tok_stream *st,
                              char *buf, size_t cap);

/* Decode a whole id sequence into buf (NUL-terminated if room); returns the
 * full length. */
size_t tokenizer_decode(const struct tokenizer *tok, const int32_t *ids, int n,
                        bool special, char *buf, size_t cap);

#endif
