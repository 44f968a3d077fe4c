/* test_grammar_close.c - closing a grammar within a token budget (issue 15
 * item 4, forced tool calls that stop): the shortest-completion distance of
 * matcher states on hand-made grammars (recursion, saturation, grammars that
 * cannot end), byte walks along the distance that complete forced tool calls
 * of every call format into valid JSON, the closing mask against a
 * brute-force reference on the real Qwen2 vocabulary, budgeted sampling from
 * random logits that always ends complete in time, and the engine ending a
 * rambling call (forced and lazy) with STOP inside max_tokens. */
#include "test.h"

#include "llm/grammar/grammar.h"
#include "llm/grammar/json_schema.h"
#include "llm/model.h"
#include "llm/tokenizer.h"
#include "llm/tools/tools.h"
#include "src/core/gguf.h"
#include "src/core/omni.h"
#include "src/engine/engine.h"

#include <cjson/cJSON.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>

static struct grammar *parse(const char *text)
{
    char err[256];
    struct grammar *g = grammar_parse(text, strlen(text), err, sizeof err);
    if (!g)
        fprintf(stderr, "grammar error: %s\n", err);
    return g;
}

/* Distance of g's state after prefix (GRAMMAR_NO_END also when prefix is
 * not taken). */
static int32_t dist_after(struct grammar *g, const char *prefix, size_t len)
{
    char err[256];
    struct grammar_matcher *m = grammar_matcher_new(g, NULL, err, sizeof err);
    int32_t d = GRAMMAR_NO_END;
    if (m && grammar_matcher_accept_bytes(m, prefix, len) == 0)
        d = grammar_matcher_distance(m);
    grammar_matcher_free(m);
    return d;
}

TEST(grammar_close_distance_of_small_grammars)
{
    struct grammar *g = parse("root ::= \"ab\" \"c\"?\n");
    CHECK(g);
    CHECK_EQ(dist_after(g, "", 0), 2);
    CHECK_EQ(dist_after(g, "a", 1), 1);
    CHECK_EQ(dist_after(g, "ab", 2), 0);
    CHECK_EQ(dist_after(g, "abc", 3), 0);
    grammar_free(g);
    /* recursion: the shortest way out of a, wherever it is entered */
    g = parse("root ::= \"x\" a \"!\"\na ::= \"yy\" | \"z\" a\n");
    CHECK(g);
    CHECK_EQ(dist_after(g, "", 0), 4);       /* x yy ! */
    CHECK_EQ(dist_after(g, "xz", 2), 3);
    CHECK_EQ(dist_after(g, "xzzz", 4), 3);
    CHECK_EQ(dist_after(g, "xzy", 3), 2);
    grammar_free(g);
    /* repetitions and optional groups are nullable: 0 bytes */
    g = parse("root ::= \"[\" (\"a\" (\",\" \"a\")*)? \"]\"\n");
    CHECK(g);
    CHECK_EQ(dist_after(g, "", 0), 2);
    CHECK_EQ(dist_after(g, "[a,", 3), 2);
    CHECK_EQ(dist_after(g, "[a,a", 4), 1);
    grammar_free(g);
    /* a grammar that cannot end has no distance */
    g = parse("root ::= \"a\" root\n");
    CHECK(g);
    CHECK_EQ(dist_after(g, "aaa", 3), GRAMMAR_NO_END);
    grammar_free(g);
    /* an alternative that cannot end does not count */
    g = parse("root ::= loop | \"abc\"\nloop ::= \"x\" loop\n");
    CHECK(g);
    CHECK_EQ(dist_after(g, "", 0), 3);
    CHECK_EQ(dist_after(g, "x", 1), GRAMMAR_NO_END);
    grammar_free(g);
}

/* r0 ::= r1 r1, r1 ::= r2 r2, ... : 2^levels bytes, saturating instead of
 * overflowing past INT32_MAX. */
