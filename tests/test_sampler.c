/* test_sampler.c - the sampling chain on hand-made logits: greedy, each
 * truncation, temperature, penalties, bias, logprobs, seeded determinism,
 * drawn frequencies against softmax, and stop strings split across pieces. */
#include "test.h"

#include <stdint.h>

#include "llm/sampler.h"

#include <stdlib.h>

static struct sampler_params plain_params(void)
{
    /* every transform off: a plain softmax draw at temperature 1 */
    struct sampler_params p = sampler_default_params();
    p.temperature = 1.0f;
    p.top_k = 0;
    p.top_p = 1.0f;
    p.min_p = 0.0f;
    p.seed = 1234;
    return p;
}

/* Draw n times; hist[id]++ for each. Returns 0, or -1 if a draw failed. */
static int draw_many(struct sampler_params p, const float *logits, int n_vocab, int n,
                     int *hist)
{
    char err[128];
    struct sampler *s = sampler_new(&p, n_vocab, err, sizeof err);
    if (!s)
        return -1;
    memset(hist, 0, (size_t)n_vocab * sizeof *hist);
    for (int i = 0; i < n; i++) {
        int32_t id = sampler_sample(s, logits, NULL);
        if (id < 0 || id >= n_vocab) {
            sampler_free(s);
            return -1;
        }
        hist[id]++;
    }
    sampler_free(s);
    return 0;
}

static void softmax(const float *l, int n, float temp, double *out)
{
    double mx = -INFINITY, sum = 0;
    for (int i = 0; i < n; i++)
        mx = l[i] > mx ? l[i] : mx;
    for (int i = 0; i < n; i++)
        sum += out[i] = exp((l[i] - mx) / temp);
    for (int i = 0; i < n; i++)
        out[i] /= sum;
}

TEST(sampler_greedy_ties_to_lowest_id)
{
    struct sampler_params p = sampler_default_params();
    p.temperature = 0.0f;
    char err[128];
    struct sampler *s = sampler_new(&p, 5, err, sizeof err);
    CHECK(s);
    float l[5] = { 1.0f, 3.0f, -2.0f, 3.0f, 0.5f };
    CHECK_EQ(sampler_sample(s, l, NULL), 1);
    float banned[3] = { -INFINITY, NAN, -INFINITY };
    sampler_free(s);
    s = sampler_new(&p, 3, err, sizeof err);
    CHECK(s);
    CHECK_EQ(sampler_sample(s, banned, NULL), -1);
    sampler_free(s);
}

/* Plain greedy takes an argmax fast path (no copy of the vocabulary): it
 * must pick what the full path (taken when logprobs are asked for) picks,
 * NaN, -inf and ties included, on a vocabulary that is not a multiple of 16. */
TEST(sampler_greedy_fast_path_equals_full)
{
    enum { NV = 1003 };
    char err[128];
    struct sampler_params p = sampler_default_params();
    p.temperature = 0.0f;
    struct sampler *fast = sampler_new(&p, NV, err, sizeof err);
    p.n_logprobs = 1;
    struct sampler *full = sampler_new(&p, NV, err, sizeof err);
    CHECK(fast && full);
    float l[NV];
    struct sampler_logprobs lp;
    uint32_t r = 7;
    for (int round = 0; round < 200; round++) {
        for (int i = 0; i < NV; i++) {
            r = r * 1664525u + 1013904223u;
            l[i] = (float)((r >> 9) % 64) - 40.0f;   /* many ties */
            if (r % 97 == 0)
                l[i] = NAN;
            else if (r % 89 == 0)
                l[i] = -INFINITY;
        }
        if (round % 50 == 0) /* the maximum in the unrolled tail */
            l[NV - 1] = 100.0f;
        int32_t a = sampler_sample(fast, l, NULL), b = sampler_sample(full, l, &lp);
        CHECK_MSG(a == b, "round %d: fast %d, full %d", round, a, b);
    }
    sampler_free(fast);
    sampler_free(full);
}

