/* checkpoint — see checkpoint.h. The daemon's half of the checkpoint point's exchange
 * (docs/kernel-protocol.md, "Checkpoints"): "checkpoint" → the kernel's "checkpoint_ready" (or
 * "checkpoint_refused") → process_image_capture of its process → "checkpoint_done". Requests
 * for the kernel that come meanwhile are held (kernel_hold_requests): the kernel reads its
 * channel in C while it waits, and must see nothing but "checkpoint_done". */
#include "kernel/checkpoint.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/log.h"
#include "common/loop.h"
#include "kernel/zygote.h"
#include "sandbox/process_image.h"

/* How long a kernel has to reach its checkpoint point: it answers at once when idle. */
#define CHECKPOINT_ANSWER_MS 5000

typedef struct pending_checkpoint {
    kernel *k;
    int image_fd;
    bool full;
    kernel_checkpoint_done done;
    void *arg;
    loop_timer_id timer;
    int64_t asked_at_ms;
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

static void capture_now(pending_checkpoint *p, json_t *report)
{
    char why[512] = "";
    pid_t pid = kernel_process(p->k);
    pid_t base = p->full ? 0 : zygote_process(kernel_spec(p->k)->zygote);
    if (pid <= 0 || (!p->full && base <= 0)) {
        release_kernel(p);
        finish(p, NULL, FAILURE_CONFLICT,
               pid <= 0 ? "its process is gone" : "its zygote is not running: a fork needs it");
        return;
    }
    char generation[64] = "";
    if (base > 0)
        zygote_generation(base, generation, sizeof generation);
    process_image_stats stats = {0};
    int rc = process_image_capture_at_most(pid, base, generation, p->image_fd,
                                           image_limit(p->k), &stats, why, sizeof why);
    release_kernel(p);
    if (rc < 0) {
        log_warn("kernel %s: checkpoint failed: %s", kernel_id(p->k), why);
        finish(p, NULL, rc == -ENOSPC ? FAILURE_EXHAUSTED : rc == -EFBIG ? FAILURE_CONFLICT
                                                                           : FAILURE_INTERNAL,
               why);
        return;
    }
    kernel_checkpoint_result result = {
        .image_fd = p->image_fd,
        .image_bytes = stats.bytes,
        .pages = stats.pages,
        .full = p->full,
        .report = report,
        .paused_ms = (double)(clock_monotonic_ms() - p->asked_at_ms),
    };
    log_debug("kernel %s: imaged %lld pages in %.0f ms", kernel_id(p->k), stats.pages, result.paused_ms);
    finish(p, &result, FAILURE_INTERNAL, NULL);
}

void kernel_checkpoint_frame(kernel *k, json_t *message)
{
    pending_checkpoint *p = find_pending(k);
    const char *type = json_string_value(json_object_get(message, "type"));
    if (!p || !type)
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

void kernel_checkpoint_forget(kernel *k)
{
    pending_checkpoint *p = find_pending(k);
    if (!p)
        return;
    unlink_pending(p);
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
    pid_t zygote_pid = zygote_process(spec->zygote);
    if (zygote_pid <= 0) {
        snprintf(why, why_size, "the zygote of %s is not running", spec->name);
        return false;
    }
    process_image *image = process_image_read_header(image_fd, why, why_size);
    if (!image)
        return false;
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
        char maps[64];
        snprintf(maps, sizeof maps, "/proc/%d/maps", (int)zygote_pid);
        fits = process_image_fits(image, maps, why, why_size);
    }
    process_image_free(image);
    return fits;
}
