#include "api/jupyter.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/channels.h"
#include "api/kernels.h"
#include "api/request.h"
#include "api/sessions.h"
#include "common/version.h"
#include "kernel/kernelspec.h"
#include "kernel/zygote.h"
#include "model/box.h"
#include "model/manager.h"
#include "model/pool.h"
#include "model/templates.h"

/* The jupyter_server API version Kernel Gateway 3 reports; clients compare against it. */
#define JUPYTER_API_VERSION "2.14.2"

static jupyter_options options;

static void on_kernel_deleted(kernel *k);

void jupyter_init(const jupyter_options *opts)
{
    options = *opts;
    manager_set_delete_hook(on_kernel_deleted);
}

/* Every way a kernel goes (DELETE, a session's DELETE, /v1, E2B, culling) passes here. */
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

/* What a template is, for a notebook client choosing a kernel: its kind ("built-in",
   "modules", "dockerfile", "rootfs"), what it was built from and the Python distributions it
   adds to the base ("name==version"), from the template store's model. */
static json_t *template_metadata(const kernelspec *spec)
{
    json_t *template = templates_model(spec->name);
    json_t *metadata =
        json_pack("{s:O*, s:O*, s:O*}", "cellbox_kind", json_object_get(template, "kind"),
                  "cellbox_from", json_object_get(template, "from"), "cellbox_packages",
                  json_object_get(template, "packages"));
    json_decref(template);
    return metadata;
}

/* A kernelspec's model with its template's metadata beside the runtime's. */
static json_t *kernelspec_model_with_template(const kernelspec *spec)
{
    json_t *model = kernelspec_model(spec, http_base_url());
    json_t *metadata = json_object_get(json_object_get(model, "spec"), "metadata");
    json_t *template = template_metadata(spec);
    json_object_update(metadata, template);
    json_decref(template);
    return model;
}

static void get_kernelspecs(http_request *request)
{
    json_t *all = json_object();
    for (size_t i = 0; i < kernelspec_count(); i++)
        json_object_set_new(all, kernelspec_at(i)->name,
                            kernelspec_model_with_template(kernelspec_at(i)));
    http_respond_json(
        request, 200,
        json_pack("{s:s, s:o}", "default", manager_default_kernel(), "kernelspecs", all));
}

static void get_kernelspec(http_request *request, const char *name)
{
    const kernelspec *spec = kernelspec_find(name);
    if (!spec) {
        http_respond_error(request, 404, "Kernel spec %s not found", name);
        return;
    }
    http_respond_json(request, 200, kernelspec_model_with_template(spec));
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
    json_t *body = request_parse_body(request, REQUEST_ANY_FIELD);
    if (!body)
        return;
    kernel *k = kernels_create(request, body);
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
            kernels_delete(k);
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

/* ---- routing ---- */

void jupyter_route_api(http_request *request, char **s, int n)
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
    } else {
        http_respond_error(request, 404, "no such endpoint: %s", http_path(request));
    }
}

void jupyter_route_kernelspec_resource(http_request *request, const char *name, const char *file)
{
    if (http_method_is(request, "GET"))
        get_kernelspec_resource(request, name, file);
    else
        http_respond_method_not_allowed(request, "GET");
}
