/* realtime_conv.c - Realtime conversations: the voice agent loop on one
 * WebSocket. Items (user audio/text, assistant audio/text, function calls
 * and their outputs), the turn state machine (server VAD or push-to-talk),
 * responses from the engine spoken by the tts worker, barge-in and
 * truncation. A spoken reply may start, unseen, on the turn's early
 * transcript while the VAD waits to be sure the turn ended (struct
 * rtc_spec); the response adopts it if the turn ends with that transcript.
 *
 * Threads: client events on a ws worker (one message at a time), VAD events
 * inside stt_session_push on that worker, transcripts on stt workers, tokens
 * on the engine thread, audio on the tts worker. Every one of them takes the
 * connection's lock for the conversation state and sends its server events
 * under it, so events leave in the order the state changed. Nothing blocks
 * under the lock: engine_submit/cancel and tts push/cancel only queue. The
 * connection is reference counted: the socket side, the stt session, each
 * response in flight (its engine request and tts stream). */
#include "src/api/realtime_conv.h"

#include "audio/tts/tts.h"
#include "llm/reasoning.h"
#include "media/audio.h"
#include "src/api/api.h"
#include "src/api/rt_common.h"
#include "src/core/omni.h"
#include "src/stt/stt.h"
#include "src/stt/stt_session.h"
#include "ws/ws_socket.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static struct realtime_limits rtc_limits = { 256, 64 << 10, 300, 1024 };

struct realtime_limits realtime_default_limits(void)
{
    return (struct realtime_limits){ 256, 64 << 10, 300, 1024 };
}

void realtime_set_limits(const struct realtime_limits *l) { rtc_limits = *l; }

enum rtc_fmt { RTC_PCM16, RTC_ULAW, RTC_ALAW };

enum rtc_kind { RTC_MESSAGE, RTC_CALL, RTC_CALL_OUTPUT };

/* A sentence of a spoken reply: where its audio ended and where its text
 * ends in item.spoken. */
struct rtc_span {
    int64_t end_ms;
    size_t text_end;
};

struct rtc_item {
    char id[96];
    enum rtc_kind kind;
    char role[12];                 /* messages: user, assistant, system */
    bool audio;                    /* input_audio / output_audio content; text is its transcript */
    bool pending;                  /* user audio whose transcript has not come yet */
    bool wants_response;           /* a turn committed under create_response, not answered yet */
    bool in_progress;              /* an assistant item being generated */
    bool truncated;
    bool incomplete;
    char *text;                    /* message text or transcript (NULL: "") */
    char *call_id, *name, *args;   /* function_call; args is function_call_output's output */
    size_t len, cap;               /* of text while generating */
    /* a spoken reply: audio sent so far, sentences fully spoken */
    int64_t audio_ms;
    char *spoken;
    size_t spoken_len;
    struct rtc_span *spans;
    int n_spans, cap_spans;
};

struct rtc;

struct rtc_resp {
    struct rtc *c;
    struct rtc_resp *next;         /* {c->lock} the connection's responses in flight */
    char id[64];
    bool oob;                      /* conversation "none": its items stay out of the conversation */
    bool audio;                    /* spoken reply */
    enum rtc_fmt fmt;
    int rate_hz;
    char voice[TTS_VOICE_ID_MAX];
    int max_tokens;                /* -1: "inf" */
    cJSON *metadata;
    uint64_t engine_id;
    bool engine_done;
    struct tts_stream *ts;         /* detached: the worker frees it after TTS_EV_DONE */
    bool tts_done;
    struct media_resampler *rs;    /* tts worker */
    struct chatout *co;            /* engine thread */
    const char *cancel_reason;     /* "turn_detected", "client_cancelled" */
    char error[256];
    enum engine_finish finish;
    int prompt_tokens, cached_tokens, completion_tokens;
    struct rtc_item *msg;          /* the assistant message (in the conversation unless oob) */
    struct rtc_item **out;         /* output items in order; owned here when oob */
    int n_out, cap_out;
    int insert_at;                 /* where its next item goes: after the turn it answers */
    bool audio_started;
    bool early;                    /* adopted a reply started on the early transcript */
    float pcm[4096];
};

/* The transcription of one audio item made by conversation.item.create: a
 * speech session of its own, without VAD, closed by the message thread once
 * its final came. */
struct rtc_tr {
    struct rtc *c;
    struct stt_session *ss;
    struct rtc_tr *next;           /* the message thread's list */
    atomic_bool done;
    char item[96];
};

struct rtc {
    struct api *api;
    const struct api_model *m;
    struct tts *tts;
    struct stt *stt;
    struct rt_io io;
    atomic_int refs;               /* socket side, stt session, responses in flight */
    pthread_mutex_t lock;
    struct rt_gate gate;           /* {lock} who ends the socket side */
    bool gone;                     /* {lock} the socket side finished */
    /* the message handler's */
    struct stt_session *ss;
    struct rtc_tr *trs;            /* transcriptions of created audio items */
    struct stt_session_params sp;
    size_t buffered_bytes;         /* input audio since the last commit */
    bool updated;                  /* a session.update came (beta is decided by the first) */
    /* session settings {lock} */
    bool beta;
    char *instructions;
    bool out_audio;
    char voice[TTS_VOICE_ID_MAX];
    float speed;
    enum rtc_fmt in_fmt, out_fmt;
    struct rt_turn turn;
    char *tr_model, *tr_language;
    cJSON *tools;                  /* chat-completions shape, or NULL */
    cJSON *tool_choice;            /* chat-completions shape, or NULL */
    int max_output_tokens;         /* -1: "inf" */
    float temperature;
    /* the conversation {lock} */
    struct rtc_item **items;
    int n_items, cap_items;
    unsigned next_id;
    struct rtc_resp *resps;        /* responses in flight */
    struct rtc_resp *cur;          /* the one writing into the conversation */
    bool want_response;            /* response.create waits for transcripts or a response */
    int want_upto;                 /* ... of the items before it (their count then) */
    cJSON *want_params;            /* its response object, or NULL */
    char want_eid[64];
    char playing[96];              /* the last spoken reply's item: barge-in truncates it */
    double play_t0;                /* when its first audio went out */
    struct rtc_spec *spec;         /* a reply started on an early transcript, unseen */
};

/* A reply started on a turn's early transcript, before the VAD is sure the
 * turn ended: its engine request runs with the prompt the turn's response
 * will have if that transcript stands, and what it writes is kept here,
 * unseen by the client and the conversation. When the turn's final
 * transcript comes, the response it starts adopts the request if prompt and
 * sampling are the same (replaying what was kept, then taking the engine's
 * events as they come); otherwise, and when the speaker goes on, it is
 * cancelled. It holds a reference on the connection until its engine
 * request ends; only spoken replies without tools speculate. {c->lock} */
struct rtc_spec {
    struct rtc *c;
    int turn;                      /* the stt turn whose early transcript it assumed */
    uint64_t engine_id;
    int32_t *ids;                  /* its prompt */
    int n_ids;
    float temperature;
    int max_tokens;
    char *text;                    /* generated so far, token by token */
    size_t len, cap;
    size_t *ends;                  /* where each token's text ends in text */
    int n_ends, cap_ends;
    bool done;                     /* its engine request ended: end holds DONE or ERROR */
    struct engine_event end;
    char error[256];
    struct rtc_resp *adopted;      /* the response it became: events go there */
    bool dropped;                  /* cancelled: freed when its request ends */
};

static double rtc_now_s(void) { return omni_time_s(); }

static void rtc_item_free(struct rtc_item *it)
{
    if (!it)
        return;
    free(it->text), free(it->call_id), free(it->name), free(it->args), free(it->spoken);
    free(it->spans);
    free(it);
}

static void rtc_unref(struct rtc *c)
{
    if (atomic_fetch_sub(&c->refs, 1) != 1)
        return;
    ws_sock_release(c->io.sock);
    pthread_mutex_destroy(&c->lock);
    for (int i = 0; i < c->n_items; i++)
        rtc_item_free(c->items[i]);
    free(c->items);
    free(c->instructions);
    free(c->tr_model);
    free(c->tr_language);
    cJSON_Delete(c->tools);
    cJSON_Delete(c->tool_choice);
    cJSON_Delete(c->want_params);
    free(c);
}

/* A reference dropped under the lock, where a caller up the stack holds
 * another (a socket, a session or a response in flight): it is never the
 * last, so nothing is freed here. */
static void rtc_unref_held(struct rtc *c)
{
    if (atomic_fetch_sub(&c->refs, 1) == 1)
        OMNI_ERROR("realtime: %s: last reference dropped under the lock (leaked)", c->io.id);
}

/* The error event; e is the client's event_id or NULL. */
static void rtc_error(struct rtc *c, const char *code, const char *param, const char *eid,
                      const char *fmt, ...) __attribute__((format(printf, 5, 6)));
static void rtc_error(struct rtc *c, const char *code, const char *param, const char *eid,
                      const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    rt_error(&c->io, "invalid_request_error", code, param, eid, msg);
}

/* GA name or beta name of an event. */
static const char *rtc_name(const struct rtc *c, const char *ga, const char *beta)
{
    return c->beta ? beta : ga;
}

// ---- items -----------------------------------------------------------------------

static int rtc_text_append(char **s, size_t *len, size_t *cap, const char *t, size_t n)
{
    if (*len + n + 1 > *cap) {
        size_t nc = *cap ? *cap * 2 : 256;
        while (nc < *len + n + 1)
            nc *= 2;
        char *p = realloc(*s, nc);
        if (!p)
            return -1;
        *s = p;
        *cap = nc;
    }
    memcpy(*s + *len, t, n);
    *len += n;
    (*s)[*len] = 0;
    return 0;
}

static struct rtc_item *rtc_item_new(struct rtc *c, enum rtc_kind kind, const char *role)
{
    struct rtc_item *it = calloc(1, sizeof *it);
    if (!it)
        return NULL;
    it->kind = kind;
    snprintf(it->role, sizeof it->role, "%s", role ? role : "");
    snprintf(it->id, sizeof it->id, "item_%s_c%u", c->io.id + 5, ++c->next_id);
    return it;
}

static int rtc_item_index(const struct rtc *c, const char *id)
{
    for (int i = 0; i < c->n_items; i++)
        if (!strcmp(c->items[i]->id, id))
            return i;
    return -1;
}

static cJSON *rtc_part_json(const struct rtc *c, const struct rtc_item *it)
{
    cJSON *p = cJSON_CreateObject();
    const char *text = it->text ? it->text : "";
    if (!strcmp(it->role, "assistant")) {
        if (it->audio) {
            cJSON_AddStringToObject(p, "type", c->beta ? "audio" : "output_audio");
            cJSON_AddStringToObject(p, "transcript", text);
        } else {
            cJSON_AddStringToObject(p, "type", c->beta ? "text" : "output_text");
            cJSON_AddStringToObject(p, "text", text);
        }
    } else if (it->audio) {
        cJSON_AddStringToObject(p, "type", "input_audio");
        if (it->pending)
            cJSON_AddNullToObject(p, "transcript");
        else
            cJSON_AddStringToObject(p, "transcript", text);
    } else {
        cJSON_AddStringToObject(p, "type", "input_text");
        cJSON_AddStringToObject(p, "text", text);
    }
    return p;
}

static cJSON *rtc_item_json(const struct rtc *c, const struct rtc_item *it)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "id", it->id);
    cJSON_AddStringToObject(o, "object", "realtime.item");
    const char *status = it->in_progress ? "in_progress" : it->incomplete ? "incomplete" : "completed";
    switch (it->kind) {
    case RTC_MESSAGE:
        cJSON_AddStringToObject(o, "type", "message");
        cJSON_AddStringToObject(o, "status", status);
        cJSON_AddStringToObject(o, "role", it->role);
        cJSON_AddItemToArray(cJSON_AddArrayToObject(o, "content"), rtc_part_json(c, it));
        break;
    case RTC_CALL:
        cJSON_AddStringToObject(o, "type", "function_call");
        cJSON_AddStringToObject(o, "status", status);
        cJSON_AddStringToObject(o, "call_id", it->call_id ? it->call_id : "");
        cJSON_AddStringToObject(o, "name", it->name ? it->name : "");
        cJSON_AddStringToObject(o, "arguments", it->args ? it->args : "");
        break;
    case RTC_CALL_OUTPUT:
        cJSON_AddStringToObject(o, "type", "function_call_output");
        cJSON_AddStringToObject(o, "call_id", it->call_id ? it->call_id : "");
        cJSON_AddStringToObject(o, "output", it->args ? it->args : "");
        break;
    }
    return o;
}

static void rtc_send_item_event(struct rtc *c, const char *type, const struct rtc_item *it,
                                bool previous)
{
    cJSON *ev = rt_event(type);
    if (previous) {
        int i = rtc_item_index(c, it->id);
        if (i > 0)
            cJSON_AddStringToObject(ev, "previous_item_id", c->items[i - 1]->id);
        else
            cJSON_AddNullToObject(ev, "previous_item_id");
    }
    cJSON_AddItemToObject(ev, "item", rtc_item_json(c, it));
    rt_send(&c->io, ev);
}

/* Removes item i (not one being generated) and says so. */
static void rtc_item_remove(struct rtc *c, int i)
{
    struct rtc_item *it = c->items[i];
    memmove(c->items + i, c->items + i + 1, (size_t)(c->n_items - i - 1) * sizeof *c->items);
    c->n_items--;
    cJSON *ev = rt_event("conversation.item.deleted");
    cJSON_AddStringToObject(ev, "item_id", it->id);
    rt_send(&c->io, ev);
    rtc_item_free(it);
}

/* Inserts it at position at (-1: the end), dropping the oldest items past
 * the limit, and sends conversation.item.added (beta: .created). */
