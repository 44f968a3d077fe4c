/* apireq.c - request-body parsing shared by the OpenAI and Anthropic routes.
 * Every rejection is a 400 whose message names the field and what was
 * expected, because that message is all a client developer gets to see. */
#include "src/api/apireq.h"

#include "llm/grammar/grammar.h"
#include "llm/grammar/json_schema.h"
#include "llm/tools/tools.h"
#include "src/core/omni.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

int apireq_json_depth(const char *text, size_t len, int limit)
{
    int depth = 0, max = 0;
    bool in_str = false;
    for (size_t i = 0; i < len; i++) {
        char c = text[i];
        if (in_str) {
            if (c == '\\')
                i++;
            else if (c == '"')
                in_str = false;
        } else if (c == '"') {
            in_str = true;
        } else if (c == '{' || c == '[') {
            if (++depth > max && (max = depth) > limit)
                return limit + 1;
        } else if (c == '}' || c == ']') {
            depth--;
        }
    }
    return max;
}

struct cJSON *apireq_parse(const char *body, size_t len, struct api_error *e)
{
    size_t i = 0;
    while (i < len && (body[i] == ' ' || body[i] == '\n' || body[i] == '\r' || body[i] == '\t'))
        i++;
    if (i == len) {
        api_error_set(e, 400, NULL, "request body is empty; expected a JSON object");
        return NULL;
    }
    /* cJSON recurses per level: bound the depth before it sees the text. */
    if (apireq_json_depth(body, len, APIREQ_MAX_DEPTH) > APIREQ_MAX_DEPTH) {
        api_error_set(e, 400, NULL, "request JSON is nested deeper than %d levels",
                      APIREQ_MAX_DEPTH);
        return NULL;
    }
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(body, len, &end, false);
    if (!root) {
        const char *at = cJSON_GetErrorPtr();
        size_t off = at && at >= body && at <= body + len ? (size_t)(at - body) : 0;
        api_error_set(e, 400, NULL, "malformed JSON in request body near byte %zu", off);
        return NULL;
    }
    for (; end && end < body + len; end++) {
        if (*end != ' ' && *end != '\n' && *end != '\r' && *end != '\t' && *end != 0) {
            api_error_set(e, 400, NULL, "malformed JSON: unexpected text after the object at byte %zu",
                          (size_t)(end - body));
            cJSON_Delete(root);
            return NULL;
        }
    }
    if (!cJSON_IsObject(root)) {
        api_error_set(e, 400, NULL, "request body must be a JSON object");
        cJSON_Delete(root);
        return NULL;
    }
    return root;
}

static const char *apireq_kind(const cJSON *v)
{
    if (cJSON_IsString(v)) return "a string";
    if (cJSON_IsNumber(v)) return "a number";
    if (cJSON_IsBool(v)) return "a boolean";
    if (cJSON_IsArray(v)) return "an array";
    if (cJSON_IsObject(v)) return "an object";
    return "null";
}

/* The value of key, or NULL when absent or null. */
static const cJSON *apireq_get(const cJSON *obj, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    return v && !cJSON_IsNull(v) ? v : NULL;
}

int apireq_number(const cJSON *obj, const char *key, double lo, double hi, double *out,
                  struct api_error *e)
{
    const cJSON *v = apireq_get(obj, key);
    if (!v)
        return 0;
    if (!cJSON_IsNumber(v))
        return api_error_set(e, 400, key, "'%s' must be a number, got %s", key, apireq_kind(v));
    double d = v->valuedouble;
    if (!isfinite(d) || d < lo || d > hi)
        return api_error_set(e, 400, key, "'%s' must be between %g and %g, got %g", key, lo, hi, d);
    *out = d;
    return 1;
}

int apireq_int(const cJSON *obj, const char *key, long lo, long hi, long *out, struct api_error *e)
{
    const cJSON *v = apireq_get(obj, key);
    if (!v)
        return 0;
    if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble))
        return api_error_set(e, 400, key, "'%s' must be an integer, got %s", key,
                             cJSON_IsNumber(v) ? "a fraction" : apireq_kind(v));
    double d = v->valuedouble;
    if (d < (double)lo || d > (double)hi)
        return api_error_set(e, 400, key, "'%s' must be between %ld and %ld, got %.0f", key, lo,
                             hi, d);
    *out = (long)d;
    return 1;
}

