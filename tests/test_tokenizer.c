/* test_tokenizer.c - tokenizer conformance against llama.cpp's vocabulary
 * vectors in ../shared/vocab (exact ids from the Hugging Face tokenizers),
 * decoding round trips, special tokens, streaming decode and broken
 * vocabularies built in memory. */
#define _GNU_SOURCE /* memmem */
#include "tests/test.h"

#include "llm/tokenizer.h"
#include "llm/unicode.h"
#include "src/core/gguf.h"
#include "src/core/omni.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

// ---- helpers -----------------------------------------------------------------

static struct tokenizer *load_vocab(const char *name, char *err, size_t errlen)
{
    char rel[128];
    snprintf(rel, sizeof rel, "vocab/ggml-vocab-%s.gguf", name);
    struct gguf *g = gguf_open(test_shared(rel), err, errlen);
    if (!g)
        return NULL;
    struct tokenizer *tok = tokenizer_from_gguf(g, err, errlen);
    gguf_free(g);
    return tok;
}

/* Runs every .inp/.out pair of one vocabulary; returns the number of
 * mismatches (0 = all pass) and prints the first few. */
static int run_vectors(const char *name, bool round_trip, int *n_tests)
{
    char rel[128], err[256];
    snprintf(rel, sizeof rel, "vocab/ggml-vocab-%s.gguf.inp", name);
    size_t inp_len, out_len;
    char *inp = test_read_file(test_shared(rel), &inp_len);
    snprintf(rel, sizeof rel, "vocab/ggml-vocab-%s.gguf.out", name);
    char *outs = test_read_file(test_shared(rel), &out_len);
    struct tokenizer *tok = load_vocab(name, err, sizeof err);
    int bad = 0;
    *n_tests = 0;
    if (!inp || !outs || !tok) {
        fprintf(stderr, "  %s: cannot load (%s)\n", name, tok ? "vectors" : err);
        bad = 1000;
        goto done;
    }
    static const char sep[] = "\n__ggml_vocab_test__\n";
    const char *p = inp, *end = inp + inp_len, *line = outs;
    int32_t ids[4096];
    while (p < end) {
        const char *q = memmem(p, (size_t)(end - p), sep, sizeof sep - 1);
        if (!q)
            break;
        const char *eol = strchr(line, '\n');
        if (!eol)
            break;
        int32_t want[4096];
        int n_want = 0;
        for (const char *s = line; s < eol;) {
            char *e;
            long v = strtol(s, &e, 10);
            if (e == s)
                break;
            want[n_want++] = (int32_t)v;
            s = e;
        }
        int n = tokenizer_encode(tok, p, (size_t)(q - p), 0, ids, 4096, NULL);
        bool ok = n == n_want && memcmp(ids, want, (size_t)n_want * sizeof *ids) == 0;
        if (!ok && bad++ < 3) {
            fprintf(stderr, "  %s test %d \"%.*s\": got", name, *n_tests, (int)(q - p > 40 ? 40 : q - p), p);
            for (int i = 0; i < n && i < 24; i++)
                fprintf(stderr, " %d", ids[i]);
            fprintf(stderr, " (n=%d), want%.*s\n", n, (int)(eol - line > 120 ? 120 : eol - line), line);
        }
        if (ok && round_trip) {
            char text[8192];
            size_t len = tokenizer_decode(tok, ids, n, false, text, sizeof text);
            if (len != (size_t)(q - p) || memcmp(text, p, len) != 0) {
                if (bad++ < 3)
                    fprintf(stderr, "  %s test %d: decode gives \"%.*s\"\n", name, *n_tests, (int)len, text);
            }
        }
        (*n_tests)++;
        p = q + sizeof sep - 1;
        line = eol + 1;
    }
done:
    tokenizer_free(tok);
    free(inp);
    free(outs);
    return bad;
}

#define VOCAB_TEST(fn, name, round_trip)                                        \
    TEST(fn)                                                                    \
    {                                                                           \
        SKIP_IF_NO_SHARED();                                                    \
        int n_tests = 0;                                                        \
        int bad = run_vectors(name, round_trip, &n_tests);                      \
        CHECK_MSG(bad == 0, "%s: %d of %d vectors fail", name, bad, n_tests);   \
        CHECK(n_tests >= 46);                                                   \
    }

VOCAB_TEST(tokenizer_vectors_llama_spm, "llama-spm", true)
VOCAB_TEST(tokenizer_vectors_phi3, "phi-3", true)
VOCAB_TEST(tokenizer_vectors_llama_bpe, "llama-bpe", true)
VOCAB_TEST(tokenizer_vectors_qwen2, "qwen2", true)
VOCAB_TEST(tokenizer_vectors_gpt2, "gpt-2", true)
VOCAB_TEST(tokenizer_vectors_deepseek_llm, "deepseek-llm", true)
VOCAB_TEST(tokenizer_vectors_deepseek_coder, "deepseek-coder", true)
VOCAB_TEST(tokenizer_vectors_bert_bge, "bert-bge", false)