static int rtc_item_insert(struct rtc *c, struct rtc_item *it, int at)
{
    while (c->n_items >= rtc_limits.max_items) {
        int k = 0;
        while (k < c->n_items && (c->items[k]->in_progress || c->items[k]->pending))
            k++;
        if (k == c->n_items)
            return -1;
        rtc_item_remove(c, k);
        if (at > k)
            at--;
    }
    if (c->n_items == c->cap_items) {
        int nc = c->cap_items ? c->cap_items * 2 : 16;
        struct rtc_item **p = realloc(c->items, (size_t)nc * sizeof *p);
        if (!p)
            return -1;
        c->items = p;
        c->cap_items = nc;
    }
    if (at < 0 || at > c->n_items)
        at = c->n_items;
    memmove(c->items + at + 1, c->items + at, (size_t)(c->n_items - at) * sizeof *c->items);
    c->items[at] = it;
    c->n_items++;
    rtc_send_item_event(c, rtc_name(c, "conversation.item.added", "conversation.item.created"), it,
                        true);
    return 0;
}

static void rtc_item_done(struct rtc *c, const struct rtc_item *it)
{
    if (!c->beta)
        rtc_send_item_event(c, "conversation.item.done", it, true);
}

// ---- truncation ----------------------------------------------------------------------

/* The text of a spoken reply whose audio ended at ms: the sentences spoken
 * completely before it, and of the sentence playing then the share of its
 * words that its share of audio played (a sentence whose audio was not all
 * made yet is dropped: its length is unknown). malloc'd. */
static char *rtc_heard_text(const struct rtc_item *it, int64_t ms)
{
    size_t keep = 0;
    int64_t start = 0;
    int i = 0;
    for (; i < it->n_spans && it->spans[i].end_ms <= ms; i++) {
        keep = it->spans[i].text_end;
        start = it->spans[i].end_ms;
    }
    char *out = malloc(keep + (i < it->n_spans ? it->spans[i].text_end - keep : 0) + 1);
    if (!out)
        return NULL;
    memcpy(out, it->spoken ? it->spoken : "", keep);
    size_t n = keep;
    if (i < it->n_spans && it->spans[i].end_ms > start) {
        const char *s = it->spoken + keep;
        size_t len = it->spans[i].text_end - keep;
        int words = 0;
        for (size_t k = 0; k < len; k++)
            words += s[k] != ' ' && (k == 0 || s[k - 1] == ' ');
        int want = (int)((double)words * (double)(ms - start) / (double)(it->spans[i].end_ms - start));
        size_t k = 0;
        for (int w = 0; k < len && w <= want; k++)
            if (s[k] != ' ' && (k == 0 || s[k - 1] == ' ') && ++w > want)
                break;
        while (k > 0 && s[k - 1] == ' ')
            k--;
        memcpy(out + n, s, k);
        n += k;
    }
    while (n > 0 && out[n - 1] == ' ')
        n--;
    out[n] = 0;
    return out;
}

/* Truncates a spoken reply to its first ms of audio: the conversation keeps
 * only the text heard. */
static void rtc_truncate(struct rtc *c, struct rtc_item *it, int64_t ms)
{
    char *t = rtc_heard_text(it, ms);
    if (t) {
        free(it->text);
        it->text = t;
        it->len = it->cap = 0;
    }
    if (ms < it->audio_ms) {
        it->audio_ms = ms;
        int k = 0;
        while (k < it->n_spans && it->spans[k].end_ms <= ms)
            k++;
        it->n_spans = k;
    }
    it->truncated = true;
    cJSON *ev = rt_event("conversation.item.truncated");
    cJSON_AddStringToObject(ev, "item_id", it->id);
    cJSON_AddNumberToObject(ev, "content_index", 0);
    cJSON_AddNumberToObject(ev, "audio_end_ms", (double)ms);
    rt_send(&c->io, ev);
}

// ---- responses: output -------------------------------------------------------------

static void rtc_resp_add_out(struct rtc_resp *r, struct rtc_item *it)
{
    if (r->n_out == r->cap_out) {
        int nc = r->cap_out ? r->cap_out * 2 : 4;
        struct rtc_item **p = realloc(r->out, (size_t)nc * sizeof *p);
        if (!p)
            return;
        r->out = p;
        r->cap_out = nc;
    }
    r->out[r->n_out++] = it;
}

static int rtc_out_index(const struct rtc_resp *r, const struct rtc_item *it)
{
    for (int i = 0; i < r->n_out; i++)
        if (r->out[i] == it)
            return i;
    return 0;
}

/* A delta-like event of one output item: response_id, item_id, output_index,
 * content_index. */
static cJSON *rtc_out_event(struct rtc_resp *r, const char *type, const struct rtc_item *it)
{
    cJSON *ev = rt_event(type);
    cJSON_AddStringToObject(ev, "response_id", r->id);
    cJSON_AddStringToObject(ev, "item_id", it->id);
    cJSON_AddNumberToObject(ev, "output_index", rtc_out_index(r, it));
    if (it->kind == RTC_MESSAGE)
        cJSON_AddNumberToObject(ev, "content_index", 0);
    return ev;
}

/* A new output item: response.output_item.added, and in the conversation
 * conversation.item.added. */
static struct rtc_item *rtc_resp_item(struct rtc_resp *r, enum rtc_kind kind, const char *call_id,
                                      const char *name)
{
    struct rtc *c = r->c;
    struct rtc_item *it = rtc_item_new(c, kind, "assistant");
    if (!it)
        return NULL;
    if (kind == RTC_CALL) {
        it->call_id = strdup(call_id ? call_id : "");
        it->name = strdup(name ? name : "");
    }
    it->in_progress = true;
    it->audio = kind == RTC_MESSAGE && r->audio;
    rtc_resp_add_out(r, it);
    cJSON *ev = rt_event("response.output_item.added");
    cJSON_AddStringToObject(ev, "response_id", r->id);
    cJSON_AddNumberToObject(ev, "output_index", rtc_out_index(r, it));
    cJSON_AddItemToObject(ev, "item", rtc_item_json(c, it));
    rt_send(&c->io, ev);
    if (!r->oob && rtc_item_insert(c, it, r->insert_at < c->n_items ? r->insert_at++ : -1) < 0)
        r->oob = true;   /* conversation full of pending items: keep it out */
    if (kind == RTC_MESSAGE) {
        cJSON *p = rtc_out_event(r, "response.content_part.added", it);
        cJSON_AddItemToObject(p, "part", rtc_part_json(c, it));
        rt_send(&c->io, p);
    }
    return it;
}

static void rtc_on_chat(void *user, const struct chatout_delta *d)
{
    struct rtc_resp *r = user;
    struct rtc *c = r->c;
    if (r->cancel_reason)
        return;
    switch (d->kind) {
    case CHATOUT_CONTENT: {
        if (!d->len)
            return;
        if (!r->msg && !(r->msg = rtc_resp_item(r, RTC_MESSAGE, NULL, NULL)))
            return;
        struct rtc_item *it = r->msg;
        if (it->len + d->len > rtc_limits.max_item_bytes)
            return;
        rtc_text_append(&it->text, &it->len, &it->cap, d->text, d->len);
        cJSON *ev = rtc_out_event(r, r->audio ? rtc_name(c, "response.output_audio_transcript.delta",
                                                         "response.audio_transcript.delta")
                                              : rtc_name(c, "response.output_text.delta",
                                                         "response.text.delta"), it);
        char *t = strndup(d->text, d->len);
        cJSON_AddStringToObject(ev, "delta", t ? t : "");
        free(t);
        rt_send(&c->io, ev);
        if (r->ts && !r->tts_done && tts_stream_push(r->ts, d->text, d->len) < 0)
            tts_stream_cancel(r->ts);
        break;
    }
    case CHATOUT_CALL_START: {
        struct rtc_item *it = rtc_resp_item(r, RTC_CALL, d->id, d->name);
        if (it)
            it->len = 0;   /* len/cap now count the arguments */
        break;
    }
    case CHATOUT_CALL_ARGS: {
        struct rtc_item *it = NULL;
        for (int i = r->n_out - 1; i >= 0 && !it; i--)
            if (r->out[i]->kind == RTC_CALL)
                it = r->out[i];
        if (!it || it->len + d->len > rtc_limits.max_item_bytes)
            return;
        rtc_text_append(&it->args, &it->len, &it->cap, d->text, d->len);
        cJSON *ev = rtc_out_event(r, "response.function_call_arguments.delta", it);
        cJSON_AddStringToObject(ev, "call_id", it->call_id);
        char *t = strndup(d->text, d->len);
        cJSON_AddStringToObject(ev, "delta", t ? t : "");
        free(t);
        rt_send(&c->io, ev);
        break;
    }
    case CHATOUT_REASONING:
        break;
    }
}

/* The response's outcome for response.done. */
static cJSON *rtc_resp_json(struct rtc_resp *r, const char *status)
{
    struct rtc *c = r->c;
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "id", r->id);
    cJSON_AddStringToObject(o, "object", "realtime.response");
    cJSON_AddStringToObject(o, "status", status);
    if (!strcmp(status, "in_progress") || !strcmp(status, "completed")) {
        cJSON_AddNullToObject(o, "status_details");
    } else {
        cJSON *d = cJSON_AddObjectToObject(o, "status_details");
        cJSON_AddStringToObject(d, "type", status);
        if (!strcmp(status, "cancelled"))
            cJSON_AddStringToObject(d, "reason", r->cancel_reason);
        else if (!strcmp(status, "incomplete"))
            cJSON_AddStringToObject(d, "reason", "max_output_tokens");
        else {
            cJSON *e = cJSON_AddObjectToObject(d, "error");
            cJSON_AddStringToObject(e, "type", "server_error");
            cJSON_AddStringToObject(e, "message", r->error);
        }
    }
    cJSON *out = cJSON_AddArrayToObject(o, "output");
    for (int i = 0; i < r->n_out; i++)
        cJSON_AddItemToArray(out, rtc_item_json(c, r->out[i]));
    if (r->oob)
        cJSON_AddNullToObject(o, "conversation_id");
    else {
        char conv[80];
        snprintf(conv, sizeof conv, "conv_%s", c->io.id + 5);
        cJSON_AddStringToObject(o, "conversation_id", conv);
    }
    cJSON *mods = cJSON_AddArrayToObject(o, c->beta ? "modalities" : "output_modalities");
    if (c->beta || !r->audio)
        cJSON_AddItemToArray(mods, cJSON_CreateString("text"));
    if (r->audio)
        cJSON_AddItemToArray(mods, cJSON_CreateString("audio"));
    if (r->max_tokens < 0)
        cJSON_AddStringToObject(o, "max_output_tokens", "inf");
    else
        cJSON_AddNumberToObject(o, "max_output_tokens", r->max_tokens);
    if (r->metadata)
        cJSON_AddItemToObject(o, "metadata", cJSON_Duplicate(r->metadata, true));
    else
        cJSON_AddNullToObject(o, "metadata");
    if (strcmp(status, "in_progress")) {
        cJSON *u = cJSON_AddObjectToObject(o, "usage");
        cJSON_AddNumberToObject(u, "total_tokens", r->prompt_tokens + r->completion_tokens);
        cJSON_AddNumberToObject(u, "input_tokens", r->prompt_tokens);
        cJSON_AddNumberToObject(u, "output_tokens", r->completion_tokens);
        cJSON *in = cJSON_AddObjectToObject(u, "input_token_details");
        cJSON_AddNumberToObject(in, "cached_tokens", r->cached_tokens);
        cJSON_AddNumberToObject(in, "text_tokens", r->prompt_tokens);
        cJSON_AddNumberToObject(in, "audio_tokens", 0);
        cJSON *ot = cJSON_AddObjectToObject(u, "output_token_details");
        cJSON_AddNumberToObject(ot, "text_tokens", r->completion_tokens);
        /* espeak has no audio tokens: 50 a second of audio, as /v1/audio/speech bills */
        cJSON_AddNumberToObject(ot, "audio_tokens", r->msg ? (double)(r->msg->audio_ms / 20) : 0);
    } else {
        cJSON_AddNullToObject(o, "usage");
    }
    return o;
}

static void rtc_try_start(struct rtc *c);

/* Engine and tts are done: the closing events, then the response goes.
 * Returns true when the caller must drop the connection's reference (after
 * unlocking). */