TEST(grammar_close_lengths_saturate)
{
    for (int levels = 20; levels <= 40; levels += 20) {
        char *out = malloc((size_t)levels * 40 + 64);
        CHECK(out);
        size_t k = (size_t)sprintf(out, "root ::= r1 r1\n");
        for (int i = 1; i < levels; i++)
            k += (size_t)sprintf(out + k, "r%d ::= r%d r%d\n", i, i + 1, i + 1);
        sprintf(out + k, "r%d ::= \"a\"\n", levels);
        struct grammar *g = parse(out);
        free(out);
        CHECK(g);
        const int32_t d = dist_after(g, "", 0);
        if (levels == 20)
            CHECK_EQ(d, 1 << 20);
        else
            CHECK_EQ(d, GRAMMAR_NO_END);
        grammar_free(g);
    }
}

// ---- byte walks along the distance --------------------------------------------

/* Complete prefix along the distance: each step a byte the grammar takes
 * whose state is one byte closer to the end (the usual closers tried
 * first, to keep the replays few). The completion is appended to out; its
 * length must equal the distance. -1 when a step finds no such byte. */
static int close_by_bytes(struct grammar *g, const char *prefix, char *out, size_t cap)
{
    static const char closers[] = "\"}]>\n,:0 abcdefghijklmnopqrstuvwxyz";
    size_t n = strlen(prefix);
    if (n + 1 > cap)
        return -1;
    memcpy(out, prefix, n + 1);
    char err[256];
    struct grammar_matcher *m = grammar_matcher_new(g, NULL, err, sizeof err);
    if (!m || grammar_matcher_accept_bytes(m, out, n) != 0) {
        grammar_matcher_free(m);
        return -1;
    }
    int32_t d = grammar_matcher_distance(m);
    while (d > 0 && d != GRAMMAR_NO_END && n + 2 <= cap) {
        uint32_t set[8];
        if (grammar_matcher_next_bytes(m, set) != 0)
            break;
        int found = -1;
        for (int i = 0; found < 0 && i < (int)sizeof closers - 1 + 256; i++) {
            const int b = i < (int)sizeof closers - 1 ? (unsigned char)closers[i] : i - (int)(sizeof closers - 1);
            if (!(set[b / 32] >> (b % 32) & 1))
                continue;
            out[n] = (char)b;
            if (dist_after(g, out, n + 1) == d - 1)
                found = b;
        }
        if (found < 0)
            break;
        out[n] = (char)found;
        grammar_matcher_accept_bytes(m, out + n, 1);
        out[++n] = 0;
        d--;
    }
    grammar_matcher_free(m);
    return d == 0 ? (int)n : -1;
}

static const char *const tools_text =
    "[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"parameters\":{\"type\":\"object\","
    "\"properties\":{\"city\":{\"type\":\"string\"},\"days\":{\"type\":\"integer\",\"minimum\":1,\"maximum\":14},"
    "\"where\":{\"type\":\"object\",\"properties\":{\"lat\":{\"type\":\"number\"},\"lon\":{\"type\":\"number\"}},"
    "\"required\":[\"lat\",\"lon\"]},\"tags\":{\"type\":\"array\",\"items\":{\"type\":\"string\"}}},"
    "\"required\":[\"city\",\"days\",\"where\"]}}},"
    "{\"type\":\"function\",\"function\":{\"name\":\"add\",\"parameters\":{\"type\":\"object\","
    "\"properties\":{\"a\":{\"type\":\"number\"},\"b\":{\"type\":\"number\"}},\"required\":[\"a\",\"b\"]}}}]";

static struct grammar *tool_grammar(enum tools_format f, bool parallel, struct tools_wire *w)
{
    char err[256];
    cJSON *tools = cJSON_Parse(tools_text);
    tools_wire_of(f, w);
    char *gbnf = tools ? jschema_tool_call_gbnf(tools, NULL, w, parallel, err, sizeof err) : NULL;
    cJSON_Delete(tools);
    if (!gbnf) {
        fprintf(stderr, "tool grammar: %s\n", err);
        return NULL;
    }
    struct grammar *g = grammar_parse(gbnf, strlen(gbnf), err, sizeof err);
    free(gbnf);
    return g;
}

/* The calls in text, as the format's parser reads them; each must have the
 * required keys of its tool with the right types. Returns how many, -1 for
 * a bad call. */
struct calls_seen { int n, bad; char args[4][512]; char name[4][32]; };

