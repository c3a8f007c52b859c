#include "api/v1_ready.h"

#include <stdlib.h>

#include "api/errors.h"
#include "api/routes.h"
#include "common/log.h"
#include "http/query.h"
#include "model/pause.h"
#include "model/snapshots.h"

/* The hibernated sandbox woke (or could not): the request held for it runs now, from the top,
   as if it had just arrived. */
static void on_woken_for_request(void *arg, json_t *result, failure_kind failure, const char *why)
{
    http_request *request = arg;
    if (result)
        routes_dispatch(request);
    else
        http_respond_error(request, errors_status_of_failure(failure),
                           "the sandbox could not wake from hibernation: %s", why);
}

/* A call into a hibernated sandbox wakes it first: the request waits (its connection asleep)
   and is dispatched again once the sandbox's contexts are back. An upload whose body streams
   cannot wait for that: it is answered 503 with Retry-After while the sandbox wakes. */
bool v1_wake_then_dispatch(http_request *request, box *b)
{
    char why[512];
    failure_kind failure;
    bool streamed = http_body_is_streamed(request);
    if (!streamed)
        http_respond_later(request);
    if (box_wake(b, streamed ? NULL : on_woken_for_request, streamed ? NULL : request, &failure,
                 why, sizeof why) < 0) {
        http_respond_error(request, errors_status_of_failure(failure),
                           "sandbox %s is hibernated and cannot wake: %s", box_id(b), why);
        return false;
    }
    if (streamed) {
        http_add_response_header(request, "Retry-After", "1");
        http_respond_error(request, 503, "sandbox %s is waking from hibernation: send the "
                           "upload again in a moment", box_id(b));
    }
    return false;
}

bool v1_require_running(http_request *request, box *b)
{
    char why[256];
    bool auto_resume;
    switch (box_get_state(b)) {
    case BOX_RUNNING: return true;
    case BOX_PAUSED:
        if (!http_query_flag(request, "auto_resume", &auto_resume))
            return false;
        if (auto_resume) {
            if (box_resume(b, why, sizeof why) == 0)
                return true;
            http_respond_error(request, 500, "%s", why);
            return false;
        }
        http_respond_error(request, 409,
                           "sandbox %s is paused: resume it with POST "
                           "/v1/sandboxes/%s/resume, or pass ?auto_resume=true",
                           box_id(b), box_id(b));
        return false;
    case BOX_HIBERNATED: return v1_wake_then_dispatch(request, b);
    case BOX_DEAD:
        box_describe_death(b, why, sizeof why);
        http_respond_error(request, 409,
                           "%s; restart its default context (POST /v1/sandboxes/%s/"
                           "contexts/%s/restart) or delete it",
                           why, box_id(b), box_id(b));
        return false;
    }
    return false;
}

/* ---- creations waiting for their sandbox to be ready ---- */

/* POST /v1/sandboxes answers once the sandbox can take files and commands (a pooled one is
   ready at once; a fresh one reports in within a second or so): the answer is held open as a
   stream with one JSON document in it. */
typedef struct pending_create {
    kernel *k;
    json_t *answer; /* NULL: the sandbox's model */
    http_stream *stream;
    box_start_wait *wait; /* until the kernel leaves "starting" (or goes away) */
} pending_create;

/* The kernel left "starting" (idle, or dead) or is going away: the creation is answered. */
static void answer_create(void *arg)
{
    pending_create *p = arg;
    p->wait = NULL;
    http_stream_finish_json(p->stream, p->answer ? p->answer : box_model(box_of(p->k)));
    p->answer = NULL;
}

static void on_create_closed(void *arg, bool completed)
{
    pending_create *p = arg;
    if (p->wait)
        box_start_wait_cancel(p->wait);
    json_decref(p->answer);
    free(p);
}

void v1_respond_when_ready(http_request *request, kernel *k, json_t *answer)
{
    if (kernel_get_state(k) != KERNEL_STARTING) {
        http_respond_json(request, 201, answer ? answer : box_model(box_of(k)));
        return;
    }
    pending_create *p = calloc(1, sizeof *p);
    if (!p)
        die("out of memory");
    p->k = k;
    p->answer = answer;
    p->stream = http_respond_stream(request, 201, "application/json", on_create_closed, p);
    p->wait = box_when_started(k, answer_create, p);
}
