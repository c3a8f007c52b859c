/* query — a request's query parameters read strictly, with the 400 that names the parameter.
 *
 * Also the request headers that share a prefix. Built on server.h's http_query, http_each_header
 * and http_respond_error only, so the fuzzers' stand-in for the
 * server (tests/fuzz/http_stub.c) runs this very code. */
#ifndef CELLBOX_HTTP_QUERY_H
#define CELLBOX_HTTP_QUERY_H

#include <jansson.h>
#include <stdbool.h>

#include "http/server.h"

/* The query parameter `name` as an integer within [minimum, maximum] (`fallback` when absent).
   False after answering 400 naming the parameter and the range, for any other value. */
bool http_query_integer(http_request *request, const char *name, long long minimum,
                        long long maximum, long long fallback, long long *value);
/* The query parameter `name` as a flag: true/1 or false/0 (any case), false when absent. False
   after answering 400 naming the parameter for any other value ("yes" is not silently "no"). */
bool http_query_flag(http_request *request, const char *name, bool *value);
/* Adds every header whose name begins with `prefix` (in any case) to `out` as the rest of its
   name → value, the first of a repeated header winning (e.g. X-Metadata-<key>). */
void http_header_each(const http_request *request, const char *prefix, json_t *out);

#endif