static void on_call(void *user, const struct tools_event *ev)
{
    struct calls_seen *c = user;
    if (ev->type == TOOLS_EV_CALL_START && c->n < 4) {
        snprintf(c->name[c->n], sizeof c->name[0], "%s", ev->name);
        c->args[c->n][0] = 0;
        c->n++;
    } else if (ev->type == TOOLS_EV_CALL_ARGS && ev->index < 4 && ev->index == c->n - 1) {
        size_t l = strlen(c->args[ev->index]);
        snprintf(c->args[ev->index] + l, sizeof c->args[0] - l, "%.*s", (int)ev->len, ev->text);
    }
}

static bool args_valid(const char *name, const char *args)
{
    cJSON *a = cJSON_Parse(args);
    bool ok = cJSON_IsObject(a);
    if (ok && !strcmp(name, "get_weather")) {
        const cJSON *days = cJSON_GetObjectItemCaseSensitive(a, "days");
        const cJSON *where = cJSON_GetObjectItemCaseSensitive(a, "where");
        ok = cJSON_IsString(cJSON_GetObjectItemCaseSensitive(a, "city")) && cJSON_IsNumber(days) &&
             days->valuedouble == (double)(int)days->valuedouble && days->valuedouble >= 1 &&
             days->valuedouble <= 14 && cJSON_IsObject(where) &&
             cJSON_IsNumber(cJSON_GetObjectItemCaseSensitive(where, "lat")) &&
             cJSON_IsNumber(cJSON_GetObjectItemCaseSensitive(where, "lon"));
    } else if (ok) {
        ok = !strcmp(name, "add") && cJSON_IsNumber(cJSON_GetObjectItemCaseSensitive(a, "a")) &&
             cJSON_IsNumber(cJSON_GetObjectItemCaseSensitive(a, "b"));
    }
    cJSON_Delete(a);
    return ok;
}

static int parsed_calls(enum tools_format f, bool parallel, const char *text, struct calls_seen *c)
{
    struct tools_parser_params pp = tools_parser_default_params();
    pp.fmt = f;
    pp.tools_json = tools_text;
    pp.parallel = parallel;
    pp.id_seed = 1;
    struct tools_parser *p = tools_parser_new(&pp);
    if (!p)
        return -1;
    memset(c, 0, sizeof *c);
    tools_parser_feed(p, text, strlen(text), on_call, c);
    tools_parser_finish(p, on_call, c);
    tools_parser_free(p);
    for (int i = 0; i < c->n; i++)
        if (!args_valid(c->name[i], c->args[i]))
            return -1;
    return c->n;
}

/* Prefixes cut everywhere a rambling model leaves a call: inside the name,
 * a free string, a number, a nested object, an array, between calls. The
 * byte walk closes each in exactly its distance, into text the format's
 * parser reads as valid calls. */
TEST(grammar_close_completes_tool_calls_of_every_format)
{
    for (int f = 0; f < TOOLS_FMT_COUNT; f++) {
        if (f == TOOLS_FMT_NONE)
            continue;
        for (int parallel = 0; parallel < 2; parallel++) {
            struct tools_wire w;
            struct grammar *g = tool_grammar((enum tools_format)f, parallel, &w);
            CHECK_MSG(g, "format %s", tools_format_name((enum tools_format)f));
            char head[256], pre[1024];
            snprintf(head, sizeof head, "%s%s{\"%s\": \"", w.list_open, w.call_open, w.name_key);
            const char *tails[] = {
                "",
                "get_",
                "get_weather\", \"ARGS\": {\"city\": \"Once upon a time there was",
                "get_weather\", \"ARGS\": {\"city\": \"x\", \"days\": 1",
                "get_weather\", \"ARGS\": {\"city\": \"x\", \"days\": 12, \"where\": {\"lat\": -3.25",
                "get_weather\", \"ARGS\": {\"city\": \"x\", \"days\": 12, \"where\": {\"lat\": 1, \"lon\": 2}, "
                "\"tags\": [\"a\", \"b",
                "add\", \"ARGS\": {\"a\": 1e",
                "add\", \"ARGS\": {\"a\": 1, \"b\": 2}}",
            };
            for (size_t t = 0; t < sizeof tails / sizeof *tails; t++) {
                /* the format's own arguments key */
                char tail[512];
                const char *at = strstr(tails[t], "ARGS");
                if (at)
                    snprintf(tail, sizeof tail, "%.*s%s%s", (int)(at - tails[t]), tails[t], w.args_key, at + 4);
                else
                    snprintf(tail, sizeof tail, "%s", tails[t]);
                snprintf(pre, sizeof pre, "%s%s", head, tail);
                const int32_t d = dist_after(g, pre, strlen(pre));
                CHECK_MSG(d != GRAMMAR_NO_END, "%s: prefix '%s' not taken", tools_format_name((enum tools_format)f), pre);
                char done[2048];
                const int n = close_by_bytes(g, pre, done, sizeof done);
                CHECK_MSG(n == (int)strlen(pre) + d, "%s: '%s' closed in %d bytes, distance %d",
                          tools_format_name((enum tools_format)f), pre, n - (int)strlen(pre), d);
                CHECK_MSG(grammar_match(g, done, (size_t)n), "'%s'", done);
                struct calls_seen c;
                const int k = parsed_calls((enum tools_format)f, parallel, done, &c);
                CHECK_MSG(k == 1, "%s: '%s' reads as %d valid calls", tools_format_name((enum tools_format)f), done, k);
            }
            grammar_free(g);
        }
    }
}

