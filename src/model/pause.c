#include "model/pause.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "model/box_fields.h"
#include "model/manager.h"

int box_pause(box *b, char *why, size_t why_size)
{
    if (b->paused)
        return 0;
    if (!box_cgroup(b) || cgroup_freeze(box_cgroup(b), true) < 0) {
        snprintf(why, why_size, "cannot freeze the sandbox: %s", strerror(errno));
        return -1;
    }
    b->paused = true;
    box_ttl_arm(b); /* stopped while paused */
    box_log_event(b, "paused");
    manager_record(b->primary);
    return 0;
}

int box_resume(box *b, char *why, size_t why_size)
{
    if (!b->paused)
        return 0;
    if (cgroup_freeze(box_cgroup(b), false) < 0) {
        snprintf(why, why_size, "cannot thaw the sandbox: %s", strerror(errno));
        return -1;
    }
    b->paused = false;
    box_ttl_arm(b);
    box_log_event(b, "resumed");
    manager_record(b->primary);
    return 0;
}

void box_pause_thaw_for_end(box *b)
{
    if (b->paused && box_cgroup(b))
        cgroup_freeze(box_cgroup(b), false); /* frozen processes would not die */
}
