/* responses.c - POST /v1/responses and the stored-response routes. A
 * request is translated into the chat-completions shape (input items ->
 * messages, flat function tools -> chat tools, text.format ->
 * response_format, reasoning.effort -> reasoning_effort, max_output_tokens
 * -> max_tokens) and runs through chatreq.h like /v1/chat/completions, so
 * templates, tool parsing, reasoning budgets and grammars are the chat
 * route's. A chained request (previous_response_id) renders the stored
 * conversation followed by its new input: the same tokens as the previous
 * prompt plus its answer, so the engine's prefix cache serves them. */
#include "src/api/responses.h"

#include "src/api/api.h"
#include "src/api/images.h"
#include "src/api/mcpapi.h"
#include "src/api/mcploop.h"
#include "src/api/responses_out.h"
#include "src/api/responses_store.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

// ---- request translation -------------------------------------------------------

/* Tool types the Responses API runs on OpenAI's side; none can run here. */
static const char *const responses_builtin_tools[] = {
    "web_search", "web_search_preview", "web_search_2025_08_26", "web_search_preview_2025_03_11",
    "file_search", "computer_use", "computer_use_preview", "code_interpreter",
    "image_generation", "local_shell", "shell", "apply_patch", "custom", "tool_search",
};

static bool responses_is(const cJSON *obj, const char *key, const char *value)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    return cJSON_IsString(v) && !strcmp(v->valuestring, value);
}

/* One content part list (or string) -> chat content: a string, or text and
 * image_url parts when images are among them. */
static cJSON *responses_content(const cJSON *content, const char *field, bool assistant,
                                struct api_error *e)
{
    if (cJSON_IsString(content))
        return cJSON_CreateString(content->valuestring);
    if (!cJSON_IsArray(content)) {
        api_error_set(e, 400, field, "'%s' must be a string or an array of content parts", field);
        return NULL;
    }
    cJSON *parts = cJSON_CreateArray();
    const cJSON *p;
    int j = 0;
    cJSON_ArrayForEach(p, content) {
        char pf[128];
        snprintf(pf, sizeof pf, "%s[%d]", field, j++);
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(p, "type");
        if (!cJSON_IsObject(p) || !cJSON_IsString(type)) {
            api_error_set(e, 400, pf, "'%s' must be an object with a 'type'", pf);
            goto fail;
        }
        const char *ty = type->valuestring;
        if (!strcmp(ty, "input_text") || !strcmp(ty, "output_text") || !strcmp(ty, "text") ||
            !strcmp(ty, "refusal") || !strcmp(ty, "summary_text") || !strcmp(ty, "reasoning_text")) {
            const cJSON *t = cJSON_GetObjectItemCaseSensitive(p, !strcmp(ty, "refusal") ? "refusal" : "text");
            if (!cJSON_IsString(t)) {
                api_error_set(e, 400, pf, "'%s.text' must be a string", pf);
                goto fail;
            }
            cJSON *x = cJSON_CreateObject();
            cJSON_AddStringToObject(x, "type", "text");
            cJSON_AddStringToObject(x, "text", t->valuestring);
            cJSON_AddItemToArray(parts, x);
        } else if (!assistant && !strcmp(ty, "input_image")) {
            const cJSON *url = cJSON_GetObjectItemCaseSensitive(p, "image_url");
            if (!cJSON_IsString(url)) {
                api_error_set(e, 400, pf, "'%s.image_url' must be a URL string (file_id is not supported)", pf);
                goto fail;
            }
            cJSON *x = cJSON_CreateObject();
            cJSON_AddStringToObject(x, "type", "image_url");
            cJSON *iu = cJSON_AddObjectToObject(x, "image_url");
            cJSON_AddStringToObject(iu, "url", url->valuestring);
            const cJSON *detail = cJSON_GetObjectItemCaseSensitive(p, "detail");
            if (cJSON_IsString(detail))
                cJSON_AddStringToObject(iu, "detail", detail->valuestring);
            cJSON_AddItemToArray(parts, x);
        } else {
            api_error_set(e, 400, pf, "'%s': content type '%s' is not supported", pf, ty);
            goto fail;
        }
    }
    return parts;
fail:
    cJSON_Delete(parts);
    return NULL;
}

static cJSON *responses_chat_message(cJSON *msgs, const char *role, cJSON *content)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "role", role);
    cJSON_AddItemToObject(o, "content", content ? content : cJSON_CreateString(""));
    cJSON_AddItemToArray(msgs, o);
    return o;
}

/* The assistant message a function_call or reasoning item belongs to: the
 * last message when it is an assistant turn (the model's text, its
 * reasoning and its calls are one turn), else a new empty one. */
static cJSON *responses_assistant_turn(cJSON *msgs)
{
    int n = cJSON_GetArraySize(msgs);
    cJSON *last = n ? cJSON_GetArrayItem(msgs, n - 1) : NULL;
    if (last && responses_is(last, "role", "assistant"))
        return last;
    return responses_chat_message(msgs, "assistant", NULL);
}

static const char *responses_call_name(const cJSON *msgs, const char *call_id)
{
    const cJSON *m, *c;
    cJSON_ArrayForEach(m, msgs)
        cJSON_ArrayForEach(c, cJSON_GetObjectItemCaseSensitive(m, "tool_calls")) {
            const cJSON *id = cJSON_GetObjectItemCaseSensitive(c, "id");
            if (cJSON_IsString(id) && !strcmp(id->valuestring, call_id)) {
                const cJSON *fn = cJSON_GetObjectItemCaseSensitive(c, "function");
                const cJSON *name = cJSON_GetObjectItemCaseSensitive(fn, "name");
                return cJSON_IsString(name) ? name->valuestring : NULL;
            }
        }
    return NULL;
}

/* Reasoning text of a reasoning item: its reasoning_text content, else its
 * summary (what clients send back). */
static char *responses_reasoning_text(const cJSON *item)
{
    const cJSON *content = cJSON_GetObjectItemCaseSensitive(item, "content");
    if (!cJSON_GetArraySize(content))
        content = cJSON_GetObjectItemCaseSensitive(item, "summary");
    size_t total = 1;
    const cJSON *p;
    cJSON_ArrayForEach(p, content) {
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(p, "text");
        if (cJSON_IsString(t))
            total += strlen(t->valuestring) + 1;
    }
    char *s = malloc(total);
    if (!s)
        return NULL;
    size_t n = 0;
    cJSON_ArrayForEach(p, content) {
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(p, "text");
        if (!cJSON_IsString(t))
            continue;
        if (n)
            s[n++] = '\n';
        size_t tl = strlen(t->valuestring);
        memcpy(s + n, t->valuestring, tl);
        n += tl;
    }
    s[n] = 0;
    return s;
}

