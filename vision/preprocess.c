/* preprocess.c - image -> encoder input planes, per model family, as the
 * Hugging Face processors of the reference models compute them: CLIP
 * (resize the shortest edge to the input size with bicubic, centre crop)
 * and Idefics3 (resize the longest edge, round up to whole tiles, split into
 * tiles plus a global view, Lanczos) and Qwen2-VL (bicubic resize to
 * sides that are multiples of 28 px within a pixel budget, no crop, cut
 * into 14 px patches grouped 2x2) and Gemma 3 (bilinear resize to the
 * square input size, aspect ratio not kept, no crop; pan-and-scan is not
 * done). The processors resize with Pillow, so
 * the resampler here computes what Pillow's 8-bit resize computes:
 * separable passes (horizontal first) with filter support widened by the
 * downscale factor, weights normalised per output pixel and applied in
 * 22-bit fixed point; a size left unchanged is a plain copy. */
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "media/image.h"
#include "src/core/omni.h"
#include "vision/vision.h"

// ---- Pillow-compatible resampling ---------------------------------------------

#define PRECISION_BITS 22
/* Tiles per image at most (SmolVLM's 2048 / 512 px makes 16). */
#define VISION_MAX_TILES 256

static double filter_support(enum vision_filter f)
{
    return f == VISION_FILTER_LANCZOS ? 3.0 : f == VISION_FILTER_BICUBIC ? 2.0 : 1.0;
}

static double sinc(double x)
{
    if (x == 0.0)
        return 1.0;
    x *= M_PI;
    return sin(x) / x;
}

static double filter_eval(enum vision_filter f, double x)
{
    switch (f) {
    case VISION_FILTER_LANCZOS: return -3.0 <= x && x < 3.0 ? sinc(x) * sinc(x / 3.0) : 0.0;
    case VISION_FILTER_BICUBIC: {
        const double a = -0.5;
        x = fabs(x);
        if (x < 1.0)
            return ((a + 2.0) * x - (a + 3.0)) * x * x + 1.0;
        if (x < 2.0)
            return (((x - 5.0) * x + 8.0) * x - 4.0) * a;
        return 0.0;
    }
    default: x = fabs(x); return x < 1.0 ? 1.0 - x : 0.0;
    }
}

/* Per output pixel: first input index, count, and fixed-point weights
 * (ksize per pixel). Returns ksize, or 0 when out of memory. */
static int coeffs(int in_size, int out_size, enum vision_filter f, int **bounds, int **kk)
{
    double scale = (double)in_size / out_size, filterscale = scale < 1.0 ? 1.0 : scale;
    double support = filter_support(f) * filterscale;
    int ksize = (int)ceil(support) * 2 + 1;
    double *pre = malloc(sizeof *pre * (size_t)out_size * ksize);
    *bounds = malloc(sizeof **bounds * 2 * (size_t)out_size);
    *kk = malloc(sizeof **kk * (size_t)out_size * ksize);
    if (!pre || !*bounds || !*kk) {
        free(pre), free(*bounds), free(*kk);
        return 0;
    }
    for (int xx = 0; xx < out_size; xx++) {
        double center = (xx + 0.5) * scale, ww = 0.0, ss = 1.0 / filterscale;
        int xmin = (int)(center - support + 0.5), xmax = (int)(center + support + 0.5);
        if (xmin < 0)
            xmin = 0;
        if (xmax > in_size)
            xmax = in_size;
        xmax -= xmin;
        double *k = pre + (size_t)xx * ksize;
        for (int x = 0; x < xmax; x++)
            ww += k[x] = filter_eval(f, (x + xmin - center + 0.5) * ss);
        for (int x = 0; x < ksize; x++) {
            double w = x < xmax && ww != 0.0 ? k[x] / ww : 0.0;
            (*kk)[(size_t)xx * ksize + x] = (int)(w * (1 << PRECISION_BITS) + (w < 0 ? -0.5 : 0.5));
        }
        (*bounds)[2 * xx] = xmin, (*bounds)[2 * xx + 1] = xmax;
    }
    free(pre);
    return ksize;
}

