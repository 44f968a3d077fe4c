/* whisper_full.c - transcription of whole recordings, following OpenAI's
 * transcribe(): log-mel with 30 s padding, 30 s windows seeked by the last
 * timestamp token, a prompt of <|startofprev|> + earlier text + the sot
 * sequence, greedy / beam search / best-of sampling with OpenAI's logit filters
 * and timestamp rules, temperature fallback on compression ratio and average
 * log-probability, and no-speech detection. */
#include "audio/whisper_impl.h"
#include "audio/whisper_dev.h"

#include "audio/mel.h"
#include "llm/sampler.h"
#include "src/core/omni.h"

#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#define FRAMES_PER_TS 2    /* a timestamp step is 20 ms, a mel frame 10 ms */
#define MS_PER_FRAME 10

struct whisper_full_params whisper_full_default_params(enum whisper_sampling_strategy strategy)
{
    return (struct whisper_full_params){
        .strategy = strategy,
        .language = NULL,
        .suppress_blank = true,
        .suppress_special = true,
        .max_initial_ts_s = 1.0f,
        .greedy_best_of = 5,
        .beam_size = 5,
        .length_penalty = -1.0f,
        .temperature = 0.0f,
        .temperature_inc = 0.2f,
        .compression_ratio_thold = 2.4f,
        .logprob_thold = -1.0f,
        .no_speech_thold = 0.6f,
        .audio_ctx_margin = WHISPER_AUDIO_CTX_MARGIN,
    };
}

/* Mel frames one window may span (two per encoder position). */
static int window_frames(const struct whisper_full_params *p, int n_audio_ctx)
{
    return 2 * (p->audio_ctx > 0 && p->audio_ctx < n_audio_ctx ? p->audio_ctx : n_audio_ctx);
}

/* Encoder positions for a window holding segment_size frames of audio. */
static int window_ctx(const struct whisper_full_params *p, int n_audio_ctx, int segment_size)
{
    if (p->audio_ctx > 0)
        return p->audio_ctx < n_audio_ctx ? p->audio_ctx : n_audio_ctx;
    if (p->audio_ctx != WHISPER_AUDIO_CTX_AUTO)
        return n_audio_ctx;
    /* the audio's positions plus the margin, in steps of 64 so that similar
     * lengths share shapes (and a partial's cost grows in steps) */
    const int64_t need = ((int64_t)segment_size + 1) / 2 + p->audio_ctx_margin;
    const int64_t ctx = (need + 63) / 64 * 64;
    return ctx < n_audio_ctx ? (int)ctx : n_audio_ctx;
}

// ---- one sequence per decoder slot -------------------------------------------

struct seq {
    int32_t *tok;     /* sampled tokens (the prompt is not included) */
    float *lp, *p;    /* their log-probability and probability */
    int32_t *tid;     /* token timestamps: the likeliest timestamp token at each step, */
    float *pt, *ptsum;/* its probability and the timestamp tokens' total */
    int n;
    double sum_logprob;
    bool done;        /* ended with EOT (not stored in tok) or hit the length limit */
    int slot;         /* decoder slot holding its K/V cache */
    float *logits;    /* [n_vocab]: next-token logits */
};

struct window {
    struct seq best;  /* copied out of the decoders */
    float avg_logprob, compression_ratio, no_speech_prob, temperature;
};

struct ctx {
    struct whisper_state *s;
    const struct whisper_full_params *p;
    const struct whisper_model *m;
    int nv, eot, beg, blank;
    float *logprobs;  /* [n_vocab] scratch */
    int max_len;      /* tokens one window may sample */
    char *err;
    size_t errlen;
};

static void seq_reset(struct seq *q) { q->n = 0, q->sum_logprob = 0, q->done = false; }

static int seq_alloc(struct seq *q, int cap, int nv)
{
    memset(q, 0, sizeof *q);
    q->tok = malloc(cap * sizeof *q->tok);
    q->lp = malloc(cap * sizeof *q->lp);
    q->p = malloc(cap * sizeof *q->p);
    q->tid = malloc(cap * sizeof *q->tid);
    q->pt = malloc(cap * sizeof *q->pt);
    q->ptsum = malloc(cap * sizeof *q->ptsum);
    q->logits = malloc((size_t)nv * sizeof *q->logits);
    return q->tok && q->lp && q->p && q->tid && q->pt && q->ptsum && q->logits ? OMNI_OK
                                                                             : OMNI_ERR_NOMEM;
}

static void seq_free(struct seq *q)
{
    free(q->tok);
    free(q->lp);
    free(q->p);
    free(q->tid);
    free(q->pt);
    free(q->ptsum);
    free(q->logits);
}

static void seq_copy(struct seq *dst, const struct seq *src)
{
    memcpy(dst->tok, src->tok, src->n * sizeof *src->tok);
    memcpy(dst->lp, src->lp, src->n * sizeof *src->lp);
    memcpy(dst->p, src->p, src->n * sizeof *src->p);
    memcpy(dst->tid, src->tid, src->n * sizeof *src->tid);
    memcpy(dst->pt, src->pt, src->n * sizeof *src->pt);
    memcpy(dst->ptsum, src->ptsum, src->n * sizeof *src->ptsum);
    dst->n = src->n;
    dst->sum_logprob = src->sum_logprob;
    dst->done = src->done;
}