/* One input item appended to msgs (chat shape). */
static int responses_item(const cJSON *it, int i, cJSON *msgs, struct api_error *e)
{
    char field[48];
    snprintf(field, sizeof field, "input[%d]", i);
    if (!cJSON_IsObject(it))
        return api_error_set(e, 400, field, "'%s' must be an object", field);
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(it, "type");
    const cJSON *role = cJSON_GetObjectItemCaseSensitive(it, "role");
    /* EasyInputMessage: {role, content} with no type is a message */
    const char *ty = cJSON_IsString(type) ? type->valuestring : role ? "message" : NULL;
    if (!ty)
        return api_error_set(e, 400, field, "'%s.type' is required", field);
    if (!strcmp(ty, "message")) {
        static const char *const roles[] = { "user", "assistant", "system", "developer" };
        const char *rname = NULL;
        for (size_t k = 0; cJSON_IsString(role) && k < sizeof roles / sizeof roles[0]; k++)
            if (!strcmp(role->valuestring, roles[k]))
                rname = roles[k];
        if (!rname)
            return api_error_set(e, 400, field, "'%s.role' must be user, assistant, system or developer", field);
        char cf[64];
        snprintf(cf, sizeof cf, "%s.content", field);
        bool assistant = !strcmp(rname, "assistant");
        cJSON *content = responses_content(cJSON_GetObjectItemCaseSensitive(it, "content"), cf,
                                           assistant, e);
        if (!content)
            return -1;
        if (assistant) {
            /* after a reasoning item the turn is already open */
            int n = cJSON_GetArraySize(msgs);
            cJSON *last = n ? cJSON_GetArrayItem(msgs, n - 1) : NULL;
            if (last && responses_is(last, "role", "assistant") &&
                !cJSON_GetObjectItemCaseSensitive(last, "tool_calls")) {
                const cJSON *old = cJSON_GetObjectItemCaseSensitive(last, "content");
                if (cJSON_IsString(old) && !old->valuestring[0]) {
                    cJSON_ReplaceItemInObjectCaseSensitive(last, "content", content);
                    return 0;
                }
            }
        }
        responses_chat_message(msgs, !strcmp(rname, "developer") ? "system" : rname, content);
        return 0;
    }
    if (!strcmp(ty, "function_call")) {
        const cJSON *call_id = cJSON_GetObjectItemCaseSensitive(it, "call_id");
        const cJSON *name = cJSON_GetObjectItemCaseSensitive(it, "name");
        const cJSON *args = cJSON_GetObjectItemCaseSensitive(it, "arguments");
        if (!cJSON_IsString(call_id) || !cJSON_IsString(name) || !cJSON_IsString(args))
            return api_error_set(e, 400, field, "'%s': a function_call needs 'call_id', 'name' and 'arguments' (strings)", field);
        cJSON *turn = responses_assistant_turn(msgs);
        cJSON *calls = cJSON_GetObjectItemCaseSensitive(turn, "tool_calls");
        if (!calls)
            calls = cJSON_AddArrayToObject(turn, "tool_calls");
        cJSON *c = cJSON_CreateObject();
        cJSON_AddStringToObject(c, "id", call_id->valuestring);
        cJSON_AddStringToObject(c, "type", "function");
        cJSON *f = cJSON_AddObjectToObject(c, "function");
        cJSON_AddStringToObject(f, "name", name->valuestring);
        cJSON_AddStringToObject(f, "arguments", args->valuestring);
        cJSON_AddItemToArray(calls, c);
        return 0;
    }
    if (!strcmp(ty, "function_call_output")) {
        const cJSON *call_id = cJSON_GetObjectItemCaseSensitive(it, "call_id");
        const cJSON *output = cJSON_GetObjectItemCaseSensitive(it, "output");
        if (!cJSON_IsString(call_id))
            return api_error_set(e, 400, field, "'%s.call_id' must be a string", field);
        char of[64];
        snprintf(of, sizeof of, "%s.output", field);
        cJSON *content = responses_content(output, of, false, e);
        if (!content)
            return -1;
        const char *name = responses_call_name(msgs, call_id->valuestring);
        cJSON *o = responses_chat_message(msgs, "tool", content);
        cJSON_AddStringToObject(o, "tool_call_id", call_id->valuestring);
        if (name)
            cJSON_AddStringToObject(o, "name", name);
        return 0;
    }
    if (!strcmp(ty, "reasoning")) {
        char *text = responses_reasoning_text(it);
        if (!text)
            return api_error_set(e, 500, NULL, "out of memory");
        if (*text) {
            cJSON *turn = responses_assistant_turn(msgs);
            cJSON_DeleteItemFromObjectCaseSensitive(turn, "reasoning_content");
            cJSON_AddStringToObject(turn, "reasoning_content", text);
        }
        free(text);
        return 0;
    }
    return api_error_set(e, 400, field, "'%s.type': input items of type '%s' are not supported "
                         "(message, function_call, function_call_output and reasoning are)", field, ty);
}

/* tools -> chat function tools; a namespace's function tools are flattened. */
static int responses_tools(const cJSON *tools, cJSON *out, const char *field, struct api_error *e)
{
    const cJSON *t;
    int i = 0;
    cJSON_ArrayForEach(t, tools) {
        char tf[96];
        snprintf(tf, sizeof tf, "%s[%d]", field, i++);
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(t, "type");
        if (!cJSON_IsObject(t) || !cJSON_IsString(type))
            return api_error_set(e, 400, tf, "'%s' must be an object with a 'type'", tf);
        const char *ty = type->valuestring;
        if (!strcmp(ty, "namespace")) {
            char nf[112];
            snprintf(nf, sizeof nf, "%s.tools", tf);
            const cJSON *inner = cJSON_GetObjectItemCaseSensitive(t, "tools");
            if (!cJSON_IsArray(inner))
                return api_error_set(e, 400, nf, "'%s' must be an array", nf);
            if (responses_tools(inner, out, nf, e) < 0)
                return -1;
            continue;
        }
        if (!strcmp(ty, "mcp")) {
            /* the server's MCP tools (serve --mcp-config): the tool loop of
             * mcploop.h checks server_label and the rest */
            cJSON_AddItemToArray(out, cJSON_Duplicate(t, true));
            continue;
        }
        if (strcmp(ty, "function") != 0) {
            char pf[112];
            snprintf(pf, sizeof pf, "%s.type", tf);
            for (size_t k = 0; k < sizeof responses_builtin_tools / sizeof responses_builtin_tools[0]; k++)
                if (!strcmp(ty, responses_builtin_tools[k]))
                    return api_error_set(e, 400, pf, "'%s': the built-in tool '%s' cannot run on this server; "
                                         "only function tools are supported", pf, ty);
            return api_error_set(e, 400, pf, "'%s': unknown tool type '%s'; only function tools are supported", pf, ty);
        }
        const cJSON *name = cJSON_GetObjectItemCaseSensitive(t, "name");
        const cJSON *desc = cJSON_GetObjectItemCaseSensitive(t, "description");
        const cJSON *params = cJSON_GetObjectItemCaseSensitive(t, "parameters");
        const cJSON *strict = cJSON_GetObjectItemCaseSensitive(t, "strict");
        if (!cJSON_IsString(name) || !name->valuestring[0])
            return api_error_set(e, 400, tf, "'%s.name' is required (a non-empty string)", tf);
        if (params && !cJSON_IsNull(params) && !cJSON_IsObject(params))
            return api_error_set(e, 400, tf, "'%s.parameters' must be a JSON schema object", tf);
        cJSON *x = cJSON_CreateObject();
        cJSON_AddItemToArray(out, x);
        cJSON_AddStringToObject(x, "type", "function");
        cJSON *f = cJSON_AddObjectToObject(x, "function");
        cJSON_AddStringToObject(f, "name", name->valuestring);
        if (cJSON_IsString(desc))
            cJSON_AddStringToObject(f, "description", desc->valuestring);
        if (cJSON_IsObject(params))
            cJSON_AddItemToObject(f, "parameters", cJSON_Duplicate(params, true));
        if (cJSON_IsBool(strict))
            cJSON_AddBoolToObject(f, "strict", cJSON_IsTrue(strict));
    }
    return 0;
}

