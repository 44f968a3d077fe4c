/* outetts.c - OuteTTS 1.0 (interface v3) speaker profiles, text
 * normalization, the completion prompt, and the token -> code-frame parser.
 * The format facts are in outetts.h; this is our own implementation. */
#include "audio/tts/outetts.h"

#include "llm/tokenizer.h"
#include "src/core/omni.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define OUTETTS_MAX_WORDS 4096

struct outetts_word {
    char *text;
    double duration_s;
    double energy, spectral_centroid, pitch;
    int n;                 /* frames */
    int32_t *c1, *c2;
};

struct outetts_speaker {
    char *text;
    struct outetts_word *words;
    int n_words;
    int n_frames;
};

// ---- a growing string ----

struct sbuf {
    char *p;
    size_t len, cap;
    bool oom;
};

static void sb_add(struct sbuf *b, const char *s, size_t n)
{
    if (b->oom)
        return;
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n + 1)
            cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p) {
            b->oom = true;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = 0;
}

static void sb_str(struct sbuf *b, const char *s) { sb_add(b, s, strlen(s)); }

static void sb_fmt(struct sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_fmt(struct sbuf *b, const char *fmt, ...)
{
    char tmp[128];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n > 0)
        sb_add(b, tmp, (size_t)n < sizeof tmp ? (size_t)n : sizeof tmp - 1);
}

// ---- UTF-8 ----

/* Next code point of s[*i..len) (advancing *i); -1 on invalid UTF-8. */
static int32_t utf8_next(const char *s, size_t len, size_t *i)
{
    const unsigned char *u = (const unsigned char *)s + *i;
    size_t left = len - *i;
    int32_t c;
    int n;
    if (u[0] < 0x80)
        c = u[0], n = 1;
    else if ((u[0] & 0xE0) == 0xC0)
        c = u[0] & 0x1F, n = 2;
    else if ((u[0] & 0xF0) == 0xE0)
        c = u[0] & 0x0F, n = 3;
    else if ((u[0] & 0xF8) == 0xF0)
        c = u[0] & 0x07, n = 4;
    else
        return -1;
    if ((size_t)n > left)
        return -1;
    for (int k = 1; k < n; k++) {
        if ((u[k] & 0xC0) != 0x80)
            return -1;
        c = (c << 6) | (u[k] & 0x3F);
    }
    if ((n == 2 && c < 0x80) || (n == 3 && c < 0x800) || (n == 4 && c < 0x10000) ||
        c > 0x10FFFF || (c >= 0xD800 && c <= 0xDFFF))
        return -1;
    *i += (size_t)n;
    return c;
}

static void sb_cp(struct sbuf *b, int32_t c)
{
    char o[4];
    size_t n;
    if (c < 0x80)
        o[0] = (char)c, n = 1;
    else if (c < 0x800)
        o[0] = (char)(0xC0 | (c >> 6)), o[1] = (char)(0x80 | (c & 0x3F)), n = 2;
    else if (c < 0x10000)
        o[0] = (char)(0xE0 | (c >> 12)), o[1] = (char)(0x80 | ((c >> 6) & 0x3F)),
        o[2] = (char)(0x80 | (c & 0x3F)), n = 3;
    else
        o[0] = (char)(0xF0 | (c >> 18)), o[1] = (char)(0x80 | ((c >> 12) & 0x3F)),
        o[2] = (char)(0x80 | ((c >> 6) & 0x3F)), o[3] = (char)(0x80 | (c & 0x3F)), n = 4;
    sb_add(b, o, n);
}

/* Python's str.isspace (what \s matches in a str regex) */
static bool is_space(int32_t c)
{
    return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 ||
           c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 ||
           c == 0x202F || c == 0x205F || c == 0x3000;
}

