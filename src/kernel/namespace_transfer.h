/* namespace_transfer — a Python kernel's variables carried at the Python level, with Debian's
 * python3-dill: the fallback where a process image cannot be restored (the zygote's build
 * changed since the checkpoint), reporting name by name what was and was not carried.
 *
 * Verbs: kernel_save_namespace (the kernel pickles each name of its user namespace into a file
 * the daemon keeps), kernel_load_namespace (a new kernel loads them back). The bytes cross the sandbox's edge in memfds the kernel makes and
 * the daemon takes with pidfd_getfd (docs/kernel-protocol.md, "Namespace transfer"). */
#ifndef CELLBOX_KERNEL_NAMESPACE_TRANSFER_H
#define CELLBOX_KERNEL_NAMESPACE_TRANSFER_H

#include <jansson.h>

#include "common/failure.h"
#include "kernel/kernel.h"

/* `report` (borrowed): {"carried": ["df", "model", ...], "not_carried": [{"name": "gen",
   "why": "cannot pickle 'generator' object"}], "bytes": N}. NULL with `why` on failure. */
typedef void (*kernel_namespace_done)(void *arg, json_t *report, failure_kind failure,
                                      const char *why);

/* The idle kernel k pickles its namespace, name by name, into out_fd (a file of the daemon's,
   outside the sandbox, written from offset 0; at most `max_bytes`: past it, names are reported
   "not carried: the namespace is over N bytes"). -1 with `failure` when k is busy, starting or
   not Python. `done` from the loop, never before this returns. */
int kernel_save_namespace(kernel *k, int out_fd, long long max_bytes, kernel_namespace_done done,
                          void *arg, failure_kind *failure, char *why, size_t why_size);

/* The idle kernel k loads what kernel_save_namespace wrote (in_fd, from offset 0) into its
   namespace; the report says what was loaded and what was not. */
int kernel_load_namespace(kernel *k, int in_fd, kernel_namespace_done done, void *arg,
                          failure_kind *failure, char *why, size_t why_size);

#endif
