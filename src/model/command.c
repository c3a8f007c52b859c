#include "model/command.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/buffer.h"
#include "common/clock.h"
#include "common/descriptors.h"
#include "common/ids.h"
#include "common/log.h"
#include "common/loop.h"
#include "common/text.h"
#include "kernel/keeper.h"
#include "kernel/kernel.h"
#include "kernel/reaper.h"
#include "model/box_log.h"
#include "model/manager.h"
#include "model/ttl.h"
#include "sandbox/cgroup.h"
#include "sandbox/sandbox.h"
#include "sandbox/volume.h"

#define READ_CHUNK 65536
#define TIMEOUT_EXIT_CODE 124 /* as timeout(1) and AutoGen say it */
#define KEPT_EXITED 64        /* records of ended background commands kept per sandbox */
#define COMMAND_DESCRIPTORS 8 /* the most a command holds in the daemon while it starts */

typedef struct output {
    int fd;
    loop_watch watch;
    buffer partial; /* an incomplete UTF-8 sequence at the end of the last read */
    buffer kept;    /* background: the last COMMAND_KEEP_BYTES */
    const char *name;
    struct command *owner;
} output;

typedef struct waiter {
    void (*on_data)(void *arg, const char *stream, const char *bytes, size_t length);
    void (*on_exit)(void *arg, command *c);
    void *arg;
    bool removed; /* unwatched while the list was being walked: freed after the walk */
    struct waiter *next;
} waiter;

struct command {
    char id[UUID_STRING_LENGTH + 1];
    box *box;
    char *cmd, *cwd;
    char *tag;               /* or NULL */
    json_t *argv, *env;      /* the program and arguments as run; what the request added */
    int terminal_fd;         /* the pty's master in terminal mode (output reads it), or -1 */
    pid_t pid;               /* as the host sees it */
    int sandbox_pid;         /* as the sandbox sees it (the one `ps` and `kill` inside know) */
    int pidfd;
    loop_watch pid_watch;
    int stdin_fd;
    loop_watch stdin_watch;
    buffer stdin_pending;
    bool stdin_eof_wanted;
    output out, err;
    const command_sink *sink;
    void *arg;
    bool detached;           /* forget it once it exited */
    bool notifying;          /* telling the sink and waiters that it exited */
    int walking;             /* how many walks over the waiters are under way */
    bool exited, timed_out;
    bool kept;               /* background: the keeper holds its pipes, its record lists it */
    bool adopted;            /* started by a previous daemon: not our child */
    bool status_unknown;     /* adopted and exited: its status went to the sandbox's pid 1 */
    int exit_code, signal_number;
    char *end_reason;        /* why its sandbox ended it (expired), or NULL */
    int64_t started_us, ended_us, started_ms;
    loop_timer_id timeout;
    waiter *waiters;
    struct command *next;
};

static void on_box_gone(box *b);

/* To the command and its process group. The group exists only once the command's setsid() ran:
   a signal sent just after the start goes to the process itself through its pidfd too. */
static void signal_command(command *c, int signal_number)
{
    if (c->pidfd >= 0)
        syscall(SYS_pidfd_send_signal, c->pidfd, signal_number, NULL, 0);
    kill(-c->pid, signal_number);
}

/* The pid inside the sandbox: the last NSpid field of /proc/<pid>/status. */
static int pid_inside(pid_t pid)
{
    char path[64], line[256];
    snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
    FILE *f = fopen(path, "re");
    int inside = 0;
    while (f && fgets(line, sizeof line, f)) {
        if (strncmp(line, "NSpid:", 6) == 0) {
            char *last = strrchr(line, '\t');
            inside = last ? atoi(last + 1) : 0;
            break;
        }
    }
    if (f)
        fclose(f);
    return inside;
}

void command_init(void) { box_add_box_gone_hook(on_box_gone); }

static command **list_of(box *b) { return box_commands_slot(b); }

bool command_running(const command *c) { return !c->exited; }

/* ---- output ---- */

static void deliver(command *c, const char *stream, const char *text, size_t length)
{
    if (length == 0)
        return;
    box_log(c->box, "command", stream, text, length);
    if (c->sink && c->sink->on_output) {
        c->sink->on_output(c->arg, stream, text, length);
        return;
    }
    output *o = strcmp(stream, "stderr") == 0 ? &c->err : &c->out;
    buffer_append(&o->kept, text, length);
    if (buffer_size(&o->kept) > COMMAND_KEEP_BYTES)
        buffer_consume(&o->kept, buffer_size(&o->kept) - COMMAND_KEEP_BYTES);
}

