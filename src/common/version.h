/* version — cellbox's release, the one place it is written: cellboxd --version, cellbox --version,
 * GET /api's "cellbox", MCP's serverInfo and the command-line client's User-Agent all read it.
 * docs/openapi.yaml's info.version and the Python client (clients/python) carry copies, which
 * tests/api/test_openapi.py holds to this one. */
#ifndef CELLBOX_COMMON_VERSION_H
#define CELLBOX_COMMON_VERSION_H

#define CELLBOX_VERSION "0.1.0"

#endif
