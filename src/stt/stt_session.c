/* stt_session.c - a live transcription stream behind stt_session.h.
 *
 * The owner thread resamples pushed PCM to 16 kHz, keeps it in a buffer and
 * runs the VAD stream over it; VAD start/stop events open and close turns.
 * Decoding runs on the stt workers, one job per session at a time: a job
 * picks the oldest committed turn (final) or, failing that, the turn still
 * being spoken (partial, over everything heard so far), then re-queues itself
 * while work remains, so sessions take turns on the workers.
 *
 * Latency: as soon as the VAD hears the first quiet window after speech (the
 * tentative end), the turn's final is decoded early ("early final"), on
 * exactly the audio the final will have if no more speech comes; the STOP,
 * min_silence (and any merge gap) later, then finds its transcript ready.
 * Speech that resumes cancels it. A queued final
 * aborts the partial in flight (its audio is stale); no partial is asked for
 * while the VAD hears silence; every decode caps its tokens by the audio's
 * length and encodes only the positions the audio needs (audio_ctx auto),
 * and only a final may spend one sampled fallback pass, when the greedy pass
 * left room in SS_FALLBACK_BUDGET_MS (see docs/audio.md). */
#include "src/stt/stt_session.h"

#include "media/audio.h"
#include "src/core/omni.h"
#include "src/stt/stt.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SS_RATE 16000
#define SS_MS(samples) ((samples) * 1000 / SS_RATE)
#define SS_KEEP_IDLE (2 * SS_RATE)            /* audio kept before a turn starts */
#define SS_MAX_BUFFER ((int64_t)15 * 60 * SS_RATE) /* uncommitted audio without server VAD */
#define SS_MIN_COMMIT (SS_RATE / 10)          /* 100 ms, as OpenAI requires */
/* Tokens a decode may sample: speech runs about 3-5 tokens/s, so this leaves
 * room for fast talkers while a hallucinating model stops early. */
#define SS_TOKENS_MIN 16
#define SS_TOKENS_PER_S 10
/* A final's greedy pass may be followed by one sampled pass (temperature
 * 0.2, best of 5) when its result looks wrong, but only if twice the greedy
 * pass's time fits in this budget: the sampled pass costs about as much. */
#define SS_FALLBACK_BUDGET_MS 300

struct ss_final {                 /* a committed turn waiting for its decode */
    int item;
    int64_t from, to;             /* its audio, absolute samples */
    float *pcm;
    size_t n;
    struct ss_final *next;
};

/* The early final of the turn being spoken: asked for by the owner, decoded
 * by a job, used by the final whose item and audio match. */
struct ss_early {
    int item;
    int64_t from, to;             /* 0, 0: none asked for */
    bool wanted;                  /* asked for, not started */
    char *text;                   /* decoded (NULL: not yet) */
    bool announced;               /* STT_EV_EARLY sent for it */
};

struct stt_session {
    struct stt *svc;
    /* owner thread */
    struct stt_session_params p;
    struct media_resampler *rs;
    struct vad_stream *vs;
    int64_t vad_base;             /* absolute sample of the VAD stream's position 0 */
    int64_t pos;                  /* absolute samples received */
    bool in_speech;
    int64_t seg_start;
    int64_t last_partial;         /* where the last partial was asked for */
    bool vad_quiet;               /* the VAD's last window was below its threshold */
    int item;
    /* shared */
    bool early_events;            /* fixed at creation */
    atomic_bool closed;
    pthread_mutex_t lock;
    /* Held around sending STT_EV_EARLY and its withdrawal, with the state
     * change behind each, so that a withdrawal never overtakes its
     * announcement (taken before lock, never inside it). */
    pthread_mutex_t emit_lock;
    int withdraw_item;            /* {lock} an announced early final was cancelled */
    int refs;                     /* {lock} owner + a queued or running job */
    float *audio;                 /* {lock} samples [audio_start, audio_start + audio_len) */
    size_t audio_len, audio_cap;  /* {lock} */
    int64_t audio_start;          /* {lock} */
    struct ss_final *finals, *finals_tail; /* {lock} */
    atomic_int n_finals;          /* length of finals, read by the abort callback */
    struct ss_early early;        /* {lock} */
    atomic_int early_gen;         /* bumped when the early final is cancelled or replaced */
    int n_early_used;             /* {lock} finals that took the early final's transcript */
    bool urgent;                  /* {lock} counted in stt_urgent: a final or early final waits or runs */
    bool running_urgent;          /* {lock} the running job decodes a final or an early final */
    bool partial_wanted;          /* {lock} */
    int partial_item;             /* {lock} */
    int64_t partial_from;         /* {lock} */
    bool running;                 /* {lock} a job is queued or running */
    char *language, *prompt;      /* {lock} */
    /* the running job (one at a time) */
    char *hyp;                    /* last partial hypothesis */
    char *emitted;                /* deltas sent for hyp_item */
    int hyp_item;
};

