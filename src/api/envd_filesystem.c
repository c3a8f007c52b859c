#include "api/envd_filesystem.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/envd_user.h"
#include "api/errors.h"
#include "common/ids.h"
#include "common/log.h"
#include "model/box.h"
#include "model/watch.h"
#include "sandbox/confined.h"

/* A WatchDir stream whose client reads slower than the sandbox changes files ends past this many
   bytes queued, rather than holding the daemon's memory. */
#define WATCH_STREAM_MAX_QUEUED (1u << 20)
/* Events a polling watcher holds between two GetWatcherEvents. */
#define WATCHER_MAX_EVENTS 10000

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
    json_t *metadata = json_object_get(entry, "metadata"); /* envd 0.6.2: map<string, string> */
    if (metadata)
        json_object_set(info, "metadata", metadata);
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

/* The message's `path`, which must be there and not empty, made absolute in `out` (relative
   paths are relative to the user's home, as in envd); NULL with the error set. */
static const char *path_field(json_t *message, const char *field, char out[PATH_MAX],
                              connect_error *error)
{
    const char *path = NULL;
    if (!connect_string_field(message, field, &path, error))
        return NULL;
    if (!path || !*path)
        connect_fail(error, "invalid_argument",
                     "'%s' is required: a path inside the sandbox (relative paths are relative "
                     "to " ENVD_HOME_DIR ")",
                     field);
    else if (!envd_absolute_path(path, out, PATH_MAX))
        connect_fail(error, "invalid_argument", "'%s' is longer than %d bytes", field,
                     PATH_MAX - 1);
    else
        return out;
    return NULL;
}

/* ---- methods ---- */

static json_t *stat_entry(void *context, json_t *message, connect_error *error)
{
    char absolute[PATH_MAX];
    const char *path = path_field(message, "path", absolute, error);
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
    char absolute[PATH_MAX];
    const char *path = path_field(message, "path", absolute, error);
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
    char source_path[PATH_MAX], destination_path[PATH_MAX];
    const char *source = path_field(message, "source", source_path, error);
    const char *destination =
        source ? path_field(message, "destination", destination_path, error) : NULL;
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
    char absolute[PATH_MAX];
    const char *path = path_field(message, "path", absolute, error);
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
    char absolute[PATH_MAX];
    const char *path = path_field(message, "path", absolute, error);
    confined c;
    if (!path || !open_files(context, &c, error))
        return NULL;
    json_t *response =
        confined_remove(&c, path, true) == 0 ? json_object() : confined_failure(&c, error);
    box_close_files(&c);
    return response;
}

/* ---- watching: WatchDir and the polling watchers ---- */

static const char *event_type_enum(watch_change change)
{
    static const char *const names[] = {
        [WATCH_CREATE] = "EVENT_TYPE_CREATE", [WATCH_WRITE] = "EVENT_TYPE_WRITE",
        [WATCH_REMOVE] = "EVENT_TYPE_REMOVE", [WATCH_RENAME] = "EVENT_TYPE_RENAME",
        [WATCH_CHMOD] = "EVENT_TYPE_CHMOD",
    };
    return names[change];
}

/* envd's FilesystemEvent: {name, type, entry?}; the entry (includeEntry) as Stat gives it, left
   out when the entry is gone by now (removed, moved away). */
static json_t *filesystem_event(box *b, const watch *w, watch_change change, const char *name,
                                bool include_entry)
{
    json_t *event = json_pack("{s:s, s:s}", "name", name, "type", event_type_enum(change));
    confined c;
    char why[256], path[PATH_MAX + 1];
    int n = snprintf(path, sizeof path, "%s/%s", watch_path(w), name);
    if (!include_entry || n >= (int)sizeof path || !box_open_files(b, &c, why, sizeof why))
        return event;
    json_t *entry = confined_stat(&c, path);
    if (entry) {
        json_object_set_new(event, "entry", entry_info(&c, entry));
        json_decref(entry);
    }
    box_close_files(&c);
    return event;
}

