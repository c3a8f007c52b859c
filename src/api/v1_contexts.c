#include "api/v1_contexts.h"

#include <string.h>

#include "api/errors.h"
#include "api/request.h"
#include "api/v1_ready.h"

void v1_create_context(http_request *request, box *b, const char *default_cwd)
{
    static const char *const fields[] = {"language", "cwd", NULL};
    json_t *body = request_parse_body(request, fields);
    if (!body)
        return;
    const char *language = "python", *cwd = default_cwd;
    if (request_optional_string(request, body, "language", &language) &&
        request_optional_string(request, body, "cwd", &cwd)) {
        char why[512];
        failure_kind failure;
        kernel *k = NULL;
        const kernelspec *spec = box_spec_for_language(b, language);
        if (!spec)
            http_respond_error(request, 400, "language '%s' is not available: use %s", language,
                               kernelspec_language_list());
        else if (cwd[0] != '/' || strstr(cwd, ".."))
            http_respond_error(request, 400, "'cwd' must be an absolute path without '..'");
        else if (!(k = box_add_context(b, spec, cwd, &failure, why, sizeof why)))
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
            http_respond_error(request, 409,
                               "the default context cannot be deleted: delete the "
                               "sandbox instead (DELETE /v1/sandboxes/%s)",
                               box_id(b));
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
