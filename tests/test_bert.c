/* test_bert.c - the encoder models of llm/bert.h against their references.
 *
 * Golden: tests/fixtures/golden_embed/{bert,bert_rank} are tiny random
 * transformers BertModel / BertForSequenceClassification checkpoints
 * (tools/make_embed_golden.py) converted by tools/hf_to_gguf.py into
 * $OMNI_GOLDEN_DIR/embed-<case>-<type>.gguf; reference.json holds the HF
 * tokenizer's ids and the pooled vectors / pair scores. nomic-bert and
 * jina-bert-v2 have no transformers class without remote code, so
 * tools/make_encoder_ref.py writes tiny random GGUFs of both and their
 * outputs from a numpy implementation of the architectures
 * (embed-{nomic,jina}-f32.gguf + .json). Also: batches equal single runs,
 * the compute budget, and bad input and files as errors. */
#include <cjson/cJSON.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "llm/bert.h"
#include "llm/tokenizer.h"
#include "src/core/compute.h"
#include "src/core/omni.h"
#include "tests/test.h"

static void free_model(void *m) { bert_model_free(m); }
static void free_json(void *j) { cJSON_Delete(j); }
static void free_compute(void *c) { compute_free(c); }

static struct bert_model *load(const char *name, struct compute *c)
{
    char err[256];
    const char *path = test_golden(name);
    struct bert_model *m = bert_model_load(path, c, err, sizeof err);
    if (!m)
        fprintf(stderr, "  %s: %s\n", name, err);
    test_defer(free_model, m);
    return m;
}

static cJSON *load_json(const char *path)
{
    char *s = test_read_file(path, NULL);
    cJSON *j = s ? cJSON_Parse(s) : NULL;
    free(s);
    test_defer(free_json, j);
    return j;
}

static int json_floats(const cJSON *arr, float *out, int max)
{
    int n = 0;
    const cJSON *v;
    cJSON_ArrayForEach(v, arr)
    {
        if (n < max)
            out[n] = (float)v->valuedouble;
        n++;
    }
    return n;
}

static double cosine(const float *a, const float *b, int n)
{
    double ab = 0, aa = 0, bb = 0;
    for (int i = 0; i < n; i++)
        ab += (double)a[i] * b[i], aa += (double)a[i] * a[i], bb += (double)b[i] * b[i];
    return ab / sqrt(aa * bb + 1e-30);
}

static bool same_ids(const struct bert_input *in, const cJSON *ids)
{
    if (cJSON_GetArraySize(ids) != in->n)
        return false;
    for (int i = 0; i < in->n; i++)
        if (cJSON_GetArrayItem(ids, i)->valueint != in->ids[i])
            return false;
    return true;
}

#define MAX_CASES 8
#define MAX_H 64

/* The bert case: the HF tokenizer's ids, then CLS and mean pooling of the
 * four texts (one over 100 tokens) as one batch, normalized. */
