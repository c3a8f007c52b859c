#include "api/routes.h"

#include <string.h>

#include "api/e2b.h"
#include "api/envd.h"
#include "api/jupyter.h"
#include "api/mcp.h"
#include "api/sessions.h"
#include "api/v1.h"
#include "http/url.h"

#define MAX_PATH_SEGMENTS 8

/* Jupyter's /api and /kernelspecs, by path segments ("/api/kernels/{id}" → api, kernels, id). */
static void route_jupyter(http_request *request)
{
    char copy[2048];
    char *s[MAX_PATH_SEGMENTS];
    int n = url_split_path(http_path(request), copy, sizeof copy, s, MAX_PATH_SEGMENTS);
    if (n >= 2 && n <= 3 && strcmp(s[0], "api") == 0 && strcmp(s[1], "sessions") == 0)
        sessions_route(request, n == 3 ? s[2] : NULL);
    else if (n >= 1 && n <= MAX_PATH_SEGMENTS && strcmp(s[0], "api") == 0)
        jupyter_route_api(request, s, n);
    else if (n == 3 && strcmp(s[0], "kernelspecs") == 0)
        jupyter_route_kernelspec_resource(request, s[1], s[2]);
    else
        http_respond_error(request, 404, "no such endpoint: %s", http_path(request));
}

bool routes_streams_body(const char *method, const char *path)
{
    /* envd's paths (/{package.Service}/{Method}) are E2B's only with E2b-Sandbox-Id, which is not
       known yet: a request elsewhere on such a path is answered 404 by its family, and its
       streamed body discarded */
    return v1_streams_body(method, path) || envd_streams_body(method, path);
}

void routes_dispatch(http_request *request)
{
    /* Connect-RPC (E2B envd's filesystem.Filesystem, calls into a sandbox whose path is
       /{service}/{method}) is E2B's: e2b.c hands it to api/connect.c. */
    if (e2b_owns(request)) /* first: E2B's in-sandbox calls may use any path */
        e2b_dispatch(request);
    else if (v1_owns(http_path(request)))
        v1_dispatch(request);
    else if (mcp_owns(http_path(request)))
        mcp_dispatch(request);
    else
        route_jupyter(request);
}
