#include "api/jupyter.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/channels.h"
#include "api/e2b.h"
#include "api/errors.h"
#include "api/sessions.h"
#include "api/mcp.h"
#include "api/v1.h"
#include "common/log.h"
#include "model/box.h"
#include "common/text.h"
#include "http/url.h"
#include "kernel/kernelspec.h"
#include "model/manager.h"
#include "model/pool.h"
#include "kernel/zygote.h"

#define CELLBOX_VERSION "0.1.0"
/* The jupyter_server API version Kernel Gateway 3 reports; clients compare against it. */
#define JUPYTER_API_VERSION "2.14.2"
#define MAX_PATH_SEGMENTS 8

static jupyter_options options;

static void on_kernel_deleted(kernel *k);

void jupyter_init(const jupyter_options *opts)
{
    options = *opts;
    manager_set_delete_hook(on_kernel_deleted);
}

/* ---- helpers ---- */

json_t *jupyter_parse_body(http_request *request)
{
    size_t length;
    const char *body = http_body(request, &length);
    if (length == 0)
        return json_object();
    json_error_t error;
    json_t *value = json_loadb(body, length, 0, &error);
    if (!value) {
        text_scrub_utf8(error.text); /* it quotes the body near the error */
        http_respond_error(request, 400, "request body is not valid JSON: %s (line %d, column %d)",
                           error.text, error.line, error.column);
        return NULL;
    }
    if (!json_is_object(value)) {
        json_decref(value);
        http_respond_error(request, 400, "request body must be a JSON object");
        return NULL;
    }
    return value;
}

/* Kernel Gateway passes only KERNEL_* variables from the request to the kernel. */
static json_t *kernel_env_from(http_request *request, json_t *env)
{
    json_t *filtered = json_object();
    if (!env || json_is_null(env))
        return filtered;
    if (!json_is_object(env)) {
        json_decref(filtered);
        http_respond_error(request, 400, "'env' must be an object of string values");
        return NULL;
    }
    const char *name;
    json_t *value;
    json_object_foreach(env, name, value)
    {
        if (!json_is_string(value)) {
            json_decref(filtered);
            http_respond_error(request, 400, "'env.%s' must be a string", name);
            return NULL;
        }
        if (strncmp(name, "KERNEL_", 7) == 0 && !strchr(name, '=') && strlen(name) < 256)
            json_object_set(filtered, name, value);
    }
    return filtered;
}

kernel *jupyter_create_kernel(http_request *request, json_t *body)
{
    json_t *name = json_object_get(body, "name");
    if (name && !json_is_null(name) && !json_is_string(name)) {
        http_respond_error(request, 400, "'name' must be a string (a kernelspec name)");
        return NULL;
    }
    json_t *env = kernel_env_from(request, json_object_get(body, "env"));
    if (!env)
        return NULL;
    const char *spec = json_string_value(name);
    failure_kind failure;
    char why[512];
    kernel *k = manager_create(spec && *spec ? spec : manager_default_kernel(), env,
                               json_object_get(body, "limits"), json_object_get(body, "network"),
                               &failure, why, sizeof why);
    json_decref(env);
    if (!k)
        http_respond_error(request, errors_status_of_failure(failure), "%s", why);
    else
        box_of(k); /* its /v1 record starts now: started_at is when it was made, not first seen */
    return k;
}

void jupyter_delete_kernel(kernel *k)
{
    manager_delete(k); /* the delete hook tells channels and sessions */
}

static void on_kernel_deleted(kernel *k)
{
    channels_kernel_deleted(k);
    sessions_kernel_deleted(k);
    box_kernel_deleted(k);
}

/* ---- /api and kernelspecs ---- */

/* Kernel Gateway's {"version"}, plus what an operator (or a benchmark) wants to know: whether
   new kernels are cloned from the zygote yet and how many wait in the warm pool, for the default
   template at the top level, and for each template under "templates". */
static void get_api(http_request *request)
{
    json_t *templates = json_object();
    for (size_t i = 0; i < kernelspec_count(); i++) {
        const kernelspec *spec = kernelspec_at(i);
        json_object_set_new(templates, spec->name,
                            json_pack("{s:b, s:I, s:I}", "zygote_ready",
                                      zygote_is_ready(spec->zygote), "warm_pool",
                                      (json_int_t)pool_kernel_count(spec), "warm_pool_ready",
                                      (json_int_t)pool_ready_count(spec)));
    }
    const kernelspec *default_spec = kernelspec_find(manager_default_kernel());
    http_respond_json(request, 200,
                      json_pack("{s:s, s:s, s:b, s:I, s:I, s:I, s:o}", "version",
                                JUPYTER_API_VERSION, "cellbox", CELLBOX_VERSION, "zygote_ready",
                                zygote_is_ready(default_spec->zygote), "warm_pool",
                                (json_int_t)pool_kernel_count(default_spec), "warm_pool_ready",
                                (json_int_t)pool_ready_count(default_spec), "kernels",
                                (json_int_t)manager_count(), "templates", templates));
}

static void get_kernelspecs(http_request *request)
{
    http_respond_json(request, 200,
                      json_pack("{s:s, s:o}", "default", manager_default_kernel(), "kernelspecs",
                                kernelspec_all_models(http_base_url())));
}

static void get_kernelspec(http_request *request, const char *name)
{
    const kernelspec *spec = kernelspec_find(name);
    if (!spec) {
        http_respond_error(request, 404, "Kernel spec %s not found", name);
        return;
    }
    http_respond_json(request, 200, kernelspec_model(spec, http_base_url()));
}

