/* whisper_forward.c - the Whisper encoder and decoder passes.
 * Encoder: two conv1d (k 3, strides 1 and 2) + GELU, sinusoidal positions,
 * pre-LN transformer blocks, final LN; then each decoder layer's cross-attention
 * K/V of the window. Decoder: token + position embeddings, pre-LN blocks of
 * causal self-attention over a cached K/V, cross-attention and MLP, final LN,
 * logits through the tied token embedding. Matmuls go through omni_matmul.
 * A pass takes several windows or token rows at once, of one state or of
 * many (the batcher's): the weights are read once for all of them, and only
 * attention looks at each row's own state (its caches, its window). */
#include "audio/whisper_impl.h"
#include "audio/whisper_dev.h"

#include "src/core/omni.h"
#include "src/core/ops.h"
#include "src/core/quant.h"
#include "src/core/threadpool.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define LN_EPS 1e-5f

// ---- per-row steps, split across the pool ----------------------------------

struct rows_job {
    float *y;            /* [n][d] */
    const float *x;      /* [n][d] input (layer norm) or addend */
    const float *w, *b;  /* (d) */
    int n, d;
};

#define FOR_ROWS(j, ith, nth, r) \
    for (int r = (int)((int64_t)(j)->n * (ith) / (nth)); r < (int)((int64_t)(j)->n * ((ith) + 1) / (nth)); r++)

static void layer_norm_worker(void *arg, int ith, int nth)
{
    const struct rows_job *j = arg;
    const struct omni_ops *op = omni_ops();
    FOR_ROWS(j, ith, nth, r)
        op->layernorm(j->y + (size_t)r * j->d, j->x + (size_t)r * j->d, j->w, j->b, j->d, LN_EPS);
}

/* y = gelu(y + b), the exact (erf) GELU */
static void bias_gelu_worker(void *arg, int ith, int nth)
{
    const struct rows_job *j = arg;
    const struct omni_ops *op = omni_ops();
    FOR_ROWS(j, ith, nth, r) {
        float *y = j->y + (size_t)r * j->d;
        for (int i = 0; i < j->d; i++)
            y[i] += j->b[i];
        op->gelu_erf(y, j->d);
    }
}

/* y += x + b (residual of a projection x with bias b; b may be NULL) */
static void add_bias_worker(void *arg, int ith, int nth)
{
    const struct rows_job *j = arg;
    FOR_ROWS(j, ith, nth, r) {
        float *y = j->y + (size_t)r * j->d;
        const float *x = j->x ? j->x + (size_t)r * j->d : NULL;
        for (int i = 0; i < j->d; i++)
            y[i] += (x ? x[i] : 0.0f) + (j->b ? j->b[i] : 0.0f);
    }
}

static void layer_norm(struct whisper_work *wk, float *y, const float *x, int n, int d, const float *w,
                       const float *b)
{
    struct rows_job j = { y, x, w, b, n, d };
    whisper_run(wk, layer_norm_worker, &j);
}

/* y[n][n_out] = W x (+ b) */
static void linear(struct whisper_work *wk, const struct omni_tensor *w, const float *b, const float *x, int n,
                   float *y)
{
    omni_matmul(wk->tp, w, x, n, y);
    if (b) {
        struct rows_job j = { y, NULL, NULL, b, n, (int)w->ne[1] };
        whisper_run(wk, add_bias_worker, &j);
    }
}

/* y += x + b: the residual connection after a projection */
static void residual(struct whisper_work *wk, float *y, const float *x, const float *b, int n, int d)
{
    struct rows_job j = { y, x, NULL, b, n, d };
    whisper_run(wk, add_bias_worker, &j);
}

static void bias_gelu(struct whisper_work *wk, float *y, const float *b, int n, int d)
{
    struct rows_job j = { y, NULL, NULL, b, n, d };
    whisper_run(wk, bias_gelu_worker, &j);
}

// ---- attention --------------------------------------------------------------

/* Full (non-causal) attention of n_ctx queries over n_ctx keys, head by head
 * (omni_attn_dense: scores = (q_h / sqrt(d_h)) k_h^T, out_h = softmax(scores)
 * v_h as two GEMMs straight on the [n_ctx][d] rows); each thread takes a
 * share of the query rows and its slice of the [n_ctx][n_ctx] score buffer. */
