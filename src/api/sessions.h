/* sessions — Jupyter's /api/sessions: a named binding of a path to a kernel, which a session's
 * POST may start (as POST /api/kernels does) and its DELETE shuts down. */
#ifndef CELLBOX_API_SESSIONS_H
#define CELLBOX_API_SESSIONS_H

#include "http/server.h"
#include "kernel/kernel.h"

/* /api/sessions (session_id NULL: GET lists, POST creates) and /api/sessions/{id} (GET, PATCH,
   DELETE). */
void sessions_route(http_request *request, const char *session_id);
/* After kernel k went (the manager's delete hook): the sessions bound to it go too. */
void sessions_kernel_deleted(kernel *k);

#endif
