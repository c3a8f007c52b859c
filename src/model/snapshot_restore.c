/* snapshot_restore — a sandbox made from a snapshot (a new one, or the snapshot's own sandbox
 * rewound in place; hibernate.c's wake is the latter, files kept).
 *
 * The seal is checked before anything is read (snapshot_store.h). Then, for each context, the
 * level the live zygote allows: its process image when kernel_image_fits says this zygote can
 * put it back ("process": the kernel starts as that image, locked down before one restored
 * instruction runs, kernel/checkpoint.h), else a fresh kernel that loads the context's namespace
 * ("python": kernel_load_namespace reports name by name), else a fresh kernel ("restarted").
 * A context whose clone could not put its fitting image back starts again as a new interpreter
 * and loads the namespace. The default context comes first, with the sandbox (rewound in place:
 * the same kernel restarted from its image, kernel_restart_from_image); the others join it once
 * it has started.
 * Each context's outcome goes into the answer's "restore": {"contexts": [...]}. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/fs.h"
#include "common/log.h"
#include "common/loop.h"
#include "common/worker.h"
#include "kernel/checkpoint.h"
#include "kernel/namespace_transfer.h"
#include "model/manager.h"
#include "model/snapshot_internal.h"
#include "model/snapshot_store.h"
#include "model/ttl.h"
#include "sandbox/volume.h"

static char *mounts_folder; /* DATA_DIR/snapshot-mounts: snapshots' images, read-only, briefly */

typedef struct restore_job restore_job;
struct restore_job {
    char snapshot_id[64];
    json_t *description; /* the snapshot's (sealed) */
    box *b;              /* NULL once it went away */
    size_t at;           /* the context being started */
    kernel *current;     /* its kernel; NULL once gone */
    const char *planned; /* its level: "process", "python" or "restarted" */
    json_t *plan_notes;  /* why a level was not reached */
    int image_fd;        /* its image while its kernel starts from it */
    bool files_only;     /* a hibernated sandbox listed again: no context's state is loaded */
    json_t *reports;     /* each context's outcome */
    box_start_wait *wait;
    json_t *env, *metadata; /* a new sandbox's, until it is configured */
    int timeout_s;          /* its TTL */
    char mount_point[4400]; /* the snapshot's image mounted while it is copied ("": none) */
    snapshot_done done;
    void *arg;
    restore_job *next;
};

static restore_job *restores;

static void release_files(const char *mount_point);

static json_t *context_entry(restore_job *job, size_t index)
{
    return json_array_get(json_object_get(job->description, "contexts"), index);
}

static bool snapshot_file(restore_job *job, const char *name, char *out, size_t size)
{
    return name && snapshot_store_path(job->snapshot_id, name, out, size);
}

static void forget_restore(restore_job *job)
{
    for (restore_job **at = &restores; *at; at = &(*at)->next)
        if (*at == job) {
            *at = job->next;
            break;
        }
    if (job->wait)
        box_start_wait_cancel(job->wait);
    if (job->image_fd >= 0)
        close(job->image_fd);
    release_files(job->mount_point);
    json_decref(job->env);
    json_decref(job->metadata);
    json_decref(job->description);
    json_decref(job->reports);
    json_decref(job->plan_notes);
    free(job);
}

static void finish_restore(restore_job *job, failure_kind failure, const char *why)
{
    if (why) {
        job->done(job->arg, NULL, failure, why);
    } else {
        json_t *answer = box_model(job->b);
        json_object_set_new(
            answer, "restore",
            json_pack("{s:s, s:O}", "snapshot_id", job->snapshot_id, "contexts", job->reports));
        job->done(job->arg, answer, FAILURE_INTERNAL, NULL);
        json_decref(answer);
    }
    forget_restore(job);
}

/* ---- the level of one context ---- */

