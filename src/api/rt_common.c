/* rt_common.c - server events, errors, base64 and turn_detection for the
 * Realtime protocols (realtime.c, realtime_conv.c). */
#include "src/api/rt_common.h"

#include "src/stt/stt_session.h"
#include "ws/ws_socket.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

cJSON *rt_event(const char *type)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "type", type);
    return o;
}

void rt_send(struct rt_io *io, cJSON *ev)
{
    char eid[96];
    snprintf(eid, sizeof eid, "event_%s_%llu", io->id,
             (unsigned long long)atomic_fetch_add(&io->next_event, 1));
    cJSON_AddStringToObject(ev, "event_id", eid);
    char *s = cJSON_PrintUnformatted(ev);
    cJSON_Delete(ev);
    if (s) {
        ws_sock_send(io->sock, s, strlen(s));
        free(s);
    }
}

static void rt_add_str_or_null(cJSON *o, const char *key, const char *v)
{
    if (v)
        cJSON_AddStringToObject(o, key, v);
    else
        cJSON_AddNullToObject(o, key);
}

void rt_error(struct rt_io *io, const char *type, const char *code, const char *param,
              const char *client_event_id, const char *msg)
{
    cJSON *ev = rt_event("error");
    cJSON *e = cJSON_AddObjectToObject(ev, "error");
    cJSON_AddStringToObject(e, "type", type);
    rt_add_str_or_null(e, "code", code);
    cJSON_AddStringToObject(e, "message", msg);
    rt_add_str_or_null(e, "param", param);
    rt_add_str_or_null(e, "event_id", client_event_id);
    rt_send(io, ev);
}

cJSON *rt_parse(struct rt_io *io, const char *data, size_t len, bool binary, const char **type,
                const char **eid)
{
    if (binary) {
        rt_error(io, "invalid_request_error", "invalid_event", NULL, NULL,
                 "binary messages are not part of the protocol: send JSON events as text");
        return NULL;
    }
    cJSON *msg = cJSON_ParseWithLength(data, len);
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(msg, "type");
    if (!cJSON_IsObject(msg) || !cJSON_IsString(t)) {
        rt_error(io, "invalid_request_error", "invalid_json", NULL, NULL,
                 "each message must be a JSON object with a string 'type'");
        cJSON_Delete(msg);
        return NULL;
    }
    const cJSON *e = cJSON_GetObjectItemCaseSensitive(msg, "event_id");
    *eid = cJSON_IsString(e) ? e->valuestring : NULL;
    *type = t->valuestring;
    return msg;
}

void rt_send_stt(struct rt_io *io, const struct stt_event *ev, const char *item,
                 const char *previous_item, const char *text)
{
    cJSON *o = NULL;
    switch (ev->type) {
    case STT_EV_SPEECH_STARTED:
        o = rt_event("input_audio_buffer.speech_started");
        cJSON_AddNumberToObject(o, "audio_start_ms", (double)ev->audio_ms);
        break;
    case STT_EV_SPEECH_STOPPED:
        o = rt_event("input_audio_buffer.speech_stopped");
        cJSON_AddNumberToObject(o, "audio_end_ms", (double)ev->audio_ms);
        break;
    case STT_EV_COMMITTED:
        o = rt_event("input_audio_buffer.committed");
        rt_add_str_or_null(o, "previous_item_id", previous_item);
        break;
    case STT_EV_PARTIAL:
        o = rt_event("conversation.item.input_audio_transcription.delta");
        break;
    case STT_EV_FINAL:
        o = rt_event("conversation.item.input_audio_transcription.completed");
        break;
    case STT_EV_ERROR:
    case STT_EV_EARLY:   /* internal: the voice agent's speculation, no protocol event */
        return;
    }
    cJSON_AddStringToObject(o, "item_id", item);
    if (ev->type == STT_EV_PARTIAL) {
        cJSON_AddNumberToObject(o, "content_index", 0);
        cJSON_AddStringToObject(o, "delta", ev->delta ? ev->delta : "");
        /* omniserve extension: the whole current hypothesis, for displays
         * that redraw the line (deltas only carry words that are stable). */
        cJSON_AddStringToObject(o, "partial", ev->text ? ev->text : "");
    } else if (ev->type == STT_EV_FINAL) {
        cJSON_AddNumberToObject(o, "content_index", 0);
        cJSON_AddStringToObject(o, "transcript", text ? text : ev->text ? ev->text : "");
    }
    rt_send(io, o);
}

// ---- the end of a connection -------------------------------------------------------

bool rt_gate_enter(struct rt_gate *g, pthread_mutex_t *lock)
{
    pthread_mutex_lock(lock);
    bool closed = g->closed;
    g->busy = !closed;
    pthread_mutex_unlock(lock);
    return !closed;
}

bool rt_gate_leave(struct rt_gate *g, pthread_mutex_t *lock)
{
    pthread_mutex_lock(lock);
    g->busy = false;
    bool closed = g->closed;
    pthread_mutex_unlock(lock);
    return closed;
}

bool rt_gate_close(struct rt_gate *g, pthread_mutex_t *lock)
{
    pthread_mutex_lock(lock);
    g->closed = true;
    bool busy = g->busy;
    pthread_mutex_unlock(lock);
    return !busy;
}

// ---- base64 ------------------------------------------------------------------------

