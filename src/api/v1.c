#include "api/v1.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/errors.h"
#include "api/v1_files.h"
#include "common/log.h"
#include "common/text.h"
#include "http/query.h"
#include "http/url.h"
#include "model/command.h"
#include "model/execution.h"
#include "kernel/kernelspec.h"
#include "model/manager.h"
#include "model/pause.h"
#include "model/ttl.h"

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

/* ---- body checks ---- */

json_t *v1_parse_body(http_request *request, const char *const *allowed_fields)
{
    size_t length;
    const char *text = http_body(request, &length);
    json_t *body;
    if (length == 0) {
        body = json_object();
    } else {
        json_error_t error;
        body = json_loadb(text, length, 0, &error);
        if (!body) {
            text_scrub_utf8(error.text); /* it quotes the body near the error */
            http_respond_error(request, 400, "request body is not valid JSON: %s (line %d, column %d)",
                               error.text, error.line, error.column);
            return NULL;
        }
        if (!json_is_object(body)) {
            json_decref(body);
            http_respond_error(request, 400, "request body must be a JSON object");
            return NULL;
        }
    }
    const char *key;
    json_t *value;
    json_object_foreach(body, key, value)
    {
        bool known = false;
        for (size_t i = 0; allowed_fields && allowed_fields[i]; i++)
            known = known || strcmp(key, allowed_fields[i]) == 0;
        if (!known) {
            char list[512] = "";
            for (size_t i = 0; allowed_fields && allowed_fields[i]; i++)
                snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", i ? ", " : "",
                         allowed_fields[i]);
            http_respond_error(request, 400, "unknown field '%s' (known: %s)", key,
                               *list ? list : "none");
            json_decref(body);
            return NULL;
        }
    }
    return body;
}

bool v1_optional_string(http_request *request, json_t *body, const char *field, const char **out)
{
    json_t *value = json_object_get(body, field);
    if (!value || json_is_null(value))
        return true;
    if (!json_is_string(value)) {
        http_respond_error(request, 400, "'%s' must be a string", field);
        return false;
    }
    *out = json_string_value(value);
    return true;
}

bool v1_optional_int(http_request *request, json_t *body, const char *field, int minimum, int *out)
{
    json_t *value = json_object_get(body, field);
    if (!value || json_is_null(value))
        return true;
    double number = json_is_integer(value) ? (double)json_integer_value(value)
                    : json_is_real(value)  ? json_real_value(value) : -1e300;
    /* the range first: converting a number past long long (1e300) is undefined behaviour */
    if (!json_is_number(value) || number < minimum || number > V1_MAX_INT ||
        number != (double)(long long)number) {
        http_respond_error(request, 400, "'%s' must be a whole number from %d to %d", field,
                           minimum, V1_MAX_INT);
        return false;
    }
    *out = (int)number;
    return true;
}

bool v1_optional_bool(http_request *request, json_t *body, const char *field, bool *out)
{
    json_t *value = json_object_get(body, field);
    if (!value || json_is_null(value))
        return true;
    if (!json_is_boolean(value)) {
        http_respond_error(request, 400, "'%s' must be true or false", field);
        return false;
    }
    *out = json_is_true(value);
    return true;
}

bool v1_optional_string_map(http_request *request, json_t *body, const char *field, json_t **out)
{
    json_t *value = json_object_get(body, field);
    if (!value || json_is_null(value))
        return true;
    if (!json_is_object(value)) {
        http_respond_error(request, 400, "'%s' must be an object of strings", field);
        return false;
    }
    const char *key;
    json_t *item;
    json_object_foreach(value, key, item)
    {
        if (!json_is_string(item)) {
            http_respond_error(request, 400, "'%s.%s' must be a string", field, key);
            return false;
        }
        if (!*key || strchr(key, '=') || strlen(key) > 255) {
            http_respond_error(request, 400, "'%s' has an invalid name '%.*s'", field,
                               text_utf8_prefix(key, 64), key);
            return false;
        }
    }
    *out = value;
    return true;
}

