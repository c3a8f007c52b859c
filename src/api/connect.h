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
 * Server-streaming methods (a request of one envelope, a response of envelopes ending with the
 * end-of-stream frame, Content-Type application/connect+json) get a connect_stream to send on
 * from the loop, with keepalives (Keepalive-Ping-Interval) and a deadline (Connect-Timeout-Ms)
 * kept here. Client-streaming methods read a request of many envelopes as the body arrives
 * (http_receive_body) and answer one message and the end-of-stream frame. Errors of a streaming
 * call, those found before it started included, go in the end-of-stream frame of an HTTP 200,
 * as the protocol has it; only a wrong HTTP method (405) or codec (415) is an HTTP error. */
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

/* ---- server streaming ---- */

typedef struct connect_stream connect_stream;
/* A server-streaming method: the handler starts the call; it sends messages with
   connect_stream_send and ends it once with connect_stream_end, at once or later from the loop.
   Ending at once with an error before any message answers the call as a failed stream. */
typedef void (*connect_server_streaming)(void *context, json_t *request, connect_stream *stream);

/* ---- client streaming ---- */

/* A client-streaming method, called as its request's envelopes arrive. `call` is what `open`
   returned; `close` is called exactly once for every call `open` began, last, whether the call
   answered, failed or the client went away. */
typedef struct connect_client_streaming {
    /* The headers are in: the method's state for this call, or NULL with the error set. */
    void *(*open)(void *context, connect_error *error);
    /* Each request message (borrowed), in order; false with the error set ends the call. */
    bool (*on_message)(void *call, json_t *message, connect_error *error);
    /* The body ended: the response message (stolen), or NULL with the error set. */
    json_t *(*on_end)(void *call, connect_error *error);
    void (*close)(void *call);
} connect_client_streaming;

typedef struct connect_method {
    const char *name;                          /* "ListDir" */
    connect_unary unary;                       /* NULL for a streaming method */
    connect_server_streaming server_streaming; /* NULL for unary methods */
    /* The protojson message a server stream sends as its keepalive, e.g.
       "{\"event\":{\"keepalive\":{}}}" (NULL: none). */
    const char *keepalive;
    const connect_client_streaming *client_streaming; /* NULL unless client streaming */
} connect_method;

typedef struct connect_service {
    const char *name;              /* "filesystem.Filesystem" */
    const connect_method *methods; /* ended by an entry whose name is NULL */
} connect_service;

/* Answers the call `service`/`method` (the path's two segments) from `services` (NULL-ended). */
void connect_serve(http_request *request, const connect_service *const *services,
                   const char *service, const char *method, void *context);

/* Is `path` (/{package.Service}/{Method}) a client-streaming method of `services`, whose body
   the server hands over as it arrives (http_server_options.streams_body)? */
bool connect_streams_body(const connect_service *const *services, const char *method,
                          const char *path);

void connect_stream_send(connect_stream *stream, json_t *message); /* steals message */
/* NULL: success. The stream is freed after: never touch it again. */
void connect_stream_end(connect_stream *stream, const connect_error *error);
/* Called once if the call ends before connect_stream_end (client went away, Connect-Timeout-Ms
   passed): the handler must forget the stream; it is freed after on_cancel returns. */
void connect_stream_on_cancel(connect_stream *stream, void (*on_cancel)(void *arg), void *arg);
size_t connect_stream_queued(const connect_stream *stream); /* bytes not yet sent: backpressure */

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
