#include "api/envd_user.h"

#include <openssl/evp.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "common/text.h"

#define MAX_USER_NAME 64

/* The name in `Authorization: Basic base64(name:password)` (the SDKs send no password) into
   `name`: "" when the header is absent or another scheme (the access token travels in
   X-Access-Token, not here); false when it is Basic but not readable base64 of a short name. */
static bool basic_user_name(const char *authorization, char name[MAX_USER_NAME + 1])
{
    name[0] = '\0';
    if (!authorization || strncasecmp(authorization, "Basic ", 6) != 0)
        return true;
    const char *encoded = authorization + 6 + strspn(authorization + 6, " ");
    size_t length = strlen(encoded);
    if (length == 0 || length % 4 != 0 || length > 4 * ((MAX_USER_NAME + 3) / 3))
        return false;
    unsigned char decoded[4 * ((MAX_USER_NAME + 3) / 3)];
    int decoded_length = EVP_DecodeBlock(decoded, (const unsigned char *)encoded, (int)length);
    if (decoded_length < 0)
        return false;
    /* EVP_DecodeBlock counts the padding's bytes as data (zeros): take them off */
    decoded_length -= (encoded[length - 1] == '=') + (encoded[length - 2] == '=');
    const unsigned char *colon = memchr(decoded, ':', (size_t)decoded_length);
    size_t name_length = colon ? (size_t)(colon - decoded) : (size_t)decoded_length;
    if (name_length > MAX_USER_NAME || text_has_control_bytes((const char *)decoded, name_length))
        return false;
    memcpy(name, decoded, name_length);
    name[name_length] = '\0';
    return true;
}

bool envd_user_of_request(http_request *request, envd_user *user, char *why, size_t why_size)
{
    char from_header[MAX_USER_NAME + 1];
    const char *name = http_query(request, "username");
    if (!name) {
        if (!basic_user_name(http_header(request, "Authorization"), from_header)) {
            snprintf(why, why_size,
                     "the Authorization header does not name a user: send 'Basic "
                     "base64(<user>:)' with user 'user' or 'root', or leave it out for 'user'");
            return false;
        }
        name = from_header;
    }
    if (!*name || strcmp(name, "user") == 0) {
        *user = ENVD_USER_USER;
    } else if (strcmp(name, "root") == 0) {
        *user = ENVD_USER_ROOT;
    } else {
        snprintf(why, why_size,
                 "user '%.64s' does not exist in this sandbox: its users are 'user' (the "
                 "default, home /home/user) and 'root' (the same identity in cellbox)",
                 name);
        return false;
    }
    return true;
}

const char *envd_user_name(envd_user user)
{
    return user == ENVD_USER_ROOT ? "root" : "user";
}

bool envd_absolute_path(const char *path, char *out, size_t size)
{
    int n = path[0] == '/' || !*path ? snprintf(out, size, "%s", path)
                                     : snprintf(out, size, ENVD_HOME_DIR "/%s", path);
    return n >= 0 && (size_t)n < size;
}
