/* errors — the one place where what went wrong below api/ becomes an HTTP status, or a Connect
 * error code for Connect-RPC (api/connect.h): a domain layer's failure kind (common/failure.h),
 * or the errno of a file operation on a sandbox (sandbox/confined.h). Every API family answers
 * the same failure with the same status. */
#ifndef CELLBOX_API_ERRORS_H
#define CELLBOX_API_ERRORS_H

#include "common/failure.h"

int errors_status_of_failure(failure_kind kind);
int errors_status_of_errno(int error);

/* Connect's code names ("not_found", "permission_denied", ...), which api/connect.c turns into
   the HTTP status Connect gives each. */
const char *errors_connect_code_of_failure(failure_kind kind);
const char *errors_connect_code_of_errno(int error);

#endif