TEST(sampler_rejects_bad_params)
{
    char err[128];
    struct sampler_params p = sampler_default_params();
    CHECK(sampler_new(&p, 0, err, sizeof err) == NULL);
    struct sampler_logit_bias b = { 7, 1.0f };
    p.logit_bias = &b;
    p.n_logit_bias = 1;
    CHECK(sampler_new(&p, 5, err, sizeof err) == NULL);
    CHECK_STR_CONTAINS(err, "logit bias token 7");
    p = sampler_default_params();
    p.n_logprobs = SAMPLER_MAX_LOGPROBS + 1;
    CHECK(sampler_new(&p, 5, err, sizeof err) == NULL);
    p = sampler_default_params();
    p.min_p = 1.5f;
    CHECK(sampler_new(&p, 5, err, sizeof err) == NULL);
    p = sampler_default_params();
    p.top_p = NAN;
    CHECK(sampler_new(&p, 5, err, sizeof err) == NULL);
}

TEST(sampler_frequencies_match_softmax)
{
    float l[6] = { 1.0f, 2.0f, 3.0f, 0.5f, -1.0f, 2.5f };
    int hist[6];
    double prob[6];
    const int n = 200000;
    for (int t = 0; t < 2; t++) {
        struct sampler_params p = plain_params();
        p.temperature = t ? 0.5f : 1.0f;
        CHECK(draw_many(p, l, 6, n, hist) == 0);
        softmax(l, 6, p.temperature, prob);
        for (int i = 0; i < 6; i++)
            CHECK_NEAR((double)hist[i] / n, prob[i], 0.006);
    }
}

TEST(sampler_top_k)
{
    float l[6] = { 1.0f, 2.0f, 3.0f, 0.5f, -1.0f, 2.5f };
    int hist[6];
    struct sampler_params p = plain_params();
    p.top_k = 2;
    CHECK(draw_many(p, l, 6, 20000, hist) == 0);
    CHECK_EQ(hist[0] + hist[1] + hist[3] + hist[4], 0);
    /* renormalised over {2, 5}: p(2) = 1 / (1 + e^-0.5) */
    CHECK_NEAR(hist[2] / 20000.0, 1.0 / (1.0 + exp(-0.5)), 0.015);
    p.top_k = 1;
    CHECK(draw_many(p, l, 6, 1000, hist) == 0);
    CHECK_EQ(hist[2], 1000);
}

TEST(sampler_top_p)
{
    /* probabilities 0.5, 0.3, 0.15, 0.05 (ids shuffled) */
    float l[4] = { logf(0.15f), logf(0.5f), logf(0.05f), logf(0.3f) };
    int hist[4];
    struct sampler_params p = plain_params();
    p.top_p = 0.7f; /* 0.5 < 0.7 <= 0.8: keeps ids 1 and 3 */
    CHECK(draw_many(p, l, 4, 20000, hist) == 0);
    CHECK_EQ(hist[0] + hist[2], 0);
    CHECK_NEAR(hist[1] / 20000.0, 0.5 / 0.8, 0.015);
    p.top_p = 0.4f; /* the top token alone already covers it */
    CHECK(draw_many(p, l, 4, 1000, hist) == 0);
    CHECK_EQ(hist[1], 1000);
}

TEST(sampler_top_p_large_vocab)
{
    /* Many near-equal candidates: the kept prefix is far beyond the first
     * partial sort, so the selection must widen. */
    enum { N = 5000 };
    static float l[N];
    static int hist[N];
    static double prob[N];
    for (int i = 0; i < N; i++)
        l[(i * 7919) % N] = -0.001f * (float)i; /* rank i lives at id (i*7919)%N */
    softmax(l, N, 1.0f, prob);
    double cum = 0;
    int keep = 0;
    while (cum < 0.3) /* ranks 0..keep-1 survive */
        cum += prob[(keep++ * 7919) % N];
    struct sampler_params p = plain_params();
    p.top_p = 0.3f;
    CHECK(draw_many(p, l, N, 20000, hist) == 0);
    int max_rank = 0;
    for (int r = 0; r < N; r++)
        if (hist[(r * 7919) % N])
            max_rank = r;
    CHECK(max_rank < keep);
    CHECK(max_rank > keep - 60); /* the tail was reached too */
}

TEST(sampler_min_p)
{
    /* p relative to the top: 1, 0.5, 0.09, 0.11 */
    float l[4] = { 0.0f, logf(0.5f), logf(0.09f), logf(0.11f) };
    int hist[4];
    struct sampler_params p = plain_params();
    p.min_p = 0.1f;
    CHECK(draw_many(p, l, 4, 20000, hist) == 0);
    CHECK_EQ(hist[2], 0);
    CHECK(hist[3] > 0);
    CHECK_NEAR(hist[0] / 20000.0, 1.0 / 1.61, 0.015);
}

