#include "kernel/zygote.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <limits.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/prctl.h>
#include <sys/personality.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/fs.h"
#include "common/log.h"
#include "common/loop.h"
#include "kernel/reaper.h"
#include "kernel/kernelspec.h"
#include "kernel/runtime_files.h"
#include "sandbox/cgroup.h"

#define SPAWN_TIMEOUT_MS 10000
#define RESTART_DELAY_MS 2000
/* Requests sent and not yet answered: a few keep the zygote busy while it clones; the rest wait
   here, so a burst of creates never fills the socket (a full one would block the daemon). */
#define MAX_IN_FLIGHT 4
/* What of a template's ENV its zygote's environment takes (templates.h allows as many). */
#define ZYGOTE_MAX_TEMPLATE_ENV 64

struct zygote {
    char *name; /* the template's */
    char *preload, *cache_dir;
    char *view;  /* the template's view (rootfs.h), or NULL: the host's root */
    char **env;  /* the template's variables, NULL-terminated, or NULL */
    bool huge_code_pages;
    pid_t pid;
    int pidfd, control_fd;
    loop_watch pid_watch, control_watch;
    loop_timer_id restart; /* after it ended */
    bool ready;
    struct {
        zygote_spawn *head, *tail; /* the first `in_flight` are sent */
        int in_flight;
        loop_timer_id timeout; /* for the oldest request in flight */
    } spawns;
};

/* One request: queued (text and descriptors kept until sent), then in flight (sent_at_ms set)
   until the zygote's answer, which comes in the order the requests were sent. */
struct zygote_spawn {
    zygote *owner;
    char *text;
    int fds[5];              /* stdin, stdout, stderr, channel; and a restore's image, or -1 */
    int fd_count;            /* 4, or 5 for a restore (sandbox_spec.image_fd) */
    int64_t sent_at_ms;
    bool awaited;            /* zygote_spawn_abandon() waits: the answer stays here, not to done */
    bool answered;
    pid_t answer_pid;
    zygote_spawned done;
    void *arg;
    zygote_spawn *next;
};

pid_t zygote_process(const zygote *z) { return z && z->ready ? z->pid : 0; }

bool zygote_is_ready(const zygote *z)
{
    return z && z->ready;
}

static void start_process(void *arg);
static void fail_all_spawns(zygote *z, const char *why);

static void release(zygote *z)
{
    if (z->control_fd >= 0) {
        loop_watch_remove(&z->control_watch);
        close(z->control_fd);
        z->control_fd = -1;
    }
    if (z->pidfd >= 0) {
        loop_watch_remove(&z->pid_watch);
        close(z->pidfd);
        z->pidfd = -1;
    }
    z->ready = false;
}

static void on_zygote_exit(void *owner, uint32_t events)
{
    zygote *z = owner;
    siginfo_t info = {0};
    if (waitid(P_PIDFD, (id_t)z->pidfd, &info, WEXITED | WNOHANG) < 0 || info.si_pid == 0)
        return;
    log_warn("zygote%s (pid %d) ended (%s %d); kernels start by exec until it is back", z->name,
             z->pid, info.si_code == CLD_EXITED ? "status" : "signal", info.si_status);
    release(z);
    fail_all_spawns(z, "the zygote ended before it answered");
    z->restart = loop_timer_add(RESTART_DELAY_MS, start_process, z);
}

static void on_spawn_answer(zygote *z, const char *text);

/* One message from the zygote into `text`; false if there is none (yet, or any more: end of
   file means the zygote is gone, and its pidfd reports the exit). */
static bool receive_message(zygote *z, char *text, size_t size)
{
    ssize_t n = recv(z->control_fd, text, size - 1, MSG_DONTWAIT);
    if (n <= 0) {
        if (n == 0 || (errno != EAGAIN && errno != EINTR))
            loop_watch_modify(&z->control_watch, 0);
        return false;
    }
    text[n] = '\0';
    return true;
}

/* After the first message, each answers the oldest request in flight, read as it comes: the
   loop never waits for a clone (which takes the zygote milliseconds of sandbox setup and a
   fork). */
