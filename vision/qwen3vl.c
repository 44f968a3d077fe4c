/* qwen3vl.c - the Qwen3-VL vision tower of an mmproj GGUF, following the
 * Hugging Face Qwen3VLVisionModel: patch embedding (conv3d with bias; a
 * still image is two identical frames, so the kernel halves are summed at
 * load), plus the learned position table interpolated to the grid
 * (fast_pos_embed_interpolate: align-corners bilinear), 2-D rotary
 * positions (height then width frequencies, NEOX pairs), blocks of
 * LayerNorm + full attention + LayerNorm + GELU(tanh) MLP, DeepStack
 * mergers after the listed blocks and the final merger. Everything runs in
 * the processor's patch order (2x2 groups together), so a group's four
 * patches are one contiguous row of 4 x n_embd for the mergers and the
 * merged rows come out in raster order. The steps Qwen2.5-VL shares are
 * in qwen_vit.c. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "src/core/gguf.h"
#include "src/core/matmul.h"
#include "src/core/omni.h"
#include "src/core/quant.h"
#include "src/core/tensor.h"
#include "src/core/threadpool.h"
#include "vision/qwen3vl.h"
#include "vision/mmproj_load.h"
#include "vision/qwen_vit.h"
#include "vision/vision.h"

struct qwen3vl_layer {
    float *ln1_w, *ln1_b, *ln2_w, *ln2_b;          /* (D) LayerNorms */
    struct omni_tensor qkv, o;                     /* (3D, D): q, k, v rows; (D, D) */
    float *qkv_b, *o_b;                            /* (3D), (D) */
    struct omni_tensor up, down;                   /* (F, D), (D, F) */
    float *up_b, *down_b;                          /* (F), (D) */
    int ds;                                        /* DeepStack merger index, -1 none */
};

struct qwen3vl_deepstack {
    float *norm_w, *norm_b;                        /* (4D) LayerNorm over a 2x2 group */
    struct omni_tensor fc1, fc2;                   /* (4D, 4D), (E, 4D) */
    float *fc1_b, *fc2_b;
};

struct qwen3vl_model {
    int D, F, H, P, n_layer, merge, grid_side, n_ds, E;
    float eps;
    struct omni_tensor patch, patch2;              /* (D, 3*P*P) summed frames; (D, 3*2*P*P) a pair */
    float *patch_w, *patch2_w, *patch_b;           /* storage; (D) bias */
    float *pos;                                    /* (grid_side^2, D) learned positions, F32 */
    struct qwen3vl_layer *layers;                  /* (n_layer) */
    struct qwen3vl_deepstack *ds;                  /* (n_ds), in block order */
    float *post_w, *post_b;                        /* (D) the merger's LayerNorm */
    struct omni_tensor mm0, mm2;                   /* (4D, 4D), (E, 4D) */
    float *mm0_b, *mm2_b;
};

// ---- loading -----------------------------------------------------------------

bool qwen3vl_is_projector(const char *type, size_t len)
{
    return type && len == 14 && !memcmp(type, "qwen3vl_merger", 14);
}

void qwen3vl_free(struct qwen3vl_model *q)
{
    if (!q)
        return;
    for (int i = 0; q->layers && i < q->n_layer; i++) {
        struct qwen3vl_layer *L = &q->layers[i];
        float *v[] = { L->ln1_w, L->ln1_b, L->ln2_w, L->ln2_b, L->qkv_b, L->o_b, L->up_b, L->down_b };
        for (size_t j = 0; j < sizeof v / sizeof *v; j++)
            free(v[j]);
    }
    for (int i = 0; q->ds && i < q->n_ds; i++) {
        free(q->ds[i].norm_w);
        free(q->ds[i].norm_b);
        free(q->ds[i].fc1_b);
        free(q->ds[i].fc2_b);
    }
    float *v[] = { q->patch_w, q->patch2_w, q->patch_b, q->pos, q->post_w, q->post_b, q->mm0_b, q->mm2_b };
    for (size_t j = 0; j < sizeof v / sizeof *v; j++)
        free(v[j]);
    free(q->layers);
    free(q->ds);
    free(q);
}

/* v.patch_embd.weight / .weight.1: [P][P][3][D] per frame -> patch (summed,
 * a still image) and patch2 ([channel][frame][P][P] per row, a frame pair). */
