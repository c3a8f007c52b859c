#include "api/errors.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>

#include "common/text.h"

int errors_status_of_failure(failure_kind kind)
{
    switch (kind) {
    case FAILURE_INVALID: return 400;
    case FAILURE_FORBIDDEN: return 403;
    case FAILURE_NOT_FOUND: return 404;
    case FAILURE_CONFLICT: return 409;
    case FAILURE_EXHAUSTED: return 503; /* a client may retry once sandboxes are deleted */
    case FAILURE_INTERNAL: return 500;
    }
    return 500;
}

int errors_status_of_errno(int error)
{
    switch (error) {
    case ENOENT: return 404;
    case EACCES:
    case EPERM:
    case EROFS:
    case EXDEV: /* openat2's answer to an escape */
    case ELOOP: return 403;
    case ENOTDIR:
    case EISDIR:
    case EINVAL:
    case ENAMETOOLONG:
    case ENXIO:             /* a FIFO without a reader */
    case E2BIG: return 400; /* a walk past CONFINED_MAX_ENTRIES */
    case ENOTEMPTY:
    case EEXIST:
    case EBUSY:
    case ETXTBSY:
    case EAGAIN: return 409;
    case ENOSPC:
    case EDQUOT: return 507;
    case EFBIG: return 413;
    default: return 500;
    }
}

const char *errors_connect_code_of_failure(failure_kind kind)
{
    switch (kind) {
    case FAILURE_INVALID: return "invalid_argument";
    case FAILURE_FORBIDDEN: return "permission_denied";
    case FAILURE_NOT_FOUND: return "not_found";
    case FAILURE_CONFLICT: return "failed_precondition";
    case FAILURE_EXHAUSTED: return "resource_exhausted";
    case FAILURE_INTERNAL: return "internal";
    }
    return "internal";
}

/* The same classes as errors_status_of_errno. E2B's SDK reads resource_exhausted as a rate limit
   ("try again later"), so neither a walk past CONFINED_MAX_ENTRIES (E2BIG) nor a full disk is
   one: the first is invalid_argument, the second failed_precondition (its message names the
   limit). */
const char *errors_connect_code_of_errno(int error)
{
    switch (error) {
    case ENOENT: return "not_found";
    case EACCES:
    case EPERM:
    case EROFS:
    case EXDEV:
    case ELOOP: return "permission_denied";
    case ENOTDIR:
    case EISDIR:
    case EINVAL:
    case ENAMETOOLONG:
    case ENXIO:
    case E2BIG: return "invalid_argument";
    case EEXIST: return "already_exists";
    case ENOTEMPTY:
    case EBUSY:
    case ETXTBSY:
    case EAGAIN:
    case ENOSPC:
    case EDQUOT:
    case EFBIG: return "failed_precondition";
    default: return "internal";
    }
}

void errors_respond_e2b(http_request *request, int status, const char *fmt, ...)
{
    char message[1024];
    va_list args;
    va_start(args, fmt);
    vsnprintf(message, sizeof message, fmt, args);
    va_end(args);
    http_respond_json(
        request, status,
        json_pack("{s:i, s:o}", "code", status, "message", text_json_string(message)));
}

void errors_respond_e2b_method_not_allowed(http_request *request, const char *allow)
{
    http_add_response_header(request, "Allow", allow);
    errors_respond_e2b(request, 405, "%s is not allowed on %s: use %s", http_method(request),
                       http_path(request), allow);
}
