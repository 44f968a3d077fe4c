/* test_qwen2vl.c - the Qwen2.5-VL vision tower against the tiny Hugging Face
 * Qwen2_5_VLForConditionalGeneration of tests/fixtures/vision/qwen2_5_vl
 * (tools/make_vision_golden.py, converted by tools/hf_mmproj_to_gguf.py into
 * $OMNI_GOLDEN_DIR): smart_resize sizes, pixel values and patch order of the
 * processor, the last ViT block's output (window order), the merged
 * features of two pictures of different grids, the prompt layout; the
 * window order; broken files. */
#define _GNU_SOURCE /* memmem */
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "llm/model.h"
#include "src/api/apireq.h"
#include "src/api/images.h"
#include "src/engine/engine.h"
#include "media/image.h"
#include "src/core/gguf.h"
#include "src/core/matmul.h"
#include "src/core/omni.h"
#include "src/core/tensor.h"
#include "src/core/threadpool.h"
#include "test.h"
#include "tests/qwen_golden.h"
#include "vision/qwen2vl.h"
#include "vision/vision.h"

#define QDIR "vision/qwen2_5_vl/"
#define QGGUF "vision-qwen2_5_vl-mmproj-f32.gguf"

TEST(qwen2vl_smart_resize_matches_processor)
{
    /* w, h, min, max -> the processor's size (Qwen2VLImageProcessor's
     * smart_resize evaluated in Python) */
    static const int64_t cases[][6] = {
        { 160, 96, 3136, 50176, 168, 84 },      { 160, 96, 3136, 6272, 84, 56 },
        { 100, 60, 3136, 50176, 112, 56 },      { 20, 20, 3136, 50176, 56, 56 },
        { 70, 42, 3136, 50176, 56, 56 },        /* 2.5 and 1.5 round to 2 */
        { 1000, 10, 3136, 1003520, 560, 28 },   { 3000, 2000, 3136, 12845056, 2996, 1988 },
        { 3000, 2000, 6272, 3211264, 2184, 1456 }, { 1920, 1080, 3136, 1003520, 1316, 728 },
        { 29, 4000, 3136, 1003520, 28, 4004 },  { 640, 480, 200704, 1003520, 644, 476 },
    };
    char err[256];
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        int rw = 0, rh = 0;
        CHECK_EQ(vision_smart_resize((int)cases[i][0], (int)cases[i][1], 28, cases[i][2], cases[i][3], &rw,
                                     &rh, err, sizeof err), 0);
        CHECK_MSG(rw == cases[i][4] && rh == cases[i][5], "%lldx%lld -> %dx%d, want %lldx%lld",
                  (long long)cases[i][0], (long long)cases[i][1], rw, rh, (long long)cases[i][4],
                  (long long)cases[i][5]);
    }
    int rw, rh;
    CHECK(vision_smart_resize(2010, 10, 28, 3136, 1003520, &rw, &rh, err, sizeof err) < 0);
    CHECK_STR_CONTAINS(err, "aspect ratio");
    CHECK(vision_smart_resize(0, 10, 28, 3136, 1003520, &rw, &rh, err, sizeof err) < 0);
}

TEST(qwen2vl_window_order_as_reference)
{
    /* 3 x 6 merged units, windows of 4 x 4: a full-height window of 3 x 4
     * then the 3 x 2 rest */
    int order[18], seg[19], n_seg;
    qwen2vl_window_order(3, 6, 4, order, seg, &n_seg);
    static const int want[18] = { 0, 1, 2, 3, 6, 7, 8, 9, 12, 13, 14, 15, 4, 5, 10, 11, 16, 17 };
    CHECK_EQ(n_seg, 2);
    CHECK(seg[0] == 0 && seg[1] == 12 && seg[2] == 18);
    CHECK(!memcmp(order, want, sizeof want));
    /* 9 x 9: windows 4 x 4, 4 x 4, 4 x 1, ..., the last 1 x 1 */
    int o2[81], s2[82];
    qwen2vl_window_order(9, 9, 4, o2, s2, &n_seg);
    CHECK_EQ(n_seg, 9);
    CHECK(s2[1] == 16 && s2[3] == 36 && s2[9] == 81 && o2[80] == 80 && o2[16] == 4);
}

static struct vision_model *load_qwen(void)
{
    char err[256];
    struct vision_model *m = vision_model_load(test_golden(QGGUF), err, sizeof err);
    if (!m)
        fprintf(stderr, "    %s\n", err);
    return m;
}

/* The processor's pixel values are [n][3][2][14][14] with the frame
 * repeated; ours [n][3][14][14]: compare against both frames. */
static double pixel_diff(const float *ours, const float *ref, int n, int P)
{
    double d = 0;
    const int K = P * P;
    for (int r = 0; r < n; r++)
        for (int c = 0; c < 3; c++)
            for (int t = 0; t < 2; t++)
                for (int i = 0; i < K; i++) {
                    double e = ours[((size_t)r * 3 + c) * K + i] - ref[(((size_t)r * 3 + c) * 2 + t) * K + i];
                    d = e > d ? e : -e > d ? -e : d;
                }
    return d;
}

static void check_picture(struct vision_model *m, const char *png, const int grid[3], const char *pix_bin,
                          const char *feat_bin)
{
    char err[256];
    const struct vision_info *in = vision_model_info(m);
    struct media_image img;
    CHECK_EQ(media_image_decode_file(test_fixture(png), NULL, &img, err, sizeof err), 0);
    float *pix;
    int n, gh, gw;
    CHECK_EQ(vision_preprocess(m, &img, true, &pix, &n, &gh, &gw, err, sizeof err), 0);
    CHECK(n == 1 && gh == grid[1] && gw == grid[2]);
    CHECK_EQ(vision_image_tokens(m, img.width, img.height, true, err, sizeof err), gh * gw / 4);
    const int P = in->patch_size;
    float *ref = test_read_floats(test_fixture(pix_bin), (size_t)gh * gw * 3 * 2 * P * P);
    CHECK(ref);
    double dp = pixel_diff(pix, ref, gh * gw, P);
    printf("    %s: grid %dx%d, pixels max diff %.3g\n", png, gh, gw, dp);
    CHECK_MSG(dp < 1e-5, "pixels differ by %g", dp);

    // the whole path: vision_encode_image on 2 threads
    char e2[256];
    struct tpool *tp = tpool_new(2, e2, sizeof e2);
    struct vision_ctx *vc = vision_ctx_new(m, tp, err, sizeof err);
    CHECK(tp && vc);
    struct vision_embd e;
    CHECK_EQ(vision_encode_image(vc, &img, true, &e, err, sizeof err), 0);
    CHECK(e.n_tokens == gh * gw / 4 && e.n_embd == in->n_embd_lm);
    float *fref = test_read_floats(test_fixture(feat_bin), (size_t)e.n_tokens * e.n_embd);
    CHECK(fref);
    double scale = 0;
    for (size_t i = 0; i < (size_t)e.n_tokens * e.n_embd; i++)
        scale = fabs(fref[i]) > scale ? fabs(fref[i]) : scale;
    double df = test_max_diff(e.data, fref, (size_t)e.n_tokens * e.n_embd);
    printf("    %s: features max diff %.3g (max |ref| %.3g)\n", png, df, scale);
    CHECK_MSG(df < 1e-4 * (scale > 1 ? scale : 1), "features differ by %g", df);

    // layout: <|vision_start|> rows <|vision_end|>
    struct vision_layout lay;
    CHECK_EQ(vision_layout_build(m, &e, &lay, err, sizeof err), 0);
    CHECK_EQ(lay.n, 3);
    CHECK_STR_EQ(lay.seg[0].text, "<|vision_start|>");
    CHECK(!lay.seg[1].text && lay.seg[1].row0 == 0 && lay.seg[1].n_rows == e.n_tokens);
    CHECK_STR_EQ(lay.seg[2].text, "<|vision_end|>");
    vision_layout_release(&lay);
    vision_embd_release(&e);
    vision_ctx_free(vc);
    tpool_free(tp);
    free(fref);
    free(ref);
    free(pix);
    media_image_release(&img);
}

