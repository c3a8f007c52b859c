/* cgroup — one control group per sandbox, on cgroup v1 or v2 (detected at start).
 *
 * Every sandbox's group lives under a `cellbox` parent inside the daemon's own cgroup (read from
 * /proc/self/cgroup), never at a hierarchy's root, so a delegated service keeps its sandboxes
 * inside its own accounting. Groups we did not create are never touched; ours are removed. */
#ifndef CELLBOX_SANDBOX_CGROUP_H
#define CELLBOX_SANDBOX_CGROUP_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

typedef struct cgroup_limits {
    long long memory_bytes; /* no swap beyond it */
    int pids;
    double cpus;            /* 1.0 = one core */
} cgroup_limits;

typedef struct cgroup_counters {
    long long oom_kills;        /* processes the OOM killer took */
    long long pids_limit_hits;  /* forks refused at pids.max */
    long long memory_peak;      /* bytes */
    long long memory_current;   /* bytes */
    long long cpu_usage_us;     /* CPU time used by the group */
} cgroup_counters;

typedef struct sandbox_cgroup sandbox_cgroup;

/* Detects the version, creates the parents; 0 or -1 with a reason. */
int cgroup_init(char *why, size_t why_size);
const char *cgroup_version_name(void);      /* "v1" or "v2" */
sandbox_cgroup *cgroup_create(const char *name, const cgroup_limits *limits, char *why, size_t why_size);
/* The group `name` a previous daemon made and left running (its sandbox is adopted), with the
   pids limit it was given; NULL if it is not there in every hierarchy. */
sandbox_cgroup *cgroup_adopt(const char *name, int pids_limit);
/* While the zygote waits for a new sandbox's pid 1 (cgroup join, mounts, the fork of the
   kernel: our own code only), that pid 1 holds up every other create. As an ordinary group it
   gets a 1/N share of the CPU that N starting neighbours compete for, and under load its ~9 ms
   stretched to ~45 ms. An `open` window gives the group 100 times the default CPU weight.
   On v2 it also lets the group hold one process more than its pids limit: there the zygote
   stands in the whole group during the clone (runtime/zygote.c; on v1 only in its memory
   hierarchy), and would otherwise take the place the kernel needs. Closed again before any
   request reaches the kernel. */
void cgroup_setup_window(sandbox_cgroup *group, bool open);
/* The cgroup.procs files a process writes "0" to in order to join (NULL-terminated; `out` holds
   max + 1); the strings live as long as the group. */
void cgroup_procs_files(sandbox_cgroup *group, const char **out, size_t max);
/* The cgroup.procs file of the group's memory controller (v2: the group's one), and that of the
   daemon's own memory cgroup (false if it cannot be found). Linux charges the pages a fork
   copies to the memory cgroup of the process that owns the memory being forked: the zygote
   stands in a new sandbox's group while it clones it (runtime/zygote.c), then goes home. */
const char *cgroup_memory_procs_file(sandbox_cgroup *group);
bool cgroup_own_memory_procs_file(char *out, size_t size);
void cgroup_read_counters(sandbox_cgroup *group, cgroup_counters *out);
/* Only oom_kills and pids_limit_hits (the rest zero): two reads where every cell needs them. */
void cgroup_read_limit_events(sandbox_cgroup *group, cgroup_counters *out);
int cgroup_freeze(sandbox_cgroup *group, bool frozen);
/* Starts memory_peak afresh (v1; on v2 the peak stays the group's lifetime peak). */
void cgroup_reset_memory_peak(sandbox_cgroup *group);
void cgroup_kill_all(sandbox_cgroup *group);
/* No process is left in the group (cgroup.procs lists none: a killed process leaves it once it
   has exited). Cheap enough for the loop: one small read. */
bool cgroup_is_empty(sandbox_cgroup *group);
void cgroup_destroy(sandbox_cgroup *group);  /* kills what is left and removes the group */
/* The same, telling `removed` when the removal has ended: its directories gone (true), or given
   up on with tasks still in them (false). The directories of dying tasks go only once the tasks
   have left, later in the loop: what must outlast them (the daemon's record of the sandbox, which
   lets the next daemon remove a group this one was killed before removing) waits for this. */
typedef void (*cgroup_removed_callback)(void *arg, bool removed);
void cgroup_destroy_then(sandbox_cgroup *group, cgroup_removed_callback removed, void *arg);
void cgroup_shutdown(void);                  /* removes the parents when empty */

/* ---- at start, what a dead daemon left (reconcile.h) ----
   The directories a group called `name` has (or would have) under the parents, one per
   hierarchy, in order. */
void cgroup_each_path(const char *name, void (*visit)(const char *path, void *arg), void *arg);
/* For a group of ours a dead daemon left: `path` must be a directory called kernel-* right under
   a cellbox/ parent in /sys/fs/cgroup (anything else is refused: never someone else's group).
   Kill: thaws it and SIGKILLs every process in it; the number of processes signalled, or -1 if
   `path` is not such a group. Remove: waits (at most about 2 s) until its processes are gone and
   removes it; true when it is gone. Kill every hierarchy's directory before removing any (v1: a
   process stays frozen in the freezer hierarchy until that one is thawed). */
int cgroup_kill_leftover(const char *path);
bool cgroup_remove_leftover(const char *path);

/* From the text of /proc/self/cgroup: the path of the hierarchy holding `controller` (v1), or of
   the unified hierarchy when `controller` is NULL (v2's "0::" line); "" for a root. */
bool cgroup_parse_own_path(const char *proc_self_cgroup, const char *controller, char *out, size_t size);

#endif
