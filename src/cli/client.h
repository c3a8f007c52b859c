/* client — HTTP to cellboxd's /v1 API through libcurl: JSON calls, NDJSON streams read line by
 * line as they arrive, and raw bodies streamed from and to files.
 *
 * Every verb returns an exit status (output.h): EXIT_OK, or EXIT_UNREACHABLE / EXIT_REFUSED
 * after it has told the user what went wrong and what to do about it. */
#ifndef CELLBOX_CLI_CLIENT_H
#define CELLBOX_CLI_CLIENT_H

#include <jansson.h>
#include <stdio.h>

/* base_url like "http://127.0.0.1:8888" (a trailing '/' is dropped); token NULL or "" = none. */
void client_open(const char *base_url, const char *token);
void client_close(void);
/* What client_open was given, for a transport that makes its own requests (mcp.c): the base
   URL without a trailing '/', and "Authorization: token <t>" or NULL when there is no token. */
const char *client_base_url(void);
const char *client_authorization_header(void);

/* "a b/c" → "a%20b%2Fc", for query values and path segments; free() it. */
char *client_escape(const char *text);

/* "/v1/sandboxes/<id, escaped><rest>" (rest may be "" or "/files?path=..." already escaped);
   free() it. */
char *client_sandbox_path(const char *id, const char *rest);

/* A JSON request (body may be NULL). *reply gets the decoded answer, NULL when it had none. */
int client_call(const char *method, const char *path, json_t *body, json_t **reply);
/* GET the list a listing command shows. With --json it is printed here, whole, and *list is
   NULL; otherwise *list is the caller's to show as a table and json_decref(). */
int client_get_list(const char *path, json_t **list);
/* The path of the thing `name` names, for client_delete_each; free() it (NULL: none). */
typedef char *client_path_of(const char *name, const void *context);
/* DELETEs each of names[0..count) at path_of(name, context), saying "removed NAME" for each
   (not under --json); stops at an unreachable daemon. The worst exit status. */
int client_delete_each(char **names, int count, client_path_of *path_of, const void *context);
/* As client_call, but an HTTP error is left to the caller: *status holds the HTTP status and
 *reply the daemon's error body. Only an unreachable daemon is reported. */
int client_call_status(const char *method, const char *path, json_t *body, long *status,
                       json_t **reply);
/* Tells the user why the daemon refused (its message and a hint); returns EXIT_REFUSED. */
int client_report_refusal(long status, json_t *reply);

/* Called for each NDJSON line as it arrives; `event` is NULL when the line is not JSON. */
typedef void client_line_handler(json_t *event, const char *line, size_t length, void *context);
/* POST with a JSON body; the answer is read as NDJSON and handed over line by line. */
int client_stream(const char *path, json_t *body, client_line_handler *handler, void *context);

/* POST a multipart/form-data body: each field of `fields` a part (strings as they are, other
   values as JSON text), and the file at `file_path` (unless NULL) as the part `file_field`,
   streamed from disk. The answer is read as NDJSON, as client_stream reads it. */
int client_stream_form(const char *path, json_t *fields, const char *file_field,
                       const char *file_path, client_line_handler *handler, void *context);

/* PUT the bytes of `source` (size -1 = unknown: sent chunked). *reply as client_call. */
int client_upload(const char *path, FILE *source, long long size, json_t **reply);
/* The same with another method (POST /v1/templates/{name}/import). */
int client_send_file(const char *method, const char *path, FILE *source, long long size,
                     json_t **reply);
/* GET a raw body into `sink`. A failed write to the sink is reported and gives EXIT_FAILED. */
int client_download(const char *path, FILE *sink, const char *sink_name);

#endif
