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

/* Answers with the bytes of the file at `path` (a sandbox path), or the failure. For E2B's
   envd downloads, whose paths envd.c resolves first. */
void v1_files_read(http_request *request, box *b, const char *path);
/* Writes `length` bytes held in memory to the file at `path` (parents made, an existing file
   emptied first): its entry, or NULL after answering the failure. For E2B's envd uploads. */
json_t *v1_files_write(http_request *request, box *b, const char *path, const void *data,
                       size_t length);

#endif
