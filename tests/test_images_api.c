/* test_images_api.c - src/api/images.c without a server: the service
 * thread's count of image parts (Anthropic base64 blocks counted, not
 * decoded, and nothing left behind when the request is refused), the
 * worker's first pass that refuses a request from the image headers before
 * any pixel is decoded (context budget, --max-images with a clip's frames,
 * the bytes of one request), the encode path on the fixture picture; and
 * download_addr_is_private, the filter the image URLs go through. */
#include <arpa/inet.h>
#include <math.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include <cjson/cJSON.h>
#include <libavutil/base64.h>
#include <zlib.h>

#include "src/api/apireq.h"
#include "src/api/images.h"
#include "src/core/download.h"
#include "src/core/omni.h"
#include "test.h"
#include "vision/vision.h"

/* base64 of n bytes (malloc'ed). */
static char *b64(const void *data, size_t n)
{
    size_t cap = AV_BASE64_SIZE(n);
    char *s = malloc(cap);
    if (s)
        av_base64_encode(s, (int)cap, data, (int)n);
    return s;
}

/* {"messages":[{"role":"user","content":[parts..., {"type":"text",...}]}]} */
static cJSON *request_with(cJSON *parts)
{
    cJSON *root = cJSON_CreateObject(), *msgs = cJSON_AddArrayToObject(root, "messages");
    cJSON *m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "role", "user");
    cJSON *text = cJSON_CreateObject();
    cJSON_AddStringToObject(text, "type", "text");
    cJSON_AddStringToObject(text, "text", "What is in these?");
    cJSON_AddItemToArray(parts, text);
    cJSON_AddItemToObject(m, "content", parts);
    cJSON_AddItemToArray(msgs, m);
    return root;
}

static void add_anthropic_image(cJSON *parts, const char *data)
{
    cJSON *p = cJSON_CreateObject(), *src = cJSON_CreateObject();
    cJSON_AddStringToObject(p, "type", "image");
    cJSON_AddStringToObject(src, "type", "base64");
    cJSON_AddStringToObject(src, "media_type", "image/png");
    cJSON_AddStringToObject(src, "data", data);
    cJSON_AddItemToObject(p, "source", src);
    cJSON_AddItemToArray(parts, p);
}

static void add_data_url(cJSON *parts, const char *type, const char *mime, const void *bytes,
                         size_t n)
{
    char *enc = b64(bytes, n);
    size_t ul = strlen(enc) + 64;
    char *url = malloc(ul);
    snprintf(url, ul, "data:%s;base64,%s", mime, enc);
    cJSON *p = cJSON_CreateObject(), *u = cJSON_CreateObject();
    cJSON_AddStringToObject(p, "type", type);
    cJSON_AddStringToObject(u, "url", url);
    cJSON_AddItemToObject(p, !strcmp(type, "video_url") ? "video_url" : "image_url", u);
    cJSON_AddItemToArray(parts, p);
    free(url);
    free(enc);
}

/* Issue 7.3: the service thread's count decoded every Anthropic base64
 * block and kept the bytes, also when it then refused the request (20
 * requests of 8 MiB: +205 MB). It counts without decoding now; under
 * ASan's leak checker this test fails on the old code. */
