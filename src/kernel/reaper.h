/* reaper — the processes the daemon killed and no longer cares about (a deleted kernel's
 * sandbox, a command's process, a clone the zygote made for a kernel that went away) are still
 * its children and have to be reaped, or they stay zombies. kernel.c, zygote.c and the model's
 * commands hand them here; nothing here knows what they were. */
#ifndef CELLBOX_KERNEL_REAPER_H
#define CELLBOX_KERNEL_REAPER_H

/* While the loop runs: takes a pidfd of a killed child (and closes it) once the child exited. */
void reaper_take(int pidfd);
/* At exit, after the loop stopped: waits for every child still taken (a few seconds at most). */
void reaper_wait_all(void);

#endif