struct stt_session_params stt_session_default_params(void)
{
    struct stt_session_params p = {
        .input_rate_hz = 24000,
        .server_vad = true,
        .vad = vad_default_params(),
        .partial_ms = 500,
    };
    p.vad.max_speech_duration_s = 29.0f;   /* a turn fits one Whisper window */
    return p;
}

static void ss_emit(struct stt_session *ss, enum stt_event_type type, int item, int64_t samples,
                    const char *text, const char *delta)
{
    if (atomic_load(&ss->closed) || !ss->p.on_event)
        return;
    struct stt_event ev = { type, item, SS_MS(samples), text, delta };
    ss->p.on_event(ss->p.user, &ev);
}

static void ss_unref(struct stt_session *ss)
{
    pthread_mutex_lock(&ss->lock);
    bool last = --ss->refs == 0;
    pthread_mutex_unlock(&ss->lock);
    if (!last)
        return;
    if (ss->urgent)
        stt_urgent_add(ss->svc, -1);
    if (ss->p.on_free)
        ss->p.on_free(ss->p.user);
    for (struct ss_final *f = ss->finals, *next; f; f = next) {
        next = f->next;
        free(f->pcm);
        free(f);
    }
    media_resampler_free(ss->rs);
    vad_stream_free(ss->vs);
    pthread_mutex_destroy(&ss->lock);
    pthread_mutex_destroy(&ss->emit_lock);
    free(ss->audio);
    free(ss->early.text);
    free(ss->language);
    free(ss->prompt);
    free(ss->hyp);
    free(ss->emitted);
    free(ss);
}

// ---- agreement between partial hypotheses ---------------------------------------

char *stt_session_agree(const char *prev, const char *cur, char **emitted)
{
    prev = prev ? prev : "";
    size_t lp = strlen(prev), lc = strlen(cur), l = 0;
    while (l < lp && l < lc && prev[l] == cur[l])
        l++;
    /* The longest common prefix that ends at a word boundary in both. */
    size_t k = l;
    while (k > 0 && !((k == lc || cur[k] == ' ') && (k == lp || prev[k] == ' ')))
        k--;
    size_t le = *emitted ? strlen(*emitted) : 0;
    if (k <= le || (le && strncmp(*emitted, cur, le)))
        return strdup("");
    char *stable = strndup(cur, k), *delta = strdup(cur + le);
    if (!stable || !delta) {
        free(stable);
        free(delta);
        return NULL;
    }
    delta[k - le] = 0;
    free(*emitted);
    *emitted = stable;
    return delta;
}

// ---- decoding jobs (stt workers) ------------------------------------------------------

enum ss_kind { SS_PARTIAL, SS_EARLY, SS_FINAL };

/* What the abort callback of a running decode sees. */
struct ss_run {
    struct stt_session *ss;
    enum ss_kind kind;
    int early_gen;                /* SS_EARLY: the early final it decodes */
};

/* Stop on close; stop a partial as soon as a final or an early final waits
 * (its audio is stale, and that is what the client waits for); stop an early
 * final that was cancelled. */
