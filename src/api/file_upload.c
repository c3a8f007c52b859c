#include "api/file_upload.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "api/errors.h"
#include "common/log.h"
#include "http/query.h"
#include "sandbox/file_metadata.h"
#include "sandbox/limits.h"

#define INFLATE_CHUNK (64 * 1024)

struct file_upload {
    confined c;          /* owns c.root_fd (box_open_files) */
    char path[4096];     /* normalized, beneath the sandbox's root */
    int fd;              /* the file being written */
    bool existed;
    bool gzip;
    bool gzip_ended;     /* the stream's last member ended: only another member may follow */
    z_stream inflater;   /* when gzip */
    long long written;   /* bytes in the file so far (decompressed) */
    long long disk_bytes; /* the sandbox's disk limit; 0 = unlimited */
    json_t *metadata;     /* to store once the bytes are in; NULL: leave the file's as it is */
};

static void format_limit(long long disk_bytes, char *out, size_t size)
{
    if (disk_bytes > 0)
        limits_format_size(disk_bytes, out, size);
    else
        snprintf(out, size, "unlimited");
}

void file_upload_describe(const confined *c, long long disk_bytes, file_upload_failure *failure)
{
    char limit[32];
    failure->status = errors_status_of_errno(c->error);
    format_limit(disk_bytes, limit, sizeof limit);
    if (failure->status != 507)
        snprintf(failure->message, sizeof failure->message, "%s", c->why);
    else if (c->inode_limit > 0) /* files, not bytes: the number grows with the disk limit */
        snprintf(failure->message, sizeof failure->message,
                 "%s, or create the sandbox with a larger \"disk\" limit (%s gives %lld)", c->why,
                 limit, c->inode_limit);
    else
        snprintf(failure->message, sizeof failure->message,
                 "%s (the sandbox's disk limit is %s); remove files, or create the sandbox with "
                 "a larger \"disk\" limit",
                 c->why, limit);
}

static void free_upload(file_upload *u)
{
    if (u->gzip)
        inflateEnd(&u->inflater);
    if (u->fd >= 0)
        close(u->fd);
    json_decref(u->metadata);
    box_close_files(&u->c);
    free(u);
}

void file_upload_abandon(file_upload *u)
{
    if (u->fd >= 0)
        confined_discard(&u->c, u->path, u->fd);
    free_upload(u);
}

/* Fails the upload: the reason into `failure`, the partial file removed (the caller still
   abandons it, which frees it). */
static int fail(file_upload *u, file_upload_failure *failure)
{
    file_upload_describe(&u->c, u->disk_bytes, failure);
    confined_discard(&u->c, u->path, u->fd);
    close(u->fd);
    u->fd = -1;
    return -1;
}

file_upload *file_upload_open(box *b, const char *path, bool gzip, file_upload_failure *failure)
{
    file_upload *u = calloc(1, sizeof *u);
    if (!u)
        die("out of memory");
    u->fd = -1;
    u->disk_bytes = box_limits(b)->disk_bytes;
    char why[256];
    if (!box_open_files(b, &u->c, why, sizeof why)) {
        failure->status = 409;
        snprintf(failure->message, sizeof failure->message, "%s", why);
        free(u);
        return NULL;
    }
    if (confined_normalize(&u->c, path, u->path, sizeof u->path) < 0 ||
        (u->fd = confined_open_write(&u->c, u->path, 0644, &u->existed)) < 0) {
        file_upload_describe(&u->c, u->disk_bytes, failure);
        free_upload(u);
        return NULL;
    }
    /* 16 + MAX_WBITS: a gzip header and trailer (with its CRC) around deflate's data */
    if (gzip && inflateInit2(&u->inflater, 16 + MAX_WBITS) != Z_OK)
        die("out of memory starting zlib");
    u->gzip = gzip;
    return u;
}

