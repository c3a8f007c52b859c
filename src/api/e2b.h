/* e2b — E2B's APIs, so that the official E2B SDKs (npm `e2b`, `@e2b/code-interpreter`) run
 * against cellbox unchanged, pointed at it with E2B_API_URL and E2B_SANDBOX_URL.
 *
 * The SDK talks to two places. The control plane (E2B_API_URL) creates, lists, times out,
 * pauses, resumes and kills sandboxes: /sandboxes and /v2/sandboxes here, each a cellbox
 * sandbox. Every call into a sandbox goes to one base URL (E2B_SANDBOX_URL) with the headers
 * E2b-Sandbox-Id and E2b-Sandbox-Port: port 49999 is the code interpreter (/execute, /contexts,
 * served by /v1's execution stream and contexts) and 49983 is envd (api/envd.h). A sandbox host
 * (<port>-<id>.<domain>, api/ports.h) reaches the same two ports through e2b_route_into_sandbox.
 * A paused sandbox is resumed by a call into it when its lifecycle says autoResume; snapshots
 * and forks are e2b_snapshots.h's; what only E2B's cloud does (template builds, secrets, the MCP
 * gateway, teams) answers 501 "not supported by cellbox: ...". docs/api.md lists what works. */
#ifndef CELLBOX_API_E2B_H
#define CELLBOX_API_E2B_H

#include <jansson.h>
#include <stdbool.h>

#include "http/server.h"
#include "model/box.h"

/* A call into a sandbox (it names one in E2b-Sandbox-Id) or to the control plane's paths. */
bool e2b_owns(http_request *request);
void e2b_dispatch(http_request *request);
/* Does this E2B request take its body as a stream (envd's POST /files)? */
bool e2b_streams_body(const http_request *request);
/* Ports 49983 (envd) and 49999 (the code interpreter): cellbox serves them itself. */
bool e2b_serves_port(int port);
/* A call into sandbox `id`'s port `port` (one e2b_serves_port names), as the headers
   E2b-Sandbox-Id and E2b-Sandbox-Port or a sandbox host (api/ports.h) name them. */
void e2b_route_into_sandbox(http_request *request, const char *id, const char *port);

#endif
