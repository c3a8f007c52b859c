/* rootfs — the sandbox's minimal filesystem, built in its own mount namespace and entered with
 * pivot_root. No host path is visible but the read-only ones listed in rootfs.c. */
#ifndef CELLBOX_SANDBOX_ROOTFS_H
#define CELLBOX_SANDBOX_ROOTFS_H

#include <stdbool.h>
#include <sys/types.h>

/* The sandbox user's home (/etc/passwd, HOME): the workspace under the name E2B's SDKs use. */
#define ROOTFS_HOME "/home/user"

/* Named volumes (model/volumes.h) bound into the sandbox: each already mounted on the host, bound
   read-write, nosuid and nodev at its path inside. */
#define ROOTFS_MAX_VOLUMES 8
#define ROOTFS_VOLUME_NAME_MAX 64
#define ROOTFS_VOLUME_PATH_MAX 256
/* Where the sandbox's root lists the volumes' paths inside, one a line, for Landlock (landlock.h)
   in every process that enters or joins the sandbox: on the read-only root, so never forged. */
#define ROOTFS_VOLUME_LIST "/etc/cellbox-volumes"

typedef struct rootfs_volume {
    char name[ROOTFS_VOLUME_NAME_MAX];  /* the volume's, for the APIs */
    char host[ROOTFS_VOLUME_PATH_MAX];  /* host: where the volume is mounted */
    char path[ROOTFS_VOLUME_PATH_MAX];  /* inside: absolute, checked (model/volumes.h) */
} rootfs_volume;

typedef struct rootfs_volumes {
    int count;
    rootfs_volume mount[ROOTFS_MAX_VOLUMES];
} rootfs_volumes;

/* A template with files of its own (model/templates.h): its view, a host directory whose
   subdirectories replace or join the base root's. view/usr is bound as /usr instead of the
   host's; view/etc's entries replace the host's /etc entries when view/etc exists (an imported
   root filesystem); every other top-level directory of the view is bound at /NAME, read-only,
   or read-write (still nosuid, nodev) for a build step, whose view has the step's new layer as
   its upper directory. */
typedef struct rootfs_template {
    const char *view; /* host: the template's view; NULL: the base root (no template) */
    bool writable;    /* a build step's view: its directories are bound read-write */
} rootfs_template;

typedef struct rootfs_spec {
    const char *mount_point;   /* host: an empty directory the new root is mounted on */
    const char *workspace;     /* host: bound read-write at /workspace and at ROOTFS_HOME */
    const char *runtime_dir;   /* host: cellbox's install prefix, bound read-only at /opt/cellbox */
    uid_t uid;                 /* the sandbox user, named "user" in /etc/passwd */
    gid_t gid;
    long long tmp_bytes;       /* size of the /tmp tmpfs */
    const char *nameserver;    /* the networked sandboxes' gateway (NULL: the daemon gives none) */
    const rootfs_volumes *volumes; /* NULL: none */
    const rootfs_template *template; /* NULL or a NULL view: the base root */
} rootfs_spec;

/* Builds the root and pivots into it; cwd becomes /workspace. Runs in the sandbox's first
   process, as root, in fresh mount and pid namespaces. 0, or -1 with `why` filled. */
int rootfs_enter(const rootfs_spec *spec, char *why, size_t why_size);

#endif
