/* test_vision.c - vision encoders against the tiny Hugging Face references of
 * tests/fixtures/vision (tools/make_vision_golden.py, converted by
 * tools/hf_mmproj_to_gguf.py into $OMNI_GOLDEN_DIR): preprocessing of the
 * fixture picture, ViT features, projected embeddings, LM logits with the
 * embeddings fused in, prompt layout; Pillow-resampler checks; the cache;
 * broken mmproj files. */
#define _GNU_SOURCE /* memmem */
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
#include "test.h"
#include "vision/vision.h"

/* The reference's input ids, prompt and rendered prompt (reference.json). */
struct ref {
    int ids[256], n_ids;
    char prompt[256], rendered[4096];
    int image_token;
};

/* A JSON string field (\n and \" unescaped; enough for these files). */
static void json_str(const char *js, const char *key, char *out, size_t cap)
{
    char pat[64];
    snprintf(pat, sizeof pat, "\"%s\": \"", key);
    const char *p = strstr(js, pat);
    size_t n = 0;
    for (p = p ? p + strlen(pat) : NULL; p && *p && *p != '"' && n + 1 < cap; p++) {
        if (*p == '\\')
            p++, out[n++] = *p == 'n' ? '\n' : *p;
        else
            out[n++] = *p;
    }
    out[n] = 0;
}

static int load_ref(const char *c, struct ref *r)
{
    char rel[128];
    snprintf(rel, sizeof rel, "vision/%s/reference.json", c);
    size_t len;
    char *js = test_read_file(test_fixture(rel), &len);
    if (!js)
        return -1;
    char *p = strstr(js, "\"ids\": [");
    r->n_ids = 0;
    for (p = p ? p + 8 : NULL; p && *p != ']' && r->n_ids < 256;) {
        r->ids[r->n_ids++] = (int)strtol(p, &p, 10);
        while (*p == ',' || *p == ' ' || *p == '\n')
            p++;
    }
    p = strstr(js, "\"image_token_id\": ");
    r->image_token = p ? atoi(p + 18) : -1;
    json_str(js, "prompt", r->prompt, sizeof r->prompt);
    json_str(js, "rendered", r->rendered, sizeof r->rendered);
    free(js);
    return r->n_ids > 0 && r->image_token >= 0 && r->prompt[0] ? 0 : -1;
}

static struct vision_model *load_golden_type(const char *c, const char *type)
{
    char err[256], name[96];
    snprintf(name, sizeof name, "vision-%s-mmproj-%s.gguf", c, type);
    struct vision_model *m = vision_model_load(test_golden(name), err, sizeof err);
    if (!m)
        fprintf(stderr, "    %s\n", err);
    return m;
}

static struct vision_model *load_golden(const char *c) { return load_golden_type(c, "f32"); }

/* Preprocessing of the fixture picture equals the processor's pixel_values
 * (Pillow resize reproduced: only float rounding may differ). */
static void check_preprocess(const char *c, int want_images, int want_rows, int want_cols)
{
    char err[256], rel[96];
    struct vision_model *m = load_golden(c);
    CHECK(m);
    const struct vision_info *in = vision_model_info(m);
    struct media_image img;
    CHECK_EQ(media_image_decode_file(test_fixture("vision/image.png"), NULL, &img, err, sizeof err), 0);
    float *pix;
    int n, rows, cols;
    CHECK_EQ(vision_preprocess(m, &img, true, &pix, &n, &rows, &cols, err, sizeof err), 0);
    CHECK_EQ(n, want_images);
    CHECK_EQ(rows, want_rows);
    CHECK_EQ(cols, want_cols);
    size_t np = (size_t)n * 3 * in->image_size * in->image_size;
    snprintf(rel, sizeof rel, "vision/%s/pixels.bin", c);
    float *ref = test_read_floats(test_fixture(rel), np);
    CHECK(ref);
    double d = test_max_diff(pix, ref, np);
    printf("    %s preprocessing: max diff %.3g\n", c, d);
    CHECK_MSG(d < 1e-5, "%s pixels differ by %g", c, d);
    free(ref);
    free(pix);
    media_image_release(&img);
    vision_model_free(m);
}

