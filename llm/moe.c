/* moe.c - mixture-of-experts feed-forward (see moe.h).
 *
 * Per layer: router logits for every token in one product, softmax and top-k
 * per token, then expert by expert: gather the rows of the tokens that chose
 * it, gate and up products on that batch (+ biases, gpt-oss), SwiGLU (clamped,
 * gpt-oss), down product (+ bias), and add each
 * row back into its token's output times the token's weight for the expert.
 * Only experts some token chose are touched, so a decode step reads k of
 * n_expert experts' weights.
 *
 * One token with a pool (decode): the k experts' gate and up rows (and the
 * shared expert's) are one parallel pass of per-row dots against x quantized
 * once, and their down rows a second pass, instead of 3k separate products
 * of a few hundred rows each (every one a quantization of its input and a
 * pool wake-up). The dots are omni_matmul's for one row (same quantizer,
 * the same vec_dot_prep on the activation's prepared block data where the
 * type has one, else vec_dot), and the outputs are summed in expert order
 * as below, so the result has the same bits as the product-by-product path.
 *
 * Several tokens with a pool (prefill, batched decode): each thread takes
 * whole experts (largest batch first) and runs their three products on its
 * own, so a layer is one pool wake-up instead of three per chosen expert;
 * per-row results depend on the batch size only, and each token's k outputs
 * are summed in expert order, so the bits are again the same. */
#include "moe.h"

#include "src/core/nn.h"
#include "src/core/omni.h"
#include "src/core/quant.h"
#include "src/core/tensor.h"
#include "src/core/threadpool.h"

#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

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
    /* one-token pool path (moe_ctx_set_pool) */
    struct tpool *tp;
    struct dec_mat *mat;   /* [2 (n_used + 1)] the products of one pass */
    int64_t *mat_start;    /* [2 (n_used + 1) + 1] first weight byte of each in the pass */
    int n_mat;
    uint8_t *xq[2];        /* [n_embd * 4] x in the gate's and the up's dot types */
    uint8_t *aq;           /* [(n_used + 1) * ff * 4] down inputs in the dot type */
    float *prep;           /* [n_used + 3][prep_n] their act_prep data (x's two, then aq's) */
    size_t prep_n;         /* OMNI_ACT_PREP_FLOATS of the widest input */
    float *dg, *du;        /* [(n_used + 1) * ff] gate / up (then SwiGLU) outputs */
    float *dy;             /* [(n_used + 1) * n_embd] down outputs */
    /* several tokens on a pool: whole experts per thread */
    int n_thr;             /* threads the scratch below serves (tpool_size) */
    int split_rows;        /* products in calls of at most this many rows (0: any) */
    struct moe_scratch *ts; /* [n_thr] */
    float *ys;             /* [max_tokens * n_used][n_embd] outputs per (token, k) slot */
    int *list;             /* [n_expert] chosen experts, most tokens first */
    int n_list;            /* how many of list are set */
    _Atomic int next;      /* next index into list to take */
    const struct moe_layer *L;
    const float *x;
};

/* One thread's buffers for an expert's batch (the general path's xg/g/u). */
struct moe_scratch {
    float *xg, *g, *u;
};

