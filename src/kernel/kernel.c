#include "kernel/kernel.h"

#include <errno.h>
#include <fcntl.h>
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

#include "common/buffer.h"
#include "common/clock.h"
#include "common/log.h"
#include "common/loop.h"
#include "common/text.h"
#include "kernel/message.h"

#define MAX_FRAME_BYTES (64u << 20)   /* docs/kernel-protocol.md */
#define READ_CHUNK 65536
#define MAX_READ_PER_WAKEUP (1u << 20) /* one noisy kernel must not starve the others */
#define CHANNEL_FD 3

typedef struct output_pipe {
    int fd;
    loop_watch watch;
    buffer partial;     /* an incomplete UTF-8 sequence carried to the next read */
    const char *name;   /* "stdout" or "stderr" */
    struct kernel *owner;
} output_pipe;

struct kernel {
    char id[UUID_STRING_LENGTH + 1];
    char session[UUID_STRING_LENGTH + 1]; /* for messages the daemon writes on its behalf */
    const kernelspec *spec;
    char *workspace;
    json_t *env;                /* extra environment, kept for restarts */
    kernel_state state;
    int64_t last_activity_us;
    pid_t pid;
    int pidfd;
    loop_watch pid_watch;
    int channel_fd;
    loop_watch channel_watch;
    buffer channel_in, channel_out;
    output_pipe out, err;
    json_t *current_request;    /* header of the request the kernel said it is busy with */
    json_int_t execution_count; /* last seen, for replies the daemon writes */
    char death_reason[192];
    bool shutdown_requested;    /* a client asked it to shut down: exit 0 is expected */
    int connections;
    void *subscribers;
};

static kernel_message_handler message_handler;

void kernel_set_message_handler(kernel_message_handler handler) { message_handler = handler; }

const char *kernel_id(const kernel *k) { return k->id; }
const kernelspec *kernel_spec(const kernel *k) { return k->spec; }
const char *kernel_session(const kernel *k) { return k->session; }
const char *kernel_workspace(const kernel *k) { return k->workspace; }
kernel_state kernel_get_state(const kernel *k) { return k->state; }
const char *kernel_death_reason(const kernel *k) { return k->death_reason; }
int64_t kernel_last_activity_us(const kernel *k) { return k->last_activity_us; }
void kernel_touch(kernel *k) { k->last_activity_us = clock_wall_us(); }
json_t *kernel_current_request(const kernel *k) { return k->current_request; }
int kernel_connection_count(const kernel *k) { return k->connections; }
void kernel_set_connection_count(kernel *k, int count) { k->connections = count; }
void *kernel_subscribers(const kernel *k) { return k->subscribers; }
void kernel_set_subscribers(kernel *k, void *subscribers) { k->subscribers = subscribers; }

const char *kernel_state_name(kernel_state state)
{
    switch (state) {
    case KERNEL_STARTING: return "starting";
    case KERNEL_IDLE: return "idle";
    case KERNEL_BUSY: return "busy";
    case KERNEL_DEAD: return "dead";
    }
    return "unknown";
}

/* Hands a message to the channels module, then drops our reference. */
static void emit(kernel *k, const char *channel, json_t *message)
{
    json_object_set_new(message, "channel", json_string(channel));
    if (message_handler)
        message_handler(k, channel, message);
    json_decref(message);
}

/* ---- processes we no longer care about still have to be reaped ---- */

typedef struct orphan {
    int pidfd;
    loop_watch watch;
} orphan;

static void free_orphan(void *arg) { free(arg); }

static void on_orphan_exit(void *owner, uint32_t events)
{
    orphan *o = owner;
    siginfo_t info = {0};
    if (waitid(P_PIDFD, (id_t)o->pidfd, &info, WEXITED | WNOHANG) < 0 || info.si_pid != 0) {
        loop_watch_remove(&o->watch);
        close(o->pidfd);
        loop_defer(free_orphan, o);
    }
}

