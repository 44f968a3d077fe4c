/* template.h - chat templates from the model: a renderer for the Jinja2
 * subset that tokenizer.chat_template texts use, rendering the way Hugging
 * Face apply_chat_template does (trim_blocks, lstrip_blocks, loop controls,
 * tojson without ASCII escaping, raise_exception and strftime_now).
 *
 *   char err[256];
 *   struct tpl *t = tpl_parse(src, strlen(src), err, sizeof err);
 *   if (!t) { fprintf(stderr, "%s\n", err); ... }        // "line 3, column 7: ..."
 *   char *prompt; size_t n;
 *   if (tpl_render_chat(t, "[{\"role\":\"user\",\"content\":\"Hi\"}]", NULL,
 *                       "{\"bos_token\":\"<s>\"}", true, &prompt, &n, err, sizeof err) == 0)
 *       ...; free(prompt);
 *   tpl_free(t);
 *
 * Bad or hostile templates never crash or hang: syntax errors name line and
 * column, nesting past TPL_MAX_PARSE_DEPTH is a syntax error, and a render
 * stops with OMNI_ERR_LIMIT past the output, memory, loop-iteration or
 * nesting limits. Parser and evaluator recurse, so these bound their stack.
 * Thread safety: a parsed struct tpl is immutable; any number of threads may
 * render it at once (each render has its own state). */
#ifndef OMNI_TEMPLATE_H
#define OMNI_TEMPLATE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct tpl;
struct gguf;
struct tokenizer;

/* Blocks and expression levels nested in the source, chains such as a.b.c,
 * x|f|g or 1 + 2 + 3 counting one level per link: deeper is a syntax error. */
#define TPL_MAX_PARSE_DEPTH 200

struct tpl_limits {
    size_t max_output_bytes;      /* rendered text, and any one string built on the way: 16 MiB */
    size_t max_memory_bytes;      /* values made during one render: 256 MiB */
    uint64_t max_loop_iterations; /* all for-loop iterations of one render: 1000000 */
    int max_depth;                /* nested macro calls; nested values printed, compared or
                                     dumped as JSON: 64 */
    int max_recursion;            /* evaluator levels on the stack at once (expressions and
                                     blocks, across macro calls): 1000, about 0.5 MB of
                                     stack (under 2 MB with AddressSanitizer); 0: the default */
};
struct tpl_limits tpl_default_limits(void);

/* Parse src[len] (UTF-8). NULL on a syntax error (err: "line L, column C:
 * what"), an unknown filter or test (as jinja2, at parse time), or no memory. */
struct tpl *tpl_parse(const char *src, size_t len, char *err, size_t errlen);
void tpl_free(struct tpl *t);

/* Render with the variables apply_chat_template passes: messages (JSON array),
 * tools (JSON array, or none when tools_json is NULL), documents (none),
 * add_generation_prompt, and every key of kwargs_json (a JSON object, may be
 * NULL): bos_token, eos_token, enable_thinking, date_string, ... On success
 * *out is a malloc'd NUL-terminated string (caller frees) of *out_len bytes.
 * Errors: OMNI_ERR_ARG for bad JSON and for what the template raises
 * (raise_exception's message is err, word for word; other runtime errors
 * start with "line L: "), OMNI_ERR_UNSUPPORTED for a construct this renderer
 * lacks, OMNI_ERR_LIMIT, OMNI_ERR_NOMEM. */
int tpl_render_chat(const struct tpl *t, const char *messages_json, const char *tools_json,
                    const char *kwargs_json, bool add_generation_prompt, char **out,
                    size_t *out_len, char *err, size_t errlen);

/* The same with explicit limits (NULL: tpl_default_limits()). */
int tpl_render_chat_limits(const struct tpl *t, const char *messages_json,
                           const char *tools_json, const char *kwargs_json,
                           bool add_generation_prompt, const struct tpl_limits *limits,
                           char **out, size_t *out_len, char *err, size_t errlen);

/* Render with a model's tokenizer.chat_template, bos_token and eos_token set
 * to the texts of the tokenizer's BOS/EOS (kwargs_json may override them).
 * A GGUF without a template, or whose template cannot be parsed or uses what
 * this renderer lacks, falls back to the built-in family format (llm/chat.h,
 * string contents only) with a warning; *used_fallback (may be NULL) says so.
 * Errors the template raises are returned, not hidden by the fallback. */
int tpl_render_gguf(const struct gguf *g, const struct tokenizer *tok,
                    const char *messages_json, const char *tools_json,
                    const char *kwargs_json, bool add_generation_prompt, char **out,
                    size_t *out_len, bool *used_fallback, char *err, size_t errlen);

/* The time strftime_now renders: local time, or when SOURCE_DATE_EPOCH is set
 * (seconds since 1970, the reproducible-builds variable) that instant in UTC,
 * so that prompts printing today's date can be reproduced and tested. */
struct tm;
void tpl_clock(struct tm *out);

#endif
