/* sandbox_pieces — what the daemon makes for each sandbox besides its kernel: an identity (the
 * id of its record in the registry and a uid of the daemon's block), a workspace volume and a
 * cgroup, and the record that lets the next daemon clean them up or adopt the sandbox.
 *
 * Shared inside model/ only: manager.c (the kernels handed out), prepared.c (pieces made ahead),
 * pool.c (warm-pool kernels), startup.c (the record's extras). Nothing outside model/ includes
 * it. */
#ifndef CELLBOX_MODEL_SANDBOX_PIECES_H
#define CELLBOX_MODEL_SANDBOX_PIECES_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include "common/ids.h"
#include "kernel/kernel.h"
#include "sandbox/cgroup.h"
#include "sandbox/limits.h"
#include "sandbox/uid_block.h"
#include "sandbox/volume.h"

/* Each live sandbox runs as its own uid (and gid) so none can signal or read another's files:
   one of the daemon's block (uid_block.h), unique on the host. */
#define SANDBOX_UID_SLOTS UID_BLOCK_SIZE
/* What starting one more sandbox may open in the daemon at most: its channel, pidfds, pipes,
   the helpers' descriptors while it starts, its commands' pipes (measured: 6 when idle). */
#define DESCRIPTORS_PER_SANDBOX 24

typedef struct sandbox_pieces {
    kernel *kernel;                  /* the kernel they were handed out with, or NULL */
    char id[UUID_STRING_LENGTH + 1]; /* its record's in the registry; "" before one is written */
    int uid_slot;                    /* in the daemon's uid block; -1: none */
    sandbox_cgroup *cgroup;
    char *image;                     /* the workspace volume's image file */
} sandbox_pieces;

#define SANDBOX_PIECES_NONE ((sandbox_pieces){.uid_slot = -1})

/* Called once at start, by manager_init: where workspaces, volumes and the sandbox root live. */
void sandbox_pieces_init(const char *data_dir, volume_kind workspace_kind, uid_t first_uid);
/* Every sandbox's root mount point and runtime directory (a kernel_sandbox's shared part). */
void sandbox_pieces_base(kernel_sandbox *base);
/* DATA_DIR/<folder>/<id><suffix>, malloc'd: "workspaces" (no suffix) or "volumes" (".img"). */
char *sandbox_pieces_path(const char *folder, const char *id, const char *suffix);

/* ---- during a create, or ahead of one, in this order ---- */
/* Claims a free uid and names the volume's image; writes the record (before any piece exists,
   so a daemon killed halfway leaves nothing unnamed). 0, or -1 with `why`. */
int sandbox_pieces_claim_identity(const char *id, sandbox_pieces *pieces, char *why, size_t why_size);
/* The workspace volume, then the cgroup, for an identity already claimed. 0, or -1 with `why`. */
int sandbox_pieces_build(const char *id, const sandbox_limits *limits, sandbox_pieces *pieces,
                         const char *workspace, char *why, size_t why_size);
/* The cgroup alone (after a volume made off the loop, volume_worker.h). 0, or -1 with `why`. */
int sandbox_pieces_create_cgroup(const char *id, const sandbox_limits *limits,
                                 sandbox_pieces *pieces, char *why, size_t why_size);
uid_t sandbox_pieces_uid(const sandbox_pieces *pieces);
/* The sandbox's id-mapped view of each of its named volumes (volume_shared.h), in
   DATA_DIR/volume-views/<id>/<name>, each volume's `host` turned into its view's path: the
   sandbox's uid owns the volume's files there. Views already mounted (an adopted sandbox's) are
   kept. 0, or -1 with `why`; those made are closed with the pieces. */
int sandbox_pieces_open_volume_views(const char *id, uid_t uid, rootfs_volumes *volumes,
                                     char *why, size_t why_size);
void sandbox_pieces_close_volume_views(const char *id);

/* Called once at start, by startup_run, before any record is written: what a handed-out
   kernel's record keeps beyond its pieces and its process (its box, its commands) is added by
   `add_extras`, which the modules above know how to write; the pieces know nothing of them. */
void sandbox_pieces_set_record_extras(void (*add_extras)(kernel *k, json_t *record));

/* ---- while the sandbox lives ---- */
/* (Re)writes the record: `k` once a kernel is handed out (then its workspace is the user's, kept
   with --keep-workspaces), with what survives a restart (its pid, and the extras above). */
void sandbox_pieces_record(const sandbox_pieces *pieces, kernel *k);

/* ---- at the end ---- */
/* Releases every piece (the volume kept with `keep_workspace`); the record goes once the cgroup
   has. `pieces` is left empty (SANDBOX_PIECES_NONE). */
void sandbox_pieces_release(sandbox_pieces *pieces, const char *workspace, bool keep_workspace);

/* ---- for adoption: a previous daemon's sandbox ---- */
bool sandbox_pieces_uid_available(uid_t uid); /* one of this daemon's block, and free */
/* Its pieces, as they are: the uid (checked available) is claimed, the image named. */
sandbox_pieces sandbox_pieces_adopted(const char *id, uid_t uid, sandbox_cgroup *cgroup);

#endif
