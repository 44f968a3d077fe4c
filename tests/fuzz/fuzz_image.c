/* fuzz_image.c - still-image decoding of media/image.c (PNG through libpng,
 * JPEG through libjpeg-turbo with EXIF orientation, WebP / GIF / BMP / TIFF
 * through ffmpeg), with limits small enough to keep each run fast.
 *
 * Input: byte 0 picks limits (bit 0: a 64-pixel side limit) and whether a
 * decoded image is then resized (bit 1: media_image_resize through
 * libswscale), then the encoded image. */
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
    /* the decoders (libpng, libjpeg, ffmpeg) are not instrumented either */
    uint8_t *in = fz_guarded_copy(data + 1, size - 1);
    (void)media_image_format_name(media_image_sniff(in, size - 1));
    if (media_image_decode(in, size - 1, &p, &img, err, sizeof err) == 0) {
        volatile uint8_t last = img.rgb[(size_t)img.width * img.height * 3 - 1];
        (void)last;
    }
    if (img.rgb && data[0] & 2) {
        /* libswscale is not instrumented: its source buffer ends at an
         * unreadable page, so that an over-read faults every time */
        const size_t n = (size_t)img.width * img.height * 3;
        struct media_image guarded = { img.width, img.height, fz_guarded_copy(img.rgb, n) };
        struct media_image small = { 0 };
        if (media_image_resize(&guarded, 3, 2, &small, err, sizeof err) == 0)
            media_image_release(&small);
        fz_guarded_free(guarded.rgb, n);
    }
    media_image_release(&img);
    fz_guarded_free(in, size - 1);
    return 0;
}
