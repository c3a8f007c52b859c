/* checkpoint — a live Python kernel's process taken into a process image, and put back into a
 * new sandbox as a clone of the same zygote (docs/architecture.md, "Checkpoints").
 *
 * The kernel stops itself at a known point between requests (runtime/checkpoint_point.h): it
 * records what only it can see (its registers at that point, signal handlers, open files, its
 * working directory) in its own memory and waits. The daemon then reads the process's private
 * memory (sandbox/process_image.h) and lets it go on. A restore asks the zygote for a clone that
 * enters a new sandbox — uid, seccomp, Landlock, limits — and only then maps the image back and
 * jumps to that point, where the kernel reopens its files and serves the new sandbox's channel.
 *
 * Verbs: kernel_checkpoint (take an image), kernel_image_fits (could the live zygote restore it),
 * kernel_restore_outcome (what became of a kernel started from an image: kernel_sandbox's
 * restore_image_fd, kernel/kernel.h). */
#ifndef CELLBOX_KERNEL_CHECKPOINT_H
#define CELLBOX_KERNEL_CHECKPOINT_H

#include <jansson.h>
#include <stdbool.h>

#include "common/failure.h"
#include "kernel/kernel.h"

typedef struct kernel_checkpoint_result {
    int image_fd;          /* the image (sandbox/process_image.h), read from offset 0; the
                              caller's fd given to kernel_checkpoint, not closed */
    long long image_bytes; /* page data in it */
    long long pages;       /* pages saved */
    bool full;             /* every private page: restorable by any zygote of the same build and
                              layout, also after a daemon restart; false: only the pages that
                              differ from the live zygote (a fork's image, kept in memory) */
    json_t *report;        /* borrowed: what was and was not carried, by name:
                              {"threads": 1, "open_files": [{"fd": 5, "path": "/workspace/a.csv",
                              "offset": 10, "carried": true}], "not_carried": [{"name": "fd 7",
                              "kind": "socket", "why": "a socket cannot be carried"},
                              {"name": "pid 14", "kind": "process", "why": ...}]} */
    double paused_ms;      /* how long the kernel stood still */
} kernel_checkpoint_result;

/* `result` is NULL and `why` says what failed (the kernel died, its memory could not be read,
   the image could not be written: `failure` FAILURE_EXHAUSTED for a full disk). */
typedef void (*kernel_checkpoint_done)(void *arg, const kernel_checkpoint_result *result,
                                       failure_kind failure, const char *why);

/* Takes kernel k's process image into image_fd (a memfd or a file, written from offset 0):
   `full` as above. The kernel must be a Python kernel cloned from a zygote, started and idle:
   otherwise -1 with `failure` (FAILURE_CONFLICT "is running a cell: wait for it or interrupt
   it", "is still starting"; FAILURE_INVALID "is a <language> kernel: only Python kernels' live
   state can be checkpointed" (the model then carries such a context as "restarted")). A kernel
   with more than one thread, or one that does not answer in time, ends with `done`'s failure
   (FAILURE_CONFLICT, "has N threads: ..."), like one holding writable shared memory
   (FAILURE_CONFLICT, "holds memory shared with other processes ..."). `done` is called from the loop, never before this
   returns; the kernel always goes on running afterwards, whatever the outcome. */
int kernel_checkpoint(kernel *k, int image_fd, bool full, kernel_checkpoint_done done, void *arg,
                      failure_kind *failure, char *why, size_t why_size);

/* A kernel destroyed while it is being checkpointed: its checkpoint ends without calling
   `done` (a destroy hook this module adds). */

/* Could the live zygote of `spec` restore this image (same build, same layout; a diff image
   also needs the very zygote process it was taken against)? false with `why` naming the
   difference ("the zygote's build changed: libpython3.11.so.1.0 is another file"); then the
   model falls back to the Python level (kernel/namespace_transfer.h). A full image may map
   files the zygote does not (the restorer maps them: sandbox/process_image.h). While the zygote
   is still starting a full image is said to fit: the kernel started from it waits for the
   zygote, and the restorer makes the same checks in the clone (a misfit: KERNEL_RESTORE_FAILED,
   its death reason naming it). */
bool kernel_image_fits(const kernelspec *spec, int image_fd, char *why, size_t why_size);

typedef enum kernel_restore_outcome {
    KERNEL_NOT_RESTORED, /* an ordinary kernel */
    KERNEL_RESTORING,    /* started from an image, not yet serving */
    KERNEL_RESTORED,     /* serving, the image put back */
    KERNEL_RESTORE_FAILED, /* the clone could not put the image back: the kernel is dead and its
                              death reason starts "restore failed: " */
} kernel_restore_outcome;
kernel_restore_outcome kernel_restore_state(const kernel *k);
/* The restored kernel's own report (borrowed, may be NULL): files reopened, what was not. */
json_t *kernel_restore_report(const kernel *k);

#endif
