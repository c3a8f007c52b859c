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
#include <time.h>
#include <unistd.h>

#include "common/buffer.h"
#include "common/clock.h"
#include "common/log.h"
#include "common/loop.h"
#include "common/text.h"
#include "kernel/keeper.h"
#include "kernel/message.h"
#include "kernel/reaper.h"
#include "sandbox/network.h"
#include "sandbox/network_dns.h"
#include "sandbox/rootfs.h"
#include "sandbox/sandbox.h"
#include "sandbox/volume.h"
#include "kernel/zygote.h"
#include "kernel/checkpoint.h"

#define READ_CHUNK 65536
#define MAX_READ_PER_WAKEUP (1u << 20) /* one noisy kernel must not starve the others */
/* The kernel's stdout/stderr pipes are made as large as its output limit, within these: a
   write() that fits lands in the pipe whole and is read whole, so one print is one message.
   The pages are the writer's (charged to the sandbox's memory cgroup) and only while full. */
#define MIN_OUTPUT_PIPE_BYTES 65536
#define MAX_OUTPUT_PIPE_BYTES MAX_READ_PER_WAKEUP
#define CHANNEL_FD 3
#define OUTPUT_COALESCE_MS 50
/* A kernel whose channel closed is given this long to exit by itself (and report its status). */
#define HANGUP_GRACE_MS 2000
/* How long a kernel has to exit after a shutdown_request before it is killed (jupyter_client's
   shutdown_wait_time): a kernel busy with a cell does not read the request until the cell ends. */
#define SHUTDOWN_GRACE_MS 5000

typedef struct output_pipe {
    int fd;
    loop_watch watch;
    buffer pending;     /* read, not yet published (coalesced; may end mid-character) */
    size_t capacity;    /* the pipe's size: more pending than this is not one write() */
    const char *name;   /* "stdout" or "stderr" */
    struct kernel *owner;
} output_pipe;

struct kernel {
    char id[UUID_STRING_LENGTH + 1];
    char session[UUID_STRING_LENGTH + 1]; /* for messages the daemon writes on its behalf */
    const kernelspec *spec;
    char *workspace;
    json_t *env;                /* extra environment, kept for restarts */
    char *working_directory;    /* where it moves once started (NULL: the sandbox's default) */
    kernel_state state;
    int64_t last_activity_us;
    pid_t pid;                  /* 0 while none, or while the zygote has not said it yet */
    int pidfd;
    int network_slot;           /* its interface (sandbox/network.c), or -1 */
    json_t *allow_out, *deny_out; /* its egress lists (arrays of CIDRs), or NULL */
    loop_watch pid_watch;
    zygote_spawn *spawn;        /* the zygote's clone of this kernel, until its pid is known */
    /* Another context made while its host was starting: it joins the host's sandbox once that
       is set up (join_host_sandbox). Until then the sandbox's ends of its stdin, stdout, stderr
       and channel wait here (-1: none), and requests wait in its channel. */
    bool awaiting_host;
    int held_for_join[4];
    struct kernel *next_awaiting_host;
    int signal_on_spawn;        /* the strongest signal sent meanwhile, delivered with the pid */
    int channel_fd;
    loop_watch channel_watch;
    buffer channel_in, channel_out;
    output_pipe out, err;
    loop_timer_id output_timer; /* publishes pending output shortly */
    loop_timer_id hangup_timer; /* kills a kernel that closed its channel but did not exit */
    loop_timer_id zygote_wait;  /* a restore waiting for its zygote to be ready */
    int64_t zygote_wait_since_ms;
    json_t *current_request;    /* header of the request the kernel said it is busy with */
    json_int_t execution_count; /* last seen, for replies the daemon writes */
    char death_reason[192];
    char failed_request[64];    /* msg_id of the cell kernel_fail_running_cell last answered */
    char setup_failure[128];    /* what the sandbox's setup said when it failed, if it did */
    bool shutdown_requested;    /* a client asked it to shut down: exit 0 is expected */
    bool restart_requested;     /* ... with restart: true: start it again once it exits */
    bool shutdown_replied;      /* the kernel sent its shutdown_reply */
    json_t *shutdown_request;   /* that request's header, until the process is gone */
    loop_timer_id shutdown_timer; /* kills a kernel still there SHUTDOWN_GRACE_MS after it */
    kernel_sandbox sandbox;
    long long oom_kills_at_start;   /* cgroup counter when this process started */
    int64_t spawned_at_ms;          /* monotonic, for the start-up time in the log */
    struct {
        bool active;                /* an execute_request is running */
        long long output_bytes;     /* stream text and rich output bytes published for it */
        long long dropped_bytes;    /* bytes past the output limit: all output after the first */
        long long pids_hits_at_start;
        long long oom_kills_at_start;
        loop_timer_id timer;        /* timeout, then the grace period after the interrupt */
        bool timed_out;
    } execution;
    long long last_dropped_bytes;   /* output dropped by the last finished execution */
    /* Adopted from a previous daemon (kernel_adopt): its process is not our child, and its old
       channel is drained until the kernel switches to the new one. */
    bool adopted;
    int old_channel_fd;             /* -1 once the kernel has let go of it */
    loop_watch old_channel_watch;
    int new_channel_for_kernel;     /* its end of the new channel, until sent (-1 then) */
    long long old_channel_bytes;    /* what it wrote on the old channel, discarded */
    int64_t lost_since_us;          /* when the previous daemon went away; 0 once reported */
    bool awaiting_first_word;       /* adopted, nothing heard on the new channel yet: output
                                       waits, to go out with the request it belongs to */
    int connections;
    struct channel_connection *subscribers; /* api/channels.c's list */
    struct box *box;                        /* model/box.c's record */
    bool cloned;                    /* its process is a clone of the zygote (imageable) */
    bool requests_held;             /* kernel_hold_requests: kernel_send queues, sends nothing */
    kernel_restore_outcome restore_state; /* a kernel started from a process image */
    json_t *restore_report;         /* its "restored" frame's report */
};

#define MAX_MESSAGE_HANDLERS 8
static kernel_message_handler message_handlers[MAX_MESSAGE_HANDLERS];
static void (*started_hook)(kernel *k);

void kernel_set_started_hook(void (*hook)(kernel *k)) { started_hook = hook; }

#define MAX_DESTROY_HOOKS 4
static void (*destroy_hooks[MAX_DESTROY_HOOKS])(kernel *k);

void kernel_add_destroy_hook(void (*hook)(kernel *k))
{
    for (int i = 0; i < MAX_DESTROY_HOOKS; i++) {
        if (!destroy_hooks[i]) {
            destroy_hooks[i] = hook;
            return;
        }
    }
    die("BUG: too many kernel destroy hooks");
}

static void announce_started(kernel *k)
{
    if (started_hook)
        started_hook(k);
}

static void deliver(kernel *k, const char *channel, json_t *message)
{
    for (int i = 0; i < MAX_MESSAGE_HANDLERS && message_handlers[i]; i++)
        message_handlers[i](k, channel, message);
}

void kernel_add_message_handler(kernel_message_handler handler)
{
    for (int i = 0; i < MAX_MESSAGE_HANDLERS; i++) {
        if (!message_handlers[i]) {
            message_handlers[i] = handler;
            return;
        }
    }
    die("BUG: too many kernel message handlers");
}

const kernel_sandbox *kernel_get_sandbox(const kernel *k) { return &k->sandbox; }
kernel_restore_outcome kernel_restore_state(const kernel *k) { return k->restore_state; }
json_t *kernel_restore_report(const kernel *k) { return k->restore_report; }
bool kernel_is_zygote_clone(const kernel *k) { return k->cloned; }
json_t *kernel_request_env(const kernel *k) { return k->env; }

void kernel_egress_lists(const kernel *k, json_t **allow_out, json_t **deny_out)
{
    *allow_out = k->allow_out;
    *deny_out = k->deny_out;
}

long long kernel_process_start_time(pid_t pid)
{
    char path[64], text[1024];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "re");
    if (!f)
        return -1;
    size_t n = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    text[n] = '\0';
    char *after_name = strrchr(text, ')'); /* the name may hold spaces and parentheses */
    long long start = -1;
    if (after_name && sscanf(after_name + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %*u "
                             "%*u %*d %*d %*d %*d %*d %*d %lld", &start) != 1)
        start = -1;
    return start;
}

void kernel_daemon_fds(const kernel *k, int fds[3])
{
    fds[0] = k->channel_fd;
    fds[1] = k->out.fd;
    fds[2] = k->err.fd;
}
int kernel_pidfd(const kernel *k) { return k->pidfd; }
pid_t kernel_pid(const kernel *k) { return k->pid; }
long long kernel_last_dropped_bytes(const kernel *k) { return k->last_dropped_bytes; }
struct box *kernel_box(const kernel *k) { return k->box; }
void kernel_set_box(kernel *k, struct box *box) { k->box = box; }

const char *kernel_id(const kernel *k) { return k->id; }
const kernelspec *kernel_spec(const kernel *k) { return k->spec; }
const char *kernel_session(const kernel *k) { return k->session; }
const char *kernel_workspace(const kernel *k) { return k->workspace; }
kernel_state kernel_get_state(const kernel *k) { return k->state; }
const char *kernel_death_reason(const kernel *k) { return k->death_reason; }
const sandbox_limits *kernel_limits(const kernel *k) { return &k->sandbox.limits; }
int64_t kernel_last_activity_us(const kernel *k) { return k->last_activity_us; }
void kernel_touch(kernel *k) { k->last_activity_us = clock_wall_us(); }
int kernel_connection_count(const kernel *k) { return k->connections; }
void kernel_set_connection_count(kernel *k, int count) { k->connections = count; }
struct channel_connection *kernel_subscribers(const kernel *k) { return k->subscribers; }
void kernel_set_subscribers(kernel *k, struct channel_connection *subscribers)
{
    k->subscribers = subscribers;
}

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
    deliver(k, channel, message);
    json_decref(message);
}

/* ---- starting the process ---- */

typedef struct environment {
    char **entries;
    size_t count;
} environment;