/* tool_choice: "none" | "auto" | "required" | {type: "function", name}. */
static int responses_tool_choice(const cJSON *tc, cJSON *chat, struct api_error *e)
{
    if (!tc || cJSON_IsNull(tc))
        return 0;
    if (cJSON_IsString(tc)) {
        cJSON_AddStringToObject(chat, "tool_choice", tc->valuestring);   /* chatreq checks the value */
        return 0;
    }
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(tc, "type");
    if (!cJSON_IsObject(tc) || !cJSON_IsString(type))
        return api_error_set(e, 400, "tool_choice", "'tool_choice' must be none, auto, required or {\"type\":\"function\",\"name\":...}");
    if (strcmp(type->valuestring, "function") != 0)
        return api_error_set(e, 400, "tool_choice.type", "'tool_choice.type': '%s' cannot be forced here; only function tools are supported",
                             type->valuestring);
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(tc, "name");
    if (!cJSON_IsString(name))
        return api_error_set(e, 400, "tool_choice.name", "'tool_choice.name' is required (a string)");
    bool known = false;
    const cJSON *t;
    cJSON_ArrayForEach(t, cJSON_GetObjectItemCaseSensitive(chat, "tools"))   /* MCP tools come later */
        known |= responses_is(cJSON_GetObjectItemCaseSensitive(t, "function"), "name", name->valuestring) ||
                 responses_is(t, "type", "mcp");
    if (!known)
        return api_error_set(e, 400, "tool_choice.name", "'tool_choice.name': no function tool named '%s' in 'tools'",
                             name->valuestring);
    cJSON *o = cJSON_AddObjectToObject(chat, "tool_choice");
    cJSON_AddStringToObject(o, "type", "function");
    cJSON_AddStringToObject(cJSON_AddObjectToObject(o, "function"), "name", name->valuestring);
    return 0;
}

/* text.format -> response_format. */
static int responses_text_format(const cJSON *root, cJSON *chat, struct api_error *e)
{
    const cJSON *text = cJSON_GetObjectItemCaseSensitive(root, "text");
    if (!text || cJSON_IsNull(text))
        return 0;
    if (!cJSON_IsObject(text))
        return api_error_set(e, 400, "text", "'text' must be an object");
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(text, "format");
    if (!f || cJSON_IsNull(f))
        return 0;
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(f, "type");
    if (!cJSON_IsObject(f) || !cJSON_IsString(type))
        return api_error_set(e, 400, "text.format", "'text.format' must be an object with a 'type'");
    const char *ty = type->valuestring;
    if (!strcmp(ty, "text"))
        return 0;
    cJSON *rf = cJSON_AddObjectToObject(chat, "response_format");
    if (!strcmp(ty, "json_object")) {
        cJSON_AddStringToObject(rf, "type", "json_object");
        return 0;
    }
    if (strcmp(ty, "json_schema") != 0)
        return api_error_set(e, 400, "text.format.type", "'text.format.type' must be text, json_object or json_schema, got '%s'", ty);
    const cJSON *schema = cJSON_GetObjectItemCaseSensitive(f, "schema");
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(f, "name");
    const cJSON *strict = cJSON_GetObjectItemCaseSensitive(f, "strict");
    if (!cJSON_IsObject(schema))
        return api_error_set(e, 400, "text.format.schema", "'text.format.schema' is required (a JSON schema object)");
    cJSON_AddStringToObject(rf, "type", "json_schema");
    cJSON *js = cJSON_AddObjectToObject(rf, "json_schema");
    cJSON_AddStringToObject(js, "name", cJSON_IsString(name) ? name->valuestring : "response");
    cJSON_AddItemToObject(js, "schema", cJSON_Duplicate(schema, true));
    if (cJSON_IsBool(strict))
        cJSON_AddBoolToObject(js, "strict", cJSON_IsTrue(strict));
    return 0;
}

/* The instructions and the system/developer messages before the first
 * other turn as one system turn: agents send several (Codex: its prompt,
 * then the skills list), and many templates place only one, first. */
static int responses_merge_leading_system(cJSON *msgs, struct api_error *e)
{
    int n = 0;
    cJSON *m;
    cJSON_ArrayForEach(m, msgs) {
        if (!responses_is(m, "role", "system"))
            break;
        n++;
    }
    if (n < 2)
        return 0;
    size_t total = 1;
    char **texts = calloc((size_t)n, sizeof *texts);
    if (!texts)
        return api_error_set(e, 500, NULL, "out of memory");
    int rc = 0;
    for (int i = 0; i < n && rc == 0; i++) {
        char field[48];
        snprintf(field, sizeof field, "input[%d].content", i);
        rc = apireq_text_content(cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(msgs, i), "content"),
                                 field, &texts[i], e);
        if (rc == 0)
            total += strlen(texts[i]) + 2;
    }
    char *joined = rc == 0 ? malloc(total) : NULL;
    if (rc == 0 && !joined)
        rc = api_error_set(e, 500, NULL, "out of memory");
    if (rc == 0) {
        size_t k = 0;
        for (int i = 0; i < n; i++) {
            if (k) {
                memcpy(joined + k, "\n\n", 2);
                k += 2;
            }
            size_t tl = strlen(texts[i]);
            memcpy(joined + k, texts[i], tl);
            k += tl;
        }
        joined[k] = 0;
        for (int i = 1; i < n; i++)
            cJSON_DeleteItemFromArray(msgs, 1);
        cJSON_ReplaceItemInObjectCaseSensitive(cJSON_GetArrayItem(msgs, 0), "content",
                                               cJSON_CreateString(joined));
    }
    for (int i = 0; i < n; i++)
        free(texts[i]);
    free(texts);
    free(joined);
    return rc;
}

/* Fields with no meaning here that would change the answer if a client
 * relied on them: refused rather than ignored. */
