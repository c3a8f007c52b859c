/* snapshot_levels_pending — stand-ins for the process-image and namespace levels of a snapshot
 * (kernel/checkpoint.h, kernel/namespace_transfer.h) until their own files are in this build.
 *
 * Weak symbols: the real kernel/checkpoint.c and kernel/namespace_transfer.c replace them when
 * they are linked in, and this file then goes. Until then every Python context is refused at
 * both levels as a language would be (FAILURE_INVALID), so a snapshot carries it as
 * "restarted": its files kept, a new interpreter. */
#include <stdio.h>

#include "kernel/checkpoint.h"
#include "kernel/namespace_transfer.h"

#define NOT_BUILT "process images are not built into this cellboxd"
#define NAMESPACE_NOT_BUILT "namespace transfer is not built into this cellboxd"

__attribute__((weak)) int kernel_checkpoint(kernel *k, int image_fd, bool full,
                                            kernel_checkpoint_done done, void *arg,
                                            failure_kind *failure, char *why, size_t why_size)
{
    *failure = FAILURE_INVALID;
    snprintf(why, why_size, NOT_BUILT);
    return -1;
}

__attribute__((weak)) bool kernel_image_fits(const kernelspec *spec, int image_fd, char *why,
                                             size_t why_size)
{
    snprintf(why, why_size, NOT_BUILT);
    return false;
}

__attribute__((weak)) kernel_restore_outcome kernel_restore_state(const kernel *k)
{
    return KERNEL_NOT_RESTORED;
}

__attribute__((weak)) json_t *kernel_restore_report(const kernel *k) { return NULL; }

__attribute__((weak)) int kernel_save_namespace(kernel *k, int out_fd, long long max_bytes,
                                                kernel_namespace_done done, void *arg,
                                                failure_kind *failure, char *why, size_t why_size)
{
    *failure = FAILURE_INVALID;
    snprintf(why, why_size, NAMESPACE_NOT_BUILT);
    return -1;
}

__attribute__((weak)) int kernel_load_namespace(kernel *k, int in_fd, kernel_namespace_done done,
                                                void *arg, failure_kind *failure, char *why,
                                                size_t why_size)
{
    *failure = FAILURE_INVALID;
    snprintf(why, why_size, NAMESPACE_NOT_BUILT);
    return -1;
}
