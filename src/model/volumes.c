#include "model/volumes.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/fs.h"
#include "common/log.h"
#include "model/manager.h"
#include "sandbox/volume.h"
#include "sandbox/volume_shared.h"

#define MAX_VOLUMES 256
#define NAME_MAX_LENGTH 63

typedef struct shared_volume {
    char name[NAME_MAX_LENGTH + 1];
    long long bytes;
    int64_t created_at_us; /* wall clock */
    bool mounted;          /* on the host: false if it could not be mounted at start */
} shared_volume;

static char folder[4096]; /* DATA_DIR/named-volumes */
static shared_volume volumes[MAX_VOLUMES];
static int volume_count;

/* DATA_DIR/named-volumes/volume-<name><suffix>: ".img", ".json" or "" (the mount point). The
   "volume-" prefix keeps every name clear of the templates volume.c makes beside the images. */
static void path_of(const char *name, const char *suffix, char *out, size_t size)
{
    snprintf(out, size, "%.4000s/volume-%.63s%.8s", folder, name, suffix);
}

static shared_volume *find(const char *name)
{
    for (int i = 0; i < volume_count; i++)
        if (strcmp(volumes[i].name, name) == 0)
            return &volumes[i];
    return NULL;
}

bool volumes_exists(const char *name) { return find(name) != NULL; }

/* Letters, digits, '_' and '-', starting with a letter or digit, at most 63: safe as a file
   name, in a URL and on a command line, and no ".img" or ".json" to pass for another volume's
   files in the folder. */
static bool valid_name(const char *name)
{
    size_t length = strlen(name);
    if (length == 0 || length > NAME_MAX_LENGTH)
        return false;
    for (size_t i = 0; i < length; i++) {
        char c = name[i];
        bool alnum = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
        if (!alnum && (i == 0 || (c != '_' && c != '-')))
            return false;
    }
    return true;
}

/* ---- records ---- */

static int write_record(const shared_volume *v)
{
    char path[4200], partial[4300];
    path_of(v->name, ".json", path, sizeof path);
    snprintf(partial, sizeof partial, "%s.partial", path);
    json_t *record = json_pack("{s:s, s:I, s:I}", "name", v->name, "size_bytes",
                               (json_int_t)v->bytes, "created_at_us", (json_int_t)v->created_at_us);
    int rc = json_dump_file(record, partial, JSON_COMPACT);
    json_decref(record);
    if (rc == 0 && rename(partial, path) == 0)
        return 0;
    unlink(partial);
    return -1;
}

/* A record names its volume by the file's name, never by its content: a record is not trusted to
   point anywhere else. */
static void load_record(const char *file_name)
{
    size_t length = strlen(file_name);
    if (strncmp(file_name, "volume-", 7) != 0 || length < 13 || length - 12 > NAME_MAX_LENGTH ||
        strcmp(file_name + length - 5, ".json") != 0 || volume_count == MAX_VOLUMES)
        return;
    shared_volume v = {0};
    snprintf(v.name, sizeof v.name, "%.*s", (int)(length - 12), file_name + 7);
    char path[4200], image[4200], mount_point[4200], why[512];
    path_of(v.name, ".json", path, sizeof path);
    json_t *record = json_load_file(path, 0, NULL);
    v.bytes = json_integer_value(json_object_get(record, "size_bytes"));
    v.created_at_us = json_integer_value(json_object_get(record, "created_at_us"));
    json_decref(record);
    if (!valid_name(v.name) || v.bytes <= 0)
        return;
    path_of(v.name, ".img", image, sizeof image);
    path_of(v.name, "", mount_point, sizeof mount_point);
    v.mounted = volume_shared_mount(image, mount_point, why, sizeof why) == 0;
    if (!v.mounted)
        log_warn("volume %s cannot be mounted: %s (sandboxes cannot use it; delete it, or fix "
                 "the host and restart)", v.name, why);
    volumes[volume_count++] = v;
}

/* An image or mount point without a record: a delete a dead daemon left half done (the record
   goes first). Unmounted and removed, so that no loop device stays behind. */
