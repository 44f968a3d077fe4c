/* whisper_dev.c - the Whisper encoder and decoder on a compute backend
 * (whisper_dev.h): the steps of whisper_forward.c, each one batched backend
 * op. Encoder: conv1d as im2col + matmul (k 3, strides 1 and 2) + GELU,
 * positions, pre-LN blocks of bidirectional attention over each window,
 * final LN, then every decoder layer's cross K/V stored once into the
 * state's stream. Decoder: token + position rows, pre-LN blocks of causal
 * self-attention over the slot's cache, cross-attention over the stream,
 * MLP, final LN of the rows that want logits, logits through the tied
 * token embedding. Device memory layout:
 *   cross_k/v[l]: [max_streams][n_audio_ctx][d], the model's cross type
 *   self_k/v[l]:  [max_seqs][n_text_ctx][d], F32 (as the CPU forward) */
#include "audio/whisper_dev.h"

#include "audio/whisper_impl.h"
#include "src/core/backend.h"
#include "src/core/omni.h"
#include "src/core/tensor.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define LN_EPS 1e-5f

struct dev_enc_layer {
    const float *attn_ln_w, *attn_ln_b, *mlp_ln_w, *mlp_ln_b;
    struct omni_btensor q, k, v, o, mlp_0, mlp_2;
    const float *q_b, *v_b, *o_b, *mlp_0_b, *mlp_2_b;
};

struct dev_dec_layer {
    struct dev_enc_layer self;
    const float *cross_ln_w, *cross_ln_b;
    struct omni_btensor cq, ck, cv, co;
    const float *cq_b, *cv_b, *co_b;
};

struct whisper_dev {
    const struct whisper_model *m;
    struct whisper_dev_params p;
    struct omni_backend *be;
    char name[160];
    pthread_mutex_t lock;           /* every pass and table change */
    /* weights */
    struct omni_btensor conv1, conv2, tok_emb, dec_pos;
    const float *conv1_b, *conv2_b, *enc_pos, *enc_ln_w, *enc_ln_b, *dec_ln_w, *dec_ln_b;
    struct dev_enc_layer *enc;
    struct dev_dec_layer *dec;
    int cross_type;                 /* GGML_TYPE_F16 or F32 */
    /* caches, [n_text_layer] each */
    void **cross_k, **cross_v;
    float **self_k, **self_v;
    struct whisper_state **stream_owner;   /* [max_streams] {lock} */
    struct { struct whisper_state *s; int slot; } *seq_owner; /* [max_seqs] {lock} */
    /* encoder scratch, max_windows windows */
    float *e_mel, *e_col, *e_c1, *e_x, *e_h, *e_q, *e_k, *e_v, *e_att, *e_mlp;
    int64_t *e_slot;                /* [max_windows * n_audio_ctx] */
    /* decoder scratch, max_rows rows */
    float *d_x, *d_h, *d_q, *d_k, *d_v, *d_att, *d_mlp, *d_logits;
    int32_t *d_i32;                 /* tokens, pos, self seq, self keys, cross seq, cross keys, out rows */
    int64_t *d_slot;                /* [max_rows] */
    /* host staging */
    float *h_mel;
    float *h_logits;                /* a decoder pass's logits rows */
    size_t h_logits_cap;            /* bytes */
    int32_t *h_i32;
    int64_t *h_slot;
    void **allocs;
    int n_allocs, cap_allocs;
    size_t bytes;
};

struct whisper_dev_params whisper_dev_default_params(void)
{
    return (struct whisper_dev_params){ .backend = "cuda", .device = 0, .max_windows = 4, .max_rows = 512,
                                        .max_streams = 16, .max_seqs = 64 };
}

const char *whisper_dev_name(const struct whisper_dev *d) { return d->name; }
size_t whisper_dev_bytes(const struct whisper_dev *d) { return d->bytes; }

// ---- memory ----------------------------------------------------------------------

static void *dev_alloc(struct whisper_dev *d, size_t bytes)
{
    if (d->n_allocs == d->cap_allocs) {
        int cap = d->cap_allocs ? 2 * d->cap_allocs : 128;
        void **a = realloc(d->allocs, (size_t)cap * sizeof *a);
        if (!a)
            return NULL;
        d->allocs = a;
        d->cap_allocs = cap;
    }
    void *p = d->be->alloc(d->be, bytes);
    if (p) {
        d->allocs[d->n_allocs++] = p;
        d->bytes += bytes;
    }
    return p;
}

