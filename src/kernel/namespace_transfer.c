/* The daemon's side of a namespace transfer (docs/kernel-protocol.md, "Namespace transfer").
 *
 * Save: {"type": "save_namespace", "max_bytes"} → the kernel writes its container into a memfd,
 * seals it and answers namespace_saved naming the fd; the daemon takes a copy of that fd out of
 * the kernel's process (pidfd_getfd: the process's own access, nothing by path), checks it is a
 * sealed memfd within the limit, tells the kernel to let go of it (namespace_release), and copies
 * it into the caller's file on a worker thread (common/worker.h).
 * Load: {"type": "load_namespace"} → the kernel makes an empty memfd and answers namespace_buffer
 * naming it; the daemon takes it, checks it is an empty memfd, copies the caller's file into it on
 * a worker thread, sends namespace_filled with the size, and the kernel answers
 * namespace_loaded with its report.
 *
 * The kernel may be hostile. It can only name a descriptor it holds, and only a memfd passes;
 * sizes are the daemon's (fstat), never the kernel's word; every step has one time limit; its
 * report is rebuilt, bounded (kernel/namespace_frames.h). The kernel object is used only while
 * the transfer is under way: its process's end (a copy of the supervisor's pidfd, watched) or
 * its destruction (kernel_add_destroy_hook) ends the transfer first. The kernel's state is not
 * touched: the frames pass between requests, and a request sent meanwhile waits in its channel
 * behind them. */
#include "kernel/namespace_transfer.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/ids.h"
#include "common/log.h"
#include "common/loop.h"
#include "common/text.h"
#include "common/worker.h"
#include "kernel/namespace_frames.h"

/* A save or load of 100 MiB takes about a second; a kernel that has not answered in this long
   is stuck in user code's __reduce__ or __setstate__ (or hostile). */
#define TRANSFER_TIME_LIMIT_MS 300000
#define COPY_BUFFER_BYTES (1 << 20)
#define MAX_TRANSFERS 64

typedef enum transfer_step {
    AWAITING_SAVED,  /* save_namespace sent */
    COPYING_OUT,     /* the kernel's container → the caller's file */
    AWAITING_BUFFER, /* load_namespace sent */
    COPYING_IN,      /* the caller's file → the kernel's buffer */
    AWAITING_LOADED, /* namespace_filled sent */
} transfer_step;

typedef struct namespace_transfer {
    kernel *k;                              /* used only while the transfer is listed (see above) */
    char kernel_id[UUID_STRING_LENGTH + 1]; /* whose answers it takes */
    transfer_step step;                     /* what it waits for */
    int file_fd;                            /* the caller's: out_fd or in_fd, never closed here */
    long long max_bytes;                    /* save: the container's limit */
    int supervisor_pidfd;                   /* a copy of the kernel's, watched: its process ended */
    loop_watch supervisor_watch;            /* on supervisor_pidfd */
    int memfd;                              /* the kernel's memfd, taken (-1 until then) */
    long long size;                         /* bytes to copy */
    unsigned long long serial;              /* names it for its copy's completion */
    loop_timer_id time_limit;               /* ends the whole transfer */
    json_t *report;                         /* the kernel's, rebuilt */
    kernel_namespace_done done;             /* the caller's, called once from the loop */
    void *arg;                              /* done's */
    failure_kind failure;                   /* with why */
    char why[256];                          /* set: it failed */
    struct namespace_transfer *next;        /* the list of transfers under way */
} namespace_transfer;

static namespace_transfer *transfers;
static bool handler_added;

static void on_kernel_message(kernel *k, const char *channel, json_t *message);
static void forget_kernel(kernel *k);

static int count_transfers(void)
{
    int count = 0;
    for (namespace_transfer *t = transfers; t; t = t->next)
        count++;
    return count;
}

static namespace_transfer *transfer_of(kernel *k)
{
    for (namespace_transfer *t = transfers; t; t = t->next)
        if (t->k == k && strcmp(t->kernel_id, kernel_id(k)) == 0)
            return t;
    return NULL;
}

