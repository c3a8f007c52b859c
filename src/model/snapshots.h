/* snapshots — a sandbox's state kept on the daemon's disk, and what is made from it: a
 * snapshot (every context's live process, or its namespace, its files, its settings), a
 * restore (a new sandbox, or the same one rewound), a fork (N new sandboxes from one running
 * sandbox, in memory), hibernation (a sandbox kept only as a snapshot, woken by its next
 * request, across daemon restarts).
 *
 * On disk: DATA_DIR/snapshots/<snapshot id>/ holds `snapshot.json` (the model, the sandbox's
 * settings, each context's image and how it was carried), one process image per Python context
 * (sandbox/process_image.h), a namespace file per context (kernel/namespace_transfer.h), the
 * workspace image, and `seal`: an HMAC-SHA256 of all of them under the daemon's key
 * (DATA_DIR/snapshot.key, 0600). A snapshot whose seal does not match is refused, whole.
 *
 * Verbs: snapshot_create, snapshot_list, snapshot_get, snapshot_delete, snapshot_restore,
 * box_fork, box_hibernate, box_wake, box_is_hibernated, snapshots_init. */
#ifndef CELLBOX_MODEL_SNAPSHOTS_H
#define CELLBOX_MODEL_SNAPSHOTS_H

#include <jansson.h>
#include <stdbool.h>

#include "common/failure.h"
#include "model/box.h"

/* The snapshot model, as /v1 answers it:
   {"snapshot_id", "sandbox_id", "name", "created_at" (RFC 3339), "metadata", "template",
    "bytes": {"memory", "files", "namespace"},
    "contexts": [{"context_id", "language", "carried": "process" | "python" | "restarted",
                  "report": {...}}]}
   A context is carried as "process" (its live process image), "python" (only its namespace:
   the report names what was and was not carried), or "restarted" (a language whose live state
   cannot be imaged: a new kernel, its files kept). */

/* `result` (borrowed): for snapshot_create the snapshot model; for snapshot_restore and
   box_wake the sandbox's model with "restore": {per-context reports}; for box_fork an array of
   `count` entries, each {"sandbox": model} or {"error": {"status", "message"}}. NULL with
   `failure` and `why` when it failed as a whole. */
typedef void (*snapshot_done)(void *arg, json_t *result, failure_kind failure, const char *why);

/* Opens the store (creates DATA_DIR/snapshots and the key), finds hibernated sandboxes left by
   an earlier daemon and lists them again as "hibernated". -1 with `why`. */
int snapshots_init(const char *data_dir, char *why, size_t why_size);

/* Snapshots running box b; `name` may be NULL (then the id), `metadata` borrowed, may be NULL.
   b goes on running. A full disk fails the snapshot (FAILURE_EXHAUSTED, nothing half-written
   kept) and loses nothing of b. Async: `done` from the loop, never before this returns; -1 with
   `failure` when it cannot start (b dead, paused, starting; a context busy: FAILURE_CONFLICT). */
int snapshot_create(box *b, const char *name, json_t *metadata, snapshot_done done, void *arg,
                    failure_kind *failure, char *why, size_t why_size);
json_t *snapshot_list(const char *sandbox_id); /* new reference; sandbox_id NULL: every one */
json_t *snapshot_get(const char *snapshot_id); /* new reference, NULL when there is none */
/* As snapshot_get, NULL with `failure` and `why`: FAILURE_NOT_FOUND when there is none,
   FAILURE_FORBIDDEN when its description was changed outside cellbox and no longer parses. */
json_t *snapshot_find(const char *snapshot_id, failure_kind *failure, char *why, size_t why_size);
/* -1 with FAILURE_NOT_FOUND, or FAILURE_CONFLICT while a hibernated sandbox still needs it. */
int snapshot_delete(const char *snapshot_id, failure_kind *failure, char *why, size_t why_size);

/* A sandbox from a snapshot. `options` (borrowed, may be NULL): {"sandbox_id": the snapshot's
   own sandbox, still there: rewind it in place (its contexts and files replaced, its id, URL and
   token kept); absent: a new sandbox with a new id}, "timeout" (seconds), "metadata", "env"}.
   FAILURE_NOT_FOUND, FAILURE_FORBIDDEN "the snapshot's seal does not match: it was changed
   outside cellbox" (tampered), FAILURE_EXHAUSTED (no room for another sandbox). The seal is
   checked on a worker thread before anything starts, so a tampered snapshot is refused through
   `done`, never by the -1 (which is left to a snapshot that does not exist). */
int snapshot_restore(const char *snapshot_id, json_t *options, snapshot_done done, void *arg,
                     failure_kind *failure, char *why, size_t why_size);

/* `count` (1..16) new sandboxes, each a copy of running box b's live contexts and files,
   isolated from b and from each other; b stands still only while its memory is read. Nothing
   is written to disk (the images live in memory while the forks start). `options` as for
   snapshot_restore, without "sandbox_id". */
int box_fork(box *b, int count, json_t *options, snapshot_done done, void *arg,
             failure_kind *failure, char *why, size_t why_size);

/* Snapshots b to disk, then ends its processes and frees its memory: b stays listed, in state
   "hibernated", with only its files and snapshot kept (across daemon restarts). */
int box_hibernate(box *b, snapshot_done done, void *arg, failure_kind *failure, char *why,
                  size_t why_size);
/* Restores a hibernated b in place (same id); a request to a hibernated sandbox calls this
   first. */
int box_wake(box *b, snapshot_done done, void *arg, failure_kind *failure, char *why,
             size_t why_size);
bool box_is_hibernated(const box *b);
/* --hibernate-idle=SECONDS: a running sandbox whose contexts have all been idle that long, with
   no client connected, hibernates (0: never, the default). Called once at start. */
void snapshots_set_hibernate_idle(int seconds);

#endif
