/* model_dev.c - the llama / qwen2 / qwen3 forward on a compute backend
 * (model_dev.h). The same steps as llm_forward in model.c, each one batched
 * backend op over every token of the step: embedding rows -> per layer
 * RMSNorm, Q/K/V (+ bias, qwen2; per-head q/k RMSNorm, qwen3), RoPE, K/V
 * into the paged pool, attention through the block tables, output
 * projection + residual, RMSNorm, SwiGLU FFN + residual -> output norm of
 * the rows that want logits -> logits (-> argmax on the device). */
#include "model_dev.h"

#include "src/core/backend.h"
#include "src/core/gguf.h"
#include "src/core/omni.h"
#include "src/core/tensor.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* The attention kernels keep a head in registers: head_dim up to this. */
#define DEV_MAX_HEAD_DIM 256
/* Steps of up to this many tokens run as graphs (batched decode: the
 * matvec path below 32 rows, cuBLAS on the backend's F16 weight copies
 * above); a shape whose capture fails runs plainly. */
#define DEV_GRAPH_MAX_TOKENS 64
/* Rows of the backend's int8 matvec path (backend_cuda.cu: below 32). */
#define DEV_MATVEC_ROWS 31
/* Graphs kept, one per step shape; the least recently used one goes. */
#define DEV_GRAPHS 32

struct dev_layer {
    const float *attn_norm, *ffn_norm;      /* [n_embd] */
    struct omni_btensor wq, wk, wv, wo;     /* as llm_layer in model.c */
    struct omni_btensor w_gate, w_up, w_down;
    const float *bq, *bk, *bv, *bo;         /* biases or NULL */
    const float *q_norm, *k_norm;           /* [head_dim] (qwen3) or NULL */
};

struct llm_dev {
    const struct llm_model *m;
    struct llm_hparams hp;
    struct llm_dev_params p;
    struct omni_backend *be;
    bool neox;                      /* qwen2/qwen3 rotate halves */
    struct dev_layer *layers;       /* [n_layer] */
    struct omni_btensor tok_embd, output;
    const float *output_norm;       /* [n_embd] */
    const float *rope_freqs;        /* [n_rot / 2] */
    void **kc, **vc;                /* [n_layer] pools of n_blocks * block_size slots */
    /* activations, backend memory, [max_tokens][...] */
    float *x, *xn, *q, *k, *v, *att, *gate, *up;
    float *logits;                  /* [max_tokens][n_vocab] */
    int32_t *d_i32;                 /* tokens, pos, seq, out rows, hidden rows [5][max_tokens] */
    int64_t *d_slot;                /* [max_tokens] */
    int32_t *d_tables;              /* [tables_cap] */
    int32_t *d_argmax;              /* [max_tokens] */
    size_t tables_cap;
    /* host staging (pinned on cuda) */
    int32_t *h_i32, *h_tables, *h_argmax;
    int64_t *h_slot;
    int tables_gen;                 /* bumped when d_tables moves */
    /* decode steps as graphs (src/core/backend.h), one per shape: recorded
     * the second time a shape comes, replayed after; a shape whose capture
     * failed stays plain (bad) */
    struct dev_graph {
        int n, n_out, width;        /* tokens, output rows, block-table width */
        void *g;
        int gen;                    /* tables_gen it was recorded for */
        bool bad;
        uint64_t used;              /* step counter at the last use */
    } graphs[DEV_GRAPHS];
    uint64_t step;
    bool graphs_ok;                 /* backend has graphs; OMNI_DEV_GRAPHS=0 turns them off */
    bool fuse;                      /* the backend's fused ops where it has them
                                     * (OMNI_DEV_FUSE=0: the plain ones) */
    bool all_quant;                 /* every matrix quantized: no cuBLAS below 32 rows */
    void *h_copy;                   /* llm_dev_copy_block's staging (host) */
    size_t h_copy_cap;
    /* OMNI_DEV_PROFILE=1: the backend synced at each mark and the wall time
     * since the previous mark added to that step's bucket, printed by
     * llm_dev_free (graphs off) */
    bool prof;
    double prof_t;
    struct { const char *name; double s; long n; } prof_b[16];
    size_t weight_bytes, kv_bytes, decode_bytes;
    size_t alloc_bytes;             /* everything dev_alloc'd */
    void **allocs;                  /* everything alloc'd, freed at the end */
    int n_allocs, cap_allocs;
};

struct llm_dev_params llm_dev_default_params(void)
{
    return (struct llm_dev_params){ .backend = "cuda", .device = 0, .max_tokens = 512,
                                    .block_size = 16, .n_blocks = 256, .kv_type = 0,
                                    .n_blocks_max = 0, .mem_fraction = 0.9 };
}

static void *dev_alloc(struct llm_dev *d, size_t bytes)
{
    if (d->n_allocs == d->cap_allocs) {
        int cap = d->cap_allocs ? 2 * d->cap_allocs : 64;
        void **a = realloc(d->allocs, (size_t)cap * sizeof *a);
        if (!a)
            return NULL;
        d->allocs = a;
        d->cap_allocs = cap;
    }
    void *p = d->be->alloc(d->be, bytes);
    if (p) {
        d->allocs[d->n_allocs++] = p;
        d->alloc_bytes += bytes;
    }
    return p;
}

/* A GGUF tensor uploaded as it is. Matrices: a type the backend multiplies;
 * vectors: F32 (the loader checked shapes already). */
