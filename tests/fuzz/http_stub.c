#include "http_stub.h"
#include "http/server_connection.h"

#include <microhttpd.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "api/channels.h"
#include "api/jupyter.h"
#include "api/routes.h"
#include "api/v1.h"
#include "common/buffer.h"
#include "common/log.h"
#include "common/loop.h"
#include "common/text.h"
#include "kernel/kernelspec.h"
#include "model/manager.h"
#include "model/stateless_run.h"
#include "sandbox/limits.h"

#define MAX_PAIRS 32

typedef struct pair {
    char *name, *value;
} pair;

struct http_stream {
    http_request *request;
    bool ended;
    http_stream_closed on_closed;
    void *arg;
};

struct http_request {
    char *method, *path;
    pair headers[MAX_PAIRS], query[MAX_PAIRS], response_headers[MAX_PAIRS];
    int header_count, query_count, response_header_count;
    buffer body;
    bool responded;
    int status;
    http_stream *stream;
    const http_body_receiver *receiver;
    void *receiver_arg;
    bool body_complete;
};

/* An answer that cannot be encoded is a bug the real server survives (it logs it and answers
   500): here it stops the fuzzer, with the input that made it. */
static char *encode_or_abort(const http_request *request, json_t *value)
{
    char *text = value ? json_dumps(value, JSON_COMPACT | JSON_ENCODE_ANY) : NULL;
    if (!text) {
        fprintf(stderr, "fuzz: an answer to %s %s cannot be encoded as JSON\n", request->method,
                request->path);
        abort();
    }
    return text;
}

/* ---- stand-ins for sandbox creation (linked with --wrap) ---- */

kernel *__wrap_manager_create(const char *spec_name, json_t *env, json_t *limits_json,
                              json_t *network, const rootfs_volumes *volumes,
                              failure_kind *failure, char *why, size_t why_size);
kernel *__wrap_manager_create(const char *spec_name, json_t *env, json_t *limits_json,
                              json_t *network, const rootfs_volumes *volumes,
                              failure_kind *failure, char *why, size_t why_size)
{
    (void)volumes;
    static const sandbox_limits defaults = {.memory_bytes = 1LL << 30,
                                            .pids = 256,
                                            .cpus = 1,
                                            .disk_bytes = 1LL << 30,
                                            .open_files = 1024,
                                            .timeout_seconds = 60,
                                            .output_bytes = 1 << 20};
    /* the daemon's default maxima: 0 (cpus, timeout) is unbounded */
    static const sandbox_limits maxima = {.memory_bytes = 8LL << 30, .pids = 4096, .cpus = 0,
                                          .disk_bytes = 16LL << 30, .open_files = 65536,
                                          .timeout_seconds = 0, .output_bytes = 256 << 20};
    sandbox_limits limits;
    if (limits_from_request(limits_json, network, env, &defaults, &maxima, false, &limits, failure,
                            why, why_size) < 0)
        return NULL;
    *failure = FAILURE_EXHAUSTED;
    snprintf(why, why_size, "fuzzing: no sandbox is started");
    return NULL;
}

stateless_run *__wrap_stateless_run_start(const stateless_run_plan *plan, stateless_run_done done,
                                          void *arg, failure_kind *failure, char *why,
                                          size_t why_size);
stateless_run *__wrap_stateless_run_start(const stateless_run_plan *plan, stateless_run_done done,
                                          void *arg, failure_kind *failure, char *why,
                                          size_t why_size)
{
    *failure = FAILURE_EXHAUSTED;
    snprintf(why, why_size, "fuzzing: no sandbox is started");
    return NULL;
}

const char *__wrap_manager_default_kernel(void);
const char *__wrap_manager_default_kernel(void)
{
    return "python3";
}