// ---- masks on the real vocabulary ---------------------------------------------

static struct tokenizer *qwen_tok(void)
{
    char err[256];
    struct gguf *f = gguf_open(test_shared("vocab/ggml-vocab-qwen2.gguf"), err, sizeof err);
    if (!f)
        return NULL;
    struct tokenizer *t = tokenizer_from_gguf(f, err, sizeof err);
    gguf_free(f);
    return t;
}

/* The closing mask after prefix against a brute-force reference: token t
 * is allowed exactly when prefix + piece(t) is taken and its distance is
 * the prefix's minus the piece's length (end tokens: when the prefix may
 * end). Every stride-th token is checked. Returns how many tokens of the
 * whole vocabulary the mask allows, -1 for a mismatch. */
static int closing_brute_check(struct grammar *g, const struct grammar_vocab *v,
                               const struct tokenizer *tok, const char *prefix, int stride)
{
    char err[256];
    struct grammar_matcher *m = grammar_matcher_new(g, v, err, sizeof err);
    if (!m || grammar_matcher_accept_bytes(m, prefix, strlen(prefix)) != 0)
        return -1;
    const int32_t d = grammar_matcher_distance(m);
    const uint32_t *mask = grammar_matcher_mask_closing(m);
    if (!mask)
        return -1;
    const int n = tokenizer_n_vocab(tok);
    const size_t pl = strlen(prefix);
    int bad = 0, allowed = 0;
    char buf[2048];
    for (int t = 0; t < n; t++) {
        const bool eog = tokenizer_is_eog(tok, t);
        if (t % stride && !eog)
            continue;
        bool want = false;
        if (eog) {
            want = d == 0;
        } else {
            memcpy(buf, prefix, pl);
            size_t len = tokenizer_piece(tok, t, false, buf + pl, sizeof buf - pl);
            if (len > 0 && len < sizeof buf - pl)
                want = dist_after(g, buf, pl + len) == d - (int32_t)len;
        }
        const bool got = mask[t / 32] >> (t % 32) & 1;
        if (got != want && bad++ < 5)
            fprintf(stderr, "prefix '%s' token %d (%s): closing mask %d, reference %d\n", prefix, t,
                    tokenizer_token_text(tok, t), got, want);
    }
    for (int t = 0; t < n; t++)
        allowed += mask[t / 32] >> (t % 32) & 1;
    grammar_matcher_free(m);
    return bad ? -1 : allowed;
}