static void check_bert(const char *type, double tol, double min_cos, struct compute *c)
{
    char name[64];
    snprintf(name, sizeof name, "embed-bert-%s.gguf", type);
    cJSON *ref = load_json(test_fixture("golden_embed/bert/reference.json"));
    CHECK(ref);
    struct bert_model *m = load(name, c);
    if (!m)
        SKIP("converted fixture missing (make golden-fixtures)");
    const struct bert_info *info = bert_model_info(m);
    CHECK_STR_EQ(info->arch, "bert");
    CHECK_EQ(info->pooling, EMBED_POOL_MEAN); /* from 1_Pooling/config.json */
    CHECK_EQ(info->n_embd, 32);
    CHECK_EQ(info->n_out, 32);
    CHECK_EQ(info->n_ctx_train, 160);
    const cJSON *cases = cJSON_GetObjectItem(ref, "cases");
    const int n = cJSON_GetArraySize(cases);
    CHECK(n >= 4 && n <= MAX_CASES);
    struct bert_input in[MAX_CASES] = { 0 };
    char err[256];
    bool long_one = false;
    for (int i = 0; i < n; i++) {
        const cJSON *cs = cJSON_GetArrayItem(cases, i);
        const char *text = cJSON_GetObjectItem(cs, "text")->valuestring;
        int rc = bert_tokenize(m, text, NULL, &in[i], err, sizeof err);
        CHECK_MSG(rc == 0, "tokenize %d: %s", i, err);
        CHECK_MSG(same_ids(&in[i], cJSON_GetObjectItem(cs, "ids")), "case %d: ids differ from HF", i);
        long_one |= in[i].n > 100;
    }
    CHECK(long_one);
    float got[MAX_CASES * MAX_H], want[MAX_H], one[MAX_H];
    for (int p = 0; p < 2; p++) {
        const enum embed_pooling pool = p ? EMBED_POOL_MEAN : EMBED_POOL_CLS;
        int rc = bert_forward(m, in, n, pool, true, got, err, sizeof err);
        CHECK_MSG(rc == 0, "forward: %s", err);
        for (int i = 0; i < n; i++) {
            const cJSON *cs = cJSON_GetArrayItem(cases, i);
            CHECK_EQ(json_floats(cJSON_GetObjectItem(cs, p ? "mean" : "cls"), want, MAX_H), 32);
            const double d = test_max_diff(got + i * 32, want, 32), cs_ = cosine(got + i * 32, want, 32);
            CHECK_MSG(d <= tol && cs_ >= min_cos, "%s %s case %d (%d tokens): max diff %.3g, cosine %.7f",
                      type, p ? "mean" : "cls", i, in[i].n, d, cs_);
            /* the same input alone gives the same vector (no cross-talk) */
            rc = bert_forward(m, &in[i], 1, pool, true, one, err, sizeof err);
            CHECK_MSG(rc == 0, "forward: %s", err);
            /* (quantized weights: batches of 32+ rows take the dequantizing
             * GEMM, smaller ones the int8 dots, so only to the type's tolerance) */
            const double tol_alone = tol < 1e-3 ? 1e-5 : tol;
            CHECK_MSG(test_max_diff(one, got + i * 32, 32) <= tol_alone, "case %d alone differs from the batch", i);
        }
    }
    for (int i = 0; i < n; i++)
        bert_input_free(&in[i]);
}

TEST(bert_golden_f32) { check_bert("f32", 1e-4, 0.9999, NULL); }
TEST(bert_golden_f16) { check_bert("f16", 2e-3, 0.9999, NULL); }
TEST(bert_golden_q8_0) { check_bert("q8_0", 3e-2, 0.999, NULL); }

TEST(bert_golden_compute_budget)
{
    char err[128];
    struct compute_params cp = compute_default_params();
    cp.n_threads = 2;
    struct compute *c = compute_new(&cp, err, sizeof err);
    CHECK(c);
    test_defer(free_compute, c); /* after the model (cleanups run latest first) */
    check_bert("f32", 1e-4, 0.9999, c);
}

/* The cross-encoder: pairs with type ids, the classifier's raw logit. */
static void check_rank(const char *type, double tol)
{
    char name[64];
    snprintf(name, sizeof name, "embed-bert_rank-%s.gguf", type);
    cJSON *ref = load_json(test_fixture("golden_embed/bert_rank/reference.json"));
    CHECK(ref);
    struct bert_model *m = load(name, NULL);
    if (!m)
        SKIP("converted fixture missing (make golden-fixtures)");
    const struct bert_info *info = bert_model_info(m);
    CHECK_EQ(info->pooling, EMBED_POOL_RANK);
    CHECK_EQ(info->n_out, 1);
    const cJSON *cases = cJSON_GetObjectItem(ref, "cases");
    const int n = cJSON_GetArraySize(cases);
    CHECK(n >= 2 && n <= MAX_CASES);
    struct bert_input in[MAX_CASES] = { 0 };
    char err[256];
    for (int i = 0; i < n; i++) {
        const cJSON *cs = cJSON_GetArrayItem(cases, i);
        int rc = bert_tokenize(m, cJSON_GetObjectItem(cs, "query")->valuestring,
                               cJSON_GetObjectItem(cs, "document")->valuestring, &in[i], err, sizeof err);
        CHECK_MSG(rc == 0, "tokenize %d: %s", i, err);
        CHECK_MSG(same_ids(&in[i], cJSON_GetObjectItem(cs, "ids")), "pair %d: ids differ from HF", i);
        const cJSON *tt = cJSON_GetObjectItem(cs, "type_ids");
        for (int j = 0; j < in[i].n; j++)
            CHECK_MSG(cJSON_GetArrayItem(tt, j)->valueint == in[i].type_ids[j], "pair %d: type id %d", i, j);
    }
    float got[MAX_CASES];
    int rc = bert_forward(m, in, n, EMBED_POOL_RANK, true, got, err, sizeof err);
    CHECK_MSG(rc == 0, "forward: %s", err);
    for (int i = 0; i < n; i++) {
        const double want = cJSON_GetObjectItem(cJSON_GetArrayItem(cases, i), "score")->valuedouble;
        CHECK_MSG(fabs(got[i] - want) <= tol, "%s pair %d: %.7f vs %.7f", type, i, got[i], want);
    }
    /* a cross-encoder does not embed */
    CHECK_EQ(bert_forward(m, in, 1, EMBED_POOL_CLS, true, got, err, sizeof err), OMNI_ERR_ARG);
    for (int i = 0; i < n; i++)
        bert_input_free(&in[i]);
}

