/* fuzz_api_completions.c - POST /v1/completions (legacy prompts: strings or
 * token arrays, echo, logprobs counts, grammar) and the /tokenize and
 * /detokenize extras through the real src/api code (stand-ins: fz_api.h).
 *
 * Input: byte 0 flags (bit 7: /tokenize, or /detokenize when the model byte
 * is odd), byte 1 model, then the body up to the first NUL, then the text
 * the model generates. */
#include "tests/fuzz/fz_api.h"
#include "tests/fuzz/fz_util.h"

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc, (void)argv;
    fz_api_init();
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2)
        return 0;
    const uint8_t *part[2];
    size_t len[2];
    int n = fz_split(data + 2, size - 2, part, len, 2);
    const char *path = !(data[0] & 128) ? "/v1/completions"
                       : data[1] & 1    ? "/detokenize"
                                        : "/tokenize";
    struct fz_http h = { .method = "POST", .path = path, .content_type = "application/json",
                         .body = part[0], .body_len = len[0] };
    fz_api_flags(&h, data[0], data[1]);
    fz_api_http(&h, n > 1 ? part[1] : NULL, n > 1 ? len[1] : 0);
    return 0;
}
