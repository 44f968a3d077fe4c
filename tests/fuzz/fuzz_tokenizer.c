/* fuzz_tokenizer.c - text through the tokenizers of llm/tokenizer.c: encode
 * (with and without special-token parsing and BOS/EOS), decode, streaming
 * decode of every id, pieces and exact-string lookup, over the tiny
 * vocabularies of fz_util.c and, when ../shared is there, the eight
 * llama.cpp vocabularies (SPM, byte-level BPE with each pre-tokenizer,
 * WordPiece). Byte-level BPE must give the text back exactly.
 *
 * Input: byte 0 picks the vocabulary (modulo how many loaded), byte 1 the
 * encode flags, then the text. */
#include "tests/fuzz/fz_util.h"

#include "llm/tokenizer.h"
#include "src/core/gguf.h"
#include "src/core/omni.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FZ_MAX_VOCABS 16
static struct tokenizer *fz_toks[FZ_MAX_VOCABS];
static const char *fz_names[FZ_MAX_VOCABS];
static int fz_n_toks;

static void fz_add(struct gguf *g, const char *name, char *err, size_t errlen)
{
    struct tokenizer *t = g ? tokenizer_from_gguf(g, err, errlen) : NULL;
    if (!t) {
        fprintf(stderr, "fuzz_tokenizer: %s: %s\n", name, err);
        abort();
    }
    fz_names[fz_n_toks] = name;
    fz_toks[fz_n_toks++] = t;
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc, (void)argv;
    char err[256];
    for (int v = 0; v < FZ_VOCAB_COUNT; v++) {
        struct fz_gguf w;
        fz_gguf_init(&w);
        fz_vocab_gguf(&w, (enum fz_vocab)v);
        struct gguf *g = fz_gguf_open(&w, err, sizeof err);
        fz_add(g, v == FZ_VOCAB_BPE ? "tiny-bpe" : "tiny-spm", err, sizeof err);
        gguf_free(g);
        fz_gguf_free(&w);
    }
    static const char *const shared[] = {
        "llama-spm", "phi-3", "llama-bpe", "qwen2", "gpt-2", "deepseek-llm", "deepseek-coder",
        "bert-bge",
    };
    for (size_t i = 0; i < sizeof shared / sizeof *shared; i++) {
        char rel[128];
        snprintf(rel, sizeof rel, "vocab/ggml-vocab-%s.gguf", shared[i]);
        const char *path = fz_shared(rel);
        if (!path)
            continue;
        struct gguf *g = gguf_open(path, err, sizeof err);
        fz_add(g, shared[i], err, sizeof err);
        gguf_free(g);
    }
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2)
        return 0;
    const int v = data[0] % fz_n_toks;
    const struct tokenizer *tok = fz_toks[v];
    const int flags = data[1] & (TOK_ADD_SPECIAL | TOK_PARSE_SPECIAL);
    const char *text = (const char *)data + 2;
    const size_t len = size - 2;

    int needed = 0;
    int32_t small[4];
    int n = tokenizer_encode(tok, text, len, flags, small, 4, &needed);
    if (n == OMNI_ERR_FORMAT)
        return 0;   /* invalid UTF-8, refused as documented */
    if (n < 0 && n != OMNI_ERR_LIMIT)
        abort();
    const int cap = n == OMNI_ERR_LIMIT ? needed : n;
    int32_t *ids = malloc(((size_t)cap + 1) * sizeof *ids);
    if (!ids)
        abort();
    if ((n = tokenizer_encode(tok, text, len, flags, ids, cap, NULL)) != cap)
        abort();   /* the count it asked for is the count it writes */
    const int32_t n_vocab = tokenizer_n_vocab(tok);
    for (int i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= n_vocab)
            abort();

    size_t dlen = tokenizer_decode(tok, ids, n, false, NULL, 0);
    char *dec = malloc(dlen + 1);
    if (!dec)
        abort();
    if (tokenizer_decode(tok, ids, n, false, dec, dlen + 1) != dlen)
        abort();
    /* byte-level BPE is lossless on valid UTF-8 when no special text was parsed */
    if (tokenizer_kind(tok) == TOK_KIND_BPE && !flags && (dlen != len || memcmp(dec, text, len))) {
        fprintf(stderr, "fuzz: %s: BPE round trip changed the text: %zu -> %zu bytes\n",
                fz_names[v], len, dlen);
        abort();
    }
    free(dec);

    struct tok_stream st = { 0 };
    char piece[64];
    volatile size_t sink = 0;
    for (int i = 0; i < n; i++) {
        sink += tokenizer_stream_piece(tok, &st, ids[i], piece, sizeof piece);
        sink += tokenizer_piece(tok, ids[i], true, piece, sizeof piece);
        const char *raw = tokenizer_token_text(tok, ids[i]);
        if (!raw || tokenizer_find(tok, raw, strlen(raw)) < 0)
            abort();   /* every id has a text that finds an id */
        sink += (size_t)tokenizer_token_type(tok, ids[i]) + tokenizer_is_eog(tok, ids[i]);
    }
    sink += tokenizer_stream_flush(tok, &st, piece, sizeof piece);
    sink += (size_t)tokenizer_find(tok, text, len);
    (void)sink;
    free(ids);
    return 0;
}
