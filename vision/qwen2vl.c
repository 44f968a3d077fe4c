/* qwen2vl.c - the Qwen2.5-VL vision tower of an mmproj GGUF, following the
 * Hugging Face Qwen2_5_VisionTransformerPretrainedModel: patch embedding
 * (a conv3d over two identical frames for a still image, so the two kernel
 * halves are summed once at load), tokens regrouped into 112 px windows,
 * 2-D rotary positions (height then width frequencies, NEOX pairs), blocks
 * of RMSNorm + attention (inside a window, or over the whole image every
 * n_wa_pattern-th block) + RMSNorm + SwiGLU, then the merger (RMSNorm, the
 * 2x2 groups as rows of 4 x n_embd, linear / exact GELU / linear) and the
 * windows undone. Attention runs in query blocks so a large image needs no
 * n x n score matrix; the steps Qwen3-VL shares are in qwen_vit.c. */
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
#include "vision/qwen2vl.h"
#include "vision/mmproj_load.h"
#include "vision/qwen_vit.h"
#include "vision/vision.h"

struct qwen2vl_layer {
    float *ln1, *ln2;                              /* (D) RMSNorm gains */
    struct omni_tensor q, k, v, o;                 /* (D, D) */
    float *q_b, *k_b, *v_b, *o_b;                  /* (D) or NULL */
    struct omni_tensor gate, up, down;             /* (F, D), (F, D), (D, F) */
    float *gate_b, *up_b, *down_b;                 /* (F), (F), (D) or NULL */
};

struct qwen2vl_model {
    int D, F, H, P, n_layer, n_wa_pattern, window_px, merge;
    float eps;
    struct omni_tensor patch;                      /* (D, 3*P*P): both frames' kernels summed, F32 */
    float *patch_w;                                /* its storage */
    struct omni_tensor patch2;                     /* (D, 3*2*P*P): a pair of frames, F32, each
                                                      row [channel][frame][P][P] as HF's conv3d */
    float *patch2_w;                               /* its storage */
    float *patch_b;                                /* (D) or NULL */
    struct qwen2vl_layer *layers;                  /* (n_layer) */
    float *post_ln;                                /* (D) the merger's ln_q */
    struct omni_tensor mm0, mm2;                   /* (4D, 4D), (n_embd_lm, 4D) */
    float *mm0_b, *mm2_b;
    int n_embd_lm;
};

// ---- loading -----------------------------------------------------------------

enum { QWEN2VL_MAX_ROWS = 4096 }; /* embedding rows per image at most (see qwen2vl_load) */
_Static_assert(QWEN2VL_MAX_BATCH_PATCHES >= 4 * QWEN2VL_MAX_ROWS, "a pass holds the largest image");

bool qwen2vl_is_projector(const char *type, size_t len)
{
    return type && len == 16 && !memcmp(type, "qwen2.5vl_merger", 16);
}

void qwen2vl_free(struct qwen2vl_model *q)
{
    if (!q)
        return;
    for (int i = 0; q->layers && i < q->n_layer; i++) {
        struct qwen2vl_layer *L = &q->layers[i];
        float *v[] = { L->ln1, L->ln2, L->q_b, L->k_b, L->v_b, L->o_b, L->gate_b, L->up_b, L->down_b };
        for (size_t j = 0; j < sizeof v / sizeof *v; j++)
            free(v[j]);
    }
    free(q->layers);
    free(q->patch_w);
    free(q->patch2_w);
    free(q->patch_b);
    free(q->post_ln);
    free(q->mm0_b);
    free(q->mm2_b);
    free(q);
}

