/* test_vision_gemma3.c - Gemma 3 vision against the tiny Hugging Face
 * Gemma3ForConditionalGeneration of tests/fixtures/vision/gemma3
 * (tools/make_vision_golden.py --case gemma3, converted by
 * tools/hf_mmproj_to_gguf.py into $OMNI_GOLDEN_DIR): the processor's pixel
 * values, the SigLIP features, the pooled / normed / projected embeddings,
 * the prompt ids of the expanded <start_of_image>, and the language model's
 * logits, greedy tokens and top-5 logprobs with the image's tokens attending
 * to each other both ways (llm_batch.span_*), directly and through the
 * engine. Skipped while the fixture is not there. */
#define _GNU_SOURCE /* memmem */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "llm/model.h"
#include "media/image.h"
#include "src/core/gguf.h"
#include "src/core/omni.h"
#include "src/core/tensor.h"
#include "src/engine/engine.h"
#include "test.h"
#include "vision/vision.h"

#define GDIR "vision/gemma3/"
#define MAX_IDS 256

/* The reference.json fields the tests read. */
struct gref {
    int ids[MAX_IDS], n_ids;
    int greedy[16], n_greedy;
    int top_ids[16 * 5];
    double top_lp[16 * 5];
    int image_token, span[2], window;
    char rendered[512];
    double pil_diff, bidir_diff;
};

/* Numbers of an array field ("key": [...], nested arrays flattened), at
 * most cap; the count, or -1 without the key. */
static int json_nums(const char *js, const char *key, double *out, int cap)
{
    char pat[64];
    snprintf(pat, sizeof pat, "\"%s\": [", key);
    const char *p = strstr(js, pat);
    if (!p)
        return -1;
    int n = 0, depth = 1;
    for (p += strlen(pat); *p && depth > 0 && n < cap;) {
        if (*p == '[' || *p == ']') {
            depth += *p == '[' ? 1 : -1;
            p++;
        } else if (*p == '-' || (*p >= '0' && *p <= '9')) {
            char *end;
            out[n++] = strtod(p, &end);
            p = end;
        } else {
            p++;
        }
    }
    return n;
}

static int json_ints(const char *js, const char *key, int *out, int cap)
{
    double v[MAX_IDS];
    int n = json_nums(js, key, v, cap < MAX_IDS ? cap : MAX_IDS);
    for (int i = 0; i < n; i++)
        out[i] = (int)v[i];
    return n;
}

static double json_num(const char *js, const char *key)
{
    char pat[64];
    snprintf(pat, sizeof pat, "\"%s\": ", key);
    const char *p = strstr(js, pat);
    return p ? strtod(p + strlen(pat), NULL) : NAN;
}

/* The reference, or false (test skipped) when the fixture is not there. */
static bool load_ref(struct gref *r)
{
    size_t len;
    char *js = test_read_file(test_fixture(GDIR "reference.json"), &len);
    if (!js) {
        test_skip("no tests/fixtures/vision/gemma3 (tools/make_vision_golden.py --case gemma3)");
        return false;
    }
    memset(r, 0, sizeof *r);
    r->n_ids = json_ints(js, "ids", r->ids, MAX_IDS);
    r->n_greedy = json_ints(js, "greedy", r->greedy, 16);
    json_ints(js, "top5_ids", r->top_ids, 16 * 5);
    json_nums(js, "top5_logprobs", r->top_lp, 16 * 5);
    json_ints(js, "image_span", r->span, 2);
    r->image_token = (int)json_num(js, "image_token_id");
    r->window = (int)json_num(js, "sliding_window");
    r->pil_diff = json_num(js, "pixels_vs_pillow_max_diff");
    r->bidir_diff = json_num(js, "bidirectional_vs_causal_max_diff");
    const char *p = strstr(js, "\"rendered\": \"");
    size_t k = 0;
    for (p = p ? p + 13 : ""; *p && *p != '"' && k + 1 < sizeof r->rendered; p++)
        r->rendered[k++] = *p == '\\' ? (*++p == 'n' ? '\n' : *p) : *p;
    r->rendered[k] = 0;
    free(js);
    return r->n_ids > 0 && r->n_greedy > 0;
}