TEST(vision_llava_preprocess_matches_clip_processor) { check_preprocess("llava", 1, 0, 0); }
TEST(vision_idefics3_preprocess_matches_tiling_processor) { check_preprocess("idefics3", 5, 2, 2); }

/* The encoder on the reference pixels: features and embeddings within 1e-3;
 * then the whole path from the PNG file. */
static void check_encode(const char *c)
{
    char err[256], rel[96];
    struct vision_model *m = load_golden(c);
    CHECK(m);
    const struct vision_info *in = vision_model_info(m);
    struct tpool *tp = tpool_new(2, err, sizeof err);
    struct vision_ctx *vc = vision_ctx_new(m, tp, err, sizeof err);
    CHECK(tp && vc);
    const int n_img = strcmp(c, "llava") ? 5 : 1;
    const int side = in->image_size / in->patch_size;
    size_t np = (size_t)n_img * 3 * in->image_size * in->image_size;
    size_t nf = (size_t)n_img * side * side * in->n_embd;
    size_t ne = (size_t)n_img * in->tokens_per_image * in->n_embd_lm;
    snprintf(rel, sizeof rel, "vision/%s/pixels.bin", c);
    float *pix = test_read_floats(test_fixture(rel), np);
    snprintf(rel, sizeof rel, "vision/%s/features.bin", c);
    float *feat_ref = test_read_floats(test_fixture(rel), nf);
    snprintf(rel, sizeof rel, "vision/%s/embeddings.bin", c);
    float *emb_ref = test_read_floats(test_fixture(rel), ne);
    CHECK(pix && feat_ref && emb_ref);
    float *feat = malloc(sizeof(float) * nf);
    struct vision_embd e;
    CHECK_EQ(vision_encode_pixels(vc, pix, n_img, feat, &e, err, sizeof err), 0);
    CHECK_EQ((size_t)e.n_tokens * e.n_embd, ne);
    double df = test_max_diff(feat, feat_ref, nf), de = test_max_diff(e.data, emb_ref, ne);
    printf("    %s: features max diff %.3g, embeddings max diff %.3g\n", c, df, de);
    CHECK_MSG(df < 1e-3 && de < 1e-3, "%s: features %g, embeddings %g", c, df, de);
    vision_embd_release(&e);

    size_t len;
    char *png = test_read_file(test_fixture("vision/image.png"), &len);
    CHECK(png);
    CHECK_EQ(vision_encode_bytes(vc, NULL, png, len, NULL, &e, NULL, err, sizeof err), 0);
    double dp = test_max_diff(e.data, emb_ref, ne);
    printf("    %s: embeddings from the PNG file max diff %.3g\n", c, dp);
    CHECK_MSG(dp < 1e-3, "%s: embeddings from the file differ by %g", c, dp);
    vision_embd_release(&e);
    free(png), free(pix), free(feat), free(feat_ref), free(emb_ref);
    vision_ctx_free(vc);
    tpool_free(tp);
    vision_model_free(m);
}

TEST(vision_llava_encoder_matches_reference) { check_encode("llava"); }
TEST(vision_idefics3_encoder_matches_reference) { check_encode("idefics3"); }

/* F16 matrices (the usual download): the same path within f16 rounding. */
static void check_f16(const char *c)
{
    char err[256], rel[96];
    struct vision_model *m = load_golden_type(c, "f16");
    CHECK(m);
    const struct vision_info *in = vision_model_info(m);
    struct vision_ctx *vc = vision_ctx_new(m, NULL, err, sizeof err);
    CHECK(vc);
    size_t len;
    char *png = test_read_file(test_fixture("vision/image.png"), &len);
    struct vision_embd e;
    CHECK_EQ(vision_encode_bytes(vc, NULL, png, len, NULL, &e, NULL, err, sizeof err), 0);
    size_t ne = (size_t)e.n_tokens * in->n_embd_lm;
    snprintf(rel, sizeof rel, "vision/%s/embeddings.bin", c);
    float *ref = test_read_floats(test_fixture(rel), ne);
    CHECK(ref);
    double d = test_max_diff(e.data, ref, ne);
    printf("    %s f16: embeddings max diff %.3g\n", c, d);
    CHECK_MSG(d < 0.05, "%s f16 embeddings differ by %g", c, d);
    free(ref), free(png);
    vision_embd_release(&e);
    vision_ctx_free(vc);
    vision_model_free(m);
}