static int responses_refused_fields(const cJSON *root, struct api_error *e)
{
    const cJSON *v;
    if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(root, "background")))
        return api_error_set(e, 400, "background", "'background' responses are not supported");
    if ((v = cJSON_GetObjectItemCaseSensitive(root, "conversation")) && !cJSON_IsNull(v))
        return api_error_set(e, 400, "conversation", "'conversation' objects are not supported; chain with 'previous_response_id'");
    if ((v = cJSON_GetObjectItemCaseSensitive(root, "prompt")) && !cJSON_IsNull(v))
        return api_error_set(e, 400, "prompt", "stored prompt templates ('prompt') are not supported");
    return 0;
}

int responses_request(const cJSON *root, const cJSON *prev, cJSON **chat, cJSON **conversation,
                      cJSON **items, struct api_error *e)
{
    *chat = *conversation = *items = NULL;
    if (responses_refused_fields(root, e) < 0)
        return -1;
    cJSON *req = cJSON_CreateObject();
    cJSON *conv = prev ? cJSON_Duplicate(prev, true) : cJSON_CreateArray();
    cJSON *list = cJSON_CreateArray();
    if (!req || !conv || !list) {
        api_error_set(e, 500, NULL, "out of memory");
        goto fail;
    }
    const cJSON *input = cJSON_GetObjectItemCaseSensitive(root, "input");
    if (cJSON_IsString(input)) {
        responses_chat_message(conv, "user", cJSON_CreateString(input->valuestring));
        cJSON *it = cJSON_CreateObject();
        cJSON_AddStringToObject(it, "type", "message");
        cJSON_AddStringToObject(it, "role", "user");
        cJSON *parts = cJSON_AddArrayToObject(it, "content");
        cJSON *p = cJSON_CreateObject();
        cJSON_AddStringToObject(p, "type", "input_text");
        cJSON_AddStringToObject(p, "text", input->valuestring);
        cJSON_AddItemToArray(parts, p);
        cJSON_AddItemToArray(list, it);
    } else if (cJSON_IsArray(input)) {
        const cJSON *it;
        int i = 0;
        cJSON_ArrayForEach(it, input) {
            if (responses_item(it, i++, conv, e) < 0)
                goto fail;
            cJSON *copy = cJSON_Duplicate(it, true);
            if (!cJSON_GetObjectItemCaseSensitive(copy, "type"))   /* {role, content} */
                cJSON_AddStringToObject(copy, "type", "message");
            cJSON_AddItemToArray(list, copy);
        }
    } else if (input && !cJSON_IsNull(input)) {
        api_error_set(e, 400, "input", "'input' must be a string or an array of input items");
        goto fail;
    }
    if (cJSON_GetArraySize(conv) == 0) {
        api_error_set(e, 400, "input", "'input' is required (a string or a non-empty array of items)");
        goto fail;
    }
    /* The instructions lead every request; those of a previous response are
     * not carried over (the Responses API's rule). */
    cJSON *msgs = cJSON_AddArrayToObject(req, "messages");
    const cJSON *instr = cJSON_GetObjectItemCaseSensitive(root, "instructions");
    if (cJSON_IsString(instr) && instr->valuestring[0])
        responses_chat_message(msgs, "system", cJSON_CreateString(instr->valuestring));
    else if (instr && !cJSON_IsNull(instr) && !cJSON_IsString(instr)) {
        api_error_set(e, 400, "instructions", "'instructions' must be a string");
        goto fail;
    }
    const cJSON *m;
    cJSON_ArrayForEach(m, conv)
        cJSON_AddItemToArray(msgs, cJSON_Duplicate(m, true));
    if (responses_merge_leading_system(msgs, e) < 0)
        goto fail;

    const cJSON *tools = cJSON_GetObjectItemCaseSensitive(root, "tools");
    if (tools && !cJSON_IsNull(tools)) {
        if (!cJSON_IsArray(tools)) {
            api_error_set(e, 400, "tools", "'tools' must be an array");
            goto fail;
        }
        cJSON *out = cJSON_AddArrayToObject(req, "tools");
        if (responses_tools(tools, out, "tools", e) < 0)
            goto fail;
        if (!cJSON_GetArraySize(out))
            cJSON_DeleteItemFromObjectCaseSensitive(req, "tools");
    }
    if (responses_tool_choice(cJSON_GetObjectItemCaseSensitive(root, "tool_choice"), req, e) < 0 ||
        responses_text_format(root, req, e) < 0)
        goto fail;
    const cJSON *reasoning = cJSON_GetObjectItemCaseSensitive(root, "reasoning");
    if (reasoning && !cJSON_IsNull(reasoning)) {
        if (!cJSON_IsObject(reasoning)) {
            api_error_set(e, 400, "reasoning", "'reasoning' must be an object");
            goto fail;
        }
        const cJSON *effort = cJSON_GetObjectItemCaseSensitive(reasoning, "effort");
        if (cJSON_IsString(effort))   /* "xhigh": as much as "high", no budget */
            cJSON_AddStringToObject(req, "reasoning_effort",
                                    !strcmp(effort->valuestring, "xhigh") ? "high" : effort->valuestring);
        else if (effort && !cJSON_IsNull(effort)) {
            api_error_set(e, 400, "reasoning.effort", "'reasoning.effort' must be a string");
            goto fail;
        }
    }
    const cJSON *mot = cJSON_GetObjectItemCaseSensitive(root, "max_output_tokens");
    if (mot && !cJSON_IsNull(mot)) {
        if (!cJSON_IsNumber(mot) || mot->valuedouble < 1 || mot->valuedouble > (1 << 30) ||
            mot->valuedouble != (double)(long)mot->valuedouble) {
            api_error_set(e, 400, "max_output_tokens", "'max_output_tokens' must be a positive integer");
            goto fail;
        }
        cJSON_AddNumberToObject(req, "max_tokens", mot->valuedouble);
    }
    /* Sampling and extras, as the chat route reads them. */
    static const char *const pass[] = {
        "temperature", "top_p", "stream", "parallel_tool_calls", "top_k", "min_p", "seed",
        "presence_penalty", "frequency_penalty", "repetition_penalty", "timeout",
        "chat_template_kwargs", "thinking_budget", "enable_thinking",
    };
    for (size_t k = 0; k < sizeof pass / sizeof pass[0]; k++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, pass[k]);
        if (v && !cJSON_IsNull(v))
            cJSON_AddItemToObject(req, pass[k], cJSON_Duplicate(v, true));
    }
    *chat = req;
    *conversation = conv;
    *items = list;
    return 0;
fail:
    cJSON_Delete(req);
    cJSON_Delete(conv);
    cJSON_Delete(list);
    return -1;
}

// ---- the call's state and events ------------------------------------------------

