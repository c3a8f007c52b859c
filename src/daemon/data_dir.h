/* data_dir — one daemon per data directory: DATA_DIR/lock, held with flock(2) for the daemon's
 * lifetime, names the pid that holds it. The lock goes with the process (any death releases
 * it), so a stale lock file never blocks a restart. */
#ifndef CELLBOX_DAEMON_DATA_DIR_H
#define CELLBOX_DAEMON_DATA_DIR_H

#include <stddef.h>

/* Called once at start, before anything is made in the directory: creates it if needed and
   takes its lock. 0, or -1 with a reason that names the holder's pid and what to do. */
int data_dir_lock(const char *data_dir, char *why, size_t why_size);

#endif
