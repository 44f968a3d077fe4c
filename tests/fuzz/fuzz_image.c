/* fuzz_image.c - still-image decoding of media/image.c (PNG through libpng,
 * JPEG through libjpeg-turbo with EXIF orientation, WebP / GIF / BMP / TIFF
 * through ffmpeg), with limits small enough to keep each run fast.
 *
 * Input: byte 0 picks limits (bit 0: a 64-pixel side limit), then the
 * encoded image. */
#include "tests/fuzz/fz_util.h"

#include "media/image.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    struct media_image_params p = media_image_default_params();
    p.max_pixels = 1 << 20;
    p.max_side = data[0] & 1 ? 64 : 4096;
    char err[256];
    struct media_image img = { 0 };
    (void)media_image_format_name(media_image_sniff(data + 1, size - 1));
    if (media_image_decode(data + 1, size - 1, &p, &img, err, sizeof err) == 0) {
        volatile uint8_t last = img.rgb[(size_t)img.width * img.height * 3 - 1];
        (void)last;
        struct media_image small = { 0 };
        if (media_image_resize(&img, 3, 2, &small, err, sizeof err) == 0)
            media_image_release(&small);
    }
    media_image_release(&img);
    return 0;
}