static int load_patch(struct mmproj_load *l, struct qwen3vl_model *q)
{
    const int D = q->D, P = q->P;
    const int64_t K = 3LL * P * P, PP = (int64_t)P * P;
    const struct gguf_tensor *p0 = mmproj_find(l, "v.patch_embd.weight", true);
    const struct gguf_tensor *p1 = mmproj_find(l, "v.patch_embd.weight.1", true);
    if (!p0 || !p1)
        return l->rc;
    for (int i = 0; i < 2; i++) {
        const struct gguf_tensor *t = i ? p1 : p0;
        if (t->ne[0] * t->ne[1] * t->ne[2] != K || t->ne[3] * (t->n_dims == 4) != D)
            return mmproj_fail(l, OMNI_ERR_FORMAT, "shape not [P x P x 3 x D] of tensor", t->name);
    }
    q->patch_w = malloc(sizeof(float) * (size_t)(K * D));
    q->patch2_w = malloc(sizeof(float) * (size_t)(2 * K * D));
    float *row = malloc(sizeof(float) * (size_t)K);
    if (!q->patch_w || !q->patch2_w || !row) {
        free(row);
        return mmproj_fail(l, OMNI_ERR_NOMEM, "out of memory for", "v.patch_embd.weight");
    }
    struct omni_tensor w0 = { .type = p0->type, .ne = { K, D }, .data = p0->data };
    struct omni_tensor w1 = { .type = p1->type, .ne = { K, D }, .data = p1->data };
    for (int64_t r = 0; r < D; r++) {
        omni_tensor_get_row(&w0, r, q->patch_w + r * K);
        omni_tensor_get_row(&w1, r, row);
        for (int64_t ch = 0; ch < 3; ch++) {
            memcpy(q->patch2_w + r * 2 * K + 2 * ch * PP, q->patch_w + r * K + ch * PP, sizeof(float) * PP);
            memcpy(q->patch2_w + r * 2 * K + (2 * ch + 1) * PP, row + ch * PP, sizeof(float) * PP);
        }
        for (int64_t i = 0; i < K; i++)
            q->patch_w[r * K + i] += row[i];
    }
    free(row);
    q->patch = (struct omni_tensor){ .type = GGML_TYPE_F32, .ne = { K, D }, .data = q->patch_w };
    q->patch2 = (struct omni_tensor){ .type = GGML_TYPE_F32, .ne = { 2 * K, D }, .data = q->patch2_w };
    q->patch_b = mmproj_vec(l, "v.patch_embd.bias", D, true);
    return l->rc;
}

/* clip.vision.is_deepstack_layers: one bool per block (llama.cpp's key). */
static int load_deepstack_flags(struct mmproj_load *l, struct qwen3vl_model *q)
{
    const char *key = "clip.vision.is_deepstack_layers";
    enum gguf_type et;
    uint64_t n = 0;
    for (int i = 0; i < q->n_layer; i++)
        q->layers[i].ds = -1;
    if (gguf_get_arr(l->g, key, &et, &n) < 0)
        return 0; /* no DeepStack */
    const uint8_t *v = gguf_get_arr_data(l->g, key);
    if (et != GGUF_TYPE_BOOL || n != (uint64_t)q->n_layer || !v)
        return mmproj_fail(l, OMNI_ERR_FORMAT, "not one bool per block: key", key);
    for (int i = 0; i < q->n_layer; i++)
        if (v[i])
            q->layers[i].ds = q->n_ds++;
    return 0;
}