static void unlink_transfer(namespace_transfer *t)
{
    for (namespace_transfer **p = &transfers; *p; p = &(*p)->next) {
        if (*p == t) {
            *p = t->next;
            return;
        }
    }
}

static void report_outcome(void *arg)
{
    namespace_transfer *t = arg;
    if (t->why[0])
        t->done(t->arg, NULL, t->failure, t->why);
    else
        t->done(t->arg, t->report, FAILURE_INTERNAL, NULL);
    json_decref(t->report);
    free(t);
}

/* Ends the transfer: unlisted at once (nothing more reaches it), `done` after this loop batch
   (never from inside the caller's own call). */
static void finish(namespace_transfer *t)
{
    unlink_transfer(t);
    loop_timer_cancel(t->time_limit);
    loop_watch_remove(&t->supervisor_watch);
    close(t->supervisor_pidfd);
    if (t->memfd >= 0)
        close(t->memfd);
    t->k = NULL;
    loop_defer(report_outcome, t);
}

static void fail(namespace_transfer *t, failure_kind failure, const char *format, ...)
    __attribute__((format(printf, 3, 4)));
static void fail(namespace_transfer *t, failure_kind failure, const char *format, ...)
{
    va_list args;
    va_start(args, format);
    vsnprintf(t->why, sizeof t->why, format, args);
    va_end(args);
    t->failure = failure;
    log_info("kernel %s: namespace %s failed: %s", t->kernel_id,
             t->step <= COPYING_OUT ? "save" : "load", t->why);
    finish(t);
}

static void on_time_limit(void *arg)
{
    namespace_transfer *t = arg;
    t->time_limit = 0;
    fail(t, FAILURE_CONFLICT, "the kernel did not finish its namespace %s in %d s",
         t->step <= COPYING_OUT ? "save" : "load", TRANSFER_TIME_LIMIT_MS / 1000);
}

static void on_supervisor_exit(void *owner, uint32_t events)
{
    namespace_transfer *t = owner;
    fail(t, FAILURE_CONFLICT, "the kernel died during its namespace %s",
         t->step <= COPYING_OUT ? "save" : "load");
}

static int send_frame(namespace_transfer *t, json_t *frame)
{
    json_object_set_new(frame, "channel", json_string("cellbox"));
    int sent = kernel_send(t->k, frame);
    json_decref(frame);
    return sent;
}

/* ---- starting ---- */

static bool can_transfer(kernel *k, const char *verb, failure_kind *failure, char *why,
                         size_t why_size)
{
    if (kernel_spec(k)->argv) {
        *failure = FAILURE_INVALID;
        snprintf(why, why_size,
                 "kernel %s is a %s kernel: only Python kernels' variables can be %s", kernel_id(k),
                 kernel_spec(k)->language, verb);
        return false;
    }
    const char *problem = NULL;
    switch (kernel_get_state(k)) {
    case KERNEL_STARTING: problem = "is still starting: wait for it"; break;
    case KERNEL_BUSY: problem = "is running a cell: wait for it or interrupt it"; break;
    case KERNEL_DEAD: problem = "is dead: restart it first"; break;
    case KERNEL_IDLE: break;
    }
    if (!problem && transfer_of(k))
        problem = "is already saving or loading its namespace: wait for it";
    if (!problem && count_transfers() >= MAX_TRANSFERS)
        problem = "cannot start a namespace transfer: 64 are under way; try again shortly";
    if (!problem && kernel_pidfd(k) < 0)
        problem = "has no process yet: wait for it";
    if (problem) {
        *failure = FAILURE_CONFLICT;
        snprintf(why, why_size, "kernel %s %s", kernel_id(k), problem);
        return false;
    }
    return true;
}