struct responses_state {
    struct responses_out *out;
    struct responses_store *store;    /* borrowed from the api; NULL: not stored */
    cJSON *skeleton;                  /* the response object before the answer */
    /* Printed on the route's worker, so that the engine thread only appends
     * the answer's turn when it stores them (a long conversation is not
     * printed while other requests wait for the next step). */
    char *conversation;               /* chat messages of the input, a JSON array */
    char *items;                      /* the input items (for input_items), a JSON array */
    long long seq;                    /* next sequence_number */
    struct mcploop *loop;             /* {"type": "mcp"} tools: the server's tool loop, or NULL */
    cJSON *mcp_calls;                 /* the loop's calls waiting for their results */
};

static void responses_state_free(void *p)
{
    struct responses_state *s = p;
    if (!s)
        return;
    responses_out_free(s->out);
    cJSON_Delete(s->skeleton);
    free(s->conversation);
    free(s->items);
    mcploop_free(s->loop);
    cJSON_Delete(s->mcp_calls);
    free(s);
}

/* Every event names its type as the SSE event and carries sequence_number. */
static void responses_send(struct api_call *c, cJSON *ev)
{
    struct responses_state *s = c->proto_state;
    cJSON_AddNumberToObject(ev, "sequence_number", (double)s->seq++);
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(ev, "type");
    char *text = cJSON_PrintUnformatted(ev);
    if (text) {
        ws_out_sse(c->out, cJSON_IsString(type) ? type->valuestring : NULL, text, strlen(text));
        free(text);
    }
    cJSON_Delete(ev);
}

static void responses_event_sink(void *user, cJSON *ev)
{
    responses_send(user, ev);
}

static cJSON *responses_usage(const struct api_call *c)
{
    cJSON *u = cJSON_CreateObject();
    cJSON_AddNumberToObject(u, "input_tokens", c->prompt_tokens);
    cJSON_AddNumberToObject(cJSON_AddObjectToObject(u, "input_tokens_details"), "cached_tokens",
                            c->cached_tokens);
    cJSON_AddNumberToObject(u, "output_tokens", c->completion_tokens);
    int rt = c->choices[0].chat ? chatout_reasoning_tokens(c->choices[0].chat) : 0;
    cJSON_AddNumberToObject(cJSON_AddObjectToObject(u, "output_tokens_details"), "reasoning_tokens", rt);
    cJSON_AddNumberToObject(u, "total_tokens", c->prompt_tokens + c->completion_tokens);
    return u;
}

static void responses_set(cJSON *o, const char *key, cJSON *value)
{
    if (cJSON_GetObjectItemCaseSensitive(o, key))
        cJSON_ReplaceItemInObjectCaseSensitive(o, key, value);
    else
        cJSON_AddItemToObject(o, key, value);
}

/* A "response.*" event wrapping a copy of the response object. */
static void responses_lifecycle(struct api_call *c, const char *type, const cJSON *response)
{
    cJSON *ev = cJSON_CreateObject();
    cJSON_AddStringToObject(ev, "type", type);
    cJSON_AddItemToObject(ev, "response", cJSON_Duplicate(response, true));
    responses_send(c, ev);
}

static void responses_start(struct api_call *c)
{
    struct responses_state *s = c->proto_state;
    if (!c->stream)
        return;
    ws_out_start(c->out, 200, "text/event-stream", true);
    responses_lifecycle(c, "response.created", s->skeleton);
    responses_lifecycle(c, "response.in_progress", s->skeleton);
}

static void responses_text(struct api_call *c, int choice, const char *text, size_t len,
                           const struct sampler_logprobs *lp, int32_t token)
{
    (void)lp;
    struct responses_state *s = c->proto_state;
    chatout_feed(c->choices[choice].chat, text, len, token >= 0, responses_out_delta, s->out);
}

static void responses_choice_done(struct api_call *c, int choice)
{
    struct responses_state *s = c->proto_state;
    if (c->choices[choice].error)
        return;
    chatout_finish(c->choices[choice].chat, responses_out_delta, s->out);
    responses_out_close(s->out);   /* the answer may go on in another turn (MCP) */
}

/* The answer as the assistant turn of the stored conversation. */
static void responses_keep(struct api_call *c, const cJSON *response, const char *printed)
{
    struct responses_state *s = c->proto_state;
    if (!s->store)
        return;
    const struct chatout *o = c->choices[0].chat;
    /* the MCP turns: "...,call turn,tool results" before the last turn */
    char *steps = NULL;
    if (s->loop && cJSON_GetArraySize(mcploop_messages(s->loop)) > 0) {
        char *all = cJSON_PrintUnformatted(mcploop_messages(s->loop));
        if (all && strlen(all) >= 2) {
            all[strlen(all) - 1] = 0;   /* drop the brackets */
            steps = strdup(all + 1);
        }
        free(all);
    }
    cJSON *turn = cJSON_CreateObject();
    cJSON_AddStringToObject(turn, "role", "assistant");
    cJSON_AddStringToObject(turn, "content", chatout_content(o));
    if (*chatout_reasoning(o))
        cJSON_AddStringToObject(turn, "reasoning_content", chatout_reasoning(o));
    if (chatout_n_calls(o) > 0)
        cJSON_AddItemToObject(turn, "tool_calls", cJSON_Duplicate(chatout_calls(o), true));
    char *resp = printed ? NULL : cJSON_PrintUnformatted(response);
    char *t = cJSON_PrintUnformatted(turn);
    cJSON_Delete(turn);
    /* "[a,b]" + steps + turn -> "[a,b,steps,turn]" (the input is never empty) */
    size_t cl = strlen(s->conversation), tl = t ? strlen(t) : 0, sl = steps ? strlen(steps) + 1 : 0;
    char *conv = t && cl >= 2 ? malloc(cl + sl + tl + 2) : NULL;
    if (conv) {
        memcpy(conv, s->conversation, cl - 1);
        conv[cl - 1] = ',';
        if (steps) {
            memcpy(conv + cl, steps, sl - 1);
            conv[cl + sl - 1] = ',';
        }
        memcpy(conv + cl + sl, t, tl);
        memcpy(conv + cl + sl + tl, "]", 2);
    }
    free(steps);
    if ((printed || resp) && conv)   /* too large: not kept */
        responses_store_put(s->store, c->id, printed ? printed : resp, conv, s->items);
    free(resp);
    free(t);
    free(conv);
}