TEST(vision_llava_f16_close_to_reference) { check_f16("llava"); }
TEST(vision_idefics3_f16_close_to_reference) { check_f16("idefics3"); }

/* The layout, written out with "<image>" per row, is the processor's prompt text. */
static void check_layout(const char *c)
{
    char err[256], rel[96];
    struct ref r;
    CHECK_EQ(load_ref(c, &r), 0);
    struct vision_model *m = load_golden(c);
    CHECK(m);
    struct vision_ctx *vc = vision_ctx_new(m, NULL, err, sizeof err);
    CHECK(vc);
    size_t len;
    char *png = test_read_file(test_fixture("vision/image.png"), &len);
    struct vision_embd e;
    CHECK_EQ(vision_encode_bytes(vc, NULL, png, len, NULL, &e, NULL, err, sizeof err), 0);
    struct vision_layout lay;
    CHECK_EQ(vision_layout_build(m, &e, &lay, err, sizeof err), 0);
    static char text[8192];
    size_t n = 0;
    for (int i = 0; i < lay.n; i++) {
        if (lay.seg[i].text)
            n += snprintf(text + n, sizeof text - n, "%s", lay.seg[i].text);
        else
            for (int k = 0; k < lay.seg[i].n_rows; k++)
                n += snprintf(text + n, sizeof text - n, "<image>");
    }
    CHECK_MSG(strstr(r.rendered, text) != NULL, "%s: layout text not in the reference prompt:\n%s", c, text);
    snprintf(rel, sizeof rel, "%s", vision_image_marker(m));
    CHECK(strcmp(rel, "<image>") == 0);
    vision_layout_release(&lay);
    vision_embd_release(&e);
    free(png);
    vision_ctx_free(vc);
    vision_model_free(m);
}

TEST(vision_llava_layout_matches_processor) { check_layout("llava"); }
TEST(vision_idefics3_layout_matches_processor) { check_layout("idefics3"); }

/* Fusion: the reference prompt through vision_prompt_build (the processor's
 * ids, image rows where its image tokens are), token embeddings and image
 * rows through the language model: the full model's logits. */
