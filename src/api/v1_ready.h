/* v1_ready — a sandbox ready for a call: one that must be running (a paused one resumed when the
 * client asks), and a creation answered once the sandbox's kernel has started. Shared by /v1's
 * routes (v1.c, v1_contexts.c, v1_commands.c) and E2B's (e2b.c). */
#ifndef CELLBOX_API_V1_READY_H
#define CELLBOX_API_V1_READY_H

#include <jansson.h>
#include <stdbool.h>

#include "http/server.h"
#include "model/box.h"

/* A sandbox that must be running for this call: a paused one is resumed with ?auto_resume=true,
   else 409 names the state (as for a dead one). False after answering. */
bool v1_require_running(http_request *request, box *b);

/* A call into a hibernated sandbox (model/snapshots.h): the sandbox is woken and the request,
   held meanwhile, dispatched again from the top once it is awake (an error if it cannot wake;
   503 with Retry-After for an upload whose body streams). Always false: answered later. */
bool v1_wake_then_dispatch(http_request *request, box *b);

/* Answers a sandbox's creation with 201 and `answer` (stolen; NULL: the sandbox's model) once
   its kernel k has started, so that the client's next call finds it ready. */
void v1_respond_when_ready(http_request *request, kernel *k, json_t *answer);

#endif
