/* unicode.c - strict UTF-8 decoding and the GPT-2 byte <-> code point mapping.
 *
 * The decoder follows the Unicode "maximal subpart" rule for bad input so that
 * streaming detokenization replaces each broken sequence with exactly one
 * U+FFFD, as browsers and Python do. */
#include "unicode.h"

int unicode_utf8_decode(const char *s, size_t len, uint32_t *cp)
{
    const uint8_t *p = (const uint8_t *)s;
    if (len == 0)
        return 0;
    uint8_t b0 = p[0];
    if (b0 < 0x80) {
        *cp = b0;
        return 1;
    }
    int need;
    uint32_t v;
    /* Valid range of the second byte per lead byte (RFC 3629 table): this is
     * what rules out overlongs, surrogates and values past U+10FFFF. */
    uint8_t lo = 0x80, hi = 0xBF;
    if (b0 >= 0xC2 && b0 <= 0xDF) {
        need = 1;
        v = b0 & 0x1F;
    } else if (b0 >= 0xE0 && b0 <= 0xEF) {
        need = 2;
        v = b0 & 0x0F;
        if (b0 == 0xE0) lo = 0xA0;
        if (b0 == 0xED) hi = 0x9F;
    } else if (b0 >= 0xF0 && b0 <= 0xF4) {
        need = 3;
        v = b0 & 0x07;
        if (b0 == 0xF0) lo = 0x90;
        if (b0 == 0xF4) hi = 0x8F;
    } else {
        return -1;
    }
    for (int i = 1; i <= need; i++) {
        if ((size_t)i >= len)
            return 0;
        uint8_t b = p[i];
        if (i == 1 ? (b < lo || b > hi) : (b < 0x80 || b > 0xBF))
            return -i;
        v = (v << 6) | (b & 0x3F);
    }
    *cp = v;
    return need + 1;
}

bool unicode_utf8_valid(const char *s, size_t len)
{
    size_t i = 0;
    while (i < len) {
        /* ASCII fast path: most text is plain ASCII. */
        if ((uint8_t)s[i] < 0x80) {
            i++;
            continue;
        }
        uint32_t cp;
        int n = unicode_utf8_decode(s + i, len - i, &cp);
        if (n <= 0)
            return false;
        i += (size_t)n;
    }
    return true;
}

int unicode_utf8_encode(uint32_t cp, char out[4])
{
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (char)(0xC0 | (cp >> 6));
        out[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp >= 0xD800 && cp <= 0xDFFF)
        return 0;
    if (cp < 0x10000) {
        out[0] = (char)(0xE0 | (cp >> 12));
        out[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    if (cp <= 0x10FFFF) {
        out[0] = (char)(0xF0 | (cp >> 18));
        out[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
        out[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
        out[3] = (char)(0x80 | (cp & 0x3F));
        return 4;
    }
    return 0;
}

/* Bytes that GPT-2 keeps as their own Latin-1 code point. */
static bool unicode_byte_is_printable(unsigned b)
{
    return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
}

uint32_t unicode_byte_to_cp(uint8_t b)
{
    if (unicode_byte_is_printable(b))
        return b;
    /* The n-th non-printable byte (in byte order) maps to U+0100 + n. The
     * non-printable bytes are 0x00-0x20 (33), 0x7F-0xA0 (34) and 0xAD. */
    if (b <= 0x20)
        return 0x100 + b;
    if (b >= 0x7F && b <= 0xA0)
        return 0x100 + 33 + (b - 0x7F);
    return 0x100 + 33 + 34; /* 0xAD */
}

int unicode_cp_to_byte(uint32_t cp)
{
    if (cp < 0x100)
        return unicode_byte_is_printable(cp) ? (int)cp : -1;
    if (cp < 0x100 + 33)
        return (int)(cp - 0x100);
    if (cp < 0x100 + 33 + 34)
        return (int)(cp - 0x100 - 33 + 0x7F);
    if (cp == 0x100 + 33 + 34)
        return 0xAD;
    return -1;
}
