/* tokenizer.c - text <-> token ids for the vocabularies GGUF files carry:
 * SentencePiece-style BPE driven by scores ("llama"), byte-level BPE driven by
 * merge ranks ("gpt2", pre-split by the PCRE2 regexes of tokenizer.ggml.pre)
 * and WordPiece ("bert"). The behaviour mirrors the Hugging Face tokenizers
 * these vocabularies come from, as llama.cpp reproduces them. */
#include "tokenizer.h"

#include "llm/unicode.h"
#include "src/core/gguf.h"
#include "src/core/omni.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <ctype.h>
#include <strings.h>
#include <stdlib.h>
#include <string.h>

#define TOK_MAX_REGEX 6
#define TOK_MAX_EOG 16

/* Flags beside the token type. */
enum { TOK_F_RSTRIP = 1 << 0 };

struct tok_entry {
    uint32_t off;  /* text at tok->blob + off, NUL-terminated */
    uint32_t len;
    float score;   /* SentencePiece merge priority (higher merges first) */
    int8_t type;   /* enum tok_attr; 0 ("undefined" in the file) acts as normal */
    uint8_t flags; /* TOK_F_* */
};

/* One BPE merge "A B": ranks and the id of "AB", keyed by (id A, id B). */
struct tok_merge {
    uint64_t key; /* TOK_MERGE_EMPTY when the slot is free */
    int32_t rank;
    int32_t result;
};
#define TOK_MERGE_EMPTY UINT64_MAX

struct tokenizer {
    enum tok_kind kind;
    int32_t n_vocab;
    struct tok_entry *tokens; /* [n_vocab] */
    char *blob;               /* all token texts */
    size_t max_len;           /* longest token text in bytes */

    int32_t *vocab_ix; /* open addressing, text -> id, -1 = free */
    size_t vocab_mask;

    /* Special tokens split out of the text before tokenization. */
    int32_t *spec_ix; /* open addressing, text -> id, -1 = free */
    size_t spec_mask;
    uint8_t spec_first[256]; /* bit 0: some always-split token starts with this byte; bit 1: some parse_special one */
    int32_t *spec_lens;      /* distinct lengths, longest first */
    int n_spec_lens;

    int32_t bos, eos, unk, sep, eot, eom;
    bool add_bos, add_eos, add_space_prefix;
    int32_t eog[TOK_MAX_EOG];
    int n_eog;

    int32_t byte_ids[256]; /* token of each raw byte: "<0xXX>" (SPM) or the GPT-2 char (BPE) */

    /* BPE: merges and the pre-tokenizer regexes (for WordPiece re[0] is
     * the character-class regex) */
    struct tok_merge *merges;
    size_t merge_mask;
    pcre2_code *re[TOK_MAX_REGEX];
    int n_re;
    bool ignore_merges; /* a whole pre-token found in the vocabulary is used as is */

    /* WordPiece */
    bool wpm_lower, wpm_strip_accents;
};

// ---- hashing -----------------------------------------------------------

static uint64_t tok_hash(const char *s, size_t n)
{
    uint64_t h = 0xcbf29ce484222325ull; /* FNV-1a */
    for (size_t i = 0; i < n; i++) {
        h ^= (uint8_t)s[i];
        h *= 0x100000001b3ull;
    }
    return h ^ (h >> 29);
}

static size_t tok_table_size(size_t n)
{
    size_t sz = 16;
    while (sz < n + n / 2 + 1)
        sz <<= 1;
    return sz;
}

static int32_t tok_ix_find(const struct tokenizer *tok, const int32_t *ix, size_t mask,
                           const char *s, size_t n)
{
    if (!ix)
        return -1;
    for (size_t i = tok_hash(s, n) & mask;; i = (i + 1) & mask) {
        int32_t id = ix[i];
        if (id < 0)
            return -1;
        const struct tok_entry *e = &tok->tokens[id];
        if (e->len == n && memcmp(tok->blob + e->off, s, n) == 0)
            return id;
    }
}

/* Insert id; a later token with the same text replaces the earlier one
 * (llama.cpp's text -> id map behaves the same way). */
static void tok_ix_put(const struct tokenizer *tok, int32_t *ix, size_t mask, int32_t id)
{
    const struct tok_entry *e = &tok->tokens[id];
    const char *s = tok->blob + e->off;
    for (size_t i = tok_hash(s, e->len) & mask;; i = (i + 1) & mask) {
        int32_t o = ix[i];
        if (o < 0 || (tok->tokens[o].len == e->len && memcmp(tok->blob + tok->tokens[o].off, s, e->len) == 0)) {
            ix[i] = id;
            return;
        }
    }
}

static uint64_t tok_merge_hash(uint64_t key)
{
    key ^= key >> 33;
    key *= 0xff51afd7ed558ccdull;
    key ^= key >> 33;
    return key;
}

static const struct tok_merge *tok_merge_find(const struct tokenizer *tok, int32_t a, int32_t b)
{
    uint64_t key = (uint64_t)(uint32_t)a << 32 | (uint32_t)b;
    for (size_t i = tok_merge_hash(key) & tok->merge_mask;; i = (i + 1) & tok->merge_mask) {
        const struct tok_merge *m = &tok->merges[i];
        if (m->key == key)
            return m;
        if (m->key == TOK_MERGE_EMPTY)
            return NULL;
    }
}

static const char *tok_text(const struct tokenizer *tok, int32_t id)
{
    return tok->blob + tok->tokens[id].off;
}

/* Token types that text may turn into through merges or a vocabulary match.
 * Control, byte and unused pieces never come from plain text (SentencePiece
 * and HF keep them out of the merge vocabulary), so literal "<s>" or
 * "<0x41>" in a prompt stays text. */
static bool tok_is_textual(const struct tokenizer *tok, int32_t id)
{
    int t = tok->tokens[id].type;
    return t == 0 || t == TOK_TYPE_NORMAL || t == TOK_TYPE_USER_DEFINED;
}

// ---- pre-tokenizer table (tokenizer.ggml.pre) ----------------------------

/* The splitting regexes are those of each model's tokenizer.json (the Split /
 * ByteLevel pre-tokenizers); when several are listed each one splits the
 * pieces the previous produced, keeping both matches and the text between
 * them. PCRE2 runs them natively, lookahead and (?i:) included. */
#define TOK_RE_GPT2 "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+"
#define TOK_RE_LLAMA3                                                                         \
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*" \
    "|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
#define TOK_RE_QWEN2                                                                      \
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*" \
    "|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
#define TOK_RE_CJK "[\\x{4E00}-\\x{9FA5}\\x{800}-\\x{4E00}\\x{AC00}-\\x{D7FF}]+"

struct tok_pre {
    const char *names[12];
    const char *regex[TOK_MAX_REGEX];
    bool ignore_merges;
    bool add_bos; /* BOS by default even though the key is absent (Llama 3) */
};

