#include "api/envd_filesystem.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/errors.h"
#include "model/box.h"
#include "sandbox/confined.h"

/* ---- EntryInfo ---- */

/* Go's os.FileMode type bits, which envd puts in EntryInfo.mode beside the permission bits. */
#define GO_MODE_DIRECTORY (1u << 31)
#define GO_MODE_SYMLINK (1u << 27)
#define GO_MODE_IRREGULAR (1u << 19)
#define GO_MODE_SETUID (1u << 23)
#define GO_MODE_SETGID (1u << 22)
#define GO_MODE_STICKY (1u << 20)

/* The permission bits with Go's type, setuid, setgid and sticky bits, as envd reports them. */
static unsigned go_file_mode(const char *type, unsigned permissions)
{
    unsigned mode = permissions & 0777;
    if (strcmp(type, "dir") == 0)
        mode |= GO_MODE_DIRECTORY;
    else if (strcmp(type, "symlink") == 0)
        mode |= GO_MODE_SYMLINK;
    else if (strcmp(type, "file") != 0)
        mode |= GO_MODE_IRREGULAR;
    if (permissions & 04000)
        mode |= GO_MODE_SETUID;
    if (permissions & 02000)
        mode |= GO_MODE_SETGID;
    if (permissions & 01000)
        mode |= GO_MODE_STICKY;
    return mode;
}

/* Go's FileMode.String() ("drwxr-xr-x", "-rw-r--r--", "Lrwxrwxrwx"), envd's `permissions`:
   one letter per type bit set, in Go's order, or '-' for none; then rwx three times. */
static void go_permissions(unsigned mode, char out[32])
{
    static const char letters[] = "dalTLDpSugct?";
    size_t n = 0;
    for (int i = 0; letters[i]; i++)
        if (mode & (1u << (31 - i)))
            out[n++] = letters[i];
    if (n == 0)
        out[n++] = '-';
    for (int i = 0; i < 9; i++)
        out[n++] = mode & (1u << (8 - i)) ? "rwxrwxrwx"[i] : '-';
    out[n] = '\0';
}

static const char *file_type_enum(const char *type)
{
    if (strcmp(type, "file") == 0)
        return "FILE_TYPE_FILE";
    if (strcmp(type, "dir") == 0)
        return "FILE_TYPE_DIRECTORY";
    if (strcmp(type, "symlink") == 0)
        return "FILE_TYPE_SYMLINK";
    return "FILE_TYPE_UNSPECIFIED"; /* FIFOs, sockets, devices: the SDK's list leaves them out */
}

/* An owner's name as the sandbox's own /etc/passwd and /etc/group (sandbox/rootfs.c) give it:
   root, the sandbox user "user", nobody/nogroup; another id as its number, as `ls -l` shows it. */
static void owner_name(json_int_t id, json_int_t sandbox_id, const char *nobody, char out[32])
{
    if (id == 0)
        snprintf(out, 32, "root");
    else if (id == sandbox_id)
        snprintf(out, 32, "user");
    else if (id == 65534)
        snprintf(out, 32, "%s", nobody);
    else
        snprintf(out, 32, "%lld", (long long)id);
}

/* envd's EntryInfo in protojson from a confined entry (confined_entry's fields) of the sandbox
   whose files `c` opened. */
static json_t *entry_info(const confined *c, json_t *entry)
{
    const char *type = json_string_value(json_object_get(entry, "type"));
    const char *mode_text = json_string_value(json_object_get(entry, "mode"));
    unsigned mode = go_file_mode(type, (unsigned)strtoul(mode_text, NULL, 8));
    char size[32], permissions[32];
    snprintf(size, sizeof size, "%lld",
             (long long)json_integer_value(json_object_get(entry, "size")));
    go_permissions(mode, permissions);
    json_t *info =
        json_pack("{s:O, s:s, s:O, s:s, s:I, s:s, s:O}", "name", json_object_get(entry, "name"),
                  "type", file_type_enum(type), "path", json_object_get(entry, "path"), "size",
                  size, "mode", (json_int_t)mode, "permissions", permissions, "modifiedTime",
                  json_object_get(entry, "modified_at"));
    json_t *target = json_object_get(entry, "symlink_target");
    if (target)
        json_object_set(info, "symlinkTarget", target);
    char owner[32], group[32];
    owner_name(json_integer_value(json_object_get(entry, "uid")), (json_int_t)c->uid, "nobody",
               owner);
    owner_name(json_integer_value(json_object_get(entry, "gid")), (json_int_t)c->gid, "nogroup",
               group);
    json_object_set_new(info, "owner", json_string(owner));
    json_object_set_new(info, "group", json_string(group));
    return info;
}

/* {"entry": EntryInfo} from a confined entry (stolen); NULL passes a failure on. */
static json_t *entry_response(const confined *c, json_t *entry)
{
    if (!entry)
        return NULL;
    json_t *response = json_pack("{s:o}", "entry", entry_info(c, entry));
    json_decref(entry);
    return response;
}

/* ---- the sandbox's files ---- */