TEST(qwen2vl_matches_reference)
{
    struct vision_model *m = load_qwen();
    CHECK(m);
    size_t len;
    char *js = test_read_file(test_fixture(QDIR "reference.json"), &len);
    CHECK(js);
    int grids[6], small[3];
    CHECK_EQ(qgold_json_ints(js, "grid_thw", grids, 6), 6);
    CHECK_EQ(qgold_json_ints(js, "grid_thw_small", small, 3), 3);
    free(js);
    const struct vision_info *in = vision_model_info(m);
    CHECK(in->family == VISION_QWEN2VL && in->merge_size == 2);
    CHECK_STR_EQ(vision_image_marker(m), "<|vision_start|><|image_pad|><|vision_end|>");
    // the processor with max_pixels 28*28*8 on the first picture
    int rw, rh;
    char err[256];
    CHECK_EQ(vision_smart_resize(160, 96, 28, in->min_pixels, 28 * 28 * 8, &rw, &rh, err, sizeof err), 0);
    CHECK(rh / 14 == small[1] && rw / 14 == small[2]);
    check_picture(m, QDIR "../image.png", grids, QDIR "pixels.bin", QDIR "features.bin");
    check_picture(m, QDIR "image2.png", grids + 3, QDIR "pixels2.bin", QDIR "features2.bin");
    vision_model_free(m);
}

/* The last block's output in window order (what the merger reads) on the
 * reference's own pixel values: narrows a features mismatch to the ViT or
 * the merger. */
TEST(qwen2vl_vit_output_matches_reference)
{
    char err[256];
    size_t len;
    char *js = test_read_file(test_fixture(QDIR "reference.json"), &len);
    CHECK(js);
    int grid[6];
    CHECK_EQ(qgold_json_ints(js, "grid_thw", grid, 6), 6);
    free(js);
    struct gguf *g = gguf_open(test_golden(QGGUF), err, sizeof err);
    CHECK(g);
    struct vision_info info = { 0 };
    struct qwen2vl_model *q = qwen2vl_load(g, QGGUF, &info, err, sizeof err);
    CHECK(q);
    const int n = grid[1] * grid[2], P = info.patch_size, K = 3 * P * P;
    float *ref = test_read_floats(test_fixture(QDIR "pixels.bin"), (size_t)n * 2 * K);
    float *vit_ref = test_read_floats(test_fixture(QDIR "vit_out.bin"), (size_t)n * info.n_embd);
    float *pix = malloc(sizeof(float) * n * K), *vit = malloc(sizeof(float) * n * info.n_embd);
    CHECK(ref && vit_ref && pix && vit);
    for (int r = 0; r < n; r++) /* frame 0 of each [3][2][P][P] row */
        for (int c = 0; c < 3; c++)
            memcpy(pix + (size_t)r * K + c * P * P, ref + (size_t)r * 2 * K + c * 2 * P * P,
                   sizeof(float) * P * P);
    struct vision_embd e;
    CHECK_EQ(qwen2vl_encode(q, NULL, pix, grid[1], grid[2], vit, &e, err, sizeof err), 0);
    double d = test_max_diff(vit, vit_ref, (size_t)n * info.n_embd);
    printf("    last block output max diff %.3g\n", d);
    CHECK_MSG(d < 1e-3, "ViT output differs by %g", d);
    vision_embd_release(&e);
    /* odd or tiny grids are refused, not read past */
    CHECK(qwen2vl_encode(q, NULL, pix, 3, 4, NULL, &e, err, sizeof err) < 0);
    CHECK(qwen2vl_encode(q, NULL, pix, 0, 4, NULL, &e, err, sizeof err) < 0);
    free(pix), free(vit), free(ref), free(vit_ref);
    qwen2vl_free(q);
    gguf_free(g);
}

/* A file with its window pattern key or a block tensor gone, or cut short
 * anywhere, fails with the file and the field named. */
TEST(qwen2vl_rejects_broken_mmproj)
{
    const struct qgold_edit edits[] = {
        { "clip.vision.n_wa_pattern", "n_wa_pattern", 14 },
        { "v.blk.2.ffn_gate.weight", "v.blk.2.ffn_gate.weight", 8 },
        { "v.patch_embd.weight.1", "v.patch_embd.weight.1", 2 },
    };
    qgold_broken_mmproj(QGGUF, "broken-qwen-mmproj.gguf", edits, 3);
}

/* M-RoPE ids of the reference's two-image prompt = the position_ids its
 * language model received; runs that do not match the grids fail. */
TEST(qwen2vl_mrope_positions_match_reference)
{
    char err[256];
    size_t len;
    char *js = test_read_file(test_fixture(QDIR "reference.json"), &len);
    CHECK(js);
    int ids_i[512], grid[6], img_tok[1];
    int n = qgold_json_ints(js, "ids", ids_i, 512);
    CHECK(n > 0 && n < 512);
    CHECK_EQ(qgold_json_ints(js, "grid_thw", grid, 6), 6);
    const char *p = strstr(js, "\"image_token_id\": ");
    CHECK(p);
    img_tok[0] = atoi(p + 18);
    free(js);
    int32_t ids[512], *pos = malloc(sizeof(int32_t) * 3 * n);
    for (int i = 0; i < n; i++)
        ids[i] = ids_i[i];
    const int grids[2][2] = { { grid[1] / 2, grid[2] / 2 }, { grid[4] / 2, grid[5] / 2 } };
    int32_t *ref = (int32_t *)test_read_file(test_fixture(QDIR "positions.bin"), &len);
    CHECK(ref && pos);
    CHECK_EQ(len, sizeof(int32_t) * 3 * n);
    int next = qwen2vl_mrope_positions(ids, n, img_tok[0], grids, 2, pos, err, sizeof err);
    CHECK(next > 0);
    for (int i = 0; i < 3 * n; i++)
        CHECK_MSG(pos[i] == ref[i], "axis %d token %d: %d, reference %d", i / n, i % n, pos[i], ref[i]);
    CHECK_EQ(next, pos[n - 1] + 1); /* the prompt ends in text */
    const int wrong[2][2] = { { grids[0][0], grids[0][1] + 1 }, { grids[1][0], grids[1][1] } };
    CHECK(qwen2vl_mrope_positions(ids, n, img_tok[0], wrong, 2, pos, err, sizeof err) < 0);
    CHECK(qwen2vl_mrope_positions(ids, n, img_tok[0], grids, 1, pos, err, sizeof err) < 0);
    free(pos);
    free(ref);
}

