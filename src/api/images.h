/* images.h - image parts of chat requests (serve --mmproj): OpenAI
 * "image_url" / "input_image" parts carrying data: URLs and Anthropic
 * "image" blocks with base64 sources are decoded (and "video_url" parts
 * sampled into frames: 1 per second, at most 16, each an image) and
 * encoded by the vision model (through its embedding cache) and replaced by
 * the model's image marker, so the chat template renders the prompt as
 * text; after rendering, the prompt becomes engine segments with the
 * image embeddings at the marker positions (vision_prompt_build).
 *
 *   struct api_images im = { 0 };
 *   if (api_images_take(a, root, &im, &e) < 0) -> respond e   // before chatreq_build
 *   ... chatreq_build, api_call_new, chatreq_attach ...
 *   if (im.n && api_images_attach(a, m, &cr, &g, &im, &rq, &e) < 0) -> respond e
 *   api_call_submit(...);
 *   api_images_free(&im);             // after submit: the engine copied the segments
 *
 * Thread safety: the lws service thread (the vision context is its own).
 * Encoding runs there too, so a new image holds other requests for the
 * encoder's time; a cached one costs a copy. */
#ifndef OMNI_API_IMAGES_H
#define OMNI_API_IMAGES_H

#include "src/api/errors.h"
#include "vision/vision.h"

struct api;
struct api_model;
struct apireq_gen;
struct chatreq;
struct cJSON;
struct engine_request;
struct engine_segment;

#define API_MAX_IMAGES 64 /* images and video frames per request */

struct api_images {
    int n;
    struct vision_embd e[API_MAX_IMAGES];
    struct vision_prompt vp;          /* set by api_images_attach */
    struct engine_segment *segs;      /* [vp.n_parts] */
};

/* Replace every image part of req's messages (OpenAI or Anthropic shape) by a text part
 * holding the image marker, encoding the images into im. Without a vision
 * model, image parts are left for chatreq_build to refuse. 0, or -1 with a
 * 400 naming the field. */
int api_images_take(struct api *a, struct cJSON *req, struct api_images *im, struct api_error *e);
/* rq's token prompt -> segments over cr's rendered prompt with the images;
 * checks the context with the image rows counted. */
int api_images_attach(struct api *a, const struct api_model *m, const struct chatreq *cr,
                      const struct apireq_gen *g, struct api_images *im,
                      struct engine_request *rq, struct api_error *e);
void api_images_free(struct api_images *im);

#endif
