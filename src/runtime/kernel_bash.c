/* kernel_bash — the Bash kernel (see kernel_bash.h, docs/languages.md "Bash").
 *
 * One interactive bash (`--noprofile --norc --noediting -i`) reads command lines from a pipe.
 * It is interactive for one reason: on SIGINT an interactive shell abandons the whole line it is
 * running and reads the next one, where a script would exit (or, with a trap, go on with the
 * next command of the cell). So each cell is two lines:
 *
 *   . /tmp/cellbox-bash-XXXXXX/cell.sh </dev/null
 *   builtin printf 'TOKEN %d\n' "$?" >&3
 *
 * and an interrupted cell still reports (130). The cell's text never passes through the
 * command pipe, so a cell that does not parse cannot leave the shell waiting for the rest of
 * it. fd 3 is the private report pipe; TOKEN, random per kernel, keeps a stray write to fd 3
 * by a cell from passing for a report. bash's fd 1 and 2 are the kernel's pipes: output
 * streams live and the drain rule (kernel_channel_send) keeps it ahead of the reply. */
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
#include <sys/random.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include "runtime/interrupt_sweep.h"
#include "runtime/jupyter_message.h"
#include "runtime/kernel_channel.h"
#include "runtime/kernel_child.h"

#define BASH_PATH "/bin/bash"

extern char **environ;

enum {
    STARTUP_WAIT_MS = 30 * 1000,     /* bash's first report */
    SYNTAX_CHECK_WAIT_MS = 5 * 1000, /* `bash -n` on a cell's text */
    EXIT_WAIT_MS = 5 * 1000,         /* bash's end after shutdown */
    INTERRUPTED_STATUS = 130,        /* 128 + SIGINT: what bash reports for an interrupted line */
    SWEEP_INTERVAL_MS = 20,          /* between two interrupt sweeps */
    SWEEP_ROUNDS = 100,              /* sweeps after one interrupt: its program has exec'd by then */
};

struct bash_kernel {
    kernel_channel *channel; /* the daemon's */
    jupyter_session session;
    kernel_child shell; /* the one bash */
    int commands_fd;    /* write end of bash's stdin */
    int report_fd;      /* read end of bash's fd 3, non-blocking */
    char report[512];   /* report bytes not yet a whole line */
    size_t report_used;
    char directory[64]; /* private 0700 directory holding the cell files */
    char token[33];     /* prefix of every report line */
    char version[64];   /* $BASH_VERSION */
    int execution_count;
    int last_status; /* the last cell's exit status: `$?` when the next one begins */
    json_t *pending;       /* frames read from the daemon, not yet handled */
    const json_t *current; /* the request being handled (NULL between requests) */
    size_t abort_window;   /* after a failed cell: how many waiting frames its error aborts */
    int interrupt_fd;      /* signalfd of SIGINT: the daemon's interrupts, seen by the kernel */
    int sweeps_left;       /* interrupt sweeps still to do for the running cell (0: none) */
};

/* What waiting for bash's report can end with. */
enum wait_result { REPORTED, SHELL_ENDED, DAEMON_GONE };

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

static const char *message_type(const json_t *frame)
{
    const char *type =
        json_string_value(json_object_get(json_object_get(frame, "header"), "msg_type"));
    return type ? type : "";
}

/* ---------------------------------------------------------------- bash */

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

static int write_all(int fd, const char *bytes, size_t length)
{
    while (length > 0) {
        ssize_t written = write(fd, bytes, length);
        if (written < 0 && errno == EINTR)
            continue;
        if (written < 0)
            return -1;
        bytes += written;
        length -= (size_t)written;
    }
    return 0;
}

static int write_file(const char *path, const char *text, size_t length)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0)
        return -1;
    int result = write_all(fd, text, length);
    return close(fd) == 0 ? result : -1;
}

/* The next whole report line's value into `value`; false when none is whole yet. Lines without
 * the token (a cell that wrote to fd 3) are skipped. */
