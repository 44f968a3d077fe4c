/* image.c - still-image decoding to RGB8: libpng's simplified API for PNG,
 * libjpeg-turbo for JPEG (with the EXIF Orientation tag applied, as
 * browsers and PIL's exif_transpose do), ffmpeg (media/video.c) for the
 * rest; libswscale for resizing. Sizes come from the header and are checked
 * before the pixel buffer exists (for the ffmpeg formats before ffmpeg
 * opens the file); media_image_probe reads only them. */
#include "media/image.h"

#include <png.h>
#include <setjmp.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <jpeglib.h>
#include <libswscale/swscale.h>

#include "media/video.h"
#include "src/core/omni.h"

struct media_image_params media_image_default_params(void)
{
    return (struct media_image_params){
        .max_pixels = 50000000,
        .max_side = 32768,
        .max_input_bytes = (size_t)64 << 20,
    };
}

int media_image_check_size(int64_t width, int64_t height, const struct media_image_params *p,
                           char *err, size_t errlen)
{
    struct media_image_params def = media_image_default_params();
    if (!p)
        p = &def;
    if (width <= 0 || height <= 0)
        return omni_fail(err, errlen, OMNI_ERR_FORMAT, "image: invalid size %lldx%lld",
                         (long long)width, (long long)height);
    if (width > p->max_side || height > p->max_side || width * height > p->max_pixels)
        return omni_fail(err, errlen, OMNI_ERR_LIMIT,
                         "image: %lldx%lld pixels exceeds the limit of %lld pixels (%d per side)",
                         (long long)width, (long long)height, (long long)p->max_pixels,
                         p->max_side);
    return OMNI_OK;
}

int media_image_alloc(struct media_image *img, int width, int height, char *err, size_t errlen)
{
    size_t n;
    memset(img, 0, sizeof *img);
    if (width <= 0 || height <= 0 || omni_mul_size((size_t)width, (size_t)height, &n) ||
        omni_mul_size(n, 3, &n))
        return omni_fail(err, errlen, OMNI_ERR_ARG, "image: invalid size %dx%d", width, height);
    img->rgb = calloc(n, 1);
    if (!img->rgb)
        return omni_fail(err, errlen, OMNI_ERR_NOMEM, "image: out of memory for %dx%d", width,
                         height);
    img->width = width;
    img->height = height;
    return OMNI_OK;
}

void media_image_release(struct media_image *img)
{
    if (!img)
        return;
    free(img->rgb);
    memset(img, 0, sizeof *img);
}

enum media_image_format media_image_sniff(const void *data, size_t len)
{
    const uint8_t *b = data;
    if (len >= 8 && !memcmp(b, "\x89PNG\r\n\x1a\n", 8))
        return MEDIA_IMAGE_PNG;
    if (len >= 3 && b[0] == 0xFF && b[1] == 0xD8 && b[2] == 0xFF)
        return MEDIA_IMAGE_JPEG;
    if (len >= 12 && !memcmp(b, "RIFF", 4) && !memcmp(b + 8, "WEBP", 4))
        return MEDIA_IMAGE_WEBP;
    if (len >= 6 && (!memcmp(b, "GIF87a", 6) || !memcmp(b, "GIF89a", 6)))
        return MEDIA_IMAGE_GIF;
    if (len >= 2 && b[0] == 'B' && b[1] == 'M')
        return MEDIA_IMAGE_BMP;
    if (len >= 4 && (!memcmp(b, "II*\0", 4) || !memcmp(b, "MM\0*", 4)))
        return MEDIA_IMAGE_TIFF;
    return MEDIA_IMAGE_UNKNOWN;
}

const char *media_image_format_name(enum media_image_format f)
{
    static const char *names[] = { "unknown", "png", "jpeg", "webp", "gif", "bmp", "tiff" };
    return (unsigned)f < sizeof names / sizeof *names ? names[f] : "unknown";
}

