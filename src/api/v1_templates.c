#include "api/v1_templates.h"

#include <string.h>

#include "api/errors.h"
#include "common/text.h"
#include "model/templates.h"

void v1_templates_list(http_request *request)
{
    http_respond_json(request, 200, templates_list_model());
}

static void get_template(http_request *request, const char *name)
{
    json_t *model = templates_model(name);
    if (!model) {
        http_respond_error(request, 404,
                           "template '%.*s' does not exist (GET /v1/templates lists them)",
                           text_utf8_prefix(name, 200), name);
        return;
    }
    http_respond_json(request, 200, model);
}

static void delete_template(http_request *request, const char *name)
{
    failure_kind failure;
    char why[1024];
    if (templates_delete(name, &failure, why, sizeof why) < 0) {
        http_respond_error(request, errors_status_of_failure(failure), "%s", why);
        return;
    }
    http_respond(request, 204, NULL, "", 0);
}

void v1_templates_route(http_request *request, const char *name, const char *action)
{
    if (!action) {
        if (http_method_is(request, "GET"))
            get_template(request, name);
        else if (http_method_is(request, "DELETE"))
            delete_template(request, name);
        else
            http_respond_method_not_allowed(request, "GET, DELETE");
        return;
    }
    http_respond_error(request, 404, "no such endpoint: %s", http_path(request));
}

bool v1_templates_streams_body(const char *method, const char *path)
{
    return false;
}