void stub_init(void)
{
    static bool done;
    if (done)
        return;
    done = true;
    log_set_level(LOG_ERROR);
    loop_init();
    kernelspec_init("", 0);
    char why[256];
    if (kernelspec_add_templates("data:json,csv:0", why, sizeof why) < 0)
        die("fuzz: %s", why);
    /* javascript, typescript, bash and the host's Debian kernels (IRkernel: a resource_dir) */
    if (kernelspec_add_languages("/usr/share/jupyter/kernels", "", why, sizeof why) < 0)
        die("fuzz: %s", why);
    channels_init(1 << 20);
    jupyter_init(&(jupyter_options){.list_kernels = true});
    v1_init();
}

/* ---- building a request ---- */

static char *copy_of(const char *text, size_t length)
{
    char *copy = strndup(text, length);
    if (!copy)
        die("out of memory");
    return copy;
}

static void add_pair(pair *pairs, int *count, char *name, char *value)
{
    if (*count == MAX_PAIRS) {
        free(name);
        free(value);
        return;
    }
    pairs[*count].name = name;
    pairs[(*count)++].value = value;
}

void stub_request_add_header(http_request *request, const char *name, const char *value)
{
    add_pair(request->headers, &request->header_count, copy_of(name, strlen(name)),
             copy_of(value, strlen(value)));
}

/* As libmicrohttpd: '+' is a space in a query argument, then %XX escapes are decoded. */
static char *decoded(const char *text, size_t length, bool plus_is_space)
{
    char *copy = copy_of(text, length);
    for (char *c = copy; plus_is_space && *c; c++)
        if (*c == '+')
            *c = ' ';
    MHD_http_unescape(copy);
    return copy;
}

static void parse_query(http_request *request, const char *query)
{
    while (*query) {
        size_t length = strcspn(query, "&");
        const char *equals = memchr(query, '=', length);
        size_t name_length = equals ? (size_t)(equals - query) : length;
        add_pair(request->query, &request->query_count, decoded(query, name_length, true),
                 equals ? decoded(equals + 1, length - name_length - 1, true) : NULL);
        query += length + (query[length] == '&');
    }
}

/* One line of `text` (up to "\r\n" or "\n"), advanced past it; NULL at the end. */
static const char *next_line(const char **text, const char *end, size_t *length)
{
    const char *line = *text;
    if (line >= end)
        return NULL;
    const char *newline = memchr(line, '\n', (size_t)(end - line));
    const char *line_end = newline ? newline : end;
    *text = newline ? newline + 1 : end;
    *length = (size_t)(line_end - line) - (line_end > line && line_end[-1] == '\r');
    return line;
}

static void parse_headers(http_request *request, const char **at, const char *end)
{
    size_t length;
    for (const char *line; (line = next_line(at, end, &length)) && length > 0;) {
        const char *colon = memchr(line, ':', length);
        if (!colon)
            continue;
        const char *value = colon + 1;
        while (value < line + length && (*value == ' ' || *value == '\t'))
            value++;
        add_pair(request->headers, &request->header_count, copy_of(line, (size_t)(colon - line)),
                 copy_of(value, (size_t)(line + length - value)));
    }
}

http_request *stub_request_parse(const unsigned char *data, size_t size)
{
    const char *at = (const char *)data, *end = at + size;
    size_t length;
    const char *line = next_line(&at, end, &length);
    const char *space = line ? memchr(line, ' ', length) : NULL;
    if (!space || space == line || memchr(line, '\0', length))
        return NULL;
    const char *target = space + 1,
               *target_end = memchr(target, ' ', (size_t)(line + length - target));
    if (!target_end)
        target_end = line + length;
    if (target == target_end || *target != '/')
        return NULL;
    http_request *request = calloc(1, sizeof *request);
    if (!request)
        die("out of memory");
    request->method = copy_of(line, (size_t)(space - line));
    const char *question = memchr(target, '?', (size_t)(target_end - target));
    request->path = decoded(target, (size_t)((question ? question : target_end) - target), false);
    if (question) {
        char *query = copy_of(question + 1, (size_t)(target_end - question - 1));
        parse_query(request, query);
        free(query);
    }
    parse_headers(request, &at, end);
    buffer_append(&request->body, at, (size_t)(end - at));
    return request;
}

/* ---- running it ---- */

