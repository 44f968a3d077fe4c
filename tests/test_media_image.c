/* test_media_image.c - media/image and media/video: PNG, JPEG with EXIF
 * orientation, BMP through ffmpeg, decompression bombs and broken inputs
 * rejected before allocation; video frame sampling (uniform times, seeking,
 * limits) on the clips in ../shared/video. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jpeglib.h>
#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
#include <png.h>
#include <zlib.h>

#include "media/image.h"
#include "media/video.h"
#include "src/core/omni.h"
#include "test.h"

static const uint8_t *px(const struct media_image *img, int x, int y)
{
    return img->rgb + ((size_t)y * img->width + x) * 3;
}

TEST(media_image_png_fixture)
{
    char err[256];
    struct media_image img;
    CHECK_EQ(media_image_decode_file(test_fixture("vision/image.png"), NULL, &img, err, sizeof err), 0);
    CHECK_EQ(img.width, 160);
    CHECK_EQ(img.height, 96);
    /* the yellow disc of tools/make_vision_golden.py around (100, 40) */
    const uint8_t *p = px(&img, 100, 40);
    CHECK(p[0] > 180 && p[1] > 160 && p[2] < 90);
    media_image_release(&img);
    media_image_release(&img); /* idempotent */
}

/* A 32x16 JPEG, left half red, right half blue, with an EXIF APP1 segment
 * carrying orientation o (0 = no EXIF). */
static uint8_t *make_jpeg(int o, size_t *len)
{
    struct jpeg_compress_struct c;
    struct jpeg_error_mgr jerr;
    c.err = jpeg_std_error(&jerr);
    jpeg_create_compress(&c);
    unsigned char *buf = NULL;
    unsigned long n = 0;
    jpeg_mem_dest(&c, &buf, &n);
    c.image_width = 32, c.image_height = 16, c.input_components = 3, c.in_color_space = JCS_RGB;
    jpeg_set_defaults(&c);
    jpeg_set_quality(&c, 95, TRUE);
    jpeg_start_compress(&c, TRUE);
    uint8_t row[32 * 3];
    for (int x = 0; x < 32; x++)
        row[x * 3] = x < 16 ? 255 : 0, row[x * 3 + 1] = 0, row[x * 3 + 2] = x < 16 ? 0 : 255;
    for (int y = 0; y < 16; y++) {
        JSAMPROW r = row;
        jpeg_write_scanlines(&c, &r, 1);
    }
    jpeg_finish_compress(&c);
    jpeg_destroy_compress(&c);
    if (!o) {
        *len = n;
        return buf;
    }
    /* APP1: "Exif\0\0", TIFF little-endian header, IFD0 with one SHORT entry 0x0112 */
    static const uint8_t tiff[] = { 'I', 'I', 42, 0, 8, 0, 0, 0, 1, 0, 0x12, 0x01, 3, 0, 1, 0, 0, 0 };
    uint8_t app1[4 + 6 + sizeof tiff + 8];
    size_t k = 0;
    app1[k++] = 0xFF, app1[k++] = 0xE1;
    app1[k++] = 0, app1[k++] = (uint8_t)(sizeof app1 - 2);
    memcpy(app1 + k, "Exif\0\0", 6), k += 6;
    memcpy(app1 + k, tiff, sizeof tiff), k += sizeof tiff;
    app1[k++] = (uint8_t)o, app1[k++] = 0, app1[k++] = 0, app1[k++] = 0; /* value, padding */
    memset(app1 + k, 0, 4), k += 4;                                       /* next IFD */
    uint8_t *out = malloc(n + sizeof app1);
    memcpy(out, buf, 2); /* SOI */
    memcpy(out + 2, app1, sizeof app1);
    memcpy(out + 2 + sizeof app1, buf + 2, n - 2);
    free(buf);
    *len = n + sizeof app1;
    return out;
}

static int is_red(const uint8_t *p) { return p[0] > 200 && p[2] < 60; }
static int is_blue(const uint8_t *p) { return p[2] > 200 && p[0] < 60; }

