/* routes — the one place that decides which API family owns a request, in this order:
 *   1. E2B (e2b.c): a call into a sandbox (header E2b-Sandbox-Id: any path) or the control
 *      plane's /sandboxes and /v2/sandboxes;
 *   2. cellbox's native API (v1.c): /v1 and below;
 *   3. MCP (mcp.c): /mcp;
 *   4. Jupyter sessions (sessions.c): /api/sessions and /api/sessions/{id};
 *   5. Kernel Gateway (jupyter.c): the rest of /api, and /kernelspecs/{name}/{file};
 * and anything else is 404 {"message": "no such endpoint: ..."}. E2B's Connect-RPC services
 * (envd's process and filesystem) will be routed here too, ahead of E2B's other in-sandbox
 * calls. Authentication and CORS happen before (http/server.c); a family answers its own 404s
 * and 405s (with Allow) below its prefix. */
#ifndef CELLBOX_API_ROUTES_H
#define CELLBOX_API_ROUTES_H

#include "http/server.h"

/* The server's handler for every request (http_server_start): each is answered exactly once,
   now or later (streams). */
void routes_dispatch(http_request *request);
/* The server's streams_body (http_server_options): /v1's file uploads and envd's
   client-streaming Connect methods take their bodies as they arrive. */
bool routes_streams_body(const char *method, const char *path);

#endif
