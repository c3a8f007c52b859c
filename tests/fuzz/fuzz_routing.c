/* fuzz_routing — request routing: any method, path, query and headers through routes_dispatch
 * (which hands E2B, /v1 and /mcp requests to their modules), and the URL helpers it uses.
 *
 * Input: the text of an HTTP/1.1 request (see http_stub.h). The corpus holds real requests of
 * every family: Jupyter's /api, /kernelspecs, /v1, E2B's control plane and in-sandbox calls
 * (E2b-Sandbox-Id), /mcp. */
#include <stdint.h>
#include <string.h>

#include "api/routes.h"
#include "common/ids.h"
#include "http/url.h"
#include "http_stub.h"

/* An MCP initialize opens a session: end it, so that sessions do not pile up across inputs. */
static void end_mcp_session(const http_request *request)
{
    const char *session = stub_response_header(request, "Mcp-Session-Id");
    if (!session)
        return;
    static const char text[] = "DELETE /mcp HTTP/1.1\r\n\r\n";
    http_request *end = stub_request_parse((const unsigned char *)text, sizeof text - 1);
    stub_request_add_header(end, "Mcp-Session-Id", session);
    stub_request_run(end);
    stub_request_finish(end);
}

/* The URL helpers on their own, with a copy small enough to cut the path. */
static void check_url_helpers(const http_request *request)
{
    char copy[16], *segments[4];
    int n = url_split_path(http_path(request), copy, sizeof copy, segments, 4);
    for (int i = 0; i < n && i < 4; i++) {
        id_is_uuid(segments[i]);
        url_percent_decode(segments[i]);
    }
    routes_streams_body(request); /* /v1 and envd uploads */
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    stub_init();
    http_request *request = stub_request_parse(data, size);
    if (!request)
        return 0;
    check_url_helpers(request);
    stub_request_run(request);
    end_mcp_session(request);
    stub_request_finish(request);
    return 0;
}