/* Code points of s[len], or NULL on invalid UTF-8; *n gets the count. */
static int32_t *decode_all(const char *s, size_t len, size_t *n)
{
    int32_t *cp = malloc((len + 1) * sizeof *cp);
    size_t i = 0, k = 0;
    while (cp && i < len) {
        int32_t c = utf8_next(s, len, &i);
        if (c < 0) {
            free(cp);
            return NULL;
        }
        cp[k++] = c;
    }
    *n = k;
    return cp;
}

/* Python's str.strip(): [*a, *b) without leading/trailing whitespace */
static void strip_range(const int32_t *cp, size_t *a, size_t *b)
{
    while (*a < *b && is_space(cp[*a]))
        (*a)++;
    while (*b > *a && is_space(cp[*b - 1]))
        (*b)--;
}

char *outetts_normalize(const char *text, size_t len)
{
    size_t n;
    int32_t *cp = decode_all(text, len, &n);
    if (!cp)
        return NULL;
    /* 1. whitespace runs -> one space; "…" -> "..." */
    size_t k = 0;
    int32_t *t = malloc((3 * n + 1) * sizeof *t);
    if (!t) {
        free(cp);
        return NULL;
    }
    for (size_t i = 0; i < n; i++) {
        if (is_space(cp[i])) {
            if (i == 0 || !is_space(cp[i - 1]))
                t[k++] = ' ';
        } else if (cp[i] == 0x2026) {
            t[k++] = '.', t[k++] = '.', t[k++] = '.';
        } else {
            t[k++] = cp[i];
        }
    }
    /* 2. strip */
    size_t a = 0, b = k;
    strip_range(t, &a, &b);
    /* 3. curly quotes and dashes to ASCII; 4. control characters out */
    struct sbuf o = { 0 };
    sb_add(&o, "", 0);
    for (size_t i = a; i < b; i++) {
        int32_t c = t[i];
        if (c == 0x201C || c == 0x201D)
            c = '"';
        else if (c == 0x2018 || c == 0x2019)
            c = '\'';
        else if (c == 0x2013 || c == 0x2014)
            c = '-';
        if (c <= 0x1F || (c >= 0x7F && c <= 0x9F))
            continue;
        sb_cp(&o, c);
    }
    free(cp);
    free(t);
    if (o.oom) {
        free(o.p);
        return NULL;
    }
    return o.p;
}

// ---- speaker profiles ----

void outetts_speaker_free(struct outetts_speaker *s)
{
    if (!s)
        return;
    for (int i = 0; i < s->n_words; i++) {
        free(s->words[i].text);
        free(s->words[i].c1);
        free(s->words[i].c2);
    }
    free(s->words);
    free(s->text);
    free(s);
}

const char *outetts_speaker_text(const struct outetts_speaker *s) { return s->text; }
int outetts_speaker_n_words(const struct outetts_speaker *s) { return s->n_words; }
int outetts_speaker_n_frames(const struct outetts_speaker *s) { return s->n_frames; }

static int read_codes(const cJSON *arr, const char *what, const char *name, int w,
                      int32_t **out, int *n, char *err, size_t errlen)
{
    if (!cJSON_IsArray(arr))
        return omni_fail(err, errlen, OMNI_ERR_FORMAT, "outetts: speaker %s: word %d: '%s' "
                         "missing or not an array", name, w, what);
    int k = cJSON_GetArraySize(arr);
    *out = malloc((size_t)(k ? k : 1) * sizeof **out);
    if (!*out)
        return omni_fail(err, errlen, OMNI_ERR_NOMEM, "outetts: out of memory");
    int i = 0;
    const cJSON *v;
    cJSON_ArrayForEach(v, arr) {
        double d = cJSON_IsNumber(v) ? v->valuedouble : -1;
        if (!(d >= 0 && d < OUTETTS_CODEBOOK_SIZE && d == floor(d)))
            return omni_fail(err, errlen, OMNI_ERR_FORMAT, "outetts: speaker %s: word %d: "
                             "%s[%d] is not a code 0..%d", name, w, what, i,
                             OUTETTS_CODEBOOK_SIZE - 1);
        (*out)[i++] = (int32_t)d;
    }
    *n = k;
    return 0;
}

