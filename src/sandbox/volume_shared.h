/* volume_shared — a named volume's filesystem on the host: an ext4 image of a fixed size on a
 * loop device, mounted once (nosuid, nodev) at a directory of the daemon's and bound from there
 * into every sandbox that uses it (rootfs.h). model/volumes.h names them and keeps their records.
 *
 * Who may write: every sandbox runs as its own uid, and a file one of them writes must be usable
 * by the next sandbox that mounts the volume. The volume's root is mode 0777 with a default POSIX
 * ACL of rwx for owner, group and others, which every new file and directory inherits (a default
 * ACL replaces the umask): files come out 0666, directories 0777, whoever wrote them. The wall
 * between volumes and sandboxes is the mount itself: a sandbox sees a volume only if it was
 * created with it, and the host's mount point sits in a root-only (0700) folder. */
#ifndef CELLBOX_SANDBOX_VOLUME_SHARED_H
#define CELLBOX_SANDBOX_VOLUME_SHARED_H

#include <stddef.h>

/* Makes the image (`bytes`, sparse), mounts it at mount_point (created) and opens its root to
   every sandbox user as above. 0, or -1 + why (nothing is left behind). */
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

#endif
