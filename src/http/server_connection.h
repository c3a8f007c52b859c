/* server_connection — the libmicrohttpd connection under a request, for http/'s own modules
 * that drive libmicrohttpd themselves (form.c's post processor). Not for api/: routes see
 * requests only through server.h. */
#ifndef CELLBOX_HTTP_SERVER_CONNECTION_H
#define CELLBOX_HTTP_SERVER_CONNECTION_H

#include "http/server.h"

struct MHD_Connection;

struct MHD_Connection *http_request_connection(http_request *request);

#endif