static void responses_finish(struct api_call *c)
{
    struct responses_state *s = c->proto_state;
    cJSON *r = cJSON_Duplicate(s->skeleton, true);
    if (!r)
        return;
    struct api_error le;
    if (s->loop && !c->error[0] && mcploop_error(s->loop, &le))   /* a later turn could not run */
        snprintf(c->error, sizeof c->error, "%.200s", le.message);
    if (c->error[0]) {
        struct api_error e;
        api_error_set(&e, apireq_engine_error_status(c->error), NULL, "%s", c->error);
        if (!c->stream) {
            size_t len = 0;
            char *text = api_error_json(API_OPENAI, &e, &len);
            ws_out_start(c->out, e.status, "application/json", false);
            if (text)
                ws_out_write(c->out, text, len);
            free(text);
        } else {
            responses_set(r, "status", cJSON_CreateString("failed"));
            cJSON *err = cJSON_CreateObject();
            cJSON_AddStringToObject(err, "code", e.status == 400 ? "invalid_prompt" : "server_error");
            cJSON_AddStringToObject(err, "message", c->error);
            responses_set(r, "error", err);
            responses_set(r, "usage", responses_usage(c));
            responses_lifecycle(c, "response.failed", r);
        }
        cJSON_Delete(r);
        return;
    }
    responses_out_end(s->out);
    const struct api_choice *ch = &c->choices[0];
    const char *status = "completed", *reason = NULL;
    if (ch->finish == ENGINE_FINISH_LENGTH)
        status = "incomplete", reason = "max_output_tokens";
    else if (ch->finish == ENGINE_FINISH_TIMEOUT)
        status = "incomplete", reason = "timeout";
    else if (ch->finish == ENGINE_FINISH_CANCELLED)
        status = "cancelled";
    responses_set(r, "status", cJSON_CreateString(status));
    if (reason) {
        cJSON *d = cJSON_CreateObject();
        cJSON_AddStringToObject(d, "reason", reason);
        responses_set(r, "incomplete_details", d);
    }
    cJSON *output = cJSON_Duplicate(responses_out_items(s->out), true);
    /* the item the answer stopped in is incomplete too, as the API marks it */
    cJSON *last = cJSON_GetArrayItem(output, cJSON_GetArraySize(output) - 1);
    if (reason && cJSON_GetObjectItemCaseSensitive(last, "status"))
        responses_set(last, "status", cJSON_CreateString("incomplete"));
    responses_set(r, "output", output);
    responses_set(r, "usage", responses_usage(c));
    char *text = NULL;
    if (c->stream) {
        responses_lifecycle(c, !strcmp(status, "completed") ? "response.completed"
                               : !strcmp(status, "incomplete") ? "response.incomplete"
                                                               : "response.failed", r);
    } else {
        text = cJSON_PrintUnformatted(r);
        ws_out_start(c->out, text ? 200 : 500, "application/json", false);
        if (text)
            ws_out_write(c->out, text, strlen(text));
    }
    responses_keep(c, r, text);
    free(text);
    cJSON_Delete(r);
}

static const struct api_proto responses_proto = {
    responses_text, responses_choice_done, responses_finish,
};

// ---- POST /v1/responses ------------------------------------------------------------

/* 24 random hex digits for ids (the request id may come from a client's
 * header; a response id must be unique and path-safe). */
static void responses_random_hex(char *out, size_t cap)
{
    unsigned char b[12];
    if (getrandom(b, sizeof b, 0) != (ssize_t)sizeof b) {
        static unsigned long long counter;
        unsigned long long x = (unsigned long long)time(NULL) * 1000003ULL +
                               __atomic_add_fetch(&counter, 1, __ATOMIC_RELAXED);
        for (size_t i = 0; i < sizeof b; i++)
            b[i] = (unsigned char)(x >> (8 * (i % 8))) ^ (unsigned char)(i * 37);
    }
    size_t n = 0;
    for (size_t i = 0; i < sizeof b && n + 2 < cap; i++)
        n += (size_t)snprintf(out + n, cap - n, "%02x", b[i]);
}

/* The response object as it stands before the answer: the request's
 * settings echoed the way the API reports them. */
static cJSON *responses_skeleton(const struct api_call *c, const cJSON *root)
{
    cJSON *r = cJSON_CreateObject();
    cJSON_AddStringToObject(r, "id", c->id);
    cJSON_AddStringToObject(r, "object", "response");
    cJSON_AddNumberToObject(r, "created_at", (double)c->created);
    cJSON_AddStringToObject(r, "status", "in_progress");
    cJSON_AddBoolToObject(r, "background", false);
    cJSON_AddNullToObject(r, "error");
    cJSON_AddNullToObject(r, "incomplete_details");
    static const char *const echo[] = { "instructions", "max_output_tokens", "previous_response_id",
                                        "temperature", "top_p", "user" };
    for (size_t k = 0; k < sizeof echo / sizeof echo[0]; k++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, echo[k]);
        cJSON_AddItemToObject(r, echo[k], v ? cJSON_Duplicate(v, true) : cJSON_CreateNull());
    }
    cJSON_AddStringToObject(r, "model", c->model_name);
    cJSON_AddArrayToObject(r, "output");
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, "parallel_tool_calls");
    cJSON_AddBoolToObject(r, "parallel_tool_calls", !cJSON_IsFalse(v));
    cJSON *reasoning = cJSON_AddObjectToObject(r, "reasoning");
    const cJSON *rq = cJSON_GetObjectItemCaseSensitive(root, "reasoning");
    const cJSON *effort = cJSON_GetObjectItemCaseSensitive(rq, "effort");
    const cJSON *summary = cJSON_GetObjectItemCaseSensitive(rq, "summary");
    cJSON_AddItemToObject(reasoning, "effort", effort ? cJSON_Duplicate(effort, true) : cJSON_CreateNull());
    cJSON_AddItemToObject(reasoning, "summary", summary ? cJSON_Duplicate(summary, true) : cJSON_CreateNull());
    v = cJSON_GetObjectItemCaseSensitive(root, "store");
    cJSON_AddBoolToObject(r, "store", !cJSON_IsFalse(v));
    const cJSON *text = cJSON_GetObjectItemCaseSensitive(root, "text");
    if (cJSON_IsObject(text) && cJSON_GetObjectItemCaseSensitive(text, "format")) {
        cJSON_AddItemToObject(r, "text", cJSON_Duplicate(text, true));
    } else {
        cJSON *t = cJSON_AddObjectToObject(r, "text");
        cJSON_AddStringToObject(cJSON_AddObjectToObject(t, "format"), "type", "text");
    }
    v = cJSON_GetObjectItemCaseSensitive(root, "tool_choice");
    cJSON_AddItemToObject(r, "tool_choice", v && !cJSON_IsNull(v) ? cJSON_Duplicate(v, true)
                                                                    : cJSON_CreateString("auto"));
    v = cJSON_GetObjectItemCaseSensitive(root, "tools");
    cJSON_AddItemToObject(r, "tools", cJSON_IsArray(v) ? cJSON_Duplicate(v, true) : cJSON_CreateArray());
    cJSON_AddStringToObject(r, "truncation", "disabled");
    cJSON_AddNullToObject(r, "usage");
    v = cJSON_GetObjectItemCaseSensitive(root, "metadata");
    cJSON_AddItemToObject(r, "metadata", cJSON_IsObject(v) ? cJSON_Duplicate(v, true) : cJSON_CreateObject());
    return r;
}

/* The request past its images (the route's thread, or a vision worker's
 * with r NULL): render, attach, submit. */