static bool ss_abort(void *user)
{
    const struct ss_run *run = user;
    struct stt_session *ss = run->ss;
    if (atomic_load(&ss->closed))
        return true;
    if (run->kind == SS_PARTIAL) /* a final waits here or in another session */
        return atomic_load(&ss->n_finals) > 0 || atomic_load(&ss->early_gen) != run->early_gen ||
               stt_urgent(ss->svc) > 0;
    return run->kind == SS_EARLY && atomic_load(&ss->early_gen) != run->early_gen;
}

/* Keep the service's count of sessions with a final waiting ({lock}). */
static void ss_urgent_sync_locked(struct stt_session *ss)
{
    const bool now = ss->finals || ss->early.wanted || ss->running_urgent;
    if (now != ss->urgent)
        stt_urgent_add(ss->svc, now ? +1 : -1);
    ss->urgent = now;
}

/* Forget the early final ({lock}); a running one aborts, an announced one
 * is withdrawn by the owner's next ss_flush_withdraw. */
static void ss_early_cancel_locked(struct stt_session *ss)
{
    if (ss->early.announced)
        ss->withdraw_item = ss->early.item;
    free(ss->early.text);
    ss->early = (struct ss_early){ 0 };
    atomic_fetch_add(&ss->early_gen, 1);
    ss_urgent_sync_locked(ss);
}

static int ss_max_tokens(size_t n_samples)
{
    int64_t t = SS_TOKENS_MIN + (int64_t)n_samples * SS_TOKENS_PER_S / SS_RATE;
    return t < 1000 ? (int)t : 1000;   /* whisper_full caps it at the text context anyway */
}

/* Whether whisper's temperature fallback would retry the last result. */
static bool ss_wants_fallback(const struct whisper_state *ws, const struct whisper_full_params *wp)
{
    for (int i = 0; i < whisper_full_n_segments(ws); i++) {
        const struct whisper_segment *seg = whisper_full_get_segment(ws, i);
        bool silent = seg->no_speech_prob > wp->no_speech_thold && seg->avg_logprob < wp->logprob_thold;
        if ((seg->compression_ratio > wp->compression_ratio_thold ||
             seg->avg_logprob < wp->logprob_thold) && !silent)
            return true;
    }
    return false;
}

/* Decode pcm[n] into ws: greedy with capped tokens; a final may add one
 * sampled pass within SS_FALLBACK_BUDGET_MS. */
static int ss_decode(struct whisper_state *ws, struct ss_run *run, const char *language,
                     const char *prompt, const float *pcm, size_t n, char *err, size_t errlen)
{
    struct whisper_full_params wp = stt_full_params(false);
    wp.language = language;
    wp.initial_prompt = prompt;
    wp.abort_callback = ss_abort;
    wp.abort_callback_user_data = run;
    wp.max_tokens = ss_max_tokens(n);
    wp.temperature_inc = 0;
    /* A turn is seconds long: encode its audio plus a margin, not the whole
     * 30 s window (about 3x less work for a short turn; docs/audio.md has
     * the accuracy check). */
    wp.audio_ctx = WHISPER_AUDIO_CTX_AUTO;
    double t0 = omni_time_s();
    int rc = whisper_full(ws, &wp, pcm, (int64_t)n, err, errlen);
    if (rc < 0 || run->kind == SS_PARTIAL || !ss_wants_fallback(ws, &wp) ||
        (omni_time_s() - t0) * 1e3 * 2 > SS_FALLBACK_BUDGET_MS)
        return rc;
    wp.temperature = 0.2f;
    return whisper_full(ws, &wp, pcm, (int64_t)n, err, errlen);
}

static void ss_kick_locked(struct stt_session *ss, bool *submit)
{
    *submit = false;
    if (ss->running || atomic_load(&ss->closed) || (!ss->finals && !ss->partial_wanted && !ss->early.wanted))
        return;
    ss->running = true;
    ss->refs++;
    *submit = true;
}

static void ss_job(struct whisper_state *ws, void *user);

/* Queue the next job when there is work. A full queue drops the waiting work
 * with an error event rather than stalling the session. */