static struct vision_model *load_vm(const char *type)
{
    char err[256], name[64];
    snprintf(name, sizeof name, "vision-gemma3-mmproj-%s.gguf", type);
    struct vision_model *m = vision_model_load(test_golden(name), err, sizeof err);
    if (!m)
        fprintf(stderr, "    %s\n", err);
    return m;
}

static void free_vm(void *m) { vision_model_free(m); }
static void free_lm(void *m) { llm_model_free(m); }
static void free_engine(void *e) { engine_free(e); }

TEST(gemma3_pixels_features_embeddings_match_reference)
{
    struct gref ref;
    if (!load_ref(&ref))
        return;
    char err[256];
    struct vision_model *vm = load_vm("f32");
    CHECK(vm);
    test_defer(free_vm, vm);
    const struct vision_info *in = vision_model_info(vm);
    CHECK(in->family == VISION_GEMMA3 && !strcmp(in->projector, "gemma3"));
    CHECK_EQ(in->scale_factor, 4);
    CHECK_EQ(in->tokens_per_image, 16);
    CHECK(!strcmp(vision_image_marker(vm), "<start_of_image>"));
    CHECK_EQ(vision_image_tokens(vm, 4000, 30, true, err, sizeof err), 16);
    const int S = in->image_size, D = in->n_embd, E = in->n_embd_lm, P = (S / in->patch_size) * (S / in->patch_size);

    // the processor's pixel values: Pillow's bilinear resize to S x S, (x / 255 - 0.5) / 0.5
    struct media_image img;
    CHECK_EQ(media_image_decode_file(test_fixture("vision/image.png"), NULL, &img, err, sizeof err), 0);
    float *pixels;
    int n_images, rows, cols;
    CHECK_EQ(vision_preprocess(vm, &img, true, &pixels, &n_images, &rows, &cols, err, sizeof err), 0);
    media_image_release(&img);
    CHECK_EQ(n_images, 1);
    float *rpix = test_read_floats(test_fixture(GDIR "pixels.bin"), (size_t)3 * S * S);
    CHECK(rpix);
    const double dp = test_max_diff(pixels, rpix, (size_t)3 * S * S);
    printf("    pixels max diff %.3g (processor vs Pillow in the reference: %.3g)\n", dp, ref.pil_diff);
    if (ref.pil_diff > 1e-6) { /* the processor did not resize with Pillow: ours is Pillow's */
        float *pil = test_read_floats(test_fixture(GDIR "pixels_pil.bin"), (size_t)3 * S * S);
        CHECK(pil);
        CHECK(test_max_diff(pixels, pil, (size_t)3 * S * S) < 1e-6);
        free(pil);
    } else {
        CHECK_MSG(dp < 1e-6, "pixels differ by %g", dp);
    }
    free(pixels);

    // features and embeddings from the reference pixels
    struct vision_ctx *vc = vision_ctx_new(vm, NULL, err, sizeof err);
    CHECK(vc);
    float *feat = malloc(sizeof(float) * P * D);
    struct vision_embd e;
    CHECK(feat);
    CHECK_EQ(vision_encode_pixels(vc, rpix, 1, feat, &e, err, sizeof err), 0);
    CHECK(e.n_tokens == 16 && e.n_embd == E);
    float *rfeat = test_read_floats(test_fixture(GDIR "features.bin"), (size_t)P * D);
    float *remb = test_read_floats(test_fixture(GDIR "embeddings.bin"), (size_t)16 * E);
    CHECK(rfeat && remb);
    const double df = test_max_diff(feat, rfeat, (size_t)P * D), de = test_max_diff(e.data, remb, (size_t)16 * E);
    printf("    features max diff %.3g, embeddings %.3g (F32 file)\n", df, de);
    CHECK_MSG(df < 1e-4, "features differ by %g", df);
    CHECK_MSG(de < 1e-4, "embeddings differ by %g", de);
    vision_embd_release(&e);
    vision_ctx_free(vc);

    // the F16 file: the same within F16 rounding of the weights
    struct vision_model *vh = load_vm("f16");
    CHECK(vh);
    test_defer(free_vm, vh);
    vc = vision_ctx_new(vh, NULL, err, sizeof err);
    CHECK(vc);
    CHECK_EQ(vision_encode_pixels(vc, rpix, 1, NULL, &e, err, sizeof err), 0);
    const double dh = test_max_diff(e.data, remb, (size_t)16 * E);
    printf("    embeddings max diff %.3g (F16 file)\n", dh);
    CHECK_MSG(dh < 2e-2, "F16 embeddings differ by %g", dh);
    vision_embd_release(&e);
    vision_ctx_free(vc);
    free(feat), free(rfeat), free(remb), free(rpix);
}

