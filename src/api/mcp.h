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

#include <stdbool.h>

#include "http/server.h"

#define MCP_LATEST_PROTOCOL "2025-11-25"

/* Which requests are MCP's: "/mcp" (and "/mcp/"). */
bool mcp_owns(const char *path);
/* POST a JSON-RPC message, DELETE a session, GET (405: no event stream). */
void mcp_dispatch(http_request *request);

#endif