// ---- behaviour on the real vocabularies --------------------------------------

static int enc(struct tokenizer *tok, const char *s, int flags, int32_t *ids, int max)
{
    return tokenizer_encode(tok, s, strlen(s), flags, ids, max, NULL);
}

TEST(tokenizer_add_special_per_vocab)
{
    SKIP_IF_NO_SHARED();
    char err[256];
    int32_t ids[64];
    struct tokenizer *tok = load_vocab("llama-spm", err, sizeof err);
    CHECK_MSG(tok, "%s", err);
    CHECK(tokenizer_kind(tok) == TOK_KIND_SPM && tokenizer_add_bos(tok));
    CHECK_EQ(enc(tok, "Hello world", TOK_ADD_SPECIAL, ids, 64), 3);
    CHECK(ids[0] == 1 && ids[1] == 15043 && ids[2] == 3186);
    CHECK_EQ(enc(tok, "", TOK_ADD_SPECIAL, ids, 64), 1); /* BOS alone, as HF */
    CHECK_EQ(enc(tok, "", 0, ids, 64), 0);
    tokenizer_free(tok);

    /* Llama 3 adds BOS without an add_bos key (llama-bpe pre-tokenizer). */
    tok = load_vocab("llama-bpe", err, sizeof err);
    CHECK_MSG(tok, "%s", err);
    CHECK_EQ(enc(tok, "Hello world", TOK_ADD_SPECIAL, ids, 64), 3);
    CHECK(ids[0] == 128000 && ids[1] == 9906 && ids[2] == 1917);
    CHECK(tokenizer_is_eog(tok, 128001) && tokenizer_is_eog(tok, 128009) && !tokenizer_is_eog(tok, 128000));
    tokenizer_free(tok);

    tok = load_vocab("gpt-2", err, sizeof err);
    CHECK_MSG(tok, "%s", err);
    CHECK(!tokenizer_add_bos(tok));
    CHECK_EQ(enc(tok, "Hello world", TOK_ADD_SPECIAL, ids, 64), 2);
    CHECK(ids[0] == 15496 && ids[1] == 995);
    tokenizer_free(tok);

    /* BERT: [CLS] ... [SEP]. */
    tok = load_vocab("bert-bge", err, sizeof err);
    CHECK_MSG(tok, "%s", err);
    int n = enc(tok, "Hello world", TOK_ADD_SPECIAL, ids, 64);
    CHECK(n >= 3 && ids[0] == 101 && ids[n - 1] == 102);
    tokenizer_free(tok);
}

TEST(tokenizer_special_tokens_qwen2)
{
    SKIP_IF_NO_SHARED();
    char err[256];
    int32_t ids[64], plain[64];
    struct tokenizer *tok = load_vocab("qwen2", err, sizeof err);
    CHECK_MSG(tok, "%s", err);
    const char *chat = "<|im_start|>user\nHi<|im_end|>";
    int n = enc(tok, chat, TOK_PARSE_SPECIAL, ids, 64);
    CHECK(n >= 4 && ids[0] == 151644 && ids[n - 1] == 151645);
    CHECK_STR_EQ(tokenizer_token_text(tok, ids[0]), "<|im_start|>");
    /* Without parse_special the markers are plain text and decode back. */
    int m = enc(tok, chat, 0, plain, 64);
    CHECK(m > n);
    for (int i = 0; i < m; i++)
        CHECK(plain[i] != 151644 && plain[i] != 151645);
    char text[256];
    CHECK_EQ(tokenizer_decode(tok, plain, m, false, text, sizeof text), strlen(chat));
    CHECK_STR_EQ(text, chat);
    /* Control tokens vanish from decoded text unless special is asked for. */
    CHECK_EQ(tokenizer_decode(tok, ids, n, false, text, sizeof text), strlen("user\nHi"));
    CHECK_EQ(tokenizer_decode(tok, ids, n, true, text, sizeof text), strlen(chat));
    CHECK_STR_EQ(text, chat);
    /* User-defined tokens are always split out, as Hugging Face does. */
    CHECK_EQ(enc(tok, "a[PAD151646]", 0, ids, 64), 2);
    CHECK_EQ(ids[1], 151646);
    /* End of generation: eos and <|im_end|>, not <|im_start|>. */
    CHECK(tokenizer_is_eog(tok, 151643) && tokenizer_is_eog(tok, 151645) && !tokenizer_is_eog(tok, 151644));
    CHECK_EQ(tokenizer_find(tok, "<|im_end|>", 10), 151645);
    CHECK_EQ(tokenizer_find(tok, "no such token", 13), -1);
    tokenizer_free(tok);
}

