#include "model/pool.h"

#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "common/loop.h"
#include "kernel/zygote.h"
#include "model/prepared.h"
#include "model/sandbox_pieces.h"

#define REFILL_DELAY_AFTER_HANDOUT_MS 250

typedef struct pooled_kernel {
    kernel *kernel;
    sandbox_pieces pieces;
} pooled_kernel;

static pool_options options;
static pooled_kernel *pool; /* every template's, oldest first */
static size_t pooled_count;
static loop_timer_id refill_timer;

static void schedule_refill(int64_t delay_ms);

static void discard_pooled(pooled_kernel *p)
{
    char *workspace = strdup(kernel_workspace(p->kernel));
    kernel_destroy(p->kernel);
    sandbox_pieces_release(&p->pieces, workspace, options.keep_workspaces);
    free(workspace);
}

static size_t pooled_of(const kernelspec *spec)
{
    size_t count = 0;
    for (size_t i = 0; i < pooled_count; i++)
        count += kernel_spec(pool[i].kernel) == spec;
    return count;
}

/* One kernel at a time, through the loop, so requests are served between two starts; the
   templates take turns in their order, each until its pool is full. */
static void refill_one(void *arg)
{
    refill_timer = 0;
    if (!options.room_for_another(pooled_count))
        return;
    const kernelspec *spec = NULL;
    bool waiting = false;
    for (size_t i = 0; i < kernelspec_count() && !spec; i++) {
        const kernelspec *candidate = kernelspec_at(i);
        if (pooled_of(candidate) >= (size_t)candidate->pool_size)
            continue;
        /* Kernels cloned from the zygote share its pages: worth waiting for it. */
        if (candidate->zygote && !zygote_is_ready(candidate->zygote))
            waiting = true;
        else
            spec = candidate;
    }
    if (!spec) {
        if (waiting)
            schedule_refill(100);
        return;
    }
    char why[512];
    sandbox_pieces pieces;
    kernel *k = prepared_start_kernel(spec, NULL, &options.default_limits, NULL, NULL, NULL, -1, &pieces,
                                      why, sizeof why);
    if (!k) {
        log_warn("warm pool of %s: cannot start a kernel: %s", spec->name, why);
        schedule_refill(1000);
        return;
    }
    pool = realloc(pool, (pooled_count + 1) * sizeof *pool);
    if (!pool)
        die("out of memory");
    pool[pooled_count++] = (pooled_kernel){.kernel = k, .pieces = pieces};
    schedule_refill(1);
}

static void schedule_refill(int64_t delay_ms)
{
    if (!refill_timer && kernelspec_pool_total() > 0)
        refill_timer = loop_timer_add(delay_ms, refill_one, NULL);
}

void pool_init(const pool_options *opts)
{
    options = *opts;
    schedule_refill(0);
}

kernel *pool_take(const kernelspec *spec, sandbox_pieces *pieces)
{
    pooled_kernel taken = {0};
    for (size_t i = 0; i < pooled_count && !taken.kernel;) {
        pooled_kernel candidate = pool[i];
        bool dead = kernel_get_state(candidate.kernel) == KERNEL_DEAD;
        if (!dead && kernel_spec(candidate.kernel) != spec) {
            i++;
            continue;
        }
        memmove(&pool[i], &pool[i + 1], (pooled_count - i - 1) * sizeof *pool);
        pooled_count--;
        if (dead)
            discard_pooled(&candidate);
        else
            taken = candidate;
    }
    /* Not at once: preparing a sandbox blocks the loop for tens of milliseconds (its mount) and
       its Python start takes a core for a while, which would stall the handshake and first cell
       of the client that just got its kernel. Every handout pushes the refill back, so a burst
       of creates is served from the pool first and the pool refills once the burst is over. */
    if (refill_timer) {
        loop_timer_cancel(refill_timer);
        refill_timer = 0;
    }
    schedule_refill(REFILL_DELAY_AFTER_HANDOUT_MS);
    if (taken.kernel)
        *pieces = taken.pieces;
    return taken.kernel;
}

size_t pool_kernel_count(const kernelspec *spec)
{
    return spec ? pooled_of(spec) : pooled_count;
}

size_t pool_ready_count(const kernelspec *spec)
{
    size_t ready = 0;
    for (size_t i = 0; i < pooled_count; i++)
        ready += kernel_get_state(pool[i].kernel) == KERNEL_IDLE &&
                 (!spec || kernel_spec(pool[i].kernel) == spec);
    return ready;
}

void pool_discard_all(void)
{
    if (refill_timer)
        loop_timer_cancel(refill_timer);
    refill_timer = 0;
    while (pooled_count > 0)
        discard_pooled(&pool[--pooled_count]);
}

void pool_discard_template(const kernelspec *spec)
{
    for (size_t i = 0; i < pooled_count;) {
        if (kernel_spec(pool[i].kernel) != spec) {
            i++;
            continue;
        }
        pooled_kernel gone = pool[i];
        memmove(&pool[i], &pool[i + 1], (pooled_count - i - 1) * sizeof *pool);
        pooled_count--;
        discard_pooled(&gone);
    }
}

void pool_refill_soon(void)
{
    if (!options.room_for_another) /* before pool_init: it schedules the first refill */
        return;
    schedule_refill(REFILL_DELAY_AFTER_HANDOUT_MS);
}
