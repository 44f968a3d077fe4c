/* download.c - Hugging Face hub downloads into the model cache (download.h).
 * A HEAD on the hub's resolve URL gives the size (x-linked-size or
 * Content-Length), the SHA-256 (x-linked-etag or ETag, when 64 hex digits)
 * and the CDN URL it redirects to; a GET with a Range from the .part's size
 * fetches the rest, hashing as it writes; the verified file is renamed in. */
#include "src/core/download.h"
#include "src/core/omni.h"

#include <cjson/cJSON.h>
#include <curl/curl.h>
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define DL_PATH_MAX 4096
#define DL_URL_MAX 8192

// ---- SHA-256 (FIPS 180-4) ---------------------------------------------------

struct dl_sha256 {
    uint32_t h[8];
    uint64_t n_bytes;
    uint8_t buf[64];
    size_t n_buf;
};

static const uint32_t dl_sha256_k[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4,
    0xab1c5ed5, 0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe,
    0x9bdc06a7, 0xc19bf174, 0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f,
    0x4a7484aa, 0x5cb0a9dc, 0x76f988da, 0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7,
    0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967, 0x27b70a85, 0x2e1b2138, 0x4d2c6dfc,
    0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85, 0xa2bfe8a1, 0xa81a664b,
    0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070, 0x19a4c116,
    0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7,
    0xc67178f2,
};

static void dl_sha256_init(struct dl_sha256 *s)
{
    static const uint32_t h0[8] = { 0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                                    0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19 };
    memcpy(s->h, h0, sizeof h0);
    s->n_bytes = 0;
    s->n_buf = 0;
}

static inline uint32_t dl_ror(uint32_t x, int n) { return (x >> n) | (x << (32 - n)); }

static void dl_sha256_block(uint32_t h[8], const uint8_t p[64])
{
    uint32_t w[64];
    for (int i = 0; i < 16; i++)
        w[i] = (uint32_t)p[4 * i] << 24 | (uint32_t)p[4 * i + 1] << 16 |
               (uint32_t)p[4 * i + 2] << 8 | p[4 * i + 3];
    for (int i = 16; i < 64; i++) {
        uint32_t s0 = dl_ror(w[i - 15], 7) ^ dl_ror(w[i - 15], 18) ^ (w[i - 15] >> 3);
        uint32_t s1 = dl_ror(w[i - 2], 17) ^ dl_ror(w[i - 2], 19) ^ (w[i - 2] >> 10);
        w[i] = w[i - 16] + s0 + w[i - 7] + s1;
    }
    uint32_t a = h[0], b = h[1], c = h[2], d = h[3], e = h[4], f = h[5], g = h[6], k = h[7];
    for (int i = 0; i < 64; i++) {
        uint32_t t1 = k + (dl_ror(e, 6) ^ dl_ror(e, 11) ^ dl_ror(e, 25)) + ((e & f) ^ (~e & g)) +
                      dl_sha256_k[i] + w[i];
        uint32_t t2 = (dl_ror(a, 2) ^ dl_ror(a, 13) ^ dl_ror(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));
        k = g;
        g = f;
        f = e;
        e = d + t1;
        d = c;
        c = b;
        b = a;
        a = t1 + t2;
    }
    h[0] += a; h[1] += b; h[2] += c; h[3] += d;
    h[4] += e; h[5] += f; h[6] += g; h[7] += k;
}

static void dl_sha256_update(struct dl_sha256 *s, const void *data, size_t n)
{
    const uint8_t *p = data;
    s->n_bytes += n;
    if (s->n_buf) {
        size_t take = 64 - s->n_buf < n ? 64 - s->n_buf : n;
        memcpy(s->buf + s->n_buf, p, take);
        s->n_buf += take;
        p += take;
        n -= take;
        if (s->n_buf < 64)
            return;
        dl_sha256_block(s->h, s->buf);
        s->n_buf = 0;
    }
    for (; n >= 64; p += 64, n -= 64)
        dl_sha256_block(s->h, p);
    memcpy(s->buf, p, n);
    s->n_buf = n;
}

/* Lower-case hex digest into hex[65]. */
static void dl_sha256_hex(struct dl_sha256 *s, char hex[65])
{
    const uint64_t bits = s->n_bytes * 8;
    const uint8_t pad = 0x80, zero = 0;
    dl_sha256_update(s, &pad, 1);
    while (s->n_buf != 56)
        dl_sha256_update(s, &zero, 1);
    uint8_t len[8];
    for (int i = 0; i < 8; i++)
        len[i] = (uint8_t)(bits >> (56 - 8 * i));
    dl_sha256_update(s, len, 8);
    for (int i = 0; i < 8; i++)
        snprintf(hex + 8 * i, 9, "%08" PRIx32, s->h[i]);
}

// ---- parameters, names, paths -------------------------------------------------

static const char *dl_env(const char *name)
{
    const char *v = getenv(name);
    return v && *v ? v : NULL;
}

struct download_params download_default_params(void)
{
    const char *off = dl_env("HF_HUB_OFFLINE");
    return (struct download_params){
        .endpoint = dl_env("HF_ENDPOINT") ? dl_env("HF_ENDPOINT") : "https://huggingface.co",
        .token = dl_env("HF_TOKEN"),
        .revision = "main",
        .cache_dir = dl_env("OMNISERVE_CACHE"),
        .offline = off && strcmp(off, "0") && strcasecmp(off, "false"),
        .progress = true,
        .max_retries = 5,
        .retry_delay_s = 1,
        .connect_timeout_s = 15,
        .stall_timeout_s = 60,
    };
}

/* One path component of a repo or file name: no "", ".", ".." and only
 * characters the hub allows in names (so a name never escapes the cache). */
static bool dl_component_ok(const char *s, size_t n)
{
    if (!n || (n == 1 && s[0] == '.') || (n == 2 && s[0] == '.' && s[1] == '.'))
        return false;
    for (size_t i = 0; i < n; i++) {
        const char c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '.' || c == '_' || c == '-' || c == '+'))
            return false;
    }
    return true;
}

/* "owner/name" when repo; any number of components for a file. */
static bool dl_name_ok(const char *s, bool repo)
{
    int parts = 0;
    for (const char *p = s;; parts++) {
        const char *slash = strchr(p, '/');
        size_t n = slash ? (size_t)(slash - p) : strlen(p);
        if (!dl_component_ok(p, n))
            return false;
        if (!slash)
            break;
        p = slash + 1;
    }
    return repo ? parts == 1 : true;
}

bool download_is_hf_ref(const char *s) { return s && !strncmp(s, "hf://", 5); }

static bool dl_contains_nocase(const char *s, const char *needle)
{
    for (const size_t n = strlen(needle); *s; s++)
        if (!strncasecmp(s, needle, n))
            return true;
    return false;
}

static bool dl_ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && !strcasecmp(s + n - m, suffix);
}