static uint8_t clip8(int v)
{
    return v >= (1 << PRECISION_BITS << 8) ? 255 : v <= 0 ? 0 : (uint8_t)(v >> PRECISION_BITS);
}

/* One pass along x (horizontal) or y: step between taps is 3 or 3 * width. */
static int pass(const uint8_t *src, int sw, int sh, uint8_t *dst, int dw, int dh, bool horizontal,
                enum vision_filter f)
{
    int *bounds, *kk;
    int ksize = horizontal ? coeffs(sw, dw, f, &bounds, &kk) : coeffs(sh, dh, f, &bounds, &kk);
    if (!ksize)
        return -1;
    for (int y = 0; y < dh; y++)
        for (int x = 0; x < dw; x++) {
            int o = horizontal ? x : y, xmin = bounds[2 * o], n = bounds[2 * o + 1];
            const int *k = kk + (size_t)o * ksize;
            const uint8_t *s = horizontal ? src + ((size_t)y * sw + xmin) * 3
                                          : src + ((size_t)xmin * sw + x) * 3;
            size_t step = horizontal ? 3 : (size_t)sw * 3;
            for (int c = 0; c < 3; c++) {
                int acc = 1 << (PRECISION_BITS - 1);
                for (int i = 0; i < n; i++)
                    acc += s[i * step + c] * k[i];
                dst[((size_t)y * dw + x) * 3 + c] = clip8(acc);
            }
        }
    free(bounds), free(kk);
    return 0;
}

void vision_resample(const uint8_t *src, int sw, int sh, uint8_t *dst, int dw, int dh,
                     enum vision_filter filter)
{
    if (sw == dw && sh == dh) {
        memcpy(dst, src, (size_t)sw * sh * 3);
        return;
    }
    if (sh == dh) {
        pass(src, sw, sh, dst, dw, dh, true, filter);
        return;
    }
    if (sw == dw) {
        pass(src, sw, sh, dst, dw, dh, false, filter);
        return;
    }
    uint8_t *tmp = malloc((size_t)dw * sh * 3);
    if (!tmp || pass(src, sw, sh, tmp, dw, sh, true, filter) < 0 ||
        pass(tmp, dw, sh, dst, dw, dh, false, filter) < 0)
        memset(dst, 0, (size_t)dw * dh * 3);
    free(tmp);
}

// ---- per-family preprocessing -----------------------------------------------

static int resized(const struct media_image *in, int w, int h, enum vision_filter f,
                   struct media_image *out, char *err, size_t errlen)
{
    int rc = media_image_alloc(out, w, h, err, errlen);
    if (rc == OMNI_OK)
        vision_resample(in->rgb, in->width, in->height, out->rgb, w, h, f);
    return rc;
}

/* The S x S window at (x0, y0) of img, rescaled to [0, 1] and normalised. */
static void to_plane(const struct vision_info *in, const struct media_image *img, int x0, int y0,
                     float *plane)
{
    const int S = in->image_size;
    for (int c = 0; c < 3; c++)
        for (int y = 0; y < S; y++)
            for (int x = 0; x < S; x++) {
                float v = (float)(img->rgb[((size_t)(y0 + y) * img->width + x0 + x) * 3 + c] *
                                  (1.0 / 255.0));
                plane[((size_t)c * S + y) * S + x] = (v - in->image_mean[c]) / in->image_std[c];
            }
}

/* Python's int(a / b) of the reference size arithmetic. */
static int trunc_div(double a, double b) { return (int)(a / b); }

/* Idefics3's sizes for a w x h image: resized to nw x nh (longest edge ->
 * L, even other side, capped at 4096), then to tw x th, whole S x S tiles
 * (one S x S view without tiles). Depends on the size alone, so the prompt
 * length of an image is known from its header (vision_image_tokens). */
