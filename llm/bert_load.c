/* bert_load.c - reading an encoder model (bert, nomic-bert, jina-bert-v2)
 * from GGUF as llama.cpp's converter writes it.
 *
 * Every key and tensor is checked (presence, shape, type) before use; a bad
 * file gives NULL and one line naming the file and the field. Matrices stay
 * in the mapping; vectors (biases, norms) are copied out as F32 so that the
 * forward pass reads them directly whatever type the file stores. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "llm/bert_int.h"
#include "llm/tokenizer.h"
#include "src/core/compute.h"
#include "src/core/gguf.h"
#include "src/core/omni.h"
#include "src/core/tensor.h"
#include "src/core/threadpool.h"

static const char *const pooling_names[] = { "none", "mean", "cls", "last", "rank" };

int embed_pooling_from_name(const char *name)
{
    for (int i = 0; name && i < (int)(sizeof pooling_names / sizeof *pooling_names); i++)
        if (!strcmp(name, pooling_names[i]))
            return i;
    return -1;
}

const char *embed_pooling_name(enum embed_pooling p)
{
    return (unsigned)p < sizeof pooling_names / sizeof *pooling_names ? pooling_names[p] : "?";
}

struct bert_loader {
    struct bert_model *m;
    const char *path;
    char *err;
    size_t errlen;
    int rc;
};

static int bl_fail(struct bert_loader *l, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int bl_fail(struct bert_loader *l, int code, const char *fmt, ...)
{
    char msg[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    l->rc = omni_fail(l->err, l->errlen, code, "bert: %s: %s", l->path, msg);
    return l->rc;
}

/* <arch>.suffix as a positive integer up to max. */
static int bl_u32(struct bert_loader *l, const char *suffix, int *out, bool required, uint32_t max)
{
    char key[96];
    snprintf(key, sizeof key, "%s.%s", l->m->arch, suffix);
    uint32_t v;
    int rc = gguf_get_u32(l->m->g, key, &v);
    if (rc == OMNI_ERR_NOTFOUND && !required)
        return 0;
    if (rc < 0 || v == 0 || v > max)
        return bl_fail(l, OMNI_ERR_FORMAT, "key '%s' missing or out of range (1..%u)", key, max);
    *out = (int)v;
    return 0;
}

static const struct gguf_tensor *bl_find(struct bert_loader *l, const char *name, bool required)
{
    const struct gguf_tensor *t = gguf_find_tensor(l->m->g, name);
    if (!t) {
        if (required)
            bl_fail(l, OMNI_ERR_FORMAT, "tensor '%s' missing", name);
        return NULL;
    }
    const struct ggml_type_traits *tr = ggml_type_traits_of(t->type);
    if (!tr || !tr->supported) {
        bl_fail(l, OMNI_ERR_UNSUPPORTED, "tensor '%s': type %s not supported", name,
                ggml_type_name(t->type));
        return NULL;
    }
    return t;
}

/* A matrix of n_out rows of n_in; an absent optional one gets type -1. */
static int bl_mat(struct bert_loader *l, const char *name, int64_t n_in, int64_t n_out,
                  struct omni_tensor *out, bool required)
{
    out->type = -1;
    const struct gguf_tensor *t = bl_find(l, name, required);
    if (!t)
        return l->rc;
    if (t->n_dims > 2 || t->ne[0] != n_in || t->ne[1] != n_out)
        return bl_fail(l, OMNI_ERR_FORMAT, "tensor '%s': shape [%lld, %lld], expected [%lld, %lld]",
                       name, (long long)t->ne[0], (long long)t->ne[1], (long long)n_in,
                       (long long)n_out);
    *out = (struct omni_tensor){ .type = t->type, .ne = { n_in, n_out }, .data = t->data };
    return 0;
}

/* A vector of n floats, copied out; NULL for an absent optional one (then
 * l->rc stays 0). */
