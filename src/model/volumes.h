/* volumes — named volumes: disks of a fixed size that outlive sandboxes, mounted into several at
 * once, removed only on request. /v1, E2B's control plane and the CLI share these verbs.
 *
 * Each is kept in DATA_DIR/named-volumes as volume-<name>.img (the ext4 image,
 * sandbox/volume_shared.h), volume-<name>.json (its record: name, size, creation time) and
 * volume-<name>/ (where the host mounts it). A restart mounts them again (volumes_init); which
 * sandboxes use one is read from the sandboxes themselves (each kernel's rootfs_volumes), so it
 * is never out of date, adopted sandboxes included. */
#ifndef CELLBOX_MODEL_VOLUMES_H
#define CELLBOX_MODEL_VOLUMES_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "common/failure.h"
#include "sandbox/confined.h"
#include "sandbox/rootfs.h"

#define VOLUMES_DEFAULT_BYTES (1LL << 30)
#define VOLUMES_MIN_BYTES (16LL << 20)
#define VOLUMES_MAX_BYTES (256LL << 30)

/* Called once at start, by startup_run, before sandboxes are adopted: reads the records and
   mounts each volume (or keeps a previous daemon's mount of it). */
void volumes_init(const char *data_dir);
/* At shutdown, once every sandbox has ended: unmounts every volume (the images stay). A detach
   leaves them mounted for the sandboxes left running. */
void volumes_unmount_all(void);

/* Creates volume `name` of `bytes` (0: VOLUMES_DEFAULT_BYTES). -1 with a kind and `why`:
   invalid name or size, conflict when it exists, internal when the host fails. */
int volumes_create(const char *name, long long bytes, failure_kind *failure, char *why,
                   size_t why_size);
/* Deletes it: refused (conflict, `why` naming the sandboxes) while a sandbox mounts it, unless
   `force`; not found when there is none. */
int volumes_delete(const char *name, bool force, failure_kind *failure, char *why, size_t why_size);
bool volumes_exists(const char *name);
/* {"name", "size_bytes", "used_bytes", "created_at", "sandboxes": [ids]}; NULL: no such. */
json_t *volumes_model(const char *name);
json_t *volumes_list_model(void); /* every volume's model, by name */

/* The volume's files from outside any sandbox (E2B's volume content API): `c` set up for
   confined operations (sandbox/confined.h) beneath the volume's root, as the id its files
   belong to on disk. False with `why` when there is no such volume (`*missing`) or it is not
   mounted. volumes_close_files when done. */
bool volumes_open_files(const char *name, confined *c, bool *missing, char *why, size_t why_size);
void volumes_close_files(confined *c);

/* Adds volume `name` at `path` (inside the sandbox) to `mounts`: the volume must exist, the path
   be absolute, normalized and outside the sandbox's own mounts (/proc, /usr, /etc, /workspace,
   /home/user, /opt/cellbox, /dev, /tmp, ...), neither nested in nor holding another mount's.
   -1 with invalid / not found and `why`. */
int volumes_add_mount(rootfs_volumes *mounts, const char *name, const char *path,
                      failure_kind *failure, char *why, size_t why_size);
/* A request's {"NAME": "/path", ...} into `mounts` (emptied first); NULL or null: none. */
int volumes_from_request(json_t *request, rootfs_volumes *mounts, failure_kind *failure,
                         char *why, size_t why_size);
/* {"NAME": "/path", ...}, for a sandbox's model and its record. */
json_t *volumes_mounts_model(const rootfs_volumes *mounts);

#endif
