/* ws_multipart.c - incremental multipart/form-data parser behind ws_multipart.h.
 *
 * Unconsumed input waits in one buffer; each state consumes what it can and
 * keeps back at most a delimiter's length, so a boundary split over any two
 * chunks is still found. The body is treated as if it began with CRLF: the
 * first boundary line then looks like every other delimiter ("\r\n--B"). */
#define _GNU_SOURCE /* memmem */
#include "ws/ws_multipart.h"

#include "src/core/omni.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define MP_MAX_BOUNDARY 70    /* RFC 2046 */
#define MP_MAX_LINE_PAD 256   /* transport padding allowed after a delimiter */

enum mp_state { MP_PREAMBLE, MP_AFTER_DELIM, MP_HEADERS, MP_BODY, MP_DONE, MP_ERROR };

struct ws_multipart {
    struct ws_multipart_limits lim;
    enum mp_state state;
    int err_code;                          /* the first failure's enum omni_err */
    char delim[4 + MP_MAX_BOUNDARY + 1];   /* "\r\n--" + boundary */
    size_t dlen;
    char *buf;                             /* unconsumed input is buf[off, len) */
    size_t off, len, cap;
    struct ws_part *parts;
    int n_parts, cap_parts;
    size_t part_cap;                       /* capacity of the open part's data */
    size_t part_limit;                     /* the open part's size limit */
};

struct ws_multipart_limits ws_multipart_default_limits(void)
{
    return (struct ws_multipart_limits){
        .max_parts = 64,
        .max_header_bytes = 8192,
        .max_field_bytes = 1u << 20,
        .max_file_bytes = (size_t)1 << 30,
    };
}

static int mp_fail(struct ws_multipart *mp, char *err, size_t errlen, int code, const char *what)
{
    mp->state = MP_ERROR;
    mp->err_code = code;
    return omni_fail(err, errlen, code, "multipart: %s", what);
}

// ---- Content-Type and parameters ---------------------------------------------

/* Parses one `; name=value` parameter at *s (value a token or a quoted string
 * with backslash escapes). Returns false at the end of the list. The name and
 * value are copied into the caller's buffers, truncated to fit. */
static bool mp_next_param(const char **s, char *name, size_t ncap, char *val, size_t vcap)
{
    const char *p = *s;
    while (*p && *p != ';')
        p++;
    if (*p != ';')
        return false;
    p++;
    while (*p == ' ' || *p == '\t')
        p++;
    size_t n = 0;
    while (*p && *p != '=' && *p != ';' && *p != ' ' && *p != '\t') {
        if (n + 1 < ncap)
            name[n++] = *p;
        p++;
    }
    name[n] = 0;
    while (*p == ' ' || *p == '\t')
        p++;
    size_t v = 0;
    if (*p == '=') {
        p++;
        while (*p == ' ' || *p == '\t')
            p++;
        if (*p == '"') {
            for (p++; *p && *p != '"'; p++) {
                if (*p == '\\' && p[1])
                    p++;
                if (v + 1 < vcap)
                    val[v++] = *p;
            }
            if (*p == '"')
                p++;
        } else {
            while (*p && *p != ';' && *p != ' ' && *p != '\t') {
                if (v + 1 < vcap)
                    val[v++] = *p;
                p++;
            }
        }
    }
    val[v] = 0;
    *s = p;
    return true;
}