TEST(tokenizer_special_tokens_spm)
{
    SKIP_IF_NO_SHARED();
    char err[256];
    int32_t ids[64];
    struct tokenizer *tok = load_vocab("llama-spm", err, sizeof err);
    CHECK_MSG(tok, "%s", err);
    /* Literal "<s>" in a prompt is text unless parse_special is set. */
    int n = enc(tok, "<s>", 0, ids, 64);
    CHECK(n > 1);
    for (int i = 0; i < n; i++)
        CHECK(ids[i] != 1);
    CHECK_EQ(enc(tok, "<s>", TOK_PARSE_SPECIAL, ids, 64), 1);
    CHECK_EQ(ids[0], 1);
    /* Text after a special token gets the dummy space prefix again. */
    CHECK_EQ(enc(tok, "</s>Hello", TOK_PARSE_SPECIAL, ids, 64), 2);
    CHECK(ids[0] == 2 && ids[1] == 15043);
    tokenizer_free(tok);

    /* Phi-3's added tokens swallow the whitespace after them. */
    tok = load_vocab("phi-3", err, sizeof err);
    CHECK_MSG(tok, "%s", err);
    CHECK_EQ(enc(tok, "<|user|>\nHello<|end|>", TOK_PARSE_SPECIAL, ids, 64), 3);
    CHECK(ids[0] == 32010 && ids[1] == 15043 && ids[2] == 32007);
    CHECK(tokenizer_is_eog(tok, 32007) && tokenizer_is_eog(tok, 32000));
    tokenizer_free(tok);
}

TEST(tokenizer_pieces_and_decode)
{
    SKIP_IF_NO_SHARED();
    char err[256], buf[64];
    struct tokenizer *tok = load_vocab("llama-spm", err, sizeof err);
    CHECK_MSG(tok, "%s", err);
    CHECK_EQ(tokenizer_piece(tok, 13, false, buf, sizeof buf), 1); /* <0x0A> */
    CHECK_EQ(buf[0], '\n');
    CHECK_EQ(tokenizer_piece(tok, 1, false, buf, sizeof buf), 0); /* BOS is no text */
    CHECK_EQ(tokenizer_piece(tok, 1, true, buf, sizeof buf), 3);
    CHECK(!memcmp(buf, "<s>", 3));
    CHECK_EQ(tokenizer_piece(tok, 15043, false, buf, sizeof buf), 6);
    CHECK(!memcmp(buf, " Hello", 6));
    /* Too small a buffer: truncated, full length returned. */
    CHECK_EQ(tokenizer_piece(tok, 15043, false, buf, 2), 6);
    CHECK_EQ(tokenizer_piece(tok, -1, true, buf, sizeof buf), 0);
    CHECK_EQ(tokenizer_piece(tok, 1 << 30, true, buf, sizeof buf), 0);
    CHECK(tokenizer_token_text(tok, 1 << 30) == NULL);
    CHECK_EQ(tokenizer_token_type(tok, 13), TOK_TYPE_BYTE);
    CHECK_EQ(tokenizer_token_type(tok, 1), TOK_TYPE_CONTROL);
    CHECK(tokenizer_token_type(tok, -5) < 0);
    /* decode drops the dummy prefix after BOS and NUL-terminates. */
    int32_t ids[] = { 1, 15043, 3186 };
    CHECK_EQ(tokenizer_decode(tok, ids, 3, false, buf, sizeof buf), 11);
    CHECK_STR_EQ(buf, "Hello world");
    CHECK_EQ(tokenizer_decode(tok, ids, 3, false, buf, 4), 11);
    tokenizer_free(tok);
}

