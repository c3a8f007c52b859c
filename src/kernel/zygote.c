#include "kernel/zygote.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/fs.h"
#include "common/log.h"
#include "common/loop.h"
#include "kernel/kernelspec.h"

#define SPAWN_TIMEOUT_MS 10000
#define RESTART_DELAY_MS 2000

static struct {
    char *preload, *cache_dir;
    pid_t pid;
    int pidfd, control_fd;
    loop_watch pid_watch, control_watch;
    bool ready;
} zygote = {.pidfd = -1, .control_fd = -1};

bool zygote_is_ready(void) { return zygote.ready; }

static void start_process(void *unused);

static void release(void)
{
    if (zygote.control_fd >= 0) {
        loop_watch_remove(&zygote.control_watch);
        close(zygote.control_fd);
        zygote.control_fd = -1;
    }
    if (zygote.pidfd >= 0) {
        loop_watch_remove(&zygote.pid_watch);
        close(zygote.pidfd);
        zygote.pidfd = -1;
    }
    zygote.ready = false;
}

static void on_zygote_exit(void *owner, uint32_t events)
{
    siginfo_t info = {0};
    if (waitid(P_PIDFD, (id_t)zygote.pidfd, &info, WEXITED | WNOHANG) < 0 || info.si_pid == 0)
        return;
    log_warn("zygote (pid %d) ended (%s %d); kernels start by exec until it is back",
             zygote.pid, info.si_code == CLD_EXITED ? "status" : "signal", info.si_status);
    release();
    loop_timer_add(RESTART_DELAY_MS, start_process, NULL);
}

/* The first message is {"ready": bool, "failed": [...], "threads": n, "hot_pages": n,
   "hot_pages_problem": why}; anything after that
   arrives only as a reply to a spawn, read there. End of file means the zygote is gone. */
static void on_control_ready(void *owner, uint32_t events)
{
    char text[65536];
    ssize_t n = recv(zygote.control_fd, text, sizeof text - 1, MSG_DONTWAIT);
    if (n <= 0) {
        if (n == 0 || (errno != EAGAIN && errno != EINTR))
            loop_watch_modify(&zygote.control_watch, 0); /* its pidfd reports the exit */
        return;
    }
    text[n] = '\0';
    json_t *message = json_loads(text, 0, NULL);
    json_t *failed = json_object_get(message, "failed");
    for (size_t i = 0; i < json_array_size(failed); i++)
        log_warn("zygote: could not preload %s", json_string_value(json_array_get(failed, i)));
    zygote.ready = json_is_true(json_object_get(message, "ready"));
    const char *hot_pages_problem = json_string_value(json_object_get(message, "hot_pages_problem"));
    if (hot_pages_problem) /* kernels start all the same, only with more page faults */
        log_warn("zygote: no pages to copy ahead into new kernels: %s", hot_pages_problem);
    if (zygote.ready)
        log_info("zygote ready (pid %d, preloaded %s; a new kernel copies %lld pages ahead)",
                 zygote.pid, zygote.preload,
                 (long long)json_integer_value(json_object_get(message, "hot_pages")));
    else
        log_warn("zygote is not usable (threads alive: %lld); kernels start by exec",
                 (long long)json_integer_value(json_object_get(message, "threads")));
    json_decref(message);
    loop_watch_modify(&zygote.control_watch, 0); /* replies are read synchronously */
}

static void exec_zygote(int control_fd)
{
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    int devnull = open("/dev/null", O_RDONLY);
    dup2(devnull, 0);
    dup2(control_fd, 3);
    syscall(SYS_close_range, 4, ~0U, 0);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    char python_arg[4200], preload_arg[1024], home[4200], mpl[4200], ipython[4200];
    snprintf(python_arg, sizeof python_arg, "--python-dir=%.4000s", kernelspec_python_dir());
    snprintf(preload_arg, sizeof preload_arg, "--preload=%.1000s", zygote.preload);
    snprintf(home, sizeof home, "HOME=%.4000s", zygote.cache_dir);
    snprintf(mpl, sizeof mpl, "MPLCONFIGDIR=%.4000s/matplotlib", zygote.cache_dir);
    snprintf(ipython, sizeof ipython, "IPYTHONDIR=%.4000s/ipython", zygote.cache_dir);
    char *argv[] = {(char *)kernelspec_kernel_binary(), "--zygote", "--control-fd=3", python_arg,
                    "--inside-python-dir=/opt/cellbox/share/cellbox/python", preload_arg, NULL};
    /* One BLAS/OpenMP thread: the zygote must have no thread but its own when it forks. */
    char *envp[] = {"PATH=/usr/local/bin:/usr/bin:/bin", "LANG=C.UTF-8", home, mpl, ipython,
                    "MPLBACKEND=module://matplotlib_inline.backend_inline", "OPENBLAS_NUM_THREADS=1",
                    "OMP_NUM_THREADS=1", "MKL_NUM_THREADS=1", "PYTHONDONTWRITEBYTECODE=1", NULL};
    execve(argv[0], argv, envp);
    _exit(127);
}

