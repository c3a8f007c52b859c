#include "api/envd_process.h"

#include <ctype.h>
#include <openssl/evp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/envd.h"
#include "api/errors.h"
#include "common/log.h"
#include "kernel/kernel.h"
#include "model/box.h"
#include "model/command.h"
#include "sandbox/confined.h"

/* A stream whose client reads slower than the process writes stops past this many queued bytes
   (the process goes on; Connect re-attaches): the daemon's memory is not the client's buffer. */
#define STREAM_QUEUE_MAX (16u << 20)
#define MAX_ARGUMENTS 4096

/* What a process.Process call knows besides its message (connect_serve's context). */
typedef struct process_call {
    box *box;
    long long timeout_ms; /* Connect-Timeout-Ms; 0: none */
} process_call;

/* ---- bytes as protojson writes them ---- */

static json_t *base64_json(const char *bytes, size_t length)
{
    char *text = malloc(4 * ((length + 2) / 3) + 1);
    if (!text)
        die("out of memory");
    int n = EVP_EncodeBlock((unsigned char *)text, (const unsigned char *)bytes, (int)length);
    json_t *value = json_stringn(text, (size_t)n);
    free(text);
    return value;
}

/* The bytes of a base64 field (standard or URL alphabet, padded or not, as protojson accepts);
   NULL with the error set. The caller frees them. */
static unsigned char *base64_field(json_t *value, const char *field, size_t *length,
                                   connect_error *error)
{
    if (!json_is_string(value)) {
        connect_fail(error, "invalid_argument", "'%s' must be a base64 string (protojson bytes)",
                     field);
        return NULL;
    }
    size_t size = json_string_length(value);
    char *text = malloc(size + 4);
    unsigned char *bytes = malloc(size + 4);
    if (!text || !bytes)
        die("out of memory");
    memcpy(text, json_string_value(value), size);
    for (size_t i = 0; i < size; i++)
        text[i] = text[i] == '-' ? '+' : text[i] == '_' ? '/' : text[i];
    while (size % 4)
        text[size++] = '=';
    int decoded = size ? EVP_DecodeBlock(bytes, (unsigned char *)text, (int)size) : 0;
    size_t padding = 0;
    for (size_t i = size; i > 0 && text[i - 1] == '=' && padding < 2; i--)
        padding++;
    free(text);
    if (decoded < 0 || (size_t)decoded < padding) {
        free(bytes);
        connect_fail(error, "invalid_argument", "'%s' is not valid base64", field);
        return NULL;
    }
    *length = (size_t)decoded - padding;
    return bytes;
}

/* ---- finding a process ---- */

/* The running process a ProcessSelector ({pid} or {tag}) names; NULL with the error set. An
   exited one is not found, as in envd, whose table drops a process when it ends. */
static command *selected_process(box *b, json_t *message, connect_error *error)
{
    json_t *selector = json_object_get(message, "process");
    const char *tag = NULL;
    unsigned pid = 0;
    if (!json_is_object(selector)) {
        connect_fail(error, "invalid_argument",
                     "'process' is required: a selector {\"pid\": N} or {\"tag\": \"name\"}");
        return NULL;
    }
    if (!connect_uint32_field(selector, "pid", &pid, error) ||
        !connect_string_field(selector, "tag", &tag, error))
        return NULL;
    command *c = tag ? command_find_tag(b, tag) : pid ? command_find_pid(b, (int)pid) : NULL;
    if (c && command_running(c))
        return c;
    if (tag)
        connect_fail(error, "not_found",
                     "process with tag %s not found: it has exited or never ran (commands.list "
                     "shows the running ones)",
                     tag);
    else if (pid)
        connect_fail(error, "not_found",
                     "process with pid %u not found: it has exited or never ran (commands.list "
                     "shows the running ones)",
                     pid);
    else
        connect_fail(error, "invalid_argument",
                     "'process' must name a pid or a tag: {\"pid\": N} or {\"tag\": \"name\"}");
    return NULL;
}

/* ---- the event stream ---- */

typedef struct process_stream {
    connect_stream *stream;
    command *command;
} process_stream;

static void send_event(connect_stream *stream, const char *kind, json_t *body)
{
    connect_stream_send(stream, json_pack("{s:{s:o}}", "event", kind, body));
}

static void on_stream_cancelled(void *arg)
{
    process_stream *ps = arg;
    command_unwatch(ps->command, ps); /* the process goes on, as envd's does */
    free(ps);
}

