#include "sandbox/sandbox.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <linux/openat2.h>
#include <linux/capability.h>
#include <net/if.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "sandbox/landlock.h"
#include "sandbox/seccomp_filter.h"
#include "sandbox/supervisor.h"

/* The cgroup namespace comes later, once the sandbox is in its own cgroup (see sandbox_enter). */
#define NAMESPACES (CLONE_NEWPID | CLONE_NEWNS | CLONE_NEWIPC | CLONE_NEWUTS)

/* Inside the child everything reports through fd 2 (the kernel's stderr pipe) and exits. */
static void setup_failed(const char *what, const char *detail)
{
    char line[512];
    int n = snprintf(line, sizeof line, SANDBOX_SETUP_FAILED_PREFIX "%s%s%s\n", what,
                     detail ? ": " : "", detail ? detail : "");
    if (write(2, line, (size_t)n) < 0) {
        /* nothing more we can do */
    }
    _exit(SANDBOX_SETUP_FAILED);
}

/* The restore image (sandbox_spec.image_fd) as fd 4, the only descriptor kept above the
   channel: the restorer maps it and closes it before one restored instruction runs. */
static void place_image_fd(int moved)
{
    if (moved < 0 || dup3(moved, 4, O_CLOEXEC) < 0)
        setup_failed("cannot place the restore image", strerror(errno));
    close(moved);
}

static void place_fds(const int fds[4])
{
    int moved[4];
    for (int i = 0; i < 4; i++) /* above 10 first, so no dup2 below clobbers a source */
        moved[i] = fds[i] < 0 && i == 3 ? -1 : fcntl(fds[i], F_DUPFD_CLOEXEC, 10);
    for (int i = 0; i < 4; i++) {
        if (moved[i] < 0 && i == 3 && fds[i] < 0) {
            close(3);
            continue;
        }
        if (moved[i] < 0 || dup2(moved[i], i) < 0)
            setup_failed("cannot place the program's descriptors", strerror(errno));
    }
}

static void bring_up_loopback(void)
{
    int sock = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    struct ifreq request;
    memset(&request, 0, sizeof request);
    strcpy(request.ifr_name, "lo");
    if (sock < 0 || ioctl(sock, SIOCGIFFLAGS, &request) < 0)
        setup_failed("cannot query the loopback interface", strerror(errno));
    request.ifr_flags |= IFF_UP | IFF_RUNNING;
    if (ioctl(sock, SIOCSIFFLAGS, &request) < 0)
        setup_failed("cannot bring up loopback", strerror(errno));
    close(sock);
}

static void set_limit(int resource, rlim_t value)
{
    struct rlimit limit = {.rlim_cur = value, .rlim_max = value};
    if (setrlimit(resource, &limit) < 0)
        setup_failed("cannot set a resource limit", strerror(errno));
}

/* Root → the sandbox user with nothing left: bounding set emptied first (it needs
   CAP_SETPCAP, which we still hold), then groups, gid, uid. A uid change from 0 clears the
   permitted, effective and ambient sets. */
static void drop_privileges(uid_t uid, gid_t gid)
{
    for (int cap = 0; cap <= CAP_LAST_CAP; cap++)
        if (prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) < 0 && errno != EINVAL)
            setup_failed("cannot drop a capability", strerror(errno));
    if (setgroups(0, NULL) < 0 || setresgid(gid, gid, gid) < 0 || setresuid(uid, uid, uid) < 0)
        setup_failed("cannot switch to the sandbox user", strerror(errno));
    if (setuid(0) == 0)
        setup_failed("privileges were not dropped", NULL);
}

/* pid 1 of the sandbox: the program is a child of it; pid 1 reaps everything and exits as the
   program did. Returns only in the program's process. pid 1 then replaces its own image with
   the small supervisor program (supervisor.h): a copy of the daemon's (or the zygote's) memory must not stay
   readable inside the sandbox — its argv, its heap, its token. */
pid_t sandbox_supervise(void)
{
    pid_t program = fork();
    if (program < 0)
        setup_failed("cannot start the program", strerror(errno));
    if (program == 0) {
        sigset_t none;
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        return 0;
    }
    /* Only the program keeps the channel and pipes: its death is their end of file. */
    for (int fd = 0; fd < 4; fd++)
        close(fd);
    char argument[32];
    snprintf(argument, sizeof argument, "--supervise=%d", (int)program);
    char *argv[] = {"cellbox-init", argument, NULL};
    char *envp[] = {NULL};
    execve(SUPERVISOR_PATH, argv, envp);
    supervisor_reap_until(program); /* not reached unless the runtime is missing */
    return -1;
}

