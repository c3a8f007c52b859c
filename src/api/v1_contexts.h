/* v1_contexts — a sandbox's contexts (more kernels in the same sandbox, each with its own
 * variables): POST .../contexts {language?, cwd?} creates one; GET, DELETE or POST restart act on
 * one. Shared by /v1 (v1.c) and E2B's code interpreter routes (e2b.c). */
#ifndef CELLBOX_API_V1_CONTEXTS_H
#define CELLBOX_API_V1_CONTEXTS_H

#include "http/server.h"
#include "model/box.h"

/* POST .../contexts on a running sandbox: 201 with the new context's model. It starts in the
   body's cwd, else in `default_cwd` (/v1's /workspace, E2B's /home/user). */
void v1_create_context(http_request *request, box *b, const char *default_cwd);
/* GET, DELETE or POST restart (`action` "restart", else NULL) on context `context_id`. */
void v1_route_context(http_request *request, box *b, const char *context_id, const char *action);

#endif