static int upload(struct llm_dev *d, const char *name, bool required, bool matrix,
                  struct omni_btensor *out, char *err, size_t errlen)
{
    const struct gguf_tensor *t = gguf_find_tensor(llm_model_gguf(d->m), name);
    memset(out, 0, sizeof *out);
    if (!t) {
        if (!required)
            return 0;
        return omni_fail(err, errlen, OMNI_ERR_FORMAT, "model_dev: tensor '%s' missing", name);
    }
    if (matrix ? !d->be->supports(d->be, t->type) : t->type != GGML_TYPE_F32)
        return omni_fail(err, errlen, OMNI_ERR_UNSUPPORTED,
                         "model_dev: tensor '%s': type %s not supported on %s", name,
                         ggml_type_name(t->type), d->be->name);
    void *p = dev_alloc(d, t->nbytes);
    if (!p)
        return omni_fail(err, errlen, OMNI_ERR_NOMEM,
                         "model_dev: %s: out of device memory for '%s' (%zu bytes; %zu of the "
                         "weights so far)", d->be->name, name, t->nbytes, d->weight_bytes);
    int rc = d->be->upload(d->be, p, t->data, t->nbytes);
    if (rc < 0)
        return omni_fail(err, errlen, rc, "model_dev: %s: upload of '%s' failed", d->be->name,
                         name);
    d->weight_bytes += t->nbytes;
    if (matrix)
        d->decode_bytes += t->nbytes;
    *out = (struct omni_btensor){ .type = t->type, .cols = t->ne[0], .rows = t->ne[1], .data = p };
    return 0;
}

static int upload_vec(struct llm_dev *d, const char *name, bool required, const float **v,
                      char *err, size_t errlen)
{
    struct omni_btensor t;
    int rc = upload(d, name, required, false, &t, err, errlen);
    *v = t.data;
    return rc;
}

static int check_supported(const struct llm_dev *d, char *err, size_t errlen)
{
    const struct llm_hparams *hp = &d->hp;
    const char *why = NULL;
    if (hp->arch != LLM_ARCH_LLAMA && hp->arch != LLM_ARCH_QWEN2 && hp->arch != LLM_ARCH_QWEN3)
        why = "architecture (llama, qwen2, qwen3 run on the device)";
    else if (hp->n_swa)
        why = "sliding-window attention";
    else if (hp->rope_longrope)
        why = "LongRoPE";
    else if (hp->head_dim > DEV_MAX_HEAD_DIM)
        why = "head_dim above 256";
    else if (hp->n_rot != hp->head_dim)
        why = "partial rotary";
    if (why)
        return omni_fail(err, errlen, OMNI_ERR_UNSUPPORTED, "model_dev: %s: %s not supported yet",
                         hp->arch_name, why);
    return 0;
}

/* The backend's activation scratch at its largest, once: the int8 rows of
 * the matvec path (31 rows) and the F16 rows of the GEMM path (a full
 * batch) of the widest matrix. A scratch that grew after a graph was
 * recorded would move under it. The cpu backend has no graphs: nothing. */
static int dev_presize(struct llm_dev *d)
{
    if (!strcmp(d->be->name, "cpu"))
        return 0;
    const struct dev_layer *L = &d->layers[0];
    const struct omni_btensor *mats[] = { &L->wq, &L->wo, &L->w_gate, &L->w_down, &d->output };
    const struct omni_btensor *wq = NULL, *wide = NULL;
    for (size_t i = 0; i < sizeof mats / sizeof *mats; i++) {
        if (mats[i]->type != GGML_TYPE_F32 && (!wide || mats[i]->cols > wide->cols))
            wide = mats[i];
        if (mats[i]->type != GGML_TYPE_F32 && mats[i]->type != GGML_TYPE_F16 &&
            (!wq || mats[i]->cols > wq->cols))
            wq = mats[i];
    }
    const int64_t room = (int64_t)d->p.max_tokens * d->hp.n_ff; /* d->up and d->gate */
    const int T = d->p.max_tokens;
    const int rows[2] = { T < DEV_MATVEC_ROWS ? T : DEV_MATVEC_ROWS, T };
    const struct omni_btensor *ws[2] = { wq, wide };
    for (int k = 0; k < 2; k++) {
        const struct omni_btensor *w = ws[k];
        if (!w || (int64_t)rows[k] * w->cols > room || (int64_t)rows[k] * w->rows > room)
            continue;
        int rc = d->be->memset0(d->be, d->up, (size_t)rows[k] * w->cols * sizeof(float));
        if (rc >= 0)
            rc = d->be->matmul(d->be, w, d->up, rows[k], d->gate);
        if (rc < 0)
            return rc;
    }
    return d->be->sync(d->be);
}

/* The backend's own preparation of every matrix (cuda: F16 copies for
 * batched steps; q/k/v and gate/up as groups, each then one GEMM), before
 * the KV pool takes what memory is left. */
static int dev_prepare(struct llm_dev *d)
{
    if (!d->be->prepare)
        return 0;
    int rc = d->be->prepare(d->be, &d->output);
    for (int l = 0; rc >= 0 && l < d->hp.n_layer; l++) {
        const struct dev_layer *L = &d->layers[l];
        const struct omni_btensor *qkv[] = { &L->wq, &L->wk, &L->wv };
        const struct omni_btensor *gu[] = { &L->w_gate, &L->w_up };
        if (d->be->prepare_group && (rc = d->be->prepare_group(d->be, 3, qkv)) >= 0)
            rc = d->be->prepare_group(d->be, 2, gu);
        const struct omni_btensor *mats[] = { &L->wq, &L->wk, &L->wv, &L->wo,
                                              &L->w_gate, &L->w_up, &L->w_down };
        for (size_t i = 0; rc >= 0 && i < sizeof mats / sizeof *mats; i++)
            rc = d->be->prepare(d->be, mats[i]);
    }
    return rc < 0 ? rc : d->be->sync(d->be);
}