/* One matrix of a pass: y[r] = W[r] . a for every row r. */
struct dec_mat {
    const struct omni_quant_ops *op;
    const uint8_t *w;      /* [rows][w_row bytes] */
    size_t w_row;
    int64_t n_in, rows;
    const void *a;         /* the input in op->dot_type (floats when F32) */
    const float *prep;     /* op->act_prep of a for op->vec_dot_prep, or NULL: vec_dot */
    float *y;              /* [rows] */
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
    /* the one-token path: k experts and the shared one; every dot type
     * takes at most 4 bytes a value (F32) */
    const size_t slots = k + 1;
    c->mat = malloc(2 * slots * sizeof *c->mat);
    c->mat_start = malloc((2 * slots + 1) * sizeof *c->mat_start);
    c->xq[0] = malloc((size_t)p->n_embd * sizeof(float));
    c->xq[1] = malloc((size_t)p->n_embd * sizeof(float));
    c->aq = malloc(slots * ff * sizeof(float));
    c->prep_n = OMNI_ACT_PREP_FLOATS((size_t)p->n_embd > ff ? (size_t)p->n_embd : ff);
    c->prep = malloc((slots + 2) * c->prep_n * sizeof(float));
    c->dg = malloc(slots * ff * sizeof(float));
    c->du = malloc(slots * ff * sizeof(float));
    c->dy = malloc(slots * p->n_embd * sizeof(float));
    if (!c->logits || !c->idx || !c->w || !c->count || !c->start || !c->order || !c->xg ||
        !c->g || !c->u || !c->sh || !c->mat || !c->mat_start || !c->xq[0] || !c->xq[1] ||
        !c->aq || !c->prep || !c->dg || !c->du || !c->dy)
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
    free(c->mat);
    free(c->mat_start);
    free(c->xq[0]);
    free(c->xq[1]);
    free(c->aq);
    free(c->prep);
    free(c->dg);
    free(c->du);
    free(c->dy);
    free(c->ys);
    free(c->list);
    for (int i = 0; c->ts && i < c->n_thr; i++) {
        free(c->ts[i].xg);
        free(c->ts[i].g);
        free(c->ts[i].u);
    }
    free(c->ts);
    free(c);
}

int moe_ctx_set_pool(struct moe_ctx *c, struct tpool *tp, char *err, size_t errlen)
{
    c->tp = tp;
    const int nth = tp ? tpool_size(tp) : 1;
    if (nth <= c->n_thr)
        return 0;
    /* several tokens' experts run whole on the threads: each thread gathers
     * up to max_tokens rows of its expert, and every (token, k) slot keeps
     * its output for the sum in expert order */
    const size_t T = (size_t)c->max_tokens, k = (size_t)c->p.n_used, d = (size_t)c->p.n_embd;
    const size_t ff = (size_t)(c->p.n_ff_exp > c->p.n_ff_shexp ? c->p.n_ff_exp : c->p.n_ff_shexp);
    struct moe_scratch *ts = realloc(c->ts, (size_t)nth * sizeof *ts);
    if (!ts)
        goto nomem;
    c->ts = ts;
    for (int i = c->n_thr; i < nth; i++) {
        ts[i] = (struct moe_scratch){ malloc(T * d * sizeof(float)), malloc(T * ff * sizeof(float)),
                                      malloc(T * ff * sizeof(float)) };
        c->n_thr = i + 1;
        if (!ts[i].xg || !ts[i].g || !ts[i].u)
            goto nomem;
    }
    if (!c->ys && !(c->ys = malloc(T * k * d * sizeof(float))))
        goto nomem;
    if (!c->list && !(c->list = malloc((size_t)c->p.n_expert * sizeof(int))))
        goto nomem;
    return 0;
nomem:
    c->tp = NULL; /* the pool-less paths still work */
    omni_fail(err, errlen, OMNI_ERR_NOMEM, "moe: out of memory for %d threads' expert buffers", nth);
    return OMNI_ERR_NOMEM;
}

uint64_t moe_layer_expert_bytes(const struct moe_layer *L)
{
    const struct moe_experts *x[3] = { &L->gate, &L->up, &L->down };
    uint64_t b = 0;
    for (int i = 0; i < 3; i++)
        b += (uint64_t)x[i]->n_expert * x[i]->expert_bytes;
    return b;
}

int moe_layer_prefault(const struct moe_layer *L)
{
    const struct moe_experts *x[3] = { &L->gate, &L->up, &L->down };
    const long page = sysconf(_SC_PAGESIZE);
    int rc = 0;
    for (int i = 0; i < 3 && page > 0; i++) {
        if (!x[i]->data || x[i]->n_expert < 1)
            continue;
        /* madvise wants a page-aligned start; the tensor's first and last
         * pages may be shared with its neighbours, which is harmless */
        const uintptr_t a = (uintptr_t)x[i]->data, lo = a & ~(uintptr_t)(page - 1);
        const size_t len = (size_t)(a - lo) + (size_t)x[i]->n_expert * x[i]->expert_bytes;
#ifdef MADV_POPULATE_READ
        if (madvise((void *)lo, len, MADV_POPULATE_READ) != 0)
            rc = -1;
#else
        (void)len;
        rc = -1;
#endif
    }
    return rc;
}

