/* outetts_speak.c - OuteTTS 1.0 synthesis: an engine request whose tokens
 * the engine thread parses into code frames, a queue of completed words,
 * and the calling thread's streaming DAC decode.
 *
 * The engine callback only parses and queues (it must not block); the
 * decoder runs on the caller's thread between waits, a word at a time, so
 * the first audio is out while the model is still writing later words. */
#include "audio/tts/outetts_speak.h"

#include "audio/codec/dac.h"
#include "audio/tts/outetts.h"
#include "audio/tts/tts.h"
#include "llm/model.h"
#include "llm/tokenizer.h"
#include "src/core/omni.h"
#include "src/core/threadpool.h"
#include "src/engine/engine.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define SPEAK_MAX_PROMPT 32768
#define OUTETTS_MAX_SCRIPT 65536   /* tokens of a scripted chunk */
/* text longer than this is spoken in chunks of whole sentences up to it */
#define OUTETTS_CHUNK_CHARS 300

struct outetts_speak_params outetts_speak_default_params(void)
{
    return (struct outetts_speak_params){ .max_tokens = 0, .temperature = OUTETTS_TEMPERATURE,
                                          .first_chunk_frames = 8, .chunk_frames = 32 };
}

/* What the engine thread hands the decoder. */
struct speak_job {
    const struct outetts_vocab *vocab;
    struct outetts_parser parser;      /* engine thread only */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int32_t *frames;                   /* {mu}: queued frames, frame-major (c1, c2) */
    size_t n_frames, cap_frames;       /* {mu} */
    bool done, failed, audio_end;      /* {mu} */
    char error[256];                   /* {mu} */
    struct engine_usage usage;         /* {mu} */
    const int32_t *script;             /* p->scripted: the tokens to force, engine thread */
    int n_script, at_script;
};

/* engine thread: p->scripted's next token (its last, <|audio_end|>, ends the request) */
static int32_t script_next(void *user, int choice)
{
    (void)choice;
    struct speak_job *j = user;
    return j->at_script < j->n_script ? j->script[j->at_script++] : -1;
}

/* engine thread: queue frames[0 .. n) of the parser (the word so far) */
static void job_flush_word(struct speak_job *j)
{
    struct outetts_parser *p = &j->parser;
    if (p->n_frames == 0)
        return;
    pthread_mutex_lock(&j->mu);
    if (j->n_frames + (size_t)p->n_frames > j->cap_frames) {
        size_t cap = j->cap_frames ? 2 * j->cap_frames : 1024;
        while (cap < j->n_frames + (size_t)p->n_frames)
            cap *= 2;
        int32_t *f = realloc(j->frames, cap * 2 * sizeof *f);
        if (!f) {
            j->failed = true;
            snprintf(j->error, sizeof j->error, "out of memory");
            pthread_mutex_unlock(&j->mu);
            return;
        }
        j->frames = f;
        j->cap_frames = cap;
    }
    memcpy(j->frames + 2 * j->n_frames, p->frames, (size_t)p->n_frames * 2 * sizeof(int32_t));
    j->n_frames += (size_t)p->n_frames;
    p->n_frames = 0;
    pthread_cond_signal(&j->cv);
    pthread_mutex_unlock(&j->mu);
}

static void on_event(void *user, const struct engine_event *ev)
{
    struct speak_job *j = user;
    if (ev->type == ENGINE_EV_TOKEN) {
        enum outetts_event oe = outetts_parser_push(&j->parser, j->vocab, ev->token);
        if (oe == OUTETTS_WORD_END)
            job_flush_word(j);
        return;
    }
    job_flush_word(j);   /* a word cut by max_tokens still sounds */
    pthread_mutex_lock(&j->mu);
    j->done = true;
    j->usage = ev->usage;
    if (ev->type == ENGINE_EV_ERROR) {
        j->failed = true;
        snprintf(j->error, sizeof j->error, "%s", ev->error ? ev->error : "engine error");
    }
    j->audio_end = ev->type == ENGINE_EV_DONE && ev->finish == ENGINE_FINISH_STOP;
    pthread_cond_signal(&j->cv);
    pthread_mutex_unlock(&j->mu);
}