static int idefics3_grid(const struct vision_info *in, int w, int h, bool tiles, int *pnw,
                         int *pnh, int *ptw, int *pth, char *err, size_t errlen)
{
    const int S = in->image_size;
    const int L = in->longest_edge;
    double aspect = (double)w / h;
    int nw, nh;
    if (w >= h) {
        nw = L, nh = trunc_div(nw, aspect);
        nh += nh % 2;
    } else {
        nh = L, nw = (int)(nh * aspect);
        nw += nw % 2;
    }
    nw = nw < 1 ? 1 : nw, nh = nh < 1 ? 1 : nh;
    aspect = (double)nw / nh;
    if (nw >= nh && nw > 4096)
        nw = 4096, nh = trunc_div(nw, aspect);
    else if (nh > nw && nh > 4096)
        nh = 4096, nw = (int)(nh * aspect);
    nw = nw < 1 ? 1 : nw, nh = nh < 1 ? 1 : nh;
    // round up to whole S x S tiles (one S x S view without tiles)
    aspect = (double)nw / nh;
    int tw = S, th = S;
    if (tiles && nw >= nh) {
        tw = (nw + S - 1) / S * S;
        th = trunc_div(tw, aspect);
        th = (th + S - 1) / S * S;
    } else if (tiles) {
        th = (nh + S - 1) / S * S;
        tw = (int)(th * aspect);
        tw = (tw + S - 1) / S * S;
    }
    th = th < S ? S : th, tw = tw < S ? S : tw;
    if ((int64_t)(th / S) * (tw / S) > VISION_MAX_TILES)
        return omni_fail(err, errlen, OMNI_ERR_LIMIT, "vision: %dx%d tiles exceed the limit of %d",
                         tw / S, th / S, VISION_MAX_TILES);
    int rc = media_image_check_size(tw, th, NULL, err, errlen);
    if (rc < 0)
        return rc;
    *pnw = nw, *pnh = nh, *ptw = tw, *pth = th;
    return OMNI_OK;
}

/* Qwen2VLImageProcessor's smart_resize: each side rounded (half to even,
 * as Python's round) to a multiple of f = patch * merge; an area over
 * max_pixels scales both sides down by sqrt(area / max) and floors, one
 * under min_pixels scales up and ceils. Aspect ratios over 200 fail.
 * Videos: t_cmp frames weigh the rounded area against the bounds and
 * t_beta frames the scale (Qwen3VLVideoProcessor: the frames rounded to
 * the temporal patch, then as sampled); at_least_f keeps rounded sides
 * of at least f (qwen-vl-utils). */
static int smart_resize_t(int w, int h, int f, double t_cmp, double t_beta, bool at_least_f,
                          double min_pixels, double max_pixels, int *rw, int *rh, char *err,
                          size_t errlen)
{
    if (w <= 0 || h <= 0 || f <= 0 || min_pixels < 0 || max_pixels < (double)f * f)
        return omni_fail(err, errlen, OMNI_ERR_ARG, "vision: bad resize arguments (%dx%d, factor %d)", w, h, f);
    if ((w > h ? (double)w / h : (double)h / w) > 200)
        return omni_fail(err, errlen, OMNI_ERR_ARG,
                         "vision: image %dx%d: aspect ratio over 200 (the model's processor refuses it)", w, h);
    double hb = rint((double)h / f) * f, wb = rint((double)w / f) * f; /* rint: half to even */
    if (at_least_f)
        hb = hb < f ? f : hb, wb = wb < f ? f : wb;
    if (t_cmp * hb * wb > max_pixels) {
        double beta = sqrt(t_beta * h * w / max_pixels);
        hb = floor(h / beta / f) * f, wb = floor(w / beta / f) * f;
        hb = hb < f ? f : hb, wb = wb < f ? f : wb;
    } else if (t_cmp * hb * wb < min_pixels) {
        double beta = sqrt(min_pixels / (t_beta * h * w));
        hb = ceil(h * beta / f) * f, wb = ceil(w * beta / f) * f;
    }
    if (hb < f || wb < f || hb > 65536 || wb > 65536)
        return omni_fail(err, errlen, OMNI_ERR_LIMIT, "vision: image %dx%d: no valid size", w, h);
    *rw = (int)wb, *rh = (int)hb;
    return OMNI_OK;
}

