/* test_deltanet.c - the Gated DeltaNet layer (llm/deltanet.h) on small
 * random F32 weights: the recurrence against the formula in double, one
 * batch against token-by-token runs resumed from the state, snapshots equal
 * the live state, threads change no bit, and the grouped / tiled value-head
 * layouts read the key heads they name. The models' golden tests
 * (tests/test_model.c, qwen3next) check the layer against transformers. */
#include "test.h"

#include "llm/deltanet.h"
#include "src/core/cpu.h"
#include "src/core/omni.h"
#include "src/core/ops.h"
#include "src/core/tensor.h"
#include "src/core/threadpool.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static float frand(unsigned *s)
{
    *s = *s * 1103515245u + 12345u;
    return ((float)((*s >> 8) & 0xffff) / 65536.0f - 0.5f) * 2.0f;
}

static float *rand_vec(size_t n, float scale, unsigned *seed)
{
    float *v = malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++)
        v[i] = scale * frand(seed);
    return v;
}

TEST(deltanet_step_matches_formula)
{
    enum { DK = 5, DV = 7 };
    unsigned seed = 11;
    float S[DK * DV], q[DK], k[DK], v[DV], o[DV];
    double Sd[DK][DV];
    for (int i = 0; i < DK * DV; i++)
        S[i] = frand(&seed), Sd[i / DV][i % DV] = S[i];
    for (int i = 0; i < DK; i++)
        q[i] = frand(&seed), k[i] = frand(&seed);
    for (int j = 0; j < DV; j++)
        v[j] = frand(&seed);
    const float g = -0.3f, beta = 0.7f;
    gdn_delta_step(S, q, k, v, g, beta, DK, DV, o);
    /* S = e^g S; S += k (beta (v - S^T k))^T; o = S^T q */
    double kv[DV] = { 0 };
    for (int i = 0; i < DK; i++)
        for (int j = 0; j < DV; j++)
            Sd[i][j] *= exp(g), kv[j] += Sd[i][j] * k[i];
    for (int i = 0; i < DK; i++)
        for (int j = 0; j < DV; j++)
            Sd[i][j] += k[i] * beta * (v[j] - kv[j]);
    for (int j = 0; j < DV; j++) {
        double od = 0;
        for (int i = 0; i < DK; i++)
            od += Sd[i][j] * q[i];
        CHECK_MSG(fabs(od - o[j]) < 1e-5, "o[%d] %g vs %g", j, o[j], od);
        for (int i = 0; i < DK; i++)
            CHECK(fabs(Sd[i][j] - S[i * DV + j]) < 1e-5);
    }
}

/* The ops table's delta_rule at every CPU level this machine has (one
 * pass over S by column blocks, o from the old state) against the plain-C
 * reference (S updated, then o = S^T q), for head shapes with and without
 * a tail past the vector width. */
TEST(deltanet_delta_rule_levels)
{
    static const int shapes[][2] = { { 128, 128 }, { 8, 6 }, { 16, 20 }, { 5, 7 }, { 64, 40 }, { 32, 72 } };
    const struct omni_ops *ref = omni_ops_reference();
    unsigned seed = 7;
    for (size_t sh = 0; sh < sizeof shapes / sizeof shapes[0]; sh++) {
        const int dk = shapes[sh][0], dv = shapes[sh][1];
        float *S0 = rand_vec((size_t)dk * dv, 1.0f, &seed), *q = rand_vec(dk, 0.3f, &seed);
        float *k = rand_vec(dk, 0.3f, &seed), *v = rand_vec(dv, 1.0f, &seed);
        float *S1 = malloc((size_t)dk * dv * sizeof(float)), *S2 = malloc((size_t)dk * dv * sizeof(float));
        float *o1 = malloc((size_t)dv * sizeof(float)), *o2 = malloc((size_t)dv * sizeof(float));
        memcpy(S1, S0, (size_t)dk * dv * sizeof(float));
        ref->delta_rule(S1, q, k, v, 0.8f, 0.6f, dk, dv, o1);
        for (int lvl = 0; lvl <= omni_cpu()->max_level; lvl++) {
            const struct omni_ops *op = omni_ops_at(lvl);
            memcpy(S2, S0, (size_t)dk * dv * sizeof(float));
            op->delta_rule(S2, q, k, v, 0.8f, 0.6f, dk, dv, o2);
            CHECK_MSG(test_max_diff(o2, o1, (size_t)dv) < 1e-5f * (1.0f + dk / 16.0f),
                      "%s: o of %dx%d differs by %g", op->name, dk, dv,
                      (double)test_max_diff(o2, o1, (size_t)dv));
            CHECK_MSG(test_max_diff(S2, S1, (size_t)dk * dv) < 1e-5f, "%s: S of %dx%d", op->name,
                      dk, dv);
        }
        free(S0), free(q), free(k), free(v), free(S1), free(S2), free(o1), free(o2);
    }
}

