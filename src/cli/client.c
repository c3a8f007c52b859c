#include "cli/client.h"

#include <curl/curl.h>
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "cli/output.h"
#include "common/version.h"

#define USER_AGENT "cellbox/" CELLBOX_VERSION

static CURL *connection;    /* one handle for the whole run: follow-up requests reuse its socket */
static char *base;          /* "http://host:port[/prefix]", no trailing '/' */
static char *authorization; /* "Authorization: token <t>", or NULL */

/* One request's state while libcurl runs it. */
typedef struct transfer {
    long status; /* HTTP status, once the answer's head has arrived */
    char *body;  /* JSON answers, error bodies, a partial NDJSON line */
    size_t body_length;
    size_t body_capacity;
    client_line_handler *handler; /* streams: called per line */
    void *context;
    FILE *sink;                  /* downloads: where a successful body goes */
    int sink_errno;              /* why writing to the sink failed; 0 if it did not */
    char error[CURL_ERROR_SIZE]; /* libcurl's words for a failed transfer */
} transfer;

void client_open(const char *base_url, const char *token)
{
    curl_global_init(CURL_GLOBAL_DEFAULT);
    connection = curl_easy_init();
    if (!connection) {
        output_error("cannot start libcurl (out of memory?)");
        exit(EXIT_FAILED);
    }
    base = strdup(base_url);
    size_t length = strlen(base);
    while (length > 0 && base[length - 1] == '/')
        base[--length] = '\0';
    if (token && *token && asprintf(&authorization, "Authorization: token %s", token) < 0)
        authorization = NULL;
}

void client_close(void)
{
    curl_easy_cleanup(connection);
    curl_global_cleanup();
    free(base);
    free(authorization);
}

const char *client_base_url(void)
{
    return base;
}

const char *client_authorization_header(void)
{
    return authorization;
}

char *client_escape(const char *text)
{
    char *escaped = curl_easy_escape(connection, text, 0);
    char *copy = escaped ? strdup(escaped) : NULL;
    curl_free(escaped);
    if (!copy) {
        output_error("out of memory escaping '%s'", text);
        exit(EXIT_FAILED);
    }
    return copy;
}

char *client_sandbox_path(const char *id, const char *rest)
{
    char *escaped = client_escape(id), *path;
    if (asprintf(&path, "/v1/sandboxes/%s%s", escaped, rest) < 0) {
        output_error("out of memory building a path for sandbox %s", id);
        exit(EXIT_FAILED);
    }
    free(escaped);
    return path;
}

static void keep_bytes(transfer *t, const char *data, size_t length)
{
    if (t->body_length + length + 1 > t->body_capacity) {
        size_t capacity = t->body_capacity ? t->body_capacity : 4096;
        while (capacity < t->body_length + length + 1)
            capacity *= 2;
        char *grown = realloc(t->body, capacity);
        if (!grown) {
            output_error("out of memory reading cellboxd's answer (%zu bytes)", capacity);
            exit(EXIT_FAILED);
        }
        t->body = grown;
        t->body_capacity = capacity;
    }
    memcpy(t->body + t->body_length, data, length);
    t->body_length += length;
    t->body[t->body_length] = '\0';
}

static void deliver_line(transfer *t, const char *line, size_t length)
{
    while (length > 0 && (line[length - 1] == '\r' || line[length - 1] == ' '))
        length--;
    if (length == 0)
        return;
    if (output_json) {
        /* Scripts get each event the moment it comes, exactly as the daemon sent it. */
        fwrite(line, 1, length, stdout);
        fputc('\n', stdout);
        fflush(stdout);
    }
    json_t *event = json_loadb(line, length, 0, NULL);
    t->handler(event, line, length, t->context);
    json_decref(event);
}

/* Hands every complete line kept so far to the handler; a partial one waits for its end. */
static void deliver_lines(transfer *t)
{
    size_t start = 0;
    char *newline;
    while ((newline = memchr(t->body + start, '\n', t->body_length - start))) {
        deliver_line(t, t->body + start, (size_t)(newline - (t->body + start)));
        start = (size_t)(newline - t->body) + 1;
    }
    memmove(t->body, t->body + start, t->body_length - start);
    t->body_length -= start;
    if (t->body)
        t->body[t->body_length] = '\0';
}

static size_t receive(char *data, size_t size, size_t count, void *userdata)
{
    transfer *t = userdata;
    size_t length = size * count;
    if (!t->status)
        curl_easy_getinfo(connection, CURLINFO_RESPONSE_CODE, &t->status);
    bool success = t->status >= 200 && t->status < 300;
    if (success && t->sink) {
        if (fwrite(data, 1, length, t->sink) != length) {
            t->sink_errno = errno ? errno : EIO;
            return 0; /* libcurl stops the transfer with CURLE_WRITE_ERROR */
        }
        return length;
    }
    keep_bytes(t, data, length);
    if (success && t->handler)
        deliver_lines(t);
    return length;
}