struct ws_multipart *ws_multipart_new(const char *content_type,
                                      const struct ws_multipart_limits *lim, char *err,
                                      size_t errlen)
{
    static const char mt[] = "multipart/form-data";
    if (!content_type || strncasecmp(content_type, mt, sizeof mt - 1) ||
        (content_type[sizeof mt - 1] && content_type[sizeof mt - 1] != ';' &&
         content_type[sizeof mt - 1] != ' ')) {
        omni_fail(err, errlen, OMNI_ERR_FORMAT,
                  "multipart: the Content-Type must be multipart/form-data");
        return NULL;
    }
    char name[32], val[MP_MAX_BOUNDARY + 2];
    const char *p = content_type;
    bool found = false;
    while (!found && mp_next_param(&p, name, sizeof name, val, sizeof val))
        found = !strcasecmp(name, "boundary");
    size_t blen = found ? strlen(val) : 0;
    if (blen == 0 || blen > MP_MAX_BOUNDARY) {
        omni_fail(err, errlen, OMNI_ERR_FORMAT,
                  found ? "multipart: the boundary must be 1..70 characters"
                        : "multipart: the Content-Type has no boundary");
        return NULL;
    }
    struct ws_multipart *mp = calloc(1, sizeof *mp);
    if (!mp) {
        omni_fail(err, errlen, OMNI_ERR_NOMEM, "multipart: out of memory");
        return NULL;
    }
    mp->lim = lim ? *lim : ws_multipart_default_limits();
    mp->dlen = 4 + blen;
    memcpy(mp->delim, "\r\n--", 4);
    memcpy(mp->delim + 4, val, blen);
    /* The virtual CRLF in front of the body (see the top of the file). */
    mp->buf = malloc(256);
    if (!mp->buf) {
        free(mp);
        omni_fail(err, errlen, OMNI_ERR_NOMEM, "multipart: out of memory");
        return NULL;
    }
    mp->cap = 256;
    memcpy(mp->buf, "\r\n", 2);
    mp->len = 2;
    return mp;
}

// ---- parts -----------------------------------------------------------------------

static int mp_part_append(struct ws_multipart *mp, const char *data, size_t n, char *err,
                          size_t errlen)
{
    struct ws_part *pt = &mp->parts[mp->n_parts - 1];
    if (n == 0)
        return 0;
    if (n > mp->part_limit || pt->len > mp->part_limit - n) {
        char msg[160];
        snprintf(msg, sizeof msg, "part '%.40s' is larger than %zu bytes", pt->name,
                 mp->part_limit);
        return mp_fail(mp, err, errlen, OMNI_ERR_LIMIT, msg);
    }
    if (pt->len + n + 1 > mp->part_cap) {
        size_t cap = mp->part_cap ? mp->part_cap : 1024;
        while (cap < pt->len + n + 1)
            cap = cap > SIZE_MAX / 2 ? pt->len + n + 1 : cap * 2;
        char *nd = realloc(pt->data, cap);
        if (!nd)
            return mp_fail(mp, err, errlen, OMNI_ERR_NOMEM, "out of memory");
        pt->data = nd;
        mp->part_cap = cap;
    }
    memcpy(pt->data + pt->len, data, n);
    pt->len += n;
    pt->data[pt->len] = 0;
    return 0;
}

/* The header block hdr[0, n) (lines separated by CRLF, no final blank line)
 * opens a new part. */