/* A model tensor (host) uploaded as it is: a matrix the backend multiplies. */
static int up_mat(struct whisper_dev *d, const struct omni_tensor *t, struct omni_btensor *out, char *err,
                  size_t errlen)
{
    const size_t bytes = ggml_row_size(t->type, t->ne[0]) * (size_t)t->ne[1];
    if (!d->be->supports(d->be, t->type))
        return omni_fail(err, errlen, OMNI_ERR_UNSUPPORTED, "whisper_dev: %s: tensor type %s not supported on %s",
                         d->m->path, ggml_type_name(t->type), d->be->name);
    void *p = dev_alloc(d, bytes);
    if (!p)
        return omni_fail(err, errlen, OMNI_ERR_NOMEM, "whisper_dev: %s: out of device memory for weights",
                         d->be->name);
    int rc = d->be->upload(d->be, p, t->data, bytes);
    if (rc < 0)
        return omni_fail(err, errlen, rc, "whisper_dev: %s: weight upload failed", d->be->name);
    *out = (struct omni_btensor){ .type = t->type, .cols = t->ne[0], .rows = t->ne[1], .data = p };
    if (d->be->prepare && t->type != GGML_TYPE_F32 && t->type != GGML_TYPE_F16 &&
        (rc = d->be->prepare(d->be, out)) < 0)
        return omni_fail(err, errlen, rc, "whisper_dev: %s: prepare failed", d->be->name);
    return OMNI_OK;
}

/* n floats (a bias, a norm weight, positions) uploaded. */
static int up_vec(struct whisper_dev *d, const float *v, size_t n, const float **out, char *err, size_t errlen)
{
    float *p = dev_alloc(d, n * sizeof(float));
    if (!p)
        return omni_fail(err, errlen, OMNI_ERR_NOMEM, "whisper_dev: %s: out of device memory for weights",
                         d->be->name);
    int rc = d->be->upload(d->be, p, v, n * sizeof(float));
    if (rc < 0)
        return omni_fail(err, errlen, rc, "whisper_dev: %s: weight upload failed", d->be->name);
    *out = p;
    return OMNI_OK;
}

static int up_layer(struct whisper_dev *d, const struct whisper_enc_layer *L, struct dev_enc_layer *o, int n,
                    char *err, size_t errlen)
{
    int rc = OMNI_OK;
#define MAT(a, b) if (rc == OMNI_OK) rc = up_mat(d, &L->a, &o->b, err, errlen)
#define VEC(a, b, k) if (rc == OMNI_OK) rc = up_vec(d, L->a, (size_t)(k) * n, &o->b, err, errlen)
    MAT(attn_q, q); MAT(attn_k, k); MAT(attn_v, v); MAT(attn_out, o); MAT(mlp_0, mlp_0); MAT(mlp_2, mlp_2);
    VEC(attn_ln_w, attn_ln_w, 1); VEC(attn_ln_b, attn_ln_b, 1); VEC(mlp_ln_w, mlp_ln_w, 1);
    VEC(mlp_ln_b, mlp_ln_b, 1); VEC(attn_q_b, q_b, 1); VEC(attn_v_b, v_b, 1); VEC(attn_out_b, o_b, 1);
    VEC(mlp_0_b, mlp_0_b, 4); VEC(mlp_2_b, mlp_2_b, 1);
#undef MAT
#undef VEC
    return rc;
}

static int upload_weights(struct whisper_dev *d, char *err, size_t errlen)
{
    const struct whisper_model *m = d->m;
    const struct whisper_hparams *hp = &m->hp;
    const size_t da = hp->n_audio_state, dt = hp->n_text_state;
    int rc = OMNI_OK;
#define MAT(a, b) if (rc == OMNI_OK) rc = up_mat(d, &m->a, &d->b, err, errlen)
#define VEC(a, b, n) if (rc == OMNI_OK) rc = up_vec(d, m->a, (n), &d->b, err, errlen)
    MAT(conv1_w, conv1); MAT(conv2_w, conv2); MAT(tok_emb, tok_emb);
    VEC(conv1_b, conv1_b, da); VEC(conv2_b, conv2_b, da); VEC(enc_pos, enc_pos, hp->n_audio_ctx * da);
    VEC(enc_ln_w, enc_ln_w, da); VEC(enc_ln_b, enc_ln_b, da); VEC(dec_ln_w, dec_ln_w, dt);
    VEC(dec_ln_b, dec_ln_b, dt);
    const float *pos = NULL;
    if (rc == OMNI_OK)
        rc = up_vec(d, m->dec_pos, (size_t)hp->n_text_ctx * dt, &pos, err, errlen);
#undef MAT
#undef VEC
    d->dec_pos.data = pos;
    d->dec_pos.type = GGML_TYPE_F32;
    d->dec_pos.cols = (int64_t)dt;
    d->dec_pos.rows = hp->n_text_ctx;
    for (int l = 0; l < hp->n_audio_layer && rc == OMNI_OK; l++)
        rc = up_layer(d, &m->enc[l], &d->enc[l], (int)da, err, errlen);
    for (int l = 0; l < hp->n_text_layer && rc == OMNI_OK; l++) {
        const struct whisper_dec_layer *L = &m->dec[l];
        struct dev_dec_layer *o = &d->dec[l];
        rc = up_layer(d, &L->self, &o->self, (int)dt, err, errlen);
        if (rc == OMNI_OK) rc = up_mat(d, &L->cross_q, &o->cq, err, errlen);
        if (rc == OMNI_OK) rc = up_mat(d, &L->cross_k, &o->ck, err, errlen);
        if (rc == OMNI_OK) rc = up_mat(d, &L->cross_v, &o->cv, err, errlen);
        if (rc == OMNI_OK) rc = up_mat(d, &L->cross_out, &o->co, err, errlen);
        if (rc == OMNI_OK) rc = up_vec(d, L->cross_ln_w, dt, &o->cross_ln_w, err, errlen);
        if (rc == OMNI_OK) rc = up_vec(d, L->cross_ln_b, dt, &o->cross_ln_b, err, errlen);
        if (rc == OMNI_OK) rc = up_vec(d, L->cross_q_b, dt, &o->cq_b, err, errlen);
        if (rc == OMNI_OK) rc = up_vec(d, L->cross_v_b, dt, &o->cv_b, err, errlen);
        if (rc == OMNI_OK) rc = up_vec(d, L->cross_out_b, dt, &o->co_b, err, errlen);
    }
    return rc;
}

