/* whisper_impl.h - private to audio/whisper*.c: the model and state layouts
 * shared by the loader (whisper.c), the forward passes (whisper_forward.c)
 * and the decoding strategies (whisper_full.c). Not for other modules. */
#ifndef OMNI_WHISPER_IMPL_H
#define OMNI_WHISPER_IMPL_H

#include "audio/whisper.h"
#include "src/core/matmul.h"

struct whisper_batcher;
struct whisper_dev;

#define WHISPER_N_SPECIAL 9

struct whisper_enc_layer {
    const float *attn_ln_w, *attn_ln_b;     /* (n_state) */
    struct omni_tensor attn_q, attn_k, attn_v, attn_out; /* (n_state, n_state) */
    const float *attn_q_b, *attn_v_b, *attn_out_b;       /* (n_state); key has no bias */
    const float *mlp_ln_w, *mlp_ln_b;
    struct omni_tensor mlp_0;               /* (n_state -> 4 n_state) */
    const float *mlp_0_b;                   /* (4 n_state) */
    struct omni_tensor mlp_2;               /* (4 n_state -> n_state) */
    const float *mlp_2_b;
};

struct whisper_dec_layer {
    struct whisper_enc_layer self;          /* attn_ln, attn, mlp_ln, mlp as in the encoder */
    const float *cross_ln_w, *cross_ln_b;
    struct omni_tensor cross_q, cross_k, cross_v, cross_out;
    const float *cross_q_b, *cross_v_b, *cross_out_b;
};

struct whisper_model {
    char path[256];
    struct whisper_hparams hp;
    float *filters;                         /* [n_mels][201] */
    /* vocab: piece i is blob[off[i] .. off[i] + len[i]) for i < n_vocab */
    char *vocab_blob;
    uint32_t *vocab_off, *vocab_len;
    int32_t n_vocab_file;                   /* pieces stored in the file */
    int32_t *piece_index;                   /* open-addressing hash of file pieces -> id, or -1 */
    uint32_t piece_index_mask;
    int32_t special[WHISPER_N_SPECIAL];     /* enum whisper_special_token -> id, or -1 */
    int n_langs;
    int32_t max_piece_len;

    void **blobs;                           /* one aligned allocation per tensor */
    int n_blobs;
    size_t data_bytes;

    /* encoder */
    struct omni_tensor conv1_w;             /* (3 * n_mels -> n_state): kernel [c][i][k] */
    const float *conv1_b;                   /* (n_state) */
    struct omni_tensor conv2_w;             /* (3 * n_state -> n_state) */
    const float *conv2_b;
    const float *enc_pos;                   /* (n_audio_ctx, n_state) */
    struct whisper_enc_layer *enc;          /* n_audio_layer */
    const float *enc_ln_w, *enc_ln_b;       /* ln_post */
    /* decoder */
    struct omni_tensor tok_emb;             /* (n_state -> n_vocab): embeddings and output head */
    const float *dec_pos;                   /* (n_text_ctx, n_state) */
    struct whisper_dec_layer *dec;          /* n_text_layer */
    const float *dec_ln_w, *dec_ln_b;
    /* Cross-attention K/V kept in f16 (as whisper.cpp does) unless the model
     * is f32: half the memory per state and per decoder step. */
    bool cross_f16;
};

/* Scratch memory of forward passes and the pool they run on: a standalone
 * state's own, or a batcher's, shared by every state it serves. Grown on
 * demand to the windows and rows of a pass. */