static const struct tok_pre tok_pres[] = {
    { { "llama-bpe", "llama3", "llama-v3", "falcon3", "pixtral", "dbrx", "smaug-bpe" },
      { TOK_RE_LLAMA3 }, true, true },
    { { "qwen2", "deepseek-r1-qwen", "stablelm2" }, { TOK_RE_QWEN2 }, false, false },
    { { "qwen35" },
      { "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}| ?[^\\s\\p{L}\\p{M}\\p{N}]+[\\r\\n]*"
        "|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+" },
      false, false },
    /* o200k (gpt-oss, Phi-4-mini, Llama 4): letters split at case changes,
     * contractions kept on their word, digits in threes (the tokenizer.json
     * regex; PCRE2 reads its \p{Lu} classes as they are) */
    { { "gpt-4o", "llama4" },
      { "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
        "|[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
        "|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+" },
      false, false },
    { { "gpt-2", "phi-2", "mpt", "olmo", "jina-es", "jina-de", "jina-v2-es", "jina-v2-de", "exaone4" },
      { TOK_RE_GPT2 }, false, false },
    { { "smollm", "starcoder", "refact", "command-r", "codeshell", "exaone", "minerva" },
      { "\\p{N}", TOK_RE_GPT2 }, false, false },
    /* The character classes of the DeepSeek tokenizer.json files, as code
     * points (the literal characters would not survive Unicode
     * normalization of this source file). */
    { { "deepseek-llm" },
      { "[\r\n]",
        "\\s?[A-Za-z\\x{B5}\\x{C0}-\\x{D6}\\x{D8}-\\x{F6}\\x{F8}-\\x{1BA}\\x{1BC}-\\x{1BF}\\x{1C4}-\\x{293}"
        "\\x{295}-\\x{2AF}\\x{370}-\\x{373}\\x{376}\\x{377}\\x{37B}-\\x{37D}\\x{37F}\\x{386}\\x{388}-\\x{38A}"
        "\\x{38C}\\x{38E}-\\x{3A1}\\x{3A3}-\\x{3F5}\\x{3F7}-\\x{481}\\x{48A}-\\x{52F}\\x{531}-\\x{556}"
        "\\x{10A0}-\\x{10C5}\\x{13A0}-\\x{13F5}\\x{13F8}-\\x{13FD}\\x{1C90}-\\x{1CBA}\\x{1CBD}-\\x{1CBF}"
        "\\x{1D00}-\\x{1D2B}\\x{1D6B}-\\x{1D77}\\x{1D79}-\\x{1D9A}\\x{1E00}-\\x{1F15}\\x{1F18}-\\x{1F1D}"
        "\\x{1F20}-\\x{1F45}\\x{1F48}-\\x{1F4D}\\x{1F50}-\\x{1F57}\\x{1F59}\\x{1F5B}\\x{1F5D}\\x{1F5F}-\\x{1F7D}"
        "\\x{1F80}-\\x{1FB4}\\x{1FB6}-\\x{1FBC}\\x{1FBE}\\x{1FC2}-\\x{1FC4}\\x{1FC6}-\\x{1FCC}\\x{1FD0}-\\x{1FD3}"
        "\\x{1FD6}-\\x{1FDB}\\x{1FE0}-\\x{1FEC}\\x{1FF2}-\\x{1FF4}\\x{1FF6}-\\x{1FFC}\\x{2102}\\x{2107}"
        "\\x{210A}-\\x{2113}\\x{2115}\\x{2119}-\\x{211D}\\x{2124}\\x{2126}\\x{2128}\\x{212A}-\\x{212D}"
        "\\x{212F}-\\x{2134}\\x{2139}\\x{213C}-\\x{213F}\\x{2145}-\\x{2149}\\x{214E}\\x{2183}\\x{2184}"
        "\\x{2C00}-\\x{2C7B}\\x{2C7E}-\\x{2CE4}\\x{2CEB}-\\x{2CEE}\\x{2CF2}\\x{2CF3}\\x{A640}-\\x{A66D}"
        "\\x{A680}-\\x{A69B}\\x{A722}-\\x{A76F}\\x{A771}-\\x{A787}\\x{A78B}-\\x{A78E}\\x{AB70}-\\x{ABBF}"
        "\\x{FB00}-\\x{FB06}\\x{FB13}-\\x{FB17}\\x{FF21}-\\x{FF3A}\\x{FF41}-\\x{FF5A}\\x{10400}-\\x{1044F}"
        "\\x{104B0}-\\x{104D3}\\x{104D8}-\\x{104FB}\\x{10C80}-\\x{10CB2}\\x{10CC0}-\\x{10CF2}"
        "\\x{118A0}-\\x{118DF}\\x{1E900}-\\x{1E943}]+",
        "\\s?[!-/:-~\\x{FF01}-\\x{FF0F}\\x{FF1A}-\\x{FF5E}\\x{2018}-\\x{201F}\\x{3000}-\\x{3002}]+",
        "\\s+$", TOK_RE_CJK, "\\p{N}+" },
      false, false },
    { { "deepseek-coder" },
      { "[\r\n]", "\\s?\\p{L}+", "\\s?\\p{P}+", TOK_RE_CJK, "\\p{N}" }, false, false },
    { { "tekken" },
      { "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+"
        "|[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*"
        "|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+" },
      true, true },
    /* Files converted without a known pre-tokenizer. */
    { { "default" },
      { "[\\p{P}\\$\\+<=>\\^~\\|]+", "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)",
        "\\p{N}+", "[0-9][0-9][0-9]" },
      false, false },
};

static const struct tok_pre *tok_pre_find(const char *name, size_t len)
{
    for (size_t i = 0; i < sizeof tok_pres / sizeof tok_pres[0]; i++)
        for (int j = 0; j < 12 && tok_pres[i].names[j]; j++)
            if (strlen(tok_pres[i].names[j]) == len && memcmp(tok_pres[i].names[j], name, len) == 0)
                return &tok_pres[i];
    return NULL;
}

// ---- construction ----------------------------------------------------------

void tokenizer_free(struct tokenizer *tok)
{
    if (!tok)
        return;
    for (int i = 0; i < tok->n_re; i++)
        pcre2_code_free(tok->re[i]);
    free(tok->merges);
    free(tok->spec_ix);
    free(tok->spec_lens);
    free(tok->vocab_ix);
    free(tok->blob);
    free(tok->tokens);
    free(tok);
}

/* A special token id key: absent leaves *id as is; -1 stored as a signed value
 * means "none"; anything else must name a token. */
static int tok_read_id(struct tokenizer *tok, const struct gguf *g, const char *key, int32_t *id,
                       char *err, size_t errlen)
{
    int64_t v;
    int rc = gguf_get_i64(g, key, &v);
    if (rc == OMNI_ERR_NOTFOUND)
        return 0;
    if (rc < 0)
        return omni_fail(err, errlen, OMNI_ERR_FORMAT, "tokenizer: %s is not an integer", key);
    if (v == -1) {
        *id = -1;
        return 0;
    }
    if (v < 0 || v >= tok->n_vocab)
        return omni_fail(err, errlen, OMNI_ERR_FORMAT, "tokenizer: %s = %lld is out of range (%d tokens)",
                         key, (long long)v, tok->n_vocab);
    *id = (int32_t)v;
    return 0;
}

static int tok_read_bool(const struct gguf *g, const char *key, bool *out, char *err, size_t errlen)
{
    int rc = gguf_get_bool(g, key, out);
    if (rc == OMNI_ERR_NOTFOUND || rc == 0)
        return 0;
    return omni_fail(err, errlen, OMNI_ERR_FORMAT, "tokenizer: %s is not a bool", key);
}

/* A numeric per-token array must have exactly one entry per token. */
static const void *tok_read_arr(const struct gguf *g, const char *key, enum gguf_type want,
                                enum gguf_type alt, int32_t n_vocab, enum gguf_type *got,
                                int *rc, char *err, size_t errlen)
{
    enum gguf_type et;
    uint64_t count;
    *rc = 0;
    if (gguf_find_key(g, key) < 0)
        return NULL;
    if (gguf_get_arr(g, key, &et, &count) < 0 || (et != want && et != alt)) {
        *rc = omni_fail(err, errlen, OMNI_ERR_FORMAT, "tokenizer: %s is not an array of %s", key,
                        gguf_type_name(want));
        return NULL;
    }
    if (count != (uint64_t)n_vocab) {
        *rc = omni_fail(err, errlen, OMNI_ERR_FORMAT, "tokenizer: %s has %llu entries for %d tokens", key,
                        (unsigned long long)count, n_vocab);
        return NULL;
    }
    *got = et;
    return gguf_get_arr_data(g, key);
}