static int responses_then(struct api_call *c, struct ws_req *r, cJSON *chat,
                          const struct apireq_gen *g, struct api_images *im, struct api_error *e)
{
    const struct api_model *m = api_model(c->api);
    struct chatreq cr = { .reasoning_budget = -1 };
    struct engine_request rq = engine_default_request();
    rq.model = m->index;
    rq.sampling = g->sp;
    rq.max_tokens = g->max_tokens;
    rq.timeout_s = g->timeout_s;
    int rc = -1;
    if (chatreq_build(m, chat, g, &cr, e) >= 0 && chatreq_attach(&cr, m, c, &rq, e) >= 0 &&
        (!im || !im->n || api_images_attach(api_images(c->api), m, &cr, g, im, &rq, e) >= 0)) {
        api_call_submit(c, r, &rq, responses_start);
        rc = 0;
    }
    chatreq_free(&cr);
    return rc;
}

/* previous_response_id -> its stored conversation (NULL when absent); -1
 * with a 404 when it is not stored. */
static int responses_previous(struct api *a, const cJSON *root, cJSON **prev, struct api_error *e)
{
    *prev = NULL;
    const char *id = NULL;
    if (apireq_string(root, "previous_response_id", &id, e) < 0)
        return -1;
    if (!id)
        return 0;
    char *conv = NULL;
    if (responses_store_get(api_responses_store(a), id, NULL, &conv, NULL) < 0) {
        api_error_set(e, 404, "previous_response_id", "Previous response with id '%s' not found.", id);
        e->code = "previous_response_not_found";
        return -1;
    }
    *prev = cJSON_Parse(conv);
    free(conv);
    if (!cJSON_IsArray(*prev)) {
        cJSON_Delete(*prev);
        *prev = NULL;
        return api_error_set(e, 500, NULL, "stored response '%s' is unreadable", id);
    }
    return 0;
}

// ---- MCP tools ({"type": "mcp", "server_label"}) --------------------------------------

static const char *responses_call_id(const cJSON *call)
{
    return cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(call, "id"));
}

/* The loop runs a call (engine thread, the call's lock held): kept until
 * its result comes. */
static void responses_mcp_call(struct api_call *c, const cJSON *call, const char *server, int turn)
{
    (void)turn;
    struct responses_state *s = c->proto_state;
    if (!s->mcp_calls && !(s->mcp_calls = cJSON_CreateArray()))
        return;
    cJSON *x = cJSON_Duplicate(call, true);
    cJSON_AddStringToObject(x, "server", server ? server : "");
    cJSON_AddItemToArray(s->mcp_calls, x);
}

/* Its result (an MCP thread, the call's lock held) -> an mcp_call item:
 * {server_label, name, arguments, output | error}. */
static void responses_mcp_result(struct api_call *c, const cJSON *msg, int turn)
{
    (void)turn;
    struct responses_state *s = c->proto_state;
    const char *id = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(msg, "tool_call_id"));
    const cJSON *call = NULL, *x;
    cJSON_ArrayForEach(x, s->mcp_calls)
        if (id && responses_call_id(x) && !strcmp(responses_call_id(x), id))
            call = x;
    const cJSON *fn = cJSON_GetObjectItemCaseSensitive(call, "function");
    const cJSON *args = cJSON_GetObjectItemCaseSensitive(fn, "arguments");
    const char *server = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(msg, "server"));
    const char *name = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(msg, "name"));
    const char *content = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(msg, "content"));
    bool failed = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(msg, "is_error"));
    cJSON *item = cJSON_CreateObject();
    cJSON_AddStringToObject(item, "type", "mcp_call");
    cJSON_AddStringToObject(item, "status", failed ? "failed" : "completed");
    cJSON_AddStringToObject(item, "server_label", server ? server : "");
    cJSON_AddStringToObject(item, "name", name ? name : "");
    char *a = cJSON_IsString(args) ? NULL : args ? cJSON_PrintUnformatted(args) : NULL;
    cJSON_AddStringToObject(item, "arguments", cJSON_IsString(args) ? args->valuestring : a ? a : "{}");
    free(a);
    cJSON_AddItemToObject(item, "output", !failed && content ? cJSON_CreateString(content) : cJSON_CreateNull());
    cJSON_AddItemToObject(item, "error", failed ? cJSON_CreateString(content ? content : "error") : cJSON_CreateNull());
    responses_out_add(s->out, "mcp", item);
}

static const struct mcploop_hooks responses_mcp_hooks = { responses_mcp_call, responses_mcp_result };

static bool responses_turn_end(struct api_call *c)
{
    struct responses_state *s = c->proto_state;
    return mcploop_turn_end(s->loop, c);
}

/* The names of the tools the loop added (turn1's tools that are not the
 * client's function tools in chat). */
static cJSON *responses_mcp_names(const cJSON *turn1, const cJSON *chat)
{
    cJSON *names = cJSON_CreateArray();
    const cJSON *t, *u;
    cJSON_ArrayForEach(t, cJSON_GetObjectItemCaseSensitive(turn1, "tools")) {
        const char *n = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(
            cJSON_GetObjectItemCaseSensitive(t, "function"), "name"));
        bool client = false;
        cJSON_ArrayForEach(u, cJSON_GetObjectItemCaseSensitive(chat, "tools"))
            client |= n && responses_is(cJSON_GetObjectItemCaseSensitive(u, "function"), "name", n);
        if (n && !client)
            cJSON_AddItemToArray(names, cJSON_CreateString(n));
    }
    return names;
}

/* An error about the translated chat request names the Responses field
 * the client sent ("max_tokens" -> "max_output_tokens", ...). */
static void responses_param(struct api_error *e)
{
    static const struct { const char *chat, *resp; } map[] = {
        { "max_tokens", "max_output_tokens" }, { "reasoning_effort", "reasoning.effort" },
        { "response_format.json_schema", "text.format" }, { "response_format", "text.format" },
        { "messages", "input" },
    };
    for (size_t k = 0; k < sizeof map / sizeof map[0]; k++) {
        size_t n = strlen(map[k].chat);
        if (!strncmp(e->param, map[k].chat, n) && (!e->param[n] || e->param[n] == '.' || e->param[n] == '[')) {
            char rest[sizeof e->param];
            snprintf(rest, sizeof rest, "%s", e->param + n);
            snprintf(e->param, sizeof e->param, "%s%s", map[k].resp, rest);
            return;
        }
    }
}

