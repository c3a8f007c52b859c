/* kernel — one kernel process: starting it, talking to it, noticing its death, restarting it.
 *
 * The process is driven over the fds described in docs/kernel-protocol.md: a socketpair for
 * length-prefixed JSON messages and two pipes for stdout/stderr, which this module turns into
 * `stream` messages. Every message the kernel sends is checked, then handed to the one event
 * handler (the channels module) with the channel it travels on. */
#ifndef CELLBOX_KERNEL_KERNEL_H
#define CELLBOX_KERNEL_KERNEL_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "common/ids.h"
#include "kernel/kernelspec.h"
#include "sandbox/cgroup.h"
#include "sandbox/limits.h"
#include "sandbox/rootfs.h"

typedef enum kernel_state {
    KERNEL_STARTING,
    KERNEL_IDLE,
    KERNEL_BUSY,
    KERNEL_DEAD,
} kernel_state;

typedef struct kernel kernel;

/* After the sandbox's per-cell limit (limits.timeout_seconds) interrupts a cell, how long the cell
   gets to stop before the kernel is killed ("the cell did not stop when interrupted"). The native
   API's per-execution timeout waits longer before it gives up on its own (execution.c), so that
   where both fire, the client hears that the kernel was killed rather than "still busy". */
#define KERNEL_CELL_LIMIT_KILL_GRACE_MS 3000

/* Receives every message a kernel publishes or replies with (borrowed), and the daemon's own
   (status restarting/dead, stream, errors for a dead kernel's running cell). */
typedef void (*kernel_message_handler)(kernel *k, const char *channel, json_t *message);
void kernel_add_message_handler(kernel_message_handler handler); /* each is called in turn */

/* Where and how a kernel is isolated: prepared by the manager, used at every (re)start. */
typedef struct kernel_sandbox {
    uid_t uid;                    /* the sandbox user; its group has the same number */
    sandbox_cgroup *cgroup;       /* borrowed: the manager creates and removes it */
    sandbox_limits limits;
    const char *root_mount_point; /* host directory the sandbox root is mounted on */
    const char *runtime_dir;      /* host: cellbox's prefix, seen inside as /opt/cellbox */
    const struct kernel *host;    /* set: run inside this kernel's sandbox (another context) */
    const char *cwd;              /* with host: the working directory (NULL: /workspace) */
    rootfs_volumes volumes;       /* named volumes bound in (model/volumes.h); a copy */
    bool restore;                 /* the kernel is the process image in restore_image_fd put
                                     back (kernel/checkpoint.h), not a new interpreter */
    int restore_image_fd;         /* with restore: borrowed, kernel_start dups it */
} kernel_sandbox;

/* Starts a kernel in a sandbox with `workspace` (host path) as its /workspace; `env` (borrowed,
   may be NULL) adds variables. NULL on failure, with `why` filled. */
kernel *kernel_start(const char *id, const kernelspec *spec, const char *workspace, json_t *env,
                     const kernel_sandbox *sandbox, char *why, size_t why_size);
/* A kernel a previous daemon on this data directory started (manager.c, at start): its pid 1
   (checked against the record: never a reused pid), the daemon's ends of its channel, stdout and
   stderr as the keeper held them (taken over), and when that daemon went away. */
typedef struct kernel_adoption {
    const char *id;
    const kernelspec *spec;
    const char *workspace;
    json_t *env;                   /* borrowed: its request's variables, for restarts */
    kernel_sandbox sandbox;
    pid_t pid;
    int pidfd;                     /* taken over */
    int fds[3];                    /* taken over: channel, stdout, stderr */
    int64_t previous_daemon_gone_at_us; /* wall clock; 0 if unknown (then: now) */
    json_t *allow_out, *deny_out;  /* borrowed: its egress lists as recorded, or NULL */
} kernel_adoption;
/* The kernel is switched to a new channel (docs/kernel-protocol.md, "Adoption"); NULL with `why`
   (nothing taken over) if no channel can be made. A sandbox with network gets a new interface
   (the previous daemon's was swept) with its recorded egress lists; if it cannot, it is ended,
   its death naming why, as a create's would be. */
kernel *kernel_adopt(const kernel_adoption *adoption, char *why, size_t why_size);
/* Called whenever a kernel's process has its pid (started, restarted, cloned by the zygote). */
void kernel_set_started_hook(void (*hook)(kernel *k));
/* Each hook is called by kernel_destroy, before anything of k goes: work that holds k (a
   namespace transfer) ends there rather than reach k once it is freed. */
void kernel_add_destroy_hook(void (*hook)(kernel *k));
/* The daemon's ends of its channel, stdout and stderr (-1 where closed): for the keeper. */
void kernel_daemon_fds(const kernel *k, int fds[3]);
json_t *kernel_request_env(const kernel *k); /* borrowed: the variables it was created with */
/* Borrowed: its allowOut and denyOut lists (arrays), each NULL when it has none; for its record. */
void kernel_egress_lists(const kernel *k, json_t **allow_out, json_t **deny_out);
/* When process `pid` started, in clock ticks after boot (/proc/PID/stat's 22nd field): with the
   pid it names one process for good, where a pid alone may be reused. -1 if there is none. */