static bool rtc_resp_end(struct rtc_resp *r)
{
    struct rtc *c = r->c;
    if (!r->engine_done || (r->ts && !r->tts_done))
        return false;
    const char *status = r->error[0] ? "failed" : r->cancel_reason ? "cancelled"
                       : r->finish == ENGINE_FINISH_LENGTH ? "incomplete" : "completed";
    for (int i = 0; i < r->n_out; i++) {
        struct rtc_item *it = r->out[i];
        it->in_progress = false;
        it->incomplete = strcmp(status, "completed") != 0;
        if (it->kind == RTC_MESSAGE) {
            if (r->audio) {
                if (r->audio_started)
                    rt_send(&c->io, rtc_out_event(r, rtc_name(c, "response.output_audio.done",
                                                               "response.audio.done"), it));
                cJSON *ev = rtc_out_event(r, rtc_name(c, "response.output_audio_transcript.done",
                                                      "response.audio_transcript.done"), it);
                cJSON_AddStringToObject(ev, "transcript", it->text ? it->text : "");
                rt_send(&c->io, ev);
            } else {
                cJSON *ev = rtc_out_event(r, rtc_name(c, "response.output_text.done",
                                                      "response.text.done"), it);
                cJSON_AddStringToObject(ev, "text", it->text ? it->text : "");
                rt_send(&c->io, ev);
            }
            cJSON *p = rtc_out_event(r, "response.content_part.done", it);
            cJSON_AddItemToObject(p, "part", rtc_part_json(c, it));
            rt_send(&c->io, p);
        } else if (it->kind == RTC_CALL) {
            cJSON *ev = rtc_out_event(r, "response.function_call_arguments.done", it);
            cJSON_AddStringToObject(ev, "call_id", it->call_id);
            cJSON_AddStringToObject(ev, "name", it->name);
            cJSON_AddStringToObject(ev, "arguments", it->args ? it->args : "");
            rt_send(&c->io, ev);
        }
        cJSON *ev = rt_event("response.output_item.done");
        cJSON_AddStringToObject(ev, "response_id", r->id);
        cJSON_AddNumberToObject(ev, "output_index", i);
        cJSON_AddItemToObject(ev, "item", rtc_item_json(c, it));
        rt_send(&c->io, ev);
        if (!r->oob)
            rtc_item_done(c, it);
    }
    if (r->audio_started)
        rt_send(&c->io, rtc_out_event(r, "output_audio_buffer.stopped", r->msg ? r->msg : r->out[0]));
    cJSON *done = rt_event("response.done");
    cJSON_AddItemToObject(done, "response", rtc_resp_json(r, status));
    rt_send(&c->io, done);
    cJSON *rl = rt_event("rate_limits.updated");
    cJSON *arr = cJSON_AddArrayToObject(rl, "rate_limits");
    cJSON *x = cJSON_CreateObject();
    cJSON_AddStringToObject(x, "name", "tokens");
    cJSON_AddNumberToObject(x, "limit", c->m->n_ctx);
    cJSON_AddNumberToObject(x, "remaining", c->m->n_ctx);
    cJSON_AddNumberToObject(x, "reset_seconds", 0);
    cJSON_AddItemToArray(arr, x);
    rt_send(&c->io, rl);
    OMNI_INFO("realtime: %s %s: %s, %d prompt tokens (%d cached), %d generated%s%s", c->io.id,
              r->id, status, r->prompt_tokens, r->cached_tokens, r->completion_tokens,
              r->msg && r->audio ? ", spoken" : "", r->early ? ", started on the early transcript" : "");
    /* unlink */
    for (struct rtc_resp **p = &c->resps; *p; p = &(*p)->next)
        if (*p == r) {
            *p = r->next;
            break;
        }
    if (c->cur == r)
        c->cur = NULL;
    if (r->oob)
        for (int i = 0; i < r->n_out; i++)
            if (rtc_item_index(c, r->out[i]->id) < 0)
                rtc_item_free(r->out[i]);
    free(r->out);
    chatout_free(r->co);
    media_resampler_free(r->rs);
    cJSON_Delete(r->metadata);
    free(r);
    if (!c->gone)
        rtc_try_start(c);
    return true;
}

/* Stops a response (engine and speech); its response.done follows. */
static void rtc_resp_cancel(struct rtc_resp *r, const char *reason)
{
    if (r->cancel_reason)
        return;
    r->cancel_reason = reason;
    if (!r->engine_done)
        engine_cancel(r->c->m->engine, r->engine_id);
    if (r->ts && !r->tts_done)
        tts_stream_cancel(r->ts);
}

// ---- responses: engine and tts events ---------------------------------------------------

/* One engine event of r; true when r ended and its reference on the
 * connection must go. {lock} */
static bool rtc_engine_event(struct rtc_resp *r, const struct engine_event *ev)
{
    if (ev->type == ENGINE_EV_TOKEN) {
        if (ev->text_len)
            chatout_feed(r->co, ev->text, ev->text_len, true, rtc_on_chat, r);
        return false;
    }
    if (ev->type == ENGINE_EV_DONE) {
        if (ev->text_len)
            chatout_feed(r->co, ev->text, ev->text_len, false, rtc_on_chat, r);
        chatout_finish(r->co, rtc_on_chat, r);
        r->finish = ev->finish;
        r->prompt_tokens = ev->usage.prompt_tokens;
        r->cached_tokens = ev->usage.cached_tokens;
        r->completion_tokens = ev->usage.completion_tokens;
    } else {
        snprintf(r->error, sizeof r->error, "%s", ev->error ? ev->error : "generation failed");
    }
    r->engine_done = true;
    if (r->ts && !r->tts_done) {
        if (r->error[0] || r->cancel_reason)
            tts_stream_cancel(r->ts);
        else if (tts_stream_finish(r->ts) < 0)
            tts_stream_cancel(r->ts);
    }
    return rtc_resp_end(r);
}

/* Engine thread. */
static void rtc_on_engine(void *user, const struct engine_event *ev)
{
    struct rtc_resp *r = user;
    struct rtc *c = r->c;
    pthread_mutex_lock(&c->lock);
    bool drop = rtc_engine_event(r, ev);
    pthread_mutex_unlock(&c->lock);
    if (drop)
        rtc_unref(c);
}

// ---- speculation: a reply started on an early transcript ------------------------------

static void rtc_spec_free(struct rtc_spec *sp)
{
    free(sp->ids);
    free(sp->text);
    free(sp->ends);
    free(sp);
}

/* Engine thread: keep what the request writes, or pass it on to the
 * response that adopted it. */
static void rtc_on_spec(void *user, const struct engine_event *ev)
{
    struct rtc_spec *sp = user;
    struct rtc *c = sp->c;
    const bool end = ev->type != ENGINE_EV_TOKEN;
    bool drop_resp = false, gone = false;
    pthread_mutex_lock(&c->lock);
    if (sp->adopted) {
        drop_resp = rtc_engine_event(sp->adopted, ev);
        gone = end;
    } else if (!sp->dropped) {
        if (ev->text_len) {
            if (sp->len + ev->text_len > rtc_limits.max_item_bytes ||
                rtc_text_append(&sp->text, &sp->len, &sp->cap, ev->text, ev->text_len) < 0) {
                sp->dropped = true;   /* more than a reply may hold: give up */
                if (c->spec == sp)
                    c->spec = NULL;
                engine_cancel(c->m->engine, sp->engine_id);
            } else if (!end) {
                if (sp->n_ends == sp->cap_ends) {
                    int cap = sp->cap_ends ? 2 * sp->cap_ends : 64;
                    size_t *e = realloc(sp->ends, (size_t)cap * sizeof *e);
                    if (e)
                        sp->ends = e, sp->cap_ends = cap;
                }
                if (sp->n_ends < sp->cap_ends)
                    sp->ends[sp->n_ends++] = sp->len;
            }
        }
        if (end) {
            sp->done = true;
            sp->end = *ev;
            sp->end.text = NULL;   /* its text was kept with the rest */
            sp->end.text_len = 0;
            snprintf(sp->error, sizeof sp->error, "%s", ev->error ? ev->error : "generation failed");
            sp->end.error = sp->error;
            gone = sp->dropped;
        }
    } else {
        gone = end;
    }
    if (gone)
        rtc_spec_free(sp);
    pthread_mutex_unlock(&c->lock);
    if (drop_resp)
        rtc_unref(c);
    if (gone)
        rtc_unref(c);   /* the speculation's own reference */
}

/* Cancel the speculation, if any. {lock} */
static void rtc_spec_drop(struct rtc *c)
{
    struct rtc_spec *sp = c->spec;
    if (!sp)
        return;
    c->spec = NULL;
    if (sp->done) {
        rtc_spec_free(sp);
        rtc_unref_held(c);
    } else {
        sp->dropped = true;   /* freed when its request ends */
        engine_cancel(c->m->engine, sp->engine_id);
    }
}

/* Resampled audio to the client as output_audio deltas. {lock} */
static void rtc_send_audio(struct rtc_resp *r)
{
    struct rtc *c = r->c;
    size_t got;
    while ((got = media_resampler_pull(r->rs, r->pcm, sizeof r->pcm / sizeof r->pcm[0])) > 0) {
        if (!r->msg)
            return;
        size_t bps = r->fmt == RTC_PCM16 ? 2 : 1;
        uint8_t *buf = malloc(got * bps);
        if (!buf)
            return;
        for (size_t i = 0; i < got; i++) {
            float v = r->pcm[i] * 32768.0f;
            int16_t s = (int16_t)(v > 32767 ? 32767 : v < -32768 ? -32768 : lrintf(v));
            if (r->fmt == RTC_PCM16) {
                buf[2 * i] = (uint8_t)(s & 0xFF);
                buf[2 * i + 1] = (uint8_t)((uint16_t)s >> 8);
            } else {
                buf[i] = r->fmt == RTC_ULAW ? media_g711_ulaw_from_s16(s) : media_g711_alaw_from_s16(s);
            }
        }
        char *b64 = rt_base64_encode(buf, got * bps);
        free(buf);
        if (!b64)
            return;
        if (!r->audio_started) {
            r->audio_started = true;
            snprintf(c->playing, sizeof c->playing, "%s", r->msg->id);
            c->play_t0 = rtc_now_s();
            rt_send(&c->io, rtc_out_event(r, "output_audio_buffer.started", r->msg));
        }
        cJSON *ev = rtc_out_event(r, rtc_name(c, "response.output_audio.delta", "response.audio.delta"),
                                  r->msg);
        cJSON_AddStringToObject(ev, "delta", b64);
        free(b64);
        rt_send(&c->io, ev);
        r->msg->audio_ms += (int64_t)got * 1000 / r->rate_hz;
    }
}

/* The tts worker. */
static void rtc_on_tts(void *user, const struct tts_event *ev)
{
    struct rtc_resp *r = user;
    struct rtc *c = r->c;
    char err[256];
    pthread_mutex_lock(&c->lock);
    bool stop = r->cancel_reason || c->gone || (r->msg && r->msg->truncated);
    if (ev->type == TTS_EV_AUDIO && !stop) {
        if (media_resampler_push(r->rs, ev->pcm, ev->n * sizeof *ev->pcm, err, sizeof err) < 0)
            tts_stream_cancel(r->ts);
        else
            rtc_send_audio(r);
    } else if (ev->type == TTS_EV_SENTENCE && !stop && r->msg) {
        /* spoken sentences joined by spaces, each with where its audio ended */
        struct rtc_item *it = r->msg;
        char *p = realloc(it->spoken, it->spoken_len + ev->len + 2);
        if (p) {
            it->spoken = p;
            if (it->spoken_len)
                p[it->spoken_len++] = ' ';
            memcpy(p + it->spoken_len, ev->text, ev->len);
            it->spoken_len += ev->len;
            p[it->spoken_len] = 0;
            if (it->n_spans == it->cap_spans) {
                int nc = it->cap_spans ? it->cap_spans * 2 : 8;
                struct rtc_span *s = realloc(it->spans, (size_t)nc * sizeof *s);
                if (s) {
                    it->spans = s;
                    it->cap_spans = nc;
                }
            }
            if (it->n_spans < it->cap_spans)
                it->spans[it->n_spans++] = (struct rtc_span){ it->audio_ms, it->spoken_len };
        }
    } else if (ev->type == TTS_EV_DONE) {
        if (!stop && !ev->cancelled && !ev->error &&
            media_resampler_flush(r->rs, err, sizeof err) == 0)
            rtc_send_audio(r);
        if (ev->error)
            OMNI_WARN("realtime: %s: %s", c->io.id, ev->error);
        r->tts_done = true;
        bool drop = rtc_resp_end(r);
        pthread_mutex_unlock(&c->lock);
        if (drop)
            rtc_unref(c);
        return;
    }
    if (stop && r->ts && !r->tts_done)
        tts_stream_cancel(r->ts);
    pthread_mutex_unlock(&c->lock);
}

// ---- responses: start ------------------------------------------------------------------

/* One conversation item as chat messages, appended to msgs. */
static void rtc_item_messages(const struct rtc_item *it, cJSON *msgs)
{
    cJSON *last = cJSON_GetArrayItem(msgs, cJSON_GetArraySize(msgs) - 1);
    const cJSON *lrole = cJSON_GetObjectItemCaseSensitive(last, "role");
    switch (it->kind) {
    case RTC_MESSAGE: {
        cJSON *m = cJSON_CreateObject();
        cJSON_AddStringToObject(m, "role", it->role);
        cJSON_AddStringToObject(m, "content", it->text ? it->text : "");
        cJSON_AddItemToArray(msgs, m);
        break;
    }
    case RTC_CALL: {
        /* calls join the assistant message before them */
        cJSON *m = last;
        if (!cJSON_IsString(lrole) || strcmp(lrole->valuestring, "assistant")) {
            m = cJSON_CreateObject();
            cJSON_AddStringToObject(m, "role", "assistant");
            cJSON_AddStringToObject(m, "content", "");
            cJSON_AddItemToArray(msgs, m);
        }
        cJSON *calls = cJSON_GetObjectItemCaseSensitive(m, "tool_calls");
        if (!calls)
            calls = cJSON_AddArrayToObject(m, "tool_calls");
        cJSON *x = cJSON_CreateObject();
        cJSON_AddStringToObject(x, "id", it->call_id ? it->call_id : "");
        cJSON_AddStringToObject(x, "type", "function");
        cJSON *f = cJSON_AddObjectToObject(x, "function");
        cJSON_AddStringToObject(f, "name", it->name ? it->name : "");
        cJSON_AddStringToObject(f, "arguments", it->args && *it->args ? it->args : "{}");
        cJSON_AddItemToArray(calls, x);
        break;
    }
    case RTC_CALL_OUTPUT: {
        cJSON *m = cJSON_CreateObject();
        cJSON_AddStringToObject(m, "role", "tool");
        cJSON_AddStringToObject(m, "tool_call_id", it->call_id ? it->call_id : "");
        cJSON_AddStringToObject(m, "content", it->args ? it->args : "");
        cJSON_AddItemToArray(msgs, m);
        break;
    }
    }
}

/* The chat request for a response: {messages, tools, tool_choice} from the
 * conversation items [from, n) (or the response's own input items). */