/* Caches and scratch at their largest, once. */
static int alloc_buffers(struct whisper_dev *d, char *err, size_t errlen)
{
    const struct whisper_hparams *hp = &d->m->hp;
    const size_t nc = hp->n_audio_ctx, da = hp->n_audio_state, dt = hp->n_text_state, nt = hp->n_text_ctx;
    const size_t W = d->p.max_windows, R = d->p.max_rows, esz = d->cross_type == GGML_TYPE_F16 ? 2 : 4;
    const size_t c1 = 2 * nc * 3 * hp->n_mels, c2 = nc * 3 * da;
    bool ok = true;
#define A(ptr, bytes) ok = ok && ((ptr) = dev_alloc(d, (bytes))) != NULL
    for (int l = 0; l < hp->n_text_layer; l++) {
        A(d->cross_k[l], (size_t)d->p.max_streams * nc * dt * esz);
        A(d->cross_v[l], (size_t)d->p.max_streams * nc * dt * esz);
        A(d->self_k[l], (size_t)d->p.max_seqs * nt * dt * sizeof(float));
        A(d->self_v[l], (size_t)d->p.max_seqs * nt * dt * sizeof(float));
    }
    A(d->e_mel, W * hp->n_mels * 2 * nc * sizeof(float));
    A(d->e_col, W * (c1 > c2 ? c1 : c2) * sizeof(float));
    A(d->e_c1, W * 2 * nc * da * sizeof(float));
    float **enc[] = { &d->e_x, &d->e_h, &d->e_q, &d->e_k, &d->e_v, &d->e_att };
    for (size_t i = 0; i < sizeof enc / sizeof *enc; i++)
        A(*enc[i], W * nc * da * sizeof(float));
    A(d->e_mlp, W * nc * 4 * da * sizeof(float));
    A(d->e_slot, W * nc * sizeof(int64_t));
    float **dec[] = { &d->d_x, &d->d_h, &d->d_q, &d->d_k, &d->d_v, &d->d_att };
    for (size_t i = 0; i < sizeof dec / sizeof *dec; i++)
        A(*dec[i], R * dt * sizeof(float));
    A(d->d_mlp, R * 4 * dt * sizeof(float));
    A(d->d_logits, R * hp->n_vocab * sizeof(float));
    A(d->d_i32, 7 * R * sizeof(int32_t));
    A(d->d_slot, (R > nt ? R : nt) * sizeof(int64_t));
#undef A
    if (!ok)
        return omni_fail(err, errlen, OMNI_ERR_NOMEM, "whisper_dev: %s: out of device memory for caches "
                         "(%d streams, %d decoder slots; %zu bytes so far)", d->be->name, d->p.max_streams,
                         d->p.max_seqs, d->bytes);
    d->h_mel = malloc(W * hp->n_mels * 2 * nc * sizeof(float));
    d->h_i32 = malloc(7 * R * sizeof(int32_t));
    d->h_slot = malloc((W * nc > R + nt ? W * nc : R + nt) * sizeof(int64_t));
    if (!d->h_mel || !d->h_i32 || !d->h_slot)
        return omni_fail(err, errlen, OMNI_ERR_NOMEM, "whisper_dev: out of memory");
    return OMNI_OK;
}