static int mp_open_part(struct ws_multipart *mp, const char *hdr, size_t n, char *err,
                        size_t errlen)
{
    if (mp->n_parts >= mp->lim.max_parts) {
        char msg[64];
        snprintf(msg, sizeof msg, "more than %d parts", mp->lim.max_parts);
        return mp_fail(mp, err, errlen, OMNI_ERR_LIMIT, msg);
    }
    if (memchr(hdr, 0, n))
        return mp_fail(mp, err, errlen, OMNI_ERR_FORMAT, "NUL byte in a part header");
    if (mp->n_parts == mp->cap_parts) {
        int cap = mp->cap_parts ? mp->cap_parts * 2 : 8;
        struct ws_part *np = realloc(mp->parts, (size_t)cap * sizeof *np);
        if (!np)
            return mp_fail(mp, err, errlen, OMNI_ERR_NOMEM, "out of memory");
        mp->parts = np;
        mp->cap_parts = cap;
    }
    struct ws_part *pt = &mp->parts[mp->n_parts++];
    memset(pt, 0, sizeof *pt);
    mp->part_cap = 0;
    char *block = strndup(hdr, n);
    if (!block)
        return mp_fail(mp, err, errlen, OMNI_ERR_NOMEM, "out of memory");
    bool disposition = false;
    int rc = 0;
    for (char *line = block, *next; line && !rc; line = next) {
        char *eol = strstr(line, "\r\n");
        next = eol ? eol + 2 : NULL;
        if (eol)
            *eol = 0;
        if (!*line || *line == ' ' || *line == '\t')
            continue;   /* obsolete line folding: the continuation is ignored */
        char *colon = strchr(line, ':');
        if (!colon) {
            rc = mp_fail(mp, err, errlen, OMNI_ERR_FORMAT, "part header line without ':'");
            break;
        }
        *colon = 0;
        const char *value = colon + 1;
        while (*value == ' ' || *value == '\t')
            value++;
        if (!strcasecmp(line, "content-disposition")) {
            if (strncasecmp(value, "form-data", 9) || (value[9] && value[9] != ';' &&
                                                       value[9] != ' ')) {
                rc = mp_fail(mp, err, errlen, OMNI_ERR_FORMAT,
                             "part Content-Disposition is not form-data");
                break;
            }
            disposition = true;
            char pname[32], pval[1024];
            const char *p = value;
            while (mp_next_param(&p, pname, sizeof pname, pval, sizeof pval)) {
                char **dst = !strcasecmp(pname, "name") ? &pt->name
                             : !strcasecmp(pname, "filename") ? &pt->filename : NULL;
                if (dst && !*dst && !(*dst = strdup(pval)))
                    rc = mp_fail(mp, err, errlen, OMNI_ERR_NOMEM, "out of memory");
            }
        } else if (!strcasecmp(line, "content-type") && !pt->content_type) {
            if (!(pt->content_type = strdup(value)))
                rc = mp_fail(mp, err, errlen, OMNI_ERR_NOMEM, "out of memory");
        }
    }
    free(block);
    if (!rc && !disposition)
        rc = mp_fail(mp, err, errlen, OMNI_ERR_FORMAT, "a part has no Content-Disposition header");
    if (!rc && !pt->name && !(pt->name = strdup("")))
        rc = mp_fail(mp, err, errlen, OMNI_ERR_NOMEM, "out of memory");
    if (!rc && !(pt->data = malloc(1)))
        rc = mp_fail(mp, err, errlen, OMNI_ERR_NOMEM, "out of memory");
    if (rc)
        return rc;
    pt->data[0] = 0;
    mp->part_cap = 1;
    mp->part_limit = pt->filename ? mp->lim.max_file_bytes : mp->lim.max_field_bytes;
    return 0;
}

// ---- the state machine -------------------------------------------------------------

/* Consumes as much of buf[off, len) as the state allows. */
static int mp_run(struct ws_multipart *mp, char *err, size_t errlen)
{
    for (;;) {
        const char *p = mp->buf + mp->off;
        size_t n = mp->len - mp->off;
        switch (mp->state) {
        case MP_PREAMBLE:
        case MP_BODY: {
            const char *hit = memmem(p, n, mp->delim, mp->dlen);
            size_t take = hit ? (size_t)(hit - p) : (n >= mp->dlen ? n - (mp->dlen - 1) : 0);
            if (mp->state == MP_BODY && mp_part_append(mp, p, take, err, errlen))
                return mp->state == MP_ERROR ? -1 : 0;
            mp->off += take;
            if (!hit)
                return 0;
            mp->off += mp->dlen;
            mp->state = MP_AFTER_DELIM;
            break;
        }
        case MP_AFTER_DELIM: {
            if (n >= 1 && p[0] == '-') {
                if (n < 2)
                    return 0;   /* "--" of the closing boundary may follow */
                if (p[1] == '-') {
                    mp->state = MP_DONE;
                    break;
                }
            }
            size_t i = 0;
            while (i < n && (p[i] == ' ' || p[i] == '\t'))
                i++;
            if (i > MP_MAX_LINE_PAD)
                return mp_fail(mp, err, errlen, OMNI_ERR_FORMAT, "boundary line too long");
            if (i + 2 > n) {
                if (i < n && p[i] != '\r')
                    return mp_fail(mp, err, errlen, OMNI_ERR_FORMAT,
                                   "boundary followed by other text");
                return 0;   /* wait for more */
            }
            if (p[i] != '\r' || p[i + 1] != '\n')
                return mp_fail(mp, err, errlen, OMNI_ERR_FORMAT, "boundary followed by other text");
            mp->off += i + 2;
            mp->state = MP_HEADERS;
            break;
        }
        case MP_HEADERS: {
            size_t hlen;
            if (n >= 2 && p[0] == '\r' && p[1] == '\n') {
                hlen = 0;    /* no header lines at all */
                mp->off += 2;
            } else {
                const char *end = memmem(p, n, "\r\n\r\n", 4);
                size_t seen = end ? (size_t)(end - p) : n;
                if (seen > mp->lim.max_header_bytes)
                    return mp_fail(mp, err, errlen, OMNI_ERR_LIMIT, "part headers too long");
                if (!end)
                    return 0;
                hlen = seen;
                mp->off += hlen + 4;
            }
            if (mp_open_part(mp, p, hlen, err, errlen))
                return -1;
            mp->state = MP_BODY;
            break;
        }
        case MP_DONE:
            mp->off = mp->len;   /* the epilogue is ignored */
            return 0;
        case MP_ERROR:
            return -1;
        }
    }
}

