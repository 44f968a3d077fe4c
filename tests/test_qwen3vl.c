/* test_qwen3vl.c - Qwen3-VL against the tiny Hugging Face
 * Qwen3VLForConditionalGeneration of tests/fixtures/vision/qwen3vl
 * (tools/make_vision_golden.py --case qwen3vl, converted by
 * tools/hf_mmproj_to_gguf.py into $OMNI_GOLDEN_DIR): the processor's pixel
 * values, the interpolated position table, the last ViT block, the merged
 * and DeepStack features of two pictures, the M-RoPE ids of the two-image
 * prompt, the qwen3vl LM's logits with the DeepStack rows added, greedy
 * tokens and top-5 log-probabilities (llm_forward and the engine); broken
 * files. */
#define _GNU_SOURCE /* memmem */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "llm/model.h"
#include "media/image.h"
#include "src/core/gguf.h"
#include "src/core/matmul.h"
#include "src/core/omni.h"
#include "src/core/tensor.h"
#include "src/core/threadpool.h"
#include "src/engine/engine.h"
#include "test.h"
#include "tests/qwen_golden.h"
#include "vision/qwen2vl.h"
#include "vision/qwen3vl.h"
#include "vision/vision.h"

#define Q3DIR "vision/qwen3vl/"
#define Q3GGUF "vision-qwen3vl-mmproj-f32.gguf"
#define Q3LM "vision-qwen3vl-lm-f32.gguf"

/* The fixture's facts every test needs (grid_thw checked). */
static bool q3ref_load_dir(struct qgold_ref *r, const char *dir)
{
    char path[256];
    snprintf(path, sizeof path, "%sreference.json", dir);
    return qgold_ref_load(r, path) && r->n_grid == 6;
}

static bool q3ref_load(struct qgold_ref *r)
{
    return q3ref_load_dir(r, Q3DIR);
}

static struct vision_model *load_q3(const char *file)
{
    char err[256];
    struct vision_model *m = vision_model_load(test_golden(file), err, sizeof err);
    if (!m)
        fprintf(stderr, "    %s\n", err);
    return m;
}

static double max_abs(const float *x, size_t n)
{
    double m = 0;
    for (size_t i = 0; i < n; i++)
        m = fabs(x[i]) > m ? fabs(x[i]) : m;
    return m;
}

/* One picture through vision_preprocess + vision_encode_image: the
 * processor's pixel values (frame 0 of its [3][2][P][P] rows), then each
 * row's merged part against features.bin and its DeepStack parts against
 * deepstack.bin ([n_ds][rows][E]). */
