/* tts_outetts.c - the OuteTTS 1.0 voice backend: speaker profiles from a
 * voices directory (each NAME.json is voice "NAME"), plus voice "outetts"
 * (no speaker: the model picks a voice). A sentence is one engine request
 * (audio/tts/outetts_speak.h); up to tts_params.engine_workers tts workers speak
 * at once (their requests batch in the engine's steps). Each waits for its
 * tokens holding no thread of the compute budget, and decodes them with a
 * decoder pool of its own while it speaks (made on first use, a client of
 * the budget), so decoding and the engine's steps share the cores. */
#include "audio/codec/dac.h"
#include "audio/tts/outetts.h"
#include "audio/tts/outetts_speak.h"
#include "audio/tts/tts_int.h"
#include "src/core/compute.h"
#include "src/core/omni.h"
#include "src/core/threadpool.h"

#include <dirent.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define OUTETTS_MAX_VOICES 256
#define OUTETTS_NO_SPEAKER "outetts"

struct outetts_backend {
    struct engine *e;
    int model;
    int max_tokens;       /* per sentence; 0: from the text */
    bool scripted;        /* benchmarks: outetts_speak_params.scripted */
    const struct dac_model *dac;
    struct compute *budget;                   /* NULL: pools ungated, one thread */
    pthread_mutex_t lock;
    struct tpool *tp[TTS_MAX_ENGINE_WORKERS];     /* {lock} decoder pools, made on first use */
    bool tp_busy[TTS_MAX_ENGINE_WORKERS];         /* {lock} taken by a synth call */
    int n;
    char ids[OUTETTS_MAX_VOICES][TTS_VOICE_ID_MAX];
    struct outetts_speaker *spk[OUTETTS_MAX_VOICES];   /* NULL: no speaker */
};

static void ob_info(const struct outetts_backend *o, int i, struct tts_voice_info *out)
{
    memset(out, 0, sizeof *out);
    snprintf(out->id, sizeof out->id, "%s", o->ids[i]);
    snprintf(out->name, sizeof out->name, "OuteTTS 1.0 %s%s", o->spk[i] ? "speaker " : "",
             o->spk[i] ? o->ids[i] : "(the model's own voice)");
    snprintf(out->language, sizeof out->language, "%s", "multi");
    snprintf(out->engine, sizeof out->engine, "%s", "outetts");
    out->needs_engine = true;
    out->sample_rate_hz = dac_get_info(o->dac)->sample_rate;
}

static int ob_n_voices(void *state) { return ((struct outetts_backend *)state)->n; }

static int ob_voice(void *state, int i, struct tts_voice_info *out)
{
    struct outetts_backend *o = state;
    if (i < 0 || i >= o->n)
        return OMNI_ERR_NOTFOUND;
    ob_info(o, i, out);
    return 0;
}

static int ob_index(const struct outetts_backend *o, const char *id)
{
    for (int i = 0; i < o->n; i++)
        if (!strcasecmp(o->ids[i], id))
            return i;
    return -1;
}

static int ob_find(void *state, const char *id, struct tts_voice_info *out)
{
    struct outetts_backend *o = state;
    int i = ob_index(o, id);
    if (i < 0)
        return OMNI_ERR_NOTFOUND;
    ob_info(o, i, out);
    return 0;
}

/* "still wanted?" while the model writes: the tts core answers an empty
 * chunk with its stream's cancel flag */
struct ob_poll {
    tts_pcm_fn emit;
    void *user;
};

static int ob_poll_fn(void *user)
{
    struct ob_poll *pp = user;
    return pp->emit(pp->user, NULL, 0);
}