static void on_process_data(void *arg, const char *stream_name, const char *bytes, size_t length)
{
    process_stream *ps = arg;
    if (connect_stream_queued(ps->stream) > STREAM_QUEUE_MAX) {
        connect_error error = {.code = "resource_exhausted"};
        snprintf(error.message, sizeof error.message,
                 "process %d writes faster than this client reads (%u MiB queued): the process "
                 "goes on; reconnect with commands.connect(%d) to follow it from now",
                 command_sandbox_pid(ps->command), STREAM_QUEUE_MAX >> 20,
                 command_sandbox_pid(ps->command));
        connect_stream_end(ps->stream, &error);
        command_unwatch(ps->command, ps);
        free(ps);
        return;
    }
    send_event(ps->stream, "data", json_pack("{s:o}", stream_name, base64_json(bytes, length)));
}

/* The end event as envd writes it from Go's os.ProcessState: "exit status N" with exited true,
   or "signal: killed" with exitCode -1; error repeats a failure's status. */
static json_t *end_event(command *c)
{
    int exit_code = 0, signal_number = 0;
    if (!command_end_status(c, &exit_code, &signal_number))
        return json_pack("{s:i, s:b, s:s, s:s}", "exitCode", -1, "exited", false, "status",
                         "unknown", "error",
                         "the process was adopted after a restart of cellboxd: its exit status "
                         "went to the sandbox's init");
    char status[128];
    if (signal_number) {
        const char *name = sigdescr_np(signal_number);
        snprintf(status, sizeof status, "signal: %s", name ? name : "unknown signal");
        status[8] = (char)tolower((unsigned char)status[8]); /* Go's words: "killed" */
        exit_code = -1;
    } else {
        snprintf(status, sizeof status, "exit status %d", exit_code);
    }
    json_t *end = json_pack("{s:i, s:b, s:s}", "exitCode", exit_code, "exited", signal_number == 0,
                            "status", status);
    const char *reason = command_end_reason(c);
    if (reason) /* its sandbox ended it: say why */
        json_object_set_new(end, "error", json_sprintf("%s (%s)", status, reason));
    else if (signal_number || exit_code != 0)
        json_object_set_new(end, "error", json_string(status));
    return end;
}

static void on_process_exit(void *arg, command *c)
{
    process_stream *ps = arg;
    send_event(ps->stream, "end", end_event(c));
    connect_stream_end(ps->stream, NULL);
    free(ps);
}

static const command_watcher stream_watcher = {on_process_data, on_process_exit};

/* The start event with its pid, then everything it prints from now on, then its end. */
static void follow(command *c, connect_stream *stream)
{
    process_stream *ps = calloc(1, sizeof *ps);
    if (!ps)
        die("out of memory");
    ps->stream = stream;
    ps->command = c;
    send_event(stream, "start", json_pack("{s:i}", "pid", command_sandbox_pid(c)));
    connect_stream_on_cancel(stream, on_stream_cancelled, ps);
    command_watch(c, &stream_watcher, ps);
}

/* ---- Start ---- */

/* argv: cmd, then args; false with the error set. */
static json_t *program_of(json_t *config, connect_error *error)
{
    const char *cmd = NULL;
    if (!connect_string_field(config, "cmd", &cmd, error))
        return NULL;
    if (!cmd || !*cmd)
        return connect_fail(error, "invalid_argument",
                            "'process.cmd' is required: the program to run, e.g. \"/bin/bash\"");
    json_t *args = json_object_get(config, "args");
    if (args && !json_is_null(args) && !json_is_array(args))
        return connect_fail(error, "invalid_argument", "'process.args' must be a list of strings");
    if (json_array_size(args) >= MAX_ARGUMENTS)
        return connect_fail(error, "invalid_argument",
                            "'process.args' has %zu arguments: at most %d are taken",
                            json_array_size(args), MAX_ARGUMENTS - 1);
    json_t *argv = json_pack("[s]", cmd);
    size_t i;
    json_t *arg;
    json_array_foreach(args, i, arg)
    {
        if (!json_is_string(arg)) {
            json_decref(argv);
            return connect_fail(error, "invalid_argument",
                                "'process.args' must be a list of strings (item %zu is not)", i);
        }
        json_array_append(argv, arg);
    }
    return argv;
}

static bool envs_of(json_t *config, json_t **envs, connect_error *error)
{
    json_t *value = json_object_get(config, "envs");
    if (!value || json_is_null(value))
        return true;
    const char *key;
    json_t *item;
    bool strings = json_is_object(value);
    json_object_foreach(value, key, item) strings = strings && json_is_string(item);
    if (!strings) {
        connect_fail(error, "invalid_argument",
                     "'process.envs' must map names to strings, e.g. {\"NAME\": \"value\"}");
        return false;
    }
    *envs = value;
    return true;
}