struct enc_attn_job {
    struct whisper_work *wk;
    const float *q, *k, *v;
    float *out;
    int n, d, n_head; /* n: n_ctx (FOR_ROWS splits the query rows) */
};

static void enc_attn_worker(void *arg, int ith, int nth)
{
    const struct enc_attn_job *j = arg;
    const int r0 = (int)((int64_t)j->n * ith / nth), r1 = (int)((int64_t)j->n * (ith + 1) / nth);
    const int dh = j->d / j->n_head;
    const float scale = 1.0f / sqrtf((float)dh);
    if (r0 >= r1)
        return;
    float *scores = j->wk->e_scores + (size_t)r0 * j->n;
    for (int h = 0; h < j->n_head; h++)
        omni_attn_dense(j->q + (size_t)r0 * j->d + h * dh, j->k + h * dh, j->v + h * dh,
                        j->out + (size_t)r0 * j->d + h * dh, (size_t)j->d, r1 - r0, j->n, dh, scale,
                        scores, NULL, NULL);
}

static void encoder_attention(struct whisper_work *wk, const float *q, const float *k, const float *v, float *out,
                              int n_ctx, int d, int n_head)
{
    struct enc_attn_job j = { wk, q, k, v, out, n_ctx, d, n_head };
    whisper_run(wk, enc_attn_worker, &j);
}

/* Decoder attention of row t's query. Self-attention (causal): over keys
 * 0 .. pos of its state's cache of its decoder slot in layer `layer`;
 * cross-attention: over its state's window (the n_ctx keys encoded). */
struct dec_attn_job {
    struct whisper_work *w;
    const struct whisper_row *rows;
    const float *q;
    float *out;
    int layer, n_rows;
    bool causal;
};

static void dec_attn_worker(void *arg, int ith, int nth)
{
    const struct dec_attn_job *j = arg;
    const struct whisper_hparams *hp = &j->w->m->hp;
    const struct omni_ops *op = omni_ops();
    const int d = hp->n_text_state, n_head = hp->n_text_head, nc = hp->n_audio_ctx;
    const int dh = d / n_head, n_items = j->n_rows * n_head;
    const float scale = 1.0f / sqrtf((float)dh);
    const int max_keys = nc > hp->n_text_ctx ? nc : hp->n_text_ctx;
    float *sc = j->w->d_scores + (size_t)ith * max_keys;
    enum { CHUNK = 256 };
    const void *rows[CHUNK]; /* a chunk of the head's K or V rows, d apart */
    for (int it = n_items * ith / nth; it < n_items * (ith + 1) / nth; it++) {
        const int t = it / n_head, h = it % n_head;
        const struct whisper_row *r = &j->rows[t];
        const int n_keys = j->causal ? r->pos + 1 : r->s->n_ctx;
        const bool f16 = !j->causal && j->w->m->cross_f16;
        const size_t at = (size_t)j->layer * (j->causal ? hp->n_text_ctx : nc) * d + h * dh;
        const size_t esz = f16 ? sizeof(uint16_t) : sizeof(float);
        const char *K = (const char *)(j->causal ? (const void *)r->s->self_k[r->slot] : r->s->cross_k) + at * esz;
        const char *V = (const char *)(j->causal ? (const void *)r->s->self_v[r->slot] : r->s->cross_v) + at * esz;
        const float *q = j->q + (size_t)t * d + h * dh;
        for (int i0 = 0; i0 < n_keys; i0 += CHUNK) {
            const int n = n_keys - i0 < CHUNK ? n_keys - i0 : CHUNK;
            for (int i = 0; i < n; i++)
                rows[i] = K + (size_t)(i0 + i) * d * esz;
            if (f16)
                op->attn_scores_f16(sc + i0, q, (const uint16_t *const *)rows, n, dh, scale);
            else
                op->attn_scores(sc + i0, q, (const float *const *)rows, n, dh, scale);
        }
        op->softmax(sc, n_keys);
        float *o = j->out + (size_t)t * d + h * dh;
        memset(o, 0, dh * sizeof(float));
        for (int i0 = 0; i0 < n_keys; i0 += CHUNK) {
            const int n = n_keys - i0 < CHUNK ? n_keys - i0 : CHUNK;
            for (int i = 0; i < n; i++)
                rows[i] = V + (size_t)(i0 + i) * d * esz;
            if (f16)
                op->attn_wsum_f16(o, sc + i0, (const uint16_t *const *)rows, n, dh);
            else
                op->attn_wsum(o, sc + i0, (const float *const *)rows, n, dh);
        }
    }
}

