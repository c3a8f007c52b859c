/* channels — the WebSocket at /api/kernels/{id}/channels: clients in, kernel messages out.
 *
 * Replies on shell/control/stdin go only to the connection whose session sent the request; iopub
 * goes to every connection of the kernel. A second connection with the same session_id replaces
 * the first, as in jupyter_server. */
#ifndef CELLBOX_API_CHANNELS_H
#define CELLBOX_API_CHANNELS_H

#include <stddef.h>

#include "http/server.h"
#include "kernel/kernel.h"

void channels_init(size_t max_message_size);
/* Answers the upgrade request for kernel `k` (auth already checked). */
void channels_accept(http_request *request, kernel *k);
/* Disconnects every connection of a kernel that is being deleted. */
void channels_kernel_deleted(kernel *k);

#endif
