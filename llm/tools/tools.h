/* tools.h - tool calling: which wire format a model uses for its tool calls
 * (from its chat template, or --tool-parser NAME), and a streaming parser
 * that splits generated text into plain content and tool calls, recovering
 * what models get wrong (broken JSON, code fences, stray wrappers) and
 * coercing arguments to the types of the tool's JSON schema.
 *
 *   enum tools_format f = tools_format_detect(chat_template);   // or tools_format_from_name
 *   struct tools_parser_params pp = tools_parser_default_params();
 *   pp.fmt = f; pp.tools_json = "[{\"type\":\"function\",\"function\":{...}}]";
 *   struct tools_parser *p = tools_parser_new(&pp);
 *   tools_parser_feed(p, text, len, on_event, user);   // per generated chunk
 *   tools_parser_finish(p, on_event, user);            // at the end
 *   tools_parser_free(p);
 *
 * on_event gets CONTENT text (never any tool-call markup), then for each call
 * one CALL_START (index, id "call_...", name) followed by CALL_ARGS fragments
 * whose concatenation is the arguments as a JSON object text (cJSON's compact
 * print of the coerced object, whatever the chunking). Calls are announced as
 * soon as their name is known and their arguments stream while the text is
 * strict JSON; the rest comes when the call's region ends (docs/tools.md).
 *
 * Thread safety: the format functions are stateless; a parser belongs to one
 * thread at a time. */
#ifndef OMNI_TOOLS_H
#define OMNI_TOOLS_H

#include <stdbool.h>
#include <stddef.h>

struct cJSON;

/* Stable numbers: never renumber (names are what users type). */
enum tools_format {
    TOOLS_FMT_JSON = 0,      /* "json": a bare {"name":..,"arguments":..} object or array */
    TOOLS_FMT_HERMES,        /* "hermes": <tool_call>{"name":..,"arguments":..}</tool_call> (Qwen2.5/3) */
    TOOLS_FMT_QWEN3_CODER,   /* "qwen3_coder": <tool_call><function=N><parameter=P>V</parameter></function></tool_call> */
    TOOLS_FMT_LLAMA3,        /* "llama3": bare {"name":..,"parameters":..} or <|python_tag|>... */
    TOOLS_FMT_MISTRAL,       /* "mistral": [TOOL_CALLS][{...}] or [TOOL_CALLS]N[ARGS]{...} */
    TOOLS_FMT_DEEPSEEK,      /* "deepseek": <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>...<｜tool▁sep｜>... */
    TOOLS_FMT_FUNCTIONARY,   /* "functionary": >>>N\n{...} (v3.2) or <function=N>{...}</function> (v3.1) */
    TOOLS_FMT_GRANITE,       /* "granite": <|tool_call|>[{"name":..,"arguments":..}] */
    TOOLS_FMT_GEMMA,         /* "gemma": ```tool_code\nf(a=1)\n``` or <start_function_call>call:f{..} */
    TOOLS_FMT_PYTHONIC,      /* "pythonic": [f(a=1), g(b="x")] (Llama 4; LFM2 inside <|tool_call_start|>) */
    TOOLS_FMT_NONE,          /* "none": never parse tool calls */
    TOOLS_FMT_COUNT
};

/* The format a chat template's text implies (NULL or no hint: TOOLS_FMT_JSON). */
enum tools_format tools_format_detect(const char *chat_template);
const char *tools_format_name(enum tools_format f);
/* -1 for an unknown name. */
int tools_format_from_name(const char *name);
/* "json, hermes, qwen3_coder, ..." for help texts and error messages. */
const char *tools_format_names(void);

/* How to spell a tool call so that this format's parser takes it: for
 * forcing a call with a grammar (tool_choice "required" or a named function).
 * Every format's parser accepts, as its n calls (n >= 1, n == 1 unless
 * parallel_tool_calls):
 *
 *   list_open  call_open {"<name_key>": "NAME", "<args_key>": ARGS} call_close
 *              [ sep call_open {...} call_close ]...  list_close
 *
 * with ARGS a JSON object valid for the function's parameters schema and
 * optional whitespace between the pieces. trigger is the text that starts a
 * call in free generation ("" where calls have no marker and start the
 * output), for grammars that switch on lazily under tool_choice "auto". */
struct tools_wire {
    const char *trigger;
    const char *list_open, *list_close;
    const char *call_open, *call_close;
    const char *sep;
    const char *name_key, *args_key;
};
void tools_wire_of(enum tools_format f, struct tools_wire *out);

// ---- parsing ------------------------------------------------------------------

enum tools_event_type {
    TOOLS_EV_CONTENT,        /* text, len: plain assistant text */
    TOOLS_EV_CALL_START,     /* index, id, name */
    TOOLS_EV_CALL_ARGS,      /* index, text, len: a fragment of the arguments JSON */
};

struct tools_event {
    enum tools_event_type type;
    int index;               /* CALL_*: 0, 1, ... in order of the calls */
    const char *id;          /* CALL_START: "call_" + 24 alphanumerics */
    const char *name;        /* CALL_START */
    const char *text;        /* CONTENT, CALL_ARGS; valid during the callback */
    size_t len;
};
typedef void (*tools_event_fn)(void *user, const struct tools_event *ev);

struct tools_parser_params {
    enum tools_format fmt;
    const char *tools_json;  /* the request's OpenAI "tools" array (JSON text) or NULL:
                                names to recognise bare calls, schemas for coercion */
    bool parallel;           /* false: only the first call is reported */
    unsigned long long id_seed; /* 0: random call ids; else deterministic (tests) */
};
struct tools_parser_params tools_parser_default_params(void);

/* NULL only when out of memory (unparsable tools_json counts as none). */
struct tools_parser *tools_parser_new(const struct tools_parser_params *p);
void tools_parser_free(struct tools_parser *p);
/* Feed generated text (any chunking: the events are the same). Returns 0, or
 * OMNI_ERR_NOMEM (the parser then passes text through as content). */
int tools_parser_feed(struct tools_parser *p, const char *text, size_t len,
                      tools_event_fn fn, void *user);
/* End of the output: held-back text and unterminated calls are resolved. */
int tools_parser_finish(struct tools_parser *p, tools_event_fn fn, void *user);
/* Calls reported so far. */
int tools_parser_n_calls(const struct tools_parser *p);

/* Tool calls in text written outside the content (e.g. inside reasoning):
 * the calls of a complete text, reported as CALL_* events only. */
int tools_parse_calls_only(const struct tools_parser_params *p, const char *text, size_t len,
                           tools_event_fn fn, void *user);

// ---- helpers shared with the API and the grammar -------------------------------

/* Lenient JSON: standard JSON plus single-quoted strings, raw newlines and
 * control characters in strings, trailing commas, unquoted keys, Python's
 * True/False/None, and missing closing quotes/brackets at the end of the
 * text. *used (may be NULL) gets the bytes consumed. NULL if no value. */
struct cJSON *tools_json_parse_lenient(const char *text, size_t len, size_t *used);

/* The "parameters" schema of function name in an OpenAI tools array, or NULL. */
const struct cJSON *tools_find_schema(const struct cJSON *tools, const char *name);

/* Coerce args (an object, changed in place) to the types of schema's
 * properties: "42" -> 42 for integer, "true" -> true, 7 -> "7" for string,
 * '{"a":1}' -> object for object/array. */
void tools_coerce_args(struct cJSON *args, const struct cJSON *schema);

#endif
