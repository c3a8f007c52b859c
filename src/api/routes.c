#include "api/routes.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/e2b.h"
#include "api/envd.h"
#include "api/errors.h"
#include "api/jupyter.h"
#include "api/mcp.h"
#include "api/ports.h"
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

/* A sandbox host, <port>-<sandboxId>.<domain>: E2B's own two ports are served here, any other
   is a server inside the sandbox. */
static void route_sandbox_host(http_request *request, const ports_address *address)
{
    /* A sandbox's own credential (its envd access token, a signed file URL) opens that
       sandbox's envd, never a server inside it nor another sandbox named by the host */
    const char *named = http_header(request, "E2b-Sandbox-Id");
    if (!http_admitted_by_token(request) &&
        (!e2b_serves_port(address->port) || (named && strcmp(named, address->sandbox_id) != 0))) {
        errors_respond_e2b(request, 403,
                           "this credential does not open port %d of sandbox %s: a sandbox's "
                           "access token or signed URL opens only its own envd; send the "
                           "daemon's token (E2B-Traffic-Access-Token or ?token=)",
                           address->port, address->sandbox_id);
        return;
    }
    if (e2b_serves_port(address->port)) {
        char port[8];
        snprintf(port, sizeof port, "%d", address->port);
        e2b_route_into_sandbox(request, address->sandbox_id, port);
    } else {
        ports_forward(request, address);
    }
}

bool routes_streams_body(const http_request *request)
{
    ports_address address;
    if (ports_address_of(request, &address))
        return !e2b_serves_port(address.port) ||
               (address.port == atoi(ENVD_PORT) && envd_streams_body(request));
    return e2b_streams_body(request) || v1_streams_body(http_method(request), http_path(request));
}

void routes_dispatch(http_request *request)
{
    ports_address address;
    /* first: every path on a sandbox host is the sandbox's */
    if (ports_address_of(request, &address)) {
        route_sandbox_host(request, &address);
        return;
    }
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