TEST(sampler_chain_order_truncates_before_temperature)
{
    /* top-p sees the temperature-1 distribution: 0.5/0.3/0.2 with p = 0.6
     * keeps two tokens even though a high temperature would flatten them. */
    float l[3] = { logf(0.5f), logf(0.3f), logf(0.2f) };
    int hist[3];
    struct sampler_params p = plain_params();
    p.top_p = 0.6f;
    p.temperature = 100.0f;
    CHECK(draw_many(p, l, 3, 20000, hist) == 0);
    CHECK_EQ(hist[2], 0);
    CHECK_NEAR(hist[0] / 20000.0, 0.5, 0.015); /* flattened among the two */
}

TEST(sampler_seed_determinism)
{
    float l[8] = { 0.1f, 0.2f, 0.3f, 0.4f, 0.5f, 0.6f, 0.7f, 0.8f };
    char err[128];
    struct sampler_params p = plain_params();
    p.seed = 42;
    struct sampler *a = sampler_new(&p, 8, err, sizeof err);
    struct sampler *b = sampler_new(&p, 8, err, sizeof err);
    p.seed = 43;
    struct sampler *c = sampler_new(&p, 8, err, sizeof err);
    CHECK(a && b && c);
    int32_t first[64];
    int differ = 0;
    for (int i = 0; i < 64; i++) {
        first[i] = sampler_sample(a, l, NULL);
        CHECK_EQ(first[i], sampler_sample(b, l, NULL));
        differ += first[i] != sampler_sample(c, l, NULL);
    }
    CHECK(differ > 10);
    CHECK(sampler_seed(a) == 42);
    sampler_reset(a);
    for (int i = 0; i < 64; i++)
        CHECK_EQ(sampler_sample(a, l, NULL), first[i]);
    sampler_free(a);
    sampler_free(b);
    sampler_free(c);
}

/* Logprobs report the post-penalty distribution: use them to read it back. */
static void check_logprobs_equal(struct sampler *s, const float *logits,
                                 const float *expect, int n)
{
    struct sampler_logprobs lp;
    int32_t id = sampler_sample(s, logits, &lp);
    double mx = -INFINITY, z = 0;
    for (int i = 0; i < n; i++)
        mx = expect[i] > mx ? expect[i] : mx;
    for (int i = 0; i < n; i++)
        z += exp(expect[i] - mx);
    z = mx + log(z);
    CHECK_EQ(lp.n_top, n);
    for (int j = 0; j < n; j++) {
        CHECK_NEAR(lp.top[j].logprob, expect[lp.top[j].token] - z, 1e-5);
        if (j > 0)
            CHECK(lp.top[j].logprob <= lp.top[j - 1].logprob);
    }
    CHECK_EQ(lp.chosen.token, id);
    CHECK_NEAR(lp.chosen.logprob, expect[id] - z, 1e-5);
}

TEST(sampler_penalties)
{
    float l[5] = { 2.0f, -1.0f, 0.5f, 1.0f, 0.0f };
    char err[128];
    struct sampler_params p = sampler_default_params();
    p.temperature = 0.0f;
    p.n_logprobs = 5;
    p.repetition_penalty = 2.0f;
    p.presence_penalty = 0.5f;
    p.frequency_penalty = 0.25f;
    struct sampler *s = sampler_new(&p, 5, err, sizeof err);
    CHECK(s);
    CHECK_EQ(sampler_accept(s, 0), 0);
    CHECK_EQ(sampler_accept(s, 1), 0);
    CHECK_EQ(sampler_accept(s, 0), 0);
    /* 0 seen twice: 2/2 - 2*0.25 - 0.5 = 0; 1 once: -1*2 - 0.25 - 0.5 = -2.75 */
    float want[5] = { 0.0f, -2.75f, 0.5f, 1.0f, 0.0f };
    check_logprobs_equal(s, l, want, 5);
    if (test_failed_now())
        return;
    CHECK_EQ(sampler_sample(s, l, NULL), 3);
    sampler_free(s);

    /* the window: only the last 2 tokens (1, 0) count, once each */
    p.penalty_last_n = 2;
    s = sampler_new(&p, 5, err, sizeof err);
    CHECK(s);
    sampler_accept(s, 0);
    sampler_accept(s, 1);
    sampler_accept(s, 0);
    sampler_accept(s, 1);
    sampler_accept(s, 0);
    float want2[5] = { 2.0f / 2 - 0.25f - 0.5f, -1.0f * 2 - 0.25f - 0.5f, 0.5f, 1.0f, 0.0f };
    check_logprobs_equal(s, l, want2, 5);
    if (test_failed_now())
        return;
    /* reset forgets the history */
    sampler_reset(s);
    check_logprobs_equal(s, l, l, 5);
    sampler_free(s);
}

