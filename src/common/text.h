/* text — UTF-8 hygiene for bytes from outside: a sandbox's output, a request's path, query and
   headers, a file name (all hostile until checked). */
#ifndef CELLBOX_COMMON_TEXT_H
#define CELLBOX_COMMON_TEXT_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "common/buffer.h"

/* Appends `in` to `out` as valid UTF-8, each invalid byte replaced by U+FFFD. Returns how many
   trailing bytes of `in` form an incomplete but so-far valid sequence and were NOT consumed
   (the caller keeps them for the next chunk); 0 when `final` is set. */
size_t text_append_utf8(buffer *out, const unsigned char *in, size_t n, int final);

/* A JSON string holding `text`, bytes from outside: invalid UTF-8, or a character cut short by a
   fixed-size message buffer, becomes U+FFFD. Never NULL (json_string() is NULL for such bytes,
   and an answer built from that NULL could not be sent). */
json_t *text_json_string(const char *text);
json_t *text_json_stringn(const char *text, size_t length);

/* Whether `text` holds a NUL or another control byte (below 0x20, or 0x7f): bytes that no id,
   path or query value the daemon acts on may contain. */
bool text_has_control_bytes(const char *text, size_t length);

/* Parses all of `text` as a decimal integer within [minimum, maximum]: no sign-less garbage, no
   trailing bytes, no overflow (strtol alone takes "abc" as 0 and "5x" as 5). */
bool text_parse_integer(const char *text, long long minimum, long long maximum, long long *out);

#endif
