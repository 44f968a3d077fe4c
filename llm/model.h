/* model.h - decoder-only transformer language models loaded from GGUF.
 *
 * Architectures: llama (Llama 2/3, TinyLlama, SmolLM2, Mistral / Mistral-Nemo /
 * Ministral with head_dim != n_embd / n_head and a sliding window; llama3 rope
 * scaling; tied or untied output), qwen2 (QKV bias), qwen3 (per-head q/k
 * RMSNorm), gemma2 (soft-capping, post-norms, every other layer sliding),
 * gemma3 text (q/k norm, five sliding layers in six with their own rope
 * base), phi3 (Phi-3.5-mini / Phi-4-mini: fused QKV and gate-up, partial
 * rotary, LongRoPE), qwen3moe (qwen3 attention, mixture-of-experts FFN of
 * llm/moe.h in every layer: softmax router, top-k experts, renormalised
 * weights), smollm3 (llama layout, every 4th layer without rotary: NoPE),
 * lfm2 (LiquidAI: gated short-convolution blocks beside attention layers;
 * each sequence keeps its last l_cache - 1 convolution inputs per conv
 * layer as recurrent state in the llm_kv, see llm_kv_set_state_slots),
 * qwen3next / qwen35 / qwen35moe (Qwen3-Next, Qwen3.5: Gated DeltaNet
 * layers of llm/deltanet.h, whose conv and delta-rule state is per-sequence
 * state as lfm2's, beside full-attention layers with a sigmoid output gate,
 * partial rotary and q/k norms; experts with a gated shared expert in
 * qwen3next and qwen35moe).
 * Sliding-window layers keep every position's K/V in the
 * paged cache and mask keys older than the window (prefix caching and
 * preemption need nothing special; memory is that of full attention).
 *
 *   struct llm_model *m = llm_model_load("m.gguf", NULL, err, sizeof err);
 *   struct llm_ctx *ctx = llm_ctx_new(m, 512, tp, err, sizeof err);
 *   struct llm_kv *kv = llm_kv_new(m, GGML_TYPE_F16, 16, n_blocks, err, sizeof err);
 *   int32_t table[] = { 0, 1, 2 };                 // sequence 0 owns blocks 0..2
 *   struct llm_seq_view seq = { table, 3 };
 *   struct llm_batch b = { .n_tokens = n, .token = ids, .pos = pos, .seq = zeros,
 *                          .want_logits = flags };
 *   llm_forward(ctx, &b, kv, &seq, logits);        // logits of flagged tokens
 *
 * The KV storage is paged: it holds n_blocks blocks of block_size token slots;
 * each sequence maps its logical block j (positions j*block_size ..) to a
 * physical block through its block table, and attention reads K/V through that
 * table (no copying). Token i of a batch writes its K/V into the slot of
 * (seq[i], pos[i]) first; then it attends to positions 0..pos[i] of its
 * sequence, which must all be present (earlier steps or this batch).
 *
 * Thread safety: a model is read-only after load and can be shared; a
 * llm_ctx (scratch buffers) and a llm_kv belong to one thread at a time. */
#ifndef OMNI_MODEL_H
#define OMNI_MODEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct gguf;
struct tokenizer;
struct tpool;

enum llm_arch {
    LLM_ARCH_LLAMA, LLM_ARCH_QWEN2, LLM_ARCH_QWEN3, LLM_ARCH_GEMMA2, LLM_ARCH_GEMMA3,
    LLM_ARCH_PHI3, LLM_ARCH_QWEN3MOE, LLM_ARCH_SMOLLM3,
    LLM_ARCH_LFM2, LLM_ARCH_QWEN2VL, LLM_ARCH_GPTOSS,
    LLM_ARCH_QWEN3NEXT, LLM_ARCH_QWEN35, LLM_ARCH_QWEN35MOE,
    LLM_ARCH_QWEN3VL, LLM_ARCH_QWEN3VLMOE,
};