static void on_answer_ready(void *owner, uint32_t events)
{
    zygote *z = owner;
    char text[65536];
    if (receive_message(z, text, sizeof text))
        on_spawn_answer(z, text);
}

/* The first message is {"ready": bool, "failed": [...], "threads": n, "hot_pages": n,
   "hot_pages_problem": why, ...}. */
static void on_first_message(void *owner, uint32_t events)
{
    zygote *z = owner;
    char text[65536];
    if (!receive_message(z, text, sizeof text))
        return;
    json_t *message = json_loads(text, 0, NULL);
    json_t *failed = json_object_get(message, "failed");
    for (size_t i = 0; i < json_array_size(failed); i++)
        log_warn("zygote%s: could not preload %s", z->name,
                 json_string_value(json_array_get(failed, i)));
    z->ready = json_is_true(json_object_get(message, "ready"));
    const char *hot_pages_problem = json_string_value(json_object_get(message, "hot_pages_problem"));
    if (hot_pages_problem) /* kernels start all the same, only with more page faults */
        log_warn("zygote%s: no pages to copy ahead into new kernels: %s", z->name,
                 hot_pages_problem);
    const char *not_pinned = json_string_value(json_object_get(message, "hot_pages_not_pinned"));
    if (not_pinned)
        log_warn("zygote%s: new kernels copy their hot pages themselves (not pinned: %s)", z->name,
                 not_pinned);
    const char *code_problem = json_string_value(json_object_get(message, "huge_code_problem"));
    if (code_problem) /* that code stays on the file's 4 KiB pages: slower starts, as correct */
        log_warn("zygote%s: library code not moved onto huge pages: %s", z->name, code_problem);
    char huge_code[128] = ""; /* only with --huge-code-pages */
    if (json_object_get(message, "huge_code_windows"))
        snprintf(huge_code, sizeof huge_code,
                 ", and shares %lld MiB of code on 2 MiB pages (%lld MiB from the hugetlb pool)",
                 2 * (long long)json_integer_value(json_object_get(message, "huge_code_windows")),
                 2 * (long long)json_integer_value(json_object_get(message, "huge_code_from_pool")));
    if (z->ready)
        log_info("zygote%s ready (pid %d, preloaded %s; a new kernel gets %lld pages copied %s%s)",
                 z->name, z->pid, *z->preload ? z->preload : "no modules of its own",
                 (long long)json_integer_value(json_object_get(message, "hot_pages")),
                 not_pinned ? "by itself" : "at its fork", huge_code);
    else
        log_warn("zygote%s is not usable (threads alive: %lld); kernels start by exec", z->name,
                 (long long)json_integer_value(json_object_get(message, "threads")));
    json_decref(message);
    loop_watch_remove(&z->control_watch);
    if (z->ready)
        loop_watch_add(&z->control_watch, z->control_fd, EPOLLIN, on_answer_ready, z);
}

/* The zygote of a template with a view sees the template's /usr (and an imported root's /etc)
   in a mount namespace of its own, made in the forked child before exec: its preload imports the
   template's packages, the kernel binary loads the libraries of that /usr, and its clones, which
   bind the same view (rootfs_template), start from what it preloaded. Private: the binds never
   reach the host. What the daemon mounts later (each new sandbox's workspace image, a named
   volume) cannot reach this namespace either (the host's / is often private too), so each clone
   goes back to the daemon's mount namespace before it builds its root (runtime/zygote.c, through
   --host-mount-namespace-fd). False if the view cannot be entered: the child then exits, and
   the template's kernels start by exec. */
static bool enter_template_view(const zygote *z)
{
    if (!z->view)
        return true;
    char usr[4200], etc[4200];
    snprintf(usr, sizeof usr, "%.4000s/usr", z->view);
    snprintf(etc, sizeof etc, "%.4000s/etc", z->view);
    if (unshare(CLONE_NEWNS) < 0 || mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0 ||
        mount(usr, "/usr", NULL, MS_BIND | MS_REC, NULL) < 0)
        return false;
    struct stat st;
    return lstat(etc, &st) < 0 || !S_ISDIR(st.st_mode) ||
           mount(etc, "/etc", NULL, MS_BIND | MS_REC, NULL) == 0;
}