/* Opens the context's image if the live zygote can put it back; else notes why not. */
static int open_fitting_image(restore_job *job, json_t *entry, const kernelspec *spec)
{
    char path[4400], why[512];
    if (!snapshot_file(job, json_string_value(json_object_get(entry, "image")), path, sizeof path))
        return -1;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        json_object_set_new(job->plan_notes, "process",
                            json_sprintf("cannot open %s: %s", path, strerror(errno)));
        return -1;
    }
    if (!kernel_image_fits(spec, fd, why, sizeof why)) {
        json_object_set_new(job->plan_notes, "process", json_string(why));
        close(fd);
        return -1;
    }
    return fd;
}

static void plan_context(restore_job *job, json_t *entry, const kernelspec *spec)
{
    json_decref(job->plan_notes);
    job->plan_notes = json_object();
    if (job->image_fd >= 0)
        close(job->image_fd);
    if (job->files_only) {
        /* Its processes end as soon as it is listed; the wake loads the state. Loaded here, a
           state would run against the workspace first (a namespace load reopens its files)
           and could change the files the wake then finds. */
        job->image_fd = -1;
        job->planned = "restarted";
        return;
    }
    job->image_fd = open_fitting_image(job, entry, spec);
    job->planned = job->image_fd >= 0                    ? "process"
                   : json_object_get(entry, "namespace") ? "python"
                                                         : "restarted";
}

static void start_next_context(restore_job *job);

static void context_done(restore_job *job, const char *carried, json_t *report)
{
    json_t *entry = context_entry(job, job->at);
    json_t *outcome = json_pack("{s:s, s:O, s:O, s:s, s:o}", "context_id",
                                job->current ? kernel_id(job->current) : "", "from_context_id",
                                json_object_get(entry, "context_id"), "language",
                                json_object_get(entry, "language"), "carried", carried, "report",
                                report ? report : json_object());
    if (json_object_size(job->plan_notes) > 0)
        json_object_set(outcome, "not_reached", job->plan_notes);
    json_array_append_new(job->reports, outcome);
    job->at++;
    start_next_context(job);
}

static void on_namespace_loaded(void *arg, json_t *report, failure_kind failure, const char *why)
{
    restore_job *job = arg;
    close(job->image_fd);
    job->image_fd = -1;
    if (report) {
        context_done(job, "python", json_deep_copy(report));
        return;
    }
    json_object_set_new(job->plan_notes, "python", json_string(why));
    context_done(job, "restarted", NULL);
}

static void load_namespace(restore_job *job)
{
    char path[4400], why[512];
    failure_kind failure;
    json_t *entry = context_entry(job, job->at);
    if (!snapshot_file(job, json_string_value(json_object_get(entry, "namespace")), path,
                       sizeof path)) {
        context_done(job, "restarted", NULL);
        return;
    }
    job->image_fd = open(path, O_RDONLY | O_CLOEXEC); /* the namespace file, while it loads */
    if (job->image_fd >= 0 &&
        kernel_load_namespace(job->current, job->image_fd, on_namespace_loaded, job, &failure, why,
                              sizeof why) == 0)
        return;
    if (job->image_fd < 0)
        snprintf(why, sizeof why, "cannot open %.300s: %s", path, strerror(errno));
    json_object_set_new(job->plan_notes, "python", json_string(why));
    context_done(job, "restarted", NULL);
}

static void wait_for_context(restore_job *job);

/* The image fitted the zygote but the clone could not put it back (a file it maps is not the
   one recorded, the memory limit): the context starts again as a new interpreter, which loads
   its namespace where the snapshot has one. */
static void fall_back_from_image(restore_job *job)
{
    char why[512];
    job->planned =
        json_object_get(context_entry(job, job->at), "namespace") ? "python" : "restarted";
    if (kernel_restart(job->current, why, sizeof why) < 0) {
        json_object_set_new(job->plan_notes, "start", json_string(why));
        context_done(job, "failed", NULL);
        return;
    }
    wait_for_context(job);
}