static cJSON *rtc_chat_request(struct rtc *c, const char *instructions, struct rtc_item **items,
                               int from, int n, const cJSON *tools, const cJSON *tool_choice)
{
    cJSON *req = cJSON_CreateObject();
    cJSON *msgs = cJSON_AddArrayToObject(req, "messages");
    if (instructions && *instructions) {
        cJSON *m = cJSON_CreateObject();
        cJSON_AddStringToObject(m, "role", "system");
        cJSON_AddStringToObject(m, "content", instructions);
        cJSON_AddItemToArray(msgs, m);
    }
    for (int i = from; i < n; i++)
        rtc_item_messages(items[i], msgs);
    if (tools && cJSON_GetArraySize(tools) > 0)
        cJSON_AddItemToObject(req, "tools", cJSON_Duplicate(tools, true));
    if (tool_choice)
        cJSON_AddItemToObject(req, "tool_choice", cJSON_Duplicate(tool_choice, true));
    /* one call per response: a spoken agent acts on one thing at a time */
    cJSON_AddBoolToObject(req, "parallel_tool_calls", false);
    (void)c;
    return req;
}

/* Realtime tools ({type, name, description, parameters}) in the chat shape;
 * NULL + message for a bad one. */
static cJSON *rtc_tools_chat(const cJSON *tools, const char **msg)
{
    if (!cJSON_IsArray(tools)) {
        *msg = "'tools' must be an array of {type: \"function\", name, description, parameters}";
        return NULL;
    }
    cJSON *out = cJSON_CreateArray();
    const cJSON *t;
    cJSON_ArrayForEach(t, tools) {
        const cJSON *name = cJSON_GetObjectItemCaseSensitive(t, "name");
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(t, "type");
        if (!cJSON_IsObject(t) || !cJSON_IsString(name) ||
            (type && (!cJSON_IsString(type) || strcmp(type->valuestring, "function")))) {
            *msg = "each tool must be {type: \"function\", name, description, parameters}";
            cJSON_Delete(out);
            return NULL;
        }
        cJSON *x = cJSON_CreateObject();
        cJSON_AddStringToObject(x, "type", "function");
        cJSON *f = cJSON_AddObjectToObject(x, "function");
        cJSON_AddStringToObject(f, "name", name->valuestring);
        const cJSON *d = cJSON_GetObjectItemCaseSensitive(t, "description");
        if (cJSON_IsString(d))
            cJSON_AddStringToObject(f, "description", d->valuestring);
        const cJSON *p = cJSON_GetObjectItemCaseSensitive(t, "parameters");
        if (cJSON_IsObject(p))
            cJSON_AddItemToObject(f, "parameters", cJSON_Duplicate(p, true));
        cJSON_AddItemToArray(out, x);
    }
    return out;
}

/* tool_choice: "auto" | "none" | "required" | {type: "function", name}. */
static cJSON *rtc_tool_choice_chat(const cJSON *tc, const char **msg)
{
    if (cJSON_IsString(tc) && (!strcmp(tc->valuestring, "auto") || !strcmp(tc->valuestring, "none") ||
                               !strcmp(tc->valuestring, "required")))
        return cJSON_CreateString(tc->valuestring);
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(tc, "name");
    if (cJSON_IsObject(tc) && cJSON_IsString(name)) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "type", "function");
        cJSON_AddStringToObject(cJSON_AddObjectToObject(o, "function"), "name", name->valuestring);
        return o;
    }
    *msg = "'tool_choice' must be auto, none, required or {type: \"function\", name}";
    return NULL;
}

static int rtc_parse_items(struct rtc *c, const cJSON *arr, struct rtc_item ***out, int *n,
                           const char **param, char *msg, size_t msglen);

/* Validates a response.create's response object (NULL: none) against the
 * session and starts it. {lock}. 0, or -1 after an error event. */
/* upto: the response answers the conversation's first upto items (later
 * turns still wait for their transcripts); its items go after them. */
/* Generation settings of a response asking for max_tokens (-1: "inf"). {lock} */
static void rtc_gen(const struct rtc *c, int max_tokens, struct apireq_gen *g)
{
    apireq_gen_init(g);
    g->sp.temperature = c->temperature;
    const int want = max_tokens < 0 ? rtc_limits.max_output_tokens : max_tokens;
    g->max_tokens = want < c->m->n_ctx / 2 ? want : c->m->n_ctx / 2;
    g->max_tokens_set = true;
}

/* The engine request of a rendered response prompt. */
static struct engine_request rtc_engine_request(const struct api_model *m, const struct chatreq *cr,
                                                const struct apireq_gen *g, engine_event_fn fn, void *user)
{
    struct engine_request rq = engine_default_request();
    rq.model = m->index;
    rq.prompt = cr->ids;
    rq.n_prompt = cr->n_ids;
    rq.stop = cr->stops;
    rq.n_stop = cr->n_stops;
    rq.grammar = cr->grammar;
    rq.grammar_trigger = cr->grammar_trigger;
    rq.grammar_close = cr->grammar_close;
    rq.echo_special = cr->tools_on || m->special_markup;
    rq.sampling = g->sp;
    rq.max_tokens = g->max_tokens;
    rq.priority = ENGINE_PRIORITY_INTERACTIVE;
    rq.on_event = fn;
    rq.user = user;
    return rq;
}

/* The turn's early transcript came: start the reply the final transcript
 * would start, if nothing but this turn stands between the conversation and
 * that response (server VAD creating responses, none in flight or waiting,
 * every item transcribed), it is spoken and uses no tools. {lock} */
static void rtc_spec_start(struct rtc *c, int turn, const char *text)
{
    rtc_spec_drop(c);
    if (c->gone || c->cur || c->want_response || !c->out_audio || !c->tts || !c->turn.server_vad ||
        !c->turn.create_response || (c->tools && cJSON_GetArraySize(c->tools) > 0))
        return;
    for (int i = 0; i < c->n_items; i++)
        if (c->items[i]->pending || c->items[i]->wants_response)
            return;
    while (*text == ' ')   /* as rtc_transcribed stores it */
        text++;
    struct rtc_item user = { .kind = RTC_MESSAGE, .role = "user", .audio = true, .text = (char *)text };
    struct rtc_item **items = malloc((size_t)(c->n_items + 1) * sizeof *items);
    if (!items)
        return;
    memcpy(items, c->items, (size_t)c->n_items * sizeof *items);
    items[c->n_items] = &user;
    cJSON *req = rtc_chat_request(c, c->instructions, items, 0, c->n_items + 1, c->tools, c->tool_choice);
    free(items);
    struct apireq_gen g;
    rtc_gen(c, c->max_output_tokens, &g);
    struct chatreq cr;
    struct api_error e;
    const bool built = req != NULL;
    const int rc = built ? chatreq_build(c->m, req, &g, &cr, &e) : -1;
    cJSON_Delete(req);
    struct rtc_spec *sp = rc == 0 && !cr.tools_on && !cr.grammar ? calloc(1, sizeof *sp) : NULL;
    if (sp && (sp->ids = malloc((size_t)cr.n_ids * sizeof *sp->ids))) {
        memcpy(sp->ids, cr.ids, (size_t)cr.n_ids * sizeof *sp->ids);
        sp->n_ids = cr.n_ids;
        sp->c = c;
        sp->turn = turn;
        sp->temperature = g.sp.temperature;
        sp->max_tokens = g.max_tokens;
        struct engine_request rq = rtc_engine_request(c->m, &cr, &g, rtc_on_spec, sp);
        char err[256];
        atomic_fetch_add(&c->refs, 1);   /* until its request ends */
        if (engine_submit(c->m->engine, &rq, &sp->engine_id, err, sizeof err) == 0) {
            OMNI_INFO("realtime: %s: reply started on turn %d's early transcript", c->io.id, turn);
            c->spec = sp;
            sp = NULL;
        } else {
            rtc_unref_held(c);
        }
    }
    if (sp)
        rtc_spec_free(sp);
    if (built)
        chatreq_free(&cr);
    apireq_gen_free(&g);
}

/* The speculation that a starting response r may adopt: taken from c when
 * its prompt and sampling are r's, else dropped. {lock} */
static struct rtc_spec *rtc_spec_take(struct rtc *c, const struct rtc_resp *r, const struct chatreq *cr,
                                      const struct apireq_gen *g)
{
    struct rtc_spec *sp = c->spec;
    if (!sp)
        return NULL;
    if (!r->oob && r->audio && r->co &&
        !(sp->done && (sp->end.type != ENGINE_EV_DONE || sp->end.finish == ENGINE_FINISH_CANCELLED)) &&
        sp->n_ids == cr->n_ids && !memcmp(sp->ids, cr->ids, (size_t)cr->n_ids * sizeof *cr->ids) &&
        sp->temperature == g->sp.temperature && sp->max_tokens == g->max_tokens && !cr->tools_on &&
        !cr->grammar) {
        c->spec = NULL;
        return sp;
    }
    rtc_spec_drop(c);
    return NULL;
}

/* r adopts sp: what sp's request wrote so far, as if it came now, then its
 * events as they come. {lock} */
static void rtc_spec_adopt(struct rtc_resp *r, struct rtc_spec *sp)
{
    struct rtc *c = r->c;
    r->early = true;
    size_t at = 0;
    for (int i = 0; i < sp->n_ends; i++) {
        struct engine_event ev = { .type = ENGINE_EV_TOKEN, .request_id = sp->engine_id, .text = sp->text + at,
                                   .text_len = sp->ends[i] - at };
        rtc_engine_event(r, &ev);
        at = sp->ends[i];
    }
    if (at < sp->len) /* the end's held-back text (or tokens whose ends were not kept) */
        chatout_feed(r->co, sp->text + at, sp->len - at, !sp->done, rtc_on_chat, r);
    if (!sp->done) {
        sp->adopted = r;
        return;
    }
    const bool ended = rtc_engine_event(r, &sp->end);
    rtc_spec_free(sp);
    rtc_unref_held(c);   /* the speculation's reference */
    if (ended)
        rtc_unref_held(c);   /* r itself ended at once (its speech failed) */
}

