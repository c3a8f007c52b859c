#include "api/v1_volumes.h"

#include <stdio.h>

#include "api/errors.h"
#include "api/request.h"
#include "http/query.h"
#include "model/volumes.h"
#include "sandbox/limits.h"

/* "size" as "1G", "512M", or a number of bytes; absent: the default. -1 after answering 400. */
static long long requested_size(http_request *request, json_t *body)
{
    json_t *size = json_object_get(body, "size");
    long long bytes = 0;
    if (json_is_string(size))
        bytes = limits_parse_size(json_string_value(size));
    else if (json_is_integer(size))
        bytes = json_integer_value(size);
    else if (size && !json_is_null(size))
        bytes = -1;
    if (bytes < 0 || (size && !json_is_null(size) && bytes == 0)) {
        http_respond_error(request, 400, "'size' must be a size such as \"1G\" or \"512M\", or a "
                           "number of bytes");
        return -1;
    }
    return bytes;
}

static void create_volume(http_request *request)
{
    static const char *const fields[] = {"name", "size", NULL};
    json_t *body = request_parse_body(request, fields);
    if (!body)
        return;
    const char *name = NULL;
    long long bytes = 0;
    if (!request_optional_string(request, body, "name", &name) ||
        (bytes = requested_size(request, body)) < 0) {
        json_decref(body);
        return;
    }
    failure_kind failure;
    char why[512];
    if (!name)
        http_respond_error(request, 400, "'name' is required, e.g. {\"name\": \"data\", "
                           "\"size\": \"1G\"}");
    else if (volumes_create(name, bytes, &failure, why, sizeof why) < 0)
        http_respond_error(request, errors_status_of_failure(failure), "%s", why);
    else
        http_respond_json(request, 201, volumes_model(name));
    json_decref(body);
}

static void delete_volume(http_request *request, const char *name)
{
    bool force = false;
    if (!http_query_flag(request, "force", &force))
        return;
    failure_kind failure;
    char why[1024];
    if (volumes_delete(name, force, &failure, why, sizeof why) < 0)
        http_respond_error(request, errors_status_of_failure(failure), "%s", why);
    else
        http_respond(request, 204, NULL, "", 0);
}

void v1_volumes_route(http_request *request, const char *name)
{
    if (!name) {
        if (http_method_is(request, "GET"))
            http_respond_json(request, 200, volumes_list_model());
        else if (http_method_is(request, "POST"))
            create_volume(request);
        else
            http_respond_method_not_allowed(request, "GET, POST");
        return;
    }
    if (!volumes_exists(name)) {
        http_respond_error(request, 404, "volume %.80s does not exist (see GET /v1/volumes)", name);
        return;
    }
    if (http_method_is(request, "GET"))
        http_respond_json(request, 200, volumes_model(name));
    else if (http_method_is(request, "DELETE"))
        delete_volume(request, name);
    else
        http_respond_method_not_allowed(request, "GET, DELETE");
}
