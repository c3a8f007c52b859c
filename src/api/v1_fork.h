/* v1_fork — POST /v1/sandboxes/{id}/fork {"count": 1..16, "timeout"?, "metadata"?}: copies of a
 * running sandbox's live state (model/snapshots.h, box_fork), answered 201 with one entry per
 * fork, {"sandbox": model} or {"error": {"status", "message"}}, once every fork has started. */
#ifndef CELLBOX_API_V1_FORK_H
#define CELLBOX_API_V1_FORK_H

#include "http/server.h"
#include "model/box.h"

void v1_fork(http_request *request, box *b);

#endif
