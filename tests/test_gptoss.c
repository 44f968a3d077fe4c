/* test_gptoss.c - the pieces gpt-oss adds to the shared math: the clamped
 * SwiGLU of its experts (omni_swiglu_oai) against the formula in double, and
 * the YaRN frequencies (src/core/rope_yarn) against the inv_freq and
 * attention scaling transformers computed for the golden fixture
 * (tests/fixtures/golden/gptoss/reference.json, debug.rope_after_text). The
 * forward itself is checked in test_model.c. */
#include "test.h"

#include "llm/model.h"
#include "src/core/ops.h"
#include "src/core/rope_yarn.h"
#include "src/core/tensor.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>

TEST(gptoss_swiglu_oai)
{
    const float gate[] = { -20.0f, -3.0f, -0.5f, 0.0f, 0.5f, 3.0f, 6.99f, 7.0f, 7.01f, 50.0f };
    const float up[] = { -50.0f, -7.01f, -7.0f, -1.0f, 0.0f, 1.0f, 6.5f, 7.0f, 7.5f, 100.0f };
    enum { N = sizeof gate / sizeof *gate };
    for (int i = 0; i < N; i++) {
        for (int j = 0; j < N; j++) {
            float u = up[j];
            omni_swiglu_oai(&gate[i], &u, 1, 1.702f, 7.0f);
            const double g = gate[i] < 7.0 ? gate[i] : 7.0;
            const double c = up[j] < -7.0 ? -7.0 : up[j] > 7.0 ? 7.0 : up[j];
            const double want = g / (1.0 + exp(-1.702 * g)) * (c + 1.0);
            CHECK_MSG(fabs(u - want) <= 1e-6 * (1.0 + fabs(want)), "gate %g up %g: %g, want %g",
                      gate[i], up[j], u, want);
        }
    }
}

TEST(gptoss_yarn_matches_transformers)
{
    char *json = test_read_file(test_fixture("golden/gptoss/reference.json"), NULL);
    CHECK_MSG(json, "golden fixture gptoss missing");
    cJSON *root = cJSON_Parse(json);
    free(json);
    CHECK(root);
    const cJSON *rope = cJSON_GetObjectItem(cJSON_GetObjectItem(root, "debug"), "rope_after_text");
    const cJSON *ref = cJSON_GetObjectItem(rope, "model.rotary_emb.inv_freq");
    const cJSON *scaling = cJSON_GetObjectItem(rope, "model.rotary_emb.attention_scaling");
    CHECK(cJSON_IsArray(ref) && cJSON_GetArraySize(ref) == 16 && cJSON_IsNumber(scaling));
    /* the fixture's config: head_dim 32, base 150000, factor 32 over 4096, betas 32 / 1 */
    float f[16], ft[16];
    rope_yarn_inv_freq(f, 32, 150000.0f, 32.0f, 4096, 32.0f, 1.0f, false);
    rope_yarn_inv_freq(ft, 32, 150000.0f, 32.0f, 4096, 32.0f, 1.0f, true);
    bool truncation_differs = false;
    for (int i = 0; i < 16; i++) {
        const double want = cJSON_GetArrayItem(ref, i)->valuedouble;
        CHECK_MSG(fabs(f[i] - want) <= 1e-6 * want, "pair %d: %g, transformers %g", i, f[i], want);
        truncation_differs |= fabs(ft[i] - want) > 1e-3 * want;
    }
    CHECK_MSG(truncation_differs, "rounding the correction range should move some pair");
    CHECK(fabs(rope_yarn_mscale(32.0f) - scaling->valuedouble) < 1e-6);
    CHECK(rope_yarn_mscale(1.0f) == 1.0f);

    /* the loaded model uses the same table and scale */
    char err[512];
    struct llm_model *m = llm_model_load(test_golden("gptoss-f32.gguf"), NULL, err, sizeof err);
    if (m) {
        const float *mf = llm_model_rope_freqs(m);
        for (int i = 0; i < 16; i++)
            CHECK_NEAR(mf[i], f[i], 1e-12);
        CHECK_NEAR(llm_model_hparams(m)->rope_attn_factor, rope_yarn_mscale(32.0f), 1e-7);
        llm_model_free(m);
    }
    cJSON_Delete(root);
}

/* A decoded token of the gptoss fixture multiplies the attention, the router,
 * 4 of 8 experts per layer and the output: the context's byte counter equals
 * llm_model_decode_bytes (the expert biases are vectors, not counted), and
 * 4 experts' three matrices per layer stay unread. */
TEST(gptoss_decode_reads_chosen_experts)
{
    char err[512];
    struct llm_model *m = llm_model_load(test_golden("gptoss-f32.gguf"), NULL, err, sizeof err);
    if (!m)
        SKIP("converted fixture missing (make golden-fixtures)");
    char *toks = test_read_file(test_fixture("golden/gptoss/tokens.txt"), NULL);
    CHECK(toks);
    int32_t ids[64], pos[64], seq[64] = { 0 };
    int n = 0;
    char *p = toks, *end;
    for (long v; n < 64 && (v = strtol(p, &end, 10), end != p); p = end)
        pos[n] = n, ids[n++] = (int32_t)v;
    free(toks);
    CHECK(n > 8);
    const struct llm_hparams *hp = llm_model_hparams(m);
    struct llm_ctx *ctx = llm_ctx_new(m, 64, NULL, err, sizeof err);
    struct llm_kv *kv = llm_kv_new(m, GGML_TYPE_F32, 16, 4, err, sizeof err);
    CHECK(ctx && kv);
    const int32_t table[4] = { 0, 1, 2, 3 };
    const struct llm_seq_view view = { table, 4 };
    float *logits = malloc((size_t)hp->n_vocab * sizeof(float));
    struct llm_batch prefill = { .n_tokens = n - 1, .token = ids, .pos = pos, .seq = seq };
    CHECK_EQ(llm_forward(ctx, &prefill, kv, &view, logits), 1);
    llm_ctx_reset_weight_bytes_read(ctx);
    struct llm_batch step = { .n_tokens = 1, .token = &ids[n - 1], .pos = &pos[n - 1], .seq = seq };
    CHECK_EQ(llm_forward(ctx, &step, kv, &view, logits), 1);
    const uint64_t decode = llm_ctx_weight_bytes_read(ctx);
    /* one expert's gate, up and down: 3 x [48][64] floats */
    const uint64_t expert = 3ull * 48 * 64 * 4;
    CHECK_EQ(decode, (uint64_t)llm_model_decode_bytes(m));
    CHECK(decode + (uint64_t)hp->n_layer * 4 * expert <= llm_model_weight_bytes(m));
    free(logits);
    llm_kv_free(kv);
    llm_ctx_free(ctx);
    llm_model_free(m);
}