static double feature(const cJSON *f, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(f, key);
    return cJSON_IsNumber(v) ? v->valuedouble : 0;
}

struct outetts_speaker *outetts_speaker_parse(const char *json, size_t len, const char *name,
                                              char *err, size_t errlen)
{
    if (!name)
        name = "(memory)";
    cJSON *j = cJSON_ParseWithLength(json, len);
    struct outetts_speaker *s = calloc(1, sizeof *s);
    if (!s) {
        omni_fail(err, errlen, OMNI_ERR_NOMEM, "outetts: out of memory");
        goto fail;
    }
    if (!cJSON_IsObject(j)) {
        omni_fail(err, errlen, OMNI_ERR_FORMAT, "outetts: speaker %s: not a JSON object", name);
        goto fail;
    }
    const cJSON *text = cJSON_GetObjectItemCaseSensitive(j, "text");
    const cJSON *words = cJSON_GetObjectItemCaseSensitive(j, "words");
    if (!cJSON_IsString(text)) {
        omni_fail(err, errlen, OMNI_ERR_FORMAT, "outetts: speaker %s: 'text' missing or not a "
                  "string", name);
        goto fail;
    }
    int nw = cJSON_IsArray(words) ? cJSON_GetArraySize(words) : 0;
    if (nw < 1 || nw > OUTETTS_MAX_WORDS) {
        omni_fail(err, errlen, OMNI_ERR_FORMAT, "outetts: speaker %s: 'words' missing or not "
                  "an array of 1..%d words", name, OUTETTS_MAX_WORDS);
        goto fail;
    }
    if (!(s->text = strdup(text->valuestring)) || !(s->words = calloc((size_t)nw, sizeof *s->words))) {
        omni_fail(err, errlen, OMNI_ERR_NOMEM, "outetts: out of memory");
        goto fail;
    }
    const cJSON *w;
    cJSON_ArrayForEach(w, words) {
        int i = s->n_words;
        struct outetts_word *W = &s->words[i];
        s->n_words++;
        const cJSON *wt = cJSON_GetObjectItemCaseSensitive(w, "word");
        const cJSON *du = cJSON_GetObjectItemCaseSensitive(w, "duration");
        if (!cJSON_IsString(wt) || !cJSON_IsNumber(du) || !(du->valuedouble >= 0) ||
            du->valuedouble > 60) {
            omni_fail(err, errlen, OMNI_ERR_FORMAT, "outetts: speaker %s: word %d: 'word' "
                      "(string) or 'duration' (seconds) missing or invalid", name, i);
            goto fail;
        }
        if (!(W->text = strdup(wt->valuestring))) {
            omni_fail(err, errlen, OMNI_ERR_NOMEM, "outetts: out of memory");
            goto fail;
        }
        W->duration_s = du->valuedouble;
        int n1 = 0, n2 = 0;
        if (read_codes(cJSON_GetObjectItemCaseSensitive(w, "c1"), "c1", name, i, &W->c1, &n1, err,
                       errlen) ||
            read_codes(cJSON_GetObjectItemCaseSensitive(w, "c2"), "c2", name, i, &W->c2, &n2, err,
                       errlen))
            goto fail;
        if (n1 != n2) {
            omni_fail(err, errlen, OMNI_ERR_FORMAT, "outetts: speaker %s: word %d: c1 has %d "
                      "codes, c2 %d", name, i, n1, n2);
            goto fail;
        }
        W->n = n1;
        s->n_frames += n1;
        const cJSON *f = cJSON_GetObjectItemCaseSensitive(w, "features");
        W->energy = feature(f, "energy");
        W->spectral_centroid = feature(f, "spectral_centroid");
        W->pitch = feature(f, "pitch");
    }
    cJSON_Delete(j);
    return s;
fail:
    cJSON_Delete(j);
    outetts_speaker_free(s);
    return NULL;
}

