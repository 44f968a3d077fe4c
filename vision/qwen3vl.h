/* qwen3vl.h - the Qwen3-VL vision encoder of a llama.cpp mmproj GGUF
 * (clip.projector_type "qwen3vl_merger"): dynamic-resolution ViT with 16 px
 * patches (conv3d with bias, stored per frame as v.patch_embd.weight and
 * .weight.1), a learned position table v.position_embd (a square grid,
 * bilinearly interpolated to each image's patch grid) plus 2-D rotary
 * positions, LayerNorm + GELU (tanh) blocks with a fused attn_qkv, full
 * attention inside each image (no windows), the merger (LayerNorm v.post_ln
 * per patch, each 2x2 group as one row, mm.0 / exact GELU / mm.2) and
 * DeepStack: after every block listed in clip.vision.is_deepstack_layers,
 * v.deepstack.<block>.{norm,fc1,fc2} (LayerNorm over the 2x2 group's row,
 * linear, exact GELU, linear) give extra rows of the LM's width that the
 * language model adds to its first layers' hidden states.
 *
 *   struct qwen3vl_model *q = qwen3vl_load(g, path, &info, err, sizeof err); // g: opened mmproj
 *   struct qwen2vl_image im = { patches, gh, gw, 1 };  // vision_preprocess() rows [gh*gw][3*16*16]
 *   qwen3vl_encode_batch(q, tp, &im, 1, NULL, NULL, NULL, &embd, err, sizeof err);
 *   qwen3vl_free(q);
 *
 * Output rows are llama.cpp's layout: each merged unit (raster order of the
 * gh/2 x gw/2 grid) is one row of n_embd_lm * (1 + n_deepstack) floats - the
 * merger's output, then each DeepStack merger's in block order; that is the
 * row llm_batch.embd takes for a qwen3vl language model. Thread safety: a
 * loaded model is read-only and shared; each encode allocates its own
 * scratch. */
#ifndef OMNI_QWEN3VL_H
#define OMNI_QWEN3VL_H

#include <stdbool.h>
#include <stddef.h>

#include "vision/qwen2vl.h" /* struct qwen2vl_image: the same patch input */

struct gguf;
struct tpool;
struct vision_embd;
struct vision_info;
struct qwen3vl_model;

/* True for "qwen3vl_merger". */
bool qwen3vl_is_projector(const char *type, size_t len);

/* Weights and settings from g (kept open by the caller for the model's
 * lifetime; the matrices point into it); fills info (n_deepstack
 * included). NULL with err. */
struct qwen3vl_model *qwen3vl_load(const struct gguf *g, const char *path, struct vision_info *info,
                                   char *err, size_t errlen);
void qwen3vl_free(struct qwen3vl_model *q);

/* Several images in one pass (rows concatenated through every matrix
 * product, attention inside each image), at most QWEN2VL_MAX_BATCH_PATCHES
 * patches in all. cancelled(user), when not NULL, is polled before each
 * block (OMNI_ERR_LIMIT once it returns nonzero, everything freed). outs
 * [n_img] get gh*gw/4 wide rows each (see above; tile_rows = gh/2,
 * tile_cols = gw/2); vit_out, when not NULL, [total][n_embd] the last
 * block's output in the processor's patch order (what the merger reads). */
int qwen3vl_encode_batch(const struct qwen3vl_model *q, struct tpool *tp,
                         const struct qwen2vl_image *im, int n_img, int (*cancelled)(void *user),
                         void *user, float *vit_out, struct vision_embd *outs, char *err,
                         size_t errlen);

/* The learned position table interpolated to a gh x gw grid as the
 * reference does (align-corners bilinear over the square table, in the
 * processor's 2x2-group order): out [gh*gw][n_embd]. For tests. */
int qwen3vl_pos_embed(const struct qwen3vl_model *q, int gh, int gw, float *out);

#endif
