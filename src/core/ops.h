/* ops.h - the one compute layer: the float math the models share (norms,
 * RoPE, activations, softmax, f32/F16/BF16 dot and axpy, the attention
 * inner loops), once, for every family in llm/, audio/ and vision/.
 *
 *   const struct omni_ops *op = omni_ops();          // table of the CPU level in use
 *   op->rmsnorm(y, x, w, n_embd, 1e-6f);
 *   op->rope(q + h * hd, cos_t, sin_t, n_rot, true);  // precomputed angle tables
 *   op->attn_scores(sc, q, krows, n_keys, hd, scale); // sc[i] = q . krows[i] * scale
 *   op->softmax(sc, n_keys);
 *   op->attn_wsum(acc, sc, vrows, n_keys, hd);        // acc += sum_i sc[i] vrows[i]
 *
 * Backends. Each op is a function pointer in struct omni_ops; a table
 * exists per CPU level (cpu.h): the SIMD versions of src/core/arch/x86/
 * ops_sse.c (the x86-64-v2 floor, level "scalar"), ops_avx2.c and
 * ops_avx512.c, each compiled with its own target flags and used only when
 * CPUID reports the level, so the binary stays portable; and the plain-C
 * reference (ops_ref.c, the `_ref` kernels the tests compare every level
 * against). Every op takes plain pointers and sizes, keeps no state
 * and allocates nothing, and attention reads K/V through row pointers
 * (strided, paged or device rows alike), so another implementation of the
 * table needs no change in its callers. The device backends
 * (src/core/backend.h, CUDA) batch these same ops over a whole step under
 * the same names; their "cpu" backend runs them through this table, which
 * is how device results are checked. Callers fetch the table once per unit
 * of work (a layer, a worker's share), not per element.
 *
 * Numerics: SIMD versions differ from the reference only by summation order
 * and FMA contraction (relative 1e-6 on dots and norms); exp, GELU and
 * friends go through the same polynomials at every level (tests/test_ops.c
 * checks every level this CPU has against the reference).
 *
 * Thread safety: the ops are pure functions of their arguments, safe from
 * any thread; omni_cpu_set_level must not race with running ops. */
#ifndef OMNI_OPS_H
#define OMNI_OPS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct omni_ops {
    const char *name; /* "ref", "sse4", "avx2", "avx512" */

    /* ---- vectors: n floats ---- */
    float (*dot)(const float *a, const float *b, int n);
    void (*axpy)(float *y, float a, const float *x, int n); /* y += a x */
    void (*scale)(float *y, float a, int n);                /* y *= a */
    /* F16 (IEEE half) and BF16 rows, e.g. K/V caches, against f32 */
    float (*dot_f16)(const float *a, const uint16_t *b, int n);
    void (*axpy_f16)(float *y, float a, const uint16_t *x, int n);
    float (*dot_bf16)(const float *a, const uint16_t *b, int n);
    void (*axpy_bf16)(float *y, float a, const uint16_t *x, int n);
    void (*f16_to_f32)(const uint16_t *x, float *y, int64_t n);
    void (*f32_to_f16)(const float *x, uint16_t *y, int64_t n); /* round to nearest even */

    /* ---- norms over one row of n; y may be x ---- */
    /* y = x / sqrt(mean(x^2) + eps) * w */
    void (*rmsnorm)(float *y, const float *x, const float *w, int n, float eps);
    /* y = (x - mean) / sqrt(var + eps) * w + b (biased variance; w, b may be NULL) */
    void (*layernorm)(float *y, const float *x, const float *w, const float *b, int n, float eps);

    /* ---- RoPE: rotate the first n_rot values of one head in place by the
     * position's angles cos_[i], sin_[i] (i < n_rot / 2): pairs (i, i + n_rot/2)
     * when neox, (2i, 2i + 1) otherwise; values past n_rot pass unchanged ---- */
    void (*rope)(float *x, const float *cos_, const float *sin_, int n_rot, bool neox);

    /* ---- elementwise over n floats (in place where only x is given) ---- */
    void (*exp)(float *y, const float *x, int64_t n); /* |rel err| ~1e-7, args clamped to [-87.3, 88] */
    void (*softmax)(float *x, int64_t n);              /* n >= 1 */
    /* the steps of an online softmax (attention over key blocks): the max
     * of n values (-INFINITY for n = 0), and x = exp(x - m) in place
     * returning the sum of the new x */
    float (*max)(const float *x, int64_t n);
    float (*exp_shift_sum)(float *x, int64_t n, float m);
    void (*gelu_erf)(float *x, int64_t n);             /* 0.5 x (1 + erf(x / sqrt 2)) */
    void (*gelu_tanh)(float *x, int64_t n);            /* 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) */
    void (*gelu_quick)(float *x, int64_t n);           /* x sigmoid(1.702 x) (CLIP's quick GELU) */
    void (*silu)(float *x, int64_t n);                 /* x sigmoid(x) */
    void (*swiglu)(const float *gate, float *up, int64_t n);     /* up *= silu(gate) */
    void (*geglu_erf)(const float *gate, float *up, int64_t n);  /* up *= gelu_erf(gate) */
    void (*geglu_tanh)(const float *gate, float *up, int64_t n); /* up *= gelu_tanh(gate) */
    void (*softcap)(float *x, int64_t n, float cap);             /* x = cap tanh(x / cap) */

    /* ---- attention inner loops over n keys of one head of d values, K/V
     * rows given by pointer (strided, paged: any layout) ---- */
    /* s[i] = (q . k[i]) * scale */
    void (*attn_scores)(float *s, const float *q, const float *const *k, int n, int d, float scale);
    void (*attn_scores_f16)(float *s, const float *q, const uint16_t *const *k, int n, int d,
                            float scale);
    /* acc += sum_i w[i] v[i] */
    void (*attn_wsum)(float *acc, const float *w, const float *const *v, int n, int d);
    void (*attn_wsum_f16)(float *acc, const float *w, const uint16_t *const *v, int n, int d);
    /* Online-softmax attention of g query heads sharing one K/V head (a
     * decode step's heads of one kv head), over n F16 key and value rows,
     * continuing a running state: for each head r (query q[r], d floats),
     *   s_i = (q[r] . k[i]) scale,  m' = max(m[r], max_i s_i),
     *   acc[r] = acc[r] e^(m[r] - m') + sum_i e^(s_i - m') v[i],
     *   l[r] = l[r] e^(m[r] - m') + sum_i e^(s_i - m'),  m[r] = m'.
     * Start from m = -INFINITY, l = 0, acc = 0; the output is acc[r] / l[r].
     * q and acc are [g][d]. Calls over consecutive key ranges compose; the
     * SIMD versions rescale per block of keys (the same result up to
     * rounding), widen each row once for all g heads and prefetch the rows
     * ahead. */
    void (*attn_online_f16)(float *acc, float *m, float *l, const float *q, int g,
                            const uint16_t *const *k, const uint16_t *const *v, int n, int d,
                            float scale);

    /* ---- linear attention ---- */
    /* The gated delta rule (Gated DeltaNet, llm/deltanet.c) for one token of
     * one head, the state S [dk][dv] (row i: key dimension i) in place:
     *   S = decay S;  u = beta (v - S^T k);  S += k u^T;  o = S^T q
     * q, k: dk floats; v, o: dv floats (dv <= 1024). The SIMD versions pass
     * over S once from memory (column blocks kept in L1 between the read of
     * S^T k, S^T q and the update; o = decay S_old^T q + (q . k) u). */
    void (*delta_rule)(float *S, const float *q, const float *k, const float *v, float decay,
                       float beta, int dk, int dv, float *o);
};

