/* snapshots — taking a snapshot of a running sandbox (snapshot_create) and the store's verbs
 * (list, get, delete). Restores are snapshot_restore.c's, hibernation hibernate.c's.
 *
 * A snapshot is taken context by context, each step waiting for the kernel's answer from the
 * loop: the context's process image (kernel_checkpoint, a full image: restorable after a daemon
 * restart), then its namespace (kernel_save_namespace: the fallback where the image no longer
 * fits the zygote), then the workspace copy (volume_copy), then snapshot.json and the seal
 * (snapshot_store.h). The sandbox goes on running throughout; a failure at any step (a full
 * disk among them) removes the partial folder and leaves the sandbox as it was. */
#include "model/snapshots.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/ids.h"
#include "common/log.h"
#include "common/loop.h"
#include "common/worker.h"
#include "kernel/checkpoint.h"
#include "kernel/namespace_transfer.h"
#include "model/manager.h"
#include "model/snapshot_internal.h"
#include "model/snapshot_store.h"
#include "sandbox/volume.h"

#define NAMESPACE_MAX_BYTES (1LL << 30) /* past it, names are reported "not carried" */

/* The files' steps, on a worker thread: what the thread reads (paths, text) and writes (the
   outcome) while the loop waits for it. */
typedef struct snapshot_files {
    volume_kind kind;
    char image[4200]; /* the workspace's image (ext4), "" for tmpfs */
    char mount[4200]; /* where the workspace is mounted */
    char to[4400];    /* the copy, in the partial folder */
    volume_copy_stats stats;
    char *description; /* snapshot.json's text, made on the loop */
    json_t *model;     /* the snapshot model answered once sealed (the loop's alone) */
    int rc, error;     /* the step's outcome and its errno */
    char why[700];
} snapshot_files;

typedef struct snapshot_job snapshot_job;
struct snapshot_job {
    char id[UUID_STRING_LENGTH + 1];
    char dir[4200];                          /* the partial folder */
    box *b;                                  /* NULL once it went away: the snapshot fails */
    kernel *contexts[SNAPSHOT_MAX_CONTEXTS]; /* the default context first; NULL once gone */
    json_t *entries;                         /* each context's description, in that order */
    size_t count, at;                        /* contexts, and the one being taken */
    int fd;                                  /* the file being written for it */
    char *name;
    json_t *metadata;
    bool hibernation; /* taken for box_hibernate: kept while the box sleeps */
    long long memory_bytes, namespace_bytes;
    snapshot_done done;
    void *arg;
    snapshot_files files;
    bool checkpointing; /* kernel_checkpoint of contexts[at] under way: its `done` comes, or,
                           were the kernel destroyed first, never (checkpoint.h) */
    snapshot_job *next;
};

static snapshot_job *jobs; /* under way: the gone hooks let go of their box and kernels */

/* ---- the end of a job ---- */

static void forget_job(snapshot_job *job)
{
    for (snapshot_job **at = &jobs; *at; at = &(*at)->next)
        if (*at == job) {
            *at = job->next;
            break;
        }
    if (job->fd >= 0)
        close(job->fd);
    json_decref(job->entries);
    json_decref(job->metadata);
    json_decref(job->files.model);
    free(job->files.description);
    free(job->name);
    free(job);
}

static void fail_job(snapshot_job *job, failure_kind failure, const char *why)
{
    snapshot_store_abort(job->id);
    if (job->b)
        log_info("sandbox %s: snapshot %s failed: %s", box_id(job->b), job->id, why);
    job->done(job->arg, NULL, failure, why);
    forget_job(job);
}

/* ---- the steps, context by context ---- */

static void take_context(snapshot_job *job);

static json_t *entry_of(snapshot_job *job)
{
    return json_array_get(job->entries, job->at);
}

