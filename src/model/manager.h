/* manager — the table of kernels the daemon has handed out: creation within limits (from a warm
 * pool, pool.h, or on pieces made ahead, prepared.h), lookup by id, the record of each in the
 * registry, deletion, and the end (shutdown or detach). Idle culling is culling.h's. */
#ifndef CELLBOX_MODEL_MANAGER_H
#define CELLBOX_MODEL_MANAGER_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include "common/failure.h"
#include "kernel/kernel.h"
#include "sandbox/limits.h"
#include "sandbox/volume.h"

typedef struct manager_options {
    const char *data_dir;       /* workspaces live in DATA_DIR/workspaces/<kernel id> */
    const char *default_kernel;
    int max_kernels;            /* 0 = unlimited */
    bool keep_workspaces;
    sandbox_limits default_limits;
    sandbox_limits max_limits;  /* 0 fields = unbounded */
    bool allow_network;         /* may a sandbox ask for network access at all */
    volume_kind workspace_kind; /* what /workspace is made of */
    uid_t first_uid;            /* of the daemon's block of UID_BLOCK_SIZE sandbox uids */
    int hibernate_idle;         /* seconds idle before a sandbox hibernates (snapshots.h); 0: never */
} manager_options;

/* Called once at start, first of startup_run's steps (startup.h): the data directory's folders,
   the sandbox pieces (sandbox_pieces.h) and the registry of records (registry.h). */
void manager_init(const manager_options *options);
/* May one more sandbox start, with `pooled` kernels in the warm pools besides the handed-out
   ones? Not at the kernel limit, nor near the daemon's open-file budget (descriptors.h). The
   pools ask it (pool_options.room_for_another). */
bool manager_has_room(size_t pooled);
/* Creates a kernel in a new sandbox; on failure returns NULL with what went wrong (invalid
   limits; forbidden at the kernel limit or for network the daemon does not allow; not found for
   an unknown kernelspec; exhausted when the daemon's open files are near their budget
   (descriptors.h); internal otherwise) and a message; nothing half-made is left. `env` entries
   must already be checked; `limits` and `network` are the request's (may be NULL); `volumes`
   the named volumes bound in (volumes.h; NULL: none; such a sandbox never comes from a pool). */
kernel *manager_create(const char *spec_name, json_t *env, json_t *limits, json_t *network,
                       const rootfs_volumes *volumes, failure_kind *failure, char *why,
                       size_t why_size);
/* What a sandbox made from a snapshot or a fork starts with (model/snapshots.h): the files of
   `workspace_from` (a host directory, read as root, links never followed) copied into its new
   workspace, owned by its user, before its kernel starts; and with restore_image_fd >= 0 a
   kernel that is that process image put back (kernel_sandbox.restore; the fd is borrowed).
   Such a sandbox never comes from the warm pool. */
typedef struct manager_seed {
    const char *id;             /* the sandbox's id (NULL: a new one): a hibernated sandbox an
                                   earlier daemon left keeps its own */
    const char *workspace_from;
    int restore_image_fd;
} manager_seed;
kernel *manager_create_seeded(const char *spec_name, json_t *env, json_t *limits, json_t *network,
                              const manager_seed *seed, failure_kind *failure, char *why,
                              size_t why_size);
/* The same, its files copied on a worker thread while the loop serves the other sandboxes; the
   kernel starts once they are all in place. `created` runs on the loop after this returns, with
   the kernel, or with NULL, the failure (conflict: the daemon began to stop) and why, nothing
   half-made left. workspace_from and restore_image_fd must stay valid until then. -1 with the
   failure and why when it cannot begin (`created` never runs). */
typedef void (*manager_created)(void *arg, kernel *k, failure_kind failure, const char *why);
int manager_create_seeded_later(const char *spec_name, json_t *env, json_t *limits,
                                json_t *network, const manager_seed *seed,
                                manager_created created, void *arg, failure_kind *failure,
                                char *why, size_t why_size);
kernel *manager_find(const char *id);
void manager_delete(kernel *k);
size_t manager_count(void);
kernel *manager_at(size_t index);
json_t *manager_kernel_model(const kernel *k);
const char *manager_default_kernel(void);
/* Called before a kernel is deleted, so that connections and sessions let go of it. */
void manager_set_delete_hook(void (*hook)(kernel *k));
/* Rewrites kernel k's record (registry.h) after what survives a restart changed: its box's
   metadata, TTL or pause state. Nothing for a kernel the manager did not hand out. */
void manager_record(kernel *k);
/* Replaces a networked kernel's egress lists (kernel_set_egress) and, when they took, rewrites
   its record so that a daemon adopting it after a restart applies the same lists. Every surface
   changes the lists through here. 0, or -1 with `why` as kernel_set_egress gives it. */
int manager_set_egress(kernel *k, json_t *allow_out, json_t *deny_out, char *why, size_t why_size);
/* At exit. Shutdown: every sandbox ends, paused ones too, and the keeper with them. Detach (a
   restart for an upgrade, or --keep-sandboxes): every handed-out sandbox is left running, paused
   ones paused, for the next daemon on the data directory to adopt; warm-pool kernels and prepared
   pieces end. */
void manager_shutdown_all(void);
/* Has manager_shutdown_all begun (a box going away now ends with the daemon, not deleted)? */
bool manager_is_ending(void);
void manager_detach_all(void);

/* ---- for adoption.c, at start: taking over what a previous daemon left ---- */
bool manager_uid_available(uid_t uid);          /* one of this daemon's block, and free */
void manager_sandbox_base(kernel_sandbox *base); /* its root mount point and runtime directory */
char *manager_workspace_of(const char *id);
/* A handed-out kernel's workspace volume: its kind and (ext4) its image. false for others. */
bool manager_workspace_volume(const kernel *k, volume_kind *kind, const char **image);     /* DATA_DIR/workspaces/<id>, malloc'd */
/* Its volumes' id-mapped views (sandbox_pieces.h), kept if still mounted. 0, or -1 + why. */
int manager_open_volume_views(const char *id, uid_t uid, rootfs_volumes *volumes, char *why,
                              size_t why_size);
/* An adopted kernel becomes one the manager handed out, with this uid and cgroup: remembered,
   its record rewritten, its channels given to the keeper. */
void manager_take_over(kernel *k, uid_t uid, sandbox_cgroup *cgroup);
void manager_keep_channels(kernel *k); /* hands its channel and pipes to the keeper */

#endif
