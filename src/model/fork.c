/* fork — box_fork (snapshots.h): N new sandboxes, each a copy of a running sandbox's live
 * Python process, isolated from it and from each other.
 *
 * The source's default context is imaged into a memfd (kernel_checkpoint, a diff image against
 * the live zygote: only the pages the kernel changed since it was cloned), which is sealed and
 * handed to N restores (manager_create_seeded): each maps the same image MAP_PRIVATE, so the
 * forks share its pages copy-on-write until they write them. The source stands still only while
 * its memory is read; its workspace's files are then copied into each fork's new workspace
 * (manager_create_seeded: volume_copy_tree, links never followed), as they are at that moment.
 * Nothing is written to the daemon's disk but the forks' own workspaces. Only the default
 * context's process is carried: the source's other contexts (other languages, or Python started
 * by exec inside the running sandbox: no zygote clone to image) start afresh in each fork,
 * "restarted", with their files kept. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "common/log.h"
#include "common/loop.h"
#include "kernel/checkpoint.h"
#include "kernel/kernelspec.h"
#include "model/box.h"
#include "model/manager.h"
#include "model/snapshots.h"
#include "model/ttl.h"
#include "sandbox/limits.h"

#define MAX_FORKS 16

typedef struct fork_job {
    char source_id[64];
    char template_name[128];
    json_t *limits;              /* the source's, as a request's "limits", owned */
    bool network;
    int count;
    int waiting;                 /* forks not started yet */
    int image_fd;
    json_t *options;             /* {"timeout", "metadata"}, owned */
    json_t *env;                 /* the source's variables, owned */
    json_t *report;              /* the source's checkpoint report, owned */
    json_t *other_contexts;      /* the source's contexts but the default, as box_contexts_model */
    char fork_ids[MAX_FORKS][64]; /* looked up again at the end: a fork may be deleted meanwhile */
    json_t *errors[MAX_FORKS];   /* {"failure": kind, "message"} for a fork that did not start */
    snapshot_done done;
    void *arg;
    struct fork_job *next_imaging; /* while its source is being imaged: imaging_jobs */
} fork_job;

/* Jobs whose source is being imaged: a source deleted meanwhile ends them (its checkpoint ends
   without a word: kernel_checkpoint_forget). */
static fork_job *imaging_jobs;
static bool gone_hook_added;

static void stop_imaging(fork_job *job)
{
    for (fork_job **at = &imaging_jobs; *at; at = &(*at)->next_imaging)
        if (*at == job) {
            *at = job->next_imaging;
            return;
        }
}

static void free_job(fork_job *job)
{
    if (job->image_fd >= 0)
        close(job->image_fd);
    json_decref(job->options);
    json_decref(job->env);
    json_decref(job->report);
    json_decref(job->limits);
    json_decref(job->other_contexts);
    for (int i = 0; i < job->count; i++)
        json_decref(job->errors[i]);
    free(job);
}

static json_t *error_entry(failure_kind failure, const char *message)
{
    return json_pack("{s:{s:i, s:s}}", "error", "failure", (int)failure, "message", message);
}

/* The source's other contexts, started again in fork b: their entries for "restore". */
static void restart_other_contexts(fork_job *job, box *b, json_t *contexts)
{
    size_t i;
    json_t *context;
    json_array_foreach(job->other_contexts, i, context) {
        const char *name = json_string_value(json_object_get(context, "kernelspec"));
        const kernelspec *spec = name ? kernelspec_find(name) : NULL;
        failure_kind failure;
        char why[300] = "its kernelspec is gone";
        kernel *k = spec ? box_add_context(b, spec, json_string_value(json_object_get(context, "cwd")),
                                           &failure, why, sizeof why)
                         : NULL;
        json_t *entry = json_pack("{s:O, s:s, s:{s:s}}", "language",
                                  json_object_get(context, "language"), "carried", "restarted",
                                  "report", "why",
                                  k ? "only a zygote's clone can be imaged: a new kernel, the files kept"
                                    : why);
        if (k)
            json_object_set_new(entry, "context_id", json_string(kernel_id(k)));
        json_array_append_new(contexts, entry);
    }
}

static json_t *fork_entry(fork_job *job, int i)
{
    if (job->errors[i])
        return json_incref(job->errors[i]);
    kernel *k = manager_find(job->fork_ids[i]);
    if (!k)
        return error_entry(FAILURE_CONFLICT, "the fork was deleted before it started");
    if (kernel_get_state(k) == KERNEL_DEAD) {
        char message[300];
        snprintf(message, sizeof message, "the fork could not start: %s", kernel_death_reason(k));
        manager_delete(k);
        return error_entry(FAILURE_INTERNAL, message);
    }
    box *b = box_of(k);
    json_t *report = kernel_restore_report(k);
    json_t *contexts = json_pack("[{s:s, s:s, s:s, s:O}]", "context_id", box_id(b), "language",
                                 "python", "carried", "process", "report",
                                 report ? report : job->report);
    restart_other_contexts(job, b, contexts);
    json_t *model = box_model(b);
    json_object_set_new(model, "restore", json_pack("{s:o}", "contexts", contexts));
    return json_pack("{s:o}", "sandbox", model);
}

static void finish_job(void *arg)
{
    fork_job *job = arg;
    json_t *result = json_array();
    for (int i = 0; i < job->count; i++)
        json_array_append_new(result, fork_entry(job, i));
    job->done(job->arg, result, FAILURE_INTERNAL, NULL);
    json_decref(result);
    free_job(job);
}

/* One fork left "starting" (ready, dead, or deleted): the answer goes once all have. */
static void on_one_started(void *arg)
{
    fork_job *job = arg;
    if (--job->waiting == 0)
        loop_defer(finish_job, job); /* not from inside the kernel's message handling */
}

