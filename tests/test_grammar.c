/* test_grammar.c - GBNF parsing (valid grammars and hand-broken ones with
 * their positions), whole-string acceptance, and token masks compared with a
 * brute-force reference on the real Qwen2 vocabulary (151,936 tokens). */
#include "test.h"

#include "llm/grammar/grammar.h"
#include "llm/tokenizer.h"
#include "src/core/gguf.h"
#include "src/core/omni.h"

#include <stdlib.h>

static struct grammar *parse(const char *text)
{
    char err[256];
    struct grammar *g = grammar_parse(text, strlen(text), err, sizeof err);
    if (!g)
        fprintf(stderr, "grammar error: %s\n", err);
    return g;
}

static bool matches(const struct grammar *g, const char *s)
{
    return grammar_match(g, s, strlen(s));
}

TEST(grammar_literals_classes_alternation)
{
    struct grammar *g = parse("root ::= \"a\" [b-d] (\"x\" | \"yz\") [^a-z0-9] . # comment\n");
    CHECK(g);
    CHECK(matches(g, "abx!q"));
    CHECK(matches(g, "adyzZ\xc3\xa9"));     /* "." takes a 2-byte character */
    CHECK(!matches(g, "aex!q"));
    CHECK(!matches(g, "abx5q"));
    CHECK(!matches(g, "abx!"));
    CHECK(!matches(g, "abx!\xc3"));          /* a truncated character never matches */
    grammar_free(g);
}

TEST(grammar_repetitions)
{
    struct grammar *g = parse("root ::= \"a\"* \"b\"+ \"c\"? \"d\"{2} \"e\"{1,3} \"f\"{2,}\n");
    CHECK(g);
    CHECK(matches(g, "bddeff"));
    CHECK(matches(g, "aaabbbcddeeefff"));
    CHECK(!matches(g, "ddeff"));             /* b+ */
    CHECK(!matches(g, "bdeff"));             /* d{2} */
    CHECK(!matches(g, "bddeeeeff"));         /* e{1,3} */
    CHECK(!matches(g, "bddef"));             /* f{2,} */
    grammar_free(g);
    /* repetition applies to the whole last symbol: a literal, a group, a class */
    g = parse("root ::= \"ab\"{2} (\"x\" | \"y\")* [0-9]{0,2}\n");
    CHECK(g);
    CHECK(matches(g, "abab"));
    CHECK(matches(g, "ababxyx12"));
    CHECK(!matches(g, "abb"));
    CHECK(!matches(g, "abab123"));
    grammar_free(g);
}

TEST(grammar_rules_newlines_escapes_unicode)
{
    const char *text =
        "# a comment line\n"
        "root ::= item (\",\" item)*\n"
        "item ::= (\n"
        "    num |\n"
        "    str\n"
        ")\n"
        "num ::= [0-9]+\n"
        "  | \"-\" [0-9]+\n"             /* a leading '|' continues the rule */
        "str ::= \"\\\"\" [^\"\\\\\\n]* \"\\\"\" | [\\u03B1-\\u03C9]{2} | \"\\x41\\t\"\n";
    struct grammar *g = parse(text);
    CHECK(g);
    CHECK(matches(g, "12,-3,\"hi\",\"\""));
    CHECK(matches(g, "\xce\xb1\xcf\x89"));  /* αω */
    CHECK(matches(g, "A\t"));
    CHECK(!matches(g, "\xce\xb1" "a"));
    CHECK(!matches(g, "1,"));
    CHECK(!matches(g, "\"a\nb\""));
    grammar_free(g);
}

TEST(grammar_recursion_and_nullable)
{
    /* right recursion and nested nullables must not blow up */
    struct grammar *g = parse("root ::= list\nlist ::= \"[\" (list | \"x\")? \"]\"\n");
    CHECK(g);
    CHECK(matches(g, "[[[x]]]"));
    CHECK(matches(g, "[]"));
    CHECK(!matches(g, "[[x]"));
    grammar_free(g);
    g = parse("root ::= a? a? a? a? a? a? a? a? a? a? a? a? a? a? a? a? a? a? a? a? \"z\"\n"
              "a ::= \"x\"? \"y\"?\n");
    CHECK(g);
    CHECK(matches(g, "xyxyyz"));
    CHECK(matches(g, "z"));
    grammar_free(g);
}