/* The F16 conversion (matrices rounded to half precision) stays close. */
TEST(qwen2vl_f16_close_to_reference)
{
    char err[256];
    struct vision_model *m = vision_model_load(test_golden("vision-qwen2_5_vl-mmproj-f16.gguf"), err, sizeof err);
    CHECK_MSG(m, "%s", err);
    struct media_image img;
    CHECK_EQ(media_image_decode_file(test_fixture("vision/image.png"), NULL, &img, err, sizeof err), 0);
    struct vision_ctx *vc = vision_ctx_new(m, NULL, err, sizeof err);
    CHECK(vc);
    struct vision_embd e;
    CHECK_EQ(vision_encode_image(vc, &img, true, &e, err, sizeof err), 0);
    float *ref = test_read_floats(test_fixture(QDIR "features.bin"), (size_t)e.n_tokens * e.n_embd);
    CHECK(ref);
    double scale = 0, d = test_max_diff(e.data, ref, (size_t)e.n_tokens * e.n_embd);
    for (size_t i = 0; i < (size_t)e.n_tokens * e.n_embd; i++)
        scale = fabs(ref[i]) > scale ? fabs(ref[i]) : scale;
    printf("    f16: features max diff %.3g (max |ref| %.3g)\n", d, scale);
    CHECK_MSG(d < 2e-2 * (scale > 1 ? scale : 1), "f16 features differ by %g", d);
    free(ref);
    vision_embd_release(&e);
    vision_ctx_free(vc);
    media_image_release(&img);
    vision_model_free(m);
}

/* The language side: the reference prompt laid out by vision_prompt_build
 * (its ids = the processor's), both pictures' rows fused, M-RoPE ids from
 * qwen2vl_mrope_positions -> the qwen2vl LM's logits = the reference's;
 * then greedy decoding (rotary ids continuing from one past the largest)
 * gives the reference's tokens. */
TEST(qwen2vl_fused_logits_and_greedy_match_reference)
{
    char err[256];
    struct qgold_ref r;
    CHECK(qgold_ref_load(&r, QDIR "reference.json") && r.n_grid == 6);
    struct vision_model *vm = load_qwen();
    CHECK(vm);
    struct llm_model *lm = llm_model_load(test_golden("vision-qwen2_5_vl-lm-f32.gguf"), NULL, err, sizeof err);
    CHECK_MSG(lm, "%s", err);
    const struct llm_hparams *hp = llm_model_hparams(lm);
    CHECK(hp->arch == LLM_ARCH_QWEN2VL && hp->rope_sections[0] == 2 && hp->rope_sections[1] == 3);
    struct qgold_pictures pics;
    qgold_pictures(&pics, vm, lm, QDIR "image2.png", &r);
    if (test_failed_now())
        return;
    struct qgold_lm s;
    qgold_lm_rows(&s, lm, &pics.vp, &r);
    if (test_failed_now())
        return;
    const int n = s.n, V = s.V;
    const int grids[2][2] = { { r.grid[1] / 2, r.grid[2] / 2 }, { r.grid[4] / 2, r.grid[5] / 2 } };
    int next = qwen2vl_mrope_positions(s.ids, n, r.image_token, grids, 2, s.rp, err, sizeof err);
    CHECK_MSG(next > 0, "%s", err);
    float *ref = test_read_floats(test_fixture(QDIR "logits.bin"), (size_t)n * V);
    CHECK(ref);
    /* without the M-RoPE ids (plain positions) the logits after the first image differ */
    qgold_lm_prefill(&s, NULL, NULL);
    CHECK(!test_failed_now() && test_max_diff(s.logits, ref, (size_t)n * V) > 1e-3);
    qgold_lm_prefill(&s, NULL, s.rp);
    double d = test_max_diff(s.logits, ref, (size_t)n * V);
    printf("    fused logits max diff %.3g over %d positions\n", d, n);
    CHECK_MSG(d < 1e-3, "logits differ by %g", d);
    // greedy: one token at a time, rotary ids next, next + 1, ...
    qgold_lm_greedy(&s, &r, next, 1e-3);
    if (test_failed_now())
        return;
    free(ref);
    qgold_lm_free(&s);
    qgold_pictures_free(&pics);
    llm_model_free(lm);
    vision_model_free(vm);
}

// ---- through the engine ---------------------------------------------------------

/* The same prompt as engine segments (vision_prompt_build's parts with
 * their grids): the engine's M-RoPE ids give the reference's greedy tokens,
 * with prefill chunks that cut through the images, and again from the
 * prefix cache. */
TEST(qwen2vl_engine_greedy_matches_reference)
{
    char err[256];
    struct qgold_ref r;
    CHECK(qgold_ref_load(&r, QDIR "reference.json"));
    struct vision_model *vm = load_qwen();
    CHECK(vm);
    struct llm_model *lm = llm_model_load(test_golden("vision-qwen2_5_vl-lm-f32.gguf"), NULL, err, sizeof err);
    CHECK_MSG(lm, "%s", err);
    struct qgold_pictures pics;
    qgold_pictures(&pics, vm, lm, QDIR "image2.png", &r);
    if (test_failed_now())
        return;
    int grids = 0;
    for (int i = 0; i < pics.vp.n_parts; i++)
        grids += pics.vp.parts[i].grid_rows > 0;
    CHECK_EQ(grids, 2);
    qgold_engine_twice(lm, "qwen2vl", &pics.vp, 20 /* prefill chunks end inside the images */, &r);
    if (test_failed_now())
        return;
    qgold_pictures_free(&pics);
    llm_model_free(lm);
    vision_model_free(vm);
}

/* Polls of a cancel callback: nonzero from the limit-th on. */
struct cancel_after {
    int polls, limit;
};
static int cancel_after_fn(void *user)
{
    struct cancel_after *c = user;
    return ++c->polls >= c->limit;
}

/* Both pictures in one pass (rows concatenated, attention per image) give
 * what each gives alone, and the reference's features; a pass cancelled
 * between blocks fails cleanly (nothing left allocated: ASan) and the
 * next one works. */