TEST(grammar_close_mask_matches_brute_force_on_qwen2_vocab)
{
    SKIP_IF_NO_SHARED();
    struct tokenizer *tok = qwen_tok();
    CHECK(tok);
    char err[256];
    struct grammar_vocab *v = grammar_vocab_new(tok, err, sizeof err);
    CHECK(v);
    struct tools_wire w;
    struct grammar *g = tool_grammar(TOOLS_FMT_HERMES, true, &w);
    CHECK(g);
    static const char *const prefixes[] = {
        "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Once upon",
        "<tool_call>\n{\"name\": \"add\", \"arguments\": {\"a\": 12",
        "<tool_call>\n{\"name\": \"add\", \"arguments\": {\"a\": 1, \"b\": 2}}\n</tool_call>",
        "<tool_call>\n{\"name\": \"add\", \"arguments\": {\"a\": 1, \"b\": 2}}\n</tool_call>\n<tool_call>\n{\"na",
    };
    for (size_t i = 0; i < sizeof prefixes / sizeof *prefixes; i++) {
        const int r = closing_brute_check(g, v, tok, prefixes[i], 11);
        CHECK_MSG(r >= 1, "prefix '%s': %d", prefixes[i], r);
    }
    grammar_free(g);
    grammar_vocab_free(v);
    tokenizer_free(tok);
}

/* Near the limit nothing new is opened: after a complete call of a parallel
 * list, a further call may start only while a shortest one still fits, and
 * an optional key only while its shortest value does; what is open may
 * still go on (a string keeps its characters) until the end must come. */
TEST(grammar_close_opens_nothing_new_near_the_limit)
{
    SKIP_IF_NO_SHARED();
    struct tokenizer *tok = qwen_tok();
    CHECK(tok);
    char err[256];
    struct grammar_vocab *v = grammar_vocab_new(tok, err, sizeof err);
    CHECK(v);
    struct tools_wire w;
    struct grammar *g = tool_grammar(TOOLS_FMT_JSON, true, &w);
    CHECK(g);
    const int n = tokenizer_n_vocab(tok);
    float *logits = calloc((size_t)n, sizeof *logits);
    CHECK(logits);
    const int32_t comma = tokenizer_find(tok, ",", 1), close = tokenizer_find(tok, "]", 1);
    const int32_t x = tokenizer_find(tok, "x", 1), quote = tokenizer_find(tok, "\"", 1);
    CHECK(comma >= 0 && close >= 0 && x >= 0 && quote >= 0);
    static const char *const after_call = "[{\"name\": \"add\", \"arguments\": {\"a\": 1, \"b\": 2}}";
    static const char *const in_city =
        "[{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Par";
    struct { const char *prefix; int left; int32_t tok; bool want; } cases[] = {
        { after_call, 400, comma, true },   /* room for another call */
        { after_call, 400, close, true },
        { after_call, 12, comma, false },   /* no room: the list can only end */
        { after_call, 12, close, true },
        { after_call, 2, close, true },     /* "]" and the end token */
        { in_city, 400, x, true },
        { in_city, 60, x, true },           /* near, but the string may go on */
        { in_city, 60, quote, true },
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        struct grammar_matcher *m = grammar_matcher_new(g, v, err, sizeof err);
        CHECK(m);
        CHECK_EQ(grammar_matcher_accept_bytes(m, cases[i].prefix, strlen(cases[i].prefix)), 0);
        const float *out = grammar_matcher_apply_budget(m, logits, cases[i].left);
        CHECK(out);
        CHECK_MSG((out[cases[i].tok] > -INFINITY) == cases[i].want, "case %zu: token %s with %d left",
                  i, tokenizer_token_text(tok, cases[i].tok), cases[i].left);
        grammar_matcher_free(m);
    }
    /* the closing distance of that string: every token after it fits */
    struct grammar_matcher *m = grammar_matcher_new(g, v, err, sizeof err);
    CHECK(m);
    CHECK_EQ(grammar_matcher_accept_bytes(m, in_city, strlen(in_city)), 0);
    const int32_t d = grammar_matcher_distance(m);
    const float *out = grammar_matcher_apply_budget(m, logits, d + 1);
    CHECK(out && out[quote] > -INFINITY && !(out[x] > -INFINITY));  /* only the way out */
    grammar_matcher_free(m);
    free(logits);
    grammar_free(g);
    grammar_vocab_free(v);
    tokenizer_free(tok);
}

/* Sampling the argmax of random logits through grammar_matcher_apply_budget:
 * with any budget that covers the start's distance and an end token, the
 * output ends complete (an end token, or nothing may follow) within it and
 * reads as valid calls; a budget short of that still never breaks the
 * grammar. */