int vision_smart_resize(int w, int h, int factor, int64_t min_pixels, int64_t max_pixels, int *rw,
                        int *rh, char *err, size_t errlen)
{
    return smart_resize_t(w, h, factor, 1, 1, false, (double)min_pixels, (double)max_pixels, rw, rh,
                          err, errlen);
}

static int qwen_size(const struct vision_info *in, int w, int h, int *rw, int *rh, char *err,
                     size_t errlen)
{
    return vision_smart_resize(w, h, in->patch_size * in->merge_size, in->min_pixels, in->max_pixels,
                               rw, rh, err, errlen);
}

enum { VIDEO_MAX_ROWS = 4096 }; /* merged rows of one frame at most (qwen2vl.c's QWEN2VL_MAX_ROWS) */

int vision_video_frame_size(const struct vision_info *in, int w, int h, int n_frames, int *rw,
                            int *rh, char *err, size_t errlen)
{
    const int f = in->patch_size * in->merge_size;
    if (n_frames < 1 || f <= 0 || in->video_min_pixels < 0 || in->video_max_pixels < (int64_t)f * f)
        return omni_fail(err, errlen, OMNI_ERR_ARG, "vision: bad video sizing (%d frames, factor %d, "
                         "video pixels %lld..%lld)", n_frames, f, (long long)in->video_min_pixels,
                         (long long)in->video_max_pixels);
    const double vmin = (double)in->video_min_pixels, vmax = (double)in->video_max_pixels;
    int rc;
    if (in->video_clip_budget) {
        /* Qwen3VLVideoProcessor: one frame is sized as the pair its
         * patchify pads it to (its smart_resize refuses fewer than 2);
         * sides under f first scaled up to f, truncating */
        const int t = n_frames < 2 ? 2 : n_frames;
        if (h < f || w < f) {
            const double s = fmax((double)f / h, (double)f / w);
            h = (int)(h * s), w = (int)(w * s);
        }
        rc = smart_resize_t(w, h, f, rint(t / 2.0) * 2, t, false, vmin, vmax, rw, rh, err, errlen);
    } else {
        /* qwen-vl-utils fetch_video: frames padded to an even count, each
         * frame at most its share of the total budget (two frames per
         * temporal patch), never under 1.05 x the minimum */
        const int t = n_frames + n_frames % 2;
        double max_px = in->video_total_pixels > 0 ? fmin(vmax, (double)in->video_total_pixels / t * 2) : vmax;
        max_px = fmax(max_px, floor(vmin * 1.05));
        rc = smart_resize_t(w, h, f, 1, 1, true, vmin, max_px, rw, rh, err, errlen);
    }
    /* a frame is encoded as an image: at most the images' bound of rows
     * (Qwen3-VL's clip budget allows a few frames far more) */
    const double cap = (double)VIDEO_MAX_ROWS * f * f;
    if (rc == OMNI_OK && (double)*rw * *rh > cap)
        rc = smart_resize_t(w, h, f, 1, 1, false, 0, cap, rw, rh, err, errlen);
    return rc;
}

/* The resized image as patch rows in the reference's order: 2x2 groups in
 * raster order, the group's patches row by row, each [3][P][P] normalised
 * (one frame: the reference's second temporal frame repeats it). */
static void qwen_patches(const struct vision_info *in, const struct media_image *img, float *out)
{
    const int P = in->patch_size, m = in->merge_size, gw = img->width / P, gh = img->height / P;
    float *row = out;
    for (int by = 0; by < gh / m; by++)
        for (int bx = 0; bx < gw / m; bx++)
            for (int my = 0; my < m; my++)
                for (int mx = 0; mx < m; mx++, row += 3 * P * P) {
                    const int y0 = (by * m + my) * P, x0 = (bx * m + mx) * P;
                    for (int c = 0; c < 3; c++)
                        for (int y = 0; y < P; y++)
                            for (int x = 0; x < P; x++) {
                                float v = (float)(img->rgb[((size_t)(y0 + y) * img->width + x0 + x) * 3 + c] *
                                                  (1.0 / 255.0));
                                row[(c * P + y) * P + x] = (v - in->image_mean[c]) / in->image_std[c];
                            }
                }
}

