/* bert.c - tokenizing for and running the encoder models of bert.h.
 *
 * One call forwards a whole batch: the inputs' tokens are concatenated into
 * one [T][H] activation matrix so that every projection is one matmul over
 * all T rows (the GEMM paths of src/core/matmul.c pay from a few dozen
 * rows), while attention runs per input and head (bidirectional, no
 * padding, no cross-talk). The layers are post-norm as in BERT:
 *   x = LN(x + Attn(x));  x = LN(x + FFN(x))
 * with the family differences in small branches: learned positions (bert),
 * rotary positions on a fused QKV and SwiGLU (nomic-bert), ALiBi and GEGLU
 * (jina-bert-v2). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "llm/bert_int.h"
#include "llm/tokenizer.h"
#include "src/core/matmul.h"
#include "src/core/ops.h"
#include "src/core/omni.h"
#include "src/core/quant.h"
#include "src/core/threadpool.h"

// ---- tokenizing ---------------------------------------------------------------------

void bert_input_free(struct bert_input *in)
{
    if (!in)
        return;
    free(in->ids);
    free(in->type_ids);
    *in = (struct bert_input){ 0 };
}

/* The ids of text (no specials added) into a malloc'ed array; OMNI_ERR_LIMIT
 * past max tokens with *n the full count. */
static int bert_encode(const struct bert_model *m, const char *text, int max, int32_t **ids, int *n,
                       char *err, size_t errlen)
{
    size_t len = strlen(text);
    int cap = max + 1;
    if (!(*ids = malloc(sizeof **ids * (size_t)cap)))
        return omni_fail(err, errlen, OMNI_ERR_NOMEM, "bert: out of memory");
    int needed = 0;
    int rc = tokenizer_encode(m->tok, text, len, 0, *ids, cap, &needed);
    if (rc == OMNI_ERR_LIMIT || (rc >= 0 && rc > max)) {
        *n = rc >= 0 ? rc : needed;
        return OMNI_ERR_LIMIT;
    }
    if (rc < 0)
        return omni_fail(err, errlen, rc, "bert: the text is not valid UTF-8");
    *n = rc;
    return 0;
}

int bert_tokenize(const struct bert_model *m, const char *text, const char *pair,
                  struct bert_input *out, char *err, size_t errlen)
{
    if (!m || !text || !out)
        return omni_fail(err, errlen, OMNI_ERR_ARG, "bert: no model, text or output");
    *out = (struct bert_input){ 0 };
    const int n_ctx = m->info.n_ctx_train, frame = pair ? 3 : 2;
    int32_t *a = NULL, *b = NULL;
    int na = 0, nb = 0, rc;
    const int room = n_ctx - frame > 0 ? n_ctx - frame : 0;
    rc = bert_encode(m, text, room, &a, &na, err, errlen);
    if (rc == 0 && pair)
        rc = bert_encode(m, pair, room - na, &b, &nb, err, errlen);
    if (rc == OMNI_ERR_LIMIT) {
        rc = omni_fail(err, errlen, OMNI_ERR_LIMIT,
                       "bert: the input is over %d tokens, the most the model takes (%s)",
                       n_ctx, m->name);
        goto done;
    }
    if (rc < 0)
        goto done;
    const int n = na + nb + frame;
    out->ids = malloc(sizeof *out->ids * (size_t)n);
    out->type_ids = calloc((size_t)n, sizeof *out->type_ids);
    if (!out->ids || !out->type_ids) {
        bert_input_free(out);
        rc = omni_fail(err, errlen, OMNI_ERR_NOMEM, "bert: out of memory");
        goto done;
    }
    int k = 0;
    out->ids[k++] = m->cls_id;
    memcpy(out->ids + k, a, sizeof *a * (size_t)na);
    k += na;
    out->ids[k++] = m->sep_id;
    if (pair) {
        for (int i = k; i < n; i++)
            out->type_ids[i] = 1; /* the second segment, its [SEP] included */
        memcpy(out->ids + k, b, sizeof *b * (size_t)nb);
        k += nb;
        out->ids[k++] = m->sep_id;
    }
    out->n = k;
    rc = 0;
done:
    free(a);
    free(b);
    return rc;
}

// ---- forward scratch ------------------------------------------------------------------