TEST(tokenizer_stream_holds_partial_utf8)
{
    SKIP_IF_NO_SHARED();
    char err[256];
    const char *names[] = { "qwen2", "llama-spm", "gpt-2" };
    const char *text = "Hi \xf0\x9f\xa6\x99 caf\xc3\xa9 \xe4\xbd\xa0\xe5\xa5\xbd \xe1\x9e\x80!";
    for (int v = 0; v < 3; v++) {
        struct tokenizer *tok = load_vocab(names[v], err, sizeof err);
        CHECK_MSG(tok, "%s", err);
        int32_t ids[128];
        int n = enc(tok, text, TOK_ADD_SPECIAL, ids, 128);
        CHECK(n > 0);
        struct tok_stream st = { 0 };
        char out[256], chunk[64];
        size_t len = 0;
        for (int i = 0; i < n; i++) {
            size_t k = tokenizer_stream_piece(tok, &st, ids[i], chunk, sizeof chunk);
            CHECK(k <= sizeof chunk);
            CHECK_MSG(unicode_utf8_valid(chunk, k), "%s: chunk %d is not valid UTF-8", names[v], i);
            memcpy(out + len, chunk, k);
            len += k;
        }
        len += tokenizer_stream_flush(tok, &st, out + len, sizeof out - len);
        out[len] = 0;
        CHECK_STR_EQ(out, text);
        tokenizer_free(tok);
    }

    /* A dangling lead byte at the end becomes one U+FFFD; a stray
     * continuation byte is replaced at once. */
    struct tokenizer *tok = load_vocab("llama-spm", err, sizeof err);
    CHECK_MSG(tok, "%s", err);
    struct tok_stream st = { 0 };
    char buf[16];
    int32_t e2 = tokenizer_find(tok, "<0xE2>", 6), x82 = tokenizer_find(tok, "<0x82>", 6);
    CHECK(e2 >= 0 && x82 >= 0);
    CHECK_EQ(tokenizer_stream_piece(tok, &st, e2, buf, sizeof buf), 0);
    CHECK_EQ(tokenizer_stream_piece(tok, &st, x82, buf, sizeof buf), 0);
    CHECK_EQ(tokenizer_stream_flush(tok, &st, buf, sizeof buf), 3);
    CHECK(!memcmp(buf, "\xef\xbf\xbd", 3));
    CHECK_EQ(tokenizer_stream_flush(tok, &st, buf, sizeof buf), 0);
    CHECK_EQ(tokenizer_stream_piece(tok, &st, x82, buf, sizeof buf), 3);
    CHECK(!memcmp(buf, "\xef\xbf\xbd", 3));
    /* run.c: the piece right after BOS loses its leading space. */
    int32_t ids[] = { 1, 15043, 3186 };
    size_t k = 0;
    for (int i = 0; i < 3; i++)
        k += tokenizer_stream_piece(tok, &st, ids[i], buf + k, sizeof buf - k);
    CHECK_EQ(k, 11);
    CHECK(!memcmp(buf, "Hello world", 11));
    tokenizer_free(tok);
}

TEST(tokenizer_rejects_invalid_utf8)
{
    SKIP_IF_NO_SHARED();
    char err[256];
    int32_t ids[16];
    struct tokenizer *tok = load_vocab("qwen2", err, sizeof err);
    CHECK_MSG(tok, "%s", err);
    static const char *bad[] = { "a\xff", "\xc0\xaf", "\xed\xa0\x80", "\xe2\x82", "\xf4\x90\x80\x80", "\x80" };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        CHECK_EQ(enc(tok, bad[i], 0, ids, 16), OMNI_ERR_FORMAT);
    /* NUL bytes are text like any other. */
    CHECK(tokenizer_encode(tok, "a\0b", 3, 0, ids, 16, NULL) >= 2);
    int needed = 0;
    CHECK_EQ(tokenizer_encode(tok, "Hello world, again", 18, 0, ids, 2, &needed), OMNI_ERR_LIMIT);
    CHECK(needed > 2);
    CHECK_EQ(tokenizer_encode(tok, "Hello world, again", 18, 0, ids, 16, NULL), needed);
    tokenizer_free(tok);
}

/* 100 KB of text in one call (speed is measured by benchmarks, not here):
 * the result must be the paragraph's ids repeated, since every paragraph
 * boundary is also a pre-tokenizer boundary. */
TEST(tokenizer_long_text_is_paragraphs_repeated)
{
    SKIP_IF_NO_SHARED();
    char err[256];
    struct tokenizer *tok = load_vocab("qwen2", err, sizeof err);
    CHECK_MSG(tok, "%s", err);
    static const char para[] = "The quick brown fox, who wasn't tired, jumped over 13 lazy dogs in 2024.\n"
                               "  It said: \"omniserve serves models locally!\" and then (quietly) left.\n";
    size_t len = 100 * 1024, pl = sizeof para - 1;
    char *text = malloc(len);
    int32_t *ids = malloc(len * sizeof *ids), one[128];
    CHECK(text && ids);
    for (size_t i = 0; i < len; i++)
        text[i] = para[i % pl];
    len -= len % pl; /* whole paragraphs */
    int n = tokenizer_encode(tok, text, len, 0, ids, (int)len, NULL);
    int n1 = tokenizer_encode(tok, para, pl, 0, one, 128, NULL);
    int reps = (int)(len / pl), same = n1 > 0 && n == n1 * reps;
    for (int i = 0; same && i < n; i++)
        same = ids[i] == one[i % n1];
    free(text);
    free(ids);
    tokenizer_free(tok);
    CHECK_MSG(same, "%d ids for %d paragraphs of %d ids", n, reps, n1);
}

// ---- vocabularies built in memory ----------------------------------------------