/* The context's file of the snapshot; -1 after failing the job (a full disk: FAILURE_EXHAUSTED). */
static int open_context_file(snapshot_job *job, const char *suffix, char *name, size_t size)
{
    snprintf(name, size, "context-%zu.%s", job->at, suffix);
    char path[4400], why[512];
    snprintf(path, sizeof path, "%s/%s", job->dir, name);
    int fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0) {
        int error = errno;
        snprintf(why, sizeof why, "%s while writing the snapshot",
                 error == ENOSPC ? "no space left on the daemon's disk" : strerror(error));
        fail_job(job, error == ENOSPC ? FAILURE_EXHAUSTED : FAILURE_INTERNAL, why);
    }
    return fd;
}

static void drop_context_file(snapshot_job *job, const char *name)
{
    char path[4400];
    snprintf(path, sizeof path, "%s/%s", job->dir, name);
    unlink(path);
}

static void context_taken(snapshot_job *job)
{
    json_t *entry = entry_of(job);
    const char *carried = json_object_get(entry, "image")       ? "process"
                          : json_object_get(entry, "namespace") ? "python"
                                                                : "restarted";
    json_object_set_new(entry, "carried", json_string(carried));
    job->at++;
    take_context(job);
}

static void on_namespace_saved(void *arg, json_t *report, failure_kind failure, const char *why)
{
    snapshot_job *job = arg;
    char name[64];
    snprintf(name, sizeof name, "context-%zu.namespace", job->at);
    close(job->fd);
    job->fd = -1;
    json_t *entry = entry_of(job);
    if (report) {
        json_object_set_new(entry, "namespace", json_string(name));
        json_object_set_new(entry, "namespace_report", json_deep_copy(report));
        job->namespace_bytes += json_integer_value(json_object_get(report, "bytes"));
    } else {
        drop_context_file(job, name);
        if (failure == FAILURE_EXHAUSTED) {
            fail_job(job, failure, why);
            return;
        }
        json_object_set_new(entry, "namespace_not_saved", json_string(why));
    }
    context_taken(job);
}

static void save_namespace(snapshot_job *job)
{
    kernel *k = job->contexts[job->at];
    char name[64], why[512];
    failure_kind failure;
    job->fd = open_context_file(job, "namespace", name, sizeof name);
    if (job->fd < 0)
        return;
    if (kernel_save_namespace(k, job->fd, NAMESPACE_MAX_BYTES, on_namespace_saved, job, &failure,
                              why, sizeof why) == 0)
        return;
    close(job->fd);
    job->fd = -1;
    drop_context_file(job, name);
    if (failure == FAILURE_CONFLICT) { /* it became busy between the steps */
        fail_job(job, failure, why);
        return;
    }
    json_object_set_new(entry_of(job), "namespace_not_saved", json_string(why));
    context_taken(job);
}

static void on_checkpointed(void *arg, const kernel_checkpoint_result *result, failure_kind failure,
                            const char *why)
{
    snapshot_job *job = arg;
    job->checkpointing = false;
    char name[64];
    snprintf(name, sizeof name, "context-%zu.image", job->at);
    close(job->fd);
    job->fd = -1;
    json_t *entry = entry_of(job);
    if (result) {
        json_object_set_new(entry, "image", json_string(name));
        if (result->report)
            json_object_set_new(entry, "report", json_deep_copy(result->report));
        job->memory_bytes += result->image_bytes;
    } else {
        drop_context_file(job, name);
        if (failure == FAILURE_EXHAUSTED) {
            fail_job(job, failure, why);
            return;
        }
        json_object_set_new(entry, "image_not_taken", json_string(why));
    }
    if (!job->contexts[job->at] || !job->b) {
        fail_job(job, FAILURE_CONFLICT, "the sandbox was deleted while it was snapshotted");
        return;
    }
    save_namespace(job);
}

static bool is_python(const kernel *k)
{
    const char *language = kernel_spec(k)->language;
    return language && strcasecmp(language, "python") == 0;
}

static void copy_workspace_then_commit(snapshot_job *job);

/* The context at job->at: its image, then its namespace; a language whose state cannot be
   imaged is restarted at a restore (its files are in the workspace copy). */