/* The source's limits as a creation asks for them (sandbox/limits.h's names). */
static json_t *limits_request(const sandbox_limits *limits)
{
    static const char *const names[][2] = {
        {"memory_bytes", "memory"}, {"pids", "pids"},             {"cpus", "cpus"},
        {"disk_bytes", "disk"},     {"open_files", "open_files"}, {"timeout_s", "timeout"},
        {"output_bytes", "output"},
    };
    json_t *saved = limits_to_json(limits), *request = json_object();
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        json_t *value = json_object_get(saved, names[i][0]);
        if (json_number_value(value) > 0)
            json_object_set(request, names[i][1], value);
    }
    json_decref(saved);
    return request;
}

/* The image is taken: the forks start from it, all at once, each with a copy of the source's
   files as they are now. */
static void start_forks(fork_job *job)
{
    box *source = box_find(job->source_id);
    const char *files = source ? kernel_workspace(box_default_kernel(source)) : NULL;
    for (int i = 0; i < job->count; i++) {
        failure_kind failure = FAILURE_CONFLICT;
        char why[512] = "the source sandbox is gone";
        manager_seed seed = {.workspace_from = files, .restore_image_fd = job->image_fd};
        kernel *k = source ? manager_create_seeded(job->template_name, job->env, job->limits,
                                                   job->network ? json_true() : NULL, &seed,
                                                   &failure, why, sizeof why)
                           : NULL;
        if (!k) {
            job->errors[i] = error_entry(failure, why);
            continue;
        }
        snprintf(job->fork_ids[i], sizeof job->fork_ids[i], "%s", kernel_id(k));
        box *b = box_of(k);
        json_t *timeout = json_object_get(job->options, "timeout");
        box_configure(b, json_object_get(job->options, "metadata"), job->env,
                      json_is_integer(timeout) ? (int)json_integer_value(timeout) : 300);
        if (box_when_started(k, on_one_started, job))
            job->waiting++;
    }
    /* Every restore has its own copy of the descriptor now (kernel_start dups it). */
    close(job->image_fd);
    job->image_fd = -1;
    if (job->waiting == 0)
        loop_defer(finish_job, job);
}

static void on_imaged(void *arg, const kernel_checkpoint_result *result, failure_kind failure,
                      const char *why)
{
    fork_job *job = arg;
    stop_imaging(job);
    if (!result || !box_find(job->source_id)) {
        char message[600];
        snprintf(message, sizeof message, "sandbox %s cannot be forked: its kernel %s",
                 job->source_id, why ? why : "is gone");
        job->done(job->arg, NULL, failure, message);
        free_job(job);
        return;
    }
    job->report = json_incref(result->report);
    log_info("sandbox %s: imaged for %d fork(s): %lld KiB in %.1f ms", job->source_id, job->count,
             result->image_bytes >> 10, result->paused_ms);
    /* The image is the forks' and no one else's: nothing may change it from here on. */
    fcntl(job->image_fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL);
    start_forks(job);
}

static void on_box_gone(box *b)
{
    for (fork_job *job = imaging_jobs, *next; job; job = next) {
        next = job->next_imaging;
        if (strcmp(job->source_id, box_id(b)) != 0)
            continue;
        stop_imaging(job);
        char message[200];
        snprintf(message, sizeof message, "sandbox %s was deleted while it was being forked",
                 job->source_id);
        job->done(job->arg, NULL, FAILURE_CONFLICT, message);
        free_job(job);
    }
}

int box_fork(box *b, int count, json_t *options, snapshot_done done, void *arg,
             failure_kind *failure, char *why, size_t why_size)
{
    if (!gone_hook_added) {
        box_add_box_gone_hook(on_box_gone);
        gone_hook_added = true;
    }
    if (count < 1 || count > MAX_FORKS) {
        *failure = FAILURE_INVALID;
        snprintf(why, why_size, "'count' must be 1 to %d", MAX_FORKS);
        return -1;
    }
    if (box_get_state(b) != BOX_RUNNING) {
        *failure = FAILURE_CONFLICT;
        snprintf(why, why_size, "sandbox %s is %s: %s", box_id(b), box_state_name(box_get_state(b)),
                 box_get_state(b) == BOX_PAUSED ? "resume it, then fork it"
                                                : "a dead sandbox cannot be forked");
        return -1;
    }
    fork_job *job = calloc(1, sizeof *job);
    if (!job) {
        *failure = FAILURE_INTERNAL;
        snprintf(why, why_size, "out of memory");
        return -1;
    }
    snprintf(job->source_id, sizeof job->source_id, "%s", box_id(b));
    snprintf(job->template_name, sizeof job->template_name, "%s",
             kernel_spec(box_default_kernel(b))->name);
    job->limits = limits_request(box_limits(b));
    job->network = box_limits(b)->network;
    job->other_contexts = box_contexts_model(b);
    json_array_remove(job->other_contexts, 0); /* the default context, first: imaged */
    job->count = count;
    job->done = done;
    job->arg = arg;
    job->options = options ? json_incref(options) : json_object();
    job->env = json_incref(box_env(b));
    job->image_fd = memfd_create("cellbox-fork-image", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (job->image_fd < 0) {
        *failure = FAILURE_INTERNAL;
        snprintf(why, why_size, "cannot create the fork's image: %s", strerror(errno));
        free_job(job);
        return -1;
    }
    char reason[400];
    if (kernel_checkpoint(box_default_kernel(b), job->image_fd, false, on_imaged, job, failure,
                          reason, sizeof reason) < 0) {
        snprintf(why, why_size, "sandbox %s cannot be forked: its kernel %s", box_id(b), reason);
        free_job(job);
        return -1;
    }
    job->next_imaging = imaging_jobs;
    imaging_jobs = job;
    return 0;
}