static float *bl_vec(struct bert_loader *l, const char *name, int64_t n, bool required)
{
    const struct gguf_tensor *t = bl_find(l, name, required);
    if (!t)
        return NULL;
    if (t->ne[0] != n || t->ne[1] * t->ne[2] * t->ne[3] != 1) {
        bl_fail(l, OMNI_ERR_FORMAT, "tensor '%s': %lld x %lld elements, expected %lld", name,
                (long long)t->ne[0], (long long)(t->ne[1] * t->ne[2] * t->ne[3]), (long long)n);
        return NULL;
    }
    float *v = malloc(sizeof *v * (size_t)n);
    if (!v) {
        bl_fail(l, OMNI_ERR_NOMEM, "out of memory");
        return NULL;
    }
    struct omni_tensor w = { .type = t->type, .ne = { n, 1 }, .data = t->data };
    omni_tensor_get_row(&w, 0, v);
    return v;
}

/* name.weight and name.bias of a layer norm; the bias may be absent. */
static int bl_norm(struct bert_loader *l, const char *name, int n, float **w, float **b, bool required)
{
    char k[96];
    snprintf(k, sizeof k, "%s.weight", name);
    *w = bl_vec(l, k, n, required);
    if (l->rc)
        return l->rc;
    if (*w) {
        snprintf(k, sizeof k, "%s.bias", name);
        *b = bl_vec(l, k, n, false);
    }
    return l->rc;
}

/* weight (n_in -> n_out) and optional bias of a linear layer blk.i.name. */
static int bl_linear(struct bert_loader *l, int i, const char *name, int64_t n_in, int64_t n_out,
                     struct omni_tensor *w, float **b, bool required)
{
    char k[96];
    snprintf(k, sizeof k, "blk.%d.%s.weight", i, name);
    if (bl_mat(l, k, n_in, n_out, w, required) < 0)
        return l->rc;
    if (w->type >= 0 && b) {
        snprintf(k, sizeof k, "blk.%d.%s.bias", i, name);
        *b = bl_vec(l, k, n_out, false);
    }
    return l->rc;
}

static void bert_layer_free(struct bert_layer *y)
{
    float *v[] = { y->bq, y->bk, y->bv, y->q_norm_w, y->q_norm_b, y->k_norm_w, y->k_norm_b, y->bo,
                   y->attn_norm2_w, y->attn_norm2_b, y->attn_out_norm_w, y->attn_out_norm_b,
                   y->b_up, y->b_gate, y->b_down, y->out_norm_w, y->out_norm_b };
    for (size_t j = 0; j < sizeof v / sizeof *v; j++)
        free(v[j]);
}

void bert_model_free_parts(struct bert_model *m)
{
    if (m->layers)
        for (int i = 0; i < m->info.n_layer; i++)
            bert_layer_free(&m->layers[i]);
    free(m->layers);
    free(m->alibi_slopes);
    free(m->embd_norm_w);
    free(m->embd_norm_b);
    free(m->cls_b);
    free(m->cls_out_b);
    tokenizer_free(m->tok);
    tpool_free(m->tp);
    if (m->lock_init)
        pthread_mutex_destroy(&m->lock);
    gguf_free(m->g);
}

void bert_model_free(struct bert_model *m)
{
    if (!m)
        return;
    bert_model_free_parts(m);
    free(m);
}

