/* image.h - still images in: PNG (libpng), JPEG (libjpeg-turbo, EXIF
 * orientation applied), WebP / GIF (first frame) / BMP / TIFF through ffmpeg;
 * out comes 8-bit RGB, plus a libswscale resize for callers that need one.
 *
 *   struct media_image_params p = media_image_default_params();
 *   struct media_image img;
 *   if (media_image_decode(bytes, len, &p, &img, err, sizeof err) < 0) ...
 *   ...                                 // img.rgb[(y * img.width + x) * 3 + c]
 *   media_image_release(&img);
 *
 * Dimensions are read from the file header and checked against
 * p->max_pixels before any pixel buffer is allocated (decompression bombs
 * fail with OMNI_ERR_LIMIT). Transparent pixels are composited onto white.
 * Thread safety: every function is reentrant. Errors: negative enum
 * omni_err plus one line in err, e.g. "image: 30000x30000 pixels exceeds
 * the limit of 50000000". */
#ifndef MEDIA_IMAGE_H
#define MEDIA_IMAGE_H

#include <stddef.h>
#include <stdint.h>

struct media_image {
    int width, height;
    uint8_t *rgb; /* [height][width][3], malloc'ed; owned by the image */
};

struct media_image_params {
    int64_t max_pixels;      /* width * height limit (default 50 000 000: --max-image-pixels) */
    int max_side;            /* either side longer fails (default 32768) */
    size_t max_input_bytes;  /* larger encoded inputs fail (default 64 MiB) */
};

struct media_image_params media_image_default_params(void);

enum media_image_format {
    MEDIA_IMAGE_UNKNOWN,
    MEDIA_IMAGE_PNG,
    MEDIA_IMAGE_JPEG,
    MEDIA_IMAGE_WEBP,
    MEDIA_IMAGE_GIF,
    MEDIA_IMAGE_BMP,
    MEDIA_IMAGE_TIFF,
};

/* The format from the first bytes (magic numbers), MEDIA_IMAGE_UNKNOWN if none. */
enum media_image_format media_image_sniff(const void *data, size_t len);
const char *media_image_format_name(enum media_image_format f); /* "png", ... */

/* What the header says, before any pixel is decoded. */
struct media_image_info {
    enum media_image_format format;
    int64_t width, height; /* as displayed: a JPEG's EXIF rotation is applied */
};

/* Read the size from the header only: libpng / libjpeg-turbo for PNG and
 * JPEG, the fixed header fields for GIF, BMP, WebP and TIFF (ffmpeg, which
 * decodes those, learns their size only by decoding the first picture).
 * Nothing is checked against limits (see media_image_check_size); cheap
 * enough to run on every image of a request before decoding any. */
int media_image_probe(const void *data, size_t len, struct media_image_info *info, char *err,
                      size_t errlen);

/* Decode an encoded image held in memory. On success *out owns a new RGB
 * buffer (release it with media_image_release). p NULL = defaults. */
int media_image_decode(const void *data, size_t len, const struct media_image_params *p,
                       struct media_image *out, char *err, size_t errlen);
/* The same for a file (size checked before reading). */
int media_image_decode_file(const char *path, const struct media_image_params *p,
                            struct media_image *out, char *err, size_t errlen);

/* Scale to width x height with libswscale (bicubic). *out is new. */
int media_image_resize(const struct media_image *in, int width, int height,
                       struct media_image *out, char *err, size_t errlen);

/* Composite [width][height][4] RGBA pixels onto white into out's RGB (sized
 * already), in 8-bit sRGB values like PIL's alpha_composite. */
void media_image_composite_white(const uint8_t *rgba, struct media_image *out);

/* A new black width x height image (checked against nothing: callers size it). */
int media_image_alloc(struct media_image *img, int width, int height, char *err, size_t errlen);

/* Free the pixels and zero the struct; NULL or an empty image is a no-op. */
void media_image_release(struct media_image *img);

/* Check width x height against p (p NULL = defaults): OMNI_OK or OMNI_ERR_LIMIT
 * / OMNI_ERR_FORMAT (zero or negative size) with a message naming what. */
int media_image_check_size(int64_t width, int64_t height, const struct media_image_params *p,
                           char *err, size_t errlen);

#endif