TEST(images_api_anthropic_blocks_counted_not_decoded)
{
    char err[256];
    struct api_images_params prm = api_images_default_params();
    prm.max_images = 2;
    prm.n_workers = 1;
    struct api_images_pool *pool = api_images_pool_new(NULL, NULL, NULL, &prm, err, sizeof err);
    CHECK_MSG(pool, "%s", err);
    size_t n = (size_t)1 << 20;
    uint8_t *junk = malloc(n);
    for (size_t i = 0; i < n; i++)
        junk[i] = (uint8_t)(i * 2654435761u >> 24);
    char *data = b64(junk, n);
    free(junk);
    cJSON *parts = cJSON_CreateArray();
    for (int i = 0; i < 3; i++)
        add_anthropic_image(parts, data);
    cJSON *root = request_with(parts);
    struct apireq_gen g;
    apireq_gen_init(&g);
    struct api_error e = { 0 };
    /* refused before the call is touched: c and r are never used on this path */
    CHECK_EQ(api_images_defer(pool, NULL, NULL, &root, &g, NULL, &e), -1);
    CHECK_EQ(e.status, 400);
    CHECK_STR_CONTAINS(e.message, "3 image or video parts");
    CHECK_STR_CONTAINS(e.message, "the limit is 2");
    CHECK(root != NULL); /* still the caller's */
    cJSON_Delete(root);
    /* a source that is neither base64 data nor a URL is refused by the count too */
    parts = cJSON_CreateArray();
    cJSON *bad = cJSON_CreateObject(), *src = cJSON_CreateObject();
    cJSON_AddStringToObject(bad, "type", "image");
    cJSON_AddStringToObject(src, "type", "url");
    cJSON_AddItemToObject(bad, "source", src);
    cJSON_AddItemToArray(parts, bad);
    root = request_with(parts);
    CHECK_EQ(api_images_defer(pool, NULL, NULL, &root, &g, NULL, &e), -1);
    CHECK_STR_CONTAINS(e.message, "the image source must be");
    CHECK_STR_EQ(e.param, "messages[0].content[0]");
    cJSON_Delete(root);
    /* URL sources count as images (nothing fetched while counting) */
    parts = cJSON_CreateArray();
    for (int i = 0; i < 3; i++) {
        cJSON *im = cJSON_CreateObject(), *us = cJSON_CreateObject();
        cJSON_AddStringToObject(im, "type", "image");
        cJSON_AddStringToObject(us, "type", "url");
        cJSON_AddStringToObject(us, "url", "https://example.invalid/cat.png");
        cJSON_AddItemToObject(im, "source", us);
        cJSON_AddItemToArray(parts, im);
    }
    root = request_with(parts);
    CHECK_EQ(api_images_defer(pool, NULL, NULL, &root, &g, NULL, &e), -1);
    CHECK_STR_CONTAINS(e.message, "3 image or video parts");
    cJSON_Delete(root);
    /* no image part: nothing to defer */
    root = request_with(cJSON_CreateArray());
    CHECK_EQ(api_images_defer(pool, NULL, NULL, &root, &g, NULL, &e), 0);
    cJSON_Delete(root);
    apireq_gen_free(&g);
    free(data);
    api_images_pool_free(pool);
}

static void put_be32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24), p[1] = (uint8_t)(v >> 16), p[2] = (uint8_t)(v >> 8), p[3] = (uint8_t)v;
}

/* A PNG whose IHDR says w x h (under the pixel limit) followed by an IDAT
 * of n_idat bytes that are not zlib data: its header reads fine, decoding
 * it fails with "bad PNG". A request refused for its size says nothing
 * about PNGs, so it was refused before decoding. Caller frees. */