int apireq_bool(const cJSON *obj, const char *key, bool *out, struct api_error *e)
{
    const cJSON *v = apireq_get(obj, key);
    if (!v)
        return 0;
    if (!cJSON_IsBool(v))
        return api_error_set(e, 400, key, "'%s' must be a boolean, got %s", key, apireq_kind(v));
    *out = cJSON_IsTrue(v);
    return 1;
}

int apireq_string(const cJSON *obj, const char *key, const char **out, struct api_error *e)
{
    const cJSON *v = apireq_get(obj, key);
    if (!v)
        return 0;
    if (!cJSON_IsString(v))
        return api_error_set(e, 400, key, "'%s' must be a string, got %s", key, apireq_kind(v));
    *out = v->valuestring;
    return 1;
}

void apireq_gen_init(struct apireq_gen *g)
{
    memset(g, 0, sizeof *g);
    g->sp = sampler_default_params();
    g->n = 1;
}

void apireq_gen_free(struct apireq_gen *g)
{
    for (int i = 0; i < g->n_stop; i++)
        free(g->stop[i]);
    free(g->stop);
    free(g->bias);
    memset(g, 0, sizeof *g);
}

static int apireq_add_stop(struct apireq_gen *g, const char *field, const cJSON *s,
                           struct api_error *e)
{
    if (!cJSON_IsString(s))
        return api_error_set(e, 400, field, "'%s' must hold strings, got %s", field,
                             apireq_kind(s));
    if (!s->valuestring[0])
        return 0;   /* an empty stop string can never match: ignore it */
    if (g->n_stop >= APIREQ_MAX_STOPS)
        return api_error_set(e, 400, field, "'%s' may hold at most %d strings", field,
                             APIREQ_MAX_STOPS);
    char **ns = realloc(g->stop, (size_t)(g->n_stop + 1) * sizeof *ns);
    if (!ns)
        return api_error_set(e, 500, NULL, "out of memory");
    g->stop = ns;
    if (!(g->stop[g->n_stop] = strdup(s->valuestring)))
        return api_error_set(e, 500, NULL, "out of memory");
    g->n_stop++;
    return 0;
}

static int apireq_stops(const cJSON *root, const char *field, bool allow_string,
                        struct apireq_gen *g, struct api_error *e)
{
    const cJSON *v = apireq_get(root, field);
    if (!v)
        return 0;
    if (cJSON_IsString(v) && allow_string)
        return apireq_add_stop(g, field, v, e);
    if (!cJSON_IsArray(v))
        return api_error_set(e, 400, field, "'%s' must be %s, got %s", field,
                             allow_string ? "a string or an array of strings" : "an array of strings",
                             apireq_kind(v));
    const cJSON *s;
    cJSON_ArrayForEach(s, v) if (apireq_add_stop(g, field, s, e) < 0) return -1;
    return 0;
}

static int apireq_logit_bias(const cJSON *root, int n_vocab, struct apireq_gen *g,
                             struct api_error *e)
{
    const cJSON *v = apireq_get(root, "logit_bias");
    if (!v)
        return 0;
    if (!cJSON_IsObject(v))
        return api_error_set(e, 400, "logit_bias", "'logit_bias' must be an object mapping token ids to numbers, got %s",
                             apireq_kind(v));
    int n = cJSON_GetArraySize(v);
    if (n == 0)
        return 0;
    if (!(g->bias = calloc((size_t)n, sizeof *g->bias)))
        return api_error_set(e, 500, NULL, "out of memory");
    const cJSON *it;
    int k = 0;
    cJSON_ArrayForEach(it, v) {
        char *end;
        long id = strtol(it->string, &end, 10);
        if (end == it->string || *end || id < 0 || (n_vocab > 0 && id >= n_vocab))
            return api_error_set(e, 400, "logit_bias",
                                 "'logit_bias' key '%s' is not a token id in 0..%d", it->string,
                                 n_vocab > 0 ? n_vocab - 1 : 0x7fffffff);
        if (!cJSON_IsNumber(it) || !(it->valuedouble >= -100 && it->valuedouble <= 100))
            return api_error_set(e, 400, "logit_bias",
                                 "'logit_bias' values must be numbers in -100..100 (token %ld)", id);
        /* -100 is OpenAI's "ban": make it certain rather than merely unlikely. */
        g->bias[k].token = (int32_t)id;
        g->bias[k].bias = it->valuedouble <= -100 ? -INFINITY : (float)it->valuedouble;
        k++;
    }
    g->sp.logit_bias = g->bias;
    g->sp.n_logit_bias = k;
    return 0;
}