/* A minimal GGUF v3 writer: header, then key/values, no tensors. */
struct gw {
    unsigned char buf[1 << 17];
    size_t len;
    uint64_t n_kv;
};

static void gw_raw(struct gw *w, const void *p, size_t n)
{
    if (w->len + n <= sizeof w->buf) {
        memcpy(w->buf + w->len, p, n);
        w->len += n;
    }
}

static void gw_u32v(struct gw *w, uint32_t v) { gw_raw(w, &v, 4); }

static void gw_strv(struct gw *w, const char *s)
{
    uint64_t n = strlen(s);
    gw_raw(w, &n, 8);
    gw_raw(w, s, n);
}

static void gw_key(struct gw *w, const char *key, uint32_t type)
{
    gw_strv(w, key);
    gw_u32v(w, type);
    w->n_kv++;
}

static void gw_init(struct gw *w)
{
    w->len = 24; /* header written by gw_open */
    w->n_kv = 0;
}

static void gw_str(struct gw *w, const char *key, const char *v)
{
    gw_key(w, key, GGUF_TYPE_STRING);
    gw_strv(w, v);
}

static void gw_u32(struct gw *w, const char *key, uint32_t v)
{
    gw_key(w, key, GGUF_TYPE_UINT32);
    gw_u32v(w, v);
}

static void gw_arr(struct gw *w, const char *key, uint32_t elem, uint64_t n)
{
    gw_key(w, key, GGUF_TYPE_ARRAY);
    gw_u32v(w, elem);
    gw_raw(w, &n, 8);
}

static void gw_arr_str(struct gw *w, const char *key, char **v, int n)
{
    gw_arr(w, key, GGUF_TYPE_STRING, (uint64_t)n);
    for (int i = 0; i < n; i++)
        gw_strv(w, v[i]);
}

static struct tokenizer *gw_open(struct gw *w, char *err, size_t errlen)
{
    uint32_t version = 3;
    uint64_t n_tensors = 0;
    memcpy(w->buf, "GGUF", 4);
    memcpy(w->buf + 4, &version, 4);
    memcpy(w->buf + 8, &n_tensors, 8);
    memcpy(w->buf + 16, &w->n_kv, 8);
    struct gguf *g = gguf_open_memory(w->buf, w->len, "mem.gguf", err, errlen);
    if (!g)
        return NULL;
    struct tokenizer *tok = tokenizer_from_gguf(g, err, errlen);
    gguf_free(g);
    return tok;
}

/* SentencePiece vocabulary: <unk> <s> </s>, 256 byte tokens, then pieces
 * with scores. */
#define SPM_N_BASE 259
static const struct {
    const char *text;
    float score;
} spm_pieces[] = {
    { "\xe2\x96\x81", -5 }, { "a", -5 }, { "b", -5 }, { "c", -5 },
    { "\xe2\x96\x81" "a", -1 }, { "ab", -2 }, { "bc", -0.5f }, { "abc", -3 },
};
#define SPM_N (SPM_N_BASE + (int)(sizeof spm_pieces / sizeof spm_pieces[0]))

static void gw_spm(struct gw *w, bool bytes, int n_scores)
{
    static char names[SPM_N][16];
    char *tokens[SPM_N];
    float scores[SPM_N];
    int32_t types[SPM_N];
    int n = 0;
    const char *specials[] = { "<unk>", "<s>", "</s>" };
    for (int i = 0; i < 3; i++, n++) {
        snprintf(names[n], sizeof names[n], "%s", specials[i]);
        types[n] = i == 0 ? TOK_TYPE_UNKNOWN : TOK_TYPE_CONTROL;
        scores[n] = 0;
    }
    for (int b = 0; b < 256; b++, n++) {
        /* Without byte tokens the slots hold inert unused pieces. */
        snprintf(names[n], sizeof names[n], bytes ? "<0x%02X>" : "<unused%d>", b);
        types[n] = bytes ? TOK_TYPE_BYTE : TOK_TYPE_UNUSED;
        scores[n] = 0;
    }
    for (size_t i = 0; i < sizeof spm_pieces / sizeof spm_pieces[0]; i++, n++) {
        snprintf(names[n], sizeof names[n], "%s", spm_pieces[i].text);
        types[n] = TOK_TYPE_NORMAL;
        scores[n] = spm_pieces[i].score;
    }
    for (int i = 0; i < n; i++)
        tokens[i] = names[i];
    gw_str(w, "tokenizer.ggml.model", "llama");
    gw_arr_str(w, "tokenizer.ggml.tokens", tokens, n);
    gw_arr(w, "tokenizer.ggml.scores", GGUF_TYPE_FLOAT32, (uint64_t)n_scores);
    gw_raw(w, scores, (size_t)n_scores * 4);
    gw_arr(w, "tokenizer.ggml.token_type", GGUF_TYPE_INT32, (uint64_t)n);
    gw_raw(w, types, (size_t)n * 4);
}

