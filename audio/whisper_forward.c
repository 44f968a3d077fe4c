/* whisper_forward.c - the Whisper encoder and decoder passes.
 * Encoder: two conv1d (k 3, strides 1 and 2) + GELU, sinusoidal positions,
 * pre-LN transformer blocks, final LN; then each decoder layer's cross-attention
 * K/V of the window. Decoder: token + position embeddings, pre-LN blocks of
 * causal self-attention over a cached K/V, cross-attention and MLP, final LN,
 * logits through the tied token embedding. Matmuls go through omni_matmul. */
#include "audio/whisper_impl.h"

#include "src/core/omni.h"

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
    FOR_ROWS(j, ith, nth, r) {
        const float *x = j->x + (size_t)r * j->d;
        float *y = j->y + (size_t)r * j->d;
        float mean = 0.0f, var = 0.0f;
        for (int i = 0; i < j->d; i++)
            mean += x[i];
        mean /= j->d;
        for (int i = 0; i < j->d; i++)
            var += (x[i] - mean) * (x[i] - mean);
        const float inv = 1.0f / sqrtf(var / j->d + LN_EPS);
        for (int i = 0; i < j->d; i++)
            y[i] = (x[i] - mean) * inv * j->w[i] + j->b[i];
    }
}

static inline float gelu(float x) { return 0.5f * x * (1.0f + erff(x * (float)M_SQRT1_2)); }

