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

/* Appends the NUL-terminated `in` to `out` without its ANSI escape sequences (CSI: ESC '['
   parameters and a final byte, as IPython's coloured tracebacks use; an ESC followed by one
   other byte is dropped too). An unfinished sequence at the end is dropped. */
void text_append_without_ansi(buffer *out, const char *in);

#endif
