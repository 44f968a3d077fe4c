/* fz_api.c - link-time stand-ins for the transport, the engine, the model and
 * the speech service, so that the fuzz_api_* targets run the real src/api
 * code on one thread with no sockets and no weights (see fz_api.h). The
 * stand-ins follow the contracts of the headers they implement (reference
 * counts, which callbacks run when, what a refusal returns); where the real
 * module checks something the API relies on, so do they. */
#define _GNU_SOURCE
#include "tests/fuzz/fz_api.h"

#include "tests/fuzz/fz_util.h"

#include "audio/whisper_batch.h"
#include "llm/model.h"
#include "llm/sampler.h"
#include "llm/tokenizer.h"
#include "src/api/api.h"
#include "src/core/gguf.h"
#include "src/core/omni.h"
#include "src/engine/engine.h"
#include "src/stt/stt.h"
#include "src/stt/stt_session.h"
#include "ws/ws_http.h"
#include "ws/ws_socket.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* FZ_TRACE=1 in the environment prints every answer (for reading a crash
 * file or checking that seeds reach the routes they were written for). */
static bool fz_trace;

static void fz_finding(const char *what)
{
    fprintf(stderr, "fuzz: %s\n", what);
    abort();
}

// ---- transport (ws/ws_http.h, ws/ws_socket.h) -------------------------------

struct ws_out {
    int refs;
    bool started, ended, gone, stream, json;
    bool head;                 /* the answer to a HEAD request: headers only */
    int status;
    char ctype[64];
    char *buf;                 /* the body of a response that is not streamed */
    size_t len, cap;
    ws_abort_fn on_abort;
    ws_free_fn on_free;
    void *user;
};

struct ws_sock {
    int refs;
    bool gone, closing;
};

struct ws_req {
    const struct fz_http *h;
    void *server_user;         /* the api, for ws_req_offload's handler */
    enum ws_method method;
    char *body;                /* NUL-terminated copy */
    size_t body_len;
    const char *route;
    struct ws_out *out;
    char *query_values[8];     /* ws_req_query results, freed with the request */
    int n_query_values;
    const struct ws_sock_handler *ws_handler;
    void *ws_user;
    struct ws_sock *sock;
};

static const char *const fz_method_names[] = {
    [WS_GET] = "GET", [WS_POST] = "POST", [WS_OPTIONS] = "OPTIONS", [WS_PUT] = "PUT",
    [WS_PATCH] = "PATCH", [WS_DELETE] = "DELETE", [WS_HEAD] = "HEAD", [WS_OTHER] = "OTHER",
};

enum ws_method ws_req_method(const struct ws_req *r) { return r->method; }
const char *ws_req_method_name(const struct ws_req *r) { return fz_method_names[r->method]; }
const char *ws_req_path(const struct ws_req *r) { return r->h->path; }
bool ws_req_body_too_large(const struct ws_req *r) { (void)r; return false; }
bool ws_req_draining(const struct ws_req *r) { (void)r; return false; }

/* The worker's detached copy is the request itself here: the handler runs
 * at once, on this thread, which is what the server does once its worker
 * pool has stopped. */
void ws_req_offload(struct ws_req *r, ws_handler_fn fn) { fn(r->server_user, r); }
const char *ws_req_id(const struct ws_req *r) { (void)r; return "fuzzreq"; }
void ws_req_set_route(struct ws_req *r, const char *route) { r->route = route; }

const char *ws_req_header(struct ws_req *r, const char *name)
{
    if (!strcmp(name, "content-type"))
        return r->h->content_type;
    if (!strcmp(name, "authorization"))
        return r->h->authorization;
    return NULL;
}

const char *ws_req_body(const struct ws_req *r, size_t *len)
{
    *len = r->body_len;
    return r->body;
}

void ws_req_add_header(struct ws_req *r, const char *name, const char *value)
{
    (void)r, (void)name, (void)value;
}

