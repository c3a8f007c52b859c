/* zygote — the daemon's side of the preloaded interpreter new Python sandboxes are cloned from
 * (src/runtime/zygote.c), one per template (kernelspec), each with its own preload list. Started
 * once; while it is not ready (its imports take a second or two) or after it died, kernels start
 * by exec instead, so nothing waits for it. */
#ifndef CELLBOX_KERNEL_ZYGOTE_H
#define CELLBOX_KERNEL_ZYGOTE_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include "sandbox/sandbox.h"

typedef struct zygote zygote;

typedef struct kernelspec kernelspec;

/* Starts a zygote process importing the template's preload list (comma-separated module names);
   its caches (matplotlib's font list, IPython's directory) live in `cache_dir`. A template with a
   view runs its zygote inside it (its /usr, and its /etc for an imported root), with the
   template's variables, so that what it preloads is the template's and its clones start from
   the same root an exec'd kernel of that template gets. */
zygote *zygote_start(const kernelspec *spec, const char *cache_dir, bool huge_code_pages);
bool zygote_is_ready(const zygote *z); /* false for NULL: no zygote (--zygote=false) */
/* The ready zygote's pid (a diff image's base: kernel/checkpoint.c), 0 when none is ready. */
pid_t zygote_process(const zygote *z);
typedef struct zygote_spawn zygote_spawn;
/* A clone request's answer: `pid` > 0 is the new sandbox's first process (a child of the
   daemon's, thanks to CLONE_PARENT); -1 says `why` it failed (the zygote refused, ended, or did
   not answer in time). Not called for an abandoned request. */
typedef void (*zygote_spawned)(void *arg, pid_t pid, const char *why);
/* Asks the zygote to clone a new sandbox running the kernel and returns at once: the loop goes
   on while the zygote sets the sandbox up, and `done` gets the answer. spec->fds are duplicated
   (the caller closes its own). NULL, with `why`, if the zygote is not ready. */
zygote_spawn *zygote_spawn_start(zygote *z, const sandbox_spec *spec, const char *for_kernel_id,
                                 zygote_spawned done, void *arg, char *why, size_t why_size);
/* The requester is gone (its kernel deleted while the zygote clones it): a request still queued
   is dropped; one sent is waited for (the loop blocks, briefly) and its clone killed and reaped,
   so that the caller releases the volume and cgroup only once no sandbox is being set up on
   them. `done` is not called. */
void zygote_spawn_abandon(zygote_spawn *spawn);
/* At exit: the clones still being answered are killed, then the zygote; `z` is freed. */
void zygote_stop(zygote *z);

#endif
