/* url — the pure parts of a request's URL that routing uses: path segments and percent-decoding.
 *
 * libmicrohttpd decodes the path and the query arguments it hands over; these functions take
 * what the API modules split or decode again themselves (E2B's metadata filter and form file
 * names). Nothing here touches a connection, so the fuzzers (tests/fuzz/) call them directly. */
#ifndef CELLBOX_HTTP_URL_H
#define CELLBOX_HTTP_URL_H

#include <stddef.h>

/* Splits a path ("/a/b/c") into its segments, written into `copy` (a longer path is cut at
   copy_size - 1 bytes); returns their number, or max + 1 when there are more than `max`. */
int url_split_path(const char *path, char *copy, size_t copy_size, char *segments[], int max);

/* Decodes %XX escapes in place, with libmicrohttpd's decoder ('+' stays: E2B's SDK encodes
   spaces as %20; a '%' not followed by two hex digits is kept as it is). Returns the decoded
   length: a %00 makes it shorter than strlen says. */
size_t url_percent_decode(char *text);

#endif