static void convert(output *o, const char *bytes, size_t n, int final)
{
    buffer_append(&o->partial, bytes, n);
    buffer text = {0};
    size_t kept = text_append_utf8(&text, (const unsigned char *)buffer_head(&o->partial),
                                   buffer_size(&o->partial), final);
    buffer_consume(&o->partial, buffer_size(&o->partial) - kept);
    if (buffer_size(&text))
        deliver(o->owner, o->name, buffer_head(&text), buffer_size(&text));
    buffer_free(&text);
}

static void close_output(output *o)
{
    if (o->fd < 0)
        return;
    convert(o, "", 0, 1);
    loop_watch_remove(&o->watch);
    close(o->fd);
    o->fd = -1;
}

static void sweep_waiters(command *c)
{
    if (c->walking)
        return;
    for (waiter **at = &c->waiters; *at;) {
        waiter *w = *at;
        if (w->removed) {
            *at = w->next;
            free(w);
        } else {
            at = &w->next;
        }
    }
}

/* The bytes as they came, to every watcher attached now. */
static void deliver_bytes(command *c, const char *stream, const char *bytes, size_t length)
{
    c->walking++;
    for (waiter *w = c->waiters; w; w = w->next)
        if (!w->removed && w->on_data)
            w->on_data(w->arg, stream, bytes, length);
    c->walking--;
    sweep_waiters(c);
}

static void read_output(output *o)
{
    char chunk[READ_CHUNK];
    for (int rounds = 0; o->fd >= 0 && rounds < 16; rounds++) {
        ssize_t n = read(o->fd, chunk, sizeof chunk);
        if (n > 0) {
            deliver_bytes(o->owner, o->name, chunk, (size_t)n);
            convert(o, chunk, (size_t)n, 0);
            continue;
        }
        if (n < 0 && (errno == EAGAIN || errno == EINTR))
            return;
        close_output(o); /* end of file */
        return;
    }
}

static void on_output_ready(void *owner, uint32_t events) { read_output(owner); }

/* ---- stdin ---- */

static void keep(command *c);

static void close_stdin(command *c)
{
    if (c->stdin_fd < 0)
        return;
    loop_watch_remove(&c->stdin_watch);
    close(c->stdin_fd);
    c->stdin_fd = -1;
    buffer_free(&c->stdin_pending);
    if (c->kept && !c->exited)
        keep(c); /* the keeper's copy of stdin goes too: else the command never sees its end */
}

static void flush_stdin(command *c)
{
    while (c->stdin_fd >= 0 && buffer_size(&c->stdin_pending) > 0) {
        ssize_t n = write(c->stdin_fd, buffer_head(&c->stdin_pending), buffer_size(&c->stdin_pending));
        if (n > 0) {
            buffer_consume(&c->stdin_pending, (size_t)n);
        } else if (n < 0 && errno == EINTR) {
            continue;
        } else if (n < 0 && errno == EAGAIN) {
            loop_watch_modify(&c->stdin_watch, EPOLLOUT);
            return;
        } else {
            close_stdin(c); /* the command closed its end */
            return;
        }
    }
    if (c->stdin_fd < 0)
        return;
    loop_watch_modify(&c->stdin_watch, 0);
    if (c->stdin_eof_wanted)
        close_stdin(c);
}

static void on_stdin_ready(void *owner, uint32_t events) { flush_stdin(owner); }

int command_write_stdin(command *c, const char *data, size_t length, bool eof)
{
    if (c->stdin_fd < 0 || c->stdin_eof_wanted)
        return -1;
    if (buffer_size(&c->stdin_pending) + length > COMMAND_STDIN_PENDING_MAX)
        return -2;
    buffer_append(&c->stdin_pending, data, length);
    c->stdin_eof_wanted = eof;
    flush_stdin(c);
    return 0;
}

/* ---- the end ---- */