/* The prompt, the image's rows and the model of the fixture. */
struct setup {
    struct vision_model *vm;
    struct llm_model *lm;
    struct vision_embd img;
    struct vision_prompt vp;
};

static void free_setup(void *p)
{
    struct setup *s = p;
    vision_prompt_release(&s->vp);
    vision_embd_release(&s->img);
    llm_model_free(s->lm);
    vision_model_free(s->vm);
    free(s);
}

/* *out = the setup (freed after the test), left NULL on a failed CHECK. */
static void make_setup(const struct gref *ref, struct setup **out)
{
    char err[256];
    struct setup *s = calloc(1, sizeof *s);
    CHECK(s);
    test_defer(free_setup, s);
    s->vm = load_vm("f32");
    CHECK(s->vm);
    s->lm = llm_model_load(test_golden("vision-gemma3-lm-f32.gguf"), NULL, err, sizeof err);
    CHECK_MSG(s->lm, "%s", err);
    const struct llm_hparams *hp = llm_model_hparams(s->lm);
    CHECK(hp->arch == LLM_ARCH_GEMMA3 && hp->embd_bidirectional && hp->n_swa == ref->window);
    struct vision_ctx *vc = vision_ctx_new(s->vm, NULL, err, sizeof err);
    CHECK(vc);
    struct media_image im;
    CHECK_EQ(media_image_decode_file(test_fixture("vision/image.png"), NULL, &im, err, sizeof err), 0);
    const int rc = vision_encode_image(vc, &im, true, &s->img, err, sizeof err);
    media_image_release(&im);
    vision_ctx_free(vc);
    CHECK_MSG(rc == 0, "%s", err);
    CHECK_MSG(vision_prompt_build(s->vm, llm_model_tokenizer(s->lm), ref->rendered, strlen(ref->rendered), true,
                                  &s->img, 1, &s->vp, err, sizeof err) == 0, "%s", err);
    *out = s;
}

/* The chat template's <start_of_image> becomes "\n\n<start_of_image>" +
 * rows + "<end_of_image>\n\n", tokenized with the text around it as the
 * processor does: the reference's ids position by position. */
TEST(gemma3_prompt_ids_match_processor)
{
    struct gref ref;
    if (!load_ref(&ref))
        return;
    struct setup *s = NULL;
    make_setup(&ref, &s);
    if (!s)
        return;
    CHECK_EQ(s->vp.n_positions, ref.n_ids);
    CHECK_EQ(s->vp.n_parts, 4); /* BOS, the text up to the image, its rows, the rest */
    for (int i = 0, q = 0; q < s->vp.n_parts; q++)
        for (int j = 0; j < s->vp.parts[q].n; j++, i++) {
            const int id = s->vp.parts[q].embd ? ref.image_token : s->vp.parts[q].tokens[j];
            CHECK_MSG(id == ref.ids[i], "position %d: token %d, processor %d", i, id, ref.ids[i]);
        }
    CHECK(s->vp.parts[2].embd && s->vp.parts[2].n == 16 && s->vp.parts[0].n + s->vp.parts[1].n == ref.span[0]);
}

/* log_softmax of one row of V logits into lp. */
static void log_softmax(const float *x, int V, double *lp)
{
    double mx = x[0], sum = 0;
    for (int v = 1; v < V; v++)
        mx = x[v] > mx ? x[v] : mx;
    for (int v = 0; v < V; v++)
        sum += exp(x[v] - mx);
    for (int v = 0; v < V; v++)
        lp[v] = x[v] - mx - log(sum);
}

/* The prompt as the engine runs it: its token runs through the token path,
 * the image's rows as embeddings in one batch whose positions form a span
 * (or none: causal); every position's logits. */
