/* fuzz_json_schema.c - the JSON-schema compiler (llm/grammar/json_schema.c):
 * jschema_to_gbnf of the schema, and a forced tool call for a function
 * with that schema in one of the tool-call spellings. Whatever GBNF it emits must
 * parse (grammar_parse) - a compiler output the parser refuses is a finding.
 *
 * Input: the schema as JSON text (UTF-8). */
#include "tests/fuzz/fz_util.h"

#include "llm/grammar/grammar.h"
#include "llm/grammar/json_schema.h"
#include "llm/tools/tools.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void fz_must_parse(char *gbnf, const char *what)
{
    if (!gbnf)
        return;
    char err[256];
    struct grammar *g = grammar_parse(gbnf, strlen(gbnf), err, sizeof err);
    if (!g) {
        fprintf(stderr, "fuzz: %s gave GBNF the parser refuses: %s\n%.4000s\n", what, err, gbnf);
        abort();
    }
    (void)grammar_match(g, "{}", 2);
    grammar_free(g);
    free(gbnf);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* GBNF is UTF-8 and the compiler copies the schema's strings into it:
     * a schema that is not UTF-8 is refused by grammar_parse (a 400 naming a
     * GBNF line and column; tests/fuzz/crashes/fuzz_json_schema-invalid-utf8-key).
     * Only valid text is interesting beyond that. */
    if (!fz_utf8_valid(data, size))
        return 0;
    cJSON *schema = cJSON_ParseWithLength((const char *)data, size);
    if (!schema)
        return 0;
    char err[256];
    fz_must_parse(jschema_to_gbnf(schema, err, sizeof err), "jschema_to_gbnf");
    /* [{"type":"function","function":{"name":"f","parameters":schema}}] */
    cJSON *tools = cJSON_CreateArray(), *tool = cJSON_CreateObject(), *fn = cJSON_CreateObject();
    cJSON_AddStringToObject(tool, "type", "function");
    cJSON_AddStringToObject(fn, "name", "f");
    cJSON_AddItemToObject(fn, "parameters", schema);
    cJSON_AddItemToObject(tool, "function", fn);
    cJSON_AddItemToArray(tools, tool);
    /* one spelling per input (the schema part of the grammar is the same in all) */
    const enum tools_format f = (enum tools_format)(size % TOOLS_FMT_COUNT);
    struct tools_wire wire;
    tools_wire_of(f, &wire);
    fz_must_parse(jschema_tool_call_gbnf(tools, size & 1 ? "f" : NULL, &wire, size & 2, err,
                                         sizeof err),
                  "jschema_tool_call_gbnf");
    cJSON_Delete(tools);
    return 0;
}