static int bl_layer(struct bert_loader *l, int i)
{
    struct bert_model *m = l->m;
    struct bert_layer *y = &m->layers[i];
    const int H = m->info.n_embd, F = m->n_ff;
    char k[96];
    y->wq.type = y->wk.type = y->wv.type = y->wqkv.type = y->gate.type = -1;
    if (m->kind == BERT_KIND_NOMIC) {
        if (bl_linear(l, i, "attn_qkv", H, 3 * (int64_t)H, &y->wqkv, &y->bq, true) < 0)
            return l->rc;
    } else if (bl_linear(l, i, "attn_q", H, H, &y->wq, &y->bq, true) < 0 ||
               bl_linear(l, i, "attn_k", H, H, &y->wk, &y->bk, true) < 0 ||
               bl_linear(l, i, "attn_v", H, H, &y->wv, &y->bv, true) < 0) {
        return l->rc;
    }
    if (m->kind == BERT_KIND_JINA) {
        snprintf(k, sizeof k, "blk.%d.attn_q_norm", i);
        if (bl_norm(l, k, H, &y->q_norm_w, &y->q_norm_b, false) < 0)
            return l->rc;
        snprintf(k, sizeof k, "blk.%d.attn_k_norm", i);
        if (bl_norm(l, k, H, &y->k_norm_w, &y->k_norm_b, false) < 0)
            return l->rc;
        snprintf(k, sizeof k, "blk.%d.attn_norm_2", i);
        if (bl_norm(l, k, H, &y->attn_norm2_w, &y->attn_norm2_b, false) < 0)
            return l->rc;
    }
    if (bl_linear(l, i, "attn_output", H, H, &y->wo, &y->bo, true) < 0)
        return l->rc;
    snprintf(k, sizeof k, "blk.%d.attn_output_norm", i);
    if (bl_norm(l, k, H, &y->attn_out_norm_w, &y->attn_out_norm_b, true) < 0)
        return l->rc;
    snprintf(k, sizeof k, "blk.%d.ffn_gate.weight", i);
    const struct gguf_tensor *up = NULL;
    if (m->kind == BERT_KIND_JINA && !gguf_find_tensor(m->g, k)) {
        /* Newer llama.cpp files keep jina's gated_layers whole as ffn_up
         * (2F rows): the first F rows are the gate (GELU'd), the rest the
         * up projection, as in the HF module. Two row views of one tensor. */
        snprintf(k, sizeof k, "blk.%d.ffn_up.weight", i);
        up = bl_find(l, k, true);
        if (!up)
            return l->rc;
        if (up->n_dims > 2 || up->ne[0] != H || up->ne[1] != 2 * (int64_t)F)
            return bl_fail(l, OMNI_ERR_FORMAT, "tensor '%s': shape [%lld, %lld], expected [%d, %d] "
                           "(no ffn_gate: gate and up fused)", k, (long long)up->ne[0],
                           (long long)up->ne[1], H, 2 * F);
        const size_t half = ggml_row_size(up->type, H) * (size_t)F;
        y->gate = (struct omni_tensor){ .type = up->type, .ne = { H, F }, .data = up->data };
        y->up = (struct omni_tensor){ .type = up->type, .ne = { H, F },
                                      .data = (const char *)up->data + half };
    }
    if ((!up && (bl_linear(l, i, "ffn_up", H, F, &y->up, &y->b_up, true) < 0 ||
                 bl_linear(l, i, "ffn_gate", H, F, &y->gate, &y->b_gate, m->kind == BERT_KIND_NOMIC) < 0)) ||
        bl_linear(l, i, "ffn_down", F, H, &y->down, &y->b_down, true) < 0)
        return l->rc;
    if (m->kind == BERT_KIND_JINA && y->gate.type < 0)
        return bl_fail(l, OMNI_ERR_FORMAT, "tensor 'blk.%d.ffn_gate.weight' missing (jina-bert-v2 "
                       "has a gated MLP)", i);
    snprintf(k, sizeof k, "blk.%d.layer_output_norm", i);
    return bl_norm(l, k, H, &y->out_norm_w, &y->out_norm_b, true);
}

/* ALiBi slopes as ggml computes them for max_bias 8 (llama.cpp's value for
 * jina-bert-v2): the geometric series of the largest power of two of heads,
 * then the odd powers of the next series' ratio for the rest. */
static int bl_alibi(struct bert_loader *l)
{
    struct bert_model *m = l->m;
    const float max_bias = 8.0f;
    int n_log2 = 1;
    while (n_log2 * 2 <= m->n_head)
        n_log2 *= 2;
    const float m0 = powf(2.0f, -max_bias / n_log2), m1 = powf(2.0f, -(max_bias / 2.0f) / n_log2);
    if (!(m->alibi_slopes = malloc(sizeof(float) * (size_t)m->n_head)))
        return bl_fail(l, OMNI_ERR_NOMEM, "out of memory");
    for (int h = 0; h < m->n_head; h++)
        m->alibi_slopes[h] = h < n_log2 ? powf(m0, (float)(h + 1)) : powf(m1, (float)(2 * (h - n_log2) + 1));
    return 0;
}