static int forward_prompt(struct setup *s, struct llm_ctx *ctx, struct llm_kv *kv, bool spans, float *logits)
{
    const int V = llm_model_hparams(s->lm)->n_vocab;
    int32_t table[16], pos[MAX_IDS], seq[MAX_IDS] = { 0 }, sf[MAX_IDS], sl[MAX_IDS];
    bool want[MAX_IDS];
    for (int i = 0; i < 16; i++)
        table[i] = i;
    struct llm_seq_view view = { table, 16 };
    int p = 0;
    for (int q = 0; q < s->vp.n_parts; q++) {
        const struct vision_prompt_part *pt = &s->vp.parts[q];
        for (int j = 0; j < pt->n; j++) {
            pos[j] = p + j, want[j] = true;
            sf[j] = p, sl[j] = p + pt->n - 1;
        }
        struct llm_batch b = { .n_tokens = pt->n, .token = pt->tokens, .embd = pt->embd, .pos = pos, .seq = seq,
                               .want_logits = want, .span_first = pt->embd && spans ? sf : NULL,
                               .span_last = pt->embd && spans ? sl : NULL };
        const int rc = llm_forward(ctx, &b, kv, &view, logits + (size_t)p * V);
        if (rc != pt->n)
            return rc < 0 ? rc : -1;
        p += pt->n;
    }
    return p;
}

/* Logits of the whole prompt within 1e-3 of transformers' (the image's
 * tokens attending to each other both ways; the window of 8, shorter than
 * the 16 image tokens, still masks older keys in the sliding layers), in
 * the prefill blocks and token by token (batch-invariant mode); causal
 * attention gives other logits; then 6 greedy tokens and their top-5
 * logprobs. */
TEST(gemma3_logits_greedy_top5_match_reference)
{
    struct gref ref;
    if (!load_ref(&ref))
        return;
    char err[256];
    struct setup *s = NULL;
    make_setup(&ref, &s);
    if (!s)
        return;
    const struct llm_hparams *hp = llm_model_hparams(s->lm);
    const int n = ref.n_ids, V = hp->n_vocab, D = hp->n_embd;
    CHECK(n + ref.n_greedy < 16 * 16);
    struct llm_ctx *ctx = llm_ctx_new(s->lm, 64, NULL, err, sizeof err);
    struct llm_kv *kv = llm_kv_new(s->lm, GGML_TYPE_F32, 16, 16, err, sizeof err);
    float *logits = malloc(sizeof(float) * (size_t)n * V), *rl = test_read_floats(test_fixture(GDIR "logits.bin"), (size_t)n * V);
    double *lp = malloc(sizeof(double) * V);
    CHECK(ctx && kv && logits && rl && lp);
    CHECK_EQ(forward_prompt(s, ctx, kv, true, logits), n);
    const double d = test_max_diff(logits, rl, (size_t)n * V);
    printf("    logits max diff %.3g over %d positions (transformers: bidirectional vs causal %.3g)\n", d, n,
           ref.bidir_diff);
    CHECK_MSG(d < 1e-3, "logits differ by %g", d);
    llm_ctx_set_batch_invariant(ctx, true); /* every token on the token-by-token attention path */
    CHECK_EQ(forward_prompt(s, ctx, kv, true, logits), n);
    const double dt = test_max_diff(logits, rl, (size_t)n * V);
    printf("    token by token: %.3g\n", dt);
    CHECK_MSG(dt < 1e-3, "token path logits differ by %g", dt);
    llm_ctx_set_batch_invariant(ctx, false);
    if (ref.bidir_diff > 1e-2) { /* causal attention is not what the reference does */
        CHECK_EQ(forward_prompt(s, ctx, kv, false, logits), n);
        const double dc = test_max_diff(logits, rl, (size_t)n * V);
        printf("    causal (no spans): %.3g\n", dc);
        CHECK(dc > 1e-2);
        CHECK_EQ(forward_prompt(s, ctx, kv, true, logits), n);
    }
    // greedy decoding after the prompt, top-5 logprobs
    const struct gguf_tensor *te = gguf_find_tensor(llm_model_gguf(s->lm), "token_embd.weight");
    CHECK(te && D > 0);
    const float *lg = logits + (size_t)(n - 1) * V;
    double worst = 0;
    int32_t table[16];
    for (int i = 0; i < 16; i++)
        table[i] = i;
    struct llm_seq_view view = { table, 16 };
    for (int g = 0; g < ref.n_greedy; g++) {
        log_softmax(lg, V, lp);
        int best = 0;
        for (int v = 1; v < V; v++)
            best = lg[v] > lg[best] ? v : best;
        CHECK_MSG(best == ref.greedy[g], "greedy token %d: %d, reference %d", g, best, ref.greedy[g]);
        for (int k = 0; k < 5; k++) {
            const double e = fabs(lp[ref.top_ids[g * 5 + k]] - ref.top_lp[g * 5 + k]);
            worst = e > worst ? e : worst;
        }
        int32_t tok = best, tp = n + g, sq = 0;
        bool w = true;
        struct llm_batch b = { .n_tokens = 1, .token = &tok, .pos = &tp, .seq = &sq, .want_logits = &w };
        CHECK_EQ(llm_forward(ctx, &b, kv, &view, logits), 1);
        lg = logits;
    }
    printf("    greedy: %d tokens as the reference, top-5 logprobs max diff %.3g\n", ref.n_greedy, worst);
    CHECK_MSG(worst < 1e-3, "top-5 logprobs differ by %g", worst);
    free(logits), free(rl), free(lp);
    llm_kv_free(kv);
    llm_ctx_free(ctx);
}