static void check_logits(const char *c)
{
    char err[256], rel[96], name[96];
    struct ref r;
    CHECK_EQ(load_ref(c, &r), 0);
    struct vision_model *vm = load_golden(c);
    CHECK(vm);
    snprintf(name, sizeof name, "vision-%s-lm-f32.gguf", c);
    struct llm_model *lm = llm_model_load(test_golden(name), NULL, err, sizeof err);
    CHECK_MSG(lm, "%s", err);
    const struct llm_hparams *hp = llm_model_hparams(lm);
    CHECK_EQ(hp->n_embd, vision_model_info(vm)->n_embd_lm);
    struct vision_ctx *vc = vision_ctx_new(vm, NULL, err, sizeof err);
    size_t len;
    char *png = test_read_file(test_fixture("vision/image.png"), &len);
    struct vision_embd e;
    CHECK_EQ(vision_encode_bytes(vc, NULL, png, len, NULL, &e, NULL, err, sizeof err), 0);
    struct vision_prompt vp;
    CHECK_EQ(vision_prompt_build(vm, llm_model_tokenizer(lm), r.prompt, strlen(r.prompt), true, &e, 1,
                                 &vp, err, sizeof err), 0);
    CHECK_EQ(vp.n_positions, r.n_ids);
    const struct gguf_tensor *te = gguf_find_tensor(llm_model_gguf(lm), "token_embd.weight");
    CHECK(te);
    struct omni_tensor tok = { te->type, { te->ne[0], te->ne[1] }, te->data };
    const int n = r.n_ids, D = hp->n_embd, V = hp->n_vocab;
    float *x = malloc(sizeof(float) * n * D), *logits = malloc(sizeof(float) * n * V);
    int32_t pos[256], seq[256] = { 0 }, table[64];
    bool want[256];
    for (int i = 0, k = 0; k < vp.n_parts; k++) {
        const struct vision_prompt_part *pt = &vp.parts[k];
        CHECK(pt->embd ? pt->media_hash == e.key_hash : pt->media_hash == 0);
        for (int j = 0; j < pt->n; j++, i++) {
            if (pt->embd) {
                CHECK_MSG(r.ids[i] == r.image_token, "position %d: image row where the "
                          "processor has token %d", i, r.ids[i]);
                memcpy(x + (size_t)i * D, pt->embd + (size_t)j * D, sizeof(float) * D);
            } else {
                CHECK_MSG(pt->tokens[j] == r.ids[i], "position %d: token %d, processor %d", i,
                          pt->tokens[j], r.ids[i]);
                omni_tensor_get_row(&tok, pt->tokens[j], x + (size_t)i * D);
            }
            pos[i] = i, want[i] = true;
        }
    }
    for (int i = 0; i < 64; i++)
        table[i] = i;
    struct llm_ctx *ctx = llm_ctx_new(lm, n, NULL, err, sizeof err);
    struct llm_kv *kv = llm_kv_new(lm, GGML_TYPE_F32, 16, 16, err, sizeof err);
    CHECK(ctx && kv);
    struct llm_seq_view view = { table, 16 };
    struct llm_batch b = { .n_tokens = n, .embd = x, .pos = pos, .seq = seq, .want_logits = want };
    CHECK_EQ(llm_forward(ctx, &b, kv, &view, logits), n);
    snprintf(rel, sizeof rel, "vision/%s/logits.bin", c);
    float *ref = test_read_floats(test_fixture(rel), (size_t)n * V);
    CHECK(ref);
    double d = test_max_diff(logits, ref, (size_t)n * V);
    printf("    %s: fused logits max diff %.3g\n", c, d);
    CHECK_MSG(d < 1e-3, "%s: logits differ by %g", c, d);
    /* marker and image counts must agree */
    vision_prompt_release(&vp);
    CHECK_EQ(vision_prompt_build(vm, llm_model_tokenizer(lm), r.prompt, strlen(r.prompt), true, &e,
                                 2, &vp, err, sizeof err), OMNI_ERR_ARG);
    CHECK_EQ(vision_prompt_build(vm, llm_model_tokenizer(lm), "no image", 8, true, &e, 1, &vp, err,
                                 sizeof err), OMNI_ERR_ARG);
    CHECK(vp.parts == NULL);
    free(ref), free(x), free(logits), free(png);
    vision_prompt_release(&vp);
    llm_kv_free(kv);
    llm_ctx_free(ctx);
    vision_embd_release(&e);
    vision_ctx_free(vc);
    llm_model_free(lm);
    vision_model_free(vm);
}

TEST(vision_llava_fused_logits_match_reference) { check_logits("llava"); }
TEST(vision_idefics3_fused_logits_match_reference) { check_logits("idefics3"); }

// ---- cache ------------------------------------------------------------------------

TEST(vision_cache_hits_skip_the_encoder_and_evict_lru)
{
    char err[256];
    struct vision_model *m = load_golden("llava");
    CHECK(m);
    struct vision_ctx *vc = vision_ctx_new(m, NULL, err, sizeof err);
    const struct vision_info *in = vision_model_info(m);
    size_t one = sizeof(float) * in->tokens_per_image * in->n_embd_lm;
    struct vision_cache *cache = vision_cache_new(one * 2 + 1024); /* two entries fit */
    size_t len;
    char *png = test_read_file(test_fixture("vision/image.png"), &len);
    CHECK(vc && cache && png);
    struct vision_embd a, b;
    bool hit;
    CHECK_EQ(vision_encode_bytes(vc, cache, png, len, NULL, &a, &hit, err, sizeof err), 0);
    CHECK(!hit);
    CHECK_EQ(vision_encode_bytes(vc, cache, png, len, NULL, &b, &hit, err, sizeof err), 0);
    CHECK(hit);
    CHECK_EQ(a.n_tokens, b.n_tokens);
    CHECK(memcmp(a.data, b.data, one) == 0);
    CHECK(a.key_hash == b.key_hash && a.key_hash == vision_cache_key(m, png, len));
    struct vision_cache_stats s = vision_cache_stats(cache);
    CHECK_EQ(s.hits, 1);
    CHECK_EQ(s.misses, 1);
    CHECK_EQ(s.entries, 1);
    /* two other keys push the first (least recently used) out */
    vision_cache_put(cache, 1, &a, 0);
    vision_cache_put(cache, 2, &a, 0);
    s = vision_cache_stats(cache);
    CHECK_EQ(s.entries, 2);
    CHECK_EQ(s.evictions, 1);
    CHECK(s.bytes <= s.max_bytes);
    struct vision_embd c;
    CHECK(!vision_cache_get(cache, a.key_hash, &c));
    CHECK(vision_cache_get(cache, 1, &c));
    vision_embd_release(&c);
    /* a different image is a different key */
    png[len - 20] ^= 1;
    CHECK(vision_cache_key(m, png, len) != a.key_hash);
    vision_embd_release(&a);
    vision_embd_release(&b);
    free(png);
    vision_cache_free(cache);
    vision_ctx_free(vc);
    vision_model_free(m);
}