struct qwen2vl_model *qwen2vl_load(const struct gguf *g, const char *path, struct vision_info *in,
                                   char *err, size_t errlen)
{
    struct mmproj_load l = { g, path, err, errlen, 0 };
    struct qwen2vl_model *q = calloc(1, sizeof *q);
    if (!q) {
        omni_fail(err, errlen, OMNI_ERR_NOMEM, "vision: out of memory");
        return NULL;
    }
    q->merge = 2, q->window_px = 112;
    if (mmproj_key(&l, "clip.vision.embedding_length", &q->D, true, 1 << 16) ||
        mmproj_key(&l, "clip.vision.feed_forward_length", &q->F, true, 1 << 18) ||
        mmproj_key(&l, "clip.vision.block_count", &q->n_layer, true, 1024) ||
        mmproj_key(&l, "clip.vision.attention.head_count", &q->H, true, 1024) ||
        mmproj_key(&l, "clip.vision.patch_size", &q->P, true, 256) ||
        mmproj_key(&l, "clip.vision.n_wa_pattern", &q->n_wa_pattern, true, 1024) ||
        mmproj_key(&l, "clip.vision.spatial_merge_size", &q->merge, false, 2) ||
        mmproj_key(&l, "clip.vision.window_size", &q->window_px, false, 1 << 14) ||
        mmproj_floats3(&l, "clip.vision.image_mean", in->image_mean) ||
        mmproj_floats3(&l, "clip.vision.image_std", in->image_std))
        goto fail;
    q->eps = 1e-6f;
    gguf_get_f32(g, "clip.vision.attention.layer_norm_epsilon", &q->eps);
    const int D = q->D, F = q->F, P = q->P;
    /* head_dim / 4 rotary frequencies per axis; merge 2 is what the
     * reference's window and rotary code assume */
    if (D % q->H || (D / q->H) % 4 || q->merge != 2 || q->window_px % (P * q->merge)) {
        mmproj_fail(&l, OMNI_ERR_FORMAT, "inconsistent sizes (embedding, heads, merge, window)", "clip.vision");
        goto fail;
    }
    // patch embedding: two [P][P][3][D] frame kernels, summed for still images
    const struct gguf_tensor *p0 = mmproj_find(&l, "v.patch_embd.weight", true);
    const struct gguf_tensor *p1 = mmproj_find(&l, "v.patch_embd.weight.1", true);
    if (!p0 || !p1)
        goto fail;
    const int64_t K = 3LL * P * P;
    for (int i = 0; i < 2; i++) {
        const struct gguf_tensor *t = i ? p1 : p0;
        if (t->ne[0] * t->ne[1] * t->ne[2] != K || t->ne[3] * (t->n_dims == 4) != D) {
            mmproj_fail(&l, OMNI_ERR_FORMAT, "shape not [P x P x 3 x D] of tensor", t->name);
            goto fail;
        }
    }
    q->patch_w = malloc(sizeof(float) * (size_t)(K * D));
    float *row = malloc(sizeof(float) * (size_t)K);
    if (!q->patch_w || !row) {
        free(row);
        mmproj_fail(&l, OMNI_ERR_NOMEM, "out of memory for", "v.patch_embd.weight");
        goto fail;
    }
    struct omni_tensor w0 = { .type = p0->type, .ne = { K, D }, .data = p0->data };
    struct omni_tensor w1 = { .type = p1->type, .ne = { K, D }, .data = p1->data };
    /* video: the two kernels side by side per channel, as a temporal patch
     * [channel][frame][P][P] lays out its pixels */
    q->patch2_w = malloc(sizeof(float) * (size_t)(2 * K * D));
    if (!q->patch2_w) {
        free(row);
        mmproj_fail(&l, OMNI_ERR_NOMEM, "out of memory for", "v.patch_embd.weight");
        goto fail;
    }
    const int64_t PP = (int64_t)P * P;
    for (int64_t r = 0; r < D; r++) {
        omni_tensor_get_row(&w0, r, q->patch_w + r * K);
        omni_tensor_get_row(&w1, r, row);
        for (int64_t ch = 0; ch < 3; ch++) {
            memcpy(q->patch2_w + r * 2 * K + (2 * ch) * PP, q->patch_w + r * K + ch * PP, sizeof(float) * PP);
            memcpy(q->patch2_w + r * 2 * K + (2 * ch + 1) * PP, row + ch * PP, sizeof(float) * PP);
        }
        for (int64_t i = 0; i < K; i++)
            q->patch_w[r * K + i] += row[i];
    }
    free(row);
    q->patch = (struct omni_tensor){ .type = GGML_TYPE_F32, .ne = { K, D }, .data = q->patch_w };
    q->patch2 = (struct omni_tensor){ .type = GGML_TYPE_F32, .ne = { 2 * K, D }, .data = q->patch2_w };
    q->patch_b = mmproj_vec(&l, "v.patch_embd.bias", D, false);
    if (l.rc)
        goto fail;
    q->layers = calloc((size_t)q->n_layer, sizeof *q->layers);
    if (!q->layers) {
        mmproj_fail(&l, OMNI_ERR_NOMEM, "out of memory for", "layers");
        goto fail;
    }
    char n[64];
#define NAME(s) (snprintf(n, sizeof n, "v.blk.%d.%s", i, s), n)
    for (int i = 0; i < q->n_layer && !l.rc; i++) {
        struct qwen2vl_layer *L = &q->layers[i];
        L->ln1 = mmproj_vec(&l, NAME("ln1.weight"), D, true);
        L->ln2 = mmproj_vec(&l, NAME("ln2.weight"), D, true);
        mmproj_mat(&l, NAME("attn_q.weight"), D, D, &L->q);
        mmproj_mat(&l, NAME("attn_k.weight"), D, D, &L->k);
        mmproj_mat(&l, NAME("attn_v.weight"), D, D, &L->v);
        mmproj_mat(&l, NAME("attn_out.weight"), D, D, &L->o);
        mmproj_mat(&l, NAME("ffn_gate.weight"), D, F, &L->gate);
        mmproj_mat(&l, NAME("ffn_up.weight"), D, F, &L->up);
        mmproj_mat(&l, NAME("ffn_down.weight"), F, D, &L->down);
        L->q_b = mmproj_vec(&l, NAME("attn_q.bias"), D, false);
        L->k_b = mmproj_vec(&l, NAME("attn_k.bias"), D, false);
        L->v_b = mmproj_vec(&l, NAME("attn_v.bias"), D, false);
        L->o_b = mmproj_vec(&l, NAME("attn_out.bias"), D, false);
        L->gate_b = mmproj_vec(&l, NAME("ffn_gate.bias"), F, false);
        L->up_b = mmproj_vec(&l, NAME("ffn_up.bias"), F, false);
        L->down_b = mmproj_vec(&l, NAME("ffn_down.bias"), D, false);
    }
#undef NAME
    if (l.rc)
        goto fail;
    q->post_ln = mmproj_vec(&l, "v.post_ln.weight", D, true);
    const struct gguf_tensor *last = mmproj_find(&l, "mm.2.weight", true);
    if (!q->post_ln || !last)
        goto fail;
    if (last->ne[1] < 1 || last->ne[1] > 65536 || last->ne[2] * last->ne[3] != 1) {
        mmproj_fail(&l, OMNI_ERR_FORMAT, "output width out of range in tensor", "mm.2.weight");
        goto fail;
    }
    q->n_embd_lm = (int)last->ne[1];
    mmproj_mat(&l, "mm.0.weight", 4LL * D, 4LL * D, &q->mm0);
    mmproj_mat(&l, "mm.2.weight", 4LL * D, q->n_embd_lm, &q->mm2);
    q->mm0_b = mmproj_vec(&l, "mm.0.bias", 4LL * D, false);
    q->mm2_b = mmproj_vec(&l, "mm.2.bias", q->n_embd_lm, false);
    if (l.rc)
        goto fail;

    in->family = VISION_QWEN2VL;
    in->projector = "qwen2.5vl_merger";
    in->n_embd_lm = q->n_embd_lm;
    in->patch_size = P;
    in->n_embd = D;
    in->n_layer = q->n_layer;
    in->n_head = q->H;
    in->scale_factor = q->merge;
    in->merge_size = q->merge;
    /* llama.cpp's limits for these files when the keys are absent: 8 to
     * 4096 merged tokens (the HF processor allows up to 16384). The
     * reference processor's 16384 rows (12.8 MP) need gigabytes of scratch
     * and minutes of encoder on a CPU, and any request could send one: at
     * most QWEN2VL_MAX_ROWS rows (llama.cpp's own default), larger images
     * are scaled down like the reference does at its max_pixels. */
    const int64_t unit = (int64_t)P * q->merge * P * q->merge;
    if (mmproj_pixel_limits(&l, in, unit, QWEN2VL_MAX_ROWS, false))
        goto fail;
    /* Qwen2.5-VL's vision_config.tokens_per_second (2 in every released
     * checkpoint; llama.cpp's converter does not write it) */
    in->tokens_per_second = 2;
    if (mmproj_key(&l, "clip.vision.tokens_per_second", &in->tokens_per_second, false, 1 << 16))
        goto fail;
    in->image_size = P * q->merge; /* no fixed input: sides are multiples of this */
    in->tokens_per_image = 0; /* depends on the image */
    return q;
fail:
    qwen2vl_free(q);
    return NULL;
}

