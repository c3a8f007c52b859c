#include "api/v1_files.h"

#include <errno.h>
#include <fcntl.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "api/request.h"
#include "api/errors.h"
#include "api/file_upload.h"
#include "common/log.h"
#include "http/query.h"
#include "sandbox/confined.h"
#include "sandbox/confined_tar.h"
#include "sandbox/limits.h"

/* ---- shared steps ---- */

/* The sandbox's files through box_open_files, the one way in; false after answering 409 with
   its reason. */
static bool open_sandbox(http_request *request, box *b, confined *c)
{
    char why[256];
    if (box_open_files(b, c, why, sizeof why))
        return true;
    http_respond_error(request, 409, "%s", why);
    return false;
}

static void close_sandbox(confined *c) { box_close_files(c); }

static void disk_limit_text(long long disk_bytes, char *out, size_t size)
{
    if (disk_bytes > 0)
        limits_format_size(disk_bytes, out, size);
    else
        snprintf(out, size, "unlimited");
}

/* A confined failure as a response: the sentence names the path; a full disk adds the limit. */
static void respond_failure(http_request *request, const confined *c, long long disk_bytes)
{
    file_upload_failure failure;
    file_upload_describe(c, disk_bytes, &failure);
    http_respond_error(request, failure.status, "%s", failure.message);
}

static void respond_too_large(http_request *request, long long disk_bytes)
{
    char limit[32];
    disk_limit_text(disk_bytes, limit, sizeof limit);
    http_respond_error(request, 413,
                       "the upload is larger than the sandbox's disk limit of %s; "
                       "create the sandbox with a larger \"disk\" limit",
                       limit);
}

/* The `path` query parameter; NULL after answering 400. */
static const char *path_query(http_request *request)
{
    const char *path = http_query(request, "path");
    if (!path || !*path)
        http_respond_error(request, 400,
                           "the 'path' query parameter is required (a path inside the "
                           "sandbox; relative paths are relative to %s)",
                           CONFINED_WORKSPACE);
    return path && *path ? path : NULL;
}

/* A string field of a JSON body that must be there; NULL after answering 400. */
static const char *required_string(http_request *request, json_t *object, const char *field,
                                   const char *name)
{
    const char *value = json_string_value(json_object_get(object, field));
    if (!value)
        http_respond_error(request, 400, "'%s' must be a string", name);
    return value;
}