static void free_command(void *arg)
{
    command *c = arg;
    while (c->waiters) {
        waiter *w = c->waiters;
        c->waiters = w->next;
        free(w);
    }
    json_decref(c->argv);
    json_decref(c->env);
    free(c->tag);
    buffer_free(&c->out.kept);
    buffer_free(&c->err.kept);
    buffer_free(&c->out.partial);
    buffer_free(&c->err.partial);
    free(c->cmd);
    free(c->cwd);
    free(c->end_reason);
    free(c);
}

static void unlink_command(command *c)
{
    for (command **at = list_of(c->box); *at; at = &(*at)->next) {
        if (*at == c) {
            *at = c->next;
            return;
        }
    }
}

/* A background command's pipes and record outlive the daemon while it runs (keeper.h). */
static void keep(command *c)
{
    /* A terminal is one descriptor, its master: the next daemon makes its input from it again
       (the keeper hands back what it holds in order, without the gaps). */
    int fds[KEEPER_FDS] = {c->out.fd, c->err.fd, c->stdin_fd};
    if (command_has_terminal(c))
        fds[1] = fds[2] = -1;
    keeper_hold(c->id, fds);
    bool first = !c->kept;
    c->kept = true; /* before the record: it lists the kept ones */
    if (first)
        manager_record(box_default_kernel(c->box));
}

static void let_go(command *c)
{
    if (!c->kept)
        return;
    c->kept = false;
    keeper_drop(c->id);
    manager_record(box_default_kernel(c->box));
}

static void drop(command *c)
{
    let_go(c);
    unlink_command(c);
    close_stdin(c);
    close_output(&c->out);
    close_output(&c->err);
    c->terminal_fd = -1; /* it was the output's: closed with it */
    if (c->timeout)
        loop_timer_cancel(c->timeout);
    c->timeout = 0;
    if (c->pidfd >= 0) { /* killed, not yet reaped */
        loop_watch_remove(&c->pid_watch);
        reaper_take(c->pidfd);
        c->pidfd = -1;
    }
    loop_defer(free_command, c);
}

static void notify_exit(command *c)
{
    const command_sink *sink = c->sink;
    c->sink = NULL;
    if (sink && sink->on_exit)
        sink->on_exit(c->arg, c);
    while (c->waiters) {
        waiter *w = c->waiters;
        c->waiters = w->next;
        if (!w->removed)
            w->on_exit(w->arg, c);
        free(w);
    }
}

static void on_process_exit(void *owner, uint32_t events)
{
    command *c = owner;
    siginfo_t info = {0};
    /* An adopted command is not our child (ECHILD): its pidfd turning readable is its exit. */
    if (waitid(P_PIDFD, (id_t)c->pidfd, &info, WEXITED | WNOHANG) < 0) {
        if (!c->adopted || errno != ECHILD)
            return;
        c->status_unknown = true;
    } else if (info.si_pid == 0) {
        return;
    }
    /* What it printed before exiting comes first; its children may still hold the pipes, but
       they belong to it: the group goes with it. */
    kill(-c->pid, SIGKILL);
    read_output(&c->out);
    read_output(&c->err);
    close_output(&c->out);
    close_output(&c->err);
    c->terminal_fd = -1;
    close_stdin(c);
    loop_watch_remove(&c->pid_watch);
    close(c->pidfd);
    c->pidfd = -1;
    if (c->timeout)
        loop_timer_cancel(c->timeout);
    c->timeout = 0;
    c->exited = true;
    c->ended_us = clock_wall_us();
    let_go(c);
    if (c->status_unknown) {
        /* nothing to decode */
    } else if (info.si_code == CLD_EXITED) {
        c->exit_code = info.si_status;
    } else {
        c->signal_number = info.si_status;
        c->exit_code = 128 + info.si_status;
    }
    if (c->timed_out)
        c->exit_code = TIMEOUT_EXIT_CODE;
    if (c->exit_code == SANDBOX_SETUP_FAILED && clock_wall_us() - c->started_us < 2000000)
        log_warn("command in sandbox %s exited with 125 (it may have failed to start)", box_id(c->box));
    char full[256]; /* a command that failed on a full workspace is told which limit, as a cell */
    if (c->exit_code != 0 &&
        volume_describe_full(kernel_workspace(box_default_kernel(c->box)),
                             box_limits(c->box)->disk_bytes, full, sizeof full))
        deliver(c, "stderr", full, strlen(full));
    c->notifying = true;
    notify_exit(c);
    c->notifying = false;
    if (c->detached)
        drop(c);
}

