/* prepared — the next sandboxes' pieces (sandbox_pieces.h), made ahead, and where every new
 * sandbox's pieces come from.
 *
 * A sandbox's workspace volume (an image copy, a loop device, an ext4 mount: ~6 ms) and its
 * cgroup are the daemon's part of every start. A few sets ("prepared sets") are made ahead of
 * time for the default limits, each under the id the kernel that takes it will have, so a create
 * waits only for the kernel itself. The volume helper makes them off the loop (volume_worker.h);
 * without it one set is made at a time, in the loop, and only without a warm pool (there a
 * preparation would land in the middle of a handout's handshake and first cell instead of saving
 * anyone a wait). Used by manager.c and pool.c only. */
#ifndef CELLBOX_MODEL_PREPARED_H
#define CELLBOX_MODEL_PREPARED_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "kernel/kernelspec.h"
#include "model/sandbox_pieces.h"

/* Called once at start, by startup_run (startup.h), after manager_init (which makes the
   sandbox pieces ready); starts making sets. */
void prepared_init(const sandbox_limits *default_limits, volume_kind workspace_kind,
                   bool keep_workspaces);
/* During a create or a pool refill: starts a kernel of `spec` in a new sandbox, on a prepared
   set when one fits `limits`, on pieces made now otherwise; its pieces into `pieces`. NULL with
   `why`, nothing left behind. seed_id (may be NULL): the sandbox's id; seed_workspace (may be NULL): a tree copied into the workspace
   before the kernel starts; restore_image_fd >= 0: the kernel is that process image put back
   (manager.h's manager_seed). */
kernel *prepared_start_kernel(const kernelspec *spec, json_t *env, const sandbox_limits *limits,
                              const rootfs_volumes *volumes, const char *seed_id,
                              const char *seed_workspace,
                              int restore_image_fd, sandbox_pieces *pieces, char *why,
                              size_t why_size);
/* The same for a sandbox seeded with seed_workspace's files, copied on a worker thread
   (common/worker.h) while the loop serves the other sandboxes: the kernel starts only once every
   file is in place (it never sees a half-copied workspace). `started` runs on the loop after this
   returns: with the kernel and its pieces, or with NULL and why (the copy or the start failed, or
   the daemon began to stop meanwhile), nothing left behind. seed_workspace and restore_image_fd
   must stay valid until then; env is held. -1 with `why` (nothing left, `started` never runs)
   when the pieces cannot be made. */
typedef void (*prepared_started)(void *arg, kernel *k, sandbox_pieces *pieces, const char *why);
int prepared_start_kernel_later(const kernelspec *spec, json_t *env, const sandbox_limits *limits,
                                const char *seed_id, const char *seed_workspace,
                                int restore_image_fd, prepared_started started, void *arg,
                                char *why, size_t why_size);
/* At the end (shutdown or detach): no more sets are made, and those made are removed. */
void prepared_discard_all(void);

#endif