static uint8_t *make_png_bomb(uint32_t w, uint32_t h, size_t n_idat, size_t *len)
{
    *len = 8 + 25 + 12 + n_idat + 12;
    uint8_t *b = calloc(1, *len);
    static const uint8_t sig[8] = { 0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n' };
    memcpy(b, sig, 8);
    uint8_t *ih = b + 8, *id = b + 33, *ie = b + 45 + n_idat;
    put_be32(ih, 13);
    memcpy(ih + 4, "IHDR", 4);
    put_be32(ih + 8, w), put_be32(ih + 12, h);
    ih[16] = 8, ih[17] = 2;
    put_be32(ih + 21, (uint32_t)crc32(0, ih + 4, 17));
    put_be32(id, (uint32_t)n_idat);
    memcpy(id + 4, "IDAT", 4);
    memset(id + 8, 0xA5, n_idat);
    put_be32(id + 8 + n_idat, (uint32_t)crc32(0, id + 4, 4 + (uInt)n_idat));
    memcpy(ie + 4, "IEND", 4);
    put_be32(ie + 8, (uint32_t)crc32(0, ie + 4, 4));
    return b;
}

struct golden_pool {
    struct vision_model *vm;
    struct vision_ctx *vc;
    struct api_images_pool *pool;
};

static int golden_pool_open(struct golden_pool *gp, const struct api_images_params *prm)
{
    char err[256];
    memset(gp, 0, sizeof *gp);
    gp->vm = vision_model_load(test_golden("vision-llava-mmproj-f32.gguf"), err, sizeof err);
    if (!gp->vm)
        return -1;
    gp->vc = vision_ctx_new(gp->vm, NULL, err, sizeof err);
    gp->pool = gp->vc ? api_images_pool_new(gp->vm, gp->vc, NULL, prm, err, sizeof err) : NULL;
    return gp->pool ? 0 : -1;
}

static void golden_pool_close(struct golden_pool *gp)
{
    api_images_pool_free(gp->pool);
    vision_ctx_free(gp->vc);
    vision_model_free(gp->vm);
}

/* Issue 7.8: 32 near-limit PNG bombs took a minute of decoding before the
 * context check refused them. Their headers are enough to know that 32
 * images need more rows than the context has: refused before decoding. */
TEST(images_api_context_budget_from_headers)
{
    struct api_images_params prm = api_images_default_params();
    prm.n_workers = 1;
    struct golden_pool gp;
    if (golden_pool_open(&gp, &prm) < 0) {
        golden_pool_close(&gp);
        SKIP("no golden vision fixture (make golden-fixtures)");
    }
    const int rows = vision_model_info(gp.vm)->tokens_per_image;
    size_t len;
    uint8_t *bomb = make_png_bomb(7000, 7000, 4096, &len); /* 49 M pixels: under the limit */
    cJSON *parts = cJSON_CreateArray();
    for (int i = 0; i < 32; i++)
        add_data_url(parts, "image_url", "image/png", bomb, len);
    free(bomb);
    cJSON *root = request_with(parts);
    struct apireq_gen g;
    apireq_gen_init(&g);
    struct api_images im;
    struct api_error e = { 0 };
    int rc = api_images_take(gp.pool, root, 32 * rows - 1, &g, NULL, NULL, &im, &e);
    api_images_free(&im);
    CHECK_EQ(rc, -1);
    CHECK_EQ(e.status, 400);
    CHECK_STR_EQ(e.code, "context_length_exceeded");
    CHECK_STR_CONTAINS(e.message, "the 32 images");
    CHECK_MSG(strstr(e.message, "PNG") == NULL, "decoded: %s", e.message);
    /* with max_tokens, the completion's share counts too */
    g.max_tokens = 100, g.max_tokens_set = true;
    rc = api_images_take(gp.pool, root, 32 * rows + 99, &g, NULL, NULL, &im, &e);
    api_images_free(&im);
    CHECK_EQ(rc, -1);
    CHECK_STR_EQ(e.param, "max_tokens");
    CHECK_STR_EQ(e.code, "context_length_exceeded");
    /* room for them: the first pass passes and decoding fails on the bad data */
    rc = api_images_take(gp.pool, root, 32 * rows + 100, &g, NULL, NULL, &im, &e);
    api_images_free(&im);
    CHECK_EQ(rc, -1);
    CHECK_STR_CONTAINS(e.message, "bad PNG");
    CHECK_STR_EQ(e.param, "messages[0].content[0]");
    cJSON_Delete(root);
    /* over the pixel limit: refused from the header */
    bomb = make_png_bomb(20000, 20000, 16, &len);
    parts = cJSON_CreateArray();
    add_data_url(parts, "image_url", "image/png", bomb, len);
    free(bomb);
    root = request_with(parts);
    rc = api_images_take(gp.pool, root, 0, &g, NULL, NULL, &im, &e);
    api_images_free(&im);
    CHECK_EQ(rc, -1);
    CHECK_EQ(e.status, 400);
    CHECK_STR_CONTAINS(e.message, "20000x20000");
    cJSON_Delete(root);
    apireq_gen_free(&g);
    golden_pool_close(&gp);
}

/* The fixture picture goes through: encoded, its part replaced by the
 * model's marker; a second copy past max_request_media_bytes is a 413. */
TEST(images_api_encodes_and_bounds_request_bytes)
{
    size_t len;
    char *png = test_read_file(test_fixture("vision/image.png"), &len);
    CHECK(png);
    struct api_images_params prm = api_images_default_params();
    prm.n_workers = 1;
    prm.max_request_media_bytes = len + len / 2;
    struct golden_pool gp;
    if (golden_pool_open(&gp, &prm) < 0) {
        golden_pool_close(&gp);
        free(png);
        SKIP("no golden vision fixture (make golden-fixtures)");
    }
    cJSON *parts = cJSON_CreateArray();
    add_data_url(parts, "input_image", "image/png", png, len);
    cJSON *root = request_with(parts);
    struct apireq_gen g;
    apireq_gen_init(&g);
    struct api_images im;
    struct api_error e = { 0 };
    int rc = api_images_take(gp.pool, root, 4096, &g, NULL, NULL, &im, &e);
    CHECK_MSG(rc == 1, "rc %d: %s", rc, e.message);
    CHECK_EQ(im.n, 1);
    CHECK_EQ(im.e[0].n_tokens, vision_model_info(gp.vm)->tokens_per_image);
    api_images_free(&im);
    cJSON *part0 = cJSON_GetArrayItem(parts, 0);
    CHECK_STR_EQ(cJSON_GetObjectItem(part0, "type")->valuestring, "text");
    CHECK_STR_EQ(cJSON_GetObjectItem(part0, "text")->valuestring, vision_image_marker(gp.vm));
    cJSON_Delete(root);
    parts = cJSON_CreateArray();
    add_data_url(parts, "image_url", "image/png", png, len);
    add_data_url(parts, "image_url", "image/png", png, len);
    root = request_with(parts);
    rc = api_images_take(gp.pool, root, 4096, &g, NULL, NULL, &im, &e);
    api_images_free(&im);
    CHECK_EQ(rc, -1);
    CHECK_EQ(e.status, 413);
    CHECK_STR_EQ(e.param, "messages[0].content[1]");
    cJSON_Delete(root);
    apireq_gen_free(&g);
    free(png);
    golden_pool_close(&gp);
}

/* Cancelled once the encode queue's thread has polled `after` times (the
 * request's own polls only look). */
struct take_cancel {
    pthread_t caller;
    atomic_int encoder_polls;
    int after;
};
static int take_cancel_fn(void *user)
{
    struct take_cancel *c = user;
    if (!pthread_equal(pthread_self(), c->caller))
        return atomic_fetch_add(&c->encoder_polls, 1) + 1 > c->after;
    return atomic_load(&c->encoder_polls) > c->after;
}

/* Three pictures through the encode queue: a client that leaves in the
 * middle of the encode gets a 499 with nothing left allocated (ASan), the
 * next request gets all three, and a repeat is answered by the cache. */
TEST(images_api_cancel_mid_encode_then_cache)
{
    size_t len;
    char *png = test_read_file(test_fixture("vision/image.png"), &len);
    CHECK(png);
    char err[256];
    struct api_images_params prm = api_images_default_params();
    prm.n_workers = 1;
    struct golden_pool gp = { 0 };
    struct vision_cache *cache = vision_cache_new((size_t)64 << 20);
    gp.vm = vision_model_load(test_golden("vision-llava-mmproj-f32.gguf"), err, sizeof err);
    gp.vc = gp.vm ? vision_ctx_new(gp.vm, NULL, err, sizeof err) : NULL;
    gp.pool = gp.vc ? api_images_pool_new(gp.vm, gp.vc, cache, &prm, err, sizeof err) : NULL;
    if (!gp.pool) {
        golden_pool_close(&gp);
        vision_cache_free(cache);
        free(png);
        SKIP("no golden vision fixture (make golden-fixtures)");
    }
    struct apireq_gen g;
    apireq_gen_init(&g);
    struct api_images im;
    struct api_error e = { 0 };
    for (int round = 0; round < 3; round++) {
        cJSON *parts = cJSON_CreateArray();
        for (int i = 0; i < 3; i++)
            add_data_url(parts, "image_url", "image/png", png, len);
        cJSON *root = request_with(parts);
        struct take_cancel tc = { .caller = pthread_self(), .after = 1 };
        int rc = api_images_take(gp.pool, root, 0, &g, round ? NULL : take_cancel_fn, &tc, &im, &e);
        if (round == 0) {
            CHECK_EQ(rc, -1);
            CHECK_EQ(e.status, 499);
            CHECK(atomic_load(&tc.encoder_polls) >= 2); /* it did start encoding */
        } else {
            CHECK_MSG(rc == 3, "round %d: rc %d: %s", round, rc, e.message);
            CHECK_EQ(im.n, 3);
            for (int i = 0; i < 3; i++)
                CHECK(im.e[i].data && im.e[i].n_tokens == vision_model_info(gp.vm)->tokens_per_image &&
                      im.e[i].key_hash == im.e[0].key_hash);
        }
        api_images_free(&im);
        cJSON_Delete(root);
    }
    /* round 1 encoded three misses, round 2 hit the cache three times */
    struct vision_cache_stats st = vision_cache_stats(cache);
    CHECK_MSG(st.hits == 3, "cache hits %llu", (unsigned long long)st.hits);
    apireq_gen_free(&g);
    free(png);
    golden_pool_close(&gp);
    vision_cache_free(cache);
}

/* A clip's frames count against --max-images from its header (4 s at the
 * default 1 fps: 4 frames), before any frame is sampled. */
TEST(images_api_video_frames_counted_before_sampling)
{
    SKIP_IF_NO_SHARED();
    size_t len;
    char *mp4 = test_read_file(test_shared("video/sample.mp4"), &len);
    CHECK(mp4);
    struct api_images_params prm = api_images_default_params();
    prm.n_workers = 1;
    prm.max_images = 3;
    struct golden_pool gp;
    if (golden_pool_open(&gp, &prm) < 0) {
        golden_pool_close(&gp);
        free(mp4);
        SKIP("no golden vision fixture (make golden-fixtures)");
    }
    cJSON *parts = cJSON_CreateArray();
    add_data_url(parts, "video_url", "video/mp4", mp4, len);
    cJSON *root = request_with(parts);
    struct apireq_gen g;
    apireq_gen_init(&g);
    struct api_images im;
    struct api_error e = { 0 };
    int rc = api_images_take(gp.pool, root, 0, &g, NULL, NULL, &im, &e);
    CHECK_EQ(rc, -1);
    CHECK_EQ(im.n, 0);
    api_images_free(&im);
    CHECK_EQ(e.status, 400);
    CHECK_STR_CONTAINS(e.message, "more than 3 images or video frames");
    /* with room for them, the clip is sampled into 4 images */
    api_images_pool_free(gp.pool);
    prm.max_images = 4;
    char err[256];
    gp.pool = api_images_pool_new(gp.vm, gp.vc, NULL, &prm, err, sizeof err);
    CHECK(gp.pool);
    rc = api_images_take(gp.pool, root, 0, &g, NULL, NULL, &im, &e);
    CHECK_MSG(rc == 1, "rc %d: %s", rc, e.message);
    CHECK_EQ(im.n, 4);
    api_images_free(&im);
    cJSON_Delete(root);
    apireq_gen_free(&g);
    free(mp4);
    golden_pool_close(&gp);
}

static int is_private(const char *addr)
{
    struct sockaddr_storage ss;
    memset(&ss, 0, sizeof ss);
    struct sockaddr_in *v4 = (struct sockaddr_in *)&ss;
    struct sockaddr_in6 *v6 = (struct sockaddr_in6 *)&ss;
    if (inet_pton(AF_INET, addr, &v4->sin_addr) == 1)
        v4->sin_family = AF_INET;
    else if (inet_pton(AF_INET6, addr, &v6->sin6_addr) == 1)
        v6->sin6_family = AF_INET6;
    else
        return -1;
    return download_addr_is_private((const struct sockaddr *)&ss);
}

/* Issue 7.8: ::127.0.0.1 (IPv4-compatible) passed the filter; every IPv6
 * form that carries an IPv4 address is checked by that address now. */
TEST(images_api_private_address_filter)
{
    static const char *const private_[] = {
        "127.0.0.1", "10.1.2.3", "172.16.0.1", "192.168.1.1", "169.254.169.254", "100.64.0.1",
        "0.0.0.0", "224.0.0.1", "255.255.255.255", "198.18.0.1", "192.0.0.8",
        "::", "::1", "::127.0.0.1", "::8.8.8.8", "::ffff:127.0.0.1", "::ffff:10.0.0.1",
        "::ffff:169.254.169.254", "::ffff:0:127.0.0.1", "64:ff9b::127.0.0.1", "64:ff9b::10.0.0.1",
        "64:ff9b:1::8.8.8.8", "2002:7f00:1::1", "2002:c0a8:101::", "fe80::1", "febf::1",
        "fec0::1", "fc00::1", "fd12:3456::1", "ff02::1", "100::1",
        "2001:0:4136:e378:8000:63bf:80ff:fffe", /* Teredo, client 127.0.0.1 */
        "2001:0:7f00:1::1",                      /* Teredo, server 127.0.0.1 */
    };
    static const char *const public_[] = {
        "8.8.8.8", "1.1.1.1", "93.184.216.34", "::ffff:8.8.8.8", "64:ff9b::8.8.8.8",
        "2002:808:808::1", "2001:4860:4860::8888", "2606:4700:4700::1111", "2a00:1450::1",
    };
    for (size_t i = 0; i < sizeof private_ / sizeof *private_; i++)
        CHECK_MSG(is_private(private_[i]) == 1, "%s passed the filter", private_[i]);
    for (size_t i = 0; i < sizeof public_ / sizeof *public_; i++)
        CHECK_MSG(is_private(public_[i]) == 0, "%s was refused", public_[i]);
    struct sockaddr sa = { .sa_family = AF_UNIX };
    CHECK(download_addr_is_private(&sa));
}

/* Qwen2.5-VL takes a clip as temporal patches of two frames: the 4 frames
 * sampled from sample.mp4 become 2 temporal patches (counted as 2 images
 * against --max-images), one video of one marker; a repeat comes from the
 * vision cache without decoding; the part's fps / max_frames choose the
 * frames. */
TEST(images_api_qwen_video_as_frame_pairs)
{
    SKIP_IF_NO_SHARED();
    size_t len;
    char *mp4 = test_read_file(test_shared("video/sample.mp4"), &len);
    CHECK(mp4);
    char err[256];
    struct api_images_params prm = api_images_default_params();
    prm.n_workers = 1;
    prm.max_images = 2;
    struct golden_pool gp = { 0 };
    struct vision_cache *cache = vision_cache_new((size_t)64 << 20);
    gp.vm = vision_model_load(test_golden("vision-qwen2_5_vl-mmproj-f32.gguf"), err, sizeof err);
    gp.vc = gp.vm ? vision_ctx_new(gp.vm, NULL, err, sizeof err) : NULL;
    gp.pool = gp.vc ? api_images_pool_new(gp.vm, gp.vc, cache, &prm, err, sizeof err) : NULL;
    if (!gp.pool) {
        golden_pool_close(&gp);
        vision_cache_free(cache);
        free(mp4);
        SKIP("no golden qwen2_5_vl fixture (make golden-fixtures)");
    }
    struct apireq_gen g;
    apireq_gen_init(&g);
    for (int round = 0; round < 2; round++) {
        cJSON *parts = cJSON_CreateArray();
        add_data_url(parts, "video_url", "video/mp4", mp4, len);
        cJSON *root = request_with(parts);
        struct api_images im;
        struct api_error e = { 0 };
        int rc = api_images_take(gp.pool, root, 0, &g, NULL, NULL, &im, &e);
        CHECK_MSG(rc == 1, "rc %d: %s", rc, e.message);
        /* one video of two temporal patches, about 2 s each at 1 fps: 4 temporal ids apart */
        CHECK_EQ(im.n, 1);
        CHECK(im.e[0].data && im.e[0].grid_t == 2 && fabsf(im.e[0].t_step - 4.0f) < 0.5f &&
              im.e[0].n_tokens > 0 && im.e[0].n_tokens == 2 * im.e[0].tile_rows * im.e[0].tile_cols);
        const char *text = cJSON_GetObjectItem(cJSON_GetArrayItem(parts, 0), "text")->valuestring;
        CHECK_STR_EQ(text, vision_image_marker(gp.vm));
        api_images_free(&im);
        cJSON_Delete(root);
    }
    CHECK_EQ(vision_cache_stats(cache).hits, 2);
    /* "fps": 0.5 in the video_url object: 2 frames, one pair; bad controls are a 400 */
    const char *bad[][2] = { { "fps", "0" }, { "fps", "\"2\"" }, { "max_frames", "1.5" }, { "max_frames", "3" } };
    for (int k = -1; k < 4; k++) {
        cJSON *parts = cJSON_CreateArray();
        add_data_url(parts, "video_url", "video/mp4", mp4, len);
        cJSON *vu = cJSON_GetObjectItem(cJSON_GetArrayItem(parts, 0), "video_url");
        if (k < 0)
            cJSON_AddNumberToObject(vu, "fps", 0.5);
        else
            cJSON_AddItemToObject(vu, bad[k][0], cJSON_Parse(bad[k][1]));
        cJSON *root = request_with(parts);
        struct api_images im;
        struct api_error e = { 0 };
        int rc = api_images_take(gp.pool, root, 0, &g, NULL, NULL, &im, &e);
        if (k < 0) {
            CHECK_MSG(rc == 1 && im.n == 1 && im.e[0].grid_t == 1, "fps 0.5: rc %d, %d images: %s", rc,
                      im.n, e.message);
        } else {
            CHECK_MSG(rc == -1 && e.status == 400 && strstr(e.message, bad[k][0]), "%s %s: rc %d %s",
                      bad[k][0], bad[k][1], rc, e.message);
        }
        api_images_free(&im);
        cJSON_Delete(root);
    }
    apireq_gen_free(&g);
    free(mp4);
    golden_pool_close(&gp);
    vision_cache_free(cache);
}