static void remove_unrecorded(const char *file_name)
{
    size_t length = strlen(file_name);
    bool record = length > 5 && strcmp(file_name + length - 5, ".json") == 0;
    if (strncmp(file_name, "volume-", 7) != 0 || record)
        return;
    bool image = length > 4 && strcmp(file_name + length - 4, ".img") == 0;
    if (length - 7 - (image ? 4 : 0) > NAME_MAX_LENGTH)
        return;
    char name[NAME_MAX_LENGTH + 1];
    snprintf(name, sizeof name, "%.*s", (int)(length - 7 - (image ? 4 : 0)), file_name + 7);
    if (!valid_name(name) || find(name))
        return;
    char image_path[4200], mount_point[4200];
    path_of(name, ".img", image_path, sizeof image_path);
    path_of(name, "", mount_point, sizeof mount_point);
    log_info("removing volume %s, which a previous daemon was deleting", name);
    volume_shared_remove(image_path, mount_point);
}

void volumes_init(const char *data_dir)
{
    snprintf(folder, sizeof folder, "%.4000s/named-volumes", data_dir);
    if (fs_mkdir_p(folder, 0700) < 0)
        die("cannot create %s: %s", folder, strerror(errno));
    volume_remove_leftover_templates(folder);
    DIR *dir = opendir(folder);
    for (struct dirent *entry; dir && (entry = readdir(dir));)
        load_record(entry->d_name);
    if (dir)
        rewinddir(dir);
    for (struct dirent *entry; dir && (entry = readdir(dir));)
        remove_unrecorded(entry->d_name);
    if (dir)
        closedir(dir);
    if (volume_count > 0)
        log_info("%d named volume(s) in %s", volume_count, folder);
}

void volumes_unmount_all(void)
{
    char mount_point[4200];
    for (int i = 0; i < volume_count; i++) {
        path_of(volumes[i].name, "", mount_point, sizeof mount_point);
        volume_shared_unmount(mount_point);
        rmdir(mount_point);
    }
}

/* ---- who uses a volume ---- */

static bool mounts_volume(const kernel *k, const char *name)
{
    const rootfs_volumes *mounts = &kernel_get_sandbox(k)->volumes;
    for (int i = 0; i < mounts->count; i++)
        if (strcmp(mounts->mount[i].name, name) == 0)
            return true;
    return false;
}

static json_t *sandboxes_using(const char *name)
{
    json_t *ids = json_array();
    for (size_t i = 0; i < manager_count(); i++)
        if (mounts_volume(manager_at(i), name))
            json_array_append_new(ids, json_string(kernel_id(manager_at(i))));
    return ids;
}

/* ---- the verbs ---- */

int volumes_create(const char *name, long long bytes, failure_kind *failure, char *why,
                   size_t why_size)
{
    if (!folder[0]) { /* volumes_init never ran (a harness of the request code): no disk here */
        *failure = FAILURE_INTERNAL;
        snprintf(why, why_size, "named volumes are not set up in this process");
        return -1;
    }
    *failure = FAILURE_INVALID;
    if (!valid_name(name)) {
        snprintf(why, why_size, "invalid volume name '%.80s': use 1 to %d letters, digits, '_' "
                 "or '-', starting with a letter or digit", name, NAME_MAX_LENGTH);
        return -1;
    }
    if (bytes == 0)
        bytes = VOLUMES_DEFAULT_BYTES;
    if (bytes < VOLUMES_MIN_BYTES || bytes > VOLUMES_MAX_BYTES) {
        char low[32], high[32];
        limits_format_size(VOLUMES_MIN_BYTES, low, sizeof low);
        limits_format_size(VOLUMES_MAX_BYTES, high, sizeof high);
        snprintf(why, why_size, "volume size %lld bytes is out of range: give %s to %s, e.g. "
                 "\"1G\"", bytes, low, high);
        return -1;
    }
    if (find(name)) {
        *failure = FAILURE_CONFLICT;
        snprintf(why, why_size, "volume %s already exists: choose another name, or delete it "
                 "first", name);
        return -1;
    }
    if (volume_count == MAX_VOLUMES) {
        *failure = FAILURE_FORBIDDEN;
        snprintf(why, why_size, "at most %d volumes: delete one first", MAX_VOLUMES);
        return -1;
    }
    char image[4200], mount_point[4200];
    path_of(name, ".img", image, sizeof image);
    path_of(name, "", mount_point, sizeof mount_point);
    shared_volume v = {.bytes = bytes, .created_at_us = clock_wall_us(), .mounted = true};
    snprintf(v.name, sizeof v.name, "%s", name);
    *failure = FAILURE_INTERNAL;
    if (volume_shared_create(image, mount_point, bytes, why, why_size) < 0)
        return -1;
    if (write_record(&v) < 0) {
        snprintf(why, why_size, "cannot write the record of volume %s in %s: %s", name, folder,
                 strerror(errno));
        volume_shared_remove(image, mount_point);
        return -1;
    }
    volumes[volume_count++] = v;
    log_info("volume %s created (%lld bytes)", name, bytes);
    return 0;
}