int download_parse_ref(const char *ref, char *repo, size_t repo_cap, char *file,
                       size_t file_cap, char *err, size_t errlen)
{
    const char *s = download_is_hf_ref(ref) ? ref + 5 : ref;
    const char *colon = strchr(s, ':');
    const char *slash = strchr(s, '/');
    size_t n_repo;
    const char *f;
    if (colon) { /* REPO:FILE */
        n_repo = (size_t)(colon - s);
        f = colon + 1;
    } else if (slash && strchr(slash + 1, '/')) { /* owner/name/file... */
        n_repo = (size_t)(strchr(slash + 1, '/') - s);
        f = s + n_repo + 1;
    } else {
        n_repo = strlen(s);
        f = "";
    }
    if (n_repo >= repo_cap || strlen(f) >= file_cap)
        return omni_fail(err, errlen, OMNI_ERR_ARG, "download: '%s': name too long", ref);
    memcpy(repo, s, n_repo);
    repo[n_repo] = 0;
    strcpy(file, f);
    if (!dl_name_ok(repo, true))
        return omni_fail(err, errlen, OMNI_ERR_ARG,
                         "download: '%s': the repo must look like owner/name (letters, digits, "
                         "'.', '_', '-')", ref);
    if (*file && !dl_name_ok(file, false))
        return omni_fail(err, errlen, OMNI_ERR_ARG, "download: '%s': bad file name '%s'", ref,
                         file);
    if (download_is_hf_ref(ref) && !*file)
        return omni_fail(err, errlen, OMNI_ERR_ARG,
                         "download: '%s': hf:// needs a file: hf://owner/name/FILE.gguf", ref);
    return 0;
}

int download_cache_path(const struct download_params *p, const char *repo, const char *file,
                        char *path, size_t cap, char *err, size_t errlen)
{
    if (!dl_name_ok(repo, true) || !dl_name_ok(file, false))
        return omni_fail(err, errlen, OMNI_ERR_ARG, "download: bad repo or file name '%s' '%s'",
                         repo, file);
    const char *rev = p->revision && *p->revision ? p->revision : "main";
    /* the revision becomes part of a directory name: keep it one plain component */
    char rev_dir[256];
    snprintf(rev_dir, sizeof rev_dir, "%s", rev);
    for (char *c = rev_dir; *c; c++)
        if (*c == '/')
            *c = '_';
    if (!dl_component_ok(rev_dir, strlen(rev_dir)))
        return omni_fail(err, errlen, OMNI_ERR_ARG, "download: bad revision '%s'", rev);
    int n;
    const bool main_rev = !strcmp(rev, "main");
    if (p->cache_dir && *p->cache_dir)
        n = snprintf(path, cap, "%s/%s%s%s/%s", p->cache_dir, repo, main_rev ? "" : "@",
                     main_rev ? "" : rev_dir, file);
    else if (dl_env("HOME"))
        n = snprintf(path, cap, "%s/.cache/omniserve/%s%s%s/%s", dl_env("HOME"), repo,
                     main_rev ? "" : "@", main_rev ? "" : rev_dir, file);
    else
        return omni_fail(err, errlen, OMNI_ERR_ARG,
                         "download: no model cache: set HOME or OMNISERVE_CACHE");
    if (n < 0 || (size_t)n >= cap)
        return omni_fail(err, errlen, OMNI_ERR_ARG, "download: cache path too long");
    return 0;
}

int download_cache_root(const struct download_params *p, char *path, size_t cap, char *err,
                        size_t errlen)
{
    int n;
    if (p->cache_dir && *p->cache_dir)
        n = snprintf(path, cap, "%s", p->cache_dir);
    else if (dl_env("HOME"))
        n = snprintf(path, cap, "%s/.cache/omniserve", dl_env("HOME"));
    else
        return omni_fail(err, errlen, OMNI_ERR_ARG,
                         "download: no model cache: set HOME or OMNISERVE_CACHE");
    if (n < 0 || (size_t)n >= cap)
        return omni_fail(err, errlen, OMNI_ERR_ARG, "download: cache path too long");
    return 0;
}

/* Does a GGUF file name carry quantization tag q? "Qwen3-4B-Q4_K_M.gguf"
 * has Q4_K_M but not Q4_K; multimodal projectors never count. */
static bool dl_has_quant(const char *name, const char *q)
{
    if (dl_contains_nocase(name, "mmproj"))
        return false;
    const size_t n = strlen(q);
    for (const char *s = name; *s; s++) {
        if (strncasecmp(s, q, n))
            continue;
        const char before = s == name ? '-' : s[-1], after = s[n];
        if (!isalnum((unsigned char)before) && !isalnum((unsigned char)after) && after != '_')
            return true;
    }
    return false;
}

/* A cached GGUF of repo with quantization tag quant (for aliases: the
 * second `serve -m qwen3-4b` needs no network). */
static bool dl_cached_quant(const struct download_params *p, const char *repo, const char *quant,
                            char *file, size_t cap)
{
    char dir[DL_PATH_MAX], err[256];
    if (download_cache_path(p, repo, "x", dir, sizeof dir, err, sizeof err))
        return false;
    dir[strlen(dir) - 2] = 0; /* drop "/x" */
    DIR *d = opendir(dir);
    if (!d)
        return false;
    bool found = false;
    struct dirent *e;
    while (!found && (e = readdir(d)))
        if (dl_ends_with(e->d_name, ".gguf") && !strstr(e->d_name, "-of-") &&
            dl_has_quant(e->d_name, quant) && strlen(e->d_name) < cap) {
            strcpy(file, e->d_name);
            found = true;
        }
    closedir(d);
    return found;
}

/* mkdir -p of the directory holding path. */
static int dl_mkdirs(const char *path, char *err, size_t errlen)
{
    char dir[DL_PATH_MAX];
    snprintf(dir, sizeof dir, "%s", path);
    char *last = strrchr(dir, '/');
    if (!last)
        return 0;
    *last = 0;
    for (char *c = dir + 1;; c++) {
        if (*c == '/' || !*c) {
            const char save = *c;
            *c = 0;
            if (mkdir(dir, 0755) && errno != EEXIST)
                return omni_fail(err, errlen, OMNI_ERR_IO, "download: cannot create %s: %s", dir,
                                 strerror(errno));
            *c = save;
            if (!save)
                return 0;
        }
    }
}

/* Percent-encode s into out, keeping unreserved characters (and '/' when
 * keep_slash: file paths keep their directories, a revision like
 * "refs/pr/1" becomes one segment). */
static void dl_urlenc(char *out, size_t cap, const char *s, bool keep_slash)
{
    size_t o = 0;
    for (; *s && o + 4 < cap; s++) {
        const unsigned char c = (unsigned char)*s;
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
            c == '-' || c == '.' || c == '_' || c == '~' || (keep_slash && c == '/'))
            out[o++] = (char)c;
        else
            o += (size_t)snprintf(out + o, cap - o, "%%%02X", c);
    }
    out[o] = 0;
}

// ---- HTTP -------------------------------------------------------------------

static pthread_once_t dl_curl_once = PTHREAD_ONCE_INIT;
static void dl_curl_global(void) { curl_global_init(CURL_GLOBAL_DEFAULT); }

