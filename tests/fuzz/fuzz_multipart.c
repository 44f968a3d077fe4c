/* fuzz_multipart.c - the incremental multipart/form-data parser of
 * ws/ws_multipart.c: the Content-Type header (boundary), then the body fed
 * in chunks of varying sizes (a boundary or header may be split anywhere),
 * under default or tight limits; every part is then read.
 *
 * Input: byte 0 picks tight limits (bit 0) and the chunking, then the
 * Content-Type value up to the first NUL, then the body. */
#include "tests/fuzz/fz_util.h"

#include "ws/ws_multipart.h"

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    const uint8_t *part[2];
    size_t len[2];
    int n = fz_split(data + 1, size - 1, part, len, 2);
    char *ctype = fz_strndup(part[0], len[0]);
    struct ws_multipart_limits lim = ws_multipart_default_limits();
    if (data[0] & 1) {
        lim.max_parts = 3;
        lim.max_header_bytes = 64;
        lim.max_field_bytes = 16;
        lim.max_file_bytes = 100;
    }
    char err[256];
    struct ws_multipart *mp = ws_multipart_new(ctype, &lim, err, sizeof err);
    free(ctype);
    if (!mp)
        return 0;
    const uint8_t *body = n > 1 ? part[1] : NULL;
    size_t body_len = n > 1 ? len[1] : 0;
    const size_t step = 1 + (data[0] >> 1);   /* 1..128 bytes per feed, then shifting */
    int rc = 0;
    for (size_t off = 0, k = 0; rc == 0 && off < body_len; k++) {
        size_t chunk = step + k % 3;
        if (chunk > body_len - off)
            chunk = body_len - off;
        /* an exact-size copy, so reading past a chunk is caught */
        uint8_t *c = malloc(chunk);
        if (!c)
            abort();
        memcpy(c, body + off, chunk);
        rc = ws_multipart_feed(mp, c, chunk, err, sizeof err);
        free(c);
        off += chunk;
    }
    if (rc == 0 && ws_multipart_finish(mp, err, sizeof err) == 0) {
        volatile size_t sink = 0;
        for (int i = 0; i < ws_multipart_count(mp); i++) {
            const struct ws_part *p = ws_multipart_part(mp, i);
            sink += strlen(p->name) + (p->filename ? strlen(p->filename) : 0) +
                    (p->content_type ? strlen(p->content_type) : 0) + p->len +
                    (unsigned char)p->data[p->len];
            if (ws_multipart_find(mp, p->name) == NULL)
                abort();   /* a part must be found by its own name */
        }
        (void)sink;
    }
    ws_multipart_free(mp);
    return 0;
}