struct llm_dev *llm_dev_new(const struct llm_model *m, const struct llm_dev_params *params,
                            char *err, size_t errlen)
{
    struct llm_dev_params p = params ? *params : llm_dev_default_params();
    if (!p.backend)
        p.backend = "cuda";
    if (!p.kv_type)
        p.kv_type = GGML_TYPE_F16;
    if (!(p.mem_fraction > 0.0))
        p.mem_fraction = 0.9;
    if (p.max_tokens < 1 || p.max_tokens > (1 << 16) || p.block_size < 1 || p.n_blocks < 0 ||
        p.n_blocks_max < 0 || (int64_t)p.block_size * p.n_blocks > (1 << 26) ||
        p.mem_fraction > 1.0 || (p.kv_type != GGML_TYPE_F16 && p.kv_type != GGML_TYPE_F32)) {
        omni_fail(err, errlen, OMNI_ERR_ARG,
                  "model_dev: bad params (max_tokens %d, %d blocks of %d, kv type %d)",
                  p.max_tokens, p.n_blocks, p.block_size, p.kv_type);
        return NULL;
    }
    struct llm_dev *d = calloc(1, sizeof *d);
    if (!d) {
        omni_fail(err, errlen, OMNI_ERR_NOMEM, "model_dev: out of memory");
        return NULL;
    }
    d->m = m;
    d->hp = *llm_model_hparams(m);
    d->p = p;
    const struct llm_hparams *hp = &d->hp;
    d->neox = hp->arch == LLM_ARCH_QWEN2 || hp->arch == LLM_ARCH_QWEN3;
    if (check_supported(d, err, errlen) < 0)
        goto fail;
    d->be = omni_backend_new(p.backend, p.device, err, errlen);
    if (!d->be)
        goto fail;
    /* a model larger than the card: say so before uploading gigabytes */
    const size_t wb = llm_model_weight_bytes(m);
    if (d->be->mem_free && wb > d->be->mem_free) {
        omni_fail(err, errlen, OMNI_ERR_NOMEM,
                  "model_dev: %s: the weights (%.2f GiB) do not fit in the %.2f GiB free on %s "
                  "(partial offload is not supported yet; use --device cpu)",
                  d->be->name, wb / 1073741824.0, d->be->mem_free / 1073741824.0,
                  d->be->device);
        goto fail;
    }

    /* weights */
    d->layers = calloc((size_t)hp->n_layer, sizeof *d->layers);
    d->kc = calloc((size_t)hp->n_layer, sizeof *d->kc);
    d->vc = calloc((size_t)hp->n_layer, sizeof *d->vc);
    if (!d->layers || !d->kc || !d->vc) {
        omni_fail(err, errlen, OMNI_ERR_NOMEM, "model_dev: out of memory");
        goto fail;
    }
    if (upload(d, "token_embd.weight", true, true, &d->tok_embd, err, errlen) < 0 ||
        upload_vec(d, "output_norm.weight", true, &d->output_norm, err, errlen) < 0)
        goto fail;
    if (hp->tied_output) {
        d->output = d->tok_embd;
    } else {
        /* only one row of the embeddings is read per token */
        d->decode_bytes -= (size_t)d->tok_embd.rows *
                           ggml_row_size(d->tok_embd.type, d->tok_embd.cols);
        if (upload(d, "output.weight", true, true, &d->output, err, errlen) < 0)
            goto fail;
    }
    for (int l = 0; l < hp->n_layer; l++) {
        struct dev_layer *L = &d->layers[l];
        char name[64];
#define BLK(s) (snprintf(name, sizeof name, "blk.%d." s, l), name)
        if (upload(d, BLK("attn_q.weight"), true, true, &L->wq, err, errlen) < 0 ||
            upload(d, BLK("attn_k.weight"), true, true, &L->wk, err, errlen) < 0 ||
            upload(d, BLK("attn_v.weight"), true, true, &L->wv, err, errlen) < 0 ||
            upload(d, BLK("attn_output.weight"), true, true, &L->wo, err, errlen) < 0 ||
            upload(d, BLK("ffn_gate.weight"), true, true, &L->w_gate, err, errlen) < 0 ||
            upload(d, BLK("ffn_up.weight"), true, true, &L->w_up, err, errlen) < 0 ||
            upload(d, BLK("ffn_down.weight"), true, true, &L->w_down, err, errlen) < 0 ||
            upload_vec(d, BLK("attn_norm.weight"), true, &L->attn_norm, err, errlen) < 0 ||
            upload_vec(d, BLK("ffn_norm.weight"), true, &L->ffn_norm, err, errlen) < 0 ||
            upload_vec(d, BLK("attn_q.bias"), false, &L->bq, err, errlen) < 0 ||
            upload_vec(d, BLK("attn_k.bias"), false, &L->bk, err, errlen) < 0 ||
            upload_vec(d, BLK("attn_v.bias"), false, &L->bv, err, errlen) < 0 ||
            upload_vec(d, BLK("attn_output.bias"), false, &L->bo, err, errlen) < 0 ||
            upload_vec(d, BLK("attn_q_norm.weight"), false, &L->q_norm, err, errlen) < 0 ||
            upload_vec(d, BLK("attn_k_norm.weight"), false, &L->k_norm, err, errlen) < 0)
            goto fail;
#undef BLK
    }
    d->all_quant = true;
    for (int l = 0; l < hp->n_layer; l++) {
        const struct dev_layer *L = &d->layers[l];
        const struct omni_btensor *mats[] = { &L->wq, &L->wk, &L->wv, &L->wo,
                                              &L->w_gate, &L->w_up, &L->w_down, &d->output };
        for (size_t i = 0; i < sizeof mats / sizeof *mats; i++)
            if (mats[i]->type == GGML_TYPE_F32 || mats[i]->type == GGML_TYPE_F16 ||
                mats[i]->type == GGML_TYPE_BF16)
                d->all_quant = false;
    }
    const size_t half = (size_t)hp->n_rot / 2;
    float *rf = dev_alloc(d, half * sizeof(float));
    if (!rf || d->be->upload(d->be, rf, llm_model_rope_freqs(m), half * sizeof(float)) < 0) {
        omni_fail(err, errlen, OMNI_ERR_NOMEM, "model_dev: rope table");
        goto fail;
    }
    d->rope_freqs = rf;

    /* activations and step inputs */
    const size_t T = (size_t)p.max_tokens, q_dim = (size_t)hp->n_head * hp->head_dim;
    const size_t kv_dim_a = (size_t)hp->n_head_kv * hp->head_dim;
    const size_t widest = (size_t)hp->n_embd > q_dim ? (size_t)hp->n_embd : q_dim;
    d->x = dev_alloc(d, T * hp->n_embd * sizeof(float));
    d->xn = dev_alloc(d, T * widest * sizeof(float));
    d->q = dev_alloc(d, T * q_dim * sizeof(float));
    d->k = dev_alloc(d, T * kv_dim_a * sizeof(float));
    d->v = dev_alloc(d, T * kv_dim_a * sizeof(float));
    d->att = dev_alloc(d, T * widest * sizeof(float));
    d->gate = dev_alloc(d, T * hp->n_ff * sizeof(float));
    d->up = dev_alloc(d, T * hp->n_ff * sizeof(float));
    d->logits = dev_alloc(d, T * hp->n_vocab * sizeof(float));
    d->d_i32 = dev_alloc(d, 5 * T * sizeof(int32_t));
    d->d_slot = dev_alloc(d, T * sizeof(int64_t));
    d->d_argmax = dev_alloc(d, T * sizeof(int32_t));
    d->h_i32 = d->be->host_alloc(d->be, 5 * T * sizeof(int32_t));
    d->h_slot = d->be->host_alloc(d->be, T * sizeof(int64_t));
    d->h_argmax = d->be->host_alloc(d->be, T * sizeof(int32_t));
    const char *g = getenv("OMNI_DEV_GRAPHS"), *pr = getenv("OMNI_DEV_PROFILE");
    const char *fu = getenv("OMNI_DEV_FUSE");
    d->fuse = !(fu && !strcmp(fu, "0"));
    d->prof = pr && *pr && strcmp(pr, "0");
    d->graphs_ok = !(g && !strcmp(g, "0")) && !d->prof;
    if (!d->x || !d->xn || !d->q || !d->k || !d->v || !d->att || !d->gate || !d->up ||
        !d->logits || !d->d_i32 || !d->d_slot || !d->d_argmax || !d->h_i32 || !d->h_slot ||
        !d->h_argmax) {
        omni_fail(err, errlen, OMNI_ERR_NOMEM,
                  "model_dev: out of memory for %d-token activation buffers", p.max_tokens);
        goto fail;
    }
    if (dev_prepare(d) < 0) {
        omni_fail(err, errlen, OMNI_ERR_IO, "model_dev: %s: preparing the matrices failed",
                  d->be->name);
        goto fail;
    }
    /* KV pool: n_blocks, or what the device memory holds */
    const size_t kv_dim = (size_t)hp->n_head_kv * hp->head_dim;
    const size_t slot_bytes = 2 * kv_dim * (p.kv_type == GGML_TYPE_F32 ? 4 : 2) * hp->n_layer;
    if (!p.n_blocks) {
        /* what matmul's GEMM path grows later: a dequantized F16 copy of
         * the largest matrix and F16 activations of a full batch */
        size_t big = 0;
        const struct omni_btensor *mats[] = { &d->output, &d->layers[0].wq, &d->layers[0].wo,
                                              &d->layers[0].w_gate, &d->layers[0].w_down };
        for (size_t i = 0; i < sizeof mats / sizeof *mats; i++)
            if ((size_t)(mats[i]->rows * mats[i]->cols) > big)
                big = (size_t)(mats[i]->rows * mats[i]->cols);
        const size_t scratch = 2 * big + 2 * (size_t)p.max_tokens * (size_t)hp->n_ff;
        const size_t avail = d->be->mem_available ? d->be->mem_available(d->be) : 0;
        const size_t used = avail && avail <= d->be->mem_free ? d->be->mem_free - avail + scratch
                                                                : d->alloc_bytes + scratch;
        int64_t n_fit = -1;
        if (d->be->mem_free)
            n_fit = d->be->mem_free > used
                        ? (int64_t)((double)(d->be->mem_free - used) * p.mem_fraction /
                                    ((double)slot_bytes * p.block_size))
                        : 0;
        if (n_fit < 0 && !p.n_blocks_max) {
            omni_fail(err, errlen, OMNI_ERR_ARG,
                      "model_dev: %s does not report its free memory: give n_blocks",
                      d->be->name);
            goto fail;
        }
        int64_t nb = n_fit < 0 ? p.n_blocks_max : n_fit;
        if (p.n_blocks_max && nb > p.n_blocks_max)
            nb = p.n_blocks_max;
        if (nb > (1 << 26) / p.block_size)
            nb = (1 << 26) / p.block_size;
        if (nb < 1) {
            omni_fail(err, errlen, OMNI_ERR_NOMEM,
                      "model_dev: %s: no device memory left for the KV pool on %s (%.2f GiB free "
                      "before the weights, %.2f GiB of weights and buffers)",
                      d->be->name, d->be->device, d->be->mem_free / 1073741824.0,
                      used / 1073741824.0);
            goto fail;
        }
        p.n_blocks = d->p.n_blocks = (int)nb;
    }
    const size_t pool = (size_t)p.n_blocks * p.block_size * kv_dim *
                        (p.kv_type == GGML_TYPE_F32 ? 4 : 2);
    for (int l = 0; l < hp->n_layer; l++) {
        d->kc[l] = dev_alloc(d, pool);
        d->vc[l] = dev_alloc(d, pool);
        if (!d->kc[l] || !d->vc[l] || d->be->memset0(d->be, d->kc[l], pool) < 0 ||
            d->be->memset0(d->be, d->vc[l], pool) < 0) {
            omni_fail(err, errlen, OMNI_ERR_NOMEM,
                      "model_dev: out of device memory for the KV pool (%d blocks of %d)",
                      p.n_blocks, p.block_size);
            goto fail;
        }
        d->kv_bytes += 2 * pool;
    }
    /* the matvec path's activation scratch at its largest, once (a later
     * growth would move it under recorded graphs) */
    if (dev_presize(d) < 0) {
        omni_fail(err, errlen, OMNI_ERR_IO, "model_dev: %s: warm-up matmul failed",
                  d->be->name);
        goto fail;
    }
    return d;
fail:
    llm_dev_free(d);
    return NULL;
}

