/* kernel_bash — the Bash kernel's requests (see kernel_bash.h, docs/languages.md "Bash").
 *
 * The daemon's frames come in on the channel; each request is answered inside busy/idle, and
 * the work that needs the shell (a cell, a completion, an environment frame) becomes a file the
 * one bash sources (bash_shell.c, which knows how bash runs it and how an interrupt reaches it).
 * Frames that arrive while bash runs are kept in order for after. */
#include "runtime/kernel_bash.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "runtime/bash_shell.h"
#include "runtime/jupyter_message.h"
#include "runtime/kernel_channel.h"

#define BASH_PATH "/bin/bash"

extern char **environ;

enum {
    SYNTAX_CHECK_WAIT_MS = 5 * 1000, /* `bash -n` on a cell's text */
    INTERRUPTED_STATUS = 130,        /* 128 + SIGINT: what bash reports for an interrupted line */
};

struct bash_kernel {
    kernel_channel *channel; /* the daemon's */
    jupyter_session session;
    bash_shell shell;             /* the one bash */
    bash_shell_listener listener; /* the channel, read while bash runs a line */
    int execution_count;
    json_t *pending;       /* frames read from the daemon, not yet handled */
    const json_t *current; /* the request being handled (NULL between requests) */
    size_t abort_window;   /* after a failed cell: how many waiting frames its error aborts */
};

/* How handling a request ended: REPORTED (go on), SHELL_ENDED or DAEMON_GONE (the kernel ends). */
enum wait_result {
    REPORTED = BASH_SHELL_REPORTED,
    SHELL_ENDED = BASH_SHELL_ENDED,
    DAEMON_GONE = BASH_SHELL_DAEMON_GONE,
};

/* ---------------------------------------------------------------- the daemon's frames */

static void keep_frame(void *arg, json_t *frame)
{
    struct bash_kernel *kernel = arg;
    json_array_append(kernel->pending, frame);
}

static int send_frame(struct bash_kernel *kernel, json_t *frame)
{
    int result = kernel_channel_send(kernel->channel, frame);
    json_decref(frame);
    return result;
}

static void announce_after_switch(void *arg)
{
    struct bash_kernel *kernel = arg;
    (void)send_frame(kernel, jupyter_message_status(&kernel->session, kernel->current,
                                                    kernel->current ? "busy" : "idle"));
}

static int read_channel(struct bash_kernel *kernel)
{
    return kernel_channel_read(kernel->channel, keep_frame, announce_after_switch, kernel);
}

static int on_channel_readable(void *arg)
{
    return read_channel(arg);
}

/* Has bash source `text` as the file `name` (bash_shell_run). */
static enum wait_result run_in_shell(struct bash_kernel *kernel, const char *name, const char *text,
                                     size_t length, const char *assignments, bool is_cell,
                                     int *status)
{
    return (enum wait_result)bash_shell_run(&kernel->shell, name, text, length, assignments,
                                            is_cell, status, &kernel->listener);
}

static const char *message_type(const json_t *frame)
{
    const char *type =
        json_string_value(json_object_get(json_object_get(frame, "header"), "msg_type"));
    return type ? type : "";
}

/* ---------------------------------------------------------------- words for bash */

/* A word bash reads as exactly `text`: single quotes, each ' written as '\''. */
static void append_quoted(FILE *stream, const char *text)
{
    fputc('\'', stream);
    for (const char *c = text; *c; c++) {
        if (*c == '\'')
            fputs("'\\''", stream);
        else
            fputc(*c, stream);
    }
    fputc('\'', stream);
}

static bool is_variable_name(const char *name)
{
    if (!(name[0] == '_' || (name[0] >= 'A' && name[0] <= 'Z') ||
          (name[0] >= 'a' && name[0] <= 'z')))
        return false;
    for (const char *c = name + 1; *c; c++)
        if (!(*c == '_' || (*c >= 'A' && *c <= 'Z') || (*c >= 'a' && *c <= 'z') ||
              (*c >= '0' && *c <= '9')))
            return false;
    return true;
}

/* "NAME='value' ..." for a request's metadata.cellbox.env (a /v1 execute's variables, for that
 * execution only: bash keeps assignments written before `.` for the one command). */
