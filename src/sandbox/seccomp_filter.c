#include "sandbox/seccomp_filter.h"

#include <errno.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <seccomp.h>
#include <stddef.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/personality.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

/* Allowed without conditions. Names this libseccomp does not know are skipped. Deliberately
   absent: mount, umount2, pivot_root, chroot, unshare, setns, bpf, perf_event_open, keyctl,
   add_key, request_key, userfaultfd, kexec_*, *_module, open_by_handle_at, reboot, swapon/off,
   acct, settimeofday, clock_settime, quotactl, syslog, fanotify_init, io_uring_*, ptrace,
   process_vm_*, sethostname, setdomainname, vhangup, lookup_dcookie, kcmp. */
static const char *const allowed[] = {
    "accept", "accept4", "access", "adjtimex", "alarm", "arch_prctl", "bind", "brk", "capget",
    "capset", "chdir", "chmod", "chown", "clock_adjtime", "clock_getres", "clock_gettime",
    "clock_nanosleep", "close", "close_range", "connect", "copy_file_range", "creat", "dup", "dup2",
    "dup3", "epoll_create", "epoll_create1", "epoll_ctl", "epoll_pwait", "epoll_pwait2",
    "epoll_wait", "eventfd", "eventfd2", "execve", "execveat", "exit", "exit_group", "faccessat",
    "faccessat2", "fadvise64", "fallocate", "fchdir", "fchmod", "fchmodat", "fchmodat2", "fchown",
    "fchownat", "fcntl", "fdatasync", "fgetxattr", "flistxattr", "flock", "fork", "fremovexattr",
    "fsetxattr", "fstat", "fstatfs", "fsync", "ftruncate", "futex", "futex_requeue", "futex_wait",
    "futex_waitv", "futex_wake", "futimesat", "get_mempolicy", "get_robust_list", "getcpu",
    "getcwd", "getdents", "getdents64", "getegid", "geteuid", "getgid", "getgroups", "getitimer",
    "getpeername", "getpgid", "getpgrp", "getpid", "getppid", "getpriority", "getrandom",
    "getresgid", "getresuid", "getrlimit", "getrusage", "getsid", "getsockname", "getsockopt",
    "gettid", "gettimeofday", "getuid", "getxattr", "inotify_add_watch", "inotify_init",
    "inotify_init1", "inotify_rm_watch", "io_cancel", "io_destroy", "io_getevents",
    "io_pgetevents", "io_setup", "io_submit", "ioprio_get", "ioprio_set", "kill", "landlock_add_rule",
    "landlock_create_ruleset", "landlock_restrict_self", "lchown", "lgetxattr", "link", "linkat",
    "listen", "listxattr", "llistxattr", "lremovexattr", "lseek", "lsetxattr", "lstat", "madvise",
    "mbind", "membarrier", "memfd_create", "mincore", "mkdir", "mkdirat", "mknod", "mknodat",
    "mlock", "mlock2", "mlockall", "mmap", "mprotect", "mq_getsetattr", "mq_notify", "mq_open",
    "mq_timedreceive", "mq_timedsend", "mq_unlink", "mremap", "msgctl", "msgget", "msgrcv",
    "msgsnd", "msync", "munlock", "munlockall", "munmap", "name_to_handle_at", "nanosleep",
    "newfstatat", "open", "openat", "openat2", "pause", "pidfd_getfd", "pidfd_open",
    "pidfd_send_signal", "pipe", "pipe2", "pkey_alloc", "pkey_free", "pkey_mprotect", "poll",
    "ppoll", "prctl", "pread64", "preadv", "preadv2", "prlimit64", "process_mrelease", "pselect6",
    "pwrite64", "pwritev", "pwritev2", "read", "readahead", "readlink", "readlinkat", "readv",
    "recvfrom", "recvmmsg", "recvmsg", "remap_file_pages", "removexattr", "rename", "renameat",
    "renameat2", "restart_syscall", "rmdir", "rseq", "rt_sigaction", "rt_sigpending",
    "rt_sigprocmask", "rt_sigqueueinfo", "rt_sigreturn", "rt_sigsuspend", "rt_sigtimedwait",
    "rt_tgsigqueueinfo", "sched_get_priority_max", "sched_get_priority_min", "sched_getaffinity",
    "sched_getattr", "sched_getparam", "sched_getscheduler", "sched_rr_get_interval",
    "sched_setaffinity", "sched_setattr", "sched_setparam", "sched_setscheduler", "sched_yield",
    "seccomp", "select", "semctl", "semget", "semop", "semtimedop", "sendfile", "sendmmsg",
    "sendmsg", "sendto", "set_mempolicy", "set_robust_list", "set_tid_address", "setfsgid",
    "setfsuid", "setgid", "setgroups", "setitimer", "setpgid", "setpriority", "setregid",
    "setresgid", "setresuid", "setreuid", "setrlimit", "setsid", "setsockopt", "setuid",
    "setxattr", /* as lsetxattr: without capabilities, user.* attributes of writable files only */
    "shmat", "shmctl", "shmdt", "shmget", "shutdown", "sigaltstack", "signalfd", "signalfd4",
    "socketpair", "splice", "stat", "statfs", "statx", "symlink", "symlinkat", "sync",
    "sync_file_range", "syncfs", "sysinfo", "tee", "tgkill", "time", "timer_create",
    "timer_delete", "timer_getoverrun", "timer_gettime", "timer_settime", "timerfd_create",
    "timerfd_gettime", "timerfd_settime", "times", "tkill", "truncate", "umask", "uname",
    "unlink", "unlinkat", "utime", "utimensat", "utimes", "vfork", "vmsplice", "wait4",
    "waitid", "write", "writev",
};

