/* volume — a sandbox's /workspace as an ext4 image on a loop device, so its disk limit is a real
 * filesystem size (ENOSPC, never a full host disk) and its inode count is bounded too. The image
 * lives in DATA_DIR/volumes and is mounted (nosuid, nodev) at DATA_DIR/workspaces/<id>. */
#ifndef CELLBOX_SANDBOX_VOLUME_H
#define CELLBOX_SANDBOX_VOLUME_H

#include <stddef.h>
#include <sys/types.h>

/* Creates a sparse image of `bytes`, owned inside by uid:gid, and mounts it. 0 or -1 + why. */
int volume_create(const char *image, const char *mount_point, long long bytes, uid_t uid, gid_t gid,
                  char *why, size_t why_size);
/* Unmounts (the loop device detaches itself) and, unless keep, deletes the image. */
void volume_destroy(const char *image, const char *mount_point, int keep);
/* Used and total bytes of the mounted volume; -1 if it cannot be read. */
int volume_usage(const char *mount_point, long long *used, long long *total);

#endif
