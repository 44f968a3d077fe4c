/* images.c - chat image parts -> vision embeddings -> engine segments (see
 * images.h). Only data: URLs are read here; file:// and http(s) fetching
 * are answered with a 400 that says so. */
#include "src/api/images.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>
#include <libavutil/base64.h>

#include "media/image.h"
#include "src/api/api.h"
#include "src/api/chatreq.h"
#include "src/core/gguf.h"
#include "src/core/omni.h"

/* base64 text -> malloc'ed bytes. */
static int decode_base64(const char *b64, const char *field, uint8_t **out, int *n,
                         struct api_error *e)
{
    size_t len = strlen(b64);
    if (len > (size_t)INT32_MAX / 2)
        return api_error_set(e, 400, field, "'%s': image too large", field);
    int cap = (int)AV_BASE64_DECODE_SIZE(len);
    *out = malloc(cap > 0 ? cap : 1);
    if (!*out)
        return api_error_set(e, 500, NULL, "out of memory");
    *n = av_base64_decode(*out, b64, cap);
    if (*n <= 0) {
        free(*out);
        *out = NULL;
        return api_error_set(e, 400, field, "'%s': invalid base64", field);
    }
    return 0;
}

/* The bytes of an image part: 1 (*out malloc'ed), 0 when the part is no
 * image, -1 with a 400. OpenAI: {"type": "image_url" | "input_image",
 * "image_url": {"url": "data:...;base64,..."} or the URL string};
 * Anthropic: {"type": "image", "source": {"type": "base64", "data": ...}}. */
static int image_bytes(const cJSON *part, const char *field, uint8_t **out, int *n,
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
    const cJSON *u = cJSON_GetObjectItemCaseSensitive(part, key);
    if (cJSON_IsObject(u))
        u = cJSON_GetObjectItemCaseSensitive(u, "url");
    const char *url = cJSON_IsString(u) ? u->valuestring : "";
    const char *comma = strncmp(url, "data:", 5) == 0 ? strchr(url, ',') : NULL;
    if (!comma)
        return api_error_set(e, 400, field, "'%s': only data: URLs are supported "
                             "(data:image/png;base64,..., data:video/mp4;base64,...)", field);
    if (comma - url < 12 || strncmp(comma - 7, ";base64", 7) != 0)
        return api_error_set(e, 400, field, "'%s': the data: URL must be base64", field);
    if (decode_base64(comma + 1, field, out, n, e) < 0)
        return -1;
    return strcmp(key, "video_url") ? 1 : 2;
}

/* A clip's frames into im (each an image; those past API_MAX_IMAGES are
 * dropped, the caller refuses the request); *n_frames of them. */
static int take_video(struct api *a, const uint8_t *bytes, int n, const char *field,
                      struct api_images *im, int *n_frames, struct api_error *e)
{
    char err[256];
    struct vision_embd *frames;
    int rc = vision_encode_video(api_vision_ctx(a), api_vision_cache(a), bytes, (size_t)n, NULL,
                                 &frames, n_frames, NULL, NULL, err, sizeof err);
    if (rc < 0)
        return api_error_set(e, rc == OMNI_ERR_NOMEM ? 500 : 400, field, "'%s': %s", field, err);
    for (int f = 0; f < *n_frames; f++) {
        if (im->n < API_MAX_IMAGES)
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

int api_images_take(struct api *a, cJSON *req, struct api_images *im, struct api_error *e)
{
    struct vision_model *vm = api_vision(a);
    if (!vm)
        return 0;
    cJSON *msgs = cJSON_GetObjectItemCaseSensitive(req, "messages"), *msg;
    int i = 0;
    if (!cJSON_IsArray(msgs))
        return 0; /* chatreq_build says what is wrong */
    cJSON_ArrayForEach(msg, msgs) {
        cJSON *content = cJSON_GetObjectItemCaseSensitive(msg, "content");
        for (int k = 0; cJSON_IsArray(content) && k < cJSON_GetArraySize(content); k++) {
            char field[64], err[256];
            snprintf(field, sizeof field, "messages[%d].content[%d]", i, k);
            uint8_t *bytes = NULL;
            int n = 0, is = image_bytes(cJSON_GetArrayItem(content, k), field, &bytes, &n, e);
            if (is <= 0) {
                if (is < 0)
                    return -1;
                continue;
            }
            if (im->n == API_MAX_IMAGES) {
                free(bytes);
                return api_error_set(e, 400, field, "more than %d images or video frames in one "
                                     "request", API_MAX_IMAGES);
            }
            if (is == 2) { /* a video: one marker per frame, a line each */
                int before = im->n, n_frames = 0;
                int rc = take_video(a, bytes, n, field, im, &n_frames, e);
                free(bytes);
                if (rc < 0)
                    return -1;
                if (before + n_frames > API_MAX_IMAGES)
                    return api_error_set(e, 400, field, "more than %d images or video frames in "
                                         "one request", API_MAX_IMAGES);
                if (replace_with_markers(content, k, vision_image_marker(vm), n_frames) < 0)
                    return api_error_set(e, 500, NULL, "out of memory");
                continue;
            }
            struct media_image_params ip = media_image_default_params();
            bool hit;
            int rc = vision_encode_bytes(api_vision_ctx(a), api_vision_cache(a), bytes, (size_t)n,
                                         &ip, &im->e[im->n], &hit, err, sizeof err);
            free(bytes);
            if (rc < 0)
                return api_error_set(e, rc == OMNI_ERR_NOMEM ? 500 : 400, field, "'%s': %s", field, err);
            im->n++;
            if (replace_with_markers(content, k, vision_image_marker(vm), 1) < 0)
                return api_error_set(e, 500, NULL, "out of memory");
        }
        i++;
    }
    return 0;
}

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

int api_images_attach(struct api *a, const struct api_model *m, const struct chatreq *cr,
                      const struct apireq_gen *g, struct api_images *im,
                      struct engine_request *rq, struct api_error *e)
{
    char err[256];
    struct vision_model *vm = api_vision(a);
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
    vision_prompt_release(&im->vp);
    free(im->segs);
    memset(im, 0, sizeof *im);
}