struct outetts_speaker *outetts_speaker_load(const char *path, char *err, size_t errlen)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        omni_fail(err, errlen, OMNI_ERR_IO, "outetts: cannot open speaker file %s", path);
        return NULL;
    }
    struct sbuf b = { 0 };
    char tmp[65536];
    size_t n;
    while ((n = fread(tmp, 1, sizeof tmp, f)) > 0 && b.len < (64u << 20))
        sb_add(&b, tmp, n);
    fclose(f);
    if (b.oom || !b.p) {
        free(b.p);
        omni_fail(err, errlen, b.oom ? OMNI_ERR_NOMEM : OMNI_ERR_FORMAT,
                  "outetts: speaker %s: %s", path, b.oom ? "out of memory" : "empty file");
        return NULL;
    }
    struct outetts_speaker *s = outetts_speaker_parse(b.p, b.len, path, err, errlen);
    free(b.p);
    return s;
}

// ---- the prompt ----

/* a feature value as Python's str() of the JSON number would print it */
static void sb_num(struct sbuf *b, double v)
{
    if (v == floor(v) && fabs(v) < 1e15)
        sb_fmt(b, "%lld", (long long)v);
    else
        sb_fmt(b, "%.17g", v);
}

/* A word as the format writes it; start: with its <|word_start|> (the
 * prompt's last one ends in it, so the model's first word comes without). */
static void add_word(struct sbuf *b, const struct outetts_word *w, const char *suffix, bool start)
{
    if (start)
        sb_str(b, "<|word_start|>");
    sb_str(b, w->text);
    sb_str(b, suffix);
    sb_str(b, "<|features|>");
    sb_fmt(b, "<|t_%.2f|>", w->duration_s);
    sb_str(b, "<|energy_");
    sb_num(b, w->energy);
    sb_str(b, "|><|spectral_centroid_");
    sb_num(b, w->spectral_centroid);
    sb_str(b, "|><|pitch_");
    sb_num(b, w->pitch);
    sb_str(b, "|><|code|>");
    for (int i = 0; i < w->n; i++)
        sb_fmt(b, "<|c1_%d|><|c2_%d|>", (int)w->c1[i], (int)w->c2[i]);
    sb_str(b, "<|word_end|>");
}

static bool is_cjk(int32_t c)
{
    return (c >= 0x3040 && c <= 0x309F) || (c >= 0x30A0 && c <= 0x30FF) ||
           (c >= 0x4E00 && c <= 0x9FFF);
}

char *outetts_prompt(const char *text, const struct outetts_speaker *spk, char *err,
                     size_t errlen)
{
    size_t len = strlen(text);
    if (len > OUTETTS_MAX_TEXT_BYTES) {
        omni_fail(err, errlen, OMNI_ERR_LIMIT, "outetts: text of %zu bytes, over %d", len,
                  OUTETTS_MAX_TEXT_BYTES);
        return NULL;
    }
    char *norm = outetts_normalize(text, len);
    if (!norm) {
        omni_fail(err, errlen, OMNI_ERR_ARG, "outetts: text is not valid UTF-8");
        return NULL;
    }
    if (!norm[0]) {
        free(norm);
        omni_fail(err, errlen, OMNI_ERR_ARG, "outetts: empty text");
        return NULL;
    }
    struct sbuf b = { 0 };
    const char *sep = "";   /* what the last speaker word gets */
    sb_str(&b, "<|im_start|>\n<|text_start|>");
    if (spk) {
        size_t n, a = 0, z;
        int32_t *cp = decode_all(spk->text, strlen(spk->text), &n);
        if (!cp) {
            free(norm);
            free(b.p);
            omni_fail(err, errlen, OMNI_ERR_FORMAT, "outetts: speaker text is not valid UTF-8");
            return NULL;
        }
        z = n;
        strip_range(cp, &a, &z);
        bool cjk = false;
        for (size_t i = a; i < z; i++)
            cjk |= is_cjk(cp[i]);
        const char *rs = "";
        if (z > a) {
            int32_t last = cp[z - 1];
            bool ends = cjk ? (last == 0x3002 || last == 0xFF1F || last == 0xFF01 ||
                               last == '?' || last == '!')
                            : (last == '.' || last == '?' || last == '!');
            rs = !ends ? (cjk ? "\xE3\x80\x82" : ". ") : (cjk ? "" : " ");
        }
        for (size_t i = a; i < z; i++)
            sb_cp(&b, cp[i]);
        sb_str(&b, rs);
        sep = !strcmp(rs, ". ") ? "." : !strcmp(rs, " ") ? "" : rs;
        free(cp);
    }
    sb_str(&b, norm);   /* already stripped */
    sb_str(&b, "<|text_end|>\n<|audio_start|>\n");
    if (spk) {
        for (int i = 0; i < spk->n_words; i++) {
            if (i)
                sb_str(&b, "\n");
            add_word(&b, &spk->words[i], i == spk->n_words - 1 ? sep : "", true);
        }
        sb_str(&b, "\n<|word_start|>");
    }
    free(norm);
    if (b.oom) {
        free(b.p);
        omni_fail(err, errlen, OMNI_ERR_NOMEM, "outetts: out of memory");
        return NULL;
    }
    return b.p;
}