/* The table of the CPU level in use (omni_cpu_level()). Never NULL. */
const struct omni_ops *omni_ops(void);
/* The table of an explicit level, capped at what this CPU supports. */
const struct omni_ops *omni_ops_at(int level);
/* The plain-C reference (ops_ref.c) every level is tested against; slow,
 * for tests and benchmarks only. */
const struct omni_ops *omni_ops_reference(void);

// ---- row helpers on top of the table (ops.c) ---------------------------------

/* y[r] = layernorm(x[r]) over n_rows rows of n floats; b may be NULL; y may be x. */
void omni_layer_norm_rows(const float *x, const float *w, const float *b, int64_t n_rows, int n,
                          float eps, float *y);
/* In-place activations of the table in use (see struct omni_ops). */
void omni_gelu_erf(float *x, int64_t n);
void omni_gelu_tanh(float *x, int64_t n);
void omni_swiglu(const float *gate, float *up, int64_t n);
void omni_geglu_erf(const float *gate, float *up, int64_t n);
void omni_geglu_tanh(const float *gate, float *up, int64_t n);
void omni_softcap(float *x, int64_t n, float cap);
/* gpt-oss's clamped SwiGLU, in place into up: g = min(gate, limit),
 * u = clamp(up, -limit, limit), up = g sigmoid(alpha g) (u + 1) (scalar:
 * its cost is small beside the expert products). */
void omni_swiglu_oai(const float *gate, float *up, int64_t n, float alpha, float limit);
/* Rotary positions, NEOX layout, angles computed here (pos * base^(-2i/d),
 * in double): in place over n_head heads of head_dim floats of one token. */
void omni_rope_neox(float *x, int n_head, int head_dim, int pos, float base);
/* Dense attention of one head, out = softmax(scale Q K^T [+ bias]) V, for nq
 * query rows against nk key/value rows (the encoders' full attention: BERT,
 * CLIP/SigLIP): q, k, v and out are row-major with their rows ld floats
 * apart (a head's columns of [T][n_embd] activations), d values per row;
 * two sgemm calls around a row softmax of the table in use. scores is the
 * caller's [nq][nk] buffer. bias, when not NULL, adjusts query row i's
 * scaled scores before the softmax (ALiBi, masks). */
void omni_attn_dense(const float *q, const float *k, const float *v, float *out, size_t ld, int nq,
                     int nk, int d, float scale, float *scores,
                     void (*bias)(float *row, int i, int nk, void *user), void *user);

/* x /= |x| over n floats (a zero vector stays zero). */
void omni_l2_normalize(float *x, int n);

#endif
