/* nn.h - row-wise float ops the encoder models share: layer norm, GELU,
 * gated activations, rotary positions, L2 normalization.
 *
 *   omni_layer_norm_rows(x, w, b, n_rows, n, 1e-12f, y);   // y may be x
 *   omni_gelu_erf(y, n);                                    // in place
 *   omni_rope_neox(q, n_head, head_dim, stride, pos, 10000.0f);
 *
 * Plain C that -O2 vectorizes; each row's result depends only on that row,
 * so callers split rows across threads freely. Thread safety: pure
 * functions, safe from any thread. */
#ifndef OMNI_NN_H
#define OMNI_NN_H

#include <stddef.h>
#include <stdint.h>

/* y[r] = (x[r] - mean) / sqrt(var + eps) * w + b over n_rows rows of n
 * floats (mean and variance accumulated in double); b may be NULL. y may
 * be x. */
void omni_layer_norm_rows(const float *x, const float *w, const float *b, int64_t n_rows, int n,
                          float eps, float *y);

/* x = 0.5 x (1 + erf(x / sqrt 2)) in place: the exact GELU of BERT and
 * PyTorch's nn.GELU() (not the tanh approximation), with erf to about 2e-7
 * absolute (a rational approximation over the vector exp of quant.h). */
void omni_gelu_erf(float *x, int64_t n);

/* up[i] = act(gate[i]) * up[i] for n floats: SwiGLU (silu) and GEGLU (exact GELU). */
void omni_swiglu(const float *gate, float *up, int64_t n);
void omni_geglu_erf(const float *gate, float *up, int64_t n);
/* GEGLU with the tanh GELU of gemma (PyTorch's gelu(approximate='tanh')):
 * 0.5 g (1 + tanh(sqrt(2/pi) (g + 0.044715 g^3))). */
void omni_geglu_tanh(const float *gate, float *up, int64_t n);

/* x = cap * tanh(x / cap) in place over n floats: gemma2's soft-capping of
 * attention scores and logits (tanh through the vector exp: absolute error
 * about 1e-7 x cap). */
void omni_softcap(float *x, int64_t n, float cap);

/* Rotary positions, NEOX layout (GPT-NeoX / nomic-bert / Qwen: the pair
 * (i, i + d/2) turns by pos * base^(-2i/d)), in place over n_head heads of
 * head_dim floats at x + h * head_dim of one token. */
void omni_rope_neox(float *x, int n_head, int head_dim, int pos, float base);

/* x /= |x| over n floats (a zero vector stays zero). */
void omni_l2_normalize(float *x, int n);

#endif