TEST(bert_rank_golden_f32) { check_rank("f32", 1e-4); }
TEST(bert_rank_golden_q8_0) { check_rank("q8_0", 3e-2); } /* one Q8_0 block per 32-wide row */

/* nomic-bert / jina-bert-v2 against the numpy implementation of
 * tools/make_encoder_ref.py: given token ids (and type ids), the
 * normalized mean and CLS vectors. */
static void check_numpy_ref(const char *arch_case, const char *arch)
{
    char name[64], jname[64];
    snprintf(name, sizeof name, "embed-%s-f32.gguf", arch_case);
    snprintf(jname, sizeof jname, "embed-%s.json", arch_case);
    struct bert_model *m = load(name, NULL);
    cJSON *ref = load_json(test_golden(jname));
    if (!m || !ref)
        SKIP("generated fixture missing (make golden-fixtures)");
    const struct bert_info *info = bert_model_info(m);
    CHECK_STR_EQ(info->arch, arch);
    const int H = info->n_embd;
    CHECK(H <= MAX_H);
    const cJSON *cases = cJSON_GetObjectItem(ref, "cases");
    const int n = cJSON_GetArraySize(cases);
    CHECK(n >= 2 && n <= MAX_CASES);
    struct bert_input in[MAX_CASES];
    int32_t ids[MAX_CASES][256], types[MAX_CASES][256];
    for (int i = 0; i < n; i++) {
        const cJSON *cs = cJSON_GetArrayItem(cases, i);
        const cJSON *ji = cJSON_GetObjectItem(cs, "ids"), *jt = cJSON_GetObjectItem(cs, "type_ids");
        in[i] = (struct bert_input){ ids[i], types[i], cJSON_GetArraySize(ji) };
        CHECK(in[i].n <= 256);
        for (int j = 0; j < in[i].n; j++) {
            ids[i][j] = cJSON_GetArrayItem(ji, j)->valueint;
            types[i][j] = jt ? cJSON_GetArrayItem(jt, j)->valueint : 0;
        }
    }
    float got[MAX_CASES * MAX_H], want[MAX_H];
    char err[256];
    for (int p = 0; p < 2; p++) {
        int rc = bert_forward(m, in, n, p ? EMBED_POOL_MEAN : EMBED_POOL_CLS, true, got, err, sizeof err);
        CHECK_MSG(rc == 0, "forward: %s", err);
        for (int i = 0; i < n; i++) {
            const cJSON *cs = cJSON_GetArrayItem(cases, i);
            CHECK_EQ(json_floats(cJSON_GetObjectItem(cs, p ? "mean" : "cls"), want, MAX_H), H);
            const double d = test_max_diff(got + i * H, want, H), c = cosine(got + i * H, want, H);
            CHECK_MSG(d <= 1e-4 && c >= 0.9999, "%s %s case %d (%d tokens): max diff %.3g, cosine %.7f",
                      arch, p ? "mean" : "cls", i, in[i].n, d, c);
        }
    }
}

TEST(bert_nomic_numpy_ref) { check_numpy_ref("nomic", "nomic-bert"); }
TEST(bert_jina_numpy_ref) { check_numpy_ref("jina", "jina-bert-v2"); }
TEST(bert_jina_fused_ffn_numpy_ref) { check_numpy_ref("jina_fused", "jina-bert-v2"); }

// ---- errors -----------------------------------------------------------------------------