/* The [CLS] and [SEP] ids: the cls/separator keys, else BOS/EOS. */
static int bl_frame_ids(struct bert_loader *l)
{
    struct bert_model *m = l->m;
    const struct {
        const char *key;
        int32_t *id;
        int32_t fallback;
        const char *what;
    } ids[] = {
        { "tokenizer.ggml.cls_token_id", &m->cls_id, tokenizer_bos(m->tok), "[CLS]" },
        { "tokenizer.ggml.seperator_token_id", &m->sep_id, tokenizer_eos(m->tok), "[SEP]" },
    };
    for (size_t i = 0; i < sizeof ids / sizeof *ids; i++) {
        uint32_t v;
        int rc = gguf_get_u32(m->g, ids[i].key, &v);
        if (rc == 0 && v < (uint32_t)m->n_vocab)
            *ids[i].id = (int32_t)v;
        else if (rc == OMNI_ERR_NOTFOUND && ids[i].fallback >= 0)
            *ids[i].id = ids[i].fallback;
        else
            return bl_fail(l, OMNI_ERR_FORMAT, "key '%s' missing or out of range: no %s token",
                           ids[i].key, ids[i].what);
    }
    return 0;
}

static int bl_threads(struct bert_loader *l, struct compute *compute)
{
    struct bert_model *m = l->m;
    int n = compute ? compute_size(compute) : omni_physical_cores();
    if (n < 1)
        n = 1;
    if (pthread_mutex_init(&m->lock, NULL) != 0)
        return bl_fail(l, OMNI_ERR_NOMEM, "cannot create a lock");
    m->lock_init = true;
    char err[200];
    if (!(m->tp = tpool_new(n, err, sizeof err)) ||
        tpool_attach(m->tp, compute, "embed", err, sizeof err) < 0)
        return bl_fail(l, OMNI_ERR_NOMEM, "%s", err);
    return 0;
}

