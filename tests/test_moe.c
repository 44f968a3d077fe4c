/* test_moe.c - the mixture-of-experts feed-forward (llm/moe.c) against a
 * plain per-token reference on seeded random weights: routing (softmax,
 * top-k, ties to the lower index, renormalised or not), a prefill batch
 * equal to the same tokens one at a time, the shared expert, and the bytes
 * counter reading only the experts some token chose; one token's two-pass
 * path (quantized experts, with and without a pool) bit for bit equal to
 * the expert-by-expert products it replaces. */
#include "test.h"

#include "llm/moe.h"
#include "src/core/omni.h"
#include "src/core/quant.h"
#include "src/core/matmul.h"
#include "src/core/ops.h"
#include "src/core/tensor.h"
#include "src/core/threadpool.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { D = 64, FF = 32, NE = 8, K = 2, SFF = 48, T = 12 };

static uint64_t rng_state = 88172645463325252ull;
static float frand(void) /* uniform in [-1, 1) */
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (float)((rng_state >> 11) * (1.0 / 9007199254740992.0)) * 2.0f - 1.0f;
}

static float *rand_floats(size_t n, float scale)
{
    float *p = malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++)
        p[i] = frand() * scale;
    return p;
}

/* y = W x for a [rows][cols] float matrix */
static void matvec(const float *w, const float *x, int rows, int cols, float *y)
{
    for (int r = 0; r < rows; r++) {
        double s = 0;
        for (int c = 0; c < cols; c++)
            s += (double)w[(size_t)r * cols + c] * x[c];
        y[r] = (float)s;
    }
}

/* out += scale * down(silu(gate x) * up x) */
static void ref_mlp(const float *g, const float *u, const float *d, int ff, const float *x,
                    float scale, float *out)
{
    float a[SFF], b[SFF], y[D];
    matvec(g, x, ff, D, a);
    matvec(u, x, ff, D, b);
    for (int i = 0; i < ff; i++)
        a[i] = a[i] / (1.0f + expf(-a[i])) * b[i];
    matvec(d, a, D, ff, y);
    for (int i = 0; i < D; i++)
        out[i] += scale * y[i];
}

struct fixture {
    float *router, *ge, *ue, *de, *sg, *su, *sd, *sr;
    struct moe_layer L;
};

static void fixture_init(struct fixture *f, bool shared)
{
    memset(f, 0, sizeof *f);
    f->router = rand_floats((size_t)NE * D, 0.5f);
    f->ge = rand_floats((size_t)NE * FF * D, 0.2f);
    f->ue = rand_floats((size_t)NE * FF * D, 0.2f);
    f->de = rand_floats((size_t)NE * D * FF, 0.2f);
    f->L.router = (struct omni_tensor){ .type = GGML_TYPE_F32, .ne = { D, NE }, .data = f->router };
    f->L.gate = (struct moe_experts){ .type = GGML_TYPE_F32, .cols = D, .rows = FF, .n_expert = NE,
                                    .expert_bytes = (size_t)FF * D * 4, .data = f->ge };
    f->L.up = (struct moe_experts){ .type = GGML_TYPE_F32, .cols = D, .rows = FF, .n_expert = NE,
                                    .expert_bytes = (size_t)FF * D * 4, .data = f->ue };
    f->L.down = (struct moe_experts){ .type = GGML_TYPE_F32, .cols = FF, .rows = D, .n_expert = NE,
                                    .expert_bytes = (size_t)D * FF * 4, .data = f->de };
    if (shared) {
        f->sg = rand_floats((size_t)SFF * D, 0.2f);
        f->su = rand_floats((size_t)SFF * D, 0.2f);
        f->sd = rand_floats((size_t)D * SFF, 0.2f);
        f->sr = rand_floats(D, 0.3f);
        f->L.sh_gate = (struct omni_tensor){ .type = GGML_TYPE_F32, .ne = { D, SFF }, .data = f->sg };
        f->L.sh_up = (struct omni_tensor){ .type = GGML_TYPE_F32, .ne = { D, SFF }, .data = f->su };
        f->L.sh_down = (struct omni_tensor){ .type = GGML_TYPE_F32, .ne = { SFF, D }, .data = f->sd };
        f->L.sh_router = f->sr;
    }
}

static void fixture_free(struct fixture *f)
{
    free(f->router), free(f->ge), free(f->ue), free(f->de);
    free(f->sg), free(f->su), free(f->sd), free(f->sr);
}

