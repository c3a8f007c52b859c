#include "api/e2b_snapshots.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/e2b_connection.h"
#include "api/errors.h"
#include "api/request.h"
#include "api/v1_ready.h"
#include "common/log.h"
#include "model/snapshots.h"
#include "model/ttl.h"

#define FORK_COUNT_MAX 16         /* model/snapshots.h's bound of one fork */
#define FORK_DEFAULT_TIMEOUT_S 15 /* E2B's SandboxForkRequest.timeout default */
#define LIST_LIMIT_MAX 100        /* E2B's most (and default) snapshots on one page */
#define TEMPLATES_PREFIX "/templates/"

/* A request held open (http_respond_later) until the model calls back. A suspended connection
   is not closed under it, so `request` stays valid until it is answered here. */
typedef struct pending_answer {
    http_request *request;
    e2b_restore_request restore; /* for a restore: the lifecycle to set on the new sandbox */
} pending_answer;

static pending_answer *pending_new(http_request *request)
{
    pending_answer *p = calloc(1, sizeof *p);
    if (!p)
        die("out of memory");
    p->request = request;
    return p;
}

/* The answer of a model call that failed as a whole, or could not start: a full disk is 507,
   as /v1 answers it (the client frees space, deleting snapshots, and tries again). */
static void respond_failure(http_request *request, failure_kind failure, const char *why)
{
    bool no_space = failure == FAILURE_EXHAUSTED && why && strstr(why, "no space");
    errors_respond_e2b(request, no_space ? 507 : errors_status_of_failure(failure), "%s", why);
}

/* ---- SnapshotInfo ---- */

/* E2B's SnapshotInfo {snapshotID, names} of a cellbox snapshot model. */
static json_t *snapshot_info(json_t *snapshot)
{
    json_t *names = json_array();
    json_t *name = json_object_get(snapshot, "name");
    if (json_is_string(name))
        json_array_append(names, name);
    return json_pack("{s:O, s:o}", "snapshotID", json_object_get(snapshot, "snapshot_id"), "names",
                     names);
}

/* ---- POST /sandboxes/{id}/snapshots ---- */

static void answer_snapshot(void *arg, json_t *result, failure_kind failure, const char *why)
{
    pending_answer *p = arg;
    if (result)
        http_respond_json(p->request, 201, snapshot_info(result));
    else
        respond_failure(p->request, failure, why);
    free(p);
}

void e2b_snapshots_create(http_request *request, box *b)
{
    json_t *body = request_parse_body(request, REQUEST_ANY_FIELD);
    const char *name = NULL;
    if (!body || !request_optional_string(request, body, "name", &name)) {
        json_decref(body);
        return;
    }
    pending_answer *p = pending_new(request);
    failure_kind failure;
    char why[512];
    if (snapshot_create(b, name, NULL, answer_snapshot, p, &failure, why, sizeof why) < 0) {
        free(p);
        respond_failure(request, failure, why);
    } else {
        http_respond_later(request);
    }
    json_decref(body);
}

/* ---- POST /sandboxes/{id}/fork ---- */

/* One fork's entry as E2B's SandboxForkResult: the sandbox as a create answers it, or
   {"error": {"code", "message"}} (E2B's Error, which the SDK raises per fork). */
static json_t *fork_result(http_request *request, json_t *entry)
{
    json_t *sandbox = json_object_get(entry, "sandbox");
    box *b = sandbox ? box_find(json_string_value(json_object_get(sandbox, "id"))) : NULL;
    if (b)
        return json_pack("{s:o}", "sandbox", e2b_connection_model(request, b));
    json_t *error = json_object_get(entry, "error");
    json_t *message = json_object_get(error, "message");
    return json_pack("{s:{s:I, s:s}}", "error", "code",
                     error ? json_integer_value(json_object_get(error, "status")) : 500, "message",
                     json_is_string(message) ? json_string_value(message)
                                             : "the forked sandbox ended before it was answered");
}

static void answer_fork(void *arg, json_t *result, failure_kind failure, const char *why)
{
    pending_answer *p = arg;
    if (result) {
        json_t *results = json_array();
        size_t index;
        json_t *entry;
        json_array_foreach(result, index, entry)
            json_array_append_new(results, fork_result(p->request, entry));
        http_respond_json(p->request, 201, results);
    } else {
        respond_failure(p->request, failure, why);
    }
    free(p);
}

