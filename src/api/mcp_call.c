#include "api/mcp_call.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>

#include "common/ids.h"
#include "common/log.h"
#include "common/text.h"

struct mcp_call {
    http_stream *stream;
    json_t *id;                              /* the JSON-RPC request's id */
    char session_id[UUID_STRING_LENGTH + 1]; /* "" once the session was told it ended */
    mcp_call_ended_fn *on_ended;
    void (*on_abandon)(void *arg);
    void *abandon_arg;
    bool finished;
};

static void tell_ended(mcp_call *call)
{
    call->on_ended(call->session_id);
    call->session_id[0] = '\0';
}

static void on_call_closed(void *arg, bool completed)
{
    mcp_call *call = arg;
    if (call->session_id[0])
        tell_ended(call);
    if (!call->finished && call->on_abandon)
        call->on_abandon(call->abandon_arg);
    json_decref(call->id);
    free(call);
}

mcp_call *mcp_call_start(http_request *request, json_t *id, const char *session_id,
                         mcp_call_ended_fn *on_ended)
{
    mcp_call *call = calloc(1, sizeof *call);
    if (!call)
        die("out of memory");
    call->id = json_incref(id);
    snprintf(call->session_id, sizeof call->session_id, "%s", session_id);
    call->on_ended = on_ended;
    call->stream = http_respond_stream(request, 200, "application/json", on_call_closed, call);
    return call;
}

void mcp_call_on_abandon(mcp_call *call, void (*on_abandon)(void *arg), void *arg)
{
    call->on_abandon = on_abandon;
    call->abandon_arg = arg;
}

void mcp_call_finish(mcp_call *call, json_t *result)
{
    if (call->finished) {
        json_decref(result);
        return;
    }
    call->finished = true;
    tell_ended(call);
    http_stream_finish_json(call->stream, json_pack("{s:s, s:O, s:o}", "jsonrpc", "2.0", "id",
                                                    call->id, "result", result));
}

void mcp_call_finish_error(mcp_call *call, int code, const char *message)
{
    if (call->finished)
        return;
    call->finished = true;
    http_stream_finish_json(call->stream,
                            json_pack("{s:s, s:O, s:{s:i, s:o}}", "jsonrpc", "2.0", "id", call->id,
                                      "error", "code", code, "message", text_json_string(message)));
}
