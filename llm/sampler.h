/* sampler.h - turning a row of logits into the next token, and stop strings.
 *
 * The chain follows llama.cpp's common defaults: penalties (repetition,
 * presence, frequency) -> logit bias -> top-k -> top-p -> min-p ->
 * temperature -> draw. Temperature <= 0 is greedy (argmax, ties to the lowest
 * id) and skips truncation and the draw.
 *
 *   struct sampler_params sp = sampler_default_params();
 *   sp.temperature = 0.7f; sp.seed = 42;
 *   struct sampler *s = sampler_new(&sp, n_vocab, err, sizeof err);
 *   for (each prompt token t) sampler_accept(s, t);    // penalties see the prompt
 *   int32_t id = sampler_sample(s, logits, NULL);      // or &logprobs
 *   sampler_accept(s, id);
 *   sampler_free(s);
 *
 * Randomness: each sampler owns a xoshiro256** generator seeded through
 * splitmix64 from params.seed, so the same seed and the same logits give the
 * same tokens on every machine. SAMPLER_SEED_RANDOM seeds from the clock.
 *
 * Thread safety: a sampler and a stop matcher belong to one sequence and one
 * thread at a time; nothing is shared between instances. */
#ifndef OMNI_SAMPLER_H
#define OMNI_SAMPLER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SAMPLER_SEED_RANDOM UINT64_MAX
#define SAMPLER_MAX_LOGPROBS 20 /* OpenAI's top_logprobs limit */

struct sampler_logit_bias {
    int32_t token;
    float bias;              /* added to the logit; -INFINITY bans the token */
};

struct sampler_params {
    float temperature;        /* <= 0: greedy. default 0.8 */
    int top_k;                /* <= 0: off. default 40 */
    float top_p;              /* >= 1: off. default 0.95 */
    float min_p;              /* <= 0: off. default 0.05 (relative to the top prob) */
    float repetition_penalty; /* 1: off. >1 divides positive logits and multiplies
                                 negative ones of recent tokens (HF / llama.cpp) */
    int penalty_last_n;       /* recent-token window for all penalties; default 64,
                                 0: penalties off, -1: the whole history */
    float presence_penalty;   /* subtracted once from each recent token; default 0 */
    float frequency_penalty;  /* subtracted per occurrence; default 0 */
    const struct sampler_logit_bias *logit_bias; /* copied by sampler_new */
    int n_logit_bias;
    uint64_t seed;            /* default SAMPLER_SEED_RANDOM */
    int n_logprobs;           /* top alternatives to report, 0..SAMPLER_MAX_LOGPROBS */
};
struct sampler_params sampler_default_params(void);

struct sampler;

/* NULL + message on bad parameters (n_vocab < 1, bias token out of range,
 * min_p > 1, repetition_penalty <= 0, NaN values) or when memory runs out. */
struct sampler *sampler_new(const struct sampler_params *params, int n_vocab, char *err,
                            size_t errlen);
void sampler_free(struct sampler *s);

/* Forget the token history (penalties) and restart the generator from the
 * seed, so a reset sampler repeats its first run exactly. */
void sampler_reset(struct sampler *s);

/* Record a token (prompt or generated) for the penalties. 0, or
 * OMNI_ERR_NOMEM when the history cannot grow (the token is then not seen). */
int sampler_accept(struct sampler *s, int32_t token);

/* The seed in use (the drawn one for SAMPLER_SEED_RANDOM), for reports. */
uint64_t sampler_seed(const struct sampler *s);

/* Log-probabilities, as OpenAI's API reports them: of the distribution after
 * penalties and logit bias, before truncation and temperature. */
struct sampler_logprob {
    int32_t token;
    float logprob;
};
struct sampler_logprobs {
    struct sampler_logprob chosen;
    int n_top;                                         /* = params.n_logprobs */
    struct sampler_logprob top[SAMPLER_MAX_LOGPROBS];  /* most likely first */
};

/* Pick the next token from logits[n_vocab] (not modified). Fills *lp when lp
 * is non-NULL. Does not call sampler_accept. Returns the id, or -1 when every
 * token is banned (all logits -inf or NaN). */
int32_t sampler_sample(struct sampler *s, const float *logits, struct sampler_logprobs *lp);

/* ---- stop strings ----
 * Generated text arrives in pieces; a stop string may span several of them.
 * The matcher holds back the longest tail that could still grow into a stop
 * string and releases everything before it:
 *
 *   struct sampler_stop *st = sampler_stop_new(stops, n, err, sizeof err);
 *   const char *text; size_t len;
 *   int r = sampler_stop_feed(st, piece, piece_len, &text, &len);
 *   write(text, len);               // safe to show now (maybe empty)
 *   if (r == 1) finish();           // a stop string completed; text is what preceded it
 *   ...at the end: sampler_stop_flush(st, &text, &len); write(text, len);
 *
 * Returned text points into the matcher and is valid until its next call.
 * Stops are compared byte for byte; with valid UTF-8 stops and pieces the
 * released text never splits a character. */
struct sampler_stop;

/* Copies the strings; empty strings are ignored. n_stops may be 0. */
struct sampler_stop *sampler_stop_new(const char *const *stops, int n_stops, char *err,
                                      size_t errlen);
void sampler_stop_free(struct sampler_stop *st);

/* Returns 0 (no stop yet), 1 (a stop string completed: *text is the rest of
 * the output before it, and later feeds return nothing), or OMNI_ERR_NOMEM. */
int sampler_stop_feed(struct sampler_stop *st, const char *piece, size_t len,
                      const char **text, size_t *text_len);
/* Index of the stop string that matched (in the order given), or -1. */
int sampler_stop_which(const struct sampler_stop *st);
/* End of generation without a stop: release what was held back. */
void sampler_stop_flush(struct sampler_stop *st, const char **text, size_t *text_len);

#endif