void moe_ctx_set_split_rows(struct moe_ctx *c, int rows) { c->split_rows = rows > 0 ? rows : 0; }

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
static void expert_mlp_in(const struct moe_ctx *c, const struct moe_scratch *b,
                          const struct omni_tensor *gate, const struct omni_tensor *up,
                          const struct omni_tensor *down, const float *gb, const float *ub,
                          const float *db, int n, moe_matmul_fn mm, void *arg)
{
    const int64_t ff = gate->ne[1];
    mm(arg, gate, b->xg, n, b->g);
    mm(arg, up, b->xg, n, b->u);
    add_bias(b->g, gb, n, ff);
    add_bias(b->u, ub, n, ff);
    if (c->p.swiglu_limit > 0)
        omni_swiglu_oai(b->g, b->u, (int64_t)n * ff, 1.702f, c->p.swiglu_limit);
    else
        omni_swiglu(b->g, b->u, (int64_t)n * ff);
    mm(arg, down, b->u, n, b->xg);
    add_bias(b->xg, db, n, down->ne[1]);
}

static void expert_mlp(struct moe_ctx *c, const struct omni_tensor *gate,
                       const struct omni_tensor *up, const struct omni_tensor *down,
                       const float *gb, const float *ub, const float *db, int n,
                       moe_matmul_fn mm, void *arg)
{
    const struct moe_scratch b = { c->xg, c->g, c->u };
    expert_mlp_in(c, &b, gate, up, down, gb, ub, db, n, mm, arg);
}

/* sigmoid(x . sh_router): the shared expert's gate of one token, 1 without */
static float shared_scale(const struct moe_layer *L, const float *x, int d)
{
    if (!L->sh_router)
        return 1.0f;
    double z = 0.0;
    for (int j = 0; j < d; j++)
        z += (double)L->sh_router[j] * x[j];
    return (float)(1.0 / (1.0 + exp(-z)));
}

static size_t matrix_bytes(const struct omni_tensor *t)
{
    return ggml_row_size(t->type, t->ne[0]) * (size_t)t->ne[1];
}

// ---- one token: two pool passes --------------------------------------------

/* Rows ahead to prefetch, as omni_matmul's decode path does. */
#define DEC_PREFETCH_ROWS 4

/* The rows of all the pass's matrices split over the threads by their
 * weight bytes (a thread's range may span several matrices, so k small
 * matrices keep every thread busy; q6_K expert rows beside the shared
 * expert's q4_K ones weigh what they read): a row goes to the thread whose
 * byte range holds its first byte. */
static void dec_worker(void *arg, int ith, int nth)
{
    const struct moe_ctx *c = arg;
    const int64_t total = c->mat_start[c->n_mat];
    const int64_t lo = total * ith / nth, hi = total * (ith + 1) / nth;
    for (int m = 0; m < c->n_mat; m++) {
        const struct dec_mat *M = &c->mat[m];
        const int64_t b0 = lo - c->mat_start[m], b1 = hi - c->mat_start[m], wr_b = (int64_t)M->w_row;
        const int64_t r0 = b0 > 0 ? (b0 + wr_b - 1) / wr_b : 0;
        const int64_t r1 = b1 > 0 ? ((b1 + wr_b - 1) / wr_b < M->rows ? (b1 + wr_b - 1) / wr_b : M->rows) : 0;
        if (M->prep) { /* the kernel's own row loop and prefetches, as omni_matmul's */
            if (r0 < r1)
                M->op->vec_dot_prep(M->n_in, M->w + (size_t)r0 * M->w_row, M->w_row, r1 - r0, M->a, M->prep,
                                    M->y + r0);
            continue;
        }
        for (int64_t r = r0; r < r1; r++) {
            const uint8_t *wr = M->w + (size_t)r * M->w_row;
            if (r + DEC_PREFETCH_ROWS < r1) {
                const uint8_t *next = wr + DEC_PREFETCH_ROWS * M->w_row;
                for (size_t o = 0; o < M->w_row; o += 64)
                    __builtin_prefetch(next + o, 0, 3);
            }
            M->y[r] = M->op->vec_dot(M->n_in, wr, M->a);
        }
    }
}