void responses_create(struct api *a, struct ws_req *r, const char *arg)
{
    (void)arg;
    struct api_error e;
    struct apireq_gen g;
    apireq_gen_init(&g);
    cJSON *root = NULL, *prev = NULL, *chat = NULL, *conv = NULL, *items = NULL, *turn1 = NULL;
    struct responses_state *s = NULL;
    const struct api_model *m = api_model_or_503(a, r, API_OPENAI);
    if (!m)
        goto out;
    size_t len;
    const char *body = ws_req_body(r, &len);
    const char *model = NULL;
    bool store = true;
    if (!(root = apireq_parse(body, len, &e)) || apireq_string(root, "model", &model, &e) < 0 ||
        api_check_model(a, model, &e) < 0 || apireq_bool(root, "store", &store, &e) < 0 ||
        responses_previous(a, root, &prev, &e) < 0 ||
        responses_request(root, prev, &chat, &conv, &items, &e) < 0 ||
        apireq_sampling(chat, API_OPENAI, false, m->n_vocab, &g, &e) < 0)
        goto fail;
    if (!(s = calloc(1, sizeof *s))) {
        api_error_set(&e, 500, NULL, "out of memory");
        goto fail;
    }
    /* {"type": "mcp"} tools: the server runs the MCP tools the model calls
     * and generates again (mcploop.h); the loop takes the sampling fields */
    if (mcpapi_wanted(chat) &&
        (!(s->loop = mcploop_new(a, chat, &g, NULL, 0, &responses_mcp_hooks, &e)) ||
         !(turn1 = mcploop_request(s->loop)))) {
        if (s->loop)
            api_error_set(&e, 500, NULL, "out of memory");
        responses_state_free(s);
        goto fail;
    }
    struct api_call *c = api_call_new(a, r, &responses_proto, API_OPENAI, "resp_",
                                      s->loop ? mcploop_gen(s->loop) : &g);
    if (!c) {
        responses_state_free(s);
        api_error_set(&e, 500, NULL, "out of memory");
        goto fail;
    }
    char hex[32] = "";
    responses_random_hex(hex, sizeof hex);
    snprintf(c->id, sizeof c->id, "resp_%s", hex);
    c->proto_state = s;
    c->proto_state_free = responses_state_free;
    s->store = store ? api_responses_store(a) : NULL;
    /* items without ids get one, so input_items can list them */
    cJSON *it;
    int k = 0;
    cJSON_ArrayForEach(it, items) {
        if (!cJSON_GetObjectItemCaseSensitive(it, "id")) {
            char id[64];
            snprintf(id, sizeof id, "msg_%s_in%d", hex, k);
            cJSON_AddStringToObject(it, "id", id);
        }
        k++;
    }
    s->skeleton = responses_skeleton(c, root);
    s->out = responses_out_new(hex, c->stream ? responses_event_sink : NULL, c);
    if (s->store) {
        s->conversation = cJSON_PrintUnformatted(conv);
        s->items = cJSON_PrintUnformatted(items);
    }
    if (!s->skeleton || !s->out || (s->store && (!s->conversation || !s->items))) {
        api_call_free(c);
        api_error_set(&e, 500, NULL, "out of memory");
        goto fail;
    }
    int rc;
    if (s->loop) {
        /* the MCP tools' calls become mcp_call items, not function calls */
        cJSON *names = responses_mcp_names(turn1, chat);
        responses_out_skip_calls(s->out, names);
        cJSON_Delete(names);
        c->turn_end = responses_turn_end;
        rc = responses_then(c, r, turn1, mcploop_gen(s->loop), NULL, &e);
    } else {
        rc = api_images_defer(api_images(a), c, r, &chat, &g, responses_then, &e);
        if (rc == 0)
            rc = responses_then(c, r, chat, &g, NULL, &e);
    }
    if (rc < 0) {
        api_call_free(c);
        goto fail;
    }
    goto out;
fail:
    responses_param(&e);
    api_respond_error(r, API_OPENAI, &e);
out:
    apireq_gen_free(&g);
    cJSON_Delete(root);
    cJSON_Delete(prev);
    cJSON_Delete(chat);
    cJSON_Delete(conv);
    cJSON_Delete(items);
    cJSON_Delete(turn1);
}

// ---- stored responses ---------------------------------------------------------------

static bool responses_id_ok(const char *id, struct api_error *e)
{
    if (!id || !*id || strchr(id, '/')) {
        api_error_set(e, 404, "response_id", "No response with id '%s'.", id ? id : "");
        return false;
    }
    return true;
}

static void responses_not_found(struct ws_req *r, const char *id)
{
    struct api_error e;
    api_error_set(&e, 404, "response_id", "Response with id '%s' not found.", id);
    api_respond_error(r, API_OPENAI, &e);
}

static void responses_respond_text(struct ws_req *r, char *text)
{
    cJSON *body = cJSON_Parse(text);
    free(text);
    if (!body) {
        struct api_error e;
        api_error_set(&e, 500, NULL, "stored response is unreadable");
        api_respond_error(r, API_OPENAI, &e);
        return;
    }
    api_respond_json(r, 200, body);
}

void responses_get(struct api *a, struct ws_req *r, const char *arg)
{
    struct api_error e;
    char *text = NULL;
    if (!responses_id_ok(arg, &e))
        api_respond_error(r, API_OPENAI, &e);
    else if (responses_store_get(api_responses_store(a), arg, &text, NULL, NULL) < 0)
        responses_not_found(r, arg);
    else
        responses_respond_text(r, text);
}

void responses_delete(struct api *a, struct ws_req *r, const char *arg)
{
    struct api_error e;
    if (!responses_id_ok(arg, &e)) {
        api_respond_error(r, API_OPENAI, &e);
        return;
    }
    if (!responses_store_delete(api_responses_store(a), arg)) {
        responses_not_found(r, arg);
        return;
    }
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "id", arg);
    cJSON_AddStringToObject(o, "object", "response.deleted");
    cJSON_AddBoolToObject(o, "deleted", true);
    api_respond_json(r, 200, o);
}

void responses_input_items(struct api *a, struct ws_req *r, const char *arg)
{
    struct api_error e;
    char *text = NULL;
    if (!responses_id_ok(arg, &e)) {
        api_respond_error(r, API_OPENAI, &e);
        return;
    }
    if (responses_store_get(api_responses_store(a), arg, NULL, NULL, &text) < 0) {
        responses_not_found(r, arg);
        return;
    }
    cJSON *items = cJSON_Parse(text);
    free(text);
    if (!cJSON_IsArray(items)) {
        cJSON_Delete(items);
        api_error_set(&e, 500, NULL, "stored input items are unreadable");
        api_respond_error(r, API_OPENAI, &e);
        return;
    }
    int n = cJSON_GetArraySize(items);
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "object", "list");
    cJSON_AddItemToObject(o, "data", items);
    const cJSON *first = cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(items, 0), "id");
    const cJSON *last = cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(items, n - 1), "id");
    cJSON_AddItemToObject(o, "first_id", cJSON_IsString(first) ? cJSON_CreateString(first->valuestring) : cJSON_CreateNull());
    cJSON_AddItemToObject(o, "last_id", cJSON_IsString(last) ? cJSON_CreateString(last->valuestring) : cJSON_CreateNull());
    cJSON_AddBoolToObject(o, "has_more", false);
    api_respond_json(r, 200, o);
}
