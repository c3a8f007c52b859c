/* errors — the one place where what went wrong below api/ becomes an HTTP status, or a Connect
 * error code for Connect-RPC (api/connect.h): a domain layer's failure kind (common/failure.h),
 * or the errno of a file operation on a sandbox (sandbox/confined.h). Every API family answers
 * the same failure with the same status. */
#ifndef CELLBOX_API_ERRORS_H
#define CELLBOX_API_ERRORS_H

#include "common/failure.h"
#include "http/server.h"

int errors_status_of_failure(failure_kind kind);
int errors_status_of_errno(int error);

/* Connect's code names ("not_found", "permission_denied", ...), which api/connect.c turns into
   the HTTP status Connect gives each. */
const char *errors_connect_code_of_failure(failure_kind kind);
const char *errors_connect_code_of_errno(int error);

/* E2B's error body, {"code": status, "message"}: E2B's SDKs tell a missing sandbox by code ==
   404. Used on E2B's control plane and envd's plain HTTP routes (not Connect-RPC). */
void errors_respond_e2b(http_request *request, int status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
void errors_respond_e2b_method_not_allowed(http_request *request, const char *allow);

#endif
