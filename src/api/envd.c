#include "api/envd.h"

#include <string.h>

#include "api/connect.h"
#include "api/envd_files.h"
#include "api/envd_filesystem.h"
#include "api/envd_process.h"
#include "api/envd_user.h"
#include "api/errors.h"

/* envd's Connect-RPC services that cellbox serves (process.Process is served by
   envd_process_serve, which gives its methods the call's deadline too). */
static const connect_service *const envd_services[] = {&envd_filesystem_service,
                                                       &envd_process_service, NULL};

bool envd_streams_body(const http_request *request)
{
    return envd_files_streams_body(request) ||
           connect_streams_body(envd_services, http_method(request), http_path(request));
}

/* A Connect-RPC call /{package.Service}/{Method}, once its user is one of envd's. */
static void serve_connect(http_request *request, box *b, const char *service, const char *method)
{
    envd_user user;
    connect_error error = {.code = "invalid_argument"};
    if (!envd_user_of_request(request, &user, error.message, sizeof error.message))
        connect_respond_error(request, &error);
    else if (strcmp(service, ENVD_PROCESS_SERVICE) == 0)
        envd_process_serve(request, b, method); /* its calls carry their deadline */
    else
        connect_serve(request, envd_services, service, method, b);
}

void envd_route(http_request *request, box *b, char **s, int n)
{
    if (n == 1 && strcmp(s[0], "health") == 0) {
        http_respond(request, 204, NULL, "", 0);
    } else if (n == 1 && strcmp(s[0], "files") == 0) {
        envd_files_route(request, b);
    } else if (n == 2 && strchr(s[0], '.')) {
        /* Connect-RPC: /{package.Service}/{Method} */
        serve_connect(request, b, s[0], s[1]);
    } else {
        errors_respond_e2b(request, 404,
                      "no such envd endpoint: %s (cellbox serves /health and "
                      "/files)",
                      http_path(request));
    }
}

