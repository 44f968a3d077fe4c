/* tools_int.h - what the two halves of llm/tools share: the body parser
 * (tools_parse.c) that turns the text of one call region into calls, used by
 * the streaming splitter (tools.c). Not a public header. */
#ifndef OMNI_TOOLS_INT_H
#define OMNI_TOOLS_INT_H

#include "llm/tools/tools.h"

struct tools_call {
    char *name;              /* malloc'd */
    struct cJSON *args;      /* an object */
};

struct tools_calls {
    struct tools_call *v;
    int n, cap;
};

/* Calls in the text of one call region (markers removed, or kept for
 * formats whose markers carry the name): JSON objects or arrays of them,
 * pythonic calls, <function=N>..., N[ARGS]{...}, DeepSeek's sep form,
 * Functionary's N\n{...}, code fences around any of these. Appends to out;
 * returns how many were found (0: not a call). */
int tools_body_calls(const char *text, size_t len, struct tools_calls *out);
void tools_calls_clear(struct tools_calls *c);

/* Is text (starting at its first non-blank) the start of a bare call?
 * 1 yes, 0 no, -1 cannot tell yet (needs more text). */
int tools_bare_check(const char *text, size_t len, bool functionary);

#endif