/* Where a command starts when it names no cwd: where the sandbox's default context works (a
   template's WORKDIR), else the user's home, as E2B's envd does. */
static const char *default_working_directory(const box *b)
{
    const kernel *k = box_default_kernel(b);
    const char *path = k ? kernel_working_directory(k) : NULL;
    return path ? path : ENVD_HOME_DIR;
}

/* The working directory: envd's cwd, relative to the user's home, which must be a directory
   inside the sandbox (checked through the confined file code); false with the error set. */
static bool working_directory(box *b, json_t *config, char *out, size_t size, connect_error *error)
{
    const char *cwd = NULL;
    if (!connect_string_field(config, "cwd", &cwd, error))
        return false;
    if (!cwd || !*cwd) /* where the sandbox's default context works: a template's WORKDIR */
        cwd = default_working_directory(b);
    int n = cwd[0] == '/' ? snprintf(out, size, "%s", cwd)
                          : snprintf(out, size, "%s/%s", ENVD_HOME_DIR, cwd);
    if (n < 0 || (size_t)n >= size) {
        connect_fail(error, "invalid_argument", "'process.cwd' is longer than %zu bytes", size - 1);
        return false;
    }
    confined c;
    char why[256];
    if (!box_open_files(b, &c, why, sizeof why)) {
        connect_fail(error, "failed_precondition", "%s", why);
        return false;
    }
    json_t *entry = confined_stat(&c, out);
    const char *type = json_string_value(json_object_get(entry, "type"));
    /* a link is left to the process's own chdir, which follows it inside the sandbox */
    bool directory = type && (strcmp(type, "dir") == 0 || strcmp(type, "symlink") == 0);
    json_decref(entry);
    box_close_files(&c);
    if (!directory)
        connect_fail(error, "invalid_argument",
                     "cwd '%s' does not exist or is not a directory: create it first "
                     "(files.makeDir) or omit cwd to start in %s",
                     out, ENVD_HOME_DIR);
    return directory;
}

/* The terminal's size from pty.size; false with the error set. */
static bool terminal_size(json_t *pty, unsigned *columns, unsigned *rows, connect_error *error)
{
    json_t *size = json_object_get(pty, "size");
    if (size && !json_is_null(size) && !json_is_object(size)) {
        connect_fail(error, "invalid_argument", "'pty.size' must be {\"cols\": N, \"rows\": N}");
        return false;
    }
    if (!connect_uint32_field(size, "cols", columns, error) ||
        !connect_uint32_field(size, "rows", rows, error))
        return false;
    if (*columns > 0xffff || *rows > 0xffff) {
        connect_fail(error, "invalid_argument",
                     "'pty.size' of %u x %u is too large: cols and rows go up to 65535", *columns,
                     *rows);
        return false;
    }
    return true;
}

static void start_process(void *context, json_t *message, connect_stream *stream)
{
    process_call *call = context;
    connect_error error = {0};
    json_t *config = json_object_get(message, "process");
    json_t *pty = json_object_get(message, "pty");
    json_t *stdin_flag = json_object_get(message, "stdin");
    json_t *argv = NULL, *envs = NULL;
    const char *tag = NULL;
    char cwd[4096];
    command_request request = {.timeout_ms = call->timeout_ms};
    if (box_get_state(call->box) == BOX_PAUSED) {
        /* a process joining a frozen cgroup would freeze on the way in */
        connect_fail(&error, "failed_precondition",
                     "sandbox %s is paused: resume it (Sandbox.connect) before starting processes",
                     box_id(call->box));
    } else if (!json_is_object(config)) {
        connect_fail(&error, "invalid_argument",
                     "'process' is required: {\"cmd\": \"/bin/bash\", \"args\": [...]}");
    } else if ((argv = program_of(config, &error)) && envs_of(config, &envs, &error) &&
               connect_string_field(message, "tag", &tag, &error) &&
               (!json_is_object(pty) ||
                terminal_size(pty, &request.columns, &request.rows, &error)) &&
               working_directory(call->box, config, cwd, sizeof cwd, &error)) {
        request.argv = argv;
        request.env = envs;
        request.cwd = cwd;
        request.tag = tag;
        request.terminal = json_is_object(pty);
        /* stdin is a pipe unless the request says false, as envd keeps it for older SDKs */
        request.stdin_open = !json_is_false(stdin_flag);
        failure_kind failure;
        char why[512];
        command *c = command_start(call->box, &request, NULL, NULL, &failure, why, sizeof why);
        json_decref(argv);
        if (c) {
            follow(c, stream);
            return;
        }
        connect_fail(&error, errors_connect_code_of_failure(failure), "cannot start %s: %s",
                     json_string_value(json_object_get(config, "cmd")), why);
    }
    json_decref(argv);
    connect_stream_end(stream, &error);
}

