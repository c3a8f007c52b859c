#include "api/envd.h"

#include <string.h>

#include "api/connect.h"
#include "api/envd_files.h"
#include "api/envd_filesystem.h"
#include "api/errors.h"

/* envd's Connect-RPC services that cellbox serves; process.Process is not yet among them, so its
   calls answer "unimplemented" in Connect's shape. */
static const connect_service *const envd_services[] = {&envd_filesystem_service, NULL};

bool envd_streams_body(const http_request *request)
{
    return envd_files_streams_body(request) ||
           connect_streams_body(envd_services, http_method(request), http_path(request));
}

void envd_route(http_request *request, box *b, char **s, int n)
{
    if (n == 1 && strcmp(s[0], "health") == 0) {
        http_respond(request, 204, NULL, "", 0);
    } else if (n == 1 && strcmp(s[0], "files") == 0) {
        envd_files_route(request, b);
    } else if (n == 2 && strchr(s[0], '.')) {
        /* Connect-RPC: /{package.Service}/{Method} */
        connect_serve(request, envd_services, s[0], s[1], b);
    } else {
        errors_respond_e2b(request, 404,
                      "no such envd endpoint: %s (cellbox serves /health and "
                      "/files)",
                      http_path(request));
    }
}