static void take_context(snapshot_job *job)
{
    if (!job->b) {
        fail_job(job, FAILURE_CONFLICT, "the sandbox was deleted while it was snapshotted");
        return;
    }
    if (job->at == job->count) {
        copy_workspace_then_commit(job);
        return;
    }
    kernel *k = job->contexts[job->at];
    if (!k) {
        fail_job(job, FAILURE_CONFLICT, "a context was deleted while the sandbox was snapshotted");
        return;
    }
    if (!is_python(k)) {
        context_taken(job);
        return;
    }
    char name[64], why[512];
    failure_kind failure;
    job->fd = open_context_file(job, "image", name, sizeof name);
    if (job->fd < 0)
        return;
    if (kernel_checkpoint(k, job->fd, true, on_checkpointed, job, &failure, why, sizeof why) == 0) {
        job->checkpointing = true;
        return;
    }
    close(job->fd);
    job->fd = -1;
    drop_context_file(job, name);
    if (failure == FAILURE_CONFLICT) {
        fail_job(job, failure, why);
        return;
    }
    json_object_set_new(entry_of(job), "image_not_taken", json_string(why));
    save_namespace(job);
}

/* ---- the files and the description ---- */

/* The sandbox's settings, as a restore creates its copy: template, limits (as a request gives
   them), env, metadata, TTL, network and its egress lists. */
static json_t *sandbox_settings(box *b)
{
    kernel *primary = box_default_kernel(b);
    json_t *allow_out = NULL, *deny_out = NULL;
    kernel_egress_lists(primary, &allow_out, &deny_out);
    json_t *model = box_model(b);
    json_t *settings =
        json_pack("{s:s, s:s, s:o, s:O, s:O, s:O, s:b}", "id", box_id(b), "template",
                  kernel_spec(primary)->name, "limits", limits_to_json(box_limits(b)), "env",
                  box_env(b), "metadata", json_object_get(model, "metadata"), "timeout_s",
                  json_object_get(model, "timeout_s"), "network", box_limits(b)->network);
    json_decref(model);
    if (allow_out)
        json_object_set(settings, "allowOut", allow_out);
    if (deny_out)
        json_object_set(settings, "denyOut", deny_out);
    if (kernel_working_directory(primary))
        json_object_set_new(settings, "working_directory",
                            json_string(kernel_working_directory(primary)));
    return settings;
}

static json_t *snapshot_model_of(snapshot_job *job, json_t *settings, long long files_bytes)
{
    json_t *contexts = json_array();
    size_t i;
    json_t *entry;
    json_array_foreach(job->entries, i, entry)
    {
        json_t *report = json_object();
        json_t *process = json_object_get(entry, "report");
        json_t *names = json_object_get(entry, "namespace_report");
        if (process)
            json_object_set(report, "process", process);
        if (names)
            json_object_set(report, "namespace", names);
        if (json_object_get(entry, "image_not_taken"))
            json_object_set(report, "process_not_taken", json_object_get(entry, "image_not_taken"));
        json_array_append_new(contexts,
                              json_pack("{s:O, s:O, s:O, s:o}", "context_id",
                                        json_object_get(entry, "context_id"), "language",
                                        json_object_get(entry, "language"), "carried",
                                        json_object_get(entry, "carried"), "report", report));
    }
    char created[ISO_TIME_BUFFER];
    clock_format_iso(clock_wall_us(), created);
    return json_pack("{s:s, s:O, s:s, s:s, s:O, s:O, s:{s:I, s:I, s:I}, s:o, s:b}", "snapshot_id",
                     job->id, "sandbox_id", json_object_get(settings, "id"), "name",
                     job->name ? job->name : job->id, "created_at", created, "metadata",
                     job->metadata, "template", json_object_get(settings, "template"), "bytes",
                     "memory", (json_int_t)job->memory_bytes, "files", (json_int_t)files_bytes,
                     "namespace", (json_int_t)job->namespace_bytes, "contexts", contexts,
                     "hibernation", job->hibernation);
}

/* The workspace copy and the seal read and write whole files: they run on a worker thread
   (common/worker.h), each with what it needs copied into job->files, while the loop serves the
   other sandboxes. The loop holds on to nothing the thread uses; the thread, to nothing of the
   loop's (the box may be deleted meanwhile: job->b is then NULL and the snapshot fails). */

