/* vision.h - image encoders for vision-language models, loaded from llama.cpp
 * mmproj GGUF files: LLaVA-1.5-style CLIP ViT + 2-layer MLP projector
 * (clip.projector_type "mlp"), SmolVLM / Idefics3 SigLIP + pixel shuffle +
 * linear connector with tiling ("idefics3") and the Qwen2.5-VL dynamic-
 * resolution ViT + patch merger ("qwen2.5vl_merger", vision/qwen2vl.h),
 * Gemma 3's SigLIP + average pool + soft-embedding norm + projection
 * ("gemma3");
 * per-family preprocessing; a content-keyed LRU cache of the projected
 * embeddings.
 *
 *   struct vision_model *vm = vision_model_load("mmproj.gguf", err, sizeof err);
 *   struct vision_ctx *vc = vision_ctx_new(vm, tp, err, sizeof err);
 *   struct vision_cache *cache = vision_cache_new(256 << 20);         // --vision-cache-mb
 *   struct vision_embd e;
 *   vision_encode_bytes(vc, cache, jpeg, len, NULL, &e, err, sizeof err);
 *   struct vision_layout lay;                       // where e's rows go in the prompt
 *   vision_layout_build(vm, &e, &lay, err, sizeof err);
 *   for (int i = 0; i < lay.n; i++)                 // text: tokenize with special tokens;
 *       ...                                         // else rows [row0, row0 + n_rows) of e
 *   vision_layout_release(&lay); vision_embd_release(&e);
 *
 * The embeddings have the language model's width (vision_model_info()->
 * n_embd_lm) and replace token embeddings in llm_batch.embd at the layout's
 * image positions. Thread safety: a vision_model is read-only after load and
 * shared; a vision_ctx (scratch) belongs to one thread at a time; a
 * vision_cache is internally locked and shared by every thread. */
#ifndef OMNI_VISION_H
#define OMNI_VISION_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct media_image;
struct media_image_params;
struct tpool;
struct vision_cache;
struct vision_ctx;
struct vision_model;

enum vision_family {
    VISION_LLAVA,    /* CLIP ViT (CLS + patches), layer feature_layer, MLP projector */
    VISION_IDEFICS3, /* SigLIP ViT, post-norm, pixel shuffle, linear connector, tiles */
    VISION_QWEN2VL,  /* Qwen2.5-VL (and Qwen3-VL, projector "qwen3vl_merger"): dynamic
                        resolution, 2x2 patch merger, M-RoPE ids in the LM */
    VISION_GEMMA3,   /* Gemma 3: SigLIP at a fixed size, k x k average pool, RMSNorm, projection */
};

struct vision_info {
    enum vision_family family;
    const char *projector;   /* "mlp" / "idefics3" */
    int n_embd_lm;           /* width of the projected embeddings (the projector's output rows) */
    int image_size;          /* encoder input side, pixels (qwen2vl: the side unit, 28) */
    int patch_size;
    int n_embd;              /* ViT width */
    int n_layer;             /* ViT layers run */
    int n_head;
    int scale_factor;        /* idefics3 pixel shuffle, gemma3 average-pool kernel (1 for llava) */
    int longest_edge;        /* idefics3: images are first resized to this longest edge */
    int tokens_per_image;    /* embeddings per encoder pass (per tile); qwen2vl: 0 (per image size) */
    float image_mean[3], image_std[3];
    int merge_size;          /* qwen2vl: patches merged per side (2); 0 otherwise */
    int64_t min_pixels, max_pixels; /* qwen2vl: resized area bounds (multiples of 28 px sides) */
    int tokens_per_second;   /* qwen2vl: M-RoPE temporal ids per second of video
                                (clip.vision.tokens_per_second; 2 when the file lacks it) */
    int n_deepstack;         /* qwen3vl: DeepStack mergers; each embedding row is then
                                n_embd_lm * (1 + n_deepstack) floats (vision/qwen3vl.h) */
    uint64_t file_hash;      /* content hash of the mmproj file (cache key part) */
    uint64_t preprocess_hash;/* hash of every preprocessing parameter above and below */
    /* qwen2vl video frames (vision_video_frame_size), apart from the image
     * bounds: clip.vision.video_min_pixels / video_max_pixels /
     * video_total_pixels, else the reference's defaults (docs/vision.md) */
    int64_t video_min_pixels, video_max_pixels; /* area bounds: of one frame, or with
                                                   video_clip_budget of frames x area */
    int64_t video_total_pixels; /* Qwen2.5-VL: the budget over all frames (each frame at most
                                   total * 2 / frames, qwen-vl-utils); 0: none */
    bool video_clip_budget;  /* Qwen3-VL: the bounds hold the clip (Qwen3VLVideoProcessor) */
};