static void exec_zygote(const zygote *z, int control_fd, const char *home_cgroup)
{
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    /* The daemon's mount namespace, kept for the clones (fd 4); never a sandbox's: every clone
       closes what is above its fds 0-3 before it runs anything (sandbox.c). */
    int host_mount_namespace = z->view ? open("/proc/self/ns/mnt", O_RDONLY | O_CLOEXEC) : -1;
    if (z->view && host_mount_namespace < 0)
        _exit(126);
    if (!enter_template_view(z)) {
        dprintf(2, "cellbox: the zygote%s cannot enter its template's view %s: %s\n", z->name,
                z->view, strerror(errno));
        _exit(126);
    }
    int devnull = open("/dev/null", O_RDONLY);
    dup2(devnull, 0);
    dup2(control_fd, 3);
    if (host_mount_namespace >= 0)
        dup2(host_mount_namespace, 4);
    syscall(SYS_close_range, host_mount_namespace >= 0 ? 5 : 4, ~0U, 0);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    char python_arg[4200], preload_arg[1024], home[4200], mpl[4200], ipython[4200], cgroup_arg[4200];
    snprintf(python_arg, sizeof python_arg, "--python-dir=%.4000s", runtime_files_python_dir());
    snprintf(preload_arg, sizeof preload_arg, "--preload=%.1000s", z->preload);
    snprintf(cgroup_arg, sizeof cgroup_arg, "--home-cgroup=%.4000s", home_cgroup);
    snprintf(home, sizeof home, "HOME=%.4000s", z->cache_dir);
    snprintf(mpl, sizeof mpl, "MPLCONFIGDIR=%.4000s/matplotlib", z->cache_dir);
    snprintf(ipython, sizeof ipython, "IPYTHONDIR=%.4000s/ipython", z->cache_dir);
    char *argv[10] = {(char *)runtime_files_kernel_binary(), "--zygote", "--control-fd=3", python_arg,
                      "--inside-python-dir=/opt/cellbox/share/cellbox/python", preload_arg};
    int argc = 6;
    if (home_cgroup[0])
        argv[argc++] = cgroup_arg;
    if (z->huge_code_pages)
        argv[argc++] = "--huge-code";
    if (host_mount_namespace >= 0)
        argv[argc++] = "--host-mount-namespace-fd=4";
    argv[argc] = NULL;
    /* One BLAS/OpenMP thread: the zygote must have no thread but its own when it forks. The
       template's variables come after ours, as in its kernels (kernel.c), so that what its ENV
       set (PYTHONPATH, a package's settings) holds while the preload imports. */
    char *envp[12 + ZYGOTE_MAX_TEMPLATE_ENV] = {
        "PATH=/usr/local/bin:/usr/bin:/bin", "LANG=C.UTF-8", home, mpl, ipython,
        "MPLBACKEND=module://matplotlib_inline.backend_inline", "OPENBLAS_NUM_THREADS=1",
        "OMP_NUM_THREADS=1", "MKL_NUM_THREADS=1", "PYTHONDONTWRITEBYTECODE=1"};
    int envc = 10;
    for (int i = 0; z->env && z->env[i] && i < ZYGOTE_MAX_TEMPLATE_ENV; i++)
        envp[envc++] = z->env[i];
    envp[envc] = NULL;
    /* The same layout in every zygote of a build (docs/security.md, "Process images"): a full
       process image is then restorable by the next daemon's zygote. Every sandbox shares its
       zygote's layout anyway, so this takes nothing from the isolation between sandboxes. */
    if (personality(ADDR_NO_RANDOMIZE) < 0)
        _exit(127);
    execve(argv[0], argv, envp);
    _exit(127);
}

