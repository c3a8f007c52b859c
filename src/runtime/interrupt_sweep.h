/* interrupt_sweep — finishing an interrupt that the kernel's process group did not all take
 * (docs/languages.md "Bash"). cellboxd interrupts a kernel with one SIGINT to its whole group;
 * a program that a shell is starting at that moment can miss it: bash blocks SIGINT around
 * fork(), and the child's pending signals are cleared by fork, or the child still runs the
 * shell's handler until it execs. Such a program runs on as if nothing had been asked. A process
 * of the group that is alive with SIGINT at its default action (not caught, not ignored, not
 * pending) cannot have taken the interrupt: this module sends it the SIGINT it missed. */
#ifndef CELLBOX_RUNTIME_INTERRUPT_SWEEP_H
#define CELLBOX_RUNTIME_INTERRUPT_SWEEP_H

#include <stdbool.h>
#include <sys/types.h>

/* What one sweep of this process's group did. */
typedef struct interrupt_sweep_result {
    int signalled; /* processes sent the SIGINT they missed */
    int forking;   /* children of `shell` still running the shell's own code after fork (not yet
                      exec'd): they may miss it yet, so the caller sweeps again */
} interrupt_sweep_result;

/* Sends SIGINT to every process of the caller's process group, but the caller, its parent and
   `shell`, that has SIGINT at its default action and not pending; counts the children of `shell`
   still between fork and exec. Reads /proc; a process that ends meanwhile is skipped. */
interrupt_sweep_result interrupt_sweep(pid_t shell);

#endif
