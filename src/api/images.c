/* images.c - chat image parts -> vision embeddings -> engine segments (see
 * images.h): the sources (data:, http(s), file:// under the media root),
 * the worker pool that reads and encodes them off the service thread, and
 * the engine segments. */
#include "src/api/images.h"

#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>
#include <libavutil/base64.h>

#include "media/image.h"
#include "media/video.h"
#include "src/api/api.h"
#include "src/api/chatreq.h"
#include "src/core/download.h"
#include "src/core/gguf.h"
#include "src/core/omni.h"

struct api_images_job {
    struct api_call *c;
    cJSON *root;
    struct apireq_gen g;
    api_images_then_fn then;
    struct api_images_job *next;
};

struct api_images_pool {
    struct api_images_params p;
    char media_root[PATH_MAX];       /* realpath of p.media_root, "" when none */
    struct vision_model *vm;
    struct vision_cache *cache;
    pthread_mutex_t enc_lock;
    struct vision_ctx *vc;           /* {enc_lock} */
    pthread_mutex_t lock;
    pthread_cond_t wake;
    struct api_images_job *head, *tail; /* {lock} */
    bool stop;                       /* {lock} */
    pthread_t *threads;
    int n_threads;
};

struct api_images_params api_images_default_params(void)
{
    return (struct api_images_params){
        .max_images = 64, .max_image_pixels = 50000000, .max_video_seconds = 3600,
        .max_url_bytes = 64u << 20, .url_timeout_s = 30, .n_workers = 2,
    };
}

// ---- sources -------------------------------------------------------------------

/* base64 text -> malloc'ed bytes. */
static int decode_base64(const char *b64, const char *field, uint8_t **out, size_t *n,
                         struct api_error *e)
{
    size_t len = strlen(b64);
    if (len > (size_t)INT32_MAX / 2)
        return api_error_set(e, 400, field, "'%s': image too large", field);
    int cap = (int)AV_BASE64_DECODE_SIZE(len);
    *out = malloc(cap > 0 ? cap : 1);
    if (!*out)
        return api_error_set(e, 500, NULL, "out of memory");
    int got = av_base64_decode(*out, b64, cap);
    if (got <= 0) {
        free(*out);
        *out = NULL;
        return api_error_set(e, 400, field, "'%s': invalid base64", field);
    }
    *n = (size_t)got;
    return 0;
}

/* file:///PATH (or file://localhost/PATH, %XX escapes decoded) inside the
 * media root: the realpath (symlinks resolved) must stay under the root's
 * realpath, and the file is opened without following a last symlink. */
static int read_file_url(const struct api_images_pool *p, const char *url, const char *field,
                         uint8_t **out, size_t *n, struct api_error *e)
{
    if (!p->media_root[0])
        return api_error_set(e, 400, field, "'%s': file:// URLs are refused (the server was not "
                             "started with --media-root DIR)", field);
    const char *s = url + 7;
    if (!strncmp(s, "localhost/", 10))
        s += 9;
    if (*s != '/')
        return api_error_set(e, 400, field, "'%s': a file:// URL needs an absolute path", field);
    char path[PATH_MAX], real[PATH_MAX];
    size_t k = 0;
    for (; *s && k + 1 < sizeof path; s++) {
        unsigned v;
        if (*s == '%' && sscanf(s + 1, "%2x", &v) == 1 && v != 0) {
            path[k++] = (char)v;
            s += 2;
        } else {
            path[k++] = *s;
        }
    }
    path[k] = 0;
    size_t rl = strlen(p->media_root);
    if (!realpath(path, real) ||
        !(rl == 1 || (!strncmp(real, p->media_root, rl) && (real[rl] == '/' || !real[rl]))))
        return api_error_set(e, 400, field, "'%s': no such file under the media root", field);
    int fd = open(real, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
        if (fd >= 0)
            close(fd);
        return api_error_set(e, 400, field, "'%s': cannot read the file", field);
    }
    if ((uint64_t)st.st_size > p->p.max_url_bytes || st.st_size == 0) {
        close(fd);
        return api_error_set(e, 400, field, "'%s': the file has %lld bytes (limit %zu)", field,
                             (long long)st.st_size, p->p.max_url_bytes);
    }
    *n = (size_t)st.st_size;
    *out = malloc(*n);
    ssize_t got = *out ? read(fd, *out, *n) : -1;
    close(fd);
    if (got != (ssize_t)*n) {
        free(*out);
        *out = NULL;
        return api_error_set(e, 400, field, "'%s': cannot read the file", field);
    }
    return 0;
}