TEST(qwen2vl_batch_matches_single_and_cancels)
{
    struct vision_model *m = load_qwen();
    CHECK(m);
    char err[256];
    const char *png[2] = { QDIR "../image.png", QDIR "image2.png" };
    const char *feat[2] = { QDIR "features.bin", QDIR "features2.bin" };
    struct media_image img[2];
    float *pix[2];
    struct vision_input in[3];
    for (int i = 0; i < 2; i++) {
        int n;
        CHECK_EQ(media_image_decode_file(test_fixture(png[i]), NULL, &img[i], err, sizeof err), 0);
        CHECK_EQ(vision_preprocess(m, &img[i], true, &pix[i], &n, &in[i].tile_rows, &in[i].tile_cols,
                                   err, sizeof err), 0);
        in[i].pixels = pix[i], in[i].n_images = n, in[i].frames = 1;
    }
    in[2] = in[0]; /* the first again: a pass of three images of two shapes */
    struct tpool *tp = tpool_new(2, err, sizeof err);
    struct vision_ctx *vc = vision_ctx_new(m, tp, err, sizeof err);
    CHECK(tp && vc);
    struct vision_embd outs[3], one;
    CHECK_EQ(vision_encode_batch(vc, in, 3, NULL, NULL, outs, err, sizeof err), 0);
    for (int i = 0; i < 3; i++) {
        CHECK_EQ(vision_encode_image(vc, &img[i % 2], true, &one, err, sizeof err), 0);
        CHECK(outs[i].n_tokens == one.n_tokens && outs[i].n_embd == one.n_embd &&
              outs[i].tile_rows == one.tile_rows && outs[i].tile_cols == one.tile_cols);
        size_t cnt = (size_t)one.n_tokens * one.n_embd;
        float *fref = test_read_floats(test_fixture(feat[i % 2]), cnt);
        CHECK(fref);
        double d1 = test_max_diff(outs[i].data, one.data, cnt), d2 = test_max_diff(outs[i].data, fref, cnt);
        printf("    image %d in a pass of 3: %.3g from alone, %.3g from the reference\n", i, d1, d2);
        CHECK_MSG(d1 < 1e-4 && d2 < 1e-3, "batched image %d differs by %g / %g", i, d1, d2);
        free(fref);
        vision_embd_release(&one);
        vision_embd_release(&outs[i]);
    }
    // cancelled before the patch embedding, then after a few blocks
    for (int limit = 1; limit <= 3; limit += 2) {
        struct cancel_after ca = { 0, limit };
        CHECK(vision_encode_batch(vc, in, 3, cancel_after_fn, &ca, outs, err, sizeof err) < 0);
        CHECK_STR_CONTAINS(err, "cancelled");
        CHECK_EQ(ca.polls, limit);
        for (int i = 0; i < 3; i++)
            CHECK(!outs[i].data && outs[i].n_tokens == 0);
    }
    CHECK_EQ(vision_encode_batch(vc, in, 1, NULL, NULL, outs, err, sizeof err), 0);
    vision_embd_release(&outs[0]);
    /* a bad grid anywhere in the pass is refused */
    in[1].tile_rows = 3;
    CHECK(vision_encode_batch(vc, in, 2, NULL, NULL, outs, err, sizeof err) < 0);
    vision_ctx_free(vc);
    tpool_free(tp);
    for (int i = 0; i < 2; i++) {
        free(pix[i]);
        media_image_release(&img[i]);
    }
    vision_model_free(m);
}

/* A temporal patch of two identical frames is what the reference makes of
 * a still image (its frame repeated): both frame kernels on the same
 * pixels equal the summed kernel, so the pair's rows equal the image's,
 * in a pass shared with a still image; swapped frames give other rows. */
TEST(qwen2vl_frame_pairs_as_still_images)
{
    struct vision_model *m = load_qwen();
    CHECK(m);
    char err[256];
    const int P = vision_model_info(m)->patch_size;
    struct media_image img[2];
    float *pix[2];
    struct vision_input in[3] = { 0 };
    const char *png[2] = { QDIR "../image.png", QDIR "image2.png" };
    for (int i = 0; i < 2; i++) {
        int n;
        CHECK_EQ(media_image_decode_file(test_fixture(png[i]), NULL, &img[i], err, sizeof err), 0);
        CHECK_EQ(vision_preprocess(m, &img[i], false, &pix[i], &n, &in[i].tile_rows, &in[i].tile_cols,
                                   err, sizeof err), 0);
        in[i].pixels = pix[i], in[i].n_images = n, in[i].frames = 1;
    }
    const int n0 = in[0].tile_rows * in[0].tile_cols;
    float *pair = qwen2vl_pair_frames(pix[0], pix[0], n0, P);
    float *half = malloc(sizeof(float) * (size_t)n0 * 3 * P * P);
    CHECK(pair && half);
    for (size_t i = 0; i < (size_t)n0 * 3 * P * P; i++)
        half[i] = pix[0][i] * 0.5f;
    float *mixed = qwen2vl_pair_frames(pix[0], half, n0, P), *swapped = qwen2vl_pair_frames(half, pix[0], n0, P);
    CHECK(mixed && swapped);
    in[2] = in[0];
    in[2].pixels = pair, in[2].frames = 2;
    struct tpool *tp = tpool_new(2, err, sizeof err);
    struct vision_ctx *vc = vision_ctx_new(m, tp, err, sizeof err);
    CHECK(tp && vc);
    struct vision_embd out[3];
    CHECK_EQ(vision_encode_batch(vc, in, 3, NULL, NULL, out, err, sizeof err), 0);
    const size_t cnt = (size_t)out[0].n_tokens * out[0].n_embd;
    double d = test_max_diff(out[2].data, out[0].data, cnt);
    printf("    two identical frames vs the still image: %.3g\n", d);
    CHECK_MSG(out[2].n_tokens == out[0].n_tokens && d < 1e-4, "pair differs by %g", d);
    /* frame order matters: (a, a/2) and (a/2, a) are different clips */
    struct vision_input v[2] = { in[2], in[2] };
    v[0].pixels = mixed, v[1].pixels = swapped;
    struct vision_embd vo[2];
    CHECK_EQ(vision_encode_batch(vc, v, 2, NULL, NULL, vo, err, sizeof err), 0);
    CHECK(test_max_diff(vo[0].data, vo[1].data, cnt) > 1e-3);
    vision_embd_release(&vo[1]);
    /* a pair that says 3 frames is refused */
    v[0].frames = 3;
    CHECK(vision_encode_batch(vc, v, 1, NULL, NULL, vo + 1, err, sizeof err) < 0);
    vision_embd_release(&vo[0]);
    for (int i = 0; i < 3; i++)
        vision_embd_release(&out[i]);
    vision_ctx_free(vc);
    tpool_free(tp);
    free(pair), free(half), free(mixed), free(swapped);
    for (int i = 0; i < 2; i++) {
        free(pix[i]);
        media_image_release(&img[i]);
    }
    vision_model_free(m);
}

/* A video against transformers' vision tower (tests/fixtures/vision/
 * qwen2_5_vl/video_features.bin, from the GPU machine's job
 * e_qwen_video): frame a = the processor's pixels of image.png, frame
 * b = a / 2; one temporal slice (a, b), then a clip of two slices (a, b),
 * (b, a) - which the reference windows and attends slice by slice, so it
 * is two frame-pair images in one pass here. */
