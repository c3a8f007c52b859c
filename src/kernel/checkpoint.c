/* checkpoint — see checkpoint.h. The daemon's half of the checkpoint point's exchange
 * (docs/kernel-protocol.md, "Checkpoints"): "checkpoint" → the kernel's "checkpoint_ready" (or
 * "checkpoint_refused") → process_image_capture of its process → "checkpoint_done". Requests
 * for the kernel that come meanwhile are held (kernel_hold_requests): the kernel reads its
 * channel in C while it waits, and must see nothing but "checkpoint_done". */
#include "kernel/checkpoint.h"

#include <errno.h>
#include <limits.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/log.h"
#include "common/loop.h"
#include "common/worker.h"
#include "kernel/zygote.h"
#include "sandbox/process_image.h"

/* How long a kernel has to reach its checkpoint point: it answers at once when idle. */
#define CHECKPOINT_ANSWER_MS 5000

/* What the worker thread reads and writes for one image: its own copies and descriptor, none
   of the loop's objects. */
typedef struct image_capture {
    pid_t pid, base;           /* the kernel's process; the zygote's for a diff image, or 0 */
    char generation[64];       /* the zygote's "pid:starttime" */
    long long started_at;      /* the process's start time: a pid reused meanwhile is caught */
    long long max_bytes;
    int image_fd;              /* a duplicate of the caller's, closed on the loop afterwards */
    int rc;                    /* the outcome, as process_image_capture returns it */
    process_image_stats stats;
    char why[512];
} image_capture;

typedef struct pending_checkpoint {
    kernel *k;                 /* NULL once destroyed while its pages were being copied */
    int image_fd;
    bool full;
    kernel_checkpoint_done done;
    void *arg;
    loop_timer_id timer;
    int64_t asked_at_ms;
    bool capturing;            /* on the worker thread: freed by capture_done, not before */
    json_t *report;            /* the kernel's report, kept while its pages are copied */
    image_capture capture;
    struct pending_checkpoint *next;
} pending_checkpoint;

static pending_checkpoint *pending;

static pending_checkpoint *find_pending(const kernel *k)
{
    for (pending_checkpoint *p = pending; p; p = p->next)
        if (p->k == k)
            return p;
    return NULL;
}

static void unlink_pending(pending_checkpoint *gone)
{
    for (pending_checkpoint **at = &pending; *at; at = &(*at)->next)
        if (*at == gone) {
            *at = gone->next;
            break;
        }
    if (gone->timer)
        loop_timer_cancel(gone->timer);
}

/* The kernel goes on, whatever happened: "checkpoint_done" releases its checkpoint point (sent
   also after a failure: it may be waiting there), then the requests held meanwhile. */
static void release_kernel(pending_checkpoint *p)
{
    json_t *done = json_pack("{s:s, s:s}", "channel", "cellbox", "type", "checkpoint_done");
    kernel_send_now(p->k, done);
    json_decref(done);
    kernel_hold_requests(p->k, false);
}

static void finish(pending_checkpoint *p, const kernel_checkpoint_result *result,
                   failure_kind failure, const char *why)
{
    unlink_pending(p);
    p->done(p->arg, result, failure, why);
    json_decref(p->report);
    free(p);
}

/* pid 2 of the sandbox: the only child of its pid 1 (cellbox-init), the pid the daemon has. */
static pid_t kernel_process(const kernel *k)
{
    pid_t supervisor = kernel_pid(k);
    char path[96], text[64] = "";
    snprintf(path, sizeof path, "/proc/%d/task/%d/children", (int)supervisor, (int)supervisor);
    FILE *children = fopen(path, "re");
    int pid = 0;
    if (children) {
        if (fgets(text, sizeof text, children))
            pid = atoi(text);
        fclose(children);
    }
    return supervisor > 0 ? pid : 0;
}

static void zygote_generation(pid_t zygote_pid, char *into, size_t size)
{
    snprintf(into, size, "%d:%lld", (int)zygote_pid, kernel_process_start_time(zygote_pid));
}

/* What one image may hold: the sandbox's memory limit, and as much again for the files it maps
   privately (counted whole: a library it loaded, a file it mapped); unlimited memory, 16 GiB. */
static long long image_limit(const kernel *k)
{
    long long memory = kernel_limits(k)->memory_bytes;
    return memory > 0 ? 2 * memory + (256ll << 20) : 16ll << 30;
}

/* The page copy, on a worker thread (common/worker.h): it reads the stopped process and writes
   the image through descriptors and memory of its own, so the loop serves every other sandbox
   meanwhile. The loop reads the outcome once it is done (capture_done). */
static void capture_pages(void *arg)
{
    image_capture *c = &((pending_checkpoint *)arg)->capture; /* of p, that part alone */
    c->rc = process_image_capture_at_most(c->pid, c->base, c->generation, c->image_fd,
                                          c->max_bytes, &c->stats, c->why, sizeof c->why);
}