static void fail_files(snapshot_job *job, const char *why)
{
    bool full = job->files.error == ENOSPC;
    char reason[800];
    snprintf(reason, sizeof reason, "%s%s", full ? "no space left on the daemon's disk: " : "",
             why);
    fail_job(job, full ? FAILURE_EXHAUSTED : FAILURE_INTERNAL, reason);
}

static void seal_snapshot(void *arg) /* on a worker thread */
{
    snapshot_job *job = arg;
    snapshot_files *f = &job->files;
    f->rc = snapshot_store_commit(job->id, f->description, f->why, sizeof f->why);
    f->error = f->rc < 0 ? errno : 0;
}

static void snapshot_sealed(void *arg)
{
    snapshot_job *job = arg;
    if (job->files.rc < 0) {
        fail_job(job, job->files.error == ENOSPC ? FAILURE_EXHAUSTED : FAILURE_INTERNAL,
                 job->files.why);
        return;
    }
    /* Sealed and renamed: the snapshot stands, whether or not its sandbox still does. */
    log_info("snapshot %s taken", job->id);
    job->done(job->arg, job->files.model, FAILURE_INTERNAL, NULL);
    forget_job(job);
}

static void copy_workspace(void *arg) /* on a worker thread */
{
    snapshot_job *job = arg;
    snapshot_files *f = &job->files;
    f->rc = volume_copy(f->kind, f->image, f->mount, f->to, &f->stats, f->why, sizeof f->why);
    f->error = f->rc < 0 ? errno : 0;
}

/* The files are copied: snapshot.json is made here, on the loop (the sandbox's settings are
   the loop's objects), and handed to the thread as text to seal. */
static void workspace_copied(void *arg)
{
    snapshot_job *job = arg;
    snapshot_files *f = &job->files;
    if (f->rc < 0) {
        fail_files(job, f->why);
        return;
    }
    if (!job->b) {
        fail_job(job, FAILURE_CONFLICT, "the sandbox was deleted while it was snapshotted");
        return;
    }
    log_info("sandbox %s: workspace copied for snapshot %s (%lld bytes%s, %lld us)", box_id(job->b),
             job->id, f->stats.bytes, f->stats.reflinked ? ", reflinked" : "", f->stats.elapsed_us);
    json_t *settings = sandbox_settings(job->b);
    f->model = snapshot_model_of(job, settings, f->stats.bytes);
    json_t *description =
        json_pack("{s:i, s:O, s:o, s:O, s:{s:s, s:s, s:I}}", "version", 1, "model", f->model,
                  "sandbox", settings, "contexts", job->entries, "workspace", "kind",
                  f->kind == VOLUME_EXT4 ? "ext4" : "tmpfs", "file",
                  f->kind == VOLUME_EXT4 ? "workspace.img" : "workspace", "copy_us",
                  (json_int_t)f->stats.elapsed_us);
    f->description = json_dumps(description, JSON_INDENT(1) | JSON_SORT_KEYS);
    json_decref(description);
    if (!f->description)
        die("out of memory");
    worker_submit(seal_snapshot, snapshot_sealed, job);
}

static void copy_workspace_then_commit(snapshot_job *job)
{
    kernel *primary = box_default_kernel(job->b);
    snapshot_files *f = &job->files;
    const char *image;
    if (!manager_workspace_volume(primary, &f->kind, &image)) {
        fail_job(job, FAILURE_CONFLICT, "the sandbox has no workspace volume to copy");
        return;
    }
    snprintf(f->image, sizeof f->image, "%s", image ? image : "");
    snprintf(f->mount, sizeof f->mount, "%s", kernel_workspace(primary));
    snprintf(f->to, sizeof f->to, "%s/%s", job->dir,
             f->kind == VOLUME_EXT4 ? "workspace.img" : "workspace");
    worker_submit(copy_workspace, workspace_copied, job);
}

/* ---- starting one ---- */

static void start_job(void *arg)
{
    take_context(arg);
}

