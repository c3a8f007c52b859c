/* ports — E2B's sandbox hosts: `sandbox.getHost(port)` is <port>-<sandboxId>.<domain>, and a
 * request whose Host names one reaches the server listening on 127.0.0.1:<port> inside that
 * sandbox.
 *
 * The sandbox keeps its network namespace of its own (a networked one has its interface there,
 * sandbox/network.h, which the firewall keeps closed to inbound connections): the daemon opens a socket inside the sandbox's network namespace (sandbox/network_socket.h)
 * and forwards the request through it (http/proxy.h). Ports 49983 (envd) and 49999 (the code
 * interpreter) on such a host are cellbox's own E2B routes, as with the E2b-Sandbox-Id and
 * E2b-Sandbox-Port headers (api/e2b.h). Requests need the daemon's token as every request does
 * (E2B's e2b-traffic-access-token header carries it); the token and E2B's credential headers are
 * never passed on to the sandbox's server. docs/api.md and docs/security.md say more. */
#ifndef CELLBOX_API_PORTS_H
#define CELLBOX_API_PORTS_H

#include <stdbool.h>

#include "http/server.h"

#define PORTS_MAX_ID 64

typedef struct ports_address {
    int port;                          /* 1..65535 */
    char sandbox_id[PORTS_MAX_ID + 1];
} ports_address;

/* Called once, after the server listens: `domain` is --e2b-domain ("" or NULL: localhost with
   the daemon's port, as "localhost:8888"); `token` is the daemon's, withheld from inner servers. */
void ports_init(const char *domain, int daemon_port, const char *token);
/* The domain E2B's create and connect answers carry, from which the SDK builds getHost. */
const char *ports_domain(void);
/* True, with the port and sandbox id, when `host` (a Host header's value) is
   <port>-<id>.<domain>: a port 1..65535 in decimal, an id of letters, digits, '-' and '_', and
   our domain (see names_our_domain in ports.c for how its port matches). */
bool ports_parse_host(const char *host, ports_address *address);
/* The same for the request's Host. */
bool ports_address_of(const http_request *request, ports_address *address);
/* Forwards the request to the address's server (any port but E2B's own two), or answers why
   not in E2B's error shape: 502 for a sandbox that is not there or a port nothing listens on. */
void ports_forward(http_request *request, const ports_address *address);
/* At shutdown: ends the exchanges still running. */
void ports_stop(void);

#endif