static int job_cancelled(void *user) { return ws_out_gone(((struct api_images_job *)user)->c->out); }

/* The bytes of an image part: 1 (*out malloc'ed), 2 for a video, 0 when
 * the part is no image, -1 with a 400. OpenAI: {"type": "image_url" |
 * "input_image" | "video_url", "image_url" / "video_url": {"url": URL} or
 * the URL string}; Anthropic: {"type": "image", "source": {"type": "base64",
 * "data": ...}}. URL: data:...;base64,..., http(s)://..., file:///... */
static int part_bytes(const struct api_images_pool *p, struct api_images_job *j,
                      const cJSON *part, const char *field, uint8_t **out, size_t *n,
                      struct api_error *e)
{
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(part, "type");
    if (!cJSON_IsString(type))
        return 0;
    if (!strcmp(type->valuestring, "image")) {
        const cJSON *src = cJSON_GetObjectItemCaseSensitive(part, "source");
        const cJSON *st = cJSON_GetObjectItemCaseSensitive(src, "type");
        const cJSON *data = cJSON_GetObjectItemCaseSensitive(src, "data");
        if (!cJSON_IsString(st) || strcmp(st->valuestring, "base64") != 0 || !cJSON_IsString(data))
            return api_error_set(e, 400, field, "'%s': only base64 image sources are supported",
                                 field);
        return decode_base64(data->valuestring, field, out, n, e) < 0 ? -1 : 1;
    }
    const char *key = !strcmp(type->valuestring, "video_url") ? "video_url" : "image_url";
    if (strcmp(type->valuestring, "image_url") != 0 && strcmp(type->valuestring, "input_image") != 0 &&
        strcmp(type->valuestring, "video_url") != 0)
        return 0;
    if (!j)
        return 1; /* counting only */
    const int kind = strcmp(key, "video_url") ? 1 : 2;
    const cJSON *u = cJSON_GetObjectItemCaseSensitive(part, key);
    if (cJSON_IsObject(u))
        u = cJSON_GetObjectItemCaseSensitive(u, "url");
    const char *url = cJSON_IsString(u) ? u->valuestring : "";
    if (!strncasecmp(url, "http://", 7) || !strncasecmp(url, "https://", 8)) {
        struct download_fetch_params fp = download_fetch_default_params();
        fp.max_bytes = p->p.max_url_bytes;
        fp.timeout_s = p->p.url_timeout_s;
        fp.allow_private = p->p.allow_private_urls;
        fp.cancel = job_cancelled;
        fp.cancel_user = j;
        char err[256];
        int rc = download_fetch(&fp, url, out, n, err, sizeof err);
        if (rc < 0)
            return api_error_set(e, rc == OMNI_ERR_NOMEM ? 500 : 400, field, "'%s': %s", field, err);
        return kind;
    }
    if (!strncasecmp(url, "file://", 7))
        return read_file_url(p, url, field, out, n, e) < 0 ? -1 : kind;
    const char *comma = strncmp(url, "data:", 5) == 0 ? strchr(url, ',') : NULL;
    if (!comma)
        return api_error_set(e, 400, field, "'%s': expected a data:, http(s):// or file:// URL",
                             field);
    if (comma - url < 12 || strncmp(comma - 7, ";base64", 7) != 0)
        return api_error_set(e, 400, field, "'%s': the data: URL must be base64", field);
    return decode_base64(comma + 1, field, out, n, e) < 0 ? -1 : kind;
}

// ---- encoding -------------------------------------------------------------------

