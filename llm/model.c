/* model.c - decoder-only transformer forward (llama, qwen2, qwen3, gemma2,
 * gemma3, phi3, qwen3moe, smollm3, lfm2, qwen2vl, gpt-oss) over GGUF weights.
 *
 * Weights stay in the mapped GGUF file and are multiplied in place through
 * omni_matmul; per-run activations live in a llm_ctx allocated once; K/V live
 * in a paged llm_kv and attention reads them through each sequence's block
 * table. One layer is: RMSNorm -> Q/K/V projections (fused in phi3; + bias,
 * qwen2) -> per-head q/k RMSNorm (qwen3, gemma3) -> RoPE -> attention (scores
 * soft-capped in gemma2; keys older than the window masked in sliding layers)
 * -> output projection (-> post-norm, gemma) + residual -> RMSNorm -> gated
 * FFN (SwiGLU, or GeGLU for gemma; gate and up fused in phi3; a mixture of
 * experts in qwen3moe, llm/moe.c) (-> post-norm) + residual. smollm3 skips
 * RoPE in every 4th layer (NoPE). gpt-oss adds a learned sink logit per head
 * to each softmax denominator, YaRN rope, biases on the router and experts
 * and a clamped SwiGLU. What differs between the families is one row of `families`
 * below; the forward reads those flags and the tensors that are present. */
#include "model.h"

#include "llm/deltanet.h"
#include "llm/moe.h"
#include "llm/tokenizer.h"
#include "src/core/gguf.h"
#include "src/core/matmul.h"
#include "src/core/omni.h"
#include "src/core/ops.h"
#include "src/core/quant.h"
#include "src/core/rope_yarn.h"
#include "src/core/tensor.h"
#include "src/core/threadpool.h"

#include <cblas.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Positions of one (token, head) attention handled per softmax rescale. */
#define ATTN_CHUNK 64
/* Positions per attn_online_f16 call (row pointers on the stack; the
 * kernel prefetches ahead within a call). */
#define ATTN_F16_CHUNK 1024
/* Prefill attention in blocks: up to ATTN_QBLOCK consecutive tokens of one
 * sequence against ATTN_KBLOCK keys at a time, as two GEMMs; runs shorter
 * than ATTN_QBLOCK_MIN tokens (decode steps) go token by token. */
#define ATTN_QBLOCK 32
#define ATTN_QBLOCK_MIN 8
#define ATTN_KBLOCK 128

struct llm_layer {
    const float *attn_norm;         /* [n_embd] */
    struct omni_tensor wq;          /* [n_head * head_dim][n_embd] */
    struct omni_tensor wk, wv;      /* [n_head_kv * head_dim][n_embd] */
    struct omni_tensor wo;          /* [n_embd][n_head * head_dim] */
    const float *bq, *bk, *bv, *bo; /* biases (qwen2; llama with attention_bias) or NULL */
    const float *q_norm, *k_norm;   /* [head_dim] per-head RMSNorm gains (qwen3, gemma3) or NULL */
    const float *attn_sinks;        /* [n_head] sink logit in each softmax denominator (gpt-oss) or NULL */
    struct omni_tensor wqkv;        /* [(n_head + 2 n_head_kv) * head_dim][n_embd] (phi3: q, k, v rows) */
    const float *attn_post_norm;    /* [n_embd] norm of the attention output (gemma) or NULL */
    const float *ffn_norm;          /* [n_embd] */
    struct omni_tensor w_gate;      /* [n_ff][n_embd] (absent when fused) */
    struct omni_tensor w_up;        /* [n_ff][n_embd], or [2 n_ff][n_embd] gate rows then up rows (phi3) */
    struct omni_tensor w_down;      /* [n_embd][n_ff] */
    const float *ffn_post_norm;     /* [n_embd] norm of the FFN output (gemma) or NULL */
    struct moe_layer moe;           /* experts (qwen3moe) instead of w_gate/w_up/w_down */
    bool swa;                       /* sliding-window layer: keys within n_swa positions */
    bool nope;                      /* no rotary in this layer (smollm3's every 4th) */
    /* lfm2 short-convolution block (conv_in.data != NULL) instead of attention */
    struct omni_tensor conv_in;     /* [3 n_embd][n_embd]: rows B, then C, then x */
    const float *conv_w;            /* [n_embd][conv_l_cache] depthwise causal kernel */
    struct omni_tensor conv_out;    /* [n_embd][n_embd] */
    int conv_index;                 /* which conv layer (its state's place), or -1 */
    struct gdn_layer gdn;           /* Gated DeltaNet layer (gdn.out.data != NULL) instead of
                                       attention (qwen3next, qwen35) */
};

/* What sets a family apart, one row per architecture. */
enum llm_act { LLM_ACT_SILU, LLM_ACT_GELU_TANH };
struct llm_family {
    const char *name;      /* general.architecture */
    bool rope_neox;        /* rotate halves (i, i + d/2) instead of pairs (2i, 2i+1) */
    bool qkv_bias;         /* q/k/v biases required (qwen2) */
    bool qk_norm;          /* per-head q/k RMSNorm */
    bool post_norms;       /* post_attention_norm and post_ffw_norm */
    bool fused_qkv;        /* attn_qkv instead of attn_q/k/v */
    bool fused_gate_up;    /* ffn_up holds the gate rows then the up rows */
    bool embd_scale;       /* token embeddings times sqrt(n_embd) */
    bool moe;              /* mixture-of-experts FFN in every layer (llm/moe.h) */
    int nope_period;       /* every n-th layer without rotary (llama.cpp fixes 4 for smollm3) */
    bool gptoss;           /* attn_sinks; the FFN norm is post_attention_norm; biased experts
                              with the clamped SwiGLU (limit 7); YaRN without truncation */
    bool short_conv;       /* lfm2: head_count_kv per layer, 0 = a short-convolution block */
    bool gdn;              /* Gated DeltaNet layers (llm/deltanet.h) beside gated attention:
                              attn_q holds each head's query rows then its output-gate rows;
                              the FFN norm is post_attention_norm (qwen3next, qwen35) */
    enum llm_act act;      /* gate activation of the FFN */
    /* Which layers slide when attention.sliding_window is set (llama.cpp
     * fixes it per family): 0 none, 1 all, n: all but every n-th layer. */
    int swa_period;
    float rope_theta_swa;  /* rope base of sliding layers (0: rope.freq_base) */
    int layers_27b;        /* layer count of the 27B model whose query scale is
                              1/sqrt(n_embd / n_head) when attention.scale is absent */
};

static const struct llm_family families[] = {
    [LLM_ARCH_LLAMA] = { "llama", .swa_period = 1 },
    [LLM_ARCH_QWEN2] = { "qwen2", .rope_neox = true, .qkv_bias = true },
    [LLM_ARCH_QWEN3] = { "qwen3", .rope_neox = true, .qk_norm = true },
    [LLM_ARCH_GEMMA2] = { "gemma2", .rope_neox = true, .post_norms = true, .embd_scale = true,
                          .act = LLM_ACT_GELU_TANH, .swa_period = 2, .layers_27b = 46 },
    [LLM_ARCH_GEMMA3] = { "gemma3", .rope_neox = true, .qk_norm = true, .post_norms = true,
                          .embd_scale = true, .act = LLM_ACT_GELU_TANH, .swa_period = 6,
                          .rope_theta_swa = 10000.0f, .layers_27b = 62 },
    [LLM_ARCH_PHI3] = { "phi3", .rope_neox = true, .fused_qkv = true, .fused_gate_up = true,
                        .swa_period = 1 },
    [LLM_ARCH_QWEN3MOE] = { "qwen3moe", .rope_neox = true, .qk_norm = true, .moe = true },
    [LLM_ARCH_SMOLLM3] = { "smollm3", .nope_period = 4 },
    [LLM_ARCH_LFM2] = { "lfm2", .rope_neox = true, .qk_norm = true, .short_conv = true },
    [LLM_ARCH_QWEN2VL] = { "qwen2vl", .rope_neox = true, .qkv_bias = true }, /* + M-RoPE */
    [LLM_ARCH_GPTOSS] = { "gpt-oss", .rope_neox = true, .moe = true, .swa_period = 2, .gptoss = true },
    [LLM_ARCH_QWEN3NEXT] = { "qwen3next", .rope_neox = true, .qk_norm = true, .moe = true, .gdn = true },
    /* Qwen3.5's M-RoPE sections turn alike for text positions: plain neox rope */
    [LLM_ARCH_QWEN35] = { "qwen35", .rope_neox = true, .qk_norm = true, .gdn = true },
    [LLM_ARCH_QWEN35MOE] = { "qwen35moe", .rope_neox = true, .qk_norm = true, .moe = true, .gdn = true },
    /* Qwen3 blocks + interleaved M-RoPE + DeepStack (hparams.n_deepstack) */
    [LLM_ARCH_QWEN3VL] = { "qwen3vl", .rope_neox = true, .qk_norm = true },
    [LLM_ARCH_QWEN3VLMOE] = { "qwen3vlmoe", .rope_neox = true, .qk_norm = true, .moe = true },
};
#define N_FAMILIES ((int)(sizeof families / sizeof *families))

struct llm_model {
    struct gguf *g;
    void *file_buf;                 /* the file read into memory when use_mmap is false */
    struct tokenizer *tok;
    struct llm_hparams hp;
    const struct llm_family *fam;
    /* [n_rope][n_rot / 2] angle per position of each rotated pair: table 0
     * for global layers, 1 for sliding ones when their base differs */
    float *rope_inv_freq;
    int n_rope;
    struct omni_tensor tok_embd;    /* [n_vocab][n_embd] */
    struct omni_tensor output;      /* [n_vocab][n_embd], tok_embd when tied */
    const float *output_norm;       /* [n_embd] */
    struct llm_layer *layers;       /* [n_layer] */
    size_t weight_bytes;
    size_t decode_bytes;            /* llm_model_decode_bytes */
    /* [n_layer] layers without K/V: lfm2's short-convolution blocks, or the
     * Gated DeltaNet layers (fam->gdn); NULL when there are none */
    bool *conv_layer;
    size_t state_floats;            /* llm_model_state_floats */
};

// ---- loading ---------------------------------------------------------------

struct loader {
    struct llm_model *m;
    const char *path;
    char *err;
    size_t errlen;
    int n_ctx;          /* llm_model_params.n_ctx */
};

/* Find tensor name with the given numpy-style shape (ne[1], ne[0] for 2-D).
 * 1-D tensors (norms, biases) must be F32; matrices any supported type. */
static int get_tensor(struct loader *ld, const char *name, int n_dims, int64_t rows, int64_t cols,
                      bool required, const struct gguf_tensor **out)
{
    const struct gguf_tensor *t = gguf_find_tensor(ld->m->g, name);
    *out = NULL;
    if (!t) {
        if (!required)
            return 0;
        return omni_fail(ld->err, ld->errlen, OMNI_ERR_FORMAT, "model: %s: tensor '%s' missing",
                         ld->path, name);
    }
    int64_t want0 = n_dims == 1 ? rows : cols, want1 = n_dims == 1 ? 1 : rows;
    if (t->n_dims != n_dims || t->ne[0] != want0 || t->ne[1] != want1 || t->ne[2] != 1 ||
        t->ne[3] != 1) {
        char got[96];
        int n = snprintf(got, sizeof got, "%lld", (long long)t->ne[0]);
        for (int d = 1; d < t->n_dims && n > 0 && n < (int)sizeof got; d++)
            n += snprintf(got + n, sizeof got - n, ", %lld", (long long)t->ne[d]);
        if (n_dims == 1)
            return omni_fail(ld->err, ld->errlen, OMNI_ERR_FORMAT,
                             "model: %s: tensor '%s': shape [%s], expected [%lld]", ld->path,
                             name, got, (long long)want0);
        return omni_fail(ld->err, ld->errlen, OMNI_ERR_FORMAT,
                         "model: %s: tensor '%s': shape [%s], expected [%lld, %lld]", ld->path,
                         name, got, (long long)want0, (long long)want1);
    }
    const struct ggml_type_traits *tr = ggml_type_traits_of(t->type);
    if (n_dims == 1 ? t->type != GGML_TYPE_F32
                    : !tr || !tr->supported || !ggml_row_size(t->type, t->ne[0]))
        return omni_fail(ld->err, ld->errlen, OMNI_ERR_UNSUPPORTED,
                         "model: %s: tensor '%s': type %s not supported%s", ld->path, name,
                         ggml_type_name(t->type), n_dims == 1 ? " (1-D tensors must be f32)" : "");
    if (n_dims == 1 && (uintptr_t)t->data % sizeof(float))
        return omni_fail(ld->err, ld->errlen, OMNI_ERR_FORMAT,
                         "model: %s: tensor '%s': data not aligned to 4 bytes", ld->path, name);
    ld->m->weight_bytes += t->nbytes;
    *out = t;
    return 0;
}

static int get_matrix(struct loader *ld, const char *name, int64_t rows, int64_t cols,
                      struct omni_tensor *w)
{
    const struct gguf_tensor *t;
    int rc = get_tensor(ld, name, 2, rows, cols, true, &t);
    if (rc < 0)
        return rc;
    *w = (struct omni_tensor){ .type = t->type, .ne = { t->ne[0], t->ne[1] }, .data = t->data };
    ld->m->decode_bytes += t->nbytes; /* a decoded token multiplies every matrix once */
    return 0;
}

static int get_vector(struct loader *ld, const char *name, int64_t n, bool required,
                      const float **v)
{
    const struct gguf_tensor *t;
    int rc = get_tensor(ld, name, 1, n, 1, required, &t);
    *v = t ? t->data : NULL;
    return rc;
}

/* A 3-D expert tensor as llama.cpp writes it: ne = {cols, rows, n_expert}. */
static int get_experts(struct loader *ld, const char *name, int n_expert, int64_t rows,
                       int64_t cols, struct moe_experts *x)
{
    const struct gguf_tensor *t = gguf_find_tensor(ld->m->g, name);
    if (!t)
        return omni_fail(ld->err, ld->errlen, OMNI_ERR_FORMAT, "model: %s: tensor '%s' missing",
                         ld->path, name);
    if (t->n_dims != 3 || t->ne[0] != cols || t->ne[1] != rows || t->ne[2] != n_expert)
        return omni_fail(ld->err, ld->errlen, OMNI_ERR_FORMAT,
                         "model: %s: tensor '%s': shape [%lld, %lld, %lld] (%d dims), expected "
                         "[%lld, %lld, %d]", ld->path, name, (long long)t->ne[0],
                         (long long)t->ne[1], (long long)t->ne[2], t->n_dims, (long long)cols,
                         (long long)rows, n_expert);
    const struct ggml_type_traits *tr = ggml_type_traits_of(t->type);
    const size_t row = tr && tr->supported ? ggml_row_size(t->type, cols) : 0;
    if (!row)
        return omni_fail(ld->err, ld->errlen, OMNI_ERR_UNSUPPORTED,
                         "model: %s: tensor '%s': type %s not supported", ld->path, name,
                         ggml_type_name(t->type));
    *x = (struct moe_experts){ .type = t->type, .cols = cols, .rows = rows, .n_expert = n_expert,
                               .expert_bytes = row * (size_t)rows, .data = t->data };
    ld->m->weight_bytes += t->nbytes;
    /* a decoded token reads expert_used_count of the experts */
    ld->m->decode_bytes += x->expert_bytes * (size_t)ld->m->hp.n_expert_used;
    return 0;
}

