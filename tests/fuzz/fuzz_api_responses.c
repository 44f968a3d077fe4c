/* fuzz_api_responses.c - the OpenAI Responses routes through the real
 * src/api code (stand-ins: fz_api.h): POST /v1/responses (input items,
 * function and built-in tools, text.format, previous_response_id, store,
 * streams) with the answer back through the output-item builder, then,
 * with bit 7, GET / DELETE /v1/responses/{id} and .../input_items on the
 * store the request may have filled.
 *
 * Input: byte 0 flags (bit 7: the stored-response routes), byte 1 model,
 * then the body up to the first NUL, then the text the model generates up
 * to the next NUL, then the {id} for the GET / DELETE routes. */
#include "tests/fuzz/fz_api.h"
#include "tests/fuzz/fz_util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
    const uint8_t *part[3];
    size_t len[3];
    int n = fz_split(data + 2, size - 2, part, len, 3);
    struct fz_http h = { .method = "POST", .path = "/v1/responses",
                         .content_type = "application/json", .body = part[0], .body_len = len[0] };
    fz_api_flags(&h, data[0], data[1]);
    fz_api_http(&h, n > 1 ? part[1] : NULL, n > 1 ? len[1] : 0);
    if (!(data[0] & 128) || n < 3)
        return 0;
    char *id = fz_strndup(part[2], len[2]);
    static const char *const routes[][2] = {
        { "GET", "/v1/responses/%s" }, { "GET", "/v1/responses/%s/input_items" },
        { "DELETE", "/v1/responses/%s" },
    };
    size_t cap = strlen(id) + 64;
    char *path = malloc(cap);
    for (size_t k = 0; path && k < sizeof routes / sizeof routes[0]; k++) {
        snprintf(path, cap, routes[k][1], id);
        struct fz_http g = { .method = routes[k][0], .path = path };
        fz_api_flags(&g, data[0], data[1]);
        fz_api_http(&g, NULL, 0);
    }
    free(path);
    free(id);
    return 0;
}