/* ---- Connect ---- */

static void connect_process(void *context, json_t *message, connect_stream *stream)
{
    process_call *call = context;
    connect_error error = {0};
    command *c = selected_process(call->box, message, &error);
    if (c)
        follow(c, stream);
    else
        connect_stream_end(stream, &error);
}

/* ---- the unary methods ---- */

static json_t *process_info(command *c)
{
    json_t *argv = command_argv(c);
    json_t *args = json_array();
    for (size_t i = 1; i < json_array_size(argv); i++)
        json_array_append(args, json_array_get(argv, i));
    json_t *info = json_pack("{s:{s:O, s:o, s:O, s:s}, s:i}", "config", "cmd",
                             json_array_get(argv, 0), "args", args, "envs", command_env(c), "cwd",
                             command_cwd(c), "pid", command_sandbox_pid(c));
    if (command_tag(c))
        json_object_set_new(info, "tag", json_string(command_tag(c)));
    return info;
}

static json_t *list_processes(void *context, json_t *message, connect_error *error)
{
    process_call *call = context;
    json_t *processes = json_array();
    for (command *c = command_next(call->box, NULL); c; c = command_next(call->box, c))
        if (command_running(c))
            json_array_insert_new(processes, 0, process_info(c)); /* oldest first */
    return json_pack("{s:o}", "processes", processes);
}

/* Writes `input` ({stdin} or {pty}, base64) to the process; false with the error set. */
static bool write_input(command *c, json_t *input, connect_error *error)
{
    json_t *to_stdin = json_object_get(input, "stdin"), *to_pty = json_object_get(input, "pty");
    bool terminal = command_has_terminal(c);
    if (!json_is_object(input) || (!to_stdin && !to_pty)) {
        connect_fail(error, "invalid_argument",
                     "'input' is required: {\"stdin\": base64} or {\"pty\": base64}");
        return false;
    }
    if (to_pty && !terminal) {
        connect_fail(error, "failed_precondition",
                     "process %d has no terminal: send its input as stdin (commands.sendStdin)",
                     command_sandbox_pid(c));
        return false;
    }
    if (!to_pty && terminal) {
        connect_fail(error, "failed_precondition",
                     "process %d runs on a terminal: send its input as pty (pty.sendInput)",
                     command_sandbox_pid(c));
        return false;
    }
    size_t length = 0;
    unsigned char *bytes = base64_field(to_pty ? to_pty : to_stdin,
                                        to_pty ? "input.pty" : "input.stdin", &length, error);
    if (!bytes)
        return false;
    int written = command_write_stdin(c, (const char *)bytes, length, false);
    free(bytes);
    if (written == -2)
        connect_fail(error, "resource_exhausted",
                     "process %d has not read the %d MiB already sent to its input: send more "
                     "once it reads",
                     command_sandbox_pid(c), COMMAND_STDIN_PENDING_MAX >> 20);
    else if (written < 0)
        connect_fail(error, "failed_precondition",
                     "the stdin of process %d is closed: start it with stdin: true to write to it, "
                     "and write before closeStdin",
                     command_sandbox_pid(c));
    return written == 0;
}

static json_t *send_input(void *context, json_t *message, connect_error *error)
{
    process_call *call = context;
    command *c = selected_process(call->box, message, error);
    return c && write_input(c, json_object_get(message, "input"), error) ? json_object() : NULL;
}

/* Signal is an enum: its name, or its number as protojson also accepts. */
static int signal_of(json_t *value)
{
    const char *name = json_string_value(value);
    json_int_t number = json_is_integer(value) ? json_integer_value(value) : -1;
    if ((name && strcmp(name, "SIGNAL_SIGKILL") == 0) || number == SIGKILL)
        return SIGKILL;
    if ((name && strcmp(name, "SIGNAL_SIGTERM") == 0) || number == SIGTERM)
        return SIGTERM;
    return 0;
}