/* A clip's frames into im (each an image; past max_images the request is refused). */
static int take_video(struct api_images_pool *p, const uint8_t *bytes, size_t n,
                      const char *field, struct api_images *im, int *n_frames,
                      struct api_error *e)
{
    char err[256];
    struct vision_embd *frames;
    struct media_video_params vp = media_video_default_params();
    vp.max_duration_s = p->p.max_video_seconds;
    vp.image.max_pixels = p->p.max_image_pixels;
    pthread_mutex_lock(&p->enc_lock);
    int rc = vision_encode_video(p->vc, p->cache, bytes, n, &vp, &frames, n_frames, NULL, NULL,
                                 err, sizeof err);
    pthread_mutex_unlock(&p->enc_lock);
    if (rc < 0)
        return api_error_set(e, rc == OMNI_ERR_NOMEM ? 500 : 400, field, "'%s': %s", field, err);
    for (int f = 0; f < *n_frames; f++) {
        if (im->n < p->p.max_images)
            im->e[im->n++] = frames[f];
        else
            vision_embd_release(&frames[f]);
    }
    free(frames);
    return 0;
}

/* content[k] := a text part of n markers, one per line. */
static int replace_with_markers(cJSON *content, int k, const char *marker, int n)
{
    size_t ml = strlen(marker);
    char *t = malloc((ml + 1) * (size_t)(n > 0 ? n : 1) + 1);
    if (!t)
        return -1;
    size_t len = 0;
    for (int f = 0; f < n; f++) {
        if (f)
            t[len++] = '\n';
        memcpy(t + len, marker, ml);
        len += ml;
    }
    t[len] = 0;
    cJSON *text = cJSON_CreateObject();
    int ok = text && cJSON_AddStringToObject(text, "type", "text") &&
             cJSON_AddStringToObject(text, "text", t) && cJSON_ReplaceItemInArray(content, k, text);
    free(t);
    if (!ok)
        cJSON_Delete(text);
    return ok ? 0 : -1;
}

/* Walk the image parts of req's messages: with j NULL count them, else read
 * and encode each into im and replace it by its markers. The count, or -1
 * with e. */
static int take_images(struct api_images_pool *p, struct api_images_job *j, cJSON *req,
                       struct api_images *im, struct api_error *e)
{
    cJSON *msgs = cJSON_GetObjectItemCaseSensitive(req, "messages"), *msg;
    int i = 0, count = 0;
    if (!cJSON_IsArray(msgs))
        return 0; /* chatreq_build says what is wrong */
    const char *marker = vision_image_marker(p->vm);
    cJSON_ArrayForEach(msg, msgs) {
        cJSON *content = cJSON_GetObjectItemCaseSensitive(msg, "content");
        for (int k = 0; cJSON_IsArray(content) && k < cJSON_GetArraySize(content); k++) {
            char field[64], err[256];
            snprintf(field, sizeof field, "messages[%d].content[%d]", i, k);
            if (j && ws_out_gone(j->c->out))
                return api_error_set(e, 499, NULL, "the client left");
            uint8_t *bytes = NULL;
            size_t n = 0;
            int is = part_bytes(p, j, cJSON_GetArrayItem(content, k), field, &bytes, &n, e);
            if (is < 0)
                return -1;
            count += is > 0;
            if (is == 0 || !j)
                continue;
            if (im->n == p->p.max_images) {
                free(bytes);
                return api_error_set(e, 400, field, "more than %d images or video frames in one "
                                     "request (--max-images)", p->p.max_images);
            }
            int rc, n_markers = 1;
            if (is == 2) { /* a video: one marker per frame, a line each */
                int before = im->n;
                rc = take_video(p, bytes, n, field, im, &n_markers, e);
                if (rc == 0 && before + n_markers > p->p.max_images)
                    rc = api_error_set(e, 400, field, "more than %d images or video frames in one "
                                       "request (--max-images)", p->p.max_images);
            } else {
                struct media_image_params ip = media_image_default_params();
                ip.max_pixels = p->p.max_image_pixels;
                pthread_mutex_lock(&p->enc_lock);
                rc = vision_encode_bytes(p->vc, p->cache, bytes, n, &ip, &im->e[im->n], NULL, err,
                                         sizeof err);
                pthread_mutex_unlock(&p->enc_lock);
                if (rc < 0)
                    api_error_set(e, rc == OMNI_ERR_NOMEM ? 500 : 400, field, "'%s': %s", field, err);
                else
                    im->n++;
            }
            free(bytes);
            if (rc < 0)
                return -1;
            if (replace_with_markers(content, k, marker, n_markers) < 0)
                return api_error_set(e, 500, NULL, "out of memory");
        }
        i++;
    }
    return count;
}

