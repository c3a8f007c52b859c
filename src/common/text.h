/* text — UTF-8 hygiene for bytes from outside: a sandbox's output, a request's path, query and
 * headers, a file name (all hostile until checked); terminal colours taken out of text meant for a
 * program or a model. */
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

/* How many of the first `length` bytes of `text` (UTF-8) fit in `limit` bytes without cutting a
   character in two: `length` when it fits, else `limit` or less, ending before a character. */
size_t text_utf8_fit(const char *text, size_t length, size_t limit);
/* Appends the NUL-terminated `in` to `out` without its ANSI escape sequences (CSI: ESC '['
   parameters and a final byte, as IPython's coloured tracebacks use; an ESC followed by one
   other byte is dropped too). An unfinished sequence at the end is dropped. */
void text_append_without_ansi(buffer *out, const char *in);
/* Bytes of the longest prefix of `text` (UTF-8) of at most `max` bytes that does not cut a
   character in two, for "%.*s": a "%.100s" of a client's or a kernel's string could end
   mid-character, and jansson refuses the whole message then. */
int text_utf8_prefix(const char *text, size_t max);

/* Replaces, in place, each byte of `text` that is not part of a valid UTF-8 sequence with '?':
   for messages that quote hostile bytes. jansson's error text quotes the input near the error
   and may cut a character there, and a reason that is not UTF-8 cannot go into JSON. */
void text_scrub_utf8(char *text);

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