/* Append y = W a to the pass (prep: a's act_prep data, see dec_input); 0,
 * or -1 when W's type has no dot kernel. */
static int dec_add(struct moe_ctx *c, const struct omni_tensor *w, const void *a, const float *prep, float *y)
{
    const struct omni_quant_ops *op = omni_quant_ops(w->type);
    const size_t w_row = ggml_row_size(w->type, w->ne[0]);
    if (!op || !op->vec_dot || !w_row)
        return -1;
    c->mat[c->n_mat] = (struct dec_mat){ .op = op, .w = w->data, .w_row = w_row, .n_in = w->ne[0],
                                         .rows = w->ne[1], .a = a, .prep = op->vec_dot_prep ? prep : NULL,
                                         .y = y };
    c->mat_start[c->n_mat + 1] = c->mat_start[c->n_mat] + w->ne[1] * (int64_t)w_row;
    c->n_mat++;
    return 0;
}

static void dec_run(struct moe_ctx *c)
{
    if (c->tp)
        tpool_run(c->tp, dec_worker, c);
    else
        dec_worker(c, 0, 1);
}

/* a[n] as W's activation (W's dot type, as omni_matmul quantizes it) in
 * buf, or a itself for float dots; with its act_prep data in prep where the
 * type has a vec_dot_prep (omni_matmul's one-row path). */
static const void *dec_input(int w_type, const float *a, int64_t n, uint8_t *buf, float *prep)
{
    const struct omni_quant_ops *op = omni_quant_ops(w_type);
    const void *in = a;
    if (op && op->from_float) {
        op->from_float(a, buf, n);
        in = buf;
    }
    if (op && op->vec_dot_prep)
        op->act_prep(in, prep, n);
    return in;
}

/* One token's experts (already routed: idx/w of token 0) and shared expert
 * in two passes; 0, or -1 (nothing written) when a type has no dot kernel
 * or the widths exceed the buffers, for the general path to handle. */