/* An F32 matrix of biases, [rows][cols] (gpt-oss expert biases: ne = {cols, rows}). */
static int get_bias_matrix(struct loader *ld, const char *name, int64_t rows, int64_t cols,
                           const float **out)
{
    const struct gguf_tensor *t;
    int rc = get_tensor(ld, name, 2, rows, cols, true, &t);
    if (rc < 0)
        return rc;
    if (t->type != GGML_TYPE_F32 || (uintptr_t)t->data % sizeof(float))
        return omni_fail(ld->err, ld->errlen, OMNI_ERR_UNSUPPORTED,
                         "model: %s: tensor '%s': type %s, need f32 (4-byte aligned)", ld->path,
                         name, ggml_type_name(t->type));
    *out = t->data;
    return 0;
}

/* Router, experts and the optional shared expert of layer l (qwen3moe);
 * gpt-oss: the router's and experts' biases as well. */
static int load_moe(struct loader *ld, int l, struct moe_layer *x)
{
    const struct llm_hparams *hp = &ld->m->hp;
    const int64_t n_embd = hp->n_embd, ff = hp->n_ff_exp;
    char name[64];
    int rc;
#define BLK(suffix) (snprintf(name, sizeof name, "blk.%d." suffix, l), name)
    if ((rc = get_matrix(ld, BLK("ffn_gate_inp.weight"), hp->n_expert, n_embd, &x->router)) < 0 ||
        (rc = get_experts(ld, BLK("ffn_gate_exps.weight"), hp->n_expert, ff, n_embd, &x->gate)) < 0 ||
        (rc = get_experts(ld, BLK("ffn_up_exps.weight"), hp->n_expert, ff, n_embd, &x->up)) < 0 ||
        (rc = get_experts(ld, BLK("ffn_down_exps.weight"), hp->n_expert, n_embd, ff, &x->down)) < 0)
        return rc;
    if (ld->m->fam->gptoss &&
        ((rc = get_vector(ld, BLK("ffn_gate_inp.bias"), hp->n_expert, true, &x->router_b)) < 0 ||
         (rc = get_bias_matrix(ld, BLK("ffn_gate_exps.bias"), hp->n_expert, ff, &x->gate_b)) < 0 ||
         (rc = get_bias_matrix(ld, BLK("ffn_up_exps.bias"), hp->n_expert, ff, &x->up_b)) < 0 ||
         (rc = get_bias_matrix(ld, BLK("ffn_down_exps.bias"), hp->n_expert, n_embd, &x->down_b)) < 0))
        return rc;
    if (!hp->n_ff_shexp)
        return 0;
    const int64_t sff = hp->n_ff_shexp;
    if ((rc = get_matrix(ld, BLK("ffn_gate_shexp.weight"), sff, n_embd, &x->sh_gate)) < 0 ||
        (rc = get_matrix(ld, BLK("ffn_up_shexp.weight"), sff, n_embd, &x->sh_up)) < 0 ||
        (rc = get_matrix(ld, BLK("ffn_down_shexp.weight"), n_embd, sff, &x->sh_down)) < 0 ||
        (rc = get_vector(ld, BLK("ffn_gate_inp_shexp.weight"), n_embd, false, &x->sh_router)) < 0)
        return rc;
#undef BLK
    return 0;
}

/* qwen2vl: <arch>.rope.dimension_sections, 4 integers (llama.cpp writes the
 * reference's mrope_section padded with 0) summing to at most n_rot / 2. */
static int get_rope_sections(struct loader *ld, struct llm_hparams *hp)
{
    char key[96];
    snprintf(key, sizeof key, "%s.rope.dimension_sections", hp->arch_name);
    enum gguf_type et;
    uint64_t n = 0;
    const int32_t *v = gguf_get_arr_data(ld->m->g, key);
    if (gguf_get_arr(ld->m->g, key, &et, &n) < 0 || !v || n != 4 ||
        (et != GGUF_TYPE_INT32 && et != GGUF_TYPE_UINT32))
        return omni_fail(ld->err, ld->errlen, OMNI_ERR_FORMAT, "model: %s: key %s missing or not 4 integers",
                         ld->path, key);
    int64_t sum = 0;
    for (int i = 0; i < 4; i++) {
        int32_t x;
        memcpy(&x, v + i, sizeof x);
        if (x < 0 || x > hp->n_rot)
            return omni_fail(ld->err, ld->errlen, OMNI_ERR_FORMAT, "model: %s: key %s: bad value", ld->path, key);
        hp->rope_sections[i] = x, sum += x;
    }
    if (sum > hp->n_rot / 2)
        return omni_fail(ld->err, ld->errlen, OMNI_ERR_FORMAT, "model: %s: key %s: %lld pairs, rotary has %d",
                         ld->path, key, (long long)sum, hp->n_rot / 2);
    return 0;
}

/* The rotary position of pair i of token t: M-RoPE's stream for the pair
 * (temporal, height, width sections in turn) when the batch has them. */
static inline int32_t rope_pos(const struct llm_hparams *hp, const struct llm_batch *b, int t, int i)
{
    if (!b->rope_pos)
        return b->pos[t];
    int stream;
    if (hp->rope_interleaved) /* qwen3vl: t h w t h w ..., the tail temporal */
        stream = i % 3 == 1 && i < 3 * hp->rope_sections[1] ? 1 : i % 3 == 2 && i < 3 * hp->rope_sections[2] ? 2 : 0;
    else {
        const int s0 = hp->rope_sections[0], s1 = s0 + hp->rope_sections[1], s2 = s1 + hp->rope_sections[2];
        stream = i < s0 ? 0 : i < s1 ? 1 : i < s2 ? 2 : 0;
    }
    return b->rope_pos[(size_t)stream * b->n_tokens + t];
}

/* Integer hyper-parameter <arch>.key, in [1, 1 << 20] (0 when optional and absent). */
static int get_dim(struct loader *ld, const char *key, bool required, int *out)
{
    char full[128];
    snprintf(full, sizeof full, "%s.%s", ld->m->hp.arch_name, key);
    uint32_t v = 0;
    int rc = gguf_get_u32(ld->m->g, full, &v);
    if (rc == OMNI_ERR_NOTFOUND && !required)
        return 0;
    if (rc == OMNI_ERR_NOTFOUND)
        return omni_fail(ld->err, ld->errlen, OMNI_ERR_FORMAT, "model: %s: key %s missing",
                         ld->path, full);
    if (rc < 0 || v == 0 || v > (1u << 20))
        return omni_fail(ld->err, ld->errlen, OMNI_ERR_FORMAT,
                         "model: %s: key %s: bad value (need an integer in 1..%u)", ld->path, full,
                         1u << 20);
    *out = (int)v;
    return 0;
}

static int get_float(struct loader *ld, const char *key, float *out)
{
    char full[128];
    snprintf(full, sizeof full, "%s.%s", ld->m->hp.arch_name, key);
    float v;
    int rc = gguf_get_f32(ld->m->g, full, &v);
    if (rc == OMNI_ERR_NOTFOUND)
        return 0; /* keep the default */
    if (rc < 0 || !isfinite(v) || v <= 0)
        return omni_fail(ld->err, ld->errlen, OMNI_ERR_FORMAT,
                         "model: %s: key %s: bad value (need a positive float)", ld->path, full);
    *out = v;
    return 0;
}

/* lfm2: attention.head_count_kv is an array with one entry per layer, 0 for
 * the short-convolution layers and the kv heads of the attention ones (all
 * equal); shortconv.l_cache is the kernel length. */
static int load_conv_layers(struct loader *ld)
{
    struct llm_model *m = ld->m;
    struct llm_hparams *hp = &m->hp;
    char key[96];
    snprintf(key, sizeof key, "%s.attention.head_count_kv", hp->arch_name);
    enum gguf_type et;
    uint64_t count = 0;
    const uint32_t *kv = gguf_get_arr(m->g, key, &et, &count) == 0 &&
                                 (et == GGUF_TYPE_UINT32 || et == GGUF_TYPE_INT32)
                             ? gguf_get_arr_data(m->g, key)
                             : NULL;
    if (!kv || count != (uint64_t)hp->n_layer)
        return omni_fail(ld->err, ld->errlen, OMNI_ERR_FORMAT,
                         "model: %s: key %s: need an array of %d integers (0 marks a "
                         "short-convolution layer)", ld->path, key, hp->n_layer);
    m->conv_layer = calloc((size_t)hp->n_layer, sizeof *m->conv_layer);
    if (!m->conv_layer)
        return omni_fail(ld->err, ld->errlen, OMNI_ERR_NOMEM, "model: %s: out of memory", ld->path);
    for (int l = 0; l < hp->n_layer; l++) {
        uint32_t v;
        memcpy(&v, &kv[l], sizeof v);
        if (v && hp->n_head_kv && v != (uint32_t)hp->n_head_kv)
            return omni_fail(ld->err, ld->errlen, OMNI_ERR_UNSUPPORTED,
                             "model: %s: key %s: layers with %d and %u kv heads", ld->path, key,
                             hp->n_head_kv, v);
        if (v > (1u << 20))
            return omni_fail(ld->err, ld->errlen, OMNI_ERR_FORMAT, "model: %s: key %s: bad value",
                             ld->path, key);
        if (v)
            hp->n_head_kv = (int)v;
        m->conv_layer[l] = !v;
        hp->n_conv_layer += !v;
    }
    int rc = get_dim(ld, "shortconv.l_cache", true, &hp->conv_l_cache);
    if (rc < 0)
        return rc;
    if (hp->conv_l_cache < 2 || hp->conv_l_cache > 64)
        return omni_fail(ld->err, ld->errlen, OMNI_ERR_UNSUPPORTED,
                         "model: %s: shortconv.l_cache %d not in 2..64", ld->path, hp->conv_l_cache);
    return 0;
}

/* qwen3next / qwen35: the Gated DeltaNet sizes (ssm.*) and which layers
 * are recurrent: attention.recurrent_layers (one flag per layer), else all
 * but every full_attention_interval-th (default 4), as llama.cpp reads
 * them. Multi-token-prediction blocks (nextn_predict_layers, counted in
 * block_count after the trunk) are not run. */
static int load_gdn_layers(struct loader *ld)
{
    struct llm_model *m = ld->m;
    struct llm_hparams *hp = &m->hp;
    int inner = 0, interval = 4, nextn = 0, rc;
    if ((rc = get_dim(ld, "ssm.conv_kernel", true, &hp->gdn_kernel)) < 0 ||
        (rc = get_dim(ld, "ssm.state_size", true, &hp->gdn_head_k)) < 0 ||
        (rc = get_dim(ld, "ssm.group_count", true, &hp->gdn_n_k_heads)) < 0 ||
        (rc = get_dim(ld, "ssm.time_step_rank", true, &hp->gdn_n_v_heads)) < 0 ||
        (rc = get_dim(ld, "ssm.inner_size", true, &inner)) < 0 ||
        (rc = get_dim(ld, "full_attention_interval", false, &interval)) < 0 ||
        (rc = get_dim(ld, "nextn_predict_layers", false, &nextn)) < 0)
        return rc;
    if (inner % hp->gdn_n_v_heads || hp->gdn_n_v_heads % hp->gdn_n_k_heads ||
        hp->gdn_kernel > 64 || inner / hp->gdn_n_v_heads > 1024 || hp->gdn_head_k > 1024 ||
        nextn >= hp->n_layer)
        return omni_fail(ld->err, ld->errlen, OMNI_ERR_UNSUPPORTED,
                         "model: %s: ssm.inner_size %d, %d value heads, %d key heads of %d, conv "
                         "kernel %d, %d of %d blocks for next-token prediction: need the inner size "
                         "a multiple of the value heads, those a multiple of the key heads, heads "
                         "of at most 1024, a kernel of at most 64, a trunk", ld->path, inner,
                         hp->gdn_n_v_heads, hp->gdn_n_k_heads, hp->gdn_head_k, hp->gdn_kernel,
                         nextn, hp->n_layer);
    hp->gdn_head_v = inner / hp->gdn_n_v_heads;
    const int n_all = hp->n_layer;
    hp->n_layer -= nextn;
    m->conv_layer = calloc((size_t)hp->n_layer, sizeof *m->conv_layer);
    if (!m->conv_layer)
        return omni_fail(ld->err, ld->errlen, OMNI_ERR_NOMEM, "model: %s: out of memory", ld->path);
    char key[96];
    snprintf(key, sizeof key, "%s.attention.recurrent_layers", hp->arch_name);
    enum gguf_type et;
    uint64_t count = 0;
    if (gguf_get_arr(m->g, key, &et, &count) == 0) {
        const unsigned char *d = gguf_get_arr_data(m->g, key);
        const size_t es = et == GGUF_TYPE_BOOL || et == GGUF_TYPE_UINT8 || et == GGUF_TYPE_INT8 ? 1
                          : et == GGUF_TYPE_UINT32 || et == GGUF_TYPE_INT32            ? 4
                                                                                       : 0;
        if (!d || !es || (count != (uint64_t)n_all && count != (uint64_t)hp->n_layer))
            return omni_fail(ld->err, ld->errlen, OMNI_ERR_FORMAT,
                             "model: %s: key %s: need an array of %d flags", ld->path, key, n_all);
        for (int l = 0; l < hp->n_layer; l++) {
            uint32_t v = 0;
            memcpy(&v, d + (size_t)l * es, es);
            m->conv_layer[l] = v != 0;
        }
    } else {
        for (int l = 0; l < hp->n_layer; l++)
            m->conv_layer[l] = (l + 1) % interval != 0;
    }
    for (int l = 0; l < hp->n_layer; l++)
        hp->n_gdn_layer += m->conv_layer[l];
    return 0;
}

static struct gdn_params gdn_params_of(const struct llm_hparams *hp, bool tiled)
{
    return (struct gdn_params){ .n_embd = hp->n_embd, .n_k_heads = hp->gdn_n_k_heads,
                                .n_v_heads = hp->gdn_n_v_heads, .head_k = hp->gdn_head_k,
                                .head_v = hp->gdn_head_v, .kernel = hp->gdn_kernel,
                                .tiled = tiled, .norm_eps = hp->norm_eps };
}

/* One Gated DeltaNet layer: fused q/k/v and z projections (attn_qkv and
 * attn_gate, or one ssm_in in older Qwen3-Next files), b and a (one ssm_ba,
 * or ssm_beta and ssm_alpha), the conv kernel (F32), dt bias, A (=
 * -exp(A_log)), the gated norm and the output projection. */