/* The reference: softmax over all experts, the K largest, optionally
 * renormalised, each expert's MLP on the token alone. */
static void ref_moe(const struct fixture *f, bool norm, const float *x, float *out, int *chosen)
{
    float lg[NE];
    matvec(f->router, x, NE, D, lg);
    double p[NE], sum = 0;
    for (int e = 0; e < NE; e++)
        sum += p[e] = exp(lg[e]);
    int idx[K];
    for (int j = 0; j < K; j++) {
        int best = -1;
        for (int e = 0; e < NE; e++) {
            bool used = false;
            for (int i = 0; i < j; i++)
                used |= idx[i] == e;
            if (!used && (best < 0 || p[e] > p[best]))
                best = e;
        }
        idx[j] = best;
    }
    double wsum = 0;
    for (int j = 0; j < K; j++)
        wsum += p[idx[j]] / sum;
    memset(out, 0, D * sizeof(float));
    for (int j = 0; j < K; j++) {
        const int e = idx[j];
        const float w = (float)(p[e] / sum / (norm ? wsum : 1.0));
        ref_mlp(f->ge + (size_t)e * FF * D, f->ue + (size_t)e * FF * D, f->de + (size_t)e * D * FF,
                FF, x, w, out);
        chosen[e] = 1;
    }
    if (f->sg) {
        double z = 0;
        for (int i = 0; i < D; i++)
            z += (double)f->sr[i] * x[i];
        ref_mlp(f->sg, f->su, f->sd, SFF, x, (float)(1 / (1 + exp(-z))), out);
    }
}

static void check_moe(bool norm, bool shared)
{
    struct fixture f;
    fixture_init(&f, shared);
    char err[256];
    const struct moe_params p = { .n_embd = D, .n_expert = NE, .n_used = K, .n_ff_exp = FF,
                                  .n_ff_shexp = shared ? SFF : 0, .norm_weights = norm };
    struct moe_ctx *c = moe_ctx_new(&p, T, err, sizeof err);
    CHECK_MSG(c, "%s", err);
    float *x = rand_floats((size_t)T * D, 1.0f), out[T * D], one[T * D], want[T * D];
    int chosen[NE] = { 0 };
    for (int t = 0; t < T; t++)
        ref_moe(&f, norm, x + t * D, want + t * D, chosen);
    CHECK_EQ(moe_forward(c, &f.L, x, T, out, NULL, NULL), 0);
    for (int t = 0; t < T; t++)
        CHECK_EQ(moe_forward(c, &f.L, x + t * D, 1, one + t * D, NULL, NULL), 0);
    const double d = test_max_diff(out, want, T * D), d1 = test_max_diff(one, want, T * D);
    CHECK_MSG(d < 1e-5 && d1 < 1e-5, "norm %d shared %d: batch %g, one by one %g", norm, shared,
              d, d1);
    /* batch of T: the router once, each chosen expert once */
    moe_ctx_reset_bytes_read(c);
    CHECK_EQ(moe_forward(c, &f.L, x, T, out, NULL, NULL), 0);
    int n_chosen = 0;
    for (int e = 0; e < NE; e++)
        n_chosen += chosen[e];
    const uint64_t expert = (uint64_t)3 * FF * D * 4, sh = shared ? (uint64_t)3 * SFF * D * 4 : 0;
    CHECK_EQ(moe_ctx_bytes_read(c), (uint64_t)NE * D * 4 + n_chosen * expert + sh);
    /* one token: K experts */
    moe_ctx_reset_bytes_read(c);
    CHECK_EQ(moe_forward(c, &f.L, x, 1, out, NULL, NULL), 0);
    CHECK_EQ(moe_ctx_bytes_read(c), (uint64_t)NE * D * 4 + K * expert + sh);
    CHECK_EQ(moe_forward(c, &f.L, x, T + 1, out, NULL, NULL), OMNI_ERR_ARG);
    free(x);
    moe_ctx_free(c);
    fixture_free(&f);
}

TEST(moe_matches_reference) { check_moe(true, false); }
TEST(moe_unnormalised_weights) { check_moe(false, false); }
TEST(moe_shared_expert) { check_moe(true, true); }

