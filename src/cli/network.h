/* network (cli) — a sandbox's network as the CLI shows and changes it: `cellbox network`, the
 * lines `cellbox info` prints, and create's --allow-out/--deny-out. */
#ifndef CELLBOX_CLI_NETWORK_H
#define CELLBOX_CLI_NETWORK_H

#include <jansson.h>
#include <stdbool.h>

/* Appends `entry` to body's network.allowOut (allow) or network.denyOut, making the object: a
   list asks for network, as /v1 takes it. */
void network_add_entry(json_t *body, bool allow, const char *entry);
/* The model's "network" (false, or {address, allowOut, denyOut}) as `cellbox info` lines. */
void network_print(json_t *network);

#endif
