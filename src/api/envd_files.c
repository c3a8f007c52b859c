#include "api/envd_files.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "api/envd_access.h"
#include "api/envd_user.h"
#include "api/errors.h"
#include "api/file_upload.h"
#include "api/v1_ready.h"
#include "common/log.h"
#include "common/text.h"
#include "http/form.h"
#include "http/url.h"

#define MAX_UPLOAD_FILES 1024 /* files in one form: bounds the answer, not their sizes */
#define GZIP_CHUNK (64 * 1024)
#define GZIP_QUEUE_HIGH (1024 * 1024) /* compress ahead of the client up to this much */

/* ---- uploads ---- */

typedef struct envd_upload {
    http_request *request;
    char sandbox_id[128]; /* looked up again for each part: the sandbox may go meanwhile */
    const char *path;     /* ?path= (it outlives the body), or NULL: each part's filename */
    bool gzip;            /* Content-Encoding: gzip (octet-stream bodies) */
    http_form *form;      /* a multipart body; NULL: the body is the file */
    file_upload *file;    /* the file being written */
    char file_path[4096]; /* the part's path as the client named it, decoded */
    int files;            /* parts begun */
    json_t *metadata;     /* X-Metadata-<key> headers: every file's metadata, replacing its own */
    json_t *written;      /* envd's answer: [{name, type, path, metadata?}] */
    file_upload_failure failure; /* noted inside the form's callbacks, answered outside them */
} envd_upload;

static void free_upload(envd_upload *u)
{
    if (u->file)
        file_upload_abandon(u->file);
    if (u->form)
        http_form_close(u->form);
    json_decref(u->metadata);
    json_decref(u->written);
    free(u);
}

/* Notes why the upload failed and returns -1; the caller answers (answer_failure) once outside
   libmicrohttpd's form callbacks, which must not free the form they run in. */
static int note_failure(envd_upload *u, int status, const char *message)
{
    u->failure.status = status;
    snprintf(u->failure.message, sizeof u->failure.message, "%s", message);
    return -1;
}

/* Answers the noted failure and ends the upload: the server drops the rest of the body. What
   was half written is removed (file_upload_abandon); files of the form already complete stay,
   as envd leaves them. */
static int answer_failure(envd_upload *u)
{
    errors_respond_e2b(u->request, u->failure.status, "%s", u->failure.message);
    free_upload(u);
    return -1;
}

/* The file being written is complete: its entry joins the answer. */
static int finish_file(envd_upload *u)
{
    json_t *entry = file_upload_finish(u->file, &u->failure);
    u->file = NULL;
    if (!entry)
        return -1;
    json_t *written = json_pack("{s:O, s:s, s:O}", "name", json_object_get(entry, "name"), "type",
                                "file", "path", json_object_get(entry, "path"));
    json_t *metadata = json_object_get(entry, "metadata");
    if (metadata)
        json_object_set(written, "metadata", metadata);
    json_array_append_new(u->written, written);
    json_decref(entry);
    return 0;
}

static int open_file(envd_upload *u, const char *path)
{
    box *b = box_find(u->sandbox_id);
    char absolute[4096];
    if (!b)
        return note_failure(u, 502, "the sandbox was killed during the upload");
    if (!envd_absolute_path(path, absolute, sizeof absolute))
        return note_failure(u, 400, "the file's path is too long");
    u->file = file_upload_open(b, absolute, u->gzip, &u->failure);
    if (u->file)
        file_upload_set_metadata(u->file, u->metadata);
    return u->file ? 0 : -1;
}

/* A part of the form begins: the previous file is complete, the next is opened. The query's
   path names it when given (as envd does), else the part's filename; undici escapes '"', CR
   and LF in filenames as %22, %0D, %0A. */
static int on_form_part(void *arg, const char *name, const char *filename)
{
    envd_upload *u = arg;
    char message[160];
    if (u->file && finish_file(u) < 0)
        return -1;
    if (++u->files > MAX_UPLOAD_FILES) {
        snprintf(message, sizeof message,
                 "the form holds more than %d files: upload them in several requests",
                 MAX_UPLOAD_FILES);
        return note_failure(u, 400, message);
    }
    snprintf(u->file_path, sizeof u->file_path, "%s", u->path ? u->path : filename);
    bool decoded = u->path || !text_has_control_bytes(u->file_path,
                                                      url_percent_decode(u->file_path));
    if (decoded && *u->file_path)
        return open_file(u, u->file_path);
    snprintf(message, sizeof message,
             decoded ? "file %d of the form has no path: pass ?path= or give the part a filename"
                     : "the filename of file %d of the form holds a NUL or control byte: paths "
                       "cannot contain them",
             u->files);
    return note_failure(u, 400, message);
}