struct bert_run {
    struct bert_model *m;
    const struct bert_input *in;
    int n, max_len;
    int64_t T;            /* tokens of all inputs */
    int64_t *off;         /* (n + 1) first row of each input */
    float *x;             /* (T, H) the residual stream */
    float *h;             /* (T, H) a sublayer's output */
    float *q, *k, *v;     /* (T, H) */
    float *att;           /* (T, H) heads side by side */
    float *qkv;           /* (T, 3H) nomic-bert */
    float *up, *gate;     /* (T, F) */
    float *scores;        /* (threads, BERT_ATTN_ROWS, max_len) */
    int n_threads;
};

static void bert_run_free(struct bert_run *r)
{
    float *v[] = { r->x, r->h, r->q, r->k, r->v, r->att, r->qkv, r->up, r->gate, r->scores };
    for (size_t j = 0; j < sizeof v / sizeof *v; j++)
        free(v[j]);
    free(r->off);
}

static float *bert_alloc(int64_t rows, int64_t cols, bool *ok)
{
    size_t n;
    if (omni_mul_size((size_t)rows, (size_t)cols, &n) < 0 || omni_mul_size(n, sizeof(float), &n) < 0) {
        *ok = false;
        return NULL;
    }
    float *p = malloc(n ? n : 1);
    if (!p)
        *ok = false;
    return p;
}

// ---- parallel helpers -------------------------------------------------------------------

enum bert_op { OP_LAYER_NORM, OP_GELU, OP_SWIGLU, OP_GEGLU, OP_ROPE, OP_ADD };

/* One elementwise or row-wise op over rows [0, n_rows) split across threads. */
struct bert_rows_job {
    enum bert_op op;
    const struct bert_run *r;
    float *x, *y;           /* y = op(x) (in place where the same) */
    const float *w, *b;     /* norm gain and bias; ADD: the addend */
    int64_t n_rows;
    int width;              /* floats per row */
};

static void bert_rows_worker(void *ctx, int ith, int nth)
{
    const struct bert_rows_job *j = ctx;
    const int64_t per = (j->n_rows + nth - 1) / nth, from = ith * per;
    const int64_t to = from + per < j->n_rows ? from + per : j->n_rows;
    if (from >= to)
        return;
    const size_t w = (size_t)j->width;
    float *x = j->x + from * w, *y = j->y ? j->y + from * w : NULL;
    const int64_t rows = to - from;
    switch (j->op) {
    case OP_LAYER_NORM:
        omni_layer_norm_rows(x, j->w, j->b, rows, j->width, j->r->m->eps, y);
        break;
    case OP_GELU:
        omni_gelu_erf(x, rows * (int64_t)w);
        break;
    case OP_SWIGLU: /* x = gate, y = up */
        omni_swiglu(x, y, rows * (int64_t)w);
        break;
    case OP_GEGLU:
        omni_geglu_erf(x, y, rows * (int64_t)w);
        break;
    case OP_ADD: /* y += x */
        for (size_t i = 0; i < (size_t)rows * w; i++)
            y[i] += x[i];
        break;
    case OP_ROPE: {
        /* rows are tokens of q (x) and k (y); the position is the token's
         * index within its input */
        const struct bert_run *r = j->r;
        const struct bert_model *m = r->m;
        int b = 0;
        for (int64_t t = from; t < to; t++) {
            while (t >= r->off[b + 1])
                b++;
            const int pos = (int)(t - r->off[b]);
            omni_rope_neox(j->x + t * w, m->n_head, m->head_dim, pos, m->rope_base);
            omni_rope_neox(j->y + t * w, m->n_head, m->head_dim, pos, m->rope_base);
        }
        break;
    }
    }
}

static void bert_rows(struct bert_run *r, enum bert_op op, float *x, float *y, const float *w,
                      const float *b, int64_t n_rows, int width)
{
    struct bert_rows_job j = { op, r, x, y, w, b, n_rows, width };
    tpool_run(r->m->tp, bert_rows_worker, &j);
}

/* y[T][n_out] = x W^T + b */
static void bert_linear(struct bert_run *r, const struct omni_tensor *w, const float *b,
                        const float *x, int64_t rows, float *y)
{
    omni_matmul(r->m->tp, w, x, rows, y);
    if (b) {
        const int64_t n = w->ne[1];
        for (int64_t t = 0; t < rows; t++)
            for (int64_t i = 0; i < n; i++)
                y[t * n + i] += b[i];
    }
}

// ---- attention -------------------------------------------------------------------------

enum { BERT_ATTN_ROWS = 128 }; /* query rows per score block */

/* ALiBi for jina-bert-v2: score(i, j) -= slope |i - j| (query rows from i0) */
struct alibi {
    float slope;
    int i0;
};

