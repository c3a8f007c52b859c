/* bash_shell — the one bash process of a Bash kernel (see bash_shell.h).
 *
 * One interactive bash (`--noprofile --norc --noediting -i`) reads command lines from a pipe.
 * It is interactive for one reason: on SIGINT an interactive shell abandons the whole line it is
 * running and reads the next one, where a script would exit (or, with a trap, go on with the
 * next command of the cell). So each cell is two lines:
 *
 *   . /tmp/cellbox-bash-PID-XXXXXX/status.sh N && :; . /tmp/cellbox-bash-PID-XXXXXX/cell.sh
 * </dev/null builtin printf 'TOKEN %d\n' "$?" >&3
 *
 * and an interrupted cell still reports (130). The cell's text never passes through the
 * command pipe, so a cell that does not parse cannot leave the shell waiting for the rest of
 * it. fd 3 is the private report pipe; TOKEN, random per kernel, keeps a stray write to fd 3
 * by a cell from passing for a report. bash's fd 1 and 2 are the kernel's pipes: output
 * streams live and the drain rule (kernel_channel_send) keeps it ahead of the reply. */
#include "runtime/bash_shell.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include "runtime/interrupt_sweep.h"

#define BASH_PATH "/bin/bash"

enum {
    STARTUP_WAIT_MS = 30 * 1000, /* bash's first report */
    EXIT_WAIT_MS = 5 * 1000,     /* bash's end after shutdown */
    SWEEP_INTERVAL_MS = 20,      /* between two interrupt sweeps */
    SWEEP_ROUNDS = 100,          /* sweeps after one interrupt: its program has exec'd by then */
};

/* ---------------------------------------------------------------- files and reports */

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

int bash_shell_write_file(const bash_shell *shell, const char *name, const char *text,
                          size_t length, char *path, size_t path_size)
{
    snprintf(path, path_size, "%s/%s", shell->directory, name);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0)
        return -1;
    int result = write_all(fd, text, length);
    return close(fd) == 0 ? result : -1;
}

/* The next whole report line's value into `value`; false when none is whole yet. Lines without
 * the token (a cell that wrote to fd 3) are skipped. */
static bool take_report(bash_shell *shell, char *value, size_t size)
{
    for (;;) {
        char *newline = memchr(shell->report, '\n', shell->report_used);
        if (newline == NULL) {
            if (shell->report_used == sizeof shell->report)
                shell->report_used = 0; /* a stray line too long to be ours */
            return false;
        }
        *newline = '\0';
        size_t token_length = strlen(shell->token);
        bool ours = strncmp(shell->report, shell->token, token_length) == 0 &&
                    shell->report[token_length] == ' ';
        if (ours)
            snprintf(value, size, "%s", shell->report + token_length + 1);
        size_t line = (size_t)(newline - shell->report) + 1;
        memmove(shell->report, shell->report + line, shell->report_used - line);
        shell->report_used -= line;
        if (ours)
            return true;
    }
}

/* ---------------------------------------------------------------- interrupts and waiting */

/* Drops the SIGINTs the signalfd holds; true if there was one. */
static bool take_interrupts(bash_shell *shell)
{
    struct signalfd_siginfo info;
    bool interrupted = false;
    while (read(shell->interrupt_fd, &info, sizeof info) == (ssize_t)sizeof info)
        interrupted = true;
    return interrupted;
}

/* One sweep for an interrupted cell (interrupt_sweep.h: a program bash was starting when the
 * SIGINT came may have missed it, and bash then waits for it as if no one had interrupted). */
static interrupt_sweep_result sweep_interrupt(bash_shell *shell)
{
    shell->sweeps_left--;
    return interrupt_sweep(shell->process.pid);
}

/* After an interrupted cell has reported: its programs forked in the last moment may still be
 * between fork and exec, and would run on in the background of the next cell. */
static void finish_interrupt(bash_shell *shell)
{
    while (shell->sweeps_left > 0) {
        interrupt_sweep_result swept = sweep_interrupt(shell);
        if (swept.forking == 0 && swept.signalled == 0)
            break;
        poll(NULL, 0, SWEEP_INTERVAL_MS);
    }
    shell->sweeps_left = 0;
}