static int load_gdn(struct loader *ld, int l, struct llm_layer *L, size_t state_off)
{
    const struct llm_hparams *hp = &ld->m->hp;
    const int64_t n_embd = hp->n_embd, nv = hp->gdn_n_v_heads;
    const int64_t vd = nv * hp->gdn_head_v, C = 2 * (int64_t)hp->gdn_n_k_heads * hp->gdn_head_k + vd;
    struct gdn_layer *G = &L->gdn;
    char name[64];
    const struct gguf_tensor *t;
    int rc;
#define BLK(suffix) (snprintf(name, sizeof name, "blk.%d." suffix, l), name)
    if (gguf_find_tensor(ld->m->g, BLK("ssm_in.weight")))
        rc = get_matrix(ld, name, C + vd, n_embd, &G->qkvz);
    else if ((rc = get_matrix(ld, BLK("attn_qkv.weight"), C, n_embd, &G->qkv)) >= 0)
        rc = get_matrix(ld, BLK("attn_gate.weight"), vd, n_embd, &G->gate);
    if (rc < 0 ||
        (rc = get_matrix(ld, BLK("ssm_out.weight"), n_embd, vd, &G->out)) < 0 ||
        (rc = get_vector(ld, BLK("ssm_dt.bias"), nv, true, &G->dt_bias)) < 0 ||
        (rc = get_vector(ld, BLK("ssm_a"), nv, true, &G->a)) < 0 ||
        (rc = get_vector(ld, BLK("ssm_norm.weight"), hp->gdn_head_v, true, &G->norm)) < 0)
        return rc;
    if (gguf_find_tensor(ld->m->g, BLK("ssm_ba.weight")))
        rc = get_matrix(ld, name, 2 * nv, n_embd, &G->ba);
    else if ((rc = get_matrix(ld, BLK("ssm_beta.weight"), nv, n_embd, &G->beta)) >= 0)
        rc = get_matrix(ld, BLK("ssm_alpha.weight"), nv, n_embd, &G->alpha);
    if (rc < 0 || (rc = get_tensor(ld, BLK("ssm_conv1d.weight"), 2, C, hp->gdn_kernel, true, &t)) < 0)
        return rc;
    if (t->type != GGML_TYPE_F32 || (uintptr_t)t->data % sizeof(float))
        return omni_fail(ld->err, ld->errlen, OMNI_ERR_UNSUPPORTED,
                         "model: %s: tensor '%s': type %s, need f32 (4-byte aligned)", ld->path,
                         name, ggml_type_name(t->type));
#undef BLK
    G->conv_w = t->data;
    G->state_off = state_off;
    return 0;
}

static int load_hparams(struct loader *ld)
{
    struct llm_model *m = ld->m;
    struct llm_hparams *hp = &m->hp;
    size_t len = 0;
    const char *arch = gguf_get_str(m->g, "general.architecture", &len);
    if (!arch)
        return omni_fail(ld->err, ld->errlen, OMNI_ERR_FORMAT,
                         "model: %s: key general.architecture missing", ld->path);
    int a = -1;
    for (int i = 0; i < N_FAMILIES; i++)
        if (strlen(families[i].name) == len && memcmp(arch, families[i].name, len) == 0)
            a = i;
    if (a < 0)
        return omni_fail(ld->err, ld->errlen, OMNI_ERR_UNSUPPORTED,
                         "model: %s: general.architecture '%.*s' not supported (llama, qwen2, "
                         "qwen2vl, qwen3, qwen3moe, gemma2, gemma3, phi3, smollm3, lfm2, gpt-oss, qwen3next, "
                         "qwen35, qwen35moe, qwen3vl, qwen3vlmoe)", ld->path, (int)(len < 64 ? len : 64), arch);
    hp->arch = (enum llm_arch)a;
    m->fam = &families[a];
    snprintf(hp->arch_name, sizeof hp->arch_name, "%s", m->fam->name);

    int rc;
    if ((rc = get_dim(ld, "context_length", true, &hp->n_ctx_train)) < 0 ||
        (rc = get_dim(ld, "embedding_length", true, &hp->n_embd)) < 0 ||
        (rc = get_dim(ld, "block_count", true, &hp->n_layer)) < 0 ||
        /* Qwen3.5-MoE files have no dense width: experts only */
        (rc = get_dim(ld, "feed_forward_length", !m->fam->moe, &hp->n_ff)) < 0 ||
        (rc = get_dim(ld, "attention.head_count", true, &hp->n_head)) < 0 ||
        (!m->fam->short_conv &&
         (rc = get_dim(ld, "attention.head_count_kv", false, &hp->n_head_kv)) < 0) ||
        (rc = get_dim(ld, "attention.key_length", false, &hp->head_dim)) < 0)
        return rc;
    if (m->fam->short_conv && (rc = load_conv_layers(ld)) < 0)
        return rc;
    if (m->fam->gdn && (rc = load_gdn_layers(ld)) < 0)
        return rc;
    if (!hp->n_head_kv)
        hp->n_head_kv = hp->n_head;
    if (!hp->head_dim)
        hp->head_dim = hp->n_embd / hp->n_head;
    int v_dim = 0, rope_dim = 0;
    if ((rc = get_dim(ld, "attention.value_length", false, &v_dim)) < 0 ||
        (rc = get_dim(ld, "rope.dimension_count", false, &rope_dim)) < 0)
        return rc;
    /* partial rotary (rope.dimension_count < head_dim) only where the family has it */
    hp->n_rot = rope_dim ? rope_dim : hp->head_dim;
    /* Gemma 3's image tokens attend to each other both ways (transformers'
     * token_type_ids mask; llama.cpp decodes an image non-causally) */
    hp->embd_bidirectional = hp->arch == LLM_ARCH_GEMMA3;
    const bool qwen3vl = hp->arch == LLM_ARCH_QWEN3VL || hp->arch == LLM_ARCH_QWEN3VLMOE;
    if ((hp->arch == LLM_ARCH_QWEN2VL || qwen3vl) && (rc = get_rope_sections(ld, hp)) < 0)
        return rc;
    hp->rope_interleaved = qwen3vl;
    if (qwen3vl && (rc = get_dim(ld, "n_deepstack_layers", false, &hp->n_deepstack)) < 0)
        return rc;
    /* more DeepStack parts than layers (a cut model): the extra parts are carried, never added */
    if (hp->n_deepstack > 64)
        return omni_fail(ld->err, ld->errlen, OMNI_ERR_FORMAT, "model: %s: %d DeepStack layers",
                         ld->path, hp->n_deepstack);
    const bool partial_ok = hp->arch == LLM_ARCH_PHI3 || m->fam->gdn;
    if (hp->n_head % hp->n_head_kv || hp->head_dim < 2 || hp->head_dim % 2 ||
        (int64_t)hp->n_head * hp->head_dim > (1 << 20) ||
        (v_dim && v_dim != hp->head_dim) || hp->n_rot % 2 || hp->n_rot > hp->head_dim ||
        (!partial_ok && hp->n_rot != hp->head_dim))
        return omni_fail(ld->err, ld->errlen, OMNI_ERR_UNSUPPORTED,
                         "model: %s: heads %d/%d, head_dim %d, value_length %d, rope dims %d: "
                         "need n_head a multiple of n_head_kv, an even head_dim, even rotary "
                         "dims (all of head_dim except for phi3) and n_head * head_dim <= 2^20",
                         ld->path, hp->n_head, hp->n_head_kv, hp->head_dim, v_dim, hp->n_rot);

    hp->norm_eps = 1e-5f;
    hp->rope_theta = 10000.0f;
    hp->rope_factor = 1.0f;
    hp->rope_low_freq_factor = 1.0f;
    hp->rope_high_freq_factor = 4.0f;
    if ((rc = get_float(ld, "attention.layer_norm_rms_epsilon", &hp->norm_eps)) < 0 ||
        (rc = get_float(ld, "rope.freq_base", &hp->rope_theta)) < 0 ||
        (rc = get_float(ld, "rope.scaling.factor", &hp->rope_factor)) < 0 ||
        (rc = get_float(ld, "rope.scaling.low_freq_factor", &hp->rope_low_freq_factor)) < 0 ||
        (rc = get_float(ld, "rope.scaling.high_freq_factor", &hp->rope_high_freq_factor)) < 0 ||
        (rc = get_dim(ld, "rope.scaling.original_context_length", false, &hp->rope_orig_ctx)) < 0)
        return rc;

    /* sliding window, query scale, soft-capping (gemma), LongRoPE (phi3) */
    hp->rope_theta_swa = m->fam->rope_theta_swa ? m->fam->rope_theta_swa : hp->rope_theta;
    hp->attn_scale = 1.0f / sqrtf((float)hp->head_dim);
    if (m->fam->layers_27b && hp->n_layer == m->fam->layers_27b)
        hp->attn_scale = 1.0f / sqrtf((float)(hp->n_embd / hp->n_head)); /* as llama.cpp */
    hp->rope_attn_factor = 1.0f;
    if ((rc = get_float(ld, "rope.freq_base_swa", &hp->rope_theta_swa)) < 0 ||
        (rc = get_float(ld, "attention.scale", &hp->attn_scale)) < 0 ||
        (rc = get_float(ld, "attn_logit_softcapping", &hp->attn_softcap)) < 0 ||
        (rc = get_float(ld, "final_logit_softcapping", &hp->final_softcap)) < 0 ||
        (rc = get_float(ld, "rope.scaling.attn_factor", &hp->rope_attn_factor)) < 0)
        return rc;
    if (m->fam->swa_period) {
        char swa_key[96];
        snprintf(swa_key, sizeof swa_key, "%s.attention.sliding_window", hp->arch_name);
        uint32_t w = 0;
        rc = gguf_get_u32(m->g, swa_key, &w);
        if (rc < 0 && rc != OMNI_ERR_NOTFOUND)
            return omni_fail(ld->err, ld->errlen, OMNI_ERR_FORMAT,
                             "model: %s: key %s: bad value (need an integer)", ld->path, swa_key);
        /* a window as long as the context changes nothing: leave it off */
        hp->n_swa = w < (uint32_t)hp->n_ctx_train ? (int)w : 0;
    }

    hp->nope_period = m->fam->nope_period;
    if (m->fam->moe) {
        if ((rc = get_dim(ld, "expert_count", true, &hp->n_expert)) < 0 ||
            (rc = get_dim(ld, "expert_used_count", true, &hp->n_expert_used)) < 0 ||
            (rc = get_dim(ld, "expert_feed_forward_length", true, &hp->n_ff_exp)) < 0 ||
            (rc = get_dim(ld, "expert_shared_feed_forward_length", false, &hp->n_ff_shexp)) < 0)
            return rc;
        if (!hp->n_ff)
            hp->n_ff = hp->n_ff_exp;
        if (hp->n_expert_used > hp->n_expert || hp->n_expert > 4096 || hp->n_expert_used > 64)
            return omni_fail(ld->err, ld->errlen, OMNI_ERR_UNSUPPORTED,
                             "model: %s: %d of %d experts per token: need at most 64 of at most "
                             "4096 and no more used than there are", ld->path,
                             hp->n_expert_used, hp->n_expert);
        /* llama.cpp's qwen3moe always renormalises the top-k weights; the
         * converter states norm_topk_prob in expert_weights_norm */
        hp->expert_weights_norm = true;
        char nkey[96];
        snprintf(nkey, sizeof nkey, "%s.expert_weights_norm", hp->arch_name);
        bool norm;
        rc = gguf_get_bool(m->g, nkey, &norm);
        if (rc == 0)
            hp->expert_weights_norm = norm;
        else if (rc != OMNI_ERR_NOTFOUND)
            return omni_fail(ld->err, ld->errlen, OMNI_ERR_FORMAT,
                             "model: %s: key %s: bad value (need a bool)", ld->path, nkey);
    }

    char key[96];
    snprintf(key, sizeof key, "%s.rope.scaling.type", hp->arch_name);
    const char *scaling = gguf_get_str(m->g, key, &len);
    if (!scaling || (len == 4 && !memcmp(scaling, "none", 4))) {
        hp->rope_factor = 1.0f;
    } else if (len == 6 && !memcmp(scaling, "llama3", 6)) {
        hp->rope_scaling_llama3 = true;
        if (!hp->rope_orig_ctx || hp->rope_high_freq_factor <= hp->rope_low_freq_factor)
            return omni_fail(ld->err, ld->errlen, OMNI_ERR_FORMAT,
                             "model: %s: llama3 rope scaling needs "
                             "rope.scaling.original_context_length and high_freq_factor > "
                             "low_freq_factor", ld->path);
    } else if (len == 4 && !memcmp(scaling, "yarn", 4)) {
        hp->rope_yarn = true;
        hp->yarn_beta_fast = 32.0f; /* llama.cpp's defaults, gpt-oss's values */
        hp->yarn_beta_slow = 1.0f;
        hp->rope_attn_factor = rope_yarn_mscale(hp->rope_factor);
        if ((rc = get_float(ld, "rope.scaling.yarn_beta_fast", &hp->yarn_beta_fast)) < 0 ||
            (rc = get_float(ld, "rope.scaling.yarn_beta_slow", &hp->yarn_beta_slow)) < 0 ||
            (rc = get_float(ld, "rope.scaling.yarn_attn_factor", &hp->rope_attn_factor)) < 0)
            return rc;
        if (!hp->rope_orig_ctx || hp->rope_factor < 1.0f)
            return omni_fail(ld->err, ld->errlen, OMNI_ERR_FORMAT,
                             "model: %s: yarn rope scaling needs "
                             "rope.scaling.original_context_length and a factor >= 1", ld->path);
    } else if (!(len == 6 && !memcmp(scaling, "linear", 6))) {
        return omni_fail(ld->err, ld->errlen, OMNI_ERR_UNSUPPORTED,
                         "model: %s: %s '%.*s' not supported (none, linear, llama3, yarn)", ld->path,
                         key, (int)(len < 32 ? len : 32), scaling);
    }
    return 0;
}

/* Angle per position of each rotated pair i: theta^(-2i/d) (d = n_rot),
 * divided by the llama3 factor of that pair (from rope_freqs.weight when the
 * file has it, as llama.cpp's converter writes it, else from the scaling
 * keys), by the LongRoPE factor (phi3: rope_factors_long when the context
 * exceeds the original one, else rope_factors_short) or by the linear factor.
 * Sliding layers with their own base (gemma3 local layers) get a second
 * table with plain rope. */
