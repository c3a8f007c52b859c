#include "api/v1.h"

#include <stdio.h>
#include <string.h>

#include "api/errors.h"
#include "api/request.h"
#include "api/v1_commands.h"
#include "api/v1_contexts.h"
#include "api/v1_execute.h"
#include "api/v1_files.h"
#include "api/v1_fork.h"
#include "api/v1_ready.h"
#include "api/v1_run.h"
#include "api/v1_snapshots.h"
#include "api/v1_template_build.h"
#include "api/v1_templates.h"
#include "api/v1_volumes.h"
#include "common/text.h"
#include "http/query.h"
#include "http/url.h"
#include "kernel/kernelspec.h"
#include "model/box_log.h"
#include "model/command.h"
#include "model/execution.h"
#include "model/manager.h"
#include "model/pause.h"
#include "model/ttl.h"
#include "model/volumes.h"
#include "sandbox/confined.h"

#define MAX_SEGMENTS 8

void v1_init(void)
{
    box_init();
    execution_init();
    command_init();
}

bool v1_owns(const char *path)
{
    return strncmp(path, "/v1", 3) == 0 && (path[3] == '\0' || path[3] == '/');
}

/* ---- templates and sandboxes ---- */

static void create_sandbox(http_request *request)
{
    static const char *const fields[] = {"template", "timeout_s", "env", "metadata", "limits",
                                         "network", "volumes", "snapshot_id", NULL};
    json_t *body = request_parse_body(request, fields);
    if (!body)
        return;
    if (json_object_get(body, "snapshot_id")) { /* the snapshot's sandbox, again */
        v1_create_from_snapshot(request, body);
        json_decref(body);
        return;
    }
    const char *template_name = manager_default_kernel();
    int timeout_s = 300;
    json_t *env = NULL, *metadata = NULL;
    json_t *limits = json_object_get(body, "limits");
    if (!request_optional_string(request, body, "template", &template_name) ||
        !request_optional_int(request, body, "timeout_s", 0, &timeout_s) ||
        !request_optional_string_map(request, body, "env", &env) ||
        !request_optional_string_map(request, body, "metadata", &metadata)) {
        json_decref(body);
        return;
    }
    if (limits && !json_is_null(limits) && !json_is_object(limits)) {
        http_respond_error(request, 400, "'limits' must be an object, e.g. {\"memory\": \"512M\"}");
        json_decref(body);
        return;
    }
    failure_kind failure;
    char why[512];
    rootfs_volumes volumes;
    if (volumes_from_request(json_object_get(body, "volumes"), &volumes, &failure, why,
                             sizeof why) < 0) {
        http_respond_error(request, errors_status_of_failure(failure), "%s", why);
        json_decref(body);
        return;
    }
    /* "network": true, or E2B's shape {"allowOut": [...], "denyOut": [...]}, which asks for
       network too. */
    json_t *network = json_object_get(body, "network");
    json_t *allow_out = json_object_get(network, "allowOut");
    json_t *deny_out = json_object_get(network, "denyOut");
    if (json_is_object(network))
        network = json_true();
    kernel *k =
        manager_create(template_name, env, limits, network, &volumes, &failure, why, sizeof why);
    if (k && (allow_out || deny_out) &&
        manager_set_egress(k, allow_out, deny_out, why, sizeof why) < 0) {
        manager_delete(k);
        http_respond_error(request, 400, "%s", why);
        json_decref(body);
        return;
    }
    if (!k) {
        if (failure == FAILURE_NOT_FOUND)
            http_respond_error(request, 404, "template '%.*s' does not exist (see GET /v1/templates)",
                               text_utf8_prefix(template_name, 200), template_name);
        else
            http_respond_error(request, errors_status_of_failure(failure), "%s", why);
        json_decref(body);
        return;
    }
    box *b = box_of(k);
    box_configure(b, metadata, env, timeout_s);
    json_decref(body);
    char location[256];
    snprintf(location, sizeof location, "%sv1/sandboxes/%s", http_base_url(), box_id(b));
    http_add_response_header(request, "Location", location);
    v1_respond_when_ready(request, k, NULL);
}

static void list_sandboxes(http_request *request)
{
    const char *state = http_query(request, "state");
    if (state && strcmp(state, "running") != 0 && strcmp(state, "paused") != 0 &&
        strcmp(state, "dead") != 0 && strcmp(state, "hibernated") != 0) {
        http_respond_error(request, 400, "unknown state '%s': use running, paused, hibernated or "
                           "dead", state);
        return;
    }
    json_t *filter = json_object();
    http_query_each(request, "metadata.", filter);
    json_t *list = json_array();
    for (size_t i = 0; i < manager_count(); i++) {
        box *b = box_of(manager_at(i));
        if (box_matches(b, state, filter))
            json_array_append_new(list, box_model(b));
    }
    json_decref(filter);
    http_respond_json(request, 200, list);
}

