/* http server — HTTP/1.1 through libmicrohttpd, driven by the daemon's event loop.
 *
 * libmicrohttpd parses requests and writes responses; this module plugs its epoll descriptor into
 * loop.c, refuses requests that could be read two ways (ambiguous framing, NUL or control bytes
 * in the path or query, heads too large) before anything acts on them, gathers request bodies
 * (with a size limit), checks the token, adds CORS headers, and hands each complete request to
 * one dispatch function. An answer sent before the body was read is followed by a lingering
 * close (linger.c). WebSocket upgrades are accepted here and handed to websocket.c. */
#ifndef CELLBOX_HTTP_SERVER_H
#define CELLBOX_HTTP_SERVER_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "http/websocket.h"

typedef struct http_request http_request;

typedef struct http_cors {
    const char *allow_origin, *allow_headers, *allow_methods, *expose_headers;
    bool allow_credentials;
    int max_age; /* seconds; 0 = not sent */
} http_cors;

typedef struct http_server_options {
    const char *ip;
    int port;               /* 0 = any free port */
    const char *base_url;   /* "/" or "/prefix/" */
    const char *token;      /* "" = no authentication (loopback only) */
    size_t max_body_size;   /* larger request bodies get 413 */
    unsigned max_connections;         /* past it: 503 (see admission.h); 0 = no limit */
    unsigned max_connections_per_ip;  /* past it: 429; 0 = no limit */
    /* Does this request take its body as a stream (see http_receive_body)? Asked once its head
       is in (method, path, headers). May be NULL. */
    bool (*streams_body)(const http_request *request);
    /* Does the API admit this request without the daemon's token, on a credential of its own
       (a sandbox's envd access token, a signed file URL)? Asked only when the token check
       failed; may be NULL. A request it admits must be checked in full by its route. */
    bool (*admits)(const http_request *request);
    http_cors cors;
} http_server_options;

typedef void (*http_dispatch)(http_request *request);

/* Starts listening; returns the bound port. Exits the program with a clear message on failure. */
int http_server_start(const http_server_options *options, http_dispatch dispatch);
void http_server_stop(void);

/* The request. Path is relative to the base URL and always starts with '/'. */
const char *http_method(const http_request *request);
bool http_method_is(const http_request *request, const char *method);
const char *http_path(const http_request *request);
const char *http_header(const http_request *request, const char *name);
const char *http_query(const http_request *request, const char *name);
const char *http_body(const http_request *request, size_t *length);
/* Adds every query argument named `prefix`<key> to `out` as key → value (e.g. ?metadata.user=x). */
void http_query_each(const http_request *request, const char *prefix, json_t *out);
/* Calls visit(arg, name, value) for every request header / query argument, in request order
   (a query argument without '=' has a NULL value; names and values are percent-decoded). */
void http_each_header(const http_request *request,
                      void (*visit)(void *arg, const char *name, const char *value), void *arg);
void http_each_query_argument(const http_request *request,
                              void (*visit)(void *arg, const char *name, const char *value),
                              void *arg);
bool http_is_websocket_upgrade(const http_request *request);
const char *http_base_url(void);

/* Responses: exactly one per request. */
void http_add_response_header(http_request *request, const char *name, const char *value);
void http_respond(http_request *request, int status, const char *content_type, const void *body,
                  size_t length);
void http_respond_json(http_request *request, int status, json_t *body); /* steals body */
/* 405 naming the method and path, with the Allow header listing `allow` ("GET, DELETE"). */
void http_respond_method_not_allowed(http_request *request, const char *allow);
/* Errors carry Kernel Gateway's body: {"reason": "<HTTP reason phrase>", "message": "..."} */
void http_respond_error(http_request *request, int status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Completes a WebSocket handshake (RFC 6455) choosing `subprotocol` (NULL = none); once the
   101 is sent, `on_open` receives the new connection. Answers 400 itself for a bad handshake. */
/* Streaming responses (NDJSON streams, tar downloads): the body goes out piece by piece as it is
   written; while nothing is queued the connection is suspended. `on_closed` is called once, when
   the last byte went out after http_stream_end (completed) or when the client went away first
   (not completed); the stream is invalid afterwards and must not be touched. */
typedef struct http_stream http_stream;
typedef void (*http_stream_closed)(void *arg, bool completed);
http_stream *http_respond_stream(http_request *request, int status, const char *content_type,
                                 http_stream_closed on_closed, void *arg);
void http_stream_write(http_stream *stream, const void *data, size_t length); /* copies */
void http_stream_write_line(http_stream *stream, json_t *value); /* steals; compact JSON + "\n" */
size_t http_stream_queued(const http_stream *stream);            /* bytes not yet sent */
/* Called whenever the queue has been emptied, for producers that pause on a full queue. */
void http_stream_on_drained(http_stream *stream, void (*on_drained)(void *arg));
void http_stream_end(http_stream *stream);
/* A held-open response answered late: one JSON document (stolen), then the end. */
void http_stream_finish_json(http_stream *stream, json_t *value);
/* A response whose body is `length` bytes read from `fd` (sendfile); the server closes fd. */
void http_respond_fd(http_request *request, int status, const char *content_type, int fd,
                     size_t length);

/* Requests whose body is consumed as it arrives (uploads of any size): routes named by the
   `streams_body` option are dispatched as soon as their headers are in, without the body size
   limit; the handler calls http_receive_body, then responds from `on_end` (or earlier, on error:
   the rest of the body is then discarded). on_data returns 0, or -1 to stop receiving. */
typedef struct http_body_receiver {
    int (*on_data)(void *arg, const char *data, size_t length);
    void (*on_end)(http_request *request, void *arg);   /* the whole body is in */
    void (*on_abort)(void *arg);                        /* the client went away first */
} http_body_receiver;
void http_receive_body(http_request *request, const http_body_receiver *receiver, void *arg);
/* A receiver whose consumer is slower than the client (a proxied upload) stops the body: the
   connection sleeps (the client's TCP window fills) until http_resume_body. */
void http_pause_body(http_request *request);
void http_resume_body(http_request *request);
bool http_responded(const http_request *request);
/* Was this request dispatched before its body (streams_body said so)? Its body then comes only
   through http_receive_body; http_body has nothing. */
bool http_body_is_streamed(const http_request *request);
/* Did the request carry the daemon's token (or need none)? False when only the API's `admits`
   let it in, on a credential that opens one sandbox. */
bool http_admitted_by_token(const http_request *request);

/* The response comes later, from the loop (a proxied request waits for the inner server's
   head): called from dispatch (or a body receiver's on_end), it puts the connection to sleep
   until one of the http_respond* calls above gives the response, which wakes it. */
void http_respond_later(http_request *request);

typedef void (*http_websocket_open)(void *arg, websocket *socket);
void http_upgrade_websocket(http_request *request, const char *subprotocol, size_t max_message,
                            const websocket_callbacks *callbacks, http_websocket_open on_open,
                            void *arg);

/* Passes an Upgrade on as it is (a proxied WebSocket, http/proxy.c): answers 101 with the
   headers added by http_add_response_header (Upgrade among them), then hands over the client's
   socket with the bytes it sent after its request already (`extra`). The socket is closed with
   http_upgraded_close(handle), never close(). on_open gets socket -1 when the client went away
   before the switch. */
typedef void (*http_raw_upgrade_open)(void *arg, int socket, const char *extra, size_t extra_size,
                                      void *handle);
void http_upgrade_raw(http_request *request, http_raw_upgrade_open on_open, void *arg);
void http_upgraded_close(void *handle);

#endif
