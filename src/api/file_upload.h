/* file_upload — one file written into a sandbox as its bytes arrive: /v1's PUT .../files and
 * envd's POST /files (its octet-stream body, or each file of a multipart form), plain or
 * gzip-compressed (decompressed as it streams). The file is opened beneath the sandbox's root
 * with every check, as the sandbox user (sandbox/confined.c, through box_open_files); what it
 * holds is bounded by the sandbox's disk limit, decompressed bytes included; and it is removed
 * again unless the upload finishes, so a failed or abandoned upload leaves no partial file.
 *
 * Failures are described, not answered: each API answers them in its own error shape. */
#ifndef CELLBOX_API_FILE_UPLOAD_H
#define CELLBOX_API_FILE_UPLOAD_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "http/server.h"
#include "model/box.h"
#include "sandbox/confined.h"

typedef struct file_upload file_upload;

typedef struct file_upload_failure {
    int status;          /* the HTTP status that names it: 507 for a full disk, 400 corrupt gzip */
    char message[1024];  /* names the path, the limit and what to do */
} file_upload_failure;

/* Opens `path` (a relative one is relative to /workspace) for writing: parents made, an existing
   file emptied.
   gzip: the bytes to come are a gzip stream. NULL with the failure. */
file_upload *file_upload_open(box *b, const char *path, bool gzip, file_upload_failure *failure);
/* Appends the next bytes; -1 with the failure (the partial file is already removed). */
int file_upload_write(file_upload *u, const void *data, size_t length,
                      file_upload_failure *failure);
/* The file's user-defined metadata ({key: value}, already checked with file_metadata_check),
   stored when the upload finishes in place of what the file held: an empty object clears it.
   Without this call an existing file's metadata is left as it was. */
void file_upload_set_metadata(file_upload *u, json_t *metadata);
/* All bytes are in: the file's entry ({name, path, type, size, ..., metadata?}), or NULL with the
   failure (a gzip stream cut short, metadata the file system cannot hold). The upload is then
   closed and freed either way. */
json_t *file_upload_finish(file_upload *u, file_upload_failure *failure);
/* Was the file there before (so /v1 answers 200, not 201)? */
bool file_upload_existed(const file_upload *u);
/* Ends an upload that did not finish (a failure, a client gone): the partial file is removed. */
void file_upload_abandon(file_upload *u);

/* The request's X-Metadata-<key>: <value> headers (envd's way of sending a file's metadata) as
   {key: value}, for file_upload_set_metadata: keys in lower case (header names have no case), the
   first of a repeated key winning, no header an empty set. NULL with the failure (400, naming
   the key and the limit) when file_metadata_check refuses the set. */
json_t *file_upload_metadata_of(http_request *request, file_upload_failure *failure);

/* A confined operation's failure in words, with its status: a full disk adds the sandbox's
   limit (`disk_bytes`, 0 = unlimited) and how to raise it. */
void file_upload_describe(const confined *c, long long disk_bytes, file_upload_failure *failure);

#endif
