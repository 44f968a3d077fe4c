/* deltanet.c - Gated DeltaNet layers (see deltanet.h): input projections,
 * the causal conv with its per-sequence state, L2-normalised q/k, the
 * delta-rule recurrence token by token, the gated RMSNorm and the output
 * projection.
 *
 * The tokens of a batch go in batch order (a sequence's tokens depend on its
 * earlier ones through the state); between the projections the work is one
 * pool run split by key head: each thread convolves, normalises and runs
 * the recurrence (the ops table's delta_rule, one pass over each head's
 * state) for its key heads and the value heads reading them, owning their
 * slice of every state, so no two threads touch the same floats and the
 * bits do not depend on the thread count. The input projections go through
 * the model's multi-product hook where it is set (one parallel region for
 * the three or four matrices that share the normed input). */
#include "deltanet.h"

#include "src/core/omni.h"
#include "src/core/ops.h"
#include "src/core/threadpool.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* HF's l2norm: x / sqrt(sum x^2 + 1e-6) */
#define GDN_L2_EPS 1e-6f

struct gdn_ctx {
    struct gdn_params p;
    int max_tokens;
    struct tpool *tp;
    float *qkv;   /* [max_tokens][conv_dim]: projections, then conv outputs in place */
    float *z;     /* [max_tokens][n_v head_v] */
    float *ba;    /* [max_tokens][2 n_v]: b and a as the projection(s) left them */
    float *y;     /* [max_tokens][n_v head_v] normed, gated outputs */
    float *tmp;   /* [2][max_tokens][n_v]: beta and alpha projections (Qwen3.5) */
    float *qkvz;  /* [max_tokens][conv_dim + n_v head_v] ssm_in's rows, or NULL */
    gdn_matmul_multi_fn multi; /* the input projections in one call, or NULL */
};

int gdn_conv_dim(const struct gdn_params *p)
{
    return 2 * p->n_k_heads * p->head_k + p->n_v_heads * p->head_v;
}

size_t gdn_state_floats(const struct gdn_params *p)
{
    return (size_t)(p->kernel - 1) * gdn_conv_dim(p) +
           (size_t)p->n_v_heads * p->head_k * p->head_v;
}

struct gdn_ctx *gdn_ctx_new(const struct gdn_params *p, int max_tokens, struct tpool *tp,
                            char *err, size_t errlen)
{
    if (p->n_k_heads < 1 || p->n_v_heads < 1 || p->n_v_heads % p->n_k_heads ||
        p->head_k < 1 || p->head_v < 1 || p->head_k > 1024 || p->head_v > 1024 ||
        p->n_v_heads > 4096 || p->kernel < 1 || p->kernel > 64 || max_tokens < 1) {
        omni_fail(err, errlen, OMNI_ERR_UNSUPPORTED,
                  "deltanet: %d key heads of %d, %d value heads of %d, kernel %d: need value "
                  "heads a multiple of key heads, head sizes in 1..1024, a kernel in 1..64",
                  p->n_k_heads, p->head_k, p->n_v_heads, p->head_v, p->kernel);
        return NULL;
    }
    struct gdn_ctx *c = calloc(1, sizeof *c);
    if (!c)
        goto nomem;
    c->p = *p;
    c->max_tokens = max_tokens;
    c->tp = tp;
    const size_t T = (size_t)max_tokens, vd = (size_t)p->n_v_heads * p->head_v;
    c->qkv = malloc(T * gdn_conv_dim(p) * sizeof(float));
    c->z = malloc(T * vd * sizeof(float));
    c->ba = malloc(T * 2 * (size_t)p->n_v_heads * sizeof(float));
    c->y = malloc(T * vd * sizeof(float));
    c->tmp = malloc(T * 2 * (size_t)p->n_v_heads * sizeof(float));
    if (!c->qkv || !c->z || !c->ba || !c->y || !c->tmp)
        goto nomem;
    if (p->fused_qkvz && !(c->qkvz = malloc(T * (gdn_conv_dim(p) + vd) * sizeof(float))))
        goto nomem;
    return c;
nomem:
    omni_fail(err, errlen, OMNI_ERR_NOMEM, "deltanet: out of memory for %d-token buffers",
              max_tokens);
    gdn_ctx_free(c);
    return NULL;
}

void gdn_ctx_set_matmul_multi(struct gdn_ctx *c, gdn_matmul_multi_fn multi) { c->multi = multi; }

void gdn_ctx_free(struct gdn_ctx *c)
{
    if (!c)
        return;
    free(c->qkv);
    free(c->z);
    free(c->ba);
    free(c->y);
    free(c->tmp);
    free(c->qkvz);
    free(c);
}

void gdn_delta_step(float *S, const float *q, const float *k, const float *v, float g,
                    float beta, int head_k, int head_v, float *o)
{
    omni_ops()->delta_rule(S, q, k, v, expf(g), beta, head_k, head_v, o);
}

