/* jupyter — the Jupyter Kernel Gateway REST API: /api, kernelspecs, kernels, sessions, and the
 * channels upgrade. Status codes and error bodies follow Kernel Gateway 3. */
#ifndef CELLBOX_API_JUPYTER_H
#define CELLBOX_API_JUPYTER_H

#include <jansson.h>
#include <stdbool.h>

#include "http/server.h"
#include "kernel/kernel.h"

typedef struct jupyter_options {
    bool list_kernels;
} jupyter_options;

void jupyter_init(const jupyter_options *options);
void jupyter_dispatch(http_request *request);

/* Shared with sessions.c. */
json_t *jupyter_parse_body(http_request *request); /* NULL after answering 400 */
kernel *jupyter_create_kernel(http_request *request, json_t *body); /* NULL after answering */
void jupyter_delete_kernel(kernel *k);

#endif