struct whisper_dev *whisper_dev_new(const struct whisper_model *m, const struct whisper_dev_params *p, char *err,
                                    size_t errlen)
{
    const struct whisper_hparams *hp = &m->hp;
    struct whisper_dev_params prm = p ? *p : whisper_dev_default_params();
    if (!prm.backend)
        prm.backend = "cuda";
    if (prm.max_rows < hp->n_text_ctx)
        prm.max_rows = hp->n_text_ctx; /* a whole prompt in one pass */
    if (prm.max_windows < 1 || prm.max_streams < 1 || prm.max_seqs < 1) {
        omni_fail(err, errlen, OMNI_ERR_ARG, "whisper_dev: max_windows %d, max_streams %d, max_seqs %d (>= 1)",
                  prm.max_windows, prm.max_streams, prm.max_seqs);
        return NULL;
    }
    if (hp->n_audio_state != hp->n_text_state || hp->n_audio_state % hp->n_audio_head ||
        hp->n_text_state % hp->n_text_head) {
        omni_fail(err, errlen, OMNI_ERR_UNSUPPORTED, "whisper_dev: %s: audio/text widths %d/%d or heads %d/%d "
                  "not supported", m->path, hp->n_audio_state, hp->n_text_state, hp->n_audio_head,
                  hp->n_text_head);
        return NULL;
    }
    struct whisper_dev *d = calloc(1, sizeof *d);
    if (!d) {
        omni_fail(err, errlen, OMNI_ERR_NOMEM, "whisper_dev: out of memory");
        return NULL;
    }
    pthread_mutex_init(&d->lock, NULL);
    d->m = m;
    d->p = prm;
    d->cross_type = m->cross_f16 ? GGML_TYPE_F16 : GGML_TYPE_F32;
    if (!(d->be = omni_backend_new(prm.backend, prm.device, err, errlen)))
        goto fail;
    if (!d->be->layernorm || !d->be->gelu || !d->be->im2col_k3 || !d->be->attention_dense) {
        omni_fail(err, errlen, OMNI_ERR_UNSUPPORTED, "whisper_dev: backend %s lacks Whisper's ops", d->be->name);
        goto fail;
    }
    snprintf(d->name, sizeof d->name, "%s: %.140s", d->be->name, d->be->device);
    const int nl = hp->n_text_layer;
    d->enc = calloc((size_t)hp->n_audio_layer, sizeof *d->enc);
    d->dec = calloc((size_t)nl, sizeof *d->dec);
    d->cross_k = calloc((size_t)nl, sizeof *d->cross_k);
    d->cross_v = calloc((size_t)nl, sizeof *d->cross_v);
    d->self_k = calloc((size_t)nl, sizeof *d->self_k);
    d->self_v = calloc((size_t)nl, sizeof *d->self_v);
    d->stream_owner = calloc((size_t)prm.max_streams, sizeof *d->stream_owner);
    d->seq_owner = calloc((size_t)prm.max_seqs, sizeof *d->seq_owner);
    if (!d->enc || !d->dec || !d->cross_k || !d->cross_v || !d->self_k || !d->self_v || !d->stream_owner ||
        !d->seq_owner) {
        omni_fail(err, errlen, OMNI_ERR_NOMEM, "whisper_dev: out of memory");
        goto fail;
    }
    if (upload_weights(d, err, errlen) < 0 || alloc_buffers(d, err, errlen) < 0)
        goto fail;
    if (d->be->sync(d->be) < 0) {
        omni_fail(err, errlen, OMNI_ERR_IO, "whisper_dev: %s: upload failed", d->be->name);
        goto fail;
    }
    return d;
fail:
    whisper_dev_free(d);
    return NULL;
}

void whisper_dev_free(struct whisper_dev *d)
{
    if (!d)
        return;
    for (int i = 0; d->be && i < d->n_allocs; i++)
        d->be->free(d->be, d->allocs[i]);
    omni_backend_free(d->be);
    free(d->allocs);
    free(d->enc);
    free(d->dec);
    free(d->cross_k);
    free(d->cross_v);
    free(d->self_k);
    free(d->self_v);
    free(d->stream_owner);
    free(d->seq_owner);
    free(d->h_mel);
    free(d->h_logits);
    free(d->h_i32);
    free(d->h_slot);
    pthread_mutex_destroy(&d->lock);
    free(d);
}

// ---- streams and decoder slots ------------------------------------------------------

/* s's stream (cross K/V), taken on its first window. {lock} */
static int stream_of(struct whisper_dev *d, struct whisper_state *s, bool take)
{
    int free_at = -1;
    for (int i = 0; i < d->p.max_streams; i++) {
        if (d->stream_owner[i] == s)
            return i;
        if (!d->stream_owner[i] && free_at < 0)
            free_at = i;
    }
    if (!take || free_at < 0)
        return -1;
    d->stream_owner[free_at] = s;
    s->dev = d;
    return free_at;
}