static const char *content_type_for(const char *file)
{
    const char *dot = strrchr(file, '.');
    if (dot && strcmp(dot, ".png") == 0)
        return "image/png";
    if (dot && strcmp(dot, ".svg") == 0)
        return "image/svg+xml";
    if (dot && strcmp(dot, ".json") == 0)
        return "application/json";
    if (dot && strcmp(dot, ".js") == 0)
        return "application/javascript";
    return "application/octet-stream";
}

static void get_kernelspec_resource(http_request *request, const char *name, const char *file)
{
    char *path = kernelspec_resource_path(name, file);
    FILE *f = path ? fopen(path, "rb") : NULL;
    if (!f) {
        free(path);
        http_respond_error(request, 404, "Kernel spec resource %s/%s not found", name, file);
        return;
    }
    char content[1 << 16];
    size_t n = fread(content, 1, sizeof content, f);
    fclose(f);
    free(path);
    http_respond(request, 200, content_type_for(file), content, n);
}

/* ---- kernels ---- */

static void list_kernels(http_request *request)
{
    if (!options.list_kernels) {
        http_respond_error(request, 403, "listing kernels is disabled (--list-kernels=false)");
        return;
    }
    json_t *list = json_array();
    for (size_t i = 0; i < manager_count(); i++)
        json_array_append_new(list, manager_kernel_model(manager_at(i)));
    http_respond_json(request, 200, list);
}

static void post_kernel(http_request *request)
{
    json_t *body = jupyter_parse_body(request);
    if (!body)
        return;
    kernel *k = jupyter_create_kernel(request, body);
    json_decref(body);
    if (!k)
        return;
    char location[256];
    snprintf(location, sizeof location, "%sapi/kernels/%s", http_base_url(), kernel_id(k));
    http_add_response_header(request, "Location", location);
    http_respond_json(request, 201, manager_kernel_model(k));
}

static void kernel_action(http_request *request, kernel *k, const char *action)
{
    if (!http_method_is(request, "POST")) {
        http_respond_method_not_allowed(request, "POST");
        return;
    }
    if (strcmp(action, "interrupt") == 0) {
        kernel_interrupt(k);
        http_respond(request, 204, NULL, "", 0);
        return;
    }
    char why[512];
    if (kernel_restart(k, why, sizeof why) < 0) {
        http_respond_error(request, 500, "restart failed: %s", why);
        return;
    }
    http_respond_json(request, 200, manager_kernel_model(k));
}

static void route_kernel(http_request *request, const char *id, const char *action)
{
    kernel *k = manager_find(id);
    if (!k) {
        http_respond_error(request, 404, "Kernel does not exist: %s", id);
        return;
    }
    if (!action) {
        if (http_method_is(request, "GET")) {
            http_respond_json(request, 200, manager_kernel_model(k));
        } else if (http_method_is(request, "DELETE")) {
            jupyter_delete_kernel(k);
            http_respond(request, 204, NULL, "", 0);
        } else {
            http_respond_method_not_allowed(request, "GET, DELETE");
        }
    } else if (strcmp(action, "channels") == 0) {
        if (!http_is_websocket_upgrade(request))
            http_respond_error(request, 400, "the channels endpoint needs a WebSocket upgrade");
        else
            channels_accept(request, k);
    } else if (strcmp(action, "interrupt") == 0 || strcmp(action, "restart") == 0) {
        kernel_action(request, k, action);
    } else {
        http_respond_error(request, 404, "no such kernel endpoint: %s", action);
    }
}

/* ---- dispatch ---- */

static void route_api(http_request *request, char **s, int n)
{
    if (n == 1) {
        if (http_method_is(request, "GET"))
            get_api(request);
        else
            http_respond_method_not_allowed(request, "GET");
    } else if (strcmp(s[1], "kernelspecs") == 0 && n <= 3) {
        if (!http_method_is(request, "GET"))
            http_respond_method_not_allowed(request, "GET");
        else
            n == 2 ? get_kernelspecs(request) : get_kernelspec(request, s[2]);
    } else if (strcmp(s[1], "kernels") == 0 && n == 2) {
        if (http_method_is(request, "GET"))
            list_kernels(request);
        else if (http_method_is(request, "POST"))
            post_kernel(request);
        else
            http_respond_method_not_allowed(request, "GET, POST");
    } else if (strcmp(s[1], "kernels") == 0 && n <= 4) {
        route_kernel(request, s[2], n == 4 ? s[3] : NULL);
    } else if (strcmp(s[1], "sessions") == 0 && n <= 3) {
        sessions_route(request, n == 3 ? s[2] : NULL);
    } else {
        http_respond_error(request, 404, "no such endpoint: %s", http_path(request));
    }
}

void jupyter_dispatch(http_request *request)
{
    char copy[2048];
    char *segments[MAX_PATH_SEGMENTS];
    if (e2b_owns(request)) { /* first: E2B's in-sandbox calls may use any path */
        e2b_dispatch(request);
        return;
    }
    if (v1_owns(http_path(request))) {
        v1_dispatch(request);
        return;
    }
    if (mcp_owns(http_path(request))) {
        mcp_dispatch(request);
        return;
    }
    int n = url_split_path(http_path(request), copy, sizeof copy, segments, MAX_PATH_SEGMENTS);
    if (n >= 1 && n <= MAX_PATH_SEGMENTS && strcmp(segments[0], "api") == 0) {
        route_api(request, segments, n);
    } else if (n == 3 && strcmp(segments[0], "kernelspecs") == 0) {
        http_method_is(request, "GET") ? get_kernelspec_resource(request, segments[1], segments[2])
                                       : http_respond_method_not_allowed(request, "GET");
    } else {
        http_respond_error(request, 404, "no such endpoint: %s", http_path(request));
    }
}
