/* text — UTF-8 hygiene for bytes that come out of a sandbox (hostile until checked). */
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
size_t text_utf8_prefix(const char *text, size_t length, size_t limit);

#endif