// ---- windows -------------------------------------------------------------------

void qwen2vl_window_order(int mh, int mw, int win, int *order, int *seg, int *n_seg)
{
    int k = 0, s = 0;
    seg[0] = 0;
    for (int y0 = 0; y0 < mh; y0 += win)
        for (int x0 = 0; x0 < mw; x0 += win) {
            for (int y = y0; y < y0 + win && y < mh; y++)
                for (int x = x0; x < x0 + win && x < mw; x++)
                    order[k++] = y * mw + x;
            seg[++s] = k;
        }
    *n_seg = s;
}

// ---- forward -------------------------------------------------------------------

struct qctx {
    const struct qwen2vl_model *q;
    struct qvit v;               /* rotary tables, scores, segments, wide weights */
    float *x, *h;                /* (n, D) */
    /* The attention block's q, k, v, att (n, D) and the MLP's ff, ff2
     * (n, F; ff also the merger's (n / 4, 4D)) are never live together: one
     * arena holds both sets (a 4096-row image: 0.6 GB of scratch, not 1). */
    float *arena;
    float *qb, *kb, *vb, *att, *ff, *ff2;
};

/* The merger over the last block's output c->x (copied to vit_out when
 * not NULL): ln_q, each unit's 4 patches as one row of 4D, mm.0, GELU,
 * mm.2 -> proj [M][n_embd_lm], still in window order. */