void media_image_composite_white(const uint8_t *rgba, struct media_image *out)
{
    for (size_t i = 0, n = (size_t)out->width * out->height; i < n; i++) {
        unsigned a = rgba[i * 4 + 3];
        for (int c = 0; c < 3; c++)
            out->rgb[i * 3 + c] = (uint8_t)((rgba[i * 4 + c] * a + 255 * (255 - a) + 127) / 255);
    }
}

// ---- PNG ---------------------------------------------------------------------

static int decode_png(const void *data, size_t len, const struct media_image_params *p,
                      struct media_image *out, char *err, size_t errlen)
{
    png_image png;
    memset(&png, 0, sizeof png);
    png.version = PNG_IMAGE_VERSION;
    if (!png_image_begin_read_from_memory(&png, data, len))
        return omni_fail(err, errlen, OMNI_ERR_FORMAT, "image: bad PNG: %s", png.message);
    int rc = media_image_check_size(png.width, png.height, p, err, errlen);
    if (rc < 0) {
        png_image_free(&png);
        return rc;
    }
    /* Alpha is composited onto white here, in 8-bit sRGB values as PIL's
     * alpha_composite does (libpng would blend in linear light). */
    const bool alpha = png.format & PNG_FORMAT_FLAG_ALPHA;
    png.format = alpha ? PNG_FORMAT_RGBA : PNG_FORMAT_RGB;
    if ((rc = media_image_alloc(out, (int)png.width, (int)png.height, err, errlen)) < 0) {
        png_image_free(&png);
        return rc;
    }
    uint8_t *rgba = alpha ? malloc((size_t)png.width * png.height * 4) : NULL;
    if (alpha && !rgba) {
        png_image_free(&png);
        media_image_release(out);
        return omni_fail(err, errlen, OMNI_ERR_NOMEM, "image: out of memory");
    }
    if (!png_image_finish_read(&png, NULL, alpha ? rgba : out->rgb, 0, NULL)) {
        free(rgba);
        media_image_release(out);
        return omni_fail(err, errlen, OMNI_ERR_FORMAT, "image: bad PNG: %s", png.message);
    }
    if (alpha)
        media_image_composite_white(rgba, out);
    free(rgba);
    return OMNI_OK;
}

// ---- JPEG --------------------------------------------------------------------

struct jpeg_fail {
    struct jpeg_error_mgr mgr;
    jmp_buf jmp;
    char msg[JMSG_LENGTH_MAX];
};

static void jpeg_fail_exit(j_common_ptr cinfo)
{
    struct jpeg_fail *f = (struct jpeg_fail *)cinfo->err;
    cinfo->err->format_message(cinfo, f->msg);
    longjmp(f->jmp, 1);
}

static void jpeg_quiet(j_common_ptr cinfo, int level)
{
    (void)cinfo, (void)level; /* corrupt-data warnings: decode what is there */
}

/* Tag `tag` of the first IFD of a TIFF structure (b starts at its "II*\0"
 * or "MM\0*" header), when it is a single SHORT or LONG: TIFF files and the
 * EXIF payload of JPEG APP1 segments share this layout. */
static bool tiff_tag(const uint8_t *b, size_t n, uint16_t tag, uint32_t *val)
{
    if (n < 8)
        return false;
    int le = b[0] == 'I' && b[1] == 'I';
    if (!le && !(b[0] == 'M' && b[1] == 'M'))
        return false;
#define U16(o) (le ? (uint32_t)b[o] | (uint32_t)b[(o) + 1] << 8 : (uint32_t)b[o] << 8 | b[(o) + 1])
#define U32(o) (le ? U16(o) | U16((o) + 2) << 16 : U16(o) << 16 | U16((o) + 2))
    uint32_t ifd = U32(4);
    if (ifd > n - 2 || ifd < 8)
        return false;
    uint32_t count = U16(ifd);
    for (uint32_t i = 0; i < count; i++) {
        size_t e = ifd + 2 + (size_t)i * 12;
        if (e + 12 > n)
            break;
        uint32_t type = U16(e + 2);
        if (U16(e) != tag || U32(e + 4) != 1 || (type != 3 && type != 4))
            continue;
        *val = type == 3 ? U16(e + 8) : U32(e + 8); /* SHORT / LONG, held in the entry */
        return true;
    }
#undef U16
#undef U32
    return false;
}