// ---- scratch ------------------------------------------------------------------

void whisper_run(struct whisper_work *w, void (*fn)(void *, int, int), void *arg)
{
    if (w->tp)
        tpool_run(w->tp, fn, arg);
    else
        fn(arg, 0, 1);
}

static size_t max_keys(const struct whisper_hparams *hp)
{
    return (size_t)(hp->n_audio_ctx > hp->n_text_ctx ? hp->n_audio_ctx : hp->n_text_ctx);
}

/* im2col floats of one window: conv1's [2 nc][3 n_mels] or conv2's [nc][3 d] */
static size_t col_floats(const struct whisper_hparams *hp)
{
    const size_t c1 = (size_t)2 * hp->n_audio_ctx * 3 * hp->n_mels;
    const size_t c2 = (size_t)hp->n_audio_ctx * 3 * hp->n_audio_state;
    return c1 > c2 ? c1 : c2;
}

struct whisper_work *whisper_work_new(const struct whisper_model *m, struct tpool *tp)
{
    struct whisper_work *w = calloc(1, sizeof *w);
    if (!w)
        return NULL;
    w->m = m;
    w->tp = tp;
    w->nth = tp ? tpool_size(tp) : 1;
    if (!(w->d_scores = malloc((size_t)w->nth * max_keys(&m->hp) * sizeof(float)))) {
        free(w);
        return NULL;
    }
    return w;
}

void whisper_work_free(struct whisper_work *w)
{
    if (!w)
        return;
    float *bufs[] = { w->e_col, w->e_x, w->e_h, w->e_q, w->e_k, w->e_v, w->e_att, w->e_mlp,
                      w->e_scores, w->d_x, w->d_h, w->d_q,
                      w->d_k, w->d_v, w->d_att, w->d_mlp, w->d_scores, w->logits };
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        free(bufs[i]);
    free(w);
}

/* Each buffer of list grown to per[i] * n floats (contents not kept). */
static bool grow(float **const *list, const size_t *per, int k, int n)
{
    for (int i = 0; i < k; i++) {
        free(*list[i]);
        if (!(*list[i] = malloc(per[i] * (size_t)n * sizeof(float))))
            return false;
    }
    return true;
}

static int reserve_windows(struct whisper_work *w, int n, char *err, size_t errlen)
{
    const struct whisper_hparams *hp = &w->m->hp;
    const size_t nc = hp->n_audio_ctx, d = hp->n_audio_state;
    if (n <= w->cap_windows)
        return OMNI_OK;
    float **const list[] = { &w->e_col, &w->e_x, &w->e_h, &w->e_q, &w->e_k, &w->e_v, &w->e_att, &w->e_mlp,
                             &w->e_scores };
    const size_t per[] = { col_floats(hp), nc * d, nc * d, nc * d, nc * d, nc * d, nc * d, nc * 4 * d };
    const size_t once[] = { nc * nc }; /* one window at a time, split by query rows */
    w->cap_windows = 0;
    if (!grow(list, per, 8, n) || !grow(list + 8, once, 1, 1))
        return omni_fail(err, errlen, OMNI_ERR_NOMEM, "whisper: encode: out of memory for %d windows", n);
    w->cap_windows = n;
    return OMNI_OK;
}

static int reserve_rows(struct whisper_work *w, int n, char *err, size_t errlen)
{
    const struct whisper_hparams *hp = &w->m->hp;
    const size_t d = hp->n_text_state;
    if (n <= w->cap_rows)
        return OMNI_OK;
    float **const list[] = { &w->d_x, &w->d_h, &w->d_q, &w->d_k, &w->d_v, &w->d_att, &w->d_mlp, &w->logits };
    const size_t per[] = { d, d, d, d, d, d, 4 * d, (size_t)hp->n_vocab };
    w->cap_rows = 0;
    if (!grow(list, per, 8, n))
        return omni_fail(err, errlen, OMNI_ERR_NOMEM, "whisper: decode: out of memory for %d rows", n);
    w->cap_rows = n;
    return OMNI_OK;
}

// ---- encoder ------------------------------------------------------------------