TEST(qwen2vl_video_pairs_match_reference)
{
    size_t len;
    char *js = test_read_file(test_fixture(QDIR "video_reference.json"), &len);
    if (!js)
        SKIP("no tests/fixtures/vision/qwen2_5_vl/video_features.bin (GPU job e_qwen_video)");
    int grid[2];
    CHECK_EQ(qgold_json_ints(js, "grid", grid, 2), 2);
    free(js);
    struct vision_model *m = load_qwen();
    CHECK(m);
    char err[256];
    const struct vision_info *in = vision_model_info(m);
    const int n = grid[0] * grid[1], P = in->patch_size, K = 3 * P * P, rows = n / 4, W = in->n_embd_lm;
    float *ref = test_read_floats(test_fixture(QDIR "pixels.bin"), (size_t)n * 2 * K);
    float *feat = test_read_floats(test_fixture(QDIR "video_features.bin"), (size_t)3 * rows * W);
    float *a = malloc(sizeof(float) * n * K), *b = malloc(sizeof(float) * n * K);
    CHECK(ref && feat && a && b);
    for (int r = 0; r < n; r++) /* frame 0 of each [3][2][P][P] row */
        for (int c = 0; c < 3; c++)
            memcpy(a + (size_t)r * K + c * P * P, ref + (size_t)r * 2 * K + c * 2 * P * P,
                   sizeof(float) * P * P);
    for (size_t i = 0; i < (size_t)n * K; i++)
        b[i] = a[i] * 0.5f;
    float *ab = qwen2vl_pair_frames(a, b, n, P), *ba = qwen2vl_pair_frames(b, a, n, P);
    CHECK(ab && ba);
    const struct vision_input vin[3] = { { ab, 1, grid[0], grid[1], 2 }, { ab, 1, grid[0], grid[1], 2 },
                                         { ba, 1, grid[0], grid[1], 2 } };
    struct tpool *tp = tpool_new(2, err, sizeof err);
    struct vision_ctx *vc = vision_ctx_new(m, tp, err, sizeof err);
    CHECK(tp && vc);
    struct vision_embd out[3];
    CHECK_EQ(vision_encode_batch(vc, vin, 3, NULL, NULL, out, err, sizeof err), 0);
    double scale = 0;
    for (size_t i = 0; i < (size_t)3 * rows * W; i++)
        scale = fabs(feat[i]) > scale ? fabs(feat[i]) : scale;
    for (int i = 0; i < 3; i++) {
        CHECK(out[i].n_tokens == rows && out[i].n_embd == W);
        double d = test_max_diff(out[i].data, feat + (size_t)i * rows * W, (size_t)rows * W);
        printf("    video slice %d: max diff %.3g (max |ref| %.3g)\n", i, d, scale);
        CHECK_MSG(d < 1e-4 * (scale > 1 ? scale : 1), "slice %d differs by %g", i, d);
        vision_embd_release(&out[i]);
    }
    vision_ctx_free(vc);
    tpool_free(tp);
    free(ab), free(ba), free(a), free(b), free(ref), free(feat);
    vision_model_free(m);
}

// ---- a video in the prompt ---------------------------------------------------------

static void add_url_part(cJSON *parts, const char *dir, const char *rel)
{
    char url[PATH_MAX + 16];
    snprintf(url, sizeof url, "file://%s/%s", dir, rel);
    cJSON *p = cJSON_CreateObject(), *u = cJSON_CreateObject();
    cJSON_AddStringToObject(p, "type", "image_url");
    cJSON_AddStringToObject(u, "url", url);
    cJSON_AddItemToObject(p, "image_url", u);
    cJSON_AddItemToArray(parts, p);
}

static void add_text_part(cJSON *parts, const char *text)
{
    cJSON *p = cJSON_CreateObject();
    cJSON_AddStringToObject(p, "type", "text");
    cJSON_AddStringToObject(p, "text", text);
    cJSON_AddItemToArray(parts, p);
}

/* A pool of the server's image path over m (frames read from
 * tests/fixtures/vision), with a cache. */
struct clip_pool {
    struct vision_ctx *vc;
    struct vision_cache *cache;
    struct api_images_pool *pool;
    char root[PATH_MAX];
};

static void clip_pool_open(struct clip_pool *cp, struct vision_model *vm)
{
    char err[256];
    memset(cp, 0, sizeof *cp);
    cp->vc = vision_ctx_new(vm, NULL, err, sizeof err);
    cp->cache = vision_cache_new((size_t)16 << 20);
    CHECK(cp->vc && cp->cache && realpath(test_fixture("vision"), cp->root));
    struct api_images_params prm = api_images_default_params();
    prm.n_workers = 1, prm.max_images = 8, prm.media_root = cp->root;
    cp->pool = api_images_pool_new(vm, cp->vc, cp->cache, &prm, err, sizeof err);
    CHECK_MSG(cp->pool, "%s", err);
}

static void clip_pool_close(struct clip_pool *cp)
{
    api_images_pool_free(cp->pool);
    vision_cache_free(cp->cache);
    vision_ctx_free(cp->vc);
}

/* The video goldens' message as a client sends it - [image, text, image2,
 * text, {"type": "video", "video": [5 frame URLs]}, text] - through
 * api_images_take into *im; *req (the caller's to delete) holds the parts,
 * the video part now its text (clip_video_text). */
static void take_clip(struct clip_pool *cp, const char *image2, cJSON **req, struct api_images *im)
{
    cJSON *parts = cJSON_CreateArray(), *frames = cJSON_CreateArray();
    add_url_part(parts, cp->root, "image.png");
    add_text_part(parts, "What is this?");
    add_url_part(parts, cp->root, image2);
    add_text_part(parts, "And this?");
    for (int f = 0; f < 5; f++) {
        char url[PATH_MAX + 64];
        snprintf(url, sizeof url, "file://%s/qwen2_5_vl/video/frame%d.png", cp->root, f);
        cJSON_AddItemToArray(frames, cJSON_CreateString(url));
    }
    cJSON *vpart = cJSON_CreateObject();
    cJSON_AddStringToObject(vpart, "type", "video");
    cJSON_AddItemToObject(vpart, "video", frames);
    cJSON_AddItemToArray(parts, vpart);
    add_text_part(parts, "What happens?");
    cJSON *msg = cJSON_CreateObject(), *msgs = cJSON_CreateArray();
    cJSON_AddStringToObject(msg, "role", "user");
    cJSON_AddItemToObject(msg, "content", parts);
    cJSON_AddItemToArray(msgs, msg);
    *req = cJSON_CreateObject();
    cJSON_AddItemToObject(*req, "messages", msgs);
    struct apireq_gen g;
    apireq_gen_init(&g);
    struct api_error e = { 0 };
    const int rc = api_images_take(cp->pool, *req, 0, &g, NULL, NULL, im, &e);
    apireq_gen_free(&g);
    CHECK_MSG(rc == 3, "rc %d: %s", rc, e.message);
}