long long kernel_process_start_time(pid_t pid);
const sandbox_limits *kernel_limits(const kernel *k);
/* `message` carries "channel"; -1 if the kernel is dead. A shutdown_request is watched: a kernel
   still there 5 s later is killed (its shutdown_reply sent for it), and with restart: true the
   kernel is started again once it has exited, as jupyter_client does. */
int kernel_send(kernel *k, json_t *message);
void kernel_interrupt(kernel *k);
/* Adds variables to a running kernel's environment (a kernel handed out from the warm pool). */
void kernel_set_environment(kernel *k, json_t *env);
/* Moves a running kernel to `path` inside its sandbox, and again after each restart (E2B's
   contexts start in the user's home, /v1's in /workspace). */
void kernel_set_working_directory(kernel *k, const char *path);
/* An adopted kernel's working directory as its earlier daemon set it: kept for its restarts,
   not sent (the kernel is there already). */
void kernel_restore_working_directory(kernel *k, const char *path);
const char *kernel_working_directory(const kernel *k); /* NULL: the sandbox's default */
int kernel_restart(kernel *k, char *why, size_t why_size);
void kernel_destroy(kernel *k); /* kills the process; freed after the current loop batch */

/* For kernel/checkpoint.c: a kernel cloned from its zygote (else there is no image to take);
   requests held (kernel_send queues them) while the kernel stands at its checkpoint point,
   released (and flushed) afterwards; a frame sent past the hold. */
bool kernel_is_zygote_clone(const kernel *k);
void kernel_hold_requests(kernel *k, bool hold);
int kernel_send_now(kernel *k, json_t *message);

/* The environment every process of a kernel's sandbox starts with (nothing of the daemon's),
   plus `extra` (borrowed, may be NULL): a NULL-terminated array for execve, freed with
   kernel_environment_free. */
char **kernel_environment(const kernel *k, json_t *extra);
void kernel_environment_free(char **entries);

const char *kernel_id(const kernel *k);
const kernel_sandbox *kernel_get_sandbox(const kernel *k);
/* Replaces a networked sandbox's egress lists (E2B's allowOut/denyOut: JSON arrays of at most
   256 strings, each an IPv4 address, a CIDR or a domain name ("example.com", "*.example.com");
   64 domains in both lists together; NULL or null: none), in effect at once on a running one
   (sandbox/network.h has the semantics). 0, or -1 with `why`: no network, an entry that is none
   of those (named), over a limit, or the firewall refused (the old lists then stay). */
int kernel_set_egress(kernel *k, json_t *allow_out, json_t *deny_out, char *why, size_t why_size);
/* During a create, for a kernel handed out from the warm pool (which has loopback only) to a request
   for network: the kernel's limits say network, and its sandbox gets its interface now (or, if
   its clone has not answered yet, when it does), before any request reaches it. Lists set
   before (kernel_set_egress) are applied with it. 0, or -1 with `why` (no slot left, the
   interface could not be made): the kernel still has no network, and the caller must discard
   it rather than hand it out. */
int kernel_give_network(kernel *k, char *why, size_t why_size);
/* What GET /v1/sandboxes/{id} and E2B's getInfo report of the network: false for a sandbox
   without one, else {"address": its address (null until its interface is up), "allowOut": [...],
   "denyOut": [...]} (the lists as last set, [] for none). A new reference. */
json_t *kernel_network_model(const kernel *k);
int kernel_pidfd(const kernel *k);               /* its first process (the supervisor); -1 if none yet */
pid_t kernel_pid(const kernel *k);               /* the same, as a pid (host view); 0 until the zygote says it */
long long kernel_last_dropped_bytes(const kernel *k); /* output dropped by the last execution */
/* The model's record of the kernel's sandbox (model/box.h): kernel/ only keeps the pointer,
   declared here so that the compiler checks it without kernel/ including model/. */
struct box;
struct box *kernel_box(const kernel *k);
void kernel_set_box(kernel *k, struct box *box);
const kernelspec *kernel_spec(const kernel *k);
const char *kernel_session(const kernel *k);
const char *kernel_workspace(const kernel *k);
kernel_state kernel_get_state(const kernel *k);
const char *kernel_state_name(kernel_state state);
const char *kernel_death_reason(const kernel *k); /* "" unless dead */
/* A cell running in k is ended from outside (its sandbox is going away): its clients get an
   `error` named ename and an execute_reply, as when the kernel dies. Nothing when none runs. */
void kernel_fail_running_cell(kernel *k, const char *ename, const char *evalue);
int64_t kernel_last_activity_us(const kernel *k);
void kernel_touch(kernel *k);                     /* activity from a client */

/* Bookkeeping for the channels module (api/channels.c): the WebSocket connections subscribed to
   the kernel's output, a list the channels module links and walks. */
struct channel_connection;
int kernel_connection_count(const kernel *k);
void kernel_set_connection_count(kernel *k, int count);
struct channel_connection *kernel_subscribers(const kernel *k);
void kernel_set_subscribers(kernel *k, struct channel_connection *subscribers);

#endif