/* y = gelu(y + b) */
static void bias_gelu_worker(void *arg, int ith, int nth)
{
    const struct rows_job *j = arg;
    FOR_ROWS(j, ith, nth, r) {
        float *y = j->y + (size_t)r * j->d;
        for (int i = 0; i < j->d; i++)
            y[i] = gelu(y[i] + j->b[i]);
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

static void layer_norm(struct whisper_state *s, float *y, const float *x, int n, int d, const float *w,
                       const float *b)
{
    struct rows_job j = { y, x, w, b, n, d };
    whisper_run(s, layer_norm_worker, &j);
}

/* y[n][n_out] = W x (+ b) */
static void linear(struct whisper_state *s, const struct omni_tensor *w, const float *b, const float *x, int n,
                   float *y)
{
    omni_matmul(s->tp, w, x, n, y);
    if (b) {
        struct rows_job j = { y, NULL, NULL, b, n, (int)w->ne[1] };
        whisper_run(s, add_bias_worker, &j);
    }
}

/* y += x + b: the residual connection after a projection */
static void residual(struct whisper_state *s, float *y, const float *x, const float *b, int n, int d)
{
    struct rows_job j = { y, x, NULL, b, n, d };
    whisper_run(s, add_bias_worker, &j);
}

static void bias_gelu(struct whisper_state *s, float *y, const float *b, int n, int d)
{
    struct rows_job j = { y, NULL, NULL, b, n, d };
    whisper_run(s, bias_gelu_worker, &j);
}

// ---- attention --------------------------------------------------------------

struct softmax_job {
    float *x;  /* [n][len] */
    int n, len;
};

/* e^x for x <= 0 in a form the compiler vectorizes (libm's expf is a call
 * per element, and the encoder's softmax takes n_head * 1500^2 of them per
 * layer): e^x = 2^k 2^f, k = rint(x log2 e), |f| <= 1/2, 2^f by its Taylor
 * series to degree 7 (relative error < 1e-8, below float rounding). */
static inline float exp_nonpos(float x)
{
    const float z = (x > -87.0f ? x : -87.0f) * 1.44269504f;
    const float k = rintf(z), f = (z - k) * 0.693147181f;
    float p = 1.98412698e-4f;
    p = p * f + 1.38888889e-3f;
    p = p * f + 8.33333333e-3f;
    p = p * f + 4.16666667e-2f;
    p = p * f + 1.66666667e-1f;
    p = p * f + 0.5f;
    p = p * f + 1.0f;
    p = p * f + 1.0f;
    int32_t bits;
    memcpy(&bits, &p, 4);
    bits += (int32_t)k * (1 << 23); /* k <= 0: a shift would be undefined */
    memcpy(&p, &bits, 4);
    return p;
}

/* Rows are processed in fixed blocks of 16 with per-lane accumulators so
 * that -O2's cheap vectorizer takes every loop (max, exp, sum, scale). */
static void softmax_worker(void *arg, int ith, int nth)
{
    const struct softmax_job *j = arg;
    const int len = j->len, n16 = len / 16 * 16;
    FOR_ROWS(j, ith, nth, r) {
        float *x = j->x + (size_t)r * len;
        float m16[16], s16[16];
        for (int k = 0; k < 16; k++)
            m16[k] = -INFINITY, s16[k] = 0.0f;
        for (int i = 0; i < n16; i += 16)
            for (int k = 0; k < 16; k++)
                m16[k] = x[i + k] > m16[k] ? x[i + k] : m16[k];
        float mx = -INFINITY, sum = 0.0f;
        for (int k = 0; k < 16; k++)
            mx = m16[k] > mx ? m16[k] : mx;
        for (int i = n16; i < len; i++)
            mx = x[i] > mx ? x[i] : mx;
        for (int i = 0; i < n16; i += 16)
            for (int k = 0; k < 16; k++)
                s16[k] += (x[i + k] = exp_nonpos(x[i + k] - mx));
        for (int k = 0; k < 16; k++)
            sum += s16[k];
        for (int i = n16; i < len; i++)
            sum += (x[i] = exp_nonpos(x[i] - mx));
        const float inv = 1.0f / sum;
        for (int i = 0; i < n16; i += 16)
            for (int k = 0; k < 16; k++)
                x[i + k] *= inv;
        for (int i = n16; i < len; i++)
            x[i] *= inv;
    }
}

/* Full (non-causal) attention of n_ctx queries over n_ctx keys, one head at a
 * time as two GEMMs: scores = (q_h / sqrt(d_h)) k_h^T, out_h = softmax(scores) v_h. */
static void encoder_attention(struct whisper_state *s, const float *q, const float *k, const float *v, float *out,
                              int n_ctx, int d, int n_head)
{
    const int dh = d / n_head;
    const float scale = 1.0f / sqrtf((float)dh);
    for (int h = 0; h < n_head; h++) {
        for (int t = 0; t < n_ctx; t++)
            for (int i = 0; i < dh; i++) {
                s->e_qh[(size_t)t * dh + i] = q[(size_t)t * d + h * dh + i] * scale;
                s->e_kh[(size_t)t * dh + i] = k[(size_t)t * d + h * dh + i];
                s->e_vt[(size_t)i * n_ctx + t] = v[(size_t)t * d + h * dh + i];
            }
        const struct omni_tensor kt = { .type = 0 /* F32 */, .ne = { dh, n_ctx }, .data = s->e_kh };
        const struct omni_tensor vt = { .type = 0, .ne = { n_ctx, dh }, .data = s->e_vt };
        omni_matmul(s->tp, &kt, s->e_qh, n_ctx, s->e_scores);
        struct softmax_job sj = { s->e_scores, n_ctx, n_ctx };
        whisper_run(s, softmax_worker, &sj);
        omni_matmul(s->tp, &vt, s->e_scores, n_ctx, s->e_oh);
        for (int t = 0; t < n_ctx; t++)
            memcpy(out + (size_t)t * d + h * dh, s->e_oh + (size_t)t * dh, dh * sizeof(float));
    }
}

/* Decoder attention of row t's query. Self-attention (causal): over keys
 * 0 .. pos[t] of its decoder slot's cache in layer `layer`; cross-attention:
 * over the n_keys rows of k/v. */
struct dec_attn_job {
    struct whisper_state *s;
    const float *q, *k, *v;   /* k, v: cross-attention only */
    float *out;
    const int *slot, *pos;    /* self-attention: row t's cache slot and position */
    int layer, n_rows, n_keys, d, n_head;
    bool causal;
};

static void dec_attn_worker(void *arg, int ith, int nth)
{
    const struct dec_attn_job *j = arg;
    const struct whisper_hparams *hp = &j->s->m->hp;
    const int dh = j->d / j->n_head, n_items = j->n_rows * j->n_head;
    const float scale = 1.0f / sqrtf((float)dh);
    const int max_keys = hp->n_audio_ctx > hp->n_text_ctx ? hp->n_audio_ctx : hp->n_text_ctx;
    const size_t layer_off = (size_t)j->layer * hp->n_text_ctx * j->d;
    float *sc = j->s->d_scores + (size_t)ith * max_keys;
    for (int it = n_items * ith / nth; it < n_items * (ith + 1) / nth; it++) {
        const int t = it / j->n_head, h = it % j->n_head;
        const int n_keys = j->causal ? j->pos[t] + 1 : j->n_keys;
        const float *K = j->causal ? j->s->self_k[j->slot[t]] + layer_off : j->k;
        const float *V = j->causal ? j->s->self_v[j->slot[t]] + layer_off : j->v;
        const float *q = j->q + (size_t)t * j->d + h * dh;
        float mx = -INFINITY;
        for (int i = 0; i < n_keys; i++) {
            const float *k = K + (size_t)i * j->d + h * dh;
            float dot = 0.0f;
            for (int c = 0; c < dh; c++)
                dot += q[c] * k[c];
            sc[i] = dot * scale;
            mx = sc[i] > mx ? sc[i] : mx;
        }
        float sum = 0.0f;
        for (int i = 0; i < n_keys; i++)
            sum += (sc[i] = expf(sc[i] - mx));
        float *o = j->out + (size_t)t * j->d + h * dh;
        memset(o, 0, dh * sizeof(float));
        for (int i = 0; i < n_keys; i++) {
            const float p = sc[i] / sum, *v = V + (size_t)i * j->d + h * dh;
            for (int c = 0; c < dh; c++)
                o[c] += p * v[c];
        }
    }
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

int whisper_encode(struct whisper_state *s, const float *mel, int n_frames, int offset, char *err, size_t errlen)
{
    const struct whisper_model *m = s->m;
    const struct whisper_hparams *hp = &m->hp;
    const int d = hp->n_audio_state, nc = hp->n_audio_ctx, n_in = 2 * nc;
    if (!mel || n_frames < 1 || offset < 0 || offset >= n_frames)
        return omni_fail(err, errlen, OMNI_ERR_ARG, "whisper: encode: offset %d outside %d mel frames", offset,
                         n_frames);

    /* conv1 (stride 1) + GELU: [2 nc][d] */
    struct im2col_job c1 = { s->e_col, mel, n_in, hp->n_mels, 1, n_in, true, n_frames, offset };
    whisper_run(s, im2col_worker, &c1);
    omni_matmul(s->tp, &m->conv1_w, s->e_col, n_in, s->e_mlp);
    bias_gelu(s, s->e_mlp, m->conv1_b, n_in, d);
    /* conv2 (stride 2) + GELU: [nc][d], then positions */
    struct im2col_job c2 = { s->e_col, s->e_mlp, nc, d, 2, n_in, false, 0, 0 };
    whisper_run(s, im2col_worker, &c2);
    omni_matmul(s->tp, &m->conv2_w, s->e_col, nc, s->e_x);
    bias_gelu(s, s->e_x, m->conv2_b, nc, d);
    residual(s, s->e_x, m->enc_pos, NULL, nc, d);

    for (int l = 0; l < hp->n_audio_layer; l++) {
        const struct whisper_enc_layer *L = &m->enc[l];
        /* self-attention */
        layer_norm(s, s->e_h, s->e_x, nc, d, L->attn_ln_w, L->attn_ln_b);
        linear(s, &L->attn_q, L->attn_q_b, s->e_h, nc, s->e_q);
        linear(s, &L->attn_k, NULL, s->e_h, nc, s->e_k);
        linear(s, &L->attn_v, L->attn_v_b, s->e_h, nc, s->e_v);
        encoder_attention(s, s->e_q, s->e_k, s->e_v, s->e_att, nc, d, hp->n_audio_head);
        linear(s, &L->attn_out, NULL, s->e_att, nc, s->e_h);
        residual(s, s->e_x, s->e_h, L->attn_out_b, nc, d);
        /* MLP */
        layer_norm(s, s->e_h, s->e_x, nc, d, L->mlp_ln_w, L->mlp_ln_b);
        linear(s, &L->mlp_0, NULL, s->e_h, nc, s->e_mlp);
        bias_gelu(s, s->e_mlp, L->mlp_0_b, nc, 4 * d);
        linear(s, &L->mlp_2, NULL, s->e_mlp, nc, s->e_h);
        residual(s, s->e_x, s->e_h, L->mlp_2_b, nc, d);
    }
    layer_norm(s, s->enc_out, s->e_x, nc, d, m->enc_ln_w, m->enc_ln_b);

    /* cross-attention keys and values of every decoder layer, once per window */
    for (int l = 0; l < hp->n_text_layer; l++) {
        const struct whisper_dec_layer *L = &m->dec[l];
        linear(s, &L->cross_k, NULL, s->enc_out, nc, s->cross_k + (size_t)l * nc * d);
        linear(s, &L->cross_v, L->cross_v_b, s->enc_out, nc, s->cross_v + (size_t)l * nc * d);
    }
    return OMNI_OK;
}

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

/* Rows t = 0 .. n-1: tokens[t] at position pos[t] of decoder slot slot[t]
 * (arguments checked by the callers); logits of the last n_out rows. Rows of
 * one slot must come in position order: each row's K/V are cached before
 * any row attends. */
static int decode_rows(struct whisper_state *s, const int *slot, const int32_t *tokens, const int *pos, int n,
                       int n_out, char *err, size_t errlen)
{
    const struct whisper_model *m = s->m;
    const struct whisper_hparams *hp = &m->hp;
    const int d = hp->n_text_state, nt = hp->n_text_ctx, nc = hp->n_audio_ctx, nv = hp->n_vocab;
    int rc;
    for (int t = 0; t < n; t++)
        if ((rc = ensure_cache(s, slot[t], err, errlen)) < 0)
            return rc;
    if (n_out > s->logits_cap) {
        float *l = realloc(s->logits, (size_t)n_out * nv * sizeof(float));
        if (!l)
            return omni_fail(err, errlen, OMNI_ERR_NOMEM, "whisper: decode: out of memory for logits");
        s->logits = l;
        s->logits_cap = n_out;
    }

    /* token + position embeddings */
    for (int t = 0; t < n; t++) {
        float *x = s->d_x + (size_t)t * d;
        omni_tensor_get_row(&m->tok_emb, tokens[t], x);
        const float *pe = m->dec_pos + (size_t)pos[t] * d;
        for (int i = 0; i < d; i++)
            x[i] += pe[i];
    }
    for (int l = 0; l < hp->n_text_layer; l++) {
        const struct whisper_dec_layer *L = &m->dec[l];
        /* causal self-attention; every row's K/V go into its cache first */
        layer_norm(s, s->d_h, s->d_x, n, d, L->self.attn_ln_w, L->self.attn_ln_b);
        linear(s, &L->self.attn_q, L->self.attn_q_b, s->d_h, n, s->d_q);
        linear(s, &L->self.attn_k, NULL, s->d_h, n, s->d_k);
        linear(s, &L->self.attn_v, L->self.attn_v_b, s->d_h, n, s->d_v);
        for (int t = 0; t < n; t++) {
            const size_t at = ((size_t)l * nt + pos[t]) * d;
            memcpy(s->self_k[slot[t]] + at, s->d_k + (size_t)t * d, d * sizeof(float));
            memcpy(s->self_v[slot[t]] + at, s->d_v + (size_t)t * d, d * sizeof(float));
        }
        struct dec_attn_job sa = { s, s->d_q, NULL, NULL, s->d_att, slot, pos, l, n, 0, d, hp->n_text_head, true };
        whisper_run(s, dec_attn_worker, &sa);
        linear(s, &L->self.attn_out, NULL, s->d_att, n, s->d_h);
        residual(s, s->d_x, s->d_h, L->self.attn_out_b, n, d);
        /* cross-attention over the window's encoder output */
        layer_norm(s, s->d_h, s->d_x, n, d, L->cross_ln_w, L->cross_ln_b);
        linear(s, &L->cross_q, L->cross_q_b, s->d_h, n, s->d_q);
        struct dec_attn_job ca = { s, s->d_q, s->cross_k + (size_t)l * nc * d, s->cross_v + (size_t)l * nc * d,
                                   s->d_att, NULL, NULL, l, n, nc, d, hp->n_text_head, false };
        whisper_run(s, dec_attn_worker, &ca);
        linear(s, &L->cross_out, NULL, s->d_att, n, s->d_h);
        residual(s, s->d_x, s->d_h, L->cross_out_b, n, d);
        /* MLP */
        layer_norm(s, s->d_h, s->d_x, n, d, L->self.mlp_ln_w, L->self.mlp_ln_b);
        linear(s, &L->self.mlp_0, NULL, s->d_h, n, s->d_mlp);
        bias_gelu(s, s->d_mlp, L->self.mlp_0_b, n, 4 * d);
        linear(s, &L->self.mlp_2, NULL, s->d_mlp, n, s->d_h);
        residual(s, s->d_x, s->d_h, L->self.mlp_2_b, n, d);
    }
    /* final norm, then logits through the token embedding */
    const float *last = s->d_x + (size_t)(n - n_out) * d;
    layer_norm(s, s->d_h, last, n_out, d, m->dec_ln_w, m->dec_ln_b);
    omni_matmul(s->tp, &m->tok_emb, s->d_h, n_out, s->logits);
    return OMNI_OK;
}

static int check_token(const struct whisper_state *s, int32_t tok, char *err, size_t errlen)
{
    if (tok < 0 || tok >= s->m->hp.n_vocab)
        return omni_fail(err, errlen, OMNI_ERR_ARG, "whisper: decode: token %d out of range (n_vocab %d)", tok,
                         s->m->hp.n_vocab);
    return OMNI_OK;
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
