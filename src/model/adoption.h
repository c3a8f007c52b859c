/* adoption — at start, the sandboxes a previous daemon on this data directory left running
 * (docs/architecture.md, "Restarts and adoption"). A sandbox is adopted when its record
 * (registry.h) says a client had it, the keeper still holds its channels (keeper.h), its pid 1 is
 * the very process recorded (pid and start time: a pid reused since is never taken for it), its
 * uid is in our block and its cgroup is there; then its other contexts and running background
 * commands are, under the same checks (one that fails them is killed through its pidfd).
 * Anything else of the previous daemon is removed by reconcile_data_dir. */
#ifndef CELLBOX_MODEL_ADOPTION_H
#define CELLBOX_MODEL_ADOPTION_H

#include <stdbool.h>

/* Called once at start by startup_run (startup.h), after keeper_start and before
   reconcile_data_dir. */
void adoption_adopt_all(void);
/* Whether sandbox (or context, or command) `id` was adopted: reconcile_data_dir leaves it alone. */
bool adoption_took(const char *id);

#endif