/* im2col for a kernel-3, padding-1 conv1d: col[t][i*3 + k] = in(i, stride*t + k - 1). */
struct im2col_job {
    float *col;
    const float *in;
    int n_out, n_in, stride, in_len;
    bool channels_first;     /* in is [n_in][row_stride] (mel) instead of [len][n_in] */
    int row_stride, offset;  /* mel: frames per row, first frame */
};

static void im2col_worker(void *arg, int ith, int nth)
{
    const struct im2col_job *j = arg;
    for (int t = (int)((int64_t)j->n_out * ith / nth); t < (int)((int64_t)j->n_out * (ith + 1) / nth); t++) {
        float *c = j->col + (size_t)t * j->n_in * 3;
        for (int k = 0; k < 3; k++) {
            const int p = j->stride * t + k - 1;
            const bool inside = p >= 0 && p < j->in_len;
            for (int i = 0; i < j->n_in; i++) {
                float x = 0.0f;
                if (inside && j->channels_first)
                    x = j->offset + p < j->row_stride ? j->in[(size_t)i * j->row_stride + j->offset + p] : 0.0f;
                else if (inside)
                    x = j->in[(size_t)p * j->n_in + i];
                c[i * 3 + k] = x;
            }
        }
    }
}

/* n floats into dst's elements at..at+n-1, in the model's cross K/V type. */
static void store_cross(const struct whisper_model *m, void *dst, size_t at, const float *src, size_t n)
{
    if (!m->cross_f16)
        memcpy((float *)dst + at, src, n * sizeof(float));
    else
        omni_ops()->f32_to_f16(src, (uint16_t *)dst + at, (int64_t)n);
}

int whisper_forward_encode(struct whisper_work *w, struct whisper_state *const *states, const float *const *mel,
                           const int *n_frames, const int *offset, const int *n_ctx, int n, char *err,
                           size_t errlen)
{
    if (w->dev)
        return whisper_dev_encode(w->dev, states, mel, n_frames, offset, n_ctx, n, err, errlen);
    const struct whisper_model *m = w->m;
    const struct whisper_hparams *hp = &m->hp;
    const int d = hp->n_audio_state;
    const size_t layer_stride = (size_t)hp->n_audio_ctx * d; /* of the states' cross K/V */
    int rc = reserve_windows(w, n, err, errlen);
    if (rc < 0)
        return rc;
    /* The windows' positions lie one after another: window i has n_ctx[i]
     * rows from row at[i] (fewer than n_audio_ctx with a reduced context). */
    int at[n + 1];
    at[0] = 0;
    for (int i = 0; i < n; i++)
        at[i + 1] = at[i] + n_ctx[i];
    const int rows = at[n];

    /* conv1 (stride 1) + GELU over each window's 2 n_ctx frames: [2 rows][d] */
    for (int i = 0; i < n; i++) {
        struct im2col_job c1 = { w->e_col + (size_t)2 * at[i] * 3 * hp->n_mels, mel[i], 2 * n_ctx[i], hp->n_mels, 1,
                                 2 * n_ctx[i], true, n_frames[i], offset[i] };
        whisper_run(w, im2col_worker, &c1);
    }
    omni_matmul(w->tp, &m->conv1_w, w->e_col, (int64_t)2 * rows, w->e_mlp);
    bias_gelu(w, w->e_mlp, m->conv1_b, 2 * rows, d);
    /* conv2 (stride 2) + GELU: [rows][d], then the first n_ctx positions */
    for (int i = 0; i < n; i++) {
        struct im2col_job c2 = { w->e_col + (size_t)at[i] * 3 * d, w->e_mlp + (size_t)2 * at[i] * d, n_ctx[i], d, 2,
                                 2 * n_ctx[i], false, 0, 0 };
        whisper_run(w, im2col_worker, &c2);
    }
    omni_matmul(w->tp, &m->conv2_w, w->e_col, rows, w->e_x);
    bias_gelu(w, w->e_x, m->conv2_b, rows, d);
    for (int i = 0; i < n; i++)
        residual(w, w->e_x + (size_t)at[i] * d, m->enc_pos, NULL, n_ctx[i], d);

    for (int l = 0; l < hp->n_audio_layer; l++) {
        const struct whisper_enc_layer *L = &m->enc[l];
        /* self-attention, each window over itself */
        layer_norm(w, w->e_h, w->e_x, rows, d, L->attn_ln_w, L->attn_ln_b);
        linear(w, &L->attn_q, L->attn_q_b, w->e_h, rows, w->e_q);
        linear(w, &L->attn_k, NULL, w->e_h, rows, w->e_k);
        linear(w, &L->attn_v, L->attn_v_b, w->e_h, rows, w->e_v);
        for (int i = 0; i < n; i++) {
            const size_t o = (size_t)at[i] * d;
            encoder_attention(w, w->e_q + o, w->e_k + o, w->e_v + o, w->e_att + o, n_ctx[i], d, hp->n_audio_head);
        }
        linear(w, &L->attn_out, NULL, w->e_att, rows, w->e_h);
        residual(w, w->e_x, w->e_h, L->attn_out_b, rows, d);
        /* MLP */
        layer_norm(w, w->e_h, w->e_x, rows, d, L->mlp_ln_w, L->mlp_ln_b);
        linear(w, &L->mlp_0, NULL, w->e_h, rows, w->e_mlp);
        bias_gelu(w, w->e_mlp, L->mlp_0_b, rows, 4 * d);
        linear(w, &L->mlp_2, NULL, w->e_mlp, rows, w->e_h);
        residual(w, w->e_x, w->e_h, L->mlp_2_b, rows, d);
    }
    layer_norm(w, w->e_h, w->e_x, rows, d, m->enc_ln_w, m->enc_ln_b);
    for (int i = 0; i < n; i++) {
        memcpy(states[i]->enc_out, w->e_h + (size_t)at[i] * d, (size_t)n_ctx[i] * d * sizeof(float));
        states[i]->n_ctx = n_ctx[i];
    }

    /* cross-attention keys and values of every decoder layer, once per window */
    for (int l = 0; l < hp->n_text_layer; l++) {
        const struct whisper_dec_layer *L = &m->dec[l];
        linear(w, &L->cross_k, NULL, w->e_h, rows, w->e_k);
        linear(w, &L->cross_v, L->cross_v_b, w->e_h, rows, w->e_v);
        for (int i = 0; i < n; i++) {
            const size_t o = (size_t)at[i] * d, len = (size_t)n_ctx[i] * d;
            store_cross(m, states[i]->cross_k, l * layer_stride, w->e_k + o, len);
            store_cross(m, states[i]->cross_v, l * layer_stride, w->e_v + o, len);
        }
    }
    return OMNI_OK;
}

