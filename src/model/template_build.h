/* template_build — a template built from a Dockerfile (dockerfile.h), without a Docker engine:
 * each RUN runs in a build sandbox and what it changed becomes a layer (templates.h).
 *
 * template_build_start checks everything that can be known before a step runs (the Dockerfile,
 * the name, FROM, every COPY source) and plans the steps: their variables substituted, their
 * cache keys computed. A layer step's key is the SHA-256 of its parent's key, the instruction as
 * normalized, the ENV/ARG/WORKDIR/USER state at that point and, for COPY/ADD, the names, modes
 * and contents of its sources; a layer whose key exists is reused ("cached"). Then the steps
 * run one after the other from the loop, which keeps serving everything else:
 *
 *   RUN       templates_layer_begin -> templates_mount_build_view (the earlier layers, the new
 *             one as the writable upper) -> sandbox_start: the cell's isolation (its own uid,
 *             cgroup with memory/pids/CPU limits, seccomp, Landlock, namespaces; a network
 *             interface with the build's allowOut/denyOut when the daemon allows network), the
 *             program /bin/sh -c TEXT (or the exec form's argv) with stdout and stderr on one
 *             pipe the loop reads -> exit -> unmount -> templates_layer_commit, or discard.
 *   COPY/ADD  the sources copied by the daemon from the extracted context into the new layer,
 *             never following a symlink (a symlink is copied as one), files root's with their
 *             permission bits (no setuid/setgid), ADD of a local tar extracted; then committed.
 *   others    change the state (ENV, ARG, WORKDIR, USER, LABEL, EXPOSE): no layer.
 *
 * A last sandbox over the final layers imports each preload module (LABEL cellbox.preload or the
 * request's), so a template that cannot preload is never registered; then templates_register.
 * A failed build, or one whose client went away, leaves nothing behind: the step's layer is
 * discarded, its view unmounted, its sandbox killed and its uid, cgroup and network slot given
 * back; layers committed by earlier steps stay in the cache, as Docker's do.
 *
 * Events (each a JSON object, one line of /v1's NDJSON stream):
 *   {"type":"step","step":N,"steps":M,"line":L,"instruction":"RUN ...","cached":bool}
 *   {"type":"output","step":N,"text":"..."}           a RUN's stdout+stderr as it comes
 *   {"type":"step_done","step":N,"seconds":S}
 *   {"type":"done","template":<templates_model>,"seconds":S,"cached_steps":K}      last, or
 *   {"type":"error","step":N,"line":L,"instruction":"...","message":"...","exit_code":C,
 *    "output":"<the step's last output>"}                                         last.
 * Every instruction is a step; one without a layer (ENV, ...) reports cached: true. */
#ifndef CELLBOX_MODEL_TEMPLATE_BUILD_H
#define CELLBOX_MODEL_TEMPLATE_BUILD_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "common/failure.h"

/* Builds at once; one more is refused (exhausted: retry later). */
#define TEMPLATE_BUILD_MAX_RUNNING 2
#define TEMPLATE_BUILD_STEP_TIMEOUT_S 600
#define TEMPLATE_BUILD_MEMORY_BYTES (2LL << 30)
#define TEMPLATE_BUILD_FILE_BYTES (2LL << 30)   /* the largest file a step may write */
#define TEMPLATE_BUILD_OUTPUT_BYTES (8LL << 20) /* of one step's output sent as events */

typedef struct template_build template_build;

typedef struct template_build_request {
    const char *name;
    const char *dockerfile;  /* its text */
    const char *context_dir; /* the extracted build context (the caller's), or NULL: none */
    const char *preload;     /* NULL: LABEL cellbox.preload's, or none */
    int pool_size;           /* -1: LABEL cellbox.pool_size's, or 0 */
    bool replace;            /* an existing template of the name is replaced when built */
    bool no_cache;           /* every layer step runs again */
    bool network;            /* RUN steps get an interface (the daemon must allow network) */
    json_t *allow_out;       /* the steps' egress lists (E2B's semantics), or NULL */
    json_t *deny_out;
    json_t *build_args;       /* {"NAME": "value"} for ARG, or NULL */
    int step_timeout_seconds; /* 0: TEMPLATE_BUILD_STEP_TIMEOUT_S */
} template_build_request;

/* Called with each event (stolen); after the last ("done" or "error"), the build is over and
   freed: the caller must not call template_build_abandon any more. Never called from inside
   template_build_start. */
typedef void (*template_build_event)(void *arg, json_t *event, bool last);

/* Checks and plans the build, then starts it. NULL with a kind and `why` for what is known ahead:
   invalid (the Dockerfile, FROM, a COPY source, a build argument, network without the daemon's),
   conflict (the name is taken and not `replace`, or a build of it runs), exhausted (too many
   builds at once). The request's strings and JSON are copied. */
template_build *template_build_start(const template_build_request *request,
                                     template_build_event on_event, void *arg,
                                     failure_kind *failure, char *why, size_t why_size);
/* The client went away: the build stops and leaves nothing behind; no more events. */
void template_build_abandon(template_build *build);
/* At shutdown, before the sandboxes end: every running build ends with an "error" event (its
   client is told) and leaves nothing behind. */
void template_build_abandon_all(void);

#endif