static void alibi_bias(float *row, int i, int nk, void *user)
{
    const struct alibi *a = user;
    for (int jj = 0; jj < nk; jj++)
        row[jj] -= a->slope * (float)abs(a->i0 + i - jj);
}

/* softmax(Q K^T / sqrt(d) + bias) V for (input, head) pairs ith, ith + nth, ...
 * straight on the [T][H] rows (omni_attn_dense); bias is ALiBi's
 * -slope |i - j| for jina-bert-v2, nothing otherwise. */
static void bert_attn_worker(void *ctx, int ith, int nth)
{
    struct bert_run *r = ctx;
    const struct bert_model *m = r->m;
    const int H = m->info.n_embd, dh = m->head_dim, NH = m->n_head;
    const float scale = 1.0f / sqrtf((float)dh);
    float *S = r->scores + (size_t)ith * BERT_ATTN_ROWS * r->max_len;
    for (int item = ith; item < r->n * NH; item += nth) {
        const int b = item / NH, hd = item % NH;
        const int len = (int)(r->off[b + 1] - r->off[b]);
        const size_t o = (size_t)r->off[b] * H + (size_t)hd * dh;
        /* query rows a block at a time: the scores of a block fit a
         * BERT_ATTN_ROWS x len buffer whatever the input's length */
        for (int i0 = 0; i0 < len; i0 += BERT_ATTN_ROWS) {
            const int nq = len - i0 < BERT_ATTN_ROWS ? len - i0 : BERT_ATTN_ROWS;
            const size_t oq = o + (size_t)i0 * H;
            struct alibi al = { m->alibi_slopes ? m->alibi_slopes[hd] : 0.0f, i0 };
            omni_attn_dense(r->q + oq, r->k + o, r->v + o, r->att + oq, (size_t)H, nq, len, dh, scale, S,
                            m->alibi_slopes ? alibi_bias : NULL, &al);
        }
    }
}

// ---- forward -------------------------------------------------------------------------------

static void bert_embed(struct bert_run *r)
{
    const struct bert_model *m = r->m;
    const int H = m->info.n_embd;
    float *tmp = r->h;
    for (int b = 0; b < r->n; b++) {
        const struct bert_input *in = &r->in[b];
        for (int j = 0; j < in->n; j++) {
            float *row = r->x + (size_t)(r->off[b] + j) * H;
            omni_tensor_get_row(&m->tok_embd, in->ids[j], row);
            if (m->type_embd.type >= 0) {
                omni_tensor_get_row(&m->type_embd, in->type_ids ? in->type_ids[j] : 0, tmp);
                for (int i = 0; i < H; i++)
                    row[i] += tmp[i];
            }
            if (m->pos_embd.type >= 0) {
                omni_tensor_get_row(&m->pos_embd, j, tmp);
                for (int i = 0; i < H; i++)
                    row[i] += tmp[i];
            }
        }
    }
    bert_rows(r, OP_LAYER_NORM, r->x, r->x, m->embd_norm_w, m->embd_norm_b, r->T, H);
}