const char *ws_req_query(struct ws_req *r, const char *name)
{
    const char *q = r->h->query;
    size_t nl = strlen(name);
    while (q && *q) {
        const char *end = strchr(q, '&');
        size_t len = end ? (size_t)(end - q) : strlen(q);
        if (len > nl && !strncmp(q, name, nl) && q[nl] == '=' &&
            r->n_query_values < (int)(sizeof r->query_values / sizeof *r->query_values)) {
            char *v = fz_strndup((const uint8_t *)q + nl + 1, len - nl - 1);
            r->query_values[r->n_query_values++] = v;
            return v;
        }
        q = end ? end + 1 : NULL;
    }
    return NULL;
}

static struct ws_out *fz_out_new(int refs, ws_abort_fn on_abort, ws_free_fn on_free, void *user)
{
    struct ws_out *o = calloc(1, sizeof *o);
    if (!o)
        abort();
    o->refs = refs;
    o->on_abort = on_abort;
    o->on_free = on_free;
    o->user = user;
    return o;
}

/* As ws_http.c: the first answer of a request wins, later ones are ignored. */
struct ws_out *ws_req_defer(struct ws_req *r, ws_abort_fn on_abort, ws_free_fn on_free, void *user)
{
    if (r->out)
        return NULL;
    r->out = fz_out_new(2, on_abort, on_free, user);
    r->out->head = r->method == WS_HEAD;
    return r->out;
}

void ws_req_respond(struct ws_req *r, int status, const char *content_type, const char *body,
                    size_t len)
{
    if (r->out)
        return;
    r->out = fz_out_new(1, NULL, NULL, NULL);
    r->out->head = r->method == WS_HEAD;
    ws_out_start(r->out, status, content_type, false);
    ws_out_write(r->out, body, len);
    ws_out_end(r->out);
}

void ws_out_start(struct ws_out *o, int status, const char *content_type, bool stream)
{
    if (o->started)
        return;
    o->started = true;
    o->status = status;
    o->stream = stream;
    snprintf(o->ctype, sizeof o->ctype, "%s", content_type ? content_type : "text/plain");
    o->json = !strncmp(o->ctype, "application/json", 16);
    if (fz_trace)
        fprintf(stderr, "fuzz: answer %d %s%s\n", status, o->ctype, stream ? " (stream)" : "");
    /* A 500 means the server failed on a request it should have judged:
     * 503 (no model / shutting down) and 4xx are answers, not findings. */
    if (status == 500)
        fz_finding("the server answered 500");
}

void ws_out_write(struct ws_out *o, const char *data, size_t len)
{
    if (o->gone || o->ended || !len)
        return;
    if (o->len + len + 1 > o->cap) {
        size_t cap = o->cap ? o->cap : 1024;
        while (cap < o->len + len + 1)
            cap *= 2;
        if (!(o->buf = realloc(o->buf, cap)))
            abort();
        o->cap = cap;
    }
    memcpy(o->buf + o->len, data, len);
    o->len += len;
}

void ws_out_sse(struct ws_out *o, const char *event, const char *data, size_t len)
{
    (void)event;
    if (o->gone || o->ended)
        return;
    if (fz_trace)
        fprintf(stderr, "fuzz: event %s: %.*s\n", event ? event : "-", (int)len, data);
    if (!(len == 6 && !memcmp(data, "[DONE]", 6)))
        fz_check_json(data, len, "an SSE event");
}

void ws_out_end(struct ws_out *o)
{
    if (o->ended || o->gone)
        return;
    o->ended = true;
    if (fz_trace && !o->stream)
        fprintf(stderr, "fuzz: body: %.*s\n", (int)o->len, o->buf ? o->buf : "");
    if (o->json && !o->stream && !(o->head && !o->len))
        fz_check_json(o->buf ? o->buf : "", o->len, "a JSON response body");
}

void ws_out_set_tokens(struct ws_out *o, int tokens_in, int tokens_out)
{
    (void)o, (void)tokens_in, (void)tokens_out;
}

bool ws_out_gone(struct ws_out *o) { return o->gone; }

