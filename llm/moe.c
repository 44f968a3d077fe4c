/* moe.c - mixture-of-experts feed-forward (see moe.h).
 *
 * Per layer: router logits for every token in one product, softmax and top-k
 * per token, then expert by expert: gather the rows of the tokens that chose
 * it, gate and up products on that batch (+ biases, gpt-oss), SwiGLU (clamped,
 * gpt-oss), down product (+ bias), and add each
 * row back into its token's output times the token's weight for the expert.
 * Only experts some token chose are touched, so a decode step reads k of
 * n_expert experts' weights. */
#include "moe.h"

#include "src/core/nn.h"
#include "src/core/omni.h"
#include "src/core/tensor.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

struct moe_ctx {
    struct moe_params p;
    int max_tokens;
    float *logits;     /* [max_tokens][n_expert] router logits */
    int *idx;          /* [max_tokens][n_used] chosen experts */
    float *w;          /* [max_tokens][n_used] their weights */
    int *count;        /* [n_expert] tokens per expert */
    int *start;        /* [n_expert + 1] first slot of each expert in order[] */
    int *order;        /* [max_tokens * n_used] (token, k) slots grouped by expert */
    float *xg;         /* [max_tokens][n_embd] gathered inputs, then outputs */
    float *g, *u;      /* [max_tokens][max(n_ff_exp, n_ff_shexp)] */
    float *sh;         /* [max_tokens] shared-expert gate */
    uint64_t bytes_read;
};

struct omni_tensor moe_expert(const struct moe_experts *x, int e)
{
    return (struct omni_tensor){ .type = x->type, .ne = { x->cols, x->rows },
                                 .data = (const char *)x->data + (size_t)e * x->expert_bytes };
}

static void default_mm(void *arg, const struct omni_tensor *w, const float *x, int n, float *y)
{
    (void)arg;
    omni_matmul(NULL, w, x, n, y);
}

struct moe_ctx *moe_ctx_new(const struct moe_params *p, int max_tokens, char *err, size_t errlen)
{
    if (p->n_embd < 1 || p->n_expert < 1 || p->n_used < 1 || p->n_used > p->n_expert ||
        p->n_ff_exp < 1 || p->n_ff_shexp < 0 || max_tokens < 1 || max_tokens > (1 << 20) ||
        p->n_expert > 4096 || p->n_used > 64) {
        omni_fail(err, errlen, OMNI_ERR_ARG,
                  "moe: bad shape: %d experts, %d used, widths %d/%d/%d, %d tokens", p->n_expert,
                  p->n_used, p->n_embd, p->n_ff_exp, p->n_ff_shexp, max_tokens);
        return NULL;
    }
    struct moe_ctx *c = calloc(1, sizeof *c);
    if (!c)
        goto nomem;
    c->p = *p;
    c->max_tokens = max_tokens;
    const size_t T = (size_t)max_tokens, k = (size_t)p->n_used;
    const size_t ff = (size_t)(p->n_ff_exp > p->n_ff_shexp ? p->n_ff_exp : p->n_ff_shexp);
    c->logits = malloc(T * p->n_expert * sizeof(float));
    c->idx = malloc(T * k * sizeof(int));
    c->w = malloc(T * k * sizeof(float));
    c->count = malloc((size_t)p->n_expert * sizeof(int));
    c->start = malloc(((size_t)p->n_expert + 1) * sizeof(int));
    c->order = malloc(T * k * sizeof(int));
    c->xg = malloc(T * p->n_embd * sizeof(float));
    c->g = malloc(T * ff * sizeof(float));
    c->u = malloc(T * ff * sizeof(float));
    c->sh = malloc(T * sizeof(float));
    if (!c->logits || !c->idx || !c->w || !c->count || !c->start || !c->order || !c->xg ||
        !c->g || !c->u || !c->sh)
        goto nomem;
    return c;
nomem:
    omni_fail(err, errlen, OMNI_ERR_NOMEM, "moe: out of memory for %d-token buffers", max_tokens);
    moe_ctx_free(c);
    return NULL;
}

void moe_ctx_free(struct moe_ctx *c)
{
    if (!c)
        return;
    free(c->logits);
    free(c->idx);
    free(c->w);
    free(c->count);
    free(c->start);
    free(c->order);
    free(c->xg);
    free(c->g);
    free(c->u);
    free(c->sh);
    free(c);
}

uint64_t moe_ctx_bytes_read(const struct moe_ctx *c) { return c->bytes_read; }
void moe_ctx_reset_bytes_read(struct moe_ctx *c) { c->bytes_read = 0; }

void moe_route(const float *logits, int n_expert, int k, bool norm, int *idx, float *w)
{
    /* softmax in double for the denominator; max subtracted first */
    float mx = logits[0];
    for (int e = 1; e < n_expert; e++)
        mx = logits[e] > mx ? logits[e] : mx;
    double sum = 0.0;
    for (int e = 0; e < n_expert; e++)
        sum += exp((double)logits[e] - mx);
    /* top-k by insertion: k is small (8 of 128 for Qwen3-30B-A3B) */
    int n = 0;
    for (int e = 0; e < n_expert; e++) {
        if (n == k && logits[e] <= logits[idx[k - 1]])
            continue;
        int j = n < k ? n++ : k - 1;
        while (j > 0 && logits[idx[j - 1]] < logits[e]) {
            idx[j] = idx[j - 1];
            j--;
        }
        idx[j] = e;
    }
    double wsum = 0.0;
    for (int j = 0; j < k; j++) {
        w[j] = (float)(exp((double)logits[idx[j]] - mx) / sum);
        wsum += w[j];
    }
    for (int j = 0; norm && j < k; j++)
        w[j] = (float)(w[j] / wsum);
}

