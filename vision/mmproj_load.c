/* mmproj_load.c - an mmproj GGUF's tensors and keys with one error record
 * (see mmproj_load.h). */
#include "vision/mmproj_load.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "src/core/gguf.h"
#include "src/core/omni.h"
#include "src/core/quant.h"
#include "src/core/tensor.h"
#include "vision/vision.h"

int mmproj_fail(struct mmproj_load *l, int code, const char *what, const char *name)
{
    if (!l->rc)
        l->rc = omni_fail(l->err, l->errlen, code, "vision: %s: %s '%s'", l->path, what, name);
    return l->rc;
}

const struct gguf_tensor *mmproj_find(struct mmproj_load *l, const char *name, bool required)
{
    const struct gguf_tensor *t = gguf_find_tensor(l->g, name);
    if (!t) {
        if (required)
            mmproj_fail(l, OMNI_ERR_FORMAT, "missing tensor", name);
        return NULL;
    }
    const struct ggml_type_traits *tr = ggml_type_traits_of(t->type);
    if (!tr || !tr->supported) {
        mmproj_fail(l, OMNI_ERR_UNSUPPORTED, "unsupported type of tensor", name);
        return NULL;
    }
    return t;
}

void mmproj_mat(struct mmproj_load *l, const char *name, int64_t n_in, int64_t n_out,
                struct omni_tensor *out)
{
    const struct gguf_tensor *t = mmproj_find(l, name, true);
    if (!t)
        return;
    if (t->ne[0] != n_in || t->ne[1] * t->ne[2] * t->ne[3] != n_out) {
        mmproj_fail(l, OMNI_ERR_FORMAT, "wrong shape of tensor", name);
        return;
    }
    *out = (struct omni_tensor){ .type = t->type, .ne = { n_in, n_out }, .data = t->data };
}

float *mmproj_vec(struct mmproj_load *l, const char *name, int64_t n, bool required)
{
    const struct gguf_tensor *t = mmproj_find(l, name, required);
    if (!t)
        return NULL;
    if (t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3] != n) {
        mmproj_fail(l, OMNI_ERR_FORMAT, "wrong size of tensor", name);
        return NULL;
    }
    float *v = malloc(sizeof *v * (size_t)n);
    if (!v) {
        mmproj_fail(l, OMNI_ERR_NOMEM, "out of memory for", name);
        return NULL;
    }
    struct omni_tensor w = { .type = t->type, .ne = { n, 1 }, .data = t->data };
    omni_tensor_get_row(&w, 0, v);
    return v;
}

int mmproj_key(struct mmproj_load *l, const char *key, int *out, bool required, int max)
{
    uint32_t v;
    int rc = gguf_get_u32(l->g, key, &v);
    if (rc == OMNI_ERR_NOTFOUND && !required)
        return 0;
    if (rc < 0 || v == 0 || v > (uint32_t)max)
        return mmproj_fail(l, OMNI_ERR_FORMAT, "missing or out-of-range key", key);
    *out = (int)v;
    return 0;
}

int mmproj_floats3(struct mmproj_load *l, const char *key, float out[3])
{
    enum gguf_type et;
    uint64_t n;
    const void *p = gguf_get_arr_data(l->g, key);
    if (gguf_get_arr(l->g, key, &et, &n) < 0 || et != GGUF_TYPE_FLOAT32 || n != 3 || !p)
        return mmproj_fail(l, OMNI_ERR_FORMAT, "missing or not 3 floats: key", key);
    memcpy(out, p, 3 * sizeof(float));
    return 0;
}

/* An optional u32 pixel count into *out (absent or 0: left). */
static void pixel_key(struct mmproj_load *l, const char *key, int64_t *out)
{
    int v = 0;
    if (mmproj_key(l, key, &v, false, INT32_MAX) == 0 && v)
        *out = v;
}

int mmproj_pixel_limits(struct mmproj_load *l, struct vision_info *in, int64_t unit, int max_units,
                        bool clip_budget)
{
    in->min_pixels = 8 * unit, in->max_pixels = 4096 * unit;
    pixel_key(l, "clip.vision.image_min_pixels", &in->min_pixels);
    pixel_key(l, "clip.vision.image_max_pixels", &in->max_pixels);
    if (l->rc || in->min_pixels > in->max_pixels || in->max_pixels < unit)
        return mmproj_fail(l, OMNI_ERR_FORMAT, "bad pixel limits", "clip.vision.image_min_pixels/max_pixels");
    if (in->max_pixels > max_units * unit)
        in->max_pixels = max_units * unit;
    if (in->min_pixels > in->max_pixels)
        in->min_pixels = in->max_pixels;
    /* Video defaults. Qwen2.5-VL, qwen-vl-utils' fetch_video: 128 to 768
     * units per frame, 128000 * 0.9 units over all frames. Qwen3-VL, the
     * video_preprocessor_config.json its checkpoints ship for
     * Qwen3VLVideoProcessor: 4 to 24576 units (4096 to 25165824 pixels at
     * patch 16) over frames x area. */
    in->video_clip_budget = clip_budget;
    in->video_min_pixels = (clip_budget ? 4 : 128) * unit;
    in->video_max_pixels = (clip_budget ? 24576 : 768) * unit;
    in->video_total_pixels = clip_budget ? 0 : 115200 * unit;
    pixel_key(l, "clip.vision.video_min_pixels", &in->video_min_pixels);
    pixel_key(l, "clip.vision.video_max_pixels", &in->video_max_pixels);
    pixel_key(l, "clip.vision.video_total_pixels", &in->video_total_pixels);
    if (l->rc || in->video_min_pixels > in->video_max_pixels || in->video_max_pixels < unit)
        return mmproj_fail(l, OMNI_ERR_FORMAT, "bad pixel limits", "clip.vision.video_min_pixels/max_pixels");
    return 0;
}