/* Bad span batches are refused, not run. */
TEST(gemma3_span_batches_checked)
{
    struct gref ref;
    if (!load_ref(&ref))
        return;
    char err[256];
    struct llm_model *lm = llm_model_load(test_golden("vision-gemma3-lm-f32.gguf"), NULL, err, sizeof err);
    CHECK_MSG(lm, "%s", err);
    test_defer(free_lm, lm);
    struct llm_ctx *ctx = llm_ctx_new(lm, 8, NULL, err, sizeof err);
    struct llm_kv *kv = llm_kv_new(lm, GGML_TYPE_F32, 16, 2, err, sizeof err);
    CHECK(ctx && kv);
    int32_t tok[2] = { 1, 2 }, pos[2] = { 0, 1 }, seq[2] = { 0, 0 }, table[2] = { 0, 1 };
    int32_t sf[2] = { 0, 0 }, sl[2] = { 1, 1 };
    struct llm_seq_view view = { table, 2 };
    struct llm_batch b = { .n_tokens = 2, .token = tok, .pos = pos, .seq = seq, .span_first = sf, .span_last = sl };
    float *logits = malloc(sizeof(float) * llm_model_hparams(lm)->n_vocab);
    CHECK(logits);
    CHECK_EQ(llm_forward(ctx, &b, kv, &view, logits), 1);
    sf[1] = 2; /* a span that does not hold its token */
    CHECK_EQ(llm_forward(ctx, &b, kv, &view, logits), OMNI_ERR_ARG);
    sf[1] = 0, sl[0] = 40; /* keys past the block table */
    CHECK_EQ(llm_forward(ctx, &b, kv, &view, logits), OMNI_ERR_LIMIT);
    sl[0] = 1;
    b.span_first = NULL; /* span_last without span_first */
    CHECK_EQ(llm_forward(ctx, &b, kv, &view, logits), OMNI_ERR_ARG);
    free(logits);
    llm_kv_free(kv);
    llm_ctx_free(ctx);
}

struct ggen {
    int32_t tok[32];
    int n;
};

static void ggen_event(void *user, const struct engine_event *ev)
{
    struct ggen *g = user;
    if (ev->type == ENGINE_EV_TOKEN && g->n < 32)
        g->tok[g->n++] = ev->token;
}

/* The prompt as engine segments: the reference's greedy tokens (the image
 * one span, never cut by the chunks), again from the prefix cache; an image
 * longer than a batch is refused with the reason. */
