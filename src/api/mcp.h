/* mcp — the Model Context Protocol at /mcp (streamable HTTP transport), so agents reach cellbox
 * as tools: create a sandbox, run code (text plus charts as images), run a shell command, read,
 * write and list files, pause, resume and delete, and a stateless one-shot run.
 *
 * JSON-RPC 2.0 over POST; every request is answered with one application/json response (no SSE:
 * cellbox sends no server-initiated messages, so GET /mcp is 405). `initialize` opens a session
 * (Mcp-Session-Id); a session owns the sandbox that tools use when no sandbox_id is given, and
 * DELETE /mcp (or an hour of silence) ends both. The token protects /mcp like every route.
 * `cellbox mcp` (the CLI) bridges stdio to this endpoint. */
#ifndef CELLBOX_API_MCP_H
#define CELLBOX_API_MCP_H

#include <jansson.h>
#include <stdbool.h>

#include "http/server.h"

#define MCP_LATEST_PROTOCOL "2025-11-25"

bool mcp_owns(const char *path); /* "/mcp" */
void mcp_dispatch(http_request *request);

/* The tools (mcp_tools.c). */
typedef struct mcp_call mcp_call;
json_t *mcp_tools_list(void);
/* Runs tool `name` with `arguments` for session `session_id` (whose default sandbox is
   *default_sandbox, an id or ""; a tool may set it). The result goes to mcp_call_finish, now or
   later. -1 when there is no such tool. */
int mcp_tools_call(mcp_call *call, const char *name, json_t *arguments, char default_sandbox[64]);
/* Ends a call with a tool result (steals `result`: {"content": [...], "isError"?}). */
void mcp_call_finish(mcp_call *call, json_t *result);
/* Set by a tool that finishes later: called if the client goes away first. */
void mcp_call_on_abandon(mcp_call *call, void (*on_abandon)(void *arg), void *arg);
/* The sandbox a session uses by default is deleted with the session. */
void mcp_tools_session_ended(const char *default_sandbox);

#endif