static void start_process(void *unused)
{
    int pair[2];
    if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, pair) < 0) {
        log_warn("zygote: cannot create its control socket: %s", strerror(errno));
        return;
    }
    pid_t pid = fork();
    if (pid == 0)
        exec_zygote(pair[1]);
    close(pair[1]);
    if (pid < 0) {
        log_warn("zygote: cannot fork: %s", strerror(errno));
        close(pair[0]);
        return;
    }
    zygote.pid = pid;
    zygote.control_fd = pair[0];
    zygote.pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
    loop_watch_add(&zygote.control_watch, zygote.control_fd, EPOLLIN, on_control_ready, NULL);
    loop_watch_add(&zygote.pid_watch, zygote.pidfd, EPOLLIN, on_zygote_exit, NULL);
}

void zygote_start(const char *preload, const char *cache_dir)
{
    zygote.preload = strdup(preload);
    zygote.cache_dir = strdup(cache_dir);
    if (fs_mkdir_p(cache_dir, 0700) < 0)
        log_warn("zygote: cannot create %s: %s", cache_dir, strerror(errno));
    start_process(NULL);
}

static json_t *spawn_request_json(const sandbox_spec *spec, const char *kernel_id)
{
    json_t *procs = json_array(), *env = json_array();
    for (int i = 0; i < SANDBOX_MAX_CGROUP_FILES && spec->cgroup_procs[i]; i++)
        json_array_append_new(procs, json_string(spec->cgroup_procs[i]));
    for (char *const *entry = spec->envp; entry && *entry; entry++)
        json_array_append_new(env, json_string(*entry));
    return json_pack("{s:s, s:s, s:s, s:s, s:i, s:I, s:b, s:i, s:I, s:o, s:o}", "kernel_id",
                     kernel_id, "root_mount_point", spec->root.mount_point, "workspace",
                     spec->root.workspace, "runtime_dir", spec->root.runtime_dir, "uid",
                     (int)spec->root.uid, "tmp_bytes", (json_int_t)spec->root.tmp_bytes,
                     "network", spec->network, "open_files", spec->open_files, "file_size",
                     (json_int_t)spec->file_size, "cgroup_procs", procs, "env", env);
}

static int send_request(const char *text, const int fds[4])
{
    char control[CMSG_SPACE(sizeof(int) * 4)];
    memset(control, 0, sizeof control);
    struct iovec iov = {.iov_base = (void *)text, .iov_len = strlen(text)};
    struct msghdr header = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = control,
                            .msg_controllen = sizeof control};
    struct cmsghdr *cmsg = CMSG_FIRSTHDR(&header);
    cmsg->cmsg_level = SOL_SOCKET;
    cmsg->cmsg_type = SCM_RIGHTS;
    cmsg->cmsg_len = CMSG_LEN(sizeof(int) * 4);
    memcpy(CMSG_DATA(cmsg), fds, sizeof(int) * 4);
    return sendmsg(zygote.control_fd, &header, MSG_NOSIGNAL) < 0 ? -1 : 0;
}

pid_t zygote_spawn(const sandbox_spec *spec, const char *kernel_id, char *why, size_t why_size)
{
    if (!zygote.ready) {
        snprintf(why, why_size, "the zygote is not ready");
        return -1;
    }
    json_t *request = spawn_request_json(spec, kernel_id);
    char *text = json_dumps(request, JSON_COMPACT);
    json_decref(request);
    int rc = text ? send_request(text, spec->fds) : -1;
    free(text);
    struct pollfd wait_for = {.fd = zygote.control_fd, .events = POLLIN};
    char reply_text[4096];
    ssize_t n = -1;
    if (rc == 0 && poll(&wait_for, 1, SPAWN_TIMEOUT_MS) == 1)
        n = recv(zygote.control_fd, reply_text, sizeof reply_text - 1, 0);
    if (n <= 0) {
        snprintf(why, why_size, "the zygote did not answer (%s)", n == 0 ? "it closed" : strerror(errno));
        zygote.ready = false; /* it is broken: exec until it is restarted */
        if (zygote.pid > 0)
            kill(zygote.pid, SIGKILL);
        return -1;
    }
    reply_text[n] = '\0';
    json_t *reply = json_loads(reply_text, 0, NULL);
    json_t *pid = json_object_get(reply, "pid");
    pid_t result = json_is_integer(pid) ? (pid_t)json_integer_value(pid) : -1;
    if (result <= 0)
        snprintf(why, why_size, "the zygote could not clone: %s",
                 json_string_value(json_object_get(reply, "error")) ?: "no pid in its answer");
    json_decref(reply);
    return result;
}

void zygote_stop(void)
{
    if (zygote.pid > 0 && zygote.pidfd >= 0) {
        kill(zygote.pid, SIGKILL);
        waitid(P_PIDFD, (id_t)zygote.pidfd, &(siginfo_t){0}, WEXITED);
    }
    release();
}