TEST(sampler_logit_bias)
{
    float l[4] = { 1.0f, 3.0f, 2.0f, 0.0f };
    struct sampler_logit_bias bias[2] = { { 1, -INFINITY }, { 3, 1.5f } };
    char err[128];
    struct sampler_params p = sampler_default_params();
    p.temperature = 0.0f;
    p.logit_bias = bias;
    p.n_logit_bias = 2;
    p.n_logprobs = 2;
    struct sampler *s = sampler_new(&p, 4, err, sizeof err);
    CHECK(s);
    bias[0].bias = 0.0f; /* the sampler keeps its own copy */
    struct sampler_logprobs lp;
    CHECK_EQ(sampler_sample(s, l, &lp), 2);
    CHECK_EQ(lp.top[0].token, 2);
    CHECK_EQ(lp.top[1].token, 3); /* 0 + 1.5 > 1.0 */
    sampler_free(s);

    /* a banned token never comes up in random draws either */
    int hist[4];
    struct sampler_params q = plain_params();
    struct sampler_logit_bias ban = { 1, -INFINITY };
    q.logit_bias = &ban;
    q.n_logit_bias = 1;
    CHECK(draw_many(q, l, 4, 5000, hist) == 0);
    CHECK_EQ(hist[1], 0);

    /* logit_bias banning every token the logits (a grammar's mask) leave:
     * -1 on the greedy and the random path, which the engine reports as
     * "every token is banned" and the API answers with 400 */
    const float masked[4] = { -INFINITY, 3.0f, -INFINITY, 2.0f };
    struct sampler_logit_bias both[2] = { { 1, -INFINITY }, { 3, -INFINITY } };
    for (int greedy = 0; greedy < 2; greedy++) {
        struct sampler_params b = plain_params();
        b.temperature = greedy ? 0.0f : 1.0f;
        b.logit_bias = both;
        b.n_logit_bias = 2;
        struct sampler *sb = sampler_new(&b, 4, err, sizeof err);
        CHECK(sb);
        CHECK_EQ(sampler_sample(sb, masked, NULL), -1);
        sampler_free(sb);
    }
}

TEST(sampler_logprobs_top_n)
{
    float l[6] = { 1.0f, 2.0f, 3.0f, 0.5f, -1.0f, 2.5f };
    double prob[6];
    softmax(l, 6, 1.0f, prob);
    char err[128];
    struct sampler_params p = plain_params();
    p.n_logprobs = 3;
    p.temperature = 5.0f; /* logprobs stay those of the temperature-1 distribution */
    struct sampler *s = sampler_new(&p, 6, err, sizeof err);
    CHECK(s);
    struct sampler_logprobs lp;
    int32_t id = sampler_sample(s, l, &lp);
    CHECK_EQ(lp.n_top, 3);
    CHECK_EQ(lp.top[0].token, 2);
    CHECK_EQ(lp.top[1].token, 5);
    CHECK_EQ(lp.top[2].token, 1);
    CHECK_NEAR(lp.top[0].logprob, log(prob[2]), 1e-5);
    CHECK_NEAR(lp.top[2].logprob, log(prob[1]), 1e-5);
    CHECK_EQ(lp.chosen.token, id);
    CHECK_NEAR(lp.chosen.logprob, log(prob[id]), 1e-5);
    sampler_free(s);
}

// ---- stop strings ----

struct stop_run {
    char out[256];
    size_t n;
    int hit;    /* index of the feed that completed a stop, or -1 */
};