/* K/V rows [0, n) of every layer from one decoder slot to another. */
static int copy_cache(struct ctx *c, int from, int to, int n)
{
    struct whisper_state *s = c->s;
    const struct whisper_hparams *hp = &c->m->hp;
    const size_t per_layer = (size_t)hp->n_text_ctx * hp->n_text_state;
    if (s->dev) /* the caches live on the device (whisper_dev.h) */
        return whisper_dev_copy_cache(s->dev, s, from, to, n, c->err, c->errlen);
    if (!s->self_k[to]) {
        s->self_k[to] = malloc(per_layer * hp->n_text_layer * sizeof(float));
        s->self_v[to] = malloc(per_layer * hp->n_text_layer * sizeof(float));
        if (!s->self_k[to] || !s->self_v[to]) {
            free(s->self_k[to]);
            free(s->self_v[to]);
            s->self_k[to] = s->self_v[to] = NULL;
            return omni_fail(c->err, c->errlen, OMNI_ERR_NOMEM, "whisper: out of memory for a K/V cache");
        }
    }
    for (int l = 0; l < hp->n_text_layer; l++) {
        memcpy(s->self_k[to] + l * per_layer, s->self_k[from] + l * per_layer, (size_t)n * hp->n_text_state * sizeof(float));
        memcpy(s->self_v[to] + l * per_layer, s->self_v[from] + l * per_layer, (size_t)n * hp->n_text_state * sizeof(float));
    }
    return OMNI_OK;
}

// ---- logit filters --------------------------------------------------------------

static void log_softmax(const float *x, float *y, int n)
{
    float mx = -INFINITY;
    for (int i = 0; i < n; i++)
        mx = x[i] > mx ? x[i] : mx;
    double sum = 0;
    for (int i = 0; i < n; i++)
        sum += x[i] == -INFINITY ? 0.0 : exp((double)x[i] - mx);
    const float lse = mx + (float)log(sum);
    for (int i = 0; i < n; i++)
        y[i] = x[i] - lse;
}

/* OpenAI's SuppressBlank, SuppressTokens and ApplyTimestampRules on the
 * logits that follow the sampled tokens q->tok[0..n). */
static void apply_filters(struct ctx *c, const struct seq *q, float *logits)
{
    const struct whisper_full_params *p = c->p;
    const struct whisper_model *m = c->m;
    const int nv = c->nv, eot = c->eot, beg = c->beg, n = q->n;
    if (p->suppress_blank && n == 0) {
        if (c->blank >= 0)
            logits[c->blank] = -INFINITY;
        logits[eot] = -INFINITY;
    }
    if (p->suppress_special) {
        static const enum whisper_special_token sup[] = { WHISPER_TOKEN_SOT, WHISPER_TOKEN_TRANSLATE,
                                                          WHISPER_TOKEN_TRANSCRIBE, WHISPER_TOKEN_SOLM,
                                                          WHISPER_TOKEN_PREV, WHISPER_TOKEN_NOSP };
        for (size_t i = 0; i < sizeof sup / sizeof sup[0]; i++)
            if (m->special[sup[i]] >= 0)
                logits[m->special[sup[i]]] = -INFINITY;
    }
    if (p->no_timestamps || beg < 0)
        return;

    logits[m->special[WHISPER_TOKEN_NOT]] = -INFINITY;
    /* timestamps come in pairs, except directly before EOT */
    const bool last_ts = n >= 1 && q->tok[n - 1] >= beg;
    const bool penult_ts = n < 2 || q->tok[n - 2] >= beg;
    if (last_ts) {
        if (penult_ts)
            for (int i = beg; i < nv; i++)
                logits[i] = -INFINITY;
        else
            for (int i = 0; i < eot; i++)
                logits[i] = -INFINITY;
    }
    /* timestamps never decrease, and a segment has a nonzero length */
    int last = -1;
    for (int i = n - 1; i >= 0 && last < 0; i--)
        if (q->tok[i] >= beg)
            last = q->tok[i];
    if (last >= 0) {
        const int lo = last_ts && !penult_ts ? last : last + 1;
        for (int i = beg; i < lo && i < nv; i++)
            logits[i] = -INFINITY;
    }
    if (n == 0) {
        /* a window starts with a timestamp, at most max_initial_ts in */
        for (int i = 0; i < beg; i++)
            logits[i] = -INFINITY;
        const int last_allowed = beg + (int)lroundf(p->max_initial_ts_s / 0.02f);
        for (int i = last_allowed + 1; i < nv; i++)
            logits[i] = -INFINITY;
    }
    /* when the timestamps together are likelier than any one text token, take a timestamp */
    log_softmax(logits, c->logprobs, nv);
    float ts_max = -INFINITY, text_max = -INFINITY;
    for (int i = beg; i < nv; i++)
        ts_max = c->logprobs[i] > ts_max ? c->logprobs[i] : ts_max;
    double ts_sum = 0;
    for (int i = beg; i < nv; i++)
        ts_sum += c->logprobs[i] == -INFINITY ? 0.0 : exp((double)c->logprobs[i] - ts_max);
    const float ts_lse = ts_max + (float)log(ts_sum);
    for (int i = 0; i < beg; i++)
        text_max = c->logprobs[i] > text_max ? c->logprobs[i] : text_max;
    if (ts_max > -INFINITY && ts_lse > text_max)
        for (int i = 0; i < beg; i++)
            logits[i] = -INFINITY;
}

