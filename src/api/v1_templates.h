/* v1_templates — /v1/templates: the list (every template, python3 first), one template's model,
 * its deletion, and the import of a root filesystem as a template (model/templates.h). The
 * Dockerfile build (POST /v1/templates) is v1_template_build's. */
#ifndef CELLBOX_API_V1_TEMPLATES_H
#define CELLBOX_API_V1_TEMPLATES_H

#include <stdbool.h>

#include "http/server.h"

/* GET /v1/templates. */
void v1_templates_list(http_request *request);
/* /v1/templates/{name}[/{action}]: GET and DELETE of one, POST .../import. */
void v1_templates_route(http_request *request, const char *name, const char *action);
/* Does this request take its body as a stream (POST /v1/templates/{name}/import)? */
bool v1_templates_streams_body(const char *method, const char *path);

#endif