static void on_timeout(void *arg)
{
    command *c = arg;
    c->timeout = 0;
    c->timed_out = true;
    signal_command(c, SIGKILL);
}

/* Ended commands keep their output until deleted; past KEPT_EXITED of them, the oldest go (each
   may hold two megabytes of output). The list is newest first. */
static void forget_old_commands(box *b)
{
    int exited = 0;
    for (command *c = *list_of(b), *next; c; c = next) {
        next = c->next;
        if (c->exited && !c->notifying && !c->waiters && ++exited > KEPT_EXITED)
            drop(c);
    }
}

/* ---- start ---- */

/* A command runs only in a running sandbox, and its pipes and pidfd come out of the sandboxes'
   share of the daemon's descriptors. */
static bool can_start_command(box *b, kernel *k, failure_kind *failure, char *why, size_t why_size)
{
    if (!descriptors_available(COMMAND_DESCRIPTORS, why, why_size)) {
        *failure = FAILURE_EXHAUSTED;
        return false;
    }
    /* Until its kernel reports in, a sandbox started by exec may still be building its root:
       a command joined then ran on the host's "/" (sandbox_root_is_unfinished). */
    if (kernel_pidfd(k) < 0 || kernel_get_state(k) == KERNEL_STARTING) {
        *failure = FAILURE_CONFLICT;
        snprintf(why, why_size, kernel_get_state(k) == KERNEL_STARTING
                                    ? "sandbox %s is still starting; try again in a moment"
                                    : "sandbox %s is not running",
                 box_id(b));
        return false;
    }
    return true;
}

/* The command's ends and ours: pipes, or one pseudo-terminal for all three. */
typedef struct channels {
    int program[3]; /* its stdin, stdout and stderr */
    int stdin_fd, stdout_fd, stderr_fd; /* ours (stderr -1 with a terminal: it shares the pty) */
    bool terminal;
} channels;

static void close_program_ends(channels *ch)
{
    for (int i = 0; i < 3; i++) {
        if (ch->program[i] >= 0 && (i == 0 || ch->program[i] != ch->program[i - 1]))
            close(ch->program[i]);
        ch->program[i] = -1;
    }
}

static void close_our_ends(channels *ch)
{
    int ours[3] = {ch->stdin_fd, ch->stdout_fd, ch->stderr_fd};
    for (int i = 0; i < 3; i++)
        if (ours[i] >= 0)
            close(ours[i]);
    ch->stdin_fd = ch->stdout_fd = ch->stderr_fd = -1;
}

static int open_channels(kernel *k, const command_request *request, channels *ch, char *why,
                         size_t why_size)
{
    *ch = (channels){.program = {-1, -1, -1}, .stdin_fd = -1, .stdout_fd = -1, .stderr_fd = -1,
                     .terminal = request->terminal};
    if (request->terminal) {
        const kernel_sandbox *ks = kernel_get_sandbox(k);
        int peer = -1;
        int master =
            sandbox_open_terminal(kernel_pidfd(k), request->columns ? request->columns : 80,
                                  request->rows ? request->rows : 24, (uid_t)ks->uid,
                                  (gid_t)ks->uid, &peer, why, why_size);
        if (master < 0)
            return -1;
        ch->program[0] = ch->program[1] = ch->program[2] = peer;
        ch->stdout_fd = master;
        /* input goes to the same master, through a descriptor of its own: closing "stdin" then
           never takes the output with it */
        ch->stdin_fd = fcntl(master, F_DUPFD_CLOEXEC, 0);
        if (ch->stdin_fd < 0) {
            snprintf(why, why_size, "cannot duplicate the terminal: %s", strerror(errno));
            close_program_ends(ch);
            close_our_ends(ch);
            return -1;
        }
        return 0;
    }
    int in[2], out[2], err[2];
    if (pipe2(in, O_CLOEXEC) < 0) {
        snprintf(why, why_size, "cannot create pipes: %s", strerror(errno));
        return -1;
    }
    if (pipe2(out, O_CLOEXEC) < 0) {
        snprintf(why, why_size, "cannot create pipes: %s", strerror(errno));
        close(in[0]), close(in[1]);
        return -1;
    }
    if (pipe2(err, O_CLOEXEC) < 0) {
        snprintf(why, why_size, "cannot create pipes: %s", strerror(errno));
        close(in[0]), close(in[1]), close(out[0]), close(out[1]);
        return -1;
    }
    *ch = (channels){.program = {in[0], out[1], err[1]}, .stdin_fd = in[1], .stdout_fd = out[0],
                     .stderr_fd = err[0]};
    return 0;
}