/* What the headers of the last response in a chain said. */
struct dl_headers {
    long status;
    long long content_length;   /* -1: none */
    long long linked_size;      /* x-linked-size; -1: none */
    long long range_start;      /* Content-Range "bytes a-b/total": a; -1: none */
    long long range_total;      /* its total; -1: none or '*' */
    char sha256[65];            /* from x-linked-etag, else ETag, when a SHA-256 */
    bool linked_etag;           /* sha256 came from x-linked-etag (wins over ETag) */
    char error_msg[256];        /* x-error-message */
    char error_code[64];        /* x-error-code (RepoNotFound, GatedRepo, ...) */
};

static void dl_headers_reset(struct dl_headers *h)
{
    *h = (struct dl_headers){ .content_length = -1, .linked_size = -1, .range_start = -1,
                              .range_total = -1 };
}

/* A header value without surrounding blanks, copied into out. */
static void dl_header_value(const char *v, size_t n, char *out, size_t cap)
{
    while (n && (*v == ' ' || *v == '\t'))
        v++, n--;
    while (n && (v[n - 1] == '\r' || v[n - 1] == '\n' || v[n - 1] == ' '))
        n--;
    if (n >= cap)
        n = cap - 1;
    memcpy(out, v, n);
    out[n] = 0;
}

/* An ETag that is a SHA-256: optional W/, optional quotes, 64 hex digits. */
static bool dl_etag_sha256(const char *v, char out[65])
{
    if (!strncmp(v, "W/", 2))
        v += 2;
    if (*v == '"')
        v++;
    for (int i = 0; i < 64; i++) {
        const char c = v[i];
        if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F')))
            return false;
        out[i] = (char)(c >= 'A' && c <= 'F' ? c - 'A' + 'a' : c);
    }
    out[64] = 0;
    return v[64] == 0 || v[64] == '"';
}

static size_t dl_on_header(char *buf, size_t size, size_t n, void *user)
{
    struct dl_headers *h = user;
    const size_t len = size * n;
    char val[512];
    if (len >= 5 && !strncmp(buf, "HTTP/", 5)) { /* a new response in the redirect chain */
        dl_headers_reset(h);
        const char *sp = memchr(buf, ' ', len);
        h->status = sp ? strtol(sp + 1, NULL, 10) : 0;
        return len;
    }
    const char *colon = memchr(buf, ':', len);
    if (!colon)
        return len;
    const size_t nlen = (size_t)(colon - buf);
    dl_header_value(colon + 1, len - nlen - 1, val, sizeof val);
#define DL_IS(name) (nlen == sizeof(name) - 1 && !strncasecmp(buf, name, nlen))
    if (DL_IS("content-length"))
        h->content_length = strtoll(val, NULL, 10);
    else if (DL_IS("x-linked-size"))
        h->linked_size = strtoll(val, NULL, 10);
    else if (DL_IS("x-linked-etag"))
        h->linked_etag = dl_etag_sha256(val, h->sha256);
    else if (DL_IS("etag") && !h->linked_etag && !dl_etag_sha256(val, h->sha256))
        h->sha256[0] = 0;
    else if (DL_IS("x-error-message"))
        snprintf(h->error_msg, sizeof h->error_msg, "%.255s", val);
    else if (DL_IS("x-error-code"))
        snprintf(h->error_code, sizeof h->error_code, "%.63s", val);
    else if (DL_IS("content-range")) {
        long long a, b, t;
        if (sscanf(val, "bytes %lld-%lld/%lld", &a, &b, &t) == 3) {
            h->range_start = a;
            h->range_total = t;
        } else if (sscanf(val, "bytes %lld-%lld/*", &a, &b) == 2) {
            h->range_start = a;
        }
    }
#undef DL_IS
    return len;
}

/* scheme://host:port of url into out ("" when it does not parse). */
static void dl_origin(const char *url, char *out, size_t cap)
{
    out[0] = 0;
    CURLU *u = curl_url();
    char *scheme = NULL, *host = NULL, *port = NULL;
    if (u && !curl_url_set(u, CURLUPART_URL, url, 0) &&
        !curl_url_get(u, CURLUPART_SCHEME, &scheme, 0) &&
        !curl_url_get(u, CURLUPART_HOST, &host, 0) &&
        !curl_url_get(u, CURLUPART_PORT, &port, CURLU_DEFAULT_PORT))
        snprintf(out, cap, "%s://%s:%s", scheme, host, port);
    curl_free(scheme);
    curl_free(host);
    curl_free(port);
    curl_url_cleanup(u);
}

struct dl_req {
    CURL *c;
    struct curl_slist *hdrs;
    char errbuf[CURL_ERROR_SIZE];
};

/* A handle for url: timeouts, http(s) only, our user agent, and the token
 * when url is on the hub itself (never for the CDN it redirects to: curl
 * also drops the header when a redirect leaves the host). */