/* The context's kernel left "starting": what became of the level planned for it. */
static void context_started(void *arg)
{
    restore_job *job = arg;
    if (!job->b || !job->current) {
        finish_restore(job, FAILURE_CONFLICT, "the sandbox was deleted while it was restored");
        return;
    }
    if (strcmp(job->planned, "process") == 0) {
        close(job->image_fd);
        job->image_fd = -1;
        if (kernel_restore_state(job->current) == KERNEL_RESTORED) {
            json_t *report = kernel_restore_report(job->current);
            context_done(job, "process", report ? json_deep_copy(report) : NULL);
            return;
        }
        json_object_set_new(job->plan_notes, "process",
                            json_string(kernel_death_reason(job->current)));
        fall_back_from_image(job);
        return;
    }
    if (kernel_get_state(job->current) == KERNEL_DEAD) {
        json_object_set_new(job->plan_notes, "start",
                            json_string(kernel_death_reason(job->current)));
        context_done(job, "failed", NULL);
    } else if (strcmp(job->planned, "python") == 0) {
        load_namespace(job);
    } else {
        context_done(job, "restarted", NULL);
    }
}

static void on_context_started(void *arg)
{
    restore_job *job = arg;
    job->wait = NULL;
    loop_defer(context_started, job); /* not from inside the kernel's message handling */
}

static void wait_for_context(restore_job *job)
{
    job->wait = box_when_started(job->current, on_context_started, job);
    if (!job->wait)
        loop_defer(context_started, job); /* it started already (or died) */
}

/* The contexts after the default one join the sandbox it made. */
static void start_next_context(restore_job *job)
{
    if (!job->b) {
        finish_restore(job, FAILURE_CONFLICT, "the sandbox was deleted while it was restored");
        return;
    }
    json_t *entry = context_entry(job, job->at);
    if (!entry) {
        log_info("sandbox %s restored from snapshot %s", box_id(job->b), job->snapshot_id);
        finish_restore(job, FAILURE_INTERNAL, NULL);
        return;
    }
    const kernelspec *spec =
        kernelspec_find(json_string_value(json_object_get(entry, "kernelspec")));
    const char *cwd = json_string_value(json_object_get(entry, "cwd"));
    char why[512];
    failure_kind failure;
    if (!spec) {
        json_decref(job->plan_notes);
        job->plan_notes = json_object();
        json_object_set_new(job->plan_notes, "start",
                            json_string("its kernelspec is not installed any more"));
        job->current = NULL;
        context_done(job, "failed", NULL);
        return;
    }
    plan_context(job, entry, spec);
    job->current = box_add_restored_context(job->b, spec, cwd ? cwd : "/workspace", job->image_fd,
                                            &failure, why, sizeof why);
    if (!job->current) {
        json_object_set_new(job->plan_notes, "start", json_string(why));
        context_done(job, "failed", NULL);
        return;
    }
    wait_for_context(job);
}

/* ---- the files ---- */

/* The snapshot's workspace as a tree to copy from: its folder (tmpfs), or its image mounted
   read-only (ext4) in `mount_point`, which the caller unmounts with release_files. */
static int open_files(restore_job *job, char *tree, size_t tree_size, char *mount_point,
                      size_t mount_size, char *why, size_t why_size)
{
    json_t *workspace = json_object_get(job->description, "workspace");
    const char *file = json_string_value(json_object_get(workspace, "file"));
    const char *kind = json_string_value(json_object_get(workspace, "kind"));
    mount_point[0] = '\0';
    if (!snapshot_file(job, file, tree, tree_size) || !kind) {
        snprintf(why, why_size, "snapshot %s has no workspace", job->snapshot_id);
        return -1;
    }
    if (strcmp(kind, "ext4") != 0)
        return 0;
    static unsigned serial;
    snprintf(mount_point, mount_size, "%s/%s-%u", mounts_folder, job->snapshot_id, ++serial);
    char image[4400];
    snprintf(image, sizeof image, "%s", tree);
    int rc = -1;
    if (fs_mkdir_p(mount_point, 0700) < 0)
        snprintf(why, why_size, "cannot create %s: %s", mount_point, strerror(errno));
    else
        rc = volume_mount_image_read_only(image, mount_point, why, why_size);
    if (rc < 0) {
        rmdir(mount_point);
        mount_point[0] = '\0';
        return -1;
    }
    snprintf(tree, tree_size, "%s", mount_point);
    return 0;
}