struct rand_layer {
    struct gdn_params p;
    struct gdn_layer L;
    float *w[8];
};

static struct omni_tensor f32_matrix(float *data, int rows, int cols)
{
    return (struct omni_tensor){ .type = GGML_TYPE_F32, .ne = { cols, rows }, .data = data };
}

static void rand_layer_init(struct rand_layer *r, bool tiled, bool fused_ba, unsigned seed)
{
    memset(r, 0, sizeof *r);
    r->p = (struct gdn_params){ .n_embd = 24, .n_k_heads = 2, .n_v_heads = 4, .head_k = 8,
                                .head_v = 6, .kernel = 4, .tiled = tiled, .norm_eps = 1e-6f };
    const int E = r->p.n_embd, C = gdn_conv_dim(&r->p), nv = r->p.n_v_heads;
    const int vd = nv * r->p.head_v;
    r->w[0] = rand_vec((size_t)C * E, 0.4f, &seed);
    r->w[1] = rand_vec((size_t)vd * E, 0.4f, &seed);
    r->w[2] = rand_vec((size_t)2 * nv * E, 0.4f, &seed);
    r->w[3] = rand_vec((size_t)C * r->p.kernel, 0.5f, &seed);
    r->w[4] = rand_vec((size_t)nv, 0.5f, &seed);              /* dt bias */
    r->w[5] = rand_vec((size_t)nv, 1.0f, &seed);              /* A = -exp(.) */
    for (int h = 0; h < nv; h++)
        r->w[5][h] = -expf(r->w[5][h]);
    r->w[6] = rand_vec((size_t)r->p.head_v, 0.2f, &seed);
    for (int i = 0; i < r->p.head_v; i++)
        r->w[6][i] += 1.0f;
    r->w[7] = rand_vec((size_t)E * vd, 0.4f, &seed);
    r->L.qkv = f32_matrix(r->w[0], C, E);
    r->L.gate = f32_matrix(r->w[1], vd, E);
    if (fused_ba) {
        r->L.ba = f32_matrix(r->w[2], 2 * nv, E);
    } else {
        r->L.beta = f32_matrix(r->w[2], nv, E);
        r->L.alpha = f32_matrix(r->w[2] + (size_t)nv * E, nv, E);
    }
    r->L.conv_w = r->w[3];
    r->L.dt_bias = r->w[4];
    r->L.a = r->w[5];
    r->L.norm = r->w[6];
    r->L.out = f32_matrix(r->w[7], E, vd);
    r->L.state_off = 3; /* the layer's floats start past another layer's */
}

static void rand_layer_free(struct rand_layer *r)
{
    for (int i = 0; i < 8; i++)
        free(r->w[i]);
}

static void mm_f32(void *arg, const struct omni_tensor *w, const float *x, int n, float *y)
{
    (void)arg;
    const float *W = w->data;
    for (int t = 0; t < n; t++)
        for (int r = 0; r < w->ne[1]; r++) {
            double s = 0;
            for (int c = 0; c < w->ne[0]; c++)
                s += (double)W[(size_t)r * w->ne[0] + c] * x[(size_t)t * w->ne[0] + c];
            y[(size_t)t * w->ne[1] + r] = (float)s;
        }
}