// ---- server-wide defaults (serve --logit-bias) ------------------------------------

/* Set once before the server runs; read-only while it serves. */
static struct sampler_logit_bias *apireq_default_bias;
static int apireq_n_default_bias;

int apireq_set_default_bias(const char *spec, char *err, size_t errlen)
{
    free(apireq_default_bias);
    apireq_default_bias = NULL;
    apireq_n_default_bias = 0;
    if (!spec || !*spec)
        return 0;
    int cap = 1;
    for (const char *p = spec; *p; p++)
        cap += *p == ',';
    struct sampler_logit_bias *b = calloc((size_t)cap, sizeof *b);
    if (!b)
        return omni_fail(err, errlen, OMNI_ERR_NOMEM, "--logit-bias: out of memory");
    int n = 0;
    for (const char *p = spec; *p;) {
        /* ID+BIAS or ID-BIAS (llama.cpp's -l form); "-inf" bans the token */
        char *end;
        long id = strtol(p, &end, 10);
        double v = 0;
        if (end == p || id < 0 || id > INT32_MAX || (*end != '+' && *end != '-'))
            goto bad;
        const char *q = end;
        if (!strncmp(q + 1, "inf", 3)) {
            v = *q == '-' ? -INFINITY : 100;
            end = (char *)q + 4;
        } else {
            v = strtod(q, &end);
            if (end == q + 1 || !isfinite(v) || v < -100 || v > 100)
                goto bad;
        }
        if (*end && *end != ',')
            goto bad;
        b[n].token = (int32_t)id;
        b[n].bias = v <= -100 ? -INFINITY : (float)v;
        n++;
        p = *end ? end + 1 : end;
        continue;
    bad:
        free(b);
        return omni_fail(err, errlen, OMNI_ERR_ARG,
                         "--logit-bias: '%.60s' is not TOKEN_ID+BIAS or TOKEN_ID-BIAS "
                         "(BIAS in -100..100 or inf), comma-separated", p);
    }
    apireq_default_bias = b;
    apireq_n_default_bias = n;
    return 0;
}

/* The server's default biases after the request's own (which win for the
 * same token); ids past this model's vocabulary are skipped. */
static int apireq_add_default_bias(struct apireq_gen *g, int n_vocab, struct api_error *e)
{
    if (!apireq_n_default_bias)
        return 0;
    int n = g->sp.n_logit_bias;
    struct sampler_logit_bias *nb = realloc(g->bias, (size_t)(n + apireq_n_default_bias) * sizeof *nb);
    if (!nb)
        return api_error_set(e, 500, NULL, "out of memory");
    g->bias = nb;
    for (int i = 0; i < apireq_n_default_bias; i++) {
        const struct sampler_logit_bias *d = &apireq_default_bias[i];
        bool given = false;
        for (int k = 0; k < g->sp.n_logit_bias; k++)
            given |= nb[k].token == d->token;
        if (!given && (n_vocab <= 0 || d->token < n_vocab))
            nb[n++] = *d;
    }
    g->sp.logit_bias = nb;
    g->sp.n_logit_bias = n;
    return 0;
}

int apireq_sampling(const cJSON *root, enum api_flavor f, bool completions, int n_vocab,
                    struct apireq_gen *g, struct api_error *e)
{
    double d;
    long l;
    bool b;
    int r;
    double temp_hi = f == API_ANTHROPIC ? 1.0 : 2.0;
    if ((r = apireq_number(root, "temperature", 0, temp_hi, &d, e)) < 0) return -1;
    if (r) g->sp.temperature = (float)d;
    if ((r = apireq_number(root, "top_p", 0, 1, &d, e)) < 0) return -1;
    if (r) g->sp.top_p = (float)d;
    if ((r = apireq_int(root, "top_k", -1, 1L << 30, &l, e)) < 0) return -1;
    if (r) g->sp.top_k = (int)l;
    if ((r = apireq_bool(root, "stream", &b, e)) < 0) return -1;
    if (r) g->stream = b;
    if ((r = apireq_number(root, "timeout", 0, 86400 * 7, &d, e)) < 0) return -1;
    if (r) g->timeout_s = d;