static int rtc_start(struct rtc *c, const cJSON *p, const char *eid, int upto)
{
    const char *msg = NULL, *param = NULL;
    char buf[512];
    struct rtc_item **input = NULL;
    int n_input = 0;
    cJSON *tools = NULL, *tool_choice = NULL, *req = NULL;
    struct rtc_resp *r = calloc(1, sizeof *r);
    if (!r) {
        rtc_error(c, "server_error", NULL, eid, "out of memory");
        return -1;
    }
    r->c = c;
    r->audio = c->out_audio;
    r->fmt = c->out_fmt;
    r->max_tokens = c->max_output_tokens;
    snprintf(r->voice, sizeof r->voice, "%s", c->voice);
    const char *instructions = c->instructions;
    const cJSON *x;
    if (p && !cJSON_IsObject(p)) {
        param = "response", msg = "'response' must be an object";
        goto fail;
    }
    if ((x = cJSON_GetObjectItemCaseSensitive(p, "conversation")) && !cJSON_IsNull(x)) {
        if (!cJSON_IsString(x) || (strcmp(x->valuestring, "none") && strcmp(x->valuestring, "auto"))) {
            param = "response.conversation", msg = "'conversation' must be \"auto\" or \"none\"";
            goto fail;
        }
        r->oob = !strcmp(x->valuestring, "none");
    }
    if ((x = cJSON_GetObjectItemCaseSensitive(p, "instructions")) && !cJSON_IsNull(x)) {
        if (!cJSON_IsString(x)) {
            param = "response.instructions", msg = "'instructions' must be a string";
            goto fail;
        }
        instructions = x->valuestring;
    }
    const cJSON *mods = cJSON_GetObjectItemCaseSensitive(p, "output_modalities");
    if (!mods)
        mods = cJSON_GetObjectItemCaseSensitive(p, "modalities");
    if (mods && !cJSON_IsNull(mods)) {
        bool audio = false, ok = cJSON_IsArray(mods);
        cJSON_ArrayForEach(x, mods) {
            if (!cJSON_IsString(x) || (strcmp(x->valuestring, "text") && strcmp(x->valuestring, "audio")))
                ok = false;
            else
                audio |= !strcmp(x->valuestring, "audio");
        }
        if (!ok || (audio && !c->tts)) {
            param = "response.output_modalities";
            msg = ok ? "this server has no speech synthesis (--no-tts): only [\"text\"]"
                     : "'output_modalities' must be [\"text\"] or [\"audio\"]";
            goto fail;
        }
        r->audio = audio;
    }
    if ((x = cJSON_GetObjectItemCaseSensitive(p, "max_output_tokens")) ||
        (x = cJSON_GetObjectItemCaseSensitive(p, "max_response_output_tokens"))) {
        if (cJSON_IsString(x) && !strcmp(x->valuestring, "inf"))
            r->max_tokens = -1;
        else if (cJSON_IsNumber(x) && x->valuedouble >= 1 && x->valuedouble <= 4096)
            r->max_tokens = (int)x->valuedouble;
        else {
            param = "response.max_output_tokens", msg = "'max_output_tokens' must be 1..4096 or \"inf\"";
            goto fail;
        }
    }
    const cJSON *audio = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(p, "audio"), "output");
    const cJSON *voice = audio ? cJSON_GetObjectItemCaseSensitive(audio, "voice")
                               : cJSON_GetObjectItemCaseSensitive(p, "voice");
    if (voice && !cJSON_IsNull(voice)) {
        struct tts_voice_info vi;
        if (!cJSON_IsString(voice) || !c->tts || tts_voice_find(c->tts, voice->valuestring, &vi, buf, sizeof buf) < 0) {
            param = "response.voice", msg = cJSON_IsString(voice) && c->tts ? buf : "'voice' must be a voice name";
            goto fail;
        }
        snprintf(r->voice, sizeof r->voice, "%s", vi.id);
    }
    if ((x = cJSON_GetObjectItemCaseSensitive(p, "tools")) && !cJSON_IsNull(x)) {
        if (!(tools = rtc_tools_chat(x, &msg))) {
            param = "response.tools";
            goto fail;
        }
    }
    if ((x = cJSON_GetObjectItemCaseSensitive(p, "tool_choice")) && !cJSON_IsNull(x)) {
        if (!(tool_choice = rtc_tool_choice_chat(x, &msg))) {
            param = "response.tool_choice";
            goto fail;
        }
    }
    if ((x = cJSON_GetObjectItemCaseSensitive(p, "metadata")) && cJSON_IsObject(x))
        r->metadata = cJSON_Duplicate(x, true);
    if ((x = cJSON_GetObjectItemCaseSensitive(p, "input")) && !cJSON_IsNull(x)) {
        if (rtc_parse_items(c, x, &input, &n_input, &param, buf, sizeof buf) < 0) {
            msg = buf;
            goto fail;
        }
    }
    if (!r->oob && c->cur) {
        rtc_error(c, "conversation_already_has_active_response", NULL, eid,
                  "Conversation already has an active response in progress: %s", c->cur->id);
        goto out;
    }

    /* The prompt: the whole conversation with the chat template (the
     * engine's prefix cache keeps the earlier turns), dropping the oldest
     * items while it does not fit the context with room for the answer. */
    const struct api_model *m = c->m;
    struct apireq_gen g;
    rtc_gen(c, r->max_tokens, &g);
    struct chatreq cr;
    struct api_error e;
    const cJSON *use_tools = tools ? tools : c->tools, *use_tc = tool_choice ? tool_choice : c->tool_choice;
    for (;;) {
        struct rtc_item **items = input ? input : c->items;
        int n = input ? n_input : upto < c->n_items ? upto : c->n_items;
        req = rtc_chat_request(c, instructions, items, 0, n, use_tools, use_tc);
        int rc = chatreq_build(m, req, &g, &cr, &e);
        cJSON_Delete(req);
        req = NULL;
        if (rc == 0)
            break;
        chatreq_free(&cr);
        int k = 0;
        while (!input && k < c->n_items && (c->items[k]->in_progress || c->items[k]->pending))
            k++;
        if (!input && e.code && !strcmp(e.code, "context_length_exceeded") && k < upto - 1) {
            rtc_item_remove(c, k);   /* the oldest goes: the context is full */
            upto--;
            continue;
        }
        apireq_gen_free(&g);
        if (!input && c->n_items == 0)
            snprintf(buf, sizeof buf, "the conversation is empty: add an item first");
        else
            snprintf(buf, sizeof buf, "%s", e.message);
        param = e.param[0] ? e.param : NULL, msg = buf;
        goto fail;
    }
    struct chatout_params cp = chatout_default_params();
    cp.rfmt = m->rfmt;
    cp.starts_open = reasoning_prompt_opens(m->rfmt, cr.prompt, strlen(cr.prompt));
    cp.tools = cr.tools_on;
    cp.tp.fmt = m->tools_fmt;
    cp.tp.parallel = cr.parallel;
    cp.tp.tools_json = cr.tools_text;
    r->co = chatout_new(&cp);
    char err[256] = "out of memory";
    struct media_audio_params ap = media_audio_default_params();
    r->rate_hz = r->fmt == RTC_PCM16 ? 24000 : 8000;
    ap.sample_rate_hz = r->rate_hz;
    struct tts_voice_info vi;
    if (r->co && r->audio &&
        (tts_voice_find(c->tts, r->voice, &vi, err, sizeof err) < 0 ||
         !(r->rs = media_resampler_new(MEDIA_PCM_F32LE, vi.sample_rate_hz, &ap, err, sizeof err))))
        r->co = (chatout_free(r->co), NULL);
    struct engine_request rq = rtc_engine_request(m, &cr, &g, rtc_on_engine, r);
    snprintf(r->id, sizeof r->id, "resp_%s_%u", c->io.id + 5, ++c->next_id);
    r->insert_at = upto;
    /* the reply may have been started on the turn's early transcript */
    struct rtc_spec *sp = rtc_spec_take(c, r, &cr, &g);
    int rc = sp ? 0 : r->co ? engine_submit(m->engine, &rq, &r->engine_id, err, sizeof err) : -1;
    if (sp)
        r->engine_id = sp->engine_id;
    chatreq_free(&cr);
    apireq_gen_free(&g);
    if (rc < 0) {
        rt_error(&c->io, rc == OMNI_ERR_LIMIT ? "rate_limit_error" : "server_error", NULL, NULL, eid, err);
        goto out;
    }
    /* The speech stream once the engine took the request (its events wait
     * for our lock; a stream made before could not be freed under it). */
    if (r->audio) {
        struct tts_stream_params tp = tts_stream_default_params();
        tp.voice = r->voice;
        tp.speed = c->speed;
        tp.urgent = true;
        if ((r->ts = tts_stream_new(c->tts, &tp, rtc_on_tts, r, NULL, err, sizeof err))) {
            tts_stream_detach(r->ts);
        } else {
            snprintf(r->error, sizeof r->error, "speech synthesis: %.200s", err);
            rtc_resp_cancel(r, "client_cancelled");   /* ends as failed: error is set */
        }
    }
    atomic_fetch_add(&c->refs, 1);
    r->next = c->resps;
    c->resps = r;
    if (!r->oob)
        c->cur = r;
    cJSON *ev = rt_event("response.created");
    cJSON_AddItemToObject(ev, "response", rtc_resp_json(r, "in_progress"));
    rt_send(&c->io, ev);
    if (sp)
        rtc_spec_adopt(r, sp);
    for (int i = 0; i < n_input; i++)
        rtc_item_free(input[i]);
    free(input);
    cJSON_Delete(tools);
    cJSON_Delete(tool_choice);
    return 0;
fail:
    rtc_error(c, "invalid_value", param, eid, "%s", msg ? msg : "invalid response");
out:
    for (int i = 0; i < n_input; i++)
        rtc_item_free(input[i]);
    free(input);
    cJSON_Delete(tools);
    cJSON_Delete(tool_choice);
    chatout_free(r->co);
    media_resampler_free(r->rs);
    cJSON_Delete(r->metadata);
    free(r);
    return -1;
}

/* Starts what waits: a response for the turns committed under
 * create_response, or a response.create, once every item before them has
 * its transcript and no response writes into the conversation. Later turns
 * still being transcribed wait for the next response. {lock} */
static void rtc_try_start(struct rtc *c)
{
    if (c->cur || c->gone)
        return;
    int ready = 0;   /* leading items with their words */
    while (ready < c->n_items && !c->items[ready]->pending)
        ready++;
    bool turn = false;
    for (int i = 0; i < ready; i++)
        turn |= c->items[i]->wants_response;
    bool asked = c->want_response && (c->want_upto <= ready || ready == c->n_items);
    if (!turn && !asked)
        return;
    for (int i = 0; i < ready; i++)
        c->items[i]->wants_response = false;
    cJSON *p = NULL;
    char eid[64] = "";
    if (asked) {
        c->want_response = false;
        p = c->want_params;
        c->want_params = NULL;
        snprintf(eid, sizeof eid, "%s", c->want_eid);
    }
    rtc_start(c, p, eid[0] ? eid : NULL, ready);
    cJSON_Delete(p);
}

// ---- speech in: stt session events ------------------------------------------------------

static void rtc_audio_item_id(const struct rtc *c, int turn, char *buf, size_t cap)
{
    snprintf(buf, cap, "item_%s_%d", c->io.id + 5, turn);
}

static struct rtc_item *rtc_find(struct rtc *c, const char *id)
{
    int i = rtc_item_index(c, id);
    return i < 0 ? NULL : c->items[i];
}

/* Speech began: barge-in. The response in progress stops, and the reply
 * being played is cut where the user started talking over it. {lock} */
static void rtc_barge_in(struct rtc *c)
{
    if (!c->turn.interrupt_response)
        return;
    struct rtc_resp *r = c->cur;
    struct rtc_item *cut = r && r->audio && !r->cancel_reason ? r->msg : NULL;
    if (r)
        rtc_resp_cancel(r, "turn_detected");
    struct rtc_item *it = c->playing[0] ? rtc_find(c, c->playing) : NULL;
    c->playing[0] = 0;
    /* the client plays the audio as it arrives: this much has been heard
     * of the reply playing (a reply cut while it was still being made is
     * cut at most where its audio ended) */
    int64_t heard = (int64_t)((rtc_now_s() - c->play_t0) * 1000);
    if (it && !it->truncated && (it == cut || heard < it->audio_ms))
        rtc_truncate(c, it, heard < it->audio_ms ? heard : it->audio_ms);
    if (cut && cut != it && !cut->truncated)
        rtc_truncate(c, cut, 0);   /* nothing of it was heard yet */
}

/* A user audio item's transcript (FINAL) or its failure (ERROR): the item
 * gets its words and a waiting response may start. {lock} */
static void rtc_transcribed(struct rtc *c, const char *id, const struct stt_event *ev)
{
    struct rtc_item *it = rtc_find(c, id);
    if (ev->type == STT_EV_ERROR) {
        rt_error(&c->io, "server_error", NULL, NULL, NULL, ev->text ? ev->text : "transcription failed");
        if (it && it->pending) {
            it->pending = false;   /* the turn stays, without words */
            rtc_item_done(c, it);
            rtc_try_start(c);
        }
        return;
    }
    const char *text = ev->text ? ev->text : "";
    while (*text == ' ')   /* Whisper's leading space */
        text++;
    rt_send_stt(&c->io, ev, id, NULL, text);
    if (it && it->pending) {
        free(it->text);
        it->text = strdup(text);
        it->pending = false;
        rtc_item_done(c, it);
    }
    rtc_try_start(c);
}

static void rtc_on_stt(void *user, const struct stt_event *ev)
{
    struct rtc *c = user;
    char id[96];
    rtc_audio_item_id(c, ev->item, id, sizeof id);
    pthread_mutex_lock(&c->lock);
    switch (ev->type) {
    case STT_EV_SPEECH_STARTED:
        rt_send_stt(&c->io, ev, id, NULL, NULL);
        rtc_spec_drop(c);
        rtc_barge_in(c);
        break;
    case STT_EV_EARLY:   /* the turn's likely transcript, or its withdrawal */
        if (ev->text)
            rtc_spec_start(c, ev->item, ev->text);
        else if (c->spec && c->spec->turn == ev->item)
            rtc_spec_drop(c);
        break;
    case STT_EV_SPEECH_STOPPED:
    case STT_EV_PARTIAL:
        rt_send_stt(&c->io, ev, id, NULL, NULL);
        break;
    case STT_EV_COMMITTED: {
        rt_send_stt(&c->io, ev, id, c->n_items > 0 ? c->items[c->n_items - 1]->id : NULL, NULL);
        struct rtc_item *it = rtc_item_new(c, RTC_MESSAGE, "user");
        if (!it)
            break;
        snprintf(it->id, sizeof it->id, "%s", id);
        it->audio = it->pending = true;
        if (rtc_item_insert(c, it, -1) < 0) {
            rtc_item_free(it);
            break;
        }
        it->wants_response = c->turn.server_vad && c->turn.create_response;
        break;
    }
    case STT_EV_FINAL:
    case STT_EV_ERROR:
        rtc_transcribed(c, id, ev);
        if (c->spec && c->spec->turn <= ev->item)
            rtc_spec_drop(c);   /* not adopted: the response did not start, or differs */
        break;
    }
    pthread_mutex_unlock(&c->lock);
}

/* The transcript of a created audio item (an stt worker). */
static void rtc_on_tr(void *user, const struct stt_event *ev)
{
    struct rtc_tr *tr = user;
    if (ev->type != STT_EV_FINAL && ev->type != STT_EV_ERROR)
        return;
    pthread_mutex_lock(&tr->c->lock);
    rtc_transcribed(tr->c, tr->item, ev);
    pthread_mutex_unlock(&tr->c->lock);
    atomic_store(&tr->done, true);
}

static void rtc_on_tr_free(void *user)
{
    struct rtc_tr *tr = user;
    rtc_unref(tr->c);
    free(tr);
}

/* Closes the transcriptions that are done (all: at the end). The message thread. */
static void rtc_tr_reap(struct rtc *c, bool all)
{
    for (struct rtc_tr **p = &c->trs; *p;) {
        struct rtc_tr *tr = *p;
        if (!all && !atomic_load(&tr->done)) {
            p = &tr->next;
            continue;
        }
        *p = tr->next;
        stt_session_close(tr->ss);   /* on_free frees tr */
    }
}

static void rtc_on_session_free(void *user) { rtc_unref(user); }

// ---- session -------------------------------------------------------------------------

static const char *rtc_fmt_beta(enum rtc_fmt f)
{
    return f == RTC_ULAW ? "g711_ulaw" : f == RTC_ALAW ? "g711_alaw" : "pcm16";
}

static cJSON *rtc_fmt_ga(enum rtc_fmt f, int rate)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "type", f == RTC_ULAW ? "audio/pcmu" : f == RTC_ALAW ? "audio/pcma" : "audio/pcm");
    if (f == RTC_PCM16)
        cJSON_AddNumberToObject(o, "rate", rate);
    return o;
}

static cJSON *rtc_transcription_json(const struct rtc *c)
{
    if (!c->stt)
        return cJSON_CreateNull();
    cJSON *t = cJSON_CreateObject();
    cJSON_AddStringToObject(t, "model", c->tr_model ? c->tr_model : "whisper-1");
    if (c->tr_language)
        cJSON_AddStringToObject(t, "language", c->tr_language);
    else
        cJSON_AddNullToObject(t, "language");
    return t;
}

static cJSON *rtc_tools_json(const struct rtc *c)
{
    /* back to the Realtime shape */
    cJSON *a = cJSON_CreateArray();
    const cJSON *t;
    cJSON_ArrayForEach(t, c->tools) {
        const cJSON *f = cJSON_GetObjectItemCaseSensitive(t, "function");
        cJSON *x = cJSON_Duplicate(f, true);
        cJSON_AddStringToObject(x, "type", "function");
        cJSON_AddItemToArray(a, x);
    }
    return a;
}

