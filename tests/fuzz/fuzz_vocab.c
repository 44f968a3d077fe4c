/* fuzz_vocab.c - tokenizer construction from GGUF metadata
 * (tokenizer_from_gguf: tokens, scores, token types, merges, special ids,
 * pre-tokenizer names, flags), then a short text through the result.
 *
 * Input: a whole GGUF file (vocab-only files are the interesting ones). */
#include "tests/fuzz/fz_util.h"

#include "llm/tokenizer.h"
#include "src/core/gguf.h"

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char err[256];
    struct gguf *g = gguf_open_memory(data, size, "fuzz.gguf", err, sizeof err);
    if (!g)
        return 0;
    struct tokenizer *tok = tokenizer_from_gguf(g, err, sizeof err);
    gguf_free(g);   /* the tokenizer copied what it needs */
    if (!tok)
        return 0;
    static const char text[] = "Hello world! <|im_start|>user\n the  \xc3\xa9t\xc3\xa9 123 <s>";
    int32_t ids[256];
    int n = tokenizer_encode(tok, text, sizeof text - 1, TOK_ADD_SPECIAL | TOK_PARSE_SPECIAL, ids,
                             256, NULL);
    char out[1024];
    volatile size_t sink = 0;
    if (n > 0) {
        sink += tokenizer_decode(tok, ids, n, true, out, sizeof out);
        struct tok_stream st = { 0 };
        for (int i = 0; i < n; i++)
            sink += tokenizer_stream_piece(tok, &st, ids[i], out, sizeof out);
        sink += tokenizer_stream_flush(tok, &st, out, sizeof out);
    }
    for (int32_t id = -1; id <= tokenizer_n_vocab(tok) && id < 4096; id++) {
        sink += tokenizer_piece(tok, id, true, out, sizeof out);
        const char *raw = tokenizer_token_text(tok, id);
        sink += raw ? strlen(raw) : 0;
    }
    sink += (size_t)(tokenizer_bos(tok) + tokenizer_eos(tok) + tokenizer_add_bos(tok));
    (void)sink;
    tokenizer_free(tok);
    return 0;
}
