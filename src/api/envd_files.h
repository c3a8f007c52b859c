/* envd_files — envd's GET and POST /files: downloads (gzip-compressed when the client accepts
 * it) and uploads streamed to the sandbox's disk as they arrive (api/file_upload.c), as
 * application/octet-stream (gzip-compressed or not) or a multipart form of files; signed URLs
 * (api/envd_access.h) are checked before anything is read or written. */
#ifndef CELLBOX_API_ENVD_FILES_H
#define CELLBOX_API_ENVD_FILES_H

#include <stdbool.h>

#include "http/server.h"
#include "model/box.h"

/* GET or POST /files into sandbox `b`, or into the sandbox a signed URL's signature names
   (b NULL). */
void envd_files_route(http_request *request, box *b);
/* Does this request (to envd's /files) take its body as a stream? */
bool envd_files_streams_body(const http_request *request);

#endif