static void ss_kick(struct stt_session *ss)
{
    bool submit;
    pthread_mutex_lock(&ss->lock);
    ss_kick_locked(ss, &submit);
    pthread_mutex_unlock(&ss->lock);
    if (!submit || stt_submit(ss->svc, ss_job, ss) == 0)
        return;
    pthread_mutex_lock(&ss->lock);
    ss->running = false;
    ss->partial_wanted = false;
    ss->early.wanted = false;
    struct ss_final *f = ss->finals;
    ss->finals = ss->finals_tail = NULL;
    atomic_store(&ss->n_finals, 0);
    ss_urgent_sync_locked(ss);
    pthread_mutex_unlock(&ss->lock);
    for (struct ss_final *next; f; f = next) {
        next = f->next;
        char msg[96];
        snprintf(msg, sizeof msg, "the server is busy: turn %d was not transcribed", f->item);
        ss_emit(ss, STT_EV_ERROR, f->item, 0, msg, NULL);
        free(f->pcm);
        free(f);
    }
    ss_unref(ss);
}

static void ss_job(struct whisper_state *ws, void *user)
{
    struct stt_session *ss = user;
    pthread_mutex_lock(&ss->lock);
    struct ss_final *f = NULL;
    float *pcm = NULL;
    size_t n = 0;
    int item = 0;
    char *text = NULL;   /* a final's transcript, when the early final has it */
    struct ss_run run = { ss, SS_PARTIAL, atomic_load(&ss->early_gen) };
    if (ws && !atomic_load(&ss->closed)) {
        if ((f = ss->finals)) {
            ss->finals = f->next;
            atomic_fetch_sub(&ss->n_finals, 1);
            if (!ss->finals)
                ss->finals_tail = NULL;
            pcm = f->pcm;
            n = f->n;
            item = f->item;
            run.kind = SS_FINAL;
            if (ss->early.text && ss->early.item == f->item && ss->early.from == f->from && ss->early.to == f->to) {
                text = ss->early.text;  /* decoded already, on this very audio */
                ss->early.text = NULL;
                ss->n_early_used++;
            }
            if (ss->early.item <= f->item) {
                ss_early_cancel_locked(ss);
                if (ss->withdraw_item <= f->item)
                    ss->withdraw_item = 0;   /* the final itself says what came of it */
            }
        } else if (ss->early.wanted) {
            ss->early.wanted = false;
            size_t skip = (size_t)(ss->early.from - ss->audio_start);
            n = (size_t)(ss->early.to - ss->early.from);
            if (ss->early.from >= ss->audio_start && skip + n <= ss->audio_len && (pcm = malloc(n * sizeof *pcm)))
                memcpy(pcm, ss->audio + skip, n * sizeof *pcm);
            item = ss->early.item;
            run.kind = SS_EARLY;
        } else if (ss->partial_wanted) {
            ss->partial_wanted = false;
            int64_t from = ss->partial_from > ss->audio_start ? ss->partial_from : ss->audio_start;
            size_t skip = (size_t)(from - ss->audio_start);
            n = skip < ss->audio_len ? ss->audio_len - skip : 0;
            if (n && (pcm = malloc(n * sizeof *pcm)))
                memcpy(pcm, ss->audio + skip, n * sizeof *pcm);
            item = ss->partial_item;
        }
    }
    ss->running_urgent = run.kind != SS_PARTIAL && (pcm || text);
    ss_urgent_sync_locked(ss);
    char *language = ss->language ? strdup(ss->language) : NULL;
    char *prompt = ss->prompt ? strdup(ss->prompt) : NULL;
    pthread_mutex_unlock(&ss->lock);
    if (run.kind == SS_PARTIAL && stt_urgent(ss->svc) > 0) {
        free(pcm); /* another session's final comes first; the next partial is asked for later */
        pcm = NULL;
    }

    if (pcm && !text) {
        char err[256];
        if (ss_decode(ws, &run, language, prompt, pcm, n, err, sizeof err) == 0)
            text = stt_full_text(ws);
        else if (!ss_abort(&run) && run.kind != SS_EARLY) /* a failed early final: the final retries */
            ss_emit(ss, STT_EV_ERROR, item, 0, err, NULL);
    }
    if (text && run.kind == SS_FINAL) {
        ss_emit(ss, STT_EV_FINAL, item, 0, text, NULL);
    } else if (text && run.kind == SS_EARLY) {
        char *announce = NULL;
        if (ss->early_events)
            pthread_mutex_lock(&ss->emit_lock);
        pthread_mutex_lock(&ss->lock);
        if (atomic_load(&ss->early_gen) == run.early_gen) { /* still the turn's likely end */
            announce = ss->early_events ? strdup(text) : NULL;
            ss->early.announced = announce != NULL;
            ss->early.text = text;
            text = NULL;
        }
        pthread_mutex_unlock(&ss->lock);
        if (announce)
            ss_emit(ss, STT_EV_EARLY, item, 0, announce, NULL);
        if (ss->early_events)
            pthread_mutex_unlock(&ss->emit_lock);
        free(announce);
    } else if (text) {
        if (ss->hyp_item != item) {
            free(ss->hyp);
            free(ss->emitted);
            ss->hyp = ss->emitted = NULL;
            ss->hyp_item = item;
        }
        char *delta = stt_session_agree(ss->hyp, text, &ss->emitted);
        ss_emit(ss, STT_EV_PARTIAL, item, 0, text, delta ? delta : "");
        free(delta);
        free(ss->hyp);
        ss->hyp = text;
        text = NULL;
    }
    free(text);
    free(language);
    free(prompt);
    if (f) {
        free(f->pcm);
        free(f);
    } else {
        free(pcm);
    }
    pthread_mutex_lock(&ss->lock);
    ss->running = false;
    ss->running_urgent = false;
    ss_urgent_sync_locked(ss);
    pthread_mutex_unlock(&ss->lock);
    if (ws)
        ss_kick(ss);
    ss_unref(ss);
}