static bool take_report(struct bash_kernel *kernel, char *value, size_t size)
{
    for (;;) {
        char *newline = memchr(kernel->report, '\n', kernel->report_used);
        if (newline == NULL) {
            if (kernel->report_used == sizeof kernel->report)
                kernel->report_used = 0; /* a stray line too long to be ours */
            return false;
        }
        *newline = '\0';
        size_t token_length = strlen(kernel->token);
        bool ours = strncmp(kernel->report, kernel->token, token_length) == 0 &&
                    kernel->report[token_length] == ' ';
        if (ours)
            snprintf(value, size, "%s", kernel->report + token_length + 1);
        size_t line = (size_t)(newline - kernel->report) + 1;
        memmove(kernel->report, kernel->report + line, kernel->report_used - line);
        kernel->report_used -= line;
        if (ours)
            return true;
    }
}

/* Drops the SIGINTs the signalfd holds; true if there was one. */
static bool take_interrupts(struct bash_kernel *kernel)
{
    struct signalfd_siginfo info;
    bool interrupted = false;
    while (read(kernel->interrupt_fd, &info, sizeof info) == (ssize_t)sizeof info)
        interrupted = true;
    return interrupted;
}

/* One sweep for an interrupted cell (interrupt_sweep.h: a program bash was starting when the
 * SIGINT came may have missed it, and bash then waits for it as if no one had interrupted). */
static interrupt_sweep_result sweep_interrupt(struct bash_kernel *kernel)
{
    kernel->sweeps_left--;
    return interrupt_sweep(kernel->shell.pid);
}

/* After an interrupted cell has reported: its programs forked in the last moment may still be
 * between fork and exec, and would run on in the background of the next cell. */
static void finish_interrupt(struct bash_kernel *kernel)
{
    while (kernel->sweeps_left > 0) {
        interrupt_sweep_result swept = sweep_interrupt(kernel);
        if (swept.forking == 0 && swept.signalled == 0)
            break;
        poll(NULL, 0, SWEEP_INTERVAL_MS);
    }
    kernel->sweeps_left = 0;
}

/* Waits for bash's next report, keeping the daemon's frames for later (and switching channels
 * when a new daemon adopts the kernel). timeout_ms -1: as long as it takes, as a cell may. A
 * SIGINT that comes meanwhile starts the interrupt sweeps. */
static enum wait_result wait_for_report(struct bash_kernel *kernel, char *value, size_t size,
                                        int timeout_ms)
{
    for (;;) {
        if (take_report(kernel, value, size))
            return REPORTED;
        struct pollfd fds[4] = {
            {.fd = kernel->report_fd, .events = POLLIN},
            {.fd = kernel->shell.pidfd, .events = POLLIN},
            {.fd = kernel_channel_fd(kernel->channel), .events = POLLIN},
            {.fd = kernel->interrupt_fd, .events = POLLIN},
        };
        int wait_ms = timeout_ms;
        if (kernel->sweeps_left > 0 && (wait_ms < 0 || wait_ms > SWEEP_INTERVAL_MS))
            wait_ms = SWEEP_INTERVAL_MS;
        int ready = poll(fds, 4, wait_ms);
        if (ready < 0 && errno == EINTR)
            continue;
        if (ready < 0 || (ready == 0 && kernel->sweeps_left == 0))
            return SHELL_ENDED; /* bash never answered: treated as gone (the caller kills it) */
        if (fds[3].revents & POLLIN && take_interrupts(kernel))
            kernel->sweeps_left = SWEEP_ROUNDS;
        if (kernel->sweeps_left > 0)
            (void)sweep_interrupt(kernel);
        if (fds[0].revents & POLLIN) {
            ssize_t got = read(kernel->report_fd, kernel->report + kernel->report_used,
                               sizeof kernel->report - kernel->report_used);
            if (got > 0) {
                kernel->report_used += (size_t)got;
                continue;
            }
        }
        if (fds[1].revents & POLLIN)
            return SHELL_ENDED;
        if ((fds[2].revents & (POLLIN | POLLHUP | POLLERR | POLLNVAL)) && read_channel(kernel) != 0)
            return DAEMON_GONE;
    }
}