char *outetts_script(const char *text, bool after_word_start, uint64_t seed, int *n_words,
                     int *n_frames, char *err, size_t errlen)
{
    char *norm = outetts_normalize(text, strlen(text));
    if (!norm || !norm[0]) {
        free(norm);
        omni_fail(err, errlen, OMNI_ERR_ARG, "outetts: no words to script");
        return NULL;
    }
    struct sbuf b = { 0 };
    int32_t codes[2 * OUTETTS_MAX_WORD_FRAMES];
    int words = 0, frames = 0;
    uint64_t rs = seed;
    char *save = NULL;
    for (char *w = strtok_r(norm, " ", &save); w; w = strtok_r(NULL, " ", &save)) {
        size_t chars = strlen(w);
        double dur = 0.12 + 0.06 * (double)chars;   /* ~2.5 words a second of speech */
        int n = (int)lround(dur * OUTETTS_FRAME_RATE_HZ);
        n = n < 1 ? 1 : n > OUTETTS_MAX_WORD_FRAMES - 1 ? OUTETTS_MAX_WORD_FRAMES - 1 : n;
        for (int i = 0; i < 2 * n; i++)
            codes[i] = (int32_t)(omni_splitmix64(&rs) % OUTETTS_CODEBOOK_SIZE);
        struct outetts_word ow = { .text = w, .duration_s = n / (double)OUTETTS_FRAME_RATE_HZ,
                                   .energy = 50, .spectral_centroid = 50, .pitch = 50,
                                   .n = n, .c1 = codes, .c2 = codes + n };
        if (words)
            sb_str(&b, "\n");
        add_word(&b, &ow, "", words > 0 || !after_word_start);
        words++;
        frames += n;
    }
    sb_str(&b, "\n<|audio_end|>");
    free(norm);
    if (b.oom) {
        free(b.p);
        omni_fail(err, errlen, OMNI_ERR_NOMEM, "outetts: out of memory");
        return NULL;
    }
    if (n_words)
        *n_words = words;
    if (n_frames)
        *n_frames = frames;
    return b.p;
}

// ---- vocabulary and parser ----

struct outetts_vocab {
    int32_t lo, hi;        /* id range of the code tokens */
    int16_t *code;         /* [hi - lo + 1]: code, +OUTETTS_CODEBOOK_SIZE for c2, -1 none */
    int32_t word_end, audio_end, im_end;
};

void outetts_vocab_free(struct outetts_vocab *v)
{
    if (v)
        free(v->code);
    free(v);
}

