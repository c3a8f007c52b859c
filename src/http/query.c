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

typedef struct header_collector {
    const char *prefix;
    json_t *out;
} header_collector;

static void collect_header(void *arg, const char *name, const char *value)
{
    header_collector *collector = arg;
    size_t n = strlen(collector->prefix);
    if (strncasecmp(name, collector->prefix, n) == 0 && name[n] &&
        !json_object_get(collector->out, name + n))
        json_object_set_new(collector->out, name + n, text_json_string(value ? value : ""));
}

void http_header_each(const http_request *request, const char *prefix, json_t *out)
{
    header_collector collector = {prefix, out};
    http_each_header(request, collect_header, &collector);
}