void stub_request_run(http_request *request)
{
    if (strcmp(request->method, "OPTIONS") == 0) {
        http_respond(request, 204, NULL, "", 0);
        return;
    }
    routes_dispatch(request);
    if (request->receiver && !request->responded) {
        if (request->receiver->on_data(request->receiver_arg, buffer_head(&request->body),
                                       buffer_size(&request->body)) == 0) {
            request->body_complete = true;
            if (!request->responded)
                request->receiver->on_end(request, request->receiver_arg);
        }
    }
    if (!request->responded) {
        fprintf(stderr, "fuzz: no response was produced for %s %s\n", request->method,
                request->path);
        abort();
    }
}

static void free_pairs(pair *pairs, int count)
{
    for (int i = 0; i < count; i++) {
        free(pairs[i].name);
        free(pairs[i].value);
    }
}

void stub_request_finish(http_request *request)
{
    if (request->receiver && !request->body_complete && request->receiver->on_abort)
        request->receiver->on_abort(request->receiver_arg);
    if (request->stream) {
        http_stream *stream = request->stream;
        if (stream->on_closed)
            stream->on_closed(stream->arg, stream->ended);
        free(stream);
    }
    loop_run_deferred();
    free_pairs(request->headers, request->header_count);
    free_pairs(request->query, request->query_count);
    free_pairs(request->response_headers, request->response_header_count);
    buffer_free(&request->body);
    free(request->method);
    free(request->path);
    free(request);
}

int stub_response_status(const http_request *request)
{
    return request->status;
}

const char *stub_response_header(const http_request *request, const char *name)
{
    for (int i = 0; i < request->response_header_count; i++)
        if (strcasecmp(request->response_headers[i].name, name) == 0)
            return request->response_headers[i].value;
    return NULL;
}

/* ---- http/server.h ---- */

const char *http_method(const http_request *request)
{
    return request->method;
}
const char *http_path(const http_request *request)
{
    return request->path;
}
bool http_method_is(const http_request *request, const char *method)
{
    return strcmp(request->method, method) == 0;
}
const char *http_base_url(void)
{
    return "/";
}

static const char *lookup(const pair *pairs, int count, const char *name)
{
    for (int i = 0; i < count; i++)
        if (strcasecmp(pairs[i].name, name) == 0)
            return pairs[i].value ? pairs[i].value : "";
    return NULL;
}

/* No libmicrohttpd connection here: http/form.c then reads no form (the route answers 400). */
struct MHD_Connection *http_request_connection(http_request *request)
{
    return NULL;
}

const char *http_header(const http_request *request, const char *name)
{
    return lookup(request->headers, request->header_count, name);
}

const char *http_query(const http_request *request, const char *name)
{
    for (int i = 0; i < request->query_count; i++) /* query names are case-sensitive */
        if (strcmp(request->query[i].name, name) == 0)
            return request->query[i].value;
    return NULL;
}

void http_query_each(const http_request *request, const char *prefix, json_t *out)
{
    size_t n = strlen(prefix);
    for (int i = 0; i < request->query_count; i++) {
        const char *key = request->query[i].name, *value = request->query[i].value;
        if (strncmp(key, prefix, n) == 0 && key[n])
            json_object_set_new(out, key + n, json_string(value ? value : ""));
    }
}

const char *http_body(const http_request *request, size_t *length)
{
    *length = buffer_size(&request->body);
    return *length ? buffer_head(&request->body) : "";
}

bool http_is_websocket_upgrade(const http_request *request)
{
    const char *upgrade = http_header(request, "Upgrade");
    return strcmp(request->method, "GET") == 0 && upgrade && strcasestr(upgrade, "websocket");
}

void http_add_response_header(http_request *request, const char *name, const char *value)
{
    add_pair(request->response_headers, &request->response_header_count,
             copy_of(name, strlen(name)), copy_of(value, strlen(value)));
}

static void mark_responded(http_request *request, int status)
{
    if (request->responded) {
        fprintf(stderr, "fuzz: a second response (%d after %d) to %s %s\n", status, request->status,
                request->method, request->path);
        abort();
    }
    request->responded = true;
    request->status = status;
}