/* The self-attention cache of decoder slot `slot` of s. {lock} */
static int seq_of(struct whisper_dev *d, struct whisper_state *s, int slot, bool take)
{
    int free_at = -1;
    for (int i = 0; i < d->p.max_seqs; i++) {
        if (d->seq_owner[i].s == s && d->seq_owner[i].slot == slot)
            return i;
        if (!d->seq_owner[i].s && free_at < 0)
            free_at = i;
    }
    if (!take || free_at < 0)
        return -1;
    d->seq_owner[free_at].s = s;
    d->seq_owner[free_at].slot = slot;
    s->dev = d;
    return free_at;
}

void whisper_dev_release(struct whisper_dev *d, struct whisper_state *s)
{
    pthread_mutex_lock(&d->lock);
    for (int i = 0; i < d->p.max_streams; i++)
        if (d->stream_owner[i] == s)
            d->stream_owner[i] = NULL;
    for (int i = 0; i < d->p.max_seqs; i++)
        if (d->seq_owner[i].s == s)
            d->seq_owner[i].s = NULL;
    pthread_mutex_unlock(&d->lock);
    if (s->dev == d)
        s->dev = NULL;
}

int whisper_state_use_dev(struct whisper_state *s, struct whisper_dev *d)
{
    if (!s->work)
        return OMNI_ERR_ARG;
    if (s->dev && s->dev != d)
        whisper_dev_release(s->dev, s);
    if (d && d->m != s->m)
        return OMNI_ERR_ARG;
    s->work->dev = d;
    return OMNI_OK;
}

// ---- the passes ------------------------------------------------------------------------

/* Any failing op ends the pass: rc keeps the first error. */
#define OP(call) do { if (rc == OMNI_OK && (rc = (call)) < 0) what = #call; } while (0)

static int pass_failed(struct whisper_dev *d, int rc, const char *what, const char *pass, char *err,
                       size_t errlen)
{
    return omni_fail(err, errlen, rc, "whisper_dev: %s: %s failed at %.60s", d->be->name, pass, what);
}

/* y = W x + b over n rows (b NULL: none) */
static int linear(struct omni_backend *be, const struct omni_btensor *w, const float *b, const float *x, int n,
                  float *y)
{
    int rc = be->matmul(be, w, x, n, y);
    return rc < 0 || !b ? rc : be->add(be, y, NULL, b, n, (int)w->rows);
}

/* x += h + b: the residual after a projection */
static int residual(struct omni_backend *be, float *x, const float *h, const float *b, int n, int dim)
{
    int rc = be->add(be, x, h, NULL, n, dim);
    return rc < 0 ? rc : be->add(be, x, NULL, b, n, dim);
}

