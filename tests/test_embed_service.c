/* test_embed_service.c - the embedding service (src/embed) against the
 * golden_embed references (tools/make_embed_golden.py, transformers):
 * the tiny Qwen3 as a decoder embedder through the engine (token ids with
 * the appended <|endoftext|>, last and mean vectors) and as a yes/no
 * reranker (the Qwen3-Reranker prompt's ids, softmax of the yes/no logits),
 * the tiny bert (mean/cls vectors) and bert cross-encoder (sigmoid of the
 * pair logit) through the encoder batcher; many inputs and concurrent jobs
 * equal single runs; cancellation and too-long inputs end cleanly. */
#include "test.h"

#include "src/core/omni.h"
#include "src/core/tensor.h"
#include "src/embed/embed.h"
#include "src/engine/engine.h"

#include <cjson/cJSON.h>
#include <pthread.h>
#include <stdlib.h>

static void free_json(void *j) { cJSON_Delete(j); }
static void free_service(void *s) { embed_service_free(s); }
static void free_engine(void *e) { engine_free(e); }

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

static double max_abs_diff(const float *a, const float *b, int n)
{
    double d = 0;
    for (int i = 0; i < n; i++)
        d = fabs((double)a[i] - b[i]) > d ? fabs((double)a[i] - b[i]) : d;
    return d;
}

/* A started service with the golden file as its one model (a decoder goes
 * into an engine of its own, K/V in f32 so that only the model's math is
 * compared). Both are freed after the test, the engine first. */
static struct embed_service *service(const char *file, enum embed_role role, int pooling,
                                     int normalize, const struct embed_params *ep)
{
    char err[512];
    const char *path = test_golden(file);
    struct embed_service *s = embed_service_new(ep, err, sizeof err);
    if (!s)
        return NULL;
    test_defer(free_service, s);
    struct engine *e = NULL;
    if (embed_file_is_encoder(path, err, sizeof err) == 0) {
        struct engine_params p = engine_default_params();
        p.kv_type = GGML_TYPE_F32;
        p.kv_memory_bytes = 8 << 20;
        p.max_batch_tokens = 64; /* long inputs pool across steps */
        if (!(e = engine_new(&p, err, sizeof err)))
            return NULL;
        test_defer(free_engine, e);
    }
    if (embed_service_load(s, path, role, e, NULL, NULL, pooling, normalize, err, sizeof err) < 0 ||
        (e && engine_start(e, err, sizeof err) < 0) || embed_service_start(s, err, sizeof err) < 0) {
        fprintf(stderr, "  %s: %s\n", file, err);
        return NULL;
    }
    return s;
}

struct waiter {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int done;
};

static void on_done(void *user, struct embed_job *j)
{
    (void)j;
    struct waiter *w = user;
    pthread_mutex_lock(&w->mu);
    w->done++;
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
}

static void wait_for(struct waiter *w, int n)
{
    pthread_mutex_lock(&w->mu);
    while (w->done < n)
        pthread_cond_wait(&w->cv, &w->mu);
    pthread_mutex_unlock(&w->mu);
}

/* Last-token and mean vectors of the tiny Qwen3 equal transformers' within
 * 1e-4; its texts get <|endoftext|> appended as its tokenizer does. */