static void check_picture(struct vision_model *m, int n_ds, const char *png, const int grid[3],
                          const char *pix_bin, const char *feat_bin, const char *ds_bin, double tol)
{
    char err[256];
    const struct vision_info *in = vision_model_info(m);
    struct media_image img;
    CHECK_EQ(media_image_decode_file(test_fixture(png), NULL, &img, err, sizeof err), 0);
    float *pix;
    int n, gh, gw;
    CHECK_EQ(vision_preprocess(m, &img, true, &pix, &n, &gh, &gw, err, sizeof err), 0);
    CHECK_MSG(n == 1 && gh == grid[1] && gw == grid[2], "grid %dx%d, reference %dx%d", gh, gw, grid[1], grid[2]);
    const int P = in->patch_size, K = P * P;
    float *ref = test_read_floats(test_fixture(pix_bin), (size_t)gh * gw * 3 * 2 * K);
    CHECK(ref);
    double dp = 0;
    for (int r = 0; r < gh * gw; r++)
        for (int c = 0; c < 3; c++)
            for (int t = 0; t < 2; t++)
                for (int i = 0; i < K; i++) {
                    double e = fabs(pix[((size_t)r * 3 + c) * K + i] - ref[(((size_t)r * 3 + c) * 2 + t) * K + i]);
                    dp = e > dp ? e : dp;
                }
    CHECK_MSG(dp < 1e-5, "pixels differ by %g", dp);

    char e2[256];
    struct tpool *tp = tpool_new(2, e2, sizeof e2);
    struct vision_ctx *vc = vision_ctx_new(m, tp, err, sizeof err);
    CHECK(tp && vc);
    struct vision_embd e;
    CHECK_MSG(vision_encode_image(vc, &img, true, &e, err, sizeof err) == 0, "%s", err);
    const int E = in->n_embd_lm, M = gh * gw / 4;
    CHECK(e.n_tokens == M && e.n_embd == E * (1 + n_ds));
    float *fref = test_read_floats(test_fixture(feat_bin), (size_t)M * E);
    float *dref = test_read_floats(test_fixture(ds_bin), (size_t)n_ds * M * E);
    float *part = malloc(sizeof(float) * M * E);
    CHECK(fref && dref && part);
    for (int k = 0; k <= n_ds; k++) {
        for (int r = 0; r < M; r++)
            memcpy(part + (size_t)r * E, e.data + (size_t)r * e.n_embd + (size_t)k * E, sizeof(float) * E);
        const float *want = k ? dref + (size_t)(k - 1) * M * E : fref;
        const double scale = max_abs(want, (size_t)M * E), d = test_max_diff(part, want, (size_t)M * E);
        printf("    %s: %s max diff %.3g (max |ref| %.3g)\n", png, k ? "deepstack" : "features", d, scale);
        CHECK_MSG(d < tol * (scale > 1 ? scale : 1), "part %d differs by %g", k, d);
    }
    // layout: <|vision_start|> rows <|vision_end|>
    struct vision_layout lay;
    CHECK_EQ(vision_layout_build(m, &e, &lay, err, sizeof err), 0);
    CHECK(lay.n == 3 && !lay.seg[1].text && lay.seg[1].n_rows == M);
    vision_layout_release(&lay);
    vision_embd_release(&e);
    vision_ctx_free(vc);
    tpool_free(tp);
    free(part), free(fref), free(dref), free(ref), free(pix);
    media_image_release(&img);
}

TEST(qwen3vl_features_match_reference)
{
    struct qgold_ref r;
    CHECK(q3ref_load(&r));
    struct vision_model *m = load_q3(Q3GGUF);
    CHECK(m);
    const struct vision_info *in = vision_model_info(m);
    CHECK(in->family == VISION_QWEN2VL && in->patch_size == 16 && in->n_deepstack == r.n_ds);
    CHECK_STR_EQ(in->projector, "qwen3vl_merger");
    CHECK_STR_EQ(vision_image_marker(m), "<|vision_start|><|image_pad|><|vision_end|>");
    check_picture(m, r.n_ds, "vision/image.png", r.grid, Q3DIR "pixels.bin", Q3DIR "features.bin",
                  Q3DIR "deepstack.bin", 1e-4);
    check_picture(m, r.n_ds, Q3DIR "image2.png", r.grid + 3, Q3DIR "pixels2.bin", Q3DIR "features2.bin",
                  Q3DIR "deepstack2.bin", 1e-4);
    vision_model_free(m);
}

/* A cancel callback that answers yes from its third poll on. */
static int cancel_third(void *user)
{
    return ++*(int *)user >= 3;
}

/* On the reference's own pixel values: the interpolated position table,
 * the first block and the last block's output (what the merger reads). */
