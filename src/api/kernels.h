/* kernels — a Kernel Gateway kernel made from a request body ({"name", "env", "limits",
 * "network"}) and deleted again: shared by POST /api/kernels (jupyter.c) and the kernels that
 * POST /api/sessions starts or a session's DELETE ends (sessions.c), so that both answer alike. */
#ifndef CELLBOX_API_KERNELS_H
#define CELLBOX_API_KERNELS_H

#include <jansson.h>

#include "http/server.h"
#include "kernel/kernel.h"

/* A new kernel of kernelspec body.name (the default when absent or empty), with the body's
   KERNEL_* variables, limits and network; NULL after answering why not (400, or the manager's
   status). */
kernel *kernels_create(http_request *request, json_t *body);
/* Shuts it down; the manager's delete hook (set by jupyter_init) tells channels and sessions. */
void kernels_delete(kernel *k);

#endif
