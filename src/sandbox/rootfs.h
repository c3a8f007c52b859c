/* rootfs — the sandbox's minimal filesystem, built in its own mount namespace and entered with
 * pivot_root. No host path is visible but the read-only ones listed in rootfs.c. */
#ifndef CELLBOX_SANDBOX_ROOTFS_H
#define CELLBOX_SANDBOX_ROOTFS_H

#include <stdbool.h>
#include <sys/types.h>

/* The sandbox user's home (/etc/passwd, HOME): the workspace under the name E2B's SDKs use. */
#define ROOTFS_HOME "/home/user"

typedef struct rootfs_spec {
    const char *mount_point;   /* host: an empty directory the new root is mounted on */
    const char *workspace;     /* host: bound read-write at /workspace and at ROOTFS_HOME */
    const char *runtime_dir;   /* host: cellbox's install prefix, bound read-only at /opt/cellbox */
    uid_t uid;                 /* the sandbox user, named "user" in /etc/passwd */
    gid_t gid;
    long long tmp_bytes;       /* size of the /tmp tmpfs */
    bool network;              /* copy the host's resolv.conf */
} rootfs_spec;

/* Builds the root and pivots into it; cwd becomes /workspace. Runs in the sandbox's first
   process, as root, in fresh mount and pid namespaces. 0, or -1 with `why` filled. */
int rootfs_enter(const rootfs_spec *spec, char *why, size_t why_size);

#endif
