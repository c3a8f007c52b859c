/* fork — box_fork (snapshots.h): N new sandboxes, each a copy of a running sandbox's live
 * Python process, isolated from it and from each other.
 *
 * The source's default context is imaged (kernel_checkpoint: a diff image against the live
 * zygote, only the pages the kernel changed since it was cloned) into a file in memory on 2 MiB
 * pages (sandbox/image_memory.h), and N restores map it (manager_create_seeded), each
 * MAP_PRIVATE: the forks share its pages copy-on-write until they write them.
 *
 * The two run side by side: the forks' sandboxes (uid, cgroup, a copy of the source's files,
 * links never followed) and their zygote clones (lockdown, the kernel process, the restorer's
 * planner) are made while the source's memory is copied, from a read-only descriptor of the
 * image; each restorer waits for the image to be whole (its write lock) before it reads a byte.
 * The files are copied as the source's idle kernel left them: the kernel stands still from the
 * request until its memory is read. An imaging that fails deletes the forks it started. Nothing
 * is written to the daemon's disk but the forks' own workspaces. Only the default context's
 * process is carried: the source's other contexts (other languages, or Python started by exec
 * inside the running sandbox: no zygote clone to image) start afresh in each fork, "restarted",
 * with their files kept. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/log.h"
#include "common/loop.h"
#include "kernel/checkpoint.h"
#include "kernel/kernelspec.h"
#include "model/box.h"
#include "model/manager.h"
#include "model/snapshots.h"
#include "model/ttl.h"
#include "sandbox/image_memory.h"
#include "sandbox/limits.h"

#define MAX_FORKS 16

struct fork_job;

/* One fork's start, timed: its own callback argument, so the job knows which fork started. */
typedef struct fork_slot {
    struct fork_job *job;
    int64_t created_us;          /* its sandbox made and the zygote asked (0: did not start) */
    int64_t started_us;          /* its kernel ready (or dead, or deleted) */
} fork_slot;

typedef struct fork_job {
    char source_id[64];
    char template_name[128];
    json_t *limits;              /* the source's, as a request's "limits", owned */
    bool network;
    int count;
    int waiting;                 /* forks not started yet */
    int image_writer;            /* the image being written, write-locked; -1 once whole */
    int image_reader;            /* read-only, given to the restores; -1 once they have it */
    bool imaged;                 /* the imaging ended (well or not): no on_imaged to come */
    bool finishing;              /* finish_job is deferred: nothing else may defer it */
    failure_kind failure;        /* with `failed`: the answer's */
    bool failed;                 /* the imaging failed: the forks started are deleted */
    char failure_message[768];
    json_t *options;             /* {"timeout", "metadata"}, owned */
    json_t *env;                 /* the source's variables, owned */
    json_t *report;              /* the source's checkpoint report, owned */
    json_t *other_contexts;      /* the source's contexts but the default, as box_contexts_model */
    char fork_ids[MAX_FORKS][64]; /* looked up again at the end: a fork may be deleted meanwhile */
    json_t *errors[MAX_FORKS];   /* {"failure": kind, "message"} for a fork that did not start */
    fork_slot slots[MAX_FORKS];
    int64_t asked_us;            /* the request came (clock_monotonic_us) */
    int64_t imaged_us;           /* the source's image was taken */
    int64_t forks_asked_us;      /* the forks' starts begin */
    snapshot_done done;
    void *arg;
    struct fork_job *next_imaging; /* while its source is being imaged: imaging_jobs */
} fork_job;

/* Jobs whose source is being imaged: a source deleted meanwhile fails them, their forks deleted
   (its checkpoint ends without a word: kernel_checkpoint's destroy hook). */
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
    if (job->image_writer >= 0)
        close(job->image_writer);
    if (job->image_reader >= 0)
        close(job->image_reader);
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

static double elapsed_ms(int64_t from_us, int64_t to_us)
{
    return from_us && to_us > from_us ? (double)((to_us - from_us) / 100) / 10.0 : 0.0;
}

/* Where fork i's time went: "image" the source imaged (the request sent to the kernel, its
   answer, its memory copied), "sandbox" this fork's sandbox made (uid, cgroup, workspace and
   the source's files copied into it, the zygote asked: the forks are made one after another,
   so it includes the forks made before it), "restore" from there to its kernel ready (the
   zygote's clone, its lockdown, the restorer, the kernel's first answer), "total" the request
   to its kernel ready. */
static json_t *fork_timings(const fork_job *job, int i)
{
    const fork_slot *slot = &job->slots[i];
    return json_pack("{s:f, s:f, s:f, s:f}", "image", elapsed_ms(job->asked_us, job->imaged_us),
                     "sandbox", elapsed_ms(job->forks_asked_us, slot->created_us), "restore",
                     elapsed_ms(slot->created_us, slot->started_us), "total",
                     elapsed_ms(job->asked_us, slot->started_us));
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
    json_object_set_new(model, "restore", json_pack("{s:o, s:o}", "contexts", contexts,
                                                    "timings_ms", fork_timings(job, i)));
    return json_pack("{s:o}", "sandbox", model);
}

/* A failed imaging: its forks go (their restorers still wait for the image: deleted first, then
   the writer closed by free_job) and the answer is the failure. */
static void fail_job(fork_job *job)
{
    for (int i = 0; i < job->count; i++) {
        kernel *k = job->fork_ids[i][0] ? manager_find(job->fork_ids[i]) : NULL;
        if (k)
            manager_delete(k); /* on_one_started runs: finishing already */
    }
    job->done(job->arg, NULL, job->failure, job->failure_message);
    free_job(job);
}