TEST(bert_errors_input)
{
    struct bert_model *m = load("embed-bert-f32.gguf", NULL);
    if (!m)
        SKIP("converted fixture missing (make golden-fixtures)");
    char err[256];
    struct bert_input in = { 0 };
    /* over the context: 200 words for 160 positions */
    char text[2048] = "";
    for (int i = 0; i < 200; i++)
        strcat(text, "dog ");
    CHECK_EQ(bert_tokenize(m, text, NULL, &in, err, sizeof err), OMNI_ERR_LIMIT);
    CHECK_STR_CONTAINS(err, "160");
    CHECK(in.ids == NULL);
    CHECK_EQ(bert_tokenize(m, "dog", text, &in, err, sizeof err), OMNI_ERR_LIMIT);
    CHECK_EQ(bert_tokenize(m, "bad \xff utf8", NULL, &in, err, sizeof err), OMNI_ERR_FORMAT);
    /* an empty text is [CLS] [SEP] */
    CHECK_EQ(bert_tokenize(m, "", NULL, &in, err, sizeof err), 0);
    CHECK_EQ(in.n, 2);
    float v[32];
    CHECK_EQ(bert_forward(m, &in, 1, EMBED_POOL_MEAN, true, v, err, sizeof err), 0);
    /* out-of-range ids and types, empty inputs, pooling the model cannot give */
    int32_t bad_ids[3] = { 2, 100000, 3 }, types[3] = { 0, 0, 5 }, ok_ids[3] = { 2, 10, 3 };
    struct bert_input bad = { bad_ids, NULL, 3 };
    CHECK_EQ(bert_forward(m, &bad, 1, EMBED_POOL_MEAN, true, v, err, sizeof err), OMNI_ERR_ARG);
    CHECK_STR_CONTAINS(err, "out of range");
    bad = (struct bert_input){ ok_ids, types, 3 };
    CHECK_EQ(bert_forward(m, &bad, 1, EMBED_POOL_MEAN, true, v, err, sizeof err), OMNI_ERR_ARG);
    bad = (struct bert_input){ ok_ids, NULL, 0 };
    CHECK_EQ(bert_forward(m, &bad, 1, EMBED_POOL_MEAN, true, v, err, sizeof err), OMNI_ERR_ARG);
    CHECK_EQ(bert_forward(m, &in, 0, EMBED_POOL_MEAN, true, v, err, sizeof err), OMNI_ERR_ARG);
    CHECK_EQ(bert_forward(m, &in, 1, EMBED_POOL_RANK, true, v, err, sizeof err), OMNI_ERR_ARG);
    CHECK_EQ(bert_forward(m, &in, 1, EMBED_POOL_NONE, true, v, err, sizeof err), OMNI_ERR_ARG);
    bert_input_free(&in);
    bert_input_free(&in); /* twice is harmless */
    CHECK_EQ(embed_pooling_from_name("cls"), EMBED_POOL_CLS);
    CHECK_EQ(embed_pooling_from_name("rank"), EMBED_POOL_RANK);
    CHECK_EQ(embed_pooling_from_name("max"), -1);
    CHECK_STR_EQ(embed_pooling_name(EMBED_POOL_LAST), "last");
}

TEST(bert_errors_file)
{
    char err[256];
    CHECK(bert_model_load("/nonexistent/x.gguf", NULL, err, sizeof err) == NULL);
    CHECK_STR_CONTAINS(err, "/nonexistent/x.gguf");
    /* a decoder model is not an encoder */
    const char *q = test_golden("embed-qwen3-f32.gguf");
    struct bert_model *m = bert_model_load(q, NULL, err, sizeof err);
    test_defer(free_model, m);
    if (!m)
        CHECK_STR_CONTAINS(err, "qwen3");
    CHECK(m == NULL || !"qwen3 loaded as an encoder");
    /* every truncation of a real file is an error naming the file */
    size_t len = 0;
    char *buf = test_read_file(test_golden("embed-bert-f32.gguf"), &len);
    if (!buf)
        SKIP("converted fixture missing (make golden-fixtures)");
    char path[512];
    snprintf(path, sizeof path, "%s/bert_cut.gguf", test_tmpdir());
    const size_t cuts[] = { 0, 8, 100, 2000, len / 2, len - 1 };
    for (size_t i = 0; i < sizeof cuts / sizeof *cuts; i++) {
        FILE *f = fopen(path, "wb");
        CHECK(f);
        fwrite(buf, 1, cuts[i], f);
        fclose(f);
        m = bert_model_load(path, NULL, err, sizeof err);
        bert_model_free(m);
        CHECK_MSG(m == NULL, "a file cut at %zu bytes loaded", cuts[i]);
        CHECK_STR_CONTAINS(err, "bert_cut.gguf");
    }
    free(buf);
    bert_model_free(NULL);
}

// ---- threads ---------------------------------------------------------------------------------

struct conc_arg {
    struct bert_model *m;
    struct bert_input *in;
    int n;
    const float *want;
    int bad;
};

static void *conc_thread(void *p)
{
    struct conc_arg *a = p;
    float got[MAX_CASES * MAX_H];
    char err[256];
    for (int rep = 0; rep < 3; rep++)
        if (bert_forward(a->m, a->in, a->n, EMBED_POOL_MEAN, true, got, err, sizeof err) != 0 ||
            test_max_diff(got, a->want, (size_t)a->n * 32) > 1e-6)
            a->bad++;
    return NULL;
}

