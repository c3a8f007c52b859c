/* form — a multipart/form-data request body (RFC 7578) read as it arrives, through
 * libmicrohttpd's post processor: each part's bytes reach the caller in pieces, so a part may
 * be larger than memory and its boundary may fall anywhere across reads. For routes that take
 * their body as a stream (http_receive_body): the receiver's on_data feeds the form. */
#ifndef CELLBOX_HTTP_FORM_H
#define CELLBOX_HTTP_FORM_H

#include <stddef.h>

#include "http/server.h"

typedef struct http_form http_form;

typedef struct http_form_callbacks {
    /* A part begins: its field name and filename as the client sent them (filename "" when the
       part has none). Returns 0, or -1 to stop reading the form. */
    int (*on_part)(void *arg, const char *name, const char *filename);
    /* The next piece of the current part's bytes. Returns 0, or -1 to stop. */
    int (*on_data)(void *arg, const char *data, size_t length);
} http_form_callbacks;

/* A reader for the request's form; NULL when its Content-Type is not multipart/form-data with a
   boundary. */
http_form *http_form_open(http_request *request, const http_form_callbacks *callbacks, void *arg);
/* Reads the next piece of the body: 0, or -1 when the form is malformed or a callback stopped. */
int http_form_feed(http_form *form, const char *data, size_t length);
/* The body is over: 0 when the form ended with its closing boundary, -1 when it was cut short
   or malformed. Frees the reader. */
int http_form_close(http_form *form);

#endif
