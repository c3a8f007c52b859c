/* envd — E2B's in-sandbox daemon as the SDKs reach it on port 49983 (E2b-Sandbox-Port): GET
 * /health, GET and POST /files (downloads and uploads, multipart or octet-stream), and the
 * Connect-RPC services /{package.Service}/{Method} (api/connect.h): filesystem.Filesystem
 * (api/envd_filesystem.h). Every call names a user (api/envd_user.h) and relative paths resolve
 * against ENVD_HOME_DIR. api/e2b.c routes a call here once it found the sandbox. */
#ifndef CELLBOX_API_ENVD_H
#define CELLBOX_API_ENVD_H

#include "http/server.h"
#include "model/box.h"

#define ENVD_PORT "49983"
/* The user's home: the default working directory of envd's processes and the directory relative
   paths resolve against on E2B's routes. */
#define ENVD_HOME_DIR "/home/user" /* the workspace under E2B's name (sandbox/rootfs.h) */

void envd_route(http_request *request, box *b, char **s, int n);
/* `path` as E2B's routes read it into `out`: an absolute path as it is, a relative one against
   ENVD_HOME_DIR ("data.csv" -> "/home/user/data.csv"); false when it does not fit. */
bool envd_absolute_path(const char *path, char *out, size_t size);

#endif