static int init_rope(struct loader *ld)
{
    struct llm_model *m = ld->m;
    struct llm_hparams *hp = &m->hp;
    const int half = hp->n_rot / 2;
    const float *freq_factors = NULL, *f_short = NULL, *f_long = NULL;
    int rc;
    if ((rc = get_vector(ld, "rope_freqs.weight", half, false, &freq_factors)) < 0 ||
        (rc = get_vector(ld, "rope_factors_short.weight", half, false, &f_short)) < 0 ||
        (rc = get_vector(ld, "rope_factors_long.weight", half, false, &f_long)) < 0)
        return rc;
    if (freq_factors)
        hp->rope_scaling_llama3 = true;
    if (f_short || f_long) {
        if (!f_short || !f_long || !hp->rope_orig_ctx)
            return omni_fail(ld->err, ld->errlen, OMNI_ERR_FORMAT,
                             "model: %s: LongRoPE needs rope_factors_short.weight, "
                             "rope_factors_long.weight and rope.scaling.original_context_length",
                             ld->path);
        hp->rope_longrope = true;
        const int n_ctx = ld->n_ctx > 0 ? ld->n_ctx : hp->n_ctx_train;
        hp->rope_long = n_ctx > hp->rope_orig_ctx;
    }
    const bool swa_table = hp->n_swa && hp->rope_theta_swa != hp->rope_theta;
    m->n_rope = swa_table ? 2 : 1;
    m->rope_inv_freq = malloc((size_t)m->n_rope * half * sizeof(float));
    if (!m->rope_inv_freq)
        return omni_fail(ld->err, ld->errlen, OMNI_ERR_NOMEM, "model: %s: out of memory", ld->path);
    if (hp->rope_yarn) /* gpt-oss publishes truncate: false; HF's default rounds */
        rope_yarn_inv_freq(m->rope_inv_freq, hp->n_rot, hp->rope_theta, hp->rope_factor,
                           hp->rope_orig_ctx, hp->yarn_beta_fast, hp->yarn_beta_slow,
                           !m->fam->gptoss);
    for (int i = 0; i < half; i++) {
        double freq = pow(hp->rope_theta, -2.0 * i / hp->n_rot);
        if (hp->rope_yarn) {
            freq = m->rope_inv_freq[i];
        } else if (freq_factors) {
            freq /= freq_factors[i];
        } else if (hp->rope_longrope) {
            freq /= hp->rope_long ? f_long[i] : f_short[i];
        } else if (hp->rope_scaling_llama3) {
            /* wavelengths shorter than orig_ctx / high_freq_factor keep their
             * frequency, longer than orig_ctx / low_freq_factor are slowed by
             * factor, and those between blend the two */
            double wavelen = 2.0 * M_PI / freq;
            double lo = hp->rope_orig_ctx / hp->rope_low_freq_factor;
            double hi = hp->rope_orig_ctx / hp->rope_high_freq_factor;
            if (wavelen > lo) {
                freq /= hp->rope_factor;
            } else if (wavelen >= hi) {
                double smooth = (hp->rope_orig_ctx / wavelen - hp->rope_low_freq_factor) /
                                (hp->rope_high_freq_factor - hp->rope_low_freq_factor);
                freq = (1.0 - smooth) * freq / hp->rope_factor + smooth * freq;
            }
        } else {
            freq /= hp->rope_factor;
        }
        m->rope_inv_freq[i] = (float)freq;
        if (swa_table)
            m->rope_inv_freq[half + i] = (float)pow(hp->rope_theta_swa, -2.0 * i / hp->n_rot);
    }
    return 0;
}

/* lfm2 short-convolution block of layer l: in_proj (B, C, x rows), the
 * depthwise kernel (F32 [n_embd][l_cache]) and out_proj. */
static int load_short_conv(struct loader *ld, int l, struct llm_layer *L)
{
    const struct llm_hparams *hp = &ld->m->hp;
    const int64_t n_embd = hp->n_embd;
    char name[64];
    const struct gguf_tensor *t;
    int rc;
#define BLK(suffix) (snprintf(name, sizeof name, "blk.%d." suffix, l), name)
    if ((rc = get_matrix(ld, BLK("shortconv.in_proj.weight"), 3 * n_embd, n_embd, &L->conv_in)) < 0 ||
        (rc = get_matrix(ld, BLK("shortconv.out_proj.weight"), n_embd, n_embd, &L->conv_out)) < 0 ||
        (rc = get_tensor(ld, BLK("shortconv.conv.weight"), 2, n_embd, hp->conv_l_cache, true, &t)) < 0)
        return rc;
    if (t->type != GGML_TYPE_F32 || (uintptr_t)t->data % sizeof(float))
        return omni_fail(ld->err, ld->errlen, OMNI_ERR_UNSUPPORTED,
                         "model: %s: tensor '%s': type %s, need f32 (4-byte aligned)", ld->path,
                         name, ggml_type_name(t->type));
#undef BLK
    L->conv_w = t->data;
    return 0;
}

static int load_weights(struct loader *ld)
{
    struct llm_model *m = ld->m;
    struct llm_hparams *hp = &m->hp;
    const struct gguf_tensor *emb = gguf_find_tensor(m->g, "token_embd.weight");
    if (!emb || emb->n_dims != 2 || emb->ne[1] < 1 || emb->ne[1] > INT32_MAX)
        return omni_fail(ld->err, ld->errlen, OMNI_ERR_FORMAT,
                         "model: %s: tensor 'token_embd.weight' %s", ld->path,
                         emb ? "is not a [n_embd, n_vocab] matrix" : "missing");
    hp->n_vocab = (int)emb->ne[1];
    const int64_t n_embd = hp->n_embd, n_ff = hp->n_ff;
    const int64_t q_dim = (int64_t)hp->n_head * hp->head_dim;
    const int64_t kv_dim = (int64_t)hp->n_head_kv * hp->head_dim;
    int rc;
    if ((rc = get_matrix(ld, "token_embd.weight", hp->n_vocab, n_embd, &m->tok_embd)) < 0 ||
        (rc = get_vector(ld, m->fam->short_conv ? "token_embd_norm.weight" : "output_norm.weight",
                         n_embd, true, &m->output_norm)) < 0)
        return rc; /* lfm2's final norm is named token_embd_norm (HF embedding_norm) */
    hp->tied_output = !gguf_find_tensor(m->g, "output.weight");
    if (!hp->tied_output) /* only a row of the embeddings is read per token */
        m->decode_bytes -= ggml_row_size(m->tok_embd.type, n_embd) * (size_t)hp->n_vocab;
    if (hp->tied_output)
        m->output = m->tok_embd;
    else if ((rc = get_matrix(ld, "output.weight", hp->n_vocab, n_embd, &m->output)) < 0)
        return rc;

    m->layers = calloc((size_t)hp->n_layer, sizeof *m->layers);
    if (!m->layers)
        return omni_fail(ld->err, ld->errlen, OMNI_ERR_NOMEM, "model: %s: out of memory", ld->path);
    const struct llm_family *f = m->fam;
    int n_conv = 0, n_gdn = 0;
    /* recurrent state per sequence: lfm2's conv inputs, then each Gated DeltaNet layer's */
    m->state_floats = (size_t)hp->n_conv_layer * (size_t)(hp->conv_l_cache - 1) * hp->n_embd;
    const struct gdn_params gp = gdn_params_of(hp, false);
    const size_t gdn_floats = f->gdn ? gdn_state_floats(&gp) : 0;
    const bool biases_required = f->qkv_bias, qk_norm = f->qk_norm, post = f->post_norms;
    for (int l = 0; l < hp->n_layer; l++) {
        struct llm_layer *L = &m->layers[l];
        L->swa = hp->n_swa && f->swa_period && (f->swa_period == 1 || (l + 1) % f->swa_period);
        L->nope = f->nope_period && (l + 1) % f->nope_period == 0;
        char name[64];
#define BLK(suffix) (snprintf(name, sizeof name, "blk.%d." suffix, l), name)
        const bool gdn = f->gdn && m->conv_layer[l];
        const bool conv = !f->gdn && m->conv_layer && m->conv_layer[l];
        L->conv_index = conv ? n_conv++ : -1;
        if (gdn) /* its state after the lfm2 conv layers' (none in these models) */
            rc = load_gdn(ld, l, L, m->state_floats + (size_t)n_gdn++ * gdn_floats);
        else if (conv)
            rc = load_short_conv(ld, l, L);
        else if (f->fused_qkv)
            rc = get_matrix(ld, BLK("attn_qkv.weight"), q_dim + 2 * kv_dim, n_embd, &L->wqkv);
        else if ((rc = get_matrix(ld, BLK("attn_q.weight"), (f->gdn ? 2 : 1) * q_dim, n_embd,
                                  &L->wq)) >= 0 &&
                 (rc = get_matrix(ld, BLK("attn_k.weight"), kv_dim, n_embd, &L->wk)) >= 0)
            rc = get_matrix(ld, BLK("attn_v.weight"), kv_dim, n_embd, &L->wv);
        if (rc < 0)
            return rc;
        if (f->moe)
            rc = load_moe(ld, l, &L->moe);
        else if (f->fused_gate_up)
            rc = get_matrix(ld, BLK("ffn_up.weight"), 2 * n_ff, n_embd, &L->w_up);
        else if ((rc = get_matrix(ld, BLK("ffn_gate.weight"), n_ff, n_embd, &L->w_gate)) >= 0)
            rc = get_matrix(ld, BLK("ffn_up.weight"), n_ff, n_embd, &L->w_up);
        if (rc >= 0 && !f->moe)
            rc = get_matrix(ld, BLK("ffn_down.weight"), n_embd, n_ff, &L->w_down);
        if (rc < 0)
            return rc;
        if ((rc = get_vector(ld, BLK("attn_norm.weight"), n_embd, true, &L->attn_norm)) < 0)
            return rc;
        if (!conv && !gdn &&
            ((rc = get_matrix(ld, BLK("attn_output.weight"), n_embd, q_dim, &L->wo)) < 0 ||
            (rc = get_vector(ld, BLK("attn_q.bias"), q_dim, biases_required, &L->bq)) < 0 ||
            (rc = get_vector(ld, BLK("attn_k.bias"), kv_dim, biases_required, &L->bk)) < 0 ||
            (rc = get_vector(ld, BLK("attn_v.bias"), kv_dim, biases_required, &L->bv)) < 0 ||
            (rc = get_vector(ld, BLK("attn_output.bias"), n_embd, false, &L->bo)) < 0 ||
            (rc = get_vector(ld, BLK("attn_q_norm.weight"), hp->head_dim, qk_norm, &L->q_norm)) < 0 ||
            (rc = get_vector(ld, BLK("attn_k_norm.weight"), hp->head_dim, qk_norm, &L->k_norm)) < 0))
            return rc;
        /* gpt-oss, qwen3next: llama.cpp names the FFN's input norm post_attention_norm */
        if ((f->gptoss || f->gdn) &&
            (rc = get_vector(ld, BLK("post_attention_norm.weight"), n_embd, true, &L->ffn_norm)) < 0)
            return rc;
        if (f->gptoss &&
            (rc = get_vector(ld, BLK("attn_sinks.weight"), hp->n_head, true, &L->attn_sinks)) < 0)
            return rc;
        if ((!f->gptoss && !f->gdn &&
             ((rc = get_vector(ld, BLK("post_attention_norm.weight"), n_embd, post, &L->attn_post_norm)) < 0 ||
              (rc = get_vector(ld, BLK("ffn_norm.weight"), n_embd, true, &L->ffn_norm)) < 0)) ||
            (rc = get_vector(ld, BLK("post_ffw_norm.weight"), n_embd, post, &L->ffn_post_norm)) < 0)
            return rc;
#undef BLK
    }
    m->state_floats += (size_t)n_gdn * gdn_floats;
    return 0;
}

/* The whole file in memory (use_mmap = false). */
static void *read_file(const char *path, size_t *size, char *err, size_t errlen)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        omni_fail(err, errlen, OMNI_ERR_IO, "model: %s: %s", path, strerror(errno));
        return NULL;
    }
    void *buf = NULL;
    long n = -1;
    if (fseek(f, 0, SEEK_END) == 0 && (n = ftell(f)) >= 0 && fseek(f, 0, SEEK_SET) == 0 &&
        (buf = malloc(n ? (size_t)n : 1)) && fread(buf, 1, (size_t)n, f) == (size_t)n) {
        fclose(f);
        *size = (size_t)n;
        return buf;
    }
    omni_fail(err, errlen, buf || n < 0 ? OMNI_ERR_IO : OMNI_ERR_NOMEM, "model: %s: %s", path,
              buf || n < 0 ? "read failed" : "out of memory");
    free(buf);
    fclose(f);
    return NULL;
}

struct llm_model_params llm_model_default_params(void)
{
    return (struct llm_model_params){ .use_mmap = true, .n_ctx = 0 };
}

bool llm_arch_supported(const char *name)
{
    for (int i = 0; name && i < N_FAMILIES; i++)
        if (families[i].name && !strcmp(families[i].name, name))
            return true;
    return false;
}

/* A mapped file's experts into the page tables at load (moe_layer_prefault:
 * no minor fault at each expert's first pick), as llama.cpp's MAP_POPULATE;
 * only when they take at most half of the machine's memory. */
static void prefault_experts(const struct llm_model *m)
{
    uint64_t bytes = 0;
    for (int l = 0; l < m->hp.n_layer; l++)
        bytes += moe_layer_expert_bytes(&m->layers[l].moe);
    const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    if (pages <= 0 || page <= 0 || bytes > (uint64_t)pages * (uint64_t)page / 2)
        return;
    for (int l = 0; l < m->hp.n_layer; l++)
        moe_layer_prefault(&m->layers[l].moe);
}

struct llm_model *llm_model_load(const char *path, const struct llm_model_params *params,
                                 char *err, size_t errlen)
{
    struct llm_model_params p = params ? *params : llm_model_default_params();
    struct llm_model *m = calloc(1, sizeof *m);
    if (!m) {
        omni_fail(err, errlen, OMNI_ERR_NOMEM, "model: %s: out of memory", path);
        return NULL;
    }
    struct loader ld = { m, path, err, errlen, p.n_ctx };
    if (p.use_mmap) {
        m->g = gguf_open(path, err, errlen);
    } else {
        size_t size = 0;
        m->file_buf = read_file(path, &size, err, errlen);
        if (m->file_buf)
            m->g = gguf_open_memory(m->file_buf, size, path, err, errlen);
    }
    if (!m->g || load_hparams(&ld) < 0 || load_weights(&ld) < 0 || init_rope(&ld) < 0)
        goto fail;
    if (m->fam->moe && p.use_mmap)
        prefault_experts(m);
    char tok_err[256] = "";
    m->tok = tokenizer_from_gguf(m->g, tok_err, sizeof tok_err);
    if (!m->tok) {
        omni_fail(err, errlen, OMNI_ERR_FORMAT, "model: %s: %s", path, tok_err);
        goto fail;
    }
    if (tokenizer_n_vocab(m->tok) != m->hp.n_vocab) {
        omni_fail(err, errlen, OMNI_ERR_FORMAT,
                  "model: %s: tokenizer has %d tokens but token_embd.weight has %d rows", path,
                  tokenizer_n_vocab(m->tok), m->hp.n_vocab);
        goto fail;
    }
    return m;
fail:
    llm_model_free(m);
    return NULL;
}

