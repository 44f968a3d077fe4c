/* ws_multipart.h - an incremental multipart/form-data parser (RFC 7578) for
 * request bodies: feed bytes in chunks of any size (a boundary or header may
 * be split anywhere), then read the parts. Hostile input gets a clear error,
 * never a crash: limits on parts, header bytes and part sizes.
 *
 *   struct ws_multipart_limits lim = ws_multipart_default_limits();
 *   struct ws_multipart *mp = ws_multipart_new(content_type_header, &lim, err, sizeof err);
 *   ws_multipart_feed(mp, chunk, len, err, sizeof err);     // any number of times
 *   ws_multipart_finish(mp, err, sizeof err);               // the closing boundary was seen?
 *   const struct ws_part *file = ws_multipart_find(mp, "file");
 *   ws_multipart_free(mp);
 *
 * Thread safety: a parser belongs to one thread at a time. Errors: negative
 * enum omni_err (OMNI_ERR_FORMAT malformed, OMNI_ERR_LIMIT over a limit,
 * OMNI_ERR_NOMEM) plus one line in err; after an error every call fails. */
#ifndef OMNI_WS_MULTIPART_H
#define OMNI_WS_MULTIPART_H

#include <stddef.h>

struct ws_multipart;

struct ws_multipart_limits {
    int max_parts;              /* default 64 */
    size_t max_header_bytes;    /* one part's header block; default 8 KiB */
    size_t max_field_bytes;     /* a part without a filename; default 1 MiB */
    size_t max_file_bytes;      /* a part with a filename; default 1 GiB */
};
struct ws_multipart_limits ws_multipart_default_limits(void);

/* One part. Strings are NUL-terminated; data is too (len excludes the NUL),
 * so text fields can be used as C strings. Owned by the parser. */
struct ws_part {
    char *name;          /* Content-Disposition name; "" when absent */
    char *filename;      /* NULL when absent (a plain field) */
    char *content_type;  /* NULL when absent */
    char *data;
    size_t len;
};

/* content_type: the request's Content-Type header ("multipart/form-data;
 * boundary=..."). NULL + message when it is not multipart/form-data or has
 * no valid boundary (1..70 characters). */
struct ws_multipart *ws_multipart_new(const char *content_type,
                                      const struct ws_multipart_limits *lim, char *err,
                                      size_t errlen);
int ws_multipart_feed(struct ws_multipart *mp, const void *data, size_t len, char *err,
                      size_t errlen);
/* End of body: fails unless the closing "--boundary--" was seen. */
int ws_multipart_finish(struct ws_multipart *mp, char *err, size_t errlen);

int ws_multipart_count(const struct ws_multipart *mp);
const struct ws_part *ws_multipart_part(const struct ws_multipart *mp, int i);
/* The first part with this name, or NULL. */
const struct ws_part *ws_multipart_find(const struct ws_multipart *mp, const char *name);
void ws_multipart_free(struct ws_multipart *mp);

#endif