/* y[r] += b over n rows of m (b NULL: nothing). */
static void add_bias(float *y, const float *b, int n, int64_t m)
{
    for (int r = 0; b && r < n; r++)
        for (int64_t i = 0; i < m; i++)
            y[(size_t)r * m + i] += b[i];
}

/* One SwiGLU MLP on the n rows of xg: result into xg. gb, ub, db are the
 * expert's gpt-oss biases or NULL. */
static void expert_mlp(struct moe_ctx *c, const struct omni_tensor *gate,
                       const struct omni_tensor *up, const struct omni_tensor *down,
                       const float *gb, const float *ub, const float *db, int n,
                       moe_matmul_fn mm, void *arg)
{
    const int64_t ff = gate->ne[1];
    mm(arg, gate, c->xg, n, c->g);
    mm(arg, up, c->xg, n, c->u);
    add_bias(c->g, gb, n, ff);
    add_bias(c->u, ub, n, ff);
    if (c->p.swiglu_limit > 0)
        omni_swiglu_oai(c->g, c->u, (int64_t)n * ff, 1.702f, c->p.swiglu_limit);
    else
        omni_swiglu(c->g, c->u, (int64_t)n * ff);
    mm(arg, down, c->u, n, c->xg);
    add_bias(c->xg, db, n, down->ne[1]);
}

int moe_forward(struct moe_ctx *c, const struct moe_layer *L, const float *x, int n, float *out,
                moe_matmul_fn mm, void *mm_arg)
{
    const struct moe_params *p = &c->p;
    if (n < 1 || n > c->max_tokens)
        return OMNI_ERR_ARG;
    if (!mm)
        mm = default_mm;
    const int k = p->n_used, E = p->n_expert, d = p->n_embd;

    /* route every token */
    mm(mm_arg, &L->router, x, n, c->logits);
    add_bias(c->logits, L->router_b, n, E);
    c->bytes_read += ggml_row_size(L->router.type, L->router.ne[0]) * (size_t)L->router.ne[1];
    memset(c->count, 0, (size_t)E * sizeof(int));
    for (int t = 0; t < n; t++) {
        moe_route(c->logits + (size_t)t * E, E, k, p->norm_weights, c->idx + (size_t)t * k,
                  c->w + (size_t)t * k);
        for (int j = 0; j < k; j++)
            c->count[c->idx[(size_t)t * k + j]]++;
    }
    /* slots (t * k + j) grouped by expert, tokens in order within each */
    c->start[0] = 0;
    for (int e = 0; e < E; e++)
        c->start[e + 1] = c->start[e] + c->count[e];
    memset(c->count, 0, (size_t)E * sizeof(int));
    for (int s = 0; s < n * k; s++) {
        const int e = c->idx[s];
        c->order[c->start[e] + c->count[e]++] = s;
    }

    memset(out, 0, (size_t)n * d * sizeof(float));
    for (int e = 0; e < E; e++) {
        const int m = c->count[e];
        if (!m)
            continue; /* never read */
        const int *slots = c->order + c->start[e];
        for (int i = 0; i < m; i++)
            memcpy(c->xg + (size_t)i * d, x + (size_t)(slots[i] / k) * d, (size_t)d * sizeof(float));
        const struct omni_tensor g = moe_expert(&L->gate, e), u = moe_expert(&L->up, e),
                                 dn = moe_expert(&L->down, e);
        const int64_t ff = L->gate.rows;
        expert_mlp(c, &g, &u, &dn, L->gate_b ? L->gate_b + e * ff : NULL,
                   L->up_b ? L->up_b + e * ff : NULL, L->down_b ? L->down_b + (int64_t)e * d : NULL,
                   m, mm, mm_arg);
        c->bytes_read += L->gate.expert_bytes + L->up.expert_bytes + L->down.expert_bytes;
        for (int i = 0; i < m; i++) {
            const float wt = c->w[slots[i]];
            float *o = out + (size_t)(slots[i] / k) * d;
            const float *y = c->xg + (size_t)i * d;
            for (int j = 0; j < d; j++)
                o[j] += wt * y[j];
        }
    }

    /* shared expert: every token, scaled by sigmoid(x . sh_router) where present */
    if (L->sh_gate.data) {
        memcpy(c->xg, x, (size_t)n * d * sizeof(float));
        expert_mlp(c, &L->sh_gate, &L->sh_up, &L->sh_down, NULL, NULL, NULL, n, mm, mm_arg);
        c->bytes_read += ggml_row_size(L->sh_gate.type, L->sh_gate.ne[0]) * (size_t)L->sh_gate.ne[1] +
                         ggml_row_size(L->sh_up.type, L->sh_up.ne[0]) * (size_t)L->sh_up.ne[1] +
                         ggml_row_size(L->sh_down.type, L->sh_down.ne[0]) * (size_t)L->sh_down.ne[1];
        for (int t = 0; t < n; t++) {
            float s = 1.0f;
            if (L->sh_router) {
                double z = 0.0;
                for (int j = 0; j < d; j++)
                    z += (double)L->sh_router[j] * x[(size_t)t * d + j];
                s = (float)(1.0 / (1.0 + exp(-z)));
            }
            float *o = out + (size_t)t * d;
            const float *y = c->xg + (size_t)t * d;
            for (int j = 0; j < d; j++)
                o[j] += s * y[j];
        }
    }
    return 0;
}
