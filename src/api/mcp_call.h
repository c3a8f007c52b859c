/* mcp_call — one MCP tools/call in flight: its JSON-RPC response is held open as a stream until a
 * tool finishes it (now, or later when a cell or command ends), or the client goes away first.
 *
 * In order: mcp.c starts it (mcp_call_start), hands it to a tool (mcp_tools.c), and the tool
 * either registers what to stop if the client leaves (mcp_call_on_abandon) and finishes it later,
 * or finishes it at once (mcp_call_finish). The call frees itself when its stream closes. */
#ifndef CELLBOX_API_MCP_CALL_H
#define CELLBOX_API_MCP_CALL_H

#include <jansson.h>

#include "http/server.h"

typedef struct mcp_call mcp_call;

/* Told when a call of session `session_id` has ended (finished, or closed unfinished), once:
   the session counts its calls in flight. */
typedef void mcp_call_ended_fn(const char *session_id);

/* Opens the response to JSON-RPC request `id` (borrowed) of session `session_id`. */
mcp_call *mcp_call_start(http_request *request, json_t *id, const char *session_id,
                         mcp_call_ended_fn *on_ended);
/* Set by a tool that finishes later: called if the client goes away first (NULL: nothing). */
void mcp_call_on_abandon(mcp_call *call, void (*on_abandon)(void *arg), void *arg);
/* Ends a call with a tool result (steals `result`: {"content": [...], "isError"?}); a second
   finish is ignored. */
void mcp_call_finish(mcp_call *call, json_t *result);
/* Ends a call with a JSON-RPC error instead (a protocol error, such as an unknown tool). */
void mcp_call_finish_error(mcp_call *call, int code, const char *message);

#endif