/* The EXIF Orientation (1..8) from an APP1 "Exif\0\0" + TIFF payload; 1 if absent. */
static int exif_orientation(const uint8_t *b, size_t n)
{
    uint32_t v;
    if (n < 14 || memcmp(b, "Exif\0\0", 6) || !tiff_tag(b + 6, n - 6, 0x0112, &v))
        return 1;
    return v >= 1 && v <= 8 ? (int)v : 1;
}

/* Apply EXIF orientation o: 2 mirror, 3 rotate 180, 4 flip, 5 transpose,
 * 6 rotate 90 clockwise, 7 transverse, 8 rotate 90 counter-clockwise. */
static int orient(struct media_image *img, int o, char *err, size_t errlen)
{
    if (o <= 1)
        return OMNI_OK;
    int w = img->width, h = img->height, swap = o >= 5;
    struct media_image t;
    int rc = media_image_alloc(&t, swap ? h : w, swap ? w : h, err, errlen);
    if (rc < 0)
        return rc;
    for (int y = 0; y < t.height; y++)
        for (int x = 0; x < t.width; x++) {
            int sx, sy; /* source pixel of output (x, y) */
            switch (o) {
            case 2: sx = w - 1 - x, sy = y; break;
            case 3: sx = w - 1 - x, sy = h - 1 - y; break;
            case 4: sx = x, sy = h - 1 - y; break;
            case 5: sx = y, sy = x; break;
            case 6: sx = y, sy = h - 1 - x; break;
            case 7: sx = w - 1 - y, sy = h - 1 - x; break;
            default: sx = w - 1 - y, sy = x; break; /* 8 */
            }
            memcpy(t.rgb + ((size_t)y * t.width + x) * 3, img->rgb + ((size_t)sy * w + sx) * 3, 3);
        }
    media_image_release(img);
    *img = t;
    return OMNI_OK;
}

static int decode_jpeg(const void *data, size_t len, const struct media_image_params *p,
                       struct media_image *out, char *err, size_t errlen)
{
    struct jpeg_decompress_struct cinfo;
    struct jpeg_fail fail;
    /* volatile: assigned between setjmp and a possible longjmp */
    volatile int rc = OMNI_OK;
    memset(out, 0, sizeof *out);
    cinfo.err = jpeg_std_error(&fail.mgr);
    fail.mgr.error_exit = jpeg_fail_exit;
    fail.mgr.emit_message = jpeg_quiet;
    if (setjmp(fail.jmp)) {
        jpeg_destroy_decompress(&cinfo);
        media_image_release(out);
        return rc < 0 ? rc : omni_fail(err, errlen, OMNI_ERR_FORMAT, "image: bad JPEG: %s", fail.msg);
    }
    jpeg_create_decompress(&cinfo);
    jpeg_mem_src(&cinfo, data, (unsigned long)len);
    jpeg_save_markers(&cinfo, JPEG_APP0 + 1, 0xFFFF);
    jpeg_read_header(&cinfo, TRUE);
    if ((rc = media_image_check_size(cinfo.image_width, cinfo.image_height, p, err, errlen)) < 0)
        goto done;
    if (cinfo.jpeg_color_space == JCS_CMYK || cinfo.jpeg_color_space == JCS_YCCK) {
        rc = omni_fail(err, errlen, OMNI_ERR_UNSUPPORTED, "image: CMYK JPEG is not supported");
        goto done;
    }
    int o = 1;
    for (jpeg_saved_marker_ptr m = cinfo.marker_list; m; m = m->next)
        if (m->marker == JPEG_APP0 + 1 && (o = exif_orientation(m->data, m->data_length)) != 1)
            break;
    cinfo.out_color_space = JCS_RGB;
    jpeg_start_decompress(&cinfo);
    if ((rc = media_image_alloc(out, (int)cinfo.output_width, (int)cinfo.output_height, err,
                                errlen)) < 0)
        goto done;
    while (cinfo.output_scanline < cinfo.output_height) {
        JSAMPROW row = out->rgb + (size_t)cinfo.output_scanline * out->width * 3;
        jpeg_read_scanlines(&cinfo, &row, 1);
    }
    jpeg_finish_decompress(&cinfo);
    rc = orient(out, o, err, errlen);
done:
    jpeg_destroy_decompress(&cinfo);
    if (rc < 0)
        media_image_release(out);
    return rc;
}