static void release_files(const char *mount_point)
{
    if (!mount_point[0])
        return;
    if (umount2(mount_point, 0) < 0 && umount2(mount_point, MNT_DETACH) < 0)
        log_warn("cannot unmount %s: %s", mount_point, strerror(errno));
    rmdir(mount_point);
}

/* Every entry of the workspace removed (links removed, never followed), as root. */
static int empty_workspace(const char *workspace, char *why, size_t why_size)
{
    DIR *dir = opendir(workspace);
    if (!dir) {
        snprintf(why, why_size, "cannot open the workspace %s: %s", workspace, strerror(errno));
        return -1;
    }
    int rc = 0;
    for (struct dirent *entry; (entry = readdir(dir));) {
        if (strcmp(entry->d_name, ".") == 0 || strcmp(entry->d_name, "..") == 0)
            continue;
        char path[4400];
        snprintf(path, sizeof path, "%s/%s", workspace, entry->d_name);
        if (fs_remove_tree(path) < 0 && errno != ENOENT) {
            snprintf(why, why_size, "cannot empty the workspace: %s: %s", path, strerror(errno));
            rc = -1;
            break;
        }
    }
    closedir(dir);
    return rc;
}

/* ---- starting ---- */

/* `verify`: check the seal here, on the loop (false: it was checked on a worker thread). */
static restore_job *new_restore(const char *snapshot_id, bool verify, snapshot_done done, void *arg,
                                failure_kind *failure, char *why, size_t why_size)
{
    json_t *description = snapshot_store_load(snapshot_id, verify, failure, why, why_size);
    if (!description)
        return NULL;
    restore_job *job = calloc(1, sizeof *job);
    if (!job)
        die("out of memory");
    snprintf(job->snapshot_id, sizeof job->snapshot_id, "%s", snapshot_id);
    job->description = description;
    job->image_fd = -1;
    job->reports = json_array();
    job->plan_notes = json_object();
    job->done = done;
    job->arg = arg;
    job->next = restores;
    restores = job;
    return job;
}

/* The new sandbox, its files in place and its kernel started: given the snapshot's settings,
   then its contexts started in turn. */
static void configure_restored(restore_job *job, kernel *k)
{
    json_t *settings = json_object_get(job->description, "sandbox");
    job->b = box_of(k);
    job->current = k;
    box_configure(job->b, job->metadata, job->env, job->timeout_s);
    json_t *allow_out = json_object_get(settings, "allowOut"),
           *deny_out = json_object_get(settings, "denyOut");
    char egress_why[512];
    if ((allow_out || deny_out) &&
        manager_set_egress(k, allow_out, deny_out, egress_why, sizeof egress_why) < 0)
        json_object_set_new(job->plan_notes, "network", json_string(egress_why));
    const char *working_directory =
        json_string_value(json_object_get(settings, "working_directory"));
    if (working_directory)
        kernel_set_working_directory(k, working_directory);
    wait_for_context(job);
}

/* manager_create_seeded_later's answer: the snapshot's files were copied on a worker thread,
   and its kernel started only then. */
static void on_sandbox_made(void *arg, kernel *k, failure_kind failure, const char *why)
{
    restore_job *job = arg;
    release_files(job->mount_point);
    job->mount_point[0] = '\0';
    if (!k)
        finish_restore(job, failure, why);
    else
        configure_restored(job, k);
}

/* `off_loop`: the files are copied on a worker thread (a client's restore); else here (a
   hibernated sandbox listed again at start, before the daemon serves anyone). */