static int moe_one_token(struct moe_ctx *c, const struct moe_layer *L, const float *x, float *out)
{
    const struct moe_params *p = &c->p;
    const int k = p->n_used, d = p->n_embd;
    const int64_t F = p->n_ff_exp > p->n_ff_shexp ? p->n_ff_exp : p->n_ff_shexp;
    const int64_t ff = L->gate.rows, sff = L->sh_gate.data ? L->sh_gate.ne[1] : 0;
    if (ff > F || sff > F || L->gate.cols != d || L->down.rows != d ||
        (L->sh_gate.data && L->sh_gate.ne[0] != d))
        return -1;
    /* slots in expert order: the sum below adds them as the general path does */
    int ord[64];
    for (int j = 0; j < k; j++) {
        int i = j;
        while (i > 0 && c->idx[ord[i - 1]] > c->idx[j]) {
            ord[i] = ord[i - 1];
            i--;
        }
        ord[i] = j;
    }
    /* pass 1: gate and up rows of every chosen expert (and the shared one),
     * x quantized once per dot type */
    float *pg = c->prep, *pu = L->up.type == L->gate.type ? pg : c->prep + c->prep_n;
    const void *xg = dec_input(L->gate.type, x, d, c->xq[0], pg);
    const void *xu = L->up.type == L->gate.type ? xg : dec_input(L->up.type, x, d, c->xq[1], pu);
    c->n_mat = 0;
    c->mat_start[0] = 0;
    for (int s = 0; s < k; s++) {
        const int e = c->idx[ord[s]];
        const struct omni_tensor g = moe_expert(&L->gate, e), u = moe_expert(&L->up, e);
        if (dec_add(c, &g, xg, pg, c->dg + s * F) || dec_add(c, &u, xu, pu, c->du + s * F))
            return -1;
    }
    if (sff && (L->sh_gate.type != L->gate.type || L->sh_up.type != L->up.type ||
                dec_add(c, &L->sh_gate, xg, pg, c->dg + k * F) ||
                dec_add(c, &L->sh_up, xu, pu, c->du + k * F)))
        return -1;
    /* every type checked before the first product: pass 2's are checked here */
    if (!omni_quant_ops(L->down.type) || (sff && !omni_quant_ops(L->sh_down.type)))
        return -1;
    dec_run(c);

    /* biases, SwiGLU, and each down input in its dot type */
    const size_t aq_row = (size_t)F * sizeof(float);
    const void *a[65];
    for (int s = 0; s <= k; s++) {
        if (s == k && !sff)
            break;
        const int e = s < k ? c->idx[ord[s]] : -1;
        const int64_t w = s < k ? ff : sff;
        float *g = c->dg + s * F, *u = c->du + s * F;
        if (s < k) {
            add_bias(g, L->gate_b ? L->gate_b + e * ff : NULL, 1, ff);
            add_bias(u, L->up_b ? L->up_b + e * ff : NULL, 1, ff);
        }
        if (p->swiglu_limit > 0)
            omni_swiglu_oai(g, u, w, 1.702f, p->swiglu_limit);
        else
            omni_swiglu(g, u, w);
        a[s] = dec_input(s < k ? L->down.type : L->sh_down.type, u, w, c->aq + s * aq_row,
                         c->prep + (size_t)(2 + s) * c->prep_n);
    }
    /* pass 2: the down rows */
    c->n_mat = 0;
    for (int s = 0; s < k; s++) {
        const struct omni_tensor dn = moe_expert(&L->down, c->idx[ord[s]]);
        dec_add(c, &dn, a[s], c->prep + (size_t)(2 + s) * c->prep_n, c->dy + (size_t)s * d);
    }
    if (sff)
        dec_add(c, &L->sh_down, a[k], c->prep + (size_t)(2 + k) * c->prep_n, c->dy + (size_t)k * d);
    dec_run(c);

    /* weighted sum in expert order, then the shared expert */
    memset(out, 0, (size_t)d * sizeof(float));
    for (int s = 0; s < k; s++) {
        const int e = c->idx[ord[s]];
        const float wt = c->w[ord[s]];
        float *y = c->dy + (size_t)s * d;
        add_bias(y, L->down_b ? L->down_b + (int64_t)e * d : NULL, 1, d);
        for (int j = 0; j < d; j++)
            out[j] += wt * y[j];
        c->bytes_read += L->gate.expert_bytes + L->up.expert_bytes + L->down.expert_bytes;
    }
    if (sff) {
        const float sc = shared_scale(L, x, d);
        const float *y = c->dy + (size_t)k * d;
        for (int j = 0; j < d; j++)
            out[j] += sc * y[j];
        c->bytes_read += matrix_bytes(&L->sh_gate) + matrix_bytes(&L->sh_up) + matrix_bytes(&L->sh_down);
    }
    return 0;
}

// ---- several tokens on a pool: whole experts per thread --------------------

/* A product on the calling thread alone, in calls of at most split_rows
 * rows (the caller's batch-invariant mode), as the model's mm would split it. */
static void st_matmul(void *arg, const struct omni_tensor *w, const float *x, int n, float *y)
{
    const struct moe_ctx *c = arg;
    const int step = c->split_rows > 0 ? c->split_rows : n;
    for (int r = 0; r < n; r += step)
        omni_matmul(NULL, w, x + (size_t)r * w->ne[0], n - r < step ? n - r : step,
                    y + (size_t)r * w->ne[1]);
}

/* Threads take the chosen experts one at a time, largest batch first (a
 * thread the machine descheduled holds up one expert, not half of them),
 * and run each one's gate, up and down products on their own; per-row
 * results depend on the batch size alone, not on the threads, so they
 * have the same bits as the pool-split products. */
