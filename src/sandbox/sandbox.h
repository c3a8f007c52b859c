/* sandbox — starting a program isolated: own pid, mount, network, ipc, uts and cgroup namespaces,
 * a minimal root (rootfs.c), an unprivileged uid, no capabilities, no_new_privs, Landlock, seccomp
 * (seccomp_filter.c) and rlimits, inside a cgroup (cgroup.c) with its limits.
 *
 * The sandbox's first process (pid 1) is a small supervisor: it reaps orphans (no zombie storm
 * outlives its parent), and exits with the program's status — the exit code, or 128+N when the
 * program was killed by signal N — so the daemon learns how the program ended. When it exits the
 * kernel kills everything left in the pid namespace. */
#ifndef CELLBOX_SANDBOX_SANDBOX_H
#define CELLBOX_SANDBOX_SANDBOX_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include "sandbox/cgroup.h"
#include "sandbox/rootfs.h"

typedef struct sandbox_spec {
    rootfs_spec root;
    bool network;            /* false: a network namespace with only loopback */
    int open_files;          /* RLIMIT_NOFILE */
    long long file_size;     /* RLIMIT_FSIZE in bytes */
    char *const *argv;       /* the program, with paths as seen inside */
    char *const *envp;
    int fds[4];              /* become the program's fds 0..3; nothing else is inherited */
    sandbox_cgroup *cgroup;  /* the sandbox joins it before running anything */
} sandbox_spec;

/* Starts the sandbox; returns the supervisor's pid (as the host sees it) and a pidfd for it, or
   -1 with `why`. A failure inside the sandbox's setup is reported on its fd 2, exit status 125. */
pid_t sandbox_start(const sandbox_spec *spec, int *pidfd, char *why, size_t why_size);

/* Decodes the supervisor's exit status: sets *signal_number (0 if it exited) and the code. */
void sandbox_decode_status(int supervisor_status, int *exit_code, int *signal_number);

/* Checks, at daemon start, that we can build sandboxes; -1 + why (what is missing) otherwise. */
int sandbox_check_privileges(char *why, size_t why_size);

#define SANDBOX_SETUP_FAILED 125

#endif