bool v1_require_running(http_request *request, box *b)
{
    char why[256];
    bool auto_resume;
    switch (box_get_state(b)) {
    case BOX_RUNNING:
        return true;
    case BOX_PAUSED:
        if (!http_query_flag(request, "auto_resume", &auto_resume))
            return false;
        if (auto_resume) {
            if (box_resume(b, why, sizeof why) == 0)
                return true;
            http_respond_error(request, 500, "%s", why);
            return false;
        }
        http_respond_error(request, 409, "sandbox %s is paused: resume it with POST "
                           "/v1/sandboxes/%s/resume, or pass ?auto_resume=true", box_id(b), box_id(b));
        return false;
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

/* ---- templates and sandboxes ---- */

static void list_templates(http_request *request)
{
    json_t *list = json_array();
    for (size_t i = 0; i < kernelspec_count(); i++) {
        const kernelspec *spec = kernelspec_at(i);
        json_array_append_new(list, json_pack("{s:s, s:s, s:s, s:b, s:s, s:i}", "name", spec->name,
                                              "display_name", spec->display_name, "language",
                                              spec->language, "default",
                                              strcmp(spec->name, manager_default_kernel()) == 0,
                                              "preload", spec->preload, "pool_size", spec->pool_size));
    }
    http_respond_json(request, 200, list);
}

static void create_sandbox(http_request *request)
{
    static const char *const fields[] = {"template", "timeout_s", "env", "metadata", "limits",
                                         "network", NULL};
    json_t *body = v1_parse_body(request, fields);
    if (!body)
        return;
    const char *template_name = manager_default_kernel();
    int timeout_s = 300;
    json_t *env = NULL, *metadata = NULL;
    json_t *limits = json_object_get(body, "limits");
    if (!v1_optional_string(request, body, "template", &template_name) ||
        !v1_optional_int(request, body, "timeout_s", 0, &timeout_s) ||
        !v1_optional_string_map(request, body, "env", &env) ||
        !v1_optional_string_map(request, body, "metadata", &metadata)) {
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
    kernel *k = manager_create(template_name, env, limits, json_object_get(body, "network"),
                               &failure, why, sizeof why);
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
        strcmp(state, "dead") != 0) {
        http_respond_error(request, 400, "unknown state '%s': use running, paused or dead", state);
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
        json_t *body = v1_parse_body(request, fields);
        int timeout_s = -1;
        if (!body)
            return;
        if (v1_optional_int(request, body, "timeout_s", 0, &timeout_s)) {
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

/* ---- contexts ---- */

void v1_create_context(http_request *request, box *b)
{
    static const char *const fields[] = {"language", "cwd", NULL};
    json_t *body = v1_parse_body(request, fields);
    if (!body)
        return;
    const char *language = "python", *cwd = "/workspace";
    if (v1_optional_string(request, body, "language", &language) &&
        v1_optional_string(request, body, "cwd", &cwd)) {
        char why[512];
        failure_kind failure;
        kernel *k = NULL;
        if (strcmp(language, "python") != 0 && strcmp(language, "python3") != 0)
            http_respond_error(request, 400, "language '%s' is not available (python is)", language);
        else if (cwd[0] != '/' || strstr(cwd, ".."))
            http_respond_error(request, 400, "'cwd' must be an absolute path without '..'");
        else if (!(k = box_add_context(b, cwd, &failure, why, sizeof why)))
            http_respond_error(request, errors_status_of_failure(failure),
                               "cannot start the context: %s", why);
        else
            http_respond_json(request, 201, box_context_model(b, k));
    }
    json_decref(body);
}

void v1_route_context(http_request *request, box *b, const char *context_id, const char *action)
{
    kernel *k = box_find_context(b, context_id);
    char why[512];
    if (!k) {
        http_respond_error(request, 404, "context %s does not exist in sandbox %s", context_id,
                           box_id(b));
        return;
    }
    if (!action && http_method_is(request, "DELETE")) {
        if (box_delete_context(b, k) < 0)
            http_respond_error(request, 409, "the default context cannot be deleted: delete the "
                               "sandbox instead (DELETE /v1/sandboxes/%s)", box_id(b));
        else
            http_respond(request, 204, NULL, "", 0);
    } else if (!action && http_method_is(request, "GET")) {
        http_respond_json(request, 200, box_context_model(b, k));
    } else if (action && strcmp(action, "restart") == 0 && http_method_is(request, "POST")) {
        if (box_get_state(b) == BOX_PAUSED && !v1_require_running(request, b))
            return;
        if (kernel_restart(k, why, sizeof why) < 0)
            http_respond_error(request, 500, "restart failed: %s", why);
        else
            http_respond_json(request, 200, box_context_model(b, k));
    } else if (action && strcmp(action, "restart") != 0) {
        http_respond_error(request, 404, "no such context endpoint: %s", action);
    } else {
        http_respond_method_not_allowed(request, action ? "POST" : "GET, DELETE");
    }
}

/* ---- routing ---- */

/* The part of the path after /v1/sandboxes/{id}/files, for the files module. */
static const char *files_rest(const char *path)
{
    const char *files = strstr(path, "/files");
    return files ? files + 6 : "";
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
            v1_create_context(request, b);
    } else if (strcmp(what, "contexts") == 0 && n <= 6) {
        v1_route_context(request, b, s[4], n == 6 ? s[5] : NULL);
    } else if (strcmp(what, "files") == 0 && n <= 5) {
        if (v1_require_running(request, b))
            v1_files_route(request, b, files_rest(http_path(request)));
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
            list_templates(request);
        else
            http_respond_method_not_allowed(request, "GET");
    } else if (n == 2 && strcmp(s[1], "run") == 0) {
        if (http_method_is(request, "POST"))
            v1_run(request);
        else
            http_respond_method_not_allowed(request, "POST");
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
