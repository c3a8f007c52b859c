/* pool — the warm pools: kernels started ahead of time in sandboxes with the default limits,
 * each template's own (its kernelspec->pool_size), handed out by manager_create.
 *
 * They refill one kernel at a time through the loop, so requests are served between two
 * starts; a pool whose template has a zygote fills once the zygote is ready. */
#ifndef CELLBOX_MODEL_POOL_H
#define CELLBOX_MODEL_POOL_H

#include <stdbool.h>
#include <stddef.h>

#include "kernel/kernel.h"
#include "kernel/kernelspec.h"
#include "sandbox/limits.h"

typedef struct sandbox_pieces sandbox_pieces;

typedef struct pool_options {
    sandbox_limits default_limits; /* every pooled kernel's */
    bool keep_workspaces;
    /* May one more sandbox start, with `pooled` kernels in the pools? (The kernel limit and the
       daemon's open-file budget, which the manager knows.) */
    bool (*room_for_another)(size_t pooled);
} pool_options;

/* Called once at start, by startup_run (startup.h): the pools start filling. */
void pool_init(const pool_options *options);
/* During a create: a ready kernel of `spec` (live, oldest first) and its pieces, or NULL; dead
   ones met on the way are discarded. The refill waits until a burst of creates is over. */
kernel *pool_take(const kernelspec *spec, sandbox_pieces *pieces);
/* Kernels in a template's pool: all of them, or those that finished starting. NULL: every
   template's. */
size_t pool_kernel_count(const kernelspec *spec);
size_t pool_ready_count(const kernelspec *spec);
/* A template is going (templates_delete): its pooled kernels end now. */
void pool_discard_template(const kernelspec *spec);
/* A template was added: its pool starts filling, after the loop's current work. */
void pool_refill_soon(void);
/* At the end (shutdown or detach): no more refills, and every pooled kernel ends. */
void pool_discard_all(void);

#endif
