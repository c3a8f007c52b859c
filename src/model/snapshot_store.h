/* snapshot_store — the snapshots' folder on the daemon's disk and its seal: where each
 * snapshot's files go while it is written (DATA_DIR/snapshots/<id>.partial), how it becomes one
 * (snapshot.json and the seal written, every file fsync'd, the folder renamed: a snapshot is
 * there whole or not at all), and how one is read back (its seal checked first).
 *
 * The seal is an HMAC-SHA256, under the daemon's key (DATA_DIR/snapshot.key, 0600, made once),
 * over every file of the snapshot in name order: its path, its size, and the data of each of its
 * data extents with their offsets (the images are sparse: a hole is hashed as its position, not
 * as gigabytes of zeros). A process image is code the restorer jumps into, so a file changed
 * outside cellbox must never be restored: a snapshot whose seal does not match is refused whole.
 *
 * Used by snapshots.c and hibernate.c only. */
#ifndef CELLBOX_MODEL_SNAPSHOT_STORE_H
#define CELLBOX_MODEL_SNAPSHOT_STORE_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "common/failure.h"

#define SNAPSHOT_DESCRIPTION "snapshot.json"
#define SNAPSHOT_SEAL "seal"

/* Called once at start: the folder (partial snapshots a dead daemon left are removed) and the
   key (made with 32 random bytes if there is none; refused if others may read it). */
int snapshot_store_init(const char *data_dir, char *why, size_t why_size);

/* The folder a snapshot is written into, made empty (0700): DATA_DIR/snapshots/<id>.partial.
   0, or -1 with `why`. */
int snapshot_store_begin(const char *id, char *out, size_t size, char *why, size_t why_size);
/* Writes `description` (JSON text) as snapshot.json, seals, fsyncs and renames the partial
   folder to the snapshot's. 0, or -1 with errno (ENOSPC for a full disk) and `why`; the caller
   then removes the partial folder (snapshot_store_abort, on the loop). It reads whole files
   through the HMAC, so it runs on a worker thread (common/worker.h): it touches only the
   folder's files, the key (fixed once snapshot_store_init returned) and its own memory, and
   logs nothing. */
int snapshot_store_commit(const char *id, const char *description, char *why, size_t why_size);
void snapshot_store_abort(const char *id); /* removes the partial folder */

/* DATA_DIR/snapshots/<id>[/<name>]; false when id is not a snapshot id (a UUID). */
bool snapshot_store_path(const char *id, const char *name, char *out, size_t size);
/* The snapshot's description (new reference). With `verify`, the seal is checked first:
   FAILURE_FORBIDDEN when it does not match. NULL with FAILURE_NOT_FOUND for no such snapshot. */
json_t *snapshot_store_load(const char *id, bool verify, failure_kind *failure, char *why,
                            size_t why_size);
/* Does the snapshot's seal match its files? 0, or -1 with `why` (a snapshot changed outside
   cellbox, or removed meanwhile). It reads every file through the HMAC, so a restore runs it on
   a worker thread (common/worker.h): like snapshot_store_commit, it touches only the files, the
   key and its own memory. */
int snapshot_store_check_seal(const char *id, char *why, size_t why_size);
/* Each snapshot's description, in no particular order (unsealed reads: a listing). */
void snapshot_store_each(void (*visit)(const char *id, json_t *description, void *arg), void *arg);
int snapshot_store_remove(const char *id); /* 0, or -1 with errno (ENOENT: none) */

#endif