/* What runs: argv as given, or the shell command line under bash — as E2B's commands use it:
   agents write bash (`source`, `[[ ]]`, arrays), and a bash -c does not catch SIGINT the way
   dash -c does (dash, interrupted before it has forked the command, lets the command run to its
   end and only then dies). */
static json_t *program_of(const command_request *request)
{
    if (request->argv)
        return json_incref(request->argv);
    return json_pack("[s, s, s]", "/bin/bash", "-c", request->cmd);
}

/* Starts the command's process inside the sandbox's namespaces on `ch`'s program ends. Returns
   its pid, or -1 with `why`. */
static pid_t start_in_sandbox(box *b, kernel *k, const command_request *request, json_t *program,
                              bool background, const channels *ch, int *pidfd, char *why,
                              size_t why_size)
{
    size_t count = json_array_size(program);
    char **argv = calloc(count + 1, sizeof *argv);
    if (!argv)
        die("out of memory");
    for (size_t i = 0; i < count; i++)
        argv[i] = (char *)json_string_value(json_array_get(program, i));
    json_t *env = json_deep_copy(box_env(b));
    if (request->terminal) /* what a terminal program needs to know what it talks to */
        json_object_set_new(env, "TERM", json_string("xterm-256color"));
    if (request->env)
        json_object_update(env, request->env);
    char **envp = kernel_environment(k, env);
    json_decref(env);
    const kernel_sandbox *ks = kernel_get_sandbox(k);
    sandbox_spec spec = {
        .root = {.uid = ks->uid, .gid = ks->uid},
        .open_files = ks->limits.open_files,
        .file_size = ks->limits.disk_bytes,
        .argv = argv,
        .envp = envp,
        .fds = {ch->program[0], ch->program[1], ch->program[2], -1},
        .cwd = request->cwd,
        /* A background command outlives a daemon that dies, for the next one to adopt; a
           foreground one's client goes with the daemon, and so does it. */
        .outlives_daemon = background && keeper_running(),
        .controlling_terminal = ch->terminal,
    };
    cgroup_procs_files(ks->cgroup, spec.cgroup_procs, SANDBOX_MAX_CGROUP_FILES);
    pid_t pid = sandbox_join(kernel_pidfd(k), &spec, pidfd, why, why_size);
    kernel_environment_free(envp);
    free(argv);
    return pid;
}

/* The program as one line, for /v1's model and the logs. */
static char *command_line_of(const command_request *request, json_t *program)
{
    if (!request->argv)
        return strdup(request->cmd);
    buffer line = {0};
    for (size_t i = 0; i < json_array_size(program); i++) {
        const char *word = json_string_value(json_array_get(program, i));
        if (i)
            buffer_append(&line, " ", 1);
        buffer_append(&line, word, strlen(word));
    }
    buffer_append(&line, "", 1);
    char *text = strdup(buffer_head(&line));
    buffer_free(&line);
    return text;
}

static command *new_command(box *b, const command_request *request, json_t *program, pid_t pid,
                            int pidfd, const command_sink *sink, void *arg)
{
    command *c = calloc(1, sizeof *c);
    if (!c || !(c->cmd = command_line_of(request, program)) ||
        !(c->cwd = strdup(request->cwd ? request->cwd : "/workspace")) ||
        (request->tag && !(c->tag = strdup(request->tag))))
        die("out of memory");
    id_uuid4(c->id);
    c->box = b;
    c->argv = json_incref(program);
    c->env = request->env ? json_deep_copy(request->env) : json_object();
    c->terminal_fd = -1;
    c->pid = pid;
    c->sandbox_pid = pid_inside(pid);
    c->pidfd = pidfd;
    c->sink = sink;
    c->arg = arg;
    c->started_us = clock_wall_us();
    c->started_ms = clock_monotonic_ms();
    return c;
}

static void watch_output(command *c, output *o, int fd, const char *name)
{
    o->fd = fd;
    o->name = name;
    o->owner = c;
    if (fd < 0)
        return;
    fcntl(fd, F_SETFL, O_NONBLOCK);
    loop_watch_add(&o->watch, fd, EPOLLIN, on_output_ready, o);
}

