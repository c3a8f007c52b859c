/* v1_run — POST /v1/run: a stateless run (code or code blocks in a fresh sandbox that is gone when
 * it answers), its request checked here and run by model/stateless_run.c. */
#ifndef CELLBOX_API_V1_RUN_H
#define CELLBOX_API_V1_RUN_H

#include "http/server.h"

void v1_run(http_request *request);

#endif