static int join_cgroup(const sandbox_spec *spec)
{
    for (int i = 0; i < SANDBOX_MAX_CGROUP_FILES && spec->cgroup_procs[i]; i++) {
        int fd = open(spec->cgroup_procs[i], O_WRONLY | O_CLOEXEC);
        if (fd < 0 || write(fd, "0", 1) != 1) /* "0" moves the writing process */
            return -1;
        close(fd);
    }
    return 0;
}

/* The last steps into the sandbox, shared by its first program and by every process that joins
   it later: limits, no inherited descriptors, the sandbox user, then no_new_privs, Landlock, and
   seccomp last, right before the program runs. A process joining later (a command, another
   context) `dies_with_daemon`; the sandbox's pid 1, and with it its kernel, does not: it
   outlives a daemon that dies, for the next one to adopt (the keeper holds its channel; see
   kernel/keeper.h), and ends when its channel does. */
static void become_sandbox_user(const sandbox_spec *spec, bool dies_with_daemon)
{
    set_limit(RLIMIT_NOFILE, (rlim_t)spec->open_files);
    set_limit(RLIMIT_FSIZE, (rlim_t)spec->file_size);
    set_limit(RLIMIT_CORE, 0);
    /* No descriptor of the daemon's survives (CVE-2024-21626: a leaked fd is a way out), but
       for a restore's image (fd 4, the sandbox's own memory, read-only to it). */
    syscall(SYS_close_range, spec->image_fd > 2 ? 5 : 4, ~0U, 0);
    drop_privileges(spec->root.uid, spec->root.gid);
    /* Cleared by the uid change above, so set only now. */
    if (dies_with_daemon)
        prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
        setup_failed("cannot set no_new_privs", strerror(errno));
    if (landlock_restrict() < 0)
        setup_failed("cannot apply the Landlock policy", strerror(errno));
    int rc = seccomp_filter_load();
    if (rc < 0)
        setup_failed("cannot load the seccomp filter", strerror(-rc));
}

/* In new namespaces, as root: the order follows bubblewrap's — mounts, then identity, then
   no_new_privs, Landlock, and seccomp last, right before the program runs. */
void sandbox_enter(const sandbox_spec *spec)
{
    /* Out of the way first: the image may sit on a number place_fds fills, or on 4. */
    int image = spec->image_fd > 2 ? fcntl(spec->image_fd, F_DUPFD_CLOEXEC, 10) : -1;
    place_fds(spec->fds);
    if (spec->image_fd > 2)
        place_image_fd(image);
    /* Before anything else runs: every page and process from here on is charged and limited. */
    if (join_cgroup(spec) < 0)
        setup_failed("cannot join the sandbox's cgroup", strerror(errno));
    /* A cgroup namespace rooted at that cgroup: /proc/self/cgroup shows "/" and nothing of the
       host's hierarchy. */
    if (unshare(CLONE_NEWCGROUP) < 0)
        setup_failed("cannot create the cgroup namespace", strerror(errno));
    /* Its own session: no controlling terminal to inject into (TIOCSTI), and the daemon's
       killpg() reaches the whole sandbox. */
    setsid();
    char why[512];
    if (rootfs_enter(&spec->root, why, sizeof why) < 0)
        setup_failed(why, NULL);
    if (sethostname("cellbox", 7) < 0)
        setup_failed("cannot set the hostname", strerror(errno));
    bring_up_loopback();
    become_sandbox_user(spec, false);
}

/* The root directory of the process behind `pidfd` (its pid read from our fdinfo), or -1. */
static int open_root_of(int pidfd)
{
    char path[64], text[1024];
    snprintf(path, sizeof path, "/proc/self/fdinfo/%d", pidfd);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    ssize_t n = read(fd, text, sizeof text - 1);
    close(fd);
    text[n > 0 ? n : 0] = '\0';
    const char *field = strstr(text, "\nPid:");
    int pid = field ? atoi(field + 5) : 0;
    if (pid <= 0)
        return -1;
    snprintf(path, sizeof path, "/proc/%d/root", pid);
    return open(path, O_PATH | O_DIRECTORY | O_CLOEXEC);
}

/* The sandbox's /dev/pts/ptmx, resolved inside its root: its /dev is a read-only tmpfs the
   daemon built, but the lookup still follows no link and stays in the root, and what it opens
   must be a pty multiplexer (a character device 5:2) before it is used. */
