/* landlock — a filesystem policy the kernel enforces even if a mount is ever got wrong:
 * read/execute everywhere in the sandbox root, write only in /workspace, /tmp, /dev/shm, the
 * named volumes the root lists (ROOTFS_VOLUME_LIST, rootfs.h) and the few device files. Best effort: kernels without Landlock skip it (mounts remain the wall). */
#ifndef CELLBOX_SANDBOX_LANDLOCK_H
#define CELLBOX_SANDBOX_LANDLOCK_H

/* Returns the ABI version applied, 0 if Landlock is unavailable, -1 on error. */
int landlock_restrict(void);

#endif
