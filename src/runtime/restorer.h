/* restorer — a zygote's clone turned into the process a process image holds
 * (sandbox/process_image.h), inside its new sandbox.
 *
 * Runs in the kernel process of a restore spawn (runtime/zygote.c), after sandbox_enter and
 * sandbox_supervise: the uid, cgroup, namespaces, no_new_privs, Landlock and seccomp are in force
 * before one instruction of the image runs. It reads the image's header from fd 4, checks that
 * this clone's file mappings are the image's (process_image_fits), plans every step into a
 * scratch mapping at an address free in both layouts, switches to a stack there and runs the
 * plan with raw system calls only — no libc, no globals, no stack protector, since libc's own
 * data is what is being replaced: brk, unmap what the image does not have, map the image's runs
 * (MAP_PRIVATE from the image: copy-on-write, shared by every clone of one image), copy the
 * [stack]'s pages into place, set the protections and the fs base, close fd 4 and jump into the
 * checkpoint point's saved registers (checkpoint_point.h), which finishes the job in C.
 *
 * A failure before the first change to memory exits with RESTORER_FAILED_STATUS after "restore
 * failed: <why>" on fd 2; the daemon reports the kernel dead with that line. */
#ifndef CELLBOX_RUNTIME_RESTORER_H
#define CELLBOX_RUNTIME_RESTORER_H

#define RESTORER_FAILED_STATUS 70
#define RESTORER_IMAGE_FD 4

void restorer_run(int image_fd) __attribute__((noreturn));

#endif
