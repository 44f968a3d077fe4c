/* tts_espeak.c - the espeak-ng backend: formant synthesis that needs no
 * download (Debian's libespeak-ng and its voice data).
 *
 * espeak-ng is one process-wide synthesizer: it is initialized once, in
 * synchronous mode (espeak_Synth returns after the last callback), and only
 * the tts worker thread calls it. Voices are its languages; "LANG+VARIANT"
 * applies one of its voice variants (f1..f5, m1..m7, klatt, ...); OpenAI's
 * voice names map to distinct English language/variant pairs. */
#include "audio/tts/tts_int.h"

#include "src/core/omni.h"

#include <espeak-ng/speak_lib.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* OpenAI's voices (the `voice` of /v1/audio/speech) as espeak voices: each a
 * different variant so that clients choosing them hear a difference. */
static const struct { const char *id, *espeak, *desc; } espeak_openai[] = {
    { "alloy", "en-us+f3", "English (America), female" },
    { "ash", "en-us+m3", "English (America), male" },
    { "ballad", "en-gb+m4", "English (Great Britain), male" },
    { "coral", "en-us+f4", "English (America), female" },
    { "echo", "en-us+m1", "English (America), male" },
    { "fable", "en-gb+m2", "English (Great Britain), male" },
    { "nova", "en-us+f2", "English (America), female" },
    { "onyx", "en-us+m7", "English (America), male, low" },
    { "sage", "en-gb+f1", "English (Great Britain), female" },
    { "shimmer", "en-us+f5", "English (America), female" },
    { "verse", "en-us+m2", "English (America), male" },
};
#define ESPEAK_N_OPENAI (int)(sizeof espeak_openai / sizeof espeak_openai[0])

struct espeak_lang {
    char code[32];               /* "en-us": the voice's first language, its id here */
    char name[64];
    char ident[48];              /* "gmw/en-US": what espeak_SetVoiceByName takes */
};

/* Other languages a voice names ("en" for English (Great Britain)), with
 * espeak's priority: a lower number is the better voice for it. */
struct espeak_alias {
    char lang[32];
    int voice;                   /* index into langs */
    int priority;
};

struct espeak_state {
    int rate_hz;
    struct espeak_lang *langs;
    int n_langs;
    struct espeak_alias *aliases;
    int n_aliases;
    char (*variants)[32];        /* "f3", "klatt" */
    int n_variants;
};

/* espeak_Initialize may run once per process (its state is global). */
static pthread_once_t espeak_once = PTHREAD_ONCE_INIT;
static int espeak_rate_hz;
/* Serializes every later espeak call: one tts worker per struct tts, and a
 * process may hold several (tests, the CLI). */
static pthread_mutex_t espeak_lock = PTHREAD_MUTEX_INITIALIZER;

/* The emitter of the sentence being synthesized (worker thread only). */
struct espeak_job {
    tts_pcm_fn emit;
    void *user;
    float buf[4096];
    int stopped;
};

static int espeak_on_samples(short *wav, int n, espeak_EVENT *events)
{
    struct espeak_job *j = events ? events->user_data : NULL;
    if (!j || j->stopped)
        return 1;
    while (wav && n > 0) {
        int k = n < 4096 ? n : 4096;
        for (int i = 0; i < k; i++)
            j->buf[i] = (float)wav[i] / 32768.0f;
        if (j->emit(j->user, j->buf, (size_t)k)) {
            j->stopped = 1;
            return 1;
        }
        wav += k;
        n -= k;
    }
    return 0;
}

static void espeak_init_once(void)
{
    /* 50 ms per callback: small enough for the first audio to leave early. */
    int rate = espeak_Initialize(AUDIO_OUTPUT_SYNCHRONOUS, 50, NULL, espeakINITIALIZE_DONT_EXIT);
    if (rate > 0)
        espeak_SetSynthCallback(espeak_on_samples);
    espeak_rate_hz = rate;
}

static int espeak_cmp_lang(const void *a, const void *b)
{
    return strcmp(((const struct espeak_lang *)a)->code, ((const struct espeak_lang *)b)->code);
}

/* The language code of a listed voice: the first of its (priority, name)
 * pairs, lower-cased. */
static void espeak_first_lang(const espeak_VOICE *v, char *out, size_t cap)
{
    const char *l = v->languages ? v->languages + 1 : "";
    size_t i = 0;
    for (; l[i] && i + 1 < cap; i++)
        out[i] = (char)(l[i] >= 'A' && l[i] <= 'Z' ? l[i] + 32 : l[i]);
    out[i] = 0;
}

static int espeak_list_locked(struct espeak_state *st);

static int espeak_list(struct espeak_state *st)
{
    pthread_mutex_lock(&espeak_lock);
    int rc = espeak_list_locked(st);
    pthread_mutex_unlock(&espeak_lock);
    return rc;
}

