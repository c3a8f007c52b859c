/* fuzz_json_bodies — the JSON bodies of the requests that take one: Jupyter's kernel and session
 * creation, /v1's sandbox creation and stateless run, E2B's sandbox creation, and MCP's JSON-RPC
 * (initialize, tools/list, tools/call of every tool) in an open session.
 *
 * Input: one byte choosing the endpoint, then the body. Each goes through the daemon's own
 * parsers and checks (request_parse_body, request_optional_*, limits_from_request,
 * the MCP tools' argument checks); creation then fails with 503 (http_stub.h). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "http_stub.h"

/* /mcp twice: its tools have the most arguments to check. */
static const char *const endpoints[] = {
    "POST /api/kernels", "POST /api/sessions",        "PATCH /api/sessions/x", "POST /v1/sandboxes",
    "POST /v1/run",      "POST /sandboxes",           "POST /v2/sandboxes",    "POST /mcp",
    "POST /mcp",         "POST /sandboxes/x/timeout",
};
#define ENDPOINT_COUNT (sizeof endpoints / sizeof *endpoints)

static char mcp_session[64];

static void open_mcp_session(void)
{
    static const char text[] = "POST /mcp HTTP/1.1\r\n\r\n"
                               "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\","
                               "\"params\":{\"protocolVersion\":\"2025-06-18\"}}";
    http_request *request = stub_request_parse((const unsigned char *)text, sizeof text - 1);
    stub_request_run(request);
    snprintf(mcp_session, sizeof mcp_session, "%s",
             stub_response_header(request, "Mcp-Session-Id"));
    stub_request_finish(request);
}

/* A body that opens another MCP session: end that one (the harness keeps only its own). */
static void end_other_mcp_session(const http_request *request)
{
    const char *session = stub_response_header(request, "Mcp-Session-Id");
    if (!session || strcmp(session, mcp_session) == 0)
        return;
    static const char text[] = "DELETE /mcp HTTP/1.1\r\n\r\n";
    http_request *end = stub_request_parse((const unsigned char *)text, sizeof text - 1);
    stub_request_add_header(end, "Mcp-Session-Id", session);
    stub_request_run(end);
    stub_request_finish(end);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    stub_init();
    if (!mcp_session[0])
        open_mcp_session();
    if (size < 1)
        return 0;
    char head[64];
    int head_length =
        snprintf(head, sizeof head, "%s HTTP/1.1\r\n\r\n", endpoints[data[0] % ENDPOINT_COUNT]);
    unsigned char *text = malloc((size_t)head_length + size);
    if (!text)
        return 0;
    memcpy(text, head, (size_t)head_length);
    memcpy(text + head_length, data + 1, size - 1);
    http_request *request = stub_request_parse(text, (size_t)head_length + size - 1);
    free(text);
    if (strstr(head, "/mcp"))
        stub_request_add_header(request, "Mcp-Session-Id", mcp_session);
    stub_request_add_header(request, "Content-Type", "application/json");
    stub_request_run(request);
    end_other_mcp_session(request);
    stub_request_finish(request);
    return 0;
}
