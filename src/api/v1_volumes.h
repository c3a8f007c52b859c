/* v1_volumes — /v1/volumes: named volumes (model/volumes.h) created with a size limit, listed,
 * read and deleted; a sandbox mounts them with "volumes" at its creation (v1.c). */
#ifndef CELLBOX_API_V1_VOLUMES_H
#define CELLBOX_API_V1_VOLUMES_H

#include "http/server.h"

/* `name` is the segment after /v1/volumes, or NULL for the collection itself. */
void v1_volumes_route(http_request *request, const char *name);

#endif
