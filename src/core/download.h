/* download.h - models from the Hugging Face hub into the local model cache:
 * {cache}/{repo}/{file}, fetched through libcurl from
 * {endpoint}/{repo}/resolve/{revision}/{file} (the hub answers with a redirect
 * to its CDN), resumable through {file}.part and Range requests, checked
 * against the size and, when the hub names it, the SHA-256 of the file.
 *
 *   struct download_params p = download_default_params();  // $HF_ENDPOINT, $HF_TOKEN
 *   char path[4096], err[512];
 *   if (download_hf_file(&p, "Qwen/Qwen2.5-0.5B-Instruct-GGUF",
 *                        "qwen2.5-0.5b-instruct-q4_k_m.gguf", path, sizeof path,
 *                        err, sizeof err) == 0)
 *       load(path);           // cached, or downloaded and verified just now
 *
 * Thread safety: every call is independent (own curl handles, own files);
 * call curl_global_init from the main thread before threads start when the
 * process uses libcurl elsewhere too. Two processes fetching the same file:
 * the second gets OMNI_ERR_LIMIT ("in progress") instead of a mixed file. */
#ifndef OMNI_DOWNLOAD_H
#define OMNI_DOWNLOAD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define DOWNLOAD_DEFAULT_REPO "Qwen/Qwen2.5-0.5B-Instruct-GGUF"
#define DOWNLOAD_DEFAULT_FILE "qwen2.5-0.5b-instruct-q4_k_m.gguf"

struct download_params {
    const char *endpoint;    /* hub base URL; default $HF_ENDPOINT or https://huggingface.co */
    const char *token;       /* sent as "Authorization: Bearer" to the hub only (not to the
                                CDN it redirects to); default $HF_TOKEN; NULL/"": none */
    const char *revision;    /* branch, tag or commit; default "main" */
    const char *cache_dir;   /* default $OMNISERVE_CACHE or ~/.cache/omniserve */
    /* Without a FILE: the GGUF whose name carries this quantization tag
     * ("Q8_0", case-insensitive; model aliases set it), a copy of it already
     * in the cache first. NULL: the repo's only GGUF, else its Q4_K_M. */
    const char *quant;
    bool offline;            /* never touch the network (cache only); default $HF_HUB_OFFLINE=1 */
    bool progress;           /* progress on stderr: in place on a TTY, every 10% otherwise */
    int max_retries;         /* resumes after a dropped or stalled transfer; default 5 */
    double retry_delay_s;    /* first wait before a retry, doubled each time; default 1 */
    long connect_timeout_s;  /* default 15 */
    long stall_timeout_s;    /* a transfer below 1 byte/s for this long is dropped; default 60 */
    /* Polled about once a second and on every chunk; nonzero stops the
     * transfer (OMNI_ERR_IO, "cancelled"), keeping the .part for a resume. */
    int (*cancel)(void *user);
    void *cancel_user;
};
/* Defaults with the environment applied (read at the call). */
struct download_params download_default_params(void);

/* A model reference: "hf://REPO/FILE", "REPO:FILE", "REPO/FILE.gguf"
 * (REPO = owner/name) or "REPO" (file chosen from the repo's listing).
 * Fills repo and file (file "" when not given). 0, or OMNI_ERR_ARG. */
int download_parse_ref(const char *ref, char *repo, size_t repo_cap, char *file,
                       size_t file_cap, char *err, size_t errlen);
/* True for "hf://..." (what serve -m hands to download_parse_ref). */
bool download_is_hf_ref(const char *s);

/* The cache's root directory ({cache} of the paths below). */
int download_cache_root(const struct download_params *p, char *path, size_t cap, char *err,
                        size_t errlen);

/* Where REPO/FILE lives in the cache (whether or not it is there):
 * {cache}/{repo}/{file}, or {cache}/{repo}@{revision}/{file} off "main". */
int download_cache_path(const struct download_params *p, const char *repo, const char *file,
                        char *path, size_t cap, char *err, size_t errlen);

/* Make REPO/FILE present in the cache and write its path. A cached file is
 * used as is (no network). Otherwise: download to {path}.part (resuming what
 * is there), verify, rename into place. file "" picks the repo's one GGUF
 * (or its Q4_K_M among several) from the hub's listing.
 * 0; OMNI_ERR_NOTFOUND (no such repo/file/revision), OMNI_ERR_IO (network,
 * disk, HTTP, offline and not cached), OMNI_ERR_FORMAT (size or SHA-256
 * mismatch: the bad .part is removed), OMNI_ERR_LIMIT (another process is
 * downloading it), OMNI_ERR_ARG (bad names). err gets one line. */
int download_hf_file(const struct download_params *p, const char *repo, const char *file,
                     char *path, size_t cap, char *err, size_t errlen);

/* ---- a URL into memory (media of chat requests) ----------------------------
 * GET an http(s) URL (redirects followed) into a malloc'ed buffer, with a
 * size and a time limit. Unless allow_private, every connection, also after
 * a redirect, is checked at the socket address curl is about to connect to
 * (so DNS rebinding cannot slip a private address in): loopback, private,
 * link-local, carrier-NAT, multicast and unspecified addresses (IPv4, IPv6,
 * v4-mapped) are refused. No proxy is used. */
struct sockaddr;
struct download_fetch_params {
    size_t max_bytes;        /* larger bodies fail (OMNI_ERR_LIMIT); default 64 MiB */
    long timeout_s;          /* the whole transfer; default 30 */
    bool allow_private;      /* let loopback / private addresses through (tests, LANs) */
    int (*cancel)(void *user); /* polled during the transfer; nonzero stops it */
    void *cancel_user;
};
struct download_fetch_params download_fetch_default_params(void);
/* 0 with *data (malloc'ed, caller frees) and *len; OMNI_ERR_ARG (not http(s),
 * refused address), OMNI_ERR_LIMIT (too large), OMNI_ERR_IO (network, HTTP
 * status, timeout, cancelled), OMNI_ERR_FORMAT (empty). err gets one line. */
int download_fetch(const struct download_fetch_params *p, const char *url, uint8_t **data,
                   size_t *len, char *err, size_t errlen);
/* Loopback, private, link-local, ... (what download_fetch refuses). */
bool download_addr_is_private(const struct sockaddr *sa);

#endif