static int tok_load_vocab(struct tokenizer *tok, const struct gguf *g, char *err, size_t errlen)
{
    const char *key = "tokenizer.ggml.tokens";
    enum gguf_type et;
    uint64_t n;
    if (gguf_find_key(g, key) < 0)
        return omni_fail(err, errlen, OMNI_ERR_FORMAT, "tokenizer: missing key %s", key);
    if (gguf_get_arr(g, key, &et, &n) < 0 || et != GGUF_TYPE_STRING)
        return omni_fail(err, errlen, OMNI_ERR_FORMAT, "tokenizer: %s is not an array of strings", key);
    if (n == 0 || n > INT32_MAX / 4)
        return omni_fail(err, errlen, OMNI_ERR_FORMAT, "tokenizer: %s has %llu tokens", key,
                         (unsigned long long)n);
    tok->n_vocab = (int32_t)n;

    int rc;
    enum gguf_type st = GGUF_TYPE_FLOAT32, tt = GGUF_TYPE_INT32;
    const uint8_t *scores = tok_read_arr(g, "tokenizer.ggml.scores", GGUF_TYPE_FLOAT32, GGUF_TYPE_INT32,
                                         tok->n_vocab, &st, &rc, err, errlen);
    if (rc < 0)
        return rc;
    const uint8_t *types = tok_read_arr(g, "tokenizer.ggml.token_type", GGUF_TYPE_INT32, GGUF_TYPE_INT32,
                                        tok->n_vocab, &tt, &rc, err, errlen);
    if (rc < 0)
        return rc;

    size_t total = 0;
    for (uint64_t i = 0; i < n; i++) {
        size_t len;
        if (!gguf_get_arr_str(g, key, i, &len))
            return omni_fail(err, errlen, OMNI_ERR_FORMAT, "tokenizer: %s[%llu] unreadable", key,
                             (unsigned long long)i);
        if (len > UINT32_MAX / 2 || omni_add_size(total, len + 1, &total) < 0 || total > UINT32_MAX)
            return omni_fail(err, errlen, OMNI_ERR_FORMAT, "tokenizer: %s too large", key);
    }
    tok->tokens = calloc(n, sizeof *tok->tokens);
    tok->blob = malloc(total ? total : 1);
    size_t vsz = tok_table_size(n);
    tok->vocab_ix = malloc(vsz * sizeof *tok->vocab_ix);
    if (!tok->tokens || !tok->blob || !tok->vocab_ix)
        return omni_fail(err, errlen, OMNI_ERR_NOMEM, "tokenizer: out of memory for %llu tokens",
                         (unsigned long long)n);
    memset(tok->vocab_ix, 0xff, vsz * sizeof *tok->vocab_ix);
    tok->vocab_mask = vsz - 1;

    size_t off = 0;
    for (int32_t i = 0; i < tok->n_vocab; i++) {
        size_t len;
        const char *s = gguf_get_arr_str(g, key, (uint64_t)i, &len);
        struct tok_entry *e = &tok->tokens[i];
        memcpy(tok->blob + off, s, len);
        tok->blob[off + len] = 0;
        e->off = (uint32_t)off;
        e->len = (uint32_t)len;
        off += len + 1;
        if (len > tok->max_len)
            tok->max_len = len;
        e->type = TOK_TYPE_NORMAL;
        if (types) {
            int32_t t;
            memcpy(&t, types + 4 * (size_t)i, 4);
            if (t < 0 || t > TOK_TYPE_BYTE)
                return omni_fail(err, errlen, OMNI_ERR_FORMAT,
                                 "tokenizer: tokenizer.ggml.token_type[%d] = %d is not a token type", i, t);
            e->type = (int8_t)t;
        }
        if (scores) {
            if (st == GGUF_TYPE_FLOAT32) {
                memcpy(&e->score, scores + 4 * (size_t)i, 4);
            } else {
                int32_t v;
                memcpy(&v, scores + 4 * (size_t)i, 4);
                e->score = (float)v;
            }
        }
        if (len > 0)
            tok_ix_put(tok, tok->vocab_ix, tok->vocab_mask, i);
    }
    /* Without a type array, SentencePiece byte pieces still decode as bytes. */
    if (!types && tok->kind == TOK_KIND_SPM)
        for (int32_t i = 0; i < tok->n_vocab; i++) {
            const char *s = tok_text(tok, i);
            if (tok->tokens[i].len == 6 && !memcmp(s, "<0x", 3) && isxdigit((uint8_t)s[3]) &&
                isxdigit((uint8_t)s[4]) && s[5] == '>')
                tok->tokens[i].type = TOK_TYPE_BYTE;
        }
    return 0;
}

static int tok_load_merges(struct tokenizer *tok, const struct gguf *g, char *err, size_t errlen)
{
    const char *key = "tokenizer.ggml.merges";
    enum gguf_type et;
    uint64_t n;
    if (gguf_find_key(g, key) < 0)
        return omni_fail(err, errlen, OMNI_ERR_FORMAT, "tokenizer: missing key %s (needed by gpt2 vocabularies)",
                         key);
    if (gguf_get_arr(g, key, &et, &n) < 0 || et != GGUF_TYPE_STRING)
        return omni_fail(err, errlen, OMNI_ERR_FORMAT, "tokenizer: %s is not an array of strings", key);
    if (n > INT32_MAX / 4)
        return omni_fail(err, errlen, OMNI_ERR_FORMAT, "tokenizer: %s has %llu entries", key,
                         (unsigned long long)n);
    size_t sz = tok_table_size(n);
    tok->merges = malloc(sz * sizeof *tok->merges);
    char *cat = malloc(2 * tok->max_len + 1);
    if (!tok->merges || !cat) {
        free(cat);
        return omni_fail(err, errlen, OMNI_ERR_NOMEM, "tokenizer: out of memory for %llu merges",
                         (unsigned long long)n);
    }
    for (size_t i = 0; i < sz; i++)
        tok->merges[i].key = TOK_MERGE_EMPTY;
    tok->merge_mask = sz - 1;

    for (uint64_t r = 0; r < n; r++) {
        size_t len;
        const char *s = gguf_get_arr_str(g, key, r, &len);
        /* The separator is the first space after the first byte: a part may
         * itself be a space in vocabularies that keep raw spaces. */
        const char *sp = len > 1 ? memchr(s + 1, ' ', len - 1) : NULL;
        if (!sp || sp == s + len - 1) {
            free(cat);
            return omni_fail(err, errlen, OMNI_ERR_FORMAT, "tokenizer: %s[%llu] = '%.*s' is not \"A B\"", key,
                             (unsigned long long)r, (int)(len > 64 ? 64 : len), s);
        }
        size_t la = (size_t)(sp - s), lb = len - la - 1;
        int32_t a = tok_ix_find(tok, tok->vocab_ix, tok->vocab_mask, s, la);
        int32_t b = tok_ix_find(tok, tok->vocab_ix, tok->vocab_mask, sp + 1, lb);
        if (a < 0 || b < 0 || la + lb > 2 * tok->max_len)
            continue; /* a merge of pieces that are no tokens can never apply */
        memcpy(cat, s, la);
        memcpy(cat + la, sp + 1, lb);
        int32_t ab = tok_ix_find(tok, tok->vocab_ix, tok->vocab_mask, cat, la + lb);
        if (ab < 0)
            continue;
        uint64_t k = (uint64_t)(uint32_t)a << 32 | (uint32_t)b;
        for (size_t i = tok_merge_hash(k) & tok->merge_mask;; i = (i + 1) & tok->merge_mask) {
            struct tok_merge *m = &tok->merges[i];
            if (m->key == k)
                break; /* a repeated pair keeps its first (best) rank */
            if (m->key == TOK_MERGE_EMPTY) {
                m->key = k;
                m->rank = (int32_t)r;
                m->result = ab;
                break;
            }
        }
    }
    free(cat);
    return 0;
}

static int tok_init_bpe(struct tokenizer *tok, const struct gguf *g, char *err, size_t errlen)
{
    size_t plen = 0;
    const char *pre = gguf_get_str(g, "tokenizer.ggml.pre", &plen);
    if (!pre) {
        pre = "default";
        plen = strlen(pre);
    }
    const struct tok_pre *p = tok_pre_find(pre, plen);
    if (!p)
        return omni_fail(err, errlen, OMNI_ERR_UNSUPPORTED, "tokenizer: unsupported tokenizer.ggml.pre '%.*s'",
                         (int)(plen > 64 ? 64 : plen), pre);
    tok->ignore_merges = p->ignore_merges;
    tok->add_bos = p->add_bos;
    for (int i = 0; i < TOK_MAX_REGEX && p->regex[i]; i++) {
        int ecode;
        PCRE2_SIZE eoff;
        tok->re[i] = pcre2_compile((PCRE2_SPTR)p->regex[i], PCRE2_ZERO_TERMINATED, PCRE2_UTF | PCRE2_UCP,
                                   &ecode, &eoff, NULL);
        if (!tok->re[i]) {
            PCRE2_UCHAR msg[128];
            pcre2_get_error_message(ecode, msg, sizeof msg);
            return omni_fail(err, errlen, OMNI_ERR_UNSUPPORTED, "tokenizer: pre-tokenizer regex %d: %s", i,
                             (const char *)msg);
        }
        tok->n_re = i + 1;
        /* JIT is several times faster than the interpreter; without it
         * (no JIT support on this CPU) matching still works. */
        pcre2_jit_compile(tok->re[i], PCRE2_JIT_COMPLETE);
    }
    int rc = tok_load_merges(tok, g, err, errlen);
    if (rc < 0)
        return rc;
    for (int b = 0; b < 256; b++) {
        char enc[4];
        int n = unicode_utf8_encode(unicode_byte_to_cp((uint8_t)b), enc);
        tok->byte_ids[b] = tok_ix_find(tok, tok->vocab_ix, tok->vocab_mask, enc, (size_t)n);
    }
    return 0;
}