/* What a failed capture means to the caller: a full disk; the kernel's own state (too large,
   memory shared with another process, its process gone), which the user can change; or the
   host failing us. */
static failure_kind capture_failure(int rc)
{
    if (rc == -ENOSPC)
        return FAILURE_EXHAUSTED;
    if (rc == -EFBIG || rc == -EBUSY || rc == -ESRCH)
        return FAILURE_CONFLICT;
    return FAILURE_INTERNAL;
}

static void capture_done(void *arg)
{
    pending_checkpoint *p = arg;
    image_capture *c = &p->capture;
    close(c->image_fd);
    if (!p->k) { /* destroyed meanwhile: nothing to release, no one to tell */
        json_decref(p->report);
        free(p);
        return;
    }
    release_kernel(p);
    /* A process that died during the copy, its pid taken by another: what was read is not the
       kernel's (and may be a neighbour's), so the image is refused, not kept. */
    if (c->rc == 0 && kernel_process_start_time(c->pid) != c->started_at) {
        c->rc = -ESRCH;
        snprintf(c->why, sizeof c->why, "its process ended while it was imaged");
    }
    if (c->rc < 0) {
        log_warn("kernel %s: checkpoint failed: %s", kernel_id(p->k), c->why);
        finish(p, NULL, capture_failure(c->rc), c->why);
        return;
    }
    kernel_checkpoint_result result = {
        .image_fd = p->image_fd,
        .image_bytes = c->stats.bytes,
        .pages = c->stats.pages,
        .full = p->full,
        .report = p->report,
        .paused_ms = (double)(clock_monotonic_ms() - p->asked_at_ms),
    };
    log_debug("kernel %s: imaged %lld pages in %.0f ms", kernel_id(p->k), c->stats.pages,
              result.paused_ms);
    finish(p, &result, FAILURE_INTERNAL, NULL);
}

static void capture_now(pending_checkpoint *p, json_t *report)
{
    image_capture *c = &p->capture;
    c->pid = kernel_process(p->k);
    c->base = p->full ? 0 : zygote_process(kernel_spec(p->k)->zygote);
    if (c->pid <= 0 || (!p->full && c->base <= 0)) {
        release_kernel(p);
        finish(p, NULL, FAILURE_CONFLICT,
               c->pid <= 0 ? "its process is gone" : "its zygote is not running: a fork needs it");
        return;
    }
    /* Its answer came: the time limit was on that, and its pages take as long as they take. */
    loop_timer_cancel(p->timer);
    p->timer = 0;
    if (c->base > 0)
        zygote_generation(c->base, c->generation, sizeof c->generation);
    c->started_at = kernel_process_start_time(c->pid);
    c->max_bytes = image_limit(p->k);
    /* The worker writes through a descriptor of its own: the caller may close image_fd (its
       job ended) while the copy runs, and that number may be reused for another file. */
    c->image_fd = fcntl(p->image_fd, F_DUPFD_CLOEXEC, 0);
    if (c->image_fd < 0) {
        release_kernel(p);
        finish(p, NULL, FAILURE_INTERNAL, "no descriptor left to write its image");
        return;
    }
    p->report = json_deep_copy(report); /* the frame that carried it is freed after this call */
    p->capturing = true;
    worker_submit(capture_pages, capture_done, p);
}

/* The kernel's "checkpoint_ready" or "checkpoint_refused" frame (kernel.c checked it). */
static void on_checkpoint_frame(kernel *k, const char *channel, json_t *message)
{
    if (strcmp(channel, "cellbox") != 0)
        return;
    pending_checkpoint *p = find_pending(k);
    const char *type = json_string_value(json_object_get(message, "type"));
    if (!p || !type)
        return;
    if (p->capturing) /* a second answer while its pages are copied: nothing more to do */
        return;
    if (strcmp(type, "checkpoint_ready") == 0) {
        capture_now(p, json_object_get(message, "report"));
    } else if (strcmp(type, "checkpoint_refused") == 0) {
        kernel_hold_requests(k, false);
        char why[300];
        snprintf(why, sizeof why, "%s",
                 json_string_value(json_object_get(message, "why")) ?: "the kernel refused");
        finish(p, NULL, FAILURE_CONFLICT, why);
    }
}

static void on_answer_late(void *arg)
{
    pending_checkpoint *p = arg;
    p->timer = 0;
    release_kernel(p);
    char why[300];
    if (kernel_get_state(p->k) == KERNEL_DEAD)
        snprintf(why, sizeof why, "died before its checkpoint point: %s", kernel_death_reason(p->k));
    else
        snprintf(why, sizeof why, "did not reach its checkpoint point within 5 s: try again when "
                 "it is idle");
    finish(p, NULL, FAILURE_CONFLICT, why);
}

/* A kernel destroyed meanwhile: its checkpoint ends without calling its `done`. */
static void forget_kernel(kernel *k)
{
    pending_checkpoint *p = find_pending(k);
    if (!p)
        return;
    unlink_pending(p);
    if (p->capturing) { /* the worker still writes through p: capture_done frees it */
        p->k = NULL;
        return;
    }
    free(p);
}

