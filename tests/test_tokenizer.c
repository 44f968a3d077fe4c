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

TEST(tokenizer_speed_100kb)
{
    SKIP_IF_NO_SHARED();
    char err[256];
    double t0 = omni_time_s();
    struct tokenizer *tok = load_vocab("qwen2", err, sizeof err);
    double t_load = omni_time_s() - t0;
    CHECK_MSG(tok, "%s", err);
    static const char para[] = "The quick brown fox, who wasn't tired, jumped over 13 lazy dogs in 2024.\n"
                               "  It said: \"omniserve serves models locally!\" and then (quietly) left.\n";
    size_t len = 100 * 1024, pl = sizeof para - 1;
    char *text = malloc(len);
    int32_t *ids = malloc(len * sizeof *ids);
    CHECK(text && ids);
    for (size_t i = 0; i < len; i++)
        text[i] = para[i % pl];
    len -= len % pl; /* whole paragraphs */
    t0 = omni_time_s();
    int n = tokenizer_encode(tok, text, len, 0, ids, (int)len, NULL);
    double t_enc = omni_time_s() - t0;
    free(text);
    free(ids);
    tokenizer_free(tok);
    CHECK(n > 10000);
    CHECK_MSG(t_load < 1.0 && t_enc < 1.0, "load %.3f s, encode %.3f s", t_load, t_enc);
}
