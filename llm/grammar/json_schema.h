/* json_schema.h - JSON Schema -> GBNF, for response_format json_schema,
 * json_object and grammar-forced tool calls.
 *
 *   char *gbnf = jschema_to_gbnf(schema, err, sizeof err);    // NULL: 400 with err
 *   struct grammar *g = grammar_parse(gbnf, strlen(gbnf), err, sizeof err);
 *   free(gbnf);
 *
 * Covered: type (also arrays of types), properties, required,
 * additionalProperties (false by default when properties are given, as
 * OpenAI's strict mode requires; true or a schema allows extra keys), enum,
 * const, items, prefixItems, minItems/maxItems, anyOf/oneOf, allOf (merged
 * objects), $ref/$defs/definitions (also recursive), minLength/maxLength,
 * pattern (a regex subset: literals, ., classes, \d \w \s, groups, |, * + ?
 * {m,n}, ^ $), minimum/maximum/exclusiveMinimum/exclusiveMaximum (integers
 * exactly; numbers with integral bounds), format date, time, date-time, uuid.
 * Annotations (title, description, default, examples, $schema, $id, $comment,
 * strict) are ignored; any other keyword is an error naming it and its
 * location: "json_schema: /properties/tags: unsupported keyword 'contains'".
 * The output never has whitespace after the top value, so a complete value
 * ends generation.
 *
 * Schemas come from the network: the compiler recurses at most
 * JSCHEMA_MAX_DEPTH schema levels and JSCHEMA_MAX_PATTERN_NESTING pattern
 * groups deep, and stops when the grammar passes JSCHEMA_MAX_GBNF_BYTES; each
 * error names its limit. It is linear in the schema otherwise (20,000
 * properties compile in milliseconds). grammar_parse's own limits
 * (grammar.h) apply to the result.
 *
 * Thread safety: stateless; any thread. */
#ifndef OMNI_JSON_SCHEMA_H
#define OMNI_JSON_SCHEMA_H

#include <stdbool.h>
#include <stddef.h>

#define JSCHEMA_MAX_DEPTH 64               /* schema nesting visited at most */
#define JSCHEMA_MAX_PATTERN_NESTING 64     /* groups inside groups of a "pattern" */
#define JSCHEMA_MAX_GBNF_BYTES (8 << 20)   /* grammar text one schema may produce */
#define JSCHEMA_MAX_REFS 256               /* distinct $ref targets */

struct cJSON;
struct tools_wire;

/* GBNF text for values valid against schema (malloc'd, caller frees), or
 * NULL with the reason in err. */
char *jschema_to_gbnf(const struct cJSON *schema, char *err, size_t errlen);

/* GBNF for any JSON object (response_format json_object). Caller frees. */
char *jschema_object_gbnf(void);

/* GBNF for a forced tool call: the calls spelled as wire says (see
 * llm/tools/tools.h), each {"<name_key>": NAME, "<args_key>": ARGS} with ARGS
 * valid for that function's "parameters" schema. tools is the request's
 * OpenAI "tools" array; name restricts to one function (NULL: any of them);
 * parallel allows several calls. NULL with err for a bad schema or an unknown
 * name. Caller frees. */
char *jschema_tool_call_gbnf(const struct cJSON *tools, const char *name,
                             const struct tools_wire *wire, bool parallel, char *err,
                             size_t errlen);

#endif