static void start_process(void *arg)
{
    zygote *z = arg;
    z->restart = 0;
    int pair[2];
    if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, pair) < 0) {
        log_warn("zygote%s: cannot create its control socket: %s", z->name, strerror(errno));
        return;
    }
    /* Where the zygote returns after standing in a new sandbox's memory cgroup (zygote.c in
       runtime/): its own, which is ours. */
    char home_cgroup[PATH_MAX + 64] = "";
    if (!cgroup_own_memory_procs_file(home_cgroup, sizeof home_cgroup))
        home_cgroup[0] = '\0';
    pid_t pid = fork();
    if (pid == 0)
        exec_zygote(z, pair[1], home_cgroup);
    close(pair[1]);
    if (pid < 0) {
        log_warn("zygote%s: cannot fork: %s", z->name, strerror(errno));
        close(pair[0]);
        return;
    }
    z->pid = pid;
    z->control_fd = pair[0];
    z->pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
    loop_watch_add(&z->control_watch, z->control_fd, EPOLLIN, on_first_message, z);
    loop_watch_add(&z->pid_watch, z->pidfd, EPOLLIN, on_zygote_exit, z);
}

zygote *zygote_start(const kernelspec *spec, const char *cache_dir, bool huge_code_pages)
{
    zygote *z = calloc(1, sizeof *z);
    /* The built-in template's is "the zygote" in the log, as when it was the only one. */
    bool built_in = strcmp(spec->name, KERNELSPEC_BUILT_IN) == 0;
    if (!z || asprintf(&z->name, "%s%s", built_in ? "" : " of ", built_in ? "" : spec->name) < 0)
        die("out of memory");
    z->pidfd = z->control_fd = -1;
    z->huge_code_pages = huge_code_pages;
    z->preload = strdup(spec->preload);
    z->cache_dir = strdup(cache_dir);
    if (!z->preload || !z->cache_dir ||
        (spec->template.view && !(z->view = strdup(spec->template.view))))
        die("out of memory");
    size_t env_count = 0;
    while (spec->env && spec->env[env_count])
        env_count++;
    if (env_count && !(z->env = calloc(env_count + 1, sizeof *z->env)))
        die("out of memory");
    for (size_t i = 0; i < env_count; i++)
        if (!(z->env[i] = strdup(spec->env[i])))
            die("out of memory");
    if (fs_mkdir_p(cache_dir, 0700) < 0)
        log_warn("zygote%s: cannot create %s: %s", z->name, cache_dir, strerror(errno));
    start_process(z);
    return z;
}

static json_t *spawn_request_json(const sandbox_spec *spec, const char *for_kernel_id)
{
    json_t *procs = json_array(), *env = json_array(), *volumes = json_array();
    for (int i = 0; spec->root.volumes && i < spec->root.volumes->count; i++) {
        const rootfs_volume *v = &spec->root.volumes->mount[i];
        json_array_append_new(volumes, json_pack("[s,s,s]", v->name, v->host, v->path));
    }
    for (int i = 0; i < SANDBOX_MAX_CGROUP_FILES && spec->cgroup_procs[i]; i++)
        json_array_append_new(procs, json_string(spec->cgroup_procs[i]));
    for (char *const *entry = spec->envp; entry && *entry; entry++)
        json_array_append_new(env, json_string(*entry));
    const char *view = spec->root.template ? spec->root.template->view : NULL;
    return json_pack("{s:b, s:s*, s:s, s:s, s:s, s:s, s:i, s:I, s:b, s:i, s:I, s:o, s:s*, s:o, s:o, s:s*}",
                     "restore", spec->image_fd > 2, "template_view", view, "kernel_id",
                     for_kernel_id, "root_mount_point", spec->root.mount_point, "workspace",
                     spec->root.workspace, "runtime_dir", spec->root.runtime_dir, "uid",
                     (int)spec->root.uid, "tmp_bytes", (json_int_t)spec->root.tmp_bytes,
                     "network", spec->network, "open_files", spec->open_files, "file_size",
                     (json_int_t)spec->file_size, "cgroup_procs", procs, "memory_cgroup_procs",
                     spec->memory_cgroup_procs, "env", env, "volumes", volumes, "nameserver",
                     spec->root.nameserver);
}