void ws_out_release(struct ws_out *o)
{
    if (!o)
        return;
    if (o->refs <= 0)
        fz_finding("ws_out released once too often");
    if (--o->refs)
        return;
    if (o->on_free)
        o->on_free(o->user);
    free(o->buf);
    free(o);
}

struct ws_sock *ws_req_accept_websocket(struct ws_req *r, const struct ws_sock_handler *h,
                                        void *user)
{
    if (r->sock)
        return NULL;
    r->ws_handler = h;
    r->ws_user = user;
    r->sock = calloc(1, sizeof *r->sock);
    if (!r->sock)
        abort();
    r->sock->refs = 2;   /* the connection's and the caller's */
    return r->sock;
}

void ws_sock_send(struct ws_sock *s, const char *text, size_t len)
{
    if (fz_trace)
        fprintf(stderr, "fuzz: ws: %.*s\n", (int)len, text);
    if (!s->gone && !s->closing)
        fz_check_json(text, len, "a WebSocket event");
}

void ws_sock_close(struct ws_sock *s, int code, const char *reason)
{
    (void)code, (void)reason;
    s->closing = true;
}

bool ws_sock_gone(struct ws_sock *s) { return s->gone; }
void ws_sock_retain(struct ws_sock *s) { s->refs++; }

void ws_sock_release(struct ws_sock *s)
{
    if (!s)
        return;
    if (s->refs <= 0)
        fz_finding("ws_sock released once too often");
    if (--s->refs == 0)
        free(s);
}

// ---- model (llm/model.h) -----------------------------------------------------

struct llm_model {
    struct llm_hparams hp;
    struct fz_gguf w;          /* the metadata g points into */
    struct gguf *g;
    struct tokenizer *tok;
    char name[64];
};

#define FZ_MAX_MODELS 32
static struct llm_model fz_models[FZ_MAX_MODELS];
static int fz_n_models;

const struct llm_hparams *llm_model_hparams(const struct llm_model *m) { return &m->hp; }
const struct tokenizer *llm_model_tokenizer(const struct llm_model *m) { return m->tok; }
const struct gguf *llm_model_gguf(const struct llm_model *m) { return m->g; }

// ---- engine (src/engine/engine.h) --------------------------------------------

struct engine {
    int unused;
};
static struct engine fz_engine;

/* Submitted requests wait here until the harness plays the engine's part
 * (fz_drive): an HTTP transaction submits at most one; a realtime
 * conversation may have a few in flight. */
#define FZ_MAX_REQUESTS 4

struct fz_request {
    bool cancelled;
    uint64_t id;
    int n, n_prompt, n_logprobs;
    bool echo_special;
    engine_event_fn on_event;
    int32_t (*force_token)(void *user, int choice);
    void *user;
};

static struct {
    enum fz_engine_mode mode;
    bool one_only;                 /* an HTTP transaction */
    uint64_t next_id;
    struct fz_request q[FZ_MAX_REQUESTS];
    int n_q;
    struct fz_request *running;    /* being answered by fz_generate */
} fz_eng;

struct engine_request engine_default_request(void)
{
    return (struct engine_request){ .sampling = sampler_default_params(), .n = 1 };
}

struct llm_model *engine_model(const struct engine *e, int model)
{
    (void)e;
    return model >= 0 && model < fz_n_models ? &fz_models[model] : NULL;
}

int engine_submit(struct engine *e, const struct engine_request *rq, uint64_t *id, char *err,
                  size_t errlen)
{
    (void)e;
    if (fz_eng.one_only && (fz_eng.n_q || fz_eng.running))
        fz_finding("a second engine request in one HTTP transaction");
    if (!rq->on_event || rq->n < 1 || (!rq->prompt && !rq->segments))
        fz_finding("engine_submit: a request without callback, choices or prompt");
    if (fz_eng.mode == FZ_ENGINE_BUSY || fz_eng.n_q == FZ_MAX_REQUESTS)
        return omni_fail(err, errlen, OMNI_ERR_LIMIT, "engine: queue full");
    if (fz_eng.mode == FZ_ENGINE_REFUSE)
        return omni_fail(err, errlen, OMNI_ERR_ARG,
                         "engine: prompt of %d tokens does not fit the context", rq->n_prompt);
    int n_prompt = rq->n_prompt;
    for (int i = 0; !rq->prompt && i < rq->n_segments; i++)
        n_prompt += rq->segments[i].n;
    fz_eng.q[fz_eng.n_q++] = (struct fz_request){
        .id = ++fz_eng.next_id, .n = rq->n, .n_prompt = n_prompt,
        .n_logprobs = rq->sampling.n_logprobs, .echo_special = rq->echo_special,
        .on_event = rq->on_event, .force_token = rq->force_token, .user = rq->user,
    };
    *id = fz_eng.next_id;
    return 0;
}