static void experts_worker(void *arg, int ith, int nth)
{
    struct moe_ctx *c = arg;
    (void)nth;
    const struct moe_layer *L = c->L;
    const struct moe_scratch *b = &c->ts[ith];
    const int k = c->p.n_used, d = c->p.n_embd;
    const int64_t ff = L->gate.rows;
    for (;;) {
        /* past n_list, never a -1 sentinel: with several threads one may
         * take the index after the sentinel, whose entry was never set */
        const int i = atomic_fetch_add(&c->next, 1);
        if (i >= c->n_list)
            break;
        const int e = c->list[i], m = c->count[e];
        const int *slots = c->order + c->start[e];
        for (int r = 0; r < m; r++)
            memcpy(b->xg + (size_t)r * d, c->x + (size_t)(slots[r] / k) * d, (size_t)d * sizeof(float));
        const struct omni_tensor g = moe_expert(&L->gate, e), u = moe_expert(&L->up, e),
                                 dn = moe_expert(&L->down, e);
        expert_mlp_in(c, b, &g, &u, &dn, L->gate_b ? L->gate_b + e * ff : NULL,
                      L->up_b ? L->up_b + e * ff : NULL,
                      L->down_b ? L->down_b + (int64_t)e * d : NULL, m, st_matmul, c);
        for (int r = 0; r < m; r++)
            memcpy(c->ys + (size_t)slots[r] * d, b->xg + (size_t)r * d, (size_t)d * sizeof(float));
    }
}

/* The routed experts of n tokens (routing, count/start/order done) into
 * out; each token's k outputs are added in expert order, as the general
 * path adds them. */
static void experts_on_pool(struct moe_ctx *c, const struct moe_layer *L, const float *x, int n,
                            float *out)
{
    const int k = c->p.n_used, E = c->p.n_expert, d = c->p.n_embd;
    int nl = 0;
    for (int e = 0; e < E; e++) {
        if (!c->count[e])
            continue;
        int i = nl++;
        while (i > 0 && c->count[c->list[i - 1]] < c->count[e]) {
            c->list[i] = c->list[i - 1];
            i--;
        }
        c->list[i] = e;
        c->bytes_read += L->gate.expert_bytes + L->up.expert_bytes + L->down.expert_bytes;
    }
    c->n_list = nl;
    c->L = L;
    c->x = x;
    atomic_store(&c->next, 0);
    tpool_run(c->tp, experts_worker, c);
    for (int t = 0; t < n; t++) {
        int sl[64];
        for (int j = 0; j < k; j++) { /* the token's slots in expert order */
            int i = j;
            while (i > 0 && c->idx[(size_t)t * k + sl[i - 1]] > c->idx[(size_t)t * k + j]) {
                sl[i] = sl[i - 1];
                i--;
            }
            sl[i] = j;
        }
        float *o = out + (size_t)t * d;
        memset(o, 0, (size_t)d * sizeof(float));
        for (int j = 0; j < k; j++) {
            const size_t s = (size_t)t * k + sl[j];
            const float wt = c->w[s], *y = c->ys + s * d;
            for (int i = 0; i < d; i++)
                o[i] += wt * y[i];
        }
    }
}

// ---- any number of tokens --------------------------------------------------

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
    if (n == 1 && moe_one_token(c, L, x, out) == 0)
        return 0;
    /* slots (t * k + j) grouped by expert, tokens in order within each */
    c->start[0] = 0;
    for (int e = 0; e < E; e++)
        c->start[e + 1] = c->start[e] + c->count[e];
    memset(c->count, 0, (size_t)E * sizeof(int));
    for (int s = 0; s < n * k; s++) {
        const int e = c->idx[s];
        c->order[c->start[e] + c->count[e]++] = s;
    }

    if (c->tp && c->n_thr > 1 && c->ys && tpool_size(c->tp) <= c->n_thr) {
        experts_on_pool(c, L, x, n, out);
        goto shared;
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

shared:
    /* shared expert: every token, scaled by sigmoid(x . sh_router) where present */
    if (L->sh_gate.data) {
        memcpy(c->xg, x, (size_t)n * d * sizeof(float));
        expert_mlp(c, &L->sh_gate, &L->sh_up, &L->sh_down, NULL, NULL, NULL, n, mm, mm_arg);
        c->bytes_read += matrix_bytes(&L->sh_gate) + matrix_bytes(&L->sh_up) + matrix_bytes(&L->sh_down);
        for (int t = 0; t < n; t++) {
            const float s = shared_scale(L, x + (size_t)t * d, d);
            float *o = out + (size_t)t * d;
            const float *y = c->xg + (size_t)t * d;
            for (int j = 0; j < d; j++)
                o[j] += s * y[j];
        }
    }
    return 0;
}
