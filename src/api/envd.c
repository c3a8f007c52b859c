#include "api/envd.h"

#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "api/connect.h"
#include "api/envd_filesystem.h"
#include "api/envd_process.h"
#include "api/errors.h"
#include "api/v1_files.h"
#include "api/v1_ready.h"
#include "common/log.h"
#include "common/text.h"
#include "http/url.h"

#define MAX_UPLOAD_FILES 64

/* Percent-decoding in place (url.h).
   False when the result holds a NUL or control byte: it would name another key or file. */
static bool url_decode(char *text)
{
    return !text_has_control_bytes(text, url_percent_decode(text));
}

/* The value of parameter `name` in a header like `multipart/form-data; boundary=x`, unquoted;
   false if it is not there or does not fit. */
static bool header_parameter(const char *header, const char *name, char *out, size_t size)
{
    size_t n = strlen(name);
    for (const char *at = strchr(header, ';'); at; at = strchr(at + 1, ';')) {
        const char *p = at + 1 + strspn(at + 1, " \t");
        if (strncasecmp(p, name, n) != 0 || p[n] != '=')
            continue;
        p += n + 1;
        size_t length = *p == '"' ? strcspn(p + 1, "\"") : strcspn(p, "; \t");
        if (*p == '"')
            p++;
        if (length == 0 || length >= size)
            return false;
        memcpy(out, p, length);
        out[length] = '\0';
        return true;
    }
    return false;
}

typedef struct upload_part {
    char filename[4096]; /* the path, as the SDK names each part */
    bool filename_refused; /* it holds a NUL or control byte once decoded */
    const char *data;
    size_t length;
} upload_part;

/* Splits a multipart/form-data body (RFC 7578) into its parts; -1 when it is malformed. The
   SDK sends each file as a part named "file" whose filename is the file's path. */
static int parse_multipart(const char *body, size_t length, const char *boundary,
                           upload_part *parts, int max_parts)
{
    char delimiter[256];
    int delimiter_length = snprintf(delimiter, sizeof delimiter, "--%s", boundary);
    const char *end = body + length;
    const char *at = memmem(body, length, delimiter, (size_t)delimiter_length);
    int count = 0;
    while (at) {
        at += delimiter_length;
        if (end - at >= 2 && at[0] == '-' && at[1] == '-')
            return count; /* the closing delimiter */
        if (count == max_parts || end - at < 2 || at[0] != '\r' || at[1] != '\n')
            return -1;
        const char *headers = at + 2;
        const char *data = memmem(headers, (size_t)(end - headers), "\r\n\r\n", 4);
        if (!data)
            return -1;
        char header_text[8192];
        size_t header_length = (size_t)(data - headers);
        if (header_length >= sizeof header_text)
            return -1;
        memcpy(header_text, headers, header_length);
        header_text[header_length] = '\0';
        data += 4;
        char closing[260];
        int closing_length = snprintf(closing, sizeof closing, "\r\n%s", delimiter);
        const char *next = memmem(data, (size_t)(end - data), closing, (size_t)closing_length);
        if (!next)
            return -1;
        upload_part *part = &parts[count++];
        part->filename[0] = '\0';
        for (char *line = header_text; line;
             line = strstr(line, "\r\n") ? strstr(line, "\r\n") + 2 : NULL)
            if (strncasecmp(line, "Content-Disposition:", 20) == 0) {
                char *line_end = strstr(line, "\r\n");
                if (line_end)
                    *line_end = '\0';
                header_parameter(line, "filename", part->filename, sizeof part->filename);
                if (line_end)
                    *line_end = '\r';
            }
        /* undici escapes '"', CR and LF as %22, %0D, %0A */
        part->filename_refused = !url_decode(part->filename);
        part->data = data;
        part->length = (size_t)(next - data);
        at = next + 2;
    }
    return -1;
}

/* The entry envd answers for each file written: {name, type, path}. */
static json_t *written_entry(json_t *entry)
{
    json_t *written = json_pack("{s:O, s:s, s:O}", "name", json_object_get(entry, "name"), "type",
                                "file", "path", json_object_get(entry, "path"));
    json_decref(entry);
    return written;
}