/* WatchDir's and CreateWatcher's request: the directory and the options; false with the error. */
static bool watch_request(json_t *message, char absolute[PATH_MAX], const char **path,
                          bool *recursive, bool *include_entry, connect_error *error)
{
    *path = path_field(message, "path", absolute, error);
    if (!*path)
        return false;
    /* allowNetworkMounts (envd 0.6.4) lets envd watch NFS and other network file systems, which
       it refuses by default; a sandbox here has none (volumes are local directories), so the
       option is taken and changes nothing. */
    bool allow_network_mounts;
    const char *fields[] = {"recursive", "includeEntry", "allowNetworkMounts"};
    bool *values[] = {recursive, include_entry, &allow_network_mounts};
    for (int i = 0; i < 3; i++) {
        json_t *value = json_object_get(message, fields[i]);
        if (value && !json_is_null(value) && !json_is_boolean(value)) {
            connect_fail(error, "invalid_argument", "'%s' must be true or false", fields[i]);
            return false;
        }
        *values[i] = json_is_true(value);
    }
    return true;
}

/* The watch, or NULL with the error set: a paused sandbox is refused as the other methods refuse
   it; bounds passed are resource_exhausted. */
static watch *start_watch(box *b, const char *path, bool recursive,
                          const watch_callbacks *callbacks, void *arg, connect_error *error)
{
    if (box_get_state(b) == BOX_PAUSED) {
        connect_fail(error, "failed_precondition",
                     "sandbox %s is paused: resume it (Sandbox.connect) before watching its files",
                     box_id(b));
        return NULL;
    }
    int failure = 0;
    char why[1024];
    watch *w = watch_start(b, path, recursive, callbacks, arg, &failure, why, sizeof why);
    if (!w)
        connect_fail(error,
                     failure == EMFILE   ? "resource_exhausted"
                     : failure == EAGAIN ? "failed_precondition"
                                         : errors_connect_code_of_errno(failure),
                     "%s", why);
    return w;
}

/* A watch that ended by itself as a Connect error (NULL: the directory went, a clean end). */
static const connect_error *watch_end_error(int failure, const char *why, connect_error *error)
{
    if (!failure)
        return NULL;
    connect_fail(error, failure == ESRCH ? "unavailable" : "resource_exhausted", "%s", why);
    return error;
}

/* WatchDir: a stream of {"start": {}}, then {"filesystem": FilesystemEvent} as changes come,
   {"keepalive": {}} in between. */
typedef struct directory_stream {
    box *b;
    watch *w;
    connect_stream *stream;
    bool include_entry;
} directory_stream;

static void stream_on_change(void *arg, watch_change change, const char *name)
{
    directory_stream *d = arg;
    if (connect_stream_queued(d->stream) > WATCH_STREAM_MAX_QUEUED) {
        connect_error error;
        connect_fail(&error, "resource_exhausted",
                     "more than %u bytes of events waited for this client to read them: read "
                     "events as they come, or watch fewer files",
                     WATCH_STREAM_MAX_QUEUED);
        watch_stop(d->w);
        connect_stream_end(d->stream, &error);
        free(d);
        return;
    }
    connect_stream_send(d->stream,
                        json_pack("{s:o}", "filesystem",
                                  filesystem_event(d->b, d->w, change, name, d->include_entry)));
}

static void stream_on_end(void *arg, int failure, const char *why)
{
    directory_stream *d = arg;
    connect_error error;
    connect_stream_end(d->stream, watch_end_error(failure, why, &error));
    free(d);
}

static void stream_on_cancel(void *arg)
{
    directory_stream *d = arg;
    watch_stop(d->w);
    free(d);
}

static const watch_callbacks stream_callbacks = {stream_on_change, stream_on_end};

static void watch_directory(void *context, json_t *message, connect_stream *stream)
{
    connect_error error = {0};
    const char *path = NULL;
    bool recursive = false, include_entry = false;
    directory_stream *d = calloc(1, sizeof *d);
    if (!d)
        die("out of memory");
    *d = (directory_stream){.b = context, .stream = stream};
    char absolute[PATH_MAX];
    if (watch_request(message, absolute, &path, &recursive, &include_entry, &error))
        d->w = start_watch(context, path, recursive, &stream_callbacks, d, &error);
    if (!d->w) {
        connect_stream_end(stream, &error);
        free(d);
        return;
    }
    d->include_entry = include_entry;
    connect_stream_on_cancel(stream, stream_on_cancel, d);
    connect_stream_send(stream, json_pack("{s:{}}", "start"));
}

/* The polling watchers (CreateWatcher, GetWatcherEvents, RemoveWatcher): events accumulate,
   up to WATCHER_MAX_EVENTS, until the next GetWatcherEvents takes them. A watcher belongs to
   its sandbox (another sandbox's id is not_found) and goes with it. */