static void free_tp(void *tp) { tpool_free(tp); }

/* 13 tokens of one sequence: one batch (with and without threads), chunks
 * of 1, 4 and 5 resumed from the state, snapshots after every token equal
 * the state the next run starts from. */
static void check_chunks(bool tiled, bool fused_ba)
{
    enum { N = 13 };
    struct rand_layer r;
    rand_layer_init(&r, tiled, fused_ba, tiled * 2 + fused_ba + 5);
    char err[256];
    struct tpool *tp = tpool_new(2, err, sizeof err);
    CHECK(tp);
    test_defer(free_tp, tp);
    struct gdn_ctx *c1 = gdn_ctx_new(&r.p, N, NULL, err, sizeof err);
    struct gdn_ctx *c2 = gdn_ctx_new(&r.p, N, tp, err, sizeof err);
    CHECK_MSG(c1 && c2, "%s", err);
    const size_t S = r.L.state_off + gdn_state_floats(&r.p);
    const int E = r.p.n_embd;
    unsigned seed = 99;
    float *x = rand_vec((size_t)N * E, 1.0f, &seed);
    float *ref = malloc((size_t)N * E * sizeof(float)), *out = malloc((size_t)N * E * sizeof(float));
    float *st = calloc(S, sizeof(float)), *st2 = calloc(S, sizeof(float));
    float *snaps = calloc((size_t)N * S, sizeof(float));
    struct gdn_token tok[N];
    for (int t = 0; t < N; t++)
        tok[t] = (struct gdn_token){ .state = st, .snap = snaps + (size_t)t * S, .reset = t == 0 };
    for (size_t i = 0; i < S; i++)
        st[i] = 5.0f; /* reset must clear whatever was there */
    CHECK_EQ(gdn_forward(c1, &r.L, x, N, tok, ref, mm_f32, NULL), 0);
    /* threads: the same bits */
    for (int t = 0; t < N; t++)
        tok[t] = (struct gdn_token){ .state = st2, .reset = t == 0 };
    CHECK_EQ(gdn_forward(c2, &r.L, x, N, tok, out, mm_f32, NULL), 0);
    CHECK(memcmp(out, ref, (size_t)N * E * sizeof(float)) == 0);
    CHECK(memcmp(st + r.L.state_off, st2 + r.L.state_off,
                 (S - r.L.state_off) * sizeof(float)) == 0);
    CHECK(memcmp(snaps + (size_t)(N - 1) * S + r.L.state_off, st + r.L.state_off,
                 (S - r.L.state_off) * sizeof(float)) == 0);
    /* chunks resumed from the state */
    const int chunks[] = { 1, 4, 5 };
    for (int k = 0; k < 3; k++) {
        memset(st2, 0, S * sizeof(float));
        for (int t0 = 0; t0 < N; t0 += chunks[k]) {
            const int m = N - t0 < chunks[k] ? N - t0 : chunks[k];
            for (int t = 0; t < m; t++)
                tok[t] = (struct gdn_token){ .state = st2, .reset = t0 + t == 0 };
            CHECK_EQ(gdn_forward(c2, &r.L, x + (size_t)t0 * E, m, tok, out + (size_t)t0 * E,
                                 mm_f32, NULL), 0);
        }
        CHECK_MSG(test_max_diff(out, ref, (size_t)N * E) < 1e-5, "chunks of %d", chunks[k]);
    }
    /* a snapshot after token 6 resumes the rest exactly */
    memcpy(st2, snaps + (size_t)6 * S, S * sizeof(float));
    for (int t = 0; t < N - 7; t++)
        tok[t] = (struct gdn_token){ .state = st2 };
    CHECK_EQ(gdn_forward(c1, &r.L, x + (size_t)7 * E, N - 7, tok, out, mm_f32, NULL), 0);
    CHECK(memcmp(out, ref + (size_t)7 * E, (size_t)(N - 7) * E * sizeof(float)) == 0);
    CHECK_EQ(gdn_forward(c1, &r.L, x, N + 1, tok, out, mm_f32, NULL), OMNI_ERR_ARG);
    free(x), free(ref), free(out), free(st), free(st2), free(snaps);
    gdn_ctx_free(c1);
    gdn_ctx_free(c2);
    rand_layer_free(&r);
    test_release(tp);
}

