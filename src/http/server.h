/* http server — HTTP/1.1 through libmicrohttpd, driven by the daemon's event loop.
 *
 * libmicrohttpd parses requests and writes responses; this module plugs its epoll descriptor into
 * loop.c, gathers request bodies (with a size limit), checks the token, adds CORS headers, and
 * hands each complete request to one dispatch function. WebSocket upgrades are accepted here and
 * handed to websocket.c. */
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
    http_cors cors;
} http_server_options;

typedef void (*http_dispatch)(http_request *request);

/* Starts listening; returns the bound port. Exits the program with a clear message on failure. */
int http_server_start(const http_server_options *options, http_dispatch dispatch);
void http_server_stop(void);

/* The request. Path is relative to the base URL and always starts with '/'. */
const char *http_method(const http_request *request);
const char *http_path(const http_request *request);
const char *http_header(const http_request *request, const char *name);
const char *http_query(const http_request *request, const char *name);
const char *http_body(const http_request *request, size_t *length);
bool http_is_websocket_upgrade(const http_request *request);
const char *http_base_url(void);

/* Responses: exactly one per request. */
void http_add_response_header(http_request *request, const char *name, const char *value);
void http_respond(http_request *request, int status, const char *content_type, const void *body,
                  size_t length);
void http_respond_json(http_request *request, int status, json_t *body); /* steals body */
/* Errors carry Kernel Gateway's body: {"reason": "<HTTP reason phrase>", "message": "..."} */
void http_respond_error(http_request *request, int status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Completes a WebSocket handshake (RFC 6455) choosing `subprotocol` (NULL = none); once the
   101 is sent, `on_open` receives the new connection. Answers 400 itself for a bad handshake. */
typedef void (*http_websocket_open)(void *arg, websocket *socket);
void http_upgrade_websocket(http_request *request, const char *subprotocol, size_t max_message,
                            const websocket_callbacks *callbacks, http_websocket_open on_open,
                            void *arg);

#endif
