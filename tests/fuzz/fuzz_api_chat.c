/* fuzz_api_chat.c - POST /v1/chat/completions through the real routing,
 * body parsing, chat-template rendering, grammar and tool-call mapping of
 * src/api, then the model's answer back through the output builders
 * (fz_api.h has the stand-ins for transport, engine and model).
 *
 * Input: byte 0 flags and byte 1 model (fz_api_flags; bit 7 unused), then
 * the request body up to the first NUL, then the text the model generates
 * for every choice. Build and run with
 * `make fuzz` (tests/fuzz/run.sh); from the repository root. */
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
    struct fz_http h = { .method = "POST", .path = "/v1/chat/completions",
                         .content_type = "application/json", .body = part[0],
                         .body_len = len[0] };
    fz_api_flags(&h, data[0], data[1]);
    fz_api_http(&h, n > 1 ? part[1] : NULL, n > 1 ? len[1] : 0);
    return 0;
}