struct vision_model *vision_model_load(const char *path, char *err, size_t errlen);
void vision_model_free(struct vision_model *m);
const struct vision_info *vision_model_info(const struct vision_model *m);

/* Projected embeddings of one image. */
struct vision_embd {
    int n_tokens;            /* rows */
    int n_embd;              /* = n_embd_lm (qwen3vl: n_embd_lm * (1 + n_deepstack)) */
    float *data;             /* [n_tokens][n_embd], malloc'ed, owned by the struct */
    int tile_rows, tile_cols;/* idefics3 grid (0 x 0: the image was one tile, no grid) */
    int n_images;            /* encoder passes: tiles + global view (llava: 1) */
    uint64_t key_hash;       /* the cache key this came from (media hash for prefix caching) */
    int grid_t;              /* qwen2vl video: temporal patches of tile_rows x tile_cols rows each
                                (n_tokens = grid_t * rows * cols); 0: an image */
    float t_step;            /* qwen2vl video: M-RoPE temporal ids per temporal patch
                                (second_per_grid_t * tokens_per_second; patch k at floor(k * t_step)) */
};
void vision_embd_release(struct vision_embd *e);

/* ---- encoding ------------------------------------------------------------- */

/* Scratch for encoding with m on the threads of tp (tp may be NULL). */
struct vision_ctx *vision_ctx_new(const struct vision_model *m, struct tpool *tp, char *err,
                                  size_t errlen);
void vision_ctx_free(struct vision_ctx *ctx);

/* Preprocess (per family) and encode a decoded image. tiles = false keeps
 * an Idefics3 image to the single global view (video frames, as the
 * reference processors do without image splitting); llava ignores it. */
int vision_encode_image(struct vision_ctx *ctx, const struct media_image *img, bool tiles,
                        struct vision_embd *out, char *err, size_t errlen);

/* Decode encoded image bytes (media_image_decode with ip, NULL = defaults)
 * and encode them, through cache when it is not NULL: a hit copies the
 * stored embeddings and skips decoding and the encoder. *hit (may be NULL)
 * says which happened. */
int vision_encode_bytes(struct vision_ctx *ctx, struct vision_cache *cache, const void *data,
                        size_t len, const struct media_image_params *ip, struct vision_embd *out,
                        bool *hit, char *err, size_t errlen);

/* Sample a clip (media_video_sample with vp, NULL = defaults) and encode
 * each frame as one global view: *frames (malloc'ed, release each with
 * vision_embd_release, then free the array) gets *n_frames embeddings,
 * *times_s (malloc'ed, may be NULL) their times. Through cache when not
 * NULL, keyed per frame by the clip's bytes, vp's sampling and the index:
 * a repeated clip is decoded again but not encoded. *n_hits (may be NULL)
 * counts frames the cache had. */
struct media_video_params;
int vision_encode_video(struct vision_ctx *ctx, struct vision_cache *cache, const void *data,
                        size_t len, const struct media_video_params *vp, struct vision_embd **frames,
                        int *n_frames, double **times_s, int *n_hits, char *err, size_t errlen);

/* Several preprocessed images (vision_preprocess's outputs, owned by the
 * caller) in as few encoder passes as their shapes allow: Qwen2.5-VL
 * images share passes (their patch rows concatenated through every
 * matrix product, attention per image), up to the row bound of one pass;
 * other families encode each image's tiles one pass after another.
 * cancelled(user), when not NULL, is polled between blocks (qwen2vl) or
 * tiles: once nonzero, OMNI_ERR_LIMIT with everything freed. outs[n] get
 * what vision_encode_image would give (no key_hash); all released on
 * failure. */