static namespace_transfer *start(kernel *k, transfer_step step, int file_fd, json_t *frame,
                                 kernel_namespace_done done, void *arg, failure_kind *failure,
                                 char *why, size_t why_size)
{
    int supervisor_pidfd = fcntl(kernel_pidfd(k), F_DUPFD_CLOEXEC, 0);
    if (supervisor_pidfd < 0) {
        json_decref(frame);
        *failure = FAILURE_EXHAUSTED;
        snprintf(why, why_size, "cannot watch kernel %s: %s", kernel_id(k), strerror(errno));
        return NULL;
    }
    if (!handler_added) {
        kernel_add_message_handler(on_kernel_message);
        kernel_add_destroy_hook(forget_kernel);
        handler_added = true;
    }
    namespace_transfer *t = calloc(1, sizeof *t);
    if (!t)
        die("out of memory starting a namespace transfer");
    static unsigned long long serials;
    t->k = k;
    t->serial = ++serials;
    snprintf(t->kernel_id, sizeof t->kernel_id, "%s", kernel_id(k));
    t->step = step;
    t->file_fd = file_fd;
    t->memfd = -1;
    t->supervisor_pidfd = supervisor_pidfd;
    t->done = done;
    t->arg = arg;
    t->supervisor_watch.fd = -1;
    loop_watch_add(&t->supervisor_watch, supervisor_pidfd, EPOLLIN, on_supervisor_exit, t);
    t->time_limit = loop_timer_add(TRANSFER_TIME_LIMIT_MS, on_time_limit, t);
    t->next = transfers;
    transfers = t;
    if (send_frame(t, frame) < 0) {
        unlink_transfer(t);
        loop_timer_cancel(t->time_limit);
        loop_watch_remove(&t->supervisor_watch);
        close(supervisor_pidfd);
        free(t);
        *failure = FAILURE_CONFLICT;
        snprintf(why, why_size, "kernel %s is dead: restart it first", kernel_id(k));
        return NULL;
    }
    return t;
}

int kernel_save_namespace(kernel *k, int out_fd, long long max_bytes, kernel_namespace_done done,
                          void *arg, failure_kind *failure, char *why, size_t why_size)
{
    if (max_bytes <= 0) {
        *failure = FAILURE_INVALID;
        snprintf(why, why_size, "a namespace's byte limit must be positive");
        return -1;
    }
    if (!can_transfer(k, "saved", failure, why, why_size))
        return -1;
    json_t *frame =
        json_pack("{s:s, s:I}", "type", "save_namespace", "max_bytes", (json_int_t)max_bytes);
    namespace_transfer *t =
        start(k, AWAITING_SAVED, out_fd, frame, done, arg, failure, why, why_size);
    if (!t)
        return -1;
    t->max_bytes = max_bytes;
    return 0;
}

int kernel_load_namespace(kernel *k, int in_fd, kernel_namespace_done done, void *arg,
                          failure_kind *failure, char *why, size_t why_size)
{
    struct stat st;
    if (fstat(in_fd, &st) < 0 || !S_ISREG(st.st_mode)) {
        *failure = FAILURE_INVALID;
        snprintf(why, why_size, "the namespace to load is not a regular file");
        return -1;
    }
    if (!can_transfer(k, "loaded", failure, why, why_size))
        return -1;
    json_t *frame = json_pack("{s:s}", "type", "load_namespace");
    namespace_transfer *t =
        start(k, AWAITING_BUFFER, in_fd, frame, done, arg, failure, why, why_size);
    if (!t)
        return -1;
    t->size = st.st_size;
    return 0;
}

static void forget_kernel(kernel *k)
{
    for (namespace_transfer *t = transfers, *next; t; t = next) {
        next = t->next;
        if (t->k == k)
            fail(t, FAILURE_CONFLICT, "the kernel was shut down during its namespace %s",
                 t->step <= COPYING_OUT ? "save" : "load");
    }
}

/* ---- copying, on a worker thread ---- */

/* One copy between the kernel's memfd and the caller's file, run by a worker (common/worker.h):
   it owns copies of both descriptors, so a transfer that ends meanwhile (its kernel died, its time
   ran out: the caller closes its file) closes nothing under it, and the transfer is found again
   in copied() by its serial, never by a pointer that may name another transfer by then. */
