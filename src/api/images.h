/* images.h - image parts of chat requests (serve --mmproj): OpenAI
 * "image_url" / "input_image" / "video_url" parts and Anthropic "image"
 * blocks (base64 sources) are read (data: URLs; http(s) through
 * download_fetch with size/time limits and no private addresses unless
 * allowed; file:// under --media-root only), measured from their headers
 * (a request whose images pass --max-images or cannot fit the context is
 * refused before any pixel is decoded), decoded and preprocessed on a
 * small worker pool, encoded through the process's encode queue
 * (vision/encode_queue.h: a request's images, and those of requests that
 * wait together, share encoder passes; the embedding cache answers
 * repeats before anything is decoded), and replaced
 * by the model's image marker, so the chat template renders the prompt as
 * text; then the prompt becomes engine segments with the embeddings at the
 * marker positions (vision_prompt_build) and the request is submitted from
 * the worker. A video ("video_url", or {"type": "video", "video": URL or
 * [frame URLs]}) is sampled into frames by seeking (1 per second, at most
 * 16; a frame list is taken at 2 fps; the part's "fps" / "max_frames"
 * choose), each an image of its own - except for Qwen2.5-VL, where pairs
 * of frames are temporal patches and the video becomes one embedding
 * (vision_embd.grid_t patches, .t_step temporal M-RoPE ids per patch) for
 * one marker, and Qwen3-VL, where each patch is an image after its time
 * ("<1.2 seconds>").
 *
 *   c = api_call_new(...);                                  // service thread
 *   rc = api_images_defer(pool, c, r, &root, &g, then, &e); // 1: a worker has it
 *   if (rc == 0) rc = then(c, r, root, &g, NULL, &e);      // no images: go on here
 *   if (rc < 0) -> api_call_free(c), respond e
 *
 *   then(c, r, root, g, im, e):     // r NULL on a worker (the response is deferred)
 *     ... chatreq_build, chatreq_attach ...
 *     if (im && im->n && api_images_attach(pool, m, &cr, g, im, &rq, e) < 0) return -1;
 *     return api_call_submit(c, r, &rq, start), 0;
 *
 * Thread safety: api_images_defer on the service thread; the workers read
 * and preprocess, hand the images to the encode queue (whose thread owns
 * the vision context), never touch lws, and answer through the call's
 * ws_out. A client that leaves stops the job between fetches and parts,
 * leaves the encode queue at once, and stops a running encoder pass
 * between blocks (Qwen2.5-VL) or tiles unless another request shares it. */
#ifndef OMNI_API_IMAGES_H
#define OMNI_API_IMAGES_H

#include <stdbool.h>
#include <stdint.h>

#include "src/api/errors.h"
#include "vision/vision.h"

struct api_call;
struct api_images_pool;
struct api_model;
struct apireq_gen;
struct chatreq;
struct cJSON;
struct engine_request;
struct engine_segment;
struct ws_req;

struct api_images_params {
    int max_images;            /* images + video frames per request (default 64: --max-images) */
    int64_t max_image_pixels;  /* per image / frame (default 50 M: --max-image-pixels) */
    double max_video_seconds;  /* longer clips fail (default 3600: --max-video-seconds) */
    const char *media_root;    /* file:// URLs resolve inside it; NULL: refused (--media-root) */
    bool allow_private_urls;   /* http(s) to loopback/private addresses (--allow-private-urls) */
    size_t max_url_bytes;      /* fetched or read bytes per URL (default 64 MiB) -> 413 */
    size_t max_request_media_bytes; /* all image and video bytes of one request, held
                                  together while they are measured (default 256 MiB) -> 413 */
    long url_timeout_s;        /* per fetch (default 30) */
    int n_workers;             /* default 2: one can fetch while another encodes */
};
struct api_images_params api_images_default_params(void);

/* Workers over a vision model, its encoder scratch and cache (borrowed
 * until api_images_pool_free, which answers queued jobs with 503, fails
 * waiting encodes, joins the workers and the encode queue's thread: call
 * it while the engine still runs). vc NULL: parts are only counted and
 * measured (tests). NULL + err. */
struct api_images_pool *api_images_pool_new(struct vision_model *vm, struct vision_ctx *vc,
                                            struct vision_cache *cache,
                                            const struct api_images_params *p, char *err,
                                            size_t errlen);
void api_images_pool_free(struct api_images_pool *p);
struct vision_model *api_images_model(struct api_images_pool *p);
struct vision_cache *api_images_cache(struct api_images_pool *p);

struct api_images {
    int n;
    struct vision_embd *e;            /* [n] (capacity max_images) */
    struct vision_prompt vp;          /* set by api_images_attach */
    struct engine_segment *segs;      /* [vp.n_parts] */
};

/* The protocol's rest of a chat request once its image parts are markers
 * and im holds their embeddings (im NULL: no images). r is NULL on a worker.
 * 0 when api_call_submit answered (the call is gone), -1 with e when the
 * call was not submitted. */
typedef int (*api_images_then_fn)(struct api_call *c, struct ws_req *r, struct cJSON *root,
                                  const struct apireq_gen *g, struct api_images *im,
                                  struct api_error *e);
/* Service thread. 0: no image parts (or no pool: chatreq_build refuses
 * them), nothing done; -1 with a 400 (more image parts than max_images) or
 * 500; 1: the call's response is deferred and a worker reads and encodes
 * the images, then runs then(); *root and *g now belong to the job
 * (*root = NULL, *g re-initialised). */
int api_images_defer(struct api_images_pool *p, struct api_call *c, struct ws_req *r,
                     struct cJSON **root, struct apireq_gen *g, api_images_then_fn then,
                     struct api_error *e);
/* The worker's part of api_images_defer (exposed for tests): read every
 * image part of req (cancelled(user), when not NULL, is polled between
 * parts, during fetches and by the encode queue, from its thread too,
 * while the images encode) and measure each from its headers - pixel and
 * duration limits, the frames a clip gives, the prompt rows each takes
 * (vision_image_tokens) - so that a request is refused before any pixel is
 * decoded when its images and frames pass max_images, or need more than
 * n_ctx positions with g's completion (400 context_length_exceeded;
 * n_ctx <= 0: not checked); then decode and encode them into im (im->e
 * allocated here; free with api_images_free whatever the result) and
 * replace each part in req by its markers (im->e[i] goes with the i-th
 * marker: a Qwen2.5-VL video's patches are one entry). The number of parts, or -1
 * with e (400, 413 past a byte limit, 499 when cancelled, 503 shutting
 * down, 500). */
int api_images_take(struct api_images_pool *p, struct cJSON *req, int n_ctx,
                    const struct apireq_gen *g, int (*cancelled)(void *user), void *user,
                    struct api_images *im, struct api_error *e);

/* rq's token prompt -> segments over cr's rendered prompt with the images;
 * checks the context with the image rows counted. */
int api_images_attach(struct api_images_pool *p, const struct api_model *m,
                      const struct chatreq *cr, const struct apireq_gen *g,
                      struct api_images *im, struct engine_request *rq, struct api_error *e);
void api_images_free(struct api_images *im);

#endif