void engine_cancel(struct engine *e, uint64_t id)
{
    (void)e;
    if (fz_eng.running && fz_eng.running->id == id)
        fz_eng.running->cancelled = true;
    for (int i = 0; i < fz_eng.n_q; i++)
        if (fz_eng.q[i].id == id)
            fz_eng.q[i].cancelled = true;
}

void engine_stats(struct engine *e, struct engine_stats *out)
{
    (void)e;
    memset(out, 0, sizeof *out);
}

// ---- speech (src/stt/stt.h, src/stt/stt_session.h) ----------------------------

struct stt {
    bool vad;
};
static struct stt fz_stt_plain, fz_stt_vad = { .vad = true };
static const int fz_vad_model_tag;   /* a non-NULL vad_model pointer; never read */

/* One job at a time, run by the harness after the route returned (as the
 * service does on shutdown: with no whisper state). */
static struct {
    bool busy;
    stt_job_fn fn;
    void *user;
} fz_job;

const struct vad_model *stt_vad(const struct stt *s)
{
    return s->vad ? (const struct vad_model *)&fz_vad_model_tag : NULL;
}

void stt_batch_stats(struct stt *s, struct whisper_batcher_stats *out)
{
    (void)s;
    memset(out, 0, sizeof *out);
}

int stt_submit(struct stt *s, stt_job_fn fn, void *user)
{
    (void)s;
    if (fz_job.busy || fz_job.fn)
        return OMNI_ERR_LIMIT;
    fz_job.fn = fn;
    fz_job.user = user;
    return 0;
}

/* Reached only from a job that has a whisper state, which no job gets here. */
int stt_speech_only(const struct vad_model *vad, const float *pcm, size_t n, float **out,
                    size_t *n_out, struct stt_span **spans, size_t *n_spans, char *err,
                    size_t errlen)
{
    (void)vad, (void)pcm, (void)n, (void)out, (void)n_out, (void)spans, (void)n_spans;
    (void)err, (void)errlen;
    abort();
}
int64_t stt_map_ms(const struct stt_span *spans, size_t n_spans, int64_t ms)
{
    (void)spans, (void)n_spans, (void)ms;
    abort();
}
char *stt_full_text(const struct whisper_state *ws)
{
    (void)ws;
    abort();
}
struct whisper_full_params stt_full_params(bool timestamps)
{
    (void)timestamps;
    abort();
}

struct stt_session {
    struct stt *svc;
    struct stt_session_params p;
    int64_t bytes;             /* audio pushed since the last commit or clear */
    bool in_speech;
    int item;
};

struct stt_session_params stt_session_default_params(void)
{
    struct stt_session_params p = {
        .input_rate_hz = 24000,
        .server_vad = true,
        .vad = vad_default_params(),
        .partial_ms = 500,
    };
    p.vad.max_speech_duration_s = 29.0f;
    return p;
}

static void fz_ss_emit(struct stt_session *ss, enum stt_event_type type, const char *text)
{
    struct stt_event ev = { .type = type, .item = ss->item,
                            .audio_ms = ss->bytes / 2 * 1000 / ss->p.input_rate_hz,
                            .text = text, .delta = text };
    ss->p.on_event(ss->p.user, &ev);
}

