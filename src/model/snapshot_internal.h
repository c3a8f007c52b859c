/* snapshot_internal — what the files behind model/snapshots.h share: snapshots.c (taking one,
 * the store's verbs), snapshot_restore.c (a sandbox made or rewound from one) and hibernate.c
 * (a sandbox kept only as one). Nothing outside those three includes it. */
#ifndef CELLBOX_MODEL_SNAPSHOT_INTERNAL_H
#define CELLBOX_MODEL_SNAPSHOT_INTERNAL_H

#include <jansson.h>
#include <stdbool.h>

#include "model/snapshots.h"

#define SNAPSHOT_MAX_CONTEXTS 32 /* contexts of one sandbox a snapshot carries */

/* snapshot_create's work; `hibernation` marks the snapshot as the one a hibernated sandbox
   wakes from (shown in its model; removed once it woke). */
int snapshot_take(box *b, const char *name, json_t *metadata, bool hibernation, snapshot_done done,
                  void *arg, failure_kind *failure, char *why, size_t why_size);

/* snapshot_restore.c: called once by snapshots_init. */
void snapshot_restore_init(const char *data_dir);
/* Puts snapshot_id's contexts back into box b in place: every context of b ends, its files are
   replaced by the snapshot's unless `keep_files` (a hibernated box's files never left), its
   default context restarts and the others are started again, each carried as the snapshot and
   the live zygote allow. The seal is checked first, on a worker thread: nothing of b changes
   before it matched, and b is found again by id afterwards (one deleted meanwhile: `done` with
   FAILURE_CONFLICT). `done` as for snapshot_restore. */
int snapshot_restore_in_place(const char *snapshot_id, box *b, bool keep_files, snapshot_done done,
                              void *arg, failure_kind *failure, char *why, size_t why_size);
/* A new sandbox from snapshot_id with id `sandbox_id` (NULL: a new one), as snapshot_restore;
   hibernate.c gives the id of a hibernated sandbox an earlier daemon left: then only its files
   and settings are restored, its contexts start as new interpreters with no state loaded (they
   are ended at once; its wake loads the state). Its seal is checked here, on the loop (at
   start, before the daemon serves). */
int snapshot_restore_new(const char *snapshot_id, const char *sandbox_id, json_t *options,
                         snapshot_done done, void *arg, failure_kind *failure, char *why,
                         size_t why_size);

/* hibernate.c: called once by snapshots_init (E2B's onTimeout 'pause' hibernates; sandboxes an
   earlier daemon left hibernated are listed again; the idle timer). */
void hibernation_init(void);

#endif
