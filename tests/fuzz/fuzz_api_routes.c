/* fuzz_api_routes.c - any method and path through the router of src/api/api.c
 * (405 / 404, {id} routes such as /v1/models/{id} and
 * /v1/requests/{id}/cancel, the API-key check, /health, /metrics) with a
 * body, through the real route code (stand-ins: fz_api.h).
 *
 * Input: byte 0 flags, byte 1 model, then "METHOD /path?query" up to the
 * first NUL, then the body up to the next NUL, then the generated text. */
#include "tests/fuzz/fz_api.h"
#include "tests/fuzz/fz_util.h"

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
    char *line = fz_strndup(part[0], len[0]);
    char *path = strchr(line, ' ');
    if (!path || path[1] != '/') {
        free(line);
        return 0;
    }
    *path++ = 0;
    char *query = strchr(path, '?');
    if (query)
        *query++ = 0;
    struct fz_http h = { .method = line, .path = path, .query = query,
                         .content_type = "application/json", .body = n > 1 ? part[1] : NULL,
                         .body_len = n > 1 ? len[1] : 0 };
    fz_api_flags(&h, data[0], data[1]);
    fz_api_http(&h, n > 2 ? part[2] : NULL, n > 2 ? len[2] : 0);
    free(line);
    return 0;
}
