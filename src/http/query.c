#include "http/query.h"

#include <string.h>
#include <strings.h>

#include "common/text.h"

bool http_query_integer(http_request *request, const char *name, long long minimum,
                        long long maximum, long long fallback, long long *value)
{
    const char *text = http_query(request, name);
    if (!text) {
        *value = fallback;
        return true;
    }
    if (text_parse_integer(text, minimum, maximum, value))
        return true;
    http_respond_error(request, 400,
                       "query parameter '%s' must be a whole number from %lld to %lld "
                       "(got '%.64s')",
                       name, minimum, maximum, text);
    return false;
}

bool http_query_flag(http_request *request, const char *name, bool *value)
{
    const char *text = http_query(request, name);
    *value = text && (strcasecmp(text, "true") == 0 || strcmp(text, "1") == 0);
    if (!text || *value || strcasecmp(text, "false") == 0 || strcmp(text, "0") == 0)
        return true;
    http_respond_error(request, 400, "query parameter '%s' must be true or false (got '%.64s')",
                       name, text);
    return false;
}
