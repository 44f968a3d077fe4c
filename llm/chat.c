/* chat.c - the built-in chat formats. Each renderer mirrors one official
 * template for text messages: Qwen2-style ChatML, Llama 3 Instruct, Llama 2
 * chat, Gemma 3 (system folded into the first turn), Phi-3.5 mini and
 * Mistral 7B Instruct v0.1 (which has no system role: we fold it into the
 * first user turn as Mistral's later templates do) and gpt-oss's Harmony. Jinja's trim/strip are
 * reproduced where the templates apply them. */
#include "llm/chat.h"

#include "llm/template/template.h"
#include "src/core/omni.h"

#include <string.h>
#include <time.h>

static const char *const format_names[CHAT_FORMAT_COUNT] = {
    [CHAT_FORMAT_CHATML] = "chatml", [CHAT_FORMAT_LLAMA3] = "llama3",
    [CHAT_FORMAT_LLAMA2] = "llama2", [CHAT_FORMAT_GEMMA] = "gemma",
    [CHAT_FORMAT_PHI3] = "phi3",     [CHAT_FORMAT_MISTRAL] = "mistral",
    [CHAT_FORMAT_HARMONY] = "harmony",
};

static const char *const format_eot[CHAT_FORMAT_COUNT] = {
    [CHAT_FORMAT_CHATML] = "<|im_end|>",   [CHAT_FORMAT_LLAMA3] = "<|eot_id|>",
    [CHAT_FORMAT_LLAMA2] = "</s>",         [CHAT_FORMAT_GEMMA] = "<end_of_turn>",
    [CHAT_FORMAT_PHI3] = "<|end|>",        [CHAT_FORMAT_MISTRAL] = "</s>",
    /* <|end|> closes every Harmony message; the turn ends at <|return|> (or
     * at <|call|>, a tool call: the tokenizer marks both end-of-generation) */
    [CHAT_FORMAT_HARMONY] = "<|return|>",
};

const char *chat_format_name(enum chat_format fmt)
{
    return (unsigned)fmt < CHAT_FORMAT_COUNT ? format_names[fmt] : "unknown";
}

int chat_format_from_name(const char *name)
{
    for (int i = 0; name && i < CHAT_FORMAT_COUNT; i++)
        if (!strcmp(name, format_names[i]))
            return i;
    return -1;
}

const char *chat_format_end_of_turn(enum chat_format fmt)
{
    return (unsigned)fmt < CHAT_FORMAT_COUNT ? format_eot[fmt] : "";
}

enum chat_format chat_format_detect(const char *t)
{
    if (!t || !*t)
        return CHAT_FORMAT_CHATML;
    /* Most specific markers first: each family's turn header is unique to it. */
    if (strstr(t, "<|channel|>") && strstr(t, "<|start|>"))
        return CHAT_FORMAT_HARMONY;
    if (strstr(t, "<|im_start|>"))
        return CHAT_FORMAT_CHATML;
    if (strstr(t, "<|start_header_id|>"))
        return CHAT_FORMAT_LLAMA3;
    if (strstr(t, "<start_of_turn>"))
        return CHAT_FORMAT_GEMMA;
    if (strstr(t, "<|user|>") && strstr(t, "<|end|>"))
        return CHAT_FORMAT_PHI3;
    if (strstr(t, "[INST]"))
        return strstr(t, "<<SYS>>") ? CHAT_FORMAT_LLAMA2 : CHAT_FORMAT_MISTRAL;
    return CHAT_FORMAT_CHATML;
}

// ---- output ----

struct chat_out {
    char *buf;
    size_t cap, len; /* len counts everything, also what did not fit */
};

static void put_n(struct chat_out *o, const char *s, size_t n)
{
    if (o->len < o->cap) {
        size_t room = o->cap - o->len;
        memcpy(o->buf + o->len, s, n < room ? n : room);
    }
    o->len += n;
}

static void put(struct chat_out *o, const char *s) { put_n(o, s, strlen(s)); }

/* Python's str.isspace for ASCII, which is what Jinja's trim uses in practice. */
static int is_space(char c) { return c == ' ' || (c >= '\t' && c <= '\r'); }

/* Write the concatenation of parts[0..n) with leading and trailing whitespace
 * of the whole removed (Jinja `(a + b) | trim`). */
