/* descriptors — the share of the daemon's open files that sandboxes, their contexts and their
 * commands may use; the rest is kept for client connections (see daemon/main.c).
 *
 * Called before anything that opens descriptors for a sandbox, so that a burst of sandboxes or
 * commands is refused with words instead of meeting EMFILE in accept() or halfway through a
 * start. */
#ifndef CELLBOX_COMMON_DESCRIPTORS_H
#define CELLBOX_COMMON_DESCRIPTORS_H

#include <stdbool.h>
#include <stddef.h>

/* Called once at start: the open descriptors sandboxes may bring the daemon to; 0 = any. */
void descriptors_set_budget(int budget);
/* True if `needed` more fit in the budget; otherwise false, with `why` naming the numbers and
   what to do (for a 503). */
bool descriptors_available(int needed, char *why, size_t why_size);

#endif
