/* test_multipart.c - ws_multipart: a well-formed body fed whole, byte by byte
 * and at every split point; a list of hand-broken bodies (missing headers,
 * bad boundaries, truncation, oversized parts and headers, too many parts),
 * each a clean error; a boundary look-alike inside the data. */
#include "test.h"

#include "src/core/omni.h"
#include "ws/ws_multipart.h"

#include <stdlib.h>
#include <string.h>

#define CT "multipart/form-data; boundary=XyZ"

static const char good[] =
    "preamble to ignore\r\n"
    "--XyZ\r\n"
    "Content-Disposition: form-data; name=\"model\"\r\n"
    "\r\n"
    "whisper-1\r\n"
    "--XyZ  \r\n"   /* transport padding after a boundary is allowed */
    "content-disposition: form-data; name=\"file\"; filename=\"a \\\"b\\\".wav\"\r\n"
    "Content-Type: audio/wav\r\n"
    "\r\n"
    "RIFF\r\n--XyNOT a boundary\r\n\0binary\r\n"
    "--XyZ\r\n"
    "Content-Disposition: form-data; name=\"timestamp_granularities[]\"\r\n"
    "\r\n"
    "\r\n"
    "--XyZ--\r\n"
    "epilogue";

static const char file_data[] = "RIFF\r\n--XyNOT a boundary\r\n\0binary";

static int check_good(struct ws_multipart *mp)
{
    if (ws_multipart_count(mp) != 3)
        return 0;
    const struct ws_part *m = ws_multipart_find(mp, "model");
    const struct ws_part *f = ws_multipart_find(mp, "file");
    const struct ws_part *t = ws_multipart_find(mp, "timestamp_granularities[]");
    return m && !strcmp(m->data, "whisper-1") && m->len == 9 && !m->filename && f &&
           f->filename && !strcmp(f->filename, "a \"b\".wav") && f->content_type &&
           !strcmp(f->content_type, "audio/wav") && f->len == sizeof file_data - 1 &&
           !memcmp(f->data, file_data, f->len) && t && t->len == 0 &&
           !ws_multipart_find(mp, "nope");
}

TEST(multipart_whole_body)
{
    char err[256];
    struct ws_multipart *mp = ws_multipart_new(CT, NULL, err, sizeof err);
    CHECK(mp);
    CHECK(ws_multipart_feed(mp, good, sizeof good - 1, err, sizeof err) == 0);
    CHECK(ws_multipart_finish(mp, err, sizeof err) == 0);
    CHECK(check_good(mp));
    ws_multipart_free(mp);
}

TEST(multipart_every_split_point)
{
    char err[256];
    /* Two chunks split at every position, then one byte at a time. */
    for (size_t cut = 0; cut <= sizeof good - 1; cut++) {
        struct ws_multipart *mp = ws_multipart_new(CT, NULL, err, sizeof err);
        CHECK(mp);
        CHECK(ws_multipart_feed(mp, good, cut, err, sizeof err) == 0);
        CHECK(ws_multipart_feed(mp, good + cut, sizeof good - 1 - cut, err, sizeof err) == 0);
        CHECK(ws_multipart_finish(mp, err, sizeof err) == 0);
        CHECK_MSG(check_good(mp), "split at %zu", cut);
        ws_multipart_free(mp);
    }
    struct ws_multipart *mp = ws_multipart_new(CT, NULL, err, sizeof err);
    for (size_t i = 0; i < sizeof good - 1; i++)
        CHECK(ws_multipart_feed(mp, good + i, 1, err, sizeof err) == 0);
    CHECK(ws_multipart_finish(mp, err, sizeof err) == 0);
    CHECK(check_good(mp));
    ws_multipart_free(mp);
}

TEST(multipart_content_types)
{
    char err[256];
    struct ws_multipart *mp = ws_multipart_new("Multipart/Form-Data; charset=utf-8; "
                                               "boundary=\"quoted b\"", NULL, err, sizeof err);
    CHECK(mp);
    static const char body[] = "--quoted b\r\nContent-Disposition: form-data; name=x\r\n\r\n1\r\n"
                               "--quoted b--";
    CHECK(ws_multipart_feed(mp, body, sizeof body - 1, err, sizeof err) == 0);
    CHECK(ws_multipart_finish(mp, err, sizeof err) == 0);
    CHECK(ws_multipart_count(mp) == 1 && !strcmp(ws_multipart_part(mp, 0)->data, "1"));
    ws_multipart_free(mp);

    const char *bad[] = {
        NULL, "", "application/json", "multipart/form-dataX; boundary=a",
        "multipart/form-data", "multipart/form-data; boundary=",
        "multipart/form-data; boundary=\"\"",
        "multipart/form-data; boundary=0123456789012345678901234567890123456789012345678901234567890123456789X",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        err[0] = 0;
        CHECK_MSG(!ws_multipart_new(bad[i], NULL, err, sizeof err), "accepted %s", bad[i]);
        CHECK(strstr(err, "multipart:"));
    }
}

