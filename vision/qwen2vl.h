/* qwen2vl.h - the Qwen2.5-VL vision encoder of a llama.cpp mmproj GGUF
 * (clip.projector_type "qwen2.5vl_merger"): dynamic-resolution ViT with 14 px
 * patches (conv3d over two frames, stored as v.patch_embd.weight and
 * .weight.1), 2-D rotary positions, window attention on most blocks and full
 * attention every clip.vision.n_wa_pattern-th, RMSNorm + SwiGLU blocks, and
 * the patch merger (RMSNorm ln_q as v.post_ln, then a GELU MLP mm.0 / mm.2
 * over each 2x2 group of patches).
 *
 *   struct qwen2vl_model *q = qwen2vl_load(g, path, &info, err, sizeof err); // g: opened mmproj
 *   float *patches; int gh, gw;                  // vision_preprocess(): [gh*gw][3*14*14]
 *   qwen2vl_encode(q, tp, patches, gh, gw, NULL, &embd, err, sizeof err);
 *   qwen2vl_free(q);
 *
 * The patches come in the Hugging Face processor's order (2x2 merge groups
 * row by row, the four patches of a group together) and the output rows in
 * the merged grid's raster order (gh/2 x gw/2 rows of n_embd_lm).
 * vision.h's functions dispatch here for these files; the header is for
 * clip.c and the tests. Thread safety: a loaded model is read-only and
 * shared; qwen2vl_encode allocates its own scratch, so concurrent calls
 * are safe (each on its own pool or none). */
#ifndef OMNI_QWEN2VL_H
#define OMNI_QWEN2VL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct gguf;
struct tpool;
struct vision_embd;
struct vision_info;
struct qwen2vl_model;

/* True for the projector types this module loads. */
bool qwen2vl_is_projector(const char *type, size_t len);

/* Weights and settings from g (kept open by the caller for the model's
 * lifetime; the matrices point into it); fills info. NULL with err. */
struct qwen2vl_model *qwen2vl_load(const struct gguf *g, const char *path, struct vision_info *info,
                                   char *err, size_t errlen);
void qwen2vl_free(struct qwen2vl_model *q);

/* Encode one image of gh x gw patches (both even). vit_out (may be NULL)
 * receives the last block's output in the reference's window order
 * [gh*gw][n_embd] (what the merger reads, for tests); out gets
 * gh*gw/4 rows with tile_rows = gh/2, tile_cols = gw/2. */
int qwen2vl_encode(const struct qwen2vl_model *q, struct tpool *tp, const float *patches, int gh,
                   int gw, float *vit_out, struct vision_embd *out, char *err, size_t errlen);

/* Several images in one pass: their patch rows concatenated through every
 * matrix product, attention inside each image's windows (or the whole
 * image on full-attention blocks), never across images. At most
 * QWEN2VL_MAX_BATCH_PATCHES patches in all (the largest single image's).
 * cancelled(user), when not NULL, is polled before each block: once it
 * returns nonzero the pass stops there with OMNI_ERR_LIMIT and frees
 * everything. outs[n_img] get each image's rows as qwen2vl_encode's out
 * (all released on failure); vit_out, when not NULL, [total][n_embd] in
 * the pass's order (image after image, each in window order). */
#define QWEN2VL_MAX_BATCH_PATCHES 16384
struct qwen2vl_image {
    const float *patches;        /* [gh*gw][3*P*P] in the processor's order; frames 2:
                                    [gh*gw][3][2][P][P] (qwen2vl_pair_frames) */
    int gh, gw;                  /* patch grid, both even */
    int frames;                  /* 0 or 1: a still image (its frame twice, as the reference
                                    repeats it); 2: a temporal patch of two video frames */
};

/* Two frames' patch rows (vision_preprocess of frames of one size, n
 * rows each) as one temporal patch [n][3][2][P][P]: what the reference's
 * video processor gives for a pair of frames. malloc'ed; NULL when out of
 * memory. */
float *qwen2vl_pair_frames(const float *a, const float *b, int n, int P);
int qwen2vl_encode_batch(const struct qwen2vl_model *q, struct tpool *tp,
                         const struct qwen2vl_image *im, int n_img, int (*cancelled)(void *user),
                         void *user, float *vit_out, struct vision_embd *outs, char *err,
                         size_t errlen);

/* The reference's window order of the merged grid (mh x mw merged units,
 * windows of win x win units in raster order, units in raster order inside
 * each): order[k] = the raster index of the k-th unit; seg[0..*n_seg] the
 * window boundaries in units (seg has room for mh*mw + 1). */
void qwen2vl_window_order(int mh, int mw, int win, int *order, int *seg, int *n_seg);

/* M-RoPE position ids of a Qwen2-VL / 2.5-VL prompt, as the reference's
 * get_rope_index computes them for still images (videos: below): a text token advances all
 * three ids (temporal, height, width) by one; a run of image_token ids is
 * the next image of grids (merged rows x columns, in order) and gets
 * temporal = s, height = s + row, width = s + column, s being one past the
 * largest id so far; the text after it continues from one past the image's
 * largest id. pos is [3][n] (pos[0..n) temporal, then height, width).
 * Returns one past the largest id (where generated tokens continue), or a
 * negative enum omni_err when the runs do not match the grids. */
int qwen2vl_mrope_positions(const int32_t *ids, int n, int32_t image_token, const int (*grids)[2],
                            int n_images, int32_t *pos, char *err, size_t errlen);

/* The same with videos, as the published get_rope_index does it: a run of
 * video_token ids is the next grid's t temporal patches of rows x cols,
 * patch k at temporal id s + floor(k * t_step) (t_step = second_per_grid_t
 * * tokens_per_second, second_per_grid_t = 2 / the sampled fps), height
 * and width as an image's; the text after it continues one past the
 * largest id. grids[] go with the image and video runs in prompt order
 * (t = 1 for an image). (transformers 5.x rewrote this: it truncates
 * second_per_grid_t to an integer and continues the text at s + max(rows,
 * cols) even when the video's time went further; both agree while
 * second_per_grid_t is a whole number and the clip's last temporal id
 * stays under max(rows, cols) - tests/fixtures/vision/qwen2_5_vl/
 * clip_reference.json records both against transformers.) */
struct qwen2vl_grid {
    int t, rows, cols;           /* temporal patches (1 for an image), merged rows and columns */
    float t_step;                /* video: temporal ids per temporal patch */
};
int qwen2vl_mrope_positions_av(const int32_t *ids, int n, int32_t image_token, int32_t video_token,
                               const struct qwen2vl_grid *grids, int n_grids, int32_t *pos, char *err,
                               size_t errlen);

#endif