/* Writes decompressed (or plain) bytes, within the disk limit. */
static int write_bytes(file_upload *u, const void *data, size_t length,
                       file_upload_failure *failure)
{
    if (u->disk_bytes > 0 && u->written + (long long)length > u->disk_bytes) {
        /* ENOSPC's words and status (507), before the file system says it: a tmpfs workspace
           may hold more than the limit until the sandbox's usage is measured. */
        confined_fail(&u->c, ENOSPC, u->path);
        return fail(u, failure);
    }
    for (size_t done = 0; done < length;) {
        ssize_t wrote = write(u->fd, (const char *)data + done, length - done);
        if (wrote < 0 && errno == EINTR)
            continue;
        if (wrote < 0) {
            confined_fail(&u->c, errno, u->path);
            return fail(u, failure);
        }
        done += (size_t)wrote;
    }
    u->written += (long long)length;
    return 0;
}

static int corrupt_gzip(file_upload *u, file_upload_failure *failure, const char *detail)
{
    confined_failf(&u->c, EINVAL,
                   "the upload for %s is not a valid gzip stream (%s): send it uncompressed, "
                   "or without Content-Encoding: gzip",
                   u->path, detail);
    return fail(u, failure);
}

/* Inflates a piece of the gzip stream into the file. Several members one after another are
   one stream (as gzip(1) reads them). */
static int inflate_bytes(file_upload *u, const void *data, size_t length,
                         file_upload_failure *failure)
{
    unsigned char out[INFLATE_CHUNK];
    u->inflater.next_in = (unsigned char *)data;
    u->inflater.avail_in = (uInt)length;
    while (u->inflater.avail_in > 0) {
        if (u->gzip_ended) {
            inflateReset(&u->inflater);
            u->gzip_ended = false;
        }
        u->inflater.next_out = out;
        u->inflater.avail_out = sizeof out;
        int rc = inflate(&u->inflater, Z_NO_FLUSH);
        if (rc != Z_OK && rc != Z_STREAM_END && rc != Z_BUF_ERROR)
            return corrupt_gzip(u, failure, u->inflater.msg ? u->inflater.msg : "zlib error");
        if (write_bytes(u, out, sizeof out - u->inflater.avail_out, failure) < 0)
            return -1;
        u->gzip_ended = rc == Z_STREAM_END;
        if (rc == Z_BUF_ERROR && u->inflater.avail_out > 0)
            break; /* needs more input */
    }
    return 0;
}

int file_upload_write(file_upload *u, const void *data, size_t length,
                      file_upload_failure *failure)
{
    if (u->fd < 0) {
        failure->status = 500;
        snprintf(failure->message, sizeof failure->message, "the upload already failed");
        return -1;
    }
    return u->gzip ? inflate_bytes(u, data, length, failure)
                   : write_bytes(u, data, length, failure);
}

bool file_upload_existed(const file_upload *u) { return u->existed; }

void file_upload_set_metadata(file_upload *u, json_t *metadata)
{
    json_decref(u->metadata);
    u->metadata = json_incref(metadata);
}

json_t *file_upload_finish(file_upload *u, file_upload_failure *failure)
{
    json_t *entry = NULL;
    if (u->fd < 0) {
        failure->status = 500;
        snprintf(failure->message, sizeof failure->message, "the upload already failed");
    } else if (u->gzip && !u->gzip_ended) {
        corrupt_gzip(u, failure, "it ends before its last member does");
    } else if (u->metadata && confined_set_metadata(&u->c, u->fd, u->path, u->metadata) < 0) {
        fail(u, failure);
    } else {
        /* read back, so the answer shows what the file now holds */
        entry = confined_entry_of_fd(&u->c, u->path, u->fd);
        if (!entry)
            fail(u, failure);
    }
    entry ? free_upload(u) : file_upload_abandon(u);
    return entry;
}

json_t *file_upload_metadata_of(http_request *request, file_upload_failure *failure)
{
    json_t *headers = json_object(), *metadata = json_object(), *value;
    const char *key;
    char why[512];
    http_header_each(request, "X-Metadata-", headers);
    json_object_foreach(headers, key, value)
    {
        char *lower = strdup(key);
        if (!lower)
            die("out of memory");
        for (char *at = lower; *at; at++)
            *at = (char)tolower((unsigned char)*at);
        if (!json_object_get(metadata, lower))
            json_object_set(metadata, lower, value);
        free(lower);
    }
    json_decref(headers);
    if (file_metadata_check(metadata, why, sizeof why) == 0)
        return metadata;
    json_decref(metadata);
    failure->status = 400;
    snprintf(failure->message, sizeof failure->message, "invalid metadata: %s", why);
    return NULL;
}