static int restore_new(const char *snapshot_id, const char *sandbox_id, json_t *options,
                       bool verify, bool off_loop, snapshot_done done, void *arg,
                       failure_kind *failure, char *why, size_t why_size)
{
    restore_job *job = new_restore(snapshot_id, verify, done, arg, failure, why, why_size);
    if (!job)
        return -1;
    job->files_only = sandbox_id != NULL; /* only hibernate.c names the id: see the header */
    json_t *settings = json_object_get(job->description, "sandbox");
    json_t *entry = context_entry(job, 0);
    const char *template = json_string_value(json_object_get(settings, "template"));
    const kernelspec *spec = template ? kernelspec_find(template) : NULL;
    if (!spec || !entry) {
        *failure = FAILURE_NOT_FOUND;
        snprintf(why, why_size, "the template '%s' of snapshot %s is not installed any more",
                 template ? template : "?", snapshot_id);
        forget_restore(job);
        return -1;
    }
    json_t *env = json_deep_copy(json_object_get(settings, "env"));
    if (!json_is_object(env)) {
        json_decref(env);
        env = json_object();
    }
    json_object_update(env, json_object_get(options, "env"));
    json_t *metadata = json_deep_copy(json_object_get(settings, "metadata"));
    if (!json_is_object(metadata)) {
        json_decref(metadata);
        metadata = json_object();
    }
    json_object_update(metadata, json_object_get(options, "metadata"));
    job->env = env;
    job->metadata = metadata;
    json_t *timeout = json_object_get(options, "timeout");
    if (!json_is_integer(timeout))
        timeout = json_object_get(settings, "timeout_s");
    job->timeout_s = (int)json_integer_value(timeout);
    sandbox_limits saved_limits = limits_from_json(json_object_get(settings, "limits"));
    json_t *limits = limits_to_request(&saved_limits);
    json_t *network = json_is_true(json_object_get(settings, "network")) ? json_true() : NULL;
    char tree[4400];
    int rc = open_files(job, tree, sizeof tree, job->mount_point, sizeof job->mount_point, why,
                        why_size);
    kernel *k = NULL;
    if (rc == 0) {
        plan_context(job, entry, spec);
        manager_seed seed = {
            .id = sandbox_id, .workspace_from = tree, .restore_image_fd = job->image_fd};
        if (off_loop)
            rc = manager_create_seeded_later(template, env, limits, network, &seed,
                                             on_sandbox_made, job, failure, why, why_size);
        else if (!(k = manager_create_seeded(template, env, limits, network, &seed, failure, why,
                                             why_size)))
            rc = -1;
    } else {
        *failure = FAILURE_INTERNAL;
    }
    json_decref(limits);
    if (rc < 0 || k) {
        release_files(job->mount_point);
        job->mount_point[0] = '\0';
    }
    if (rc < 0) {
        forget_restore(job);
        return -1;
    }
    if (k)
        configure_restored(job, k);
    return 0;
}

int snapshot_restore_new(const char *snapshot_id, const char *sandbox_id, json_t *options,
                         snapshot_done done, void *arg, failure_kind *failure, char *why,
                         size_t why_size)
{
    return restore_new(snapshot_id, sandbox_id, options, true, false, done, arg, failure, why,
                       why_size);
}

/* A restore into a new sandbox checks the snapshot's seal on a worker thread first (every byte
   of it through the HMAC: the loop serves the other sandboxes meanwhile), then starts on the
   loop. */
typedef struct seal_check {
    char snapshot_id[64];
    char box_id[64]; /* a rewind in place: its sandbox, found again by id afterwards */
    bool keep_files;
    json_t *options; /* the loop's: not touched by the thread */
    snapshot_done done;
    void *arg;
    int rc; /* the thread's outcome */
    char why[600];
} seal_check;

static void check_seal(void *arg) /* on a worker thread */
{
    seal_check *check = arg;
    check->rc = snapshot_store_check_seal(check->snapshot_id, check->why, sizeof check->why);
}

static int restore_in_place(const char *snapshot_id, box *b, bool keep_files, bool verify,
                            snapshot_done done, void *arg, failure_kind *failure, char *why,
                            size_t why_size);