/* Can b be snapshotted now? Its contexts gathered into the job, the default one first. */
static int gather_contexts(box *b, snapshot_job *job, failure_kind *failure, char *why,
                           size_t why_size)
{
    *failure = FAILURE_CONFLICT;
    switch (box_get_state(b)) {
    case BOX_DEAD: box_describe_death(b, why, why_size); return -1;
    case BOX_PAUSED:
        snprintf(why, why_size,
                 "sandbox %s is paused: resume it (POST /v1/sandboxes/%s/resume), "
                 "then snapshot it",
                 box_id(b), box_id(b));
        return -1;
    case BOX_HIBERNATED:
        snprintf(why, why_size, "sandbox %s is hibernated: its snapshot %s holds its state already",
                 box_id(b), box_hibernation_snapshot(b));
        return -1;
    case BOX_RUNNING: break;
    }
    json_t *contexts = box_contexts_model(b);
    size_t i;
    json_t *context;
    json_array_foreach(contexts, i, context)
    {
        const char *id = json_string_value(json_object_get(context, "id"));
        kernel *k = box_find_context(b, id);
        const char *state = k ? kernel_state_name(kernel_get_state(k)) : "gone";
        if (job->count == SNAPSHOT_MAX_CONTEXTS) {
            snprintf(why, why_size,
                     "sandbox %s has more than %d contexts: delete some, then "
                     "snapshot it",
                     box_id(b), SNAPSHOT_MAX_CONTEXTS);
            json_decref(contexts);
            return -1;
        }
        if (!k || kernel_get_state(k) != KERNEL_IDLE) {
            snprintf(why, why_size,
                     "context %s of sandbox %s is %s: wait until it is idle (or "
                     "interrupt it), then snapshot the sandbox",
                     id, box_id(b), state);
            json_decref(contexts);
            return -1;
        }
        job->contexts[job->count++] = k;
        json_array_append_new(job->entries,
                              json_pack("{s:s, s:O, s:s, s:O, s:b}", "context_id", id, "language",
                                        json_object_get(context, "language"), "kernelspec",
                                        kernel_spec(k)->name, "cwd",
                                        json_object_get(context, "cwd"), "default", i == 0));
    }
    json_decref(contexts);
    return 0;
}

int snapshot_take(box *b, const char *name, json_t *metadata, bool hibernation, snapshot_done done,
                  void *arg, failure_kind *failure, char *why, size_t why_size)
{
    snapshot_job *job = calloc(1, sizeof *job);
    if (!job)
        die("out of memory");
    job->fd = -1;
    job->entries = json_array();
    if (gather_contexts(b, job, failure, why, why_size) < 0) {
        forget_job(job);
        return -1;
    }
    id_uuid4(job->id);
    if (snapshot_store_begin(job->id, job->dir, sizeof job->dir, why, why_size) < 0) {
        *failure = errno == ENOSPC ? FAILURE_EXHAUSTED : FAILURE_INTERNAL;
        forget_job(job);
        return -1;
    }
    job->b = b;
    job->name = name ? strdup(name) : NULL;
    job->metadata = metadata ? json_deep_copy(metadata) : json_object();
    job->hibernation = hibernation;
    job->done = done;
    job->arg = arg;
    job->next = jobs;
    jobs = job;
    loop_defer(start_job, job); /* `done` never before this returns */
    return 0;
}

int snapshot_create(box *b, const char *name, json_t *metadata, snapshot_done done, void *arg,
                    failure_kind *failure, char *why, size_t why_size)
{
    if (name && (strlen(name) == 0 || strlen(name) > 200)) {
        *failure = FAILURE_INVALID;
        snprintf(why, why_size, "'name' must be 1 to 200 bytes");
        return -1;
    }
    return snapshot_take(b, name, metadata, false, done, arg, failure, why, why_size);
}

/* ---- the gone hooks: a job lets go of what went away ---- */

