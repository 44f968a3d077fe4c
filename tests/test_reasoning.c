/* test_reasoning.c - the reasoning splitter on recorded outputs: <think>
 * blocks opened by the model or by the template, [THINK] blocks, Harmony
 * channels with a tool call, unterminated reasoning; every text in chunks
 * of many sizes gives the same reasoning and answer, tags never in either. */
#include "test.h"

#include "llm/reasoning.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct split {
    char r[1024], a[1024];
    size_t rn, an;
};

static void split_fn(void *user, bool reasoning, const char *s, size_t n)
{
    struct split *sp = user;
    char *dst = reasoning ? sp->r : sp->a;
    size_t *dn = reasoning ? &sp->rn : &sp->an;
    if (*dn + n < sizeof sp->r) {
        memcpy(dst + *dn, s, n);
        *dn += n;
        dst[*dn] = 0;
    }
}

static void run_split(enum reasoning_format f, bool open, const char *text, size_t chunk,
                      struct split *sp)
{
    memset(sp, 0, sizeof *sp);
    struct reasoning_parser *p = reasoning_parser_new(f, open);
    size_t n = strlen(text);
    if (!chunk)
        chunk = n ? n : 1;
    for (size_t i = 0; i < n; i += chunk)
        reasoning_parser_feed(p, text + i, i + chunk > n ? n - i : chunk, split_fn, sp);
    reasoning_parser_finish(p, split_fn, sp);
    reasoning_parser_free(p);
}

TEST(reasoning_recorded_outputs_all_chunkings)
{
    static const struct {
        enum reasoning_format f;
        bool open;
        const char *text, *reasoning, *answer;
    } cases[] = {
        { REASONING_THINK, false, "<think>\nThe user greets me.\n</think>\n\nHello!",
          "The user greets me.", "Hello!" },
        { REASONING_THINK, true, "Okay, 2+2 is 4.\n</think>\n\nThe answer is 4.", "Okay, 2+2 is 4.",
          "The answer is 4." },
        { REASONING_THINK, true, "<think>\nrepeated tag\n</think>\nok", "repeated tag", "ok" },
        { REASONING_THINK, false, "No thinking here, 1 < 2 and <thin is not a tag.", "",
          "No thinking here, 1 < 2 and <thin is not a tag." },
        { REASONING_THINK, false, "<think>\nnever closed, cut by max_tokens", "never closed, cut by max_tokens", "" },
        { REASONING_THINK, true, "\n</think>\n\n", "", "" },
        { REASONING_THINK_BRACKET, false, "[THINK]Check units.[/THINK]It is 5 km.", "Check units.", "It is 5 km." },
        { REASONING_NONE, false, "<think>x</think>y", "", "<think>x</think>y" },
        { REASONING_HARMONY, false,
          "<|channel|>analysis<|message|>User wants weather.<|end|><|start|>assistant<|channel|>final<|message|>It is sunny.",
          "User wants weather.", "It is sunny." },
        { REASONING_HARMONY, false,
          "<|channel|>analysis<|message|>Need the tool.<|end|><|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{\"city\":\"Paris\"}<|call|>",
          "Need the tool.", "<tool_call>{\"name\": \"get_weather\", \"arguments\": {\"city\":\"Paris\"}}</tool_call>" },
        { REASONING_HARMONY, false, "Plain text from a model that skipped the channels.", "",
          "Plain text from a model that skipped the channels." },
    };
    static const size_t chunks[] = { 0, 1, 2, 3, 4, 7, 13 };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        for (size_t c = 0; c < sizeof chunks / sizeof chunks[0]; c++) {
            struct split sp;
            run_split(cases[i].f, cases[i].open, cases[i].text, chunks[c], &sp);
            CHECK_MSG(!strcmp(sp.r, cases[i].reasoning) && !strcmp(sp.a, cases[i].answer),
                      "case %zu chunk %zu: reasoning '%s' answer '%s'", i, chunks[c], sp.r, sp.a);
        }
}

/* gpt-oss's Harmony channels cut at every byte: analysis -> reasoning,
 * final and commentary preambles -> answer, a functions.* recipient -> a
 * hermes-spelled call whose arguments stream, built-in tool messages ->
 * reasoning; text without the framing is answer, a cut header is dropped and
 * no framing token ever reaches either side. */