/* ---- requests in flight ---- */

static void free_spawn(zygote_spawn *spawn)
{
    for (int i = 0; i < spawn->fd_count; i++)
        if (spawn->fds[i] >= 0)
            close(spawn->fds[i]);
    free(spawn->text);
    free(spawn);
}

/* The pid in a clone request's answer, or -1 with `why`. */
static pid_t parse_answer(const char *text, char *why, size_t why_size)
{
    json_t *reply = json_loads(text, 0, NULL);
    json_t *pid_value = json_object_get(reply, "pid");
    pid_t pid = json_is_integer(pid_value) ? (pid_t)json_integer_value(pid_value) : -1;
    if (pid <= 0)
        snprintf(why, why_size, "the zygote could not clone: %s",
                 json_string_value(json_object_get(reply, "error")) ?: "no pid in its answer");
    json_decref(reply);
    return pid;
}

static void on_spawn_timeout(void *arg);

static void arm_timeout(zygote *z)
{
    if (z->spawns.timeout) {
        loop_timer_cancel(z->spawns.timeout);
        z->spawns.timeout = 0;
    }
    if (z->spawns.in_flight > 0) {
        int64_t left = z->spawns.head->sent_at_ms + SPAWN_TIMEOUT_MS - clock_monotonic_ms();
        z->spawns.timeout = loop_timer_add(left > 0 ? left : 0, on_spawn_timeout, z);
    }
}

static int send_request(zygote *z, const char *text, const int *fds, int fd_count)
{
    char control[CMSG_SPACE(sizeof(int) * 5)];
    memset(control, 0, sizeof control);
    struct iovec iov = {.iov_base = (void *)text, .iov_len = strlen(text)};
    struct msghdr header = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = control,
                            .msg_controllen = sizeof control};
    struct cmsghdr *cmsg = CMSG_FIRSTHDR(&header);
    cmsg->cmsg_level = SOL_SOCKET;
    cmsg->cmsg_type = SCM_RIGHTS;
    cmsg->cmsg_len = CMSG_LEN(sizeof(int) * (size_t)fd_count);
    header.msg_controllen = CMSG_SPACE(sizeof(int) * (size_t)fd_count);
    memcpy(CMSG_DATA(cmsg), fds, sizeof(int) * (size_t)fd_count);
    return sendmsg(z->control_fd, &header, MSG_NOSIGNAL | MSG_DONTWAIT) < 0 ? -1 : 0;
}

/* The zygote cannot take requests (a send failed, or it did not answer): it is killed, and
   kernels start by exec until it is back. */
static void give_up_on_zygote(zygote *z, const char *why)
{
    log_warn("zygote%s (pid %d): %s; killing it, kernels start by exec until it is back", z->name,
             z->pid, why);
    z->ready = false;
    if (z->pid > 0)
        kill(z->pid, SIGKILL);
}

/* Sends queued requests while fewer than MAX_IN_FLIGHT are unanswered; -1, with `why`, if the
   zygote cannot take them (the caller fails what is waiting). */
static int send_queued(zygote *z, char *why, size_t why_size)
{
    zygote_spawn *next = z->spawns.head;
    for (int i = 0; i < z->spawns.in_flight && next; i++)
        next = next->next;
    for (; next && z->spawns.in_flight < MAX_IN_FLIGHT; next = next->next) {
        if (send_request(z, next->text, next->fds, next->fd_count) < 0) {
            snprintf(why, why_size, "cannot send the zygote a request: %s", strerror(errno));
            give_up_on_zygote(z, why);
            return -1;
        }
        for (int i = 0; i < next->fd_count; i++) { /* the zygote has its own copies now */
            close(next->fds[i]);
            next->fds[i] = -1;
        }
        free(next->text);
        next->text = NULL;
        next->sent_at_ms = clock_monotonic_ms();
        if (z->spawns.in_flight++ == 0)
            arm_timeout(z);
    }
    return 0;
}