static int32_t spm_id(const char *text)
{
    for (size_t i = 0; i < sizeof spm_pieces / sizeof spm_pieces[0]; i++)
        if (!strcmp(spm_pieces[i].text, text))
            return SPM_N_BASE + (int32_t)i;
    return -1;
}

TEST(tokenizer_spm_merges_by_score)
{
    static struct gw w;
    char err[256];
    int32_t ids[16];
    gw_init(&w);
    gw_spm(&w, true, SPM_N);
    struct tokenizer *tok = gw_open(&w, err, sizeof err);
    CHECK_MSG(tok, "%s", err);
    CHECK_EQ(tokenizer_bos(tok), 1);
    CHECK_EQ(tokenizer_eos(tok), 2);
    /* "▁abc": bc (-0.5) merges first, then ▁a (-1); abc (-3) never forms. */
    CHECK_EQ(enc(tok, "abc", 0, ids, 16), 2);
    CHECK_EQ(ids[0], spm_id("\xe2\x96\x81" "a"));
    CHECK_EQ(ids[1], spm_id("bc"));
    /* Byte fallback for what the vocabulary lacks. */
    CHECK_EQ(enc(tok, "\xc3\xa9", 0, ids, 16), 3);
    CHECK(ids[0] == spm_id("\xe2\x96\x81") && ids[1] == 3 + 0xC3 && ids[2] == 3 + 0xA9);
    char buf[16];
    CHECK_EQ(tokenizer_decode(tok, ids, 3, false, buf, sizeof buf), 2);
    CHECK_STR_EQ(buf, "\xc3\xa9");
    tokenizer_free(tok);

    /* Without byte tokens an unknown character becomes <unk>. */
    gw_init(&w);
    gw_spm(&w, false, SPM_N);
    gw_u32(&w, "tokenizer.ggml.unknown_token_id", 0);
    tok = gw_open(&w, err, sizeof err);
    CHECK_MSG(tok, "%s", err);
    CHECK_EQ(enc(tok, "a\xc3\xa9", 0, ids, 16), 2);
    CHECK(ids[0] == spm_id("\xe2\x96\x81" "a") && ids[1] == 0);
    tokenizer_free(tok);
}

/* The dummy-prefix space decode drops counts the same whether the text is
 * measured (no buffer) or written, and a cut inside the first piece keeps
 * the right bytes (found by tests/fuzz/fuzz_tokenizer). */
TEST(tokenizer_decode_measures_what_it_writes)
{
    static struct gw w;
    char err[256], buf[16];
    int32_t ids[16];
    gw_init(&w);
    gw_spm(&w, true, SPM_N);
    struct tokenizer *tok = gw_open(&w, err, sizeof err);
    CHECK_MSG(tok, "%s", err);
    int n = enc(tok, "abc", 0, ids, 16);   /* "▁a" "bc" */
    CHECK_EQ(n, 2);
    CHECK_EQ(tokenizer_decode(tok, ids, n, false, NULL, 0), 3);
    CHECK_EQ(tokenizer_decode(tok, ids, n, false, buf, sizeof buf), 3);
    CHECK_STR_EQ(buf, "abc");
    memset(buf, 'x', sizeof buf);
    CHECK_EQ(tokenizer_decode(tok, ids, n, false, buf, 1), 3);
    CHECK_EQ(buf[0], 'a');
    CHECK_EQ(tokenizer_decode(tok, ids, n, false, buf, 2), 3);
    CHECK(!memcmp(buf, "ab", 2));
    tokenizer_free(tok);
}

/* Byte-level BPE vocabulary: the 256 GPT-2 characters, then merged tokens. */
static void gw_bpe(struct gw *w, const char *pre, char **merges, int n_merges)
{
    static char names[260][8];
    char *tokens[260];
    int n = 0;
    for (int b = 0; b < 256; b++, n++)
        names[n][unicode_utf8_encode(unicode_byte_to_cp((uint8_t)b), names[n])] = 0;
    const char *more[] = { "ab", "abc", "\xc4\xa0" "a", "<|end|>" };
    for (int i = 0; i < 4; i++, n++)
        snprintf(names[n], sizeof names[n], "%s", more[i]);
    for (int i = 0; i < n; i++)
        tokens[i] = names[i];
    int32_t types[260];
    for (int i = 0; i < n; i++)
        types[i] = i == n - 1 ? TOK_TYPE_CONTROL : TOK_TYPE_NORMAL;
    gw_str(w, "tokenizer.ggml.model", "gpt2");
    if (pre)
        gw_str(w, "tokenizer.ggml.pre", pre);
    gw_arr_str(w, "tokenizer.ggml.tokens", tokens, n);
    gw_arr(w, "tokenizer.ggml.token_type", GGUF_TYPE_INT32, (uint64_t)n);
    gw_raw(w, types, (size_t)n * 4);
    if (merges)
        gw_arr_str(w, "tokenizer.ggml.merges", merges, n_merges);
}

