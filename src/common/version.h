/* version — cellbox's release, the one place it is written: cellboxd --version, cellbox --version,
 * GET /api's "cellbox", MCP's serverInfo and the command-line client's User-Agent all read it. */
#ifndef CELLBOX_COMMON_VERSION_H
#define CELLBOX_COMMON_VERSION_H

#define CELLBOX_VERSION "0.1.0"

#endif
