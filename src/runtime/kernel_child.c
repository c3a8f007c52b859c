/* kernel_child — the language's own process under cellbox-kernel (see kernel_child.h). */
#include "runtime/kernel_child.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

/* In the child, between fork and exec: only async-signal-safe calls. Puts fds[i] on 3 + i
 * (through numbers above them first, so that one move cannot overwrite another's source), closes
 * every other descriptor above 2 but `keep` (exec's error report, close-on-exec), and gives back
 * the signal state a new program expects. */
static void child_prepare(const int *fds, size_t fd_count, int keep)
{
    int first_free = 3 + (int)fd_count;
    int moved[16];
    for (size_t i = 0; i < fd_count; i++) {
        moved[i] = fcntl(fds[i], F_DUPFD, first_free);
        if (moved[i] < 0)
            _exit(127);
    }
    for (size_t i = 0; i < fd_count; i++)
        if (dup2(moved[i], 3 + (int)i) < 0)
            _exit(127);
    (void)syscall(SYS_close_range, (unsigned)first_free, (unsigned)keep - 1, 0);
    (void)syscall(SYS_close_range, (unsigned)keep + 1, ~0U, 0);
    /* cellbox-kernel ignores SIGINT (kernel_main.c) and a shell started with it ignored can never
     * let a command be interrupted; SIGPIPE's default is what every program expects. */
    signal(SIGINT, SIG_DFL);
    signal(SIGQUIT, SIG_DFL);
    signal(SIGPIPE, SIG_DFL);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    /* A kernel process whose cellbox-kernel was killed has no one to talk to: it goes too. */
    prctl(PR_SET_PDEATHSIG, SIGKILL);
}

int kernel_child_start(kernel_child *child, char *const argv[], const int *fds, size_t fd_count,
                       char *why, size_t why_size)
{
    child->pid = -1;
    child->pidfd = -1;
    if (fd_count > 16) {
        snprintf(why, why_size, "at most 16 descriptors can be passed to a kernel's process");
        return -1;
    }
    /* exec's failure travels back on this pipe; its success closes it (O_CLOEXEC). */
    int report[2];
    if (pipe2(report, O_CLOEXEC) != 0) {
        snprintf(why, why_size, "pipe: %s", strerror(errno));
        return -1;
    }
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid < 0) {
        snprintf(why, why_size, "fork: %s", strerror(errno));
        close(report[0]);
        close(report[1]);
        return -1;
    }
    if (pid == 0) {
        close(report[0]);
        int report_fd = fcntl(report[1], F_DUPFD_CLOEXEC, 3 + (int)fd_count + 64);
        if (report_fd < 0)
            _exit(127);
        child_prepare(fds, fd_count, report_fd);
        if (getppid() != parent) /* the parent died before PDEATHSIG was set */
            _exit(127);
        execv(argv[0], argv);
        int error = errno;
        (void)!write(report_fd, &error, sizeof error);
        _exit(127);
    }
    close(report[1]);
    int error = 0;
    ssize_t got;
    do
        got = read(report[0], &error, sizeof error);
    while (got < 0 && errno == EINTR);
    close(report[0]);
    if (got == (ssize_t)sizeof error) {
        snprintf(why, why_size, "cannot run %s: %s", argv[0], strerror(error));
        (void)waitpid(pid, NULL, 0);
        return -1;
    }
    child->pid = pid;
    child->pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
    if (child->pidfd < 0) {
        snprintf(why, why_size, "pidfd_open: %s", strerror(errno));
        kill(pid, SIGKILL);
        (void)waitpid(pid, NULL, 0);
        child->pid = -1;
        return -1;
    }
    return 0;
}

_Noreturn void kernel_child_exit_like(kernel_child *child)
{
    int status = 0;
    pid_t got;
    do
        got = waitpid(child->pid, &status, 0);
    while (got < 0 && errno == EINTR);
    fflush(stdout);
    fflush(stderr);
    if (got < 0)
        _exit(1);
    if (WIFEXITED(status))
        _exit(WEXITSTATUS(status));
    int signal_number = WTERMSIG(status);
    fprintf(stderr, "cellbox-kernel: the kernel's process (pid %d) was killed by signal %d (%s)\n",
            (int)child->pid, signal_number, strsignal(signal_number));
    /* Die of the same signal, so the daemon reports the real cause (an OOM kill, a SIGSEGV). */
    signal(signal_number, SIG_DFL);
    sigset_t only;
    sigemptyset(&only);
    sigaddset(&only, signal_number);
    sigprocmask(SIG_UNBLOCK, &only, NULL);
    raise(signal_number);
    _exit(128 + signal_number);
}
