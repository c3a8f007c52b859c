/* network_socket — a TCP socket that lives in a sandbox's network namespace.
 *
 * A sandbox has a network namespace of its own with only loopback up, so a server it runs on
 * 127.0.0.1:<port> is out of the daemon's reach, and the sandbox is given no route out to make
 * it reachable. A socket belongs for good to the namespace it was created in: the daemon creates
 * one there, from a short-lived thread that alone enters the namespace, and connects it (or lets
 * libcurl connect it) to 127.0.0.1:<port> from its own loop. The sandbox gains no interface,
 * route or descriptor; only the daemon holds the socket. */
#ifndef CELLBOX_SANDBOX_NETWORK_SOCKET_H
#define CELLBOX_SANDBOX_NETWORK_SOCKET_H

#include <stddef.h>

/* A non-blocking, close-on-exec IPv4 TCP socket, unconnected, in the network namespace of the
   process `supervisor_pidfd` names (a sandbox's pid 1). Returns it, or -1 with `why`. */
int network_socket_open(int supervisor_pidfd, char *why, size_t why_size);

#endif
