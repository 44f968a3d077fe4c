/* whisper_impl.h - private to audio/whisper*.c: the model and state layouts
 * shared by the loader (whisper.c), the forward passes (whisper_forward.c)
 * and the decoding strategies (whisper_full.c). Not for other modules. */
#ifndef OMNI_WHISPER_IMPL_H
#define OMNI_WHISPER_IMPL_H

#include "audio/whisper.h"
#include "src/core/matmul.h"

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
};

struct whisper_state {
    const struct whisper_model *m;
    struct tpool *tp;
    int nth;

    /* encoder */
    float *enc_out;                         /* [n_audio_ctx][n_state] */
    float *cross_k, *cross_v;               /* [n_text_layer][n_audio_ctx][n_state] */
    float *e_col;                           /* im2col: [2 n_ctx][3 max(n_mels, n_state)] */
    float *e_x, *e_h, *e_q, *e_k, *e_v, *e_att; /* [n_audio_ctx][n_state] */
    float *e_mlp;                           /* [n_audio_ctx][4 n_state] (also conv1 out) */
    float *e_qh, *e_kh, *e_vt, *e_oh;       /* one head: [n_ctx][d_head], v^T [d_head][n_ctx] */
    float *e_scores;                        /* [n_ctx][n_ctx] */

    /* decoder */
    float *self_k[WHISPER_MAX_DECODERS], *self_v[WHISPER_MAX_DECODERS]; /* [layer][n_text_ctx][n_state] */
    float *d_x, *d_h, *d_q, *d_k, *d_v, *d_att; /* [n_text_ctx][n_state] */
    float *d_mlp;                           /* [n_text_ctx][4 n_state] */
    float *d_scores;                        /* [nth][max(n_audio_ctx, n_text_ctx)] */
    int *d_slot, *d_pos;                    /* [n_text_ctx]: whisper_decode's rows */
    float *logits;                          /* [logits_cap][n_vocab] */
    int logits_cap;

    /* whisper_full results */
    struct whisper_segment *segs;
    int n_segs, cap_segs;
    char lang[8];
};

/* The pool call every per-row step goes through (single-threaded without a pool). */
void whisper_run(struct whisper_state *s, void (*fn)(void *, int, int), void *arg);

#endif