static void reap_in_background(int pidfd)
{
    orphan *o = calloc(1, sizeof *o);
    if (!o)
        die("out of memory");
    o->pidfd = pidfd;
    loop_watch_add(&o->watch, pidfd, EPOLLIN, on_orphan_exit, o);
}

/* ---- starting the process ---- */

static int pidfd_open_compat(pid_t pid) { return (int)syscall(SYS_pidfd_open, pid, 0); }

typedef struct spawn_plan {
    char *argv[4];
    char **envp;
    size_t env_count;
} spawn_plan;

static void plan_add_env(spawn_plan *plan, const char *name, const char *value)
{
    char **grown = realloc(plan->envp, (plan->env_count + 2) * sizeof *grown);
    if (!grown || asprintf(&grown[plan->env_count], "%s=%s", name, value) < 0)
        die("out of memory");
    plan->envp = grown;
    plan->env_count++;
    plan->envp[plan->env_count] = NULL;
}

/* The kernel's environment is built from scratch: nothing of the daemon's (its token above all)
   reaches a kernel. Request variables come in already filtered to KERNEL_*. */
static void plan_environment(spawn_plan *plan, const kernel *k)
{
    plan_add_env(plan, "PATH", "/usr/local/bin:/usr/bin:/bin");
    plan_add_env(plan, "HOME", k->workspace);
    plan_add_env(plan, "LANG", "C.UTF-8");
    plan_add_env(plan, "PYTHONUNBUFFERED", "1");
    plan_add_env(plan, "MPLBACKEND", "module://matplotlib_inline.backend_inline");
    plan_add_env(plan, "CELLBOX_KERNEL_ID", k->id);
    const char *name;
    json_t *value;
    json_object_foreach(k->env, name, value)
    {
        if (json_is_string(value))
            plan_add_env(plan, name, json_string_value(value));
    }
}

static void plan_free(spawn_plan *plan)
{
    for (size_t i = 0; i < plan->env_count; i++)
        free(plan->envp[i]);
    free(plan->envp);
    free(plan->argv[2]);
}

/* Moves `fd` to `target` in the child, clearing close-on-exec even when they are equal. */
static void child_place_fd(int fd, int target)
{
    if (fd == target)
        fcntl(fd, F_SETFD, 0);
    else if (dup2(fd, target) < 0)
        _exit(126);
}

/* Runs in the forked child: only async-signal-safe calls from here to execve. */
static void child_exec(const spawn_plan *plan, const char *cwd, int devnull, int out, int err,
                       int channel, pid_t parent)
{
    /* Its own session: signals to the daemon's group never reach it and killpg() reaches all
       its children. Parent-death signal: a crashed daemon leaves no kernels behind. */
    setsid();
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent)
        _exit(125);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    signal(SIGPIPE, SIG_DFL);
    /* Placed above 3 first so no dup2 below clobbers a source not yet moved. */
    int fds[4] = {fcntl(devnull, F_DUPFD_CLOEXEC, 10), fcntl(out, F_DUPFD_CLOEXEC, 10),
                  fcntl(err, F_DUPFD_CLOEXEC, 10), fcntl(channel, F_DUPFD_CLOEXEC, 10)};
    for (int i = 0; i < 4; i++)
        child_place_fd(fds[i], i);
    /* Only fds 0-3 survive: no daemon socket or other kernel's channel leaks (CVE-2024-21626). */
    syscall(SYS_close_range, 4, ~0U, 0);
    if (chdir(cwd) < 0)
        _exit(124);
    execve(plan->argv[0], plan->argv, plan->envp);
    static const char message[] = "cellbox: cannot execute the kernel runtime\n";
    write(2, message, sizeof message - 1);
    _exit(127);
}

static void on_channel_ready(void *owner, uint32_t events);
static void on_output_ready(void *owner, uint32_t events);
static void on_process_exit(void *owner, uint32_t events);