static json_t *send_signal(void *context, json_t *message, connect_error *error)
{
    process_call *call = context;
    command *c = selected_process(call->box, message, error);
    if (!c)
        return NULL;
    int signal_number = signal_of(json_object_get(message, "signal"));
    if (!signal_number)
        return connect_fail(error, "invalid_argument",
                            "'signal' must be SIGNAL_SIGTERM or SIGNAL_SIGKILL");
    command_signal(c, signal_number);
    return json_object();
}

static json_t *close_stdin(void *context, json_t *message, connect_error *error)
{
    process_call *call = context;
    command *c = selected_process(call->box, message, error);
    if (!c)
        return NULL;
    if (command_has_terminal(c))
        return connect_fail(error, "failed_precondition",
                            "cannot close stdin of process %d: it runs on a terminal; send "
                            "Ctrl+D (0x04) as pty input instead",
                            command_sandbox_pid(c));
    if (command_stdin_open(c))
        command_write_stdin(c, "", 0, true);
    return json_object(); /* closing a closed stdin is no error, as in envd */
}

static json_t *update_process(void *context, json_t *message, connect_error *error)
{
    process_call *call = context;
    command *c = selected_process(call->box, message, error);
    json_t *pty = json_object_get(message, "pty");
    unsigned columns = 0, rows = 0;
    if (!c || (json_is_object(pty) && !terminal_size(pty, &columns, &rows, error)))
        return NULL;
    if (!json_is_object(pty))
        return json_object(); /* nothing to change */
    if (!command_has_terminal(c))
        return connect_fail(error, "failed_precondition",
                            "process %d has no terminal to resize: only processes started with "
                            "pty (pty.create) have one",
                            command_sandbox_pid(c));
    if (command_resize(c, columns, rows) < 0)
        return connect_fail(error, "internal", "cannot resize the terminal of process %d",
                            command_sandbox_pid(c));
    return json_object();
}

/* ---- StreamInput ---- */

typedef struct input_call {
    box *box;
    int pid; /* the process the start event named; 0 until then */
} input_call;

static void *open_input(void *context, connect_error *error)
{
    process_call *call = context;
    input_call *input = calloc(1, sizeof *input);
    if (!input)
        die("out of memory");
    input->box = call->box;
    return input;
}

/* {start: {process}}, then {data: {input}}..., with {keepalive: {}} in between. The process is
   looked up again for each message: it may have exited meanwhile. */
static bool on_input_message(void *state, json_t *message, connect_error *error)
{
    input_call *input = state;
    json_t *start = json_object_get(message, "start"), *data = json_object_get(message, "data");
    if (json_is_object(start)) {
        command *c = selected_process(input->box, start, error);
        input->pid = c ? command_sandbox_pid(c) : 0;
        return c != NULL;
    }
    if (json_is_object(data)) {
        command *c = input->pid ? command_find_pid(input->box, input->pid) : NULL;
        if (!input->pid)
            connect_fail(error, "invalid_argument",
                         "the first message must be {\"start\": {\"process\": {\"pid\": N}}}");
        else if (!c || !command_running(c))
            connect_fail(error, "not_found", "process with pid %d not found: it has exited",
                         input->pid);
        return c && command_running(c) && write_input(c, json_object_get(data, "input"), error);
    }
    return true; /* keepalive */
}

static json_t *on_input_end(void *state, connect_error *error)
{
    return json_object();
}

static void close_input(void *state)
{
    free(state);
}

static const connect_client_streaming stream_input = {open_input, on_input_message, on_input_end,
                                                      close_input};

/* ---- the service ---- */

#define KEEPALIVE_EVENT "{\"event\":{\"keepalive\":{}}}"

static const connect_method process_methods[] = {
    {.name = "Start", .server_streaming = start_process, .keepalive = KEEPALIVE_EVENT},
    {.name = "Connect", .server_streaming = connect_process, .keepalive = KEEPALIVE_EVENT},
    {.name = "List", .unary = list_processes},
    {.name = "SendInput", .unary = send_input},
    {.name = "SendSignal", .unary = send_signal},
    {.name = "CloseStdin", .unary = close_stdin},
    {.name = "Update", .unary = update_process},
    {.name = "StreamInput", .client_streaming = &stream_input},
    {.name = NULL},
};

const connect_service envd_process_service = {ENVD_PROCESS_SERVICE, process_methods};

void envd_process_serve(http_request *request, box *b, const char *method)
{
    static const connect_service *const services[] = {&envd_process_service, NULL};
    const char *timeout = http_header(request, "Connect-Timeout-Ms");
    process_call call = {.box = b, .timeout_ms = timeout ? strtoll(timeout, NULL, 10) : 0};
    connect_serve(request, services, ENVD_PROCESS_SERVICE, method, &call);
}