static char *request_assignments(const json_t *request)
{
    json_t *env =
        json_object_get(json_object_get(json_object_get(request, "metadata"), "cellbox"), "env");
    char *text = NULL;
    size_t length = 0;
    FILE *stream = open_memstream(&text, &length);
    if (stream == NULL)
        return NULL;
    const char *name;
    json_t *value;
    json_object_foreach(env, name, value)
    {
        if (!is_variable_name(name) || !json_is_string(value))
            continue;
        fprintf(stream, "%s=", name);
        append_quoted(stream, json_string_value(value));
        fputc(' ', stream);
    }
    fclose(stream);
    /* Bash reads command lines: a newline inside a value ends one in the middle. */
    if (strchr(text, '\n') != NULL) {
        fprintf(stderr, "cellbox-kernel: a request variable's value holds a newline; bash "
                        "kernels take single-line values only (it was left out)\n");
        text[0] = '\0';
    }
    return text;
}

/* ---------------------------------------------------------------- starting and ending */

/* ---------------------------------------------------------------- requests */

static int send_reply(struct bash_kernel *kernel, const json_t *request, json_t *content)
{
    const char *type = message_type(request);
    char reply_type[64];
    size_t base = strlen(type) > 8 ? strlen(type) - 8 : 0; /* "_request" */
    snprintf(reply_type, sizeof reply_type, "%.*s_reply", (int)base, type);
    const char *channel = json_string_value(json_object_get(request, "channel"));
    return send_frame(kernel, jupyter_message_new(&kernel->session, channel ? channel : "shell",
                                                  reply_type, request, content));
}

static void send_error(struct bash_kernel *kernel, const json_t *request, const char *name,
                       const char *value, const char *explanation)
{
    json_t *content =
        json_pack("{s:s, s:s, s:[s]}", "ename", name, "evalue", value, "traceback", explanation);
    (void)send_frame(kernel,
                     jupyter_message_new(&kernel->session, "iopub", "error", request, content));
    (void)send_reply(kernel, request,
                     json_pack("{s:s, s:i, s:s, s:s, s:[s], s:{}, s:[]}", "status", "error",
                               "execution_count", kernel->execution_count, "ename", name, "evalue",
                               value, "traceback", explanation, "user_expressions", "payload"));
}

/* An execute_request. DAEMON_GONE and SHELL_ENDED end the kernel (the caller does). */
static enum wait_result execute(struct bash_kernel *kernel, const json_t *request)
{
    json_t *content = json_object_get(request, "content");
    const char *code = json_string_value(json_object_get(content, "code"));
    bool silent = json_is_true(json_object_get(content, "silent"));
    json_t *store = json_object_get(content, "store_history");
    json_t *stop = json_object_get(content, "stop_on_error");
    bool store_history = !silent && (store == NULL || json_is_true(store));
    bool stop_on_error = stop == NULL || json_is_true(stop);
    if (code == NULL)
        code = "";
    if (store_history)
        kernel->execution_count++;
    if (!silent)
        (void)send_frame(
            kernel, jupyter_message_new(&kernel->session, "iopub", "execute_input", request,
                                        json_pack("{s:s, s:i}", "code", code, "execution_count",
                                                  kernel->execution_count)));
    char *assignments = request_assignments(request);
    int status = 0;
    enum wait_result result = run_in_shell(kernel, "cell.sh", code, strlen(code),
                                           assignments ? assignments : "", true, &status);
    free(assignments);
    if (result == SHELL_ENDED) {
        char why[128];
        bash_shell_describe_end(&kernel->shell, why, sizeof why);
        send_error(kernel, request, "ShellExited", why,
                   "The shell exited, and the kernel with it: start a new context to go on.");
        return SHELL_ENDED;
    }
    if (result == DAEMON_GONE)
        return DAEMON_GONE;
    if (status == 0) {
        (void)send_reply(kernel, request,
                         json_pack("{s:s, s:i, s:{}, s:[]}", "status", "ok", "execution_count",
                                   kernel->execution_count, "user_expressions", "payload"));
        return REPORTED;
    }
    char value[16], explanation[128];
    snprintf(value, sizeof value, "%d", status);
    if (status == INTERRUPTED_STATUS) {
        snprintf(explanation, sizeof explanation, "The cell was interrupted (exit status %d).",
                 status);
        send_error(kernel, request, "Interrupted", value, explanation);
    } else {
        snprintf(explanation, sizeof explanation, "The cell's last command exited with status %d.",
                 status);
        send_error(kernel, request, "ExitStatus", value, explanation);
    }
    if (stop_on_error) {
        /* The execute_requests already waiting are answered `aborted`, each inside its own
         * busy/idle (docs/kernel-protocol.md); those sent after this error are not. */
        (void)read_channel(kernel);
        kernel->abort_window = json_array_size(kernel->pending);
    }
    return REPORTED;
}