struct qwen3vl_model *qwen3vl_load(const struct gguf *g, const char *path, struct vision_info *in,
                                   char *err, size_t errlen)
{
    struct mmproj_load l = { g, path, err, errlen, 0 };
    struct qwen3vl_model *q = calloc(1, sizeof *q);
    if (!q) {
        omni_fail(err, errlen, OMNI_ERR_NOMEM, "vision: out of memory");
        return NULL;
    }
    q->merge = 2;
    if (mmproj_key(&l, "clip.vision.embedding_length", &q->D, true, 1 << 16) ||
        mmproj_key(&l, "clip.vision.feed_forward_length", &q->F, true, 1 << 18) ||
        mmproj_key(&l, "clip.vision.block_count", &q->n_layer, true, 1024) ||
        mmproj_key(&l, "clip.vision.attention.head_count", &q->H, true, 1024) ||
        mmproj_key(&l, "clip.vision.patch_size", &q->P, true, 256) ||
        mmproj_key(&l, "clip.vision.spatial_merge_size", &q->merge, false, 2) ||
        mmproj_floats3(&l, "clip.vision.image_mean", in->image_mean) ||
        mmproj_floats3(&l, "clip.vision.image_std", in->image_std))
        goto fail;
    q->eps = 1e-6f;
    gguf_get_f32(g, "clip.vision.attention.layer_norm_epsilon", &q->eps);
    const int D = q->D, F = q->F;
    if (D % q->H || (D / q->H) % 4 || q->merge != 2) {
        mmproj_fail(&l, OMNI_ERR_FORMAT, "inconsistent sizes (embedding, heads, merge)", "clip.vision");
        goto fail;
    }
    if (load_patch(&l, q))
        goto fail;
    // learned positions: a square table of side grid_side
    const struct gguf_tensor *pt = mmproj_find(&l, "v.position_embd.weight", true);
    if (!pt)
        goto fail;
    const int64_t n_pos = pt->ne[1] * pt->ne[2] * pt->ne[3];
    q->grid_side = (int)llround(sqrt((double)n_pos));
    if (pt->ne[0] != D || n_pos < 1 || n_pos > (1 << 20) || (int64_t)q->grid_side * q->grid_side != n_pos) {
        mmproj_fail(&l, OMNI_ERR_FORMAT, "not a square table of n_embd rows:", "v.position_embd.weight");
        goto fail;
    }
    if (!(q->pos = malloc(sizeof(float) * (size_t)(n_pos * D)))) {
        mmproj_fail(&l, OMNI_ERR_NOMEM, "out of memory for", "v.position_embd.weight");
        goto fail;
    }
    struct omni_tensor pw = { .type = pt->type, .ne = { D, n_pos }, .data = pt->data };
    for (int64_t r = 0; r < n_pos; r++)
        omni_tensor_get_row(&pw, r, q->pos + r * D);

    if (!(q->layers = calloc((size_t)q->n_layer, sizeof *q->layers))) {
        mmproj_fail(&l, OMNI_ERR_NOMEM, "out of memory for", "layers");
        goto fail;
    }
    if (load_deepstack_flags(&l, q))
        goto fail;
    // the LM width: mm.2's rows
    const struct gguf_tensor *last = mmproj_find(&l, "mm.2.weight", true);
    if (!last)
        goto fail;
    if (last->ne[1] < 1 || last->ne[1] > 65536 || last->ne[2] * last->ne[3] != 1) {
        mmproj_fail(&l, OMNI_ERR_FORMAT, "output width out of range in tensor", "mm.2.weight");
        goto fail;
    }
    q->E = (int)last->ne[1];
    char n[64];
#define NAME(s) (snprintf(n, sizeof n, "v.blk.%d.%s", i, s), n)
    for (int i = 0; i < q->n_layer && !l.rc; i++) {
        struct qwen3vl_layer *L = &q->layers[i];
        L->ln1_w = mmproj_vec(&l, NAME("ln1.weight"), D, true);
        L->ln1_b = mmproj_vec(&l, NAME("ln1.bias"), D, true);
        L->ln2_w = mmproj_vec(&l, NAME("ln2.weight"), D, true);
        L->ln2_b = mmproj_vec(&l, NAME("ln2.bias"), D, true);
        mmproj_mat(&l, NAME("attn_qkv.weight"), D, 3LL * D, &L->qkv);
        L->qkv_b = mmproj_vec(&l, NAME("attn_qkv.bias"), 3LL * D, true);
        mmproj_mat(&l, NAME("attn_out.weight"), D, D, &L->o);
        L->o_b = mmproj_vec(&l, NAME("attn_out.bias"), D, true);
        mmproj_mat(&l, NAME("ffn_up.weight"), D, F, &L->up);
        L->up_b = mmproj_vec(&l, NAME("ffn_up.bias"), F, true);
        mmproj_mat(&l, NAME("ffn_down.weight"), F, D, &L->down);
        L->down_b = mmproj_vec(&l, NAME("ffn_down.bias"), D, true);
    }
#undef NAME
    if (l.rc)
        goto fail;
    if (q->n_ds && !(q->ds = calloc((size_t)q->n_ds, sizeof *q->ds))) {
        mmproj_fail(&l, OMNI_ERR_NOMEM, "out of memory for", "v.deepstack");
        goto fail;
    }
#define NAME(s) (snprintf(n, sizeof n, "v.deepstack.%d.%s", i, s), n)
    for (int i = 0; i < q->n_layer && !l.rc; i++) {
        if (q->layers[i].ds < 0)
            continue;
        struct qwen3vl_deepstack *S = &q->ds[q->layers[i].ds];
        S->norm_w = mmproj_vec(&l, NAME("norm.weight"), 4LL * D, true);
        S->norm_b = mmproj_vec(&l, NAME("norm.bias"), 4LL * D, true);
        mmproj_mat(&l, NAME("fc1.weight"), 4LL * D, 4LL * D, &S->fc1);
        S->fc1_b = mmproj_vec(&l, NAME("fc1.bias"), 4LL * D, true);
        mmproj_mat(&l, NAME("fc2.weight"), 4LL * D, q->E, &S->fc2);
        S->fc2_b = mmproj_vec(&l, NAME("fc2.bias"), q->E, true);
    }
#undef NAME
    if (l.rc)
        goto fail;
    q->post_w = mmproj_vec(&l, "v.post_ln.weight", D, true);
    q->post_b = mmproj_vec(&l, "v.post_ln.bias", D, true);
    mmproj_mat(&l, "mm.0.weight", 4LL * D, 4LL * D, &q->mm0);
    q->mm0_b = mmproj_vec(&l, "mm.0.bias", 4LL * D, true);
    mmproj_mat(&l, "mm.2.weight", 4LL * D, q->E, &q->mm2);
    q->mm2_b = mmproj_vec(&l, "mm.2.bias", q->E, true);
    if (l.rc)
        goto fail;

    in->family = VISION_QWEN2VL; /* the same preprocessing, prompt layout and M-RoPE ids */
    in->projector = "qwen3vl_merger";
    in->n_embd_lm = q->E;
    in->n_deepstack = q->n_ds;
    in->patch_size = q->P;
    in->n_embd = D;
    in->n_layer = q->n_layer;
    in->n_head = q->H;
    in->scale_factor = q->merge;
    in->merge_size = q->merge;
    /* llama.cpp's bounds when the keys are absent: 8 to 4096 merged rows,
     * at most 4096 whatever the file says (qwen2vl.c says why) */
    const int64_t unit = (int64_t)q->P * q->merge * q->P * q->merge;
    if (mmproj_pixel_limits(&l, in, unit, 4096, true))
        goto fail;
    in->image_size = q->P * q->merge;
    in->tokens_per_image = 0;
    return q;
fail:
    qwen3vl_free(q);
    return NULL;
}

