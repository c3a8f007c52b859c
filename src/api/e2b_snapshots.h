/* e2b_snapshots — E2B's snapshots and forks on its control plane, over model/snapshots.h, so
 * that the SDK's Sandbox.createSnapshot, listSnapshots, deleteSnapshot, fork and
 * Sandbox.create(snapshotId) work unchanged:
 *
 *   POST   /sandboxes/{id}/snapshots {name?}     → 201 SnapshotInfo {snapshotID, names}
 *   GET    /snapshots?sandboxID&name&limit&nextToken → 200 [SnapshotInfo], X-Next-Token
 *   DELETE /templates/{snapshot id}              → 204 (the SDK's deleteSnapshot route)
 *   POST   /sandboxes {templateID: snapshot id}  → 201 the restored sandbox, as a create's
 *   POST   /sandboxes/{id}/fork {count, timeout} → 201 [{sandbox} | {error: {code, message}}]
 *
 * A snapshot's E2B id is its cellbox id; its one name is its cellbox name. Every answer that
 * waits for the model (a snapshot taken, a restore, forks) holds the connection until the
 * model calls back (http_respond_later). */
#ifndef CELLBOX_API_E2B_SNAPSHOTS_H
#define CELLBOX_API_E2B_SNAPSHOTS_H

#include <jansson.h>
#include <stdbool.h>

#include "http/server.h"
#include "model/box.h"

/* POST /sandboxes/{id}/snapshots and POST /sandboxes/{id}/fork, for running sandbox b. */
void e2b_snapshots_create(http_request *request, box *b);
void e2b_snapshots_fork(http_request *request, box *b);

/* GET /snapshots (also under /v2), and DELETE /templates/{id} when id names a snapshot. True
   when the path is one of these and it was answered. */
bool e2b_snapshots_route(http_request *request);

/* The snapshot a create's templateID names (by id, or by name: the newest of that name), a new
   reference; NULL when it names none. The caller asks only for an id that names no template. */
json_t *e2b_snapshots_find(const char *template_id);

/* What POST /sandboxes carries over to a restored sandbox. */
typedef struct e2b_restore_request {
    int timeout_s;         /* seconds it lives */
    json_t *metadata;      /* borrowed, may be NULL */
    json_t *env;           /* borrowed, may be NULL */
    bool pause_at_timeout; /* E2B's lifecycle */
    bool auto_resume;
} e2b_restore_request;

/* Answers POST /sandboxes {templateID: a snapshot}: a new sandbox restored from snapshot_id,
   answered as a create is (e2b_connection_model) once it runs. */
void e2b_snapshots_restore(http_request *request, const char *snapshot_id,
                           const e2b_restore_request *restore);

#endif