struct llm_hparams {
    enum llm_arch arch;
    char arch_name[32];      /* general.architecture */
    int n_vocab;
    int n_ctx_train;         /* <arch>.context_length */
    int n_embd;              /* hidden size */
    int n_layer;
    int n_head;
    int n_head_kv;
    int head_dim;            /* <arch>.attention.key_length or n_embd / n_head */
    int n_ff;                /* feed-forward hidden size */
    float norm_eps;          /* RMSNorm epsilon */
    float rope_theta;        /* <arch>.rope.freq_base */
    /* llama3-style rope scaling (rope_scaling_llama3 false -> plain rope) */
    bool rope_scaling_llama3;
    float rope_factor, rope_low_freq_factor, rope_high_freq_factor;
    int rope_orig_ctx;
    /* YaRN (rope.scaling.type yarn, gpt-oss): frequencies blended between
     * rope_factor-interpolated and original over the rotation counts
     * yarn_beta_fast..yarn_beta_slow; rope_attn_factor scales cos and sin */
    bool rope_yarn;
    float yarn_beta_fast, yarn_beta_slow;
    bool tied_output;        /* output.weight absent: reuse token_embd */
    int n_rot;               /* rotated dims per head (rope.dimension_count, phi3 partial) */
    int rope_sections[4];    /* qwen2vl M-RoPE (rope.dimension_sections): rotary pairs turned by
                                the temporal, height, width position (the rest: temporal) */
    bool rope_interleaved;   /* qwen3vl: the sections interleave - pair i turns with the height
                                when i % 3 == 1 and i < 3 * sections[1], the width when
                                i % 3 == 2 and i < 3 * sections[2], else the temporal id */
    int n_deepstack;         /* qwen3vl DeepStack (n_deepstack_layers): llm_batch.embd rows
                                carry n_deepstack more n_embd-wide parts, part k added to the
                                hidden state after layer k; 0 none */
    int n_swa;               /* sliding window of the sliding layers (tokens; 0 none) */
    float rope_theta_swa;    /* rope base of the sliding layers (gemma3 local: 10000) */
    float attn_scale;        /* query scale: attention.scale or 1/sqrt(head_dim) */
    float attn_softcap;      /* scores -> cap * tanh(score / cap) (gemma2; 0 none) */
    bool embd_bidirectional; /* multimodal embedding runs (images) attend to each other both
                                ways: llm_batch.span_* (gemma3) */
    float final_softcap;     /* logits -> cap * tanh(logit / cap) (gemma2; 0 none) */
    bool rope_longrope;      /* phi3 LongRoPE: rope_factors_{short,long} */
    bool rope_long;          /* the long factors are in use (n_ctx > rope_orig_ctx) */
    float rope_attn_factor;  /* cos/sin scale (LongRoPE rope.scaling.attn_factor, YaRN's mscale) */
    /* mixture of experts (qwen3moe; 0 experts: dense FFN) */
    int n_expert;            /* <arch>.expert_count */
    int n_expert_used;       /* <arch>.expert_used_count */
    int n_ff_exp;            /* <arch>.expert_feed_forward_length */
    int n_ff_shexp;          /* shared expert width (0: none) */
    bool expert_weights_norm; /* top-k weights renormalised (default true, as llama.cpp) */
    int nope_period;         /* every n-th layer has no rotary (smollm3: 4; 0: none) */
    int conv_l_cache;        /* lfm2 short-convolution kernel (shortconv.l_cache; 0: none) */
    int n_conv_layer;        /* layers that are short-convolution blocks */
    /* Gated DeltaNet layers (qwen3next, qwen35, qwen35moe: llm/deltanet.h):
     * ssm.conv_kernel, ssm.group_count key heads of ssm.state_size,
     * ssm.time_step_rank value heads of ssm.inner_size / that */
    int n_gdn_layer;
    int gdn_kernel, gdn_n_k_heads, gdn_n_v_heads, gdn_head_k, gdn_head_v;
};

struct llm_model_params {
    bool use_mmap;           /* default true */
    /* Context length the model will run with (0: its n_ctx_train). Only
     * LongRoPE (phi3) reads it: the long factors when it exceeds
     * rope.scaling.original_context_length, as llama.cpp chooses. */
    int n_ctx;
};
struct llm_model_params llm_model_default_params(void);

/* Load weights, hyper-parameters and tokenizer. NULL + message naming the file
 * and field on a bad file, unknown architecture or unsupported tensor type. */
/* Can this build run GGUF files of general.architecture name? */
bool llm_arch_supported(const char *name);
struct llm_model *llm_model_load(const char *path, const struct llm_model_params *params,
                                 char *err, size_t errlen);