TEST(embed_service_qwen3_golden)
{
    cJSON *ref = load_json(test_fixture("golden_embed/qwen3/reference.json"));
    if (!ref)
        SKIP("tests/fixtures/golden_embed/qwen3 missing");
    struct embed_service *last = service("embed-qwen3-f32.gguf", EMBED_ROLE_EMBED, -1, 0, NULL);
    if (!last)
        SKIP("golden fixtures missing (make golden-fixtures)");
    struct embed_service *mean =
        service("embed-qwen3-f32.gguf", EMBED_ROLE_EMBED, EMBED_POOL_MEAN, 0, NULL);
    struct embed_service *unit = service("embed-qwen3-f32.gguf", EMBED_ROLE_EMBED, -1, -1, NULL);
    CHECK(mean && unit);
    CHECK_EQ((int)embed_service_model(last, 0)->pooling, (int)EMBED_POOL_LAST);
    const cJSON *cases = cJSON_GetObjectItem(ref, "embed");
    const int n = cJSON_GetArraySize(cases);
    CHECK(n > 0);
    struct embed_job *jl = embed_job_new(last, 0, n), *jm = embed_job_new(mean, 0, n);
    struct embed_job *ju = embed_job_new(unit, 0, n);
    CHECK(jl && jm && ju);
    char err[512];
    for (int i = 0; i < n; i++) {
        const char *text = cJSON_GetObjectItem(cJSON_GetArrayItem(cases, i), "text")->valuestring;
        CHECK_EQ(embed_job_set_text(jl, i, text, NULL, err, sizeof err), 0);
        CHECK_EQ(embed_job_set_text(jm, i, text, NULL, err, sizeof err), 0);
        CHECK_EQ(embed_job_set_text(ju, i, text, NULL, err, sizeof err), 0);
        const cJSON *ids = cJSON_GetObjectItem(cJSON_GetArrayItem(cases, i), "ids");
        CHECK_EQ(embed_job_input_tokens(jl, i), cJSON_GetArraySize(ids));
    }
    struct waiter w = { PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0 };
    CHECK_EQ(embed_job_submit(jl, on_done, &w, err, sizeof err), 0);
    CHECK_EQ(embed_job_submit(jm, on_done, &w, err, sizeof err), 0);
    CHECK_EQ(embed_job_submit(ju, on_done, &w, err, sizeof err), 0);
    wait_for(&w, 3);
    CHECK(!embed_job_error(jl) && !embed_job_error(jm) && !embed_job_error(ju));
    float want[256];
    const int d = embed_job_n_out(jl);
    for (int i = 0; i < n; i++) {
        const cJSON *c = cJSON_GetArrayItem(cases, i);
        CHECK_EQ(json_floats(cJSON_GetObjectItem(c, "last"), want, 256), d);
        CHECK(max_abs_diff(embed_job_output(jl, i), want, d) < 1e-4);
        CHECK(cosine(embed_job_output(ju, i), want, d) > 0.9999);
        double norm = 0;
        for (int k = 0; k < d; k++)
            norm += (double)embed_job_output(ju, i)[k] * embed_job_output(ju, i)[k];
        CHECK(fabs(norm - 1) < 1e-5);
        CHECK_EQ(json_floats(cJSON_GetObjectItem(c, "mean"), want, 256), d);
        CHECK(max_abs_diff(embed_job_output(jm, i), want, d) < 1e-4);
    }
    embed_job_free(jl);
    embed_job_free(jm);
    embed_job_free(ju);
}

/* The tiny Qwen3 as a Qwen3-Reranker: the prompt's token count matches the
 * reference's ids and the score is softmax(yes, no) of its logits. */