void llm_dev_free(struct llm_dev *d)
{
    if (!d)
        return;
    for (int i = 0; d->prof && i < 16 && d->prof_b[i].name; i++)
        fprintf(stderr, "model_dev profile: %-32s %10.3f ms %8ld marks %9.4f ms each\n",
                d->prof_b[i].name, 1e3 * d->prof_b[i].s, d->prof_b[i].n,
                1e3 * d->prof_b[i].s / d->prof_b[i].n);
    if (d->be) {
        for (int i = 0; i < d->n_allocs; i++)
            d->be->free(d->be, d->allocs[i]);
        d->be->free(d->be, d->d_tables);
        d->be->host_free(d->be, d->h_i32);
        d->be->host_free(d->be, d->h_slot);
        d->be->host_free(d->be, d->h_argmax);
        d->be->host_free(d->be, d->h_tables);
        for (int i = 0; i < DEV_GRAPHS; i++)
            if (d->graphs[i].g)
                d->be->graph_free(d->be, d->graphs[i].g);
    }
    free(d->h_copy);
    omni_backend_free(d->be);
    free(d->allocs);
    free(d->layers);
    free(d->kc);
    free(d->vc);
    free(d);
}

const char *llm_dev_device(const struct llm_dev *d) { return d->be->device; }
size_t llm_dev_weight_bytes(const struct llm_dev *d) { return d->weight_bytes; }
size_t llm_dev_kv_bytes(const struct llm_dev *d) { return d->kv_bytes; }
size_t llm_dev_decode_bytes(const struct llm_dev *d) { return d->decode_bytes; }
int llm_dev_n_blocks(const struct llm_dev *d) { return d->p.n_blocks; }

