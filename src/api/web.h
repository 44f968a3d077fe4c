/* web.h - the web playground: GET / serves index.html and GET /web/{file}
 * the page's scripts, styles and icon. The files are embedded in the binary
 * at build time (tools/embed turns src/api/web/ into C data); serve
 * --web-root DIR serves a folder instead (for editing the page without a
 * rebuild), serve --no-web turns both routes into 404s.
 *
 *   struct web_params wp = web_default_params();
 *   wp.root = "/path/to/web";            // or wp.disabled = true
 *   if (web_configure(&wp, err, sizeof err) < 0) ... // once, before serving
 *   // api_routes[]: "/" -> web_index, "/web/" {file} -> web_file
 *
 * GET /web/info tells the page what this server offers (shadowing a file of
 * that name in --web-root). Every file answer carries a strong ETag (If-None-Match gives 304),
 * Cache-Control: no-cache (revalidate: the names do not change between
 * builds), a Content-Security-Policy of 'self' (the page has no inline
 * script or style), nosniff and no-referrer. From --web-root only regular
 * files below DIR are served: each path segment is letters, digits and
 * "._-" not starting with a dot, and every segment is opened without
 * following symlinks, so nothing outside DIR can be reached.
 *
 * Thread safety: web_configure runs once before the server starts; the
 * routes only read that state and may run on any thread at once. */
#ifndef OMNI_API_WEB_H
#define OMNI_API_WEB_H

#include <stdbool.h>
#include <stddef.h>

struct api;
struct ws_req;

struct web_params {
    const char *root;   /* serve files from this folder; NULL: the embedded ones */
    bool disabled;      /* --no-web: GET / and /web/... answer 404 */
};
struct web_params web_default_params(void);

/* Set the playground's source. 0, or a negative omni_err with a message
 * (root missing or not a folder). Not thread-safe: call before serving. */
int web_configure(const struct web_params *p, char *err, size_t errlen);

/* Routes (api_routes[] in api.c): GET|HEAD /, GET|HEAD /web/{file}. */
void web_index(struct api *a, struct ws_req *r, const char *arg);
void web_file(struct api *a, struct ws_req *r, const char *arg);
/* GET /web/info: {"key_ok", and with a working key "model" (or null),
 * "vision", "stt", "vad", "tts"} for the page to enable what the server has. */
void web_info(struct api *a, struct ws_req *r, const char *arg);

/* The content type served for a file name ("app.js" -> "text/javascript;
 * charset=utf-8"); application/octet-stream for unknown extensions. */
const char *web_content_type(const char *name);
/* Whether a request path below /web/ (or below --web-root) may be served:
 * segments of [A-Za-z0-9._-], none empty or starting with '.'. */
bool web_name_ok(const char *name);

#endif
