#include "api/mcp.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/mcp_call.h"
#include "api/mcp_tools.h"
#include "common/clock.h"
#include "common/ids.h"
#include "common/log.h"
#include "common/text.h"
#include "common/version.h"

#define SESSION_IDLE_US (3600LL * 1000000) /* an hour without a request ends a session */

/* JSON-RPC error codes */
#define PARSE_ERROR -32700
#define INVALID_REQUEST -32600
#define METHOD_NOT_FOUND -32601
#define INVALID_PARAMS -32602

static const char *const supported_protocols[] = {"2025-11-25", "2025-06-18", "2025-03-26",
                                                  "2024-11-05", NULL};

typedef struct mcp_session {
    char id[UUID_STRING_LENGTH + 1];
    char protocol[16];
    char default_sandbox[64]; /* "" until a tool needs one */
    int64_t last_used_us;
    int calls_in_flight;      /* a session busy with a long call is not idle */
    struct mcp_session *next;
} mcp_session;

static mcp_session *sessions;

bool mcp_owns(const char *path) { return strcmp(path, "/mcp") == 0 || strcmp(path, "/mcp/") == 0; }

static bool is_supported(const char *protocol)
{
    for (int i = 0; protocol && supported_protocols[i]; i++)
        if (strcmp(protocol, supported_protocols[i]) == 0)
            return true;
    return false;
}

/* ---- answers ---- */

static void respond_rpc(http_request *request, int status, json_t *id, json_t *result, int code,
                        const char *message)
{
    json_t *answer = json_pack("{s:s, s:O}", "jsonrpc", "2.0", "id", id ? id : json_null());
    if (result)
        json_object_set_new(answer, "result", result);
    else
        json_object_set_new(
            answer, "error",
            json_pack("{s:i, s:o}", "code", code, "message", text_json_string(message)));
    http_respond_json(request, status, answer);
}

static void respond_rpc_error(http_request *request, int status, json_t *id, int code,
                              const char *message)
{
    respond_rpc(request, status, id, NULL, code, message);
}

/* ---- sessions ---- */

static void end_session(mcp_session *s)
{
    for (mcp_session **at = &sessions; *at; at = &(*at)->next) {
        if (*at == s) {
            *at = s->next;
            break;
        }
    }
    mcp_tools_session_ended(s->default_sandbox);
    free(s);
}

static void sweep_idle_sessions(void)
{
    int64_t now = clock_wall_us();
    for (mcp_session *s = sessions, *next; s; s = next) {
        next = s->next;
        if (s->calls_in_flight == 0 && now - s->last_used_us > SESSION_IDLE_US) {
            log_info("mcp session %s: ended after an hour without requests", s->id);
            end_session(s);
        }
    }
}

static mcp_session *find_session(const char *id)
{
    for (mcp_session *s = sessions; id && s; s = s->next)
        if (strcmp(s->id, id) == 0)
            return s;
    return NULL;
}

/* ---- tool calls that finish later ---- */

static void session_call_ended(const char *session_id)
{
    mcp_session *s = find_session(session_id);
    if (s) {
        s->calls_in_flight--;
        s->last_used_us = clock_wall_us();
    }
}

static void call_tool(http_request *request, mcp_session *session, json_t *id, json_t *params)
{
    const char *name = json_string_value(json_object_get(params, "name"));
    json_t *arguments = json_object_get(params, "arguments");
    if (!name) {
        respond_rpc_error(request, 200, id, INVALID_PARAMS, "tools/call needs params.name");
        return;
    }
    if (arguments && !json_is_null(arguments) && !json_is_object(arguments)) {
        respond_rpc_error(request, 200, id, INVALID_PARAMS, "params.arguments must be an object");
        return;
    }
    session->calls_in_flight++;
    mcp_call *call = mcp_call_start(request, id, session->id, session_call_ended);
    json_t *args = arguments && json_is_object(arguments) ? json_incref(arguments) : json_object();
    if (mcp_tools_call(call, name, args, session->default_sandbox) < 0) {
        /* An unknown tool is a protocol error, not a tool result. */
        char message[160];
        snprintf(message, sizeof message, "unknown tool '%.*s' (see tools/list)",
                 text_utf8_prefix(name, 100), name);
        mcp_call_finish_error(call, INVALID_PARAMS, message);
    }
    json_decref(args);
}

/* ---- requests ---- */

static json_t *initialize_result(json_t *params, char protocol[16])
{
    const char *asked = json_string_value(json_object_get(params, "protocolVersion"));
    snprintf(protocol, 16, "%s", is_supported(asked) ? asked : MCP_LATEST_PROTOCOL);
    return json_pack(
        "{s:s, s:{s:{s:b}}, s:{s:s, s:s, s:s}, s:s}", "protocolVersion", protocol, "capabilities",
        "tools", "listChanged", 0, "serverInfo", "name", "cellbox", "title", "cellbox sandboxes",
        "version", CELLBOX_VERSION, "instructions",
        "cellbox runs Python and shell commands in isolated, stateful sandboxes. run_code keeps "
        "variables between calls (like a notebook); charts come back as images. Without a "
        "sandbox_id, tools use this session's own sandbox, made on first use; create_sandbox makes "
        "more. Files live under /workspace.");
}

