/* /v1/sandboxes/{id}/commands: shell commands in a sandbox, in the foreground (output streamed as
   NDJSON until exit) or the background (then listed, waited for, fed stdin, signalled). */
#include "api/v1_commands.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/errors.h"
#include "api/request.h"
#include "api/v1_ready.h"
#include "common/clock.h"
#include "common/log.h"
#include "common/loop.h"
#include "http/query.h"
#include "model/command.h"

#define NDJSON "application/x-ndjson"
#define FOREGROUND_TIMEOUT_S 60
#define MAX_WAIT_SECONDS (7 * 24 * 3600) /* the longest ?timeout_s= of a wait: a week */

/* ---- /v1/sandboxes/{id}/commands ---- */

typedef struct command_call {
    http_stream *stream;
    command *command; /* NULL once it exited */
} command_call;

static void command_on_output(void *arg, const char *stream, const char *text, size_t length)
{
    command_call *call = arg;
    char at[ISO_TIME_BUFFER];
    clock_format_iso(clock_wall_us(), at);
    http_stream_write_line(call->stream, json_pack("{s:s, s:s%, s:s}", "type", stream, "text",
                                                   text, length, "timestamp", at));
}

static void command_on_exit(void *arg, command *c)
{
    command_call *call = arg;
    json_t *model = command_model(c, false);
    json_t *event = json_pack("{s:s, s:O, s:O, s:O, s:O}", "type", "exit", "exit_code",
                              json_object_get(model, "exit_code"), "signal",
                              json_object_get(model, "signal"), "timed_out",
                              json_object_get(model, "timed_out"), "wall_ms",
                              json_object_get(model, "wall_ms"));
    if (json_object_get(model, "reason")) /* its sandbox ended it: say why */
        json_object_set(event, "reason", json_object_get(model, "reason"));
    json_decref(model);
    http_stream_write_line(call->stream, event);
    http_stream_end(call->stream);
    command_detach(c); /* forgotten: a foreground command's record ends with its stream */
    call->command = NULL;
}

static void command_on_closed(void *arg, bool completed)
{
    command_call *call = arg;
    if (call->command)
        command_detach(call->command); /* the client went away: the command is killed */
    free(call);
}

static const command_sink foreground_sink = {command_on_output, command_on_exit};

static void start_command(http_request *request, box *b)
{
    static const char *const fields[] = {"cmd", "cwd", "env", "timeout_s", "stdin", "background", NULL};
    json_t *body = request_parse_body(request, fields);
    if (!body)
        return;
    const char *cmd = NULL, *cwd = NULL, *stdin_text = NULL;
    json_t *env = NULL;
    int timeout_s = -1;
    bool background = false;
    if (!request_optional_string(request, body, "cmd", &cmd) ||
        !request_optional_string(request, body, "cwd", &cwd) ||
        !request_optional_string_map(request, body, "env", &env) ||
        !request_optional_int(request, body, "timeout_s", 0, &timeout_s) ||
        !request_optional_string(request, body, "stdin", &stdin_text) ||
        !request_optional_bool(request, body, "background", &background)) {
        json_decref(body);
        return;
    }
    if (!cmd || !*cmd) {
        http_respond_error(request, 400, "'cmd' is required: a shell command line");
        json_decref(body);
        return;
    }
    if (cwd && (cwd[0] != '/' || strstr(cwd, ".."))) {
        http_respond_error(request, 400, "'cwd' must be an absolute path without '..'");
        json_decref(body);
        return;
    }
    command_request run = {
        .cmd = cmd,
        .cwd = cwd,
        .env = env,
        .timeout_s = timeout_s >= 0 ? timeout_s : background ? 0 : FOREGROUND_TIMEOUT_S,
        .stdin_data = stdin_text,
        .stdin_length = stdin_text ? strlen(stdin_text) : 0,
        .stdin_open = background,
    };
    failure_kind failure;
    char why[512];
    if (background) {
        command *c = command_start(b, &run, NULL, NULL, &failure, why, sizeof why);
        if (c)
            http_respond_json(request, 201, command_model(c, false));
        else
            http_respond_error(request, errors_status_of_failure(failure),
                               "cannot start the command: %s", why);
        json_decref(body);
        return;
    }
    command_call *call = calloc(1, sizeof *call);
    if (!call)
        die("out of memory");
    command *c = command_start(b, &run, &foreground_sink, call, &failure, why, sizeof why);
    if (!c) {
        free(call);
        http_respond_error(request, errors_status_of_failure(failure),
                           "cannot start the command: %s", why);
        json_decref(body);
        return;
    }
    call->command = c;
    call->stream = http_respond_stream(request, 200, NDJSON, command_on_closed, call);
    json_t *model = command_model(c, false);
    http_stream_write_line(call->stream, json_pack("{s:s, s:O, s:O}", "type", "start", "id",
                                                   json_object_get(model, "id"), "pid",
                                                   json_object_get(model, "pid")));
    json_decref(model);
    json_decref(body);
}

