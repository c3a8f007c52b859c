#include "http/url.h"

#include <stdio.h>
#include <string.h>

int url_split_path(const char *path, char *copy, size_t copy_size, char *segments[], int max)
{
    snprintf(copy, copy_size, "%s", path);
    int count = 0;
    for (char *save = NULL, *part = strtok_r(copy, "/", &save); part;
         part = strtok_r(NULL, "/", &save)) {
        if (count == max)
            return max + 1;
        segments[count++] = part;
    }
    return count;
}

static int hex_value(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* Two hex digits exactly: sscanf("%2x") would also take " 1", "+1" and "-1" (a sign or a
   space), decoding "%-1" as 0xff. */
void url_percent_decode(char *text)
{
    char *out = text;
    for (const char *in = text; *in; in++) {
        int high = in[0] == '%' ? hex_value(in[1]) : -1;
        int low = high >= 0 ? hex_value(in[2]) : -1;
        if (low >= 0) {
            *out++ = (char)(high << 4 | low);
            in += 2;
        } else {
            *out++ = *in;
        }
    }
    *out = '\0';
}
