#include "api/e2b_volumes.h"

#include <stdio.h>
#include <string.h>

#include "api/e2b_volume_content.h"
#include "api/errors.h"
#include "api/request.h"
#include "http/url.h"

#define MAX_SEGMENTS 4

bool e2b_volumes_owns(const char *path)
{
    return (strncmp(path, "/volumes", 8) == 0 && (path[8] == '\0' || path[8] == '/')) ||
           (strncmp(path, "/volumecontent", 14) == 0 && (path[14] == '\0' || path[14] == '/'));
}

/* E2B's Volume and VolumeAndToken: the token is the key the request came with (the daemon's
   token: it was admitted), which the SDK sends back as a Bearer token on content calls. */
static json_t *volume_model(http_request *request, const char *name, bool with_token)
{
    json_t *model = json_pack("{s:s, s:s}", "volumeID", name, "name", name);
    if (with_token) {
        const char *key = http_header(request, "X-API-Key");
        json_object_set_new(model, "token", json_string(key ? key : ""));
        json_object_set_new(model, "domain", json_null());
    }
    return model;
}

static void create_volume(http_request *request)
{
    json_t *body = request_parse_body(request, REQUEST_ANY_FIELD);
    if (!body)
        return;
    const char *name = NULL;
    failure_kind failure;
    char why[512];
    if (!request_optional_string(request, body, "name", &name)) {
        json_decref(body);
        return;
    }
    if (!name)
        errors_respond_e2b(request, 400, "'name' is required: Volume.create(name)");
    else if (volumes_create(name, 0, &failure, why, sizeof why) < 0)
        errors_respond_e2b(request, errors_status_of_failure(failure), "%s", why);
    else
        http_respond_json(request, 201, volume_model(request, name, true));
    json_decref(body);
}

static void list_volumes(http_request *request)
{
    json_t *all = volumes_list_model(), *list = json_array();
    size_t i;
    json_t *volume;
    json_array_foreach(all, i, volume) {
        const char *name = json_string_value(json_object_get(volume, "name"));
        json_array_append_new(list, volume_model(request, name, false));
    }
    json_decref(all);
    http_respond_json(request, 200, list);
}

static void route_volume(http_request *request, const char *name)
{
    failure_kind failure;
    char why[1024];
    if (!volumes_exists(name)) {
        errors_respond_e2b(request, 404, "volume %.80s does not exist", name);
    } else if (http_method_is(request, "GET")) {
        http_respond_json(request, 200, volume_model(request, name, true));
    } else if (!http_method_is(request, "DELETE")) {
        errors_respond_e2b_method_not_allowed(request, "GET, DELETE");
    } else if (volumes_delete(name, false, &failure, why, sizeof why) < 0) {
        errors_respond_e2b(request, errors_status_of_failure(failure), "%s", why);
    } else {
        http_respond(request, 204, NULL, "", 0);
    }
}

void e2b_volumes_route(http_request *request)
{
    char copy[2048];
    char *s[MAX_SEGMENTS];
    int n = url_split_path(http_path(request), copy, sizeof copy, s, MAX_SEGMENTS);
    if (n >= 1 && strcmp(s[0], "volumecontent") == 0) {
        if (n == 3)
            e2b_volume_content_route(request, s[1], s[2]);
        else
            errors_respond_e2b(request, 404, "no such endpoint: %s (/volumecontent/{volumeID}/"
                               "dir, path or file)", http_path(request));
    } else if (n == 1) {
        if (http_method_is(request, "GET"))
            list_volumes(request);
        else if (http_method_is(request, "POST"))
            create_volume(request);
        else
            errors_respond_e2b_method_not_allowed(request, "GET, POST");
    } else if (n == 2) {
        route_volume(request, s[1]);
    } else {
        errors_respond_e2b(request, 404, "no such endpoint: %s", http_path(request));
    }
}

int e2b_volumes_from_request(json_t *volume_mounts, rootfs_volumes *mounts, failure_kind *failure,
                             char *why, size_t why_size)
{
    memset(mounts, 0, sizeof *mounts);
    if (!volume_mounts || json_is_null(volume_mounts))
        return 0;
    size_t i;
    json_t *entry;
    if (!json_is_array(volume_mounts))
        goto malformed;
    json_array_foreach(volume_mounts, i, entry) {
        const char *name = json_string_value(json_object_get(entry, "name"));
        const char *path = json_string_value(json_object_get(entry, "path"));
        if (!name || !path)
            goto malformed;
        if (volumes_add_mount(mounts, name, path, failure, why, why_size) < 0)
            return -1;
    }
    return 0;
malformed:
    *failure = FAILURE_INVALID;
    snprintf(why, why_size, "'volumeMounts' must be a list of {\"name\": volume, \"path\": mount "
             "path}, e.g. volumeMounts: {'/mnt/data': volume} in the SDK");
    return -1;
}

json_t *e2b_volumes_mounts_model(json_t *native_volumes)
{
    json_t *list = json_array();
    const char *name;
    json_t *path;
    json_object_foreach(native_volumes, name, path)
        json_array_append_new(list, json_pack("{s:s, s:O}", "name", name, "path", path));
    return list;
}