static void put_trimmed(struct chat_out *o, const char *const *parts, int n)
{
    size_t len[4];
    for (int i = 0; i < n; i++)
        len[i] = strlen(parts[i]);
    int first = 0;
    size_t skip = 0;
    while (first < n) { /* skip leading blanks, across parts */
        while (skip < len[first] && is_space(parts[first][skip]))
            skip++;
        if (skip < len[first])
            break;
        first++;
        skip = 0;
    }
    int last = n - 1;
    size_t keep = last >= 0 ? len[last] : 0;
    while (last >= first) { /* drop trailing blanks, across parts */
        size_t lo = last == first ? skip : 0;
        while (keep > lo && is_space(parts[last][keep - 1]))
            keep--;
        if (keep > lo)
            break;
        last--;
        keep = last >= 0 ? len[last] : 0;
    }
    for (int i = first; i <= last; i++) {
        size_t a = i == first ? skip : 0, b = i == last ? keep : len[i];
        put_n(o, parts[i] + a, b - a);
    }
}

static void put_trim1(struct chat_out *o, const char *s) { put_trimmed(o, &s, 1); }

/* bos_token inside a template: the tokenizer adds the leading one. */
static void put_inner_bos(struct chat_out *o)
{
    if (o->len > 0)
        put(o, "<s>");
}

// ---- the families ----

static void render_chatml(struct chat_out *o, const struct chat_message *m, int n, bool gen)
{
    for (int i = 0; i < n; i++) {
        put(o, "<|im_start|>");
        put(o, m[i].role);
        put(o, "\n");
        put(o, m[i].content);
        put(o, "<|im_end|>\n");
    }
    if (gen)
        put(o, "<|im_start|>assistant\n");
}

static void render_llama3(struct chat_out *o, const struct chat_message *m, int n, bool gen)
{
    for (int i = 0; i < n; i++) {
        put(o, "<|start_header_id|>");
        put(o, m[i].role);
        put(o, "<|end_header_id|>\n\n");
        put_trim1(o, m[i].content);
        put(o, "<|eot_id|>");
    }
    if (gen)
        put(o, "<|start_header_id|>assistant<|end_header_id|>\n\n");
}

/* Llama 2 chat: a leading system message goes into the first turn inside a
 * <<SYS>> block; each user turn is "<s>[INST] ... [/INST]", each assistant
 * turn " ... </s>"; there is no generation prompt (the [/INST] is it). */
static void render_llama2(struct chat_out *o, const struct chat_message *m, int n)
{
    const char *sys = NULL;
    if (n > 0 && !strcmp(m[0].role, "system")) {
        sys = m[0].content;
        m++;
        n--;
    }
    for (int i = 0; i < n; i++) {
        const char *parts[4] = { m[i].content };
        int np = 1;
        if (i == 0 && sys) {
            parts[0] = "<<SYS>>\n";
            parts[1] = sys;
            parts[2] = "\n<</SYS>>\n\n";
            parts[3] = m[i].content;
            np = 4;
        }
        if (!strcmp(m[i].role, "user")) {
            put_inner_bos(o);
            put(o, "[INST] ");
            put_trimmed(o, parts, np);
            put(o, " [/INST]");
        } else if (!strcmp(m[i].role, "assistant")) {
            put(o, " ");
            put_trimmed(o, parts, np);
            put(o, " </s>");
        }
    }
}

/* Mistral Instruct v0.1: "[INST] q [/INST]a</s>[INST] q2 [/INST]". */
static void render_mistral(struct chat_out *o, const struct chat_message *m, int n)
{
    const char *sys = NULL;
    if (n > 0 && !strcmp(m[0].role, "system")) {
        sys = m[0].content;
        m++;
        n--;
    }
    bool sys_done = false;
    for (int i = 0; i < n; i++) {
        if (!strcmp(m[i].role, "user")) {
            put(o, "[INST] ");
            if (sys && !sys_done) {
                put(o, sys);
                put(o, "\n\n");
                sys_done = true;
            }
            put(o, m[i].content);
            put(o, " [/INST]");
        } else if (!strcmp(m[i].role, "assistant")) {
            put(o, m[i].content);
            put(o, "</s>");
        }
    }
}

/* Gemma 3: roles user/model; a system message becomes a prefix (plus a blank
 * line) of the first turn's text, which is trimmed, the prefix is not. */
static void render_gemma(struct chat_out *o, const struct chat_message *m, int n, bool gen)
{
    const char *sys = NULL;
    if (n > 0 && !strcmp(m[0].role, "system")) {
        sys = m[0].content;
        m++;
        n--;
    }
    for (int i = 0; i < n; i++) {
        put(o, "<start_of_turn>");
        put(o, !strcmp(m[i].role, "assistant") ? "model" : m[i].role);
        put(o, "\n");
        if (i == 0 && sys) {
            put(o, sys);
            put(o, "\n\n");
        }
        put_trim1(o, m[i].content);
        put(o, "<end_of_turn>\n");
    }
    if (gen)
        put(o, "<start_of_turn>model\n");
}