/* check_batch of model.c against the device pool; also finds the longest
 * block table the batch needs. */
static int dev_check(const struct llm_dev *d, const struct llm_batch *b,
                     const struct llm_seq_view *seqs, int *max_blocks)
{
    const struct llm_hparams *hp = &d->hp;
    if (!b || !seqs || b->n_tokens < 1 || b->n_tokens > d->p.max_tokens ||
        (!b->token && !b->embd) || !b->pos || !b->seq || (b->want_hidden && !b->hidden))
        return OMNI_ERR_ARG;
    *max_blocks = 1;
    for (int i = 0; i < b->n_tokens; i++) {
        if (b->token && (b->token[i] < 0 || b->token[i] >= hp->n_vocab))
            return OMNI_ERR_ARG;
        if (b->pos[i] < 0 || b->seq[i] < 0)
            return OMNI_ERR_ARG;
        const struct llm_seq_view *sv = &seqs[b->seq[i]];
        const int last_block = b->pos[i] / d->p.block_size;
        if (!sv->block_table || last_block >= sv->n_blocks)
            return OMNI_ERR_LIMIT;
        for (int blk = 0; blk <= last_block; blk++)
            if (sv->block_table[blk] < 0 || sv->block_table[blk] >= d->p.n_blocks)
                return OMNI_ERR_ARG;
        *max_blocks = last_block + 1 > *max_blocks ? last_block + 1 : *max_blocks;
    }
    return 0;
}

/* Tokens, positions, table rows, output rows, slots and block tables of the
 * step, one upload each. The sequences the batch names get table rows 0, 1,
 * ... in order of first appearance, max_blocks entries each. */