static void seal_checked(void *arg)
{
    seal_check *check = arg;
    failure_kind failure = FAILURE_FORBIDDEN;
    char why[4600], seal[4300]; /* why: as large as a restore's own messages, which name paths */
    snprintf(why, sizeof why, "%s", check->why);
    int rc = check->rc;
    if (rc == 0 && manager_is_ending()) { /* checked while the daemon began to stop */
        rc = -1;
        failure = FAILURE_CONFLICT;
        snprintf(why, sizeof why,
                 "the daemon is shutting down: restore snapshot %s once it is back",
                 check->snapshot_id);
    } else if (rc == 0 && check->box_id[0] && !box_find(check->box_id)) {
        rc = -1;
        failure = FAILURE_CONFLICT;
        snprintf(why, sizeof why, "sandbox %s was deleted while its snapshot was checked",
                 check->box_id);
    } else if (rc == 0 && check->box_id[0]) {
        rc = restore_in_place(check->snapshot_id, box_find(check->box_id), check->keep_files, false,
                              check->done, check->arg, &failure, why, sizeof why);
    } else if (rc == 0) {
        rc = restore_new(check->snapshot_id, NULL, check->options, false, true, check->done,
                         check->arg, &failure, why, sizeof why);
    } else if (!snapshot_store_path(check->snapshot_id, NULL, seal, sizeof seal) ||
               access(seal, F_OK) < 0) { /* its folder deleted while it was checked, not tampered */
        failure = FAILURE_NOT_FOUND;
        snprintf(why, sizeof why, "snapshot %s does not exist (see GET /v1/snapshots)",
                 check->snapshot_id);
    }
    if (rc < 0)
        check->done(check->arg, NULL, failure, why);
    json_decref(check->options);
    free(check);
}

/* The seal checked on a worker thread, then the restore started from seal_checked: into a new
   sandbox (b NULL) or b rewound in place. */
static int restore_after_seal_check(const char *snapshot_id, box *b, bool keep_files,
                                    json_t *options, snapshot_done done, void *arg,
                                    failure_kind *failure, char *why, size_t why_size)
{
    /* a missing snapshot is 404 here; one whose description does not parse, 403 (tampered) */
    json_t *description = snapshot_store_load(snapshot_id, false, failure, why, why_size);
    json_decref(description);
    if (!description)
        return -1;
    if (strlen(snapshot_id) >= sizeof((seal_check *)NULL)->snapshot_id) {
        *failure = FAILURE_NOT_FOUND;
        snprintf(why, why_size, "snapshot %.64s does not exist (see GET /v1/snapshots)",
                 snapshot_id);
        return -1;
    }
    seal_check *check = calloc(1, sizeof *check);
    if (!check)
        die("out of memory");
    snprintf(check->snapshot_id, sizeof check->snapshot_id, "%s", snapshot_id);
    if (b)
        snprintf(check->box_id, sizeof check->box_id, "%s", box_id(b));
    check->keep_files = keep_files;
    check->options = json_incref(options);
    check->done = done;
    check->arg = arg;
    worker_submit(check_seal, seal_checked, check);
    return 0;
}

/* The default context becomes its image again (the same kernel, a new clone of the zygote)
   where the live zygote can put it back, else a new interpreter that loads its namespace; the
   others follow. -1 with why (the job is the caller's to end). */
static int restart_in_place(restore_job *job, box *b, char *why, size_t why_size)
{
    kernel *primary = box_default_kernel(b);
    plan_context(job, context_entry(job, 0), kernel_spec(primary));
    if (job->image_fd >= 0 && kernel_restart_from_image(primary, job->image_fd, why, why_size) < 0) {
        json_object_set_new(job->plan_notes, "process", json_string(why));
        close(job->image_fd);
        job->image_fd = -1;
        job->planned = json_object_get(context_entry(job, 0), "namespace") ? "python" : "restarted";
    }
    if (job->image_fd < 0 && kernel_restart(primary, why, why_size) < 0)
        return -1;
    job->b = b;
    job->current = primary;
    wait_for_context(job);
    return 0;
}

/* A rewind's files, replaced on a worker thread: the workspace emptied, then the snapshot's
   tree copied in through descriptors opened on the loop. The sandbox's processes are ended
   first, and its kernel starts again only once the copy is done. */