int vision_image_tokens(const struct vision_model *m, int64_t width, int64_t height, bool tiles,
                        char *err, size_t errlen)
{
    const struct vision_info *in = vision_model_info(m);
    if (width <= 0 || height <= 0 || width > INT_MAX || height > INT_MAX)
        return omni_fail(err, errlen, OMNI_ERR_ARG, "vision: invalid image size %lldx%lld",
                         (long long)width, (long long)height);
    if (in->family == VISION_LLAVA || in->family == VISION_GEMMA3)
        return in->tokens_per_image; /* any size becomes one S x S view */
    if (in->family == VISION_QWEN2VL) {
        int rw, rh, rc = qwen_size(in, (int)width, (int)height, &rw, &rh, err, errlen);
        const int f = in->patch_size * in->merge_size;
        return rc < 0 ? rc : (rw / f) * (rh / f);
    }
    int nw, nh, tw, th;
    int rc = idefics3_grid(in, (int)width, (int)height, tiles, &nw, &nh, &tw, &th, err, errlen);
    if (rc < 0)
        return rc;
    int tiles_n = (tw / in->image_size) * (th / in->image_size);
    return (tiles_n > 1 ? tiles_n + 1 : 1) * in->tokens_per_image;
}

/* img resized to rw x rh (bicubic) as qwen2vl patch rows. */
static int qwen_preprocess(const struct vision_info *in, const struct media_image *img, int rw,
                           int rh, float **pixels, int *tile_rows, int *tile_cols, char *err,
                           size_t errlen)
{
    struct media_image a = { 0 };
    int rc;
    if ((rc = media_image_check_size(rw, rh, NULL, err, errlen)) < 0 ||
        (rc = resized(img, rw, rh, VISION_FILTER_BICUBIC, &a, err, errlen)) < 0)
        return rc;
    if (!(*pixels = malloc(sizeof(float) * 3 * (size_t)rw * rh))) {
        media_image_release(&a);
        return omni_fail(err, errlen, OMNI_ERR_NOMEM, "vision: out of memory");
    }
    qwen_patches(in, &a, *pixels);
    media_image_release(&a);
    *tile_rows = rh / in->patch_size, *tile_cols = rw / in->patch_size;
    return OMNI_OK;
}

int vision_frame_tokens(const struct vision_model *m, int64_t width, int64_t height, int n_frames,
                        char *err, size_t errlen)
{
    const struct vision_info *in = vision_model_info(m);
    if (in->family != VISION_QWEN2VL)
        return vision_image_tokens(m, width, height, false, err, errlen);
    if (width <= 0 || height <= 0 || width > INT_MAX || height > INT_MAX)
        return omni_fail(err, errlen, OMNI_ERR_ARG, "vision: invalid frame size %lldx%lld",
                         (long long)width, (long long)height);
    int rw, rh, rc = vision_video_frame_size(in, (int)width, (int)height, n_frames, &rw, &rh, err, errlen);
    const int f = in->patch_size * in->merge_size;
    return rc < 0 ? rc : (rw / f) * (rh / f);
}

int vision_preprocess_frame(const struct vision_model *m, const struct media_image *img,
                            int n_frames, float **pixels, int *n_images, int *tile_rows,
                            int *tile_cols, char *err, size_t errlen)
{
    const struct vision_info *in = vision_model_info(m);
    if (in->family != VISION_QWEN2VL)
        return vision_preprocess(m, img, false, pixels, n_images, tile_rows, tile_cols, err, errlen);
    *pixels = NULL;
    *n_images = 1, *tile_rows = *tile_cols = 0;
    if (img->width <= 0 || img->height <= 0 || !img->rgb)
        return omni_fail(err, errlen, OMNI_ERR_ARG, "vision: empty image");
    int rw, rh, rc = vision_video_frame_size(in, img->width, img->height, n_frames, &rw, &rh, err, errlen);
    return rc < 0 ? rc : qwen_preprocess(in, img, rw, rh, pixels, tile_rows, tile_cols, err, errlen);
}