static int dev_inputs(struct llm_dev *d, const struct llm_batch *b,
                      const struct llm_seq_view *seqs, int max_blocks, int *n_out, int *n_hid)
{
    const int n = b->n_tokens, T = d->p.max_tokens;
    int32_t *tok = d->h_i32, *pos = tok + T, *row = pos + T, *out = row + T, *hid = out + T;
    int n_rows = 0;
    *n_out = *n_hid = 0;
    for (int t = 0; t < n; t++) {
        tok[t] = b->token ? b->token[t] : 0;
        pos[t] = b->pos[t];
        const int32_t blk = seqs[b->seq[t]].block_table[b->pos[t] / d->p.block_size];
        d->h_slot[t] = (int64_t)blk * d->p.block_size + b->pos[t] % d->p.block_size;
        if (b->want_logits ? b->want_logits[t] : t == n - 1)
            out[(*n_out)++] = t;
        if (b->want_hidden && b->want_hidden[t])
            hid[(*n_hid)++] = t;
    }
    /* table rows: first token of each distinct sequence (small batches of
     * few sequences: a linear scan) */
    int first_tok[256];
    for (int t = 0; t < n; t++) {
        int r = 0;
        while (r < n_rows && b->seq[first_tok[r]] != b->seq[t])
            r++;
        if (r == n_rows) {
            if (n_rows == (int)(sizeof first_tok / sizeof *first_tok))
                return OMNI_ERR_LIMIT;
            first_tok[n_rows++] = t;
        }
        row[t] = r;
    }
    const size_t need = (size_t)n_rows * max_blocks;
    if (need > d->tables_cap) {
        const size_t cap = need * 2;
        d->be->host_free(d->be, d->h_tables);
        d->be->free(d->be, d->d_tables);
        d->h_tables = d->be->host_alloc(d->be, cap * sizeof(int32_t));
        d->d_tables = d->be->alloc(d->be, cap * sizeof(int32_t));
        d->tables_gen++;
        if (!d->h_tables || !d->d_tables) {
            d->tables_cap = 0;
            return OMNI_ERR_NOMEM;
        }
        d->tables_cap = cap;
    }
    memset(d->h_tables, 0, need * sizeof(int32_t));
    for (int r = 0; r < n_rows; r++) {
        const int t0 = first_tok[r];
        const struct llm_seq_view *sv = &seqs[b->seq[t0]];
        /* the blocks this batch can reach: up to the sequence's last position in it */
        int last = 0;
        for (int t = t0; t < n; t++)
            if (b->seq[t] == b->seq[t0] && b->pos[t] > last)
                last = b->pos[t];
        const int nb = last / d->p.block_size + 1;
        memcpy(d->h_tables + (size_t)r * max_blocks, sv->block_table, (size_t)nb * sizeof(int32_t));
    }
    int rc;
    if ((rc = d->be->upload(d->be, d->d_i32, d->h_i32, 5 * (size_t)T * sizeof(int32_t))) < 0 ||
        (rc = d->be->upload(d->be, d->d_slot, d->h_slot, (size_t)n * sizeof(int64_t))) < 0 ||
        (rc = d->be->upload(d->be, d->d_tables, d->h_tables, need * sizeof(int32_t))) < 0)
        return rc;
    if (b->embd)
        rc = d->be->upload(d->be, d->x, b->embd, (size_t)n * d->hp.n_embd * sizeof(float));
    return rc;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Profile mark: the time since the previous mark goes to bucket name
 * (NULL: restart the clock). */
static void prof_mark(struct llm_dev *d, const char *name)
{
    if (!d->prof)
        return;
    d->be->sync(d->be);
    const double t = now_s();
    for (int i = 0; name && i < 16; i++)
        if (!d->prof_b[i].name || !strcmp(d->prof_b[i].name, name)) {
            d->prof_b[i].name = name;
            d->prof_b[i].s += t - d->prof_t;
            d->prof_b[i].n++;
            break;
        }
    d->prof_t = t;
}

#define TRY(call)                                                                             \
    do {                                                                                      \
        if ((rc = (call)) < 0)                                                                \
            return rc;                                                                        \
    } while (0)

static int dev_layer(struct llm_dev *d, int l, int n, int n_seq_blocks,
                     const int32_t *d_pos, const int32_t *d_row)
{
    struct omni_backend *be = d->be;
    const struct llm_hparams *hp = &d->hp;
    const struct dev_layer *L = &d->layers[l];
    const int hd = hp->head_dim, q_dim = hp->n_head * hd, kv_dim = hp->n_head_kv * hd;
    int rc;
    /* (the previous layer's FFN output, in xn, into the residual;) attention
     * rmsnorm; q, k, v (+ biases) */
    if (l == 0)
        TRY(be->rmsnorm(be, d->xn, d->x, L->attn_norm, n, hp->n_embd, hp->norm_eps));
    else
        TRY(be->add_rmsnorm(be, d->x, d->xn, d->xn, L->attn_norm, n, hp->n_embd, hp->norm_eps));
    prof_mark(d, "norms, adds");
    if (d->fuse && be->matmul_multi) { /* one launch, x read once */
        const struct omni_btensor *w3[3] = { &L->wq, &L->wk, &L->wv };
        float *const y3[3] = { d->q, d->k, d->v };
        TRY(be->matmul_multi(be, 3, w3, d->xn, n, y3));
    } else {
        TRY(be->matmul(be, &L->wq, d->xn, n, d->q));
        TRY(be->matmul(be, &L->wk, d->xn, n, d->k));
        TRY(be->matmul(be, &L->wv, d->xn, n, d->v));
    }
    prof_mark(d, "matmul q k v");
    /* biases, per-head q/k norm (qwen3), rope, k/v into the pool: one
     * rope_kv op where the backend has it (biases in it unless a q/k norm
     * comes between) */
    const bool qk_norm = L->q_norm || L->k_norm;
    const bool fused_rope = d->fuse && be->rope_kv;
    if (!fused_rope || qk_norm) {
        if (L->bq)
            TRY(be->add(be, d->q, NULL, L->bq, n, q_dim));
        if (L->bk)
            TRY(be->add(be, d->k, NULL, L->bk, n, kv_dim));
        if (L->bv)
            TRY(be->add(be, d->v, NULL, L->bv, n, kv_dim));
    }
    if (L->q_norm)
        TRY(be->rmsnorm(be, d->q, d->q, L->q_norm, n * hp->n_head, hd, hp->norm_eps));
    if (L->k_norm)
        TRY(be->rmsnorm(be, d->k, d->k, L->k_norm, n * hp->n_head_kv, hd, hp->norm_eps));
    if (fused_rope) {
        const struct omni_brope_kv r = {
            .q = d->q, .k = d->k, .v = d->v, .bq = qk_norm ? NULL : L->bq,
            .bk = qk_norm ? NULL : L->bk, .bv = qk_norm ? NULL : L->bv, .pos = d_pos,
            .n_tok = n, .n_head = hp->n_head, .n_head_kv = hp->n_head_kv, .head_dim = hd,
            .n_rot = hp->n_rot, .inv_freq = d->rope_freqs, .attn_factor = hp->rope_attn_factor,
            .neox = d->neox, .kc = d->kc[l], .vc = d->vc[l], .kv_type = d->p.kv_type,
            .slot = d->d_slot,
        };
        TRY(be->rope_kv(be, &r));
    } else {
        TRY(be->rope(be, d->q, d_pos, n, hp->n_head, hd, hp->n_rot, d->rope_freqs,
                     hp->rope_attn_factor, d->neox));
        TRY(be->rope(be, d->k, d_pos, n, hp->n_head_kv, hd, hp->n_rot, d->rope_freqs,
                     hp->rope_attn_factor, d->neox));
        TRY(be->kv_store(be, d->k, d->v, d->kc[l], d->vc[l], d->p.kv_type, d->d_slot, n,
                         kv_dim));
    }
    prof_mark(d, "bias, q/k norm, rope, kv store");
    /* attention through the block tables */
    const struct omni_battn a = {
        .out = d->att, .q = d->q, .k = d->kc[l], .v = d->vc[l], .kv_type = d->p.kv_type,
        .n_tok = n, .pos = d_pos, .seq = d_row, .tables = d->d_tables,
        .max_blocks = n_seq_blocks, .block_size = d->p.block_size, .n_head = hp->n_head,
        .n_head_kv = hp->n_head_kv, .head_dim = hd, .scale = hp->attn_scale, .n_swa = 0,
    };
    TRY(be->attention(be, &a));
    prof_mark(d, "attention");
    /* output projection + residual; ffn rmsnorm */
    TRY(be->matmul(be, &L->wo, d->att, n, d->xn));
    prof_mark(d, "matmul o");
    if (L->bo)
        TRY(be->add(be, d->xn, NULL, L->bo, n, hp->n_embd));
    TRY(be->add_rmsnorm(be, d->x, d->xn, d->xn, L->ffn_norm, n, hp->n_embd, hp->norm_eps));
    prof_mark(d, "norms, adds");
    /* x += down(silu(gate(x)) * up(x)): one launch where the backend fuses
     * it (OMNI_ERR_UNSUPPORTED, nothing queued: these weights it does not) */
    rc = d->fuse && be->matmul_glu ? be->matmul_glu(be, &L->w_gate, &L->w_up, d->xn, n, d->up)
                                   : OMNI_ERR_UNSUPPORTED;
    if (rc == OMNI_ERR_UNSUPPORTED) {
        TRY(be->matmul(be, &L->w_gate, d->xn, n, d->gate));
        TRY(be->matmul(be, &L->w_up, d->xn, n, d->up));
        prof_mark(d, "matmul gate up");
        TRY(be->swiglu(be, d->gate, d->up, (int64_t)n * hp->n_ff));
    } else if (rc < 0) {
        return rc;
    }
    prof_mark(d, "gate up swiglu");
    TRY(be->matmul(be, &L->w_down, d->up, n, d->xn));
    prof_mark(d, "matmul down");
    /* the FFN output stays in xn: the next layer's first step adds it */
    if (l == hp->n_layer - 1)
        TRY(be->add(be, d->x, d->xn, NULL, n, hp->n_embd));
    return 0;
}

/* Everything of a step after its inputs, queued without a download:
 * embeddings, the layers, the output-normed hidden rows (into att), logits
 * of the rows that want them and, with want_argmax, their argmax. */
static int dev_compute(struct llm_dev *d, bool tokens, int n, int max_blocks, int n_out,
                       int n_hid, bool want_argmax)
{
    struct omni_backend *be = d->be;
    const struct llm_hparams *hp = &d->hp;
    const int T = d->p.max_tokens, n_embd = hp->n_embd;
    const int32_t *d_tok = d->d_i32, *d_pos = d_tok + T, *d_row = d_pos + T;
    const int32_t *d_out = d_row + T, *d_hid = d_out + T;
    int rc;
    /* token embeddings (multimodal rows were uploaded into x) */
    prof_mark(d, NULL);
    if (tokens)
        TRY(be->get_rows(be, &d->tok_embd, d_tok, n, d->x));
    prof_mark(d, "embeddings");
    for (int l = 0; l < hp->n_layer; l++)
        TRY(dev_layer(d, l, n, max_blocks, d_pos, d_row));
    /* final hidden states of the embedding rows (output norm applied) */
    const struct omni_btensor xs = { GGML_TYPE_F32, n_embd, n, d->x };
    if (n_hid) {
        TRY(be->get_rows(be, &xs, d_hid, n_hid, d->att));
        TRY(be->rmsnorm(be, d->att, d->att, d->output_norm, n_hid, n_embd, hp->norm_eps));
    }
    if (!n_out)
        return 0;
    /* output norm and logits of the rows that want them, packed */
    TRY(be->get_rows(be, &xs, d_out, n_out, d->xn));
    TRY(be->rmsnorm(be, d->xn, d->xn, d->output_norm, n_out, n_embd, hp->norm_eps));
    TRY(be->matmul(be, &d->output, d->xn, n_out, d->logits));
    prof_mark(d, "output norm, logits");
    if (want_argmax)
        TRY(be->argmax(be, d->logits, n_out, hp->n_vocab, d->d_argmax));
    prof_mark(d, "argmax");
    return 0;
}

/* Width of the block tables of a graph step: the next power of two (at
 * least 8, at most the pool), so that a graph serves growing sequences for
 * a while. */
static int graph_width(const struct llm_dev *d, int max_blocks)
{
    int w = 8;
    while (w < max_blocks)
        w *= 2;
    return w < d->p.n_blocks ? w : d->p.n_blocks;
}

/* A step of this shape as a graph: replayed when recorded for the current
 * tables buffer; recorded the second time the shape comes (the first run
 * is plain); a shape whose capture fails runs plainly from then on. */
static int dev_compute_graph(struct llm_dev *d, int n, int width, int n_out)
{
    struct omni_backend *be = d->be;
    struct dev_graph *slot = NULL, *lru = &d->graphs[0];
    d->step++;
    for (int i = 0; i < DEV_GRAPHS; i++) {
        struct dev_graph *g = &d->graphs[i];
        if (g->used && g->n == n && g->n_out == n_out && g->width == width) {
            slot = g;
            break;
        }
        if (g->used < lru->used)
            lru = g;
    }
    if (!slot) { /* first sight: remember the shape, run plainly */
        if (lru->g)
            be->graph_free(be, lru->g);
        *lru = (struct dev_graph){ .n = n, .n_out = n_out, .width = width, .used = d->step };
        return dev_compute(d, true, n, width, n_out, 0, true);
    }
    slot->used = d->step;
    if (slot->g && slot->gen == d->tables_gen)
        return be->graph_launch(be, slot->g);
    if (slot->g) { /* the tables moved */
        be->graph_free(be, slot->g);
        slot->g = NULL;
    }
    if (slot->bad || be->graph_begin(be) < 0) {
        slot->bad = true;
        return dev_compute(d, true, n, width, n_out, 0, true);
    }
    const int rc = dev_compute(d, true, n, width, n_out, 0, true);
    void *g = NULL;
    const int rc_end = be->graph_end(be, &g);
    if (rc < 0 || rc_end < 0 || !g) {
        if (g)
            be->graph_free(be, g);
        slot->bad = true;
        return dev_compute(d, true, n, width, n_out, 0, true);
    }
    slot->g = g;
    slot->gen = d->tables_gen;
    return be->graph_launch(be, g);
}

int llm_dev_forward_rows(struct llm_dev *d, const struct llm_batch *batch,
                         const struct llm_seq_view *seqs, float *logits, const bool *row_logits,
                         int32_t *argmax)
{
    int max_blocks, n_out, n_hid, rc;
    if ((rc = dev_check(d, batch, seqs, &max_blocks)) < 0)
        return rc;
    struct omni_backend *be = d->be;
    const struct llm_hparams *hp = &d->hp;
    const int n = batch->n_tokens;
    /* a short step of tokens with no hidden states: a graph of its shape,
     * with tables of a bucketed width (F32/F16/BF16 matrices: only where they
     * stay on the matvec path, 8 rows) */
    bool any_hidden = false;
    for (int i = 0; batch->want_hidden && i < n; i++)
        any_hidden |= batch->want_hidden[i];
    int n_want = 0;
    for (int i = 0; i < n; i++)
        n_want += batch->want_logits ? batch->want_logits[i] : i == n - 1;
    const bool graph = d->graphs_ok && batch->token && !any_hidden && n_want > 0 &&
                       n <= DEV_GRAPH_MAX_TOKENS && (d->all_quant || n <= 8);
    if (graph)
        max_blocks = graph_width(d, max_blocks);
    if ((rc = dev_inputs(d, batch, seqs, max_blocks, &n_out, &n_hid)) < 0)
        return rc;
    if (graph)
        rc = dev_compute_graph(d, n, max_blocks, n_out);
    else
        rc = dev_compute(d, batch->token != NULL, n, max_blocks, n_out, n_hid, argmax != NULL);
    if (rc < 0)
        return rc;
    if (n_hid)
        TRY(be->download(be, batch->hidden, d->att, (size_t)n_hid * hp->n_embd * sizeof(float)));
    if (n_out && argmax) {
        TRY(be->download(be, d->h_argmax, d->d_argmax, (size_t)n_out * sizeof(int32_t)));
        memcpy(argmax, d->h_argmax, (size_t)n_out * sizeof(int32_t));
    }
    const size_t row = (size_t)hp->n_vocab * sizeof(float);
    bool synced = n_hid || (n_out && argmax);
    for (int r = 0; logits && r < n_out;) {
        if (row_logits && !row_logits[r]) {
            r++;
            continue;
        }
        int e = r + 1; /* a run of wanted rows: one copy */
        while (e < n_out && (!row_logits || row_logits[e]))
            e++;
        TRY(be->download(be, (char *)logits + r * row, (const char *)d->logits + r * row,
                         (size_t)(e - r) * row));
        synced = true;
        r = e;
    }
    if (!synced)
        TRY(be->sync(be));
    return n_out;
}

int llm_dev_forward(struct llm_dev *d, const struct llm_batch *batch,
                    const struct llm_seq_view *seqs, float *logits, int32_t *argmax)
{
    return llm_dev_forward_rows(d, batch, seqs, logits, NULL, argmax);
}

int llm_dev_copy_block(struct llm_dev *d, int dst, int src, int n_slots)
{
    if (dst < 0 || src < 0 || dst >= d->p.n_blocks || src >= d->p.n_blocks || n_slots < 0 ||
        n_slots > d->p.block_size)
        return OMNI_ERR_ARG;
    if (!n_slots || dst == src)
        return 0;
    const size_t slot = (size_t)d->hp.n_head_kv * d->hp.head_dim *
                        (d->p.kv_type == GGML_TYPE_F32 ? 4 : 2);
    const size_t bytes = slot * (size_t)n_slots, block = slot * (size_t)d->p.block_size;
    if (bytes > d->h_copy_cap) {
        void *h = realloc(d->h_copy, bytes);
        if (!h)
            return OMNI_ERR_NOMEM;
        d->h_copy = h;
        d->h_copy_cap = bytes;
    }
    /* through the host: a fork's partial block is rare and small */
    int rc;
    for (int l = 0; l < d->hp.n_layer; l++) {
        void *pools[2] = { d->kc[l], d->vc[l] };
        for (int k = 0; k < 2; k++) {
            char *base = pools[k];
            TRY(d->be->download(d->be, d->h_copy, base + (size_t)src * block, bytes));
            TRY(d->be->upload(d->be, base + (size_t)dst * block, d->h_copy, bytes));
        }
    }
    return d->be->sync(d->be);
}

static int dev_forward_hook(void *impl, const struct llm_batch *batch, struct llm_kv *kv,
                            const struct llm_seq_view *seqs, float *logits)
{
    struct llm_dev *d = impl;
    if (kv->block_size != d->p.block_size || kv->n_blocks > d->p.n_blocks)
        return OMNI_ERR_ARG;
    return llm_dev_forward(d, batch, seqs, logits, NULL);
}

void llm_dev_attach(struct llm_dev *d, struct llm_ctx *ctx)
{
    llm_ctx_set_forward(ctx, d ? dev_forward_hook : NULL, d);
}