static void environment_add(environment *env, const char *name, const char *value)
{
    char **grown = realloc(env->entries, (env->count + 2) * sizeof *grown);
    if (!grown || asprintf(&grown[env->count], "%s=%s", name, value) < 0)
        die("out of memory");
    env->entries = grown;
    env->count++;
    env->entries[env->count] = NULL;
}

/* Replaces the value of `name` if it is there, else adds it. */
static void environment_set(environment *env, const char *name, const char *value)
{
    size_t length = strlen(name);
    for (size_t i = 0; i < env->count; i++) {
        if (strncmp(env->entries[i], name, length) == 0 && env->entries[i][length] == '=') {
            free(env->entries[i]);
            if (asprintf(&env->entries[i], "%s=%s", name, value) < 0)
                die("out of memory");
            return;
        }
    }
    environment_add(env, name, value);
}

static void environment_free(environment *env)
{
    for (size_t i = 0; i < env->count; i++)
        free(env->entries[i]);
    free(env->entries);
}

/* The user's own programs before the system's, as Debian's ~/.profile puts them: pip installs a
   package's commands (its console scripts) in $HOME/.local/bin. Rewrites the PATH entry, once
   HOME is there, whatever HOME is. */
static void put_user_programs_on_path(environment *env)
{
    const char *home = NULL;
    size_t path_index = env->count;
    for (size_t i = 0; i < env->count; i++) {
        if (strncmp(env->entries[i], "HOME=", 5) == 0)
            home = env->entries[i] + 5;
        else if (strncmp(env->entries[i], "PATH=", 5) == 0)
            path_index = i;
    }
    if (!home || path_index == env->count)
        return;
    char *path;
    if (asprintf(&path, "PATH=%s/.local/bin:%s", home, env->entries[path_index] + 5) < 0)
        die("out of memory");
    free(env->entries[path_index]);
    env->entries[path_index] = path;
}

/* The kernel's environment is built from scratch: nothing of the daemon's (its token above all)
   reaches a kernel. Request variables come in already filtered to KERNEL_*. Caches and IPython's
   profile go to /tmp so they do not clutter the user's /workspace. */
static void build_environment(environment *env, const kernel *k, bool with_request_env)
{
    environment_add(env, "PATH", "/usr/local/bin:/usr/bin:/bin");
    environment_add(env, "HOME", ROOTFS_HOME); /* as the sandbox's /etc/passwd says */
    environment_add(env, "USER", "user");
    environment_add(env, "LANG", "C.UTF-8");
    environment_add(env, "PYTHONUNBUFFERED", "1");
    environment_add(env, "MPLBACKEND", "module://matplotlib_inline.backend_inline");
    environment_add(env, "MPLCONFIGDIR", "/tmp/.config/matplotlib");
    environment_add(env, "IPYTHONDIR", "/tmp/.ipython");
    environment_add(env, "XDG_CACHE_HOME", "/tmp/.cache");
    environment_add(env, "CELLBOX_KERNEL_ID", k->id);
    environment_add(env, "OPENBLAS_NUM_THREADS", "1");
    environment_add(env, "OMP_NUM_THREADS", "1");
    /* The template's ENV, after ours (a Dockerfile may set PATH or HOME's neighbours) and before
       the request's, which come last as with every template. */
    for (size_t i = 0; k->spec->env && k->spec->env[i]; i++) {
        char *equals = strchr(k->spec->env[i], '=');
        if (!equals || equals == k->spec->env[i])
            continue;
        char name[256];
        snprintf(name, sizeof name, "%.*s", (int)(equals - k->spec->env[i]), k->spec->env[i]);
        environment_set(env, name, equals + 1);
    }
    put_user_programs_on_path(env);
    if (!with_request_env)
        return;
    const char *name;
    json_t *value;
    json_object_foreach(k->env, name, value)
    {
        if (json_is_string(value))
            environment_add(env, name, json_string_value(value));
    }
}

char **kernel_environment(const kernel *k, json_t *extra)
{
    environment env = {0};
    build_environment(&env, k, true);
    const char *name;
    json_t *value;
    json_object_foreach(extra, name, value)
    {
        if (json_is_string(value) && *name && !strchr(name, '='))
            environment_add(&env, name, json_string_value(value));
    }
    if (!env.entries)
        environment_add(&env, "PATH", "/usr/local/bin:/usr/bin:/bin");
    return env.entries;
}

void kernel_environment_free(char **entries)
{
    for (size_t i = 0; entries && entries[i]; i++)
        free(entries[i]);
    free(entries);
}

static void on_channel_ready(void *owner, uint32_t events);
static void on_output_ready(void *owner, uint32_t events);
static void on_process_exit(void *owner, uint32_t events);

/* Sizes the pipe for the kernel's output limit (see MAX_OUTPUT_PIPE_BYTES); the kernel rounds
   up to a power of two pages. A refusal leaves the default, 64 KiB. */
static size_t size_output_pipe(const kernel *k, int fd)
{
    long long limit = k->sandbox.limits.output_bytes;
    long long wanted = limit > 0 && limit < MAX_OUTPUT_PIPE_BYTES ? limit : MAX_OUTPUT_PIPE_BYTES;
    if (wanted < MIN_OUTPUT_PIPE_BYTES)
        wanted = MIN_OUTPUT_PIPE_BYTES;
    if (fcntl(fd, F_SETPIPE_SZ, (int)wanted) < 0)
        log_debug("kernel %s: output pipe stays at its default size: %s", k->id, strerror(errno));
    int size = fcntl(fd, F_GETPIPE_SZ);
    return size > 0 ? (size_t)size : MIN_OUTPUT_PIPE_BYTES;
}

static void watch_output(kernel *k, output_pipe *pipe_end, int fd, const char *name)
{
    pipe_end->fd = fd;
    pipe_end->name = name;
    pipe_end->owner = k;
    pipe_end->capacity = size_output_pipe(k, fd);
    fcntl(fd, F_SETFL, O_NONBLOCK);
    loop_watch_add(&pipe_end->watch, fd, EPOLLIN, on_output_ready, pipe_end);
}

/* Variables and the working directory a started kernel takes on before its first request (the
   runtime's "environment" message); nothing when there is neither. */
static void send_settings(kernel *k, json_t *env)
{
    if (json_object_size(env) == 0 && !k->working_directory)
        return;
    json_t *message = json_pack("{s:s, s:s, s:o}", "channel", "cellbox", "type", "environment",
                                "set", env ? json_incref(env) : json_object());
    if (k->working_directory)
        json_object_set_new(message, "cwd", json_string(k->working_directory));
    kernel_send(k, message);
    json_decref(message);
}

static long long current_oom_kills(const kernel *k)
{
    cgroup_counters counters;
    if (!k->sandbox.cgroup)
        return 0;
    cgroup_read_limit_events(k->sandbox.cgroup, &counters);
    return counters.oom_kills;
}

static void on_zygote_answer(void *arg, pid_t pid, const char *why);

/* The kernel's process is known (cloned by the zygote, or a context that joined its sandbox once
   it was set up): the loop hears its exit, and an interrupt that came before is delivered now. */
static void watch_process(kernel *k, pid_t pid, int pidfd)
{
    k->pid = pid;
    k->pidfd = pidfd;
    loop_watch_add(&k->pid_watch, k->pidfd, EPOLLIN, on_process_exit, k);
    if (k->signal_on_spawn)
        kill(-pid, k->signal_on_spawn);
    k->signal_on_spawn = 0;
}
static void release_process(kernel *k);

static void set_setup_window(kernel *k, bool open)
{
    if (k->sandbox.cgroup)
        cgroup_setup_window(k->sandbox.cgroup, open);
}

/* The kernel's stdin (/dev/null), stdout, stderr and message channel: its sandbox gets one end
   of each as fds 0-3, the daemon keeps the others. */
typedef struct kernel_descriptors {
    int devnull;
    int channel[2], out[2], err[2]; /* [1]: the sandbox's end */
} kernel_descriptors;

static int open_kernel_descriptors(kernel_descriptors *d, char *why, size_t why_size)
{
    d->devnull = open("/dev/null", O_RDWR | O_CLOEXEC);
    if (d->devnull < 0 || socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, d->channel) < 0 ||
        pipe2(d->out, O_CLOEXEC) < 0 || pipe2(d->err, O_CLOEXEC) < 0) {
        snprintf(why, why_size, "cannot create the kernel's channels: %s", strerror(errno));
        return -1; /* fds leak only on EMFILE-class failures, where we are in trouble anyway */
    }
    return 0;
}

/* What the kernel's sandbox is: its root, limits, program, environment and descriptors. */
static void describe_kernel_sandbox(const kernel *k, char *const *argv, char *const *envp,
                                    const kernel_descriptors *d, sandbox_spec *spec)
{
    const sandbox_limits *limits = &k->sandbox.limits;
    *spec = (sandbox_spec){
        .root = {.mount_point = k->sandbox.root_mount_point,
                 .workspace = k->workspace,
                 .runtime_dir = k->sandbox.runtime_dir,
                 .uid = k->sandbox.uid,
                 .gid = k->sandbox.uid,
                 .tmp_bytes = limits->disk_bytes,
                 .nameserver = network_gateway(),
                 .volumes = &k->sandbox.volumes,
                 .template = k->spec->template.view ? &k->spec->template : NULL},
        .network = limits->network,
        .open_files = limits->open_files,
        .file_size = limits->disk_bytes,
        .argv = argv,
        .envp = envp,
        .fds = {d->devnull, d->out[1], d->err[1], d->channel[1]},
        .cwd = k->sandbox.cwd,
        .outlives_daemon = keeper_running(), /* another context: adopted as the sandbox is */
        .image_fd = k->sandbox.restore ? k->sandbox.restore_image_fd : 0,
    };
    cgroup_procs_files(k->sandbox.cgroup, spec->cgroup_procs, SANDBOX_MAX_CGROUP_FILES);
    spec->memory_cgroup_procs = cgroup_memory_procs_file(k->sandbox.cgroup);
}

