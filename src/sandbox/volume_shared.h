/* volume_shared — a named volume's filesystem on the host: an ext4 image of a fixed size on a
 * loop device, mounted once (nosuid, nodev) at a directory of the daemon's, and one id-mapped
 * view of it per sandbox that uses it, which rootfs.c binds in. model/volumes.h names the
 * volumes and keeps their records.
 *
 * Who owns what: every sandbox runs as its own uid, and a file one of them writes must be
 * usable by the next sandbox that mounts the volume, whatever mode it was created with. On disk
 * every file belongs to one unprivileged id, VOLUME_SHARED_OWNER; each sandbox's view is an
 * id-mapped mount (mount_setattr(MOUNT_ATTR_IDMAP)) that shows that id as the sandbox's own uid
 * and gid and stores the sandbox's writes as it. So in every sandbox the volume's files are the
 * user's own, and nothing on disk is ever root's or a live sandbox uid's. The wall between
 * volumes and sandboxes is the mount itself: a sandbox sees a volume only if it was created with
 * it, and the host's mounts sit in root-only (0700) folders. */
#ifndef CELLBOX_SANDBOX_VOLUME_SHARED_H
#define CELLBOX_SANDBOX_VOLUME_SHARED_H

#include <stddef.h>
#include <sys/types.h>

/* The id every file of a named volume has on disk: no host account's, outside every daemon's
   uid block (uid_block.h), never root. */
#define VOLUME_SHARED_OWNER 65533

/* Makes the image (`bytes`, sparse) and mounts it at mount_point (created), its root owned by
   VOLUME_SHARED_OWNER. 0, or -1 + why (nothing is left behind). */
int volume_shared_create(const char *image, const char *mount_point, long long bytes, char *why,
                         size_t why_size);
/* At start: mounts an existing image again, unless a previous daemon's mount of it is still
   there (left for the sandboxes it detached): then that one is used, never a second mount of the
   same filesystem. 0, or -1 + why. */
int volume_shared_mount(const char *image, const char *mount_point, char *why, size_t why_size);
/* At shutdown: unmounts (lazily: a sandbox still ending holds it; the loop device detaches with
   the last user). */
void volume_shared_unmount(const char *mount_point);
/* On delete: unmounts, removes the mount point and the image. Sandboxes that still bind it keep
   their view until they end (the loop device holds the unlinked image open). */
void volume_shared_remove(const char *image, const char *mount_point);

/* ---- a sandbox's views ---- */
/* Mounts at `view` (created) the volume mounted at `mount_point`, id-mapped so that its files
   are uid:gid's, nosuid and nodev. A view already mounted there (a sandbox adopted after a
   restart) is kept. 0, or -1 + why. */
int volume_shared_open_view(const char *mount_point, const char *view, uid_t uid, gid_t gid,
                            char *why, size_t why_size);
/* Unmounts every view in `folder` (one sandbox's) and removes it; what is gone is skipped. */
void volume_shared_close_views(const char *folder);

#endif