typedef struct watcher {
    char id[40];
    box *b;
    watch *w;       /* NULL once the watch ended (the directory went, or a failure) */
    json_t *events; /* [FilesystemEvent] since the last GetWatcherEvents */
    bool include_entry;
    connect_error failure; /* failure.code set: what every GetWatcherEvents answers */
    struct watcher *next;
} watcher;

static watcher *watchers;

static watcher *find_watcher(box *b, json_t *message, connect_error *error)
{
    const char *id = NULL;
    if (!connect_string_field(message, "watcherId", &id, error))
        return NULL;
    for (watcher *w = watchers; w && id; w = w->next)
        if (w->b == b && strcmp(w->id, id) == 0)
            return w;
    connect_fail(error, "not_found",
                 "watcher '%.64s' was not found in sandbox %s (it was removed, or its sandbox "
                 "restarted): create one with CreateWatcher",
                 id ? id : "", box_id(b));
    return NULL;
}

static void free_watcher(watcher *gone)
{
    for (watcher **at = &watchers; *at; at = &(*at)->next)
        if (*at == gone) {
            *at = gone->next;
            break;
        }
    if (gone->w)
        watch_stop(gone->w);
    json_decref(gone->events);
    free(gone);
}

static void watcher_on_change(void *arg, watch_change change, const char *name)
{
    watcher *w = arg;
    if (json_array_size(w->events) < WATCHER_MAX_EVENTS) {
        json_array_append_new(w->events,
                              filesystem_event(w->b, w->w, change, name, w->include_entry));
        return;
    }
    connect_fail(&w->failure, "resource_exhausted",
                 "watcher %s held %d events, the most it keeps between two GetWatcherEvents, "
                 "and stopped: events were lost; remove it and create another, and poll more "
                 "often",
                 w->id, WATCHER_MAX_EVENTS);
    watch_stop(w->w);
    w->w = NULL;
}

static void watcher_on_end(void *arg, int failure, const char *why)
{
    watcher *w = arg;
    w->w = NULL;
    if (failure == ESRCH)
        free_watcher(w); /* its sandbox is gone, and its id with it */
    else if (failure)
        watch_end_error(failure, why, &w->failure);
}

static const watch_callbacks watcher_callbacks = {watcher_on_change, watcher_on_end};

static json_t *create_watcher(void *context, json_t *message, connect_error *error)
{
    const char *path = NULL;
    char absolute[PATH_MAX];
    bool recursive = false, include_entry = false;
    if (!watch_request(message, absolute, &path, &recursive, &include_entry, error))
        return NULL;
    watcher *w = calloc(1, sizeof *w);
    if (!w)
        die("out of memory");
    w->b = context;
    w->include_entry = include_entry;
    w->events = json_array();
    w->id[0] = 'w';
    id_random_hex(w->id + 1, 12);
    w->w = start_watch(context, path, recursive, &watcher_callbacks, w, error);
    if (!w->w) {
        json_decref(w->events);
        free(w);
        return NULL;
    }
    w->next = watchers;
    watchers = w;
    return json_pack("{s:s}", "watcherId", w->id);
}

static json_t *get_watcher_events(void *context, json_t *message, connect_error *error)
{
    watcher *w = find_watcher(context, message, error);
    if (!w)
        return NULL;
    if (w->w)
        watch_take_pending(w->w);
    if (w->failure.code) {
        *error = w->failure;
        return NULL;
    }
    json_t *response = json_pack("{s:o}", "events", w->events);
    w->events = json_array();
    return response;
}

static json_t *remove_watcher(void *context, json_t *message, connect_error *error)
{
    watcher *w = find_watcher(context, message, error);
    if (!w)
        return NULL;
    free_watcher(w);
    return json_object();
}

static const connect_method filesystem_methods[] = {
    {.name = "Stat", .unary = stat_entry},
    {.name = "MakeDir", .unary = make_directory},
    {.name = "Move", .unary = move_entry},
    {.name = "ListDir", .unary = list_directory},
    {.name = "Remove", .unary = remove_entry},
    {.name = "WatchDir", .server_streaming = watch_directory, .keepalive = "{\"keepalive\":{}}"},
    {.name = "CreateWatcher", .unary = create_watcher},
    {.name = "GetWatcherEvents", .unary = get_watcher_events},
    {.name = "RemoveWatcher", .unary = remove_watcher},
    {.name = NULL},
};

const connect_service envd_filesystem_service = {"filesystem.Filesystem", filesystem_methods};
