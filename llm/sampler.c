/* sampler.c - logits -> token (penalties, bias, top-k/top-p/min-p, temperature,
 * seeded draw), log-probabilities, and the stop-string matcher.
 *
 * Candidates are (id, logit) pairs ranked by logit, ties to the lower id, so
 * every step is deterministic. Nothing sorts the whole vocabulary: a heap
 * selects the top k, and top-p without top-k finds its cut with a quickselect
 * on probability mass. */
#define _GNU_SOURCE /* memmem */
#include "llm/sampler.h"

#include "src/core/omni.h"
#include "src/core/quant.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

struct sampler_cand {
    int32_t id;
    float logit;
};

struct sampler {
    struct sampler_params p;
    int n_vocab;
    struct sampler_logit_bias *bias;   /* own copy of p.logit_bias */
    uint64_t seed;                     /* resolved seed */
    uint64_t rng[4];                   /* xoshiro256** state */
    int32_t *hist;                     /* accepted tokens, oldest first */
    size_t n_hist, cap_hist;
    int32_t *counts;                   /* [n_vocab] scratch, all zero between calls */
    struct sampler_cand *all;          /* [n_vocab] working logits, index = id */
    struct sampler_cand *work;         /* [n_vocab] surviving candidates */
    struct sampler_cand *sel;          /* [n_vocab] sorted selection */
};

struct sampler_params sampler_default_params(void)
{
    return (struct sampler_params){
        .temperature = 0.8f,
        .top_k = 40,
        .top_p = 0.95f,
        .min_p = 0.05f,
        .repetition_penalty = 1.0f,
        .penalty_last_n = 64,
        .presence_penalty = 0.0f,
        .frequency_penalty = 0.0f,
        .logit_bias = NULL,
        .n_logit_bias = 0,
        .seed = SAMPLER_SEED_RANDOM,
        .n_logprobs = 0,
    };
}

// ---- random numbers: splitmix64 expands the seed, xoshiro256** draws ----