static int open_sandbox_ptmx(int supervisor_pidfd, char *why, size_t why_size)
{
    int root = open_root_of(supervisor_pidfd);
    if (root < 0) {
        snprintf(why, why_size, "cannot find the sandbox's root (is it still running?)");
        return -1;
    }
    struct open_how how = {
        .flags = O_RDWR | O_NOCTTY | O_CLOEXEC,
        .resolve = RESOLVE_IN_ROOT | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS,
    };
    int master = (int)syscall(SYS_openat2, root, "dev/pts/ptmx", &how, sizeof how);
    int saved_errno = errno;
    close(root);
    struct stat status;
    if (master < 0 || fstat(master, &status) < 0 || !S_ISCHR(status.st_mode) ||
        major(status.st_rdev) != 5 || minor(status.st_rdev) != 2) {
        snprintf(why, why_size, "cannot open the sandbox's /dev/pts/ptmx: %s",
                 master < 0 ? strerror(saved_errno) : "not a pty multiplexer");
        if (master >= 0)
            close(master);
        return -1;
    }
    return master;
}

int sandbox_open_terminal(int supervisor_pidfd, unsigned cols, unsigned rows, uid_t uid, gid_t gid,
                          int *terminal, char *why, size_t why_size)
{
    int master = open_sandbox_ptmx(supervisor_pidfd, why, why_size);
    if (master < 0)
        return -1;
    int unlock = 0;
    struct winsize size = {.ws_col = (unsigned short)cols, .ws_row = (unsigned short)rows};
    /* TIOCGPTPEER opens the other end from the master itself: no path to race on. */
    int peer = -1;
    if (ioctl(master, TIOCSPTLCK, &unlock) < 0 || ioctl(master, TIOCSWINSZ, &size) < 0 ||
        (peer = ioctl(master, TIOCGPTPEER, O_RDWR | O_NOCTTY | O_CLOEXEC)) < 0 ||
        fchown(peer, uid, gid) < 0) {
        snprintf(why, why_size, "cannot set up the sandbox's terminal: %s", strerror(errno));
        if (peer >= 0)
            close(peer);
        close(master);
        return -1;
    }
    *terminal = peer;
    return master;
}

/* Every signal to its default action, the two real-time signals glibc reserves for itself
   included (its signal() refuses those, and a sanitizer runtime leaves one ignored): through
   the system call. */
static void reset_signal_actions(void)
{
    struct {
        void (*handler)(int);
        unsigned long flags;
        void (*restorer)(void);
        unsigned long mask;
    } action = {.handler = SIG_DFL};
    for (int signal_number = 1; signal_number < NSIG; signal_number++)
        if (signal_number != SIGKILL && signal_number != SIGSTOP)
            syscall(SYS_rt_sigaction, signal_number, &action, NULL, sizeof action.mask);
}

/* Runs in a short-lived helper forked from the daemon: it joins the cgroup, then the namespaces
   (setns with a pidfd enters them all at once), and clones the program with CLONE_PARENT so the
   daemon, not the helper, is its parent. A new pid namespace applies to children only, hence the
   clone. The helper reports the program's pid on `report` and exits. */
