/* envd — E2B's in-sandbox daemon as the SDKs reach it on port 49983 (E2b-Sandbox-Port): GET
 * /health, GET and POST /files (api/envd_files.h: downloads, and uploads streamed to disk,
 * multipart or octet-stream, gzip both ways), and the
 * Connect-RPC services /{package.Service}/{Method} (api/connect.h): filesystem.Filesystem
 * (api/envd_filesystem.h). Every call names a user (api/envd_user.h) and relative paths resolve
 * against ENVD_HOME_DIR. api/e2b.c routes a call here once it found the sandbox. */
#ifndef CELLBOX_API_ENVD_H
#define CELLBOX_API_ENVD_H

#include "http/server.h"
#include "api/envd_user.h" /* ENVD_HOME_DIR */
#include "model/box.h"

#define ENVD_PORT "49983"

void envd_route(http_request *request, box *b, char **s, int n);
/* Does this envd call take its body as it arrives (a file upload, a client-streaming Connect
   method)? */
bool envd_streams_body(const http_request *request);

#endif