TEST(media_image_jpeg_exif_orientation)
{
    char err[256];
    size_t len;
    struct media_image img;
    uint8_t *j = make_jpeg(0, &len);
    CHECK_EQ(media_image_sniff(j, len), MEDIA_IMAGE_JPEG);
    CHECK_EQ(media_image_decode(j, len, NULL, &img, err, sizeof err), 0);
    CHECK(img.width == 32 && img.height == 16);
    CHECK(is_red(px(&img, 4, 8)) && is_blue(px(&img, 28, 8)));
    media_image_release(&img);
    free(j);
    /* 6: rotate 90 degrees clockwise -> 16x32, the left (red) half on top */
    j = make_jpeg(6, &len);
    CHECK_EQ(media_image_decode(j, len, NULL, &img, err, sizeof err), 0);
    CHECK(img.width == 16 && img.height == 32);
    CHECK(is_red(px(&img, 8, 4)) && is_blue(px(&img, 8, 28)));
    media_image_release(&img);
    free(j);
    /* 3: rotate 180 -> blue on the left; 8: counter-clockwise -> red at the bottom */
    j = make_jpeg(3, &len);
    CHECK_EQ(media_image_decode(j, len, NULL, &img, err, sizeof err), 0);
    CHECK(img.width == 32 && is_blue(px(&img, 4, 8)) && is_red(px(&img, 28, 8)));
    media_image_release(&img);
    free(j);
    j = make_jpeg(8, &len);
    CHECK_EQ(media_image_decode(j, len, NULL, &img, err, sizeof err), 0);
    CHECK(img.width == 16 && is_blue(px(&img, 8, 4)) && is_red(px(&img, 8, 28)));
    media_image_release(&img);
    free(j);
}

static void put32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24), p[1] = (uint8_t)(v >> 16), p[2] = (uint8_t)(v >> 8), p[3] = (uint8_t)v;
}

