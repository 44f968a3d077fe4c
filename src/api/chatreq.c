/* chatreq.c - OpenAI-shaped chat request -> template-rendered prompt,
 * output grammar, output builders and reasoning budget. One place for what
 * the chat routes share, so that a tool turn renders the same whether it came
 * as an OpenAI tool message or an Anthropic tool_result block. */
#include "src/api/chatreq.h"

#include "llm/grammar/grammar.h"
#include "llm/tokenizer.h"
#include "src/api/api.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const chatreq_roles[] = { "system", "developer", "user", "assistant", "tool" };

/* One assistant tool_calls entry as templates want it: arguments as an
 * object (they apply tojson to it), whatever form the client sent. */
static int chatreq_call(const cJSON *c, const char *field, cJSON *out, struct api_error *e)
{
    const cJSON *fn = cJSON_GetObjectItemCaseSensitive(c, "function");
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(fn, "name");
    const cJSON *args = cJSON_GetObjectItemCaseSensitive(fn, "arguments");
    if (!cJSON_IsString(name))
        return api_error_set(e, 400, field, "'%s[].function.name' must be a string", field);
    cJSON *x = cJSON_CreateObject();
    cJSON_AddItemToArray(out, x);
    const cJSON *id = cJSON_GetObjectItemCaseSensitive(c, "id");
    if (cJSON_IsString(id))
        cJSON_AddStringToObject(x, "id", id->valuestring);
    cJSON_AddStringToObject(x, "type", "function");
    cJSON *f = cJSON_AddObjectToObject(x, "function");
    cJSON_AddStringToObject(f, "name", name->valuestring);
    cJSON *av = cJSON_IsString(args) ? cJSON_Parse(args->valuestring)
                                     : args ? cJSON_Duplicate(args, true) : NULL;
    cJSON_AddItemToObject(f, "arguments", av ? av : cJSON_CreateObject());
    return 0;
}

/* messages[] as the chat template wants them: string contents, "developer"
 * as "system", assistant tool_calls and reasoning_content, tool turns with
 * tool_call_id. NULL with a 400 naming the message. */
static cJSON *chatreq_messages(const cJSON *req, struct api_error *e)
{
    const cJSON *msgs = cJSON_GetObjectItemCaseSensitive(req, "messages");
    if (!msgs || cJSON_IsNull(msgs)) {
        api_error_set(e, 400, "messages", "'messages' is required");
        return NULL;
    }
    if (!cJSON_IsArray(msgs) || cJSON_GetArraySize(msgs) == 0) {
        api_error_set(e, 400, "messages", "'messages' must be a non-empty array");
        return NULL;
    }
    cJSON *out = cJSON_CreateArray();
    const cJSON *m;
    int i = 0;
    cJSON_ArrayForEach(m, msgs) {
        char field[64], *text = NULL;
        snprintf(field, sizeof field, "messages[%d]", i);
        if (!cJSON_IsObject(m)) {
            api_error_set(e, 400, field, "'%s' must be an object", field);
            goto fail;
        }
        const cJSON *role = cJSON_GetObjectItemCaseSensitive(m, "role");
        if (!cJSON_IsString(role)) {
            api_error_set(e, 400, field, "'%s.role' must be a string", field);
            goto fail;
        }
        const char *rname = NULL;
        for (size_t k = 0; k < sizeof chatreq_roles / sizeof chatreq_roles[0]; k++)
            if (!strcmp(role->valuestring, chatreq_roles[k]))
                rname = chatreq_roles[k];
        if (!rname) {
            api_error_set(e, 400, field,
                          "'%s.role' must be system, developer, user, assistant or tool; got '%s'",
                          field, role->valuestring);
            goto fail;
        }
        const cJSON *content = cJSON_GetObjectItemCaseSensitive(m, "content");
        snprintf(field, sizeof field, "messages[%d].content", i);
        if ((!content || cJSON_IsNull(content)) && strcmp(rname, "assistant") != 0) {
            api_error_set(e, 400, field, "'%s' is required", field);
            goto fail;
        }
        if (apireq_text_content(content, field, &text, e) < 0)
            goto fail;
        cJSON *o = cJSON_CreateObject();
        cJSON_AddItemToArray(out, o);
        /* "developer" is the newer name of "system", which templates know */
        cJSON_AddStringToObject(o, "role", !strcmp(rname, "developer") ? "system" : rname);
        cJSON_AddStringToObject(o, "content", text ? text : "");
        free(text);
        const cJSON *calls = cJSON_GetObjectItemCaseSensitive(m, "tool_calls");
        if (calls && !cJSON_IsNull(calls)) {
            snprintf(field, sizeof field, "messages[%d].tool_calls", i);
            if (!cJSON_IsArray(calls)) {
                api_error_set(e, 400, field, "'%s' must be an array", field);
                goto fail;
            }
            cJSON *tc = cJSON_AddArrayToObject(o, "tool_calls");
            const cJSON *c;
            cJSON_ArrayForEach(c, calls)
                if (chatreq_call(c, field, tc, e) < 0)
                    goto fail;
        }
        const char *keys[] = { "tool_call_id", "name", "reasoning_content" };
        for (size_t k = 0; k < sizeof keys / sizeof keys[0]; k++) {
            const cJSON *v = cJSON_GetObjectItemCaseSensitive(m, keys[k]);
            if (cJSON_IsString(v))
                cJSON_AddStringToObject(o, keys[k], v->valuestring);
        }
        i++;
    }
    return out;
fail:
    cJSON_Delete(out);
    return NULL;
}