/* The fast path: a clone of the preloaded interpreter. The zygote answers with the pid in a few
   milliseconds (on_zygote_answer); the loop does not wait for it. Until then its pid 1 is
   setting up with the zygote waiting on it: see cgroup_setup_window. Returns false when the
   zygote cannot take it: the kernel starts by exec then, with the request's variables in the
   environment it is given. */
static bool start_by_zygote(kernel *k, sandbox_spec *spec, environment *env, char *why,
                            size_t why_size)
{
    set_setup_window(k, true);
    k->spawn = zygote_spawn_start(k->spec->zygote, spec, k->id, on_zygote_answer, k, why, why_size);
    k->cloned = k->spawn != NULL;
    if (k->spawn)
        return true;
    set_setup_window(k, false);
    if (k->sandbox.restore) /* an image is a zygote's clone's or nothing */
        return false;
    log_warn("kernel %s: %s; starting it by exec", k->id, why);
    environment_free(env);
    *env = (environment){0};
    build_environment(env, k, true);
    spec->envp = env->entries;
    return false;
}

/* Another context joins its host's running sandbox; a kernel of its own starts a new one. */
static pid_t start_by_exec(const kernel *k, const sandbox_spec *spec, int *pidfd, char *why,
                           size_t why_size)
{
    const kernel *host = k->sandbox.host;
    if (!host)
        return sandbox_start(spec, pidfd, why, why_size);
    if (host->pidfd < 0) {
        snprintf(why, why_size, "the sandbox is not running (its default context is %s)",
                 kernel_state_name(host->state));
        return -1;
    }
    return sandbox_join(host->pidfd, spec, pidfd, why, why_size);
}

/* A sandbox of its own that asked for network gets its interface as soon as its pid 1 runs, and
   before any request reaches it. Until then it has loopback only, so a failure leaves it without
   network, never with more: the kernel then dies with the reason (a sandbox that asked for
   network and silently had none would mislead the agent). Another context shares its host's
   namespace, and interface. */
#define MAX_EGRESS_ENTRIES 256 /* per list: a chain of a few rules, an nft run of a few KiB */

/* The lists as C strings (pointers into the JSON), then network_set_policy. */
static int apply_egress_lists(kernel *k, char *why, size_t why_size)
{
    const char *allow[MAX_EGRESS_ENTRIES], *deny[MAX_EGRESS_ENTRIES];
    size_t allow_count = json_array_size(k->allow_out), deny_count = json_array_size(k->deny_out);
    for (size_t i = 0; i < allow_count; i++)
        allow[i] = json_string_value(json_array_get(k->allow_out, i));
    for (size_t i = 0; i < deny_count; i++)
        deny[i] = json_string_value(json_array_get(k->deny_out, i));
    return network_set_policy(k->network_slot, k->id, allow, allow_count, deny, deny_count, why,
                              why_size);
}

/* An entry is an IPv4 address, a CIDR or a domain name (sandbox/network.h says what each
   matches); *domains counts the domains of both lists together, which the resolver limits. */
static bool egress_list_valid(json_t *list, const char *name, size_t *domains, char *why,
                              size_t why_size)
{
    if (!list || json_is_null(list))
        return true;
    if (!json_is_array(list) || json_array_size(list) > MAX_EGRESS_ENTRIES) {
        snprintf(why, why_size, "'%s' must be a list of at most %d IPv4 addresses, CIDRs or domain "
                 "names, e.g. [\"203.0.113.0/24\", \"pypi.org\"]", name, MAX_EGRESS_ENTRIES);
        return false;
    }
    size_t i;
    json_t *entry;
    json_array_foreach(list, i, entry) {
        char canonical[NETWORK_DNS_DOMAIN_SIZE];
        const char *text = json_string_value(entry);
        if (text && network_is_cidr(text))
            continue;
        if (text && network_dns_is_domain(text, canonical)) {
            ++*domains;
            continue;
        }
        snprintf(why, why_size, "'%s'[%zu]%s%.200s%s is no IPv4 address, CIDR or domain name: "
                 "write 203.0.113.0/24, 0.0.0.0/0 for everything, example.com (it and the names "
                 "under it) or *.example.com", name, i, text ? " \"" : "", text ? text : "",
                 text ? "\"" : " (not a string)");
        return false;
    }
    return true;
}

int kernel_set_egress(kernel *k, json_t *allow_out, json_t *deny_out, char *why, size_t why_size)
{
    if (!k->sandbox.limits.network) {
        snprintf(why, why_size, "sandbox %s has no network: allowOut and denyOut apply to a "
                 "sandbox created with network", k->id);
        return -1;
    }
    size_t domains = 0;
    if (!egress_list_valid(allow_out, "allowOut", &domains, why, why_size) ||
        !egress_list_valid(deny_out, "denyOut", &domains, why, why_size))
        return -1;
    if (domains > NETWORK_DNS_DOMAINS_PER_SANDBOX) {
        snprintf(why, why_size, "allowOut and denyOut name %zu domains together; at most %d: use "
                 "fewer, a parent domain (example.com covers www.example.com) or CIDRs", domains,
                 NETWORK_DNS_DOMAINS_PER_SANDBOX);
        return -1;
    }
    json_t *old_allow = k->allow_out, *old_deny = k->deny_out;
    k->allow_out = json_is_array(allow_out) ? json_incref(allow_out) : NULL;
    k->deny_out = json_is_array(deny_out) ? json_incref(deny_out) : NULL;
    /* Not attached yet: attach_network applies them before any request reaches the sandbox.
       Lists that could not be applied (a limit of the whole daemon's) are not kept: the
       sandbox's chain still holds the old ones. */
    if (k->network_slot >= 0 && apply_egress_lists(k, why, why_size) < 0) {
        json_decref(k->allow_out);
        json_decref(k->deny_out);
        k->allow_out = old_allow;
        k->deny_out = old_deny;
        return -1;
    }
    json_decref(old_allow);
    json_decref(old_deny);
    return 0;
}

json_t *kernel_network_model(const kernel *k)
{
    if (!k->sandbox.limits.network)
        return json_false();
    char address[64] = "";
    if (k->network_slot >= 0)
        network_address(k->network_slot, address, sizeof address);
    return json_pack("{s:o, s:o, s:o}", "address", address[0] ? json_string(address) : json_null(),
                     "allowOut", k->allow_out ? json_deep_copy(k->allow_out) : json_array(),
                     "denyOut", k->deny_out ? json_deep_copy(k->deny_out) : json_array());
}

/* Gives the running sandbox its interface and applies its lists. 0, or -1 with `why`: the sandbox
   keeps loopback only, no slot held. */
static int attach_interface(kernel *k, char *why, size_t why_size)
{
    k->network_slot = network_attach(k->pid, k->pidfd, why, why_size);
    /* Its chain comes with the policy of empty lists: applied only when there are lists. */
    bool has_lists = json_array_size(k->allow_out) + json_array_size(k->deny_out) > 0;
    if (k->network_slot >= 0 && has_lists && apply_egress_lists(k, why, why_size) < 0) {
        network_detach(k->network_slot);
        network_forget_names(k->id);
        k->network_slot = -1;
    }
    return k->network_slot >= 0 ? 0 : -1;
}

static bool attach_network(kernel *k)
{
    if (!k->sandbox.limits.network || k->sandbox.host || k->network_slot >= 0)
        return true;
    char why[512];
    if (attach_interface(k, why, sizeof why) == 0)
        return true;
    log_warn("kernel %s: %s", k->id, why);
    snprintf(k->death_reason, sizeof k->death_reason, "the sandbox's network could not be set up: %.140s",
             why);
    kill(-k->pid, SIGKILL);
    return false;
}

int kernel_give_network(kernel *k, char *why, size_t why_size)
{
    if (k->sandbox.limits.network)
        return 0;
    k->sandbox.limits.network = true;
    /* Still being cloned: on_zygote_answer attaches it before it flushes any request. */
    if (k->pid <= 0)
        return 0;
    if (attach_interface(k, why, why_size) == 0)
        return 0;
    k->sandbox.limits.network = false; /* it has none: never reported or recorded as networked */
    return -1;
}

/* The process runs (pid 0: the zygote is cloning it, its pidfd comes with the answer): the loop
   hears its channel, its output and its exit, and the kernel starts afresh. */
static void watch_started_kernel(kernel *k, pid_t pid, int pidfd, const kernel_descriptors *d)
{
    k->pid = pid;
    k->pidfd = pidfd;
    k->signal_on_spawn = 0;
    k->channel_fd = d->channel[0];
    fcntl(k->channel_fd, F_SETFL, O_NONBLOCK);
    loop_watch_add(&k->channel_watch, k->channel_fd, EPOLLIN, on_channel_ready, k);
    watch_output(k, &k->out, d->out[0], "stdout");
    watch_output(k, &k->err, d->err[0], "stderr");
    if (pid > 0)
        loop_watch_add(&k->pid_watch, k->pidfd, EPOLLIN, on_process_exit, k);
    k->state = KERNEL_STARTING;
    k->death_reason[0] = '\0';
    if (pid > 0)
        attach_network(k);
    k->setup_failure[0] = '\0';
    k->shutdown_requested = k->restart_requested = k->shutdown_replied = false;
    k->adopted = false;
    k->lost_since_us = 0;
}

/* Another language's kernel runs its kernelspec's argv, always by exec (it has no zygote). */
static char *const *kernel_argv(const kernel *k)
{
    static char *const python_argv[] = {"/opt/cellbox/bin/cellbox-kernel", "--channel-fd=3",
                                        "--python-dir=/opt/cellbox/share/cellbox/python", NULL};
    return k->spec->argv ? k->spec->argv : python_argv;
}

/* ---- another context, made while its host was starting ----
   A context joins its host's sandbox by entering the namespaces of the host's pid 1. Until the
   host kernel has said "starting", that pid 1 may still be building the sandbox: its mount
   namespace still has the daemon's root at / and no /workspace (the join failed with "cannot
   change to the working directory", and a join into that half-built namespace would start on
   the host's files), or the zygote has not answered with its pid at all. So such a context waits,
   without a process, until the host is set up (join_contexts_awaiting, from track_state), or
   dies with the reason when the host ends first. Its channel is already the daemon's: requests
   sent meanwhile wait there, in order, behind its settings. */