static void join_and_clone(int supervisor_pidfd, const sandbox_spec *spec, int report)
{
    place_fds(spec->fds);
    if (join_cgroup(spec) < 0)
        setup_failed("cannot join the sandbox's cgroup", strerror(errno));
    int namespaces = CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWIPC | CLONE_NEWUTS | CLONE_NEWNET |
                     CLONE_NEWCGROUP;
    int root = open_root_of(supervisor_pidfd);
    /* A sandbox being built has not pivoted into its own root yet (its "/" is still the
       daemon's), or has just done so with the daemon's tree still at /.oldroot: a program that
       joined it now would start on the host's files. The daemon joins only sandboxes whose
       kernel has reported in; this holds whatever a caller does. */
    if (root >= 0 && sandbox_root_is_unfinished(root))
        setup_failed("cannot enter the sandbox", "it is still being set up; try again once it runs");
    if (setns(supervisor_pidfd, namespaces) < 0)
        setup_failed("cannot enter the sandbox's namespaces", strerror(errno));
    /* setns leaves us at the root of the mount namespace, which is the sandbox's root only if
       the daemon's was a mount namespace's root; a daemon under chroot(2) would land on the
       host's. pid 1's root is the sandbox's either way. */
    if (root >= 0 && (fchdir(root) < 0 || chroot(".") < 0))
        setup_failed("cannot enter the sandbox's root", strerror(errno));
    if (root >= 0)
        close(root);
    /* The pid is reported only once the program leads its own process group: a signal the
       daemon sends the moment it has the pid (an interrupt right after a command's start) then
       reaches the whole group, not just a shell that would catch it and leave its child running. */
    int group_made[2];
    if (pipe2(group_made, O_CLOEXEC) < 0)
        setup_failed("cannot create a pipe", strerror(errno));
    pid_t program = (pid_t)syscall(SYS_clone, CLONE_PARENT | SIGCHLD, NULL, NULL, NULL, NULL);
    if (program == 0) {
        setsid();
        /* A terminal program's session has the pty as its terminal: job control, ^C, SIGWINCH on
           a resize and SIGHUP when it closes work as in a terminal. Its own session's terminal
           only: TIOCSTI stays blocked by seccomp. */
        if (spec->controlling_terminal && ioctl(0, TIOCSCTTY, 0) < 0)
            setup_failed("cannot make the terminal the controlling terminal", strerror(errno));
        close(group_made[0]);
        close(group_made[1]);
        /* Every signal's default action, whatever the daemon has: it ignores SIGPIPE (a client
           gone mid-write is an error, not a death), and a daemon started from a script with
           `cellboxd &` or nohup ignores SIGINT or SIGHUP too. An ignored signal stays ignored
           across exec: `yes | head -1` would end in "Broken pipe" errors and a command's
           interrupt would do nothing. */
        reset_signal_actions();
        sigset_t none;
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        const char *cwd = spec->cwd ? spec->cwd : "/workspace";
        if (chdir(cwd) < 0)
            setup_failed("cannot change to the working directory", cwd);
        become_sandbox_user(spec, !spec->outlives_daemon);
        execve(spec->argv[0], spec->argv, spec->envp);
        setup_failed("cannot execute", spec->argv[0]);
    }
    close(group_made[1]);
    char byte;
    while (program > 0 && read(group_made[0], &byte, 1) < 0 && errno == EINTR) {
    } /* end of file: the program has run setsid() and closed its copy */
    ssize_t written = write(report, &program, sizeof program);
    _exit(program > 0 && written == (ssize_t)sizeof program ? 0 : SANDBOX_SETUP_FAILED);
}

bool sandbox_root_is_unfinished(int root_fd)
{
    struct stat sandbox_root, host_root, old_root;
    if (fstat(root_fd, &sandbox_root) < 0 || stat("/", &host_root) < 0)
        return true;
    return (sandbox_root.st_dev == host_root.st_dev && sandbox_root.st_ino == host_root.st_ino) ||
           fstatat(root_fd, ".oldroot", &old_root, AT_SYMLINK_NOFOLLOW) == 0;
}

pid_t sandbox_join(int supervisor_pidfd, const sandbox_spec *spec, int *pidfd, char *why,
                   size_t why_size)
{
    int report[2];
    if (pipe2(report, O_CLOEXEC) < 0) {
        snprintf(why, why_size, "cannot create a pipe: %s", strerror(errno));
        return -1;
    }
    /* Out of the way of the program's fds 0..3, which the helper places first. */
    int report_fd = fcntl(report[1], F_DUPFD_CLOEXEC, 10);
    close(report[1]);
    pid_t helper = fork();
    if (helper == 0) {
        close(report[0]);
        join_and_clone(supervisor_pidfd, spec, report_fd);
    }
    close(report_fd);
    if (helper < 0) {
        close(report[0]);
        snprintf(why, why_size, "cannot fork: %s", strerror(errno));
        return -1;
    }
    int status = 0;
    while (waitpid(helper, &status, 0) < 0 && errno == EINTR) {
    }
    pid_t program = -1;
    ssize_t n = read(report[0], &program, sizeof program);
    close(report[0]);
    if (n != (ssize_t)sizeof program || program <= 0 || !WIFEXITED(status) || WEXITSTATUS(status)) {
        snprintf(why, why_size, "cannot enter the sandbox (is it still running?)");
        return -1;
    }
    *pidfd = (int)syscall(SYS_pidfd_open, program, 0);
    if (*pidfd < 0) {
        snprintf(why, why_size, "cannot watch the new process: %s", strerror(errno));
        kill(program, SIGKILL);
        waitpid(program, NULL, 0);
        return -1;
    }
    return program;
}

/* A raw clone with fork semantics (no new stack: the child runs on a copy of ours), the caller
   its parent, with a pidfd. */
static pid_t clone_with_pidfd(int *pidfd)
{
    unsigned long flags = NAMESPACES | CLONE_NEWNET | CLONE_PIDFD | SIGCHLD;
    return (pid_t)syscall(SYS_clone, flags, NULL, pidfd, NULL, NULL);
}

