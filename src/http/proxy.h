/* proxy — one HTTP request passed on to a server the daemon reaches through a socket it opened
 * (a server inside a sandbox, api/ports.c), and its answer streamed back.
 *
 * libcurl is the client, driven by its multi interface on the daemon's loop (its sockets are
 * loop watches, its timeouts loop timers). It is handed the socket through
 * CURLOPT_OPENSOCKETFUNCTION and connects it to 127.0.0.1:<port> itself; a connection is never
 * reused for another request (every inner server is "127.0.0.1:<port>" to libcurl, so a cached
 * connection could belong to another sandbox). The request goes on with its method, path, query,
 * headers (the hop-by-hop ones and those the caller withholds left out; Host set to
 * localhost:<port>, as a server listening there expects) and body, streamed; the answer's status and
 * headers are those of the inner server, its body streamed back as it comes. When more than
 * `max_queued` bytes wait for the client, the inner server is paused (TCP flow control holds it)
 * until the client has read them.
 *
 * An Upgrade (a WebSocket) is asked of the inner server as the client asked it; when it answers
 * 101, the client gets that answer and its headers, and the two sockets are joined
 * (http/tunnel.h) until either side closes. Any other answer goes back as an answer. */
#ifndef CELLBOX_HTTP_PROXY_H
#define CELLBOX_HTTP_PROXY_H

#include <stdbool.h>
#include <stddef.h>

#include "http/server.h"

typedef struct http_proxy_target {
    int socket;                          /* unconnected TCP socket, taken over */
    int port;                            /* the inner server's port on 127.0.0.1 */
    const char *const *withheld_headers; /* request headers not passed on; NULL-terminated */
    const char *withheld_query;          /* a query argument not passed on; NULL: none */
    long connect_timeout_ms;
    long idle_timeout_s;                 /* nothing moving for this long ends the exchange */
    size_t max_queued;                   /* answer bytes waiting for the client at most */
    long tunnel_idle_timeout_s;          /* an upgraded connection with nothing moving */
} http_proxy_target;

/* Called when the inner server could not be reached or gave no answer: nothing was sent yet,
   and the callback answers the request itself. `refused`: nothing listens on the port. */
typedef void (*http_proxy_failed)(void *arg, http_request *request, bool refused,
                                  const char *why);

/* Forwards `request`, called when its head is in (the server's streams_body said so): its body
   goes on as it arrives (at most `max_queued` bytes wait for the inner server, then the client's
   body is paused). Exactly one of on_failed (which answers) or an answer from the inner server
   follows, once the client's body is all in; on_finished(arg) runs once when the exchange is
   over either way. */
void http_proxy_forward(http_request *request, const http_proxy_target *target,
                        http_proxy_failed on_failed, void (*on_finished)(void *arg), void *arg);

/* Ends every exchange still running (at shutdown, before the server stops). */
void http_proxy_stop(void);

#endif
