/* v1 — cellbox's native API: sandboxes, contexts, the execution stream, commands, files and
 * stateless runs (docs/api.md, docs/openapi.yaml). This module routes /v1/... to the v1_*
 * modules (v1_contexts, v1_execute, v1_commands, v1_files, v1_run) and serves templates and the
 * sandboxes' own routes (create, list, get, delete, timeout, pause, resume, logs). */
#ifndef CELLBOX_API_V1_H
#define CELLBOX_API_V1_H

#include <stdbool.h>

#include "http/server.h"

/* Once at start: the box, execution and command records. */
void v1_init(void);
bool v1_owns(const char *path); /* "/v1" or below */
void v1_dispatch(http_request *request);
/* Does this request take its body as a stream (file uploads)? Asked by the server before the
   body is read. */
bool v1_streams_body(const char *method, const char *path);

#endif
