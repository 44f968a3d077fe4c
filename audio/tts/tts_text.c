/* tts_text.c - cuts streaming text into sentences for speech synthesis.
 *
 * A sentence is spoken as soon as it is complete, so the cut must be made
 * from the text seen so far: where the decision depends on what follows a
 * full stop (the next word's case), the splitter waits for it. The rules
 * favour not cutting: a missed cut delays audio a little, a wrong cut makes
 * the voice pause in the middle of "Dr. Smith" or "3.14". */
#include "audio/tts/tts.h"

#include "src/core/omni.h"

#include <ctype.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

struct tts_splitter {
    char *buf;
    size_t start, len, cap;     /* unconsumed text is buf[start, len) */
    size_t max_chars;
};

struct tts_splitter *tts_splitter_new(size_t max_chars)
{
    struct tts_splitter *sp = calloc(1, sizeof *sp);
    if (sp)
        sp->max_chars = max_chars ? max_chars : 300;
    return sp;
}

void tts_splitter_free(struct tts_splitter *sp)
{
    if (!sp)
        return;
    free(sp->buf);
    free(sp);
}

int tts_splitter_push(struct tts_splitter *sp, const char *text, size_t len)
{
    if (sp->start > 0 && sp->start == sp->len)
        sp->start = sp->len = 0;
    if (sp->start > 4096 && sp->start >= sp->len / 2) {   /* drop what was consumed */
        memmove(sp->buf, sp->buf + sp->start, sp->len - sp->start);
        sp->len -= sp->start;
        sp->start = 0;
    }
    size_t need;
    if (omni_add_size(sp->len, len, &need) || omni_add_size(need, 1, &need))
        return OMNI_ERR_NOMEM;
    if (need > sp->cap) {
        size_t cap = sp->cap ? sp->cap : 256;
        while (cap < need)
            cap *= 2;
        char *nb = realloc(sp->buf, cap);
        if (!nb)
            return OMNI_ERR_NOMEM;
        sp->buf = nb;
        sp->cap = cap;
    }
    memcpy(sp->buf + sp->len, text, len);
    sp->len += len;
    sp->buf[sp->len] = 0;
    return 0;
}

// ---- the rules --------------------------------------------------------------

/* Words that a full stop follows without ending the sentence. Compared
 * case-insensitively with the letters before the '.'. */
static const char *const tts_abbrevs[] = {
    "mr", "mrs", "ms", "dr", "prof", "sr", "jr", "st", "vs", "cf", "fig", "figs", "no", "nos",
    "vol", "vols", "approx", "inc", "ltd", "co", "corp", "mt", "ft", "dept", "est", "gen",
    "gov", "lt", "col", "sgt", "capt", "rev", "hon", "op", "pp", "ed", "eds", "al", "jan",
    "feb", "mar", "apr", "jun", "jul", "aug", "sep", "sept", "oct", "nov", "dec", "mon",
    "tue", "wed", "thu", "fri", "sat", "sun", "ca", "viz", "resp", "ref", "refs", "eq",
    "sec", "ch", "art",
};

