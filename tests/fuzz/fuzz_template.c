/* fuzz_template.c - the chat-template renderer (llm/template): tpl_parse of
 * a Jinja2 template, then tpl_render_chat with the variables
 * apply_chat_template passes, under small limits so that a loop bomb ends
 * quickly with OMNI_ERR_LIMIT.
 *
 * Input: the template up to the first NUL; optionally the messages JSON
 * after it and the tools JSON after the next NUL (otherwise a fixed
 * conversation with a system turn, a tool call, its result and reasoning). */
#include "tests/fuzz/fz_util.h"

#include "llm/template/template.h"

#include <stdlib.h>

static const char fz_messages[] =
    "[{\"role\":\"system\",\"content\":\"You are terse.\"},"
    "{\"role\":\"user\",\"content\":\"Weather in Paris?\"},"
    "{\"role\":\"assistant\",\"content\":\"\",\"reasoning_content\":\"look it up\","
    "\"tool_calls\":[{\"id\":\"call_1\",\"type\":\"function\",\"function\":{\"name\":\"get_weather\","
    "\"arguments\":{\"city\":\"Paris\"}}}]},"
    "{\"role\":\"tool\",\"tool_call_id\":\"call_1\",\"content\":\"{\\\"temp\\\": 21}\"},"
    "{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"Thanks\"}]}]";
static const char fz_tools[] =
    "[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"description\":\"Weather\","
    "\"parameters\":{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\"}},"
    "\"required\":[\"city\"]}}}]";
static const char fz_kwargs[] =
    "{\"bos_token\":\"<s>\",\"eos_token\":\"</s>\",\"enable_thinking\":true,"
    "\"date_string\":\"26 Jul 2024\"}";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const uint8_t *part[3];
    size_t len[3];
    int n = fz_split(data, size, part, len, 3);
    char err[256];
    struct tpl *t = tpl_parse((const char *)part[0], len[0], err, sizeof err);
    if (!t)
        return 0;
    char *messages = n > 1 ? fz_strndup(part[1], len[1]) : NULL;
    char *tools = n > 2 ? fz_strndup(part[2], len[2]) : NULL;
    struct tpl_limits lim = tpl_default_limits();
    lim.max_output_bytes = 1 << 16;
    lim.max_memory_bytes = 8 << 20;
    lim.max_loop_iterations = 20000;
    char *out = NULL;
    size_t out_len = 0;
    for (int gen = 0; gen < 2; gen++) {
        if (tpl_render_chat_limits(t, messages ? messages : fz_messages,
                                   tools ? tools : n > 1 ? NULL : fz_tools, fz_kwargs, gen, &lim,
                                   &out, &out_len, err, sizeof err) == 0) {
            if (out_len > lim.max_output_bytes)
                abort();   /* the output limit held */
            free(out);
        }
    }
    free(messages);
    free(tools);
    tpl_free(t);
    return 0;
}
