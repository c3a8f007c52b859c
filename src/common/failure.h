/* failure — what went wrong in a layer below api/, named for what happened.
 *
 * The model, kernel and sandbox layers report a refusal or a failure as one of these kinds with
 * a sentence (`why`) for the client; api/errors.h alone turns a kind into an HTTP status. Kinds
 * say what happened, not how a protocol answers it, so a new API (Connect-RPC, a CLI) maps them
 * its own way. */
#ifndef CELLBOX_COMMON_FAILURE_H
#define CELLBOX_COMMON_FAILURE_H

typedef enum failure_kind {
    FAILURE_INVALID,   /* the request's data is wrong: a malformed limit, one past the maximum */
    FAILURE_FORBIDDEN, /* the daemon's configuration does not allow it: the kernel limit is
                          reached, network access is disabled */
    FAILURE_NOT_FOUND, /* it names something that does not exist: an unknown kernelspec */
    FAILURE_CONFLICT,  /* not in this state: the sandbox is still starting, or not running */
    FAILURE_EXHAUSTED, /* the daemon's own open files are near their budget (descriptors.h) */
    FAILURE_INTERNAL,  /* the host failed us: a pipe, a cgroup, a process that would not start */
} failure_kind;

#endif