struct vision_input {
    const float *pixels;     /* n_images planes (qwen2vl: patch rows) */
    int n_images, tile_rows, tile_cols;
    int frames;              /* qwen2vl: 2 for a temporal patch of two video frames
                                (qwen2vl_pair_frames); 0 or 1 otherwise */
};
int vision_encode_batch(struct vision_ctx *ctx, const struct vision_input *in, int n,
                        int (*cancelled)(void *user), void *user, struct vision_embd *outs,
                        char *err, size_t errlen);

/* ---- the family's prompt layout -------------------------------------------
 * llava: the image's rows replace the "<image>" marker as one run.
 * idefics3: for each tile row r, col c: "<fake_token_around_image><row_r_col_c>"
 * + tokens_per_image rows; "\n" after each tile row; then
 * "\n<fake_token_around_image><global-img>" + the global view's rows +
 * "<fake_token_around_image>" (without tiles: "<fake_token_around_image>
 * <global-img>" + rows + "<fake_token_around_image>"). Text segments are
 * tokenized with special tokens parsed. */
struct vision_segment {
    const char *text;        /* NUL-terminated text, or NULL for an embedding run */
    int row0, n_rows;        /* embedding rows (when text is NULL) */
};
struct vision_layout {
    int n;
    struct vision_segment *seg;
    char *storage;           /* the texts */
};
/* The marker a chat message carries where an image goes ("<image>"). */
const char *vision_image_marker(const struct vision_model *m);
int vision_layout_build(const struct vision_model *m, const struct vision_embd *e,
                        struct vision_layout *out, char *err, size_t errlen);
void vision_layout_release(struct vision_layout *l);

/* ---- whole prompts ------------------------------------------------------------
 * A rendered chat prompt with one vision_image_marker() per image, turned
 * into the runs an engine request takes (engine_segment): token ids of the
 * text between images (special tokens parsed) and, per image, its layout -
 * marker texts as ids, embedding rows by pointer into images[i].data (keep
 * the images alive while the prompt is used). add_bos prepends the
 * tokenizer's BOS when its vocabulary asks for one. */
struct tokenizer;
struct vision_prompt_part {
    const int32_t *tokens;   /* n ids, or NULL for embedding rows */
    const float *embd;       /* [n][vision_embd.n_embd] (n_embd_lm; qwen3vl: wider) */
    int n;
    uint64_t media_hash;     /* the image's key_hash for rows; 0 for tokens */
    int grid_rows, grid_cols;/* qwen2vl rows: the image's merged grid (M-RoPE ids); else 0 */
    int grid_t;              /* qwen2vl video rows: temporal patches (vision_embd.grid_t); else 0 */
    float t_step;            /* qwen2vl video rows: vision_embd.t_step */
};
struct vision_prompt {
    int n_parts;
    int n_positions;         /* tokens + embedding rows: usage.prompt_tokens */
    struct vision_prompt_part *parts;
    int32_t *ids;            /* storage of every part's tokens */
};
int vision_prompt_build(const struct vision_model *m, const struct tokenizer *tok,
                        const char *text, size_t len, bool add_bos,
                        const struct vision_embd *images, int n_images, struct vision_prompt *out,
                        char *err, size_t errlen);
void vision_prompt_release(struct vision_prompt *p);

/* ---- cache ------------------------------------------------------------------ */

/* The 64-bit content hash behind the keys (and the mmproj file hash):
 * fold len bytes of data into seed. */
uint64_t vision_hash(uint64_t seed, const void *data, size_t len);

struct vision_cache_stats {
    uint64_t hits, misses, evictions;
    size_t bytes, entries, max_bytes;
    double encode_ms_total;  /* encoder time spent on misses */
};

struct vision_cache *vision_cache_new(size_t max_bytes);
void vision_cache_free(struct vision_cache *c);
/* Key = hash(model file hash, preprocessing hash, image bytes). */
uint64_t vision_cache_key(const struct vision_model *m, const void *data, size_t len);
/* Copy the entry for key into *out: true on a hit. Counts a hit or miss. */
bool vision_cache_get(struct vision_cache *c, uint64_t key, struct vision_embd *out);
/* Store a copy (evicting least recently used entries to fit); entries larger
 * than the whole cache are not stored. encode_ms feeds the stats. */
