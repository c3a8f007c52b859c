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

#define SANDBOX_MAX_CGROUP_FILES 8

typedef struct sandbox_spec {
    rootfs_spec root;
    bool network;            /* false: only loopback; true: also the interface network.c gives
                                the running sandbox (its namespace is its own either way) */
    int open_files;          /* RLIMIT_NOFILE */
    long long file_size;     /* RLIMIT_FSIZE in bytes */
    char *const *argv;       /* the program, with paths as seen inside */
    char *const *envp;
    int fds[4];              /* become the program's fds 0..3 (fds[3] may be -1); nothing else
                                is inherited */
    int image_fd;            /* > 2: a process image the program restores (runtime/restorer.h),
                                kept as its fd 4 (close-on-exec: pid 1's exec drops it); 0: none */
    const char *cwd;         /* for sandbox_join: the working directory inside (NULL: /workspace) */
    /* cgroup.procs files the sandbox joins before running anything (NULL-terminated) */
    const char *cgroup_procs[SANDBOX_MAX_CGROUP_FILES + 1];
    /* the memory controller's among them: a zygote stands in it while it clones the sandbox
       (see cgroup_memory_procs_file); NULL: none */
    const char *memory_cgroup_procs;
    /* for sandbox_join: no parent-death signal (another context: the keeper holds its channel,
       so it outlives a daemon that dies); a command has one and ends with the daemon */
    bool outlives_daemon;
    /* for sandbox_join: fd 0 is a terminal (sandbox_open_terminal) that becomes the program's
       controlling terminal, in the session it leads */
    bool controlling_terminal;
} sandbox_spec;

/* Starts the sandbox; returns the supervisor's pid (as the host sees it) and a pidfd for it, or
   -1 with `why`. A failure inside the sandbox's setup is reported on its fd 2, exit status 125. */
pid_t sandbox_start(const sandbox_spec *spec, int *pidfd, char *why, size_t why_size);

/* Is the root at root_fd (a sandbox's /proc/PID/root) one the sandbox is still building? Until
   pivot_root its processes share the daemon's "/", and just after it the daemon's tree still
   hangs at /.oldroot: resolving beneath either reaches host files. */
bool sandbox_root_is_unfinished(int root_fd);

/* Starts a program inside a running sandbox, given its supervisor's pidfd: the same namespaces,
   cgroup, user, rlimits, Landlock and seccomp as the sandbox's own program (spec->root gives the
   uid/gid; the rootfs is the sandbox's), in a session of its own, with the caller as its parent.
   Returns its pid (as the host sees it) and a pidfd, or -1 with `why`. Setup failures inside are
   reported on its fd 2 with exit status 125. */
pid_t sandbox_join(int supervisor_pidfd, const sandbox_spec *spec, int *pidfd, char *why,
                   size_t why_size);

/* Opens a pseudo-terminal of the running sandbox behind `supervisor_pidfd`: a pair from the
   sandbox's own devpts instance (its /dev/pts), so the program sees its terminal there. Returns
   the master (the daemon's end) and sets *terminal to the other end, owned by uid:gid and sized
   cols x rows; -1 with `why`. */
int sandbox_open_terminal(int supervisor_pidfd, unsigned cols, unsigned rows, uid_t uid, gid_t gid,
                          int *terminal, char *why, size_t why_size);

/* The steps, for a zygote that runs the program without exec: clone into new namespaces, then
   in the child enter (on failure it exits 125), then supervise (returns only in the program's
   process), and pid 1 execs cellbox-init.
   The child runs child(argument) on a stack of its own, sharing the caller's memory (CLONE_VM),
   and the caller waits until it execs or exits (CLONE_VFORK): pid 1 needs no copy of the
   zygote's page tables (the program's fork makes the one copy), but must write nothing on the
   way that the caller relies on. The child becomes the caller's parent's child, with every
   signal blocked. Returns its pid, or -1 with errno. */
pid_t sandbox_clone_sharing_memory(int (*child)(void *), void *argument);
/* The top of the stack that child runs on, and then the program it forks (one mapping, made on
   first use; NULL if it cannot be). */
void *sandbox_clone_stack_top(void);
void sandbox_enter(const sandbox_spec *spec);
pid_t sandbox_supervise(void);
/* Decodes the supervisor's exit status: sets *signal_number (0 if it exited) and the code. */
void sandbox_decode_status(int supervisor_status, int *exit_code, int *signal_number);

/* Checks, at daemon start, that we can build sandboxes; -1 + why (what is missing) otherwise. */
int sandbox_check_privileges(char *why, size_t why_size);

#define SANDBOX_SETUP_FAILED 125
/* How a failed setup begins the line it writes on the program's stderr (the daemon reads the
   reason from there). */
#define SANDBOX_SETUP_FAILED_PREFIX "cellbox: sandbox setup failed: "

#endif
