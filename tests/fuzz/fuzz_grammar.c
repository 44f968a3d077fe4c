/* fuzz_grammar.c - the GBNF parser and matcher (llm/grammar): grammar_parse,
 * grammar_match on text, and a matcher over a tiny byte-level vocabulary
 * that computes masks, accepts allowed tokens and raw bytes, and closes the
 * grammar within a token budget (distance, budgeted and closing masks).
 *
 * Input: the grammar up to the first NUL, then text to match / feed. */
#include "tests/fuzz/fz_util.h"

#include "llm/grammar/grammar.h"
#include "llm/tokenizer.h"
#include "src/core/gguf.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

static struct tokenizer *fz_tok;
static struct grammar_vocab *fz_vocab;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc, (void)argv;
    char err[256];
    struct fz_gguf w;
    fz_gguf_init(&w);
    fz_vocab_gguf(&w, FZ_VOCAB_BPE);
    struct gguf *g = fz_gguf_open(&w, err, sizeof err);
    if (!g || !(fz_tok = tokenizer_from_gguf(g, err, sizeof err)) ||
        !(fz_vocab = grammar_vocab_new(fz_tok, err, sizeof err))) {
        fprintf(stderr, "fuzz_grammar: %s\n", err);
        abort();
    }
    gguf_free(g);
    fz_gguf_free(&w);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const uint8_t *part[2];
    size_t len[2];
    int n = fz_split(data, size, part, len, 2);
    char err[256];
    struct grammar *g = grammar_parse((const char *)part[0], len[0], err, sizeof err);
    if (!g)
        return 0;
    const char *text = n > 1 ? (const char *)part[1] : "";
    size_t text_len = n > 1 ? len[1] : 0;
    (void)grammar_match(g, text, text_len);
    struct grammar_matcher *m = grammar_matcher_new(g, fz_vocab, err, sizeof err);
    if (m) {
        /* follow the grammar: the lowest allowed token each step */
        for (int step = 0; step < 8; step++) {
            const uint32_t *mask = grammar_matcher_mask(m);
            if (!mask || grammar_matcher_must_end(m))
                break;
            int32_t pick = -1;
            for (int32_t t = 0; t < grammar_vocab_n_tokens(fz_vocab) && pick < 0; t++)
                if (mask[t / 32] >> (t % 32) & 1 && !tokenizer_is_eog(fz_tok, t))
                    pick = t;
            if (pick < 0)
                break;
            if (grammar_matcher_accept(m, pick) != 0)
                abort();   /* the mask allowed it */
        }
        /* then close it within a budget: the distance says how far the end
         * is, and every token the budgeted mask allows must be taken */
        const int32_t d = grammar_matcher_distance(m);
        const int32_t nv = grammar_vocab_n_tokens(fz_vocab);
        float *logits = d < 16 ? calloc((size_t)nv, sizeof *logits) : NULL;
        for (int64_t left = (int64_t)d + 1; logits && left > 0 && !grammar_matcher_must_end(m); left--) {
            const float *out = grammar_matcher_apply_budget(m, logits, left);
            int32_t pick = -1;
            for (int32_t t = 0; out && t < nv && pick < 0; t++)
                if (out[t] > -INFINITY)
                    pick = t;
            if (pick < 0 || grammar_matcher_accept(m, pick) != 0) {
                if (pick >= 0)
                    abort();   /* the mask allowed it */
                break;
            }
            if (tokenizer_is_eog(fz_tok, pick))
                break;
        }
        free(logits);
        (void)grammar_matcher_mask_closing(m);
        uint32_t set[8];
        (void)grammar_matcher_next_bytes(m, set);
        (void)grammar_matcher_accept_bytes(m, text, text_len);
        (void)grammar_matcher_can_end(m);
        grammar_matcher_free(m);
    }
    grammar_free(g);
    return 0;
}