/* decode frames through the stream under tp's budget; 0, 1 (stopped) or < 0 */
static int decode_some(struct dac_stream *s, struct tpool *tp, const int32_t *frames, size_t n,
                       bool finish, outetts_audio_fn on_audio, void *user,
                       struct outetts_speak_stats *st, double t0, char *err, size_t errlen)
{
    int nth = tp ? tpool_begin(tp, st->samples == 0) : 1;
    if (nth < 0)
        return omni_fail(err, errlen, OMNI_ERR_LIMIT, "outetts: shutting down");
    const float *pcm;
    int64_t k = 0;
    int rc = finish ? dac_stream_finish(s, tp, &pcm, &k, err, errlen)
                    : dac_stream_push(s, tp, frames, (int)n, &pcm, &k, err, errlen);
    if (tp)
        tpool_end(tp);
    if (rc < 0)
        return rc;
    if (k > 0) {
        if (st->samples == 0)
            st->first_audio_ms = (omni_time_s() - t0) * 1e3;
        st->samples += k;
        if (on_audio && on_audio(user, pcm, (size_t)k))
            return 1;
    }
    return 0;
}

/* One chunk of text: one request, one DAC stream. */
static int speak_chunk(struct engine *e, int model, const struct dac_model *dac, struct tpool *tp,
                       const struct outetts_speak_params *p, outetts_audio_fn on_audio,
                       void *user, struct outetts_speak_stats *st, double t0, char *err,
                       size_t errlen)
{
    memset(st, 0, sizeof *st);
    struct llm_model *lm = engine_model(e, model);
    if (!lm)
        return omni_fail(err, errlen, OMNI_ERR_ARG, "outetts: no model %d in the engine", model);
    const struct dac_info *di = dac_get_info(dac);
    if (di->n_codebooks < 2 || di->codebook_size < OUTETTS_CODEBOOK_SIZE)
        return omni_fail(err, errlen, OMNI_ERR_ARG, "outetts: the codec has %d codebooks of %d "
                         "codes; OuteTTS 1.0 needs 2 of %d (DAC.speech.v1.0)", di->n_codebooks,
                         di->codebook_size, OUTETTS_CODEBOOK_SIZE);
    const struct tokenizer *tok = llm_model_tokenizer(lm);
    struct speak_job j = { 0 };
    struct dac_stream *s = NULL;
    char *prompt = NULL;
    int32_t *ids = NULL, *script = NULL;
    char *script_text = NULL;
    uint64_t id = 0;
    bool submitted = false;
    int rc = 0;
    pthread_mutex_init(&j.mu, NULL);
    pthread_cond_init(&j.cv, NULL);
    outetts_parser_init(&j.parser);
    struct outetts_vocab *vocab = outetts_vocab_new(tok, err, errlen);
    if (!vocab) {
        rc = OMNI_ERR_FORMAT;
        goto out;
    }
    j.vocab = vocab;
    if (!(prompt = outetts_prompt(p->text ? p->text : "", p->speaker, err, errlen))) {
        rc = OMNI_ERR_ARG;
        goto out;
    }
    int n = 0;
    if (!(ids = malloc(SPEAK_MAX_PROMPT * sizeof *ids)) ||
        (n = tokenizer_encode(tok, prompt, strlen(prompt), TOK_PARSE_SPECIAL, ids,
                              SPEAK_MAX_PROMPT, NULL)) <= 0) {
        rc = omni_fail(err, errlen, OMNI_ERR_LIMIT, "outetts: the prompt does not tokenize "
                       "into 1..%d tokens", SPEAK_MAX_PROMPT);
        goto out;
    }
    int n_script = 0;
    if (p->scripted) {
        if (!(script_text = outetts_script(p->text ? p->text : "", p->speaker != NULL, p->seed,
                                           NULL, NULL, err, errlen))) {
            rc = OMNI_ERR_ARG;
            goto out;
        }
        if (!(script = malloc(OUTETTS_MAX_SCRIPT * sizeof *script)) ||
            (n_script = tokenizer_encode(tok, script_text, strlen(script_text),
                                         TOK_PARSE_SPECIAL, script, OUTETTS_MAX_SCRIPT,
                                         NULL)) <= 0) {
            rc = omni_fail(err, errlen, OMNI_ERR_LIMIT, "outetts: the script does not "
                           "tokenize into 1..%d tokens", OUTETTS_MAX_SCRIPT);
            goto out;
        }
        j.script = script;
        j.n_script = n_script;
    }
    struct dac_stream_params sp = { .first_chunk_frames = p->first_chunk_frames,
                                    .chunk_frames = p->chunk_frames };
    if (!(s = dac_stream_new(dac, &sp, 2, err, errlen))) {
        rc = OMNI_ERR_NOMEM;
        goto out;
    }
    int32_t stop[2];
    outetts_vocab_stop_tokens(vocab, stop);
    struct engine_request rq = engine_default_request();
    rq.model = model;
    rq.prompt = ids;
    rq.n_prompt = n;
    /* auto: a generous 40 tokens per byte of text (speech runs ~10: a word's
     * ~25 code pairs and its markers), a guard against a model that never
     * ends its audio */
    size_t tl = strlen(p->text);
    rq.max_tokens = p->max_tokens > 0 ? p->max_tokens
                                      : (int)(tl > 200 ? 8192 : 64 + 40 * tl);
    if (p->scripted) {
        rq.max_tokens = n_script;
        rq.force_token = script_next;
    }
    rq.sampling = sampler_default_params();
    rq.sampling.temperature = p->temperature;
    rq.sampling.top_k = OUTETTS_TOP_K;
    rq.sampling.top_p = OUTETTS_TOP_P;
    rq.sampling.min_p = OUTETTS_MIN_P;
    rq.sampling.repetition_penalty = OUTETTS_REPETITION_PENALTY;
    rq.sampling.penalty_last_n = OUTETTS_PENALTY_WINDOW;
    rq.sampling.seed = p->seed;
    rq.stop_tokens = stop;
    rq.n_stop_tokens = 2;
    rq.on_event = on_event;
    rq.user = &j;
    if ((rc = engine_submit(e, &rq, &id, err, errlen)) < 0)
        goto out;
    submitted = true;

    /* decode words as they arrive */
    int32_t *batch = NULL;
    size_t cap = 0;
    for (;;) {
        pthread_mutex_lock(&j.mu);
        bool stop = false;
        while (!j.done && j.n_frames == 0 && !stop) {
            if (!p->poll) {
                pthread_cond_wait(&j.cv, &j.mu);
                continue;
            }
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            ts.tv_nsec += OUTETTS_POLL_MS * 1000000L;
            if (ts.tv_nsec >= 1000000000L) {
                ts.tv_sec++;
                ts.tv_nsec -= 1000000000L;
            }
            if (pthread_cond_timedwait(&j.cv, &j.mu, &ts) != 0) {
                pthread_mutex_unlock(&j.mu);   /* the poll may take the caller's locks */
                stop = p->poll(p->poll_user) != 0;
                pthread_mutex_lock(&j.mu);
            }
        }
        if (stop) {
            pthread_mutex_unlock(&j.mu);
            rc = 1;
            break;
        }
        size_t nf = j.n_frames;
        bool done = j.done;
        if (nf > cap) {
            int32_t *b = realloc(batch, nf * 2 * sizeof *b);
            if (!b) {
                pthread_mutex_unlock(&j.mu);
                rc = omni_fail(err, errlen, OMNI_ERR_NOMEM, "outetts: out of memory");
                break;
            }
            batch = b;
            cap = nf;
        }
        if (nf)
            memcpy(batch, j.frames, nf * 2 * sizeof *batch);
        j.n_frames = 0;
        pthread_mutex_unlock(&j.mu);
        if (nf) {
            st->frames += (int64_t)nf;
            if ((rc = decode_some(s, tp, batch, nf, false, on_audio, user, st, t0, err,
                                  errlen)) != 0)
                break;
        }
        if (done) {
            rc = decode_some(s, tp, NULL, 0, true, on_audio, user, st, t0, err, errlen);
            break;
        }
    }
    free(batch);
    if (rc != 0 && !j.done)
        engine_cancel(e, id);   /* stopped or failed: the sequence and its blocks go */
out:
    if (submitted) {            /* the engine touches j until its final event */
        pthread_mutex_lock(&j.mu);
        while (!j.done)
            pthread_cond_wait(&j.cv, &j.mu);
        pthread_mutex_unlock(&j.mu);
        st->prompt_tokens = j.usage.prompt_tokens;
        st->cached_tokens = j.usage.cached_tokens;
        st->completion_tokens = j.usage.completion_tokens;
        st->words = j.parser.words;
        st->audio_end = j.audio_end;
        if (rc == 0 && j.failed)
            rc = omni_fail(err, errlen, OMNI_ERR_FORMAT, "outetts: %s", j.error);
    }
    st->total_ms = (omni_time_s() - t0) * 1e3;
    dac_stream_free(s);
    free(ids);
    free(script);
    free(script_text);
    free(prompt);
    free(j.frames);
    outetts_vocab_free(vocab);
    pthread_mutex_destroy(&j.mu);
    pthread_cond_destroy(&j.cv);
    return rc;
}

