/* culling — idle kernels deleted with jupyter_server's semantics (--cull-idle-timeout and
 * friends): dead kernels go on every pass; a live one once it has been idle longer than the
 * timeout, unless a connection (without cull_connected) or a running cell (without cull_busy)
 * protects it. */
#ifndef CELLBOX_MODEL_CULLING_H
#define CELLBOX_MODEL_CULLING_H

#include <stdbool.h>

typedef struct culling_options {
    int idle_timeout;    /* seconds; 0 = never cull */
    int interval;        /* seconds between passes; 0 = 300 */
    bool cull_connected; /* a connection does not protect a kernel */
    bool cull_busy;      /* a running cell does not protect a kernel */
} culling_options;

/* Called once at start, after manager_init: passes every `interval` from now on (none with an
   idle_timeout of 0). */
void culling_start(const culling_options *options);

#endif