int whisper_dev_encode(struct whisper_dev *d, struct whisper_state *const *states, const float *const *mel,
                       const int *n_frames, const int *offset, const int *n_ctx, int n, char *err,
                       size_t errlen)
{
    const struct whisper_hparams *hp = &d->m->hp;
    struct omni_backend *be = d->be;
    const int dm = hp->n_audio_state, nc = hp->n_audio_ctx, nm = hp->n_mels, nh = hp->n_audio_head;
    if (n > d->p.max_windows) { /* the batcher's passes fit; split others */
        for (int i = 0; i < n; i += d->p.max_windows) {
            const int k = n - i < d->p.max_windows ? n - i : d->p.max_windows;
            int rc = whisper_dev_encode(d, states + i, mel + i, n_frames + i, offset + i, n_ctx + i, k, err,
                                        errlen);
            if (rc < 0)
                return rc;
        }
        return OMNI_OK;
    }
    pthread_mutex_lock(&d->lock);
    int at[n + 1], stream[n];
    at[0] = 0;
    int rc = OMNI_OK;
    const char *what = "";
    for (int i = 0; i < n; i++) {
        at[i + 1] = at[i] + n_ctx[i];
        if ((stream[i] = stream_of(d, states[i], true)) < 0) {
            pthread_mutex_unlock(&d->lock);
            return omni_fail(err, errlen, OMNI_ERR_LIMIT, "whisper_dev: more than %d states with audio at once "
                             "(max_streams)", d->p.max_streams);
        }
    }
    const int rows = at[n];
    /* the windows' mel frames (0 past the audio) and the cross K/V slots of
     * their rows */
    size_t mel_at = 0;
    for (int i = 0; i < n; i++) {
        const int len = 2 * n_ctx[i];
        for (int c = 0; c < nm; c++)
            for (int t = 0; t < len; t++) {
                const int f = offset[i] + t;
                d->h_mel[mel_at + (size_t)c * len + t] = f < n_frames[i] ? mel[i][(size_t)c * n_frames[i] + f] : 0.0f;
            }
        mel_at += (size_t)nm * len;
        for (int r = 0; r < n_ctx[i]; r++)
            d->h_slot[at[i] + r] = (int64_t)stream[i] * nc + r;
    }
    OP(be->upload(be, d->e_mel, d->h_mel, mel_at * sizeof(float)));
    OP(be->upload(be, d->e_slot, d->h_slot, (size_t)rows * sizeof(int64_t)));

    /* conv1 (stride 1) + GELU over each window's 2 n_ctx frames, conv2
     * (stride 2) + GELU, positions */
    mel_at = 0;
    for (int i = 0; i < n; i++) {
        OP(be->im2col_k3(be, d->e_col + (size_t)2 * at[i] * 3 * nm, d->e_mel + mel_at, nm, 2 * n_ctx[i],
                         2 * n_ctx[i], 1, true));
        mel_at += (size_t)nm * 2 * n_ctx[i];
    }
    OP(be->matmul(be, &d->conv1, d->e_col, 2 * rows, d->e_c1));
    OP(be->gelu(be, d->e_c1, d->conv1_b, 2 * rows, dm));
    for (int i = 0; i < n; i++)
        OP(be->im2col_k3(be, d->e_col + (size_t)at[i] * 3 * dm, d->e_c1 + (size_t)2 * at[i] * dm, dm,
                         2 * n_ctx[i], n_ctx[i], 2, false));
    OP(be->matmul(be, &d->conv2, d->e_col, rows, d->e_x));
    OP(be->gelu(be, d->e_x, d->conv2_b, rows, dm));
    for (int i = 0; i < n; i++)
        OP(be->add(be, d->e_x + (size_t)at[i] * dm, d->enc_pos, NULL, n_ctx[i], dm));

    for (int l = 0; l < hp->n_audio_layer; l++) {
        const struct dev_enc_layer *L = &d->enc[l];
        /* self-attention, each window over itself */
        OP(be->layernorm(be, d->e_h, d->e_x, L->attn_ln_w, L->attn_ln_b, rows, dm, LN_EPS));
        OP(linear(be, &L->q, L->q_b, d->e_h, rows, d->e_q));
        OP(linear(be, &L->k, NULL, d->e_h, rows, d->e_k));
        OP(linear(be, &L->v, L->v_b, d->e_h, rows, d->e_v));
        for (int i = 0; i < n; i++) {
            const size_t o = (size_t)at[i] * dm;
            const struct omni_bdense a = {
                .out = d->e_att + o, .q = d->e_q + o, .k = d->e_k + o, .v = d->e_v + o,
                .kv_type = GGML_TYPE_F32, .n_tok = n_ctx[i], .window = n_ctx[i], .kv_row = dm, .n_head = nh,
                .head_dim = dm / nh, .scale = 1.0f / sqrtf((float)(dm / nh)) };
            OP(be->attention_dense(be, &a));
        }
        OP(be->matmul(be, &L->o, d->e_att, rows, d->e_h));
        OP(residual(be, d->e_x, d->e_h, L->o_b, rows, dm));
        /* MLP */
        OP(be->layernorm(be, d->e_h, d->e_x, L->mlp_ln_w, L->mlp_ln_b, rows, dm, LN_EPS));
        OP(be->matmul(be, &L->mlp_0, d->e_h, rows, d->e_mlp));
        OP(be->gelu(be, d->e_mlp, L->mlp_0_b, rows, 4 * dm));
        OP(be->matmul(be, &L->mlp_2, d->e_mlp, rows, d->e_h));
        OP(residual(be, d->e_x, d->e_h, L->mlp_2_b, rows, dm));
    }
    OP(be->layernorm(be, d->e_h, d->e_x, d->enc_ln_w, d->enc_ln_b, rows, dm, LN_EPS));
    /* cross-attention keys and values of every decoder layer into the streams */
    for (int l = 0; l < hp->n_text_layer; l++) {
        const struct dev_dec_layer *L = &d->dec[l];
        OP(linear(be, &L->ck, NULL, d->e_h, rows, d->e_k));
        OP(linear(be, &L->cv, L->cv_b, d->e_h, rows, d->e_v));
        OP(be->kv_store(be, d->e_k, d->e_v, d->cross_k[l], d->cross_v[l], d->cross_type, d->e_slot, rows, dm));
    }
    for (int i = 0; i < n; i++) {
        OP(be->download(be, states[i]->enc_out, d->e_h + (size_t)at[i] * dm, (size_t)n_ctx[i] * dm * sizeof(float)));
        states[i]->n_ctx = rc == OMNI_OK ? n_ctx[i] : 0;
    }
    pthread_mutex_unlock(&d->lock);
    return rc < 0 ? pass_failed(d, rc, what, "encode", err, errlen) : OMNI_OK;
}