/* The checks of stt_session.c that callers depend on. */
static int fz_ss_check(const struct stt *svc, const struct stt_session_params *p, char *err,
                       size_t errlen)
{
    if (p->input_rate_hz < 8000 || p->input_rate_hz > 96000)
        return omni_fail(err, errlen, OMNI_ERR_ARG, "the input audio rate must be 8000..96000 Hz");
    if (p->server_vad && !svc->vad)
        return omni_fail(err, errlen, OMNI_ERR_ARG, "server VAD needs a VAD model");
    if (p->server_vad && p->vad.speech_pad_ms > 100)
        return omni_fail(err, errlen, OMNI_ERR_ARG, "speech_pad_ms must be <= 100");
    return 0;
}

struct stt_session *stt_session_new(struct stt *svc, const struct stt_session_params *p,
                                    char *err, size_t errlen)
{
    if (!p->on_event || fz_ss_check(svc, p, err, errlen) < 0)
        return NULL;
    struct stt_session *ss = calloc(1, sizeof *ss);
    if (!ss)
        abort();
    ss->svc = svc;
    ss->p = *p;
    ss->p.language = ss->p.prompt = NULL;   /* the real session copies them */
    return ss;
}

int stt_session_update(struct stt_session *ss, const struct stt_session_params *p, char *err,
                       size_t errlen)
{
    if (fz_ss_check(ss->svc, p, err, errlen) < 0)
        return OMNI_ERR_ARG;
    struct stt_session_params keep = ss->p;
    ss->p = *p;
    ss->p.language = ss->p.prompt = NULL;
    ss->p.on_event = keep.on_event;
    ss->p.on_free = keep.on_free;
    ss->p.user = keep.user;
    if (!ss->p.server_vad)
        ss->in_speech = false;
    return 0;
}

int stt_session_push(struct stt_session *ss, const void *pcm16, size_t len, char *err,
                     size_t errlen)
{
    (void)pcm16, (void)err, (void)errlen;
    ss->bytes += (int64_t)len;
    /* 100 ms of any audio counts as speech for the fake VAD */
    if (ss->p.server_vad && !ss->in_speech && ss->bytes >= ss->p.input_rate_hz / 5) {
        ss->in_speech = true;
        ss->item++;
        fz_ss_emit(ss, STT_EV_SPEECH_STARTED, NULL);
    }
    return 0;
}

int stt_session_commit(struct stt_session *ss, char *err, size_t errlen)
{
    if (ss->p.server_vad) {
        if (!ss->in_speech)
            return omni_fail(err, errlen, OMNI_ERR_ARG, "no speech in the buffer to commit");
        ss->in_speech = false;
        fz_ss_emit(ss, STT_EV_SPEECH_STOPPED, NULL);
    } else {
        if (ss->bytes < ss->p.input_rate_hz / 5)
            return omni_fail(err, errlen, OMNI_ERR_ARG, "buffer too small");
        ss->item++;
    }
    fz_ss_emit(ss, STT_EV_COMMITTED, NULL);
    fz_ss_emit(ss, STT_EV_PARTIAL, "fuzz");
    fz_ss_emit(ss, STT_EV_FINAL, "fuzz \"transcript\"\n");
    ss->bytes = 0;
    return 0;
}

void stt_session_clear(struct stt_session *ss)
{
    ss->bytes = 0;
    ss->in_speech = false;
}

void stt_session_close(struct stt_session *ss)
{
    if (!ss)
        return;
    if (ss->p.on_free)
        ss->p.on_free(ss->p.user);
    free(ss);
}

// ---- the harness --------------------------------------------------------------

static struct api *fz_apis[FZ_MAX_MODELS][2];   /* [model][with API key] */

static int fz_cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Model i: tokenizer + (for i > 0) template i - 1 of tests/fixtures/templates;
 * model 0 has no template (the built-in format) and the SentencePiece vocab. */
