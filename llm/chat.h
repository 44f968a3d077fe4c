/* chat.h - built-in chat formats: messages -> prompt text for the common
 * model families, picked by sniffing the GGUF's tokenizer.chat_template.
 *
 * This is the fallback until the full Jinja renderer exists: each format
 * renders what the family's official template renders for plain text
 * messages (system handling included), except the leading BOS, which is left
 * to the tokenizer (add_bos), as llama.cpp does. Turn markers inside the text
 * (<|im_start|>, </s><s>, ...) must be tokenized with TOK_PARSE_SPECIAL.
 *
 *   enum chat_format f = chat_format_detect(gguf_template_or_NULL);
 *   struct chat_message msgs[] = { { "system", "Be brief." }, { "user", "Hi" } };
 *   size_t need;
 *   chat_format_apply(f, msgs, 2, true, NULL, 0, &need);      // measure
 *   char *buf = malloc(need + 1);
 *   chat_format_apply(f, msgs, 2, true, buf, need + 1, &need);
 *
 * Thread safety: stateless; every function may be called from any thread. */
#ifndef OMNI_CHAT_H
#define OMNI_CHAT_H

#include <stdbool.h>
#include <stddef.h>

enum chat_format {
    CHAT_FORMAT_CHATML,   /* <|im_start|>role\n...<|im_end|>\n (Qwen, SmolLM, ...) */
    CHAT_FORMAT_LLAMA3,   /* <|start_header_id|>role<|end_header_id|>\n\n...<|eot_id|> */
    CHAT_FORMAT_LLAMA2,   /* [INST] <<SYS>>\n...\n<</SYS>>\n\n... [/INST] */
    CHAT_FORMAT_GEMMA,    /* <start_of_turn>user\n...<end_of_turn>\n, role model */
    CHAT_FORMAT_PHI3,     /* <|user|>\n...<|end|>\n<|assistant|>\n */
    CHAT_FORMAT_MISTRAL,  /* [INST] ... [/INST]...</s> (no <<SYS>> block) */
    CHAT_FORMAT_HARMONY,  /* gpt-oss: <|start|>role<|message|>...<|end|>, answers on
                             <|channel|>final; the system header carries today's date */
    CHAT_FORMAT_COUNT
};

struct chat_message {
    const char *role;     /* "system", "user", "assistant" (others per family) */
    const char *content;  /* UTF-8, NUL-terminated */
};

/* Family of a Jinja chat template, from the markers it contains; NULL, empty
 * or unrecognised -> CHAT_FORMAT_CHATML. */
enum chat_format chat_format_detect(const char *jinja_template);

/* "chatml", "llama3", ... ; chat_format_from_name gives -1 for unknown names. */
const char *chat_format_name(enum chat_format fmt);
int chat_format_from_name(const char *name);

/* Text that ends an assistant turn ("<|im_end|>", "<|eot_id|>", "</s>", ...):
 * a stop string for vocabularies that do not mark it end-of-generation. */
const char *chat_format_end_of_turn(enum chat_format fmt);

/* Render messages[0..n) into out[cap] (NUL-terminated when cap > 0, cut
 * short if too small). *len gets the full length without the NUL, so a call
 * with cap 0 measures. add_generation_prompt appends the opening of an
 * assistant turn where the family has one. Returns 0, or OMNI_ERR_ARG for a
 * bad format, n < 0 or a NULL role/content. */
int chat_format_apply(enum chat_format fmt, const struct chat_message *messages, int n,
                      bool add_generation_prompt, char *out, size_t cap, size_t *len);

#endif