static int on_form_data(void *arg, const char *data, size_t length)
{
    envd_upload *u = arg;
    return file_upload_write(u->file, data, length, &u->failure);
}

static const http_form_callbacks form_callbacks = {on_form_part, on_form_data};

static int receive_data(void *arg, const char *data, size_t length)
{
    envd_upload *u = arg;
    if (!u->form)
        return file_upload_write(u->file, data, length, &u->failure) < 0 ? answer_failure(u) : 0;
    if (http_form_feed(u->form, data, length) == 0)
        return 0;
    if (!u->failure.status) /* no callback failed: the form itself is malformed */
        note_failure(u, 400, "the body is not a well-formed multipart form");
    return answer_failure(u);
}

static void receive_end(http_request *request, void *arg)
{
    envd_upload *u = arg;
    if (u->form) {
        int complete = http_form_close(u->form);
        u->form = NULL;
        if ((complete < 0 || u->files == 0) && !u->failure.status)
            note_failure(u, 400, "the body is not a multipart form of files ending with its "
                                 "closing boundary (each file a part with its path as the "
                                 "filename)");
        if (u->failure.status) {
            answer_failure(u);
            return;
        }
    }
    if (u->file && finish_file(u) < 0) {
        answer_failure(u);
        return;
    }
    http_respond_json(request, 200, json_incref(u->written));
    free_upload(u);
}

/* The client went away: what was half written is removed (file_upload_abandon). */
static void receive_abort(void *arg) { free_upload(arg); }

static const http_body_receiver upload_receiver = {receive_data, receive_end, receive_abort};

/* Content-Encoding: none, identity or gzip; false after answering 400. */
static bool read_encoding(http_request *request, bool *gzip)
{
    const char *encoding = http_header(request, "Content-Encoding");
    *gzip = encoding && strcasecmp(encoding, "gzip") == 0;
    if (!encoding || *gzip || strcasecmp(encoding, "identity") == 0)
        return true;
    errors_respond_e2b(request, 400,
                       "Content-Encoding '%.40s' is not supported: upload the file as it is, or "
                       "gzip-compressed (Content-Encoding: gzip)",
                       encoding);
    return false;
}

/* The request's metadata headers as {key: value}; NULL after answering 400 in E2B's shape. */
static json_t *read_metadata(http_request *request)
{
    file_upload_failure failure;
    json_t *metadata = file_upload_metadata_of(request, &failure);
    if (!metadata)
        errors_respond_e2b(request, failure.status, "%s", failure.message);
    return metadata;
}

/* POST /files?path=: a multipart form of files, or (envd 0.5.7) the file's bytes as
   application/octet-stream. Either streams to the sandbox's disk as it arrives, and each file
   takes the request's metadata (envd 0.6.2). */
static void write_files(http_request *request, box *b)
{
    const char *path = http_query(request, "path");
    bool gzip;
    json_t *metadata = NULL;
    if (!read_encoding(request, &gzip) || !(metadata = read_metadata(request)))
        return;
    if (!v1_require_running(request, b)) {
        json_decref(metadata);
        return;
    }
    envd_upload *u = calloc(1, sizeof *u);
    if (!u)
        die("out of memory");
    u->request = request;
    u->metadata = metadata;
    u->path = path && *path ? path : NULL;
    u->gzip = gzip;
    u->written = json_array();
    snprintf(u->sandbox_id, sizeof u->sandbox_id, "%s", box_id(b));
    const char *type = http_header(request, "Content-Type");
    bool form = type && strncasecmp(type, "multipart/form-data", 19) == 0;
    if (form && gzip)
        note_failure(u, 400, "Content-Encoding: gzip is taken with application/octet-stream "
                             "uploads: send the multipart form uncompressed");
    else if (form && !(u->form = http_form_open(request, &form_callbacks, u)))
        note_failure(u, 400, "the multipart form names no boundary in its Content-Type");
    else if (!form && !u->path)
        note_failure(u, 400, "the 'path' query parameter is required: where the file goes");
    else if (!form)
        open_file(u, u->path);
    if (u->failure.status)
        answer_failure(u);
    else
        http_receive_body(request, &upload_receiver, u);
}

/* ---- downloads ---- */

typedef struct gzip_download {
    http_stream *stream;
    int fd;
    z_stream deflater;
    bool ended; /* http_stream_end was called */
} gzip_download;

/* Compresses the next pieces of the file while the client keeps up: the queue stays under
   GZIP_QUEUE_HIGH, and the server calls again once it drained. A read error ends the stream
   without gzip's trailer, so the client sees a truncated file, never a silently short one. */
