/* e2b_network — E2B's network options over a cellbox sandbox's own interface and egress lists
 * (kernel_set_egress): Sandbox.create({allowInternetAccess, network: {allowOut, denyOut}}),
 * Sandbox.updateNetwork (PUT /sandboxes/{id}/network) and what getInfo reads back
 * (allowInternetAccess, network). The options of E2B's egress proxy (rules, egressProxy,
 * maskRequestHost, httpsPorts, allowPublicTraffic: true) are refused by name (501).
 *
 * Unlike E2B's cloud, a sandbox has no network unless it asks: allowInternetAccess: true or
 * an allowOut/denyOut list asks for one. allowInternetAccess: false is E2B's denyOut
 * ["0.0.0.0/0"]: alone it means no network at all (as before); beside lists it gives a
 * networked sandbox whose denyOut also holds 0.0.0.0/0, so only allowOut is reached. */
#ifndef CELLBOX_API_E2B_NETWORK_H
#define CELLBOX_API_E2B_NETWORK_H

#include <jansson.h>
#include <stddef.h>

#include "http/server.h"
#include "model/box.h"

/* What a create asked for: read by e2b_network_read_create, used once the sandbox is made. */
typedef struct e2b_network_request {
    json_t *network;   /* for manager_create: true, false, or NULL when nothing was asked */
    json_t *allow_out; /* the lists for kernel_set_egress (NULL: none asked) */
    json_t *deny_out;
} e2b_network_request;

/* Reads POST /sandboxes' allow_internet_access and network. 0, or -1 after answering (400 for a
   malformed field, 501 naming a cloud-only option). */
int e2b_network_read_create(http_request *request, json_t *body, e2b_network_request *out);
/* Gives the new sandbox the lists asked for. 0, or -1 with `why` (an entry kernel_set_egress
   does not take). */
int e2b_network_apply(kernel *k, const e2b_network_request *request, char *why, size_t why_size);
void e2b_network_request_free(e2b_network_request *request);

/* PUT /sandboxes/{id}/network {allowOut, denyOut, allow_internet_access}: replaces the lists
   (omitted ones cleared); 204, 400 for a bad entry, 409 for a sandbox without network, 501 for
   rules or egressProxy. */
void e2b_network_update(http_request *request, box *b);
/* Adds getInfo's allowInternetAccess and network ({allowOut, denyOut}, only for a sandbox with
   network) to its model. */
void e2b_network_describe(box *b, json_t *model);

#endif