static void merge(struct qctx *c, int M, float *vit_out, float *proj)
{
    const struct qwen2vl_model *q = c->q;
    const int n = c->v.n;
    if (vit_out)
        memcpy(vit_out, c->x, sizeof(float) * (size_t)n * q->D);
    qvit_rows(&c->v, QVIT_RMS_NORM, c->x, q->post_ln, NULL, c->h, n, q->D);
    qvit_linear(&c->v, &q->mm0, q->mm0_b, c->h, M, c->ff);
    qvit_rows(&c->v, QVIT_GELU_ERF, NULL, NULL, NULL, c->ff, M, 4 * q->D);
    qvit_linear(&c->v, &q->mm2, q->mm2_b, c->ff, M, proj);
}

int qwen2vl_encode(const struct qwen2vl_model *q, struct tpool *tp, const float *patches, int gh,
                   int gw, float *vit_out, struct vision_embd *out, char *err, size_t errlen)
{
    const struct qwen2vl_image im = { patches, gh, gw, 1 };
    return qwen2vl_encode_batch(q, tp, &im, 1, NULL, NULL, vit_out, out, err, errlen);
}

int qwen2vl_encode_batch(const struct qwen2vl_model *q, struct tpool *tp,
                         const struct qwen2vl_image *im, int n_img, int (*cancelled)(void *user),
                         void *user, float *vit_out, struct vision_embd *outs, char *err,
                         size_t errlen)
{
    const int D = q->D, F = q->F;
    const int64_t K = 3LL * q->P * q->P;
    const int win = q->window_px / (q->P * q->merge);
    int n, max_len;
    int rc = qvit_check_batch("qwen2vl", im, n_img, outs, &n, &max_len, err, errlen);
    if (rc < 0)
        return rc;
    const int M = n / 4, nth = tp ? tpool_size(tp) : 1;
    struct qctx c = { .q = q, .v = { .tp = tp, .n = n, .D = D, .H = q->H, .eps = q->eps, .max_seg = max_len } };
    /* per image: its units' window order, its first unit in the batch */
    int *order = malloc(sizeof(int) * M), *wseg = malloc(sizeof(int) * (M + 1));
    int *fseg = malloc(sizeof(int) * (n_img + 1)), *unit0 = malloc(sizeof(int) * (n_img + 1));
    int n_wseg = 0;
    /* one image's patch rows at a time, regrouped into windows (a frame
     * pair's rows are twice as long) */
    float *in = malloc(sizeof(float) * (size_t)max_len * 2 * K);
    float *proj = malloc(sizeof(float) * (size_t)M * q->n_embd_lm);
    c.x = malloc(sizeof(float) * (size_t)n * D);
    c.h = malloc(sizeof(float) * (size_t)n * D);
    const size_t nD = (size_t)n * D, nF = (size_t)n * (F > D ? F : D);
    c.arena = malloc(sizeof(float) * (4 * nD > 2 * nF ? 4 * nD : 2 * nF));
    if (c.arena) {
        c.qb = c.arena, c.kb = c.arena + nD, c.vb = c.arena + 2 * nD, c.att = c.arena + 3 * nD;
        c.ff = c.arena, c.ff2 = c.arena + nF;
    }
    const int64_t shares[] = { ((int64_t)D + nth - 1) / nth * D, ((int64_t)F + nth - 1) / nth * D,
                               ((int64_t)D + nth - 1) / nth * F, (4LL * D + nth - 1) / nth * 4 * D,
                               ((int64_t)q->n_embd_lm + nth - 1) / nth * 4 * D };
    qvit_wide_alloc(&c.v, &q->layers[0].q, shares, (int)(sizeof shares / sizeof *shares),
                    4LL * D > F ? 4LL * D : F /* at least one row of the widest */);
    int done_img = 0;
    for (; done_img < n_img; done_img++) {
        const int mi = im[done_img].gh * im[done_img].gw / 4;
        if (!(outs[done_img].data = malloc(sizeof(float) * (size_t)mi * q->n_embd_lm)))
            break;
    }
    if (qvit_alloc(&c.v) || !order || !wseg || !fseg || !unit0 || !in || !c.x || !c.h || !c.arena ||
        !proj || done_img < n_img) {
        rc = omni_fail(err, errlen, OMNI_ERR_NOMEM, "vision: out of memory for %d patches", n);
        goto done;
    }
    // windows over each merged grid; the patch rows regrouped window by
    // window, image after image; full attention stays inside each image
    unit0[0] = 0, fseg[0] = 0, wseg[0] = 0;
    for (int i = 0; i < n_img; i++) {
        const int mh = im[i].gh / 2, mw = im[i].gw / 2, u0 = unit0[i];
        int ns;
        qwen2vl_window_order(mh, mw, win, order + u0, wseg + n_wseg, &ns);
        for (int s = 1; s <= ns; s++)
            wseg[n_wseg + s] = (wseg[n_wseg + s] + u0) * 4;
        wseg[n_wseg] = u0 * 4;
        n_wseg += ns;
        unit0[i + 1] = u0 + mh * mw;
        fseg[i + 1] = unit0[i + 1] * 4;
        // rotary angles: patch j of unit u = (uy, ux) sits at row 2 uy + j / 2,
        // column 2 ux + j % 2 of its image
        for (int k = 0; k < mh * mw; k++)
            for (int j = 0; j < 4; j++) {
                const int u = order[u0 + k];
                qvit_rope_angles(&c.v, (u0 + k) * 4 + j, 2 * (u / mw) + j / 2, 2 * (u % mw) + j % 2);
            }
    }
    /* Each block is one unit of the pool's compute budget (as a CLIP tile
     * is): an image of a thousand patches takes seconds per block, and
     * engine steps and speech passes get their turn in between. A cancelled
     * caller stops the pass between blocks. */
    for (int l = -1; l <= q->n_layer; l++) {
        if ((rc = qvit_block_begin(&c.v, cancelled, user, err, errlen)) < 0)
            goto done;
        if (l < 0 || l == q->n_layer) {
            if (l < 0) /* patch embedding, image by image: rows regrouped by window */
                for (int i = 0; i < n_img; i++) {
                    const int u0 = unit0[i], mu = unit0[i + 1] - u0;
                    const int64_t Ki = im[i].frames == 2 ? 2 * K : K;
                    for (int k = 0; k < mu; k++)
                        memcpy(in + (size_t)k * 4 * Ki, im[i].patches + (size_t)order[u0 + k] * 4 * Ki,
                               sizeof(float) * 4 * Ki);
                    qvit_linear(&c.v, im[i].frames == 2 ? &q->patch2 : &q->patch, q->patch_b, in, 4 * mu,
                                c.x + (size_t)u0 * 4 * D);
                }
            else
                merge(&c, M, vit_out, proj);
            tpool_end(tp);
            continue;
        }
        const struct qwen2vl_layer *L = &q->layers[l];
        const bool full = (l + 1) % q->n_wa_pattern == 0;
        c.v.seg = full ? fseg : wseg, c.v.n_seg = full ? n_img : n_wseg;
        // x += o(attn(rope(q), rope(k), v)) of rmsnorm(x)
        qvit_rows(&c.v, QVIT_RMS_NORM, c.x, L->ln1, NULL, c.h, n, D);
        qvit_linear(&c.v, &L->q, L->q_b, c.h, n, c.qb);
        qvit_linear(&c.v, &L->k, L->k_b, c.h, n, c.kb);
        qvit_linear(&c.v, &L->v, L->v_b, c.h, n, c.vb);
        qvit_rope_qk(&c.v, c.qb, c.kb, D);
        qvit_attention(&c.v, c.qb, c.kb, c.vb, D, c.att);
        qvit_linear(&c.v, &L->o, L->o_b, c.att, n, c.h);
        qvit_rows(&c.v, QVIT_ADD, c.h, NULL, NULL, c.x, n, D);
        // x += down(silu(gate(h)) * up(h)), h = rmsnorm(x)
        qvit_rows(&c.v, QVIT_RMS_NORM, c.x, L->ln2, NULL, c.h, n, D);
        qvit_linear(&c.v, &L->gate, L->gate_b, c.h, n, c.ff);
        qvit_linear(&c.v, &L->up, L->up_b, c.h, n, c.ff2);
        qvit_rows(&c.v, QVIT_SWIGLU, c.ff, NULL, NULL, c.ff2, n, F);
        qvit_linear(&c.v, &L->down, L->down_b, c.ff2, n, c.h);
        qvit_rows(&c.v, QVIT_ADD, c.h, NULL, NULL, c.x, n, D);
        tpool_end(tp);
    }
    // undo the windows: window row u0 + k of image i is its unit order[u0 + k]
    for (int i = 0; i < n_img; i++) {
        const int u0 = unit0[i], mu = unit0[i + 1] - u0;
        struct vision_embd *o = &outs[i];
        for (int k = 0; k < mu; k++)
            memcpy(o->data + (size_t)order[u0 + k] * q->n_embd_lm,
                   proj + (size_t)(u0 + k) * q->n_embd_lm, sizeof(float) * q->n_embd_lm);
        o->n_tokens = mu;
        o->n_embd = q->n_embd_lm;
        o->n_images = 1;
        o->tile_rows = im[i].gh / 2, o->tile_cols = im[i].gw / 2;
    }
done:
    if (rc < 0)
        qvit_outs_clear(outs, n_img);
    void *v[] = { order, wseg, fseg, unit0, in, proj, c.x, c.h, c.arena };
    for (size_t j = 0; j < sizeof v / sizeof *v; j++)
        free(v[j]);
    qvit_free(&c.v);
    return rc;
}