static int espeak_list_locked(struct espeak_state *st)
{
    const espeak_VOICE **all = espeak_ListVoices(NULL);
    int n = 0, n_pairs = 0;
    while (all && all[n]) {
        for (const char *l = all[n]->languages; l && *l; l += strlen(l + 1) + 2)
            n_pairs++;
        n++;
    }
    st->langs = calloc((size_t)n + 1, sizeof *st->langs);
    st->aliases = calloc((size_t)n_pairs + 1, sizeof *st->aliases);
    if (!st->langs || !st->aliases)
        return OMNI_ERR_NOMEM;
    for (int i = 0; i < n; i++) {
        struct espeak_lang *L = &st->langs[st->n_langs];
        espeak_first_lang(all[i], L->code, sizeof L->code);
        const char *ident = all[i]->identifier ? all[i]->identifier : "";
        if (!L->code[0] || strchr(L->code, '/') || !*ident || strlen(ident) >= sizeof L->ident)
            continue;
        snprintf(L->ident, sizeof L->ident, "%s", ident);
        snprintf(L->name, sizeof L->name, "%s", all[i]->name ? all[i]->name : L->code);
        for (char *p = L->name; *p; p++)
            if (*p == '_')
                *p = ' ';
        st->n_langs++;
    }
    qsort(st->langs, (size_t)st->n_langs, sizeof *st->langs, espeak_cmp_lang);
    int w = 0;                                   /* one voice per code */
    for (int i = 0; i < st->n_langs; i++)
        if (!w || strcmp(st->langs[w - 1].code, st->langs[i].code))
            st->langs[w++] = st->langs[i];
    st->n_langs = w;
    for (int i = 0; i < n; i++) {                /* aliases point at the kept voices */
        int v = -1;
        for (int k = 0; k < st->n_langs && v < 0; k++)
            if (all[i]->identifier && !strcmp(st->langs[k].ident, all[i]->identifier))
                v = k;
        for (const char *l = all[i]->languages; v >= 0 && l && *l; l += strlen(l + 1) + 2) {
            struct espeak_alias *A = &st->aliases[st->n_aliases];
            if (strlen(l + 1) >= sizeof A->lang)
                continue;
            for (size_t c = 0; l[1 + c]; c++)
                A->lang[c] = (char)(l[1 + c] >= 'A' && l[1 + c] <= 'Z' ? l[1 + c] + 32 : l[1 + c]);
            A->voice = v;
            A->priority = (unsigned char)l[0];
            st->n_aliases++;
        }
    }

    espeak_VOICE spec = { .languages = "variant" };
    const espeak_VOICE **vs = espeak_ListVoices(&spec);
    n = 0;
    while (vs && vs[n])
        n++;
    st->variants = calloc((size_t)n + 1, sizeof *st->variants);
    if (!st->variants)
        return OMNI_ERR_NOMEM;
    for (int i = 0; i < n; i++) {
        const char *id = vs[i]->identifier ? vs[i]->identifier : "";
        const char *base = strrchr(id, '/');      /* "!v/f3" -> "f3" */
        base = base ? base + 1 : id;
        if (*base && strlen(base) < sizeof st->variants[0])
            snprintf(st->variants[st->n_variants++], sizeof st->variants[0], "%s", base);
    }
    return 0;
}

static int espeak_n_voices(void *state)
{
    struct espeak_state *st = state;
    return ESPEAK_N_OPENAI + st->n_langs;
}

static void espeak_fill(const struct espeak_state *st, struct tts_voice_info *out, const char *id,
                        const char *name, const char *lang)
{
    memset(out, 0, sizeof *out);
    snprintf(out->id, sizeof out->id, "%s", id);
    snprintf(out->name, sizeof out->name, "%s", name);
    snprintf(out->language, sizeof out->language, "%s", lang);
    snprintf(out->engine, sizeof out->engine, "espeak-ng");
    out->sample_rate_hz = st->rate_hz;
}

static int espeak_voice(void *state, int i, struct tts_voice_info *out)
{
    struct espeak_state *st = state;
    if (i < 0 || i >= espeak_n_voices(st))
        return OMNI_ERR_NOTFOUND;
    if (i < ESPEAK_N_OPENAI) {
        char lang[8];
        snprintf(lang, sizeof lang, "%.5s", espeak_openai[i].espeak);
        espeak_fill(st, out, espeak_openai[i].id, espeak_openai[i].desc, lang);
    } else {
        const struct espeak_lang *L = &st->langs[i - ESPEAK_N_OPENAI];
        espeak_fill(st, out, L->code, L->name, L->code);
    }
    return 0;
}

/* The voice for a language code: its own code, else the best voice that
 * names it among its languages ("en" -> English (Great Britain)). */
static const struct espeak_lang *espeak_find_lang(const struct espeak_state *st, const char *code,
                                                  size_t len)
{
    for (int i = 0; i < st->n_langs; i++)
        if (strlen(st->langs[i].code) == len && !strncasecmp(st->langs[i].code, code, len))
            return &st->langs[i];
    const struct espeak_alias *best = NULL;
    for (int i = 0; i < st->n_aliases; i++) {
        const struct espeak_alias *A = &st->aliases[i];
        if (strlen(A->lang) == len && !strncasecmp(A->lang, code, len) &&
            (!best || A->priority < best->priority))
            best = A;
    }
    return best ? &st->langs[best->voice] : NULL;
}

