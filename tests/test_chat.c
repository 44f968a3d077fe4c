/* test_chat.c - built-in chat formats against strings written by hand from
 * what the families' official Jinja templates render (leading BOS left to the
 * tokenizer), and template detection on real template texts. */
#include "test.h"

#include "llm/chat.h"
#include "src/core/gguf.h"

#include <stdlib.h>
#include <string.h>

static const struct chat_message conv[] = {
    { "system", "You are terse." },
    { "user", " Hi there \n" },
    { "assistant", "Hello!" },
    { "user", "2+2?" },
};

/* Render into a static buffer (measuring first, as callers do). */
static const char *render(enum chat_format f, const struct chat_message *m, int n, bool gen)
{
    static char buf[1024];
    size_t need = 0, got = 0;
    if (chat_format_apply(f, m, n, gen, NULL, 0, &need) != 0 || need >= sizeof buf)
        return "(error)";
    if (chat_format_apply(f, m, n, gen, buf, sizeof buf, &got) != 0 || got != need)
        return "(error)";
    return buf;
}

TEST(chat_chatml)
{
    CHECK_STR_EQ(render(CHAT_FORMAT_CHATML, conv, 4, true),
                 "<|im_start|>system\nYou are terse.<|im_end|>\n"
                 "<|im_start|>user\n Hi there \n<|im_end|>\n"
                 "<|im_start|>assistant\nHello!<|im_end|>\n"
                 "<|im_start|>user\n2+2?<|im_end|>\n"
                 "<|im_start|>assistant\n");
    CHECK_STR_EQ(render(CHAT_FORMAT_CHATML, conv + 3, 1, false),
                 "<|im_start|>user\n2+2?<|im_end|>\n");
}

TEST(chat_llama3)
{
    CHECK_STR_EQ(render(CHAT_FORMAT_LLAMA3, conv, 4, true),
                 "<|start_header_id|>system<|end_header_id|>\n\nYou are terse.<|eot_id|>"
                 "<|start_header_id|>user<|end_header_id|>\n\nHi there<|eot_id|>"
                 "<|start_header_id|>assistant<|end_header_id|>\n\nHello!<|eot_id|>"
                 "<|start_header_id|>user<|end_header_id|>\n\n2+2?<|eot_id|>"
                 "<|start_header_id|>assistant<|end_header_id|>\n\n");
}

TEST(chat_llama2)
{
    /* system folded into the first [INST]; later user turns start with <s> */
    CHECK_STR_EQ(render(CHAT_FORMAT_LLAMA2, conv, 4, true),
                 "[INST] <<SYS>>\nYou are terse.\n<</SYS>>\n\n Hi there [/INST]"
                 " Hello! </s><s>[INST] 2+2? [/INST]");
    CHECK_STR_EQ(render(CHAT_FORMAT_LLAMA2, conv + 1, 1, true), "[INST] Hi there [/INST]");
    /* the whole "<<SYS>>...+content" is stripped: an empty question loses
     * the blank line after the block */
    const struct chat_message m[] = { { "system", "S" }, { "user", "" } };
    CHECK_STR_EQ(render(CHAT_FORMAT_LLAMA2, m, 2, true), "[INST] <<SYS>>\nS\n<</SYS>> [/INST]");
}

TEST(chat_mistral)
{
    CHECK_STR_EQ(render(CHAT_FORMAT_MISTRAL, conv + 1, 3, true),
                 "[INST]  Hi there \n [/INST]Hello!</s>[INST] 2+2? [/INST]");
    CHECK_STR_EQ(render(CHAT_FORMAT_MISTRAL, conv, 4, true),
                 "[INST] You are terse.\n\n Hi there \n [/INST]Hello!</s>[INST] 2+2? [/INST]");
}

TEST(chat_gemma)
{
    CHECK_STR_EQ(render(CHAT_FORMAT_GEMMA, conv, 4, true),
                 "<start_of_turn>user\nYou are terse.\n\nHi there<end_of_turn>\n"
                 "<start_of_turn>model\nHello!<end_of_turn>\n"
                 "<start_of_turn>user\n2+2?<end_of_turn>\n"
                 "<start_of_turn>model\n");
    CHECK_STR_EQ(render(CHAT_FORMAT_GEMMA, conv + 3, 1, false),
                 "<start_of_turn>user\n2+2?<end_of_turn>\n");
}

TEST(chat_phi3)
{
    CHECK_STR_EQ(render(CHAT_FORMAT_PHI3, conv, 4, true),
                 "<|system|>\nYou are terse.<|end|>\n"
                 "<|user|>\n Hi there \n<|end|>\n"
                 "<|assistant|>\nHello!<|end|>\n"
                 "<|user|>\n2+2?<|end|>\n"
                 "<|assistant|>\n");
    CHECK_STR_EQ(render(CHAT_FORMAT_PHI3, conv + 2, 1, false),
                 "<|assistant|>\nHello!<|end|>\n<|endoftext|>");
}

static void unset_epoch(void *unused)
{
    (void)unused;
    unsetenv("SOURCE_DATE_EPOCH");
}

/* gpt-oss's Harmony, byte for byte what its published template renders
 * (tests/fixtures/templates/expected, made by jinja2 with the same clock). */