static void tok_init_spm_bytes(struct tokenizer *tok)
{
    static const char hex[] = "0123456789ABCDEF";
    for (int b = 0; b < 256; b++) {
        char name[6] = { '<', '0', 'x', hex[b >> 4], hex[b & 15], '>' };
        int32_t id = tok_ix_find(tok, tok->vocab_ix, tok->vocab_mask, name, 6);
        if (id < 0) {
            /* Some vocabularies carry the byte itself instead of <0xXX>. */
            char c = (char)b;
            id = tok_ix_find(tok, tok->vocab_ix, tok->vocab_mask, &c, 1);
        }
        tok->byte_ids[b] = id;
    }
}

/* WordPiece classifies characters with one regex: the group that matches
 * names the class (see tok_wpm_class). */
static int tok_init_wpm(struct tokenizer *tok, char *err, size_t errlen)
{
    int ecode;
    PCRE2_SIZE eoff;
    tok->re[0] = pcre2_compile((PCRE2_SPTR) "(\\s)|(\\p{C})|(\\p{Mn})|(\\p{P})", PCRE2_ZERO_TERMINATED,
                               PCRE2_UTF | PCRE2_UCP, &ecode, &eoff, NULL);
    if (!tok->re[0])
        return omni_fail(err, errlen, OMNI_ERR_UNSUPPORTED, "tokenizer: PCRE2 without Unicode support");
    tok->n_re = 1;
    pcre2_jit_compile(tok->re[0], PCRE2_JIT_COMPLETE);
    return 0;
}

static bool tok_is_special_type(int t)
{
    return t == TOK_TYPE_CONTROL || t == TOK_TYPE_USER_DEFINED || t == TOK_TYPE_UNKNOWN;
}

/* Index the tokens whose text is split out of the input before
 * tokenization: user-defined ones always, control/unknown ones only with
 * TOK_PARSE_SPECIAL (Hugging Face's added tokens behave this way). */
static int tok_init_specials(struct tokenizer *tok, const struct gguf *g, char *err, size_t errlen)
{
    size_t count = 0;
    for (int32_t i = 0; i < tok->n_vocab; i++)
        if (tok_is_special_type(tok->tokens[i].type) && tok->tokens[i].len > 0)
            count++;
    if (count == 0)
        return 0;
    size_t sz = tok_table_size(count);
    tok->spec_ix = malloc(sz * sizeof *tok->spec_ix);
    tok->spec_lens = malloc(count * sizeof *tok->spec_lens);
    if (!tok->spec_ix || !tok->spec_lens)
        return omni_fail(err, errlen, OMNI_ERR_NOMEM, "tokenizer: out of memory");
    memset(tok->spec_ix, 0xff, sz * sizeof *tok->spec_ix);
    tok->spec_mask = sz - 1;

    /* Phi-3's added tokens swallow the whitespace that follows them
     * (rstrip in its tokenizer.json), except <unk>, <s> and <|endoftext|>;
     * the GGUF does not record it, so it is keyed on the model name as
     * llama.cpp does. */
    size_t nlen = 0;
    const char *name = gguf_get_str(g, "general.name", &nlen);
    bool phi3 = false;
    for (size_t i = 0; name && i < nlen; i++)
        if ((nlen - i >= 4 && !strncasecmp(name + i, "phi3", 4)) ||
            (nlen - i >= 5 && !strncasecmp(name + i, "phi-3", 5)))
            phi3 = true;

    for (int32_t i = 0; i < tok->n_vocab; i++) {
        struct tok_entry *e = &tok->tokens[i];
        if (!tok_is_special_type(e->type) || e->len == 0)
            continue;
        const char *s = tok_text(tok, i);
        /* Only whole UTF-8 text may be cut out, so that the fragments left
         * around a match stay valid UTF-8. */
        if (!unicode_utf8_valid(s, e->len))
            continue;
        tok_ix_put(tok, tok->spec_ix, tok->spec_mask, i);
        tok->spec_first[(uint8_t)s[0]] |= e->type == TOK_TYPE_USER_DEFINED ? 1 : 2;
        int k = 0;
        while (k < tok->n_spec_lens && tok->spec_lens[k] > (int32_t)e->len)
            k++;
        if (k == tok->n_spec_lens || tok->spec_lens[k] != (int32_t)e->len) {
            memmove(&tok->spec_lens[k + 1], &tok->spec_lens[k], (size_t)(tok->n_spec_lens - k) * sizeof(int32_t));
            tok->spec_lens[k] = (int32_t)e->len;
            tok->n_spec_lens++;
        }
        if (phi3 && strcmp(s, "<unk>") && strcmp(s, "<s>") && strcmp(s, "<|endoftext|>"))
            e->flags |= TOK_F_RSTRIP;
    }
    return 0;
}

static void tok_add_eog(struct tokenizer *tok, int32_t id)
{
    if (id < 0)
        return;
    for (int i = 0; i < tok->n_eog; i++)
        if (tok->eog[i] == id)
            return;
    if (tok->n_eog < TOK_MAX_EOG)
        tok->eog[tok->n_eog++] = id;
}

static void tok_init_eog(struct tokenizer *tok)
{
    static const char *const names[] = { "<|im_end|>", "<|eot_id|>", "<|end_of_text|>", "<end_of_turn>",
                                         "<|endoftext|>", "<|end|>", "</s>", "<|eom_id|>" };
    tok_add_eog(tok, tok->eos);
    tok_add_eog(tok, tok->eot);
    tok_add_eog(tok, tok->eom);
    /* gpt-oss (Harmony): <|end|> closes every message, the reasoning too;
     * the turn ends with <|return|> (the answer) or <|call|> (a tool call). */
    int32_t h_end = tok_ix_find(tok, tok->vocab_ix, tok->vocab_mask, "<|end|>", 7);
    int32_t h_ret = tok_ix_find(tok, tok->vocab_ix, tok->vocab_mask, "<|return|>", 10);
    int32_t h_call = tok_ix_find(tok, tok->vocab_ix, tok->vocab_mask, "<|call|>", 8);
    bool harmony = h_ret >= 0 && h_call >= 0 &&
                   tok_ix_find(tok, tok->vocab_ix, tok->vocab_mask, "<|channel|>", 11) >= 0;
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        int32_t id = tok_ix_find(tok, tok->vocab_ix, tok->vocab_mask, names[i], strlen(names[i]));
        if (id >= 0 && tok->tokens[id].type == TOK_TYPE_CONTROL && !(harmony && id == h_end))
            tok_add_eog(tok, id);
    }
    if (harmony) {
        tok_add_eog(tok, h_ret);
        tok_add_eog(tok, h_call);
        for (int i = 0; i < tok->n_eog; i++)
            if (tok->eog[i] == h_end)
                tok->eog[i--] = tok->eog[--tok->n_eog];
    }
}

struct tokenizer *tokenizer_from_gguf(const struct gguf *g, char *err, size_t errlen)
{
    if (!g) {
        omni_fail(err, errlen, OMNI_ERR_ARG, "tokenizer: no model");
        return NULL;
    }
    size_t mlen = 0;
    const char *model = gguf_get_str(g, "tokenizer.ggml.model", &mlen);
    if (!model) {
        omni_fail(err, errlen, OMNI_ERR_FORMAT, "tokenizer: missing key tokenizer.ggml.model (no tokenizer in %s)",
                  gguf_path(g) ? gguf_path(g) : "the file");
        return NULL;
    }
    struct tokenizer *tok = calloc(1, sizeof *tok);
    if (!tok) {
        omni_fail(err, errlen, OMNI_ERR_NOMEM, "tokenizer: out of memory");
        return NULL;
    }
    tok->bos = tok->eos = tok->unk = tok->sep = tok->eot = tok->eom = -1;
    if (mlen == 5 && !memcmp(model, "llama", 5)) {
        tok->kind = TOK_KIND_SPM;
    } else if (mlen == 4 && !memcmp(model, "gpt2", 4)) {
        tok->kind = TOK_KIND_BPE;
    } else if (mlen == 4 && !memcmp(model, "bert", 4)) {
        tok->kind = TOK_KIND_WPM;
    } else {
        omni_fail(err, errlen, OMNI_ERR_UNSUPPORTED, "tokenizer: unsupported tokenizer.ggml.model '%.*s'",
                  (int)(mlen > 64 ? 64 : mlen), model);
        goto fail;
    }
    if (tok_load_vocab(tok, g, err, errlen) < 0)
        goto fail;

