/* v1 — cellbox's native API: sandboxes, contexts, the execution stream, commands, files and
 * stateless runs (docs/api.md, docs/openapi.yaml). This module routes /v1/... and holds the
 * request checks the v1_* modules share. */
#ifndef CELLBOX_API_V1_H
#define CELLBOX_API_V1_H

#include <jansson.h>
#include <stdbool.h>

#include "http/server.h"
#include "model/box.h"

void v1_init(void);
bool v1_owns(const char *path); /* "/v1" or below */
void v1_dispatch(http_request *request);
bool v1_streams_body(const char *method, const char *path);

/* Body checks: each returns false after answering 400 with a message naming the field (and,
   for numbers, the accepted range: whole numbers from `minimum` to V1_MAX_INT). */
#define V1_MAX_INT 1000000000
json_t *v1_parse_body(http_request *request, const char *const *allowed_fields);
bool v1_optional_string(http_request *request, json_t *body, const char *field, const char **out);
bool v1_optional_int(http_request *request, json_t *body, const char *field, int minimum,
                     int *out);
bool v1_optional_bool(http_request *request, json_t *body, const char *field, bool *out);
bool v1_optional_string_map(http_request *request, json_t *body, const char *field, json_t **out);

/* A sandbox that must be running for this call: a paused one is resumed with ?auto_resume=true,
   else 409 names the state (as for a dead one). */
bool v1_require_running(http_request *request, box *b);

/* Answers a sandbox's creation with 201 and `answer` (stolen; NULL: the sandbox's model) once
   its kernel k has started, so that the client's next call finds it ready; shared with E2B's
   POST /sandboxes (e2b.c). */
void v1_respond_when_ready(http_request *request, kernel *k, json_t *answer);

/* Contexts: POST .../contexts {language?, cwd?}, and GET, DELETE or POST restart (`action`
   "restart", else NULL) on one; shared with E2B's code interpreter routes (e2b.c). */
void v1_create_context(http_request *request, box *b);
void v1_route_context(http_request *request, box *b, const char *context_id, const char *action);

/* Stateless runs: POST /v1/run (v1_run.c). */
void v1_run(http_request *request);
/* Executions and commands (v1_streams.c). A traceback keeps IPython's colours when the body
   says "color": true, or when it does not say and color_by_default (E2B's code interpreter
   sends them coloured). */
void v1_execute(http_request *request, box *b, bool color_by_default);
void v1_commands_route(http_request *request, box *b, char **segments, int count);

#endif