TEST(moe_route_ties_and_weights)
{
    const float lg[6] = { 1.0f, 3.0f, 2.0f, 3.0f, -1.0f, 2.0f };
    int idx[3];
    float w[3];
    moe_route(lg, 6, 3, false, idx, w);
    /* equal logits: the lower index first, as the first-come order */
    CHECK_EQ(idx[0], 1);
    CHECK_EQ(idx[1], 3);
    CHECK_EQ(idx[2], 2);
    double z = 0;
    for (int e = 0; e < 6; e++)
        z += exp(lg[e]);
    CHECK_NEAR(w[0], exp(3.0) / z, 1e-6);
    CHECK_NEAR(w[2], exp(2.0) / z, 1e-6);
    moe_route(lg, 6, 3, true, idx, w);
    CHECK_NEAR(w[0] + w[1] + w[2], 1.0, 1e-6);
    CHECK_NEAR(w[0], exp(3.0) / (2 * exp(3.0) + exp(2.0)), 1e-6);
    /* k = n_expert: everything, in order */
    int all[6];
    float wa[6];
    moe_route(lg, 6, 6, true, all, wa);
    CHECK_EQ(all[5], 4);
}

TEST(moe_bad_params)
{
    char err[256];
    struct moe_params p = { .n_embd = D, .n_expert = NE, .n_used = NE + 1, .n_ff_exp = FF,
                            .norm_weights = true };
    CHECK(!moe_ctx_new(&p, 4, err, sizeof err));
    CHECK_STR_CONTAINS(err, "moe:");
    p.n_used = 0;
    CHECK(!moe_ctx_new(&p, 4, err, sizeof err));
    p.n_used = K;
    CHECK(!moe_ctx_new(&p, 0, err, sizeof err));
    moe_ctx_free(NULL);
}

/* One token through Q4_K_M-like experts (gate/up q4_K, down q6_K, a q8_0
 * shared down) equals, bit for bit, what the expert-by-expert path computed
 * for it: one-row omni_matmul products, SwiGLU, the sum in expert order. */
enum { QD = 256, QFF = 256, QNE = 8, QK = 3 };

static void *quant_matrix(int type, int rows, int cols)
{
    const size_t row = ggml_row_size(type, cols);
    uint8_t *q = malloc(row * rows);
    float *f = rand_floats((size_t)cols, 0.1f);
    for (int r = 0; r < rows; r++) {
        for (int c = 0; c < cols; c++)
            f[c] = frand() * 0.1f;
        quantize_row(type, f, q + row * r, cols);
    }
    free(f);
    return q;
}