// ---- strategies ---------------------------------------------------------------

static int argmax(const float *x, int n)
{
    int best = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[best])
            best = i;
    return best;
}

static void seq_push(struct ctx *c, struct seq *q, int tok)
{
    const float lp = c->logprobs[tok];
    q->sum_logprob += lp;
    if (tok == c->eot) {
        q->done = true;
        return;
    }
    q->tok[q->n] = tok;
    q->lp[q->n] = lp;
    q->p[q->n] = expf(lp);
    /* token timestamps: the timestamp tokens of the same distribution (none
     * in a vocabulary too small to hold them) */
    int tid = c->beg;
    double sum = 0;
    for (int i = c->beg; i >= 0 && i < c->nv; i++) {
        sum += expf(c->logprobs[i]);
        if (c->logprobs[i] > c->logprobs[tid])
            tid = i;
    }
    q->tid[q->n] = tid;
    q->pt[q->n] = tid >= 0 && tid < c->nv ? expf(c->logprobs[tid]) : 0.0f;
    q->ptsum[q->n] = (float)sum;
    q->n++;
    if (q->n >= c->max_len)
        q->done = true;
}

/* Feed the last token of each of qs[0..n) to its decoder slot, all in one
 * batched pass, and keep each one's new logits. */
static int step(struct ctx *c, struct seq *const *qs, int n, int n_prompt)
{
    int slots[WHISPER_MAX_DECODERS] = { 0 }, pos[WHISPER_MAX_DECODERS] = { 0 };
    int32_t toks[WHISPER_MAX_DECODERS] = { 0 };
    for (int i = 0; i < n; i++) {
        slots[i] = qs[i]->slot;
        toks[i] = qs[i]->tok[qs[i]->n - 1];
        pos[i] = n_prompt + qs[i]->n - 1;
    }
    int rc = whisper_decode_batch(c->s, slots, toks, pos, n, c->err, c->errlen);
    for (int i = 0; i < n && rc == OMNI_OK; i++)
        memcpy(qs[i]->logits, whisper_logits(c->s) + (size_t)i * c->nv, (size_t)c->nv * sizeof(float));
    return rc;
}

static bool aborted(struct ctx *c)
{
    return c->p->abort_callback && c->p->abort_callback(c->p->abort_callback_user_data);
}

/* Greedy (temperature 0, one sequence) or best-of sampling (n sequences). */
static int run_sampling(struct ctx *c, struct seq *seqs, int n, float temperature, int n_prompt, uint64_t seed)
{
    struct sampler *smp[WHISPER_MAX_DECODERS] = { 0 };
    int rc = OMNI_OK;
    if (temperature > 0) {
        struct sampler_params sp = sampler_default_params();
        sp.temperature = temperature;
        sp.top_k = 0;
        sp.top_p = 1.0f;
        sp.min_p = 0.0f;
        sp.penalty_last_n = 0;
        for (int i = 0; i < n; i++) {
            sp.seed = seed + (uint64_t)i;
            if (!(smp[i] = sampler_new(&sp, c->nv, c->err, c->errlen))) {
                rc = OMNI_ERR_NOMEM;
                goto out;
            }
        }
    }
    for (int n_active = n; n_active > 0;) {
        struct seq *active[WHISPER_MAX_DECODERS];
        n_active = 0;
        for (int i = 0; i < n; i++) {
            struct seq *q = &seqs[i];
            if (q->done)
                continue;
            apply_filters(c, q, q->logits);
            log_softmax(q->logits, c->logprobs, c->nv);
            int tok = temperature > 0 ? sampler_sample(smp[i], q->logits, NULL) : argmax(q->logits, c->nv);
            if (tok < 0)
                tok = c->eot;
            seq_push(c, q, tok);
            if (!q->done)
                active[n_active++] = q;
        }
        if (n_active > 0 && (rc = step(c, active, n_active, n_prompt)) < 0)
            goto out;
        if (aborted(c)) {
            rc = omni_fail(c->err, c->errlen, OMNI_ERR_LIMIT, "whisper: aborted");
            goto out;
        }
    }
out:
    for (int i = 0; i < n; i++)
        sampler_free(smp[i]);
    return rc;
}

struct cand {
    double score;
    int beam, tok;
};

static int cand_cmp(const void *a, const void *b)
{
    const double x = ((const struct cand *)a)->score, y = ((const struct cand *)b)->score;
    return x < y ? 1 : x > y ? -1 : 0;
}

/* OpenAI's BeamSearchDecoder: each beam proposes its beam_size + 1 best
 * tokens; the best beam_size non-EOT candidates continue, EOT candidates
 * finish, until beam_size have finished or the length limit. Beams live in
 * slots [0, B) and [B, 2B) alternately, so a reordered K/V cache is copied
 * from the old half into the new one. finished[] gets up to B sequences. */
