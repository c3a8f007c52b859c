#include "api/v1_snapshots.h"

#include <stdio.h>
#include <string.h>

#include "api/errors.h"
#include "api/request.h"
#include "model/snapshots.h"

/* A full disk is 507 Insufficient Storage: the client can free space (delete snapshots) and
   retry; other exhaustion (the daemon's open files) stays 503. */
static int status_of(failure_kind failure, const char *why)
{
    if (failure == FAILURE_EXHAUSTED && why && strstr(why, "no space"))
        return 507;
    return errors_status_of_failure(failure);
}

/* Each answer comes from the loop once the model is done: the connection sleeps until then
   (http_respond_later), and the request is the callback's argument. */
static void answer(void *arg, json_t *result, failure_kind failure, const char *why)
{
    http_request *request = arg;
    if (result)
        http_respond_json(request, 201, json_incref(result));
    else
        http_respond_error(request, status_of(failure, why), "%s", why);
}

static void answer_ok(void *arg, json_t *result, failure_kind failure, const char *why)
{
    http_request *request = arg;
    if (result)
        http_respond_json(request, 200, json_incref(result));
    else
        http_respond_error(request, status_of(failure, why), "%s", why);
}

static void start_or_refuse(http_request *request, int rc, failure_kind failure, const char *why)
{
    if (rc < 0)
        http_respond_error(request, status_of(failure, why), "%s", why);
    else
        http_respond_later(request);
}

void v1_snapshot_sandbox(http_request *request, box *b)
{
    static const char *const fields[] = {"name", "metadata", NULL};
    json_t *body = request_parse_body(request, fields);
    if (!body)
        return;
    const char *name = NULL;
    json_t *metadata = NULL;
    if (request_optional_string(request, body, "name", &name) &&
        request_optional_string_map(request, body, "metadata", &metadata)) {
        char why[600];
        failure_kind failure;
        int rc = snapshot_create(b, name, metadata, answer, request, &failure, why, sizeof why);
        start_or_refuse(request, rc, failure, why);
    }
    json_decref(body);
}

void v1_hibernate_sandbox(http_request *request, box *b)
{
    char why[600];
    failure_kind failure;
    if (box_get_state(b) == BOX_DEAD) {
        box_describe_death(b, why, sizeof why);
        http_respond_error(request, 409, "%s: there is nothing to hibernate", why);
        return;
    }
    int rc = box_hibernate(b, answer_ok, request, &failure, why, sizeof why);
    start_or_refuse(request, rc, failure, why);
}

void v1_wake_sandbox(http_request *request, box *b)
{
    char why[600];
    failure_kind failure;
    int rc = box_wake(b, answer_ok, request, &failure, why, sizeof why);
    start_or_refuse(request, rc, failure, why);
}

/* {sandbox_id?, timeout?, metadata?, env?}: 201 and a new sandbox, or 200 and the snapshot's
   own sandbox rewound in place. */
static void restore(http_request *request, const char *snapshot_id, json_t *body)
{
    const char *sandbox_id = NULL;
    int timeout = -1;
    json_t *metadata = NULL, *env = NULL;
    if (!request_optional_string(request, body, "sandbox_id", &sandbox_id) ||
        !request_optional_int(request, body, "timeout", 0, &timeout) ||
        !request_optional_string_map(request, body, "metadata", &metadata) ||
        !request_optional_string_map(request, body, "env", &env))
        return;
    if (sandbox_id && (timeout >= 0 || metadata || env)) {
        http_respond_error(request, 400,
                           "a rewind in place (sandbox_id) keeps the sandbox's "
                           "timeout, metadata and env: leave them out, or leave out sandbox_id "
                           "for a new sandbox");
        return;
    }
    char why[600];
    failure_kind failure;
    int rc = snapshot_restore(snapshot_id, body, sandbox_id ? answer_ok : answer, request, &failure,
                              why, sizeof why);
    start_or_refuse(request, rc, failure, why);
}

void v1_create_from_snapshot(http_request *request, json_t *body)
{
    const char *snapshot_id = json_string_value(json_object_get(body, "snapshot_id"));
    if (!snapshot_id) {
        http_respond_error(request, 400, "'snapshot_id' must be a string (see GET /v1/snapshots)");
        return;
    }
    static const char *const allowed[] = {"snapshot_id", "timeout_s", "metadata", "env", NULL};
    const char *key;
    json_t *value;
    json_object_foreach(body, key, value)
    {
        bool known = false;
        for (int i = 0; allowed[i]; i++)
            known = known || strcmp(allowed[i], key) == 0;
        if (!known) {
            http_respond_error(request, 400,
                               "'%s' cannot be given with 'snapshot_id': the "
                               "sandbox is the snapshot's (template, limits, network); use "
                               "timeout_s, metadata and env",
                               key);
            return;
        }
    }
    json_t *options =
        json_pack("{s:O*, s:O*, s:O*}", "timeout", json_object_get(body, "timeout_s"), "metadata",
                  json_object_get(body, "metadata"), "env", json_object_get(body, "env"));
    char why[600];
    failure_kind failure;
    int rc = snapshot_restore(snapshot_id, options, answer, request, &failure, why, sizeof why);
    json_decref(options);
    start_or_refuse(request, rc, failure, why);
}

void v1_snapshots_route(http_request *request, char **s, int n)
{
    const char *snapshot_id = n >= 3 ? s[2] : NULL;
    if (n == 2) {
        if (http_method_is(request, "GET"))
            http_respond_json(request, 200, snapshot_list(http_query(request, "sandbox_id")));
        else
            http_respond_method_not_allowed(request, "GET");
    } else if (n == 3 && http_method_is(request, "GET")) {
        char why[600];
        failure_kind failure;
        json_t *model = snapshot_find(snapshot_id, &failure, why, sizeof why);
        if (model)
            http_respond_json(request, 200, model);
        else
            http_respond_error(request, errors_status_of_failure(failure), "%s", why);
    } else if (n == 3 && http_method_is(request, "DELETE")) {
        char why[600];
        failure_kind failure;
        if (snapshot_delete(snapshot_id, &failure, why, sizeof why) < 0)
            http_respond_error(request, errors_status_of_failure(failure), "%s", why);
        else
            http_respond(request, 204, NULL, "", 0);
    } else if (n == 3) {
        http_respond_method_not_allowed(request, "GET, DELETE");
    } else if (n == 4 && strcmp(s[3], "restore") == 0) {
        static const char *const fields[] = {"sandbox_id", "timeout", "metadata", "env", NULL};
        if (!http_method_is(request, "POST")) {
            http_respond_method_not_allowed(request, "POST");
            return;
        }
        json_t *body = request_parse_body(request, fields);
        if (!body)
            return;
        restore(request, snapshot_id, body);
        json_decref(body);
    } else {
        http_respond_error(request, 404, "no such endpoint: %s", http_path(request));
    }
}