TEST(qwen3vl_tower_steps_match_reference)
{
    char err[256];
    struct qgold_ref r;
    CHECK(q3ref_load(&r));
    struct gguf *g = gguf_open(test_golden(Q3GGUF), err, sizeof err);
    CHECK(g);
    struct vision_info info = { 0 };
    struct qwen3vl_model *q = qwen3vl_load(g, Q3GGUF, &info, err, sizeof err);
    CHECK_MSG(q, "%s", err);
    const int gh = r.grid[1], gw = r.grid[2], n = gh * gw, P = info.patch_size, K = 3 * P * P, D = info.n_embd;
    float *pe = malloc(sizeof(float) * n * D);
    CHECK(pe);
    CHECK_EQ(qwen3vl_pos_embed(q, gh, gw, pe), 0);
    float *pe_ref = test_read_floats(test_fixture(Q3DIR "pos_embed.bin"), (size_t)n * D);
    if (pe_ref) {
        double d = test_max_diff(pe, pe_ref, (size_t)n * D);
        printf("    position table at %dx%d: max diff %.3g\n", gh, gw, d);
        CHECK_MSG(d < 1e-5, "interpolated positions differ by %g", d);
    }
    float *ref = test_read_floats(test_fixture(Q3DIR "pixels.bin"), (size_t)n * 2 * K);
    float *vit_ref = test_read_floats(test_fixture(Q3DIR "vit_out.bin"), (size_t)n * D);
    float *pix = malloc(sizeof(float) * n * K), *vit = malloc(sizeof(float) * n * D);
    CHECK(ref && vit_ref && pix && vit);
    for (int i = 0; i < n; i++) /* frame 0 of each [3][2][P][P] row */
        for (int c = 0; c < 3; c++)
            memcpy(pix + (size_t)i * K + c * P * P, ref + (size_t)i * 2 * K + c * 2 * P * P, sizeof(float) * P * P);
    struct vision_embd e;
    const struct qwen2vl_image im = { pix, gh, gw, 1 };
    CHECK_EQ(qwen3vl_encode_batch(q, NULL, &im, 1, NULL, NULL, vit, &e, err, sizeof err), 0);
    double d = test_max_diff(vit, vit_ref, (size_t)n * D);
    printf("    last block output max diff %.3g (max |ref| %.3g)\n", d, max_abs(vit_ref, (size_t)n * D));
    CHECK_MSG(d < 1e-3 * (max_abs(vit_ref, (size_t)n * D) > 1 ? max_abs(vit_ref, (size_t)n * D) : 1),
              "ViT output differs by %g", d);
    vision_embd_release(&e);
    /* the pair of frames path: the same frame twice = the still image */
    float *pair = qwen2vl_pair_frames(pix, pix, n, P);
    struct vision_embd e1, e2;
    const struct qwen2vl_image two[2] = { { pix, gh, gw, 1 }, { pair, gh, gw, 2 } };
    struct vision_embd outs[2];
    CHECK(pair);
    CHECK_EQ(qwen3vl_encode_batch(q, NULL, two, 2, NULL, NULL, NULL, outs, err, sizeof err), 0);
    e1 = outs[0], e2 = outs[1];
    d = test_max_diff(e1.data, e2.data, (size_t)e1.n_tokens * e1.n_embd);
    printf("    a frame pair of one picture vs the still picture (one pass): %.3g\n", d);
    CHECK(d < 1e-4);
    vision_embd_release(&e1), vision_embd_release(&e2);
    /* a cancel seen between blocks stops the pass and frees everything */
    int polls = 0;
    CHECK_EQ(qwen3vl_encode_batch(q, NULL, two, 2, cancel_third, &polls, NULL, outs, err, sizeof err), OMNI_ERR_LIMIT);
    CHECK(polls == 3 && !outs[0].data && !outs[1].data);
    CHECK_STR_CONTAINS(err, "cancelled");
    /* odd or tiny grids are refused, not read past */
    const struct qwen2vl_image bad = { pix, 3, 4, 1 };
    CHECK(qwen3vl_encode_batch(q, NULL, &bad, 1, NULL, NULL, NULL, &e, err, sizeof err) < 0);
    free(pair), free(pix), free(vit), free(ref), free(vit_ref), free(pe), free(pe_ref);
    qwen3vl_free(q);
    gguf_free(g);
}

/* M-RoPE ids of the two-image prompt = the position_ids the reference's
 * language model received (images laid out as in Qwen2.5-VL). */