TEST(reasoning_harmony_every_split)
{
    static const struct {
        const char *text, *reasoning, *answer;
    } cases[] = {
        { "<|channel|>analysis<|message|>Think.<|end|><|start|>assistant<|channel|>final<|message|>The answer is 4.",
          "Think.", "The answer is 4." },
        { "<|channel|>final<|message|>Done.<|return|>", "", "Done." },
        { "<|channel|>commentary<|message|>Let me check.<|end|><|start|>assistant to=functions.get_weather"
          "<|channel|>commentary json<|message|>{\"city\": \"Rome\"}<|call|>",
          "", "Let me check.<tool_call>{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Rome\"}}</tool_call>" },
        { "<|channel|>analysis<|message|>Search.<|end|><|start|>assistant<|channel|>analysis to=browser.search "
          "code<|message|>{\"query\":\"x\"}<|call|>",
          "Search.{\"query\":\"x\"}", "" },
        { "<|channel|>analysis<|message|>a<|end|><|start|>assistant<|chan", "a", "" },
        { "Hello <|weird|> text, no channels.", "", "Hello <|weird|> text, no channels." },
        { "<|weird|>x", "", "<|weird|>x" },
        { "<|channel|>analysis<|message|>cut by max_tokens <|en", "cut by max_tokens <|en", "" },
        { "<|channel|>commentary to=functions.a\"b <|constrain|>json<|message|>{}<|call|>", "",
          "<tool_call>{\"name\": \"a\", \"arguments\": {}}</tool_call>" },
    };
    static const char *const framing[] = { "<|channel|>", "<|message|>", "<|end|>", "<|start|>", "<|call|>",
                                           "<|return|>", "<|constrain|>" };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        size_t n = strlen(cases[i].text);
        for (size_t cut = 0; cut <= n + 1; cut++) {
            struct split sp;
            memset(&sp, 0, sizeof sp);
            struct reasoning_parser *p = reasoning_parser_new(REASONING_HARMONY, false);
            if (cut <= n) {
                reasoning_parser_feed(p, cases[i].text, cut, split_fn, &sp);
                reasoning_parser_feed(p, cases[i].text + cut, n - cut, split_fn, &sp);
            } else {
                for (size_t k = 0; k < n; k++)
                    reasoning_parser_feed(p, cases[i].text + k, 1, split_fn, &sp);
            }
            reasoning_parser_finish(p, split_fn, &sp);
            reasoning_parser_free(p);
            bool leak = false;
            for (size_t f = 0; f < sizeof framing / sizeof framing[0]; f++)
                leak |= strstr(sp.r, framing[f]) || strstr(sp.a, framing[f]);
            CHECK_MSG(!strcmp(sp.r, cases[i].reasoning) && !strcmp(sp.a, cases[i].answer) && !leak,
                      "case %zu cut %zu: reasoning '%s' answer '%s'", i, cut, sp.r, sp.a);
        }
    }
}

/* Random mixes of Harmony's pieces: never a crash, and the same split
 * whole, cut in two anywhere, or fed byte by byte. */
TEST(reasoning_harmony_random_pieces_consistent)
{
    static const char *const pieces[] = { "<|channel|>", "analysis", "final", "commentary", "<|message|>",
                                          "<|end|>", "<|start|>", "assistant", " to=functions.f", " to=python",
                                          "<|call|>", "<|return|>", "<|constrain|>", "json", "{\"a\": 1}",
                                          "text ", "<|", "|>", "<", " ", "\n" };
    const size_t np = sizeof pieces / sizeof pieces[0];
    unsigned long long seed = 12345;
    for (int iter = 0; iter < 300; iter++) {
        char text[512] = "";
        int k = 1 + (int)(seed % 12);
        for (int j = 0; j < k; j++) {
            seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
            strcat(text, pieces[(seed >> 33) % np]);
        }
        size_t n = strlen(text);
        struct split whole, part;
        run_split(REASONING_HARMONY, false, text, 0, &whole);
        for (size_t cut = 0; cut <= n + 1; cut++) {
            memset(&part, 0, sizeof part);
            struct reasoning_parser *p = reasoning_parser_new(REASONING_HARMONY, false);
            if (cut <= n) {
                reasoning_parser_feed(p, text, cut, split_fn, &part);
                reasoning_parser_feed(p, text + cut, n - cut, split_fn, &part);
            } else {
                for (size_t b = 0; b < n; b++)
                    reasoning_parser_feed(p, text + b, 1, split_fn, &part);
            }
            reasoning_parser_finish(p, split_fn, &part);
            reasoning_parser_free(p);
            CHECK_MSG(!strcmp(part.r, whole.r) && !strcmp(part.a, whole.a),
                      "'%s' cut %zu: reasoning '%s' answer '%s', whole '%s' '%s'", text, cut, part.r, part.a,
                      whole.r, whole.a);
        }
    }
}

