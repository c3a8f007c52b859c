/* v1_snapshots — /v1's snapshots and hibernation (docs/api.md, "Snapshots"): a running
 * sandbox's snapshot (POST /v1/sandboxes/{id}/snapshots), the list, one, its deletion, a restore
 * into a new sandbox or its own rewound (POST /v1/snapshots/{sid}/restore, or POST /v1/sandboxes
 * with "snapshot_id"), and hibernation (POST /v1/sandboxes/{id}/hibernate; /resume wakes). */
#ifndef CELLBOX_API_V1_SNAPSHOTS_H
#define CELLBOX_API_V1_SNAPSHOTS_H

#include <jansson.h>

#include "http/server.h"
#include "model/box.h"

/* /v1/snapshots[/{sid}[/restore]]: s[0] = "v1", s[1] = "snapshots", n segments. */
void v1_snapshots_route(http_request *request, char **s, int n);
/* POST /v1/sandboxes/{id}/snapshots */
void v1_snapshot_sandbox(http_request *request, box *b);
/* POST /v1/sandboxes/{id}/hibernate, and /resume of a hibernated one */
void v1_hibernate_sandbox(http_request *request, box *b);
void v1_wake_sandbox(http_request *request, box *b);
/* POST /v1/sandboxes with "snapshot_id": `body` (borrowed) has been checked for its fields. */
void v1_create_from_snapshot(http_request *request, json_t *body);

#endif
