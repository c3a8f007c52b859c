/* v1_fork — see v1_fork.h. */
#include "api/v1_fork.h"

#include <stdio.h>

#include "api/errors.h"
#include "api/request.h"
#include "model/snapshots.h"

/* The model names each fork's failure as a kind; the client gets its HTTP status. */
static void statuses_of_failures(json_t *forks)
{
    size_t i;
    json_t *entry;
    json_array_foreach(forks, i, entry) {
        json_t *error = json_object_get(entry, "error");
        json_t *kind = json_object_get(error, "failure");
        if (!json_is_integer(kind))
            continue;
        json_object_set_new(error, "status",
                            json_integer(errors_status_of_failure((failure_kind)json_integer_value(kind))));
        json_object_del(error, "failure");
    }
}

static void on_forked(void *arg, json_t *result, failure_kind failure, const char *why)
{
    http_request *request = arg;
    if (!result) {
        http_respond_error(request, errors_status_of_failure(failure), "%s", why);
        return;
    }
    json_t *forks = json_deep_copy(result);
    statuses_of_failures(forks);
    http_respond_json(request, 201, forks);
}

void v1_fork(http_request *request, box *b)
{
    static const char *const fields[] = {"count", "timeout", "metadata", NULL};
    json_t *body = request_parse_body(request, fields);
    if (!body)
        return;
    int count = 1, timeout = 300;
    json_t *metadata = NULL;
    if (!request_optional_int(request, body, "count", 1, &count) ||
        !request_optional_int(request, body, "timeout", 0, &timeout) ||
        !request_optional_string_map(request, body, "metadata", &metadata)) {
        json_decref(body);
        return;
    }
    json_t *options = json_pack("{s:i}", "timeout", timeout);
    if (metadata)
        json_object_set(options, "metadata", metadata);
    failure_kind failure;
    char why[600];
    if (box_fork(b, count, options, on_forked, request, &failure, why, sizeof why) < 0)
        http_respond_error(request, errors_status_of_failure(failure), "%s", why);
    else
        http_respond_later(request);
    json_decref(options);
    json_decref(body);
}