static void stop_feed_all(struct sampler_stop *st, const char *const *pieces, int n,
                          struct stop_run *r)
{
    r->n = 0;
    r->hit = -1;
    for (int i = 0; i < n; i++) {
        const char *t;
        size_t len;
        int rc = sampler_stop_feed(st, pieces[i], strlen(pieces[i]), &t, &len);
        memcpy(r->out + r->n, t, len);
        r->n += len;
        if (rc == 1 && r->hit < 0)
            r->hit = i;
    }
    const char *t;
    size_t len;
    sampler_stop_flush(st, &t, &len);
    memcpy(r->out + r->n, t, len);
    r->n += len;
    r->out[r->n] = 0;
}

TEST(sampler_stop_across_pieces)
{
    const char *stops[] = { "</s>", "STOP" };
    char err[128];
    struct sampler_stop *st = sampler_stop_new(stops, 2, err, sizeof err);
    CHECK(st);
    const char *t;
    size_t len;
    CHECK_EQ(sampler_stop_feed(st, "abc<", 4, &t, &len), 0);
    CHECK_EQ(len, 3); /* "<" is held back */
    CHECK(!memcmp(t, "abc", 3));
    CHECK_EQ(sampler_stop_feed(st, "/", 1, &t, &len), 0);
    CHECK_EQ(len, 0);
    CHECK_EQ(sampler_stop_feed(st, "s>tail", 6, &t, &len), 1);
    CHECK_EQ(len, 0);
    CHECK_EQ(sampler_stop_which(st), 0);
    CHECK_EQ(sampler_stop_feed(st, "more", 4, &t, &len), 1);
    CHECK_EQ(len, 0);
    sampler_stop_free(st);
}

TEST(sampler_stop_false_starts_are_released)
{
    const char *stops[] = { "</s>", "aab" };
    char err[128];
    struct stop_run r;

    struct sampler_stop *st = sampler_stop_new(stops, 2, err, sizeof err);
    const char *p1[] = { "x<", "/", "y", " done" };
    stop_feed_all(st, p1, 4, &r);
    CHECK_EQ(r.hit, -1);
    CHECK_STR_EQ(r.out, "x</y done");
    sampler_stop_free(st);

    /* overlapping prefix: "aaab" contains "aab" starting at the second a */
    st = sampler_stop_new(stops, 2, err, sizeof err);
    const char *p2[] = { "a", "a", "a", "b", "zz" };
    stop_feed_all(st, p2, 5, &r);
    CHECK_EQ(r.hit, 3);
    CHECK_STR_EQ(r.out, "a");
    CHECK_EQ(sampler_stop_which(st), 1);
    sampler_stop_free(st);

    /* inside one piece, earliest match wins */
    st = sampler_stop_new(stops, 2, err, sizeof err);
    const char *p3[] = { "12aab</s>" };
    stop_feed_all(st, p3, 1, &r);
    CHECK_EQ(r.hit, 0);
    CHECK_STR_EQ(r.out, "12");
    CHECK_EQ(sampler_stop_which(st), 1);
    sampler_stop_free(st);

    /* held tail comes out at the end */
    st = sampler_stop_new(stops, 2, err, sizeof err);
    const char *p4[] = { "end</" };
    stop_feed_all(st, p4, 1, &r);
    CHECK_EQ(r.hit, -1);
    CHECK_STR_EQ(r.out, "end</");
    sampler_stop_free(st);
}

TEST(sampler_stop_none_and_utf8)
{
    char err[128];
    struct stop_run r;
    struct sampler_stop *st = sampler_stop_new(NULL, 0, err, sizeof err);
    CHECK(st);
    const char *p1[] = { "", "plain", "" };
    stop_feed_all(st, p1, 3, &r);
    CHECK_STR_EQ(r.out, "plain");
    sampler_stop_free(st);

    const char *stops[] = { "", "\xc3\xa9t\xc3\xa9" }; /* "été"; the empty one is ignored */
    st = sampler_stop_new(stops, 2, err, sizeof err);
    CHECK(st);
    const char *t;
    size_t len;
    CHECK_EQ(sampler_stop_feed(st, "un \xc3\xa9", 5, &t, &len), 0);
    CHECK_EQ(len, 3); /* never splits the held "é" */
    CHECK_EQ(sampler_stop_feed(st, "t\xc3\xa9!", 4, &t, &len), 1);
    CHECK_EQ(len, 0);
    CHECK_EQ(sampler_stop_which(st), 1);
    sampler_stop_free(st);
}