    /* Defaults per model family, as the converters assume them. */
    int32_t cls = -1;
    switch (tok->kind) {
    case TOK_KIND_SPM:
        tok->bos = 1;
        tok->eos = 2;
        tok->unk = 0;
        tok->add_bos = true;
        tok->add_space_prefix = true;
        tok_init_spm_bytes(tok);
        break;
    case TOK_KIND_BPE:
        if (tok_init_bpe(tok, g, err, errlen) < 0)
            goto fail;
        break;
    case TOK_KIND_WPM:
        if (tok_init_wpm(tok, err, errlen) < 0)
            goto fail;
        cls = 101;
        tok->unk = 100;
        tok->sep = 102;
        tok->add_bos = true;
        tok->add_eos = true; /* [SEP] */
        tok->wpm_lower = true;
        break;
    }
    int32_t *defaults[] = { &tok->bos, &tok->eos, &tok->unk, &tok->sep, &cls };
    for (size_t i = 0; i < sizeof defaults / sizeof defaults[0]; i++)
        if (*defaults[i] >= tok->n_vocab)
            *defaults[i] = -1;

    /* Padding and mask ids are not used here; they are read so that a file
     * with out-of-range ids is rejected. */
    int32_t pad = -1, mask = -1;
    const struct {
        const char *key;
        int32_t *id;
    } ids[] = {
        { "tokenizer.ggml.bos_token_id", &tok->bos },
        { "tokenizer.ggml.eos_token_id", &tok->eos },
        { "tokenizer.ggml.unknown_token_id", &tok->unk },
        { "tokenizer.ggml.seperator_token_id", &tok->sep },
        { "tokenizer.ggml.eot_token_id", &tok->eot },
        { "tokenizer.ggml.eom_token_id", &tok->eom },
        { "tokenizer.ggml.cls_token_id", &cls },
        { "tokenizer.ggml.padding_token_id", &pad },
        { "tokenizer.ggml.mask_token_id", &mask },
    };
    for (size_t i = 0; i < sizeof ids / sizeof ids[0]; i++)
        if (tok_read_id(tok, g, ids[i].key, ids[i].id, err, errlen) < 0)
            goto fail;
    /* BERT's sequence start is [CLS]. */
    if (tok->kind == TOK_KIND_WPM && gguf_find_key(g, "tokenizer.ggml.bos_token_id") < 0)
        tok->bos = cls;
    if (tok_read_bool(g, "tokenizer.ggml.add_bos_token", &tok->add_bos, err, errlen) < 0 ||
        tok_read_bool(g, "tokenizer.ggml.add_eos_token", &tok->add_eos, err, errlen) < 0 ||
        tok_read_bool(g, "tokenizer.ggml.add_space_prefix", &tok->add_space_prefix, err, errlen) < 0 ||
        tok_read_bool(g, "tokenizer.ggml.normalizer.lowercase", &tok->wpm_lower, err, errlen) < 0)
        goto fail;
    tok->wpm_strip_accents = tok->wpm_lower;
    if (tok_read_bool(g, "tokenizer.ggml.normalizer.strip_accents", &tok->wpm_strip_accents, err, errlen) < 0)
        goto fail;
    if (tok->kind != TOK_KIND_SPM)
        tok->add_space_prefix = false;
    if (tok_init_specials(tok, g, err, errlen) < 0)
        goto fail;
    tok_init_eog(tok);
    return tok;
fail:
    tokenizer_free(tok);
    return NULL;
}

// ---- accessors ---------------------------------------------------------------

enum tok_kind tokenizer_kind(const struct tokenizer *tok) { return tok->kind; }
int32_t tokenizer_n_vocab(const struct tokenizer *tok) { return tok->n_vocab; }
int32_t tokenizer_bos(const struct tokenizer *tok) { return tok->bos; }
int32_t tokenizer_eos(const struct tokenizer *tok) { return tok->eos; }
bool tokenizer_add_bos(const struct tokenizer *tok) { return tok->add_bos && tok->bos >= 0; }

bool tokenizer_is_eog(const struct tokenizer *tok, int32_t id)
{
    for (int i = 0; i < tok->n_eog; i++)
        if (tok->eog[i] == id)
            return true;
    return false;
}

int tokenizer_token_type(const struct tokenizer *tok, int32_t id)
{
    if (id < 0 || id >= tok->n_vocab)
        return OMNI_ERR_ARG;
    return tok->tokens[id].type;
}

const char *tokenizer_token_text(const struct tokenizer *tok, int32_t id)
{
    if (id < 0 || id >= tok->n_vocab)
        return NULL;
    return tok_text(tok, id);
}

int32_t tokenizer_find(const struct tokenizer *tok, const char *text, size_t len)
{
    return tok_ix_find(tok, tok->vocab_ix, tok->vocab_mask, text, len);
}

// ---- encoding: shared scratch state -----------------------------------------

struct tok_sym {
    int32_t start, len; /* bytes of the work string; len 0 = merged away */
    int32_t prev, next;
    int32_t id;         /* BPE: current token (-1 for a byte without one) */
};

/* A candidate merge of two adjacent symbols, valid while both still have the
 * lengths they had when it was queued (symbols only grow to the right, so
 * equal lengths mean equal text). */
struct tok_pair {
    float prio; /* SPM: score of the merged piece; BPE: -rank */
    int32_t left, right;
    int32_t len_l, len_r;
    int32_t result; /* BPE: merged token */
};

struct tok_span {
    size_t start, len;
};

/* Per-call scratch: a tokenizer is shared between threads, so everything
 * mutable lives here. */
struct tok_work {
    const struct tokenizer *tok;
    int32_t *ids;
    size_t n_ids, cap_ids;
    struct tok_sym *syms;
    size_t cap_syms;
    struct tok_pair *heap;
    size_t n_heap, cap_heap;
    char *buf;
    size_t cap_buf;
    struct tok_span *spans[2];
    size_t cap_spans[2];
    pcre2_match_data *md;
    pcre2_match_context *mctx;
    pcre2_jit_stack *jit_stack;
};

static bool tok_grow(void **p, size_t *cap, size_t need, size_t elem)
{
    if (need <= *cap)
        return true;
    size_t n = *cap ? *cap : 64;
    while (n < need)
        n *= 2;
    size_t bytes;
    if (omni_mul_size(n, elem, &bytes) < 0)
        return false;
    void *q = realloc(*p, bytes);
    if (!q)
        return false;
    *p = q;
    *cap = n;
    return true;
}

static int tok_emit(struct tok_work *w, int32_t id)
{
    if (!tok_grow((void **)&w->ids, &w->cap_ids, w->n_ids + 1, sizeof *w->ids))
        return OMNI_ERR_NOMEM;
    w->ids[w->n_ids++] = id;
    return 0;
}

static void tok_work_free(struct tok_work *w)
{
    free(w->ids);
    free(w->syms);
    free(w->heap);
    free(w->buf);
    free(w->spans[0]);
    free(w->spans[1]);
    pcre2_match_data_free(w->md);
    pcre2_match_context_free(w->mctx);
    pcre2_jit_stack_free(w->jit_stack);
}

static bool tok_pair_before(const struct tok_pair *a, const struct tok_pair *b)
{
    return a->prio > b->prio || (a->prio == b->prio && a->left < b->left);
}

static int tok_heap_push(struct tok_work *w, struct tok_pair p)
{
    if (!tok_grow((void **)&w->heap, &w->cap_heap, w->n_heap + 1, sizeof *w->heap))
        return OMNI_ERR_NOMEM;
    size_t i = w->n_heap++;
    while (i > 0) {
        size_t parent = (i - 1) / 2;
        if (!tok_pair_before(&p, &w->heap[parent]))
            break;
        w->heap[i] = w->heap[parent];
        i = parent;
    }
    w->heap[i] = p;
    return 0;
}

static struct tok_pair tok_heap_pop(struct tok_work *w)
{
    struct tok_pair top = w->heap[0];
    struct tok_pair last = w->heap[--w->n_heap];
    size_t i = 0, n = w->n_heap;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n)
            break;
        if (c + 1 < n && tok_pair_before(&w->heap[c + 1], &w->heap[c]))
            c++;
        if (!tok_pair_before(&w->heap[c], &last))
            break;
        w->heap[i] = w->heap[c];
        i = c;
    }
    if (n > 0)
        w->heap[i] = last;
    return top;
}