static int parse_signal(json_t *value)
{
    if (json_is_integer(value))
        return json_integer_value(value) > 0 && json_integer_value(value) < 65
                   ? (int)json_integer_value(value) : -1;
    const char *name = json_string_value(value);
    if (!name)
        return -1;
    if (strncmp(name, "SIG", 3) == 0)
        name += 3;
    for (int n = 1; n < 32; n++)
        if (sigabbrev_np(n) && strcmp(sigabbrev_np(n), name) == 0)
            return n;
    return -1;
}

/* GET .../wait: answered when the command exits or the wait times out, whichever comes first;
   the response is held open as a stream with one JSON document in it. */
typedef struct wait_call {
    http_stream *stream;
    command *command;
    loop_timer_id timer;
} wait_call;

static void wait_answer(wait_call *call, command *c)
{
    if (call->timer)
        loop_timer_cancel(call->timer);
    call->timer = 0;
    http_stream_finish_json(call->stream, command_model(c, true));
    call->command = NULL;
}

static void wait_on_exit(void *arg, command *c) { wait_answer(arg, c); }

static void wait_on_timer(void *arg)
{
    wait_call *call = arg;
    call->timer = 0;
    command *c = call->command;
    command_unwait(c, call);
    wait_answer(call, c);
}

static void wait_on_closed(void *arg, bool completed)
{
    wait_call *call = arg;
    if (call->command)
        command_unwait(call->command, call);
    if (call->timer)
        loop_timer_cancel(call->timer);
    free(call);
}

static void wait_command(http_request *request, command *c)
{
    long long timeout_s; /* 0: wait as long as the command runs */
    if (!http_query_integer(request, "timeout_s", 0, MAX_WAIT_SECONDS, 0, &timeout_s))
        return;
    if (!command_running(c)) {
        http_respond_json(request, 200, command_model(c, true));
        return;
    }
    wait_call *call = calloc(1, sizeof *call);
    if (!call)
        die("out of memory");
    call->command = c;
    call->stream = http_respond_stream(request, 200, "application/json", wait_on_closed, call);
    if (timeout_s > 0)
        call->timer = loop_timer_add((int64_t)timeout_s * 1000, wait_on_timer, call);
    command_wait(c, wait_on_exit, call);
}

static void command_action(http_request *request, box *b, command *c, const char *action)
{
    if (strcmp(action, "wait") == 0) {
        strcmp(http_method(request), "GET") == 0 ? wait_command(request, c)
                                                 : http_respond_method_not_allowed(request, "GET");
        return;
    }
    if (strcmp(http_method(request), "POST") != 0) {
        http_respond_method_not_allowed(request, "POST");
        return;
    }
    if (strcmp(action, "stdin") == 0) {
        static const char *const fields[] = {"data", "eof", NULL};
        json_t *body = request_parse_body(request, fields);
        const char *data = "";
        bool eof = false;
        if (!body)
            return;
        if (request_optional_string(request, body, "data", &data) &&
            request_optional_bool(request, body, "eof", &eof) && v1_require_running(request, b)) {
            int written = command_write_stdin(c, data, strlen(data), eof);
            if (written == -2)
                http_respond_error(request, 409, "the command has not read the %d MiB already "
                                   "written to its stdin: write again once it reads",
                                   COMMAND_STDIN_PENDING_MAX >> 20);
            else if (written < 0)
                http_respond_error(request, 409, "the command's stdin is closed (it ended, or eof "
                                   "was sent)");
            else
                http_respond(request, 204, NULL, "", 0);
        }
        json_decref(body);
    } else if (strcmp(action, "signal") == 0) {
        static const char *const fields[] = {"signal", NULL};
        json_t *body = request_parse_body(request, fields);
        if (!body)
            return;
        int number = parse_signal(json_object_get(body, "signal"));
        if (number < 0)
            http_respond_error(request, 400, "'signal' must be a signal name (\"SIGTERM\", \"TERM\") "
                               "or number");
        else if (!command_running(c))
            http_respond_error(request, 409, "the command has already exited");
        else if (v1_require_running(request, b)) {
            command_signal(c, number);
            http_respond(request, 204, NULL, "", 0);
        }
        json_decref(body);
    } else {
        http_respond_error(request, 404, "no such command endpoint: %s", action);
    }
}

void v1_commands_route(http_request *request, box *b, char **segments, int count)
{
    /* segments[0] = "commands" */
    const char *method = http_method(request);
    if (count == 1) {
        if (strcmp(method, "GET") == 0)
            http_respond_json(request, 200, command_list_model(b));
        else if (strcmp(method, "POST") == 0) {
            if (v1_require_running(request, b))
                start_command(request, b);
        } else
            http_respond_method_not_allowed(request, "GET, POST");
        return;
    }
    command *c = command_find(b, segments[1]);
    if (!c) {
        http_respond_error(request, 404, "command %s does not exist in sandbox %s", segments[1], box_id(b));
        return;
    }
    if (count == 2) {
        if (strcmp(method, "GET") == 0) {
            http_respond_json(request, 200, command_model(c, true));
        } else if (strcmp(method, "DELETE") == 0) {
            command_forget(c);
            http_respond(request, 204, NULL, "", 0);
        } else {
            http_respond_method_not_allowed(request, "GET, DELETE");
        }
        return;
    }
    command_action(request, b, c, segments[2]);
}