TEST(qwen3vl_mrope_positions_match_reference)
{
    char err[256];
    struct qgold_ref r;
    CHECK(q3ref_load(&r));
    size_t len;
    int32_t ids[512], *pos = malloc(sizeof(int32_t) * 3 * r.n);
    for (int i = 0; i < r.n; i++)
        ids[i] = r.ids[i];
    const int grids[2][2] = { { r.grid[1] / 2, r.grid[2] / 2 }, { r.grid[4] / 2, r.grid[5] / 2 } };
    int32_t *ref = (int32_t *)test_read_file(test_fixture(Q3DIR "positions.bin"), &len);
    CHECK(ref && pos);
    CHECK_EQ(len, sizeof(int32_t) * 3 * r.n);
    CHECK(qwen2vl_mrope_positions(ids, r.n, r.image_token, grids, 2, pos, err, sizeof err) > 0);
    for (int i = 0; i < 3 * r.n; i++)
        CHECK_MSG(pos[i] == ref[i], "axis %d token %d: %d, reference %d", i / r.n, i % r.n, pos[i], ref[i]);
    free(pos);
    free(ref);
}

/* The language side: the prompt laid out by vision_prompt_build (the
 * processor's ids), both pictures' wide rows (text rows: the token
 * embedding, zero DeepStack parts), interleaved M-RoPE ids -> the qwen3vl
 * LM's logits = the reference's; the DeepStack parts matter; greedy tokens
 * and their top-5 log-probabilities. */
static void fused_case(const char *dir, const char *mmproj, const char *lm_file, enum llm_arch arch)
{
    char err[256], path[256];
    struct qgold_ref r;
    CHECK(q3ref_load_dir(&r, dir));
    struct vision_model *vm = load_q3(mmproj);
    CHECK(vm);
    struct llm_model *lm = llm_model_load(test_golden(lm_file), NULL, err, sizeof err);
    CHECK_MSG(lm, "%s", err);
    const struct llm_hparams *hp = llm_model_hparams(lm);
    CHECK(hp->arch == arch && hp->rope_interleaved && hp->n_deepstack == r.n_ds);
    snprintf(path, sizeof path, "%simage2.png", dir);
    struct qgold_pictures pics;
    qgold_pictures(&pics, vm, lm, path, &r);
    if (test_failed_now())
        return;
    struct qgold_lm s;
    qgold_lm_rows(&s, lm, &pics.vp, &r);
    if (test_failed_now())
        return;
    const int n = s.n, D = hp->n_embd, W = s.W, V = s.V;
    // the rows given to the LM = the reference's inputs_embeds
    snprintf(path, sizeof path, "%smerged.bin", dir);
    float *merged = test_read_floats(test_fixture(path), (size_t)n * D);
    CHECK(merged);
    double dm = 0;
    for (int i = 0; i < n; i++)
        for (int c = 0; c < D; c++) {
            const double e = fabs(s.x[(size_t)i * W + c] - merged[(size_t)i * D + c]);
            dm = e > dm ? e : dm;
        }
    printf("    LM input rows max diff %.3g\n", dm);
    CHECK_MSG(dm < 1e-4 * (max_abs(merged, (size_t)n * D) > 1 ? max_abs(merged, (size_t)n * D) : 1),
              "merged rows differ by %g", dm);
    const int grids[2][2] = { { r.grid[1] / 2, r.grid[2] / 2 }, { r.grid[4] / 2, r.grid[5] / 2 } };
    int next = qwen2vl_mrope_positions(s.ids, n, r.image_token, grids, 2, s.rp, err, sizeof err);
    CHECK_MSG(next > 0, "%s", err);
    snprintf(path, sizeof path, "%slogits.bin", dir);
    float *ref = test_read_floats(test_fixture(path), (size_t)n * V);
    CHECK(ref);
    /* without the DeepStack parts the logits at and after the images differ
     * (a DeepStack LM reads rows of W floats: the same rows with the parts zeroed) */
    float *zeroed = calloc((size_t)n * W, sizeof(float));
    CHECK(zeroed);
    for (int i = 0; i < n; i++)
        memcpy(zeroed + (size_t)i * W, s.x + (size_t)i * W, sizeof(float) * D);
    qgold_lm_prefill(&s, zeroed, s.rp);
    const double d_plain = test_max_diff(s.logits, ref, (size_t)n * V);
    qgold_lm_prefill(&s, NULL, s.rp);
    const double d = test_max_diff(s.logits, ref, (size_t)n * V);
    printf("    fused logits max diff %.3g over %d positions (without DeepStack %.3g)\n", d, n, d_plain);
    CHECK_MSG(d < 1e-3, "logits differ by %g", d);
    CHECK(d_plain > 10 * d && d_plain > 1e-3);
    // greedy: one token at a time, rotary ids next, next + 1, ...; top-5 log-probs
    qgold_lm_greedy(&s, &r, next, 1e-3);
    if (test_failed_now())
        return;
    free(zeroed), free(merged), free(ref);
    qgold_lm_free(&s);
    qgold_pictures_free(&pics);
    llm_model_free(lm);
    vision_model_free(vm);
}