static int32_t find_tok(const struct tokenizer *tok, const char *s, char *err, size_t errlen)
{
    int32_t id = tokenizer_find(tok, s, strlen(s));
    if (id < 0)
        omni_fail(err, errlen, OMNI_ERR_FORMAT, "outetts: the vocabulary has no '%s' token "
                  "(not an OuteTTS 1.0 model)", s);
    return id;
}

struct outetts_vocab *outetts_vocab_new(const struct tokenizer *tok, char *err, size_t errlen)
{
    struct outetts_vocab *v = calloc(1, sizeof *v);
    int32_t *ids = malloc(2 * OUTETTS_CODEBOOK_SIZE * sizeof *ids);
    if (!v || !ids) {
        omni_fail(err, errlen, OMNI_ERR_NOMEM, "outetts: out of memory");
        goto fail;
    }
    if ((v->word_end = find_tok(tok, "<|word_end|>", err, errlen)) < 0 ||
        (v->audio_end = find_tok(tok, "<|audio_end|>", err, errlen)) < 0 ||
        (v->im_end = find_tok(tok, "<|im_end|>", err, errlen)) < 0 ||
        find_tok(tok, "<|word_start|>", err, errlen) < 0 ||
        find_tok(tok, "<|code|>", err, errlen) < 0)
        goto fail;
    v->lo = INT32_MAX;
    v->hi = -1;
    for (int b = 0; b < 2; b++)
        for (int c = 0; c < OUTETTS_CODEBOOK_SIZE; c++) {
            char s[32];
            snprintf(s, sizeof s, "<|c%d_%d|>", b + 1, c);
            int32_t id = find_tok(tok, s, err, errlen);
            if (id < 0)
                goto fail;
            ids[b * OUTETTS_CODEBOOK_SIZE + c] = id;
            v->lo = id < v->lo ? id : v->lo;
            v->hi = id > v->hi ? id : v->hi;
        }
    v->code = malloc((size_t)(v->hi - v->lo + 1) * sizeof *v->code);
    if (!v->code) {
        omni_fail(err, errlen, OMNI_ERR_NOMEM, "outetts: out of memory");
        goto fail;
    }
    for (int32_t i = 0; i <= v->hi - v->lo; i++)
        v->code[i] = -1;
    for (int i = 0; i < 2 * OUTETTS_CODEBOOK_SIZE; i++)
        v->code[ids[i] - v->lo] = (int16_t)i;
    free(ids);
    return v;
fail:
    free(ids);
    outetts_vocab_free(v);
    return NULL;
}

int outetts_vocab_stop_tokens(const struct outetts_vocab *v, int32_t out[2])
{
    out[0] = v->audio_end;
    out[1] = v->im_end;
    return 2;
}

void outetts_parser_init(struct outetts_parser *p)
{
    memset(p, 0, sizeof *p);
    p->pending_c1 = -1;
}

enum outetts_event outetts_parser_push(struct outetts_parser *p, const struct outetts_vocab *v,
                                       int32_t id)
{
    if (id == v->audio_end || id == v->im_end) {
        p->pending_c1 = -1;
        return OUTETTS_AUDIO_END;
    }
    if (id == v->word_end) {
        p->pending_c1 = -1;
        p->words++;
        return OUTETTS_WORD_END;
    }
    if (id < v->lo || id > v->hi || v->code[id - v->lo] < 0)
        return OUTETTS_NONE;
    int c = v->code[id - v->lo];
    if (c < OUTETTS_CODEBOOK_SIZE) {          /* c1: starts a pair (drops a lone one) */
        p->pending_c1 = c;
        return OUTETTS_NONE;
    }
    if (p->pending_c1 < 0)                    /* c2 without its c1 */
        return OUTETTS_NONE;
    p->frames[p->n_frames][0] = p->pending_c1;
    p->frames[p->n_frames][1] = c - OUTETTS_CODEBOOK_SIZE;
    p->n_frames++;
    p->total_frames++;
    p->pending_c1 = -1;
    return p->n_frames == OUTETTS_MAX_WORD_FRAMES ? OUTETTS_WORD_END : OUTETTS_FRAME;
}