void vision_cache_put(struct vision_cache *c, uint64_t key, const struct vision_embd *e,
                      double encode_ms);
struct vision_cache_stats vision_cache_stats(struct vision_cache *c);

/* ---- preprocessing (exposed for tests and tools) ---------------------------- */

enum vision_filter { VISION_FILTER_BILINEAR, VISION_FILTER_BICUBIC, VISION_FILTER_LANCZOS };

/* Resample RGB8 src (sw x sh) to dst (dw x dh) exactly as Pillow's
 * Image.resize does for 8-bit images (the reference processors use it). */
void vision_resample(const uint8_t *src, int sw, int sh, uint8_t *dst, int dw, int dh,
                     enum vision_filter filter);

/* Qwen2VLImageProcessor's smart_resize: the w x h image's new size, both
 * sides multiples of factor (patch * merge), each side rounded half to even
 * as Python's round; an area over max_pixels scales both down by
 * sqrt(area / max) and floors (at least factor), one under min_pixels
 * scales up and ceils. Fails on aspect ratios over 200. */
int vision_smart_resize(int w, int h, int factor, int64_t min_pixels, int64_t max_pixels, int *rw,
                        int *rh, char *err, size_t errlen);

/* The size a frame of a clip of n_frames sampled frames is resized to
 * (qwen2vl family; the image bounds are not used): Qwen2.5-VL as
 * qwen-vl-utils' fetch_video - smart_resize within video_min_pixels and
 * max(min(video_max_pixels, video_total_pixels * 2 / frames),
 * video_min_pixels * 1.05), frames rounded up to even; Qwen3-VL
 * (video_clip_budget) as Qwen3VLVideoProcessor - smart_resize of
 * frames x area (frames rounded half to even to a multiple of 2) within
 * [video_min_pixels, video_max_pixels]. */
int vision_video_frame_size(const struct vision_info *in, int w, int h, int n_frames, int *rw,
                            int *rh, char *err, size_t errlen);

/* New video bounds for m (0 keeps a value; total < 0 clears it), before
 * m is shared: the preprocessing hash (cache keys) follows. OMNI_ERR_ARG
 * (nothing changed) when min would pass max or max be under one merge
 * unit; other families ignore the call. */
int vision_model_set_video_limits(struct vision_model *m, int64_t min_pixels, int64_t max_pixels,
                                  int64_t total_pixels);

/* The encoder inputs for img: n_images planes of float [3][S][S] (S =
 * image_size), normalized; *pixels malloc'ed. Also the tile grid.
 * qwen2vl: one image of patch rows [tile_rows * tile_cols][3][P][P] in
 * the reference processor's 2x2-group order, *tile_rows x *tile_cols
 * being the patch grid of the resized image (both even). */
int vision_preprocess(const struct vision_model *m, const struct media_image *img, bool tiles,
                      float **pixels, int *n_images, int *tile_rows, int *tile_cols, char *err,
                      size_t errlen);
/* A video frame (one of n_frames sampled) as vision_preprocess makes an
 * image without tiles, sized by vision_video_frame_size for qwen2vl. */
int vision_preprocess_frame(const struct vision_model *m, const struct media_image *img,
                            int n_frames, float **pixels, int *n_images, int *tile_rows,
                            int *tile_cols, char *err, size_t errlen);

/* The embedding rows an image of width x height becomes (tiles as in
 * vision_encode_image), computed from the size alone: what a request's
 * images will take of the context, known from their headers before any
 * pixel is decoded. Negative enum omni_err when the size cannot be encoded
 * (too many tiles). */
int vision_image_tokens(const struct vision_model *m, int64_t width, int64_t height, bool tiles,
                        char *err, size_t errlen);
/* The same for a frame of a clip of n_frames (vision_preprocess_frame). */
int vision_frame_tokens(const struct vision_model *m, int64_t width, int64_t height, int n_frames,
                        char *err, size_t errlen);

/* Encode n_images preprocessed planes; features (may be NULL) receives the
 * ViT output the projector reads, [n_images][n_patches][n_embd]. */
int vision_encode_pixels(struct vision_ctx *ctx, const float *pixels, int n_images,
                         float *features, struct vision_embd *out, char *err, size_t errlen);

#endif