static cJSON *rtc_tool_choice_json(const struct rtc *c)
{
    if (!c->tool_choice)
        return cJSON_CreateString("auto");
    if (cJSON_IsString(c->tool_choice))
        return cJSON_Duplicate(c->tool_choice, true);
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "type", "function");
    const cJSON *n = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(c->tool_choice, "function"), "name");
    cJSON_AddStringToObject(o, "name", cJSON_IsString(n) ? n->valuestring : "");
    return o;
}

static void rtc_send_session(struct rtc *c, const char *type)
{
    cJSON *ev = rt_event(type);
    cJSON *s = cJSON_AddObjectToObject(ev, "session");
    cJSON_AddStringToObject(s, "id", c->io.id);
    cJSON_AddStringToObject(s, "object", "realtime.session");
    cJSON_AddStringToObject(s, "model", c->m->name);
    cJSON_AddStringToObject(s, "instructions", c->instructions ? c->instructions : "");
    cJSON *mods;
    cJSON *turn = rt_turn_json(&c->turn, true);
    if (!c->beta) {
        cJSON_AddStringToObject(s, "type", "realtime");
        mods = cJSON_AddArrayToObject(s, "output_modalities");
        cJSON_AddItemToArray(mods, cJSON_CreateString(c->out_audio ? "audio" : "text"));
        cJSON *audio = cJSON_AddObjectToObject(s, "audio");
        cJSON *in = cJSON_AddObjectToObject(audio, "input");
        cJSON_AddItemToObject(in, "format", rtc_fmt_ga(c->in_fmt, c->sp.input_rate_hz));
        cJSON_AddItemToObject(in, "transcription", rtc_transcription_json(c));
        cJSON_AddNullToObject(in, "noise_reduction");
        cJSON_AddItemToObject(in, "turn_detection", turn);
        cJSON *out = cJSON_AddObjectToObject(audio, "output");
        cJSON_AddItemToObject(out, "format", rtc_fmt_ga(c->out_fmt, 24000));
        cJSON_AddStringToObject(out, "voice", c->voice);
        cJSON_AddNumberToObject(out, "speed", c->speed);
    } else {
        mods = cJSON_AddArrayToObject(s, "modalities");
        cJSON_AddItemToArray(mods, cJSON_CreateString("text"));
        if (c->out_audio)
            cJSON_AddItemToArray(mods, cJSON_CreateString("audio"));
        cJSON_AddStringToObject(s, "voice", c->voice);
        cJSON_AddNumberToObject(s, "speed", c->speed);
        cJSON_AddStringToObject(s, "input_audio_format", rtc_fmt_beta(c->in_fmt));
        cJSON_AddStringToObject(s, "output_audio_format", rtc_fmt_beta(c->out_fmt));
        cJSON_AddItemToObject(s, "input_audio_transcription", rtc_transcription_json(c));
        cJSON_AddItemToObject(s, "turn_detection", turn);
        cJSON_AddNumberToObject(s, "temperature", c->temperature);
    }
    cJSON_AddItemToObject(s, "tools", rtc_tools_json(c));
    cJSON_AddItemToObject(s, "tool_choice", rtc_tool_choice_json(c));
    const char *mt = c->beta ? "max_response_output_tokens" : "max_output_tokens";
    if (c->max_output_tokens < 0)
        cJSON_AddStringToObject(s, mt, "inf");
    else
        cJSON_AddNumberToObject(s, mt, c->max_output_tokens);
    rt_send(&c->io, ev);
}

/* "pcm16" / "g711_ulaw" / "g711_alaw" or {type: "audio/pcm", rate} /
 * {type: "audio/pcmu"} / {type: "audio/pcma"}. -1 when unknown. */
static int rtc_parse_fmt(const cJSON *f, int *rate)
{
    const char *t = cJSON_IsString(f) ? f->valuestring : NULL;
    if (cJSON_IsObject(f)) {
        const cJSON *ty = cJSON_GetObjectItemCaseSensitive(f, "type");
        const cJSON *r = cJSON_GetObjectItemCaseSensitive(f, "rate");
        t = cJSON_IsString(ty) ? ty->valuestring : "";
        if (r) {
            if (!cJSON_IsNumber(r) || r->valuedouble < 8000 || r->valuedouble > 96000)
                return -1;
            *rate = (int)r->valuedouble;
        }
    }
    if (!t)
        return -1;
    if (!strcmp(t, "pcm16") || !strcmp(t, "audio/pcm"))
        return RTC_PCM16;
    if (!strcmp(t, "g711_ulaw") || !strcmp(t, "audio/pcmu"))
        return RTC_ULAW;
    if (!strcmp(t, "g711_alaw") || !strcmp(t, "audio/pcma"))
        return RTC_ALAW;
    return -1;
}

/* A beta-shaped session object: no type, flat fields. */
static bool rtc_beta_shaped(const cJSON *s)
{
    static const char *const keys[] = { "modalities", "voice", "input_audio_format",
                                        "output_audio_format", "turn_detection",
                                        "input_audio_transcription", "temperature",
                                        "max_response_output_tokens" };
    if (cJSON_HasObjectItem(s, "type") || cJSON_HasObjectItem(s, "audio"))
        return false;
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
        if (cJSON_HasObjectItem(s, keys[i]))
            return true;
    return false;
}

/* session.update, GA or beta shape. The message thread; takes the lock
 * itself (the stt session is updated outside it). */
static void rtc_update(struct rtc *c, const cJSON *msg, const char *eid)
{
    const cJSON *s = cJSON_GetObjectItemCaseSensitive(msg, "session");
    if (!cJSON_IsObject(s)) {
        rtc_error(c, "invalid_value", "session", eid, "'session' must be an object");
        return;
    }
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(s, "type");
    if (type && (!cJSON_IsString(type) || strcmp(type->valuestring, "realtime"))) {
        rtc_error(c, "invalid_value", "session.type", eid,
                  "this connection is a conversation (session.type \"realtime\"); "
                  "open /v1/realtime?intent=transcription for transcription sessions");
        return;
    }
    pthread_mutex_lock(&c->lock);
    if (!c->updated) {
        c->updated = true;
        if (rtc_beta_shaped(s))
            c->beta = true;
    }
    /* where each field lives in either shape */
    const cJSON *audio = cJSON_GetObjectItemCaseSensitive(s, "audio");
    const cJSON *in = cJSON_GetObjectItemCaseSensitive(audio, "input");
    const cJSON *out = cJSON_GetObjectItemCaseSensitive(audio, "output");
    const cJSON *in_fmt = in ? cJSON_GetObjectItemCaseSensitive(in, "format")
                             : cJSON_GetObjectItemCaseSensitive(s, "input_audio_format");
    const cJSON *out_fmt = out ? cJSON_GetObjectItemCaseSensitive(out, "format")
                               : cJSON_GetObjectItemCaseSensitive(s, "output_audio_format");
    bool turn_present = in ? cJSON_HasObjectItem(in, "turn_detection")
                           : cJSON_HasObjectItem(s, "turn_detection");
    const cJSON *turn = in ? cJSON_GetObjectItemCaseSensitive(in, "turn_detection")
                           : cJSON_GetObjectItemCaseSensitive(s, "turn_detection");
    const cJSON *tr = in ? cJSON_GetObjectItemCaseSensitive(in, "transcription")
                         : cJSON_GetObjectItemCaseSensitive(s, "input_audio_transcription");
    const cJSON *voice = out && cJSON_HasObjectItem(out, "voice") ? cJSON_GetObjectItemCaseSensitive(out, "voice")
                                                                  : cJSON_GetObjectItemCaseSensitive(s, "voice");
    const cJSON *speed = out && cJSON_HasObjectItem(out, "speed") ? cJSON_GetObjectItemCaseSensitive(out, "speed")
                                                                  : cJSON_GetObjectItemCaseSensitive(s, "speed");
    const cJSON *mods = cJSON_HasObjectItem(s, "output_modalities")
                            ? cJSON_GetObjectItemCaseSensitive(s, "output_modalities")
                            : cJSON_GetObjectItemCaseSensitive(s, "modalities");
    const cJSON *instr = cJSON_GetObjectItemCaseSensitive(s, "instructions");
    const cJSON *tools = cJSON_GetObjectItemCaseSensitive(s, "tools");
    const cJSON *tc = cJSON_GetObjectItemCaseSensitive(s, "tool_choice");
    const cJSON *mt = cJSON_HasObjectItem(s, "max_output_tokens")
                          ? cJSON_GetObjectItemCaseSensitive(s, "max_output_tokens")
                          : cJSON_GetObjectItemCaseSensitive(s, "max_response_output_tokens");
    const cJSON *temp = cJSON_GetObjectItemCaseSensitive(s, "temperature");

    const char *param = NULL, *err = NULL;
    char buf[256];
    int rate = c->sp.input_rate_hz, ofmt = c->out_fmt, ifmt = c->in_fmt, orate = 24000;
    bool out_audio = c->out_audio;
    struct rt_turn t = c->turn;
    cJSON *ntools = NULL, *ntc = NULL;
    struct tts_voice_info vi;
    if (in_fmt && (ifmt = rtc_parse_fmt(in_fmt, &rate)) < 0)
        param = "audio.input.format", err = "input format must be audio/pcm (pcm16), audio/pcmu (g711_ulaw) or audio/pcma (g711_alaw); rate 8000..96000";
    else if (out_fmt && ((ofmt = rtc_parse_fmt(out_fmt, &orate)) < 0 || (ofmt == RTC_PCM16 && orate != 24000)))
        param = "audio.output.format", err = "output format must be audio/pcm at 24000 Hz (pcm16), audio/pcmu (g711_ulaw) or audio/pcma (g711_alaw)";
    else if (turn_present && (err = rt_turn_parse(turn, &t, &param)))
        ;
    else if (t.server_vad && (!c->stt || !stt_vad(c->stt)))
        param = "turn_detection", err = "server VAD needs a VAD model (serve --vad-model); use turn_detection null";
    else if (voice && !cJSON_IsNull(voice) && (!cJSON_IsString(voice) || !c->tts ||
                                               tts_voice_find(c->tts, voice->valuestring, &vi, buf, sizeof buf) < 0))
        param = "voice", err = cJSON_IsString(voice) && c->tts ? buf : "'voice' must be a voice name";
    else if (speed && (!cJSON_IsNumber(speed) || speed->valuedouble < 0.25 || speed->valuedouble > 4))
        param = "speed", err = "'speed' must be a number in 0.25..4";
    else if (instr && !cJSON_IsString(instr) && !cJSON_IsNull(instr))
        param = "instructions", err = "'instructions' must be a string";
    else if (instr && cJSON_IsString(instr) && strlen(instr->valuestring) > rtc_limits.max_item_bytes)
        param = "instructions", err = "'instructions' is longer than the item limit (--realtime-max-item-bytes)";
    else if (tools && !cJSON_IsNull(tools) && !(ntools = rtc_tools_chat(tools, &err)))
        param = "tools";
    else if (tc && !cJSON_IsNull(tc) && !(ntc = rtc_tool_choice_chat(tc, &err)))
        param = "tool_choice";
    else if (mt && !(cJSON_IsString(mt) && !strcmp(mt->valuestring, "inf")) &&
             !(cJSON_IsNumber(mt) && mt->valuedouble >= 1 && mt->valuedouble <= 4096))
        param = "max_output_tokens", err = "'max_output_tokens' must be 1..4096 or \"inf\"";
    else if (temp && (!cJSON_IsNumber(temp) || temp->valuedouble < 0 || temp->valuedouble > 2))
        param = "temperature", err = "'temperature' must be a number in 0..2";
    else if (tr && !cJSON_IsNull(tr) && !cJSON_IsObject(tr))
        param = "audio.input.transcription", err = "'transcription' must be an object or null";
    if (!err && mods && !cJSON_IsNull(mods)) {
        bool ok = cJSON_IsArray(mods) && cJSON_GetArraySize(mods) > 0, audio_on = false;
        const cJSON *x;
        cJSON_ArrayForEach(x, mods) {
            if (!cJSON_IsString(x) || (strcmp(x->valuestring, "text") && strcmp(x->valuestring, "audio")))
                ok = false;
            else
                audio_on |= !strcmp(x->valuestring, "audio");
        }
        if (!ok)
            param = "output_modalities", err = "'output_modalities' must be [\"text\"] or [\"audio\"]";
        else if (audio_on && !c->tts)
            param = "output_modalities", err = "this server has no speech synthesis (--no-tts): only [\"text\"]";
        else
            out_audio = audio_on;
    }
    const cJSON *lang = cJSON_GetObjectItemCaseSensitive(tr, "language");
    if (!err && lang && !cJSON_IsNull(lang) && (!cJSON_IsString(lang) || (*lang->valuestring && whisper_lang_id(lang->valuestring) < 0)))
        param = "audio.input.transcription.language", err = "unknown language";
    if (err) {
        pthread_mutex_unlock(&c->lock);
        cJSON_Delete(ntools);
        cJSON_Delete(ntc);
        rtc_error(c, "invalid_value", param, eid, "%s", err);
        return;
    }
    /* the speech session first: it may still refuse */
    struct stt_session_params sp = c->sp;
    if (ifmt != RTC_PCM16)
        rate = 8000;
    sp.input_rate_hz = rate;
    sp.server_vad = t.server_vad;
    sp.vad.threshold = t.threshold;
    sp.vad.min_silence_duration_ms = t.silence_ms;
    sp.vad.speech_pad_ms = t.prefix_ms < 100 ? t.prefix_ms : 100;
    const char *lang_s = cJSON_IsString(lang) && *lang->valuestring ? lang->valuestring
                         : lang ? NULL : c->tr_language;
    sp.language = lang_s;
    sp.prompt = NULL;
    pthread_mutex_unlock(&c->lock);
    if (c->ss && stt_session_update(c->ss, &sp, buf, sizeof buf) < 0) {
        cJSON_Delete(ntools);
        cJSON_Delete(ntc);
        rtc_error(c, "invalid_value", "turn_detection", eid, "%s", buf);
        return;
    }
    pthread_mutex_lock(&c->lock);
    char *nlang = lang_s ? strdup(lang_s) : NULL;
    free(c->tr_language);
    c->tr_language = nlang;
    sp.language = NULL;
    c->sp = sp;
    c->in_fmt = (enum rtc_fmt)ifmt;
    c->out_fmt = (enum rtc_fmt)ofmt;
    c->turn = t;
    c->out_audio = out_audio;
    if (voice && cJSON_IsString(voice))
        snprintf(c->voice, sizeof c->voice, "%s", vi.id);
    if (speed)
        c->speed = (float)speed->valuedouble;
    if (instr) {
        free(c->instructions);
        c->instructions = cJSON_IsString(instr) ? strdup(instr->valuestring) : NULL;
    }
    if (tools) {
        cJSON_Delete(c->tools);
        c->tools = ntools;
    }
    if (tc) {
        cJSON_Delete(c->tool_choice);
        c->tool_choice = ntc;
    }
    const cJSON *trm = cJSON_GetObjectItemCaseSensitive(tr, "model");
    if (cJSON_IsString(trm)) {
        free(c->tr_model);
        c->tr_model = strdup(trm->valuestring);
    }
    if (mt)
        c->max_output_tokens = cJSON_IsNumber(mt) ? (int)mt->valuedouble : -1;
    if (temp)
        c->temperature = (float)temp->valuedouble;
    rtc_send_session(c, "session.updated");
    pthread_mutex_unlock(&c->lock);
}