TEST(grammar_close_budgeted_sampling_ends_in_time)
{
    SKIP_IF_NO_SHARED();
    struct tokenizer *tok = qwen_tok();
    CHECK(tok);
    char err[256];
    struct grammar_vocab *v = grammar_vocab_new(tok, err, sizeof err);
    CHECK(v);
    const int n_vocab = tokenizer_n_vocab(tok);
    float *logits = malloc((size_t)n_vocab * sizeof *logits);
    CHECK(logits);
    for (int fi = 0; fi < 3; fi++) {
        const enum tools_format f = fi == 0 ? TOOLS_FMT_JSON : fi == 1 ? TOOLS_FMT_HERMES : TOOLS_FMT_MISTRAL;
        struct tools_wire w;
        struct grammar *g = tool_grammar(f, true, &w);
        CHECK(g);
        for (int budget = 8; budget <= 96; budget += 22) {
            for (uint64_t seed = 1; seed <= 2; seed++) {
                struct grammar_matcher *m = grammar_matcher_new(g, v, err, sizeof err);
                CHECK(m);
                const int32_t d0 = grammar_matcher_distance(m);
                char text[8192];
                size_t len = 0;
                bool ended = false;
                uint64_t rng = seed * 0x9E3779B97F4A7C15ull + (uint64_t)budget;
                for (int left = budget; left > 0 && !ended; left--) {
                    for (int t = 0; t < n_vocab; t++) {
                        rng = rng * 6364136223846793005ull + 1442695040888963407ull;
                        logits[t] = (float)(rng >> 40) / (float)(1 << 24);
                    }
                    const float *out = grammar_matcher_apply_budget(m, logits, left);
                    CHECK(out);
                    int best = -1;
                    for (int t = 0; t < n_vocab; t++)
                        if (out[t] > -INFINITY && (best < 0 || out[t] > out[best]))
                            best = t;
                    CHECK_MSG(best >= 0, "no token allowed with %d left", left);
                    CHECK_EQ(grammar_matcher_accept(m, best), 0);
                    if (tokenizer_is_eog(tok, best)) {
                        ended = true;
                        break;
                    }
                    len += tokenizer_piece(tok, best, false, text + len, sizeof text - len);
                    CHECK(len < sizeof text);
                    ended = grammar_matcher_must_end(m);
                }
                if (budget >= d0 + 1) {
                    text[len] = 0;
                    CHECK_MSG(ended, "%s budget %d: not ended: '%s'", tools_format_name(f), budget, text);
                    CHECK(grammar_match(g, text, len));
                    struct calls_seen c;
                    CHECK_MSG(parsed_calls(f, true, text, &c) >= 1, "%s: '%s'", tools_format_name(f), text);
                }
                grammar_matcher_free(m);
            }
        }
        grammar_free(g);
    }
    free(logits);
    grammar_vocab_free(v);
    tokenizer_free(tok);
}

// ---- the engine ------------------------------------------------------------------

static void free_model(void *m) { llm_model_free(m); }
static void free_engine(void *e) { engine_free(e); }

struct run {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool done;
    enum engine_finish finish;
    int n_tok, errors;
    char text[4096];
    size_t len;
    int32_t force_first;     /* >= 0: the first token, forced */
};

/* The first token of a lazy run: its trigger, exactly at a token boundary. */
static int32_t force_first(void *user, int choice)
{
    struct run *r = user;
    (void)choice;
    int32_t t = r->force_first;
    r->force_first = -1;     /* the engine thread is the only one touching it now */
    return t;
}

static void on_event(void *user, const struct engine_event *ev)
{
    struct run *r = user;
    pthread_mutex_lock(&r->mu);
    if (ev->text_len && r->len + ev->text_len < sizeof r->text) {
        memcpy(r->text + r->len, ev->text, ev->text_len);
        r->len += ev->text_len;
    }
    if (ev->type == ENGINE_EV_TOKEN) {
        r->n_tok++;
    } else {
        r->errors += ev->type == ENGINE_EV_ERROR;
        r->finish = ev->finish;
        r->done = true;
        pthread_cond_broadcast(&r->cv);
    }
    pthread_mutex_unlock(&r->mu);
}