/* The value of one base64 digit, or -1. */
static int rt_b64_digit(unsigned char ch)
{
    if (ch >= 'A' && ch <= 'Z')
        return ch - 'A';
    if (ch >= 'a' && ch <= 'z')
        return ch - 'a' + 26;
    if (ch >= '0' && ch <= '9')
        return ch - '0' + 52;
    return ch == '+' ? 62 : ch == '/' ? 63 : -1;
}

long rt_base64_decode(const char *in, size_t len, unsigned char *out)
{
    unsigned acc = 0;
    int bits = 0;
    long n = 0;
    size_t i = 0;
    for (; i < len && in[i] != '='; i++) {
        unsigned char ch = (unsigned char)in[i];
        if (ch == ' ' || ch == '\n' || ch == '\r' || ch == '\t')
            continue;
        int d = rt_b64_digit(ch);
        if (d < 0)
            return -1;
        acc = (acc << 6) | (unsigned)d;
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            out[n++] = (unsigned char)(acc >> bits);
        }
    }
    for (; i < len; i++)
        if (in[i] != '=' && in[i] != '\n' && in[i] != '\r')
            return -1;
    return n;
}

char *rt_base64_encode(const void *data, size_t len)
{
    static const char dig[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    const unsigned char *p = data;
    char *out = malloc((len + 2) / 3 * 4 + 1), *o = out;
    if (!out)
        return NULL;
    size_t i = 0;
    for (; i + 2 < len; i += 3) {
        unsigned v = (unsigned)p[i] << 16 | (unsigned)p[i + 1] << 8 | p[i + 2];
        *o++ = dig[v >> 18];
        *o++ = dig[(v >> 12) & 63];
        *o++ = dig[(v >> 6) & 63];
        *o++ = dig[v & 63];
    }
    if (i < len) {
        unsigned v = (unsigned)p[i] << 16 | (i + 1 < len ? (unsigned)p[i + 1] << 8 : 0);
        *o++ = dig[v >> 18];
        *o++ = dig[(v >> 12) & 63];
        *o++ = i + 1 < len ? dig[(v >> 6) & 63] : '=';
        *o++ = '=';
    }
    *o = 0;
    return out;
}

// ---- turn_detection ----------------------------------------------------------------

const char *rt_turn_parse(const cJSON *turn, struct rt_turn *t, const char **param)
{
    if (!turn || cJSON_IsNull(turn)) {
        t->server_vad = false;
        return NULL;
    }
    if (!cJSON_IsObject(turn)) {
        *param = "turn_detection";
        return "turn_detection must be an object or null";
    }
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(turn, "type");
    const cJSON *th = cJSON_GetObjectItemCaseSensitive(turn, "threshold");
    const cJSON *sil = cJSON_GetObjectItemCaseSensitive(turn, "silence_duration_ms");
    const cJSON *pre = cJSON_GetObjectItemCaseSensitive(turn, "prefix_padding_ms");
    const cJSON *cr = cJSON_GetObjectItemCaseSensitive(turn, "create_response");
    const cJSON *ir = cJSON_GetObjectItemCaseSensitive(turn, "interrupt_response");
    if (type && (!cJSON_IsString(type) || (strcmp(type->valuestring, "server_vad") &&
                                           strcmp(type->valuestring, "semantic_vad") &&
                                           strcmp(type->valuestring, "none")))) {
        *param = "turn_detection.type";
        return "turn_detection.type must be server_vad (or none)";
    }
    if (th && (!cJSON_IsNumber(th) || th->valuedouble < 0 || th->valuedouble > 1)) {
        *param = "turn_detection.threshold";
        return "threshold must be a number in 0..1";
    }
    if (sil && (!cJSON_IsNumber(sil) || sil->valuedouble < 0 || sil->valuedouble > 10000)) {
        *param = "turn_detection.silence_duration_ms";
        return "silence_duration_ms must be a number in 0..10000";
    }
    if (pre && (!cJSON_IsNumber(pre) || pre->valuedouble < 0 || pre->valuedouble > 10000)) {
        *param = "turn_detection.prefix_padding_ms";
        return "prefix_padding_ms must be a number in 0..10000";
    }
    if (cr && !cJSON_IsBool(cr)) {
        *param = "turn_detection.create_response";
        return "create_response must be a boolean";
    }
    if (ir && !cJSON_IsBool(ir)) {
        *param = "turn_detection.interrupt_response";
        return "interrupt_response must be a boolean";
    }
    t->server_vad = !type || strcmp(type->valuestring, "none");
    if (th)
        t->threshold = (float)th->valuedouble;
    if (sil)
        t->silence_ms = (int)sil->valuedouble;
    if (pre)
        t->prefix_ms = (int)pre->valuedouble;
    if (cr)
        t->create_response = cJSON_IsTrue(cr);
    if (ir)
        t->interrupt_response = cJSON_IsTrue(ir);
    return NULL;
}

cJSON *rt_turn_json(const struct rt_turn *t, bool conversation)
{
    if (!t->server_vad)
        return cJSON_CreateNull();
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "type", "server_vad");
    cJSON_AddNumberToObject(o, "threshold", t->threshold);
    cJSON_AddNumberToObject(o, "prefix_padding_ms", t->prefix_ms);
    cJSON_AddNumberToObject(o, "silence_duration_ms", t->silence_ms);
    if (conversation) {
        cJSON_AddBoolToObject(o, "create_response", t->create_response);
        cJSON_AddBoolToObject(o, "interrupt_response", t->interrupt_response);
    }
    return o;
}