/* The loop hears what the command prints, when its stdin can take more, when it exits and when
   its time is up. */
static void watch_command(command *c, const channels *ch, long long timeout_ms)
{
    c->stdin_fd = ch->stdin_fd;
    fcntl(c->stdin_fd, F_SETFL, O_NONBLOCK);
    loop_watch_add(&c->stdin_watch, c->stdin_fd, 0, on_stdin_ready, c);
    watch_output(c, &c->out, ch->stdout_fd, ch->terminal ? "pty" : "stdout");
    watch_output(c, &c->err, ch->stderr_fd, "stderr");
    if (ch->terminal)
        c->terminal_fd = ch->stdout_fd;
    loop_watch_add(&c->pid_watch, c->pidfd, EPOLLIN, on_process_exit, c);
    if (timeout_ms > 0)
        c->timeout = loop_timer_add(timeout_ms, on_timeout, c);
}

command *command_start(box *b, const command_request *request, const command_sink *sink, void *arg,
                       failure_kind *failure, char *why, size_t why_size)
{
    kernel *k = box_default_kernel(b);
    if (!can_start_command(b, k, failure, why, why_size))
        return NULL;
    channels ch;
    if (open_channels(k, request, &ch, why, why_size) < 0) {
        *failure = FAILURE_INTERNAL;
        return NULL;
    }
    json_t *program = program_of(request);
    int pidfd = -1;
    pid_t pid = start_in_sandbox(b, k, request, program, sink == NULL, &ch, &pidfd, why, why_size);
    close_program_ends(&ch);
    if (pid < 0) {
        close_our_ends(&ch);
        json_decref(program);
        *failure = FAILURE_INTERNAL;
        return NULL;
    }
    command *c = new_command(b, request, program, pid, pidfd, sink, arg);
    json_decref(program);
    watch_command(c, &ch, request->timeout_ms > 0 ? request->timeout_ms
                                                  : (long long)request->timeout_s * 1000);
    c->next = *list_of(b);
    *list_of(b) = c;
    forget_old_commands(b);
    if (request->stdin_data && request->stdin_length)
        command_write_stdin(c, request->stdin_data, request->stdin_length,
                            !request->stdin_open && !request->terminal);
    else if (!request->stdin_open && !request->terminal)
        close_stdin(c);
    if (!sink)
        keep(c);
    return c;
}

/* ---- surviving a restart of the daemon ---- */

json_t *command_persisted(box *b)
{
    json_t *list = json_array();
    for (command *c = *list_of(b); c; c = c->next) {
        if (!c->kept || c->exited)
            continue;
        json_t *saved = json_pack(
            "{s:s, s:s, s:s, s:i, s:i, s:I, s:I, s:O, s:O, s:b}", "id", c->id, "cmd", c->cmd,
            "cwd", c->cwd, "pid", (int)c->pid, "sandbox_pid", c->sandbox_pid, "pid_start",
            (json_int_t)kernel_process_start_time(c->pid), "started_us", (json_int_t)c->started_us,
            "argv", c->argv, "env", c->env, "terminal", command_has_terminal(c));
        if (c->tag)
            json_object_set_new(saved, "tag", json_string(c->tag));
        json_array_append_new(list, saved);
    }
    return list;
}

/* What the previous daemon recorded of the program: its argv (a list of strings; a record from
   before argv was kept gives the shell line), the variables it added and its tag. */
static void restore_program(command *c, json_t *saved)
{
    json_t *argv = json_object_get(saved, "argv"), *env = json_object_get(saved, "env"), *word;
    const char *tag = json_string_value(json_object_get(saved, "tag"));
    size_t i;
    bool strings = json_array_size(argv) > 0;
    json_array_foreach(argv, i, word) strings = strings && json_is_string(word);
    c->argv = strings ? json_incref(argv) : json_pack("[s, s, s]", "/bin/bash", "-c", c->cmd);
    c->env = json_is_object(env) ? json_deep_copy(env) : json_object();
    if (tag && !(c->tag = strdup(tag)))
        die("out of memory");
}