void llm_model_free(struct llm_model *m)
{
    if (!m)
        return;
    tokenizer_free(m->tok);
    free(m->layers);
    free(m->conv_layer);
    free(m->rope_inv_freq);
    gguf_free(m->g);
    free(m->file_buf);
    free(m);
}

const struct llm_hparams *llm_model_hparams(const struct llm_model *m) { return &m->hp; }
const struct tokenizer *llm_model_tokenizer(const struct llm_model *m) { return m->tok; }
const struct gguf *llm_model_gguf(const struct llm_model *m) { return m->g; }
size_t llm_model_weight_bytes(const struct llm_model *m) { return m->weight_bytes; }
size_t llm_model_decode_bytes(const struct llm_model *m) { return m->decode_bytes; }
const float *llm_model_rope_freqs(const struct llm_model *m) { return m->rope_inv_freq; }

// ---- paged KV storage ------------------------------------------------------

size_t llm_kv_slot_bytes(int type, int kv_dim)
{
    if (kv_dim < 1)
        return 0;
    switch (type) {
    case GGML_TYPE_F32: return (size_t)kv_dim * sizeof(float);
    case GGML_TYPE_F16: return (size_t)kv_dim * sizeof(ggml_half);
    case GGML_TYPE_Q8_0:
        return kv_dim % QK8_0 ? 0 : (size_t)(kv_dim / QK8_0) * sizeof(block_q8_0);
    default: return 0;
    }
}

static struct llm_kv *kv_new(const struct llm_model *m, int type, int block_size, int n_blocks,
                             bool storage, char *err, size_t errlen);

struct llm_kv *llm_kv_new(const struct llm_model *m, int type, int block_size, int n_blocks,
                          char *err, size_t errlen)
{
    return kv_new(m, type, block_size, n_blocks, true, err, errlen);
}

struct llm_kv *llm_kv_new_shape(const struct llm_model *m, int type, int block_size,
                                int n_blocks, char *err, size_t errlen)
{
    return kv_new(m, type, block_size, n_blocks, false, err, errlen);
}

static struct llm_kv *kv_new(const struct llm_model *m, int type, int block_size, int n_blocks,
                             bool storage, char *err, size_t errlen)
{
    const struct llm_hparams *hp = &m->hp;
    const int kv_dim = hp->n_head_kv * hp->head_dim;
    if (type != GGML_TYPE_F32 && type != GGML_TYPE_F16 && type != GGML_TYPE_Q8_0) {
        omni_fail(err, errlen, OMNI_ERR_ARG, "kv: type %s not supported (f32, f16, q8_0)",
                  ggml_type_name(type));
        return NULL;
    }
    if (type == GGML_TYPE_Q8_0 && kv_dim % QK8_0) {
        omni_fail(err, errlen, OMNI_ERR_UNSUPPORTED,
                  "kv: q8_0 needs n_head_kv * head_dim (%d x %d = %d) a multiple of %d; "
                  "use f16", hp->n_head_kv, hp->head_dim, kv_dim, QK8_0);
        return NULL;
    }
    size_t bytes;
    if (block_size < 1 || n_blocks < 1 ||
        omni_mul_size((size_t)block_size, (size_t)n_blocks, &bytes) ||
        omni_mul_size(bytes, llm_kv_slot_bytes(type, kv_dim), &bytes)) {
        omni_fail(err, errlen, OMNI_ERR_ARG, "kv: bad size: %d blocks of %d tokens", n_blocks,
                  block_size);
        return NULL;
    }
    struct llm_kv *kv = calloc(1, sizeof *kv);
    if (!kv)
        goto nomem;
    *kv = (struct llm_kv){ .type = type, .block_size = block_size, .n_blocks = n_blocks,
                           .n_layer = hp->n_layer, .kv_dim = kv_dim, .no_storage = !storage };
    kv->k = calloc((size_t)hp->n_layer, sizeof *kv->k);
    kv->v = calloc((size_t)hp->n_layer, sizeof *kv->v);
    if (!kv->k || !kv->v)
        goto nomem;
    for (int l = 0; l < hp->n_layer; l++) {
        if ((m->conv_layer && m->conv_layer[l]) || !storage)
            continue; /* lfm2's conv blocks keep no K/V (their state is below) */
        kv->k[l] = calloc(1, bytes);
        kv->v[l] = calloc(1, bytes);
        if (!kv->k[l] || !kv->v[l])
            goto nomem;
    }
    /* recurrent state: one slot to begin with (llm_kv_set_state_slots) */
    kv->state_floats = llm_model_state_floats(m);
    if (kv->state_floats && llm_kv_set_state_slots(kv, 1) < 0)
        goto nomem;
    return kv;
nomem:
    omni_fail(err, errlen, OMNI_ERR_NOMEM, "kv: out of memory for %d blocks of %d tokens",
              n_blocks, block_size);
    llm_kv_free(kv);
    return NULL;
}

void llm_kv_free(struct llm_kv *kv)
{
    if (!kv)
        return;
    for (int l = 0; l < kv->n_layer; l++) {
        if (kv->k)
            free(kv->k[l]);
        if (kv->v)
            free(kv->v[l]);
    }
    free(kv->k);
    free(kv->v);
    free(kv->state);
    free(kv);
}

int llm_kv_set_state_slots(struct llm_kv *kv, int n)
{
    if (n < 1)
        return OMNI_ERR_ARG;
    if (!kv->state_floats)
        return 0;
    size_t bytes;
    if (omni_mul_size((size_t)n, kv->state_floats * sizeof(float), &bytes))
        return OMNI_ERR_NOMEM;
    float *st = realloc(kv->state, bytes);
    if (!st)
        return OMNI_ERR_NOMEM;
    if (n > kv->n_state_slots)
        memset(st + (size_t)kv->n_state_slots * kv->state_floats, 0,
               (size_t)(n - kv->n_state_slots) * kv->state_floats * sizeof(float));
    kv->state = st;
    kv->n_state_slots = n;
    return 0;
}

void llm_kv_copy_state(struct llm_kv *kv, int dst, int src)
{
    if (kv->state_floats && dst != src && dst >= 0 && src >= 0 && dst < kv->n_state_slots &&
        src < kv->n_state_slots)
        memcpy(kv->state + (size_t)dst * kv->state_floats,
               kv->state + (size_t)src * kv->state_floats, kv->state_floats * sizeof(float));
}

bool llm_model_has_state(const struct llm_model *m) { return m->state_floats > 0; }

size_t llm_model_state_floats(const struct llm_model *m) { return m->state_floats; }

float *llm_kv_state(struct llm_kv *kv, int slot)
{
    return kv->state_floats && slot >= 0 && slot < kv->n_state_slots
               ? kv->state + (size_t)slot * kv->state_floats
               : NULL;
}

// ---- per-run context -------------------------------------------------------

/* Per-thread attention scratch, for the n_rep query heads sharing a kv head. */
struct attn_scratch {
    float *k, *v;      /* [ATTN_CHUNK][head_dim] K/V rows converted from F16 */
    float *score;      /* [n_rep][ATTN_CHUNK] scores, then softmax weights */
    float *acc;        /* [n_rep][head_dim] weighted sum of V */
    float *max, *sum;  /* [n_rep] running softmax max and denominator */
    /* blocked prefill: R = ATTN_QBLOCK x n_rep query rows */
    float *bq, *bacc;  /* [R][head_dim] scaled queries, weighted sums of V */
    float *bs;         /* [R][ATTN_KBLOCK] scores, then softmax weights */
    float *bk, *bv;    /* [ATTN_KBLOCK][head_dim] one chunk of K and V, contiguous */
    float *bmax, *bsum; /* [R] */
};

/* ATTN_QBLOCK tokens or fewer of one sequence at consecutive positions. */
struct attn_block {
    int t0, n;
};

struct llm_ctx {
    const struct llm_model *m;
    struct tpool *tp;
    int max_tokens;
    int n_threads;
    bool batch_invariant;  /* llm_ctx_set_batch_invariant */
    float *x;          /* [max_tokens][n_embd] residual stream */
    float *xn;         /* [max_tokens][n_embd] normed input / projection output */
    float *q;          /* [max_tokens][n_head * head_dim] */
    float *k, *v;      /* [max_tokens][n_head_kv * head_dim] */
    float *att;        /* [max_tokens][n_head * head_dim] attention output */
    float *gate;       /* [max_tokens][n_ff] ([2 n_ff]: gate then up, fused) */
    float *up;         /* [max_tokens][n_ff]: up, then act(gate) * up */
    float *qkv;        /* [max_tokens][q_dim + 2 kv_dim] fused projection (phi3) or NULL */
    float *rope_cos, *rope_sin; /* [n_rope][max_tokens][n_rot / 2] */
    int64_t *slot;     /* [max_tokens] K/V element offset of each token's slot */
    int *attn_tok;     /* [max_tokens] tokens attended one by one */
    struct attn_block *attn_blocks; /* [max_tokens / ATTN_QBLOCK_MIN + 1] */
    struct attn_scratch *scratch; /* [n_threads] */
    float *scratch_mem;
    struct moe_ctx *moe; /* expert scratch (qwen3moe) or NULL */
    float *moe_out;    /* [max_tokens][n_embd] expert output (qwen3moe) or NULL */
    float *conv;       /* [max_tokens][3 n_embd] in_proj (B, C, x), then [max_tokens][n_embd]
                          gated conv output (lfm2) or NULL */
    struct gdn_ctx *gdn;          /* Gated DeltaNet scratch (qwen3next, qwen35) or NULL */
    struct gdn_token *gdn_tok;    /* [max_tokens] each token's state and snapshot */
    float *qg;         /* [max_tokens][2 q_dim] each head's query then output gate (gated
                          attention, fam->gdn) or NULL */
    uint64_t bytes_read; /* llm_ctx_weight_bytes_read */
    llm_forward_fn dev_forward; /* llm_ctx_set_forward: a device forward, or NULL */
    void *dev_impl;
};

static void gdn_matmul_multi(void *arg, const struct omni_tensor *const *w, int n_w,
                             const float *x, int n, float *const *y);

struct llm_ctx *llm_ctx_new(const struct llm_model *m, int max_tokens, struct tpool *tp,
                            char *err, size_t errlen)
{
    const struct llm_hparams *hp = &m->hp;
    if (max_tokens < 1 || max_tokens > (1 << 20)) {
        omni_fail(err, errlen, OMNI_ERR_ARG, "model: max_tokens %d out of range", max_tokens);
        return NULL;
    }
    struct llm_ctx *ctx = calloc(1, sizeof *ctx);
    if (!ctx)
        goto nomem;
    ctx->m = m;
    ctx->tp = tp;
    ctx->max_tokens = max_tokens;
    ctx->n_threads = tp ? tpool_size(tp) : 1;
    const size_t T = (size_t)max_tokens, hd = (size_t)hp->head_dim;
    const size_t q_dim = (size_t)hp->n_head * hd, kv_dim = (size_t)hp->n_head_kv * hd;
    const size_t n_rep = (size_t)(hp->n_head / hp->n_head_kv);
    /* every size below is at most 2^20 tokens x a few 2^20-bounded dims */
    ctx->x = malloc(T * hp->n_embd * sizeof(float));
    ctx->xn = malloc(T * hp->n_embd * sizeof(float));
    ctx->q = malloc(T * q_dim * sizeof(float));
    ctx->k = malloc(T * kv_dim * sizeof(float));
    ctx->v = malloc(T * kv_dim * sizeof(float));
    ctx->att = malloc(T * q_dim * sizeof(float));
    /* the dense FFN's buffers; experts have their own (llm/moe.c) */
    const size_t n_ff = m->fam->moe ? 1 : (size_t)hp->n_ff;
    ctx->gate = malloc(T * n_ff * (m->fam->fused_gate_up ? 2 : 1) * sizeof(float));
    ctx->up = malloc(T * n_ff * sizeof(float));
    if (m->fam->moe) {
        const struct moe_params mp = { .n_embd = hp->n_embd, .n_expert = hp->n_expert,
                                       .n_used = hp->n_expert_used, .n_ff_exp = hp->n_ff_exp,
                                       .n_ff_shexp = hp->n_ff_shexp,
                                       .norm_weights = hp->expert_weights_norm,
                                       .swiglu_limit = m->fam->gptoss ? 7.0f : 0.0f };
        ctx->moe = moe_ctx_new(&mp, max_tokens, err, errlen);
        ctx->moe_out = malloc(T * hp->n_embd * sizeof(float));
        /* the pool: a decoded token's experts in two passes, a prompt's whole experts per thread */
        if (!ctx->moe || moe_ctx_set_pool(ctx->moe, tp, err, errlen) < 0) {
            llm_ctx_free(ctx);
            return NULL;
        }
        if (!ctx->moe_out)
            goto nomem;
    }
    if (hp->n_conv_layer && !(ctx->conv = malloc(T * 4 * (size_t)hp->n_embd * sizeof(float))))
        goto nomem;
    if (m->fam->gdn) {
        struct gdn_params gp = gdn_params_of(hp, hp->arch != LLM_ARCH_QWEN3NEXT);
        for (int l = 0; l < hp->n_layer; l++)
            gp.fused_qkvz |= m->layers[l].gdn.qkvz.data != NULL;
        if (hp->n_gdn_layer && !(ctx->gdn = gdn_ctx_new(&gp, max_tokens, tp, err, errlen))) {
            llm_ctx_free(ctx);
            return NULL;
        }
        if (ctx->gdn)
            gdn_ctx_set_matmul_multi(ctx->gdn, gdn_matmul_multi);
        if (!(ctx->gdn_tok = calloc(T, sizeof *ctx->gdn_tok)) ||
            !(ctx->qg = malloc(T * 2 * q_dim * sizeof(float))))
            goto nomem;
    }
    if (m->fam->fused_qkv && !(ctx->qkv = malloc(T * (q_dim + 2 * kv_dim) * sizeof(float))))
        goto nomem;
    ctx->rope_cos = malloc(m->n_rope * T * (size_t)(hp->n_rot / 2) * sizeof(float));
    ctx->rope_sin = malloc(m->n_rope * T * (size_t)(hp->n_rot / 2) * sizeof(float));
    ctx->slot = malloc(T * sizeof(int64_t));
    ctx->attn_tok = malloc(T * sizeof(int));
    ctx->attn_blocks = malloc((T / ATTN_QBLOCK_MIN + 1) * sizeof *ctx->attn_blocks);
    ctx->scratch = calloc((size_t)ctx->n_threads, sizeof *ctx->scratch);
    const size_t rows = ATTN_QBLOCK * n_rep;
    const size_t per_thread = 2 * ATTN_CHUNK * hd + n_rep * ATTN_CHUNK + n_rep * hd + 2 * n_rep +
                              2 * rows * hd + rows * ATTN_KBLOCK + 2 * ATTN_KBLOCK * hd + 2 * rows;
    ctx->scratch_mem = malloc((size_t)ctx->n_threads * per_thread * sizeof(float));
    if (!ctx->x || !ctx->xn || !ctx->q || !ctx->k || !ctx->v || !ctx->att || !ctx->gate ||
        !ctx->up || !ctx->rope_cos || !ctx->rope_sin || !ctx->slot || !ctx->attn_tok ||
        !ctx->attn_blocks || !ctx->scratch || !ctx->scratch_mem)
        goto nomem;
    for (int t = 0; t < ctx->n_threads; t++) {
        struct attn_scratch *s = &ctx->scratch[t];
        float *p = ctx->scratch_mem + (size_t)t * per_thread;
        s->k = p, p += ATTN_CHUNK * hd;
        s->v = p, p += ATTN_CHUNK * hd;
        s->score = p, p += n_rep * ATTN_CHUNK;
        s->acc = p, p += n_rep * hd;
        s->max = p, p += n_rep;
        s->sum = p, p += n_rep;
        s->bq = p, p += rows * hd;
        s->bacc = p, p += rows * hd;
        s->bs = p, p += rows * ATTN_KBLOCK;
        s->bk = p, p += ATTN_KBLOCK * hd;
        s->bv = p, p += ATTN_KBLOCK * hd;
        s->bmax = p, p += rows;
        s->bsum = p;
    }
    return ctx;
nomem:
    omni_fail(err, errlen, OMNI_ERR_NOMEM, "model: out of memory for %d-token buffers", max_tokens);
    llm_ctx_free(ctx);
    return NULL;
}