static void sandbox_action(http_request *request, box *b, const char *action)
{
    char why[256];
    if (!http_method_is(request, "POST")) {
        http_respond_method_not_allowed(request, "POST");
        return;
    }
    if (strcmp(action, "timeout") == 0) {
        static const char *const fields[] = {"timeout_s", NULL};
        json_t *body = request_parse_body(request, fields);
        int timeout_s = -1;
        if (!body)
            return;
        if (request_optional_int(request, body, "timeout_s", 0, &timeout_s)) {
            if (timeout_s < 0) {
                http_respond_error(request, 400, "'timeout_s' is required (seconds from now; 0 = never)");
            } else {
                box_set_timeout(b, timeout_s);
                http_respond_json(request, 200, box_model(b));
            }
        }
        json_decref(body);
        return;
    }
    if (box_get_state(b) == BOX_DEAD) {
        http_respond_error(request, 409, "sandbox %s is dead: %s", box_id(b),
                           kernel_death_reason(box_default_kernel(b)));
        return;
    }
    if (box_get_state(b) == BOX_HIBERNATED) {
        if (strcmp(action, "resume") == 0)
            v1_wake_sandbox(request, b);
        else
            http_respond_error(request, 409, "sandbox %s is hibernated (its memory is on disk "
                               "already): resume it with POST /v1/sandboxes/%s/resume", box_id(b),
                               box_id(b));
        return;
    }
    int rc = strcmp(action, "pause") == 0 ? box_pause(b, why, sizeof why) : box_resume(b, why, sizeof why);
    if (rc < 0)
        http_respond_error(request, 500, "%s", why);
    else
        http_respond_json(request, 200, box_model(b));
}

static void get_logs(http_request *request, box *b)
{
    long long limit;
    if (!http_query_integer(request, "limit", 1, BOX_LOG_ENTRIES, 200, &limit))
        return;
    http_respond_json(request, 200, box_log_model(b, (size_t)limit));
}

/* ---- routing ---- */

/* The part of the path after /v1/sandboxes/{id}/files, for the files module. */
static const char *files_rest(const char *path)
{
    const char *files = strstr(path, "/files");
    return files ? files + 6 : "";
}

/* PUT /v1/sandboxes/{id}/network {"allowOut": [...], "denyOut": [...]}: the running sandbox's
   egress lists, replaced whole and in effect at once. */
static void set_network(http_request *request, box *b)
{
    static const char *const fields[] = {"allowOut", "denyOut", NULL};
    if (!box_limits(b)->network) {
        http_respond_error(request, 409, "sandbox %s has no network: allowOut and denyOut apply "
                           "to a sandbox created with \"network\": true (cellboxd started with "
                           "--allow-network)", box_id(b));
        return;
    }
    json_t *body = request_parse_body(request, fields);
    if (!body)
        return;
    char why[512];
    json_t *allow_out = json_object_get(body, "allowOut"), *deny_out = json_object_get(body, "denyOut");
    if (manager_set_egress(box_default_kernel(b), allow_out, deny_out, why, sizeof why) < 0) {
        http_respond_error(request, 400, "%s", why);
        json_decref(body);
        return;
    }
    http_respond_json(request, 200,
                      json_pack("{s:o, s:o}", "allowOut",
                                allow_out ? json_incref(allow_out) : json_array(), "denyOut",
                                deny_out ? json_incref(deny_out) : json_array()));
    json_decref(body);
}