/* A file in the daemon's /tmp that has no name, so nothing is left behind if we crash. */
static int open_spool(http_request *request)
{
    int fd = open("/tmp", O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
    if (fd < 0)
        http_respond_error(request, 500, "cannot make a temporary file in the daemon's /tmp: %s",
                           strerror(errno));
    return fd;
}

/* ---- GET, DELETE, stat, list, mkdir, move ---- */

static void get_file(http_request *request, box *b)
{
    const char *path = path_query(request);
    confined c;
    if (!path || !open_sandbox(request, b, &c))
        return;
    struct stat st;
    int fd = confined_open_read(&c, path, &st);
    if (fd < 0)
        respond_failure(request, &c, 0);
    else
        http_respond_fd(request, 200, "application/octet-stream", fd, (size_t)st.st_size);
    close_sandbox(&c);
}

static void delete_file(http_request *request, box *b)
{
    const char *path = path_query(request);
    bool recursive;
    confined c;
    if (!path || !http_query_flag(request, "recursive", &recursive) ||
        !open_sandbox(request, b, &c))
        return;
    if (confined_remove(&c, path, recursive) < 0)
        respond_failure(request, &c, 0);
    else
        http_respond(request, 204, NULL, "", 0);
    close_sandbox(&c);
}

static void stat_file(http_request *request, box *b)
{
    const char *path = path_query(request);
    confined c;
    if (!path || !open_sandbox(request, b, &c))
        return;
    json_t *entry = confined_stat(&c, path);
    entry ? http_respond_json(request, 200, entry) : respond_failure(request, &c, 0);
    close_sandbox(&c);
}

static void list_files(http_request *request, box *b)
{
    const char *path = path_query(request);
    long long depth;
    if (!path || !http_query_integer(request, "depth", 1, CONFINED_MAX_DEPTH, 1, &depth))
        return;
    confined c;
    if (!open_sandbox(request, b, &c))
        return;
    json_t *entries = confined_list(&c, path, (int)depth);
    entries ? http_respond_json(request, 200, entries) : respond_failure(request, &c, 0);
    close_sandbox(&c);
}

static void make_directory(http_request *request, box *b)
{
    static const char *const fields[] = {"path", NULL};
    json_t *body = request_parse_body(request, fields);
    const char *path = body ? required_string(request, body, "path", "path") : NULL;
    confined c;
    if (path && open_sandbox(request, b, &c)) {
        bool existed;
        json_t *entry = confined_mkdir(&c, path, 0755, &existed);
        entry ? http_respond_json(request, existed ? 200 : 201, entry)
              : respond_failure(request, &c, box_limits(b)->disk_bytes);
        close_sandbox(&c);
    }
    json_decref(body);
}

static void move_file(http_request *request, box *b)
{
    static const char *const fields[] = {"from", "to", NULL};
    json_t *body = request_parse_body(request, fields);
    const char *from = body ? required_string(request, body, "from", "from") : NULL;
    const char *to = from ? required_string(request, body, "to", "to") : NULL;
    confined c;
    if (to && open_sandbox(request, b, &c)) {
        json_t *entry = confined_move(&c, from, to);
        entry ? http_respond_json(request, 200, entry)
              : respond_failure(request, &c, box_limits(b)->disk_bytes);
        close_sandbox(&c);
    }
    json_decref(body);
}

/* ---- batch writes ---- */

/* Standard or URL-safe base64, padded or not, whitespace ignored. NULL if malformed. */
static unsigned char *decode_base64(const char *text, size_t length, size_t *decoded_length)
{
    unsigned char *clean = malloc(length + 4);
    if (!clean)
        die("out of memory");
    size_t n = 0, padding = 0;
    bool valid = true;
    for (size_t i = 0; i < length && valid; i++) {
        char ch = text[i];
        if (ch == ' ' || ch == '\n' || ch == '\r' || ch == '\t')
            continue;
        if (ch == '=') {
            padding++;
        } else {
            valid = padding == 0 &&
                    ((ch >= 'A' && ch <= 'Z') || (ch >= 'a' && ch <= 'z') ||
                     (ch >= '0' && ch <= '9') || ch == '+' || ch == '/' || ch == '-' || ch == '_');
            ch = ch == '-' ? '+' : ch == '_' ? '/' : ch;
        }
        clean[n++] = (unsigned char)ch;
    }
    /* Padding only at the very end, at most two, and never leaving one lone character. */
    size_t data = n - padding;
    if (!valid || padding > 2 || data % 4 == 1 || (padding && (n % 4 != 0))) {
        free(clean);
        return NULL;
    }
    while (n % 4)
        clean[n++] = '=', padding++;
    unsigned char *out = malloc(n / 4 * 3 + 1);
    if (!out)
        die("out of memory");
    /* EVP_DecodeBlock counts each '=' as a zero byte of output: take them off again. */
    int decoded = n ? EVP_DecodeBlock(out, clean, (int)n) : 0;
    free(clean);
    if (decoded < 0 || (size_t)decoded < padding) {
        free(out);
        return NULL;
    }
    *decoded_length = (size_t)decoded - padding;
    return out;
}

typedef struct batch_file {
    const char *path;
    unsigned char *content; /* decoded base64, or NULL: `text` is the content */
    const char *text;
    size_t length;
} batch_file;

/* Checks every item before anything is written; false after answering 400. */
static bool read_batch(http_request *request, json_t *files, batch_file *out, long long disk_bytes)
{
    for (size_t i = 0; i < json_array_size(files); i++) {
        json_t *item = json_array_get(files, i);
        char name[64];
        if (!json_is_object(item)) {
            http_respond_error(request, 400,
                               "'files[%zu]' must be an object with \"path\" and "
                               "\"content\"",
                               i);
            return false;
        }
        const char *key;
        json_t *value;
        json_object_foreach(item, key, value)
        {
            if (strcmp(key, "path") != 0 && strcmp(key, "content") != 0 &&
                strcmp(key, "encoding") != 0) {
                http_respond_error(request, 400,
                                   "unknown field '%s' in 'files[%zu]' (known: path, content, "
                                   "encoding)",
                                   key, i);
                return false;
            }
        }
        snprintf(name, sizeof name, "files[%zu].path", i);
        out[i].path = required_string(request, item, "path", name);
        snprintf(name, sizeof name, "files[%zu].content", i);
        const char *content = out[i].path ? required_string(request, item, "content", name) : NULL;
        if (!content)
            return false;
        json_t *encoding = json_object_get(item, "encoding");
        const char *encoding_name = json_is_null(encoding) ? NULL : json_string_value(encoding);
        size_t length = json_string_length(json_object_get(item, "content"));
        if (encoding && !json_is_null(encoding) &&
            (!encoding_name ||
             (strcmp(encoding_name, "utf-8") != 0 && strcmp(encoding_name, "base64") != 0))) {
            http_respond_error(request, 400,
                               "'files[%zu].encoding' must be \"utf-8\" or \"base64\"", i);
            return false;
        }
        if (encoding_name && strcmp(encoding_name, "base64") == 0) {
            out[i].content = decode_base64(content, length, &out[i].length);
            if (!out[i].content) {
                http_respond_error(request, 400, "'files[%zu].content' is not valid base64", i);
                return false;
            }
        } else {
            out[i].text = content;
            out[i].length = length;
        }
        if (disk_bytes > 0 && (long long)out[i].length > disk_bytes) {
            respond_too_large(request, disk_bytes);
            return false;
        }
    }
    return true;
}

static int write_all(int fd, const void *data, size_t length)
{
    for (size_t done = 0; done < length;) {
        ssize_t wrote = write(fd, (const char *)data + done, length - done);
        if (wrote < 0 && errno == EINTR)
            continue;
        if (wrote < 0)
            return -1;
        done += (size_t)wrote;
    }
    return 0;
}

/* One file of the batch: its entry, or NULL with the failure in c. */
static json_t *write_batch_file(confined *c, const batch_file *file)
{
    char full[4096];
    bool existed;
    if (confined_normalize(c, file->path, full, sizeof full) < 0)
        return NULL;
    int fd = confined_open_write(c, full, 0644, &existed);
    if (fd < 0)
        return NULL;
    struct stat st;
    json_t *entry = NULL;
    if (write_all(fd, file->content ? (const void *)file->content : file->text, file->length) < 0 ||
        fstat(fd, &st) < 0) {
        confined_fail(c, errno, full);
        confined_discard(c, full, fd);
    } else
        entry = confined_entry(full, &st, NULL);
    close(fd);
    return entry;
}

static void write_batch(http_request *request, box *b)
{
    static const char *const fields[] = {"files", NULL};
    json_t *body = request_parse_body(request, fields);
    if (!body)
        return;
    json_t *files = json_object_get(body, "files");
    long long disk_bytes = box_limits(b)->disk_bytes;
    batch_file *batch = calloc(json_array_size(files) + 1, sizeof *batch);
    confined c;
    if (!batch)
        die("out of memory");
    if (!json_is_array(files))
        http_respond_error(request, 400,
                           "'files' must be an array of {\"path\", \"content\", "
                           "\"encoding\"?}");
    else if (read_batch(request, files, batch, disk_bytes) && open_sandbox(request, b, &c)) {
        json_t *entries = json_array();
        for (size_t i = 0; entries && i < json_array_size(files); i++) {
            json_t *entry = write_batch_file(&c, &batch[i]);
            if (entry) {
                json_array_append_new(entries, entry);
            } else {
                json_decref(entries);
                entries = NULL;
            }
        }
        entries ? http_respond_json(request, 200, entries)
                : respond_failure(request, &c, disk_bytes);
        close_sandbox(&c);
    }
    for (size_t i = 0; i < json_array_size(files); i++)
        free(batch[i].content);
    free(batch);
    json_decref(body);
}

/* ---- streamed uploads: PUT a file (api/file_upload.c), PUT a tar ---- */

typedef struct upload {
    bool is_tar;
    file_upload *file; /* a file's upload, until it is finished */
    confined c;        /* a tar's: owns c.root_fd */
    char path[4096];   /* normalized: the directory a tar goes to */
    int tar_fd;
    long long received;
    long long disk_bytes; /* 0: unlimited */
    http_request *request;
} upload;

static void free_upload(upload *u)
{
    if (u->file)
        file_upload_abandon(u->file);
    if (u->tar_fd >= 0)
        close(u->tar_fd);
    if (u->is_tar)
        close_sandbox(&u->c);
    free(u);
}

/* Answers now and ends the upload: the server drops the rest of the body and calls the receiver
   no more once on_data returns -1. A half-written file is removed (a tar's spool goes with its
   descriptor). */
static int fail_upload(upload *u, const file_upload_failure *failure)
{
    if (failure)
        http_respond_error(u->request, failure->status, "%s", failure->message);
    else
        respond_failure(u->request, &u->c, u->disk_bytes);
    free_upload(u);
    return -1;
}

static int receive_data(void *arg, const char *data, size_t length)
{
    upload *u = arg;
    u->received += (long long)length;
    if (u->disk_bytes > 0 && u->received > u->disk_bytes) {
        respond_too_large(u->request, u->disk_bytes);
        free_upload(u);
        return -1;
    }
    file_upload_failure failure;
    if (!u->is_tar && file_upload_write(u->file, data, length, &failure) < 0)
        return fail_upload(u, &failure);
    if (u->is_tar && write_all(u->tar_fd, data, length) < 0) {
        confined_failf(&u->c, errno, "cannot spool the uploaded archive in the daemon's /tmp: %s",
                       strerror(errno));
        return fail_upload(u, NULL);
    }
    return 0;
}

static void finish_file(http_request *request, upload *u)
{
    file_upload_failure failure;
    bool existed = file_upload_existed(u->file);
    json_t *entry = file_upload_finish(u->file, &failure);
    u->file = NULL;
    if (entry)
        http_respond_json(request, existed ? 200 : 201, entry);
    else
        http_respond_error(request, failure.status, "%s", failure.message);
}

static void finish_tar(http_request *request, upload *u)
{
    json_t *entry = NULL;
    if (confined_tar_extract(&u->c, u->path, u->tar_fd) == 0)
        entry = confined_stat(&u->c, u->path);
    entry ? http_respond_json(request, 200, entry) : respond_failure(request, &u->c, u->disk_bytes);
}

static void receive_end(http_request *request, void *arg)
{
    upload *u = arg;
    if (!http_responded(request))
        u->is_tar ? finish_tar(request, u) : finish_file(request, u);
    free_upload(u);
}

/* The client went away: nothing to answer, and no partial file left behind. */
static void receive_abort(void *arg) { free_upload(arg); }

static const http_body_receiver upload_receiver = {receive_data, receive_end, receive_abort};

/* A tar's spool, and the directory it goes to; false after answering. */
static bool start_tar(http_request *request, box *b, upload *u, const char *path)
{
    if (!open_sandbox(request, b, &u->c))
        return false;
    if (confined_normalize(&u->c, path, u->path, sizeof u->path) < 0) {
        respond_failure(request, &u->c, u->disk_bytes);
        close_sandbox(&u->c);
        return false;
    }
    u->tar_fd = open_spool(request);
    if (u->tar_fd < 0)
        close_sandbox(&u->c);
    return u->tar_fd >= 0;
}

static void start_upload(http_request *request, box *b, bool is_tar)
{
    const char *path = path_query(request);
    if (!path)
        return;
    long long disk_bytes = box_limits(b)->disk_bytes;
    const char *length_header = http_header(request, "Content-Length");
    if (length_header && disk_bytes > 0 && strtoll(length_header, NULL, 10) > disk_bytes) {
        respond_too_large(request, disk_bytes);
        return;
    }
    upload *u = calloc(1, sizeof *u);
    if (!u)
        die("out of memory");
    u->tar_fd = -1;
    u->is_tar = is_tar;
    u->disk_bytes = disk_bytes;
    u->request = request;
    file_upload_failure failure;
    if (is_tar && !start_tar(request, b, u, path)) {
        free(u);
        return;
    }
    json_t *metadata = is_tar ? NULL : file_upload_metadata_of(request, &failure);
    if (!is_tar && (!metadata || !(u->file = file_upload_open(b, path, false, &failure)))) {
        http_respond_error(request, failure.status, "%s", failure.message);
        json_decref(metadata);
        free(u);
        return;
    }
    if (u->file) /* a PUT replaces the file: its bytes and its metadata, as envd's POST does */
        file_upload_set_metadata(u->file, metadata);
    json_decref(metadata);
    http_receive_body(request, &upload_receiver, u);
}

/* ---- tar downloads ---- */

static void get_tar(http_request *request, box *b)
{
    const char *path = path_query(request);
    confined c;
    if (!path || !open_sandbox(request, b, &c))
        return;
    int fd = open_spool(request);
    /* The archive is spooled on the host: no larger than what the sandbox could hold itself
       (its /workspace and its /tmp). */
    long long cap = 2 * box_limits(b)->disk_bytes;
    if (fd >= 0 && confined_tar_create(&c, path, fd, cap) < 0) {
        respond_failure(request, &c, 0);
        close(fd);
    } else if (fd >= 0) {
        off_t size = lseek(fd, 0, SEEK_END);
        lseek(fd, 0, SEEK_SET);
        http_respond_fd(request, 200, "application/x-tar", fd, (size_t)size);
    }
    close_sandbox(&c);
}

/* ---- routing ---- */

bool v1_files_streams_body(const char *method, const char *rest)
{
    return strcmp(method, "PUT") == 0 &&
           (strcmp(rest, "") == 0 || strcmp(rest, "/") == 0 || strcmp(rest, "/tar") == 0);
}

void v1_files_route(http_request *request, box *b, const char *rest)
{
    bool get = http_method_is(request, "GET"), put = http_method_is(request, "PUT");
    bool post = http_method_is(request, "POST");
    if (strcmp(rest, "") == 0 || strcmp(rest, "/") == 0) {
        if (get)
            get_file(request, b);
        else if (put)
            start_upload(request, b, false);
        else if (http_method_is(request, "DELETE"))
            delete_file(request, b);
        else
            http_respond_method_not_allowed(request, "GET, PUT, DELETE");
    } else if (strcmp(rest, "/tar") == 0) {
        if (get)
            get_tar(request, b);
        else if (put)
            start_upload(request, b, true);
        else
            http_respond_method_not_allowed(request, "GET, PUT");
    } else if (strcmp(rest, "/stat") == 0 || strcmp(rest, "/list") == 0) {
        if (!get)
            http_respond_method_not_allowed(request, "GET");
        else
            strcmp(rest, "/stat") == 0 ? stat_file(request, b) : list_files(request, b);
    } else if (strcmp(rest, "/mkdir") == 0 || strcmp(rest, "/move") == 0 ||
               strcmp(rest, "/batch") == 0) {
        if (!post)
            http_respond_method_not_allowed(request, "POST");
        else if (strcmp(rest, "/mkdir") == 0)
            make_directory(request, b);
        else
            strcmp(rest, "/move") == 0 ? move_file(request, b) : write_batch(request, b);
    } else {
        http_respond_error(request, 404,
                           "no such files endpoint: files%s (known: files, files/stat, "
                           "files/list, files/mkdir, files/move, files/batch, files/tar)",
                           rest);
    }
}
