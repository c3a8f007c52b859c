#include "http/url.h"

#include <microhttpd.h>
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

size_t url_percent_decode(char *text)
{
    return MHD_http_unescape(text);
}