TEST(tokenizer_bpe_merges_by_rank)
{
    static struct gw w;
    char err[256];
    int32_t ids[16];
    char *merges[] = { "a b", "ab c", "\xc4\xa0 a", "x y" /* "xy" is no token: ignored */ };
    gw_init(&w);
    gw_bpe(&w, "gpt-2", merges, 4);
    struct tokenizer *tok = gw_open(&w, err, sizeof err);
    CHECK_MSG(tok, "%s", err);
    CHECK(tokenizer_kind(tok) == TOK_KIND_BPE);
    CHECK_EQ(tokenizer_bos(tok), -1);
    /* " abc": "a b" (rank 0) beats "Ġ a" (rank 2), then "ab c" (rank 1). */
    CHECK_EQ(enc(tok, "abc abc", 0, ids, 16), 3);
    CHECK(ids[0] == 257 && ids[1] == tokenizer_find(tok, "\xc4\xa0", 2) && ids[2] == 257);
    CHECK_EQ(enc(tok, " a", 0, ids, 16), 1);
    CHECK_EQ(ids[0], 258);
    /* Control token text only with parse_special; EOG by name. */
    CHECK_EQ(enc(tok, "<|end|>", TOK_PARSE_SPECIAL, ids, 16), 1);
    CHECK_EQ(ids[0], 259);
    CHECK(enc(tok, "<|end|>", 0, ids, 16) > 1);
    CHECK(tokenizer_is_eog(tok, 259));
    char buf[32];
    int32_t seq[] = { 257, tokenizer_find(tok, "\xc4\xa0", 2), 257, 259 };
    CHECK_EQ(tokenizer_decode(tok, seq, 4, false, buf, sizeof buf), 7);
    CHECK_STR_EQ(buf, "abc abc");
    tokenizer_free(tok);
}

/* gpt-oss's Harmony vocabulary: <|end|> closes each message (the reasoning
 * too), so only <|return|> and <|call|> end the turn. */
TEST(tokenizer_harmony_eog)
{
    static struct gw w;
    char err[256];
    char *tokens[] = { "a", "<|start|>", "<|channel|>", "<|message|>", "<|end|>", "<|return|>", "<|call|>" };
    int32_t types[] = { TOK_TYPE_NORMAL, TOK_TYPE_CONTROL, TOK_TYPE_CONTROL, TOK_TYPE_CONTROL,
                        TOK_TYPE_CONTROL, TOK_TYPE_CONTROL, TOK_TYPE_CONTROL };
    gw_init(&w);
    gw_str(&w, "tokenizer.ggml.model", "gpt2");
    gw_arr_str(&w, "tokenizer.ggml.tokens", tokens, 7);
    gw_arr(&w, "tokenizer.ggml.token_type", GGUF_TYPE_INT32, 7);
    gw_raw(&w, types, sizeof types);
    char *merges[] = { "a a" };
    gw_arr_str(&w, "tokenizer.ggml.merges", merges, 1);
    gw_u32(&w, "tokenizer.ggml.eos_token_id", 5);
    struct tokenizer *tok = gw_open(&w, err, sizeof err);
    CHECK_MSG(tok, "%s", err);
    CHECK(!tokenizer_is_eog(tok, 4));
    CHECK(tokenizer_is_eog(tok, 5));
    CHECK(tokenizer_is_eog(tok, 6));
    CHECK(!tokenizer_is_eog(tok, 2));
    tokenizer_free(tok);
}