/* Every request still waiting gets its answer now: `why`. The list is detached first, since a
   requester falls back to exec from its callback. */
static void fail_all_spawns(zygote *z, const char *why)
{
    zygote_spawn *spawn = z->spawns.head;
    z->spawns.head = z->spawns.tail = NULL;
    z->spawns.in_flight = 0;
    arm_timeout(z);
    while (spawn) {
        zygote_spawn *next = spawn->next;
        if (spawn->awaited) {
            spawn->answered = true; /* freed by its waiter */
            spawn->answer_pid = -1;
        } else {
            spawn->done(spawn->arg, -1, why);
            free_spawn(spawn);
        }
        spawn = next;
    }
}

static void on_spawn_timeout(void *arg)
{
    zygote *z = arg;
    z->spawns.timeout = 0;
    char why[96];
    snprintf(why, sizeof why, "it did not answer a clone request in %d s", SPAWN_TIMEOUT_MS / 1000);
    give_up_on_zygote(z, why);
    fail_all_spawns(z, "the zygote did not answer");
}

static void fail_all_spawns_later(void *arg)
{
    fail_all_spawns(arg, "the zygote could not take the request");
}

static void on_spawn_answer(zygote *z, const char *text)
{
    zygote_spawn *spawn = z->spawns.in_flight > 0 ? z->spawns.head : NULL;
    if (!spawn) {
        log_warn("zygote%s: an answer nobody asked for: %.200s", z->name, text);
        return;
    }
    z->spawns.head = spawn->next;
    if (!z->spawns.head)
        z->spawns.tail = NULL;
    z->spawns.in_flight--;
    arm_timeout(z);
    char why[256] = "";
    pid_t pid = parse_answer(text, why, sizeof why);
    if (spawn->awaited) {
        spawn->answered = true; /* freed by its waiter */
        spawn->answer_pid = pid;
    } else {
        spawn->done(spawn->arg, pid, why);
        free_spawn(spawn);
    }
    char why_not[160];
    if (send_queued(z, why_not, sizeof why_not) < 0)
        fail_all_spawns(z, why_not);
}

/* A request not sent yet leaves the queue: the zygote never sees it. */
static void drop_queued(zygote_spawn *spawn)
{
    zygote *z = spawn->owner;
    zygote_spawn *before = NULL;
    for (zygote_spawn **at = &z->spawns.head; *at; before = *at, at = &(*at)->next) {
        if (*at == spawn) {
            *at = spawn->next;
            if (z->spawns.tail == spawn)
                z->spawns.tail = before;
            break;
        }
    }
    free_spawn(spawn);
}

zygote_spawn *zygote_spawn_start(zygote *z, const sandbox_spec *spec, const char *for_kernel_id,
                                 zygote_spawned done, void *arg, char *why, size_t why_size)
{
    if (!zygote_is_ready(z)) {
        snprintf(why, why_size, "the zygote is not ready");
        return NULL;
    }
    json_t *request = spawn_request_json(spec, for_kernel_id);
    char *text = json_dumps(request, JSON_COMPACT);
    json_decref(request);
    zygote_spawn *spawn = calloc(1, sizeof *spawn);
    if (!text || !spawn)
        die("out of memory");
    spawn->owner = z;
    spawn->text = text;
    spawn->done = done;
    spawn->arg = arg;
    spawn->fd_count = spec->image_fd > 2 ? 5 : 4;
    const int wanted[5] = {spec->fds[0], spec->fds[1], spec->fds[2], spec->fds[3], spec->image_fd};
    for (int i = 0; i < 5; i++)
        spawn->fds[i] = -1;
    for (int i = 0; i < spawn->fd_count; i++) { /* the caller closes its own as soon as we return */
        spawn->fds[i] = fcntl(wanted[i], F_DUPFD_CLOEXEC, 3);
        if (spawn->fds[i] < 0) {
            snprintf(why, why_size, "cannot keep the sandbox's descriptors: %s", strerror(errno));
            free_spawn(spawn);
            return NULL;
        }
    }
    if (z->spawns.tail)
        z->spawns.tail->next = spawn;
    else
        z->spawns.head = spawn;
    z->spawns.tail = spawn;
    if (send_queued(z, why, why_size) < 0) {
        /* This request was not sent: its caller starts the kernel by exec at once. Those sent or
           queued before it get their answer from the loop, not from inside this call. */
        drop_queued(spawn);
        loop_defer(fail_all_spawns_later, z);
        return NULL;
    }
    return spawn;
}