/* Queue the merge of symbols l and r if the vocabulary has one. */
static int tok_try_pair(struct tok_work *w, const char *text, int32_t l, int32_t r)
{
    if (l < 0 || r < 0)
        return 0;
    const struct tokenizer *tok = w->tok;
    const struct tok_sym *a = &w->syms[l], *b = &w->syms[r];
    struct tok_pair p = { 0, l, r, a->len, b->len, -1 };
    if (tok->kind == TOK_KIND_SPM) {
        int32_t id = tok_ix_find(tok, tok->vocab_ix, tok->vocab_mask, text + a->start, (size_t)(a->len + b->len));
        if (id < 0 || !tok_is_textual(tok, id))
            return 0;
        p.prio = tok->tokens[id].score;
    } else {
        if (a->id < 0 || b->id < 0)
            return 0;
        const struct tok_merge *m = tok_merge_find(tok, a->id, b->id);
        if (!m)
            return 0;
        p.prio = -(float)m->rank;
        p.result = m->result;
    }
    return tok_heap_push(w, p);
}

/* Merge adjacent symbols best pair first until no pair is left; the
 * symbols stay linked through prev/next starting at index 0. */
static int tok_merge_all(struct tok_work *w, const char *text, int32_t n_syms)
{
    int rc = 0;
    w->n_heap = 0;
    for (int32_t i = 1; i < n_syms && rc == 0; i++)
        rc = tok_try_pair(w, text, i - 1, i);
    while (w->n_heap > 0 && rc == 0) {
        struct tok_pair p = tok_heap_pop(w);
        struct tok_sym *a = &w->syms[p.left], *b = &w->syms[p.right];
        if (a->len != p.len_l || b->len != p.len_r || a->len == 0 || b->len == 0 || a->next != p.right)
            continue; /* stale: one side has merged since */
        a->len += b->len;
        a->id = p.result;
        b->len = 0;
        a->next = b->next;
        if (b->next >= 0)
            w->syms[b->next].prev = p.left;
        rc = tok_try_pair(w, text, a->prev, p.left);
        if (rc == 0)
            rc = tok_try_pair(w, text, p.left, a->next);
    }
    return rc;
}

// ---- SentencePiece -------------------------------------------------------

static int tok_encode_spm(struct tok_work *w, const char *text, size_t len, bool prefix_space)
{
    const struct tokenizer *tok = w->tok;
    /* Spaces become U+2581 "▁" (3 bytes), plus the dummy prefix. */
    size_t need;
    if (omni_mul_size(len + 1, 3, &need) < 0 || need > INT32_MAX)
        return OMNI_ERR_LIMIT; /* symbol offsets are 32-bit */
    if (!tok_grow((void **)&w->buf, &w->cap_buf, need, 1))
        return OMNI_ERR_NOMEM;
    size_t n = 0;
    if (prefix_space) {
        memcpy(w->buf, "\xe2\x96\x81", 3);
        n = 3;
    }
    for (size_t i = 0; i < len; i++) {
        if (text[i] == ' ') {
            memcpy(w->buf + n, "\xe2\x96\x81", 3);
            n += 3;
        } else {
            w->buf[n++] = text[i];
        }
    }
    if (!tok_grow((void **)&w->syms, &w->cap_syms, n, sizeof *w->syms))
        return OMNI_ERR_NOMEM;
    int32_t ns = 0;
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        int cl = unicode_utf8_decode(w->buf + i, n - i, &cp);
        if (cl <= 0)
            cl = 1; /* cannot happen: the input was validated */
        w->syms[ns] = (struct tok_sym){ (int32_t)i, cl, ns - 1, -1, -1 };
        if (ns > 0)
            w->syms[ns - 1].next = ns;
        ns++;
        i += (size_t)cl;
    }
    int rc = tok_merge_all(w, w->buf, ns);
    for (int32_t i = 0; ns > 0 && i >= 0 && rc == 0; i = w->syms[i].next) {
        const struct tok_sym *s = &w->syms[i];
        int32_t id = tok_ix_find(tok, tok->vocab_ix, tok->vocab_mask, w->buf + s->start, (size_t)s->len);
        if (id >= 0 && tok_is_textual(tok, id)) {
            rc = tok_emit(w, id);
            continue;
        }
        /* Byte fallback: the piece as <0xXX> tokens, or <unk> when the
         * vocabulary lacks some byte. */
        bool bytes = true;
        for (int32_t k = 0; k < s->len; k++)
            bytes = bytes && tok->byte_ids[(uint8_t)w->buf[s->start + k]] >= 0;
        if (bytes) {
            for (int32_t k = 0; k < s->len && rc == 0; k++)
                rc = tok_emit(w, tok->byte_ids[(uint8_t)w->buf[s->start + k]]);
        } else if (tok->unk >= 0) {
            rc = tok_emit(w, tok->unk);
        }
    }
    return rc;
}

// ---- byte-level BPE ----------------------------------------------------------

/* Split text into pre-tokens with the regex chain; returns the span list in
 * w->spans[*which] and its length in *n_out. */
static int tok_pretokenize(struct tok_work *w, const char *text, size_t len, int *which, size_t *n_out)
{
    const struct tokenizer *tok = w->tok;
    int cur = 0;
    if (!tok_grow((void **)&w->spans[0], &w->cap_spans[0], 1, sizeof(struct tok_span)))
        return OMNI_ERR_NOMEM;
    w->spans[0][0] = (struct tok_span){ 0, len };
    size_t n_cur = 1;
    for (int r = 0; r < tok->n_re; r++) {
        int nxt = !cur;
        size_t n_new = 0;
        if (!w->md && !(w->md = pcre2_match_data_create(4, NULL)))
            return OMNI_ERR_NOMEM;
        for (size_t s = 0; s < n_cur; s++) {
            const char *subj = text + w->spans[cur][s].start;
            size_t slen = w->spans[cur][s].len, pos = 0, gap = 0;
            /* Each span is matched on its own, so anchors and lookahead see
             * its ends as the ends of the text, as in the reference. */
            while (pos < slen) {
                int rc = pcre2_match(tok->re[r], (PCRE2_SPTR)subj, slen, pos, PCRE2_NO_UTF_CHECK, w->md, w->mctx);
                if (rc == PCRE2_ERROR_JIT_STACKLIMIT && !w->jit_stack) {
                    /* Long runs can outgrow the default 32 KB JIT stack. */
                    if (!w->mctx && !(w->mctx = pcre2_match_context_create(NULL)))
                        return OMNI_ERR_NOMEM;
                    if (!(w->jit_stack = pcre2_jit_stack_create(64 * 1024, 64 * 1024 * 1024, NULL)))
                        return OMNI_ERR_NOMEM;
                    pcre2_jit_stack_assign(w->mctx, NULL, w->jit_stack);
                    continue;
                }
                if (rc == PCRE2_ERROR_NOMATCH)
                    break;
                if (rc < 0)
                    return rc == PCRE2_ERROR_NOMEMORY ? OMNI_ERR_NOMEM : OMNI_ERR_LIMIT;
                PCRE2_SIZE *ov = pcre2_get_ovector_pointer(w->md);
                size_t ms = ov[0], me = ov[1];
                if (me == ms) { /* an empty match cannot split: step one character */
                    uint32_t cp;
                    int cl = unicode_utf8_decode(subj + pos, slen - pos, &cp);
                    pos += cl > 0 ? (size_t)cl : 1;
                    continue;
                }
                if (!tok_grow((void **)&w->spans[nxt], &w->cap_spans[nxt], n_new + 2, sizeof(struct tok_span)))
                    return OMNI_ERR_NOMEM;
                if (ms > gap)
                    w->spans[nxt][n_new++] = (struct tok_span){ w->spans[cur][s].start + gap, ms - gap };
                w->spans[nxt][n_new++] = (struct tok_span){ w->spans[cur][s].start + ms, me - ms };
                pos = gap = me;
            }
            if (gap < slen) {
                if (!tok_grow((void **)&w->spans[nxt], &w->cap_spans[nxt], n_new + 1, sizeof(struct tok_span)))
                    return OMNI_ERR_NOMEM;
                w->spans[nxt][n_new++] = (struct tok_span){ w->spans[cur][s].start + gap, slen - gap };
            }
        }
        cur = nxt;
        n_cur = n_new;
    }
    *which = cur;
    *n_out = n_cur;
    return 0;
}