static void on_kernel_gone(kernel *k)
{
    for (snapshot_job *job = jobs, *next; job; job = next) {
        next = job->next;
        for (size_t i = 0; i < job->count; i++)
            if (job->contexts[i] == k)
                job->contexts[i] = NULL;
        /* Its checkpoint ends without an answer (its pages may still be copied on a worker
           thread, into a descriptor of the checkpoint's own): the snapshot fails now, so that
           its request is answered, also when the daemon shuts down. */
        if (job->checkpointing && job->at < job->count && !job->contexts[job->at])
            fail_job(job, FAILURE_CONFLICT,
                     "a context was deleted while the sandbox was snapshotted");
    }
}

static void on_box_gone(box *b)
{
    for (snapshot_job *job = jobs; job; job = job->next)
        if (job->b == b)
            job->b = NULL;
}

/* ---- the store's verbs ---- */

typedef struct listing {
    const char *sandbox_id;
    json_t *list;
} listing;

static void add_to_listing(const char *id, json_t *description, void *arg)
{
    listing *l = arg;
    json_t *model = json_object_get(description, "model");
    const char *sandbox = json_string_value(json_object_get(model, "sandbox_id"));
    if (model && (!l->sandbox_id || (sandbox && strcmp(sandbox, l->sandbox_id) == 0)))
        json_array_append(l->list, model);
}

static int by_creation(const void *a, const void *b)
{
    const char *x = json_string_value(json_object_get(*(json_t *const *)a, "created_at"));
    const char *y = json_string_value(json_object_get(*(json_t *const *)b, "created_at"));
    return strcmp(x ? x : "", y ? y : "");
}

json_t *snapshot_list(const char *sandbox_id)
{
    listing l = {.sandbox_id = sandbox_id, .list = json_array()};
    snapshot_store_each(add_to_listing, &l);
    size_t count = json_array_size(l.list);
    json_t **models = calloc(count ? count : 1, sizeof *models);
    if (!models)
        die("out of memory");
    for (size_t i = 0; i < count; i++)
        models[i] = json_incref(json_array_get(l.list, i));
    qsort(models, count, sizeof *models, by_creation); /* oldest first */
    json_t *sorted = json_array();
    for (size_t i = 0; i < count; i++)
        json_array_append_new(sorted, models[i]);
    free(models);
    json_decref(l.list);
    return sorted;
}

json_t *snapshot_find(const char *snapshot_id, failure_kind *failure, char *why, size_t why_size)
{
    json_t *description = snapshot_store_load(snapshot_id, false, failure, why, why_size);
    json_t *model = json_incref(json_object_get(description, "model"));
    json_decref(description);
    return model;
}

json_t *snapshot_get(const char *snapshot_id)
{
    failure_kind failure;
    char why[300];
    return snapshot_find(snapshot_id, &failure, why, sizeof why);
}

int snapshot_delete(const char *snapshot_id, failure_kind *failure, char *why, size_t why_size)
{
    for (size_t i = 0; i < manager_count(); i++) {
        box *b = kernel_box(manager_at(i));
        const char *needed = b ? box_hibernation_snapshot(b) : NULL;
        if (needed && strcmp(needed, snapshot_id) == 0) {
            *failure = FAILURE_CONFLICT;
            snprintf(why, why_size,
                     "snapshot %s holds hibernated sandbox %s: wake the sandbox "
                     "(POST /v1/sandboxes/%s/resume) or delete it first",
                     snapshot_id, box_id(b), box_id(b));
            return -1;
        }
    }
    if (snapshot_store_remove(snapshot_id) < 0) {
        *failure = errno == ENOENT ? FAILURE_NOT_FOUND : FAILURE_INTERNAL;
        snprintf(why, why_size,
                 errno == ENOENT ? "snapshot %.64s does not exist"
                                 : "cannot delete snapshot %.64s: %s",
                 snapshot_id, strerror(errno));
        return -1;
    }
    return 0;
}

int snapshots_init(const char *data_dir, char *why, size_t why_size)
{
    if (snapshot_store_init(data_dir, why, why_size) < 0)
        return -1;
    box_add_kernel_gone_hook(on_kernel_gone);
    box_add_box_gone_hook(on_box_gone);
    return 0;
}