int ws_multipart_feed(struct ws_multipart *mp, const void *data, size_t len, char *err,
                      size_t errlen)
{
    if (mp->state == MP_ERROR)
        return omni_fail(err, errlen, mp->err_code, "multipart: parser already failed");
    if (mp->state == MP_DONE || len == 0)
        return 0;
    /* Compact, then grow: only a delimiter's worth (or an unfinished header
     * block) ever waits here between feeds. */
    if (mp->off > 0) {
        memmove(mp->buf, mp->buf + mp->off, mp->len - mp->off);
        mp->len -= mp->off;
        mp->off = 0;
    }
    size_t need;
    if (omni_add_size(mp->len, len, &need))
        return mp_fail(mp, err, errlen, OMNI_ERR_LIMIT, "input too large");
    if (need > mp->cap) {
        size_t cap = mp->cap * 2 > need ? mp->cap * 2 : need;
        char *nb = realloc(mp->buf, cap);
        if (!nb)
            return mp_fail(mp, err, errlen, OMNI_ERR_NOMEM, "out of memory");
        mp->buf = nb;
        mp->cap = cap;
    }
    memcpy(mp->buf + mp->len, data, len);
    mp->len += len;
    return mp_run(mp, err, errlen) < 0 ? mp->err_code : 0;
}

int ws_multipart_finish(struct ws_multipart *mp, char *err, size_t errlen)
{
    if (mp->state == MP_DONE)
        return 0;
    if (mp->state == MP_ERROR)
        return omni_fail(err, errlen, OMNI_ERR_FORMAT, "multipart: parser already failed");
    return mp_fail(mp, err, errlen, OMNI_ERR_FORMAT,
                   mp->state == MP_PREAMBLE ? "no boundary found in the body"
                                            : "body ends before the closing boundary");
}

int ws_multipart_count(const struct ws_multipart *mp) { return mp->n_parts; }

const struct ws_part *ws_multipart_part(const struct ws_multipart *mp, int i)
{
    return i >= 0 && i < mp->n_parts ? &mp->parts[i] : NULL;
}

const struct ws_part *ws_multipart_find(const struct ws_multipart *mp, const char *name)
{
    for (int i = 0; i < mp->n_parts; i++)
        if (!strcmp(mp->parts[i].name, name))
            return &mp->parts[i];
    return NULL;
}

void ws_multipart_free(struct ws_multipart *mp)
{
    if (!mp)
        return;
    for (int i = 0; i < mp->n_parts; i++) {
        free(mp->parts[i].name);
        free(mp->parts[i].filename);
        free(mp->parts[i].content_type);
        free(mp->parts[i].data);
    }
    free(mp->parts);
    free(mp->buf);
    free(mp);
}
