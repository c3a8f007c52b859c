/* request — the request helpers every API family shares: a JSON body parsed into an object, and
 * the checks of its optional fields. Each check answers 400 itself, with a message naming the
 * field and what it must be (errors go out as JSON through http_respond_error), and returns
 * false; the caller then only frees what it holds and returns.
 *
 * Used in this order while a handler reads its request: request_parse_body first, then one
 * request_optional_* per field. The bottom of api/: it includes nothing else from api/. */
#ifndef CELLBOX_API_REQUEST_H
#define CELLBOX_API_REQUEST_H

#include <jansson.h>
#include <stdbool.h>

#include "http/server.h"

/* The largest number request_optional_int accepts. */
#define REQUEST_MAX_INT 1000000000

/* For request_parse_body: every field is accepted (Kernel Gateway, sessions and E2B ignore the
   fields they have no use for). */
#define REQUEST_ANY_FIELD NULL

/* The body as a JSON object ({} when it is empty), or NULL after answering 400: not JSON, not
   an object, or (unless allowed_fields is REQUEST_ANY_FIELD) a field outside the NULL-ended
   list `allowed_fields`, which the message lists. */
json_t *request_parse_body(http_request *request, const char *const *allowed_fields);

/* Each leaves *out as it is when the field is absent or null. */
bool request_optional_string(http_request *request, json_t *body, const char *field,
                             const char **out);
/* A whole number from `minimum` to REQUEST_MAX_INT. */
bool request_optional_int(http_request *request, json_t *body, const char *field, int minimum,
                          int *out);
bool request_optional_bool(http_request *request, json_t *body, const char *field, bool *out);
/* An object of string values whose names could be environment variables (no '=', not empty,
   at most 255 bytes); *out is borrowed from `body`. */
bool request_optional_string_map(http_request *request, json_t *body, const char *field,
                                 json_t **out);
/* Each field of the NULL-ended list `fields` is absent, null or a string. */
bool request_optional_strings(http_request *request, json_t *object, const char *const *fields);

#endif