TEST(vision_video_frames_encoded_once)
{
    SKIP_IF_NO_SHARED();
    char err[256];
    struct vision_model *m = load_golden("idefics3");
    CHECK(m);
    struct vision_ctx *vc = vision_ctx_new(m, NULL, err, sizeof err);
    struct vision_cache *cache = vision_cache_new(16 << 20);
    size_t len;
    char *mp4 = test_read_file(test_shared("video/sample.mp4"), &len);
    CHECK(vc && cache && mp4);
    struct vision_embd *f;
    double *t;
    int n, hits;
    CHECK_EQ(vision_encode_video(vc, cache, mp4, len, NULL, &f, &n, &t, &hits, err, sizeof err), 0);
    CHECK_EQ(n, 4);
    CHECK_EQ(hits, 0);
    const int per = vision_model_info(m)->tokens_per_image;
    for (int i = 0; i < n; i++) {
        /* one global view per frame, no tiles */
        CHECK(f[i].n_images == 1 && f[i].n_tokens == per && f[i].tile_rows == 0);
        CHECK_NEAR(t[i], i + 0.5, 0.051);
    }
    CHECK(memcmp(f[0].data, f[3].data, sizeof(float) * per * f[0].n_embd) != 0);
    struct vision_layout lay;
    CHECK_EQ(vision_layout_build(m, &f[0], &lay, err, sizeof err), 0);
    CHECK(lay.n == 3 && strcmp(lay.seg[0].text, "<fake_token_around_image><global-img>") == 0);
    vision_layout_release(&lay);
    struct vision_embd *g;
    CHECK_EQ(vision_encode_video(vc, cache, mp4, len, NULL, &g, &n, NULL, &hits, err, sizeof err), 0);
    CHECK_EQ(hits, 4);
    for (int i = 0; i < n; i++) {
        CHECK(memcmp(f[i].data, g[i].data, sizeof(float) * per * f[i].n_embd) == 0);
        vision_embd_release(&f[i]);
        vision_embd_release(&g[i]);
    }
    free(f), free(g), free(t);
    CHECK(vision_encode_video(vc, cache, mp4, 1000, NULL, &f, &n, NULL, NULL, err, sizeof err) < 0);
    CHECK(f == NULL && n == 0);
    free(mp4);
    vision_cache_free(cache);
    vision_ctx_free(vc);
    vision_model_free(m);
}

// ---- resampler --------------------------------------------------------------------

TEST(vision_resample_identity_and_constant)
{
    uint8_t src[8 * 6 * 3], dst[5 * 9 * 3];
    for (size_t i = 0; i < sizeof src; i++)
        src[i] = (uint8_t)(i * 37);
    uint8_t same[sizeof src];
    vision_resample(src, 8, 6, same, 8, 6, VISION_FILTER_LANCZOS);
    CHECK(memcmp(src, same, sizeof src) == 0);
    memset(src, 77, sizeof src);
    for (int f = VISION_FILTER_BILINEAR; f <= VISION_FILTER_LANCZOS; f++) {
        vision_resample(src, 8, 6, dst, 5, 9, f);
        for (size_t i = 0; i < sizeof dst; i++)
            CHECK_EQ(dst[i], 77);
    }
}

// ---- broken files -------------------------------------------------------------------