TEST(deltanet_chunks_grouped_fused_ba) { check_chunks(false, true); }
TEST(deltanet_chunks_tiled_split_ba) { check_chunks(true, false); }

/* Value head 1 of 4 over 2 key heads reads key head 0 grouped (1 / 2) and
 * key head 1 tiled (1 % 2): zeroing key head 1's q/k rows changes head 1's
 * output only in the tiled layout. */
TEST(deltanet_head_layouts)
{
    for (int tiled = 0; tiled < 2; tiled++) {
        struct rand_layer r;
        rand_layer_init(&r, tiled, true, 3);
        char err[256];
        struct gdn_ctx *c = gdn_ctx_new(&r.p, 2, NULL, err, sizeof err);
        CHECK(c);
        const int E = r.p.n_embd, dk = r.p.head_k, dv = r.p.head_v;
        const size_t S = r.L.state_off + gdn_state_floats(&r.p);
        float *st = calloc(S, sizeof(float));
        unsigned seed = 7;
        float *x = rand_vec((size_t)2 * E, 1.0f, &seed);
        /* outputs before W_out: make W_out pick head 1's first value */
        memset(r.w[7], 0, (size_t)E * r.p.n_v_heads * dv * sizeof(float));
        r.w[7][dv] = 1.0f; /* row 0, column dv: head 1, value 0 */
        struct gdn_token tok[2] = { { .state = st, .reset = true }, { .state = st } };
        float a[2 * 24], b[2 * 24];
        CHECK_EQ(gdn_forward(c, &r.L, x, 2, tok, a, mm_f32, NULL), 0);
        /* key head 1: q rows dk..2dk and k rows 2dk + dk .. 4dk */
        for (int i = 0; i < dk; i++)
            for (int col = 0; col < E; col++)
                r.w[0][(size_t)(dk + i) * E + col] = r.w[0][(size_t)(3 * dk + i) * E + col] = 0.0f;
        CHECK_EQ(gdn_forward(c, &r.L, x, 2, tok, b, mm_f32, NULL), 0);
        CHECK_MSG((a[E] != b[E]) == (tiled == 1), "tiled %d: %g vs %g", tiled, a[E], b[E]);
        free(st), free(x);
        gdn_ctx_free(c);
        rand_layer_free(&r);
    }
}

TEST(deltanet_bad_sizes)
{
    char err[256];
    struct gdn_params p = { .n_embd = 8, .n_k_heads = 3, .n_v_heads = 4, .head_k = 4,
                            .head_v = 4, .kernel = 4 };
    CHECK(!gdn_ctx_new(&p, 4, NULL, err, sizeof err));
    CHECK_STR_CONTAINS(err, "multiple of key heads");
}

/* Older Qwen3-Next GGUFs' ssm_in (per key head its q, k, v and z rows) gives
 * the same bits as attn_qkv + attn_gate holding those rows. */