static const char *clip_video_text(cJSON *req)
{
    cJSON *msg = cJSON_GetArrayItem(cJSON_GetObjectItem(req, "messages"), 0);
    return cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(msg, "content"), 4), "text")->valuestring;
}

/* The reference's rendered prompt with its video placeholder replaced by
 * what the server made of the video part. */
static void render_clip(const char *prompt, const char *video_text, char *out, size_t cap)
{
    static const char pad[] = "<|vision_start|><|video_pad|><|vision_end|>";
    const char *vid = strstr(prompt, pad);
    snprintf(out, cap, "%.*s%s%s", vid ? (int)(vid - prompt) : 0, prompt, video_text,
             vid ? vid + strlen(pad) : "");
}

/* Two images and a clip of 5 frames through the server's path against
 * transformers (tests/fixtures/vision/qwen2_5_vl/clip_*, GPU job e_video
 * of tools/qwen_video_golden.sh): the message [image, text, image, text,
 * {"type": "video", "video": [5 frame URLs]}, text] through api_images_take
 * (frames paired into 3 temporal patches, one video of 3 x 18 rows, fps 2
 * -> second_per_grid_t 1, 2 temporal ids per patch), the prompt laid out
 * by vision_prompt_build = the processor's ids, the merged embeddings,
 * the video's rows, the M-RoPE ids, the logits of every position, greedy
 * tokens with top-5 logprobs, the same tokens through the engine (twice);
 * and the ids of the same prompt at other fps against both formulas. */
TEST(qwen2vl_video_prompt_matches_reference)
{
    size_t len;
    char *js = test_read_file(test_fixture(QDIR "clip_reference.json"), &len);
    if (!js)
        SKIP("no tests/fixtures/vision/qwen2_5_vl/clip_reference.json (GPU job e_video)");
    test_defer(free, js);
    char err[256];
    static double num[4096];
    struct qgold_ref r;
    CHECK(qgold_ref_load(&r, QDIR "clip_reference.json") && r.vgrid[0] > 0);
    const int *vgrid = r.vgrid;
    const double spg = qgold_json_num(js, "second_per_grid_t");
    struct vision_model *vm = load_qwen();
    CHECK(vm);
    const struct vision_info *vi = vision_model_info(vm);
    CHECK_EQ(vi->tokens_per_second, (int)qgold_json_num(js, "tokens_per_second"));
    struct llm_model *lm = llm_model_load(test_golden("vision-qwen2_5_vl-lm-f32.gguf"), NULL, err, sizeof err);
    CHECK_MSG(lm, "%s", err);
    struct clip_pool cp;
    clip_pool_open(&cp, vm);
    if (test_failed_now())
        return;

    // the message as a client sends it, through the server's image path (twice: the cache)
    struct api_images im;
    cJSON *req = NULL;
    for (int round = 0; round < 2; round++) {
        if (round)
            api_images_free(&im), cJSON_Delete(req);
        take_clip(&cp, "qwen2_5_vl/image2.png", &req, &im);
        if (test_failed_now())
            return;
        CHECK_EQ(im.n, 3);
        CHECK_STR_EQ(clip_video_text(req), vision_image_marker(vm));
    }
    CHECK_EQ(vision_cache_stats(cp.cache).hits, 5); /* the second round: 2 images + 3 frame pairs */
    const struct vision_embd *v = &im.e[2];
    CHECK(v->grid_t == vgrid[0] && v->tile_rows == vgrid[1] / 2 && v->tile_cols == vgrid[2] / 2);
    CHECK_MSG(fabsf(v->t_step - (float)(spg * vi->tokens_per_second)) < 1e-6f, "t_step %g", v->t_step);

    // the rendered prompt: the server's marker where the template put the video's
    char rendered[2048];
    render_clip(r.prompt, vision_image_marker(vm), rendered, sizeof rendered);
    struct vision_prompt vp;
    CHECK_EQ(vision_prompt_build(vm, llm_model_tokenizer(lm), rendered, strlen(rendered), false, im.e, 3, &vp,
                                 err, sizeof err), 0);
    struct qgold_lm s;
    qgold_lm_rows(&s, lm, &vp, &r);
    if (test_failed_now())
        return;
    const int n = s.n, D = s.W;
    int video_rows = 0, segs_video = 0;
    for (int i = 0, q = 0; q < vp.n_parts; q++) {
        const struct vision_prompt_part *pt = &vp.parts[q];
        segs_video += pt->grid_t == vgrid[0];
        for (int j = 0; j < pt->n; j++, i++) {
            CHECK(!pt->embd || s.ids[i] == (pt->grid_t ? r.video_token : r.image_token));
            video_rows += pt->grid_t > 0;
        }
    }
    CHECK_EQ(segs_video, 1);
    CHECK_EQ(video_rows, vgrid[0] * vgrid[1] * vgrid[2] / 4);
    float *ref = test_read_floats(test_fixture(QDIR "clip_embeds.bin"), (size_t)n * D);
    float *vref = test_read_floats(test_fixture(QDIR "clip_video_features.bin"), (size_t)video_rows * D);
    CHECK(ref && vref);
    double d = test_max_diff(s.x, ref, (size_t)n * D);
    printf("    merged embeddings max diff %.3g over %d positions (%d video rows)\n", d, n, video_rows);
    CHECK_MSG(d < 1e-4, "merged embeddings differ by %g", d);
    d = test_max_diff(v->data, vref, (size_t)video_rows * D);
    printf("    video features (3 temporal patches of frame pairs) max diff %.3g\n", d);
    CHECK_MSG(d < 1e-4, "video features differ by %g", d);
    free(ref), free(vref);

    // M-RoPE ids
    const struct qwen2vl_grid grids[3] = {
        { 1, im.e[0].tile_rows, im.e[0].tile_cols, 0 }, { 1, im.e[1].tile_rows, im.e[1].tile_cols, 0 },
        { v->grid_t, v->tile_rows, v->tile_cols, v->t_step } };
    int next = qwen2vl_mrope_positions_av(s.ids, n, r.image_token, r.video_token, grids, 3, s.rp, err, sizeof err);
    CHECK_MSG(next > 0, "%s", err);
    int32_t *pref = (int32_t *)test_read_file(test_fixture(QDIR "clip_positions.bin"), &len);
    CHECK(pref && len == sizeof(int32_t) * 3 * n);
    for (int i = 0; i < 3 * n; i++)
        CHECK_MSG(s.rp[i] == pref[i], "axis %d token %d: %d, reference %d", i / n, i % n, s.rp[i], pref[i]);
    free(pref);
    printf("    M-RoPE ids of %d positions as transformers (video temporal ids step %g)\n", n, v->t_step);
    // the same prompt at other fps: the published formula exactly; transformers 5.x where it agrees
    const char *c = strstr(js, "\"fps_cases\"");
    CHECK(c);
    int32_t *alt = malloc(sizeof(int32_t) * 3 * n);
    CHECK(alt);
    for (int cs = 0; cs < 4; cs++) {
        const double fps = qgold_json_num(c, "fps");
        const char *e1, *e2;
        CHECK_EQ(qgold_json_nums(c, "transformers", num, 4096, &e1), 3 * n);
        int32_t tf[3 * 1024];
        for (int i = 0; i < 3 * n; i++)
            tf[i] = (int32_t)num[i];
        CHECK_EQ(qgold_json_nums(e1, "published_formula", num, 4096, &e2), 3 * n);
        struct qwen2vl_grid g3[3] = { grids[0], grids[1], grids[2] };
        g3[2].t_step = (float)(2.0 / fps * vi->tokens_per_second);
        CHECK(qwen2vl_mrope_positions_av(s.ids, n, r.image_token, r.video_token, g3, 3, alt, err, sizeof err) > 0);
        int diff_tf = 0;
        for (int i = 0; i < 3 * n; i++) {
            CHECK_MSG(alt[i] == (int32_t)num[i], "fps %g: axis %d token %d: %d, formula %d", fps, i / n, i % n,
                      alt[i], (int)num[i]);
            diff_tf += alt[i] != tf[i];
        }
        printf("    fps %g: ids = the published get_rope_index; %d of %d differ from transformers %s\n", fps,
               diff_tf, 3 * n, diff_tf ? "(its 5.x rewrite)" : "");
        if (fps == 2.0)
            CHECK_EQ(diff_tf, 0);
        c = strstr(e2, "\"fps\": ");
        if (cs < 3)
            CHECK(c);
    }
    free(alt);

    // logits of every position, then greedy with top-5 logprobs
    qgold_lm_prefill(&s, NULL, s.rp);
    ref = test_read_floats(test_fixture(QDIR "clip_logits.bin"), (size_t)n * s.V);
    CHECK(ref);
    d = test_max_diff(s.logits, ref, (size_t)n * s.V);
    printf("    logits max diff %.3g over %d positions\n", d, n);
    CHECK_MSG(d < 1e-3, "logits differ by %g", d);
    free(ref);
    qgold_lm_greedy(&s, &r, next, 1e-4);
    // through the engine: the segments' grids and time give the same tokens, twice
    if (!test_failed_now())
        qgold_engine_twice(lm, "qwen2vl", &vp, 40 /* prefill chunks end inside the video */, &r);
    if (test_failed_now())
        return;
    qgold_lm_free(&s);
    vision_prompt_release(&vp);
    api_images_free(&im);
    cJSON_Delete(req);
    clip_pool_close(&cp);
    llm_model_free(lm);
    vision_model_free(vm);
}