typedef struct namespace_copy {
    namespace_transfer *t;    /* compared, with serial, only on the loop */
    unsigned long long serial; /* t's */
    int from, to;             /* the task's own descriptors */
    long long size;           /* bytes to copy (fstat, the daemon's measure) */
    int error;                /* the thread's outcome: 0, or errno */
    bool writing;             /* error came from the writing side */
} namespace_copy;

static void copy_all(void *arg) /* on a worker thread */
{
    namespace_copy *copy = arg;
    char *chunk = malloc(COPY_BUFFER_BYTES);
    if (!chunk) {
        copy->error = ENOMEM;
        return;
    }
    for (long long done = 0; done < copy->size && !copy->error;) {
        size_t want = (size_t)(copy->size - done < COPY_BUFFER_BYTES ? copy->size - done
                                                                     : COPY_BUFFER_BYTES);
        ssize_t got = pread(copy->from, chunk, want, done);
        if (got <= 0) {
            copy->error = got == 0 ? ENODATA : errno; /* ENODATA: shorter than its size said */
            break;
        }
        for (ssize_t put = 0; put < got;) {
            ssize_t n = pwrite(copy->to, chunk + put, (size_t)(got - put), done + put);
            if (n < 0) {
                copy->error = errno;
                copy->writing = true;
                break;
            }
            put += n;
        }
        done += got;
    }
    free(chunk);
}

static namespace_transfer *transfer_with_serial(namespace_transfer *t, unsigned long long serial)
{
    for (namespace_transfer *u = transfers; u; u = u->next)
        if (u == t && u->serial == serial)
            return u;
    return NULL;
}

static void copied_out(namespace_transfer *t)
{
    if (ftruncate(t->file_fd, t->size) < 0) {
        fail(t, errno == ENOSPC || errno == EDQUOT ? FAILURE_EXHAUSTED : FAILURE_INTERNAL,
             "cannot write the namespace: %s", strerror(errno));
        return;
    }
    log_debug("kernel %s: namespace saved, %lld bytes", t->kernel_id, t->size);
    finish(t);
}

static void copied_in(namespace_transfer *t)
{
    close(t->memfd);
    t->memfd = -1;
    t->step = AWAITING_LOADED;
    if (send_frame(t, json_pack("{s:s, s:I}", "type", "namespace_filled", "bytes",
                                (json_int_t)t->size)) < 0)
        fail(t, FAILURE_CONFLICT, "the kernel died during its namespace load");
}

static void copied(void *arg) /* on the loop */
{
    namespace_copy *copy = arg;
    close(copy->from);
    close(copy->to);
    namespace_transfer *t = transfer_with_serial(copy->t, copy->serial);
    int error = copy->error;
    bool writing = copy->writing;
    free(copy);
    if (!t)
        return; /* it ended meanwhile and was reported then */
    bool out = t->step == COPYING_OUT;
    if (error) {
        bool full = writing && (error == ENOSPC || error == EDQUOT);
        fail(t, full ? FAILURE_EXHAUSTED : FAILURE_INTERNAL, "%s %s the namespace: %s",
             writing ? "cannot write" : "cannot read", out ? "saving" : "loading",
             full ? "no space left on the device" : strerror(error));
    } else if (out) {
        copied_out(t);
    } else {
        copied_in(t);
    }
}

/* The memfd to the caller's file (COPYING_OUT) or back (COPYING_IN), on a worker: a namespace
   of hundreds of MiB copied on the loop stalled every other sandbox's traffic for as long. */
static void start_copy(namespace_transfer *t)
{
    bool out = t->step == COPYING_OUT;
    namespace_copy *copy = calloc(1, sizeof *copy);
    if (!copy)
        die("out of memory copying a namespace");
    copy->t = t;
    copy->serial = t->serial;
    copy->size = t->size;
    copy->from = fcntl(out ? t->memfd : t->file_fd, F_DUPFD_CLOEXEC, 0);
    copy->to = copy->from < 0 ? -1 : fcntl(out ? t->file_fd : t->memfd, F_DUPFD_CLOEXEC, 0);
    if (copy->to < 0) {
        int error = errno;
        if (copy->from >= 0)
            close(copy->from);
        free(copy);
        fail(t, FAILURE_EXHAUSTED, "cannot copy the namespace: %s", strerror(error));
        return;
    }
    worker_submit(copy_all, copied, copy);
}