/* Phi-3.5 mini: <|system|>/<|user|>/<|assistant|> blocks closed by <|end|>;
 * without a generation prompt the template ends with the EOS text. */
static void render_phi3(struct chat_out *o, const struct chat_message *m, int n, bool gen)
{
    for (int i = 0; i < n; i++) {
        const char *r = m[i].role;
        if (!strcmp(r, "system") && !*m[i].content)
            continue;
        if (strcmp(r, "system") && strcmp(r, "user") && strcmp(r, "assistant"))
            continue;
        put(o, "<|");
        put(o, r);
        put(o, "|>\n");
        put(o, m[i].content);
        put(o, "<|end|>\n");
    }
    put(o, gen ? "<|assistant|>\n" : "<|endoftext|>");
}

/* gpt-oss's template for text messages: its system header (default model
 * identity, reasoning effort medium, today's date as strftime_now gives it), a
 * leading system/developer message as the developer's "# Instructions",
 * answers on the final channel, the last one closed by <|return|> when no
 * generation prompt follows. Other roles are skipped, as the template does. */
static void render_harmony(struct chat_out *o, const struct chat_message *m, int n, bool gen)
{
    char date[32];
    struct tm tm;
    tpl_clock(&tm);
    strftime(date, sizeof date, "%Y-%m-%d", &tm);
    put(o, "<|start|>system<|message|>You are ChatGPT, a large language model trained by OpenAI.\n"
           "Knowledge cutoff: 2024-06\nCurrent date: ");
    put(o, date);
    put(o, "\n\nReasoning: medium\n\n# Valid channels: analysis, commentary, final. Channel must be "
           "included for every message.<|end|>");
    int i = 0;
    if (n > 0 && (!strcmp(m[0].role, "system") || !strcmp(m[0].role, "developer"))) {
        if (*m[0].content) {
            put(o, "<|start|>developer<|message|># Instructions\n\n");
            put(o, m[0].content);
            put(o, "\n\n<|end|>");
        }
        i = 1;
    }
    for (; i < n; i++) {
        if (!strcmp(m[i].role, "assistant")) {
            put(o, "<|start|>assistant<|channel|>final<|message|>");
            put(o, m[i].content);
            put(o, i == n - 1 && !gen ? "<|return|>" : "<|end|>");
        } else if (!strcmp(m[i].role, "user")) {
            put(o, "<|start|>user<|message|>");
            put(o, m[i].content);
            put(o, "<|end|>");
        }
    }
    if (gen)
        put(o, "<|start|>assistant");
}

int chat_format_apply(enum chat_format fmt, const struct chat_message *messages, int n,
                      bool add_generation_prompt, char *out, size_t cap, size_t *len)
{
    if (len)
        *len = 0;
    if ((unsigned)fmt >= CHAT_FORMAT_COUNT || n < 0 || (n > 0 && !messages) || (cap && !out))
        return OMNI_ERR_ARG;
    for (int i = 0; i < n; i++)
        if (!messages[i].role || !messages[i].content)
            return OMNI_ERR_ARG;
    /* Leave room for the NUL. */
    struct chat_out o = { out, cap ? cap - 1 : 0, 0 };
    switch (fmt) {
    case CHAT_FORMAT_CHATML: render_chatml(&o, messages, n, add_generation_prompt); break;
    case CHAT_FORMAT_LLAMA3: render_llama3(&o, messages, n, add_generation_prompt); break;
    case CHAT_FORMAT_LLAMA2: render_llama2(&o, messages, n); break;
    case CHAT_FORMAT_GEMMA: render_gemma(&o, messages, n, add_generation_prompt); break;
    case CHAT_FORMAT_PHI3: render_phi3(&o, messages, n, add_generation_prompt); break;
    case CHAT_FORMAT_MISTRAL: render_mistral(&o, messages, n); break;
    case CHAT_FORMAT_HARMONY: render_harmony(&o, messages, n, add_generation_prompt); break;
    case CHAT_FORMAT_COUNT: return OMNI_ERR_ARG;
    }
    if (cap)
        out[o.len < o.cap ? o.len : o.cap] = '\0';
    if (len)
        *len = o.len;
    return 0;
}