void llm_ctx_free(struct llm_ctx *ctx)
{
    if (!ctx)
        return;
    free(ctx->x);
    free(ctx->xn);
    free(ctx->q);
    free(ctx->k);
    free(ctx->v);
    free(ctx->att);
    free(ctx->gate);
    free(ctx->up);
    free(ctx->qkv);
    free(ctx->rope_cos);
    free(ctx->rope_sin);
    free(ctx->slot);
    free(ctx->attn_tok);
    free(ctx->attn_blocks);
    free(ctx->scratch);
    free(ctx->scratch_mem);
    moe_ctx_free(ctx->moe);
    free(ctx->moe_out);
    free(ctx->conv);
    gdn_ctx_free(ctx->gdn);
    free(ctx->gdn_tok);
    free(ctx->qg);
    free(ctx);
}

// ---- attention -------------------------------------------------------------

struct attn_job {
    struct llm_ctx *ctx;
    const struct llm_batch *batch;
    const struct llm_kv *kv;
    const struct llm_seq_view *seqs;
    int layer;
    int group;        /* query heads per work item (n_rep or 1) */
    const int *tok;   /* the tokens attended one by one */
    int64_t n_items;  /* n_tok x n_head / group */
    const struct attn_block *blocks; /* the blocked ones */
    int n_blocks;
    omni_to_float_fn f16_to_float; /* SIMD f16 -> f32 of the CPU level in use */
    omni_to_float_fn q8_0_to_float; /* SIMD q8_0 -> f32 (whole blocks) */
};

/* Values off .. off+n-1 of a Q8_0 slot row into y. A head starts inside a
 * block when head_dim is not a multiple of 32 (kv_dim is); whole blocks go
 * through the SIMD kernel, which gives the same bits as this loop. */
static void q8_0_range(const struct attn_job *job, const block_q8_0 *row, int off, int n,
                       float *y)
{
    if (off % QK8_0 == 0 && n % QK8_0 == 0) {
        job->q8_0_to_float(row + off / QK8_0, y, n);
        return;
    }
    for (int i = 0; i < n; i++) {
        const block_q8_0 *b = &row[(off + i) / QK8_0];
        y[i] = (float)b->qs[(off + i) % QK8_0] * omni_fp16_to_fp32(b->d);
    }
}

/* K or V rows of positions j0 .. j0+n-1 of a sequence as float pointers:
 * straight into F32 storage, or converted from F16 or Q8_0 into buf. */
static void kv_rows(const struct attn_job *job, const void *base, const struct llm_seq_view *sv,
                    int j0, int n, int off, int head_dim, float *buf, const float **rows)
{
    const struct llm_kv *kv = job->kv;
    for (int j = 0; j < n; j++) {
        const int pos = j0 + j;
        const int64_t e = ((int64_t)sv->block_table[pos / kv->block_size] * kv->block_size +
                           pos % kv->block_size) * kv->kv_dim + off;
        if (kv->type == GGML_TYPE_F32) {
            rows[j] = (const float *)base + e;
            continue;
        }
        if (kv->type == GGML_TYPE_F16) {
            job->f16_to_float((const ggml_half *)base + e, buf + (size_t)j * head_dim, head_dim);
        } else {
            /* the slot's row starts at a block boundary (kv_dim % 32 == 0) */
            const int64_t row = e - off;
            q8_0_range(job, (const block_q8_0 *)base + row / QK8_0, off, head_dim,
                       buf + (size_t)j * head_dim);
        }
        rows[j] = buf + (size_t)j * head_dim;
    }
}

/* F16 K or V rows of positions j0 .. j0+n-1 of a sequence, in place: the
 * attention kernels convert them in registers (converting each row into a
 * buffer first cost more than the products: two calls a key and head).
 * Slot by slot through the blocks: one division a call, not two a row. */
static void kv_rows_f16(const struct llm_kv *kv, const void *base, const struct llm_seq_view *sv,
                        int j0, int n, int off, const uint16_t **rows)
{
    const int bs = kv->block_size;
    const int64_t row = kv->kv_dim;
    int b = j0 / bs, slot = j0 % bs;
    const uint16_t *p = (const uint16_t *)base + ((int64_t)sv->block_table[b] * bs + slot) * row + off;
    for (int j = 0; j < n; j++) {
        rows[j] = p;
        p += row;
        if (++slot == bs && j + 1 < n) {
            slot = 0;
            p = (const uint16_t *)base + (int64_t)sv->block_table[++b] * bs * row + off;
        }
    }
}

/* First key position a query at pos sees: 0, or pos - n_swa + 1 in a
 * sliding-window layer (HF and llama.cpp: a key is masked when pos - j >= n_swa). */
static int attn_first_key(const struct attn_job *j, int pos)
{
    const int n_swa = j->ctx->m->hp.n_swa;
    return j->ctx->m->layers[j->layer].swa && pos >= n_swa ? pos - n_swa + 1 : 0;
}

/* Keys token t (at pos) sees: *first .. the returned last. A token inside
 * a bidirectional span also sees the span's later positions, up to s1; a
 * sliding layer's window still masks keys n_swa or more before it, span or
 * not: transformers (5.17) ANDs the window with "causal OR same image", and
 * llama.cpp's window masks the past only (checked against the reference
 * logits: the union with the whole span differs). */
static int attn_keys(const struct attn_job *j, int t, int pos, int *first)
{
    *first = attn_first_key(j, pos);
    const struct llm_batch *b = j->batch;
    return b->span_last && b->span_last[t] > pos ? b->span_last[t] : pos;
}

/* gpt-oss: head h's sink logit joins the softmax denominator as exp(sink -
 * max), max being the running maximum the sums were taken against; it
 * takes probability from every key without adding a value. 0 elsewhere. */
static inline float attn_sink(const struct attn_job *j, int h, float max)
{
    const float *sinks = j->ctx->m->layers[j->layer].attn_sinks;
    return sinks ? expf(sinks[h] - max) : 0.0f;
}

/* Work item = (token, run of `group` query heads sharing one kv head): scores
 * over positions first..pos of the token's sequence (first = 0, or the
 * window's start), read through its block table, softmax in F32 computed
 * online a chunk at a time (running max and denominator, accumulator
 * rescaled when the max grows). */
static void attn_worker(void *arg, int ith, int nth)
{
    const struct attn_job *j = arg;
    struct llm_ctx *ctx = j->ctx;
    const struct llm_hparams *hp = &ctx->m->hp;
    const struct llm_kv *kv = j->kv;
    struct attn_scratch *s = &ctx->scratch[ith];
    const int hd = hp->head_dim, q_dim = hp->n_head * hd;
    const int n_rep = hp->n_head / hp->n_head_kv, groups_per_token = hp->n_head / j->group;
    const float scale = hp->attn_scale, cap = hp->attn_softcap;
    const float *krows[ATTN_CHUNK], *vrows[ATTN_CHUNK];
    const uint16_t *khrows[ATTN_F16_CHUNK], *vhrows[ATTN_F16_CHUNK];
    const bool f16 = kv->type == GGML_TYPE_F16;
    const struct omni_ops *op = omni_ops();

    for (int64_t item = ith; item < j->n_items; item += nth) {
        const int t = j->tok[item / groups_per_token];
        const int h0 = (int)(item % groups_per_token) * j->group; /* first query head */
        const int kvh = h0 / n_rep;
        const int pos = j->batch->pos[t];
        const struct llm_seq_view *sv = &j->seqs[j->batch->seq[t]];
        const float *q = ctx->q + (size_t)t * q_dim + (size_t)h0 * hd;
        for (int r = 0; r < j->group; r++) {
            s->max[r] = -INFINITY;
            s->sum[r] = 0.0f;
            memset(s->acc + (size_t)r * hd, 0, (size_t)hd * sizeof(float));
        }
        int first;
        const int last = attn_keys(j, t, pos, &first);
        /* F16 without a softcap: the fused kernel, all the group's heads in
         * one pass over each row (ops.h attn_online_f16) */
        for (int j0 = first; f16 && cap <= 0 && j0 <= last; j0 += ATTN_F16_CHUNK) {
            const int n = last + 1 - j0 < ATTN_F16_CHUNK ? last + 1 - j0 : ATTN_F16_CHUNK;
            kv_rows_f16(kv, kv->k[j->layer], sv, j0, n, kvh * hd, khrows);
            kv_rows_f16(kv, kv->v[j->layer], sv, j0, n, kvh * hd, vhrows);
            op->attn_online_f16(s->acc, s->max, s->sum, q, j->group, khrows, vhrows, n, hd, scale);
        }
        for (int j0 = first; !(f16 && cap <= 0) && j0 <= last; j0 += ATTN_CHUNK) {
            const int n = last + 1 - j0 < ATTN_CHUNK ? last + 1 - j0 : ATTN_CHUNK;
            if (f16) {
                kv_rows_f16(kv, kv->k[j->layer], sv, j0, n, kvh * hd, khrows);
                kv_rows_f16(kv, kv->v[j->layer], sv, j0, n, kvh * hd, vhrows);
            } else {
                kv_rows(j, kv->k[j->layer], sv, j0, n, kvh * hd, hd, s->k, krows);
                kv_rows(j, kv->v[j->layer], sv, j0, n, kvh * hd, hd, s->v, vrows);
            }
            for (int r = 0; r < j->group; r++) {
                float *sc = s->score + (size_t)r * ATTN_CHUNK, *acc = s->acc + (size_t)r * hd;
                float cmax = -INFINITY;
                if (f16)
                    op->attn_scores_f16(sc, q + (size_t)r * hd, khrows, n, hd, scale);
                else
                    op->attn_scores(sc, q + (size_t)r * hd, krows, n, hd, scale);
                if (cap > 0)
                    omni_softcap(sc, n, cap); /* gemma2 */
                for (int i = 0; i < n; i++)
                    cmax = sc[i] > cmax ? sc[i] : cmax;
                if (cmax > s->max[r]) {
                    const float c = expf(s->max[r] - cmax); /* 0 on the first chunk */
                    s->sum[r] *= c;
                    op->scale(acc, c, hd);
                    s->max[r] = cmax;
                }
                for (int i = 0; i < n; i++)
                    sc[i] -= s->max[r];
                op->exp(sc, sc, n);
                for (int i = 0; i < n; i++)
                    s->sum[r] += sc[i];
                if (f16)
                    op->attn_wsum_f16(acc, sc, vhrows, n, hd);
                else
                    op->attn_wsum(acc, sc, vrows, n, hd);
            }
        }
        float *out = ctx->att + (size_t)t * q_dim + (size_t)h0 * hd;
        for (int r = 0; r < j->group; r++) {
            const float den = s->sum[r] + attn_sink(j, h0 + r, s->max[r]);
            for (int d = 0; d < hd; d++)
                out[(size_t)r * hd + d] = s->acc[(size_t)r * hd + d] / den;
        }
    }
}

static void run(struct tpool *tp, tpool_fn fn, void *arg)
{
    if (tp)
        tpool_run(tp, fn, arg);
    else
        fn(arg, 0, 1);
}

/* Rows j0 .. j0+n-1 of K or V (one kv head) as a contiguous [n][head_dim]. */
static void kv_chunk(const struct attn_job *job, const void *base, const struct llm_seq_view *sv, int j0,
                     int n, int off, int hd, float *out)
{
    const float *rows[ATTN_KBLOCK];
    kv_rows(job, base, sv, j0, n, off, hd, out, rows);
    for (int i = 0; i < n; i++)
        if (rows[i] != out + (size_t)i * hd)
            memcpy(out + (size_t)i * hd, rows[i], (size_t)hd * sizeof(float));
}

/* Work item = (block of consecutive tokens of one sequence, kv head): the
 * block's R = tokens x n_rep query rows against ATTN_KBLOCK keys at a time,
 * flash-attention style: S = Q K^T and acc += softmax(S) V as GEMMs, with a
 * running max and denominator per row; keys past a row's own position, and
 * in sliding layers keys before its window, are masked. */