typedef struct files_rewind {
    restore_job *job;    /* listed in `restores` until the copy is done: on_box_gone reaches it */
    char box_id[64];     /* for the answer when the sandbox went away meanwhile */
    char workspace[4400];
    uid_t uid;
    int from_fd, to_fd;  /* the task's own */
    int rc;              /* the thread's outcome */
    char why[4600];      /* room for a path in the workspace */
} files_rewind;

static void replace_files(void *arg) /* on a worker thread */
{
    files_rewind *rewind = arg;
    volume_copy_stats stats = {0};
    rewind->rc = empty_workspace(rewind->workspace, rewind->why, sizeof rewind->why);
    if (rewind->rc == 0)
        rewind->rc = volume_copy_tree_at(rewind->from_fd, rewind->to_fd, rewind->uid,
                                         (gid_t)rewind->uid, &stats, rewind->why,
                                         sizeof rewind->why);
}

static void files_replaced(void *arg) /* on the loop */
{
    files_rewind *rewind = arg;
    restore_job *job = rewind->job;
    close(rewind->from_fd);
    close(rewind->to_fd);
    release_files(job->mount_point);
    job->mount_point[0] = '\0';
    char why[4600];
    snprintf(why, sizeof why, "%s", rewind->why);
    box *b = job->b;
    job->b = NULL; /* set again once its kernel restarts */
    if (!b) {
        snprintf(why, sizeof why, "sandbox %s was deleted while its files were restored",
                 rewind->box_id);
        finish_restore(job, FAILURE_CONFLICT, why);
    } else if (manager_is_ending()) {
        finish_restore(job, FAILURE_CONFLICT,
                       "the daemon is shutting down: rewind the sandbox once it is back");
    } else if (rewind->rc < 0 || restart_in_place(job, b, why, sizeof why) < 0) {
        finish_restore(job, FAILURE_INTERNAL, why);
    }
    free(rewind);
}