/* Has bash source `text` (saved as `name` in the private directory), with `assignments`
 * (words NAME='value', or "") in force for it; its exit status into *status. */
static enum wait_result run_in_shell(struct bash_kernel *kernel, const char *name, const char *text,
                                     size_t length, const char *assignments, int *status)
{
    char path[128];
    snprintf(path, sizeof path, "%s/%s", kernel->directory, name);
    if (write_file(path, text, length) != 0) {
        fprintf(stderr, "cellbox-kernel: cannot write %s: %s\n", path, strerror(errno));
        *status = 1;
        return REPORTED;
    }
    /* status.sh (`return "$1"`) gives `$?` the last cell's status for this one, without a fork;
     * `&& :` keeps a non-zero status from ending a shell that runs `set -e`. */
    char lines[1024];
    int n = snprintf(lines, sizeof lines,
                     ". '%s/status.sh' %d && :; %s . '%s' </dev/null\n"
                     "builtin printf '%s %%d\\n' \"$?\" >&3\n",
                     kernel->directory, kernel->last_status, assignments, path, kernel->token);
    /* An interrupt sent before this cell began was meant for no cell of it. */
    (void)take_interrupts(kernel);
    if (n < 0 || (size_t)n >= sizeof lines || write_all(kernel->commands_fd, lines, (size_t)n))
        return SHELL_ENDED;
    char value[64];
    enum wait_result result = wait_for_report(kernel, value, sizeof value, -1);
    if (result == REPORTED) {
        *status = atoi(value);
        finish_interrupt(kernel);
    }
    return result;
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

static void remove_cell_files(struct bash_kernel *kernel)
{
    static const char *const names[] = {"cell.sh",     "environment.sh", "check.sh",
                                        "complete.sh", "completions",    "status.sh"};
    char path[128];
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        snprintf(path, sizeof path, "%s/%s", kernel->directory, names[i]);
        (void)unlink(path);
    }
    (void)rmdir(kernel->directory);
}

static void make_token(char *token, size_t size)
{
    unsigned char random_bytes[16] = {0};
    (void)!getrandom(random_bytes, sizeof random_bytes, 0);
    for (size_t i = 0; i < sizeof random_bytes && 2 * i + 2 < size; i++)
        snprintf(token + 2 * i, 3, "%02x", random_bytes[i]);
}

/* Starts bash with the command pipe as its stdin, stderr on /dev/null until its first line
 * (an interactive shell without a terminal says it has no job control, which no user asked to
 * hear), the report pipe as fd 3 and the real stderr as fd 4. */
static int start_shell(struct bash_kernel *kernel)
{
    static const char status_script[] = "return \"$1\"\n";
    char status_path[128];
    snprintf(status_path, sizeof status_path, "%s/status.sh", kernel->directory);
    if (write_file(status_path, status_script, sizeof status_script - 1) != 0)
        return -1;
    int commands[2], reports[2];
    if (pipe2(commands, O_CLOEXEC) != 0)
        return -1;
    if (pipe2(reports, O_CLOEXEC) != 0)
        return -1;
    int null_fd = open("/dev/null", O_WRONLY | O_CLOEXEC);
    int saved_stdin = fcntl(0, F_DUPFD_CLOEXEC, 10);
    int saved_stderr = fcntl(2, F_DUPFD_CLOEXEC, 10);
    if (null_fd < 0 || saved_stdin < 0 || saved_stderr < 0)
        return -1;
    /* kernel_child_start hands over this process's fd 0-2: lend them for the start. */
    dup2(commands[0], 0);
    dup2(null_fd, 2);
    int fds[2] = {reports[1], saved_stderr};
    char *argv[] = {BASH_PATH, "--noprofile", "--norc", "--noediting", "-i", NULL};
    char why[256];
    int started = kernel_child_start(&kernel->shell, argv, fds, 2, why, sizeof why);
    dup2(saved_stdin, 0);
    dup2(saved_stderr, 2);
    close(saved_stdin);
    close(saved_stderr);
    close(null_fd);
    close(commands[0]);
    close(reports[1]);
    if (started != 0) {
        fprintf(stderr, "cellbox-kernel: %s\n", why);
        close(commands[1]);
        close(reports[0]);
        return -1;
    }
    kernel->commands_fd = commands[1];
    kernel->report_fd = reports[0];
    (void)fcntl(kernel->report_fd, F_SETFL, O_NONBLOCK);
    /* No prompts, no history expansion of `!` in cells, no history file, no mail checks. */
    char setup[512];
    int n = snprintf(setup, sizeof setup,
                     "exec 2>&4 4>&-; set +H +o history; PS1=''; PS2=''; PS0=''; "
                     "unset PROMPT_COMMAND MAILCHECK HISTFILE; "
                     "builtin printf '%s %%s\\n' \"$BASH_VERSION\" >&3\n",
                     kernel->token);
    if (write_all(kernel->commands_fd, setup, (size_t)n) != 0 ||
        wait_for_report(kernel, kernel->version, sizeof kernel->version, STARTUP_WAIT_MS) !=
            REPORTED) {
        fprintf(stderr, "cellbox-kernel: " BASH_PATH " did not start\n");
        return -1;
    }
    return 0;
}