static int run_beam(struct ctx *c, struct seq *beams, struct seq *next, struct seq *finished, int *n_finished,
                    int B, int n_prompt)
{
    struct cand *cands = malloc((size_t)B * (B + 1) * sizeof *cands);
    int *top = malloc((B + 1) * sizeof *top);
    int rc = OMNI_OK, n_beams = B, half = 0;
    if (!cands || !top) {
        rc = omni_fail(c->err, c->errlen, OMNI_ERR_NOMEM, "whisper: out of memory for beam search");
        goto out;
    }
    /* at the start every beam is the prompt: let only beam 0 propose */
    n_beams = 1;
    *n_finished = 0;
    while (n_beams > 0 && *n_finished < B) {
        int nc = 0;
        for (int i = 0; i < n_beams; i++) {
            struct seq *q = &beams[i];
            apply_filters(c, q, q->logits);
            log_softmax(q->logits, c->logprobs, c->nv);
            /* the B + 1 best tokens by log-probability (partial selection) */
            int nt = 0;
            for (int t = 0; t < c->nv; t++) {
                const float v = c->logprobs[t];
                if (v == -INFINITY || (nt == B + 1 && v <= c->logprobs[top[nt - 1]]))
                    continue;
                int k = nt < B + 1 ? nt++ : B;
                while (k > 0 && c->logprobs[top[k - 1]] < v) {
                    top[k] = top[k - 1];
                    k--;
                }
                top[k] = t;
            }
            for (int k = 0; k < nt; k++)
                cands[nc++] = (struct cand){ q->sum_logprob + c->logprobs[top[k]], i, top[k] };
            memcpy(q->logits, c->logprobs, (size_t)c->nv * sizeof(float)); /* keep for seq_push below */
        }
        qsort(cands, nc, sizeof *cands, cand_cmp);
        int n_next = 0;
        for (int k = 0; k < nc && n_next < B; k++) {
            const struct seq *src = &beams[cands[k].beam];
            memcpy(c->logprobs, src->logits, (size_t)c->nv * sizeof(float));
            if (cands[k].tok == c->eot) {
                if (*n_finished < B) {
                    seq_copy(&finished[*n_finished], src);
                    seq_push(c, &finished[(*n_finished)++], c->eot);
                }
                continue;
            }
            struct seq *q = &next[n_next];
            seq_copy(q, src);
            seq_push(c, q, cands[k].tok);
            q->slot = (1 - half) * B + n_next;
            if ((rc = copy_cache(c, src->slot, q->slot, n_prompt + src->n)) < 0)
                goto out;
            n_next++;
        }
        /* sequences at the length limit finish as they are; the rest step together */
        struct seq *go[WHISPER_MAX_BEAMS];
        int n_go = 0;
        for (int k = 0; k < n_next; k++) {
            if (!next[k].done)
                go[n_go++] = &next[k];
            else if (*n_finished < B)
                seq_copy(&finished[(*n_finished)++], &next[k]);
        }
        if (n_go > 0 && (rc = step(c, go, n_go, n_prompt)) < 0)
            goto out;
        n_beams = 0;
        for (int k = 0; k < n_next; k++) {
            if (next[k].done)
                continue;
            struct seq tmp = beams[n_beams];
            beams[n_beams] = next[k];
            next[k] = tmp;
            n_beams++;
        }
        half = 1 - half;
        if (aborted(c)) {
            rc = omni_fail(c->err, c->errlen, OMNI_ERR_LIMIT, "whisper: aborted");
            goto out;
        }
    }
    for (int i = 0; i < n_beams && *n_finished < B; i++) /* unfinished beams count as they are */
        seq_copy(&finished[(*n_finished)++], &beams[i]);
out:
    free(cands);
    free(top);
    return rc;
}

// ---- one window -----------------------------------------------------------------

static float compression_ratio(const char *text, size_t len)
{
    uLongf out_len = compressBound(len);
    unsigned char *out = malloc(out_len);
    if (!out || compress2(out, &out_len, (const unsigned char *)text, len, Z_DEFAULT_COMPRESSION) != Z_OK) {
        free(out);
        return 0.0f;
    }
    free(out);
    return (float)len / (float)out_len;
}

/* Text bytes of tokens (timestamps and specials left out); caller frees. */
static char *tokens_text(const struct whisper_model *m, const int32_t *tok, int n, int eot, size_t *len_out)
{
    size_t len = 0;
    for (int i = 0; i < n; i++)
        if (tok[i] < eot)
            len += m->vocab_len[tok[i]];
    char *t = malloc(len + 1);
    if (!t)
        return NULL;
    len = 0;
    for (int i = 0; i < n; i++)
        if (tok[i] < eot) {
            memcpy(t + len, m->vocab_blob + m->vocab_off[tok[i]], m->vocab_len[tok[i]]);
            len += m->vocab_len[tok[i]];
        }
    t[len] = 0;
    if (len_out)
        *len_out = len;
    return t;
}

/* Decode the encoded window with prompt[0..n_prompt) (sot at sot_index) at
 * one temperature; the best sequence goes to w->best. */