    if (f == API_ANTHROPIC) {
        r = apireq_int(root, "max_tokens", 1, 1L << 30, &l, e);
        if (r < 0)
            return -1;
        if (r == 0)
            return api_error_set(e, 400, "max_tokens", "'max_tokens' is required");
        g->max_tokens = (int)l;
        g->max_tokens_set = true;
        if (apireq_stops(root, "stop_sequences", false, g, e) < 0)
            return -1;
        return apireq_add_default_bias(g, n_vocab, e);
    }

    if ((r = apireq_number(root, "min_p", 0, 1, &d, e)) < 0) return -1;
    if (r) g->sp.min_p = (float)d;
    if ((r = apireq_number(root, "presence_penalty", -2, 2, &d, e)) < 0) return -1;
    if (r) g->sp.presence_penalty = (float)d;
    if ((r = apireq_number(root, "frequency_penalty", -2, 2, &d, e)) < 0) return -1;
    if (r) g->sp.frequency_penalty = (float)d;
    if ((r = apireq_number(root, "repetition_penalty", 0.01, 100, &d, e)) < 0) return -1;
    if (r) g->sp.repetition_penalty = (float)d;
    if ((r = apireq_number(root, "seed", 0, 9007199254740991.0, &d, e)) < 0) return -1;
    if (r) {
        if (d != floor(d))
            return api_error_set(e, 400, "seed", "'seed' must be an integer, got %g", d);
        g->sp.seed = (uint64_t)d;
    }
    if ((r = apireq_int(root, "n", 1, APIREQ_MAX_N, &l, e)) < 0) return -1;
    if (r) g->n = (int)l;
    const char *mt = completions ? "max_tokens" : "max_completion_tokens";
    /* 0 would be a request for nothing (llama.cpp and vLLM refuse it too);
     * absent means up to the end of the context. */
    if ((r = apireq_int(root, mt, 1, 1L << 30, &l, e)) < 0) return -1;
    if (r == 0 && !completions && (r = apireq_int(root, "max_tokens", 1, 1L << 30, &l, e)) < 0)
        return -1;
    if (r) {
        g->max_tokens = (int)l;
        g->max_tokens_set = true;
    }
    if (completions) {
        /* The legacy route: "logprobs" is how many alternatives to list. */
        if ((r = apireq_int(root, "logprobs", 0, 5, &l, e)) < 0) return -1;
        if (r) {
            g->logprobs = true;
            g->top_logprobs = (int)l;
        }
    } else {
        if ((r = apireq_bool(root, "logprobs", &b, e)) < 0) return -1;
        if (r) g->logprobs = b;
        if ((r = apireq_int(root, "top_logprobs", 0, SAMPLER_MAX_LOGPROBS, &l, e)) < 0) return -1;
        if (r) {
            if (!g->logprobs && l > 0)
                return api_error_set(e, 400, "top_logprobs", "'top_logprobs' needs 'logprobs': true");
            g->top_logprobs = (int)l;
        }
    }
    if (g->logprobs)
        g->sp.n_logprobs = g->top_logprobs;
    const cJSON *so = apireq_get(root, "stream_options");
    if (so) {
        if (!cJSON_IsObject(so))
            return api_error_set(e, 400, "stream_options", "'stream_options' must be an object, got %s",
                                 apireq_kind(so));
        if (!g->stream)
            return api_error_set(e, 400, "stream_options", "'stream_options' is only allowed with 'stream': true");
        if (apireq_bool(so, "include_usage", &g->include_usage, e) < 0) {
            snprintf(e->param, sizeof e->param, "stream_options.include_usage");
            return -1;
        }
    }
    const char *user;
    if (apireq_string(root, "user", &user, e) < 0)
        return -1;
    if (apireq_stops(root, "stop", true, g, e) < 0 || apireq_logit_bias(root, n_vocab, g, e) < 0)
        return -1;
    return apireq_add_default_bias(g, n_vocab, e);
}