static void finish_job(void *arg)
{
    fork_job *job = arg;
    if (job->failed) {
        fail_job(job);
        return;
    }
    json_t *result = json_array();
    for (int i = 0; i < job->count; i++)
        json_array_append_new(result, fork_entry(job, i));
    job->done(job->arg, result, FAILURE_INTERNAL, NULL);
    json_decref(result);
    free_job(job);
}

/* One fork left "starting" (ready, dead, or deleted): the answer goes once all have. */
/* The answer goes once the imaging has ended and every fork has left "starting"; never from
   inside a kernel's message handling. */
static void finish_when_done(fork_job *job)
{
    if (job->finishing || !job->imaged || (job->waiting > 0 && !job->failed))
        return;
    job->finishing = true;
    loop_defer(finish_job, job);
}

/* One fork left "starting" (ready, dead, or deleted). */
static void on_one_started(void *arg)
{
    fork_slot *slot = arg;
    fork_job *job = slot->job;
    slot->started_us = clock_monotonic_us();
    job->waiting--;
    finish_when_done(job);
}

/* The imaging failed or its source went: the answer says so, the forks go. */
static void fail_imaging(fork_job *job, failure_kind failure, const char *message)
{
    stop_imaging(job);
    job->imaged = true;
    job->failed = true;
    job->failure = failure;
    snprintf(job->failure_message, sizeof job->failure_message, "%s", message);
    finish_when_done(job);
}

/* The forks start from the image being taken, all at once, each with a copy of the source's
   files as its idle kernel left them; their restorers wait for the image. */
static void start_forks(fork_job *job, box *source)
{
    const char *files = kernel_workspace(box_default_kernel(source));
    job->forks_asked_us = clock_monotonic_us();
    for (int i = 0; i < job->count; i++) {
        failure_kind failure = FAILURE_CONFLICT;
        char why[512];
        manager_seed seed = {.workspace_from = files, .restore_image_fd = job->image_reader};
        kernel *k = manager_create_seeded(job->template_name, job->env, job->limits,
                                          job->network ? json_true() : NULL, &seed, &failure, why,
                                          sizeof why);
        if (!k) {
            job->errors[i] = error_entry(failure, why);
            continue;
        }
        snprintf(job->fork_ids[i], sizeof job->fork_ids[i], "%s", kernel_id(k));
        box *b = box_of(k);
        json_t *timeout = json_object_get(job->options, "timeout");
        box_configure(b, json_object_get(job->options, "metadata"), job->env,
                      json_is_integer(timeout) ? (int)json_integer_value(timeout) : 300);
        job->slots[i] = (fork_slot){.job = job, .created_us = clock_monotonic_us()};
        if (box_when_started(k, on_one_started, &job->slots[i]))
            job->waiting++;
    }
    /* Every restore has its own copy of the descriptor now (kernel_start dups it). */
    close(job->image_reader);
    job->image_reader = -1;
}

static void on_imaged(void *arg, const kernel_checkpoint_result *result, failure_kind failure,
                      const char *why)
{
    fork_job *job = arg;
    job->imaged_us = clock_monotonic_us();
    char message[700];
    if (!result || !box_find(job->source_id)) {
        snprintf(message, sizeof message, "sandbox %s cannot be forked: its kernel %s",
                 job->source_id, why ? why : "is gone");
        fail_imaging(job, failure, message);
        return;
    }
    job->report = json_incref(result->report);
    log_info("sandbox %s: imaged for %d fork(s): %lld KiB in %.1f ms", job->source_id, job->count,
             result->image_bytes >> 10, result->paused_ms);
    /* The image is the forks' and no one else's: nothing may change it from here on, and the
       restorers waiting for it go on. */
    char reason[300];
    int finished = image_memory_finish(job->image_writer, reason, sizeof reason);
    job->image_writer = -1;
    if (finished < 0) {
        snprintf(message, sizeof message, "sandbox %s cannot be forked: %s", job->source_id,
                 reason);
        fail_imaging(job, FAILURE_INTERNAL, message);
        return;
    }
    stop_imaging(job);
    job->imaged = true;
    finish_when_done(job);
}

static void on_box_gone(box *b)
{
    for (fork_job *job = imaging_jobs, *next; job; job = next) {
        next = job->next_imaging;
        if (strcmp(job->source_id, box_id(b)) != 0)
            continue;
        char message[200];
        snprintf(message, sizeof message, "sandbox %s was deleted while it was being forked",
                 job->source_id);
        fail_imaging(job, FAILURE_CONFLICT, message);
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
    job->limits = limits_to_request(box_limits(b));
    job->network = box_limits(b)->network;
    job->other_contexts = box_contexts_model(b);
    json_array_remove(job->other_contexts, 0); /* the default context, first: imaged */
    job->asked_us = clock_monotonic_us();
    job->count = count;
    job->done = done;
    job->arg = arg;
    job->options = options ? json_incref(options) : json_object();
    job->env = json_incref(box_env(b));
    job->image_reader = -1;
    job->image_writer = image_memory_create(&job->image_reader, why, why_size);
    if (job->image_writer < 0) {
        *failure = FAILURE_INTERNAL;
        free_job(job);
        return -1;
    }
    char reason[400];
    if (kernel_checkpoint(box_default_kernel(b), job->image_writer, false, on_imaged, job, failure,
                          reason, sizeof reason) < 0) {
        snprintf(why, why_size, "sandbox %s cannot be forked: its kernel %s", box_id(b), reason);
        free_job(job);
        return -1;
    }
    job->next_imaging = imaging_jobs;
    imaging_jobs = job;
    /* The kernel answers the checkpoint request from the loop, after this returns: the forks'
       sandboxes are being made by then. */
    start_forks(job, b);
    return 0;
}