static int allow_socket_families(scmp_filter_ctx ctx)
{
    /* An allow-list of families: AF_ALG (38) and AF_VSOCK (40) among the refused. The family is
       an int, so only the low 32 bits are compared (the kernel ignores the rest). */
    static const int families[] = {AF_UNIX, AF_INET, AF_INET6, AF_NETLINK};
    for (size_t i = 0; i < sizeof families / sizeof families[0]; i++) {
        int rc = seccomp_rule_add(ctx, SCMP_ACT_ALLOW, SCMP_SYS(socket), 1,
                                  SCMP_A0(SCMP_CMP_MASKED_EQ, 0xffffffffu, (scmp_datum_t)families[i]));
        if (rc < 0)
            return rc;
    }
    return 0;
}

/* ioctl is allowed unless its request's low 32 bits are TIOCSTI (CVE-2019-10063: the kernel
   truncates the request, so a high bit must not smuggle it past). "Any bit differs from
   TIOCSTI" is 32 one-bit rules, OR-ed. */
static int allow_ioctl_except_tiocsti(scmp_filter_ctx ctx)
{
    for (int bit = 0; bit < 32; bit++) {
        scmp_datum_t mask = 1ull << bit;
        scmp_datum_t differs = (~(scmp_datum_t)TIOCSTI) & mask;
        int rc = seccomp_rule_add(ctx, SCMP_ACT_ALLOW, SCMP_SYS(ioctl), 1,
                                  SCMP_A1(SCMP_CMP_MASKED_EQ, mask, differs));
        if (rc < 0)
            return rc;
    }
    return 0;
}

static int allow_conditional(scmp_filter_ctx ctx)
{
    /* No new namespaces: clone with any CLONE_NEW* flag is refused (Docker's mask). */
    int rc = seccomp_rule_add(ctx, SCMP_ACT_ALLOW, SCMP_SYS(clone), 1,
                              SCMP_A0(SCMP_CMP_MASKED_EQ, 0x7E020000u, 0));
    /* clone3 passes flags in memory a filter cannot read: ENOSYS makes libc use clone. */
    if (rc == 0)
        rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(ENOSYS), SCMP_SYS(clone3), 0);
    static const unsigned long personas[] = {0, PER_LINUX32, UNAME26, UNAME26 | PER_LINUX32,
                                             0xffffffffu};
    for (size_t i = 0; rc == 0 && i < sizeof personas / sizeof personas[0]; i++)
        rc = seccomp_rule_add(ctx, SCMP_ACT_ALLOW, SCMP_SYS(personality), 1,
                              SCMP_A0(SCMP_CMP_EQ, personas[i]));
    if (rc == 0)
        rc = allow_socket_families(ctx);
    if (rc == 0)
        rc = allow_ioctl_except_tiocsti(ctx);
    return rc;
}

/* The compiled program. libseccomp needs tens of milliseconds to build it from the rules (a
   fresh clone of a large process also pays copy-on-write faults for its allocations), and every
   sandbox loads the same one: built once, before the forks, and loaded as it is. */
static struct sock_filter program[BPF_MAXINSNS];
static unsigned short program_length;

static int compile(scmp_filter_ctx ctx)
{
    int fd = memfd_create("cellbox-seccomp", MFD_CLOEXEC);
    if (fd < 0)
        return -errno;
    int rc = seccomp_export_bpf(ctx, fd);
    if (rc == 0) {
        ssize_t n = pread(fd, program, sizeof program, 0);
        if (n <= 0 || n % (ssize_t)sizeof program[0] != 0 || n == (ssize_t)sizeof program)
            rc = -EINVAL; /* empty, torn, or possibly longer than the kernel accepts */
        else
            program_length = (unsigned short)(n / (ssize_t)sizeof program[0]);
    }
    close(fd);
    return rc;
}

int seccomp_filter_prepare(void)
{
    if (program_length)
        return 0;
    scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_ERRNO(EPERM));
    if (!ctx)
        return -ENOMEM;
    /* Calls from another architecture (int 0x80 i386, x32) kill the process. */
    int rc = seccomp_attr_set(ctx, SCMP_FLTATR_ACT_BADARCH, SCMP_ACT_KILL_PROCESS);
    for (size_t i = 0; rc == 0 && i < sizeof allowed / sizeof allowed[0]; i++) {
        int number = seccomp_syscall_resolve_name(allowed[i]);
        if (number != __NR_SCMP_ERROR)
            rc = seccomp_rule_add(ctx, SCMP_ACT_ALLOW, number, 0);
    }
    if (rc == 0)
        rc = allow_conditional(ctx);
    if (rc == 0)
        rc = compile(ctx);
    seccomp_release(ctx);
    return rc;
}

int seccomp_filter_load(void)
{
    int rc = seccomp_filter_prepare();
    if (rc < 0)
        return rc;
    struct sock_fprog filter = {.len = program_length, .filter = program};
    return syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &filter) < 0 ? -errno : 0;
}
