/* What went wrong below api/ as an HTTP status (api/errors.c): each failure kind the model
   reports answers with the status the APIs documented before the kinds existed. */
#include "api/errors.h"
#include "check.h"

static void test_each_kind_has_its_status(void)
{
    CHECK(errors_status_of_failure(FAILURE_INVALID) == 400);   /* a malformed or too large limit */
    CHECK(errors_status_of_failure(FAILURE_FORBIDDEN) == 403); /* --max-kernels, network off */
    CHECK(errors_status_of_failure(FAILURE_NOT_FOUND) == 404); /* an unknown kernelspec */
    CHECK(errors_status_of_failure(FAILURE_CONFLICT) == 409);  /* a sandbox not running */
    CHECK(errors_status_of_failure(FAILURE_EXHAUSTED) == 503); /* the open-file budget */
    CHECK(errors_status_of_failure(FAILURE_INTERNAL) == 500);
}

int main(void)
{
    RUN(test_each_kind_has_its_status);
    return check_summary("errors");
}