static kernel *kernels_awaiting_host;

static void stop_awaiting_host(kernel *k)
{
    if (!k->awaiting_host)
        return;
    for (kernel **at = &kernels_awaiting_host; *at; at = &(*at)->next_awaiting_host) {
        if (*at == k) {
            *at = k->next_awaiting_host;
            break;
        }
    }
    k->next_awaiting_host = NULL;
    k->awaiting_host = false;
    for (int i = 0; i < 4; i++)
        close(k->held_for_join[i]);
}

/* The daemon's ends are watched as for a started kernel; the sandbox's ends are held. */
static void await_host_sandbox(kernel *k, kernel_descriptors *d)
{
    watch_started_kernel(k, 0, -1, d);
    k->held_for_join[0] = d->devnull;
    k->held_for_join[1] = d->out[1];
    k->held_for_join[2] = d->err[1];
    k->held_for_join[3] = d->channel[1];
    k->awaiting_host = true;
    k->next_awaiting_host = kernels_awaiting_host;
    kernels_awaiting_host = k;
    send_settings(k, NULL); /* it starts by exec, with the request's variables */
    log_debug("kernel %s: waits for its sandbox (%s) to be set up", k->id, k->sandbox.host->id);
}

static void fail_awaiting_context(kernel *k, const char *why)
{
    stop_awaiting_host(k);
    snprintf(k->death_reason, sizeof k->death_reason, "kernel died: it could not join its "
             "sandbox: %.*s", text_utf8_prefix(why, 150), why);
    log_warn("kernel %s: %s", k->id, k->death_reason);
    release_process(k);
    k->state = KERNEL_DEAD;
    emit(k, "iopub", message_status(k->session, NULL, "dead"));
}

static void join_host_sandbox(kernel *k)
{
    kernel_descriptors d = {.devnull = k->held_for_join[0],
                            .out = {-1, k->held_for_join[1]},
                            .err = {-1, k->held_for_join[2]},
                            .channel = {-1, k->held_for_join[3]}};
    environment env = {0};
    build_environment(&env, k, true);
    sandbox_spec spec;
    describe_kernel_sandbox(k, kernel_argv(k), env.entries, &d, &spec);
    char why[160];
    int pidfd = -1;
    pid_t pid = start_by_exec(k, &spec, &pidfd, why, sizeof why);
    environment_free(&env);
    if (pid < 0) {
        fail_awaiting_context(k, why);
        return;
    }
    stop_awaiting_host(k); /* closes the sandbox's ends: the process has its own */
    watch_process(k, pid, pidfd);
    announce_started(k);
}

/* Each is taken off the list before it is handled, so the walk starts over after each. */
static void join_contexts_awaiting(const kernel *host)
{
    for (kernel *k = kernels_awaiting_host; k; k = kernels_awaiting_host) {
        while (k && k->sandbox.host != host)
            k = k->next_awaiting_host;
        if (!k)
            return;
        join_host_sandbox(k);
    }
}

static void fail_contexts_awaiting(const kernel *host, const char *host_reason)
{
    char why[160];
    snprintf(why, sizeof why, "it ended before this context started (%.*s); make the context "
             "again once the sandbox runs", text_utf8_prefix(host_reason, 90), host_reason);
    for (kernel *k = kernels_awaiting_host; k; k = kernels_awaiting_host) {
        while (k && k->sandbox.host != host)
            k = k->next_awaiting_host;
        if (!k)
            return;
        fail_awaiting_context(k, why);
    }
}

/* Starts the kernel's process: cloned by the zygote when `allow_zygote` and it is ready (the pid
   comes later, on_zygote_answer), else by exec, or joined into its host's sandbox for another
   context. */
static int spawn_process_with(kernel *k, bool allow_zygote, char *why, size_t why_size)
{
    kernel_descriptors d;
    if (open_kernel_descriptors(&d, why, why_size) < 0)
        return -1;
    k->oom_kills_at_start = current_oom_kills(k);
    k->spawned_at_ms = clock_monotonic_ms();
    if (k->sandbox.host && k->sandbox.host->state == KERNEL_STARTING) {
        await_host_sandbox(k, &d);
        return 0;
    }
    /* A request's variables never pass through the zygote, whose memory every later kernel
       inherits: a zygote kernel gets them over its own channel once it runs. Another context
       of a running sandbox starts by exec inside its namespaces. */
    bool via_zygote = allow_zygote && !k->sandbox.host && !k->spec->argv &&
                      zygote_is_ready(k->spec->zygote);
    k->cloned = false;
    if (k->sandbox.restore && !via_zygote) {
        snprintf(why, why_size, "restore failed: %s",
                 zygote_is_ready(k->spec->zygote) ? "only a Python kernel's image can be restored"
                                                  : "the zygote is not ready (it is starting): "
                                                    "try again in a few seconds");
        close(d.devnull), close(d.out[0]), close(d.out[1]), close(d.err[0]), close(d.err[1]);
        close(d.channel[0]), close(d.channel[1]);
        return -1;
    }
    environment env = {0};
    build_environment(&env, k, !via_zygote);
    sandbox_spec spec;
    describe_kernel_sandbox(k, kernel_argv(k), env.entries, &d, &spec);
    int pidfd = -1;
    if (via_zygote)
        via_zygote = start_by_zygote(k, &spec, &env, why, why_size);
    pid_t pid = via_zygote ? 0 : k->sandbox.restore ? -1 : start_by_exec(k, &spec, &pidfd, why, why_size);
    environment_free(&env);
    close(d.devnull);
    close(d.out[1]);
    close(d.err[1]);
    close(d.channel[1]);
    if (pid < 0) {
        close(d.out[0]), close(d.err[0]), close(d.channel[0]);
        return -1;
    }
    watch_started_kernel(k, pid, pidfd, &d);
    if (k->sandbox.restore) { /* once: a later restart starts a new interpreter */
        k->restore_state = KERNEL_RESTORING;
        k->sandbox.restore = false;
        close(k->sandbox.restore_image_fd);
        k->sandbox.restore_image_fd = -1;
        return 0; /* its variables and directory are the image's */
    }
    k->restore_state = KERNEL_NOT_RESTORED;
    /* a clone of the zygote has none of its request's variables yet; an exec'd kernel has */
    send_settings(k, via_zygote ? k->env : NULL);
    if (pid > 0)
        announce_started(k);
    return 0;
}

static int spawn_process(kernel *k, char *why, size_t why_size)
{
    return spawn_process_with(k, true, why, why_size);
}

/* ---- stdout/stderr → stream messages ---- */

static void emit_stream(kernel *k, const char *name, const char *text, size_t length)
{
    emit(k, "iopub", message_stream(k->session, k->current_request, name, text, length));
}

/* ---- the per-execution output limit ----

   A cell's output (stream text, and the data of display_data, update_display_data and
   execute_result) counts against one limit. From the first output that does not fit, the rest
   of the cell's output is dropped, with one note saying what was dropped and at which limit;
   finish_execution says how many bytes were dropped in all. */

static bool output_fits(const kernel *k, long long length)
{
    long long limit = k->sandbox.limits.output_bytes;
    return !k->execution.active || limit <= 0 ||
           (k->execution.dropped_bytes == 0 && k->execution.output_bytes + length <= limit);
}

/* `what` is what the first dropped output was, when it was dropped whole (NULL: stream text cut
   at the limit). */
static void note_output_truncated(kernel *k, const char *what, long long what_bytes)
{
    char limit[32], size[32], marker[224];
    limits_format_size(k->sandbox.limits.output_bytes, limit, sizeof limit);
    int n;
    if (what) {
        limits_format_size(what_bytes, size, sizeof size);
        n = snprintf(marker, sizeof marker,
                     "\n[cellbox: output truncated at %s; this %s (%s) and the rest of this cell's "
                     "output are dropped]\n",
                     limit, what, size);
    } else {
        n = snprintf(
            marker, sizeof marker,
            "\n[cellbox: output truncated at %s; the rest of this cell's output is dropped]\n",
            limit);
    }
    emit_stream(k, "stderr", marker, (size_t)n);
}

/* Stream text: what fits is published, the first text that does not is cut at the limit (on a
   character boundary). */
static void publish_text(kernel *k, const char *name, const char *text, size_t length)
{
    if (output_fits(k, (long long)length)) {
        k->execution.output_bytes += (long long)length;
        emit_stream(k, name, text, length);
        return;
    }
    if (k->execution.dropped_bytes == 0) {
        long long left = k->sandbox.limits.output_bytes - k->execution.output_bytes;
        size_t room = text_utf8_fit(text, length, left > 0 ? (size_t)left : 0);
        if (room > 0)
            emit_stream(k, name, text, room);
        k->execution.output_bytes += (long long)room;
        k->execution.dropped_bytes += (long long)(length - room);
        note_output_truncated(k, NULL, 0);
        return;
    }
    k->execution.dropped_bytes += (long long)length;
}

static bool is_rich_output(const char *type)
{
    return strcmp(type, "display_data") == 0 || strcmp(type, "update_display_data") == 0 ||
           strcmp(type, "execute_result") == 0;
}

/* Rich output from the kernel: published whole or dropped whole. Its size is that of its MIME
   bundle as JSON (what a client receives). False when it is dropped. */
static bool admit_rich_output(kernel *k, const char *type, json_t *message)
{
    if (!k->execution.active || !is_rich_output(type))
        return true;
    json_t *data = json_object_get(json_object_get(message, "content"), "data");
    long long length = data ? (long long)json_dumpb(data, NULL, 0, JSON_COMPACT) : 0;
    if (output_fits(k, length)) {
        k->execution.output_bytes += length;
        return true;
    }
    if (k->execution.dropped_bytes == 0)
        note_output_truncated(k, type, length);
    k->execution.dropped_bytes += length;
    return false;
}

/* Publishes what has been read from the pipe as one stream message (valid UTF-8; an incomplete
   trailing character waits for the next read unless `final`). */