TEST(qwen3vl_fused_logits_and_greedy_match_reference)
{
    fused_case(Q3DIR, Q3GGUF, Q3LM, LLM_ARCH_QWEN3VL);
}

/* The MoE text model (Qwen3VLMoeForConditionalGeneration's: 8 experts of
 * 32, top 2, in each of its 3 layers) on the same prompt. */
TEST(qwen3vlmoe_fused_logits_and_greedy_match_reference)
{
    fused_case("vision/qwen3vlmoe/", "vision-qwen3vlmoe-mmproj-f32.gguf", "vision-qwen3vlmoe-lm-f32.gguf",
               LLM_ARCH_QWEN3VLMOE);
}

// ---- through the engine ---------------------------------------------------------

/* The prompt as engine segments: the engine carries each row's DeepStack
 * parts and M-RoPE ids through prefill chunks that cut the images, and
 * again from the prefix cache; greedy tokens = the reference's. */
TEST(qwen3vl_engine_greedy_matches_reference)
{
    char err[256];
    struct qgold_ref r;
    CHECK(q3ref_load(&r));
    struct vision_model *vm = load_q3(Q3GGUF);
    CHECK(vm);
    struct llm_model *lm = llm_model_load(test_golden(Q3LM), NULL, err, sizeof err);
    CHECK_MSG(lm, "%s", err);
    struct qgold_pictures pics;
    qgold_pictures(&pics, vm, lm, Q3DIR "image2.png", &r);
    if (test_failed_now())
        return;
    qgold_engine_twice(lm, "qwen3vl", &pics.vp, 9 /* prefill chunks end inside the images */, &r);
    if (test_failed_now())
        return;
    qgold_pictures_free(&pics);
    llm_model_free(lm);
    vision_model_free(vm);
}

/* The F16 conversion stays close. */
TEST(qwen3vl_f16_close_to_reference)
{
    struct qgold_ref r;
    CHECK(q3ref_load(&r));
    struct vision_model *m = load_q3("vision-qwen3vl-mmproj-f16.gguf");
    CHECK(m);
    check_picture(m, r.n_ds, "vision/image.png", r.grid, Q3DIR "pixels.bin", Q3DIR "features.bin",
                  Q3DIR "deepstack.bin", 2e-2);
    vision_model_free(m);
}

/* A DeepStack tensor or key gone, or the file cut short anywhere: a clear
 * error naming the file and the field. */
TEST(qwen3vl_rejects_broken_mmproj)
{
    const struct qgold_edit edits[] = {
        { "v.deepstack.2.fc1.weight", "v.deepstack.2.fc1.weight", 12 },
        { "v.position_embd.weight", "v.position_embd.weight", 3 },
        { "v.blk.1.attn_qkv.bias", "v.blk.1.attn_qkv.bias", 9 },
    };
    qgold_broken_mmproj(Q3GGUF, "broken-qwen3vl-mmproj.gguf", edits, 3);
}