struct whisper_work {
    const struct whisper_model *m;
    struct whisper_dev *dev;                /* passes on a backend (whisper_dev.h), or NULL */
    struct tpool *tp;
    int nth;
    /* encoder, cap_windows windows side by side */
    int cap_windows;
    float *e_col;                           /* im2col: [w][col_floats] */
    float *e_x, *e_h, *e_q, *e_k, *e_v, *e_att; /* [w][n_audio_ctx][n_state] */
    float *e_mlp;                           /* [w][n_audio_ctx][4 n_state] (also conv1 out) */
    float *e_scores;                        /* [n_ctx][n_ctx] */
    /* decoder, cap_rows token rows of any states */
    int cap_rows;
    float *d_x, *d_h, *d_q, *d_k, *d_v, *d_att; /* [rows][n_state] */
    float *d_mlp;                           /* [rows][4 n_state] */
    float *d_scores;                        /* [nth][max(n_audio_ctx, n_text_ctx)] */
    float *logits;                          /* [rows][n_vocab]: the pass's logits rows */
};

struct whisper_state {
    const struct whisper_model *m;
    struct tpool *tp;                       /* standalone: the pool (mel too); batched: NULL */
    struct whisper_work *work;              /* standalone passes; NULL when batched */
    struct whisper_batcher *batcher;        /* batched passes; NULL when standalone */
    struct whisper_dev *dev;                /* holds this state's device caches, or NULL */

    /* encoder output of the window last encoded, n_ctx positions of it */
    int n_ctx;                              /* n_audio_ctx, or fewer (whisper_encode_ctx) */
    float *enc_out;                         /* [n_audio_ctx][n_audio_state], rows < n_ctx valid */
    void *cross_k, *cross_v;                /* [n_text_layer][n_audio_ctx][n_state], f32 or f16;
                                               rows < n_ctx of each layer valid */

    /* decoder */
    float *self_k[WHISPER_MAX_DECODERS], *self_v[WHISPER_MAX_DECODERS]; /* [layer][n_text_ctx][n_state] */
    int *d_slot, *d_pos;                    /* [n_text_ctx]: whisper_decode's rows */
    float *logits;                          /* [logits_cap][n_vocab] */
    int logits_cap;

    /* whisper_full results */
    struct whisper_segment *segs;
    int n_segs, cap_segs;
    char lang[8];
};

/* One token row of a decoder pass: token at position pos of decoder slot
 * slot of state s; its logits go to row `logits` of s's logits (-1: none). */
struct whisper_row {
    struct whisper_state *s;
    int slot, pos, logits;
    int32_t token;
};

/* A state without a pool or scratch (whisper.c); whisper_state_new adds them. */
struct whisper_state *whisper_state_alloc(const struct whisper_model *m, char *err, size_t errlen);

struct whisper_work *whisper_work_new(const struct whisper_model *m, struct tpool *tp);
void whisper_work_free(struct whisper_work *w);
/* The pool call every per-row step goes through (single-threaded without a pool). */
void whisper_run(struct whisper_work *w, void (*fn)(void *, int, int), void *arg);

/* The passes themselves (whisper_forward.c), arguments already checked:
 * the encoder over n windows (window i: mel[i] of n_frames[i] frames from
 * offset[i], n_ctx[i] positions, results into states[i]), and the decoder
 * over n rows. Rows of one decoder slot come in position order. */
int whisper_forward_encode(struct whisper_work *w, struct whisper_state *const *states, const float *const *mel,
                           const int *n_frames, const int *offset, const int *n_ctx, int n, char *err,
                           size_t errlen);
int whisper_forward_decode(struct whisper_work *w, const struct whisper_row *rows, int n, char *err, size_t errlen);
/* Room for n logits rows in s->logits. */
int whisper_state_logits_reserve(struct whisper_state *s, int n, char *err, size_t errlen);

/* Batched states (whisper_batch.c): run one pass through the batcher with
 * whatever other states have pending, and wait for it. */
int whisper_batcher_encode(struct whisper_batcher *b, struct whisper_state *s, const float *mel, int n_frames,
                           int offset, int n_ctx, char *err, size_t errlen);
int whisper_batcher_decode(struct whisper_batcher *b, const struct whisper_row *rows, int n, char *err,
                           size_t errlen);
/* A state of b starts (+1) or ends (-1) a transcription: the batcher waits
 * briefly for busy states' next requests before it runs a pass. */
void whisper_batcher_busy(struct whisper_batcher *b, int delta);

#endif