// ---- positions -----------------------------------------------------------------

/* torch.linspace(0, end, steps) in float: the first half counts up from 0,
 * the second half down from end (so both ends are exact). */
static float linspace_at(float end, int steps, int i)
{
    if (steps == 1)
        return 0.0f;
    const float step = end / (float)(steps - 1);
    return i < steps / 2 ? (float)i * step : end - (float)(steps - 1 - i) * step;
}

int qwen3vl_pos_embed(const struct qwen3vl_model *q, int gh, int gw, float *out)
{
    if (gh < 2 || gw < 2 || gh % 2 || gw % 2)
        return OMNI_ERR_ARG;
    const int G = q->grid_side, D = q->D;
    for (int y = 0; y < gh; y++) {
        const float hy = linspace_at((float)(G - 1), gh, y);
        const int y0 = (int)hy, y1 = y0 + 1 < G ? y0 + 1 : G - 1;
        const float dy = hy - (float)y0;
        for (int x = 0; x < gw; x++) {
            const float hx = linspace_at((float)(G - 1), gw, x);
            const int x0 = (int)hx, x1 = x0 + 1 < G ? x0 + 1 : G - 1;
            const float dx = hx - (float)x0;
            /* the reference's four weights and summation order */
            const float w[4] = { (1 - dy) * (1 - dx), (1 - dy) * dx, dy * (1 - dx), dy * dx };
            const float *t[4] = { q->pos + (size_t)(y0 * G + x0) * D, q->pos + (size_t)(y0 * G + x1) * D,
                                  q->pos + (size_t)(y1 * G + x0) * D, q->pos + (size_t)(y1 * G + x1) * D };
            /* processor order: 2x2 group (y/2, x/2) in raster order, its patches inside */
            const size_t row = ((size_t)(y / 2) * (gw / 2) + x / 2) * 4 + (y % 2) * 2 + x % 2;
            float *o = out + row * D;
            for (int i = 0; i < D; i++)
                o[i] = t[0][i] * w[0] + t[1][i] * w[1] + t[2][i] * w[2] + t[3][i] * w[3];
        }
    }
    return OMNI_OK;
}