static json_t *kernel_info(const struct bash_kernel *kernel)
{
    char banner[128];
    snprintf(banner, sizeof banner, "GNU bash %s (cellbox)", kernel->shell.version);
    return json_pack("{s:s, s:s, s:s, s:s, s:{s:s, s:s, s:s, s:s, s:s}, s:s, s:[]}", "status", "ok",
                     "protocol_version", "5.3", "implementation", "cellbox-bash",
                     "implementation_version", "1.0", "language_info", "name", "bash", "version",
                     kernel->shell.version, "mimetype", "text/x-sh", "file_extension", ".sh",
                     "codemirror_mode", "shell", "banner", banner, "help_links");
}

/* is_complete_request: `bash -n` on the text, in a process of its own (a cell is never run to
 * find out). "incomplete" when bash ran out of text (an open quote, `if` without `fi`). */
static json_t *is_complete(struct bash_kernel *kernel, const json_t *request)
{
    const char *code =
        json_string_value(json_object_get(json_object_get(request, "content"), "code"));
    char path[128];
    int errors[2];
    if (code == NULL ||
        bash_shell_write_file(&kernel->shell, "check.sh", code, strlen(code), path, sizeof path) ||
        pipe2(errors, O_CLOEXEC))
        return json_pack("{s:s}", "status", "unknown");
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0);
    posix_spawn_file_actions_adddup2(&actions, errors[1], 2);
    char *argv[] = {BASH_PATH, "--noprofile", "--norc", "-n", path, NULL};
    pid_t pid = -1;
    int spawned = posix_spawn(&pid, BASH_PATH, &actions, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&actions);
    close(errors[1]);
    char text[4096];
    size_t used = 0;
    struct pollfd readable = {.fd = errors[0], .events = POLLIN};
    while (spawned == 0 && used < sizeof text - 1 && poll(&readable, 1, SYNTAX_CHECK_WAIT_MS) > 0) {
        ssize_t got = read(errors[0], text + used, sizeof text - 1 - used);
        if (got <= 0)
            break;
        used += (size_t)got;
    }
    text[used] = '\0';
    close(errors[0]);
    int status = -1;
    if (spawned == 0) {
        kill(pid, SIGKILL); /* already gone, or stuck past the wait */
        (void)waitpid(pid, &status, 0);
    }
    if (spawned != 0 || !WIFEXITED(status))
        return json_pack("{s:s}", "status", "unknown");
    if (WEXITSTATUS(status) == 0)
        return json_pack("{s:s}", "status", "complete");
    if (strstr(text, "unexpected end of file") != NULL || strstr(text, "unexpected EOF") != NULL)
        return json_pack("{s:s, s:s}", "status", "incomplete", "indent", "");
    return json_pack("{s:s}", "status", "invalid");
}

/* ---------------------------------------------------------------- completion */

enum { MAX_COMPLETIONS = 200 };

/* The byte offset of code point `cursor` in UTF-8 `code` (Jupyter counts cursors in code
 * points); the text's length when the cursor is past its end. */
static size_t byte_offset(const char *code, json_int_t cursor)
{
    size_t offset = 0;
    for (json_int_t points = 0; code[offset] != '\0'; offset++) {
        if (((unsigned char)code[offset] & 0xc0) != 0x80 && points++ == cursor)
            break;
    }
    return offset;
}

static json_int_t code_points(const char *text, size_t length)
{
    json_int_t points = 0;
    for (size_t i = 0; i < length; i++)
        points += ((unsigned char)text[i] & 0xc0) != 0x80;
    return points;
}

/* Which compgen actions complete `word`: variables after `$`, paths once there is a `/`, a
 * command's name in command position, files for its arguments. */
static const char *completion_actions(const char *code, size_t word_start, const char *word)
{
    if (word[0] == '$')
        return "-v";
    if (strchr(word, '/') != NULL)
        return "-f";
    size_t before = word_start;
    while (before > 0 && (code[before - 1] == ' ' || code[before - 1] == '\t'))
        before--;
    if (before == 0 || strchr(";|&(\n", code[before - 1]) != NULL)
        return "-c";
    return "-f";
}