int volumes_delete(const char *name, bool force, failure_kind *failure, char *why, size_t why_size)
{
    shared_volume *v = find(name);
    if (!v) {
        *failure = FAILURE_NOT_FOUND;
        snprintf(why, why_size, "volume %.80s does not exist (see the list of volumes)", name);
        return -1;
    }
    json_t *users = sandboxes_using(name);
    if (json_array_size(users) > 0 && !force) {
        char *ids = json_dumps(users, JSON_COMPACT);
        *failure = FAILURE_CONFLICT;
        snprintf(why, why_size, "volume %s is mounted by sandbox(es) %s: delete them first, or "
                 "delete the volume with force (they lose it)", name, ids ? ids : "?");
        free(ids);
        json_decref(users);
        return -1;
    }
    json_decref(users);
    char path[4200], mount_point[4200];
    path_of(name, ".json", path, sizeof path);
    unlink(path); /* first: a daemon killed halfway never mounts a half-removed volume again */
    path_of(name, "", mount_point, sizeof mount_point);
    path_of(name, ".img", path, sizeof path);
    volume_shared_remove(path, mount_point);
    *v = volumes[--volume_count];
    log_info("volume %s deleted%s", name, force ? " (forced)" : "");
    return 0;
}

json_t *volumes_model(const char *name)
{
    shared_volume *v = find(name);
    if (!v)
        return NULL;
    char created[ISO_TIME_BUFFER], mount_point[4200];
    clock_format_iso(v->created_at_us, created);
    path_of(name, "", mount_point, sizeof mount_point);
    volume_usage usage = {0};
    bool measured = v->mounted && volume_read_usage(mount_point, &usage) == 0;
    json_t *model = json_pack("{s:s, s:I, s:s, s:o, s:b}", "name", v->name, "size_bytes",
                              (json_int_t)v->bytes, "created_at", created, "sandboxes",
                              sandboxes_using(name), "mounted", v->mounted);
    if (measured)
        json_object_set_new(model, "used_bytes",
                            json_integer(usage.bytes_total - usage.bytes_free));
    return model;
}

static int by_name(const void *a, const void *b)
{
    return strcmp(((const shared_volume *)a)->name, ((const shared_volume *)b)->name);
}

json_t *volumes_list_model(void)
{
    qsort(volumes, (size_t)volume_count, sizeof *volumes, by_name);
    json_t *list = json_array();
    for (int i = 0; i < volume_count; i++)
        json_array_append_new(list, volumes_model(volumes[i].name));
    return list;
}