struct bert_model *bert_model_load(const char *path, struct compute *compute, char *err,
                                   size_t errlen)
{
    struct bert_model *m = calloc(1, sizeof *m);
    struct bert_loader L = { m, path ? path : "(null)", err, errlen, 0 }, *l = &L;
    if (!m) {
        omni_fail(err, errlen, OMNI_ERR_NOMEM, "bert: out of memory");
        return NULL;
    }
    if (!path) {
        bl_fail(l, OMNI_ERR_ARG, "no file");
        goto fail;
    }
    if (!(m->g = gguf_open(path, err, errlen)))
        goto fail;

    // architecture
    size_t alen = 0;
    const char *arch = gguf_get_str(m->g, "general.architecture", &alen);
    if (!arch) {
        bl_fail(l, OMNI_ERR_FORMAT, "key 'general.architecture' missing");
        goto fail;
    }
    static const struct {
        const char *name;
        enum bert_kind kind;
    } kinds[] = { { "bert", BERT_KIND_BERT }, { "nomic-bert", BERT_KIND_NOMIC },
                  { "jina-bert-v2", BERT_KIND_JINA } };
    bool known = false;
    for (size_t i = 0; i < sizeof kinds / sizeof *kinds; i++)
        if (alen == strlen(kinds[i].name) && !memcmp(arch, kinds[i].name, alen)) {
            m->kind = kinds[i].kind;
            snprintf(m->arch, sizeof m->arch, "%s", kinds[i].name);
            known = true;
        }
    if (!known) {
        bl_fail(l, OMNI_ERR_UNSUPPORTED, "architecture '%.*s' is not an encoder model this build "
                "runs (bert, nomic-bert, jina-bert-v2)", (int)(alen > 40 ? 40 : alen), arch);
        goto fail;
    }
    m->info.arch = m->arch;
    size_t nlen = 0;
    const char *name = gguf_get_str(m->g, "general.name", &nlen);
    if (name && nlen)
        snprintf(m->name, sizeof m->name, "%.*s", (int)(nlen < sizeof m->name ? nlen : sizeof m->name - 1), name);
    else {
        const char *base = strrchr(path, '/');
        snprintf(m->name, sizeof m->name, "%s", base ? base + 1 : path);
    }
    m->info.name = m->name;

    // hyper-parameters
    int H = 0, L_ = 0, n_ctx = 0;
    if (bl_u32(l, "embedding_length", &H, true, 1u << 16) < 0 ||
        bl_u32(l, "block_count", &L_, true, 1024) < 0 ||
        bl_u32(l, "attention.head_count", &m->n_head, true, 1024) < 0 ||
        bl_u32(l, "feed_forward_length", &m->n_ff, true, 1u << 20) < 0 ||
        bl_u32(l, "context_length", &n_ctx, true, 1u << 20) < 0)
        goto fail;
    m->info.n_embd = H, m->info.n_layer = L_, m->info.n_ctx_train = n_ctx;
    if (H % m->n_head || (m->kind == BERT_KIND_NOMIC && (H / m->n_head) % 2)) {
        bl_fail(l, OMNI_ERR_FORMAT, "embedding_length %d does not split into %d heads%s", H,
                m->n_head, m->kind == BERT_KIND_NOMIC ? " of even size" : "");
        goto fail;
    }
    m->head_dim = H / m->n_head;
    char key[96];
    snprintf(key, sizeof key, "%s.attention.layer_norm_epsilon", m->arch);
    m->eps = 1e-12f;
    int rc = gguf_get_f32(m->g, key, &m->eps);
    if ((rc < 0 && rc != OMNI_ERR_NOTFOUND) || !(m->eps >= 0 && m->eps < 1)) {
        bl_fail(l, OMNI_ERR_FORMAT, "key '%s' not a float in [0, 1)", key);
        goto fail;
    }
    snprintf(key, sizeof key, "%s.attention.causal", m->arch);
    bool causal = false;
    if (gguf_get_bool(m->g, key, &causal) == 0 && causal) {
        bl_fail(l, OMNI_ERR_UNSUPPORTED, "key '%s' is true: causal encoders are not supported", key);
        goto fail;
    }
    m->rope_base = 10000.0f;
    if (m->kind == BERT_KIND_NOMIC) {
        snprintf(key, sizeof key, "%s.rope.freq_base", m->arch);
        rc = gguf_get_f32(m->g, key, &m->rope_base);
        if ((rc < 0 && rc != OMNI_ERR_NOTFOUND) || !(m->rope_base > 1.0f)) {
            bl_fail(l, OMNI_ERR_FORMAT, "key '%s' not a float above 1", key);
            goto fail;
        }
    }
    int pooling = EMBED_POOL_MEAN;
    snprintf(key, sizeof key, "%s.pooling_type", m->arch);
    uint32_t pv;
    rc = gguf_get_u32(m->g, key, &pv);
    if (rc == 0) {
        if (pv > EMBED_POOL_RANK) {
            bl_fail(l, OMNI_ERR_FORMAT, "key '%s' = %u is not a pooling type (0..4)", key, pv);
            goto fail;
        }
        pooling = pv == EMBED_POOL_NONE ? EMBED_POOL_MEAN : (int)pv;
    } else if (rc != OMNI_ERR_NOTFOUND) {
        bl_fail(l, OMNI_ERR_FORMAT, "key '%s' is not an integer", key);
        goto fail;
    }
    m->info.pooling = (enum embed_pooling)pooling;

    // tokenizer
    if (!(m->tok = tokenizer_from_gguf(m->g, err, errlen)))
        goto fail;
    m->n_vocab = tokenizer_n_vocab(m->tok);
    if (bl_frame_ids(l) < 0)
        goto fail;

    // embeddings
    /* The table may have more rows than the vocabulary (padded vocabularies). */
    const struct gguf_tensor *te = bl_find(l, "token_embd.weight", true);
    if (!te)
        goto fail;
    if (te->ne[1] < m->n_vocab) {
        bl_fail(l, OMNI_ERR_FORMAT, "tensor 'token_embd.weight': %lld rows for %d tokens",
                (long long)te->ne[1], m->n_vocab);
        goto fail;
    }
    if (bl_mat(l, "token_embd.weight", H, te->ne[1], &m->tok_embd, true) < 0)
        goto fail;
    const struct gguf_tensor *tt = bl_find(l, "token_types.weight", false);
    if (l->rc)
        goto fail;
    m->type_embd.type = -1;
    if (tt) {
        m->n_types = (int)tt->ne[1];
        if (m->n_types < 1 || m->n_types > 16 ||
            bl_mat(l, "token_types.weight", H, m->n_types, &m->type_embd, true) < 0) {
            if (!l->rc)
                bl_fail(l, OMNI_ERR_FORMAT, "tensor 'token_types.weight': %d types", m->n_types);
            goto fail;
        }
    }
    m->pos_embd.type = -1;
    if (m->kind == BERT_KIND_BERT &&
        bl_mat(l, "position_embd.weight", H, n_ctx, &m->pos_embd, true) < 0)
        goto fail;
    if (bl_norm(l, "token_embd_norm", H, &m->embd_norm_w, &m->embd_norm_b, true) < 0)
        goto fail;
    if (m->kind == BERT_KIND_JINA && bl_alibi(l) < 0)
        goto fail;

    // layers
    if (!(m->layers = calloc((size_t)L_, sizeof *m->layers))) {
        bl_fail(l, OMNI_ERR_NOMEM, "out of memory");
        goto fail;
    }
    for (int i = 0; i < L_; i++)
        if (bl_layer(l, i) < 0)
            goto fail;

    // classifier head (cross-encoders): cls (H -> H or labels), cls.output (H -> labels)
    m->cls.type = m->cls_out.type = -1;
    const struct gguf_tensor *ct = bl_find(l, "cls.weight", false);
    if (l->rc)
        goto fail;
    if (ct) {
        if (bl_mat(l, "cls.weight", H, ct->ne[1], &m->cls, true) < 0)
            goto fail;
        m->cls_b = bl_vec(l, "cls.bias", ct->ne[1], false);
        const struct gguf_tensor *co = bl_find(l, "cls.output.weight", false);
        if (l->rc)
            goto fail;
        if (co) {
            if (bl_mat(l, "cls.output.weight", ct->ne[1], co->ne[1], &m->cls_out, true) < 0)
                goto fail;
            m->cls_out_b = bl_vec(l, "cls.output.bias", co->ne[1], false);
            if (l->rc)
                goto fail;
        }
        if (m->cls_out.type < 0 && ct->ne[1] > 64) {
            bl_fail(l, OMNI_ERR_FORMAT, "tensor 'cls.weight' has %lld outputs and no cls.output "
                    "follows it", (long long)ct->ne[1]);
            goto fail;
        }
    }
    if (m->info.pooling == EMBED_POOL_RANK && m->cls.type < 0) {
        bl_fail(l, OMNI_ERR_FORMAT, "pooling_type is rank but tensor 'cls.weight' is missing");
        goto fail;
    }
    if (m->info.pooling == EMBED_POOL_RANK)
        m->info.n_out = (int)(m->cls_out.type >= 0 ? m->cls_out.ne[1] : m->cls.ne[1]);
    else
        m->info.n_out = H;

    if (bl_threads(l, compute) < 0)
        goto fail;
    return m;
fail:
    bert_model_free(m);
    return NULL;
}

const struct bert_info *bert_model_info(const struct bert_model *m) { return &m->info; }
const struct tokenizer *bert_model_tokenizer(const struct bert_model *m) { return m->tok; }
