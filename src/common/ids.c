#include "common/ids.h"

#include <ctype.h>
#include <openssl/rand.h>
#include <stdio.h>
#include <string.h>

#include "common/log.h"

static void random_bytes(unsigned char *out, int n)
{
    if (RAND_bytes(out, n) != 1)
        die("the system random number generator failed");
}

void id_uuid4(char out[UUID_STRING_LENGTH + 1])
{
    unsigned char b[16];
    random_bytes(b, sizeof b);
    b[6] = (b[6] & 0x0f) | 0x40; /* version 4 */
    b[8] = (b[8] & 0x3f) | 0x80; /* RFC 4122 variant */
    snprintf(out, UUID_STRING_LENGTH + 1,
             "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0], b[1], b[2],
             b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]);
}

void id_random_hex(char *out, int bytes)
{
    unsigned char b[64];
    if (bytes > (int)sizeof b)
        bytes = sizeof b;
    random_bytes(b, bytes);
    for (int i = 0; i < bytes; i++)
        sprintf(out + 2 * i, "%02x", b[i]);
    out[2 * bytes] = '\0';
}

bool id_is_uuid(const char *text)
{
    if (strlen(text) != UUID_STRING_LENGTH)
        return false;
    for (int i = 0; i < UUID_STRING_LENGTH; i++) {
        bool dash = (i == 8 || i == 13 || i == 18 || i == 23);
        if (dash ? text[i] != '-' : !isxdigit((unsigned char)text[i]))
            return false;
    }
    return true;
}