int whisper_dev_decode(struct whisper_dev *d, const struct whisper_row *rows, int n, char *err, size_t errlen)
{
    const struct whisper_hparams *hp = &d->m->hp;
    struct omni_backend *be = d->be;
    const int dm = hp->n_text_state, nt = hp->n_text_ctx, nc = hp->n_audio_ctx, nv = hp->n_vocab;
    const int nh = hp->n_text_head, R = d->p.max_rows;
    if (n > R) { /* whisper_decode's rows fit; split others at whole requests only */
        for (int i = 0; i < n; i += R) {
            int rc = whisper_dev_decode(d, rows + i, n - i < R ? n - i : R, err, errlen);
            if (rc < 0)
                return rc;
        }
        return OMNI_OK;
    }
    pthread_mutex_lock(&d->lock);
    int32_t *tok = d->h_i32, *pos = tok + R, *sseq = pos + R, *skeys = sseq + R, *cseq = skeys + R,
            *ckeys = cseq + R, *orow = ckeys + R;
    int n_out = 0;
    for (int t = 0; t < n; t++) {
        const struct whisper_row *r = &rows[t];
        const int cs = stream_of(d, r->s, false), ss = seq_of(d, r->s, r->slot, true);
        if (cs < 0 || ss < 0) {
            pthread_mutex_unlock(&d->lock);
            return omni_fail(err, errlen, cs < 0 ? OMNI_ERR_ARG : OMNI_ERR_LIMIT,
                             cs < 0 ? "whisper_dev: decode: no audio encoded on the device for this state"
                                    : "whisper_dev: decode: more than %d decoder slots at once (max_seqs)",
                             d->p.max_seqs);
        }
        tok[t] = r->token;
        pos[t] = r->pos;
        sseq[t] = ss;
        skeys[t] = r->pos + 1; /* causal: its own position and those before */
        cseq[t] = cs;
        ckeys[t] = r->s->n_ctx;
        d->h_slot[t] = (int64_t)ss * nt + r->pos;
        if (r->logits >= 0)
            orow[n_out++] = t;
    }
    int rc = OMNI_OK;
    const char *what = "";
    int32_t *d_tok = d->d_i32, *d_pos = d_tok + R, *d_sseq = d_pos + R, *d_skeys = d_sseq + R,
            *d_cseq = d_skeys + R, *d_ckeys = d_cseq + R, *d_orow = d_ckeys + R;
    OP(be->upload(be, d->d_i32, d->h_i32, (size_t)7 * R * sizeof(int32_t)));
    OP(be->upload(be, d->d_slot, d->h_slot, (size_t)n * sizeof(int64_t)));

    /* token + position embeddings */
    OP(be->get_rows(be, &d->tok_emb, d_tok, n, d->d_x));
    OP(be->get_rows(be, &d->dec_pos, d_pos, n, d->d_h));
    OP(be->add(be, d->d_x, d->d_h, NULL, n, dm));
    const float scale = 1.0f / sqrtf((float)(dm / nh));
    for (int l = 0; l < hp->n_text_layer; l++) {
        const struct dev_dec_layer *L = &d->dec[l];
        /* causal self-attention; every row's K/V go into its cache first */
        OP(be->layernorm(be, d->d_h, d->d_x, L->self.attn_ln_w, L->self.attn_ln_b, n, dm, LN_EPS));
        OP(linear(be, &L->self.q, L->self.q_b, d->d_h, n, d->d_q));
        OP(linear(be, &L->self.k, NULL, d->d_h, n, d->d_k));
        OP(linear(be, &L->self.v, L->self.v_b, d->d_h, n, d->d_v));
        OP(be->kv_store(be, d->d_k, d->d_v, d->self_k[l], d->self_v[l], GGML_TYPE_F32, d->d_slot, n, dm));
        const struct omni_bdense sa = {
            .out = d->d_att, .q = d->d_q, .k = d->self_k[l], .v = d->self_v[l], .kv_type = GGML_TYPE_F32,
            .n_tok = n, .seq = d_sseq, .n_keys = d_skeys, .seq_stride = nt, .kv_row = dm, .n_head = nh,
            .head_dim = dm / nh, .scale = scale };
        OP(be->attention_dense(be, &sa));
        OP(be->matmul(be, &L->self.o, d->d_att, n, d->d_h));
        OP(residual(be, d->d_x, d->d_h, L->self.o_b, n, dm));
        /* cross-attention over each row's window */
        OP(be->layernorm(be, d->d_h, d->d_x, L->cross_ln_w, L->cross_ln_b, n, dm, LN_EPS));
        OP(linear(be, &L->cq, L->cq_b, d->d_h, n, d->d_q));
        const struct omni_bdense ca = {
            .out = d->d_att, .q = d->d_q, .k = d->cross_k[l], .v = d->cross_v[l], .kv_type = d->cross_type,
            .n_tok = n, .seq = d_cseq, .n_keys = d_ckeys, .seq_stride = nc, .kv_row = dm, .n_head = nh,
            .head_dim = dm / nh, .scale = scale };
        OP(be->attention_dense(be, &ca));
        OP(be->matmul(be, &L->co, d->d_att, n, d->d_h));
        OP(residual(be, d->d_x, d->d_h, L->co_b, n, dm));
        /* MLP */
        OP(be->layernorm(be, d->d_h, d->d_x, L->self.mlp_ln_w, L->self.mlp_ln_b, n, dm, LN_EPS));
        OP(be->matmul(be, &L->self.mlp_0, d->d_h, n, d->d_mlp));
        OP(be->gelu(be, d->d_mlp, L->self.mlp_0_b, n, 4 * dm));
        OP(be->matmul(be, &L->self.mlp_2, d->d_mlp, n, d->d_h));
        OP(residual(be, d->d_x, d->d_h, L->self.mlp_2_b, n, dm));
    }
    /* final norm of the rows that want logits (gathered), then the token embedding */
    if (n_out > 0) {
        const struct omni_btensor xs = { GGML_TYPE_F32, dm, n, d->d_x };
        OP(be->get_rows(be, &xs, d_orow, n_out, d->d_h));
        OP(be->layernorm(be, d->d_h, d->d_h, d->dec_ln_w, d->dec_ln_b, n_out, dm, LN_EPS));
        OP(be->matmul(be, &d->tok_emb, d->d_h, n_out, d->d_logits));
        /* one download (one wait) for every row, then each row to its state */
        const size_t bytes = (size_t)n_out * nv * sizeof(float);
        if (rc == OMNI_OK && bytes > d->h_logits_cap) {
            free(d->h_logits);
            d->h_logits_cap = 0;
            if (!(d->h_logits = malloc(bytes)))
                rc = OMNI_ERR_NOMEM, what = "host logits";
            else
                d->h_logits_cap = bytes;
        }
        OP(be->download(be, d->h_logits, d->d_logits, bytes));
        for (int t = 0, o = 0; rc == OMNI_OK && t < n; t++)
            if (rows[t].logits >= 0)
                memcpy(rows[t].s->logits + (size_t)rows[t].logits * nv, d->h_logits + (size_t)o++ * nv,
                       (size_t)nv * sizeof(float));
    } else {
        OP(be->sync(be));
    }
    pthread_mutex_unlock(&d->lock);
    return rc < 0 ? pass_failed(d, rc, what, "decode", err, errlen) : OMNI_OK;
}