void llm_model_free(struct llm_model *m);
const struct llm_hparams *llm_model_hparams(const struct llm_model *m);
const struct tokenizer *llm_model_tokenizer(const struct llm_model *m); /* owned by m */
const struct gguf *llm_model_gguf(const struct llm_model *m);           /* owned by m */
/* Bytes of weights, for reports. */
size_t llm_model_weight_bytes(const struct llm_model *m);
/* Bytes of weights one decoded token reads: every matrix it multiplies
 * (the output projection, and token_embd when tied, included; one embedding
 * row is not counted) - with experts, only n_expert_used of n_expert. */
size_t llm_model_decode_bytes(const struct llm_model *m);

/* ---- paged KV storage ---- */
struct llm_kv {
    int type;                /* GGML_TYPE_F32, GGML_TYPE_F16 or GGML_TYPE_Q8_0 */
    int block_size;          /* token slots per block */
    int n_blocks;
    int n_layer;
    int kv_dim;              /* n_head_kv * head_dim values per slot */
    /* Layer l, block b, slot s: element offset ((size_t)b * block_size + s) * kv_dim
     * into k[l] / v[l]. Q8_0 stores each slot's kv_dim values as kv_dim / 32
     * block_q8_0 (src/core/quant.h), so element e lives in block e / 32.
     * NULL for layers without attention (lfm2's short-convolution blocks). */
    void **k, **v;
    bool no_storage;         /* llm_kv_new_shape: every k[l], v[l] NULL */
    /* Per-sequence recurrent state (lfm2: the last conv_l_cache - 1 inputs of
     * every conv layer, [n_conv_layer][conv_l_cache - 1][n_embd] floats;
     * Gated DeltaNet layers: gdn_state_floats each, after those):
     * n_state_slots slots of state_floats floats; a sequence uses the slot
     * llm_batch.state_slot gives it. 0 floats for models without it. */
    int n_state_slots;
    size_t state_floats;
    float *state;
};
/* KV storage types: F32, F16 or Q8_0 (the last needs n_head_kv * head_dim a
 * multiple of 32; a clear error otherwise). */
struct llm_kv *llm_kv_new(const struct llm_model *m, int type, int block_size, int n_blocks,
                          char *err, size_t errlen);
/* The same geometry without K/V storage (k[l], v[l] all NULL): for a device
 * forward (llm/model_dev.h) that keeps the pool in its own memory and only
 * checks the geometry; llm_forward on the CPU refuses it. */
struct llm_kv *llm_kv_new_shape(const struct llm_model *m, int type, int block_size,
                                int n_blocks, char *err, size_t errlen);
/* Recurrent state for n sequences (llm_kv_new makes 1 slot when the model
 * has state); existing slots keep their contents, new ones are zero. 0, or
 * OMNI_ERR_NOMEM / OMNI_ERR_ARG (n < 1). A no-op for stateless models. */
int llm_kv_set_state_slots(struct llm_kv *kv, int n);
/* Copy slot src's state into slot dst (a forked sequence continues from its
 * parent's state). */
void llm_kv_copy_state(struct llm_kv *kv, int dst, int src);
/* Slot `slot`'s state (kv->state_floats floats, writable), or NULL. */
float *llm_kv_state(struct llm_kv *kv, int slot);
/* Floats of one sequence's recurrent state (0: none). */
size_t llm_model_state_floats(const struct llm_model *m);
/* Whether the model keeps per-sequence recurrent state: a prefix of its K/V
 * blocks alone cannot resume a sequence (its state must be restored too:
 * llm_batch.state_snap, llm_kv_state), and the tokens of one sequence must
 * come in order, each batch continuing from the state the previous one
 * left (position 0 starts from zero state). */
bool llm_model_has_state(const struct llm_model *m);

/* Bytes of one token slot of one layer's K (or V): kv_dim values of type.
 * 0 when the type is not a KV type or kv_dim does not fit it. */
size_t llm_kv_slot_bytes(int type, int kv_dim);
void llm_kv_free(struct llm_kv *kv);

/* A sequence's block table: logical block j lives in physical block table[j]. */
struct llm_seq_view {
    const int32_t *block_table;
    int n_blocks;
};