int whisper_encode_ctx(struct whisper_state *s, const float *mel, int n_frames, int offset, int n_ctx, char *err,
                       size_t errlen)
{
    if (!mel || n_frames < 1 || offset < 0 || offset >= n_frames)
        return omni_fail(err, errlen, OMNI_ERR_ARG, "whisper: encode: offset %d outside %d mel frames", offset,
                         n_frames);
    if (n_ctx < 1 || n_ctx > s->m->hp.n_audio_ctx)
        return omni_fail(err, errlen, OMNI_ERR_ARG, "whisper: encode: audio context %d outside 1..%d", n_ctx,
                         s->m->hp.n_audio_ctx);
    s->n_ctx = 0; /* no cross-attention until the pass has filled it */
    if (s->batcher)
        return whisper_batcher_encode(s->batcher, s, mel, n_frames, offset, n_ctx, err, errlen);
    return whisper_forward_encode(s->work, &s, &mel, &n_frames, &offset, &n_ctx, 1, err, errlen);
}

int whisper_encode(struct whisper_state *s, const float *mel, int n_frames, int offset, char *err, size_t errlen)
{
    return whisper_encode_ctx(s, mel, n_frames, offset, s->m->hp.n_audio_ctx, err, errlen);
}

int whisper_encoded_ctx(const struct whisper_state *s) { return s->n_ctx; }

const float *whisper_encoder_output(const struct whisper_state *s) { return s->enc_out; }

// ---- decoder ------------------------------------------------------------------

static int ensure_cache(struct whisper_state *s, int slot, char *err, size_t errlen)
{
    const struct whisper_hparams *hp = &s->m->hp;
    const size_t cache = (size_t)hp->n_text_layer * hp->n_text_ctx * hp->n_text_state;
    if (s->self_k[slot])
        return OMNI_OK;
    if (!(s->self_k[slot] = malloc(cache * sizeof(float))) || !(s->self_v[slot] = malloc(cache * sizeof(float)))) {
        free(s->self_k[slot]);
        s->self_k[slot] = NULL;
        return omni_fail(err, errlen, OMNI_ERR_NOMEM, "whisper: decode: out of memory for a K/V cache");
    }
    return OMNI_OK;
}