// ---- the worker pool --------------------------------------------------------------

static void job_free(struct api_images_job *j)
{
    cJSON_Delete(j->root);
    apireq_gen_free(&j->g);
    free(j);
}

/* Worker: read and encode, then the protocol's rest; errors go out through
 * the deferred response. */
static void job_run(struct api_images_pool *p, struct api_images_job *j)
{
    struct api_error e;
    struct api_images im = { 0 };
    im.e = calloc((size_t)p->p.max_images, sizeof *im.e);
    int rc = !im.e ? api_error_set(&e, 500, NULL, "out of memory")
                   : take_images(p, j, j->root, &im, &e);
    if (rc >= 0)
        rc = j->then(j->c, NULL, j->root, &j->g, &im, &e);
    if (rc < 0)
        api_call_fail(j->c, &e);
    api_images_free(&im);
    job_free(j);
}

static void *pool_main(void *arg)
{
    struct api_images_pool *p = arg;
    pthread_mutex_lock(&p->lock);
    while (!p->stop) {
        struct api_images_job *j = p->head;
        if (!j) {
            pthread_cond_wait(&p->wake, &p->lock);
            continue;
        }
        if (!(p->head = j->next))
            p->tail = NULL;
        pthread_mutex_unlock(&p->lock);
        job_run(p, j);
        pthread_mutex_lock(&p->lock);
    }
    pthread_mutex_unlock(&p->lock);
    return NULL;
}

struct api_images_pool *api_images_pool_new(struct vision_model *vm, struct vision_ctx *vc,
                                            struct vision_cache *cache,
                                            const struct api_images_params *prm, char *err,
                                            size_t errlen)
{
    if (prm->max_images < 1 || prm->n_workers < 1 || prm->max_image_pixels < 1 ||
        !(prm->max_video_seconds > 0)) {
        omni_fail(err, errlen, OMNI_ERR_ARG, "images: max_images, n_workers, max_image_pixels and "
                  "max_video_seconds must be positive");
        return NULL;
    }
    struct api_images_pool *p = calloc(1, sizeof *p);
    if (!p || !(p->threads = calloc((size_t)prm->n_workers, sizeof *p->threads))) {
        free(p);
        omni_fail(err, errlen, OMNI_ERR_NOMEM, "images: out of memory");
        return NULL;
    }
    p->p = *prm;
    p->vm = vm, p->vc = vc, p->cache = cache;
    pthread_mutex_init(&p->enc_lock, NULL);
    pthread_mutex_init(&p->lock, NULL);
    pthread_cond_init(&p->wake, NULL);
    if (prm->media_root && !realpath(prm->media_root, p->media_root)) {
        omni_fail(err, errlen, OMNI_ERR_ARG, "images: --media-root %s: no such directory",
                  prm->media_root);
        goto fail;
    }
    p->p.media_root = NULL;
    for (; p->n_threads < prm->n_workers; p->n_threads++)
        if (pthread_create(&p->threads[p->n_threads], NULL, pool_main, p) != 0) {
            omni_fail(err, errlen, OMNI_ERR_NOMEM, "images: cannot start a worker thread");
            goto fail;
        }
    return p;
fail:
    api_images_pool_free(p);
    return NULL;
}

