/* box — a sandbox as the native API (/v1) sees it.
 *
 * The isolation (namespaces, cgroup, workspace, limits) belongs to the sandbox's first kernel, its
 * default context; a box adds what /v1 knows: a template name, metadata, a TTL, pause/resume,
 * more contexts (kernels started inside the same namespaces), commands, and a log. Every kernel
 * made through /api/kernels has a box too (made on first use), so both APIs see one model.
 * Pause and resume are pause.h's, the TTL ttl.h's, the log box_log.h's. */
#ifndef CELLBOX_MODEL_BOX_H
#define CELLBOX_MODEL_BOX_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "common/failure.h"
#include "kernel/kernel.h"
#include "sandbox/confined.h"
#include "sandbox/limits.h"

typedef struct box box;

/* HIBERNATED: its processes ended and its memory freed, its live state kept in a snapshot it
   wakes from (model/snapshots.h); its files stay where they are. */
typedef enum box_state { BOX_RUNNING, BOX_PAUSED, BOX_DEAD, BOX_HIBERNATED } box_state;

void box_init(void);
/* The box of a kernel's sandbox (its default context), made on first use. */
box *box_of(kernel *k);
box *box_find(const char *id);
/* Sets what /v1 sandbox creation asked for: metadata and env (borrowed), TTL (0 = none, ttl.h). */
void box_configure(box *b, json_t *metadata, json_t *env, int timeout_s);

const char *box_id(const box *b);
box_state box_get_state(const box *b);
const char *box_state_name(box_state state);
kernel *box_default_kernel(const box *b);
uid_t box_uid(const box *b); /* the sandbox user; its group has the same number */
const sandbox_limits *box_limits(const box *b);
json_t *box_env(const box *b); /* borrowed: variables for every context and command */
json_t *box_model(box *b);
bool box_matches(const box *b, const char *state, json_t *metadata_filter);
int64_t box_started_at_us(const box *b);

/* One sample of what a sandbox uses (E2B's getMetrics): the share of its CPUs it used since the
   previous sample (since it started, for the first), from its cgroup (v1 or v2); its memory;
   what is written on its workspace volume. Totals are its limits. */
typedef struct box_usage_sample {
    int64_t at_us;           /* wall-clock time of the sample */
    double cpu_count;        /* CPUs it may use: its limit, or the host's when unlimited */
    double cpu_used_percent; /* 0-100 of cpu_count */
    long long memory_used, memory_total; /* bytes */
    long long disk_used, disk_total;     /* bytes */
} box_usage_sample;
void box_sample_usage(box *b, box_usage_sample *out);

/* Hibernation's mark (model/snapshots.h sets it): the snapshot a hibernated box wakes from, or
   NULL (awake). Shown in its model as "snapshot_id", kept in its record. */
void box_set_hibernation(box *b, const char *snapshot_id);
const char *box_hibernation_snapshot(const box *b);
/* What the TTL of a box with E2B's onTimeout 'pause' does at its end instead of box_pause
   (snapshots.c sets hibernation: the memory freed, not kept). Set once at start. */
void box_set_timeout_pause_action(int (*action)(box *b, char *why, size_t why_size));

/* Contexts: the default one (id = the box's) and others, each a kernel in the same sandbox. */
kernel *box_find_context(box *b, const char *context_id);
/* NULL with `why` and what went wrong: exhausted near the daemon's open-file budget, internal
   otherwise. */
kernel *box_add_context(box *b, const kernelspec *spec, const char *cwd, failure_kind *failure,
                        char *why, size_t why_size);
/* The same, the kernel being the process image in restore_image_fd (borrowed) put back
   (kernel_sandbox.restore; a snapshot's context, model/snapshots.h). */
kernel *box_add_restored_context(box *b, const kernelspec *spec, const char *cwd,
                                 int restore_image_fd, failure_kind *failure, char *why,
                                 size_t why_size);
/* The kernelspec that runs `language` in this sandbox ("python" is its own template when that
   is Python, else python3; kernelspec_for_language for the rest), or NULL. */
const kernelspec *box_spec_for_language(box *b, const char *language);
/* The context an execute naming `spec`'s language runs in: the default one when it runs `spec`,
   else that language's own context, started on first use and kept (E2B's server does this). */
kernel *box_context_for_language(box *b, const kernelspec *spec, failure_kind *failure,
                                 char *why, size_t why_size);
int box_delete_context(box *b, kernel *context); /* -1 for the default context */
json_t *box_context_model(box *b, kernel *context);
json_t *box_contexts_model(box *b);
/* The box a context kernel belongs to (the default context's or another's), or NULL. */
box *box_of_context(kernel *context);

/* The one way into a sandbox's files, for every API (/v1, E2B's envd, MCP): `c` set up for
   confined operations (sandbox/confined.h) beneath the sandbox's "/" as its processes see it,
   as the sandbox user. False, with `why` a sentence for the client, when the sandbox is dead,
   still starting, restarting, or its root is still being built (the host's "/" until
   pivot_root, the host's tree at /.oldroot just after): resolving there would reach host files.
   A paused sandbox is the caller's to refuse or resume. box_close_files when done. */
bool box_open_files(box *b, confined *c, char *why, size_t why_size);
void box_close_files(confined *c);
/* "sandbox ID is dead: <cause>", the sentence every API starts its refusal with. */
void box_describe_death(const box *b, char *out, size_t size);

/* Called when one of a box's kernels goes away (deleted, not merely dead), and when a box does,
   so that the modules holding on to them let go. */
void box_add_kernel_gone_hook(void (*hook)(kernel *k));
void box_add_box_gone_hook(void (*hook)(box *b));
/* Waiting for a kernel to start: `started(arg)` is called once kernel k has left "starting"
   (it reported in, or died), or is going away, from inside that message's handling or that
   removal (a caller that does more than answer should defer). NULL, and no call, when k is not
   starting. Until it is called a wait can be cancelled; once called it is gone. */
typedef struct box_start_wait box_start_wait;
box_start_wait *box_when_started(kernel *k, void (*started)(void *arg), void *arg);
void box_start_wait_cancel(box_start_wait *wait);

/* The manager is deleting kernel k (the default context of its box, if it has one). */
void box_kernel_deleted(kernel *k);

/* What a restart of the daemon keeps of a box (metadata, env, TTL deadline as wall-clock
   time, pause state), for manager.c's record; and, in the next daemon, putting it back (the TTL
   re-armed for what is left of it, a paused box still paused). */
json_t *box_persisted(const box *b);
void box_restore(box *b, json_t *saved);
/* An adopted kernel (kernel_adopt) becomes one of the box's other contexts again. 0. */
int box_adopt_context(box *b, kernel *k, const char *cwd, bool language_default);

/* Where the commands module (model/command.c) keeps a box's list of commands. */
struct command;
struct command **box_commands_slot(box *b);

#endif