TEST(grammar_rejects_broken_grammars_with_positions)
{
    static const struct { const char *text, *want; } bad[] = {
        { "root ::= \"a\n", "line 1 col 10: unterminated literal" },
        { "root ::= [a-", "line 1 col 10: unterminated character class" },
        { "root ::= foo\n", "line 1 col 10: undefined rule 'foo'" },
        { "start ::= \"a\"\n", "no rule named 'root'" },
        { "root ::= \"a\"\nroot ::= \"b\"\n", "line 2 col 1: rule 'root' defined twice" },
        { "root ::= (\"a\" | \"b\"\n", "line 1 col 10: group without its closing ')'" },
        { "root \"a\"\n", "line 1 col 6: expected '::=' after rule name 'root'" },
        { "root ::= * \"a\"\n", "line 1 col 10: '*' without a preceding symbol" },
        { "root ::= \"a\"{3,1}\n", "line 1 col 13: repetition {3,1}: maximum below minimum" },
        { "root ::= \"a\"{2\n", "line 1 col 15: expected '}'" },
        { "root ::= [z-a]\n", "line 1 col 13: range end U+0061 below its start U+007A" },
        { "root ::= \"\\q\"\n", "line 1 col 11: unknown escape '\\q'" },
        { "root ::= \"\\x4\"\n", "line 1 col 14: expected 2 hex digits" },
        { "root ::= \"\\uD800\"\n", "not a Unicode scalar value" },
        { "root ::= []\n", "line 1 col 10: empty character class" },
        { "root ::= x\nx ::= x \"a\" | \"b\"\n", "line 2 col 1: rule 'x' is left-recursive" },
        { "root ::= y\ny ::= z? y \"a\"\nz ::= \"q\"\n", "rule 'y' is left-recursive" },
        { "root ::= \"a\"{20000}\n", "repetition count above" },
        { "root ::= \"a\" @\n", "line 1 col 14: unexpected character '@'" },
        { "root ::= \"\xff\"\n", "invalid UTF-8" },
        { "", "no rule named 'root'" },
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        char err[256] = "";
        struct grammar *g = grammar_parse(bad[i].text, strlen(bad[i].text), err, sizeof err);
        CHECK_MSG(!g, "grammar %zu parsed", i);
        CHECK_MSG(strstr(err, bad[i].want), "grammar %zu: '%s' lacks '%s'", i, err, bad[i].want);
    }
}