/* reasoning_effort -> template kwarg, and a budget unless one was given. */
static int chatreq_effort(const cJSON *req, bool think_set, cJSON *kwargs, int *budget,
                          struct api_error *e)
{
    static const struct { const char *name; int budget; } efforts[] = {
        { "none", 0 }, { "minimal", CHATREQ_BUDGET_MINIMAL }, { "low", CHATREQ_BUDGET_LOW },
        { "medium", CHATREQ_BUDGET_MEDIUM }, { "high", -1 },
    };
    const char *effort = NULL;
    if (apireq_string(req, "reasoning_effort", &effort, e) < 0)
        return -1;
    if (!effort)
        return 0;
    size_t k = 0;
    while (k < sizeof efforts / sizeof efforts[0] && strcmp(effort, efforts[k].name) != 0)
        k++;
    if (k == sizeof efforts / sizeof efforts[0])
        return api_error_set(e, 400, "reasoning_effort",
                             "'reasoning_effort' must be none, minimal, low, medium or high");
    cJSON_DeleteItemFromObjectCaseSensitive(kwargs, "reasoning_effort");
    cJSON_AddStringToObject(kwargs, "reasoning_effort", effort);
    /* "none" turns thinking off where the template has the switch */
    if (!strcmp(effort, "none") && !think_set)
        cJSON_AddBoolToObject(kwargs, "enable_thinking", false);
    if (*budget < 0)
        *budget = efforts[k].budget;
    return 0;
}

/* tools, tool_choice, parallel_tool_calls, chat_template_kwargs,
 * enable_thinking, reasoning_effort, thinking_budget. */
static int chatreq_agent_fields(const cJSON *req, struct chatreq *cr, cJSON **tools,
                                cJSON **kwargs, struct api_error *e)
{
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(req, "tools");
    if (t && !cJSON_IsNull(t)) {
        if (!cJSON_IsArray(t))
            return api_error_set(e, 400, "tools", "'tools' must be an array of function tools");
        const cJSON *x;
        int i = 0;
        cJSON_ArrayForEach(x, t) {
            const cJSON *fn = cJSON_GetObjectItemCaseSensitive(x, "function");
            if (!cJSON_IsObject(fn) || !cJSON_IsString(cJSON_GetObjectItemCaseSensitive(fn, "name")))
                return api_error_set(e, 400, "tools", "'tools[%d]' must be {\"type\":\"function\",\"function\":{\"name\":...}}", i);
            i++;
        }
        if (i > 0) {
            *tools = cJSON_Duplicate(t, true);
            cr->tools_on = true;
        }
    }
    const cJSON *tc = cJSON_GetObjectItemCaseSensitive(req, "tool_choice");
    if (cJSON_IsString(tc)) {
        if (!strcmp(tc->valuestring, "none"))
            cr->tools_on = false;
        else if (strcmp(tc->valuestring, "auto") != 0 && strcmp(tc->valuestring, "required") != 0)
            return api_error_set(e, 400, "tool_choice", "'tool_choice' must be none, auto, required or a function, got '%s'",
                                 tc->valuestring);
    } else if (tc && !cJSON_IsNull(tc) && !cJSON_IsObject(tc)) {
        return api_error_set(e, 400, "tool_choice", "'tool_choice' must be a string or an object");
    }
    if (apireq_bool(req, "parallel_tool_calls", &cr->parallel, e) < 0)
        return -1;
    const cJSON *kw = cJSON_GetObjectItemCaseSensitive(req, "chat_template_kwargs");
    if (kw && !cJSON_IsNull(kw) && !cJSON_IsObject(kw))
        return api_error_set(e, 400, "chat_template_kwargs", "'chat_template_kwargs' must be an object");
    *kwargs = cJSON_IsObject(kw) ? cJSON_Duplicate(kw, true) : cJSON_CreateObject();
    bool think;
    int r = apireq_bool(req, "enable_thinking", &think, e);
    if (r < 0)
        return -1;
    if (r) {
        cJSON_DeleteItemFromObjectCaseSensitive(*kwargs, "enable_thinking");
        cJSON_AddBoolToObject(*kwargs, "enable_thinking", think);
    }
    long budget = -1;
    if (apireq_int(req, "thinking_budget", 0, 1L << 30, &budget, e) < 0)
        return -1;
    cr->reasoning_budget = (int)budget;
    return chatreq_effort(req, r > 0, *kwargs, &cr->reasoning_budget, e);
}