/* -1 with why when the copy cannot begin. */
static int rewind_files(restore_job *job, box *b, char *why, size_t why_size)
{
    char tree[4400];
    if (open_files(job, tree, sizeof tree, job->mount_point, sizeof job->mount_point, why,
                   why_size) < 0)
        return -1;
    files_rewind *rewind = calloc(1, sizeof *rewind);
    if (!rewind)
        die("out of memory");
    rewind->job = job;
    snprintf(rewind->box_id, sizeof rewind->box_id, "%s", box_id(b));
    snprintf(rewind->workspace, sizeof rewind->workspace, "%s",
             kernel_workspace(box_default_kernel(b)));
    rewind->uid = box_uid(b);
    rewind->from_fd = open(tree, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    rewind->to_fd = rewind->from_fd < 0 ? -1
                                        : open(rewind->workspace,
                                               O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (rewind->to_fd < 0) {
        snprintf(why, why_size, "cannot open %s: %s",
                 rewind->from_fd < 0 ? tree : rewind->workspace, strerror(errno));
        if (rewind->from_fd >= 0)
            close(rewind->from_fd);
        free(rewind);
        return -1;
    }
    job->b = b; /* NULL again if the box goes away meanwhile */
    worker_submit(replace_files, files_replaced, rewind);
    return 0;
}

static bool is_being_restored(box *b)
{
    for (restore_job *job = restores; job; job = job->next)
        if (job->b == b)
            return true;
    return false;
}

static int restore_in_place(const char *snapshot_id, box *b, bool keep_files, bool verify,
                            snapshot_done done, void *arg, failure_kind *failure, char *why,
                            size_t why_size)
{
    if (is_being_restored(b)) {
        *failure = FAILURE_CONFLICT;
        snprintf(why, why_size, "sandbox %s is being restored: try again once it has", box_id(b));
        return -1;
    }
    restore_job *job = new_restore(snapshot_id, verify, done, arg, failure, why, why_size);
    if (!job)
        return -1;
    /* Every context ends first: nothing may write the files while they are replaced. */
    json_t *contexts = box_contexts_model(b);
    for (size_t i = 1; i < json_array_size(contexts); i++) {
        const char *id = json_string_value(json_object_get(json_array_get(contexts, i), "id"));
        kernel *context = box_find_context(b, id);
        if (context)
            box_delete_context(b, context);
    }
    json_decref(contexts);
    kernel *primary = box_default_kernel(b);
    if (kernel_get_sandbox(primary)->cgroup)
        cgroup_kill_all(kernel_get_sandbox(primary)->cgroup);
    int rc = keep_files ? restart_in_place(job, b, why, why_size)
                        : rewind_files(job, b, why, why_size);
    if (rc < 0) {
        *failure = FAILURE_INTERNAL;
        forget_restore(job);
        return -1;
    }
    return 0;
}

int snapshot_restore_in_place(const char *snapshot_id, box *b, bool keep_files, snapshot_done done,
                              void *arg, failure_kind *failure, char *why, size_t why_size)
{
    return restore_after_seal_check(snapshot_id, b, keep_files, NULL, done, arg, failure, why,
                                    why_size);
}

int snapshot_restore(const char *snapshot_id, json_t *options, snapshot_done done, void *arg,
                     failure_kind *failure, char *why, size_t why_size)
{
    const char *sandbox_id = json_string_value(json_object_get(options, "sandbox_id"));
    if (!sandbox_id)
        return restore_after_seal_check(snapshot_id, NULL, false, options, done, arg, failure, why,
                                        why_size);
    json_t *model = snapshot_get(snapshot_id);
    const char *own = json_string_value(json_object_get(model, "sandbox_id"));
    box *b = box_find(sandbox_id);
    int rc = -1;
    if (!model) {
        *failure = FAILURE_NOT_FOUND;
        snprintf(why, why_size, "snapshot %.64s does not exist (see GET /v1/snapshots)",
                 snapshot_id);
    } else if (!own || strcmp(own, sandbox_id) != 0) {
        *failure = FAILURE_INVALID;
        snprintf(why, why_size,
                 "snapshot %s is of sandbox %s, not %.64s: only its own sandbox can "
                 "be rewound to it (leave out sandbox_id for a new sandbox)",
                 snapshot_id, own ? own : "?", sandbox_id);
    } else if (!b) {
        *failure = FAILURE_NOT_FOUND;
        snprintf(why, why_size,
                 "sandbox %.64s does not exist any more: leave out sandbox_id to "
                 "restore the snapshot into a new sandbox",
                 sandbox_id);
    } else if (box_get_state(b) == BOX_HIBERNATED || box_get_state(b) == BOX_PAUSED) {
        *failure = FAILURE_CONFLICT;
        snprintf(why, why_size,
                 "sandbox %s is %s: resume it (POST /v1/sandboxes/%s/resume) "
                 "before rewinding it",
                 sandbox_id, box_state_name(box_get_state(b)), sandbox_id);
    } else {
        rc = snapshot_restore_in_place(snapshot_id, b, false, done, arg, failure, why, why_size);
    }
    json_decref(model);
    return rc;
}

/* ---- the gone hooks ---- */

static void on_kernel_gone(kernel *k)
{
    for (restore_job *job = restores; job; job = job->next)
        if (job->current == k)
            job->current = NULL; /* its start wait ends with it: context_started sees NULL */
}

static void on_box_gone(box *b)
{
    for (restore_job *job = restores; job; job = job->next)
        if (job->b == b)
            job->b = NULL;
}

void snapshot_restore_init(const char *data_dir)
{
    if (asprintf(&mounts_folder, "%s/snapshot-mounts", data_dir) < 0)
        die("out of memory");
    /* mounts a dead daemon left: read-only images, unmounted and removed */
    DIR *dir = opendir(mounts_folder);
    for (struct dirent *entry; dir && (entry = readdir(dir));) {
        if (entry->d_name[0] == '.')
            continue;
        char path[4400];
        snprintf(path, sizeof path, "%s/%s", mounts_folder, entry->d_name);
        release_files(path);
    }
    if (dir)
        closedir(dir);
    fs_mkdir_p(mounts_folder, 0700);
    box_add_kernel_gone_hook(on_kernel_gone);
    box_add_box_gone_hook(on_box_gone);
}