static void fz_model_init(struct llm_model *m, const char *template_path)
{
    char err[256];
    fz_gguf_init(&m->w);
    fz_vocab_gguf(&m->w, template_path ? FZ_VOCAB_BPE : FZ_VOCAB_SPM);
    if (template_path) {
        size_t len;
        uint8_t *text = fz_read_file(template_path, &len);
        if (!text)
            fz_finding("cannot read a chat template (run from the repository root)");
        char *s = fz_strndup(text, len);
        fz_gguf_str(&m->w, "tokenizer.chat_template", s);
        free(s);
        free(text);
    }
    if (!(m->g = fz_gguf_open(&m->w, err, sizeof err)) ||
        !(m->tok = tokenizer_from_gguf(m->g, err, sizeof err))) {
        fprintf(stderr, "fuzz: model setup: %s\n", err);
        abort();
    }
    m->hp = (struct llm_hparams){
        .arch_name = "llama", .n_vocab = tokenizer_n_vocab(m->tok),
        .n_ctx_train = 4096,   /* small, so that long requests reach the context checks */
        .n_embd = 8, .n_layer = 1, .n_head = 1, .n_head_kv = 1, .head_dim = 8, .n_ff = 8,
    };
}

void fz_api_init(void)
{
    /* Every request logs a line: far too slow and noisy at fuzzing rates. */
    fz_trace = getenv("FZ_TRACE") && *getenv("FZ_TRACE") == '1';
    omni_log_set_level(fz_trace ? OMNI_LOG_INFO : (enum omni_log_level)(OMNI_LOG_ERROR + 1));
    static const char dir[] = "tests/fixtures/templates";
    char *names[FZ_MAX_MODELS];
    int n = 0;
    DIR *d = opendir(dir);
    if (!d)
        fz_finding("no tests/fixtures/templates (run from the repository root)");
    for (struct dirent *e; (e = readdir(d)) && n < FZ_MAX_MODELS - 1;) {
        size_t len = strlen(e->d_name);
        if (len > 6 && !strcmp(e->d_name + len - 6, ".jinja"))
            names[n++] = strdup(e->d_name);
    }
    closedir(d);
    qsort(names, (size_t)n, sizeof *names, fz_cmp_str);   /* readdir order is not stable */
    fz_model_init(&fz_models[0], NULL);
    for (int i = 0; i < n; i++) {
        char path[512];
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        fz_model_init(&fz_models[i + 1], path);
        free(names[i]);
    }
    fz_n_models = n + 1;
    for (int i = 0; i < fz_n_models; i++) {
        for (int keyed = 0; keyed < 2; keyed++) {
            char err[256];
            struct api_params p = api_default_params();
            p.served_model_name = "fuzz-model";
            p.api_key = keyed ? "sk-fuzz" : NULL;
            if (!(fz_apis[i][keyed] = api_new(&p, err, sizeof err)))
                fz_finding(err);
            api_set_engine(fz_apis[i][keyed], &fz_engine, i);
        }
    }
}

int fz_api_n_models(void) { return fz_n_models; }

void fz_api_flags(struct fz_http *h, uint8_t flags, uint8_t model)
{
    h->engine = (enum fz_engine_mode)(flags & 3);
    h->finish_length = flags & 4;
    if (flags & 8)
        h->authorization = flags & 16 ? "Bearer sk-fuzz" : "Bearer wrong";
    h->with_stt = !(flags & 32);
    h->stt_vad = flags & 64;
    h->model = model;
}

static struct api *fz_api_for(const struct fz_http *h)
{
    int m = h->model % fz_n_models;
    struct api *a = fz_apis[m < 0 ? -m : m][h->authorization != NULL];
    api_set_stt(a, h->with_stt ? (h->stt_vad ? &fz_stt_vad : &fz_stt_plain) : NULL);
    return a;
}

static enum ws_method fz_method(const char *m)
{
    for (int i = 0; i < WS_OTHER; i++)
        if (!strcmp(m, fz_method_names[i]))
            return (enum ws_method)i;
    return WS_OTHER;
}