int chatreq_render(const struct api_model *m, const cJSON *req, struct chatreq *cr,
                   struct api_error *e)
{
    *cr = (struct chatreq){ .parallel = true, .reasoning_budget = -1 };
    cJSON *tools = NULL, *kwargs = NULL, *msgs = chatreq_messages(req, e);
    int rc = -1;
    if (msgs && chatreq_agent_fields(req, cr, &tools, &kwargs, e) == 0 &&
        api_chat_prompt_json(m, msgs, tools, kwargs, &cr->ids, &cr->n_ids, &cr->prompt, e) == 0) {
        rc = 0;
        if (tools && !(cr->tools_text = cJSON_PrintUnformatted(tools)))
            rc = api_error_set(e, 500, NULL, "out of memory");
    }
    cJSON_Delete(msgs);
    cJSON_Delete(tools);
    cJSON_Delete(kwargs);
    return rc;
}

int chatreq_build(const struct api_model *m, const cJSON *req, const struct apireq_gen *g,
                  struct chatreq *cr, struct api_error *e)
{
    if (chatreq_render(m, req, cr, e) < 0 || api_check_context(m, cr->n_ids, g, e) < 0 ||
        apireq_grammar(req, &cr->grammar, e) < 0)
        return -1;
    if (cr->tools_on) {
        /* tool_choice required or a named function: a grammar spells the call
         * the way this model's tool parser reads it */
        struct tools_wire w;
        struct grammar *tg;
        const char *trigger;
        tools_wire_of(m->tools_fmt, &w);
        if (apireq_tool_grammar(req, &w, cr->parallel, &tg, &trigger, e) < 0)
            return -1;
        if (tg && trigger && cr->grammar) {
            grammar_free(tg); /* auto: the client's grammar or response_format wins */
        } else if (tg) {
            grammar_free(cr->grammar);
            cr->grammar = tg;
            cr->grammar_trigger = trigger;
            /* a call cut by max_tokens has arguments that break the schema:
             * the engine closes it on its shortest way instead */
            cr->grammar_close = true;
        }
    }
    /* The client's stops, then the end-of-turn text for vocabularies that
     * do not mark it as end-of-generation. */
    if (!(cr->stops = calloc((size_t)g->n_stop + 1, sizeof *cr->stops)))
        return api_error_set(e, 500, NULL, "out of memory");
    for (int i = 0; i < g->n_stop; i++)
        cr->stops[i] = g->stop[i];
    cr->stops[g->n_stop] = chat_format_end_of_turn(m->fmt);
    cr->n_stops = g->n_stop + 1;
    return 0;
}

int chatreq_attach(const struct chatreq *cr, const struct api_model *m, struct api_call *c,
                   struct engine_request *rq, struct api_error *e)
{
    struct chatout_params cp = chatout_default_params();
    cp.rfmt = m->rfmt;
    cp.starts_open = reasoning_prompt_opens(m->rfmt, cr->prompt, strlen(cr->prompt));
    cp.tools = cr->tools_on;
    cp.tp.fmt = m->tools_fmt;
    cp.tp.parallel = cr->parallel;
    cp.tp.tools_json = cr->tools_text;
    for (int i = 0; i < c->n; i++)
        if (!(c->choices[i].chat = chatout_new(&cp)))
            return api_error_set(e, 500, NULL, "out of memory");
    const char *close = reasoning_close_text(m->rfmt);
    if (cr->reasoning_budget >= 0 && *close) {
        /* the closing tag is a control token in many vocabularies */
        if (api_tokenize(m->tok, close, TOK_PARSE_SPECIAL, &c->force_ids, &c->n_force_ids, e) < 0)
            return -1;
        c->reasoning_budget = cr->reasoning_budget;
    }
    rq->prompt = cr->ids;
    rq->n_prompt = cr->n_ids;
    rq->stop = cr->stops;
    rq->n_stop = cr->n_stops;
    rq->grammar = cr->grammar;
    rq->grammar_trigger = cr->grammar_trigger;
    rq->grammar_close = cr->grammar_close;
    /* tool and reasoning markers are often control tokens: keep their text */
    rq->echo_special = cr->tools_on || m->special_markup;
    return 0;
}

void chatreq_free(struct chatreq *cr)
{
    free(cr->ids);
    free(cr->prompt);
    free(cr->tools_text);
    grammar_free(cr->grammar);
    free(cr->stops);
    *cr = (struct chatreq){ .reasoning_budget = -1 };
}
