/* keeper — a small long-lived process that holds a duplicate of the daemon's end of every
 * handed-out kernel's channel and output pipes, so that a kernel sees no end of file when its
 * daemon dies (kill -9, a crash, a restart for an upgrade) and the next daemon on the same data
 * directory can take them back (docs/architecture.md, "Restarts and adoption").
 *
 * It is forked by the first daemon on a data directory, leaves the daemon's process group
 * (setsid), has no parent-death signal and listens on DATA_DIR/keeper.sock (root only: the data
 * directory is 0700; peers of another uid are refused). It serves one daemon at a time, holds
 * nothing but descriptors, and exits when told to (a stop that ends every sandbox) or when its
 * daemon goes away while it holds nothing. Its pid is in DATA_DIR/keeper.pid. */
#ifndef CELLBOX_KERNEL_KEEPER_H
#define CELLBOX_KERNEL_KEEPER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/ids.h"

#define KEEPER_FDS 3 /* a kernel's channel, stdout and stderr: the daemon's ends */

typedef struct keeper_entry {
    char id[UUID_STRING_LENGTH + 1];
    int fds[KEEPER_FDS]; /* ours now (-1 where none came) */
} keeper_entry;

/* Called once at start, after the data directory is locked: connects to the keeper a previous
   daemon left, or starts one. 0, or -1 (then nothing is held and nothing survives us). */
int keeper_start(const char *data_dir);
/* Whether a keeper holds what we give it: without one, what would outlive the daemon for
   nothing (a command, another context) dies with it instead. */
bool keeper_running(void);
/* Every kernel's descriptors the keeper holds (it keeps its own copies), and when the daemon
   that gave them went away (wall-clock µs; 0 if unknown); the caller closes the fds it does not
   use and frees the array. Called once, right after keeper_start. */
size_t keeper_take_all(keeper_entry **out, int64_t *daemon_gone_at_us);
/* Replaces what the keeper holds for kernel `id` by duplicates of `fds` (-1 for none). */
void keeper_hold(const char *id, const int fds[KEEPER_FDS]);
void keeper_drop(const char *id);
/* At exit. Stop: nothing is to survive, the keeper exits. Detach: it keeps what it holds for the
   next daemon. */
void keeper_stop(void);
void keeper_detach(void);

#endif