/* Run rq to its end; r gets what came. */
static int run_request(struct engine *e, struct engine_request *rq, struct run *r, int32_t first)
{
    memset(r, 0, sizeof *r);
    r->force_first = first;
    rq->force_token = first >= 0 ? force_first : NULL;
    pthread_mutex_init(&r->mu, NULL);
    pthread_cond_init(&r->cv, NULL);
    rq->on_event = on_event;
    rq->user = r;
    char err[256];
    uint64_t id;
    int rc = engine_submit(e, rq, &id, err, sizeof err);
    if (rc == 0) {
        pthread_mutex_lock(&r->mu);
        while (!r->done)
            pthread_cond_wait(&r->cv, &r->mu);
        pthread_mutex_unlock(&r->mu);
    } else {
        fprintf(stderr, "engine_submit: %s\n", err);
    }
    pthread_mutex_destroy(&r->mu);
    pthread_cond_destroy(&r->cv);
    r->text[r->len] = 0;
    return rc;
}

/* A call whose string the random model never closes by itself: without
 * grammar_close, max_tokens cuts it (LENGTH); with it, every seed ends with
 * STOP inside max_tokens on text the grammar takes whole. The same for a
 * lazy grammar (tool_choice auto) once its trigger came (a forced first
 * token "{", where the vocabulary has it). */
TEST(grammar_close_engine_ends_rambling_calls)
{
    char file[256], err[256];
    snprintf(file, sizeof file, "%s", "llama-f32.gguf");
    struct llm_model *m = llm_model_load(test_golden(file), NULL, err, sizeof err);
    if (!m)
        SKIP("golden fixtures missing (make golden-fixtures)");
    test_defer(free_model, m);
    struct engine_params ep = engine_default_params();
    ep.kv_memory_bytes = 1 << 20;
    struct engine *e = engine_new(&ep, err, sizeof err);
    CHECK(e);
    test_defer(free_engine, e);
    CHECK(engine_add_model(e, m, "m", err, sizeof err) == 0 && engine_start(e, err, sizeof err) == 0);
    /* a long free string, then required keys */
    const char *gbnf =
        "root ::= \"{\\\"city\\\": \\\"\" [^\"\\\\\\x00-\\x1F]* \"\\\", \\\"days\\\": \" [1-9] [0-9]? \"}\"\n";
    struct grammar *g = parse(gbnf);
    CHECK(g);
    const int32_t prompt[] = { 5, 17, 42, 8, 99, 23 };
    const int32_t brace = tokenizer_find(llm_model_tokenizer(m), "{", 1);
    int cut = 0;
    for (int lazy = 0; lazy < 1 + (brace >= 0); lazy++) {
        for (uint64_t seed = 1; seed <= 6; seed++) {
            for (int close = 0; close < 2; close++) {
                struct engine_request rq = engine_default_request();
                rq.prompt = prompt;
                rq.n_prompt = 6;
                rq.max_tokens = 24;
                rq.sampling.temperature = 1.0f;
                rq.sampling.seed = seed;
                rq.ignore_eog = true;        /* a random model's end token would hide the cut */
                rq.grammar = g;
                rq.grammar_trigger = lazy ? "{" : NULL;
                rq.grammar_close = close;
                struct run r;
                CHECK_EQ(run_request(e, &rq, &r, lazy ? brace : -1), 0);
                CHECK_EQ(r.errors, 0);
                CHECK(r.n_tok <= 24);
                if (!close) {
                    cut += r.finish == ENGINE_FINISH_LENGTH;
                    continue;
                }
                CHECK_MSG(r.finish == ENGINE_FINISH_STOP, "seed %llu lazy %d: finish %d: '%s'",
                          (unsigned long long)seed, lazy, (int)r.finish, r.text);
                CHECK_MSG(grammar_match(g, r.text, r.len), "seed %llu lazy %d: '%s'", (unsigned long long)seed,
                          lazy, r.text);
            }
        }
    }
    CHECK_MSG(cut > 0, "no run was cut without grammar_close: the test shows nothing");
    grammar_free(g);
    test_release(e);
}