int whisper_forward_decode(struct whisper_work *w, const struct whisper_row *rows, int n, char *err, size_t errlen)
{
    if (w->dev)
        return whisper_dev_decode(w->dev, rows, n, err, errlen);
    const struct whisper_model *m = w->m;
    const struct whisper_hparams *hp = &m->hp;
    const int d = hp->n_text_state, nt = hp->n_text_ctx, nv = hp->n_vocab;
    int rc = reserve_rows(w, n, err, errlen);
    for (int t = 0; t < n && rc == OMNI_OK; t++)
        rc = ensure_cache(rows[t].s, rows[t].slot, err, errlen);
    if (rc < 0)
        return rc;

    /* token + position embeddings */
    for (int t = 0; t < n; t++) {
        float *x = w->d_x + (size_t)t * d;
        omni_tensor_get_row(&m->tok_emb, rows[t].token, x);
        const float *pe = m->dec_pos + (size_t)rows[t].pos * d;
        for (int i = 0; i < d; i++)
            x[i] += pe[i];
    }
    for (int l = 0; l < hp->n_text_layer; l++) {
        const struct whisper_dec_layer *L = &m->dec[l];
        /* causal self-attention; every row's K/V go into its cache first */
        layer_norm(w, w->d_h, w->d_x, n, d, L->self.attn_ln_w, L->self.attn_ln_b);
        linear(w, &L->self.attn_q, L->self.attn_q_b, w->d_h, n, w->d_q);
        linear(w, &L->self.attn_k, NULL, w->d_h, n, w->d_k);
        linear(w, &L->self.attn_v, L->self.attn_v_b, w->d_h, n, w->d_v);
        for (int t = 0; t < n; t++) {
            const size_t at = ((size_t)l * nt + rows[t].pos) * d;
            memcpy(rows[t].s->self_k[rows[t].slot] + at, w->d_k + (size_t)t * d, d * sizeof(float));
            memcpy(rows[t].s->self_v[rows[t].slot] + at, w->d_v + (size_t)t * d, d * sizeof(float));
        }
        struct dec_attn_job sa = { w, rows, w->d_q, w->d_att, l, n, true };
        whisper_run(w, dec_attn_worker, &sa);
        linear(w, &L->self.attn_out, NULL, w->d_att, n, w->d_h);
        residual(w, w->d_x, w->d_h, L->self.attn_out_b, n, d);
        /* cross-attention over each row's window */
        layer_norm(w, w->d_h, w->d_x, n, d, L->cross_ln_w, L->cross_ln_b);
        linear(w, &L->cross_q, L->cross_q_b, w->d_h, n, w->d_q);
        struct dec_attn_job ca = { w, rows, w->d_q, w->d_att, l, n, false };
        whisper_run(w, dec_attn_worker, &ca);
        linear(w, &L->cross_out, NULL, w->d_att, n, w->d_h);
        residual(w, w->d_x, w->d_h, L->cross_out_b, n, d);
        /* MLP */
        layer_norm(w, w->d_h, w->d_x, n, d, L->self.mlp_ln_w, L->self.mlp_ln_b);
        linear(w, &L->self.mlp_0, NULL, w->d_h, n, w->d_mlp);
        bias_gelu(w, w->d_mlp, L->self.mlp_0_b, n, 4 * d);
        linear(w, &L->self.mlp_2, NULL, w->d_mlp, n, w->d_h);
        residual(w, w->d_x, w->d_h, L->self.mlp_2_b, n, d);
    }
    /* final norm of the rows that want logits, then the token embedding */
    int n_out = 0;
    for (int t = 0; t < n; t++)
        if (rows[t].logits >= 0)
            memmove(w->d_x + (size_t)n_out++ * d, w->d_x + (size_t)t * d, d * sizeof(float));
    if (n_out == 0)
        return OMNI_OK;
    layer_norm(w, w->d_h, w->d_x, n_out, d, m->dec_ln_w, m->dec_ln_b);
    omni_matmul(w->tp, &m->tok_emb, w->d_h, n_out, w->logits);
    for (int t = 0, o = 0; t < n; t++)
        if (rows[t].logits >= 0)
            memcpy(rows[t].s->logits + (size_t)rows[t].logits * nv, w->logits + (size_t)o++ * nv,
                   (size_t)nv * sizeof(float));
    return OMNI_OK;
}