/* ---- the kernel's answers ---- */

/* The kernel's memfd named in `answer`, taken out of its process; -1 after fail(). */
static int take_memfd(namespace_transfer *t, json_t *answer)
{
    char why[200];
    int process = namespace_open_kernel_process(kernel_pid(t->k), why, sizeof why);
    int memfd = process < 0
                    ? -1
                    : namespace_take_fd(process, json_object_get(answer, "fd"), why, sizeof why);
    if (process >= 0)
        close(process);
    if (memfd < 0)
        fail(t, FAILURE_INTERNAL, "%s", why);
    return memfd;
}

/* The kernel's answer said why it could not (failed with `what` and its words): true. */
static bool kernel_refused(namespace_transfer *t, json_t *answer, failure_kind kind,
                           const char *what)
{
    const char *refusal = json_string_value(json_object_get(answer, "why"));
    if (!refusal)
        return false;
    fail(t, kind, "%s: %.*s", what, text_utf8_prefix(refusal, 200), refusal);
    return true;
}

/* The kernel's report, rebuilt bounded (kernel/namespace_frames.h); false after failing. */
static bool take_report(namespace_transfer *t, json_t *answer)
{
    char why[200];
    t->report = namespace_report_from_kernel(json_object_get(answer, "report"), why, sizeof why);
    if (!t->report)
        fail(t, FAILURE_INTERNAL, "%s", why);
    return t->report != NULL;
}

static void on_saved(namespace_transfer *t, json_t *answer)
{
    char why[200];
    if (kernel_refused(t, answer, FAILURE_INTERNAL, "the kernel could not save its namespace") ||
        !take_report(t, answer))
        return;
    t->memfd = take_memfd(t, answer);
    if (t->memfd < 0)
        return;
    /* The kernel lets go of its memfd now: the daemon's copy keeps it, and the kernel object
       is not needed again. */
    send_frame(t, json_pack("{s:s}", "type", "namespace_release"));
    if (namespace_check_sealed(t->memfd, t->max_bytes, &t->size, why, sizeof why) < 0) {
        fail(t, FAILURE_INTERNAL, "%s", why);
        return;
    }
    json_object_set_new(t->report, "bytes", json_integer(t->size)); /* the daemon's measure */
    t->step = COPYING_OUT;
    start_copy(t);
}

static void on_buffer(namespace_transfer *t, json_t *answer)
{
    char why[200];
    if (kernel_refused(t, answer, FAILURE_INTERNAL, "the kernel could not load a namespace"))
        return;
    t->memfd = take_memfd(t, answer);
    if (t->memfd < 0)
        return;
    if (namespace_check_empty_buffer(t->memfd, why, sizeof why) < 0) {
        fail(t, FAILURE_INTERNAL, "%s", why);
        return;
    }
    t->step = COPYING_IN;
    start_copy(t);
}

static void on_loaded(namespace_transfer *t, json_t *answer)
{
    if (kernel_refused(t, answer, FAILURE_INVALID, "the namespace was not loaded") ||
        !take_report(t, answer))
        return;
    json_object_set_new(t->report, "bytes", json_integer(t->size));
    finish(t);
}

static void on_kernel_message(kernel *k, const char *channel, json_t *message)
{
    if (strcmp(channel, "cellbox") != 0)
        return;
    namespace_transfer *t = transfer_of(k);
    const char *type = json_string_value(json_object_get(message, "type"));
    if (!t || !type)
        return;
    if (strcmp(type, "namespace_saved") == 0 && t->step == AWAITING_SAVED)
        on_saved(t, message);
    else if (strcmp(type, "namespace_buffer") == 0 && t->step == AWAITING_BUFFER)
        on_buffer(t, message);
    else if (strcmp(type, "namespace_loaded") == 0 &&
             (t->step == AWAITING_LOADED || t->step == AWAITING_BUFFER))
        on_loaded(t, message); /* at AWAITING_BUFFER: the kernel could not make its buffer */
}
