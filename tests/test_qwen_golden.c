/* test_qwen_golden.c - the helpers the Qwen2.5-VL and Qwen3-VL golden
 * tests share (tests/qwen_golden.h); no tests of its own. */
#define _GNU_SOURCE /* memmem */
#include "tests/qwen_golden.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "media/image.h"
#include "src/core/gguf.h"
#include "src/core/tensor.h"
#include "src/engine/engine.h"
#include "test.h"
#include "vision/vision.h"

int qgold_json_nums(const char *from, const char *key, double *out, int cap, const char **end)
{
    char pat[64];
    snprintf(pat, sizeof pat, "\"%s\": [", key);
    const char *p = strstr(from, pat);
    if (!p)
        return -1;
    int n = 0, depth = 1;
    for (p += strlen(pat); *p && depth > 0;) {
        if (*p == '[' || *p == ']') {
            depth += *p == '[' ? 1 : -1;
            p++;
        } else if (*p == '-' || (*p >= '0' && *p <= '9')) {
            char *e;
            double v = strtod(p, &e);
            if (n < cap)
                out[n] = v;
            n++;
            p = e;
        } else {
            p++;
        }
    }
    if (end)
        *end = p;
    return n < cap ? n : cap;
}

int qgold_json_ints(const char *js, const char *key, int *out, int cap)
{
    double v[1024];
    const int n = qgold_json_nums(js, key, v, cap < 1024 ? cap : 1024, NULL);
    for (int i = 0; i < n; i++)
        out[i] = (int)v[i];
    return n;
}

double qgold_json_num(const char *js, const char *key)
{
    char pat[64];
    snprintf(pat, sizeof pat, "\"%s\": ", key);
    const char *p = strstr(js, pat);
    return p ? strtod(p + strlen(pat), NULL) : NAN;
}

bool qgold_ref_load(struct qgold_ref *r, const char *rel)
{
    size_t len;
    char *js = test_read_file(test_fixture(rel), &len);
    if (!js)
        return false;
    memset(r, 0, sizeof *r);
    r->n = qgold_json_ints(js, "ids", r->ids, 1024);
    r->n_greedy = qgold_json_ints(js, "greedy", r->greedy, 16);
    r->n_grid = qgold_json_ints(js, "grid_thw", r->grid, 6);
    qgold_json_ints(js, "video_grid_thw", r->vgrid, 3);
    int ds[8];
    r->n_ds = qgold_json_ints(js, "deepstack_visual_indexes", ds, 8);
    r->n_ds = r->n_ds < 0 ? 0 : r->n_ds;
    const double it = qgold_json_num(js, "image_token_id"), vt = qgold_json_num(js, "video_token_id");
    r->image_token = isnan(it) ? -1 : (int32_t)it;
    r->video_token = isnan(vt) ? -1 : (int32_t)vt;
    bool ok = r->n > 0 && r->n < 1024 && r->n_greedy > 0 &&
              qgold_json_nums(js, "top5_ids", r->top_ids, 80, NULL) == 5 * r->n_greedy &&
              qgold_json_nums(js, "top5_logprobs", r->top_lp, 80, NULL) == 5 * r->n_greedy;
    const char *p = strstr(js, "\"prompt\": \"");
    if (ok && (ok = p)) {
        size_t k = 0;
        for (p += 11; *p && *p != '"' && k + 1 < sizeof r->prompt; p++)
            r->prompt[k++] = *p == '\\' ? (*++p == 'n' ? '\n' : *p) : *p;
        r->prompt[k] = 0;
    }
    free(js);
    return ok;
}

// ---- the language model ---------------------------------------------------------

void qgold_pictures(struct qgold_pictures *p, struct vision_model *vm, struct llm_model *lm,
                    const char *image2, const struct qgold_ref *r)
{
    char err[256];
    memset(p, 0, sizeof *p);
    p->vc = vision_ctx_new(vm, NULL, err, sizeof err);
    CHECK_MSG(p->vc, "%s", err);
    const char *png[2] = { "vision/image.png", image2 };
    for (int i = 0; i < 2; i++) {
        struct media_image im;
        CHECK_EQ(media_image_decode_file(test_fixture(png[i]), NULL, &im, err, sizeof err), 0);
        const int rc = vision_encode_image(p->vc, &im, true, &p->img[i], err, sizeof err);
        media_image_release(&im);
        CHECK_MSG(rc == 0, "%s", err);
    }
    CHECK_EQ(vision_prompt_build(vm, llm_model_tokenizer(lm), r->prompt, strlen(r->prompt), false, p->img, 2,
                                 &p->vp, err, sizeof err), 0);
}

