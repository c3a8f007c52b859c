#include "model/ttl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "common/log.h"
#include "model/box_fields.h"
#include "model/manager.h"

bool box_describe_end(const box *b, const char *what, char *out, size_t size)
{
    if (!b->expired)
        return false;
    snprintf(out, size,
             "sandbox expired: its timeout of %d s ended while this %s ran; extend it with POST "
             "/v1/sandboxes/%s/timeout (cellbox timeout %s SECONDS) before it ends, or set a "
             "longer timeout when you create the sandbox",
             b->timeout_s, what, kernel_id(b->primary), kernel_id(b->primary));
    return true;
}

/* The expired sandbox goes once the messages saying why have left: a WebSocket's close frame
   would overtake them (the sandbox's id is carried: a client may delete it meanwhile). */
static void delete_expired(void *arg)
{
    char *id = arg;
    kernel *k = manager_find(id);
    box *b = k ? kernel_box(k) : NULL;
    if (b && b->primary == k && b->expired)
        manager_delete(k); /* the delete hook frees the box */
    free(id);
}

/* E2B's onTimeout 'pause': the sandbox stops where it is, its memory kept, until a client
   resumes it (or a call does, with autoResume). False when the freezer refused: it is deleted at
   its timeout then, as without the lifecycle, rather than running on past it. */
static bool pause_at_timeout(box *b)
{
    char why[256];
    if (b->pause(b, why, sizeof why) < 0) {
        log_warn("sandbox %s: %s; it ends at its timeout instead", kernel_id(b->primary), why);
        return false;
    }
    log_info("sandbox %s: paused at its timeout of %d s", kernel_id(b->primary), b->timeout_s);
    box_log_event(b, "its timeout of %d s ended: paused (E2B's onTimeout 'pause')%s", b->timeout_s,
                  b->auto_resume ? "; a call into it resumes it" : "");
    return true;
}

/* Cells that run when the sandbox expires end with that cause, not a bare kernel death: each
   context's clients (WebSocket, /v1 executions) get an error saying so before the kernels go. */
static void on_ttl_expired(void *arg)
{
    box *b = arg;
    b->ttl = 0;
    if (b->pause_at_timeout && pause_at_timeout(b))
        return;
    b->expired = true;
    log_info("sandbox %s: expired after %d s", kernel_id(b->primary), b->timeout_s);
    char why[512];
    box_describe_end(b, "cell", why, sizeof why);
    kernel_fail_running_cell(b->primary, "SandboxExpired", why);
    for (box_context *c = b->contexts; c; c = c->next)
        kernel_fail_running_cell(c->k, "SandboxExpired", why);
    box_log(b, "sandbox", "event", why, strlen(why));
    char *id = strdup(kernel_id(b->primary));
    if (!id)
        die("out of memory");
    loop_defer(delete_expired, id);
}

void box_ttl_arm(box *b)
{
    if (b->ttl) {
        loop_timer_cancel(b->ttl);
        b->ttl = 0;
    }
    b->ends_at_us = 0;
    if (b->timeout_s <= 0 || b->paused)
        return;
    b->ends_at_us = clock_wall_us() + (int64_t)b->timeout_s * 1000000;
    b->ttl = loop_timer_add((int64_t)b->timeout_s * 1000, on_ttl_expired, b);
}

void box_set_timeout(box *b, int timeout_s)
{
    b->timeout_s = timeout_s;
    box_ttl_arm(b);
    manager_record(b->primary);
}

void box_ttl_restore(box *b, int64_t ends_at_us)
{
    if (b->timeout_s <= 0 || b->paused || ends_at_us <= 0)
        return;
    /* The deadline is wall-clock time: the time the daemon was away counts. */
    int64_t left_ms = (ends_at_us - clock_wall_us()) / 1000;
    b->ends_at_us = ends_at_us;
    b->ttl = loop_timer_add(left_ms > 0 ? left_ms : 0, on_ttl_expired, b);
}

void box_ttl_cancel(box *b)
{
    if (b->ttl)
        loop_timer_cancel(b->ttl);
    b->ttl = 0;
}

void box_set_lifecycle(box *b, bool pause_at_timeout, bool auto_resume)
{
    b->pause_at_timeout = pause_at_timeout;
    b->auto_resume = pause_at_timeout && auto_resume;
    manager_record(b->primary);
}

bool box_pauses_at_timeout(const box *b)
{
    return b->pause_at_timeout;
}

bool box_resumes_on_call(const box *b)
{
    return b->auto_resume;
}