/* Calls on one model from several threads at once take turns on its pool
 * and give what a lone call gives. */
TEST(bert_concurrent_calls)
{
    struct bert_model *m = load("embed-bert-f32.gguf", NULL);
    if (!m)
        SKIP("converted fixture missing (make golden-fixtures)");
    const char *texts[] = { "hello world", "the quick brown fox jumps over the lazy dog", "a" };
    struct bert_input in[3] = { 0 };
    char err[256];
    for (int i = 0; i < 3; i++)
        CHECK_EQ(bert_tokenize(m, texts[i], NULL, &in[i], err, sizeof err), 0);
    float want[3 * 32];
    CHECK_EQ(bert_forward(m, in, 3, EMBED_POOL_MEAN, true, want, err, sizeof err), 0);
    pthread_t th[3];
    struct conc_arg args[3];
    for (int i = 0; i < 3; i++) {
        args[i] = (struct conc_arg){ m, in, 3, want, 0 };
        CHECK(pthread_create(&th[i], NULL, conc_thread, &args[i]) == 0);
    }
    for (int i = 0; i < 3; i++)
        pthread_join(th[i], NULL);
    for (int i = 0; i < 3; i++) {
        CHECK_EQ(args[i].bad, 0);
        bert_input_free(&in[i]);
    }
}

// ---- src/core/nn -----------------------------------------------------------------------------

#include "src/core/nn.h"

/* The vectorized GELU / SwiGLU against libm, over the range activations take. */
TEST(nn_gelu_swiglu_vs_libm)
{
    enum { N = 4001 };
    static float x[N], y[N], g[N], u[N];
    for (int i = 0; i < N; i++)
        x[i] = y[i] = g[i] = -12.0f + 24.0f * i / (N - 1);
    omni_gelu_erf(y, N);
    for (int i = 0; i < N; i++) {
        const double want = 0.5 * x[i] * (1.0 + erf(x[i] / sqrt(2.0)));
        CHECK_MSG(fabs(y[i] - want) <= 2e-6 * (1.0 + fabs(x[i])), "gelu(%g) = %.9g, want %.9g", x[i], y[i], want);
    }
    for (int i = 0; i < N; i++)
        u[i] = 1.5f;
    omni_swiglu(g, u, N);
    for (int i = 0; i < N; i++) {
        const double want = 1.5 * x[i] / (1.0 + exp(-x[i]));
        CHECK_MSG(fabs(u[i] - want) <= 2e-6 * (1.0 + fabs(want)), "swiglu(%g) = %.9g, want %.9g", x[i], u[i], want);
    }
    for (int i = 0; i < N; i++)
        u[i] = -2.0f;
    omni_geglu_erf(g, u, N);
    for (int i = 0; i < N; i++) {
        const double want = -2.0 * 0.5 * x[i] * (1.0 + erf(x[i] / sqrt(2.0)));
        CHECK_MSG(fabs(u[i] - want) <= 4e-6 * (1.0 + fabs(x[i])), "geglu(%g) = %.9g, want %.9g", x[i], u[i], want);
    }
    float v[3] = { 3, 0, 4 }, z[2] = { 0, 0 };
    omni_l2_normalize(v, 3);
    CHECK_NEAR(v[0], 0.6, 1e-7);
    omni_l2_normalize(z, 2); /* a zero vector stays zero, no NaN */
    CHECK(z[0] == 0 && z[1] == 0);
}

/* Hand-broken nomic-bert files (tools/make_encoder_ref.py --case broken):
 * each is refused with a message naming the file and the broken field. */
TEST(bert_errors_broken_files)
{
    char *list = test_read_file(test_golden("embed-broken.txt"), NULL);
    if (!list)
        SKIP("generated fixture missing (make golden-fixtures)");
    int n = 0;
    char *save = NULL;
    for (char *line = strtok_r(list, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        char *tab = strchr(line, '\t');
        if (!tab)
            continue;
        *tab = 0;
        char err[256] = "";
        struct bert_model *m = bert_model_load(test_golden(line), NULL, err, sizeof err);
        bert_model_free(m);
        if (m || !strstr(err, tab + 1) || !strstr(err, line)) {
            test_fail(__FILE__, __LINE__, "%s: %s (want an error naming '%s')", line,
                      m ? "loaded" : err, tab + 1);
            break;
        }
        n++;
    }
    free(list);
    CHECK(n >= 10);
}
