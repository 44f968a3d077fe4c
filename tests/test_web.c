/* test_web.c - the web playground's file rules (src/api/web.c): which names
 * may be served, their content types, --web-root checks and the files
 * tools/embed put into the binary. The routes themselves run in
 * tests/browser (web_routes.test.mjs, playground.test.mjs). */
#include "tests/test.h"

#include "src/api/web.h"
#include "src/core/omni.h"

#include <stdlib.h>
#include <string.h>

struct embed_file {
    const char *name;
    const unsigned char *data;
    size_t size;
    const char *etag;
};
extern const struct embed_file web_files[];

TEST(web_name_rules)
{
    static const char *ok[] = { "index.html", "app.js", "sub/x.css", "a-b_c.1.min.js", "_x", "a/b/c/d" };
    static const char *bad[] = {
        "", ".", "..", "../x", "a/../b", "a/./b", ".env", "sub/.git", "a//b", "a/", "/a",
        "a\\b", "a b", "a%2e", "x\n", "caf\xc3\xa9.js", "a:b", "a?b",
        "1/2/3/4/5/6/7/8/9/10/11/12/13/14/15/16/17",
    };
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++)
        CHECK(web_name_ok(ok[i]));
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        if (web_name_ok(bad[i])) {
            test_fail(__FILE__, __LINE__, "web_name_ok accepted '%s'", bad[i]);
            return;
        }
}

TEST(web_content_types)
{
    CHECK_STR_EQ(web_content_type("index.html"), "text/html; charset=utf-8");
    CHECK_STR_EQ(web_content_type("a/app.JS"), "text/javascript; charset=utf-8");
    CHECK_STR_EQ(web_content_type("app.css"), "text/css; charset=utf-8");
    CHECK_STR_EQ(web_content_type("icon.svg"), "image/svg+xml");
    CHECK_STR_EQ(web_content_type("x.wasm"), "application/wasm");
    CHECK_STR_EQ(web_content_type("README"), "application/octet-stream");
    CHECK_STR_EQ(web_content_type("a.b/c"), "application/octet-stream");
    CHECK_STR_EQ(web_content_type("x.exe"), "application/octet-stream");
}

TEST(web_embedded_files)
{
    static const char *want[] = { "index.html", "app.js", "app.css", "markdown.js", "audio.js",
                                  "mic-worklet.js", "icon.svg" };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        const struct embed_file *f = web_files;
        while (f->name && strcmp(f->name, want[i]))
            f++;
        CHECK(f->name != NULL);
        CHECK(f->size > 0);
        CHECK(f->data[f->size] == 0);   /* the generator's NUL after the bytes */
        CHECK(strlen(f->etag) == 18 && f->etag[0] == '"' && f->etag[17] == '"');
        CHECK(web_name_ok(f->name));
    }
    /* the page loads its script as a module from /web/, no inline script */
    const struct embed_file *f = web_files;
    while (strcmp(f->name, "index.html"))
        f++;
    CHECK(strstr((const char *)f->data, "<script type=\"module\" src=\"/web/app.js\"></script>"));
    CHECK(!strstr((const char *)f->data, "<script>"));
    CHECK(!strstr((const char *)f->data, " style=\""));
}

TEST(web_configure_checks_the_root)
{
    char err[256] = "";
    struct web_params p = web_default_params();
    p.root = "/nonexistent/omniserve-web";
    CHECK(web_configure(&p, err, sizeof err) == OMNI_ERR_IO);
    CHECK_STR_CONTAINS(err, "--web-root '/nonexistent/omniserve-web'");
    p.root = "/etc/hostname";   /* a file, not a folder */
    if (web_configure(&p, err, sizeof err) != 0)
        CHECK_STR_CONTAINS(err, "not a folder");
    p.root = test_tmpdir();
    CHECK(web_configure(&p, err, sizeof err) == 0);
    p = web_default_params();   /* back to the embedded files */
    CHECK(web_configure(&p, err, sizeof err) == 0);
}
