#include "api/e2b_volume_content.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "api/errors.h"
#include "api/request.h"
#include "common/text.h"
#include "http/query.h"
#include "model/volumes.h"

#define MAX_DEPTH CONFINED_MAX_DEPTH

/* ---- helpers ---- */

/* The confined call's failure, in E2B's body: 404 for a missing path (the SDK's
   VolumePathNotFoundError), the errno's status otherwise. */
static void respond_failure(http_request *request, confined *c)
{
    errors_respond_e2b(request, errors_status_of_errno(c->error), "%s", c->why);
}

/* ?path=, as a path from the volume's root ("notes/a.txt" is "/notes/a.txt"); false after
   answering 400. */
static bool volume_path(http_request *request, char *out, size_t size)
{
    const char *path = http_query(request, "path");
    if (!path || !*path) {
        errors_respond_e2b(request, 400,
                           "'path' is required: a path in the volume, e.g. /data.csv");
        return false;
    }
    int n = snprintf(out, size, "%s%s", path[0] == '/' ? "" : "/", path);
    if (n < 0 || (size_t)n >= size) {
        errors_respond_e2b(request, 400, "'path' is too long (%zu bytes at most)", size - 2);
        return false;
    }
    return true;
}

/* uid and gid cannot be chosen: in every sandbox's view the volume's files are its own user's
   (volume_shared.h). False after answering 400 when one is given. */
static bool no_owner(http_request *request, json_t *body)
{
    bool given = http_query(request, "uid") || http_query(request, "gid") ||
                 json_object_get(body, "uid") || json_object_get(body, "gid");
    if (given)
        errors_respond_e2b(request, 400,
                           "not supported by cellbox: uid and gid of a volume's files (every "
                           "sandbox that mounts the volume owns all of its files); give mode only");
    return !given;
}

/* ?mode= (a number such as 420 for 0644), or `fallback`; -1 after answering 400. */
static long long requested_mode(http_request *request, long long fallback)
{
    long long mode;
    return http_query_integer(request, "mode", 0, 07777, fallback, &mode) ? mode : -1;
}

/* E2B's VolumeEntryStat from a confined entry. Only the modification time is kept by cellbox's
   entries: atime and ctime carry it too. */
static json_t *volume_entry(json_t *entry)
{
    const char *type = json_string_value(json_object_get(entry, "type"));
    const char *mode = json_string_value(json_object_get(entry, "mode"));
    json_t *time = json_object_get(entry, "modified_at");
    const char *e2b_type = !type                        ? "unknown"
                           : strcmp(type, "dir") == 0   ? "directory"
                           : strcmp(type, "file") == 0  ? "file"
                           : strcmp(type, "symlink") == 0 ? "symlink"
                                                          : "unknown";
    json_t *model = json_pack("{s:O, s:O, s:s, s:O, s:I, s:O, s:O, s:O, s:O, s:O}", "name",
                              json_object_get(entry, "name"), "path", json_object_get(entry, "path"),
                              "type", e2b_type, "size", json_object_get(entry, "size"), "mode",
                              (json_int_t)(mode ? strtol(mode, NULL, 8) : 0), "uid",
                              json_object_get(entry, "uid"), "gid", json_object_get(entry, "gid"),
                              "atime", time, "mtime", time, "ctime", time);
    json_t *target = json_object_get(entry, "symlink_target");
    if (target)
        json_object_set(model, "target", target);
    json_decref(entry);
    return model;
}

/* ---- the routes ---- */

static void list_directory(http_request *request, confined *c, const char *path)
{
    long long depth;
    if (!http_query_integer(request, "depth", 1, MAX_DEPTH, 1, &depth))
        return;
    json_t *entries = confined_list(c, path, (int)depth);
    if (!entries) {
        respond_failure(request, c);
        return;
    }
    json_t *list = json_array();
    size_t i;
    json_t *entry;
    json_array_foreach(entries, i, entry)
        json_array_append_new(list, volume_entry(json_incref(entry)));
    json_decref(entries);
    http_respond_json(request, 200, list);
}

static void make_directory(http_request *request, confined *c, const char *path)
{
    bool force = false, existed = false;
    long long mode = requested_mode(request, 0755);
    if (mode < 0 || !http_query_flag(request, "force", &force) || !no_owner(request, NULL))
        return;
    json_t *entry = confined_mkdir(c, path, (mode_t)mode, &existed);
    if (!entry)
        respond_failure(request, c);
    else if (existed && !force)
        errors_respond_e2b(request, 409, "%s already exists in the volume (force: true accepts it)",
                           path);
    else
        http_respond_json(request, 201, volume_entry(json_incref(entry)));
    json_decref(entry);
}