static void fz_req_init(struct ws_req *r, const struct fz_http *h)
{
    memset(r, 0, sizeof *r);
    r->h = h;
    r->method = fz_method(h->method ? h->method : "GET");
    r->body = fz_strndup(h->body ? h->body : (const uint8_t *)"", h->body ? h->body_len : 0);
    r->body_len = h->body ? h->body_len : 0;
}

static void fz_req_free(struct ws_req *r)
{
    for (int i = 0; i < r->n_query_values; i++)
        free(r->query_values[i]);
    free(r->body);
}

#define FZ_MAX_TOKENS 256   /* per choice */

static void fz_emit_token(const struct fz_request *rq, int choice, int32_t token, const char *text,
                          size_t len)
{
    struct sampler_logprobs lp = { .chosen = { token, -0.5f } };
    lp.n_top = rq->n_logprobs < SAMPLER_MAX_LOGPROBS ? rq->n_logprobs : SAMPLER_MAX_LOGPROBS;
    for (int k = 0; k < lp.n_top; k++)
        lp.top[k] = (struct sampler_logprob){ (token + k) % 256, -0.5f - (float)k };
    struct engine_event ev = {
        .type = ENGINE_EV_TOKEN, .request_id = rq->id, .choice = choice, .token = token,
        .text = text, .text_len = len, .logprobs = rq->n_logprobs > 0 ? &lp : NULL,
        .stop_index = -1,
    };
    rq->on_event(rq->user, &ev);
}

/* The engine's side of an accepted request: every choice generates gen
 * (cut into 1..5-character tokens, forced tokens first when the call asks
 * for them), steps interleaved across choices as the scheduler does, then
 * its final event. */
static void fz_generate(const struct fz_http *h, struct ws_out *o, const uint8_t *gen,
                        size_t gen_len, const struct tokenizer *tok, struct fz_request *rq)
{
    uint8_t *text = malloc(gen_len + 1);
    if (!text)
        abort();
    /* the engine's detokenizer only hands out valid UTF-8: invalid -> '?' */
    for (size_t i = 0; i < gen_len;) {
        size_t n = fz_utf8_len(gen + i, gen_len - i);
        if (!n) {
            text[i++] = '?';
            continue;
        }
        memcpy(text + i, gen + i, n);
        i += n;
    }
    const int n = rq->n;
    size_t *pos = calloc((size_t)n, sizeof *pos);
    int *tokens = calloc((size_t)n, sizeof *tokens);
    if (!pos || !tokens)
        abort();
    bool more = true;
    for (int step = 0; more && step < FZ_MAX_TOKENS; step++) {
        more = false;
        if (h->engine == FZ_ENGINE_CLIENT_LEAVES && step == 3 && o && !o->gone) {
            o->gone = true;   /* the service thread's view of a disconnect */
            if (o->on_abort)
                o->on_abort(o->user);
        }
        if (rq->cancelled)
            break;
        for (int c = 0; c < n; c++) {
            int32_t forced = rq->force_token ? rq->force_token(rq->user, c) : -1;
            if (forced >= 0) {
                char piece[256];
                size_t len = tokenizer_piece(tok, forced, rq->echo_special, piece, sizeof piece);
                fz_emit_token(rq, c, forced, piece, len < sizeof piece ? len : 0);
                tokens[c]++;
                more = true;
                continue;
            }
            if (pos[c] >= gen_len)
                continue;
            size_t end = pos[c];
            for (int k = 0, want = 1 + text[pos[c]] % 5; k < want && end < gen_len; k++)
                end += text[end] < 0x80 ? 1 : fz_utf8_len(text + end, gen_len - end);
            fz_emit_token(rq, c, (int32_t)(text[pos[c]] % 256), (const char *)text + pos[c],
                          end - pos[c]);
            pos[c] = end;
            tokens[c]++;
            more = true;
        }
    }
    for (int c = 0; c < n; c++) {
        struct engine_event ev = {
            .type = ENGINE_EV_DONE, .request_id = rq->id, .choice = c,
            .finish = rq->cancelled ? ENGINE_FINISH_CANCELLED
                      : h->finish_length ? ENGINE_FINISH_LENGTH : ENGINE_FINISH_STOP,
            .stop_index = -1,
            .usage = { .prompt_tokens = rq->n_prompt, .completion_tokens = tokens[c] },
        };
        rq->on_event(rq->user, &ev);
    }
    free(pos);
    free(tokens);
    free(text);
}