void e2b_snapshots_fork(http_request *request, box *b)
{
    json_t *body = request_parse_body(request, REQUEST_ANY_FIELD);
    int count = 1, timeout_s = FORK_DEFAULT_TIMEOUT_S;
    if (!body || !request_optional_int(request, body, "count", 1, &count) ||
        !request_optional_int(request, body, "timeout", 0, &timeout_s)) {
        json_decref(body);
        return;
    }
    json_decref(body);
    if (count > FORK_COUNT_MAX) {
        errors_respond_e2b(request, 400, "'count' is %d: fork 1 to %d sandboxes at a time", count,
                           FORK_COUNT_MAX);
        return;
    }
    json_t *options = json_pack("{s:i}", "timeout", timeout_s);
    pending_answer *p = pending_new(request);
    failure_kind failure;
    char why[512];
    if (box_fork(b, count, options, answer_fork, p, &failure, why, sizeof why) < 0) {
        free(p);
        respond_failure(request, failure, why);
    } else {
        http_respond_later(request);
    }
    json_decref(options);
}

/* ---- POST /sandboxes {templateID: a snapshot} ---- */

json_t *e2b_snapshots_find(const char *template_id)
{
    if (!template_id || !*template_id)
        return NULL;
    json_t *snapshot = snapshot_get(template_id);
    if (snapshot)
        return snapshot;
    /* by name: the newest snapshot that has it (RFC 3339 times of one format sort as text) */
    json_t *all = snapshot_list(NULL), *entry, *newest = NULL;
    size_t index;
    json_array_foreach(all, index, entry)
    {
        const char *name = json_string_value(json_object_get(entry, "name"));
        const char *at = json_string_value(json_object_get(entry, "created_at"));
        const char *newest_at =
            newest ? json_string_value(json_object_get(newest, "created_at")) : NULL;
        if (name && strcmp(name, template_id) == 0 &&
            (!newest || (at && newest_at && strcmp(at, newest_at) > 0)))
            newest = entry;
    }
    json_incref(newest);
    json_decref(all);
    return newest;
}

static void answer_restore(void *arg, json_t *result, failure_kind failure, const char *why)
{
    pending_answer *p = arg;
    box *b = result ? box_find(json_string_value(json_object_get(result, "id"))) : NULL;
    if (b) {
        box_set_lifecycle(b, p->restore.pause_at_timeout, p->restore.auto_resume);
        v1_respond_when_ready(p->request, box_default_kernel(b),
                              e2b_connection_model(p->request, b));
    } else if (result) {
        errors_respond_e2b(p->request, 500, "the restored sandbox ended before it was answered");
    } else {
        respond_failure(p->request, failure, why);
    }
    free(p);
}

void e2b_snapshots_restore(http_request *request, const char *snapshot_id,
                           const e2b_restore_request *restore)
{
    json_t *options = json_pack("{s:i}", "timeout", restore->timeout_s);
    if (restore->metadata)
        json_object_set(options, "metadata", restore->metadata);
    if (restore->env)
        json_object_set(options, "env", restore->env);
    pending_answer *p = pending_new(request);
    p->restore = *restore;
    p->restore.metadata = p->restore.env = NULL; /* borrowed from the request's body */
    failure_kind failure;
    char why[512];
    if (snapshot_restore(snapshot_id, options, answer_restore, p, &failure, why, sizeof why) < 0) {
        free(p);
        respond_failure(request, failure, why);
    } else {
        http_respond_later(request);
    }
    json_decref(options);
}

/* ---- GET /snapshots ---- */

/* Pages are in a stable order, oldest first (ties by id); a page's next token names the last
   snapshot it holds ("<created_at> <id>"), so one taken or deleted between two pages neither
   repeats nor shifts the rest. */
static int compare_snapshots(const void *a, const void *b)
{
    json_t *x = *(json_t *const *)a, *y = *(json_t *const *)b;
    const char *x_at = json_string_value(json_object_get(x, "created_at"));
    const char *y_at = json_string_value(json_object_get(y, "created_at"));
    int by_time = strcmp(x_at ? x_at : "", y_at ? y_at : "");
    return by_time ? by_time
                   : strcmp(json_string_value(json_object_get(x, "snapshot_id")),
                            json_string_value(json_object_get(y, "snapshot_id")));
}