TEST(chat_harmony)
{
    setenv("SOURCE_DATE_EPOCH", "1754395200", 1);   /* render_template_ref.py's FIXTURE_EPOCH */
    test_defer(unset_epoch, NULL);
    static const struct chat_message basic[] = {
        { "system", "You are a concise assistant." },
        { "user", "What is the capital of France?" },
    };
    static const struct chat_message multi[] = {
        { "user", "  Hi there!  \n" },
        { "assistant", "Hello! How can I help?" },
        { "user", "Tell me a joke." },
        { "assistant", "Why did the C programmer quit? He didn't get arrays." },
    };
    char *want = test_read_file(test_fixture("templates/expected/gpt-oss.basic.txt"), NULL);
    CHECK(want);
    CHECK_STR_EQ(render(CHAT_FORMAT_HARMONY, basic, 2, true), want);
    free(want);
    want = test_read_file(test_fixture("templates/expected/gpt-oss.multiturn.txt"), NULL);
    CHECK(want);
    CHECK_STR_EQ(render(CHAT_FORMAT_HARMONY, multi, 4, false), want);
    free(want);
    char *t = test_read_file(test_fixture("templates/gpt-oss.jinja"), NULL);
    CHECK(t);
    CHECK_EQ(chat_format_detect(t), CHAT_FORMAT_HARMONY);
    free(t);
    CHECK_STR_EQ(chat_format_end_of_turn(CHAT_FORMAT_HARMONY), "<|return|>");
}

TEST(chat_apply_small_buffer_and_errors)
{
    char buf[8];
    size_t need = 0;
    CHECK_EQ(chat_format_apply(CHAT_FORMAT_CHATML, conv + 3, 1, true, buf, sizeof buf, &need), 0);
    CHECK_EQ(need, strlen("<|im_start|>user\n2+2?<|im_end|>\n<|im_start|>assistant\n"));
    CHECK_STR_EQ(buf, "<|im_st"); /* cut short, still terminated */
    CHECK_EQ(chat_format_apply(CHAT_FORMAT_COUNT, conv, 1, true, buf, sizeof buf, &need),
             -5 /* OMNI_ERR_ARG */);
    const struct chat_message bad[] = { { "user", NULL } };
    CHECK(chat_format_apply(CHAT_FORMAT_CHATML, bad, 1, true, buf, sizeof buf, &need) < 0);
    CHECK(chat_format_apply(CHAT_FORMAT_CHATML, conv, -1, true, buf, sizeof buf, &need) < 0);
    CHECK_EQ(chat_format_apply(CHAT_FORMAT_LLAMA3, NULL, 0, true, buf, sizeof buf, &need), 0);
    CHECK_EQ(need, strlen("<|start_header_id|>assistant<|end_header_id|>\n\n"));
}

TEST(chat_names)
{
    for (int f = 0; f < CHAT_FORMAT_COUNT; f++) {
        CHECK_EQ(chat_format_from_name(chat_format_name((enum chat_format)f)), f);
        CHECK(strlen(chat_format_end_of_turn((enum chat_format)f)) > 0);
    }
    CHECK_EQ(chat_format_from_name("jinja"), -1);
    CHECK_STR_EQ(chat_format_end_of_turn(CHAT_FORMAT_LLAMA3), "<|eot_id|>");
}

TEST(chat_detect)
{
    CHECK_EQ(chat_format_detect(NULL), CHAT_FORMAT_CHATML);
    CHECK_EQ(chat_format_detect(""), CHAT_FORMAT_CHATML);
    CHECK_EQ(chat_format_detect("{{ messages }}"), CHAT_FORMAT_CHATML);
    /* excerpts of the official templates */
    CHECK_EQ(chat_format_detect("{% for message in messages %}{{'<|im_start|>' + message['role']"
                                " + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}"),
             CHAT_FORMAT_CHATML);
    CHECK_EQ(chat_format_detect("{% set content = '<|start_header_id|>' + message['role'] + "
                                "'<|end_header_id|>\\n\\n'+ message['content'] | trim + "
                                "'<|eot_id|>' %}"),
             CHAT_FORMAT_LLAMA3);
    CHECK_EQ(chat_format_detect("{% set content = '<<SYS>>\\n' + system_message + "
                                "'\\n<</SYS>>\\n\\n' + message['content'] %}{{ bos_token + "
                                "'[INST] ' + content.strip() + ' [/INST]' }}"),
             CHAT_FORMAT_LLAMA2);
    CHECK_EQ(chat_format_detect("{{ bos_token }}{% for message in messages %}{{ '[INST] ' + "
                                "message['content'] + ' [/INST]' }}{% endfor %}"),
             CHAT_FORMAT_MISTRAL);
    CHECK_EQ(chat_format_detect("{{ '<start_of_turn>' + role + '\\n' + message['content'] | "
                                "trim + '<end_of_turn>\\n' }}"),
             CHAT_FORMAT_GEMMA);
    CHECK_EQ(chat_format_detect("{{'<|user|>' + '\\n' + message['content'] + '<|end|>' + "
                                "'\\n' + '<|assistant|>' + '\\n'}}"),
             CHAT_FORMAT_PHI3);
}

/* The templates stored in the shared llama.cpp vocabularies. */
TEST(chat_detect_shared_vocab_templates)
{
    SKIP_IF_NO_SHARED();
    static const struct { const char *file; enum chat_format want; } cases[] = {
        { "vocab/ggml-vocab-qwen2.gguf", CHAT_FORMAT_CHATML },
        { "vocab/ggml-vocab-phi-3.gguf", CHAT_FORMAT_PHI3 },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char err[256];
        struct gguf *g = gguf_open(test_shared(cases[i].file), err, sizeof err);
        CHECK_MSG(g, "%s", err);
        size_t len = 0;
        const char *t = gguf_get_str(g, "tokenizer.chat_template", &len);
        CHECK(t);
        char *z = strndup(t, len);
        CHECK(z);
        enum chat_format f = chat_format_detect(z);
        free(z);
        gguf_free(g);
        CHECK_EQ(f, cases[i].want);
    }
}
