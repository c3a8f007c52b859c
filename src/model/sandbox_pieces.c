#include "model/sandbox_pieces.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/fs.h"
#include "common/log.h"
#include "kernel/kernelspec.h"
#include "kernel/runtime_files.h"
#include "model/registry.h"
#include "sandbox/volume_shared.h"
#include "sandbox/volume_worker.h"

static const char *data_dir;
static volume_kind workspace_kind;
static uid_t first_uid;
static unsigned char uid_in_use[SANDBOX_UID_SLOTS];
static char *root_mount_point, *runtime_dir;
static void (*add_record_extras)(kernel *k, json_t *record);

void sandbox_pieces_init(const char *dir, volume_kind kind, uid_t first)
{
    data_dir = dir;
    workspace_kind = kind;
    first_uid = first;
    if (asprintf(&root_mount_point, "%s/.sandbox-root", data_dir) < 0 ||
        !(runtime_dir = realpath(runtime_files_python_dir(), NULL)))
        die("out of memory or missing runtime directory");
    /* runtime_dir: PREFIX/share/cellbox/python → PREFIX */
    for (int up = 0; up < 3; up++)
        *strrchr(runtime_dir, '/') = '\0';
    if (fs_mkdir_p(root_mount_point, 0700) < 0)
        die("cannot create %s: %s", root_mount_point, strerror(errno));
}

void sandbox_pieces_base(kernel_sandbox *base)
{
    base->root_mount_point = root_mount_point;
    base->runtime_dir = runtime_dir;
}

char *sandbox_pieces_path(const char *folder, const char *id, const char *suffix)
{
    char *path;
    if (asprintf(&path, "%s/%s/%s%s", data_dir, folder, id, suffix) < 0)
        die("out of memory");
    return path;
}

static int allocate_uid_slot(void)
{
    for (int i = 0; i < SANDBOX_UID_SLOTS; i++) {
        if (!uid_in_use[i]) {
            uid_in_use[i] = 1;
            return i;
        }
    }
    return -1;
}

uid_t sandbox_pieces_uid(const sandbox_pieces *pieces) { return first_uid + (uid_t)pieces->uid_slot; }

static void add_cgroup_path(const char *path, void *arg) { json_array_append_new(arg, json_string(path)); }

/* What the next daemon needs to clean up after this one (reconcile.h) or to adopt the sandbox:
   written before any piece exists, rewritten when a kernel is handed out (`k`: then its workspace
   is the user's, kept with --keep-workspaces) and whenever what survives a restart changes (its
   pid, its box), removed once every piece is released. */
void sandbox_pieces_set_record_extras(void (*add_extras)(kernel *k, json_t *record))
{
    add_record_extras = add_extras;
}

void sandbox_pieces_record(const sandbox_pieces *pieces, kernel *k)
{
    char name[64];
    snprintf(name, sizeof name, "kernel-%s", pieces->id);
    json_t *cgroups = json_array();
    cgroup_each_path(name, add_cgroup_path, cgroups);
    json_t *record = json_pack("{s:s, s:i, s:s, s:o, s:b}", "id", pieces->id, "uid",
                               (json_int_t)sandbox_pieces_uid(pieces), "image", pieces->image,
                               "cgroups", cgroups, "in_use", k != NULL);
    if (k) {
        json_object_set_new(record, "kernelspec", json_string(kernel_spec(k)->name));
        json_object_set(record, "env", kernel_request_env(k));
        json_object_set_new(record, "limits", limits_to_json(kernel_limits(k)));
        /* By name and path only: the next daemon finds each volume's host mount itself. */
        const rootfs_volumes *volumes = &kernel_get_sandbox(k)->volumes;
        json_t *mounts = json_object();
        for (int i = 0; i < volumes->count; i++)
            json_object_set_new(mounts, volumes->mount[i].name,
                                json_string(volumes->mount[i].path));
        json_object_set_new(record, "volumes", mounts);
        /* A networked sandbox adopted by the next daemon gets a new interface with these. */
        json_t *allow_out, *deny_out;
        kernel_egress_lists(k, &allow_out, &deny_out);
        if (allow_out || deny_out)
            json_object_set_new(record, "egress",
                                json_pack("{s:O?, s:O?}", "allowOut", allow_out, "denyOut",
                                          deny_out));
        pid_t pid = kernel_pid(k);
        if (pid > 0 && kernel_get_state(k) != KERNEL_DEAD) {
            json_object_set_new(record, "pid", json_integer(pid));
            json_object_set_new(record, "pid_start", json_integer(kernel_process_start_time(pid)));
        }
        if (add_record_extras)
            add_record_extras(k, record);
    }
    registry_write(pieces->id, record);
    json_decref(record);
}