/* Waits for bash's next report, keeping the daemon's frames for later (and switching channels
 * when a new daemon adopts the kernel). timeout_ms -1: as long as it takes, as a cell may. A
 * SIGINT that comes meanwhile starts the interrupt sweeps. */
static enum bash_shell_result wait_for_report(bash_shell *shell, char *value, size_t size,
                                              int timeout_ms, const bash_shell_listener *listener)
{
    for (;;) {
        if (take_report(shell, value, size))
            return BASH_SHELL_REPORTED;
        struct pollfd fds[4] = {
            {.fd = shell->report_fd, .events = POLLIN},
            {.fd = shell->process.pidfd, .events = POLLIN},
            {.fd = kernel_channel_fd(listener->channel), .events = POLLIN},
            {.fd = shell->interrupt_fd, .events = POLLIN},
        };
        int wait_ms = timeout_ms;
        if (shell->sweeps_left > 0 && (wait_ms < 0 || wait_ms > SWEEP_INTERVAL_MS))
            wait_ms = SWEEP_INTERVAL_MS;
        int ready = poll(fds, 4, wait_ms);
        if (ready < 0 && errno == EINTR)
            continue;
        if (ready < 0 || (ready == 0 && shell->sweeps_left == 0))
            return BASH_SHELL_ENDED; /* bash never answered: treated as gone (the caller kills it)
                                      */
        if (fds[3].revents & POLLIN && take_interrupts(shell))
            shell->sweeps_left = SWEEP_ROUNDS;
        if (shell->sweeps_left > 0)
            (void)sweep_interrupt(shell);
        if (fds[0].revents & POLLIN) {
            ssize_t got = read(shell->report_fd, shell->report + shell->report_used,
                               sizeof shell->report - shell->report_used);
            if (got > 0) {
                shell->report_used += (size_t)got;
                continue;
            }
        }
        if (fds[1].revents & POLLIN)
            return BASH_SHELL_ENDED;
        if ((fds[2].revents & (POLLIN | POLLHUP | POLLERR | POLLNVAL)) &&
            listener->on_readable(listener->arg) != 0)
            return BASH_SHELL_DAEMON_GONE;
    }
}

enum bash_shell_result bash_shell_run(bash_shell *shell, const char *name, const char *text,
                                      size_t length, const char *assignments, bool is_cell,
                                      int *status, const bash_shell_listener *listener)
{
    char path[128];
    if (bash_shell_write_file(shell, name, text, length, path, sizeof path) != 0) {
        fprintf(stderr, "cellbox-kernel: cannot write %s: %s\n", path, strerror(errno));
        *status = 1;
        return BASH_SHELL_REPORTED;
    }
    /* status.sh (`return "$1"`) gives `$?` the last cell's status for this one, without a fork;
     * `&& :` keeps a non-zero status from ending a shell that runs `set -e`. */
    char lines[1024];
    int n = snprintf(lines, sizeof lines,
                     ". '%s/status.sh' %d && :; %s . '%s' </dev/null\n"
                     "builtin printf '%s %%d\\n' \"$?\" >&3\n",
                     shell->directory, shell->last_status, assignments, path, shell->token);
    /* An interrupt sent before this cell began was meant for no cell of it. */
    (void)take_interrupts(shell);
    if (n < 0 || (size_t)n >= sizeof lines || write_all(shell->commands_fd, lines, (size_t)n))
        return BASH_SHELL_ENDED;
    char value[64];
    enum bash_shell_result result = wait_for_report(shell, value, sizeof value, -1, listener);
    if (result == BASH_SHELL_REPORTED) {
        *status = atoi(value);
        finish_interrupt(shell);
        if (is_cell)
            shell->last_status = *status;
    }
    return result;
}

/* ---------------------------------------------------------------- starting and ending */

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