static void handle_message(http_request *request, json_t *message)
{
    json_t *id = json_object_get(message, "id");
    if (id && !json_is_string(id) && !json_is_integer(id)) {
        respond_rpc_error(request, 400, NULL, INVALID_REQUEST, "a request id must be a string or an integer");
        return;
    }
    const char *method = json_string_value(json_object_get(message, "method"));
    json_t *params = json_object_get(message, "params");
    if (!method) {
        /* A response or something else from the client: nothing to answer. */
        if (json_object_get(message, "result") || json_object_get(message, "error"))
            http_respond(request, 202, NULL, "", 0);
        else
            respond_rpc_error(request, 400, id, INVALID_REQUEST, "a JSON-RPC request needs a method");
        return;
    }
    const char *session_id = http_header(request, "Mcp-Session-Id");
    if (strcmp(method, "initialize") == 0) {
        if (!id) {
            respond_rpc_error(request, 400, NULL, INVALID_REQUEST, "initialize must be a request (with an id)");
            return;
        }
        mcp_session *s = calloc(1, sizeof *s);
        if (!s)
            die("out of memory");
        id_uuid4(s->id);
        s->last_used_us = clock_wall_us();
        json_t *result = initialize_result(params, s->protocol);
        s->next = sessions;
        sessions = s;
        http_add_response_header(request, "Mcp-Session-Id", s->id);
        respond_rpc(request, 200, id, result, 0, NULL);
        return;
    }
    mcp_session *s = find_session(session_id);
    if (!session_id) {
        respond_rpc_error(request, 400, id, INVALID_REQUEST,
                          "Bad Request: no Mcp-Session-Id header; send initialize first");
        return;
    }
    if (!s) {
        respond_rpc_error(request, 404, id, INVALID_REQUEST,
                          "Session not found: it ended; initialize a new one");
        return;
    }
    s->last_used_us = clock_wall_us();
    if (!id) { /* notifications (initialized, cancelled, ...) need no answer */
        http_respond(request, 202, NULL, "", 0);
        return;
    }
    if (strcmp(method, "ping") == 0)
        respond_rpc(request, 200, id, json_object(), 0, NULL);
    else if (strcmp(method, "tools/list") == 0)
        respond_rpc(request, 200, id, json_pack("{s:o}", "tools", mcp_tools_list()), 0, NULL);
    else if (strcmp(method, "tools/call") == 0)
        call_tool(request, s, id, params);
    else {
        char message_text[160];
        snprintf(message_text, sizeof message_text, "Method not found: %.*s",
                 text_utf8_prefix(method, 100), method);
        respond_rpc_error(request, 200, id, METHOD_NOT_FOUND, message_text);
    }
}

void mcp_dispatch(http_request *request)
{
    sweep_idle_sessions();
    const char *method = http_method(request);
    if (strcmp(method, "GET") == 0) {
        /* No server-initiated messages: there is no event stream to open. */
        http_add_response_header(request, "Allow", "POST, DELETE");
        http_respond_error(request, 405, "cellbox's MCP endpoint sends no server-initiated "
                                         "messages: use POST");
        return;
    }
    if (strcmp(method, "DELETE") == 0) {
        const char *session_id = http_header(request, "Mcp-Session-Id");
        mcp_session *s = find_session(session_id);
        if (!session_id) {
            http_respond_error(request, 400, "an Mcp-Session-Id header names the session to end");
            return;
        }
        if (!s) {
            http_respond_error(request, 404, "no such MCP session");
            return;
        }
        end_session(s);
        http_respond(request, 204, NULL, "", 0);
        return;
    }
    if (strcmp(method, "POST") != 0) {
        http_respond_method_not_allowed(request, "POST, DELETE");
        return;
    }
    const char *version = http_header(request, "MCP-Protocol-Version");
    if (version && !is_supported(version)) {
        respond_rpc_error(request, 400, NULL, INVALID_REQUEST,
                          "Bad Request: unsupported MCP-Protocol-Version");
        return;
    }
    size_t length;
    const char *body = http_body(request, &length);
    json_error_t error;
    json_t *message = json_loadb(body, length, 0, &error);
    if (!message) {
        char text[256];
        text_scrub_utf8(error.text); /* it quotes the body near the error */
        snprintf(text, sizeof text, "Parse error: %s", error.text);
        respond_rpc_error(request, 400, NULL, PARSE_ERROR, text);
        return;
    }
    if (json_is_array(message))
        respond_rpc_error(request, 400, NULL, INVALID_REQUEST,
                          "batches are not supported: send one JSON-RPC message per request");
    else if (!json_is_object(message) || !json_string_value(json_object_get(message, "jsonrpc")) ||
             strcmp(json_string_value(json_object_get(message, "jsonrpc")), "2.0") != 0)
        respond_rpc_error(request, 400, json_object_get(message, "id"), INVALID_REQUEST,
                          "not a JSON-RPC 2.0 message");
    else
        handle_message(request, message);
    json_decref(message);
}