static void flush_output(output_pipe *p, int final)
{
    if (buffer_size(&p->pending) == 0)
        return;
    if (p->owner->awaiting_first_word && !final && buffer_size(&p->pending) < MAX_READ_PER_WAKEUP)
        return; /* its parent is not known yet (kernel_adopt) */
    buffer text = {0};
    size_t kept = text_append_utf8(&text, (const unsigned char *)buffer_head(&p->pending),
                                   buffer_size(&p->pending), final);
    if (buffer_size(&text) > 0 && p->owner->state == KERNEL_STARTING) {
        /* Before it is ready a kernel has no client to read this (a warm-pool kernel never
           had one): it is why the sandbox could not be set up, so it goes to the log. */
        int length = (int)buffer_size(&text);
        while (length > 0 && buffer_head(&text)[length - 1] == '\n')
            length--;
        log_warn("kernel %s: %s: %.*s", p->owner->id, p->name, length, buffer_head(&text));
        static const char marker[] = SANDBOX_SETUP_FAILED_PREFIX;
        static const char restore_marker[] = "restore failed: "; /* runtime/restorer.c */
        if ((size_t)length > sizeof marker - 1 && memcmp(buffer_head(&text), marker, sizeof marker - 1) == 0)
            snprintf(p->owner->setup_failure, sizeof p->owner->setup_failure, "%.*s",
                     length - (int)(sizeof marker - 1), buffer_head(&text) + sizeof marker - 1);
        const char *restore_line = memmem(buffer_head(&text), (size_t)length, restore_marker,
                                          sizeof restore_marker - 1);
        if (restore_line && p->owner->restore_state == KERNEL_RESTORING) {
            int offset = (int)(restore_line - buffer_head(&text)) + (int)sizeof restore_marker - 1;
            int end = offset;
            while (end < length && buffer_head(&text)[end] != '\n')
                end++;
            snprintf(p->owner->setup_failure, sizeof p->owner->setup_failure, "%.*s",
                     end - offset, buffer_head(&text) + offset);
        }
    }
    if (buffer_size(&text) > 0)
        publish_text(p->owner, p->name, buffer_head(&text), buffer_size(&text));
    buffer_consume(&p->pending, buffer_size(&p->pending) - kept);
    buffer_free(&text);
}

static void flush_outputs(kernel *k)
{
    if (k->output_timer) {
        loop_timer_cancel(k->output_timer);
        k->output_timer = 0;
    }
    flush_output(&k->out, 0);
    flush_output(&k->err, 0);
}

static void on_output_timer(void *arg)
{
    kernel *k = arg;
    k->output_timer = 0;
    flush_outputs(k);
}

static void close_output(output_pipe *p)
{
    if (p->fd < 0)
        return;
    loop_watch_remove(&p->watch);
    close(p->fd);
    p->fd = -1;
    flush_output(p, 1);
    buffer_free(&p->pending);
}

/* Reads what the pipe holds now (until it is empty, bounded) into its pending bytes; closes it
   at end of file. What one write() put in the pipe is then pending whole: it is published at
   once only when more is pending than one write() can be (a pipe's worth). */
static void drain_output(output_pipe *p)
{
    unsigned char chunk[READ_CHUNK];
    size_t total = 0;
    while (p->fd >= 0 && total < MAX_READ_PER_WAKEUP) {
        ssize_t n = read(p->fd, chunk, sizeof chunk);
        if (n > 0) {
            buffer_append(&p->pending, chunk, (size_t)n);
            total += (size_t)n;
        } else if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
            close_output(p);
        } else if (errno == EAGAIN) {
            break;
        }
    }
    if (buffer_size(&p->pending) >= p->capacity)
        flush_output(p, 0);
}

static void read_channel(kernel *k);

static bool ends_a_line(const output_pipe *p)
{
    return buffer_size(&p->pending) > 0 && buffer_head(&p->pending)[buffer_size(&p->pending) - 1] == '\n';
}

/* Frames already waiting were written before this output (docs/kernel-protocol.md): handle them
   first so the output gets the right parent and order. The output itself is published when it
   ends a line, or after a short wait for the rest of one: print("x =", x) writes four times, and
   clients (AutoGen joins stream messages with newlines) must see one message, as ipykernel's
   buffered streams produce. Any frame from the kernel publishes it at once. */
static void on_output_ready(void *owner, uint32_t events)
{
    output_pipe *p = owner;
    kernel *k = p->owner;
    if (k->channel_fd >= 0)
        read_channel(k);
    drain_output(p);
    if (ends_a_line(p))
        flush_output(p, 0);
    if (!k->output_timer && (buffer_size(&k->out.pending) || buffer_size(&k->err.pending)))
        k->output_timer = loop_timer_add(OUTPUT_COALESCE_MS, on_output_timer, k);
}

/* ---- messages from the kernel ---- */

/* How much a signal does, to keep the strongest one sent before the pid is known. */
static int signal_strength(int signal_number)
{
    return signal_number == SIGKILL ? 3 : signal_number == SIGTERM ? 2 : signal_number ? 1 : 0;
}

static void kill_process_group(kernel *k, int signal_number)
{
    if (k->pid > 0)
        kill(-k->pid, signal_number);
    else if ((k->spawn || k->awaiting_host) &&
             signal_strength(signal_number) > signal_strength(k->signal_on_spawn))
        k->signal_on_spawn = signal_number;
}

static void reject_kernel(kernel *k, const char *why)
{
    log_warn("kernel %s: %s; killing it", k->id, why);
    if (!k->death_reason[0])
        snprintf(k->death_reason, sizeof k->death_reason, "kernel died: it broke the protocol (%.*s)",
                 text_utf8_prefix(why, 150), why);
    kill_process_group(k, SIGKILL);
}

/* ---- per-execution limits: timeout, output volume, and what the cgroup saw ---- */

static void cancel_execution_timer(kernel *k)
{
    if (k->execution.timer) {
        loop_timer_cancel(k->execution.timer);
        k->execution.timer = 0;
    }
}

static void note(kernel *k, const char *text)
{
    emit_stream(k, "stderr", text, strlen(text));
}

static void on_interrupt_ignored(void *arg)
{
    kernel *k = arg;
    k->execution.timer = 0;
    snprintf(k->death_reason, sizeof k->death_reason,
             "kernel died: timeout after %d s (the cell did not stop when interrupted)",
             k->sandbox.limits.timeout_seconds);
    kill_process_group(k, SIGKILL);
}

static void on_execution_timeout(void *arg)
{
    kernel *k = arg;
    char text[160];
    snprintf(text, sizeof text, "\n[cellbox: timeout after %d s: the cell was interrupted]\n",
             k->sandbox.limits.timeout_seconds);
    note(k, text);
    k->execution.timed_out = true;
    kill_process_group(k, SIGINT);
    k->execution.timer = loop_timer_add(KERNEL_CELL_LIMIT_KILL_GRACE_MS, on_interrupt_ignored, k);
}

static void start_execution(kernel *k)
{
    cgroup_counters counters = {0};
    if (k->sandbox.cgroup)
        cgroup_read_limit_events(k->sandbox.cgroup, &counters);
    cancel_execution_timer(k);
    k->execution.active = true;
    k->execution.output_bytes = k->execution.dropped_bytes = 0;
    k->execution.timed_out = false;
    k->execution.pids_hits_at_start = counters.pids_limit_hits;
    k->execution.oom_kills_at_start = counters.oom_kills;
    if (k->sandbox.limits.timeout_seconds > 0)
        k->execution.timer = loop_timer_add((int64_t)k->sandbox.limits.timeout_seconds * 1000,
                                            on_execution_timeout, k);
}

/* Before the cell's `idle` goes out, say in words which limit it ran into. */
static void finish_execution(kernel *k)
{
    char text[256], size[32];
    cancel_execution_timer(k);
    k->execution.active = false;
    k->last_dropped_bytes = k->execution.dropped_bytes;
    if (k->execution.dropped_bytes > 0) {
        snprintf(text, sizeof text, "[cellbox: %lld bytes of output were dropped]\n",
                 k->execution.dropped_bytes);
        note(k, text);
    }
    cgroup_counters counters = {0};
    if (k->sandbox.cgroup)
        cgroup_read_limit_events(k->sandbox.cgroup, &counters);
    if (counters.pids_limit_hits > k->execution.pids_hits_at_start) {
        snprintf(text, sizeof text, "[cellbox: pids limit %d reached: new processes or threads were "
                 "refused]\n", k->sandbox.limits.pids);
        note(k, text);
    }
    if (counters.oom_kills > k->execution.oom_kills_at_start) {
        limits_format_size(k->sandbox.limits.memory_bytes, size, sizeof size);
        snprintf(text, sizeof text, "[cellbox: a process in this sandbox was killed: out of memory "
                 "(limit %s)]\n", size);
        note(k, text);
    }
    if (volume_describe_full(k->workspace, k->sandbox.limits.disk_bytes, text, sizeof text))
        note(k, text);
}

static bool is_execute(json_t *header)
{
    const char *type = json_string_value(json_object_get(header, "msg_type"));
    return type && strcmp(type, "execute_request") == 0;
}

/* The first word of an adopted kernel on its new channel says it is in the middle of a request
   (runtime/python/cellbox_kernel/channel.py, docs/kernel-protocol.md): what that request sent
   while no daemon listened went into the old channel and is gone. Said once, to its clients. */
