#include "sandbox/file_metadata.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/xattr.h>

#define PREFIX_LENGTH (sizeof FILE_METADATA_PREFIX - 1)
/* The kernel's limit on one file's list of attribute names (XATTR_LIST_MAX). */
#define NAMES_MAX 65536

/* HTTP's token characters: a key travels as the name of an X-Metadata-<key> header. */
static bool is_token(const char *text)
{
    static const char punctuation[] = "!#$%&'*+-.^_`|~";
    for (const char *at = text; *at; at++)
        if (!(*at >= 'a' && *at <= 'z') && !(*at >= 'A' && *at <= 'Z') &&
            !(*at >= '0' && *at <= '9') && !strchr(punctuation, *at))
            return false;
    return *text != '\0';
}

static bool is_printable_ascii(const char *text)
{
    for (const unsigned char *at = (const unsigned char *)text; *at; at++)
        if (*at < 0x20 || *at > 0x7e)
            return false;
    return true;
}

int file_metadata_check(json_t *metadata, char *why, size_t why_size)
{
    const char *key;
    json_t *value;
    size_t total = 0;
    json_object_foreach(metadata, key, value)
    {
        const char *text = json_string_value(value);
        if (!is_token(key)) {
            snprintf(why, why_size,
                     "key '%.64s' is not an HTTP token: use only letters, digits and "
                     "!#$%%&'*+-.^_`|~",
                     key);
            return -1;
        }
        if (strlen(key) > (size_t)FILE_METADATA_MAX_KEY) {
            snprintf(why, why_size,
                     "key '%.32s...' is %zu bytes; keys are at most %d: use a shorter one", key,
                     strlen(key), FILE_METADATA_MAX_KEY);
            return -1;
        }
        if (!text || !is_printable_ascii(text)) {
            snprintf(why, why_size,
                     "the value of key '%.64s' is not printable ASCII text (bytes 0x20 to "
                     "0x7e): encode it, with base64 say",
                     key);
            return -1;
        }
        total += PREFIX_LENGTH + strlen(key) + strlen(text);
    }
    if (total > FILE_METADATA_MAX_TOTAL) {
        snprintf(why, why_size,
                 "the file's metadata is %zu bytes (keys with the '%s' prefix each, and values); "
                 "a file holds at most %d: store fewer or shorter entries, or put large data in "
                 "a file of its own",
                 total, FILE_METADATA_PREFIX, FILE_METADATA_MAX_TOTAL);
        return -1;
    }
    return 0;
}

/* ---- reading ---- */

/* The path through which the kernel reaches the file itself (name NULL: the magic link of the
   descriptor, followed) or one entry of the directory open at fd (not followed past it). */
static bool proc_path(int fd, const char *name, char *out, size_t size)
{
    if (name && (!*name || strchr(name, '/') || !strcmp(name, ".") || !strcmp(name, "..")))
        return false;
    int n = name ? snprintf(out, size, "/proc/self/fd/%d/%s", fd, name)
                 : snprintf(out, size, "/proc/self/fd/%d", fd);
    return n > 0 && (size_t)n < size;
}

json_t *file_metadata_read(int fd, const char *name)
{
    static char names[NAMES_MAX];
    char path[4200], value[FILE_METADATA_MAX_TOTAL + 1];
    json_t *metadata = json_object();
    if (!proc_path(fd, name, path, sizeof path))
        return metadata;
    /* For an entry, the l- calls: a link swapped in for it is read as the link (which holds no
       user attributes), never followed. For the descriptor itself, its magic link is followed:
       it leads to exactly the file open there. */
    ssize_t length =
        name ? llistxattr(path, names, sizeof names) : listxattr(path, names, sizeof names);
    for (ssize_t at = 0; length > 0 && at < length; at += (ssize_t)strlen(names + at) + 1) {
        const char *attribute = names + at;
        if (strncmp(attribute, FILE_METADATA_PREFIX, PREFIX_LENGTH) != 0 ||
            !attribute[PREFIX_LENGTH])
            continue;
        ssize_t size = name ? lgetxattr(path, attribute, value, sizeof value - 1)
                            : getxattr(path, attribute, value, sizeof value - 1);
        if (size < 0) /* gone meanwhile, or longer than any value we store (ERANGE) */
            continue;
        /* json_stringn refuses a value, json_object_set_new a key, that is not UTF-8 */
        json_t *text = json_stringn(value, (size_t)size);
        if (text)
            json_object_set_new(metadata, attribute + PREFIX_LENGTH, text);
    }
    return metadata;
}

/* ---- writing ---- */

/* Removes the file's metadata keys that `metadata` does not name. */
static int remove_stale_keys(int fd, json_t *metadata)
{
    static char names[NAMES_MAX];
    ssize_t length = flistxattr(fd, names, sizeof names);
    if (length < 0)
        return -1;
    for (ssize_t at = 0; at < length; at += (ssize_t)strlen(names + at) + 1) {
        const char *attribute = names + at;
        if (strncmp(attribute, FILE_METADATA_PREFIX, PREFIX_LENGTH) != 0 ||
            json_object_get(metadata, attribute + PREFIX_LENGTH))
            continue;
        if (fremovexattr(fd, attribute) < 0 && errno != ENODATA)
            return -1;
    }
    return 0;
}

int file_metadata_replace(int fd, json_t *metadata)
{
    if (remove_stale_keys(fd, metadata) < 0)
        /* a file system without attributes holds no stale keys; only a set to store fails */
        return (errno == ENOTSUP && json_object_size(metadata) == 0) ? 0 : -1;
    const char *key;
    json_t *value;
    char attribute[sizeof FILE_METADATA_PREFIX + 256];
    json_object_foreach(metadata, key, value)
    {
        const char *text = json_string_value(value);
        snprintf(attribute, sizeof attribute, "%s%s", FILE_METADATA_PREFIX, key);
        if (fsetxattr(fd, attribute, text, strlen(text), 0) < 0)
            return -1;
    }
    return 0;
}