static bool tts_is_space(unsigned char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

/* Closing marks that stay with the sentence they close: quotes, brackets and
 * their UTF-8 forms (” ’ »). Returns the byte length at p, 0 if none. */
static size_t tts_closer_len(const char *p, size_t avail)
{
    unsigned char c = (unsigned char)p[0];
    if (c == '"' || c == '\'' || c == ')' || c == ']' || c == '}' || c == '*' || c == '_')
        return 1;
    if (avail >= 3 && c == 0xE2 && (unsigned char)p[1] == 0x80 &&
        ((unsigned char)p[2] == 0x9D || (unsigned char)p[2] == 0x99))
        return 3;
    if (avail >= 2 && c == 0xC2 && (unsigned char)p[1] == 0xBB)
        return 2;
    return 0;
}

/* Sentence-ending marks: . ! ? and … (ASCII-space-separated), and the
 * full-width 。！？ which need no space after them. Returns the byte length,
 * 0 if none; *fullwidth tells which kind. */
static size_t tts_end_len(const char *p, size_t avail, bool *fullwidth)
{
    unsigned char c = (unsigned char)p[0];
    *fullwidth = false;
    if (c == '.' || c == '!' || c == '?')
        return 1;
    if (avail >= 3 && c == 0xE2 && (unsigned char)p[1] == 0x80 && (unsigned char)p[2] == 0xA6)
        return 3;                                            /* … */
    if (avail >= 3 && c == 0xE3 && (unsigned char)p[1] == 0x80 && (unsigned char)p[2] == 0x82) {
        *fullwidth = true;                                   /* 。 */
        return 3;
    }
    if (avail >= 3 && c == 0xEF && (unsigned char)p[1] == 0xBC &&
        ((unsigned char)p[2] == 0x81 || (unsigned char)p[2] == 0x9F)) {
        *fullwidth = true;                                   /* ！ ？ */
        return 3;
    }
    return 0;
}

/* Does the '.' at dot end an abbreviation, an initial or a list number? */
static bool tts_dot_continues(const char *b, size_t from, size_t dot)
{
    size_t w = dot;
    while (w > from && !tts_is_space((unsigned char)b[w - 1]) && b[w - 1] != '(' &&
           b[w - 1] != '"')
        w--;
    size_t wl = dot - w;
    if (wl == 0)
        return false;
    if (wl == 1 && isupper((unsigned char)b[w]))
        return true;                                         /* an initial: "J. Smith" */
    if (memchr(b + w, '.', wl)) {                            /* "e.g.", "U.S.", "Ph.D." */
        size_t seg = 0;
        bool dotted = true;
        for (size_t i = w; i < dot && dotted; i++) {
            seg = b[i] == '.' ? 0 : seg + 1;
            dotted = (b[i] == '.' || isalpha((unsigned char)b[i])) && seg <= 3;
        }
        if (dotted)
            return true;
    }
    bool digits = true;
    for (size_t i = w; i < dot; i++)
        digits &= isdigit((unsigned char)b[i]) != 0;
    if (digits && wl <= 3) {                                 /* "1. Open the file" at a line start */
        size_t q = w;
        while (q > from && (b[q - 1] == ' ' || b[q - 1] == '\t'))
            q--;
        if (q == from || b[q - 1] == '\n')
            return true;
    }
    for (size_t i = 0; i < sizeof tts_abbrevs / sizeof tts_abbrevs[0]; i++)
        if (strlen(tts_abbrevs[i]) == wl && !strncasecmp(b + w, tts_abbrevs[i], wl))
            return true;
    return false;
}

/* Does the text at k (after the white space that followed an end mark) start
 * a new sentence? Lower case, a comma or a closing mark continue the old one. */
static bool tts_starts_sentence(const char *b, size_t k)
{
    unsigned char c = (unsigned char)b[k];
    if (islower(c) || c == ',' || c == ';' || c == ':' || c == ')')
        return false;
    return true;
}

/* Where the current sentence ends (exclusive), or 0 when it is not complete
 * yet. *resume gets where the next one starts. */
static size_t tts_find_end(const struct tts_splitter *sp, bool final, size_t *resume)
{
    const char *b = sp->buf;
    size_t from = sp->start, len = sp->len;
    bool fence = false, tick = false;
    size_t last_soft = 0;                                    /* after a comma/semicolon/space */
    for (size_t i = from; i < len; i++) {
        if (i - from >= sp->max_chars) {                     /* too long: cut somewhere sensible */
            size_t cut = last_soft > from ? last_soft : i;
            *resume = cut;
            return cut;
        }
        unsigned char c = (unsigned char)b[i];
        if (c == '`') {
            if (i + 2 < len && b[i + 1] == '`' && b[i + 2] == '`') {
                fence = !fence;
                i += 2;
            } else if (!fence) {
                tick = !tick;
            }
            continue;
        }
        if (c == ',' || c == ';' || c == ' ')
            last_soft = i + 1;
        if (c == '\n') {                                     /* a blank line ends a paragraph */
            size_t k = i + 1;
            while (k < len && (b[k] == ' ' || b[k] == '\t' || b[k] == '\r'))
                k++;
            if (k < len && b[k] == '\n' && !fence) {
                *resume = k + 1;
                return i;
            }
            continue;
        }
        if (fence || tick)
            continue;
        bool fullwidth;
        size_t el = tts_end_len(b + i, len - i, &fullwidth);
        if (!el)
            continue;
        size_t j = i + el;
        for (;;) {                                           /* "?!", "...", closing quotes */
            bool fw;
            size_t n = j < len ? tts_end_len(b + j, len - j, &fw) : 0;
            if (!n)
                n = j < len ? tts_closer_len(b + j, len - j) : 0;
            if (!n)
                break;
            j += n;
        }
        if (fullwidth) {
            *resume = j;
            return j;
        }
        if (j >= len) {                                      /* what follows is not here yet */
            if (!final)
                return 0;
            *resume = j;
            return j;
        }
        if (!tts_is_space((unsigned char)b[j])) {            /* "3.14", "a.b/c", "end.)x" */
            i = j - 1;
            continue;
        }
        if (b[i] == '.' && el == 1 && j == i + 1 && tts_dot_continues(b, from, i))
            continue;
        size_t k = j;
        while (k < len && tts_is_space((unsigned char)b[k]))
            k++;
        if (k >= len) {
            if (!final)
                return 0;
            *resume = k;
            return j;
        }
        if (!tts_starts_sentence(b, k))
            continue;
        *resume = k;
        return j;
    }
    if (final && len > from) {
        *resume = len;
        return len;
    }
    return 0;
}

char *tts_splitter_next(struct tts_splitter *sp, bool final)
{
    while (sp->start < sp->len) {
        size_t resume = 0, end = tts_find_end(sp, final, &resume);
        if (!end)
            return NULL;
        size_t a = sp->start, z = end;
        while (a < z && tts_is_space((unsigned char)sp->buf[a]))
            a++;
        while (z > a && tts_is_space((unsigned char)sp->buf[z - 1]))
            z--;
        sp->start = resume > sp->start ? resume : end;
        if (z > a)
            return strndup(sp->buf + a, z - a);
    }
    return NULL;
}