/* Closing its stdin ends an idle shell; one that does not end in time is killed. */
static void end_shell(struct bash_kernel *kernel)
{
    close(kernel->commands_fd);
    kernel->commands_fd = -1;
    struct pollfd exited = {.fd = kernel->shell.pidfd, .events = POLLIN};
    if (poll(&exited, 1, EXIT_WAIT_MS) <= 0)
        kill(kernel->shell.pid, SIGKILL);
    (void)waitpid(kernel->shell.pid, NULL, 0);
}

/* bash has exited (`exit` in a cell, or killed): the kernel ends the same way. */
static _Noreturn void end_like_shell(struct bash_kernel *kernel)
{
    remove_cell_files(kernel);
    kernel_child_exit_like(&kernel->shell);
}

/* How bash ended, without reaping it (kernel_child_exit_like does): for the cell's error. */
static void describe_shell_end(const struct bash_kernel *kernel, char *text, size_t size)
{
    siginfo_t info = {0};
    if (waitid(P_PID, (id_t)kernel->shell.pid, &info, WEXITED | WNOWAIT) != 0)
        snprintf(text, size, "the shell exited");
    else if (info.si_code == CLD_EXITED)
        snprintf(text, size, "the shell exited with status %d", info.si_status);
    else
        snprintf(text, size, "the shell was killed by signal %d (%s)", info.si_status,
                 strsignal(info.si_status));
}

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
                                           assignments ? assignments : "", &status);
    free(assignments);
    if (result == REPORTED)
        kernel->last_status = status;
    if (result == SHELL_ENDED) {
        char why[128];
        describe_shell_end(kernel, why, sizeof why);
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
    snprintf(banner, sizeof banner, "GNU bash %s (cellbox)", kernel->version);
    return json_pack("{s:s, s:s, s:s, s:s, s:{s:s, s:s, s:s, s:s, s:s}, s:s, s:[]}", "status", "ok",
                     "protocol_version", "5.3", "implementation", "cellbox-bash",
                     "implementation_version", "1.0", "language_info", "name", "bash", "version",
                     kernel->version, "mimetype", "text/x-sh", "file_extension", ".sh",
                     "codemirror_mode", "shell", "banner", banner, "help_links");
}

/* is_complete_request: `bash -n` on the text, in a process of its own (a cell is never run to
 * find out). "incomplete" when bash ran out of text (an open quote, `if` without `fi`). */