static void read_file(http_request *request, confined *c, const char *path)
{
    struct stat st;
    int fd = confined_open_read(c, path, &st);
    if (fd < 0)
        respond_failure(request, c);
    else
        http_respond_fd(request, 200, "application/octet-stream", fd, (size_t)st.st_size);
}

/* The body (held in memory, within the daemon's body size limit) into the file, made with its
   parents, an existing one emptied first. */
static void write_file(http_request *request, confined *c, const char *path)
{
    long long mode = requested_mode(request, 0644);
    bool force = false, existed = false;
    if (mode < 0 || !http_query_flag(request, "force", &force) || !no_owner(request, NULL))
        return;
    size_t length = 0;
    const char *data = http_body(request, &length);
    int fd = confined_open_write(c, path, (mode_t)mode, &existed);
    if (fd < 0) {
        respond_failure(request, c);
        return;
    }
    size_t written = 0;
    while (written < length) {
        ssize_t n = write(fd, data + written, length - written);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            int error = n < 0 ? errno : ENOSPC;
            close(fd);
            confined_fail(c, error, path);
            respond_failure(request, c);
            return;
        }
        written += (size_t)n;
    }
    close(fd);
    json_t *entry = confined_stat(c, path);
    if (!entry)
        respond_failure(request, c);
    else
        http_respond_json(request, 200, volume_entry(entry));
}

/* The permission bits of the file or directory at path, as the volume's owner. 0 or -1. */
static int set_mode(confined *c, const char *path, mode_t mode)
{
    json_t *entry = confined_stat(c, path);
    if (!entry)
        return -1;
    const char *type = json_string_value(json_object_get(entry, "type"));
    bool directory = type && strcmp(type, "dir") == 0;
    json_decref(entry);
    struct stat st;
    int fd = directory ? confined_open_directory(c, path) : confined_open_read(c, path, &st);
    if (fd < 0)
        return -1;
    int rc = confined_set_attributes(c, fd, mode, NULL);
    close(fd);
    return rc;
}

/* PATCH {mode}: the permission bits of a file or directory; its entry. */
static void update_metadata(http_request *request, confined *c, const char *path)
{
    json_t *body = request_parse_body(request, REQUEST_ANY_FIELD);
    if (!body)
        return;
    json_t *mode = json_object_get(body, "mode");
    json_t *entry = NULL;
    if (!no_owner(request, body)) {
        /* answered */
    } else if (mode && (!json_is_integer(mode) || json_integer_value(mode) < 0 ||
                        json_integer_value(mode) > 07777)) {
        errors_respond_e2b(request, 400, "'mode' must be a number of permission bits, e.g. 420 "
                           "for 0644");
    } else if ((mode && set_mode(c, path, (mode_t)json_integer_value(mode)) < 0) ||
               !(entry = confined_stat(c, path))) {
        respond_failure(request, c);
    } else {
        http_respond_json(request, 200, volume_entry(entry));
    }
    json_decref(body);
}

static void route_path(http_request *request, confined *c, const char *path)
{
    json_t *entry;
    if (http_method_is(request, "GET")) {
        if ((entry = confined_stat(c, path)))
            http_respond_json(request, 200, volume_entry(entry));
        else
            respond_failure(request, c);
    } else if (http_method_is(request, "PATCH")) {
        update_metadata(request, c, path);
    } else if (http_method_is(request, "DELETE")) {
        if (confined_remove(c, path, true) < 0)
            respond_failure(request, c);
        else
            http_respond(request, 204, NULL, "", 0);
    } else {
        errors_respond_e2b_method_not_allowed(request, "GET, PATCH, DELETE");
    }
}

void e2b_volume_content_route(http_request *request, const char *volume, const char *what)
{
    bool dir = strcmp(what, "dir") == 0, file = strcmp(what, "file") == 0;
    if (!dir && !file && strcmp(what, "path") != 0) {
        errors_respond_e2b(request, 404, "no such volume content endpoint: %s (dir, path and file "
                           "are served)", http_path(request));
        return;
    }
    char path[4096], why[512];
    confined c;
    bool missing = false;
    if (!volume_path(request, path, sizeof path))
        return;
    if (!volumes_open_files(volume, &c, &missing, why, sizeof why)) {
        errors_respond_e2b(request, missing ? 404 : 500, "%s", why);
        return;
    }
    if (dir && http_method_is(request, "GET"))
        list_directory(request, &c, path);
    else if (dir && http_method_is(request, "POST"))
        make_directory(request, &c, path);
    else if (dir)
        errors_respond_e2b_method_not_allowed(request, "GET, POST");
    else if (file && http_method_is(request, "GET"))
        read_file(request, &c, path);
    else if (file && http_method_is(request, "PUT"))
        write_file(request, &c, path);
    else if (file)
        errors_respond_e2b_method_not_allowed(request, "GET, PUT");
    else
        route_path(request, &c, path);
    volumes_close_files(&c);
}
