/* tunnel — bytes pumped both ways between two sockets until either side closes.
 *
 * After an HTTP Upgrade both ends speak a protocol the daemon does not read (a WebSocket to a
 * server inside a sandbox, http/proxy.c): it only copies. Each direction holds at most
 * TUNNEL_MAX_QUEUED bytes; past that the daemon stops reading the sender until the receiver has
 * taken some (TCP's flow control then holds the sender back). The bytes queued towards the client
 * count in the daemon-wide ceiling (outbound.h), which can end the tunnel. A tunnel with nothing
 * moving for `idle_timeout_s` is closed. */
#ifndef CELLBOX_HTTP_TUNNEL_H
#define CELLBOX_HTTP_TUNNEL_H

#include <stddef.h>

#define TUNNEL_MAX_QUEUED (1 << 20)

typedef struct http_tunnel_ends {
    int client;                     /* the client's upgraded socket */
    void (*close_client)(void *handle); /* closes it (libmicrohttpd's upgrade handle) */
    void *client_handle;
    int inner;                      /* the inner server's socket, taken over (closed here) */
    const char *to_inner;           /* bytes the client sent already, for the inner server */
    size_t to_inner_length;
    const char *to_client;          /* bytes the inner server sent already, for the client */
    size_t to_client_length;
    long idle_timeout_s;
} http_tunnel_ends;

/* Starts pumping (the pending bytes are copied); on_closed(arg) runs once both sockets are
   closed. */
void http_tunnel_start(const http_tunnel_ends *ends, void (*on_closed)(void *arg), void *arg);
/* Closes every tunnel (at shutdown, before the server stops). */
void http_tunnel_close_all(void);

#endif