struct gdn_job {
    struct gdn_ctx *c;
    const struct gdn_layer *L;
    const struct gdn_token *tok;
    int n;
};

/* Conv channels [c0, c1) of token t: y = silu(w . (state, x)), the state
 * shifted by one input (zeroed first when the token starts its sequence,
 * copied to its snapshot after). */
static void conv_channels(const struct gdn_job *j, int t, int c0, int c1)
{
    const struct gdn_params *p = &j->c->p;
    const int C = gdn_conv_dim(p), K = p->kernel;
    const size_t off = j->L->state_off;
    float *st = j->tok[t].state + off; /* [K - 1][C], oldest first */
    float *x = j->c->qkv + (size_t)t * C;
    if (j->tok[t].reset)
        for (int k = 0; k < K - 1; k++)
            memset(st + (size_t)k * C + c0, 0, (size_t)(c1 - c0) * sizeof(float));
    for (int ch = c0; ch < c1; ch++) {
        const float *w = j->L->conv_w + (size_t)ch * K, xc = x[ch];
        float acc = w[K - 1] * xc;
        for (int k = 0; k < K - 1; k++)
            acc += w[k] * st[(size_t)k * C + ch];
        for (int k = 0; k + 1 < K - 1; k++)
            st[(size_t)k * C + ch] = st[(size_t)(k + 1) * C + ch];
        if (K > 1)
            st[(size_t)(K - 2) * C + ch] = xc;
        x[ch] = acc / (1.0f + expf(-acc)); /* silu */
    }
    if (j->tok[t].snap)
        for (int k = 0; k < K - 1; k++)
            memcpy(j->tok[t].snap + off + (size_t)k * C + c0, st + (size_t)k * C + c0,
                   (size_t)(c1 - c0) * sizeof(float));
}

/* x /= sqrt(sum x^2 + eps), times scale (HF's l2norm) */
static void l2norm_head(float *x, int dk, float scale)
{
    double ss = 0;
    for (int i = 0; i < dk; i++)
        ss += (double)x[i] * x[i];
    const float inv = (1.0f / sqrtf((float)ss + GDN_L2_EPS)) * scale;
    for (int i = 0; i < dk; i++)
        x[i] *= inv;
}

static inline float softplus(float x)
{
    return x > 20.0f ? x : log1pf(expf(x)); /* torch's threshold 20 */
}

/* Value head h of token t: the recurrence on its state, then the gated
 * RMSNorm of its output. */
static void delta_head(const struct gdn_job *j, const struct omni_ops *op, int t, int h)
{
    const struct gdn_params *p = &j->c->p;
    const struct gdn_layer *L = j->L;
    const int C = gdn_conv_dim(p), dk = p->head_k, dv = p->head_v, nv = p->n_v_heads;
    const int nk = p->n_k_heads, r = nv / nk, kd = nk * dk;
    const size_t head_floats = (size_t)dk * dv;
    float *S = j->tok[t].state + L->state_off + (size_t)(p->kernel - 1) * C + (size_t)h * head_floats;
    const float *qkv = j->c->qkv + (size_t)t * C, *ba = j->c->ba + (size_t)t * 2 * nv;
    if (j->tok[t].reset)
        memset(S, 0, head_floats * sizeof(float));
    const int kh = p->tiled ? h % nk : h / r;
    /* b and a: per key head [b x r, a x r] (ssm_ba), or [b x nv][a x nv] */
    const float b = L->ba.data ? ba[kh * 2 * r + h % r] : ba[h];
    const float a = L->ba.data ? ba[kh * 2 * r + r + h % r] : ba[nv + h];
    const float beta = 1.0f / (1.0f + expf(-b));
    const float g = L->a[h] * softplus(a + L->dt_bias[h]);
    float *o = j->c->y + (size_t)t * nv * dv + (size_t)h * dv;
    op->delta_rule(S, qkv + (size_t)kh * dk, qkv + kd + (size_t)kh * dk, qkv + 2 * kd + (size_t)h * dv,
                   expf(g), beta, dk, dv, o);
    op->rmsnorm(o, o, L->norm, dv, p->norm_eps);
    op->swiglu(j->c->z + (size_t)t * nv * dv + (size_t)h * dv, o, dv);
    if (j->tok[t].snap)
        memcpy(j->tok[t].snap + (S - j->tok[t].state), S, head_floats * sizeof(float));
}

/* Key heads [k0, k1) and the value heads that read them, every token in
 * order: conv of their q, k and v channels, q / k normalised, the
 * recurrence. A key head's value heads are h / r == kh (grouped) or
 * h % n_k == kh (tiled), so the threads' channels and states are disjoint
 * and one pool run does the whole layer between the projections. */