static void watch_output(kernel *k, output_pipe *pipe_end, int fd, const char *name)
{
    pipe_end->fd = fd;
    pipe_end->name = name;
    pipe_end->owner = k;
    fcntl(fd, F_SETFL, O_NONBLOCK);
    loop_watch_add(&pipe_end->watch, fd, EPOLLIN, on_output_ready, pipe_end);
}

static int spawn_process(kernel *k, char *why, size_t why_size)
{
    int channel[2], out[2], err[2];
    int devnull = open("/dev/null", O_RDWR | O_CLOEXEC);
    if (devnull < 0 || socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, channel) < 0 ||
        pipe2(out, O_CLOEXEC) < 0 || pipe2(err, O_CLOEXEC) < 0) {
        snprintf(why, why_size, "cannot create the kernel's channels: %s", strerror(errno));
        return -1; /* fds leak only on EMFILE-class failures, where we are in trouble anyway */
    }
    spawn_plan plan = {.argv = {(char *)kernelspec_kernel_binary(), "--channel-fd=3", NULL, NULL}};
    if (asprintf(&plan.argv[2], "--python-dir=%s", kernelspec_python_dir()) < 0)
        die("out of memory");
    plan_environment(&plan, k);
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid == 0)
        child_exec(&plan, k->workspace, devnull, out[1], err[1], channel[1], parent);
    plan_free(&plan);
    close(devnull);
    close(out[1]);
    close(err[1]);
    close(channel[1]);
    if (pid < 0) {
        snprintf(why, why_size, "cannot fork the kernel: %s", strerror(errno));
        close(out[0]), close(err[0]), close(channel[0]);
        return -1;
    }
    k->pid = pid;
    k->pidfd = pidfd_open_compat(pid);
    if (k->pidfd < 0)
        die("pidfd_open: %s (cellbox needs Linux 5.3 or later)", strerror(errno));
    k->channel_fd = channel[0];
    fcntl(k->channel_fd, F_SETFL, O_NONBLOCK);
    loop_watch_add(&k->channel_watch, k->channel_fd, EPOLLIN, on_channel_ready, k);
    watch_output(k, &k->out, out[0], "stdout");
    watch_output(k, &k->err, err[0], "stderr");
    loop_watch_add(&k->pid_watch, k->pidfd, EPOLLIN, on_process_exit, k);
    k->state = KERNEL_STARTING;
    k->death_reason[0] = '\0';
    k->shutdown_requested = false;
    return 0;
}

/* ---- stdout/stderr → stream messages ---- */

static void publish_output(output_pipe *p, const unsigned char *bytes, size_t n, int final)
{
    kernel *k = p->owner;
    buffer joined = {0}, text = {0};
    buffer_append(&joined, buffer_head(&p->partial), buffer_size(&p->partial));
    buffer_append(&joined, bytes, n);
    buffer_free(&p->partial);
    size_t kept = text_append_utf8(&text, (const unsigned char *)buffer_head(&joined),
                                   buffer_size(&joined), final);
    if (kept)
        buffer_append(&p->partial, buffer_head(&joined) + buffer_size(&joined) - kept, kept);
    if (buffer_size(&text) > 0)
        emit(k, "iopub",
             message_stream(k->session, k->current_request, p->name, buffer_head(&text),
                            buffer_size(&text)));
    buffer_free(&joined);
    buffer_free(&text);
}

static void close_output(output_pipe *p)
{
    if (p->fd < 0)
        return;
    loop_watch_remove(&p->watch);
    close(p->fd);
    p->fd = -1;
    if (buffer_size(&p->partial) > 0)
        publish_output(p, NULL, 0, 1);
    buffer_free(&p->partial);
}

/* Reads what the pipe holds now (bounded), publishing it; closes it at end of file. */
static void drain_output(output_pipe *p)
{
    unsigned char chunk[READ_CHUNK];
    size_t total = 0;
    while (p->fd >= 0 && total < MAX_READ_PER_WAKEUP) {
        ssize_t n = read(p->fd, chunk, sizeof chunk);
        if (n > 0) {
            publish_output(p, chunk, (size_t)n, 0);
            total += (size_t)n;
        } else if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
            close_output(p);
        } else if (errno == EAGAIN) {
            break;
        }
    }
}

