/* v1_files — /v1/sandboxes/{id}/files: reading, writing, listing, moving and removing files
 * inside a sandbox, and tar archives of directories. Every path is resolved beneath the
 * sandbox's root (sandbox/confined.c), as the sandbox user. */
#ifndef CELLBOX_API_V1_FILES_H
#define CELLBOX_API_V1_FILES_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "http/server.h"
#include "model/box.h"

/* `rest` is the path after /v1/sandboxes/{id}/files ("", "/stat", "/list", "/mkdir", "/move",
   "/batch", "/tar"); the box is running. */
void v1_files_route(http_request *request, box *b, const char *rest);
/* Does this request take its body as a stream (uploads)? */
bool v1_files_streams_body(const char *method, const char *rest);

#endif
