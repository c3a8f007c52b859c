#include "api/sessions.h"

#include <stdlib.h>
#include <string.h>

#include "api/kernels.h"
#include "api/request.h"
#include "common/ids.h"
#include "common/log.h"
#include "model/manager.h"

typedef struct session {
    char id[UUID_STRING_LENGTH + 1];
    char *path, *name, *type;
    kernel *kernel;
    struct session *next;
} session;

static session *sessions;

static json_t *session_model(const session *s)
{
    /* "notebook" is the pre-5.0 shape some clients still read. */
    return json_pack("{s:s, s:s, s:s, s:s, s:o, s:{s:s, s:s}}", "id", s->id, "path", s->path,
                     "name", s->name, "type", s->type, "kernel", manager_kernel_model(s->kernel),
                     "notebook", "path", s->path, "name", s->name);
}

static session *find_session(const char *id)
{
    for (session *s = sessions; s; s = s->next)
        if (strcmp(s->id, id) == 0)
            return s;
    return NULL;
}

static void unlink_session(session *target)
{
    for (session **at = &sessions; *at; at = &(*at)->next) {
        if (*at == target) {
            *at = target->next;
            break;
        }
    }
    free(target->path);
    free(target->name);
    free(target->type);
    free(target);
}

void sessions_kernel_deleted(kernel *k)
{
    session *s = sessions;
    while (s) {
        session *next = s->next;
        if (s->kernel == k)
            unlink_session(s);
        s = next;
    }
}

static void replace_string(char **field, const char *value)
{
    char *copy = strdup(value);
    if (!copy)
        die("out of memory");
    free(*field);
    *field = copy;
}

/* The session's kernel: an existing one by id, or a new one (name, env) as POST /api/kernels. */
static kernel *kernel_for(http_request *request, json_t *spec)
{
    static const char *const fields[] = {"id", "name", NULL};
    if (spec && !json_is_null(spec) && !json_is_object(spec)) {
        http_respond_error(request, 400, "'kernel' must be an object like {\"name\": \"python3\"}");
        return NULL;
    }
    if (spec && !request_optional_strings(request, spec, fields))
        return NULL;
    const char *id = json_string_value(json_object_get(spec, "id"));
    if (id) {
        kernel *k = manager_find(id);
        if (!k)
            http_respond_error(request, 404, "Kernel does not exist: %s", id);
        return k;
    }
    json_t *empty = json_object();
    kernel *k = kernels_create(request, spec && json_is_object(spec) ? spec : empty);
    json_decref(empty);
    return k;
}

static void post_session(http_request *request)
{
    static const char *const fields[] = {"path", "name", "type", NULL};
    json_t *body = request_parse_body(request, REQUEST_ANY_FIELD);
    if (!body)
        return;
    const char *path = json_string_value(json_object_get(body, "path"));
    const char *type = json_string_value(json_object_get(body, "type"));
    if (!request_optional_strings(request, body, fields)) {
        json_decref(body);
        return;
    }
    if (!path || !type) {
        http_respond_error(request, 400, "a session needs 'path' and 'type' strings");
        json_decref(body);
        return;
    }
    kernel *k = kernel_for(request, json_object_get(body, "kernel"));
    if (!k) {
        json_decref(body);
        return;
    }
    session *s = calloc(1, sizeof *s);
    if (!s)
        die("out of memory");
    id_uuid4(s->id);
    const char *name = json_string_value(json_object_get(body, "name"));
    replace_string(&s->path, path);
    replace_string(&s->type, type);
    replace_string(&s->name, name ? name : "");
    s->kernel = k;
    s->next = sessions;
    sessions = s;
    json_decref(body);
    char location[256];
    snprintf(location, sizeof location, "%sapi/sessions/%s", http_base_url(), s->id);
    http_add_response_header(request, "Location", location);
    http_respond_json(request, 201, session_model(s));
}

static void patch_session(http_request *request, session *s)
{
    static const char *const fields[] = {"path", "name", "type", NULL};
    json_t *body = request_parse_body(request, REQUEST_ANY_FIELD);
    if (!body)
        return;
    if (!request_optional_strings(request, body, fields)) {
        json_decref(body);
        return;
    }
    json_t *spec = json_object_get(body, "kernel");
    if (spec && !json_is_null(spec)) {
        kernel *k = kernel_for(request, spec);
        if (!k) {
            json_decref(body);
            return;
        }
        s->kernel = k;
    }
    for (const char *const *field = fields; *field; field++) {
        const char *value = json_string_value(json_object_get(body, *field));
        char **target = strcmp(*field, "path") == 0   ? &s->path
                        : strcmp(*field, "name") == 0 ? &s->name
                                                      : &s->type;
        if (value)
            replace_string(target, value);
    }
    json_decref(body);
    http_respond_json(request, 200, session_model(s));
}

void sessions_route(http_request *request, const char *session_id)
{
    const char *method = http_method(request);
    if (!session_id) {
        if (strcmp(method, "GET") == 0) {
            json_t *list = json_array();
            for (session *s = sessions; s; s = s->next)
                json_array_append_new(list, session_model(s));
            http_respond_json(request, 200, list);
        } else if (strcmp(method, "POST") == 0) {
            post_session(request);
        } else {
            http_respond_method_not_allowed(request, "GET, POST");
        }
        return;
    }
    session *s = find_session(session_id);
    if (!s) {
        http_respond_error(request, 404, "Session not found: %s", session_id);
        return;
    }
    if (strcmp(method, "GET") == 0) {
        http_respond_json(request, 200, session_model(s));
    } else if (strcmp(method, "PATCH") == 0) {
        patch_session(request, s);
    } else if (strcmp(method, "DELETE") == 0) {
        kernels_delete(s->kernel); /* deleting a session shuts its kernel down */
        http_respond(request, 204, NULL, "", 0);
    } else {
        http_respond_method_not_allowed(request, "GET, PATCH, DELETE");
    }
}