static void heads_worker(void *arg, int ith, int nth)
{
    const struct gdn_job *j = arg;
    const struct gdn_params *p = &j->c->p;
    const int C = gdn_conv_dim(p), dk = p->head_k, dv = p->head_v, nk = p->n_k_heads;
    const int r = p->n_v_heads / nk, kd = nk * dk;
    const int k0 = (int)((int64_t)nk * ith / nth), k1 = (int)((int64_t)nk * (ith + 1) / nth);
    if (k0 == k1)
        return;
    const struct omni_ops *op = omni_ops();
    const float scale = 1.0f / sqrtf((float)dk);
    for (int t = 0; t < j->n; t++) {
        float *x = j->c->qkv + (size_t)t * C;
        conv_channels(j, t, k0 * dk, k1 * dk);           /* q */
        conv_channels(j, t, kd + k0 * dk, kd + k1 * dk); /* k */
        if (p->tiled) /* v of heads kh + m nk */
            for (int m = 0; m < r; m++)
                conv_channels(j, t, 2 * kd + (k0 + m * nk) * dv, 2 * kd + (k1 + m * nk) * dv);
        else /* v of heads kh r .. kh r + r - 1 */
            conv_channels(j, t, 2 * kd + k0 * r * dv, 2 * kd + k1 * r * dv);
        for (int kh = k0; kh < k1; kh++) {
            l2norm_head(x + (size_t)kh * dk, dk, scale);
            l2norm_head(x + kd + (size_t)kh * dk, dk, 1.0f);
        }
        for (int kh = k0; kh < k1; kh++)
            for (int m = 0; m < r; m++)
                delta_head(j, op, t, p->tiled ? kh + m * nk : kh * r + m);
    }
}

/* ssm_in: one product, then each key head's q, k, v, z rows to where
 * attn_qkv and attn_gate would have put them */
static void split_qkvz(struct gdn_ctx *c, const struct gdn_layer *L, const float *xn, int n,
                       gdn_matmul_fn mm, void *mm_arg)
{
    const struct gdn_params *p = &c->p;
    const int C = gdn_conv_dim(p), nk = p->n_k_heads, dk = p->head_k;
    const int rv = p->n_v_heads / nk * p->head_v, vd = p->n_v_heads * p->head_v, kd = nk * dk;
    mm(mm_arg, &L->qkvz, xn, n, c->qkvz);
    for (int t = 0; t < n; t++) {
        const float *src = c->qkvz + (size_t)t * (C + vd);
        float *qkv = c->qkv + (size_t)t * C, *z = c->z + (size_t)t * vd;
        for (int h = 0; h < nk; h++, src += 2 * dk + 2 * rv) {
            memcpy(qkv + (size_t)h * dk, src, (size_t)dk * sizeof(float));
            memcpy(qkv + kd + (size_t)h * dk, src + dk, (size_t)dk * sizeof(float));
            memcpy(qkv + 2 * kd + (size_t)h * rv, src + 2 * dk, (size_t)rv * sizeof(float));
            memcpy(z + (size_t)h * rv, src + 2 * dk + rv, (size_t)rv * sizeof(float));
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

int gdn_forward(struct gdn_ctx *c, const struct gdn_layer *L, const float *xn, int n,
                const struct gdn_token *tok, float *out, gdn_matmul_fn mm, void *mm_arg)
{
    if (n < 1 || n > c->max_tokens)
        return OMNI_ERR_ARG;
    const int nv = c->p.n_v_heads;
    const bool multi = c->multi && !L->qkvz.data;
    if (multi) { /* qkv, z, and b/a (ssm_ba, or beta and alpha into tmp) in one call */
        const struct omni_tensor *w[4] = { &L->qkv, &L->gate, L->ba.data ? &L->ba : &L->beta, &L->alpha };
        float *const y[4] = { c->qkv, c->z, L->ba.data ? c->ba : c->tmp, c->tmp + (size_t)n * nv };
        c->multi(mm_arg, w, L->ba.data ? 3 : 4, xn, n, y);
    } else if (L->qkvz.data) {
        if (!c->qkvz)
            return OMNI_ERR_ARG;
        split_qkvz(c, L, xn, n, mm, mm_arg);
    } else {
        mm(mm_arg, &L->qkv, xn, n, c->qkv);
        mm(mm_arg, &L->gate, xn, n, c->z);
    }
    if (L->ba.data) {
        if (!multi)
            mm(mm_arg, &L->ba, xn, n, c->ba);
    } else { /* b then a, each [n][nv], into rows of 2 nv */
        float *tmp = c->tmp;
        if (!multi) {
            mm(mm_arg, &L->beta, xn, n, tmp);
            mm(mm_arg, &L->alpha, xn, n, tmp + (size_t)n * nv);
        }
        for (int t = 0; t < n; t++) {
            memcpy(c->ba + (size_t)t * 2 * nv, tmp + (size_t)t * nv, (size_t)nv * sizeof(float));
            memcpy(c->ba + (size_t)t * 2 * nv + nv, tmp + (size_t)(n + t) * nv,
                   (size_t)nv * sizeof(float));
        }
    }
    struct gdn_job j = { .c = c, .L = L, .tok = tok, .n = n };
    run(c->tp, heads_worker, &j);
    mm(mm_arg, &L->out, c->y, n, out);
    return 0;
}