static int dl_req_init(struct dl_req *r, const struct download_params *p, const char *url,
                       char *err, size_t errlen)
{
    pthread_once(&dl_curl_once, dl_curl_global);
    *r = (struct dl_req){ .c = curl_easy_init() };
    if (!r->c)
        return omni_fail(err, errlen, OMNI_ERR_NOMEM, "download: cannot create a curl handle");
    char o_url[512], o_hub[512];
    dl_origin(url, o_url, sizeof o_url);
    dl_origin(p->endpoint, o_hub, sizeof o_hub);
    if (p->token && *p->token && *o_url && !strcmp(o_url, o_hub)) {
        char auth[1024];
        snprintf(auth, sizeof auth, "Authorization: Bearer %s", p->token);
        struct curl_slist *l = curl_slist_append(NULL, auth);
        if (!l) {
            curl_easy_cleanup(r->c);
            return omni_fail(err, errlen, OMNI_ERR_NOMEM, "download: out of memory");
        }
        r->hdrs = l;
    }
    curl_easy_setopt(r->c, CURLOPT_URL, url);
    curl_easy_setopt(r->c, CURLOPT_HTTPHEADER, r->hdrs);
    curl_easy_setopt(r->c, CURLOPT_USERAGENT, "omniserve/" OMNI_VERSION);
    curl_easy_setopt(r->c, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(r->c, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(r->c, CURLOPT_CONNECTTIMEOUT, p->connect_timeout_s);
    curl_easy_setopt(r->c, CURLOPT_LOW_SPEED_LIMIT, 1L);
    curl_easy_setopt(r->c, CURLOPT_LOW_SPEED_TIME, p->stall_timeout_s);
    curl_easy_setopt(r->c, CURLOPT_ERRORBUFFER, r->errbuf);
    curl_easy_setopt(r->c, CURLOPT_NOSIGNAL, 1L);
    return 0;
}

static void dl_req_free(struct dl_req *r)
{
    curl_easy_cleanup(r->c);
    curl_slist_free_all(r->hdrs);
}

static const char *dl_curl_msg(const struct dl_req *r, CURLcode cc)
{
    return r->errbuf[0] ? r->errbuf : curl_easy_strerror(cc);
}

/* The HTTP error as one line: the hub's own x-error-message when it sent
 * one, and what to do about 401/403. */
static int dl_http_error(const struct dl_headers *h, const char *what, const char *rev,
                         char *err, size_t errlen)
{
    const char *msg = h->error_msg[0] ? h->error_msg : "";
    if (h->status == 401 || h->status == 403 || !strcmp(h->error_code, "GatedRepo"))
        return omni_fail(err, errlen, OMNI_ERR_IO,
                         "download: %s: access denied (HTTP %ld%s%s): the repo is private, "
                         "gated or does not exist; set HF_TOKEN to a token that may read it",
                         what, h->status, *msg ? ": " : "", msg);
    if (h->status == 404)
        return omni_fail(err, errlen, OMNI_ERR_NOTFOUND,
                         "download: %s: not found at revision '%s' (HTTP 404%s%s)", what, rev,
                         *msg ? ": " : "", msg);
    return omni_fail(err, errlen, OMNI_ERR_IO, "download: %s: HTTP %ld%s%s", what, h->status,
                     *msg ? ": " : "", msg);
}

/* What the file will be: where to GET it, its size and SHA-256 when known. */
struct dl_meta {
    char url[DL_URL_MAX];
    long long size;              /* -1: unknown */
    char sha256[65];             /* "": unknown */
};

/* HEAD the resolve URL. Redirects on the hub itself (a renamed repo, a
 * relative redirect) are followed; the first one elsewhere is the CDN, whose
 * URL we keep. The hub's x-linked-size / x-linked-etag describe the file
 * behind a redirect; a final 200 describes it with Content-Length and ETag. */
static int dl_head(const struct download_params *p, const char *url, const char *what,
                   struct dl_meta *m, char *err, size_t errlen)
{
    char cur[DL_URL_MAX], hub[512];
    snprintf(cur, sizeof cur, "%s", url);
    dl_origin(p->endpoint, hub, sizeof hub);
    m->size = -1;
    m->sha256[0] = 0;
    for (int hop = 0; hop < 10; hop++) {
        struct dl_req r;
        struct dl_headers h;
        dl_headers_reset(&h);
        int rc = dl_req_init(&r, p, cur, err, errlen);
        if (rc)
            return rc;
        curl_easy_setopt(r.c, CURLOPT_NOBODY, 1L);
        curl_easy_setopt(r.c, CURLOPT_HEADERFUNCTION, dl_on_header);
        curl_easy_setopt(r.c, CURLOPT_HEADERDATA, &h);
        CURLcode cc = curl_easy_perform(r.c);
        char *next = NULL;
        if (cc == CURLE_OK)
            curl_easy_getinfo(r.c, CURLINFO_REDIRECT_URL, &next);
        if (cc == CURLE_OK && m->size < 0 && h.linked_size >= 0)
            m->size = h.linked_size;
        if (cc == CURLE_OK && !m->sha256[0] && h.linked_etag)
            snprintf(m->sha256, sizeof m->sha256, "%s", h.sha256);
        if (cc != CURLE_OK) {
            rc = omni_fail(err, errlen, OMNI_ERR_IO, "download: cannot reach %s: %s", p->endpoint,
                           dl_curl_msg(&r, cc));
        } else if (h.status >= 300 && h.status < 400 && next) {
            char o_next[512];
            dl_origin(next, o_next, sizeof o_next);
            snprintf(cur, sizeof cur, "%s", next);
            dl_req_free(&r);
            if (!strcmp(o_next, hub))
                continue;
            snprintf(m->url, sizeof m->url, "%s", cur);
            return 0;
        } else if (h.status == 200) {
            if (m->size < 0)
                m->size = h.content_length;
            if (!m->sha256[0])
                snprintf(m->sha256, sizeof m->sha256, "%s", h.sha256);
            snprintf(m->url, sizeof m->url, "%s", cur);
        } else {
            rc = dl_http_error(&h, what, p->revision, err, errlen);
        }
        dl_req_free(&r);
        return rc;
    }
    return omni_fail(err, errlen, OMNI_ERR_IO, "download: %s: too many redirects", what);
}

// ---- progress ---------------------------------------------------------------

struct dl_get {
    const struct download_params *p;
    const char *name;            /* file name for the progress line */
    int fd;                      /* the .part */
    struct dl_headers h;
    struct dl_sha256 sha;
    long long have;              /* bytes in the .part (hashed) */
    long long start;             /* bytes there when this transfer began */
    long long expect;            /* final size; -1: unknown */
    bool body_started;
    bool truncated_restart;      /* the server ignored our Range: started over */
    bool cancelled;
    int io_errno;                /* a failed write */
    char bad[160];               /* a protocol problem found in the write callback */
    double t_start, t_shown;
    int shown_decile;
    bool tty;
};

static void dl_fmt_size(double b, char *out, size_t cap)
{
    if (b >= 1 << 30)
        snprintf(out, cap, "%.2f GiB", b / (1 << 30));
    else if (b >= 1 << 20)
        snprintf(out, cap, "%.1f MiB", b / (1 << 20));
    else
        snprintf(out, cap, "%.0f KiB", b / 1024);
}

/* "name  45.2%  180.2 MiB / 397.8 MiB  12.3 MiB/s  ETA 0:18" */
static void dl_show(struct dl_get *g, bool final)
{
    if (!g->p->progress)
        return;
    const double now = omni_time_s();
    const double pct = g->expect > 0 ? 100.0 * (double)g->have / (double)g->expect : 0;
    const int decile = (int)(pct / 10);
    if (g->tty ? !final && now - g->t_shown < 0.1 : decile == g->shown_decile)
        return;
    g->t_shown = now;
    g->shown_decile = decile;
    const double dt = now - g->t_start;
    const double speed = dt > 0 ? (double)(g->have - g->start) / dt : 0;
    char have[32], total[32], rate[32], eta[32] = "";
    dl_fmt_size((double)g->have, have, sizeof have);
    dl_fmt_size(g->expect > 0 ? (double)g->expect : 0, total, sizeof total);
    dl_fmt_size(speed, rate, sizeof rate);
    if (speed > 0 && g->expect > 0 && !final) {
        const long s = (long)((double)(g->expect - g->have) / speed);
        snprintf(eta, sizeof eta, "  ETA %ld:%02ld:%02ld", s / 3600, s / 60 % 60, s % 60);
    }
    if (g->expect > 0)
        fprintf(stderr, "%sdownload: %s %5.1f%%  %s / %s  %s/s%s%s", g->tty ? "\r" : "", g->name,
                pct, have, total, rate, eta, g->tty ? "\033[K" : "\n");
    else
        fprintf(stderr, "%sdownload: %s  %s  %s/s%s", g->tty ? "\r" : "", g->name, have, rate,
                g->tty ? "\033[K" : "\n");
    if (final && g->tty)
        fputc('\n', stderr);
}

static int dl_on_progress(void *user, curl_off_t dltotal, curl_off_t dlnow, curl_off_t ultotal,
                          curl_off_t ulnow)
{
    (void)dltotal, (void)dlnow, (void)ultotal, (void)ulnow;
    struct dl_get *g = user;
    if (g->p->cancel && g->p->cancel(g->p->cancel_user)) {
        g->cancelled = true;
        return 1;
    }
    if (g->body_started)
        dl_show(g, false);
    return 0;
}

// ---- the transfer -------------------------------------------------------------

/* Hash the first n bytes already in the .part (a resumed download). */
static int dl_hash_prefix(struct dl_get *g, long long n, char *err, size_t errlen)
{
    enum { CHUNK = 1 << 20 };
    if (lseek(g->fd, 0, SEEK_SET) < 0)
        return omni_fail(err, errlen, OMNI_ERR_IO, "download: seek: %s", strerror(errno));
    char *buf = malloc(CHUNK);
    if (!buf)
        return omni_fail(err, errlen, OMNI_ERR_NOMEM, "download: out of memory");
    int rc = 0;
    for (long long done = 0; done < n && !rc;) {
        const size_t want = n - done < CHUNK ? (size_t)(n - done) : CHUNK;
        const ssize_t got = read(g->fd, buf, want);
        if (got <= 0)
            rc = omni_fail(err, errlen, OMNI_ERR_IO, "download: read of the .part: %s",
                           got < 0 ? strerror(errno) : "short file");
        else
            dl_sha256_update(&g->sha, buf, (size_t)got);
        done += got > 0 ? got : 0;
    }
    free(buf);
    return rc;
}

/* Start the .part over (empty, fresh hash). */
static int dl_restart(struct dl_get *g)
{
    if (ftruncate(g->fd, 0) || lseek(g->fd, 0, SEEK_SET) < 0) {
        g->io_errno = errno;
        return -1;
    }
    dl_sha256_init(&g->sha);
    g->have = g->start = 0;
    return 0;
}

static size_t dl_on_body(char *data, size_t size, size_t n, void *user)
{
    struct dl_get *g = user;
    const size_t len = size * n;
    if (g->h.status != 200 && g->h.status != 206)
        return len; /* an error page: the status says what went wrong */
    if (!g->body_started) {
        g->body_started = true;
        if (g->h.status == 200 && g->have > 0) {
            /* the server ignored our Range: take the whole body from byte 0 */
            if (dl_restart(g))
                return 0;
            g->truncated_restart = true;
        } else if (g->h.status == 206 && g->h.range_start != g->have) {
            snprintf(g->bad, sizeof g->bad, "asked for bytes from %lld, got a range from %lld",
                     g->have, g->h.range_start);
            return 0;
        }
        const long long total = g->h.status == 206 ? g->h.range_total
                                : g->h.content_length >= 0 ? g->h.content_length : -1;
        if (g->expect < 0)
            g->expect = total;
        else if (total >= 0 && total != g->expect) {
            snprintf(g->bad, sizeof g->bad, "the hub announced %lld bytes, the download has %lld",
                     g->expect, total);
            return 0;
        }
    }
    if (g->expect >= 0 && g->have + (long long)len > g->expect) {
        snprintf(g->bad, sizeof g->bad, "more than the announced %lld bytes", g->expect);
        return 0;
    }
    for (size_t off = 0; off < len;) {
        const ssize_t w = write(g->fd, data + off, len - off);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            g->io_errno = errno;
            return 0;
        }
        off += (size_t)w;
    }
    dl_sha256_update(&g->sha, data, len);
    g->have += (long long)len;
    return len;
}

/* Errors worth a resume: the connection broke or stalled, or the server
 * had a passing problem. */
static bool dl_retryable(CURLcode cc, long status)
{
    return cc == CURLE_PARTIAL_FILE || cc == CURLE_RECV_ERROR || cc == CURLE_SEND_ERROR ||
           cc == CURLE_OPERATION_TIMEDOUT || cc == CURLE_GOT_NOTHING ||
           cc == CURLE_COULDNT_CONNECT || cc == CURLE_HTTP2_STREAM ||
           (cc == CURLE_OK && (status >= 500 || status == 429 || status == 408));
}

/* Sleep s seconds, waking early for a cancel. True when cancelled. */
static bool dl_wait(const struct download_params *p, double s)
{
    for (double t = 0; t < s; t += 0.1) {
        if (p->cancel && p->cancel(p->cancel_user))
            return true;
        struct timespec ts = { 0, 100 * 1000 * 1000 };
        nanosleep(&ts, NULL);
    }
    return p->cancel && p->cancel(p->cancel_user);
}

/* One GET from g->have on; 0 when the body is complete (or a 416 says
 * there is nothing left), 1 when worth a retry, else an error. */
static int dl_get_once(struct dl_get *g, const struct dl_meta *m, char *err, size_t errlen)
{
    struct dl_req r;
    int rc = dl_req_init(&r, g->p, m->url, err, errlen);
    if (rc)
        return rc;
    char range[64];
    snprintf(range, sizeof range, "%lld-", g->have);
    dl_headers_reset(&g->h);
    g->body_started = false;
    g->start = g->have;
    g->t_start = omni_time_s();
    curl_easy_setopt(r.c, CURLOPT_FOLLOWLOCATION, 1L);
    curl_easy_setopt(r.c, CURLOPT_MAXREDIRS, 10L);
    if (g->have > 0)
        curl_easy_setopt(r.c, CURLOPT_RANGE, range);
    curl_easy_setopt(r.c, CURLOPT_HEADERFUNCTION, dl_on_header);
    curl_easy_setopt(r.c, CURLOPT_HEADERDATA, &g->h);
    curl_easy_setopt(r.c, CURLOPT_WRITEFUNCTION, dl_on_body);
    curl_easy_setopt(r.c, CURLOPT_WRITEDATA, g);
    curl_easy_setopt(r.c, CURLOPT_XFERINFOFUNCTION, dl_on_progress);
    curl_easy_setopt(r.c, CURLOPT_XFERINFODATA, g);
    curl_easy_setopt(r.c, CURLOPT_NOPROGRESS, 0L);
    const CURLcode cc = curl_easy_perform(r.c);
    if (g->body_started)
        dl_show(g, cc == CURLE_OK);
    if (g->cancelled)
        rc = omni_fail(err, errlen, OMNI_ERR_IO, "download: %s: cancelled (%lld bytes kept for "
                       "a resume)", g->name, g->have);
    else if (g->io_errno)
        rc = omni_fail(err, errlen, OMNI_ERR_IO, "download: %s: write: %s", g->name,
                       strerror(g->io_errno));
    else if (g->bad[0])
        rc = omni_fail(err, errlen, OMNI_ERR_FORMAT, "download: %s: %s", g->name, g->bad);
    else if (cc == CURLE_OK && g->h.status == 416 && g->have > 0)
        rc = 0; /* nothing past what we have: the size check decides */
    else if (dl_retryable(cc, g->h.status))
        rc = 1;
    else if (cc != CURLE_OK)
        rc = omni_fail(err, errlen, OMNI_ERR_IO, "download: %s: %s", g->name, dl_curl_msg(&r, cc));
    else if (g->h.status != 200 && g->h.status != 206)
        rc = dl_http_error(&g->h, g->name, g->p->revision, err, errlen);
    else if (g->expect >= 0 && g->have < g->expect)
        rc = 1; /* the server ended early without an error */
    if (rc == 1)
        omni_fail(err, errlen, OMNI_ERR_IO, "download: %s: transfer broken after %lld bytes (%s)",
                  g->name, g->have,
                  cc != CURLE_OK ? dl_curl_msg(&r, cc) : "short or failed response");
    dl_req_free(&r);
    return rc;
}

/* Fetch m->url into part and check it; path is the final name. */
static int dl_fetch(const struct download_params *p, const struct dl_meta *m, const char *name,
                    const char *part, const char *path, char *err, size_t errlen)
{
    struct dl_get g = { .p = p, .name = name, .expect = m->size, .shown_decile = -1,
                        .tty = isatty(2) };
    g.fd = open(part, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (g.fd < 0)
        return omni_fail(err, errlen, OMNI_ERR_IO, "download: cannot open %s: %s", part,
                         strerror(errno));
    int rc = 0;
    if (flock(g.fd, LOCK_EX | LOCK_NB)) {
        rc = omni_fail(err, errlen, OMNI_ERR_LIMIT,
                       "download: %s is in progress in another process (%s is locked)", name, part);
        goto done;
    }
    if (access(path, F_OK) == 0) /* the other process finished while we waited */
        goto done;
    dl_sha256_init(&g.sha);
    struct stat st;
    if (fstat(g.fd, &st)) {
        rc = omni_fail(err, errlen, OMNI_ERR_IO, "download: %s: %s", part, strerror(errno));
        goto done;
    }
    g.have = st.st_size;
    if (m->size >= 0 && g.have > m->size) {
        if (dl_restart(&g)) {
            rc = omni_fail(err, errlen, OMNI_ERR_IO, "download: %s: %s", part, strerror(g.io_errno));
            goto done;
        }
    }
    if (g.have > 0) {
        if (p->progress)
            fprintf(stderr, "download: %s: resuming at %lld bytes\n", name, g.have);
        if ((rc = dl_hash_prefix(&g, g.have, err, errlen)))
            goto done;
    }
    if (lseek(g.fd, 0, SEEK_END) < 0) {
        rc = omni_fail(err, errlen, OMNI_ERR_IO, "download: seek: %s", strerror(errno));
        goto done;
    }
    double delay = p->retry_delay_s;
    for (int attempt = 0;; attempt++) {
        if (m->size >= 0 && g.have == m->size && m->size > 0)
            break; /* the .part was already complete */
        rc = dl_get_once(&g, m, err, errlen);
        if (rc != 1)
            break;
        if (attempt >= p->max_retries) {
            rc = OMNI_ERR_IO; /* err holds the last failure */
            goto done;
        }
        if (p->progress)
            fprintf(stderr, "%s; retrying in %.1f s (%d/%d)\n", err, delay, attempt + 1,
                    p->max_retries);
        if (dl_wait(p, delay)) {
            rc = omni_fail(err, errlen, OMNI_ERR_IO, "download: %s: cancelled (%lld bytes kept "
                           "for a resume)", name, g.have);
            goto done;
        }
        delay = delay * 2 > 30 ? 30 : delay * 2;
    }
    if (rc)
        goto done;
    if (g.expect >= 0 && g.have != g.expect) {
        rc = omni_fail(err, errlen, OMNI_ERR_FORMAT, "download: %s: size mismatch: %lld bytes, "
                       "expected %lld (the .part was removed)", name, g.have, g.expect);
        unlink(part);
        goto done;
    }
    char hex[65];
    dl_sha256_hex(&g.sha, hex);
    if (m->sha256[0] && strcmp(hex, m->sha256)) {
        rc = omni_fail(err, errlen, OMNI_ERR_FORMAT, "download: %s: SHA-256 mismatch: got %s, "
                       "the hub says %s (the .part was removed)", name, hex, m->sha256);
        unlink(part);
        goto done;
    }
    if (fdatasync(g.fd) || rename(part, path)) {
        rc = omni_fail(err, errlen, OMNI_ERR_IO, "download: %s -> %s: %s", part, path,
                       strerror(errno));
        goto done;
    }
    if (p->progress)
        fprintf(stderr, "download: %s: %lld bytes%s%s -> %s\n", name, g.have,
                m->sha256[0] ? ", SHA-256 verified" : "",
                g.truncated_restart ? " (the server ignored the resume range)" : "", path);
done:
    close(g.fd);
    return rc;
}

// ---- picking the file of a repo -------------------------------------------------

struct dl_buf {
    char *data;
    size_t len, cap;
    size_t max;     /* refuse bodies longer than this; 0: 64 MiB */
    bool too_big;   /* the body went over max */
};

static size_t dl_on_buf(char *data, size_t size, size_t n, void *user)
{
    struct dl_buf *b = user;
    const size_t len = size * n;
    if (b->len + len + 1 > b->cap) {
        if (b->len + len > (b->max ? b->max : (64u << 20))) {
            b->too_big = true; /* a listing is never that large */
            return 0;
        }
        size_t cap = b->cap ? b->cap * 2 : 65536;
        while (cap < b->len + len + 1)
            cap *= 2;
        char *d = realloc(b->data, cap);
        if (!d)
            return 0;
        b->data = d;
        b->cap = cap;
    }
    memcpy(b->data + b->len, data, len);
    b->len += len;
    b->data[b->len] = 0;
    return len;
}

/* The repo's GGUF: the only one, else the Q4_K_M among several (not the
 * parts of a split file), from {endpoint}/api/models/{repo}/revision/{rev}. */
static int dl_pick_file(const struct download_params *p, const char *repo, char *file,
                        size_t cap, char *err, size_t errlen)
{
    char rev[512], url[DL_URL_MAX];
    dl_urlenc(rev, sizeof rev, p->revision, false);
    snprintf(url, sizeof url, "%s/api/models/%s/revision/%s", p->endpoint, repo, rev);
    struct dl_req r;
    struct dl_headers h;
    struct dl_buf b = { 0 };
    dl_headers_reset(&h);
    int rc = dl_req_init(&r, p, url, err, errlen);
    if (rc)
        return rc;
    curl_easy_setopt(r.c, CURLOPT_FOLLOWLOCATION, 1L);
    curl_easy_setopt(r.c, CURLOPT_HEADERFUNCTION, dl_on_header);
    curl_easy_setopt(r.c, CURLOPT_HEADERDATA, &h);
    curl_easy_setopt(r.c, CURLOPT_WRITEFUNCTION, dl_on_buf);
    curl_easy_setopt(r.c, CURLOPT_WRITEDATA, &b);
    const CURLcode cc = curl_easy_perform(r.c);
    cJSON *root = NULL;
    if (cc != CURLE_OK) {
        rc = omni_fail(err, errlen, OMNI_ERR_IO, "download: cannot reach %s: %s", p->endpoint,
                       dl_curl_msg(&r, cc));
        goto done;
    }
    if (h.status != 200) {
        rc = dl_http_error(&h, repo, p->revision, err, errlen);
        goto done;
    }
    root = cJSON_Parse(b.data ? b.data : "");
    const cJSON *sib = cJSON_GetObjectItemCaseSensitive(root, "siblings");
    const char *only = NULL, *q4km = NULL, *want = NULL;
    int n_gguf = 0;
    char list[512] = "";
    const cJSON *s;
    cJSON_ArrayForEach(s, sib) {
        const cJSON *f = cJSON_GetObjectItemCaseSensitive(s, "rfilename");
        if (!cJSON_IsString(f) || !dl_ends_with(f->valuestring, ".gguf") ||
            strstr(f->valuestring, "-of-"))
            continue;
        n_gguf++;
        only = f->valuestring;
        if (dl_contains_nocase(f->valuestring, "q4_k_m"))
            q4km = f->valuestring;
        if (p->quant && dl_has_quant(f->valuestring, p->quant))
            want = f->valuestring;
        const size_t l = strlen(list);
        if (l + strlen(f->valuestring) + 3 < sizeof list)
            snprintf(list + l, sizeof list - l, "%s%s", l ? ", " : "", f->valuestring);
    }
    const char *pick = p->quant ? want : n_gguf == 1 ? only : q4km;
    if (!cJSON_IsArray(sib))
        rc = omni_fail(err, errlen, OMNI_ERR_FORMAT, "download: %s: the hub's listing has no "
                       "'siblings'", repo);
    else if (!n_gguf)
        rc = omni_fail(err, errlen, OMNI_ERR_NOTFOUND, "download: %s has no .gguf file", repo);
    else if (!pick && p->quant)
        rc = omni_fail(err, errlen, OMNI_ERR_NOTFOUND, "download: %s has no %s file (it has: %s)",
                       repo, p->quant, list);
    else if (!pick)
        rc = omni_fail(err, errlen, OMNI_ERR_ARG, "download: %s has several GGUF files, name one "
                       "(REPO:FILE): %s", repo, list);
    else if (strlen(pick) >= cap || !dl_name_ok(pick, false))
        rc = omni_fail(err, errlen, OMNI_ERR_ARG, "download: %s: unusable file name '%s'", repo,
                       pick);
    else
        strcpy(file, pick);
done:
    cJSON_Delete(root);
    free(b.data);
    dl_req_free(&r);
    return rc;
}

// ---- the entry point ------------------------------------------------------------

int download_hf_file(const struct download_params *p_in, const char *repo, const char *file,
                     char *path, size_t cap, char *err, size_t errlen)
{
    struct download_params p = *p_in;
    if (!p.endpoint || !*p.endpoint)
        p.endpoint = "https://huggingface.co";
    if (!p.revision || !*p.revision)
        p.revision = "main";
    char endpoint[1024];
    snprintf(endpoint, sizeof endpoint, "%s", p.endpoint);
    for (size_t n = strlen(endpoint); n && endpoint[n - 1] == '/'; n--)
        endpoint[n - 1] = 0;
    p.endpoint = endpoint;
    if (!dl_name_ok(repo, true))
        return omni_fail(err, errlen, OMNI_ERR_ARG, "download: '%s' is not a repo (owner/name)",
                         repo);
    char picked[1024];
    if ((!file || !*file) && p.quant && dl_cached_quant(&p, repo, p.quant, picked, sizeof picked))
        file = picked;
    if (!file || !*file) {
        if (p.offline)
            return omni_fail(err, errlen, OMNI_ERR_IO, "download: %s: name the file (REPO:FILE) "
                             "when offline (HF_HUB_OFFLINE)", repo);
        int rc = dl_pick_file(&p, repo, picked, sizeof picked, err, errlen);
        if (rc)
            return rc;
        file = picked;
    }
    int rc = download_cache_path(&p, repo, file, path, cap, err, errlen);
    if (rc)
        return rc;
    if (access(path, R_OK) == 0)
        return 0;
    if (p.offline)
        return omni_fail(err, errlen, OMNI_ERR_IO, "download: %s/%s is not in the cache (%s) and "
                         "HF_HUB_OFFLINE is set", repo, file, path);
    char part[DL_PATH_MAX], url[DL_URL_MAX], rev[512], fenc[2048];
    if (snprintf(part, sizeof part, "%s.part", path) >= (int)sizeof part)
        return omni_fail(err, errlen, OMNI_ERR_ARG, "download: cache path too long");
    if ((rc = dl_mkdirs(path, err, errlen)))
        return rc;
    dl_urlenc(rev, sizeof rev, p.revision, false);
    dl_urlenc(fenc, sizeof fenc, file, true);
    snprintf(url, sizeof url, "%s/%s/resolve/%s/%s", p.endpoint, repo, rev, fenc);
    if (p.progress)
        fprintf(stderr, "download: %s/%s from %s\n", repo, file, p.endpoint);
    char what[1200];
    snprintf(what, sizeof what, "%s/%s", repo, file);
    struct dl_meta m = { .size = -1 };
    if ((rc = dl_head(&p, url, what, &m, err, errlen)))
        return rc;
    const char *base = strrchr(file, '/');
    return dl_fetch(&p, &m, base ? base + 1 : file, part, path, err, errlen);
}

// ---- fetching a URL into memory (media for chat requests) --------------------

struct download_fetch_params download_fetch_default_params(void)
{
    return (struct download_fetch_params){ .max_bytes = 64u << 20, .timeout_s = 30 };
}

/* IPv4 destinations no fetch may reach: this network, private, loopback,
 * carrier NAT, link-local, IETF protocol assignments, benchmarking,
 * multicast and reserved. */
static bool dl_v4_is_private(uint32_t v4)
{
    const uint8_t a = v4 >> 24, b2 = (v4 >> 16) & 0xff;
    return a == 0 || a == 10 || a == 127 || a >= 224 ||   /* this net, private, loopback, mcast */
           (a == 100 && (b2 & 0xc0) == 64) ||             /* 100.64/10 carrier NAT */
           (a == 169 && b2 == 254) ||                     /* link-local */
           (a == 172 && (b2 & 0xf0) == 16) ||             /* 172.16/12 */
           (a == 192 && b2 == 168) ||                     /* 192.168/16 */
           (a == 192 && b2 == 0 && ((v4 >> 8) & 0xff) == 0) ||  /* 192.0.0/24 */
           (a == 198 && (b2 & 0xfe) == 18);               /* 198.18/15 benchmarking */
}

static uint32_t dl_be32(const uint8_t *b)
{
    return (uint32_t)b[0] << 24 | (uint32_t)b[1] << 16 | (uint32_t)b[2] << 8 | b[3];
}

/* IPv6 is checked by prefix, and every form that carries an IPv4 address
 * (mapped, translated, NAT64, 6to4, Teredo) by that address too: a
 * connect() to ::ffff:127.0.0.1 reaches the IPv4 loopback, and a relay
 * or translator may forward the others to the embedded address. */
bool download_addr_is_private(const struct sockaddr *sa)
{
    if (sa->sa_family == AF_INET)
        return dl_v4_is_private(ntohl(((const struct sockaddr_in *)sa)->sin_addr.s_addr));
    if (sa->sa_family != AF_INET6)
        return true;                               /* no other families */
    const uint8_t *b = ((const struct sockaddr_in6 *)sa)->sin6_addr.s6_addr;
    static const uint8_t zero[12] = { 0 };
    static const uint8_t mapped[12] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff };
    static const uint8_t translated[12] = { 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0, 0 };
    static const uint8_t nat64[12] = { 0, 0x64, 0xff, 0x9b };
    static const uint8_t discard[8] = { 0x01, 0x00 };
    if (!memcmp(b, zero, 12))
        return true;   /* ::/96: ::, ::1 and the deprecated IPv4-compatible ::a.b.c.d */
    if ((b[0] & 0xfe) == 0xfc || (b[0] == 0xfe && (b[1] & 0x80)) || b[0] == 0xff)
        return true;   /* fc00::/7 unique local, fe80::/10 link-local, fec0::/10 site-local, multicast */
    if (!memcmp(b, nat64, 4) && b[4] == 0 && b[5] == 1)
        return true;   /* 64:ff9b:1::/48, NAT64 for local use */
    if (!memcmp(b, discard, 8))
        return true;   /* 100::/64 discard-only */
    if (!memcmp(b, mapped, 12) || !memcmp(b, translated, 12) || !memcmp(b, nat64, 12))
        return dl_v4_is_private(dl_be32(b + 12));
    if (b[0] == 0x20 && b[1] == 0x02)
        return dl_v4_is_private(dl_be32(b + 2));  /* 2002::/16 6to4: the relay's v4 */
    if (b[0] == 0x20 && b[1] == 0x01 && b[2] == 0 && b[3] == 0)  /* 2001::/32 Teredo */
        return dl_v4_is_private(dl_be32(b + 4)) || dl_v4_is_private(~dl_be32(b + 12));
    return false;
}

struct dl_fetch {
    const struct download_fetch_params *p;
    char refused[96];      /* the address a connection was refused to */
};

/* Every connection curl opens (to the first host and after each redirect,
 * for each address a name resolved to) passes here with the address it is
 * about to use: checking the socket address itself, not a name resolved
 * earlier, leaves no room for DNS rebinding. */
static curl_socket_t dl_open_socket(void *user, curlsocktype purpose, struct curl_sockaddr *a)
{
    struct dl_fetch *f = user;
    (void)purpose;
    if (!f->p->allow_private && download_addr_is_private(&a->addr)) {
        const void *in = a->family == AF_INET6
                             ? (const void *)&((const struct sockaddr_in6 *)&a->addr)->sin6_addr
                             : (const void *)&((const struct sockaddr_in *)&a->addr)->sin_addr;
        if (!inet_ntop(a->family, in, f->refused, sizeof f->refused))
            snprintf(f->refused, sizeof f->refused, "the address");
        return CURL_SOCKET_BAD;
    }
    return socket(a->family, a->socktype, a->protocol);
}

static int dl_fetch_progress(void *user, curl_off_t dltotal, curl_off_t dlnow, curl_off_t ultotal,
                             curl_off_t ulnow)
{
    const struct dl_fetch *f = user;
    (void)dltotal, (void)dlnow, (void)ultotal, (void)ulnow;
    return f->p->cancel && f->p->cancel(f->p->cancel_user);
}

int download_fetch(const struct download_fetch_params *p, const char *url, uint8_t **data,
                   size_t *len, char *err, size_t errlen)
{
    *data = NULL;
    *len = 0;
    if (strncasecmp(url, "http://", 7) && strncasecmp(url, "https://", 8))
        return omni_fail(err, errlen, OMNI_ERR_ARG, "fetch: only http(s) URLs");
    struct download_params dp = { .endpoint = "", .connect_timeout_s = p->timeout_s,
                                  .stall_timeout_s = p->timeout_s };
    struct dl_req r;
    struct dl_headers h;
    struct dl_buf b = { .max = p->max_bytes };
    struct dl_fetch f = { .p = p };
    dl_headers_reset(&h);
    int rc = dl_req_init(&r, &dp, url, err, errlen);
    if (rc)
        return rc;
    curl_easy_setopt(r.c, CURLOPT_PROXY, "");   /* a proxy would hide the address we check */
    curl_easy_setopt(r.c, CURLOPT_FOLLOWLOCATION, 1L);
    curl_easy_setopt(r.c, CURLOPT_MAXREDIRS, 5L);
    curl_easy_setopt(r.c, CURLOPT_TIMEOUT, p->timeout_s);
    curl_easy_setopt(r.c, CURLOPT_MAXFILESIZE_LARGE, (curl_off_t)p->max_bytes);
    curl_easy_setopt(r.c, CURLOPT_OPENSOCKETFUNCTION, dl_open_socket);
    curl_easy_setopt(r.c, CURLOPT_OPENSOCKETDATA, &f);
    curl_easy_setopt(r.c, CURLOPT_HEADERFUNCTION, dl_on_header);
    curl_easy_setopt(r.c, CURLOPT_HEADERDATA, &h);
    curl_easy_setopt(r.c, CURLOPT_WRITEFUNCTION, dl_on_buf);
    curl_easy_setopt(r.c, CURLOPT_WRITEDATA, &b);
    curl_easy_setopt(r.c, CURLOPT_XFERINFOFUNCTION, dl_fetch_progress);
    curl_easy_setopt(r.c, CURLOPT_XFERINFODATA, &f);
    curl_easy_setopt(r.c, CURLOPT_NOPROGRESS, 0L);
    const CURLcode cc = curl_easy_perform(r.c);
    if (f.refused[0])
        rc = omni_fail(err, errlen, OMNI_ERR_ARG, "fetch: %s is a loopback, private or link-local "
                       "address (the server refuses those unless started with --allow-private-urls)",
                       f.refused);
    else if (b.too_big || cc == CURLE_FILESIZE_EXCEEDED)
        rc = omni_fail(err, errlen, OMNI_ERR_LIMIT, "fetch: larger than the limit of %zu bytes",
                       p->max_bytes);
    else if (cc == CURLE_ABORTED_BY_CALLBACK)
        rc = omni_fail(err, errlen, OMNI_ERR_IO, "fetch: cancelled");
    else if (cc != CURLE_OK)
        rc = omni_fail(err, errlen, OMNI_ERR_IO, "fetch: %s", dl_curl_msg(&r, cc));
    else if (h.status != 200)
        rc = omni_fail(err, errlen, OMNI_ERR_IO, "fetch: HTTP status %ld", h.status);
    else if (b.len == 0)
        rc = omni_fail(err, errlen, OMNI_ERR_FORMAT, "fetch: empty body");
    dl_req_free(&r);
    if (rc) {
        free(b.data);
        return rc;
    }
    *data = (uint8_t *)b.data;
    *len = b.len;
    return 0;
}