TEST(media_image_rejects_bombs_before_allocating)
{
    char err[256];
    struct media_image img;
    /* a PNG whose IHDR claims 100000 x 100000 (valid CRCs), with 2 bytes of data */
    uint8_t png[8 + 25 + 14 + 12] = { 0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n' };
    uint8_t *ih = png + 8, *id = png + 33, *ie = png + 47;
    put32(ih, 13);
    memcpy(ih + 4, "IHDR", 4);
    put32(ih + 8, 100000), put32(ih + 12, 100000);
    ih[16] = 8, ih[17] = 2, ih[18] = ih[19] = ih[20] = 0;
    put32(ih + 21, (uint32_t)crc32(0, ih + 4, 17));
    put32(id, 2);
    memcpy(id + 4, "IDAT\x78\x9c", 6);
    put32(id + 10, (uint32_t)crc32(0, id + 4, 6));
    put32(ie, 0);
    memcpy(ie + 4, "IEND", 4);
    put32(ie + 8, (uint32_t)crc32(0, ie + 4, 4));
    int rc = media_image_decode(png, sizeof png, NULL, &img, err, sizeof err);
    CHECK_MSG(rc == OMNI_ERR_LIMIT, "%d: %s", rc, err);
    CHECK_STR_CONTAINS(err, "100000x100000");
    CHECK(img.rgb == NULL);
    /* the same through a tighter limit on a real file */
    struct media_image_params p = media_image_default_params();
    p.max_pixels = 1000;
    CHECK_EQ(media_image_decode_file(test_fixture("vision/image.png"), &p, &img, err, sizeof err),
             OMNI_ERR_LIMIT);
    size_t len;
    uint8_t *j = make_jpeg(0, &len);
    CHECK_EQ(media_image_decode(j, len, &p, &img, err, sizeof err), 0); /* 512 pixels */
    media_image_release(&img);
    p.max_pixels = 100;
    CHECK_EQ(media_image_decode(j, len, &p, &img, err, sizeof err), OMNI_ERR_LIMIT);
    p = media_image_default_params();
    p.max_input_bytes = 100;
    CHECK_EQ(media_image_decode(j, len, &p, &img, err, sizeof err), OMNI_ERR_LIMIT);
    free(j);
}

/* A PNG of the given libpng format written in memory; caller frees. */
static uint8_t *make_png(const void *pixels, int w, int h, png_uint_32 format, size_t *len)
{
    png_image im;
    memset(&im, 0, sizeof im);
    im.version = PNG_IMAGE_VERSION, im.width = w, im.height = h, im.format = format;
    png_alloc_size_t n = 0;
    if (!png_image_write_to_memory(&im, NULL, &n, 0, pixels, 0, NULL))
        return NULL;
    uint8_t *buf = malloc(n);
    if (buf && !png_image_write_to_memory(&im, buf, &n, 0, pixels, 0, NULL)) {
        free(buf);
        return NULL;
    }
    *len = n;
    return buf;
}

TEST(media_image_png_alpha_and_gray)
{
    char err[256];
    size_t len;
    struct media_image img;
    /* RGBA: opaque red, fully transparent black (-> white), half-transparent blue */
    const uint8_t rgba[] = { 255, 0, 0, 255, 0, 0, 0, 0, 0, 0, 255, 128 };
    uint8_t *png = make_png(rgba, 3, 1, PNG_FORMAT_RGBA, &len);
    CHECK(png);
    CHECK_EQ(media_image_decode(png, len, NULL, &img, err, sizeof err), 0);
    CHECK(px(&img, 0, 0)[0] == 255 && px(&img, 0, 0)[1] == 0);
    CHECK(px(&img, 1, 0)[0] == 255 && px(&img, 1, 0)[1] == 255 && px(&img, 1, 0)[2] == 255);
    CHECK(px(&img, 2, 0)[0] > 100 && px(&img, 2, 0)[0] < 160 && px(&img, 2, 0)[2] == 255);
    media_image_release(&img);
    free(png);
    const uint8_t gray[] = { 0, 64, 200, 255 };
    png = make_png(gray, 2, 2, PNG_FORMAT_GRAY, &len);
    CHECK(png);
    CHECK_EQ(media_image_decode(png, len, NULL, &img, err, sizeof err), 0);
    CHECK(img.width == 2 && img.height == 2);
    for (int i = 0; i < 4; i++) {
        const uint8_t *p = px(&img, i % 2, i / 2);
        CHECK(p[0] == p[1] && p[1] == p[2]);
    }
    CHECK(px(&img, 1, 1)[0] == 255 && px(&img, 0, 0)[0] == 0);
    media_image_release(&img);
    free(png);
}

TEST(media_image_rejects_broken_input)
{
    char err[256];
    struct media_image img;
    CHECK_EQ(media_image_decode("", 0, NULL, &img, err, sizeof err), OMNI_ERR_FORMAT);
    CHECK_EQ(media_image_decode("hello world", 11, NULL, &img, err, sizeof err), OMNI_ERR_FORMAT);
    CHECK_STR_CONTAINS(err, "unrecognised");
    size_t len;
    char *png = test_read_file(test_fixture("vision/image.png"), &len);
    CHECK(png);
    for (size_t cut = 8; cut < len; cut = cut * 3 + 1) {
        int rc = media_image_decode(png, cut, NULL, &img, err, sizeof err);
        CHECK_MSG(rc < 0 && img.rgb == NULL, "truncated PNG (%zu bytes) decoded", cut);
    }
    png[200] ^= 0x55; /* corrupt IDAT: the CRC check fails */
    CHECK(media_image_decode(png, len, NULL, &img, err, sizeof err) < 0);
    free(png);
    uint8_t *j = make_jpeg(0, &len);
    CHECK(media_image_decode(j, len / 3, NULL, &img, err, sizeof err) <= 0);
    media_image_release(&img);
    CHECK(media_image_decode(j, 40, NULL, &img, err, sizeof err) < 0);
    free(j);
    uint8_t gif[] = "GIF89a\x01\x00";
    CHECK(media_image_decode(gif, sizeof gif, NULL, &img, err, sizeof err) < 0);
    CHECK_EQ(media_image_decode_file("/nonexistent.png", NULL, &img, err, sizeof err), OMNI_ERR_IO);
}

TEST(media_image_bmp_through_ffmpeg)
{
    char err[256];
    /* 3x2 24-bit BMP: rows bottom-up, BGR, padded to 4 bytes */
    uint8_t bmp[54 + 2 * 12] = { 'B', 'M' };
    uint32_t v;
    v = sizeof bmp, memcpy(bmp + 2, &v, 4);
    v = 54, memcpy(bmp + 10, &v, 4);
    v = 40, memcpy(bmp + 14, &v, 4);
    v = 3, memcpy(bmp + 18, &v, 4);
    v = 2, memcpy(bmp + 22, &v, 4);
    bmp[26] = 1, bmp[28] = 24;
    v = 24, memcpy(bmp + 34, &v, 4);
    for (int y = 0; y < 2; y++)
        for (int x = 0; x < 3; x++) {
            uint8_t *p = bmp + 54 + y * 12 + x * 3; /* y = 0 is the bottom row */
            p[0] = (uint8_t)(10 * x), p[1] = (uint8_t)(100 + y), p[2] = 200;
        }
    struct media_image img;
    CHECK_EQ(media_image_sniff(bmp, sizeof bmp), MEDIA_IMAGE_BMP);
    CHECK_EQ(media_image_decode(bmp, sizeof bmp, NULL, &img, err, sizeof err), 0);
    CHECK(img.width == 3 && img.height == 2);
    CHECK(px(&img, 2, 1)[0] == 200 && px(&img, 2, 1)[1] == 100 && px(&img, 2, 1)[2] == 20);
    CHECK(px(&img, 0, 0)[1] == 101);
    media_image_release(&img);
}

TEST(media_image_resize_swscale)
{
    char err[256];
    struct media_image img, small;
    CHECK_EQ(media_image_decode_file(test_fixture("vision/image.png"), NULL, &img, err, sizeof err), 0);
    CHECK_EQ(media_image_resize(&img, 40, 24, &small, err, sizeof err), 0);
    CHECK(small.width == 40 && small.height == 24);
    const uint8_t *p = px(&small, 25, 10); /* the disc, scaled by 1/4 */
    CHECK(p[0] > 160 && p[2] < 110);
    media_image_release(&small);
    media_image_release(&img);
}

TEST(media_image_real_jpeg)
{
    SKIP_IF_NO_SHARED();
    char err[256];
    struct media_image img;
    CHECK_EQ(media_image_decode_file(test_shared("images/test-1.jpeg"), NULL, &img, err, sizeof err), 0);
    CHECK_EQ(img.width, 640);
    CHECK_EQ(img.height, 488);
    media_image_release(&img);
}

// ---- video ------------------------------------------------------------------------

TEST(media_video_sample_times_uniform)
{
    double t[16];
    CHECK_EQ(media_video_sample_times(4.0, 1.0, 16, t, 16), 4);
    CHECK_NEAR(t[0], 0.5, 1e-12);
    CHECK_NEAR(t[3], 3.5, 1e-12);
    CHECK_EQ(media_video_sample_times(100.0, 1.0, 16, t, 16), 16);
    CHECK_NEAR(t[0], 100.0 / 32, 1e-9);
    CHECK_NEAR(t[15], 100.0 - 100.0 / 32, 1e-9);
    CHECK_EQ(media_video_sample_times(0.3, 1.0, 16, t, 16), 1);
    CHECK_NEAR(t[0], 0.15, 1e-12);
}

TEST(media_video_sample_mp4_seeks)
{
    SKIP_IF_NO_SHARED();
    char err[256];
    struct media_video_frames v;
    /* 4 s, 10 fps, keyframe every 10 frames */
    CHECK_EQ(media_video_sample_file(test_shared("video/sample.mp4"), NULL, &v, err, sizeof err), 0);
    CHECK_EQ(v.n_frames, 4);
    CHECK_NEAR(v.duration_s, 4.0, 0.05);
    CHECK(v.seeked);
    CHECK_MSG(v.n_decoded < 40, "decoded %d of 40 frames", v.n_decoded);
    for (int i = 0; i < 4; i++) {
        CHECK(v.frames[i].width == 320 && v.frames[i].height == 240);
        CHECK_NEAR(v.time_s[i], i + 0.5, 0.051);
    }
    /* the crop pans across the page: consecutive frames differ */
    CHECK(memcmp(v.frames[0].rgb, v.frames[3].rgb, 320 * 240 * 3) != 0);
    media_video_frames_release(&v);
    struct media_video_params p = media_video_default_params();
    p.fps = 2, p.max_frames = 8;
    CHECK_EQ(media_video_sample_file(test_shared("video/sample.mp4"), &p, &v, err, sizeof err), 0);
    CHECK_EQ(v.n_frames, 8);
    printf("    sample.mp4: 8 frames at 2 fps from %d of 40 decoded\n", v.n_decoded);
    CHECK_MSG(v.n_decoded < 40, "decoded %d of 40 frames", v.n_decoded);
    for (int i = 1; i < 8; i++)
        CHECK(v.time_s[i] > v.time_s[i - 1]);
    media_video_frames_release(&v);
}

TEST(media_video_sample_memory_and_limits)
{
    SKIP_IF_NO_SHARED();
    char err[256];
    size_t len;
    char *mp4 = test_read_file(test_shared("video/test-3.mp4"), &len);
    CHECK(mp4);
    struct media_video_frames v;
    struct media_video_params p = media_video_default_params();
    p.max_frames = 4;
    CHECK_EQ(media_video_sample(mp4, len, &p, &v, err, sizeof err), 0);
    CHECK_EQ(v.n_frames, 4);
    CHECK(v.frames[0].width == 720 && v.frames[0].height == 358);
    CHECK_NEAR(v.time_s[0], v.duration_s / 8, 0.1);
    CHECK_MSG(v.n_decoded < 240, "decoded %d of 240 frames", v.n_decoded);
    media_video_frames_release(&v);
    p.max_duration_s = 5;
    CHECK_EQ(media_video_sample(mp4, len, &p, &v, err, sizeof err), OMNI_ERR_LIMIT);
    CHECK_STR_CONTAINS(err, "exceeds");
    p = media_video_default_params();
    p.image.max_pixels = 720 * 300;
    CHECK_EQ(media_video_sample(mp4, len, &p, &v, err, sizeof err), OMNI_ERR_LIMIT);
    /* truncated: no crash, either frames or a clean error */
    int rc = media_video_sample(mp4, len / 3, NULL, &v, err, sizeof err);
    CHECK(rc == 0 ? v.n_frames >= 1 : v.frames == NULL);
    media_video_frames_release(&v);
    CHECK(media_video_sample(mp4 + 1000, 5000, NULL, &v, err, sizeof err) < 0);
    CHECK(media_video_sample("not a video at all", 18, NULL, &v, err, sizeof err) < 0);
    free(mp4);
}

// ---- header-only probing (issue 7.8) -------------------------------------------

static void le16_put(uint8_t *p, uint32_t v) { p[0] = (uint8_t)v, p[1] = (uint8_t)(v >> 8); }
static void le32_put(uint8_t *p, uint32_t v) { le16_put(p, v), le16_put(p + 2, v >> 16); }

/* A PNG signature + IHDR claiming w x h (valid CRC); returns its length. */
static size_t make_png_header(uint8_t *png, uint32_t w, uint32_t h)
{
    static const uint8_t sig[8] = { 0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n' };
    memcpy(png, sig, 8);
    uint8_t *ih = png + 8;
    put32(ih, 13);
    memcpy(ih + 4, "IHDR", 4);
    put32(ih + 8, w), put32(ih + 12, h);
    ih[16] = 8, ih[17] = 2, ih[18] = ih[19] = ih[20] = 0;
    put32(ih + 21, (uint32_t)crc32(0, ih + 4, 17));
    return 8 + 25;
}

TEST(media_image_probe_reads_headers_only)
{
    char err[256];
    struct media_image_info info;
    uint8_t b[64] = { 0 };
    /* PNG: a 20000x20000 IHDR and the first IDAT's chunk header, no data */
    size_t n = make_png_header(b, 20000, 20000);
    put32(b + n, 1000000), memcpy(b + n + 4, "IDAT", 4), n += 8;
    CHECK_MSG(media_image_probe(b, n, &info, err, sizeof err) == 0, "%s", err);
    CHECK(info.format == MEDIA_IMAGE_PNG && info.width == 20000 && info.height == 20000);
    CHECK_EQ(media_image_check_size(info.width, info.height, NULL, err, sizeof err), OMNI_ERR_LIMIT);
    /* JPEG: the SOF size, EXIF rotation applied (6: 32x16 shows as 16x32) */
    size_t len;
    uint8_t *j = make_jpeg(6, &len);
    CHECK_EQ(media_image_probe(j, len, &info, err, sizeof err), 0);
    CHECK(info.format == MEDIA_IMAGE_JPEG && info.width == 16 && info.height == 32);
    free(j);
    j = make_jpeg(0, &len);
    size_t sos = 2; /* cut after the SOS segment: no scan data at all */
    while (sos + 4 < len && !(j[sos] == 0xFF && j[sos + 1] == 0xDA))
        sos += 2 + ((size_t)j[sos + 2] << 8 | j[sos + 3]);
    CHECK(sos + 4 < len);
    sos += 2 + ((size_t)j[sos + 2] << 8 | j[sos + 3]);
    CHECK_MSG(media_image_probe(j, sos, &info, err, sizeof err) == 0, "%s", err);
    CHECK(info.width == 32 && info.height == 16);
    free(j);
    /* GIF: the logical screen */
    memset(b, 0, sizeof b);
    memcpy(b, "GIF89a", 6), le16_put(b + 6, 640), le16_put(b + 8, 480);
    CHECK_EQ(media_image_probe(b, 13, &info, err, sizeof err), 0);
    CHECK(info.format == MEDIA_IMAGE_GIF && info.width == 640 && info.height == 480);
    /* BMP: BITMAPINFOHEADER, top-down (negative height) */
    memset(b, 0, sizeof b);
    b[0] = 'B', b[1] = 'M', le32_put(b + 14, 40), le32_put(b + 18, 30000);
    le32_put(b + 22, (uint32_t)-20000);
    CHECK_EQ(media_image_probe(b, 54, &info, err, sizeof err), 0);
    CHECK(info.format == MEDIA_IMAGE_BMP && info.width == 30000 && info.height == 20000);
    /* WebP: lossless (VP8L), extended (VP8X) and lossy ("VP8 ") headers */
    memset(b, 0, sizeof b);
    memcpy(b, "RIFF", 4), memcpy(b + 8, "WEBPVP8L", 8);
    b[20] = 0x2f, le32_put(b + 21, (uint32_t)(1000 - 1) | (uint32_t)(700 - 1) << 14);
    CHECK_EQ(media_image_probe(b, 30, &info, err, sizeof err), 0);
    CHECK(info.format == MEDIA_IMAGE_WEBP && info.width == 1000 && info.height == 700);
    memcpy(b + 12, "VP8X", 4);
    memset(b + 20, 0, 10);
    le32_put(b + 24, 20000 - 1), le32_put(b + 27, 15000 - 1);
    CHECK_EQ(media_image_probe(b, 30, &info, err, sizeof err), 0);
    CHECK(info.width == 20000 && info.height == 15000);
    memcpy(b + 12, "VP8 ", 4);
    memset(b + 20, 0, 10);
    b[23] = 0x9d, b[24] = 0x01, b[25] = 0x2a, le16_put(b + 26, 320), le16_put(b + 28, 240);
    CHECK_EQ(media_image_probe(b, 30, &info, err, sizeof err), 0);
    CHECK(info.width == 320 && info.height == 240);
    /* TIFF: ImageWidth (SHORT) and ImageLength (LONG) in IFD0, big-endian */
    static const uint8_t tiff[] = { 'M', 'M', 0, 42, 0, 0, 0, 8, 0, 2,
                                    1, 0, 0, 3, 0, 0, 0, 1, 0x4e, 0x20, 0, 0, /* 256: 20000 */
                                    1, 1, 0, 4, 0, 0, 0, 1, 0, 0, 0x3a, 0x98, /* 257: 15000 */
                                    0, 0, 0, 0 };
    CHECK_EQ(media_image_probe(tiff, sizeof tiff, &info, err, sizeof err), 0);
    CHECK(info.format == MEDIA_IMAGE_TIFF && info.width == 20000 && info.height == 15000);
    /* truncated or unknown headers are clean errors */
    CHECK_EQ(media_image_probe(tiff, 12, &info, err, sizeof err), OMNI_ERR_FORMAT);
    CHECK_EQ(media_image_probe(b, 24, &info, err, sizeof err), OMNI_ERR_FORMAT);
    CHECK_STR_CONTAINS(err, "webp");
    CHECK_EQ(media_image_probe("hello", 5, &info, err, sizeof err), OMNI_ERR_FORMAT);
    CHECK_EQ(media_image_probe(NULL, 0, &info, err, sizeof err), OMNI_ERR_FORMAT);
}

/* BMP and TIFF go to ffmpeg, which learns their size by decoding: their
 * headers are checked first, so a 30000x20000 BMP of 54 bytes is refused
 * without ffmpeg opening it. */
TEST(media_image_ffmpeg_formats_checked_before_decoding)
{
    char err[256];
    struct media_image img;
    uint8_t b[54 + 16] = { 'B', 'M' };
    le32_put(b + 2, sizeof b), le32_put(b + 10, 54), le32_put(b + 14, 40);
    le32_put(b + 18, 30000), le32_put(b + 22, 20000);
    b[26] = 1, b[28] = 24;
    int rc = media_image_decode(b, sizeof b, NULL, &img, err, sizeof err);
    CHECK_MSG(rc == OMNI_ERR_LIMIT, "rc %d %s", rc, err);
    CHECK_STR_CONTAINS(err, "30000x20000");
    CHECK(img.rgb == NULL);
}

/* A Matroska clip of n_frames 16x16 MJPEG frames at 1 fps, muxed to a
 * non-seekable buffer (no index, so the sampler decodes from the start)
 * and its Duration element zeroed: the clip declares no duration. Caller
 * frees. */
static uint8_t *make_mkv(int n_frames, size_t *len)
{
    const AVCodec *codec = avcodec_find_encoder(AV_CODEC_ID_MJPEG);
    AVCodecContext *enc = codec ? avcodec_alloc_context3(codec) : NULL;
    AVFormatContext *fmt = NULL;
    uint8_t *out = NULL;
    if (!enc || avformat_alloc_output_context2(&fmt, NULL, "matroska", NULL) < 0)
        goto done;
    enc->width = enc->height = 16;
    enc->pix_fmt = AV_PIX_FMT_YUVJ420P;
    enc->time_base = (AVRational){ 1, 1 };
    if (avcodec_open2(enc, codec, NULL) < 0)
        goto done;
    AVStream *st = avformat_new_stream(fmt, NULL);
    if (!st || avcodec_parameters_from_context(st->codecpar, enc) < 0 ||
        avio_open_dyn_buf(&fmt->pb) < 0)
        goto done;
    st->time_base = enc->time_base;
    if (avformat_write_header(fmt, NULL) < 0)
        goto done;
    AVFrame *f = av_frame_alloc();
    AVPacket *pkt = av_packet_alloc();
    f->width = f->height = 16, f->format = enc->pix_fmt;
    av_frame_get_buffer(f, 0);
    for (int i = 0; i <= n_frames; i++) {
        if (i < n_frames) {
            av_frame_make_writable(f);
            for (int y = 0; y < 16; y++)
                memset(f->data[0] + y * f->linesize[0], 16 * i, 16);
            f->pts = i;
        }
        avcodec_send_frame(enc, i < n_frames ? f : NULL);
        while (avcodec_receive_packet(enc, pkt) == 0) {
            av_packet_rescale_ts(pkt, enc->time_base, st->time_base);
            pkt->stream_index = 0;
            av_interleaved_write_frame(fmt, pkt);
        }
    }
    av_write_trailer(fmt);
    av_frame_free(&f);
    av_packet_free(&pkt);
    uint8_t *buf;
    int n = avio_close_dyn_buf(fmt->pb, &buf);
    fmt->pb = NULL;
    if ((out = malloc((size_t)n)))
        memcpy(out, buf, (size_t)n), *len = (size_t)n;
    av_free(buf);
    for (int i = 0; out && i + 11 < n; i++)
        if (out[i] == 0x44 && out[i + 1] == 0x89 && (out[i + 2] == 0x84 || out[i + 2] == 0x88)) {
            memset(out + i + 3, 0, out[i + 2] & 0x0f); /* Duration, a float: 0 */
            break;
        }
done:
    avcodec_free_context(&enc);
    avformat_free_context(fmt);
    return out;
}

/* Issue 7: a clip that declares no duration is sampled by decoding from the
 * start; frame timestamps past max_duration_s, or more frames than
 * max_decoded_frames, stop the decoding there. */
TEST(media_video_limits_hold_while_decoding)
{
    char err[256];
    size_t len;
    uint8_t *mkv = make_mkv(20, &len);
    CHECK(mkv);
    struct media_video_params p = media_video_default_params();
    struct media_video_info info;
    CHECK_MSG(media_video_probe(mkv, len, &p, &info, err, sizeof err) == 0, "%s", err);
    CHECK(info.width == 16 && info.height == 16);
    CHECK_MSG(info.duration_s == 0, "declared %.1f s", info.duration_s);
    CHECK_EQ(info.n_frames, 16);
    struct media_video_frames v;
    CHECK_MSG(media_video_sample(mkv, len, &p, &v, err, sizeof err) == 0, "%s", err);
    CHECK_EQ(v.n_frames, 16);
    CHECK(!v.seeked);
    media_video_frames_release(&v);
    p.max_duration_s = 5;
    int rc = media_video_sample(mkv, len, &p, &v, err, sizeof err);
    CHECK_MSG(rc == OMNI_ERR_LIMIT, "rc %d %s", rc, err);
    CHECK_STR_CONTAINS(err, "past the limit of 5.0 s");
    CHECK(v.frames == NULL);
    p = media_video_default_params();
    p.max_decoded_frames = 5;
    rc = media_video_sample(mkv, len, &p, &v, err, sizeof err);
    CHECK_MSG(rc == OMNI_ERR_LIMIT, "rc %d %s", rc, err);
    CHECK_STR_CONTAINS(err, "more than 5 frames");
    free(mkv);
}

/* The size a container declares is checked as soon as its header is read,
 * before ffmpeg probes the stream by decoding: the Matroska track's
 * PixelWidth / PixelHeight (1-byte elements, 16) rewritten to 255 against
 * a 200x200-pixel limit. */
TEST(media_video_absurd_size_refused_from_the_header)
{
    char err[256];
    size_t len;
    uint8_t *mkv = make_mkv(3, &len);
    CHECK(mkv);
    int patched = 0;
    for (size_t i = 0; i + 4 < len; i++)
        if ((mkv[i] == 0xB0 || mkv[i] == 0xBA) && mkv[i + 1] == 0x81 && mkv[i + 2] == 16) {
            mkv[i + 2] = 0xff;
            patched++;
        }
    CHECK_EQ(patched, 2);
    struct media_video_params p = media_video_default_params();
    p.image.max_pixels = 200 * 200;
    struct media_video_info info;
    int rc = media_video_probe(mkv, len, &p, &info, err, sizeof err);
    CHECK_MSG(rc == OMNI_ERR_LIMIT, "rc %d %s", rc, err);
    CHECK_STR_CONTAINS(err, "255x255");
    struct media_video_frames v;
    CHECK_EQ(media_video_sample(mkv, len, &p, &v, err, sizeof err), OMNI_ERR_LIMIT);
    free(mkv);
}