static int decode_window(struct ctx *c, const int32_t *prompt, int n_prompt, int sot_index, float temperature,
                         uint64_t seed, struct seq *pool, struct window *w)
{
    const struct whisper_full_params *p = c->p;
    struct whisper_state *s = c->s;
    const int nosp = c->m->special[WHISPER_TOKEN_NOSP];
    int rc;
    /* the prompt through <|startoftranscript|> gives the no-speech probability */
    if ((rc = whisper_decode(s, 0, prompt, sot_index + 1, 0, false, c->err, c->errlen)) < 0)
        return rc;
    log_softmax(whisper_logits(s), c->logprobs, c->nv);
    w->no_speech_prob = nosp >= 0 ? expf(c->logprobs[nosp]) : 0.0f;
    if (sot_index + 1 < n_prompt &&
        (rc = whisper_decode(s, 0, prompt + sot_index + 1, n_prompt - sot_index - 1, sot_index + 1, false, c->err,
                             c->errlen)) < 0)
        return rc;

    const bool beam = p->strategy == WHISPER_SAMPLING_BEAM_SEARCH && temperature <= 0;
    const int n = beam ? p->beam_size : temperature > 0 ? p->greedy_best_of : 1;
    struct seq *beams = pool, *next = pool + WHISPER_MAX_BEAMS, *fin = pool + 2 * WHISPER_MAX_BEAMS;
    struct seq *cands = beam ? fin : pool;
    for (int i = 0; i < WHISPER_MAX_DECODERS + WHISPER_MAX_BEAMS; i++)
        seq_reset(&pool[i]);
    for (int i = 0; i < (beam ? 1 : n); i++) {
        pool[i].slot = i;
        memcpy(pool[i].logits, whisper_logits(s), (size_t)c->nv * sizeof(float));
        if (i > 0 && (rc = copy_cache(c, 0, i, n_prompt)) < 0)
            return rc;
    }
    int n_cands = n;
    rc = beam ? run_beam(c, beams, next, fin, &n_cands, n, n_prompt)
              : run_sampling(c, pool, n, temperature, n_prompt, seed);
    if (rc < 0)
        return rc;

    /* rank by sum log-probability over a length penalty (OpenAI's ranker) */
    int best = 0;
    double best_score = -INFINITY;
    for (int i = 0; i < n_cands; i++) {
        const double len = cands[i].n;
        const double pen = p->length_penalty < 0 ? len : pow((5.0 + len) / 6.0, p->length_penalty);
        const double score = cands[i].sum_logprob / (pen > 0 ? pen : 1.0);
        if (score > best_score) {
            best_score = score;
            best = i;
        }
    }
    seq_copy(&w->best, &cands[best]);
    w->avg_logprob = (float)(w->best.sum_logprob / (w->best.n + 1));
    w->temperature = temperature;
    size_t len;
    char *text = tokens_text(c->m, w->best.tok, w->best.n, c->eot, &len);
    if (!text)
        return omni_fail(c->err, c->errlen, OMNI_ERR_NOMEM, "whisper: out of memory");
    w->compression_ratio = compression_ratio(text, len);
    free(text);
    return OMNI_OK;
}

// ---- segments and the seek loop -----------------------------------------------

static int add_segment(struct ctx *c, int64_t t0_ms, int64_t t1_ms, const struct seq *q, int from, int to,
                       const struct window *w)
{
    struct whisper_state *s = c->s;
    size_t len;
    char *text = tokens_text(c->m, q->tok + from, to - from, c->eot, &len);
    if (!text)
        return omni_fail(c->err, c->errlen, OMNI_ERR_NOMEM, "whisper: out of memory");
    bool blank = true;
    for (size_t i = 0; i < len && blank; i++)
        blank = isspace((unsigned char)text[i]);
    if (blank || t0_ms == t1_ms) { /* OpenAI drops empty and zero-length segments */
        free(text);
        return OMNI_OK;
    }
    if (s->n_segs == s->cap_segs) {
        const int cap = s->cap_segs ? 2 * s->cap_segs : 16;
        struct whisper_segment *ns = realloc(s->segs, cap * sizeof *ns);
        if (!ns) {
            free(text);
            return omni_fail(c->err, c->errlen, OMNI_ERR_NOMEM, "whisper: out of memory");
        }
        s->segs = ns;
        s->cap_segs = cap;
    }
    struct whisper_segment *g = &s->segs[s->n_segs];
    memset(g, 0, sizeof *g);
    g->tokens = malloc((size_t)(to - from + 1) * sizeof *g->tokens);
    if (!g->tokens) {
        free(text);
        return omni_fail(c->err, c->errlen, OMNI_ERR_NOMEM, "whisper: out of memory");
    }
    for (int i = from; i < to; i++)
        if (q->tok[i] < c->eot)
            g->tokens[g->n_tokens++] = (struct whisper_token_data){ q->tok[i], q->p[i], q->lp[i],
                                                                    q->tid[i], q->pt[i],
                                                                    q->ptsum[i] };
    g->t0_ms = t0_ms;
    g->t1_ms = t1_ms;
    g->text = text;
    g->avg_logprob = w->avg_logprob;
    g->compression_ratio = w->compression_ratio;
    g->temperature = w->temperature;
    g->no_speech_prob = w->no_speech_prob;
    s->n_segs++;
    return OMNI_OK;
}

/* Split a window's tokens at timestamp pairs into segments (OpenAI's rules)
 * and return how many mel frames to advance. */