void zygote_spawn_abandon(zygote_spawn *spawn)
{
    zygote *z = spawn->owner;
    if (!spawn->sent_at_ms) {
        drop_queued(spawn);
        return;
    }
    spawn->awaited = true;
    while (!spawn->answered) {
        int64_t left = z->spawns.head->sent_at_ms + SPAWN_TIMEOUT_MS - clock_monotonic_ms();
        struct pollfd readable = {.fd = z->control_fd, .events = POLLIN};
        int ready = left > 0 ? poll(&readable, 1, (int)left) : 0;
        if (ready < 0 && errno == EINTR)
            continue;
        if (ready <= 0) {
            on_spawn_timeout(z); /* every request waiting fails, this one too */
            break;
        }
        char text[65536];
        ssize_t n = recv(z->control_fd, text, sizeof text - 1, MSG_DONTWAIT);
        if (n < 0 && (errno == EAGAIN || errno == EINTR))
            continue;
        if (n <= 0) {
            give_up_on_zygote(z, "it closed its control socket");
            fail_all_spawns(z, "the zygote closed its control socket");
            break;
        }
        text[n] = '\0';
        on_spawn_answer(z, text); /* the answers before ours go where they belong */
    }
    pid_t pid = spawn->answer_pid;
    free_spawn(spawn);
    if (pid <= 0)
        return;
    int pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
    kill(-pid, SIGKILL);
    if (pidfd >= 0)
        reaper_take(pidfd);
    else
        waitpid(pid, NULL, 0);
}

/* At exit, after the loop stopped: the answers still due are waited for (briefly), so a sandbox
   cloned for a kernel that no longer exists is killed and reaped, not left behind. */
static void dispose_answers_due(zygote *z)
{
    while (z->spawns.in_flight > 0 && z->control_fd >= 0) {
        struct pollfd readable = {.fd = z->control_fd, .events = POLLIN};
        char text[4096];
        ssize_t n = -1;
        if (poll(&readable, 1, 2000) == 1)
            n = recv(z->control_fd, text, sizeof text - 1, 0);
        if (n <= 0)
            break;
        text[n] = '\0';
        char why[256];
        pid_t pid = parse_answer(text, why, sizeof why);
        if (pid > 0) {
            kill(-pid, SIGKILL);
            waitpid(pid, NULL, 0);
        }
        zygote_spawn *spawn = z->spawns.head;
        z->spawns.head = spawn->next;
        z->spawns.in_flight--;
        free_spawn(spawn);
    }
    for (zygote_spawn *spawn = z->spawns.head, *next; spawn; spawn = next) {
        next = spawn->next;
        free_spawn(spawn);
    }
    z->spawns.head = z->spawns.tail = NULL;
    z->spawns.in_flight = 0;
}

void zygote_stop(zygote *z)
{
    if (!z)
        return;
    if (z->restart)
        loop_timer_cancel(z->restart);
    if (z->spawns.timeout) {
        loop_timer_cancel(z->spawns.timeout);
        z->spawns.timeout = 0;
    }
    dispose_answers_due(z);
    if (z->pid > 0 && z->pidfd >= 0) {
        kill(z->pid, SIGKILL);
        waitid(P_PIDFD, (id_t)z->pidfd, &(siginfo_t){0}, WEXITED);
    }
    release(z);
    free(z->name);
    free(z->preload);
    free(z->cache_dir);
    free(z->view);
    for (size_t i = 0; z->env && z->env[i]; i++)
        free(z->env[i]);
    free(z->env);
    free(z);
}