float *qwen2vl_pair_frames(const float *a, const float *b, int n, int P)
{
    const size_t PP = (size_t)P * P;
    float *out = malloc(sizeof(float) * (size_t)n * 6 * PP);
    if (!out)
        return NULL;
    for (size_t r = 0; r < (size_t)n; r++)
        for (size_t ch = 0; ch < 3; ch++) {
            memcpy(out + (r * 6 + 2 * ch) * PP, a + (r * 3 + ch) * PP, sizeof(float) * PP);
            memcpy(out + (r * 6 + 2 * ch + 1) * PP, b + (r * 3 + ch) * PP, sizeof(float) * PP);
        }
    return out;
}

// ---- M-RoPE positions ------------------------------------------------------------

int qwen2vl_mrope_positions_av(const int32_t *ids, int n, int32_t image_token, int32_t video_token,
                               const struct qwen2vl_grid *grids, int n_grids, int32_t *pos, char *err,
                               size_t errlen)
{
    int32_t *t = pos, *h = pos + n, *w = pos + 2 * (size_t)n;
    int32_t next = 0;
    int g = 0;
    for (int i = 0; i < n;) {
        const int32_t id = ids[i];
        if (id != image_token && id != video_token) {
            t[i] = h[i] = w[i] = next++;
            i++;
            continue;
        }
        int run = 0;
        while (i + run < n && ids[i + run] == id)
            run++;
        const struct qwen2vl_grid *gr = g < n_grids ? &grids[g] : NULL;
        const int gt = gr && id == video_token ? gr->t : 1;
        if (!gr || gr->rows < 1 || gr->cols < 1 || gt < 1 || (id == image_token && gr->t > 1) ||
            (int64_t)gt * gr->rows * gr->cols != run || !(gr->t_step >= 0 && gr->t_step <= 1e6))
            return omni_fail(err, errlen, OMNI_ERR_ARG, "vision: %s run %d of %d tokens does not match its grid",
                             id == image_token ? "image" : "video", g, run);
        const int rows = gr->rows, cols = gr->cols, per = rows * cols;
        int32_t top = (rows > cols ? rows : cols) - 1;
        for (int k = 0; k < run; k++) {
            /* the published get_rope_index: time in float, truncated */
            const int32_t dt = k >= per ? (int32_t)((double)(k / per) * gr->t_step + 1e-6) : 0;
            t[i + k] = next + dt;
            h[i + k] = next + (k % per) / cols;
            w[i + k] = next + k % cols;
            top = dt > top ? dt : top;
        }
        next += top + 1;
        i += run, g++;
    }
    if (g != n_grids)
        return omni_fail(err, errlen, OMNI_ERR_ARG, "vision: %d grids but %d image and video runs", n_grids, g);
    return next;
}

int qwen2vl_mrope_positions(const int32_t *ids, int n, int32_t image_token, const int (*grids)[2],
                            int n_images, int32_t *pos, char *err, size_t errlen)
{
    struct qwen2vl_grid *g = malloc(sizeof *g * (size_t)(n_images > 0 ? n_images : 1));
    if (!g)
        return omni_fail(err, errlen, OMNI_ERR_NOMEM, "vision: out of memory");
    for (int i = 0; i < n_images; i++)
        g[i] = (struct qwen2vl_grid){ .t = 1, .rows = grids[i][0], .cols = grids[i][1] };
    /* no video token: image runs only */
    int rc = qwen2vl_mrope_positions_av(ids, n, image_token, image_token, g, n_images, pos, err, errlen);
    free(g);
    return rc;
}
