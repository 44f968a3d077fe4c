/* template.c - the public face of the Jinja renderer: parse, render with the
 * variables transformers' apply_chat_template passes, and render a GGUF's
 * tokenizer.chat_template with the built-in family formats (llm/chat.h) as
 * the fallback for templates this renderer cannot handle. */
#include "llm/template/tpl_int.h"
#include "llm/chat.h"
#include "llm/tokenizer.h"
#include "src/core/gguf.h"
#include "src/core/omni.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

struct tpl_limits tpl_default_limits(void)
{
    return (struct tpl_limits){
        .max_output_bytes = 16u << 20,
        .max_memory_bytes = 256u << 20,
        .max_loop_iterations = 1000000,
        .max_depth = 64,
        .max_recursion = 1000,
    };
}

struct tpl *tpl_parse(const char *src, size_t len, char *err, size_t errlen)
{
    struct tpl *t = calloc(1, sizeof *t);
    struct tpl_token *toks = NULL;
    size_t ntoks = 0;
    if (!t) {
        omni_fail(err, errlen, OMNI_ERR_NOMEM, "out of memory");
        return NULL;
    }
    if (tpl_lex(t, src ? src : "", src ? len : 0, &toks, &ntoks, err, errlen) ||
        tpl_parse_tokens(t, toks, ntoks, err, errlen))
        goto fail;
    free(toks);
    return t;
fail:
    free(toks);
    tpl_free(t);
    return NULL;
}

void tpl_free(struct tpl *t)
{
    if (!t)
        return;
    tpl_arena_free(&t->arena);
    free(t);
}

static int set_var(struct tpl_ctx *c, struct tpl_dict *vars, const char *name, struct tpl_val v)
{
    return tpl_dict_set(c, vars, tpl_str(name, strlen(name)), v);
}

int tpl_render_chat_limits(const struct tpl *t, const char *messages_json, const char *tools_json,
                           const char *kwargs_json, bool add_generation_prompt,
                           const struct tpl_limits *limits, char **out, size_t *out_len, char *err,
                           size_t errlen)
{
    if (!t || !messages_json || !out)
        return omni_fail(err, errlen, OMNI_ERR_ARG, "template: missing template, messages or output");
    struct tpl_sb buf = { 0 };
    struct tpl_ctx c = { .t = t, .out = &buf, .lim = limits ? *limits : tpl_default_limits(),
                         .err = err, .errlen = errlen };
    if (c.lim.max_depth <= 0)
        c.lim.max_depth = 1;
    if (c.lim.max_recursion <= 0) /* a limits struct from before the field existed */
        c.lim.max_recursion = tpl_default_limits().max_recursion;
    c.arena.max_bytes = c.lim.max_memory_bytes;
    buf.max = c.lim.max_output_bytes;
    struct tpl_dict vars = { 0 };
    struct tpl_val v;
    int rc = tpl_from_json(&c, messages_json, "messages", &v);
    if (!rc && v.t != TV_LIST)
        rc = omni_fail(err, errlen, OMNI_ERR_ARG, "messages: expected a JSON array");
    if (!rc)
        rc = set_var(&c, &vars, "messages", v);
    /* transformers passes tools=None and documents=None when there are none. */
    v = tpl_none();
    if (!rc && tools_json && (rc = tpl_from_json(&c, tools_json, "tools", &v)) == 0 && v.t != TV_LIST &&
        v.t != TV_NONE)
        rc = omni_fail(err, errlen, OMNI_ERR_ARG, "tools: expected a JSON array");
    if (!rc)
        rc = set_var(&c, &vars, "tools", v);
    if (!rc)
        rc = set_var(&c, &vars, "documents", tpl_none());
    if (!rc)
        rc = set_var(&c, &vars, "add_generation_prompt", tpl_bool(add_generation_prompt));
    if (!rc && kwargs_json) {
        if ((rc = tpl_from_json(&c, kwargs_json, "kwargs", &v)) == 0 && v.t != TV_DICT)
            rc = omni_fail(err, errlen, OMNI_ERR_ARG, "kwargs: expected a JSON object");
        for (size_t i = 0; !rc && i < v.d->n; i++)
            rc = tpl_dict_set(&c, &vars, v.d->k[i], v.d->v[i]);
    }
    if (!rc)
        rc = tpl_eval_template(&c, &vars);
    tpl_arena_free(&c.arena);
    if (rc) {
        tpl_sb_free(&buf);
        return rc;
    }
    if (!buf.p && !(buf.p = calloc(1, 1)))
        return omni_fail(err, errlen, OMNI_ERR_NOMEM, "out of memory");
    *out = buf.p;
    if (out_len)
        *out_len = buf.n;
    return 0;
}

int tpl_render_chat(const struct tpl *t, const char *messages_json, const char *tools_json,
                    const char *kwargs_json, bool add_generation_prompt, char **out, size_t *out_len,
                    char *err, size_t errlen)
{
    return tpl_render_chat_limits(t, messages_json, tools_json, kwargs_json, add_generation_prompt, NULL,
                                  out, out_len, err, errlen);
}

// ---- GGUF ------------------------------------------------------------------------------

