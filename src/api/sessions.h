/* sessions — Jupyter's /api/sessions: a named binding of a path to a kernel. */
#ifndef CELLBOX_API_SESSIONS_H
#define CELLBOX_API_SESSIONS_H

#include "http/server.h"
#include "kernel/kernel.h"

/* Handles /api/sessions and /api/sessions/{id}; `segments` follow "sessions". */
void sessions_route(http_request *request, const char *session_id);
void sessions_kernel_deleted(kernel *k);

#endif