/* pid 1's stack while it shares the zygote's memory, and then the stack of the program it forks
   (a copy): as large as a main thread's usually is. Mapped once, populated only where touched. */
#define SHARED_CLONE_STACK_SIZE (8u << 20)

void *sandbox_clone_stack_top(void)
{
    static char *stack;
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    /* A guard page below, so an overflow faults instead of writing into a neighbour; and one
       page of ours above the top. The first clone of a zygote had a system call read the page
       just above the stack's top (not traced further: a `_copy_from_user` of an untouched
       page); when that page was some other mapping's, the page it then got was charged to the
       sandbox being cloned (see runtime/zygote.c, add_stack_tops). */
    size_t length = page + SHARED_CLONE_STACK_SIZE + page;
    if (!stack) {
        char *mapping = mmap(NULL, length, PROT_READ | PROT_WRITE,
                             MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_STACK, -1, 0);
        if (mapping == MAP_FAILED)
            return NULL;
        if (mprotect(mapping, page, PROT_NONE) < 0) {
            munmap(mapping, length);
            return NULL;
        }
        stack = mapping;
    }
    return stack + page + SHARED_CLONE_STACK_SIZE;
}

pid_t sandbox_clone_sharing_memory(int (*child)(void *), void *argument)
{
    char *stack_top = sandbox_clone_stack_top();
    if (!stack_top)
        return -1;
    int flags = NAMESPACES | CLONE_NEWNET | CLONE_PARENT | CLONE_VM | CLONE_VFORK |
                SIGCHLD;
    /* Until it execs, a handler running in the child would write the caller's memory: signals
       stay blocked in the child (its program unblocks them after its fork, cellbox-init at its
       start, once exec has reset every handler). */
    sigset_t all, previous;
    sigfillset(&all);
    sigprocmask(SIG_SETMASK, &all, &previous);
    pid_t pid = clone(child, stack_top, flags, argument);
    int saved_errno = errno;
    sigprocmask(SIG_SETMASK, &previous, NULL);
    errno = saved_errno;
    return pid;
}

pid_t sandbox_start(const sandbox_spec *spec, int *pidfd, char *why, size_t why_size)
{
    int child_pidfd = -1;
    pid_t pid = clone_with_pidfd(&child_pidfd);
    if (pid == 0) {
        sandbox_enter(spec);
        sandbox_supervise();
        execve(spec->argv[0], spec->argv, spec->envp);
        setup_failed("cannot execute", spec->argv[0]);
    }
    if (pid < 0) {
        snprintf(why, why_size, "cannot create the sandbox's namespaces: %s", strerror(errno));
        return -1;
    }
    *pidfd = child_pidfd;
    return pid;
}

void sandbox_decode_status(int supervisor_status, int *exit_code, int *signal_number)
{
    *exit_code = supervisor_status;
    *signal_number = 0;
    if (supervisor_status > 128 && supervisor_status < 128 + 65) {
        *signal_number = supervisor_status - 128;
        *exit_code = 0;
    }
}

int sandbox_check_privileges(char *why, size_t why_size)
{
    struct __user_cap_header_struct header = {.version = _LINUX_CAPABILITY_VERSION_3};
    struct __user_cap_data_struct data[2];
    if (syscall(SYS_capget, &header, data) < 0) {
        snprintf(why, why_size, "cannot read capabilities: %s", strerror(errno));
        return -1;
    }
    static const struct { int cap; const char *name; } needed[] = {
        {CAP_SYS_ADMIN, "CAP_SYS_ADMIN (namespaces, mounts)"},
        {CAP_SETUID, "CAP_SETUID (the sandbox user)"},
        {CAP_SETGID, "CAP_SETGID"},
        {CAP_SETPCAP, "CAP_SETPCAP (dropping the bounding set)"},
        {CAP_NET_ADMIN, "CAP_NET_ADMIN (the sandbox loopback)"},
        {CAP_SYS_CHROOT, "CAP_SYS_CHROOT (pivot_root)"},
        {CAP_CHOWN, "CAP_CHOWN"},
        {CAP_DAC_OVERRIDE, "CAP_DAC_OVERRIDE"},
    };
    for (size_t i = 0; i < sizeof needed / sizeof needed[0]; i++) {
        int cap = needed[i].cap;
        if (!(data[cap / 32].effective & (1u << (cap % 32)))) {
            snprintf(why, why_size, "cellboxd must run as root (or with %s) to build sandboxes; "
                     "start it with sudo", needed[i].name);
            return -1;
        }
    }
    return 0;
}