/* Feed body whole; expect a failure containing want (at feed or finish). */
static int fails_with(const char *body, size_t len, const struct ws_multipart_limits *lim,
                      const char *want, int want_code)
{
    char err[256] = "";
    struct ws_multipart *mp = ws_multipart_new(CT, lim, err, sizeof err);
    if (!mp)
        return 0;
    int rc = ws_multipart_feed(mp, body, len, err, sizeof err);
    if (rc == 0)
        rc = ws_multipart_finish(mp, err, sizeof err);
    /* After a failure everything keeps failing. */
    int again = ws_multipart_feed(mp, "x", 1, NULL, 0);
    ws_multipart_free(mp);
    if (rc == 0 || again == 0 || !strstr(err, want) || (want_code && rc != want_code)) {
        fprintf(stderr, "    body %.40s...: rc %d, err '%s' (want '%s')\n", body, rc, err, want);
        return 0;
    }
    return 1;
}

#define FAILS(body, want, code) fails_with(body, sizeof body - 1, NULL, want, code)

TEST(multipart_hostile_bodies)
{
    CHECK(FAILS("", "no boundary", OMNI_ERR_FORMAT));
    CHECK(FAILS("just text, no boundary at all", "no boundary", OMNI_ERR_FORMAT));
    CHECK(FAILS("--XyZ\r\nContent-Disposition: form-data; name=a\r\n\r\nunterminated",
                "before the closing", OMNI_ERR_FORMAT));
    CHECK(FAILS("--XyZ\r\nContent-Disposition: form-data; name=a\r\n", "before the closing",
                OMNI_ERR_FORMAT));
    CHECK(FAILS("--XyZ\r\n\r\nno headers\r\n--XyZ--", "no Content-Disposition", OMNI_ERR_FORMAT));
    CHECK(FAILS("--XyZ\r\nContent-Type: text/plain\r\n\r\nx\r\n--XyZ--", "no Content-Disposition",
                OMNI_ERR_FORMAT));
    CHECK(FAILS("--XyZ\r\nContent-Disposition: attachment; name=a\r\n\r\nx\r\n--XyZ--",
                "not form-data", OMNI_ERR_FORMAT));
    CHECK(FAILS("--XyZ\r\nno colon here\r\n\r\nx\r\n--XyZ--", "without ':'", OMNI_ERR_FORMAT));
    CHECK(FAILS("--XyZjunk\r\nContent-Disposition: form-data; name=a\r\n\r\nx\r\n--XyZ--",
                "followed by other text", OMNI_ERR_FORMAT));
    CHECK(FAILS("--XyZ\r\nContent-Disposition: form-data; name=a\0b\r\n\r\nx\r\n--XyZ--", "NUL",
                OMNI_ERR_FORMAT));

    struct ws_multipart_limits lim = ws_multipart_default_limits();
    lim.max_field_bytes = 4;
    lim.max_file_bytes = 8;
    static const char field5[] = "--XyZ\r\nContent-Disposition: form-data; name=a\r\n\r\n12345\r\n--XyZ--";
    CHECK(fails_with(field5, sizeof field5 - 1, &lim, "larger than 4 bytes", OMNI_ERR_LIMIT));
    static const char file9[] = "--XyZ\r\nContent-Disposition: form-data; name=f; filename=x\r\n\r\n"
                                "123456789\r\n--XyZ--";
    CHECK(fails_with(file9, sizeof file9 - 1, &lim, "larger than 8 bytes", OMNI_ERR_LIMIT));

    /* Endless headers and too many parts. */
    size_t big = 20000;
    char *hdr = malloc(big + 64);
    CHECK(hdr);
    strcpy(hdr, "--XyZ\r\nX-Long: ");
    memset(hdr + strlen(hdr), 'a', big);
    hdr[15 + big] = 0;
    int ok = fails_with(hdr, strlen(hdr), NULL, "headers too long", OMNI_ERR_LIMIT);
    free(hdr);
    CHECK(ok);
    lim = ws_multipart_default_limits();
    lim.max_parts = 3;
    char many[1024] = "";
    for (int i = 0; i < 4; i++)
        strcat(many, "--XyZ\r\nContent-Disposition: form-data; name=p\r\n\r\nv\r\n");
    strcat(many, "--XyZ--");
    CHECK(fails_with(many, strlen(many), &lim, "more than 3 parts", OMNI_ERR_LIMIT));
}

TEST(multipart_limit_is_exact)
{
    char err[256];
    struct ws_multipart_limits lim = ws_multipart_default_limits();
    lim.max_file_bytes = 8;
    struct ws_multipart *mp = ws_multipart_new(CT, &lim, err, sizeof err);
    static const char body[] = "--XyZ\r\nContent-Disposition: form-data; name=f; filename=x\r\n\r\n"
                               "12345678\r\n--XyZ--";
    CHECK(ws_multipart_feed(mp, body, sizeof body - 1, err, sizeof err) == 0);
    CHECK(ws_multipart_finish(mp, err, sizeof err) == 0);
    CHECK(ws_multipart_find(mp, "f")->len == 8);
    ws_multipart_free(mp);
    ws_multipart_free(NULL);
}