bool stt_session_idle(struct stt_session *ss)
{
    pthread_mutex_lock(&ss->lock);
    bool idle = !ss->running && !ss->finals && !ss->partial_wanted && !ss->early.wanted;
    pthread_mutex_unlock(&ss->lock);
    return idle;
}

int stt_session_early_finals(struct stt_session *ss)
{
    pthread_mutex_lock(&ss->lock);
    int n = ss->n_early_used;
    pthread_mutex_unlock(&ss->lock);
    return n;
}

// ---- the owner's side --------------------------------------------------------------

static char *ss_strdup_or_null(const char *s, bool *oom)
{
    char *d = s ? strdup(s) : NULL;
    if (s && !d)
        *oom = true;
    return d;
}

int stt_session_update(struct stt_session *ss, const struct stt_session_params *p, char *err,
                       size_t errlen)
{
    if (p->input_rate_hz < 8000 || p->input_rate_hz > 96000)
        return omni_fail(err, errlen, OMNI_ERR_ARG,
                         "the input audio rate must be 8000..96000 Hz, got %d", p->input_rate_hz);
    if (p->server_vad && !stt_vad(ss->svc))
        return omni_fail(err, errlen, OMNI_ERR_ARG,
                         "server VAD needs a VAD model (serve --vad-model silero.bin); "
                         "set turn_detection to null and commit turns instead");
    bool oom = false;
    char *lang = ss_strdup_or_null(p->language, &oom), *prompt = ss_strdup_or_null(p->prompt, &oom);
    if (oom) {
        free(lang);
        free(prompt);
        return omni_fail(err, errlen, OMNI_ERR_NOMEM, "out of memory");
    }
    if (!ss->rs || p->input_rate_hz != ss->p.input_rate_hz) {
        struct media_audio_params ap = media_audio_default_params();
        ap.sample_rate_hz = SS_RATE;
        struct media_resampler *rs =
            media_resampler_new(MEDIA_PCM_S16LE, p->input_rate_hz, &ap, err, errlen);
        if (!rs) {
            free(lang);
            free(prompt);
            return OMNI_ERR_NOMEM;
        }
        media_resampler_free(ss->rs);
        ss->rs = rs;
    }
    bool vad_changed = !ss->vs || memcmp(&p->vad, &ss->p.vad, sizeof p->vad);
    if (p->server_vad && vad_changed) {
        struct vad_stream *vs = vad_stream_new(stt_vad(ss->svc), &p->vad, err, errlen);
        if (!vs) {
            free(lang);
            free(prompt);
            return OMNI_ERR_ARG;
        }
        vad_stream_free(ss->vs);
        ss->vs = vs;
        ss->vad_base = ss->pos;
        ss->in_speech = false;
        ss->vad_quiet = false;
    }
    void (*on_event)(void *, const struct stt_event *) = ss->p.on_event;
    void (*on_free)(void *) = ss->p.on_free;
    void *user = ss->p.user;
    ss->p = *p;
    ss->p.on_event = on_event;   /* the callbacks are fixed at creation */
    ss->p.on_free = on_free;
    ss->p.user = user;
    ss->p.language = ss->p.prompt = NULL;
    pthread_mutex_lock(&ss->lock);
    free(ss->language);
    free(ss->prompt);
    ss->language = lang;
    ss->prompt = prompt;
    pthread_mutex_unlock(&ss->lock);
    return 0;
}

