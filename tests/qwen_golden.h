/* qwen_golden.h - what the Qwen2.5-VL and Qwen3-VL golden tests
 * (test_qwen2vl.c, test_qwen3vl.c) share: the reference JSON of a fixture
 * (tools/make_vision_golden.py, tools/qwen_video_golden.sh), a prompt's
 * rows through the language model with greedy decoding checked against
 * the reference, the same prompt through the engine twice, and broken
 * copies of an mmproj file. Helpers that CHECK return early on a failure:
 * callers test test_failed_now() before going on. */
#ifndef OMNI_TESTS_QWEN_GOLDEN_H
#define OMNI_TESTS_QWEN_GOLDEN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "llm/model.h"
#include "src/core/matmul.h"
#include "vision/vision.h"

/* The numbers of an array field ("key": [...], nested arrays flattened)
 * at or after from, at most cap; the count (-1 without the key); *end
 * (may be NULL) just past the array. */
int qgold_json_nums(const char *from, const char *key, double *out, int cap, const char **end);
/* The same as integers. */
int qgold_json_ints(const char *js, const char *key, int *out, int cap);
/* A number field, NAN without it. */
double qgold_json_num(const char *js, const char *key);

/* A reference case: the processor's ids for the prompt, greedy tokens
 * with their top-5 ids and log-probs, the grids, the special tokens. */
struct qgold_ref {
    int ids[1024], n;
    int greedy[16], n_greedy;
    double top_ids[80], top_lp[80];   /* 5 per greedy token */
    int grid[6], n_grid;              /* grid_thw of the images (t, h, w each) */
    int vgrid[3];                     /* video_grid_thw (0 without a video) */
    int32_t image_token, video_token; /* -1 when absent */
    int n_ds;                         /* deepstack_visual_indexes (Qwen3-VL) */
    char prompt[2048];
};
/* tests/fixtures/<rel> read into *r: false when the file is missing or
 * lacks ids, greedy tokens, top-5 or the prompt. */
bool qgold_ref_load(struct qgold_ref *r, const char *rel);

/* The two-picture prompt of the image goldens: tests/fixtures/vision/image.png
 * and image2 (a fixture path) encoded with vm, laid out with r->prompt
 * for lm. */
struct qgold_pictures {
    struct vision_ctx *vc;
    struct vision_embd img[2];
    struct vision_prompt vp;
};
void qgold_pictures(struct qgold_pictures *p, struct vision_model *vm, struct llm_model *lm,
                    const char *image2, const struct qgold_ref *r);
void qgold_pictures_free(struct qgold_pictures *p);

/* A prompt's rows through the language model (prefill, then one token at
 * a time), as the reference ran it. */
struct qgold_lm {
    struct llm_model *lm;
    int n, W, V, T;                   /* prompt positions, row width, vocab, n + greedy */
    float *x, *logits;                /* (T, W) input rows; (n, V) */
    int32_t *ids, *pos, *seq, *rp;    /* (T) each; rp (3, T): M-RoPE ids for qgold_lm_prefill */
    bool *want;
    int32_t table[64];
    struct llm_ctx *ctx;
    struct llm_kv *kv;
    struct llm_seq_view view;
    struct omni_tensor tok;           /* token_embd.weight */
};
/* vp's rows (W floats: the LM's n_embd times 1 + its DeepStack count)
 * into s->x and their ids into s->ids, each checked against r->ids. */
void qgold_lm_rows(struct qgold_lm *s, struct llm_model *lm, const struct vision_prompt *vp,
                   const struct qgold_ref *r);
/* Every position's logits from rows (s->x when NULL) with rotary ids rope
 * (NULL: plain positions). */
void qgold_lm_prefill(struct qgold_lm *s, const float *rows, const int32_t *rope);
/* Greedy decoding after the prefill (its logits in s->logits), the k-th
 * token at rotary id next + k on all three axes: each the reference's,
 * its top-5 log-probs within tol (tol < 0: not checked). */
void qgold_lm_greedy(struct qgold_lm *s, const struct qgold_ref *r, int next, double tol);
void qgold_lm_free(struct qgold_lm *s);

/* vp as engine segments (grids, video time) through an engine of lm with
 * prefill chunks of max_batch_tokens, twice (the second from the prefix
 * cache): r's greedy tokens both times. */
void qgold_engine_twice(struct llm_model *lm, const char *name, const struct vision_prompt *vp,
                        int max_batch_tokens, const struct qgold_ref *r);

/* Hand-broken copies of the golden mmproj gguf_rel (as tmp_name under the
 * test's directory): each edit's name with byte at changed fails naming
 * the file and expect; the file cut short anywhere fails. */
struct qgold_edit {
    const char *what, *expect;
    int at;
};
void qgold_broken_mmproj(const char *gguf_rel, const char *tmp_name, const struct qgold_edit *edits,
                         int n_edits);

#endif