TEST(embed_service_qwen3_rerank_golden)
{
    cJSON *ref = load_json(test_fixture("golden_embed/qwen3/reference.json"));
    if (!ref)
        SKIP("tests/fixtures/golden_embed/qwen3 missing");
    struct embed_service *s = service("embed-qwen3-f32.gguf", EMBED_ROLE_RERANK, -1, -1, NULL);
    if (!s)
        SKIP("golden fixtures missing (make golden-fixtures)");
    const cJSON *cases = cJSON_GetObjectItem(ref, "rerank");
    const int n = cJSON_GetArraySize(cases);
    CHECK(n > 0);
    struct embed_job *j = embed_job_new(s, 0, n);
    CHECK(j);
    char err[512];
    for (int i = 0; i < n; i++) {
        const cJSON *c = cJSON_GetArrayItem(cases, i);
        /* the query and document back out of the reference prompt */
        const char *p = cJSON_GetObjectItem(c, "prompt")->valuestring;
        const char *q = strstr(p, "<Query>: "), *dq = strstr(p, "\n<Document>: ");
        const char *de = strstr(p, "<|im_end|>\n<|im_start|>assistant");
        CHECK(q && dq && de);
        char query[512], doc[2048];
        snprintf(query, sizeof query, "%.*s", (int)(dq - q - 9), q + 9);
        snprintf(doc, sizeof doc, "%.*s", (int)(de - dq - 13), dq + 13);
        CHECK_EQ(embed_job_set_text(j, i, query, doc, err, sizeof err), 0);
        CHECK_EQ(embed_job_input_tokens(j, i), cJSON_GetArraySize(cJSON_GetObjectItem(c, "ids")));
    }
    struct waiter w = { PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0 };
    CHECK_EQ(embed_job_submit(j, on_done, &w, err, sizeof err), 0);
    wait_for(&w, 1);
    CHECK(!embed_job_error(j));
    CHECK_EQ(embed_job_n_out(j), 1);
    for (int i = 0; i < n; i++) {
        const cJSON *c = cJSON_GetArrayItem(cases, i);
        const double yes = cJSON_GetObjectItem(c, "logit_yes")->valuedouble;
        const double no = cJSON_GetObjectItem(c, "logit_no")->valuedouble;
        const double want = 1 / (1 + exp(no - yes));
        CHECK(fabs(embed_job_output(j, i)[0] - want) < 1e-4);
    }
    embed_job_free(j);
}

/* The bert references through the batcher: all cases in one job, and each
 * case as its own job submitted at once (batched with the others). */
TEST(embed_service_bert_golden_batched)
{
    cJSON *ref = load_json(test_fixture("golden_embed/bert/reference.json"));
    if (!ref)
        SKIP("tests/fixtures/golden_embed/bert missing");
    struct embed_params ep = embed_default_params();
    ep.max_batch_inputs = 3; /* cases split over several batches */
    struct embed_service *s = service("embed-bert-f32.gguf", EMBED_ROLE_EMBED, EMBED_POOL_MEAN, -1, &ep);
    if (!s)
        SKIP("golden fixtures missing (make golden-fixtures)");
    const cJSON *cases = cJSON_GetObjectItem(ref, "cases");
    const int n = cJSON_GetArraySize(cases);
    CHECK(n > 0 && n <= 16);
    char err[512];
    struct embed_job *all = embed_job_new(s, 0, n), *one[16];
    CHECK(all);
    for (int i = 0; i < n; i++) {
        const char *text = cJSON_GetObjectItem(cJSON_GetArrayItem(cases, i), "text")->valuestring;
        CHECK_EQ(embed_job_set_text(all, i, text, NULL, err, sizeof err), 0);
        CHECK((one[i] = embed_job_new(s, 0, 1)));
        CHECK_EQ(embed_job_set_text(one[i], 0, text, NULL, err, sizeof err), 0);
    }
    struct waiter w = { PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0 };
    CHECK_EQ(embed_job_submit(all, on_done, &w, err, sizeof err), 0);
    for (int i = 0; i < n; i++)
        CHECK_EQ(embed_job_submit(one[i], on_done, &w, err, sizeof err), 0);
    wait_for(&w, n + 1);
    float want[256];
    const int d = embed_job_n_out(all);
    for (int i = 0; i < n; i++) {
        CHECK(!embed_job_error(one[i]));
        CHECK_EQ(json_floats(cJSON_GetObjectItem(cJSON_GetArrayItem(cases, i), "mean"), want, 256), d);
        CHECK(cosine(embed_job_output(all, i), want, d) >= 0.9999);
        CHECK(cosine(embed_job_output(one[i], 0), want, d) >= 0.9999);
        embed_job_free(one[i]);
    }
    CHECK(!embed_job_error(all));
    embed_job_free(all);
}