static void read_channel(kernel *k);

/* Frames already waiting were written before this output (docs/kernel-protocol.md): handle them
   first so the output gets the right parent and order. */
static void on_output_ready(void *owner, uint32_t events)
{
    output_pipe *p = owner;
    if (p->owner->channel_fd >= 0)
        read_channel(p->owner);
    drain_output(p);
}

/* ---- messages from the kernel ---- */

static void kill_process_group(kernel *k, int signal_number)
{
    if (k->pid > 0)
        kill(-k->pid, signal_number);
}

static void reject_kernel(kernel *k, const char *why)
{
    log_warn("kernel %s: %s; killing it", k->id, why);
    if (!k->death_reason[0])
        snprintf(k->death_reason, sizeof k->death_reason, "kernel died: it broke the protocol (%.150s)",
                 why);
    kill_process_group(k, SIGKILL);
}

static void track_state(kernel *k, const char *type, json_t *message)
{
    json_t *content = json_object_get(message, "content");
    if (strcmp(type, "status") == 0) {
        const char *state = json_string_value(json_object_get(content, "execution_state"));
        if (!state)
            return;
        if (strcmp(state, "busy") == 0) {
            json_decref(k->current_request);
            k->current_request = json_incref(json_object_get(message, "parent_header"));
            k->state = KERNEL_BUSY;
        } else if (strcmp(state, "idle") == 0 || strcmp(state, "starting") == 0) {
            k->state = KERNEL_IDLE; /* "starting" is sent once the kernel can take requests */
        }
    } else if (strcmp(type, "execute_input") == 0) {
        json_t *count = json_object_get(content, "execution_count");
        if (json_is_integer(count))
            k->execution_count = json_integer_value(count);
    }
}

static void handle_kernel_message(kernel *k, const char *bytes, size_t length)
{
    static const char *const kernel_channels[] = {"iopub", "shell", "control", "stdin", NULL};
    char why[160];
    json_error_t error;
    json_t *message = json_loadb(bytes, length, JSON_REJECT_DUPLICATES, &error);
    if (!message) {
        snprintf(why, sizeof why, "invalid JSON: %.100s", error.text);
        reject_kernel(k, why);
        return;
    }
    if (!message_check(message, kernel_channels, why, sizeof why)) {
        json_decref(message);
        reject_kernel(k, why);
        return;
    }
    const char *channel = json_string_value(json_object_get(message, "channel"));
    const char *type = message_type(message);
    if (strcmp(channel, "iopub") == 0)
        track_state(k, type, message);
    if (!message_type_is_untracked(message_parent_type(message)))
        kernel_touch(k);
    if (message_handler)
        message_handler(k, channel, message);
    json_decref(message);
}

/* Splits the byte stream into frames: u32 little-endian length, then that much JSON. */
static void parse_frames(kernel *k)
{
    while (buffer_size(&k->channel_in) >= 4 && !k->death_reason[0]) { /* stop after a rejection */
        const unsigned char *head = (const unsigned char *)buffer_head(&k->channel_in);
        uint32_t length = head[0] | head[1] << 8 | head[2] << 16 | (uint32_t)head[3] << 24;
        if (length > MAX_FRAME_BYTES) {
            char why[96];
            snprintf(why, sizeof why, "a frame of %u bytes exceeds the %u-byte limit", length,
                     MAX_FRAME_BYTES);
            buffer_free(&k->channel_in);
            reject_kernel(k, why);
            return;
        }
        if (buffer_size(&k->channel_in) < 4 + (size_t)length)
            return;
        handle_kernel_message(k, (const char *)head + 4, length);
        buffer_consume(&k->channel_in, 4 + (size_t)length);
    }
}