static int segment_window(struct ctx *c, const struct window *w, int seek, int segment_size, int64_t base_ms,
                          int *advance)
{
    const struct seq *q = &w->best;
    const int beg = c->beg, n = q->n;
    const int64_t t_off = base_ms + (int64_t)seek * MS_PER_FRAME;
    int rc;
    if (c->p->no_timestamps || beg < 0) {
        *advance = segment_size;
        return add_segment(c, t_off, t_off + (int64_t)segment_size * MS_PER_FRAME, q, 0, n, w);
    }
#define IS_TS(i) (q->tok[i] >= beg)
    const bool single_ending = n >= 2 && !IS_TS(n - 2) && IS_TS(n - 1);
    int last_slice = 0;
    bool any_pair = false;
    for (int i = 1; i <= n; i++) {
        const bool pair = i < n && IS_TS(i) && IS_TS(i - 1);
        if (!pair && !(i == n && single_ending && any_pair))
            continue;
        any_pair = true;
        const int t0 = q->tok[last_slice] - beg, t1 = q->tok[i - 1] - beg;
        if ((rc = add_segment(c, t_off + t0 * 20, t_off + t1 * 20, q, last_slice, i, w)) < 0)
            return rc;
        last_slice = i;
    }
    if (any_pair) {
        *advance = single_ending ? segment_size : (q->tok[last_slice - 1] - beg) * FRAMES_PER_TS;
    } else {
        int64_t dur_ms = (int64_t)segment_size * MS_PER_FRAME;
        for (int i = n - 1; i >= 0; i--)
            if (IS_TS(i)) {
                if (q->tok[i] != beg)
                    dur_ms = (int64_t)(q->tok[i] - beg) * 20;
                break;
            }
        if ((rc = add_segment(c, t_off, t_off + dur_ms, q, 0, n, w)) < 0)
            return rc;
        *advance = segment_size;
    }
#undef IS_TS
    if (*advance < 1) /* a window that makes no progress would repeat forever */
        *advance = segment_size;
    return OMNI_OK;
}

int whisper_lang_detect(struct whisper_state *s, float *probs, char *err, size_t errlen)
{
    const struct whisper_model *m = s->m;
    if (m->n_langs < 1)
        return omni_fail(err, errlen, OMNI_ERR_UNSUPPORTED, "whisper: %s: English-only model has no language tokens",
                         m->path);
    const int32_t sot = m->special[WHISPER_TOKEN_SOT];
    int rc = whisper_decode(s, 0, &sot, 1, 0, false, err, errlen);
    if (rc < 0)
        return rc;
    /* softmax over the language tokens only */
    const float *l = whisper_logits(s) + sot + 1;
    int best = 0;
    for (int i = 1; i < m->n_langs; i++)
        best = l[i] > l[best] ? i : best;
    if (probs) {
        double sum = 0;
        for (int i = 0; i < m->n_langs; i++)
            sum += exp((double)l[i] - l[best]);
        for (int i = 0; i < m->n_langs; i++)
            probs[i] = (float)(exp((double)l[i] - l[best]) / sum);
    }
    return best;
}

static void clear_results(struct whisper_state *s)
{
    for (int i = 0; i < s->n_segs; i++) {
        free(s->segs[i].text);
        free(s->segs[i].tokens);
    }
    s->n_segs = 0;
}

static int check_params(const struct whisper_model *m, const struct whisper_full_params *p, char *err, size_t errlen)
{
    if (m->special[WHISPER_TOKEN_SOT] < 0)
        return omni_fail(err, errlen, OMNI_ERR_UNSUPPORTED,
                         "whisper: %s: vocabulary of %d tokens has no special tokens to decode with", m->path,
                         m->hp.n_vocab);
    if (p->beam_size < 1 || p->beam_size > WHISPER_MAX_BEAMS || p->greedy_best_of < 1 ||
        p->greedy_best_of > WHISPER_MAX_DECODERS)
        return omni_fail(err, errlen, OMNI_ERR_ARG, "whisper: beam_size %d (1..%d) or best_of %d (1..%d) out of range",
                         p->beam_size, WHISPER_MAX_BEAMS, p->greedy_best_of, WHISPER_MAX_DECODERS);
    if (!(p->temperature >= 0 && p->temperature <= 2) || p->offset_ms < 0 || p->duration_ms < 0 || p->max_tokens < 0)
        return omni_fail(err, errlen, OMNI_ERR_ARG, "whisper: temperature %g, offset %d ms, duration %d ms or "
                         "max_tokens %d out of range", p->temperature, p->offset_ms, p->duration_ms, p->max_tokens);
    if (p->audio_ctx < WHISPER_AUDIO_CTX_AUTO || p->audio_ctx > m->hp.n_audio_ctx || p->audio_ctx_margin < 0 ||
        p->audio_ctx_margin > m->hp.n_audio_ctx)
        return omni_fail(err, errlen, OMNI_ERR_ARG, "whisper: audio_ctx %d (0..%d, or auto) or its margin %d "
                         "out of range", p->audio_ctx, m->hp.n_audio_ctx, p->audio_ctx_margin);
    if (p->language && strcmp(p->language, "auto") && whisper_lang_id(p->language) < 0)
        return omni_fail(err, errlen, OMNI_ERR_ARG, "whisper: unknown language '%s'", p->language);
    if (p->language && m->n_langs > 0 && whisper_lang_id(p->language) >= m->n_langs)
        return omni_fail(err, errlen, OMNI_ERR_UNSUPPORTED, "whisper: %s: language '%s' not in this model",
                         m->path, p->language);
    return OMNI_OK;
}