static int check_token(const struct whisper_state *s, int32_t tok, char *err, size_t errlen)
{
    if (tok < 0 || tok >= s->m->hp.n_vocab)
        return omni_fail(err, errlen, OMNI_ERR_ARG, "whisper: decode: token %d out of range (n_vocab %d)", tok,
                         s->m->hp.n_vocab);
    return OMNI_OK;
}

/* Rows t of s (slot[t], tokens[t], pos[t]); logits of the last n_out. */
static int decode_rows(struct whisper_state *s, const int *slot, const int32_t *tokens, const int *pos, int n,
                       int n_out, char *err, size_t errlen)
{
    if (s->n_ctx < 1)
        return omni_fail(err, errlen, OMNI_ERR_ARG, "whisper: decode: no audio encoded yet (whisper_encode first)");
    int rc = whisper_state_logits_reserve(s, n_out, err, errlen);
    struct whisper_row *rows = rc == OMNI_OK ? malloc((size_t)n * sizeof *rows) : NULL;
    if (rc == OMNI_OK && !rows)
        rc = omni_fail(err, errlen, OMNI_ERR_NOMEM, "whisper: decode: out of memory");
    if (rc < 0)
        return rc;
    for (int t = 0; t < n; t++)
        rows[t] = (struct whisper_row){ s, slot[t], pos[t], t >= n - n_out ? t - (n - n_out) : -1, tokens[t] };
    rc = s->batcher ? whisper_batcher_decode(s->batcher, rows, n, err, errlen)
                    : whisper_forward_decode(s->work, rows, n, err, errlen);
    free(rows);
    return rc;
}

int whisper_decode(struct whisper_state *s, int decoder, const int32_t *tokens, int n_tokens, int n_past,
                   bool all_logits, char *err, size_t errlen)
{
    const int nt = s->m->hp.n_text_ctx;
    if (decoder < 0 || decoder >= WHISPER_MAX_DECODERS || n_tokens < 1 || n_past < 0 || n_past + n_tokens > nt)
        return omni_fail(err, errlen, OMNI_ERR_ARG,
                         "whisper: decode: decoder %d, %d tokens at %d exceed the %d-token text context", decoder,
                         n_tokens, n_past, nt);
    for (int t = 0; t < n_tokens; t++) {
        int rc = check_token(s, tokens[t], err, errlen);
        if (rc < 0)
            return rc;
        s->d_slot[t] = decoder;
        s->d_pos[t] = n_past + t;
    }
    return decode_rows(s, s->d_slot, tokens, s->d_pos, n_tokens, all_logits ? n_tokens : 1, err, errlen);
}

int whisper_decode_batch(struct whisper_state *s, const int *decoders, const int32_t *tokens, const int *n_past,
                         int n, char *err, size_t errlen)
{
    if (n < 1 || n > WHISPER_MAX_DECODERS)
        return omni_fail(err, errlen, OMNI_ERR_ARG, "whisper: decode: batch of %d (1..%d)", n, WHISPER_MAX_DECODERS);
    for (int t = 0; t < n; t++) {
        int rc = check_token(s, tokens[t], err, errlen);
        if (rc < 0)
            return rc;
        bool dup = false;
        for (int u = 0; u < t; u++)
            dup = dup || decoders[u] == decoders[t];
        if (decoders[t] < 0 || decoders[t] >= WHISPER_MAX_DECODERS || dup || n_past[t] < 0 ||
            n_past[t] >= s->m->hp.n_text_ctx)
            return omni_fail(err, errlen, OMNI_ERR_ARG, "whisper: decode: decoder %d at %d (distinct slots "
                             "0..%d, positions below %d)", decoders[t], n_past[t], WHISPER_MAX_DECODERS - 1,
                             s->m->hp.n_text_ctx);
    }
    return decode_rows(s, decoders, tokens, n_past, n, n, err, errlen);
}

const float *whisper_logits(const struct whisper_state *s) { return s->logits; }
