/* manager — every kernel the daemon runs: creation within limits, lookup by id, workspaces,
 * deletion, and idle culling with jupyter_server's semantics. */
#ifndef CELLBOX_KERNEL_MANAGER_H
#define CELLBOX_KERNEL_MANAGER_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "kernel/kernel.h"

typedef struct manager_options {
    const char *data_dir;       /* workspaces live in DATA_DIR/workspaces/<kernel id> */
    const char *default_kernel;
    int max_kernels;            /* 0 = unlimited */
    bool keep_workspaces;
    int cull_idle_timeout;      /* seconds; 0 = never cull */
    int cull_interval;          /* seconds between culling passes */
    bool cull_connected, cull_busy;
} manager_options;

void manager_init(const manager_options *options);
/* Creates a kernel; on failure returns NULL with an HTTP status (403 at the limit, 404 for an
   unknown kernelspec, 500 otherwise) and a message. `env` entries must already be checked. */
kernel *manager_create(const char *spec_name, json_t *env, int *status, char *why, size_t why_size);
kernel *manager_find(const char *id);
void manager_delete(kernel *k);
size_t manager_count(void);
kernel *manager_at(size_t index);
json_t *manager_kernel_model(const kernel *k);
const char *manager_default_kernel(void);
/* Called before a kernel is deleted, so that connections and sessions let go of it. */
void manager_set_delete_hook(void (*hook)(kernel *k));
void manager_shutdown_all(void);

#endif
