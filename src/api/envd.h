/* envd — E2B's in-sandbox daemon as the SDKs reach it on port 49983 (E2b-Sandbox-Port): GET
 * /health, GET and POST /files (downloads and uploads, multipart or octet-stream), and the
 * Connect-RPC services /{package.Service}/{Method} (api/connect.h): filesystem.Filesystem
 * (api/envd_filesystem.h). api/e2b.c routes a call here once it found the sandbox. */
#ifndef CELLBOX_API_ENVD_H
#define CELLBOX_API_ENVD_H

#include "http/server.h"
#include "model/box.h"

#define ENVD_PORT "49983"
/* The user's home: the default working directory of envd's processes and the directory relative
   paths resolve against on E2B's routes. */
#define ENVD_HOME_DIR "/workspace"

void envd_route(http_request *request, box *b, char **s, int n);
/* Does POST `path` take its body as it arrives (a client-streaming Connect method)? */
bool envd_streams_body(const char *method, const char *path);

#endif