static char *page_token(json_t *snapshot)
{
    char *token = NULL;
    const char *at = json_string_value(json_object_get(snapshot, "created_at"));
    if (asprintf(&token, "%s %s", at ? at : "",
                 json_string_value(json_object_get(snapshot, "snapshot_id"))) < 0)
        die("out of memory");
    return token;
}

/* Is `snapshot` after the one `token` names (everything is, without a token)? */
static bool after_token(json_t *snapshot, const char *token)
{
    if (!token || !*token)
        return true;
    char *own = page_token(snapshot);
    bool after = strcmp(own, token) > 0;
    free(own);
    return after;
}

static bool name_matches(json_t *snapshot, const char *name)
{
    const char *own = json_string_value(json_object_get(snapshot, "name"));
    const char *id = json_string_value(json_object_get(snapshot, "snapshot_id"));
    return !name || !*name || (own && strcmp(own, name) == 0) || (id && strcmp(id, name) == 0);
}

/* ?limit=: 1 to LIST_LIMIT_MAX a page (that many when absent); -1 after a 400. */
static int page_limit(http_request *request)
{
    const char *text = http_query(request, "limit");
    char *end;
    long limit = text ? strtol(text, &end, 10) : LIST_LIMIT_MAX;
    if (text && (end == text || *end || limit < 1 || limit > LIST_LIMIT_MAX)) {
        errors_respond_e2b(request, 400, "'limit' is %.32s: give 1 to %d snapshots a page", text,
                           LIST_LIMIT_MAX);
        return -1;
    }
    return (int)limit;
}

static void list_snapshots(http_request *request)
{
    int limit = page_limit(request);
    if (limit < 0)
        return;
    const char *sandbox_id = http_query(request, "sandboxID");
    const char *name = http_query(request, "name");
    const char *token = http_query(request, "nextToken");
    json_t *all = snapshot_list(sandbox_id && *sandbox_id ? sandbox_id : NULL);
    size_t total = json_array_size(all), count = 0;
    json_t **matching = calloc(total + 1, sizeof *matching);
    if (!matching)
        die("out of memory");
    for (size_t i = 0; i < total; i++) {
        json_t *snapshot = json_array_get(all, i);
        if (name_matches(snapshot, name) && after_token(snapshot, token))
            matching[count++] = snapshot;
    }
    qsort(matching, count, sizeof *matching, compare_snapshots);
    json_t *page = json_array();
    for (size_t i = 0; i < count && i < (size_t)limit; i++)
        json_array_append_new(page, snapshot_info(matching[i]));
    if (count > (size_t)limit) {
        char *next = page_token(matching[limit - 1]);
        http_add_response_header(request, "X-Next-Token", next);
        free(next);
    }
    free(matching);
    json_decref(all);
    http_respond_json(request, 200, page);
}

/* ---- DELETE /templates/{snapshot id} ---- */

static void delete_snapshot(http_request *request, const char *snapshot_id)
{
    failure_kind failure;
    char why[512];
    if (snapshot_delete(snapshot_id, &failure, why, sizeof why) < 0)
        respond_failure(request, failure, why);
    else
        http_respond(request, 204, NULL, "", 0);
}

bool e2b_snapshots_route(http_request *request)
{
    const char *path = http_path(request);
    if (strncmp(path, "/v2/", 4) == 0)
        path += 3;
    if (strcmp(path, "/snapshots") == 0) {
        if (http_method_is(request, "GET"))
            list_snapshots(request);
        else
            errors_respond_e2b_method_not_allowed(request, "GET");
        return true;
    }
    size_t n = strlen(TEMPLATES_PREFIX);
    const char *id = path + n; /* the path is decoded */
    if (strncmp(path, TEMPLATES_PREFIX, n) != 0 || !*id || strchr(id, '/') ||
        !http_method_is(request, "DELETE"))
        return false;
    json_t *snapshot = snapshot_get(id);
    if (!snapshot)
        return false; /* a template's: E2B's cloud builds them (e2b.c answers) */
    json_decref(snapshot);
    delete_snapshot(request, id);
    return true;
}