static void close_channel(kernel *k)
{
    if (k->channel_fd < 0)
        return;
    loop_watch_remove(&k->channel_watch);
    close(k->channel_fd);
    k->channel_fd = -1;
    buffer_free(&k->channel_in);
    buffer_free(&k->channel_out);
}

static void read_channel(kernel *k)
{
    char chunk[READ_CHUNK];
    size_t total = 0;
    while (k->channel_fd >= 0 && total < MAX_READ_PER_WAKEUP) {
        ssize_t n = recv(k->channel_fd, chunk, sizeof chunk, 0);
        if (n > 0) {
            buffer_append(&k->channel_in, chunk, (size_t)n);
            total += (size_t)n;
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && errno == EAGAIN)
            break;
        /* End of file: the kernel is gone or closed its channel; either way it is finished. */
        parse_frames(k);
        close_channel(k);
        kill_process_group(k, SIGKILL);
        return;
    }
    parse_frames(k);
}

static void flush_channel(kernel *k)
{
    while (k->channel_fd >= 0 && buffer_size(&k->channel_out) > 0) {
        ssize_t n = send(k->channel_fd, buffer_head(&k->channel_out), buffer_size(&k->channel_out),
                         MSG_NOSIGNAL);
        if (n > 0) {
            buffer_consume(&k->channel_out, (size_t)n);
        } else if (n < 0 && errno == EINTR) {
            continue;
        } else {
            if (errno != EAGAIN)
                buffer_free(&k->channel_out); /* the kernel is dying; its pidfd will tell */
            break;
        }
    }
    if (k->channel_fd >= 0)
        loop_watch_modify(&k->channel_watch,
                          EPOLLIN | (buffer_size(&k->channel_out) > 0 ? EPOLLOUT : 0));
}

static void on_channel_ready(void *owner, uint32_t events)
{
    kernel *k = owner;
    if (events & EPOLLOUT)
        flush_channel(k);
    if (events & (EPOLLIN | EPOLLHUP | EPOLLERR))
        read_channel(k);
}

int kernel_send(kernel *k, json_t *message)
{
    if (k->state == KERNEL_DEAD || k->channel_fd < 0)
        return -1;
    const char *type = message_type(message);
    if (type && strcmp(type, "shutdown_request") == 0)
        k->shutdown_requested = true;
    char *text = json_dumps(message, JSON_COMPACT);
    if (!text)
        die("out of memory encoding a message");
    size_t length = strlen(text);
    buffer_append_u32le(&k->channel_out, (unsigned)length);
    buffer_append(&k->channel_out, text, length);
    free(text);
    flush_channel(k);
    return 0;
}

/* ---- death ---- */

static const char *signal_description(int signal_number)
{
    switch (signal_number) {
    case SIGSEGV: return "segmentation fault";
    case SIGBUS: return "bus error";
    case SIGILL: return "illegal instruction";
    case SIGFPE: return "floating point exception";
    case SIGABRT: return "aborted";
    case SIGKILL: return "killed";
    case SIGTERM: return "terminated";
    default: return NULL;
    }
}

static void describe_exit(kernel *k, const siginfo_t *info)
{
    if (k->death_reason[0])
        return; /* already named (protocol violation) */
    if (info->si_code == CLD_EXITED) {
        if (info->si_status == 0 && k->shutdown_requested)
            snprintf(k->death_reason, sizeof k->death_reason, "kernel shut down on request");
        else
            snprintf(k->death_reason, sizeof k->death_reason, "kernel died: exited with status %d",
                     info->si_status);
        return;
    }
    const char *what = signal_description(info->si_status);
    snprintf(k->death_reason, sizeof k->death_reason, "kernel died: killed by signal %d (SIG%s%s%s)",
             info->si_status, sigabbrev_np(info->si_status) ? sigabbrev_np(info->si_status) : "?",
             what ? ", " : "", what ? what : "");
}

/* A cell that was running when the kernel died gets an error and a reply, so a client waiting
   for them (AutoGen waits for the error or idle) learns why instead of timing out. */
