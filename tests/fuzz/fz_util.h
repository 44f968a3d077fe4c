/* fz_util.h - helpers shared by the libFuzzer targets in tests/fuzz/: an
 * in-memory GGUF writer, tiny tokenizer vocabularies built from it, a path
 * for loaders that only open files, input splitting and output checks.
 *
 *   struct fz_gguf w; fz_gguf_init(&w);
 *   fz_gguf_str(&w, "tokenizer.ggml.model", "gpt2"); ...
 *   struct gguf *g = fz_gguf_open(&w, err, sizeof err);   // w's buffer must outlive g
 *   gguf_free(g); fz_gguf_free(&w);
 *
 * Everything here is deterministic (no clocks, no randomness): a crash file
 * reproduces on every run. Targets call these from one thread. */
#ifndef OMNI_FZ_UTIL_H
#define OMNI_FZ_UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct gguf;
struct tokenizer;

/* libFuzzer's entry points (declared here so -Wmissing-prototypes stays quiet). */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);

// ---- GGUF v3 writer (metadata only, no tensors) ------------------------------

struct fz_gguf {
    uint8_t *buf;
    size_t len, cap;
    uint64_t n_kv;
};
void fz_gguf_init(struct fz_gguf *w);
void fz_gguf_free(struct fz_gguf *w);
void fz_gguf_str(struct fz_gguf *w, const char *key, const char *value);
void fz_gguf_u32(struct fz_gguf *w, const char *key, uint32_t value);
void fz_gguf_bool(struct fz_gguf *w, const char *key, bool value);
void fz_gguf_arr_str(struct fz_gguf *w, const char *key, const char *const *v, int n);
void fz_gguf_arr_f32(struct fz_gguf *w, const char *key, const float *v, int n);
void fz_gguf_arr_i32(struct fz_gguf *w, const char *key, const int32_t *v, int n);
/* Writes the header and parses the buffer (which the result borrows). */
struct gguf *fz_gguf_open(struct fz_gguf *w, char *err, size_t errlen);

// ---- vocabularies ------------------------------------------------------------

enum fz_vocab {
    FZ_VOCAB_BPE,   /* byte-level BPE ("gpt2", pre "qwen2"): 256 bytes, a few merges,
                       ChatML / <think> / <tool_call> control tokens */
    FZ_VOCAB_SPM,   /* SentencePiece ("llama"): <unk> <s> </s>, byte fallback, scored pieces */
    FZ_VOCAB_COUNT
};
/* A tiny vocabulary of kind v as GGUF metadata in w (w initialised by the
 * caller, who may add more keys, e.g. a chat template, before opening). */
void fz_vocab_gguf(struct fz_gguf *w, enum fz_vocab v);

/* A file under $OMNI_SHARED or ../shared (the project's real test data), or
 * NULL when it is not there: targets that use real vocabularies fall back
 * to the tiny ones. Static buffer. */
const char *fz_shared(const char *rel);
/* A whole file read into memory (caller frees), or NULL. */
uint8_t *fz_read_file(const char *path, size_t *len);

// ---- inputs and outputs ------------------------------------------------------

/* A path naming an anonymous in-memory file that holds data[size], for
 * loaders that only take a path (memfd + /proc/self/fd). fz_path_close
 * releases it. Aborts when the kernel refuses: that is the harness failing,
 * not a finding. */
const char *fz_path_open(const uint8_t *data, size_t size);
void fz_path_close(void);

/* A copy of data[n] that ends exactly where an unreadable page begins, for
 * buffers handed to code built without ASan (ffmpeg, libpng): reading one
 * byte past the end faults at once instead of only when the heap happens to
 * end there. Free with fz_guarded_free(p, n). */
uint8_t *fz_guarded_copy(const void *data, size_t n);
void fz_guarded_free(uint8_t *p, size_t n);

/* Splits the input at NUL bytes into at most max sections (the last one
 * keeps any further NULs); returns how many were found (>= 1). */
int fz_split(const uint8_t *data, size_t size, const uint8_t **part, size_t *len, int max);
/* A NUL-terminated copy (caller frees). */
char *fz_strndup(const uint8_t *data, size_t len);
/* Length of the valid UTF-8 character at s[0..n) (n >= 1), 0 if invalid
 * (overlong, surrogate, past U+10FFFF, cut short). */
size_t fz_utf8_len(const uint8_t *s, size_t n);
bool fz_utf8_valid(const uint8_t *s, size_t n);

/* Aborts (a finding) unless text[len] is one complete JSON value: every body
 * and event the server sends as JSON must parse. what names the producer. */
void fz_check_json(const char *text, size_t len, const char *what);

#endif