// ---- forward -------------------------------------------------------------------

struct q3ctx {
    const struct qwen3vl_model *q;
    struct qvit v;               /* rotary tables, scores, image segments */
    float *x, *h;                /* (n, D) residual stream, normed copy */
    float *qkv, *att;            /* (n, 3D), (n, D) */
    float *ff;                   /* (n, max(F, D)): the MLP's hidden rows, the mergers' (n/4, 4D) */
    float *ff2;                  /* (n / 4, 4D) the mergers' second buffer */
};

/* A merger over x (n patch rows of D, 2x2 groups contiguous): LayerNorm
 * per patch (final) or per group (DeepStack), fc1, exact GELU, fc2 -> out
 * rows of E with stride `stride` floats. */
static void merger(struct q3ctx *c, const float *x, bool per_group, const float *nw, const float *nb,
                   const struct omni_tensor *fc1, const float *b1, const struct omni_tensor *fc2,
                   const float *b2, float *out, size_t stride)
{
    const struct qwen3vl_model *q = c->q;
    const int n = c->v.n, M = n / 4, D4 = 4 * q->D;
    if (per_group)
        qvit_rows(&c->v, QVIT_LAYER_NORM, x, nw, nb, c->h, M, D4);
    else
        qvit_rows(&c->v, QVIT_LAYER_NORM, x, nw, nb, c->h, n, q->D);
    qvit_linear(&c->v, fc1, b1, c->h, M, c->ff);
    qvit_rows(&c->v, QVIT_GELU_ERF, NULL, NULL, NULL, c->ff, M, D4);
    qvit_linear(&c->v, fc2, b2, c->ff, M, c->ff2);
    for (int r = 0; r < M; r++)
        memcpy(out + (size_t)r * stride, c->ff2 + (size_t)r * q->E, sizeof(float) * q->E);
}