int whisper_full(struct whisper_state *s, const struct whisper_full_params *p, const float *pcm, int64_t n_samples,
                 char *err, size_t errlen)
{
    const struct whisper_model *m = s->m;
    const struct whisper_hparams *hp = &m->hp;
    const struct whisper_full_params defaults = whisper_full_default_params(WHISPER_SAMPLING_GREEDY);
    if (!p)
        p = &defaults;
    int rc = check_params(m, p, err, errlen);
    if (rc < 0)
        return rc;
    if (n_samples < 0 || (n_samples > 0 && !pcm))
        return omni_fail(err, errlen, OMNI_ERR_ARG, "whisper: no audio");
    clear_results(s);
    snprintf(s->lang, sizeof s->lang, "en");

    /* the part of the audio to decode */
    const int64_t off = (int64_t)p->offset_ms * WHISPER_SAMPLE_RATE_HZ / 1000;
    int64_t n = off < n_samples ? n_samples - off : 0;
    if (p->duration_ms > 0 && n > (int64_t)p->duration_ms * WHISPER_SAMPLE_RATE_HZ / 1000)
        n = (int64_t)p->duration_ms * WHISPER_SAMPLE_RATE_HZ / 1000;
    if (n < MEL_HOP)
        return OMNI_OK;

    if (s->batcher) /* the batcher waits for this state's requests while it is busy */
        whisper_batcher_busy(s->batcher, +1);
    const int nt = hp->n_text_ctx;
    struct ctx c = { .s = s, .p = p, .m = m, .nv = hp->n_vocab, .err = err, .errlen = errlen };
    c.eot = m->special[WHISPER_TOKEN_EOT];
    c.beg = m->special[WHISPER_TOKEN_BEG];
    int32_t blank;
    c.blank = whisper_tokenize(m, " ", &blank, 1) == 1 ? blank : -1;
    struct mel_spec mel = { 0 };
    struct seq pool[WHISPER_MAX_DECODERS + WHISPER_MAX_BEAMS] = { 0 };
    struct window w = { 0 };
    int32_t *prompt = malloc((size_t)nt * sizeof *prompt), *hist = malloc((size_t)nt * sizeof *hist);
    int n_hist = 0;
    c.logprobs = malloc((size_t)c.nv * sizeof(float));
    rc = prompt && hist && c.logprobs && seq_alloc(&w.best, nt, c.nv) == OMNI_OK ? OMNI_OK : OMNI_ERR_NOMEM;
    for (int i = 0; i < WHISPER_MAX_DECODERS + WHISPER_MAX_BEAMS && rc == OMNI_OK; i++)
        rc = seq_alloc(&pool[i], nt, c.nv);
    if (rc < 0) {
        omni_fail(err, errlen, rc, "whisper: out of memory");
        goto out;
    }
    /* Windows read at most this far past the audio: 30 s of padding for
     * full windows, less for reduced ones (the frames they read are the same:
     * padding frames never set the log-mel's maximum). */
    const int nc = hp->n_audio_ctx, win_frames = window_frames(p, nc);
    int64_t pad = MEL_PAD_30S;
    if (p->audio_ctx > 0)
        pad = (int64_t)(win_frames + 4) * MEL_HOP;
    else if (p->audio_ctx == WHISPER_AUDIO_CTX_AUTO)
        pad = (int64_t)(2 * (p->audio_ctx_margin + 64) + 4) * MEL_HOP;
    if (pad > MEL_PAD_30S)
        pad = MEL_PAD_30S;
    if ((rc = mel_compute(s->tp, m->filters, hp->n_mels, pcm + off, n, pad, &mel, err, errlen)) < 0)
        goto out;
    const int content_frames = (int)(n / MEL_HOP);

    /* language: given, or detected on the first window */
    int lang = 0, encoded = -1, encoded_ctx = 0; /* the window the encoder output belongs to */
    if (m->n_langs > 0) {
        if (p->language && strcmp(p->language, "auto")) {
            lang = whisper_lang_id(p->language);
        } else {
            const int ctx0 = window_ctx(p, nc, content_frames < win_frames ? content_frames : win_frames);
            if ((rc = whisper_encode_ctx(s, mel.data, mel.n_frames, 0, ctx0, err, errlen)) < 0 ||
                (rc = whisper_lang_detect(s, NULL, err, errlen)) < 0)
                goto out;
            lang = rc;
            encoded = 0;
            encoded_ctx = ctx0;
        }
        snprintf(s->lang, sizeof s->lang, "%s", whisper_lang_str(lang));
    }
    if (p->initial_prompt && *p->initial_prompt) {
        char *text = malloc(strlen(p->initial_prompt) + 2);
        if (!text) {
            rc = omni_fail(err, errlen, OMNI_ERR_NOMEM, "whisper: out of memory");
            goto out;
        }
        const char *t = p->initial_prompt;
        while (isspace((unsigned char)*t))
            t++;
        sprintf(text, " %s", t);
        for (size_t k = strlen(text); k > 1 && isspace((unsigned char)text[k - 1]); k--)
            text[k - 1] = 0;
        rc = whisper_tokenize(m, text, hist, nt);
        free(text);
        if (rc == OMNI_ERR_LIMIT)
            rc = nt; /* long prompts keep their start; only the tail is used below */
        else if (rc < 0)
            goto out;
        n_hist = rc;
    }

    for (int seek = 0; seek < content_frames;) {
        const int segment_size = content_frames - seek < win_frames ? content_frames - seek : win_frames;
        const int n_ctx = window_ctx(p, nc, segment_size);
        if (aborted(&c)) { /* before the encoder pass, which cannot stop midway */
            rc = omni_fail(err, errlen, OMNI_ERR_LIMIT, "whisper: aborted");
            goto out;
        }
        if ((encoded != seek || encoded_ctx != n_ctx) &&
            (rc = whisper_encode_ctx(s, mel.data, mel.n_frames, seek, n_ctx, err, errlen)) < 0)
            goto out;
        encoded = seek;
        encoded_ctx = n_ctx;
        /* <|startofprev|> + the tail of earlier text, then the sot sequence */
        int np = 0;
        if (n_hist > 0) {
            const int keep = n_hist < nt / 2 - 1 ? n_hist : nt / 2 - 1;
            prompt[np++] = m->special[WHISPER_TOKEN_PREV];
            memcpy(prompt + np, hist + n_hist - keep, keep * sizeof *prompt);
            np += keep;
        }
        const int sot_index = np;
        prompt[np++] = m->special[WHISPER_TOKEN_SOT];
        if (m->n_langs > 0) {
            prompt[np++] = whisper_token_lang(m, lang);
            prompt[np++] = m->special[p->translate ? WHISPER_TOKEN_TRANSLATE : WHISPER_TOKEN_TRANSCRIBE];
        }
        if (p->no_timestamps)
            prompt[np++] = m->special[WHISPER_TOKEN_NOT];
        const int max_tokens = p->max_tokens > 0 ? p->max_tokens : nt / 2;
        c.max_len = nt - np < max_tokens ? nt - np : max_tokens;

        /* temperature fallback */
        for (float t = p->temperature;; t += p->temperature_inc) {
            if ((rc = decode_window(&c, prompt, np, sot_index, t, p->seed + (uint64_t)seek * 131, pool, &w)) < 0)
                goto out;
            const bool silent = w.no_speech_prob > p->no_speech_thold && w.avg_logprob < p->logprob_thold;
            const bool fallback = (w.compression_ratio > p->compression_ratio_thold ||
                                   w.avg_logprob < p->logprob_thold) && !silent;
            if (!fallback || p->temperature_inc <= 0 || t + p->temperature_inc > 1.0f + 1e-6f)
                break;
        }
        if (w.no_speech_prob > p->no_speech_thold && w.avg_logprob < p->logprob_thold) {
            seek += segment_size; /* silence: skip the window (OpenAI) */
            continue;
        }
        const int before = s->n_segs;
        int advance;
        if ((rc = segment_window(&c, &w, seek, segment_size, p->offset_ms, &advance)) < 0)
            goto out;
        seek += advance;
        /* condition the next window on this one's tokens (unless it was noisy) */
        if (p->no_context || w.temperature > 0.5f) {
            n_hist = 0;
        } else {
            const int add = w.best.n < nt ? w.best.n : nt;
            if (n_hist + add > nt) {
                memmove(hist, hist + (n_hist + add - nt), (size_t)(nt - add) * sizeof *hist);
                n_hist = nt - add;
            }
            memcpy(hist + n_hist, w.best.tok + w.best.n - add, add * sizeof *hist);
            n_hist += add;
        }
        if (s->n_segs > before && p->new_segment_callback)
            p->new_segment_callback(s, s->n_segs - before, p->new_segment_callback_user_data);
        if (aborted(&c)) {
            rc = omni_fail(err, errlen, OMNI_ERR_LIMIT, "whisper: aborted");
            goto out;
        }
    }
    rc = OMNI_OK;
out:
    if (s->batcher)
        whisper_batcher_busy(s->batcher, -1);
    mel_spec_free(&mel);
    for (int i = 0; i < WHISPER_MAX_DECODERS + WHISPER_MAX_BEAMS; i++)
        seq_free(&pool[i]);
    seq_free(&w.best);
    free(prompt);
    free(hist);
    free(c.logprobs);
    return rc;
}

int whisper_full_n_segments(const struct whisper_state *s) { return s->n_segs; }

int whisper_full_window_ctx(const struct whisper_model *m, const struct whisper_full_params *p, int n_frames)
{
    const int nc = m->hp.n_audio_ctx, win = window_frames(p, nc);
    return window_ctx(p, nc, n_frames < win ? (n_frames > 0 ? n_frames : 0) : win);
}

const struct whisper_segment *whisper_full_get_segment(const struct whisper_state *s, int i)
{
    return i >= 0 && i < s->n_segs ? &s->segs[i] : NULL;
}

const char *whisper_full_lang(const struct whisper_state *s) { return s->lang; }
