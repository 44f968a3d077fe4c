/* mmproj_load.h - reading an mmproj GGUF's tensors and keys with one error
 * record: the first failure names the file and the tensor or key, later
 * calls are no-ops on it (the loaders of qwen2vl.c and qwen3vl.c). */
#ifndef OMNI_VISION_MMPROJ_LOAD_H
#define OMNI_VISION_MMPROJ_LOAD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "src/core/matmul.h"

struct gguf;
struct vision_info;
struct gguf_tensor;

struct mmproj_load {
    const struct gguf *g;
    const char *path;
    char *err;
    size_t errlen;
    int rc;     /* the first failure (a negative omni_err), 0 so far */
};

/* Records "vision: PATH: WHAT 'NAME'" unless a failure is already recorded;
 * returns l->rc. */
int mmproj_fail(struct mmproj_load *l, int code, const char *what, const char *name);
/* The tensor, NULL when absent (a failure if required) or of an unsupported type. */
const struct gguf_tensor *mmproj_find(struct mmproj_load *l, const char *name, bool required);
/* A required matrix of n_out rows of n_in values into *out (data stays in the file). */
void mmproj_mat(struct mmproj_load *l, const char *name, int64_t n_in, int64_t n_out,
                struct omni_tensor *out);
/* n floats, malloc'ed; NULL for an absent optional one (or on failure, with l->rc). */
float *mmproj_vec(struct mmproj_load *l, const char *name, int64_t n, bool required);
/* A u32 key in 1..max into *out; an absent optional key leaves *out. 0 or l->rc. */
int mmproj_key(struct mmproj_load *l, const char *key, int *out, bool required, int max);
/* A required array of 3 floats (image_mean / image_std) into out. 0 or l->rc. */
int mmproj_floats3(struct mmproj_load *l, const char *key, float out[3]);
/* The Qwen-VL resize bounds into in (merge unit = (patch * merge)^2 pixels):
 * images from clip.vision.image_min/max_pixels (llama.cpp's 8..4096 units
 * when absent), at most max_units units; video frames from
 * clip.vision.video_min/max/total_pixels, else the reference's defaults -
 * per frame (qwen-vl-utils) or, with clip_budget, over the clip
 * (Qwen3VLVideoProcessor). 0 or l->rc. */
int mmproj_pixel_limits(struct mmproj_load *l, struct vision_info *in, int64_t unit, int max_units,
                        bool clip_budget);

#endif
