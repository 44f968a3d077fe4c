/* fuzz_api_messages.c - the Anthropic routes, POST /v1/messages (system,
 * content blocks, tools / tool_use / tool_result, thinking) and
 * /v1/messages/count_tokens, through the real src/api code, the answer
 * back through the content-block builder (stand-ins: fz_api.h).
 *
 * Input: byte 0 flags (bit 7: count_tokens), byte 1 model, then the body up
 * to the first NUL, then the text the model generates. */
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
    struct fz_http h = { .method = "POST",
                         .path = data[0] & 128 ? "/v1/messages/count_tokens" : "/v1/messages",
                         .content_type = "application/json", .body = part[0],
                         .body_len = len[0] };
    fz_api_flags(&h, data[0], data[1]);
    fz_api_http(&h, n > 1 ? part[1] : NULL, n > 1 ? len[1] : 0);
    return 0;
}
