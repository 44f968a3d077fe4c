/* fuzz_api_transcription.c - POST /v1/audio/transcriptions and
 * /translations: the multipart form and its fields (file, response_format,
 * language, prompt, temperature, timestamp_granularities, stream) through
 * the real route; the job then runs as on shutdown, without a model
 * (stand-ins: fz_api.h). Audio decoding has its own target (fuzz_audio).
 *
 * Input: byte 0 flags (bit 7: translations; engine mode 1 = the speech
 * queue is full, 3 = the client leaves first), byte 1 unused, then the
 * Content-Type header value up to the first NUL, then the body. */
#include "tests/fuzz/fz_api.h"
#include "tests/fuzz/fz_util.h"

#include <stdlib.h>

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
    char *ctype = fz_strndup(part[0], len[0]);
    struct fz_http h = { .method = "POST",
                         .path = data[0] & 128 ? "/v1/audio/translations" : "/v1/audio/transcriptions",
                         .content_type = ctype, .body = n > 1 ? part[1] : NULL,
                         .body_len = n > 1 ? len[1] : 0 };
    fz_api_flags(&h, data[0], data[1]);
    fz_api_http(&h, NULL, 0);
    free(ctype);
    return 0;
}
