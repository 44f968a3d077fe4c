/* mcp_proto.h - the pure parts of the MCP client (protocol revision
 * 2025-06-18), with no I/O so that tests feed them broken input directly:
 * JSON-RPC 2.0 message classification, the server-sent-events parser of the
 * Streamable HTTP transport, and a tools/call result turned into the text a
 * model reads (size-capped).
 *
 *   struct mcp_sse sse; mcp_sse_init(&sse, max_event_bytes);
 *   if (mcp_sse_feed(&sse, bytes, n, on_event, user) < 0) -> event too large
 *   mcp_sse_free(&sse);
 *
 *   bool is_error; char *text = mcp_result_text(result, 65536, &is_error);
 *
 * Thread safety: stateless functions; a struct mcp_sse belongs to one thread. */
#ifndef OMNI_MCP_PROTO_H
#define OMNI_MCP_PROTO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct cJSON;

#define MCP_PROTOCOL_VERSION "2025-06-18"

enum mcp_msg_kind {
    MCP_MSG_INVALID,      /* not a JSON-RPC 2.0 message */
    MCP_MSG_RESPONSE,     /* id + result or error */
    MCP_MSG_REQUEST,      /* id + method: the server asks (ping, ...) */
    MCP_MSG_NOTIFICATION, /* method, no id */
};
/* What msg is; *id gets a response's or request's numeric id (-1 for ids
 * that are not integers, which this client never sends). */
enum mcp_msg_kind mcp_msg_classify(const struct cJSON *msg, int64_t *id);

/* A JSON-RPC request (id >= 0) or notification (id < 0) as one line of
 * compact JSON (no newline); params may be NULL and is not taken. malloc'd. */
char *mcp_msg_request(int64_t id, const char *method, const struct cJSON *params);
/* A response to the server's request id: result (NULL: {}) or, with
 * code != 0, an error. malloc'd. */
char *mcp_msg_response(const struct cJSON *id, int code, const char *message);

/* ---- server-sent events (text/event-stream) ---- */
typedef void (*mcp_sse_fn)(void *user, const char *data, size_t len);
struct mcp_sse {
    char *line;             /* the line being read */
    size_t line_len, line_cap;
    char *data;             /* the event's data lines, joined with \n */
    size_t data_len, data_cap;
    bool has_data;
    size_t max_bytes;       /* a line or an event's data over this: error */
};
void mcp_sse_init(struct mcp_sse *p, size_t max_bytes);
void mcp_sse_free(struct mcp_sse *p);
/* Feeds bytes; fn gets each complete event's data. 0, or -1 when an event
 * is over max_bytes or memory ran out (the stream is then unusable). */
int mcp_sse_feed(struct mcp_sse *p, const char *buf, size_t len, mcp_sse_fn fn, void *user);

/* ---- tools ---- */
/* A tools/call result as text: the text parts joined with newlines; other
 * parts as a short note ("[image: image/png, 1234 bytes of base64]");
 * structuredContent when there is no content; over cap bytes the text is cut
 * at a character boundary with a note saying how much was left out.
 * *is_error from isError. malloc'd; NULL only when out of memory. */
char *mcp_result_text(const struct cJSON *result, size_t cap, bool *is_error);
/* s cut to at most cap bytes at a UTF-8 boundary, with
 * "\n[... truncated: N of M bytes shown]" when cut (s is freed). */
char *mcp_text_cap(char *s, size_t cap);

#endif