struct stt_session *stt_session_new(struct stt *svc, const struct stt_session_params *p,
                                    char *err, size_t errlen)
{
    struct stt_session *ss = calloc(1, sizeof *ss);
    if (!ss) {
        omni_fail(err, errlen, OMNI_ERR_NOMEM, "out of memory");
        return NULL;
    }
    ss->svc = svc;
    ss->refs = 1;
    ss->early_events = p->early_events;
    pthread_mutex_init(&ss->lock, NULL);
    pthread_mutex_init(&ss->emit_lock, NULL);
    ss->p.on_event = p->on_event;
    ss->p.on_free = p->on_free;
    ss->p.user = p->user;
    if (stt_session_update(ss, p, err, errlen) < 0) {
        ss->p.on_free = NULL;   /* a failed constructor does not call back */
        ss_unref(ss);
        return NULL;
    }
    return ss;
}

/* Turn audio [from, to) (absolute samples) as a new committed final. */
static int ss_queue_final(struct stt_session *ss, int item, int64_t from, int64_t to)
{
    struct ss_final *f = calloc(1, sizeof *f);
    pthread_mutex_lock(&ss->lock);
    if (from < ss->audio_start)
        from = ss->audio_start;
    if (to > ss->audio_start + (int64_t)ss->audio_len)
        to = ss->audio_start + (int64_t)ss->audio_len;
    size_t n = to > from ? (size_t)(to - from) : 0;
    if (f && n && (f->pcm = malloc(n * sizeof *f->pcm))) {
        memcpy(f->pcm, ss->audio + (from - ss->audio_start), n * sizeof *f->pcm);
        f->n = n;
        f->item = item;
        f->from = from;
        f->to = to;
        if (ss->finals_tail)
            ss->finals_tail->next = f;
        else
            ss->finals = f;
        ss->finals_tail = f;
        atomic_fetch_add(&ss->n_finals, 1);
        f = NULL;
    }
    ss->partial_wanted = false;   /* the final supersedes any partial of this turn */
    ss_urgent_sync_locked(ss);
    pthread_mutex_unlock(&ss->lock);
    bool failed = f != NULL && n > 0;
    free(f);
    return failed ? OMNI_ERR_NOMEM : 0;
}

/* Forget audio the session can no longer need. */
static void ss_trim(struct stt_session *ss)
{
    pthread_mutex_lock(&ss->lock);
    int64_t keep_from = ss->in_speech ? ss->seg_start : ss->pos - SS_KEEP_IDLE;
    if (!ss->p.server_vad)
        keep_from = ss->audio_start;   /* everything until the next commit */
    if (keep_from > ss->audio_start) {
        size_t drop = (size_t)(keep_from - ss->audio_start);
        if (drop > ss->audio_len)
            drop = ss->audio_len;
        memmove(ss->audio, ss->audio + drop, (ss->audio_len - drop) * sizeof *ss->audio);
        ss->audio_len -= drop;
        ss->audio_start += (int64_t)drop;
    }
    pthread_mutex_unlock(&ss->lock);
}

