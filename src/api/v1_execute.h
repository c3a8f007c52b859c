/* v1_execute — POST /v1/sandboxes/{id}/execute: runs a cell in a sandbox's default context (or
 * the one named) and streams its events as NDJSON until it ends; the client going away
 * interrupts it. Shared by /v1 (v1.c) and E2B's code interpreter /execute (e2b.c). */
#ifndef CELLBOX_API_V1_EXECUTE_H
#define CELLBOX_API_V1_EXECUTE_H

#include <stdbool.h>

#include "http/server.h"
#include "model/box.h"

/* The box is running. A traceback keeps IPython's colours when the body says "color": true, or
   when it does not say and color_by_default (E2B's code interpreter sends them coloured). */
void v1_execute(http_request *request, box *b, bool color_by_default);

#endif