static uint64_t rotl64(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

static uint64_t xoshiro_next(uint64_t s[4])
{
    uint64_t result = rotl64(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl64(s[3], 45);
    return result;
}

/* Uniform in [0, 1) with 53 random bits. */
static double rng_uniform(uint64_t s[4]) { return (double)(xoshiro_next(s) >> 11) * 0x1.0p-53; }

static void rng_seed(struct sampler *s)
{
    uint64_t x = s->seed;
    for (int i = 0; i < 4; i++)
        s->rng[i] = omni_splitmix64(&x);
}

// ---- construction ----

struct sampler *sampler_new(const struct sampler_params *params, int n_vocab, char *err,
                            size_t errlen)
{
    struct sampler_params p = params ? *params : sampler_default_params();
    if (n_vocab < 1) {
        omni_fail(err, errlen, OMNI_ERR_ARG, "sampler: vocabulary size %d", n_vocab);
        return NULL;
    }
    if (isnan(p.temperature) || isnan(p.top_p) || isnan(p.min_p) || isnan(p.repetition_penalty) ||
        isnan(p.presence_penalty) || isnan(p.frequency_penalty)) {
        omni_fail(err, errlen, OMNI_ERR_ARG, "sampler: NaN parameter");
        return NULL;
    }
    if (p.min_p > 1.0f) { /* would drop even the most likely token */
        omni_fail(err, errlen, OMNI_ERR_ARG, "sampler: min_p %g must be <= 1", (double)p.min_p);
        return NULL;
    }
    if (p.repetition_penalty <= 0.0f) {
        omni_fail(err, errlen, OMNI_ERR_ARG, "sampler: repetition penalty %g must be > 0",
                  (double)p.repetition_penalty);
        return NULL;
    }
    if (p.n_logprobs < 0 || p.n_logprobs > SAMPLER_MAX_LOGPROBS) {
        omni_fail(err, errlen, OMNI_ERR_ARG, "sampler: n_logprobs %d outside 0..%d",
                  p.n_logprobs, SAMPLER_MAX_LOGPROBS);
        return NULL;
    }
    if (p.penalty_last_n < -1) {
        omni_fail(err, errlen, OMNI_ERR_ARG, "sampler: penalty_last_n %d", p.penalty_last_n);
        return NULL;
    }
    if (p.n_logit_bias < 0 || (p.n_logit_bias > 0 && !p.logit_bias)) {
        omni_fail(err, errlen, OMNI_ERR_ARG, "sampler: bad logit bias list");
        return NULL;
    }
    for (int i = 0; i < p.n_logit_bias; i++) {
        const struct sampler_logit_bias *b = &p.logit_bias[i];
        if (b->token < 0 || b->token >= n_vocab) {
            omni_fail(err, errlen, OMNI_ERR_ARG, "sampler: logit bias token %d outside 0..%d",
                      (int)b->token, n_vocab - 1);
            return NULL;
        }
        if (isnan(b->bias)) {
            omni_fail(err, errlen, OMNI_ERR_ARG, "sampler: logit bias of token %d is NaN",
                      (int)b->token);
            return NULL;
        }
    }

    struct sampler *s = calloc(1, sizeof *s);
    if (!s)
        goto nomem;
    s->p = p;
    s->n_vocab = n_vocab;
    s->counts = calloc((size_t)n_vocab, sizeof *s->counts);
    s->all = malloc((size_t)n_vocab * sizeof *s->all);
    s->work = malloc((size_t)n_vocab * sizeof *s->work);
    s->sel = malloc((size_t)n_vocab * sizeof *s->sel);
    if (!s->counts || !s->all || !s->work || !s->sel)
        goto nomem;
    if (p.n_logit_bias > 0) {
        s->bias = malloc((size_t)p.n_logit_bias * sizeof *s->bias);
        if (!s->bias)
            goto nomem;
        memcpy(s->bias, p.logit_bias, (size_t)p.n_logit_bias * sizeof *s->bias);
    }
    s->p.logit_bias = s->bias;
    if (p.seed == SAMPLER_SEED_RANDOM) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        uint64_t x = (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
        x ^= (uint64_t)getpid() << 32;
        s->seed = omni_splitmix64(&x);
        if (s->seed == SAMPLER_SEED_RANDOM) /* keep the report re-usable as --seed */
            s->seed = 0;
    } else {
        s->seed = p.seed;
    }
    rng_seed(s);
    return s;

nomem:
    sampler_free(s);
    omni_fail(err, errlen, OMNI_ERR_NOMEM, "sampler: out of memory (vocabulary %d)", n_vocab);
    return NULL;
}

void sampler_free(struct sampler *s)
{
    if (!s)
        return;
    free(s->bias);
    free(s->hist);
    free(s->counts);
    free(s->all);
    free(s->work);
    free(s->sel);
    free(s);
}

void sampler_reset(struct sampler *s)
{
    s->n_hist = 0;
    rng_seed(s);
}

uint64_t sampler_seed(const struct sampler *s) { return s->seed; }

int sampler_accept(struct sampler *s, int32_t token)
{
    if (s->n_hist == s->cap_hist) {
        size_t cap = s->cap_hist ? s->cap_hist * 2 : 256;
        int32_t *h = realloc(s->hist, cap * sizeof *h);
        if (!h)
            return OMNI_ERR_NOMEM;
        s->hist = h;
        s->cap_hist = cap;
    }
    s->hist[s->n_hist++] = token;
    return 0;
}

// ---- the chain ----

/* a ranks before b: higher logit, then lower id (deterministic order). */
static int cand_before(const struct sampler_cand *a, const struct sampler_cand *b)
{
    return a->logit > b->logit || (a->logit == b->logit && a->id < b->id);
}

static int cand_cmp(const void *pa, const void *pb)
{
    const struct sampler_cand *a = pa, *b = pb;
    return cand_before(a, b) ? -1 : cand_before(b, a) ? 1 : 0;
}

/* Heap whose root is the worst kept candidate. */
static void heap_sift_down(struct sampler_cand *h, size_t n, size_t i)
{
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, w = i;
        if (l < n && cand_before(&h[w], &h[l]))
            w = l;
        if (r < n && cand_before(&h[w], &h[r]))
            w = r;
        if (w == i)
            return;
        struct sampler_cand t = h[i];
        h[i] = h[w];
        h[w] = t;
        i = w;
    }
}

/* out[0..k) = the k best of in[0..n), sorted best first (k <= n). */
static void select_top(const struct sampler_cand *in, size_t n, size_t k, struct sampler_cand *out)
{
    if (k * 4 >= n) { /* most of it anyway: a full sort is simpler and as fast */
        memcpy(out, in, n * sizeof *in);
        qsort(out, n, sizeof *out, cand_cmp);
        return;
    }
    memcpy(out, in, k * sizeof *in);
    for (size_t i = k / 2; i-- > 0;)
        heap_sift_down(out, k, i);
    for (size_t i = k; i < n; i++) {
        if (cand_before(&in[i], &out[0])) {
            out[0] = in[i];
            heap_sift_down(out, k, 0);
        }
    }
    qsort(out, k, sizeof *out, cand_cmp);
}

/* Penalties over the last penalty_last_n accepted tokens. counts[] is zero
 * on entry and on exit: the second pass clears each entry as it uses it. */
static bool penalties_active(const struct sampler *s)
{
    const struct sampler_params *p = &s->p;
    return p->penalty_last_n != 0 && s->n_hist > 0 &&
           !(p->repetition_penalty == 1.0f && p->presence_penalty == 0.0f && p->frequency_penalty == 0.0f);
}

/* First index of the largest logit (NaN never wins), -1 when none is above
 * -inf: the vectorized maximum, then its index. */
static int32_t argmax_logits(const float *x, size_t n)
{
    const float mx = omni_vec_max((int64_t)n, x);
    if (mx == -INFINITY)
        return -1;
    for (size_t i = 0; i < n; i++)
        if (x[i] == mx)
            return (int32_t)i;
    return -1;
}

static void apply_penalties(struct sampler *s)
{
    const struct sampler_params *p = &s->p;
    if (!penalties_active(s))
        return;
    size_t n = s->n_hist;
    if (p->penalty_last_n > 0 && (size_t)p->penalty_last_n < n)
        n = (size_t)p->penalty_last_n;
    const int32_t *win = s->hist + s->n_hist - n;
    for (size_t i = 0; i < n; i++)
        if (win[i] >= 0 && win[i] < s->n_vocab)
            s->counts[win[i]]++;
    for (size_t i = 0; i < n; i++) {
        int32_t t = win[i];
        if (t < 0 || t >= s->n_vocab || s->counts[t] == 0)
            continue;
        float *l = &s->all[t].logit;
        if (*l > 0.0f)
            *l /= p->repetition_penalty;
        else
            *l *= p->repetition_penalty;
        *l -= (float)s->counts[t] * p->frequency_penalty + p->presence_penalty;
        s->counts[t] = 0;
    }
}

static void fill_logprobs(const struct sampler *s, int32_t chosen, struct sampler_logprobs *lp)
{
    const struct sampler_cand *c = s->all;
    size_t n = (size_t)s->n_vocab;
    float mx = -INFINITY;
    for (size_t i = 0; i < n; i++)
        if (c[i].logit > mx)
            mx = c[i].logit;
    double sum = 0.0;
    if (mx > -INFINITY)
        for (size_t i = 0; i < n; i++)
            sum += expf(c[i].logit - mx);
    float log_z = mx > -INFINITY ? mx + (float)log(sum) : INFINITY;

    /* Insertion into a short sorted list: mostly one compare per token. */
    struct sampler_cand top[SAMPLER_MAX_LOGPROBS];
    int k = s->p.n_logprobs, n_top = 0;
    for (size_t i = 0; i < n && k > 0; i++) {
        if (n_top == k && !cand_before(&c[i], &top[k - 1]))
            continue;
        int j = n_top < k ? n_top++ : k - 1;
        for (; j > 0 && cand_before(&c[i], &top[j - 1]); j--)
            top[j] = top[j - 1];
        top[j] = c[i];
    }
    lp->n_top = n_top;
    for (int j = 0; j < n_top; j++)
        lp->top[j] = (struct sampler_logprob){ top[j].id, top[j].logit - log_z };
    lp->chosen.token = chosen;
    lp->chosen.logprob = chosen >= 0 ? c[chosen].logit - log_z : -INFINITY;
}

static void cand_swap(struct sampler_cand *c, size_t i, size_t j)
{
    struct sampler_cand t = c[i];
    c[i] = c[j];
    c[j] = t;
}

/* Partition c[lo..hi) (hi - lo >= 2) around a median-of-three pivot: returns
 * its final index p; everything in [lo, p) ranks before it, [p+1, hi) after. */
static size_t partition_by_rank(struct sampler_cand *c, size_t lo, size_t hi)
{
    size_t mid = lo + (hi - lo) / 2, last = hi - 1;
    if (cand_before(&c[mid], &c[lo]))
        cand_swap(c, mid, lo);
    if (cand_before(&c[last], &c[lo]))
        cand_swap(c, last, lo);
    if (cand_before(&c[mid], &c[last]))
        cand_swap(c, mid, last); /* c[last] is now the median */
    size_t p = lo;
    for (size_t i = lo; i < last; i++)
        if (cand_before(&c[i], &c[last]))
            cand_swap(c, i, p++);
    cand_swap(c, p, last);
    return p;
}

/* Keep the smallest best-first set of cur[0..n) whose probability reaches
 * top_p. Sorted input is walked; otherwise a quickselect on probability mass
 * moves that set to the front in expected O(n), unsorted. Returns its size. */
static size_t apply_top_p(const struct sampler *s, struct sampler_cand *c, size_t n, bool sorted)
{
    float mx = -INFINITY;
    for (size_t i = 0; i < n; i++)
        if (c[i].logit > mx)
            mx = c[i].logit;
    double total = 0.0;
    for (size_t i = 0; i < n; i++)
        total += expf(c[i].logit - mx);
    double need = (double)s->p.top_p * total;

    if (sorted) {
        double cum = 0.0;
        for (size_t i = 0; i < n; i++)
            if ((cum += expf(c[i].logit - mx)) >= need)
                return i + 1;
        return n; /* rounding kept the sum just under p: keep all */
    }
    /* Invariant: [0, lo) ranks before [lo, hi), which ranks before [hi, n);
     * [0, lo) holds less than the mass needed, [0, hi) enough of it. */
    size_t lo = 0, hi = n;
    while (hi - lo > 1) {
        size_t p = partition_by_rank(c, lo, hi);
        double upper = 0.0;
        for (size_t i = lo; i < p; i++)
            upper += expf(c[i].logit - mx);
        if (upper >= need) {
            hi = p;
            continue;
        }
        need -= upper + expf(c[p].logit - mx);
        if (need <= 0.0)
            return p + 1;
        lo = p + 1;
    }
    return hi > 0 ? hi : 1;
}

int32_t sampler_sample(struct sampler *s, const float *logits, struct sampler_logprobs *lp)
{
    const struct sampler_params *p = &s->p;
    size_t nv = (size_t)s->n_vocab;
    /* Greedy with nothing to adjust or report: the argmax, without copying
     * the vocabulary (most of the time a decode step spends outside the
     * forward pass at high concurrency). */
    if (p->temperature <= 0.0f && !lp && p->n_logit_bias == 0 && !penalties_active(s))
        return argmax_logits(logits, nv);
    for (size_t i = 0; i < nv; i++)
        s->all[i] = (struct sampler_cand){ (int32_t)i, isnan(logits[i]) ? -INFINITY : logits[i] };
    apply_penalties(s);
    for (int i = 0; i < p->n_logit_bias; i++)
        s->all[p->logit_bias[i].token].logit += p->logit_bias[i].bias;

    int32_t chosen = -1;
    if (p->temperature <= 0.0f) {
        float best = -INFINITY;
        for (size_t i = 0; i < nv; i++)
            if (s->all[i].logit > best) {
                best = s->all[i].logit;
                chosen = (int32_t)i;
            }
        goto done;
    }

    /* Banned tokens never come back; dropping them first keeps the rest small. */
    struct sampler_cand *cur = s->work;
    size_t n = 0;
    for (size_t i = 0; i < nv; i++)
        if (s->all[i].logit > -INFINITY)
            s->work[n++] = s->all[i];
    if (n == 0)
        goto done;
    bool sorted = false;

    if (p->top_k > 0 && (size_t)p->top_k < n) {
        select_top(s->work, n, (size_t)p->top_k, s->sel);
        cur = s->sel;
        n = (size_t)p->top_k;
        sorted = true;
    }
    if (p->top_p < 1.0f)
        n = apply_top_p(s, cur, n, sorted);
    if (p->min_p > 0.0f) {
        float mx = -INFINITY;
        for (size_t i = 0; i < n; i++)
            if (cur[i].logit > mx)
                mx = cur[i].logit;
        /* p_i >= min_p * p_max  <=>  logit_i >= logit_max + log(min_p) */
        float min_logit = mx + logf(p->min_p);
        size_t kept = 0;
        for (size_t i = 0; i < n; i++)
            if (cur[i].logit >= min_logit)
                cur[kept++] = cur[i];
        n = kept;
    }

    /* Temperature, softmax and the draw in one pass over the survivors. */
    float mx = -INFINITY;
    for (size_t i = 0; i < n; i++)
        if (cur[i].logit > mx)
            mx = cur[i].logit;
    double total = 0.0;
    for (size_t i = 0; i < n; i++)
        total += expf((cur[i].logit - mx) / p->temperature);
    double r = rng_uniform(s->rng) * total, cum = 0.0;
    chosen = cur[n - 1].id; /* if rounding runs past the end */
    for (size_t i = 0; i < n; i++) {
        cum += expf((cur[i].logit - mx) / p->temperature);
        if (r < cum) {
            chosen = cur[i].id;
            break;
        }
    }

done:
    if (lp)
        fill_logprobs(s, chosen, lp);
    return chosen;
}

// ---- stop strings ----

struct sampler_stop {
    char **stops;
    size_t *lens;
    int n_stops;
    size_t max_len;
    char *buf;          /* held-back text, then the newest piece */
    size_t len, cap;
    size_t released;    /* buf[0..released) was handed out by the last call */
    int which;          /* matched stop, or -1 */
};

struct sampler_stop *sampler_stop_new(const char *const *stops, int n_stops, char *err,
                                      size_t errlen)
{
    if (n_stops < 0 || (n_stops > 0 && !stops)) {
        omni_fail(err, errlen, OMNI_ERR_ARG, "sampler: bad stop list");
        return NULL;
    }
    struct sampler_stop *st = calloc(1, sizeof *st);
    if (!st)
        goto nomem;
    st->which = -1;
    if (n_stops > 0) {
        st->stops = calloc((size_t)n_stops, sizeof *st->stops);
        st->lens = calloc((size_t)n_stops, sizeof *st->lens);
        if (!st->stops || !st->lens)
            goto nomem;
    }
    /* Empty strings stay in the list (length 0, never matched) so that
     * sampler_stop_which reports indices in the caller's order. */
    for (int i = 0; i < n_stops; i++) {
        if (!(st->stops[i] = strdup(stops[i] ? stops[i] : "")))
            goto nomem;
        st->n_stops = i + 1;
        st->lens[i] = strlen(st->stops[i]);
        if (st->lens[i] > st->max_len)
            st->max_len = st->lens[i];
    }
    return st;

nomem:
    sampler_stop_free(st);
    omni_fail(err, errlen, OMNI_ERR_NOMEM, "sampler: out of memory (stop strings)");
    return NULL;
}

void sampler_stop_free(struct sampler_stop *st)
{
    if (!st)
        return;
    for (int i = 0; i < st->n_stops; i++)
        free(st->stops[i]);
    free(st->stops);
    free(st->lens);
    free(st->buf);
    free(st);
}

int sampler_stop_which(const struct sampler_stop *st) { return st->which; }

/* Longest tail of buf[0..len) (shorter than every full match) that begins
 * some stop string. */
static size_t stop_hold_len(const struct sampler_stop *st)
{
    size_t most = st->max_len ? st->max_len - 1 : 0;
    if (most > st->len)
        most = st->len;
    for (size_t k = most; k > 0; k--) {
        const char *tail = st->buf + st->len - k;
        for (int i = 0; i < st->n_stops; i++)
            if (st->lens[i] > k && !memcmp(tail, st->stops[i], k))
                return k;
    }
    return 0;
}

int sampler_stop_feed(struct sampler_stop *st, const char *piece, size_t len,
                      const char **text, size_t *text_len)
{
    *text = "";
    *text_len = 0;
    if (st->which >= 0)
        return 1;
    /* Drop what the previous call released; keep the held tail. */
    if (st->released > 0) {
        memmove(st->buf, st->buf + st->released, st->len - st->released);
        st->len -= st->released;
        st->released = 0;
    }
    if (st->len + len == 0)
        return 0;
    if (st->len + len > st->cap) {
        size_t cap = st->cap ? st->cap : 64;
        while (cap < st->len + len)
            cap *= 2;
        char *b = realloc(st->buf, cap);
        if (!b)
            return OMNI_ERR_NOMEM;
        st->buf = b;
        st->cap = cap;
    }
    if (len)
        memcpy(st->buf + st->len, piece, len);
    st->len += len;

    /* The earliest occurrence wins; at one position, the first stop listed. */
    size_t best = SIZE_MAX;
    for (int i = 0; i < st->n_stops; i++) {
        if (st->lens[i] == 0)
            continue;
        const char *m = memmem(st->buf, st->len, st->stops[i], st->lens[i]);
        if (m && (size_t)(m - st->buf) < best) {
            best = (size_t)(m - st->buf);
            st->which = i;
        }
    }
    if (st->which >= 0) {
        *text = st->buf;
        *text_len = best;
        st->released = st->len;
        return 1;
    }
    st->released = st->len - stop_hold_len(st);
    *text = st->buf;
    *text_len = st->released;
    return 0;
}

void sampler_stop_flush(struct sampler_stop *st, const char **text, size_t *text_len)
{
    *text = "";
    *text_len = 0;
    if (st->which >= 0 || st->released >= st->len)
        return;
    *text = st->buf + st->released;
    *text_len = st->len - st->released;
    st->released = st->len;
}