/* Long text goes as chunks of whole sentences (tts_splitter), each its own
 * request with the speaker: the model was trained on utterances of a few
 * sentences. */
int outetts_speak(struct engine *e, int model, const struct dac_model *dac, struct tpool *tp,
                  const struct outetts_speak_params *p, outetts_audio_fn on_audio, void *user,
                  struct outetts_speak_stats *st, char *err, size_t errlen)
{
    double t0 = omni_time_s();
    memset(st, 0, sizeof *st);
    const char *text = p->text ? p->text : "";
    size_t len = strlen(text);
    if (len <= OUTETTS_CHUNK_CHARS) {
        int rc = speak_chunk(e, model, dac, tp, p, on_audio, user, st, t0, err, errlen);
        return rc == 1 ? 0 : rc;
    }
    if (len > OUTETTS_MAX_TEXT_BYTES)
        return omni_fail(err, errlen, OMNI_ERR_LIMIT, "outetts: text of %zu bytes, over %d", len,
                         OUTETTS_MAX_TEXT_BYTES);
    struct tts_splitter *sp = tts_splitter_new(OUTETTS_CHUNK_CHARS);
    if (!sp || tts_splitter_push(sp, text, len) < 0) {
        tts_splitter_free(sp);
        return omni_fail(err, errlen, OMNI_ERR_NOMEM, "outetts: out of memory");
    }
    char chunk[OUTETTS_CHUNK_CHARS * 2 + 2];
    size_t n = 0;
    int rc = 0;
    bool first = true;
    for (;;) {
        char *sent = tts_splitter_next(sp, false);   /* complete sentences first */
        if (!sent)
            sent = tts_splitter_next(sp, true);      /* then the rest */
        size_t sl = sent ? strlen(sent) : 0;
        /* flush the chunk when this sentence would overflow it, or at the end */
        if (n && (!sent || n + 1 + sl > OUTETTS_CHUNK_CHARS)) {
            chunk[n] = 0;
            struct outetts_speak_params q = *p;
            q.text = chunk;
            struct outetts_speak_stats cs;
            rc = speak_chunk(e, model, dac, tp, &q, on_audio, user, &cs, t0, err, errlen);
            st->prompt_tokens += cs.prompt_tokens;
            st->cached_tokens += cs.cached_tokens;
            st->completion_tokens += cs.completion_tokens;
            st->frames += cs.frames;
            st->words += cs.words;
            if (first && cs.samples)
                st->first_audio_ms = cs.first_audio_ms;
            first = first && !cs.samples;
            st->samples += cs.samples;
            st->audio_end = cs.audio_end;
            n = 0;
            if (rc != 0)
                break;
        }
        if (!sent)
            break;
        if (sl > 2 * OUTETTS_CHUNK_CHARS)
            sl = 2 * OUTETTS_CHUNK_CHARS;   /* the splitter cuts near max_chars; a guard */
        if (n)
            chunk[n++] = ' ';
        memcpy(chunk + n, sent, sl);   /* sl <= OUTETTS_CHUNK_CHARS: the splitter cuts longer */
        n += sl;
        free(sent);
    }
    tts_splitter_free(sp);
    st->total_ms = (omni_time_s() - t0) * 1e3;
    return rc == 1 ? 0 : rc;
}
