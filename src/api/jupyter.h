/* jupyter — the Jupyter Kernel Gateway REST API: /api, kernelspecs, kernels and the channels
 * upgrade (sessions are sessions.c). Status codes and error bodies follow Kernel Gateway 3.
 * routes.c hands it the requests it owns. */
#ifndef CELLBOX_API_JUPYTER_H
#define CELLBOX_API_JUPYTER_H

#include <stdbool.h>

#include "http/server.h"

typedef struct jupyter_options {
    bool list_kernels;
} jupyter_options;

/* Once at start: keeps the options and sets the manager's delete hook (channels, sessions and
   the /v1 record hear of every kernel that goes). */
void jupyter_init(const jupyter_options *options);

/* /api and below except /api/sessions; `segments` (count of them) start with "api". */
void jupyter_route_api(http_request *request, char **segments, int count);
/* /kernelspecs/{name}/{file}: a kernelspec's resources (its logos). */
void jupyter_route_kernelspec_resource(http_request *request, const char *name, const char *file);

#endif
