/* grammar.h - constrained decoding: GBNF grammars (llama.cpp's syntax, so
 * existing grammars work) and a per-sequence matcher that masks the logits of
 * every token whose bytes cannot continue the grammar.
 *
 *   struct grammar *g = grammar_parse(text, len, err, sizeof err);  // "root" is the start
 *   struct grammar_vocab *v = grammar_vocab_new(tok, err, sizeof err); // once per tokenizer
 *   struct grammar_matcher *m = grammar_matcher_new(g, v, err, sizeof err);
 *   const float *masked = grammar_matcher_apply(m, logits);  // disallowed tokens -inf
 *   id = sampler_sample(s, masked, NULL);
 *   grammar_matcher_accept(m, id);
 *   grammar_matcher_free(m); grammar_vocab_free(v); grammar_free(g);
 *
 * Grammars work on UTF-8 bytes, so tokens that split a character are handled.
 * A mask costs one walk of the vocabulary's byte trie through a lazily built
 * DFA (pruned at the first impossible byte) the first time a state is seen;
 * later visits of the same state reuse the cached mask.
 *
 * Thread safety: a grammar and a vocab are immutable after construction and
 * may be shared between threads (grammar_ref/grammar_free are atomic); a
 * matcher belongs to one sequence and one thread at a time. */
#ifndef OMNI_GRAMMAR_H
#define OMNI_GRAMMAR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct tokenizer;
struct grammar;
struct grammar_vocab;
struct grammar_matcher;

/* Parse GBNF text: rules "name ::= alternatives", literals "...", classes
 * [a-z] [^"\\], ".", groups, | * + ? {m} {m,} {m,n}, # comments. The start
 * rule is "root". NULL with "grammar: line L col C: what" in err for syntax
 * errors, undefined rules, left recursion or out of memory. The caller owns
 * the result (refcount 1). */
struct grammar *grammar_parse(const char *text, size_t len, char *err, size_t errlen);
/* Another reference to g (for a consumer that outlives its creator). */
struct grammar *grammar_ref(struct grammar *g);
/* Drops one reference; the last frees it. NULL is a no-op. */
void grammar_free(struct grammar *g);

/* Whole-string check (tests, validation): does text[len] match root fully? */
bool grammar_match(const struct grammar *g, const char *text, size_t len);

/* The byte trie of a tokenizer's tokens. tok must outlive it. */
struct grammar_vocab *grammar_vocab_new(const struct tokenizer *tok, char *err, size_t errlen);
void grammar_vocab_free(struct grammar_vocab *v);
int32_t grammar_vocab_n_tokens(const struct grammar_vocab *v);

/* A matcher at the start of g (takes a reference to g; v must outlive it). */
struct grammar_matcher *grammar_matcher_new(struct grammar *g, const struct grammar_vocab *v,
                                            char *err, size_t errlen);
void grammar_matcher_free(struct grammar_matcher *m);

/* Allowed tokens of the current state as bits (bit t of words[t / 32]);
 * end-of-generation tokens are allowed exactly when the grammar may end.
 * The array has (n_vocab + 31) / 32 words, is owned by the matcher and valid
 * until its next call. NULL (message in grammar_matcher_error) when the
 * matcher's state limit is hit or memory runs out. */
const uint32_t *grammar_matcher_mask(struct grammar_matcher *m);
/* logits[n_vocab] with disallowed tokens set to -inf, in a buffer owned by
 * the matcher (valid until its next call); NULL as for grammar_matcher_mask. */
const float *grammar_matcher_apply(struct grammar_matcher *m, const float *logits);
/* Advance by a sampled token. 0; OMNI_ERR_ARG when the grammar does not
 * allow it (the state is unchanged). */
int grammar_matcher_accept(struct grammar_matcher *m, int32_t token);
/* Advance by raw bytes (tests, forced prefixes); same returns. */
int grammar_matcher_accept_bytes(struct grammar_matcher *m, const char *s, size_t len);
/* Bytes that may come next: bit b of set[b / 32] (tests, forced text).
 * 0, or OMNI_ERR_NOMEM when the state limit is hit. */
int grammar_matcher_next_bytes(struct grammar_matcher *m, uint32_t set[8]);
/* The grammar may end here / must end here (nothing can follow). */
bool grammar_matcher_can_end(const struct grammar_matcher *m);
bool grammar_matcher_must_end(const struct grammar_matcher *m);
const char *grammar_matcher_error(const struct grammar_matcher *m);

#endif