static void bert_layer_forward(struct bert_run *r, const struct bert_layer *y)
{
    const struct bert_model *m = r->m;
    const int H = m->info.n_embd, F = m->n_ff;
    const int64_t T = r->T;
    // self-attention projections
    if (y->wqkv.type >= 0) {
        bert_linear(r, &y->wqkv, y->bq, r->x, T, r->qkv);
        for (int64_t t = 0; t < T; t++) {
            const float *src = r->qkv + (size_t)t * 3 * H;
            memcpy(r->q + (size_t)t * H, src, sizeof(float) * H);
            memcpy(r->k + (size_t)t * H, src + H, sizeof(float) * H);
            memcpy(r->v + (size_t)t * H, src + 2 * H, sizeof(float) * H);
        }
    } else {
        bert_linear(r, &y->wq, y->bq, r->x, T, r->q);
        bert_linear(r, &y->wk, y->bk, r->x, T, r->k);
        bert_linear(r, &y->wv, y->bv, r->x, T, r->v);
    }
    if (y->q_norm_w)
        bert_rows(r, OP_LAYER_NORM, r->q, r->q, y->q_norm_w, y->q_norm_b, T, H);
    if (y->k_norm_w)
        bert_rows(r, OP_LAYER_NORM, r->k, r->k, y->k_norm_w, y->k_norm_b, T, H);
    if (m->kind == BERT_KIND_NOMIC)
        bert_rows(r, OP_ROPE, r->q, r->k, NULL, NULL, T, H);
    // attention, output projection, residual, norm
    tpool_run(m->tp, bert_attn_worker, r);
    bert_linear(r, &y->wo, y->bo, r->att, T, r->h);
    if (y->attn_norm2_w)
        bert_rows(r, OP_LAYER_NORM, r->h, r->h, y->attn_norm2_w, y->attn_norm2_b, T, H);
    bert_rows(r, OP_ADD, r->h, r->x, NULL, NULL, T, H);
    bert_rows(r, OP_LAYER_NORM, r->x, r->x, y->attn_out_norm_w, y->attn_out_norm_b, T, H);
    // feed-forward: GELU MLP, or a gated one (SwiGLU for nomic, GEGLU for jina)
    bert_linear(r, &y->up, y->b_up, r->x, T, r->up);
    if (y->gate.type >= 0) {
        bert_linear(r, &y->gate, y->b_gate, r->x, T, r->gate);
        bert_rows(r, m->kind == BERT_KIND_NOMIC ? OP_SWIGLU : OP_GEGLU, r->gate, r->up, NULL, NULL,
                  T, F);
    } else {
        bert_rows(r, OP_GELU, r->up, NULL, NULL, NULL, T, F);
    }
    bert_linear(r, &y->down, y->b_down, r->up, T, r->h);
    bert_rows(r, OP_ADD, r->h, r->x, NULL, NULL, T, H);
    bert_rows(r, OP_LAYER_NORM, r->x, r->x, y->out_norm_w, y->out_norm_b, T, H);
}

/* out[b] from the final states: the pooled vector or the classifier's scores. */
static int bert_pool(struct bert_run *r, enum embed_pooling pooling, bool normalize, float *out)
{
    const struct bert_model *m = r->m;
    const int H = m->info.n_embd;
    if (pooling == EMBED_POOL_RANK) {
        /* the [CLS] states of all inputs as one small batch through the head */
        float *cls = r->q; /* n <= T rows of H */
        for (int b = 0; b < r->n; b++)
            memcpy(cls + (size_t)b * H, r->x + (size_t)r->off[b] * H, sizeof(float) * H);
        if (m->cls_out.type >= 0) {
            /* BERT's pooler (dense + tanh), then the classifier; the dense
             * layer's width is the file's, so its output gets its own buffer */
            const int64_t nh = m->cls.ne[1];
            bool ok = true;
            float *hid = bert_alloc(r->n, nh, &ok);
            if (!ok)
                return OMNI_ERR_NOMEM;
            bert_linear(r, &m->cls, m->cls_b, cls, r->n, hid);
            for (int64_t i = 0; i < r->n * nh; i++)
                hid[i] = tanhf(hid[i]);
            bert_linear(r, &m->cls_out, m->cls_out_b, hid, r->n, out);
            free(hid);
        } else {
            bert_linear(r, &m->cls, m->cls_b, cls, r->n, out);
        }
        return 0;
    }
    for (int b = 0; b < r->n; b++) {
        float *o = out + (size_t)b * H;
        const int64_t first = r->off[b], len = r->off[b + 1] - first;
        switch (pooling) {
        case EMBED_POOL_CLS:
            memcpy(o, r->x + (size_t)first * H, sizeof(float) * H);
            break;
        case EMBED_POOL_LAST:
            memcpy(o, r->x + (size_t)(first + len - 1) * H, sizeof(float) * H);
            break;
        default: { /* mean */
            for (int i = 0; i < H; i++) {
                double s = 0;
                for (int64_t t = 0; t < len; t++)
                    s += r->x[(size_t)(first + t) * H + i];
                o[i] = (float)(s / (double)len);
            }
            break;
        }
        }
        if (normalize)
            omni_l2_normalize(o, H);
    }
    return 0;
}