// ---- client items ------------------------------------------------------------------

/* One item object of conversation.item.create / response.input. NULL + msg. */
static struct rtc_item *rtc_parse_item(struct rtc *c, const cJSON *o, const char **audio_b64,
                                       const char **param, char *msg, size_t msglen)
{
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(o, "type");
    const cJSON *id = cJSON_GetObjectItemCaseSensitive(o, "id");
    if (!cJSON_IsObject(o) || !cJSON_IsString(type)) {
        *param = "item.type";
        snprintf(msg, msglen, "an item must be an object with a 'type': message, function_call or function_call_output");
        return NULL;
    }
    if (id && (!cJSON_IsString(id) || strlen(id->valuestring) >= 64 || !*id->valuestring)) {
        *param = "item.id";
        snprintf(msg, msglen, "'item.id' must be a string of 1..63 characters");
        return NULL;
    }
    struct rtc_item *it = NULL;
    const char *t = type->valuestring;
    if (!strcmp(t, "message")) {
        const cJSON *role = cJSON_GetObjectItemCaseSensitive(o, "role");
        const cJSON *content = cJSON_GetObjectItemCaseSensitive(o, "content");
        if (!cJSON_IsString(role) || (strcmp(role->valuestring, "user") && strcmp(role->valuestring, "assistant") &&
                                      strcmp(role->valuestring, "system"))) {
            *param = "item.role";
            snprintf(msg, msglen, "'item.role' must be user, assistant or system");
            return NULL;
        }
        if (!cJSON_IsArray(content) || cJSON_GetArraySize(content) == 0) {
            *param = "item.content";
            snprintf(msg, msglen, "'item.content' must be a non-empty array of content parts");
            return NULL;
        }
        it = rtc_item_new(c, RTC_MESSAGE, role->valuestring);
        if (!it)
            goto nomem;
        const cJSON *p;
        cJSON_ArrayForEach(p, content) {
            const cJSON *pt = cJSON_GetObjectItemCaseSensitive(p, "type");
            const cJSON *text = cJSON_GetObjectItemCaseSensitive(p, "text");
            if (!cJSON_IsString(text))
                text = cJSON_GetObjectItemCaseSensitive(p, "transcript");
            if (!cJSON_IsString(pt)) {
                *param = "item.content.type";
                snprintf(msg, msglen, "each content part needs a 'type'");
                goto bad;
            }
            bool audio = !strcmp(pt->valuestring, "input_audio") || !strcmp(pt->valuestring, "audio") ||
                         !strcmp(pt->valuestring, "output_audio");
            bool textual = !strcmp(pt->valuestring, "input_text") || !strcmp(pt->valuestring, "text") ||
                           !strcmp(pt->valuestring, "output_text");
            if (!audio && !textual) {
                *param = "item.content.type";
                snprintf(msg, msglen, "unsupported content type '%.40s' (input_text, input_audio, output_text, output_audio)",
                         pt->valuestring);
                goto bad;
            }
            const cJSON *bytes = cJSON_GetObjectItemCaseSensitive(p, "audio");
            if (audio && !cJSON_IsString(text) && cJSON_IsString(bytes) && audio_b64 && !*audio_b64 &&
                !strcmp(it->role, "user") && c->stt) {
                *audio_b64 = bytes->valuestring;   /* transcribed: the transcript comes later */
                it->audio = it->pending = true;
                continue;
            }
            if (audio && !cJSON_IsString(text)) {
                *param = "item.content.transcript";
                snprintf(msg, msglen, "audio content needs a 'transcript' (or, in a user item of a "
                                      "conversation.item.create on a server with a speech model, one 'audio' part)");
                goto bad;
            }
            if (!cJSON_IsString(text)) {
                *param = "item.content.text";
                snprintf(msg, msglen, "text content needs a 'text' string");
                goto bad;
            }
            size_t n = strlen(text->valuestring);
            if (it->len + n + 1 > rtc_limits.max_item_bytes) {
                *param = "item.content";
                snprintf(msg, msglen, "the item's text is longer than %zu bytes (--realtime-max-item-bytes)",
                         rtc_limits.max_item_bytes);
                goto bad;
            }
            if (it->len)
                rtc_text_append(&it->text, &it->len, &it->cap, "\n", 1);
            rtc_text_append(&it->text, &it->len, &it->cap, text->valuestring, n);
            it->audio |= audio;
        }
    } else if (!strcmp(t, "function_call") || !strcmp(t, "function_call_output")) {
        bool out = !strcmp(t, "function_call_output");
        const cJSON *call = cJSON_GetObjectItemCaseSensitive(o, "call_id");
        const cJSON *name = cJSON_GetObjectItemCaseSensitive(o, "name");
        const cJSON *val = cJSON_GetObjectItemCaseSensitive(o, out ? "output" : "arguments");
        if (!cJSON_IsString(call)) {
            *param = "item.call_id";
            snprintf(msg, msglen, "'item.call_id' must be a string");
            return NULL;
        }
        if (!out && !cJSON_IsString(name)) {
            *param = "item.name";
            snprintf(msg, msglen, "'item.name' must be a string");
            return NULL;
        }
        if (!cJSON_IsString(val) || strlen(val->valuestring) > rtc_limits.max_item_bytes) {
            *param = out ? "item.output" : "item.arguments";
            snprintf(msg, msglen, "'%s' must be a string of at most %zu bytes", *param, rtc_limits.max_item_bytes);
            return NULL;
        }
        it = rtc_item_new(c, out ? RTC_CALL_OUTPUT : RTC_CALL, out ? "tool" : "assistant");
        if (!it)
            goto nomem;
        it->call_id = strdup(call->valuestring);
        it->name = out ? NULL : strdup(name->valuestring);
        it->args = strdup(val->valuestring);
    } else {
        *param = "item.type";
        snprintf(msg, msglen, "unsupported item type '%.40s' (message, function_call, function_call_output)", t);
        return NULL;
    }
    if (id)
        snprintf(it->id, sizeof it->id, "%s", id->valuestring);
    return it;
bad:
    rtc_item_free(it);
    return NULL;
nomem:
    snprintf(msg, msglen, "out of memory");
    return NULL;
}

static int rtc_parse_items(struct rtc *c, const cJSON *arr, struct rtc_item ***out, int *n,
                           const char **param, char *msg, size_t msglen)
{
    if (!cJSON_IsArray(arr)) {
        *param = "response.input";
        snprintf(msg, msglen, "'input' must be an array of items");
        return -1;
    }
    int cnt = cJSON_GetArraySize(arr);
    if (cnt > rtc_limits.max_items) {
        *param = "response.input";
        snprintf(msg, msglen, "'input' has %d items; the limit is %d", cnt, rtc_limits.max_items);
        return -1;
    }
    struct rtc_item **v = calloc((size_t)cnt + 1, sizeof *v);
    if (!v) {
        snprintf(msg, msglen, "out of memory");
        return -1;
    }
    int k = 0;
    const cJSON *o;
    cJSON_ArrayForEach(o, arr) {
        /* {type: "item_reference", id}: an item of the conversation */
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(o, "type");
        const cJSON *id = cJSON_GetObjectItemCaseSensitive(o, "id");
        struct rtc_item *it = NULL;
        if (cJSON_IsString(type) && !strcmp(type->valuestring, "item_reference") && cJSON_IsString(id)) {
            struct rtc_item *src = rtc_find(c, id->valuestring);
            if (!src) {
                *param = "response.input.id";
                snprintf(msg, msglen, "no item '%.64s' in the conversation", id->valuestring);
            } else if ((it = calloc(1, sizeof *it))) {
                *it = *src;
                it->text = src->text ? strdup(src->text) : NULL;
                it->call_id = src->call_id ? strdup(src->call_id) : NULL;
                it->name = src->name ? strdup(src->name) : NULL;
                it->args = src->args ? strdup(src->args) : NULL;
                it->spoken = NULL;
                it->spans = NULL;
                it->n_spans = it->cap_spans = 0;
            }
        } else {
            it = rtc_parse_item(c, o, NULL, param, msg, msglen);
        }
        if (!it) {
            for (int i = 0; i < k; i++)
                rtc_item_free(v[i]);
            free(v);
            return -1;
        }
        v[k++] = it;
    }
    *out = v;
    *n = k;
    return 0;
}

/* {lock}. *audio_b64: an audio part to transcribe into the new item, whose
 * id goes to item_id (the caller does it after unlocking). */
static void rtc_item_create(struct rtc *c, const cJSON *msg, const char *eid, const char **audio_b64,
                            char *item_id, size_t cap)
{
    const char *param = NULL;
    char buf[384];
    struct rtc_item *it = rtc_parse_item(c, cJSON_GetObjectItemCaseSensitive(msg, "item"), audio_b64,
                                         &param, buf, sizeof buf);
    if (!it) {
        *audio_b64 = NULL;
        rtc_error(c, "invalid_value", param, eid, "%s", buf);
        return;
    }
    snprintf(item_id, cap, "%s", it->id);
    if (rtc_find(c, it->id)) {
        rtc_error(c, "item_id_exists", "item.id", eid, "an item '%s' already exists", it->id);
        rtc_item_free(it);
        *audio_b64 = NULL;
        return;
    }
    int at = -1;
    const cJSON *prev = cJSON_GetObjectItemCaseSensitive(msg, "previous_item_id");
    if (cJSON_IsString(prev)) {
        if (!strcmp(prev->valuestring, "root"))
            at = 0;
        else if ((at = rtc_item_index(c, prev->valuestring)) < 0) {
            rtc_error(c, "item_not_found", "previous_item_id", eid, "no item '%.64s'", prev->valuestring);
            rtc_item_free(it);
            *audio_b64 = NULL;
            return;
        } else {
            at++;
        }
    }
    if (rtc_item_insert(c, it, at) < 0) {
        rtc_error(c, "conversation_full", "item", eid, "the conversation is full of items in progress");
        rtc_item_free(it);
        *audio_b64 = NULL;
        return;
    }
    if (!it->pending)
        rtc_item_done(c, it);
}

static struct rtc_item *rtc_item_arg(struct rtc *c, const cJSON *msg, const char *eid)
{
    const cJSON *id = cJSON_GetObjectItemCaseSensitive(msg, "item_id");
    if (!cJSON_IsString(id)) {
        rtc_error(c, "invalid_value", "item_id", eid, "'item_id' must be a string");
        return NULL;
    }
    struct rtc_item *it = rtc_find(c, id->valuestring);
    if (!it)
        rtc_error(c, "item_not_found", "item_id", eid, "no item '%.64s' in the conversation", id->valuestring);
    return it;
}

static void rtc_item_truncate(struct rtc *c, const cJSON *msg, const char *eid)
{
    struct rtc_item *it = rtc_item_arg(c, msg, eid);
    if (!it)
        return;
    const cJSON *ci = cJSON_GetObjectItemCaseSensitive(msg, "content_index");
    const cJSON *ms = cJSON_GetObjectItemCaseSensitive(msg, "audio_end_ms");
    if (it->kind != RTC_MESSAGE || strcmp(it->role, "assistant") || !it->audio)
        rtc_error(c, "invalid_value", "item_id", eid, "only an assistant message with audio can be truncated");
    else if (ci && (!cJSON_IsNumber(ci) || ci->valuedouble != 0))
        rtc_error(c, "invalid_value", "content_index", eid, "'content_index' must be 0");
    else if (!cJSON_IsNumber(ms) || ms->valuedouble < 0)
        rtc_error(c, "invalid_value", "audio_end_ms", eid, "'audio_end_ms' must be a number >= 0");
    else if (ms->valuedouble > (double)it->audio_ms)
        rtc_error(c, "invalid_value", "audio_end_ms", eid,
                  "audio content of %lld ms is shorter than audio_end_ms %.0f", (long long)it->audio_ms,
                  ms->valuedouble);
    else {
        /* truncating the reply being made stops it too: nothing past the
         * cut will be heard */
        if (c->cur && c->cur->msg == it)
            rtc_resp_cancel(c->cur, "client_cancelled");
        if (!strcmp(c->playing, it->id))
            c->playing[0] = 0;
        rtc_truncate(c, it, (int64_t)ms->valuedouble);
    }
}

