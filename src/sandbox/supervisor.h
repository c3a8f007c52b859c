/* supervisor — pid 1 of every sandbox: `cellbox-init --supervise=PID` (src/runtime/init_main.c).
 *
 * The sandbox's first process forks the program (the kernel) and then replaces its own image
 * with this small static program, so no copy of the daemon's or the zygote's memory stays
 * readable inside the sandbox, and pid 1 costs a few pages instead of an interpreter's. */
#ifndef CELLBOX_SANDBOX_SUPERVISOR_H
#define CELLBOX_SANDBOX_SUPERVISOR_H

#include <sys/types.h>

/* The supervisor program, as seen inside the sandbox. */
#define SUPERVISOR_PATH "/opt/cellbox/bin/cellbox-init"

/* Reaps every child (orphans of the namespace included) and exits as `program` did: its exit
   status, or 128 + the signal that killed it. */
void supervisor_reap_until(pid_t program) __attribute__((noreturn));

#endif