/* A sandbox's identity: its uid and the path of its volume's image. */
int sandbox_pieces_claim_identity(const char *id, sandbox_pieces *pieces, char *why, size_t why_size)
{
    pieces->uid_slot = allocate_uid_slot();
    if (pieces->uid_slot < 0) {
        snprintf(why, why_size, "no free sandbox uid (%d sandboxes exist)", SANDBOX_UID_SLOTS);
        return -1;
    }
    pieces->image = sandbox_pieces_path("volumes", id, ".img");
    snprintf(pieces->id, sizeof pieces->id, "%s", id);
    sandbox_pieces_record(pieces, NULL);
    return 0;
}

int sandbox_pieces_create_cgroup(const char *id, const sandbox_limits *limits,
                                 sandbox_pieces *pieces, char *why, size_t why_size)
{
    char name[64];
    snprintf(name, sizeof name, "kernel-%s", id);
    cgroup_limits group_limits = {.memory_bytes = limits->memory_bytes, .pids = limits->pids,
                                  .cpus = limits->cpus};
    pieces->cgroup = cgroup_create(name, &group_limits, why, why_size);
    return pieces->cgroup ? 0 : -1;
}

int sandbox_pieces_build(const char *id, const sandbox_limits *limits, sandbox_pieces *pieces,
                         const char *workspace, char *why, size_t why_size)
{
    if (volume_create(workspace_kind, pieces->image, workspace, limits->disk_bytes,
                      sandbox_pieces_uid(pieces), sandbox_pieces_uid(pieces), why, why_size) < 0) {
        free(pieces->image);
        pieces->image = NULL;
        return -1;
    }
    return sandbox_pieces_create_cgroup(id, limits, pieces, why, why_size);
}

/* The sandbox's record goes only once its cgroup has: a daemon killed while the group's last
   tasks were leaving (up to a second after a delete) left an empty group that no record named,
   and the next daemon could not know it was ours. Kept on a removal given up on, too. */
static void forget_record(void *id, bool removed)
{
    if (removed)
        registry_remove(id);
    free(id);
}

int sandbox_pieces_open_volume_views(const char *id, uid_t uid, rootfs_volumes *volumes,
                                     char *why, size_t why_size)
{
    for (int i = 0; i < volumes->count; i++) {
        rootfs_volume *m = &volumes->mount[i];
        char view[4400];
        snprintf(view, sizeof view, "%.4000s/volume-views/%.40s/%.63s", data_dir, id, m->name);
        if (strlen(view) >= sizeof m->host) {
            snprintf(why, why_size, "the data directory's path is too long for the view of volume "
                     "%s (%zu bytes at most): use a shorter --data-dir", m->name, sizeof m->host);
            return -1;
        }
        if (volume_shared_open_view(m->host, view, uid, uid, why, why_size) < 0)
            return -1;
        snprintf(m->host, sizeof m->host, "%s", view);
    }
    return 0;
}

void sandbox_pieces_close_volume_views(const char *id)
{
    char *folder = sandbox_pieces_path("volume-views", id, "");
    volume_shared_close_views(folder);
    free(folder);
}

void sandbox_pieces_release(sandbox_pieces *pieces, const char *workspace, bool keep_workspace)
{
    char *record = pieces->id[0] ? strdup(pieces->id) : NULL;
    if (record)
        sandbox_pieces_close_volume_views(record);
    if (pieces->cgroup)
        cgroup_destroy_then(pieces->cgroup, record ? forget_record : NULL, record);
    else if (record)
        forget_record(record, true);
    /* A kept volume must hold every finished write once the delete is answered: synced and
       detached here. Any other is removed by the volume helper, off the loop. */
    if (workspace && pieces->image && keep_workspace)
        volume_destroy(pieces->image, workspace, keep_workspace);
    else if (workspace && pieces->image)
        volume_worker_destroy(pieces->image, workspace, false);
    if (pieces->uid_slot >= 0)
        uid_in_use[pieces->uid_slot] = 0;
    free(pieces->image);
    *pieces = SANDBOX_PIECES_NONE;
}

bool sandbox_pieces_uid_available(uid_t uid)
{
    return uid >= first_uid && uid < first_uid + SANDBOX_UID_SLOTS && !uid_in_use[uid - first_uid];
}

sandbox_pieces sandbox_pieces_adopted(const char *id, uid_t uid, sandbox_cgroup *cgroup)
{
    sandbox_pieces pieces = {.uid_slot = (int)(uid - first_uid), .cgroup = cgroup,
                             .image = sandbox_pieces_path("volumes", id, ".img")};
    snprintf(pieces.id, sizeof pieces.id, "%s", id);
    uid_in_use[pieces.uid_slot] = 1;
    return pieces;
}
