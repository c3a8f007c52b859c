/* v1_commands — /v1/sandboxes/{id}/commands: start a shell command (POST; foreground commands
 * stream their output as NDJSON, background ones answer at once), list them, and on one: GET,
 * DELETE, GET wait, POST stdin, POST signal. */
#ifndef CELLBOX_API_V1_COMMANDS_H
#define CELLBOX_API_V1_COMMANDS_H

#include "http/server.h"
#include "model/box.h"

/* `segments` (count of them) start at "commands": ["commands", id?, action?]. */
void v1_commands_route(http_request *request, box *b, char **segments, int count);

#endif