static bool refuse(failure_kind *failure, failure_kind kind, char *why, size_t why_size,
                   const char *text)
{
    *failure = kind;
    snprintf(why, why_size, "%s", text);
    return false;
}

static bool can_checkpoint(const kernel *k, failure_kind *failure, char *why, size_t why_size)
{
    if (kernel_spec(k)->argv) {
        *failure = FAILURE_INVALID;
        snprintf(why, why_size, "is a %s kernel: only Python kernels' live state can be checkpointed",
                 kernel_spec(k)->language ? kernel_spec(k)->language : "non-Python");
        return false;
    }
    switch (kernel_get_state(k)) {
    case KERNEL_STARTING:
        return refuse(failure, FAILURE_CONFLICT, why, why_size, "is still starting");
    case KERNEL_BUSY:
        return refuse(failure, FAILURE_CONFLICT, why, why_size,
                      "is running a cell: wait for it or interrupt it");
    case KERNEL_DEAD:
        return refuse(failure, FAILURE_CONFLICT, why, why_size, "is not running");
    case KERNEL_IDLE:
        break;
    }
    if (!kernel_is_zygote_clone(k))
        return refuse(failure, FAILURE_INVALID, why, why_size,
                      "was started without the zygote (it was not ready): only a zygote's clone "
                      "can be imaged");
    if (find_pending(k))
        return refuse(failure, FAILURE_CONFLICT, why, why_size, "is being checkpointed already");
    return true;
}

int kernel_checkpoint(kernel *k, int image_fd, bool full, kernel_checkpoint_done done, void *arg,
                      failure_kind *failure, char *why, size_t why_size)
{
    if (!can_checkpoint(k, failure, why, why_size))
        return -1;
    static bool hooked; /* kernel.c hands this module its frames and its ends: it calls none of
                           this module's verbs, so the arrow between them runs one way */
    if (!hooked) {
        kernel_add_message_handler(on_checkpoint_frame);
        kernel_add_destroy_hook(forget_kernel);
        hooked = true;
    }
    pending_checkpoint *p = calloc(1, sizeof *p);
    if (!p)
        return refuse(failure, FAILURE_INTERNAL, why, why_size, "out of memory"), -1;
    *p = (pending_checkpoint){.k = k, .image_fd = image_fd, .full = full, .done = done,
                              .arg = arg, .asked_at_ms = clock_monotonic_ms(), .next = pending};
    json_t *ask = json_pack("{s:s, s:s}", "channel", "cellbox", "type", "checkpoint");
    int sent = kernel_send_now(k, ask);
    json_decref(ask);
    if (sent < 0) {
        free(p);
        return refuse(failure, FAILURE_CONFLICT, why, why_size, "is not running"), -1;
    }
    pending = p;
    kernel_hold_requests(k, true);
    p->timer = loop_timer_add(CHECKPOINT_ANSWER_MS, on_answer_late, p);
    return 0;
}

bool kernel_image_fits(const kernelspec *spec, int image_fd, char *why, size_t why_size)
{
    if (!spec->zygote) {
        snprintf(why, why_size,
                 "%s has no zygote (--zygote=false): an image is a zygote "
                 "clone's",
                 spec->name);
        return false;
    }
    process_image *image = process_image_read_header(image_fd, why, why_size);
    if (!image)
        return false;
    pid_t zygote_pid = zygote_process(spec->zygote);
    if (zygote_pid <= 0) {
        /* Still starting (a wake right after a daemon restart): the kernel waits for it
           (kernel_start, kernel_restart_from_image) and the restorer checks a full image against
           the clone's own mappings; a misfit there falls back to the namespace as here. */
        bool full = process_image_is_full(image);
        if (!full)
            snprintf(why, why_size, "the image is a fork's, of a zygote that is gone");
        process_image_free(image);
        return full;
    }
    bool fits = true;
    if (!process_image_is_full(image)) {
        char generation[64];
        zygote_generation(zygote_pid, generation, sizeof generation);
        if (strcmp(generation, process_image_generation(image)) != 0) {
            snprintf(why, why_size, "the image is a fork's, of a zygote that is gone");
            fits = false;
        }
    }
    if (fits) {
        /* A full image may map files the zygote does not (a module imported after the clone):
           the restorer maps them itself, inside the sandbox, and the model falls back to the
           namespace if one is not the recorded file (kernel_restore_state). */
        char maps[64], exe_link[64], executable[PATH_MAX];
        snprintf(maps, sizeof maps, "/proc/%d/maps", (int)zygote_pid);
        snprintf(exe_link, sizeof exe_link, "/proc/%d/exe", (int)zygote_pid);
        ssize_t length = readlink(exe_link, executable, sizeof executable - 1);
        executable[length > 0 ? length : 0] = '\0';
        fits = process_image_fits_mapping_files(image, maps, executable, why, why_size);
    }
    process_image_free(image);
    return fits;
}