/* kwargs with bos_token / eos_token added where the caller did not set them. */
static char *kwargs_with_tokens(const struct tokenizer *tok, const char *kwargs_json, char *err, size_t errlen)
{
    cJSON *kw = kwargs_json ? cJSON_Parse(kwargs_json) : cJSON_CreateObject();
    if (!kw || !cJSON_IsObject(kw)) {
        cJSON_Delete(kw);
        omni_fail(err, errlen, OMNI_ERR_ARG, "kwargs: expected a JSON object");
        return NULL;
    }
    static const char *const names[2] = { "bos_token", "eos_token" };
    int32_t ids[2] = { tok ? tokenizer_bos(tok) : -1, tok ? tokenizer_eos(tok) : -1 };
    for (int i = 0; i < 2; i++) {
        const char *text = ids[i] >= 0 ? tokenizer_token_text(tok, ids[i]) : NULL;
        if (!cJSON_HasObjectItem(kw, names[i]))
            cJSON_AddStringToObject(kw, names[i], text ? text : "");
    }
    char *s = cJSON_PrintUnformatted(kw);
    cJSON_Delete(kw);
    if (!s)
        omni_fail(err, errlen, OMNI_ERR_NOMEM, "out of memory");
    return s;
}

/* The built-in family format for string contents (other contents: empty). */
static int render_fallback(const char *tmpl, const char *messages_json, bool add_generation_prompt, char **out,
                           size_t *out_len, char *err, size_t errlen)
{
    cJSON *msgs = cJSON_Parse(messages_json);
    if (!cJSON_IsArray(msgs)) {
        cJSON_Delete(msgs);
        return omni_fail(err, errlen, OMNI_ERR_ARG, "messages: expected a JSON array");
    }
    int n = cJSON_GetArraySize(msgs), i = 0;
    struct chat_message *m = calloc((size_t)n + 1, sizeof *m);
    if (!m) {
        cJSON_Delete(msgs);
        return omni_fail(err, errlen, OMNI_ERR_NOMEM, "out of memory");
    }
    for (const cJSON *e = msgs->child; e; e = e->next, i++) {
        const cJSON *role = cJSON_GetObjectItemCaseSensitive(e, "role");
        const cJSON *content = cJSON_GetObjectItemCaseSensitive(e, "content");
        m[i].role = cJSON_IsString(role) ? role->valuestring : "user";
        m[i].content = cJSON_IsString(content) ? content->valuestring : "";
    }
    enum chat_format f = chat_format_detect(tmpl);
    size_t need = 0;
    int rc = chat_format_apply(f, m, n, add_generation_prompt, NULL, 0, &need);
    char *buf = rc ? NULL : malloc(need + 1);
    if (!rc && !buf)
        rc = OMNI_ERR_NOMEM;
    if (!rc)
        rc = chat_format_apply(f, m, n, add_generation_prompt, buf, need + 1, &need);
    free(m);
    cJSON_Delete(msgs);
    if (rc) {
        free(buf);
        return omni_fail(err, errlen, rc, "template: built-in %s format failed", chat_format_name(f));
    }
    *out = buf;
    if (out_len)
        *out_len = need;
    return 0;
}

int tpl_render_gguf(const struct gguf *g, const struct tokenizer *tok, const char *messages_json,
                    const char *tools_json, const char *kwargs_json, bool add_generation_prompt, char **out,
                    size_t *out_len, bool *used_fallback, char *err, size_t errlen)
{
    size_t len = 0;
    const char *src = g ? gguf_get_str(g, "tokenizer.chat_template", &len) : NULL;
    char *tmpl = src ? malloc(len + 1) : NULL;
    char why[256] = "the model has no tokenizer.chat_template";
    int rc = OMNI_ERR_UNSUPPORTED;
    if (used_fallback)
        *used_fallback = false;
    if (src && !tmpl)
        return omni_fail(err, errlen, OMNI_ERR_NOMEM, "out of memory");
    if (tmpl) {
        memcpy(tmpl, src, len);
        tmpl[len] = 0;
        struct tpl *t = tpl_parse(tmpl, len, why, sizeof why);
        char *kw = t ? kwargs_with_tokens(tok, kwargs_json, err, errlen) : NULL;
        if (t && !kw)
            rc = OMNI_ERR_ARG;
        else if (t) {
            rc = tpl_render_chat(t, messages_json, tools_json, kw, add_generation_prompt, out, out_len, why,
                                 sizeof why);
            if (rc && rc != OMNI_ERR_UNSUPPORTED)
                omni_fail(err, errlen, rc, "%s", why);
        }
        cJSON_free(kw);
        tpl_free(t);
        /* Only what the renderer cannot do falls back; what the template
         * raises (or bad input) is the caller's error. */
        if (rc != OMNI_ERR_UNSUPPORTED && rc != OMNI_ERR_FORMAT) {
            free(tmpl);
            return rc;
        }
    }
    OMNI_WARN("chat template: %s; using the built-in %s format", why,
              chat_format_name(chat_format_detect(tmpl)));
    if (used_fallback)
        *used_fallback = true;
    rc = render_fallback(tmpl, messages_json, add_generation_prompt, out, out_len, err, errlen);
    free(tmpl);
    return rc;
}