int vision_preprocess(const struct vision_model *m, const struct media_image *img, bool tiles,
                      float **pixels, int *n_images, int *tile_rows, int *tile_cols, char *err,
                      size_t errlen)
{
    const struct vision_info *in = vision_model_info(m);
    const int S = in->image_size;
    const size_t plane = (size_t)3 * S * S;
    struct media_image a = { 0 }, b = { 0 };
    int rc, w = img->width, h = img->height;
    *pixels = NULL;
    *n_images = 1, *tile_rows = *tile_cols = 0;
    if (w <= 0 || h <= 0 || !img->rgb)
        return omni_fail(err, errlen, OMNI_ERR_ARG, "vision: empty image");
    if (in->family == VISION_LLAVA) {
        // shortest edge -> S (bicubic), centre crop S x S
        int nw = w <= h ? S : trunc_div((double)S * w, h);
        int nh = w <= h ? trunc_div((double)S * h, w) : S;
        if (nw < S || nh < S)
            nw = nh = S; /* extreme aspect ratios: truncation undershoots */
        if ((rc = resized(img, nw, nh, VISION_FILTER_BICUBIC, &a, err, errlen)) < 0)
            return rc;
        if (!(*pixels = malloc(sizeof(float) * plane))) {
            media_image_release(&a);
            return omni_fail(err, errlen, OMNI_ERR_NOMEM, "vision: out of memory");
        }
        to_plane(in, &a, (nw - S) / 2, (nh - S) / 2, *pixels);
        media_image_release(&a);
        return OMNI_OK;
    }
    if (in->family == VISION_GEMMA3) {
        // Gemma3ImageProcessor: resize to S x S (bilinear), rescale, normalize
        if ((rc = resized(img, S, S, VISION_FILTER_BILINEAR, &a, err, errlen)) < 0)
            return rc;
        if (!(*pixels = malloc(sizeof(float) * plane))) {
            media_image_release(&a);
            return omni_fail(err, errlen, OMNI_ERR_NOMEM, "vision: out of memory");
        }
        to_plane(in, &a, 0, 0, *pixels);
        media_image_release(&a);
        return OMNI_OK;
    }
    if (in->family == VISION_QWEN2VL) {
        int rw, rh;
        if ((rc = qwen_size(in, w, h, &rw, &rh, err, errlen)) < 0)
            return rc;
        return qwen_preprocess(in, img, rw, rh, pixels, tile_rows, tile_cols, err, errlen);
    }
    int nw, nh, tw, th;
    if ((rc = idefics3_grid(in, w, h, tiles, &nw, &nh, &tw, &th, err, errlen)) < 0)
        return rc;
    if ((rc = resized(img, nw, nh, VISION_FILTER_LANCZOS, &a, err, errlen)) < 0 ||
        (rc = resized(&a, tw, th, VISION_FILTER_LANCZOS, &b, err, errlen)) < 0)
        goto done;
    int R = th / S, C = tw / S;
    *n_images = R * C > 1 ? R * C + 1 : 1;
    if (!(*pixels = malloc(sizeof(float) * plane * *n_images))) {
        rc = omni_fail(err, errlen, OMNI_ERR_NOMEM, "vision: out of memory");
        goto done;
    }
    if (*n_images == 1) {
        to_plane(in, &b, 0, 0, *pixels);
        goto done;
    }
    *tile_rows = R, *tile_cols = C;
    for (int r = 0; r < R; r++)
        for (int c = 0; c < C; c++)
            to_plane(in, &b, c * S, r * S, *pixels + plane * (r * C + c));
    // the global view: the whole (tiled) image resized to S x S
    media_image_release(&a);
    if ((rc = resized(&b, S, S, VISION_FILTER_LANCZOS, &a, err, errlen)) < 0)
        goto done;
    to_plane(in, &a, 0, 0, *pixels + plane * R * C);
done:
    media_image_release(&a);
    media_image_release(&b);
    if (rc < 0) {
        free(*pixels);
        *pixels = NULL;
    }
    return rc;
}