static json_t *is_complete(struct bash_kernel *kernel, const json_t *request)
{
    const char *code =
        json_string_value(json_object_get(json_object_get(request, "content"), "code"));
    char path[128];
    snprintf(path, sizeof path, "%s/check.sh", kernel->directory);
    int errors[2];
    if (code == NULL || write_file(path, code, strlen(code)) != 0 || pipe2(errors, O_CLOEXEC))
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
                    MAX_COMPLETIONS, kernel->directory);
            fclose(stream);
            int status = 0;
            *result = run_in_shell(kernel, "complete.sh", text, length, "", &status);
            free(text);
        }
        char path[128], line[4096];
        snprintf(path, sizeof path, "%s/completions", kernel->directory);
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
    enum wait_result result = run_in_shell(kernel, "environment.sh", text, length, "", &status);
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
                end_like_shell(kernel);
            if (result == DAEMON_GONE || shutdown)
                return 0;
            continue;
        }
        struct pollfd fds[3] = {
            {.fd = kernel_channel_fd(kernel->channel), .events = POLLIN},
            {.fd = kernel->shell.pidfd, .events = POLLIN},
            {.fd = kernel->interrupt_fd, .events = POLLIN},
        };
        if (poll(fds, 3, -1) < 0) {
            if (errno == EINTR)
                continue;
            return 1;
        }
        if (fds[2].revents & POLLIN)
            (void)take_interrupts(kernel); /* harmless when idle (docs/kernel-protocol.md) */
        if (fds[1].revents & POLLIN)
            end_like_shell(kernel); /* killed while idle (an OOM kill, a `kill` from elsewhere) */
        if ((fds[0].revents & (POLLIN | POLLHUP | POLLERR | POLLNVAL)) && read_channel(kernel) != 0)
            return 0; /* the daemon is gone: there is no one left to serve */
    }
}

/* cellbox-kernel ignores SIGINT; the bash kernel takes it on a signalfd instead, to learn that a
 * cell was interrupted (interrupt_sweep.h). Blocked before its action goes back to the default,
 * so it never ends this process; an ignored signal would be dropped before the signalfd saw it.
 * bash gets an empty mask and the default action (kernel_child_start). */
static int take_sigint_on_fd(void)
{
    sigset_t interrupt;
    sigemptyset(&interrupt);
    sigaddset(&interrupt, SIGINT);
    if (sigprocmask(SIG_BLOCK, &interrupt, NULL) != 0)
        return -1;
    signal(SIGINT, SIG_DFL);
    return signalfd(-1, &interrupt, SFD_NONBLOCK | SFD_CLOEXEC);
}

int bash_kernel_run(int channel_fd)
{
    struct bash_kernel kernel = {.commands_fd = -1, .report_fd = -1};
    kernel.interrupt_fd = take_sigint_on_fd();
    if (kernel.interrupt_fd < 0) {
        fprintf(stderr, "cellbox-kernel: cannot take SIGINT on a signalfd: %s\n", strerror(errno));
        return 1;
    }
    jupyter_session_init(&kernel.session);
    make_token(kernel.token, sizeof kernel.token);
    kernel.pending = json_array();
    kernel.channel = kernel_channel_open(channel_fd);
    /* The pid in the name says whose it is: what a killed kernel leaves can be found. */
    snprintf(kernel.directory, sizeof kernel.directory, "/tmp/cellbox-bash-%d-XXXXXX",
             (int)getpid());
    if (access(BASH_PATH, X_OK) != 0) {
        fprintf(stderr, "cellbox-kernel: " BASH_PATH " is not installed: the bash kernel runs "
                        "it\n");
        return 1;
    }
    if (kernel.channel == NULL || kernel.pending == NULL || mkdtemp(kernel.directory) == NULL) {
        fprintf(stderr,
                "cellbox-kernel: cannot make the bash kernel's directory under /tmp: "
                "%s\n",
                strerror(errno));
        return 1;
    }
    if (start_shell(&kernel) != 0) {
        remove_cell_files(&kernel);
        return 1;
    }
    (void)send_frame(&kernel, jupyter_message_status(&kernel.session, NULL, "starting"));
    int exit_status = serve(&kernel);
    end_shell(&kernel);
    remove_cell_files(&kernel);
    kernel_channel_close(kernel.channel);
    json_decref(kernel.pending);
    return exit_status;
}