bool volumes_open_files(const char *name, confined *c, bool *missing, char *why, size_t why_size)
{
    shared_volume *v = find(name);
    *missing = v == NULL;
    if (!v || !v->mounted) {
        snprintf(why, why_size, v ? "volume %.80s is not mounted on the host (see the daemon's log)"
                                  : "volume %.80s does not exist", name);
        return false;
    }
    char mount_point[4200];
    path_of(v->name, "", mount_point, sizeof mount_point);
    int root = open(mount_point, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (root < 0) {
        snprintf(why, why_size, "cannot open volume %s: %s", v->name, strerror(errno));
        return false;
    }
    confined_init(c, root, VOLUME_SHARED_OWNER, VOLUME_SHARED_OWNER);
    return true;
}

void volumes_close_files(confined *c)
{
    if (c->root_fd >= 0)
        close(c->root_fd);
    c->root_fd = -1;
}

/* ---- mounts into a sandbox ---- */

/* The sandbox's own mounts (rootfs.c) and what stands for them: a volume there would hide or
   change what the sandbox needs, or be written through a link the user planted (/workspace and
   its E2B name /home/user). */
static const char *const reserved_paths[] = {
    "/proc", "/sys", "/dev", "/etc", "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64",
    "/libx32", "/workspace", "/home/user", "/opt/cellbox", "/tmp", "/.oldroot",
};

/* Is `path` `prefix` or beneath it? */
static bool within(const char *path, const char *prefix)
{
    size_t length = strlen(prefix);
    return strncmp(path, prefix, length) == 0 && (path[length] == '\0' || path[length] == '/');
}

/* Absolute, no empty, "." or ".." component, no trailing slash, plain characters. */
static bool normalized_path(const char *path)
{
    size_t length = strlen(path);
    if (path[0] != '/' || length < 2 || length >= ROOTFS_VOLUME_PATH_MAX - 1 ||
        path[length - 1] == '/')
        return false;
    for (const char *c = path; *c; c++) {
        bool plain = (*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') ||
                     (*c >= '0' && *c <= '9') || *c == '/' || *c == '.' || *c == '_' || *c == '-';
        if (!plain)
            return false;
    }
    return !strstr(path, "//") && !strstr(path, "/./") && !strstr(path, "/../") &&
           strcmp(path + length - 2, "/.") != 0 && strcmp(path + length - 3, "/..") != 0;
}

int volumes_add_mount(rootfs_volumes *mounts, const char *name, const char *path,
                      failure_kind *failure, char *why, size_t why_size)
{
    *failure = FAILURE_INVALID;
    if (!normalized_path(path)) {
        snprintf(why, why_size, "invalid mount path '%.200s' for volume %.80s: give an absolute "
                 "path other than /, without '.', '..' or a trailing '/', of letters, digits, "
                 "'/', '.', '_' and '-', e.g. /mnt/data", path, name);
        return -1;
    }
    for (size_t i = 0; i < sizeof reserved_paths / sizeof reserved_paths[0]; i++)
        if (within(path, reserved_paths[i])) {
            snprintf(why, why_size, "volume %.80s cannot be mounted at %s: %s is the sandbox's "
                     "own; choose a path such as /mnt/%.80s", name, path, reserved_paths[i], name);
            return -1;
        }
    for (int i = 0; i < mounts->count; i++)
        if (within(path, mounts->mount[i].path) || within(mounts->mount[i].path, path)) {
            snprintf(why, why_size, "mount paths %s and %s overlap: give each volume a path of "
                     "its own, neither inside the other", path, mounts->mount[i].path);
            return -1;
        }
    if (mounts->count == ROOTFS_MAX_VOLUMES) {
        snprintf(why, why_size, "at most %d volumes per sandbox", ROOTFS_MAX_VOLUMES);
        return -1;
    }
    shared_volume *v = find(name);
    if (!v || !v->mounted) {
        *failure = v ? FAILURE_INTERNAL : FAILURE_NOT_FOUND;
        snprintf(why, why_size, v ? "volume %.80s could not be mounted on the host (see the "
                 "daemon's log)" : "volume %.80s does not exist: create it first", name);
        return -1;
    }
    rootfs_volume *m = &mounts->mount[mounts->count];
    char host[4200];
    path_of(v->name, "", host, sizeof host);
    if (strlen(host) >= sizeof m->host) {
        *failure = FAILURE_INTERNAL;
        snprintf(why, why_size, "the data directory's path is too long for volume %s's mount "
                 "point (%zu bytes at most): use a shorter --data-dir", v->name, sizeof m->host);
        return -1;
    }
    mounts->count++;
    snprintf(m->name, sizeof m->name, "%s", v->name);
    snprintf(m->host, sizeof m->host, "%s", host);
    snprintf(m->path, sizeof m->path, "%s", path);
    return 0;
}

int volumes_from_request(json_t *request, rootfs_volumes *mounts, failure_kind *failure,
                         char *why, size_t why_size)
{
    memset(mounts, 0, sizeof *mounts);
    if (!request || json_is_null(request))
        return 0;
    if (!json_is_object(request)) {
        *failure = FAILURE_INVALID;
        snprintf(why, why_size, "'volumes' must be an object of volume name to mount path, e.g. "
                 "{\"data\": \"/mnt/data\"}");
        return -1;
    }
    const char *name;
    json_t *path;
    json_object_foreach(request, name, path) {
        if (!json_is_string(path)) {
            *failure = FAILURE_INVALID;
            snprintf(why, why_size, "the mount path of volume %.80s must be a string, e.g. "
                     "\"/mnt/data\"", name);
            return -1;
        }
        if (volumes_add_mount(mounts, name, json_string_value(path), failure, why, why_size) < 0)
            return -1;
    }
    return 0;
}

json_t *volumes_mounts_model(const rootfs_volumes *mounts)
{
    json_t *model = json_object();
    for (int i = 0; i < mounts->count; i++)
        json_object_set_new(model, mounts->mount[i].name, json_string(mounts->mount[i].path));
    return model;
}