TEST(grammar_matcher_bytes_and_ends)
{
    struct grammar *g = parse("root ::= \"ab\" \"c\"?\n");
    CHECK(g);
    char err[256];
    struct grammar_matcher *m = grammar_matcher_new(g, NULL, err, sizeof err);
    grammar_free(g); /* the matcher keeps its own reference */
    CHECK(m);
    CHECK(!grammar_matcher_can_end(m));
    uint32_t set[8];
    CHECK(grammar_matcher_next_bytes(m, set) == 0);
    CHECK(set['a' / 32] == 1u << ('a' % 32));
    CHECK(grammar_matcher_accept_bytes(m, "ax", 2) == OMNI_ERR_ARG);
    CHECK(grammar_matcher_accept_bytes(m, "ab", 2) == 0);  /* the failed call changed nothing */
    CHECK(grammar_matcher_can_end(m) && !grammar_matcher_must_end(m));
    CHECK(grammar_matcher_accept_bytes(m, "c", 1) == 0);
    CHECK(grammar_matcher_must_end(m));
    grammar_matcher_free(m);
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

/* Reference: token t is allowed after prefix exactly when a fresh matcher
 * takes prefix + piece(t) (or, for end-of-generation tokens, when the
 * prefix is a complete match). Every stride-th token and every end token
 * is checked. */
static int brute_check(struct grammar *g, const struct grammar_vocab *v,
                       const struct tokenizer *tok, const char *prefix, int stride)
{
    char err[256];
    struct grammar_matcher *m = grammar_matcher_new(g, v, err, sizeof err);
    if (!m || grammar_matcher_accept_bytes(m, prefix, strlen(prefix)) != 0)
        return -1;
    const uint32_t *mask = grammar_matcher_mask(m);
    if (!mask)
        return -1;
    const int n = tokenizer_n_vocab(tok);
    int bad = 0, allowed = 0;
    const size_t pl = strlen(prefix);
    char buf[2048];
    for (int t = 0; t < n; t++) {
        if (t % stride && !tokenizer_is_eog(tok, t))
            continue;
        bool want;
        if (tokenizer_is_eog(tok, t)) {
            want = grammar_match(g, prefix, pl);
        } else {
            memcpy(buf, prefix, pl);
            size_t len = tokenizer_piece(tok, t, false, buf + pl, sizeof buf - pl);
            want = false;
            if (len > 0 && len < sizeof buf - pl) {
                struct grammar_matcher *r = grammar_matcher_new(g, NULL, err, sizeof err);
                want = r && grammar_matcher_accept_bytes(r, buf, pl + len) == 0;
                grammar_matcher_free(r);
            }
        }
        const bool got = mask[t / 32] >> (t % 32) & 1;
        allowed += got;
        if (got != want && bad++ < 5)
            fprintf(stderr, "token %d (%s): mask %d, reference %d\n", t,
                    tokenizer_token_text(tok, t), got, want);
    }
    grammar_matcher_free(m);
    return bad ? -bad - 1 : allowed;
}

TEST(grammar_masks_match_brute_force_on_qwen2_vocab)
{
    SKIP_IF_NO_SHARED();
    struct tokenizer *tok = qwen_tok();
    CHECK(tok);
    char err[256];
    struct grammar_vocab *v = grammar_vocab_new(tok, err, sizeof err);
    CHECK(v);
    CHECK(grammar_vocab_n_tokens(v) == 151936);
    struct grammar *g = parse(
        "root ::= \"{\" ws \"\\\"name\\\"\" ws \":\" ws str ws \",\" ws \"\\\"n\\\"\" ws \":\" ws num ws \"}\"\n"
        "str ::= \"\\\"\" ([^\"\\\\\\x00-\\x1F] | \"\\\\\" [\"\\\\nt])* \"\\\"\"\n"
        "num ::= \"-\"? [1-9] [0-9]{0,5}\n"
        "ws ::= [ \\n]?\n");
    CHECK(g);
    /* states: start, inside a key, inside a free string (most tokens allowed,
     * multi-byte characters split across tokens), inside a number, complete */
    static const char *const prefixes[] = {
        "", "{ \"na", "{\"name\": \"h\xc3", "{\"name\": \"hello w", "{\"name\":\"x\",\"n\":-4",
        "{\"name\":\"x\",\"n\":12}",
    };
    for (size_t i = 0; i < sizeof prefixes / sizeof *prefixes; i++) {
        int r = brute_check(g, v, tok, prefixes[i], 7);
        CHECK_MSG(r >= 0, "prefix '%s': %d mismatches", prefixes[i], r < -1 ? -r - 1 : -1);
        if (i == 3)
            CHECK_MSG(r > 10000, "free string allows only %d sampled tokens", r);
        if (i == 5)
            CHECK_MSG(r >= 1, "complete match allows no end token");
    }
    grammar_free(g);
    grammar_vocab_free(v);
    tokenizer_free(tok);
}

TEST(grammar_apply_and_accept_tokens)
{
    SKIP_IF_NO_SHARED();
    struct tokenizer *tok = qwen_tok();
    CHECK(tok);
    char err[256];
    struct grammar_vocab *v = grammar_vocab_new(tok, err, sizeof err);
    struct grammar *g = parse("root ::= \"yes\" | \"no\"\n");
    CHECK(v && g);
    struct grammar_matcher *m = grammar_matcher_new(g, v, err, sizeof err);
    CHECK(m);
    const int n = tokenizer_n_vocab(tok);
    float *logits = malloc((size_t)n * sizeof *logits);
    CHECK(logits);
    for (int i = 0; i < n; i++)
        logits[i] = (float)(i % 17);
    const float *out = grammar_matcher_apply(m, logits);
    CHECK(out);
    int32_t yes = tokenizer_find(tok, "yes", 3), y = tokenizer_find(tok, "y", 1);
    int32_t maybe = tokenizer_find(tok, "maybe", 5);
    CHECK(yes >= 0 && y >= 0 && maybe >= 0);
    CHECK(out[yes] == logits[yes] && out[y] == logits[y] && isinf(out[maybe]));
    CHECK(isinf(out[tokenizer_eos(tok)]));
    CHECK(grammar_matcher_accept(m, maybe) == OMNI_ERR_ARG);
    CHECK(grammar_matcher_accept(m, yes) == 0);
    out = grammar_matcher_apply(m, logits);
    CHECK(out && !isinf(out[tokenizer_eos(tok)]) && isinf(out[y]));
    CHECK(grammar_matcher_accept(m, tokenizer_eos(tok)) == 0);
    free(logits);
    grammar_matcher_free(m);
    grammar_free(g);
    grammar_vocab_free(v);
    tokenizer_free(tok);
}

// ---- hostile grammars: bounded depth, time and size ---------------------------

/* "root ::= " + n '(' + "\"a\"" + n ')' (malloc'd). */
static char *nested_groups(size_t n)
{
    char *s = malloc(2 * n + 32);
    if (!s)
        return NULL;
    size_t k = (size_t)sprintf(s, "root ::= ");
    memset(s + k, '(', n);
    k += n;
    k += (size_t)sprintf(s + k, "\"a\"");
    memset(s + k, ')', n);
    k += n;
    strcpy(s + k, "\n");
    return s;
}

/* Issue 7.1: 100,000 nested groups overflowed the stack; now an error that
 * names the limit, and the deepest allowed nesting still parses. */
TEST(grammar_deep_nesting_is_an_error)
{
    char err[256];
    char *text = nested_groups(100000);
    CHECK(text);
    struct grammar *g = grammar_parse(text, strlen(text), err, sizeof err);
    free(text);
    CHECK(!g);
    CHECK_STR_CONTAINS(err, "nested deeper than 256 levels");
    CHECK_STR_CONTAINS(err, "line 1 col 266"); /* the 257th '(' */

    const struct grammar_limits lim = grammar_default_limits();
    text = nested_groups((size_t)lim.max_nesting);
    CHECK(text);
    g = grammar_parse(text, strlen(text), err, sizeof err);
    free(text);
    CHECK_MSG(g, "%s", err);
    CHECK(matches(g, "a"));
    grammar_free(g);
    text = nested_groups((size_t)lim.max_nesting + 1);
    CHECK(text);
    g = grammar_parse(text, strlen(text), err, sizeof err);
    free(text);
    CHECK(!g);
}

/* A chain of 5,000 nullable calls at one position: the matcher's closure
 * used to recurse once per call and gave up past 4,096; it is a work list
 * now, bounded by max_closure instead. */
TEST(grammar_long_nullable_chains)
{
    struct grammar *g = parse("root ::= (\"x\"?){5000} \"y\"\n");
    CHECK(g);
    CHECK(matches(g, "y"));
    CHECK(matches(g, "xxxy"));
    CHECK(!matches(g, "xxx"));
    grammar_free(g);

    /* 20,000 rules, each only calling the next, defined from the top down:
     * nullability and the left-recursion walk are linear, not one pass per
     * link; closing the chain on itself is left recursion */
    const int n = 20000;
    char *text = malloc((size_t)n * 32 + 64);
    CHECK(text);
    size_t k = (size_t)sprintf(text, "root ::= r0 \"z\"\n");
    for (int i = 0; i + 1 < n; i++)
        k += (size_t)sprintf(text + k, "r%d ::= r%d\n", i, i + 1);
    sprintf(text + k, "r%d ::= \"\" | \"q\"\n", n - 1);
    double t0 = omni_time_s();
    g = parse(text);
    const double ms = (omni_time_s() - t0) * 1e3;
    CHECK(g);
    CHECK(matches(g, "z") && matches(g, "qz") && !matches(g, "qqz"));
    grammar_free(g);
    printf("    (%d chained rules parsed in %.1f ms)\n", n, ms);
    sprintf(text + k, "r%d ::= r0 | \"q\"\n", n - 1);
    char err[256];
    CHECK(!grammar_parse(text, strlen(text), err, sizeof err));
    CHECK_STR_CONTAINS(err, "is left-recursive");
    free(text);
}

/* Each limit of struct grammar_limits stops with an error that names it. */
TEST(grammar_limits_name_the_limit)
{
    static const struct {
        const char *text;
        int field;  /* which limit to lower to 8 */
        const char *want;
    } cases[] = {
        { "root ::= a b c d e f g h i\na ::= \"a\"\nb ::= \"b\"\nc ::= \"c\"\nd ::= \"d\"\n"
          "e ::= \"e\"\nf ::= \"f\"\ng ::= \"g\"\nh ::= \"h\"\ni ::= \"i\"\n", 0, "more than 8 rules (limit max_rules)" },
        { "root ::= \"a\" | \"b\" | \"c\" | \"d\" | \"e\" | \"f\" | \"g\" | \"h\" | \"i\"\n", 1,
          "more than 8 alternatives (limit max_alternatives)" },
        { "root ::= \"abcdefghi\"\n", 2, "more than 8 elements (limit max_elements)" },
        { "root ::= \"a\"{9}\n", 3, "repetition count above 8 (limit max_repeat)" },
        { "root ::= ((((((((((\"a\"))))))))))\n", 4, "nested deeper than 8 levels (limit max_nesting)" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        struct grammar_limits lim = grammar_default_limits();
        int *field[] = { &lim.max_rules, &lim.max_alternatives, &lim.max_elements, &lim.max_repeat,
                         &lim.max_nesting };
        *field[cases[i].field] = 8;
        char err[256] = "";
        int code = 0;
        struct grammar *g = grammar_parse_limits(cases[i].text, strlen(cases[i].text), &lim, err,
                                                 sizeof err, &code);
        CHECK_MSG(!g, "case %zu parsed", i);
        CHECK_MSG(strstr(err, cases[i].want), "case %zu: '%s' lacks '%s'", i, err, cases[i].want);
        CHECK_EQ(code, OMNI_ERR_LIMIT);
    }
    int code = 0;
    char err[256];
    CHECK(!grammar_parse_limits("root ::= x\n", 11, NULL, err, sizeof err, &code));
    CHECK_EQ(code, OMNI_ERR_FORMAT);

    /* matcher limits travel with the grammar */
    struct grammar_limits lim = grammar_default_limits();
    lim.max_states = 4;
    struct grammar *g = grammar_parse_limits("root ::= \"abcdefgh\"\n", 20, &lim, err, sizeof err, &code);
    CHECK(g && code == OMNI_OK);
    struct grammar_matcher *m = grammar_matcher_new(g, NULL, err, sizeof err);
    CHECK(m);
    CHECK(grammar_matcher_accept_bytes(m, "abcdefgh", 8) < 0);
    CHECK_STR_CONTAINS(grammar_matcher_error(m), "grammar: limit: more than 4 grammar states");
    CHECK_STR_CONTAINS(grammar_matcher_error(m), "(max_states)");
    grammar_matcher_free(m);
    grammar_free(g);

    lim = grammar_default_limits();
    lim.max_closure = 16;
    const char *wide = "root ::= x x\nx ::= \"a\" | \"b\" | \"c\" | \"d\" | \"e\" | \"f\" | \"g\" | \"h\" | "
                       "\"i\" | \"j\" | \"k\" | \"l\" | \"m\" | \"n\" | \"o\" | \"p\" | \"q\"\n";
    g = grammar_parse_limits(wide, strlen(wide), &lim, err, sizeof err, &code);
    CHECK(g);
    CHECK(!grammar_matcher_new(g, NULL, err, sizeof err));
    CHECK_STR_CONTAINS(err, "grammar: limit: grammar too ambiguous");
    CHECK_STR_CONTAINS(err, "(max_closure)");
    grammar_free(g);
}

/* Issue 7.2: rule lookups scanned every rule, so a grammar of 100,000
 * rules parsed in minutes. Time is printed, not checked. */
TEST(grammar_many_rules_parse_fast)
{
    const int n = 50000;
    char *text = malloc((size_t)n * 48 + 64);
    CHECK(text);
    /* every rule used before it is defined, each with its own class */
    size_t k = (size_t)sprintf(text, "root ::= r%d", n - 1);
    for (int i = n - 2; i >= n - 100; i--)
        k += (size_t)sprintf(text + k, " | r%d", i);
    k += (size_t)sprintf(text + k, "\n");
    for (int i = n - 1; i > 0; i--)
        k += (size_t)sprintf(text + k, "r%d ::= \"k%d\" [\\u%04X-\\u%04X] r%d?\n", i, i,
                             0x800 + i, 0x800 + i + i % 7, i - 1);
    sprintf(text + k, "r0 ::= \"end\"\n");
    double t0 = omni_time_s();
    struct grammar *g = parse(text);
    const double ms = (omni_time_s() - t0) * 1e3;
    free(text);
    CHECK(g);
    /* r(n-100) alone: its literal and a character of its class (3 UTF-8 bytes) */
    const int i = n - 100, c = 0x800 + i;
    char doc[64];
    int len = snprintf(doc, sizeof doc, "k%d%c%c%c", i, 0xE0 | c >> 12, 0x80 | (c >> 6 & 0x3F),
                       0x80 | (c & 0x3F));
    CHECK(grammar_match(g, doc, (size_t)len));
    CHECK(!grammar_match(g, doc, (size_t)len - 1));
    printf("    (%d rules parsed in %.1f ms)\n", n, ms);
    grammar_free(g);
}

/* A grammar whose only string is "": its states hold no positions, only
 * acceptance (found by fuzz_grammar: UBSan on NULL + 0 and qsort(NULL, 0)). */
TEST(grammar_empty_string_only)
{
    struct grammar *g = parse("root ::= \"\"");
    CHECK(g);
    CHECK(matches(g, ""));
    CHECK(!matches(g, "a"));
    grammar_free(g);
}
