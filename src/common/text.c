#include "common/text.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"

static const char replacement[] = "\xef\xbf\xbd";

/* Length of the sequence starting at lead byte c, or 0 if c cannot start one. */
static size_t sequence_length(unsigned char c)
{
    if (c < 0x80)
        return 1;
    if (c >= 0xc2 && c <= 0xdf)
        return 2;
    if (c >= 0xe0 && c <= 0xef)
        return 3;
    if (c >= 0xf0 && c <= 0xf4)
        return 4;
    return 0;
}

/* Whether continuation byte i (1-based) is valid after lead byte `lead` (rejects overlongs and
   surrogates, as RFC 3629 requires). */
static int continuation_ok(unsigned char lead, size_t i, unsigned char c)
{
    if ((c & 0xc0) != 0x80)
        return 0;
    if (i != 1)
        return 1;
    if (lead == 0xe0)
        return c >= 0xa0;
    if (lead == 0xed)
        return c <= 0x9f;
    if (lead == 0xf0)
        return c >= 0x90;
    if (lead == 0xf4)
        return c <= 0x8f;
    return 1;
}

size_t text_append_utf8(buffer *out, const unsigned char *in, size_t n, int final)
{
    size_t i = 0, run_start = 0;
    while (i < n) {
        size_t len = sequence_length(in[i]);
        if (len == 1) {
            i++;
            continue;
        }
        size_t j = 1;
        while (len && j < len && i + j < n && continuation_ok(in[i], j, in[i + j]))
            j++;
        if (len && j == len) {
            i += len;
            continue;
        }
        if (len && i + j == n && !final) { /* incomplete at the end: keep for later */
            buffer_append(out, in + run_start, i - run_start);
            return n - i;
        }
        buffer_append(out, in + run_start, i - run_start);
        buffer_append(out, replacement, 3);
        i += len ? j : 1;
        run_start = i;
    }
    buffer_append(out, in + run_start, n - run_start);
    return 0;
}

void text_append_without_ansi(buffer *out, const char *in)
{
    const char *plain = in; /* start of the text not yet appended */
    for (const char *p = in; *p;) {
        if (*p != '\033') {
            p++;
            continue;
        }
        buffer_append(out, plain, (size_t)(p - plain));
        p++;
        if (*p == '[') {
            p++;
            while (*p && !(*p >= '@' && *p <= '~'))
                p++; /* parameter and intermediate bytes */
        }
        if (*p)
            p++; /* the final byte */
        plain = p;
    }
    buffer_append(out, plain, strlen(plain));
}

int text_utf8_prefix(const char *text, size_t max)
{
    return (int)text_utf8_fit(text, strnlen(text, max + 1), max); /* one more: is text[max] a continuation? */
}

void text_scrub_utf8(char *text)
{
    unsigned char *at = (unsigned char *)text;
    while (*at) {
        size_t length = sequence_length(*at), valid = length > 0;
        while (valid && valid < length && continuation_ok(*at, valid, at[valid]))
            valid++;
        if (length > 0 && valid == length) {
            at += length;
        } else {
            *at++ = '?'; /* the bytes after it are looked at again as a new start */
        }
    }
}

size_t text_utf8_fit(const char *text, size_t length, size_t limit)
{
    if (length <= limit)
        return length;
    size_t cut = limit;
    while (cut > 0 && ((unsigned char)text[cut] & 0xc0) == 0x80)
        cut--; /* text[cut] continues a character: cut before the character starts */
    return cut;
}

json_t *text_json_stringn(const char *text, size_t length)
{
    json_t *string = json_stringn(text, length);
    if (string)
        return string;
    buffer clean = {0};
    text_append_utf8(&clean, (const unsigned char *)text, length, 1);
    string = json_stringn(buffer_size(&clean) ? buffer_head(&clean) : "", buffer_size(&clean));
    buffer_free(&clean);
    if (!string)
        die("out of memory");
    return string;
}

json_t *text_json_string(const char *text)
{
    return text_json_stringn(text, strlen(text));
}

bool text_has_control_bytes(const char *text, size_t length)
{
    for (size_t i = 0; i < length; i++)
        if ((unsigned char)text[i] < 0x20 || text[i] == 0x7f)
            return true;
    return false;
}

bool text_parse_integer(const char *text, long long minimum, long long maximum, long long *out)
{
    if (!text || !(*text == '-' || (*text >= '0' && *text <= '9')))
        return false; /* strtoll would skip spaces and take '+' */
    char *end;
    errno = 0;
    long long value = strtoll(text, &end, 10);
    if (errno || end == text || *end || value < minimum || value > maximum)
        return false;
    *out = value;
    return true;
}