void http_respond(http_request *request, int status, const char *content_type, const void *body,
                  size_t length)
{
    mark_responded(request, status);
}

void http_respond_json(http_request *request, int status, json_t *body)
{
    char *text = encode_or_abort(request, body);
    json_decref(body);
    mark_responded(request, text ? status : 500);
    free(text);
}

void http_respond_method_not_allowed(http_request *request, const char *allow)
{
    http_respond_error(request, 405, "%s is not allowed on %s: use %s", request->method,
                       request->path, allow);
}

void http_respond_error(http_request *request, int status, const char *fmt, ...)
{
    char message[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(message, sizeof message, fmt, ap);
    va_end(ap);
    http_respond_json(request, status,
                      json_pack("{s:s, s:o}", "reason", "Error", "message", text_json_string(message)));
}

http_stream *http_respond_stream(http_request *request, int status, const char *content_type,
                                 http_stream_closed on_closed, void *arg)
{
    mark_responded(request, status);
    http_stream *stream = calloc(1, sizeof *stream);
    if (!stream)
        die("out of memory");
    stream->request = request;
    stream->on_closed = on_closed;
    stream->arg = arg;
    request->stream = stream;
    return stream;
}

void http_stream_write(http_stream *stream, const void *data, size_t length) {}

void http_stream_write_line(http_stream *stream, json_t *value)
{
    free(encode_or_abort(stream->request, value));
    json_decref(value);
}

size_t http_stream_queued(const http_stream *stream)
{
    return 0;
}
void http_stream_on_drained(http_stream *stream, void (*on_drained)(void *arg)) {}
void http_stream_end(http_stream *stream)
{
    stream->ended = true;
}

void http_stream_finish_json(http_stream *stream, json_t *value)
{
    http_stream_write_line(stream, value);
    http_stream_end(stream);
}

void http_respond_fd(http_request *request, int status, const char *content_type, int fd,
                     size_t length)
{
    close(fd);
    mark_responded(request, status);
}

void http_receive_body(http_request *request, const http_body_receiver *receiver, void *arg)
{
    request->receiver = receiver;
    request->receiver_arg = arg;
}

bool http_responded(const http_request *request)
{
    return request->responded;
}

/* As the server decides it: the routes that take their body as it arrives get it through
   their receiver (stub_request_run hands it over whole). */
/* The fuzzer's requests carry no token check: as if admitted with the daemon's token. */
bool http_admitted_by_token(const http_request *request) { return true; }

bool http_body_is_streamed(const http_request *request)
{
    return routes_streams_body(request);
}

/* No socket to take over: the handshake is refused as server.c refuses a bad one. */
void http_upgrade_websocket(http_request *request, const char *subprotocol, size_t max_message,
                            const websocket_callbacks *callbacks, http_websocket_open on_open,
                            void *arg)
{
    on_open(arg, NULL);
    http_respond_error(request, 400, "fuzzing: no WebSocket is opened");
}

void http_each_header(const http_request *request,
                      void (*visit)(void *arg, const char *name, const char *value), void *arg)
{
    for (int i = 0; i < request->header_count; i++)
        visit(arg, request->headers[i].name, request->headers[i].value);
}

void http_each_query_argument(const http_request *request,
                              void (*visit)(void *arg, const char *name, const char *value),
                              void *arg)
{
    for (int i = 0; i < request->query_count; i++)
        visit(arg, request->query[i].name, request->query[i].value);
}

/* E2B's sandbox hosts are not routed here (no domain is set: ports_init is not called), so no
   request waits for an inner server; a call would be a routing bug. */
void http_respond_later(http_request *request)
{
    fprintf(stderr, "fuzz: %s %s was proxied\n", request->method, request->path);
    abort();
}

void http_upgrade_raw(http_request *request, http_raw_upgrade_open on_open, void *arg)
{
    on_open(arg, -1, NULL, 0, NULL);
    http_respond_error(request, 400, "fuzzing: no socket is handed over");
}

void http_upgraded_close(void *handle) {}
void http_pause_body(http_request *request) {}
void http_resume_body(http_request *request) {}