static int tok_encode_bpe_word(struct tok_work *w, const char *word, size_t len)
{
    const struct tokenizer *tok = w->tok;
    if (tok->ignore_merges && len <= tok->max_len && len <= 256) {
        /* The whole pre-token as GPT-2 characters (at most 2 bytes each). */
        char enc[2 * 256];
        size_t n = 0;
        for (size_t i = 0; i < len; i++)
            n += (size_t)unicode_utf8_encode(unicode_byte_to_cp((uint8_t)word[i]), enc + n);
        int32_t id = tok_ix_find(tok, tok->vocab_ix, tok->vocab_mask, enc, n);
        if (id >= 0 && tok_is_textual(tok, id))
            return tok_emit(w, id);
    }
    if (!tok_grow((void **)&w->syms, &w->cap_syms, len, sizeof *w->syms))
        return OMNI_ERR_NOMEM;
    /* One symbol per byte: each byte is one GPT-2 character. */
    for (size_t i = 0; i < len; i++)
        w->syms[i] = (struct tok_sym){ (int32_t)i, 1, (int32_t)i - 1, i + 1 < len ? (int32_t)i + 1 : -1,
                                       tok->byte_ids[(uint8_t)word[i]] };
    int rc = tok_merge_all(w, word, (int32_t)len);
    for (int32_t i = 0; len > 0 && i >= 0 && rc == 0; i = w->syms[i].next) {
        int32_t id = w->syms[i].id;
        if (id >= 0)
            rc = tok_emit(w, id);
        else if (tok->unk >= 0)
            rc = tok_emit(w, tok->unk);
    }
    return rc;
}

static int tok_encode_bpe(struct tok_work *w, const char *text, size_t len)
{
    int which;
    size_t n;
    int rc = tok_pretokenize(w, text, len, &which, &n);
    for (size_t i = 0; i < n && rc == 0; i++) {
        const struct tok_span *s = &w->spans[which][i];
        if (s->len > INT32_MAX)
            return OMNI_ERR_LIMIT;
        rc = tok_encode_bpe_word(w, text + s->start, s->len);
    }
    return rc;
}

// ---- WordPiece ---------------------------------------------------------------

/* Character classes BERT's normalizer and pre-tokenizer need, for code
 * points outside ASCII (PCRE2 knows the Unicode properties). */
enum { TOK_CC_SPACE = 1, TOK_CC_CONTROL, TOK_CC_MARK, TOK_CC_PUNCT };

static int tok_wpm_class(struct tok_work *w, uint32_t cp)
{
    if (cp < 0x80) {
        if (cp == ' ' || (cp >= '\t' && cp <= '\r'))
            return TOK_CC_SPACE;
        if (cp < 0x20 || cp == 0x7F)
            return TOK_CC_CONTROL;
        return ispunct((int)cp) ? TOK_CC_PUNCT : 0;
    }
    if (cp == 0xFFFD)
        return TOK_CC_CONTROL;
    char enc[4];
    int n = unicode_utf8_encode(cp, enc);
    if (!w->md && !(w->md = pcre2_match_data_create(5, NULL)))
        return 0;
    int rc = pcre2_match(w->tok->re[0], (PCRE2_SPTR)enc, (size_t)n, 0, PCRE2_ANCHORED | PCRE2_NO_UTF_CHECK,
                         w->md, NULL);
    if (rc <= 1)
        return 0;
    return rc - 1; /* the number of the group that matched */
}

/* BERT's CJK ideograph blocks: each such character is a word of its own. */
static bool tok_is_cjk(uint32_t cp)
{
    return (cp >= 0x4E00 && cp <= 0x9FFF) || (cp >= 0x3400 && cp <= 0x4DBF) || (cp >= 0x20000 && cp <= 0x2A6DF) ||
           (cp >= 0x2A700 && cp <= 0x2B73F) || (cp >= 0x2B740 && cp <= 0x2B81F) ||
           (cp >= 0x2B920 && cp <= 0x2CEAF) || (cp >= 0xF900 && cp <= 0xFAFF) || (cp >= 0x2F800 && cp <= 0x2FA1F);
}

/* Greedy longest-match WordPiece over one normalized word held in w->buf
 * after the 3-byte "▁" that marks a word start in GGUF vocabularies (the
 * converter turned "##" continuations into bare text and word starts into
 * "▁" + text). A word with any unmatched part, or longer than 100
 * characters, becomes [UNK] as in Hugging Face's WordPiece. */
static int tok_wpm_word(struct tok_work *w, size_t n, size_t n_chars)
{
    const struct tokenizer *tok = w->tok;
    size_t mark = w->n_ids;
    bool ok = n_chars <= 100;
    for (size_t i = 0; ok && i < n;) {
        size_t j = n - i > tok->max_len ? i + tok->max_len : n;
        int32_t id = -1;
        for (; j > i; j--)
            if ((id = tok_ix_find(tok, tok->vocab_ix, tok->vocab_mask, w->buf + i, j - i)) >= 0)
                break;
        if (id < 0) {
            ok = false;
        } else {
            int rc = tok_emit(w, id);
            if (rc < 0)
                return rc;
            i = j;
        }
    }
    if (ok)
        return 0;
    w->n_ids = mark;
    return tok->unk >= 0 ? tok_emit(w, tok->unk) : 0;
}

/* BERT normalization (drop controls, split off CJK, strip accents, lower
 * case) and pre-tokenization (split at whitespace and punctuation), one
 * word at a time into WordPiece. */
static int tok_encode_wpm(struct tok_work *w, const char *text, size_t len)
{
    const struct tokenizer *tok = w->tok;
    size_t need;
    /* Worst case per input byte: 3 code points of 4 bytes, plus "▁". */
    if (omni_mul_size(len, 12, &need) < 0 || omni_add_size(need, 8, &need) < 0 ||
        !tok_grow((void **)&w->buf, &w->cap_buf, need, 1))
        return OMNI_ERR_NOMEM;
    memcpy(w->buf, "\xe2\x96\x81", 3);
    size_t n = 3, n_chars = 0;
    int rc = 0;
    for (size_t i = 0; i < len && rc == 0;) {
        uint32_t cp;
        int k = unicode_utf8_decode(text + i, len - i, &cp);
        i += k > 0 ? (size_t)k : 1;
        if (k <= 0)
            continue;
        int cls = tok_wpm_class(w, cp);
        if (cls == TOK_CC_SPACE || cls == TOK_CC_CONTROL ||
            (cls == TOK_CC_MARK && tok->wpm_strip_accents)) {
            if (cls == TOK_CC_SPACE && n > 3) {
                rc = tok_wpm_word(w, n, n_chars);
                n = 3;
                n_chars = 0;
            }
            continue;
        }
        uint32_t parts[3] = { cp };
        int np = tok->wpm_strip_accents ? unicode_strip_accents(cp, parts) : 1;
        for (int p = 0; p < np && rc == 0; p++) {
            uint32_t c = tok->wpm_lower ? unicode_tolower(parts[p]) : parts[p];
            bool alone = tok_is_cjk(c) || (c == cp ? cls : tok_wpm_class(w, c)) == TOK_CC_PUNCT;
            if (alone && n > 3) {
                rc = tok_wpm_word(w, n, n_chars);
                n = 3;
                n_chars = 0;
            }
            n += (size_t)unicode_utf8_encode(c, w->buf + n);
            n_chars++;
            if (alone && rc == 0) {
                rc = tok_wpm_word(w, n, n_chars);
                n = 3;
                n_chars = 0;
            }
        }
    }
    if (rc == 0 && n > 3)
        rc = tok_wpm_word(w, n, n_chars);
    return rc;
}

// ---- encoding entry point ------------------------------------------------------

/* Text between special tokens. Every fragment starts the text or follows a
 * special token, so SentencePiece gives each one the dummy space prefix (as
 * llama.cpp and HF's legacy Llama tokenizer do). */
static int tok_encode_fragment(struct tok_work *w, const char *text, size_t len)
{
    switch (w->tok->kind) {
    case TOK_KIND_SPM:
        return tok_encode_spm(w, text, len, w->tok->add_space_prefix);
    case TOK_KIND_BPE:
        return tok_encode_bpe(w, text, len);
    case TOK_KIND_WPM:
        return tok_encode_wpm(w, text, len);
    }
    return OMNI_ERR_ARG;
}

/* The longest special token that starts at text[i] and may be split out. */
static int32_t tok_special_at(const struct tokenizer *tok, const char *text, size_t len, size_t i, int mask)
{
    if (!(tok->spec_first[(uint8_t)text[i]] & mask))
        return -1;
    for (int k = 0; k < tok->n_spec_lens; k++) {
        size_t l = (size_t)tok->spec_lens[k];
        if (l > len - i)
            continue;
        int32_t id = tok_ix_find(tok, tok->spec_ix, tok->spec_mask, text + i, l);
        if (id >= 0 && ((tok->tokens[id].type == TOK_TYPE_USER_DEFINED ? 1 : 2) & mask))
            return id;
    }
    return -1;
}

