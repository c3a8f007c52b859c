/* connect — Connect protocol v1 (connectrpc.com/docs/protocol) over the HTTP server: the wire of
 * E2B envd's Connect-RPC services (filesystem.Filesystem, process.Process), which E2B's SDKs call
 * as POST /{package.Service}/{Method}.
 *
 * A service is a table of methods; each unary method is a handler from the request message to
 * the response message, both as protojson (jansson objects: camelCase fields, int64 as strings,
 * enums by name; unknown request fields are ignored, as connect-go's servers do). connect_serve
 * checks the protocol (POST, Content-Type application/json, Connect-Protocol-Version,
 * Connect-Timeout-Ms), parses the message, calls the handler and answers: 200 with the response
 * message, or Connect's error {"code", "message"} with the HTTP status Connect gives the code.
 *
 * Server-streaming methods (application/connect+json envelopes ending with the end-of-stream
 * frame) have a slot in the table, `streaming`; none is served yet, so they answer
 * "unimplemented" like unknown methods. */
#ifndef CELLBOX_API_CONNECT_H
#define CELLBOX_API_CONNECT_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "http/server.h"

/* What a failed call says: a Connect code name ("not_found"; errors.h maps domain failures to
   one) and a message naming the thing and what to do next. */
typedef struct connect_error {
    const char *code;
    char message[1024];
} connect_error;

/* A unary method: the response message (owned by the caller), or NULL after connect_fail.
   `request` is the parsed message, borrowed; `context` is what connect_serve was given. */
typedef json_t *(*connect_unary)(void *context, json_t *request, connect_error *error);

typedef struct connect_method {
    const char *name;    /* "ListDir" */
    connect_unary unary; /* NULL for a server-streaming method */
    bool streaming;      /* a server-streaming method: not served yet ("unimplemented") */
} connect_method;

typedef struct connect_service {
    const char *name;              /* "filesystem.Filesystem" */
    const connect_method *methods; /* ended by an entry whose name is NULL */
} connect_service;

/* Answers the call `service`/`method` (the path's two segments) from `services` (NULL-ended). */
void connect_serve(http_request *request, const connect_service *const *services,
                   const char *service, const char *method, void *context);

/* Answers a call refused before any method ran (its user, say) with Connect's error. */
void connect_respond_error(http_request *request, const connect_error *error);

/* Records a failure in `error` and returns NULL, for a handler's `return`. */
json_t *connect_fail(connect_error *error, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Reading a request message's fields as protojson writes them: each leaves *out as it is when
   the field is absent or null, and fails the call (invalid_argument, naming the field) when it
   is there with the wrong type. A uint32 may be a number or a decimal string. */
bool connect_string_field(json_t *message, const char *field, const char **out,
                          connect_error *error);
bool connect_uint32_field(json_t *message, const char *field, unsigned *out, connect_error *error);

#endif