TEST(gemma3_engine_greedy_matches_reference)
{
    struct gref ref;
    if (!load_ref(&ref))
        return;
    char err[256];
    struct setup *s = NULL;
    make_setup(&ref, &s);
    if (!s)
        return;
    struct engine_segment segs[4];
    CHECK(s->vp.n_parts <= 4);
    for (int i = 0; i < s->vp.n_parts; i++) {
        const struct vision_prompt_part *pt = &s->vp.parts[i];
        segs[i] = (struct engine_segment){ pt->tokens, pt->embd, pt->n, pt->media_hash, 0, 0, 0, 0 };
    }
    for (int small = 0; small < 2; small++) {
        struct engine_params ep = engine_default_params();
        ep.n_threads = 1;
        ep.kv_type = GGML_TYPE_F32;
        ep.kv_memory_bytes = 4 << 20;
        ep.kv_block_size = 8;
        ep.max_batch_tokens = small ? 12 : 20; /* 20: text chunks stop at the image, 16 rows in one */
        struct engine *e = engine_new(&ep, err, sizeof err);
        CHECK_MSG(e, "%s", err);
        test_defer(free_engine, e);
        CHECK_MSG(engine_add_model(e, s->lm, "gemma3", err, sizeof err) >= 0, "%s", err);
        CHECK_MSG(engine_start(e, err, sizeof err) == 0, "%s", err);
        for (int round = 0; round < (small ? 1 : 2); round++) {
            struct ggen g = { .n = 0 };
            struct engine_request rq = engine_default_request();
            rq.segments = segs, rq.n_segments = s->vp.n_parts;
            rq.max_tokens = ref.n_greedy, rq.ignore_eog = true;
            rq.sampling.temperature = 0;
            rq.on_event = ggen_event, rq.user = &g;
            const int rc = engine_generate(e, &rq, err, sizeof err);
            if (small) {
                CHECK(rc < 0);
                CHECK_STR_CONTAINS(err, "does not fit one batch");
                continue;
            }
            CHECK_MSG(rc == 0, "%s", err);
            CHECK_EQ(g.n, ref.n_greedy);
            for (int i = 0; i < ref.n_greedy; i++)
                CHECK_MSG(g.tok[i] == ref.greedy[i], "round %d token %d: %d, reference %d", round, i, g.tok[i],
                          ref.greedy[i]);
        }
        if (!small) {
            struct engine_stats st;
            engine_stats(e, &st);
            printf("    engine: %d greedy tokens as the reference twice, prefix hit tokens %llu\n", ref.n_greedy,
                   (unsigned long long)st.prefix_hit_tokens);
            CHECK(st.prefix_hit_tokens > 0);
        }
        test_release(e);
    }
}

static void write_file(const char *path, const char *buf, size_t n)
{
    FILE *f = fopen(path, "wb");
    if (f) {
        fwrite(buf, 1, n, f);
        fclose(f);
    }
}

/* Truncated files and missing projector tensors fail with the file and
 * the tensor named, never crash. */
TEST(gemma3_rejects_broken_mmproj)
{
    struct gref ref;
    if (!load_ref(&ref))
        return;
    char err[256], tmp[512];
    size_t len;
    char *buf = test_read_file(test_golden("vision-gemma3-mmproj-f16.gguf"), &len);
    CHECK(buf);
    snprintf(tmp, sizeof tmp, "%s/broken-gemma3-mmproj.gguf", test_tmpdir());
    for (size_t cut = 0; cut < len; cut += len / 29 + 1) {
        write_file(tmp, buf, cut);
        struct vision_model *m = vision_model_load(tmp, err, sizeof err);
        vision_model_free(m);
        CHECK_MSG(m == NULL, "loaded %zu of %zu bytes", cut, len);
        CHECK_STR_CONTAINS(err, "broken-gemma3-mmproj.gguf");
    }
    static const char *names[] = { "mm.input_projection.weight", "mm.soft_emb_norm.weight", "v.post_ln.weight" };
    for (int i = 0; i < 3; i++) {
        char *p = memmem(buf, len, names[i], strlen(names[i]));
        CHECK(p);
        p[1] = 'X';
        write_file(tmp, buf, len);
        CHECK(vision_model_load(tmp, err, sizeof err) == NULL);
        CHECK_STR_CONTAINS(err, names[i]);
        p[1] = names[i][1];
    }
    write_file(tmp, buf, len); /* restored: loads */
    struct vision_model *m = vision_model_load(tmp, err, sizeof err);
    CHECK_MSG(m, "%s", err);
    vision_model_free(m);
    free(buf);
}