int whisper_dev_copy_cache(struct whisper_dev *d, struct whisper_state *s, int from, int to, int n, char *err,
                           size_t errlen)
{
    const struct whisper_hparams *hp = &d->m->hp;
    struct omni_backend *be = d->be;
    const int dm = hp->n_text_state, nt = hp->n_text_ctx;
    pthread_mutex_lock(&d->lock);
    const int src = seq_of(d, s, from, false), dst = seq_of(d, s, to, true);
    int rc = OMNI_OK;
    const char *what = "";
    if (src < 0 || dst < 0 || n < 0 || n > nt) {
        pthread_mutex_unlock(&d->lock);
        return omni_fail(err, errlen, OMNI_ERR_LIMIT, "whisper_dev: copy: decoder slot %d has no cache or "
                         "no slot is free for %d (max_seqs %d)", from, to, d->p.max_seqs);
    }
    if (n == 0 || src == dst) {
        pthread_mutex_unlock(&d->lock);
        return OMNI_OK;
    }
    /* the rows as a K/V store from the source cache into the target's slots */
    for (int j = 0; j < n; j++)
        d->h_slot[j] = (int64_t)dst * nt + j;
    OP(be->upload(be, d->d_slot, d->h_slot, (size_t)n * sizeof(int64_t)));
    for (int l = 0; l < hp->n_text_layer; l++) {
        const size_t o = (size_t)src * nt * dm;
        OP(be->kv_store(be, d->self_k[l] + o, d->self_v[l] + o, d->self_k[l], d->self_v[l], GGML_TYPE_F32,
                        d->d_slot, n, dm));
    }
    OP(be->sync(be));
    pthread_mutex_unlock(&d->lock);
    return rc < 0 ? pass_failed(d, rc, what, "copy", err, errlen) : OMNI_OK;
}