/* The sandbox's files through box_open_files, the one way in; false with the error set. */
static bool open_files(box *b, confined *c, connect_error *error)
{
    char why[256];
    if (box_get_state(b) == BOX_PAUSED) {
        connect_fail(error, "failed_precondition",
                     "sandbox %s is paused: resume it (Sandbox.connect) before using its files",
                     box_id(b));
        return false;
    }
    if (box_open_files(b, c, why, sizeof why))
        return true;
    connect_fail(error, "failed_precondition", "%s", why);
    return false;
}

/* A confined failure as a Connect error: the code from its errno, its sentence as the message. */
static json_t *confined_failure(confined *c, connect_error *error)
{
    return connect_fail(error, errors_connect_code_of_errno(c->error), "%s", c->why);
}

/* The message's `path`, which must be there and not empty; NULL with the error set. */
static const char *path_field(json_t *message, const char *field, connect_error *error)
{
    const char *path = NULL;
    if (!connect_string_field(message, field, &path, error))
        return NULL;
    if (path && *path)
        return path;
    connect_fail(error, "invalid_argument",
                 "'%s' is required: a path inside the sandbox (relative paths are relative to "
                 "%s)",
                 field, CONFINED_WORKSPACE);
    return NULL;
}

/* ---- methods ---- */

static json_t *stat_entry(void *context, json_t *message, connect_error *error)
{
    const char *path = path_field(message, "path", error);
    confined c;
    if (!path || !open_files(context, &c, error))
        return NULL;
    json_t *entry = confined_stat(&c, path);
    json_t *response = entry ? entry_response(&c, entry) : confined_failure(&c, error);
    box_close_files(&c);
    return response;
}

/* envd answers already_exists for a directory that is there (the SDK's makeDir then returns
   false); parents are made as mkdir -p does. */
static json_t *make_directory(void *context, json_t *message, connect_error *error)
{
    const char *path = path_field(message, "path", error);
    confined c;
    if (!path || !open_files(context, &c, error))
        return NULL;
    bool existed = false;
    json_t *entry = confined_mkdir(&c, path, 0755, &existed);
    json_t *response = NULL;
    if (!entry)
        confined_failure(&c, error);
    else if (existed)
        connect_fail(error, "already_exists", "directory '%s' already exists",
                     json_string_value(json_object_get(entry, "path")));
    else
        response = entry_response(&c, json_incref(entry));
    json_decref(entry);
    box_close_files(&c);
    return response;
}

static json_t *move_entry(void *context, json_t *message, connect_error *error)
{
    const char *source = path_field(message, "source", error);
    const char *destination = source ? path_field(message, "destination", error) : NULL;
    confined c;
    if (!destination || !open_files(context, &c, error))
        return NULL;
    json_t *entry = confined_move(&c, source, destination);
    json_t *response = entry ? entry_response(&c, entry) : confined_failure(&c, error);
    box_close_files(&c);
    return response;
}

/* depth 0 is protojson's default (absent): one level, as envd lists it. */
static json_t *list_directory(void *context, json_t *message, connect_error *error)
{
    const char *path = path_field(message, "path", error);
    unsigned depth = 0;
    if (!path || !connect_uint32_field(message, "depth", &depth, error))
        return NULL;
    if (depth > CONFINED_MAX_DEPTH)
        return connect_fail(error, "invalid_argument",
                            "'depth' is %u; at most %d levels are listed", depth,
                            CONFINED_MAX_DEPTH);
    confined c;
    if (!open_files(context, &c, error))
        return NULL;
    json_t *entries = confined_list(&c, path, depth ? (int)depth : 1);
    json_t *response = NULL;
    if (entries) {
        json_t *infos = json_array();
        size_t i;
        json_t *entry;
        json_array_foreach(entries, i, entry)
        {
            json_array_append_new(infos, entry_info(&c, entry));
        }
        response = json_pack("{s:o}", "entries", infos);
        json_decref(entries);
    } else {
        confined_failure(&c, error);
    }
    box_close_files(&c);
    return response;
}

/* A file, a link (never its target) or a directory with all in it, as envd's os.RemoveAll. */
static json_t *remove_entry(void *context, json_t *message, connect_error *error)
{
    const char *path = path_field(message, "path", error);
    confined c;
    if (!path || !open_files(context, &c, error))
        return NULL;
    json_t *response =
        confined_remove(&c, path, true) == 0 ? json_object() : confined_failure(&c, error);
    box_close_files(&c);
    return response;
}

static const connect_method filesystem_methods[] = {
    {.name = "Stat", .unary = stat_entry},
    {.name = "MakeDir", .unary = make_directory},
    {.name = "Move", .unary = move_entry},
    {.name = "ListDir", .unary = list_directory},
    {.name = "Remove", .unary = remove_entry},
    {.name = "WatchDir"},
    {.name = "CreateWatcher"},
    {.name = "GetWatcherEvents"},
    {.name = "RemoveWatcher"},
    {.name = NULL},
};

const connect_service envd_filesystem_service = {"filesystem.Filesystem", filesystem_methods};