static void report_lost_output(kernel *k)
{
    time_t seconds = (time_t)(k->lost_since_us / 1000000);
    struct tm utc;
    gmtime_r(&seconds, &utc);
    char text[200];
    snprintf(text, sizeof text, "\n[cellbox: cellboxd restarted while this cell ran; its output "
             "after %02d:%02d:%02d UTC was lost]\n", utc.tm_hour, utc.tm_min, utc.tm_sec);
    note(k, text);
    log_info("kernel %s: adopted in the middle of a request; the client was told its output "
             "after %02d:%02d:%02d UTC was lost", k->id, utc.tm_hour, utc.tm_min, utc.tm_sec);
    k->lost_since_us = 0;
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
            if (is_execute(k->current_request))
                start_execution(k);
            if (k->lost_since_us)
                report_lost_output(k);
            if (k->awaiting_first_word) {
                k->awaiting_first_word = false;
                flush_outputs(k); /* what it printed meanwhile, under the request it ran for */
            }
        } else if (strcmp(state, "idle") == 0 || strcmp(state, "starting") == 0) {
            bool was_starting = k->state == KERNEL_STARTING;
            k->lost_since_us = 0; /* it reported in between requests: nothing ran unseen */
            if (k->awaiting_first_word) {
                k->awaiting_first_word = false;
                flush_outputs(k);
            }
            if (k->state == KERNEL_STARTING)
                log_debug("kernel %s: ready %lld ms after its sandbox was requested", k->id,
                          (long long)(clock_monotonic_ms() - k->spawned_at_ms));
            if (k->execution.active)
                finish_execution(k);
            k->state = KERNEL_IDLE; /* "starting" is sent once the kernel can take requests */
            if (was_starting) /* its sandbox is set up: contexts made meanwhile can join it */
                join_contexts_awaiting(k);
        }
    } else if (strcmp(type, "execute_input") == 0) {
        json_t *count = json_object_get(content, "execution_count");
        if (json_is_integer(count))
            k->execution_count = json_integer_value(count);
    }
}

/* A restored kernel's "restored" (its idle, next, makes it ready); the checkpoint's frames go
   to their handler (kernel/checkpoint.c), never to a client. */
static void handle_cellbox_frame(kernel *k, json_t *message)
{
    const char *type = json_string_value(json_object_get(message, "type"));
    if (strcmp(type, "restored") == 0) {
        if (k->restore_state == KERNEL_RESTORING) {
            k->restore_state = KERNEL_RESTORED;
            json_decref(k->restore_report);
            k->restore_report = json_incref(json_object_get(message, "report"));
        }
        return;
    }
    kernel_checkpoint_frame(k, message);
}

static void handle_kernel_message(kernel *k, const char *bytes, size_t length)
{
    char why[160];
    if (!k->awaiting_first_word) /* else track_state knows first whose it is */
        flush_outputs(k); /* output read before this message belongs before it */
    json_t *message = message_from_kernel(bytes, length, why, sizeof why);
    if (!message) {
        reject_kernel(k, why);
        return;
    }
    const char *channel = json_string_value(json_object_get(message, "channel"));
    if (strcmp(channel, "cellbox") == 0) { /* to the daemon itself: checkpoint.c's frames are
                                              handled here, every one reaches the handlers
                                              (namespace_transfer.c's) */
        handle_cellbox_frame(k, message);
        deliver(k, channel, message);
        json_decref(message);
        return;
    }
    const char *type = message_type(message);
    if (strcmp(channel, "control") == 0 && strcmp(type, "shutdown_reply") == 0)
        k->shutdown_replied = true;
    if (strcmp(channel, "iopub") == 0) {
        track_state(k, type, message);
        if (!admit_rich_output(k, type, message)) {
            json_decref(message);
            return;
        }
    }
    if (!message_type_is_untracked(message_parent_type(message)))
        kernel_touch(k);
    deliver(k, channel, message);
    json_decref(message);
}