static void attn_block_worker(void *arg, int ith, int nth)
{
    const struct attn_job *j = arg;
    struct llm_ctx *ctx = j->ctx;
    const struct llm_hparams *hp = &ctx->m->hp;
    struct attn_scratch *s = &ctx->scratch[ith];
    const int hd = hp->head_dim, q_dim = hp->n_head * hd, n_rep = hp->n_head / hp->n_head_kv;
    const float scale = hp->attn_scale, cap = hp->attn_softcap;
    const int64_t n_items = (int64_t)j->n_blocks * hp->n_head_kv;
    const struct omni_ops *op = omni_ops();
    for (int64_t item = ith; item < n_items; item += nth) {
        const struct attn_block *b = &j->blocks[item / hp->n_head_kv];
        const int kvh = (int)(item % hp->n_head_kv), rows = b->n * n_rep;
        const int p0 = j->batch->pos[b->t0];
        /* the block's key range: the union of its rows' (spans widen it) */
        int k_first = attn_first_key(j, p0), p_last = p0 + b->n - 1;
        for (int i = 0; j->batch->span_last && i < b->n; i++) {
            int f;
            const int l = attn_keys(j, b->t0 + i, p0 + i, &f);
            k_first = f < k_first ? f : k_first;
            p_last = l > p_last ? l : p_last;
        }
        const struct llm_seq_view *sv = &j->seqs[j->batch->seq[b->t0]];
        /* row i * n_rep + r: token t0 + i, query head kvh * n_rep + r */
        for (int i = 0; i < b->n; i++) {
            const float *q = ctx->q + (size_t)(b->t0 + i) * q_dim + (size_t)kvh * n_rep * hd;
            float *dst = s->bq + (size_t)i * n_rep * hd;
            for (int e = 0; e < n_rep * hd; e++)
                dst[e] = q[e] * scale;
        }
        for (int r = 0; r < rows; r++)
            s->bmax[r] = -INFINITY, s->bsum[r] = 0.0f;
        memset(s->bacc, 0, (size_t)rows * hd * sizeof(float));
        for (int j0 = k_first; j0 <= p_last; j0 += ATTN_KBLOCK) {
            const int nk = p_last + 1 - j0 < ATTN_KBLOCK ? p_last + 1 - j0 : ATTN_KBLOCK;
            kv_chunk(j, j->kv->k[j->layer], sv, j0, nk, kvh * hd, hd, s->bk);
            kv_chunk(j, j->kv->v[j->layer], sv, j0, nk, kvh * hd, hd, s->bv);
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, nk, hd, 1.0f, s->bq, hd, s->bk, hd,
                        0.0f, s->bs, ATTN_KBLOCK);
            for (int r = 0; r < rows; r++) {
                float *sc = s->bs + (size_t)r * ATTN_KBLOCK;
                int row_first;
                const int row_last = attn_keys(j, b->t0 + r / n_rep, p0 + r / n_rep, &row_first);
                const int visible = row_last + 1 - j0; /* keys up to the row's position (span end) */
                const int nv = visible < nk ? visible : nk;
                /* keys [a, nv) of the chunk are in the row's window */
                const int first = row_first - j0, a = first > 0 ? first : 0;
                if (nv <= a) { /* all in this row's future or past its window */
                    memset(sc, 0, (size_t)nk * sizeof(float));
                    continue;
                }
                if (a)
                    memset(sc, 0, (size_t)a * sizeof(float));
                if (cap > 0)
                    omni_softcap(sc + a, nv - a, cap);
                /* SIMD max and exp-and-sum (as scalar loops they were 0.7% of
                 * a Llama-3.2-1B F16 prefill) */
                const float cmax = op->max(sc + a, nv - a);
                if (cmax > s->bmax[r]) {
                    const float c = expf(s->bmax[r] - cmax); /* 0 on the first chunk */
                    s->bsum[r] *= c;
                    op->scale(s->bacc + (size_t)r * hd, c, hd);
                    s->bmax[r] = cmax;
                }
                s->bsum[r] += op->exp_shift_sum(sc + a, nv - a, s->bmax[r]);
                if (nv < nk)
                    memset(sc + nv, 0, (size_t)(nk - nv) * sizeof(float));
            }
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, hd, nk, 1.0f, s->bs, ATTN_KBLOCK, s->bv,
                        hd, 1.0f, s->bacc, hd);
        }
        for (int i = 0; i < b->n; i++) {
            float *out = ctx->att + (size_t)(b->t0 + i) * q_dim + (size_t)kvh * n_rep * hd;
            for (int r = 0; r < n_rep; r++) {
                const int row = i * n_rep + r;
                const float inv = 1.0f / (s->bsum[row] + attn_sink(j, kvh * n_rep + r, s->bmax[row]));
                const float *acc = s->bacc + (size_t)(i * n_rep + r) * hd;
                for (int d = 0; d < hd; d++)
                    out[(size_t)r * hd + d] = acc[d] * inv;
            }
        }
    }
}

/* Split the batch's tokens into blocks of consecutive positions of one
 * sequence (prefill) and the rest (decode steps, short runs), which go token
 * by token; batch-invariant mode keeps every token on its own. */
static void attn_plan(struct llm_ctx *ctx, const struct llm_batch *batch, struct attn_job *job)
{
    int n_tok = 0, n_blocks = 0;
    for (int t = 0; t < batch->n_tokens;) {
        int n = 1;
        while (!ctx->batch_invariant && t + n < batch->n_tokens && n < ATTN_QBLOCK &&
               batch->seq[t + n] == batch->seq[t] && batch->pos[t + n] == batch->pos[t] + n)
            n++;
        if (n >= ATTN_QBLOCK_MIN) {
            ctx->attn_blocks[n_blocks++] = (struct attn_block){ t, n };
        } else {
            for (int i = 0; i < n; i++)
                ctx->attn_tok[n_tok++] = t + i;
        }
        t += n;
    }
    job->tok = ctx->attn_tok;
    job->blocks = ctx->attn_blocks;
    job->n_blocks = n_blocks;
    job->n_items = (int64_t)n_tok * (ctx->m->hp.n_head / job->group);
}

// ---- forward ---------------------------------------------------------------

/* Rows per omni_matmul call in batch-invariant mode: below matmul.c's
 * OMNI_MATMUL_QUANT_MAX (AMX) and BLAS (OMNI_MATMUL_BLAS_MIN) switch points,
 * each output row is one per-row dot-kernel result that no other row of the
 * batch can change. */
#define INVARIANT_ROWS (OMNI_MATMUL_QUANT_MAX - 1)
_Static_assert(INVARIANT_ROWS < OMNI_MATMUL_BLAS_MIN, "invariant rows must stay on the dot path");

/* y = x W^T, uncounted (the experts count their own bytes, llm/moe.h) */
static void matmul_rows(struct llm_ctx *ctx, const struct omni_tensor *w, const float *x,
                        int n, float *y)
{
    if (!ctx->batch_invariant || n <= INVARIANT_ROWS) {
        omni_matmul(ctx->tp, w, x, n, y);
        return;
    }
    for (int r = 0; r < n; r += INVARIANT_ROWS) {
        const int rows = n - r < INVARIANT_ROWS ? n - r : INVARIANT_ROWS;
        omni_matmul(ctx->tp, w, x + (size_t)r * w->ne[0], rows, y + (size_t)r * w->ne[1]);
    }
}

static void matmul(struct llm_ctx *ctx, const struct omni_tensor *w, const float *x,
                   int n, float *y)
{
    ctx->bytes_read += ggml_row_size(w->type, w->ne[0]) * (uint64_t)w->ne[1];
    matmul_rows(ctx, w, x, n, y);
}

/* matmul of n_w weights sharing the input x: one parallel region for a
 * decode step's q/k/v or gate/up (omni_matmul_multi, the same bits) */
static void matmul_multi(struct llm_ctx *ctx, const struct omni_tensor *const *w, int n_w,
                         const float *x, int n, float *const *y)
{
    if (ctx->batch_invariant && n > INVARIANT_ROWS) {
        for (int k = 0; k < n_w; k++)
            matmul(ctx, w[k], x, n, y[k]);
        return;
    }
    for (int k = 0; k < n_w; k++)
        ctx->bytes_read += ggml_row_size(w[k]->type, w[k]->ne[0]) * (uint64_t)w[k]->ne[1];
    omni_matmul_multi(ctx->tp, w, n_w, x, n, y);
}

void llm_ctx_set_forward(struct llm_ctx *ctx, llm_forward_fn fn, void *impl)
{
    ctx->dev_forward = fn;
    ctx->dev_impl = impl;
}

void llm_ctx_set_batch_invariant(struct llm_ctx *ctx, bool on)
{
    ctx->batch_invariant = on;
    if (ctx->moe) /* its pool threads split their products as matmul below does */
        moe_ctx_set_split_rows(ctx->moe, on ? INVARIANT_ROWS : 0);
}

uint64_t llm_ctx_weight_bytes_read(const struct llm_ctx *ctx) { return ctx->bytes_read; }
void llm_ctx_reset_weight_bytes_read(struct llm_ctx *ctx) { ctx->bytes_read = 0; }

/* The Gated DeltaNet products go through matmul above (batch-invariant mode, byte count). */
static void moe_matmul(void *arg, const struct omni_tensor *w, const float *x, int n, float *y)
{
    matmul(arg, w, x, n, y);
}

/* The Gated DeltaNet input projections in one call (matmul_multi: the same bits). */
static void gdn_matmul_multi(void *arg, const struct omni_tensor *const *w, int n_w,
                             const float *x, int n, float *const *y)
{
    matmul_multi(arg, w, n_w, x, n, y);
}

/* The experts' products: batch-invariant mode as matmul; bytes from moe's counter. */
static void expert_matmul(void *arg, const struct omni_tensor *w, const float *x, int n, float *y)
{
    matmul_rows(arg, w, x, n, y);
}

/* One layer's per-token steps, run over the batch's tokens split across the
 * pool (the matmuls between them split rows instead). */
struct token_job {
    struct llm_ctx *ctx;
    const struct llm_batch *batch;
    struct llm_kv *kv;
    const struct llm_layer *L;
    int layer;
    void (*step)(const struct token_job *j, int t);
};

static void token_worker(void *arg, int ith, int nth)
{
    const struct token_job *j = arg;
    const int n = j->batch->n_tokens;
    for (int t = (int)((int64_t)n * ith / nth); t < (int)((int64_t)n * (ith + 1) / nth); t++)
        j->step(j, t);
}

static void for_each_token(struct token_job *j,
                           void (*step)(const struct token_job *j, int t))
{
    j->step = step;
    run(j->batch->n_tokens > 1 ? j->ctx->tp : NULL, token_worker, j);
}

static void attn_norm_step(const struct token_job *j, int t)
{
    const struct llm_hparams *hp = &j->ctx->m->hp;
    const size_t row = (size_t)t * hp->n_embd;
    omni_ops()->rmsnorm(j->ctx->xn + row, j->ctx->x + row, j->L->attn_norm, hp->n_embd, hp->norm_eps);
}

/* q, k, v out of the fused projection (phi3); biases; per-head q/k rmsnorm
 * (qwen3, gemma3); rope (the sliding layers' table where they have their
 * own); k and v into the token's cache slot (F16 storage rounds here, Q8_0
 * quantizes per 32 values). */
static void qkv_step(const struct token_job *j, int t)
{
    struct llm_ctx *ctx = j->ctx;
    const struct llm_model *m = ctx->m;
    const struct llm_hparams *hp = &m->hp;
    const struct llm_layer *L = j->L;
    const int hd = hp->head_dim, q_dim = hp->n_head * hd, kv_dim = hp->n_head_kv * hd;
    float *q = ctx->q + (size_t)t * q_dim, *k = ctx->k + (size_t)t * kv_dim;
    float *v = ctx->v + (size_t)t * kv_dim;
    if (ctx->qkv) { /* rows of attn_qkv: q, then k, then v */
        const float *f = ctx->qkv + (size_t)t * (q_dim + 2 * kv_dim);
        memcpy(q, f, (size_t)q_dim * sizeof(float));
        memcpy(k, f + q_dim, (size_t)kv_dim * sizeof(float));
        memcpy(v, f + q_dim + kv_dim, (size_t)kv_dim * sizeof(float));
    }
    if (ctx->qg) /* gated attention: per head its query rows, then its gate rows */
        for (int h = 0; h < hp->n_head; h++)
            memcpy(q + h * hd, ctx->qg + (size_t)t * 2 * q_dim + (size_t)h * 2 * hd,
                   (size_t)hd * sizeof(float));
    for (int i = 0; L->bq && i < q_dim; i++)
        q[i] += L->bq[i];
    for (int i = 0; L->bk && i < kv_dim; i++)
        k[i] += L->bk[i];
    for (int i = 0; L->bv && i < kv_dim; i++)
        v[i] += L->bv[i];
    const size_t half = (size_t)hp->n_rot / 2;
    const size_t table = (L->swa && m->n_rope > 1) * (size_t)ctx->max_tokens * half;
    const float *c = ctx->rope_cos + table + t * half, *s = ctx->rope_sin + table + t * half;
    const bool neox = m->fam->rope_neox;
    for (int h = 0; h < hp->n_head; h++) {
        if (L->q_norm)
            omni_ops()->rmsnorm(q + h * hd, q + h * hd, L->q_norm, hd, hp->norm_eps);
        if (!L->nope)
            omni_ops()->rope(q + h * hd, c, s, hp->n_rot, neox);
    }
    for (int h = 0; h < hp->n_head_kv; h++) {
        if (L->k_norm)
            omni_ops()->rmsnorm(k + h * hd, k + h * hd, L->k_norm, hd, hp->norm_eps);
        if (!L->nope)
            omni_ops()->rope(k + h * hd, c, s, hp->n_rot, neox);
    }
    const struct llm_kv *kv = j->kv;
    if (kv->type == GGML_TYPE_F32) {
        memcpy((float *)kv->k[j->layer] + ctx->slot[t], k, (size_t)kv_dim * sizeof(float));
        memcpy((float *)kv->v[j->layer] + ctx->slot[t], v, (size_t)kv_dim * sizeof(float));
    } else if (kv->type == GGML_TYPE_F16) {
        /* F16C where there is one (the scalar conversion was 0.6% of an F16 prefill) */
        omni_ops()->f32_to_f16(k, (ggml_half *)kv->k[j->layer] + ctx->slot[t], kv_dim);
        omni_ops()->f32_to_f16(v, (ggml_half *)kv->v[j->layer] + ctx->slot[t], kv_dim);
    } else {
        quantize_row_q8_0_ref(k, (block_q8_0 *)kv->k[j->layer] + ctx->slot[t] / QK8_0, kv_dim);
        quantize_row_q8_0_ref(v, (block_q8_0 *)kv->v[j->layer] + ctx->slot[t] / QK8_0, kv_dim);
    }
}

/* gated attention (qwen3next, qwen35): each head's output times the
 * sigmoid of its gate rows */
static void attn_gate_step(const struct token_job *j, int t)
{
    const struct llm_hparams *hp = &j->ctx->m->hp;
    const int hd = hp->head_dim, q_dim = hp->n_head * hd;
    float *o = j->ctx->att + (size_t)t * q_dim;
    const float *g = j->ctx->qg + (size_t)t * 2 * q_dim;
    for (int h = 0; h < hp->n_head; h++)
        for (int i = 0; i < hd; i++)
            o[h * hd + i] /= 1.0f + expf(-g[(size_t)h * 2 * hd + hd + i]);
}

/* x += attention output projection (+ bias; post-norm first, gemma); then
 * the ffn rmsnorm of x. */
static void attn_residual_ffn_norm_step(const struct token_job *j, int t)
{
    const struct llm_hparams *hp = &j->ctx->m->hp;
    const size_t row = (size_t)t * hp->n_embd;
    float *x = j->ctx->x + row, *o = j->ctx->xn + row;
    if (j->L->attn_post_norm)
        omni_ops()->rmsnorm(o, o, j->L->attn_post_norm, hp->n_embd, hp->norm_eps);
    for (int i = 0; i < hp->n_embd; i++)
        x[i] += o[i] + (j->L->bo ? j->L->bo[i] : 0.0f);
    omni_ops()->rmsnorm(o, x, j->L->ffn_norm, hp->n_embd, hp->norm_eps);
}

/* up = act(gate) * up: SwiGLU, or GeGLU with the tanh GELU (gemma). A fused
 * gate-up projection (phi3) left [gate | up] in one row of ctx->gate. */