command *command_adopt(box *b, json_t *saved, int pidfd, const int fds[3], int64_t gone_at_us)
{
    command *c = calloc(1, sizeof *c);
    const char *id = json_string_value(json_object_get(saved, "id"));
    const char *cmd = json_string_value(json_object_get(saved, "cmd"));
    const char *cwd = json_string_value(json_object_get(saved, "cwd"));
    if (!c || !(c->cmd = strdup(cmd ? cmd : "")) || !(c->cwd = strdup(cwd ? cwd : "/workspace")))
        die("out of memory");
    snprintf(c->id, sizeof c->id, "%s", id ? id : "");
    c->box = b;
    c->adopted = true;
    restore_program(c, saved);
    c->pid = (pid_t)json_integer_value(json_object_get(saved, "pid"));
    c->sandbox_pid = (int)json_integer_value(json_object_get(saved, "sandbox_pid"));
    c->pidfd = pidfd;
    c->started_us = json_integer_value(json_object_get(saved, "started_us"));
    c->started_ms = clock_monotonic_ms();
    bool terminal = json_is_true(json_object_get(saved, "terminal"));
    c->stdin_fd = terminal ? fcntl(fds[0], F_DUPFD_CLOEXEC, 0) : fds[2];
    if (c->stdin_fd >= 0) {
        fcntl(c->stdin_fd, F_SETFL, O_NONBLOCK);
        loop_watch_add(&c->stdin_watch, c->stdin_fd, 0, on_stdin_ready, c);
    }
    watch_output(c, &c->out, fds[0], terminal ? "pty" : "stdout");
    watch_output(c, &c->err, terminal ? -1 : fds[1], "stderr");
    c->terminal_fd = terminal ? fds[0] : -1;
    /* What it printed before the restart was the previous daemon's to keep: say so where it
       would have been. What it printed since waits in its pipes and follows. */
    time_t seconds = (time_t)((gone_at_us ? gone_at_us : clock_wall_us()) / 1000000);
    struct tm utc;
    gmtime_r(&seconds, &utc);
    char note[160];
    int n = snprintf(note, sizeof note, "[cellbox: cellboxd restarted at %02d:%02d:%02d UTC; this "
                     "command's output before then was not kept]\n", utc.tm_hour, utc.tm_min, utc.tm_sec);
    deliver(c, "stderr", note, (size_t)n);
    loop_watch_add(&c->pid_watch, pidfd, EPOLLIN, on_process_exit, c);
    c->next = *list_of(b);
    *list_of(b) = c;
    keep(c);
    return c;
}

/* ---- queries ---- */

command *command_find(box *b, const char *id_or_pid)
{
    for (command *c = *list_of(b); c; c = c->next) {
        char pid[16];
        snprintf(pid, sizeof pid, "%d", c->sandbox_pid);
        if (strcmp(c->id, id_or_pid) == 0 || strcmp(pid, id_or_pid) == 0)
            return c;
    }
    return NULL;
}

command *command_find_pid(box *b, int sandbox_pid)
{
    for (command *c = *list_of(b); c; c = c->next)
        if (c->sandbox_pid == sandbox_pid)
            return c;
    return NULL;
}

command *command_find_tag(box *b, const char *tag)
{
    command *ended = NULL;
    for (command *c = *list_of(b); c; c = c->next) {
        if (!c->tag || strcmp(c->tag, tag) != 0)
            continue;
        if (!c->exited)
            return c;
        if (!ended)
            ended = c;
    }
    return ended;
}

command *command_next(box *b, command *after) { return after ? after->next : *list_of(b); }

int command_sandbox_pid(const command *c) { return c->sandbox_pid; }
const char *command_tag(const command *c) { return c->tag; }
json_t *command_argv(const command *c) { return c->argv; }
json_t *command_env(const command *c) { return c->env; }
const char *command_cwd(const command *c) { return c->cwd; }
bool command_has_terminal(const command *c)
{
    return c->out.name && strcmp(c->out.name, "pty") == 0;
}
bool command_stdin_open(const command *c) { return c->stdin_fd >= 0 && !c->stdin_eof_wanted; }

bool command_end_status(const command *c, int *exit_code, int *signal_number)
{
    if (!c->exited || c->status_unknown)
        return false;
    *exit_code = c->exit_code;
    *signal_number = c->signal_number;
    return true;
}

const char *command_end_reason(const command *c) { return c->end_reason; }

