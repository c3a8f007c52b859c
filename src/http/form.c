#include "http/form.h"

#include <microhttpd.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "common/log.h"
#include "http/server_connection.h"

/* libmicrohttpd keeps at most this much of a part at once (headers, a boundary being matched);
   the data itself passes through in pieces. */
#define FORM_BUFFER_SIZE (64 * 1024)

struct http_form {
    struct MHD_PostProcessor *processor;
    const http_form_callbacks *callbacks;
    void *arg;
    bool stopped;        /* a callback returned -1: the rest is not read */
    bool in_part;        /* a part has begun */
    uint64_t part_bytes; /* of the current part, so far */
    char *part_name, *part_filename; /* the current part's, copied */
};

/* Does this piece begin a new part? libmicrohttpd gives a part's first piece offset 0, but may
   first announce the part with an empty piece (offset 0, no data) and then give its first data
   at offset 0 again: a piece at offset 0 continues the current part when that part has no
   bytes yet and the same name and filename. (Two parts in a row with the same name and
   filename, the first empty, are thus one part: they would name the same file anyway.) */
static bool begins_part(const http_form *form, const char *name, const char *filename,
                        uint64_t offset)
{
    if (offset != 0)
        return false;
    return !form->in_part || form->part_bytes > 0 || strcmp(form->part_name, name) != 0 ||
           strcmp(form->part_filename, filename) != 0;
}

static void remember_part(http_form *form, const char *name, const char *filename)
{
    free(form->part_name);
    free(form->part_filename);
    form->part_name = strdup(name);
    form->part_filename = strdup(filename);
    if (!form->part_name || !form->part_filename)
        die("out of memory");
    form->in_part = true;
    form->part_bytes = 0;
}

/* libmicrohttpd calls this with each piece of each part, in order. */
static enum MHD_Result on_form_piece(void *cls, enum MHD_ValueKind kind, const char *key,
                                     const char *filename, const char *content_type,
                                     const char *transfer_encoding, const char *data,
                                     uint64_t offset, size_t size)
{
    http_form *form = cls;
    const char *name = key ? key : "";
    if (!filename)
        filename = "";
    if (form->stopped)
        return MHD_NO;
    if (begins_part(form, name, filename, offset)) {
        remember_part(form, name, filename);
        if (form->callbacks->on_part(form->arg, name, filename) < 0)
            form->stopped = true;
    }
    if (!form->stopped && size > 0 && form->callbacks->on_data(form->arg, data, size) < 0)
        form->stopped = true;
    form->part_bytes += size;
    return form->stopped ? MHD_NO : MHD_YES;
}

http_form *http_form_open(http_request *request, const http_form_callbacks *callbacks, void *arg)
{
    const char *type = http_header(request, "Content-Type");
    struct MHD_Connection *connection = http_request_connection(request);
    if (!type || strncasecmp(type, "multipart/form-data", 19) != 0 || !strstr(type, "boundary=") ||
        !connection) /* no connection: tests/fuzz's stand-in server, which has none to parse */
        return NULL;
    http_form *form = calloc(1, sizeof *form);
    if (!form)
        die("out of memory");
    form->callbacks = callbacks;
    form->arg = arg;
    form->processor = MHD_create_post_processor(connection, FORM_BUFFER_SIZE, on_form_piece, form);
    if (!form->processor) {
        free(form);
        return NULL;
    }
    return form;
}

int http_form_feed(http_form *form, const char *data, size_t length)
{
    if (form->stopped)
        return -1;
    if (MHD_post_process(form->processor, data, length) != MHD_YES)
        form->stopped = true;
    return form->stopped ? -1 : 0;
}

int http_form_close(http_form *form)
{
    bool complete = MHD_destroy_post_processor(form->processor) == MHD_YES && !form->stopped;
    free(form->part_name);
    free(form->part_filename);
    free(form);
    return complete ? 0 : -1;
}
