/* zygote — the daemon's side of the preloaded interpreter new Python sandboxes are cloned from
 * (src/runtime/zygote.c). Started once; while it is not ready (its imports take a second or
 * two) or after it died, kernels start by exec instead, so nothing waits for it. */
#ifndef CELLBOX_KERNEL_ZYGOTE_H
#define CELLBOX_KERNEL_ZYGOTE_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include "sandbox/sandbox.h"

/* Starts the zygote process importing `preload` (comma-separated module names); its caches
   (matplotlib's font list) live in `cache_dir`. */
void zygote_start(const char *preload, const char *cache_dir);
bool zygote_is_ready(void);
/* Clones a new sandbox running the kernel; returns its pid (a child of the daemon's) or -1. */
pid_t zygote_spawn(const sandbox_spec *spec, const char *kernel_id, char *why, size_t why_size);
void zygote_stop(void);

#endif