TEST(vision_rejects_broken_mmproj)
{
    char err[256];
    size_t len;
    const char *path = test_golden("vision-llava-mmproj-f32.gguf");
    char *buf = test_read_file(path, &len);
    CHECK(buf);
    char tmp[512];
    snprintf(tmp, sizeof tmp, "%s/broken-mmproj.gguf", test_tmpdir());
    FILE *f = fopen(tmp, "wb");
    fwrite(buf, 1, len / 2, f);
    fclose(f);
    CHECK(vision_model_load(tmp, err, sizeof err) == NULL);
    CHECK_STR_CONTAINS(err, "broken-mmproj.gguf");
    for (size_t cut = 0; cut < len; cut += len / 37 + 1) { /* truncated anywhere */
        f = fopen(tmp, "wb");
        fwrite(buf, 1, cut, f);
        fclose(f);
        CHECK_MSG(vision_model_load(tmp, err, sizeof err) == NULL, "loaded %zu of %zu bytes", cut, len);
    }
    /* an LM GGUF is no mmproj */
    CHECK(vision_model_load(test_golden("vision-llava-lm-f32.gguf"), err, sizeof err) == NULL);
    CHECK_STR_CONTAINS(err, "projector_type");
    /* a projector type we do not run */
    char *p = memmem(buf, len, "mlp", 3);
    CHECK(p);
    memcpy(p, "ldp", 3);
    f = fopen(tmp, "wb");
    fwrite(buf, 1, len, f);
    fclose(f);
    CHECK(vision_model_load(tmp, err, sizeof err) == NULL);
    CHECK_STR_CONTAINS(err, "'ldp' not supported");
    memcpy(p, "mlp", 3);
    /* a missing tensor, and one of the wrong shape (the class token renamed) */
    p = memmem(buf, len, "v.blk.1.attn_q.weight", 21);
    CHECK(p);
    p[8] = 'x';
    f = fopen(tmp, "wb");
    fwrite(buf, 1, len, f);
    fclose(f);
    CHECK(vision_model_load(tmp, err, sizeof err) == NULL);
    CHECK_STR_CONTAINS(err, "'v.blk.1.attn_q.weight' missing");
    p[8] = 'a';
    p = memmem(buf, len, "clip.vision.patch_size", 22);
    CHECK(p);
    p[17] = 'X'; /* the key disappears */
    f = fopen(tmp, "wb");
    fwrite(buf, 1, len, f);
    fclose(f);
    CHECK(vision_model_load(tmp, err, sizeof err) == NULL);
    CHECK_STR_CONTAINS(err, "clip.vision.patch_size");
    free(buf);
    CHECK(vision_model_load("/nonexistent/mmproj.gguf", err, sizeof err) == NULL);
}

/* vision_image_tokens (what a request's images will take of the context,
 * from their headers) equals the rows preprocessing then produces, over
 * shapes from square to extreme, with and without tiles. */
static void check_image_tokens(const char *c)
{
    char err[256];
    struct vision_model *m = load_golden(c);
    CHECK(m);
    const struct vision_info *in = vision_model_info(m);
    static const int sizes[][2] = { { 160, 120 }, { 120, 160 }, { 1, 1 }, { 37, 300 },
                                    { 300, 37 }, { 2000, 3 }, { 513, 1024 }, { 64, 64 } };
    for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++)
        for (int tiles = 0; tiles < 2; tiles++) {
            struct media_image img;
            CHECK_EQ(media_image_alloc(&img, sizes[i][0], sizes[i][1], err, sizeof err), 0);
            float *pix;
            int n, rows, cols;
            CHECK_EQ(vision_preprocess(m, &img, tiles, &pix, &n, &rows, &cols, err, sizeof err), 0);
            free(pix);
            media_image_release(&img);
            int want = n * in->tokens_per_image;
            int got = vision_image_tokens(m, sizes[i][0], sizes[i][1], tiles, err, sizeof err);
            CHECK_MSG(got == want, "%s %dx%d tiles %d: %d tokens, preprocessing gives %d", c,
                      sizes[i][0], sizes[i][1], tiles, got, want);
        }
    CHECK_EQ(vision_image_tokens(m, 0, 10, true, err, sizeof err), OMNI_ERR_ARG);
    vision_model_free(m);
}

TEST(vision_llava_image_tokens_from_the_size) { check_image_tokens("llava"); }
TEST(vision_idefics3_image_tokens_from_the_size) { check_image_tokens("idefics3"); }
