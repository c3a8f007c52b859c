/* e2b_volumes — E2B's volumes on its control plane, so that the SDK's `Volume` class and
 * `volumeMounts` at Sandbox.create work unchanged: /volumes (create, list) and /volumes/{id}
 * (getInfo, destroy) over model/volumes.h, and the volume content API (/volumecontent/{id}/...:
 * e2b_volume_content.h). A cellbox volume's ID is its name. */
#ifndef CELLBOX_API_E2B_VOLUMES_H
#define CELLBOX_API_E2B_VOLUMES_H

#include <stdbool.h>

#include "common/failure.h"
#include "http/server.h"
#include "model/volumes.h"

/* /volumes... or /volumecontent...? */
bool e2b_volumes_owns(const char *path);
void e2b_volumes_route(http_request *request);

/* A create's volumeMounts, [{"name", "path"}, ...], into `mounts` (emptied first); absent or
   null: none. -1 with a kind and `why`. */
int e2b_volumes_from_request(json_t *volume_mounts, rootfs_volumes *mounts, failure_kind *failure,
                             char *why, size_t why_size);
/* [{"name", "path"}, ...] of sandbox `b`'s mounts, for its model. */
json_t *e2b_volumes_mounts_model(json_t *native_volumes);

#endif
