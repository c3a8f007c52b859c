#include "model/culling.h"

#include <stdint.h>

#include "common/clock.h"
#include "common/log.h"
#include "common/loop.h"
#include "model/box.h"
#include "model/manager.h"

static culling_options options;

static void schedule_pass(void);

static bool should_cull(const kernel *k, int64_t now_us)
{
    if (kernel_box(k) && box_hibernation_snapshot(kernel_box(k)))
        return false; /* dead on purpose: it lives on as its snapshot */
    if (kernel_get_state(k) == KERNEL_DEAD)
        return true;
    int64_t idle_us = now_us - kernel_last_activity_us(k);
    if (idle_us <= (int64_t)options.idle_timeout * 1000000)
        return false;
    if (kernel_get_state(k) == KERNEL_BUSY && !options.cull_busy)
        return false;
    if (kernel_connection_count(k) > 0 && !options.cull_connected)
        return false;
    return true;
}

static void cull_pass(void *arg)
{
    int64_t now = clock_wall_us();
    /* from the end, each index checked again: a delete moves the kernels after it down */
    for (size_t i = manager_count(); i-- > 0;) {
        kernel *k = manager_at(i);
        if (k && should_cull(k, now)) {
            log_info("culling kernel %s (%s)", kernel_id(k), kernel_state_name(kernel_get_state(k)));
            manager_delete(k);
        }
    }
    schedule_pass();
}

static void schedule_pass(void)
{
    int interval = options.interval > 0 ? options.interval : 300;
    loop_timer_add((int64_t)interval * 1000, cull_pass, NULL);
}

void culling_start(const culling_options *opts)
{
    options = *opts;
    if (options.idle_timeout > 0)
        schedule_pass();
}
