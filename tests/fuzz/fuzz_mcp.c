/* fuzz_mcp.c - the parsers of the MCP client (src/mcp/mcp_config.h,
 * src/mcp/mcp_proto.h) on arbitrary bytes: a config file, a server-sent
 * event stream fed in pieces under a small size limit, and a JSON-RPC
 * message classified and, as a tools/call result, turned into capped text.
 *
 * Input: byte 0 the SSE piece size and the result cap, then three parts
 * separated by NUL: the config text, the SSE stream, the JSON message.
 * Build and run with `make fuzz` (tests/fuzz/run.sh). */
#include "tests/fuzz/fz_util.h"

#include "src/mcp/mcp_config.h"
#include "src/mcp/mcp_proto.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc, (void)argv;
    return 0;
}

static void fz_mcp_event(void *user, const char *data, size_t len)
{
    size_t *total = user;
    *total += len;
    if (len && !data)
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    size_t piece = 1 + (data[0] & 15), cap = (size_t)(data[0] >> 4) * 7;
    const uint8_t *part[3];
    size_t len[3];
    int n = fz_split(data + 1, size - 1, part, len, 3);
    char err[256];
    struct mcp_config *c = NULL;
    if (n > 0 && mcp_config_parse((const char *)part[0], len[0], "fuzz.json", &c, err, sizeof err) == 0) {
        for (int i = 0; i < c->n_servers; i++)
            if (!c->servers[i].name || (!c->servers[i].command && !c->servers[i].url))
                abort();
    } else if (n > 0 && !strstr(err, "fuzz.json")) {
        abort();   /* every error names the file */
    }
    mcp_config_free(c);
    if (n > 1) {
        struct mcp_sse p;
        size_t total = 0;
        mcp_sse_init(&p, 256);
        for (size_t i = 0; i < len[1]; i += piece) {
            size_t k = len[1] - i < piece ? len[1] - i : piece;
            if (mcp_sse_feed(&p, (const char *)part[1] + i, k, fz_mcp_event, &total) < 0)
                break;
        }
        mcp_sse_free(&p);
    }
    if (n > 2) {
        cJSON *msg = cJSON_ParseWithLength((const char *)part[2], len[2]);
        int64_t id;
        mcp_msg_classify(msg, &id);
        bool is_error;
        char *t = mcp_result_text(msg, cap, &is_error);
        /* the cap holds, with room for the note */
        if (t && strlen(t) > cap + 96)
            abort();
        free(t);
        cJSON_Delete(msg);
    }
    return 0;
}