static void rtc_item_delete(struct rtc *c, const cJSON *msg, const char *eid)
{
    struct rtc_item *it = rtc_item_arg(c, msg, eid);
    if (!it)
        return;
    if (it->in_progress || it->pending) {
        rtc_error(c, "item_in_progress", "item_id", eid, "item '%s' is still being made", it->id);
        return;
    }
    rtc_item_remove(c, rtc_item_index(c, it->id));
}

// ---- client events -------------------------------------------------------------------

/* base64 audio in the session's input format as PCM16 (malloc'd; G.711 is
 * expanded). -1 after an error event. */
static int rtc_decode_audio(struct rtc *c, const char *b64, const char *eid, unsigned char **pcm,
                            size_t *bytes)
{
    size_t len = strlen(b64);
    unsigned char *raw = malloc(len / 4 * 3 + 3);
    long n = raw ? rt_base64_decode(b64, len, raw) : -1;
    pthread_mutex_lock(&c->lock);
    enum rtc_fmt f = c->in_fmt;
    pthread_mutex_unlock(&c->lock);
    if (n < 0) {
        rtc_error(c, "invalid_value", "audio", eid, raw ? "'audio' is not valid base64" : "out of memory");
        free(raw);
        return -1;
    }
    *pcm = raw;
    *bytes = (size_t)n;
    if (f == RTC_PCM16)
        return 0;
    int16_t *x = malloc((size_t)n * 2 + 1);
    if (!x) {
        free(raw);
        rtc_error(c, "server_error", NULL, eid, "out of memory");
        return -1;
    }
    for (long i = 0; i < n; i++)
        x[i] = f == RTC_ULAW ? media_g711_ulaw_to_s16(raw[i]) : media_g711_alaw_to_s16(raw[i]);
    free(raw);
    *pcm = (unsigned char *)x;
    *bytes = (size_t)n * 2;
    return 0;
}

static void rtc_append(struct rtc *c, const cJSON *msg, const char *eid)
{
    const cJSON *audio = cJSON_GetObjectItemCaseSensitive(msg, "audio");
    if (!c->ss) {
        rtc_error(c, "invalid_value", "audio", eid,
                  "this server has no speech model (serve --stt-model): send text items");
        return;
    }
    if (!cJSON_IsString(audio)) {
        rtc_error(c, "invalid_value", "audio", eid, "'audio' must be a base64 string of audio");
        return;
    }
    unsigned char *pcm;
    size_t bytes;
    if (rtc_decode_audio(c, audio->valuestring, eid, &pcm, &bytes) < 0)
        return;
    size_t max = (size_t)rtc_limits.max_buffered_audio_s * (size_t)c->sp.input_rate_hz * 2;
    char err[256];
    if (c->buffered_bytes + bytes > max) {
        rtc_error(c, "input_audio_buffer_full", "audio", eid,
                  "more than %d s of input audio without a commit (--realtime-max-audio-s)",
                  rtc_limits.max_buffered_audio_s);
    } else if (stt_session_push(c->ss, pcm, bytes, err, sizeof err) < 0) {
        rtc_error(c, "input_audio_buffer_append_failed", "audio", eid, "%s", err);
    } else {
        c->buffered_bytes += bytes;
    }
    free(pcm);
}

/* Transcribes the audio of a created user item on a session of its own. */
static void rtc_transcribe_item(struct rtc *c, const char *item, const char *b64, const char *eid)
{
    unsigned char *pcm = NULL;
    size_t bytes = 0;
    struct stt_event fail = { .type = STT_EV_ERROR, .text = "out of memory" };
    char err[256];
    struct rtc_tr *tr = calloc(1, sizeof *tr);
    if (rtc_decode_audio(c, b64, eid, &pcm, &bytes) < 0) {
        fail.text = "the item's audio could not be decoded";
    } else if (tr) {
        tr->c = c;
        snprintf(tr->item, sizeof tr->item, "%s", item);
        struct stt_session_params sp = c->sp;
        sp.server_vad = false;
        sp.on_event = rtc_on_tr;
        sp.on_free = rtc_on_tr_free;
        sp.user = tr;
        sp.language = c->tr_language;
        atomic_fetch_add(&c->refs, 1);
        if (!(tr->ss = stt_session_new(c->stt, &sp, err, sizeof err))) {
            atomic_fetch_sub(&c->refs, 1);
            fail.text = err;
        } else {
            tr->next = c->trs;
            c->trs = tr;
            tr = NULL;
            if (stt_session_push(c->trs->ss, pcm, bytes, err, sizeof err) < 0 ||
                stt_session_commit(c->trs->ss, err, sizeof err) < 0) {
                fail.text = err;
                atomic_store(&c->trs->done, true);
            } else {
                fail.text = NULL;
            }
        }
    }
    free(tr);
    free(pcm);
    if (fail.text) {
        pthread_mutex_lock(&c->lock);
        rtc_transcribed(c, item, &fail);
        pthread_mutex_unlock(&c->lock);
    }
}

static void rtc_response_create(struct rtc *c, const cJSON *msg, const char *eid)
{
    const cJSON *p = cJSON_GetObjectItemCaseSensitive(msg, "response");
    const cJSON *conv = cJSON_GetObjectItemCaseSensitive(p, "conversation");
    bool oob = cJSON_IsString(conv) && !strcmp(conv->valuestring, "none");
    pthread_mutex_lock(&c->lock);
    bool pending = false;
    for (int i = 0; i < c->n_items; i++)
        pending |= c->items[i]->pending;
    if (!oob && c->cur && !c->cur->cancel_reason) {
        rtc_error(c, "conversation_already_has_active_response", NULL, eid,
                  "Conversation already has an active response in progress: %s", c->cur->id);
    } else if (!oob && (pending || c->cur || c->want_response)) {
        /* a transcript (or the cancelled response) first: it starts then */
        cJSON_Delete(c->want_params);
        c->want_params = p ? cJSON_Duplicate(p, true) : NULL;
        snprintf(c->want_eid, sizeof c->want_eid, "%s", eid ? eid : "");
        c->want_response = true;
        c->want_upto = c->n_items;
        rtc_try_start(c);
    } else {
        rtc_start(c, p, eid, c->n_items);
    }
    pthread_mutex_unlock(&c->lock);
}

static void rtc_response_cancel(struct rtc *c, const cJSON *msg, const char *eid)
{
    const cJSON *id = cJSON_GetObjectItemCaseSensitive(msg, "response_id");
    pthread_mutex_lock(&c->lock);
    struct rtc_resp *r = c->cur;
    if (cJSON_IsString(id))
        for (r = c->resps; r && strcmp(r->id, id->valuestring); r = r->next)
            ;
    if (!r || r->cancel_reason)
        rtc_error(c, "response_cancel_not_active", cJSON_IsString(id) ? "response_id" : NULL, eid,
                  "Cancellation failed: no active response found");
    else
        rtc_resp_cancel(r, "client_cancelled");
    if (!r)
        c->want_response = false;
    pthread_mutex_unlock(&c->lock);
}

static void rtc_handle(struct rtc *c, const char *data, size_t len, bool binary)
{
    const char *t, *eid;
    cJSON *msg = rt_parse(&c->io, data, len, binary, &t, &eid);
    if (!msg)
        return;
    char err[256];
    rtc_tr_reap(c, false);
    if (!strcmp(t, "input_audio_buffer.append")) {
        rtc_append(c, msg, eid);
    } else if (!strcmp(t, "input_audio_buffer.commit")) {
        if (!c->ss)
            rtc_error(c, "invalid_value", NULL, eid, "this server has no speech model (serve --stt-model)");
        else if (stt_session_commit(c->ss, err, sizeof err) < 0)
            rtc_error(c, "input_audio_buffer_commit_empty", NULL, eid, "%s", err);
        else
            c->buffered_bytes = 0;
    } else if (!strcmp(t, "input_audio_buffer.clear")) {
        if (c->ss)
            stt_session_clear(c->ss);
        c->buffered_bytes = 0;
        rt_send(&c->io, rt_event("input_audio_buffer.cleared"));
    } else if (!strcmp(t, "session.update")) {
        rtc_update(c, msg, eid);
    } else {
        const char *audio = NULL;
        char item[96] = "";
        pthread_mutex_lock(&c->lock);
        if (!strcmp(t, "conversation.item.create"))
            rtc_item_create(c, msg, eid, &audio, item, sizeof item);
        else if (!strcmp(t, "conversation.item.truncate"))
            rtc_item_truncate(c, msg, eid);
        else if (!strcmp(t, "conversation.item.delete"))
            rtc_item_delete(c, msg, eid);
        else if (!strcmp(t, "conversation.item.retrieve")) {
            struct rtc_item *it = rtc_item_arg(c, msg, eid);
            if (it)
                rtc_send_item_event(c, "conversation.item.retrieved", it, false);
        } else if (strcmp(t, "response.create") && strcmp(t, "response.cancel")) {
            char m[160];
            snprintf(m, sizeof m, "unknown or unsupported event type '%.60s'", t);
            rt_error(&c->io, "invalid_request_error", "invalid_event", "type", eid, m);
        }
        pthread_mutex_unlock(&c->lock);
        if (audio)
            rtc_transcribe_item(c, item, audio, eid);
        if (!strcmp(t, "response.create"))
            rtc_response_create(c, msg, eid);
        else if (!strcmp(t, "response.cancel"))
            rtc_response_cancel(c, msg, eid);
    }
    cJSON_Delete(msg);
}

// ---- the connection ---------------------------------------------------------------

/* The socket side ends (once, after on_close and the message being handled
 * then): responses stop, the session closes. */
static void rtc_finish(struct rtc *c)
{
    OMNI_INFO("realtime: conversation %s closed", c->io.id);
    pthread_mutex_lock(&c->lock);
    c->gone = true;
    c->want_response = false;
    rtc_spec_drop(c);
    for (struct rtc_resp *r = c->resps; r; r = r->next)
        rtc_resp_cancel(r, "client_cancelled");
    pthread_mutex_unlock(&c->lock);
    rtc_tr_reap(c, true);
    stt_session_close(c->ss);
    c->ss = NULL;
    rtc_unref(c);
}

static void rtc_on_message(void *user, struct ws_sock *s, const char *data, size_t len,
                          bool binary)
{
    (void)s;
    struct rtc *c = user;
    if (!rt_gate_enter(&c->gate, &c->lock))
        return;   /* queued before the close: nobody will read the answer */
    rtc_handle(c, data, len, binary);
    if (rt_gate_leave(&c->gate, &c->lock))
        rtc_finish(c);   /* on_close came while we were busy and left the session to us */
}

/* A ws worker, after the last message (or the service thread). */
static void rtc_on_close(void *user)
{
    struct rtc *c = user;
    if (rt_gate_close(&c->gate, &c->lock))
        rtc_finish(c);
}

static const struct ws_sock_handler rtc_handler = {
    .on_message = rtc_on_message,
    .on_close = rtc_on_close,
    .offload = true,
};

void realtime_conv_upgrade(struct api *a, struct ws_req *r, const struct api_model *m)
{
    if (!api_key_ok(a, r)) {
        OMNI_INFO("realtime: %s refused: missing or invalid API key", ws_req_id(r));
        return;
    }
    const char *want = ws_req_query(r, "model");
    struct api_error e;
    if (want && api_check_model(a, want, &e) < 0) {
        OMNI_INFO("realtime: %s refused: %s", ws_req_id(r), e.message);
        return;
    }
    struct rtc *c = calloc(1, sizeof *c);
    if (!c)
        return;
    c->api = a;
    c->m = m;
    c->tts = api_tts(a);
    c->stt = api_stt(a);
    atomic_init(&c->refs, 1);
    pthread_mutex_init(&c->lock, NULL);
    snprintf(c->io.id, sizeof c->io.id, "sess_%s", ws_req_id(r));
    const char *beta = ws_req_header(r, "openai-beta");
    c->beta = beta && strstr(beta, "realtime=v1");
    c->out_audio = c->tts != NULL;
    snprintf(c->voice, sizeof c->voice, "alloy");
    c->speed = 1.0f;
    c->max_output_tokens = -1;
    c->temperature = 0.8f;
    c->sp = stt_session_default_params();
    c->sp.input_rate_hz = 24000;
    c->sp.server_vad = c->stt && stt_vad(c->stt);
    /* No merge gap: silence_duration_ms alone ends the turn, as OpenAI
     * documents it (whisper.cpp's 200 ms gap would add up to 200 ms before
     * every reply). Transcription sessions keep it (realtime.c). */
    c->sp.vad.merge_gap_ms = 0;
    c->sp.early_events = true;   /* replies may start on early transcripts */
    c->sp.on_event = rtc_on_stt;
    c->sp.on_free = rtc_on_session_free;
    c->sp.user = c;
    c->turn = (struct rt_turn){ .server_vad = c->sp.server_vad, .threshold = c->sp.vad.threshold,
                                .silence_ms = c->sp.vad.min_silence_duration_ms,
                                .prefix_ms = c->sp.vad.speech_pad_ms, .create_response = true,
                                .interrupt_response = true };
    char err[256];
    if (c->stt) {
        if (!(c->ss = stt_session_new(c->stt, &c->sp, err, sizeof err))) {
            OMNI_WARN("realtime: %s: %s", ws_req_id(r), err);
            pthread_mutex_destroy(&c->lock);
            free(c);
            return;
        }
        atomic_fetch_add(&c->refs, 1);
    }
    if (!(c->io.sock = ws_req_accept_websocket(r, &rtc_handler, c))) {
        if (c->ss)
            stt_session_close(c->ss);
        rtc_unref(c);
        return;
    }
    OMNI_INFO("realtime: conversation %s opened (%s%s%s)", c->io.id, c->beta ? "beta" : "GA",
              c->stt ? ", speech in" : "", c->tts ? ", speech out" : "");
    rtc_send_session(c, "session.created");
}