/* A tool call's arguments go out while they are generated, not at <|call|>. */
TEST(reasoning_harmony_tool_arguments_stream)
{
    struct split sp;
    memset(&sp, 0, sizeof sp);
    struct reasoning_parser *p = reasoning_parser_new(REASONING_HARMONY, false);
    const char *head = "<|channel|>commentary to=functions.f <|constrain|>json<|message|>{\"a\": \"lon";
    reasoning_parser_feed(p, head, strlen(head), split_fn, &sp);
    CHECK_STR_EQ(sp.a, "<tool_call>{\"name\": \"f\", \"arguments\": {\"a\": \"lon");
    reasoning_parser_feed(p, "g\"}<|ca", 7, split_fn, &sp);
    CHECK_STR_EQ(sp.a, "<tool_call>{\"name\": \"f\", \"arguments\": {\"a\": \"long\"}");
    reasoning_parser_feed(p, "ll|>", 4, split_fn, &sp);
    reasoning_parser_finish(p, split_fn, &sp);
    CHECK_STR_EQ(sp.a, "<tool_call>{\"name\": \"f\", \"arguments\": {\"a\": \"long\"}}</tool_call>");
    reasoning_parser_free(p);
}

TEST(reasoning_detection_and_prompt_opening)
{
    CHECK_EQ(reasoning_format_detect(NULL), REASONING_THINK);
    CHECK_EQ(reasoning_format_detect("{{'<|channel|>analysis'}}"), REASONING_HARMONY);
    CHECK_EQ(reasoning_format_detect("[THINK]"), REASONING_THINK_BRACKET);
    CHECK(reasoning_prompt_opens(REASONING_THINK, "<|im_start|>assistant\n<think>\n", 30));
    CHECK(!reasoning_prompt_opens(REASONING_THINK, "<|im_start|>assistant\n<think>\n\n</think>\n\n", 42));
    CHECK(!reasoning_prompt_opens(REASONING_NONE, "<think>", 7));
    CHECK_STR_EQ(reasoning_close_text(REASONING_THINK), "\n</think>\n\n");
    for (int f = 0; f < REASONING_FMT_COUNT; f++)
        CHECK_EQ(reasoning_format_from_name(reasoning_format_name((enum reasoning_format)f)), f);
    CHECK_EQ(reasoning_format_from_name("nope"), -1);
}

/* The families' published templates (their jinja2 renderings in
 * tests/fixtures/templates/expected): which prompts leave reasoning open. */
TEST(reasoning_family_prompts)
{
    static const struct {
        const char *tpl, *rendering;
        enum reasoning_format f;
        bool opens;
    } cases[] = {
        { "qwen3.5", "qwen3.5.basic", REASONING_THINK, true },          /* "<think>\n" */
        { "qwen3.5", "qwen3.5.no_thinking", REASONING_THINK, false },   /* closed empty block */
        { "smollm3", "smollm3.thinking", REASONING_THINK, false },      /* the model opens it */
        { "smollm3", "smollm3.think_flags", REASONING_THINK, false },   /* /no_think: closed */
        { "lfm2", "lfm2.basic", REASONING_THINK, false },
        { "gpt-oss", "gpt-oss.basic", REASONING_HARMONY, false },
        { "gemma3", "gemma3.basic", REASONING_THINK, false },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char rel[128];
        snprintf(rel, sizeof rel, "templates/%s.jinja", cases[i].tpl);
        char *t = test_read_file(test_fixture(rel), NULL);
        snprintf(rel, sizeof rel, "templates/expected/%s.txt", cases[i].rendering);
        size_t n = 0;
        char *prompt = test_read_file(test_fixture(rel), &n);
        CHECK_MSG(t && prompt, "missing %s", rel);
        enum reasoning_format f = reasoning_format_detect(t);
        bool opens = reasoning_prompt_opens(f, prompt, n);
        free(t);
        free(prompt);
        CHECK_MSG(f == cases[i].f && opens == cases[i].opens, "%s: %s, opens %d", cases[i].rendering,
                  reasoning_format_name(f), opens);
    }
}

TEST(reasoning_in_reasoning_tracks_state)
{
    struct split sp;
    memset(&sp, 0, sizeof sp);
    struct reasoning_parser *p = reasoning_parser_new(REASONING_THINK, true);
    CHECK(reasoning_parser_in_reasoning(p));
    reasoning_parser_feed(p, "abc</think>", 11, split_fn, &sp);
    CHECK(!reasoning_parser_in_reasoning(p));
    reasoning_parser_free(p);
}