static void ss_on_vad_event(struct stt_session *ss, const struct vad_event *ev)
{
    int64_t at = ss->vad_base + ev->sample;
    if (at > ss->pos)
        at = ss->pos;
    if (ev->type == VAD_SPEECH_START) {
        ss->in_speech = true;
        ss->item++;
        ss->seg_start = at;
        ss->last_partial = at;
        ss_emit(ss, STT_EV_SPEECH_STARTED, ss->item, at, NULL, NULL);
    } else if (ss->in_speech) {
        ss->in_speech = false;
        ss_emit(ss, STT_EV_SPEECH_STOPPED, ss->item, at, NULL, NULL);
        ss_emit(ss, STT_EV_COMMITTED, ss->item, at, NULL, NULL);
        if (ss_queue_final(ss, ss->item, ss->seg_start, at) < 0)
            ss_emit(ss, STT_EV_ERROR, ss->item, at, "out of memory", NULL);
    }
}

/* Tell the owner's withdrawals of announced early finals (owner thread). */
static void ss_flush_withdraw(struct stt_session *ss)
{
    if (!ss->early_events)
        return;
    pthread_mutex_lock(&ss->emit_lock);
    pthread_mutex_lock(&ss->lock);
    const int item = ss->withdraw_item;
    ss->withdraw_item = 0;
    pthread_mutex_unlock(&ss->lock);
    if (item)
        ss_emit(ss, STT_EV_EARLY, item, 0, NULL, NULL);
    pthread_mutex_unlock(&ss->emit_lock);
}

/* Ask for the turn's early final at the tentative end: the first window the
 * VAD hears below its stop threshold, long before min_silence has passed
 * and the STOP may come, as soon as the padded end is heard (so that the
 * early final decodes exactly the audio the final will have if no more
 * speech comes). Cancel it when speech resumes (or the end moves): a
 * final takes the early transcript only when item and audio match, so a
 * turn that goes on never loses audio or gets a stale transcript. */
static void ss_early_update(struct stt_session *ss)
{
    int64_t end = 0;
    bool pending = ss->in_speech && vad_stream_pending_end(ss->vs, &end);
    end += ss->vad_base;
    if (pending && end > ss->pos)
        return;   /* the padding after the end is still to come */
    pthread_mutex_lock(&ss->lock);
    const bool same = ss->early.to && ss->early.item == ss->item && ss->early.from == ss->seg_start &&
                      ss->early.to == end;
    if (pending && !same && ss->seg_start >= ss->audio_start) {
        ss_early_cancel_locked(ss);
        ss->early = (struct ss_early){ .item = ss->item, .from = ss->seg_start, .to = end, .wanted = true };
        ss_urgent_sync_locked(ss);
    } else if (!pending && ss->in_speech && ss->early.to && ss->early.item == ss->item) {
        ss_early_cancel_locked(ss); /* the speaker went on */
    }
    pthread_mutex_unlock(&ss->lock);
}