/* Qwen3-VL's video (tests/fixtures/vision/qwen3vl/q3clip_*, GPU job
 * e_video3 of tools/qwen_video_golden.sh, on D's tiny Qwen3-VL): the same
 * message through api_images_take - the frames paired into 3 temporal
 * patches, each its own run after "<t seconds>" as Qwen3VLProcessor writes
 * it - gives the processor's ids, the reference's M-RoPE ids (each patch
 * an image's), logits (DeepStack rows included), greedy tokens with top-5
 * logprobs, and the engine's greedy tokens twice. */
TEST(qwen3vl_video_prompt_matches_reference)
{
    struct qgold_ref r;
    if (!qgold_ref_load(&r, "vision/qwen3vl/q3clip_reference.json"))
        SKIP("no tests/fixtures/vision/qwen3vl/q3clip_reference.json (GPU job e_video3)");
    CHECK(r.vgrid[0] > 0);
    char err[256];
    size_t len;
    struct vision_model *vm = vision_model_load(test_golden("vision-qwen3vl-mmproj-f32.gguf"), err, sizeof err);
    CHECK_MSG(vm, "%s", err);
    struct llm_model *lm = llm_model_load(test_golden("vision-qwen3vl-lm-f32.gguf"), NULL, err, sizeof err);
    CHECK_MSG(lm, "%s", err);
    struct clip_pool cp;
    clip_pool_open(&cp, vm);
    if (test_failed_now())
        return;
    struct api_images im;
    cJSON *req = NULL;
    take_clip(&cp, "qwen3vl/image2.png", &req, &im);
    if (test_failed_now())
        return;
    CHECK_EQ(im.n, 2 + r.vgrid[0]); /* the patches stay images */
    const char *vtext = clip_video_text(req);
    printf("    the video part became: %s\n", vtext);
    // the rendered prompt: the video part's text where the template put the video
    char rendered[4096];
    render_clip(r.prompt, vtext, rendered, sizeof rendered);
    struct vision_prompt vp;
    CHECK_EQ(vision_prompt_build(vm, llm_model_tokenizer(lm), rendered, strlen(rendered), false, im.e, im.n, &vp,
                                 err, sizeof err), 0);
    struct qgold_lm s;
    qgold_lm_rows(&s, lm, &vp, &r);
    if (test_failed_now())
        return;
    const int n = s.n;
    struct qwen2vl_grid grids[16];
    int n_grids = 0;
    for (int q = 0; q < vp.n_parts; q++)
        if (vp.parts[q].embd && n_grids < 16)
            grids[n_grids++] = (struct qwen2vl_grid){ 1, vp.parts[q].grid_rows, vp.parts[q].grid_cols, 0 };
    CHECK_EQ(n_grids, 2 + r.vgrid[0]);
    int next = qwen2vl_mrope_positions_av(s.ids, n, r.image_token, r.video_token, grids, n_grids, s.rp, err,
                                          sizeof err);
    CHECK_MSG(next > 0, "%s", err);
    int32_t *pref = (int32_t *)test_read_file(test_fixture("vision/qwen3vl/q3clip_positions.bin"), &len);
    CHECK(pref && len == sizeof(int32_t) * 3 * n);
    for (int i = 0; i < 3 * n; i++)
        CHECK_MSG(s.rp[i] == pref[i], "axis %d token %d: %d, reference %d", i / n, i % n, s.rp[i], pref[i]);
    free(pref);
    qgold_lm_prefill(&s, NULL, s.rp);
    float *ref = test_read_floats(test_fixture("vision/qwen3vl/q3clip_logits.bin"), (size_t)n * s.V);
    CHECK(ref);
    double d = test_max_diff(s.logits, ref, (size_t)n * s.V);
    printf("    %d positions (ids and M-RoPE ids as the processor), logits max diff %.3g\n", n, d);
    CHECK_MSG(d < 1e-3, "logits differ by %g", d);
    free(ref);
    qgold_lm_greedy(&s, &r, next, 1e-4);
    if (!test_failed_now())
        qgold_engine_twice(lm, "qwen3vl", &vp, 40, &r);
    if (test_failed_now())
        return;
    qgold_lm_free(&s);
    vision_prompt_release(&vp);
    api_images_free(&im);
    cJSON_Delete(req);
    clip_pool_close(&cp);
    llm_model_free(lm);
    vision_model_free(vm);
}

