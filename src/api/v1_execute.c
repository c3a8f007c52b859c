/* POST /v1/sandboxes/{id}/execute: a cell run in a context, its events streamed as NDJSON (the
   shape of E2B's code-interpreter stream). A `language` without a context id runs in that
   language's default context of the sandbox (box_context_for_language). */
#include "api/v1_execute.h"

#include <stdlib.h>
#include <string.h>

#include "api/errors.h"
#include "api/request.h"
#include "common/log.h"
#include "model/execution.h"

#define NDJSON "application/x-ndjson"

/* ---- POST /v1/sandboxes/{id}/execute ---- */

typedef struct execute_call {
    http_stream *stream;
    execution *execution; /* NULL once it ended */
} execute_call;

static void execute_on_event(void *arg, json_t *event)
{
    execute_call *call = arg;
    http_stream_write_line(call->stream, json_incref(event));
}

static void execute_on_end(void *arg)
{
    execute_call *call = arg;
    call->execution = NULL;
    http_stream_end(call->stream);
}

static void execute_on_closed(void *arg, bool completed)
{
    execute_call *call = arg;
    if (call->execution)
        execution_abandon(call->execution); /* the client went away: interrupt it */
    free(call);
}

static const execution_sink execute_sink = {execute_on_event, execute_on_end};

void v1_execute(http_request *request, box *b, bool color_by_default)
{
    static const char *const fields[] = {"code",      "context_id", "language", "env_vars",
                                         "timeout_s", "color",      NULL};
    json_t *body = request_parse_body(request, fields);
    if (!body)
        return;
    const char *code = NULL, *context_id = NULL, *language = NULL;
    json_t *env_vars = NULL;
    int timeout_s = 0;
    bool color = color_by_default;
    kernel *context = NULL;
    const kernelspec *spec = NULL;
    failure_kind failure;
    char why[512];
    if (!request_optional_string(request, body, "code", &code) ||
        !request_optional_bool(request, body, "color", &color) ||
        !request_optional_string(request, body, "context_id", &context_id) ||
        !request_optional_string(request, body, "language", &language) ||
        !request_optional_string_map(request, body, "env_vars", &env_vars) ||
        !request_optional_int(request, body, "timeout_s", 0, &timeout_s)) {
        json_decref(body);
        return;
    }
    if (!code) {
        http_respond_error(request, 400, "'code' is required: the code to run");
    } else if (context_id && language) {
        http_respond_error(request, 400, "give 'context_id' or 'language', not both");
    } else if (language && !(spec = box_spec_for_language(b, language))) {
        http_respond_error(request, 400, "language '%s' is not available: use %s", language,
                           kernelspec_language_list());
    } else if (context_id && !(context = box_find_context(b, context_id))) {
        http_respond_error(request, 404, "context %s does not exist in sandbox %s", context_id,
                           box_id(b));
    } else if (spec && !(context = box_context_for_language(b, spec, &failure, why, sizeof why))) {
        http_respond_error(request, errors_status_of_failure(failure),
                           "cannot start a %s context: %s", language, why);
    } else {
        if (!context)
            context = box_default_kernel(b);
        execute_call *call = calloc(1, sizeof *call);
        if (!call)
            die("out of memory");
        call->stream = http_respond_stream(request, 200, NDJSON, execute_on_closed, call);
        execution_request run = {
            .code = code, .env_vars = env_vars, .timeout_s = timeout_s, .color = color};
        call->execution = execution_start(b, context, &run, &execute_sink, call);
    }
    json_decref(body);
}