static void compress_more(void *arg)
{
    gzip_download *d = arg;
    static unsigned char in[GZIP_CHUNK], out[GZIP_CHUNK];
    while (!d->ended && http_stream_queued(d->stream) < GZIP_QUEUE_HIGH) {
        ssize_t n = read(d->fd, in, sizeof in);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            log_warn("gzip download: read failed: %s", strerror(errno));
            d->ended = true;
            http_stream_end(d->stream);
            return;
        }
        d->deflater.next_in = in;
        d->deflater.avail_in = (uInt)n;
        do {
            d->deflater.next_out = out;
            d->deflater.avail_out = sizeof out;
            deflate(&d->deflater, n == 0 ? Z_FINISH : Z_NO_FLUSH);
            http_stream_write(d->stream, out, sizeof out - d->deflater.avail_out);
        } while (d->deflater.avail_out == 0);
        if (n == 0) {
            d->ended = true;
            http_stream_end(d->stream);
        }
    }
}

static void gzip_download_closed(void *arg, bool completed)
{
    gzip_download *d = arg;
    deflateEnd(&d->deflater);
    close(d->fd);
    free(d);
}

/* Does Accept-Encoding take gzip (and not with q=0)? */
static bool accepts_gzip(http_request *request)
{
    const char *accepted = http_header(request, "Accept-Encoding");
    for (const char *at = accepted; at && (at = strcasestr(at, "gzip")); at += 4) {
        const char *after = at + 4 + strspn(at + 4, " \t");
        if (strncmp(after, ";q=0", 4) == 0 && strspn(after + 4, "0.") == strcspn(after + 4, ",;"))
            return false;
        if ((at == accepted || strchr(", \t", at[-1])) && strchr(",; \t", *after))
            return true;
    }
    return false;
}

static void send_gzip(http_request *request, int fd)
{
    gzip_download *d = calloc(1, sizeof *d);
    if (!d)
        die("out of memory");
    d->fd = fd;
    /* level 1: the link is usually faster than deflate's higher levels */
    if (deflateInit2(&d->deflater, 1, Z_DEFLATED, 16 + MAX_WBITS, 8, Z_DEFAULT_STRATEGY) != Z_OK)
        die("out of memory starting zlib");
    http_add_response_header(request, "Content-Encoding", "gzip");
    http_add_response_header(request, "Vary", "Accept-Encoding");
    d->stream = http_respond_stream(request, 200, "application/octet-stream",
                                    gzip_download_closed, d);
    http_stream_on_drained(d->stream, compress_more);
    compress_more(d);
}

/* GET /files?path=: the file's bytes, sent from its descriptor (sendfile), or compressed as
   they go when the client accepts gzip. */
static void read_file(http_request *request, box *b)
{
    const char *path = http_query(request, "path");
    confined c;
    char why[256];
    if (!path || !*path) {
        errors_respond_e2b(request, 400, "the 'path' query parameter is required: the file to "
                                         "read (relative paths are relative to " ENVD_HOME_DIR
                                         ")");
        return;
    }
    if (!v1_require_running(request, b))
        return;
    if (!box_open_files(b, &c, why, sizeof why)) {
        errors_respond_e2b(request, 409, "%s", why);
        return;
    }
    struct stat st;
    char absolute[4096];
    int fd = envd_absolute_path(path, absolute, sizeof absolute)
                 ? confined_open_read(&c, absolute, &st)
                 : (errno = ENAMETOOLONG, -1);
    if (fd < 0) {
        file_upload_failure failure;
        file_upload_describe(&c, 0, &failure);
        errors_respond_e2b(request, failure.status, "%s", failure.message);
    } else if (accepts_gzip(request) && st.st_size > 0) {
        send_gzip(request, fd);
    } else {
        http_respond_fd(request, 200, "application/octet-stream", fd, (size_t)st.st_size);
    }
    box_close_files(&c);
}

/* ---- routing ---- */

bool envd_files_streams_body(const http_request *request)
{
    return http_method_is(request, "POST") && strcmp(http_path(request), "/files") == 0;
}

void envd_files_route(http_request *request, box *b)
{
    bool get = http_method_is(request, "GET"), post = http_method_is(request, "POST");
    if (!get && !post) {
        errors_respond_e2b_method_not_allowed(request, "GET, POST");
        return;
    }
    /* A signed URL is checked before anything else, and decides which sandbox when the
       request names none. */
    if ((envd_access_is_signed(request) || !b) &&
        !(b = envd_access_check_signed(request, b, get ? "read" : "write")))
        return;
    envd_user user;
    char why[256];
    if (!envd_user_of_request(request, &user, why, sizeof why)) {
        errors_respond_e2b(request, 400, "%s", why);
        return;
    }
    get ? read_file(request, b) : write_files(request, b);
}
