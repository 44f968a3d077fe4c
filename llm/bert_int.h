/* bert_int.h - the encoder model's insides, shared by bert_load.c (reading
 * the GGUF) and bert.c (tokenizing and the forward pass). Not for other
 * modules: they include llm/bert.h. */
#ifndef OMNI_BERT_INT_H
#define OMNI_BERT_INT_H

#include <pthread.h>

#include "llm/bert.h"
#include "src/core/matmul.h"

struct gguf;
struct tpool;

enum bert_kind {
    BERT_KIND_BERT,   /* learned positions, GELU MLP, biases everywhere */
    BERT_KIND_NOMIC,  /* fused QKV, NEOX rotary positions, SwiGLU, no biases */
    BERT_KIND_JINA,   /* ALiBi, GEGLU, optional q/k layer norms */
};

/* One post-norm encoder layer. Matrices are views into the mapped file;
 * vectors are F32 copies (NULL when the file has none). */
struct bert_layer {
    struct omni_tensor wq, wk, wv;  /* (H, H) each; type -1 when fused */
    struct omni_tensor wqkv;        /* (3H, H) nomic-bert; type -1 otherwise */
    float *bq, *bk, *bv;            /* (H) */
    float *q_norm_w, *q_norm_b;     /* (H) jina-bert-v2, optional */
    float *k_norm_w, *k_norm_b;
    struct omni_tensor wo;          /* (H, H) */
    float *bo;
    float *attn_norm2_w, *attn_norm2_b; /* (H) jina v2 code models: norm of the attention output */
    float *attn_out_norm_w, *attn_out_norm_b; /* (H) after attention + residual */
    struct omni_tensor up, gate, down; /* (F, H), (F, H) or type -1, (H, F) */
    float *b_up, *b_gate, *b_down;
    float *out_norm_w, *out_norm_b; /* (H) after FFN + residual */
};

struct bert_model {
    struct gguf *g;
    struct tokenizer *tok;
    enum bert_kind kind;
    struct bert_info info;
    char arch[24];
    char name[128];
    int n_head, head_dim, n_ff, n_vocab, n_types;
    float eps, rope_base;
    float *alibi_slopes;            /* (n_head) jina */
    struct omni_tensor tok_embd;    /* (n_vocab, H) */
    struct omni_tensor type_embd;   /* (n_types, H), type -1 when absent */
    struct omni_tensor pos_embd;    /* (n_ctx, H) bert only */
    float *embd_norm_w, *embd_norm_b;
    struct bert_layer *layers;
    struct omni_tensor cls, cls_out; /* classifier: dense (+ tanh) then output; type -1 when absent */
    float *cls_b, *cls_out_b;
    int32_t cls_id, sep_id;
    /* Threads: a pool attached to the compute budget; forward passes take
     * turns on it (one tpool_run at a time per pool). */
    struct tpool *tp;
    pthread_mutex_t lock;
    bool lock_init;
};

/* bert_load.c */
void bert_model_free_parts(struct bert_model *m);

#endif