/* Header only: SOF size and the EXIF orientation, no scan is decoded. */
static int probe_jpeg(const void *data, size_t len, struct media_image_info *info, char *err,
                      size_t errlen)
{
    struct jpeg_decompress_struct cinfo;
    struct jpeg_fail fail;
    cinfo.err = jpeg_std_error(&fail.mgr);
    fail.mgr.error_exit = jpeg_fail_exit;
    fail.mgr.emit_message = jpeg_quiet;
    if (setjmp(fail.jmp)) {
        jpeg_destroy_decompress(&cinfo);
        return omni_fail(err, errlen, OMNI_ERR_FORMAT, "image: bad JPEG: %s", fail.msg);
    }
    jpeg_create_decompress(&cinfo);
    jpeg_mem_src(&cinfo, data, (unsigned long)len);
    jpeg_save_markers(&cinfo, JPEG_APP0 + 1, 0xFFFF);
    jpeg_read_header(&cinfo, TRUE);
    int o = 1;
    for (jpeg_saved_marker_ptr m = cinfo.marker_list; m; m = m->next)
        if (m->marker == JPEG_APP0 + 1 && (o = exif_orientation(m->data, m->data_length)) != 1)
            break;
    bool swap = o >= 5; /* transposing orientations display it rotated */
    info->width = swap ? cinfo.image_height : cinfo.image_width;
    info->height = swap ? cinfo.image_width : cinfo.image_height;
    jpeg_destroy_decompress(&cinfo);
    return OMNI_OK;
}

// ---- header fields of the formats ffmpeg decodes --------------------------------

static uint32_t le16(const uint8_t *b) { return (uint32_t)b[0] | (uint32_t)b[1] << 8; }
static uint32_t le24(const uint8_t *b) { return le16(b) | (uint32_t)b[2] << 16; }
static uint32_t le32(const uint8_t *b) { return le24(b) | (uint32_t)b[3] << 24; }

/* GIF: the logical screen (ffmpeg's decoder outputs frames of that size). */
static bool probe_gif(const uint8_t *b, size_t n, int64_t *w, int64_t *h)
{
    if (n < 10)
        return false;
    *w = le16(b + 6), *h = le16(b + 8);
    return true;
}

/* BMP: BITMAPCOREHEADER (12 bytes, 16-bit sides) or BITMAPINFOHEADER and
 * its successors (signed 32-bit sides; a negative height is top-down). */
static bool probe_bmp(const uint8_t *b, size_t n, int64_t *w, int64_t *h)
{
    if (n < 26)
        return false;
    uint32_t dib = le32(b + 14);
    if (dib == 12) {
        *w = le16(b + 18), *h = le16(b + 20);
        return true;
    }
    if (dib < 40)
        return false;
    *w = (int32_t)le32(b + 18), *h = (int32_t)le32(b + 22);
    if (*h < 0)
        *h = -*h;
    return true;
}

/* WebP: the first chunk after "RIFF....WEBP" - VP8X (extended: canvas
 * size, 24-bit minus one), VP8L (lossless: 14-bit minus one after the 0x2f
 * signature) or "VP8 " (lossy: 14-bit sides after the keyframe start code). */