/* POST /files?path=: a multipart form of files, or (envd 0.5.7) the file's bytes as
   application/octet-stream. The body is held in memory (the server's body size limit applies):
   /v1's PUT .../files streams uploads of any size. */
static void write_files(http_request *request, box *b)
{
    const char *type = http_header(request, "Content-Type");
    const char *path = http_query(request, "path");
    const char *encoding = http_header(request, "Content-Encoding");
    size_t length;
    const char *body = http_body(request, &length);
    if (encoding && strcasecmp(encoding, "identity") != 0) {
        errors_respond_e2b(request, 400,
                      "Content-Encoding '%s' is not supported: upload the file "
                      "uncompressed (without gzip)",
                      encoding);
        return;
    }
    if (!v1_require_running(request, b))
        return;
    json_t *written = json_array();
    if (type && strncasecmp(type, "multipart/form-data", 19) == 0) {
        char boundary[200];
        upload_part *parts = calloc(MAX_UPLOAD_FILES, sizeof *parts);
        if (!parts)
            die("out of memory");
        int count = header_parameter(type, "boundary", boundary, sizeof boundary)
                        ? parse_multipart(body, length, boundary, parts, MAX_UPLOAD_FILES)
                        : -1;
        if (count <= 0)
            errors_respond_e2b(request, 400,
                          "the body is not a multipart form with up to %d files "
                          "(each a part with its path as the filename)",
                          MAX_UPLOAD_FILES);
        for (int i = 0; i < count && written; i++) {
            const char *target = path && *path && count == 1 ? path : parts[i].filename;
            bool refused = target == parts[i].filename && parts[i].filename_refused;
            json_t *entry = *target && !refused
                                ? v1_files_write(request, b, target, parts[i].data, parts[i].length)
                                : NULL;
            if (refused)
                errors_respond_e2b(request, 400,
                              "the filename of file %d of the form holds a NUL or control byte: "
                              "paths cannot contain them",
                              i + 1);
            else if (!*target)
                errors_respond_e2b(request, 400,
                              "file %d of the form has no path: pass ?path= or "
                              "give the part a filename",
                              i + 1);
            if (entry)
                json_array_append_new(written, written_entry(entry));
            else
                json_decref(written), written = NULL;
        }
        if (count <= 0)
            json_decref(written), written = NULL;
        free(parts);
    } else if (!path || !*path) {
        errors_respond_e2b(request, 400, "the 'path' query parameter is required");
        json_decref(written), written = NULL;
    } else {
        json_t *entry = v1_files_write(request, b, path, body, length);
        if (entry)
            json_array_append_new(written, written_entry(entry));
        else
            json_decref(written), written = NULL;
    }
    if (written)
        http_respond_json(request, 200, written);
}

/* envd's Connect-RPC services that cellbox serves (process.Process is served by
   envd_process_serve, which gives its methods the call's deadline too). */
static const connect_service *const envd_services[] = {&envd_filesystem_service,
                                                       &envd_process_service, NULL};

bool envd_streams_body(const char *method, const char *path)
{
    return connect_streams_body(envd_services, method, path);
}

void envd_route(http_request *request, box *b, char **s, int n)
{
    if (n == 1 && strcmp(s[0], "health") == 0) {
        http_respond(request, 204, NULL, "", 0);
    } else if (n == 1 && strcmp(s[0], "files") == 0) {
        if (http_method_is(request, "GET")) {
            if (v1_require_running(request, b))
                v1_files_route(request, b, ""); /* same ?path=, same bytes back */
        } else if (http_method_is(request, "POST")) {
            write_files(request, b);
        } else {
            errors_respond_e2b_method_not_allowed(request, "GET, POST");
        }
    } else if (n == 2 && strcmp(s[0], ENVD_PROCESS_SERVICE) == 0) {
        envd_process_serve(request, b, s[1]);
    } else if (n == 2 && strchr(s[0], '.')) {
        /* Connect-RPC: /{package.Service}/{Method} */
        connect_serve(request, envd_services, s[0], s[1], b);
    } else {
        errors_respond_e2b(request, 404,
                      "no such envd endpoint: %s (cellbox serves /health and "
                      "/files)",
                      http_path(request));
    }
}