/* Answer every waiting request in submission order; an answer may lead to
 * a new request (a conversation's next turn), but not forever. */
static void fz_drive(const struct fz_http *h, struct ws_out *o, const uint8_t *gen,
                     size_t gen_len, const struct tokenizer *tok)
{
    for (int answered = 0; fz_eng.n_q; answered++) {
        if (answered == 16)
            fz_finding("engine requests keep coming: 16 answered and more submitted");
        struct fz_request rq = fz_eng.q[0];
        memmove(fz_eng.q, fz_eng.q + 1, (size_t)--fz_eng.n_q * sizeof *fz_eng.q);
        fz_eng.running = &rq;
        fz_generate(h, o, gen, gen_len, tok, &rq);
        fz_eng.running = NULL;
    }
}

void fz_api_http(const struct fz_http *h, const uint8_t *gen, size_t gen_len)
{
    struct api *a = fz_api_for(h);
    struct ws_req r;
    fz_req_init(&r, h);
    r.server_user = a;
    memset(&fz_eng, 0, sizeof fz_eng);
    fz_eng.mode = h->engine;
    fz_eng.one_only = true;
    memset(&fz_job, 0, sizeof fz_job);
    fz_job.busy = h->engine == FZ_ENGINE_BUSY;

    api_handle(a, &r);
    struct ws_out *o = r.out;
    if (!o)
        fz_finding("the handler returned without answering");
    fz_drive(h, o, gen, gen_len, api_model(a)->tok);
    if (fz_job.fn) {
        if (h->engine == FZ_ENGINE_CLIENT_LEAVES && !o->gone) {
            o->gone = true;
            if (o->on_abort)
                o->on_abort(o->user);
        }
        fz_job.fn(NULL, fz_job.user);
    }
    if (!o->ended && !o->gone)
        fz_finding("the response never ended");
    ws_out_release(o);   /* the connection's reference; the last one by now */
    fz_req_free(&r);
}

void fz_api_ws(const struct fz_http *h, const uint8_t *const *msg, const size_t *msg_len,
               int n_msg, const uint8_t *reply, size_t reply_len)
{
    struct api *a = fz_api_for(h);
    struct ws_req r;
    fz_req_init(&r, h);
    r.server_user = a;
    memset(&fz_eng, 0, sizeof fz_eng);
    fz_eng.mode = h->engine == FZ_ENGINE_CLIENT_LEAVES ? FZ_ENGINE_ACCEPT : h->engine;
    api_upgrade(a, &r);
    struct ws_sock *s = r.sock;
    const struct tokenizer *tok = api_model(a)->tok;
    for (int i = 0; s && i < n_msg; i++) {
        bool binary = msg_len[i] > 0 && msg[i][0] == 1;
        size_t len = msg_len[i] - binary;
        /* an exact-size copy, as lws hands over: no NUL after the message */
        char *copy = malloc(len ? len : 1);
        if (!copy)
            abort();
        memcpy(copy, msg[i] + binary, len);
        r.ws_handler->on_message(r.ws_user, s, copy, len, binary);
        free(copy);
        /* the engine answers before the next message arrives */
        fz_drive(h, NULL, reply, reply_len, tok);
    }
    if (s) {
        s->gone = true;
        r.ws_handler->on_close(r.ws_user);
        fz_drive(h, NULL, reply, reply_len, tok);   /* what on_close cancelled ends */
        if (s->refs != 1)
            fz_finding("the WebSocket is still referenced after on_close and the last answer");
        ws_sock_release(s);   /* the connection's reference */
    }
    if (r.out) {              /* a refused upgrade answered with a status (401, ...) */
        if (s)
            fz_finding("an upgrade both accepted the WebSocket and answered");
        ws_out_release(r.out);
    }
    fz_req_free(&r);
}