static void route_sandbox(http_request *request, box *b, char **s, int n)
{
    /* s[0] = "v1", s[1] = "sandboxes", s[2] = id */
    const char *what = n > 3 ? s[3] : NULL;
    if (!what) {
        if (http_method_is(request, "GET"))
            http_respond_json(request, 200, box_model(b));
        else if (http_method_is(request, "DELETE")) {
            manager_delete(box_default_kernel(b));
            http_respond(request, 204, NULL, "", 0);
        } else
            http_respond_method_not_allowed(request, "GET, DELETE");
    } else if (n == 4 && (strcmp(what, "timeout") == 0 || strcmp(what, "pause") == 0 ||
                          strcmp(what, "resume") == 0)) {
        sandbox_action(request, b, what);
    } else if (n == 4 && (strcmp(what, "snapshots") == 0 || strcmp(what, "hibernate") == 0)) {
        if (!http_method_is(request, "POST"))
            http_respond_method_not_allowed(request, "POST");
        else if (strcmp(what, "hibernate") == 0)
            v1_hibernate_sandbox(request, b);
        else
            v1_snapshot_sandbox(request, b);
    } else if (n == 4 && strcmp(what, "network") == 0) {
        if (http_method_is(request, "PUT"))
            set_network(request, b);
        else
            http_respond_method_not_allowed(request, "PUT");
    } else if (n == 4 && strcmp(what, "logs") == 0) {
        if (http_method_is(request, "GET"))
            get_logs(request, b);
        else
            http_respond_method_not_allowed(request, "GET");
    } else if (n == 4 && strcmp(what, "execute") == 0) {
        if (!http_method_is(request, "POST"))
            http_respond_method_not_allowed(request, "POST");
        else if (v1_require_running(request, b))
            v1_execute(request, b, false);
    } else if (strcmp(what, "contexts") == 0 && n == 4) {
        if (http_method_is(request, "GET"))
            http_respond_json(request, 200, box_contexts_model(b));
        else if (!http_method_is(request, "POST"))
            http_respond_method_not_allowed(request, "GET, POST");
        else if (v1_require_running(request, b))
            v1_create_context(request, b, CONFINED_WORKSPACE);
    } else if (strcmp(what, "contexts") == 0 && n <= 6) {
        v1_route_context(request, b, s[4], n == 6 ? s[5] : NULL);
    } else if (strcmp(what, "files") == 0 && n <= 5) {
        if (v1_require_running(request, b))
            v1_files_route(request, b, files_rest(http_path(request)));
    } else if (strcmp(what, "fork") == 0 && n == 4) {
        if (!http_method_is(request, "POST"))
            http_respond_method_not_allowed(request, "POST");
        else if (v1_require_running(request, b))
            v1_fork(request, b);
    } else if (strcmp(what, "commands") == 0 && n <= 6) {
        v1_commands_route(request, b, s + 3, n - 3);
    } else {
        http_respond_error(request, 404, "no such endpoint: %s", http_path(request));
    }
}

void v1_dispatch(http_request *request)
{
    char copy[2048];
    char *s[MAX_SEGMENTS];
    int n = url_split_path(http_path(request), copy, sizeof copy, s, MAX_SEGMENTS);
    if (n == 2 && strcmp(s[1], "templates") == 0) {
        if (http_method_is(request, "GET"))
            v1_templates_list(request);
        else if (http_method_is(request, "POST"))
            v1_template_build(request);
        else
            http_respond_method_not_allowed(request, "GET, POST");
    } else if ((n == 3 || n == 4) && strcmp(s[1], "templates") == 0) {
        v1_templates_route(request, s[2], n == 4 ? s[3] : NULL);
    } else if (n == 2 && strcmp(s[1], "run") == 0) {
        if (http_method_is(request, "POST"))
            v1_run(request);
        else
            http_respond_method_not_allowed(request, "POST");
    } else if (n >= 2 && n <= 4 && strcmp(s[1], "snapshots") == 0) {
        v1_snapshots_route(request, s, n);
    } else if ((n == 2 || n == 3) && strcmp(s[1], "volumes") == 0) {
        v1_volumes_route(request, n == 3 ? s[2] : NULL);
    } else if (n == 2 && strcmp(s[1], "sandboxes") == 0) {
        if (http_method_is(request, "GET"))
            list_sandboxes(request);
        else if (http_method_is(request, "POST"))
            create_sandbox(request);
        else
            http_respond_method_not_allowed(request, "GET, POST");
    } else if (n >= 3 && n <= MAX_SEGMENTS && strcmp(s[1], "sandboxes") == 0) {
        box *b = box_find(s[2]);
        if (!b)
            http_respond_error(request, 404, "sandbox %s does not exist", s[2]);
        else
            route_sandbox(request, b, s, n);
    } else {
        http_respond_error(request, 404, "no such endpoint: %s", http_path(request));
    }
}

bool v1_streams_body(const char *method, const char *path)
{
    if (v1_templates_streams_body(method, path) || v1_template_build_streams_body(method, path))
        return true;
    if (!v1_owns(path) || strncmp(path, "/v1/sandboxes/", 14) != 0)
        return false;
    const char *files = strstr(path + 14, "/files");
    if (!files || (files[6] != '\0' && files[6] != '/'))
        return false;
    /* only /v1/sandboxes/{id}/files... */
    const char *slash = strchr(path + 14, '/');
    if (slash != files)
        return false;
    return v1_files_streams_body(method, files + 6);
}