static struct curl_slist *prepare(transfer *t, const char *method, const char *path, bool json_body)
{
    char *url;
    if (asprintf(&url, "%s%s", base, path) < 0) {
        output_error("out of memory building the URL for %s", path);
        exit(EXIT_FAILED);
    }
    curl_easy_reset(connection);
    curl_easy_setopt(connection, CURLOPT_URL, url);
    free(url);
    curl_easy_setopt(connection, CURLOPT_CUSTOMREQUEST, method);
    curl_easy_setopt(connection, CURLOPT_USERAGENT, USER_AGENT);
    curl_easy_setopt(connection, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(connection, CURLOPT_CONNECTTIMEOUT, 10L);
    curl_easy_setopt(connection, CURLOPT_ERRORBUFFER, t->error);
    curl_easy_setopt(connection, CURLOPT_WRITEFUNCTION, receive);
    curl_easy_setopt(connection, CURLOPT_WRITEDATA, t);
    struct curl_slist *headers = NULL;
    if (authorization)
        headers = curl_slist_append(headers, authorization);
    if (json_body)
        headers = curl_slist_append(headers, "Content-Type: application/json");
    /* No "Expect: 100-continue" round trip before an upload's body. */
    headers = curl_slist_append(headers, "Expect:");
    curl_easy_setopt(connection, CURLOPT_HTTPHEADER, headers);
    return headers;
}

static int report_unreachable(transfer *t, CURLcode code)
{
    const char *why = t->error[0] ? t->error : curl_easy_strerror(code);
    if (!t->status)
        output_error("cannot reach cellboxd at %s: %s; start it with `make run` or set CELLBOX_URL",
                     base, why);
    else
        output_error("the connection to cellboxd at %s broke: %s; is the daemon still running?",
                     base, why);
    return EXIT_UNREACHABLE;
}

/* Runs the prepared request; EXIT_OK once an answer (any status) has arrived in full. */
static int perform(transfer *t, struct curl_slist *headers, const char *sink_name)
{
    CURLcode code = curl_easy_perform(connection);
    curl_slist_free_all(headers);
    curl_easy_getinfo(connection, CURLINFO_RESPONSE_CODE, &t->status);
    if (code == CURLE_WRITE_ERROR && t->sink_errno) {
        output_error("cannot write to %s: %s", sink_name, strerror(t->sink_errno));
        return EXIT_FAILED;
    }
    if (code != CURLE_OK)
        return report_unreachable(t, code);
    return EXIT_OK;
}

static json_t *decode_body(transfer *t)
{
    if (!t->body_length)
        return NULL;
    return json_loadb(t->body, t->body_length, 0, NULL);
}

int client_report_refusal(long status, json_t *reply)
{
    const char *message = json_string_value(json_object_get(reply, "message"));
    if (output_json && reply)
        output_print_json(reply);
    if (message && *message)
        output_error("%s (HTTP %ld)", message, status);
    else
        output_error("cellboxd answered HTTP %ld without saying why", status);
    if (status == 401)
        output_error("set CELLBOX_TOKEN or pass --token (make run prints it; it is kept in "
                     ".cellbox/token)");
    else if (status == 404 && message && strstr(message, "context "))
        output_error("no such context: `cellbox info ID` lists a sandbox's contexts");
    else if (status == 404 && (!message || strstr(message, "andbox")))
        output_error("no such sandbox: see `cellbox ls`");
    else if (status == 409 && message && strstr(message, "is dead"))
        output_error("bring it back with `cellbox restart ID`, or remove it with `cellbox rm ID`");
    else if (status == 409 && message && strstr(message, "paused"))
        output_error("resume it with `cellbox resume ID`");
    return EXIT_REFUSED;
}

int client_call_status(const char *method, const char *path, json_t *body, long *status,
                       json_t **reply)
{
    transfer t = {0};
    char *text = body ? json_dumps(body, JSON_COMPACT) : NULL;
    struct curl_slist *headers = prepare(&t, method, path, text != NULL);
    if (text)
        curl_easy_setopt(connection, CURLOPT_POSTFIELDS, text);
    else if (!strcmp(method, "POST"))
        curl_easy_setopt(connection, CURLOPT_POSTFIELDS, ""); /* "Content-Length: 0", no body */
    int result = perform(&t, headers, NULL);
    free(text);
    *status = t.status;
    *reply = result == EXIT_OK ? decode_body(&t) : NULL;
    /* An error page that is not JSON still says something: keep its words as the message. */
    if (result == EXIT_OK && !*reply && t.status >= 300 && t.body_length)
        *reply = json_pack("{s:s%}", "message", t.body, t.body_length > 300 ? 300 : t.body_length);
    free(t.body);
    return result;
}

int client_call(const char *method, const char *path, json_t *body, json_t **reply)
{
    long status;
    int result = client_call_status(method, path, body, &status, reply);
    if (result != EXIT_OK)
        return result;
    if (status >= 300) {
        client_report_refusal(status, *reply);
        json_decref(*reply);
        *reply = NULL;
        return EXIT_REFUSED;
    }
    return EXIT_OK;
}

int client_get_list(const char *path, json_t **list)
{
    *list = NULL;
    int status = client_call("GET", path, NULL, list);
    if (status == EXIT_OK && output_json) {
        output_print_json(*list);
        json_decref(*list);
        *list = NULL;
    } else if (status == EXIT_OK && !*list) {
        *list = json_array(); /* an answer without a body shows as an empty table */
    }
    return status;
}

int client_delete_each(char **names, int count, client_path_of *path_of, const void *context)
{
    int worst = EXIT_OK;
    for (int i = 0; i < count; i++) {
        char *path = path_of(names[i], context);
        json_t *reply = NULL;
        int status = path ? client_call("DELETE", path, NULL, &reply) : EXIT_FAILED;
        free(path);
        json_decref(reply);
        if (status == EXIT_OK && !output_json)
            printf("removed %s\n", names[i]);
        if (status != EXIT_OK)
            worst = status;
        if (status == EXIT_UNREACHABLE)
            break; /* the others would fail the same way */
    }
    return worst;
}

/* After a transfer that reached the daemon: an HTTP error is reported, else EXIT_OK. */
static int refusal_or_ok(transfer *t)
{
    if (t->status < 300)
        return EXIT_OK;
    json_t *reply = decode_body(t);
    if (!reply && t->body_length)
        reply =
            json_pack("{s:s%}", "message", t->body, t->body_length > 300 ? 300 : t->body_length);
    client_report_refusal(t->status, reply);
    json_decref(reply);
    return EXIT_REFUSED;
}

int client_stream(const char *path, json_t *body, client_line_handler *handler, void *context)
{
    transfer t = {.handler = handler, .context = context};
    char *text = json_dumps(body, JSON_COMPACT);
    struct curl_slist *headers = prepare(&t, "POST", path, true);
    curl_easy_setopt(connection, CURLOPT_POSTFIELDS, text);
    int result = perform(&t, headers, NULL);
    free(text);
    if (result == EXIT_OK)
        result = refusal_or_ok(&t);
    if (result == EXIT_OK && t.body_length) /* a last line without its newline */
        deliver_line(&t, t.body, t.body_length);
    free(t.body);
    return result;
}

int client_stream_form(const char *path, json_t *fields, const char *file_field,
                       const char *file_path, client_line_handler *handler, void *context)
{
    transfer t = {.handler = handler, .context = context};
    struct curl_slist *headers = prepare(&t, "POST", path, false);
    curl_mime *form = curl_mime_init(connection);
    const char *name;
    json_t *value;
    json_object_foreach(fields, name, value) {
        curl_mimepart *part = curl_mime_addpart(form);
        char *text = json_is_string(value) ? strdup(json_string_value(value))
                                           : json_dumps(value, JSON_COMPACT | JSON_ENCODE_ANY);
        curl_mime_name(part, name);
        curl_mime_data(part, text ? text : "", CURL_ZERO_TERMINATED);
        free(text);
    }
    if (file_path) {
        curl_mimepart *part = curl_mime_addpart(form);
        curl_mime_name(part, file_field);
        curl_mime_filedata(part, file_path);
        curl_mime_type(part, "application/x-tar");
    }
    curl_easy_setopt(connection, CURLOPT_MIMEPOST, form);
    int result = perform(&t, headers, NULL);
    curl_mime_free(form);
    if (result == EXIT_OK)
        result = refusal_or_ok(&t);
    if (result == EXIT_OK && t.body_length)
        deliver_line(&t, t.body, t.body_length);
    free(t.body);
    return result;
}

int client_upload(const char *path, FILE *source, long long size, json_t **reply)
{
    return client_send_file("PUT", path, source, size, reply);
}

int client_send_file(const char *method, const char *path, FILE *source, long long size,
                     json_t **reply)
{
    transfer t = {0};
    struct curl_slist *headers = prepare(&t, method, path, false);
    headers = curl_slist_append(headers, "Content-Type: application/octet-stream");
    curl_easy_setopt(connection, CURLOPT_HTTPHEADER, headers);
    curl_easy_setopt(connection, CURLOPT_UPLOAD, 1L);
    curl_easy_setopt(connection, CURLOPT_READDATA, source);
    if (size >= 0)
        curl_easy_setopt(connection, CURLOPT_INFILESIZE_LARGE, (curl_off_t)size);
    int result = perform(&t, headers, NULL);
    if (result == EXIT_OK)
        result = refusal_or_ok(&t);
    *reply = result == EXIT_OK ? decode_body(&t) : NULL;
    free(t.body);
    return result;
}

int client_download(const char *path, FILE *sink, const char *sink_name)
{
    transfer t = {.sink = sink};
    struct curl_slist *headers = prepare(&t, "GET", path, false);
    int result = perform(&t, headers, sink_name);
    if (result == EXIT_OK)
        result = refusal_or_ok(&t);
    free(t.body);
    return result;
}