/* A bert cross-encoder's pair score is the sigmoid of its logit. */
TEST(embed_service_bert_rank_golden)
{
    cJSON *ref = load_json(test_fixture("golden_embed/bert_rank/reference.json"));
    if (!ref)
        SKIP("tests/fixtures/golden_embed/bert_rank missing");
    struct embed_service *s = service("embed-bert_rank-f32.gguf", EMBED_ROLE_EMBED, -1, -1, NULL);
    if (!s)
        SKIP("golden fixtures missing (make golden-fixtures)");
    CHECK_EQ((int)embed_service_model(s, 0)->role, (int)EMBED_ROLE_RERANK); /* from the file */
    const cJSON *cases = cJSON_GetObjectItem(ref, "cases");
    const int n = cJSON_GetArraySize(cases);
    struct embed_job *j = embed_job_new(s, 0, n);
    CHECK(j);
    char err[512];
    for (int i = 0; i < n; i++) {
        const cJSON *c = cJSON_GetArrayItem(cases, i);
        CHECK_EQ(embed_job_set_text(j, i, cJSON_GetObjectItem(c, "query")->valuestring,
                                    cJSON_GetObjectItem(c, "document")->valuestring, err,
                                    sizeof err), 0);
    }
    struct waiter w = { PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0 };
    CHECK_EQ(embed_job_submit(j, on_done, &w, err, sizeof err), 0);
    wait_for(&w, 1);
    CHECK(!embed_job_error(j));
    for (int i = 0; i < n; i++) {
        const double logit = cJSON_GetObjectItem(cJSON_GetArrayItem(cases, i), "score")->valuedouble;
        CHECK(fabs(embed_job_output(j, i)[0] - 1 / (1 + exp(-logit))) < 1e-4);
    }
    embed_job_free(j);
}

/* Too long, empty and out-of-vocabulary inputs are refused with a reason;
 * a cancelled job still ends (with an error) and is answered exactly once,
 * decoder and encoder alike (ASan catches a second answer). */
static void check_errors_and_cancel(const char *file)
{
    /* small batches: the cancel most likely lands while the job is partly
     * taken by the batcher and partly still queued (settled exactly once) */
    struct embed_params ep = embed_default_params();
    ep.max_batch_inputs = 4;
    ep.window = 4;
    struct embed_service *s = service(file, EMBED_ROLE_EMBED, -1, -1, &ep);
    if (!s)
        SKIP("golden fixtures missing (make golden-fixtures)");
    const struct embed_model_info *mi = embed_service_model(s, 0);
    char err[512];
    struct embed_job *j = embed_job_new(s, 0, 64);
    CHECK(j);
    size_t len = (size_t)mi->n_ctx * 8;
    char *big = malloc(len + 1);
    CHECK(big);
    for (size_t i = 0; i < len; i++)
        big[i] = i % 2 ? ' ' : 'a';
    big[len] = 0;
    int rc = embed_job_set_text(j, 3, big, NULL, err, sizeof err);
    free(big);
    CHECK_EQ(rc, OMNI_ERR_LIMIT);
    CHECK_STR_CONTAINS(err, "input 3");
    CHECK_EQ(embed_job_set_text(j, 0, "", NULL, err, sizeof err), OMNI_ERR_ARG);
    const int32_t bad = 1 << 30;
    CHECK_EQ(embed_job_set_tokens(j, 0, &bad, 1, err, sizeof err), OMNI_ERR_ARG);
    CHECK_EQ(embed_job_submit(j, on_done, NULL, err, sizeof err), OMNI_ERR_ARG); /* unset inputs */
    for (int i = 0; i < 64; i++)
        CHECK_EQ(embed_job_set_text(j, i, "some words to embed here", NULL, err, sizeof err), 0);
    struct waiter w = { PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0 };
    CHECK_EQ(embed_job_submit(j, on_done, &w, err, sizeof err), 0);
    embed_job_cancel(j);
    wait_for(&w, 1);
    /* it may have finished before the cancel came */
    if (embed_job_error(j))
        CHECK_EQ(embed_job_error_code(j), EMBED_ERR_CANCELLED);
    embed_job_free(j);
}

TEST(embed_service_errors_and_cancel_decoder) { check_errors_and_cancel("embed-qwen3-f32.gguf"); }
TEST(embed_service_errors_and_cancel_encoder) { check_errors_and_cancel("embed-bert-f32.gguf"); }