/* complete_request: compgen, run by the kernel's own shell (its functions, variables, aliases
 * and cwd are what complete), its answer written to a file in the private directory, never to
 * the output pipes. */
static json_t *complete(struct bash_kernel *kernel, const json_t *request, enum wait_result *result)
{
    json_t *content = json_object_get(request, "content");
    const char *code = json_string_value(json_object_get(content, "code"));
    json_int_t cursor = json_integer_value(json_object_get(content, "cursor_pos"));
    if (code == NULL)
        code = "";
    size_t end = byte_offset(code, cursor);
    size_t start = end;
    while (start > 0 && strchr(" \t\n;|&<>()'\"=`", code[start - 1]) == NULL)
        start--;
    char word[256];
    snprintf(word, sizeof word, "%.*s", (int)(end - start), code + start);
    json_t *matches = json_array();
    json_int_t cursor_start = code_points(code, start), cursor_end = code_points(code, end);
    if (end - start < sizeof word - 1) {
        const char *actions = completion_actions(code, start, word);
        const char *prefix = word[0] == '$' ? "$" : "";
        char *text = NULL;
        size_t length = 0;
        FILE *stream = open_memstream(&text, &length);
        if (stream != NULL) {
            fprintf(stream, "builtin compgen %s -- ", actions);
            append_quoted(stream, word + strlen(prefix));
            fprintf(stream, " 2>/dev/null | LC_ALL=C sort -u | head -n %d >'%s/completions'\n",
                    MAX_COMPLETIONS, kernel->shell.directory);
            fclose(stream);
            int status = 0;
            *result = run_in_shell(kernel, "complete.sh", text, length, "", false, &status);
            free(text);
        }
        char path[128], line[4096];
        snprintf(path, sizeof path, "%s/completions", kernel->shell.directory);
        FILE *found = *result == REPORTED ? fopen(path, "re") : NULL;
        while (found != NULL && fgets(line, sizeof line, found) != NULL) {
            line[strcspn(line, "\n")] = '\0';
            char match[4352];
            snprintf(match, sizeof match, "%s%s", prefix, line);
            json_array_append_new(matches, json_string(match));
        }
        if (found != NULL)
            fclose(found);
        (void)unlink(path);
    }
    return json_pack("{s:s, s:o, s:I, s:I, s:{}}", "status", "ok", "matches", matches,
                     "cursor_start", cursor_start, "cursor_end", cursor_end, "metadata");
}

/* The daemon's own command: a pooled kernel takes on its request's variables and directory. */
static enum wait_result apply_environment(struct bash_kernel *kernel, const json_t *frame)
{
    if (strcmp(json_string_value(json_object_get(frame, "type")) ?: "", "environment") != 0)
        return REPORTED; /* a kernel ignores the types it does not know */
    char *text = NULL;
    size_t length = 0;
    FILE *stream = open_memstream(&text, &length);
    if (stream == NULL)
        return REPORTED;
    const char *name;
    json_t *value;
    json_object_foreach(json_object_get(frame, "set"), name, value)
    {
        if (!is_variable_name(name) || !json_is_string(value))
            continue;
        fprintf(stream, "export %s=", name);
        append_quoted(stream, json_string_value(value));
        fputc('\n', stream);
    }
    const char *cwd = json_string_value(json_object_get(frame, "cwd"));
    if (cwd != NULL) {
        fputs("cd -- ", stream);
        append_quoted(stream, cwd);
        fputc('\n', stream);
    }
    fclose(stream);
    int status = 0;
    enum wait_result result =
        run_in_shell(kernel, "environment.sh", text, length, "", false, &status);
    free(text);
    return result;
}

/* One request, inside busy/idle. SHELL_ENDED and DAEMON_GONE end the kernel; a shutdown
 * request ends it too, after its reply, as DAEMON_GONE does (exit 0). */
