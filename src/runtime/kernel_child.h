/* kernel_child — the language's own process under cellbox-kernel (node for JavaScript, bash, a
 * Jupyter kernel's argv), started inside the sandbox cellbox-kernel already runs in. Its end is
 * this process's end: cellboxd watches cellbox-kernel, so cellbox-kernel ends as its child ended
 * and the daemon reports the kernel's death with its real cause. */
#ifndef CELLBOX_RUNTIME_KERNEL_CHILD_H
#define CELLBOX_RUNTIME_KERNEL_CHILD_H

#include <stddef.h>
#include <sys/types.h>

typedef struct kernel_child {
    pid_t pid;
    int pidfd; /* readable once the child has exited: poll it */
} kernel_child;

/* Starts argv[0] (a path) with this process's environment and fd 0-2, and `fds[i]` as fd 3 + i in
   the child (every other descriptor closed). SIGINT and SIGQUIT go back to their defaults in the
   child: cellbox-kernel ignores SIGINT, and a shell that starts with it ignored could never let
   a command be interrupted. 0, or -1 with `why`. */
int kernel_child_start(kernel_child *child, char *const argv[], const int *fds, size_t fd_count,
                       char *why, size_t why_size);
/* After the child has exited (its pidfd polled readable): reaps it and ends this process the way
   it ended: the same exit status, or killed by the same signal (a line on stderr names it). */
_Noreturn void kernel_child_exit_like(kernel_child *child);

#endif
