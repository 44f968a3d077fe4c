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