json_t *command_model(const command *c, bool with_output)
{
    json_t *model = json_pack(
        "{s:s, s:i, s:s, s:s, s:s, s:o, s:o, s:b, s:o, s:o, s:I}", "id", c->id, "pid", c->sandbox_pid,
        "cmd", c->cmd, "cwd", c->cwd, "state", c->exited ? "exited" : "running", "exit_code",
        c->exited && !c->status_unknown ? json_integer(c->exit_code) : json_null(), "signal",
        c->signal_number ? json_sprintf("SIG%s", sigabbrev_np(c->signal_number)
                                                     ? sigabbrev_np(c->signal_number) : "?")
                         : json_null(),
        "timed_out", c->timed_out, "started_at", clock_iso_json(c->started_us), "ended_at",
        clock_iso_json(c->ended_us), "wall_ms",
        (json_int_t)((c->exited ? c->ended_us : clock_wall_us()) - c->started_us) / 1000);
    if (c->end_reason)
        json_object_set_new(model, "reason", json_string(c->end_reason));
    if (with_output) {
        json_object_set_new(model, "stdout", json_stringn(buffer_size(&c->out.kept) ? buffer_head(&c->out.kept) : "",
                                                          buffer_size(&c->out.kept)));
        json_object_set_new(model, "stderr", json_stringn(buffer_size(&c->err.kept) ? buffer_head(&c->err.kept) : "",
                                                          buffer_size(&c->err.kept)));
    }
    return model;
}

json_t *command_list_model(box *b)
{
    json_t *list = json_array();
    for (command *c = *list_of(b); c; c = c->next)
        json_array_insert_new(list, 0, command_model(c, false)); /* oldest first */
    return list;
}

/* ---- control ---- */

int command_signal(command *c, int signal_number)
{
    if (c->exited)
        return -1;
    signal_command(c, signal_number);
    return 0;
}

int command_resize(command *c, unsigned columns, unsigned rows)
{
    if (c->exited || c->terminal_fd < 0)
        return -1;
    struct winsize size = {.ws_col = (unsigned short)columns, .ws_row = (unsigned short)rows};
    return ioctl(c->terminal_fd, TIOCSWINSZ, &size);
}

void command_detach(command *c)
{
    c->sink = NULL;
    if (c->detached)
        return;
    c->detached = true;
    if (!c->exited)
        signal_command(c, SIGKILL); /* dropped once its exit is seen */
    else if (!c->notifying)
        drop(c);
}

void command_watch(command *c, const command_watcher *watcher, void *arg)
{
    if (c->exited) {
        watcher->on_exit(arg, c);
        return;
    }
    waiter *w = calloc(1, sizeof *w);
    if (!w)
        die("out of memory");
    w->on_data = watcher->on_data;
    w->on_exit = watcher->on_exit;
    w->arg = arg;
    w->next = c->waiters;
    c->waiters = w;
}

void command_unwatch(command *c, void *arg)
{
    for (waiter *w = c->waiters; w; w = w->next) {
        if (w->arg == arg && !w->removed) {
            w->removed = true; /* freed now, or after the walk that is under way */
            break;
        }
    }
    sweep_waiters(c);
}

void command_wait(command *c, void (*on_exit)(void *arg, command *c), void *arg)
{
    command_watch(c, &(command_watcher){.on_exit = on_exit}, arg);
}

void command_unwait(command *c, void *arg) { command_unwatch(c, arg); }

void command_forget(command *c)
{
    if (!c->exited) {
        signal_command(c, SIGKILL);
        c->timed_out = false;
    }
    c->sink = NULL;
    while (c->waiters) { /* nobody will be told: the record is gone */
        waiter *w = c->waiters;
        c->waiters = w->next;
        if (!w->removed)
            w->on_exit(w->arg, c);
        free(w);
    }
    drop(c);
}

/* The sandbox is going: its processes die with it; everyone waiting hears the end now. */
static void on_box_gone(box *b)
{
    char why[512];
    while (*list_of(b)) {
        command *c = *list_of(b);
        if (!c->exited) {
            signal_command(c, SIGKILL);
            if (box_describe_end(b, "command", why, sizeof why) && !(c->end_reason = strdup(why)))
                die("out of memory");
            c->exited = true;
            c->signal_number = SIGKILL;
            c->exit_code = 128 + SIGKILL;
            c->ended_us = clock_wall_us();
            c->notifying = true;
            notify_exit(c);
        }
        command_forget(c);
    }
}
