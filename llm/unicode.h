/* unicode.h - the small amount of Unicode the tokenizers need: strict UTF-8
 * decoding and validation, the GPT-2 byte <-> code point mapping used by
 * byte-level BPE vocabularies, and the lower-casing and accent stripping of
 * BERT's normalizer (WordPiece).
 *
 *   uint32_t cp; int n = unicode_utf8_decode(s, len, &cp); // >0 bytes, 0 short, <0 bad
 *   char enc[4]; int k = unicode_utf8_encode(unicode_byte_to_cp(0x20), enc); // "Ġ"
 *
 * Thread safety: every function is pure (tables are constant). */
#ifndef OMNI_UNICODE_H
#define OMNI_UNICODE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Decode one code point from s[len]. Returns the sequence length (1-4) and
 * sets *cp; 0 when s[len] is a valid but incomplete prefix of a sequence
 * (more bytes needed; also when len == 0); -n when the first n bytes form an
 * invalid subpart (overlong, surrogate, > U+10FFFF, bad continuation) that a
 * decoder replaces with one U+FFFD before going on at s[n]. */
int unicode_utf8_decode(const char *s, size_t len, uint32_t *cp);

/* True when s[len] is entirely valid UTF-8 (no overlongs, surrogates or code
 * points past U+10FFFF: the same rules PCRE2 checks). */
bool unicode_utf8_valid(const char *s, size_t len);

/* Encode cp (<= 0x10FFFF) into out; returns the number of bytes (1-4), 0 for
 * an invalid code point. */
int unicode_utf8_encode(uint32_t cp, char out[4]);

/* GPT-2 byte-level mapping: printable Latin-1 bytes (0x21-0x7E, 0xA1-0xAC,
 * 0xAE-0xFF) map to themselves, the other 68 bytes to U+0100.. in byte order
 * (so ' ' becomes U+0120 'Ġ' and '\n' U+010A 'Ċ'). */
uint32_t unicode_byte_to_cp(uint8_t b);
/* The inverse: the byte for cp, or -1 when cp is not in the mapping. */
int unicode_cp_to_byte(uint32_t cp);

/* Simple lower-case mapping of cp (one code point to one; Unicode 14.0). */
uint32_t unicode_tolower(uint32_t cp);

/* What is left of cp after canonical decomposition (NFD) once the nonspacing
 * marks (Mn) are dropped, into out[3]; returns the count (1-3). 'Ä' -> 'A',
 * 'ệ' -> 'e', a Hangul syllable -> its jamo, most code points -> themselves.
 * (A code point that is itself a mark is returned as is: the caller drops
 * it.) */
int unicode_strip_accents(uint32_t cp, uint32_t out[3]);

#endif