static bool probe_webp(const uint8_t *b, size_t n, int64_t *w, int64_t *h)
{
    if (n < 30)
        return false;
    const uint8_t *c = b + 20; /* chunk payload */
    if (!memcmp(b + 12, "VP8X", 4)) {
        *w = (int64_t)le24(c + 4) + 1, *h = (int64_t)le24(c + 7) + 1;
        return true;
    }
    if (!memcmp(b + 12, "VP8L", 4) && c[0] == 0x2f) {
        uint32_t v = le32(c + 1);
        *w = (int64_t)(v & 0x3fff) + 1, *h = (int64_t)((v >> 14) & 0x3fff) + 1;
        return true;
    }
    if (!memcmp(b + 12, "VP8 ", 4) && c[3] == 0x9d && c[4] == 0x01 && c[5] == 0x2a) {
        *w = le16(c + 6) & 0x3fff, *h = le16(c + 8) & 0x3fff;
        return true;
    }
    return false;
}

/* TIFF: ImageWidth and ImageLength of the first IFD (the page ffmpeg reads). */
static bool probe_tiff(const uint8_t *b, size_t n, int64_t *w, int64_t *h)
{
    uint32_t tw, th;
    if (!tiff_tag(b, n, 256, &tw) || !tiff_tag(b, n, 257, &th))
        return false;
    *w = tw, *h = th;
    return true;
}

int media_image_probe(const void *data, size_t len, struct media_image_info *info, char *err,
                      size_t errlen)
{
    memset(info, 0, sizeof *info);
    if (!data || len == 0)
        return omni_fail(err, errlen, OMNI_ERR_FORMAT, "image: empty input");
    info->format = media_image_sniff(data, len);
    bool ok;
    switch (info->format) {
    case MEDIA_IMAGE_PNG: {
        png_image png;
        memset(&png, 0, sizeof png);
        png.version = PNG_IMAGE_VERSION;
        if (!png_image_begin_read_from_memory(&png, data, len))
            return omni_fail(err, errlen, OMNI_ERR_FORMAT, "image: bad PNG: %s", png.message);
        info->width = png.width, info->height = png.height;
        png_image_free(&png);
        return OMNI_OK;
    }
    case MEDIA_IMAGE_JPEG: return probe_jpeg(data, len, info, err, errlen);
    case MEDIA_IMAGE_GIF: ok = probe_gif(data, len, &info->width, &info->height); break;
    case MEDIA_IMAGE_BMP: ok = probe_bmp(data, len, &info->width, &info->height); break;
    case MEDIA_IMAGE_WEBP: ok = probe_webp(data, len, &info->width, &info->height); break;
    case MEDIA_IMAGE_TIFF: ok = probe_tiff(data, len, &info->width, &info->height); break;
    default:
        return omni_fail(err, errlen, OMNI_ERR_FORMAT,
                         "image: unrecognised format (PNG, JPEG, WebP, GIF, BMP, TIFF)");
    }
    if (!ok)
        return omni_fail(err, errlen, OMNI_ERR_FORMAT, "image: bad %s header",
                         media_image_format_name(info->format));
    return OMNI_OK;
}

// ---- entry points ------------------------------------------------------------

