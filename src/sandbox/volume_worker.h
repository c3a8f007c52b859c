/* volume_worker — ext4 workspace volumes made and removed by a helper process, off the daemon's
 * loop.
 *
 * Why: making an ext4 volume (an image copy, a loop device, a mount that reads the new
 * filesystem's metadata through it) and removing one (unmount, discard, unlink) wait on the
 * block layer. Measured in the daemon's loop on the dev VM while two clients created and deleted
 * sandboxes without pause: 5.9 ms p50 / 12 ms p90 per creation and 1.1 / 5.2 ms per removal,
 * 18 % of the loop's time, during which no other session was served.
 *
 * The helper is forked from the daemon at start (the daemon has one thread), lives in the
 * daemon's mount namespace (its mounts are the daemon's), and does one job at a time, in the
 * order sent: a removal sent after a creation of the same volume undoes it. Removals are sent
 * and forgotten; a creation is answered through the loop. While no helper runs (it could not
 * start, or died) every call says so and the caller does the work itself, as before. */
#ifndef CELLBOX_SANDBOX_VOLUME_WORKER_H
#define CELLBOX_SANDBOX_VOLUME_WORKER_H

#include <stdbool.h>
#include <sys/types.h>

#include "sandbox/volume.h"

/* The outcome of volume_worker_create: `ok`, or why not (the volume is then not there). */
typedef void (*volume_made)(void *arg, bool ok, const char *why);

/* Forks the helper; 0, or -1 (the work stays in the daemon). */
int volume_worker_start(void);
bool volume_worker_running(void);
/* Sends a creation (as volume_create); `done` runs later in the loop, exactly once, unless the
   daemon stops first. false: not sent, nothing will run (no helper: call volume_create). */
bool volume_worker_create(volume_kind kind, const char *image, const char *mount_point,
                          long long bytes, uid_t uid, gid_t gid, volume_made done, void *arg);
/* As volume_destroy, by the helper if it runs (not waited for), else here and now. */
void volume_worker_destroy(const char *image, const char *mount_point, int keep);
/* At shutdown: lets the helper finish every job sent and waits for it to exit (at most 30 s,
   then kills it). Answers not read by then are dropped. */
void volume_worker_stop(void);

#endif