void qgold_pictures_free(struct qgold_pictures *p)
{
    vision_prompt_release(&p->vp);
    vision_embd_release(&p->img[0]);
    vision_embd_release(&p->img[1]);
    vision_ctx_free(p->vc);
}

void qgold_lm_rows(struct qgold_lm *s, struct llm_model *lm, const struct vision_prompt *vp,
                   const struct qgold_ref *r)
{
    char err[256];
    const struct llm_hparams *hp = llm_model_hparams(lm);
    memset(s, 0, sizeof *s);
    s->lm = lm;
    s->n = r->n, s->W = hp->n_embd * (1 + hp->n_deepstack), s->V = hp->n_vocab, s->T = r->n + r->n_greedy;
    CHECK_EQ(vp->n_positions, r->n);
    const struct gguf_tensor *te = gguf_find_tensor(llm_model_gguf(lm), "token_embd.weight");
    CHECK(te);
    s->tok = (struct omni_tensor){ te->type, { te->ne[0], te->ne[1] }, te->data };
    const int T = s->T, W = s->W;
    s->x = calloc((size_t)T * W, sizeof(float));
    s->logits = malloc(sizeof(float) * (size_t)s->n * s->V);
    s->ids = malloc(sizeof(int32_t) * T), s->pos = malloc(sizeof(int32_t) * T);
    s->seq = calloc(T, sizeof(int32_t)), s->rp = malloc(sizeof(int32_t) * 3 * T);
    s->want = malloc(sizeof(bool) * T);
    CHECK(s->x && s->logits && s->ids && s->pos && s->seq && s->rp && s->want);
    for (int i = 0, q = 0; q < vp->n_parts; q++) {
        const struct vision_prompt_part *pt = &vp->parts[q];
        for (int j = 0; j < pt->n; j++, i++) {
            s->ids[i] = pt->embd ? r->ids[i] : pt->tokens[j];
            CHECK_MSG(s->ids[i] == r->ids[i], "position %d: token %d, processor %d", i, s->ids[i], r->ids[i]);
            if (pt->embd)
                memcpy(s->x + (size_t)i * W, pt->embd + (size_t)j * W, sizeof(float) * W);
            else
                omni_tensor_get_row(&s->tok, pt->tokens[j], s->x + (size_t)i * W);
            s->pos[i] = i, s->want[i] = true;
        }
    }
    for (int i = 0; i < 64; i++)
        s->table[i] = i;
    s->ctx = llm_ctx_new(lm, s->n, NULL, err, sizeof err);
    s->kv = llm_kv_new(lm, GGML_TYPE_F32, 16, 16, err, sizeof err);
    CHECK_MSG(s->ctx && s->kv, "%s", err);
    s->view = (struct llm_seq_view){ .block_table = s->table, .n_blocks = 16 };
}

void qgold_lm_prefill(struct qgold_lm *s, const float *rows, const int32_t *rope)
{
    struct llm_batch b = { .n_tokens = s->n, .embd = rows ? rows : s->x, .pos = s->pos, .seq = s->seq,
                           .want_logits = s->want, .rope_pos = rope };
    CHECK_EQ(llm_forward(s->ctx, &b, s->kv, &s->view, s->logits), s->n);
}

void qgold_lm_greedy(struct qgold_lm *s, const struct qgold_ref *r, int next, double tol)
{
    const int V = s->V;
    double worst = 0;
    for (int g = 0; g < r->n_greedy; g++) {
        const float *lg = s->logits + (size_t)(g ? 0 : s->n - 1) * V;
        int best = 0;
        double mx = lg[0], sum = 0;
        for (int v = 1; v < V; v++) {
            best = lg[v] > lg[best] ? v : best;
            mx = lg[v] > mx ? lg[v] : mx;
        }
        for (int v = 0; v < V; v++)
            sum += exp(lg[v] - mx);
        for (int k = 0; k < 5; k++) {
            const int id = (int)r->top_ids[g * 5 + k];
            CHECK(id >= 0 && id < V);
            const double e = fabs(lg[id] - mx - log(sum) - r->top_lp[g * 5 + k]);
            worst = e > worst ? e : worst;
        }
        CHECK_MSG(best == r->greedy[g], "greedy token %d: %d, reference %d", g, best, r->greedy[g]);
        int32_t tp = s->n + g, trp[3] = { next + g, next + g, next + g };
        bool w = true;
        float *xe = s->x + (size_t)(s->n + g) * s->W;
        omni_tensor_get_row(&s->tok, best, xe);
        struct llm_batch b = { .n_tokens = 1, .embd = xe, .pos = &tp, .seq = s->seq, .want_logits = &w,
                               .rope_pos = trp };
        CHECK_EQ(llm_forward(s->ctx, &b, s->kv, &s->view, s->logits), 1);
    }
    printf("    greedy: %d tokens as the reference, top-5 log-probs within %.3g\n", r->n_greedy, worst);
    CHECK_MSG(tol < 0 || worst < tol, "top-5 log-probs differ by %g", worst);
}