static int ob_synth(void *state, const struct tts_voice_info *v, float speed, const char *text,
                    tts_pcm_fn emit, void *user, char *err, size_t errlen)
{
    struct outetts_backend *o = state;
    (void)speed;   /* the model speaks at its pace; slower is stretched by the core */
    int i = ob_index(o, v->id);
    if (i < 0)
        return omni_fail(err, errlen, OMNI_ERR_NOTFOUND, "outetts: no voice '%s'", v->id);
    /* a decoder pool of our own for the call (synth runs on several workers) */
    struct tpool *tp = NULL;
    int slot = -1;
    if (o->budget) {
        pthread_mutex_lock(&o->lock);
        for (int k = 0; k < TTS_MAX_ENGINE_WORKERS && slot < 0; k++)
            if (!o->tp_busy[k]) {
                if (!o->tp[k] && (!(o->tp[k] = tpool_new(compute_size(o->budget), err, errlen)) ||
                                  tpool_attach(o->tp[k], o->budget, "tts-dac", err, errlen) < 0)) {
                    tpool_free(o->tp[k]);
                    o->tp[k] = NULL;
                    break;
                }
                slot = k;
                o->tp_busy[k] = true;
                tp = o->tp[k];
            }
        pthread_mutex_unlock(&o->lock);
        if (slot < 0)   /* out of memory or threads (more callers than workers cannot be) */
            return omni_fail(err, errlen, OMNI_ERR_NOMEM, "outetts: no decoder threads%s%s",
                             err[0] ? ": " : "", err);
    }
    struct outetts_speak_params p = outetts_speak_default_params();
    p.text = text;
    p.speaker = o->spk[i];
    p.max_tokens = o->max_tokens;
    p.scripted = o->scripted;
    struct ob_poll pp = { emit, user };
    p.poll = ob_poll_fn;
    p.poll_user = &pp;
    struct outetts_speak_stats st;
    int rc = outetts_speak(o->e, o->model, o->dac, tp, &p, emit, user, &st, err, errlen);
    if (slot >= 0) {
        pthread_mutex_lock(&o->lock);
        o->tp_busy[slot] = false;
        pthread_mutex_unlock(&o->lock);
    }
    return rc;
}

static void ob_free(void *state)
{
    struct outetts_backend *o = state;
    if (!o)
        return;
    for (int i = 0; i < o->n; i++)
        outetts_speaker_free(o->spk[i]);
    for (int k = 0; k < TTS_MAX_ENGINE_WORKERS; k++)
        tpool_free(o->tp[k]);
    pthread_mutex_destroy(&o->lock);
    free(o);
}

static int ob_cmp(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

int tts_outetts_open(struct tts_backend *b, struct engine *e, int model,
                     const struct dac_model *dac, const char *voices_dir, int max_tokens,
                     bool scripted, char *err, size_t errlen)
{
    struct outetts_backend *o = calloc(1, sizeof *o);
    if (!o)
        return omni_fail(err, errlen, OMNI_ERR_NOMEM, "outetts: out of memory");
    o->e = e;
    o->model = model;
    o->dac = dac;
    o->max_tokens = max_tokens > 0 ? max_tokens : 0;
    o->scripted = scripted;
    pthread_mutex_init(&o->lock, NULL);
    /* with the process's budget: decoder pools as large as it, clients of it */
    o->budget = compute_default();
    if (voices_dir) {
        DIR *d = opendir(voices_dir);
        if (!d) {
            ob_free(o);
            return omni_fail(err, errlen, OMNI_ERR_IO, "outetts: cannot open voices directory %s",
                             voices_dir);
        }
        char *names[OUTETTS_MAX_VOICES];
        int n = 0;
        struct dirent *de;
        while ((de = readdir(d)) && n < OUTETTS_MAX_VOICES - 1) {
            size_t l = strlen(de->d_name);
            if (l > 5 && l - 5 < TTS_VOICE_ID_MAX && !strcmp(de->d_name + l - 5, ".json") &&
                de->d_name[0] != '.')
                if ((names[n] = strdup(de->d_name)))
                    n++;
        }
        closedir(d);
        qsort(names, (size_t)n, sizeof *names, ob_cmp);
        int rc = 0;
        for (int i = 0; i < n; i++) {
            char path[4096];
            snprintf(path, sizeof path, "%s/%s", voices_dir, names[i]);
            if (!rc) {
                struct outetts_speaker *s = outetts_speaker_load(path, err, errlen);
                if (!s)
                    rc = OMNI_ERR_FORMAT;   /* a malformed speaker file is the operator's to fix */
                else {
                    snprintf(o->ids[o->n], TTS_VOICE_ID_MAX, "%.*s", (int)(strlen(names[i]) - 5),
                             names[i]);
                    o->spk[o->n++] = s;
                }
            }
            free(names[i]);
        }
        if (rc) {
            ob_free(o);
            return rc;
        }
    }
    if (ob_index(o, OUTETTS_NO_SPEAKER) < 0) {
        snprintf(o->ids[o->n], TTS_VOICE_ID_MAX, "%s", OUTETTS_NO_SPEAKER);
        o->spk[o->n++] = NULL;
    }
    *b = (struct tts_backend){ .name = "outetts", .state = o, .n_voices = ob_n_voices,
                               .voice = ob_voice, .find = ob_find, .synth = ob_synth,
                               .free = ob_free, .min_speed = 1.0f };
    return 0;
}