/* Qwen3-VL's video part text without the reference: 5 frames at the
 * default 2 fps -> three patches at 0.25, 1.25 and 2.0 s ("%.1f" as the
 * processor's f-string rounds them), each its own marker, no separator;
 * at fps 1 the times double; max_frames 2 keeps the first and the last. */
TEST(qwen3vl_video_parts_timestamped)
{
    char err[256];
    struct vision_model *vm = vision_model_load(test_golden("vision-qwen3vl-mmproj-f32.gguf"), err, sizeof err);
    if (!vm)
        SKIP("no golden qwen3vl mmproj (make golden-fixtures)");
    struct vision_ctx *vc = vision_ctx_new(vm, NULL, err, sizeof err);
    struct api_images_params prm = api_images_default_params();
    char root_dir[PATH_MAX];
    CHECK(vc && realpath(test_fixture("vision"), root_dir));
    prm.n_workers = 1, prm.max_images = 8, prm.media_root = root_dir;
    struct api_images_pool *pool = api_images_pool_new(vm, vc, NULL, &prm, err, sizeof err);
    CHECK_MSG(pool, "%s", err);
    const char *M = vision_image_marker(vm);
    static const struct { double fps; int max_frames, n; double t[3]; } cases[] = {
        { 0, 0, 3, { 0.2, 1.2, 2.0 } }, { 1, 0, 3, { 0.5, 2.5, 4.0 } }, { 0, 2, 1, { 1.0 } } };
    for (int c = 0; c < 3; c++) {
        cJSON *parts = cJSON_CreateArray(), *frames = cJSON_CreateArray();
        for (int f = 0; f < 5; f++) {
            char url[PATH_MAX + 64];
            snprintf(url, sizeof url, "file://%s/qwen2_5_vl/video/frame%d.png", root_dir, f);
            cJSON_AddItemToArray(frames, cJSON_CreateString(url));
        }
        cJSON *vpart = cJSON_CreateObject();
        cJSON_AddStringToObject(vpart, "type", "video");
        cJSON_AddItemToObject(vpart, "video", frames);
        if (cases[c].fps > 0)
            cJSON_AddNumberToObject(vpart, "fps", cases[c].fps);
        if (cases[c].max_frames > 0)
            cJSON_AddNumberToObject(vpart, "max_frames", cases[c].max_frames);
        cJSON_AddItemToArray(parts, vpart);
        cJSON *msg = cJSON_CreateObject(), *msgs = cJSON_CreateArray(), *req = cJSON_CreateObject();
        cJSON_AddStringToObject(msg, "role", "user");
        cJSON_AddItemToObject(msg, "content", parts);
        cJSON_AddItemToArray(msgs, msg);
        cJSON_AddItemToObject(req, "messages", msgs);
        struct apireq_gen g;
        apireq_gen_init(&g);
        struct api_error e = { 0 };
        struct api_images im;
        const int rc = api_images_take(pool, req, 0, &g, NULL, NULL, &im, &e);
        apireq_gen_free(&g);
        CHECK_MSG(rc == 1, "case %d: rc %d: %s", c, rc, e.message);
        CHECK_EQ(im.n, cases[c].n);
        char want[1024];
        size_t w = 0;
        for (int i = 0; i < cases[c].n; i++)
            w += (size_t)snprintf(want + w, sizeof want - w, "<%.1f seconds>%s", cases[c].t[i], M);
        CHECK_STR_EQ(cJSON_GetObjectItem(cJSON_GetArrayItem(parts, 0), "text")->valuestring, want);
        for (int i = 0; i < im.n; i++)
            CHECK(im.e[i].grid_t == 0 && im.e[i].n_tokens == im.e[i].tile_rows * im.e[i].tile_cols);
        api_images_free(&im);
        cJSON_Delete(req);
    }
    api_images_pool_free(pool);
    vision_ctx_free(vc);
    vision_model_free(vm);
}

/* Bad video parts are 400s naming the part, never a crash: "video" neither
 * a URL nor a list, an empty list, a frame that is no URL, frames of two
 * sizes, a frame that is no image; a frame list's max_frames beyond
 * --max-images. */
TEST(qwen2vl_video_parts_bad_input)
{
    char err[256];
    struct vision_model *vm = load_qwen();
    CHECK(vm);
    struct vision_ctx *vc = vision_ctx_new(vm, NULL, err, sizeof err);
    struct api_images_params prm = api_images_default_params();
    char root_dir[PATH_MAX];
    CHECK(vc && realpath(test_fixture("vision"), root_dir));
    prm.n_workers = 1, prm.max_images = 8, prm.media_root = root_dir;
    struct api_images_pool *pool = api_images_pool_new(vm, vc, NULL, &prm, err, sizeof err);
    CHECK_MSG(pool, "%s", err);
    char f0[PATH_MAX + 64], other[PATH_MAX + 64], notimg[PATH_MAX + 64];
    snprintf(f0, sizeof f0, "\"file://%s/qwen2_5_vl/video/frame0.png\"", root_dir);
    snprintf(other, sizeof other, "\"file://%s/qwen2_5_vl/image2.png\"", root_dir);
    snprintf(notimg, sizeof notimg, "\"file://%s/qwen2_5_vl/config.json\"", root_dir);
    char parts[6][4 * PATH_MAX];
    snprintf(parts[0], sizeof parts[0], "{\"type\": \"video\", \"video\": 5}");
    snprintf(parts[1], sizeof parts[1], "{\"type\": \"video\", \"video\": []}");
    snprintf(parts[2], sizeof parts[2], "{\"type\": \"video\", \"video\": [%s, 7]}", f0);
    snprintf(parts[3], sizeof parts[3], "{\"type\": \"video\", \"video\": [%s, %s, %s]}", f0, f0, other);
    snprintf(parts[4], sizeof parts[4], "{\"type\": \"video\", \"video\": [%s, %s]}", f0, notimg);
    snprintf(parts[5], sizeof parts[5], "{\"type\": \"video\", \"max_frames\": 9, \"video\": [%s]}", f0);
    for (int c = 0; c < 6; c++) {
        char body[5 * PATH_MAX];
        snprintf(body, sizeof body, "{\"messages\": [{\"role\": \"user\", \"content\": [%s]}]}", parts[c]);
        cJSON *req = cJSON_Parse(body);
        CHECK(req);
        struct apireq_gen g;
        apireq_gen_init(&g);
        struct api_error e = { 0 };
        struct api_images im;
        const int rc = api_images_take(pool, req, 0, &g, NULL, NULL, &im, &e);
        apireq_gen_free(&g);
        CHECK_MSG(rc == -1 && e.status == 400, "case %d: rc %d status %d: %s", c, rc, e.status, e.message);
        printf("    case %d: %s\n", c, e.message);
        api_images_free(&im);
        cJSON_Delete(req);
    }
    api_images_pool_free(pool);
    vision_ctx_free(vc);
    vision_model_free(vm);
}