int stt_session_push(struct stt_session *ss, const void *pcm16, size_t len, char *err,
                     size_t errlen)
{
    int rc = media_resampler_push(ss->rs, pcm16, len, err, errlen);
    if (rc < 0)
        return rc;
    float chunk[4096];
    size_t got;
    while ((got = media_resampler_pull(ss->rs, chunk, sizeof chunk / sizeof chunk[0])) > 0) {
        pthread_mutex_lock(&ss->lock);
        if (ss->audio_len + got > SS_MAX_BUFFER) {
            pthread_mutex_unlock(&ss->lock);
            return omni_fail(err, errlen, OMNI_ERR_LIMIT,
                             "more than 15 minutes of uncommitted audio; commit or clear it");
        }
        if (ss->audio_len + got > ss->audio_cap) {
            size_t cap = ss->audio_cap ? ss->audio_cap * 2 : SS_RATE * 4;
            while (cap < ss->audio_len + got)
                cap *= 2;
            float *na = realloc(ss->audio, cap * sizeof *na);
            if (!na) {
                pthread_mutex_unlock(&ss->lock);
                return omni_fail(err, errlen, OMNI_ERR_NOMEM, "out of memory");
            }
            ss->audio = na;
            ss->audio_cap = cap;
        }
        memcpy(ss->audio + ss->audio_len, chunk, got * sizeof *chunk);
        ss->audio_len += got;
        pthread_mutex_unlock(&ss->lock);
        ss->pos += (int64_t)got;
        if (!ss->p.server_vad)
            continue;
        if ((rc = vad_stream_push(ss->vs, chunk, got, err, errlen)) < 0)
            return rc;
        float probs[64];
        size_t n_probs;
        while ((n_probs = vad_stream_pull_probs(ss->vs, probs, 64)) > 0)
            ss->vad_quiet = probs[n_probs - 1] < ss->p.vad.threshold;
        struct vad_event ev;
        while (vad_stream_next_event(ss->vs, &ev))
            ss_on_vad_event(ss, &ev);
        ss_early_update(ss);
        /* No partial while the VAD hears silence: the turn may be ending, and
         * a partial would hold the worker when its final arrives. */
        if (ss->in_speech && !ss->vad_quiet && ss->p.partial_ms > 0 &&
            ss->pos - ss->last_partial >= (int64_t)ss->p.partial_ms * (SS_RATE / 1000)) {
            ss->last_partial = ss->pos;
            pthread_mutex_lock(&ss->lock);
            ss->partial_wanted = true;
            ss->partial_item = ss->item;
            ss->partial_from = ss->seg_start;
            pthread_mutex_unlock(&ss->lock);
        }
    }
    ss_flush_withdraw(ss);
    ss_kick(ss);
    ss_trim(ss);
    return 0;
}

int stt_session_commit(struct stt_session *ss, char *err, size_t errlen)
{
    int64_t from;
    if (ss->p.server_vad) {
        if (!ss->in_speech)
            return omni_fail(err, errlen, OMNI_ERR_ARG,
                             "no speech in the buffer to commit (server VAD commits turns itself)");
        from = ss->seg_start;
        ss->in_speech = false;
        pthread_mutex_lock(&ss->lock);
        ss_early_cancel_locked(ss); /* this turn ends now, not where the VAD would end it */
        pthread_mutex_unlock(&ss->lock);
        ss_emit(ss, STT_EV_SPEECH_STOPPED, ss->item, ss->pos, NULL, NULL);
        /* The VAD must not close this turn again later. */
        vad_stream_reset(ss->vs);
        ss->vad_base = ss->pos;
        ss->vad_quiet = false;
    } else {
        pthread_mutex_lock(&ss->lock);
        from = ss->audio_start;
        pthread_mutex_unlock(&ss->lock);
        if (ss->pos - from < SS_MIN_COMMIT)
            return omni_fail(err, errlen, OMNI_ERR_ARG,
                             "buffer too small: expected at least 100 ms of audio, got %lld ms",
                             (long long)SS_MS(ss->pos - from));
        ss->item++;
    }
    ss_flush_withdraw(ss);
    ss_emit(ss, STT_EV_COMMITTED, ss->item, ss->pos, NULL, NULL);
    int rc = ss_queue_final(ss, ss->item, from, ss->pos);
    if (!ss->p.server_vad) {
        pthread_mutex_lock(&ss->lock);
        ss->audio_len = 0;
        ss->audio_start = ss->pos;
        pthread_mutex_unlock(&ss->lock);
    }
    ss_kick(ss);
    ss_trim(ss);
    return rc < 0 ? omni_fail(err, errlen, rc, "out of memory") : 0;
}

void stt_session_clear(struct stt_session *ss)
{
    pthread_mutex_lock(&ss->lock);
    ss->audio_len = 0;
    ss->audio_start = ss->pos;
    ss->partial_wanted = false;
    ss_early_cancel_locked(ss);
    pthread_mutex_unlock(&ss->lock);
    ss->in_speech = false;
    if (ss->vs) {
        vad_stream_reset(ss->vs);
        ss->vad_base = ss->pos;
        ss->vad_quiet = false;
    }
    ss_flush_withdraw(ss);
}

void stt_session_close(struct stt_session *ss)
{
    if (!ss)
        return;
    atomic_store(&ss->closed, true);
    ss_unref(ss);
}