int tokenizer_encode(const struct tokenizer *tok, const char *text, size_t len, int flags, int32_t *out,
                     int max_out, int *needed)
{
    if (!tok || (!text && len) || max_out < 0 || (!out && max_out > 0))
        return OMNI_ERR_ARG;
    if (!unicode_utf8_valid(text, len))
        return OMNI_ERR_FORMAT;
    struct tok_work w = { .tok = tok };
    int rc = 0;
    bool add = flags & TOK_ADD_SPECIAL;
    if (add && tok->add_bos && tok->bos >= 0)
        rc = tok_emit(&w, tok->bos);

    /* Split out special tokens, leftmost-longest, then tokenize the text
     * between them. */
    int mask = 1 | ((flags & TOK_PARSE_SPECIAL) ? 2 : 0);
    size_t frag = 0;
    for (size_t i = 0; i < len && rc == 0;) {
        int32_t id = tok->spec_ix ? tok_special_at(tok, text, len, i, mask) : -1;
        if (id < 0) {
            i++;
            continue;
        }
        if (i > frag)
            rc = tok_encode_fragment(&w, text + frag, i - frag);
        if (rc == 0)
            rc = tok_emit(&w, id);
        i += tok->tokens[id].len;
        if (tok->tokens[id].flags & TOK_F_RSTRIP)
            while (i < len && isspace((uint8_t)text[i]))
                i++;
        frag = i;
    }
    if (rc == 0 && frag < len)
        rc = tok_encode_fragment(&w, text + frag, len - frag);
    if (rc == 0 && add) {
        if (tok->kind == TOK_KIND_WPM) {
            if (tok->add_eos && tok->sep >= 0)
                rc = tok_emit(&w, tok->sep);
        } else if (tok->add_eos && tok->eos >= 0) {
            rc = tok_emit(&w, tok->eos);
        }
    }
    if (rc == 0) {
        if (w.n_ids > INT32_MAX) {
            rc = OMNI_ERR_LIMIT;
        } else {
            if (needed)
                *needed = (int)w.n_ids;
            if (w.n_ids > (size_t)max_out) {
                rc = OMNI_ERR_LIMIT;
            } else {
                if (w.n_ids)
                    memcpy(out, w.ids, w.n_ids * sizeof *out);
                rc = (int)w.n_ids;
            }
        }
    }
    tok_work_free(&w);
    return rc;
}

// ---- decoding ----------------------------------------------------------------

/* Appends to a caller buffer, counting what did not fit. */
struct tok_out {
    char *buf;
    size_t cap, len;
    bool drop_space;   /* the next byte put is dropped if it is a space (decode's dummy prefix) */
};

static void tok_put(struct tok_out *o, const void *s, size_t n)
{
    /* Dropped here, before the cap applies, so that a length measured with
     * no buffer equals the length written into one. */
    if (o->drop_space && n > 0) {
        o->drop_space = false;
        if (*(const char *)s == ' ')
            s = (const char *)s + 1, n--;
    }
    if (o->len < o->cap) {
        size_t k = o->cap - o->len < n ? o->cap - o->len : n;
        memcpy(o->buf + o->len, s, k);
    }
    o->len += n;
}

static void tok_piece_to(const struct tokenizer *tok, int32_t id, bool special, struct tok_out *o)
{
    if (id < 0 || id >= tok->n_vocab)
        return;
    const struct tok_entry *e = &tok->tokens[id];
    const char *s = tok_text(tok, id);
    switch (e->type) {
    case TOK_TYPE_CONTROL:
    case TOK_TYPE_UNKNOWN:
    case TOK_TYPE_UNUSED:
        if (special)
            tok_put(o, s, e->len);
        return;
    case TOK_TYPE_USER_DEFINED:
        tok_put(o, s, e->len);
        return;
    case TOK_TYPE_BYTE:
        if (e->len == 6 && !memcmp(s, "<0x", 3)) {
            char byte = (char)strtol(s + 3, NULL, 16);
            tok_put(o, &byte, 1);
        } else {
            tok_put(o, s, e->len);
        }
        return;
    default:
        break;
    }
    if (tok->kind == TOK_KIND_BPE) {
        /* GPT-2 characters back to bytes; anything outside the mapping is
         * passed through as it is. */
        for (uint32_t i = 0; i < e->len;) {
            uint32_t cp;
            int n = unicode_utf8_decode(s + i, e->len - i, &cp);
            if (n <= 0) {
                tok_put(o, s + i, 1);
                i++;
                continue;
            }
            int b = unicode_cp_to_byte(cp);
            if (b >= 0) {
                char c = (char)b;
                tok_put(o, &c, 1);
            } else {
                tok_put(o, s + i, (size_t)n);
            }
            i += (uint32_t)n;
        }
        return;
    }
    /* SentencePiece and WordPiece: "▁" stands for a space. */
    for (uint32_t i = 0; i < e->len;) {
        if (e->len - i >= 3 && !memcmp(s + i, "\xe2\x96\x81", 3)) {
            tok_put(o, " ", 1);
            i += 3;
        } else {
            tok_put(o, s + i, 1);
            i++;
        }
    }
}

size_t tokenizer_piece(const struct tokenizer *tok, int32_t id, bool special, char *buf, size_t cap)
{
    struct tok_out o = { .buf = buf, .cap = cap };
    tok_piece_to(tok, id, special, &o);
    return o.len;
}

size_t tokenizer_decode(const struct tokenizer *tok, const int32_t *ids, int n, bool special, char *buf,
                        size_t cap)
{
    struct tok_out o = { .buf = buf, .cap = cap };
    /* The dummy prefix SentencePiece added at the start (and the word-start
     * mark of WordPiece) is removed again: the first piece after any leading
     * BOS loses one leading space. */
    bool strip = tok->add_space_prefix || tok->kind == TOK_KIND_WPM;
    for (int i = 0; i < n; i++) {
        if (strip && ids[i] == tok->bos)
            continue;
        o.drop_space = strip;
        tok_piece_to(tok, ids[i], special, &o);
        strip = o.drop_space;   /* still pending when the piece put no bytes */
        o.drop_space = false;
        if (special && ids[i] == tok->bos)
            strip = false;
    }
    if (o.len < cap)
        buf[o.len] = 0;
    return o.len;
}

// ---- streaming decode ------------------------------------------------------------

/* Emit the complete characters of s[n], U+FFFD for broken ones, and return
 * how many trailing bytes form an incomplete (but so far valid) character. */
static size_t tok_emit_utf8(struct tok_out *o, const char *s, size_t n)
{
    size_t i = 0;
    while (i < n) {
        uint32_t cp;
        int k = unicode_utf8_decode(s + i, n - i, &cp);
        if (k > 0) {
            tok_put(o, s + i, (size_t)k);
            i += (size_t)k;
        } else if (k == 0) {
            return n - i;
        } else {
            tok_put(o, "\xef\xbf\xbd", 3);
            i += (size_t)-k;
        }
    }
    return 0;
}

size_t tokenizer_stream_piece(const struct tokenizer *tok, struct tok_stream *st, int32_t id, char *buf,
                              size_t cap)
{
    struct tok_out o = { .buf = buf, .cap = cap };
    char local[256];
    size_t n = tokenizer_piece(tok, id, false, NULL, 0);
    size_t total = n + (size_t)st->n_pending;
    char *tmp = total <= sizeof local ? local : malloc(total);
    if (!tmp) {
        st->after_bos = id == tok->bos;
        return 0;
    }
    memcpy(tmp, st->pending, (size_t)st->n_pending);
    tokenizer_piece(tok, id, false, tmp + st->n_pending, n);
    char *p = tmp;
    /* run.c: after BOS, SentencePiece drops the leading space of the piece. */
    if (tok->kind == TOK_KIND_SPM && st->after_bos && n > 0 && st->n_pending == 0 && p[0] == ' ') {
        p++;
        total--;
    }
    st->after_bos = id == tok->bos;
    size_t keep = tok_emit_utf8(&o, p, total);
    memcpy(st->pending, p + total - keep, keep);
    st->n_pending = (int)keep;
    if (tmp != local)
        free(tmp);
    return o.len;
}

size_t tokenizer_stream_flush(const struct tokenizer *tok, struct tok_stream *st, char *buf, size_t cap)
{
    (void)tok;
    struct tok_out o = { .buf = buf, .cap = cap };
    if (st->n_pending > 0)
        tok_put(&o, "\xef\xbf\xbd", 3);
    st->n_pending = 0;
    return o.len;
}