int apireq_text_content(const cJSON *content, const char *field, char **out, struct api_error *e)
{
    *out = NULL;
    if (!content || cJSON_IsNull(content)) {
        *out = strdup("");
    } else if (cJSON_IsString(content)) {
        *out = strdup(content->valuestring);
    } else if (cJSON_IsArray(content)) {
        size_t total = 0;
        const cJSON *p;
        int i = 0;
        cJSON_ArrayForEach(p, content) {
            const cJSON *type = cJSON_GetObjectItemCaseSensitive(p, "type");
            const cJSON *text = cJSON_GetObjectItemCaseSensitive(p, "text");
            if (!cJSON_IsObject(p) || !cJSON_IsString(type))
                return api_error_set(e, 400, field, "'%s[%d]' must be an object with a 'type'",
                                     field, i);
            if (strcmp(type->valuestring, "text") != 0)
                return api_error_set(e, 400, field,
                                     "'%s[%d]': content type '%s' is not supported by this model (text only)",
                                     field, i, type->valuestring);
            if (!cJSON_IsString(text))
                return api_error_set(e, 400, field, "'%s[%d].text' must be a string", field, i);
            total += strlen(text->valuestring) + 1;
            i++;
        }
        char *s = malloc(total + 1);
        if (s) {
            size_t n = 0;
            cJSON_ArrayForEach(p, content) {
                const char *t = cJSON_GetObjectItemCaseSensitive(p, "text")->valuestring;
                if (n)
                    s[n++] = '\n';
                size_t tl = strlen(t);
                memcpy(s + n, t, tl);
                n += tl;
            }
            s[n] = 0;
        }
        *out = s;
    } else {
        return api_error_set(e, 400, field, "'%s' must be a string or an array of content parts, got %s",
                             field, apireq_kind(content));
    }
    if (!*out)
        return api_error_set(e, 500, NULL, "out of memory");
    return 0;
}

/* Compare in time that depends only on the lengths, never on where the
 * first difference is. */
static bool apireq_ct_equal(const char *a, size_t alen, const char *b, size_t blen)
{
    unsigned diff = (unsigned)(alen ^ blen);
    for (size_t i = 0; i < blen; i++)
        diff |= (unsigned char)(b[i] ^ a[alen ? i % alen : 0]);
    return alen > 0 && diff == 0;
}

bool apireq_key_ok(const char *authorization, const char *x_api_key, const char *key)
{
    size_t klen = strlen(key);
    bool ok = false;
    if (authorization && !strncasecmp(authorization, "Bearer ", 7)) {
        const char *t = authorization + 7;
        while (*t == ' ')
            t++;
        ok |= apireq_ct_equal(t, strlen(t), key, klen);
    }
    if (x_api_key)
        ok |= apireq_ct_equal(x_api_key, strlen(x_api_key), key, klen);
    return ok;
}

/* The media type of a Content-Type value: *len bytes from the returned
 * pointer, without leading/trailing blanks and parameters. */
static const char *apireq_media_type(const char *ct, size_t *len)
{
    while (*ct == ' ' || *ct == '\t')
        ct++;
    size_t n = strcspn(ct, ";");
    while (n > 0 && (ct[n - 1] == ' ' || ct[n - 1] == '\t'))
        n--;
    *len = n;
    return ct;
}

bool apireq_content_type_ok(const char *content_type, enum apireq_body want)
{
    if (want == APIREQ_BODY_ANY)
        return true;
    if (!content_type)
        return false;
    size_t n;
    const char *t = apireq_media_type(content_type, &n);
    if (want == APIREQ_BODY_MULTIPART)
        return n == 19 && !strncasecmp(t, "multipart/form-data", n);
    if (n == 16 && !strncasecmp(t, "application/json", n))
        return true;
    /* application/<subtype>+json: a structured-syntax suffix (RFC 6839) */
    return n > 17 && !strncasecmp(t, "application/", 12) && !strncasecmp(t + n - 5, "+json", 5) &&
           !memchr(t + 12, '/', n - 12) && !memchr(t, ' ', n);
}

// ---- constrained output ---------------------------------------------------------

/* Compile GBNF text into *out; a 400 on param when it does not parse or
 * passes a limit of grammar_default_limits() (the message names it). */
static int apireq_compile(char *gbnf, const char *param, struct grammar **out,
                          struct api_error *e)
{
    if (!gbnf)
        return api_error_set(e, 500, NULL, "out of memory");
    char err[256];
    int code;
    *out = grammar_parse_limits(gbnf, strlen(gbnf), NULL, err, sizeof err, &code);
    free(gbnf);
    return *out ? 0 : api_error_set(e, code == OMNI_ERR_NOMEM ? 500 : 400, param, "'%s': %s", param, err);
}

