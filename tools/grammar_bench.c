/* grammar_bench.c - cost of grammar masking per generated token on a real
 * vocabulary: random generations under a JSON schema (or GBNF), timing
 * grammar_matcher_apply + accept per token, first visits of a state apart.
 *
 *   cc -O2 -I. -I/usr/include/cjson tools/grammar_bench.c build/libomni.a \
 *      $(pkg-config --libs libpcre2-8) -lcjson -lm -pthread -o build/grammar_bench
 *   build/grammar_bench ../shared/vocab/ggml-vocab-qwen2.gguf [--json-schema F | --grammar F]
 *                       [--runs N] [--tokens N] */
#include "llm/grammar/grammar.h"
#include "llm/grammar/json_schema.h"
#include "llm/tokenizer.h"
#include "src/core/gguf.h"
#include "src/core/omni.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *default_schema =
    "{\"type\":\"object\",\"properties\":{"
    "\"name\":{\"type\":\"string\",\"maxLength\":40},"
    "\"age\":{\"type\":\"integer\",\"minimum\":0,\"maximum\":150},"
    "\"email\":{\"type\":\"string\",\"pattern\":\"^[a-z]+@[a-z]+\\\\.com$\"},"
    "\"tags\":{\"type\":\"array\",\"items\":{\"type\":\"string\",\"maxLength\":12},\"maxItems\":4},"
    "\"address\":{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\"},"
    "\"zip\":{\"type\":\"string\",\"pattern\":\"^[0-9]{5}$\"}},\"required\":[\"city\",\"zip\"]},"
    "\"score\":{\"type\":\"number\"},\"active\":{\"type\":\"boolean\"}},"
    "\"required\":[\"name\",\"age\",\"email\",\"tags\",\"address\",\"score\",\"active\"]}";

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = malloc((size_t)n + 1);
    if (s && fread(s, 1, (size_t)n, f) != (size_t)n) {
        free(s);
        s = NULL;
    }
    if (s)
        s[n] = 0;
    fclose(f);
    return s;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s VOCAB.gguf [--json-schema F | --grammar F] [--runs N] [--tokens N]\n", argv[0]);
        return 2;
    }
    const char *schema_file = NULL, *grammar_file = NULL;
    int runs = 5, max_tokens = 400;
    for (int i = 2; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--json-schema"))
            schema_file = argv[i + 1];
        else if (!strcmp(argv[i], "--grammar"))
            grammar_file = argv[i + 1];
        else if (!strcmp(argv[i], "--runs"))
            runs = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--tokens"))
            max_tokens = atoi(argv[i + 1]);
    }
    char err[512];
    struct gguf *f = gguf_open(argv[1], err, sizeof err);
    struct tokenizer *tok = f ? tokenizer_from_gguf(f, err, sizeof err) : NULL;
    gguf_free(f);
    if (!tok) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    char *gbnf;
    if (grammar_file) {
        gbnf = slurp(grammar_file);
    } else {
        char *text = schema_file ? slurp(schema_file) : strdup(default_schema);
        cJSON *s = text ? cJSON_Parse(text) : NULL;
        gbnf = s ? jschema_to_gbnf(s, err, sizeof err) : NULL;
        cJSON_Delete(s);
        free(text);
    }
    struct grammar *g = gbnf ? grammar_parse(gbnf, strlen(gbnf), err, sizeof err) : NULL;
    free(gbnf);
    if (!g) {
        fprintf(stderr, "no grammar: %s\n", err);
        return 1;
    }
    double t0 = omni_time_s();
    struct grammar_vocab *v = grammar_vocab_new(tok, err, sizeof err);
    const double vocab_ms = (omni_time_s() - t0) * 1e3;
    const int n = tokenizer_n_vocab(tok);
    float *logits = malloc((size_t)n * sizeof *logits);
    uint64_t rng = 0x9E3779B97F4A7C15ULL;
    double total_ms = 0, worst_ms = 0;
    long tokens = 0, completed = 0;
    for (int r = 0; r < runs; r++) {
        struct grammar_matcher *m = grammar_matcher_new(g, v, err, sizeof err);
        for (int k = 0; k < max_tokens; k++) {
            /* random logits stand in for a model: the mask decides */
            for (int i = 0; i < n; i++) {
                rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
                logits[i] = (float)(rng >> 40) / (float)(1 << 24);
            }
            double a = omni_time_s();
            const float *out = grammar_matcher_apply(m, logits);
            double ms = (omni_time_s() - a) * 1e3;
            int32_t best = -1; /* the sampler's argmax: not timed */
            for (int i = 0; out && i < n; i++)
                if (!isinf(out[i]) && (best < 0 || out[i] > out[best]))
                    best = i;
            if (best < 0 || tokenizer_is_eog(tok, best)) {
                completed += best >= 0;
                break;
            }
            a = omni_time_s();
            grammar_matcher_accept(m, best);
            ms += (omni_time_s() - a) * 1e3;
            total_ms += ms;
            worst_ms = ms > worst_ms ? ms : worst_ms;
            tokens++;
        }
        grammar_matcher_free(m);
    }
    printf("{\"vocab\":%d,\"trie_ms\":%.1f,\"runs\":%d,\"completed\":%ld,\"tokens\":%ld,"
           "\"mask_ms_per_token\":%.3f,\"worst_token_ms\":%.2f}\n",
           n, vocab_ms, runs, completed, tokens, tokens ? total_ms / (double)tokens : 0.0,
           worst_ms);
    free(logits);
    grammar_vocab_free(v);
    grammar_free(g);
    tokenizer_free(tok);
    return 0;
}