/* Hands each whole frame of the byte stream to handle_kernel_message. */
static void parse_frames(kernel *k)
{
    size_t length;
    while (buffer_size(&k->channel_in) > 0 && !k->death_reason[0]) { /* stop after a rejection */
        const unsigned char *head = (const unsigned char *)buffer_head(&k->channel_in);
        message_frame_status status = message_frame_next(head, buffer_size(&k->channel_in), &length);
        if (status == MESSAGE_FRAME_INCOMPLETE)
            return;
        if (status == MESSAGE_FRAME_TOO_LARGE) {
            char why[96];
            snprintf(why, sizeof why, "a frame of %zu bytes exceeds the %u-byte limit", length,
                     MESSAGE_MAX_FRAME_BYTES);
            buffer_free(&k->channel_in);
            reject_kernel(k, why);
            return;
        }
        handle_kernel_message(k, (const char *)head + 4, length);
        buffer_consume(&k->channel_in, 4 + length);
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

static void on_hangup_grace_over(void *arg)
{
    kernel *k = arg;
    k->hangup_timer = 0;
    if (!k->death_reason[0])
        snprintf(k->death_reason, sizeof k->death_reason,
                 "kernel died: it closed its channel to the daemon");
    kill_process_group(k, SIGKILL);
}

static void read_channel(kernel *k)
{
    /* A zygote's clone can speak before the zygote's answer with its pid is read (two sockets,
       no order between them). Its messages wait in the socket until the answer
       (on_zygote_answer watches the channel again): read now, a "ready" made a kernel without a
       pid look started, and a file call right after its create found no sandbox root. The
       watch is removed, not muted, so a hang-up meanwhile cannot spin the loop. */
    if (k->spawn) {
        loop_watch_remove(&k->channel_watch);
        return;
    }
    char chunk[READ_CHUNK];
    size_t total = 0;
    while (k->channel_fd >= 0 && total < MAX_READ_PER_WAKEUP) {
        ssize_t n = recv(k->channel_fd, chunk, sizeof chunk, 0);
        if (n > 0) {
            buffer_append(&k->channel_in, chunk, (size_t)n);
            total += (size_t)n;
            if ((size_t)n < sizeof chunk)
                break; /* drained: another recv would only say EAGAIN (the loop is level-triggered) */
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && errno == EAGAIN)
            break;
        /* End of file: the kernel is exiting (its pidfd will say how) or closed its channel
           and lives on without one — then it is finished off after a grace period. Before the
           zygote's answer it means the zygote died holding the other end: the answer (a failure)
           decides, and the requests waiting in channel_out go to the kernel started instead. */
        parse_frames(k);
        if (k->spawn) {
            loop_watch_modify(&k->channel_watch, 0);
            return;
        }
        close_channel(k);
        if (!k->hangup_timer)
            k->hangup_timer = loop_timer_add(HANGUP_GRACE_MS, on_hangup_grace_over, k);
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

/* ---- shutdown_request ---- */

/* The reply a kernel still busy with a cell could not send, as ipykernel sends it: on control to
   the client that asked, and a copy on iopub. */
static void answer_shutdown_request(kernel *k)
{
    k->shutdown_replied = true;
    json_t *content = json_pack("{s:s, s:b}", "status", "ok", "restart", k->restart_requested);
    emit(k, "control", message_new("shutdown_reply", k->session, k->shutdown_request,
                                   json_deep_copy(content)));
    emit(k, "iopub", message_new("shutdown_reply", k->session, k->shutdown_request, content));
}

static void on_shutdown_grace_over(void *arg)
{
    kernel *k = arg;
    k->shutdown_timer = 0;
    if (!k->shutdown_replied)
        answer_shutdown_request(k);
    if (!k->restart_requested && !k->death_reason[0])
        snprintf(k->death_reason, sizeof k->death_reason,
                 "kernel shut down on request (still running %d s later, it was killed)",
                 SHUTDOWN_GRACE_MS / 1000);
    kill_process_group(k, SIGKILL);
}

static void note_shutdown_request(kernel *k, json_t *message)
{
    k->shutdown_requested = true;
    json_t *content = json_object_get(message, "content");
    k->restart_requested = json_is_true(json_object_get(content, "restart"));
    k->shutdown_replied = false;
    json_decref(k->shutdown_request);
    k->shutdown_request = json_incref(json_object_get(message, "header"));
    if (!k->shutdown_timer)
        k->shutdown_timer = loop_timer_add(SHUTDOWN_GRACE_MS, on_shutdown_grace_over, k);
}

int kernel_send(kernel *k, json_t *message)
{
    if (k->state == KERNEL_DEAD || k->channel_fd < 0)
        return -1;
    const char *type = message_type(message);
    if (type && strcmp(type, "shutdown_request") == 0)
        note_shutdown_request(k, message);
    char *text = json_dumps(message, JSON_COMPACT);
    if (!text)
        die("out of memory encoding a message");
    size_t length = strlen(text);
    buffer_append_u32le(&k->channel_out, (unsigned)length);
    buffer_append(&k->channel_out, text, length);
    free(text);
    if (!k->spawn && !k->requests_held) /* else it waits: the zygote's answer, a checkpoint */
        flush_channel(k);
    return 0;
}

void kernel_hold_requests(kernel *k, bool hold)
{
    k->requests_held = hold;
    if (!hold && !k->spawn && k->channel_fd >= 0)
        flush_channel(k);
}

int kernel_send_now(kernel *k, json_t *message)
{
    if (k->state == KERNEL_DEAD || k->channel_fd < 0 || k->spawn)
        return -1;
    char *text = json_dumps(message, JSON_COMPACT);
    if (!text)
        die("out of memory encoding a message");
    size_t length = strlen(text);
    /* Ahead of anything held: what is queued waits behind this frame. */
    buffer held = k->channel_out;
    k->channel_out = (buffer){0};
    buffer_append_u32le(&k->channel_out, (unsigned)length);
    buffer_append(&k->channel_out, text, length);
    free(text);
    flush_channel(k);
    if (buffer_size(&held))
        buffer_append(&k->channel_out, buffer_head(&held), buffer_size(&held));
    buffer_free(&held);
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
        return; /* already named: protocol violation or timeout */
    if (k->restore_state == KERNEL_RESTORING) {
        k->restore_state = KERNEL_RESTORE_FAILED;
        snprintf(k->death_reason, sizeof k->death_reason, "restore failed: %s",
                 k->setup_failure[0] ? k->setup_failure : "the restored process exited before it served");
        return;
    }
    char size[32];
    limits_format_size(k->sandbox.limits.memory_bytes, size, sizeof size);
    if (current_oom_kills(k) > k->oom_kills_at_start) {
        snprintf(k->death_reason, sizeof k->death_reason,
                 "kernel died: out of memory (limit %s); use less memory or ask for a larger "
                 "limit, then restart the kernel", size);
        return;
    }
    if (!info) { /* adopted: its exit status went to whoever reaps it, not to us */
        snprintf(k->death_reason, sizeof k->death_reason,
                 "kernel died: it exited (its exit status is unknown: it was started by a "
                 "previous cellboxd)");
        return;
    }
    int code = info->si_status, signal_number = 0;
    if (info->si_code == CLD_EXITED)
        sandbox_decode_status(info->si_status, &code, &signal_number);
    else
        signal_number = info->si_status, code = 0;
    if (signal_number == 0) {
        if (code == 0 && k->shutdown_requested)
            snprintf(k->death_reason, sizeof k->death_reason, "kernel shut down on request");
        else if (code == SANDBOX_SETUP_FAILED && k->state == KERNEL_STARTING && k->setup_failure[0])
            snprintf(k->death_reason, sizeof k->death_reason,
                     "kernel died: its sandbox could not be set up: %s", k->setup_failure);
        else if (code == SANDBOX_SETUP_FAILED && k->state == KERNEL_STARTING)
            snprintf(k->death_reason, sizeof k->death_reason,
                     "kernel died: its sandbox could not be set up (see the daemon's log)");
        else
            snprintf(k->death_reason, sizeof k->death_reason, "kernel died: exited with status %d", code);
        return;
    }
    const char *what = signal_description(signal_number);
    snprintf(k->death_reason, sizeof k->death_reason, "kernel died: killed by signal %d (SIG%s%s%s)",
             signal_number, sigabbrev_np(signal_number) ? sigabbrev_np(signal_number) : "?",
             what ? ", " : "", what ? what : "");
}

/* A cell that was running when the kernel died (or its sandbox expired) gets an error and a
   reply, so a client waiting for them (AutoGen waits for the error or idle) learns why instead
   of timing out. */
void kernel_fail_running_cell(kernel *k, const char *ename, const char *evalue)
{
    json_t *request = k->current_request;
    const char *type = json_string_value(json_object_get(request, "msg_type"));
    if (k->state != KERNEL_BUSY || !type || strcmp(type, "execute_request") != 0)
        return;
    /* Once per cell: a restart after a kernel's own shutdown has already said why. */
    const char *msg_id = json_string_value(json_object_get(request, "msg_id"));
    if (msg_id && strcmp(msg_id, k->failed_request) == 0)
        return;
    snprintf(k->failed_request, sizeof k->failed_request, "%s", msg_id ? msg_id : "");
    emit(k, "iopub",
         message_new("error", k->session, request, message_error_content(ename, evalue)));
    json_t *reply = message_error_content(ename, evalue);
    json_object_set_new(reply, "status", json_string("error"));
    json_object_set_new(reply, "execution_count", json_integer(k->execution_count));
    emit(k, "shell", message_new("execute_reply", k->session, request, reply));
}

static void close_old_channel(kernel *k)
{
    if (k->old_channel_fd >= 0) {
        loop_watch_remove(&k->old_channel_watch);
        close(k->old_channel_fd);
        k->old_channel_fd = -1;
    }
    if (k->new_channel_for_kernel >= 0)
        close(k->new_channel_for_kernel);
    k->new_channel_for_kernel = -1;
}

static void release_process(kernel *k)
{
    close_old_channel(k);
    if (k->network_slot >= 0) {
        network_detach(k->network_slot);
        network_forget_names(k->id); /* after: the chain that referred to its sets is gone */
    }
    k->network_slot = -1;
    if (k->pidfd >= 0) {
        loop_watch_remove(&k->pid_watch);
        close(k->pidfd);
        k->pidfd = -1;
    }
    close_channel(k);
    close_output(&k->out);
    close_output(&k->err);
    if (k->output_timer) {
        loop_timer_cancel(k->output_timer);
        k->output_timer = 0;
    }
    if (k->hangup_timer) {
        loop_timer_cancel(k->hangup_timer);
        k->hangup_timer = 0;
    }
    if (k->shutdown_timer) {
        loop_timer_cancel(k->shutdown_timer);
        k->shutdown_timer = 0;
    }
    json_decref(k->shutdown_request);
    k->shutdown_request = NULL;
    k->pid = 0;
}

/* jupyter_client restarts a kernel by asking it to shut down with restart: true, then starting
   a new one when it has exited; a client that sends that request itself expects the same. The
   kernel's connections stay attached: they see status restarting, then the new kernel's. */
static void restart_after_shutdown(kernel *k)
{
    log_info("kernel %s: restarting, as a client asked (shutdown_request with restart)", k->id);
    snprintf(k->death_reason, sizeof k->death_reason,
             "kernel restarted on request: this cell was stopped");
    kernel_fail_running_cell(k, "KernelDied", k->death_reason); /* a cell it was still running (killed after the grace period) */
    release_process(k); /* the process is reaped already: nothing to kill or wait for */
    char why[160];
    if (kernel_restart(k, why, sizeof why) < 0) {
        log_warn("kernel %s: %s", k->id, k->death_reason);
        emit(k, "iopub", message_status(k->session, NULL, "dead"));
    }
}

static void on_process_exit(void *owner, uint32_t events)
{
    kernel *k = owner;
    siginfo_t info = {0};
    /* An adopted process is not our child (ECHILD): its pidfd turning readable is its exit. */
    bool status_known = true;
    if (waitid(P_PIDFD, (id_t)k->pidfd, &info, WEXITED | WNOHANG) < 0) {
        if (!k->adopted || errno != ECHILD)
            return;
        status_known = false;
    } else if (info.si_pid == 0) {
        return;
    }
    /* Whatever it said before dying is still worth delivering, in order. */
    if (k->channel_fd >= 0)
        read_channel(k);
    drain_output(&k->out);
    drain_output(&k->err);
    flush_outputs(k); /* and the setup's complaint, if any, is known to describe_exit */
    kill_process_group(k, SIGKILL); /* children it left behind */
    if (k->restart_requested) {
        fail_contexts_awaiting(k, "it restarted");
        restart_after_shutdown(k);
        return;
    }
    describe_exit(k, status_known ? &info : NULL);
    log_info("kernel %s: %s", k->id, k->death_reason);
    cancel_execution_timer(k);
    k->execution.active = false;
    release_process(k);
    kernel_fail_running_cell(k, "KernelDied", k->death_reason);
    k->state = KERNEL_DEAD;
    emit(k, "iopub", message_status(k->session, k->current_request, "dead"));
    fail_contexts_awaiting(k, k->death_reason);
}

/* The zygote's answer for the kernel spawn_process asked it to clone. Requests sent meanwhile
   waited in channel_out (kernel_send): they go now, to this process or, if the zygote failed,
   to the one started by exec instead. */
static void on_zygote_answer(void *arg, pid_t pid, const char *why)
{
    kernel *k = arg;
    k->spawn = NULL;
    set_setup_window(k, false); /* before any request of the user's is flushed to it */
    int pidfd = pid > 0 ? (int)syscall(SYS_pidfd_open, pid, 0) : -1;
    if (pidfd >= 0) {
        watch_process(k, pid, pidfd);
        attach_network(k);
        if (k->channel_watch.fd < 0) /* read_channel let go of it until now */
            loop_watch_add(&k->channel_watch, k->channel_fd, EPOLLIN, on_channel_ready, k);
        flush_channel(k);
        announce_started(k);
        return;
    }
    if (pid > 0) { /* no pidfd (out of descriptors): a process we cannot watch is no kernel */
        kill(-pid, SIGKILL);
        waitpid(pid, NULL, 0);
    }
    if (k->restore_state == KERNEL_RESTORING) { /* an image has no exec to fall back on */
        release_process(k);
        k->restore_state = KERNEL_RESTORE_FAILED;
        k->state = KERNEL_DEAD;
        snprintf(k->death_reason, sizeof k->death_reason, "restore failed: %s",
                 pid > 0 ? "cannot watch its clone" : why);
        log_warn("kernel %s: %s", k->id, k->death_reason);
        emit(k, "iopub", message_status(k->session, NULL, "dead"));
        fail_contexts_awaiting(k, k->death_reason);
        return;
    }
    log_warn("kernel %s: %s; starting it by exec", k->id, pid > 0 ? "cannot watch its clone" : why);
    int strongest = k->signal_on_spawn;
    buffer waiting = k->channel_out; /* kept across the restart of the channel */
    k->channel_out = (buffer){0};
    release_process(k);
    char reason[160];
    if (spawn_process_with(k, false, reason, sizeof reason) < 0) {
        buffer_free(&waiting);
        k->state = KERNEL_DEAD;
        snprintf(k->death_reason, sizeof k->death_reason, "kernel died: it could not be started: %.*s",
                 text_utf8_prefix(reason, 150), reason);
        log_warn("kernel %s: %s", k->id, k->death_reason);
        emit(k, "iopub", message_status(k->session, NULL, "dead"));
        fail_contexts_awaiting(k, k->death_reason);
        return;
    }
    if (buffer_size(&waiting))
        buffer_append(&k->channel_out, buffer_head(&waiting), buffer_size(&waiting));
    buffer_free(&waiting);
    flush_channel(k);
    if (strongest)
        kill_process_group(k, strongest);
}

/* Stops the process without reporting a death: used by restart and delete. */
static void stop_process(kernel *k)
{
    if (k->zygote_wait) { /* a restore that never started: its image goes */
        loop_timer_cancel(k->zygote_wait);
        k->zygote_wait = 0;
        close(k->sandbox.restore_image_fd);
        k->sandbox.restore = false;
    }
    cancel_execution_timer(k);
    k->execution.active = false;
    if (k->spawn) {
        /* Its sandbox is still being set up by the zygote's clone: finish it and kill it before
           the caller takes the volume and cgroup away (removed under a clone still setting up,
           they left it stuck, and the zygote waiting on it). */
        zygote_spawn_abandon(k->spawn);
        k->spawn = NULL;
        set_setup_window(k, false);
    }
    stop_awaiting_host(k);
    fail_contexts_awaiting(k, "it was stopped or restarted");
    if (k->pid > 0) {
        kill_process_group(k, SIGKILL);
        loop_watch_remove(&k->pid_watch);
        reaper_take(k->pidfd);
        k->pidfd = -1;
    }
    release_process(k);
    json_decref(k->current_request);
    k->current_request = NULL;
}

/* ---- life cycle ---- */

/* A restore needs the zygote (an image is a clone's): one that is still starting (its imports, a
   second or two after the daemon starts) is waited for, up to RESTORE_ZYGOTE_WAIT_MS. */
#define RESTORE_ZYGOTE_WAIT_MS 60000
#define RESTORE_ZYGOTE_POLL_MS 100

static void fail_restore(kernel *k, const char *why)
{
    if (k->sandbox.restore) {
        close(k->sandbox.restore_image_fd);
        k->sandbox.restore = false;
    }
    k->restore_state = KERNEL_RESTORE_FAILED;
    k->state = KERNEL_DEAD;
    snprintf(k->death_reason, sizeof k->death_reason, "restore failed: %.170s", why);
    log_warn("kernel %s: %s", k->id, k->death_reason);
    emit(k, "iopub", message_status(k->session, NULL, "dead"));
    fail_contexts_awaiting(k, k->death_reason);
}

static void on_zygote_wait(void *arg)
{
    kernel *k = arg;
    k->zygote_wait = 0;
    if (!zygote_is_ready(k->spec->zygote)) {
        if (clock_monotonic_ms() - k->zygote_wait_since_ms < RESTORE_ZYGOTE_WAIT_MS) {
            k->zygote_wait = loop_timer_add(RESTORE_ZYGOTE_POLL_MS, on_zygote_wait, k);
            return;
        }
        fail_restore(k, "the zygote did not become ready within 60 s");
        return;
    }
    char why[160];
    if (spawn_process(k, why, sizeof why) < 0)
        fail_restore(k, why);
}

static bool restore_waits_for_zygote(kernel *k)
{
    if (!k->sandbox.restore || k->spec->argv || !k->spec->zygote || zygote_is_ready(k->spec->zygote))
        return false;
    k->state = KERNEL_STARTING;
    k->restore_state = KERNEL_RESTORING;
    k->zygote_wait_since_ms = clock_monotonic_ms();
    k->zygote_wait = loop_timer_add(RESTORE_ZYGOTE_POLL_MS, on_zygote_wait, k);
    return true;
}

kernel *kernel_start(const char *id, const kernelspec *spec, const char *workspace, json_t *env,
                     const kernel_sandbox *sandbox, char *why, size_t why_size)
{
    kernel *k = calloc(1, sizeof *k);
    if (!k || !(k->workspace = strdup(workspace)))
        die("out of memory");
    snprintf(k->id, sizeof k->id, "%s", id);
    id_uuid4(k->session);
    k->spec = spec;
    k->sandbox = *sandbox;
    if (sandbox->restore &&
        (k->sandbox.restore_image_fd = fcntl(sandbox->restore_image_fd, F_DUPFD_CLOEXEC, 3)) < 0) {
        snprintf(why, why_size, "restore failed: cannot keep the image: %s", strerror(errno));
        free(k->workspace);
        free(k);
        return NULL;
    }
    k->env = env ? json_incref(env) : json_object();
    k->pidfd = k->channel_fd = k->out.fd = k->err.fd = k->network_slot = -1;
    k->old_channel_fd = k->new_channel_for_kernel = -1;
    k->last_activity_us = clock_wall_us();
    /* A template's WORKDIR: where its kernels start, as a later cd would put them. */
    if (spec->workdir && !(k->working_directory = strdup(spec->workdir)))
        die("out of memory");
    if (!restore_waits_for_zygote(k) && spawn_process(k, why, why_size) < 0) {
        if (k->sandbox.restore)
            close(k->sandbox.restore_image_fd);
        free(k->working_directory);
        json_decref(k->env);
        free(k->workspace);
        free(k);
        return NULL;
    }
    return k;
}

void kernel_set_environment(kernel *k, json_t *env)
{
    if (json_object_size(env) == 0)
        return;
    json_object_update(k->env, env); /* kept for restarts */
    send_settings(k, env);
}

void kernel_set_working_directory(kernel *k, const char *path)
{
    free(k->working_directory);
    if (!(k->working_directory = strdup(path)))
        die("out of memory");
    send_settings(k, NULL);
}

void kernel_restore_working_directory(kernel *k, const char *path)
{
    free(k->working_directory);
    if (!(k->working_directory = strdup(path)))
        die("out of memory");
}

const char *kernel_working_directory(const kernel *k)
{
    return k->working_directory;
}

void kernel_interrupt(kernel *k)
{
    /* SIGINT to the whole group, as jupyter_client does: `!sleep 100` stops too. */
    if (k->state != KERNEL_DEAD)
        kill_process_group(k, SIGINT);
}

int kernel_restart(kernel *k, char *why, size_t why_size)
{
    /* A client waiting for the running cell's reply (AutoGen waits for it, or for idle) learns
       why it will not come. */
    kernel_fail_running_cell(k, "KernelRestarted",
                             "the kernel was restarted while this cell ran: its state is gone; "
                             "run the cell again once the kernel is idle");
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
    json_decref(k->allow_out);
    json_decref(k->deny_out);
    json_decref(k->restore_report);
    free(k->workspace);
    free(k->working_directory);
    free(k);
}

void kernel_destroy(kernel *k)
{
    kernel_checkpoint_forget(k);
    for (int i = 0; i < MAX_DESTROY_HOOKS && destroy_hooks[i]; i++)
        destroy_hooks[i](k);
    stop_process(k);
    k->state = KERNEL_DEAD;
    loop_defer(kernel_free, k);
}

/* ---- adoption: a kernel a previous daemon started ----
   The old channel may hold half a frame in either direction (the dead daemon read or wrote
   part of one), so neither side parses it again. The kernel gets a new channel instead: its end
   is passed over the old one with SCM_RIGHTS, attached to one marker byte; the kernel (which
   reads with recvmsg) keeps the whole frames it had, drops the partial rest and the marker, and
   continues on the new channel, where it first says whether it is idle or in a request
   (docs/kernel-protocol.md, "Adoption"). Whatever it still writes on the old channel until then
   was meant for a daemon that is gone: it is read and discarded here. */

/* Sends the kernel its new channel: one byte with the descriptor attached. */
static bool send_new_channel(kernel *k)
{
    char marker = 'A';
    struct iovec iov = {.iov_base = &marker, .iov_len = 1};
    union {
        char buffer[CMSG_SPACE(sizeof(int))];
        struct cmsghdr align;
    } control = {0};
    struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = control.buffer,
                         .msg_controllen = sizeof control.buffer};
    struct cmsghdr *header = CMSG_FIRSTHDR(&msg);
    header->cmsg_level = SOL_SOCKET;
    header->cmsg_type = SCM_RIGHTS;
    header->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(header), &k->new_channel_for_kernel, sizeof(int));
    if (sendmsg(k->old_channel_fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT) != 1)
        return false; /* EAGAIN: its buffer is full (a paused kernel); EPOLLOUT says when */
    close(k->new_channel_for_kernel);
    k->new_channel_for_kernel = -1;
    return true;
}

static void on_old_channel(void *owner, uint32_t events)
{
    kernel *k = owner;
    if (k->new_channel_for_kernel >= 0 && (events & EPOLLOUT) && send_new_channel(k))
        loop_watch_modify(&k->old_channel_watch, EPOLLIN);
    if (!(events & (EPOLLIN | EPOLLHUP | EPOLLERR)))
        return;
    char chunk[READ_CHUNK];
    for (int reads = 0; reads < 16; reads++) {
        ssize_t n = recv(k->old_channel_fd, chunk, sizeof chunk, MSG_DONTWAIT);
        if (n > 0) {
            k->old_channel_bytes += n;
            continue;
        }
        if (n < 0 && (errno == EAGAIN || errno == EINTR))
            return;
        /* End of file: the kernel has switched and closed the old channel. */
        if (k->old_channel_bytes > 0)
            log_info("kernel %s: %lld bytes it sent while no daemon listened were discarded",
                     k->id, k->old_channel_bytes);
        close_old_channel(k);
        return;
    }
}

kernel *kernel_adopt(const kernel_adoption *adoption, char *why, size_t why_size)
{
    int pair[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair) < 0) {
        snprintf(why, why_size, "cannot create a new channel: %s", strerror(errno));
        return NULL;
    }
    kernel *k = calloc(1, sizeof *k);
    if (!k || !(k->workspace = strdup(adoption->workspace)))
        die("out of memory");
    snprintf(k->id, sizeof k->id, "%s", adoption->id);
    id_uuid4(k->session);
    k->spec = adoption->spec;
    k->sandbox = adoption->sandbox;
    k->env = adoption->env ? json_incref(adoption->env) : json_object();
    k->last_activity_us = clock_wall_us();
    k->adopted = true;
    k->awaiting_first_word = true;
    k->lost_since_us = adoption->previous_daemon_gone_at_us ? adoption->previous_daemon_gone_at_us
                                                            : clock_wall_us();
    k->pid = adoption->pid;
    k->pidfd = adoption->pidfd;
    k->network_slot = -1;
    k->allow_out = json_is_array(adoption->allow_out) ? json_incref(adoption->allow_out) : NULL;
    k->deny_out = json_is_array(adoption->deny_out) ? json_incref(adoption->deny_out) : NULL;
    k->oom_kills_at_start = current_oom_kills(k);
    loop_watch_add(&k->pid_watch, k->pidfd, EPOLLIN, on_process_exit, k);
    k->channel_fd = pair[0];
    fcntl(k->channel_fd, F_SETFL, O_NONBLOCK);
    loop_watch_add(&k->channel_watch, k->channel_fd, EPOLLIN, on_channel_ready, k);
    k->new_channel_for_kernel = pair[1];
    k->old_channel_fd = adoption->fds[0];
    loop_watch_add(&k->old_channel_watch, k->old_channel_fd, EPOLLIN | EPOLLOUT, on_old_channel, k);
    watch_output(k, &k->out, adoption->fds[1], "stdout");
    watch_output(k, &k->err, adoption->fds[2], "stderr");
    /* Idle until it says otherwise: requests sent meanwhile wait on the new channel, which it
       reads once it has switched. */
    k->state = KERNEL_IDLE;
    /* The previous daemon's interface went with its sweep: a new one, before any request. */
    attach_network(k);
    return k;
}