int apireq_engine_error_status(const char *error)
{
    /* the wording comes from grammar_matcher_error and the engine's sampling
     * (seq_sample in src/engine/engine.c) */
    return error && (strstr(error, "grammar: limit: ") || strstr(error, "every token is banned"))
               ? 400 : 500;
}

int apireq_grammar(const cJSON *root, struct grammar **out, struct api_error *e)
{
    *out = NULL;
    const char *text = NULL;
    if (apireq_string(root, "grammar", &text, e) < 0)
        return -1;
    if (text && *text)
        return apireq_compile(strdup(text), "grammar", out, e);
    const cJSON *rf = cJSON_GetObjectItemCaseSensitive(root, "response_format");
    if (!rf || cJSON_IsNull(rf))
        return 0;
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(rf, "type");
    if (!cJSON_IsObject(rf) || !cJSON_IsString(type))
        return api_error_set(e, 400, "response_format",
                             "'response_format' must be an object with a string 'type'");
    if (!strcmp(type->valuestring, "text"))
        return 0;
    if (!strcmp(type->valuestring, "json_object"))
        return apireq_compile(jschema_object_gbnf(), "response_format", out, e);
    if (strcmp(type->valuestring, "json_schema") != 0)
        return api_error_set(e, 400, "response_format",
                             "'response_format.type' must be text, json_object or json_schema, "
                             "got '%s'", type->valuestring);
    const cJSON *js = cJSON_GetObjectItemCaseSensitive(rf, "json_schema");
    const cJSON *schema = cJSON_GetObjectItemCaseSensitive(js, "schema");
    if (!cJSON_IsObject(js) || !schema)
        return api_error_set(e, 400, "response_format.json_schema",
                             "'response_format.json_schema.schema' is required for type "
                             "json_schema");
    char err[256];
    char *gbnf = jschema_to_gbnf(schema, err, sizeof err);
    if (!gbnf)
        return api_error_set(e, 400, "response_format.json_schema.schema", "%s", err);
    return apireq_compile(gbnf, "response_format.json_schema.schema", out, e);
}

int apireq_tool_grammar(const cJSON *root, const struct tools_wire *wire, bool parallel,
                        struct grammar **out, const char **trigger, struct api_error *e)
{
    *out = NULL;
    *trigger = NULL;
    const cJSON *tools = cJSON_GetObjectItemCaseSensitive(root, "tools");
    const cJSON *tc = cJSON_GetObjectItemCaseSensitive(root, "tool_choice");
    const char *name = NULL;
    char err[256];
    if (cJSON_IsObject(tc)) {
        const cJSON *fn = cJSON_GetObjectItemCaseSensitive(tc, "function");
        const cJSON *n = cJSON_GetObjectItemCaseSensitive(fn, "name");
        if (!cJSON_IsString(n))
            return api_error_set(e, 400, "tool_choice",
                                 "'tool_choice.function.name' must be a string");
        name = n->valuestring;
    } else if (!cJSON_IsString(tc) || strcmp(tc->valuestring, "required") != 0) {
        /* auto: free text, and the call grammar from the format's call marker
         * on (lazy); a schema it cannot compile just leaves the call free */
        if (!cJSON_IsArray(tools) || !cJSON_GetArraySize(tools) || !wire->trigger || !*wire->trigger ||
            (cJSON_IsString(tc) && !strcmp(tc->valuestring, "none")))
            return 0;
        char *gbnf = jschema_tool_call_gbnf(tools, NULL, wire, parallel, err, sizeof err);
        *out = gbnf ? grammar_parse(gbnf, strlen(gbnf), err, sizeof err) : NULL;
        free(gbnf);
        if (*out)
            *trigger = wire->trigger;
        return 0;
    }
    if (!cJSON_IsArray(tools) || !cJSON_GetArraySize(tools))
        return api_error_set(e, 400, "tool_choice", "'tool_choice' %s needs 'tools'",
                             name ? "naming a function" : "'required'");
    char *gbnf = jschema_tool_call_gbnf(tools, name, wire, parallel, err, sizeof err);
    if (!gbnf)
        return api_error_set(e, 400, name ? "tool_choice" : "tools", "%s", err);
    return apireq_compile(gbnf, "tools", out, e);
}