void qgold_lm_free(struct qgold_lm *s)
{
    llm_kv_free(s->kv);
    llm_ctx_free(s->ctx);
    void *p[] = { s->x, s->logits, s->ids, s->pos, s->seq, s->rp, s->want };
    for (size_t i = 0; i < sizeof p / sizeof *p; i++)
        free(p[i]);
    memset(s, 0, sizeof *s);
}

// ---- the engine --------------------------------------------------------------------

struct gen {
    int32_t tok[32];
    int n;
};

static void gen_event(void *user, const struct engine_event *ev)
{
    struct gen *g = user;
    if (ev->type == ENGINE_EV_TOKEN && g->n < 32)
        g->tok[g->n++] = ev->token;
}

static void engine_release(void *e) { engine_free(e); }

void qgold_engine_twice(struct llm_model *lm, const char *name, const struct vision_prompt *vp,
                        int max_batch_tokens, const struct qgold_ref *r)
{
    char err[256];
    struct engine_segment segs[32];
    CHECK(vp->n_parts <= 32);
    for (int i = 0; i < vp->n_parts; i++) {
        const struct vision_prompt_part *pt = &vp->parts[i];
        segs[i] = (struct engine_segment){ pt->tokens, pt->embd, pt->n, pt->media_hash, pt->grid_rows,
                                           pt->grid_cols, pt->grid_t, pt->t_step };
    }
    struct engine_params ep = engine_default_params();
    ep.n_threads = 1;
    ep.kv_type = GGML_TYPE_F32;
    ep.kv_memory_bytes = 4 << 20;
    ep.max_batch_tokens = max_batch_tokens;
    struct engine *e = engine_new(&ep, err, sizeof err);
    CHECK_MSG(e, "%s", err);
    test_defer(engine_release, e);
    CHECK_MSG(engine_add_model(e, lm, name, err, sizeof err) >= 0, "%s", err);
    CHECK_MSG(engine_start(e, err, sizeof err) == 0, "%s", err);
    for (int round = 0; round < 2; round++) { /* the second from the prefix cache */
        struct gen g = { .n = 0 };
        struct engine_request rq = engine_default_request();
        rq.segments = segs, rq.n_segments = vp->n_parts;
        rq.max_tokens = r->n_greedy, rq.ignore_eog = true;
        rq.sampling.temperature = 0;
        rq.on_event = gen_event, rq.user = &g;
        CHECK_MSG(engine_generate(e, &rq, err, sizeof err) == 0, "%s", err);
        CHECK_EQ(g.n, r->n_greedy);
        for (int i = 0; i < r->n_greedy; i++)
            CHECK_MSG(g.tok[i] == r->greedy[i], "engine round %d token %d: %d, reference %d", round, i,
                      g.tok[i], r->greedy[i]);
    }
    struct engine_stats st;
    engine_stats(e, &st);
    printf("    engine: %d greedy tokens as the reference twice, prefix hit tokens %llu\n", r->n_greedy,
           (unsigned long long)st.prefix_hit_tokens);
    test_release(e);
}

// ---- broken files ---------------------------------------------------------------------

void qgold_broken_mmproj(const char *gguf_rel, const char *tmp_name, const struct qgold_edit *edits,
                         int n_edits)
{
    char err[256], tmp[512];
    size_t len;
    char *buf = test_read_file(test_golden(gguf_rel), &len);
    CHECK(buf);
    test_defer(free, buf);
    snprintf(tmp, sizeof tmp, "%s/%s", test_tmpdir(), tmp_name);
    for (int i = 0; i < n_edits; i++) {
        char *p = memmem(buf, len, edits[i].what, strlen(edits[i].what));
        CHECK_MSG(p, "%s not in the file", edits[i].what);
        char was = p[edits[i].at];
        p[edits[i].at] = 'X';
        FILE *f = fopen(tmp, "wb");
        CHECK(f);
        fwrite(buf, 1, len, f);
        fclose(f);
        p[edits[i].at] = was;
        CHECK(vision_model_load(tmp, err, sizeof err) == NULL);
        CHECK_STR_CONTAINS(err, tmp_name);
        CHECK_STR_CONTAINS(err, edits[i].expect);
    }
    for (size_t cut = 0; cut < len; cut += len / 29 + 1) {
        FILE *f = fopen(tmp, "wb");
        CHECK(f);
        fwrite(buf, 1, cut, f);
        fclose(f);
        CHECK_MSG(vision_model_load(tmp, err, sizeof err) == NULL, "loaded %zu of %zu bytes", cut, len);
    }
    test_release(buf);
}
