/* reconcile — at start, before the daemon serves anything: the data directory against the host.
 * A daemon that died (kill -9, a crash, a power cut) leaves its sandboxes' processes, cgroups,
 * mounts, loop devices and images behind. Every sandbox this data directory knows of (a record
 * in DATA_DIR/sandboxes, registry.h, or a directory in DATA_DIR/workspaces) is removed: the
 * processes in its cgroups killed, its cgroups (every hierarchy) removed, its workspace
 * unmounted, the loop devices backed by its image detached, its image deleted unless workspaces
 * are kept. Nothing else is touched: not another data directory's sandboxes (their ids are in
 * no record of ours), not a cgroup outside our cellbox/ parents, not a kept image (it has no
 * record), not a loop device backed by a file outside our volumes. */
#ifndef CELLBOX_MODEL_RECONCILE_H
#define CELLBOX_MODEL_RECONCILE_H

#include <stdbool.h>

/* Called once at start, after cgroup_init and registry_init, with the data directory locked,
   once the sandboxes that can be adopted were (`adopted(id)` says which: they are left alone). */
void reconcile_data_dir(const char *data_dir, bool keep_workspaces, bool (*adopted)(const char *id));

#endif