void api_images_pool_free(struct api_images_pool *p)
{
    if (!p)
        return;
    pthread_mutex_lock(&p->lock);
    p->stop = true;
    struct api_images_job *left = p->head;
    p->head = p->tail = NULL;
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->lock);
    for (int i = 0; i < p->n_threads; i++)
        pthread_join(p->threads[i], NULL);
    while (left) {
        struct api_images_job *next = left->next;
        struct api_error e;
        api_error_set(&e, 503, NULL, "the server is shutting down");
        api_call_fail(left->c, &e);
        job_free(left);
        left = next;
    }
    pthread_cond_destroy(&p->wake);
    pthread_mutex_destroy(&p->lock);
    pthread_mutex_destroy(&p->enc_lock);
    free(p->threads);
    free(p);
}

struct vision_model *api_images_model(struct api_images_pool *p) { return p ? p->vm : NULL; }
struct vision_cache *api_images_cache(struct api_images_pool *p) { return p ? p->cache : NULL; }

int api_images_defer(struct api_images_pool *p, struct api_call *c, struct ws_req *r,
                     cJSON **root, struct apireq_gen *g, api_images_then_fn then,
                     struct api_error *e)
{
    if (!p)
        return 0;
    int n = take_images(p, NULL, *root, NULL, e);
    if (n <= 0)
        return n;
    if (n > p->p.max_images)
        return api_error_set(e, 400, "messages", "%d image or video parts in one request; the "
                             "limit is %d (--max-images)", n, p->p.max_images);
    struct api_images_job *j = calloc(1, sizeof *j);
    if (!j)
        return api_error_set(e, 500, NULL, "out of memory");
    if (api_call_defer(c, r) < 0) {
        free(j);
        return 1; /* answered 500 */
    }
    *j = (struct api_images_job){ .c = c, .root = *root, .g = *g, .then = then };
    *root = NULL;
    apireq_gen_init(g);
    pthread_mutex_lock(&p->lock);
    if (p->tail)
        p->tail->next = j;
    else
        p->head = j;
    p->tail = j;
    pthread_cond_signal(&p->wake);
    pthread_mutex_unlock(&p->lock);
    return 1;
}

// ---- engine segments ----------------------------------------------------------------

/* The language model's width, from its GGUF (<arch>.embedding_length). */
static int lm_n_embd(const struct api_model *m)
{
    size_t len;
    const char *arch = gguf_get_str(m->gguf, "general.architecture", &len);
    char key[96];
    uint32_t n = 0;
    if (arch && len < 64) {
        snprintf(key, sizeof key, "%.*s.embedding_length", (int)len, arch);
        gguf_get_u32(m->gguf, key, &n);
    }
    return (int)n;
}

int api_images_attach(struct api_images_pool *pool, const struct api_model *m,
                      const struct chatreq *cr, const struct apireq_gen *g,
                      struct api_images *im, struct engine_request *rq, struct api_error *e)
{
    char err[256];
    struct vision_model *vm = pool->vm;
    if (vision_model_info(vm)->n_embd_lm != lm_n_embd(m))
        return api_error_set(e, 500, NULL, "the vision model's output width (%d) is not the "
                             "language model's (%d): wrong --mmproj for this model",
                             vision_model_info(vm)->n_embd_lm, lm_n_embd(m));
    if (vision_prompt_build(vm, m->tok, cr->prompt, strlen(cr->prompt), true, im->e, im->n, &im->vp,
                            err, sizeof err) < 0)
        return api_error_set(e, 400, "messages", "%s", err);
    if (api_check_context(m, im->vp.n_positions, g, e) < 0)
        return -1;
    im->segs = calloc((size_t)im->vp.n_parts, sizeof *im->segs);
    if (!im->segs)
        return api_error_set(e, 500, NULL, "out of memory");
    for (int i = 0; i < im->vp.n_parts; i++) {
        const struct vision_prompt_part *p = &im->vp.parts[i];
        im->segs[i] = (struct engine_segment){ p->tokens, p->embd, p->n, p->media_hash };
    }
    rq->prompt = NULL;
    rq->n_prompt = 0;
    rq->segments = im->segs;
    rq->n_segments = im->vp.n_parts;
    return 0;
}

void api_images_free(struct api_images *im)
{
    for (int i = 0; i < im->n; i++)
        vision_embd_release(&im->e[i]);
    free(im->e);
    vision_prompt_release(&im->vp);
    free(im->segs);
    memset(im, 0, sizeof *im);
}