int bert_forward(struct bert_model *m, const struct bert_input *in, int n,
                 enum embed_pooling pooling, bool normalize, float *out, char *err, size_t errlen)
{
    if (!m || !in || !out || n < 1)
        return omni_fail(err, errlen, OMNI_ERR_ARG, "bert: no model, inputs or output");
    if (pooling == EMBED_POOL_NONE || (unsigned)pooling > EMBED_POOL_RANK)
        return omni_fail(err, errlen, OMNI_ERR_ARG, "bert: pooling '%s' is not served (cls, mean, "
                         "last or rank)", embed_pooling_name(pooling));
    const bool ranker = m->info.pooling == EMBED_POOL_RANK;
    if (pooling == EMBED_POOL_RANK && !ranker)
        return omni_fail(err, errlen, OMNI_ERR_ARG, "bert: %s has no classification head: it "
                         "embeds, it does not rank", m->name);
    if (pooling != EMBED_POOL_RANK && ranker)
        return omni_fail(err, errlen, OMNI_ERR_ARG, "bert: %s is a cross-encoder: it scores "
                         "pairs (pooling rank), it does not embed", m->name);
    struct bert_run r = { .m = m, .in = in, .n = n };
    if (!(r.off = malloc(sizeof *r.off * ((size_t)n + 1))))
        return omni_fail(err, errlen, OMNI_ERR_NOMEM, "bert: out of memory");
    r.off[0] = 0;
    for (int b = 0; b < n; b++) {
        const struct bert_input *x = &in[b];
        if (x->n < 1 || !x->ids) {
            bert_run_free(&r);
            return omni_fail(err, errlen, OMNI_ERR_ARG, "bert: input %d is empty", b);
        }
        if (x->n > m->info.n_ctx_train) {
            bert_run_free(&r);
            return omni_fail(err, errlen, OMNI_ERR_LIMIT, "bert: input %d has %d tokens, over the "
                             "model's %d", b, x->n, m->info.n_ctx_train);
        }
        for (int j = 0; j < x->n; j++) {
            const int type = x->type_ids ? x->type_ids[j] : 0;
            if (x->ids[j] < 0 || x->ids[j] >= m->n_vocab || type < 0 ||
                type >= (m->type_embd.type >= 0 ? m->n_types : 1)) {
                bert_run_free(&r);
                return omni_fail(err, errlen, OMNI_ERR_ARG, "bert: input %d, token %d: id %d / "
                                 "type %d out of range (%d ids, %d types)", b, j, (int)x->ids[j],
                                 type, m->n_vocab, m->type_embd.type >= 0 ? m->n_types : 1);
            }
        }
        r.off[b + 1] = r.off[b] + x->n;
        if (x->n > r.max_len)
            r.max_len = x->n;
    }
    r.T = r.off[n];
    const int H = m->info.n_embd, F = m->n_ff;
    bool ok = true;
    r.x = bert_alloc(r.T, H, &ok);
    r.h = bert_alloc(r.T, H, &ok);
    r.q = bert_alloc(r.T > n ? r.T : n, H, &ok);
    r.k = bert_alloc(r.T > n ? r.T : n, H, &ok);
    r.v = bert_alloc(r.T, H, &ok);
    r.att = bert_alloc(r.T, H, &ok);
    r.up = bert_alloc(r.T, F, &ok);
    if (m->layers[0].gate.type >= 0)
        r.gate = bert_alloc(r.T, F, &ok);
    if (m->kind == BERT_KIND_NOMIC)
        r.qkv = bert_alloc(r.T, 3 * (int64_t)H, &ok);
    r.n_threads = tpool_size(m->tp);
    r.scores = bert_alloc((int64_t)r.n_threads * BERT_ATTN_ROWS, r.max_len, &ok);
    if (!ok) {
        bert_run_free(&r);
        return omni_fail(err, errlen, OMNI_ERR_NOMEM, "bert: out of memory for a batch of %d "
                         "inputs, %lld tokens", n, (long long)r.T);
    }

    /* One unit of the compute budget per call; calls on one model take turns. */
    pthread_mutex_lock(&m->lock);
    int rc = tpool_begin(m->tp, false);
    if (rc < 0) {
        pthread_mutex_unlock(&m->lock);
        bert_run_free(&r);
        return omni_fail(err, errlen, OMNI_ERR_LIMIT, "bert: shutting down");
    }
    bert_embed(&r);
    for (int l = 0; l < m->info.n_layer; l++)
        bert_layer_forward(&r, &m->layers[l]);
    rc = bert_pool(&r, pooling, normalize && pooling != EMBED_POOL_RANK, out);
    tpool_end(m->tp);
    pthread_mutex_unlock(&m->lock);
    bert_run_free(&r);
    if (rc < 0)
        return omni_fail(err, errlen, rc, "bert: out of memory for the classifier");

    const size_t n_out = (size_t)n * m->info.n_out;
    for (size_t i = 0; i < n_out; i++)
        if (!isfinite(out[i]))
            return omni_fail(err, errlen, OMNI_ERR_FORMAT, "bert: %s gave a non-finite value "
                             "(input %zu): broken weights?", m->name, i / m->info.n_out);
    return rc;
}