int qwen3vl_encode_batch(const struct qwen3vl_model *q, struct tpool *tp,
                         const struct qwen2vl_image *im, int n_img, int (*cancelled)(void *user),
                         void *user, float *vit_out, struct vision_embd *outs, char *err,
                         size_t errlen)
{
    const int D = q->D, F = q->F;
    int n, max_len;
    int rc = qvit_check_batch("qwen3vl", im, n_img, outs, &n, &max_len, err, errlen);
    if (rc < 0)
        return rc;
    const int M = n / 4;
    const size_t W = (size_t)q->E * (1 + q->n_ds); /* one output row */
    struct q3ctx c = { .q = q, .v = { .tp = tp, .n = n, .D = D, .H = q->H, .eps = q->eps, .max_seg = max_len } };
    const size_t nD = (size_t)n * D;
    int *seg = malloc(sizeof(int) * (n_img + 1));
    float *rows = malloc(sizeof(float) * (size_t)M * W); /* every image's output rows */
    c.x = malloc(sizeof(float) * nD);
    c.h = malloc(sizeof(float) * nD);
    c.qkv = malloc(sizeof(float) * 3 * nD);
    c.att = malloc(sizeof(float) * nD);
    c.ff = malloc(sizeof(float) * (size_t)n * (F > D ? F : D));
    c.ff2 = malloc(sizeof(float) * (size_t)M * (4 * D > q->E ? 4 * D : q->E));
    int done_img = 0;
    for (; done_img < n_img; done_img++)
        if (!(outs[done_img].data = malloc(sizeof(float) * (size_t)(im[done_img].gh * im[done_img].gw / 4) * W)))
            break;
    if (qvit_alloc(&c.v) || !seg || !rows || !c.x || !c.h || !c.qkv || !c.att || !c.ff || !c.ff2 ||
        done_img < n_img) {
        rc = omni_fail(err, errlen, OMNI_ERR_NOMEM, "vision: out of memory for %d patches", n);
        goto done;
    }
    c.v.seg = seg, c.v.n_seg = n_img;
    seg[0] = 0;
    for (int i = 0; i < n_img; i++) {
        const int gh = im[i].gh, gw = im[i].gw, mw = gw / 2, r0 = seg[i];
        seg[i + 1] = r0 + gh * gw;
        // rotary angles: patch j of group u sits at row 2 (u / mw) + j / 2,
        // column 2 (u % mw) + j % 2
        for (int k = 0; k < gh * gw; k++) {
            const int u = k / 4, j = k % 4;
            qvit_rope_angles(&c.v, r0 + k, 2 * (u / mw) + j / 2, 2 * (u % mw) + j % 2);
        }
    }
    /* each block one unit of the compute budget; a cancel is seen between blocks */
    for (int l = -1; l <= q->n_layer; l++) {
        if ((rc = qvit_block_begin(&c.v, cancelled, user, err, errlen)) < 0)
            goto done;
        if (l < 0) { /* patch embedding + bias + interpolated positions, image by image */
            for (int i = 0; i < n_img; i++) {
                const int r0 = seg[i], np = seg[i + 1] - r0;
                qvit_linear(&c.v, im[i].frames == 2 ? &q->patch2 : &q->patch, q->patch_b, im[i].patches,
                            np, c.x + (size_t)r0 * D);
                qwen3vl_pos_embed(q, im[i].gh, im[i].gw, c.h + (size_t)r0 * D);
            }
            qvit_rows(&c.v, QVIT_ADD, c.h, NULL, NULL, c.x, n, D);
            tpool_end(tp);
            continue;
        }
        if (l == q->n_layer) { /* the final merger into part 0 of each row */
            if (vit_out)
                memcpy(vit_out, c.x, sizeof(float) * nD);
            merger(&c, c.x, false, q->post_w, q->post_b, &q->mm0, q->mm0_b, &q->mm2, q->mm2_b, rows, W);
            tpool_end(tp);
            continue;
        }
        const struct qwen3vl_layer *L = &q->layers[l];
        // x += o(attn(rope(q), rope(k), v)) of layernorm(x)
        qvit_rows(&c.v, QVIT_LAYER_NORM, c.x, L->ln1_w, L->ln1_b, c.h, n, D);
        qvit_linear(&c.v, &L->qkv, L->qkv_b, c.h, n, c.qkv);
        qvit_rope_qk(&c.v, c.qkv, c.qkv + D, 3 * D);
        qvit_attention(&c.v, c.qkv, c.qkv + D, c.qkv + 2 * D, 3 * D, c.att);
        qvit_linear(&c.v, &L->o, L->o_b, c.att, n, c.h);
        qvit_rows(&c.v, QVIT_ADD, c.h, NULL, NULL, c.x, n, D);
        // x += down(gelu_tanh(up(layernorm(x))))
        qvit_rows(&c.v, QVIT_LAYER_NORM, c.x, L->ln2_w, L->ln2_b, c.h, n, D);
        qvit_linear(&c.v, &L->up, L->up_b, c.h, n, c.ff);
        qvit_rows(&c.v, QVIT_GELU_TANH, NULL, NULL, NULL, c.ff, n, F);
        qvit_linear(&c.v, &L->down, L->down_b, c.ff, n, c.h);
        qvit_rows(&c.v, QVIT_ADD, c.h, NULL, NULL, c.x, n, D);
        if (L->ds >= 0) { /* DeepStack: this block's output through its merger, into part 1 + ds */
            const struct qwen3vl_deepstack *S = &q->ds[L->ds];
            merger(&c, c.x, true, S->norm_w, S->norm_b, &S->fc1, S->fc1_b, &S->fc2, S->fc2_b,
                   rows + (size_t)(1 + L->ds) * q->E, W);
        }
        tpool_end(tp);
    }
    for (int i = 0; i < n_img; i++) {
        const int mu = (seg[i + 1] - seg[i]) / 4;
        struct vision_embd *o = &outs[i];
        memcpy(o->data, rows + (size_t)seg[i] / 4 * W, sizeof(float) * (size_t)mu * W);
        o->n_tokens = mu;
        o->n_embd = (int)W;
        o->n_images = 1;
        o->tile_rows = im[i].gh / 2, o->tile_cols = im[i].gw / 2;
    }
done:
    if (rc < 0)
        qvit_outs_clear(outs, n_img);
    float *v[] = { rows, c.x, c.h, c.qkv, c.att, c.ff, c.ff2 };
    for (size_t j = 0; j < sizeof v / sizeof *v; j++)
        free(v[j]);
    free(seg);
    qvit_free(&c.v);
    return rc;
}