static enum wait_result handle(struct bash_kernel *kernel, const json_t *frame, bool aborted,
                               bool *shutdown)
{
    const char *channel = json_string_value(json_object_get(frame, "channel"));
    if (channel != NULL && strcmp(channel, "cellbox") == 0)
        return apply_environment(kernel, frame);
    const char *type = message_type(frame);
    kernel->current = frame;
    (void)send_frame(kernel, jupyter_message_status(&kernel->session, frame, "busy"));
    enum wait_result result = REPORTED;
    json_t *content = json_object_get(frame, "content");
    if (strcmp(type, "execute_request") == 0 && aborted)
        (void)send_reply(kernel, frame,
                         json_pack("{s:s, s:i}", "status", "aborted", "execution_count",
                                   kernel->execution_count));
    else if (strcmp(type, "execute_request") == 0)
        result = execute(kernel, frame);
    else if (strcmp(type, "kernel_info_request") == 0)
        (void)send_reply(kernel, frame, kernel_info(kernel));
    else if (strcmp(type, "is_complete_request") == 0)
        (void)send_reply(kernel, frame, is_complete(kernel, frame));
    else if (strcmp(type, "complete_request") == 0)
        (void)send_reply(kernel, frame, complete(kernel, frame, &result));
    else if (strcmp(type, "inspect_request") == 0)
        (void)send_reply(
            kernel, frame,
            json_pack("{s:s, s:b, s:{}, s:{}}", "status", "ok", "found", 0, "data", "metadata"));
    else if (strcmp(type, "history_request") == 0)
        (void)send_reply(kernel, frame, json_pack("{s:s, s:[]}", "status", "ok", "history"));
    else if (strcmp(type, "comm_info_request") == 0)
        (void)send_reply(kernel, frame, json_pack("{s:s, s:{}}", "status", "ok", "comms"));
    else if (strcmp(type, "shutdown_request") == 0) {
        (void)send_reply(kernel, frame,
                         json_pack("{s:s, s:b}", "status", "ok", "restart",
                                   json_is_true(json_object_get(content, "restart"))));
        *shutdown = true;
    }
    /* Other types (input_reply outside a cell, comm messages) get busy/idle only, as ipykernel
       answers the types it does not handle. */
    if (result != DAEMON_GONE)
        (void)send_frame(kernel, jupyter_message_status(&kernel->session, frame, "idle"));
    kernel->current = NULL;
    return result;
}

static int serve(struct bash_kernel *kernel)
{
    for (;;) {
        if (json_array_size(kernel->pending) > 0) {
            json_t *frame = json_incref(json_array_get(kernel->pending, 0));
            json_array_remove(kernel->pending, 0);
            bool shutdown = false;
            bool aborted = kernel->abort_window > 0;
            if (aborted)
                kernel->abort_window--;
            enum wait_result result = handle(kernel, frame, aborted, &shutdown);
            json_decref(frame);
            if (result == SHELL_ENDED)
                bash_shell_exit_like(&kernel->shell);
            if (result == DAEMON_GONE || shutdown)
                return 0;
            continue;
        }
        struct pollfd fds[3] = {
            {.fd = kernel_channel_fd(kernel->channel), .events = POLLIN},
            {.fd = kernel->shell.process.pidfd, .events = POLLIN},
            {.fd = kernel->shell.interrupt_fd, .events = POLLIN},
        };
        if (poll(fds, 3, -1) < 0) {
            if (errno == EINTR)
                continue;
            return 1;
        }
        if (fds[2].revents & POLLIN)
            bash_shell_drop_interrupts(&kernel->shell);
        if (fds[1].revents & POLLIN)
            bash_shell_exit_like(
                &kernel->shell); /* killed while idle (an OOM kill, a `kill` from elsewhere) */
        if ((fds[0].revents & (POLLIN | POLLHUP | POLLERR | POLLNVAL)) && read_channel(kernel) != 0)
            return 0; /* the daemon is gone: there is no one left to serve */
    }
}

int bash_kernel_run(int channel_fd)
{
    struct bash_kernel kernel = {0};
    jupyter_session_init(&kernel.session);
    kernel.pending = json_array();
    kernel.channel = kernel_channel_open(channel_fd);
    kernel.listener = (bash_shell_listener){kernel.channel, on_channel_readable, &kernel};
    if (kernel.channel == NULL || kernel.pending == NULL) {
        fprintf(stderr, "cellbox-kernel: out of memory starting the bash kernel\n");
        return 1;
    }
    if (bash_shell_start(&kernel.shell, &kernel.listener) != 0)
        return 1;
    (void)send_frame(&kernel, jupyter_message_status(&kernel.session, NULL, "starting"));
    int exit_status = serve(&kernel);
    bash_shell_end(&kernel.shell);
    kernel_channel_close(kernel.channel);
    json_decref(kernel.pending);
    return exit_status;
}