static void quant_one_token(bool shared, struct tpool *tp)
{
    const size_t ge = ggml_row_size(GGML_TYPE_Q4_K, QD) * QFF, de = ggml_row_size(GGML_TYPE_Q6_K, QFF) * QD;
    float *router = rand_floats((size_t)QNE * QD, 0.5f);
    struct moe_layer L = {
        .router = { .type = GGML_TYPE_F32, .ne = { QD, QNE }, .data = router },
        .gate = { .type = GGML_TYPE_Q4_K, .cols = QD, .rows = QFF, .n_expert = QNE, .expert_bytes = ge,
                  .data = quant_matrix(GGML_TYPE_Q4_K, QNE * QFF, QD) },
        .up = { .type = GGML_TYPE_Q4_K, .cols = QD, .rows = QFF, .n_expert = QNE, .expert_bytes = ge,
                .data = quant_matrix(GGML_TYPE_Q4_K, QNE * QFF, QD) },
        .down = { .type = GGML_TYPE_Q6_K, .cols = QFF, .rows = QD, .n_expert = QNE, .expert_bytes = de,
                  .data = quant_matrix(GGML_TYPE_Q6_K, QNE * QD, QFF) },
    };
    float *shr = NULL;
    if (shared) {
        L.sh_gate = (struct omni_tensor){ .type = GGML_TYPE_Q4_K, .ne = { QD, QFF },
                                          .data = quant_matrix(GGML_TYPE_Q4_K, QFF, QD) };
        L.sh_up = (struct omni_tensor){ .type = GGML_TYPE_Q4_K, .ne = { QD, QFF },
                                        .data = quant_matrix(GGML_TYPE_Q4_K, QFF, QD) };
        L.sh_down = (struct omni_tensor){ .type = GGML_TYPE_Q8_0, .ne = { QFF, QD },
                                          .data = quant_matrix(GGML_TYPE_Q8_0, QD, QFF) };
        L.sh_router = shr = rand_floats(QD, 0.1f);
    }
    const struct moe_params p = { .n_embd = QD, .n_expert = QNE, .n_used = QK, .n_ff_exp = QFF,
                                  .n_ff_shexp = shared ? QFF : 0, .norm_weights = true };
    char err[256];
    struct moe_ctx *c = moe_ctx_new(&p, 4, err, sizeof err);
    CHECK_MSG(c, "%s", err);
    CHECK_EQ(moe_ctx_set_pool(c, tp, err, sizeof err), 0);
    float *x = rand_floats(QD, 1.0f), out[QD], want[QD], lg[QNE], g[QFF], u[QFF], y[QD];
    for (int rep = 0; rep < 3; rep++) {
        for (int i = 0; i < QD; i++)
            x[i] = frand();
        /* the expert-by-expert path */
        omni_matmul(NULL, &L.router, x, 1, lg);
        int idx[QK];
        float w[QK];
        moe_route(lg, QNE, QK, true, idx, w);
        memset(want, 0, sizeof want);
        for (int e = 0; e < QNE; e++)
            for (int j = 0; j < QK; j++) {
                if (idx[j] != e)
                    continue;
                const struct omni_tensor tg = moe_expert(&L.gate, e), tu = moe_expert(&L.up, e),
                                         td = moe_expert(&L.down, e);
                omni_matmul(NULL, &tg, x, 1, g);
                omni_matmul(NULL, &tu, x, 1, u);
                omni_swiglu(g, u, QFF);
                omni_matmul(NULL, &td, u, 1, y);
                for (int i = 0; i < QD; i++)
                    want[i] += w[j] * y[i];
            }
        if (shared) {
            omni_matmul(NULL, &L.sh_gate, x, 1, g);
            omni_matmul(NULL, &L.sh_up, x, 1, u);
            omni_swiglu(g, u, QFF);
            omni_matmul(NULL, &L.sh_down, u, 1, y);
            double z = 0.0;
            for (int i = 0; i < QD; i++)
                z += (double)shr[i] * x[i];
            const float s = (float)(1.0 / (1.0 + exp(-z)));
            for (int i = 0; i < QD; i++)
                want[i] += s * y[i];
        }
        moe_ctx_reset_bytes_read(c);
        CHECK_EQ(moe_forward(c, &L, x, 1, out, NULL, NULL), 0);
        CHECK_MSG(memcmp(out, want, sizeof out) == 0, "shared %d pool %d: max diff %g", shared,
                  tp != NULL, test_max_diff(out, want, QD));
        const uint64_t sh = shared ? 2 * ge + ggml_row_size(GGML_TYPE_Q8_0, QFF) * QD : 0;
        CHECK_EQ(moe_ctx_bytes_read(c), (uint64_t)QNE * QD * 4 + QK * (2 * ge + de) + sh);
    }
    /* a batch: whole experts per pool thread == the products split over it */
    enum { B = 4 };
    float xb[B * QD], ob[B * QD], wb[B * QD];
    for (int i = 0; i < B * QD; i++)
        xb[i] = frand();
    struct moe_ctx *c1 = moe_ctx_new(&p, B, err, sizeof err);
    CHECK_MSG(c1, "%s", err);
    CHECK_EQ(moe_forward(c1, &L, xb, B, wb, NULL, NULL), 0);
    CHECK_EQ(moe_forward(c, &L, xb, B, ob, NULL, NULL), 0);
    CHECK_MSG(memcmp(ob, wb, sizeof ob) == 0, "batch, shared %d pool %d: max diff %g", shared,
              tp != NULL, test_max_diff(ob, wb, B * QD));
    moe_ctx_free(c1);
    free(x);
    free(router);
    free(shr);
    free((void *)L.gate.data);
    free((void *)L.up.data);
    free((void *)L.down.data);
    free((void *)L.sh_gate.data);
    free((void *)L.sh_up.data);
    free((void *)L.sh_down.data);
    moe_ctx_free(c);
}

TEST(moe_one_token_quantized_bit_exact)
{
    char err[128];
    struct tpool *tp = tpool_new(2, err, sizeof err), *tp3 = tpool_new(3, err, sizeof err);
    CHECK_MSG(tp && tp3, "%s", err);
    /* a pass's rows split by weight bytes: q6_K expert rows beside the
     * shared expert's q8_0 ones, over 2 and 3 threads */
    for (int shared = 0; shared < 2; shared++) {
        quant_one_token(shared, NULL);
        quant_one_token(shared, tp);
        quant_one_token(shared, tp3);
    }
    tpool_free(tp);
    tpool_free(tp3);
}