int media_image_decode(const void *data, size_t len, const struct media_image_params *p,
                       struct media_image *out, char *err, size_t errlen)
{
    struct media_image_params def = media_image_default_params();
    if (!p)
        p = &def;
    memset(out, 0, sizeof *out);
    if (!data || len == 0)
        return omni_fail(err, errlen, OMNI_ERR_FORMAT, "image: empty input");
    if (len > p->max_input_bytes)
        return omni_fail(err, errlen, OMNI_ERR_LIMIT, "image: %zu bytes exceeds the limit of %zu",
                         len, p->max_input_bytes);
    switch (media_image_sniff(data, len)) {
    case MEDIA_IMAGE_PNG: return decode_png(data, len, p, out, err, errlen);
    case MEDIA_IMAGE_JPEG: return decode_jpeg(data, len, p, out, err, errlen);
    default: {
        /* ffmpeg would learn the size by decoding the picture: check the
         * header's first (its decoder enforces max_pixels too). */
        struct media_image_info info;
        int rc = media_image_probe(data, len, &info, err, errlen);
        if (rc < 0 || (rc = media_image_check_size(info.width, info.height, p, err, errlen)) < 0)
            return rc;
        return media_video_first_frame(data, len, p, out, err, errlen);
    }
    }
}

int media_image_decode_file(const char *path, const struct media_image_params *p,
                            struct media_image *out, char *err, size_t errlen)
{
    struct media_image_params def = media_image_default_params();
    if (!p)
        p = &def;
    memset(out, 0, sizeof *out);
    FILE *f = fopen(path, "rb");
    struct stat st;
    if (!f || fstat(fileno(f), &st) != 0) {
        if (f)
            fclose(f);
        return omni_fail(err, errlen, OMNI_ERR_IO, "image: %s: cannot open", path);
    }
    if ((uint64_t)st.st_size > p->max_input_bytes) {
        fclose(f);
        return omni_fail(err, errlen, OMNI_ERR_LIMIT, "image: %s: %lld bytes exceeds the limit of %zu",
                         path, (long long)st.st_size, p->max_input_bytes);
    }
    size_t n = (size_t)st.st_size;
    uint8_t *buf = malloc(n ? n : 1);
    if (!buf || fread(buf, 1, n, f) != n) {
        free(buf);
        fclose(f);
        return omni_fail(err, errlen, buf ? OMNI_ERR_IO : OMNI_ERR_NOMEM, "image: %s: read failed",
                         path);
    }
    fclose(f);
    char e[256];
    int rc = media_image_decode(buf, n, p, out, e, sizeof e);
    free(buf);
    if (rc < 0)
        omni_fail(err, errlen, rc, "%s (%s)", e, path);
    return rc;
}

int media_image_resize(const struct media_image *in, int width, int height,
                       struct media_image *out, char *err, size_t errlen)
{
    int rc = media_image_alloc(out, width, height, err, errlen);
    if (rc < 0)
        return rc;
    struct SwsContext *sws = sws_getContext(in->width, in->height, AV_PIX_FMT_RGB24, width, height,
                                            AV_PIX_FMT_RGB24, SWS_BICUBIC | SWS_ACCURATE_RND,
                                            NULL, NULL, NULL);
    if (!sws) {
        media_image_release(out);
        return omni_fail(err, errlen, OMNI_ERR_ARG, "image: cannot scale %dx%d to %dx%d", in->width,
                         in->height, width, height);
    }
    /* libswscale's SIMD readers run past the end of a row, and so past the
     * end of a packed buffer: scale from a copy with aligned rows and room
     * after the last one (found by fuzz_image). */
    int stride = (in->width * 3 + 63) & ~63;
    uint8_t *padded = malloc((size_t)stride * (size_t)in->height + 64);
    if (!padded) {
        sws_freeContext(sws);
        media_image_release(out);
        return omni_fail(err, errlen, OMNI_ERR_NOMEM, "image: out of memory");
    }
    for (int y = 0; y < in->height; y++)
        memcpy(padded + (size_t)y * stride, in->rgb + (size_t)y * in->width * 3, (size_t)in->width * 3);
    memset(padded + (size_t)stride * in->height, 0, 64);
    const uint8_t *src[4] = { padded };
    int src_stride[4] = { stride };
    uint8_t *dst[4] = { out->rgb };
    int dst_stride[4] = { width * 3 };
    sws_scale(sws, src, src_stride, 0, in->height, dst, dst_stride);
    sws_freeContext(sws);
    free(padded);
    return OMNI_OK;
}