struct llm_batch {
    int n_tokens;
    const int32_t *token;     /* [n_tokens] token ids, or NULL when embd is set */
    const float *embd;        /* [n_tokens][n_embd * (1 + n_deepstack)] input embeddings
                                 (multimodal), or NULL; with DeepStack (qwen3vl) part k + 1 of a
                                 row is added to its hidden state after layer k (zeros for text) */
    const int32_t *pos;       /* [n_tokens] position within the token's sequence */
    const int32_t *seq;       /* [n_tokens] index into the seqs array */
    /* [number of seqs] recurrent state slot of each sequence (models with
     * state, llm_model_has_state), or NULL: sequence i uses slot i */
    const int32_t *state_slot;
    /* [n_tokens] or NULL: where non-NULL, a snapshot of the token's sequence
     * state just after the token (kv->state_floats floats) is written there
     * - the engine keeps one per full KV block, so a cached prefix resumes
     * with exact state (llm_kv_state) */
    float *const *state_snap;
    const bool *want_logits;  /* [n_tokens] or NULL = only the last token */
    /* Embeddings: tokens whose final hidden state (after the output norm) is
     * written to hidden[k][n_embd], k counting flagged tokens in batch order.
     * NULL: none. Rows without want_logits skip the output projection. */
    const bool *want_hidden;
    float *hidden;
    /* qwen2vl / qwen3vl M-RoPE: [3][n_tokens] temporal, height, width rotary positions
     * (images advance them by grid, not by token); NULL = pos for all three */
    const int32_t *rope_pos;
    /* Bidirectional spans (gemma3: the rows of one image see each other both
     * ways): [n_tokens] each, or NULL. Where span_last[t] >= 0, the token's
     * span is span_first[t] <= pos[t] <= span_last[t] and it attends as usual
     * (causal, within the window) and also to the later positions of its
     * span, up to span_last[t] (a sliding window still masks older keys, as
     * the reference does); every position up to span_last[t] must have its
     * K/V (an earlier batch or this one). Not on device forwards. */
    const int32_t *span_first, *span_last;
};

/* Per-run scratch: buffers for up to max_tokens tokens per forward. */
struct llm_ctx *llm_ctx_new(const struct llm_model *m, int max_tokens, struct tpool *tp,
                            char *err, size_t errlen);
void llm_ctx_free(struct llm_ctx *ctx);

/* Batch-invariant mode (engine --deterministic): every matrix product runs
 * the same per-row kernel whatever the batch size, so a token's results do
 * not depend on the other tokens of its batch. Slower for long batches.
 * Default off. */
void llm_ctx_set_batch_invariant(struct llm_ctx *ctx, bool on);

/* Bytes of weight matrices the forwards of ctx multiplied since it was made
 * or reset (each matrix counted once per product; MoE experts only when a
 * token chose them): one decode step reads llm_model_decode_bytes. */
uint64_t llm_ctx_weight_bytes_read(const struct llm_ctx *ctx);
void llm_ctx_reset_weight_bytes_read(struct llm_ctx *ctx);

/* Run the batch. Writes n_vocab logits for each token with want_logits set,
 * in batch order, into logits (caller sized; NULL when no token wants
 * logits), and the hidden states of want_hidden tokens into batch->hidden. Returns the number of logit
 * rows written, or a negative omni_err (batch too large, position beyond a
 * block table, bad token id) with no K/V written for an invalid batch. */
int llm_forward(struct llm_ctx *ctx, const struct llm_batch *batch, struct llm_kv *kv,
                const struct llm_seq_view *seqs, float *logits);

/* A device forward (llm/model_dev.h) for ctx: llm_forward checks the batch,
 * then runs fn(impl, ...) in place of the CPU forward, with the same
 * contract. fn NULL: the CPU forward again. */
typedef int (*llm_forward_fn)(void *impl, const struct llm_batch *batch, struct llm_kv *kv,
                              const struct llm_seq_view *seqs, float *logits);
void llm_ctx_set_forward(struct llm_ctx *ctx, llm_forward_fn fn, void *impl);
/* Rope angle per position of each rotated pair ([n_rot / 2], llama3 / linear
 * scaling applied) of the global layers; owned by m. */
const float *llm_model_rope_freqs(const struct llm_model *m);

#endif
