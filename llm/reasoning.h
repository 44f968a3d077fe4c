/* reasoning.h - splits generated text into reasoning and the answer:
 * <think>...</think> (also when the chat template opened <think> itself and
 * only </think> appears), Mistral's [THINK]...[/THINK], and gpt-oss Harmony
 * channels (analysis -> reasoning, final and commentary preambles -> answer;
 * a message to functions.NAME becomes "<tool_call>{"name": "NAME", "arguments":
 * ...}</tool_call>" in the answer, for the hermes tool parser downstream, its
 * arguments streamed as generated; messages to the built-in tools (browser,
 * python) are reasoning; text without Harmony framing is answer).
 *
 *   enum reasoning_format f = reasoning_format_detect(chat_template);
 *   bool open = reasoning_prompt_opens(f, prompt, prompt_len);
 *   struct reasoning_parser *p = reasoning_parser_new(f, open);
 *   reasoning_parser_feed(p, text, len, on_text, user);   // on_text(user, is_reasoning, s, n)
 *   reasoning_parser_finish(p, on_text, user);
 *   reasoning_parser_free(p);
 *
 * Thread safety: stateless functions; a parser belongs to one thread at a time. */
#ifndef OMNI_REASONING_H
#define OMNI_REASONING_H

#include <stdbool.h>
#include <stddef.h>

enum reasoning_format {
    REASONING_NONE = 0,      /* "none": everything is answer */
    REASONING_THINK,         /* "think": <think>...</think> */
    REASONING_THINK_BRACKET, /* "mistral": [THINK]...[/THINK] */
    REASONING_HARMONY,       /* "harmony": <|channel|>analysis<|message|>...<|end|> */
    REASONING_FMT_COUNT
};

/* From a chat template's text (NULL or no hint: REASONING_THINK, which costs
 * nothing for models that never write <think>). */
enum reasoning_format reasoning_format_detect(const char *chat_template);
const char *reasoning_format_name(enum reasoning_format f);
int reasoning_format_from_name(const char *name);    /* -1 when unknown */

/* Does the rendered prompt end inside reasoning (the template wrote the
 * opening tag, e.g. "<think>\n")? Then the output starts as reasoning. */
bool reasoning_prompt_opens(enum reasoning_format f, const char *prompt, size_t len);

/* Text that ends reasoning and opens the answer ("\n</think>\n\n", ...): what
 * a reasoning budget forces once it is spent. "" for REASONING_NONE. */
const char *reasoning_close_text(enum reasoning_format f);

typedef void (*reasoning_fn)(void *user, bool reasoning, const char *text, size_t len);

/* NULL when out of memory. */
struct reasoning_parser *reasoning_parser_new(enum reasoning_format f, bool starts_open);
void reasoning_parser_free(struct reasoning_parser *p);
/* Any chunking gives the same calls' concatenations; tags never reach fn.
 * Returns 0 or OMNI_ERR_NOMEM. */
int reasoning_parser_feed(struct reasoning_parser *p, const char *text, size_t len,
                          reasoning_fn fn, void *user);
int reasoning_parser_finish(struct reasoning_parser *p, reasoning_fn fn, void *user);
/* Is the parser inside reasoning now (for budgets)? */
bool reasoning_parser_in_reasoning(const struct reasoning_parser *p);

#endif
