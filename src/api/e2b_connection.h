/* e2b_connection — what E2B's SDK is given to reach a sandbox: the answer to a create, a
 * connect, a restore and a fork (E2B's Sandbox schema), shared by api/e2b.c and
 * api/e2b_snapshots.c.
 *
 * Verbs: e2b_connection_model. */
#ifndef CELLBOX_API_E2B_CONNECTION_H
#define CELLBOX_API_E2B_CONNECTION_H

#include <jansson.h>

#include "http/server.h"
#include "model/box.h"

#define E2B_ENVD_VERSION "0.6.4" /* the envd whose API cellbox speaks (docs/e2b-envd.md) */
#define E2B_CLIENT_ID "cellbox"

/* Sandbox b's id, template, envd version, domain and access tokens. */
json_t *e2b_connection_model(http_request *request, box *b);

#endif