static void remove_cell_files(bash_shell *shell)
{
    static const char *const names[] = {"cell.sh",     "environment.sh", "check.sh",
                                        "complete.sh", "completions",    "status.sh"};
    char path[128];
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        snprintf(path, sizeof path, "%s/%s", shell->directory, names[i]);
        (void)unlink(path);
    }
    (void)rmdir(shell->directory);
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
static int start_process(bash_shell *shell, const bash_shell_listener *listener)
{
    static const char status_script[] = "return \"$1\"\n";
    char status_path[128];
    if (bash_shell_write_file(shell, "status.sh", status_script, sizeof status_script - 1,
                              status_path, sizeof status_path) != 0)
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
    int started = kernel_child_start(&shell->process, argv, fds, 2, why, sizeof why);
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
    shell->commands_fd = commands[1];
    shell->report_fd = reports[0];
    (void)fcntl(shell->report_fd, F_SETFL, O_NONBLOCK);
    /* No prompts, no history expansion of `!` in cells, no history file, no mail checks. */
    char setup[512];
    int n = snprintf(setup, sizeof setup,
                     "exec 2>&4 4>&-; set +H +o history; PS1=''; PS2=''; PS0=''; "
                     "unset PROMPT_COMMAND MAILCHECK HISTFILE; "
                     "builtin printf '%s %%s\\n' \"$BASH_VERSION\" >&3\n",
                     shell->token);
    if (write_all(shell->commands_fd, setup, (size_t)n) != 0 ||
        wait_for_report(shell, shell->version, sizeof shell->version, STARTUP_WAIT_MS, listener) !=
            BASH_SHELL_REPORTED) {
        fprintf(stderr, "cellbox-kernel: " BASH_PATH " did not start\n");
        return -1;
    }
    return 0;
}

void bash_shell_end(bash_shell *shell)
{
    close(shell->commands_fd);
    shell->commands_fd = -1;
    struct pollfd exited = {.fd = shell->process.pidfd, .events = POLLIN};
    if (poll(&exited, 1, EXIT_WAIT_MS) <= 0)
        kill(shell->process.pid, SIGKILL);
    (void)waitpid(shell->process.pid, NULL, 0);
    remove_cell_files(shell);
    close(shell->report_fd);
    close(shell->interrupt_fd);
}

_Noreturn void bash_shell_exit_like(bash_shell *shell)
{
    remove_cell_files(shell);
    kernel_child_exit_like(&shell->process);
}

void bash_shell_describe_end(const bash_shell *shell, char *text, size_t size)
{
    siginfo_t info = {0};
    if (waitid(P_PID, (id_t)shell->process.pid, &info, WEXITED | WNOWAIT) != 0)
        snprintf(text, size, "the shell exited");
    else if (info.si_code == CLD_EXITED)
        snprintf(text, size, "the shell exited with status %d", info.si_status);
    else
        snprintf(text, size, "the shell was killed by signal %d (%s)", info.si_status,
                 strsignal(info.si_status));
}

void bash_shell_drop_interrupts(bash_shell *shell)
{
    (void)take_interrupts(shell);
}

int bash_shell_start(bash_shell *shell, const bash_shell_listener *listener)
{
    *shell = (bash_shell){.commands_fd = -1, .report_fd = -1};
    shell->interrupt_fd = take_sigint_on_fd();
    if (shell->interrupt_fd < 0) {
        fprintf(stderr, "cellbox-kernel: cannot take SIGINT on a signalfd: %s\n", strerror(errno));
        return -1;
    }
    make_token(shell->token, sizeof shell->token);
    if (access(BASH_PATH, X_OK) != 0) {
        fprintf(stderr, "cellbox-kernel: " BASH_PATH " is not installed: the bash kernel runs "
                        "it\n");
        return -1;
    }
    /* The pid in the name says whose it is: what a killed kernel leaves can be found. */
    snprintf(shell->directory, sizeof shell->directory, "/tmp/cellbox-bash-%d-XXXXXX",
             (int)getpid());
    if (mkdtemp(shell->directory) == NULL) {
        fprintf(stderr, "cellbox-kernel: cannot make the bash kernel's directory under /tmp: %s\n",
                strerror(errno));
        return -1;
    }
    if (start_process(shell, listener) != 0) {
        remove_cell_files(shell);
        return -1;
    }
    return 0;
}