static void fail_running_request(kernel *k)
{
    json_t *request = k->current_request;
    const char *type = json_string_value(json_object_get(request, "msg_type"));
    if (k->state != KERNEL_BUSY || !type || strcmp(type, "execute_request") != 0)
        return;
    emit(k, "iopub",
         message_new("error", k->session, request, message_error_content("KernelDied", k->death_reason)));
    json_t *reply = message_error_content("KernelDied", k->death_reason);
    json_object_set_new(reply, "status", json_string("error"));
    json_object_set_new(reply, "execution_count", json_integer(k->execution_count));
    emit(k, "shell", message_new("execute_reply", k->session, request, reply));
}

static void release_process(kernel *k)
{
    if (k->pidfd >= 0) {
        loop_watch_remove(&k->pid_watch);
        close(k->pidfd);
        k->pidfd = -1;
    }
    close_channel(k);
    close_output(&k->out);
    close_output(&k->err);
    k->pid = 0;
}

static void on_process_exit(void *owner, uint32_t events)
{
    kernel *k = owner;
    siginfo_t info = {0};
    if (waitid(P_PIDFD, (id_t)k->pidfd, &info, WEXITED | WNOHANG) < 0 || info.si_pid == 0)
        return;
    /* Whatever it said before dying is still worth delivering, in order. */
    if (k->channel_fd >= 0)
        read_channel(k);
    drain_output(&k->out);
    drain_output(&k->err);
    kill_process_group(k, SIGKILL); /* children it left behind */
    describe_exit(k, &info);
    log_info("kernel %s: %s", k->id, k->death_reason);
    release_process(k);
    fail_running_request(k);
    k->state = KERNEL_DEAD;
    emit(k, "iopub", message_status(k->session, k->current_request, "dead"));
}

/* Stops the process without reporting a death: used by restart and delete. */
static void stop_process(kernel *k)
{
    if (k->pid > 0) {
        kill_process_group(k, SIGKILL);
        loop_watch_remove(&k->pid_watch);
        reap_in_background(k->pidfd);
        k->pidfd = -1;
    }
    release_process(k);
    json_decref(k->current_request);
    k->current_request = NULL;
}

/* ---- life cycle ---- */

kernel *kernel_start(const char *id, const kernelspec *spec, const char *workspace, json_t *env,
                     char *why, size_t why_size)
{
    kernel *k = calloc(1, sizeof *k);
    if (!k || !(k->workspace = strdup(workspace)))
        die("out of memory");
    snprintf(k->id, sizeof k->id, "%s", id);
    id_uuid4(k->session);
    k->spec = spec;
    k->env = env ? json_incref(env) : json_object();
    k->pidfd = k->channel_fd = k->out.fd = k->err.fd = -1;
    k->last_activity_us = clock_wall_us();
    if (spawn_process(k, why, why_size) < 0) {
        json_decref(k->env);
        free(k->workspace);
        free(k);
        return NULL;
    }
    return k;
}

void kernel_interrupt(kernel *k)
{
    /* SIGINT to the whole group, as jupyter_client does: `!sleep 100` stops too. */
    if (k->state != KERNEL_DEAD)
        kill_process_group(k, SIGINT);
}

int kernel_restart(kernel *k, char *why, size_t why_size)
{
    stop_process(k);
    emit(k, "iopub", message_status(k->session, NULL, "restarting"));
    k->execution_count = 0;
    if (spawn_process(k, why, why_size) < 0) {
        k->state = KERNEL_DEAD;
        snprintf(k->death_reason, sizeof k->death_reason, "kernel could not restart: %s", why);
        return -1;
    }
    kernel_touch(k);
    return 0;
}

static void kernel_free(void *arg)
{
    kernel *k = arg;
    json_decref(k->env);
    free(k->workspace);
    free(k);
}

void kernel_destroy(kernel *k)
{
    stop_process(k);
    k->state = KERNEL_DEAD;
    loop_defer(kernel_free, k);
}