static int espeak_find(void *state, const char *id, struct tts_voice_info *out)
{
    struct espeak_state *st = state;
    for (int i = 0; i < ESPEAK_N_OPENAI; i++)
        if (!strcasecmp(id, espeak_openai[i].id))
            return espeak_voice(st, i, out);
    const char *plus = strchr(id, '+');
    size_t ll = plus ? (size_t)(plus - id) : strlen(id);
    const struct espeak_lang *L = espeak_find_lang(st, id, ll);
    if (!L)
        return OMNI_ERR_NOTFOUND;
    if (plus) {
        int found = 0;
        for (int i = 0; i < st->n_variants && !found; i++)
            found = !strcasecmp(plus + 1, st->variants[i]);
        if (!found || strlen(id) >= TTS_VOICE_ID_MAX)
            return OMNI_ERR_NOTFOUND;
    }
    char canon[TTS_VOICE_ID_MAX];
    snprintf(canon, sizeof canon, "%s%s", L->code, plus ? plus : "");
    for (char *p = canon; *p; p++)
        if (*p >= 'A' && *p <= 'Z')
            *p = (char)(*p + 32);
    espeak_fill(st, out, canon, L->name, L->code);
    return 0;
}

/* The espeak voice name behind a resolved id ("alloy", "en-gb+f3"): the
 * voice file's identifier plus the variant, "gmw/en+f3". */
static int espeak_name_of(const struct espeak_state *st, const char *id, char *out, size_t cap)
{
    for (int i = 0; i < ESPEAK_N_OPENAI; i++)
        if (!strcmp(id, espeak_openai[i].id))
            id = espeak_openai[i].espeak;
    const char *plus = strchr(id, '+');
    const struct espeak_lang *L = espeak_find_lang(st, id, plus ? (size_t)(plus - id) : strlen(id));
    if (!L)
        return OMNI_ERR_NOTFOUND;
    snprintf(out, cap, "%s%s", L->ident, plus ? plus : "");
    return 0;
}

static int espeak_synth(void *state, const struct tts_voice_info *v, float speed, const char *text,
                        tts_pcm_fn emit, void *user, char *err, size_t errlen)
{
    char name[96];
    if (espeak_name_of(state, v->id, name, sizeof name) < 0)
        return omni_fail(err, errlen, OMNI_ERR_NOTFOUND, "tts: no espeak-ng voice '%s'", v->id);
    pthread_mutex_lock(&espeak_lock);
    if (espeak_SetVoiceByName(name) != EE_OK) {
        pthread_mutex_unlock(&espeak_lock);
        return omni_fail(err, errlen, OMNI_ERR_NOTFOUND, "tts: espeak-ng has no voice '%s'", name);
    }
    int wpm = (int)(espeakRATE_NORMAL * speed + 0.5f);
    espeak_SetParameter(espeakRATE, wpm, 0);
    struct espeak_job job = { .emit = emit, .user = user };
    espeak_ERROR e = espeak_Synth(text, strlen(text) + 1, 0, POS_CHARACTER, 0, espeakCHARS_UTF8,
                                  NULL, &job);
    pthread_mutex_unlock(&espeak_lock);
    if (job.stopped)
        return 1;
    if (e != EE_OK)
        return omni_fail(err, errlen, OMNI_ERR_IO, "tts: espeak-ng failed on a sentence (%d)", (int)e);
    return 0;
}

static void espeak_free_state(void *state)
{
    struct espeak_state *st = state;
    if (!st)
        return;
    free(st->langs);
    free(st->aliases);
    free(st->variants);
    free(st);
}

int tts_espeak_open(struct tts_backend *b, char *err, size_t errlen)
{
    pthread_once(&espeak_once, espeak_init_once);
    if (espeak_rate_hz <= 0)
        return omni_fail(err, errlen, OMNI_ERR_IO,
                         "tts: espeak-ng did not start (is its voice data, espeak-ng-data, installed?)");
    struct espeak_state *st = calloc(1, sizeof *st);
    if (!st)
        return omni_fail(err, errlen, OMNI_ERR_NOMEM, "tts: out of memory");
    st->rate_hz = espeak_rate_hz;
    int rc = espeak_list(st);
    if (rc < 0 || st->n_langs == 0) {
        espeak_free_state(st);
        return omni_fail(err, errlen, rc < 0 ? rc : OMNI_ERR_IO, "tts: espeak-ng lists no voices");
    }
    *b = (struct tts_backend){
        .name = "espeak-ng",
        .state = st,
        .n_voices = espeak_n_voices,
        .voice = espeak_voice,
        .find = espeak_find,
        .synth = espeak_synth,
        .free = espeak_free_state,
        .min_speed = (float)espeakRATE_MINIMUM / espeakRATE_NORMAL,
    };
    return 0;
}
