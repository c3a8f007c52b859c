/* ttl — a box's time to live: set when it is created or extended (POST
 * /v1/sandboxes/{id}/timeout), stopped while it is paused, kept as a wall-clock deadline across a
 * restart of the daemon. When it ends, each running cell ends with SandboxExpired and a sentence
 * saying why, then the sandbox is deleted; or, for a box whose lifecycle says so (E2B's onTimeout
 * 'pause'), the box is paused instead. */
#ifndef CELLBOX_MODEL_TTL_H
#define CELLBOX_MODEL_TTL_H

#include <stdbool.h>
#include <stddef.h>

typedef struct box box;

void box_set_timeout(box *b, int timeout_s); /* expires timeout_s from now (0 = never) */
/* Why the sandbox is going, when it is not a client's delete (its TTL ended): a sentence for
   whatever of `what` ("cell", "command") it ends, naming the cause and how to avoid it; false
   otherwise. Meant for the gone hooks, which run while the box is being removed. */
bool box_describe_end(const box *b, const char *what, char *out, size_t size);
/* E2B's lifecycle (POST /sandboxes {autoPause, autoResume}): with pause_at_timeout the box is
   paused when its TTL ends instead of deleted; with auto_resume too, a call into it while it is
   paused resumes it first (api/e2b.c asks box_resumes_on_call). Kept across a restart. */
void box_set_lifecycle(box *b, bool pause_at_timeout, bool auto_resume);
bool box_pauses_at_timeout(const box *b);
bool box_resumes_on_call(const box *b);

#endif