TEST(tokenizer_rejects_broken_vocab)
{
    static struct gw w;
    char err[256];
    char *tokens[] = { "a", "b", "ab" };

    gw_init(&w);
    gw_str(&w, "general.architecture", "llama");
    CHECK(gw_open(&w, err, sizeof err) == NULL);
    CHECK_STR_CONTAINS(err, "tokenizer.ggml.model");

    gw_init(&w);
    gw_str(&w, "tokenizer.ggml.model", "sentencepiece-xl");
    CHECK(gw_open(&w, err, sizeof err) == NULL);
    CHECK_STR_CONTAINS(err, "unsupported tokenizer.ggml.model 'sentencepiece-xl'");

    gw_init(&w);
    gw_str(&w, "tokenizer.ggml.model", "llama");
    CHECK(gw_open(&w, err, sizeof err) == NULL);
    CHECK_STR_CONTAINS(err, "missing key tokenizer.ggml.tokens");

    gw_init(&w);
    gw_str(&w, "tokenizer.ggml.model", "llama");
    gw_arr(&w, "tokenizer.ggml.tokens", GGUF_TYPE_INT32, 1);
    gw_u32v(&w, 7);
    CHECK(gw_open(&w, err, sizeof err) == NULL);
    CHECK_STR_CONTAINS(err, "tokenizer.ggml.tokens is not an array of strings");

    gw_init(&w);
    gw_spm(&w, true, SPM_N - 1);
    CHECK(gw_open(&w, err, sizeof err) == NULL);
    CHECK_STR_CONTAINS(err, "tokenizer.ggml.scores has");

    gw_init(&w);
    gw_str(&w, "tokenizer.ggml.model", "llama");
    gw_arr_str(&w, "tokenizer.ggml.tokens", tokens, 3);
    gw_arr(&w, "tokenizer.ggml.token_type", GGUF_TYPE_INT32, 3);
    gw_u32v(&w, 1);
    gw_u32v(&w, 9);
    gw_u32v(&w, 1);
    CHECK(gw_open(&w, err, sizeof err) == NULL);
    CHECK_STR_CONTAINS(err, "tokenizer.ggml.token_type[1] = 9");

    gw_init(&w);
    gw_str(&w, "tokenizer.ggml.model", "llama");
    gw_arr_str(&w, "tokenizer.ggml.tokens", tokens, 3);
    gw_u32(&w, "tokenizer.ggml.bos_token_id", 3);
    CHECK(gw_open(&w, err, sizeof err) == NULL);
    CHECK_STR_CONTAINS(err, "tokenizer.ggml.bos_token_id = 3 is out of range");

    gw_init(&w);
    gw_bpe(&w, "gpt-2", NULL, 0);
    CHECK(gw_open(&w, err, sizeof err) == NULL);
    CHECK_STR_CONTAINS(err, "missing key tokenizer.ggml.merges");

    char *bad_merge[] = { "a b", "ab" };
    gw_init(&w);
    gw_bpe(&w, "gpt-2", bad_merge, 2);
    CHECK(gw_open(&w, err, sizeof err) == NULL);
    CHECK_STR_CONTAINS(err, "tokenizer.ggml.merges[1] = 'ab'");

    char *merges[] = { "a b" };
    gw_init(&w);
    gw_bpe(&w, "no-such-pre", merges, 1);
    CHECK(gw_open(&w, err, sizeof err) == NULL);
    CHECK_STR_CONTAINS(err, "tokenizer.ggml.pre 'no-such-pre'");

    /* No pre key at all: the default pre-tokenizer. */
    gw_init(&w);
    gw_bpe(&w, NULL, merges, 1);
    struct tokenizer *tok = gw_open(&w, err, sizeof err);
    CHECK_MSG(tok, "%s", err);
    tokenizer_free(tok);
    tokenizer_free(NULL);
}

// ---- concurrency ---------------------------------------------------------------

struct tok_thread_arg {
    struct tokenizer *tok;
    const char *text;
    int32_t ids[512];
    int n;
};

static void *tok_thread_main(void *p)
{
    struct tok_thread_arg *a = p;
    for (int r = 0; r < 50; r++)
        a->n = tokenizer_encode(a->tok, a->text, strlen(a->text), TOK_ADD_SPECIAL | TOK_PARSE_SPECIAL, a->ids,
                                512, NULL);
    return NULL;
}

/* One tokenizer, several threads at once: every thread gets the ids a
 * single-threaded call gets. */
TEST(tokenizer_shared_between_threads)
{
    SKIP_IF_NO_SHARED();
    char err[256];
    struct tokenizer *tok = load_vocab("llama-bpe", err, sizeof err);
    CHECK_MSG(tok, "%s", err);
    const char *text = "<|start_header_id|>user<|end_header_id|>\n\nWhat's 12345 + 678? Caf\xc3\xa9 \xf0\x9f\xa6\x99   ok";
    int32_t want[512];
    int n = tokenizer_encode(tok, text, strlen(text), TOK_ADD_SPECIAL | TOK_PARSE_SPECIAL, want, 512, NULL);
    CHECK(n > 10);
    static struct tok_thread_arg args[4];
    pthread_t th[4];
    for (int i = 0; i < 4; i++) {
        args[i] = (struct tok_thread_arg){ .tok = tok, .text = text };
        CHECK(pthread_create(&th[i], NULL, tok_thread_main, &args[i]) == 0);
    }
    for (int i = 0; i < 4; i++)
        pthread_join(th[i], NULL);
    for (int i = 0; i < 4; i++) {
        CHECK_EQ(args[i].n, n);
        CHECK(memcmp(args[i].ids, want, (size_t)n * sizeof *want) == 0);
    }
    tokenizer_free(tok);
}