TEST(deltanet_ssm_in_equals_split)
{
    enum { N = 5 };
    struct rand_layer r;
    rand_layer_init(&r, false, true, 21);
    r.p.fused_qkvz = true;
    const int E = r.p.n_embd, C = gdn_conv_dim(&r.p), nk = r.p.n_k_heads, dk = r.p.head_k;
    const int rv = r.p.n_v_heads / nk * r.p.head_v, vd = r.p.n_v_heads * r.p.head_v;
    float *qkvz = malloc((size_t)(C + vd) * E * sizeof(float));
    for (int h = 0, row = 0; h < nk; h++) { /* q, k, v, z rows of key head h */
        const int from[4] = { h * dk, nk * dk + h * dk, 2 * nk * dk + h * rv, h * rv };
        const int len[4] = { dk, dk, rv, rv };
        for (int part = 0; part < 4; part++)
            for (int i = 0; i < len[part]; i++, row++)
                memcpy(qkvz + (size_t)row * E,
                       (part < 3 ? r.w[0] : r.w[1]) + (size_t)(from[part] + i) * E,
                       (size_t)E * sizeof(float));
    }
    char err[256];
    struct gdn_ctx *c = gdn_ctx_new(&r.p, N, NULL, err, sizeof err);
    CHECK(c);
    const size_t S = r.L.state_off + gdn_state_floats(&r.p);
    float *st = calloc(S, sizeof(float));
    unsigned seed = 5;
    float *x = rand_vec((size_t)N * E, 1.0f, &seed);
    float a[N * 24], b[N * 24];
    struct gdn_token tok[N];
    for (int t = 0; t < N; t++)
        tok[t] = (struct gdn_token){ .state = st, .reset = t == 0 };
    CHECK_EQ(gdn_forward(c, &r.L, x, N, tok, a, mm_f32, NULL), 0);
    r.L.qkvz = f32_matrix(qkvz, C + vd, E);
    r.L.qkv = r.L.gate = (struct omni_tensor){ 0 };
    CHECK_EQ(gdn_forward(c, &r.L, x, N, tok, b, mm_f32, NULL), 0);
    CHECK(memcmp(a, b, sizeof a) == 0);
    free(st), free(x), free(qkvz);
    gdn_ctx_free(c);
    rand_layer_free(&r);
}

/* The input projections through the multi-product hook (the model's
 * omni_matmul_multi): one call of 3 (ssm_ba) or 4 (beta, alpha) weights,
 * outputs where the one-by-one products put them. */
static int multi_calls, multi_nw;
static void multi_f32(void *arg, const struct omni_tensor *const *w, int n_w, const float *x,
                      int n, float *const *y)
{
    multi_calls++;
    multi_nw = n_w;
    for (int k = 0; k < n_w; k++)
        mm_f32(arg, w[k], x, n, y[k]);
}

TEST(deltanet_matmul_multi_same_bits)
{
    enum { N = 6 };
    for (int fused_ba = 0; fused_ba < 2; fused_ba++) {
        struct rand_layer r;
        rand_layer_init(&r, !fused_ba, fused_ba, 31 + fused_ba);
        char err[256];
        struct gdn_ctx *c = gdn_ctx_new(&r.p, N, NULL, err, sizeof err);
        CHECK_MSG(c, "%s", err);
        const size_t S = r.L.state_off + gdn_state_floats(&r.p);
        const int E = r.p.n_embd;
        float *st = calloc(S, sizeof(float));
        unsigned seed = 7;
        float *x = rand_vec((size_t)N * E, 1.0f, &seed);
        float a[N * 24], b[N * 24];
        struct gdn_token tok[N];
        for (int t = 0; t < N; t++)
            tok[t] = (struct gdn_token){ .state = st, .reset = t == 0 };
        CHECK_EQ(gdn_forward(c, &r.L, x, N, tok, a, mm_f32, NULL), 0);
        gdn_ctx_set_matmul_multi(c, multi_f32);
        multi_calls = multi_nw = 0;
        CHECK_EQ(gdn_forward(c, &r.L, x, N, tok, b, mm_f32, NULL), 0);
        CHECK_EQ(multi_calls, 1);
        CHECK_EQ(multi_nw, fused_ba ? 3 : 4);
        CHECK(memcmp(a, b, sizeof a) == 0);
        free(st), free(x);
        gdn_ctx_free(c);
        rand_layer_free(&r);
    }
}
