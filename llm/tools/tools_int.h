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

/* A call of an unfinished region as far as it can be streamed: its name,
 * and the start of its arguments as the final arguments text will spell
 * them (cJSON's unformatted print of the coerced object), cut where no later
 * text can change what came before. */
struct tools_partial {
    char *name;              /* malloc'd */
    char *args;              /* malloc'd, len bytes (+ NUL) */
    size_t len;
};

struct tools_partials {
    struct tools_partial *v;
    int n, cap;
};

/* The calls of the text so far of a JSON call region ({"name":..,"arguments":
 * {..}} objects, a list or ';'-separated run of them, N[ARGS]{..}, N\n{..}),
 * scanned as strict JSON: the scan stops at the first byte that is not, and
 * at anything the body parser could read differently. Arguments values of a
 * string-typed (or untyped) property stream as they come; other values once
 * complete, coerced to tools' schemas (may be NULL). Appends to out. */
void tools_partial_scan(const char *text, size_t len, const struct cJSON *tools,
                        struct tools_partials *out);
void tools_partials_clear(struct tools_partials *ps);

/* Is text (starting at its first non-blank) the start of a bare call?
 * 1 yes, 0 no, -1 cannot tell yet (needs more text). */
int tools_bare_check(const char *text, size_t len, bool functionary);

#endif