static void ffn_act_step(const struct token_job *j, int t)
{
    const struct llm_model *m = j->ctx->m;
    const int n_ff = m->hp.n_ff;
    const bool fused = m->fam->fused_gate_up;
    const float *g = j->ctx->gate + (size_t)t * n_ff * (fused ? 2 : 1);
    float *u = j->ctx->up + (size_t)t * n_ff;
    if (fused)
        memcpy(u, g + n_ff, (size_t)n_ff * sizeof(float));
    if (m->fam->act == LLM_ACT_GELU_TANH)
        omni_geglu_tanh(g, u, n_ff);
    else
        omni_swiglu(g, u, n_ff);
}

/* x += ffn output (post-norm first, gemma) */
static void ffn_residual_step(const struct token_job *j, int t)
{
    const struct llm_hparams *hp = &j->ctx->m->hp;
    float *x = j->ctx->x + (size_t)t * hp->n_embd, *d = j->ctx->xn + (size_t)t * hp->n_embd;
    if (j->L->ffn_post_norm)
        omni_ops()->rmsnorm(d, d, j->L->ffn_post_norm, hp->n_embd, hp->norm_eps);
    for (int i = 0; i < hp->n_embd; i++)
        x[i] += d[i];
}

/* lfm2 short convolution over the batch, token by token in batch order (a
 * sequence's tokens depend on its earlier ones through the state): with
 * B, C, x the three parts of in_proj(xn), y = C * conv(B * x), where conv is
 * the causal depthwise kernel over this input and the last l_cache - 1 of
 * the sequence kept in its state slot (zero at position 0). y goes to the
 * rows after the in_proj block of ctx->conv. */
static void short_conv(struct llm_ctx *ctx, const struct llm_batch *batch, struct llm_kv *kv,
                       const struct llm_layer *L)
{
    const struct llm_hparams *hp = &ctx->m->hp;
    const int d = hp->n_embd, K = hp->conv_l_cache;
    float *y0 = ctx->conv + (size_t)ctx->max_tokens * 3 * d;
    for (int t = 0; t < batch->n_tokens; t++) {
        const float *bcx = ctx->conv + (size_t)t * 3 * d, *B = bcx, *C = bcx + d, *x = bcx + 2 * d;
        const int slot = batch->state_slot ? batch->state_slot[batch->seq[t]] : batch->seq[t];
        float *st = kv->state + (size_t)slot * kv->state_floats +
                    (size_t)L->conv_index * (K - 1) * d; /* [K - 1][d], oldest first */
        if (batch->pos[t] == 0)
            memset(st, 0, (size_t)(K - 1) * d * sizeof(float));
        float *y = y0 + (size_t)t * d;
        for (int c = 0; c < d; c++) {
            const float *w = L->conv_w + (size_t)c * K, bx = B[c] * x[c];
            float acc = w[K - 1] * bx;
            for (int k = 0; k < K - 1; k++)
                acc += w[k] * st[(size_t)k * d + c];
            for (int k = 0; k + 1 < K - 1; k++)
                st[(size_t)k * d + c] = st[(size_t)(k + 1) * d + c];
            st[(size_t)(K - 2) * d + c] = bx;
            y[c] = C[c] * acc;
        }
        if (batch->state_snap && batch->state_snap[t]) /* this layer's part of the snapshot */
            memcpy(batch->state_snap[t] + (size_t)L->conv_index * (K - 1) * d, st,
                   (size_t)(K - 1) * d * sizeof(float));
    }
}

/* Checks everything llm_forward would trust, before anything is written. */
static int check_batch(const struct llm_ctx *ctx, const struct llm_batch *b,
                       const struct llm_kv *kv, const struct llm_seq_view *seqs)
{
    const struct llm_hparams *hp = &ctx->m->hp;
    if (!b || !kv || !seqs || b->n_tokens < 1 || b->n_tokens > ctx->max_tokens ||
        (!b->token && !b->embd) || !b->pos || !b->seq || (b->want_hidden && !b->hidden))
        return OMNI_ERR_ARG;
    if (kv->n_layer != hp->n_layer || kv->kv_dim != hp->n_head_kv * hp->head_dim)
        return OMNI_ERR_ARG;
    for (int i = 0; i < b->n_tokens; i++) {
        if (b->token && (b->token[i] < 0 || b->token[i] >= hp->n_vocab))
            return OMNI_ERR_ARG;
        if (b->pos[i] < 0 || b->seq[i] < 0)
            return OMNI_ERR_ARG;
        /* a bidirectional span holds the token; its keys are in the table */
        const bool span = b->span_last && b->span_last[i] >= 0;
        if (b->span_last && (!b->span_first || (span && (b->span_first[i] < 0 ||
                             b->span_first[i] > b->pos[i] || b->span_last[i] < b->pos[i]))))
            return OMNI_ERR_ARG;
        const struct llm_seq_view *sv = &seqs[b->seq[i]];
        const int last_block = (span ? b->span_last[i] : b->pos[i]) / kv->block_size;
        if (!sv->block_table || last_block >= sv->n_blocks)
            return OMNI_ERR_LIMIT;
        for (int blk = 0; blk <= last_block; blk++)
            if (sv->block_table[blk] < 0 || sv->block_table[blk] >= kv->n_blocks)
                return OMNI_ERR_ARG;
        /* recurrent state: a slot of the right size, and a sequence's tokens
         * in order (each one continues from the previous one's state) */
        if (ctx->m->state_floats) {
            if (kv->state_floats != ctx->m->state_floats ||
                (b->state_slot ? b->state_slot[b->seq[i]] : b->seq[i]) < 0 ||
                (b->state_slot ? b->state_slot[b->seq[i]] : b->seq[i]) >= kv->n_state_slots)
                return OMNI_ERR_ARG;
            for (int j = i - 1; j >= 0; j--)
                if (b->seq[j] == b->seq[i]) {
                    if (b->pos[j] != b->pos[i] - 1)
                        return OMNI_ERR_ARG;
                    break;
                }
        }
    }
    return OMNI_OK;
}

/* DeepStack (qwen3vl): after layer l < n_deepstack, each embedding row's
 * part l + 1 is added to its hidden state (the reference adds the vision
 * tower's intermediate features at the image positions; text rows carry
 * zeros). Called at the top of layer l + 1 (and after the last layer), so
 * every family's layer body, MoE included, stays as it is. */
static void deepstack_add(struct llm_ctx *ctx, const struct llm_batch *batch, int l)
{
    const struct llm_hparams *hp = &ctx->m->hp;
    if (!batch->embd || l >= hp->n_deepstack)
        return;
    const int n_embd = hp->n_embd;
    const size_t stride = (size_t)n_embd * (1 + hp->n_deepstack);
    for (int t = 0; t < batch->n_tokens; t++) {
        float *x = ctx->x + (size_t)t * n_embd;
        const float *d = batch->embd + (size_t)t * stride + (size_t)(l + 1) * n_embd;
        for (int i = 0; i < n_embd; i++)
            x[i] += d[i];
    }
}

int llm_forward(struct llm_ctx *ctx, const struct llm_batch *batch, struct llm_kv *kv,
                const struct llm_seq_view *seqs, float *logits)
{
    int rc = check_batch(ctx, batch, kv, seqs);
    if (rc < 0)
        return rc;
    /* device forwards are causal only, and add no DeepStack rows */
    if (ctx->dev_forward && (batch->span_last || (batch->embd && ctx->m->hp.n_deepstack)))
        return OMNI_ERR_UNSUPPORTED;
    if (ctx->dev_forward)
        return ctx->dev_forward(ctx->dev_impl, batch, kv, seqs, logits);
    if (kv->no_storage) /* llm_kv_new_shape's: the K/V live on a device */
        return OMNI_ERR_ARG;
    const struct llm_model *m = ctx->m;
    const struct llm_hparams *hp = &m->hp;
    const int n = batch->n_tokens, n_embd = hp->n_embd, half = hp->n_rot / 2;
    const int kv_dim = hp->n_head_kv * hp->head_dim;
    const size_t embd_stride = (size_t)n_embd * (1 + hp->n_deepstack);
    struct tpool *tp = ctx->tp;

    /* token embeddings */
    for (int t = 0; t < n; t++) {
        float *x = ctx->x + (size_t)t * n_embd;
        if (batch->token) {
            omni_tensor_get_row(&m->tok_embd, batch->token[t], x);
            /* gemma: token embeddings (not multimodal ones) times sqrt(n_embd) */
            for (int i = 0; m->fam->embd_scale && i < n_embd; i++)
                x[i] *= sqrtf((float)n_embd);
        } else {
            memcpy(x, batch->embd + (size_t)t * embd_stride, (size_t)n_embd * sizeof(float));
        }
    }
    /* rope angles of every table (cos and sin scaled by LongRoPE's attention
     * factor, 1 elsewhere) and K/V slot of every token */
    for (int t = 0; t < n; t++) {
        for (int r = 0; r < m->n_rope; r++) {
            const size_t at = ((size_t)r * ctx->max_tokens + t) * half;
            for (int i = 0; i < half; i++) {
                const float angle = (float)rope_pos(hp, batch, t, i) * m->rope_inv_freq[r * half + i];
                ctx->rope_cos[at + i] = cosf(angle) * hp->rope_attn_factor;
                ctx->rope_sin[at + i] = sinf(angle) * hp->rope_attn_factor;
            }
        }
        const int p = batch->pos[t];
        const int32_t block = seqs[batch->seq[t]].block_table[p / kv->block_size];
        ctx->slot[t] = ((int64_t)block * kv->block_size + p % kv->block_size) * kv_dim;
    }
    /* Attention items of one token and one kv head's query heads share K/V
     * reads; split the heads further when that leaves threads idle (decode). */
    const int n_rep = hp->n_head / hp->n_head_kv;
    const int group = (int64_t)n * hp->n_head_kv >= ctx->n_threads ? n_rep : 1;
    struct attn_job attn = { .ctx = ctx, .batch = batch, .kv = kv, .seqs = seqs, .group = group,
                             .f16_to_float = omni_quant_ops(GGML_TYPE_F16)->to_float,
                             .q8_0_to_float = omni_quant_ops(GGML_TYPE_Q8_0)->to_float };
    attn_plan(ctx, batch, &attn);
    struct token_job tj = { .ctx = ctx, .batch = batch, .kv = kv };
    /* Gated DeltaNet layers: each token's sequence state, snapshot, start */
    for (int t = 0; ctx->gdn && t < n; t++) {
        const int slot = batch->state_slot ? batch->state_slot[batch->seq[t]] : batch->seq[t];
        ctx->gdn_tok[t] = (struct gdn_token){
            .state = kv->state + (size_t)slot * kv->state_floats,
            .snap = batch->state_snap ? batch->state_snap[t] : NULL, .reset = batch->pos[t] == 0 };
    }

    for (int l = 0; l < hp->n_layer; l++) {
        const struct llm_layer *L = &m->layers[l];
        tj.L = L;
        tj.layer = attn.layer = l;
        if (l > 0)
            deepstack_add(ctx, batch, l - 1);

        /* attention rmsnorm */
        for_each_token(&tj, attn_norm_step);

        /* lfm2 short-convolution block instead of attention: in_proj, gated
         * causal conv with the sequence's state, out_proj (+ residual below) */
        if (L->conv_in.data) {
            matmul(ctx, &L->conv_in, ctx->xn, n, ctx->conv);
            short_conv(ctx, batch, kv, L);
            matmul(ctx, &L->conv_out, ctx->conv + (size_t)ctx->max_tokens * 3 * n_embd, n, ctx->xn);
        } else if (L->gdn.out.data) { /* Gated DeltaNet with the sequences' state */
            gdn_forward(ctx->gdn, &L->gdn, ctx->xn, n, ctx->gdn_tok, ctx->xn, moe_matmul, ctx);
        } else if (ctx->qkv) {
            matmul(ctx, &L->wqkv, ctx->xn, n, ctx->qkv);
        } else {
            const struct omni_tensor *w[3] = { &L->wq, &L->wk, &L->wv };
            float *const y[3] = { ctx->qg ? ctx->qg : ctx->q, ctx->k, ctx->v };
            matmul_multi(ctx, w, 3, ctx->xn, n, y);
        }
        if (!L->conv_in.data && !L->gdn.out.data) {
            for_each_token(&tj, qkv_step);

            /* attention through the block tables: blocks of prefill, then single tokens */
            if (attn.n_blocks)
                run(tp, attn_block_worker, &attn);
            if (attn.n_items)
                run(tp, attn_worker, &attn);

            /* (output gate,) output projection */
            if (ctx->qg)
                for_each_token(&tj, attn_gate_step);
            matmul(ctx, &L->wo, ctx->att, n, ctx->xn);
        }
        /* (post-norm) + residual, ffn rmsnorm */
        for_each_token(&tj, attn_residual_ffn_norm_step);

        /* gated ffn (post-norm) + residual: x += down(act(gate(x)) * up(x)),
         * or the sum of the chosen experts' (qwen3moe) */
        if (m->fam->moe) {
            const uint64_t before = moe_ctx_bytes_read(ctx->moe);
            moe_forward(ctx->moe, &L->moe, ctx->xn, n, ctx->moe_out, expert_matmul, ctx);
            ctx->bytes_read += moe_ctx_bytes_read(ctx->moe) - before;
            memcpy(ctx->xn, ctx->moe_out, (size_t)n * n_embd * sizeof(float));
            for_each_token(&tj, ffn_residual_step);
            continue;
        }
        if (m->fam->fused_gate_up) {
            matmul(ctx, &L->w_up, ctx->xn, n, ctx->gate);
        } else {
            const struct omni_tensor *w[2] = { &L->w_gate, &L->w_up };
            float *const y[2] = { ctx->gate, ctx->up };
            matmul_multi(ctx, w, 2, ctx->xn, n, y);
        }
        for_each_token(&tj, ffn_act_step);
        matmul(ctx, &L->w_down, ctx->up, n, ctx->xn);
        for_each_token(&tj, ffn_residual_step);
    }

    deepstack_add(ctx, batch, hp->n_layer - 1);

    /* output rmsnorm of the tokens that want logits, packed in batch order;
     * embedding rows get the same norm into their own output */
    int n_out = 0, n_hid = 0;
    for (int t = 0; t < n; t++) {
        const bool want = batch->want_logits ? batch->want_logits[t] : t == n - 1;
        if (want)
            omni_ops()->rmsnorm(ctx->xn + (size_t)n_out++ * n_embd, ctx->x + (size_t)t * n_embd,
                    m->output_norm, n_embd, hp->norm_eps);
        if (batch->want_hidden && batch->want_hidden[t])
            omni_ops()->rmsnorm(batch->hidden + (size_t)n_hid++ * n_embd, ctx->x + (size_t)t * n_embd,
                    m->output_norm, n_embd, hp->norm_eps);
    }
    /* logits (only for the rows that want them: an embedding row would waste
     * an n_vocab x n_embd product) */
    if (n_out)
        matmul(ctx, &m->output, ctx->xn, n_out, logits);
    if (n_out && hp->final_softcap > 0) /* gemma2 */
        omni_softcap(logits, (int64_t)n_out * hp->n_vocab, hp->final_softcap);
    return n_out;
}
