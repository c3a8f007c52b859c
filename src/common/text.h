/* text — UTF-8 hygiene for bytes that come out of a sandbox (hostile until checked), and
 * terminal colours taken out of text meant for a program or a model. */
#ifndef CELLBOX_COMMON_TEXT_H
#define CELLBOX_COMMON_TEXT_H

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

#endif
