/* registry — what the daemon has made on the host, one record per sandbox, kept in
 * DATA_DIR/sandboxes/<id>.json so that the next daemon on the same data directory knows it after
 * any death (kill -9, a crash, a power cut). A record is written before the sandbox's first piece
 * (uid, volume, cgroup) exists and removed once the last is released; each write replaces the
 * whole file by rename(2), so a reader sees the old record or the new one, never half of one.
 * What the records name is cleaned up at the next start (reconcile.h). */
#ifndef CELLBOX_MODEL_REGISTRY_H
#define CELLBOX_MODEL_REGISTRY_H

#include <jansson.h>
#include <stdbool.h>

/* Called once at start (creates DATA_DIR/sandboxes). 0, or -1 with errno. */
int registry_init(const char *data_dir);
/* Writes the record of sandbox `id` (a kernel id); failures are logged: the sandbox still runs,
   only a later cleanup may miss it. */
void registry_write(const char *id, json_t *record);
void registry_remove(const char *id);
/* Every record on disk: calls `visit` with the id and the record (NULL if unreadable). */
void registry_each(void (*visit)(const char *id, json_t *record, void *arg), void *arg);

#endif
