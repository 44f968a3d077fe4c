/* images.c - chat image and video parts -> vision embeddings -> engine
 * segments (see images.h): the sources (data:, http(s), file:// under the
 * media root), video sampling and frame pairing (Qwen2.5-VL's one-run
 * videos with their time step, Qwen3-VL's timestamped patches), the worker
 * pool that reads and encodes them off the service thread, and the engine
 * segments. */
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

#include "llm/tokenizer.h"
#include "media/image.h"
#include "media/video.h"
#include "src/api/api.h"
#include "src/api/chatreq.h"
#include "src/core/download.h"
#include "src/core/gguf.h"
#include "src/core/omni.h"
#include "vision/encode_queue.h"
#include "vision/qwen2vl.h"

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
    struct vision_queue *vq;         /* every encode goes through it (owns the vision_ctx) */
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
        .max_url_bytes = 64u << 20, .max_request_media_bytes = (size_t)256 << 20,
        .url_timeout_s = 30, .n_workers = 2,
    };
}

// ---- sources -------------------------------------------------------------------

/* base64 text -> malloc'ed bytes. */
static int decode_base64(const char *b64, const char *field, uint8_t **out, size_t *n,
                         struct api_error *e)
{
    size_t len = strlen(b64);
    if (len > (size_t)INT32_MAX / 2)
        return api_error_set(e, 413, field, "'%s': image too large", field);
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
        return api_error_set(e, st.st_size ? 413 : 400, field,
                             "'%s': the file has %lld bytes (limit %zu)", field,
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

/* Who reads the parts (NULL: the service thread only counts them). */
struct images_reader {
    int (*cancelled)(void *user); /* polled between parts and during fetches; may be NULL */
    void *user;
};

/* The bytes behind a URL (data:...;base64,..., http(s)://..., file:///...):
 * 0 (*out malloc'ed) or -1 with a 400 (413 past a byte limit). */
static int url_bytes(const struct api_images_pool *p, const struct images_reader *rd, const char *url,
                     const char *field, uint8_t **out, size_t *n, struct api_error *e)
{
    if (!strncasecmp(url, "http://", 7) || !strncasecmp(url, "https://", 8)) {
        struct download_fetch_params fp = download_fetch_default_params();
        fp.max_bytes = p->p.max_url_bytes;
        fp.timeout_s = p->p.url_timeout_s;
        fp.allow_private = p->p.allow_private_urls;
        fp.cancel = rd->cancelled;
        fp.cancel_user = rd->user;
        char err[256];
        int rc = download_fetch(&fp, url, out, n, err, sizeof err);
        if (rc < 0)
            return api_error_set(e, rc == OMNI_ERR_NOMEM ? 500 : rc == OMNI_ERR_LIMIT ? 413 : 400,
                                 field, "'%s': %s", field, err);
        return 0;
    }
    if (!strncasecmp(url, "file://", 7))
        return read_file_url(p, url, field, out, n, e) < 0 ? -1 : 0;
    const char *comma = strncmp(url, "data:", 5) == 0 ? strchr(url, ',') : NULL;
    if (!comma)
        return api_error_set(e, 400, field, "'%s': expected a data:, http(s):// or file:// URL",
                             field);
    if (comma - url < 12 || strncmp(comma - 7, ";base64", 7) != 0)
        return api_error_set(e, 400, field, "'%s': the data: URL must be base64", field);
    return decode_base64(comma + 1, field, out, n, e) < 0 ? -1 : 0;
}

/* The bytes of an image part: 1 (*out malloc'ed), 2 for a video, 3 for a
 * video given as frames (read by read_frames), 0 when the part is no
 * image, -1 with a 400 (413 past a byte limit). With rd NULL the part is
 * only recognised (and an Anthropic source's shape checked): nothing is
 * read or decoded. OpenAI: {"type": "image_url" | "input_image" |
 * "video_url", "image_url" / "video_url": {"url": URL} or the URL string};
 * Qwen's message format: {"type": "video", "video": URL or [frame URLs]};
 * Anthropic: {"type": "image", "source": {"type": "base64", "data": ...}
 * or {"type": "url", "url": URL}}. */
static int part_bytes(const struct api_images_pool *p, const struct images_reader *rd,
                      const cJSON *part, const char *field, uint8_t **out, size_t *n,
                      struct api_error *e)
{
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(part, "type");
    if (!cJSON_IsString(type))
        return 0;
    const cJSON *u;
    int kind = 1;
    if (!strcmp(type->valuestring, "image")) {
        /* Anthropic: {"source": {"type": "base64", "data"} | {"type": "url", "url"}};
         * a URL source goes the way of an OpenAI image URL */
        const cJSON *src = cJSON_GetObjectItemCaseSensitive(part, "source");
        const cJSON *st = cJSON_GetObjectItemCaseSensitive(src, "type");
        const cJSON *data = cJSON_GetObjectItemCaseSensitive(src, "data");
        u = cJSON_GetObjectItemCaseSensitive(src, "url");
        bool b64 = cJSON_IsString(st) && !strcmp(st->valuestring, "base64") && cJSON_IsString(data);
        if (!b64 && !(cJSON_IsString(st) && !strcmp(st->valuestring, "url") && cJSON_IsString(u)))
            return api_error_set(e, 400, field,
                                 "'%s': the image source must be {\"type\": \"base64\", \"data\"} "
                                 "or {\"type\": \"url\", \"url\"}", field);
        if (!rd)
            return 1; /* counting only: the worker decodes it */
        if (b64)
            return decode_base64(data->valuestring, field, out, n, e) < 0 ? -1 : 1;
    } else if (!strcmp(type->valuestring, "video")) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(part, "video");
        if (!cJSON_IsString(v) && !cJSON_IsArray(v))
            return api_error_set(e, 400, field, "'%s': \"video\" must be a URL or an array of frame "
                                 "URLs", field);
        if (!rd)
            return 1; /* counting only */
        if (cJSON_IsArray(v))
            return 3;
        u = v, kind = 2;
    } else {
        const char *key = !strcmp(type->valuestring, "video_url") ? "video_url" : "image_url";
        if (strcmp(type->valuestring, "image_url") != 0 && strcmp(type->valuestring, "input_image") != 0 &&
            strcmp(type->valuestring, "video_url") != 0)
            return 0;
        if (!rd)
            return 1; /* counting only */
        kind = strcmp(key, "video_url") ? 1 : 2;
        u = cJSON_GetObjectItemCaseSensitive(part, key);
        if (cJSON_IsObject(u))
            u = cJSON_GetObjectItemCaseSensitive(u, "url");
    }
    const char *url = cJSON_IsString(u) ? u->valuestring : "";
    return url_bytes(p, rd, url, field, out, n, e) < 0 ? -1 : kind;
}

// ---- encoding -------------------------------------------------------------------

static struct media_video_params video_params(const struct api_images_pool *p, double fps,
                                              int max_frames)
{
    struct media_video_params vp = media_video_default_params();
    if (fps > 0)
        vp.fps = fps;
    if (max_frames > 0)
        vp.max_frames = max_frames;
    vp.max_duration_s = p->p.max_video_seconds;
    /* 120 frames per allowed second: what the longest allowed clip may need */
    double frames = p->p.max_video_seconds * 120;
    vp.max_decoded_frames = frames < INT_MAX ? (int)frames : INT_MAX;
    vp.image.max_pixels = p->p.max_image_pixels;
    return vp;
}

static struct media_image_params image_params(const struct api_images_pool *p)
{
    struct media_image_params ip = media_image_default_params();
    ip.max_pixels = p->p.max_image_pixels;
    return ip;
}

/* A media error as an HTTP status: only a failed allocation is ours. */
static int media_status(int rc) { return rc == OMNI_ERR_NOMEM ? 500 : 400; }

/* A request's images waiting for the encoder: preprocessed, each with its
 * slot in im->e and its cache key. Sent to the queue together (so they
 * share encoder passes), or earlier when their pixels pass
 * PENDING_MAX_BYTES. */
enum { PENDING_MAX_BYTES = 256 << 20 };
struct pending {
    int n;
    struct vision_input *in;     /* [max_images] */
    int *slot;                   /* [max_images] */
    uint64_t *key;               /* [max_images] */
    size_t bytes;
};

static void pending_clear(struct pending *pd)
{
    for (int i = 0; i < pd->n; i++)
        free((float *)pd->in[i].pixels);
    pd->n = 0, pd->bytes = 0;
}

/* The pending images through the queue into their slots (and the cache). */
static int pending_flush(struct api_images_pool *p, struct api_images *im, struct pending *pd,
                         int (*cancelled)(void *user), void *user, struct api_error *e)
{
    if (!pd->n)
        return 0;
    char err[256];
    struct vision_embd *outs = p->vq ? calloc((size_t)pd->n, sizeof *outs) : NULL;
    if (!outs) {
        pending_clear(pd);
        return api_error_set(e, 500, NULL, "out of memory");
    }
    double t0 = omni_time_s();
    int rc = vision_queue_encode(p->vq, pd->in, pd->n, cancelled, user, outs, err, sizeof err);
    if (rc >= 0) {
        const double ms = (omni_time_s() - t0) * 1e3 / pd->n;
        for (int i = 0; i < pd->n; i++) {
            outs[i].key_hash = pd->key[i];
            im->e[pd->slot[i]] = outs[i];
            if (p->cache)
                vision_cache_put(p->cache, pd->key[i], &outs[i], ms);
        }
    }
    free(outs);
    pending_clear(pd);
    if (rc >= 0)
        return 0;
    if (cancelled && cancelled(user))
        return api_error_set(e, 499, NULL, "the client left");
    return api_error_set(e, rc == OMNI_ERR_LIMIT ? 503 : 500, NULL, "%s", err);
}

/* Preprocessed pixels (in->pixels malloc'ed, now the queue's) into slot
 * of im (-1: the next one), to be encoded. */
static int pending_push(struct api_images_pool *p, struct api_images *im, struct pending *pd,
                        const struct vision_input *in, int slot, uint64_t key, const char *field,
                        int (*cancelled)(void *user), void *user, struct api_error *e)
{
    if (slot < 0 && im->n == p->p.max_images) {
        free((float *)in->pixels);
        return api_error_set(e, 400, field, "more than %d images or video frames in one request "
                             "(--max-images)", p->p.max_images);
    }
    const struct vision_info *vi = vision_model_info(p->vm);
    const size_t floats = vi->family == VISION_QWEN2VL
                              ? (size_t)in->tile_rows * in->tile_cols * 3 * (in->frames == 2 ? 2 : 1) *
                                    vi->patch_size * vi->patch_size
                              : (size_t)in->n_images * 3 * vi->image_size * vi->image_size;
    pd->in[pd->n] = *in, pd->slot[pd->n] = slot < 0 ? im->n++ : slot, pd->key[pd->n] = key;
    pd->n++;
    pd->bytes += floats * sizeof(float);
    return pd->bytes > PENDING_MAX_BYTES ? pending_flush(p, im, pd, cancelled, user, e) : 0;
}

/* img (decoded) preprocessed into slot of im (-1: the next), to be encoded. */
static int pending_add(struct api_images_pool *p, struct api_images *im, struct pending *pd,
                       const struct media_image *img, bool tiles, int slot, uint64_t key,
                       const char *field, int (*cancelled)(void *user), void *user,
                       struct api_error *e)
{
    char err[256];
    if (slot < 0 && im->n == p->p.max_images)
        return api_error_set(e, 400, field, "more than %d images or video frames in one request "
                             "(--max-images)", p->p.max_images);
    struct vision_input in = { .frames = 1 };
    float *pixels;
    int rc = vision_preprocess(p->vm, img, tiles, &pixels, &in.n_images, &in.tile_rows,
                               &in.tile_cols, err, sizeof err);
    if (rc < 0)
        return api_error_set(e, media_status(rc), field, "'%s': %s", field, err);
    in.pixels = pixels;
    return pending_push(p, im, pd, &in, slot, key, field, cancelled, user, e);
}

/* Qwen2.5-VL: frames a and b (of one size, of a clip of n_frames) as one
 * temporal patch, into slot of im. */
static int pending_add_pair(struct api_images_pool *p, struct api_images *im, struct pending *pd,
                            const struct media_image *a, const struct media_image *b, int n_frames,
                            int slot, uint64_t key, const char *field, int (*cancelled)(void *user),
                            void *user, struct api_error *e)
{
    char err[256];
    float *pa = NULL, *pb = NULL;
    int n, ra, ca, rb, cb, rc;
    if ((rc = vision_preprocess_frame(p->vm, a, n_frames, &pa, &n, &ra, &ca, err, sizeof err)) < 0 ||
        (rc = vision_preprocess_frame(p->vm, b, n_frames, &pb, &n, &rb, &cb, err, sizeof err)) < 0) {
        free(pa);
        return api_error_set(e, media_status(rc), field, "'%s': %s", field, err);
    }
    float *pair = ra == rb && ca == cb
                      ? qwen2vl_pair_frames(pa, pb, ra * ca, vision_model_info(p->vm)->patch_size)
                      : NULL;
    free(pa), free(pb);
    if (!pair)
        return ra == rb && ca == cb ? api_error_set(e, 500, NULL, "out of memory")
                                    : api_error_set(e, 400, field, "'%s': the video's frames change size", field);
    const struct vision_input in = { pair, 1, ra, ca, 2 };
    return pending_push(p, im, pd, &in, slot, key, field, cancelled, user, e);
}

/* An image part: the cache's rows, or decoded and pending. */
static int take_image(struct api_images_pool *p, const uint8_t *bytes, size_t n, const char *field,
                      struct api_images *im, struct pending *pd, int (*cancelled)(void *user),
                      void *user, struct api_error *e)
{
    char err[256];
    if (im->n == p->p.max_images)
        return api_error_set(e, 400, field, "more than %d images or video frames in one request "
                             "(--max-images)", p->p.max_images);
    const uint64_t key = vision_cache_key(p->vm, bytes, n);
    if (p->cache && vision_cache_get(p->cache, key, &im->e[im->n])) {
        im->e[im->n++].key_hash = key;
        return 0;
    }
    struct media_image_params ip = image_params(p);
    struct media_image img;
    int rc = media_image_decode(bytes, n, &ip, &img, err, sizeof err);
    if (rc < 0)
        return api_error_set(e, media_status(rc), field, "'%s': %s", field, err);
    rc = pending_add(p, im, pd, &img, true, -1, key, field, cancelled, user, e);
    media_image_release(&img);
    return rc;
}

/* A Qwen2.5-VL video: slots [first, first + count) of im hold its
 * temporal patches (each a frame pair's rows, cached on its own) until
 * merge_videos makes them one embedding of grid_t = count patches. */
struct video_group {
    int first, count;
    float t_step;               /* M-RoPE temporal ids per temporal patch */
};

/* second_per_grid_t (2 frames / the sampled fps) * tokens_per_second: how
 * far Qwen2.5-VL's temporal rotary id moves per temporal patch. */
static float video_t_step(const struct api_images_pool *p, double fps)
{
    return (float)(2.0 / fps * vision_model_info(p->vm)->tokens_per_second);
}

/* Qwen3-VL files: a video's temporal patches stay images of their own,
 * each after its time as text ("<1.5 seconds>", as Qwen3VLProcessor
 * writes them), instead of Qwen2.5-VL's time in the M-RoPE ids. */
static bool video_stamped(const struct api_images_pool *p)
{
    return !strcmp(vision_model_info(p->vm)->projector, "qwen3vl_merger");
}

/* A clip sampled (seeking, media_video_sample) into frames, each an image
 * of one global view - or, for Qwen2.5-VL, temporal patches of two frames
 * as its video processor makes them (an odd last frame paired with
 * itself), recorded in *vg to become one video. Cached per image by the
 * clip's bytes, the sampling settings and the index; when the clip's
 * duration fixes its frames and the cache has them all, nothing is
 * decoded. *n_images: the markers it became (a Qwen2.5-VL video: 1). Past
 * max_images the request is refused. */
static int take_video(struct api_images_pool *p, const uint8_t *bytes, size_t n, double fps,
                      int max_frames, const char *field, struct api_images *im, struct pending *pd,
                      struct video_group *vg, double *stamps, int *n_images,
                      int (*cancelled)(void *user), void *user, struct api_error *e)
{
    char err[256];
    struct media_video_params vp = video_params(p, fps, max_frames);
    struct media_video_frames v = { 0 };
    struct media_video_info info;
    int rc = media_video_probe(bytes, n, &vp, &info, err, sizeof err);
    int n_frames = rc >= 0 && info.duration_s > 0 ? info.n_frames : 0;
    if (rc >= 0 && !n_frames) /* an unknown duration: the frames decide */
        rc = media_video_sample(bytes, n, &vp, &v, err, sizeof err);
    if (rc < 0)
        return api_error_set(e, media_status(rc), field, "'%s': %s", field, err);
    n_frames = n_frames ? n_frames : v.n_frames;
    const bool pairs = vision_model_info(p->vm)->family == VISION_QWEN2VL;
    const int step = pairs ? 2 : 1, count = (n_frames + step - 1) / step;
    uint64_t *keys = malloc(sizeof *keys * (size_t)(count > 0 ? count : 1));
    if (!keys || im->n + count > p->p.max_images) {
        free(keys);
        media_video_frames_release(&v);
        return keys ? api_error_set(e, 400, field, "more than %d images or video frames in one "
                                    "request (--max-images)", p->p.max_images)
                    : api_error_set(e, 500, NULL, "out of memory");
    }
    const uint64_t base = vision_cache_key(p->vm, bytes, n);
    const int first = im->n;
    im->n += count;
    bool missing = false;
    for (int i = 0; i < count; i++) {
        struct { uint64_t base; int index, max_frames; double fps; } k = { base, i * step, vp.max_frames, vp.fps };
        keys[i] = vision_hash(pairs ? 0x7669646570ULL : 0x766964656fULL, &k, sizeof k);
        if (p->cache && vision_cache_get(p->cache, keys[i], &im->e[first + i]))
            im->e[first + i].key_hash = keys[i];
        else
            missing = true;
    }
    rc = 0;
    if (missing && !v.n_frames && (rc = media_video_sample(bytes, n, &vp, &v, err, sizeof err)) < 0)
        api_error_set(e, media_status(rc), field, "'%s': %s", field, err);
    else if (missing && v.n_frames != n_frames)
        rc = api_error_set(e, 400, field, "'%s': the clip gave %d frames where its duration says %d",
                           field, v.n_frames, n_frames);
    for (int i = 0; i < count && missing && rc >= 0; i++) {
        const int f = i * step;
        if (im->e[first + i].data)
            continue; /* from the cache */
        if (pairs)
            rc = pending_add_pair(p, im, pd, &v.frames[f], &v.frames[f + 1 < v.n_frames ? f + 1 : f],
                                  v.n_frames, first + i, keys[i], field, cancelled, user, e);
        else
            rc = pending_add(p, im, pd, &v.frames[f], false, first + i, keys[i], field, cancelled,
                             user, e);
    }
    const bool stamped = pairs && video_stamped(p);
    *n_images = pairs && !stamped ? 1 : count;
    if (stamped && rc >= 0) { /* each patch at the middle of its two frames' times (the
                               * planned ones when the duration is known: the same text
                               * whether the cache answered or not) */
        double *t = malloc(sizeof *t * (size_t)n_frames);
        if (t && info.duration_s > 0)
            media_video_sample_times(info.duration_s, vp.fps, vp.max_frames, t, n_frames);
        else if (t)
            memcpy(t, v.time_s, sizeof *t * (size_t)n_frames);
        for (int i = 0; t && i < count; i++)
            stamps[i] = (t[2 * i] + t[2 * i + 1 < n_frames ? 2 * i + 1 : 2 * i]) / 2;
        if (!t)
            rc = api_error_set(e, 500, NULL, "out of memory");
        free(t);
    } else if (pairs) { /* the rate the frames were taken at: spread over the clip, as qwen-vl-utils' sample_fps */
        const double dur = info.duration_s > 0 ? info.duration_s : v.duration_s;
        *vg = (struct video_group){ first, count, video_t_step(p, dur > 0 ? n_frames / dur : vp.fps) };
    }
    free(keys);
    media_video_frames_release(&v);
    return rc < 0 ? -1 : 0;
}

/* content[k] := a text part of n markers, one per line; with stamps
 * (Qwen3-VL video patches) each after "<%.1f seconds>", no line breaks. */
static int replace_with_markers(cJSON *content, int k, const char *marker, int n,
                                const double *stamps)
{
    size_t ml = strlen(marker);
    char *t = malloc((ml + 40) * (size_t)(n > 0 ? n : 1) + 1);
    if (!t)
        return -1;
    size_t len = 0;
    for (int f = 0; f < n; f++) {
        if (stamps)
            len += (size_t)sprintf(t + len, "<%.1f seconds>", stamps[f] < 1e9 ? stamps[f] : 1e9);
        else if (f)
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

/* Service thread: the image parts of req's messages, counted without
 * reading any (an Anthropic source's shape is checked); or -1 with e. */
static int count_parts(struct api_images_pool *p, cJSON *req, struct api_error *e)
{
    cJSON *msgs = cJSON_GetObjectItemCaseSensitive(req, "messages"), *msg;
    int i = 0, count = 0;
    if (!cJSON_IsArray(msgs))
        return 0; /* chatreq_build says what is wrong */
    cJSON_ArrayForEach(msg, msgs) {
        cJSON *content = cJSON_GetObjectItemCaseSensitive(msg, "content");
        for (int k = 0; cJSON_IsArray(content) && k < cJSON_GetArraySize(content); k++) {
            char field[64];
            snprintf(field, sizeof field, "messages[%d].content[%d]", i, k);
            uint8_t *bytes = NULL;
            size_t n = 0;
            int is = part_bytes(p, NULL, cJSON_GetArrayItem(content, k), field, &bytes, &n, e);
            free(bytes); /* NULL: counting reads nothing */
            if (is < 0)
                return -1;
            count += is > 0;
        }
        i++;
    }
    return count;
}

/* A part read by the worker's first pass, kept for the second. */
struct take_part {
    cJSON *content;     /* the message's content array */
    int k;              /* the part's index in it */
    char field[64];
    uint8_t *bytes;     /* malloc'ed */
    size_t n;
    int kind;           /* 1 image, 2 video, 3 video as frames */
    double fps;         /* video: frames sampled per second (0: the server's default);
                           frames: the rate they were taken at (0: 2, as qwen-vl-utils) */
    int max_frames;     /* video: at most this many (0: the server's default) */
    struct { uint8_t *bytes; size_t n; } *frames; /* kind 3: [n_frames] malloc'ed */
    int n_frames;
};

/* Frames a list of n keeps under max_frames (0: all): that many, spread
 * evenly from the first to the last; *idx (may be NULL) gets the k-th's index. */
static int frames_kept(const struct take_part *t, int k, int *idx)
{
    const int n = t->n_frames, m = t->max_frames > 0 && t->max_frames < n ? t->max_frames : n;
    if (idx)
        *idx = m > 1 ? (int)(((int64_t)2 * k * (n - 1) + (m - 1)) / (2 * (m - 1))) : 0;
    return m;
}

/* A {"type": "video", "video": [...]} part's frames: each a URL string or
 * {"url": URL} / {"image_url": URL or {"url": URL}}; read into t->frames.
 * *total counts their bytes against max_request_media_bytes. */
static int read_frames(const struct api_images_pool *p, const struct images_reader *rd,
                       const cJSON *part, struct take_part *t, size_t *total, struct api_error *e)
{
    const cJSON *arr = cJSON_GetObjectItemCaseSensitive(part, "video");
    const int n = cJSON_GetArraySize(arr), cap = 4 * p->p.max_images;
    if (n < 1 || n > cap)
        return api_error_set(e, 400, t->field, "'%s': a video needs 1 to %d frames (4 x --max-images)",
                             t->field, cap);
    if (!(t->frames = calloc((size_t)n, sizeof *t->frames)))
        return api_error_set(e, 500, NULL, "out of memory");
    for (int k = 0; k < n; k++) {
        char f[96];
        snprintf(f, sizeof f, "%s.video[%d]", t->field, k);
        const cJSON *it = cJSON_GetArrayItem(arr, k), *u = it;
        if (cJSON_IsObject(it)) {
            u = cJSON_GetObjectItemCaseSensitive(it, "url");
            if (!u)
                u = cJSON_GetObjectItemCaseSensitive(it, "image_url");
            if (cJSON_IsObject(u))
                u = cJSON_GetObjectItemCaseSensitive(u, "url");
        }
        if (!cJSON_IsString(u))
            return api_error_set(e, 400, f, "'%s': a frame is a URL string or {\"url\": URL}", f);
        if (rd->cancelled && rd->cancelled(rd->user))
            return api_error_set(e, 499, NULL, "the client left");
        if (url_bytes(p, rd, u->valuestring, f, &t->frames[k].bytes, &t->frames[k].n, e) < 0)
            return -1;
        t->n_frames = k + 1;
        *total += t->frames[k].n;
        if (*total > p->p.max_request_media_bytes)
            return api_error_set(e, 413, f, "'%s': the images and videos of one request may total "
                                 "%zu bytes; this one has more (max_request_media_bytes)", f,
                                 p->p.max_request_media_bytes);
    }
    return 0;
}

/* A video part's sampling controls: "fps" and "max_frames" in the
 * video_url object (or beside it in the part), as OpenAI-style clients of
 * Qwen2.5-VL servers send them. 0, or -1 with a 400. */
static int video_controls(const struct api_images_pool *p, const cJSON *part, struct take_part *t,
                          struct api_error *e)
{
    const cJSON *srcs[2] = { cJSON_GetObjectItemCaseSensitive(part, "video_url"), part };
    for (int i = 0; i < 2; i++) {
        if (!cJSON_IsObject(srcs[i]))
            continue;
        const cJSON *f = cJSON_GetObjectItemCaseSensitive(srcs[i], "fps");
        const cJSON *m = cJSON_GetObjectItemCaseSensitive(srcs[i], "max_frames");
        if (f && !t->fps) {
            if (!cJSON_IsNumber(f) || !(f->valuedouble >= 0.01 && f->valuedouble <= 60))
                return api_error_set(e, 400, t->field, "'%s': fps must be a number from 0.01 to 60",
                                     t->field);
            t->fps = f->valuedouble;
        }
        if (m && !t->max_frames) {
            if (!cJSON_IsNumber(m) || m->valuedouble != (int)m->valuedouble || m->valuedouble < 1 ||
                m->valuedouble > p->p.max_images)
                return api_error_set(e, 400, t->field, "'%s': max_frames must be an integer from 1 "
                                     "to %d (--max-images)", t->field, p->p.max_images);
            t->max_frames = (int)m->valuedouble;
        }
    }
    return 0;
}

/* First pass over one part's bytes: check it from its headers and count
 * the images (frames) and prompt rows it will take. No pixel is decoded
 * (a video's container is opened, and ffmpeg may decode a frame to learn
 * its parameters). A clip of unknown duration counts as one frame, the
 * least it gives. */
static int measure_part(struct api_images_pool *p, const struct take_part *t, int *n_images,
                        int64_t *n_rows, struct api_error *e)
{
    char err[256];
    int rc, rows, frames = 1;
    if (t->kind == 2) {
        struct media_video_params vp = video_params(p, t->fps, t->max_frames);
        struct media_video_info info;
        if ((rc = media_video_probe(t->bytes, t->n, &vp, &info, err, sizeof err)) < 0)
            return api_error_set(e, media_status(rc), t->field, "'%s': %s", t->field, err);
        frames = info.duration_s > 0 ? info.n_frames : 1;
        rows = vision_frame_tokens(p->vm, info.width, info.height, frames, err, sizeof err);
        if (vision_model_info(p->vm)->family == VISION_QWEN2VL)
            frames = (frames + 1) / 2; /* temporal patches of two frames */
    } else if (t->kind == 3) { /* frames: the first's size (take_frames checks the others) */
        struct media_image_params ip = image_params(p);
        struct media_image_info info;
        if ((rc = media_image_probe(t->frames[0].bytes, t->frames[0].n, &info, err, sizeof err)) < 0 ||
            (rc = media_image_check_size(info.width, info.height, &ip, err, sizeof err)) < 0)
            return api_error_set(e, media_status(rc), t->field, "'%s': %s", t->field, err);
        frames = frames_kept(t, 0, NULL);
        rows = vision_frame_tokens(p->vm, info.width, info.height, frames, err, sizeof err);
        if (vision_model_info(p->vm)->family == VISION_QWEN2VL)
            frames = (frames + 1) / 2;
    } else {
        struct media_image_params ip = image_params(p);
        struct media_image_info info;
        if ((rc = media_image_probe(t->bytes, t->n, &info, err, sizeof err)) < 0 ||
            (rc = media_image_check_size(info.width, info.height, &ip, err, sizeof err)) < 0)
            return api_error_set(e, media_status(rc), t->field, "'%s': %s", t->field, err);
        rows = vision_image_tokens(p->vm, info.width, info.height, true, err, sizeof err);
    }
    if (rows < 0)
        return api_error_set(e, media_status(rows), t->field, "'%s': %s", t->field, err);
    *n_images += frames;
    *n_rows += (int64_t)frames * rows;
    return 0;
}

/* The images alone against the context, before any is decoded: the text
 * is not tokenized yet, so this refuses only what cannot fit whatever it
 * is (api_images_attach checks the whole prompt later). */
static int check_budget(int n_images, int64_t n_rows, int n_ctx, const struct apireq_gen *g,
                        struct api_error *e)
{
    const int reserve = g && g->max_tokens_set ? g->max_tokens : 1;
    if (n_ctx <= 0 || n_rows + reserve <= n_ctx)
        return 0;
    if (g && g->max_tokens_set)
        api_error_set(e, 400, "max_tokens",
                      "This model's maximum context length is %d tokens. However, the %d images "
                      "and video frames of this request take %lld tokens and %d are requested "
                      "for the completion, before the text is counted. Please reduce the images "
                      "or max_tokens.", n_ctx, n_images, (long long)n_rows, reserve);
    else
        api_error_set(e, 400, "messages",
                      "This model's maximum context length is %d tokens. However, the %d images "
                      "and video frames of this request take %lld tokens, before the text is "
                      "counted. Please reduce the images.", n_ctx, n_images, (long long)n_rows);
    e->code = "context_length_exceeded";
    return -1;
}

static void part_release(struct take_part *t)
{
    free(t->bytes);
    t->bytes = NULL;
    for (int k = 0; k < t->n_frames; k++)
        free(t->frames[k].bytes);
    free(t->frames);
    t->frames = NULL, t->n_frames = 0;
}

static void parts_free(struct take_part *t, int n)
{
    for (int i = 0; i < n; i++)
        part_release(&t[i]);
    free(t);
}

/* A video given as frames (t->frames, kept by frames_kept): Qwen2.5-VL
 * pairs them into temporal patches (an odd last frame with itself) and
 * records them in *vg as one video; other models take each as an image of
 * one global view. Cached per image by the frames' bytes. */
static int take_frames(struct api_images_pool *p, const struct take_part *t, struct api_images *im,
                       struct pending *pd, struct video_group *vg, double *stamps, int *n_images,
                       int (*cancelled)(void *user), void *user, struct api_error *e)
{
    char err[256];
    const bool pairs = vision_model_info(p->vm)->family == VISION_QWEN2VL;
    const int m = frames_kept(t, 0, NULL), step = pairs ? 2 : 1, count = (m + step - 1) / step;
    if (im->n + count > p->p.max_images)
        return api_error_set(e, 400, t->field, "more than %d images or video frames in one request "
                             "(--max-images)", p->p.max_images);
    const int first = im->n;
    im->n += count;
    const struct media_image_params ip = image_params(p);
    int rc = 0;
    for (int i = 0; i < count && rc >= 0; i++) {
        int a, b;
        frames_kept(t, i * step, &a);
        frames_kept(t, pairs && i * step + 1 < m ? i * step + 1 : i * step, &b);
        struct { uint64_t a, b; } k = { vision_cache_key(p->vm, t->frames[a].bytes, t->frames[a].n),
                                        vision_cache_key(p->vm, t->frames[b].bytes, t->frames[b].n) };
        const uint64_t key = vision_hash(pairs ? 0x7669646670ULL : 0x7669646667ULL, &k, sizeof k);
        if (p->cache && vision_cache_get(p->cache, key, &im->e[first + i])) {
            im->e[first + i].key_hash = key;
            continue;
        }
        if (cancelled && cancelled(user))
            return api_error_set(e, 499, NULL, "the client left");
        struct media_image fa, fb;
        if ((rc = media_image_decode(t->frames[a].bytes, t->frames[a].n, &ip, &fa, err, sizeof err)) < 0)
            return api_error_set(e, media_status(rc), t->field, "'%s': frame %d: %s", t->field, a, err);
        if (!pairs) {
            rc = pending_add(p, im, pd, &fa, false, first + i, key, t->field, cancelled, user, e);
        } else if ((rc = media_image_decode(t->frames[b].bytes, t->frames[b].n, &ip, &fb, err,
                                            sizeof err)) < 0) {
            rc = api_error_set(e, media_status(rc), t->field, "'%s': frame %d: %s", t->field, b, err);
        } else {
            rc = pending_add_pair(p, im, pd, &fa, &fb, m, first + i, key, t->field, cancelled, user, e);
            media_image_release(&fb);
        }
        media_image_release(&fa);
    }
    /* m of the n frames, taken at fps (default 2, as qwen-vl-utils for frame lists) */
    const double fps = t->fps > 0 ? t->fps : 2.0;
    const bool stamped = pairs && video_stamped(p);
    *n_images = pairs && !stamped ? 1 : count;
    for (int i = 0; stamped && i < count; i++) { /* the middle of the pair's frame times */
        int a, b;
        frames_kept(t, 2 * i, &a);
        frames_kept(t, 2 * i + 1 < m ? 2 * i + 1 : 2 * i, &b);
        stamps[i] = (a + b) / (2 * fps);
    }
    if (pairs && !stamped)
        *vg = (struct video_group){ first, count, video_t_step(p, fps * m / t->n_frames) };
    return rc < 0 ? -1 : 0;
}

/* Each Qwen2.5-VL video's temporal patches (vg[g]: slots [first, first +
 * count) of im, in order) into one embedding of grid_t = count patches:
 * the rows the prompt lays out between <|vision_start|> and
 * <|vision_end|>, its media hash covering every patch and the time step
 * (the M-RoPE ids depend on it). im->e compacts to one entry per marker. */
static int merge_videos(struct api_images *im, const struct video_group *vg, int n_vg,
                        struct api_error *e)
{
    int w = 0, s = 0, rc = 0;
    for (int g = 0; g < n_vg && rc == 0; g++) {
        while (s < vg[g].first)
            im->e[w++] = im->e[s++];
        const struct vision_embd *pt = &im->e[s];
        const int cnt = vg[g].count;
        size_t rows = 0;
        bool same = cnt > 0;
        uint64_t h = vision_hash(0x7669646d67ULL, &vg[g].t_step, sizeof vg[g].t_step);
        for (int k = 0; k < cnt; k++) {
            same = same && pt[k].data && pt[k].n_embd == pt[0].n_embd && pt[k].tile_rows == pt[0].tile_rows &&
                   pt[k].tile_cols == pt[0].tile_cols && pt[k].n_tokens == pt[0].n_tokens;
            rows += (size_t)pt[k].n_tokens;
            h = vision_hash(h, &pt[k].key_hash, sizeof pt[k].key_hash);
        }
        struct vision_embd v = same ? pt[0] : (struct vision_embd){ 0 };
        if (!same) {
            rc = api_error_set(e, 400, "messages", "a video's frames change size");
            break;
        }
        if (!(v.data = malloc(rows * (size_t)v.n_embd * sizeof(float)))) {
            rc = api_error_set(e, 500, NULL, "out of memory");
            break;
        }
        for (int k = 0; k < cnt; k++) { /* pt[0] is released first: the saved v has its size */
            memcpy(v.data + (size_t)k * v.n_tokens * v.n_embd, pt[k].data,
                   (size_t)pt[k].n_tokens * v.n_embd * sizeof(float));
            vision_embd_release(&im->e[s + k]);
        }
        v.n_tokens = (int)rows, v.n_images = 1, v.grid_t = cnt, v.t_step = vg[g].t_step, v.key_hash = h;
        im->e[w++] = v;
        s += cnt;
    }
    while (s < im->n) /* after the last video (or the one that failed: kept as it was) */
        im->e[w++] = im->e[s++];
    im->n = w;
    return rc;
}

int api_images_take(struct api_images_pool *p, cJSON *req, int n_ctx,
                    const struct apireq_gen *g, int (*cancelled)(void *user), void *user,
                    struct api_images *im, struct api_error *e)
{
    const struct images_reader rd = { cancelled, user };
    memset(im, 0, sizeof *im);
    if (!(im->e = calloc((size_t)p->p.max_images, sizeof *im->e)))
        return api_error_set(e, 500, NULL, "out of memory");
    cJSON *msgs = cJSON_GetObjectItemCaseSensitive(req, "messages"), *msg;
    if (!cJSON_IsArray(msgs))
        return 0; /* chatreq_build says what is wrong */
    // first pass: read every part and measure it from its headers
    struct take_part *parts = NULL;
    struct pending pd = { 0 };
    struct video_group *vg = NULL; /* Qwen2.5-VL videos, merged after the encodes */
    double *stamps = NULL;         /* Qwen3-VL: a video's patch times (seconds) */
    int n_parts = 0, cap = 0, i = 0, n_images = 0, n_vg = 0, rc = -1;
    int64_t n_rows = 0;
    size_t total = 0;
    cJSON_ArrayForEach(msg, msgs) {
        cJSON *content = cJSON_GetObjectItemCaseSensitive(msg, "content");
        for (int k = 0; cJSON_IsArray(content) && k < cJSON_GetArraySize(content); k++) {
            if (cancelled && cancelled(user)) {
                api_error_set(e, 499, NULL, "the client left");
                goto done;
            }
            if (n_parts == cap) {
                int nc = cap ? cap * 2 : 8;
                struct take_part *np = realloc(parts, sizeof *np * (size_t)nc);
                if (!np) {
                    api_error_set(e, 500, NULL, "out of memory");
                    goto done;
                }
                parts = np, cap = nc;
            }
            struct take_part *t = &parts[n_parts];
            *t = (struct take_part){ .content = content, .k = k };
            snprintf(t->field, sizeof t->field, "messages[%d].content[%d]", i, k);
            t->kind = part_bytes(p, &rd, cJSON_GetArrayItem(content, k), t->field, &t->bytes,
                                 &t->n, e);
            if (t->kind < 0)
                goto done;
            if (t->kind == 0)
                continue;
            n_parts++;
            if (t->kind >= 2 && video_controls(p, cJSON_GetArrayItem(content, k), t, e) < 0)
                goto done;
            if (t->kind == 3 && read_frames(p, &rd, cJSON_GetArrayItem(content, k), t, &total, e) < 0)
                goto done;
            /* Every part is held until all are measured: bound their sum. */
            total += t->n;
            if (total > p->p.max_request_media_bytes) {
                api_error_set(e, 413, t->field, "'%s': the images and videos of one request may "
                              "total %zu bytes; this one has more (max_request_media_bytes)",
                              t->field, p->p.max_request_media_bytes);
                goto done;
            }
            if (measure_part(p, t, &n_images, &n_rows, e) < 0)
                goto done;
            if (n_images > p->p.max_images) {
                api_error_set(e, 400, t->field, "more than %d images or video frames in one "
                              "request (--max-images)", p->p.max_images);
                goto done;
            }
        }
        i++;
    }
    if (check_budget(n_images, n_rows, n_ctx, g, e) < 0)
        goto done;
    // second pass: decode each part (the cache answers repeats), replace
    // it by its markers; the misses go to the encode queue together
    const char *marker = vision_image_marker(p->vm);
    const int cap_img = p->p.max_images;
    pd.in = malloc(sizeof *pd.in * (size_t)cap_img);
    pd.slot = malloc(sizeof *pd.slot * (size_t)cap_img);
    pd.key = malloc(sizeof *pd.key * (size_t)cap_img);
    vg = malloc(sizeof *vg * (size_t)cap_img);
    stamps = malloc(sizeof *stamps * (size_t)cap_img);
    if (!pd.in || !pd.slot || !pd.key || !vg || !stamps) {
        api_error_set(e, 500, NULL, "out of memory");
        goto done;
    }
    for (int q = 0; q < n_parts; q++) {
        struct take_part *t = &parts[q];
        if (cancelled && cancelled(user)) {
            api_error_set(e, 499, NULL, "the client left");
            goto done;
        }
        /* a video: one marker (Qwen2.5-VL: its temporal patches one run of
         * rows) or one per frame, a line each */
        int r, n_markers = 1;
        vg[n_vg].count = 0;
        if (t->kind == 2)
            r = take_video(p, t->bytes, t->n, t->fps, t->max_frames, t->field, im, &pd, &vg[n_vg],
                           stamps, &n_markers, cancelled, user, e);
        else if (t->kind == 3)
            r = take_frames(p, t, im, &pd, &vg[n_vg], stamps, &n_markers, cancelled, user, e);
        else
            r = take_image(p, t->bytes, t->n, t->field, im, &pd, cancelled, user, e);
        part_release(t);
        if (r < 0)
            goto done;
        n_vg += vg[n_vg].count > 0;
        const bool stamped = t->kind >= 2 && video_stamped(p);
        if (replace_with_markers(t->content, t->k, marker, n_markers, stamped ? stamps : NULL) < 0) {
            api_error_set(e, 500, NULL, "out of memory");
            goto done;
        }
    }
    if (pending_flush(p, im, &pd, cancelled, user, e) < 0 || merge_videos(im, vg, n_vg, e) < 0)
        goto done;
    rc = n_parts;
done:
    pending_clear(&pd);
    free(pd.in), free(pd.slot), free(pd.key), free(vg), free(stamps);
    parts_free(parts, n_parts);
    return rc;
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
    struct api_images im;
    const struct api_model *m = api_model(j->c->api);
    /* max_tokens reserves context only under --max-tokens-policy reject;
     * otherwise it is clamped to what the prompt leaves (api_check_context) */
    struct apireq_gen budget = j->g;
    budget.max_tokens_set &= m && m->max_tokens_reject;
    int rc = api_images_take(p, j->root, m ? m->n_ctx : 0, &budget, job_cancelled, j, &im, &e);
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
    p->vm = vm, p->cache = cache;
    pthread_mutex_init(&p->lock, NULL);
    pthread_cond_init(&p->wake, NULL);
    if (prm->media_root && !realpath(prm->media_root, p->media_root)) {
        omni_fail(err, errlen, OMNI_ERR_ARG, "images: --media-root %s: no such directory",
                  prm->media_root);
        goto fail;
    }
    p->p.media_root = NULL;
    if (vc && !(p->vq = vision_queue_new(vc, NULL, err, errlen)))
        goto fail;
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
    vision_queue_shutdown(p->vq); /* workers waiting on an encode return */
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
    vision_queue_free(p->vq);
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
    int n = count_parts(p, *root, e);
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

/* <arch>.n_deepstack_layers of a qwen3vl LM (0 when absent). */
static int lm_n_deepstack(const struct api_model *m)
{
    size_t len;
    const char *arch = gguf_get_str(m->gguf, "general.architecture", &len);
    char key[96];
    uint32_t n = 0;
    if (arch && len < 64) {
        snprintf(key, sizeof key, "%.*s.n_deepstack_layers", (int)len, arch);
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
    /* Qwen3-VL: rows carry DeepStack parts the LM adds to its first layers */
    if (vision_model_info(vm)->n_deepstack != lm_n_deepstack(m))
        return api_error_set(e, 500, NULL, "the vision model's DeepStack features (%d) are not "
                             "the language model's (%d): wrong --mmproj for this model",
                             vision_model_info(vm)->n_deepstack, lm_n_deepstack(m));
    /* a template that writes the BOS itself gets no second one (as api.c's text path) */
    char bos[64];
    const int32_t bos_id = tokenizer_bos(m->tok);
    const size_t bl = bos_id >= 0 ? tokenizer_piece(m->tok, bos_id, true, bos, sizeof bos) : 0;
    const bool add_bos = !(bl > 0 && bl < sizeof bos && !strncmp(cr->prompt, bos, bl));
    if (vision_prompt_build(vm, m->tok, cr->prompt, strlen(cr->prompt), add_bos, im->e, im->n, &im->vp,
                            err, sizeof err) < 0)
        return api_error_set(e, 400, "messages", "%s", err);
    if (api_check_context(m, im->vp.n_positions, g, e) < 0)
        return -1;
    im->segs = calloc((size_t)im->vp.n_parts, sizeof *im->segs);
    if (!im->segs)
        return api_error_set(e, 500, NULL, "out of memory");
    for (int i = 0; i < im->vp.n_parts; i++) {
        const struct vision_prompt_part *p = &im->vp.parts[i];
        im->segs[i] = (struct engine_segment){ p->tokens, p->embd, p->n, p->media_hash, p->grid_rows,
                                               p->grid_cols, p->grid_t, p->t_step };
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
