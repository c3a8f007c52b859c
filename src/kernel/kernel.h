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

typedef enum kernel_state {
    KERNEL_STARTING,
    KERNEL_IDLE,
    KERNEL_BUSY,
    KERNEL_DEAD,
} kernel_state;

typedef struct kernel kernel;

/* Receives every message a kernel publishes or replies with (borrowed), and the daemon's own
   (status restarting/dead, stream, errors for a dead kernel's running cell). */
typedef void (*kernel_message_handler)(kernel *k, const char *channel, json_t *message);
void kernel_set_message_handler(kernel_message_handler handler);

/* Where and how a kernel is isolated: prepared by the manager, used at every (re)start. */
typedef struct kernel_sandbox {
    uid_t uid;                    /* the sandbox user; its group has the same number */
    sandbox_cgroup *cgroup;       /* borrowed: the manager creates and removes it */
    sandbox_limits limits;
    const char *root_mount_point; /* host directory the sandbox root is mounted on */
    const char *runtime_dir;      /* host: cellbox's prefix, seen inside as /opt/cellbox */
} kernel_sandbox;

/* Starts a kernel in a sandbox with `workspace` (host path) as its /workspace; `env` (borrowed,
   may be NULL) adds variables. NULL on failure, with `why` filled. */
kernel *kernel_start(const char *id, const kernelspec *spec, const char *workspace, json_t *env,
                     const kernel_sandbox *sandbox, char *why, size_t why_size);
const sandbox_limits *kernel_limits(const kernel *k);
int kernel_send(kernel *k, json_t *message); /* message carries "channel"; -1 if the kernel is dead */
void kernel_interrupt(kernel *k);
/* Adds variables to a running kernel's environment (a kernel handed out from the warm pool). */
void kernel_set_environment(kernel *k, json_t *env);
int kernel_restart(kernel *k, char *why, size_t why_size);
void kernel_destroy(kernel *k); /* kills the process; freed after the current loop batch */
void kernel_reap_all(void);     /* at exit: waits for the processes of destroyed kernels */

const char *kernel_id(const kernel *k);
const kernelspec *kernel_spec(const kernel *k);
const char *kernel_session(const kernel *k);
const char *kernel_workspace(const kernel *k);
kernel_state kernel_get_state(const kernel *k);
const char *kernel_state_name(kernel_state state);
const char *kernel_death_reason(const kernel *k); /* "" unless dead */
int64_t kernel_last_activity_us(const kernel *k);
void kernel_touch(kernel *k);                     /* activity from a client */

/* Bookkeeping for the channels module. */
int kernel_connection_count(const kernel *k);
void kernel_set_connection_count(kernel *k, int count);
void *kernel_subscribers(const kernel *k);
void kernel_set_subscribers(kernel *k, void *subscribers);

#endif
